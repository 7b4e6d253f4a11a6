//! What serves the step contract, in domain terms: the store the gRPC
//! adapter ([`super::grpc`]) calls, whatever its participant does.
//!
//! Every participant serves `participant.v1.SagaStepService` through this
//! one trait: a service of [`super::StepRules`] through [`super::SqliteSteps`]
//! or [`super::MongoSteps`], payment-svc and inventory-svc through a small
//! mapping of a [`StepCall`] onto their own charge/refund and
//! deduct/restock. So the adapter, its batches, its pipeline and its
//! metrics are written once for all of them.

use super::call::StepCall;
use super::protocol::step_refusal;
use super::rules::StepRefusal;
use crate::counter::Counter;
use crate::{
    ActionReply, Admission, CompensationResult, HistoryExpiry, OperationLog, ParticipantError,
    Refusal, RefusalReasons,
};
use async_trait::async_trait;

/// A participant's storage behind the step contract: each Act and
/// Compensate applies its effect and its operationHistory record in one
/// transaction. Its [`OperationLog`] lists a request id's records; its
/// [`HistoryExpiry`] keeps them for the history retention.
#[async_trait]
pub trait StepStore: OperationLog + HistoryExpiry + Send + Sync + 'static {
    /// The operation kinds its records and metrics name the action and the
    /// compensation by (`act` / `compensate`; `charge` / `refund`).
    fn kinds(&self) -> (&'static str, &'static str);

    /// Act: applied or refused (by the participant's rules, or by
    /// `admission` through the barrier), or the recorded outcome replayed.
    /// The applied value is the detail people read.
    async fn act(
        &self,
        call: StepCall,
        admission: Admission,
    ) -> Result<ActionReply<String>, ParticipantError>;

    /// Compensate: undone once, a null compensation, nothing to undo, or
    /// the recorded effect replayed.
    async fn compensate(&self, call: StepCall) -> Result<CompensationResult, ParticipantError>;

    /// The contract's reason code and detail of a refusal this store
    /// answered: by default the form [`super::protocol`] records a
    /// [`StepRefusal`] in.
    fn refusal(&self, refusal: &Refusal) -> StepRefusal {
        step_refusal(refusal)
    }
}

/// The reason code and detail of a participant's own business refusal:
/// the ErrorInfo reason `reasons` give its kind (`INSUFFICIENT_FUNDS`), or
/// the refusal's own (`INJECTED_REFUSAL`), and its message. What a
/// participant with domain refusals (payment, inventory) answers in
/// [`StepStore::refusal`].
pub fn domain_refusal(refusal: &Refusal, reasons: &RefusalReasons) -> StepRefusal {
    StepRefusal::new(reasons.of(refusal).reason, refusal.message.clone())
}

/// The store of a participant of [`super::StepRules`], which can also read
/// the rules' counters (tests, tools).
#[async_trait]
pub trait RulesStore: StepStore {
    /// The value of one of the rules' counters; `None` when the key has
    /// none.
    async fn counter(&self, counter: Counter, key: String)
    -> Result<Option<i64>, ParticipantError>;
}

/// A store shared behind an `Arc` (a participant's `Arc<dyn PaymentStore>`)
/// as a [`StepStore`] of its own: what the kit serves the contract over
/// when a participant's store trait object implements [`StepStore`].
pub struct Shared<S: ?Sized>(pub std::sync::Arc<S>);

#[async_trait]
impl<S: ?Sized + StepStore> StepStore for Shared<S> {
    fn kinds(&self) -> (&'static str, &'static str) {
        self.0.kinds()
    }

    async fn act(
        &self,
        call: StepCall,
        admission: Admission,
    ) -> Result<ActionReply<String>, ParticipantError> {
        self.0.act(call, admission).await
    }

    async fn compensate(&self, call: StepCall) -> Result<CompensationResult, ParticipantError> {
        self.0.compensate(call).await
    }

    fn refusal(&self, refusal: &Refusal) -> StepRefusal {
        self.0.refusal(refusal)
    }
}

#[async_trait]
impl<S: ?Sized + StepStore> OperationLog for Shared<S> {
    async fn operations(
        &self,
        request_id: String,
    ) -> Result<Vec<crate::LoggedOperation>, ParticipantError> {
        self.0.operations(request_id).await
    }
}

#[async_trait]
impl<S: ?Sized + StepStore> HistoryExpiry for Shared<S> {
    async fn purge_recorded_before(
        &self,
        cutoff_ms: i64,
        limit: usize,
    ) -> Result<service_kit::purge::PurgeBatch, ParticipantError> {
        self.0.purge_recorded_before(cutoff_ms, limit).await
    }

    async fn reclaim(&self) -> Result<u64, ParticipantError> {
        self.0.reclaim().await
    }

    async fn size_bytes(&self) -> Result<u64, ParticipantError> {
        self.0.size_bytes().await
    }
}
