//! The embedded durable store: SQLite in WAL mode with group commit.
//!
//! Why SQLite (rusqlite, bundled): it is a library, so `cargo run` needs no
//! server; WAL mode makes a committed transaction survive `kill -9` of the
//! process (the commit is in the WAL file before `COMMIT` returns), and with
//! `synchronous=FULL` it also survives power loss. Unique keys and
//! transactions are exactly what the barrier and the saga store need.
//!
//! Why one writer thread: SQLite allows one writer at a time anyway. Instead
//! of making concurrent requests queue for the lock and commit one by one,
//! the writer takes every job waiting in its queue, runs each inside its own
//! `SAVEPOINT` of one transaction, and commits them together — one WAL
//! append (and one fsync in power-loss mode) for the whole batch. A job that
//! fails is rolled back to its savepoint alone. A job that is one statement
//! ([`EmbeddedDb::write_statement`]) needs no savepoint: SQLite undoes a
//! failed statement by itself. Replies are sent only after
//! `COMMIT` returns, so nothing is acknowledged before it is durable.
//!
//! A write made while no other write of this database is in progress, and
//! after none has ended for a tenth of a millisecond, does not go to the
//! writer thread at all: the calling task takes the connection and commits
//! its own transaction inline. At low load that
//! saves two thread hand-offs per write (a wake-up of the writer, a wake-up
//! of the caller), which were most of an idle write's cost. As soon as two
//! writes overlap, they go through the writer thread and group-commit as
//! before (committing inline whenever the queue happened to be empty was
//! tried first: under load it blocked tokio workers and broke batches up,
//! and throughput fell; "no other write in progress" alone still cost 12%
//! at concurrency 64, where writes arrive every ~120 µs, hence the quiet
//! period). Work that starts many writes at once ([`grouped`]: a
//! participant's batch of calls) never commits inline. The durability is
//! the same either way: the caller gets its answer after `COMMIT` returned.
//!
//! Reads run on a small pool of read-only connections, which WAL lets proceed
//! concurrently with the writer.
//!
//! Bounded disk: files use `auto_vacuum=INCREMENTAL`. Deleted rows' pages go
//! to SQLite's freelist and are reused by later inserts whatever the mode;
//! incremental mode additionally lets [`EmbeddedDb::reclaim`] hand the
//! free pages beyond a reserve back to the file system (after a burst or a
//! shorter retention), without the full rewrite a `VACUUM` is. A file
//! created before (auto_vacuum NONE) is converted once at open by one
//! `VACUUM`, logged with its size and duration.

#![warn(missing_docs)]

mod checkpointer;
mod error_class;
mod slow_log;

pub use error_class::{ErrorClass, classify};

use rusqlite::{Connection, OpenFlags};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, TryLockError};
use std::time::Instant;
use tokio::sync::{mpsc, oneshot};

/// How durable a commit is before it is acknowledged. One setting for the
/// whole stack (`--durability` / `DURABILITY`): a participant that could
/// lose an acknowledged charge on power loss while the orchestrator kept
/// its record of it would be worse than either alone.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum Durability {
    /// Survives a crash or `kill -9` of the process (WAL, synchronous=NORMAL).
    #[default]
    Process,
    /// Also survives power loss: fsync on every commit (synchronous=FULL).
    PowerLoss,
}

impl Durability {
    /// What an acknowledged write survives, for logs.
    pub fn guarantee(self) -> &'static str {
        match self {
            Durability::Process => {
                "process: acknowledged writes survive a crash or kill -9, not a power loss"
            }
            Durability::PowerLoss => {
                "power-loss: acknowledged writes are fsynced (group commit) and survive a power loss"
            }
        }
    }
}

/// Most jobs committed in one transaction.
const MAX_BATCH: usize = 512;
/// Read connections kept open.
const READERS: usize = 4;

