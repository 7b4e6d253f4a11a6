//! Failure handling: crash recovery, lease takeover between instances, and
//! FAILED sagas resumed by RetrySaga.

use async_trait::async_trait;
use orchestrator::saga::{Saga, StepState};
use orchestrator::step::{SagaDefinition, SagaStep, StepOutcome};
use saga_proto::saga::v1 as pb;
use saga_tests::crash::CrashableOrchestrator;
use saga_tests::wrapped_step::{StepHook, Wrapped};
use saga_tests::{Service, Stack, Storage, fast_retry, start_order, step_named, wait_terminal};
use service_kit::clock::{Clock, FastForwardClock, SharedClock};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

fn settings(owner: &str, ttl_ms: u64) -> orchestrator::Settings {
    let mut retry = fast_retry();
    retry.action_attempts = 10_000;
    saga_tests::instance_settings(owner, Duration::from_millis(ttl_ms), retry)
}

async fn saga(addr: std::net::SocketAddr, saga_id: &str) -> pb::Saga {
    pb::saga_service_client::SagaServiceClient::new(saga_tests::channel(addr).await)
        .get_saga(pb::GetSagaRequest {
            lookup: Some(pb::get_saga_request::Lookup::SagaId(saga_id.into())),
        })
        .await
        .expect("get saga")
        .into_inner()
}

