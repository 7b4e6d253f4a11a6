//! What both participants answer, independent of storage and wire: an
//! action's reply, a business refusal, and the errors a participant call can
//! end with — each mapped to one gRPC status in one place, carrying a
//! `google.rpc.ErrorInfo` with a stable reason (`service_kit::errors`).
//!
//! A business refusal's reason is the participant's reason for its kind
//! ([`crate::RefusalReasons`]: `INSUFFICIENT_FUNDS` in `payment.v1`, …),
//! so a replayed refusal gets the same details as the first answer. The
//! failures the kit itself decides have their reasons in [`DOMAIN`]
//! (`participant.v1`):
//!
//! | error | code | reason |
//! |---|---|---|
//! | [`ParticipantError::ParameterMismatch`] | ALREADY_EXISTS | `REQUEST_ID_REUSED` (`request_id`, `kind`, `field`) |
//! | [`ParticipantError::AlreadyCompensated`] | FAILED_PRECONDITION | `ALREADY_COMPENSATED` |
//! | [`ParticipantError::NotFound`] | NOT_FOUND | `NOT_FOUND` |
//! | [`ParticipantError::OutOfRange`] | OUT_OF_RANGE | `VALUE_OUT_OF_RANGE` |
//! | [`ParticipantError::Corrupt`] | INTERNAL | `STORED_DATA_CORRUPT` |
//! | [`ParticipantError::Store`] | UNAVAILABLE | `STORE_UNAVAILABLE` |
//! | an injected refusal ([`crate::faults`]) | FAILED_PRECONDITION | `INJECTED_REFUSAL` |
//! | an injected transient error / lost reply | UNAVAILABLE | `INJECTED_TRANSIENT_ERROR` / `INJECTED_LOST_REPLY` |
//! | a refusal of a kit whose participant names no reasons | its code | `REFUSED` |

use crate::barrier::BarrierError;
use embedded_store::DbError;
use service_kit::errors::ErrorReason;
use tonic::{Code, Status};

/// The ErrorInfo domain of the failures the kit decides.
pub const DOMAIN: &str = "participant.v1";

/// Reason of a call whose request id was used before with other parameters.
pub const REQUEST_ID_REUSED: &str = "REQUEST_ID_REUSED";
/// Reason of an action refused because its compensation came first.
pub const ALREADY_COMPENSATED: &str = "ALREADY_COMPENSATED";
/// Reason of a refusal injected by the fault injector.
pub const INJECTED_REFUSAL: &str = "INJECTED_REFUSAL";

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
    /// The stable reason the caller's ErrorInfo carries when it is not the
    /// participant's reason for this kind of refusal (`None`: that one,
    /// [`crate::RefusalReasons`]). Not recorded.
    pub info: Option<ErrorReason>,
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
            info: None,
        }
    }

    /// The refusal, its ErrorInfo saying `info`.
    pub fn with_info(mut self, info: ErrorReason) -> Self {
        self.info = Some(info);
        self
    }

    /// The refusal the fault injector decides (`INJECTED_REFUSAL`).
    pub fn injected() -> Self {
        Refusal::new(RefusalReason::Insufficient, crate::faults::REFUSAL_MESSAGE)
            .with_info(ErrorReason::new(DOMAIN, INJECTED_REFUSAL))
    }

    /// Whether this is the fault injector's refusal.
    pub fn is_injected(&self) -> bool {
        self.reason == RefusalReason::Insufficient && self.message == crate::faults::REFUSAL_MESSAGE
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
    /// The injected refusal gets its reason back; any other refusal gets its
    /// participant's reason for its kind when it is answered.
    pub fn decode(detail: &str) -> Self {
        let (code, message) = detail.split_once(':').unwrap_or(("", detail));
        let reason = match code {
            "not_found" => RefusalReason::NotFound,
            "overflow" => RefusalReason::Overflow,
            _ => RefusalReason::Insufficient,
        };
        let refusal = Refusal::new(reason, message);
        if refusal.is_injected() {
            return Refusal::injected();
        }
        refusal
    }

    /// The status code of this kind of refusal.
    pub fn code(&self) -> Code {
        match self.reason {
            RefusalReason::NotFound => Code::NotFound,
            RefusalReason::Insufficient => Code::FailedPrecondition,
            RefusalReason::Overflow => Code::OutOfRange,
        }
    }
}

