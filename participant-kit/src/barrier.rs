//! The operationHistory barrier: the protocol every participant call follows.
//!
//! A saga participant receives calls that may be retried, duplicated,
//! reordered or late. The barrier makes every such call safe with one rule:
//! **every operation is recorded under a unique key `(request_id, kind)` in
//! the same local transaction as its effect**, and what a repeated call gets
//! is decided by whichever record won the unique key — never by a read made
//! before an insert (check-then-insert races; a unique key does not).
//!
//! What follows from that rule:
//!
//! | call                                   | result                                     |
//! |----------------------------------------|--------------------------------------------|
//! | action, first time                     | applied (or refused) and recorded          |
//! | action again, same parameters          | the recorded outcome, no second effect     |
//! | action again, different parameters     | [`BarrierError::ParameterMismatch`]        |
//! | compensation of an applied action      | undone once; repeats replay "undone"       |
//! | compensation before the action arrived | null compensation; the action row is taken |
//! | action after its compensation          | [`BarrierError::AlreadyCompensated`]       |
//! | action again after it was undone       | [`BarrierError::AlreadyCompensated`]       |
//! | compensation of a refused action       | nothing to undo                            |
//!
//! Each row has a test named after it in `tests/barrier_rules.rs`, run
//! over the embedded history with a test-only participant.
//!
//! **Effect first, record second, in one transaction.** An action applies
//! its effect and then inserts its record with the outcome ([`record`]). If
//! the key is already taken, the insert loses: the call returns
//! [`Failure::Taken`], the transaction runner rolls back everything the call
//! did — the effect included — and answers from the record that holds the
//! key ([`replay`]). The transaction makes the order inside it irrelevant to
//! correctness, and it saves a round trip on every first call (no claim
//! followed by a status update), which is the common case; a repeat pays the
//! rollback. A compensation does the same after claiming the action's key
//! ([`begin_compensation`]).
//!
//! The null-compensation trick (as in DTM's barrier): a compensation claims
//! the *action's* key with a `blocked` record. If that claim wins, the
//! action never ran, and when it arrives later its insert loses to the
//! `blocked` record and it is refused — hanging protection from the same
//! unique key, no lock.
//!
//! The storage side is the small [`HistoryTx`] trait, so the embedded
//! (SQLite) and MongoDB backends share this logic; the transaction runners
//! are `crate::sqlite::transact` and `crate::mongo::transact`.

use crate::outcome::{ActionReply, Failure, ParticipantError, Refusal};
use crate::record::{OperationRecord, RecordStatus};
use service_kit::fingerprint::Fingerprint;
use std::future::Future;

/// Storage operations the barrier needs, run inside one local transaction
/// together with the participant's effect.
pub trait HistoryTx {
    /// The backend's error type.
    type Error;

    /// Inserts `record` unless a record with the same `(request_id, kind)`
    /// exists: true when inserted. Must rely on the backend's unique key,
    /// never on a prior read. After a false the transaction must be rolled
    /// back (MongoDB has aborted it already).
    fn insert(
        &mut self,
        record: &OperationRecord,
    ) -> impl Future<Output = Result<bool, Self::Error>>;

    /// Inserts `record` unless a record with the same `(request_id, kind)`
    /// exists. Returns `None` when inserted, or the record that already held
    /// the key — without aborting the transaction (a compensation goes on
    /// with what it found).
    fn insert_or_get(
        &mut self,
        record: &OperationRecord,
    ) -> impl Future<Output = Result<Option<OperationRecord>, Self::Error>>;

    /// The record under `(request_id, kind)`, if any.
    fn get(
        &mut self,
        request_id: &str,
        kind: &str,
    ) -> impl Future<Output = Result<Option<OperationRecord>, Self::Error>>;
}

/// Names one barrier-protected operation: the action kind, the kind of its
/// compensation, and the parameters both carry.
#[derive(Debug, Clone)]
pub struct Operation<'a> {
    /// The caller's idempotency key, shared by the action and its compensation.
    pub request_id: &'a str,
    /// e.g. `charge`, `deduct`, `deposit`.
    pub action_kind: &'a str,
    /// e.g. `refund`, `restock`; unused for operations without compensation.
    pub compensation_kind: &'a str,
    /// The account or product the operation concerns (for listing).
    pub subject: &'a str,
    /// A magnitude for listing (cents or units).
    pub amount: i64,
    /// The parameters both calls must repeat exactly.
    pub fingerprint: &'a Fingerprint,
}

