//! The rules one call at a time: a first Act, its repeats, a repeat with
//! other parameters, a Compensate after the Act and before it, and an Act
//! after its Compensate.

use crate::expect::record::{ACT, APPLIED, BLOCKED, COMPENSATE, NULL_COMPENSATION, UNDONE};
use crate::expect::{self, ALREADY_COMPENSATED, Check};
use crate::order::with_other_lines;
use crate::target::Target;
use saga_proto::participant::v1 as pb;
use saga_proto::participant::v1::CompensationEffect;
use tonic::Code;

/// A fresh call of the order the participant applies, applied once.
pub(super) async fn applied_call(t: &Target) -> Result<pb::StepCall, String> {
    let call = t.fresh_call(&t.settings().order);
    let first = t.act(&call).await;
    expect::applied("the first Act", &first, false)
        .map_err(|why| format!("{why} (pass an --order the participant applies)"))?;
    Ok(call)
}

/// The first Act of a request id applies, and is recorded `act applied`.
pub async fn first_act_applies(t: &Target) -> Check {
    let call = applied_call(t).await?;
    expect::records(t, &call, &[(ACT, APPLIED)]).await?;
    Ok(())
}

/// Act again with the same parameters: the recorded answer, replayed, and
/// nothing new recorded.
pub async fn repeat_act_replays(t: &Target) -> Check {
    let call = t.fresh_call(&t.settings().order);
    let first = t.act(&call).await;
    expect::applied("the first Act", &first, false)?;
    let before = expect::records(t, &call, &[(ACT, APPLIED)]).await?;
    for repeat in 2..=3 {
        let mut again = call.clone();
        again.attempt = repeat;
        let reply = t.act(&again).await;
        expect::applied(&format!("Act #{repeat}"), &reply, true)?;
        same_detail(&first, &reply, repeat)?;
    }
    expect::unchanged(t, &call, &before, "repeating the Act").await
}

fn same_detail(
    first: &Result<pb::ActReply, tonic::Status>,
    again: &Result<pb::ActReply, tonic::Status>,
    repeat: u32,
) -> Check {
    if let (Ok(first), Ok(again)) = (first, again)
        && first.detail != again.detail
    {
        return Err(format!(
            "Act #{repeat} replayed detail {:?}, the first Act said {:?}: a replay answers the recorded outcome",
            expect::quoted(&again.detail),
            expect::quoted(&first.detail)
        ));
    }
    Ok(())
}

/// The calls of `call`'s request id with other parameters: another
/// customer, other lines, another saga, another step.
fn changed(t: &Target, call: &pb::StepCall) -> Vec<(&'static str, pb::StepCall)> {
    let order = call.order.clone().unwrap_or_default();
    let mut customer = call.clone();
    if let Some(o) = customer.order.as_mut() {
        o.customer_id = format!("{}-other", o.customer_id);
    }
    let mut lines = call.clone();
    lines.order = Some(with_other_lines(order));
    let mut saga = call.clone();
    saga.saga_id = uuid::Uuid::now_v7().to_string();
    let mut step = call.clone();
    step.step = if t.settings().step == "changed" {
        "changed-too".into()
    } else {
        "changed".into()
    };
    vec![
        ("customer", customer),
        ("lines", lines),
        ("saga id", saga),
        ("step", step),
    ]
}

/// The same request id with other parameters is ALREADY_EXISTS, changes
/// nothing, and the original call still replays.
pub async fn changed_parameters_refused(t: &Target) -> Check {
    let call = applied_call(t).await?;
    let before = expect::records(t, &call, &[(ACT, APPLIED)]).await?;
    for (what, other) in changed(t, &call) {
        let reply = t.act(&other).await;
        expect::failed_with(
            &format!("an Act of the same request id with another {what}"),
            &reply,
            Code::AlreadyExists,
        )?;
    }
    expect::unchanged(t, &call, &before, "the Acts with other parameters").await?;
    let again = t.act(&call).await;
    expect::applied("the original Act repeated after them", &again, true)
}