/// Why an embedded store call failed.
#[derive(Debug, thiserror::Error)]
pub enum DbError {
    #[error("sqlite: {0}")]
    /// SQLite refused or failed the statement.
    Sqlite(#[from] rusqlite::Error),
    #[error("the store's writer thread has stopped")]
    /// The writer thread is gone (the process is shutting down or it panicked).
    WriterGone,
    #[error("opening {path}: {source}")]
    /// The database file or its directory could not be created.
    Open {
        /// What could not be opened.
        path: PathBuf,
        #[source]
        /// Why.
        source: std::io::Error,
    },
}

/// A handle to one SQLite database file. Cheap to clone.
#[derive(Clone)]
pub struct EmbeddedDb {
    jobs: mpsc::UnboundedSender<Box<dyn Job>>,
    writer: Arc<Writer>,
    readers: Arc<Mutex<Vec<Connection>>>,
    path: Arc<PathBuf>,
}

/// The write connection, shared by the writer thread (batches) and callers
/// that find the database idle (inline commits).
struct Writer {
    conn: Mutex<Connection>,
    /// Writes in progress (called and not yet answered or dropped): a write
    /// that finds none besides itself commits inline.
    active: AtomicUsize,
    /// When the last write of this database ended (µs since `epoch`): a
    /// write commits inline only after the database has been quiet for
    /// [`INLINE_AFTER_QUIET_US`], so under load — writes arriving faster
    /// than that — every write still joins a group commit.
    last_end_us: AtomicU64,
    epoch: Instant,
    /// Writes committed inline so far (for tests and diagnostics).
    inline_commits: AtomicU64,
    /// Slow commits, logged at most once a second.
    slow_commits: slow_log::SlowLog,
    /// The file's stem, the `db` label of the commit counters (shared:
    /// labelling a commit allocates no string).
    db: metrics::SharedString,
}

/// How long the database must have been without writes for one to commit
/// inline (µs). Shorter than any gap between writes at low load — an idle
/// saga's two writes are a participant round trip apart (~400 µs), but one
/// saga's last write and the next saga's first only a reply and a new call
/// (~150–250 µs), which 250 µs sent through the writer thread (BENCHMARKS.md,
/// session 7: idle orchestrator CPU −9% at 100) — and about the gap between
/// writes at concurrency 64 (~100 µs at 10,000 writes/s), where most still
/// overlap and group-commit: no write in progress alone, without a quiet
/// period, cost 17% of the throughput there; 100 µs cost nothing measurable.
const INLINE_AFTER_QUIET_US: u64 = 100;

impl Writer {
    fn now_us(&self) -> u64 {
        u64::try_from(self.epoch.elapsed().as_micros()).unwrap_or(u64::MAX)
    }

    /// Notes that a write (or a batch) ended now.
    fn ended(&self) {
        self.last_end_us.store(self.now_us(), Ordering::Release);
    }

    /// Counts one commit of `writes` writes (`mode`: "inline" or "group")
    /// that began at `began`: `embedded_store_commits_total{db,mode}` and
    /// `embedded_store_committed_writes_total{db,mode}`, whose ratio is the
    /// mean group-commit size — how well writes are being batched — and
    /// `embedded_store_commit_seconds{db,mode}`, from `BEGIN` to the end of
    /// `COMMIT`. A slow commit is also logged (see [`slow_log`]): every
    /// write of the database waited behind it.
    fn count_commit(&self, mode: &'static str, writes: usize, began: Instant) {
        let took = began.elapsed();
        let labels = [
            ("db", self.db.clone()),
            ("mode", metrics::SharedString::const_str(mode)),
        ];
        metrics::counter!("embedded_store_commits_total", &labels).increment(1);
        metrics::counter!("embedded_store_committed_writes_total", &labels)
            .increment(u64::try_from(writes).unwrap_or(u64::MAX));
        metrics::histogram!("embedded_store_commit_seconds", &labels).record(took);
        if let Some(left_out) = self.slow_commits.admit(began, took) {
            tracing::warn!(
                db = &*self.db,
                mode,
                writes,
                ms = took.as_secs_f64() * 1e3,
                slow_commits_not_logged = left_out,
                "slow commit: every write of this database waited behind it"
            );
        }
    }

    /// Whether no write ended within the quiet period.
    fn quiet(&self) -> bool {
        self.now_us()
            .saturating_sub(self.last_end_us.load(Ordering::Acquire))
            >= INLINE_AFTER_QUIET_US
    }
}

/// Counts one write as in progress until dropped (also when the caller
/// drops the write's future).
struct Active<'a>(&'a AtomicUsize);

impl<'a> Active<'a> {
    /// Counts a write; true when it is the only one.
    fn enter(count: &'a AtomicUsize) -> (Self, bool) {
        let alone = count.fetch_add(1, Ordering::AcqRel) == 0;
        (Active(count), alone)
    }
}

impl Drop for Active<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::AcqRel);
    }
}

