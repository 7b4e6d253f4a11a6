//! The saga engine: a pure state machine.
//!
//! It knows nothing about gRPC or storage. Given a persisted [`Saga`] it says
//! what to do next ([`next`]); given the outcome of that work it moves the
//! saga on ([`record_outcome`]), appending to its history. Recovery after a crash is
//! therefore just "load the saga, ask [`next`]".
//!
//! Rules:
//! - Forward steps run in definition order; step *i+1* starts only after step
//!   *i*'s success is recorded. Recording an outcome also records the intent
//!   of the next step (status `Running`), so a single store write persists
//!   both. That write may be left out when nothing a crash needs is lost
//!   ([`may_skip_save`]): a run of first-attempt successes is saved once,
//!   at its end, and a claim marks every step after the stored one as
//!   possibly sent ([`record_claim`]), so a recovered saga compensates them
//!   if it compensates.
//! - A refused step applied nothing: it is not compensated; every earlier
//!   succeeded step is, in reverse order. A step whose outcome stayed unknown
//!   (retry budget exhausted) *is* compensated too — the participant's
//!   barrier makes compensating a never-applied action a safe no-op.
//! - Compensations are retried; if their budget runs out the saga is
//!   `Failed` and waits for a person (RetrySaga). Its reason then says which
//!   compensation could not be completed; a resume puts back the reason it
//!   was compensating for, so a retried saga that ends `Cancelled` does not
//!   keep a failure that was fixed.

use crate::saga::{
    HISTORY_HEAD, HISTORY_KEPT, Lease, Order, Refusal, Saga, SagaStatus, StepState, StepStatus,
    Transition, TransitionState, bounded_text,
};

/// What the engine knows of a step: its name and the names of the
/// operations that do and undo it (the calls themselves live in
/// [`crate::step::SagaStep`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StepNames {
    /// The step's name in the saga, e.g. `payment`.
    pub name: &'static str,
    /// The action, e.g. `charge`.
    pub action: &'static str,
    /// The compensation, e.g. `refund`.
    pub compensation: &'static str,
}

/// What the executor must do next.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Next {
    /// Send step `i`'s action.
    Act(usize),
    /// Send step `i`'s compensation.
    Compensate(usize),
    /// Terminal: nothing to do.
    Done,
}

/// What happened to the work [`next`] asked for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// The action was applied.
    Succeeded,
    /// The participant refused the action for a business reason.
    Refused(Refusal),
    /// This attempt failed transiently; another attempt follows.
    Retrying(String),
    /// The attempt budget is spent and the outcome is unknown: compensate.
    GaveUp(String),
    /// The compensation is confirmed.
    Compensated,
    /// The compensation attempt failed; another attempt follows.
    CompensationRetrying(String),
    /// The compensation budget is spent: the saga needs attention.
    CompensationGaveUp(String),
}

impl Outcome {
    /// Whether this is an outcome of `work`: an action's outcomes for
    /// [`Next::Act`], a compensation's for [`Next::Compensate`].
    pub fn fits(&self, work: Next) -> bool {
        match work {
            Next::Act(_) => matches!(
                self,
                Outcome::Succeeded
                    | Outcome::Refused(_)
                    | Outcome::Retrying(_)
                    | Outcome::GaveUp(_)
            ),
            Next::Compensate(_) => matches!(
                self,
                Outcome::Compensated
                    | Outcome::CompensationRetrying(_)
                    | Outcome::CompensationGaveUp(_)
            ),
            Next::Done => false,
        }
    }

    /// A short label (metrics, logs).
    pub fn as_str(&self) -> &'static str {
        match self {
            Outcome::Succeeded => "succeeded",
            Outcome::Refused(_) => "refused",
            Outcome::Retrying(_) => "retrying",
            Outcome::GaveUp(_) => "gave_up",
            Outcome::Compensated => "compensated",
            Outcome::CompensationRetrying(_) => "compensation_retrying",
            Outcome::CompensationGaveUp(_) => "compensation_gave_up",
        }
    }
}

