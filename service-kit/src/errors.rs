//! The gRPC rich error model every service answers with, built in one
//! place: a client in any language reads *why* a call failed from the
//! status details, never from the English message (which stays, for
//! people).
//!
//! - INVALID_ARGUMENT carries a `google.rpc.BadRequest` with one field
//!   violation per bad field ([`Violation`]; the field path as the message
//!   names it, e.g. `items[2].quantity`).
//! - Every refusal or conflict carries a `google.rpc.ErrorInfo`
//!   ([`ErrorReason`]): a stable `reason` (`INSUFFICIENT_FUNDS`,
//!   `REQUEST_ID_REUSED`, …) within a `domain` (the proto package that
//!   answers: `saga.v1`, `payment.v1`, `inventory.v1`, `participant.v1`;
//!   [`AUTH_DOMAIN`] for the token checks every service shares) and
//!   metadata where a client can act on it (a customer, an availability,
//!   the differing field).
//!
//! The reasons are listed next to the RPCs in the protos and in one table
//! in docs/operations.md ("Errors"). They are an API: never rename one.

use std::collections::BTreeMap;
use tonic::{Code, Status};
use tonic_types::{ErrorDetails, FieldViolation, StatusExt};

/// The domain of the reasons of refused tokens (UNAUTHENTICATED), the same
/// in every service.
pub const AUTH_DOMAIN: &str = "auth.saga";

/// A stable, machine-readable reason for a failure: what
/// `google.rpc.ErrorInfo` carries.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ErrorReason {
    /// The proto package (or [`AUTH_DOMAIN`]) the reason belongs to.
    pub domain: &'static str,
    /// UPPER_SNAKE_CASE, stable across releases.
    pub reason: &'static str,
    /// Facts a client can act on (lowerCamel or snake keys, string values).
    pub metadata: BTreeMap<String, String>,
}

impl ErrorReason {
    /// `reason` within `domain`, no metadata yet.
    pub fn new(domain: &'static str, reason: &'static str) -> Self {
        ErrorReason {
            domain,
            reason,
            metadata: BTreeMap::new(),
        }
    }

    /// The reason with `key` = `value` in its metadata.
    pub fn with(mut self, key: &str, value: impl ToString) -> Self {
        self.metadata.insert(key.to_owned(), value.to_string());
        self
    }

    /// A status of `code` saying `message`, carrying this reason as its
    /// `google.rpc.ErrorInfo`.
    pub fn status(&self, code: Code, message: impl Into<String>) -> Status {
        let metadata = self
            .metadata
            .iter()
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect::<std::collections::HashMap<_, _>>();
        Status::with_error_details(
            code,
            message,
            ErrorDetails::with_error_info(self.reason, self.domain, metadata),
        )
    }
}

/// One bad field of a request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Violation {
    /// The field's path as the client wrote it (`items[2].quantity`).
    pub field: String,
    /// What is wrong with it (`must be positive (got 0)`).
    pub description: String,
}

impl Violation {
    /// `field` is bad: `description`.
    pub fn new(field: impl Into<String>, description: impl Into<String>) -> Self {
        Violation {
            field: field.into(),
            description: description.into(),
        }
    }
}

/// INVALID_ARGUMENT for `violations` (at least one): the message is
/// `<field>: <description>` of each, joined by `; ` (so it starts with the
/// first bad field, as people and older clients read it), and the details
/// a `google.rpc.BadRequest` with one field violation per bad field.
pub fn bad_request(violations: &[Violation]) -> Status {
    let message = violations
        .iter()
        .map(|v| format!("{}: {}", v.field, v.description))
        .collect::<Vec<_>>()
        .join("; ");
    let details = ErrorDetails::with_bad_request(
        violations
            .iter()
            .map(|v| FieldViolation::new(v.field.clone(), v.description.clone()))
            .collect::<Vec<_>>(),
    );
    Status::with_error_details(Code::InvalidArgument, message, details)
}

