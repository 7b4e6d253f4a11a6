//! Which participant failures are worth retrying — decided in one place,
//! at the gRPC edge: the executor only ever sees the resulting
//! [`StepOutcome`](crate::step::StepOutcome).
//!
//! A business refusal is an answer: retrying gets the same answer (the
//! participant recorded it), so the saga compensates at once. Anything else
//! leaves the outcome unknown (the call may or may not have been applied), so
//! the same request id is retried: the participant's barrier turns a repeat
//! into a replay.

use tonic::{Code, Status};

/// How the executor treats a failed participant call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FailureClass {
    /// The participant refused for a business reason: compensate, no retry.
    Refused,
    /// Unknown outcome (unreachable, timed out, overloaded, crashed): retry.
    Transient,
}

/// How tonic words a message over the receiver's limit: a request over a
/// participant's (RESOURCE_EXHAUSTED from its server), or a reply over the
/// client's 4 MiB (an OUT_OF_RANGE made here, after the participant
/// answered, so the call may well have been applied).
const OVERSIZE: &str = "decoded message length too large";

/// Whether `status` says a message was over the receiver's size limit.
pub fn over_size_limit(status: &Status) -> bool {
    status.message().contains(OVERSIZE)
}

/// Classifies a gRPC status returned by a participant.
pub fn classify(status: &Status) -> FailureClass {
    if status.code() == Code::OutOfRange && over_size_limit(status) {
        // Not the participant's refusal: its reply could not be read. A
        // refused step is not compensated, so this must be retried.
        return FailureClass::Transient;
    }
    match status.code() {
        Code::FailedPrecondition
        | Code::NotFound
        | Code::InvalidArgument
        | Code::AlreadyExists
        | Code::OutOfRange => FailureClass::Refused,
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
        | Code::Unauthenticated => FailureClass::Transient,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_code_has_the_intended_class() {
        let table = [
            (Code::FailedPrecondition, FailureClass::Refused),
            (Code::NotFound, FailureClass::Refused),
            (Code::InvalidArgument, FailureClass::Refused),
            (Code::AlreadyExists, FailureClass::Refused),
            (Code::OutOfRange, FailureClass::Refused),
            (Code::Unavailable, FailureClass::Transient),
            (Code::DeadlineExceeded, FailureClass::Transient),
            (Code::ResourceExhausted, FailureClass::Transient),
            (Code::Aborted, FailureClass::Transient),
            (Code::Cancelled, FailureClass::Transient),
            (Code::Unknown, FailureClass::Transient),
            (Code::Internal, FailureClass::Transient),
            (Code::Unimplemented, FailureClass::Transient),
            (Code::DataLoss, FailureClass::Transient),
            (Code::PermissionDenied, FailureClass::Transient),
            (Code::Unauthenticated, FailureClass::Transient),
        ];
        for (code, class) in table {
            assert_eq!(classify(&Status::new(code, "x")), class, "{code:?}");
        }
    }

    #[test]
    fn a_reply_too_large_to_read_is_no_refusal() {
        // tonic's own status when a reply exceeds the client's limit.
        let status = Status::out_of_range(
            "Error, decoded message length too large: found 4194400 bytes, the limit is: 4194304 bytes",
        );
        assert_eq!(classify(&status), FailureClass::Transient);
    }
}
