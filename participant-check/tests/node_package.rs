//! A participant a Node team would write on `@saga/participant`
//! (packages/saga-participant): the package's plain-Node parcel step, run
//! as a child process (`node dist/test/fixtures/parcel-participant.js`,
//! ready when it prints `READY <port>`) on a fresh database of the MongoDB
//! test target, with a service token. The kit passes it through every rule
//! of the contract, batches included.
//!
//! The package must be built first (the test command's examples build
//! stage, `scripts/test-examples.sh --build-only`, does it); without it the
//! test skips with a printed reason, or fails under `CI=true` or
//! `REQUIRE_EXAMPLES=1`. The child is SIGKILLed when this process dies and
//! stopped by pid (SIGTERM, then SIGKILL) when the test ends, also on failure.

mod support;

use participant_check::{OrderSpec, Settings};
use saga_tests::process;
use std::io::Write;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

const TOKEN: &str = "node-package-token";

/// Stops the child by pid when dropped (also while a failing test
/// unwinds): SIGTERM, 10 s to exit, then SIGKILL.
struct Stopped(Child);

impl Drop for Stopped {
    fn drop(&mut self) {
        if let Err(e) = process::stop(&mut self.0, Duration::from_secs(10)) {
            eprintln!("stopping the node participant pid {}: {e}", self.0.id());
        }
    }
}

#[tokio::test]
async fn a_participant_on_the_node_package_passes_every_rule() {
    let fixture = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../packages/saga-participant/dist/test/fixtures/parcel-participant.js");
    let node = Command::new("node").arg("--version").output();
    let why = if !node.is_ok_and(|o| o.status.success()) {
        Some("`node` is not on PATH".to_owned())
    } else if !fixture.is_file() {
        Some(format!(
            "{} is not built: run scripts/test-examples.sh --build-only",
            fixture.display()
        ))
    } else {
        None
    };
    if let Some(why) = why {
        assert!(
            !saga_tests::node_process::examples_required(),
            "the Node package is required (CI=true or REQUIRE_EXAMPLES=1): {why}"
        );
        let _ = writeln!(std::io::stderr(), "SKIPPED: {why}");
        return;
    }
    let Some(target) = saga_tests::backends::mongo() else {
        return;
    };
    let database = format!("node_package_{}", uuid::Uuid::now_v7().simple());
    let mut cmd = Command::new("node");
    cmd.arg(&fixture)
        .env("MONGODB_URI", &target.uri)
        .env("MONGODB_DATABASE", &database)
        .env("SERVICE_TOKEN", TOKEN)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit());
    let mut child = Stopped(process::spawn_tied(cmd).expect("spawn node"));
    let stdout = child.0.stdout.take().expect("stdout");
    let ready = process::watch_for_ready(stdout);
    let port = tokio::task::spawn_blocking(move || ready.recv_timeout(Duration::from_secs(60)))
        .await
        .expect("reader")
        .expect("READY within 60 s")
        .expect("a READY <port> line before the participant exited");

    let mut settings = Settings::new(format!("127.0.0.1:{port}"));
    settings.token = Some(TOKEN.into());
    settings.refused_order = Some(
        OrderSpec::parse(
            r#"{"customer_id":"c","lines":[{"product_id":"sku-unshippable","quantity":1,"unit_price_cents":100}]}"#,
        )
        .expect("refused order"),
    );
    let report = support::check(settings).await;
    support::assert_all_pass(&report);
    drop(child);
}