/// The field a "reused with different parameters" refusal names, read from
/// the difference [`crate::fingerprint::first_difference`] writes
/// (`items[0].quantity: 3 recorded, 5 received`). `None` when the
/// difference names no field (parameters an older version stored as one
/// description).
pub fn differing_field(difference: &str) -> Option<&str> {
    let (field, _) = difference.split_once(": ")?;
    let is_path = !field.is_empty()
        && field
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"_.[]".contains(&b));
    is_path.then_some(field)
}

/// The `google.rpc.ErrorInfo` of a status, if it carries one: `(domain,
/// reason)`, for code that tells failures apart by reason.
pub fn reason_of(status: &Status) -> Option<(String, String)> {
    status
        .get_details_error_info()
        .map(|info| (info.domain, info.reason))
}

/// The fields a `google.rpc.BadRequest` of a status names, in order.
pub fn bad_fields(status: &Status) -> Vec<String> {
    status
        .get_details_bad_request()
        .map(|b| b.field_violations.into_iter().map(|v| v.field).collect())
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fingerprint::first_difference;

    #[test]
    fn a_reason_is_decoded_from_the_status_with_its_metadata() {
        let status = ErrorReason::new("payment.v1", "INSUFFICIENT_FUNDS")
            .with("customer", "bob")
            .with("available", 10)
            .status(Code::FailedPrecondition, "insufficient funds: …");
        assert_eq!(status.code(), Code::FailedPrecondition);
        assert_eq!(status.message(), "insufficient funds: …");
        let info = status.get_details_error_info().expect("ErrorInfo");
        assert_eq!(
            (info.domain.as_str(), info.reason.as_str()),
            ("payment.v1", "INSUFFICIENT_FUNDS")
        );
        assert_eq!(info.metadata["customer"], "bob");
        assert_eq!(info.metadata["available"], "10");
        assert_eq!(
            reason_of(&status),
            Some(("payment.v1".into(), "INSUFFICIENT_FUNDS".into()))
        );
        assert!(status.get_details_bad_request().is_none());
    }

    #[test]
    fn bad_requests_carry_one_violation_per_field_and_name_the_first_in_text() {
        let status = bad_request(&[
            Violation::new("items[0].quantity", "must be positive (got 0)"),
            Violation::new("customer_id", "must not be empty"),
        ]);
        assert_eq!(status.code(), Code::InvalidArgument);
        assert_eq!(
            status.message(),
            "items[0].quantity: must be positive (got 0); customer_id: must not be empty"
        );
        let bad = status.get_details_bad_request().expect("BadRequest");
        let got: Vec<_> = bad
            .field_violations
            .iter()
            .map(|v| (v.field.as_str(), v.description.as_str()))
            .collect();
        assert_eq!(
            got,
            [
                ("items[0].quantity", "must be positive (got 0)"),
                ("customer_id", "must not be empty")
            ]
        );
        assert_eq!(bad_fields(&status), ["items[0].quantity", "customer_id"]);
        assert_eq!(reason_of(&status), None);
    }

    #[test]
    fn the_differing_field_is_read_from_the_fingerprints_own_difference() {
        let pairs = |v: &[(&str, &str)]| -> Vec<(String, String)> {
            v.iter().map(|(a, b)| ((*a).into(), (*b).into())).collect()
        };
        let recorded = pairs(&[("customer_id", "a: b"), ("lines[0].quantity", "3")]);
        let received = pairs(&[("customer_id", "a: b"), ("lines[0].quantity", "5")]);
        let difference = first_difference(&recorded, &received).unwrap();
        assert_eq!(differing_field(&difference), Some("lines[0].quantity"));
        let customer = first_difference(&recorded, &pairs(&[("customer_id", "x: y")])).unwrap();
        assert_eq!(differing_field(&customer), Some("customer_id"));
        // An older record's description names no field.
        assert_eq!(
            differing_field("customer_id=a: b recorded, customer_id=c received"),
            None
        );
        assert_eq!(differing_field("the parameters differ"), None);
    }
}
