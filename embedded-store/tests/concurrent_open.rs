//! Opening one database file from several connections at once.
//!
//! Two orchestrator instances on one store, a restarted process racing the
//! one it replaces, a tool reading a live store: each opens the file while
//! another connection may be creating it, converting it to WAL, writing or
//! checkpointing. Every opener must wait for the lock and then succeed;
//! none may fail with "database is locked".
//!
//! The process test runs this test binary again as its children (the
//! `child_opens_the_store` test, which does nothing unless the parent set
//! [`CHILD_PATH`]).

use embedded_store::{DbError, Durability, EmbeddedDb, connect};
use rusqlite::OpenFlags;
use std::path::Path;
use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

const SCHEMA: &str = "CREATE TABLE IF NOT EXISTS opened (who TEXT PRIMARY KEY);";

/// Set by the parent: the file a child process opens.
const CHILD_PATH: &str = "EMBEDDED_STORE_TEST_CHILD_PATH";
/// Set by the parent: when (ms since the epoch) the children open it, so
/// they all start at the same moment.
const CHILD_START_MS: &str = "EMBEDDED_STORE_TEST_CHILD_START_MS";
/// Set by the parent: the name a child records.
const CHILD_NAME: &str = "EMBEDDED_STORE_TEST_CHILD_NAME";

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime")
}

/// Opens the store at `path` and records `who` in it.
fn open_and_record(path: &Path, who: String) -> Result<(), DbError> {
    let db = EmbeddedDb::open(path, SCHEMA, Durability::Process)?;
    runtime().block_on(db.write(move |c| -> Result<(), DbError> {
        c.execute("INSERT INTO opened (who) VALUES (?1)", [who])?;
        Ok(())
    }))
}

fn recorded(path: &Path) -> Vec<String> {
    let conn = connect(path, OpenFlags::SQLITE_OPEN_READ_ONLY).expect("open to check");
    let mut stmt = conn
        .prepare("SELECT who FROM opened ORDER BY who")
        .expect("query");
    stmt.query_map([], |r| r.get(0))
        .expect("rows")
        .collect::<Result<_, _>>()
        .expect("rows")
}

fn now_ms() -> u128 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .expect("clock")
        .as_millis()
}

/// Eight threads open one new file at the same instant, two hundred times: every
/// open succeeds and every thread's write is there. Without a busy timeout
/// set before the first pragma, nearly every round fails.
#[test]
fn threads_opening_one_new_file_at_once_all_succeed() {
    const THREADS: usize = 8;
    for round in 0..200 {
        let dir = tempfile::tempdir().expect("temp dir");
        let path = Arc::new(dir.path().join("store.db"));
        let start = Arc::new(Barrier::new(THREADS));
        let openers: Vec<_> = (0..THREADS)
            .map(|i| {
                let (path, start) = (path.clone(), start.clone());
                std::thread::spawn(move || {
                    start.wait();
                    open_and_record(&path, format!("thread-{i}"))
                })
            })
            .collect();
        for (i, opener) in openers.into_iter().enumerate() {
            if let Err(error) = opener.join().expect("opener thread") {
                panic!("round {round}: thread {i} failed to open a new store: {error} {error:?}");
            }
        }
        assert_eq!(recorded(&path).len(), THREADS, "round {round}");
    }
}

