//! The inventory rules (`inventory_svc::store::stock`), one test each, over
//! the embedded store — the rules running on SQLite's `StockTx` inside the
//! kit's transaction runner — in a temp dir; no gRPC.
//!
//! The barrier's own rules are tested once in participant-kit
//! (`tests/barrier_rules.rs`), what every inventory store must do on both
//! backends in the `tests` crate's conformance suite, and the rollback of
//! a line that cannot be recorded in `store/sqlite.rs`; these are the stock
//! rules at their edges: where the short line stands in the order, repeated
//! products, quantities at `i64::MAX`, quantities that are not positive.

use embedded_store::Durability;
use inventory_svc::store::{Deduction, InventoryStore, Line, SqliteInventoryStore, StockAddition};
use participant_kit::{
    ActionReply, Admission, CompensationEffect, CompensationResult, OperationLog, ParticipantError,
    Refusal, RefusalReason,
};

struct Stock {
    store: SqliteInventoryStore,
    _dir: tempfile::TempDir,
}

fn open() -> Stock {
    let dir = tempfile::tempdir().expect("temp dir");
    let store = SqliteInventoryStore::open(&dir.path().join("inventory.db"), Durability::Process)
        .expect("open inventory store");
    Stock { store, _dir: dir }
}

fn order(request_id: &str, lines: &[(&str, i64)]) -> Deduction {
    let line = |&(product_id, quantity): &(&str, i64)| Line {
        product_id: product_id.to_owned(),
        quantity,
    };
    let lines = lines.iter().map(line).collect();
    Deduction {
        parameters: None,
        request_id: request_id.to_owned(),
        lines,
    }
}

impl Stock {
    /// Adds `units` of `product` under `request_id`.
    async fn add(
        &self,
        request_id: &str,
        product: &str,
        units: i64,
    ) -> Result<ActionReply<i64>, ParticipantError> {
        let addition = StockAddition {
            request_id: request_id.to_owned(),
            product_id: product.to_owned(),
            quantity: units,
        };
        self.store.add_stock(addition).await
    }

    /// Opens `product` with `units` (a stock addition of its own).
    async fn with(&self, product: &str, units: i64) -> &Self {
        let reply = self.add(&format!("open-{product}"), product, units).await;
        let reply = reply.expect("add stock");
        assert_eq!(
            reply,
            ActionReply::Applied {
                value: units,
                replayed: false
            }
        );
        self
    }

    async fn deduct(&self, d: Deduction) -> Result<ActionReply<()>, ParticipantError> {
        self.store.deduct(d, Admission::Apply).await
    }

    async fn available(&self, product: &str) -> Option<i64> {
        let view = self.store.product(product.to_owned(), 0).await;
        view.expect("product").map(|p| p.available)
    }

    async fn availability(&self, products: &[&str]) -> Vec<Option<i64>> {
        let mut all = Vec::with_capacity(products.len());
        for product in products {
            all.push(self.available(product).await);
        }
        all
    }

    /// `(kind, status, line_index, product, units)` of what is recorded
    /// under `request_id`: its records, then its order lines by index.
    async fn recorded(&self, request_id: &str) -> Vec<(String, String, Option<i32>, String, i64)> {
        let ops = self
            .store
            .operations(request_id.to_owned())
            .await
            .expect("operations");
        ops.into_iter()
            .map(|o| (o.kind, o.status, o.line_index, o.subject, o.amount))
            .collect()
    }
}

fn row(
    kind: &str,
    status: &str,
    line_index: Option<i32>,
    product: &str,
    units: i64,
) -> (String, String, Option<i32>, String, i64) {
    (
        kind.to_owned(),
        status.to_owned(),
        line_index,
        product.to_owned(),
        units,
    )
}

const APPLIED: ActionReply<()> = ActionReply::Applied {
    value: (),
    replayed: false,
};

fn fresh_refusal<T: std::fmt::Debug>(reply: Result<ActionReply<T>, ParticipantError>) -> Refusal {
    match reply {
        Ok(ActionReply::Refused {
            refusal,
            replayed: false,
        }) => refusal,
        other => panic!("expected a fresh refusal, got {other:?}"),
    }
}

fn compensation(effect: CompensationEffect, replayed: bool) -> CompensationResult {
    CompensationResult { effect, replayed }
}

fn out_of_range<T: std::fmt::Debug>(result: &Result<T, ParticipantError>, words: &str) -> bool {
    matches!(result, Err(ParticipantError::OutOfRange(m)) if m.contains(words))
}

