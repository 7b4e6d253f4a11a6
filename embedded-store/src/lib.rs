//! The embedded durable store: SQLite in WAL mode with group commit.
//!
//! Why SQLite (rusqlite, bundled): it is a library, so `cargo run` needs no
//! server; WAL mode makes a committed transaction survive `kill -9` of the
//! process (the commit is in the WAL file before `COMMIT` returns), and with
//! `synchronous=FULL` it also survives power loss. Unique keys and
//! transactions are exactly what the barrier and the saga store need.
//!
//! Module map:
//! - [`open`](EmbeddedDb::open) (`open.rs`): every connection this project
//!   opens ([`connect`]), with its busy timeout set before anything else
//!   runs on it, so several processes opening one file wait for each other;
//!   the pragmas and the schema.
//! - `writer.rs`: the one write connection, its writer thread and the group
//!   commit; an idle write commits inline on its caller's task.
//! - `readers.rs`: a few read-only connections, which WAL lets read while
//!   the writer writes.
//! - `checkpointer.rs`: copies the WAL into the file off the commit path.
//! - `vacuum.rs`: the file's size and the release of free pages.
//! - `error_class.rs`: which failures pass and which need a person.

#![warn(missing_docs)]

mod checkpointer;
mod error_class;
mod open;
mod readers;
mod slow_log;
mod vacuum;
mod writer;

pub use error_class::{ErrorClass, classify};
pub use open::{BUSY_TIMEOUT, connect};
pub use vacuum::FileSize;
pub use writer::{control, grouped};

use rusqlite::Connection;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

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

/// Why an embedded store call failed.
#[derive(Debug, thiserror::Error)]
pub enum DbError {
    #[error("sqlite: {0}")]
    /// SQLite refused or failed the statement.
    Sqlite(#[from] rusqlite::Error),
    #[error("the store's writer thread has stopped")]
    /// The writer thread is gone (the process is shutting down or it panicked).
    WriterGone,
    #[error("a read of the store did not finish: {0}")]
    /// A read's worker thread ended without an answer (it panicked, or the
    /// runtime is shutting down).
    ReadAborted(String),
    #[error("opening {path}: {source}")]
    /// The database file or its directory could not be created.
    Open {
        /// What could not be opened.
        path: PathBuf,
        #[source]
        /// Why.
        source: std::io::Error,
    },
    #[error(
        "opening {path}: another connection or process holds a lock on it; still locked after waiting {waited:?}"
    )]
    /// Another connection (this process or another) held a lock on the
    /// file for longer than the busy timeout while it was being opened.
    Locked {
        /// The database file.
        path: PathBuf,
        /// How long opening waited for the lock.
        waited: Duration,
        #[source]
        /// SQLite's own error.
        source: rusqlite::Error,
    },
}

/// A handle to one SQLite database file. Cheap to clone.
#[derive(Clone)]
pub struct EmbeddedDb {
    jobs: writer::Jobs,
    writer: Arc<writer::Writer>,
    readers: Arc<readers::Readers>,
    path: Arc<PathBuf>,
}

impl std::fmt::Debug for EmbeddedDb {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EmbeddedDb")
            .field("path", &self.path)
            .finish()
    }
}

impl EmbeddedDb {
    /// Runs `f` inside a write transaction (its own savepoint of a group
    /// commit). An `Err` rolls back everything `f` did; an `Ok` is returned
    /// only after the commit is durable.
    pub async fn write<R, E, F>(&self, f: F) -> Result<R, E>
    where
        F: FnOnce(&Connection) -> Result<R, E> + Send + 'static,
        R: Send + 'static,
        E: From<DbError> + Send + 'static,
    {
        self.writer
            .submit(&self.jobs, f, writer::Guard::Savepoint)
            .await
    }

    /// [`write`](Self::write) for a job whose only change is **one**
    /// INSERT, UPDATE or DELETE statement (it may read before and after
    /// it). A failing statement is undone by SQLite itself, and a job that
    /// returns `Err` after a statement that succeeded (an UPDATE that
    /// matched no row, say) has changed nothing, so the job needs no
    /// savepoint of its own in the group commit: SQLite copies every page a
    /// savepoint touches into its statement journal first, ~4% of the
    /// orchestrator's CPU per saga at concurrency 64.
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
        self.writer
            .submit(&self.jobs, f, writer::Guard::Statement)
            .await
    }

    /// Runs `f` on a read-only connection (a consistent snapshot).
    pub async fn read<R, E, F>(&self, f: F) -> Result<R, E>
    where
        F: FnOnce(&Connection) -> Result<R, E> + Send + 'static,
        R: Send + 'static,
        E: From<DbError> + Send + 'static,
    {
        self.readers.read(f).await
    }
}

#[cfg(test)]
pub(crate) mod tests;
