//! How long a participant keeps its operationHistory, and the purge.
//!
//! A record (an action's, a compensation's, a blocked action's, inventory's
//! order lines) protects against a call for its request id that is still
//! to come: a retried or late action must replay rather than apply again,
//! a compensation must find the action it undoes, an action arriving after
//! its compensation must find the block. So a record may go only once no
//! call for its request id can arrive any more. That moment follows from
//! the orchestrator's limits and on how many steps the saga has;
//! [`CallLimits`] computes it (the same function the orchestrator uses)
//! from this participant's flags mirroring the orchestrator's (same names
//! and environment variables: `CALL_TIMEOUT_MS`, `ACTION_ATTEMPTS`,
//! `COMPENSATION_ATTEMPTS`, `STEP_DEADLINE_MS`, `LEASE_TTL_MS`,
//! `RETRY_MAX_DELAY_MS`; their defaults are the orchestrator's) and from
//! `--saga-steps` / `SAGA_STEPS`, the steps of the longest saga this
//! participant takes part in (default: the order saga's). The orchestrator
//! counts its definition's steps itself and logs the limits it runs with.
//! `--history-retention` defaults to a comfortable multiple of the minimum,
//! and a value below it stops start-up with one line saying why.
//!
//! Who deletes: on the embedded store the purge loop every
//! `--purge-interval`, in batches ([`HistoryExpiry::purge_recorded_before`]);
//! on MongoDB the server, through TTL indexes on each record's `expire_at`
//! date (its recording time plus the retention).

use crate::outcome::ParticipantError;
use async_trait::async_trait;
use service_kit::limits::{self, CallLimits};
use service_kit::purge::{self, BoxFuture, PURGE_BATCH, PurgeBatch, Purger, StoreStats};
use std::sync::Arc;
use std::time::Duration;

/// How long records are kept and how often the embedded store is purged.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HistoryRetention {
    /// Records are deleted this long after they were recorded.
    pub keep: Duration,
    /// How often the purge runs (and the store gauge is refreshed).
    pub purge_interval: Duration,
}

impl Default for HistoryRetention {
    /// The default retention for the orchestrator's default limits and the
    /// order saga's steps (the flags' defaults).
    fn default() -> Self {
        HistoryRetention {
            keep: CallLimits::orchestrator_defaults(limits::ORDER_SAGA_STEPS)
                .default_history_retention(),
            purge_interval: purge::DEFAULT_PURGE_INTERVAL,
        }
    }
}

/// What a participant's store does for retention; every participant store
/// trait extends it.
#[async_trait]
pub trait HistoryExpiry: Send + Sync + 'static {
    /// Deletes up to `limit` rows of each kind (records, order lines)
    /// recorded before `cutoff_ms`, in one small write. MongoDB stores
    /// delete nothing here: their TTL indexes do.
    async fn purge_recorded_before(
        &self,
        cutoff_ms: i64,
        limit: usize,
    ) -> Result<PurgeBatch, ParticipantError>;

    /// Gives free space beyond a reserve back to the file system (embedded
    /// store); bytes released.
    async fn reclaim(&self) -> Result<u64, ParticipantError> {
        Ok(0)
    }

    /// The store's size by its own accounting.
    async fn size_bytes(&self) -> Result<u64, ParticipantError>;
}

/// The participant's [`Purger`]: deletes records older than the retention
/// and counts them (`participant_records_expired_total{table}`).
pub struct HistoryPurger {
    store: Arc<dyn HistoryExpiry>,
    keep: Duration,
}

impl HistoryPurger {
    /// Purges `store` of records older than `keep`.
    pub fn new(store: Arc<dyn HistoryExpiry>, keep: Duration) -> Self {
        HistoryPurger { store, keep }
    }
}

impl Purger for HistoryPurger {
    fn purge_batch(&self, now_ms: i64) -> BoxFuture<'_, Result<PurgeBatch, String>> {
        Box::pin(async move {
            let keep = i64::try_from(self.keep.as_millis()).unwrap_or(i64::MAX);
            let batch = self
                .store
                .purge_recorded_before(now_ms.saturating_sub(keep), PURGE_BATCH)
                .await
                .map_err(|e| e.to_string())?;
            for (table, n) in &batch.deleted {
                metrics::counter!("participant_records_expired_total", "table" => *table)
                    .increment(*n);
            }
            Ok(batch)
        })
    }

    fn reclaim(&self) -> BoxFuture<'_, Result<u64, String>> {
        Box::pin(async { self.store.reclaim().await.map_err(|e| e.to_string()) })
    }

    fn stats(&self) -> BoxFuture<'_, Result<StoreStats, String>> {
        Box::pin(async {
            let size = self.store.size_bytes().await.map_err(|e| e.to_string())?;
            Ok(StoreStats {
                size_bytes: Some(size),
                oldest_finished_ms: None,
            })
        })
    }
}

