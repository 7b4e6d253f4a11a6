//! What a participant's answer means, read at the gRPC edge so that no
//! wire type reaches the executor: every reply and status of
//! `participant.v1.SagaStepService` (docs/participant-protocol.md) becomes
//! a domain [`StepOutcome`].
//!
//! The contract says which answers mean what by field and status code,
//! never by text, and this is where it is read: `OUTCOME_APPLIED` and a
//! confirmed compensation are done, `OUTCOME_REFUSED` (or a refusal code)
//! compensates, and everything else — a status that may pass, an
//! unspecified or unknown outcome, a reply that cannot be read or is over
//! [`MAX_REPLY_BYTES`] — leaves the outcome unknown, so the call is
//! retried within its budget: the participant's barrier turns a repeat into
//! a replay. A participant written by someone else can answer anything;
//! none of it panics or grows memory without bound.

use crate::saga::Refusal;
use crate::step::StepOutcome;
use saga_proto::participant::v1 as pb;
use tonic::{Code, Status};

/// Largest reply read from a participant (one call's, or a batch's per
/// call); a larger one is an unknown outcome (retried), not decoded.
pub const MAX_REPLY_BYTES: usize = 64 * 1024;

/// How tonic words a message over the receiver's limit: a request over a
/// participant's (RESOURCE_EXHAUSTED from its server), or a reply over the
/// client's (an OUT_OF_RANGE made here, after the participant answered, so
/// the call may well have been applied).
const OVERSIZE: &str = "decoded message length too large";

/// Whether `status` says a message was over the receiver's size limit.
pub fn over_size_limit(status: &Status) -> bool {
    status.message().contains(OVERSIZE)
}

/// Statuses that say an Act can never succeed: a refusal, as the contract
/// lists them. OUT_OF_RANGE is not among them: it is also what the gRPC
/// client itself reports for a reply over its size limit, an outcome it
/// could not read.
pub fn is_refusal(code: Code) -> bool {
    matches!(
        code,
        Code::InvalidArgument | Code::FailedPrecondition | Code::AlreadyExists | Code::NotFound
    )
}

/// What an Act's answer means (see the module doc).
pub fn act_outcome(reply: Result<pb::ActReply, Status>) -> StepOutcome {
    use pb::act_reply::Outcome;
    match reply {
        Ok(reply) => match Outcome::try_from(reply.outcome) {
            Ok(Outcome::Applied) => StepOutcome::Done,
            Ok(Outcome::Refused) => StepOutcome::Refused(refusal(&reply)),
            Ok(Outcome::Unspecified) => {
                StepOutcome::Transient("the participant answered no outcome".to_owned())
            }
            Err(_) => StepOutcome::Transient(format!(
                "the participant answered an unknown outcome ({})",
                reply.outcome
            )),
        },
        Err(status) if is_refusal(status.code()) => {
            StepOutcome::Refused(refused_by_status(&status))
        }
        Err(status) => StepOutcome::Transient(described(&status)),
    }
}

/// What a Compensate's answer means: a confirmation with any known effect,
/// else not confirmed (retried).
pub fn compensation_outcome(reply: Result<pb::CompensateReply, Status>) -> StepOutcome {
    use pb::CompensationEffect as Effect;
    match reply {
        Ok(reply) => match Effect::try_from(reply.effect) {
            Ok(Effect::Undone | Effect::NullCompensation | Effect::NothingToUndo) => {
                StepOutcome::Done
            }
            Ok(Effect::Unspecified) => {
                StepOutcome::Transient("the participant answered no compensation effect".to_owned())
            }
            Err(_) => StepOutcome::Transient(format!(
                "the participant answered an unknown compensation effect ({})",
                reply.effect
            )),
        },
        Err(status) => StepOutcome::Transient(described(&status)),
    }
}

/// A refusal's reason for the saga: its code and detail (the engine keeps
/// at most 1 KB of it).
fn refusal(reply: &pb::ActReply) -> Refusal {
    let message = match (reply.reason_code.is_empty(), reply.detail.is_empty()) {
        (true, true) => "refused (no reason given)".to_owned(),
        (false, true) => reply.reason_code.clone(),
        (true, false) => reply.detail.clone(),
        (false, false) => format!("{}: {}", reply.reason_code, reply.detail),
    };
    Refusal::new(Some(reply.reason_code.clone()), message)
}

