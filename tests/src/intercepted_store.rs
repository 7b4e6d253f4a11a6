//! A saga store that forwards to a real one, with the faults tests need
//! precisely where they need them: every `create` answering some time
//! after its insert committed (a caller that goes away mid-call), saves
//! refused as [`StoreError::Rejected`] while a switch is on (a document the
//! store will not take, until a person fixes the cause), saves failing as
//! [`StoreError::Unavailable`] while another is on (an outage), and saves
//! that commit but answer Unavailable (a lost reply).
//! Written once so each test states only its fault.

use async_trait::async_trait;
use orchestrator::saga::{Attention, Saga};
use orchestrator::store::{
    Created, Cursor, Page, SagaFilter, SagaStore, StatusCounts, StoreError, StoreStats,
};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

/// The real store `inner` behind the faults below.
pub struct InterceptedStore {
    inner: Arc<dyn SagaStore>,
    /// How long each `create` waits, after the insert, before answering.
    create_delay: Duration,
    /// Inserts that committed.
    pub committed_creates: AtomicUsize,
    /// While true, every `save` is refused as Rejected.
    pub refuse_saves: AtomicBool,
    /// Saves refused so far.
    pub refused_saves: AtomicUsize,
    /// While true, every `save` fails as Unavailable and writes nothing.
    pub down: AtomicBool,
    /// Saves failed by `down` so far.
    pub failed_saves: AtomicUsize,
    /// The next this many saves commit and then answer Unavailable.
    pub lost_replies: AtomicUsize,
}

impl InterceptedStore {
    /// `inner` with every `create` answering `delay` after its insert.
    pub fn with_create_delay(inner: Arc<dyn SagaStore>, delay: Duration) -> Self {
        InterceptedStore {
            create_delay: delay,
            ..Self::new(inner)
        }
    }

    /// `inner` with no fault switched on.
    pub fn new(inner: Arc<dyn SagaStore>) -> Self {
        InterceptedStore {
            inner,
            create_delay: Duration::ZERO,
            committed_creates: AtomicUsize::new(0),
            refuse_saves: AtomicBool::new(false),
            refused_saves: AtomicUsize::new(0),
            down: AtomicBool::new(false),
            failed_saves: AtomicUsize::new(0),
            lost_replies: AtomicUsize::new(0),
        }
    }
}

/// What the intercepted store says when it refuses a save.
pub const REFUSAL: &str = "document too large for the test store";

#[async_trait]
impl SagaStore for InterceptedStore {
    async fn create(&self, saga: &Saga) -> Result<Created, StoreError> {
        let created = self.inner.create(saga).await;
        if created.is_ok() {
            self.committed_creates.fetch_add(1, Ordering::SeqCst);
        }
        if !self.create_delay.is_zero() {
            tokio::time::sleep(self.create_delay).await;
        }
        created
    }
    async fn save(&self, saga: &Saga) -> Result<(), StoreError> {
        if self.refuse_saves.load(Ordering::SeqCst) {
            self.refused_saves.fetch_add(1, Ordering::SeqCst);
            return Err(StoreError::Rejected(REFUSAL.into()));
        }
        if self.down.load(Ordering::SeqCst) {
            self.failed_saves.fetch_add(1, Ordering::SeqCst);
            return Err(StoreError::Unavailable("the store is down (test)".into()));
        }
        self.inner.save(saga).await?;
        let lose = self
            .lost_replies
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1));
        if lose.is_ok() {
            return Err(StoreError::Unavailable(
                "committed, but the reply was lost (test)".into(),
            ));
        }
        Ok(())
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
