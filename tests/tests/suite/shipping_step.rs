//! A third step written in NestJS: the order saga with the shipping
//! participant of `examples/nestjs-shipping` (a Node.js child process over
//! MongoDB) after payment and inventory, as a steps file lists it — on the
//! embedded orchestrator store and on MongoDB.
//!
//! - `a_three_step_order_completes_with_one_shipment`
//! - `an_unshippable_order_restocks_then_refunds`
//! - `shipping_killed_under_load_ships_each_completed_order_once`
//!
//! The app must be built (`npm ci && npm run build` in its directory; the
//! test command does it first). Without it these tests skip with a printed
//! reason, or fail under `CI=true` / `REQUIRE_EXAMPLES=1`. Its MongoDB is
//! the test target (SecantusDB unless `MONGODB_URI` is set), each test in a
//! database of its own.

saga_tests::on_every_backend_bare!(
    a_three_step_order_completes_with_one_shipment,
    an_unshippable_order_restocks_then_refunds,
    shipping_killed_under_load_ships_each_completed_order_once,
);

use bson::{Document, doc};
use futures::future::join_all;
use futures::stream::TryStreamExt;
use orchestrator::executor::RetryPolicy;
use saga_proto::saga::v1 as pb;
use saga_tests::mongo_server::{MongoServer, ServerOptions};
use saga_tests::shipping::{ShippingApp, ShippingConfig, ShippingProcess};
use saga_tests::step_named as step;
use saga_tests::{
    OrchestratorHarness, Stack, compensation_order, fast_retry, operations, start_order,
    wait_terminal,
};
use std::collections::HashMap;
use std::time::Duration;

/// The product the shipping participant refuses.
const UNSHIPPABLE: &str = "sku-anvil";

/// The shipping participant on `uri` (a database of its own), refusing
/// [`UNSHIPPABLE`]; `None` when it cannot run here (and is not required).
async fn shipping_on(uri: &str) -> Option<ShippingProcess> {
    let app = ShippingApp::find()?;
    let mut config = ShippingConfig::new(uri);
    config.unshippable = vec![UNSHIPPABLE.to_owned()];
    Some(
        ShippingProcess::start(&app, config)
            .await
            .unwrap_or_else(|e| panic!("{e}")),
    )
}

/// [`shipping_on`] the MongoDB test target.
async fn shipping() -> Option<ShippingProcess> {
    let target = saga_tests::backends::mongo()?;
    shipping_on(&target.uri).await
}

/// The stack's orchestrator for payment, inventory, then `shipping`,
/// retrying as `retry`.
async fn with_shipping(mut stack: Stack, shipping: &ShippingProcess, retry: RetryPolicy) -> Stack {
    let orchestrator = OrchestratorHarness::with_steps(
        stack.storage.clone(),
        stack.payment.addr,
        stack.inventory.addr,
        &[shipping.step()],
    )
    .retry(retry)
    .start()
    .await;
    stack.orchestrator = Some(orchestrator);
    stack
}

/// The shipping participant's `shipments` collection, every document.
async fn shipments(shipping: &ShippingProcess) -> Vec<Document> {
    let config = shipping.config();
    let db = mongo_client::connect(
        &config.mongodb_uri,
        &config.database,
        "saga-tests",
        std::future::pending(),
    )
    .await
    .expect("connect to the shipping database");
    db.collection::<Document>("shipments")
        .find(doc! {})
        .await
        .expect("find shipments")
        .try_collect()
        .await
        .expect("read shipments")
}

fn text<'a>(document: &'a Document, field: &str) -> &'a str {
    document.get_str(field).unwrap_or_default()
}

