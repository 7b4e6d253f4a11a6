//! A real saga step with one of its calls changed by a test.
//!
//! Tests that need a step to pause, hang or fail at a moment they choose
//! wrap the real step: they write only the call they change (a
//! [`StepHook`]), and [`Wrapped`] forwards the names, the other call and
//! the participant's records to the real step.

use async_trait::async_trait;
use orchestrator::saga::{Saga, StepState};
use orchestrator::step::{ParticipantRecord, SagaStep, StepOutcome};
use std::sync::Arc;

/// What a test changes in a real step. Each call defaults to the real
/// step's.
#[async_trait]
pub trait StepHook: Send + Sync + 'static {
    /// The real step.
    fn inner(&self) -> &Arc<dyn SagaStep>;

    /// The action.
    async fn act(&self, saga: &Saga, step: &StepState) -> StepOutcome {
        self.inner().act(saga, step).await
    }

    /// The compensation.
    async fn compensate(&self, saga: &Saga, step: &StepState) -> StepOutcome {
        self.inner().compensate(saga, step).await
    }
}

/// The real step of `H`, with the calls `H` changes.
pub struct Wrapped<H>(pub H);

impl<H: StepHook> Wrapped<H> {
    /// `hook`'s step, ready for a saga definition.
    pub fn step(hook: H) -> Arc<dyn SagaStep> {
        Arc::new(Wrapped(hook))
    }
}

#[async_trait]
impl<H: StepHook> SagaStep for Wrapped<H> {
    fn name(&self) -> &'static str {
        self.0.inner().name()
    }

    fn action(&self) -> &'static str {
        self.0.inner().action()
    }

    fn compensation(&self) -> &'static str {
        self.0.inner().compensation()
    }

    async fn act(&self, saga: &Saga, step: &StepState) -> StepOutcome {
        self.0.act(saga, step).await
    }

    async fn compensate(&self, saga: &Saga, step: &StepState) -> StepOutcome {
        self.0.compensate(saga, step).await
    }

    async fn records(
        &self,
        saga: &Saga,
        step: &StepState,
    ) -> Result<Vec<ParticipantRecord>, String> {
        self.0.inner().records(saga, step).await
    }
}
