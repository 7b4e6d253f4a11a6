//! Input checks shared by the gRPC adapters. Each failure names the field
//! (as the client wrote it, e.g. `items[2].quantity`) and becomes
//! INVALID_ARGUMENT before anything is stored, carrying a
//! `google.rpc.BadRequest` with one field violation per bad field
//! ([`crate::errors::bad_request`]).
//!
//! A request with several fields to check collects them in [`Violations`],
//! so a client learns every bad field at once; the single-field functions
//! ([`id`], [`positive`], [`limit`], [`invalid`]) answer for one.

use crate::errors::{Violation, bad_request};
use tonic::Status;

/// Longest accepted id or name, in bytes.
pub const MAX_ID_BYTES: usize = 128;

/// What is wrong with an id, if anything: it must be non-empty, at most
/// [`MAX_ID_BYTES`] bytes, without control characters.
fn id_problem(value: &str) -> Option<String> {
    if value.is_empty() {
        return Some("must not be empty".to_owned());
    }
    if value.len() > MAX_ID_BYTES {
        return Some(format!(
            "must be at most {MAX_ID_BYTES} bytes (got {})",
            value.len()
        ));
    }
    if value.chars().any(char::is_control) {
        return Some("must not contain control characters".to_owned());
    }
    None
}

/// What is wrong with an amount that must be strictly positive, if anything.
fn positive_problem(value: i64) -> Option<String> {
    (value <= 0).then(|| format!("must be positive (got {value})"))
}

/// A non-empty string of at most [`MAX_ID_BYTES`] bytes without control
/// characters.
pub fn id(field: &str, value: &str) -> Result<(), Status> {
    match id_problem(value) {
        Some(problem) => Err(invalid(field, &problem)),
        None => Ok(()),
    }
}

/// A strictly positive amount (cents or units).
pub fn positive(field: &str, value: i64) -> Result<(), Status> {
    match positive_problem(value) {
        Some(problem) => Err(invalid(field, &problem)),
        None => Ok(()),
    }
}

/// INVALID_ARGUMENT for one bad field: the message starts with the field
/// name (`<field>: <problem>`), the details name it in a BadRequest.
pub fn invalid(field: &str, problem: &str) -> Status {
    bad_request(&[Violation::new(field, problem)])
}

/// A `limit` field: 0 means `default`, otherwise 1..=`max`.
pub fn limit(field: &str, value: i32, default: usize, max: usize) -> Result<usize, Status> {
    match value {
        0 => Ok(default),
        v if v < 0 => Err(invalid(field, &format!("must not be negative (got {v})"))),
        v => {
            let v = usize::try_from(v).unwrap_or(usize::MAX);
            if v > max {
                Err(invalid(field, &format!("must be at most {max} (got {v})")))
            } else {
                Ok(v)
            }
        }
    }
}

/// The bad fields of one request, collected so that the client is told of
/// all of them at once ([`Violations::into_result`]).
#[derive(Debug, Default)]
pub struct Violations {
    found: Vec<Violation>,
}

impl Violations {
    /// No bad field yet.
    pub fn new() -> Self {
        Violations::default()
    }

    /// Notes `field` as bad: `problem`.
    pub fn add(&mut self, field: impl Into<String>, problem: impl Into<String>) {
        self.found.push(Violation::new(field, problem));
    }

    /// Checks an id ([`id`]); true when it is good.
    pub fn id(&mut self, field: impl Into<String>, value: &str) -> bool {
        self.note(field, id_problem(value))
    }

    /// Checks a strictly positive amount ([`positive`]); true when it is good.
    pub fn positive(&mut self, field: impl Into<String>, value: i64) -> bool {
        self.note(field, positive_problem(value))
    }

    /// Takes the result of a single-field check (its BadRequest's
    /// violations); the value when it passed.
    pub fn check<T>(&mut self, result: Result<T, Status>) -> Option<T> {
        match result {
            Ok(value) => Some(value),
            Err(status) => {
                match tonic_types::StatusExt::get_details_bad_request(&status) {
                    Some(bad) => self.found.extend(
                        bad.field_violations
                            .into_iter()
                            .map(|v| Violation::new(v.field, v.description)),
                    ),
                    None => self.add("", status.message()),
                }
                None
            }
        }
    }

    fn note(&mut self, field: impl Into<String>, problem: Option<String>) -> bool {
        match problem {
            Some(problem) => {
                self.add(field, problem);
                false
            }
            None => true,
        }
    }

    /// Whether no field was found bad.
    pub fn is_empty(&self) -> bool {
        self.found.is_empty()
    }

    /// `Ok` when no field was bad, else INVALID_ARGUMENT naming each.
    pub fn into_result(self) -> Result<(), Status> {
        if self.found.is_empty() {
            Ok(())
        } else {
            Err(bad_request(&self.found))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::errors::bad_fields;

    #[test]
    fn ids_are_checked_for_emptiness_length_and_control_characters() {
        assert!(id("customer_id", "alice").is_ok());
        let empty = id("customer_id", "").unwrap_err();
        assert!(empty.message().starts_with("customer_id:"));
        assert_eq!(bad_fields(&empty), ["customer_id"]);
        assert!(id("x", &"a".repeat(128)).is_ok());
        assert!(id("x", &"a".repeat(129)).is_err());
        assert!(id("x", "a\nb").is_err());
    }

    #[test]
    fn limits_default_and_cap() {
        assert_eq!(limit("page_size", 0, 50, 500).unwrap(), 50);
        assert_eq!(limit("page_size", 7, 50, 500).unwrap(), 7);
        assert!(limit("page_size", -1, 50, 500).is_err());
        let over = limit("page_size", 501, 50, 500).unwrap_err();
        assert_eq!(bad_fields(&over), ["page_size"]);
    }

    #[test]
    fn every_bad_field_is_collected_in_order() {
        let mut v = Violations::new();
        assert!(v.id("request_id", "r1"));
        assert!(v.is_empty());
        assert!(!v.id("customer_id", ""));
        assert!(!v.positive("amount_cents", 0));
        assert_eq!(v.check(limit("page_size", 9, 1, 5)), None);
        assert_eq!(v.check(limit("page_size", 3, 1, 5)), Some(3));
        let status = v.into_result().unwrap_err();
        assert_eq!(status.code(), tonic::Code::InvalidArgument);
        assert!(
            status
                .message()
                .starts_with("customer_id: must not be empty; ")
        );
        assert_eq!(
            bad_fields(&status),
            ["customer_id", "amount_cents", "page_size"]
        );
        assert!(Violations::new().into_result().is_ok());
    }
}
