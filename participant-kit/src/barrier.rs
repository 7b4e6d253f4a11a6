//! The operationHistory barrier: the protocol every participant call follows.
//!
//! A saga participant receives calls that may be retried, duplicated,
//! reordered or late. The barrier makes every such call safe with one rule:
//! **every operation is recorded under a unique key `(request_id, kind)` in
//! the same local transaction as its effect**, and the decision what to do is
//! taken from whichever record won the unique key — never from a read made
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
//! The null-compensation trick (as in DTM's barrier): a compensation inserts a
//! `blocked` record under the *action's* key. If that insert wins, the action
//! never ran, and when it arrives later its own insert loses and it is
//! refused — hanging protection from the same unique key, no lock.
//!
//! The protocol is split into `begin_*`/`finish_*` calls so each participant
//! applies its own effect in between, inside its own transaction; the storage
//! side is the small [`HistoryTx`] trait, so the embedded (SQLite) and MongoDB
//! backends share this logic.

use crate::record::{OperationRecord, RecordStatus};
use service_kit::fingerprint::Fingerprint;
use std::future::Future;

/// Storage operations the barrier needs, run inside one local transaction
/// together with the participant's effect.
pub trait HistoryTx {
    /// The backend's error type.
    type Error;

    /// Inserts `record` unless a record with the same `(request_id, kind)`
    /// exists. Returns `None` when inserted, or the record that already held
    /// the key. Must rely on the backend's unique key, never on a prior read.
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

    /// Sets the status and detail of a record inserted earlier in this
    /// transaction.
    fn set_status(
        &mut self,
        request_id: &str,
        kind: &str,
        status: RecordStatus,
        detail: &str,
    ) -> impl Future<Output = Result<(), Self::Error>>;
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

/// Why the barrier refused a call. Both are caller mistakes or protocol
/// races, never transient: retrying the same call gives the same answer.
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

/// What [`begin_action`] decided.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ActionGate {
    /// First arrival: apply the effect, then call [`finish_action`].
    Proceed,
    /// Seen before: return this recorded outcome, apply nothing.
    Replay(Recorded),
}

/// A recorded action outcome.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Recorded {
    /// Applied; `detail` is what the participant stored with it.
    Applied {
        /// What the participant stored with it (e.g. the balance after).
        detail: String,
    },
    /// Refused for a business reason; a retry gets the same refusal.
    Refused {
        /// The encoded [`Refusal`](crate::Refusal).
        detail: String,
    },
}

/// What [`begin_compensation`] decided.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CompensationGate {
    /// The action was applied: undo it using the action's record, then call
    /// [`finish_compensation`].
    Undo(OperationRecord),
    /// Nothing to do now: the result is already recorded.
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
}

/// Step 1 of an action: claim `(request_id, action_kind)`.
pub async fn begin_action<T: HistoryTx>(
    tx: &mut T,
    op: &Operation<'_>,
) -> Result<ActionGate, BarrierError<T::Error>> {
    let claim = OperationRecord::new(op, op.action_kind, RecordStatus::Pending);
    let Some(existing) = tx
        .insert_or_get(&claim)
        .await
        .map_err(BarrierError::Store)?
    else {
        return Ok(ActionGate::Proceed);
    };
    check_parameters(op, &existing)?;
    match existing.status {
        // Applied once — and undone since? Then it is not "applied" any
        // more: say so, as for an action that arrives after its
        // compensation. (Only a repeat pays this read.)
        RecordStatus::Applied
            if tx
                .get(op.request_id, op.compensation_kind)
                .await
                .map_err(BarrierError::Store)?
                .is_some_and(|c| c.status == RecordStatus::Undone) =>
        {
            Err(BarrierError::AlreadyCompensated {
                request_id: op.request_id.to_owned(),
                kind: op.action_kind.to_owned(),
            })
        }
        RecordStatus::Applied => Ok(ActionGate::Replay(Recorded::Applied {
            detail: existing.detail,
        })),
        RecordStatus::Refused => Ok(ActionGate::Replay(Recorded::Refused {
            detail: existing.detail,
        })),
        RecordStatus::Blocked => Err(BarrierError::AlreadyCompensated {
            request_id: op.request_id.to_owned(),
            kind: op.action_kind.to_owned(),
        }),
        other => Err(corrupt(op, op.action_kind, other)),
    }
}

