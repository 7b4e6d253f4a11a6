//! What both participants answer, independent of storage and wire: an
//! action's reply, a business refusal, and the errors a participant call can
//! end with — each mapped to one gRPC status in one place.

use crate::barrier::BarrierError;
use embedded_store::DbError;
use tonic::Status;

/// The reply to an action (charge, deduct, deposit, add stock).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ActionReply<T> {
    /// Applied (now or by an earlier identical call).
    Applied {
        /// What the action produced (a balance, an availability).
        value: T,
        /// True when replayed from the operationHistory.
        replayed: bool,
    },
    /// A business refusal. It is recorded, so `replayed` retries get it too.
    Refused {
        /// Why.
        refusal: Refusal,
        /// True when replayed from the operationHistory.
        replayed: bool,
    },
}

/// Whether a participant applies an action by its business rules or refuses
/// it for a reason decided outside them (an injected fault, a fraud check).
/// Either way the call goes through the barrier: a refusal of a new request
/// id is recorded like any other, and a request id seen before gets its
/// recorded outcome replayed (see [`crate::record`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Admission {
    /// Apply the business rules.
    Apply,
    /// Apply them, but read before writing: set by the transaction runner
    /// after a first attempt found, part-way through its effect, that the
    /// rules refuse the call ([`Failure::RollBack`]) — the second attempt
    /// finds out why without writing, and records it.
    Verify,
    /// Refuse with this reason instead.
    Refuse(Refusal),
}

/// Why a participant refused an action for a business reason.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refusal {
    /// Which kind of refusal (decides the status code).
    pub reason: RefusalReason,
    /// What the caller is told.
    pub message: String,
}

/// The business reasons a participant refuses; each maps to one status code.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RefusalReason {
    /// Unknown account or product → NOT_FOUND.
    NotFound,
    /// Not enough money or stock → FAILED_PRECONDITION.
    Insufficient,
    /// The result would not fit in an int64 → OUT_OF_RANGE.
    Overflow,
}

impl Refusal {
    /// A refusal for `reason`, saying `message`.
    pub fn new(reason: RefusalReason, message: impl Into<String>) -> Self {
        Refusal {
            reason,
            message: message.into(),
        }
    }

    /// The form stored in an operation record's `detail`.
    pub fn encode(&self) -> String {
        let code = match self.reason {
            RefusalReason::NotFound => "not_found",
            RefusalReason::Insufficient => "insufficient",
            RefusalReason::Overflow => "overflow",
        };
        format!("{code}:{}", self.message)
    }

    /// Reads back [`Refusal::encode`]; unknown codes read as FAILED_PRECONDITION.
    pub fn decode(detail: &str) -> Self {
        let (code, message) = detail.split_once(':').unwrap_or(("", detail));
        let reason = match code {
            "not_found" => RefusalReason::NotFound,
            "overflow" => RefusalReason::Overflow,
            _ => RefusalReason::Insufficient,
        };
        Refusal::new(reason, message)
    }
}

impl From<Refusal> for Status {
    fn from(r: Refusal) -> Status {
        match r.reason {
            RefusalReason::NotFound => Status::not_found(r.message),
            RefusalReason::Insufficient => Status::failed_precondition(r.message),
            RefusalReason::Overflow => Status::out_of_range(r.message),
        }
    }
}

/// How a participant call failed (other than a business refusal, which is a
/// successful, recorded answer).
#[derive(Debug, Clone, thiserror::Error)]
pub enum ParticipantError {
    /// The request id was reused with different parameters → ALREADY_EXISTS.
    #[error("{0}")]
    ParameterMismatch(String),
    /// The action arrived after its compensation → FAILED_PRECONDITION.
    #[error("{0}")]
    AlreadyCompensated(String),
    /// The thing asked about does not exist (reads) → NOT_FOUND.
    #[error("{0}")]
    NotFound(String),
    /// A compensation's effect cannot be applied (e.g. overflow) → OUT_OF_RANGE.
    #[error("{0}")]
    OutOfRange(String),
    /// Stored data contradicts the protocol → INTERNAL.
    #[error("{0}")]
    Corrupt(String),
    /// The store failed; safe to retry → UNAVAILABLE.
    #[error("store unavailable: {0}")]
    Store(String),
}

impl<E: std::fmt::Display> From<BarrierError<E>> for ParticipantError {
    fn from(e: BarrierError<E>) -> Self {
        Failure::from(e).into_participant_error()
    }
}

/// A SQLite failure through [`ParticipantError::classified`].
impl From<DbError> for ParticipantError {
    fn from(e: DbError) -> Self {
        ParticipantError::classified(e.class(), e.to_string())
    }
}

impl From<rusqlite::Error> for ParticipantError {
    fn from(e: rusqlite::Error) -> Self {
        ParticipantError::classified(embedded_store::classify(&e), e.to_string())
    }
}

impl ParticipantError {
    /// A store failure of `class`, on either backend: stored data that
    /// cannot be read as written (a corrupt file, a value of another type)
    /// is INTERNAL, logged at ERROR for a person, like the barrier's own
    /// finding of an impossible record; anything else is UNAVAILABLE, for
    /// the caller to retry.
    pub(crate) fn classified(class: embedded_store::ErrorClass, message: String) -> Self {
        if class == embedded_store::ErrorClass::Corrupt {
            tracing::error!(error = %message, "stored data needs a person");
            return ParticipantError::Corrupt(message);
        }
        ParticipantError::Store(message)
    }
}

