//! The orchestrator's limits, written once for the three services: the
//! numbers that bound how long calls for one request id keep reaching a
//! participant ([`CallLimits`]), their defaults, the bounds and parsers of
//! the flags that set them, and the duration flags' spelling.
//!
//! Why the limits live here: a participant's barrier record may only go
//! once no call for its request id can still arrive, and *when* that is
//! depends on the orchestrator's limits (call timeout, attempt budgets,
//! step deadline, backoff, lease) and on how many steps a saga has.
//! Participants do not know the orchestrator's settings, so both sides
//! compute the bound with the same function over [`CallLimits`]: the
//! orchestrator from its actual settings and its saga definition (it logs
//! what the participants need), a participant from its own flags mirroring
//! them (same names and environment variables, so one environment
//! configures all three; `--saga-steps` is the participants' own, as the
//! orchestrator reads the count from its definition).
//!
//! Durations are written as people write them (`7d`, `36h`, `1h30m`,
//! `90s`, `250ms`) and parsed and printed by `humantime`.

use std::time::Duration;

/// Largest value a millisecond limit flag accepts (`--call-timeout-ms`,
/// `--lease-ttl-ms`, `--max-wait-ms`, …): 7 days. Nothing needs more, and
/// the spans derived from these limits (attempts × the longest attempt,
/// summed over the steps) must stay far inside the range of a `Duration`
/// and of an i64 of milliseconds, or they would overflow.
pub const MAX_LIMIT_MS: u64 = 7 * 86_400_000;
/// Largest attempt budget a flag accepts (`--action-attempts`,
/// `--compensation-attempts`), for the same reason.
pub const MAX_ATTEMPTS: u32 = 1_000_000;
/// Largest step count `--saga-steps` accepts, for the same reason.
pub const MAX_SAGA_STEPS: u32 = 1_000;

/// The parser of a millisecond limit flag: 0 to [`MAX_LIMIT_MS`].
pub fn limit_ms_parser() -> clap::builder::RangedU64ValueParser<u64> {
    clap::builder::RangedU64ValueParser::new().range(..=MAX_LIMIT_MS)
}

/// The parser of an attempt budget flag: 0 to [`MAX_ATTEMPTS`].
pub fn attempts_parser() -> clap::builder::RangedI64ValueParser<u32> {
    clap::builder::RangedI64ValueParser::new().range(..=i64::from(MAX_ATTEMPTS))
}

/// The parser of a step count flag: 1 to [`MAX_SAGA_STEPS`].
pub fn saga_steps_parser() -> clap::builder::RangedI64ValueParser<u32> {
    clap::builder::RangedI64ValueParser::new().range(1..=i64::from(MAX_SAGA_STEPS))
}

/// The orchestrator's default deadline of one participant call (ms).
pub const DEFAULT_CALL_TIMEOUT_MS: u64 = 5_000;
/// The orchestrator's default attempts of a forward step.
pub const DEFAULT_ACTION_ATTEMPTS: u32 = 5;
/// The orchestrator's default attempts of a compensation.
pub const DEFAULT_COMPENSATION_ATTEMPTS: u32 = 30;
/// The orchestrator's default step deadline (ms).
pub const DEFAULT_STEP_DEADLINE_MS: u64 = 60_000;
/// The orchestrator's default lease TTL (ms).
pub const DEFAULT_LEASE_TTL_MS: u64 = 15_000;
/// The orchestrator's longest backoff delay between attempts (ms); a
/// full-jitter sleep can reach twice this.
pub const DEFAULT_RETRY_MAX_DELAY_MS: u64 = 2_000;
/// How long the orchestrator waits for a connection to a participant
/// before a call's own deadline starts (not configurable).
pub const PARTICIPANT_CONNECT_TIMEOUT: Duration = Duration::from_secs(2);
/// Steps of the order saga the orchestrator runs (payment, then
/// inventory): the default of a participant's `--saga-steps`, since the
/// participants that ship here take part in that saga. Only the count
/// matters — a step's compensation waits for every later step — so the
/// runtime knows a number, not a saga; the orchestrator counts its
/// definition's steps itself, and its tests check this number against it.
pub const ORDER_SAGA_STEPS: u32 = 2;
/// Finished sagas are kept this long by default (7 days).
pub const DEFAULT_SAGA_RETENTION: Duration = Duration::from_secs(7 * 24 * 3600);
/// A participant's default history retention is at least this multiple of
/// the minimum.
pub const HISTORY_RETENTION_MULTIPLE: u32 = 24;