/// A refusal the participant answered with a status: its ErrorInfo reason
/// is the code, when it sent one.
fn refused_by_status(status: &Status) -> Refusal {
    let code = service_kit::errors::reason_of(status).map(|(_, reason)| reason);
    Refusal::new(code, described(status))
}

fn described(status: &Status) -> String {
    format!("{:?}: {}", status.code(), status.message())
}

#[cfg(test)]
mod tests {
    use super::*;
    use pb::act_reply::Outcome;

    fn act(outcome: i32, reason_code: &str, detail: &str) -> Result<pb::ActReply, Status> {
        Ok(pb::ActReply {
            outcome,
            reason_code: reason_code.into(),
            detail: detail.into(),
            replayed: false,
        })
    }

    #[test]
    fn every_act_answer_is_read_by_field_or_code_never_by_text() {
        let cases: Vec<(Result<pb::ActReply, Status>, StepOutcome)> = vec![
            (
                act(Outcome::Applied as i32, "", "ship-1"),
                StepOutcome::Done,
            ),
            (
                act(Outcome::Refused as i32, "UNSHIPPABLE", "sku-x"),
                StepOutcome::Refused(Refusal::new(
                    Some("UNSHIPPABLE".into()),
                    "UNSHIPPABLE: sku-x",
                )),
            ),
            (
                act(Outcome::Refused as i32, "", ""),
                StepOutcome::Refused("refused (no reason given)".into()),
            ),
            (
                act(Outcome::Unspecified as i32, "", ""),
                StepOutcome::Transient("the participant answered no outcome".into()),
            ),
            (
                act(7, "", ""),
                StepOutcome::Transient("the participant answered an unknown outcome (7)".into()),
            ),
            (
                Err(Status::failed_precondition("insufficient")),
                StepOutcome::Refused("FailedPrecondition: insufficient".into()),
            ),
            (
                Err(Status::already_exists("reused")),
                StepOutcome::Refused("AlreadyExists: reused".into()),
            ),
            (
                Err(
                    service_kit::errors::ErrorReason::new("shipping.v1", "UNSHIPPABLE")
                        .status(Code::FailedPrecondition, "sku-x cannot be shipped"),
                ),
                StepOutcome::Refused(Refusal::new(
                    Some("UNSHIPPABLE".into()),
                    "FailedPrecondition: sku-x cannot be shipped",
                )),
            ),
            (
                Err(Status::unavailable("down")),
                StepOutcome::Transient("Unavailable: down".into()),
            ),
            (
                Err(Status::out_of_range("decoded message length too large")),
                StepOutcome::Transient("OutOfRange: decoded message length too large".into()),
            ),
            (
                Err(Status::unauthenticated("token")),
                StepOutcome::Transient("Unauthenticated: token".into()),
            ),
        ];
        for (reply, expected) in cases {
            assert_eq!(act_outcome(reply.clone()), expected, "{reply:?}");
        }
    }

    #[test]
    fn a_compensation_is_confirmed_only_by_a_known_effect() {
        use pb::CompensationEffect as Effect;
        let reply = |effect: i32| {
            Ok(pb::CompensateReply {
                effect,
                detail: String::new(),
                replayed: true,
            })
        };
        for effect in [
            Effect::Undone,
            Effect::NullCompensation,
            Effect::NothingToUndo,
        ] {
            assert_eq!(
                compensation_outcome(reply(effect as i32)),
                StepOutcome::Done
            );
        }
        assert!(matches!(
            compensation_outcome(reply(Effect::Unspecified as i32)),
            StepOutcome::Transient(_)
        ));
        assert!(matches!(
            compensation_outcome(reply(42)),
            StepOutcome::Transient(_)
        ));
        // A refusal code does not confirm a compensation: it is retried.
        assert!(matches!(
            compensation_outcome(Err(Status::failed_precondition("no"))),
            StepOutcome::Transient(_)
        ));
    }
}
