//! Bounded integer counters: an account balance, a product's availability.
//!
//! Both participants keep a non-negative int64 per key and move it by an
//! amount. Each move is **one conditional statement** whose condition is
//! the bound — take only if the counter holds the amount, add only if the
//! sum fits an int64 — so no interleaving of concurrent calls can take the
//! last unit twice or wrap around, and no read comes before the write
//! (check-then-write races; a conditional write does not). Only when the
//! condition fails is the counter read, to say why.
//!
//! The statements are methods of each backend's transaction
//! (`SqliteHistory::take`, `MongoHistory::take`, ...), so they run inside
//! the same local transaction as the operationHistory record.

/// Where a counter lives: the table (collection) and its columns (fields).
#[derive(Debug, Clone, Copy)]
pub struct Counter {
    /// Table or collection name.
    pub table: &'static str,
    /// The key column; in MongoDB the key is always `_id`.
    pub key: &'static str,
    /// The integer column or field.
    pub value: &'static str,
}

/// What taking from a counter found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Take {
    /// Taken; the value after.
    Done(i64),
    /// There is no such key.
    Missing,
    /// The counter holds less than asked: what it holds.
    Short {
        /// The value.
        have: i64,
    },
}

/// What adding to a counter found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Add {
    /// Added (the key created if absent); the value after.
    Done(i64),
    /// The sum would not fit in an int64: what the counter holds.
    Overflow {
        /// The value.
        have: i64,
    },
}
