//! Tests of the write path, reads and file size.

use crate::vacuum::pragma_u64;
use crate::*;
use std::sync::atomic::Ordering;

pub(crate) const SCHEMA: &str =
    "CREATE TABLE IF NOT EXISTS t (k TEXT PRIMARY KEY, v INTEGER NOT NULL);";

/// Threads of this process whose name starts with `prefix`.
pub(crate) fn threads_named(prefix: &str) -> usize {
    std::fs::read_dir("/proc/self/task")
        .map(|tasks| {
            tasks
                .filter_map(|t| std::fs::read_to_string(t.ok()?.path().join("comm")).ok())
                .filter(|name| name.starts_with(prefix))
                .count()
        })
        .unwrap_or(0)
}

/// Waits up to 10 s for `condition`; fails the test naming `what`.
pub(crate) async fn wait_until(what: &str, condition: impl Fn() -> bool) {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while !condition() {
        assert!(
            std::time::Instant::now() < deadline,
            "never happened: {what}"
        );
        tokio::time::sleep(std::time::Duration::from_millis(5)).await;
    }
}

#[tokio::test]
async fn concurrent_writes_commit_and_a_failed_job_rolls_back_alone() {
    let dir = tempfile::tempdir().unwrap();
    let db = EmbeddedDb::open(&dir.path().join("t.db"), SCHEMA, Durability::Process).unwrap();
    let mut tasks = Vec::new();
    for i in 0..200 {
        let db = db.clone();
        tasks.push(tokio::spawn(async move {
            db.write(move |c| -> Result<(), DbError> {
                c.execute("INSERT INTO t (k, v) VALUES (?1, ?2)", (format!("k{i}"), i))?;
                if i % 10 == 0 {
                    // Fails after its insert: the insert must vanish.
                    c.execute("INSERT INTO t (k, v) VALUES (?1, 0)", [format!("k{i}")])?;
                }
                Ok(())
            })
            .await
        }));
    }
    let mut failed = 0;
    for t in tasks {
        if t.await.unwrap().is_err() {
            failed += 1;
        }
    }
    assert_eq!(failed, 20);
    let count: i64 = db
        .read(|c| -> Result<i64, DbError> {
            Ok(c.query_row("SELECT COUNT(*) FROM t", [], |r| r.get(0))?)
        })
        .await
        .unwrap();
    assert_eq!(count, 180);
}

async fn rows(db: &EmbeddedDb) -> Vec<String> {
    db.read(|c| -> Result<Vec<String>, DbError> {
        let mut stmt = c.prepare("SELECT k FROM t ORDER BY k")?;
        let keys = stmt.query_map([], |r| r.get(0))?;
        Ok(keys.collect::<Result<_, _>>()?)
    })
    .await
    .unwrap()
}

