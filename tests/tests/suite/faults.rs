//! Fault injection in the participants (`faults.v1`): each fault does what
//! the contract says over the real gRPC servers and real embedded stores —
//! a lost reply is applied and replays on retry, a transient error and an
//! injected refusal apply nothing, compensations are never refused, the
//! sequence is deterministic for a seed, bad settings are refused naming the
//! field, and both participants advertise the admin service.

use participant_kit::faults::{
    FaultSettings, Faults, LOST_REPLY_MESSAGE, REFUSAL_MESSAGE, TRANSIENT_MESSAGE,
};
use saga_proto::faults::v1 as pb;
use saga_proto::faults::v1::fault_service_client::FaultServiceClient;
use saga_proto::inventory::v1 as inventory;
use saga_proto::inventory::v1::inventory_service_client::InventoryServiceClient;
use saga_proto::payment::v1 as payment;
use saga_proto::payment::v1::payment_service_client::PaymentServiceClient;
use saga_tests::{Service, balance, channel, stock};
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tonic::Code;
use tonic::transport::Channel;

/// One participant served with a fault injector, on an ephemeral port with
/// its embedded store in its own temp dir.
struct Participant {
    addr: SocketAddr,
    running: saga_tests::Running,
    _dir: tempfile::TempDir,
}

impl Participant {
    async fn start(service: Service, settings: FaultSettings) -> Participant {
        let dir = tempfile::tempdir().expect("tempdir");
        let running = saga_tests::ParticipantHarness::new(service, dir.path())
            .faults(Arc::new(Faults::new(settings).expect("valid settings")))
            .start()
            .await;
        Participant {
            addr: running.addr,
            running,
            _dir: dir,
        }
    }

    async fn faults(&self) -> FaultServiceClient<Channel> {
        FaultServiceClient::new(channel(self.addr).await)
    }

    async fn payments(&self) -> PaymentServiceClient<Channel> {
        PaymentServiceClient::new(channel(self.addr).await)
    }

    async fn inventory(&self) -> InventoryServiceClient<Channel> {
        InventoryServiceClient::new(channel(self.addr).await)
    }

    async fn set(&self, settings: FaultSettings) -> pb::FaultStatus {
        self.faults()
            .await
            .set_faults(pb::FaultSettings::from(settings))
            .await
            .expect("set faults")
            .into_inner()
    }

    async fn status(&self) -> pb::FaultStatus {
        self.faults()
            .await
            .get_faults(pb::GetFaultsRequest {})
            .await
            .expect("get faults")
            .into_inner()
    }

    async fn stop(self) {
        self.running.stop().await;
    }
}

fn settings(transient: f64, drop_reply: f64, refusal: f64, seed: u64) -> FaultSettings {
    FaultSettings {
        transient_error_rate: transient,
        added_latency_ms: 0,
        drop_reply_rate: drop_reply,
        refusal_rate: refusal,
        seed,
    }
}

fn off() -> FaultSettings {
    FaultSettings::disabled()
}

fn charge(request_id: &str, customer: &str, cents: i64) -> payment::ChargeRequest {
    payment::ChargeRequest {
        request_id: request_id.into(),
        customer_id: customer.into(),
        amount_cents: cents,
    }
}

fn refund(request_id: &str, customer: &str, cents: i64) -> payment::RefundRequest {
    payment::RefundRequest {
        request_id: request_id.into(),
        customer_id: customer.into(),
        amount_cents: cents,
    }
}

fn lines(product: &str, quantity: i64) -> Vec<inventory::Line> {
    vec![inventory::Line {
        product_id: product.into(),
        quantity,
    }]
}

async fn deposit(p: &Participant, customer: &str, cents: i64) {
    p.payments()
        .await
        .deposit(payment::DepositRequest {
            request_id: format!("deposit-{customer}"),
            customer_id: customer.into(),
            amount_cents: cents,
        })
        .await
        .expect("deposit is never faulted");
}

