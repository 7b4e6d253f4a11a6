//! Which participant failures are worth retrying — decided in one place,
//! at the gRPC edge: the executor only ever sees the resulting
//! [`StepOutcome`].
//!
//! A business refusal is an answer: retrying gets the same answer (the
//! participant recorded it), so the saga compensates at once. Anything else
//! leaves the outcome unknown (the call may or may not have been applied), so
//! the same request id is retried: the participant's barrier turns a repeat
//! into a replay.

use crate::saga::Refusal;
use crate::step::StepOutcome;
use tonic::{Code, Status};

/// How tonic words a message over the receiver's limit: a request over a
/// participant's (RESOURCE_EXHAUSTED from its server), or a reply over the
/// client's 4 MiB (an OUT_OF_RANGE made here, after the participant
/// answered, so the call may well have been applied).
const OVERSIZE: &str = "decoded message length too large";

/// Whether `status` says a message was over the receiver's size limit.
pub fn over_size_limit(status: &Status) -> bool {
    status.message().contains(OVERSIZE)
}

/// The step outcome a participant's reply to a step call means: `Done`,
/// `Refused` for a business refusal ([`is_refusal`]), else `Transient`;
/// a failure's outcome carries its code and message.
pub fn step_outcome_of<T>(reply: Result<T, Status>) -> StepOutcome {
    match reply {
        Ok(_) => StepOutcome::Done,
        Err(status) => {
            let message = format!("{:?}: {}", status.code(), status.message());
            if is_refusal(&status) {
                let code = service_kit::errors::reason_of(&status).map(|(_, reason)| reason);
                StepOutcome::Refused(Refusal::new(code, message))
            } else {
                StepOutcome::Transient(message)
            }
        }
    }
}

/// Whether a participant's `status` is its refusal for a business reason
/// (compensate, no retry) rather than an unknown outcome (unreachable,
/// timed out, overloaded, crashed: retry).
pub fn is_refusal(status: &Status) -> bool {
    // A participant's own OUT_OF_RANGE carries its ErrorInfo reason; the
    // oversize status tonic makes up carries none.
    let decided_by_participant = service_kit::errors::reason_of(status).is_some();
    if status.code() == Code::OutOfRange && !decided_by_participant && over_size_limit(status) {
        // Not the participant's refusal: its reply could not be read. A
        // refused step is not compensated, so this must be retried.
        return false;
    }
    match status.code() {
        Code::FailedPrecondition
        | Code::NotFound
        | Code::InvalidArgument
        | Code::AlreadyExists
        | Code::OutOfRange => true,
        Code::Ok
        | Code::Unavailable
        | Code::DeadlineExceeded
        | Code::ResourceExhausted
        | Code::Aborted
        | Code::Cancelled
        | Code::Unknown
        | Code::Internal
        | Code::Unimplemented
        | Code::DataLoss
        | Code::PermissionDenied
        | Code::Unauthenticated => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The outcome of a reply failing with `status`, as `"refused"` or
    /// `"transient"`, checking the message it carries.
    fn outcome_of(status: Status) -> &'static str {
        let expected_message = format!("{:?}: {}", status.code(), status.message());
        match step_outcome_of::<()>(Err(status)) {
            StepOutcome::Refused(r) if r.message == expected_message => "refused",
            StepOutcome::Transient(m) if m == expected_message => "transient",
            other => panic!("{other:?} does not carry {expected_message:?}"),
        }
    }

    #[test]
    fn every_code_has_the_intended_outcome() {
        let table = [
            (Code::FailedPrecondition, "refused"),
            (Code::NotFound, "refused"),
            (Code::InvalidArgument, "refused"),
            (Code::AlreadyExists, "refused"),
            (Code::OutOfRange, "refused"),
            (Code::Unavailable, "transient"),
            (Code::DeadlineExceeded, "transient"),
            (Code::ResourceExhausted, "transient"),
            (Code::Aborted, "transient"),
            (Code::Cancelled, "transient"),
            (Code::Unknown, "transient"),
            (Code::Internal, "transient"),
            (Code::Unimplemented, "transient"),
            (Code::DataLoss, "transient"),
            (Code::PermissionDenied, "transient"),
            (Code::Unauthenticated, "transient"),
        ];
        for (code, outcome) in table {
            assert_eq!(outcome_of(Status::new(code, "x")), outcome, "{code:?}");
            assert_eq!(is_refusal(&Status::new(code, "x")), outcome == "refused");
        }
        assert_eq!(step_outcome_of(Ok(())), StepOutcome::Done);
    }

    #[test]
    fn a_reply_too_large_to_read_is_no_refusal() {
        // tonic's own status when a reply exceeds the client's limit.
        let status = Status::out_of_range(
            "Error, decoded message length too large: found 4194400 bytes, the limit is: 4194304 bytes",
        );
        assert!(!is_refusal(&status));
        assert_eq!(outcome_of(status), "transient");
        // A participant's OUT_OF_RANGE (with its reason) is its refusal,
        // whatever its text says.
        let refused = service_kit::errors::ErrorReason::new("payment.v1", "BALANCE_OVERFLOW")
            .status(
                Code::OutOfRange,
                "decoded message length too large, says a customer id",
            );
        assert!(is_refusal(&refused));
    }
}
