//! Telling MongoDB errors apart.
//!
//! - A duplicate-key error (11000) means "already recorded" only when it
//!   comes from the unique index the caller expected ([`DuplicateKey`]); any
//!   other 11000 is a real error and is reported, never swallowed.
//! - [`classify`]: a driver error in the storage crates' one vocabulary,
//!   [`ErrorClass`]. Network errors, server selection timeouts, elections
//!   and errors labelled `TransientTransactionError` / retryable are worth
//!   waiting out (`Transient`); a field of another type than the code
//!   writes is `Corrupt`; a document too large, a failed validation, a
//!   type mismatch or refused credentials never get better by retrying and
//!   must reach a person (`Rejected`).
//!
//! [`ErrorClass`] is embedded-store's, so that a class means the same on
//! both backends and each service maps it to its own errors once. Every
//! crate that uses this one also uses embedded-store (each store has both
//! backends), so the dependency costs no build; nothing of SQLite appears
//! in this crate's API.

use crate::fields::NotAnInteger;
use bson::Document;
use mongodb::error::{Error, ErrorKind, WriteFailure};

pub use embedded_store::ErrorClass;

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

/// Server error codes that a retry can outlive, by name:
/// - network and hosts: HostUnreachable 6, HostNotFound 7, NetworkTimeout 89,
///   SocketException 9001;
/// - elections and shutdowns: ShutdownInProgress 91, PrimarySteppedDown 189,
///   ExceededTimeLimit 262, NotWritablePrimary 10107, InterruptedAtShutdown
///   11600, InterruptedDueToReplStateChange 11602, NotPrimaryNoSecondaryOk
///   13435, NotPrimaryOrSecondary 13436;
/// - interrupted or timed out: MaxTimeMSExpired 50, Interrupted 11601,
///   LockTimeout 24, LockBusy 46, CursorNotFound 43 (a read started over);
/// - transactions: WriteConflict 112, NoSuchTransaction 251;
/// - replication lag: WriteConcernFailed 64 (a `wtimeout`: the write may be
///   applied, which every caller already allows for, as after a lost
///   reply), ReadConcernMajorityNotAvailableYet 134.
const TRANSIENT_CODES: &[i32] = &[
    6, 7, 24, 43, 46, 50, 64, 89, 91, 112, 134, 189, 251, 262, 9001, 10107, 11600, 11601, 11602,
    13435, 13436,
];

/// The class of a driver `error` ([`ErrorClass`]): `Transient` when a
/// retry can outlive it (labelled retryable, a network failure, or a
/// server code listed in `TRANSIENT_CODES`), `Corrupt` for a stored field of another type
/// ([`NotAnInteger`], carried as a custom error), `Rejected` for the rest.
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
    } else if error.get_custom::<NotAnInteger>().is_some() {
        ErrorClass::Corrupt
    } else {
        ErrorClass::Rejected
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
    fn transient_rejected_and_corrupt_errors_are_told_apart() {
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
            (64, "WriteConcernFailed", ErrorClass::Transient),
            (24, "LockTimeout", ErrorClass::Transient),
            (46, "LockBusy", ErrorClass::Transient),
            (11601, "Interrupted", ErrorClass::Transient),
            (
                134,
                "ReadConcernMajorityNotAvailableYet",
                ErrorClass::Transient,
            ),
            (43, "CursorNotFound", ErrorClass::Transient),
            (10334, "BSONObjectTooLarge", ErrorClass::Rejected),
            (121, "DocumentValidationFailure", ErrorClass::Rejected),
            (14, "TypeMismatch", ErrorClass::Rejected),
            (18, "AuthenticationFailed", ErrorClass::Rejected),
            (20, "IllegalOperation", ErrorClass::Rejected),
        ] {
            assert_eq!(classify(&server(code, name)), class, "{name}");
        }
        // A majority write that timed out waiting for replication (a URI
        // with `wtimeoutMS`) is reported as a write-concern error.
        let wtimeout = Error::from(ErrorKind::Write(WriteFailure::WriteConcernError(
            bson::from_document(doc! {
                "code": 64,
                "codeName": "WriteConcernFailed",
                "errmsg": "waiting for replication timed out",
                "errInfo": { "wtimeout": true },
            })
            .expect("write concern error"),
        )));
        assert_eq!(classify(&wtimeout), ErrorClass::Transient);
        let io = Error::from(std::io::Error::from(std::io::ErrorKind::ConnectionReset));
        assert_eq!(classify(&io), ErrorClass::Transient);
        assert_eq!(classify(&Error::custom("a refusal")), ErrorClass::Rejected);
        let wrong_type = Error::custom(NotAnInteger {
            collection: "accounts".into(),
            id: "alice".into(),
            field: "balance_cents".into(),
            found: "string".into(),
        });
        assert_eq!(classify(&wrong_type), ErrorClass::Corrupt);
    }
}
