//! Copying the WAL into the database file off the commit path, and giving a
//! grown WAL's space back once the load stays low.
//!
//! Why a thread of its own: SQLite's automatic checkpoint runs inside the
//! commit that crosses its threshold, on the writer thread, so every few
//! thousand pages one group commit — and every saga waiting on it — stalled
//! while thousands of pages were copied. A larger threshold made fewer,
//! longer stalls: more throughput, but twice the p99 (BENCHMARKS.md).
//! Checkpointing beside the writer (`PRAGMA wal_checkpoint(PASSIVE)`,
//! which never blocks a writer or a reader) keeps that copy off the commit
//! path: every [`CHECKPOINT_INTERVAL`], so that a page rewritten by many
//! commits is copied once, and every [`CHECKPOINT_INTERVAL_NEAR_RESTART`]
//! once the WAL nears the writer's own threshold, so that the one
//! checkpoint left inside a commit finds little to copy.
//!
//! Why the WAL still grows under load, and what restarts it: see
//! [`WRITER_CHECKPOINT_PAGES`]. A WAL file keeps the size it grew to (SQLite
//! overwrites it from its start rather than truncating it, which is the
//! cheaper write under load), so after a burst each service would keep up
//! to ~250 MiB of WAL until it restarts; the checkpointer truncates it once
//! the load has stayed low for [`WAL_TRUNCATE_AFTER_LOW_LOAD`] (the WAL's
//! content — not its file — small all that time).
//!
//! Every checkpoint is timed (`embedded_store_checkpoint_duration_seconds{db}`) and
//! a slow one logged (see [`crate::slow_log`]): a checkpoint's syncs are
//! where the disk's stalls show first, before they reach a commit.

use crate::slow_log::{SLOW_CHECKPOINT, SlowLog};
use crate::writer::Writer;
use crate::{DbError, open::connect};
use rusqlite::{Connection, OpenFlags};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

/// How often the checkpointer copies the WAL's committed pages into the
/// database file, while the WAL is far from [`WRITER_CHECKPOINT_PAGES`].
///
/// Why not more often: a checkpoint copies each page once however many
/// commits rewrote it since the last one, and syncs the WAL and the file
/// once. A saga's document, an account's row and the index leaf that every
/// call of one customer appends to are rewritten many times a second under
/// load, so the longer the interval the fewer copies and syncs per commit.
/// At 25 ms the checkpointer was 17% of a participant's CPU at concurrency
/// 64 (perf); with this interval (and the one below near a restart) the
/// stack did +13% sagas/s with two steps, each process using 9–19% less
/// CPU per saga (docs/benchmarks-history.md).
pub(crate) const CHECKPOINT_INTERVAL: Duration = Duration::from_millis(250);

/// The interval once the WAL holds [`NEAR_RESTART_FRAMES`] or more.
///
/// Why: the writer's own checkpoint at [`WRITER_CHECKPOINT_PAGES`] copies,
/// inside a commit every saga of the process waits for, whatever the
/// checkpointer has not copied yet. At 250 ms all the way that was up to
/// 250 ms of frames, and the p99 at concurrency 64 rose from 20 to 33 ms;
/// checkpointing small and often over the last quarter of the WAL leaves
/// that commit 25 ms of frames at most, as before.
const CHECKPOINT_INTERVAL_NEAR_RESTART: Duration = Duration::from_millis(25);

/// WAL frames from which the checkpointer copies every
/// [`CHECKPOINT_INTERVAL_NEAR_RESTART`]: three quarters of the writer's
/// threshold, so a fast writer (about 12,000 frames in 250 ms here at
/// concurrency 64) is caught a full interval before it.
const NEAR_RESTART_FRAMES: u64 = WRITER_CHECKPOINT_PAGES.unsigned_abs() / 4 * 3;

/// How long the checkpointer sleeps after a checkpoint that found
/// `wal_frames` frames in the WAL.
fn interval_after(wal_frames: u64) -> Duration {
    if wal_frames >= NEAR_RESTART_FRAMES {
        CHECKPOINT_INTERVAL_NEAR_RESTART
    } else {
        CHECKPOINT_INTERVAL
    }
}