/// Compensate after an applied Act undoes it, recorded `compensate
/// undone`.
pub async fn compensate_undoes_once(t: &Target) -> Check {
    let call = applied_call(t).await?;
    let reply = t.compensate(&call).await;
    expect::compensated("the Compensate", &reply, CompensationEffect::Undone, false)?;
    expect::records(t, &call, &[(ACT, APPLIED), (COMPENSATE, UNDONE)]).await?;
    Ok(())
}

/// Compensate again: the recorded UNDONE, replayed, never a second undo.
pub async fn repeat_compensate_replays(t: &Target) -> Check {
    let call = applied_call(t).await?;
    let first = t.compensate(&call).await;
    expect::compensated(
        "the first Compensate",
        &first,
        CompensationEffect::Undone,
        false,
    )?;
    let before = expect::records(t, &call, &[(ACT, APPLIED), (COMPENSATE, UNDONE)]).await?;
    for repeat in 2..=3 {
        let mut again = call.clone();
        again.attempt = repeat;
        let reply = t.compensate(&again).await;
        expect::compensated(
            &format!("Compensate #{repeat}"),
            &reply,
            CompensationEffect::Undone,
            true,
        )?;
    }
    expect::unchanged(t, &call, &before, "repeating the Compensate").await
}

/// An Act repeated after its Compensate undid it is refused
/// (ALREADY_COMPENSATED): the step stays undone.
pub async fn act_after_undo_refused(t: &Target) -> Check {
    let call = applied_call(t).await?;
    let undo = t.compensate(&call).await;
    expect::compensated("the Compensate", &undo, CompensationEffect::Undone, false)?;
    let before = expect::records(t, &call, &[(ACT, APPLIED), (COMPENSATE, UNDONE)]).await?;
    let mut again = call.clone();
    again.attempt = 2;
    let reply = t.act(&again).await;
    expect::refused(
        "the Act repeated after its Compensate",
        &reply,
        Some(ALREADY_COMPENSATED),
        None,
    )?;
    expect::unchanged(t, &call, &before, "the Act after the Compensate").await
}

/// Compensate before its Act: NULL_COMPENSATION, recorded with the Act's
/// key blocked; repeated, replayed.
pub async fn compensate_before_act_null(t: &Target) -> Check {
    let call = t.fresh_call(&t.settings().order);
    let first = t.compensate(&call).await;
    expect::compensated(
        "a Compensate before any Act",
        &first,
        CompensationEffect::NullCompensation,
        false,
    )?;
    let before =
        expect::records(t, &call, &[(ACT, BLOCKED), (COMPENSATE, NULL_COMPENSATION)]).await?;
    let mut again = call.clone();
    again.attempt = 2;
    let reply = t.compensate(&again).await;
    expect::compensated(
        "the repeated Compensate",
        &reply,
        CompensationEffect::NullCompensation,
        true,
    )?;
    expect::unchanged(t, &call, &before, "repeating the null compensation").await
}

/// An Act arriving after its Compensate is refused (ALREADY_COMPENSATED)
/// and never applies, however often it comes: the records stay the null
/// compensation and the blocked Act.
pub async fn late_act_refused(t: &Target) -> Check {
    let call = t.fresh_call(&t.settings().order);
    let first = t.compensate(&call).await;
    expect::compensated(
        "a Compensate before any Act",
        &first,
        CompensationEffect::NullCompensation,
        false,
    )?;
    for attempt in 1..=2 {
        let mut late = call.clone();
        late.attempt = attempt;
        let reply = t.act(&late).await;
        expect::refused(
            &format!("late Act #{attempt}"),
            &reply,
            Some(ALREADY_COMPENSATED),
            None,
        )?;
    }
    expect::records(t, &call, &[(ACT, BLOCKED), (COMPENSATE, NULL_COMPENSATION)]).await?;
    Ok(())
}
