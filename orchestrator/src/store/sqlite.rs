//! The embedded saga store: one SQLite table, the saga as a JSON document
//! plus the indexed columns queries need (request_id unique, status,
//! customer, created time, version, lease, finish time).
//!
//! Retention: `finished_at_ms` is set when a saga becomes COMPLETED or
//! CANCELLED (NULL otherwise, so FAILED and unfinished sagas are never in
//! the partial index `sagas_finished`); the purge deletes the oldest
//! finished ones by that index in small batches, each one job of the
//! writer's group commit.
//!
//! Recovery reads one partial index, `sagas_open`: the claimable time of
//! unfinished sagas only. A finished saga leaves it (its claimable time
//! becomes `i64::MAX`, outside the index), so the index holds the sagas in
//! flight, not the whole history, and a saga's last save removes one entry
//! instead of moving entries in two full indexes (each index a saga write
//! touches is one more page in the write-ahead log; see BENCHMARKS.md).
//!
//! JSON is serialised on the caller's task, so the single writer thread only
//! runs the SQL; concurrent sagas' writes share group commits.

mod migrations;

use super::{
    Created, Cursor, Page, SagaFilter, SagaRetention, SagaStore, StatusCounts, StoreError,
    StoreStats, decode_each, merge_claimable,
};
use crate::saga::{Attention, Saga, SagaStatus};
use async_trait::async_trait;
use embedded_store::{DbError, Durability, EmbeddedDb};
use rusqlite::{Connection, OptionalExtension, params};
use std::path::Path;

const SCHEMA: &str = "
CREATE TABLE IF NOT EXISTS sagas (
    saga_id       TEXT    PRIMARY KEY,
    request_id    TEXT    NOT NULL UNIQUE,
    status        TEXT    NOT NULL,
    customer_id   TEXT    NOT NULL DEFAULT '',
    version       INTEGER NOT NULL,
    created_at_ms INTEGER NOT NULL,
    updated_at_ms INTEGER NOT NULL,
    lease_owner   TEXT,
    lease_until_ms INTEGER NOT NULL DEFAULT 0,
    claimable_after_ms INTEGER NOT NULL DEFAULT 0,
    finished_at_ms INTEGER,
    needs_attention INTEGER NOT NULL DEFAULT 0,
    doc           TEXT    NOT NULL
);
CREATE INDEX IF NOT EXISTS sagas_newest ON sagas (created_at_ms DESC, saga_id DESC);
CREATE INDEX IF NOT EXISTS sagas_by_status ON sagas (status, created_at_ms DESC, saga_id DESC);
CREATE INDEX IF NOT EXISTS sagas_open ON sagas (claimable_after_ms)
    WHERE claimable_after_ms < 9223372036854775807;
CREATE INDEX IF NOT EXISTS sagas_by_customer ON sagas (customer_id, created_at_ms DESC, saga_id DESC);
CREATE INDEX IF NOT EXISTS sagas_finished ON sagas (finished_at_ms) WHERE finished_at_ms IS NOT NULL;
CREATE INDEX IF NOT EXISTS sagas_attention ON sagas (created_at_ms DESC, saga_id DESC) WHERE needs_attention = 1;
";

/// Saga store in a SQLite file.
#[derive(Clone, Debug)]
pub struct SqliteSagaStore {
    db: EmbeddedDb,
    retention: SagaRetention,
}

impl SqliteSagaStore {
    /// Opens the store at `path` (created, or brought to the latest schema
    /// version by [`migrations`]), with the default retention.
    pub fn open(path: &Path, durability: Durability) -> Result<Self, DbError> {
        if path.exists() {
            migrations::migrate(path)?;
        }
        Ok(SqliteSagaStore {
            db: EmbeddedDb::open(path, SCHEMA, durability)?,
            retention: SagaRetention::default(),
        })
    }

    /// The store keeping finished sagas as `retention` says.
    pub fn with_retention(mut self, retention: SagaRetention) -> Self {
        self.retention = retention;
        self
    }
}

/// A SQLite failure in domain terms: its class ([`embedded_store::classify`])
/// through [`StoreError::classified`].
impl From<DbError> for StoreError {
    fn from(e: DbError) -> Self {
        StoreError::classified(e.class(), e.to_string())
    }
}

impl From<rusqlite::Error> for StoreError {
    fn from(e: rusqlite::Error) -> Self {
        StoreError::classified(embedded_store::classify(&e), e.to_string())
    }
}

