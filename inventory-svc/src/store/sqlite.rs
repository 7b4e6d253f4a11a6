//! The embedded inventory store: products, deducted order lines and the
//! operationHistory in one SQLite file, every call one savepoint of a group
//! commit.
//!
//! A deduction is checked as a whole first (quantities of repeated products
//! added up), so a refusal takes nothing and is recorded; only then is each
//! line taken with a conditional `UPDATE` and recorded in `deduct_lines`
//! under `(request_id, line_index)`. Should any line fail anyway, the call
//! returns an error and its savepoint — every line and the history record —
//! is rolled back. Additions are computed in Rust with checked arithmetic
//! (SQLite would silently turn an overflowing integer into a float); this is
//! safe because the whole call runs inside the single writer's transaction.

use super::{
    ADD_STOCK, DEDUCT, Deduction, InventoryStore, ProductOperation, ProductView, RESTOCK,
    StockAddition,
};
use async_trait::async_trait;
use operation_history::sqlite::{self as history, SqliteHistory};
use operation_history::{
    ActionGate, ActionReply, CompensationGate, CompensationResult, Fingerprint, Operation,
    ParticipantError, Recorded, Refusal, RefusalReason, begin_action, begin_compensation,
    finish_action, finish_compensation, now_ms,
};
use rusqlite::{Connection, OptionalExtension, params};
use service_kit::embedded::{DbError, Durability, EmbeddedDb};
use std::collections::HashMap;
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
";

/// `deduct_lines.status` of a line taken from stock.
const DEDUCTED: &str = "deducted";
/// `deduct_lines.status` of a line put back by Restock.
const RESTOCKED: &str = "restocked";

/// Inventory store in a SQLite file (see `service_kit::embedded`).
#[derive(Clone, Debug)]
pub struct SqliteInventoryStore {
    db: EmbeddedDb,
}

impl SqliteInventoryStore {
    pub fn open(path: &Path, durability: Durability) -> Result<Self, DbError> {
        let schema = format!("{}{}", history::SCHEMA, SCHEMA);
        Ok(SqliteInventoryStore {
            db: EmbeddedDb::open(path, &schema, durability)?,
        })
    }
}

/// The barrier operation of a deduction (and of its restock). The subject
/// is empty: a deduction concerns several products, listed per line.
fn deduct_operation<'a>(
    d: &'a Deduction,
    amount: i64,
    fingerprint: &'a Fingerprint,
) -> Operation<'a> {
    Operation {
        request_id: &d.request_id,
        action_kind: DEDUCT,
        compensation_kind: RESTOCK,
        subject: "",
        amount,
        fingerprint,
    }
}

/// Units over all lines. The adapter rejects bad lines before they get
/// here; this keeps the store safe when called directly.
fn total_units(d: &Deduction) -> Result<i64, ParticipantError> {
    if let Some(line) = d.lines.iter().find(|l| l.quantity <= 0) {
        return Err(ParticipantError::OutOfRange(format!(
            "request_id {:?}: quantity of product {:?} must be positive (got {})",
            d.request_id, line.product_id, line.quantity
        )));
    }
    d.total_units().ok_or_else(|| {
        ParticipantError::OutOfRange(format!(
            "request_id {:?}: total quantity of the lines does not fit in an int64",
            d.request_id
        ))
    })
}

fn available(conn: &Connection, product_id: &str) -> Result<Option<i64>, rusqlite::Error> {
    conn.prepare_cached("SELECT available FROM products WHERE product_id = ?1")?
        .query_row([product_id], |r| r.get(0))
        .optional()
}

fn set_available(conn: &Connection, product_id: &str, units: i64) -> Result<(), rusqlite::Error> {
    conn.prepare_cached(
        "INSERT INTO products (product_id, available) VALUES (?1, ?2)
         ON CONFLICT (product_id) DO UPDATE SET available = excluded.available",
    )?
    .execute(params![product_id, units])?;
    Ok(())
}

