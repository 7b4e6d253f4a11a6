//! The naming scheme's renames, as a deployment that has not caught up yet
//! meets them: the orchestrator binary started with the environment
//! variables' old names (`METRICS_LISTEN`, `CONSOLE_LISTEN`, `ARCHIVE_DIR`)
//! still listens where they say and warns, naming each replacement; when
//! the new name is set too it wins and the old one is reported ignored; and
//! the metrics renamed (`sagas_started_total` → `saga_started_total`) are
//! scraped under both names with the same value.
//!
//! The binaries must be built (`cargo build --workspace --bins`; the test
//! command does).

use saga_proto::saga::v1::order_service_client::OrderServiceClient;
use saga_tests::prometheus;
use saga_tests::service_process::{ServiceProcess, free_addr};
use saga_tests::{channel, http, order_request};
use std::path::Path;
use std::time::Duration;

/// How long the orchestrator has to become ready.
const LIMIT: Duration = Duration::from_secs(30);

/// The orchestrator alone (its participants' address is closed: sagas
/// start and wait), with `env`, its data under `dir`.
async fn orchestrator(env: &[(&str, &str)], dir: &Path) -> ServiceProcess {
    let data = dir.join("orchestrator");
    let nobody = format!("http://{}", free_addr());
    let args = [
        "serve",
        "--data-dir",
        data.to_str().expect("UTF-8 path"),
        "--step-address",
        &format!("payment={},inventory={}", &nobody, &nobody),
    ];
    let service = ServiceProcess::spawn("orchestrator", free_addr(), &args, env, dir);
    service.until_ready(LIMIT).await;
    service
}

/// The log lines that mention `variable`.
fn mentions(service: &ServiceProcess, variable: &str) -> Vec<String> {
    let log = std::fs::read_to_string(&service.log).unwrap_or_default();
    log.lines()
        .filter(|line| line.contains(variable))
        .map(str::to_owned)
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_old_variable_names_are_still_read_with_a_warning() {
    let dir = tempfile::tempdir().expect("temp dir");
    let (metrics, console) = (free_addr(), free_addr());
    let archive = dir.path().join("archive");
    let (metrics_s, console_s) = (metrics.to_string(), console.to_string());
    let env = [
        ("METRICS_LISTEN", metrics_s.as_str()),
        ("CONSOLE_LISTEN", console_s.as_str()),
        ("ARCHIVE_DIR", archive.to_str().expect("UTF-8 path")),
    ];
    let service = orchestrator(&env, dir.path()).await;

    let (status, page) = http::get(console, "/").await.expect("the console answers");
    assert_eq!(status, 200, "{page}");
    let mut client = OrderServiceClient::new(channel(service.addr).await);
    client
        .create_order(order_request(
            "renamed-1",
            "alice",
            &[("sku-apple", 1, 100)],
            false,
        ))
        .await
        .expect("CreateOrder");
    let scraped =
        prometheus::scrape_until(metrics, |s| s.value("saga_started_total", &[]).is_some()).await;
    assert_eq!(scraped.value("saga_started_total", &[]), Some(1.0));
    assert_eq!(
        scraped.value("sagas_started_total", &[]),
        Some(1.0),
        "the old metric name, exported beside the new one"
    );

    for (old, new) in [
        ("METRICS_LISTEN", "ORCHESTRATOR_METRICS_LISTEN"),
        ("CONSOLE_LISTEN", "ORCHESTRATOR_CONSOLE_LISTEN"),
        ("ARCHIVE_DIR", "ORCHESTRATOR_ARCHIVE_DIR"),
    ] {
        let warned = mentions(&service, &format!("{old} is deprecated"));
        assert_eq!(warned.len(), 1, "{old}: {warned:?}");
        assert!(
            warned[0].contains("WARN") && warned[0].contains(new),
            "{warned:?}"
        );
    }
    service.stop_cleanly(LIMIT).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_new_name_wins_over_the_old_one() {
    let dir = tempfile::tempdir().expect("temp dir");
    let (new, old) = (free_addr(), free_addr());
    let (new_s, old_s) = (new.to_string(), old.to_string());
    let env = [
        ("ORCHESTRATOR_METRICS_LISTEN", new_s.as_str()),
        ("METRICS_LISTEN", old_s.as_str()),
        ("ORCHESTRATOR_CONSOLE_LISTEN", "127.0.0.1:0"),
    ];
    let service = orchestrator(&env, dir.path()).await;
    let (status, _) = http::get(new, "/metrics")
        .await
        .expect("metrics on the new address");
    assert_eq!(status, 200);
    assert!(
        http::get(old, "/metrics").await.is_err(),
        "nothing listens on the old name's address"
    );
    let ignored = mentions(&service, "METRICS_LISTEN is ignored");
    assert_eq!(ignored.len(), 1, "{:?}", service.log_tail(20));
    assert!(mentions(&service, "is deprecated").is_empty());
    service.stop_cleanly(LIMIT).await;
}
