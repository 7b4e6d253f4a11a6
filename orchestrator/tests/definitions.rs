//! Saga definitions of 1, 2, 3 and 5 steps run through the real executor
//! and a real (embedded) saga store, with fake participants that record
//! every call: steps run in order, a refusal compensates the earlier steps
//! in reverse, an unknown outcome is compensated before the earlier steps,
//! and a compensation that keeps failing leaves the saga FAILED.

use async_trait::async_trait;
use embedded_store::Durability;
use orchestrator::engine;
use orchestrator::executor::{Executor, LeasePolicy, RetryPolicy};
use orchestrator::hub::SagaHub;
use orchestrator::saga::{Order, Saga, SagaStatus, StepState, StepStatus};
use orchestrator::step::{ParticipantRecord, SagaDefinition, SagaStep, StepOutcome};
use orchestrator::store::{Created, SagaStore, SqliteSagaStore};
use service_kit::shutdown::Shutdown;
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// Names of the fake steps; a definition of `n` steps uses the first `n`.
const NAMES: [&str; 5] = ["alpha", "beta", "gamma", "delta", "epsilon"];

/// How a fake participant answers.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Answer {
    Applies,
    Refuses,
    /// Always UNAVAILABLE-like: the outcome stays unknown.
    Unreachable,
}

/// A participant that answers as told and logs `do <name>` / `undo <name>`.
struct FakeStep {
    name: &'static str,
    action: Answer,
    compensation: Answer,
    log: Arc<Mutex<Vec<String>>>,
}

impl FakeStep {
    fn answer(&self, answer: Answer, what: &str, step: &StepState) -> StepOutcome {
        assert_eq!(step.request_id, format!("saga-1:{}", self.name));
        if let Ok(mut log) = self.log.lock() {
            log.push(format!("{what} {}", self.name));
        }
        match answer {
            Answer::Applies => StepOutcome::Done,
            Answer::Refuses => StepOutcome::Refused("no (fake)".into()),
            Answer::Unreachable => StepOutcome::Transient("unreachable (fake)".into()),
        }
    }
}

#[async_trait]
impl SagaStep for FakeStep {
    fn name(&self) -> &'static str {
        self.name
    }

    fn action(&self) -> &'static str {
        "do"
    }

    fn compensation(&self) -> &'static str {
        "undo"
    }

    async fn act(&self, _saga: &Saga, step: &StepState) -> StepOutcome {
        self.answer(self.action, "do", step)
    }

    async fn compensate(&self, _saga: &Saga, step: &StepState) -> StepOutcome {
        self.answer(self.compensation, "undo", step)
    }

    async fn records(
        &self,
        _saga: &Saga,
        _step: &StepState,
    ) -> Result<Vec<ParticipantRecord>, String> {
        Ok(Vec::new())
    }
}

/// Runs a saga of `n` fake steps whose actions answer `action(i)` and whose
/// compensations answer `compensation`, to its end. Returns the call log
/// and the final saga (as stored).
async fn run(
    n: usize,
    action: impl Fn(usize) -> Answer,
    compensation: Answer,
) -> (Vec<String>, Saga) {
    let log = Arc::new(Mutex::new(Vec::new()));
    let steps: Vec<Arc<dyn SagaStep>> = NAMES[..n]
        .iter()
        .enumerate()
        .map(|(i, name)| {
            Arc::new(FakeStep {
                name,
                action: action(i),
                compensation,
                log: log.clone(),
            }) as Arc<dyn SagaStep>
        })
        .collect();
    let definition = Arc::new(SagaDefinition::new(steps).expect("definition"));
    let dir = tempfile::tempdir().expect("tempdir");
    let store: Arc<dyn SagaStore> = Arc::new(
        SqliteSagaStore::open(&dir.path().join("sagas.db"), Durability::Process).expect("store"),
    );
    let retry = RetryPolicy {
        action_attempts: 3,
        compensation_attempts: 3,
        min_delay: Duration::from_millis(1),
        max_delay: Duration::from_millis(2),
        step_deadline: Duration::from_secs(30),
    };
    let lease = LeasePolicy {
        owner: "test".into(),
        ttl: Duration::from_secs(30),
        sweep_interval: Duration::from_secs(1),
    };
    let settings = orchestrator::Settings {
        retry,
        lease,
        max_in_flight: 16,
        ..orchestrator::Settings::default()
    };
    let executor = Executor::new(
        store.clone(),
        definition.clone(),
        Arc::new(SagaHub::new()),
        Shutdown::new(),
        &settings,
    );
    let order = Order {
        order_id: "order-1".into(),
        customer_id: "c".into(),
        items: Vec::new(),
        total_cents: 0,
    };
    let mut saga = engine::start(
        definition.names(),
        "saga-1".into(),
        "req-1".into(),
        "fp".into(),
        order,
        service_kit::time::now_ms(),
    );
    saga.version = 1;
    saga.lease = Some(executor.new_lease());
    assert_eq!(store.create(&saga).await.expect("create"), Created::New);
    let done = executor.drive(saga).await.expect("drive");
    let stored = store.get("saga-1").await.expect("get").expect("stored");
    assert_eq!(stored, done, "the final state is persisted");
    let calls = log.lock().map(|l| l.clone()).unwrap_or_default();
    (calls, stored)
}

