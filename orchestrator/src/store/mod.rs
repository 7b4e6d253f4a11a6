//! Saga storage, in domain terms.
//!
//! The trait is what the executor and the gRPC adapter see; backends (the
//! embedded SQLite store here, MongoDB in production) implement it and pass
//! the same conformance tests. Guarantees every backend must give:
//! - `create` relies on a unique key on `request_id` (never check-then-insert),
//!   so concurrent duplicates yield exactly one saga;
//! - `save` is an optimistic-concurrency update: it succeeds only if the
//!   stored version is the one the caller read, so two writers can never both
//!   advance one saga;
//! - every query is served by an index (listings by status, by customer or
//!   all, newest first; counts per status; recovery by status and lease;
//!   retention by finish time);
//! - COMPLETED and CANCELLED sagas expire [`SagaRetention::keep`] after
//!   they finished ([`Saga::expires_from_ms`]); FAILED and unfinished sagas
//!   never do. The embedded store deletes them when asked
//!   ([`SagaStore::purge_expired`], in small batches); MongoDB deletes them
//!   by itself (a TTL index on `expire_at`).

mod mongo;
mod sqlite;

pub use mongo::{MongoSagaStore, SHARD_KEY as MONGO_SHARD_KEY, indexes as mongo_indexes};
pub use sqlite::SqliteSagaStore;

use crate::saga::{Attention, Saga, SagaStatus};
use async_trait::async_trait;
use embedded_store::ErrorClass;
use std::time::Duration;

pub use service_kit::purge::StoreStats;

/// How long a store keeps finished sagas.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SagaRetention {
    /// COMPLETED and CANCELLED sagas are deleted this long after they
    /// finished; `None` keeps them forever.
    pub keep: Option<Duration>,
    /// Sagas are archived before they are deleted (`--archive-dir`): on
    /// MongoDB the TTL index then waits [`ARCHIVE_GRACE`] longer, so the
    /// orchestrator's purge (which archives first) gets there before it.
    pub archive: bool,
}

/// How much longer MongoDB's TTL index waits when sagas are archived:
/// the orchestrator's purge archives and deletes them at the retention,
/// the TTL index is only the backstop.
pub const ARCHIVE_GRACE: Duration = Duration::from_secs(3600);

impl Default for SagaRetention {
    fn default() -> Self {
        SagaRetention {
            keep: Some(service_kit::limits::DEFAULT_SAGA_RETENTION),
            archive: false,
        }
    }
}

impl SagaRetention {
    /// Sagas that finished before this (ms since the epoch) have expired at
    /// `now_ms`; `None` when nothing expires.
    pub fn cutoff_ms(&self, now_ms: i64) -> Option<i64> {
        let keep = i64::try_from(self.keep?.as_millis()).unwrap_or(i64::MAX);
        Some(now_ms.saturating_sub(keep))
    }

    /// When MongoDB's TTL index deletes `saga` (ms since the epoch): its
    /// finish time plus the retention (plus [`ARCHIVE_GRACE`] when
    /// archiving); `None` — never — for a saga that must live.
    pub fn expire_at_ms(&self, saga: &Saga) -> Option<i64> {
        Some(
            saga.expires_from_ms()?
                .saturating_add(self.expire_after_ms()?),
        )
    }

    /// How long after it finished MongoDB's TTL index deletes a saga (ms):
    /// the retention, plus [`ARCHIVE_GRACE`] when archiving; `None` while
    /// nothing expires.
    pub fn expire_after_ms(&self) -> Option<i64> {
        let keep = self.keep?
            + if self.archive {
                ARCHIVE_GRACE
            } else {
                Duration::ZERO
            };
        Some(i64::try_from(keep.as_millis()).unwrap_or(i64::MAX))
    }
}

/// Why a store call failed.
#[derive(Debug, Clone, thiserror::Error)]
pub enum StoreError {
    /// The saga changed since it was read (another writer advanced it).
    #[error("saga {saga_id} was modified concurrently (expected version {expected})")]
    Conflict {
        /// The saga.
        saga_id: String,
        /// The version the writer read.
        expected: u64,
    },
    /// The store is unreachable or failed in a way that passes (a network
    /// error, an election, a write conflict); retry later.
    #[error("store unavailable: {0}")]
    Unavailable(String),
    /// The store refused the operation and will refuse it again (a
    /// document too large, a failed validation, missing privileges): a
    /// person must act, so waiting and retrying would only hide it.
    #[error("store rejected the write: {0}")]
    Rejected(String),
    /// Stored data cannot be decoded.
    #[error("stored saga is corrupt: {0}")]
    Corrupt(String),
}

