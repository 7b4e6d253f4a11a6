//! The embedded inventory store: products, deducted order lines and the
//! operationHistory in one SQLite file; every call is one savepoint of a
//! group commit, running the shared rules in [`super::stock`].
//!
//! An error from a rule rolls back its savepoint — every line taken and the
//! history record. The rules compute availability in Rust with checked
//! arithmetic (SQLite would silently turn an overflowing integer into a
//! float); this is safe because the whole call runs inside the single
//! writer's transaction.

use super::stock::{self, LineStatus, RecordedLine, STOCK, StockTx};
use super::{
    DEDUCT, Deduction, InventoryStore, Line, ProductOperation, ProductView, StockAddition,
};
use async_trait::async_trait;
use embedded_store::{DbError, Durability, EmbeddedDb};
use futures::FutureExt;
use participant_kit::counter::{Add, Take};
use participant_kit::sqlite::{self as history, SqliteHistory, transact};
use participant_kit::{
    ActionReply, Admission, CompensationResult, HistoryExpiry, LoggedOperation, OperationLog,
    ParticipantError,
};
use rusqlite::{Connection, params};
use service_kit::purge::PurgeBatch;
use std::path::Path;

const SCHEMA: &str = "
CREATE TABLE IF NOT EXISTS products (
    product_id TEXT    PRIMARY KEY,
    available  INTEGER NOT NULL CHECK (available >= 0)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS deduct_lines (
    request_id     TEXT    NOT NULL,
    line_index     INTEGER NOT NULL,
    product_id     TEXT    NOT NULL,
    quantity       INTEGER NOT NULL CHECK (quantity > 0),
    status         TEXT    NOT NULL CHECK (status IN ('deducted', 'restocked')),
    recorded_at_ms INTEGER NOT NULL,
    PRIMARY KEY (request_id, line_index)
) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS deduct_lines_by_product
    ON deduct_lines (product_id, recorded_at_ms);
CREATE INDEX IF NOT EXISTS deduct_lines_by_time ON deduct_lines (recorded_at_ms);
";

/// One purge batch of the order lines: the `?2` oldest lines recorded
/// before `?1` (a range of `deduct_lines_by_time`), deleted by primary key.
const PURGE_LINES_SQL: &str = "DELETE FROM deduct_lines WHERE (request_id, line_index) IN
     (SELECT request_id, line_index FROM deduct_lines WHERE recorded_at_ms < ?1
      ORDER BY recorded_at_ms LIMIT ?2)";

/// Deletes up to `limit` order lines recorded before `cutoff_ms`; how many.
fn purge_lines(conn: &Connection, cutoff_ms: i64, limit: usize) -> Result<u64, rusqlite::Error> {
    let limit = i64::try_from(limit).unwrap_or(i64::MAX);
    let deleted = conn
        .prepare_cached(PURGE_LINES_SQL)?
        .execute(params![cutoff_ms, limit])?;
    Ok(deleted as u64)
}

/// Inventory store in a SQLite file (see `embedded_store`).
#[derive(Clone, Debug)]
pub struct SqliteInventoryStore {
    db: EmbeddedDb,
}

impl SqliteInventoryStore {
    /// Opens (creating if needed) the store at `path`.
    pub fn open(path: &Path, durability: Durability) -> Result<Self, DbError> {
        let schema = format!("{}{}", history::SCHEMA, SCHEMA);
        Ok(SqliteInventoryStore {
            db: EmbeddedDb::open(path, &schema, durability)?,
        })
    }
}

impl StockTx for SqliteHistory<'_> {
    async fn available(&mut self, product_id: &str) -> Result<Option<i64>, rusqlite::Error> {
        history::counter_value(self.conn(), &STOCK, product_id)
    }

    async fn take(&mut self, takes: &[(&str, i64)]) -> Result<bool, rusqlite::Error> {
        for &(product_id, units) in takes {
            if !matches!(
                SqliteHistory::take(self, &STOCK, product_id, units)?,
                Take::Done(_)
            ) {
                return Ok(false);
            }
        }
        Ok(true)
    }

    async fn give(&mut self, product_id: &str, units: i64) -> Result<Add, rusqlite::Error> {
        SqliteHistory::add(self, &STOCK, product_id, units)
    }

    async fn insert_lines(
        &mut self,
        request_id: &str,
        lines: &[Line],
        recorded_at_ms: i64,
    ) -> Result<bool, rusqlite::Error> {
        let mut insert = self.conn().prepare_cached(
            "INSERT INTO deduct_lines (request_id, line_index, product_id, quantity, status, recorded_at_ms)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6)
             ON CONFLICT (request_id, line_index) DO NOTHING",
        )?;
        for (line_index, line) in (0_i64..).zip(lines) {
            let inserted = insert.execute(params![
                request_id,
                line_index,
                line.product_id,
                line.quantity,
                LineStatus::Deducted.as_str(),
                recorded_at_ms
            ])?;
            if inserted == 0 {
                return Ok(false);
            }
        }
        Ok(true)
    }

    async fn lines_of(&mut self, request_id: &str) -> Result<Vec<RecordedLine>, rusqlite::Error> {
        let mut stmt = self.conn().prepare_cached(
            "SELECT line_index, product_id, quantity, status FROM deduct_lines
             WHERE request_id = ?1 ORDER BY line_index",
        )?;
        let rows = stmt.query_map([request_id], |r| {
            let status: String = r.get(3)?;
            let status = LineStatus::parse(&status).ok_or_else(|| {
                rusqlite::Error::FromSqlConversionFailure(
                    3,
                    rusqlite::types::Type::Text,
                    format!("unknown line status {status:?}").into(),
                )
            })?;
            Ok(RecordedLine {
                line_index: r.get(0)?,
                product_id: r.get(1)?,
                quantity: r.get(2)?,
                status,
            })
        })?;
        rows.collect()
    }

    async fn mark_restocked(&mut self, request_id: &str) -> Result<u64, rusqlite::Error> {
        let updated = self
            .conn()
            .prepare_cached(
                "UPDATE deduct_lines SET status = ?2 WHERE request_id = ?1 AND status = ?3",
            )?
            .execute(params![
                request_id,
                LineStatus::Restocked.as_str(),
                LineStatus::Deducted.as_str()
            ])?;
        Ok(u64::try_from(updated).unwrap_or(u64::MAX))
    }
}

