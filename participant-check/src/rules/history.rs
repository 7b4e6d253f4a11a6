//! The rules of `ListOperations` itself and of the service token.

use super::single::applied_call;
use crate::expect::record::{ACT, APPLIED, COMPENSATE, UNDONE};
use crate::expect::{self, Check};
use crate::target::{Auth, Target};
use saga_proto::participant::v1::CompensationEffect;
use tonic::Code;

/// ListOperations: nothing for an unknown request id; an Act and its
/// Compensate as two records under the request id, oldest first, each
/// with its time; INVALID_ARGUMENT for an empty or oversized request id.
pub async fn history_lists_records(t: &Target) -> Check {
    let unknown = t.fresh_call(&t.settings().order);
    expect::records(t, &unknown, &[]).await?;
    let call = applied_call(t).await?;
    let undo = t.compensate(&call).await;
    expect::compensated("the Compensate", &undo, CompensationEffect::Undone, false)?;
    let listed = expect::records(t, &call, &[(ACT, APPLIED), (COMPENSATE, UNDONE)]).await?;
    let listed: Vec<_> = listed
        .into_iter()
        .filter(|o| t.barrier_kind(o).is_some())
        .collect();
    let mut times = Vec::with_capacity(listed.len());
    for operation in &listed {
        let Some(at) = operation.recorded_at else {
            return Err(format!(
                "the {} record has no recorded_at",
                expect::quoted(&operation.kind)
            ));
        };
        times.push((
            (at.seconds, at.nanos),
            t.barrier_kind(operation).unwrap_or_default(),
        ));
    }
    if times.windows(2).any(|w| w[0].0 > w[1].0) {
        return Err(format!(
            "records listed {} are not oldest first",
            expect::listed(&listed)
        ));
    }
    let at = |kind: &str| times.iter().find(|(_, k)| *k == kind).map(|(at, _)| *at);
    if at(ACT) > at(COMPENSATE) {
        return Err(
            "the act record's recorded_at is later than the compensate record's, made after it"
                .into(),
        );
    }
    for (what, request_id) in [("an empty", String::new()), ("a 129-byte", "r".repeat(129))] {
        let reply = t.list_once(&request_id, Auth::Token).await;
        expect::failed_with(
            &format!("ListOperations of {what} request id"),
            &reply,
            Code::InvalidArgument,
        )?;
    }
    Ok(())
}

/// With a service token configured, Act and Compensate without it or with
/// a wrong one are UNAUTHENTICATED and record nothing; ListOperations
/// needs it too; with it, the same call applies.
pub async fn token_required(t: &Target) -> Check {
    let call = t.fresh_call(&t.settings().order);
    for auth in [Auth::Missing, Auth::Wrong] {
        let how = match auth {
            Auth::Missing => "without a token",
            _ => "with a wrong token",
        };
        let act = t.act_once(&call, auth).await;
        expect::failed_with(&format!("Act {how}"), &act, Code::Unauthenticated)?;
        let undo = t.compensate_once(&call, auth).await;
        expect::failed_with(&format!("Compensate {how}"), &undo, Code::Unauthenticated)?;
        let list = t.list_once(&call.request_id, auth).await;
        expect::failed_with(
            &format!("ListOperations {how}"),
            &list,
            Code::Unauthenticated,
        )?;
    }
    expect::records(t, &call, &[]).await?;
    let reply = t.act(&call).await;
    expect::applied("the same Act with the token", &reply, false)?;
    expect::records(t, &call, &[(ACT, APPLIED)]).await?;
    Ok(())
}
