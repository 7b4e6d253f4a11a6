//! What a saga step is: one value that carries its names and knows how to
//! call its action and its compensation.
//!
//! A saga definition is a list of such values. Because [`SagaStep`]
//! requires both [`SagaStep::act`] and [`SagaStep::compensate`], a step
//! without its calls does not compile — it cannot turn up at run time as an
//! "unimplemented" error that gets retried, compensated and FAILED.
//!
//! The executor sees only domain outcomes ([`StepOutcome`]): whether a call
//! was applied, refused for a business reason, or left its outcome unknown.
//! Turning a transport's status into one of those is the step
//! implementation's job (for participants, `participant::reply`), so no
//! wire type reaches the engine or the executor.

use crate::engine::StepNames;
use crate::saga::{Refusal, Saga, StepState};
use async_trait::async_trait;
use std::collections::HashSet;
use std::sync::Arc;

/// Whether a call does or undoes a step.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Phase {
    /// The step's action (e.g. charge).
    Action,
    /// The step's compensation (e.g. refund).
    Compensation,
}

impl Phase {
    /// A short label (metrics, logs).
    pub fn as_str(self) -> &'static str {
        match self {
            Phase::Action => "action",
            Phase::Compensation => "compensation",
        }
    }
}

/// What one call to a participant ended with, in domain terms.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StepOutcome {
    /// The action was applied, or the compensation is confirmed.
    Done,
    /// The participant refused for a business reason. It recorded the
    /// refusal, so asking again gets the same answer: compensate instead.
    Refused(Refusal),
    /// The outcome is unknown (unreachable, timed out, overloaded,
    /// crashed): the call may or may not have been applied. Retry with the
    /// same request id; the participant's barrier turns a repeat into a
    /// replay.
    Transient(String),
}

/// One entry a participant recorded under a step's request id (its
/// operationHistory record of the action or the compensation, or an order
/// line it recorded), as a person inspecting the saga reads it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ParticipantRecord {
    /// The step's request id.
    pub request_id: String,
    /// `charge`, `refund`, `deduct`, `restock`, …
    pub kind: String,
    /// `applied`, `refused`, `blocked`, `undone`, `null_compensation`,
    /// `nothing_to_undo`; `deducted`/`restocked` for an order line.
    pub status: String,
    /// Cents or units.
    pub amount: i64,
    /// The recorded detail (a refusal's reason, a balance).
    pub detail: String,
    /// When it was recorded (ms since the epoch).
    pub recorded_at_ms: i64,
    /// The order line, for a line.
    pub line_index: Option<i32>,
    /// The account or product it concerns (empty when several).
    pub subject: String,
}

/// One step of a saga: its names and its two calls.
///
/// Both calls receive the saga (its order and ids) and the step (its stable
/// request id, attempts), and must send the step's `request_id` as the
/// participant's idempotency key, for the action and its compensation alike.
#[async_trait]
pub trait SagaStep: Send + Sync + 'static {
    /// The step's name in the saga (also the suffix of its request id).
    fn name(&self) -> &'static str;
    /// The name of the action (e.g. `charge`), for display.
    fn action(&self) -> &'static str;
    /// The name of the compensation (e.g. `refund`), for display.
    fn compensation(&self) -> &'static str;
    /// Sends the action.
    async fn act(&self, saga: &Saga, step: &StepState) -> StepOutcome;
    /// Sends the compensation.
    async fn compensate(&self, saga: &Saga, step: &StepState) -> StepOutcome;
    /// Reads what the step's participant recorded under the step's request
    /// id, oldest first — for people inspecting the saga (the console);
    /// never part of driving it. `Err` says why it could not be read.
    async fn records(
        &self,
        saga: &Saga,
        step: &StepState,
    ) -> Result<Vec<ParticipantRecord>, String>;
}

/// A definition that cannot be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DefinitionError {
    /// A saga needs at least one step.
    #[error("a saga definition needs at least one step")]
    Empty,
    /// Step names identify steps in stored sagas and request ids.
    #[error("step name {0:?} is used twice")]
    DuplicateName(&'static str),
}

/// A saga type: its steps in forward order.
#[derive(Clone)]
pub struct SagaDefinition {
    steps: Vec<Arc<dyn SagaStep>>,
    names: Vec<StepNames>,
}

impl std::fmt::Debug for SagaDefinition {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SagaDefinition")
            .field("steps", &self.names)
            .finish()
    }
}

impl SagaDefinition {
    /// A definition of `steps`, in forward order.
    pub fn new(steps: Vec<Arc<dyn SagaStep>>) -> Result<Self, DefinitionError> {
        if steps.is_empty() {
            return Err(DefinitionError::Empty);
        }
        let mut seen = HashSet::new();
        for step in &steps {
            if !seen.insert(step.name()) {
                return Err(DefinitionError::DuplicateName(step.name()));
            }
        }
        let names = steps
            .iter()
            .map(|s| StepNames {
                name: s.name(),
                action: s.action(),
                compensation: s.compensation(),
            })
            .collect();
        Ok(SagaDefinition { steps, names })
    }

    /// The steps' names, in forward order (what the engine needs).
    pub fn names(&self) -> &[StepNames] {
        &self.names
    }

    /// The steps, in forward order.
    pub fn steps(&self) -> &[Arc<dyn SagaStep>] {
        &self.steps
    }

    /// The step called `name`, if this definition has one.
    pub fn step(&self, name: &str) -> Option<&dyn SagaStep> {
        self.steps
            .iter()
            .find(|s| s.name() == name)
            .map(|s| s.as_ref())
    }
}