/// The orchestrator limits that bound how long calls for one request id
/// keep arriving at a participant.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CallLimits {
    /// Deadline of one participant call.
    pub call_timeout: Duration,
    /// Attempts of a forward step.
    pub action_attempts: u32,
    /// Attempts of a compensation.
    pub compensation_attempts: u32,
    /// A forward step is given up this long after it started.
    pub step_deadline: Duration,
    /// Silence before another instance takes a saga over.
    pub lease_ttl: Duration,
    /// Longest backoff delay (a full-jitter sleep reaches twice it).
    pub retry_max_delay: Duration,
    /// Steps of the longest saga (a step's compensation waits for every
    /// later step).
    pub steps: u32,
}

impl CallLimits {
    /// The orchestrator's default limits, for a saga of `steps` steps.
    pub fn orchestrator_defaults(steps: u32) -> Self {
        CallLimits {
            call_timeout: Duration::from_millis(DEFAULT_CALL_TIMEOUT_MS),
            action_attempts: DEFAULT_ACTION_ATTEMPTS,
            compensation_attempts: DEFAULT_COMPENSATION_ATTEMPTS,
            step_deadline: Duration::from_millis(DEFAULT_STEP_DEADLINE_MS),
            lease_ttl: Duration::from_millis(DEFAULT_LEASE_TTL_MS),
            retry_max_delay: Duration::from_millis(DEFAULT_RETRY_MAX_DELAY_MS),
            steps,
        }
    }

    /// One attempt and the sleep after it: the wait for a connection, the
    /// call's deadline and a full-jitter backoff (up to twice the largest
    /// delay).
    fn attempt(&self) -> Duration {
        PARTICIPANT_CONNECT_TIMEOUT + self.call_timeout + self.retry_max_delay * 2
    }

    /// Longest a step's forward calls go on: until its attempts or its
    /// deadline run out, whichever comes first, plus the last call's
    /// deadline (it was sent just before).
    pub fn forward_span(&self) -> Duration {
        let by_attempts = self.attempt() * self.action_attempts.max(1);
        by_attempts.min(self.step_deadline) + self.call_timeout
    }

    /// The least time the orchestrator keeps calling a step that fails
    /// transiently before it gives up and compensates: each attempt lasts
    /// at least its call deadline when the participant itself retries a
    /// write conflict until then (as the MongoDB participants do), and the
    /// step deadline cuts it short.
    pub fn least_forward_span(&self) -> Duration {
        (self.call_timeout * self.action_attempts.max(1)).min(self.step_deadline)
    }

    /// Checks a MongoDB `transactionLifetimeLimitSeconds` against these
    /// limits: a participant killed inside a transaction leaves its locks
    /// (and a write conflict for every retry of that request id) for
    /// `lifetime`, so a step's retries must outlast it, or such a kill
    /// cancels the order instead of delaying it.
    pub fn check_transaction_lifetime(&self, lifetime: Duration) -> Result<(), String> {
        let span = self.least_forward_span();
        if lifetime < span {
            return Ok(());
        }
        Err(format!(
            "the server's transactionLifetimeLimitSeconds ({}) is not shorter than the orchestrator's retries of one step ({}: {} attempts × call timeout {}, within the step deadline {}): a participant killed inside a transaction would cancel orders instead of delaying them; lower it (compose sets 10 s; the participants' transactions last milliseconds) or raise --action-attempts / --call-timeout-ms / --step-deadline-ms",
            format_duration(lifetime),
            format_duration(span),
            self.action_attempts.max(1),
            format_duration(self.call_timeout),
            format_duration(self.step_deadline)
        ))
    }

    /// Longest a compensation's calls go on: every attempt with its sleep.
    pub fn compensation_span(&self) -> Duration {
        self.attempt() * self.compensation_attempts.max(1)
    }

    /// Longest time between the first call a participant can receive for
    /// one request id and the last: every step's forward calls, then every
    /// compensation (a step is compensated only after the later steps'),
    /// and one lease takeover per step (an instance dies, another resumes
    /// after the lease and, its step deadline counted from then, may call
    /// for a second forward span). The flags' bounds keep it far from
    /// overflowing; a definition with more steps than any flag allows
    /// saturates instead of panicking.
    pub fn longest_request_span(&self) -> Duration {
        (self.forward_span() * 2 + self.compensation_span() + self.lease_ttl)
            .saturating_mul(self.steps.max(1))
    }

