//! The executor: performs what the engine decides and persists every result.
//!
//! For each piece of work the engine names it calls the step's action or
//! compensation (a [`SagaStep`] of the [`SagaDefinition`]), turns the domain
//! [`StepOutcome`] into the engine's outcome with the attempt budgets and
//! the step deadline, records it in the saga ([`engine::record`]) and saves
//! it — all before the next call. Retries reuse the step's stable request id, with exponential
//! backoff and jitter from `backon`, within an attempt budget and a per-step
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

use crate::engine::{self, Next, Outcome};
use crate::hub::SagaHub;
use crate::saga::{Attention, Lease, Saga, Step};
use crate::step::{Phase, SagaDefinition, SagaStep, StepOutcome};
use crate::store::{SagaStore, StoreError};
use backon::{BackoffBuilder, ExponentialBuilder};
use service_kit::shutdown::Shutdown;
use service_kit::time::now_ms;
use std::collections::HashSet;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::{OwnedSemaphorePermit, Semaphore, oneshot};
use tracing::Instrument;

/// Attempt budgets and backoff bounds.
#[derive(Debug, Clone)]
pub struct RetryPolicy {
    /// Attempts of a forward action before its outcome counts as unknown
    /// and the saga compensates.
    pub action_attempts: u32,
    /// Attempts of a compensation before the saga is marked Failed.
    pub compensation_attempts: u32,
    /// Shortest backoff delay between attempts.
    pub min_delay: Duration,
    /// Longest backoff delay between attempts before jitter: backon's
    /// jitter adds up to the delay again, so a sleep can last up to twice
    /// this ([`RetryPolicy::longest_sleep`]).
    pub max_delay: Duration,
    /// A forward step still failing transiently this long after it started
    /// is given up (and compensated), whatever attempts remain.
    pub step_deadline: Duration,
}

impl Default for RetryPolicy {
    fn default() -> Self {
        RetryPolicy {
            action_attempts: 5,
            compensation_attempts: 30,
            min_delay: Duration::from_millis(20),
            max_delay: Duration::from_secs(2),
            step_deadline: Duration::from_secs(60),
        }
    }
}

impl RetryPolicy {
    /// The longest single backoff sleep: `max_delay` plus its full jitter
    /// (backon adds a uniform share of up to 100% of the capped delay).
    pub fn longest_sleep(&self) -> Duration {
        self.max_delay.saturating_mul(2)
    }

    fn backoff(&self) -> backon::ExponentialBackoff {
        ExponentialBuilder::default()
            .with_min_delay(self.min_delay)
            .with_max_delay(self.max_delay)
            .with_jitter()
            .without_max_times()
            .build()
    }
}

/// Who this instance is and how long its leases last.
#[derive(Debug, Clone)]
pub struct LeasePolicy {
    /// Stable name of this orchestrator instance (a restart with the same
    /// name resumes its own sagas at once instead of waiting for expiry).
    pub owner: String,
    /// How long a lease lasts without renewal. Must exceed the longest gap
    /// between two saves of a driven saga: a participant call's deadline
    /// plus the largest backoff delay.
    pub ttl: Duration,
    /// How often the recovery sweep looks for claimable sagas.
    pub sweep_interval: Duration,
}

impl Default for LeasePolicy {
    fn default() -> Self {
        LeasePolicy {
            owner: format!("orchestrator-{}", uuid::Uuid::now_v7().simple()),
            ttl: Duration::from_secs(15),
            sweep_interval: Duration::from_secs(1),
        }
    }
}

/// Why driving a saga stopped before it was terminal.
#[derive(Debug, thiserror::Error)]
pub enum DriveError {
    #[error("another writer advanced the saga; it drives it now")]
    /// Another instance advanced the saga (its lease expired here); it drives it now.
    Superseded,
    #[error("shutting down; the saga resumes from its persisted state on restart")]
    /// The process is stopping; the saga resumes from its persisted state.
    ShuttingDown,
    /// The saga has a step this orchestrator's definition lacks (stored by
    /// another version): left for an instance that knows it.
    #[error("the saga has a step {0:?} this orchestrator does not define")]
    UnknownStep(String),
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
    /// Sagas this process is driving right now (an optimisation: the
    /// sweep skips them; the store's versions guarantee exclusivity).
    driving: Mutex<HashSet<String>>,
    /// One permit per saga driven by this process: the cap on in-flight
    /// sagas (CreateOrder answers RESOURCE_EXHAUSTED rather than queueing
    /// without bound; the sweep leaves the rest for later).
    permits: Arc<Semaphore>,
    max_in_flight: usize,
    /// No save is left out (see [`Executor::saving_every_step`]).
    save_every_step: bool,
    /// When this executor was made (ms since the epoch): leases granted
    /// since are this process's own.
    started_ms: i64,
    /// How long after its creation a saga's calls may be sent (see
    /// [`Executor::with_send_window`]); `None`: no limit.
    send_window: Option<Duration>,
}

