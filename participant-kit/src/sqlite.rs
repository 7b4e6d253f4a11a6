//! The operationHistory table in an embedded SQLite database.
//!
//! `(request_id, kind)` is the primary key, so [`HistoryTx::insert_or_get`]
//! is an `INSERT … ON CONFLICT DO NOTHING` followed, only when the insert
//! lost, by a read of the winner inside the same write transaction.
//!
//! [`transact`] runs one participant rule (effect + record) as one job of
//! the embedded store's group commit: its own savepoint, rolled back alone
//! when the rule fails, acknowledged only once the batch is committed.

use crate::{Failure, HistoryTx, OperationRecord, ParticipantError, RecordStatus};
use embedded_store::EmbeddedDb;
use futures::future::LocalBoxFuture;
use rusqlite::{Connection, OptionalExtension, Row, params};

/// Runs `rule` over `input` in one write transaction of `db`, written once
/// for every participant's embedded store: an error (a store failure or a
/// refusal decided inside the rule) rolls back everything the rule did.
pub async fn transact<I, R, F>(db: &EmbeddedDb, input: I, rule: F) -> Result<R, ParticipantError>
where
    I: Send + 'static,
    R: Send + 'static,
    F: for<'a> FnOnce(
            &'a mut SqliteHistory<'a>,
            &'a I,
        ) -> LocalBoxFuture<'a, Result<R, Failure<rusqlite::Error>>>
        + Send
        + 'static,
{
    db.write(move |conn| {
        let mut tx = SqliteHistory::new(conn);
        SqliteHistory::run(rule(&mut tx, &input)).map_err(Failure::into_participant_error)
    })
    .await
}

/// Schema of the operationHistory; each participant runs it at start-up.
pub const SCHEMA: &str = "
CREATE TABLE IF NOT EXISTS operation_history (
    request_id     TEXT    NOT NULL,
    kind           TEXT    NOT NULL,
    subject        TEXT    NOT NULL,
    amount         INTEGER NOT NULL,
    fingerprint    TEXT    NOT NULL,
    parameters     TEXT    NOT NULL,
    status         TEXT    NOT NULL,
    detail         TEXT    NOT NULL,
    recorded_at_ms INTEGER NOT NULL,
    PRIMARY KEY (request_id, kind)
) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS operation_history_by_subject
    ON operation_history (subject, recorded_at_ms);
";

/// Columns in the order [`from_row`] reads them.
pub const COLUMNS: &str =
    "request_id, kind, subject, amount, fingerprint, parameters, status, detail, recorded_at_ms";

/// The barrier's view of an open SQLite write transaction.
pub struct SqliteHistory<'c> {
    conn: &'c Connection,
}

impl<'c> SqliteHistory<'c> {
    /// Wraps a connection that is inside a write transaction.
    pub fn new(conn: &'c Connection) -> Self {
        SqliteHistory { conn }
    }

    /// The connection, for the participant's own statements in the same
    /// transaction.
    pub fn conn(&self) -> &'c Connection {
        self.conn
    }

    /// Runs a barrier step synchronously. The SQLite implementation never
    /// suspends, so blocking on it costs nothing; the async signature exists
    /// for the MongoDB backend.
    pub fn run<F: std::future::Future>(future: F) -> F::Output {
        futures::executor::block_on(future)
    }
}

impl HistoryTx for SqliteHistory<'_> {
    type Error = rusqlite::Error;

    async fn insert_or_get(
        &mut self,
        r: &OperationRecord,
    ) -> Result<Option<OperationRecord>, rusqlite::Error> {
        let inserted = self.conn.prepare_cached(
            "INSERT INTO operation_history (request_id, kind, subject, amount, fingerprint, parameters, status, detail, recorded_at_ms)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9)
             ON CONFLICT (request_id, kind) DO NOTHING",
        )?
        .execute(params![
            r.request_id,
            r.kind,
            r.subject,
            r.amount,
            r.fingerprint,
            r.parameters,
            r.status.as_str(),
            r.detail,
            r.recorded_at_ms
        ])?;
        if inserted == 1 {
            return Ok(None);
        }
        get(self.conn, &r.request_id, &r.kind)
    }

    async fn get(
        &mut self,
        request_id: &str,
        kind: &str,
    ) -> Result<Option<OperationRecord>, rusqlite::Error> {
        get(self.conn, request_id, kind)
    }

    async fn set_status(
        &mut self,
        request_id: &str,
        kind: &str,
        status: RecordStatus,
        detail: &str,
    ) -> Result<(), rusqlite::Error> {
        let updated = self
            .conn
            .prepare_cached(
                "UPDATE operation_history SET status = ?3, detail = ?4 WHERE request_id = ?1 AND kind = ?2",
            )?
            .execute(params![request_id, kind, status.as_str(), detail])?;
        if updated == 1 {
            Ok(())
        } else {
            Err(rusqlite::Error::QueryReturnedNoRows)
        }
    }
}

/// Reads one record.
pub fn get(
    conn: &Connection,
    request_id: &str,
    kind: &str,
) -> Result<Option<OperationRecord>, rusqlite::Error> {
    conn.prepare_cached(&format!(
        "SELECT {COLUMNS} FROM operation_history WHERE request_id = ?1 AND kind = ?2"
    ))?
    .query_row(params![request_id, kind], from_row)
    .optional()
}

/// Every record under `request_id` (one per kind), oldest first — what
/// `ListOperations` shows. Served by the primary key `(request_id, kind)`.
pub fn records_of(
    conn: &Connection,
    request_id: &str,
) -> Result<Vec<OperationRecord>, rusqlite::Error> {
    let mut stmt = conn.prepare_cached(&format!(
        "SELECT {COLUMNS} FROM operation_history WHERE request_id = ?1
         ORDER BY recorded_at_ms, kind"
    ))?;
    let rows = stmt.query_map([request_id], from_row)?;
    rows.collect()
}

/// The most recent records about one subject (account or product), newest
/// first.
pub fn recent_for_subject(
    conn: &Connection,
    subject: &str,
    limit: usize,
) -> Result<Vec<OperationRecord>, rusqlite::Error> {
    let limit = i64::try_from(limit).unwrap_or(i64::MAX);
    let mut stmt = conn.prepare_cached(&format!(
        "SELECT {COLUMNS} FROM operation_history WHERE subject = ?1
         ORDER BY recorded_at_ms DESC, request_id DESC LIMIT ?2"
    ))?;
    let rows = stmt.query_map(params![subject, limit], from_row)?;
    rows.collect()
}

/// Decodes a row selected with [`COLUMNS`].
pub fn from_row(row: &Row<'_>) -> Result<OperationRecord, rusqlite::Error> {
    let status: String = row.get(6)?;
    let status = RecordStatus::parse(&status).ok_or_else(|| {
        rusqlite::Error::FromSqlConversionFailure(
            6,
            rusqlite::types::Type::Text,
            format!("unknown operation status {status:?}").into(),
        )
    })?;
    Ok(OperationRecord {
        request_id: row.get(0)?,
        kind: row.get(1)?,
        subject: row.get(2)?,
        amount: row.get(3)?,
        fingerprint: row.get(4)?,
        parameters: row.get(5)?,
        status,
        detail: row.get(7)?,
        recorded_at_ms: row.get(8)?,
    })
}
