//! The saves the executor leaves out, through a real crash.
//!
//! After a first-attempt success the orchestrator sends the next step's
//! action without saving first, as long as its lease is young: a run of
//! first-attempt successes is saved once, at its end (the store then still
//! says "first step running, the others pending"). These tests kill the
//! owner right after a participant applied a later step's action — before
//! anything else was saved — and let a second instance take the saga over
//! from the stale store:
//!
//! - going forward, the saga ends COMPLETED with each effect once (the
//!   participants replay every request id);
//! - when the replayed charge gives up instead, every step the store never
//!   heard of is compensated as well as the charge refunded, because the
//!   claim marked each as possibly sent — on two steps (the deduct) and on
//!   three (the deduct and loyalty-svc's points, a generic step);
//! - with `--save-every-step` the store holds the deduct's intent at that
//!   point (the mode for fleets that still run an earlier build).

use async_trait::async_trait;
use orchestrator::saga::{Saga, SagaStatus, StepState, StepStatus};
use orchestrator::step::{SagaDefinition, SagaStep, StepOutcome};
use orchestrator::steps_file::StepSpec;
use saga_proto::saga::v1 as pb;
use saga_tests::crash::CrashableOrchestrator;
use saga_tests::loyalty::Loyalty;
use saga_tests::wrapped_step::{StepHook, Wrapped};
use saga_tests::{Service, Stack, fast_retry, order_request};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;
use tokio::time::Instant;

/// A real step, except that once its action was applied it never
/// returns: the owner hangs right after the participant's effect, before
/// its next save, until the test kills it.
struct HangsAfterAct {
    inner: Arc<dyn SagaStep>,
    applied: Arc<AtomicBool>,
}

#[async_trait]
impl StepHook for HangsAfterAct {
    fn inner(&self) -> &Arc<dyn SagaStep> {
        &self.inner
    }

    async fn act(&self, saga: &Saga, step: &StepState) -> StepOutcome {
        let outcome = self.inner.act(saga, step).await;
        if outcome == StepOutcome::Done {
            self.applied.store(true, Ordering::SeqCst);
            std::future::pending::<()>().await;
        }
        outcome
    }
}

fn settings(owner: &str, action_attempts: u32, save_every_step: bool) -> orchestrator::Settings {
    let mut retry = fast_retry();
    retry.action_attempts = action_attempts;
    orchestrator::Settings {
        save_every_step,
        ..saga_tests::instance_settings(owner, Duration::from_millis(800), retry)
    }
}

/// The customer's balance and the product's stock before the order.
const BALANCE: i64 = 1_000;
const STOCK: i64 = 10;
/// The order: 2 × 150.
const QUANTITY: i64 = 2;
const PRICE: i64 = 150;

/// Owner A charges and deducts, then hangs and is killed. Returns the saga
/// id and the saga as the store held it at the kill.
async fn kill_after_the_deduct(
    stack: &Stack,
    request_id: &str,
    save_every_step: bool,
) -> (String, Saga) {
    kill_after(stack, request_id, save_every_step, &[], "inventory").await
}