/// A reserved place among the in-flight sagas; released when the saga's
/// driver ends (or when dropped unused).
pub type Slot = OwnedSemaphorePermit;

impl Executor {
    /// An executor driving sagas of `definition` stored in `store`.
    pub fn new(
        store: Arc<dyn SagaStore>,
        definition: Arc<SagaDefinition>,
        policy: RetryPolicy,
        lease: LeasePolicy,
        hub: Arc<SagaHub>,
        shutdown: Shutdown,
        max_in_flight: usize,
    ) -> Self {
        let max_in_flight = max_in_flight.clamp(1, Semaphore::MAX_PERMITS);
        Executor {
            store,
            definition,
            policy,
            lease,
            hub,
            shutdown,
            driving: Mutex::new(HashSet::new()),
            permits: Arc::new(Semaphore::new(max_in_flight)),
            max_in_flight,
            save_every_step: false,
            started_ms: now_ms(),
            send_window: None,
        }
    }

    /// With `every`, the executor saves after every step: it never leaves
    /// out the save [`engine::may_skip_save`] would allow. For a fleet
    /// where instances of a version without the claim marking
    /// ([`engine::claim`]) may still take sagas over.
    pub fn saving_every_step(mut self, every: bool) -> Self {
        self.save_every_step = every;
        self
    }

