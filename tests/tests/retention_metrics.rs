//! Retention's counters, scraped over HTTP: what the purges deleted is
//! counted exactly — `sagas_expired_total`, `sagas_archived_total` and
//! `participant_records_expired_total{table}` — on the embedded stores,
//! where the services delete (on MongoDB the server's TTL monitor does, and
//! nothing of ours sees it).
//!
//! A test binary of its own: the Prometheus recorder is process-wide.

use orchestrator::retention::RetentionSettings;
use participant_kit::HistoryRetention;
use saga_proto::saga::v1 as pb;
use saga_tests::{Stack, Storage};
use std::net::SocketAddr;
use std::time::{Duration, Instant};

/// The value of the sample `name{labels}` (labels as written in the
/// exposition, e.g. `table="deduct_lines"`; empty for none), 0 when absent.
fn sample(text: &str, name: &str, labels: &str) -> f64 {
    let key = if labels.is_empty() {
        name.to_owned()
    } else {
        format!("{name}{{{labels}}}")
    };
    text.lines()
        .filter(|l| !l.starts_with('#'))
        .find_map(|l| {
            let (k, v) = l.rsplit_once(' ')?;
            (k == key).then(|| v.parse().ok()).flatten()
        })
        .unwrap_or(0.0)
}

/// `GET /metrics` from the exporter at `addr`.
async fn scrape(addr: SocketAddr) -> String {
    let (status, body) = saga_tests::http::get(&addr.to_string(), "/metrics").await;
    assert_eq!(status, 200, "{body}");
    body
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn what_the_purges_delete_is_counted_exactly() {
    let addr = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("free port");
    service_kit::metrics::serve_metrics(addr).expect("install the Prometheus recorder");
    participant_kit::retention::describe();
    orchestrator::retention::describe();

    let dir = tempfile::tempdir().expect("tempdir");
    let archive = dir.path().join("archive");
    let stack = Stack::start_retaining(
        tempfile::tempdir().expect("tempdir"),
        Storage::from(dir.path()),
        RetentionSettings {
            saga_retention: Some(Duration::from_secs(1)),
            archive_dir: Some(archive),
            purge_interval: Duration::from_millis(100),
            retry_window: None,
        },
        HistoryRetention {
            keep: Duration::from_secs(2),
            purge_interval: Duration::from_millis(100),
        },
    )
    .await;
    // One record each: the deposit, the stock added, the charge, the
    // deduct (and its one order line).
    stack.deposit("alice", 1_000).await;
    stack.add_stock("sku-apple", 5).await;
    let done = stack
        .order("m-expire", "alice", &[("sku-apple", 1, 100)])
        .await
        .expect("order");
    assert_eq!(done.status(), pb::SagaStatus::Completed);

    let expected = [
        ("sagas_expired_total", "", 1.0),
        ("sagas_archived_total", "", 1.0),
        (
            "participant_records_expired_total",
            "table=\"operation_history\"",
            4.0,
        ),
        (
            "participant_records_expired_total",
            "table=\"deduct_lines\"",
            1.0,
        ),
    ];
    let until = Instant::now() + Duration::from_secs(30);
    let text = loop {
        let text = scrape(addr).await;
        let reached = expected
            .iter()
            .all(|(name, labels, want)| sample(&text, name, labels) >= *want);
        if reached || Instant::now() > until {
            break text;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    // Exact, and still exact a few purges later (nothing counted twice).
    tokio::time::sleep(Duration::from_millis(500)).await;
    let later = scrape(addr).await;
    for (name, labels, want) in expected {
        assert_eq!(
            sample(&text, name, labels),
            want,
            "{name}{{{labels}}}\n{text}"
        );
        assert_eq!(
            sample(&later, name, labels),
            want,
            "{name}{{{labels}}} later"
        );
    }
    stack.stop().await;
}
