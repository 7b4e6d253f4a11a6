//! The chaos soak's audit misses nothing: a small embedded run with two
//! orchestrators is kept, its unchanged stores pass `chaos --audit-only`,
//! and then defects are planted, one per copy of the run, straight into
//! the SQLite files — a duplicated charge row and a duplicated deduct row
//! (the table rebuilt without its primary key, which is the only way one
//! can exist), an applied charge whose request id belongs to no saga, a
//! negative balance, a negative stock, a saga history with a version
//! written twice, a version written by an instance that never claimed the
//! saga, a balance off by one cent, a COMPLETED saga without its deduct, a
//! restock with no deduct. Each must make the audit fail, naming the
//! defect.

use rusqlite::Connection;
use saga_tests::process;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

/// The chaos binary cargo built for this test, after checking that the
/// service binaries it starts are there (the test command builds every
/// binary before `cargo test`; `cargo test -p saga-tests` alone does not).
fn chaos() -> PathBuf {
    static READY: OnceLock<PathBuf> = OnceLock::new();
    READY
        .get_or_init(|| {
            for service in ["orchestrator", "payment-svc", "inventory-svc"] {
                process::workspace_binary(service);
            }
            PathBuf::from(env!("CARGO_BIN_EXE_chaos"))
        })
        .clone()
}

/// A chaos process, killed if the test ends before it does.
struct Running(Option<Child>);

impl Drop for Running {
    fn drop(&mut self) {
        if let Some(mut child) = self.0.take() {
            let _ = process::stop(&mut child, Duration::from_secs(5));
        }
    }
}

/// Runs chaos with `args`, its output in `log`; its exit success and output.
fn run_chaos(args: &[&str], log: &Path, limit: Duration) -> (bool, String) {
    let out = fs::File::create(log).expect("log file");
    let mut cmd = Command::new(chaos());
    cmd.args(args)
        .env_remove("MONGODB_URI")
        .env("NO_COLOR", "1")
        .stdin(Stdio::null())
        .stdout(out.try_clone().expect("log"))
        .stderr(out);
    let mut running = Running(Some(process::spawn_tied(cmd).expect("spawn chaos")));
    let started = Instant::now();
    let status = loop {
        let child = running.0.as_mut().expect("child");
        if let Some(status) = child.try_wait().expect("wait") {
            running.0 = None;
            break status;
        }
        assert!(
            started.elapsed() < limit,
            "chaos {args:?} still running after {limit:?}; output so far:\n{}",
            fs::read_to_string(log).unwrap_or_default()
        );
        std::thread::sleep(Duration::from_millis(50));
    };
    (
        status.success(),
        fs::read_to_string(log).expect("read chaos output"),
    )
}

/// A copy of the kept run's manifest and stores (not its logs) in `to`.
fn copy_run(from: &Path, to: &Path) {
    for service in ["payment", "inventory", "orchestrator"] {
        let dir = to.join("data").join(service);
        fs::create_dir_all(&dir).expect("mkdir");
        for entry in fs::read_dir(from.join("data").join(service)).expect("data dir") {
            let entry = entry.expect("entry");
            fs::copy(entry.path(), dir.join(entry.file_name())).expect("copy");
        }
    }
    fs::copy(from.join("chaos-run.json"), to.join("chaos-run.json")).expect("copy manifest");
}

fn db(run: &Path, service: &str) -> Connection {
    embedded_store::connect(
        &run.join("data").join(service).join(format!("{service}.db")),
        rusqlite::OpenFlags::default(),
    )
    .expect("open")
}

/// Rebuilds operation_history without its primary key (the unique index
/// that makes a duplicate row impossible), as a planted copy only can.
fn drop_unique_key(conn: &Connection) {
    conn.execute_batch(
        "CREATE TABLE planted AS SELECT * FROM operation_history;
         DROP TABLE operation_history;
         ALTER TABLE planted RENAME TO operation_history;",
    )
    .expect("rebuild operation_history without its key");
}

/// Whether the audit's closing line (`chaos: N passed, M failed`) says
/// nothing failed. (Other lines may say "0 failed" of sagas.)
fn audit_passed(out: &str) -> bool {
    out.lines()
        .any(|l| l.starts_with("chaos: ") && l.contains(" passed, ") && l.ends_with(", 0 failed"))
}

/// Audits the run in `dir`; asserts it fails with a FAIL line holding
/// `check` and the detail `names` somewhere under it.
fn audit_fails(dir: &Path, what: &str, check: &str, names: &str) {
    let (ok, out) = run_chaos(
        &["--audit-only", "--work-dir", dir.to_str().expect("utf-8")],
        &dir.join("audit.log"),
        Duration::from_secs(60),
    );
    assert!(!ok, "{what}: the audit passed\n{out}");
    let failed: Vec<&str> = out.lines().filter(|l| l.contains("FAIL ")).collect();
    assert!(
        failed.iter().any(|l| l.contains(check)),
        "{what}: no FAIL line names {check:?}\n{out}"
    );
    assert!(
        out.lines()
            .any(|l| l.trim_start().starts_with("- ") && l.contains(names)),
        "{what}: no offending case names {names:?}\n{out}"
    );
    assert!(!audit_passed(&out), "{what}\n{out}");
}

