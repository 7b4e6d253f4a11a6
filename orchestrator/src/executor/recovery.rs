//! Recovery: taking up sagas whose driver is gone.
//!
//! A saga whose lease expired (its owner crashed, hung or lost the store
//! for longer than the TTL), or that this instance owned before a restart,
//! is claimed: this instance writes its own lease with the version it read
//! and drives the saga on from its stored state. The lease decides who
//! tries; the version check decides who succeeds.

use super::{Executor, Slot};
use crate::engine;
use crate::saga::{Attention, Saga, StepStatus};
use crate::store::StoreError;
use std::sync::Arc;

/// How many claims one recovery sweep has in flight at once.
const CLAIMS_AT_ONCE: usize = 16;

impl Executor {
    /// Takes `saga` (read from the store) over: writes this instance's
    /// lease with the version read, then drives it. Returns false when
    /// another writer got there first or this process already drives it.
    pub async fn claim(self: &Arc<Self>, mut saga: Saga, slot: Slot) -> Result<bool, StoreError> {
        if self.driving.lock().is_ok_and(|d| d.contains(&saga.saga_id)) {
            return Ok(false);
        }
        if let Some(step) = self.unconfigured_step(&saga) {
            let step = step.to_owned();
            self.hold_for_unconfigured_step(&saga, &step).await;
            return Ok(false);
        }
        let previous = saga.lease.as_ref().map(|l| l.owner.clone());
        let attention = saga.attention.take();
        engine::record_claim(&mut saga, self.new_lease(), self.now_ms());
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

    /// A step of `saga` that may still be called (to act or to compensate)
    /// and that this orchestrator's definition does not have: the saga was
    /// created under another steps file.
    pub(super) fn unconfigured_step<'s>(&self, saga: &'s Saga) -> Option<&'s str> {
        saga.steps
            .iter()
            .filter(|step| {
                !matches!(
                    step.status,
                    StepStatus::Compensated | StepStatus::Refused | StepStatus::Skipped
                )
            })
            .map(|step| step.name.as_str())
            .find(|name| self.definition.step(name).is_none())
    }

    /// Leaves `saga`, which has a step this orchestrator does not define,
    /// untouched — never failed or compensated in its stead — and marks it
    /// for a person, naming the step (ListSagas `needs_attention`, the
    /// console). Recovery looks at it again one lease period later, so a
    /// configuration that has the step again takes it up.
    pub(super) async fn hold_for_unconfigured_step(&self, saga: &Saga, step: &str) {
        metrics::counter!("saga_unconfigured_step_total").increment(1);
        let reason = format!(
            "step {step:?} is not configured on this orchestrator ({}): the saga keeps the steps it \
             was created with and waits, untouched, for an orchestrator whose steps file has it",
            self.lease.owner
        );
        tracing::error!(saga_id = %saga.saga_id, %step, "{reason}");
        let now = self.now_ms();
        let attention = Attention::refused(saga.attention.as_ref(), reason, now);
        // `flag_attention` marks the stored version of the saga whose next
        // version would have been saved.
        let mut next = saga.clone();
        next.version += 1;
        let retry_after = now.saturating_add(self.ttl_ms());
        match self
            .store
            .flag_attention(&next, &attention, retry_after)
            .await
        {
            Ok(true) => metrics::counter!("saga_attention_flagged_total").increment(1),
            Ok(false) => {}
            Err(error) => {
                tracing::error!(saga_id = %saga.saga_id, %error, "could not mark the saga for attention")
            }
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

    /// One recovery sweep: claims every saga whose lease expired (or, with
    /// `including_own`, that this instance owned before a restart),
    /// [`CLAIMS_AT_ONCE`] claims in flight: each claim is one store write,
    /// and one after the other a crashed instance's sagas would wait for
    /// each other's writes — on a store answering a write in a second, a
    /// victim's twenty sagas for twenty seconds beyond their leases.
    /// Returns how many were claimed. A store error stops the sweep: no
    /// further claim starts, and the error is returned once those in
    /// flight have ended (the sagas they claimed are driven all the same).
    pub async fn sweep(self: &Arc<Self>, including_own: bool) -> Result<usize, StoreError> {
        use futures::StreamExt;
        use std::sync::atomic::{AtomicBool, Ordering};
        const BATCH: usize = 1_000;
        let owner = including_own.then_some(self.lease.owner.as_str());
        let candidates = self.store.claimable(self.now_ms(), owner, BATCH).await?;
        let mut claims = Vec::new();
        for saga in candidates {
            if self.driving.lock().is_ok_and(|d| d.contains(&saga.saga_id))
                || self.leased_by_this_process(&saga)
            {
                continue;
            }
            // At the in-flight cap the rest wait for a later sweep.
            let Some(slot) = self.reserve() else { break };
            claims.push((saga, slot));
        }
        let stopped = AtomicBool::new(false);
        let stopped = &stopped;
        let mut outcomes = futures::stream::iter(claims)
            .map(|(saga, slot)| async move {
                if self.shutdown.is_triggered() || stopped.load(Ordering::Relaxed) {
                    return Ok(false);
                }
                self.claim(saga, slot).await
            })
            .buffer_unordered(CLAIMS_AT_ONCE);
        let (mut claimed, mut failed) = (0, None);
        while let Some(outcome) = outcomes.next().await {
            match outcome {
                Ok(true) => claimed += 1,
                Ok(false) => {}
                Err(error) => {
                    stopped.store(true, Ordering::Relaxed);
                    failed.get_or_insert(error);
                }
            }
        }
        match failed {
            Some(error) => Err(error),
            None => Ok(claimed),
        }
    }

    /// Whether `saga` holds a live lease this process granted (since it
    /// started): a saga it drives or is about to drive — CreateOrder stores
    /// a saga before its driver registers — never one to resume. The
    /// start-up sweep, which also claims this instance's own sagas, would
    /// otherwise take over a saga created while it ran.
    fn leased_by_this_process(&self, saga: &Saga) -> bool {
        saga.lease.as_ref().is_some_and(|lease| {
            lease.owner == self.lease.owner
                && lease.until_ms > self.now_ms()
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
            if !self.pause(self.lease.sweep_interval).await {
                return;
            }
        }
    }
}