/// A participant's retention flags: `--history-retention`,
/// `--purge-interval`, the orchestrator limits the minimum is computed
/// from (defaults: the orchestrator's; set them where the orchestrator's
/// are set — the environment variables are the same) and `--saga-steps`.
#[derive(Debug, Clone, clap::Args)]
pub struct HistoryRetentionConfig {
    /// How long operationHistory records (and inventory's order lines) are
    /// kept (`7d`, `36h`, `90s`). Default: the saga retention (7 days), and
    /// never less than 24 × the minimum. Refused below the minimum: twice
    /// the longest time calls for one request id can keep arriving under
    /// the limits below.
    #[arg(long, env = "HISTORY_RETENTION", value_parser = limits::parse_duration)]
    pub history_retention: Option<Duration>,
    /// How often the embedded store is purged of expired records.
    #[arg(long, env = "PURGE_INTERVAL", default_value = "10s", value_parser = limits::parse_duration)]
    pub purge_interval: Duration,
    /// The orchestrator's `--call-timeout-ms` (for the minimum retention).
    #[arg(long, env = "CALL_TIMEOUT_MS", default_value_t = limits::DEFAULT_CALL_TIMEOUT_MS, value_parser = limits::limit_ms_parser())]
    pub call_timeout_ms: u64,
    /// The orchestrator's `--action-attempts`.
    #[arg(long, env = "ACTION_ATTEMPTS", default_value_t = limits::DEFAULT_ACTION_ATTEMPTS, value_parser = limits::attempts_parser())]
    pub action_attempts: u32,
    /// The orchestrator's `--compensation-attempts`.
    #[arg(long, env = "COMPENSATION_ATTEMPTS", default_value_t = limits::DEFAULT_COMPENSATION_ATTEMPTS, value_parser = limits::attempts_parser())]
    pub compensation_attempts: u32,
    /// The orchestrator's `--step-deadline-ms`.
    #[arg(long, env = "STEP_DEADLINE_MS", default_value_t = limits::DEFAULT_STEP_DEADLINE_MS, value_parser = limits::limit_ms_parser())]
    pub step_deadline_ms: u64,
    /// The orchestrator's `--lease-ttl-ms`.
    #[arg(long, env = "LEASE_TTL_MS", default_value_t = limits::DEFAULT_LEASE_TTL_MS, value_parser = limits::limit_ms_parser())]
    pub lease_ttl_ms: u64,
    /// The orchestrator's `--retry-max-delay-ms`.
    #[arg(long, env = "RETRY_MAX_DELAY_MS", default_value_t = limits::DEFAULT_RETRY_MAX_DELAY_MS, value_parser = limits::limit_ms_parser())]
    pub retry_max_delay_ms: u64,
    /// Set it to the number of steps of the longest saga this participant
    /// takes part in: a step's compensation waits for every later step, so
    /// the minimum retention grows with the count. Default: the steps of
    /// the order saga the orchestrator runs (the orchestrator logs the
    /// count it runs with, among its limits).
    #[arg(long, env = "SAGA_STEPS", default_value_t = limits::ORDER_SAGA_STEPS, value_parser = limits::saga_steps_parser())]
    pub saga_steps: u32,
}

impl HistoryRetentionConfig {
    /// The orchestrator limits these flags mirror, for sagas of
    /// `--saga-steps` steps.
    pub fn limits(&self) -> CallLimits {
        CallLimits {
            call_timeout: Duration::from_millis(self.call_timeout_ms),
            action_attempts: self.action_attempts.max(1),
            compensation_attempts: self.compensation_attempts.max(1),
            step_deadline: Duration::from_millis(self.step_deadline_ms),
            lease_ttl: Duration::from_millis(self.lease_ttl_ms),
            retry_max_delay: Duration::from_millis(self.retry_max_delay_ms),
            steps: self.saga_steps.max(1),
        }
    }

    /// The retention, or one line saying why it is unsafe.
    pub fn settings(&self) -> Result<HistoryRetention, String> {
        let limits = self.limits();
        let keep = limits.history_retention(self.history_retention)?;
        Ok(HistoryRetention {
            keep,
            purge_interval: self.purge_interval.max(Duration::from_millis(10)),
        })
    }
}

/// Gives the participant retention metrics their `# HELP` text.
pub fn describe() {
    purge::describe();
    metrics::describe_counter!(
        "participant_records_expired_total",
        "operationHistory records (table operation_history) and order lines (deduct_lines) deleted after the history retention (embedded store; MongoDB's TTL deletions are in its serverStatus metrics.ttl)."
    );
}
