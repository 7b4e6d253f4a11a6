//! The `google.rpc.ErrorInfo` reason a participant's business refusal
//! carries, by kind of refusal: what a client reads instead of the
//! message to tell a short balance from an unknown customer.
//!
//! The reason is decided by the participant's adapter ([`RefusalReasons`],
//! given to its [`crate::Kit`]), not by its rules, because it is a fact of
//! the kind of refusal the rules already record: a refusal replayed from
//! the operationHistory gets the same reason as the first answer, with no
//! reason stored beside it (older records read the same). A refusal that
//! carries its own reason ([`crate::Refusal::with_info`]: the fault
//! injector's `INJECTED_REFUSAL`) keeps it.

use crate::outcome::{DOMAIN, Refusal, RefusalReason};
use service_kit::errors::ErrorReason;
use tonic::Status;

/// A participant's reasons for each kind of business refusal, within its
/// domain (its proto package).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RefusalReasons {
    /// The proto package answering (`payment.v1`).
    pub domain: &'static str,
    /// [`RefusalReason::NotFound`] (`ACCOUNT_NOT_FOUND`).
    pub not_found: &'static str,
    /// [`RefusalReason::Insufficient`] (`INSUFFICIENT_FUNDS`).
    pub insufficient: &'static str,
    /// [`RefusalReason::Overflow`] (`BALANCE_OVERFLOW`).
    pub overflow: &'static str,
}

/// Reason of a refusal whose participant names no reasons of its own.
pub const REFUSED: &str = "REFUSED";

impl RefusalReasons {
    /// `REFUSED` in [`DOMAIN`] for every kind: a kit whose adapter names
    /// none (tests, tools).
    pub const GENERIC: RefusalReasons = RefusalReasons {
        domain: DOMAIN,
        not_found: REFUSED,
        insufficient: REFUSED,
        overflow: REFUSED,
    };

    /// The ErrorInfo of `refusal`: its own when it has one, else this
    /// participant's reason for its kind.
    pub fn of(&self, refusal: &Refusal) -> ErrorReason {
        if let Some(info) = &refusal.info {
            return info.clone();
        }
        let reason = match refusal.reason {
            RefusalReason::NotFound => self.not_found,
            RefusalReason::Insufficient => self.insufficient,
            RefusalReason::Overflow => self.overflow,
        };
        ErrorReason::new(self.domain, reason)
    }

    /// `refusal` as the status a client gets: its code, its message, and
    /// its ErrorInfo ([`RefusalReasons::of`]).
    pub fn status(&self, refusal: Refusal) -> Status {
        self.of(&refusal).status(refusal.code(), refusal.message)
    }
}

impl Default for RefusalReasons {
    fn default() -> Self {
        RefusalReasons::GENERIC
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tonic::Code;
    use tonic_types::StatusExt;

    const PAYMENT: RefusalReasons = RefusalReasons {
        domain: "payment.v1",
        not_found: "ACCOUNT_NOT_FOUND",
        insufficient: "INSUFFICIENT_FUNDS",
        overflow: "BALANCE_OVERFLOW",
    };

    #[test]
    fn each_kind_of_refusal_gets_its_participants_reason_and_keeps_its_code_and_text() {
        for (kind, code, reason) in [
            (RefusalReason::NotFound, Code::NotFound, "ACCOUNT_NOT_FOUND"),
            (
                RefusalReason::Insufficient,
                Code::FailedPrecondition,
                "INSUFFICIENT_FUNDS",
            ),
            (
                RefusalReason::Overflow,
                Code::OutOfRange,
                "BALANCE_OVERFLOW",
            ),
        ] {
            let status = PAYMENT.status(Refusal::new(kind, "for people"));
            assert_eq!(status.code(), code);
            assert_eq!(status.message(), "for people");
            let info = status.get_details_error_info().expect("ErrorInfo");
            assert_eq!(
                (info.domain.as_str(), info.reason.as_str()),
                ("payment.v1", reason)
            );
            // A replayed refusal (read back from its record) says the same.
            let replayed = Refusal::decode(&Refusal::new(kind, "for people").encode());
            assert_eq!(PAYMENT.of(&replayed).reason, reason);
        }
        let generic = RefusalReasons::default().of(&Refusal::new(RefusalReason::NotFound, "x"));
        assert_eq!((generic.domain, generic.reason), (DOMAIN, REFUSED));
        // The fault injector's refusal keeps its own reason.
        let injected = PAYMENT.of(&Refusal::injected());
        assert_eq!(
            (injected.domain, injected.reason),
            (DOMAIN, crate::outcome::INJECTED_REFUSAL)
        );
    }
}
