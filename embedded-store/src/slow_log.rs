//! At most one WARN a second for a database's slow commits (or slow
//! checkpoints), with how many were left out.
//!
//! Why: on a disk whose syncs are slow — a network volume, power-loss
//! durability on a busy machine — every group commit can cross the slow
//! threshold, dozens a second; one line a second with a count says the
//! same without flooding the log.

use std::sync::Mutex;
use std::time::{Duration, Instant};

/// How often a slow event is logged at most, per database and kind.
const EVERY: Duration = Duration::from_secs(1);

/// The rate limit of one kind of slow event of one database.
#[derive(Default)]
pub(crate) struct SlowLog(Mutex<State>);

#[derive(Default)]
struct State {
    /// When the last logged event was.
    last: Option<Instant>,
    /// Events not logged since then.
    left_out: u64,
}

impl SlowLog {
    /// Whether a slow event at `now` is logged: `Some(n)` with the `n`
    /// events left out since the last one logged, or `None` (counted).
    pub(crate) fn admit(&self, now: Instant) -> Option<u64> {
        let Ok(mut state) = self.0.lock() else {
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

    #[test]
    fn one_line_a_second_with_the_count_left_out() {
        let log = SlowLog::default();
        let t0 = Instant::now();
        let at = |ms| t0 + Duration::from_millis(ms);
        assert_eq!(log.admit(at(0)), Some(0));
        assert_eq!(log.admit(at(100)), None);
        assert_eq!(log.admit(at(999)), None);
        assert_eq!(log.admit(at(1_000)), Some(2));
        assert_eq!(log.admit(at(1_100)), None);
        assert_eq!(log.admit(at(5_000)), Some(1));
        assert_eq!(log.admit(at(5_001)), None);
    }
}