/// Quantities per product, in order of first appearance.
fn per_product(d: &Deduction) -> Result<Vec<(&str, i64)>, ParticipantError> {
    let mut totals: Vec<(&str, i64)> = Vec::with_capacity(d.lines.len());
    let mut index: HashMap<&str, usize> = HashMap::with_capacity(d.lines.len());
    for line in &d.lines {
        let product = line.product_id.as_str();
        match index.get(product) {
            Some(&i) => {
                let Some(entry) = totals.get_mut(i) else {
                    continue;
                };
                entry.1 = entry.1.checked_add(line.quantity).ok_or_else(|| {
                    ParticipantError::OutOfRange(format!(
                        "request_id {:?}: quantity of product {product:?} does not fit in an int64",
                        d.request_id
                    ))
                })?;
            }
            None => {
                index.insert(product, totals.len());
                totals.push((product, line.quantity));
            }
        }
    }
    Ok(totals)
}

/// Why the deduction cannot be applied as a whole, if it cannot.
fn check_stock(conn: &Connection, d: &Deduction) -> Result<Option<Refusal>, ParticipantError> {
    for (product, requested) in per_product(d)? {
        match available(conn, product)? {
            None => {
                return Ok(Some(Refusal::new(
                    RefusalReason::NotFound,
                    format!("product {product:?} does not exist"),
                )));
            }
            Some(have) if have < requested => {
                return Ok(Some(Refusal::new(
                    RefusalReason::Insufficient,
                    format!(
                        "insufficient stock: product {product:?} has {have} units available, deduct needs {requested}"
                    ),
                )));
            }
            Some(_) => {}
        }
    }
    Ok(None)
}

/// Takes every line and records it; any failure aborts the whole call.
fn take_lines(conn: &Connection, d: &Deduction) -> Result<(), ParticipantError> {
    let recorded_at_ms = now_ms();
    for (i, line) in d.lines.iter().enumerate() {
        let line_index = i64::try_from(i).map_err(|_| {
            ParticipantError::OutOfRange(format!("request_id {:?}: too many lines", d.request_id))
        })?;
        let taken = conn
            .prepare_cached(
                "UPDATE products SET available = available - ?2
                 WHERE product_id = ?1 AND available >= ?2",
            )?
            .execute(params![line.product_id, line.quantity])?;
        if taken != 1 {
            return Err(ParticipantError::Corrupt(format!(
                "request_id {:?}: line {i} (product {:?}, {} units) could not be deducted after the stock check passed",
                d.request_id, line.product_id, line.quantity
            )));
        }
        conn.prepare_cached(
            "INSERT INTO deduct_lines (request_id, line_index, product_id, quantity, status, recorded_at_ms)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
        )?
        .execute(params![
            d.request_id,
            line_index,
            line.product_id,
            line.quantity,
            DEDUCTED,
            recorded_at_ms
        ])?;
    }
    Ok(())
}

fn deduct_in(conn: &Connection, d: &Deduction) -> Result<ActionReply<()>, ParticipantError> {
    let amount = total_units(d)?;
    let fingerprint = d.fingerprint();
    let op = deduct_operation(d, amount, &fingerprint);
    let mut h = SqliteHistory::new(conn);
    match SqliteHistory::run(begin_action(&mut h, &op))? {
        ActionGate::Replay(Recorded::Applied { .. }) => {
            return Ok(ActionReply::Applied {
                value: (),
                replayed: true,
            });
        }
        ActionGate::Replay(Recorded::Refused { detail }) => {
            return Ok(ActionReply::Refused {
                refusal: Refusal::decode(&detail),
                replayed: true,
            });
        }
        ActionGate::Proceed => {}
    }
    if let Some(refusal) = check_stock(conn, d)? {
        let recorded = Recorded::Refused {
            detail: refusal.encode(),
        };
        SqliteHistory::run(finish_action(&mut h, &op, &recorded))?;
        return Ok(ActionReply::Refused {
            refusal,
            replayed: false,
        });
    }
    take_lines(conn, d)?;
    let recorded = Recorded::Applied {
        detail: String::new(),
    };
    SqliteHistory::run(finish_action(&mut h, &op, &recorded))?;
    Ok(ActionReply::Applied {
        value: (),
        replayed: false,
    })
}