async fn a_three_step_order_completes_with_one_shipment(stack: Stack) {
    let Some(shipping) = shipping().await else {
        return;
    };
    let stack = with_shipping(stack, &shipping, fast_retry()).await;
    stack.deposit("alice", 10_000).await;
    stack.add_stock("sku-apple", 10).await;

    let reply = stack
        .order("o-ship", "alice", &[("sku-apple", 2, 150)])
        .await
        .expect("create order");
    assert_eq!(reply.status(), pb::SagaStatus::Completed, "{reply:?}");
    let saga = reply.saga.expect("saga returned with wait");
    let names: Vec<&str> = saga.steps.iter().map(|s| s.name.as_str()).collect();
    assert_eq!(names, ["payment", "inventory", "shipping"]);
    let ship = step(&saga, "shipping");
    assert_eq!(ship.status(), pb::StepStatus::Succeeded);
    assert_eq!(
        (ship.action.as_str(), ship.compensation.as_str()),
        ("ship", "cancel_shipment")
    );
    assert_eq!(ship.request_id, format!("{}:shipping", saga.saga_id));
    assert_eq!(stack.balance("alice").await, 9_700);
    assert_eq!(stack.stock("sku-apple").await, 8);

    // One shipment, for this order, under the step's request id; one
    // `act applied` record in the participant's operationHistory.
    let all = shipments(&shipping).await;
    assert_eq!(all.len(), 1, "{all:?}");
    assert_eq!(text(&all[0], "request_id"), ship.request_id);
    assert_eq!(text(&all[0], "saga_id"), saga.saga_id);
    assert_eq!(text(&all[0], "order_id"), reply.order_id);
    assert_eq!(text(&all[0], "status"), "created");
    let records = operations(shipping.addr(), &ship.request_id).await;
    let kinds: Vec<(&str, &str)> = records
        .iter()
        .map(|r| (r.kind.as_str(), r.status.as_str()))
        .collect();
    assert_eq!(kinds, [("act", "applied")]);
    assert!(
        records[0].detail.contains(text(&all[0], "_id")),
        "the record names the shipment: {records:?}"
    );
    stack.stop().await;
}

async fn an_unshippable_order_restocks_then_refunds(stack: Stack) {
    let Some(shipping) = shipping().await else {
        return;
    };
    let stack = with_shipping(stack, &shipping, fast_retry()).await;
    stack.deposit("bob", 10_000).await;
    stack.add_stock("sku-apple", 10).await;
    stack.add_stock(UNSHIPPABLE, 5).await;

    let reply = stack
        .order(
            "o-anvil",
            "bob",
            &[("sku-apple", 1, 100), (UNSHIPPABLE, 2, 1_000)],
        )
        .await
        .expect("create order");
    assert_eq!(reply.status(), pb::SagaStatus::Cancelled, "{reply:?}");
    let saga = reply.saga.expect("saga");
    assert_eq!(step(&saga, "shipping").status(), pb::StepStatus::Refused);
    assert_eq!(
        step(&saga, "inventory").status(),
        pb::StepStatus::Compensated
    );
    assert_eq!(step(&saga, "payment").status(), pb::StepStatus::Compensated);
    assert!(saga.reason.contains("UNSHIPPABLE"), "{}", saga.reason);
    assert!(saga.reason.contains(UNSHIPPABLE), "{}", saga.reason);
    assert_eq!(saga.refusal_code, "UNSHIPPABLE");
    // Compensations in reverse order of the steps: restock, then refund.
    assert_eq!(compensation_order(&saga), ["inventory", "payment"]);

    // Money and stock exactly as before; nothing shipped; the refusal
    // recorded once.
    assert_eq!(stack.balance("bob").await, 10_000);
    assert_eq!(stack.stock("sku-apple").await, 10);
    assert_eq!(stack.stock(UNSHIPPABLE).await, 5);
    assert!(shipments(&shipping).await.is_empty());
    let records = operations(shipping.addr(), &step(&saga, "shipping").request_id).await;
    let kinds: Vec<(&str, &str)> = records
        .iter()
        .map(|r| (r.kind.as_str(), r.status.as_str()))
        .collect();
    assert_eq!(kinds, [("act", "refused")]);
    stack.stop().await;
}

/// Orders of the kill scenario, all sent at once.
const ORDERS: usize = 100;
/// Each order: one unit of its product at this price.
const PRICE: i64 = 100;
/// Units of each order's product at the start.
const STOCK: i64 = 10;

/// The customer of order `i`, and its product ([`customer_of`]).
///
/// Each order is another customer's, for another product: the kill is the
/// shipping participant's, and orders that share an account or a product
/// document contend for it — on the Python test server so slowly that some
/// of their calls miss every deadline until the step deadline cancels them
/// (hot documents are the chaos soak's and the conformance suites' concern).
fn customer_of(i: usize) -> String {
    format!("c-{i}")
}