impl std::fmt::Debug for EmbeddedDb {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EmbeddedDb")
            .field("path", &self.path)
            .finish()
    }
}

impl EmbeddedDb {
    /// Opens (creating if needed) the database at `path`, applies `schema`
    /// and starts the writer thread.
    pub fn open(path: &Path, schema: &str, durability: Durability) -> Result<Self, DbError> {
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir).map_err(|source| DbError::Open {
                path: dir.to_path_buf(),
                source,
            })?;
        }
        let writer = Connection::open(path)?;
        incremental_auto_vacuum(&writer, path)?;
        writer.pragma_update(None, "journal_mode", "WAL")?;
        let synchronous = match durability {
            Durability::Process => "NORMAL",
            Durability::PowerLoss => "FULL",
        };
        writer.pragma_update(None, "synchronous", synchronous)?;
        writer.pragma_update(None, "busy_timeout", 5000)?;
        // The checkpointer thread copies the WAL into the database file; the
        // writer checkpoints itself (and so restarts the WAL) only past
        // this many pages (see checkpointer::WRITER_CHECKPOINT_PAGES).
        // Enough page cache that hot index pages stay in memory.
        writer.pragma_update(
            None,
            "wal_autocheckpoint",
            checkpointer::WRITER_CHECKPOINT_PAGES,
        )?;
        writer.pragma_update(None, "cache_size", -8_000)?;
        writer.pragma_update(None, "temp_store", "MEMORY")?;
        writer.set_prepared_statement_cache_capacity(64);
        writer.execute_batch(schema)?;
        tracing::info!(db = %path.display(), durability = durability.guarantee(), "embedded store open");

        let mut readers = Vec::with_capacity(READERS);
        for _ in 0..READERS {
            let reader = Connection::open_with_flags(
                path,
                OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_NO_MUTEX,
            )?;
            reader.pragma_update(None, "busy_timeout", 5000)?;
            readers.push(reader);
        }

        let (jobs, queue) = mpsc::unbounded_channel();
        let db = path.file_stem().and_then(|s| s.to_str()).unwrap_or("db");
        let name = format!("sqlite-writer-{db}");
        let db = metrics::SharedString::from_shared(Arc::from(db));
        let writer = Arc::new(Writer {
            conn: Mutex::new(writer),
            db,
            active: AtomicUsize::new(0),
            last_end_us: AtomicU64::new(0),
            epoch: Instant::now(),
            inline_commits: AtomicU64::new(0),
            slow_commits: slow_log::SlowLog::default(),
        });
        let thread_writer = writer.clone();
        std::thread::Builder::new()
            .name(name)
            .spawn(move || run_writer(&thread_writer, queue))
            .map_err(|source| DbError::Open {
                path: path.to_path_buf(),
                source,
            })?;
        checkpointer::spawn(path, &writer)?;
        Ok(EmbeddedDb {
            jobs,
            writer,
            readers: Arc::new(Mutex::new(readers)),
            path: Arc::new(path.to_path_buf()),
        })
    }

    /// Runs `f` inside a write transaction (its own savepoint of a group
    /// commit). An `Err` rolls back everything `f` did; an `Ok` is returned
    /// only after the commit is durable.
    pub async fn write<R, E, F>(&self, f: F) -> Result<R, E>
    where
        F: FnOnce(&Connection) -> Result<R, E> + Send + 'static,
        R: Send + 'static,
        E: From<DbError> + Send + 'static,
    {
        self.submit(f, Guard::Savepoint).await
    }

    /// [`write`](Self::write) for a job whose only change is **one**
    /// INSERT, UPDATE or DELETE statement (it may read before and after
    /// it). A failing statement is undone by SQLite itself, and a job that
    /// returns `Err` after a statement that succeeded (an UPDATE that
    /// matched no row, say) has changed nothing, so the job needs no
    /// savepoint of its own in the group commit: SQLite copies every page a
    /// savepoint touches into its statement journal first, which cost 4%
    /// of the orchestrator's CPU per saga at concurrency 64 (BENCHMARKS.md).
    ///
    /// The contract is checked, not trusted: a job that changed rows and
    /// then returned `Err` cannot be undone alone, so its whole group commit
    /// is rolled back and every job in it fails (logged as an error) —
    /// nothing half-done is ever committed or acknowledged.
    pub async fn write_statement<R, E, F>(&self, f: F) -> Result<R, E>
    where
        F: FnOnce(&Connection) -> Result<R, E> + Send + 'static,
        R: Send + 'static,
        E: From<DbError> + Send + 'static,
    {
        self.submit(f, Guard::Statement).await
    }

    async fn submit<R, E, F>(&self, f: F, guard: Guard) -> Result<R, E>
    where
        F: FnOnce(&Connection) -> Result<R, E> + Send + 'static,
        R: Send + 'static,
        E: From<DbError> + Send + 'static,
    {
        let (_active, alone) = Active::enter(&self.writer.active);
        if alone && self.writer.quiet() && GROUPED.try_with(|_| ()).is_err() {
            match self.writer.conn.try_lock() {
                Ok(conn) => {
                    let began = Instant::now();
                    let result = commit_inline(&conn, f);
                    self.writer.ended();
                    self.writer.inline_commits.fetch_add(1, Ordering::Relaxed);
                    if result.is_ok() {
                        self.writer.count_commit("inline", 1, began);
                    }
                    return result;
                }
                Err(TryLockError::Poisoned(_)) => return Err(E::from(DbError::WriterGone)),
                Err(TryLockError::WouldBlock) => {}
            }
        }
        let (reply, answer) = oneshot::channel();
        let job = WriteJob {
            work: Some(f),
            guard,
            result: None,
            reply: Some(reply),
        };
        self.jobs
            .send(Box::new(job))
            .map_err(|_| E::from(DbError::WriterGone))?;
        answer.await.map_err(|_| E::from(DbError::WriterGone))?
    }

    /// Runs `f` on a read-only connection (a consistent snapshot).
    pub async fn read<R, E, F>(&self, f: F) -> Result<R, E>
    where
        F: FnOnce(&Connection) -> Result<R, E> + Send + 'static,
        R: Send + 'static,
        E: From<DbError> + Send + 'static,
    {
        let readers = self.readers.clone();
        let path = self.path.clone();
        let joined = tokio::task::spawn_blocking(move || {
            let pooled = readers.lock().ok().and_then(|mut pool| pool.pop());
            let conn = match pooled {
                Some(conn) => conn,
                None => {
                    Connection::open_with_flags(path.as_path(), OpenFlags::SQLITE_OPEN_READ_ONLY)
                        .map_err(|e| E::from(DbError::from(e)))?
                }
            };
            let result = f(&conn);
            if let Ok(mut pool) = readers.lock()
                && pool.len() < READERS
            {
                pool.push(conn);
            }
            result
        })
        .await;
        joined.map_err(|_| E::from(DbError::WriterGone))?
    }
}

