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