fn calls(list: &[String]) -> Vec<&str> {
    list.iter().map(String::as_str).collect()
}

#[tokio::test]
async fn a_three_step_saga_runs_its_steps_in_order() {
    let (log, saga) = run(3, |_| Answer::Applies, Answer::Applies).await;
    assert_eq!(calls(&log), ["do alpha", "do beta", "do gamma"]);
    assert_eq!(saga.status, SagaStatus::Completed);
}

#[tokio::test]
async fn a_refusal_at_any_position_undoes_the_earlier_steps_in_reverse() {
    for n in [1, 2, 3, 5] {
        for k in 0..n {
            let (log, saga) = run(
                n,
                |i| {
                    if i == k {
                        Answer::Refuses
                    } else {
                        Answer::Applies
                    }
                },
                Answer::Applies,
            )
            .await;
            let mut expected: Vec<String> = NAMES[..=k].iter().map(|s| format!("do {s}")).collect();
            expected.extend(NAMES[..k].iter().rev().map(|s| format!("undo {s}")));
            assert_eq!(log, expected, "{n} steps, refused at {k}");
            assert_eq!(
                saga.status,
                SagaStatus::Cancelled,
                "{n} steps, refused at {k}"
            );
            assert_eq!(saga.steps[k].status, StepStatus::Refused);
        }
    }
}

#[tokio::test]
async fn an_unknown_outcome_is_compensated_before_the_earlier_steps() {
    for n in [1, 2, 3, 5] {
        let k = n - 1;
        let (log, saga) = run(
            n,
            |i| {
                if i == k {
                    Answer::Unreachable
                } else {
                    Answer::Applies
                }
            },
            Answer::Applies,
        )
        .await;
        let mut expected: Vec<String> = NAMES[..k].iter().map(|s| format!("do {s}")).collect();
        // Three attempts (the budget), then the compensation of that very
        // step, then the earlier ones in reverse.
        expected.extend(std::iter::repeat_n(format!("do {}", NAMES[k]), 3));
        expected.extend(NAMES[..=k].iter().rev().map(|s| format!("undo {s}")));
        assert_eq!(log, expected, "{n} steps");
        assert_eq!(saga.status, SagaStatus::Cancelled);
        assert!(
            saga.steps
                .iter()
                .all(|s| s.status == StepStatus::Compensated),
            "{:?}",
            saga.steps
        );
    }
}

#[tokio::test]
async fn a_compensation_that_keeps_failing_leaves_the_saga_failed() {
    let (log, saga) = run(
        3,
        |i| {
            if i == 2 {
                Answer::Refuses
            } else {
                Answer::Applies
            }
        },
        Answer::Unreachable,
    )
    .await;
    assert_eq!(
        calls(&log),
        [
            "do alpha",
            "do beta",
            "do gamma",
            "undo beta",
            "undo beta",
            "undo beta"
        ]
    );
    assert_eq!(saga.status, SagaStatus::Failed);
    assert!(saga.reason.as_deref().is_some_and(|r| r.contains("undo")));
}

