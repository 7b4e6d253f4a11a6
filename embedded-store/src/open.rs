//! Opening a database: every connection this project makes, the pragmas and
//! the schema.
//!
//! Several connections open one file at once in normal operation: two
//! orchestrator instances sharing a store, a restarted process racing the
//! one it replaces, the checkpointer and the readers beside the writer, a
//! tool reading a live store. Turning a new file into WAL mode, setting its
//! auto-vacuum mode and creating its tables each take a lock, and a
//! connection without a busy timeout that meets one fails at once with
//! "database is locked". So every connection is made by [`connect`], which
//! sets the busy timeout before any statement or pragma runs on it, and a
//! timeout that still expires while opening is reported as
//! [`DbError::Locked`], naming the file and saying that another connection
//! holds it.
//!
//! One statement ignores the busy timeout: SQLite does not run the busy
//! handler for `PRAGMA journal_mode=WAL` (converting a file needs exclusive
//! access), so two connections converting one new file at once make one
//! fail at once. [`ensure_wal`] converts only a file that is not WAL yet
//! (WAL is a property of the file: after the first open nothing is taken)
//! and retries the conversion itself, within the same timeout.

use crate::vacuum::incremental_auto_vacuum;
use crate::{DbError, Durability, EmbeddedDb, checkpointer, readers, writer};
use rusqlite::{Connection, ErrorCode, OpenFlags};
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// The write connection's page cache, in KiB (`PRAGMA cache_size`).
pub const CACHE_KIB: i64 = 2_048;

/// How long a connection waits for a lock another connection holds before
/// a statement (opening included) fails as busy.
pub const BUSY_TIMEOUT: Duration = Duration::from_secs(5);

/// Opens a connection to `path` with `flags`, waiting up to [`BUSY_TIMEOUT`]
/// for locks: the timeout is set before anything else runs on it. Every
/// SQLite connection of the project (stores, migrations, tools and tests)
/// is made here.
pub fn connect(path: &Path, flags: OpenFlags) -> Result<Connection, rusqlite::Error> {
    connect_waiting(path, flags, BUSY_TIMEOUT)
}

fn connect_waiting(
    path: &Path,
    flags: OpenFlags,
    busy_timeout: Duration,
) -> Result<Connection, rusqlite::Error> {
    let conn = Connection::open_with_flags(path, flags)?;
    conn.busy_timeout(busy_timeout)?;
    Ok(conn)
}

/// Read-write, created if missing: the flags of [`Connection::open`].
fn read_write() -> OpenFlags {
    OpenFlags::default()
}

impl EmbeddedDb {
    /// Opens (creating if needed) the database at `path`, applies `schema`
    /// and starts the writer thread. Waits up to [`BUSY_TIMEOUT`] for
    /// another connection's lock.
    pub fn open(path: &Path, schema: &str, durability: Durability) -> Result<Self, DbError> {
        Self::open_waiting(path, schema, durability, BUSY_TIMEOUT)
    }

    /// [`open`](Self::open), waiting up to `busy_timeout` for locks (while
    /// opening and for every statement after).
    pub fn open_waiting(
        path: &Path,
        schema: &str,
        durability: Durability,
        busy_timeout: Duration,
    ) -> Result<Self, DbError> {
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir).map_err(|source| DbError::Open {
                path: dir.to_path_buf(),
                source,
            })?;
        }
        let locked = |e: DbError| match e {
            DbError::Sqlite(source) if is_busy(&source) => DbError::Locked {
                path: path.to_path_buf(),
                waited: busy_timeout,
                source,
            },
            other => other,
        };
        let conn = connect_waiting(path, read_write(), busy_timeout)
            .map_err(DbError::from)
            .map_err(locked)?;
        prepare(&conn, path, schema, durability, busy_timeout).map_err(locked)?;
        tracing::info!(db = %path.display(), durability = durability.guarantee(), "embedded store open");
        let readers = readers::Readers::open(path)
            .map_err(DbError::from)
            .map_err(locked)?;
        let name = path.file_stem().and_then(|s| s.to_str()).unwrap_or("db");
        let writer = Arc::new(writer::Writer::new(conn, name));
        let spawn_failed = |source| DbError::Open {
            path: path.to_path_buf(),
            source,
        };
        let jobs = writer::spawn(&writer, name).map_err(spawn_failed)?;
        checkpointer::spawn(path, &writer).map_err(locked)?;
        Ok(EmbeddedDb {
            jobs,
            writer,
            readers: Arc::new(readers),
            path: Arc::new(path.to_path_buf()),
        })
    }
}