async fn add_stock(p: &Participant, product: &str, units: i64) {
    p.inventory()
        .await
        .add_stock(inventory::AddStockRequest {
            request_id: format!("stock-{product}"),
            product_id: product.into(),
            quantity: units,
        })
        .await
        .expect("add stock is never faulted");
}

fn assert_status(result: Result<impl std::fmt::Debug, tonic::Status>, code: Code, message: &str) {
    let status = result.expect_err("an injected fault");
    assert_eq!(status.code(), code, "{status:?}");
    assert_eq!(status.message(), message);
}

/// Request ids of the operations recorded for `customer`.
async fn recorded(p: &Participant, customer: &str) -> Vec<String> {
    p.payments()
        .await
        .get_account(payment::GetAccountRequest {
            customer_id: customer.into(),
            operation_limit: 100,
        })
        .await
        .expect("get account is never faulted")
        .into_inner()
        .recent_operations
        .into_iter()
        .map(|o| o.request_id)
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lost_reply_is_applied_and_a_retry_replays_it() {
    let pay = Participant::start(Service::Payment, settings(0.0, 1.0, 0.0, 1)).await;
    deposit(&pay, "alice", 1_000).await;
    let mut client = pay.payments().await;

    let lost = client.charge(charge("c-1", "alice", 300)).await;
    assert_status(lost, Code::Unavailable, LOST_REPLY_MESSAGE);
    assert_eq!(
        balance(pay.addr, "alice").await,
        700,
        "the charge IS applied"
    );
    assert_eq!(pay.status().await.dropped_replies, 1);

    pay.set(off()).await;
    let retry = client
        .charge(charge("c-1", "alice", 300))
        .await
        .expect("retry")
        .into_inner();
    assert!(retry.replayed, "the retry replays the recorded charge");
    assert_eq!(retry.balance_cents, 700);
    assert_eq!(balance(pay.addr, "alice").await, 700, "no second charge");

    // A lost compensation reply: refunded once, the retry replays UNDONE.
    pay.set(settings(0.0, 1.0, 0.0, 1)).await;
    let lost = client.refund(refund("c-1", "alice", 300)).await;
    assert_status(lost, Code::Unavailable, LOST_REPLY_MESSAGE);
    assert_eq!(balance(pay.addr, "alice").await, 1_000);
    pay.set(off()).await;
    let retry = client
        .refund(refund("c-1", "alice", 300))
        .await
        .expect("retry")
        .into_inner();
    assert!(retry.replayed);
    assert_eq!(
        retry.effect(),
        saga_proto::participant::v1::CompensationEffect::Undone
    );
    assert_eq!(balance(pay.addr, "alice").await, 1_000, "refunded once");
    assert_eq!(pay.status().await.dropped_replies, 2);
    pay.stop().await;

    let inv = Participant::start(Service::Inventory, settings(0.0, 1.0, 0.0, 1)).await;
    add_stock(&inv, "sku", 10).await;
    let mut client = inv.inventory().await;
    let deduct = || inventory::DeductRequest {
        request_id: "d-1".into(),
        lines: lines("sku", 4),
    };
    assert_status(
        client.deduct(deduct()).await,
        Code::Unavailable,
        LOST_REPLY_MESSAGE,
    );
    assert_eq!(stock(inv.addr, "sku").await, 6, "the deduct IS applied");
    inv.set(off()).await;
    let retry = client.deduct(deduct()).await.expect("retry").into_inner();
    assert!(retry.replayed);
    assert_eq!(stock(inv.addr, "sku").await, 6, "no second deduct");
    inv.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_transient_error_applies_nothing() {
    let pay = Participant::start(Service::Payment, settings(1.0, 0.0, 0.0, 1)).await;
    deposit(&pay, "alice", 1_000).await;
    let mut client = pay.payments().await;
    assert_status(
        client.charge(charge("c-1", "alice", 300)).await,
        Code::Unavailable,
        TRANSIENT_MESSAGE,
    );
    assert_status(
        client.refund(refund("r-1", "alice", 300)).await,
        Code::Unavailable,
        TRANSIENT_MESSAGE,
    );
    assert_eq!(balance(pay.addr, "alice").await, 1_000);
    let ids = recorded(&pay, "alice").await;
    assert_eq!(ids, vec!["deposit-alice".to_owned()], "nothing recorded");
    assert_eq!(pay.status().await.transient_errors, 2);

    pay.set(off()).await;
    let first = client
        .charge(charge("c-1", "alice", 300))
        .await
        .expect("charge")
        .into_inner();
    assert!(!first.replayed, "the failed attempt left no record");
    assert_eq!(first.balance_cents, 700);
    pay.stop().await;

    let inv = Participant::start(Service::Inventory, settings(1.0, 0.0, 0.0, 1)).await;
    add_stock(&inv, "sku", 10).await;
    let mut client = inv.inventory().await;
    let deduct = inventory::DeductRequest {
        request_id: "d-1".into(),
        lines: lines("sku", 4),
    };
    assert_status(
        client.deduct(deduct.clone()).await,
        Code::Unavailable,
        TRANSIENT_MESSAGE,
    );
    assert_eq!(stock(inv.addr, "sku").await, 10);
    inv.set(off()).await;
    let first = client.deduct(deduct).await.expect("deduct").into_inner();
    assert!(!first.replayed);
    assert_eq!(stock(inv.addr, "sku").await, 6);
    inv.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn only_actions_are_refused() {
    let pay = Participant::start(Service::Payment, off()).await;
    deposit(&pay, "alice", 1_000).await;
    let mut client = pay.payments().await;
    client
        .charge(charge("c-ok", "alice", 300))
        .await
        .expect("charge");
    pay.set(settings(0.0, 0.0, 1.0, 1)).await;
    assert_status(
        client.charge(charge("c-2", "alice", 100)).await,
        Code::FailedPrecondition,
        REFUSAL_MESSAGE,
    );
    assert_eq!(balance(pay.addr, "alice").await, 700);
    let undone = client
        .refund(refund("c-ok", "alice", 300))
        .await
        .expect("a compensation is never refused")
        .into_inner();
    assert_eq!(
        undone.effect(),
        saga_proto::participant::v1::CompensationEffect::Undone
    );
    let null = client
        .refund(refund("c-2", "alice", 100))
        .await
        .expect("refund of the refused charge")
        .into_inner();
    assert_eq!(
        null.effect(),
        saga_proto::participant::v1::CompensationEffect::NothingToUndo,
        "the injected refusal is recorded like any refusal"
    );
    assert_eq!(balance(pay.addr, "alice").await, 1_000);
    deposit(&pay, "bob", 50).await;
    assert_eq!(pay.status().await.refusals, 1);
    pay.stop().await;

    let inv = Participant::start(Service::Inventory, off()).await;
    add_stock(&inv, "sku", 10).await;
    let mut client = inv.inventory().await;
    client
        .deduct(inventory::DeductRequest {
            request_id: "d-ok".into(),
            lines: lines("sku", 4),
        })
        .await
        .expect("deduct");
    inv.set(settings(0.0, 0.0, 1.0, 1)).await;
    assert_status(
        client
            .deduct(inventory::DeductRequest {
                request_id: "d-2".into(),
                lines: lines("sku", 1),
            })
            .await,
        Code::FailedPrecondition,
        REFUSAL_MESSAGE,
    );
    assert_eq!(stock(inv.addr, "sku").await, 6);
    let undone = client
        .restock(inventory::RestockRequest {
            request_id: "d-ok".into(),
            lines: lines("sku", 4),
        })
        .await
        .expect("a compensation is never refused")
        .into_inner();
    assert_eq!(
        undone.effect(),
        saga_proto::participant::v1::CompensationEffect::Undone
    );
    assert_eq!(stock(inv.addr, "sku").await, 10);
    add_stock(&inv, "other", 1).await;
    assert_eq!(inv.status().await.refusals, 1);
    inv.stop().await;
}

/// What one call saw.
fn outcome<T>(result: Result<T, tonic::Status>) -> &'static str {
    match result {
        Ok(_) => "ok",
        Err(s) if s.message() == TRANSIENT_MESSAGE => "transient",
        Err(s) if s.message() == REFUSAL_MESSAGE => "refused",
        Err(s) if s.message() == LOST_REPLY_MESSAGE => "lost",
        Err(s) => panic!("unexpected status {s:?}"),
    }
}

/// 200 calls (Charge and Refund alternating) with fresh request ids.
async fn run(p: &Participant, prefix: &str) -> Vec<&'static str> {
    let mut client = p.payments().await;
    let mut out = Vec::with_capacity(200);
    for i in 0..100 {
        let id = format!("{prefix}-{i}");
        out.push(outcome(client.charge(charge(&id, "alice", 1)).await));
        out.push(outcome(client.refund(refund(&id, "alice", 1)).await));
    }
    out
}

fn counters(s: &pb::FaultStatus) -> [u64; 4] {
    [
        s.transient_errors,
        s.dropped_replies,
        s.refusals,
        s.delayed_calls,
    ]
}

fn delta(a: [u64; 4], b: [u64; 4]) -> [u64; 4] {
    [b[0] - a[0], b[1] - a[1], b[2] - a[2], b[3] - a[3]]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_same_seed_and_calls_give_the_same_faults() {
    let chaos = settings(0.3, 0.3, 0.3, 42);
    let pay = Participant::start(Service::Payment, chaos).await;
    deposit(&pay, "alice", 1_000_000).await;
    let first = run(&pay, "a").await;
    let after_first = counters(&pay.status().await);
    for kind in ["ok", "transient", "refused", "lost"] {
        assert!(first.contains(&kind), "{kind} never happened: {first:?}");
    }
    assert_eq!(
        after_first[..3],
        [
            first.iter().filter(|o| **o == "transient").count() as u64,
            first.iter().filter(|o| **o == "lost").count() as u64,
            first.iter().filter(|o| **o == "refused").count() as u64,
        ],
        "the counters count what the callers saw"
    );

    // SetFaults with the same seed restarts the same sequence.
    pay.set(chaos).await;
    let second = run(&pay, "b").await;
    assert_eq!(first, second);
    let after_second = counters(&pay.status().await);
    assert_eq!(delta(after_first, after_second), after_first);

    // So does a fresh participant configured with it at start-up.
    let fresh = Participant::start(Service::Payment, chaos).await;
    deposit(&fresh, "alice", 1_000_000).await;
    assert_eq!(first, run(&fresh, "c").await);
    assert_eq!(counters(&fresh.status().await), after_first);

    // Another seed, another sequence.
    pay.set(settings(0.3, 0.3, 0.3, 43)).await;
    assert_ne!(first, run(&pay, "d").await);
    pay.stop().await;
    fresh.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_settings_are_refused_naming_the_field() {
    let inv = Participant::start(Service::Inventory, off()).await;
    let good = settings(0.1, 0.2, 0.3, 5);
    let set = inv.set(good).await;
    assert_eq!(set.settings, Some(pb::FaultSettings::from(good)));
    let mut client = inv.faults().await;
    for (bad, field) in [
        (settings(1.5, 0.0, 0.0, 1), "transient_error_rate"),
        (settings(0.0, f64::NAN, 0.0, 1), "drop_reply_rate"),
        (settings(0.0, 0.0, -0.5, 1), "refusal_rate"),
        (settings(0.0, f64::INFINITY, 0.0, 1), "drop_reply_rate"),
    ] {
        let status = client
            .set_faults(pb::FaultSettings::from(bad))
            .await
            .expect_err("refused");
        assert_eq!(status.code(), Code::InvalidArgument);
        assert!(
            status
                .message()
                .starts_with(&format!("{field}: must be within 0..=1")),
            "{}",
            status.message()
        );
    }
    assert_eq!(
        inv.status().await.settings,
        Some(pb::FaultSettings::from(good)),
        "settings unchanged"
    );
    inv.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn added_latency_delays_calls() {
    let pay = Participant::start(
        Service::Payment,
        FaultSettings {
            added_latency_ms: 50,
            ..off()
        },
    )
    .await;
    deposit(&pay, "alice", 1_000).await;
    assert_eq!(
        pay.status().await.delayed_calls,
        0,
        "deposits are not delayed"
    );
    // The delays are drawn from the seeded sequence, so they are known
    // exactly: each call's first (and, with every rate at zero, only) draw.
    use rand::{Rng, SeedableRng};
    let mut sequence = rand::rngs::StdRng::seed_from_u64(off().seed);
    let delays: Vec<u64> = (0..20)
        .map(|_| u64::from(sequence.random_range(0..=50u32)))
        .collect();
    let mut client = pay.payments().await;
    for (i, delay) in delays.iter().enumerate() {
        let start = Instant::now();
        client
            .charge(charge(&format!("c-{i}"), "alice", 1))
            .await
            .expect("a delayed charge still succeeds");
        let took = start.elapsed();
        assert!(
            took >= Duration::from_millis(*delay),
            "call {i} took {took:?}, its drawn delay is {delay} ms"
        );
    }
    let expected = delays.iter().filter(|d| **d > 0).count() as u64;
    assert!(expected > 15, "the sequence draws mostly non-zero delays");
    assert_eq!(pay.status().await.delayed_calls, expected);
    pay.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn both_participants_serve_and_advertise_the_fault_service() {
    // Through the plain `serve` the harness uses: faults off, API present.
    let dir = tempfile::tempdir().expect("tempdir");
    for (service, own) in [
        (Service::Payment, "payment.v1.PaymentService"),
        (Service::Inventory, "inventory.v1.InventoryService"),
    ] {
        let running = saga_tests::ParticipantHarness::new(service, dir.path())
            .start()
            .await;
        let mut expected = vec![
            "faults.v1.FaultService".to_owned(),
            "grpc.health.v1.Health".to_owned(),
            "participant.v1.OperationHistoryService".to_owned(),
            "participant.v1.SagaStepService".to_owned(),
            own.to_owned(),
        ];
        expected.sort();
        assert_eq!(
            saga_tests::reflection::listed_services(running.addr).await,
            expected
        );
        assert!(saga_tests::reflection::describes(running.addr, "faults.v1.FaultService").await);
        assert!(saga_tests::reflection::describes(running.addr, "faults.v1.FaultStatus").await);
        let status = FaultServiceClient::new(channel(running.addr).await)
            .get_faults(pb::GetFaultsRequest {})
            .await
            .expect("get faults")
            .into_inner();
        assert_eq!(
            status.settings,
            Some(pb::FaultSettings::from(FaultSettings::disabled()))
        );
        assert_eq!(counters(&status), [0; 4]);
        running.stop().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_injected_refusal_never_hides_a_charge_applied_by_an_earlier_attempt() {
    // The chaos soak's finding: a charge applied with its reply lost, then a
    // retry that draws an injected refusal. The refusal goes through the
    // barrier, so the retry replays "applied" instead of claiming nothing
    // was charged (which would make the orchestrator skip the refund).
    let pay = Participant::start(Service::Payment, off()).await;
    deposit(&pay, "alice", 1_000).await;
    let mut client = pay.payments().await;
    pay.set(settings(0.0, 1.0, 0.0, 1)).await;
    assert_status(
        client.charge(charge("lost-1", "alice", 300)).await,
        Code::Unavailable,
        LOST_REPLY_MESSAGE,
    );
    assert_eq!(
        balance(pay.addr, "alice").await,
        700,
        "applied despite the lost reply"
    );
    pay.set(settings(0.0, 0.0, 1.0, 1)).await;
    let retry = client
        .charge(charge("lost-1", "alice", 300))
        .await
        .expect("the retry replays the applied charge")
        .into_inner();
    assert!(retry.replayed);
    assert_eq!(retry.balance_cents, 700);
    pay.stop().await;
}
