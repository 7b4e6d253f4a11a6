//! Time as a parameter: the wall clock sagas, leases and retention are
//! measured against, and the sleeps between retries and rounds.
//!
//! Code that waits, expires or schedules takes a [`Clock`] instead of
//! reading the system time itself, for two reasons. Tests move time forward
//! — "the lease is now expired", "the retention has passed" — instead of
//! sleeping for real and hoping the machine kept up: a [`ManualClock`]
//! stands still until moved (unit tests), a [`FastForwardClock`] runs like
//! the system clock and can jump ahead (end-to-end tests, where retries
//! must still happen in real time). And the same seam lets a simulator run
//! the real executor on simulated time. [`SystemClock`] is what every
//! service runs on.

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicI64, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};
use tokio::sync::watch;

/// A sleep that a [`Clock`] ends.
pub type Sleep = Pin<Box<dyn Future<Output = ()> + Send + 'static>>;

/// Where time comes from.
pub trait Clock: fmt::Debug + Send + Sync + 'static {
    /// Milliseconds since the Unix epoch (what stores keep: lease expiries,
    /// creation and finish times).
    fn now_ms(&self) -> i64;
    /// Ends once `duration` has passed on this clock.
    fn sleep(&self, duration: Duration) -> Sleep;
}

/// A clock shared by everything one service runs.
pub type SharedClock = Arc<dyn Clock>;

/// The machine's clock: system time, and tokio's timer for sleeps.
#[derive(Debug, Clone, Copy, Default)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now_ms(&self) -> i64 {
        system_now_ms()
    }

    fn sleep(&self, duration: Duration) -> Sleep {
        Box::pin(tokio::time::sleep(duration))
    }
}

/// The system clock, shared.
pub fn system() -> SharedClock {
    Arc::new(SystemClock)
}

/// Milliseconds since the Unix epoch by the system clock (0 if the clock is
/// before it).
pub fn system_now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
        .unwrap_or(0)
}

/// A clock that moves only when told to ([`ManualClock::advance`]), for
/// tests: a sleep ends when the clock has been moved past its end.
pub struct ManualClock {
    now_ms: AtomicI64,
    moved: watch::Sender<i64>,
}

impl fmt::Debug for ManualClock {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ManualClock")
            .field("now_ms", &self.now_ms.load(Ordering::Acquire))
            .finish()
    }
}

impl ManualClock {
    /// A clock standing at `now_ms`.
    pub fn at(now_ms: i64) -> Arc<Self> {
        Arc::new(ManualClock {
            now_ms: AtomicI64::new(now_ms),
            moved: watch::channel(now_ms).0,
        })
    }

    /// A clock standing at the system clock's present.
    pub fn now() -> Arc<Self> {
        Self::at(system_now_ms())
    }

    /// Moves the clock forward by `by`, ending the sleeps it passes.
    pub fn advance(&self, by: Duration) {
        let by = i64::try_from(by.as_millis()).unwrap_or(i64::MAX);
        let now = self
            .now_ms
            .fetch_add(by, Ordering::AcqRel)
            .saturating_add(by);
        self.moved.send_replace(now);
    }
}

impl Clock for ManualClock {
    fn now_ms(&self) -> i64 {
        self.now_ms.load(Ordering::Acquire)
    }

    fn sleep(&self, duration: Duration) -> Sleep {
        let until = self
            .now_ms()
            .saturating_add(i64::try_from(duration.as_millis()).unwrap_or(i64::MAX));
        let mut moved = self.moved.subscribe();
        Box::pin(async move {
            // The sender lives as long as the clock; a dropped clock never
            // moves again, so its sleeps never end.
            if moved.wait_for(|now| *now >= until).await.is_err() {
                std::future::pending::<()>().await;
            }
        })
    }
}

/// The system clock plus an offset a test moves forward at once
/// ([`FastForwardClock::fast_forward`]): everything else goes on in real
/// time, and a sleep ends at its end by either.
pub struct FastForwardClock {
    offset_ms: AtomicI64,
    jumped: watch::Sender<i64>,
}

impl fmt::Debug for FastForwardClock {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("FastForwardClock")
            .field("offset_ms", &self.offset_ms.load(Ordering::Acquire))
            .finish()
    }
}

impl FastForwardClock {
    /// A clock at the system clock's present.
    pub fn new() -> Arc<Self> {
        Arc::new(FastForwardClock {
            offset_ms: AtomicI64::new(0),
            jumped: watch::channel(0).0,
        })
    }

    /// Moves the clock `by` ahead of the system clock at once, ending the
    /// sleeps it passes.
    pub fn fast_forward(&self, by: Duration) {
        let by = i64::try_from(by.as_millis()).unwrap_or(i64::MAX);
        let offset = self
            .offset_ms
            .fetch_add(by, Ordering::AcqRel)
            .saturating_add(by);
        self.jumped.send_replace(offset);
    }
}

impl Clock for FastForwardClock {
    fn now_ms(&self) -> i64 {
        system_now_ms().saturating_add(self.offset_ms.load(Ordering::Acquire))
    }

    fn sleep(&self, duration: Duration) -> Sleep {
        let until = self
            .now_ms()
            .saturating_add(i64::try_from(duration.as_millis()).unwrap_or(i64::MAX));
        let mut jumped = self.jumped.subscribe();
        Box::pin(async move {
            loop {
                let now = system_now_ms().saturating_add(*jumped.borrow_and_update());
                let Ok(left) = u64::try_from(until.saturating_sub(now)) else {
                    return;
                };
                if left == 0 {
                    return;
                }
                tokio::select! {
                    _ = tokio::time::sleep(Duration::from_millis(left)) => {}
                    changed = jumped.changed() => {
                        if changed.is_err() {
                            tokio::time::sleep(Duration::from_millis(left)).await;
                        }
                    }
                }
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_manual_sleep_ends_when_the_clock_passes_its_end() {
        let clock = ManualClock::at(1_000);
        let mut sleep = clock.sleep(Duration::from_millis(500));
        let not_yet = tokio::time::timeout(Duration::from_millis(20), &mut sleep).await;
        assert!(not_yet.is_err(), "ended before the clock moved");
        clock.advance(Duration::from_millis(499));
        let not_yet = tokio::time::timeout(Duration::from_millis(20), &mut sleep).await;
        assert!(not_yet.is_err(), "ended 1 ms early");
        clock.advance(Duration::from_millis(1));
        tokio::time::timeout(Duration::from_secs(5), sleep)
            .await
            .expect("ends once the clock reached its end");
        assert_eq!(clock.now_ms(), 1_500);
    }

    #[tokio::test]
    async fn a_fast_forward_ends_the_sleeps_it_passes_and_time_still_runs() {
        let clock = FastForwardClock::new();
        let before = clock.now_ms();
        let long = clock.sleep(Duration::from_secs(3_600));
        let short = clock.sleep(Duration::from_millis(30));
        tokio::time::timeout(Duration::from_secs(5), short)
            .await
            .expect("a short sleep ends in real time");
        clock.fast_forward(Duration::from_secs(3_600));
        tokio::time::timeout(Duration::from_secs(5), long)
            .await
            .expect("an hour's sleep ends when the clock jumps an hour");
        assert!(clock.now_ms() - before >= 3_600_000);
    }

    #[tokio::test]
    async fn a_zero_sleep_ends_at_once() {
        let clock = ManualClock::at(0);
        tokio::time::timeout(Duration::from_secs(5), clock.sleep(Duration::ZERO))
            .await
            .expect("a zero sleep ends without the clock moving");
    }
}
