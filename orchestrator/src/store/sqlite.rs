//! The embedded saga store: one SQLite table, the saga as a JSON document
//! plus the indexed columns queries need (request_id unique, status,
//! created time, version).
//!
//! JSON is serialised on the caller's task, so the single writer thread only
//! runs the SQL; concurrent sagas' writes share group commits.

use super::{Created, Cursor, Page, SagaStore, StoreError};
use crate::saga::{Saga, SagaStatus};
use async_trait::async_trait;
use embedded_store::{DbError, Durability, EmbeddedDb};
use rusqlite::{Connection, OptionalExtension, params};
use std::path::Path;

const SCHEMA: &str = "
CREATE TABLE IF NOT EXISTS sagas (
    saga_id       TEXT    PRIMARY KEY,
    request_id    TEXT    NOT NULL UNIQUE,
    status        TEXT    NOT NULL,
    version       INTEGER NOT NULL,
    created_at_ms INTEGER NOT NULL,
    updated_at_ms INTEGER NOT NULL,
    lease_owner   TEXT,
    lease_until_ms INTEGER NOT NULL DEFAULT 0,
    doc           TEXT    NOT NULL
);
CREATE INDEX IF NOT EXISTS sagas_newest ON sagas (created_at_ms DESC, saga_id DESC);
CREATE INDEX IF NOT EXISTS sagas_by_status ON sagas (status, created_at_ms DESC, saga_id DESC);
CREATE INDEX IF NOT EXISTS sagas_by_lease ON sagas (status, lease_until_ms);
";

/// Saga store in a SQLite file.
#[derive(Clone, Debug)]
pub struct SqliteSagaStore {
    db: EmbeddedDb,
}

impl SqliteSagaStore {
    /// Opens (creating or migrating if needed) the store at `path`.
    pub fn open(path: &Path, durability: Durability) -> Result<Self, DbError> {
        if path.exists() {
            migrate(path)?;
        }
        Ok(SqliteSagaStore {
            db: EmbeddedDb::open(path, SCHEMA, durability)?,
        })
    }
}

/// Adds the lease columns to a database created before leases existed.
fn migrate(path: &Path) -> Result<(), DbError> {
    let conn = Connection::open(path)?;
    let has_table: bool = conn.query_row(
        "SELECT COUNT(*) > 0 FROM sqlite_master WHERE type = 'table' AND name = 'sagas'",
        [],
        |r| r.get(0),
    )?;
    if !has_table {
        return Ok(());
    }
    let has_lease: bool = conn.query_row(
        "SELECT COUNT(*) > 0 FROM pragma_table_info('sagas') WHERE name = 'lease_until_ms'",
        [],
        |r| r.get(0),
    )?;
    if !has_lease {
        conn.execute_batch(
            "ALTER TABLE sagas ADD COLUMN lease_owner TEXT;
             ALTER TABLE sagas ADD COLUMN lease_until_ms INTEGER NOT NULL DEFAULT 0;",
        )?;
    }
    Ok(())
}

impl From<DbError> for StoreError {
    fn from(e: DbError) -> Self {
        StoreError::Unavailable(e.to_string())
    }
}

impl From<rusqlite::Error> for StoreError {
    fn from(e: rusqlite::Error) -> Self {
        StoreError::Unavailable(e.to_string())
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

fn to_i64(v: u64) -> i64 {
    i64::try_from(v).unwrap_or(i64::MAX)
}

#[async_trait]
impl SagaStore for SqliteSagaStore {
    async fn create(&self, saga: &Saga) -> Result<Created, StoreError> {
        let doc = encode(saga)?;
        let (saga_id, request_id, status) =
            (saga.saga_id.clone(), saga.request_id.clone(), saga.status);
        let (lease_owner, lease_until) =
            (saga.lease_owner().map(str::to_owned), saga.lease_until_ms());
        let (created, updated, version) =
            (saga.created_at_ms, saga.updated_at_ms, to_i64(saga.version));
        self.db
            .write(move |conn| {
                let inserted = conn
                    .prepare_cached(
                        "INSERT INTO sagas (saga_id, request_id, status, version, created_at_ms, updated_at_ms,
                                            lease_owner, lease_until_ms, doc)
                         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9) ON CONFLICT (request_id) DO NOTHING",
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
                        doc
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
        let (lease_owner, lease_until) =
            (saga.lease_owner().map(str::to_owned), saga.lease_until_ms());
        let expected = version.saturating_sub(1);
        self.db
            .write(move |conn| {
                let changed = conn
                    .prepare_cached(
                        "UPDATE sagas SET status = ?2, version = ?3, updated_at_ms = ?4, doc = ?5,
                                         lease_owner = ?7, lease_until_ms = ?8
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
                        lease_until
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
        status: Option<SagaStatus>,
        page_size: usize,
        after: Option<Cursor>,
    ) -> Result<Page, StoreError> {
        self.db
            .read(move |conn| {
                let limit = i64::try_from(page_size)
                    .unwrap_or(i64::MAX)
                    .saturating_add(1);
                let (after_ms, after_id) = match &after {
                    Some(c) => (c.created_at_ms, c.saga_id.clone()),
                    None => (i64::MAX, String::new()),
                };
                let status = status.map(SagaStatus::as_str);
                let mut stmt = conn.prepare_cached(
                    "SELECT doc FROM sagas
                     WHERE (?1 IS NULL OR status = ?1)
                       AND (?4 = 0 OR created_at_ms < ?2 OR (created_at_ms = ?2 AND saga_id < ?3))
                     ORDER BY created_at_ms DESC, saga_id DESC LIMIT ?5",
                )?;
                let docs = stmt
                    .query_map(
                        params![status, after_ms, after_id, after.is_some(), limit],
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
                let limit = i64::try_from(limit).unwrap_or(i64::MAX);
                let mut stmt = conn.prepare_cached(
                    "SELECT doc FROM sagas WHERE status IN ('running', 'compensating')
                       AND (lease_until_ms < ?1 OR lease_owner = ?2)
                     ORDER BY created_at_ms ASC, saga_id ASC LIMIT ?3",
                )?;
                let docs = stmt
                    .query_map(params![now_ms, owner, limit], |r| r.get::<_, String>(0))?
                    .collect::<Result<Vec<_>, _>>()?;
                docs.iter().map(|d| decode(d)).collect()
            })
            .await
    }
}
