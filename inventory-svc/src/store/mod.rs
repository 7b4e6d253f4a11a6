//! Storage for the inventory participant, in domain terms.
//!
//! The trait says what an inventory store must guarantee, not how: each
//! mutating method applies its effect and its operationHistory record
//! atomically, keyed by `(request_id, kind)`, and a deduction is all or
//! nothing across its lines. Callers (the gRPC adapter) never see SQL or
//! BSON, so backends can be swapped by configuration.

mod mongo;
mod sqlite;
pub mod stock;

pub use mongo::{DEDUCT_LINES_SHARD_KEY, MongoInventoryStore, deduct_line_indexes};
pub use sqlite::SqliteInventoryStore;

use async_trait::async_trait;
use participant_kit::{
    ActionReply, Admission, CompensationResult, HistoryExpiry, LoggedOperation, OperationLog,
    OperationRecord, ParticipantError,
};
use service_kit::fingerprint::Fingerprint;

/// Operation kind of a deduction in the operationHistory.
pub const DEDUCT: &str = "deduct";
/// Operation kind of a restock (the compensation of a deduction).
pub const RESTOCK: &str = "restock";
/// Operation kind of a stock addition.
pub const ADD_STOCK: &str = "add_stock";

/// One order line: units of one product.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Line {
    /// The product.
    pub product_id: String,
    /// Units (positive).
    pub quantity: i64,
}

/// The lines of one order, identified by `request_id`. Deduct takes them;
/// Restock, its compensation, carries the same value to put them back.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Deduction {
    /// The caller's idempotency key.
    pub request_id: String,
    /// In order; a line's position is its stable `line_index`.
    pub lines: Vec<Line>,
    /// The parameters a duplicate must repeat, when the call carried more
    /// than the lines (a step call: every field of its `StepCall`);
    /// `None`: the lines.
    pub parameters: Option<Fingerprint>,
}

impl Deduction {
    /// A deduction whose parameters are its lines.
    pub fn new(request_id: String, lines: Vec<Line>) -> Self {
        Deduction {
            request_id,
            lines,
            parameters: None,
        }
    }

    /// The parameters a duplicate (and the compensation) must repeat
    /// exactly: the ordered list of `(product_id, quantity)`, kept line by
    /// line so a mismatch names the line.
    pub fn fingerprint(&self) -> Fingerprint {
        if let Some(parameters) = &self.parameters {
            return parameters.clone();
        }
        let lines: Vec<(&str, i64)> = self
            .lines
            .iter()
            .map(|l| (l.product_id.as_str(), l.quantity))
            .collect();
        let mut fields = vec![("lines".to_owned(), self.lines.len().to_string())];
        for (i, line) in self.lines.iter().enumerate() {
            fields.push((format!("lines[{i}].product_id"), line.product_id.clone()));
            fields.push((format!("lines[{i}].quantity"), line.quantity.to_string()));
        }
        Fingerprint::with_fields([("lines", format!("{lines:?}"))], fields)
    }

    /// Units over all lines; `None` when the sum does not fit in an int64.
    pub fn total_units(&self) -> Option<i64> {
        self.lines
            .iter()
            .try_fold(0i64, |sum, l| sum.checked_add(l.quantity))
    }
}

/// Units added to one product, identified by `request_id`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StockAddition {
    /// The caller's idempotency key.
    pub request_id: String,
    /// The product (created if absent).
    pub product_id: String,
    /// Units added (positive).
    pub quantity: i64,
}

impl StockAddition {
    /// The parameters a duplicate must repeat exactly.
    pub fn fingerprint(&self) -> Fingerprint {
        Fingerprint::of([
            ("product_id", self.product_id.clone()),
            ("quantity", self.quantity.to_string()),
        ])
    }
}