/// Creates a saga of `steps` (in forward order) whose first step's intent
/// is recorded, so the creating write is also the intent of the first
/// action.
pub fn start(
    steps: &[StepNames],
    saga_id: String,
    request_id: String,
    fingerprint: String,
    order: Order,
    now_ms: i64,
) -> Saga {
    let steps = steps
        .iter()
        .map(|d| StepState {
            name: d.name.to_owned(),
            action: d.action.to_owned(),
            compensation: d.compensation.to_owned(),
            status: StepStatus::Pending,
            request_id: format!("{saga_id}:{}", d.name),
            attempts: 0,
            compensation_attempts: 0,
            last_error: None,
            started_at_ms: None,
            finished_at_ms: None,
        })
        .collect();
    let mut saga = Saga {
        saga_id,
        request_id,
        fingerprint,
        order,
        status: SagaStatus::Running,
        steps,
        history: Vec::new(),
        reason: None,
        refusal_code: None,
        created_at_ms: now_ms,
        updated_at_ms: now_ms,
        version: 0,
        lease: None,
        client_trace_id: None,
        attention: None,
        history_omitted: 0,
    };
    saga.history.push(Transition {
        at_ms: now_ms,
        step: None,
        from: TransitionState::New,
        to: SagaStatus::Running.into(),
        detail: "saga created".to_owned(),
        version: None,
        by: None,
    });
    begin_next_action(&mut saga, 0, now_ms);
    saga
}

/// What to do next for `saga`.
pub fn next(saga: &Saga) -> Next {
    match saga.status {
        SagaStatus::Running => saga
            .steps
            .iter()
            .position(|s| s.status != StepStatus::Succeeded)
            .map_or(Next::Done, Next::Act),
        SagaStatus::Compensating => next_compensation(saga).map_or(Next::Done, Next::Compensate),
        SagaStatus::Completed | SagaStatus::Cancelled | SagaStatus::Failed => Next::Done,
    }
}

/// The last step whose effect may exist and is not yet compensated.
fn next_compensation(saga: &Saga) -> Option<usize> {
    let undone = |s: &StepState| {
        matches!(
            s.status,
            StepStatus::Succeeded | StepStatus::Running | StepStatus::Compensating
        )
    };
    if service_kit::defects::planted(service_kit::defects::Defect::CompensateInForwardOrder) {
        return saga.steps.iter().position(undone);
    }
    saga.steps.iter().rposition(undone)
}

/// An outcome that does not fit the saga: a bug in whoever drives it,
/// refused loudly instead of applied to a state it was not meant for.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "saga {saga_id}: outcome {outcome} for {work:?} does not fit its state \
     (status {status}, the engine expects {expected:?}); nothing was recorded"
)]
pub struct Misfit {
    /// The saga the outcome was for.
    pub saga_id: String,
    /// The work the caller says it did.
    pub work: Next,
    /// The outcome it reported.
    pub outcome: &'static str,
    /// What [`next`] says is due.
    pub expected: Next,
    /// The saga's status.
    pub status: SagaStatus,
}

/// Applies the outcome of the work [`next`] returned. An outcome for other
/// work than [`next`]'s (a stale caller), or of the wrong kind (a
/// compensation's outcome for an action), changes nothing and is an error
/// naming the saga.
pub fn record_outcome(
    saga: &mut Saga,
    work: Next,
    outcome: Outcome,
    now_ms: i64,
) -> Result<(), Misfit> {
    let expected = next(saga);
    if expected != work || !outcome.fits(work) {
        return Err(Misfit {
            saga_id: saga.saga_id.clone(),
            work,
            outcome: outcome.as_str(),
            expected,
            status: saga.status,
        });
    }
    let transitions = saga.history.len();
    apply(saga, work, outcome, now_ms);
    if saga.history.len() != transitions {
        saga.updated_at_ms = now_ms;
    }
    Ok(())
}

