//! The periodic purge of the embedded stores, written once for the three
//! services: a [`Purger`] (one per store) deletes what expired in small
//! batches, and [`run_purge_loop`] calls it every `--purge-interval`,
//! then refreshes the store gauges (`store_size_bytes`,
//! `saga_oldest_finished_age_seconds`).
//!
//! Small batches because each is one job of the embedded store's group
//! commit: a purge never holds the writer long enough to stall the calls
//! queued behind it, and it yields to them between batches. Stores that
//! expire by themselves (MongoDB TTL indexes) delete nothing here and only
//! report their size.

use crate::clock::{Clock, SharedClock};
use crate::shutdown::Shutdown;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// How often the embedded stores purge by default.
pub const DEFAULT_PURGE_INTERVAL: Duration = Duration::from_secs(10);
/// Most rows one purge batch deletes: one small job of the embedded
/// store's group commit, never a transaction that stalls the writer.
pub const PURGE_BATCH: usize = 500;

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
    metrics::describe_counter!(
        "store_purge_rounds_total",
        "Purge rounds finished (each: expired batches deleted, free pages released, sizes read): that the purge is running."
    );
    metrics::describe_gauge!(
        "store_size_bytes",
        "Size of the service's store by its own accounting: SQLite page_count × page_size (WAL excluded); MongoDB collStats size + totalIndexSize of the service's collections (SecantusDB reports logical BSON size)."
    );
    metrics::describe_gauge!(
        "saga_oldest_finished_age_seconds",
        "Age of the oldest COMPLETED or CANCELLED saga still stored (0 when there is none)."
    );
    metrics::describe_histogram!(
        "store_purge_batch_duration_seconds",
        "Duration of one purge batch (embedded stores)."
    );
}

/// Runs purge rounds every `interval` until `shutdown`: batches until one
/// comes back without more to do (an INFO line per batch that deleted
/// something), then `reclaim`, then the gauges `store_size_bytes{service}`
/// and, where the store has sagas, `saga_oldest_finished_age_seconds`.
/// Errors are logged and the next round tries again.
/// Time (what has expired, the sleep between rounds) is `clock`'s.
pub async fn run_purge_loop(
    purger: Arc<dyn Purger>,
    service: &'static str,
    interval: Duration,
    clock: SharedClock,
    shutdown: Shutdown,
) {
    loop {
        purge_round(purger.as_ref(), service, clock.as_ref(), &shutdown).await;
        tokio::select! {
            biased;
            _ = shutdown.wait() => return,
            _ = clock.sleep(interval) => {}
        }
    }
}

/// One round of [`run_purge_loop`].
pub async fn purge_round(
    purger: &dyn Purger,
    service: &'static str,
    clock: &dyn Clock,
    shutdown: &Shutdown,
) {
    while !shutdown.is_triggered() {
        let started = Instant::now();
        match purger.purge_batch(clock.now_ms()).await {
            Ok(batch) => {
                let took = started.elapsed();
                if batch.total() > 0 {
                    metrics::histogram!("store_purge_batch_duration_seconds", "service" => service)
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
                let age_ms = (clock.now_ms() - oldest).max(0);
                metrics::gauge!("saga_oldest_finished_age_seconds").set(age_ms as f64 / 1e3);
            }
        }
        Err(error) => tracing::warn!(service, %error, "reading the store size failed"),
    }
    metrics::counter!("store_purge_rounds_total", "service" => service).increment(1);
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Mutex;

    /// A store with `batches` full batches to delete, recording what the
    /// loop asked of it.
    #[derive(Default)]
    struct Store {
        batches: usize,
        fail: bool,
        calls: Mutex<Vec<&'static str>>,
    }

    impl Purger for Store {
        fn purge_batch(&self, _now_ms: i64) -> BoxFuture<'_, Result<PurgeBatch, String>> {
            Box::pin(async {
                let mut calls = self.calls.lock().expect("calls");
                calls.push("batch");
                if self.fail {
                    return Err("disk on fire".into());
                }
                let n = calls.iter().filter(|c| **c == "batch").count();
                Ok(PurgeBatch {
                    deleted: vec![("records", PURGE_BATCH as u64)],
                    more: n < self.batches,
                })
            })
        }

        fn reclaim(&self) -> BoxFuture<'_, Result<u64, String>> {
            Box::pin(async {
                self.calls.lock().expect("calls").push("reclaim");
                Ok(0)
            })
        }

        fn stats(&self) -> BoxFuture<'_, Result<StoreStats, String>> {
            Box::pin(async {
                self.calls.lock().expect("calls").push("stats");
                Ok(StoreStats::default())
            })
        }
    }

    /// A round deletes batch after batch while one comes back full, then
    /// reclaims and reads the gauges once; a failing batch ends the
    /// round's deleting, not the rest of it; a triggered shutdown deletes
    /// nothing.
    #[tokio::test]
    async fn a_round_deletes_until_a_batch_is_not_full_then_reclaims_and_reads_the_gauges() {
        let shutdown = Shutdown::new();
        let store = Store {
            batches: 3,
            ..Store::default()
        };
        purge_round(&store, "test", &crate::clock::SystemClock, &shutdown).await;
        assert_eq!(
            *store.calls.lock().expect("calls"),
            ["batch", "batch", "batch", "reclaim", "stats"]
        );

        let failing = Store {
            batches: 3,
            fail: true,
            ..Store::default()
        };
        purge_round(&failing, "test", &crate::clock::SystemClock, &shutdown).await;
        assert_eq!(
            *failing.calls.lock().expect("calls"),
            ["batch", "reclaim", "stats"]
        );

        shutdown.trigger();
        let stopped = Store {
            batches: 3,
            ..Store::default()
        };
        purge_round(&stopped, "test", &crate::clock::SystemClock, &shutdown).await;
        assert_eq!(*stopped.calls.lock().expect("calls"), ["reclaim", "stats"]);
    }
}
