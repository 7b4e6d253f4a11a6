//! The executor: performs what the engine decides and persists every result.
//!
//! For each piece of work the engine names it sends one RPC (through a
//! [`StepInvoker`]), classifies the reply ([`crate::classify`]), records the
//! outcome in the saga ([`engine::record`]) and saves it — all before the
//! next RPC. Retries reuse the step's stable request id, with exponential
//! backoff and jitter from `backon`, within an attempt budget.
//!
//! Store writes are optimistic: if another writer advanced the saga, this
//! driver stops (the other one owns it). A store that is down is waited for:
//! nothing is sent to a participant until the previous outcome is durable.

use crate::classify::{FailureClass, classify};
use crate::engine::{self, Next, Outcome};
use crate::hub::SagaHub;
use crate::saga::{Saga, Step};
use crate::store::{SagaStore, StoreError};
use async_trait::async_trait;
use backon::{BackoffBuilder, ExponentialBuilder};
use operation_history::now_ms;
use service_kit::shutdown::Shutdown;
use std::sync::Arc;
use std::time::Duration;
use tracing::Instrument;

/// Whether a call does or undoes a step.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Phase {
    Action,
    Compensation,
}

/// Sends a step's action or compensation to its participant.
#[async_trait]
pub trait StepInvoker: Send + Sync + 'static {
    async fn invoke(&self, saga: &Saga, step: &Step, phase: Phase) -> Result<(), tonic::Status>;
}

/// Attempt budgets and backoff bounds.
#[derive(Debug, Clone)]
pub struct RetryPolicy {
    /// Attempts of a forward action before its outcome counts as unknown
    /// and the saga compensates.
    pub action_attempts: u32,
    /// Attempts of a compensation before the saga is marked Failed.
    pub compensation_attempts: u32,
    pub min_delay: Duration,
    pub max_delay: Duration,
}

impl Default for RetryPolicy {
    fn default() -> Self {
        RetryPolicy {
            action_attempts: 5,
            compensation_attempts: 30,
            min_delay: Duration::from_millis(20),
            max_delay: Duration::from_secs(2),
        }
    }
}

impl RetryPolicy {
    fn backoff(&self) -> backon::ExponentialBackoff {
        ExponentialBuilder::default()
            .with_min_delay(self.min_delay)
            .with_max_delay(self.max_delay)
            .with_jitter()
            .without_max_times()
            .build()
    }
}

/// Why driving a saga stopped before it was terminal.
#[derive(Debug, thiserror::Error)]
pub enum DriveError {
    #[error("another writer advanced the saga; it drives it now")]
    Superseded,
    #[error("shutting down; the saga resumes from its persisted state on restart")]
    ShuttingDown,
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// Drives sagas to a terminal state.
pub struct Executor {
    store: Arc<dyn SagaStore>,
    invoker: Arc<dyn StepInvoker>,
    policy: RetryPolicy,
    hub: Arc<SagaHub>,
    shutdown: Shutdown,
}

impl Executor {
    pub fn new(
        store: Arc<dyn SagaStore>,
        invoker: Arc<dyn StepInvoker>,
        policy: RetryPolicy,
        hub: Arc<SagaHub>,
        shutdown: Shutdown,
    ) -> Self {
        Executor {
            store,
            invoker,
            policy,
            hub,
            shutdown,
        }
    }

    /// Drives `saga` on its own task, so it continues whatever the caller does.
    pub fn spawn(self: &Arc<Self>, saga: Saga) {
        let this = self.clone();
        let span =
            tracing::info_span!("saga", saga_id = %saga.saga_id, request_id = %saga.request_id);
        tokio::spawn(
            async move {
                match this.drive(saga).await {
                    Ok(saga) => tracing::info!(status = saga.status.as_str(), "saga finished"),
                    Err(DriveError::ShuttingDown) => tracing::info!("saga paused for shutdown"),
                    Err(error) => tracing::warn!(%error, "stopped driving saga"),
                }
            }
            .instrument(span),
        );
    }