fn encode(saga: &Saga) -> Result<String, StoreError> {
    serde_json::to_string(saga).map_err(|e| StoreError::Corrupt(e.to_string()))
}

fn decode(doc: &str) -> Result<Saga, StoreError> {
    serde_json::from_str(doc).map_err(|e| StoreError::Corrupt(e.to_string()))
}

fn by(conn: &Connection, column: &str, key: &str) -> Result<Option<Saga>, StoreError> {
    let doc: Option<String> = conn
        .prepare_cached(&format!("SELECT doc FROM sagas WHERE {column} = ?1"))?
        .query_row([key], |r| r.get(0))
        .optional()?;
    doc.as_deref().map(decode).transpose()
}

/// Sagas per status.
const COUNT_SQL: &str = "SELECT status, COUNT(*) FROM sagas GROUP BY status";

/// The listing query for a filter. Each shape has its own statement so
/// SQLite plans it on its index: `sagas_attention`, `sagas_by_customer`,
/// `sagas_by_status` or `sagas_newest` (a statement with optional filters
/// would be planned once for every shape, on no index).
fn list_sql(filter: &SagaFilter) -> &'static str {
    if filter.needs_attention {
        return "SELECT doc FROM sagas
             WHERE needs_attention = 1 AND ?1 IS NULL AND ?6 IS NULL
               AND (?4 = 0 OR created_at_ms < ?2 OR (created_at_ms = ?2 AND saga_id < ?3))
             ORDER BY created_at_ms DESC, saga_id DESC LIMIT ?5";
    }
    match (filter.customer_id.is_some(), filter.status.is_some()) {
        (true, _) => {
            "SELECT doc FROM sagas
             WHERE customer_id = ?6 AND (?1 IS NULL OR status = ?1)
               AND (?4 = 0 OR created_at_ms < ?2 OR (created_at_ms = ?2 AND saga_id < ?3))
             ORDER BY created_at_ms DESC, saga_id DESC LIMIT ?5"
        }
        (false, true) => {
            "SELECT doc FROM sagas
             WHERE status = ?1 AND ?6 IS NULL
               AND (?4 = 0 OR created_at_ms < ?2 OR (created_at_ms = ?2 AND saga_id < ?3))
             ORDER BY created_at_ms DESC, saga_id DESC LIMIT ?5"
        }
        (false, false) => {
            "SELECT doc FROM sagas
             WHERE ?1 IS NULL AND ?6 IS NULL
               AND (?4 = 0 OR created_at_ms < ?2 OR (created_at_ms = ?2 AND saga_id < ?3))
             ORDER BY created_at_ms DESC, saga_id DESC LIMIT ?5"
        }
    }
}

fn list_in(
    conn: &Connection,
    filter: &SagaFilter,
    page_size: usize,
    after: Option<&Cursor>,
) -> Result<Page, StoreError> {
    let limit = i64::try_from(page_size)
        .unwrap_or(i64::MAX)
        .saturating_add(1);
    let (after_ms, after_id) = match after {
        Some(c) => (c.created_at_ms, c.saga_id.as_str()),
        None => (i64::MAX, ""),
    };
    let status = filter.status.map(SagaStatus::as_str);
    let mut stmt = conn.prepare_cached(list_sql(filter))?;
    let docs = stmt
        .query_map(
            params![
                status,
                after_ms,
                after_id,
                after.is_some(),
                limit,
                filter.customer_id
            ],
            |r| r.get::<_, String>(0),
        )?
        .collect::<Result<Vec<_>, _>>()?;
    let mut sagas = docs
        .iter()
        .map(|d| decode(d))
        .collect::<Result<Vec<_>, _>>()?;
    let next = if sagas.len() > page_size {
        sagas.truncate(page_size);
        sagas.last().map(|s| Cursor {
            created_at_ms: s.created_at_ms,
            saga_id: s.saga_id.clone(),
        })
    } else {
        None
    };
    Ok(Page { sagas, next })
}

fn to_i64(v: u64) -> i64 {
    i64::try_from(v).unwrap_or(i64::MAX)
}

