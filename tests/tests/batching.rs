//! Several sagas' calls in one participant RPC (ActBatch,
//! CompensateBatch of `participant.v1.SagaStepService`, as payment-svc and
//! inventory-svc serve it): each call of a batch is exactly the call on its
//! own — its own record, refusal or error, in the order sent — on both
//! backends; a batch over the limit changes nothing; and an orchestrator
//! under concurrent load really sends batches, with every saga charged and
//! deducted exactly once.
//!
//! This binary installs the process-wide Prometheus recorder; only
//! `concurrent_sagas_share_batch_rpcs_and_each_is_applied_once` asserts
//! metrics.

use participant_kit::batch::MAX_BATCH_CALLS;
use saga_proto::faults::v1 as faults;
use saga_proto::faults::v1::fault_service_client::FaultServiceClient;
use saga_proto::participant::v1 as step;
use saga_proto::participant::v1::saga_step_service_client::SagaStepServiceClient;
use saga_proto::saga::v1 as pb;
use saga_tests::{Stack, channel, order_request};
use std::net::SocketAddr;
use tonic::Code;

saga_tests::on_every_backend!(
    a_charge_batch_applies_each_call_as_on_its_own,
    a_deduct_batch_applies_each_call_as_on_its_own,
    a_batch_over_the_limit_changes_nothing,
);

/// A step call of the saga `saga` for the order of `customer`: one line of
/// `units` × `cents` of `product`.
fn call(
    saga: &str,
    step: &str,
    customer: &str,
    product: &str,
    units: i64,
    cents: i64,
) -> step::BatchedStepCall {
    step::BatchedStepCall {
        call: Some(step::StepCall {
            request_id: if saga.is_empty() {
                String::new()
            } else {
                format!("{saga}:{step}")
            },
            saga_id: saga.into(),
            step: step.into(),
            attempt: 1,
            order: Some(step::Order {
                order_id: format!("order-{saga}"),
                customer_id: customer.into(),
                lines: vec![step::OrderLine {
                    product_id: product.into(),
                    quantity: units,
                    unit_price_cents: cents,
                }],
                total_cents: units * cents,
            }),
        }),
        traceparent: service_kit::trace::traceparent("0af7651916cd43dd8448eb211c80319c"),
    }
}

fn charge(saga: &str, customer: &str, cents: i64) -> step::BatchedStepCall {
    call(saga, "payment", customer, "sku-apple", 1, cents)
}

fn deduct(saga: &str, product: &str, units: i64) -> step::BatchedStepCall {
    call(saga, "inventory", "alice", product, units, 1)
}

async fn steps(addr: SocketAddr) -> SagaStepServiceClient<tonic::transport::Channel> {
    SagaStepServiceClient::new(channel(addr).await)
}

/// A batch result as the single call's result.
fn acted(r: &step::ActResult) -> Result<&step::ActReply, (Code, &str)> {
    match r.result.as_ref().expect("every result is set") {
        step::act_result::Result::Reply(reply) => Ok(reply),
        step::act_result::Result::Error(e) => Err((Code::from_i32(e.code), &e.message)),
    }
}

/// Whether an Act was applied (not refused).
fn applied(reply: &step::ActReply) -> bool {
    reply.outcome() == step::act_reply::Outcome::Applied
}

