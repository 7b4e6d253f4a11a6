//! The edges of the lease design: a CreateOrder whose caller goes away
//! after the saga is stored must still start the saga at once — not leave
//! it idle until its own lease expires and the recovery sweep claims it.

use async_trait::async_trait;
use orchestrator::saga::{Saga, StepState};
use orchestrator::step::{SagaDefinition, SagaStep, StepOutcome};
use saga_proto::saga::v1 as pb;
use saga_tests::crash::CrashableOrchestrator;
use saga_tests::intercepted_store::InterceptedStore;
use saga_tests::wrapped_step::{StepHook, Wrapped};
use saga_tests::{Service, Stack, Storage, fast_retry, order_request, start_order};
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;
use tokio::time::Instant;

/// The lease the test's instance holds: far longer than the test may take,
/// so a saga that completes did so without any sweep claiming it.
const LEASE_TTL: Duration = Duration::from_secs(60);

#[tokio::test]
async fn a_create_order_whose_caller_cancels_mid_call_still_starts_its_saga_at_once() {
    let stack = Stack::without_orchestrator().await;
    stack.deposit("alice", 10_000).await;
    stack.add_stock("sku-1", 10).await;
    let store = Arc::new(InterceptedStore::with_create_delay(
        Storage::from(stack.dir.path()).sagas().await,
        Duration::from_millis(1_500),
    ));
    let settings = saga_tests::instance_settings("only-instance", LEASE_TTL, fast_retry());
    let orchestrator = stack
        .orchestrator_harness()
        .store(store.clone())
        .settings(settings)
        .start()
        .await;
    let addr = orchestrator.addr;
    let channel = saga_tests::channel(addr).await;

    // The caller gives up 200 ms in, while its insert has committed and the
    // store has not answered yet: the server drops the request's future.
    let started = Instant::now();
    let mut request = tonic::Request::new(order_request(
        "cancelled-caller-1",
        "alice",
        &[("sku-1", 2, 300)],
        false,
    ));
    request.set_timeout(Duration::from_millis(200));
    let answer = pb::order_service_client::OrderServiceClient::new(channel.clone())
        .create_order(request)
        .await;
    let status = answer.expect_err("the caller's deadline passes before the store answers");
    assert!(
        matches!(
            status.code(),
            tonic::Code::DeadlineExceeded | tonic::Code::Cancelled
        ),
        "{status:?}"
    );
    assert!(
        started.elapsed() < Duration::from_millis(1_500),
        "the call must have ended before the store answered ({:?})",
        started.elapsed()
    );

    // The saga was stored and is driven to its end by the instance that
    // stored it, long before its lease could expire.
    let mut sagas = pb::saga_service_client::SagaServiceClient::new(channel);
    let limit = Duration::from_secs(10);
    let saga = loop {
        let found = sagas
            .get_saga(pb::GetSagaRequest {
                lookup: Some(pb::get_saga_request::Lookup::RequestId(
                    "cancelled-caller-1".into(),
                )),
            })
            .await;
        if let Ok(found) = found {
            let found = found.into_inner();
            if found.status() == pb::SagaStatus::Completed {
                break found;
            }
        }
        assert!(
            started.elapsed() < limit,
            "the saga of a cancelled CreateOrder was not completed within {limit:?} \
             (its lease lasts {LEASE_TTL:?}): it waits for the recovery sweep"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    assert_eq!(store.committed_creates.load(Ordering::SeqCst), 1);
    let claims = saga_tests::ownership_changes(&saga);
    assert!(
        claims.is_empty(),
        "the saga was driven by the instance that created it, not claimed: {claims:?}"
    );
    assert_eq!(stack.balance("alice").await, 10_000 - 600);
    assert_eq!(stack.stock("sku-1").await, 8);

    orchestrator.stop().await;
    stack.stop().await;
}

/// A real step whose action first waits `pause` (an owner that is alive but
/// slow: a long GC-like pause, a call stuck in a slow network).
struct SlowAction {
    inner: Arc<dyn SagaStep>,
    pause: Duration,
}

#[async_trait]
impl StepHook for SlowAction {
    fn inner(&self) -> &Arc<dyn SagaStep> {
        &self.inner
    }

    async fn act(&self, saga: &Saga, step: &StepState) -> StepOutcome {
        tokio::time::sleep(self.pause).await;
        self.inner.act(saga, step).await
    }
}

fn lease_settings(owner: &str, ttl: Duration) -> orchestrator::Settings {
    let mut retry = fast_retry();
    retry.action_attempts = 10_000;
    saga_tests::instance_settings(owner, ttl, retry)
}

/// The value of an unlabelled counter in the rendered exposition (0 when
/// it was never incremented).
fn counter(rendered: &str, name: &str) -> u64 {
    let scrape = saga_tests::prometheus::Scrape::parse(rendered.to_owned())
        .unwrap_or_else(|e| panic!("{e}\n{rendered}"));
    scrape.value(name, &[]).unwrap_or(0.0) as u64
}

/// Both kinds of takeover in one test: the metrics recorder is global to
/// this test binary, and only this test records into it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_takeover_of_a_live_owner_is_counted_and_one_of_a_crashed_owner_is_not() {
    let metrics = metrics_exporter_prometheus::PrometheusBuilder::new()
        .install_recorder()
        .expect("the only recorder of this test binary");
    let mut stack = Stack::without_orchestrator().await;
    stack.deposit("bob", 1_000).await;
    stack.add_stock("sku-2", 10).await;
    let storage = stack.storage.clone();
    let definition = saga_tests::order_saga(stack.payment.addr, stack.inventory.addr);
    let start = |settings, definition| {
        let storage = storage.clone();
        tokio::task::block_in_place(|| CrashableOrchestrator::start(storage, definition, settings))
    };
    // B sweeps for both cases, with a lease far longer than anything here.
    let b = start(
        lease_settings("instance-b", Duration::from_secs(60)),
        definition.clone(),
    );

    // 1. A crashed owner: A retries the charge (payment is down), renewing
    //    its 1 s lease with every save, until it is killed; B takes over.
    stack.halt(Service::Payment).await;
    let a = start(
        lease_settings("instance-a", Duration::from_secs(1)),
        definition.clone(),
    );
    let first = start_order(a.addr, "dead-owner-1", "bob", &[("sku-2", 1, 100)]).await;
    let store = storage.sagas().await;
    let deadline = Instant::now() + Duration::from_secs(15);
    while store
        .get(&first)
        .await
        .expect("read")
        .is_none_or(|s| s.steps[0].attempts < 5)
    {
        assert!(Instant::now() < deadline, "A never retried the charge");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    tokio::task::block_in_place(|| a.crash());
    stack.restart(Service::Payment).await;
    let done = saga_tests::wait_terminal(b.addr, &first, Duration::from_secs(15)).await;
    assert_eq!(done.status(), pb::SagaStatus::Completed);
    let rendered = metrics.render();
    assert_eq!(
        counter(&rendered, "saga_lease_takeovers_total"),
        1,
        "{rendered}"
    );
    assert_eq!(
        counter(&rendered, "saga_lease_takeovers_of_live_owner_total"),
        0,
        "a crashed owner was not alive: {rendered}"
    );

    // 2. A live owner: C's lease (300 ms) runs out while its charge is held
    //    up for 1.5 s; B takes the saga over and finishes it; C, still
    //    driving, finds out at its next versioned save.
    let slow = saga_tests::participants(stack.payment.addr, stack.inventory.addr)
        .into_iter()
        .map(|inner| {
            Wrapped::step(SlowAction {
                inner,
                pause: Duration::from_millis(1_500),
            })
        })
        .collect();
    let c = start(
        lease_settings("instance-c", Duration::from_millis(300)),
        Arc::new(SagaDefinition::new(slow).expect("definition")),
    );
    let second = start_order(c.addr, "live-owner-1", "bob", &[("sku-2", 1, 100)]).await;
    let done = saga_tests::wait_terminal(b.addr, &second, Duration::from_secs(15)).await;
    assert_eq!(done.status(), pb::SagaStatus::Completed);
    assert!(
        done.history.iter().any(|t| t
            .detail
            .starts_with("taken over by instance-b: the lease of instance-c")),
        "{:?}",
        done.history
    );
    let deadline = Instant::now() + Duration::from_secs(10);
    let rendered = loop {
        let rendered = metrics.render();
        if counter(&rendered, "saga_lease_takeovers_of_live_owner_total") > 0
            || Instant::now() >= deadline
        {
            break rendered;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    assert_eq!(
        counter(&rendered, "saga_lease_takeovers_of_live_owner_total"),
        1,
        "C was alive and driving when B took its saga: {rendered}"
    );
    assert_eq!(
        counter(&rendered, "saga_lease_takeovers_total"),
        2,
        "{rendered}"
    );
    // The barrier kept the late charge of the superseded owner harmless.
    assert_eq!(stack.balance("bob").await, 800, "charged once per saga");
    assert_eq!(stack.stock("sku-2").await, 8);

    tokio::task::block_in_place(|| c.crash());
    tokio::task::block_in_place(|| b.crash());
    stack.stop().await;
}