/// A line of this request still taken from stock.
struct TakenLine {
    line_index: i64,
    product_id: String,
    quantity: i64,
}

fn taken_lines(conn: &Connection, request_id: &str) -> Result<Vec<TakenLine>, rusqlite::Error> {
    let mut stmt = conn.prepare_cached(
        "SELECT line_index, product_id, quantity FROM deduct_lines
         WHERE request_id = ?1 AND status = ?2 ORDER BY line_index",
    )?;
    let rows = stmt.query_map(params![request_id, DEDUCTED], |r| {
        Ok(TakenLine {
            line_index: r.get(0)?,
            product_id: r.get(1)?,
            quantity: r.get(2)?,
        })
    })?;
    rows.collect()
}

fn restock_in(conn: &Connection, d: &Deduction) -> Result<CompensationResult, ParticipantError> {
    let amount = total_units(d)?;
    let fingerprint = d.fingerprint();
    let op = deduct_operation(d, amount, &fingerprint);
    let mut h = SqliteHistory::new(conn);
    if let CompensationGate::Done(result) = SqliteHistory::run(begin_compensation(&mut h, &op))? {
        return Ok(result);
    }
    for line in taken_lines(conn, &d.request_id)? {
        let have = available(conn, &line.product_id)?.unwrap_or(0);
        let restored = have.checked_add(line.quantity).ok_or_else(|| {
            ParticipantError::OutOfRange(format!(
                "restock of {} units would overflow the availability of product {:?} ({have} units)",
                line.quantity, line.product_id
            ))
        })?;
        set_available(conn, &line.product_id, restored)?;
        conn.prepare_cached(
            "UPDATE deduct_lines SET status = ?3 WHERE request_id = ?1 AND line_index = ?2",
        )?
        .execute(params![d.request_id, line.line_index, RESTOCKED])?;
    }
    Ok(SqliteHistory::run(finish_compensation(&mut h, &op))?)
}

