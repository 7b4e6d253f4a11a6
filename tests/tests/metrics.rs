//! Prometheus metrics scraped over HTTP and checked.
//!
//! This test binary installs the process-wide Prometheus recorder
//! (`service_kit::metrics::serve_metrics`) on a free port; the three
//! in-process services of a [`Stack`] record into it. A known mix of sagas
//! and direct participant calls is run (and saga RPCs without the service
//! token sent to participants that require one), `GET /metrics` is fetched with a
//! minimal HTTP/1.1 client, the text exposition format is parsed, and the
//! counters are checked for their exact values.
//!
//! The recorder is global to the process, so every metric assertion lives in
//! the one test of this file.

use saga_proto::payment::v1 as payment;
use saga_proto::saga::v1 as saga;
use saga_tests::Stack;
use saga_tests::prometheus::{Scrape, scrape, scrape_until};
use std::net::SocketAddr;
use tonic::Code;

fn free_port() -> SocketAddr {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind a free port");
    listener.local_addr().expect("local addr")
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

// ------------------------------------------------------------------ test

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn metrics_are_served_over_http_and_count_what_happened() {
    let addr = free_port();
    service_kit::metrics::serve_metrics(addr).expect("install the Prometheus recorder");
    // What the binaries call after starting the exporter.
    participant_kit::metrics::describe();
    participant_kit::retention::describe();
    orchestrator::retention::describe();

    let stack = Stack::start().await;
    stack.deposit("alice", 100_000).await;
    stack.deposit("bob", 100).await;
    stack.add_stock("sku-apple", 10).await;

    // 1. Completed: charge and deduct applied.
    let completed = stack
        .order("m-completed", "alice", &[("sku-apple", 2, 150)])
        .await
        .expect("order");
    assert_eq!(completed.status(), saga::SagaStatus::Completed);
    // 2. Cancelled at once: bob's charge is refused, nothing to undo.
    let refused = stack
        .order("m-no-funds", "bob", &[("sku-apple", 1, 5_000)])
        .await
        .expect("order");
    assert_eq!(refused.status(), saga::SagaStatus::Cancelled);
    // 3. Cancelled after a compensation: the deduct is short, the charge is
    //    refunded.
    let short = stack
        .order("m-short", "alice", &[("sku-apple", 100, 10)])
        .await
        .expect("order");
    assert_eq!(short.status(), saga::SagaStatus::Cancelled);
    assert_eq!(stack.balance("alice").await, 100_000 - 300, "refunded");

    // 4. A duplicated charge straight to payment: applied once, replayed.
    let first = charge(&stack, "m-dup", "alice", 10).await.expect("charge");
    let again = charge(&stack, "m-dup", "alice", 10).await.expect("charge");
    assert!(!first.replayed && again.replayed);

    // 5. A refund before its charge (null compensation), then the hanging
    //    charge, which is refused.
    let null = stack
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
    assert_eq!(
        null.effect(),
        saga_proto::participant::v1::CompensationEffect::NullCompensation
    );
    let hanging = charge(&stack, "m-null", "alice", 20)
        .await
        .expect_err("hanging charge");
    assert_eq!(hanging.code(), Code::FailedPrecondition);

    let m = scrape_until(addr, |s| {
        s.sum("sagas_finished_total", &[]) >= 3.0
            && s.value("saga_in_flight", &[]) == Some(0.0)
            && s.matching("store_size_bytes", &[]).count() >= 3
    })
    .await;

    // Retention: each store's size by its own accounting (set by the
    // first purge round at start-up), and the oldest finished saga's age.
    for service in ["orchestrator", "payment-svc", "inventory-svc"] {
        let size = m.expect("store_size_bytes", &[("service", service)]);
        assert!(size >= 4096.0, "{service}: {size}");
    }
    assert!(m.value("saga_oldest_finished_age_seconds", &[]).is_some());

    // The embedded stores' commits, inline or grouped, and the writes in
    // them: every database committed something, and a commit holds at
    // least one write.
    for db in ["orchestrator", "payment", "inventory"] {
        let commits = m.sum("embedded_store_commits_total", &[("db", db)]);
        let writes = m.sum("embedded_store_committed_writes_total", &[("db", db)]);
        assert!(commits >= 1.0, "{db}: no commit counted:\n{}", m.text);
        assert!(
            writes >= commits,
            "{db}: {writes} writes in {commits} commits"
        );
        // Every commit is timed, and the checkpointer's copies too.
        let timed = m.sum("embedded_store_commit_seconds_count", &[("db", db)]);
        assert!(timed >= 1.0, "{db}: no commit timed:\n{}", m.text);
        let checkpoints = m.sum("embedded_store_checkpoint_seconds_count", &[("db", db)]);
        assert!(checkpoints >= 1.0, "{db}: no checkpoint timed:\n{}", m.text);
    }

    // Orchestrator.
    assert_eq!(m.expect("sagas_started_total", &[]), 3.0);
    assert_eq!(
        m.expect("sagas_finished_total", &[("status", "completed")]),
        1.0
    );
    assert_eq!(
        m.expect("sagas_finished_total", &[("status", "cancelled")]),
        2.0
    );
    assert_eq!(
        m.sum("sagas_finished_total", &[]),
        3.0,
        "nothing else finished"
    );
    assert!(m.expect("saga_compensations_total", &[]) >= 1.0);
    assert_eq!(m.sum("saga_failed_total", &[]), 0.0);
    assert_eq!(m.expect("saga_in_flight", &[]), 0.0);
    // Participants.
    let op = |kind: &str, result: &str| {
        m.value(
            "participant_operations_total",
            &[("kind", kind), ("result", result)],
        )
        .unwrap_or(0.0)
    };
    assert_eq!(op("charge", "applied"), 3.0, "m-completed, m-short, m-dup");
    assert_eq!(op("charge", "refused"), 1.0, "m-no-funds");
    assert_eq!(op("charge", "deduplicated"), 1.0, "m-dup again");
    assert_eq!(op("charge", "hanging_refused"), 1.0, "m-null charge");
    assert_eq!(op("refund", "compensated"), 1.0, "m-short");
    assert_eq!(op("refund", "null_compensation"), 1.0, "m-null refund");
    assert_eq!(op("deduct", "applied"), 1.0, "m-completed");
    assert_eq!(op("deduct", "refused"), 1.0, "m-short");
    assert_eq!(op("restock", "compensated"), 0.0);
    assert_eq!(op("deposit", "applied"), 2.0);
    assert_eq!(op("add_stock", "applied"), 1.0);
    assert_eq!(
        m.sum("participant_operations_total", &[]),
        13.0,
        "nothing else counted:\n{}",
        m.text
    );

    for described in [
        "participant_operations_total",
        "participant_call_duration_seconds",
        "store_size_bytes",
        "saga_oldest_finished_age_seconds",
    ] {
        assert!(
            m.text.contains(&format!("# HELP {described} ")),
            "{described} has no HELP text:\n{}",
            m.text
        );
    }

    // Every call was timed: 3 saga charges + 2 duplicates + 1 hanging; the
    // refund of m-short and the null refund.
    let calls = |rpc: &str| m.sum("participant_call_duration_seconds_count", &[("rpc", rpc)]);
    assert!(calls("charge") >= 6.0, "{}", m.text);
    assert!(calls("refund") >= 2.0);
    assert!(calls("deduct") >= 2.0);

    // Step latencies: a histogram (with buckets) per step, by outcome.
    for step in ["payment", "inventory"] {
        let count = m.sum("saga_step_duration_seconds_count", &[("step", step)]);
        assert!(
            count >= 1.0,
            "saga_step_duration_seconds has no sample for step {step:?}:\n{}",
            m.text
        );
        let has_inf_bucket = m
            .matching("saga_step_duration_seconds_bucket", &[("step", step)])
            .any(|b| b.labels.get("le").map(String::as_str) == Some("+Inf"));
        assert!(
            has_inf_bucket,
            "{step}: a histogram with buckets, not a summary"
        );
    }

    unauthenticated_saga_calls_are_counted(addr, &m).await;
    stack.stop().await;
}

/// With a service token set, every saga RPC refused for its token (none,
/// or a wrong one) adds one to `participant_unauthenticated_total{rpc}`,
/// and nothing to the operations counted.
async fn unauthenticated_saga_calls_are_counted(addr: SocketAddr, m: &Scrape) {
    use saga_proto::inventory::v1 as inventory;
    use saga_proto::inventory::v1::inventory_service_client::InventoryServiceClient;
    use saga_proto::payment::v1::payment_service_client::PaymentServiceClient;
    use service_kit::auth::{Role, TokenAuth};

    let token = "metrics-service-token-0123456789";
    let before = scrape(addr).await;
    assert_eq!(
        before.sum("participant_unauthenticated_total", &[]),
        0.0,
        "nothing refused for its token yet:\n{}",
        before.text
    );
    let dir = tempfile::tempdir().expect("tempdir");
    let start = |service| {
        let options = service_kit::server::ServeOptions::default()
            .with_service(TokenAuth::with_token_for(Role::Service, token).expect("token"));
        saga_tests::start_participant_with(
            service,
            dir.path(),
            std::sync::Arc::new(participant_kit::faults::Faults::disabled()),
            options,
            None,
        )
    };
    let pay = start(saga_tests::Service::Payment).await;
    let inv = start(saga_tests::Service::Inventory).await;
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
    // Counted before the refusal is sent, so one scrape sees them all.
    let after = scrape(addr).await;
    for rpc in ["charge", "refund", "deduct", "restock"] {
        assert_eq!(
            after.expect("participant_unauthenticated_total", &[("rpc", rpc)]),
            2.0,
            "{rpc}: no token, then a wrong one"
        );
    }
    assert_eq!(
        after.sum("participant_unauthenticated_total", &[]),
        8.0,
        "nothing else refused for its token:\n{}",
        after.text
    );
    assert!(
        after
            .text
            .contains("# HELP participant_unauthenticated_total "),
        "participant_unauthenticated_total has no HELP text:\n{}",
        after.text
    );
    assert_eq!(
        after.sum("participant_operations_total", &[]),
        m.sum("participant_operations_total", &[]),
        "a refused call is no operation:\n{}",
        after.text
    );
    pay.stop().await;
    inv.stop().await;
}
