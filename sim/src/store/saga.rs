//! The orchestrator's saga store in memory: [`SagaStore`] with the
//! guarantees every backend gives (a unique request id, versioned saves,
//! the claimable, expiry and attention queries), checked by the same
//! conformance suite as the embedded and MongoDB stores
//! (`tests/tests/suite/conformance_sim.rs`).
//!
//! What the store holds ([`SagaTable`]) outlives the orchestrators that
//! use it: every operation commits atomically, under one lock, at one
//! instant of simulated time; a handle belongs to one orchestrator
//! incarnation, whose crash stops its operations ([`Disk::io`]).

use crate::disk::{Disk, DiskError};
use crate::host::Incarnation;
use async_trait::async_trait;
use orchestrator::saga::{Attention, Saga, SagaStatus};
use orchestrator::store::{
    Created, Cursor, Page, SagaFilter, SagaRetention, SagaStore, StatusCounts, StoreError,
    StoreStats,
};
use service_kit::defects::{Defect, planted};
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, MutexGuard};

/// One stored saga and the column recovery scans.
#[derive(Clone, Debug)]
struct Row {
    saga: Saga,
    /// From when recovery may claim it (the saga's own, or the retry time
    /// a refusal set: [`SagaStore::flag_attention`]).
    claimable_after_ms: i64,
}

/// What the saga store holds: committed state only.
#[derive(Debug, Default)]
pub struct SagaTable {
    rows: BTreeMap<String, Row>,
    by_request: BTreeMap<String, String>,
}

impl SagaTable {
    /// Every stored saga, by id.
    pub fn sagas(&self) -> Vec<Saga> {
        self.rows.values().map(|r| r.saga.clone()).collect()
    }

    /// The saga `saga_id`, if stored.
    pub fn saga(&self, saga_id: &str) -> Option<&Saga> {
        self.rows.get(saga_id).map(|r| &r.saga)
    }

    /// The saga created for `request_id`, if stored.
    pub fn by_request(&self, request_id: &str) -> Option<&Saga> {
        self.saga(self.by_request.get(request_id)?)
    }
}

/// The store's committed state, shared by every handle.
pub type SharedSagaTable = Arc<Mutex<SagaTable>>;

/// A handle on the saga store for one orchestrator incarnation.
pub struct MemSagaStore {
    table: SharedSagaTable,
    disk: Disk,
    incarnation: Incarnation,
    retention: SagaRetention,
}

impl MemSagaStore {
    /// A handle on `table` for `incarnation`, its operations scheduled by
    /// `disk`, keeping finished sagas as `retention` says.
    pub fn new(
        table: SharedSagaTable,
        disk: Disk,
        incarnation: Incarnation,
        retention: SagaRetention,
    ) -> MemSagaStore {
        MemSagaStore {
            table,
            disk,
            incarnation,
            retention,
        }
    }

    /// A fresh store outside any simulated run, keeping finished sagas for
    /// the default retention (what the conformance suite opens).
    pub fn standalone() -> MemSagaStore {
        MemSagaStore::new(
            SharedSagaTable::default(),
            Disk::instant("sagas"),
            Incarnation::new(),
            SagaRetention::default(),
        )
    }

    async fn io<T>(
        &self,
        op: &str,
        f: impl FnOnce(&mut SagaTable) -> Result<T, StoreError>,
    ) -> Result<T, StoreError> {
        let table = self.table.clone();
        self.disk
            .io(&self.incarnation, op, move || f(&mut lock(&table)))
            .await
            .map_err(unavailable)?
    }
}

fn lock(table: &SharedSagaTable) -> MutexGuard<'_, SagaTable> {
    table.lock().unwrap_or_else(|p| p.into_inner())
}

fn unavailable(e: DiskError) -> StoreError {
    StoreError::Unavailable(e.to_string())
}

/// Newest first: by creation time, then id, both descending.
fn newest_first(a: &Saga, b: &Saga) -> std::cmp::Ordering {
    (b.created_at_ms, &b.saga_id).cmp(&(a.created_at_ms, &a.saga_id))
}