/// The file's size by SQLite's own accounting.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct FileSize {
    /// Pages in the database file.
    pub page_count: u64,
    /// Bytes per page.
    pub page_size: u64,
    /// Pages on the freelist (free, reused by the next inserts).
    pub freelist_count: u64,
}

impl FileSize {
    /// page_count × page_size: the main file's size (the WAL excluded).
    pub fn bytes(&self) -> u64 {
        self.page_count * self.page_size
    }
}

fn pragma_u64(conn: &Connection, name: &str) -> Result<u64, rusqlite::Error> {
    let v: i64 = conn.query_row(&format!("PRAGMA {name}"), [], |r| r.get(0))?;
    Ok(u64::try_from(v).unwrap_or(0))
}

fn file_size(conn: &Connection) -> Result<FileSize, rusqlite::Error> {
    Ok(FileSize {
        page_count: pragma_u64(conn, "page_count")?,
        page_size: pragma_u64(conn, "page_size")?,
        freelist_count: pragma_u64(conn, "freelist_count")?,
    })
}

/// Makes the file `auto_vacuum=INCREMENTAL`: set before the first table of
/// a new file; an existing file in another mode needs one `VACUUM` for the
/// change to take effect (the whole file is rewritten: logged, with how long
/// it took).
fn incremental_auto_vacuum(conn: &Connection, path: &Path) -> Result<(), DbError> {
    const INCREMENTAL: u64 = 2;
    if pragma_u64(conn, "auto_vacuum")? == INCREMENTAL {
        return Ok(());
    }
    conn.pragma_update(None, "auto_vacuum", "INCREMENTAL")?;
    if pragma_u64(conn, "auto_vacuum")? == INCREMENTAL {
        return Ok(()); // A new file: nothing written yet.
    }
    let before = file_size(conn)?;
    let started = Instant::now();
    tracing::info!(db = %path.display(), bytes = before.bytes(), "converting the file to incremental auto-vacuum: one VACUUM (rewrites the whole file once)");
    conn.execute_batch("VACUUM")?;
    tracing::info!(
        db = %path.display(),
        bytes = file_size(conn)?.bytes(),
        took_ms = started.elapsed().as_millis() as u64,
        "file converted to incremental auto-vacuum"
    );
    Ok(())
}

