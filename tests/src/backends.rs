//! The storage targets tests run against, and how to open a fresh store on
//! each: the embedded SQLite store in a temp dir, or MongoDB — a real one
//! when `MONGODB_URI` is set, otherwise the wire-protocol emulator shipped
//! in `tests/mongo-emulator/` (started once per test binary).
//!
//! Which target ran is printed once per test binary, straight to stderr so
//! the test harness's output capture cannot hide it; emulated results are
//! never called real.

use embedded_store::Durability;
use inventory_svc::store::{InventoryStore, MongoInventoryStore, SqliteInventoryStore};
use orchestrator::store::{MongoSagaStore, SagaStore, SqliteSagaStore};
use payment_svc::store::{MongoPaymentStore, PaymentStore, SqlitePaymentStore};
use std::any::Any;
use std::io::{BufRead, BufReader, Write};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::{Arc, Mutex, OnceLock};

/// A store under test plus whatever must live as long as it (temp dir).
pub struct Backend<S: ?Sized> {
    pub store: Arc<S>,
    _keep: Box<dyn Any + Send + Sync>,
}

/// Where MongoDB tests run.
#[derive(Debug, Clone)]
pub struct MongoTarget {
    pub uri: String,
    /// "real MongoDB" or "emulated MongoDB".
    pub label: &'static str,
}

/// The emulator process: its stdin is held open for the life of the test
/// binary; the emulator exits when it closes.
struct Emulator {
    _child: Child,
    _stdin: Option<ChildStdin>,
}

static MONGO: OnceLock<Option<MongoTarget>> = OnceLock::new();
static EMULATOR: Mutex<Option<Emulator>> = Mutex::new(None);

fn say(line: &str) {
    let _ = writeln!(std::io::stderr(), "{line}");
}

/// The MongoDB target, starting the emulator if needed. `None` (with a
/// printed reason) when no MongoDB can be had and `REQUIRE_MONGO` is not
/// set; with `REQUIRE_MONGO=1` that is a failure instead.
pub fn mongo() -> Option<MongoTarget> {
    MONGO
        .get_or_init(|| {
            let target = match std::env::var("MONGODB_URI") {
                Ok(uri) if !uri.is_empty() => Ok(MongoTarget {
                    uri,
                    label: "real MongoDB",
                }),
                _ => start_emulator().map(|uri| MongoTarget {
                    uri,
                    label: "emulated MongoDB (mockupdb + mongomock wire-protocol emulator, not a real server)",
                }),
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

fn start_emulator() -> Result<String, String> {
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/../scripts/mongo-emulator.sh");
    let mut child = Command::new("bash")
        .args([script, "--port", "0"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .map_err(|e| format!("cannot run {script}: {e}"))?;
    let stdout = child.stdout.take().ok_or("no emulator stdout")?;
    let mut lines = BufReader::new(stdout).lines();
    let port = loop {
        match lines.next() {
            Some(Ok(line)) => {
                if let Some(port) = line.strip_prefix("READY ") {
                    break port.trim().to_owned();
                }
            }
            Some(Err(e)) => return Err(format!("reading emulator output: {e}")),
            None => return Err("emulator exited before READY".into()),
        }
    };
    // Keep draining stdout so the emulator never blocks on a full pipe.
    std::thread::spawn(move || for _ in lines {});
    let stdin = child.stdin.take();
    if let Ok(mut slot) = EMULATOR.lock() {
        *slot = Some(Emulator {
            _child: child,
            _stdin: stdin,
        });
    }
    Ok(format!("mongodb://127.0.0.1:{port}/?directConnection=true"))
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

pub async fn embedded_payment() -> Option<Backend<dyn PaymentStore>> {
    let dir = temp();
    let store = SqlitePaymentStore::open(&dir.path().join("payment.db"), Durability::Process)
        .expect("open");
    Some(Backend {
        store: Arc::new(store),
        _keep: Box::new(dir),
    })
}

pub async fn mongo_payment() -> Option<Backend<dyn PaymentStore>> {
    let db = fresh_database(&mongo()?, "payment").await;
    let store = MongoPaymentStore::open(db).await.expect("open");
    Some(Backend {
        store: Arc::new(store),
        _keep: Box::new(()),
    })
}

pub async fn embedded_inventory() -> Option<Backend<dyn InventoryStore>> {
    let dir = temp();
    let store = SqliteInventoryStore::open(&dir.path().join("inventory.db"), Durability::Process)
        .expect("open");
    Some(Backend {
        store: Arc::new(store),
        _keep: Box::new(dir),
    })
}

pub async fn mongo_inventory() -> Option<Backend<dyn InventoryStore>> {
    let db = fresh_database(&mongo()?, "inventory").await;
    let store = MongoInventoryStore::open(db).await.expect("open");
    Some(Backend {
        store: Arc::new(store),
        _keep: Box::new(()),
    })
}

pub async fn embedded_sagas() -> Option<Backend<dyn SagaStore>> {
    let dir = temp();
    let store = SqliteSagaStore::open(&dir.path().join("orchestrator.db"), Durability::Process)
        .expect("open");
    Some(Backend {
        store: Arc::new(store),
        _keep: Box::new(dir),
    })
}

pub async fn mongo_sagas() -> Option<Backend<dyn SagaStore>> {
    let db = fresh_database(&mongo()?, "orchestrator").await;
    let store = MongoSagaStore::open(db).await.expect("open");
    Some(Backend {
        store: Arc::new(store),
        _keep: Box::new(()),
    })
}
