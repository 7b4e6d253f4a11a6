//! Prometheus metrics scraped over HTTP and checked, one scenario per test:
//!
//! - a completed saga counts its start, its finish and each step's call;
//! - a refused charge cancels the saga with nothing to undo;
//! - a short deduct refunds the charge: one compensation;
//! - a repeated charge is applied once, then replayed;
//! - a refund before its charge is a null compensation and the late charge
//!   is refused;
//! - deposits and stock additions are counted;
//! - each step is timed in a histogram with buckets;
//! - each store reports its size, its commits and its checkpoints;
//! - the metrics are described (HELP text);
//! - saga calls refused for their token are counted per RPC, and are no
//!   operations;
//! - client API calls and console requests refused for the client token
//!   are counted per RPC, and store no saga.
//!
//! The recorder is process-wide (`service_kit::metrics::serve_metrics`),
//! so this binary installs it once and its tests take turns: each starts
//! its own stack, scrapes `GET /metrics` before and after its scenario, and
//! checks what changed in between — exactly, wherever the count is known.

use saga_proto::inventory::v1 as inventory;
use saga_proto::inventory::v1::inventory_service_client::InventoryServiceClient;
use saga_proto::participant::v1::CompensationEffect;
use saga_proto::payment::v1 as payment;
use saga_proto::payment::v1::payment_service_client::PaymentServiceClient;
use saga_proto::saga::v1 as saga;
use saga_tests::prometheus::{Scrape, scrape, scrape_until};
use saga_tests::{ParticipantHarness, Service, Stack};
use service_kit::auth::{Role, TokenAuth};
use std::net::SocketAddr;
use std::sync::OnceLock;
use tokio::sync::{Mutex, MutexGuard};
use tonic::Code;

/// A metric's samples: its name and the labels they must carry.
struct Series {
    name: &'static str,
    labels: Vec<(&'static str, &'static str)>,
}

/// The samples of `name` carrying `labels`.
fn series(name: &'static str, labels: &[(&'static str, &'static str)]) -> Series {
    Series {
        name,
        labels: labels.to_vec(),
    }
}

/// `participant_operations_total` of one kind and result.
fn op(kind: &'static str, result: &'static str) -> Series {
    series(
        "participant_operations_total",
        &[("kind", kind), ("result", result)],
    )
}

/// The calls of `rpc` the participants timed.
fn calls(rpc: &'static str) -> Series {
    series("participant_call_duration_seconds_count", &[("rpc", rpc)])
}

/// The exporter of this test binary, installed on first use.
fn exporter() -> SocketAddr {
    static EXPORTER: OnceLock<SocketAddr> = OnceLock::new();
    *EXPORTER.get_or_init(|| {
        let addr = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .expect("a free port");
        // From a thread outside any test's runtime: the exporter then
        // serves from a runtime of its own, which outlives every test.
        std::thread::spawn(move || service_kit::metrics::serve_metrics(addr))
            .join()
            .expect("the installing thread")
            .expect("install the Prometheus recorder");
        // What the binaries call after starting the exporter.
        participant_kit::metrics::describe();
        participant_kit::retention::describe();
        orchestrator::retention::describe();
        orchestrator::client_auth::describe();
        addr
    })
}

/// One test's turn at the process-wide recorder: its stack, and the scrape
/// taken before its scenario.
struct Turn {
    addr: SocketAddr,
    stack: Stack,
    before: Scrape,
    _turn: MutexGuard<'static, ()>,
}

impl Turn {
    /// Waits for the turn, starts a stack and scrapes.
    async fn take() -> Turn {
        static TURNS: Mutex<()> = Mutex::const_new(());
        let turn = TURNS.lock().await;
        let addr = exporter();
        let stack = Stack::start().await;
        let before = scrape(addr).await;
        Turn {
            addr,
            stack,
            before,
            _turn: turn,
        }
    }

    /// [`Turn::take`], with alice holding 100,000 cents, bob 100 and 10
    /// `sku-apple` in stock before the first scrape.
    async fn seeded() -> Turn {
        let mut turn = Turn::take().await;
        turn.stack.deposit("alice", 100_000).await;
        turn.stack.deposit("bob", 100).await;
        turn.stack.add_stock("sku-apple", 10).await;
        turn.before = scrape(turn.addr).await;
        turn
    }

