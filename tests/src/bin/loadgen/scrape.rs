//! Figures the services count themselves, read from their Prometheus
//! endpoints before and after the measured saga phase:
//!
//! - MongoDB commands per saga: `mongodb_commands_total{service, command}`
//!   (the driver's command monitoring, `mongo-client`). On a stand-in server
//!   the timings say little; the number of commands — round trips to the
//!   database — carries over to a real MongoDB.
//! - Store bytes per saga: `store_size_bytes{service}`, each store's size by
//!   its own accounting (SQLite page_count × page_size; MongoDB collStats
//!   size + index size), set by the purge loop once per purge interval
//!   (`service-kit` retention). [`settle`] waits until a refresh after the
//!   traffic has certainly been read.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::time::Duration;
use tokio::time::Instant;

/// The commands counter's name.
const COUNTER: &str = "mongodb_commands_total";
/// The store size gauge's name.
const STORE_SIZE: &str = "store_size_bytes";

/// `(service, command)` → commands sent so far.
pub type Counts = BTreeMap<(String, String), f64>;

/// One scrape of every endpoint; an endpoint that does not answer counts
/// nothing (the report then shows fewer commands, not a failure).
pub async fn snapshot(endpoints: &[SocketAddr]) -> Counts {
    let mut counts = Counts::new();
    for addr in endpoints {
        if let Ok(text) = get_metrics(*addr).await {
            for (key, value) in parse(&text) {
                *counts.entry(key).or_default() += value;
            }
        }
    }
    counts
}

/// Commands sent between two snapshots, per service and command.
pub fn delta(before: &Counts, after: &Counts) -> Counts {
    after
        .iter()
        .map(|(k, v)| (k.clone(), v - before.get(k).copied().unwrap_or(0.0)))
        .filter(|(_, v)| *v > 0.0)
        .collect()
}

/// `GET /metrics` (the exporter's listener), the body, within 5 s.
async fn get_metrics(addr: SocketAddr) -> Result<String, String> {
    let reply = tokio::time::timeout(
        Duration::from_secs(5),
        saga_tests::http::get(addr, "/metrics"),
    )
    .await
    .map_err(|_| format!("{addr}: no answer within 5 s"))??;
    match reply {
        (200, text) => Ok(text),
        (status, text) => Err(format!("{addr}/metrics: status {status}: {text}")),
    }
}

/// The counter's samples in a Prometheus text exposition.
fn parse(text: &str) -> Vec<((String, String), f64)> {
    samples(text, COUNTER)
        .into_iter()
        .map(|(labels, value)| {
            let label = |name: &str| labels.get(name).cloned().unwrap_or_default();
            ((label("service"), label("command")), value)
        })
        .collect()
}

/// The samples of metric `name` in a Prometheus text exposition (the
/// shared parser, `saga_tests::prometheus`): labels and value. An
/// exposition that does not parse counts nothing, and says why on stderr.
fn samples(text: &str, name: &str) -> Vec<(BTreeMap<String, String>, f64)> {
    match saga_tests::prometheus::parse_exposition(text) {
        Ok(samples) => samples
            .into_iter()
            .filter(|s| s.name == name)
            .map(|s| (s.labels, s.value))
            .collect(),
        Err(e) => {
            eprintln!("loadgen: an exposition that does not parse: {e}");
            Vec::new()
        }
    }
}

/// Service (the gauge's `service` label) → store size in bytes.
pub type Sizes = BTreeMap<String, f64>;

/// The `store_size_bytes` gauges in an exposition, by service.
fn parse_sizes(text: &str) -> Sizes {
    samples(text, STORE_SIZE)
        .into_iter()
        .filter(|(_, v)| v.is_finite())
        .filter_map(|(labels, v)| Some((labels.get("service")?.clone(), v)))
        .collect()
}

/// One scrape of every endpoint's `store_size_bytes`; a service without
/// the gauge (an older version, metrics off) or an endpoint that does not
/// answer is simply absent.
pub async fn store_sizes(endpoints: &[SocketAddr]) -> Sizes {
    let mut sizes = Sizes::new();
    for addr in endpoints {
        if let Ok(text) = get_metrics(*addr).await {
            sizes.extend(parse_sizes(&text));
        }
    }
    sizes
}

/// The store sizes once they are fresh, and how long that took.
#[derive(Clone, Debug, Default)]
pub struct Settled {
    pub sizes: Sizes,
    pub waited: Duration,
    /// False when the gauges were still moving at the cap (the last values
    /// are kept).
    pub settled: bool,
}

/// How [`settle`] judges the gauges fresh, for a purge interval.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Freshness {
    /// Every gauge must hold its value this long — from the start or from
    /// its last change: one interval and a margin for the rounds' own
    /// duration.
    pub quiet: Duration,
    /// Scrape this often.
    pub poll: Duration,
    /// Give up waiting after this long.
    pub cap: Duration,
}

impl Freshness {
    /// For services that refresh their gauge every `interval`.
    pub fn new(interval: Duration) -> Freshness {
        let interval = interval.max(Duration::from_millis(10));
        let margin = (interval / 2).max(Duration::from_millis(500));
        Freshness {
            quiet: interval + margin,
            poll: (interval / 5).clamp(Duration::from_millis(50), Duration::from_millis(500)),
            cap: (interval * 10).max(Duration::from_secs(15)),
        }
    }
}