impl StoreError {
    /// A backend failure of `class` by what the executor does about it:
    /// waits out what passes (`Unavailable`); stops and flags the saga for
    /// what does not, rather than wait forever in silence (`Rejected`,
    /// `Corrupt`). Both backends map their errors through it.
    pub fn classified(class: ErrorClass, message: String) -> StoreError {
        match class {
            ErrorClass::Transient => StoreError::Unavailable(message),
            ErrorClass::Rejected => StoreError::Rejected(message),
            ErrorClass::Corrupt => StoreError::Corrupt(message),
        }
    }
}

/// Result of [`SagaStore::create`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Created {
    /// The saga was inserted.
    New,
    /// A saga with the same request id already existed; here it is.
    Existing(Box<Saga>),
}

/// A position in the newest-first listing: (created_at_ms, saga_id) of the
/// last saga returned.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Cursor {
    /// Creation time of the last saga returned.
    pub created_at_ms: i64,
    /// Its id (breaks ties between sagas created in the same millisecond).
    pub saga_id: String,
}

/// Which sagas a listing returns: every saga, or only those matching each
/// field that is set.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SagaFilter {
    /// Only sagas in this status.
    pub status: Option<SagaStatus>,
    /// Only this customer's sagas.
    pub customer_id: Option<String>,
    /// Only sagas that need a person ([`crate::saga::Attention`]); not
    /// combined with the other filters (one index serves it).
    pub needs_attention: bool,
}

impl SagaFilter {
    /// Every saga in `status` (all sagas when `None`).
    pub fn status(status: Option<SagaStatus>) -> Self {
        SagaFilter {
            status,
            customer_id: None,
            needs_attention: false,
        }
    }
}

/// How many sagas are in each status, in [`SagaStatus::ALL`] order (zeros
/// included).
pub type StatusCounts = Vec<(SagaStatus, u64)>;

/// One page of ListSagas.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Page {
    /// The sagas, newest first.
    pub sagas: Vec<Saga>,
    /// Where the next page starts; None on the last page.
    pub next: Option<Cursor>,
}