fn apply(saga: &mut Saga, work: Next, outcome: Outcome, now_ms: i64) {
    match (work, outcome) {
        (Next::Act(i), Outcome::Succeeded) => {
            finish_step(saga, i, StepStatus::Succeeded, None, now_ms);
            if i + 1 < saga.steps.len() {
                begin_next_action(saga, i + 1, now_ms);
            } else {
                set_status(saga, SagaStatus::Completed, "every step succeeded", now_ms);
            }
        }
        (Next::Act(i), Outcome::Refused(refusal)) => {
            finish_step(saga, i, StepStatus::Refused, Some(&refusal.message), now_ms);
            start_compensating(saga, i, refusal.message, now_ms);
            saga.refusal_code = refusal.code.map(bounded_text);
        }
        (Next::Act(i), Outcome::Retrying(error)) => {
            let step = &mut saga.steps[i];
            step.attempts = step.attempts.saturating_add(1);
            step.last_error = Some(bounded_text(error.clone()));
            push(
                saga,
                Some(i),
                StepStatus::Running,
                StepStatus::Running,
                format!("attempt failed, retrying: {error}"),
                now_ms,
            );
        }
        (Next::Act(i), Outcome::GaveUp(error)) => {
            let reason = format!(
                "{} gave up after {} attempts: {error}",
                saga.steps[i].action, saga.steps[i].attempts
            );
            saga.steps[i].last_error = Some(bounded_text(error));
            start_compensating(saga, i, reason, now_ms);
        }
        (Next::Compensate(i), Outcome::Compensated) => {
            if saga.steps[i].status != StepStatus::Compensating {
                begin_compensation(saga, i, now_ms);
            }
            finish_step(saga, i, StepStatus::Compensated, None, now_ms);
            match next_compensation(saga) {
                Some(j) => begin_compensation(saga, j, now_ms),
                None => set_status(
                    saga,
                    SagaStatus::Cancelled,
                    "every applied step is compensated",
                    now_ms,
                ),
            }
        }
        (Next::Compensate(i), Outcome::CompensationRetrying(error)) => {
            if saga.steps[i].status != StepStatus::Compensating {
                begin_compensation(saga, i, now_ms);
            }
            let step = &mut saga.steps[i];
            step.compensation_attempts = step.compensation_attempts.saturating_add(1);
            step.last_error = Some(bounded_text(error.clone()));
            push(
                saga,
                Some(i),
                StepStatus::Compensating,
                StepStatus::Compensating,
                format!("attempt failed, retrying: {error}"),
                now_ms,
            );
        }
        (Next::Compensate(i), Outcome::CompensationGaveUp(error)) => {
            let step = &mut saga.steps[i];
            step.last_error = Some(bounded_text(error.clone()));
            let detail = format!("{} could not be completed: {error}", step.compensation);
            saga.reason = Some(bounded_text(detail.clone()));
            set_status(saga, SagaStatus::Failed, &detail, now_ms);
        }
        // Refused by `record_outcome` before anything changed.
        _ => {}
    }
}

/// Makes a Failed saga resumable: its compensations get a fresh budget.
/// Returns false when the saga is not Failed.
///
/// The saga's reason goes back to why it is compensating (the refusal or
/// the unknown outcome that started the compensations, see
/// [`compensation_cause`]): the failure that made it Failed ("refund could
/// not be completed: …") was fixed by the person who retried it, so it must
/// not stay the reason of the saga that now ends Cancelled. If that
/// compensation fails again, the new failure becomes the reason again.
pub fn resume(saga: &mut Saga, now_ms: i64) -> bool {
    if saga.status != SagaStatus::Failed {
        return false;
    }
    for step in &mut saga.steps {
        step.compensation_attempts = 0;
    }
    saga.reason = compensation_cause(saga);
    saga.updated_at_ms = now_ms;
    set_status(
        saga,
        SagaStatus::Compensating,
        "resumed by RetrySaga",
        now_ms,
    );
    if let Some(i) = next_compensation(saga) {
        begin_compensation(saga, i, now_ms);
    }
    true
}