/// Waits until `check` holds for the saga (or panics).
async fn until(
    addr: std::net::SocketAddr,
    saga_id: &str,
    what: &str,
    check: impl Fn(&pb::Saga) -> bool,
) -> pb::Saga {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(15);
    loop {
        let s = saga(addr, saga_id).await;
        if check(&s) {
            return s;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "timed out waiting for {what}: {s:?}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

fn crashable(
    storage: Storage,
    stack: &Stack,
    settings: orchestrator::Settings,
) -> CrashableOrchestrator {
    let definition = saga_tests::order_saga(stack.payment.addr, stack.inventory.addr);
    tokio::task::block_in_place(|| CrashableOrchestrator::start(storage, definition, settings))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_crashed_orchestrator_resumes_its_sagas_at_once_on_restart() {
    let mut stack = Stack::without_orchestrator().await;
    stack.deposit("alice", 1_000).await;
    stack.add_stock("sku-apple", 10).await;
    let storage = stack.storage.clone();
    // Inventory is down: the saga charges, then keeps retrying the deduct.
    stack.halt(Service::Inventory).await;

    // A long lease: only "same owner restarts" can explain a quick resume.
    let first = crashable(storage.clone(), &stack, settings("instance-a", 60_000));
    let saga_id = start_order(first.addr, "crash-1", "alice", &[("sku-apple", 2, 100)]).await;
    until(first.addr, &saga_id, "deduct retries", |s| {
        s.steps
            .iter()
            .any(|st| st.name == "inventory" && st.attempts >= 3)
    })
    .await;
    tokio::task::block_in_place(|| first.crash());

    stack.restart(Service::Inventory).await;
    let second = crashable(storage.clone(), &stack, settings("instance-a", 60_000));
    // Well inside the 60 s lease: only "its own lease, after a restart"
    // can explain it, and the history says so.
    let done = wait_terminal(second.addr, &saga_id, Duration::from_secs(15)).await;
    assert_eq!(done.status(), pb::SagaStatus::Completed);
    let resumed: Vec<&str> = done
        .history
        .iter()
        .map(|t| t.detail.as_str())
        .filter(|d| d.starts_with("resumed by") || d.starts_with("taken over"))
        .collect();
    assert_eq!(
        resumed,
        ["resumed by instance-a (its own lease, after a restart)"]
    );
    assert_eq!(stack.balance("alice").await, 800, "charged once");
    assert_eq!(stack.stock("sku-apple").await, 8, "deducted once");
    tokio::task::block_in_place(|| second.crash());
    stack.stop().await;
}

/// The step deadline runs per driver: a step that an earlier run of the
/// instance started longer ago than the deadline is, once resumed, retried
/// for a whole deadline again — not given up (and the order cancelled) on
/// the first error after the restart.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_resumed_step_gets_its_whole_deadline_again() {
    let mut stack = Stack::without_orchestrator().await;
    stack.deposit("alice", 1_000).await;
    stack.add_stock("sku-apple", 10).await;
    let storage = stack.storage.clone();
    stack.halt(Service::Inventory).await;
    let clock = FastForwardClock::new();
    let with_deadline = || {
        let mut s = settings("instance-a", 60_000);
        s.retry.step_deadline = Duration::from_millis(1_000);
        s.clock = clock.clone();
        s
    };
    let first = crashable(storage.clone(), &stack, with_deadline());
    let saga_id = start_order(
        first.addr,
        "deadline-restart-1",
        "alice",
        &[("sku-apple", 1, 100)],
    )
    .await;
    until(first.addr, &saga_id, "deduct retries", |s| {
        s.steps
            .iter()
            .any(|st| st.name == "inventory" && st.attempts >= 2)
    })
    .await;
    tokio::task::block_in_place(|| first.crash());
    // Past the deadline counted from the step's start.
    clock.fast_forward(Duration::from_millis(1_200));

    let second = crashable(storage, &stack, with_deadline());
    until(second.addr, &saga_id, "retries after the restart", |s| {
        s.history.iter().any(|t| t.detail.starts_with("resumed by"))
            && s.steps
                .iter()
                .any(|st| st.name == "inventory" && st.attempts >= 4)
    })
    .await;
    let retrying = saga(second.addr, &saga_id).await;
    assert_eq!(
        retrying.status(),
        pb::SagaStatus::Running,
        "not given up: {}",
        retrying.reason
    );
    stack.restart(Service::Inventory).await;
    let done = wait_terminal(second.addr, &saga_id, Duration::from_secs(15)).await;
    assert_eq!(done.status(), pb::SagaStatus::Completed, "{}", done.reason);
    assert_eq!(stack.balance("alice").await, 900, "charged once");
    assert_eq!(stack.stock("sku-apple").await, 9, "deducted once");
    tokio::task::block_in_place(|| second.crash());
    stack.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn another_instance_takes_over_a_saga_whose_lease_expired() {
    let mut stack = Stack::without_orchestrator().await;
    stack.deposit("alice", 1_000).await;
    stack.add_stock("sku-apple", 10).await;
    let storage = stack.storage.clone();
    stack.halt(Service::Payment).await;

    // Exactly two instances on the store: A drives, B sweeps.
    let a = crashable(storage.clone(), &stack, settings("instance-a", 1_000));
    let b = crashable(storage.clone(), &stack, settings("instance-b", 1_000));
    let saga_id = start_order(a.addr, "lease-1", "alice", &[("sku-apple", 1, 100)]).await;
    // A keeps retrying the charge, renewing its lease with every save.
    let before = until(a.addr, &saga_id, "charge retries", |s| {
        s.steps
            .iter()
            .any(|st| st.name == "payment" && st.attempts >= 12)
    })
    .await;
    assert_eq!(before.lease_owner, "instance-a");
    assert!(
        takeovers(&before).is_empty(),
        "B took a live lease: {:?}",
        takeovers(&before)
    );
    let crashed_at_ms = service_kit::time::now_ms();
    tokio::task::block_in_place(|| a.crash());
    stack.restart(Service::Payment).await;
    let done = wait_terminal(b.addr, &saga_id, Duration::from_secs(15)).await;
    assert_eq!(done.status(), pb::SagaStatus::Completed);
    assert_eq!(done.lease_owner, "", "a terminal saga holds no lease");

    // The history names who took over, from whom, and when: once, by B,
    // after A's last lease expired (and after A was gone).
    let taken = takeovers(&done);
    assert_eq!(taken.len(), 1, "{:?}", done.history);
    let (at_ms, detail) = &taken[0];
    let prefix = "taken over by instance-b: the lease of instance-a expired at ";
    let expired_at: i64 = detail
        .strip_prefix(prefix)
        .unwrap_or_else(|| panic!("{detail}"))
        .parse()
        .expect("expiry");
    assert!(
        *at_ms >= expired_at,
        "taken over at {at_ms}, before {expired_at}"
    );
    assert!(*at_ms >= crashed_at_ms, "taken over while A was alive");
    assert_eq!(stack.balance("alice").await, 900, "charged once");
    tokio::task::block_in_place(|| b.crash());
    stack.stop().await;
}

/// The saga's ownership transitions (time in ms, detail).
fn takeovers(saga: &pb::Saga) -> Vec<(i64, String)> {
    saga.history
        .iter()
        .filter(|t| t.detail.starts_with("taken over by"))
        .map(|t| (millis(t.at), t.detail.clone()))
        .collect()
}

/// A timestamp of the saga as milliseconds since the epoch (0 when unset).
fn millis(at: Option<prost_types::Timestamp>) -> i64 {
    let at = at.unwrap_or_default();
    at.seconds * 1000 + i64::from(at.nanos) / 1_000_000
}

/// A real step, except that its compensation fails while `broken`.
struct BrokenCompensation {
    inner: Arc<dyn SagaStep>,
    broken: Arc<AtomicBool>,
}

#[async_trait]
impl StepHook for BrokenCompensation {
    fn inner(&self) -> &Arc<dyn SagaStep> {
        &self.inner
    }

    async fn compensate(&self, saga: &Saga, step: &StepState) -> StepOutcome {
        if self.broken.load(Ordering::SeqCst) {
            return StepOutcome::Transient("refund path is broken (test)".into());
        }
        self.inner.compensate(saga, step).await
    }
}

/// An orchestrator over `stack` whose compensations fail while `broken`,
/// with `retry_window` (see `RetentionSettings::retry_window`).
async fn orchestrator_with_broken_compensations(
    stack: &Stack,
    broken: &Arc<AtomicBool>,
    retry_window: Option<Duration>,
    clock: SharedClock,
) -> saga_tests::Running {
    let steps = saga_tests::participants(stack.payment.addr, stack.inventory.addr)
        .into_iter()
        .map(|inner| {
            Wrapped::step(BrokenCompensation {
                inner,
                broken: broken.clone(),
            })
        })
        .collect();
    let definition = Arc::new(SagaDefinition::new(steps).expect("definition"));
    let mut retry = fast_retry();
    retry.compensation_attempts = 3;
    saga_tests::OrchestratorHarness::new(stack.storage.clone(), definition)
        .retry(retry)
        .adjust(move |settings| {
            settings.retention.retry_window = retry_window;
            settings.clock = clock;
        })
        .start()
        .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_saga_waits_for_a_person_and_retry_saga_finishes_it() {
    let stack = Stack::without_orchestrator().await;
    stack.deposit("alice", 1_000).await;
    stack.add_stock("sku-pear", 3).await;
    let broken = Arc::new(AtomicBool::new(true));
    let orchestrator = orchestrator_with_broken_compensations(
        &stack,
        &broken,
        Some(Duration::from_secs(3600)),
        service_kit::clock::system(),
    )
    .await;
    let mut sagas = pb::saga_service_client::SagaServiceClient::new(
        saga_tests::channel(orchestrator.addr).await,
    );

    // 5 pears, 3 in stock: charged, deduct refused, refund keeps failing.
    let saga_id = start_order(
        orchestrator.addr,
        "failed-1",
        "alice",
        &[("sku-pear", 5, 100)],
    )
    .await;
    let failed = wait_terminal(orchestrator.addr, &saga_id, Duration::from_secs(10)).await;
    assert_eq!(failed.status(), pb::SagaStatus::Failed);
    assert!(failed.reason.contains("refund"), "{}", failed.reason);
    let payment = step_named(&failed, "payment");
    assert_eq!(payment.status(), pb::StepStatus::Compensating);
    assert_eq!(payment.compensation_attempts, 3);
    assert_eq!(
        stack.balance("alice").await,
        500,
        "still charged: needs attention"
    );
    let listed = sagas
        .list_sagas(pb::ListSagasRequest {
            status: pb::SagaStatus::Failed.into(),
            ..Default::default()
        })
        .await
        .expect("list")
        .into_inner();
    let failed_ids: Vec<&str> = listed.sagas.iter().map(|s| s.saga_id.as_str()).collect();
    assert_eq!(failed_ids, [saga_id.as_str()]);

    // Nothing happens on its own: FAILED is terminal until a person acts —
    // no instance's sweep may claim it, however late it looks.
    let store = stack.storage.sagas().await;
    let claimable = store
        .claimable(i64::MAX, None, 1_000)
        .await
        .expect("claimable");
    assert!(
        claimable.iter().all(|s| s.saga_id != saga_id),
        "a FAILED saga is claimable"
    );
    assert_eq!(
        saga(orchestrator.addr, &saga_id).await.version,
        failed.version
    );

    // The person fixes the cause and retries.
    broken.store(false, Ordering::SeqCst);
    let resumed = sagas
        .retry_saga(pb::RetrySagaRequest {
            saga_id: saga_id.clone(),
        })
        .await
        .expect("retry")
        .into_inner();
    assert_eq!(resumed.status(), pb::SagaStatus::Compensating);
    let done = wait_terminal(orchestrator.addr, &saga_id, Duration::from_secs(10)).await;
    assert_eq!(done.status(), pb::SagaStatus::Cancelled);
    assert!(
        done.history
            .iter()
            .any(|t| t.detail == "resumed by RetrySaga")
    );
    assert_eq!(stack.balance("alice").await, 1_000, "refunded exactly once");

    // Only FAILED sagas can be retried; unknown ones are NOT_FOUND.
    let again = sagas
        .retry_saga(pb::RetrySagaRequest {
            saga_id: saga_id.clone(),
        })
        .await
        .expect_err("not failed any more");
    assert_eq!(again.code(), tonic::Code::FailedPrecondition);
    let missing = sagas
        .retry_saga(pb::RetrySagaRequest {
            saga_id: "nope".into(),
        })
        .await
        .expect_err("unknown");
    assert_eq!(missing.code(), tonic::Code::NotFound);
    orchestrator.stop().await;
    stack.stop().await;
}

/// Past the retry window (the participants' history retention less the
/// time a retry's calls take) their records of a saga's steps may be gone,
/// and a refund could not tell "done" from "never done": RetrySaga refuses
/// with FAILED_PRECONDITION naming the window, and changes nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn retry_saga_refuses_a_failed_saga_older_than_the_retry_window() {
    let stack = Stack::without_orchestrator().await;
    stack.deposit("alice", 1_000).await;
    stack.add_stock("sku-pear", 3).await;
    let broken = Arc::new(AtomicBool::new(true));
    let window = Duration::from_millis(300);
    let clock = FastForwardClock::new();
    let orchestrator =
        orchestrator_with_broken_compensations(&stack, &broken, Some(window), clock.clone()).await;
    let saga_id = start_order(
        orchestrator.addr,
        "too-late-1",
        "alice",
        &[("sku-pear", 5, 100)],
    )
    .await;
    let failed = wait_terminal(orchestrator.addr, &saga_id, Duration::from_secs(10)).await;
    assert_eq!(failed.status(), pb::SagaStatus::Failed);
    let created_ms = millis(failed.created_at);
    assert!(created_ms > 0, "created_at is set");
    let window_ms = i64::try_from(window.as_millis()).expect("ms");
    let past = created_ms + window_ms + 1 - clock.now_ms();
    clock.fast_forward(Duration::from_millis(u64::try_from(past).unwrap_or(0)));
    broken.store(false, Ordering::SeqCst);
    let mut sagas = pb::saga_service_client::SagaServiceClient::new(
        saga_tests::channel(orchestrator.addr).await,
    );
    let refused = sagas
        .retry_saga(pb::RetrySagaRequest {
            saga_id: saga_id.clone(),
        })
        .await
        .expect_err("past the retry window");
    assert_eq!(refused.code(), tonic::Code::FailedPrecondition);
    assert!(
        refused.message().contains("retry window") && refused.message().contains("300ms"),
        "{}",
        refused.message()
    );
    let after = saga(orchestrator.addr, &saga_id).await;
    assert_eq!(after.status(), pb::SagaStatus::Failed);
    assert_eq!(after.version, failed.version, "nothing was written");
    assert_eq!(stack.balance("alice").await, 500, "no refund was sent");
    orchestrator.stop().await;
    stack.stop().await;
}

/// Past its send window (the participants' history retention less the
/// longest time one request id's calls take) a saga is sent nothing more,
/// whatever it was doing — its records may be gone, and a repeated deduct
/// could apply twice: it ends FAILED, naming the window, with its steps as
/// they were for a person to reconcile, and nothing lands later.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_saga_past_its_send_window_sends_nothing_more_and_waits_for_a_person() {
    let mut stack = Stack::with_inventory_down().await;
    let retry = saga_tests::retry_until(Duration::from_secs(600));
    let clock = FastForwardClock::new();
    let orchestrator = stack
        .orchestrator_harness()
        .retry(retry)
        .adjust({
            let clock = clock.clone();
            move |settings| {
                settings.retention.send_window = Some(Duration::from_millis(700));
                settings.clock = clock;
            }
        })
        .start()
        .await;
    let saga_id = start_order(
        orchestrator.addr,
        "send-window-1",
        "alice",
        &[("sku-apple", 1, 100)],
    )
    .await;
    let failed = wait_terminal(orchestrator.addr, &saga_id, Duration::from_secs(10)).await;
    assert_eq!(failed.status(), pb::SagaStatus::Failed);
    assert!(
        failed.reason.contains("send window of 700ms") && failed.reason.contains("by hand"),
        "{}",
        failed.reason
    );
    let step = |name: &str| step_named(&failed, name).clone();
    assert_eq!(step("payment").status(), pb::StepStatus::Succeeded);
    let deduct = step("inventory");
    assert_eq!(
        deduct.status(),
        pb::StepStatus::Running,
        "its effect is unknown"
    );
    assert!(deduct.attempts > 1, "it was retried within the window");
    assert_eq!(
        stack.balance("alice").await,
        900,
        "charged, and no refund sent: a person reconciles"
    );

    // Inventory answers again: the saga stays as it was and no deduct lands.
    // Hours pass at once (any retry still pending would fire now), and an
    // order placed after it completes through the same orchestrator.
    stack.restart(Service::Inventory).await;
    clock.fast_forward(Duration::from_secs(3 * 3_600));
    let probe = start_order(
        orchestrator.addr,
        "send-window-probe",
        "alice",
        &[("sku-apple", 2, 1)],
    )
    .await;
    let probed = wait_terminal(orchestrator.addr, &probe, Duration::from_secs(10)).await;
    assert_eq!(
        probed.status(),
        pb::SagaStatus::Completed,
        "{}",
        probed.reason
    );
    assert_eq!(
        saga(orchestrator.addr, &saga_id).await.version,
        failed.version
    );
    assert_eq!(
        stack.stock("sku-apple").await,
        8,
        "only the probe's 2 units were deducted"
    );
    orchestrator.stop().await;
    stack.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_step_past_its_deadline_is_compensated_and_cannot_land_later() {
    let mut stack = Stack::with_inventory_down().await;
    let retry = saga_tests::retry_until(Duration::from_millis(400));
    let orchestrator = stack.orchestrator_harness().retry(retry).start().await;
    let saga_id = start_order(
        orchestrator.addr,
        "deadline-1",
        "alice",
        &[("sku-apple", 1, 100)],
    )
    .await;
    // The deduct's outcome is unknown after the deadline: it is compensated
    // too, before the charge, so the saga waits for inventory to answer.
    let giving_up = until(orchestrator.addr, &saga_id, "give up", |s| {
        s.status() == pb::SagaStatus::Compensating
    })
    .await;
    assert!(
        giving_up.reason.contains("deadline"),
        "{}",
        giving_up.reason
    );
    stack.restart(Service::Inventory).await;
    let done = wait_terminal(orchestrator.addr, &saga_id, Duration::from_secs(10)).await;
    assert_eq!(done.status(), pb::SagaStatus::Cancelled);
    let inventory_step = step_named(&done, "inventory");
    assert_eq!(inventory_step.status(), pb::StepStatus::Compensated);
    assert_eq!(
        stack.balance("alice").await,
        1_000,
        "the charge was refunded"
    );

    // The restock arrived before any deduct: a null compensation. The
    // deduct arriving late (say, a delayed packet) is refused and takes
    // nothing.
    let late = saga_tests::steps(stack.inventory.addr)
        .await
        .act(saga_tests::step_call_of(&done, "inventory"))
        .await
        .expect("a refusal is an answer")
        .into_inner();
    assert_eq!(
        (late.outcome(), late.reason_code.as_str()),
        (
            saga_proto::participant::v1::act_reply::Outcome::Refused,
            "ALREADY_COMPENSATED"
        ),
        "{late:?}"
    );
    assert_eq!(stack.stock("sku-apple").await, 10);
    orchestrator.stop().await;
    stack.stop().await;
}
