//! A host's storage as the simulation schedules it: each store operation
//! takes a little simulated time before and after it commits (so a crash
//! can land before the commit, or after it and before the answer), and may
//! fail the way a real store does — refused at once, or timed out after a
//! while with the write landed or not, which the caller cannot tell.

use crate::events::Events;
use crate::host::Incarnation;
use crate::rng::Rng;
use std::sync::{Arc, Mutex};

/// How often a store operation fails, per mille (none by default).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DiskFaults {
    /// Refused at once, nothing written.
    pub refuse_per_mille: u32,
    /// Answered only after a long wait, with an error, the write landed
    /// or not (even odds).
    pub timeout_per_mille: u32,
}

/// Why a store operation failed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DiskError {
    /// Refused; nothing was written.
    Refused,
    /// No answer in time; the write may have landed.
    TimedOut,
}

impl std::fmt::Display for DiskError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            DiskError::Refused => "simulated store refused the operation",
            DiskError::TimedOut => "simulated store timed out (the write may have landed)",
        })
    }
}

/// The storage of one host, shared by its incarnations.
#[derive(Clone, Debug)]
pub struct Disk {
    name: &'static str,
    rng: Rng,
    events: Events,
    faults: Arc<Mutex<DiskFaults>>,
    /// Whether operations take simulated time ([`Disk::instant`]: none).
    latency: bool,
}

impl Disk {
    /// The storage of host `name`.
    pub fn new(name: &'static str, rng: Rng, events: Events) -> Disk {
        Disk {
            name,
            rng,
            events,
            faults: Arc::new(Mutex::new(DiskFaults::default())),
            latency: true,
        }
    }

    /// Storage that answers at once and never fails: a store used outside
    /// a simulated run (its conformance tests).
    pub fn instant(name: &'static str) -> Disk {
        Disk {
            latency: false,
            ..Disk::new(name, Rng::new(0), Events::new())
        }
    }

    async fn pause(&self, lo: u64, hi: u64) {
        if self.latency {
            tokio::time::sleep(self.rng.millis(lo, hi)).await;
        }
    }

    /// From now on, fail as `faults` says.
    pub fn set_faults(&self, faults: DiskFaults) {
        *self.faults.lock().unwrap_or_else(|p| p.into_inner()) = faults;
    }

    fn faults(&self) -> DiskFaults {
        *self.faults.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Runs `commit` (which applies the operation atomically) for
    /// `incarnation` as the store would: after a short latency, unless the
    /// store fails it, and answers after another. An incarnation that
    /// crashes meanwhile never gets the answer.
    pub async fn io<T>(
        &self,
        incarnation: &Incarnation,
        op: &str,
        commit: impl FnOnce() -> T,
    ) -> Result<T, DiskError> {
        incarnation.gate().await;
        self.pause(0, 2).await;
        incarnation.gate().await;
        let faults = self.faults();
        if self.rng.chance(faults.refuse_per_mille) {
            self.events
                .log(format!("store {}: {op} refused", self.name));
            return Err(DiskError::Refused);
        }
        if self.rng.chance(faults.timeout_per_mille) {
            let landed = self.rng.chance(500);
            if landed {
                commit();
            }
            self.events.log(format!(
                "store {}: {op} timed out (landed: {landed})",
                self.name
            ));
            self.pause(500, 3_000).await;
            incarnation.gate().await;
            return Err(DiskError::TimedOut);
        }
        let result = commit();
        self.pause(0, 2).await;
        incarnation.gate().await;
        Ok(result)
    }
}
