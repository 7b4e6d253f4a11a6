//! A save the store does not answer at once: the executor waits out an
//! outage and retries the same version, and the saga stays its own.
//!
//! - An outage longer than the lease: the save that finally lands carries a
//!   lease from when it landed, not one that ran out while it waited (which
//!   would let the recovery sweep take over a saga its owner still drives).
//! - A save that committed but whose reply was lost: the retry meets its
//!   own earlier write (with an earlier lease) and goes on; no takeover.
//! - The same for a claim (driven at once, not skipped as this instance's
//!   own until its lease ends) and for RetrySaga (answered, not
//!   UNAVAILABLE).

use saga_proto::saga::v1 as pb;
use saga_tests::intercepted_store::InterceptedStore;
use saga_tests::{OrchestratorHarness, Running, Service, Stack, Storage, fast_retry, start_order};
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;
use tokio::time::Instant;

const TTL: Duration = Duration::from_millis(1_000);

/// An orchestrator over `store`, owner `only-instance`, retrying the
/// charge for as long as the test needs.
async fn orchestrator(stack: &Stack, store: Arc<InterceptedStore>) -> Running {
    orchestrator_on(stack, store, service_kit::clock::system()).await
}

/// [`orchestrator`] on `clock`.
async fn orchestrator_on(
    stack: &Stack,
    store: Arc<InterceptedStore>,
    clock: service_kit::clock::SharedClock,
) -> Running {
    let mut retry = fast_retry();
    retry.action_attempts = 10_000;
    let mut settings = saga_tests::instance_settings("only-instance", TTL, retry);
    settings.clock = clock;
    stack
        .orchestrator_harness()
        .store(store)
        .settings(settings)
        .start()
        .await
}

/// A stack whose payment-svc is down, so the charge is retried and every
/// failed attempt is saved (with a lease) before the next.
async fn stack_with_payment_down() -> (Stack, Arc<InterceptedStore>) {
    let mut stack = Stack::without_orchestrator().await;
    stack.deposit("alice", 1_000).await;
    stack.add_stock("sku-1", 10).await;
    stack.halt(Service::Payment).await;
    let store = Arc::new(InterceptedStore::new(
        Storage::from(stack.dir.path()).sagas().await,
    ));
    (stack, store)
}

