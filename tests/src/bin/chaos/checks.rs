//! The verdict: every check of a run printed as one `PASS`/`FAIL` line (with
//! the offending cases under it) and counted for the closing
//! `chaos: <passed> passed, <failed> failed` line that the test command
//! greps.

use crate::args::Args;
use crate::soak::Outcome;
use saga_proto::saga::v1 as pb;

/// Most offending cases printed under one failed check.
const SHOWN: usize = 20;

/// Passed/failed checks, printed as they are decided.
#[derive(Default)]
pub struct Checks {
    pub passed: u32,
    pub failed: u32,
}

impl Checks {
    /// One check: `ok` or not, with a detail after its name.
    pub fn check(&mut self, ok: bool, name: &str, detail: &str) {
        if ok {
            self.passed += 1;
            println!("  PASS  {name}{}", suffix(detail));
        } else {
            self.failed += 1;
            println!("  FAIL  {name}{}", suffix(detail));
        }
    }

    /// One check that passes when `problems` is empty; lists them otherwise.
    pub fn problems(&mut self, name: &str, problems: &[String]) {
        self.check(problems.is_empty(), name, "");
        for p in problems.iter().take(SHOWN) {
            println!("          - {p}");
        }
        if problems.len() > SHOWN {
            println!("          … and {} more", problems.len() - SHOWN);
        }
    }

    /// Every check of a finished run, in the order of docs/testing.md, "The chaos soak".
    pub fn judge(&mut self, args: &Args, outcome: &Outcome) {
        println!("== checks");
        self.drive(args, outcome);
        self.lifecycle(args, outcome);
        self.contention(outcome);
        for finding in &outcome.findings {
            self.problems(&finding.name, &finding.problems);
        }
        self.takeovers(args, outcome);
        self.happened(args, outcome);
    }

    /// The contention phase's orders accepted, and each pair sent at once
    /// to two instances answered with one saga (the outcome of the races is
    /// judged on the stores, among the findings).
    fn contention(&mut self, outcome: &Outcome) {
        let Some(phase) = &outcome.contention else {
            return;
        };
        let mut problems = phase.problems.clone();
        problems.extend(phase.duplicate_problems.iter().cloned());
        self.problems(
            &format!(
                "contention: {} orders accepted and terminal; {} sent at the same moment to two instances answered with one saga",
                phase.orders.len(),
                phase.concurrent_duplicates
            ),
            &problems,
        );
    }

    /// With several instances and kills: the takeovers the orchestrators
    /// counted (their metrics, scraped before each SIGKILL and at the end)
    /// are > 0 and no more than the stored histories hold (a reading can
    /// miss the end of a killed life, never add one).
    fn takeovers(&mut self, args: &Args, outcome: &Outcome) {
        let counted = outcome.tally.counters.takeovers;
        let stored = outcome.figures.takeovers as u64;
        if args.orchestrators > 1 && args.orchestrator_kills > 0 {
            self.check(
                counted > 0 && counted <= stored,
                "lease takeovers counted by the orchestrators' saga_lease_takeovers_total > 0, and ≤ the takeovers in the histories",
                &format!(
                    "{counted} counted, {stored} in the histories{}",
                    if outcome.tally.counter_reads_missed > 0 {
                        format!(
                            " ({} readings missed)",
                            outcome.tally.counter_reads_missed
                        )
                    } else {
                        String::new()
                    }
                ),
            );
        } else {
            println!(
                "  ----  lease takeovers: {counted} counted, {stored} in the histories (one instance or no kill: not asserted)"
            );
        }
        println!(
            "  ----  takeovers of a live owner (saga_lease_takeovers_of_live_owner_total): {} (informational: a lease that expired under a healthy owner)",
            outcome.tally.counters.live_owner_takeovers
        );
        let c = &outcome.tally.counters;
        println!(
            "  ----  batched participant calls: {} batch RPCs carried {} calls (informational: batches form when calls queue behind RPCs in flight)",
            c.batches, c.batched_calls
        );
    }

    /// Every order accepted, every duplicate answered with the same saga.
    fn drive(&mut self, args: &Args, outcome: &Outcome) {
        let drive = &outcome.drive;
        let mut not_accepted = drive.problems.lock().expect("lock").clone();
        let accepted = drive.orders.lock().expect("lock").len();
        if accepted != args.sagas && not_accepted.is_empty() {
            not_accepted.push(format!("{accepted} of {} accepted", args.sagas));
        }
        self.problems(
            &format!("all {} orders accepted by CreateOrder", args.sagas),
            &not_accepted,
        );
        let mismatches = drive.duplicate_mismatches.lock().expect("lock").clone();
        self.problems(
            &format!(
                "{} duplicate CreateOrders returned the same saga (created=false), {} of them answered by another instance than the one that accepted the order",
                outcome.duplicates(),
                drive.duplicates_elsewhere.load(std::sync::atomic::Ordering::Relaxed)
            ),
            &mismatches,
        );
    }

