//! Retention of finished sagas: the orchestrator's purge, and the archive
//! written before it deletes.
//!
//! COMPLETED and CANCELLED sagas are deleted `--saga-retention` after they
//! finished (default 7 days); FAILED and unfinished sagas never are. The
//! idempotency window of CreateOrder is therefore the retention: a request
//! id reused after its saga was deleted starts a new saga.
//!
//! Who deletes: on the embedded store, [`SagaPurger`] every
//! `--purge-interval`, in batches of [`PURGE_BATCH`] (one small job of the
//! writer's group commit each); on MongoDB the server, through the TTL
//! index on `expire_at`. With `--archive-dir`, [`SagaPurger`] first appends
//! each expired saga as one JSON line to that day's file and syncs it, then
//! deletes it — on both backends (on MongoDB the TTL index then waits
//! [`ARCHIVE_GRACE`](crate::store::ARCHIVE_GRACE) longer and is only the
//! backstop).

use crate::saga::Saga;
use crate::store::SagaStore;
use service_kit::purge::{BoxFuture, PURGE_BATCH, PurgeBatch, Purger, StoreStats};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

/// How the orchestrator keeps finished sagas.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RetentionSettings {
    /// COMPLETED/CANCELLED sagas are deleted this long after they finished;
    /// `None` keeps them.
    pub saga_retention: Option<Duration>,
    /// Where expired sagas are archived before they are deleted.
    pub archive_dir: Option<PathBuf>,
    /// How often the purge runs (and the store gauges are refreshed).
    pub purge_interval: Duration,
    /// How long after its creation a FAILED saga may be retried: the
    /// participants' history retention less the time a retry's calls may
    /// take ([`retry_window`]). Past it their records of the saga's steps
    /// may be gone, and a refund or restock could no longer tell "done"
    /// from "never done", so RetrySaga refuses. `None`: no limit.
    pub retry_window: Option<Duration>,
    /// How long after its creation a saga's calls may still be sent: the
    /// participants' history retention less the longest span one request
    /// id's calls take ([`send_window`]). A saga still unfinished then — its
    /// orchestrators or its store were down that long — is not driven
    /// further but marked FAILED for a person, since a repeated charge
    /// could find its record gone and apply twice. `None`: no limit.
    pub send_window: Option<Duration>,
}

impl Default for RetentionSettings {
    /// The default retention, and the windows the orchestrator's default
    /// limits and the participants' default history retention give for the
    /// order saga (`serve` and `dev` set the windows of their own limits
    /// and definition).
    fn default() -> Self {
        use service_kit::limits::{CallLimits, ORDER_SAGA_STEPS};
        let limits = CallLimits::orchestrator_defaults(ORDER_SAGA_STEPS);
        RetentionSettings {
            saga_retention: Some(service_kit::limits::DEFAULT_SAGA_RETENTION),
            archive_dir: None,
            purge_interval: service_kit::purge::DEFAULT_PURGE_INTERVAL,
            retry_window: Some(retry_window(&limits, limits.default_history_retention())),
            send_window: Some(send_window(&limits, limits.default_history_retention())),
        }
    }
}

/// How long after its creation a FAILED saga can still be retried safely,
/// given the orchestrator's `limits` and the participants' `history`
/// retention: a saga's first participant record is written no earlier than
/// the saga, and lives `history`; a retry re-sends calls for up to the
/// longest span one request id's calls may take (the minimum history
/// retention), all of which must reach a participant that still holds the
/// records.
pub fn retry_window(limits: &service_kit::limits::CallLimits, history: Duration) -> Duration {
    history.saturating_sub(limits.minimum_history_retention())
}

/// How long after its creation a saga's calls may still be sent, given the
/// orchestrator's `limits` and the participants' `history` retention: a
/// participant records a request id no earlier than the saga's creation and
/// keeps the record `history`; a call sent before the window ends reaches
/// it within the longest request span, while the record still exists. A
/// saga driven as usual ends long before (within one span: the window is at
/// least one span, as the history retention is at least two); only an
/// outage of every orchestrator, or of the store, that long reaches it.
/// One span longer than [`retry_window`], which leaves a whole span for the
/// calls a retry starts.
pub fn send_window(limits: &service_kit::limits::CallLimits, history: Duration) -> Duration {
    history.saturating_sub(limits.longest_request_span())
}

impl RetentionSettings {
    /// Sets the retry and send windows the participants' `history`
    /// retention gives under the orchestrator's `limits`.
    pub fn set_windows(&mut self, limits: &service_kit::limits::CallLimits, history: Duration) {
        self.retry_window = Some(retry_window(limits, history));
        self.send_window = Some(send_window(limits, history));
    }

    /// What the store must know: how long to keep, whether archiving.
    pub fn store(&self) -> crate::store::SagaRetention {
        crate::store::SagaRetention {
            keep: self.saga_retention,
            archive: self.archive_dir.is_some(),
        }
    }
}

/// Appends expired sagas to daily JSON-lines files:
/// `<dir>/sagas-YYYY-MM-DD.jsonl` (UTC day of the archiving), one saga
/// per line as the store keeps it, plus `archived_at_ms`.
#[derive(Debug, Clone)]
pub struct Archive {
    dir: PathBuf,
}

impl Archive {
    /// Archives into `dir` (created if missing).
    pub fn new(dir: &Path) -> Archive {
        Archive {
            dir: dir.to_path_buf(),
        }
    }

    /// The file sagas archived at `now_ms` go to.
    pub fn file_for(&self, now_ms: i64) -> PathBuf {
        self.dir.join(format!("sagas-{}.jsonl", utc_date(now_ms)))
    }