fn product_of(i: usize) -> String {
    format!("sku-{i}")
}

/// Whether the saga's shipping step needed more than one attempt.
fn shipping_retried(saga: &pb::Saga) -> bool {
    step(saga, "shipping").attempts > 1
}

/// Retries that outlast a restart of the shipping participant and a
/// transaction its SIGKILL left open (its MongoDB's transaction lifetime,
/// 5 s here), so most orders complete.
fn patient() -> RetryPolicy {
    RetryPolicy {
        action_attempts: 100,
        compensation_attempts: 100,
        min_delay: Duration::from_millis(20),
        max_delay: Duration::from_millis(500),
        step_deadline: Duration::from_secs(60),
        jitter: Default::default(),
    }
}

/// The shipping participant is SIGKILLed while 100 orders run through it,
/// and started again: every saga ends, and the shipments and the
/// operationHistory agree with each saga's status — a shipment created
/// exactly for each COMPLETED saga, at most one per saga, and for a
/// CANCELLED one none, or one cancelled by its compensation.
async fn shipping_killed_under_load_ships_each_completed_order_once(stack: Stack) {
    if ShippingApp::find().is_none() || saga_tests::backends::mongo().is_none() {
        return;
    }
    // A MongoDB of its own, whose transaction lifetime (5 s) bounds what a
    // transaction left open by the SIGKILL holds locked.
    let logs = tempfile::tempdir().expect("a directory for the server's log");
    let server_log = logs.path().join("secantusdb.log");
    let server = tokio::task::spawn_blocking({
        let log = server_log.clone();
        move || {
            MongoServer::start(ServerOptions {
                transaction_lifetime_seconds: Some(5),
                log: Some(log),
                ..ServerOptions::default()
            })
        }
    })
    .await
    .expect("join")
    .expect("a SecantusDB for the shipping participant");
    let Some(mut shipping) = shipping_on(&server.uri()).await else {
        return;
    };
    let stack = with_shipping(stack, &shipping, patient()).await;
    for i in 0..ORDERS {
        stack.deposit(&customer_of(i), 1_000_000).await;
        stack.add_stock(&product_of(i), STOCK).await;
    }

    let addr = stack.orchestrator().addr;
    let started = join_all((0..ORDERS).map(|i| async move {
        let customer = customer_of(i);
        let product = product_of(i);
        start_order(
            addr,
            &format!("o-{i}"),
            &customer,
            &[(product.as_str(), 1, PRICE)],
        )
        .await
    }))
    .await;

    // SIGKILL once a tenth of the orders have shipped, then start again.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(120);
    while shipments(&shipping).await.len() < ORDERS / 10 {
        assert!(
            tokio::time::Instant::now() < deadline,
            "no tenth of the orders shipped within 120 s; shipping's log:\n{}",
            shipping.log_tail()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    shipping.kill9().expect("SIGKILL the shipping participant");
    // Down until a shipping call has failed on it: a kill that happens to
    // fall between two calls, and a restart quick enough that no call
    // noticed, would test nothing.
    let down_at_most = tokio::time::Instant::now() + Duration::from_secs(60);
    until_a_shipping_call_failed(&stack, &started, down_at_most, &shipping).await;
    shipping.restart().await.expect("restart shipping");

    // One poller at a time: by the time the first saga ended, most others
    // have too.
    let mut sagas = Vec::with_capacity(started.len());
    let deadline = tokio::time::Instant::now() + Duration::from_secs(180);
    for id in &started {
        sagas.push(terminal_or_explain(addr, id, deadline, &shipping, &server_log).await);
    }
    audit(&stack, &shipping, &sagas).await;
    stack.stop().await;
    drop(shipping);
    drop(server);
}

/// Returns once one of the `started` sagas shows a shipping step on its
/// second attempt (its first failed); past `deadline`, a panic.
async fn until_a_shipping_call_failed(
    stack: &Stack,
    started: &[String],
    deadline: tokio::time::Instant,
    shipping: &ShippingProcess,
) {
    let mut client = stack.sagas().await;
    loop {
        for id in started {
            let saga = client
                .get_saga(pb::GetSagaRequest {
                    lookup: Some(pb::get_saga_request::Lookup::SagaId(id.clone())),
                })
                .await
                .expect("get saga")
                .into_inner();
            if shipping_retried(&saga) {
                return;
            }
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "no shipping call failed while the participant was down; its log:\n{}",
            shipping.log_tail()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// The saga once terminal; past `deadline`, a panic that shows what the
/// shipping participant and its MongoDB logged about the saga's shipping
/// step, so that a hang explains itself.
async fn terminal_or_explain(
    addr: std::net::SocketAddr,
    saga_id: &str,
    deadline: tokio::time::Instant,
    shipping: &ShippingProcess,
    server_log: &std::path::Path,
) -> pb::Saga {
    let left = deadline.saturating_duration_since(tokio::time::Instant::now());
    let waited = tokio::spawn({
        let saga_id = saga_id.to_owned();
        async move { wait_terminal(addr, &saga_id, left).await }
    })
    .await;
    match waited {
        Ok(saga) => saga,
        Err(_) => {
            let request_id = format!("{saga_id}:shipping");
            panic!(
                "saga {saga_id} not terminal within the deadline; shipping's log about {request_id}:\n{}\n\
                 shipping's last lines:\n{}\nits MongoDB's last lines:\n{}",
                shipping.log_lines_with(&request_id, 30),
                shipping.log_tail(),
                saga_tests::process::log_tail(server_log, 40).join("\n"),
            )
        }
    }
}

/// The kill scenario's checks over every saga and the shipping
/// participant's records (see its doc).
async fn audit(stack: &Stack, shipping: &ShippingProcess, sagas: &[pb::Saga]) {
    let all = shipments(shipping).await;
    let mut by_request: HashMap<&str, Vec<&Document>> = HashMap::new();
    for s in &all {
        by_request.entry(text(s, "request_id")).or_default().push(s);
    }
    let mut completed: i64 = 0;
    let mut retried = 0;
    for saga in sagas {
        let ship = step(saga, "shipping");
        assert_eq!(ship.request_id, format!("{}:shipping", saga.saga_id));
        retried += usize::from(shipping_retried(saga));
        let found = by_request
            .remove(ship.request_id.as_str())
            .unwrap_or_default();
        assert!(found.len() <= 1, "saga {}: {found:?}", saga.saga_id);
        let records = operations(shipping.addr(), &ship.request_id).await;
        let record = |kind: &str| {
            let of: Vec<&str> = records
                .iter()
                .filter(|r| r.kind == kind)
                .map(|r| r.status.as_str())
                .collect();
            assert!(of.len() <= 1, "saga {}: {records:?}", saga.saga_id);
            of.first().copied()
        };
        let (act, undo) = (record("act"), record("compensate"));
        let status = found.first().map(|s| text(s, "status"));
        match saga.status() {
            pb::SagaStatus::Completed => {
                completed += 1;
                assert_eq!(status, Some("created"), "saga {}", saga.saga_id);
                assert_eq!((act, undo), (Some("applied"), None), "{records:?}");
            }
            pb::SagaStatus::Cancelled => match status {
                None => assert_ne!(act, Some("applied"), "{records:?}"),
                Some(status) => {
                    assert_eq!(status, "cancelled", "saga {}", saga.saga_id);
                    assert_eq!((act, undo), (Some("applied"), Some("undone")));
                }
            },
            other => panic!("saga {} ended {other:?}: {saga:?}", saga.saga_id),
        }
    }
    assert!(
        by_request.is_empty(),
        "shipments of no saga of this run: {by_request:?}"
    );
    assert!(
        retried > 0,
        "no shipping call had to be retried: the SIGKILL hit nothing"
    );
    // Money and stock moved exactly by the completed orders.
    let (mut balances, mut stock) = (0, 0);
    for i in 0..ORDERS {
        balances += stack.balance(&customer_of(i)).await;
        stock += stack.stock(&product_of(i)).await;
    }
    assert_eq!(balances, ORDERS as i64 * 1_000_000 - completed * PRICE);
    assert_eq!(stock, ORDERS as i64 * STOCK - completed);
    eprintln!(
        "{} sagas: {completed} completed, {} cancelled; {retried} retried a shipping call",
        sagas.len(),
        sagas.len() as i64 - completed
    );
}
