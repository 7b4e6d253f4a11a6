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

/// Classifies a gRPC status returned by a participant.
pub fn classify(status: &Status) -> FailureClass {
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
}