/// A definition of the first `n` fake steps, all applying, logging to `log`.
fn applying(n: usize, log: &Arc<Mutex<Vec<String>>>) -> Arc<SagaDefinition> {
    let steps = NAMES[..n]
        .iter()
        .map(|name| {
            Arc::new(FakeStep {
                name,
                action: Answer::Applies,
                compensation: Answer::Applies,
                log: log.clone(),
            }) as Arc<dyn SagaStep>
        })
        .collect();
    Arc::new(SagaDefinition::new(steps).expect("definition"))
}

/// An executor of `definition` named `owner` on `store`, on `clock`.
fn executor_of(
    owner: &str,
    definition: Arc<SagaDefinition>,
    store: &Arc<dyn SagaStore>,
    clock: &Arc<service_kit::clock::ManualClock>,
) -> Arc<Executor> {
    let settings = orchestrator::Settings {
        lease: LeasePolicy {
            owner: owner.into(),
            ttl: Duration::from_secs(15),
            sweep_interval: Duration::from_secs(60),
        },
        clock: clock.clone(),
        ..orchestrator::Settings::default()
    };
    Arc::new(Executor::new(
        store.clone(),
        definition,
        Arc::new(SagaHub::new()),
        Shutdown::new(),
        &settings,
    ))
}

/// The versioning rule: a saga keeps the steps it was created with. An
/// orchestrator whose steps file lacks one of them neither drives it nor
/// fails or compensates it: it leaves the stored saga as it is, marked for
/// a person with the step's name, and one whose steps file has the step
/// again takes it up and finishes it.
#[tokio::test]
async fn a_saga_whose_step_is_no_longer_configured_is_held_for_a_person_then_resumed() {
    use service_kit::clock::{Clock, ManualClock};
    let clock = ManualClock::now();
    let dir = tempfile::tempdir().expect("tempdir");
    let store: Arc<dyn SagaStore> = Arc::new(
        SqliteSagaStore::open(&dir.path().join("sagas.db"), Durability::Process).expect("store"),
    );
    let log = Arc::new(Mutex::new(Vec::new()));
    // Created by a three-step orchestrator that has since gone away.
    let three = applying(3, &log);
    let order = Order {
        order_id: "order-1".into(),
        customer_id: "c".into(),
        items: Vec::new(),
        total_cents: 0,
    };
    let mut saga = engine::start(
        three.names(),
        "saga-1".into(),
        "req-1".into(),
        "fp".into(),
        order,
        clock.now_ms(),
    );
    saga.version = 1;
    saga.lease = Some(orchestrator::saga::Lease {
        owner: "gone".into(),
        until_ms: clock.now_ms() - 1,
    });
    assert_eq!(store.create(&saga).await.expect("create"), Created::New);

    // Restarted with two steps: the saga is held, untouched, and marked.
    let two = executor_of("two-steps", applying(2, &log), &store, &clock);
    assert_eq!(two.sweep(false).await.expect("sweep"), 0, "not claimed");
    let held = store.get("saga-1").await.expect("get").expect("stored");
    assert_eq!(held.version, 1, "no new version");
    assert_eq!(held.status, SagaStatus::Running);
    assert_eq!(held.steps, saga.steps, "steps untouched");
    let attention = held.attention.clone().expect("marked for a person");
    assert!(
        attention.reason.contains("\"gamma\""),
        "{}",
        attention.reason
    );
    assert!(log.lock().expect("log").is_empty(), "no participant called");
    // Not looked at again within the lease period.
    assert_eq!(two.sweep(false).await.expect("sweep"), 0);

    // A configuration with the step again takes it up and finishes it.
    clock.advance(Duration::from_secs(16));
    let three = executor_of("three-steps", three, &store, &clock);
    assert_eq!(three.sweep(false).await.expect("sweep"), 1, "claimed");
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    let done = loop {
        let stored = store.get("saga-1").await.expect("get").expect("stored");
        if stored.status.is_terminal() {
            break stored;
        }
        assert!(std::time::Instant::now() < deadline, "never finished");
        tokio::time::sleep(Duration::from_millis(5)).await;
    };
    assert_eq!(done.status, SagaStatus::Completed);
    assert_eq!(done.attention, None, "the mark is cleared by the next save");
    assert_eq!(
        calls(&log.lock().expect("log")),
        ["do alpha", "do beta", "do gamma"]
    );
}
