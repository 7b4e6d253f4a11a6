//! MongoDB plumbing shared by the three services' MongoDB backends:
//! connecting (with retry while the server is not up yet), redacting
//! credentials in logs, creating indexes, and telling errors apart.
//!
//! Error handling is deliberate in two places:
//! - A duplicate-key error (11000) means "already recorded" only when it
//!   comes from the unique index the caller expected ([`DuplicateKey`]); any
//!   other 11000 is a real error and is reported, never swallowed.
//! - Network errors, server selection timeouts and errors labelled
//!   `TransientTransactionError` / retryable are "unavailable": callers retry
//!   them; everything else is not.

#![warn(missing_docs)]

use backon::{BackoffBuilder, ExponentialBuilder};
use bson::{Document, doc};
use mongodb::error::{Error, ErrorKind, WriteFailure};
use mongodb::options::{ClientOptions, IndexOptions};
use mongodb::{Client, Database, IndexModel};
use std::future::Future;
use std::time::Duration;

/// How long one operation waits to find a usable server before failing
/// (and being retried by the caller). The driver default (30 s) would hold
/// a saga silently; 5 s keeps the logs honest.
const SERVER_SELECTION_TIMEOUT: Duration = Duration::from_secs(5);

/// A URI with any password replaced by `***`, safe for logs.
pub fn redact(uri: &str) -> String {
    let Some((scheme, rest)) = uri.split_once("://") else {
        return uri.to_owned();
    };
    let authority_end = rest.find('/').unwrap_or(rest.len());
    let (authority, tail) = rest.split_at(authority_end);
    match authority.rsplit_once('@') {
        Some((credentials, hosts)) => {
            let user = credentials.split(':').next().unwrap_or_default();
            format!("{scheme}://{user}:***@{hosts}{tail}")
        }
        None => uri.to_owned(),
    }
}

/// Connects to `uri` and returns `database`, retrying with backoff (and a
/// log line per attempt) until the server answers a ping or `stop`
/// resolves (pass `shutdown.wait()`).
pub async fn connect(
    uri: &str,
    database: &str,
    app_name: &str,
    stop: impl Future<Output = ()>,
) -> Result<Database, Error> {
    let mut stop = std::pin::pin!(stop);
    let mut options = ClientOptions::parse(uri).await?;
    options.app_name.get_or_insert_with(|| app_name.to_owned());
    options
        .server_selection_timeout
        .get_or_insert(SERVER_SELECTION_TIMEOUT);
    let client = Client::with_options(options)?;
    let db = client.database(database);
    let mut backoff = ExponentialBuilder::default()
        .with_min_delay(Duration::from_millis(200))
        .with_max_delay(Duration::from_secs(5))
        .with_jitter()
        .without_max_times()
        .build();
    loop {
        match db.run_command(doc! { "ping": 1 }).await {
            Ok(_) => {
                tracing::info!(uri = %redact(uri), database, "connected to MongoDB");
                return Ok(db);
            }
            Err(error) => {
                let delay = backoff.next().unwrap_or(Duration::from_secs(5));
                tracing::warn!(uri = %redact(uri), %error, retry_in_ms = delay.as_millis() as u64, "MongoDB unreachable; retrying");
                tokio::select! {
                    _ = tokio::time::sleep(delay) => {}
                    _ = &mut stop => return Err(error),
                }
            }
        }
    }
}

/// An index definition: `keys` in order, with a stable name.
pub fn index(name: &str, keys: Document, unique: bool) -> IndexModel {
    IndexModel::builder()
        .keys(keys)
        .options(
            IndexOptions::builder()
                .name(name.to_owned())
                .unique(unique)
                .build(),
        )
        .build()
}

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

/// `Some` when `error` is a duplicate-key error (code 11000).
pub fn duplicate_key(error: &Error) -> Option<DuplicateKey> {
    let (message, details) = match error.kind.as_ref() {
        ErrorKind::Write(WriteFailure::WriteError(e)) if e.code == 11000 => {
            (e.message.clone(), e.details.clone())
        }
        ErrorKind::Command(e) if e.code == 11000 => (e.message.clone(), None),
        _ => return None,
    };
    let index = message
        .split_once("index: ")
        .and_then(|(_, rest)| rest.split_whitespace().next())
        .map(str::to_owned);
    let key_pattern = details.and_then(|d| d.get_document("keyPattern").ok().cloned());
    Some(DuplicateKey { index, key_pattern })
}

/// An integer field read leniently: int64, or int32 as written by tools
/// that shrink small numbers.
pub fn int64(d: &Document, field: &str) -> Option<i64> {
    match d.get(field) {
        Some(bson::Bson::Int64(v)) => Some(*v),
        Some(bson::Bson::Int32(v)) => Some(i64::from(*v)),
        _ => None,
    }
}

/// Whether retrying the same operation later may succeed: the server was
/// unreachable, a transaction conflicted, or the driver says so.
pub fn is_transient(error: &Error) -> bool {
    error.contains_label(mongodb::error::TRANSIENT_TRANSACTION_ERROR)
        || error.contains_label(mongodb::error::UNKNOWN_TRANSACTION_COMMIT_RESULT)
        || error.contains_label("RetryableWriteError")
        || matches!(
            error.kind.as_ref(),
            ErrorKind::Io(_)
                | ErrorKind::ServerSelection { .. }
                | ErrorKind::ConnectionPoolCleared { .. }
                | ErrorKind::Transaction { .. }
        )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn passwords_never_reach_logs() {
        assert_eq!(
            redact("mongodb://app:s3cret@db1:27017,db2/saga?replicaSet=rs0"),
            "mongodb://app:***@db1:27017,db2/saga?replicaSet=rs0"
        );
        assert_eq!(redact("mongodb://db:27017/?x=1"), "mongodb://db:27017/?x=1");
        assert_eq!(
            redact("mongodb+srv://u:p@c.example/"),
            "mongodb+srv://u:***@c.example/"
        );
        assert!(!redact("mongodb://u:p%40ss@h/").contains("p%40ss"));
    }

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
}