/// Step 2 of an action: record its outcome (same transaction as the effect).
pub async fn finish_action<T: HistoryTx>(
    tx: &mut T,
    op: &Operation<'_>,
    outcome: &Recorded,
) -> Result<(), BarrierError<T::Error>> {
    let (status, detail) = match outcome {
        Recorded::Applied { detail } => (RecordStatus::Applied, detail),
        Recorded::Refused { detail } => (RecordStatus::Refused, detail),
    };
    tx.set_status(op.request_id, op.action_kind, status, detail)
        .await
        .map_err(BarrierError::Store)
}

/// Step 1 of a compensation: claim `(request_id, compensation_kind)`, then
/// the action's key (null compensation / hanging protection).
///
/// On any error the caller must roll back the transaction: the claim made
/// here must not survive a refused call.
pub async fn begin_compensation<T: HistoryTx>(
    tx: &mut T,
    op: &Operation<'_>,
) -> Result<CompensationGate, BarrierError<T::Error>> {
    let claim = OperationRecord::new(op, op.compensation_kind, RecordStatus::Pending);
    if let Some(existing) = tx
        .insert_or_get(&claim)
        .await
        .map_err(BarrierError::Store)?
    {
        check_parameters(op, &existing)?;
        let effect = match existing.status {
            RecordStatus::Undone => CompensationEffect::Undone,
            RecordStatus::NullCompensation => CompensationEffect::NullCompensation,
            RecordStatus::NothingToUndo => CompensationEffect::NothingToUndo,
            other => return Err(corrupt(op, op.compensation_kind, other)),
        };
        return Ok(CompensationGate::Done(CompensationResult {
            effect,
            replayed: true,
        }));
    }

    let blocker = OperationRecord::new(op, op.action_kind, RecordStatus::Blocked);
    let action = match tx
        .insert_or_get(&blocker)
        .await
        .map_err(BarrierError::Store)?
    {
        None => return done(tx, op, CompensationEffect::NullCompensation).await,
        Some(action) => action,
    };
    check_parameters(op, &action)?;
    match action.status {
        RecordStatus::Applied => Ok(CompensationGate::Undo(action)),
        RecordStatus::Refused => done(tx, op, CompensationEffect::NothingToUndo).await,
        other => Err(corrupt(op, op.action_kind, other)),
    }
}

/// Step 2 of a compensation that undid an applied action.
pub async fn finish_compensation<T: HistoryTx>(
    tx: &mut T,
    op: &Operation<'_>,
) -> Result<CompensationResult, BarrierError<T::Error>> {
    record_compensation(tx, op, CompensationEffect::Undone).await?;
    Ok(CompensationResult {
        effect: CompensationEffect::Undone,
        replayed: false,
    })
}

async fn done<T: HistoryTx>(
    tx: &mut T,
    op: &Operation<'_>,
    effect: CompensationEffect,
) -> Result<CompensationGate, BarrierError<T::Error>> {
    record_compensation(tx, op, effect).await?;
    Ok(CompensationGate::Done(CompensationResult {
        effect,
        replayed: false,
    }))
}

async fn record_compensation<T: HistoryTx>(
    tx: &mut T,
    op: &Operation<'_>,
    effect: CompensationEffect,
) -> Result<(), BarrierError<T::Error>> {
    tx.set_status(op.request_id, op.compensation_kind, effect.status(), "")
        .await
        .map_err(BarrierError::Store)
}

fn check_parameters<E>(
    op: &Operation<'_>,
    recorded: &OperationRecord,
) -> Result<(), BarrierError<E>> {
    if recorded.fingerprint == op.fingerprint.as_str() {
        return Ok(());
    }
    Err(BarrierError::ParameterMismatch {
        request_id: op.request_id.to_owned(),
        kind: recorded.kind.clone(),
        difference: op.fingerprint.difference(&recorded.parameters),
    })
}

fn corrupt<E>(op: &Operation<'_>, kind: &str, status: RecordStatus) -> BarrierError<E> {
    BarrierError::Corrupt {
        request_id: op.request_id.to_owned(),
        kind: kind.to_owned(),
        status: status.as_str().to_owned(),
    }
}
