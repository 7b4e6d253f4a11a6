//! What a Rust participant of the generic contract writes: its business
//! rules ([`StepRules`]), over one store transaction ([`StepTx`]).
//!
//! The rules say what Act does and how Compensate undoes it; the kit runs
//! each inside the barrier's transaction (the effect and its
//! operationHistory record commit together or not at all), on the embedded
//! store or MongoDB alike. So the rules never see a request id twice, never
//! record anything, never decide a replay: they are asked to act at most
//! once per request id and to undo at most once, and only an applied act.
//!
//! Their effects are moves of the kit's bounded counters
//! ([`crate::counter`]): a balance, an availability, points — each one
//! conditional statement, so no interleaving can take the last unit twice.
//! A participant whose effect is something else (a document, a row of its
//! own) writes its store as payment-svc does, over the same barrier.

use super::call::StepCall;
use crate::counter::{Add, Counter, Take};
use crate::mongo::MongoHistory;
use crate::sqlite::{self, SqliteHistory};
use crate::{Failure, HistoryTx, OperationRecord};
use std::future::Future;

/// The reason code of an Act refused because its compensation came first
/// (or already undid it): the protocol's late-Act answer.
pub const ALREADY_COMPENSATED: &str = "ALREADY_COMPENSATED";

/// The reason code of a refusal injected by fault injection
/// (`--fault-refusal-rate`), recorded like any other.
pub const INJECTED_REFUSAL: &str = "INJECTED_REFUSAL";

/// What a store transaction offers the rules, besides the barrier's own
/// operations (which the kit calls, never the rules): the counters, on
/// either backend.
pub trait StepTx: HistoryTx {
    /// Takes `by` from the counter under `key` if it holds that much.
    fn take(
        &mut self,
        counter: &Counter,
        key: &str,
        by: i64,
    ) -> impl Future<Output = Result<Take, Self::Error>>;

    /// Adds `by` to the counter under `key` (created if absent) unless the
    /// sum would overflow.
    fn add(
        &mut self,
        counter: &Counter,
        key: &str,
        by: i64,
    ) -> impl Future<Output = Result<Add, Self::Error>>;

    /// The counter under `key`, `None` when absent.
    fn counter(
        &mut self,
        counter: &Counter,
        key: &str,
    ) -> impl Future<Output = Result<Option<i64>, Self::Error>>;
}

impl StepTx for SqliteHistory<'_> {
    async fn take(&mut self, c: &Counter, key: &str, by: i64) -> Result<Take, rusqlite::Error> {
        SqliteHistory::take(self, c, key, by)
    }

    async fn add(&mut self, c: &Counter, key: &str, by: i64) -> Result<Add, rusqlite::Error> {
        SqliteHistory::add(self, c, key, by)
    }

    async fn counter(&mut self, c: &Counter, key: &str) -> Result<Option<i64>, rusqlite::Error> {
        sqlite::counter_value(self.conn(), c, key)
    }
}

impl StepTx for MongoHistory<'_> {
    async fn take(
        &mut self,
        c: &Counter,
        key: &str,
        by: i64,
    ) -> Result<Take, mongodb::error::Error> {
        MongoHistory::take(self, c, key, by).await
    }

    async fn add(&mut self, c: &Counter, key: &str, by: i64) -> Result<Add, mongodb::error::Error> {
        MongoHistory::add(self, c, key, by).await
    }

    async fn counter(
        &mut self,
        c: &Counter,
        key: &str,
    ) -> Result<Option<i64>, mongodb::error::Error> {
        MongoHistory::counter(self, c, key).await
    }
}

/// What an Act did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Acted {
    /// Applied; `detail` (for people: what was done) is recorded with it
    /// and replayed to every repeat.
    Applied {
        /// What was done, e.g. `120 points to "c-1" (now 340)`.
        detail: String,
    },
    /// A business refusal: recorded, so a repeat gets it too, and nothing
    /// of the effect is kept.
    Refused(StepRefusal),
}

/// A business refusal: machine-readable code plus words for people.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StepRefusal {
    /// Stable across versions, e.g. `CUSTOMER_BLOCKED` (`A-Z 0-9 _`; a `:`
    /// is recorded as `_`).
    pub reason_code: String,
    /// Why, for people.
    pub detail: String,
}

impl StepRefusal {
    /// A refusal coded `reason_code`, saying `detail`.
    pub fn new(reason_code: impl Into<String>, detail: impl Into<String>) -> Self {
        StepRefusal {
            reason_code: reason_code.into(),
            detail: detail.into(),
        }
    }
}

/// What the records of one call are about, for people listing them
/// (`ListOperations`): a subject and a magnitude.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Listing {
    /// Whom or what the operation concerns, e.g. the customer.
    pub subject: String,
    /// How much, e.g. points or cents.
    pub amount: i64,
}

/// A participant's business rules. The kit commits [`StepRules::act`] at
/// most once per request id, and [`StepRules::compensate`] at most once,
/// only for an applied act and never run again once recorded. A repeated
/// Act may run `act` again inside a transaction that is then rolled back
/// whole (the barrier finds the key taken after the effect), so `act`
/// must do nothing outside `tx`. A call that errs is rolled back whole
/// (its effect with it) and answered with its status.
///
/// Serve them with [`step_participant!`](crate::step_participant) (a
/// binary) or the stores of [`crate::step`] and [`crate::step::serve`].
pub trait StepRules: Send + Sync + 'static {
    /// The counters the rules move. The embedded store creates their tables
    /// (`key TEXT PRIMARY KEY, value INTEGER NOT NULL CHECK (value >= 0)`);
    /// on MongoDB each is a collection keyed by `_id`.
    const COUNTERS: &'static [Counter];

    /// What the records of `call` are about. By default the customer and
    /// the order's total.
    fn listing(&self, call: &StepCall) -> Listing {
        Listing {
            subject: call.order.customer_id.clone(),
            amount: call.order.total_cents,
        }
    }

    /// Does the step for `call` in `tx`, or refuses it. A store error is
    /// [`Failure::Store`]; a call that can never succeed and should not be
    /// recorded is [`Failure::Refused`]. Decide a refusal before writing
    /// (or by one conditional statement, like [`StepTx::take`]): what was
    /// written stays when a refusal is recorded.
    fn act<T: StepTx>(
        &self,
        tx: &mut T,
        call: &StepCall,
    ) -> impl Future<Output = Result<Acted, Failure<T::Error>>>;

    /// Undoes the act recorded as `act` (status applied; its subject and
    /// amount are [`StepRules::listing`]'s of the same parameters) in `tx`.
    /// An error rolls the compensation back; the orchestrator retries it.
    fn compensate<T: StepTx>(
        &self,
        tx: &mut T,
        call: &StepCall,
        act: &OperationRecord,
    ) -> impl Future<Output = Result<(), Failure<T::Error>>>;
}

/// The embedded store's schema for `counters`.
pub(super) fn counters_schema(counters: &[Counter]) -> String {
    counters
        .iter()
        .map(|c| {
            format!(
                "CREATE TABLE IF NOT EXISTS {table} (
                    {key} TEXT PRIMARY KEY,
                    {value} INTEGER NOT NULL CHECK ({value} >= 0)
                ) WITHOUT ROWID;\n",
                table = c.table,
                key = c.key,
                value = c.value
            )
        })
        .collect()
}
