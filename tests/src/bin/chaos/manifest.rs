//! `chaos-run.json`: what a run did that its stores cannot say by
//! themselves — the seed, the instances, where the stores are, what was
//! seeded, every accepted order and its saga, the contention races, the
//! orchestrator kills and the sagas each victim was driving, the scraped
//! counters. Written into the work dir before the audit, so that
//! `chaos --audit-only --work-dir DIR` can audit a kept run again (after a
//! person, or a test, changed its stores).

use crate::contention::{Plan, Race};
use crate::drive::{Initial, Orders};
use crate::scrape::OrchestratorCounters;
use crate::services::OrchestratorKill;
use crate::storage::Stores;
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};

/// The file's name inside the work dir.
pub const FILE: &str = "chaos-run.json";

/// The contention races of a run.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Contention {
    pub plan: Plan,
    /// Every order of the races that was accepted: request id and race.
    pub orders: Vec<(String, Race)>,
}

/// Everything the audit needs besides the stores.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Manifest {
    pub seed: u64,
    /// `embedded` or `mongo`.
    pub backend: String,
    /// The orchestrators' instance ids.
    pub instances: Vec<String>,
    pub stores: Stores,
    pub initial: Initial,
    /// Every accepted order (the drive's, then the contention phase's).
    pub orders: Orders,
    pub contention: Option<Contention>,
    /// Every orchestrator SIGKILL.
    pub kills: Vec<OrchestratorKill>,
    /// The orchestrators' counters, summed over instances and lives.
    pub counters: OrchestratorCounters,
    /// The saga's steps after payment and inventory, all served by
    /// loyalty-svc (none in a two-step saga).
    pub loyalty_steps: Vec<String>,
}

impl Manifest {
    fn path(work: &Path) -> PathBuf {
        work.join(FILE)
    }

    /// Writes it into `work`.
    pub fn write(&self, work: &Path) -> Result<(), String> {
        let json = serde_json::to_string_pretty(self).map_err(|e| format!("manifest: {e}"))?;
        std::fs::write(Self::path(work), json)
            .map_err(|e| format!("{}: {e}", Self::path(work).display()))
    }

    /// Reads the one in `work`.
    pub fn read(work: &Path) -> Result<Manifest, String> {
        let path = Self::path(work);
        let json = std::fs::read_to_string(&path).map_err(|e| {
            format!(
                "{}: {e} (is this the work dir of a chaos run?)",
                path.display()
            )
        })?;
        serde_json::from_str(&json).map_err(|e| format!("{}: {e}", path.display()))
    }
}
