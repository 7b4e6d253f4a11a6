//! The inventory rules, written once for every backend.
//!
//! Deduct, restock and add stock are generic over [`StockTx`]: the
//! barrier's [`HistoryTx`] plus a few primitive statements on products and
//! deducted order lines, all inside one local transaction of whatever
//! backend runs them.
//!
//! **Write first, in conditional statements.** A deduction takes every
//! product at once — each take conditional on the product holding the
//! quantity (repeated products added up first), see
//! [`participant_kit::counter`] — then records its lines under
//! `(request_id, line_index)` and its operationHistory record. When a take
//! does not match, part of the deduction may already be applied: the rule
//! asks for a rollback ([`Failure::RollBack`]) and runs again with
//! [`Admission::Verify`], which reads the products first and records the
//! refusal without writing. The common case (enough stock) thus costs one
//! statement for the stock, one for the lines and one for the record; a
//! refusal pays a rollback. Restock puts back exactly the recorded lines.

use super::{ADD_STOCK, DEDUCT, Deduction, Line, RESTOCK, StockAddition};
use participant_kit::counter::{Add, Counter};
use participant_kit::{
    ActionReply, Admission, CompensationGate, CompensationResult, Failure, HistoryTx, Operation,
    ParticipantError, Refusal, RefusalReason, begin_compensation, finish_compensation, record,
    replay, replay_compensation,
};
use service_kit::fingerprint::Fingerprint;
use service_kit::time::now_ms;
use std::collections::HashMap;
use std::future::Future;

/// Where a deducted order line stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LineStatus {
    /// Taken from stock by Deduct.
    Deducted,
    /// Put back by Restock.
    Restocked,
}

impl LineStatus {
    /// The stored form (`deduct_lines.status`).
    pub fn as_str(self) -> &'static str {
        match self {
            LineStatus::Deducted => "deducted",
            LineStatus::Restocked => "restocked",
        }
    }

    /// Reads back [`LineStatus::as_str`].
    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "deducted" => Some(LineStatus::Deducted),
            "restocked" => Some(LineStatus::Restocked),
            _ => None,
        }
    }
}

/// One recorded order line of a deduction.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RecordedLine {
    /// Position of the line in the order (stable across retries).
    pub line_index: i64,
    /// The product the line took.
    pub product_id: String,
    /// Units taken.
    pub quantity: i64,
    /// Deducted, or put back by Restock.
    pub status: LineStatus,
}

/// Where availability lives: `products (product_id, available)`; in
/// MongoDB `{_id: product_id, available}`.
pub const STOCK: Counter = Counter {
    table: "products",
    key: "product_id",
    value: "available",
};

/// What the inventory rules need from a store transaction.
pub trait StockTx: HistoryTx {
    /// Units available of `product_id`, `None` when there is no product.
    fn available(
        &mut self,
        product_id: &str,
    ) -> impl Future<Output = Result<Option<i64>, Self::Error>>;

    /// Takes every `(product_id, units)` (distinct products) if each
    /// holds its units: true when all were taken. On false some may have
    /// been taken — the rule must roll back.
    fn take(&mut self, takes: &[(&str, i64)]) -> impl Future<Output = Result<bool, Self::Error>>;

    /// Adds units to a product, creating it if absent, unless the sum
    /// would overflow.
    fn give(
        &mut self,
        product_id: &str,
        units: i64,
    ) -> impl Future<Output = Result<Add, Self::Error>>;

    /// Records the lines of a deduction (status [`LineStatus::Deducted`],
    /// `line_index` = position). False when any `(request_id, line_index)`
    /// is already recorded — decided by the backend's unique key, never by
    /// a prior read; the rule must then roll back.
    fn insert_lines(
        &mut self,
        request_id: &str,
        lines: &[Line],
        recorded_at_ms: i64,
    ) -> impl Future<Output = Result<bool, Self::Error>>;

    /// Every recorded line of `request_id`, by `line_index`.
    fn lines_of(
        &mut self,
        request_id: &str,
    ) -> impl Future<Output = Result<Vec<RecordedLine>, Self::Error>>;