/// Why the barrier refused a call. Each is a caller mistake or a protocol
/// race, never transient: retrying the same call gives the same answer.
#[derive(Debug, thiserror::Error)]
pub enum BarrierError<E> {
    /// The request id was used before with different parameters. Refusing
    /// loudly (instead of replaying) surfaces a bug in the caller.
    #[error(
        "request_id {request_id:?} was reused with different parameters ({kind}): {difference}"
    )]
    ParameterMismatch {
        /// The reused key.
        request_id: String,
        /// The operation kind whose record differs.
        kind: String,
        /// Which field differs: `lines[0].quantity: 3 recorded, 5 received`.
        difference: String,
    },
    /// The action arrived after its compensation (hanging protection), or
    /// was repeated after its compensation undid it.
    #[error("request_id {request_id:?}: {kind} refused because it was already compensated")]
    AlreadyCompensated {
        /// The key.
        request_id: String,
        /// The action's kind.
        kind: String,
    },
    /// The history holds a record in a state the protocol never leaves behind
    /// after a commit; reported rather than guessed at.
    #[error("request_id {request_id:?}: {kind} record is in unexpected state {status}")]
    Corrupt {
        /// The key.
        request_id: String,
        /// The operation kind.
        kind: String,
        /// The state found.
        status: String,
    },
    /// The store failed; the transaction must be rolled back. (The message
    /// does not print `E`, so every variant displays whatever `E` is.)
    #[error("store error")]
    Store(E),
}

/// What [`begin_compensation`] decided.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CompensationGate {
    /// The action was applied: undo it using the action's record, then call
    /// [`finish_compensation`].
    Undo(OperationRecord),
    /// Nothing to undo: the result is recorded.
    Done(CompensationResult),
}

/// The outcome of a compensation call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CompensationResult {
    /// What the compensation did.
    pub effect: CompensationEffect,
    /// True when replayed from an earlier identical compensation.
    pub replayed: bool,
}

/// What a compensation did to the action's effect.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CompensationEffect {
    /// The applied action is undone.
    Undone,
    /// The action never arrived; it will be refused if it does.
    NullCompensation,
    /// The action was refused: nothing to undo.
    NothingToUndo,
}

impl CompensationEffect {
    fn status(self) -> RecordStatus {
        match self {
            CompensationEffect::Undone => RecordStatus::Undone,
            CompensationEffect::NullCompensation => RecordStatus::NullCompensation,
            CompensationEffect::NothingToUndo => RecordStatus::NothingToUndo,
        }
    }

    fn of(status: RecordStatus) -> Option<Self> {
        match status {
            RecordStatus::Undone => Some(CompensationEffect::Undone),
            RecordStatus::NullCompensation => Some(CompensationEffect::NullCompensation),
            RecordStatus::NothingToUndo => Some(CompensationEffect::NothingToUndo),
            _ => None,
        }
    }
}

/// Records a fresh action outcome — an applied one with the detail `detail`
/// makes of its value, or a refusal — in the same transaction as its
/// effect, and returns it. [`Failure::Taken`] when the key was taken: roll
/// back and [`replay`].
pub async fn record<T: HistoryTx, V>(
    tx: &mut T,
    op: &Operation<'_>,
    outcome: Result<V, Refusal>,
    detail: impl FnOnce(&V) -> String,
) -> Result<ActionReply<V>, Failure<T::Error>> {
    let (status, detail) = match &outcome {
        Ok(value) => (RecordStatus::Applied, detail(value)),
        Err(refusal) => (RecordStatus::Refused, refusal.encode()),
    };
    let mut row = OperationRecord::new(op, op.action_kind, status);
    row.detail = detail;
    if !tx.insert(&row).await.map_err(Failure::Store)? && !planted_duplicate(&outcome) {
        return Err(Failure::Taken);
    }
    Ok(match outcome {
        Ok(value) => ActionReply::Applied {
            value,
            replayed: false,
        },
        Err(refusal) => ActionReply::Refused {
            refusal,
            replayed: false,
        },
    })
}

/// The planted defect [`Defect::BarrierAcceptsDuplicate`] (never, unless a
/// test planted it): an applied action whose key was taken keeps its effect.
///
/// [`Defect::BarrierAcceptsDuplicate`]: service_kit::defects::Defect::BarrierAcceptsDuplicate
fn planted_duplicate<V>(outcome: &Result<V, Refusal>) -> bool {
    outcome.is_ok()
        && service_kit::defects::planted(service_kit::defects::Defect::BarrierAcceptsDuplicate)
}

/// The answer to an action whose key was taken, from the record that holds
/// it (`replayed: true`); an applied outcome's detail is read back with
/// `value`. Refused when the record says the action was compensated.
pub async fn replay<T: HistoryTx, V>(
    tx: &mut T,
    op: &Operation<'_>,
    value: impl FnOnce(&str) -> Result<V, ParticipantError>,
) -> Result<ActionReply<V>, Failure<T::Error>> {
    let Some(existing) = tx
        .get(op.request_id, op.action_kind)
        .await
        .map_err(Failure::Store)?
    else {
        return Err(vanished(op, op.action_kind));
    };
    check_parameters(op, &existing)?;
    match existing.status {
        // Applied once — and undone since? Then it is not "applied" any
        // more: say so, as for an action that arrives after its
        // compensation.
        RecordStatus::Applied if undone(tx, op).await? => Err(already_compensated(op)),
        RecordStatus::Applied => Ok(ActionReply::Applied {
            value: value(&existing.detail).map_err(Failure::Refused)?,
            replayed: true,
        }),
        RecordStatus::Refused => Ok(ActionReply::Refused {
            refusal: Refusal::decode(&existing.detail),
            replayed: true,
        }),
        RecordStatus::Blocked => Err(already_compensated(op)),
        other => Err(corrupt(op, op.action_kind, other)),
    }
}

