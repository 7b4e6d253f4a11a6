//! A third step whose effect no transaction can undo: the order saga with
//! the media-upload participant of `examples/media-upload` (a Node.js child
//! process on `@saga/participant` over MongoDB, uploading one object per
//! order line to a fake HTTP media store, itself a child process) after
//! payment and inventory — on the embedded orchestrator store and on
//! MongoDB, every call carrying the service token.
//!
//! - `a_three_step_order_uploads_one_object_per_line`
//! - `a_refusal_after_the_media_step_deletes_its_objects`: a fourth step
//!   (loyalty-svc) refuses; the media step's compensation deletes what it
//!   uploaded, inventory restocks, payment refunds.
//! - `a_media_step_that_gives_up_deletes_what_landed`: every PUT lands and
//!   its reply is lost, until the step's budget is spent; its null
//!   compensation deletes the object that landed.
//! - `media_killed_between_put_and_commit_ends_consistently`: the
//!   participant SIGKILLed while the store holds two PUTs' replies, then
//!   started again; one saga completes, one is refused after it and
//!   compensates through a store whose DELETE fails three times.
//!
//! The example must be installed (`scripts/test-examples.sh --build-only`;
//! the test command does it first). Without it these tests skip with a
//! printed reason, or fail under `CI=true` / `REQUIRE_EXAMPLES=1`. Its
//! MongoDB is the test target (SecantusDB unless `MONGODB_URI` is set),
//! each test in a database of its own; the kill scenario starts a
//! SecantusDB of its own.

saga_tests::on_every_backend_bare!(
    a_three_step_order_uploads_one_object_per_line,
    a_refusal_after_the_media_step_deletes_its_objects,
    a_media_step_that_gives_up_deletes_what_landed,
    media_killed_between_put_and_commit_ends_consistently,
);

use orchestrator::executor::RetryPolicy;
use orchestrator::steps_file::StepSpec;
use saga_proto::participant::v1::Operation;
use saga_proto::saga::v1 as pb;
use saga_tests::loyalty::Loyalty;
use saga_tests::media_upload::{
    Fault, MediaApp, MediaConfig, MediaProcess, MediaStore, StoreState, saga_with_media,
};
use saga_tests::mongo_server::{MongoServer, ServerOptions};
use saga_tests::step_named as step;
use saga_tests::{
    OrchestratorHarness, Stack, compensation_order, fast_retry, start_order, wait_terminal,
};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// The service token of the media participant and of the orchestrator's
/// calls.
const TOKEN: &str = "media-upload-token";

/// The customer the loyalty step refuses.
const BLOCKED: &str = "mallory";

/// The media store and the participant uploading to it.
struct Media {
    store: MediaStore,
    participant: MediaProcess,
}

/// Both on `uri` (a database of its own), the participant's requests to
/// the store allowed `call_timeout_ms` when given; `None` when they cannot
/// run here (and are not required).
async fn media_on(uri: &str, call_timeout_ms: Option<u64>) -> Option<Media> {
    let app = MediaApp::find()?;
    let store = MediaStore::start(&app)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let mut config = MediaConfig::new(uri, &store);
    config.service_token = Some(TOKEN.to_owned());
    config.call_timeout_ms = call_timeout_ms;
    let participant = MediaProcess::start(&app, config)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    Some(Media { store, participant })
}

/// [`media_on`] the MongoDB test target.
async fn media() -> Option<Media> {
    let target = saga_tests::backends::mongo()?;
    media_on(&target.uri, None).await
}

/// The stack's orchestrator for payment, inventory, then `more`, retrying
/// as `retry`, calling with the token.
async fn with_steps(mut stack: Stack, more: &[StepSpec], retry: RetryPolicy) -> Stack {
    let definition = saga_with_media(stack.payment.addr, stack.inventory.addr, more, Some(TOKEN));
    let orchestrator = OrchestratorHarness::new(stack.storage.clone(), definition)
        .retry(retry)
        .start()
        .await;
    stack.orchestrator = Some(orchestrator);
    stack
}

/// (kind, status) of each record, sorted: the two records of a null
/// compensation come in either order.
fn kinds(records: &[Operation]) -> Vec<(&str, &str)> {
    let mut kinds: Vec<(&str, &str)> = records
        .iter()
        .map(|r| (r.kind.as_str(), r.status.as_str()))
        .collect();
    kinds.sort();
    kinds
}

