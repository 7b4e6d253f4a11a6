//! Retention, written once for the three services: how long finished work
//! is kept, the one function that says how long a participant must keep its
//! operationHistory, and the periodic purge loop of the embedded stores.
//!
//! Why the minimum lives here: a participant's barrier record may only go
//! once no call for its request id can still arrive, and *when* that is
//! depends on the orchestrator's limits (call timeout, attempt budgets,
//! step deadline, backoff, lease). Participants do not know the
//! orchestrator's settings, so both sides compute the bound with the same
//! function over [`CallLimits`]: the orchestrator from its actual settings
//! (it logs what the participants need), a participant from the
//! orchestrator's defaults or from its own flags mirroring them (same names
//! and environment variables, so one environment configures both).

use crate::shutdown::Shutdown;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Largest value a millisecond limit flag accepts (`--call-timeout-ms`,
/// `--lease-ttl-ms`, `--max-wait-ms`, …): 7 days. Nothing needs more, and
/// the spans derived from these limits (attempts × the longest attempt,
/// summed over the steps) must stay far inside the range of a `Duration`
/// and of an i64 of milliseconds, or they would overflow.
pub const MAX_LIMIT_MS: u64 = 7 * 86_400_000;
/// Largest attempt budget a flag accepts (`--action-attempts`,
/// `--compensation-attempts`), for the same reason.
pub const MAX_ATTEMPTS: u32 = 1_000_000;

/// The parser of a millisecond limit flag: 0 to [`MAX_LIMIT_MS`].
pub fn limit_ms_parser() -> clap::builder::RangedU64ValueParser<u64> {
    clap::builder::RangedU64ValueParser::new().range(..=MAX_LIMIT_MS)
}

/// The parser of an attempt budget flag: 0 to [`MAX_ATTEMPTS`].
pub fn attempts_parser() -> clap::builder::RangedI64ValueParser<u32> {
    clap::builder::RangedI64ValueParser::new().range(..=i64::from(MAX_ATTEMPTS))
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
/// Steps of the longest saga the orchestrator runs by default (its order
/// saga has two). Only the count matters here — a step's compensation waits
/// for every later step — so the runtime knows a number, not a saga.
pub const DEFAULT_SAGA_STEPS: u32 = 2;
/// Finished sagas are kept this long by default (7 days).
pub const DEFAULT_SAGA_RETENTION: Duration = Duration::from_secs(7 * 24 * 3600);
/// A participant's default history retention is at least this multiple of
/// the minimum.
pub const HISTORY_RETENTION_MULTIPLE: u32 = 24;
/// How often the embedded stores purge by default.
pub const DEFAULT_PURGE_INTERVAL: Duration = Duration::from_secs(10);
/// Most rows one purge batch deletes: one small job of the embedded
/// store's group commit, never a transaction that stalls the writer.
pub const PURGE_BATCH: usize = 500;

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
    /// Steps of the saga (a step's compensation waits for every later step).
    pub steps: u32,
}

impl Default for CallLimits {
    /// The orchestrator's defaults.
    fn default() -> Self {
        CallLimits {
            call_timeout: Duration::from_millis(DEFAULT_CALL_TIMEOUT_MS),
            action_attempts: DEFAULT_ACTION_ATTEMPTS,
            compensation_attempts: DEFAULT_COMPENSATION_ATTEMPTS,
            step_deadline: Duration::from_millis(DEFAULT_STEP_DEADLINE_MS),
            lease_ttl: Duration::from_millis(DEFAULT_LEASE_TTL_MS),
            retry_max_delay: Duration::from_millis(DEFAULT_RETRY_MAX_DELAY_MS),
            steps: DEFAULT_SAGA_STEPS,
        }
    }
}

impl CallLimits {
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
    /// for a second forward span).
    pub fn longest_request_span(&self) -> Duration {
        (self.forward_span() * 2 + self.compensation_span() + self.lease_ttl) * self.steps.max(1)
    }

    /// The shortest safe operationHistory retention: twice the longest
    /// request span. The second span is the margin for what the bound
    /// leaves out: more than one takeover per step, a call delayed in the
    /// network beyond its deadline, a participant still working on a call
    /// its caller gave up on.
    pub fn minimum_history_retention(&self) -> Duration {
        self.longest_request_span() * 2
    }

    /// The default history retention: the saga retention (so the console
    /// can show a saga's participant records as long as the saga exists),
    /// and never less than [`HISTORY_RETENTION_MULTIPLE`] × the minimum.
    pub fn default_history_retention(&self) -> Duration {
        DEFAULT_SAGA_RETENTION.max(self.minimum_history_retention() * HISTORY_RETENTION_MULTIPLE)
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

/// Parses a duration: a number with a unit (`ms`, `s`, `m`, `h`, `d`),
/// several joined (`1h30m`); a bare `0` is zero.
pub fn parse_duration(text: &str) -> Result<Duration, String> {
    let text = text.trim();
    if text == "0" {
        return Ok(Duration::ZERO);
    }
    let bad = || format!("{text:?}: expected a duration like 7d, 12h, 30m, 90s or 500ms");
    let mut total = Duration::ZERO;
    let mut rest = text;
    if rest.is_empty() {
        return Err(bad());
    }
    while !rest.is_empty() {
        let digits = rest.find(|c: char| !c.is_ascii_digit()).ok_or_else(bad)?;
        if digits == 0 {
            return Err(bad());
        }
        let number: u64 = rest[..digits].parse().map_err(|_| bad())?;
        rest = &rest[digits..];
        let unit_len = rest
            .find(|c: char| c.is_ascii_digit())
            .unwrap_or(rest.len());
        let millis = match &rest[..unit_len] {
            "ms" => 1,
            "s" => 1_000,
            "m" => 60_000,
            "h" => 3_600_000,
            "d" => 86_400_000,
            _ => return Err(bad()),
        };
        rest = &rest[unit_len..];
        let part = number.checked_mul(millis).ok_or_else(bad)?;
        total = total
            .checked_add(Duration::from_millis(part))
            .ok_or_else(bad)?;
    }
    Ok(total)
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

/// A duration as people write it: `7d`, `22m20s`, `1s500ms`.
pub fn format_duration(d: Duration) -> String {
    let mut ms = u64::try_from(d.as_millis()).unwrap_or(u64::MAX);
    if ms == 0 {
        return "0s".to_owned();
    }
    let mut out = String::new();
    for (unit, size) in [
        ("d", 86_400_000),
        ("h", 3_600_000),
        ("m", 60_000),
        ("s", 1_000),
        ("ms", 1),
    ] {
        if ms >= size {
            out.push_str(&format!("{}{unit}", ms / size));
            ms %= size;
        }
    }
    out
}

/// What one purge batch deleted.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PurgeBatch {
    /// How many of each kind (`sagas`, `records`, `lines`).
    pub deleted: Vec<(&'static str, u64)>,
    /// Whether a kind filled its batch: there may be more to delete now.
    pub more: bool,
}

impl PurgeBatch {
    /// Everything deleted.
    pub fn total(&self) -> u64 {
        self.deleted.iter().map(|(_, n)| n).sum()
    }
}

/// A store's own accounting, for the gauges.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct StoreStats {
    /// Bytes the store occupies by its own count (SQLite: page_count ×
    /// page_size; MongoDB: collStats size + index size).
    pub size_bytes: Option<u64>,
    /// When the oldest finished saga still stored finished (ms since the
    /// epoch); `None` for stores without sagas or without finished ones.
    pub oldest_finished_ms: Option<i64>,
}

/// A boxed future, so [`Purger`] is object-safe without an extra crate.
pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// What the purge loop needs from a store.
pub trait Purger: Send + Sync + 'static {
    /// Deletes one batch (at most [`PURGE_BATCH`] of each kind) of what
    /// expired before `now_ms`, counting it in the store's own metrics.
    /// Stores that expire by themselves (MongoDB TTL indexes) delete
    /// nothing here.
    fn purge_batch(&self, now_ms: i64) -> BoxFuture<'_, Result<PurgeBatch, String>>;

    /// After a round: gives back free space beyond what the next round will
    /// reuse (SQLite incremental vacuum); how many bytes were released.
    fn reclaim(&self) -> BoxFuture<'_, Result<u64, String>> {
        Box::pin(async { Ok(0) })
    }

    /// The store's size and oldest finished saga.
    fn stats(&self) -> BoxFuture<'_, Result<StoreStats, String>>;
}

/// Gives the retention metrics their `# HELP` text.
pub fn describe() {
    metrics::describe_gauge!(
        "store_size_bytes",
        "Size of the service's store by its own accounting: SQLite page_count × page_size (WAL excluded); MongoDB collStats size + totalIndexSize of the service's collections (SecantusDB reports logical BSON size)."
    );
    metrics::describe_gauge!(
        "saga_oldest_finished_age_seconds",
        "Age of the oldest COMPLETED or CANCELLED saga still stored (0 when there is none)."
    );
    metrics::describe_histogram!(
        "store_purge_batch_seconds",
        "Duration of one purge batch (embedded stores)."
    );
}

/// Runs purge rounds every `interval` until `shutdown`: batches until one
/// comes back without more to do (an INFO line per batch that deleted
/// something), then `reclaim`, then the gauges `store_size_bytes{service}`
/// and, where the store has sagas, `saga_oldest_finished_age_seconds`.
/// Errors are logged and the next round tries again.
pub async fn run_purge_loop(
    purger: Arc<dyn Purger>,
    service: &'static str,
    interval: Duration,
    shutdown: Shutdown,
) {
    loop {
        purge_round(purger.as_ref(), service, &shutdown).await;
        tokio::select! {
            _ = tokio::time::sleep(interval) => {}
            _ = shutdown.wait() => return,
        }
    }
}

/// One round of [`run_purge_loop`].
pub async fn purge_round(purger: &dyn Purger, service: &'static str, shutdown: &Shutdown) {
    while !shutdown.is_triggered() {
        let started = Instant::now();
        match purger.purge_batch(crate::time::now_ms()).await {
            Ok(batch) => {
                let took = started.elapsed();
                if batch.total() > 0 {
                    metrics::histogram!("store_purge_batch_seconds", "service" => service)
                        .record(took.as_secs_f64());
                    tracing::info!(
                        service,
                        deleted = ?batch.deleted,
                        took_ms = took.as_secs_f64() * 1e3,
                        "purge batch"
                    );
                }
                if !batch.more {
                    break;
                }
                // Let queued writes go first between batches.
                tokio::task::yield_now().await;
            }
            Err(error) => {
                tracing::warn!(service, %error, "purge failed; the next round retries");
                break;
            }
        }
    }
    match purger.reclaim().await {
        Ok(0) => {}
        Ok(bytes) => tracing::info!(service, bytes, "released free pages to the file system"),
        Err(error) => tracing::warn!(service, %error, "reclaiming free pages failed"),
    }
    match purger.stats().await {
        Ok(stats) => {
            if let Some(size) = stats.size_bytes {
                metrics::gauge!("store_size_bytes", "service" => service).set(size as f64);
            }
            if let Some(oldest) = stats.oldest_finished_ms {
                let age_ms = (crate::time::now_ms() - oldest).max(0);
                metrics::gauge!("saga_oldest_finished_age_seconds").set(age_ms as f64 / 1e3);
            }
        }
        Err(error) => tracing::warn!(service, %error, "reading the store size failed"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// With the defaults a step is retried for at least 25 s (5 × 5 s,
    /// within 60 s): compose's 10 s transaction lifetime passes, mongod's
    /// default 60 s does not, and the message names the fix.
    #[test]
    fn the_transaction_lifetime_must_be_shorter_than_a_steps_retries() {
        let limits = CallLimits::default();
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

    #[test]
    fn durations_parse_and_print_as_people_write_them() {
        for (text, ms) in [
            ("7d", 7 * 86_400_000),
            ("36h", 36 * 3_600_000),
            ("1h30m", 90 * 60_000),
            ("90s", 90_000),
            ("250ms", 250),
            ("0", 0),
        ] {
            assert_eq!(
                parse_duration(text),
                Ok(Duration::from_millis(ms)),
                "{text}"
            );
        }
        for bad in ["", "7", "d", "1x", "-1s", "1.5h"] {
            assert!(parse_duration(bad).is_err(), "{bad}");
        }
        assert_eq!(parse_retention("off"), Ok(None));
        assert!(parse_retention("0").is_err());
        assert_eq!(
            format_duration(Duration::from_millis(1_340_500)),
            "22m20s500ms"
        );
        assert_eq!(format_duration(DEFAULT_SAGA_RETENTION), "7d");
    }

    /// The minimum with the orchestrator's defaults, worked out by hand:
    /// an attempt is 2 s (connect) + 5 s + 2×2 s = 11 s; forward
    /// min(5×11, 60) + 5 = 60 s; compensation 30×11 = 330 s; per step
    /// 2×60 (before and after a takeover) + 330 + 15 (lease) = 465 s; two
    /// steps 930 s; twice that 1,860 s.
    #[test]
    fn the_minimum_history_retention_follows_the_orchestrator_limits() {
        let limits = CallLimits::default();
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