    /// Marks every deducted line of `request_id` restocked; how many.
    fn mark_restocked(
        &mut self,
        request_id: &str,
    ) -> impl Future<Output = Result<u64, Self::Error>>;
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
async fn check_stock<T: StockTx>(
    tx: &mut T,
    needs: &[(&str, i64)],
) -> Result<Option<Refusal>, Failure<T::Error>> {
    for &(product, requested) in needs {
        match tx.available(product).await.map_err(Failure::Store)? {
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

/// Takes every line, or nothing: refused when a product is unknown or short.
/// A refusal decided outside the stock rules (`admission`) is recorded the
/// same way; when the request id was recorded before, the call is rolled
/// back and [`replay_deduct`] answers — a deduction already applied stays
/// applied.
pub async fn deduct<T: StockTx>(
    tx: &mut T,
    d: &Deduction,
    admission: &Admission,
) -> Result<ActionReply<()>, Failure<T::Error>> {
    let amount = total_units(d).map_err(Failure::Refused)?;
    let fingerprint = d.fingerprint();
    let op = deduct_operation(d, amount, &fingerprint);
    let needs = per_product(d).map_err(Failure::Refused)?;
    let outcome = match admission {
        Admission::Refuse(refusal) => Err(refusal.clone()),
        Admission::Verify => match check_stock(tx, &needs).await? {
            Some(refusal) => Err(refusal),
            None => take_lines(tx, d, &needs).await.map(Ok)?,
        },
        Admission::Apply => take_lines(tx, d, &needs).await.map(Ok)?,
    };
    record(tx, &op, outcome, |_| String::new()).await
}

/// Takes the products and records the lines. A take that does not match,
/// or a line already recorded, asks for a rollback (the rule runs again
/// verifying first, or replays).
async fn take_lines<T: StockTx>(
    tx: &mut T,
    d: &Deduction,
    needs: &[(&str, i64)],
) -> Result<(), Failure<T::Error>> {
    if !tx.take(needs).await.map_err(Failure::Store)? {
        return Err(Failure::RollBack);
    }
    let recorded = tx
        .insert_lines(&d.request_id, &d.lines, now_ms())
        .await
        .map_err(Failure::Store)?;
    if !recorded {
        // Lines are recorded only with their deduct record, so the deduct
        // key is taken too: answer from it.
        return Err(Failure::Taken);
    }
    Ok(())
}

/// What a deduction whose request id was recorded before answers.
pub async fn replay_deduct<T: StockTx>(
    tx: &mut T,
    d: &Deduction,
) -> Result<ActionReply<()>, Failure<T::Error>> {
    let amount = total_units(d).map_err(Failure::Refused)?;
    let fingerprint = d.fingerprint();
    replay(tx, &deduct_operation(d, amount, &fingerprint), |_| Ok(())).await
}

/// Compensates the deduction with the same request id and lines: puts back
/// exactly the lines recorded as taken.
pub async fn restock<T: StockTx>(
    tx: &mut T,
    d: &Deduction,
) -> Result<CompensationResult, Failure<T::Error>> {
    let amount = total_units(d).map_err(Failure::Refused)?;
    let fingerprint = d.fingerprint();
    let op = deduct_operation(d, amount, &fingerprint);
    if let CompensationGate::Done(result) = begin_compensation(tx, &op).await? {
        return Ok(result);
    }
    let lines = tx.lines_of(&d.request_id).await.map_err(Failure::Store)?;
    for line in lines.iter().filter(|l| l.status == LineStatus::Deducted) {
        let given = tx
            .give(&line.product_id, line.quantity)
            .await
            .map_err(Failure::Store)?;
        if let Add::Overflow { have } = given {
            return Err(Failure::Refused(ParticipantError::OutOfRange(format!(
                "restock of {} units would overflow the availability of product {:?} ({have} units)",
                line.quantity, line.product_id
            ))));
        }
    }
    tx.mark_restocked(&d.request_id)
        .await
        .map_err(Failure::Store)?;
    finish_compensation(tx, &op).await
}

/// What a restock recorded before answers.
pub async fn replay_restock<T: StockTx>(
    tx: &mut T,
    d: &Deduction,
) -> Result<CompensationResult, Failure<T::Error>> {
    let amount = total_units(d).map_err(Failure::Refused)?;
    let fingerprint = d.fingerprint();
    replay_compensation(tx, &deduct_operation(d, amount, &fingerprint)).await
}

fn addition_operation<'a>(a: &'a StockAddition, fingerprint: &'a Fingerprint) -> Operation<'a> {
    Operation {
        request_id: &a.request_id,
        action_kind: ADD_STOCK,
        compensation_kind: RESTOCK,
        subject: &a.product_id,
        amount: a.quantity,
        fingerprint,
    }
}

/// Adds units, creating the product if absent. Returns the new availability.
pub async fn add_stock<T: StockTx>(
    tx: &mut T,
    a: &StockAddition,
) -> Result<ActionReply<i64>, Failure<T::Error>> {
    if a.quantity <= 0 {
        // The adapter rejects this first; kept so a direct call cannot
        // lower stock through AddStock.
        return Err(Failure::Refused(ParticipantError::OutOfRange(format!(
            "request_id {:?}: quantity of product {:?} must be positive (got {})",
            a.request_id, a.product_id, a.quantity
        ))));
    }
    let fingerprint = a.fingerprint();
    let op = addition_operation(a, &fingerprint);
    let outcome = match tx
        .give(&a.product_id, a.quantity)
        .await
        .map_err(Failure::Store)?
    {
        Add::Done(total) => Ok(total),
        Add::Overflow { have } => Err(Refusal::new(
            RefusalReason::Overflow,
            format!(
                "adding {} units would overflow the availability of product {:?} ({have} units)",
                a.quantity, a.product_id
            ),
        )),
    };
    record(tx, &op, outcome, i64::to_string).await
}

/// What a stock addition whose request id was recorded before answers.
pub async fn replay_add_stock<T: StockTx>(
    tx: &mut T,
    a: &StockAddition,
) -> Result<ActionReply<i64>, Failure<T::Error>> {
    let fingerprint = a.fingerprint();
    replay(tx, &addition_operation(a, &fingerprint), |detail| {
        detail.parse().map_err(|_| {
            ParticipantError::Corrupt(format!("recorded availability {detail:?} is not a number"))
        })
    })
    .await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn line_statuses_round_trip() {
        for status in [LineStatus::Deducted, LineStatus::Restocked] {
            assert_eq!(LineStatus::parse(status.as_str()), Some(status));
        }
        assert_eq!(LineStatus::parse("taken"), None);
    }
}
