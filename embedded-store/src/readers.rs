//! The read side: a few read-only connections, which WAL lets read while
//! the writer writes.
//!
//! A handful of connections in a mutex-guarded stack: r2d2_sqlite and
//! deadpool-sqlite would do the same, but both require rusqlite 0.40, and
//! two rusqlite versions cannot link two SQLite libraries into one binary.
//! A read takes a connection (or opens one more when all are busy), runs on
//! tokio's blocking pool, and puts the connection back while fewer than
//! [`READERS`] are kept.

use crate::DbError;
use crate::open::connect;
use rusqlite::{Connection, OpenFlags};
use std::path::{Path, PathBuf};
use std::sync::Mutex;

/// Read connections kept open.
const READERS: usize = 4;

/// The pool of read-only connections of one database file.
pub(crate) struct Readers {
    idle: Mutex<Vec<Connection>>,
    path: PathBuf,
}

impl Readers {
    /// Opens [`READERS`] read-only connections to `path`.
    pub(crate) fn open(path: &Path) -> Result<Self, rusqlite::Error> {
        let idle = (0..READERS)
            .map(|_| connect(path, read_only()))
            .collect::<Result<Vec<_>, _>>()?;
        Ok(Readers {
            idle: Mutex::new(idle),
            path: path.to_path_buf(),
        })
    }

    /// Runs `f` on a read-only connection (a consistent snapshot).
    pub(crate) async fn read<R, E, F>(self: &std::sync::Arc<Self>, f: F) -> Result<R, E>
    where
        F: FnOnce(&Connection) -> Result<R, E> + Send + 'static,
        R: Send + 'static,
        E: From<DbError> + Send + 'static,
    {
        let readers = self.clone();
        tokio::task::spawn_blocking(move || {
            let pooled = readers.idle.lock().ok().and_then(|mut idle| idle.pop());
            let conn = match pooled {
                Some(conn) => conn,
                None => connect(&readers.path, read_only()).map_err(|e| E::from(e.into()))?,
            };
            let result = f(&conn);
            if let Ok(mut idle) = readers.idle.lock()
                && idle.len() < READERS
            {
                idle.push(conn);
            }
            result
        })
        .await
        .map_err(|e| E::from(DbError::ReadAborted(e.to_string())))?
    }
}

/// A read connection is used by one thread at a time: SQLite's own mutex
/// is not needed.
fn read_only() -> OpenFlags {
    OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_NO_MUTEX
}