    /// The kills happened, nothing else died, nothing got stuck, and the
    /// services stopped cleanly.
    fn lifecycle(&mut self, args: &Args, outcome: &Outcome) {
        let tally = &outcome.tally;
        let per_instance: Vec<String> = tally
            .orchestrator_kill_log
            .iter()
            .map(|k| {
                format!(
                    "#{} {} ({} in flight, down {} ms{})",
                    k.number,
                    k.instance,
                    k.in_flight.len(),
                    k.down_ms,
                    if k.waited_for_takeover {
                        ", kept down for takeover"
                    } else {
                        ""
                    }
                )
            })
            .collect();
        self.check(
            tally.orchestrator_kills == args.orchestrator_kills,
            &format!(
                "orchestrators SIGKILLed and restarted {} time(s) across {} instance(s)",
                args.orchestrator_kills, args.orchestrators
            ),
            &format!(
                "done {}{}",
                tally.orchestrator_kills,
                if per_instance.is_empty() {
                    String::new()
                } else {
                    format!(": {}", per_instance.join("; "))
                }
            ),
        );
        self.check(
            tally.participant_restarts
                == [
                    args.participant_restarts,
                    args.participant_restarts,
                    if args.loyalty() {
                        args.participant_restarts
                    } else {
                        0
                    },
                ],
            &format!(
                "each participant SIGKILLed and restarted {} time(s)",
                args.participant_restarts
            ),
            &format!(
                "payment {}, inventory {}{}",
                tally.participant_restarts[0],
                tally.participant_restarts[1],
                if args.loyalty() {
                    format!(", loyalty {}", tally.participant_restarts[2])
                } else {
                    String::new()
                }
            ),
        );
        let mut lifecycle = tally.event_problems.clone();
        lifecycle.extend(tally.unexpected_exits.iter().cloned());
        self.problems("no service died other than by our SIGKILLs", &lifecycle);
        let stuck: Vec<String> = outcome.stuck.iter().map(stuck_line).collect();
        self.problems(
            &format!(
                "0 stuck: every saga terminal within {} s after faults stopped ({} stuck)",
                args.settle_secs,
                stuck.len()
            ),
            &stuck,
        );
        self.problems(
            "services stopped cleanly on SIGTERM",
            &outcome.stop_problems,
        );
    }

    /// What the run is meant to provoke actually happened (when its rate is
    /// not 0).
    fn happened(&mut self, args: &Args, outcome: &Outcome) {
        let (f, figures) = (&outcome.faults, &outcome.figures);
        let retrying = args.transient_rate > 0.0 || args.drop_reply_rate > 0.0;
        let expected = [
            (
                args.transient_rate > 0.0,
                f.transient_errors,
                "injected transient errors",
            ),
            (
                args.drop_reply_rate > 0.0,
                f.dropped_replies,
                "injected lost replies",
            ),
            (args.refusal_rate > 0.0, f.refusals, "injected refusals"),
            (args.latency_ms > 0, f.delayed_calls, "injected delays"),
            (retrying, figures.step_retries, "step retries"),
            // Real refusals happen whatever the fault rates (a quarter of
            // the customers and half of the products run short), so there
            // are always compensations to check.
            (true, figures.compensations, "compensations"),
        ];
        for (asserted, n, what) in expected {
            if asserted {
                self.check(n > 0, &format!("{what} actually happened"), &n.to_string());
            } else {
                println!("  ----  {what}: {n} (its rate is 0, not asserted)");
            }
        }
    }
}

fn suffix(detail: &str) -> String {
    if detail.is_empty() {
        String::new()
    } else {
        format!(" — {detail}")
    }
}

/// A saga that did not become terminal, with its steps, in one line.
fn stuck_line(s: &pb::Saga) -> String {
    let steps = s
        .steps
        .iter()
        .map(|st| {
            format!(
                "{}={:?} attempts {} comp {} {}",
                st.name,
                pb::StepStatus::try_from(st.status).unwrap_or(pb::StepStatus::Unspecified),
                st.attempts,
                st.compensation_attempts,
                st.last_error
            )
        })
        .collect::<Vec<_>>()
        .join("; ");
    format!(
        "{} ({}) {:?}: {steps}",
        s.saga_id,
        s.request_id,
        pb::SagaStatus::try_from(s.status).unwrap_or(pb::SagaStatus::Unspecified),
    )
}
