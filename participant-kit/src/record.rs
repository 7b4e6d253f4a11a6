//! One row of the operationHistory and the states it moves through.

use crate::Operation;
use service_kit::time::now_ms;

/// One entry of a participant's operationHistory, unique by
/// `(request_id, kind)`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OperationRecord {
    /// The caller's idempotency key.
    pub request_id: String,
    /// The operation kind (`charge`, `refund`, `deduct`, …).
    pub kind: String,
    /// Account or product the operation concerns.
    pub subject: String,
    /// Cents or units, for display.
    pub amount: i64,
    /// Hex digest of the parameters ([`Fingerprint`](service_kit::fingerprint::Fingerprint)).
    pub fingerprint: String,
    /// The parameters as named fields (`Fingerprint::encode_fields`), for
    /// refusals that must say which field differed.
    pub parameters: String,
    /// Where the operation stands.
    pub status: RecordStatus,
    /// Participant-specific data recorded with the outcome (a refusal
    /// message, a balance).
    pub detail: String,
    /// Milliseconds since the Unix epoch.
    pub recorded_at_ms: i64,
}

impl OperationRecord {
    pub(crate) fn new(op: &Operation<'_>, kind: &str, status: RecordStatus) -> Self {
        OperationRecord {
            request_id: op.request_id.to_owned(),
            kind: kind.to_owned(),
            subject: op.subject.to_owned(),
            amount: op.amount,
            fingerprint: op.fingerprint.as_str().to_owned(),
            parameters: op.fingerprint.encode_fields(),
            status,
            detail: String::new(),
            recorded_at_ms: now_ms(),
        }
    }
}

/// Where an operation stands. A record is inserted with its outcome and
/// never changes afterwards.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RecordStatus {
    /// Action applied.
    Applied,
    /// Action refused for a business reason (recorded, so replayed).
    Refused,
    /// Action key taken by a compensation that arrived first.
    Blocked,
    /// Compensation undid an applied action.
    Undone,
    /// Compensation arrived before its action.
    NullCompensation,
    /// Compensation of a refused action.
    NothingToUndo,
}

impl RecordStatus {
    /// The stored form.
    pub fn as_str(self) -> &'static str {
        match self {
            RecordStatus::Applied => "applied",
            RecordStatus::Refused => "refused",
            RecordStatus::Blocked => "blocked",
            RecordStatus::Undone => "undone",
            RecordStatus::NullCompensation => "null_compensation",
            RecordStatus::NothingToUndo => "nothing_to_undo",
        }
    }

    /// Reads back [`RecordStatus::as_str`].
    pub fn parse(s: &str) -> Option<Self> {
        Some(match s {
            "applied" => RecordStatus::Applied,
            "refused" => RecordStatus::Refused,
            "blocked" => RecordStatus::Blocked,
            "undone" => RecordStatus::Undone,
            "null_compensation" => RecordStatus::NullCompensation,
            "nothing_to_undo" => RecordStatus::NothingToUndo,
            _ => return None,
        })
    }
}

/// One entry a participant lists for a request id (`ListOperations`): an
/// operationHistory record, or an order line recorded under that request id
/// (inventory's deducted lines, with their index). What people read, so
/// statuses are their stored words and no fingerprint is shown.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LoggedOperation {
    /// The caller's idempotency key.
    pub request_id: String,
    /// `charge`, `refund`, `deduct`, `restock`, …
    pub kind: String,
    /// A [`RecordStatus`] word, or `deducted`/`restocked` for an order line.
    pub status: String,
    /// Cents or units.
    pub amount: i64,
    /// The recorded detail (a refusal's reason, a balance).
    pub detail: String,
    /// Milliseconds since the Unix epoch.
    pub recorded_at_ms: i64,
    /// The order line (order lines only).
    pub line_index: Option<i32>,
    /// The account or product concerned (empty for an operation on several
    /// products).
    pub subject: String,
}

impl From<OperationRecord> for LoggedOperation {
    fn from(r: OperationRecord) -> Self {
        LoggedOperation {
            request_id: r.request_id,
            kind: r.kind,
            status: r.status.as_str().to_owned(),
            amount: r.amount,
            detail: r.detail,
            recorded_at_ms: r.recorded_at_ms,
            line_index: None,
            subject: r.subject,
        }
    }
}
