//! The one source of randomness of a run: a splitmix64 generator seeded
//! with the run's seed, shared by everything that draws (the network's
//! delays and losses, the fault schedule, the workload, the stores'
//! latencies). On one thread, with tasks polled in a deterministic order,
//! the draws come in the same order every time, so a seed replays exactly.

use std::sync::{Arc, Mutex};
use std::time::Duration;

/// A seeded generator, shared by clones.
#[derive(Clone, Debug)]
pub struct Rng(Arc<Mutex<u64>>);

impl Rng {
    /// A generator starting from `seed`.
    pub fn new(seed: u64) -> Rng {
        Rng(Arc::new(Mutex::new(seed)))
    }

    /// The next 64 random bits.
    pub fn u64(&self) -> u64 {
        let mut state = self.0.lock().unwrap_or_else(|p| p.into_inner());
        *state = state.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = *state;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// A number in `lo..=hi` (`lo` when `hi < lo`).
    pub fn range(&self, lo: u64, hi: u64) -> u64 {
        if hi <= lo {
            return lo;
        }
        lo + self.u64() % (hi - lo + 1)
    }

    /// An index below `n` (0 when `n` is 0).
    pub fn below(&self, n: usize) -> usize {
        if n == 0 {
            return 0;
        }
        (self.u64() % n as u64) as usize
    }

    /// True with probability `per_mille` / 1000.
    pub fn chance(&self, per_mille: u32) -> bool {
        self.u64() % 1000 < u64::from(per_mille)
    }

    /// A duration in `lo..=hi` milliseconds.
    pub fn millis(&self, lo: u64, hi: u64) -> Duration {
        Duration::from_millis(self.range(lo, hi))
    }

    /// A generator of its own, seeded from this one (for a part of the run
    /// whose draws must not shift when another part draws more).
    pub fn fork(&self) -> Rng {
        Rng::new(self.u64())
    }
}