async fn undone<T: HistoryTx>(tx: &mut T, op: &Operation<'_>) -> Result<bool, Failure<T::Error>> {
    let compensation = tx
        .get(op.request_id, op.compensation_kind)
        .await
        .map_err(Failure::Store)?;
    Ok(compensation.is_some_and(|c| c.status == RecordStatus::Undone))
}

/// Step 1 of a compensation: claims the action's key. If the claim wins
/// the action never ran: a null compensation is recorded (and the action
/// refused when it arrives). A refused action has nothing to undo. An
/// applied one is to be undone ([`CompensationGate::Undo`]).
/// [`Failure::Taken`] when this compensation was recorded before: roll back
/// and [`replay_compensation`].
pub async fn begin_compensation<T: HistoryTx>(
    tx: &mut T,
    op: &Operation<'_>,
) -> Result<CompensationGate, Failure<T::Error>> {
    let blocker = OperationRecord::new(op, op.action_kind, RecordStatus::Blocked);
    let Some(action) = tx.insert_or_get(&blocker).await.map_err(Failure::Store)? else {
        return done(tx, op, CompensationEffect::NullCompensation).await;
    };
    check_parameters(op, &action)?;
    match action.status {
        RecordStatus::Applied => Ok(CompensationGate::Undo(action)),
        RecordStatus::Refused => done(tx, op, CompensationEffect::NothingToUndo).await,
        // An earlier compensation blocked the action and recorded itself.
        RecordStatus::Blocked => Err(Failure::Taken),
        other => Err(corrupt(op, op.action_kind, other)),
    }
}

/// Step 2 of a compensation that undid an applied action: records it.
/// [`Failure::Taken`] when it was undone before: roll back (the second undo
/// with it) and [`replay_compensation`].
pub async fn finish_compensation<T: HistoryTx>(
    tx: &mut T,
    op: &Operation<'_>,
) -> Result<CompensationResult, Failure<T::Error>> {
    match done(tx, op, CompensationEffect::Undone).await? {
        CompensationGate::Done(result) => Ok(result),
        CompensationGate::Undo(_) => unreachable_gate(op),
    }
}

/// The answer to a compensation recorded before (`replayed: true`).
pub async fn replay_compensation<T: HistoryTx>(
    tx: &mut T,
    op: &Operation<'_>,
) -> Result<CompensationResult, Failure<T::Error>> {
    let Some(existing) = tx
        .get(op.request_id, op.compensation_kind)
        .await
        .map_err(Failure::Store)?
    else {
        return Err(vanished(op, op.compensation_kind));
    };
    check_parameters(op, &existing)?;
    match CompensationEffect::of(existing.status) {
        Some(effect) => Ok(CompensationResult {
            effect,
            replayed: true,
        }),
        None => Err(corrupt(op, op.compensation_kind, existing.status)),
    }
}

async fn done<T: HistoryTx>(
    tx: &mut T,
    op: &Operation<'_>,
    effect: CompensationEffect,
) -> Result<CompensationGate, Failure<T::Error>> {
    let row = OperationRecord::new(op, op.compensation_kind, effect.status());
    if !tx.insert(&row).await.map_err(Failure::Store)? {
        return Err(Failure::Taken);
    }
    Ok(CompensationGate::Done(CompensationResult {
        effect,
        replayed: false,
    }))
}

/// `done` never asks for an undo; kept total without a panic.
fn unreachable_gate<E>(op: &Operation<'_>) -> Result<CompensationResult, Failure<E>> {
    Err(Failure::Refused(ParticipantError::Corrupt(format!(
        "request_id {:?}: {} recorded without its outcome",
        op.request_id, op.compensation_kind
    ))))
}

fn check_parameters<E>(op: &Operation<'_>, recorded: &OperationRecord) -> Result<(), Failure<E>> {
    if recorded.fingerprint == op.fingerprint.as_str() {
        return Ok(());
    }
    Err(BarrierError::ParameterMismatch {
        request_id: op.request_id.to_owned(),
        kind: recorded.kind.clone(),
        difference: op.fingerprint.difference(&recorded.parameters),
    }
    .into())
}

fn already_compensated<E>(op: &Operation<'_>) -> Failure<E> {
    BarrierError::AlreadyCompensated {
        request_id: op.request_id.to_owned(),
        kind: op.action_kind.to_owned(),
    }
    .into()
}

fn corrupt<E>(op: &Operation<'_>, kind: &str, status: RecordStatus) -> Failure<E> {
    BarrierError::Corrupt {
        request_id: op.request_id.to_owned(),
        kind: kind.to_owned(),
        status: status.as_str().to_owned(),
    }
    .into()
}

/// The record that took the key is gone by the time it is read (expired by
/// retention between the two transactions): nothing is known, so the caller
/// retries, and then finds the key free or taken again.
fn vanished<E>(op: &Operation<'_>, kind: &str) -> Failure<E> {
    Failure::Refused(ParticipantError::Store(format!(
        "request_id {:?}: the {kind} record that held the key is gone; retry",
        op.request_id
    )))
}