fn admits(filter: &SagaFilter, saga: &Saga) -> bool {
    if filter.needs_attention {
        return saga.attention.is_some();
    }
    filter.status.is_none_or(|s| s == saga.status)
        && filter
            .customer_id
            .as_ref()
            .is_none_or(|c| *c == saga.order.customer_id)
}

fn page(mut sagas: Vec<Saga>, page_size: usize, after: Option<Cursor>) -> Page {
    sagas.sort_by(newest_first);
    if let Some(c) = after {
        sagas.retain(|s| (s.created_at_ms, &s.saga_id) < (c.created_at_ms, &c.saga_id));
    }
    let next = if sagas.len() > page_size {
        sagas.truncate(page_size);
        sagas.last().map(|s| Cursor {
            created_at_ms: s.created_at_ms,
            saga_id: s.saga_id.clone(),
        })
    } else {
        None
    };
    Page { sagas, next }
}

impl SagaTable {
    fn create(&mut self, saga: &Saga) -> Created {
        if let Some(existing) = self.by_request(&saga.request_id) {
            return Created::Existing(Box::new(existing.clone()));
        }
        self.by_request
            .insert(saga.request_id.clone(), saga.saga_id.clone());
        self.rows.insert(
            saga.saga_id.clone(),
            Row {
                saga: saga.clone(),
                claimable_after_ms: saga.claimable_after_ms(),
            },
        );
        Created::New
    }

    fn save(&mut self, saga: &Saga) -> Result<(), StoreError> {
        let conflict = || StoreError::Conflict {
            saga_id: saga.saga_id.clone(),
            expected: saga.version.saturating_sub(1),
        };
        let row = self.rows.get_mut(&saga.saga_id).ok_or_else(conflict)?;
        if row.saga.version + 1 != saga.version && !planted(Defect::DropVersionCheck) {
            return Err(conflict());
        }
        row.saga = saga.clone();
        row.claimable_after_ms = saga.claimable_after_ms();
        Ok(())
    }

    fn claimable(&self, now_ms: i64, owner: Option<&str>, limit: usize) -> Vec<Saga> {
        let mut found: Vec<&Row> = self
            .rows
            .values()
            .filter(|r| r.claimable_after_ms < i64::MAX)
            .filter(|r| {
                r.claimable_after_ms < now_ms
                    || owner.is_some_and(|o| r.saga.lease_owner() == Some(o))
            })
            .collect();
        found.sort_by(|a, b| {
            (a.claimable_after_ms, &a.saga.saga_id).cmp(&(b.claimable_after_ms, &b.saga.saga_id))
        });
        found
            .into_iter()
            .take(limit)
            .map(|r| r.saga.clone())
            .collect()
    }

    fn flag(&mut self, saga: &Saga, attention: &Attention, retry_after_ms: i64) -> bool {
        match self.rows.get_mut(&saga.saga_id) {
            Some(row) if row.saga.version + 1 == saga.version => {
                row.saga.attention = Some(attention.clone());
                row.claimable_after_ms = retry_after_ms;
                true
            }
            _ => false,
        }
    }

    fn expired(&self, cutoff_ms: i64, limit: usize) -> Vec<Saga> {
        let mut expired: Vec<&Saga> = self
            .rows
            .values()
            .map(|r| &r.saga)
            .filter(|s| s.expires_from_ms().is_some_and(|f| f < cutoff_ms))
            .collect();
        expired.sort_by_key(|s| (s.expires_from_ms(), s.saga_id.clone()));
        expired.into_iter().take(limit).cloned().collect()
    }

    fn delete_finished(&mut self, saga_ids: &[String]) -> u64 {
        let mut deleted = 0;
        for id in saga_ids {
            let finished = self.saga(id).is_some_and(|s| s.expires_from_ms().is_some());
            if finished && let Some(row) = self.rows.remove(id) {
                self.by_request.remove(&row.saga.request_id);
                deleted += 1;
            }
        }
        deleted
    }
}