#[tokio::test]
async fn a_deduct_takes_every_line_and_records_each_with_its_index() {
    let s = open();
    s.with("apple", 10).await.with("pear", 5).await;

    let reply = s.deduct(order("o1", &[("apple", 3), ("pear", 5)])).await;
    assert_eq!(reply.expect("deduct"), APPLIED);
    assert_eq!(s.availability(&["apple", "pear"]).await, [Some(7), Some(0)]);
    assert_eq!(
        s.recorded("o1").await,
        [
            row("deduct", "applied", None, "", 8),
            row("deduct", "deducted", Some(0), "apple", 3),
            row("deduct", "deducted", Some(1), "pear", 5),
        ]
    );
}

/// Wherever the short line stands — first, between, last — nothing is
/// taken: the lines before it are rolled back, and the refusal names it.
#[tokio::test]
async fn one_short_line_deducts_nothing_wherever_it_stands() {
    let s = open();
    s.with("apple", 10)
        .await
        .with("pear", 1)
        .await
        .with("plum", 10)
        .await;
    let orders = [
        [("pear", 2), ("apple", 1), ("plum", 1)],
        [("apple", 1), ("pear", 2), ("plum", 1)],
        [("apple", 1), ("plum", 1), ("pear", 2)],
    ];

    for (i, lines) in orders.iter().enumerate() {
        let request_id = format!("o{i}");
        let refusal = fresh_refusal(s.deduct(order(&request_id, lines)).await);
        assert_eq!(refusal.reason, RefusalReason::Insufficient);
        assert_eq!(
            refusal.message,
            "insufficient stock: product \"pear\" has 1 units available, deduct needs 2"
        );
        assert_eq!(
            s.availability(&["apple", "pear", "plum"]).await,
            [Some(10), Some(1), Some(10)],
            "{lines:?}"
        );
        assert_eq!(
            s.recorded(&request_id).await,
            [row("deduct", "refused", None, "", 4)],
            "no line is recorded"
        );
    }
}

#[tokio::test]
async fn an_unknown_product_is_refused_and_deducts_nothing() {
    let s = open();
    s.with("apple", 10).await;

    let refusal = fresh_refusal(s.deduct(order("o1", &[("apple", 1), ("plum", 1)])).await);
    assert_eq!(refusal.reason, RefusalReason::NotFound);
    assert_eq!(refusal.message, "product \"plum\" does not exist");
    assert_eq!(s.availability(&["apple", "plum"]).await, [Some(10), None]);
    assert_eq!(
        s.recorded("o1").await,
        [row("deduct", "refused", None, "", 2)]
    );
}

/// Restock puts back the units recorded with each line, once — not an
/// earlier availability, so a deduct in between keeps its units.
#[tokio::test]
async fn a_restock_puts_back_exactly_the_deducted_lines_once() {
    let s = open();
    s.with("apple", 10).await.with("pear", 5).await;
    let o1 = order("o1", &[("apple", 3), ("pear", 2)]);
    s.deduct(o1.clone()).await.expect("deduct");
    s.deduct(order("o2", &[("apple", 1)]))
        .await
        .expect("deduct");

    let restock = s.store.restock(o1.clone()).await.expect("restock");
    assert_eq!(restock, compensation(CompensationEffect::Undone, false));
    assert_eq!(s.availability(&["apple", "pear"]).await, [Some(9), Some(5)]);

    let again = s.store.restock(o1).await.expect("restock again");
    assert_eq!(again, compensation(CompensationEffect::Undone, true));
    assert_eq!(
        s.availability(&["apple", "pear"]).await,
        [Some(9), Some(5)],
        "once"
    );
    assert_eq!(
        s.recorded("o1").await,
        [
            row("deduct", "applied", None, "", 5),
            row("restock", "undone", None, "", 5),
            row("deduct", "restocked", Some(0), "apple", 3),
            row("deduct", "restocked", Some(1), "pear", 2),
        ]
    );
}

/// Lines of one product are added up before the stock is checked: each
/// fits alone, together they may not. Each stays its own line.
#[tokio::test]
async fn duplicate_product_lines_are_added_up_and_kept_as_lines() {
    let s = open();
    s.with("apple", 6).await;

    let split = order("o1", &[("apple", 3), ("apple", 4)]);
    let refusal = fresh_refusal(s.deduct(split).await);
    assert_eq!(
        refusal.message,
        "insufficient stock: product \"apple\" has 6 units available, deduct needs 7"
    );
    assert_eq!(s.available("apple").await, Some(6));

    let fits = order("o2", &[("apple", 2), ("apple", 4)]);
    assert_eq!(s.deduct(fits.clone()).await.expect("deduct"), APPLIED);
    assert_eq!(s.available("apple").await, Some(0));
    assert_eq!(
        s.recorded("o2").await,
        [
            row("deduct", "applied", None, "", 6),
            row("deduct", "deducted", Some(0), "apple", 2),
            row("deduct", "deducted", Some(1), "apple", 4),
        ]
    );
    s.store.restock(fits).await.expect("restock");
    assert_eq!(s.available("apple").await, Some(6));
}

