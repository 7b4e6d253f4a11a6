//! A recovery sweep claims the sagas it finds several at a time: each claim
//! is one store write, and one after the other a crashed instance's sagas
//! would each wait for all the writes before theirs (on a store answering a
//! write in a second, twenty sagas twenty seconds past their leases). Every
//! one is still claimed exactly once, and a store error stops the claims
//! not yet started.

use async_trait::async_trait;
use embedded_store::Durability;
use orchestrator::engine::{self, StepNames};
use orchestrator::executor::{Executor, LeasePolicy};
use orchestrator::hub::SagaHub;
use orchestrator::saga::{Attention, Lease, Order, Saga, StepState};
use orchestrator::step::{ParticipantRecord, SagaDefinition, SagaStep, StepOutcome};
use orchestrator::store::{
    Created, Cursor, Page, SagaFilter, SagaStore, SqliteSagaStore, StatusCounts, StoreError,
    StoreStats,
};
use service_kit::clock::{Clock, ManualClock};
use service_kit::shutdown::Shutdown;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

/// A step whose calls never return: a claimed saga stays where the claim
/// left it.
struct Silent;

#[async_trait]
impl SagaStep for Silent {
    fn name(&self) -> &'static str {
        "only"
    }
    fn action(&self) -> &'static str {
        "do"
    }
    fn compensation(&self) -> &'static str {
        "undo"
    }
    async fn act(&self, _: &Saga, _: &StepState) -> StepOutcome {
        std::future::pending().await
    }
    async fn compensate(&self, _: &Saga, _: &StepState) -> StepOutcome {
        std::future::pending().await
    }
    async fn records(&self, _: &Saga, _: &StepState) -> Result<Vec<ParticipantRecord>, String> {
        Ok(Vec::new())
    }
}

/// A SQLite store whose saves take `SAVE` each, counting the claims and
/// how many are in flight at once; with `failing`, every save fails as an
/// unreachable store would.
struct Slow {
    inner: SqliteSagaStore,
    in_flight: AtomicUsize,
    most: AtomicUsize,
    saves: AtomicUsize,
    failing: AtomicBool,
}

const SAVE: Duration = Duration::from_millis(200);

#[async_trait]
impl SagaStore for Slow {
    async fn create(&self, saga: &Saga) -> Result<Created, StoreError> {
        self.inner.create(saga).await
    }
    async fn save(&self, saga: &Saga) -> Result<(), StoreError> {
        // Only claims are counted (version 2: the abandoned sagas are at
        // 1), not what a driver saves after one.
        let claim = saga.version == 2;
        if claim {
            self.saves.fetch_add(1, Ordering::SeqCst);
            let now = self.in_flight.fetch_add(1, Ordering::SeqCst) + 1;
            self.most.fetch_max(now, Ordering::SeqCst);
        }
        tokio::time::sleep(SAVE).await;
        if claim {
            self.in_flight.fetch_sub(1, Ordering::SeqCst);
        }
        if self.failing.load(Ordering::SeqCst) {
            return Err(StoreError::Unavailable("store down".into()));
        }
        self.inner.save(saga).await
    }
    async fn get(&self, saga_id: &str) -> Result<Option<Saga>, StoreError> {
        self.inner.get(saga_id).await
    }
    async fn get_by_request_id(&self, request_id: &str) -> Result<Option<Saga>, StoreError> {
        self.inner.get_by_request_id(request_id).await
    }
    async fn list(
        &self,
        filter: &SagaFilter,
        page_size: usize,
        after: Option<Cursor>,
    ) -> Result<Page, StoreError> {
        self.inner.list(filter, page_size, after).await
    }
    async fn count_by_status(&self) -> Result<StatusCounts, StoreError> {
        self.inner.count_by_status().await
    }
    async fn claimable(
        &self,
        now_ms: i64,
        owner: Option<&str>,
        limit: usize,
    ) -> Result<Vec<Saga>, StoreError> {
        self.inner.claimable(now_ms, owner, limit).await
    }
    async fn flag_attention(
        &self,
        saga: &Saga,
        attention: &Attention,
        retry_after_ms: i64,
    ) -> Result<bool, StoreError> {
        self.inner
            .flag_attention(saga, attention, retry_after_ms)
            .await
    }
    async fn expired(&self, now_ms: i64, limit: usize) -> Result<Vec<Saga>, StoreError> {
        self.inner.expired(now_ms, limit).await
    }
    async fn delete_finished(&self, sagas: &[Saga]) -> Result<u64, StoreError> {
        self.inner.delete_finished(sagas).await
    }
    async fn purge_expired(&self, now_ms: i64, limit: usize) -> Result<u64, StoreError> {
        self.inner.purge_expired(now_ms, limit).await
    }
    async fn stats(&self) -> Result<StoreStats, StoreError> {
        self.inner.stats().await
    }
}

