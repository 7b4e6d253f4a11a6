//! Storage for the payment participant, in domain terms.
//!
//! The trait says what a payment store must guarantee, not how: each
//! mutating method applies its effect and its operationHistory record
//! atomically, keyed by `(request_id, kind)`. Callers (the gRPC adapter)
//! never see SQL or BSON, so backends can be swapped by configuration.

pub mod ledger;
mod mongo;
mod sqlite;

pub use mongo::MongoPaymentStore;
pub use sqlite::SqlitePaymentStore;

use async_trait::async_trait;
use participant_kit::{
    ActionReply, Admission, CompensationResult, HistoryExpiry, OperationLog, OperationRecord,
    ParticipantError,
};
use service_kit::fingerprint::Fingerprint;

/// Operation kind of a charge in the operationHistory.
pub const CHARGE: &str = "charge";
/// Operation kind of a refund (the compensation of a charge).
pub const REFUND: &str = "refund";
/// Operation kind of a deposit.
pub const DEPOSIT: &str = "deposit";

/// A movement of money for one customer, identified by `request_id`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Transfer {
    /// The caller's idempotency key.
    pub request_id: String,
    /// Whose balance moves.
    pub customer_id: String,
    /// How much, in cents (positive).
    pub amount_cents: i64,
    /// The parameters a duplicate must repeat, when the call carried more
    /// than the transfer (a step call: every field of its `StepCall`);
    /// `None`: the customer and the amount.
    pub parameters: Option<Fingerprint>,
}

impl Transfer {
    /// A transfer whose parameters are its customer and amount.
    pub fn new(request_id: String, customer_id: String, amount_cents: i64) -> Self {
        Transfer {
            request_id,
            customer_id,
            amount_cents,
            parameters: None,
        }
    }

    /// The parameters a duplicate must repeat exactly.
    pub fn fingerprint(&self) -> Fingerprint {
        if let Some(parameters) = &self.parameters {
            return parameters.clone();
        }
        Fingerprint::of([
            ("customer_id", self.customer_id.clone()),
            ("amount_cents", self.amount_cents.to_string()),
        ])
    }
}

/// Balance and recent history of one account.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AccountView {
    /// The account.
    pub customer_id: String,
    /// Its balance in cents.
    pub balance_cents: i64,
    /// Newest first.
    pub recent_operations: Vec<OperationRecord>,
}

/// The payment participant's storage. Its [`OperationLog`] lists the
/// operationHistory records of a request id (`ListOperations`).
#[async_trait]
pub trait PaymentStore: OperationLog + HistoryExpiry + Send + Sync + 'static {
    /// Takes the amount from the balance; refused when the account is
    /// unknown or short, or when `admission` says so (through the barrier:
    /// a charge already applied stays applied). Returns the balance after
    /// the charge.
    async fn charge(
        &self,
        charge: Transfer,
        admission: Admission,
    ) -> Result<ActionReply<i64>, ParticipantError>;

    /// Compensates the charge with the same request id and parameters.
    async fn refund(&self, refund: Transfer) -> Result<CompensationResult, ParticipantError>;

    /// Adds money, creating the account if absent. Returns the new balance.
    async fn deposit(&self, deposit: Transfer) -> Result<ActionReply<i64>, ParticipantError>;

    /// `None` when the customer has no account.
    async fn account(
        &self,
        customer_id: String,
        operation_limit: usize,
    ) -> Result<Option<AccountView>, ParticipantError>;
}
