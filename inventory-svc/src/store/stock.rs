//! The inventory rules, written once for every backend.
//!
//! Deduct, restock and add stock are generic over [`StockTx`]: the
//! barrier's [`HistoryTx`] plus a few primitive reads and writes of
//! products and deducted order lines, all inside one local transaction of
//! whatever backend runs them.
//!
//! A deduction is checked as a whole first (quantities of repeated products
//! added up), so a refusal takes nothing and is recorded; only then is each
//! line taken and recorded under `(request_id, line_index)`. Should any line
//! fail anyway, the rule returns an error and the backend rolls back the
//! whole transaction — every line and the history record. Restock puts back
//! exactly the recorded lines. Availability is computed in Rust with checked
//! arithmetic (no backend's silent overflow behaviour matters), which is
//! safe because the transaction isolates each read from its write.

use super::{ADD_STOCK, DEDUCT, Deduction, RESTOCK, StockAddition};
use participant_kit::{
    ActionGate, ActionReply, Admission, CompensationGate, CompensationResult, Failure, HistoryTx,
    Operation, ParticipantError, Refusal, RefusalReason, begin_action, begin_compensation, finish,
    finish_compensation, refuse, replay,
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

/// What the inventory rules need from a store transaction.
pub trait StockTx: HistoryTx {
    /// Units available of `product_id`, `None` when there is no product.
    fn available(
        &mut self,
        product_id: &str,
    ) -> impl Future<Output = Result<Option<i64>, Self::Error>>;

    /// Sets the availability, creating the product if absent.
    fn set_available(
        &mut self,
        product_id: &str,
        units: i64,
    ) -> impl Future<Output = Result<(), Self::Error>>;

    /// Records a line taken from stock (status [`LineStatus::Deducted`]).
    /// Returns false, inserting nothing, when `(request_id, line_index)` is
    /// already recorded — decided by the backend's unique key, never by a
    /// prior read.
    fn insert_line(
        &mut self,
        request_id: &str,
        line_index: i64,
        product_id: &str,
        quantity: i64,
        recorded_at_ms: i64,
    ) -> impl Future<Output = Result<bool, Self::Error>>;

    /// Every recorded line of `request_id`, by `line_index`.
    fn lines_of(
        &mut self,
        request_id: &str,
    ) -> impl Future<Output = Result<Vec<RecordedLine>, Self::Error>>;

    /// Sets the status of one recorded line; false when there is no such
    /// line.
    fn set_line_status(
        &mut self,
        request_id: &str,
        line_index: i64,
        status: LineStatus,
    ) -> impl Future<Output = Result<bool, Self::Error>>;
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
    d: &Deduction,
) -> Result<Option<Refusal>, Failure<T::Error>> {
    for (product, requested) in per_product(d).map_err(Failure::Refused)? {
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

/// Takes every line and records it; any failure aborts the whole call.
async fn take_lines<T: StockTx>(tx: &mut T, d: &Deduction) -> Result<(), Failure<T::Error>> {
    let recorded_at_ms = now_ms();
    for (i, line) in d.lines.iter().enumerate() {
        let line_index = i64::try_from(i).map_err(|_| {
            Failure::Refused(ParticipantError::OutOfRange(format!(
                "request_id {:?}: too many lines",
                d.request_id
            )))
        })?;
        let left = tx
            .available(&line.product_id)
            .await
            .map_err(Failure::Store)?
            .and_then(|have| have.checked_sub(line.quantity))
            .filter(|left| *left >= 0);
        let Some(left) = left else {
            return Err(Failure::Refused(ParticipantError::Corrupt(format!(
                "request_id {:?}: line {i} (product {:?}, {} units) could not be deducted after the stock check passed",
                d.request_id, line.product_id, line.quantity
            ))));
        };
        tx.set_available(&line.product_id, left)
            .await
            .map_err(Failure::Store)?;
        let inserted = tx
            .insert_line(
                &d.request_id,
                line_index,
                &line.product_id,
                line.quantity,
                recorded_at_ms,
            )
            .await
            .map_err(Failure::Store)?;
        if !inserted {
            return Err(Failure::Refused(ParticipantError::Corrupt(format!(
                "request_id {:?}: line {i} is already recorded although the deduct was not",
                d.request_id
            ))));
        }
    }
    Ok(())
}

/// Takes every line, or nothing: refused when a product is unknown or short.
/// A refusal decided outside the stock rules (`admission`) goes through the
/// barrier too (see [`participant_kit::refuse`]): a deduction already
/// applied stays applied.
pub async fn deduct<T: StockTx>(
    tx: &mut T,
    d: &Deduction,
    admission: &Admission,
) -> Result<ActionReply<()>, Failure<T::Error>> {
    let amount = total_units(d).map_err(Failure::Refused)?;
    let fingerprint = d.fingerprint();
    let op = deduct_operation(d, amount, &fingerprint);
    if let Admission::Refuse(refusal) = admission {
        return refuse(tx, &op, refusal, |_| Ok(())).await;
    }
    if let ActionGate::Replay(recorded) = begin_action(tx, &op).await? {
        return replay(recorded, |_| Ok(()));
    }
    let outcome = match check_stock(tx, d).await? {
        Some(refusal) => Err(refusal),
        None => {
            take_lines(tx, d).await?;
            Ok(())
        }
    };
    finish(tx, &op, outcome, |_| String::new()).await
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
    for line in lines {
        if line.status != LineStatus::Deducted {
            continue;
        }
        let have = tx
            .available(&line.product_id)
            .await
            .map_err(Failure::Store)?
            .unwrap_or(0);
        let restored = have.checked_add(line.quantity).ok_or_else(|| {
            Failure::Refused(ParticipantError::OutOfRange(format!(
                "restock of {} units would overflow the availability of product {:?} ({have} units)",
                line.quantity, line.product_id
            )))
        })?;
        tx.set_available(&line.product_id, restored)
            .await
            .map_err(Failure::Store)?;
        let updated = tx
            .set_line_status(&d.request_id, line.line_index, LineStatus::Restocked)
            .await
            .map_err(Failure::Store)?;
        if !updated {
            return Err(Failure::Refused(ParticipantError::Corrupt(format!(
                "request_id {:?}: line {} vanished while it was restocked",
                d.request_id, line.line_index
            ))));
        }
    }
    Ok(finish_compensation(tx, &op).await?)
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
    let op = Operation {
        request_id: &a.request_id,
        action_kind: ADD_STOCK,
        compensation_kind: RESTOCK,
        subject: &a.product_id,
        amount: a.quantity,
        fingerprint: &fingerprint,
    };
    if let ActionGate::Replay(recorded) = begin_action(tx, &op).await? {
        return replay(recorded, |detail| {
            detail.parse().map_err(|_| {
                ParticipantError::Corrupt(format!(
                    "recorded availability {detail:?} is not a number"
                ))
            })
        });
    }
    let have = tx
        .available(&a.product_id)
        .await
        .map_err(Failure::Store)?
        .unwrap_or(0);
    let outcome = match have.checked_add(a.quantity) {
        Some(total) => {
            tx.set_available(&a.product_id, total)
                .await
                .map_err(Failure::Store)?;
            Ok(total)
        }
        None => Err(Refusal::new(
            RefusalReason::Overflow,
            format!(
                "adding {} units would overflow the availability of product {:?} ({have} units)",
                a.quantity, a.product_id
            ),
        )),
    };
    finish(tx, &op, outcome, i64::to_string).await
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