/// Every deducted line of `request_id`, by line index (the primary key).
fn lines_of_request(
    conn: &Connection,
    request_id: &str,
) -> Result<Vec<LoggedOperation>, rusqlite::Error> {
    let mut stmt = conn.prepare_cached(
        "SELECT line_index, product_id, quantity, status, recorded_at_ms FROM deduct_lines
         WHERE request_id = ?1 ORDER BY line_index",
    )?;
    let rows = stmt.query_map([request_id], |r| {
        let line = ProductOperation {
            request_id: request_id.to_owned(),
            kind: DEDUCT.to_owned(),
            status: r.get(3)?,
            quantity: r.get(2)?,
            line_index: Some(r.get(0)?),
            detail: String::new(),
            recorded_at_ms: r.get(4)?,
        };
        Ok(line.logged(r.get(1)?))
    })?;
    rows.collect()
}

/// The most recent deduct lines of one product, newest first.
fn recent_lines(
    conn: &Connection,
    product_id: &str,
    limit: usize,
) -> Result<Vec<ProductOperation>, rusqlite::Error> {
    let limit = i64::try_from(limit).unwrap_or(i64::MAX);
    let mut stmt = conn.prepare_cached(
        "SELECT request_id, line_index, quantity, status, recorded_at_ms FROM deduct_lines
         WHERE product_id = ?1
         ORDER BY recorded_at_ms DESC, request_id DESC, line_index DESC LIMIT ?2",
    )?;
    let rows = stmt.query_map(params![product_id, limit], |r| {
        Ok(ProductOperation {
            request_id: r.get(0)?,
            kind: DEDUCT.to_owned(),
            status: r.get(3)?,
            quantity: r.get(2)?,
            line_index: Some(r.get(1)?),
            detail: String::new(),
            recorded_at_ms: r.get(4)?,
        })
    })?;
    rows.collect()
}

fn product_in(
    conn: &Connection,
    product_id: String,
    limit: usize,
) -> Result<Option<ProductView>, ParticipantError> {
    // One read transaction, so availability and history are one snapshot.
    let tx = conn.unchecked_transaction()?;
    let Some(available) = history::counter_value(&tx, &STOCK, &product_id)? else {
        return Ok(None);
    };
    let lines = recent_lines(&tx, &product_id, limit)?;
    let operations = history::recent_for_subject(&tx, &product_id, limit)?;
    tx.commit()?;
    Ok(Some(ProductView::merge(
        product_id, available, lines, operations, limit,
    )))
}

#[async_trait]
impl InventoryStore for SqliteInventoryStore {
    async fn deduct(
        &self,
        deduction: Deduction,
        admission: Admission,
    ) -> Result<ActionReply<()>, ParticipantError> {
        transact(
            &self.db,
            deduction,
            admission,
            |tx, d, a| stock::deduct(tx, d, a).boxed_local(),
            |tx, d| stock::replay_deduct(tx, d).boxed_local(),
        )
        .await
    }

    async fn restock(&self, deduction: Deduction) -> Result<CompensationResult, ParticipantError> {
        transact(
            &self.db,
            deduction,
            Admission::Apply,
            |tx, d, _| stock::restock(tx, d).boxed_local(),
            |tx, d| stock::replay_restock(tx, d).boxed_local(),
        )
        .await
    }

    async fn add_stock(
        &self,
        addition: StockAddition,
    ) -> Result<ActionReply<i64>, ParticipantError> {
        transact(
            &self.db,
            addition,
            Admission::Apply,
            |tx, a, _| stock::add_stock(tx, a).boxed_local(),
            |tx, a| stock::replay_add_stock(tx, a).boxed_local(),
        )
        .await
    }

