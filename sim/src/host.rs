//! Hosts: what a crash stops and what a restart starts again.
//!
//! A host runs as a group of tasks — an orchestrator's sweeper, its saga
//! drivers, the handlers of the calls it serves — many of them spawned by
//! the product code itself, out of the simulation's reach. So a crash does
//! not abort tasks one by one: it marks the host's [`Incarnation`] dead,
//! and everything through which that incarnation touches the world — its
//! store handles, its network links, its clock's sleeps — stops it at its
//! next await point there, for good (the future stays pending until the
//! run ends). Nothing it does after the crash is ever seen: no write, no
//! message, no timer. That is a crash at whichever await point the task
//! had reached, which the seed decides. A restart is a new incarnation:
//! fresh in-memory state over the same stores, which kept exactly what was
//! committed.
//!
//! A stall (a process stopped, a long pause) holds the incarnation at the
//! same points for a while and then lets it go on as if nothing happened —
//! the way a lease runs out under an owner that is still alive.

use service_kit::clock::{Clock, Sleep};
use std::fmt;
use std::sync::atomic::{AtomicBool, AtomicI64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::time::Instant;

/// One life of a host, from its start to its crash.
#[derive(Clone, Debug)]
pub struct Incarnation {
    alive: Arc<AtomicBool>,
    stalled_until: Arc<Mutex<Option<Instant>>>,
}

impl Incarnation {
    /// A live incarnation.
    pub fn new() -> Incarnation {
        Incarnation {
            alive: Arc::new(AtomicBool::new(true)),
            stalled_until: Arc::new(Mutex::new(None)),
        }
    }

    /// Whether it has not crashed.
    pub fn is_alive(&self) -> bool {
        self.alive.load(Ordering::Acquire)
    }

    /// Crashes it: from its next await point on, it does nothing more.
    pub fn crash(&self) {
        self.alive.store(false, Ordering::Release);
    }

    /// Stalls it until `until`: it does nothing before, then goes on.
    pub fn stall(&self, until: Instant) {
        *self.stalled_until.lock().unwrap_or_else(|p| p.into_inner()) = Some(until);
    }

    /// Passes while it lives (once a stall is over); after its crash,
    /// never returns.
    pub async fn gate(&self) {
        loop {
            if !self.is_alive() {
                std::future::pending::<()>().await;
            }
            let until = *self.stalled_until.lock().unwrap_or_else(|p| p.into_inner());
            match until {
                Some(until) if until > Instant::now() => tokio::time::sleep_until(until).await,
                _ => return,
            }
        }
    }
}

impl Default for Incarnation {
    fn default() -> Self {
        Incarnation::new()
    }
}

/// A host's wall clock: the simulation's time plus the host's skew; its
/// sleeps are tokio's (paused, so they end as soon as the run is idle)
/// and end never once the incarnation crashed.
pub struct SimClock {
    /// Wall time (ms since the epoch) when the run began.
    base_ms: i64,
    start: Instant,
    /// How far this host's clock is ahead (negative: behind).
    skew_ms: Arc<AtomicI64>,
    incarnation: Incarnation,
}

impl fmt::Debug for SimClock {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SimClock")
            .field("now_ms", &self.now_ms())
            .finish()
    }
}

impl SimClock {
    /// A clock of `incarnation` reading the run's time plus `skew_ms`.
    pub fn new(
        base_ms: i64,
        start: Instant,
        skew_ms: Arc<AtomicI64>,
        incarnation: Incarnation,
    ) -> SimClock {
        SimClock {
            base_ms,
            start,
            skew_ms,
            incarnation,
        }
    }
}

impl Clock for SimClock {
    fn now_ms(&self) -> i64 {
        let elapsed = i64::try_from(self.start.elapsed().as_millis()).unwrap_or(i64::MAX);
        self.base_ms
            .saturating_add(elapsed)
            .saturating_add(self.skew_ms.load(Ordering::Acquire))
    }

    fn sleep(&self, duration: Duration) -> Sleep {
        let incarnation = self.incarnation.clone();
        Box::pin(async move {
            incarnation.gate().await;
            tokio::time::sleep(duration).await;
            incarnation.gate().await;
        })
    }
}
