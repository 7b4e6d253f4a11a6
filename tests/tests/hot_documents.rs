//! Hot documents on MongoDB (SecantusDB unless `MONGODB_URI` names a real
//! one): every saga of a burst charges one customer and deducts one
//! product, so the participants' transactions conflict on one account and
//! one product and a batch of many such calls takes far longer than one.
//! No saga may be cancelled by a batch's deadline alone while its
//! participants are up. Two things make sure of it: a batch that misses
//! its deadline halves the calls of later batches
//! (orchestrator/src/participant/batching.rs), and the retries of its
//! calls go out in those smaller batches; and a participant's
//! transactions on MongoDB go through a limit that write conflicts halve
//! (participant-kit/src/mongo/conflict_limit.rs), so that the calls on
//! the hot documents commit one after another instead of conflicting
//! again and again (without it, 4 to 25 of the 100 orders completed in
//! 20 s here; with it, all in ~5 s). The test prints the figures (one
//! charge alone, time to complete the burst, batches, calls batched,
//! batches that missed their deadline).
//!
//! Its own binary: it installs the process-wide Prometheus recorder.

use saga_proto::saga::v1 as pb;
use saga_tests::{Stack, order_request};
use std::net::SocketAddr;
use std::sync::Arc;

/// Batch RPCs, the calls they carried and the batches that missed their
/// deadline to `step`, as counted so far.
async fn batched(metrics: SocketAddr, step: &str) -> (f64, f64, f64) {
    let scrape = saga_tests::prometheus::scrape(metrics).await;
    (
        scrape.sum("saga_participant_batches_total", &[("step", step)]),
        scrape.sum("saga_participant_batched_calls_total", &[("step", step)]),
        scrape.sum("saga_participant_batches_halved_total", &[("step", step)]),
    )
}

/// How long one charge takes on this test server with nothing else
/// running: the median of 9 charges, one after another, of a customer of
/// its own.
async fn one_charge_takes(stack: &Stack) -> std::time::Duration {
    stack.deposit("calibration-customer", 1_000).await;
    let mut payments = stack.payments().await;
    let mut took = Vec::new();
    for i in 0..9 {
        let started = std::time::Instant::now();
        payments
            .charge(saga_proto::payment::v1::ChargeRequest {
                request_id: format!("calibration-{i}"),
                customer_id: "calibration-customer".into(),
                amount_cents: 1,
            })
            .await
            .expect("a calibration charge");
        took.push(started.elapsed());
    }
    took.sort();
    took[took.len() / 2]
}

/// Orders at once in the hot-documents test.
const HOT_ORDERS: i64 = 100;
/// Each participant call's deadline there: a charge of the hot account
/// alone takes tens of milliseconds on the MongoDB test server, a batch of
/// a dozen of them more than this.
const HOT_CALL_TIMEOUT: std::time::Duration = std::time::Duration::from_millis(2000);

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn hot_documents_on_mongodb_complete_every_saga_whatever_the_batch_deadlines() {
    let Some(mut stack) = Stack::without_orchestrator_mongo().await else {
        return;
    };
    let caller = orchestrator::participant::call::Caller::new(HOT_CALL_TIMEOUT);
    let definition = orchestrator::participant::definition_of(
        &saga_tests::order_steps(stack.payment.addr, stack.inventory.addr),
        &caller,
        &Default::default(),
    )
    .expect("the order saga");
    let retry = orchestrator::executor::RetryPolicy {
        action_attempts: 8,
        ..saga_tests::fast_retry()
    };
    stack.orchestrator = Some(
        saga_tests::OrchestratorHarness::new(stack.storage.clone(), Arc::new(definition))
            .retry(retry)
            .start()
            .await,
    );
    let metrics = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port");
    service_kit::metrics::serve_metrics(metrics).expect("install the Prometheus recorder");
    let before = [
        batched(metrics, "payment").await,
        batched(metrics, "inventory").await,
    ];
    stack.deposit("hot-customer", 1_000_000).await;
    stack.add_stock("hot-sku", 1_000).await;
    let one_charge = one_charge_takes(&stack).await;
    eprintln!("calibration: one charge alone takes {one_charge:?} (median of 9)");
    let started = std::time::Instant::now();
    let orders = (0..HOT_ORDERS).map(|i| {
        let stack = &stack;
        async move {
            let request = order_request(
                &format!("hot-{i}"),
                "hot-customer",
                &[("hot-sku", 1, 100 + i)],
                true,
            );
            stack.orders().await.create_order(request).await
        }
    });
    let replies = futures::future::join_all(orders).await;
    let elapsed = started.elapsed();
    let sagas: Vec<_> = replies
        .into_iter()
        .map(|r| r.expect("create order").into_inner())
        .collect();
    let not_completed: Vec<String> = sagas
        .iter()
        .filter(|s| s.status() != pb::SagaStatus::Completed)
        .map(|s| {
            let saga = s.saga.as_ref().expect("the saga");
            format!("{}: {:?} {}", saga.request_id, s.status(), saga.reason)
        })
        .collect();
    assert!(
        not_completed.is_empty(),
        "{} of {HOT_ORDERS} orders on the hot documents not COMPLETED in {:.1} s: {not_completed:#?}",
        not_completed.len(),
        elapsed.as_secs_f64()
    );
    let charged: i64 = (0..HOT_ORDERS).map(|i| 100 + i).sum();
    assert_eq!(stack.balance("hot-customer").await, 1_000_000 - charged);
    assert_eq!(stack.stock("hot-sku").await, 1_000 - HOT_ORDERS);
    let mut figures = Vec::new();
    let mut retried_in_batches = Vec::new();
    for (step, (batches_before, calls_before, halved_before)) in
        ["payment", "inventory"].into_iter().zip(before)
    {
        let (batches, calls, halved) = batched(metrics, step).await;
        // Without the halving, the calls of a batch that missed its
        // deadline go out again in batches as large, miss it again, and
        // so on (410 calls batched for 100 orders here before the
        // participants' conflict limit; 50-65 now).
        if calls - calls_before > 2.0 * HOT_ORDERS as f64 {
            retried_in_batches.push(step);
        }
        figures.push(format!(
            "{step}: {} batch RPCs carried {} calls, {} missed their deadline",
            batches - batches_before,
            calls - calls_before,
            halved - halved_before
        ));
    }
    eprintln!(
        "hot documents: {HOT_ORDERS} orders on one customer and one product COMPLETED in {:.1} s; {}",
        elapsed.as_secs_f64(),
        figures.join(", ")
    );
    assert!(
        retried_in_batches.is_empty(),
        "{retried_in_batches:?}: more than two calls batched per order, batches were not made smaller after missed deadlines: {}",
        figures.join(", ")
    );
    stack.stop().await;
}
