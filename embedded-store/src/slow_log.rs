//! Which slow commits (or slow checkpoints) of a database are logged: those
//! of at least their threshold ([`SLOW_COMMIT`], [`SLOW_CHECKPOINT`]), at
//! most one a second, with how many were left out.
//!
//! Why: on a disk whose syncs are slow — a network volume, power-loss
//! durability on a busy machine — every group commit can cross the slow
//! threshold, dozens a second; one line a second with a count says the
//! same without flooding the log.

use std::sync::Mutex;
use std::time::{Duration, Instant};

/// A commit at least this slow is logged (WARN) with its database and
/// duration. Under load a group commit takes about a millisecond and the
/// writer's own checkpoint (see
/// [`crate::checkpointer::WRITER_CHECKPOINT_PAGES`]) 10–45 ms on the test
/// machine; longer means the disk or the file system stalled every write
/// of the database.
pub(crate) const SLOW_COMMIT: Duration = Duration::from_millis(50);

/// A checkpointer's checkpoint at least this slow is logged: one that
/// takes as long as the interval between two
/// ([`crate::checkpointer::CHECKPOINT_INTERVAL`]) no longer keeps up. A
/// checkpoint copies every page written since the last one and syncs
/// twice, so under load it takes 20–50 ms on the test machine (250 ms of
/// commits), and 50 ms would log a healthy one.
pub(crate) const SLOW_CHECKPOINT: Duration = crate::checkpointer::CHECKPOINT_INTERVAL;

/// How often a slow event is logged at most, per database and kind.
const EVERY: Duration = Duration::from_secs(1);

/// The rate limit of one kind of slow event of one database.
pub(crate) struct SlowLog {
    /// An event at least this long is slow.
    threshold: Duration,
    state: Mutex<State>,
}

#[derive(Default)]
struct State {
    /// When the last logged event was.
    last: Option<Instant>,
    /// Events not logged since then.
    left_out: u64,
}

impl SlowLog {
    /// Events at least `threshold` long are slow.
    pub(crate) fn new(threshold: Duration) -> Self {
        SlowLog {
            threshold,
            state: Mutex::default(),
        }
    }

    /// Whether an event that began at `began` and took `took` is logged:
    /// `Some(n)` when it was slow (at least the threshold), with the `n`
    /// slow events left out since the last one logged; `None` when it was
    /// not slow, or is left out (and counted).
    pub(crate) fn admit(&self, began: Instant, took: Duration) -> Option<u64> {
        if took < self.threshold {
            return None;
        }
        let now = began + took;
        let Ok(mut state) = self.state.lock() else {
            return Some(0); // A panic while counting: log rather than lose it.
        };
        if state
            .last
            .is_some_and(|last| now.saturating_duration_since(last) < EVERY)
        {
            state.left_out += 1;
            return None;
        }
        state.last = Some(now);
        Some(std::mem::take(&mut state.left_out))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SLOW: Duration = SLOW_COMMIT;

    #[test]
    fn one_line_a_second_with_the_count_left_out() {
        let log = SlowLog::new(SLOW);
        let t0 = Instant::now();
        // A slow event that ended `ms` after t0.
        let at = |ms| log.admit(t0 + Duration::from_millis(ms) - SLOW, SLOW);
        assert_eq!(at(100), Some(0));
        assert_eq!(at(200), None);
        assert_eq!(at(1_099), None);
        assert_eq!(at(1_100), Some(2));
        assert_eq!(at(1_200), None);
        assert_eq!(at(5_100), Some(1));
        assert_eq!(at(5_101), None);
    }

    #[test]
    fn events_faster_than_slow_are_neither_logged_nor_counted() {
        let log = SlowLog::new(SLOW);
        let t0 = Instant::now();
        let fast = SLOW - Duration::from_millis(1);
        assert_eq!(log.admit(t0, fast), None);
        assert_eq!(log.admit(t0, SLOW), Some(0));
        assert_eq!(log.admit(t0 + Duration::from_millis(10), fast), None);
        assert_eq!(log.admit(t0 + Duration::from_secs(2), SLOW), Some(0));
    }

    #[test]
    fn a_checkpoint_is_slow_only_past_its_own_threshold() {
        let log = SlowLog::new(SLOW_CHECKPOINT);
        let t0 = Instant::now();
        // A checkpoint as slow as a slow commit is a healthy one.
        assert_eq!(log.admit(t0, SLOW_COMMIT), None);
        assert_eq!(log.admit(t0, SLOW_CHECKPOINT), Some(0));
    }
}