#[test]
fn the_audit_of_a_kept_run_fails_on_every_planted_defect() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let kept = tmp.path().join("run");
    let (ok, out) = run_chaos(
        &[
            "--sagas",
            "40",
            "--concurrency",
            "8",
            "--orchestrators",
            "2",
            "--orchestrator-kills",
            "0",
            "--participant-restarts",
            "0",
            "--contention-orders",
            "8",
            // Enough faults that a run this small surely meets each kind
            // (the run checks that every injected kind happened).
            "--transient-rate",
            "0.2",
            "--drop-reply-rate",
            "0.2",
            "--refusal-rate",
            "0.1",
            "--seed",
            "1010",
            "--work-dir",
            kept.to_str().expect("utf-8"),
            "--timeout-secs",
            "180",
        ],
        &tmp.path().join("chaos.log"),
        Duration::from_secs(240),
    );
    assert!(ok, "the small run failed\n{out}");
    assert!(kept.join("chaos-run.json").is_file());

    // Unchanged, the kept run passes the audit: what fails below fails
    // because of what was planted.
    let clean = tmp.path().join("clean");
    copy_run(&kept, &clean);
    let (ok, out) = run_chaos(
        &["--audit-only", "--work-dir", clean.to_str().expect("utf-8")],
        &clean.join("audit.log"),
        Duration::from_secs(60),
    );
    assert!(ok, "the untouched copy must pass\n{out}");
    assert!(audit_passed(&out), "{out}");

    // An applied charge recorded twice for one step.
    let dir = tmp.path().join("duplicate-charge");
    copy_run(&kept, &dir);
    let pay = db(&dir, "payment");
    let rid: String = pay
        .query_row(
            "SELECT request_id FROM operation_history WHERE kind = 'charge' AND status = 'applied' ORDER BY request_id LIMIT 1",
            [],
            |r| r.get(0),
        )
        .expect("an applied charge");
    drop_unique_key(&pay);
    pay.execute(
        "INSERT INTO operation_history SELECT * FROM operation_history WHERE request_id = ?1 AND kind = 'charge'",
        [&rid],
    )
    .expect("plant the duplicate row");
    drop(pay);
    audit_fails(
        &dir,
        "a duplicated charge row",
        "no (request id, kind) recorded twice",
        &format!("2 operationHistory rows for ({rid}, charge)"),
    );
    audit_fails(
        &dir,
        "a duplicated charge row",
        "no second effective charge or deduct",
        &format!("{rid}: second effective charge"),
    );

    // An applied deduct recorded twice for one step.
    let dir = tmp.path().join("duplicate-deduct");
    copy_run(&kept, &dir);
    let inv = db(&dir, "inventory");
    let rid: String = inv
        .query_row(
            "SELECT request_id FROM operation_history WHERE kind = 'deduct' AND status = 'applied' ORDER BY request_id LIMIT 1",
            [],
            |r| r.get(0),
        )
        .expect("an applied deduct");
    drop_unique_key(&inv);
    inv.execute(
        "INSERT INTO operation_history SELECT * FROM operation_history WHERE request_id = ?1 AND kind = 'deduct'",
        [&rid],
    )
    .expect("plant the duplicate row");
    drop(inv);
    audit_fails(
        &dir,
        "a duplicated deduct row",
        "no second effective charge or deduct",
        &format!("{rid}: second effective deduct"),
    );

    // An applied charge under a request id that belongs to no saga (the
    // schema's own key allows it).
    let dir = tmp.path().join("orphan-charge");
    copy_run(&kept, &dir);
    let orphan = "00000000-0000-7000-8000-000000000000:payment";
    db(&dir, "payment")
        .execute(
            "INSERT INTO operation_history
             SELECT ?1, kind, subject, amount, fingerprint, parameters, status, detail, recorded_at_ms
             FROM operation_history WHERE kind = 'charge' AND status = 'applied' LIMIT 1",
            [orphan],
        )
        .expect("plant the orphan");
    audit_fails(
        &dir,
        "an orphan charge",
        "every participant effect belongs to a saga",
        &format!("charge {orphan} applied"),
    );

    // A negative balance (past the CHECK constraint, as only a planted
    // copy can).
    let dir = tmp.path().join("negative-balance");
    copy_run(&kept, &dir);
    let pay = db(&dir, "payment");
    pay.execute_batch("PRAGMA ignore_check_constraints = ON")
        .expect("pragma");
    pay.execute(
        "UPDATE accounts SET balance_cents = -7 WHERE customer_id = 'chaos-customer-03'",
        [],
    )
    .expect("plant the negative balance");
    drop(pay);
    audit_fails(
        &dir,
        "a negative balance",
        "balances and stock never negative",
        "negative balance of chaos-customer-03: -7",
    );

    // A negative stock (past the CHECK constraint, as only a planted copy
    // can).
    let dir = tmp.path().join("negative-stock");
    copy_run(&kept, &dir);
    let inv = db(&dir, "inventory");
    let product: String = inv
        .query_row(
            "SELECT product_id FROM products ORDER BY product_id LIMIT 1",
            [],
            |r| r.get(0),
        )
        .expect("a product");
    inv.execute_batch("PRAGMA ignore_check_constraints = ON")
        .expect("pragma");
    let planted = inv
        .execute(
            "UPDATE products SET available = -5 WHERE product_id = ?1",
            [&product],
        )
        .expect("plant the negative stock");
    assert_eq!(planted, 1);
    drop(inv);
    audit_fails(
        &dir,
        "a negative stock",
        "balances and stock never negative",
        &format!("negative stock of {product}: -5"),
    );

    // A saga whose history holds version 1 again after its last version.
    let dir = tmp.path().join("version-twice");
    copy_run(&kept, &dir);
    let orch = db(&dir, "orchestrator");
    let saga_id: String = orch
        .query_row(
            "SELECT saga_id FROM sagas WHERE status = 'completed' ORDER BY saga_id LIMIT 1",
            [],
            |r| r.get(0),
        )
        .expect("a completed saga");
    orch.execute(
        "UPDATE sagas SET doc = json_insert(doc, '$.history[#]', json_extract(doc, '$.history[0]')) WHERE saga_id = ?1",
        [&saga_id],
    )
    .expect("plant the repeated version");
    drop(orch);
    audit_fails(
        &dir,
        "a version written twice",
        "each saga's history is one linear sequence of versions",
        &format!("saga {saga_id}: version 1 after version"),
    );

    // A saga's last version written by an instance that never claimed it.
    let dir = tmp.path().join("foreign-writer");
    copy_run(&kept, &dir);
    let orch = db(&dir, "orchestrator");
    let (saga_id, entries): (String, i64) = orch
        .query_row(
            "SELECT saga_id, json_array_length(doc, '$.history') FROM sagas
             WHERE status = 'completed' AND json_extract(doc, '$.version') > 1
             ORDER BY saga_id LIMIT 1",
            [],
            |r| Ok((r.get(0)?, r.get(1)?)),
        )
        .expect("a completed saga of several versions");
    orch.execute(
        &format!(
            "UPDATE sagas SET doc = json_set(doc, '$.history[{}].by', 'chaos-intruder') WHERE saga_id = ?1",
            entries - 1
        ),
        [&saga_id],
    )
    .expect("plant the foreign writer");
    drop(orch);
    audit_fails(
        &dir,
        "a version by an instance without a claim",
        "no saga advanced by two instances",
        &format!("saga {saga_id}: version"),
    );

    // A balance off by one cent.
    let dir = tmp.path().join("cent-off");
    copy_run(&kept, &dir);
    let pay = db(&dir, "payment");
    pay.execute(
        "UPDATE accounts SET balance_cents = balance_cents - 1 WHERE customer_id = 'chaos-customer-02'",
        [],
    )
    .expect("plant the missing cent");
    drop(pay);
    audit_fails(
        &dir,
        "a balance off by one cent",
        "money: initial − final balance",
        "chaos-customer-02",
    );

    // A COMPLETED saga whose deduct is missing.
    let dir = tmp.path().join("completed-without-deduct");
    copy_run(&kept, &dir);
    let orch = db(&dir, "orchestrator");
    let saga_id: String = orch
        .query_row(
            "SELECT saga_id FROM sagas WHERE status = 'completed' ORDER BY saga_id LIMIT 1",
            [],
            |r| r.get(0),
        )
        .expect("a completed saga");
    drop(orch);
    let inv = db(&dir, "inventory");
    let deleted = inv
        .execute(
            "DELETE FROM operation_history WHERE request_id = ?1 AND kind = 'deduct'",
            [format!("{saga_id}:inventory")],
        )
        .expect("remove the deduct");
    assert_eq!(deleted, 1, "the completed saga had one deduct row");
    drop(inv);
    audit_fails(
        &dir,
        "a COMPLETED saga without its deduct",
        "every COMPLETED order: exactly one effective charge and one effective deduction",
        &format!("saga {saga_id}"),
    );

    // A restock with no deduct: a CANCELLED saga whose deduct was refused
    // gets a restock that undid something.
    let dir = tmp.path().join("restock-without-deduct");
    copy_run(&kept, &dir);
    let inv = db(&dir, "inventory");
    let rid: String = inv
        .query_row(
            "SELECT request_id FROM operation_history WHERE kind = 'deduct' AND status = 'refused'
             ORDER BY request_id LIMIT 1",
            [],
            |r| r.get(0),
        )
        .expect("a refused deduct (the contention phase refuses some)");
    inv.execute(
        "INSERT INTO operation_history
         SELECT request_id, 'restock', subject, amount, fingerprint, parameters, 'undone', detail, recorded_at_ms
         FROM operation_history WHERE request_id = ?1 AND kind = 'deduct'",
        [&rid],
    )
    .expect("plant the restock");
    drop(inv);
    let saga_id = rid.trim_end_matches(":inventory").to_owned();
    audit_fails(
        &dir,
        "a restock with no deduct",
        "every CANCELLED order nets to zero",
        &format!("saga {saga_id}"),
    );
}