/// Owner A runs the saga of payment, inventory and `more`, hangs right
/// after `last`'s action was applied, and is killed. Returns the saga id
/// and the saga as the store held it at the kill.
async fn kill_after(
    stack: &Stack,
    request_id: &str,
    save_every_step: bool,
    more: &[StepSpec],
    last: &str,
) -> (String, Saga) {
    let applied = Arc::new(AtomicBool::new(false));
    let steps = saga_tests::saga_with_steps(stack.payment.addr, stack.inventory.addr, more)
        .steps()
        .iter()
        .cloned()
        .map(|inner| {
            if inner.name() == last {
                Wrapped::step(HangsAfterAct {
                    inner,
                    applied: applied.clone(),
                })
            } else {
                inner
            }
        })
        .collect();
    let definition = Arc::new(SagaDefinition::new(steps).expect("definition"));
    let storage = stack.storage.clone();
    let a = tokio::task::block_in_place(|| {
        CrashableOrchestrator::start(
            storage,
            definition,
            settings("instance-a", 5, save_every_step),
        )
    });
    let saga_id =
        pb::order_service_client::OrderServiceClient::new(saga_tests::channel(a.addr).await)
            .create_order(order_request(
                request_id,
                "alice",
                &[("sku-1", QUANTITY, PRICE)],
                false,
            ))
            .await
            .expect("create")
            .into_inner()
            .saga_id;
    let deadline = Instant::now() + Duration::from_secs(10);
    while !applied.load(Ordering::SeqCst) {
        assert!(Instant::now() < deadline, "A never applied {last}");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    assert_eq!(stack.balance("alice").await, BALANCE - QUANTITY * PRICE);
    assert_eq!(stack.stock("sku-1").await, STOCK - QUANTITY);
    tokio::task::block_in_place(|| a.crash());
    let stored = stack
        .storage
        .sagas()
        .await
        .get(&saga_id)
        .await
        .expect("read")
        .expect("stored");
    (saga_id, stored)
}

fn statuses(saga: &Saga) -> Vec<StepStatus> {
    saga.steps.iter().map(|s| s.status).collect()
}

/// Starts owner B on the stack's store (unwrapped steps).
fn take_over(stack: &Stack, action_attempts: u32) -> CrashableOrchestrator {
    take_over_with(stack, action_attempts, &[])
}

/// Starts owner B on the stack's store, with payment, inventory and `more`.
fn take_over_with(stack: &Stack, action_attempts: u32, more: &[StepSpec]) -> CrashableOrchestrator {
    let definition = saga_tests::saga_with_steps(stack.payment.addr, stack.inventory.addr, more);
    let storage = stack.storage.clone();
    tokio::task::block_in_place(|| {
        CrashableOrchestrator::start(
            storage,
            definition,
            settings("instance-b", action_attempts, false),
        )
    })
}

/// The history entries a claim wrote for the steps it marked.
fn marked(done: &pb::Saga) -> usize {
    done.history
        .iter()
        .filter(|t| t.detail == "may have been sent by the previous owner after its last save")
        .count()
}

async fn funded_stack() -> Stack {
    let stack = Stack::without_orchestrator().await;
    stack.deposit("alice", BALANCE).await;
    stack.add_stock("sku-1", STOCK).await;
    stack
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_saga_killed_after_an_unsaved_deduct_completes_with_one_charge_and_one_deduct() {
    let stack = funded_stack().await;
    let (saga_id, stored) = kill_after_the_deduct(&stack, "unsaved-forward", false).await;
    assert_eq!(
        (stored.version, statuses(&stored)),
        (1, vec![StepStatus::Running, StepStatus::Pending]),
        "only the insert was saved before the deduct"
    );

    let b = take_over(&stack, 5);
    let done = saga_tests::wait_terminal(b.addr, &saga_id, Duration::from_secs(15)).await;
    assert_eq!(
        done.status(),
        pb::SagaStatus::Completed,
        "{:?}",
        done.history
    );
    assert_eq!(stack.balance("alice").await, BALANCE - QUANTITY * PRICE);
    assert_eq!(stack.stock("sku-1").await, STOCK - QUANTITY);
    tokio::task::block_in_place(|| b.crash());
    stack.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_saga_killed_after_an_unsaved_deduct_that_compensates_restocks_it_too() {
    let mut stack = funded_stack().await;
    let (saga_id, stored) = kill_after_the_deduct(&stack, "unsaved-compensated", false).await;
    assert_eq!(
        statuses(&stored),
        [StepStatus::Running, StepStatus::Pending]
    );

    // B's replay of the charge finds payment down and gives up after one
    // attempt: the saga compensates.
    stack.halt(Service::Payment).await;
    let b = take_over(&stack, 1);
    let store = stack.storage.sagas().await;
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        let saga = store.get(&saga_id).await.expect("read").expect("stored");
        if saga.status == SagaStatus::Compensating {
            assert!(
                matches!(
                    statuses(&saga)[1],
                    StepStatus::Compensating | StepStatus::Compensated
                ),
                "the deduct the store never heard of is compensated first: {:?}",
                saga.history
            );
            break;
        }
        assert!(
            Instant::now() < deadline,
            "B never gave the charge up: {saga:?}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    stack.restart(Service::Payment).await;
    let done = saga_tests::wait_terminal(b.addr, &saga_id, Duration::from_secs(15)).await;
    assert_eq!(
        done.status(),
        pb::SagaStatus::Cancelled,
        "{:?}",
        done.history
    );
    assert!(
        done.history
            .iter()
            .any(|t| t.detail == "may have been sent by the previous owner after its last save"),
        "{:?}",
        done.history
    );
    assert_eq!(
        stack.balance("alice").await,
        BALANCE,
        "the charge was refunded"
    );
    assert_eq!(
        stack.stock("sku-1").await,
        STOCK,
        "the deduct applied before the kill was restocked"
    );
    tokio::task::block_in_place(|| b.crash());
    stack.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_save_every_step_the_store_holds_the_deduct_intent_before_it_is_sent() {
    let stack = funded_stack().await;
    let (saga_id, stored) = kill_after_the_deduct(&stack, "saved-every-step", true).await;
    assert_eq!(
        (stored.version, statuses(&stored)),
        (2, vec![StepStatus::Succeeded, StepStatus::Running])
    );
    let b = take_over(&stack, 5);
    let done = saga_tests::wait_terminal(b.addr, &saga_id, Duration::from_secs(15)).await;
    assert_eq!(done.status(), pb::SagaStatus::Completed);
    assert_eq!(stack.stock("sku-1").await, STOCK - QUANTITY);
    tokio::task::block_in_place(|| b.crash());
    stack.stop().await;
}

/// The points loyalty-svc awards for the order (1 per 100 cents).
const POINTS: i64 = QUANTITY * PRICE / 100;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_three_step_saga_killed_after_its_unsaved_last_action_completes_with_each_effect_once() {
    let stack = funded_stack().await;
    let loyalty = Loyalty::start(&stack.storage, &[]).await;
    let more = [loyalty.step()];
    let (saga_id, stored) = kill_after(&stack, "unsaved-three", false, &more, "loyalty").await;
    assert_eq!(loyalty.points("alice").await, Some(POINTS));
    assert_eq!(
        (stored.version, statuses(&stored)),
        (
            1,
            vec![
                StepStatus::Running,
                StepStatus::Pending,
                StepStatus::Pending
            ]
        ),
        "only the insert was saved before the deduct and the points"
    );

    let b = take_over_with(&stack, 5, &more);
    let done = saga_tests::wait_terminal(b.addr, &saga_id, Duration::from_secs(15)).await;
    assert_eq!(
        done.status(),
        pb::SagaStatus::Completed,
        "{:?}",
        done.history
    );
    assert_eq!(marked(&done), 2, "both unsaved steps marked at the claim");
    assert_eq!(stack.balance("alice").await, BALANCE - QUANTITY * PRICE);
    assert_eq!(stack.stock("sku-1").await, STOCK - QUANTITY);
    assert_eq!(
        loyalty.points("alice").await,
        Some(POINTS),
        "the replayed award applied nothing more"
    );
    tokio::task::block_in_place(|| b.crash());
    loyalty.stop().await;
    stack.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_three_step_saga_killed_unsaved_that_compensates_undoes_every_step_the_store_never_heard_of()
 {
    let mut stack = funded_stack().await;
    let loyalty = Loyalty::start(&stack.storage, &[]).await;
    let more = [loyalty.step()];
    let (saga_id, stored) =
        kill_after(&stack, "unsaved-three-compensated", false, &more, "loyalty").await;
    assert_eq!(
        statuses(&stored),
        [
            StepStatus::Running,
            StepStatus::Pending,
            StepStatus::Pending
        ]
    );

    // B's replay of the charge finds payment down and gives up after one
    // attempt: the saga compensates the points and the deduct it never
    // heard of, in reverse, before the charge.
    stack.halt(Service::Payment).await;
    let b = take_over_with(&stack, 1, &more);
    let store = stack.storage.sagas().await;
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        let saga = store.get(&saga_id).await.expect("read").expect("stored");
        if statuses(&saga)[1] == StepStatus::Compensated {
            assert_eq!(
                statuses(&saga)[2],
                StepStatus::Compensated,
                "the points are revoked before the deduct is restocked: {:?}",
                saga.history
            );
            break;
        }
        assert!(
            Instant::now() < deadline,
            "B never compensated the deduct: {saga:?}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    stack.restart(Service::Payment).await;
    let done = saga_tests::wait_terminal(b.addr, &saga_id, Duration::from_secs(15)).await;
    assert_eq!(
        done.status(),
        pb::SagaStatus::Cancelled,
        "{:?}",
        done.history
    );
    assert_eq!(marked(&done), 2, "{:?}", done.history);
    assert_eq!(
        stack.balance("alice").await,
        BALANCE,
        "the charge was refunded"
    );
    assert_eq!(
        stack.stock("sku-1").await,
        STOCK,
        "the deduct was restocked"
    );
    assert_eq!(
        loyalty.points("alice").await,
        Some(0),
        "the points awarded before the kill were revoked"
    );
    tokio::task::block_in_place(|| b.crash());
    loyalty.stop().await;
    stack.stop().await;
}
