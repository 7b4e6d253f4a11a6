//! The operationHistory and the participants' counters in MongoDB, one
//! concern per file:
//!
//! - `indexes`: the collection, its [`indexes`] and the shard keys.
//! - `history`: the barrier's records ([`MongoHistory`] as a
//!   [`HistoryTx`](crate::HistoryTx)), their `expire_at`, and the reads of
//!   `ListOperations` and of a subject's recent records.
//! - `counter`: balances and stock moved by one conditional statement each
//!   ([`MongoHistory::take`], [`MongoHistory::add`], ...).
//! - `conflict_limit`: how many transactions run at once, halved by each
//!   write conflict and raised by each commit ([`ConflictLimit`]).
//! - `transaction`: [`transact`], the one transaction runner of both
//!   participants, and [`participant_error`], how a driver error reaches a
//!   caller.
//!
//! Retention: every record carries `expire_at`, a BSON Date (its recording
//! time plus the history retention, [`HistoryDb`]), and a TTL index on it
//! lets the server delete it some time after that date. A changed
//! retention applies to records written from then on.

mod conflict_limit;
mod counter;
mod history;
mod indexes;
mod transaction;

pub use conflict_limit::{ConflictLimit, MAX_TRANSACTIONS, Permit};
pub use counter::counter_in;
pub use history::{HistoryDb, MongoHistory, from_document, recent_for_subject, records_of};
pub use indexes::{
    COLLECTION, EXPIRE_INDEX, SHARD_KEY, UNIQUE_INDEX, counter_shard_key, ensure_history_indexes,
    indexes,
};
pub use transaction::{Apply, Replay, participant_error, transact};
