//! The rules under real concurrency: duplicates of one call sent at once
//! (`--concurrency`, 50 by default), and Acts racing their own Compensates.
//! All the calls of a rule are in flight together, multiplexed on one
//! HTTP/2 connection, so the participant handles them concurrently.

use super::single::applied_call;
use crate::expect::record::{ACT, APPLIED, BLOCKED, COMPENSATE, NULL_COMPENSATION, UNDONE};
use crate::expect::{self, ALREADY_COMPENSATED, Check};
use crate::target::Target;
use futures::future::join_all;
use saga_proto::participant::v1 as pb;
use saga_proto::participant::v1::CompensationEffect;
use saga_proto::participant::v1::act_reply::Outcome;
use tonic::Status;

/// `n` copies of `call`, attempts 1..=n.
fn duplicates(call: &pb::StepCall, n: usize) -> Vec<pb::StepCall> {
    (1..=n)
        .map(|attempt| {
            let mut copy = call.clone();
            copy.attempt = u32::try_from(attempt).unwrap_or(u32::MAX);
            copy
        })
        .collect()
}

/// Exactly one of `replayed` is false.
fn exactly_one_fresh(what: &str, replayed: impl Iterator<Item = bool>, n: usize) -> Check {
    let fresh = replayed.filter(|r| !r).count();
    if fresh != 1 {
        return Err(format!(
            "{fresh} of {n} concurrent {what} answered not replayed: exactly one may act, the others replay it"
        ));
    }
    Ok(())
}

/// Concurrent duplicates of one Act: every caller gets APPLIED with the
/// same detail, exactly one not replayed, and one record.
pub async fn concurrent_acts_one_effect(t: &Target) -> Check {
    let n = t.settings().concurrency;
    let call = t.fresh_call(&t.settings().order);
    let calls = duplicates(&call, n);
    let replies: Vec<Result<pb::ActReply, Status>> = join_all(calls.iter().map(|c| t.act(c))).await;
    let mut applied = Vec::with_capacity(n);
    for (i, reply) in replies.iter().enumerate() {
        let what = format!("concurrent Act #{} of {n}", i + 1);
        let reply = reply
            .as_ref()
            .map_err(|s| format!("{what} failed with {}", expect::status(s)))?;
        if reply.outcome != i32::from(Outcome::Applied) {
            return Err(format!(
                "{what} answered {}, expected APPLIED (pass an --order the participant applies)",
                expect::act(reply)
            ));
        }
        applied.push(reply);
    }
    exactly_one_fresh("Acts", applied.iter().map(|r| r.replayed), n)?;
    if let Some(odd) = applied.iter().find(|r| r.detail != applied[0].detail) {
        return Err(format!(
            "concurrent Acts answered different details ({:?} and {:?}): every caller gets the one recorded outcome",
            expect::quoted(&applied[0].detail),
            expect::quoted(&odd.detail)
        ));
    }
    expect::records(t, &call, &[(ACT, APPLIED)]).await?;
    Ok(())
}

/// Concurrent duplicates of one Compensate of an applied Act: every
/// caller gets UNDONE, exactly one not replayed, one undo recorded.
pub async fn concurrent_compensates_one_undo(t: &Target) -> Check {
    let n = t.settings().concurrency;
    let call = applied_call(t).await?;
    let calls = duplicates(&call, n);
    let replies: Vec<Result<pb::CompensateReply, Status>> =
        join_all(calls.iter().map(|c| t.compensate(c))).await;
    let mut undone = Vec::with_capacity(n);
    for (i, reply) in replies.iter().enumerate() {
        let what = format!("concurrent Compensate #{} of {n}", i + 1);
        let reply = reply
            .as_ref()
            .map_err(|s| format!("{what} failed with {}", expect::status(s)))?;
        if reply.effect != i32::from(CompensationEffect::Undone) {
            return Err(format!(
                "{what} answered {}, expected UNDONE",
                expect::compensation(reply)
            ));
        }
        undone.push(reply);
    }
    exactly_one_fresh("Compensates", undone.iter().map(|r| r.replayed), n)?;
    expect::records(t, &call, &[(ACT, APPLIED), (COMPENSATE, UNDONE)]).await?;
    Ok(())
}

/// One Act and its Compensate sent at once, for `--concurrency / 2` fresh
/// request ids together (half of them with the Compensate sent first):
/// either the Act came first (APPLIED, then UNDONE) or the Compensate did
/// (NULL_COMPENSATION, the Act refused ALREADY_COMPENSATED) — never an
/// applied Act left behind its compensation, and a later Act is refused.
pub async fn act_races_compensate_consistent(t: &Target) -> Check {
    let rounds = (t.settings().concurrency / 2).max(1);
    let calls: Vec<pb::StepCall> = (0..rounds)
        .map(|_| t.fresh_call(&t.settings().order))
        .collect();
    let races = join_all(calls.iter().enumerate().map(|(i, call)| async move {
        if i % 2 == 0 {
            tokio::join!(t.act(call), t.compensate(call))
        } else {
            let (undo, act) = tokio::join!(t.compensate(call), t.act(call));
            (act, undo)
        }
    }))
    .await;
    for (i, (call, (act, undo))) in calls.iter().zip(races).enumerate() {
        settled(t, call, &act, &undo)
            .await
            .map_err(|why| format!("race {} of {rounds} ({}): {why}", i + 1, call.request_id))?;
    }
    Ok(())
}

/// How one race ended must be one of the two orders, in the replies and
/// in the records; a later Act changes nothing.
async fn settled(
    t: &Target,
    call: &pb::StepCall,
    act: &Result<pb::ActReply, Status>,
    undo: &Result<pb::CompensateReply, Status>,
) -> Check {
    let undo = undo
        .as_ref()
        .map_err(|s| format!("the Compensate failed with {}", expect::status(s)))?;
    let expected: &[(&str, &str)] = match CompensationEffect::try_from(undo.effect) {
        Ok(CompensationEffect::NullCompensation) => {
            expect::refused(
                "the Act, after a NULL_COMPENSATION",
                act,
                Some(ALREADY_COMPENSATED),
                None,
            )?;
            &[(ACT, BLOCKED), (COMPENSATE, NULL_COMPENSATION)]
        }
        Ok(CompensationEffect::Undone) => {
            expect::applied("the Act, which the Compensate UNDID", act, false)?;
            &[(ACT, APPLIED), (COMPENSATE, UNDONE)]
        }
        _ => {
            return Err(format!(
                "the Compensate answered {}, expected UNDONE or NULL_COMPENSATION",
                expect::compensation(undo)
            ));
        }
    };
    let before = expect::records(t, call, expected).await?;
    let mut late = call.clone();
    late.attempt = 2;
    let reply = t.act(&late).await;
    expect::refused(
        "an Act after the race",
        &reply,
        Some(ALREADY_COMPENSATED),
        None,
    )?;
    expect::unchanged(t, call, &before, "an Act after the race").await
}