impl From<Refusal> for Status {
    fn from(r: Refusal) -> Status {
        let info = r
            .info
            .clone()
            .unwrap_or_else(|| ErrorReason::new(DOMAIN, "REFUSED"));
        info.status(r.code(), r.message)
    }
}

/// An injected transient failure (UNAVAILABLE, `reason` in [`DOMAIN`]).
pub fn injected_unavailable(reason: &'static str, message: &str) -> Status {
    ErrorReason::new(DOMAIN, reason).status(Code::Unavailable, message)
}

/// A request id reused with other parameters: what the barrier found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Mismatch {
    /// What the caller is told (names the differing field).
    pub message: String,
    /// The reused key.
    pub request_id: String,
    /// The operation kind whose record differs.
    pub kind: String,
    /// The first field that differs, when the record names its fields.
    pub field: Option<String>,
}

impl std::fmt::Display for Mismatch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.message)
    }
}

/// How a participant call failed (other than a business refusal, which is a
/// successful, recorded answer).
#[derive(Debug, Clone, thiserror::Error)]
pub enum ParticipantError {
    /// The request id was reused with different parameters → ALREADY_EXISTS.
    #[error("{0}")]
    ParameterMismatch(Mismatch),
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
    /// A field of the call cannot be used by this participant (checked
    /// where the call is mapped onto its rules) → INVALID_ARGUMENT with a
    /// `google.rpc.BadRequest` naming it; nothing is recorded.
    #[error("{field}: {problem}")]
    InvalidArgument {
        /// The field as the request spells it (`order.total_cents`).
        field: String,
        /// What is wrong with it.
        problem: String,
    },
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

impl ParticipantError {
    /// The status code and ErrorInfo reason of this failure.
    pub fn code_and_reason(&self) -> (Code, ErrorReason) {
        let reason = |name| ErrorReason::new(DOMAIN, name);
        match self {
            ParticipantError::ParameterMismatch(m) => {
                let mut info = reason(REQUEST_ID_REUSED)
                    .with("request_id", &m.request_id)
                    .with("kind", &m.kind);
                if let Some(field) = &m.field {
                    info = info.with("field", field);
                }
                (Code::AlreadyExists, info)
            }
            ParticipantError::AlreadyCompensated(_) => {
                (Code::FailedPrecondition, reason(ALREADY_COMPENSATED))
            }
            ParticipantError::NotFound(_) => (Code::NotFound, reason("NOT_FOUND")),
            ParticipantError::OutOfRange(_) => (Code::OutOfRange, reason("VALUE_OUT_OF_RANGE")),
            ParticipantError::Corrupt(_) => (Code::Internal, reason("STORED_DATA_CORRUPT")),
            ParticipantError::Store(_) => (Code::Unavailable, reason("STORE_UNAVAILABLE")),
            ParticipantError::InvalidArgument { .. } => {
                (Code::InvalidArgument, reason("INVALID_ARGUMENT"))
            }
        }
    }
}

impl From<ParticipantError> for Status {
    fn from(e: ParticipantError) -> Status {
        if let ParticipantError::InvalidArgument { field, problem } = &e {
            return service_kit::validate::invalid(field, problem);
        }
        let (code, reason) = e.code_and_reason();
        reason.status(code, e.to_string())
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

    fn mismatch(field: Option<&str>) -> ParticipantError {
        ParticipantError::ParameterMismatch(Mismatch {
            message: "x".into(),
            request_id: "r1".into(),
            kind: "charge".into(),
            field: field.map(str::to_owned),
        })
    }

    /// The table of reasons: each error, its code, and the ErrorInfo a
    /// client decodes from the status.
    #[test]
    fn each_error_maps_to_its_status_code_and_reason() {
        use tonic::Code;
        use tonic_types::StatusExt;
        let cases = [
            (
                mismatch(Some("amount_cents")),
                Code::AlreadyExists,
                REQUEST_ID_REUSED,
            ),
            (
                ParticipantError::AlreadyCompensated("x".into()),
                Code::FailedPrecondition,
                ALREADY_COMPENSATED,
            ),
            (
                ParticipantError::NotFound("x".into()),
                Code::NotFound,
                "NOT_FOUND",
            ),
            (
                ParticipantError::OutOfRange("x".into()),
                Code::OutOfRange,
                "VALUE_OUT_OF_RANGE",
            ),
            (
                ParticipantError::Corrupt("x".into()),
                Code::Internal,
                "STORED_DATA_CORRUPT",
            ),
            (
                ParticipantError::Store("x".into()),
                Code::Unavailable,
                "STORE_UNAVAILABLE",
            ),
        ];
        for (error, code, reason) in cases {
            let status = Status::from(error);
            assert_eq!(status.code(), code);
            let info = status.get_details_error_info().expect("ErrorInfo");
            assert_eq!(
                (info.domain.as_str(), info.reason.as_str()),
                (DOMAIN, reason)
            );
        }
        let reused = Status::from(mismatch(Some("amount_cents")))
            .get_details_error_info()
            .unwrap();
        assert_eq!(reused.metadata["request_id"], "r1");
        assert_eq!(reused.metadata["kind"], "charge");
        assert_eq!(reused.metadata["field"], "amount_cents");
        let unnamed = Status::from(mismatch(None))
            .get_details_error_info()
            .unwrap();
        assert!(!unnamed.metadata.contains_key("field"));
    }

    #[test]
    fn a_barrier_mismatch_names_the_differing_field() {
        let e: ParticipantError = BarrierError::<std::convert::Infallible>::ParameterMismatch {
            request_id: "r1".into(),
            kind: "deduct".into(),
            difference: "lines[0].quantity: 3 recorded, 5 received".into(),
        }
        .into();
        let ParticipantError::ParameterMismatch(m) = &e else {
            panic!("{e:?}")
        };
        assert_eq!(m.field.as_deref(), Some("lines[0].quantity"));
        assert!(
            m.message
                .contains("lines[0].quantity: 3 recorded, 5 received")
        );
        assert_eq!(e.to_string(), m.message);
    }

    #[test]
    fn a_refusal_carries_its_own_reason_or_refused() {
        use tonic_types::StatusExt;
        let plain = Status::from(Refusal::new(RefusalReason::NotFound, "gone"));
        assert_eq!(plain.code(), tonic::Code::NotFound);
        assert_eq!(plain.message(), "gone");
        assert_eq!(plain.get_details_error_info().unwrap().reason, "REFUSED");
        let told = Refusal::new(RefusalReason::Insufficient, "short")
            .with_info(ErrorReason::new("payment.v1", "INSUFFICIENT_FUNDS").with("needed", 5));
        let status = Status::from(told);
        assert_eq!(status.code(), tonic::Code::FailedPrecondition);
        let info = status.get_details_error_info().unwrap();
        assert_eq!(
            (info.domain.as_str(), info.reason.as_str()),
            ("payment.v1", "INSUFFICIENT_FUNDS")
        );
        assert_eq!(info.metadata["needed"], "5");
        // The injected refusal is recorded like any, and replayed with its reason.
        let injected = Refusal::injected();
        assert_eq!(Refusal::decode(&injected.encode()), injected);
        let info = Status::from(injected).get_details_error_info().unwrap();
        assert_eq!(
            (info.domain.as_str(), info.reason.as_str()),
            (DOMAIN, INJECTED_REFUSAL)
        );
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
            BarrierError::ParameterMismatch {
                request_id,
                kind,
                difference,
            } => Failure::Refused(ParticipantError::ParameterMismatch(Mismatch {
                message,
                field: service_kit::errors::differing_field(&difference).map(str::to_owned),
                request_id,
                kind,
            })),
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
