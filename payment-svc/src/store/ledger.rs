//! The payment rules, written once for every backend.
//!
//! Charge, refund and deposit are generic over [`LedgerTx`]: the barrier's
//! [`HistoryTx`] plus reading and writing a balance, all inside one local
//! transaction of whatever backend runs them. Balances are computed in Rust
//! with checked arithmetic (no backend's silent overflow behaviour matters),
//! which is safe because the transaction isolates the read from the write.

use super::{CHARGE, DEPOSIT, REFUND, Transfer};
use participant_kit::{
    ActionGate, ActionReply, Admission, CompensationGate, CompensationResult, Failure, HistoryTx,
    Operation, ParticipantError, Refusal, RefusalReason, begin_action, begin_compensation, finish,
    finish_compensation, refuse, replay,
};
use service_kit::fingerprint::Fingerprint;
use std::future::Future;

/// What the payment rules need from a store transaction.
pub trait LedgerTx: HistoryTx {
    /// Balance of `customer_id`, `None` when there is no account.
    fn balance(
        &mut self,
        customer_id: &str,
    ) -> impl Future<Output = Result<Option<i64>, Self::Error>>;

    /// Sets the balance, creating the account if absent.
    fn set_balance(
        &mut self,
        customer_id: &str,
        cents: i64,
    ) -> impl Future<Output = Result<(), Self::Error>>;
}

fn operation<'a>(
    t: &'a Transfer,
    action_kind: &'a str,
    fingerprint: &'a Fingerprint,
) -> Operation<'a> {
    Operation {
        request_id: &t.request_id,
        action_kind,
        compensation_kind: REFUND,
        subject: &t.customer_id,
        amount: t.amount_cents,
        fingerprint,
    }
}

/// Reads back the balance recorded with an applied charge or deposit.
fn balance(detail: &str) -> Result<i64, ParticipantError> {
    detail.parse().map_err(|_| {
        ParticipantError::Corrupt(format!("recorded balance {detail:?} is not a number"))
    })
}

/// Takes the amount from the balance, or records why not. A refusal decided
/// outside the ledger (`admission`) goes through the barrier too (see
/// [`participant_kit::refuse`]): a charge already applied stays applied.
pub async fn charge<T: LedgerTx>(
    tx: &mut T,
    t: &Transfer,
    admission: &Admission,
) -> Result<ActionReply<i64>, Failure<T::Error>> {
    let fingerprint = t.fingerprint();
    let op = operation(t, CHARGE, &fingerprint);
    if let Admission::Refuse(refusal) = admission {
        return refuse(tx, &op, refusal, balance).await;
    }
    if let ActionGate::Replay(recorded) = begin_action(tx, &op).await? {
        return replay(recorded, balance);
    }
    let outcome = match tx.balance(&t.customer_id).await.map_err(Failure::Store)? {
        None => Err(Refusal::new(
            RefusalReason::NotFound,
            format!("customer {:?} has no account", t.customer_id),
        )),
        Some(have) if have < t.amount_cents => Err(Refusal::new(
            RefusalReason::Insufficient,
            format!(
                "insufficient funds: customer {:?} has {have} cents, charge needs {}",
                t.customer_id, t.amount_cents
            ),
        )),
        Some(have) => {
            let left = have - t.amount_cents;
            tx.set_balance(&t.customer_id, left)
                .await
                .map_err(Failure::Store)?;
            Ok(left)
        }
    };
    finish(tx, &op, outcome, i64::to_string).await
}

/// Compensates the charge with the same request id and parameters.
pub async fn refund<T: LedgerTx>(
    tx: &mut T,
    t: &Transfer,
) -> Result<CompensationResult, Failure<T::Error>> {
    let fingerprint = t.fingerprint();
    let op = operation(t, CHARGE, &fingerprint);
    let charge = match begin_compensation(tx, &op).await? {
        CompensationGate::Done(result) => return Ok(result),
        CompensationGate::Undo(charge) => charge,
    };
    let have = tx
        .balance(&charge.subject)
        .await
        .map_err(Failure::Store)?
        .unwrap_or(0);
    let restored = have.checked_add(charge.amount).ok_or_else(|| {
        Failure::Refused(ParticipantError::OutOfRange(format!(
            "refund of {} cents would overflow the balance of {:?}",
            charge.amount, charge.subject
        )))
    })?;
    tx.set_balance(&charge.subject, restored)
        .await
        .map_err(Failure::Store)?;
    Ok(finish_compensation(tx, &op).await?)
}

/// Adds money, creating the account if absent.
pub async fn deposit<T: LedgerTx>(
    tx: &mut T,
    t: &Transfer,
) -> Result<ActionReply<i64>, Failure<T::Error>> {
    let fingerprint = t.fingerprint();
    let op = operation(t, DEPOSIT, &fingerprint);
    if let ActionGate::Replay(recorded) = begin_action(tx, &op).await? {
        return replay(recorded, balance);
    }
    let have = tx
        .balance(&t.customer_id)
        .await
        .map_err(Failure::Store)?
        .unwrap_or(0);
    let outcome = match have.checked_add(t.amount_cents) {
        Some(total) => {
            tx.set_balance(&t.customer_id, total)
                .await
                .map_err(Failure::Store)?;
            Ok(total)
        }
        None => Err(Refusal::new(
            RefusalReason::Overflow,
            format!(
                "deposit of {} cents would overflow the balance of {:?} ({have} cents)",
                t.amount_cents, t.customer_id
            ),
        )),
    };
    finish(tx, &op, outcome, i64::to_string).await
}
