//! How long and how often a step is tried, and how a call's reply becomes
//! the engine's outcome.
//!
//! A participant's business refusal of an action compensates at once. Any
//! other failure leaves the outcome unknown, so the call is repeated with
//! the same request id (the participant's barrier turns a repeat into a
//! replay) within two bounds: an attempt budget kept in the saga, and for
//! an action a step deadline counted per driver. A compensation must happen
//! eventually: it is retried for a larger budget, and when that runs out
//! the saga waits for a person.

use crate::engine::Outcome;
use crate::saga::{Refusal, StepState};
use crate::step::{Phase, StepOutcome};
use backon::{BackoffBuilder, ExponentialBuilder};
use service_kit::limits::{
    DEFAULT_ACTION_ATTEMPTS, DEFAULT_COMPENSATION_ATTEMPTS, DEFAULT_LEASE_TTL_MS,
    DEFAULT_RETRY_MAX_DELAY_MS, DEFAULT_STEP_DEADLINE_MS,
};
use std::time::Duration;

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
    /// Where the backoff's jitter comes from (backon's own randomness
    /// unless seeded).
    pub jitter: Jitter,
}

/// The randomness of backoff jitter: backon's own (random) by default;
/// [`Jitter::seeded`] makes every backoff sequence a function of one seed
/// (each sequence drawn next from it), which a deterministic simulation
/// needs. Shared by clones.
#[derive(Clone, Default)]
pub struct Jitter(Option<std::sync::Arc<std::sync::Mutex<u64>>>);

impl std::fmt::Debug for Jitter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(if self.0.is_some() {
            "Jitter(seeded)"
        } else {
            "Jitter(random)"
        })
    }
}

impl Jitter {
    /// Jitter drawn from `seed`: the same seed, the same sleeps.
    pub fn seeded(seed: u64) -> Self {
        Jitter(Some(std::sync::Arc::new(std::sync::Mutex::new(seed))))
    }

    /// The seed of the next backoff sequence (splitmix64), if seeded.
    fn next_seed(&self) -> Option<u64> {
        let state = self.0.as_ref()?;
        let mut state = state.lock().unwrap_or_else(|p| p.into_inner());
        *state = state.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = *state;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        Some(z ^ (z >> 31))
    }
}

/// The shortest backoff delay by default.
const DEFAULT_MIN_DELAY: Duration = Duration::from_millis(20);

impl Default for RetryPolicy {
    /// The orchestrator's default limits, the same numbers the participants
    /// compute their minimum history retention from.
    fn default() -> Self {
        RetryPolicy {
            action_attempts: DEFAULT_ACTION_ATTEMPTS,
            compensation_attempts: DEFAULT_COMPENSATION_ATTEMPTS,
            min_delay: DEFAULT_MIN_DELAY,
            max_delay: Duration::from_millis(DEFAULT_RETRY_MAX_DELAY_MS),
            step_deadline: Duration::from_millis(DEFAULT_STEP_DEADLINE_MS),
            jitter: Jitter::default(),
        }
    }
}

impl RetryPolicy {
    /// The longest single backoff sleep: `max_delay` plus its full jitter
    /// (backon adds a uniform share of up to 100% of the capped delay).
    pub fn longest_sleep(&self) -> Duration {
        self.max_delay.saturating_mul(2)
    }

    /// A fresh sequence of backoff delays.
    pub(crate) fn backoff(&self) -> backon::ExponentialBackoff {
        let builder = ExponentialBuilder::default()
            .with_min_delay(self.min_delay)
            .with_max_delay(self.max_delay)
            .with_jitter()
            .without_max_times();
        match self.jitter.next_seed() {
            Some(seed) => builder.with_jitter_seed(seed).build(),
            None => builder.build(),
        }
    }

    /// The engine's outcome of one call that `reply` answered: a transient
    /// failure is retried until the attempt budget (or, for an action, the
    /// step deadline) is spent. `attempt` is the call's number, `now_ms`
    /// the present and `driven_since_ms` when this driver took the saga up.
    pub fn decide(&self, call: Call<'_>, reply: StepOutcome) -> Outcome {
        match (call.phase, reply) {
            (Phase::Action, StepOutcome::Done) => Outcome::Succeeded,
            (Phase::Compensation, StepOutcome::Done) => Outcome::Compensated,
            (Phase::Action, StepOutcome::Refused(refusal)) => Outcome::Refused(refusal),
            (Phase::Action, StepOutcome::Transient(message)) => {
                if call.attempt >= self.action_attempts {
                    Outcome::GaveUp(message)
                } else if self.past_deadline(&call) {
                    Outcome::GaveUp(format!(
                        "step deadline of {:?} passed; last error {message}",
                        self.step_deadline
                    ))
                } else {
                    Outcome::Retrying(message)
                }
            }
            // A compensation must eventually happen: even a refusal (which
            // would be a bug) is retried until the budget runs out, then a
            // person looks at it.
            (Phase::Compensation, StepOutcome::Refused(Refusal { message, .. }))
            | (Phase::Compensation, StepOutcome::Transient(message)) => {
                if call.attempt >= self.compensation_attempts {
                    Outcome::CompensationGaveUp(message)
                } else {
                    Outcome::CompensationRetrying(message)
                }
            }
        }
    }

