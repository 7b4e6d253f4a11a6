//! The NestJS shipping participant (`examples/nestjs-shipping`, its shipping
//! rules on `@saga/participant`'s Nest module) as a child process of a test:
//! a third step of the saga written in another language, over MongoDB, run
//! exactly as in production (`node dist/src/main.js`, configured by its
//! environment, ready when it prints `READY <port>`).
//!
//! It exists so that `cargo test` proves the generic contract end to end
//! with a participant the project did not write in Rust. The app must be
//! built first (`scripts/test-examples.sh --build-only`, the test command's
//! "examples build" stage, packs the package and installs and builds the
//! app): [`ShippingApp::find`] says whether it is, and a test without it
//! skips with a printed reason — or fails, under `CI=true` or
//! `REQUIRE_EXAMPLES=1`.
//!
//! The process is SIGKILLed when this test process dies
//! ([`process::spawn_tied`]), stopped by pid (SIGTERM, then SIGKILL) when
//! its [`ShippingProcess`] is dropped, also while a failing test unwinds,
//! and can be SIGKILLed and started again on the same port and database.

use crate::process;
use std::io::Write;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

/// The app's directory in this repository.
fn app_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples/nestjs-shipping")
}

/// How long start-up may take (Node loads the protos and connects to
/// MongoDB; a loaded machine is slow).
const READY_WITHIN: Duration = Duration::from_secs(60);

/// How long it has to exit after SIGTERM before SIGKILL.
const GRACE: Duration = Duration::from_secs(10);

/// Whether a missing app fails the test instead of skipping it:
/// `CI=true` or `REQUIRE_EXAMPLES=1`.
pub fn examples_required() -> bool {
    std::env::var("CI").is_ok_and(|v| v == "true")
        || std::env::var("REQUIRE_EXAMPLES").is_ok_and(|v| v == "1")
}

/// The built app and the `node` that runs it.
#[derive(Debug, Clone)]
pub struct ShippingApp {
    main: PathBuf,
}

impl ShippingApp {
    /// The built app, or why it cannot run (`node` missing from PATH, not
    /// built, dependencies not installed).
    pub fn locate() -> Result<ShippingApp, String> {
        let dir = app_dir();
        let main = dir.join("dist/src/main.js");
        let node = Command::new("node")
            .arg("--version")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status();
        if !node.is_ok_and(|s| s.success()) {
            return Err("`node` is not on PATH (Node.js >= 20 runs the NestJS participant)".into());
        }
        let package = dir.join("node_modules/@saga/participant");
        for needed in [&main, &package] {
            if !needed.exists() {
                return Err(format!(
                    "the NestJS participant is not built ({} missing): run scripts/test-examples.sh --build-only (it packs @saga/participant, then runs `npm ci && npm run build` in examples/nestjs-shipping; scripts/test.sh's examples build stage does)",
                    needed.display()
                ));
            }
        }
        Ok(ShippingApp { main })
    }

    /// The built app; `None` (with the reason printed) when it cannot run
    /// and examples are not required, a panic naming the fix when they are
    /// ([`examples_required`]).
    pub fn find() -> Option<ShippingApp> {
        match Self::locate() {
            Ok(app) => Some(app),
            Err(why) if examples_required() => {
                panic!("the NestJS participant is required (CI=true or REQUIRE_EXAMPLES=1): {why}")
            }
            Err(why) => {
                let _ = writeln!(
                    std::io::stderr(),
                    "SKIPPED: {why}; set REQUIRE_EXAMPLES=1 to make this a failure"
                );
                None
            }
        }
    }
}

/// How to run the shipping participant.
#[derive(Debug, Clone)]
pub struct ShippingConfig {
    /// Its MongoDB (the test target's URI).
    pub mongodb_uri: String,
    /// Its own database there.
    pub database: String,
    /// Products it refuses to ship (`UNSHIPPABLE_PRODUCTS`).
    pub unshippable: Vec<String>,
    /// `SERVICE_TOKEN`: Act and Compensate need it.
    pub service_token: Option<String>,
}

impl ShippingConfig {
    /// A fresh database `shipping_<uuid>` on `mongodb_uri`, no unshippable
    /// product, no token.
    pub fn new(mongodb_uri: &str) -> Self {
        ShippingConfig {
            mongodb_uri: mongodb_uri.to_owned(),
            database: format!("shipping_{}", uuid::Uuid::now_v7().simple()),
            unshippable: Vec::new(),
            service_token: None,
        }
    }
}

/// The running shipping participant: restartable on the same port and
/// database, stopped when dropped.
pub struct ShippingProcess {
    app: ShippingApp,
    config: ShippingConfig,
    addr: SocketAddr,
    /// Its stderr (JSON log lines), appended over every life.
    log: tempfile::NamedTempFile,
    child: Option<Child>,
}

