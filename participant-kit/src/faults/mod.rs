//! Fault injection in the participants (`faults.v1`), written once and used
//! by payment-svc and inventory-svc.
//!
//! # Why
//!
//! The orchestrator's claims — an unknown outcome is retried with the *same*
//! request id, a refused step is compensated, the operationHistory barrier
//! makes a retried or late call harmless — only show when calls go wrong. A
//! healthy local stack never goes wrong, so a participant can be told to
//! misbehave on purpose, at start-up ([`FaultConfig`]: `--fault-*` flags /
//! `FAULT_*` env) or at run time (the [`FaultApi`] admin service:
//! `faults.v1.FaultService/SetFaults`, `/GetFaults`). Off unless configured.
//!
//! # What can be injected, per mutating call
//!
//! In this order, each drawn from the seeded random sequence:
//!
//! 1. **added latency**: a uniform delay of `0..=added_latency_ms`;
//! 2. **transient error**: UNAVAILABLE before anything is done (the store is
//!    not called) — the orchestrator must retry;
//! 3. **business refusal** (actions only: Charge, Deduct): FAILED_PRECONDITION
//!    instead of the business rules — the orchestrator must compensate. It
//!    goes *through the operationHistory* like a real refusal
//!    ([`Admission::Refuse`](crate::Admission)): recorded when the request
//!    id is new, so a retry gets the same refusal; when the request id was
//!    already applied (an earlier attempt whose reply was lost), the recorded
//!    outcome is replayed instead — a refusal that skipped the barrier would
//!    tell the orchestrator "nothing applied" about a charge that was;
//! 4. **lost reply**: the call is applied and committed, then the caller sees
//!    UNAVAILABLE — the orchestrator must retry, and the barrier must replay
//!    the recorded outcome instead of applying it twice.
//!
//! # What is never faulted, and why
//!
//! - **Reads** (GetAccount, GetProduct): the orchestrator never reads a
//!   participant, so failing a read exercises no recovery path; it would only
//!   blind the person (or test) watching what the faults did.
//! - **Deposit, AddStock** ([`CallKind::Admin`]): they seed data (the dev
//!   stack and the compose `seed` job call them at start-up) and are not saga
//!   steps, so nothing retries or compensates them; faulting them would make a
//!   faulty stack fail to start instead of showing recovery.
//! - The admin API itself, which requires the admin token when one is
//!   configured (`service_kit::auth`; [`api::service_with`]).
//!
//! # Determinism
//!
//! One seeded [`StdRng`] (`seed_from_u64`) behind a mutex. Every decision of
//! one call — including whether its reply will be lost — is drawn at once in
//! [`Faults::before`], so the sequence of decisions depends only on the seed
//! and the order (and kind) of the calls, never on how concurrent calls
//! interleave afterwards. A fault whose setting is zero draws nothing, so
//! turning one fault on does not change the others' sequence, and with every
//! setting zero the RNG is never used and no call is delayed.
//! [`Faults::set`] (SetFaults) restarts the sequence from the new seed.
//! Counters are cumulative since start-up (they are not reset by SetFaults):
//! compare two readings to count what one run injected.

mod api;
mod config;

pub use api::{FaultApi, SERVICE_NAME, service_with};
pub use config::FaultConfig;

use crate::Admission;
use crate::outcome::{Refusal, injected_unavailable};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use service_kit::validate;
use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, PoisonError};
use std::time::Duration;
use tonic::Status;

/// Seed used when none is configured.
pub const DEFAULT_SEED: u64 = 1;

/// Message of an injected transient error.
pub const TRANSIENT_MESSAGE: &str = "injected transient error";
/// Message of an injected business refusal.
pub const REFUSAL_MESSAGE: &str = "injected business refusal";
/// Message of an injected lost reply.
pub const LOST_REPLY_MESSAGE: &str = "injected lost reply (the operation was applied)";

/// What may be injected (see the module docs for the meaning of each).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct FaultSettings {
    /// Probability (0..=1) of UNAVAILABLE before doing anything.
    pub transient_error_rate: f64,
    /// Each faultable call is delayed by a uniform 0..=this many ms.
    pub added_latency_ms: u32,
    /// Probability (0..=1) that an applied reply is replaced by UNAVAILABLE.
    pub drop_reply_rate: f64,
    /// Probability (0..=1) that an action is refused with FAILED_PRECONDITION.
    pub refusal_rate: f64,
    /// Seed of the random sequence.
    pub seed: u64,
}

impl Default for FaultSettings {
    fn default() -> Self {
        Self::disabled()
    }
}

impl FaultSettings {
    /// No faults.
    pub const fn disabled() -> Self {
        FaultSettings {
            transient_error_rate: 0.0,
            added_latency_ms: 0,
            drop_reply_rate: 0.0,
            refusal_rate: 0.0,
            seed: DEFAULT_SEED,
        }
    }