/// WAL pages past which the writer checkpoints itself, which is what
/// restarts the WAL under sustained load.
///
/// Why so many (about 250 MiB of WAL at 4 KiB pages): SQLite restarts the
/// WAL from its start only when a write transaction begins with every
/// frame already copied, which the checkpointer never achieves while the
/// writer commits every millisecond or so; so the writer's own checkpoint
/// at this threshold does it, copying the little the checkpointer has not
/// and syncing the WAL and the database file before the next commit. Those
/// two syncs stall every write of the database for 10–45 ms on the test
/// machine, whatever the threshold; at 16,000 pages that is every ~0.7 s
/// at concurrency 64 in the orchestrator, and the slowest sagas are the
/// ones caught behind it. At 64,000 the stall comes four times less often
/// (in 30 s runs at concurrency 64: p99 −20%, +8% sagas/s;
/// docs/benchmarks-history.md). The syncs are the disk's: when the file
/// system stalls, all three services' checkpoints slow down at the same
/// instant (50–270 ms), and a writer checkpoint caught in such a moment is
/// the likely cause of the rare 200 ms saga. At low load the checkpointer
/// copies everything between commits and the WAL restarts long before
/// this, without a stall.
pub(crate) const WRITER_CHECKPOINT_PAGES: i64 = 64_000;

/// How long the load must have stayed low before a WAL file larger than
/// [`WAL_KEEP_BYTES`] is truncated. Low: the WAL's content (its frames
/// since the last restart) under that size, or unchanged and all copied.
/// Under sustained load the content grows past it within a second of
/// every restart; at low load the checkpointer copies everything between
/// commits and the WAL restarts at every write, so its content stays a few
/// frames; with no write at all it keeps what it had, all copied. "No
/// write at all" alone would be the wrong test: the retention purge writes
/// every 10 s by default. Long enough that a pause in a steady load does
/// not truncate a WAL the next second regrows (appending to a file costs
/// more than overwriting it).
const WAL_TRUNCATE_AFTER_LOW_LOAD: Duration = if cfg!(test) {
    Duration::from_millis(300)
} else {
    Duration::from_secs(10)
};

/// A WAL file up to this size is left alone: at low load it restarts
/// between commits and stays about this small by itself.
const WAL_KEEP_BYTES: u64 = 4 << 20;

/// A WAL frame's header, before each page.
const WAL_FRAME_HEADER_BYTES: u64 = 24;

/// How long the truncation waits for the writer and for readers before it
/// gives up (PASSIVE checkpoints never wait, so this bounds the truncation
/// alone); a write that arrives meanwhile waits for it.
const TRUNCATE_BUSY_TIMEOUT: Duration = Duration::from_millis(100);

/// Starts the checkpointer of the database at `path` on a connection of
/// its own; it stops once the database is dropped (its `writer` gone).
pub(crate) fn spawn(path: &Path, writer: &Arc<Writer>) -> Result<(), DbError> {
    // Opened waiting as long as any connection does (the file may still be
    // being created by another process); only its checkpoints wait less.
    let conn = connect(path, OpenFlags::default())?;
    let page_size: i64 = conn.pragma_query_value(None, "page_size", |row| row.get(0))?;
    conn.busy_timeout(TRUNCATE_BUSY_TIMEOUT)?;
    let mut wal = path.as_os_str().to_owned();
    wal.push("-wal");
    let checkpointer = Checkpointer {
        conn,
        frame_bytes: u64::try_from(page_size).unwrap_or(4096) + WAL_FRAME_HEADER_BYTES,
        wal_frames: 0,
        low_load_since: None,
        retry_truncate_at: None,
        slow: SlowLog::new(SLOW_CHECKPOINT),
        labels: [("db", writer.db.clone())],
        shown: path.display().to_string(),
        wal: PathBuf::from(wal),
    };
    std::thread::Builder::new()
        .name(format!(
            "sqlite-ckpt-{}",
            path.file_stem().and_then(|s| s.to_str()).unwrap_or("db")
        ))
        .spawn({
            let writer = Arc::downgrade(writer);
            move || checkpointer.run(&writer)
        })
        .map_err(|source| DbError::Open {
            path: path.to_path_buf(),
            source,
        })?;
    Ok(())
}

