//! The saga as data: what is persisted, inspected and resumed.
//!
//! These are plain domain types (serde for storage, no wire or database
//! types). A saga carries everything needed to continue it after a crash:
//! the order, each step's stable request id and status, and an append-only
//! history of transitions.

use serde::{Deserialize, Serialize};

/// A participant's refusal of a step's action: the words people read, and
/// the stable code programs match on when the participant gave one.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refusal {
    /// `INSUFFICIENT_FUNDS`, `INSUFFICIENT_STOCK`, a generic step's
    /// `reason_code`; `None` when the participant gave no code.
    pub code: Option<String>,
    /// What the participant said.
    pub message: String,
}

impl Refusal {
    /// A refusal with `code`, when there is one.
    pub fn new(code: Option<String>, message: impl Into<String>) -> Self {
        Refusal {
            code: code.filter(|c| !c.is_empty()),
            message: message.into(),
        }
    }
}

/// A refusal without a code.
impl From<&str> for Refusal {
    fn from(message: &str) -> Self {
        Refusal::new(None, message)
    }
}

/// A refusal without a code.
impl From<String> for Refusal {
    fn from(message: String) -> Self {
        Refusal::new(None, message)
    }
}

impl std::fmt::Display for Refusal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.message)
    }
}

/// One line of an order.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct OrderItem {
    /// The product.
    pub product_id: String,
    /// Units (positive).
    pub quantity: i64,
    /// Price of one unit in cents (positive).
    pub unit_price_cents: i64,
}

/// The business payload the order saga moves through the participants.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Order {
    /// `order-<saga_id>`.
    pub order_id: String,
    /// Who pays.
    pub customer_id: String,
    /// The lines, in order (a line's position is its stable index at the participants).
    pub items: Vec<OrderItem>,
    /// Σ quantity × unit price, computed with overflow checks at creation.
    pub total_cents: i64,
}

/// Where a saga stands as a whole.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SagaStatus {
    /// Forward steps are being executed.
    Running,
    /// A step failed; earlier steps are being undone in reverse order.
    Compensating,
    /// Every step succeeded.
    Completed,
    /// A step was refused and every applied step is compensated.
    Cancelled,
    /// A compensation could not be completed within its budget: needs a
    /// person, then RetrySaga.
    Failed,
}

impl SagaStatus {
    /// Every status, in the order a saga may pass through them (for
    /// counts and filters).
    pub const ALL: [SagaStatus; 5] = [
        SagaStatus::Running,
        SagaStatus::Compensating,
        SagaStatus::Completed,
        SagaStatus::Cancelled,
        SagaStatus::Failed,
    ];

    /// Completed, Cancelled and Failed need nothing more from the engine.
    pub fn is_terminal(self) -> bool {
        matches!(
            self,
            SagaStatus::Completed | SagaStatus::Cancelled | SagaStatus::Failed
        )
    }

    /// The stored form.
    pub fn as_str(self) -> &'static str {
        match self {
            SagaStatus::Running => "running",
            SagaStatus::Compensating => "compensating",
            SagaStatus::Completed => "completed",
            SagaStatus::Cancelled => "cancelled",
            SagaStatus::Failed => "failed",
        }
    }

    /// Reads back [`SagaStatus::as_str`].
    pub fn parse(s: &str) -> Option<Self> {
        Some(match s {
            "running" => SagaStatus::Running,
            "compensating" => SagaStatus::Compensating,
            "completed" => SagaStatus::Completed,
            "cancelled" => SagaStatus::Cancelled,
            "failed" => SagaStatus::Failed,
            _ => return None,
        })
    }
}

/// Where one step stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum StepStatus {
    /// Not started.
    Pending,
    /// Intent persisted: the action is being (or may have been) sent.
    Running,
    /// The participant applied the action.
    Succeeded,
    /// The participant refused the action (nothing was applied).
    Refused,
    /// Intent persisted: the compensation is being sent.
    Compensating,
    /// The compensation is confirmed.
    Compensated,
    /// Never started because an earlier step failed.
    Skipped,
}

