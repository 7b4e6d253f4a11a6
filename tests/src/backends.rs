//! The storage targets tests run against, and how to open a fresh store on
//! each: the embedded SQLite store in a temp dir, or MongoDB — a real one
//! when `MONGODB_URI` is set, otherwise the MongoDB test server
//! ([`crate::mongo_server`]: SecantusDB, a MongoDB-compatible server over
//! WiredTiger), started once per test binary and stopped when it exits.
//!
//! Which target ran is printed once per test binary, straight to stderr so
//! the test harness's output capture cannot hide it; a stand-in's results
//! are never called real.

use crate::mongo_server::{self, MongoServer};
use embedded_store::Durability;
use inventory_svc::store::{InventoryStore, MongoInventoryStore, SqliteInventoryStore};
use orchestrator::store::{MongoSagaStore, SagaStore, SqliteSagaStore};
use payment_svc::store::{MongoPaymentStore, PaymentStore, SqlitePaymentStore};
use std::any::Any;
use std::io::Write;
use std::sync::{Arc, Mutex, OnceLock};

/// A store under test plus whatever must live as long as it (temp dir).
pub struct Backend<S: ?Sized> {
    /// The store.
    pub store: Arc<S>,
    _keep: Box<dyn Any + Send + Sync>,
}

/// Where MongoDB tests run.
#[derive(Debug, Clone)]
pub struct MongoTarget {
    /// Its connection string.
    pub uri: String,
    /// "real MongoDB", or the test server's [`mongo_server::LABEL`].
    pub label: &'static str,
    /// Whether it is the test server this binary started (false for a
    /// real MongoDB).
    pub test_server: bool,
}

static MONGO: OnceLock<Option<MongoTarget>> = OnceLock::new();
/// The test binary's shared server. Statics are never dropped, so
/// [`stop_shared_server`] runs at exit.
static SERVER: Mutex<Option<MongoServer>> = Mutex::new(None);

fn say(line: &str) {
    let _ = writeln!(std::io::stderr(), "{line}");
}

/// The MongoDB target, starting the test server if needed. `None` (with a
/// printed reason) when no MongoDB can be had and `REQUIRE_MONGO` is not
/// set; with `REQUIRE_MONGO=1` that is a failure instead.
pub fn mongo() -> Option<MongoTarget> {
    MONGO
        .get_or_init(|| {
            let target = match mongo_server::external_uri() {
                Some(uri) => Ok(MongoTarget {
                    uri,
                    label: "real MongoDB",
                    test_server: false,
                }),
                None => start_shared_server(),
            };
            match target {
                Ok(t) => {
                    say(&format!(
                        "storage target: {} at {}",
                        t.label,
                        mongo_client::redact(&t.uri)
                    ));
                    Some(t)
                }
                Err(why) if std::env::var("REQUIRE_MONGO").is_ok_and(|v| v == "1") => {
                    panic!("MongoDB required but unavailable: {why}")
                }
                Err(why) => {
                    say(&format!(
                        "storage target: MongoDB unavailable ({why}); MongoDB tests skipped — ./scripts/test.sh runs them"
                    ));
                    None
                }
            }
        })
        .clone()
}

fn start_shared_server() -> Result<MongoTarget, String> {
    let server = MongoServer::start_default()?;
    let target = MongoTarget {
        uri: server.uri(),
        label: server.label(),
        test_server: true,
    };
    *SERVER.lock().unwrap_or_else(|e| e.into_inner()) = Some(server);
    // SAFETY: registers a plain extern "C" function with no arguments.
    unsafe {
        libc::atexit(stop_shared_server);
    }
    Ok(target)
}

/// Stops the shared server when the test binary exits (SIGTERM, so
/// SecantusDB removes its temp storage cleanly).
extern "C" fn stop_shared_server() {
    let _ = std::panic::catch_unwind(|| {
        drop(SERVER.lock().unwrap_or_else(|e| e.into_inner()).take());
    });
}

/// A database no other test uses.
pub async fn fresh_database(target: &MongoTarget, service: &str) -> mongodb::Database {
    let name = format!("test_{service}_{}", uuid::Uuid::now_v7().simple());
    mongo_client::connect(&target.uri, &name, "saga-tests", std::future::pending())
        .await
        .expect("connect to MongoDB")
}

fn temp() -> tempfile::TempDir {
    tempfile::tempdir().expect("tempdir")
}

/// A fresh embedded payment store in a temp dir.
pub async fn embedded_payment() -> Option<Backend<dyn PaymentStore>> {
    let dir = temp();
    let store = SqlitePaymentStore::open(&dir.path().join("payment.db"), Durability::Process)
        .expect("open");
    Some(Backend {
        store: Arc::new(store),
        _keep: Box::new(dir),
    })
}

/// A fresh payment store in its own database of the MongoDB target.
pub async fn mongo_payment() -> Option<Backend<dyn PaymentStore>> {
    let db = fresh_database(&mongo()?, "payment").await;
    let store = MongoPaymentStore::open(db).await.expect("open");
    Some(Backend {
        store: Arc::new(store),
        _keep: Box::new(()),
    })
}

/// A fresh embedded inventory store in a temp dir.
pub async fn embedded_inventory() -> Option<Backend<dyn InventoryStore>> {
    let dir = temp();
    let store = SqliteInventoryStore::open(&dir.path().join("inventory.db"), Durability::Process)
        .expect("open");
    Some(Backend {
        store: Arc::new(store),
        _keep: Box::new(dir),
    })
}

/// A fresh inventory store in its own database of the MongoDB target.
pub async fn mongo_inventory() -> Option<Backend<dyn InventoryStore>> {
    let db = fresh_database(&mongo()?, "inventory").await;
    let store = MongoInventoryStore::open(db).await.expect("open");
    Some(Backend {
        store: Arc::new(store),
        _keep: Box::new(()),
    })
}

/// A fresh embedded saga store in a temp dir.
pub async fn embedded_sagas() -> Option<Backend<dyn SagaStore>> {
    let dir = temp();
    let store = SqliteSagaStore::open(&dir.path().join("orchestrator.db"), Durability::Process)
        .expect("open");
    Some(Backend {
        store: Arc::new(store),
        _keep: Box::new(dir),
    })
}

/// A fresh saga store in its own database of the MongoDB target.
pub async fn mongo_sagas() -> Option<Backend<dyn SagaStore>> {
    let db = fresh_database(&mongo()?, "orchestrator").await;
    let store = MongoSagaStore::open(db).await.expect("open");
    Some(Backend {
        store: Arc::new(store),
        _keep: Box::new(()),
    })
}

/// A fresh in-memory payment store of the deterministic simulation.
pub async fn simulated_payment() -> Option<Backend<dyn PaymentStore>> {
    Some(Backend {
        store: Arc::new(sim::store::MemPaymentStore::standalone()),
        _keep: Box::new(()),
    })
}

/// A fresh in-memory inventory store of the deterministic simulation.
pub async fn simulated_inventory() -> Option<Backend<dyn InventoryStore>> {
    Some(Backend {
        store: Arc::new(sim::store::MemInventoryStore::standalone()),
        _keep: Box::new(()),
    })
}

/// A fresh in-memory saga store of the deterministic simulation.
pub async fn simulated_sagas() -> Option<Backend<dyn SagaStore>> {
    Some(Backend {
        store: Arc::new(sim::store::MemSagaStore::standalone()),
        _keep: Box::new(()),
    })
}
