//! The loop that runs one saga to its end: ask the engine, call the step,
//! judge the reply, record it, save it (or, when nothing a crash needs is
//! lost, go on without saving), sleep before a retry.

use super::{DriveError, Executor, policy::Call};
use crate::engine::{self, Next, Outcome};
use crate::saga::{Saga, StepState};
use crate::step::{Phase, SagaStep, StepOutcome};
use std::time::Duration;
use tracing::{Instrument, Span};

/// What the loop carries from one call to the next.
struct Progress {
    /// When this driver took the saga up (ms since the epoch): the step
    /// deadline counts from here at the earliest.
    driven_since_ms: i64,
    /// The work the backoff belongs to: a new piece of work starts a new
    /// backoff sequence.
    current: Next,
    backoff: backon::ExponentialBackoff,
}

impl Executor {
    /// Runs the saga until it is terminal; returns its final state.
    pub async fn drive(&self, mut saga: Saga) -> Result<Saga, DriveError> {
        let mut progress = Progress {
            driven_since_ms: self.now_ms(),
            current: Next::Done,
            backoff: self.policy.backoff(),
        };
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
            if work != progress.current {
                progress.current = work;
                progress.backoff = self.policy.backoff();
            }
            if self.abandon_if_past_send_window(&mut saga).await? {
                continue;
            }
            if let Some(step) = self.unconfigured_step(&saga) {
                let step = step.to_owned();
                self.hold_for_unconfigured_step(&saga, &step).await;
                return Err(DriveError::UnknownStep(step));
            }
            let outcome = self.call(&saga, i, phase, progress.driven_since_ms).await?;
            let retrying = matches!(
                outcome,
                Outcome::Retrying(_) | Outcome::CompensationRetrying(_)
            );
            let was_running = saga.status == crate::saga::SagaStatus::Running;
            engine::record_outcome(&mut saga, work, outcome, self.now_ms())?;
            if was_running && planted_skip_before_compensation(&saga) {
                continue;
            }
            if !self.save_every_step
                && engine::may_skip_save(&saga, work)
                && self.lease_is_young(&saga)
            {
                // Not published: watchers see saved versions only.
                continue;
            }
            self.persist(&mut saga).await?;
            self.hub.publish(&saga);
            if retrying {
                let delay = progress.backoff.next().unwrap_or(self.policy.max_delay);
                if !self.pause(delay).await {
                    return Err(self.release(saga).await);
                }
            }
        }
    }

    /// Sends step `i`'s action or compensation and judges the reply: the
    /// engine's outcome, counted, timed and logged in the step's span.
    async fn call(
        &self,
        saga: &Saga,
        i: usize,
        phase: Phase,
        driven_since_ms: i64,
    ) -> Result<Outcome, DriveError> {
        let step = &saga.steps[i];
        let Some(calls) = self.definition.step(&step.name) else {
            return Err(DriveError::UnknownStep(step.name.clone()));
        };
        let attempt = match phase {
            Phase::Action => step.attempts,
            Phase::Compensation => step.compensation_attempts,
        };
        let exporting = service_kit::telemetry::exporting();
        let span = attempt_span(saga, step, phase, attempt, exporting);
        let started = std::time::Instant::now();
        let reply = invoke(calls, saga, step, phase)
            .instrument(span.clone())
            .await;
        let call = Call {
            step,
            phase,
            attempt,
            driven_since_ms,
            now_ms: self.now_ms(),
        };
        let outcome = self.policy.decide(call, reply);
        metrics::histogram!(
            "saga_step_duration_seconds",
            "step" => calls.name(),
            "phase" => phase.as_str(),
            "outcome" => outcome.as_str()
        )
        .record(started.elapsed().as_secs_f64());
        if exporting {
            span.record("outcome", outcome.as_str());
            if is_failure(&outcome) {
                span.record("otel.status_code", "error");
            }
        }
        span.in_scope(|| count_and_log(&outcome));
        Ok(outcome)
    }

    /// Sleeps `delay` before a retry; false when the process began to stop
    /// meanwhile.
    pub(super) async fn pause(&self, delay: Duration) -> bool {
        tokio::select! {
            biased;
            _ = self.clock.sleep(delay) => true,
            _ = self.shutdown.wait() => false,
        }
    }

    /// Marks `saga` FAILED and saves it when it is past its send window
    /// ([`crate::retention::send_window`]): no call of it may be sent any
    /// more. True when it did.
    async fn abandon_if_past_send_window(&self, saga: &mut Saga) -> Result<bool, DriveError> {
        let Some(detail) = self.past_send_window(saga) else {
            return Ok(false);
        };
        tracing::error!(saga_id = %saga.saga_id, %detail, "saga marked FAILED: past its send window");
        metrics::counter!("saga_send_window_exceeded_total").increment(1);
        engine::abandon(saga, &detail, self.now_ms());
        self.persist(saga).await?;
        Ok(true)
    }

    /// Why `saga` must not be sent another call, if it is past the send
    /// window.
    fn past_send_window(&self, saga: &Saga) -> Option<String> {
        let window = self.send_window?;
        let window_ms = i64::try_from(window.as_millis()).unwrap_or(i64::MAX);
        let age_ms = self.now_ms().saturating_sub(saga.created_at_ms);
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
}