    /// Whether any fault can be injected.
    pub fn is_enabled(&self) -> bool {
        self.transient_error_rate > 0.0
            || self.added_latency_ms > 0
            || self.drop_reply_rate > 0.0
            || self.refusal_rate > 0.0
    }

    /// Every rate within 0..=1 (NaN is not).
    pub fn validate(&self) -> Result<(), InvalidSetting> {
        check_rate("transient_error_rate", self.transient_error_rate)?;
        check_rate("drop_reply_rate", self.drop_reply_rate)?;
        check_rate("refusal_rate", self.refusal_rate)?;
        Ok(())
    }
}

impl fmt::Display for FaultSettings {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "transient_error_rate={} added_latency_ms={} drop_reply_rate={} refusal_rate={} seed={}",
            self.transient_error_rate,
            self.added_latency_ms,
            self.drop_reply_rate,
            self.refusal_rate,
            self.seed
        )
    }
}

/// A setting out of range; becomes INVALID_ARGUMENT naming the field.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("{field}: {problem}")]
pub struct InvalidSetting {
    /// The setting.
    pub field: &'static str,
    /// What is wrong with its value.
    pub problem: String,
}

impl From<InvalidSetting> for Status {
    fn from(e: InvalidSetting) -> Status {
        validate::invalid(e.field, &e.problem)
    }
}

fn rate_problem(value: f64) -> Option<String> {
    // NaN is not contained in any range, so it is refused here too.
    (!(0.0..=1.0).contains(&value)).then(|| format!("must be within 0..=1 (got {value})"))
}

fn check_rate(field: &'static str, value: f64) -> Result<(), InvalidSetting> {
    match rate_problem(value) {
        Some(problem) => Err(InvalidSetting { field, problem }),
        None => Ok(()),
    }
}

/// Which kind of call asks; decides what may be injected.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CallKind {
    /// A saga action (Charge, Deduct): latency, transient error, refusal,
    /// lost reply.
    Action,
    /// A compensation (Refund, Restock): latency, transient error, lost
    /// reply — never a refusal (a compensation must eventually succeed).
    Compensation,
    /// Admin seeding (Deposit, AddStock): never faulted, draws nothing.
    Admin,
}

/// How many faults were injected since start-up.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct FaultCounters {
    /// Calls failed with UNAVAILABLE before doing anything.
    pub transient_errors: u64,
    /// Applied calls whose reply was replaced by UNAVAILABLE.
    pub dropped_replies: u64,
    /// Actions refused with FAILED_PRECONDITION.
    pub refusals: u64,
    /// Calls delayed.
    pub delayed_calls: u64,
}

/// A call let through by [`Faults::before`]; hand it to [`Faults::after`]
/// with the call's result.
#[must_use = "pass it to Faults::after with the call's result"]
#[derive(Debug)]
pub struct Admitted {
    drop_reply: bool,
    refuse: bool,
}

impl Admitted {
    /// Whether the participant must apply this action or refuse it as a
    /// business refusal. A refusal must go *through its operationHistory*:
    /// recorded like any refusal when the request id is new, and the
    /// recorded outcome replayed when it is not — an action applied by an
    /// earlier attempt whose reply was lost stays applied. (A refusal that
    /// skipped the barrier would tell the orchestrator "nothing applied"
    /// about a charge that was, and leak money.)
    pub fn admission(&self) -> Admission {
        if self.refuse {
            Admission::Refuse(Refusal::injected())
        } else {
            Admission::Apply
        }
    }
}

/// Every decision for one call, drawn together.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Plan {
    delay_ms: u32,
    transient: bool,
    refusal: bool,
    drop_reply: bool,
}

impl Plan {
    const NONE: Plan = Plan {
        delay_ms: 0,
        transient: false,
        refusal: false,
        drop_reply: false,
    };
}

struct State {
    settings: FaultSettings,
    rng: StdRng,
}

/// `true` with probability `rate`; draws nothing when `rate` is zero.
fn chance(rng: &mut StdRng, rate: f64) -> bool {
    // random::<f64>() is in [0, 1), so rate 1.0 always hits.
    rate > 0.0 && rng.random::<f64>() < rate
}

impl State {
    fn plan(&mut self, kind: CallKind) -> Plan {
        if kind == CallKind::Admin {
            return Plan::NONE;
        }
        let s = self.settings;
        let rng = &mut self.rng;
        let delay_ms = if s.added_latency_ms > 0 {
            rng.random_range(0..=s.added_latency_ms)
        } else {
            0
        };
        let transient = chance(rng, s.transient_error_rate);
        let refusal = !transient && kind == CallKind::Action && chance(rng, s.refusal_rate);
        let drop_reply = !transient && !refusal && chance(rng, s.drop_reply_rate);
        Plan {
            delay_ms,
            transient,
            refusal,
            drop_reply,
        }
    }
}

