//! Several sagas' calls in one participant RPC (ChargeBatch, DeductBatch):
//! each call of a batch is exactly the call on its own — its own record,
//! refusal or error, in the order sent — on both backends; a batch over the
//! limit changes nothing; and an orchestrator under concurrent load really
//! sends batches, with every saga charged and deducted exactly once.
//!
//! This binary installs the process-wide Prometheus recorder; only
//! `concurrent_sagas_share_batch_rpcs_and_each_is_applied_once` asserts
//! metrics.

use participant_kit::batch::MAX_BATCH_CALLS;
use saga_proto::faults::v1 as faults;
use saga_proto::faults::v1::fault_service_client::FaultServiceClient;
use saga_proto::inventory::v1 as inventory;
use saga_proto::payment::v1 as payment;
use saga_proto::saga::v1 as pb;
use saga_tests::{Stack, channel, order_request};
use tonic::Code;

saga_tests::on_every_backend!(
    a_charge_batch_applies_each_call_as_on_its_own,
    a_deduct_batch_applies_each_call_as_on_its_own,
    a_batch_over_the_limit_changes_nothing,
);

fn charge(request_id: &str, customer: &str, cents: i64) -> payment::ChargeCall {
    payment::ChargeCall {
        request: Some(payment::ChargeRequest {
            request_id: request_id.into(),
            customer_id: customer.into(),
            amount_cents: cents,
        }),
        traceparent: service_kit::trace::traceparent("0af7651916cd43dd8448eb211c80319c"),
    }
}

fn deduct(request_id: &str, product: &str, units: i64) -> inventory::DeductCall {
    inventory::DeductCall {
        request: Some(inventory::DeductRequest {
            request_id: request_id.into(),
            lines: vec![inventory::Line {
                product_id: product.into(),
                quantity: units,
            }],
        }),
        traceparent: String::new(),
    }
}

/// A batch result as the single call's result.
fn charged(r: &payment::ChargeResult) -> Result<&payment::ChargeResponse, (Code, &str)> {
    match r.result.as_ref().expect("every result is set") {
        payment::charge_result::Result::Reply(reply) => Ok(reply),
        payment::charge_result::Result::Error(e) => Err((Code::from_i32(e.code), &e.message)),
    }
}

fn deducted(r: &inventory::DeductResult) -> Result<&inventory::DeductResponse, (Code, &str)> {
    match r.result.as_ref().expect("every result is set") {
        inventory::deduct_result::Result::Reply(reply) => Ok(reply),
        inventory::deduct_result::Result::Error(e) => Err((Code::from_i32(e.code), &e.message)),
    }
}

