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
//! The process ([`crate::node_process`]) is SIGKILLed when this test
//! process dies, stopped by pid (SIGTERM, then SIGKILL) when its
//! [`ShippingProcess`] is dropped, also while a failing test unwinds, and
//! can be SIGKILLed and started again on the same port and database.

use crate::node_process::{self, NodeChild};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};

/// The app's directory in this repository.
fn app_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples/nestjs-shipping")
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
        node_process::require_node("the NestJS participant")?;
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
    /// ([`node_process::examples_required`]).
    pub fn find() -> Option<ShippingApp> {
        node_process::found("the NestJS participant", Self::locate())
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
    node: NodeChild,
    config: ShippingConfig,
}

impl ShippingProcess {
    /// Starts it on a free port and waits for `READY <port>`.
    pub async fn start(
        app: &ShippingApp,
        config: ShippingConfig,
    ) -> Result<ShippingProcess, String> {
        let mut env = vec![
            ("MONGODB_URI", config.mongodb_uri.clone()),
            ("MONGODB_DATABASE", config.database.clone()),
            ("UNSHIPPABLE_PRODUCTS", config.unshippable.join(",")),
        ];
        if let Some(token) = &config.service_token {
            env.push(("SERVICE_TOKEN", token.clone()));
        }
        let node =
            NodeChild::start("nestjs-shipping", app.main.clone(), "SHIPPING_LISTEN", env).await?;
        Ok(ShippingProcess { node, config })
    }

    /// Where it listens.
    pub fn addr(&self) -> SocketAddr {
        self.node.addr()
    }

    /// How it runs (its database, its unshippable products).
    pub fn config(&self) -> &ShippingConfig {
        &self.config
    }

    /// The steps file entry of the step it serves: `shipping`, `ship` /
    /// `cancel_shipment`, at its address.
    pub fn step(&self) -> orchestrator::steps_file::StepSpec {
        crate::generic_step("shipping", self.addr(), Some(("ship", "cancel_shipment")))
    }

    /// Its pid while it runs.
    pub fn pid(&self) -> Option<u32> {
        self.node.pid()
    }

    /// SIGKILLs it (no chance to finish what it was doing) and reaps it.
    pub fn kill9(&mut self) -> Result<(), String> {
        self.node.kill9()
    }

    /// Starts it again (stopped first if it runs) on the same port and
    /// database; returns once it prints `READY`.
    pub async fn restart(&mut self) -> Result<(), String> {
        self.node.restart().await
    }

    /// The last lines of its log, for a failure message.
    pub fn log_tail(&self) -> String {
        self.node.log_tail()
    }

    /// The last `n` lines of its log that contain `needle` (a request id),
    /// over every life, for a failure message.
    pub fn log_lines_with(&self, needle: &str, n: usize) -> String {
        self.node.log_lines_with(needle, n)
    }
}
