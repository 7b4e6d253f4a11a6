//! A saga the store refuses to save (a document too large, a failed
//! validation: `StoreError::Rejected`) is not retried blindly nor lost: it
//! stays at its last saved state, marked for attention — shown by GetSaga,
//! listed by `ListSagas(needs_attention)` and by the console's JSON API
//! (`/api/sagas?attention=true`, read by its Needs attention page) — and once the cause is fixed
//! recovery resumes it, the mark goes, and the participants' deduplication
//! keeps the effect it had already caused to exactly one.

use saga_proto::saga::v1 as pb;
use saga_tests::intercepted_store::{InterceptedStore, REFUSAL};
use saga_tests::{Stack, Storage, fast_retry, order_request};
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;
use tokio::time::Instant;

/// Short, so recovery retries a refused saga often within the test.
const LEASE_TTL: Duration = Duration::from_millis(600);
const LIMIT: Duration = Duration::from_secs(20);

async fn flagged(
    sagas: &mut pb::saga_service_client::SagaServiceClient<tonic::transport::Channel>,
) -> Vec<pb::Saga> {
    sagas
        .list_sagas(pb::ListSagasRequest {
            needs_attention: true,
            page_size: 50,
            ..Default::default()
        })
        .await
        .expect("list needs_attention")
        .into_inner()
        .sagas
}

#[tokio::test]
async fn a_saga_the_store_refuses_is_marked_listed_and_resumed_once_the_cause_is_fixed() {
    let stack = Stack::without_orchestrator().await;
    println!("storage target: embedded (SQLite) behind a store that refuses saves on demand");
    stack.deposit("alice", 10_000).await;
    stack.add_stock("sku-1", 10).await;
    let store = Arc::new(InterceptedStore::new(
        Storage::from(stack.dir.path()).sagas().await,
    ));
    store.refuse_saves.store(true, Ordering::SeqCst);
    let settings = saga_tests::instance_settings("only-instance", LEASE_TTL, fast_retry());
    let console = saga_tests::listener("127.0.0.1:0".parse().unwrap()).await;
    let console_addr = console.local_addr().expect("console addr").to_string();
    let orchestrator = stack
        .orchestrator_harness()
        .store(store.clone())
        .settings(settings)
        .console(console)
        .start()
        .await;
    let channel = saga_tests::channel(orchestrator.addr).await;
    let mut sagas = pb::saga_service_client::SagaServiceClient::new(channel.clone());
    assert!(flagged(&mut sagas).await.is_empty());

    let created = pb::order_service_client::OrderServiceClient::new(channel)
        .create_order(order_request(
            "too-large-1",
            "alice",
            &[("sku-1", 2, 300)],
            false,
        ))
        .await
        .expect("create")
        .into_inner();
    let saga_id = created.saga_id;

    // The first save after the charge is refused: the saga is marked and
    // listed, still at the version its creation stored.
    let started = Instant::now();
    let marked = loop {
        if let Some(s) = flagged(&mut sagas)
            .await
            .into_iter()
            .find(|s| s.saga_id == saga_id)
        {
            break s;
        }
        assert!(
            started.elapsed() < LIMIT,
            "the refused saga was never marked for attention"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    let first = marked.attention.clone().expect("attention");
    assert!(first.reason.contains(REFUSAL), "{first:?}");
    assert_eq!(
        marked.version, 1,
        "the stored state is the last accepted one"
    );
    assert_eq!(marked.status(), pb::SagaStatus::Running);

    // Recovery retries it after each lease and is refused again: still
    // marked, since the first refusal.
    let refused = store.refused_saves.load(Ordering::SeqCst);
    let started = Instant::now();
    let again = loop {
        let now = flagged(&mut sagas)
            .await
            .into_iter()
            .find(|s| s.saga_id == saga_id);
        if let Some(s) = now
            && store.refused_saves.load(Ordering::SeqCst) >= refused + 2
            && s.attention.as_ref().and_then(|a| a.last) != first.last
        {
            break s;
        }
        assert!(
            started.elapsed() < LIMIT,
            "recovery did not retry the refused saga"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    let again = again.attention.expect("attention");
    assert_eq!(again.since, first.since, "marked since the first refusal");
    assert_eq!(
        stack.balance("alice").await,
        10_000 - 600,
        "charged before the refusal"
    );

    // The console lists it too (its JSON API, which the Needs attention
    // page reads), with the store's reason; combined with a status filter
    // it is refused naming the parameter.
    let (code, body) = saga_tests::http::get(&console_addr, "/api/sagas?attention=true")
        .await
        .expect("GET the console");
    assert_eq!(code, 200, "{body}");
    let listed: serde_json::Value = serde_json::from_str(&body).expect("json");
    let listed = listed["sagas"].as_array().expect("sagas").clone();
    assert_eq!(listed.len(), 1, "{body}");
    assert_eq!(listed[0]["saga_id"], saga_id.as_str());
    let reason = listed[0]["attention"]["reason"]
        .as_str()
        .unwrap_or_default();
    assert!(reason.contains(REFUSAL), "{body}");
    let (code, body) =
        saga_tests::http::get(&console_addr, "/api/sagas?attention=true&status=RUNNING")
            .await
            .expect("GET the console");
    assert_eq!(code, 400, "{body}");
    assert!(body.contains(r#""field":"attention""#), "{body}");

    // Combining the filter with a status is refused, naming the field.
    let error = sagas
        .list_sagas(pb::ListSagasRequest {
            needs_attention: true,
            status: pb::SagaStatus::Running.into(),
            ..Default::default()
        })
        .await
        .expect_err("needs_attention with status");
    assert_eq!(error.code(), tonic::Code::InvalidArgument);
    assert!(error.message().starts_with("needs_attention"), "{error:?}");

    // The cause is fixed: recovery resumes the saga, which completes with
    // one charge and one deduction, and the mark is gone.
    store.refuse_saves.store(false, Ordering::SeqCst);
    let started = Instant::now();
    let done = loop {
        let s = sagas
            .get_saga(pb::GetSagaRequest {
                lookup: Some(pb::get_saga_request::Lookup::SagaId(saga_id.clone())),
            })
            .await
            .expect("get")
            .into_inner();
        if s.status() == pb::SagaStatus::Completed {
            break s;
        }
        assert!(
            started.elapsed() < LIMIT,
            "the saga was not resumed after the fix: {s:?}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    assert_eq!(done.attention, None);
    assert!(flagged(&mut sagas).await.is_empty());
    let (code, body) = saga_tests::http::get(&console_addr, "/api/sagas?attention=true")
        .await
        .expect("GET the console");
    assert_eq!(code, 200, "{body}");
    assert!(
        body.contains(r#""sagas":[]"#),
        "the console's list is empty again: {body}"
    );
    assert_eq!(stack.balance("alice").await, 10_000 - 600, "charged once");
    assert_eq!(stack.stock("sku-1").await, 8, "deducted once");

    orchestrator.stop().await;
    stack.stop().await;
}