    /// With `window`, no call of a saga is sent once the saga is older than
    /// `window` ([`crate::retention::send_window`]): the saga is marked
    /// FAILED instead ([`engine::abandon`]), whatever it was doing. Checked
    /// before every call, so it also stops a saga resumed after a long
    /// outage and one whose save waited that long for the store.
    pub fn with_send_window(mut self, window: Option<Duration>) -> Self {
        self.send_window = window;
        self
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

    /// Whether the saga's stored lease was granted no more than
    /// [`RetryPolicy::longest_sleep`] ago: the condition for leaving a save
    /// out ([`engine::may_skip_save`]). The next action then ends in a save
    /// within the connect and call timeouts, so no save comes later after
    /// the lease was granted than the longest gap the TTL is checked
    /// against at start-up (a backoff sleep, a connect and a call) — the
    /// lease still cannot run out under a live owner. Counted from the
    /// lease, not from the save's end: a slow store write eats into it.
    fn lease_is_young(&self, saga: &Saga) -> bool {
        let young = i64::try_from(self.policy.longest_sleep().as_millis()).unwrap_or(0);
        saga.lease
            .as_ref()
            .is_some_and(|lease| now_ms().saturating_sub(self.granted_ms(lease)) <= young)
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
            until_ms: now_ms().saturating_add(self.ttl_ms()),
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
        tokio::spawn(
            async move {
                let saga_id = saga.saga_id.clone();
                match this.drive(saga).await {
                    Ok(saga) => {
                        metrics::counter!("sagas_finished_total", "status" => saga.status.as_str())
                            .increment(1);
                        tracing::info!(status = saga.status.as_str(), "saga finished");
                        if let Some(done) = done {
                            let _ = done.send(saga);
                        }
                    }
                    Err(DriveError::ShuttingDown) => tracing::info!("saga paused for shutdown"),
                    Err(error @ DriveError::UnknownStep(_)) => {
                        tracing::error!(%error, "cannot drive saga; another version must")
                    }
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

    /// Takes `saga` (read from the store) over: writes this instance's
    /// lease with the version read, then drives it. Returns false when
    /// another writer got there first or this process already drives it.
    pub async fn claim(self: &Arc<Self>, mut saga: Saga, slot: Slot) -> Result<bool, StoreError> {
        if self.driving.lock().is_ok_and(|d| d.contains(&saga.saga_id)) {
            return Ok(false);
        }
        let previous = saga.lease.as_ref().map(|l| l.owner.clone());
        let attention = saga.attention.take();
        engine::claim(&mut saga, self.new_lease(), now_ms());
        saga.version += 1;
        saga.stamp_history(&self.lease.owner);
        let error = match self.store.save(&saga).await {
            Ok(()) => return Ok(self.claimed(saga, slot, previous)),
            Err(error) => error,
        };
        // Without this, a claim that landed would wait a whole lease,
        // skipped by the sweep as this process's own.
        if self.landed(&mut saga, &error).await {
            return Ok(self.claimed(saga, slot, previous));
        }
        match error {
            StoreError::Conflict { .. } => Ok(false),
            // One saga the store refuses must not stop the recovery of
            // the others: it is marked and retried a lease period later.
            StoreError::Rejected(_) | StoreError::Corrupt(_) => {
                self.refused(&saga, attention.as_ref(), &error).await;
                Ok(false)
            }
            other => Err(other),
        }
    }

    /// Whether `ours`, whose save answered `error`, is what the store holds
    /// all the same: a save whose reply was lost (a store that retried it
    /// meets its own write as a conflict). Then `ours` takes the stored
    /// lease (the same, or the one an earlier attempt wrote).
    pub async fn landed(&self, ours: &mut Saga, error: &StoreError) -> bool {
        matches!(
            error,
            StoreError::Conflict { .. } | StoreError::Unavailable(_)
        ) && matches!(self.stored(ours).await, Stored::Ours)
    }

    /// Reads back the saga `ours` tried to save: [`Stored::Ours`] when it is
    /// `ours` but for the lease (which `ours` then takes), else what
    /// another writer stored, or unknown when it cannot be read.
    async fn stored(&self, ours: &mut Saga) -> Stored {
        match self.store.get(&ours.saga_id).await {
            Ok(Some(stored)) if same_but_lease(&stored, ours) => {
                ours.lease = stored.lease;
                Stored::Ours
            }
            Ok(Some(stored)) => Stored::Another(Box::new(stored)),
            _ => Stored::Unknown,
        }
    }

    /// Drives `saga`, whose claim is stored; counts and logs a takeover
    /// from another instance.
    fn claimed(self: &Arc<Self>, saga: Saga, slot: Slot, previous: Option<String>) -> bool {
        if previous.as_deref().is_some_and(|p| p != self.lease.owner) {
            metrics::counter!("saga_lease_takeovers_total").increment(1);
            tracing::info!(saga_id = %saga.saga_id, previous_owner = ?previous, "took over saga with an expired lease");
        }
        self.spawn(saga, slot)
    }

    /// The store refused `saga`'s next version for good (see
    /// [`StoreError::Rejected`]): logs and counts it, and marks the stored
    /// saga as needing a person (`attention`, kept since the first refusal
    /// `previous` recorded), claimable again one lease period from now —
    /// recovery then retries it, and the first version the store accepts
    /// clears the mark. The mark is best effort: if it cannot be written
    /// either, the ERROR line and the counter remain.
    async fn refused(&self, saga: &Saga, previous: Option<&Attention>, error: &StoreError) {
        metrics::counter!("saga_store_rejected_total").increment(1);
        tracing::error!(
            saga_id = %saga.saga_id,
            request_id = %saga.request_id,
            %error,
            "the store refuses this saga's next version; it stays at its last saved state, marked for attention, until a person fixes the cause"
        );
        let now = now_ms();
        let attention = Attention::refused(previous, error.to_string(), now);
        let retry_after = now.saturating_add(self.ttl_ms());
        match self
            .store
            .flag_attention(saga, &attention, retry_after)
            .await
        {
            Ok(true) => {
                metrics::counter!("saga_attention_flagged_total").increment(1);
            }
            Ok(false) => {
                tracing::info!(saga_id = %saga.saga_id, "not marked for attention: another instance saved a newer version")
            }
            Err(mark_error) => {
                tracing::error!(saga_id = %saga.saga_id, error = %mark_error, "could not mark the saga for attention either")
            }
        }
    }

    /// One recovery sweep: claims every saga whose lease expired (or, with
    /// `including_own`, that this instance owned before a restart).
    /// Returns how many were claimed.
    pub async fn sweep(self: &Arc<Self>, including_own: bool) -> Result<usize, StoreError> {
        const BATCH: usize = 1_000;
        let owner = including_own.then_some(self.lease.owner.as_str());
        let candidates = self.store.claimable(now_ms(), owner, BATCH).await?;
        let mut claimed = 0;
        for saga in candidates {
            if self.shutdown.is_triggered() {
                break;
            }
            if self.driving.lock().is_ok_and(|d| d.contains(&saga.saga_id))
                || self.leased_by_this_process(&saga)
            {
                continue;
            }
            // At the in-flight cap the rest wait for a later sweep.
            let Some(slot) = self.reserve() else { break };
            if self.claim(saga, slot).await? {
                claimed += 1;
            }
        }
        Ok(claimed)
    }

    /// Whether `saga` holds a live lease this process granted (since it
    /// started): a saga it drives or is about to drive — CreateOrder stores
    /// a saga before its driver registers — never one to resume. The
    /// start-up sweep, which also claims this instance's own sagas, would
    /// otherwise take over a saga created while it ran.
    fn leased_by_this_process(&self, saga: &Saga) -> bool {
        saga.lease.as_ref().is_some_and(|lease| {
            lease.owner == self.lease.owner
                && lease.until_ms > now_ms()
                && self.granted_ms(lease) >= self.started_ms
        })
    }

    /// Sweeps at start-up (own sagas included) and then periodically until
    /// shutdown, so sagas of a crashed instance are resumed by a live one.
    pub async fn run_sweeper(self: Arc<Self>) {
        let mut first = true;
        loop {
            match self.sweep(first).await {
                Ok(0) => {}
                Ok(n) => tracing::info!(sagas = n, "resumed sagas"),
                Err(error) => {
                    tracing::warn!(%error, "recovery sweep failed; retrying at the next one")
                }
            }
            first = false;
            tokio::select! {
                _ = tokio::time::sleep(self.lease.sweep_interval) => {}
                _ = self.shutdown.wait() => return,
            }
        }
    }

    /// Runs the saga until it is terminal; returns its final state.
    pub async fn drive(&self, mut saga: Saga) -> Result<Saga, DriveError> {
        // The step deadline runs from here at the earliest: a step resumed
        // after a takeover or a restart gets its full deadline again rather
        // than giving up on its first error because an earlier driver
        // started it long ago (only the attempt budget, kept in the saga,
        // spans drivers).
        let driven_since_ms = now_ms();
        let mut current = Next::Done;
        let mut backoff = self.policy.backoff();
        // Every caller saved the saga right before driving it: the store
        // holds the intent of the step about to run.
        let mut stored_this_step = true;
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
                return Err(self.release(saga).await);
            }
            if work != current {
                current = work;
                backoff = self.policy.backoff();
            }
            if let Some(detail) = self.past_send_window(&saga) {
                tracing::error!(saga_id = %saga.saga_id, %detail, "saga marked FAILED: past its send window");
                metrics::counter!("saga_send_window_exceeded_total").increment(1);
                engine::abandon(&mut saga, &detail, now_ms());
                self.persist(&mut saga).await?;
                continue;
            }
            let step = &saga.steps[i];
            let Some(call) = self.definition.step(&step.name) else {
                return Err(DriveError::UnknownStep(step.name.clone()));
            };
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
            let started = std::time::Instant::now();
            let reply = invoke(call, &saga, step, phase)
                .instrument(span.clone())
                .await;
            let outcome = self.outcome(phase, step, attempt, driven_since_ms, reply);
            metrics::histogram!(
                "saga_step_duration_seconds",
                "step" => step.name.clone(),
                "phase" => phase.as_str(),
                "outcome" => outcome.as_str()
            )
            .record(started.elapsed().as_secs_f64());
            let retrying = matches!(
                outcome,
                Outcome::Retrying(_) | Outcome::CompensationRetrying(_)
            );
            span.in_scope(|| count_and_log(&outcome));
            engine::record(&mut saga, work, outcome, now_ms());
            if !self.save_every_step
                && engine::may_skip_save(&saga, work, stored_this_step)
                && self.lease_is_young(&saga)
            {
                // Not published: watchers see saved versions only.
                stored_this_step = false;
                continue;
            }
            self.persist(&mut saga).await?;
            stored_this_step = true;
            self.hub.publish(&saga);
            if retrying {
                let delay = backoff.next().unwrap_or(self.policy.max_delay);
                tokio::select! {
                    _ = tokio::time::sleep(delay) => {}
                    _ = self.shutdown.wait() => return Err(self.release(saga).await),
                }
            }
        }
    }

    /// The engine's outcome of one call: a transient failure is retried
    /// until the attempt budget (or, for an action, the step deadline) is
    /// spent.
    fn outcome(
        &self,
        phase: Phase,
        step: &Step,
        attempt: u32,
        driven_since_ms: i64,
        reply: StepOutcome,
    ) -> Outcome {
        match (phase, reply) {
            (Phase::Action, StepOutcome::Done) => Outcome::Succeeded,
            (Phase::Compensation, StepOutcome::Done) => Outcome::Compensated,
            (Phase::Action, StepOutcome::Refused(message)) => Outcome::Refused(message),
            (Phase::Action, StepOutcome::Transient(message)) => {
                if attempt >= self.policy.action_attempts {
                    Outcome::GaveUp(message)
                } else if self.past_deadline(step, driven_since_ms) {
                    Outcome::GaveUp(format!(
                        "step deadline of {:?} passed; last error {message}",
                        self.policy.step_deadline
                    ))
                } else {
                    Outcome::Retrying(message)
                }
            }
            // A compensation must eventually happen: even a refusal (which
            // would be a bug) is retried until the budget runs out, then a
            // person looks at it.
            (
                Phase::Compensation,
                StepOutcome::Refused(message) | StepOutcome::Transient(message),
            ) => {
                if attempt >= self.policy.compensation_attempts {
                    Outcome::CompensationGaveUp(message)
                } else {
                    Outcome::CompensationRetrying(message)
                }
            }
        }
    }

    /// Why `saga` must not be sent another call, if it is past the send
    /// window.
    fn past_send_window(&self, saga: &Saga) -> Option<String> {
        let window = self.send_window?;
        let window_ms = i64::try_from(window.as_millis()).unwrap_or(i64::MAX);
        let age_ms = now_ms().saturating_sub(saga.created_at_ms);
        if age_ms <= window_ms {
            return None;
        }
        use service_kit::limits::format_duration;
        let age = Duration::from_millis(u64::try_from(age_ms).unwrap_or(0));
        Some(format!(
            "not driven further: created {} ago, past the send window of {} (the participants' \
             history retention less the longest time one request id's calls take); they may no \
             longer remember its calls, so a repeated charge or deduct could apply twice and a \
             refund or restock could find nothing to undo; reconcile it by hand",
            format_duration(age),
            format_duration(window)
        ))
    }

    /// Whether `step` has been failing for its whole deadline, counted from
    /// when it started or from when this driver took the saga up
    /// (`driven_since_ms`), whichever is later.
    fn past_deadline(&self, step: &Step, driven_since_ms: i64) -> bool {
        let deadline = i64::try_from(self.policy.step_deadline.as_millis()).unwrap_or(i64::MAX);
        step.started_at_ms.is_some_and(|started| {
            now_ms().saturating_sub(started.max(driven_since_ms)) >= deadline
        })
    }

    /// Saves the saga's next version with a renewed lease (none once
    /// terminal), waiting out store outages.
    async fn persist(&self, saga: &mut Saga) -> Result<(), DriveError> {
        // A version the store accepts clears the mark; kept aside to date
        // a repeated refusal from the first.
        let attention = saga.attention.take();
        saga.version += 1;
        saga.stamp_history(&self.lease.owner);
        let terminal = saga.status.is_terminal();
        let mut backoff = self.policy.backoff();
        loop {
            // A lease from now on every attempt: a save that waited out a
            // store outage longer than the TTL must not write a lease that
            // is already over (another instance would claim the saga at
            // once while this one goes on driving it).
            saga.lease = (!terminal).then(|| self.new_lease());
            let error = match self.store.save(saga).await {
                Ok(()) => return Ok(()),
                Err(error) => error,
            };
            match error {
                StoreError::Conflict { .. } => {
                    // An earlier attempt may have committed without us
                    // hearing back: that is not a conflict. It wrote an
                    // earlier lease, which is the one stored.
                    return match self.stored(saga).await {
                        Stored::Ours => Ok(()),
                        Stored::Another(stored) => {
                            self.lost_to(&stored);
                            Err(DriveError::Superseded)
                        }
                        Stored::Unknown => Err(DriveError::Superseded),
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
                StoreError::Corrupt(_) | StoreError::Rejected(_) => {
                    self.refused(saga, attention.as_ref(), &error).await;
                    return Err(error.into());
                }
            }
        }
    }

    /// At shutdown: gives the lease up (best effort) so another instance can
    /// take the saga over at once instead of after expiry.
    async fn release(&self, mut saga: Saga) -> DriveError {
        engine::release(&mut saga, &self.lease.owner, now_ms());
        saga.version += 1;
        saga.stamp_history(&self.lease.owner);
        match self.store.save(&saga).await {
            Ok(()) => {}
            Err(StoreError::Conflict { .. }) => {
                if let Ok(Some(stored)) = self.store.get(&saga.saga_id).await {
                    self.lost_to(&stored);
                }
            }
            Err(error) => {
                tracing::debug!(%error, "could not release the lease; it expires on its own")
            }
        }
        DriveError::ShuttingDown
    }

    /// Counts a takeover of a live owner: this instance was still driving
    /// the saga (it had just called a participant or was about to save)
    /// when its versioned write found that another instance had written the
    /// saga — which, for a saga this process drives, only a claim after the
    /// lease expired does. The lease ran out under a live owner: the TTL is
    /// too short for the call timeout, the retry sleeps, the store's
    /// latency or a pause of this process. Counted here, by the loser,
    /// because only the previous owner knows it was alive; a crashed owner
    /// never writes again and is never counted.
    fn lost_to(&self, stored: &Saga) {
        metrics::counter!("saga_lease_takeovers_of_live_owner_total").increment(1);
        tracing::warn!(
            saga_id = %stored.saga_id,
            new_owner = stored.lease_owner().unwrap_or("none (terminal or released)"),
            stored_version = stored.version,
            "another instance took this saga over while this instance was still driving it; \
             the lease TTL is too short for how long a step takes here"
        );
    }
}

/// Sends `step`'s action or compensation.
async fn invoke(call: &dyn SagaStep, saga: &Saga, step: &Step, phase: Phase) -> StepOutcome {
    match phase {
        Phase::Action => call.act(saga, step).await,
        Phase::Compensation => call.compensate(saga, step).await,
    }
}

/// Whether `stored` is `ours` written with another lease: the same
/// version, history (stamped with its writer), steps and status — what an
/// earlier attempt of the same save wrote. Another instance's write of that
/// version differs at least in its history's writer.
/// What the store holds after a save whose answer left it open.
enum Stored {
    /// The save landed (with this or an earlier attempt's lease).
    Ours,
    /// Another writer's version.
    Another(Box<Saga>),
    /// The saga could not be read (or is gone).
    Unknown,
}

fn same_but_lease(stored: &Saga, ours: &Saga) -> bool {
    let mut stored = stored.clone();
    stored.lease.clone_from(&ours.lease);
    stored == *ours
}

fn count_and_log(outcome: &Outcome) {
    match outcome {
        Outcome::Succeeded => tracing::debug!("action applied"),
        Outcome::Compensated => {
            metrics::counter!("saga_compensations_total").increment(1);
            tracing::info!("compensation applied")
        }
        Outcome::Refused(reason) => tracing::info!(%reason, "action refused; compensating"),
        Outcome::Retrying(error) | Outcome::CompensationRetrying(error) => {
            metrics::counter!("saga_step_retries_total").increment(1);
            tracing::warn!(%error, "attempt failed; retrying")
        }
        Outcome::GaveUp(error) => tracing::warn!(%error, "attempt budget spent; compensating"),
        Outcome::CompensationGaveUp(error) => {
            metrics::counter!("saga_failed_total").increment(1);
            tracing::error!(%error, "compensation budget spent; saga FAILED and needs attention")
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_backoff_sleep_can_exceed_the_max_delay_but_stays_below_twice_it() {
        let policy = RetryPolicy {
            min_delay: Duration::from_millis(10),
            max_delay: Duration::from_millis(40),
            ..RetryPolicy::default()
        };
        let mut backoff = policy.backoff();
        let sleeps: Vec<Duration> = (0..2_000).filter_map(|_| backoff.next()).collect();
        assert_eq!(sleeps.len(), 2_000, "the backoff never ends by itself");
        assert!(
            sleeps.iter().all(|d| *d < policy.longest_sleep()),
            "a sleep reached twice the max delay: {:?}",
            sleeps.iter().max()
        );
        // This is why the lease check counts 2 × max_delay: with jitter a
        // sleep regularly lasts longer than max_delay itself.
        let over = sleeps.iter().filter(|d| **d > policy.max_delay).count();
        assert!(over > 100, "only {over} of 2000 sleeps exceeded max_delay");
    }
}