/// The order's lines as the saga stores them: (product, quantity, price).
fn lines(saga: &pb::Saga) -> Vec<(String, i64, i64)> {
    saga.order
        .as_ref()
        .expect("the saga's order")
        .items
        .iter()
        .map(|i| (i.product_id.clone(), i.quantity, i.unit_price_cents))
        .collect()
}

/// The store holds exactly one object per line of `saga`'s order, each
/// naming its request id, saga, line and product, each created once.
fn holds_one_object_per_line(state: &StoreState, saga: &pb::Saga) {
    let request_id = &step(saga, "media").request_id;
    let uploads = state.uploads_of(request_id);
    let lines = lines(saga);
    assert_eq!(uploads.len(), lines.len(), "{state:?}");
    for (i, ((object, upload), (product, _, _))) in uploads.iter().zip(&lines).enumerate() {
        assert_eq!(upload.line_index, i, "{state:?}");
        assert_eq!(&upload.product_id, product, "{state:?}");
        assert_eq!(upload.saga_id, saga.saga_id);
        assert_eq!(
            state.created.get(&object.key),
            Some(&1),
            "object {} created more than once: {state:?}",
            object.key
        );
    }
}

/// `saga`'s media objects are gone: its intents all marked `deleted`, no
/// object of its request id left, each of the keys the store created for
/// it created once.
async fn objects_deleted(media: &Media, state: &StoreState, saga: &pb::Saga) {
    let request_id = &step(saga, "media").request_id;
    assert!(state.uploads_of(request_id).is_empty(), "{state:?}");
    let intents = media.participant.intents(request_id).await;
    assert_eq!(intents.len(), lines(saga).len(), "{intents:?}");
    for intent in &intents {
        assert_eq!(intent.status, "deleted", "{intents:?}");
        assert!(
            state.created.get(&intent.key).is_none_or(|n| *n == 1),
            "object {} created more than once: {state:?}",
            intent.key
        );
    }
}

async fn a_three_step_order_uploads_one_object_per_line(stack: Stack) {
    let Some(media) = media().await else {
        return;
    };
    let stack = with_steps(stack, &[media.participant.step()], fast_retry()).await;
    stack.deposit("alice", 10_000).await;
    for product in ["sku-apple", "sku-pear", "sku-plum"] {
        stack.add_stock(product, 10).await;
    }

    let reply = stack
        .order(
            "o-media",
            "alice",
            &[
                ("sku-apple", 2, 150),
                ("sku-pear", 1, 200),
                ("sku-plum", 3, 100),
            ],
        )
        .await
        .expect("create order");
    assert_eq!(reply.status(), pb::SagaStatus::Completed, "{reply:?}");
    let saga = reply.saga.expect("saga returned with wait");
    let names: Vec<&str> = saga.steps.iter().map(|s| s.name.as_str()).collect();
    assert_eq!(names, ["payment", "inventory", "media"]);
    let upload = step(&saga, "media");
    assert_eq!(upload.status(), pb::StepStatus::Succeeded);
    assert_eq!(
        (upload.action.as_str(), upload.compensation.as_str()),
        ("upload_media", "delete_media")
    );
    assert_eq!(upload.request_id, format!("{}:media", saga.saga_id));
    assert_eq!(stack.balance("alice").await, 10_000 - 300 - 200 - 300);
    assert_eq!(stack.stock("sku-apple").await, 8);
    assert_eq!(stack.stock("sku-pear").await, 9);
    assert_eq!(stack.stock("sku-plum").await, 7);

    // Three objects, one per line, and nothing else; one `act applied`.
    let state = media.store.state().await;
    holds_one_object_per_line(&state, &saga);
    assert_eq!(state.objects.len(), 3, "{state:?}");
    let records = media.participant.records(&upload.request_id).await;
    assert_eq!(kinds(&records), [("act", "applied")]);
    assert_eq!(records[0].detail, "3 objects uploaded");
    let intents = media.participant.intents(&upload.request_id).await;
    assert!(
        intents.iter().all(|i| i.status == "intended") && intents.len() == 3,
        "{intents:?}"
    );
    stack.stop().await;
}