async fn a_charge_batch_applies_each_call_as_on_its_own(stack: Stack) {
    stack.deposit("alice", 1_000).await;
    stack.deposit("bob", 100).await;
    let calls = vec![
        charge("c-1", "alice", 100),
        charge("c-1", "alice", 100),
        charge("c-2", "bob", 500),
        charge("", "alice", 1),
        charge("c-3", "alice", 50),
        payment::ChargeCall::default(),
        charge("c-4", "nobody", 10),
        charge("c-3", "alice", 60),
    ];
    let results = stack
        .payments()
        .await
        .charge_batch(payment::ChargeBatchRequest { calls })
        .await
        .expect("the batch")
        .into_inner()
        .results;
    assert_eq!(results.len(), 8, "one result per call");
    // The same call twice in one batch: applied once, replayed once.
    let (a, b) = (charged(&results[0]), charged(&results[1]));
    let (a, b) = (a.expect("c-1 applied"), b.expect("c-1 replayed"));
    assert_eq!(
        (a.request_id.as_str(), b.request_id.as_str()),
        ("c-1", "c-1")
    );
    assert!(
        a.replayed != b.replayed,
        "exactly one of the two is a replay: {a:?} {b:?}"
    );
    let (code, message) = charged(&results[2]).expect_err("bob has 100 cents");
    assert_eq!(code, Code::FailedPrecondition, "{message}");
    let (code, message) = charged(&results[3]).expect_err("no request id");
    assert_eq!(code, Code::InvalidArgument);
    assert!(message.contains("request_id"), "{message}");
    let (code, message) = charged(&results[5]).expect_err("an empty call");
    assert_eq!(code, Code::InvalidArgument);
    assert_eq!(message, "calls[5].request: must be set");
    let (code, _) = charged(&results[6]).expect_err("unknown customer");
    assert_eq!(code, Code::NotFound);
    // c-3 twice with different amounts, concurrently: whichever is applied
    // first wins the request id (as two single calls racing would), the
    // other is refused as a reused id.
    let c3 = match (charged(&results[4]), charged(&results[7])) {
        (Ok(_), Err((Code::AlreadyExists, _))) => 50,
        (Err((Code::AlreadyExists, _)), Ok(_)) => 60,
        other => panic!("c-3: one applied, one ALREADY_EXISTS; got {other:?}"),
    };
    assert_eq!(
        stack.balance("alice").await,
        1_000 - 100 - c3,
        "c-1 and c-3, once each"
    );
    assert_eq!(stack.balance("bob").await, 100);
    // Batches and single calls share the operationHistory.
    let after = stack.balance("alice").await;
    let single = stack
        .payments()
        .await
        .charge(payment::ChargeRequest {
            request_id: "c-1".into(),
            customer_id: "alice".into(),
            amount_cents: 100,
        })
        .await
        .expect("c-1 on its own")
        .into_inner();
    assert!(single.replayed);
    assert_eq!(stack.balance("alice").await, after);
}

async fn a_deduct_batch_applies_each_call_as_on_its_own(stack: Stack) {
    stack.add_stock("sku-apple", 10).await;
    let calls = vec![
        deduct("d-1", "sku-apple", 3),
        deduct("d-2", "sku-apple", 20),
        deduct("d-3", "sku-unknown", 1),
        deduct("d-1", "sku-apple", 3),
        deduct("d-4", "sku-apple", 0),
        inventory::DeductCall::default(),
    ];
    let results = stack
        .inventory()
        .await
        .deduct_batch(inventory::DeductBatchRequest { calls })
        .await
        .expect("the batch")
        .into_inner()
        .results;
    assert_eq!(results.len(), 6);
    let first = deducted(&results[0]).expect("d-1");
    let again = deducted(&results[3]).expect("d-1 again");
    assert!(first.replayed != again.replayed, "{first:?} {again:?}");
    let (code, message) = deducted(&results[1]).expect_err("20 of 10 apples");
    assert_eq!(code, Code::FailedPrecondition, "{message}");
    let (code, _) = deducted(&results[2]).expect_err("unknown product");
    assert_eq!(code, Code::NotFound);
    let (code, message) = deducted(&results[4]).expect_err("a zero quantity");
    assert_eq!(code, Code::InvalidArgument);
    assert!(message.contains("lines[0].quantity"), "{message}");
    let (code, message) = deducted(&results[5]).expect_err("an empty call");
    assert_eq!(code, Code::InvalidArgument);
    assert_eq!(message, "calls[5].request: must be set");
    assert_eq!(stack.stock("sku-apple").await, 7, "d-1, once");
}

async fn a_batch_over_the_limit_changes_nothing(stack: Stack) {
    stack.deposit("alice", 100_000).await;
    let calls = (0..=MAX_BATCH_CALLS)
        .map(|i| charge(&format!("c-{i}"), "alice", 1))
        .collect();
    let refused = stack
        .payments()
        .await
        .charge_batch(payment::ChargeBatchRequest { calls })
        .await
        .expect_err("one call too many");
    assert_eq!(refused.code(), Code::InvalidArgument);
    assert!(refused.message().starts_with("calls:"), "{refused:?}");
    assert_eq!(stack.balance("alice").await, 100_000);
    let empty = stack
        .inventory()
        .await
        .deduct_batch(inventory::DeductBatchRequest { calls: vec![] })
        .await
        .expect("an empty batch is no error");
    assert!(empty.into_inner().results.is_empty());
}