/// Saga storage.
#[async_trait]
pub trait SagaStore: Send + Sync + 'static {
    /// Inserts `saga` as given (new sagas carry version 1), unless a saga
    /// with the same `request_id` exists: then that one is returned.
    async fn create(&self, saga: &Saga) -> Result<Created, StoreError>;

    /// Replaces the stored saga if its version is `saga.version - 1`.
    async fn save(&self, saga: &Saga) -> Result<(), StoreError>;

    /// One saga by id.
    async fn get(&self, saga_id: &str) -> Result<Option<Saga>, StoreError>;

    /// The saga whose CreateOrder used `request_id`.
    async fn get_by_request_id(&self, request_id: &str) -> Result<Option<Saga>, StoreError>;

    /// Newest first, only the sagas `filter` admits, starting after
    /// `after`. Served by an index whichever filter is set: (status,
    /// created, id), (customer, created, id) or (created, id).
    async fn list(
        &self,
        filter: &SagaFilter,
        page_size: usize,
        after: Option<Cursor>,
    ) -> Result<Page, StoreError>;

    /// How many sagas are in each status (index-backed: no saga document
    /// is read).
    async fn count_by_status(&self) -> Result<StatusCounts, StoreError>;

    /// Sagas an instance may drive now, longest waiting first (by
    /// [`Saga::claimable_after_ms`], then id): not terminal, and either
    /// unleased, leased until before `now_ms`, or leased to `owner` (its own
    /// sagas from before a restart). Served by two index range scans
    /// merged by [`merge_claimable`] (SQLite: both of its partial index of
    /// unfinished sagas on `claimable_after_ms`; MongoDB: indexes on
    /// `claimable_after_ms` and `lease_owner, claimable_after_ms`): no scan
    /// of finished sagas, no sort. A stored saga that cannot be decoded is skipped
    /// (logged at ERROR and counted in `saga_store_undecodable_total`), so
    /// one bad document cannot stop the recovery of all the others.
    async fn claimable(
        &self,
        now_ms: i64,
        owner: Option<&str>,
        limit: usize,
    ) -> Result<Vec<Saga>, StoreError>;

    /// Marks the stored saga whose next version (`saga`, as [`save`] takes
    /// it) the store refused for good as needing a person: sets its
    /// `attention` (and the `needs_attention` flag ListSagas filters on)
    /// on the stored version `saga.version - 1`, without changing that
    /// version, and makes it claimable again only from `retry_after_ms`
    /// (so recovery retries it once per lease period, not at every sweep).
    /// A small write beside the refused one, so it succeeds where the
    /// refused document would not. `false` when the saga has moved on
    /// (another instance wrote a newer version): nothing to mark.
    ///
    /// [`save`]: SagaStore::save
    async fn flag_attention(
        &self,
        saga: &Saga,
        attention: &Attention,
        retry_after_ms: i64,
    ) -> Result<bool, StoreError>;

    /// Up to `limit` sagas that expired by `now_ms` (finished longer ago
    /// than the retention), longest expired first: what the purge archives
    /// before [`SagaStore::delete_finished`]. Served by the finish-time
    /// index (SQLite `sagas_finished`, MongoDB the `expire_at` TTL index).
    async fn expired(&self, now_ms: i64, limit: usize) -> Result<Vec<Saga>, StoreError>;

    /// Deletes these sagas, if they are COMPLETED or CANCELLED in the store
    /// (by id and request id, the shard key: a finished saga never changes
    /// again). Returns how many went.
    async fn delete_finished(&self, sagas: &[Saga]) -> Result<u64, StoreError>;

    /// Deletes up to `limit` sagas that expired by `now_ms`, in one small
    /// write; how many went. MongoDB deletes nothing here: its TTL index
    /// does it.
    async fn purge_expired(&self, now_ms: i64, limit: usize) -> Result<u64, StoreError>;

    /// Gives free space beyond what the next inserts will reuse back to
    /// the file system (the embedded store's incremental vacuum); bytes
    /// released.
    async fn reclaim(&self) -> Result<u64, StoreError> {
        Ok(0)
    }

    /// The store's size by its own accounting and its oldest finished
    /// saga, for the gauges.
    async fn stats(&self) -> Result<StoreStats, StoreError>;
}

/// The first `limit` of two claimable listings (each already in
/// claimable order), in claimable order, each saga once: a saga leased to
/// the caller whose lease also expired is in both.
pub(crate) fn merge_claimable(expired: Vec<Saga>, own: Vec<Saga>, limit: usize) -> Vec<Saga> {
    let mut seen: std::collections::HashSet<String> =
        expired.iter().map(|s| s.saga_id.clone()).collect();
    let mut all = expired;
    all.extend(own.into_iter().filter(|s| seen.insert(s.saga_id.clone())));
    all.sort_by(|a, b| {
        (a.claimable_after_ms(), &a.saga_id).cmp(&(b.claimable_after_ms(), &b.saga_id))
    });
    all.truncate(limit);
    all
}

/// Decodes each stored saga, skipping (with an ERROR log and a count in
/// `saga_store_undecodable_total`) any that cannot be: used where one bad
/// document must not hide the others.
pub(crate) fn decode_each<T>(
    stored: impl IntoIterator<Item = T>,
    decode: impl Fn(&T) -> Result<Saga, StoreError>,
) -> Vec<Saga> {
    stored
        .into_iter()
        .filter_map(|d| match decode(&d) {
            Ok(saga) => Some(saga),
            Err(error) => {
                metrics::counter!("saga_store_undecodable_total").increment(1);
                tracing::error!(%error, "skipping a stored saga that cannot be decoded");
                None
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Each class of either backend becomes the store error the executor
    /// handles as the class says.
    #[test]
    fn each_error_class_has_its_store_error() {
        let classified = |class| StoreError::classified(class, "x".into());
        assert!(matches!(
            classified(ErrorClass::Transient),
            StoreError::Unavailable(_)
        ));
        assert!(matches!(
            classified(ErrorClass::Rejected),
            StoreError::Rejected(_)
        ));
        assert!(matches!(
            classified(ErrorClass::Corrupt),
            StoreError::Corrupt(_)
        ));
    }
}
