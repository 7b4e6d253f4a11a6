//! The executor: performs what the engine decides and persists every result.
//!
//! For each piece of work the engine names it calls the step's action or
//! compensation (a [`SagaStep`](crate::step::SagaStep) of the
//! [`SagaDefinition`]), turns the domain
//! [`StepOutcome`](crate::step::StepOutcome) into the engine's outcome with
//! the attempt budgets and the step deadline ([`RetryPolicy::decide`]),
//! records it in the saga ([`engine::record_outcome`]) and saves it — all
//! before the next call. Retries reuse the step's stable request id, with
//! exponential backoff and jitter, within an attempt budget and a per-step
//! deadline.
//!
//! Ownership: an instance drives a saga only while it holds the saga's
//! [`Lease`] in the store. Every save renews it, and every save carries the
//! version read, so if another instance took the saga over (after the lease
//! expired) this driver's next save fails and it stops. No in-memory lock is
//! part of correctness; the `driving` set only avoids claiming a saga this
//! process is already driving.
//!
//! A store that is down is waited for: nothing is sent to a participant
//! until the previous outcome is durable.
//!
//! Time comes from the [`Clock`](service_kit::clock::Clock) in the
//! settings: leases, deadlines, the send window and every sleep, so tests
//! and simulations move time instead of waiting for it.
//!
//! - `policy.rs`: budgets, backoff and how a reply becomes an outcome.
//! - `drive.rs`: the loop that runs one saga to its end.
//! - `persist.rs`: saving a version, a lost reply, a refusal, the release.
//! - `recovery.rs`: claiming sagas whose lease expired, the sweep.

mod drive;
mod persist;
mod policy;
mod recovery;

pub use policy::{Call, Jitter, LeasePolicy, RetryPolicy};

use crate::engine;
use crate::hub::SagaHub;
use crate::saga::{Lease, Saga};
use crate::step::SagaDefinition;
use crate::store::{SagaStore, StoreError};
use service_kit::clock::SharedClock;
use service_kit::shutdown::Shutdown;
use std::collections::HashSet;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::{OwnedSemaphorePermit, Semaphore, oneshot};
use tracing::Instrument;