#[async_trait]
impl SagaStore for SqliteSagaStore {
    async fn create(&self, saga: &Saga) -> Result<Created, StoreError> {
        let doc = encode(saga)?;
        let (saga_id, request_id, status) =
            (saga.saga_id.clone(), saga.request_id.clone(), saga.status);
        let customer_id = saga.order.customer_id.clone();
        let (lease_owner, lease_until, claimable) = (
            saga.lease_owner().map(str::to_owned),
            saga.lease_until_ms(),
            saga.claimable_after_ms(),
        );
        let (created, updated, version) =
            (saga.created_at_ms, saga.updated_at_ms, to_i64(saga.version));
        let finished = saga.expires_from_ms();
        self.db
            .write_statement(move |conn| {
                let inserted = conn
                    .prepare_cached(
                        "INSERT INTO sagas (saga_id, request_id, status, version, created_at_ms, updated_at_ms,
                                            lease_owner, lease_until_ms, doc, customer_id, claimable_after_ms,
                                            finished_at_ms)
                         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12) ON CONFLICT (request_id) DO NOTHING",
                    )?
                    .execute(params![
                        saga_id,
                        request_id,
                        status.as_str(),
                        version,
                        created,
                        updated,
                        lease_owner,
                        lease_until,
                        doc,
                        customer_id,
                        claimable,
                        finished
                    ])?;
                if inserted == 1 {
                    return Ok(Created::New);
                }
                match by(conn, "request_id", &request_id)? {
                    Some(existing) => Ok(Created::Existing(Box::new(existing))),
                    // The conflict was on saga_id, not request_id: ids collide.
                    None => Err(StoreError::Conflict {
                        saga_id,
                        expected: 0,
                    }),
                }
            })
            .await
    }

    async fn save(&self, saga: &Saga) -> Result<(), StoreError> {
        let doc = encode(saga)?;
        let saga_id = saga.saga_id.clone();
        let (status, updated, version) = (saga.status, saga.updated_at_ms, saga.version);
        let (lease_owner, lease_until, claimable) = (
            saga.lease_owner().map(str::to_owned),
            saga.lease_until_ms(),
            saga.claimable_after_ms(),
        );
        let expected = version.saturating_sub(1);
        let finished = saga.expires_from_ms();
        let needs_attention = saga.attention.is_some();
        self.db
            .write_statement(move |conn| {
                let changed = conn
                    .prepare_cached(
                        "UPDATE sagas SET status = ?2, version = ?3, updated_at_ms = ?4, doc = ?5,
                                         lease_owner = ?7, lease_until_ms = ?8, claimable_after_ms = ?9,
                                         finished_at_ms = ?10, needs_attention = ?11
                         WHERE saga_id = ?1 AND version = ?6",
                    )?
                    .execute(params![
                        saga_id,
                        status.as_str(),
                        to_i64(version),
                        updated,
                        doc,
                        to_i64(expected),
                        lease_owner,
                        lease_until,
                        claimable,
                        finished,
                        needs_attention
                    ])?;
                if changed == 1 {
                    Ok(())
                } else {
                    Err(StoreError::Conflict { saga_id, expected })
                }
            })
            .await
    }

    async fn get(&self, saga_id: &str) -> Result<Option<Saga>, StoreError> {
        let key = saga_id.to_owned();
        self.db.read(move |conn| by(conn, "saga_id", &key)).await
    }

    async fn get_by_request_id(&self, request_id: &str) -> Result<Option<Saga>, StoreError> {
        let key = request_id.to_owned();
        self.db.read(move |conn| by(conn, "request_id", &key)).await
    }

    async fn list(
        &self,
        filter: &SagaFilter,
        page_size: usize,
        after: Option<Cursor>,
    ) -> Result<Page, StoreError> {
        let filter = filter.clone();
        self.db
            .read(move |conn| list_in(conn, &filter, page_size, after.as_ref()))
            .await
    }

    async fn count_by_status(&self) -> Result<StatusCounts, StoreError> {
        self.db
            .read(|conn| {
                // A scan of the (status, …) index alone: no document is read.
                let mut stmt = conn.prepare_cached(COUNT_SQL)?;
                let rows = stmt
                    .query_map([], |r| Ok((r.get::<_, String>(0)?, r.get::<_, i64>(1)?)))?
                    .collect::<Result<Vec<_>, _>>()?;
                let mut counts: StatusCounts = SagaStatus::ALL.iter().map(|s| (*s, 0)).collect();
                for (status, n) in rows {
                    let status = SagaStatus::parse(&status)
                        .ok_or_else(|| StoreError::Corrupt(format!("unknown status {status:?}")))?;
                    if let Some(slot) = counts.iter_mut().find(|(s, _)| *s == status) {
                        slot.1 = u64::try_from(n).unwrap_or(0);
                    }
                }
                Ok(counts)
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
        self.db
            .read(move |conn| {
                let scan =
                    |sql: &str, key: &dyn rusqlite::ToSql| -> Result<Vec<String>, StoreError> {
                        let limit = i64::try_from(limit).unwrap_or(i64::MAX);
                        let docs = conn
                            .prepare_cached(sql)?
                            .query_map(params![key, limit], |r| r.get::<_, String>(0))?
                            .collect::<Result<Vec<_>, _>>()?;
                        Ok(docs)
                    };
                let expired = scan(CLAIMABLE_SQL, &now_ms)?;
                let own = match &owner {
                    Some(owner) => scan(OWN_CLAIMABLE_SQL, owner)?,
                    None => Vec::new(),
                };
                Ok(merge_claimable(
                    decode_each(expired, |d| decode(d)),
                    decode_each(own, |d| decode(d)),
                    limit,
                ))
            })
            .await
    }

    async fn expired(&self, now_ms: i64, limit: usize) -> Result<Vec<Saga>, StoreError> {
        let Some(cutoff) = self.retention.cutoff_ms(now_ms) else {
            return Ok(Vec::new());
        };
        let limit = i64::try_from(limit).unwrap_or(i64::MAX);
        self.db
            .read(move |conn| {
                let docs = conn
                    .prepare_cached(EXPIRED_SQL)?
                    .query_map(params![cutoff, limit], |r| r.get::<_, String>(0))?
                    .collect::<Result<Vec<_>, _>>()?;
                Ok(decode_each(docs, |d| decode(d)))
            })
            .await
    }

    async fn flag_attention(
        &self,
        saga: &Saga,
        attention: &Attention,
        retry_after_ms: i64,
    ) -> Result<bool, StoreError> {
        let saga_id = saga.saga_id.clone();
        let stored = to_i64(saga.version.saturating_sub(1));
        let attention =
            serde_json::to_string(attention).map_err(|e| StoreError::Corrupt(e.to_string()))?;
        self.db
            .write(move |conn| {
                let changed = conn.prepare_cached(FLAG_ATTENTION_SQL)?.execute(params![
                    saga_id,
                    stored,
                    attention,
                    retry_after_ms
                ])?;
                Ok(changed == 1)
            })
            .await
    }

    async fn delete_finished(&self, sagas: &[Saga]) -> Result<u64, StoreError> {
        let saga_ids: Vec<String> = sagas.iter().map(|s| s.saga_id.clone()).collect();
        self.db
            .write(move |conn| {
                let mut delete = conn.prepare_cached(DELETE_FINISHED_SQL)?;
                let mut deleted = 0;
                for id in &saga_ids {
                    deleted += delete.execute([id])? as u64;
                }
                Ok(deleted)
            })
            .await
    }

    async fn purge_expired(&self, now_ms: i64, limit: usize) -> Result<u64, StoreError> {
        let Some(cutoff) = self.retention.cutoff_ms(now_ms) else {
            return Ok(0);
        };
        let limit = i64::try_from(limit).unwrap_or(i64::MAX);
        self.db
            .write(move |conn| {
                let deleted = conn
                    .prepare_cached(PURGE_SQL)?
                    .execute(params![cutoff, limit])?;
                Ok(deleted as u64)
            })
            .await
    }

    async fn reclaim(&self) -> Result<u64, StoreError> {
        Ok(self.db.reclaim().await?)
    }

    async fn stats(&self) -> Result<StoreStats, StoreError> {
        let size = self.db.file_size().await?;
        let oldest: Option<i64> = self
            .db
            .read(|conn| -> Result<Option<i64>, StoreError> {
                Ok(conn.query_row(OLDEST_FINISHED_SQL, [], |r| r.get(0))?)
            })
            .await?;
        Ok(StoreStats {
            size_bytes: Some(size.bytes()),
            oldest_finished_ms: oldest,
        })
    }
}

/// Finished sagas that expired (finished before `?1`), longest expired
/// first: a range of `sagas_finished`.
const EXPIRED_SQL: &str = "SELECT doc FROM sagas WHERE finished_at_ms < ?1
     ORDER BY finished_at_ms LIMIT ?2";

/// One purge batch: the `?2` longest-expired sagas (a range of
/// `sagas_finished`), deleted by primary key.
const PURGE_SQL: &str = "DELETE FROM sagas WHERE saga_id IN
     (SELECT saga_id FROM sagas WHERE finished_at_ms < ?1 ORDER BY finished_at_ms LIMIT ?2)";

/// Flags the saga `?1` at version `?2` as needing attention: the flag
/// column and the `attention` in its document, version unchanged, claimable
/// again from `?4`.
const FLAG_ATTENTION_SQL: &str = "UPDATE sagas
     SET needs_attention = 1, doc = json_set(doc, '$.attention', json(?3)),
         claimable_after_ms = ?4
     WHERE saga_id = ?1 AND version = ?2";

/// One archived saga, by primary key, only if it is finished.
const DELETE_FINISHED_SQL: &str =
    "DELETE FROM sagas WHERE saga_id = ?1 AND finished_at_ms IS NOT NULL";

/// When the oldest finished saga finished: the first entry of
/// `sagas_finished`.
const OLDEST_FINISHED_SQL: &str =
    "SELECT MIN(finished_at_ms) FROM sagas WHERE finished_at_ms IS NOT NULL";

/// Unfinished sagas whose lease expired before `?1` (or that nobody
/// leases), longest waiting first: a range of `sagas_open`. The literal
/// bound is the partial index's condition: SQLite uses a partial index
/// only for a query that states it.
const CLAIMABLE_SQL: &str = "SELECT doc FROM sagas
     WHERE claimable_after_ms < ?1 AND claimable_after_ms < 9223372036854775807
     ORDER BY claimable_after_ms LIMIT ?2";

/// Unfinished sagas leased to `?1`: all of `sagas_open` (the sagas in
/// flight, few), filtered by owner. Only an instance starting up asks.
const OWN_CLAIMABLE_SQL: &str = "SELECT doc FROM sagas
     WHERE lease_owner = ?1 AND claimable_after_ms < 9223372036854775807
     ORDER BY claimable_after_ms LIMIT ?2";

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::{self, StepNames};
    use crate::saga::{Order, OrderItem};

    /// What passes is waited out; a corrupt or read-only file and a refused
    /// statement stop the driver and flag the saga (see `Executor::persist`).
    #[test]
    fn sqlite_failures_map_to_what_the_executor_does_about_them() {
        let failure = |code| {
            StoreError::from(rusqlite::Error::SqliteFailure(
                rusqlite::ffi::Error::new(code),
                None,
            ))
        };
        assert!(matches!(
            failure(rusqlite::ffi::SQLITE_BUSY),
            StoreError::Unavailable(_)
        ));
        assert!(matches!(
            failure(rusqlite::ffi::SQLITE_FULL),
            StoreError::Unavailable(_)
        ));
        assert!(matches!(
            failure(rusqlite::ffi::SQLITE_CORRUPT),
            StoreError::Corrupt(_)
        ));
        assert!(matches!(
            failure(rusqlite::ffi::SQLITE_READONLY),
            StoreError::Rejected(_)
        ));
        assert!(matches!(
            StoreError::from(DbError::WriterGone),
            StoreError::Unavailable(_)
        ));
    }

    fn saga(saga_id: &str, customer_id: &str) -> Saga {
        let steps = [StepNames {
            name: "payment",
            action: "charge",
            compensation: "refund",
        }];
        let order = Order {
            order_id: format!("order-{saga_id}"),
            customer_id: customer_id.to_owned(),
            items: vec![OrderItem {
                product_id: "sku".into(),
                quantity: 1,
                unit_price_cents: 1,
            }],
            total_cents: 1,
        };
        let mut saga = engine::start(
            &steps,
            saga_id.into(),
            format!("r-{saga_id}"),
            "fp".into(),
            order,
            7,
        );
        saga.version = 1;
        saga
    }

    /// A version-1 file (no customer column): opening it adds the column,
    /// fills it from each saga's document, and the listing by customer
    /// finds the sagas it held.
    #[tokio::test]
    async fn an_older_database_gets_its_customer_column_filled_from_each_saga() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("orchestrator.db");
        {
            let conn = embedded_store::connect(&path, rusqlite::OpenFlags::default()).unwrap();
            conn.execute_batch(
                "CREATE TABLE sagas (
                    saga_id TEXT PRIMARY KEY, request_id TEXT NOT NULL UNIQUE,
                    status TEXT NOT NULL, version INTEGER NOT NULL,
                    created_at_ms INTEGER NOT NULL, updated_at_ms INTEGER NOT NULL,
                    doc TEXT NOT NULL);",
            )
            .unwrap();
            for (id, customer) in [("s1", "zoe"), ("s2", "yann")] {
                conn.execute(
                    "INSERT INTO sagas VALUES (?1, ?2, 'running', 1, 7, 7, ?3)",
                    params![id, format!("r-{id}"), encode(&saga(id, customer)).unwrap()],
                )
                .unwrap();
            }
        }
        let store = SqliteSagaStore::open(&path, Durability::Process).unwrap();
        let zoe = SagaFilter {
            status: None,
            customer_id: Some("zoe".into()),
            needs_attention: false,
        };
        let page = store.list(&zoe, 10, None).await.unwrap();
        let ids: Vec<_> = page.sagas.iter().map(|s| s.saga_id.as_str()).collect();
        assert_eq!(ids, ["s1"]);
        // New sagas are stored with their customer too.
        store.create(&saga("s3", "zoe")).await.unwrap();
        assert_eq!(store.list(&zoe, 10, None).await.unwrap().sagas.len(), 2);
    }

    /// Every listing shape, the counts, recovery and the purge statements
    /// are answered from an index, without sorting in a temporary b-tree
    /// (no statement scans the table).
    #[test]
    fn every_query_of_the_console_is_planned_on_an_index() {
        let conn = Connection::open_in_memory().unwrap();
        conn.execute_batch(SCHEMA).unwrap();
        let plan = |sql: &str| -> String {
            let mut stmt = conn.prepare(&format!("EXPLAIN QUERY PLAN {sql}")).unwrap();
            let params = stmt.parameter_count();
            let nulls: Vec<Option<String>> = vec![None; params];
            let rows = stmt
                .query_map(rusqlite::params_from_iter(nulls), |r| r.get::<_, String>(3))
                .unwrap();
            rows.map(Result::unwrap).collect::<Vec<_>>().join("; ")
        };
        let status = Some(SagaStatus::Failed);
        let customer = Some("zoe".to_owned());
        for (filter, index) in [
            (SagaFilter::default(), "sagas_newest"),
            (SagaFilter::status(status), "sagas_by_status"),
            (
                SagaFilter {
                    status: None,
                    customer_id: customer.clone(),
                    needs_attention: false,
                },
                "sagas_by_customer",
            ),
            (
                SagaFilter {
                    status,
                    customer_id: customer,
                    needs_attention: false,
                },
                "sagas_by_customer",
            ),
        ] {
            let plan = plan(list_sql(&filter));
            assert!(plan.contains(index), "{filter:?}: {plan}");
            assert!(!plan.contains("TEMP B-TREE"), "{filter:?}: {plan}");
        }
        let counts = plan(COUNT_SQL);
        assert!(counts.contains("COVERING INDEX"), "{counts}");
        for (sql, index) in [
            (CLAIMABLE_SQL, "sagas_open"),
            (OWN_CLAIMABLE_SQL, "sagas_open"),
            (EXPIRED_SQL, "sagas_finished"),
            (PURGE_SQL, "sagas_finished"),
            (OLDEST_FINISHED_SQL, "sagas_finished"),
            (DELETE_FINISHED_SQL, "sqlite_autoindex_sagas"),
        ] {
            let plan = plan(sql);
            assert!(plan.contains(index), "{sql}: {plan}");
            assert!(!plan.contains("TEMP B-TREE"), "{sql}: {plan}");
            assert!(!plan.contains("SCAN sagas"), "{sql}: {plan}");
        }
    }

    /// A version-3 file (leases and customers, no claimable time): opening
    /// it computes the column from status and lease, so recovery finds
    /// the unfinished sagas whose lease expired and never a finished one;
    /// a row whose document cannot be decoded is skipped, not fatal.
    #[tokio::test]
    async fn an_older_database_gets_its_claimable_times_and_bad_rows_are_skipped() {
        use crate::saga::Lease;
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("orchestrator.db");
        {
            let conn = embedded_store::connect(&path, rusqlite::OpenFlags::default()).unwrap();
            conn.execute_batch(
                "CREATE TABLE sagas (
                    saga_id TEXT PRIMARY KEY, request_id TEXT NOT NULL UNIQUE,
                    status TEXT NOT NULL, customer_id TEXT NOT NULL DEFAULT '',
                    version INTEGER NOT NULL,
                    created_at_ms INTEGER NOT NULL, updated_at_ms INTEGER NOT NULL,
                    lease_owner TEXT, lease_until_ms INTEGER NOT NULL DEFAULT 0,
                    doc TEXT NOT NULL);",
            )
            .unwrap();
            for (id, status, until) in [
                ("expired", "running", 50),
                ("held", "compensating", 5_000),
                ("finished", "completed", 0),
                ("bad", "running", 10),
            ] {
                let mut s = saga(id, "erin");
                s.lease = Some(Lease {
                    owner: "b".into(),
                    until_ms: until,
                });
                let doc = if id == "bad" {
                    "{not json".to_owned()
                } else {
                    encode(&s).unwrap()
                };
                conn.execute(
                    "INSERT INTO sagas VALUES (?1, ?2, ?3, 'erin', 1, 7, 7, 'b', ?4, ?5)",
                    params![id, format!("r-{id}"), status, until, doc],
                )
                .unwrap();
            }
        }
        let store = SqliteSagaStore::open(&path, Durability::Process).unwrap();
        let ids = |sagas: Vec<Saga>| sagas.into_iter().map(|s| s.saga_id).collect::<Vec<_>>();
        let now = store.claimable(100, None, 10).await.unwrap();
        assert_eq!(ids(now), ["expired"]);
        let own = store.claimable(100, Some("b"), 10).await.unwrap();
        assert_eq!(ids(own), ["expired", "held"]);
    }

    /// The purge deletes only COMPLETED and CANCELLED sagas past the
    /// retention, at most a batch at a time, and the finished sagas of a
    /// version-1 file (no finish time column) are purged too.
    #[tokio::test]
    async fn the_purge_deletes_finished_sagas_past_the_retention_in_batches() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("orchestrator.db");
        {
            let conn = embedded_store::connect(&path, rusqlite::OpenFlags::default()).unwrap();
            conn.execute_batch(
                "CREATE TABLE sagas (
                    saga_id TEXT PRIMARY KEY, request_id TEXT NOT NULL UNIQUE,
                    status TEXT NOT NULL, version INTEGER NOT NULL,
                    created_at_ms INTEGER NOT NULL, updated_at_ms INTEGER NOT NULL,
                    doc TEXT NOT NULL);",
            )
            .unwrap();
            conn.execute(
                "INSERT INTO sagas VALUES ('legacy', 'r-legacy', 'completed', 3, 5, 10, ?1)",
                [encode(&saga("legacy", "erin")).unwrap()],
            )
            .unwrap();
        }
        let store = SqliteSagaStore::open(&path, Durability::Process)
            .unwrap()
            .with_retention(SagaRetention {
                keep: Some(std::time::Duration::from_millis(100)),
                archive: false,
            });
        for (i, status) in [
            SagaStatus::Completed,
            SagaStatus::Cancelled,
            SagaStatus::Failed,
            SagaStatus::Running,
            SagaStatus::Compensating,
            SagaStatus::Completed,
        ]
        .into_iter()
        .enumerate()
        {
            let mut s = saga(&format!("s{i}"), "erin");
            s.status = status;
            s.updated_at_ms = 1_000 + i as i64;
            store.create(&s).await.unwrap();
        }
        // At 1,103 the retention of 100 ms has run out for everything
        // finished before 1,003: legacy, s0, s1 (s5 finished at 1,005).
        assert_eq!(store.purge_expired(1_103, 2).await.unwrap(), 2);
        assert_eq!(store.purge_expired(1_103, 2).await.unwrap(), 1);
        assert_eq!(store.purge_expired(1_103, 2).await.unwrap(), 0);
        let left: Vec<String> = store
            .list(&SagaFilter::default(), 10, None)
            .await
            .unwrap()
            .sagas
            .into_iter()
            .map(|s| s.saga_id)
            .collect();
        assert_eq!(left, ["s5", "s4", "s3", "s2"]);
        assert_eq!(store.stats().await.unwrap().oldest_finished_ms, Some(1_005));
        // Nothing expires without a retention.
        let forever = store.with_retention(SagaRetention {
            keep: None,
            archive: false,
        });
        assert_eq!(forever.purge_expired(i64::MAX, 10).await.unwrap(), 0);
        assert!(forever.expired(i64::MAX, 10).await.unwrap().is_empty());
    }
}