const TTL: Duration = Duration::from_secs(10);

/// A saga leased to the crashed instance "dead", expired at `now_ms`.
fn abandoned(i: usize, now_ms: i64) -> Saga {
    let names = [StepNames {
        name: "only",
        action: "do",
        compensation: "undo",
    }];
    let order = Order {
        order_id: format!("order-{i}"),
        customer_id: "c".into(),
        items: Vec::new(),
        total_cents: 0,
    };
    let mut saga = engine::start(
        &names,
        format!("saga-{i:03}"),
        format!("req-{i}"),
        "fp".into(),
        order,
        now_ms - 60_000,
    );
    saga.version = 1;
    saga.lease = Some(Lease {
        owner: "dead".into(),
        until_ms: now_ms - 1_000,
    });
    saga
}

/// A store holding `n` sagas abandoned by "dead", and an executor "alive"
/// over it.
async fn after_a_crash(n: usize) -> (tempfile::TempDir, Arc<Slow>, Arc<Executor>) {
    let dir = tempfile::tempdir().expect("tempdir");
    let store = Arc::new(Slow {
        inner: SqliteSagaStore::open(&dir.path().join("sagas.db"), Durability::Process)
            .expect("store"),
        in_flight: AtomicUsize::new(0),
        most: AtomicUsize::new(0),
        saves: AtomicUsize::new(0),
        failing: AtomicBool::new(false),
    });
    let clock = ManualClock::now();
    for i in 0..n {
        store
            .create(&abandoned(i, clock.now_ms()))
            .await
            .expect("create");
    }
    let settings = orchestrator::Settings {
        lease: LeasePolicy {
            owner: "alive".into(),
            ttl: TTL,
            sweep_interval: Duration::from_secs(60),
        },
        clock: clock.clone(),
        ..orchestrator::Settings::default()
    };
    let executor = Arc::new(Executor::new(
        store.clone(),
        Arc::new(
            SagaDefinition::new(vec![Arc::new(Silent) as Arc<dyn SagaStep>]).expect("definition"),
        ),
        Arc::new(SagaHub::new()),
        Shutdown::new(),
        &settings,
    ));
    (dir, store, executor)
}

#[tokio::test(start_paused = true)]
async fn a_sweep_claims_a_crashed_instances_sagas_several_at_a_time() {
    let (_dir, store, executor) = after_a_crash(40).await;
    let began = tokio::time::Instant::now();
    assert_eq!(executor.sweep(false).await.expect("sweep"), 40);
    let took = began.elapsed();
    assert_eq!(store.saves.load(Ordering::SeqCst), 40, "one claim each");
    assert_eq!(
        store.most.load(Ordering::SeqCst),
        16,
        "claims in flight at once"
    );
    // 40 claims, 16 at a time: three rounds of one save, not forty. The
    // bound leaves room: the paused clock jumps to the next sleeper's
    // wake-up whenever every task waits on the SQLite writer thread, which
    // on a loaded machine happens in the middle of a round (seen: 800 ms).
    assert!(took < SAVE * 10, "the sweep took {took:?}");
    for i in 0..40 {
        let saga = store
            .get(&format!("saga-{i:03}"))
            .await
            .expect("read")
            .expect("stored");
        assert!(saga.version >= 2, "claimed");
        assert_eq!(saga.lease.map(|l| l.owner).as_deref(), Some("alive"));
    }
}

#[tokio::test(start_paused = true)]
async fn a_store_error_stops_the_claims_not_yet_started() {
    let (_dir, store, executor) = after_a_crash(40).await;
    store.failing.store(true, Ordering::SeqCst);
    let result = executor.sweep(false).await;
    assert!(
        matches!(result, Err(StoreError::Unavailable(_))),
        "{result:?}"
    );
    // The first sixteen were in flight together; none started after.
    assert_eq!(store.saves.load(Ordering::SeqCst), 16, "claims tried");
    assert_eq!(executor.in_flight(), 0, "every reserved place given back");
}