    /// Runs the saga until it is terminal; returns its final state.
    pub async fn drive(&self, mut saga: Saga) -> Result<Saga, DriveError> {
        let mut current = Next::Done;
        let mut backoff = self.policy.backoff();
        loop {
            let work = engine::next(&saga);
            let (i, phase) = match work {
                Next::Done => {
                    self.hub.publish(&saga);
                    return Ok(saga);
                }
                Next::Act(i) => (i, Phase::Action),
                Next::Compensate(i) => (i, Phase::Compensation),
            };
            if self.shutdown.is_triggered() {
                return Err(DriveError::ShuttingDown);
            }
            if work != current {
                current = work;
                backoff = self.policy.backoff();
            }
            let step = &saga.steps[i];
            let attempt = match phase {
                Phase::Action => step.attempts,
                Phase::Compensation => step.compensation_attempts,
            };
            let span = tracing::info_span!(
                "step",
                step = %step.name,
                request_id = %step.request_id,
                phase = ?phase,
                attempt
            );
            let reply = self
                .invoker
                .invoke(&saga, step, phase)
                .instrument(span.clone())
                .await;
            let outcome = self.outcome(phase, attempt, reply);
            let retrying = matches!(
                outcome,
                Outcome::Retrying(_) | Outcome::CompensationRetrying(_)
            );
            span.in_scope(|| log_outcome(&outcome));
            engine::record(&mut saga, work, outcome, now_ms());
            self.persist(&mut saga).await?;
            self.hub.publish(&saga);
            if retrying {
                let delay = backoff.next().unwrap_or(self.policy.max_delay);
                tokio::select! {
                    _ = tokio::time::sleep(delay) => {}
                    _ = self.shutdown.wait() => return Err(DriveError::ShuttingDown),
                }
            }
        }
    }

    fn outcome(&self, phase: Phase, attempt: u32, reply: Result<(), tonic::Status>) -> Outcome {
        let error = match reply {
            Ok(()) => {
                return match phase {
                    Phase::Action => Outcome::Succeeded,
                    Phase::Compensation => Outcome::Compensated,
                };
            }
            Err(status) => status,
        };
        let message = format!("{:?}: {}", error.code(), error.message());
        match phase {
            Phase::Action => match classify(&error) {
                FailureClass::Refused => Outcome::Refused(message),
                FailureClass::Transient if attempt >= self.policy.action_attempts => {
                    Outcome::GaveUp(message)
                }
                FailureClass::Transient => Outcome::Retrying(message),
            },
            // A compensation must eventually happen: even a refusal (which
            // would be a bug) is retried until the budget runs out, then a
            // person looks at it.
            Phase::Compensation if attempt >= self.policy.compensation_attempts => {
                Outcome::CompensationGaveUp(message)
            }
            Phase::Compensation => Outcome::CompensationRetrying(message),
        }
    }

    /// Saves the saga's next version, waiting out store outages.
    async fn persist(&self, saga: &mut Saga) -> Result<(), DriveError> {
        saga.version += 1;
        let mut backoff = self.policy.backoff();
        loop {
            let error = match self.store.save(saga).await {
                Ok(()) => return Ok(()),
                Err(error) => error,
            };
            match error {
                StoreError::Conflict { .. } => {
                    // An earlier attempt may have committed without us
                    // hearing back: that is not a conflict.
                    return match self.store.get(&saga.saga_id).await {
                        Ok(Some(stored)) if stored == *saga => Ok(()),
                        _ => Err(DriveError::Superseded),
                    };
                }
                StoreError::Unavailable(ref message) => {
                    tracing::warn!(error = %message, "store unavailable; waiting before saving the saga again");
                    let delay = backoff.next().unwrap_or(self.policy.max_delay);
                    tokio::select! {
                        _ = tokio::time::sleep(delay) => {}
                        _ = self.shutdown.wait() => return Err(DriveError::ShuttingDown),
                    }
                }
                StoreError::Corrupt(_) => return Err(error.into()),
            }
        }
    }
}

fn log_outcome(outcome: &Outcome) {
    match outcome {
        Outcome::Succeeded => tracing::debug!("action applied"),
        Outcome::Compensated => tracing::info!("compensation applied"),
        Outcome::Refused(reason) => tracing::info!(%reason, "action refused; compensating"),
        Outcome::Retrying(error) | Outcome::CompensationRetrying(error) => {
            tracing::warn!(%error, "attempt failed; retrying")
        }
        Outcome::GaveUp(error) => tracing::warn!(%error, "attempt budget spent; compensating"),
        Outcome::CompensationGaveUp(error) => {
            tracing::error!(%error, "compensation budget spent; saga FAILED and needs attention")
        }
    }
}