    /// How much `series` grew since the first scrape, in `after`.
    fn grew(&self, after: &Scrape, series: &Series) -> f64 {
        let (name, labels) = (series.name, &series.labels);
        after.sum(name, labels) - self.before.sum(name, labels)
    }

    /// Scrapes until every series has grown by at least its count and no
    /// saga is in flight (what a reply was sent before may be recorded a
    /// little later), then checks each grew by exactly its count.
    async fn counted(&self, expected: &[(Series, f64)]) -> Scrape {
        let after = scrape_until(self.addr, |s| {
            s.value("saga_in_flight", &[]).is_none_or(|v| v == 0.0)
                && expected
                    .iter()
                    .all(|(series, n)| self.grew(s, series) >= *n)
        })
        .await;
        for (series, n) in expected {
            assert_eq!(
                self.grew(&after, series),
                *n,
                "{}{:?}:\n{}",
                series.name,
                series.labels,
                after.text
            );
        }
        after
    }

    /// Stops the stack, ending the turn.
    async fn end(self) {
        self.stack.stop().await;
    }
}

async fn charge(
    stack: &Stack,
    request_id: &str,
    customer: &str,
    cents: i64,
) -> Result<payment::ChargeResponse, tonic::Status> {
    stack
        .payments()
        .await
        .charge(payment::ChargeRequest {
            request_id: request_id.into(),
            customer_id: customer.into(),
            amount_cents: cents,
        })
        .await
        .map(tonic::Response::into_inner)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_completed_saga_counts_its_start_its_finish_and_each_step() {
    let turn = Turn::seeded().await;
    let completed = turn
        .stack
        .order("m-completed", "alice", &[("sku-apple", 2, 150)])
        .await
        .expect("order");
    assert_eq!(completed.status(), saga::SagaStatus::Completed);
    let m = turn
        .counted(&[
            (series("saga_started_total", &[]), 1.0),
            (
                series("saga_finished_total", &[("status", "completed")]),
                1.0,
            ),
            (series("saga_finished_total", &[]), 1.0),
            (series("saga_compensations_total", &[]), 0.0),
            (series("saga_failed_total", &[]), 0.0),
            (op("charge", "applied"), 1.0),
            (op("deduct", "applied"), 1.0),
            (series("participant_operations_total", &[]), 2.0),
            (calls("charge"), 1.0),
            (calls("deduct"), 1.0),
        ])
        .await;
    assert_eq!(m.expect("saga_in_flight", &[]), 0.0);
    turn.end().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_refused_charge_cancels_the_saga_with_nothing_to_undo() {
    let turn = Turn::seeded().await;
    let refused = turn
        .stack
        .order("m-no-funds", "bob", &[("sku-apple", 1, 5_000)])
        .await
        .expect("order");
    assert_eq!(refused.status(), saga::SagaStatus::Cancelled);
    turn.counted(&[
        (series("saga_started_total", &[]), 1.0),
        (
            series("saga_finished_total", &[("status", "cancelled")]),
            1.0,
        ),
        (series("saga_finished_total", &[]), 1.0),
        (series("saga_compensations_total", &[]), 0.0),
        (series("saga_failed_total", &[]), 0.0),
        (op("charge", "refused"), 1.0),
        (series("participant_operations_total", &[]), 1.0),
    ])
    .await;
    turn.end().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_short_deduct_refunds_the_charge_in_one_compensation() {
    let turn = Turn::seeded().await;
    let short = turn
        .stack
        .order("m-short", "alice", &[("sku-apple", 100, 10)])
        .await
        .expect("order");
    assert_eq!(short.status(), saga::SagaStatus::Cancelled);
    assert_eq!(turn.stack.balance("alice").await, 100_000, "refunded");
    turn.counted(&[
        (series("saga_started_total", &[]), 1.0),
        (
            series("saga_finished_total", &[("status", "cancelled")]),
            1.0,
        ),
        (series("saga_finished_total", &[]), 1.0),
        (series("saga_compensations_total", &[]), 1.0),
        (series("saga_failed_total", &[]), 0.0),
        (op("charge", "applied"), 1.0),
        (op("deduct", "refused"), 1.0),
        (op("refund", "compensated"), 1.0),
        (op("restock", "compensated"), 0.0),
        (series("participant_operations_total", &[]), 3.0),
        (calls("refund"), 1.0),
    ])
    .await;
    turn.end().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_repeated_charge_is_applied_once_then_replayed() {
    let turn = Turn::seeded().await;
    let first = charge(&turn.stack, "m-dup", "alice", 10)
        .await
        .expect("charge");
    let again = charge(&turn.stack, "m-dup", "alice", 10)
        .await
        .expect("charge");
    assert!(!first.replayed && again.replayed);
    turn.counted(&[
        (op("charge", "applied"), 1.0),
        (op("charge", "deduplicated"), 1.0),
        (series("participant_operations_total", &[]), 2.0),
        (calls("charge"), 2.0),
        (series("saga_started_total", &[]), 0.0),
    ])
    .await;
    turn.end().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_refund_before_its_charge_is_a_null_compensation_and_the_late_charge_is_refused() {
    let turn = Turn::seeded().await;
    let null = turn
        .stack
        .payments()
        .await
        .refund(payment::RefundRequest {
            request_id: "m-null".into(),
            customer_id: "alice".into(),
            amount_cents: 20,
        })
        .await
        .expect("refund")
        .into_inner();
    assert_eq!(null.effect(), CompensationEffect::NullCompensation);
    let hanging = charge(&turn.stack, "m-null", "alice", 20)
        .await
        .expect_err("hanging charge");
    assert_eq!(hanging.code(), Code::FailedPrecondition);
    turn.counted(&[
        (op("refund", "null_compensation"), 1.0),
        (op("charge", "hanging_refused"), 1.0),
        (series("participant_operations_total", &[]), 2.0),
        (calls("refund"), 1.0),
        (calls("charge"), 1.0),
    ])
    .await;
    turn.end().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn deposits_and_stock_additions_are_counted() {
    let turn = Turn::take().await;
    turn.stack.deposit("alice", 100_000).await;
    turn.stack.deposit("bob", 100).await;
    turn.stack.add_stock("sku-apple", 10).await;
    turn.counted(&[
        (op("deposit", "applied"), 2.0),
        (op("add_stock", "applied"), 1.0),
        (series("participant_operations_total", &[]), 3.0),
    ])
    .await;
    turn.end().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn each_step_is_timed_in_a_histogram_with_buckets() {
    let turn = Turn::seeded().await;
    turn.stack
        .order("m-timed", "alice", &[("sku-apple", 1, 100)])
        .await
        .expect("order");
    let m = turn
        .counted(&[
            (
                series("saga_step_duration_seconds_count", &[("step", "payment")]),
                1.0,
            ),
            (
                series("saga_step_duration_seconds_count", &[("step", "inventory")]),
                1.0,
            ),
        ])
        .await;
    for step in ["payment", "inventory"] {
        let has_inf_bucket = m
            .matching("saga_step_duration_seconds_bucket", &[("step", step)])
            .any(|b| b.labels.get("le").map(String::as_str) == Some("+Inf"));
        assert!(
            has_inf_bucket,
            "{step}: a histogram with buckets, not a summary:\n{}",
            m.text
        );
    }
    turn.end().await;
}

/// Each store's size by its own accounting (set by the first purge round
/// at start-up); the embedded stores' commits, inline or grouped, and the
/// writes in them; every commit timed, and the checkpointer's copies too.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn each_store_reports_its_size_commits_and_checkpoints() {
    let turn = Turn::seeded().await;
    turn.stack
        .order("m-stored", "alice", &[("sku-apple", 1, 100)])
        .await
        .expect("order");
    let dbs = ["orchestrator", "payment", "inventory"];
    let m = scrape_until(turn.addr, |s| {
        s.matching("store_size_bytes", &[]).count() >= 3
            && dbs.iter().all(|db| {
                let grew = |name| turn.grew(s, &series(name, &[("db", *db)]));
                grew("embedded_store_commits_total") >= 1.0
                    && grew("embedded_store_commit_duration_seconds_count") >= 1.0
                    && grew("embedded_store_checkpoint_duration_seconds_count") >= 1.0
            })
    })
    .await;
    for service in ["orchestrator", "payment-svc", "inventory-svc"] {
        let size = m.expect("store_size_bytes", &[("service", service)]);
        assert!(size >= 4096.0, "{service}: {size}");
    }
    assert!(m.value("saga_oldest_finished_age_seconds", &[]).is_some());
    for db in dbs {
        let grew = |name| turn.grew(&m, &series(name, &[("db", db)]));
        let commits = grew("embedded_store_commits_total");
        let writes = grew("embedded_store_committed_writes_total");
        assert!(commits >= 1.0, "{db}: no commit counted:\n{}", m.text);
        assert!(
            writes >= commits,
            "{db}: {writes} writes in {commits} commits"
        );
        let timed = grew("embedded_store_commit_duration_seconds_count");
        assert!(timed >= 1.0, "{db}: no commit timed:\n{}", m.text);
        let checkpoints = grew("embedded_store_checkpoint_duration_seconds_count");
        assert!(checkpoints >= 1.0, "{db}: no checkpoint timed:\n{}", m.text);
    }
    turn.end().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_metrics_are_described() {
    let turn = Turn::seeded().await;
    turn.stack
        .order("m-described", "alice", &[("sku-apple", 1, 100)])
        .await
        .expect("order");
    let described = [
        "participant_operations_total",
        "participant_call_duration_seconds",
        "store_size_bytes",
        "saga_oldest_finished_age_seconds",
    ];
    let m = scrape_until(turn.addr, |s| {
        described
            .iter()
            .all(|d| s.text.contains(&format!("# HELP {d} ")))
    })
    .await;
    for described in described {
        assert!(
            m.text.contains(&format!("# HELP {described} ")),
            "{described} has no HELP text:\n{}",
            m.text
        );
    }
    turn.end().await;
}

/// With a service token set, every saga RPC refused for its token (none,
/// or a wrong one) adds one to `participant_unauthenticated_total{rpc}`,
/// and nothing to the operations counted.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn saga_calls_refused_for_their_token_are_counted_per_rpc_and_are_no_operations() {
    let turn = Turn::take().await;
    let token = "metrics-service-token-0123456789";
    let dir = tempfile::tempdir().expect("tempdir");
    let start = |service| {
        let options = service_kit::server::ServeOptions::default()
            .with_service(TokenAuth::with_token_for(Role::Service, token).expect("token"));
        ParticipantHarness::new(service, dir.path())
            .options(options)
            .start()
    };
    let pay = start(Service::Payment).await;
    let inv = start(Service::Inventory).await;
    let wrong = "metrics-service-token-0123456788";
    let callers = [
        TokenAuth::open_for(Role::Service),
        TokenAuth::with_token_for(Role::Service, wrong).expect("token"),
    ];
    fn unauthenticated<T: std::fmt::Debug>(result: Result<T, tonic::Status>) {
        let status = result.expect_err("refused for its token");
        assert_eq!(status.code(), Code::Unauthenticated, "{status:?}");
    }
    for auth in callers {
        let channel = saga_tests::channel(pay.addr).await;
        let mut payments = PaymentServiceClient::with_interceptor(channel, auth.clone());
        let charge = payment::ChargeRequest {
            request_id: "u-1".into(),
            customer_id: "alice".into(),
            amount_cents: 1,
        };
        unauthenticated(payments.charge(charge).await);
        let refund = payment::RefundRequest {
            request_id: "u-1".into(),
            customer_id: "alice".into(),
            amount_cents: 1,
        };
        unauthenticated(payments.refund(refund).await);
        let channel = saga_tests::channel(inv.addr).await;
        let mut stock = InventoryServiceClient::with_interceptor(channel, auth);
        let lines = vec![inventory::Line {
            product_id: "sku-apple".into(),
            quantity: 1,
        }];
        let deduct = inventory::DeductRequest {
            request_id: "u-2".into(),
            lines: lines.clone(),
        };
        unauthenticated(stock.deduct(deduct).await);
        let restock = inventory::RestockRequest {
            request_id: "u-2".into(),
            lines,
        };
        unauthenticated(stock.restock(restock).await);
    }
    let refused = |rpc| series("participant_unauthenticated_total", &[("rpc", rpc)]);
    let after = turn
        .counted(&[
            (refused("charge"), 2.0),
            (refused("refund"), 2.0),
            (refused("deduct"), 2.0),
            (refused("restock"), 2.0),
            (series("participant_unauthenticated_total", &[]), 8.0),
            (series("participant_operations_total", &[]), 0.0),
        ])
        .await;
    assert!(
        after
            .text
            .contains("# HELP participant_unauthenticated_total "),
        "participant_unauthenticated_total has no HELP text:\n{}",
        after.text
    );
    pay.stop().await;
    inv.stop().await;
    turn.end().await;
}

/// With a client token set on the orchestrator, each client RPC refused
/// for it (no token, or a wrong one) adds one to
/// `saga_unauthenticated_total{rpc}`, a console request one to
/// `{rpc="console"}`, RetrySaga with the client token but not the admin
/// token one to `{rpc="retry_saga"}`; no saga is started, and calls with
/// the token are not counted.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn client_calls_refused_for_the_client_token_are_counted_per_rpc() {
    use saga::order_service_client::OrderServiceClient;
    use saga::saga_service_client::SagaServiceClient;
    let turn = Turn::take().await;
    let token = "metrics-client-token-0123456789";
    let console = saga_tests::listener("127.0.0.1:0".parse().expect("addr")).await;
    let console_addr = console.local_addr().expect("addr");
    let options = service_kit::server::ServeOptions {
        admin: TokenAuth::with_token("metrics-admin-token-0123456789").expect("token"),
        ..Default::default()
    }
    .with_client(TokenAuth::with_token_for(Role::Client, token).expect("token"));
    let guarded = turn
        .stack
        .orchestrator_harness()
        .options(options)
        .console(console)
        .start()
        .await;
    fn unauthenticated<T: std::fmt::Debug>(result: Result<T, tonic::Status>) {
        let status = result.expect_err("refused for its token");
        assert_eq!(status.code(), Code::Unauthenticated, "{status:?}");
    }
    let callers = [
        TokenAuth::open_for(Role::Client),
        TokenAuth::with_token_for(Role::Client, "metrics-client-token-0123456788").expect("token"),
    ];
    let channel = saga_tests::channel(guarded.addr).await;
    for auth in callers {
        let mut orders = OrderServiceClient::with_interceptor(channel.clone(), auth.clone());
        let order = saga_tests::order_request("m-1", "alice", &[("sku-apple", 1, 1)], false);
        unauthenticated(orders.create_order(order).await);
        let mut sagas = SagaServiceClient::with_interceptor(channel.clone(), auth);
        let lookup = Some(saga::get_saga_request::Lookup::SagaId("s".into()));
        unauthenticated(sagas.get_saga(saga::GetSagaRequest { lookup }).await);
        unauthenticated(sagas.list_sagas(saga::ListSagasRequest::default()).await);
        let watch = saga::WatchSagaRequest {
            saga_id: "s".into(),
        };
        unauthenticated(sagas.watch_saga(watch).await);
        let retry = saga::RetrySagaRequest {
            saga_id: "s".into(),
        };
        unauthenticated(sagas.retry_saga(retry).await);
    }
    // RetrySaga with the client token but without the admin token.
    let client = TokenAuth::with_token_for(Role::Client, token).expect("token");
    let mut sagas = SagaServiceClient::with_interceptor(channel.clone(), client.clone());
    let retry = saga::RetrySagaRequest {
        saga_id: "s".into(),
    };
    unauthenticated(sagas.retry_saga(retry).await);
    // With the token: answered (NOT_FOUND), not counted.
    let lookup = Some(saga::get_saga_request::Lookup::SagaId("s".into()));
    let missing = sagas
        .get_saga(saga::GetSagaRequest { lookup })
        .await
        .expect_err("no such saga");
    assert_eq!(missing.code(), Code::NotFound);
    // The console: three requests without the token.
    for path in ["/api/counts", "/api/sagas", "/api/sagas/s/events"] {
        let (status, _) = saga_tests::http::get(console_addr, path)
            .await
            .expect("the console answers");
        assert_eq!(status, 401, "{path}");
    }
    let refused = |rpc| series("saga_unauthenticated_total", &[("rpc", rpc)]);
    let after = turn
        .counted(&[
            (refused("create_order"), 2.0),
            (refused("get_saga"), 2.0),
            (refused("list_sagas"), 2.0),
            (refused("watch_saga"), 2.0),
            (refused("retry_saga"), 3.0),
            (refused("console"), 3.0),
            (series("saga_unauthenticated_total", &[]), 14.0),
            (series("saga_started_total", &[]), 0.0),
        ])
        .await;
    assert!(
        after.text.contains("# HELP saga_unauthenticated_total "),
        "saga_unauthenticated_total has no HELP text:\n{}",
        after.text
    );
    guarded.stop().await;
    turn.end().await;
}