/// One operation that touched a product: a deducted (possibly restocked)
/// order line, or a stock addition.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProductOperation {
    /// The operation's idempotency key.
    pub request_id: String,
    /// `deduct` or `add_stock`.
    pub kind: String,
    /// `deducted`/`restocked` for a deduct line; the operationHistory status
    /// (`applied`, `refused`) for a stock addition.
    pub status: String,
    /// Units of this product the operation concerned.
    pub quantity: i64,
    /// The order line (deduct only).
    pub line_index: Option<i32>,
    /// The recorded detail (a refusal's reason, the availability after).
    pub detail: String,
    /// Milliseconds since the Unix epoch.
    pub recorded_at_ms: i64,
}

impl From<OperationRecord> for ProductOperation {
    fn from(r: OperationRecord) -> Self {
        ProductOperation {
            request_id: r.request_id,
            kind: r.kind,
            status: r.status.as_str().to_owned(),
            quantity: r.amount,
            line_index: None,
            detail: r.detail,
            recorded_at_ms: r.recorded_at_ms,
        }
    }
}

impl ProductOperation {
    /// This operation as `ListOperations` lists it, about `product_id`
    /// (for a deducted line: kind `deduct`, status `deducted`/`restocked`,
    /// its line index).
    pub fn logged(self, product_id: String) -> LoggedOperation {
        LoggedOperation {
            request_id: self.request_id,
            kind: self.kind,
            status: self.status,
            amount: self.quantity,
            detail: self.detail,
            recorded_at_ms: self.recorded_at_ms,
            line_index: self.line_index,
            subject: product_id,
        }
    }
}

/// A request id's listing: its operationHistory records, then its order
/// lines by index.
pub fn logged_operations(
    records: Vec<OperationRecord>,
    lines: Vec<LoggedOperation>,
) -> Vec<LoggedOperation> {
    records
        .into_iter()
        .map(LoggedOperation::from)
        .chain(lines)
        .collect()
}

/// Availability and recent history of one product.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProductView {
    /// The product.
    pub product_id: String,
    /// Units available.
    pub available: i64,
    /// Newest first.
    pub recent_operations: Vec<ProductOperation>,
}

impl ProductView {
    /// Merges the product's most recent deduct lines and operationHistory
    /// records (each already limited to `limit`) into one listing, newest
    /// first, cut to `limit`.
    pub fn merge(
        product_id: String,
        available: i64,
        lines: Vec<ProductOperation>,
        operations: Vec<OperationRecord>,
        limit: usize,
    ) -> Self {
        let mut recent_operations = lines;
        recent_operations.extend(operations.into_iter().map(ProductOperation::from));
        recent_operations.sort_by(|a, b| {
            b.recorded_at_ms
                .cmp(&a.recorded_at_ms)
                .then_with(|| b.request_id.cmp(&a.request_id))
                .then_with(|| b.line_index.cmp(&a.line_index))
        });
        recent_operations.truncate(limit);
        ProductView {
            product_id,
            available,
            recent_operations,
        }
    }
}

/// The inventory participant's storage. Its [`OperationLog`] lists a
/// request id's operationHistory records and then its deducted order lines
/// (`ListOperations`).
#[async_trait]
pub trait InventoryStore: OperationLog + HistoryExpiry + Send + Sync + 'static {
    /// Takes every line, or nothing: refused when a product is unknown or
    /// short (quantities of repeated products are added up first), or when
    /// `admission` says so (through the barrier: a deduction already
    /// applied stays applied).
    async fn deduct(
        &self,
        deduction: Deduction,
        admission: Admission,
    ) -> Result<ActionReply<()>, ParticipantError>;

    /// Compensates the deduction with the same request id and lines.
    async fn restock(&self, deduction: Deduction) -> Result<CompensationResult, ParticipantError>;

    /// Adds units, creating the product if absent. Returns the new
    /// availability.
    async fn add_stock(
        &self,
        addition: StockAddition,
    ) -> Result<ActionReply<i64>, ParticipantError>;

    /// `None` when the product does not exist.
    async fn product(
        &self,
        product_id: String,
        operation_limit: usize,
    ) -> Result<Option<ProductView>, ParticipantError>;
}
