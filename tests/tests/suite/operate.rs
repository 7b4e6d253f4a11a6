//! Operating the orchestrator: WatchSaga streams, the in-flight cap, and a
//! graceful shutdown whose interrupted saga completes after restart. Each
//! test starts exactly the orchestrator instances it talks about.

use saga_proto::saga::v1 as pb;
use saga_tests::{Service, Stack, fast_retry, order_request, test_settings, wait_terminal};
use std::time::Duration;
use tokio_stream::StreamExt;

async fn orchestrator_with(stack: &Stack, settings: orchestrator::Settings) -> saga_tests::Running {
    stack
        .orchestrator_harness()
        .settings(settings)
        .start()
        .await
}

fn patient() -> orchestrator::executor::RetryPolicy {
    let mut retry = fast_retry();
    retry.action_attempts = 10_000;
    retry
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn watch_saga_streams_every_state_until_terminal() {
    let mut stack = Stack::without_orchestrator().await;
    stack.deposit("alice", 1_000).await;
    stack.add_stock("sku-pear", 3).await;
    // Hold the saga at the charge so the watcher sees it live.
    stack.halt(Service::Payment).await;
    let orchestrator = orchestrator_with(&stack, test_settings(patient(), 0)).await;
    let channel = saga_tests::channel(orchestrator.addr).await;
    let reply = pb::order_service_client::OrderServiceClient::new(channel.clone())
        .create_order(order_request(
            "watch-1",
            "alice",
            &[("sku-pear", 5, 100)],
            false,
        ))
        .await
        .expect("create")
        .into_inner();
    let mut stream = pb::saga_service_client::SagaServiceClient::new(channel.clone())
        .watch_saga(pb::WatchSagaRequest {
            saga_id: reply.saga_id.clone(),
        })
        .await
        .expect("watch")
        .into_inner();
    let first = stream.next().await.expect("current state").expect("ok");
    assert_eq!(first.status(), pb::SagaStatus::Running);
    stack.restart(Service::Payment).await;

    let mut states = vec![first];
    while let Some(state) = tokio::time::timeout(Duration::from_secs(10), stream.next())
        .await
        .expect("stream keeps moving")
    {
        states.push(state.expect("ok"));
    }
    let last = states.last().expect("states");
    assert_eq!(
        last.status(),
        pb::SagaStatus::Cancelled,
        "5 pears, 3 in stock"
    );
    let versions: Vec<u64> = states.iter().map(|s| s.version).collect();
    assert!(
        versions.windows(2).all(|w| w[0] < w[1]),
        "strictly newer states: {versions:?}"
    );
    // Two changes may arrive as one message (WatchSaga's contract), so the
    // COMPENSATING state itself may be skipped under load; its transition
    // is in the history every message carries.
    assert!(
        last.history
            .iter()
            .any(|t| t.step.is_empty() && t.to == "compensating"),
        "the saga compensated: {:?}",
        last.history
    );
    // Every transition reached the watcher (in the history it carries).
    let stored =
        saga_tests::wait_terminal(orchestrator.addr, &reply.saga_id, Duration::from_secs(1)).await;
    assert_eq!(last.history, stored.history);

    // Watching a finished saga yields it once; an unknown one is NOT_FOUND.
    let mut again = pb::saga_service_client::SagaServiceClient::new(channel.clone())
        .watch_saga(pb::WatchSagaRequest {
            saga_id: reply.saga_id.clone(),
        })
        .await
        .expect("watch")
        .into_inner();
    assert_eq!(
        again.next().await.expect("one").expect("ok").version,
        last.version
    );
    assert!(again.next().await.is_none());
    let missing = pb::saga_service_client::SagaServiceClient::new(channel)
        .watch_saga(pb::WatchSagaRequest {
            saga_id: "nope".into(),
        })
        .await
        .expect_err("unknown saga");
    assert_eq!(missing.code(), tonic::Code::NotFound);
    orchestrator.stop().await;
    stack.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn beyond_the_in_flight_cap_create_order_is_refused_and_stores_nothing() {
    let mut stack = Stack::without_orchestrator().await;
    stack.deposit("alice", 1_000).await;
    stack.add_stock("sku-apple", 10).await;
    stack.halt(Service::Payment).await;
    let mut settings = test_settings(patient(), 0);
    settings.max_in_flight = 2;
    let orchestrator = orchestrator_with(&stack, settings).await;
    let mut orders = pb::order_service_client::OrderServiceClient::new(
        saga_tests::channel(orchestrator.addr).await,
    );
    for i in 0..2 {
        orders
            .create_order(order_request(
                &format!("cap-{i}"),
                "alice",
                &[("sku-apple", 1, 10)],
                false,
            ))
            .await
            .expect("within the cap");
    }
    let refused = orders
        .create_order(order_request(
            "cap-2",
            "alice",
            &[("sku-apple", 1, 10)],
            false,
        ))
        .await
        .expect_err("over the cap");
    assert_eq!(refused.code(), tonic::Code::ResourceExhausted);
    let info = tonic_types::StatusExt::get_details_error_info(&refused).expect("ErrorInfo");
    assert_eq!(
        (info.domain.as_str(), info.reason.as_str()),
        ("saga.v1", "TOO_MANY_SAGAS_IN_FLIGHT")
    );
    assert_eq!(info.metadata["cap"], "2");
    // A duplicate of an admitted order is still answered.
    let duplicate = orders
        .create_order(order_request(
            "cap-0",
            "alice",
            &[("sku-apple", 1, 10)],
            false,
        ))
        .await
        .expect("duplicate")
        .into_inner();
    assert!(!duplicate.created);
    let listed = pb::saga_service_client::SagaServiceClient::new(
        saga_tests::channel(orchestrator.addr).await,
    )
    .list_sagas(pb::ListSagasRequest::default())
    .await
    .expect("list")
    .into_inner();
    assert_eq!(listed.sagas.len(), 2, "the refused order left no saga");

    // Once the participant is back the admitted sagas finish and free room.
    stack.restart(Service::Payment).await;
    for s in &listed.sagas {
        wait_terminal(orchestrator.addr, &s.saga_id, Duration::from_secs(60)).await;
    }
    // A finished saga's slot is given back when its driver ends, just after
    // the terminal state is stored: wait for the room itself. A refusal
    // stores nothing, so asking again is safe.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    let admitted = loop {
        match orders
            .create_order(order_request(
                "cap-2",
                "alice",
                &[("sku-apple", 1, 10)],
                true,
            ))
            .await
        {
            Ok(reply) => break reply.into_inner(),
            Err(status) if status.code() == tonic::Code::ResourceExhausted => {
                assert!(
                    tokio::time::Instant::now() < deadline,
                    "no room 30 s after both sagas finished: {status:?}"
                );
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
            Err(status) => panic!("room again: {status:?}"),
        }
    };
    assert!(admitted.created);
    assert_eq!(admitted.status(), pb::SagaStatus::Completed);
    orchestrator.stop().await;
    stack.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_saga_interrupted_by_graceful_shutdown_completes_after_restart() {
    let mut stack = Stack::without_orchestrator().await;
    stack.deposit("alice", 1_000).await;
    stack.add_stock("sku-apple", 10).await;
    stack.halt(Service::Inventory).await;
    // Instance "first" holds the saga at the deduct, then shuts down.
    let mut settings = test_settings(patient(), 0);
    settings.lease.owner = "first".into();
    settings.lease.ttl = Duration::from_secs(60);
    // A grace period no test waits out: if the saga held shutdown instead
    // of pausing, stopping would take 10 minutes.
    settings.shutdown_grace = Duration::from_secs(600);
    let orchestrator = orchestrator_with(&stack, settings).await;
    let reply = pb::order_service_client::OrderServiceClient::new(
        saga_tests::channel(orchestrator.addr).await,
    )
    .create_order(order_request(
        "shutdown-1",
        "alice",
        &[("sku-apple", 2, 100)],
        false,
    ))
    .await
    .expect("create")
    .into_inner();
    let sagas = stack.storage.sagas().await;
    // Generous: a loaded 2-core machine once needed over 10 s here.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    loop {
        let s = sagas
            .get(&reply.saga_id)
            .await
            .expect("get")
            .expect("exists");
        if s.steps[1].attempts >= 2 {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "deduct never retried"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // The saga pauses at once: stop returns because every driver ended
    // (the executor drained), not because the grace period ran out — the
    // bound is 10x below the grace and far above the few milliseconds a
    // pause takes.
    tokio::time::timeout(Duration::from_secs(60), orchestrator.stop())
        .await
        .expect("the saga paused instead of holding shutdown for the grace period");
    let paused = sagas
        .get(&reply.saga_id)
        .await
        .expect("get")
        .expect("exists");
    assert_eq!(paused.status, orchestrator::saga::SagaStatus::Running);
    assert_eq!(paused.lease, None, "the lease was released at shutdown");
    // What it finished stays finished; what it had not, it left as it was.
    assert_eq!(
        paused.steps[0].status,
        orchestrator::saga::StepStatus::Succeeded,
        "{paused:?}"
    );
    assert_eq!(
        paused.steps[1].status,
        orchestrator::saga::StepStatus::Running,
        "the deduct left unfinished: {paused:?}"
    );

    // Another instance (a different owner, 60 s leases) continues at once:
    // only the released lease allows that.
    stack.restart(Service::Inventory).await;
    let untouched = sagas
        .get(&reply.saga_id)
        .await
        .expect("get")
        .expect("exists");
    assert_eq!(
        untouched.version, paused.version,
        "nothing drove the saga after the first instance stopped"
    );
    let mut settings = test_settings(patient(), 0);
    settings.lease.owner = "second".into();
    let orchestrator = orchestrator_with(&stack, settings).await;
    let done = wait_terminal(orchestrator.addr, &reply.saga_id, Duration::from_secs(10)).await;
    assert_eq!(done.status(), pb::SagaStatus::Completed);
    // Inside first's 60 s lease: the history shows second claimed the
    // released saga — no takeover, nobody else.
    assert_eq!(
        saga_tests::ownership_changes(&done),
        ["claimed by second (no lease held)"]
    );
    assert_eq!(stack.balance("alice").await, 800);
    assert_eq!(stack.stock("sku-apple").await, 8);
    orchestrator.stop().await;
    stack.stop().await;
}