impl EmbeddedDb {
    /// The file's size, free pages included.
    pub async fn file_size(&self) -> Result<FileSize, DbError> {
        self.read(|conn| Ok(file_size(conn)?)).await
    }

    /// Gives the free pages beyond a reserve back to the file system
    /// (`PRAGMA incremental_vacuum`), as one job of the group commit:
    /// the reserve — a quarter of the file — stays for the next inserts to
    /// reuse, so a steady load neither grows the file nor makes it shrink
    /// and grow again every round. Returns the bytes released.
    pub async fn reclaim(&self) -> Result<u64, DbError> {
        self.write(|conn| {
            let size = file_size(conn)?;
            let reserve = size.page_count / 4;
            let excess = size.freelist_count.saturating_sub(reserve);
            if excess == 0 {
                return Ok(0);
            }
            // Each step of the pragma frees one page and yields a row
            // (which `execute` would stop at): step it to the end.
            let mut stmt = conn.prepare(&format!("PRAGMA incremental_vacuum({excess})"))?;
            let mut rows = stmt.raw_query();
            let mut steps = 0u64;
            while rows.next()?.is_some() {
                steps += 1;
            }
            tracing::debug!(steps, excess, "incremental vacuum");
            let after = file_size(conn)?;
            Ok(size.bytes().saturating_sub(after.bytes()))
        })
        .await
    }
}

tokio::task_local! {
    /// Set while a task runs [`grouped`]: its writes never commit inline.
    static GROUPED: ();
}

/// Runs `work` with every write it makes joining the writer thread's group
/// commit, never committing inline: for work that starts many writes at
/// once (a participant's batch of calls), where the first finding the
/// database quiet would commit alone on the calling task while the others
/// wait behind it, and split the batch over more commits.
pub async fn grouped<F: std::future::Future>(work: F) -> F::Output {
    GROUPED.scope((), work).await
}

/// A unit of work for the writer thread, type-erased so one queue carries
/// jobs of every result type.
trait Job: Send {
    /// How a failure of this job is undone inside the group commit.
    fn guard(&self) -> Guard;
    /// Runs the work; true when it succeeded (keep its savepoint).
    fn run(&mut self, conn: &Connection) -> bool;
    /// Sends the reply once the batch's fate is known.
    fn complete(self: Box<Self>, commit: Result<(), &rusqlite::Error>);
}

/// How a job's failure is undone without undoing the rest of its group
/// commit.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Guard {
    /// The job runs inside `SAVEPOINT job`; a failure rolls back to it.
    Savepoint,
    /// One statement, which SQLite undoes itself when it fails
    /// ([`EmbeddedDb::write_statement`]).
    Statement,
}

struct WriteJob<F, R, E> {
    work: Option<F>,
    guard: Guard,
    result: Option<Result<R, E>>,
    reply: Option<oneshot::Sender<Result<R, E>>>,
}

impl<F, R, E> Job for WriteJob<F, R, E>
where
    F: FnOnce(&Connection) -> Result<R, E> + Send,
    R: Send,
    E: From<DbError> + Send,
{
    fn guard(&self) -> Guard {
        self.guard
    }

    fn run(&mut self, conn: &Connection) -> bool {
        let Some(work) = self.work.take() else {
            return false;
        };
        let result = work(conn);
        let ok = result.is_ok();
        self.result = Some(result);
        ok
    }

    fn complete(mut self: Box<Self>, commit: Result<(), &rusqlite::Error>) {
        let result = match (self.result.take(), commit) {
            (Some(Err(e)), _) => Err(e),
            (Some(Ok(r)), Ok(())) => Ok(r),
            (Some(Ok(_)), Err(e)) => Err(E::from(DbError::Sqlite(clone_error(e)))),
            (None, Ok(())) => Err(E::from(DbError::WriterGone)),
            (None, Err(e)) => Err(E::from(DbError::Sqlite(clone_error(e)))),
        };
        if let Some(reply) = self.reply.take() {
            // The caller may have gone away (deadline); the write stands.
            let _ = reply.send(result);
        }
    }
}