/// Runs the writes `spawn` starts with the write connection held until
/// `n` of them are waiting, so they all join one group commit when it
/// is released (none commits inline).
async fn in_one_group_commit<T>(
    db: &EmbeddedDb,
    n: usize,
    spawn: impl FnOnce() -> Vec<tokio::task::JoinHandle<T>>,
) -> Vec<T> {
    let held = db.writer.conn.lock().unwrap();
    let writes = spawn();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while db.writer.active.load(Ordering::Acquire) < n {
        assert!(std::time::Instant::now() < deadline, "writes never queued");
        std::thread::sleep(std::time::Duration::from_millis(1));
    }
    drop(held);
    let mut results = Vec::new();
    for w in writes {
        results.push(w.await.unwrap());
    }
    results
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn statement_writes_in_one_group_commit_fail_alone_and_change_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let db = EmbeddedDb::open(&dir.path().join("t.db"), SCHEMA, Durability::Process).unwrap();
    db.write_statement(|c| -> Result<_, DbError> {
        Ok(c.execute("INSERT INTO t (k, v) VALUES ('taken', 0)", [])?)
    })
    .await
    .unwrap();
    let writes = || {
        (0..6)
            .map(|i| {
                let db = db.clone();
                tokio::spawn(async move {
                    db.write_statement(move |c| -> Result<usize, DbError> {
                        // Every third one collides with an existing key: the
                        // statement fails and SQLite undoes it by itself.
                        let k = if i % 3 == 0 {
                            "taken".to_owned()
                        } else {
                            format!("k{i}")
                        };
                        Ok(c.execute("INSERT INTO t (k, v) VALUES (?1, ?2)", (k, i))?)
                    })
                    .await
                })
            })
            .collect()
    };
    let results = in_one_group_commit(&db, 6, writes).await;
    let failed: Vec<usize> = (0..6).filter(|&i| results[i].is_err()).collect();
    assert_eq!(failed, [0, 3]);
    assert_eq!(rows(&db).await, ["k1", "k2", "k4", "k5", "taken"]);
    let taken: i64 = db
        .read(|c| -> Result<i64, DbError> {
            Ok(c.query_row("SELECT v FROM t WHERE k = 'taken'", [], |r| r.get(0))?)
        })
        .await
        .unwrap();
    assert_eq!(taken, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_statement_write_that_fails_after_a_change_fails_its_whole_group_commit() {
    let dir = tempfile::tempdir().unwrap();
    let db = EmbeddedDb::open(&dir.path().join("t.db"), SCHEMA, Durability::Process).unwrap();
    let writes = || {
        (0..3)
            .map(|i| {
                let db = db.clone();
                tokio::spawn(async move {
                    db.write_statement(move |c| -> Result<(), DbError> {
                        c.execute("INSERT INTO t (k, v) VALUES (?1, ?2)", (format!("k{i}"), i))?;
                        if i == 1 {
                            // Breaks the contract: a second change that fails.
                            c.execute("INSERT INTO t (k, v) VALUES ('k1', 0)", [])?;
                        }
                        Ok(())
                    })
                    .await
                })
            })
            .collect()
    };
    let results = in_one_group_commit(&db, 3, writes).await;
    assert!(results.iter().all(Result::is_err), "{results:?}");
    assert!(rows(&db).await.is_empty(), "nothing half-done is committed");
    // The writer goes on: the next write commits.
    db.write_statement(|c| -> Result<_, DbError> {
        Ok(c.execute("INSERT INTO t (k, v) VALUES ('after', 1)", [])?)
    })
    .await
    .unwrap();
    assert_eq!(rows(&db).await, ["after"]);
}

#[tokio::test]
async fn grouped_writes_never_commit_inline() {
    let dir = tempfile::tempdir().unwrap();
    let db = EmbeddedDb::open(&dir.path().join("t.db"), SCHEMA, Durability::Process).unwrap();
    let insert = |db: EmbeddedDb, k: &'static str| async move {
        tokio::time::sleep(std::time::Duration::from_millis(2)).await;
        db.write_statement(move |c| -> Result<_, DbError> {
            Ok(c.execute("INSERT INTO t (k, v) VALUES (?1, 0)", [k])?)
        })
        .await
        .unwrap();
    };
    // Quiet and alone, each of these would commit inline on its own.
    grouped(async {
        insert(db.clone(), "a").await;
        insert(db.clone(), "b").await;
    })
    .await;
    assert_eq!(db.writer.inline_commits.load(Ordering::Relaxed), 0);
    insert(db.clone(), "c").await;
    assert_eq!(db.writer.inline_commits.load(Ordering::Relaxed), 1);
    assert_eq!(rows(&db).await, ["a", "b", "c"]);
}

async fn fill(db: &EmbeddedDb, from: usize, n: usize) {
    let rows = (from..from + n).collect::<Vec<_>>();
    db.write(move |c| -> Result<(), DbError> {
        for i in rows {
            c.execute(
                "INSERT INTO t (k, v) VALUES (?1, ?2)",
                (format!("{i:0>2000}"), i as i64),
            )?;
        }
        Ok(())
    })
    .await
    .unwrap();
}

/// Deleted rows' pages are reused by the next inserts (the file does
/// not grow), and `reclaim` hands the free pages beyond a quarter of
/// the file back.
#[tokio::test]
async fn freed_pages_are_reused_and_the_excess_is_released() {
    let dir = tempfile::tempdir().unwrap();
    let db = EmbeddedDb::open(&dir.path().join("t.db"), SCHEMA, Durability::Process).unwrap();
    fill(&db, 0, 2_000).await;
    let full = db.file_size().await.unwrap();
    db.write(|c| -> Result<(), DbError> {
        c.execute("DELETE FROM t", [])?;
        Ok(())
    })
    .await
    .unwrap();
    fill(&db, 10_000, 2_000).await;
    let refilled = db.file_size().await.unwrap();
    assert!(
        refilled.page_count <= full.page_count + full.page_count / 50,
        "{full:?} then {refilled:?}"
    );
    db.write(|c| -> Result<(), DbError> {
        c.execute("DELETE FROM t", [])?;
        Ok(())
    })
    .await
    .unwrap();
    let released = db.reclaim().await.unwrap();
    let after = db.file_size().await.unwrap();
    // A quarter of the file stays free for the next inserts.
    let reserve = refilled.page_count / 4;
    assert_eq!(after.freelist_count, reserve, "{after:?}");
    assert_eq!(released, (refilled.page_count - after.page_count) * 4096);
    assert!(after.page_count < refilled.page_count / 2, "{after:?}");
}

/// A file written before incremental auto-vacuum is converted at open.
#[tokio::test]
async fn an_older_file_is_converted_to_incremental_auto_vacuum() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("t.db");
    {
        let conn = crate::connect(&path, rusqlite::OpenFlags::default()).unwrap();
        conn.execute_batch(&format!("PRAGMA journal_mode=WAL; {SCHEMA}"))
            .unwrap();
        conn.execute("INSERT INTO t (k, v) VALUES ('a', 1)", [])
            .unwrap();
        assert_eq!(pragma_u64(&conn, "auto_vacuum").unwrap(), 0);
    }
    let db = EmbeddedDb::open(&path, SCHEMA, Durability::Process).unwrap();
    let mode: i64 = db
        .read(|c| -> Result<i64, DbError> {
            Ok(c.query_row("PRAGMA auto_vacuum", [], |r| r.get(0))?)
        })
        .await
        .unwrap();
    assert_eq!(mode, 2);
    let v: i64 = db
        .read(|c| -> Result<i64, DbError> {
            Ok(c.query_row("SELECT v FROM t WHERE k = 'a'", [], |r| r.get(0))?)
        })
        .await
        .unwrap();
    assert_eq!(v, 1);
}

