//! Everything counted in one phase of traffic: a latency histogram and the
//! outcome counts, merged over the phase's workers; judged by the mix each
//! order was meant to follow.

use crate::catalog::Class;
use hdrhistogram::Histogram;
use saga_proto::saga::v1 as saga;
use std::time::Duration;

/// Error messages kept per phase.
const SAMPLES: usize = 5;

/// Latency histogram: 1 µs to 10 minutes, 3 significant digits.
fn histogram() -> Histogram<u64> {
    Histogram::new_with_bounds(1, 600_000_000, 3).expect("valid histogram bounds")
}

/// Microseconds (the histogram's unit) as milliseconds.
fn ms(us: u64) -> f64 {
    us as f64 / 1000.0
}

/// Everything counted in one phase.
#[derive(Clone)]
pub struct Tally {
    /// Latency of successful calls (µs).
    pub hist: Histogram<u64>,
    /// Calls that ended as expected-shaped replies (terminal sagas / pairs).
    pub ok: u64,
    pub completed: u64,
    pub cancelled: u64,
    /// CANCELLED with the payment step REFUSED (nothing to undo).
    pub refused_charge: u64,
    /// CANCELLED with the payment step COMPENSATED (refunded).
    pub compensated: u64,
    pub expected_completed: u64,
    pub expected_cancelled: u64,
    /// Sagas that ended FAILED.
    pub failed: u64,
    /// Replies whose status was not terminal.
    pub stuck: u64,
    /// RPC errors (the outcome is unknown).
    pub errors: u64,
    /// Terminal, but not the outcome its class should have had.
    pub mismatches: u64,
    /// `created: false` for a fresh request id.
    pub duplicates: u64,
    pub samples: Vec<String>,
    pub wall: Duration,
}

impl Tally {
    /// Nothing counted yet.
    pub fn new() -> Tally {
        Tally {
            hist: histogram(),
            ok: 0,
            completed: 0,
            cancelled: 0,
            refused_charge: 0,
            compensated: 0,
            expected_completed: 0,
            expected_cancelled: 0,
            failed: 0,
            stuck: 0,
            errors: 0,
            mismatches: 0,
            duplicates: 0,
            samples: Vec::new(),
            wall: Duration::ZERO,
        }
    }

    /// Keeps an error message, up to a few per phase.
    pub fn note(&mut self, what: String) {
        if self.samples.len() < SAMPLES {
            self.samples.push(what);
        }
    }

    /// Adds another worker's counts.
    pub fn merge(&mut self, o: Tally) {
        let _ = self.hist.add(&o.hist);
        self.ok += o.ok;
        self.completed += o.completed;
        self.cancelled += o.cancelled;
        self.refused_charge += o.refused_charge;
        self.compensated += o.compensated;
        self.expected_completed += o.expected_completed;
        self.expected_cancelled += o.expected_cancelled;
        self.failed += o.failed;
        self.stuck += o.stuck;
        self.errors += o.errors;
        self.mismatches += o.mismatches;
        self.duplicates += o.duplicates;
        for s in o.samples {
            self.note(s);
        }
    }

    /// Everything that makes a run fail.
    pub fn problems(&self) -> u64 {
        self.failed + self.stuck + self.errors + self.mismatches + self.duplicates
    }

    /// Successful calls per second of wall time.
    pub fn rate(&self) -> f64 {
        self.per_second(self.ok)
    }

    /// COMPLETED sagas per second of wall time.
    pub fn completed_rate(&self) -> f64 {
        self.per_second(self.completed)
    }

    fn per_second(&self, n: u64) -> f64 {
        let secs = self.wall.as_secs_f64();
        if secs > 0.0 { n as f64 / secs } else { 0.0 }
    }

    /// Latency at quantile `q`, in ms (0 when nothing was recorded).
    pub fn quantile_ms(&self, q: f64) -> f64 {
        self.latency(|h| ms(h.value_at_quantile(q)))
    }

    /// Mean latency in ms (0 when nothing was recorded).
    pub fn mean_ms(&self) -> f64 {
        self.latency(|h| h.mean() / 1000.0)
    }

    /// Highest latency in ms (0 when nothing was recorded).
    pub fn max_ms(&self) -> f64 {
        self.latency(|h| ms(h.max()))
    }

    fn latency(&self, figure: impl Fn(&Histogram<u64>) -> f64) -> f64 {
        if self.hist.is_empty() {
            0.0
        } else {
            figure(&self.hist)
        }
    }

    /// Records one successful call's latency.
    pub fn record(&mut self, elapsed: Duration) {
        let us = u64::try_from(elapsed.as_micros())
            .unwrap_or(u64::MAX)
            .max(1);
        self.hist.saturating_record(us);
    }

    /// Counts one CreateOrder reply for order `id` of `class`.
    pub fn saga_reply(
        &mut self,
        id: &str,
        class: Class,
        r: &saga::CreateOrderResponse,
        elapsed: Duration,
    ) {
        if !r.created {
            self.duplicates += 1;
            self.note(format!("{id}: created=false for a fresh request id"));
        }
        let status = saga::SagaStatus::try_from(r.status).unwrap_or(saga::SagaStatus::Unspecified);
        let payment_step = r
            .saga
            .as_ref()
            .and_then(|s| s.steps.iter().find(|step| step.name == "payment"))
            .map(|step| saga::StepStatus::try_from(step.status).unwrap_or_default())
            .unwrap_or_default();
        match status {
            saga::SagaStatus::Completed | saga::SagaStatus::Cancelled => {
                self.ok += 1;
                self.record(elapsed);
                match class {
                    Class::Complete => self.expected_completed += 1,
                    _ => self.expected_cancelled += 1,
                }
                if status == saga::SagaStatus::Completed {
                    self.completed += 1;
                } else {
                    self.cancelled += 1;
                    match payment_step {
                        saga::StepStatus::Refused => self.refused_charge += 1,
                        saga::StepStatus::Compensated => self.compensated += 1,
                        _ => {}
                    }
                }
                let expected = match class {
                    Class::Complete => status == saga::SagaStatus::Completed,
                    Class::RefuseCharge => {
                        status == saga::SagaStatus::Cancelled
                            && payment_step == saga::StepStatus::Refused
                    }
                    Class::Compensate => {
                        status == saga::SagaStatus::Cancelled
                            && payment_step == saga::StepStatus::Compensated
                    }
                };
                if !expected {
                    self.mismatches += 1;
                    let reason = r.saga.as_ref().map(|s| s.reason.as_str()).unwrap_or("");
                    self.note(format!(
                        "{id}: expected {class:?}, got {} (payment step {}) {reason}",
                        status.as_str_name(),
                        payment_step.as_str_name()
                    ));
                }
            }
            saga::SagaStatus::Failed => {
                self.failed += 1;
                let reason = r.saga.as_ref().map(|s| s.reason.as_str()).unwrap_or("");
                self.note(format!("{id}: FAILED: {reason}"));
            }
            other => {
                self.stuck += 1;
                self.note(format!(
                    "{id}: reply after {:.1} s is {} (not terminal)",
                    elapsed.as_secs_f64(),
                    other.as_str_name()
                ));
            }
        }
    }
}
