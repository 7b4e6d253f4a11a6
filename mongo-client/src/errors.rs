//! Telling MongoDB errors apart.
//!
//! - A duplicate-key error (11000) means "already recorded" only when it
//!   comes from the unique index the caller expected ([`DuplicateKey`]); any
//!   other 11000 is a real error and is reported, never swallowed.
//! - [`classify`]: network errors, server selection timeouts, elections and
//!   errors labelled `TransientTransactionError` / retryable are worth
//!   waiting out; a document too large, a failed validation, a type
//!   mismatch or refused credentials never get better by retrying and must
//!   reach a person.

use bson::Document;
use mongodb::error::{Error, ErrorKind, WriteFailure};

/// Which unique index a duplicate-key error came from, as far as the server
/// said.
#[derive(Debug, Clone, PartialEq)]
pub struct DuplicateKey {
    /// Index name parsed from the message (`index: <name> dup key`).
    pub index: Option<String>,
    /// `keyPattern` from the error details.
    pub key_pattern: Option<Document>,
}

impl DuplicateKey {
    /// Whether this error is from the index named `name` with `keys`.
    /// `None` when the server gave neither name nor pattern (then the caller
    /// must verify by reading).
    pub fn is_index(&self, name: &str, keys: &[&str]) -> Option<bool> {
        if let Some(pattern) = &self.key_pattern {
            let fields: Vec<&str> = pattern.keys().map(String::as_str).collect();
            return Some(fields == keys);
        }
        self.index.as_deref().map(|index| index == name)
    }
}

/// `Some` when `error` is a duplicate-key error (code 11000), also the first
/// error of an ordered `insert_many`.
pub fn duplicate_key(error: &Error) -> Option<DuplicateKey> {
    let (message, details) = match error.kind.as_ref() {
        ErrorKind::Write(WriteFailure::WriteError(e)) if e.code == 11000 => {
            (e.message.clone(), e.details.clone())
        }
        ErrorKind::Command(e) if e.code == 11000 => (e.message.clone(), None),
        // An ordered insert_many stops at its first error.
        ErrorKind::InsertMany(e) => match e.write_errors.as_deref() {
            Some([first, ..]) if first.code == 11000 => {
                (first.message.clone(), first.details.clone())
            }
            _ => return None,
        },
        _ => return None,
    };
    let index = message
        .split_once("index: ")
        .and_then(|(_, rest)| rest.split_whitespace().next())
        .map(str::to_owned);
    let key_pattern = details.and_then(|d| d.get_document("keyPattern").ok().cloned());
    Some(DuplicateKey { index, key_pattern })
}

/// Whether an operation that failed with an error may succeed later.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorClass {
    /// The server was unreachable, a transaction conflicted, a primary
    /// stepped down, or the driver labels it retryable: wait and retry.
    Transient,
    /// The same operation will fail the same way (document too large,
    /// validation, type, authentication, a bad command): stop and report.
    Permanent,
}

/// Server error codes that a retry can outlive: interrupted, network,
/// elections and shutdowns, write conflicts, lock and cursor timeouts.
const TRANSIENT_CODES: &[i32] = &[
    6, 7, 89, 91, 112, 189, 262, 9001, 10107, 11600, 11602, 13435, 13436, 50, 251,
];

/// How `error` should be treated ([`ErrorClass`]).
pub fn classify(error: &Error) -> ErrorClass {
    let labelled = error.contains_label(mongodb::error::TRANSIENT_TRANSACTION_ERROR)
        || error.contains_label(mongodb::error::UNKNOWN_TRANSACTION_COMMIT_RESULT)
        || error.contains_label(mongodb::error::RETRYABLE_WRITE_ERROR);
    if labelled {
        return ErrorClass::Transient;
    }
    let transient = match error.kind.as_ref() {
        ErrorKind::Io(_)
        | ErrorKind::ServerSelection { .. }
        | ErrorKind::ConnectionPoolCleared { .. }
        | ErrorKind::DnsResolve { .. } => true,
        ErrorKind::Command(e) => TRANSIENT_CODES.contains(&e.code),
        ErrorKind::Write(WriteFailure::WriteError(e)) => TRANSIENT_CODES.contains(&e.code),
        ErrorKind::Write(WriteFailure::WriteConcernError(e)) => TRANSIENT_CODES.contains(&e.code),
        _ => false,
    };
    if transient {
        ErrorClass::Transient
    } else {
        ErrorClass::Permanent
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bson::doc;

    #[test]
    fn duplicate_keys_are_attributed_to_their_index() {
        let by_pattern = DuplicateKey {
            index: None,
            key_pattern: Some(doc! { "request_id": 1, "kind": 1 }),
        };
        assert_eq!(
            by_pattern.is_index("x", &["request_id", "kind"]),
            Some(true)
        );
        assert_eq!(by_pattern.is_index("x", &["_id"]), Some(false));
        let by_name = DuplicateKey {
            index: Some("request_id_unique".into()),
            key_pattern: None,
        };
        assert_eq!(
            by_name.is_index("request_id_unique", &["request_id"]),
            Some(true)
        );
        assert_eq!(by_name.is_index("_id_", &["_id"]), Some(false));
        let unknown = DuplicateKey {
            index: None,
            key_pattern: None,
        };
        assert_eq!(unknown.is_index("request_id_unique", &["request_id"]), None);
    }

    #[test]
    fn transient_and_permanent_errors_are_told_apart() {
        let server = |code: i32, name: &str| -> Error {
            let reply = doc! { "ok": 0, "code": code, "codeName": name, "errmsg": name };
            Error::from(ErrorKind::Command(
                bson::from_document::<mongodb::error::CommandError>(reply).expect("command error"),
            ))
        };
        for (code, name, class) in [
            (112, "WriteConflict", ErrorClass::Transient),
            (91, "ShutdownInProgress", ErrorClass::Transient),
            (10107, "NotWritablePrimary", ErrorClass::Transient),
            (10334, "BSONObjectTooLarge", ErrorClass::Permanent),
            (121, "DocumentValidationFailure", ErrorClass::Permanent),
            (14, "TypeMismatch", ErrorClass::Permanent),
            (18, "AuthenticationFailed", ErrorClass::Permanent),
            (20, "IllegalOperation", ErrorClass::Permanent),
        ] {
            assert_eq!(classify(&server(code, name)), class, "{name}");
        }
        let io = Error::from(std::io::Error::from(std::io::ErrorKind::ConnectionReset));
        assert_eq!(classify(&io), ErrorClass::Transient);
        assert_eq!(classify(&Error::custom("a refusal")), ErrorClass::Permanent);
    }
}
