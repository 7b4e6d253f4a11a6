//! The save the executor leaves out, through a real crash.
//!
//! After a first-attempt charge the orchestrator sends the deduct without
//! saving first (the store is then one step behind: it still says "charge
//! running, deduct pending"). These tests kill the owner right after the
//! inventory applied that deduct — before anything else was saved — and let
//! a second instance take the saga over from the stale store:
//!
//! - going forward, the saga ends COMPLETED with one charge and one deduct
//!   (the participants replay both request ids);
//! - when the replayed charge gives up instead, the deduct the store never
//!   heard of is restocked as well as the charge refunded, because the
//!   claim marked it as possibly sent;
//! - with `--save-every-step` the store holds the deduct's intent at that
//!   point (the mode for fleets that still run a version without the
//!   marking).

use async_trait::async_trait;
use orchestrator::saga::{Saga, SagaStatus, StepState, StepStatus};
use orchestrator::step::{SagaDefinition, SagaStep, StepOutcome};
use saga_proto::saga::v1 as pb;
use saga_tests::crash::CrashableOrchestrator;
use saga_tests::wrapped_step::{StepHook, Wrapped};
use saga_tests::{Service, Stack, fast_retry, order_request};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;
use tokio::time::Instant;

/// The real inventory step, except that once its action was applied it
/// never returns: the owner hangs right after the participant's effect,
/// before its next save, until the test kills it.
struct HangsAfterDeduct {
    inner: Arc<dyn SagaStep>,
    applied: Arc<AtomicBool>,
}

#[async_trait]
impl StepHook for HangsAfterDeduct {
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
    let applied = Arc::new(AtomicBool::new(false));
    let steps = saga_tests::participants(stack.payment.addr, stack.inventory.addr)
        .into_iter()
        .map(|inner| {
            if inner.name() == "inventory" {
                Wrapped::step(HangsAfterDeduct {
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
        assert!(Instant::now() < deadline, "A never deducted");
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
    let definition = saga_tests::order_saga(stack.payment.addr, stack.inventory.addr);
    let storage = stack.storage.clone();
    tokio::task::block_in_place(|| {
        CrashableOrchestrator::start(
            storage,
            definition,
            settings("instance-b", action_attempts, false),
        )
    })
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
        "the store is one step behind: only the insert was saved before the deduct"
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