impl From<ParticipantError> for Status {
    fn from(e: ParticipantError) -> Status {
        let message = e.to_string();
        match e {
            ParticipantError::ParameterMismatch(_) => Status::already_exists(message),
            ParticipantError::AlreadyCompensated(_) => Status::failed_precondition(message),
            ParticipantError::NotFound(_) => Status::not_found(message),
            ParticipantError::OutOfRange(_) => Status::out_of_range(message),
            ParticipantError::Corrupt(_) => Status::internal(message),
            ParticipantError::Store(_) => Status::unavailable(message),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn refusals_round_trip_through_the_record() {
        for reason in [
            RefusalReason::NotFound,
            RefusalReason::Insufficient,
            RefusalReason::Overflow,
        ] {
            let r = Refusal::new(reason, "customer \"bob\": balance 10 < 20: see");
            assert_eq!(Refusal::decode(&r.encode()), r);
        }
    }

    /// Stored data that cannot be read is INTERNAL for a person; a busy or
    /// refused statement stays UNAVAILABLE, for the caller to retry.
    #[test]
    fn unreadable_stored_data_is_internal_and_the_rest_of_sqlite_unavailable() {
        use tonic::Code;
        let unreadable = rusqlite::Error::FromSqlConversionFailure(
            0,
            rusqlite::types::Type::Text,
            "an unknown status".into(),
        );
        assert_eq!(
            Status::from(ParticipantError::from(unreadable)).code(),
            Code::Internal
        );
        let failure = |code| {
            ParticipantError::from(rusqlite::Error::SqliteFailure(
                rusqlite::ffi::Error::new(code),
                None,
            ))
        };
        assert_eq!(
            Status::from(failure(rusqlite::ffi::SQLITE_CORRUPT)).code(),
            Code::Internal
        );
        assert_eq!(
            Status::from(failure(rusqlite::ffi::SQLITE_BUSY)).code(),
            Code::Unavailable
        );
        assert_eq!(
            Status::from(ParticipantError::from(DbError::WriterGone)).code(),
            Code::Unavailable
        );
    }

    #[test]
    fn each_error_maps_to_its_status_code() {
        use tonic::Code;
        let cases = [
            (
                ParticipantError::ParameterMismatch("x".into()),
                Code::AlreadyExists,
            ),
            (
                ParticipantError::AlreadyCompensated("x".into()),
                Code::FailedPrecondition,
            ),
            (ParticipantError::NotFound("x".into()), Code::NotFound),
            (ParticipantError::OutOfRange("x".into()), Code::OutOfRange),
            (ParticipantError::Corrupt("x".into()), Code::Internal),
            (ParticipantError::Store("x".into()), Code::Unavailable),
        ];
        for (error, code) in cases {
            assert_eq!(Status::from(error).code(), code);
        }
    }
}

/// How a participant operation inside a store transaction ended other than
/// with its reply: the store failed (kept typed, so a MongoDB transaction
/// can still see the driver's retry labels), the call is refused, or the
/// transaction runner must roll back and go another way.
#[derive(Debug)]
pub enum Failure<E> {
    /// The store failed (the transaction is retried or rolled back).
    Store(E),
    /// The call is refused; the transaction must not commit.
    Refused(ParticipantError),
    /// The operation's key was taken by an earlier call: roll back what
    /// this call did and answer from the record (the rule's replay).
    Taken,
    /// The rules refuse the call, found after part of the effect was
    /// applied (a deduction's conditional updates did not all match): roll
    /// back and run the rule again with [`Admission::Verify`], which reads
    /// before it writes and records the refusal.
    RollBack,
}

impl<E> From<BarrierError<E>> for Failure<E> {
    fn from(e: BarrierError<E>) -> Self {
        let message = e.to_string();
        match e {
            BarrierError::Store(e) => Failure::Store(e),
            BarrierError::ParameterMismatch { .. } => {
                Failure::Refused(ParticipantError::ParameterMismatch(message))
            }
            BarrierError::AlreadyCompensated { .. } => {
                Failure::Refused(ParticipantError::AlreadyCompensated(message))
            }
            BarrierError::Corrupt { .. } => Failure::Refused(ParticipantError::Corrupt(message)),
        }
    }
}

impl<E: std::fmt::Display> Failure<E> {
    /// Collapses into a [`ParticipantError`] (store errors become
    /// UNAVAILABLE). `Taken` and `RollBack` are for the transaction runners;
    /// one that escapes them is reported as an internal error.
    pub fn into_participant_error(self) -> ParticipantError {
        match self {
            Failure::Store(e) => ParticipantError::Store(e.to_string()),
            Failure::Refused(e) => e,
            Failure::Taken => ParticipantError::Corrupt(
                "the operation's key was taken, and nothing answered from its record".into(),
            ),
            Failure::RollBack => ParticipantError::Corrupt(
                "the rules refused a call they had already verified".into(),
            ),
        }
    }
}