impl ShippingProcess {
    /// Starts it on a free port and waits for `READY <port>`.
    pub async fn start(
        app: &ShippingApp,
        config: ShippingConfig,
    ) -> Result<ShippingProcess, String> {
        let log = tempfile::Builder::new()
            .prefix("nestjs-shipping-")
            .suffix(".log")
            .tempfile()
            .map_err(|e| format!("a log file for nestjs-shipping: {e}"))?;
        let mut shipping = ShippingProcess {
            app: app.clone(),
            config,
            addr: SocketAddr::from(([127, 0, 0, 1], 0)),
            log,
            child: None,
        };
        shipping.spawn().await?;
        Ok(shipping)
    }

    /// Where it listens.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// How it runs (its database, its unshippable products).
    pub fn config(&self) -> &ShippingConfig {
        &self.config
    }

    /// The steps file entry of the step it serves: `shipping`, `ship` /
    /// `cancel_shipment`, at its address.
    pub fn step(&self) -> orchestrator::steps_file::StepSpec {
        crate::generic_step("shipping", self.addr, Some(("ship", "cancel_shipment")))
    }

    /// Its pid while it runs.
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    /// SIGKILLs it (no chance to finish what it was doing) and reaps it.
    pub fn kill9(&mut self) -> Result<(), String> {
        let mut child = self.child.take().ok_or("nestjs-shipping is not running")?;
        child
            .kill()
            .map_err(|e| format!("SIGKILL nestjs-shipping: {e}"))?;
        child
            .wait()
            .map_err(|e| format!("reaping nestjs-shipping: {e}"))?;
        Ok(())
    }

    /// Starts it again (stopped first if it runs) on the same port and
    /// database; returns once it prints `READY`.
    pub async fn restart(&mut self) -> Result<(), String> {
        if let Some(child) = self.child.take() {
            stop(child).await?;
        }
        self.spawn().await
    }

    /// The last lines of its log, for a failure message.
    pub fn log_tail(&self) -> String {
        process::log_tail(self.log.path(), 20).join("\n")
    }

    /// The last `n` lines of its log that contain `needle` (a request id),
    /// over every life, for a failure message.
    pub fn log_lines_with(&self, needle: &str, n: usize) -> String {
        let log = std::fs::read_to_string(self.log.path()).unwrap_or_default();
        let lines: Vec<&str> = log.lines().filter(|l| l.contains(needle)).collect();
        lines[lines.len().saturating_sub(n)..].join("\n")
    }

    fn command(&self) -> Result<Command, String> {
        let stderr = self
            .log
            .reopen()
            .map_err(|e| format!("nestjs-shipping's log: {e}"))?;
        let mut cmd = Command::new("node");
        cmd.arg(&self.app.main)
            // Nothing of the test's environment may redirect it.
            .env_clear()
            .envs(std::env::var_os("PATH").map(|p| ("PATH", p)))
            .env("SHIPPING_LISTEN", self.addr.to_string())
            .env("MONGODB_URI", &self.config.mongodb_uri)
            .env("MONGODB_DATABASE", &self.config.database)
            .env("UNSHIPPABLE_PRODUCTS", self.config.unshippable.join(","))
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::from(stderr));
        if let Some(token) = &self.config.service_token {
            cmd.env("SERVICE_TOKEN", token);
        }
        Ok(cmd)
    }

    /// Spawns a life and waits for its `READY <port>` (the port kept for
    /// restarts).
    async fn spawn(&mut self) -> Result<(), String> {
        // A restart may find the old port not yet free: a few tries.
        let mut why = String::new();
        for _ in 0..5 {
            let mut child = process::spawn_tied(self.command()?)
                .map_err(|e| format!("cannot run node: {e}"))?;
            let Some(stdout) = child.stdout.take() else {
                return Err("nestjs-shipping has no stdout".into());
            };
            let ready = process::watch_for_ready(stdout);
            let port = tokio::task::spawn_blocking(move || ready.recv_timeout(READY_WITHIN))
                .await
                .map_err(|e| format!("waiting for READY: {e}"))?;
            match port {
                Ok(Some(port)) => {
                    self.addr.set_port(port);
                    self.child = Some(child);
                    return Ok(());
                }
                outcome => {
                    stop(child).await?;
                    why = match outcome {
                        Err(_) => format!("no READY within {READY_WITHIN:?}"),
                        _ => "it exited before READY".to_owned(),
                    };
                    if self.addr.port() == 0 {
                        break;
                    }
                    tokio::time::sleep(Duration::from_millis(200)).await;
                }
            }
        }
        Err(format!(
            "nestjs-shipping did not start ({why}); its log:\n{}",
            self.log_tail()
        ))
    }
}

impl Drop for ShippingProcess {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take()
            && let Err(e) = process::stop(&mut child, GRACE)
        {
            eprintln!("stopping nestjs-shipping pid {}: {e}", child.id());
        }
    }
}

/// Stops a life (SIGTERM, SIGKILL after the grace) off the async threads.
async fn stop(mut child: Child) -> Result<(), String> {
    tokio::task::spawn_blocking(move || process::stop(&mut child, GRACE))
        .await
        .map_err(|e| format!("stopping nestjs-shipping: {e}"))?
        .map(|_| ())
        .map_err(|e| format!("stopping nestjs-shipping: {e}"))
}