impl StepStatus {
    /// The stored form.
    pub fn as_str(self) -> &'static str {
        match self {
            StepStatus::Pending => "pending",
            StepStatus::Running => "running",
            StepStatus::Succeeded => "succeeded",
            StepStatus::Refused => "refused",
            StepStatus::Compensating => "compensating",
            StepStatus::Compensated => "compensated",
            StepStatus::Skipped => "skipped",
        }
    }
}

/// One step of a saga instance.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct StepState {
    /// The step name from the definition, e.g. `payment`.
    pub name: String,
    /// Action and compensation names, e.g. `charge` / `refund`.
    pub action: String,
    /// The compensation's name, e.g. `refund`.
    pub compensation: String,
    /// Where the step stands.
    pub status: StepStatus,
    /// Stable idempotency key sent to the participant for both the action
    /// and its compensation: `<saga_id>:<name>`.
    pub request_id: String,
    /// Attempts of the action so far.
    pub attempts: u32,
    /// Attempts of the compensation so far.
    pub compensation_attempts: u32,
    /// The last failure of either.
    pub last_error: Option<String>,
    /// When the action's intent was recorded.
    pub started_at_ms: Option<i64>,
    /// When the step reached its last state.
    pub finished_at_ms: Option<i64>,
}

/// A state a history entry moves from or to: a saga's status for a
/// saga-level entry, a step's for a step's entry, or [`TransitionState::New`]
/// before the saga existed. Stored as the same words as [`SagaStatus`] and
/// [`StepStatus`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TransitionState {
    /// Before the saga was created (the first entry's `from`).
    #[serde(rename = "")]
    New,
    /// A step not started.
    Pending,
    /// A saga or step running.
    Running,
    /// A step applied.
    Succeeded,
    /// A step refused.
    Refused,
    /// A saga or step compensating.
    Compensating,
    /// A step compensated.
    Compensated,
    /// A step never started.
    Skipped,
    /// A saga completed.
    Completed,
    /// A saga cancelled.
    Cancelled,
    /// A saga failed.
    Failed,
}

impl TransitionState {
    /// The stored word (empty for [`TransitionState::New`]).
    pub fn as_str(self) -> &'static str {
        match self {
            TransitionState::New => "",
            TransitionState::Pending => "pending",
            TransitionState::Running => "running",
            TransitionState::Succeeded => "succeeded",
            TransitionState::Refused => "refused",
            TransitionState::Compensating => "compensating",
            TransitionState::Compensated => "compensated",
            TransitionState::Skipped => "skipped",
            TransitionState::Completed => "completed",
            TransitionState::Cancelled => "cancelled",
            TransitionState::Failed => "failed",
        }
    }
}

impl std::fmt::Display for TransitionState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl From<SagaStatus> for TransitionState {
    fn from(status: SagaStatus) -> Self {
        match status {
            SagaStatus::Running => TransitionState::Running,
            SagaStatus::Compensating => TransitionState::Compensating,
            SagaStatus::Completed => TransitionState::Completed,
            SagaStatus::Cancelled => TransitionState::Cancelled,
            SagaStatus::Failed => TransitionState::Failed,
        }
    }
}

impl From<StepStatus> for TransitionState {
    fn from(status: StepStatus) -> Self {
        match status {
            StepStatus::Pending => TransitionState::Pending,
            StepStatus::Running => TransitionState::Running,
            StepStatus::Succeeded => TransitionState::Succeeded,
            StepStatus::Refused => TransitionState::Refused,
            StepStatus::Compensating => TransitionState::Compensating,
            StepStatus::Compensated => TransitionState::Compensated,
            StepStatus::Skipped => TransitionState::Skipped,
        }
    }
}

