//! The README's first command, `dev`, as a newcomer meets it: the
//! `dev-stack` binary started as a process (on ephemeral ports, a temp data
//! directory, embedded stores), its banner read for the addresses it
//! prints, the three demo orders found with the statuses the banner
//! promises — over gRPC and over the console's JSON API at the printed URL —
//! and a SIGTERM that ends it cleanly.

use saga_proto::saga::v1 as pb;
use saga_tests::process::{self, spawn_tied};
use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

/// The first line of the banner that starts with `prefix`, waited for up
/// to `within` (the stack seeds its participants before it prints).
fn banner_line(lines: &mpsc::Receiver<String>, prefix: &str, within: Duration) -> String {
    let until = Instant::now() + within;
    loop {
        let left = until.saturating_duration_since(Instant::now());
        match lines.recv_timeout(left) {
            Ok(line) if line.trim_start().starts_with(prefix) => return line,
            Ok(_) => {}
            Err(e) => panic!("no banner line starting with {prefix:?}: {e}"),
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dev_prints_working_addresses_and_places_the_three_demo_orders() {
    let data = tempfile::tempdir().expect("tempdir");
    let mut cmd = Command::new(process::workspace_binary("dev-stack"));
    cmd.arg("dev")
        .args(["--data-dir".as_ref(), data.path().as_os_str()])
        .args(["--orchestrator-listen", "127.0.0.1:0"])
        .args(["--payment-listen", "127.0.0.1:0"])
        .args(["--inventory-listen", "127.0.0.1:0"])
        .args(["--console-listen", "127.0.0.1:0"])
        .arg("--no-metrics")
        .env_remove("MONGODB_URI")
        .env_remove("ADMIN_TOKEN")
        .env_remove("SERVICE_TOKEN")
        .env("RUST_LOG", "warn")
        .stdout(Stdio::piped())
        .stderr(Stdio::null());
    let mut child = spawn_tied(cmd).expect("spawn dev-stack");
    let stdout = child.stdout.take().expect("stdout");
    let (tx, lines) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            if tx.send(line).is_err() {
                break;
            }
        }
    });

    let orchestrator = banner_line(&lines, "orchestrator ", Duration::from_secs(60));
    let orchestrator = orchestrator
        .split_whitespace()
        .nth(1)
        .expect("address")
        .to_owned();
    let console = banner_line(&lines, "Saga console", Duration::from_secs(10));
    let url = console
        .split_whitespace()
        .find(|w| w.starts_with("http://"))
        .expect("console url");
    let console_addr = url
        .trim_start_matches("http://")
        .trim_end_matches('/')
        .to_owned();

    // The demo orders are placed at start-up; wait until all three ended.
    let mut sagas = pb::saga_service_client::SagaServiceClient::new(
        saga_tests::channel(orchestrator.parse().expect("socket address")).await,
    );
    let until = Instant::now() + Duration::from_secs(30);
    let statuses = loop {
        let mut statuses = Vec::new();
        for request_id in ["demo-1", "demo-2", "demo-3"] {
            let saga = sagas
                .get_saga(pb::GetSagaRequest {
                    lookup: Some(pb::get_saga_request::Lookup::RequestId(request_id.into())),
                })
                .await
                .map(|r| r.into_inner().status());
            statuses.push(saga.ok());
        }
        let done = statuses.iter().all(|s| {
            matches!(
                s,
                Some(pb::SagaStatus::Completed | pb::SagaStatus::Cancelled)
            )
        });
        if done || Instant::now() > until {
            break statuses;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert_eq!(
        statuses,
        [
            Some(pb::SagaStatus::Completed),
            Some(pb::SagaStatus::Cancelled),
            Some(pb::SagaStatus::Cancelled)
        ],
        "demo-1 completes, demo-2 (bob cannot pay) and demo-3 (5 pears, 3 in stock) are cancelled"
    );

    // The console at the printed URL lists them.
    let (status, body) = saga_tests::http::get(&console_addr, "/api/sagas")
        .await
        .expect("GET the console");
    assert_eq!(status, 200, "{body}");
    let listed: serde_json::Value = serde_json::from_str(&body).expect("json");
    let mut request_ids: Vec<&str> = listed["sagas"]
        .as_array()
        .expect("sagas")
        .iter()
        .filter_map(|s| s["request_id"].as_str())
        .collect();
    request_ids.sort_unstable();
    assert_eq!(request_ids, ["demo-1", "demo-2", "demo-3"]);

    let stopped = process::stop(&mut child, Duration::from_secs(15)).expect("stop");
    assert!(!stopped.killed, "dev did not stop within 15 s of SIGTERM");
    assert!(
        stopped.status.success(),
        "dev exited with {}",
        stopped.status
    );
}