    /// The shortest safe operationHistory retention: twice the longest
    /// request span. The second span is the margin for what the bound
    /// leaves out: more than one takeover per step, a call delayed in the
    /// network beyond its deadline, a participant still working on a call
    /// its caller gave up on.
    pub fn minimum_history_retention(&self) -> Duration {
        self.longest_request_span().saturating_mul(2)
    }

    /// The default history retention: the saga retention (so the console
    /// can show a saga's participant records as long as the saga exists),
    /// and never less than [`HISTORY_RETENTION_MULTIPLE`] × the minimum.
    pub fn default_history_retention(&self) -> Duration {
        DEFAULT_SAGA_RETENTION.max(
            self.minimum_history_retention()
                .saturating_mul(HISTORY_RETENTION_MULTIPLE),
        )
    }

    /// The history retention to run with: `configured` (a
    /// `--history-retention` flag) if it is safe, else one line saying why
    /// not; the default when none is configured.
    pub fn history_retention(&self, configured: Option<Duration>) -> Result<Duration, String> {
        match configured {
            Some(retention) => self.check_history_retention(retention),
            None => Ok(self.default_history_retention()),
        }
    }

    /// `retention` if it is safe, else one line saying why not.
    pub fn check_history_retention(&self, retention: Duration) -> Result<Duration, String> {
        let minimum = self.minimum_history_retention();
        if retention < minimum {
            return Err(format!(
                "--history-retention {} is below the minimum {}: a late call for an expired request id would be applied again or, for a compensation, block nothing (the minimum is twice the longest time calls for one request id can keep arriving, from the orchestrator's limits: {})",
                format_duration(retention),
                format_duration(minimum),
                self
            ));
        }
        Ok(retention)
    }
}

impl std::fmt::Display for CallLimits {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "call timeout {}, {} action attempts, {} compensation attempts, step deadline {}, lease TTL {}, backoff up to 2×{}, {} steps",
            format_duration(self.call_timeout),
            self.action_attempts,
            self.compensation_attempts,
            format_duration(self.step_deadline),
            format_duration(self.lease_ttl),
            format_duration(self.retry_max_delay),
            self.steps
        )
    }
}

/// Parses a duration flag: a number with a unit (`ms`, `s`, `m`, `h`, `d`,
/// and the longer spellings `humantime` knows, such as `min` or `days`),
/// several joined with or without spaces (`1h30m`, `1h 30m`); a bare `0` is
/// zero. At most `u64::MAX` milliseconds, so every duration flag converts
/// to an i64 or u64 of milliseconds without overflow checks downstream.
pub fn parse_duration(text: &str) -> Result<Duration, String> {
    let text = text.trim();
    if text == "0" {
        return Ok(Duration::ZERO);
    }
    let bad = |why: String| {
        format!("{text:?}: expected a duration like 7d, 12h, 30m, 90s or 500ms ({why})")
    };
    let duration = humantime::parse_duration(text).map_err(|e| bad(e.to_string()))?;
    if duration.as_millis() > u128::from(u64::MAX) {
        return Err(bad("too long".into()));
    }
    Ok(duration)
}

/// Parses a retention: `off` (keep forever) or a positive duration.
pub fn parse_retention(text: &str) -> Result<Option<Duration>, String> {
    if text.trim().eq_ignore_ascii_case("off") {
        return Ok(None);
    }
    match parse_duration(text)? {
        Duration::ZERO => Err(format!("{text:?}: a retention must be positive (or off)")),
        d => Ok(Some(d)),
    }
}