/// The planted defect [`Defect::SkipSaveBeforeCompensation`] (never, unless
/// a test planted it): the saga just began compensating and its save is
/// left out.
///
/// [`Defect::SkipSaveBeforeCompensation`]: service_kit::defects::Defect::SkipSaveBeforeCompensation
fn planted_skip_before_compensation(saga: &Saga) -> bool {
    saga.status == crate::saga::SagaStatus::Compensating
        && service_kit::defects::planted(service_kit::defects::Defect::SkipSaveBeforeCompensation)
}

/// Sends `step`'s action or compensation.
async fn invoke(calls: &dyn SagaStep, saga: &Saga, step: &StepState, phase: Phase) -> StepOutcome {
    match phase {
        Phase::Action => calls.act(saga, step).await,
        Phase::Compensation => calls.compensate(saga, step).await,
    }
}

/// The span of one attempt of `step`'s action or compensation: its log
/// lines carry step, request id, phase and attempt (the saga id comes from
/// the enclosing `saga` span). When spans are `exporting`, it is also named
/// for the trace and carries the saga id itself; otherwise those fields
/// stay empty and cost nothing.
fn attempt_span(
    saga: &Saga,
    step: &StepState,
    phase: Phase,
    attempt: u32,
    exporting: bool,
) -> Span {
    let span = tracing::info_span!(
        "step",
        step = %step.name,
        request_id = %step.request_id,
        phase = ?phase,
        attempt,
        saga_id = tracing::field::Empty,
        outcome = tracing::field::Empty,
        otel.name = tracing::field::Empty,
        otel.kind = tracing::field::Empty,
        otel.status_code = tracing::field::Empty,
    );
    if exporting {
        // Before the span is first entered: its exported name and kind are
        // fixed then.
        span.record("otel.name", step_span_name(phase, &step.name));
        span.record("otel.kind", "client");
        span.record("saga_id", saga.saga_id.as_str());
    }
    span
}

/// The exported name of a step attempt's span: `<step> action` or
/// `<step> compensation`, so a trace reads as the saga ran.
fn step_span_name(phase: Phase, step: &str) -> String {
    match phase {
        Phase::Action => format!("{step} action"),
        Phase::Compensation => format!("{step} compensation"),
    }
}

/// Whether the attempt failed (its span is marked as an error): a refusal
/// is an answer, not a failure.
fn is_failure(outcome: &Outcome) -> bool {
    matches!(
        outcome,
        Outcome::Retrying(_)
            | Outcome::CompensationRetrying(_)
            | Outcome::GaveUp(_)
            | Outcome::CompensationGaveUp(_)
    )
}

fn count_and_log(outcome: &Outcome) {
    match outcome {
        Outcome::Succeeded => tracing::debug!("action applied"),
        Outcome::Compensated => {
            metrics::counter!("saga_compensations_total").increment(1);
            tracing::info!("compensation applied")
        }
        Outcome::Refused(refusal) => tracing::info!(
            reason = %refusal.message,
            code = refusal.code.as_deref().unwrap_or_default(),
            "action refused; compensating"
        ),
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