/// Whether `error` is SQLite's "busy" or "locked": another connection held
/// a lock for longer than the busy timeout.
fn is_busy(error: &rusqlite::Error) -> bool {
    matches!(
        error.sqlite_error_code(),
        Some(ErrorCode::DatabaseBusy | ErrorCode::DatabaseLocked)
    )
}

/// Sets the write connection's pragmas and applies `schema`.
fn prepare(
    conn: &Connection,
    path: &Path,
    schema: &str,
    durability: Durability,
    busy_timeout: Duration,
) -> Result<(), DbError> {
    incremental_auto_vacuum(conn, path)?;
    ensure_wal(conn, busy_timeout)?;
    let synchronous = match durability {
        Durability::Process => "NORMAL",
        Durability::PowerLoss => "FULL",
    };
    conn.pragma_update(None, "synchronous", synchronous)?;
    // The checkpointer thread copies the WAL into the database file; the
    // writer checkpoints itself (and so restarts the WAL) only past this
    // many pages (see checkpointer::WRITER_CHECKPOINT_PAGES).
    conn.pragma_update(
        None,
        "wal_autocheckpoint",
        checkpointer::WRITER_CHECKPOINT_PAGES,
    )?;
    // Enough page cache that hot index pages stay in memory, and no more:
    // SQLite walks the writer's whole page cache at the end of every
    // transaction in which a B-tree page split renumbered pages (they pass
    // through the lock-byte page's number, which leaves the cache's
    // largest key past the end of the file), and splits come with nearly
    // every group commit of growing saga documents. At 8 MB that walk was
    // 2-4% of the orchestrator's CPU at concurrency 64 (BENCHMARKS.md).
    conn.pragma_update(None, "cache_size", -CACHE_KIB)?;
    conn.pragma_update(None, "temp_store", "MEMORY")?;
    conn.set_prepared_statement_cache_capacity(64);
    conn.execute_batch(schema)?;
    Ok(())
}

/// Puts the file in WAL mode unless it already is, retrying a conversion
/// that another connection's lock refused (SQLite runs no busy handler for
/// it) until `busy_timeout` has passed.
fn ensure_wal(conn: &Connection, busy_timeout: Duration) -> Result<(), rusqlite::Error> {
    let is_wal = |mode: &str| mode.eq_ignore_ascii_case("wal");
    let deadline = Instant::now() + busy_timeout;
    let mut pause = Duration::from_millis(1);
    loop {
        let mode: String = conn.query_row("PRAGMA journal_mode", [], |r| r.get(0))?;
        if is_wal(&mode) {
            return Ok(());
        }
        let refused = match conn.query_row("PRAGMA journal_mode=WAL", [], |r| r.get::<_, String>(0))
        {
            Ok(mode) if is_wal(&mode) => return Ok(()),
            // Left in its mode without an error: the lock was not granted.
            Ok(_) => busy_error(),
            Err(e) if is_busy(&e) => e,
            Err(e) => return Err(e),
        };
        if Instant::now() >= deadline {
            return Err(refused);
        }
        std::thread::sleep(pause);
        pause = (pause * 2).min(Duration::from_millis(50));
    }
}

/// SQLite's "database is locked", for a conversion refused without one.
fn busy_error() -> rusqlite::Error {
    rusqlite::Error::SqliteFailure(
        rusqlite::ffi::Error::new(rusqlite::ffi::SQLITE_BUSY),
        Some("the file stayed out of WAL mode: another connection holds it".to_owned()),
    )
}