/// One write at a time, after a quiet period, takes the inline path:
/// it commits, and one that fails leaves nothing behind and does not
/// break the next.
#[tokio::test]
async fn quiet_writes_commit_inline_and_a_failed_one_leaves_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let db = EmbeddedDb::open(&dir.path().join("t.db"), SCHEMA, Durability::Process).unwrap();
    for i in 0..20 {
        tokio::time::sleep(std::time::Duration::from_millis(1)).await;
        let outcome = db
            .write(move |c| -> Result<(), DbError> {
                c.execute("INSERT INTO t (k, v) VALUES (?1, ?2)", (format!("k{i}"), i))?;
                if i % 4 == 0 {
                    c.execute("INSERT INTO t (k, v) VALUES (?1, 0)", [format!("k{i}")])?;
                }
                Ok(())
            })
            .await;
        assert_eq!(outcome.is_err(), i % 4 == 0, "write {i}");
    }
    assert_eq!(db.writer.active.load(Ordering::Acquire), 0);
    assert_eq!(db.writer.inline_commits.load(Ordering::Relaxed), 20);
    let count: i64 = db
        .read(|c| -> Result<i64, DbError> {
            Ok(c.query_row("SELECT COUNT(*) FROM t", [], |r| r.get(0))?)
        })
        .await
        .unwrap();
    assert_eq!(count, 15);
}

#[tokio::test]
async fn committed_writes_survive_reopening() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("t.db");
    {
        let db = EmbeddedDb::open(&path, SCHEMA, Durability::PowerLoss).unwrap();
        db.write(|c| -> Result<(), DbError> {
            c.execute("INSERT INTO t (k, v) VALUES ('a', 1)", [])?;
            Ok(())
        })
        .await
        .unwrap();
    }
    let db = EmbeddedDb::open(&path, SCHEMA, Durability::Process).unwrap();
    let v: i64 = db
        .read(|c| -> Result<i64, DbError> {
            Ok(c.query_row("SELECT v FROM t WHERE k = 'a'", [], |r| r.get(0))?)
        })
        .await
        .unwrap();
    assert_eq!(v, 1);
}