/// Stops a saga that can no longer be driven safely (its calls could reach
/// participants that no longer remember its request ids, see
/// [`crate::retention::send_window`]): it becomes `Failed` with `detail` as
/// its reason and waits for a person. Its steps stay as they are: a running
/// step's effect is unknown, and that is what the person reconciles.
/// Returns false (and changes nothing) when the saga is already terminal.
pub fn abandon(saga: &mut Saga, detail: &str, now_ms: i64) -> bool {
    if saga.status.is_terminal() {
        return false;
    }
    saga.reason = Some(bounded_text(detail.to_owned()));
    saga.updated_at_ms = now_ms;
    set_status(saga, SagaStatus::Failed, detail, now_ms);
    true
}

/// Records that `lease`'s owner claims the saga to drive it: after the
/// previous owner's lease expired (a takeover), after it was released at
/// shutdown, or its own lease after a restart. The history says which, so
/// a person can see who drove a saga and when ownership moved.
pub fn record_claim(saga: &mut Saga, lease: Lease, now_ms: i64) {
    let detail = match &saga.lease {
        Some(old) if old.owner == lease.owner => {
            format!(
                "resumed by {} (its own lease, after a restart)",
                lease.owner
            )
        }
        Some(old) => format!(
            "taken over by {}: the lease of {} expired at {}",
            lease.owner, old.owner, old.until_ms
        ),
        None => format!("claimed by {} (no lease held)", lease.owner),
    };
    let status = saga.status;
    push(saga, None, status, status, detail, now_ms);
    saga.lease = Some(lease);
    inherit_unsaved_intent(saga, now_ms);
}

/// After a claim: every step after the one whose intent is stored may
/// have been sent too. The executor does not save between a step's
/// first-attempt success and the next step's action while that saves
/// nothing a crash needs ([`may_skip_save`]): the participants replay a
/// request id's recorded outcome, so re-running the stored step and then
/// each next one ends the saga exactly as the first owner would have. What
/// the store cannot say is how far the first owner got: each later step is
/// therefore marked `Running` here, so that if the saga compensates instead
/// (a replayed step gave up or was refused), those steps are compensated
/// too — a no-op at a participant that never saw the step (its barrier
/// records a null compensation), a restored effect at one that applied it.
fn inherit_unsaved_intent(saga: &mut Saga, now_ms: i64) {
    if saga.status != SagaStatus::Running {
        return;
    }
    let Some(stored) = saga
        .steps
        .iter()
        .position(|s| s.status != StepStatus::Succeeded)
    else {
        return;
    };
    for next in stored + 1..saga.steps.len() {
        if saga.steps[next].status != StepStatus::Pending {
            continue;
        }
        saga.steps[next].status = StepStatus::Running;
        push(
            saga,
            Some(next),
            StepStatus::Pending,
            StepStatus::Running,
            "may have been sent by the previous owner after its last save".to_owned(),
            now_ms,
        );
    }
}

/// Whether the executor may send the next action without saving first,
/// once the outcome of `work` was recorded: only a forward step's success
/// (the step `Succeeded`, the saga still running: the next step's intent
/// began). A run of such successes is then saved once, at its end — by the
/// outcome that is not one (a refusal, a retry, the last step, a
/// compensation), or sooner when the executor's lease grows old — and a
/// claim marks every step after the stored one as possibly sent
/// ([`inherit_unsaved_intent`]). So the happy path costs two saga writes,
/// the creating one and the last, whatever the number of steps. Every other
/// outcome is saved before anything else is sent.
///
/// And only if the step succeeded at its first attempt: a recovered saga
/// replays the stored step under that step's deadline (counted from its
/// first attempt), so a step that had already spent part of it on retries
/// could give up on replay and cancel a saga that had succeeded. Saved
/// after a retried step, the store is never behind one.
pub fn may_skip_save(saga: &Saga, work: Next) -> bool {
    let Next::Act(i) = work else {
        return false;
    };
    saga.status == SagaStatus::Running
        && saga
            .steps
            .get(i)
            .is_some_and(|step| step.status == StepStatus::Succeeded && step.attempts <= 1)
}