#[async_trait]
impl SagaStore for MemSagaStore {
    async fn create(&self, saga: &Saga) -> Result<Created, StoreError> {
        let saga = saga.clone();
        self.io("create", move |t| Ok(t.create(&saga))).await
    }

    async fn save(&self, saga: &Saga) -> Result<(), StoreError> {
        let saga = saga.clone();
        self.io("save", move |t| t.save(&saga)).await
    }

    async fn get(&self, saga_id: &str) -> Result<Option<Saga>, StoreError> {
        let id = saga_id.to_owned();
        self.io("get", move |t| Ok(t.saga(&id).cloned())).await
    }

    async fn get_by_request_id(&self, request_id: &str) -> Result<Option<Saga>, StoreError> {
        let id = request_id.to_owned();
        self.io("get", move |t| Ok(t.by_request(&id).cloned()))
            .await
    }

    async fn list(
        &self,
        filter: &SagaFilter,
        page_size: usize,
        after: Option<Cursor>,
    ) -> Result<Page, StoreError> {
        let filter = filter.clone();
        self.io("list", move |t| {
            let sagas = t
                .rows
                .values()
                .map(|r| &r.saga)
                .filter(|s| admits(&filter, s))
                .cloned()
                .collect();
            Ok(page(sagas, page_size, after))
        })
        .await
    }

    async fn count_by_status(&self) -> Result<StatusCounts, StoreError> {
        self.io("count", |t| {
            Ok(SagaStatus::ALL
                .iter()
                .map(|status| {
                    let n = t.rows.values().filter(|r| r.saga.status == *status).count();
                    (*status, n as u64)
                })
                .collect())
        })
        .await
    }

    async fn claimable(
        &self,
        now_ms: i64,
        owner: Option<&str>,
        limit: usize,
    ) -> Result<Vec<Saga>, StoreError> {
        let owner = owner.map(str::to_owned);
        self.io("claimable", move |t| {
            Ok(t.claimable(now_ms, owner.as_deref(), limit))
        })
        .await
    }

    async fn flag_attention(
        &self,
        saga: &Saga,
        attention: &Attention,
        retry_after_ms: i64,
    ) -> Result<bool, StoreError> {
        let (saga, attention) = (saga.clone(), attention.clone());
        self.io("flag", move |t| {
            Ok(t.flag(&saga, &attention, retry_after_ms))
        })
        .await
    }

    async fn expired(&self, now_ms: i64, limit: usize) -> Result<Vec<Saga>, StoreError> {
        let Some(cutoff) = self.retention.cutoff_ms(now_ms) else {
            return Ok(Vec::new());
        };
        self.io("expired", move |t| Ok(t.expired(cutoff, limit)))
            .await
    }

    async fn delete_finished(&self, sagas: &[Saga]) -> Result<u64, StoreError> {
        let ids: Vec<String> = sagas.iter().map(|s| s.saga_id.clone()).collect();
        self.io("delete", move |t| Ok(t.delete_finished(&ids)))
            .await
    }

    async fn purge_expired(&self, now_ms: i64, limit: usize) -> Result<u64, StoreError> {
        let Some(cutoff) = self.retention.cutoff_ms(now_ms) else {
            return Ok(0);
        };
        self.io("purge", move |t| {
            let ids: Vec<String> = t
                .expired(cutoff, limit)
                .into_iter()
                .map(|s| s.saga_id)
                .collect();
            Ok(t.delete_finished(&ids))
        })
        .await
    }

    async fn stats(&self) -> Result<StoreStats, StoreError> {
        self.io("stats", |t| {
            Ok(StoreStats {
                size_bytes: Some(4096 + 1024 * t.rows.len() as u64),
                oldest_finished_ms: t
                    .rows
                    .values()
                    .filter_map(|r| r.saga.expires_from_ms())
                    .min(),
            })
        })
        .await
    }
}