async fn a_refusal_after_the_media_step_deletes_its_objects(stack: Stack) {
    let Some(media) = media().await else {
        return;
    };
    let loyalty = Loyalty::start(&stack.storage, &[BLOCKED]).await;
    let stack = with_steps(
        stack,
        &[media.participant.step(), loyalty.step()],
        fast_retry(),
    )
    .await;
    stack.deposit(BLOCKED, 10_000).await;
    stack.add_stock("sku-apple", 10).await;
    stack.add_stock("sku-pear", 10).await;

    let reply = stack
        .order(
            "o-blocked",
            BLOCKED,
            &[("sku-apple", 1, 100), ("sku-pear", 2, 250)],
        )
        .await
        .expect("create order");
    assert_eq!(reply.status(), pb::SagaStatus::Cancelled, "{reply:?}");
    let saga = reply.saga.expect("saga");
    assert_eq!(step(&saga, "loyalty").status(), pb::StepStatus::Refused);
    assert_eq!(saga.refusal_code, "CUSTOMER_BLOCKED");
    for name in ["media", "inventory", "payment"] {
        assert_eq!(
            step(&saga, name).status(),
            pb::StepStatus::Compensated,
            "{name}: {saga:?}"
        );
    }
    // Compensations in reverse order of the steps: delete, restock, refund.
    assert_eq!(compensation_order(&saga), ["media", "inventory", "payment"]);

    // Money and stock as before; both objects uploaded once, then deleted.
    assert_eq!(stack.balance(BLOCKED).await, 10_000);
    assert_eq!(stack.stock("sku-apple").await, 10);
    assert_eq!(stack.stock("sku-pear").await, 10);
    let state = media.store.state().await;
    objects_deleted(&media, &state, &saga).await;
    assert!(state.objects.is_empty(), "{state:?}");
    assert_eq!(state.created.len(), 2, "{state:?}");
    assert_eq!(state.counts.deleted, 2, "{state:?}");
    let request_id = &step(&saga, "media").request_id;
    let records = media.participant.records(request_id).await;
    assert_eq!(
        kinds(&records),
        [("act", "applied"), ("compensate", "undone")]
    );
    assert_eq!(loyalty.points(BLOCKED).await, None);
    stack.stop().await;
    loyalty.stop().await;
}

async fn a_media_step_that_gives_up_deletes_what_landed(stack: Stack) {
    let Some(media) = media().await else {
        return;
    };
    let retry = fast_retry();
    let stack = with_steps(stack, &[media.participant.step()], retry.clone()).await;
    stack.deposit("bob", 10_000).await;
    stack.add_stock("sku-apple", 10).await;
    stack.add_stock("sku-pear", 10).await;
    // Every PUT is applied and its reply lost: each attempt uploads line 0,
    // fails there, and records nothing.
    media.store.fault("PUT", Fault::Lose, None).await;

    let reply = stack
        .order(
            "o-lost",
            "bob",
            &[("sku-apple", 1, 100), ("sku-pear", 1, 100)],
        )
        .await
        .expect("create order");
    assert_eq!(reply.status(), pb::SagaStatus::Cancelled, "{reply:?}");
    let saga = reply.saga.expect("saga");
    let upload = step(&saga, "media");
    assert!(
        saga.reason.contains("upload_media gave up after"),
        "{}",
        saga.reason
    );
    assert_eq!(upload.attempts, retry.action_attempts, "{saga:?}");
    // The step that gave up is compensated too (its Act may have landed),
    // then inventory and payment.
    assert_eq!(upload.status(), pb::StepStatus::Compensated);
    assert_eq!(compensation_order(&saga), ["media", "inventory", "payment"]);
    assert_eq!(stack.balance("bob").await, 10_000);
    assert_eq!(stack.stock("sku-apple").await, 10);
    assert_eq!(stack.stock("sku-pear").await, 10);

    // The first line's object landed (once), the second was never
    // uploaded; the null compensation deleted the first through
    // `compensateUnapplied`. No Act ever committed.
    let state = media.store.state().await;
    media.store.clear_faults().await;
    objects_deleted(&media, &state, &saga).await;
    assert!(state.objects.is_empty(), "{state:?}");
    let intents = media.participant.intents(&upload.request_id).await;
    assert_eq!(
        state.created.keys().collect::<Vec<_>>(),
        [&intents[0].key],
        "{state:?}"
    );
    assert_eq!(state.counts.deleted, 1, "{state:?}");
    assert_eq!(
        state.injected.get("lose").copied(),
        u32::try_from(state.counts.put).ok(),
        "{state:?}"
    );
    assert!(
        state.counts.put >= u64::from(retry.action_attempts),
        "{state:?}"
    );
    let records = media.participant.records(&upload.request_id).await;
    assert_eq!(
        kinds(&records),
        [("act", "blocked"), ("compensate", "null_compensation")]
    );
    stack.stop().await;
}