/// What the orchestrator's batcher relies on: a batch over a participant's
/// request limit is refused as a whole with RESOURCE_EXHAUSTED (retried
/// as single calls), none of its calls applied.
#[tokio::test]
async fn a_batch_over_the_request_limit_is_resource_exhausted_and_applies_nothing() {
    let dir = tempfile::tempdir().expect("tempdir");
    let options = service_kit::server::ServeOptions {
        max_request_bytes: 2_048,
        ..Default::default()
    };
    let payment = saga_tests::ParticipantHarness::new(saga_tests::Service::Payment, dir.path())
        .options(options)
        .start()
        .await;
    let mut client = saga_proto::payment::v1::payment_service_client::PaymentServiceClient::new(
        channel(payment.addr).await,
    );
    client
        .deposit(payment::DepositRequest {
            request_id: "seed".into(),
            customer_id: "alice".into(),
            amount_cents: 1_000,
        })
        .await
        .expect("deposit");
    let calls = (0..50)
        .map(|i| charge(&format!("c-{i}"), "alice", 1))
        .collect();
    let refused = client
        .charge_batch(payment::ChargeBatchRequest { calls })
        .await
        .expect_err("over 2 KiB");
    assert_eq!(refused.code(), Code::ResourceExhausted, "{refused:?}");
    assert_eq!(saga_tests::balance(payment.addr, "alice").await, 1_000);
    payment.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_sagas_share_batch_rpcs_and_each_is_applied_once() {
    let metrics = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port");
    service_kit::metrics::serve_metrics(metrics).expect("install the Prometheus recorder");
    let stack = Stack::start().await;
    // Slow participants (0–40 ms per call), so that calls queue up behind
    // the RPCs in flight, as under heavy load.
    for addr in [stack.payment.addr, stack.inventory.addr] {
        FaultServiceClient::new(channel(addr).await)
            .set_faults(faults::FaultSettings {
                added_latency_ms: 40,
                ..Default::default()
            })
            .await
            .expect("set faults");
    }
    let sagas = 48;
    for i in 0..sagas {
        stack.deposit(&format!("cust-{i}"), 1_000).await;
    }
    stack.add_stock("sku-apple", 1_000).await;
    let orders = (0..sagas).map(|i| {
        let stack = &stack;
        async move {
            let request = order_request(
                &format!("o-{i}"),
                &format!("cust-{i}"),
                &[("sku-apple", 2, 100 + i)],
                true,
            );
            stack.orders().await.create_order(request).await
        }
    });
    let replies = futures::future::join_all(orders).await;
    for (i, reply) in replies.into_iter().enumerate() {
        let reply = reply.expect("create order").into_inner();
        assert_eq!(reply.status(), pb::SagaStatus::Completed, "order {i}");
    }
    for i in 0..sagas {
        let charged = 1_000 - 2 * (100 + i);
        assert_eq!(
            stack.balance(&format!("cust-{i}")).await,
            charged,
            "cust-{i} charged once"
        );
    }
    assert_eq!(
        stack.stock("sku-apple").await,
        1_000 - 2 * sagas,
        "deducted once each"
    );
    let scrape = saga_tests::prometheus::scrape(metrics).await;
    for step in ["payment", "inventory"] {
        let batches = scrape.sum("saga_participant_batches_total", &[("step", step)]);
        let calls = scrape.sum("saga_participant_batched_calls_total", &[("step", step)]);
        assert!(batches >= 1.0, "{step}: no batch was sent");
        assert!(
            calls >= 2.0 * batches,
            "{step}: {calls} calls in {batches} batches"
        );
        assert!(
            calls <= sagas as f64,
            "{step}: {calls} calls batched for {sagas} sagas"
        );
    }
    stack.stop().await;
}