/// Records that `owner` gives the saga's lease up at shutdown, so another
/// instance can continue it at once (the history says who stopped driving
/// it, and the release is a save of its own, so its version has an entry).
pub fn record_release(saga: &mut Saga, owner: &str, now_ms: i64) {
    let status = saga.status;
    push(
        saga,
        None,
        status,
        status,
        format!("lease released by {owner} at shutdown"),
        now_ms,
    );
    saga.lease = None;
}

/// Why the saga started compensating: the detail of its saga-level
/// transition from running to compensating, which carries the reason
/// [`start_compensating`] set (there is exactly one; a resume moves from
/// failed). `None` when the bounded history no longer holds it (dropped
/// from the middle of a very long history): no reason rather than a stale
/// one.
fn compensation_cause(saga: &Saga) -> Option<String> {
    saga.history
        .iter()
        .find(|t| {
            t.step.is_none()
                && t.from == TransitionState::Running
                && t.to == TransitionState::Compensating
        })
        .map(|t| t.detail.clone())
}

fn start_compensating(saga: &mut Saga, failed: usize, reason: String, now_ms: i64) {
    // A later step still pending was never sent; one marked running by a
    // claim may have been (see `inherit_unsaved_intent`) and is compensated.
    for later in saga.steps.iter_mut().skip(failed + 1) {
        if later.status == StepStatus::Pending {
            later.status = StepStatus::Skipped;
        }
    }
    saga.reason = Some(bounded_text(reason.clone()));
    match next_compensation(saga) {
        Some(j) => {
            set_status(saga, SagaStatus::Compensating, &reason, now_ms);
            begin_compensation(saga, j, now_ms);
        }
        None => set_status(
            saga,
            SagaStatus::Cancelled,
            &format!("{reason}; nothing to compensate"),
            now_ms,
        ),
    }
}

fn begin_next_action(saga: &mut Saga, i: usize, now_ms: i64) {
    let step = &mut saga.steps[i];
    let from = step.status;
    step.status = StepStatus::Running;
    step.attempts = 1;
    step.started_at_ms = Some(now_ms);
    push(
        saga,
        Some(i),
        from,
        StepStatus::Running,
        "intent recorded".to_owned(),
        now_ms,
    );
}

fn begin_compensation(saga: &mut Saga, i: usize, now_ms: i64) {
    let step = &mut saga.steps[i];
    let from = step.status;
    step.status = StepStatus::Compensating;
    step.compensation_attempts = step.compensation_attempts.max(1);
    push(
        saga,
        Some(i),
        from,
        StepStatus::Compensating,
        "compensation intent recorded".to_owned(),
        now_ms,
    );
}

fn finish_step(saga: &mut Saga, i: usize, status: StepStatus, error: Option<&str>, now_ms: i64) {
    let step = &mut saga.steps[i];
    let from = step.status;
    step.status = status;
    step.finished_at_ms = Some(now_ms);
    if let Some(error) = error {
        step.last_error = Some(bounded_text(error.to_owned()));
    }
    push(
        saga,
        Some(i),
        from,
        status,
        error.unwrap_or_default().to_owned(),
        now_ms,
    );
}

fn set_status(saga: &mut Saga, status: SagaStatus, detail: &str, now_ms: i64) {
    let from = saga.status;
    saga.status = status;
    push(saga, None, from, status, detail.to_owned(), now_ms);
}

/// Appends a transition, keeping the history bounded: past
/// [`HISTORY_KEPT`] the oldest transition after the first [`HISTORY_HEAD`]
/// is dropped and counted in `history_omitted`.
fn push(
    saga: &mut Saga,
    step: Option<usize>,
    from: impl Into<TransitionState>,
    to: impl Into<TransitionState>,
    detail: String,
    now_ms: i64,
) {
    let step = step.map(|i| saga.steps[i].name.clone());
    saga.history.push(Transition {
        at_ms: now_ms,
        step,
        from: from.into(),
        to: to.into(),
        detail: bounded_text(detail),
        version: None,
        by: None,
    });
    if saga.history.len() > HISTORY_KEPT {
        saga.history.remove(HISTORY_HEAD);
        saga.history_omitted = saga.history_omitted.saturating_add(1);
    }
}

#[cfg(test)]
mod tests;