async fn a_charge_batch_applies_each_call_as_on_its_own(stack: Stack) {
    stack.deposit("alice", 1_000).await;
    stack.deposit("bob", 100).await;
    let calls = vec![
        charge("s-1", "alice", 100),
        charge("s-1", "alice", 100),
        charge("s-2", "bob", 500),
        charge("", "alice", 1),
        charge("s-3", "alice", 50),
        step::BatchedStepCall::default(),
        charge("s-4", "nobody", 10),
        charge("s-3", "alice", 60),
    ];
    let results = steps(stack.payment.addr)
        .await
        .act_batch(step::StepCallBatch { calls })
        .await
        .expect("the batch")
        .into_inner()
        .results;
    assert_eq!(results.len(), 8, "one result per call");
    let ids: Vec<&str> = results.iter().map(|r| r.request_id.as_str()).collect();
    assert_eq!(
        ids,
        [
            "s-1:payment",
            "s-1:payment",
            "s-2:payment",
            "",
            "s-3:payment",
            "",
            "s-4:payment",
            "s-3:payment"
        ],
        "each result names its call, in order"
    );
    // The same call twice in one batch: applied once, replayed once.
    let (a, b) = (acted(&results[0]), acted(&results[1]));
    let (a, b) = (a.expect("s-1 applied"), b.expect("s-1 replayed"));
    assert!(applied(a) && applied(b), "{a:?} {b:?}");
    assert!(
        a.replayed != b.replayed,
        "exactly one of the two is a replay: {a:?} {b:?}"
    );
    let bob = acted(&results[2]).expect("a refusal is an answer");
    assert!(!applied(bob), "bob has 100 cents: {bob:?}");
    assert_eq!(bob.reason_code, "INSUFFICIENT_FUNDS", "{bob:?}");
    let (code, message) = acted(&results[3]).expect_err("no request id");
    assert_eq!(code, Code::InvalidArgument);
    assert!(message.contains("request_id"), "{message}");
    let (code, message) = acted(&results[5]).expect_err("an empty call");
    assert_eq!(code, Code::InvalidArgument);
    assert_eq!(message, "calls[5].call: must be set");
    match acted(&results[6]) {
        Ok(reply) => assert!(!applied(reply), "unknown customer: {reply:?}"),
        Err((code, _)) => assert_eq!(code, Code::NotFound),
    }
    // s-3 twice with different orders, concurrently: whichever is applied
    // first wins the request id (as two single calls racing would), the
    // other is refused as a reused id.
    let c3 = match (acted(&results[4]), acted(&results[7])) {
        (Ok(r), Err((Code::AlreadyExists, _))) if applied(r) => 50,
        (Err((Code::AlreadyExists, _)), Ok(r)) if applied(r) => 60,
        other => panic!("s-3: one applied, one ALREADY_EXISTS; got {other:?}"),
    };
    assert_eq!(
        stack.balance("alice").await,
        1_000 - 100 - c3,
        "s-1 and s-3, once each"
    );
    assert_eq!(stack.balance("bob").await, 100);
    // Batches and single calls share the operationHistory.
    let after = stack.balance("alice").await;
    let single = steps(stack.payment.addr)
        .await
        .act(charge("s-1", "alice", 100).call.expect("a call"))
        .await
        .expect("s-1 on its own")
        .into_inner();
    assert!(single.replayed && applied(&single), "{single:?}");
    assert_eq!(stack.balance("alice").await, after);
    // Compensations batch the same way: s-1 refunded once, s-2 (refused)
    // has nothing to undo, each answered in order.
    let undo = steps(stack.payment.addr)
        .await
        .compensate_batch(step::StepCallBatch {
            calls: vec![
                charge("s-1", "alice", 100),
                charge("s-1", "alice", 100),
                charge("s-2", "bob", 500),
            ],
        })
        .await
        .expect("the compensations")
        .into_inner()
        .results;
    let effects: Vec<step::CompensationEffect> = undo
        .iter()
        .map(|r| match r.result.as_ref().expect("set") {
            step::compensate_result::Result::Reply(reply) => reply.effect(),
            step::compensate_result::Result::Error(e) => panic!("{e:?}"),
        })
        .collect();
    assert_eq!(effects.len(), 3);
    assert_eq!(effects[0], effects[1], "the same refund twice: {effects:?}");
    assert_eq!(effects[0], step::CompensationEffect::Undone);
    assert_eq!(stack.balance("alice").await, after + 100, "refunded once");
}

async fn a_deduct_batch_applies_each_call_as_on_its_own(stack: Stack) {
    stack.add_stock("sku-apple", 10).await;
    let calls = vec![
        deduct("d-1", "sku-apple", 3),
        deduct("d-2", "sku-apple", 20),
        deduct("d-3", "sku-unknown", 1),
        deduct("d-1", "sku-apple", 3),
        deduct("d-4", "sku-apple", 0),
        step::BatchedStepCall::default(),
    ];
    let results = steps(stack.inventory.addr)
        .await
        .act_batch(step::StepCallBatch { calls })
        .await
        .expect("the batch")
        .into_inner()
        .results;
    assert_eq!(results.len(), 6);
    let first = acted(&results[0]).expect("d-1");
    let again = acted(&results[3]).expect("d-1 again");
    assert!(applied(first) && applied(again));
    assert!(first.replayed != again.replayed, "{first:?} {again:?}");
    let short = acted(&results[1]).expect("a refusal is an answer");
    assert!(!applied(short), "20 of 10 apples: {short:?}");
    assert_eq!(short.reason_code, "INSUFFICIENT_STOCK", "{short:?}");
    match acted(&results[2]) {
        Ok(reply) => assert!(!applied(reply), "unknown product: {reply:?}"),
        Err((code, _)) => assert_eq!(code, Code::NotFound),
    }
    let (code, message) = acted(&results[4]).expect_err("a zero quantity");
    assert_eq!(code, Code::InvalidArgument);
    assert!(message.contains("order.lines[0].quantity"), "{message}");
    let (code, message) = acted(&results[5]).expect_err("an empty call");
    assert_eq!(code, Code::InvalidArgument);
    assert_eq!(message, "calls[5].call: must be set");
    assert_eq!(stack.stock("sku-apple").await, 7, "d-1, once");
}

async fn a_batch_over_the_limit_changes_nothing(stack: Stack) {
    stack.deposit("alice", 100_000).await;
    let calls = (0..=MAX_BATCH_CALLS)
        .map(|i| charge(&format!("s-{i}"), "alice", 1))
        .collect();
    let refused = steps(stack.payment.addr)
        .await
        .act_batch(step::StepCallBatch { calls })
        .await
        .expect_err("one call too many");
    assert_eq!(refused.code(), Code::InvalidArgument);
    assert!(refused.message().starts_with("calls:"), "{refused:?}");
    assert_eq!(stack.balance("alice").await, 100_000);
    let empty = steps(stack.inventory.addr)
        .await
        .compensate_batch(step::StepCallBatch { calls: vec![] })
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
    saga_proto::payment::v1::payment_service_client::PaymentServiceClient::new(
        channel(payment.addr).await,
    )
    .deposit(saga_proto::payment::v1::DepositRequest {
        request_id: "seed".into(),
        customer_id: "alice".into(),
        amount_cents: 1_000,
    })
    .await
    .expect("deposit");
    let calls = (0..50)
        .map(|i| charge(&format!("s-{i}"), "alice", 1))
        .collect();
    let refused = steps(payment.addr)
        .await
        .act_batch(step::StepCallBatch { calls })
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