/// A duration as people write it, in the form [`parse_duration`] reads
/// back: `7days`, `22m 20s 500ms`.
pub fn format_duration(d: Duration) -> String {
    humantime::format_duration(d).to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// With the defaults a step is retried for at least 25 s (5 × 5 s,
    /// within 60 s): compose's 10 s transaction lifetime passes, mongod's
    /// default 60 s does not, and the message names the fix.
    #[test]
    fn the_transaction_lifetime_must_be_shorter_than_a_steps_retries() {
        let limits = CallLimits::orchestrator_defaults(ORDER_SAGA_STEPS);
        assert_eq!(limits.least_forward_span(), Duration::from_secs(25));
        assert!(
            limits
                .check_transaction_lifetime(Duration::from_secs(10))
                .is_ok()
        );
        let refused = limits
            .check_transaction_lifetime(Duration::from_secs(60))
            .expect_err("60 s outlasts the retries");
        assert!(
            refused.contains("(1m)") && refused.contains("(25s:"),
            "{refused}"
        );
        assert!(refused.contains("--action-attempts"), "{refused}");
        let patient = CallLimits {
            action_attempts: 20,
            ..limits
        };
        assert_eq!(patient.least_forward_span(), Duration::from_secs(60));
        assert!(
            patient
                .check_transaction_lifetime(Duration::from_secs(60))
                .is_err(),
            "the step deadline bounds the retries"
        );
    }

    /// Every spelling the flags, the docs and the tests use parses; what
    /// is printed parses back to the same duration.
    #[test]
    fn durations_parse_and_print_as_people_write_them() {
        for (text, ms) in [
            ("7d", 7 * 86_400_000),
            ("36h", 36 * 3_600_000),
            ("12h", 12 * 3_600_000),
            ("30m", 30 * 60_000),
            ("10m", 10 * 60_000),
            ("1h30m", 90 * 60_000),
            ("1h 30m", 90 * 60_000),
            ("90s", 90_000),
            ("10s", 10_000),
            ("1s", 1_000),
            ("250ms", 250),
            ("1s500ms", 1_500),
            ("0", 0),
            (" 2d ", 2 * 86_400_000),
            ("1.5h", 90 * 60_000),
        ] {
            assert_eq!(
                parse_duration(text),
                Ok(Duration::from_millis(ms)),
                "{text}"
            );
        }
        for bad in ["", "7", "d", "1x", "-1s", "ms", "1h-30m"] {
            assert!(parse_duration(bad).is_err(), "{bad}");
        }
        let too_long = parse_duration("999999999999999999s").unwrap_err();
        assert!(too_long.contains("too long"), "{too_long}");
        assert_eq!(parse_retention("off"), Ok(None));
        assert_eq!(parse_retention("OFF"), Ok(None));
        assert_eq!(
            parse_retention("7d"),
            Ok(Some(Duration::from_secs(7 * 86_400)))
        );
        assert!(parse_retention("0").is_err());
        assert!(parse_retention("soon").is_err());
        assert_eq!(
            format_duration(Duration::from_millis(1_340_500)),
            "22m 20s 500ms"
        );
        assert_eq!(format_duration(DEFAULT_SAGA_RETENTION), "7days");
        assert_eq!(format_duration(Duration::ZERO), "0s");
        for ms in [1, 999, 1_000, 90_000, 1_340_500, 86_400_000 + 1, u64::MAX] {
            let d = Duration::from_millis(ms);
            assert_eq!(parse_duration(&format_duration(d)), Ok(d), "{ms} ms");
        }
    }

    /// The minimum with the orchestrator's defaults, worked out by hand:
    /// an attempt is 2 s (connect) + 5 s + 2×2 s = 11 s; forward
    /// min(5×11, 60) + 5 = 60 s; compensation 30×11 = 330 s; per step
    /// 2×60 (before and after a takeover) + 330 + 15 (lease) = 465 s; two
    /// steps 930 s; twice that 1,860 s.
    #[test]
    fn the_minimum_history_retention_follows_the_orchestrator_limits() {
        let limits = CallLimits::orchestrator_defaults(ORDER_SAGA_STEPS);
        assert_eq!(limits.forward_span(), Duration::from_secs(60));
        assert_eq!(limits.compensation_span(), Duration::from_secs(330));
        assert_eq!(limits.longest_request_span(), Duration::from_secs(930));
        assert_eq!(
            limits.minimum_history_retention(),
            Duration::from_secs(1_860)
        );
        assert_eq!(limits.default_history_retention(), DEFAULT_SAGA_RETENTION);
        // The step deadline caps many attempts.
        let patient = CallLimits {
            action_attempts: 100,
            ..limits
        };
        assert_eq!(patient.forward_span(), Duration::from_secs(65));
        // Longer limits raise the minimum, and the default with it.
        let slow = CallLimits {
            compensation_attempts: 3_000,
            ..limits
        };
        assert!(slow.default_history_retention() > DEFAULT_SAGA_RETENTION);
        assert!(
            limits
                .check_history_retention(Duration::from_secs(1_860))
                .is_ok()
        );
        let refused = limits
            .check_history_retention(Duration::from_secs(600))
            .unwrap_err();
        assert!(refused.contains("below the minimum 31m"), "{refused}");
        assert!(!refused.contains('\n'), "{refused}");
    }
}
