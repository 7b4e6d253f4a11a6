//! From barrier records to participant replies — the steps every action
//! rule ends with, written once for both participants.

use crate::{
    ActionGate, ActionReply, Failure, HistoryTx, Operation, ParticipantError, Recorded, Refusal,
    begin_action, finish_action,
};

/// The reply for an outcome recorded earlier (`replayed: true`); an
/// applied outcome's detail is read back with `value`.
pub fn replay<V, E>(
    recorded: Recorded,
    value: impl FnOnce(&str) -> Result<V, ParticipantError>,
) -> Result<ActionReply<V>, Failure<E>> {
    match recorded {
        Recorded::Applied { detail } => Ok(ActionReply::Applied {
            value: value(&detail).map_err(Failure::Refused)?,
            replayed: true,
        }),
        Recorded::Refused { detail } => Ok(ActionReply::Refused {
            refusal: Refusal::decode(&detail),
            replayed: true,
        }),
    }
}

/// Records a fresh outcome (an applied one with the detail `detail` makes
/// of its value) in the same transaction as the effect, and returns it.
pub async fn finish<T: HistoryTx, V>(
    tx: &mut T,
    op: &Operation<'_>,
    outcome: Result<V, Refusal>,
    detail: impl FnOnce(&V) -> String,
) -> Result<ActionReply<V>, Failure<T::Error>> {
    let recorded = match &outcome {
        Ok(value) => Recorded::Applied {
            detail: detail(value),
        },
        Err(refusal) => Recorded::Refused {
            detail: refusal.encode(),
        },
    };
    finish_action(tx, op, &recorded).await?;
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

/// Refuses an action for a reason decided outside the participant's rules
/// (an injected fault, a fraud check): recorded like any refusal when the
/// request id is new, otherwise the recorded outcome is replayed — an action
/// applied by an earlier attempt whose reply was lost stays applied.
pub async fn refuse<T: HistoryTx, V>(
    tx: &mut T,
    op: &Operation<'_>,
    refusal: &Refusal,
    value: impl FnOnce(&str) -> Result<V, ParticipantError>,
) -> Result<ActionReply<V>, Failure<T::Error>> {
    match begin_action(tx, op).await? {
        ActionGate::Replay(recorded) => replay(recorded, value),
        ActionGate::Proceed => finish(tx, op, Err(refusal.clone()), |_| String::new()).await,
    }
}