    async fn product(
        &self,
        product_id: String,
        operation_limit: usize,
    ) -> Result<Option<ProductView>, ParticipantError> {
        self.db
            .read(move |conn| product_in(conn, product_id, operation_limit))
            .await
    }
}

#[async_trait]
impl OperationLog for SqliteInventoryStore {
    async fn operations(
        &self,
        request_id: String,
    ) -> Result<Vec<LoggedOperation>, ParticipantError> {
        self.db
            .read(move |conn| {
                // One read transaction: records and lines are one snapshot.
                let tx = conn.unchecked_transaction()?;
                let records = history::records_of(&tx, &request_id)?;
                let lines = lines_of_request(&tx, &request_id)?;
                tx.commit()?;
                Ok(super::logged_operations(records, lines))
            })
            .await
    }
}

#[async_trait]
impl HistoryExpiry for SqliteInventoryStore {
    async fn purge_recorded_before(
        &self,
        cutoff_ms: i64,
        limit: usize,
    ) -> Result<PurgeBatch, ParticipantError> {
        self.db
            .write(move |conn| {
                let records = history::purge_history(conn, cutoff_ms, limit)?;
                let lines = purge_lines(conn, cutoff_ms, limit)?;
                Ok::<_, ParticipantError>(PurgeBatch {
                    deleted: vec![("operation_history", records), ("deduct_lines", lines)],
                    more: records.max(lines) >= limit as u64,
                })
            })
            .await
    }

    async fn reclaim(&self) -> Result<u64, ParticipantError> {
        history::reclaim(&self.db).await
    }

    async fn size_bytes(&self) -> Result<u64, ParticipantError> {
        history::size_bytes(&self.db).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::Line;

    /// The lines' purge deletes by the time index and the primary key: no
    /// scan of the table, no sort in a temporary b-tree.
    #[test]
    fn the_lines_purge_is_planned_on_the_time_index() {
        let conn = Connection::open_in_memory().unwrap();
        conn.execute_batch(SCHEMA).unwrap();
        let plan: Vec<String> = conn
            .prepare(&format!("EXPLAIN QUERY PLAN {PURGE_LINES_SQL}"))
            .unwrap()
            .query_map(params![0, 10], |r| r.get::<_, String>(3))
            .unwrap()
            .map(Result::unwrap)
            .collect();
        let plan = plan.join("; ");
        assert!(plan.contains("deduct_lines_by_time"), "{plan}");
        assert!(!plan.contains("SCAN deduct_lines"), "{plan}");
        assert!(!plan.contains("TEMP B-TREE"), "{plan}");
    }

    fn open() -> (tempfile::TempDir, SqliteInventoryStore) {
        let dir = tempfile::tempdir().unwrap();
        let store =
            SqliteInventoryStore::open(&dir.path().join("inventory.db"), Durability::Process)
                .unwrap();
        (dir, store)
    }

    fn order(request_id: &str, lines: &[(&str, i64)]) -> Deduction {
        Deduction {
            parameters: None,
            request_id: request_id.to_owned(),
            lines: lines
                .iter()
                .map(|&(product_id, quantity)| Line {
                    product_id: product_id.to_owned(),
                    quantity,
                })
                .collect(),
        }
    }

    async fn rows(store: &SqliteInventoryStore, sql: &'static str) -> i64 {
        store
            .db
            .read(move |conn| {
                conn.query_row(sql, [], |r| r.get(0))
                    .map_err(ParticipantError::from)
            })
            .await
            .unwrap()
    }

    /// A line that cannot be recorded fails the call, and the savepoint
    /// takes back everything the rule did before it: the stock taken and
    /// the lines already recorded. With no record to answer from, the
    /// caller is told to retry (a record expired by retention looks the
    /// same).
    #[tokio::test]
    async fn a_failing_line_rolls_back_the_whole_deduct() {
        let (_dir, store) = open();
        let add = StockAddition {
            request_id: "s1".into(),
            product_id: "apple".into(),
            quantity: 10,
        };
        store.add_stock(add).await.unwrap();
        // A stray row under (o1, 1), as no committed deduct leaves behind.
        store
            .db
            .write(|conn| {
                conn.execute(
                    "INSERT INTO deduct_lines VALUES ('o1', 1, 'apple', 1, 'deducted', 0)",
                    [],
                )
                .map_err(ParticipantError::from)
            })
            .await
            .unwrap();

        let result = store
            .deduct(order("o1", &[("apple", 2), ("apple", 3)]), Admission::Apply)
            .await;
        assert!(
            matches!(result, Err(ParticipantError::Store(ref m)) if m.contains("is gone; retry")),
            "{result:?}"
        );
        let view = store.product("apple".into(), 100).await.unwrap().unwrap();
        assert_eq!(view.available, 10);
        assert_eq!(rows(&store, "SELECT count(*) FROM deduct_lines").await, 1);
        assert_eq!(
            rows(
                &store,
                "SELECT count(*) FROM operation_history WHERE request_id = 'o1'"
            )
            .await,
            0
        );
    }
}
