//! Connecting to MongoDB the way every service must.
//!
//! - **Waits for the server.** Start-up retries a ping with backoff (a log
//!   line per attempt, the password redacted) until the server answers or
//!   the service is told to stop: services can start before their database.
//! - **Refuses a standalone server.** Participants run multi-document
//!   transactions, which a standalone mongod refuses (IllegalOperation) —
//!   but only at the first transaction, so a participant would report
//!   SERVING and every saga would burn its retries. `hello` is checked at
//!   start-up instead: a replica set (`setName`) or a mongos (`msg:
//!   "isdbgrid"`) is required, and anything else is one clear error naming
//!   the fix. All three services check, so a deployment is uniform.
//! - **Durability is explicit.** Unless the URI says otherwise (`w=`,
//!   `journal=`: the URI wins), every write and commit uses write concern
//!   `majority` with journal, so a primary-secondary-arbiter set or an
//!   admin's `setDefaultRWConcern` cannot silently drop it to `w:1`.
//!   (Transactions read at snapshot: `participant_kit::mongo::transact`.)
//! - **Counted.** Every command goes through [`crate::monitor`].
//! - **SRV works.** `mongodb+srv://` URIs (Atlas) are resolved by the
//!   driver's DNS resolver, which is built in.

use backon::{BackoffBuilder, ExponentialBuilder};
use bson::{Document, doc};
use mongodb::error::Error;
use mongodb::options::{Acknowledgment, ClientOptions, IndexOptions, WriteConcern};
use mongodb::{Client, Collection, Database, IndexModel};
use std::future::Future;
use std::time::Duration;

/// How long one operation waits to find a usable server before failing
/// (and being retried by the caller). The driver default (30 s) would hold
/// a saga silently; 5 s keeps the logs honest.
const SERVER_SELECTION_TIMEOUT: Duration = Duration::from_secs(5);

/// Why [`connect()`] gave up.
#[derive(Debug, thiserror::Error)]
pub enum ConnectError {
    /// The URI cannot be used, or the server never answered before the
    /// service was told to stop.
    #[error(transparent)]
    Driver(#[from] Error),
    /// The server answers but is not a replica set member or mongos.
    #[error(
        "MongoDB at {uri} is a standalone server, which refuses the multi-document transactions the participants run; run it as a replica set (mongod --replSet rs0, then rs.initiate(), as compose.yaml does) or connect to a mongos"
    )]
    Standalone {
        /// The URI, password redacted.
        uri: String,
    },
}

/// The server's `transactionLifetimeLimitSeconds`, when it reports one
/// (`getParameter` needs a privilege a service's user may lack, and some
/// servers do not model it): `None` otherwise.
pub async fn transaction_lifetime(db: &Database) -> Option<Duration> {
    let reply = db
        .client()
        .database("admin")
        .run_command(bson::doc! { "getParameter": 1, "transactionLifetimeLimitSeconds": 1 })
        .await
        .ok()?;
    let seconds = match reply.get("transactionLifetimeLimitSeconds")? {
        bson::Bson::Int32(n) => i64::from(*n),
        bson::Bson::Int64(n) => *n,
        bson::Bson::Double(n) if n.is_finite() => *n as i64,
        _ => return None,
    };
    Some(Duration::from_secs(u64::try_from(seconds).ok()?))
}

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

/// Connects to `uri` and returns `database`: retrying with backoff (and a
/// log line per attempt) until the server answers a ping or `stop`
/// resolves (pass `shutdown.wait()`), then checking it can run
/// transactions. `app_name` names the service in the server's logs and in
/// `mongodb_commands_total{service}`.
pub async fn connect(
    uri: &str,
    database: &str,
    app_name: &str,
    stop: impl Future<Output = ()>,
) -> Result<Database, ConnectError> {
    let mut stop = std::pin::pin!(stop);
    let options = options(uri, app_name).await?;
    let concern = options.write_concern.clone();
    let client = Client::with_options(options)?;
    let db = client.database(database);
    let mut backoff = ExponentialBuilder::default()
        .with_min_delay(Duration::from_millis(200))
        .with_max_delay(Duration::from_secs(5))
        .with_jitter()
        .without_max_times()
        .build();
    loop {
        match db.run_command(doc! { "hello": 1 }).await {
            Ok(hello) => {
                check_topology(uri, &hello)?;
                tracing::info!(uri = %redact(uri), database, write_concern = ?concern, "connected to MongoDB");
                return Ok(db);
            }
            Err(error) => {
                let delay = backoff.next().unwrap_or(Duration::from_secs(5));
                tracing::warn!(uri = %redact(uri), %error, retry_in_ms = delay.as_millis() as u64, "MongoDB unreachable; retrying");
                tokio::select! {
                    _ = tokio::time::sleep(delay) => {}
                    _ = &mut stop => return Err(error.into()),
                }
            }
        }
    }
}

/// The client options of `uri` for service `app_name`: its app name, a
/// server selection timeout, write concern majority + journal for each of
/// the two the URI does not set (a URI with only `wtimeoutMS` or
/// `journal` still writes to a majority: the driver makes a write concern
/// of whatever the URI names, and `w` left out would be the server's
/// default, `w:1` on many replica sets — a write a failover can roll back
/// after a participant reported it), and command monitoring.
pub async fn options(uri: &str, app_name: &str) -> Result<ClientOptions, Error> {
    let mut options = ClientOptions::parse(uri).await?;
    options.app_name.get_or_insert_with(|| app_name.to_owned());
    options
        .server_selection_timeout
        .get_or_insert(SERVER_SELECTION_TIMEOUT);
    let concern = options.write_concern.get_or_insert_with(durable);
    concern.w.get_or_insert(Acknowledgment::Majority);
    concern.journal.get_or_insert(true);
    options.command_event_handler = Some(crate::monitor::handler(app_name));
    Ok(options)
}

