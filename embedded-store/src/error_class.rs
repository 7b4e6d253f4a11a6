//! Which storage failures pass by themselves and which need a person: the
//! one vocabulary of both storage crates ([`ErrorClass`], which
//! `mongo-client` re-exports for MongoDB), and its SQLite table
//! ([`classify`]).
//!
//! A store error decides what its caller does next: a busy database, a full
//! disk or an I/O error can be waited out (the orchestrator waits before
//! sending anything else, the participants answer UNAVAILABLE and are
//! called again); a corrupt file, data of the wrong type, a violated
//! constraint or a read-only file fail the same way every time, so waiting
//! would only hide them. Those are reported as such, for a person to see.

use rusqlite::ErrorCode;

/// What a storage failure means for its caller, the same for every
/// backend: wait it out, or stop and show it to a person — and then
/// whether the stored data or the operation is at fault.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorClass {
    /// It may pass: retry later. SQLite: busy or locked, out of memory or
    /// disk, an I/O error, a writer thread gone at shutdown. MongoDB: an
    /// unreachable server, an election, a write conflict, anything the
    /// driver labels retryable.
    Transient,
    /// Stored data cannot be read as written. SQLite: the database is
    /// corrupt or not a database, or a column holds a value of another
    /// type. MongoDB: a field holds another type than the code writes.
    Corrupt,
    /// The operation is refused and will be refused again. SQLite: a
    /// constraint the caller did not expect, a value too big, a read-only
    /// file. MongoDB: a document too large, a failed validation, a type
    /// mismatch, refused credentials, a bad command.
    Rejected,
}

/// The class of a SQLite `error` (see [`ErrorClass`]).
pub fn classify(error: &rusqlite::Error) -> ErrorClass {
    match error {
        rusqlite::Error::SqliteFailure(failure, _) => match failure.code {
            ErrorCode::DatabaseCorrupt | ErrorCode::NotADatabase => ErrorClass::Corrupt,
            ErrorCode::ConstraintViolation
            | ErrorCode::TooBig
            | ErrorCode::TypeMismatch
            | ErrorCode::ReadOnly => ErrorClass::Rejected,
            _ => ErrorClass::Transient,
        },
        rusqlite::Error::FromSqlConversionFailure(..)
        | rusqlite::Error::IntegralValueOutOfRange(..)
        | rusqlite::Error::InvalidColumnType(..) => ErrorClass::Corrupt,
        _ => ErrorClass::Transient,
    }
}

impl crate::DbError {
    /// The class of this error ([`classify`]); the writer being gone, a read
    /// that did not finish and a file that cannot be opened (or is locked)
    /// count as transient.
    pub fn class(&self) -> ErrorClass {
        match self {
            crate::DbError::Sqlite(e) => classify(e),
            crate::DbError::WriterGone
            | crate::DbError::ReadAborted(_)
            | crate::DbError::Open { .. }
            | crate::DbError::Locked { .. } => ErrorClass::Transient,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rusqlite::Connection;

    #[test]
    fn real_sqlite_failures_are_told_apart() {
        let db = Connection::open_in_memory().expect("open");
        db.execute_batch("CREATE TABLE t (k TEXT PRIMARY KEY, n INTEGER NOT NULL);")
            .expect("schema");
        db.execute("INSERT INTO t VALUES ('a', 1)", [])
            .expect("insert");
        let duplicate = db
            .execute("INSERT INTO t VALUES ('a', 2)", [])
            .expect_err("a duplicate key");
        assert_eq!(classify(&duplicate), ErrorClass::Rejected);
        db.execute("INSERT INTO t VALUES ('b', 'not a number')", [])
            .expect("SQLite stores the text");
        let wrong_type = db
            .query_row("SELECT n FROM t WHERE k = 'b'", [], |r| r.get::<_, i64>(0))
            .expect_err("text read as an integer");
        assert_eq!(classify(&wrong_type), ErrorClass::Corrupt);

        let dir = tempfile::tempdir().expect("tempdir");
        let garbage = dir.path().join("garbage.db");
        std::fs::write(&garbage, vec![0x5a; 8192]).expect("write");
        let not_a_db = crate::connect(&garbage, rusqlite::OpenFlags::default())
            .and_then(|c| {
                c.query_row("SELECT COUNT(*) FROM sqlite_master", [], |r| {
                    r.get::<_, i64>(0)
                })
            })
            .expect_err("not a database");
        assert_eq!(classify(&not_a_db), ErrorClass::Corrupt);

        let readonly_path = dir.path().join("ro.db");
        crate::connect(&readonly_path, rusqlite::OpenFlags::default())
            .and_then(|c| c.execute_batch("CREATE TABLE t (k TEXT);"))
            .expect("create");
        let readonly = crate::connect(&readonly_path, rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY)
            .and_then(|c| c.execute("INSERT INTO t VALUES ('x')", []))
            .expect_err("a read-only file");
        assert_eq!(classify(&readonly), ErrorClass::Rejected);

        let busy = rusqlite::Error::SqliteFailure(
            rusqlite::ffi::Error::new(rusqlite::ffi::SQLITE_BUSY),
            None,
        );
        assert_eq!(classify(&busy), ErrorClass::Transient);
        assert_eq!(crate::DbError::WriterGone.class(), ErrorClass::Transient);
    }
}
