//! The batch rules (docs/participant-protocol.md, "Batches"), run against a
//! participant that answers ActBatch: each call of a batch is the call on
//! its own — its own result in order, its own barrier (duplicates inside
//! one batch and across batches apply once), its own refusal — and a batch
//! sent again after a lost reply replays.
//!
//! A call of a batch may be answered UNAVAILABLE, ABORTED or
//! RESOURCE_EXHAUSTED (say, a write conflict between two duplicates of
//! one batch): nothing was recorded for it, so the kit sends that call
//! again on its own, as the orchestrator would, and judges the answer it
//! settles on.

use super::single::applied_call;
use crate::expect::record::{
    ACT, APPLIED, BLOCKED, COMPENSATE, NOTHING_TO_UNDO, NULL_COMPENSATION, REFUSED, UNDONE,
};
use crate::expect::{self, Check};
use crate::target::{Auth, Target, is_transient};
use saga_proto::participant::v1 as pb;
use saga_proto::participant::v1::CompensationEffect;
use saga_proto::participant::v1::act_reply::Outcome;
use tonic::Status;

/// Calls in the batches of these rules.
const CALLS: usize = 8;
/// Copies of one call in the duplicates rule's batch.
const COPIES: usize = 5;

/// An ActBatch of `calls`, checked to answer one result per call naming
/// its request id, in order; each transient result settled by the call on
/// its own.
async fn act_batch(
    t: &Target,
    what: &str,
    calls: &[pb::StepCall],
) -> Result<Vec<Result<pb::ActReply, Status>>, String> {
    let results = t
        .act_batch_once(calls.to_vec(), Auth::Token)
        .await
        .map_err(|s| format!("{what} failed as a whole with {}", expect::status(&s)))?;
    let mut settled = Vec::with_capacity(calls.len());
    for (call, result) in in_order(what, calls, results)? {
        settled.push(match result {
            Err(s) if is_transient(s.code()) => t.act(call).await,
            other => other,
        });
    }
    Ok(settled)
}

/// A CompensateBatch of `calls`, as [`act_batch`].
async fn compensate_batch(
    t: &Target,
    what: &str,
    calls: &[pb::StepCall],
) -> Result<Vec<Result<pb::CompensateReply, Status>>, String> {
    let results = t
        .compensate_batch_once(calls.to_vec(), Auth::Token)
        .await
        .map_err(|s| format!("{what} failed as a whole with {}", expect::status(&s)))?;
    let mut settled = Vec::with_capacity(calls.len());
    for (call, result) in in_order(what, calls, results)? {
        settled.push(match result {
            Err(s) if is_transient(s.code()) => t.compensate(call).await,
            other => other,
        });
    }
    Ok(settled)
}

/// The results of a batch of `calls` paired with their calls, checked to
/// be one per call, each naming its call's request id.
fn in_order<'c, R>(
    what: &str,
    calls: &'c [pb::StepCall],
    results: Vec<(String, R)>,
) -> Result<Vec<(&'c pb::StepCall, R)>, String> {
    if results.len() != calls.len() {
        return Err(format!(
            "{what}: {} results to {} calls, expected one per call",
            results.len(),
            calls.len()
        ));
    }
    calls
        .iter()
        .zip(results)
        .enumerate()
        .map(|(i, (call, (request_id, result)))| {
            if request_id == call.request_id {
                Ok((call, result))
            } else {
                Err(format!(
                    "{what}: result {i} names request id {}, its call's is {}",
                    expect::quoted(&request_id),
                    call.request_id
                ))
            }
        })
        .collect()
}

/// Fresh calls of the order the participant applies.
fn fresh(t: &Target, n: usize) -> Vec<pb::StepCall> {
    (0..n).map(|_| t.fresh_call(&t.settings().order)).collect()
}

/// An ActBatch of fresh calls: one result per call, in order, each applied
/// (not replayed) and recorded once.
pub async fn batch_results_in_order(t: &Target) -> Check {
    let calls = fresh(t, CALLS);
    let results = act_batch(t, "the ActBatch", &calls).await?;
    for (i, (call, result)) in calls.iter().zip(&results).enumerate() {
        expect::applied(&format!("call {i} of the ActBatch"), result, false)?;
        expect::records(t, call, &[(ACT, APPLIED)]).await?;
    }
    Ok(())
}

/// One request id [`COPIES`] times in one batch, then twice in a second
/// batch, then on its own: one effect, one record; every answer the same
/// applied detail, exactly one not replayed.
pub async fn batch_duplicates_apply_once(t: &Target) -> Check {
    let call = t.fresh_call(&t.settings().order);
    let copies: Vec<pb::StepCall> = (1..=COPIES as u32)
        .map(|attempt| pb::StepCall {
            attempt,
            ..call.clone()
        })
        .collect();
    let mut answers = act_batch(t, "the ActBatch of one call 5 times", &copies).await?;
    answers.extend(act_batch(t, "the second ActBatch", &copies[..2]).await?);
    answers.push(t.act(&call).await);
    let mut fresh_answers = 0;
    let mut details = Vec::new();
    for (i, answer) in answers.iter().enumerate() {
        let reply = answer
            .as_ref()
            .map_err(|s| format!("answer {i} failed with {}", expect::status(s)))?;
        if reply.outcome != i32::from(Outcome::Applied) {
            return Err(format!(
                "answer {i} was {}, expected APPLIED",
                expect::act(reply)
            ));
        }
        fresh_answers += usize::from(!reply.replayed);
        details.push(reply.detail.as_str());
    }
    if fresh_answers != 1 {
        return Err(format!(
            "{fresh_answers} of {} answers to one request id were not replayed, expected exactly 1: it applied more than once",
            answers.len()
        ));
    }
    if details.windows(2).any(|w| w[0] != w[1]) {
        return Err(format!(
            "the duplicates answered different details: {details:?}"
        ));
    }
    expect::records(t, &call, &[(ACT, APPLIED)]).await?;
    Ok(())
}