/// The fault injector of one participant: settings, the seeded random
/// sequence and the counters. Share it as `Arc<Faults>` between the service
/// adapter and [`FaultApi`].
pub struct Faults {
    state: Mutex<State>,
    transient_errors: AtomicU64,
    dropped_replies: AtomicU64,
    refusals: AtomicU64,
    delayed_calls: AtomicU64,
}

impl fmt::Debug for Faults {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Faults")
            .field("settings", &self.settings())
            .field("counters", &self.counters())
            .finish()
    }
}

impl Default for Faults {
    fn default() -> Self {
        Self::disabled()
    }
}

impl Faults {
    /// An injector with `settings`, its sequence starting at their seed.
    pub fn new(settings: FaultSettings) -> Result<Faults, InvalidSetting> {
        settings.validate()?;
        Ok(Faults {
            state: Mutex::new(State {
                settings,
                rng: StdRng::seed_from_u64(settings.seed),
            }),
            transient_errors: AtomicU64::new(0),
            dropped_replies: AtomicU64::new(0),
            refusals: AtomicU64::new(0),
            delayed_calls: AtomicU64::new(0),
        })
    }

    /// An injector that injects nothing (until [`Faults::set`] says so).
    pub fn disabled() -> Faults {
        let settings = FaultSettings::disabled();
        Faults {
            state: Mutex::new(State {
                settings,
                rng: StdRng::seed_from_u64(settings.seed),
            }),
            transient_errors: AtomicU64::new(0),
            dropped_replies: AtomicU64::new(0),
            refusals: AtomicU64::new(0),
            delayed_calls: AtomicU64::new(0),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        // Nothing panics while the lock is held; should it ever, the state
        // (plain numbers and an RNG) is still consistent.
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The current settings.
    pub fn settings(&self) -> FaultSettings {
        self.lock().settings
    }

    /// Replaces the settings and restarts the sequence from their seed.
    /// Invalid settings change nothing.
    pub fn set(&self, settings: FaultSettings) -> Result<(), InvalidSetting> {
        settings.validate()?;
        let mut state = self.lock();
        state.settings = settings;
        state.rng = StdRng::seed_from_u64(settings.seed);
        Ok(())
    }

    /// What was injected since start-up.
    pub fn counters(&self) -> FaultCounters {
        FaultCounters {
            transient_errors: self.transient_errors.load(Ordering::Relaxed),
            dropped_replies: self.dropped_replies.load(Ordering::Relaxed),
            refusals: self.refusals.load(Ordering::Relaxed),
            delayed_calls: self.delayed_calls.load(Ordering::Relaxed),
        }
    }

    /// Call before a mutating call does anything (after its input is
    /// validated): sleeps the drawn latency, then fails with an injected
    /// transient error, or admits the call — for actions possibly marked to
    /// be refused ([`Admitted::admission`]), which the participant records
    /// through its barrier.
    pub async fn before(&self, kind: CallKind, request_id: &str) -> Result<Admitted, Status> {
        let plan = self.lock().plan(kind);
        if plan.delay_ms > 0 {
            self.delayed_calls.fetch_add(1, Ordering::Relaxed);
            tracing::debug!(
                request_id,
                ?kind,
                delay_ms = plan.delay_ms,
                "injected latency"
            );
            tokio::time::sleep(Duration::from_millis(u64::from(plan.delay_ms))).await;
        }
        if plan.transient {
            self.transient_errors.fetch_add(1, Ordering::Relaxed);
            tracing::debug!(request_id, ?kind, "injected transient error");
            return Err(injected_unavailable(
                "INJECTED_TRANSIENT_ERROR",
                TRANSIENT_MESSAGE,
            ));
        }
        if plan.refusal {
            self.refusals.fetch_add(1, Ordering::Relaxed);
            tracing::debug!(request_id, ?kind, "injected business refusal");
        }
        Ok(Admitted {
            drop_reply: plan.drop_reply,
            refuse: plan.refusal,
        })
    }

    /// Call with the result of an admitted call: a successful reply may be
    /// lost (UNAVAILABLE although the operation was applied); errors and
    /// refusals pass through unchanged.
    pub fn after<T>(
        &self,
        admitted: Admitted,
        request_id: &str,
        reply: Result<T, Status>,
    ) -> Result<T, Status> {
        match reply {
            Ok(_) if admitted.drop_reply => {
                self.dropped_replies.fetch_add(1, Ordering::Relaxed);
                tracing::debug!(request_id, "injected lost reply");
                Err(injected_unavailable(
                    "INJECTED_LOST_REPLY",
                    LOST_REPLY_MESSAGE,
                ))
            }
            other => other,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tonic::Code;

    fn settings(transient: f64, drop: f64, refusal: f64, seed: u64) -> FaultSettings {
        FaultSettings {
            transient_error_rate: transient,
            added_latency_ms: 0,
            drop_reply_rate: drop,
            refusal_rate: refusal,
            seed,
        }
    }

    /// Outcome of one call: 'T' transient, 'R' refusal, 'D' lost reply, '.' ok.
    async fn outcome(faults: &Faults, kind: CallKind) -> char {
        match faults.before(kind, "r").await {
            Err(s) if s.message() == TRANSIENT_MESSAGE => 'T',
            Err(_) => '?',
            Ok(a) if a.admission() != Admission::Apply => 'R',
            Ok(a) => match faults.after(a, "r", Ok(())) {
                Ok(()) => '.',
                Err(_) => 'D',
            },
        }
    }

    async fn run(faults: &Faults, calls: usize) -> String {
        let mut out = String::new();
        for i in 0..calls {
            let kind = [CallKind::Action, CallKind::Compensation, CallKind::Admin][i % 3];
            out.push(outcome(faults, kind).await);
        }
        out
    }

    #[tokio::test]
    async fn same_seed_same_sequence_and_set_restarts_it() {
        let a = Faults::new(settings(0.2, 0.2, 0.2, 7)).unwrap();
        let b = Faults::new(settings(0.2, 0.2, 0.2, 7)).unwrap();
        let first = run(&a, 300).await;
        assert_eq!(first, run(&b, 300).await);
        assert_eq!(a.counters(), b.counters());
        assert!(first.contains('T') && first.contains('R') && first.contains('D'));
        a.set(settings(0.2, 0.2, 0.2, 7)).unwrap();
        assert_eq!(first, run(&a, 300).await);
        let other = Faults::new(settings(0.2, 0.2, 0.2, 8)).unwrap();
        assert_ne!(first, run(&other, 300).await);
    }

    #[tokio::test]
    async fn disabled_faults_draw_nothing() {
        // Only the transient rate is set: each call draws exactly one number.
        let faults = Faults::new(settings(0.5, 0.0, 0.0, 3)).unwrap();
        let mut rng = StdRng::seed_from_u64(3);
        for _ in 0..100 {
            let expected = if rng.random::<f64>() < 0.5 { 'T' } else { '.' };
            assert_eq!(outcome(&faults, CallKind::Action).await, expected);
        }
        let off = Faults::disabled();
        assert_eq!(run(&off, 30).await, ".".repeat(30));
        assert_eq!(off.counters(), FaultCounters::default());
    }

    #[tokio::test]
    async fn rate_one_always_fires_and_admin_is_never_faulted() {
        let faults = Faults::new(settings(0.0, 0.0, 1.0, 1)).unwrap();
        let refused = faults.before(CallKind::Action, "r").await.unwrap();
        assert!(
            matches!(refused.admission(), Admission::Refuse(_)),
            "the participant records the refusal"
        );
        assert_eq!(outcome(&faults, CallKind::Compensation).await, '.');
        faults.set(settings(1.0, 1.0, 1.0, 1)).unwrap();
        assert_eq!(outcome(&faults, CallKind::Admin).await, '.');
        assert_eq!(outcome(&faults, CallKind::Compensation).await, 'T');
        faults.set(settings(0.0, 1.0, 0.0, 1)).unwrap();
        assert_eq!(outcome(&faults, CallKind::Compensation).await, 'D');
        let passes = faults.before(CallKind::Action, "r").await.unwrap();
        let err = faults.after::<()>(passes, "r", Err(Status::not_found("x")));
        assert_eq!(
            err.unwrap_err().code(),
            Code::NotFound,
            "errors pass through"
        );
        assert_eq!(
            faults.counters(),
            FaultCounters {
                transient_errors: 1,
                dropped_replies: 1,
                refusals: 1,
                delayed_calls: 0
            }
        );
    }

    #[test]
    fn invalid_settings_name_the_field_and_change_nothing() {
        let faults = Faults::new(settings(0.1, 0.0, 0.0, 5)).unwrap();
        let before = faults.settings();
        for (bad, field) in [
            (settings(1.5, 0.0, 0.0, 1), "transient_error_rate"),
            (settings(0.0, f64::NAN, 0.0, 1), "drop_reply_rate"),
            (settings(0.0, 0.0, -0.1, 1), "refusal_rate"),
            (settings(f64::INFINITY, 0.0, 0.0, 1), "transient_error_rate"),
        ] {
            let e = faults.set(bad).unwrap_err();
            assert_eq!(e.field, field);
            let status = Status::from(e);
            assert_eq!(status.code(), Code::InvalidArgument);
            assert!(
                status
                    .message()
                    .starts_with(&format!("{field}: must be within 0..=1")),
                "{}",
                status.message()
            );
            assert!(Faults::new(bad).is_err());
        }
        assert_eq!(faults.settings(), before);
    }
}