struct Checkpointer {
    conn: Connection,
    /// A WAL frame's size: a page and its header.
    frame_bytes: u64,
    /// The frames in the WAL at the last checkpoint.
    wal_frames: u64,
    /// Since when the load has been low (see [`WAL_TRUNCATE_AFTER_LOW_LOAD`]).
    low_load_since: Option<Instant>,
    /// After a truncation found the WAL busy, not before this.
    retry_truncate_at: Option<Instant>,
    /// Slow checkpoints, logged at most once a second.
    slow: SlowLog,
    labels: [(&'static str, metrics::SharedString); 1],
    /// The database file, for logs.
    shown: String,
    /// The WAL file, whose size decides a truncation.
    wal: PathBuf,
}

impl Checkpointer {
    fn run(mut self, writer: &Weak<Writer>) {
        loop {
            std::thread::sleep(interval_after(self.wal_frames));
            if writer.upgrade().is_none() {
                return;
            }
            let Some((wal_frames, copied)) = self.copy() else {
                continue;
            };
            let now = Instant::now();
            // Low load: the WAL holds little, or nothing was written since
            // it was all copied (it restarts only at the next write).
            let unchanged = wal_frames == copied && wal_frames == self.wal_frames;
            self.wal_frames = wal_frames;
            if wal_frames.saturating_mul(self.frame_bytes) >= WAL_KEEP_BYTES && !unchanged {
                self.low_load_since = None;
                continue;
            }
            let since = *self.low_load_since.get_or_insert(now);
            if now.duration_since(since) < WAL_TRUNCATE_AFTER_LOW_LOAD
                || self.retry_truncate_at.is_some_and(|at| now < at)
            {
                continue;
            }
            let bytes = self.wal_bytes();
            if bytes > WAL_KEEP_BYTES {
                self.retry_truncate_at =
                    (!self.truncate(bytes)).then(|| now + WAL_TRUNCATE_AFTER_LOW_LOAD);
            }
        }
    }

    /// One PASSIVE checkpoint, timed: the frames in the WAL and how many
    /// of them are copied, or None when it failed (the next one retries).
    fn copy(&self) -> Option<(u64, u64)> {
        let began = Instant::now();
        // (busy, frames in the WAL, frames copied into the database file)
        match self
            .conn
            .query_row("PRAGMA wal_checkpoint(PASSIVE)", [], |row| {
                Ok((row.get::<_, i64>(1)?, row.get::<_, i64>(2)?))
            }) {
            Ok((wal_frames, copied)) => {
                let took = began.elapsed();
                metrics::histogram!("embedded_store_checkpoint_duration_seconds", &self.labels)
                    .record(took);
                if let Some(left_out) = self.slow.admit(began, took) {
                    tracing::warn!(
                        db = %self.shown,
                        wal_frames,
                        copied,
                        ms = took.as_secs_f64() * 1e3,
                        slow_checkpoints_not_logged = left_out,
                        "slow checkpoint (the copy and the syncs of the WAL and the database file)"
                    );
                }
                let frames = |n: i64| u64::try_from(n).unwrap_or(0);
                Some((frames(wal_frames), frames(copied)))
            }
            Err(error) => {
                tracing::debug!(db = %self.shown, %error, "checkpoint skipped; the next one retries");
                None
            }
        }
    }

    /// Copies what is left and truncates the WAL to nothing (`PRAGMA
    /// wal_checkpoint(TRUNCATE)`), unless a reader or writer holds it past
    /// [`TRUNCATE_BUSY_TIMEOUT`]. True when it was truncated; otherwise
    /// it is tried again [`WAL_TRUNCATE_AFTER_LOW_LOAD`] later (a reader
    /// that holds an old snapshot that long is rare, and each try holds the
    /// write lock while it waits).
    fn truncate(&self, bytes: u64) -> bool {
        let began = Instant::now();
        match self
            .conn
            .query_row("PRAGMA wal_checkpoint(TRUNCATE)", [], |row| {
                row.get::<_, i64>(0)
            }) {
            Ok(0) => {
                tracing::info!(
                    db = %self.shown,
                    bytes,
                    took_ms = began.elapsed().as_secs_f64() * 1e3,
                    "WAL truncated: the load has stayed low"
                );
                true
            }
            Ok(_busy) => {
                tracing::debug!(db = %self.shown, "WAL truncation busy; tried again later");
                false
            }
            Err(error) => {
                tracing::debug!(db = %self.shown, %error, "WAL truncation failed; tried again later");
                false
            }
        }
    }

    fn wal_bytes(&self) -> u64 {
        std::fs::metadata(&self.wal).map(|m| m.len()).unwrap_or(0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tests::{SCHEMA, threads_named, wait_until};
    use crate::{Durability, EmbeddedDb};

    /// Writes rows 0..n of about 3 KB each (replacing any), one commit
    /// each, as a load does.
    async fn insert_rows(db: &EmbeddedDb, n: i64) {
        let value = "x".repeat(3_000);
        for i in 0..n {
            let value = value.clone();
            db.write(move |c| -> Result<(), DbError> {
                c.execute(
                    "INSERT OR REPLACE INTO t (k, v) VALUES (?1, ?2)",
                    (format!("{i}-{value}"), i),
                )?;
                Ok(())
            })
            .await
            .unwrap();
        }
    }

    #[test]
    fn the_checkpointer_copies_small_and_often_only_as_the_wal_nears_the_writers_threshold() {
        assert_eq!(interval_after(0), CHECKPOINT_INTERVAL);
        assert_eq!(interval_after(NEAR_RESTART_FRAMES - 1), CHECKPOINT_INTERVAL);
        assert_eq!(
            interval_after(NEAR_RESTART_FRAMES),
            CHECKPOINT_INTERVAL_NEAR_RESTART
        );
        // Past the writer's threshold (its checkpoint found readers in the
        // way and the WAL went on growing) it stays short.
        assert_eq!(
            interval_after(WRITER_CHECKPOINT_PAGES.unsigned_abs() * 2),
            CHECKPOINT_INTERVAL_NEAR_RESTART
        );
        const { assert!(NEAR_RESTART_FRAMES < WRITER_CHECKPOINT_PAGES.unsigned_abs()) };
        const { assert!(CHECKPOINT_INTERVAL_NEAR_RESTART.as_millis() < CHECKPOINT_INTERVAL.as_millis()) };
    }

    #[tokio::test]
    async fn the_checkpointer_copies_the_wal_long_before_the_writer_would_and_stops_with_the_db() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("zq.db");
        let db = EmbeddedDb::open(&path, SCHEMA, Durability::Process).unwrap();
        // A thread names itself once it runs.
        wait_until("one checkpointer thread", || {
            threads_named("sqlite-ckpt-zq") == 1
        })
        .await;
        let main_file = || std::fs::metadata(&path).map(|m| m.len()).unwrap_or(0);
        let before = main_file();
        // About 400 pages of WAL: far below the writer's own threshold.
        insert_rows(&db, 400).await;
        const { assert!(400 < WRITER_CHECKPOINT_PAGES) };
        wait_until("the main file received the WAL's pages", || {
            main_file() >= before + 400 * 3_000
        })
        .await;
        drop(db);
        wait_until("the checkpointer stopped with its database", || {
            threads_named("sqlite-ckpt-zq") == 0
        })
        .await;
    }

    /// Grows the WAL of `db` past [`WAL_KEEP_BYTES`] the way a steady load
    /// does — a reader holding an old snapshot keeps it from restarting —
    /// and checks that nothing is truncated while it grows.
    async fn grow_wal(db: &EmbeddedDb, path: &Path, wal_bytes: impl Fn() -> u64) -> Connection {
        let pin = crate::connect(path, OpenFlags::default()).unwrap();
        pin.execute_batch("BEGIN").unwrap();
        let _: i64 = pin
            .query_row("SELECT COUNT(*) FROM t", [], |r| r.get(0))
            .unwrap();
        insert_rows(db, 2_000).await;
        let grown = wal_bytes();
        assert!(
            grown > WAL_KEEP_BYTES,
            "the pinned WAL should have grown past {WAL_KEEP_BYTES} bytes: {grown}"
        );
        // Still pinned: the WAL's content stays large, nothing is tried.
        tokio::time::sleep(WAL_TRUNCATE_AFTER_LOW_LOAD * 2).await;
        assert!(wal_bytes() >= grown, "truncated under a reader");
        pin
    }

    async fn rows(db: &EmbeddedDb) -> i64 {
        db.read(|c| -> Result<i64, DbError> {
            Ok(c.query_row("SELECT COUNT(*) FROM t", [], |r| r.get(0))?)
        })
        .await
        .unwrap()
    }

    /// A grown WAL is truncated once the load stays low — no write at all,
    /// or a write now and then (as a purge round is) — and every row is
    /// still there.
    #[tokio::test]
    async fn a_grown_wal_is_truncated_once_the_load_stays_low() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("grow.db");
        let db = EmbeddedDb::open(&path, SCHEMA, Durability::Process).unwrap();
        let wal = dir.path().join("grow.db-wal");
        let wal_bytes = || std::fs::metadata(&wal).map(|m| m.len()).unwrap_or(0);
        let truncated = || wal_bytes() == 0;

        // No write after the load.
        let pin = grow_wal(&db, &path, wal_bytes).await;
        pin.execute_batch("COMMIT").unwrap();
        wait_until("the WAL truncated with no write", truncated).await;
        assert_eq!(rows(&db).await, 2_000);

        // A write every 50 ms after the load. The next write after the
        // truncation regrows the file by a few frames, so what shows it is
        // a file back under WAL_KEEP_BYTES (SQLite never shrinks it
        // itself), not an empty one: on a loaded machine the truncation can
        // fall between the check and the next write.
        let pin = grow_wal(&db, &path, wal_bytes).await;
        pin.execute_batch("COMMIT").unwrap();
        let shrunk = || wal_bytes() < WAL_KEEP_BYTES;
        for i in 0..200 {
            if shrunk() {
                break;
            }
            db.write(move |c| -> Result<(), DbError> {
                c.execute("INSERT INTO t (k, v) VALUES (?1, 0)", [format!("tick{i}")])?;
                Ok(())
            })
            .await
            .unwrap();
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        assert!(shrunk(), "the WAL not truncated at low load");
        assert!(rows(&db).await > 2_000);
        // Writes go on after the truncation.
        db.write(|c| -> Result<(), DbError> {
            c.execute("INSERT INTO t (k, v) VALUES ('after', 0)", [])?;
            Ok(())
        })
        .await
        .unwrap();
        assert!(wal_bytes() > 0);
    }
}