    /// Whether the call's step has been failing for its whole deadline,
    /// counted from when it started or from when this driver took the saga
    /// up, whichever is later: a step resumed after a takeover or a restart
    /// gets its full deadline again rather than giving up on its first
    /// error because an earlier driver started it long ago (only the
    /// attempt budget, kept in the saga, spans drivers).
    fn past_deadline(&self, call: &Call<'_>) -> bool {
        let deadline = i64::try_from(self.step_deadline.as_millis()).unwrap_or(i64::MAX);
        call.step.started_at_ms.is_some_and(|started| {
            call.now_ms
                .saturating_sub(started.max(call.driven_since_ms))
                >= deadline
        })
    }
}

/// One call whose reply [`RetryPolicy::decide`] judges.
#[derive(Debug, Clone, Copy)]
pub struct Call<'a> {
    /// The step called.
    pub step: &'a StepState,
    /// Its action or its compensation.
    pub phase: Phase,
    /// Which attempt of that phase this was (from 1).
    pub attempt: u32,
    /// When this driver took the saga up (ms since the epoch).
    pub driven_since_ms: i64,
    /// When the reply came (ms since the epoch).
    pub now_ms: i64,
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

/// How often the recovery sweep runs by default.
const DEFAULT_SWEEP_INTERVAL: Duration = Duration::from_secs(1);

impl Default for LeasePolicy {
    fn default() -> Self {
        LeasePolicy {
            owner: format!("orchestrator-{}", uuid::Uuid::now_v7().simple()),
            ttl: Duration::from_millis(DEFAULT_LEASE_TTL_MS),
            sweep_interval: DEFAULT_SWEEP_INTERVAL,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::saga::StepStatus;

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

    fn step(started_at_ms: i64) -> StepState {
        StepState {
            name: "payment".into(),
            action: "charge".into(),
            compensation: "refund".into(),
            status: StepStatus::Running,
            request_id: "s:payment".into(),
            attempts: 1,
            compensation_attempts: 0,
            last_error: None,
            started_at_ms: Some(started_at_ms),
            finished_at_ms: None,
        }
    }

    fn action(step: &StepState, attempt: u32, driven_since_ms: i64, now_ms: i64) -> Call<'_> {
        Call {
            step,
            phase: Phase::Action,
            attempt,
            driven_since_ms,
            now_ms,
        }
    }

    #[test]
    fn a_transient_action_failure_retries_until_the_budget_then_gives_up() {
        let policy = RetryPolicy::default();
        let step = step(0);
        let failed = || StepOutcome::Transient("down".into());
        assert_eq!(
            policy.decide(action(&step, 1, 0, 10), failed()),
            Outcome::Retrying("down".into())
        );
        assert_eq!(
            policy.decide(action(&step, policy.action_attempts, 0, 10), failed()),
            Outcome::GaveUp("down".into())
        );
    }

    #[test]
    fn the_step_deadline_counts_from_when_this_driver_took_the_saga_up() {
        let policy = RetryPolicy::default();
        let deadline = i64::try_from(policy.step_deadline.as_millis()).unwrap();
        let step = step(0);
        let failed = || StepOutcome::Transient("down".into());
        // Started long ago by another driver, taken up just now: retried.
        let resumed = action(&step, 2, 10 * deadline, 10 * deadline + 1);
        assert_eq!(
            policy.decide(resumed, failed()),
            Outcome::Retrying("down".into())
        );
        // This driver has been at it for the whole deadline: given up.
        let spent = action(&step, 2, 0, deadline);
        assert!(matches!(
            policy.decide(spent, failed()),
            Outcome::GaveUp(reason) if reason.contains("step deadline")
        ));
    }

    #[test]
    fn a_refused_compensation_is_retried_never_accepted() {
        let policy = RetryPolicy::default();
        let step = step(0);
        let compensation = |attempt| Call {
            phase: Phase::Compensation,
            ..action(&step, attempt, 0, 0)
        };
        assert_eq!(
            policy.decide(compensation(1), StepOutcome::Refused("no".into())),
            Outcome::CompensationRetrying("no".into())
        );
        assert_eq!(
            policy.decide(
                compensation(policy.compensation_attempts),
                StepOutcome::Refused("no".into())
            ),
            Outcome::CompensationGaveUp("no".into())
        );
    }
}
