//! Bounded disk: the file's size and the release of free pages.
//!
//! Files use `auto_vacuum=INCREMENTAL`. Deleted rows' pages go to SQLite's
//! freelist and are reused by later inserts whatever the mode; incremental
//! mode additionally lets [`crate::EmbeddedDb::reclaim`] hand the free
//! pages beyond a reserve back to the file system (after a burst or a
//! shorter retention) without the full rewrite a `VACUUM` is. A file in
//! another mode is converted once at open by one `VACUUM`, logged with its
//! size and duration.

use crate::{DbError, EmbeddedDb};
use rusqlite::Connection;
use std::path::Path;
use std::time::Instant;

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

pub(crate) fn pragma_u64(conn: &Connection, name: &str) -> Result<u64, rusqlite::Error> {
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
pub(crate) fn incremental_auto_vacuum(conn: &Connection, path: &Path) -> Result<(), DbError> {
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
