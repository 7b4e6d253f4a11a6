//! The write path: one connection, one writer thread, group commit.
//!
//! SQLite allows one writer at a time. Instead of making concurrent
//! requests queue for the lock and commit one by one, the writer thread
//! takes every job waiting in its queue, runs each inside its own
//! `SAVEPOINT` of one transaction, and commits them together: one WAL
//! append (and one fsync in power-loss mode) for the whole batch. A job
//! that fails is rolled back to its savepoint alone. A job that is one
//! statement ([`crate::EmbeddedDb::write_statement`]) needs no savepoint:
//! SQLite undoes a failed statement by itself. Replies are sent only after
//! `COMMIT` returns, so nothing is acknowledged before it is durable.
//!
//! A write made while no other write of this database is in progress, and
//! after none has ended for [`INLINE_AFTER_QUIET_US`], does not go to the
//! writer thread at all: the calling task takes the connection and commits
//! its own transaction inline. At low load that saves two thread hand-offs
//! per write (a wake-up of the writer, a wake-up of the caller), most of an
//! idle write's cost. As soon as writes overlap they go through the writer
//! thread and group-commit. Work that starts many writes at once
//! ([`grouped`]: a participant's batch of calls) never commits inline. The
//! durability is the same either way: the caller gets its answer after
//! `COMMIT` returned.

use crate::{DbError, slow_log};
use rusqlite::Connection;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, TryLockError};
use std::time::Instant;
use tokio::sync::{mpsc, oneshot};

/// Most jobs committed in one transaction.
const MAX_BATCH: usize = 512;

/// The queue of jobs for the writer thread.
pub(crate) type Jobs = mpsc::UnboundedSender<Box<dyn Job>>;

/// Starts the writer thread of `writer`, named after the database; it ends
/// when every [`Jobs`] sender is dropped.
pub(crate) fn spawn(writer: &Arc<Writer>, name: &str) -> std::io::Result<Jobs> {
    let (jobs, queue) = mpsc::unbounded_channel();
    let thread_writer = writer.clone();
    std::thread::Builder::new()
        .name(format!("sqlite-writer-{name}"))
        .spawn(move || run_writer(&thread_writer, queue))?;
    Ok(jobs)
}

/// The write connection, shared by the writer thread (batches) and callers
/// that find the database idle (inline commits).
pub(crate) struct Writer {
    pub(crate) conn: Mutex<Connection>,
    /// Writes in progress (called and not yet answered or dropped): a write
    /// that finds none besides itself commits inline.
    pub(crate) active: AtomicUsize,
    /// When the last write of this database ended (µs since `epoch`): a
    /// write commits inline only after the database has been quiet for
    /// [`INLINE_AFTER_QUIET_US`], so under load — writes arriving faster
    /// than that — every write still joins a group commit.
    last_end_us: AtomicU64,
    epoch: Instant,
    /// Writes committed inline so far (for tests and diagnostics).
    pub(crate) inline_commits: AtomicU64,
    /// Slow commits, logged at most once a second.
    slow_commits: slow_log::SlowLog,
    /// The file's stem, the `db` label of the commit counters (shared:
    /// labelling a commit allocates no string).
    pub(crate) db: metrics::SharedString,
}

/// How long the database must have been without writes for one to commit
/// inline (µs). Shorter than the gap between one saga's last write and the
/// next saga's first at low load (~150–250 µs: a reply and a new call; a
/// longer period sends those through the writer thread and costs ~9% of the
/// idle orchestrator's CPU), and about the gap between writes at
/// concurrency 64 (~100 µs at 10,000 writes/s), where most writes still
/// overlap and group-commit. Without a quiet period ("no other write in
/// progress" alone) concurrency 64 loses ~17% of its throughput to writes
/// that commit alone on tokio workers.
const INLINE_AFTER_QUIET_US: u64 = 100;

impl Writer {
    pub(crate) fn new(conn: Connection, db: &str) -> Self {
        Writer {
            conn: Mutex::new(conn),
            db: metrics::SharedString::from_shared(Arc::from(db)),
            active: AtomicUsize::new(0),
            last_end_us: AtomicU64::new(0),
            epoch: Instant::now(),
            inline_commits: AtomicU64::new(0),
            slow_commits: slow_log::SlowLog::new(slow_log::SLOW_COMMIT),
        }
    }

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
    /// `embedded_store_commit_duration_seconds{db,mode}`, from `BEGIN` to the end of
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
        metrics::histogram!("embedded_store_commit_duration_seconds", &labels).record(took);
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

impl Writer {
    /// Runs `f` as one write: inline when the database is idle, else as a
    /// job of the writer thread's next group commit (see the module doc).
    pub(crate) async fn submit<R, E, F>(&self, jobs: &Jobs, f: F, guard: Guard) -> Result<R, E>
    where
        F: FnOnce(&Connection) -> Result<R, E> + Send + 'static,
        R: Send + 'static,
        E: From<DbError> + Send + 'static,
    {
        let (_active, alone) = Active::enter(&self.active);
        if alone && self.quiet() && GROUPED.try_with(|_| ()).is_err() {
            match self.conn.try_lock() {
                Ok(conn) => {
                    let began = Instant::now();
                    let result = commit_inline(&conn, f);
                    self.ended();
                    self.inline_commits.fetch_add(1, Ordering::Relaxed);
                    if result.is_ok() {
                        self.count_commit("inline", 1, began);
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
        jobs.send(Box::new(job))
            .map_err(|_| E::from(DbError::WriterGone))?;
        answer.await.map_err(|_| E::from(DbError::WriterGone))?
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
pub(crate) trait Job: Send {
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
pub(crate) enum Guard {
    /// The job runs inside `SAVEPOINT job`; a failure rolls back to it.
    Savepoint,
    /// One statement, which SQLite undoes itself when it fails
    /// ([`EmbeddedDb::write_statement`]).
    Statement,
}

pub(crate) struct WriteJob<F, R, E> {
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
