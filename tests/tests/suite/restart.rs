//! Restarts: data survives on the same data directory, unfinished sagas
//! resume, and a participant that is down only delays sagas.

use saga_proto::saga::v1 as pb;
use saga_tests::{
    OrchestratorHarness, ParticipantHarness, Service, Stack, fast_retry, order_request,
    wait_terminal,
};
use std::time::Duration;

async fn get(addr: std::net::SocketAddr, saga_id: &str) -> pb::Saga {
    saga_proto::saga::v1::saga_service_client::SagaServiceClient::new(
        saga_tests::channel(addr).await,
    )
    .get_saga(pb::GetSagaRequest {
        lookup: Some(pb::get_saga_request::Lookup::SagaId(saga_id.into())),
    })
    .await
    .expect("get saga")
    .into_inner()
}

/// Waits (60 s at most) until the saga's step `name` has been attempted
/// `attempts` times, and returns the saga as it then stood.
async fn retried(addr: std::net::SocketAddr, saga_id: &str, name: &str, attempts: u32) -> pb::Saga {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    loop {
        let s = get(addr, saga_id).await;
        let step = s.steps.iter().find(|x| x.name == name).expect("step");
        if step.attempts >= attempts {
            return s;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "step {name} not attempted {attempts} times: {s:?}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn services_restarted_on_the_same_data_dir_keep_their_data() {
    let stack = Stack::start().await;
    stack.deposit("alice", 5_000).await;
    stack.add_stock("sku-apple", 10).await;
    let done = stack
        .order("keep-1", "alice", &[("sku-apple", 3, 100)])
        .await
        .expect("order");
    assert_eq!(done.status(), pb::SagaStatus::Completed);
    let dir = stack.stop().await;

    // Same directory, new processes' worth of state: new ports even.
    let payment = ParticipantHarness::new(Service::Payment, dir.path())
        .start()
        .await;
    let inventory = ParticipantHarness::new(Service::Inventory, dir.path())
        .start()
        .await;
    let orchestrator = OrchestratorHarness::order_saga(dir.path(), payment.addr, inventory.addr)
        .start()
        .await;
    assert_eq!(saga_tests::balance(payment.addr, "alice").await, 4_700);
    assert_eq!(saga_tests::stock(inventory.addr, "sku-apple").await, 7);
    let saga = get(orchestrator.addr, &done.saga_id).await;
    assert_eq!(saga.status(), pb::SagaStatus::Completed);

    // The idempotency key still holds after the restart.
    let again = saga_proto::saga::v1::order_service_client::OrderServiceClient::new(
        saga_tests::channel(orchestrator.addr).await,
    )
    .create_order(order_request(
        "keep-1",
        "alice",
        &[("sku-apple", 3, 100)],
        true,
    ))
    .await
    .expect("duplicate")
    .into_inner();
    assert!(!again.created);
    assert_eq!(again.saga_id, done.saga_id);
    assert_eq!(saga_tests::balance(payment.addr, "alice").await, 4_700);
    orchestrator.stop().await;
    payment.stop().await;
    inventory.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unfinished_saga_resumes_after_the_orchestrator_restarts() {
    let stack = Stack::without_orchestrator().await;
    stack.deposit("alice", 1_000).await;
    stack.add_stock("sku-apple", 10).await;
    let Stack {
        dir,
        payment,
        inventory,
        ..
    } = stack;
    let inventory_addr = inventory.addr;
    inventory.stop().await;

    // The charge goes through; the deduct keeps failing while inventory is down.
    let mut patient = fast_retry();
    patient.action_attempts = 1_000;
    let orchestrator = OrchestratorHarness::order_saga(dir.path(), payment.addr, inventory_addr)
        .retry(patient.clone())
        .start()
        .await;
    let reply = saga_proto::saga::v1::order_service_client::OrderServiceClient::new(
        saga_tests::channel(orchestrator.addr).await,
    )
    .create_order(order_request(
        "resume-1",
        "alice",
        &[("sku-apple", 2, 100)],
        false,
    ))
    .await
    .expect("create")
    .into_inner();
    let s = retried(orchestrator.addr, &reply.saga_id, "inventory", 3).await;
    assert_eq!(s.status(), pb::SagaStatus::Running);
    let inventory_step = s.steps.iter().find(|x| x.name == "inventory");
    assert!(!inventory_step.expect("step").last_error.is_empty());
    let orchestrator_addr = orchestrator.addr;
    orchestrator.stop().await;

    // Inventory is back, and a new orchestrator on the same store resumes.
    let inventory = ParticipantHarness::new(Service::Inventory, dir.path())
        .on(inventory_addr)
        .start()
        .await;
    let orchestrator = OrchestratorHarness::order_saga(dir.path(), payment.addr, inventory.addr)
        .retry(patient)
        .on(orchestrator_addr)
        .start()
        .await;
    let saga = wait_terminal(orchestrator.addr, &reply.saga_id, Duration::from_secs(60)).await;
    assert_eq!(saga.status(), pb::SagaStatus::Completed);
    assert_eq!(
        saga_tests::balance(payment.addr, "alice").await,
        800,
        "charged once"
    );
    assert_eq!(
        saga_tests::stock(inventory.addr, "sku-apple").await,
        8,
        "deducted once"
    );
    orchestrator.stop().await;
    payment.stop().await;
    inventory.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_participant_that_is_down_only_delays_the_saga() {
    let stack = Stack::without_orchestrator().await;
    stack.deposit("alice", 1_000).await;
    stack.add_stock("sku-apple", 10).await;
    let Stack {
        dir,
        payment,
        inventory,
        ..
    } = stack;
    let payment_addr = payment.addr;
    payment.stop().await;
    let mut patient = fast_retry();
    patient.action_attempts = 1_000;
    let orchestrator = OrchestratorHarness::order_saga(dir.path(), payment_addr, inventory.addr)
        .retry(patient)
        .start()
        .await;
    let reply = saga_proto::saga::v1::order_service_client::OrderServiceClient::new(
        saga_tests::channel(orchestrator.addr).await,
    )
    .create_order(order_request(
        "delayed-1",
        "alice",
        &[("sku-apple", 1, 100)],
        false,
    ))
    .await
    .expect("create")
    .into_inner();
    // The charge has failed and been retried while payment is down, and
    // the saga still runs: the outage delays it, nothing more.
    let s = retried(orchestrator.addr, &reply.saga_id, "payment", 3).await;
    assert_eq!(s.status(), pb::SagaStatus::Running, "{s:?}");
    let payment_step = s.steps.iter().find(|x| x.name == "payment");
    assert!(!payment_step.expect("step").last_error.is_empty());

    let payment = ParticipantHarness::new(Service::Payment, dir.path())
        .on(payment_addr)
        .start()
        .await;
    let saga = wait_terminal(orchestrator.addr, &reply.saga_id, Duration::from_secs(60)).await;
    assert_eq!(saga.status(), pb::SagaStatus::Completed);
    let payment_step = saga
        .steps
        .iter()
        .find(|x| x.name == "payment")
        .expect("step");
    assert!(
        payment_step.attempts > 1,
        "it was retried: {payment_step:?}"
    );
    assert_eq!(saga_tests::balance(payment.addr, "alice").await, 900);
    orchestrator.stop().await;
    payment.stop().await;
    inventory.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_participant_restarted_under_a_running_orchestrator_is_reconnected() {
    let mut stack = Stack::start().await;
    stack.deposit("alice", 1_000).await;
    stack.add_stock("sku-apple", 10).await;
    // The orchestrator's connections to both participants are open.
    let first = stack
        .order("reconnect-1", "alice", &[("sku-apple", 1, 100)])
        .await
        .expect("order");
    assert_eq!(first.status(), pb::SagaStatus::Completed, "{first:?}");

    // Both go away (their connections close) and come back on the same
    // ports: the next saga connects again, without an orchestrator restart.
    stack.restart(Service::Payment).await;
    stack.restart(Service::Inventory).await;
    let second = stack
        .order("reconnect-2", "alice", &[("sku-apple", 2, 100)])
        .await
        .expect("order");
    assert_eq!(second.status(), pb::SagaStatus::Completed, "{second:?}");
    assert_eq!(stack.balance("alice").await, 700);
    assert_eq!(stack.stock("sku-apple").await, 7);
    stack.stop().await;
}