/// rusqlite errors are not `Clone`; a failed commit is reported to every job
/// of the batch with the same code and message.
fn clone_error(e: &rusqlite::Error) -> rusqlite::Error {
    match e {
        rusqlite::Error::SqliteFailure(code, msg) => {
            rusqlite::Error::SqliteFailure(*code, msg.clone())
        }
        other => rusqlite::Error::ToSqlConversionFailure(other.to_string().into()),
    }
}

/// One write committed on the caller's thread, alone in its transaction:
/// an `Err` from `f` or a failed commit rolls everything back.
fn commit_inline<R, E, F>(conn: &Connection, f: F) -> Result<R, E>
where
    F: FnOnce(&Connection) -> Result<R, E>,
    E: From<DbError>,
{
    let sqlite = |e: rusqlite::Error| E::from(DbError::Sqlite(e));
    control(conn, "BEGIN IMMEDIATE").map_err(sqlite)?;
    let result = f(conn);
    let committed = match &result {
        Ok(_) => control(conn, "COMMIT"),
        Err(_) => Ok(()),
    };
    if result.is_err() || committed.is_err() {
        let _ = control(conn, "ROLLBACK");
    }
    committed.map_err(sqlite)?;
    result
}

fn run_writer(writer: &Writer, mut queue: mpsc::UnboundedReceiver<Box<dyn Job>>) {
    let mut batch: Vec<Box<dyn Job>> = Vec::with_capacity(MAX_BATCH);
    while let Some(first) = queue.blocking_recv() {
        // Waits out an inline commit in progress, if any.
        let Ok(conn) = writer.conn.lock() else {
            return;
        };
        batch.push(first);
        while batch.len() < MAX_BATCH {
            match queue.try_recv() {
                Ok(job) => batch.push(job),
                Err(_) => break,
            }
        }
        let began = Instant::now();
        let commit = run_batch(&conn, &mut batch);
        match &commit {
            Ok(()) => writer.count_commit("group", batch.len(), began),
            Err(error) => {
                tracing::error!(%error, jobs = batch.len(), "group commit failed; every job in it is reported failed");
                let _ = conn.execute_batch("ROLLBACK");
            }
        }
        drop(conn);
        writer.ended();
        for job in batch.drain(..) {
            job.complete(commit.as_ref().map(|_| ()));
        }
    }
}

fn run_batch(conn: &Connection, batch: &mut [Box<dyn Job>]) -> Result<(), rusqlite::Error> {
    control(conn, "BEGIN IMMEDIATE")?;
    for job in batch.iter_mut() {
        match job.guard() {
            Guard::Savepoint => {
                control(conn, "SAVEPOINT job")?;
                if !job.run(conn) {
                    control(conn, "ROLLBACK TO job")?;
                }
                control(conn, "RELEASE job")?;
            }
            Guard::Statement => {
                // A failure that changed rows cannot be undone alone; one
                // that ended the transaction (SQLite rolls back by itself on
                // I/O errors, a full disk, no memory) took the jobs before
                // it along. Either way the batch fails as a whole.
                let before = conn.total_changes();
                if !job.run(conn) && (conn.total_changes() != before || conn.is_autocommit()) {
                    return Err(rusqlite::Error::SqliteFailure(
                        rusqlite::ffi::Error::new(rusqlite::ffi::SQLITE_MISUSE),
                        Some(
                            "a write_statement job failed after changing rows, or its failure \
                             ended the transaction: the whole group commit is rolled back"
                                .to_owned(),
                        ),
                    ));
                }
            }
        }
    }
    control(conn, "COMMIT")
}

/// Runs one transaction-control statement (`BEGIN`, `SAVEPOINT x`,
/// `RELEASE x`, ...) from the connection's statement cache: a group commit
/// runs 2 + 2 per job of them, an inline commit 2, a participant's rule 2
/// more, and `execute_batch` would compile each one every time.
pub fn control(conn: &Connection, sql: &str) -> Result<(), rusqlite::Error> {
    conn.prepare_cached(sql)?.execute([]).map(|_| ())
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

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
                            c.execute(
                                "INSERT INTO t (k, v) VALUES (?1, ?2)",
                                (format!("k{i}"), i),
                            )?;
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
            let conn = Connection::open(&path).unwrap();
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
}