    /// Appends `sagas` to today's file and syncs it: when this returns,
    /// they may be deleted.
    pub fn append(&self, sagas: &[Saga], now_ms: i64) -> std::io::Result<()> {
        std::fs::create_dir_all(&self.dir)?;
        let mut lines = Vec::new();
        for saga in sagas {
            let mut value = serde_json::to_value(saga)?;
            if let Some(object) = value.as_object_mut() {
                object.insert("archived_at_ms".into(), now_ms.into());
            }
            serde_json::to_writer(&mut lines, &value)?;
            lines.push(b'\n');
        }
        let mut file = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.file_for(now_ms))?;
        file.write_all(&lines)?;
        file.sync_data()
    }
}

/// `YYYY-MM-DD` of a time in ms since the epoch (UTC), by the civil-from-
/// days algorithm (H. Hinnant), to need no date crate.
fn utc_date(ms: i64) -> String {
    let days = ms.div_euclid(86_400_000);
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1_460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!("{year:04}-{month:02}-{day:02}")
}

/// The orchestrator's [`Purger`]: deletes expired sagas (archiving them
/// first when an archive is configured) and reports the store's gauges.
pub struct SagaPurger {
    store: Arc<dyn SagaStore>,
    archive: Option<Archive>,
}

impl SagaPurger {
    /// Purges `store`, archiving into `archive` first when given.
    pub fn new(store: Arc<dyn SagaStore>, archive: Option<Archive>) -> Self {
        SagaPurger { store, archive }
    }

    async fn batch(&self, now_ms: i64) -> Result<PurgeBatch, String> {
        let deleted = match &self.archive {
            None => self
                .store
                .purge_expired(now_ms, PURGE_BATCH)
                .await
                .map_err(|e| e.to_string())?,
            Some(archive) => {
                let sagas = self
                    .store
                    .expired(now_ms, PURGE_BATCH)
                    .await
                    .map_err(|e| e.to_string())?;
                if sagas.is_empty() {
                    return Ok(PurgeBatch::default());
                }
                let archive_at = archive.clone();
                let batch = sagas.clone();
                tokio::task::spawn_blocking(move || archive_at.append(&batch, now_ms))
                    .await
                    .map_err(|e| e.to_string())?
                    .map_err(|e| format!("archiving to {}: {e}", archive.dir.display()))?;
                metrics::counter!("saga_archived_total").increment(sagas.len() as u64);
                self.store
                    .delete_finished(&sagas)
                    .await
                    .map_err(|e| e.to_string())?
            }
        };
        metrics::counter!("saga_expired_total").increment(deleted);
        Ok(PurgeBatch {
            deleted: vec![("sagas", deleted)],
            more: deleted >= PURGE_BATCH as u64,
        })
    }
}

impl Purger for SagaPurger {
    fn purge_batch(&self, now_ms: i64) -> BoxFuture<'_, Result<PurgeBatch, String>> {
        Box::pin(self.batch(now_ms))
    }

    fn reclaim(&self) -> BoxFuture<'_, Result<u64, String>> {
        Box::pin(async { self.store.reclaim().await.map_err(|e| e.to_string()) })
    }

    fn stats(&self) -> BoxFuture<'_, Result<StoreStats, String>> {
        Box::pin(async {
            let mut stats = self.store.stats().await.map_err(|e| e.to_string())?;
            // No finished saga stored: the oldest is "now" (age 0), so the
            // gauge does not keep showing a saga that is gone.
            stats.oldest_finished_ms = stats
                .oldest_finished_ms
                .or_else(|| Some(service_kit::time::now_ms()));
            Ok(stats)
        })
    }
}

/// Gives the orchestrator's retention metrics their `# HELP` text.
pub fn describe() {
    service_kit::purge::describe();
    metrics::describe_counter!(
        "saga_expired_total",
        "Finished sagas this orchestrator deleted after the retention (embedded store, or archiving on MongoDB; MongoDB's own TTL deletions are in its serverStatus metrics.ttl)."
    );
    metrics::describe_counter!(
        "saga_archived_total",
        "Expired sagas written to the --archive-dir files before deletion."
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    /// With every default, a FAILED saga stays retryable for the
    /// participants' default history retention (7 days) less the 31 min a
    /// retry's calls may take, and a saga's calls are sent for one span
    /// (15.5 min) longer; a history retention at the minimum leaves no
    /// retry window at all, and a send window of one span.
    #[test]
    fn the_retry_window_is_the_history_retention_less_a_retrys_span() {
        let limits = service_kit::limits::CallLimits::orchestrator_defaults(
            service_kit::limits::ORDER_SAGA_STEPS,
        );
        assert_eq!(
            limits.minimum_history_retention(),
            Duration::from_secs(31 * 60)
        );
        assert_eq!(
            RetentionSettings::default().retry_window,
            Some(Duration::from_secs(7 * 24 * 3600 - 31 * 60))
        );
        assert_eq!(
            RetentionSettings::default().send_window,
            Some(Duration::from_secs(7 * 24 * 3600 - 930))
        );
        assert_eq!(
            send_window(&limits, limits.minimum_history_retention()),
            limits.longest_request_span()
        );
        assert_eq!(
            retry_window(&limits, limits.minimum_history_retention()),
            Duration::ZERO
        );
    }

    #[test]
    fn days_are_utc_calendar_dates() {
        assert_eq!(utc_date(0), "1970-01-01");
        assert_eq!(utc_date(951_782_400_000), "2000-02-29");
        assert_eq!(utc_date(1_796_083_199_999), "2026-11-30");
        assert_eq!(utc_date(1_796_083_200_000), "2026-12-01");
    }
}