/// A refused order between two applied ones: its own REFUSED, recorded;
/// the others applied.
pub async fn batch_refusal_is_the_calls_own(t: &Target) -> Check {
    let Some(refused_order) = t.settings().refused_order.as_ref() else {
        return Err("no --refused-order".into());
    };
    let calls = vec![
        t.fresh_call(&t.settings().order),
        t.fresh_call(refused_order),
        t.fresh_call(&t.settings().order),
    ];
    let results = act_batch(t, "the ActBatch", &calls).await?;
    expect::applied("call 0 of the ActBatch", &results[0], false)?;
    expect::refused("call 1 (refused order)", &results[1], None, Some(false))?;
    expect::applied("call 2 of the ActBatch", &results[2], false)?;
    expect::records(t, &calls[0], &[(ACT, APPLIED)]).await?;
    expect::records(t, &calls[1], &[(ACT, REFUSED)]).await?;
    expect::records(t, &calls[2], &[(ACT, APPLIED)]).await?;
    Ok(())
}

/// A batch sent again (its reply was lost): every call replays its first
/// answer, nothing new recorded.
pub async fn batch_retried_replays(t: &Target) -> Check {
    let calls = fresh(t, CALLS / 2);
    let first = act_batch(t, "the ActBatch", &calls).await?;
    let mut before = Vec::new();
    for (i, (call, result)) in calls.iter().zip(&first).enumerate() {
        expect::applied(&format!("call {i} of the ActBatch"), result, false)?;
        before.push(expect::records(t, call, &[(ACT, APPLIED)]).await?);
    }
    let again = act_batch(t, "the same ActBatch again", &calls).await?;
    for (i, (result, first)) in again.iter().zip(&first).enumerate() {
        expect::applied(&format!("call {i} sent again"), result, true)?;
        if let (Ok(again), Ok(first)) = (result, first)
            && again.detail != first.detail
        {
            return Err(format!(
                "call {i} sent again replayed detail {:?}, the first answer said {:?}",
                expect::quoted(&again.detail),
                expect::quoted(&first.detail)
            ));
        }
    }
    for (call, before) in calls.iter().zip(&before) {
        expect::unchanged(t, call, before, "sending the batch again").await?;
    }
    Ok(())
}

/// A CompensateBatch of an applied call (twice), a call never acted on
/// (and a refused one, with `--refused-order`): UNDONE once and replayed
/// once, NULL_COMPENSATION, NOTHING_TO_UNDO; each recorded once.
pub async fn batch_compensates(t: &Target) -> Check {
    let applied = applied_call(t).await?;
    let never = t.fresh_call(&t.settings().order);
    let mut calls = vec![applied.clone(), applied.clone(), never.clone()];
    let refused = match t.settings().refused_order.as_ref() {
        Some(order) => {
            let call = t.fresh_call(order);
            let reply = t.act(&call).await;
            expect::refused("the Act of --refused-order", &reply, None, Some(false))?;
            calls.push(call.clone());
            Some(call)
        }
        None => None,
    };
    let results = compensate_batch(t, "the CompensateBatch", &calls).await?;
    let undone: Vec<bool> = results[..2]
        .iter()
        .enumerate()
        .map(|(i, r)| match r {
            Ok(reply) if reply.effect == i32::from(CompensationEffect::Undone) => {
                Ok(reply.replayed)
            }
            Ok(reply) => Err(format!(
                "compensation {i} of the applied call answered {}, expected UNDONE",
                expect::compensation(reply)
            )),
            Err(s) => Err(format!(
                "compensation {i} failed with {}",
                expect::status(s)
            )),
        })
        .collect::<Result<_, String>>()?;
    if undone.iter().filter(|replayed| !**replayed).count() != 1 {
        return Err(format!(
            "the applied call's two compensations answered replayed = {undone:?}, expected exactly one not replayed: it undid twice"
        ));
    }
    expect::compensated(
        "the never-acted call's",
        &results[2],
        CompensationEffect::NullCompensation,
        false,
    )?;
    expect::records(t, &applied, &[(ACT, APPLIED), (COMPENSATE, UNDONE)]).await?;
    expect::records(
        t,
        &never,
        &[(ACT, BLOCKED), (COMPENSATE, NULL_COMPENSATION)],
    )
    .await?;
    if let Some(refused) = refused {
        expect::compensated(
            "the refused call's",
            &results[3],
            CompensationEffect::NothingToUndo,
            false,
        )?;
        expect::records(
            t,
            &refused,
            &[(ACT, REFUSED), (COMPENSATE, NOTHING_TO_UNDO)],
        )
        .await?;
    }
    Ok(())
}

/// With the token configured, a batch without it or with a wrong one is
/// UNAUTHENTICATED as a whole and records nothing.
pub async fn batch_token_required(t: &Target) -> Check {
    let call = t.fresh_call(&t.settings().order);
    for auth in [Auth::Missing, Auth::Wrong] {
        let act = t.act_batch_once(vec![call.clone()], auth).await;
        expect::failed_with(
            "an ActBatch without the token",
            &act,
            tonic::Code::Unauthenticated,
        )?;
        let undo = t.compensate_batch_once(vec![call.clone()], auth).await;
        expect::failed_with(
            "a CompensateBatch without the token",
            &undo,
            tonic::Code::Unauthenticated,
        )?;
    }
    expect::records(t, &call, &[]).await?;
    Ok(())
}
