//! The payment rules, written once for every backend.
//!
//! Charge, refund and deposit are generic over [`LedgerTx`]: the barrier's
//! [`HistoryTx`] plus two primitive balance moves, all inside one local
//! transaction of whatever backend runs them. Each move is one conditional
//! statement — take only if the balance holds it, add only if the sum fits
//! an int64 — so a balance can never go negative or overflow, whatever
//! runs concurrently, and a charge costs the store one statement for the
//! money and one for its record ([`participant_kit::record`]).
//!
//! Each action comes with its replay: what a call answers when its request
//! id was recorded before (the transaction runner rolls the call back and
//! asks it).

use super::{CHARGE, DEPOSIT, REFUND, Transfer};
use participant_kit::counter::{Add, Counter, Take};
use participant_kit::{
    ActionReply, Admission, CompensationGate, CompensationResult, Failure, HistoryTx, Operation,
    ParticipantError, Refusal, RefusalReason, begin_compensation, finish_compensation, record,
    replay, replay_compensation,
};
use service_kit::fingerprint::Fingerprint;
use std::future::Future;

/// Where balances live: `accounts (customer_id, balance_cents)`; in
/// MongoDB `{_id: customer_id, balance_cents}`.
pub const BALANCES: Counter = Counter {
    table: "accounts",
    key: "customer_id",
    value: "balance_cents",
};

/// What the payment rules need from a store transaction: the barrier plus
/// the two balance moves (each one conditional statement, see
/// [`participant_kit::counter`]).
pub trait LedgerTx: HistoryTx {
    /// Takes `cents` from `customer_id`'s balance if it holds that much.
    fn withdraw(
        &mut self,
        customer_id: &str,
        cents: i64,
    ) -> impl Future<Output = Result<Take, Self::Error>>;

    /// Adds `cents` to `customer_id`'s balance, creating the account if
    /// absent, unless the sum would overflow.
    fn credit(
        &mut self,
        customer_id: &str,
        cents: i64,
    ) -> impl Future<Output = Result<Add, Self::Error>>;
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

/// Refuses an amount that is not positive. The gRPC adapter rejects it
/// first; this keeps the store safe when called directly, where a charge
/// of -5 cents would credit 5 and a deposit of -5 would fail as a store
/// error.
fn positive<E>(t: &Transfer) -> Result<(), Failure<E>> {
    if t.amount_cents > 0 {
        return Ok(());
    }
    Err(Failure::Refused(ParticipantError::OutOfRange(format!(
        "request_id {:?}: amount_cents must be positive (got {})",
        t.request_id, t.amount_cents
    ))))
}

/// Reads back the balance recorded with an applied charge or deposit.
fn balance(detail: &str) -> Result<i64, ParticipantError> {
    detail.parse().map_err(|_| {
        ParticipantError::Corrupt(format!("recorded balance {detail:?} is not a number"))
    })
}

/// Takes the amount from the balance, or records why not. A refusal decided
/// outside the ledger (`admission`) is recorded the same way; when the
/// request id was recorded before, the call is rolled back and
/// [`replay_charge`] answers — a charge already applied stays applied.
pub async fn charge<T: LedgerTx>(
    tx: &mut T,
    t: &Transfer,
    admission: &Admission,
) -> Result<ActionReply<i64>, Failure<T::Error>> {
    positive(t)?;
    let fingerprint = t.fingerprint();
    let op = operation(t, CHARGE, &fingerprint);
    let outcome = match admission {
        Admission::Refuse(refusal) => Err(refusal.clone()),
        // One conditional update: nothing to verify before it.
        Admission::Apply | Admission::Verify => match tx
            .withdraw(&t.customer_id, t.amount_cents)
            .await
            .map_err(Failure::Store)?
        {
            Take::Done(left) => Ok(left),
            Take::Missing => Err(Refusal::new(
                RefusalReason::NotFound,
                format!("customer {:?} has no account", t.customer_id),
            )),
            Take::Short { have } => Err(Refusal::new(
                RefusalReason::Insufficient,
                format!(
                    "insufficient funds: customer {:?} has {have} cents, charge needs {}",
                    t.customer_id, t.amount_cents
                ),
            )),
        },
    };
    record(tx, &op, outcome, i64::to_string).await
}

/// What a charge whose request id was recorded before answers.
pub async fn replay_charge<T: LedgerTx>(
    tx: &mut T,
    t: &Transfer,
) -> Result<ActionReply<i64>, Failure<T::Error>> {
    let fingerprint = t.fingerprint();
    replay(tx, &operation(t, CHARGE, &fingerprint), balance).await
}

/// Compensates the charge with the same request id and parameters.
pub async fn refund<T: LedgerTx>(
    tx: &mut T,
    t: &Transfer,
) -> Result<CompensationResult, Failure<T::Error>> {
    positive(t)?;
    let fingerprint = t.fingerprint();
    let op = operation(t, CHARGE, &fingerprint);
    let charge = match begin_compensation(tx, &op).await? {
        CompensationGate::Done(result) => return Ok(result),
        CompensationGate::Undo(charge) => charge,
    };
    let credited = tx
        .credit(&charge.subject, charge.amount)
        .await
        .map_err(Failure::Store)?;
    if let Add::Overflow { have } = credited {
        return Err(Failure::Refused(ParticipantError::OutOfRange(format!(
            "refund of {} cents would overflow the balance of {:?} ({have} cents)",
            charge.amount, charge.subject
        ))));
    }
    finish_compensation(tx, &op).await
}

/// What a refund recorded before answers.
pub async fn replay_refund<T: LedgerTx>(
    tx: &mut T,
    t: &Transfer,
) -> Result<CompensationResult, Failure<T::Error>> {
    let fingerprint = t.fingerprint();
    replay_compensation(tx, &operation(t, CHARGE, &fingerprint)).await
}

/// Adds money, creating the account if absent.
pub async fn deposit<T: LedgerTx>(
    tx: &mut T,
    t: &Transfer,
) -> Result<ActionReply<i64>, Failure<T::Error>> {
    positive(t)?;
    let fingerprint = t.fingerprint();
    let op = operation(t, DEPOSIT, &fingerprint);
    let outcome = match tx
        .credit(&t.customer_id, t.amount_cents)
        .await
        .map_err(Failure::Store)?
    {
        Add::Done(total) => Ok(total),
        Add::Overflow { have } => Err(Refusal::new(
            RefusalReason::Overflow,
            format!(
                "deposit of {} cents would overflow the balance of {:?} ({have} cents)",
                t.amount_cents, t.customer_id
            ),
        )),
    };
    record(tx, &op, outcome, i64::to_string).await
}

/// What a deposit whose request id was recorded before answers.
pub async fn replay_deposit<T: LedgerTx>(
    tx: &mut T,
    t: &Transfer,
) -> Result<ActionReply<i64>, Failure<T::Error>> {
    let fingerprint = t.fingerprint();
    replay(tx, &operation(t, DEPOSIT, &fingerprint), balance).await
}