impl std::fmt::Display for SagaStatus {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One entry of the append-only history.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Transition {
    /// When, in milliseconds since the epoch.
    pub at_ms: i64,
    /// None for saga-level transitions.
    pub step: Option<String>,
    /// The state before.
    pub from: TransitionState,
    /// The state after.
    pub to: TransitionState,
    /// Why (a reason, an error).
    pub detail: String,
    /// The saga version whose save wrote this entry (see
    /// [`Saga::stamp_history`]); absent in sagas stored before it was kept.
    /// A saga's entries read in order carry 1, …, `version` with no number
    /// missing or out of order: its history is one linear sequence of saves.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub version: Option<u64>,
    /// The orchestrator instance (lease owner) that wrote this entry.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub by: Option<String>,
}

/// Most transitions a saga keeps (see [`Saga::history`]).
pub const HISTORY_KEPT: usize = 64;
/// How many of the first transitions are always kept.
pub const HISTORY_HEAD: usize = 16;
/// Longest text kept in a transition's detail or a step's last error, in
/// bytes (a participant's error message is not ours to size).
pub const TEXT_KEPT: usize = 1_024;

fn is_zero(n: &u64) -> bool {
    *n == 0
}

/// `text` cut to at most [`TEXT_KEPT`] bytes at a character boundary, with
/// an ellipsis when cut.
pub fn bounded_text(mut text: String) -> String {
    if text.len() > TEXT_KEPT {
        let mut end = TEXT_KEPT - '…'.len_utf8();
        while !text.is_char_boundary(end) {
            end -= 1;
        }
        text.truncate(end);
        text.push('…');
    }
    text
}

/// A saga instance.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Saga {
    /// The saga's id (a UUID v7, so ids sort by creation time).
    pub saga_id: String,
    /// The client's CreateOrder idempotency key (unique).
    pub request_id: String,
    /// Digest of the CreateOrder parameters, to refuse a reused request_id.
    pub fingerprint: String,
    /// What the saga moves through the participants.
    pub order: Order,
    /// Where the saga stands.
    pub status: SagaStatus,
    /// Its steps, in forward order.
    pub steps: Vec<StepState>,
    /// The transitions, oldest first: all of them, unless the saga has
    /// seen more than [`HISTORY_KEPT`]; then the first
    /// [`HISTORY_HEAD`] and the latest ones, and `history_omitted` counts
    /// those dropped between them. A saga retried for days (or RetrySaga'd
    /// again and again) keeps a bounded document, far from MongoDB's
    /// 16 MB limit, and still shows how it began and how it is going.
    pub history: Vec<Transition>,
    /// How many transitions were dropped from the middle of `history`.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub history_omitted: u64,
    /// Why the saga is compensating, cancelled or failed.
    pub reason: Option<String>,
    /// When a participant's refusal started the compensation: the stable
    /// code it gave (its `google.rpc.ErrorInfo` reason, e.g.
    /// `INSUFFICIENT_FUNDS`, or a generic step's `reason_code`), what a
    /// program matches on instead of the words. Kept once set (a saga
    /// refuses at most once: no action follows a refusal).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub refusal_code: Option<String>,
    /// When the saga was created (ms since the epoch).
    pub created_at_ms: i64,
    /// When it last changed state.
    pub updated_at_ms: i64,
    /// Optimistic-concurrency version: every store update requires the
    /// version it read and increments it.
    pub version: u64,
    /// Which orchestrator instance drives the saga, and until when. None
    /// once terminal (or released at shutdown).
    #[serde(default)]
    pub lease: Option<Lease>,
    /// The W3C trace id of the CreateOrder call that started the saga, when
    /// its caller sent a `traceparent`: the saga continues the caller's
    /// trace (see [`Saga::trace_id`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub client_trace_id: Option<String>,
    /// Set when the store refused the saga's next version for a reason
    /// that will not pass by itself (see [`Attention`]); cleared by the
    /// next version the store accepts.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub attention: Option<Attention>,
}

