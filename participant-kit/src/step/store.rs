//! The store of a generic step participant, in domain terms: what the
//! gRPC adapter calls, whichever backend runs the rules.

use super::call::StepCall;
use crate::counter::Counter;
use crate::{
    ActionReply, Admission, CompensationResult, HistoryExpiry, OperationLog, ParticipantError,
};
use async_trait::async_trait;

/// A generic step participant's storage: each Act and Compensate applies
/// the rules' effect and its operationHistory record in one transaction.
/// Its [`OperationLog`] lists a request id's records; its
/// [`HistoryExpiry`] keeps them for the history retention.
#[async_trait]
pub trait StepStore: OperationLog + HistoryExpiry + Send + Sync + 'static {
    /// Act: the rules applied or refused (by themselves, or by `admission`
    /// through the barrier), or the recorded outcome replayed. The applied
    /// value is the recorded detail.
    async fn act(
        &self,
        call: StepCall,
        admission: Admission,
    ) -> Result<ActionReply<String>, ParticipantError>;

    /// Compensate: undone once, a null compensation, nothing to undo, or
    /// the recorded effect replayed.
    async fn compensate(&self, call: StepCall) -> Result<CompensationResult, ParticipantError>;

    /// The value of one of the rules' counters (tests, tools); `None` when
    /// the key has none.
    async fn counter(&self, counter: Counter, key: String)
    -> Result<Option<i64>, ParticipantError>;
}