/// Scrapes `store_size_bytes` until every service's gauge is fresh: it has
/// held its value for [`Freshness::quiet`] — more than a purge interval —
/// since the call or since it last changed. Why that is enough: a round
/// that was under way at the start ends within the margin, the next one
/// starts an interval later and reads the store as it is now; and after a
/// change the next round, an interval later, read the same size. At most
/// [`Freshness::cap`]; never fails (services without the gauge are absent,
/// and none at all is known after one quiet period).
pub async fn settle(endpoints: &[SocketAddr], interval: Duration) -> Settled {
    let fresh = Freshness::new(interval);
    let start = Instant::now();
    let mut seen: BTreeMap<String, (f64, Instant)> = BTreeMap::new();
    loop {
        let sizes = store_sizes(endpoints).await;
        let now = Instant::now();
        observe(&mut seen, &sizes, now);
        let waited = now - start;
        let settled = is_fresh(&seen, now, waited, &fresh);
        if settled || waited >= fresh.cap {
            return Settled {
                sizes,
                waited,
                settled,
            };
        }
        tokio::time::sleep(fresh.poll).await;
    }
}

/// Records one scrape in `seen`: each service's value and since when.
fn observe(seen: &mut BTreeMap<String, (f64, Instant)>, sizes: &Sizes, now: Instant) {
    for (service, &value) in sizes {
        match seen.get_mut(service) {
            Some((v, _)) if *v == value => {}
            Some(entry) => *entry = (value, now),
            None => {
                seen.insert(service.clone(), (value, now));
            }
        }
    }
}

/// Whether the gauges are fresh by [`settle`]'s rule.
fn is_fresh(
    seen: &BTreeMap<String, (f64, Instant)>,
    now: Instant,
    waited: Duration,
    f: &Freshness,
) -> bool {
    waited >= f.quiet && seen.values().all(|(_, since)| now - *since >= f.quiet)
}

/// Store bytes per saga of each service: (after − before) / `sagas`; None
/// where either side lacks the gauge or no saga finished.
pub fn bytes_per_saga(before: &Sizes, after: &Sizes, service: &str, sagas: u64) -> Option<f64> {
    let (b, a) = (before.get(service)?, after.get(service)?);
    (sagas > 0).then(|| (a - b) / sagas as f64)
}

/// Per service: commands per saga in all, and per command kind.
pub fn per_saga(delta: &Counts, sagas: u64) -> BTreeMap<String, (f64, BTreeMap<String, f64>)> {
    let n = sagas.max(1) as f64;
    let mut out: BTreeMap<String, (f64, BTreeMap<String, f64>)> = BTreeMap::new();
    for ((service, command), v) in delta {
        let entry = out.entry(service.clone()).or_default();
        entry.0 += v / n;
        *entry.1.entry(command.clone()).or_default() += v / n;
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_the_counter_whatever_the_label_order() {
        let text = "# TYPE mongodb_commands_total counter\n\
            mongodb_commands_total{service=\"payment\",command=\"insert\"} 12\n\
            mongodb_commands_total{command=\"commitTransaction\",service=\"payment\"} 4\n\
            other_total{service=\"payment\"} 9\n";
        let parsed = parse(text);
        assert_eq!(
            parsed,
            vec![
                (("payment".into(), "insert".into()), 12.0),
                (("payment".into(), "commitTransaction".into()), 4.0)
            ]
        );
        let before: Counts = [(("payment".to_owned(), "insert".to_owned()), 2.0)].into();
        let after: Counts = parsed.into_iter().collect();
        let d = delta(&before, &after);
        let per = per_saga(&d, 2);
        assert_eq!(per["payment"].0, 7.0);
        assert_eq!(per["payment"].1["insert"], 5.0);
    }

    #[test]
    fn reads_the_store_size_gauge_of_each_service() {
        let text = "# HELP store_size_bytes Size of the store\n\
            # TYPE store_size_bytes gauge\n\
            store_size_bytes{service=\"orchestrator\"} 1228800\n\
            store_size_bytes_other{service=\"x\"} 1\n\
            store_size_bytes{service=\"payment-svc\"} 4.5e5\n";
        let sizes = parse_sizes(text);
        assert_eq!(sizes.len(), 2);
        assert_eq!(sizes["orchestrator"], 1_228_800.0);
        assert_eq!(sizes["payment-svc"], 450_000.0);
        let after: Sizes = [("orchestrator".to_owned(), 1_328_800.0)].into();
        assert_eq!(
            bytes_per_saga(&sizes, &after, "orchestrator", 200),
            Some(500.0)
        );
        assert_eq!(bytes_per_saga(&sizes, &after, "payment-svc", 200), None);
        assert_eq!(bytes_per_saga(&sizes, &after, "orchestrator", 0), None);
    }

    #[test]
    fn a_gauge_is_fresh_once_it_held_its_value_over_an_interval() {
        let f = Freshness::new(Duration::from_secs(1));
        assert_eq!(f.quiet, Duration::from_millis(1500));
        let t0 = Instant::now();
        let at = |ms: u64| t0 + Duration::from_millis(ms);
        let after = |ms: u64| Duration::from_millis(ms);
        let sizes = |v: f64| -> Sizes { [("orchestrator".to_owned(), v)].into() };
        let mut seen = BTreeMap::new();
        observe(&mut seen, &sizes(1.0), at(0));
        observe(&mut seen, &sizes(1.0), at(1000));
        assert!(!is_fresh(&seen, at(1400), after(1400), &f));
        assert!(is_fresh(&seen, at(1500), after(1500), &f));
        // A change at 300 ms starts the quiet period again.
        let mut seen = BTreeMap::new();
        observe(&mut seen, &sizes(1.0), at(0));
        observe(&mut seen, &sizes(2.0), at(300));
        assert!(!is_fresh(&seen, at(1500), after(1500), &f));
        assert!(is_fresh(&seen, at(1800), after(1800), &f));
        // No gauge at all: one quiet period, then nothing to wait for.
        let empty = BTreeMap::new();
        assert!(!is_fresh(&empty, at(100), after(100), &f));
        assert!(is_fresh(&empty, at(1500), after(1500), &f));
    }
}