/// Retries that outlast a restart of the media participant and the
/// transaction its SIGKILL left open (its MongoDB's transaction lifetime,
/// 5 s here).
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

/// DELETEs the store fails after the kill.
const DELETE_FAILURES: u32 = 3;

fn now_ms() -> u64 {
    let since = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .expect("a clock after 1970");
    u64::try_from(since.as_millis()).expect("ms fit u64")
}

/// Two orders go to the media step at once, alice's and mallory's (whom the
/// fourth step refuses). The store applies the first PUT of each and holds
/// its reply; the participant is SIGKILLed while both Acts wait for those
/// replies — uploaded, not committed — and started again. Then:
///
/// - alice's saga ends COMPLETED with both objects, each created once, one
///   `act applied` — or, if its step ran out of time, CANCELLED with them
///   deleted;
/// - mallory's ends CANCELLED: her media step was retried to applied (or
///   gave up), and its compensation, through a store whose DELETE fails
///   three times, was retried by the orchestrator until it deleted both
///   objects;
/// - no object was ever created twice, money and stock moved by the
///   completed order only.
async fn media_killed_between_put_and_commit_ends_consistently(stack: Stack) {
    if MediaApp::find().is_none() || saga_tests::backends::mongo().is_none() {
        return;
    }
    // A MongoDB of its own, whose transaction lifetime (5 s) bounds how
    // long the killed process's open transaction holds its Acts' keys.
    let logs = tempfile::tempdir().expect("a directory for the server's log");
    let server = tokio::task::spawn_blocking({
        let log = logs.path().join("secantusdb.log");
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
    .expect("a SecantusDB for the media participant");
    // Each request to the store may wait 4 s: the kill lands well inside.
    let Some(mut media) = media_on(&server.uri(), Some(4_000)).await else {
        return;
    };
    let loyalty = Loyalty::start(&stack.storage, &[BLOCKED]).await;
    let stack = with_steps(
        stack,
        &[media.participant.step(), loyalty.step()],
        patient(),
    )
    .await;
    for customer in ["alice", BLOCKED] {
        stack.deposit(customer, 10_000).await;
    }
    stack.add_stock("sku-apple", 10).await;
    stack.add_stock("sku-pear", 10).await;
    media.store.fault("PUT", Fault::HoldReply, Some(2)).await;

    let addr = stack.orchestrator().addr;
    let kept = start_order(
        addr,
        "o-kept",
        "alice",
        &[("sku-apple", 1, 100), ("sku-pear", 1, 200)],
    )
    .await;
    let undone = start_order(
        addr,
        "o-undone",
        BLOCKED,
        &[("sku-apple", 2, 100), ("sku-pear", 1, 200)],
    )
    .await;
    let request_ids = [format!("{kept}:media"), format!("{undone}:media")];

    // Both Acts wait for their first PUT's reply: the PUT is applied, the
    // Act's transaction open.
    let held = media.store.wait_held(2, Duration::from_secs(60)).await;
    assert!(
        held.held
            .iter()
            .all(|h| h.method == "PUT" && h.client_gone_at.is_none()),
        "{held:?}"
    );
    for request_id in &request_ids {
        let uploaded = held.uploads_of(request_id);
        assert_eq!(uploaded.len(), 1, "line 0 of {request_id}: {held:?}");
        assert_eq!(uploaded[0].1.line_index, 0);
    }
    media
        .store
        .fault("DELETE", Fault::Fail, Some(DELETE_FAILURES))
        .await;
    let killed_at = now_ms();
    media.participant.kill9().expect("SIGKILL media-upload");

    // The calls were cut by the kill, not by their own timeout; nothing
    // was committed, the intents were.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    let gone = loop {
        let state = media.store.state().await;
        if state.held.iter().all(|h| h.client_gone_at.is_some()) {
            break state;
        }
        assert!(tokio::time::Instant::now() < deadline, "{state:?}");
        tokio::time::sleep(Duration::from_millis(10)).await;
    };
    for h in &gone.held {
        assert!(
            h.client_gone_at.is_some_and(|at| at >= killed_at),
            "a held PUT's caller left before the SIGKILL at {killed_at}: {gone:?}"
        );
    }
    for request_id in &request_ids {
        assert_eq!(
            media.participant.committed_records(request_id).await,
            0,
            "{request_id}"
        );
        let intents = media.participant.intents(request_id).await;
        assert_eq!(intents.len(), 2, "{intents:?}");
        assert!(
            intents.iter().all(|i| i.status == "intended"),
            "{intents:?}"
        );
    }
    assert_eq!(media.store.release().await, 2);
    media
        .participant
        .restart()
        .await
        .expect("restart media-upload");

    let mut sagas = Vec::new();
    for id in [&kept, &undone] {
        sagas.push(wait_terminal(addr, id, Duration::from_secs(180)).await);
    }
    let state = media.store.state().await;
    let log = media.participant.log_tail();
    let (kept, undone) = (&sagas[0], &sagas[1]);

    // Alice: completed with her two objects, or cancelled without them.
    let kept_media = step(kept, "media");
    assert!(
        kept_media.attempts > 1,
        "the killed Act was not retried: {kept:?}"
    );
    let kept_records = media.participant.records(&kept_media.request_id).await;
    match kept.status() {
        pb::SagaStatus::Completed => {
            holds_one_object_per_line(&state, kept);
            assert_eq!(kinds(&kept_records), [("act", "applied")]);
            assert_eq!(stack.balance("alice").await, 10_000 - 300);
            assert_eq!(loyalty.points("alice").await, Some(3));
        }
        pb::SagaStatus::Cancelled => {
            objects_deleted(&media, &state, kept).await;
            assert_eq!(stack.balance("alice").await, 10_000);
        }
        other => panic!("alice's saga ended {other:?}: {kept:?}\nmedia-upload's log:\n{log}"),
    }

    // Mallory: cancelled, her objects deleted by a compensation the
    // orchestrator retried past the store's failures.
    assert_eq!(
        undone.status(),
        pb::SagaStatus::Cancelled,
        "{undone:?}\nmedia-upload's log:\n{log}"
    );
    let undone_media = step(undone, "media");
    assert_eq!(undone_media.status(), pb::StepStatus::Compensated);
    assert_eq!(
        compensation_order(undone),
        ["media", "inventory", "payment"]
    );
    objects_deleted(&media, &state, undone).await;
    assert_eq!(
        state.injected.get("fail").copied(),
        Some(DELETE_FAILURES),
        "{state:?}"
    );
    if kept.status() == pb::SagaStatus::Completed {
        // Hers were the only DELETEs: one failed attempt per failure, then
        // the one that deleted both.
        assert!(
            undone_media.compensation_attempts > DELETE_FAILURES,
            "{undone:?}"
        );
        assert!(
            undone
                .history
                .iter()
                .any(|t| t.step == "media" && t.detail.contains("media store DELETE answered 500")),
            "no failed compensation in the history: {undone:?}"
        );
    }
    let undone_records = media.participant.records(&undone_media.request_id).await;
    let undone_kinds = kinds(&undone_records);
    assert!(
        undone_kinds == [("act", "applied"), ("compensate", "undone")]
            || undone_kinds == [("act", "blocked"), ("compensate", "null_compensation")],
        "{undone_records:?}"
    );
    assert_eq!(stack.balance(BLOCKED).await, 10_000);
    assert_eq!(loyalty.points(BLOCKED).await, None);

    // No object created twice; the store holds exactly the completed
    // order's objects; stock moved by it alone.
    assert!(state.created.values().all(|n| *n == 1), "{state:?}");
    let completed = kept.status() == pb::SagaStatus::Completed;
    assert_eq!(
        state.objects.len(),
        if completed { 2 } else { 0 },
        "{state:?}"
    );
    let sold = i64::from(completed);
    assert_eq!(stack.stock("sku-apple").await, 10 - sold);
    assert_eq!(stack.stock("sku-pear").await, 10 - sold);
    eprintln!(
        "alice's saga {:?} (media attempts {}), mallory's {:?} (media attempts {}, compensation attempts {})",
        kept.status(),
        kept_media.attempts,
        undone.status(),
        undone_media.attempts,
        undone_media.compensation_attempts
    );
    stack.stop().await;
    loyalty.stop().await;
    drop(media);
    drop(server);
}