/// Why driving a saga stopped before it was terminal.
#[derive(Debug, thiserror::Error)]
pub enum DriveError {
    #[error("another writer advanced the saga; it drives it now")]
    /// Another instance advanced the saga (its lease expired here); it drives it now.
    Superseded,
    #[error("shutting down; the saga resumes from its persisted state on restart")]
    /// The process is stopping; the saga resumes from its persisted state.
    ShuttingDown,
    /// The saga has a step this orchestrator's steps file lacks (it was
    /// created under another): held, marked for a person, for an instance
    /// that has the step.
    #[error("the saga has a step {0:?} this orchestrator does not define")]
    UnknownStep(String),
    /// The engine refused an outcome that does not fit the saga's state: a
    /// bug, logged with the saga; the stored saga is untouched and recovery
    /// takes it up again after its lease.
    #[error(transparent)]
    Misfit(#[from] engine::Misfit),
    #[error(transparent)]
    /// The store failed in a way waiting does not cure.
    Store(#[from] StoreError),
}

/// Drives sagas to a terminal state.
pub struct Executor {
    store: Arc<dyn SagaStore>,
    definition: Arc<SagaDefinition>,
    policy: RetryPolicy,
    lease: LeasePolicy,
    hub: Arc<SagaHub>,
    shutdown: Shutdown,
    clock: SharedClock,
    /// Sagas this process is driving right now (an optimisation: the
    /// sweep skips them; the store's versions guarantee exclusivity).
    driving: Mutex<HashSet<String>>,
    /// One permit per saga driven by this process: the cap on in-flight
    /// sagas (CreateOrder answers RESOURCE_EXHAUSTED rather than queueing
    /// without bound; the sweep leaves the rest for later).
    permits: Arc<Semaphore>,
    max_in_flight: usize,
    /// No save is left out (see [`crate::Settings::save_every_step`]).
    save_every_step: bool,
    /// When this executor was made (ms since the epoch): leases granted
    /// since are this process's own.
    started_ms: i64,
    /// How long after its creation a saga's calls may be sent (see
    /// [`crate::retention::send_window`]); `None`: no limit.
    send_window: Option<Duration>,
}

/// A reserved place among the in-flight sagas; released when the saga's
/// driver ends (or when dropped unused).
pub type Slot = OwnedSemaphorePermit;

impl Executor {
    /// An executor driving sagas of `definition` stored in `store`, as
    /// `settings` say: retry and lease policies, the in-flight cap, whether
    /// every step is saved, the send window and the clock.
    pub fn new(
        store: Arc<dyn SagaStore>,
        definition: Arc<SagaDefinition>,
        hub: Arc<SagaHub>,
        shutdown: Shutdown,
        settings: &crate::Settings,
    ) -> Self {
        let max_in_flight = settings.max_in_flight.clamp(1, Semaphore::MAX_PERMITS);
        Executor {
            store,
            definition,
            policy: settings.retry.clone(),
            lease: settings.lease.clone(),
            hub,
            shutdown,
            clock: settings.clock.clone(),
            driving: Mutex::new(HashSet::new()),
            permits: Arc::new(Semaphore::new(max_in_flight)),
            max_in_flight,
            save_every_step: settings.save_every_step,
            started_ms: settings.clock.now_ms(),
            send_window: settings.retention.send_window,
        }
    }

    /// Reserves a place for one more in-flight saga, if there is one.
    pub fn reserve(&self) -> Option<Slot> {
        let slot = self.permits.clone().try_acquire_owned().ok();
        metrics::gauge!("saga_in_flight").set(self.in_flight() as f64);
        slot
    }

    /// Sagas currently driven (or reserved) by this process.
    pub fn in_flight(&self) -> usize {
        self.max_in_flight
            .saturating_sub(self.permits.available_permits())
    }

    /// The configured cap on in-flight sagas.
    pub fn max_in_flight(&self) -> usize {
        self.max_in_flight
    }

    /// Waits until no saga is being driven by this process.
    pub async fn drained(&self) {
        while self.driving.lock().map(|d| !d.is_empty()).unwrap_or(false) {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }

    /// The saga type this executor drives.
    pub fn definition(&self) -> &SagaDefinition {
        &self.definition
    }

    /// This instance's name in leases and in the history it writes.
    pub fn owner(&self) -> &str {
        &self.lease.owner
    }

    /// The clock this executor measures time with.
    pub fn clock(&self) -> &SharedClock {
        &self.clock
    }

    /// The present by this executor's clock (ms since the epoch).
    fn now_ms(&self) -> i64 {
        self.clock.now_ms()
    }

    /// Whether the saga's stored lease was granted no more than
    /// [`RetryPolicy::longest_sleep`] ago: the condition for leaving a save
    /// out ([`engine::may_skip_save`]). A skipped save does not renew the
    /// lease, so the next action ends in a save within the connect and call
    /// timeouts unless the lease is still this young then: no save comes
    /// later after the lease was granted than the longest gap the TTL is
    /// checked against at start-up (a backoff sleep, a connect and a call),
    /// however many steps are left unsaved in a row — the lease still
    /// cannot run out under a live owner. Counted from the lease, not from
    /// the save's end: a slow store write eats into it.
    fn lease_is_young(&self, saga: &Saga) -> bool {
        let young = i64::try_from(self.policy.longest_sleep().as_millis()).unwrap_or(0);
        saga.lease
            .as_ref()
            .is_some_and(|lease| self.now_ms().saturating_sub(self.granted_ms(lease)) <= young)
    }

    /// This instance's lease TTL in milliseconds.
    fn ttl_ms(&self) -> i64 {
        i64::try_from(self.lease.ttl.as_millis()).unwrap_or(i64::MAX)
    }

    /// When `lease` was granted, if it was granted with this instance's TTL
    /// (ms since the epoch).
    fn granted_ms(&self, lease: &Lease) -> i64 {
        lease.until_ms.saturating_sub(self.ttl_ms())
    }

    /// A lease for this instance starting now.
    pub fn new_lease(&self) -> Lease {
        Lease {
            owner: self.lease.owner.clone(),
            until_ms: self.now_ms().saturating_add(self.ttl_ms()),
        }
    }

    /// Drives `saga` — already leased to this instance in the store — on its
    /// own task, holding `slot` until it ends, so it continues whatever the
    /// caller does. Returns false if this process is already driving it.
    pub fn spawn(self: &Arc<Self>, saga: Saga, slot: Slot) -> bool {
        self.start(saga, slot, None)
    }

    /// [`Executor::spawn`], and the saga's final state is sent on the
    /// returned channel when the driver ends it (dropped unsent if the
    /// driver stops early: superseded, shutting down). A waiting
    /// CreateOrder awaits this instead of following every step through the
    /// hub: one wake-up per saga instead of one per step. None if this
    /// process is already driving the saga.
    pub fn spawn_reporting(
        self: &Arc<Self>,
        saga: Saga,
        slot: Slot,
    ) -> Option<oneshot::Receiver<Saga>> {
        let (done, finished) = oneshot::channel();
        self.start(saga, slot, Some(done)).then_some(finished)
    }

    fn start(
        self: &Arc<Self>,
        saga: Saga,
        slot: Slot,
        done: Option<oneshot::Sender<Saga>>,
    ) -> bool {
        if let Ok(mut driving) = self.driving.lock()
            && !driving.insert(saga.saga_id.clone())
        {
            return false;
        }
        let this = self.clone();
        let span = tracing::info_span!(
            "saga",
            saga_id = %saga.saga_id,
            request_id = %saga.request_id,
            trace_id = %saga.trace_id()
        );
        // Under CreateOrder's span, whichever instance drives the saga.
        service_kit::trace::continue_trace(&span, &saga.trace_id(), &saga.saga_id);
        tokio::spawn(
            async move {
                let saga_id = saga.saga_id.clone();
                match this.drive(saga).await {
                    Ok(saga) => {
                        metrics::counter!("saga_finished_total", "status" => saga.status.as_str())
                            .increment(1);
                        tracing::info!(status = saga.status.as_str(), "saga finished");
                        if let Some(done) = done {
                            let _ = done.send(saga);
                        }
                    }
                    Err(DriveError::ShuttingDown) => tracing::info!("saga paused for shutdown"),
                    Err(error @ DriveError::UnknownStep(_)) => tracing::warn!(
                        %error,
                        "saga held for a person: its steps file lacks one of its steps"
                    ),
                    Err(error @ DriveError::Misfit(_)) => tracing::error!(
                        %error,
                        "the engine refused an outcome (a bug); the saga stays as stored"
                    ),
                    Err(error) => tracing::warn!(%error, "stopped driving saga"),
                }
                if let Ok(mut driving) = this.driving.lock() {
                    driving.remove(&saga_id);
                }
                drop(slot);
                metrics::gauge!("saga_in_flight").set(this.in_flight() as f64);
            }
            .instrument(span),
        );
        true
    }
}