fn add_stock_in(
    conn: &Connection,
    a: &StockAddition,
) -> Result<ActionReply<i64>, ParticipantError> {
    if a.quantity <= 0 {
        // The adapter rejects this first; kept so a direct call cannot
        // lower stock through AddStock.
        return Err(ParticipantError::OutOfRange(format!(
            "request_id {:?}: quantity of product {:?} must be positive (got {})",
            a.request_id, a.product_id, a.quantity
        )));
    }
    let fingerprint = a.fingerprint();
    let op = Operation {
        request_id: &a.request_id,
        action_kind: ADD_STOCK,
        compensation_kind: RESTOCK,
        subject: &a.product_id,
        amount: a.quantity,
        fingerprint: &fingerprint,
    };
    let mut h = SqliteHistory::new(conn);
    match SqliteHistory::run(begin_action(&mut h, &op))? {
        ActionGate::Replay(Recorded::Applied { detail }) => {
            let value = detail.parse().map_err(|_| {
                ParticipantError::Corrupt(format!(
                    "recorded availability {detail:?} is not a number"
                ))
            })?;
            return Ok(ActionReply::Applied {
                value,
                replayed: true,
            });
        }
        ActionGate::Replay(Recorded::Refused { detail }) => {
            return Ok(ActionReply::Refused {
                refusal: Refusal::decode(&detail),
                replayed: true,
            });
        }
        ActionGate::Proceed => {}
    }
    let have = available(conn, &a.product_id)?.unwrap_or(0);
    let (recorded, reply) = match have.checked_add(a.quantity) {
        Some(total) => {
            set_available(conn, &a.product_id, total)?;
            let recorded = Recorded::Applied {
                detail: total.to_string(),
            };
            let reply = ActionReply::Applied {
                value: total,
                replayed: false,
            };
            (recorded, reply)
        }
        None => {
            let refusal = Refusal::new(
                RefusalReason::Overflow,
                format!(
                    "adding {} units would overflow the availability of product {:?} ({have} units)",
                    a.quantity, a.product_id
                ),
            );
            let recorded = Recorded::Refused {
                detail: refusal.encode(),
            };
            let reply = ActionReply::Refused {
                refusal,
                replayed: false,
            };
            (recorded, reply)
        }
    };
    SqliteHistory::run(finish_action(&mut h, &op, &recorded))?;
    Ok(reply)
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
    let Some(available) = available(&tx, &product_id)? else {
        return Ok(None);
    };
    let mut recent_operations = recent_lines(&tx, &product_id, limit)?;
    recent_operations.extend(
        history::recent_for_subject(&tx, &product_id, limit)?
            .into_iter()
            .map(ProductOperation::from),
    );
    tx.commit()?;
    recent_operations.sort_by(|a, b| {
        b.recorded_at_ms
            .cmp(&a.recorded_at_ms)
            .then_with(|| b.request_id.cmp(&a.request_id))
            .then_with(|| b.line_index.cmp(&a.line_index))
    });
    recent_operations.truncate(limit);
    Ok(Some(ProductView {
        product_id,
        available,
        recent_operations,
    }))
}

#[async_trait]
impl InventoryStore for SqliteInventoryStore {
    async fn deduct(&self, deduction: Deduction) -> Result<ActionReply<()>, ParticipantError> {
        self.db.write(move |conn| deduct_in(conn, &deduction)).await
    }

    async fn restock(&self, deduction: Deduction) -> Result<CompensationResult, ParticipantError> {
        self.db
            .write(move |conn| restock_in(conn, &deduction))
            .await
    }

