//! The rules of a business refusal (`--refused-order`): it is recorded,
//! so a repeat replays it, and its Compensate has nothing to undo.

use crate::expect::record::{ACT, COMPENSATE, NOTHING_TO_UNDO, REFUSED};
use crate::expect::{self, Check};
use crate::target::Target;
use saga_proto::participant::v1 as pb;
use saga_proto::participant::v1::CompensationEffect;

/// A fresh call of the refused order, refused once; its reply.
async fn refused_call(t: &Target) -> Result<(pb::StepCall, pb::ActReply), String> {
    let Some(order) = t.settings().refused_order.as_ref() else {
        return Err("no --refused-order".into());
    };
    let call = t.fresh_call(order);
    let reply = t.act(&call).await;
    expect::refused(
        "the first Act of --refused-order",
        &reply,
        None,
        Some(false),
    )?;
    let reply = reply.map_err(|s| expect::status(&s))?;
    Ok((call, reply))
}

/// A refused Act is recorded `act refused`; repeated, the same refusal
/// (code and detail), replayed, nothing new recorded.
pub async fn refusal_replays(t: &Target) -> Check {
    let (call, first) = refused_call(t).await?;
    let before = expect::records(t, &call, &[(ACT, REFUSED)]).await?;
    let mut again = call.clone();
    again.attempt = 2;
    let reply = t.act(&again).await;
    expect::refused(
        "the repeated Act",
        &reply,
        Some(&first.reason_code),
        Some(true),
    )?;
    if let Ok(reply) = &reply
        && reply.detail != first.detail
    {
        return Err(format!(
            "the repeated Act replayed detail {:?}, the first said {:?}",
            expect::quoted(&reply.detail),
            expect::quoted(&first.detail)
        ));
    }
    expect::unchanged(t, &call, &before, "repeating the refused Act").await
}

/// Compensate after a refused Act: NOTHING_TO_UNDO, recorded; repeated,
/// replayed.
pub async fn compensate_refused_nothing_to_undo(t: &Target) -> Check {
    let (call, _) = refused_call(t).await?;
    let reply = t.compensate(&call).await;
    expect::compensated(
        "the Compensate of the refused Act",
        &reply,
        CompensationEffect::NothingToUndo,
        false,
    )?;
    let before =
        expect::records(t, &call, &[(ACT, REFUSED), (COMPENSATE, NOTHING_TO_UNDO)]).await?;
    let mut again = call.clone();
    again.attempt = 2;
    let reply = t.compensate(&again).await;
    expect::compensated(
        "the repeated Compensate",
        &reply,
        CompensationEffect::NothingToUndo,
        true,
    )?;
    expect::unchanged(t, &call, &before, "repeating the Compensate").await
}
