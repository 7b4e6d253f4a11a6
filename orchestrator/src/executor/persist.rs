//! Saving a saga's next version, and what a save's answer means.
//!
//! Every save carries the version read and renews the lease. A store that
//! is down is waited out before anything else is sent. A save whose reply
//! was lost may have landed: the saga is read back, and if the store holds
//! exactly what was written (but for the lease) the save counts. A store
//! that refuses a version for good leaves the saga at its last saved state,
//! marked for a person. At shutdown the lease is given up so another
//! instance can continue at once.

use super::{DriveError, Executor};
use crate::engine;
use crate::saga::{Attention, Saga};
use crate::store::StoreError;

impl Executor {
    /// Saves the saga's next version with a renewed lease (none once
    /// terminal), waiting out store outages.
    pub(super) async fn persist(&self, saga: &mut Saga) -> Result<(), DriveError> {
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
                    if !self.pause(delay).await {
                        return Err(DriveError::ShuttingDown);
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
    pub(super) async fn release(&self, mut saga: Saga) -> DriveError {
        engine::record_release(&mut saga, &self.lease.owner, self.now_ms());
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
    pub(super) async fn stored(&self, ours: &mut Saga) -> Stored {
        match self.store.get(&ours.saga_id).await {
            Ok(Some(stored)) if same_but_lease(&stored, ours) => {
                ours.lease = stored.lease;
                Stored::Ours
            }
            Ok(Some(stored)) => Stored::Another(Box::new(stored)),
            _ => Stored::Unknown,
        }
    }

    /// The store refused `saga`'s next version for good (see
    /// [`StoreError::Rejected`]): logs and counts it, and marks the stored
    /// saga as needing a person (`attention`, kept since the first refusal
    /// `previous` recorded), claimable again one lease period from now —
    /// recovery then retries it, and the first version the store accepts
    /// clears the mark. The mark is best effort: if it cannot be written
    /// either, the ERROR line and the counter remain.
    pub(super) async fn refused(
        &self,
        saga: &Saga,
        previous: Option<&Attention>,
        error: &StoreError,
    ) {
        metrics::counter!("saga_store_rejected_total").increment(1);
        tracing::error!(
            saga_id = %saga.saga_id,
            request_id = %saga.request_id,
            %error,
            "the store refuses this saga's next version; it stays at its last saved state, marked for attention, until a person fixes the cause"
        );
        let now = self.now_ms();
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
}

/// What the store holds after a save whose answer left it open.
pub(super) enum Stored {
    /// The save landed (with this or an earlier attempt's lease).
    Ours,
    /// Another writer's version.
    Another(Box<Saga>),
    /// The saga could not be read (or is gone).
    Unknown,
}

/// Whether `stored` is `ours` written with another lease: the same
/// version, history (stamped with its writer), steps and status — what an
/// earlier attempt of the same save wrote. Another instance's write of that
/// version differs at least in its history's writer.
fn same_but_lease(stored: &Saga, ours: &Saga) -> bool {
    let mut stored = stored.clone();
    stored.lease.clone_from(&ours.lease);
    stored == *ours
}
