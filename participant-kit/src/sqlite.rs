//! The operationHistory table in an embedded SQLite database.
//!
//! `(request_id, kind)` is the primary key, so [`HistoryTx::insert`] is an
//! `INSERT … ON CONFLICT DO NOTHING` that reports whether it inserted, and
//! [`HistoryTx::insert_or_get`] reads the winner when it did not.
//!
//! [`transact`] runs one participant rule (effect + record) as one job of
//! the embedded store's group commit: its own savepoint, rolled back alone
//! when the rule fails, acknowledged only once the batch is committed.

use crate::counter::{Add, Counter, Take};
use crate::{Admission, Failure, HistoryTx, OperationRecord, ParticipantError, RecordStatus};
use embedded_store::{EmbeddedDb, control};
use futures::future::LocalBoxFuture;
use rusqlite::{Connection, OptionalExtension, Row, params};

/// A rule over the open transaction: `apply(tx, input, admission)`.
pub type Apply<I, R> = for<'a> fn(
    &'a mut SqliteHistory<'a>,
    &'a I,
    &'a Admission,
) -> LocalBoxFuture<'a, Result<R, Failure<rusqlite::Error>>>;

/// The answer from the record when the key was taken: `replay(tx, input)`.
pub type Replay<I, R> = for<'a> fn(
    &'a mut SqliteHistory<'a>,
    &'a I,
) -> LocalBoxFuture<'a, Result<R, Failure<rusqlite::Error>>>;

/// Runs a participant rule over `input` in one write transaction of `db`,
/// written once for every participant's embedded store:
///
/// - `apply` with `admission`; its error (a store failure or a refusal
///   decided inside it) rolls back everything it did;
/// - when it finds its key taken ([`Failure::Taken`]), what it did is
///   rolled back and `replay` answers from the record;
/// - when it finds the rules refuse it after part of its effect
///   ([`Failure::RollBack`]), that part is rolled back and `apply` runs
///   again reading before writing, to record why ([`Admission::Verify`]).
pub async fn transact<I, R>(
    db: &EmbeddedDb,
    input: I,
    admission: Admission,
    apply: Apply<I, R>,
    replay: Replay<I, R>,
) -> Result<R, ParticipantError>
where
    I: Send + 'static,
    R: Send + 'static,
{
    db.write(move |conn| {
        let mut admission = admission;
        loop {
            control(conn, "SAVEPOINT rule")?;
            let applied =
                SqliteHistory::run(apply(&mut SqliteHistory::new(conn), &input, &admission));
            match applied {
                Ok(reply) => {
                    control(conn, "RELEASE rule")?;
                    return Ok(reply);
                }
                Err(Failure::Taken) => {
                    rollback_rule(conn)?;
                    let replayed =
                        SqliteHistory::run(replay(&mut SqliteHistory::new(conn), &input));
                    return replayed.map_err(Failure::into_participant_error);
                }
                Err(Failure::RollBack) if admission == Admission::Apply => {
                    rollback_rule(conn)?;
                    admission = Admission::Verify;
                }
                Err(other) => {
                    rollback_rule(conn)?;
                    return Err(other.into_participant_error());
                }
            }
        }
    })
    .await
}

