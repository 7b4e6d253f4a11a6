//! The run's event log and the invariant violations found along the way.
//!
//! Every event a run produces — a message sent, delivered or lost, a host
//! crashed or restarted, a saga created, a store fault — is one line
//! stamped with the simulated time. The log is the run's fingerprint: the
//! determinism test compares two runs of one seed line for line, and a
//! violation is reported with the lines that led to it.

use std::sync::{Arc, Mutex};
use tokio::time::Instant;

/// What a run logged, shared by clones.
#[derive(Clone, Debug)]
pub struct Events {
    start: Instant,
    lines: Arc<Mutex<Vec<String>>>,
    violations: Arc<Mutex<Vec<Violation>>>,
}

/// An invariant that did not hold.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Violation {
    /// The invariant, as the report names it.
    pub invariant: &'static str,
    /// What broke it.
    pub detail: String,
    /// How many log lines there were when it was found.
    pub at_line: usize,
}

impl Events {
    /// An empty log whose times count from now (simulated).
    pub fn new() -> Events {
        Events {
            start: Instant::now(),
            lines: Arc::new(Mutex::new(Vec::new())),
            violations: Arc::new(Mutex::new(Vec::new())),
        }
    }

    /// Milliseconds of simulated time since the run began.
    pub fn elapsed_ms(&self) -> u128 {
        self.start.elapsed().as_millis()
    }

    /// Logs one event.
    pub fn log(&self, event: impl AsRef<str>) {
        let line = format!("{:>9} {}", self.elapsed_ms(), event.as_ref());
        self.lines
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(line);
    }

    /// Records a violation of `invariant` (and logs it).
    pub fn violated(&self, invariant: &'static str, detail: impl Into<String>) {
        let detail = detail.into();
        self.log(format!("VIOLATION {invariant}: {detail}"));
        let at_line = self.len();
        self.violations
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(Violation {
                invariant,
                detail,
                at_line,
            });
    }

    /// Lines logged so far.
    pub fn len(&self) -> usize {
        self.lines.lock().unwrap_or_else(|p| p.into_inner()).len()
    }

    /// Whether nothing was logged.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Every line, oldest first.
    pub fn lines(&self) -> Vec<String> {
        self.lines.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// Every violation, in the order found.
    pub fn violations(&self) -> Vec<Violation> {
        self.violations
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }
}

impl Default for Events {
    fn default() -> Self {
        Events::new()
    }
}