/// Why a saga needs a person: the store refused to save its next version
/// (a document over the size limit, a failed schema validation, missing
/// privileges — `StoreError::Rejected`), so it stays at its last saved
/// state. Written beside that state without changing its version (the
/// history stays one linear sequence of the engine's own writes), shown by
/// GetSaga and ListSagas (`needs_attention` lists exactly these), and
/// cleared when a later attempt — recovery retries the saga after its
/// lease, once the cause is fixed — is saved.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Attention {
    /// What the store said, cut to [`TEXT_KEPT`] bytes.
    pub reason: String,
    /// When the store first refused it (ms since the epoch); kept while
    /// later attempts are refused too.
    pub since_ms: i64,
    /// When the store refused it last.
    pub last_ms: i64,
}

impl Attention {
    /// A refusal `reason` at `now_ms`, following `previous` (the saga's
    /// attention before this attempt, if any).
    pub fn refused(previous: Option<&Attention>, reason: String, now_ms: i64) -> Self {
        Attention {
            reason: bounded_text(reason),
            since_ms: previous.map_or(now_ms, |p| p.since_ms),
            last_ms: now_ms,
        }
    }
}

/// A time-limited claim on driving one saga, kept in the store. The owner
/// renews it with every write; after `until_ms` any instance may take the
/// saga over (its write must still carry the version it read, so two
/// instances never both advance it).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Lease {
    /// The instance driving the saga.
    pub owner: String,
    /// When the lease expires (ms since the epoch) unless renewed.
    pub until_ms: i64,
}

impl Saga {
    /// The step called `name`.
    pub fn step(&self, name: &str) -> Option<&StepState> {
        self.steps.iter().find(|s| s.name == name)
    }

    /// Lease expiry used by store queries: 0 when unowned.
    pub fn lease_until_ms(&self) -> i64 {
        self.lease.as_ref().map_or(0, |l| l.until_ms)
    }

    /// The lease owner, if any.
    pub fn lease_owner(&self) -> Option<&str> {
        self.lease.as_ref().map(|l| l.owner.as_str())
    }

    /// From when recovery may pick the saga up (ms since the epoch): 0 for
    /// an unfinished saga nobody leases, its lease expiry for a leased one,
    /// and `i64::MAX` (never) once terminal. Stores keep it in one indexed
    /// field so that "what can I resume now" is a single range scan of one
    /// index, already in the order to resume in (longest waiting first),
    /// instead of a query over status, lease and owner that no index
    /// serves without a sort.
    pub fn claimable_after_ms(&self) -> i64 {
        if self.status.is_terminal() {
            i64::MAX
        } else {
            self.lease_until_ms()
        }
    }

    /// Marks the history entries added since the last save as written by
    /// `writer` at the saga's current `version`: called right before each
    /// store write, after the version was incremented. Together with the
    /// versioned writes this makes the stored history auditable: versions
    /// 1..=`version` in order, each written by one instance, ownership
    /// moving only with a claim.
    pub fn stamp_history(&mut self, writer: &str) {
        let version = self.version;
        for t in self.history.iter_mut().rev() {
            if t.version.is_some() {
                break;
            }
            t.version = Some(version);
            t.by = Some(writer.to_owned());
        }
    }

    /// From when the saga counts toward retention (ms since the epoch):
    /// when it became COMPLETED or CANCELLED. `None` for every other
    /// status — FAILED waits for a person and RetrySaga, the others are
    /// not finished — so those are never deleted.
    pub fn expires_from_ms(&self) -> Option<i64> {
        matches!(self.status, SagaStatus::Completed | SagaStatus::Cancelled)
            .then_some(self.updated_at_ms)
    }

    /// The saga's W3C trace id, which joins its log lines across the three
    /// services and every restart: the caller's, when CreateOrder carried a
    /// `traceparent` (the client's trace wins, so the saga shows up in it);
    /// otherwise the saga id's 32 hex digits (anything that is not a UUID
    /// is hashed into 32 hex digits).
    pub fn trace_id(&self) -> String {
        if let Some(client) = &self.client_trace_id {
            return client.clone();
        }
        match uuid::Uuid::parse_str(&self.saga_id) {
            Ok(id) => id.simple().to_string(),
            Err(_) => {
                use sha2::{Digest, Sha256};
                hex::encode(&Sha256::digest(self.saga_id.as_bytes())[..16])
            }
        }
    }
}