    async fn add_stock(
        &self,
        addition: StockAddition,
    ) -> Result<ActionReply<i64>, ParticipantError> {
        self.db
            .write(move |conn| add_stock_in(conn, &addition))
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::Line;
    use operation_history::CompensationEffect;
    use std::sync::Arc;

    fn open() -> (tempfile::TempDir, SqliteInventoryStore) {
        let dir = tempfile::tempdir().unwrap();
        let store =
            SqliteInventoryStore::open(&dir.path().join("inventory.db"), Durability::Process)
                .unwrap();
        (dir, store)
    }

    fn deduction(request_id: &str, lines: &[(&str, i64)]) -> Deduction {
        Deduction {
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

    async fn stock(store: &SqliteInventoryStore, product_id: &str, quantity: i64) {
        let reply = store
            .add_stock(StockAddition {
                request_id: format!("stock-{product_id}-{quantity}"),
                product_id: product_id.to_owned(),
                quantity,
            })
            .await
            .unwrap();
        assert!(matches!(
            reply,
            ActionReply::Applied {
                replayed: false,
                ..
            }
        ));
    }

    async fn available_of(store: &SqliteInventoryStore, product_id: &str) -> i64 {
        store
            .product(product_id.to_owned(), 100)
            .await
            .unwrap()
            .unwrap()
            .available
    }

    async fn line_statuses(store: &SqliteInventoryStore, product_id: &str) -> Vec<String> {
        store
            .product(product_id.to_owned(), 100)
            .await
            .unwrap()
            .unwrap()
            .recent_operations
            .into_iter()
            .filter(|o| o.kind == DEDUCT)
            .map(|o| o.status)
            .collect()
    }

    #[tokio::test]
    async fn multi_line_deduct_is_all_or_nothing_and_its_refusal_is_replayed() {
        let (_dir, store) = open();
        stock(&store, "apple", 10).await;
        stock(&store, "pear", 1).await;

        let order = deduction("o1", &[("apple", 3), ("pear", 2)]);
        let first = store.deduct(order.clone()).await.unwrap();
        let ActionReply::Refused { refusal, replayed } = first else {
            panic!("expected a refusal, got {first:?}");
        };
        assert!(!replayed);
        assert_eq!(refusal.reason, RefusalReason::Insufficient);
        assert!(refusal.message.contains("\"pear\""), "{}", refusal.message);
        assert!(
            refusal.message.contains("has 1 units"),
            "{}",
            refusal.message
        );
        assert!(refusal.message.contains("needs 2"), "{}", refusal.message);
        assert_eq!(available_of(&store, "apple").await, 10);
        assert_eq!(available_of(&store, "pear").await, 1);

        // The same call later, even with stock now there, gets the same answer.
        stock(&store, "pear", 5).await;
        let again = store.deduct(order).await.unwrap();
        assert_eq!(
            again,
            ActionReply::Refused {
                refusal,
                replayed: true
            }
        );
        assert_eq!(available_of(&store, "apple").await, 10);
        assert_eq!(available_of(&store, "pear").await, 6);
        assert!(line_statuses(&store, "apple").await.is_empty());

        // Repeated products are added up before the check: 6 + 5 > 10.
        let split = store
            .deduct(deduction("o2", &[("apple", 6), ("pear", 1), ("apple", 5)]))
            .await
            .unwrap();
        assert!(matches!(
            split,
            ActionReply::Refused { ref refusal, .. } if refusal.reason == RefusalReason::Insufficient
        ));
        assert_eq!(available_of(&store, "apple").await, 10);

        // An unknown product refuses the whole order too.
        let unknown = store
            .deduct(deduction("o3", &[("apple", 1), ("plum", 1)]))
            .await
            .unwrap();
        let ActionReply::Refused { refusal, .. } = unknown else {
            panic!("expected a refusal, got {unknown:?}");
        };
        assert_eq!(refusal.reason, RefusalReason::NotFound);
        assert!(refusal.message.contains("\"plum\""), "{}", refusal.message);
        assert_eq!(available_of(&store, "apple").await, 10);

        // When everything fits, every line is taken.
        let ok = store
            .deduct(deduction("o4", &[("apple", 6), ("pear", 1), ("apple", 4)]))
            .await
            .unwrap();
        assert_eq!(
            ok,
            ActionReply::Applied {
                value: (),
                replayed: false
            }
        );
        assert_eq!(available_of(&store, "apple").await, 0);
        assert_eq!(available_of(&store, "pear").await, 5);
        let apple = store.product("apple".into(), 100).await.unwrap().unwrap();
        let mut indexes: Vec<_> = apple
            .recent_operations
            .iter()
            .filter(|o| o.kind == DEDUCT)
            .map(|o| (o.request_id.as_str(), o.line_index, o.quantity))
            .collect();
        indexes.sort();
        assert_eq!(indexes, vec![("o4", Some(0), 6), ("o4", Some(2), 4)]);
    }

    #[tokio::test]
    async fn duplicate_deduct_replays_without_a_second_effect() {
        let (_dir, store) = open();
        stock(&store, "apple", 10).await;
        let order = deduction("o1", &[("apple", 4)]);
        let first = store.deduct(order.clone()).await.unwrap();
        let second = store.deduct(order).await.unwrap();
        assert_eq!(
            first,
            ActionReply::Applied {
                value: (),
                replayed: false
            }
        );
        assert_eq!(
            second,
            ActionReply::Applied {
                value: (),
                replayed: true
            }
        );
        assert_eq!(available_of(&store, "apple").await, 6);
        assert_eq!(line_statuses(&store, "apple").await, vec!["deducted"]);
    }

    #[tokio::test]
    async fn restock_puts_back_once_even_when_repeated() {
        let (_dir, store) = open();
        stock(&store, "apple", 10).await;
        stock(&store, "pear", 3).await;
        let order = deduction("o1", &[("apple", 4), ("pear", 3), ("apple", 1)]);
        store.deduct(order.clone()).await.unwrap();
        assert_eq!(available_of(&store, "apple").await, 5);
        assert_eq!(available_of(&store, "pear").await, 0);

        let first = store.restock(order.clone()).await.unwrap();
        assert_eq!(first.effect, CompensationEffect::Undone);
        assert!(!first.replayed);
        for _ in 0..3 {
            let again = store.restock(order.clone()).await.unwrap();
            assert_eq!(again.effect, CompensationEffect::Undone);
            assert!(again.replayed);
        }
        assert_eq!(available_of(&store, "apple").await, 10);
        assert_eq!(available_of(&store, "pear").await, 3);
        assert_eq!(
            line_statuses(&store, "apple").await,
            vec!["restocked", "restocked"]
        );

        // A deduct retried after its restock replays its recorded outcome
        // and takes nothing again.
        let late = store.deduct(order).await.unwrap();
        assert_eq!(
            late,
            ActionReply::Applied {
                value: (),
                replayed: true
            }
        );
        assert_eq!(available_of(&store, "apple").await, 10);

        // Compensating a refused deduct has nothing to undo.
        let refused = deduction("o2", &[("pear", 100)]);
        assert!(matches!(
            store.deduct(refused.clone()).await.unwrap(),
            ActionReply::Refused { .. }
        ));
        let result = store.restock(refused).await.unwrap();
        assert_eq!(result.effect, CompensationEffect::NothingToUndo);
        assert_eq!(available_of(&store, "pear").await, 3);
    }

    #[tokio::test]
    async fn null_compensation_then_late_deduct_is_refused_without_effect() {
        let (_dir, store) = open();
        stock(&store, "apple", 10).await;
        let order = deduction("o1", &[("apple", 4)]);

        let result = store.restock(order.clone()).await.unwrap();
        assert_eq!(result.effect, CompensationEffect::NullCompensation);
        assert!(!result.replayed);
        assert_eq!(available_of(&store, "apple").await, 10);

        for _ in 0..2 {
            let late = store.deduct(order.clone()).await;
            assert!(
                matches!(late, Err(ParticipantError::AlreadyCompensated(_))),
                "{late:?}"
            );
        }
        assert_eq!(available_of(&store, "apple").await, 10);
        assert!(line_statuses(&store, "apple").await.is_empty());

        let again = store.restock(order).await.unwrap();
        assert_eq!(again.effect, CompensationEffect::NullCompensation);
        assert!(again.replayed);
    }

    #[tokio::test]
    async fn parameter_mismatch_is_refused_and_changes_nothing() {
        let (_dir, store) = open();
        stock(&store, "apple", 10).await;
        stock(&store, "pear", 10).await;
        store
            .deduct(deduction("o1", &[("apple", 3), ("pear", 1)]))
            .await
            .unwrap();

        for other in [
            deduction("o1", &[("apple", 4), ("pear", 1)]),
            deduction("o1", &[("pear", 1), ("apple", 3)]),
            deduction("o1", &[("apple", 3)]),
        ] {
            let deduct = store.deduct(other.clone()).await;
            assert!(
                matches!(deduct, Err(ParticipantError::ParameterMismatch(_))),
                "{deduct:?}"
            );
            let restock = store.restock(other).await;
            assert!(
                matches!(restock, Err(ParticipantError::ParameterMismatch(_))),
                "{restock:?}"
            );
        }
        assert_eq!(available_of(&store, "apple").await, 7);
        assert_eq!(available_of(&store, "pear").await, 9);
        assert_eq!(line_statuses(&store, "apple").await, vec!["deducted"]);

        // The refused restocks left no claim behind: the right one still works.
        let result = store
            .restock(deduction("o1", &[("apple", 3), ("pear", 1)]))
            .await
            .unwrap();
        assert_eq!(result.effect, CompensationEffect::Undone);
        assert!(!result.replayed);
        assert_eq!(available_of(&store, "apple").await, 10);
        assert_eq!(available_of(&store, "pear").await, 10);
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn concurrent_duplicate_deducts_take_stock_once() {
        let (_dir, store) = open();
        stock(&store, "apple", 100).await;
        stock(&store, "pear", 100).await;
        let store = Arc::new(store);
        let order = deduction("o1", &[("apple", 7), ("pear", 2), ("apple", 1)]);
        let mut tasks = Vec::new();
        for _ in 0..50 {
            let store = store.clone();
            let order = order.clone();
            tasks.push(tokio::spawn(async move { store.deduct(order).await }));
        }
        let mut fresh = 0;
        let mut replayed = 0;
        for task in tasks {
            match task.await.unwrap().unwrap() {
                ActionReply::Applied {
                    replayed: false, ..
                } => fresh += 1,
                ActionReply::Applied { replayed: true, .. } => replayed += 1,
                other => panic!("unexpected {other:?}"),
            }
        }
        assert_eq!((fresh, replayed), (1, 49));
        assert_eq!(available_of(&store, "apple").await, 92);
        assert_eq!(available_of(&store, "pear").await, 98);
        assert_eq!(
            line_statuses(&store, "apple").await,
            vec!["deducted", "deducted"]
        );
    }

    #[tokio::test]
    async fn add_stock_creates_replays_and_refuses_overflow() {
        let (_dir, store) = open();
        assert!(store.product("apple".into(), 20).await.unwrap().is_none());
        let add = StockAddition {
            request_id: "s1".into(),
            product_id: "apple".into(),
            quantity: 5,
        };
        let first = store.add_stock(add.clone()).await.unwrap();
        let second = store.add_stock(add.clone()).await.unwrap();
        assert_eq!(
            first,
            ActionReply::Applied {
                value: 5,
                replayed: false
            }
        );
        assert_eq!(
            second,
            ActionReply::Applied {
                value: 5,
                replayed: true
            }
        );
        let mismatch = store
            .add_stock(StockAddition {
                quantity: 6,
                ..add.clone()
            })
            .await;
        assert!(matches!(
            mismatch,
            Err(ParticipantError::ParameterMismatch(_))
        ));

        let overflow = store
            .add_stock(StockAddition {
                request_id: "s2".into(),
                product_id: "apple".into(),
                quantity: i64::MAX,
            })
            .await
            .unwrap();
        assert!(matches!(
            overflow,
            ActionReply::Refused { ref refusal, replayed: false } if refusal.reason == RefusalReason::Overflow
        ));
        assert_eq!(available_of(&store, "apple").await, 5);

        // The listing merges deduct lines and stock additions, newest first.
        store
            .deduct(deduction("o1", &[("apple", 2)]))
            .await
            .unwrap();
        let view = store.product("apple".into(), 2).await.unwrap().unwrap();
        assert_eq!(view.available, 3);
        assert_eq!(view.recent_operations.len(), 2);
        let all = store.product("apple".into(), 100).await.unwrap().unwrap();
        let mut kinds: Vec<_> = all
            .recent_operations
            .iter()
            .map(|o| (o.request_id.as_str(), o.kind.as_str(), o.status.as_str()))
            .collect();
        kinds.sort();
        assert_eq!(
            kinds,
            vec![
                ("o1", "deduct", "deducted"),
                ("s1", "add_stock", "applied"),
                ("s2", "add_stock", "refused"),
            ]
        );
        assert!(
            all.recent_operations
                .windows(2)
                .all(|w| w[0].recorded_at_ms >= w[1].recorded_at_ms)
        );
    }
}