/// Undoes what the rule did and closes its savepoint.
fn rollback_rule(conn: &Connection) -> Result<(), rusqlite::Error> {
    control(conn, "ROLLBACK TO rule")?;
    control(conn, "RELEASE rule")
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
CREATE INDEX IF NOT EXISTS operation_history_by_time
    ON operation_history (recorded_at_ms);
";

/// One purge batch of the operationHistory: the `?2` oldest records
/// recorded before `?1` (a range of `operation_history_by_time`), deleted
/// by primary key.
pub const PURGE_SQL: &str = "DELETE FROM operation_history WHERE (request_id, kind) IN
     (SELECT request_id, kind FROM operation_history WHERE recorded_at_ms < ?1
      ORDER BY recorded_at_ms LIMIT ?2)";

/// Deletes up to `limit` records recorded before `cutoff_ms`; how many.
/// Meant for one small job of the group commit (see
/// [`crate::retention`] for why a record may go then).
pub fn purge_history(
    conn: &Connection,
    cutoff_ms: i64,
    limit: usize,
) -> Result<u64, rusqlite::Error> {
    let limit = i64::try_from(limit).unwrap_or(i64::MAX);
    let deleted = conn
        .prepare_cached(PURGE_SQL)?
        .execute(params![cutoff_ms, limit])?;
    Ok(deleted as u64)
}

/// Bytes of the embedded file by SQLite's accounting (page_count ×
/// page_size), as a participant reports it.
pub async fn size_bytes(db: &EmbeddedDb) -> Result<u64, ParticipantError> {
    Ok(db
        .file_size()
        .await
        .map_err(|e| ParticipantError::Store(e.to_string()))?
        .bytes())
}

/// Incremental vacuum of the free pages beyond a reserve (see
/// `EmbeddedDb::reclaim`), as a participant reports it.
pub async fn reclaim(db: &EmbeddedDb) -> Result<u64, ParticipantError> {
    db.reclaim()
        .await
        .map_err(|e| ParticipantError::Store(e.to_string()))
}

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

    /// Takes `by` from the counter under `key` if it holds that much: one
    /// `UPDATE … WHERE value >= by RETURNING`, read only when it matched
    /// nothing, to say why.
    pub fn take(&mut self, c: &Counter, key: &str, by: i64) -> Result<Take, rusqlite::Error> {
        let Counter {
            table,
            key: k,
            value: v,
        } = c;
        let after: Option<i64> = self
            .conn
            .prepare_cached(&format!(
                "UPDATE {table} SET {v} = {v} - ?2 WHERE {k} = ?1 AND {v} >= ?2 RETURNING {v}"
            ))?
            .query_row(params![key, by], |r| r.get(0))
            .optional()?;
        if let Some(after) = after {
            return Ok(Take::Done(after));
        }
        Ok(match counter_value(self.conn, c, key)? {
            None => Take::Missing,
            Some(have) => Take::Short { have },
        })
    }

    /// Adds `by` to the counter under `key`, creating it if absent, unless
    /// the sum would overflow: one `INSERT … ON CONFLICT DO UPDATE … WHERE`
    /// (SQLite would turn an overflowing sum into a float; the condition
    /// keeps it from being computed at all).
    pub fn add(&mut self, c: &Counter, key: &str, by: i64) -> Result<Add, rusqlite::Error> {
        let Counter {
            table,
            key: k,
            value: v,
        } = c;
        let after: Option<i64> = self
            .conn
            .prepare_cached(&format!(
                "INSERT INTO {table} ({k}, {v}) VALUES (?1, ?2)
                 ON CONFLICT ({k}) DO UPDATE SET {v} = {v} + excluded.{v}
                 WHERE {v} <= ?3 RETURNING {v}"
            ))?
            .query_row(params![key, by, i64::MAX - by.max(0)], |r| r.get(0))
            .optional()?;
        Ok(match after {
            Some(after) => Add::Done(after),
            None => Add::Overflow {
                have: counter_value(self.conn, c, key)?.unwrap_or_default(),
            },
        })
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

    async fn insert(&mut self, r: &OperationRecord) -> Result<bool, rusqlite::Error> {
        insert(self.conn, r)
    }

    async fn insert_or_get(
        &mut self,
        r: &OperationRecord,
    ) -> Result<Option<OperationRecord>, rusqlite::Error> {
        if insert(self.conn, r)? {
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
}

/// The value of the counter under `key`, `None` when there is none.
pub fn counter_value(
    conn: &Connection,
    c: &Counter,
    key: &str,
) -> Result<Option<i64>, rusqlite::Error> {
    conn.prepare_cached(&format!(
        "SELECT {} FROM {} WHERE {} = ?1",
        c.value, c.table, c.key
    ))?
    .query_row([key], |r| r.get(0))
    .optional()
}

/// Inserts `r` unless its `(request_id, kind)` is taken: true when inserted.
fn insert(conn: &Connection, r: &OperationRecord) -> Result<bool, rusqlite::Error> {
    let inserted = conn
        .prepare_cached(
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
    Ok(inserted == 1)
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

#[cfg(test)]
mod tests {
    use super::*;

    /// The purge deletes by the time index and the primary key: no scan
    /// of the table, no sort in a temporary b-tree.
    #[test]
    fn the_purge_is_planned_on_the_time_index() {
        let conn = Connection::open_in_memory().unwrap();
        conn.execute_batch(SCHEMA).unwrap();
        let plan: Vec<String> = conn
            .prepare(&format!("EXPLAIN QUERY PLAN {PURGE_SQL}"))
            .unwrap()
            .query_map(params![0, 10], |r| r.get::<_, String>(3))
            .unwrap()
            .map(Result::unwrap)
            .collect();
        let plan = plan.join("; ");
        assert!(plan.contains("operation_history_by_time"), "{plan}");
        assert!(!plan.contains("SCAN operation_history"), "{plan}");
        assert!(!plan.contains("TEMP B-TREE"), "{plan}");
    }
}