/// `{w: "majority", j: true}`: acknowledged once a majority journaled it.
pub fn durable() -> WriteConcern {
    WriteConcern::builder()
        .w(Acknowledgment::Majority)
        .journal(true)
        .build()
}

/// A replica set member (`setName`) or a mongos (`msg: "isdbgrid"`) can run
/// transactions; anything else is refused.
fn check_topology(uri: &str, hello: &Document) -> Result<(), ConnectError> {
    let replica_set = hello.get_str("setName").is_ok();
    let mongos = hello.get_str("msg") == Ok("isdbgrid");
    if replica_set || mongos {
        Ok(())
    } else {
        Err(ConnectError::Standalone { uri: redact(uri) })
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

/// Creates `indexes` on `collection` (idempotent) and drops the indexes
/// named in `replaced` if they exist: indexes of an earlier schema version
/// that these supersede. (An index cannot be re-created under its name with
/// other keys, and a superseded one would only cost writes.)
pub async fn ensure_indexes(
    collection: &Collection<Document>,
    indexes: Vec<IndexModel>,
    replaced: &[&str],
) -> Result<(), Error> {
    collection.create_indexes(indexes).await?;
    let existing = collection.list_index_names().await?;
    for name in replaced {
        if existing.iter().any(|e| e == name) {
            collection.drop_index(*name).await?;
        }
    }
    Ok(())
}

/// A TTL index on the BSON Date field `field`: the server deletes a
/// document some time after the date it holds (its background monitor runs
/// every 60 s on mongod), never one whose field is missing, null or not a
/// Date. `expireAfterSeconds: 0`: each document carries its own expiry date.
pub fn ttl_index(name: &str, field: &str) -> IndexModel {
    IndexModel::builder()
        .keys(bson::doc! { field: 1 })
        .options(
            IndexOptions::builder()
                .name(name.to_owned())
                .expire_after(Duration::ZERO)
                .build(),
        )
        .build()
}

/// Bytes the given collections of `db` occupy by the server's accounting:
/// `collStats` `size` (documents) + `totalIndexSize`, summed. mongod
/// reports uncompressed BSON sizes; SecantusDB reports logical BSON sizes.
/// A collection that does not exist yet counts 0.
pub async fn collection_bytes(db: &Database, collections: &[&str]) -> Result<u64, Error> {
    let mut total = 0u64;
    for name in collections {
        let stats = match db.run_command(bson::doc! { "collStats": *name }).await {
            Ok(stats) => stats,
            Err(e) if matches!(*e.kind, mongodb::error::ErrorKind::Command(ref c) if c.code == 26) =>
            {
                continue; // NamespaceNotFound
            }
            Err(e) => return Err(e),
        };
        for field in ["size", "totalIndexSize"] {
            let n = match stats.get(field) {
                Some(bson::Bson::Int32(n)) => i64::from(*n),
                Some(bson::Bson::Int64(n)) => *n,
                Some(bson::Bson::Double(n)) => *n as i64,
                _ => 0,
            };
            total += u64::try_from(n).unwrap_or(0);
        }
    }
    Ok(total)
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
    fn only_a_replica_set_or_a_mongos_is_accepted() {
        let uri = "mongodb://u:secret@db:27017/";
        assert!(check_topology(uri, &doc! { "setName": "rs0", "isWritablePrimary": true }).is_ok());
        assert!(check_topology(uri, &doc! { "msg": "isdbgrid" }).is_ok());
        let refused = check_topology(uri, &doc! { "isWritablePrimary": true }).unwrap_err();
        let message = refused.to_string();
        assert!(message.contains("--replSet"), "{message}");
        assert!(!message.contains("secret"), "{message}");
    }

    #[tokio::test]
    async fn the_write_concern_is_majority_and_journaled_unless_the_uri_says_otherwise() {
        let defaulted = options("mongodb://127.0.0.1:1/", "t").await.unwrap();
        let concern = defaulted.write_concern.unwrap();
        assert_eq!(concern.w, Some(Acknowledgment::Majority));
        assert_eq!(concern.journal, Some(true));
        let chosen = options("mongodb://127.0.0.1:1/?w=1&journal=false", "t")
            .await
            .unwrap();
        let concern = chosen.write_concern.unwrap();
        assert_eq!(concern.w, Some(Acknowledgment::Nodes(1)));
        assert_eq!(concern.journal, Some(false));
        // Only a timeout: still a majority, journaled, with that timeout.
        let timeout_only = options("mongodb://127.0.0.1:1/?wtimeoutMS=1000", "t")
            .await
            .unwrap();
        let concern = timeout_only.write_concern.unwrap();
        assert_eq!(concern.w, Some(Acknowledgment::Majority));
        assert_eq!(concern.journal, Some(true));
        assert_eq!(concern.w_timeout, Some(Duration::from_millis(1000)));
        // Only the journal: a majority still.
        let journal_only = options("mongodb://127.0.0.1:1/?journal=false", "t")
            .await
            .unwrap();
        let concern = journal_only.write_concern.unwrap();
        assert_eq!(concern.w, Some(Acknowledgment::Majority));
        assert_eq!(concern.journal, Some(false));
    }

    #[tokio::test]
    async fn an_srv_uri_fails_on_resolution_not_for_want_of_a_resolver() {
        let error = options("mongodb+srv://no-such-cluster.invalid/", "t")
            .await
            .expect_err("nothing to resolve");
        let message = error.to_string();
        assert!(
            matches!(
                error.kind.as_ref(),
                mongodb::error::ErrorKind::DnsResolve { .. }
            ),
            "{message}"
        );
        assert!(!message.contains("feature"), "{message}");
    }
}