/// Lines whose sum does not fit an int64 are bad input, refused before
/// anything is read or recorded (not a wrap, not a panic).
#[tokio::test]
async fn lines_whose_sum_overflows_are_out_of_range_and_record_nothing() {
    let s = open();
    s.with("apple", 10).await;

    let same = s
        .deduct(order("o1", &[("apple", i64::MAX), ("apple", 1)]))
        .await;
    assert!(out_of_range(&same, "does not fit in an int64"), "{same:?}");
    let others = s
        .deduct(order("o2", &[("apple", 1), ("pear", i64::MAX)]))
        .await;
    assert!(
        out_of_range(&others, "does not fit in an int64"),
        "{others:?}"
    );
    assert_eq!(s.available("apple").await, Some(10));
    assert_eq!(s.recorded("o1").await, []);
    assert_eq!(s.recorded("o2").await, []);
}

/// The gRPC adapter rejects these first; the rules refuse them too, so a
/// direct call can neither add stock through Deduct nor take it through
/// AddStock.
#[tokio::test]
async fn a_quantity_that_is_not_positive_is_out_of_range_and_records_nothing() {
    let s = open();
    s.with("apple", 10).await;

    for quantity in [0, -3] {
        let deduct = s
            .deduct(order("o1", &[("apple", 1), ("apple", quantity)]))
            .await;
        assert!(out_of_range(&deduct, "must be positive"), "{deduct:?}");
        let add = s.add("s1", "apple", quantity).await;
        assert!(out_of_range(&add, "must be positive"), "{add:?}");
    }
    assert_eq!(s.available("apple").await, Some(10));
    assert_eq!(s.recorded("o1").await, []);
    assert_eq!(s.recorded("s1").await, []);
}

#[tokio::test]
async fn adding_stock_that_would_overflow_is_refused_and_keeps_the_availability() {
    let s = open();
    s.with("apple", i64::MAX - 5).await;

    // Up to i64::MAX exactly is an availability.
    let full = s.add("s1", "apple", 5).await;
    assert_eq!(
        full.expect("add"),
        ActionReply::Applied {
            value: i64::MAX,
            replayed: false
        }
    );
    let refusal = fresh_refusal(s.add("s2", "apple", 1).await);
    assert_eq!(refusal.reason, RefusalReason::Overflow);
    assert_eq!(s.available("apple").await, Some(i64::MAX));
    assert_eq!(
        s.recorded("s2").await,
        [row("add_stock", "refused", None, "apple", 1)]
    );
}

/// A restock cannot be refused (its deduct was applied), so one that would
/// overflow is an error and nothing of it is recorded — not even the lines
/// it could put back: the same restock succeeds once there is room.
#[tokio::test]
async fn a_restock_that_would_overflow_is_out_of_range_and_succeeds_once_there_is_room() {
    let s = open();
    s.with("apple", 10).await.with("pear", 10).await;
    let o1 = order("o1", &[("apple", 4), ("pear", 4)]);
    s.deduct(o1.clone()).await.expect("deduct");
    let fill = s.add("fill", "pear", i64::MAX - 6).await;
    assert!(matches!(fill, Ok(ActionReply::Applied { .. })), "{fill:?}");

    let over = s.store.restock(o1.clone()).await;
    assert!(out_of_range(&over, "overflow"), "{over:?}");
    assert_eq!(
        s.availability(&["apple", "pear"]).await,
        [Some(6), Some(i64::MAX)]
    );
    assert_eq!(
        s.recorded("o1").await,
        [
            row("deduct", "applied", None, "", 8),
            row("deduct", "deducted", Some(0), "apple", 4),
            row("deduct", "deducted", Some(1), "pear", 4),
        ],
        "apple is not put back alone"
    );

    s.deduct(order("o2", &[("pear", 4)])).await.expect("deduct");
    let restock = s.store.restock(o1).await.expect("restock");
    assert_eq!(restock, compensation(CompensationEffect::Undone, false));
    assert_eq!(
        s.availability(&["apple", "pear"]).await,
        [Some(10), Some(i64::MAX)]
    );
}