/// Waits for `what` to hold, for at most 15 s.
async fn until(what: &str, mut condition: impl AsyncFnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(15);
    while !condition().await {
        assert!(Instant::now() < deadline, "never happened: {what}");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// Brings payment-svc back and checks the saga then completes, charged
/// once, driven throughout by the instance that created it; stops both.
async fn completes_with_its_owner(mut stack: Stack, orchestrator: Running, saga_id: &str) {
    stack.restart(Service::Payment).await;
    let done = saga_tests::wait_terminal(orchestrator.addr, saga_id, Duration::from_secs(15)).await;
    assert_eq!(done.status(), pb::SagaStatus::Completed);
    assert_eq!(
        saga_tests::ownership_changes(&done),
        Vec::<&str>::new(),
        "its owner drove it throughout: {:?}",
        done.history
    );
    assert_eq!(stack.balance("alice").await, 700);
    orchestrator.stop().await;
    stack.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_save_that_waited_out_an_outage_longer_than_the_lease_writes_a_fresh_lease() {
    let (stack, store) = stack_with_payment_down().await;
    let clock = service_kit::clock::FastForwardClock::new();
    let orchestrator = orchestrator_on(&stack, store.clone(), clock.clone()).await;
    store.down.store(true, Ordering::SeqCst);
    let saga_id = start_order(orchestrator.addr, "outage-1", "alice", &[("sku-1", 1, 300)]).await;
    until("a save failed on the outage", async || {
        store.failed_saves.load(Ordering::SeqCst) > 0
    })
    .await;
    // The outage outlasts the lease the waiting save was first given.
    clock.fast_forward(TTL + TTL / 2);
    store.down.store(false, Ordering::SeqCst);
    let back = service_kit::clock::Clock::now_ms(clock.as_ref());

    let sagas = stack.storage.sagas().await;
    let mut landed = None;
    until("the waiting save landed", async || {
        landed = sagas
            .get(&saga_id)
            .await
            .expect("read")
            .filter(|s| s.version >= 2);
        landed.is_some()
    })
    .await;
    let until_ms = landed
        .and_then(|s| s.lease)
        .map(|lease| lease.until_ms)
        .expect("a running saga is leased");
    let ttl = TTL.as_millis() as i64;
    assert!(
        until_ms >= back + ttl / 2,
        "the landed save's lease ends {} ms after the store came back; it was granted before \
         the outage",
        until_ms - back
    );

    completes_with_its_owner(stack, orchestrator, &saga_id).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_save_whose_reply_was_lost_is_not_taken_for_a_conflict() {
    let (stack, store) = stack_with_payment_down().await;
    let orchestrator = orchestrator(&stack, store.clone()).await;
    store.lost_replies.store(1, Ordering::SeqCst);
    let saga_id = start_order(
        orchestrator.addr,
        "lost-reply-1",
        "alice",
        &[("sku-1", 1, 300)],
    )
    .await;
    until("the lost reply was used", async || {
        store.lost_replies.load(Ordering::SeqCst) == 0
    })
    .await;

    completes_with_its_owner(stack, orchestrator, &saga_id).await;
}

/// An order saga for alice (one `sku-1` at 300 cents) with id `id`, as
/// CreateOrder would store it, leased to an instance that died a second
/// ago.
fn orphan(definition: &orchestrator::step::SagaDefinition, id: &str) -> orchestrator::saga::Saga {
    use orchestrator::saga::{Order, OrderItem};
    let order = Order {
        order_id: format!("order-{id}"),
        customer_id: "alice".into(),
        items: vec![OrderItem {
            product_id: "sku-1".into(),
            quantity: 1,
            unit_price_cents: 300,
        }],
        total_cents: 300,
    };
    let now = service_kit::time::now_ms();
    saga_tests::leased_saga(
        definition.names(),
        id,
        order,
        now,
        "dead-instance",
        now - 1_000,
    )
}

/// `stack`'s participants with alice's 1,000 cents and 10 `sku-1`, and an
/// intercepted store over its saga store holding `saga` (built by `make`
/// from the order saga's definition); then an instance `only-instance`
/// whose leases last 30 s — far longer than the tests wait.
async fn planted(
    make: impl FnOnce(&orchestrator::step::SagaDefinition) -> orchestrator::saga::Saga,
) -> (Stack, Arc<InterceptedStore>, Running, String) {
    use orchestrator::store::SagaStore;
    let stack = Stack::without_orchestrator().await;
    stack.deposit("alice", 1_000).await;
    stack.add_stock("sku-1", 10).await;
    let store = Arc::new(InterceptedStore::new(
        Storage::from(stack.dir.path()).sagas().await,
    ));
    let definition = saga_tests::order_saga(stack.payment.addr, stack.inventory.addr);
    let saga = make(&definition);
    store.create(&saga).await.expect("plant the saga");
    let settings =
        saga_tests::instance_settings("only-instance", Duration::from_secs(30), fast_retry());
    let orchestrator = OrchestratorHarness::new(stack.storage.clone(), definition)
        .store(store.clone())
        .settings(settings)
        .start()
        .await;
    (stack, store, orchestrator, saga.saga_id)
}

/// A claim whose reply was lost landed all the same: the instance takes
/// the stored saga for the claim it is and drives it at once, instead of
/// skipping it as its own until the lease it just wrote runs out.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_claim_whose_reply_was_lost_is_driven_at_once() {
    // The planted saga is claimed by the first save: it lands, its reply
    // is lost.
    let (stack, store, orchestrator, saga_id) =
        planted(|definition| orphan(definition, "orphan-1")).await;
    store.lost_replies.store(1, Ordering::SeqCst);
    // Well inside the 30 s lease the claim wrote.
    let done =
        saga_tests::wait_terminal(orchestrator.addr, &saga_id, Duration::from_secs(10)).await;
    assert_eq!(done.status(), pb::SagaStatus::Completed);
    assert_eq!(
        store.lost_replies.load(Ordering::SeqCst),
        0,
        "the claim's reply was lost"
    );
    assert_eq!(
        saga_tests::ownership_changes(&done).len(),
        1,
        "claimed once: {:?}",
        done.history
    );
    assert_eq!(stack.balance("alice").await, 700, "charged once");
    assert_eq!(stack.stock("sku-1").await, 9, "deducted once");
    orchestrator.stop().await;
    stack.stop().await;
}

/// A RetrySaga whose save landed but whose reply was lost answers as the
/// retry it was and drives the saga at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_retry_whose_reply_was_lost_still_resumes_the_saga() {
    use orchestrator::engine::{self, Next, Outcome};
    // FAILED: the deduct was refused and the refund gave up (nothing was
    // charged: the participants have never seen this saga).
    let (stack, store, orchestrator, saga_id) = planted(|definition| {
        let mut saga = orphan(definition, "failed-1");
        let now = service_kit::time::now_ms();
        engine::record_outcome(&mut saga, Next::Act(0), Outcome::Succeeded, now).expect("fits");
        engine::record_outcome(&mut saga, Next::Act(1), Outcome::Refused("no".into()), now)
            .expect("fits");
        engine::record_outcome(
            &mut saga,
            Next::Compensate(0),
            Outcome::CompensationGaveUp("down".into()),
            now,
        )
        .expect("fits");
        saga.lease = None;
        saga
    })
    .await;
    store.lost_replies.store(1, Ordering::SeqCst);
    let resumed = pb::saga_service_client::SagaServiceClient::new(
        saga_tests::channel(orchestrator.addr).await,
    )
    .retry_saga(pb::RetrySagaRequest {
        saga_id: saga_id.clone(),
    })
    .await
    .expect("the retry landed: not UNAVAILABLE")
    .into_inner();
    assert_eq!(resumed.status(), pb::SagaStatus::Compensating);
    assert_eq!(
        store.lost_replies.load(Ordering::SeqCst),
        0,
        "the retry's reply was lost"
    );
    let done =
        saga_tests::wait_terminal(orchestrator.addr, &saga_id, Duration::from_secs(10)).await;
    assert_eq!(done.status(), pb::SagaStatus::Cancelled);
    assert_eq!(
        stack.balance("alice").await,
        1_000,
        "nothing charged, nothing refunded"
    );
    orchestrator.stop().await;
    stack.stop().await;
}
