//! The operationHistory in memory, and the transaction runner the
//! participants' rules run under — the in-memory counterpart of
//! `participant_kit::sqlite` (its `SqliteHistory` and `transact`).
//!
//! A rule runs on a copy of the participant's state; the copy replaces the
//! state only when the rule succeeds, so a rule that fails (or finds its
//! key taken, or asks for a rollback) leaves nothing behind — a
//! transaction. The rules never wait on anything but the store itself,
//! which answers at once, so each runs to completion in one poll.
//!
//! Each committed call also appends its effects on the counters (balances,
//! availability) to a journal kept beside the state: the audit counts
//! effects there, independently of what the barrier recorded, so a
//! barrier that lets a second effect through is seen.

use participant_kit::{Admission, Failure, OperationRecord, ParticipantError};
use std::collections::{BTreeMap, BTreeSet};
use std::future::Future;

/// Why a simulated store operation failed inside a rule (never, in
/// practice: the in-memory state cannot fail; kept for the rules' types).
#[derive(Debug, Clone)]
pub struct MemError(pub String);

impl std::fmt::Display for MemError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

/// One effect a committed call had on a counter.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Effect {
    /// The call's request id.
    pub request_id: String,
    /// The call (`charge`, `refund`, `deduct`, `restock`, `deposit`, ...).
    pub call: &'static str,
    /// The account or product.
    pub subject: String,
    /// How the counter moved.
    pub delta: i64,
}

/// The records of one participant, unique by `(request_id, kind)`.
#[derive(Debug, Clone, Default)]
pub struct History {
    records: BTreeMap<(String, String), (u64, OperationRecord)>,
    next_seq: u64,
    /// Request ids some of whose records the retention deleted.
    pub purged: BTreeSet<String>,
}

impl History {
    /// Inserts `record` stamped `now_ms` unless its key is taken.
    pub fn insert(&mut self, record: &OperationRecord, now_ms: i64) -> bool {
        let key = (record.request_id.clone(), record.kind.clone());
        if self.records.contains_key(&key) {
            return false;
        }
        let mut record = record.clone();
        record.recorded_at_ms = now_ms;
        self.next_seq += 1;
        self.records.insert(key, (self.next_seq, record));
        true
    }

    /// The record under `(request_id, kind)`.
    pub fn get(&self, request_id: &str, kind: &str) -> Option<OperationRecord> {
        self.records
            .get(&(request_id.to_owned(), kind.to_owned()))
            .map(|(_, r)| r.clone())
    }

    /// The records of `request_id`, oldest first (by time, then kind).
    pub fn records_of(&self, request_id: &str) -> Vec<OperationRecord> {
        let mut found: Vec<OperationRecord> = self
            .records
            .values()
            .filter(|(_, r)| r.request_id == request_id)
            .map(|(_, r)| r.clone())
            .collect();
        found.sort_by(|a, b| (a.recorded_at_ms, &a.kind).cmp(&(b.recorded_at_ms, &b.kind)));
        found
    }

    /// The newest `limit` records about `subject`.
    pub fn recent_for_subject(&self, subject: &str, limit: usize) -> Vec<OperationRecord> {
        let mut found: Vec<&(u64, OperationRecord)> = self
            .records
            .values()
            .filter(|(_, r)| r.subject == subject)
            .collect();
        found.sort_by(|(sa, a), (sb, b)| {
            (b.recorded_at_ms, &b.request_id, sb).cmp(&(a.recorded_at_ms, &a.request_id, sa))
        });
        found
            .into_iter()
            .take(limit)
            .map(|(_, r)| r.clone())
            .collect()
    }

    /// Deletes up to `limit` records recorded before `cutoff_ms`, oldest
    /// first; how many.
    pub fn purge_before(&mut self, cutoff_ms: i64, limit: usize) -> u64 {
        let mut old: Vec<(i64, u64, (String, String))> = self
            .records
            .iter()
            .filter(|(_, (_, r))| r.recorded_at_ms < cutoff_ms)
            .map(|(k, (seq, r))| (r.recorded_at_ms, *seq, k.clone()))
            .collect();
        old.sort();
        old.truncate(limit);
        for (_, _, key) in &old {
            self.records.remove(key);
            self.purged.insert(key.0.clone());
        }
        old.len() as u64
    }

    /// How many records there are.
    pub fn len(&self) -> usize {
        self.records.len()
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.records.is_empty()
    }

    /// Every record.
    pub fn all(&self) -> Vec<OperationRecord> {
        self.records.values().map(|(_, r)| r.clone()).collect()
    }
}

/// A rule's result on the in-memory state.
pub type RuleResult<R> = Result<R, Failure<MemError>>;

/// Runs a rule's future, which never waits on anything but the in-memory
/// state, to its end.
pub fn run<R>(rule: impl Future<Output = RuleResult<R>>) -> RuleResult<R> {
    futures::FutureExt::now_or_never(rule).unwrap_or_else(|| {
        Err(Failure::Store(MemError(
            "a rule waited on something the in-memory store does not have".into(),
        )))
    })
}

/// Runs a participant rule over `input` as one transaction of `state`,
/// exactly as `participant_kit::sqlite::transact` does on SQLite: `apply`
/// with `admission` on a copy that replaces the state only on success;
/// when it finds its key taken, `replay` answers from the records; when it
/// asks for a rollback, it runs again with [`Admission::Verify`].
pub fn transact<S: Clone, I, R>(
    state: &mut S,
    input: &I,
    admission: Admission,
    apply: impl Fn(&mut S, &I, &Admission) -> RuleResult<R>,
    replay: impl Fn(&mut S, &I) -> RuleResult<R>,
) -> Result<R, ParticipantError> {
    let mut admission = admission;
    loop {
        let mut work = state.clone();
        match apply(&mut work, input, &admission) {
            Ok(reply) => {
                *state = work;
                return Ok(reply);
            }
            Err(Failure::Taken) => {
                let mut read = state.clone();
                return replay(&mut read, input).map_err(Failure::into_participant_error);
            }
            Err(Failure::RollBack) if admission == Admission::Apply => {
                admission = Admission::Verify;
            }
            Err(other) => return Err(other.into_participant_error()),
        }
    }
}
