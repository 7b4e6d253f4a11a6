//! Retention's counters, scraped over HTTP: what the purges deleted is
//! counted exactly — `saga_expired_total`, `saga_archived_total` and
//! `participant_records_expired_total{table}` — on the embedded stores,
//! where the services delete (on MongoDB the server's TTL monitor does, and
//! nothing of ours sees it).
//!
//! A test binary of its own: the Prometheus recorder is process-wide.

use orchestrator::retention::RetentionSettings;
use participant_kit::HistoryRetention;
use saga_proto::saga::v1 as pb;
use saga_tests::prometheus::scrape;
use saga_tests::{Stack, Storage};
use std::time::{Duration, Instant};

/// A counter's name, its labels and the value it must reach.
type Counter = (&'static str, &'static [(&'static str, &'static str)], f64);

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
            send_window: None,
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

    let expected: [Counter; 4] = [
        ("saga_expired_total", &[], 1.0),
        ("saga_archived_total", &[], 1.0),
        (
            "participant_records_expired_total",
            &[("table", "operation_history")],
            4.0,
        ),
        (
            "participant_records_expired_total",
            &[("table", "deduct_lines")],
            1.0,
        ),
    ];
    let until = Instant::now() + Duration::from_secs(30);
    let first = loop {
        let m = scrape(addr).await;
        let reached = expected
            .iter()
            .all(|(name, labels, want)| m.value(name, labels).unwrap_or(0.0) >= *want);
        if reached || Instant::now() > until {
            break m;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    // Exact, and still exact three purge rounds of every service later
    // (nothing counted twice).
    let rounds = |m: &saga_tests::prometheus::Scrape| {
        ["orchestrator", "payment-svc", "inventory-svc"].map(|service| {
            m.value("store_purge_rounds_total", &[("service", service)])
                .unwrap_or(0.0)
        })
    };
    let before = rounds(&first);
    let until = Instant::now() + Duration::from_secs(30);
    let later = loop {
        let m = scrape(addr).await;
        let after = rounds(&m);
        if (0..3).all(|i| after[i] >= before[i] + 3.0) {
            break m;
        }
        assert!(
            Instant::now() < until,
            "purges stopped: {before:?} then {after:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    for (name, labels, want) in expected {
        assert_eq!(
            first.value(name, labels),
            Some(want),
            "{name}{labels:?}\n{}",
            first.text
        );
        assert_eq!(
            later.value(name, labels),
            Some(want),
            "{name}{labels:?} later\n{}",
            later.text
        );
    }
    stack.stop().await;
}
