//! Brings an existing saga file up to the schema the store writes.
//!
//! A file's schema version is read from its columns (the files carry no
//! version number of their own), each version adding one:
//!
//! | version | adds | filled with |
//! |---|---|---|
//! | 1 | `saga_id`, `request_id`, `status`, `version`, times, `doc` | — |
//! | 2 | `lease_owner`, `lease_until_ms` | no lease |
//! | 3 | `customer_id` | each saga document's `order.customer_id` |
//! | 4 | `claimable_after_ms` | as [`Saga::claimable_after_ms`](crate::saga::Saga::claimable_after_ms) computes it |
//! | 5 | `finished_at_ms` | as [`Saga::expires_from_ms`](crate::saga::Saga::expires_from_ms) computes it |
//! | 6 | `needs_attention` | 0: no saga flagged |
//!
//! The indexes over these columns are the store's schema, created right
//! after with `CREATE INDEX IF NOT EXISTS`. Indexes of earlier versions
//! that no query uses (`sagas_by_lease`, `sagas_claimable`,
//! `sagas_own_claimable`: recovery reads `sagas_open`) are dropped, as
//! each would cost every write.
//!
//! What [`migrate`] guarantees:
//! - **Idempotent.** A step runs only when its column is missing: a file
//!   at the latest version is left as it is, and a new file (no table yet)
//!   gets the latest schema from the store's own `CREATE TABLE`.
//! - **All or nothing.** The checks and every step run in one
//!   `BEGIN IMMEDIATE` transaction: a crash in the middle leaves the file
//!   at its old version, and the next start migrates it again.
//! - **Several instances at once.** Opening with a busy timeout, instances
//!   that start together on an old file queue for the write lock; the first
//!   migrates, the others then find every column there (no "database is
//!   locked", no "duplicate column").
//!
//! Why not a versioned runner such as `rusqlite_migration` (it counts in
//! `user_version`): every file written so far has `user_version` 0 at any
//! of the versions above, so telling them apart would still need these
//! column checks; keyed by column, the steps are the whole mechanism.

use embedded_store::DbError;
use rusqlite::Connection;
use std::path::Path;

/// One schema version: the column it is recognised by, and the SQL that
/// adds it (and fills it) on a file of the version before.
struct Migration {
    adds: &'static str,
    sql: &'static str,
}

/// Versions 2 to 6, in order (a step may read a column an earlier one
/// added).
const MIGRATIONS: &[Migration] = &[
    Migration {
        adds: "lease_until_ms",
        sql: "ALTER TABLE sagas ADD COLUMN lease_owner TEXT;
              ALTER TABLE sagas ADD COLUMN lease_until_ms INTEGER NOT NULL DEFAULT 0;",
    },
    Migration {
        adds: "customer_id",
        sql: "ALTER TABLE sagas ADD COLUMN customer_id TEXT NOT NULL DEFAULT '';
              UPDATE sagas SET customer_id = json_extract(doc, '$.order.customer_id');",
    },
    Migration {
        adds: "claimable_after_ms",
        sql: "ALTER TABLE sagas ADD COLUMN claimable_after_ms INTEGER NOT NULL DEFAULT 0;
              UPDATE sagas SET claimable_after_ms =
                  CASE WHEN status IN ('running', 'compensating') THEN lease_until_ms
                       ELSE 9223372036854775807 END;",
    },
    Migration {
        adds: "finished_at_ms",
        sql: "ALTER TABLE sagas ADD COLUMN finished_at_ms INTEGER;
              UPDATE sagas SET finished_at_ms = updated_at_ms
                  WHERE status IN ('completed', 'cancelled');",
    },
    Migration {
        adds: "needs_attention",
        sql: "ALTER TABLE sagas ADD COLUMN needs_attention INTEGER NOT NULL DEFAULT 0;",
    },
];

/// Indexes no query uses any more ([`migrate`] drops them).
const REPLACED_INDEXES: &[&str] = &["sagas_by_lease", "sagas_claimable", "sagas_own_claimable"];

/// Brings the file at `path`, if it holds a `sagas` table, to the latest
/// version (see the module doc for what that guarantees).
pub(super) fn migrate(path: &Path) -> Result<(), DbError> {
    let mut conn = embedded_store::connect(path, rusqlite::OpenFlags::default())?;
    let tx = conn.transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)?;
    let has_table: bool = tx.query_row(
        "SELECT COUNT(*) > 0 FROM sqlite_master WHERE type = 'table' AND name = 'sagas'",
        [],
        |r| r.get(0),
    )?;
    if !has_table {
        return Ok(());
    }
    for step in MIGRATIONS {
        if !has_column(&tx, step.adds)? {
            tx.execute_batch(step.sql)?;
        }
    }
    for index in REPLACED_INDEXES {
        tx.execute_batch(&format!("DROP INDEX IF EXISTS {index};"))?;
    }
    tx.commit()?;
    Ok(())
}