/// Four processes open one new file at the same instant, fifteen times.
#[test]
fn processes_opening_one_new_file_at_once_all_succeed() {
    const PROCESSES: usize = 4;
    let me = std::env::current_exe().expect("this test binary");
    for round in 0..15 {
        let dir = tempfile::tempdir().expect("temp dir");
        let path = dir.path().join("store.db");
        let start_ms = now_ms() + 300;
        let children: Vec<_> = (0..PROCESSES)
            .map(|i| {
                std::process::Command::new(&me)
                    .args(["child_opens_the_store", "--exact", "--nocapture"])
                    .env(CHILD_PATH, &path)
                    .env(CHILD_START_MS, start_ms.to_string())
                    .env(CHILD_NAME, format!("process-{i}"))
                    .stdout(std::process::Stdio::piped())
                    .stderr(std::process::Stdio::piped())
                    .spawn()
                    .expect("start a child")
            })
            .collect();
        for (i, child) in children.into_iter().enumerate() {
            let out = child.wait_with_output().expect("child output");
            assert!(
                out.status.success(),
                "round {round}: process {i} failed to open a new store:\n{}{}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            );
        }
        assert_eq!(recorded(&path).len(), PROCESSES, "round {round}");
    }
}

/// The child of [`processes_opening_one_new_file_at_once_all_succeed`]:
/// waits for the common start, opens, records its name. Without the
/// parent's variables (run on its own) it has nothing to open.
#[test]
fn child_opens_the_store() {
    let (Ok(path), Ok(start), Ok(name)) = (
        std::env::var(CHILD_PATH),
        std::env::var(CHILD_START_MS),
        std::env::var(CHILD_NAME),
    ) else {
        return;
    };
    let start: u128 = start.parse().expect("start time");
    while now_ms() < start {
        std::hint::spin_loop();
    }
    if let Err(error) = open_and_record(Path::new(&path), name) {
        panic!("{error}");
    }
}

/// A connection holds an exclusive lock on a new file (its first write
/// transaction) for 300 ms: opening waits for it, then succeeds.
#[test]
fn opening_waits_for_a_write_transaction_in_progress() {
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("store.db");
    let holder = connect(&path, OpenFlags::default()).expect("holder");
    holder
        .execute_batch(&format!(
            "BEGIN EXCLUSIVE; {SCHEMA} INSERT INTO opened VALUES ('holder');"
        ))
        .expect("hold the lock");
    let released = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(300));
        holder.execute_batch("COMMIT").expect("commit");
    });
    let began = Instant::now();
    open_and_record(&path, "opener".into()).expect("opens once the lock is released");
    let waited = began.elapsed();
    released.join().expect("holder thread");
    assert!(
        waited >= Duration::from_millis(200),
        "opened after {waited:?}, while the lock was held"
    );
    assert_eq!(recorded(&path), ["holder", "opener"]);
}

/// A lock held for longer than the busy timeout: opening fails with an
/// error that names the file and says another connection holds it.
#[test]
fn a_lock_held_past_the_timeout_is_an_error_naming_the_file() {
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("store.db");
    let holder = connect(&path, OpenFlags::default()).expect("holder");
    holder
        .execute_batch(&format!("BEGIN EXCLUSIVE; {SCHEMA}"))
        .expect("hold the lock");
    let error = EmbeddedDb::open_waiting(
        &path,
        SCHEMA,
        Durability::Process,
        Duration::from_millis(200),
    )
    .expect_err("the lock outlasts the timeout");
    assert!(matches!(error, DbError::Locked { .. }), "{error:?}");
    let message = error.to_string();
    assert!(
        message.contains(&path.display().to_string()),
        "no file in {message:?}"
    );
    assert!(
        message.contains("another connection or process"),
        "{message}"
    );
    holder.execute_batch("ROLLBACK").expect("release");
}

/// While another connection writes and truncates the WAL every few
/// milliseconds, the store is opened, written and closed two hundred times: every
/// open succeeds.
#[test]
fn opening_while_a_checkpoint_truncates_the_wal() {
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("store.db");
    open_and_record(&path, "first".into()).expect("create");
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let truncations = {
        let (path, stop) = (path.clone(), stop.clone());
        std::thread::spawn(move || {
            let conn = connect(&path, OpenFlags::default()).expect("truncator");
            let mut n = 0u64;
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                conn.execute("INSERT INTO opened VALUES (?1)", [format!("row-{n}")])
                    .expect("write beside the openers");
                conn.query_row("PRAGMA wal_checkpoint(TRUNCATE)", [], |_| Ok(()))
                    .expect("truncate");
                n += 1;
                // A checkpointer, not a writer that never lets go: others
                // get the lock between its rounds.
                std::thread::sleep(Duration::from_millis(2));
            }
            n
        })
    };
    for i in 0..40 {
        open_and_record(&path, format!("opener-{i}"))
            .unwrap_or_else(|e| panic!("open {i} during truncations: {e:?}"));
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let truncated = truncations.join().expect("truncator thread");
    assert!(truncated > 0, "no truncation ran beside the openers");
    let rows = recorded(&path);
    assert!(
        rows.contains(&"opener-39".to_owned()),
        "{} rows",
        rows.len()
    );
}
