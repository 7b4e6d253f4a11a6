//! The `loyalty-svc` binary as it is run: flags and environment as the
//! other participants', the embedded store in a data dir, the service
//! token, the blocked customers from `LOYALTY_BLOCKED_CUSTOMERS` — and the
//! conformance kit passing every rule against it.

use participant_check::{OrderSpec, Settings};
use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

/// The process, killed when dropped (also when a test fails).
struct Running(Child);

impl Drop for Running {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn command(data_dir: &std::path::Path) -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_loyalty-svc"));
    command
        .args([
            "--listen",
            "127.0.0.1:0",
            "--no-metrics",
            "--log-format",
            "json",
        ])
        .arg("--data-dir")
        .arg(data_dir)
        .env_remove("MONGODB_URI")
        .env_remove("SERVICE_TOKEN")
        .env_remove("LOYALTY_BLOCKED_CUSTOMERS");
    command
}

/// Starts `command` and waits until it is ready (its "answering health" log
/// line names the address, "readiness SERVING" follows once its store is
/// open); the address it serves on. Its output goes on being drained.
fn start(mut command: Command) -> (Running, SocketAddr) {
    let mut child = command
        .stdout(Stdio::piped())
        .spawn()
        .expect("start loyalty-svc");
    let stdout = child.stdout.take().expect("stdout");
    let running = Running(child);
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let mut addr: Option<SocketAddr> = None;
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            let Ok(event) = serde_json::from_str::<serde_json::Value>(&line) else {
                continue;
            };
            let message = event["message"].as_str().unwrap_or_default();
            if message.starts_with("loyalty-svc answering health")
                && let Some(parsed) = event["addr"].as_str().and_then(|a| a.parse().ok())
            {
                addr = Some(parsed);
            }
            // Calls are answered once the store is open: readiness SERVING.
            if message.starts_with("ready: readiness SERVING")
                && let Some(addr) = addr.take()
            {
                let _ = tx.send(addr);
            }
        }
    });
    let addr = rx
        .recv_timeout(Duration::from_secs(60))
        .expect("loyalty-svc said where it serves");
    (running, addr)
}

#[tokio::test]
async fn the_binary_passes_every_rule_of_the_conformance_kit() {
    let dir = tempfile::tempdir().unwrap();
    let mut command = command(dir.path());
    command
        .env("SERVICE_TOKEN", "loyalty-t0ken")
        .env("LOYALTY_BLOCKED_CUSTOMERS", "someone, blocked-1");
    let (_running, addr) = start(command);
    let mut settings = Settings::new(addr.to_string());
    settings.token = Some("loyalty-t0ken".into());
    settings.refused_order = Some(
        OrderSpec::parse(
            r#"{"customer_id":"blocked-1","lines":[{"product_id":"p","quantity":1,"unit_price_cents":300}]}"#,
        )
        .unwrap(),
    );
    let report = participant_check::run(settings, |outcome| eprintln!("{outcome}"))
        .await
        .expect("loyalty-svc is reachable");
    assert_eq!(report.failed(), 0, "{report}");
    assert_eq!(
        report.passed(),
        participant_check::rules::all().len(),
        "{report}"
    );
    assert!(dir.path().join("loyalty.db").is_file());
}

#[test]
fn an_unusable_blocked_list_stops_start_up_with_one_line_naming_it() {
    let dir = tempfile::tempdir().unwrap();
    let output = command(dir.path())
        .env("LOYALTY_BLOCKED_CUSTOMERS", "ok,bad\u{1}id")
        .output()
        .expect("run loyalty-svc");
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(
        stderr.trim_end(),
        "loyalty-svc: LOYALTY_BLOCKED_CUSTOMERS: entry 1: customer_id: must not contain control characters (U+0001 at byte 3)"
    );
}