/// Whether the `sagas` table has `column`.
fn has_column(conn: &Connection, column: &str) -> Result<bool, rusqlite::Error> {
    conn.query_row(
        "SELECT COUNT(*) > 0 FROM pragma_table_info('sagas') WHERE name = ?1",
        [column],
        |r| r.get(0),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A version-1 file: the columns every later step reads.
    const VERSION_1: &str = "CREATE TABLE sagas (
        saga_id TEXT PRIMARY KEY, request_id TEXT NOT NULL UNIQUE,
        status TEXT NOT NULL, version INTEGER NOT NULL,
        created_at_ms INTEGER NOT NULL, updated_at_ms INTEGER NOT NULL,
        doc TEXT NOT NULL);
        INSERT INTO sagas VALUES
            ('s1', 'r1', 'completed', 2, 5, 9, '{\"order\":{\"customer_id\":\"zoe\"}}');
        CREATE INDEX sagas_claimable ON sagas (status, updated_at_ms);";

    fn columns(path: &Path) -> Vec<String> {
        let conn = embedded_store::connect(path, rusqlite::OpenFlags::default()).unwrap();
        let mut stmt = conn
            .prepare("SELECT name FROM pragma_table_info('sagas') ORDER BY cid")
            .unwrap();
        stmt.query_map([], |r| r.get(0))
            .unwrap()
            .map(Result::unwrap)
            .collect()
    }

    /// Every step's column is added once, in order, and filled, and the
    /// replaced index is dropped; a second run changes nothing.
    #[test]
    fn an_old_file_reaches_the_latest_version_and_a_second_run_changes_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("orchestrator.db");
        embedded_store::connect(&path, rusqlite::OpenFlags::default())
            .unwrap()
            .execute_batch(VERSION_1)
            .unwrap();
        migrate(&path).unwrap();
        let migrated = columns(&path);
        let added: Vec<&str> = migrated[7..].iter().map(String::as_str).collect();
        assert_eq!(
            added,
            [
                "lease_owner",
                "lease_until_ms",
                "customer_id",
                "claimable_after_ms",
                "finished_at_ms",
                "needs_attention"
            ]
        );
        migrate(&path).unwrap();
        assert_eq!(columns(&path), migrated);
        let conn = embedded_store::connect(&path, rusqlite::OpenFlags::default()).unwrap();
        let indexes: i64 = conn
            .query_row(
                "SELECT COUNT(*) FROM sqlite_master WHERE type = 'index' AND name = 'sagas_claimable'",
                [],
                |r| r.get(0),
            )
            .unwrap();
        assert_eq!(indexes, 0);
        let row: (String, i64, Option<i64>, i64) = conn
            .query_row(
                "SELECT customer_id, claimable_after_ms, finished_at_ms, needs_attention
                 FROM sagas WHERE saga_id = 's1'",
                [],
                |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?)),
            )
            .unwrap();
        assert_eq!(row, ("zoe".to_owned(), i64::MAX, Some(9), 0));
    }

    /// A new file has nothing to migrate (and gets no table from it).
    #[test]
    fn a_new_file_is_left_to_the_store_schema() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("orchestrator.db");
        migrate(&path).unwrap();
        assert!(columns(&path).is_empty());
    }

    /// Instances starting together on an old file all open it: one
    /// migrates, the others wait for its lock and find the columns there
    /// (several rounds, as a race shows only sometimes).
    #[test]
    fn several_instances_opening_an_old_file_at_once_all_succeed() {
        for round in 0..20 {
            let dir = tempfile::tempdir().unwrap();
            let path = dir.path().join("orchestrator.db");
            embedded_store::connect(&path, rusqlite::OpenFlags::default())
                .unwrap()
                .execute_batch(VERSION_1)
                .unwrap();
            let start = std::sync::Barrier::new(4);
            std::thread::scope(|s| {
                let opens: Vec<_> = (0..4)
                    .map(|_| {
                        s.spawn(|| {
                            start.wait();
                            migrate(&path)
                        })
                    })
                    .collect();
                for open in opens {
                    let migrated = open.join().expect("no panic");
                    assert!(migrated.is_ok(), "round {round}: {migrated:?}");
                }
            });
            assert_eq!(columns(&path).len(), 13);
        }
    }
}
