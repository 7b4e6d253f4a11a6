//! `--spawn`: the real `orchestrator`, `payment-svc` and `inventory-svc`
//! binaries (found next to the loadgen executable) as child processes on free
//! 127.0.0.1 ports, with their data in a fresh temp dir or in fresh MongoDB
//! databases (on `MONGODB_URI`, else on a MongoDB test server it starts).
//! With `--steps 3` (up to 5) also `loyalty-svc`, on the same backend,
//! and the orchestrator runs the steps file written beside the data
//! (payment, inventory, then one loyalty step per extra step, all served
//! by that loyalty-svc), so each extra step costs the orchestrator what a
//! configured generic step costs in production.
//! Dropping the [`Stack`] stops every child, the services first.

use crate::plan::Urls;
use crate::procs::Watched;
use saga_tests::mongo_server::{self, MongoServer, ServerOptions};
use saga_tests::process;
use std::fs::File;
use std::net::{SocketAddr, TcpListener};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};
use tonic::transport::Endpoint;
use tonic_health::pb::HealthCheckRequest;
use tonic_health::pb::health_check_response::ServingStatus;
use tonic_health::pb::health_client::HealthClient;

/// The service binaries, in report order.
pub const BINARIES: [&str; 3] = ["orchestrator", "payment-svc", "inventory-svc"];

/// The third step's service (`--steps 3`), reported after [`BINARIES`].
pub const LOYALTY: &str = "loyalty-svc";

/// The names of the steps loyalty-svc serves in a saga of `steps` steps.
pub use saga_tests::loyalty::steps_after_the_built_ins as loyalty_steps;

/// The services of a stack with (`loyalty`) or without loyalty-svc, in
/// report order.
pub fn services(loyalty: bool) -> Vec<&'static str> {
    let mut all = BINARIES.to_vec();
    if loyalty {
        all.push(LOYALTY);
    }
    all
}

/// How long a service gets to exit after SIGTERM before SIGKILL.
const STOP_GRACE: Duration = Duration::from_secs(3);

/// What precedes the data dir when it is kept (the test command greps it
/// to show the logs of a failed run).
pub const KEPT: &str = "loadgen: data and logs kept in";

/// How to start the stack.
#[derive(Clone, Debug)]
pub struct SpawnConfig {
    pub mongo: bool,
    /// `process` or `power-loss`, passed to every service as `--durability`.
    pub durability: &'static str,
    pub bin_dir: PathBuf,
    pub tmp_parent: Option<PathBuf>,
    pub keep_data: bool,
    /// Run id, used to name the MongoDB databases.
    pub run: String,
    /// Admin token the services require for Deposit/AddStock (ADMIN_TOKEN).
    pub admin_token: Option<String>,
    /// When store bytes per saga are measured: the services' purge interval
    /// (PURGE_INTERVAL), the period of their `store_size_bytes` gauge, and
    /// metrics are served on every backend.
    pub purge_interval: Option<Duration>,
    /// `--steps`: above 2, loyalty-svc too, and the orchestrator on a
    /// steps file.
    pub steps: u8,
}

impl SpawnConfig {
    /// Whether the stack runs loyalty-svc (a saga of more than two steps).
    pub fn loyalty(&self) -> bool {
        self.steps > 2
    }
}

/// One service process.
pub struct Proc {
    pub name: &'static str,
    pub child: Child,
    pub log: PathBuf,
}

/// The running stack; dropping it stops every child (SIGTERM, then SIGKILL).
pub struct Stack {
    pub orchestrator: String,
    pub payment: String,
    pub inventory: String,
    /// loyalty-svc's URL (`--steps 3`).
    pub loyalty: Option<String>,
    /// orchestrator, payment-svc, inventory-svc (, loyalty-svc).
    pub procs: Vec<Proc>,
    /// The MongoDB test server, if the stack started one; stopped after the
    /// services (it is dropped after [`Stack::drop`] ran).
    mongo: Option<MongoServer>,
    /// "embedded (SQLite)", the test server's label or "MongoDB at ...".
    pub store_label: String,
    /// The services' Prometheus endpoints (orchestrator, payment-svc,
    /// inventory-svc), served on MongoDB (to count commands per saga) and
    /// whenever store bytes per saga are measured; otherwise embedded runs
    /// turn metrics off (empty).
    pub metrics: Vec<SocketAddr>,
    dir: Option<tempfile::TempDir>,
    pub dir_path: PathBuf,
    /// Whether dropping the stack deletes its data dir: only once a run
    /// went well ([`Stack::discard_data`]). A stack dropped otherwise — a
    /// failed start, an error, a timeout, a signal — keeps it, logs
    /// included, and says where.
    discard_data: bool,
}

/// Where the service binaries are expected: next to this executable.
pub fn default_bin_dir() -> PathBuf {
    std::env::current_exe()
        .ok()
        .and_then(|exe| exe.parent().map(Path::to_path_buf))
        .unwrap_or_else(|| PathBuf::from("."))
}

/// Checks that the service binaries (with loyalty-svc when `loyalty`)
/// exist in `dir`.
pub fn check_binaries(dir: &Path, loyalty: bool) -> Result<(), String> {
    let missing: Vec<String> = services(loyalty)
        .iter()
        .map(|b| dir.join(b))
        .filter(|p| !p.is_file())
        .map(|p| p.display().to_string())
        .collect();
    if missing.is_empty() {
        Ok(())
    } else {
        Err(format!(
            "service binaries not found: {}; build them first with `cargo build --release --workspace --bins` (or point --bin-dir at them)",
            missing.join(", ")
        ))
    }
}

/// A port that was free a moment ago. All are reserved at once so they
/// differ; the tiny window before the service binds is accepted.
fn free_ports(n: usize) -> Result<Vec<u16>, String> {
    let listeners: Vec<TcpListener> = (0..n)
        .map(|_| TcpListener::bind(("127.0.0.1", 0)).map_err(|e| format!("reserving a port: {e}")))
        .collect::<Result<_, _>>()?;
    listeners
        .iter()
        .map(|l| {
            l.local_addr()
                .map(|a| a.port())
                .map_err(|e| format!("reading a reserved port: {e}"))
        })
        .collect()
}

/// Whether `bin --help` mentions `flag`.
fn supports_flag(bin: &Path, flag: &str) -> bool {
    Command::new(bin)
        .arg("--help")
        .stdin(Stdio::null())
        .stderr(Stdio::null())
        .output()
        .is_ok_and(|o| String::from_utf8_lossy(&o.stdout).contains(flag))
}

/// The last `n` lines of a log file, for error messages.
pub fn log_tail(path: &Path, n: usize) -> String {
    let lines = process::log_tail(path, n);
    if lines.iter().all(|l| l.trim().is_empty()) {
        return "(empty)".to_owned();
    }
    lines.join("\n")
}

/// Number of lines in a log file.
fn log_lines(path: &Path) -> usize {
    std::fs::read_to_string(path)
        .map(|t| t.lines().count())
        .unwrap_or(0)
}

fn log_file(path: &Path) -> Result<(Stdio, Stdio), String> {
    let file = File::create(path).map_err(|e| format!("creating {}: {e}", path.display()))?;
    let second = file
        .try_clone()
        .map_err(|e| format!("cloning {}: {e}", path.display()))?;
    Ok((Stdio::from(file), Stdio::from(second)))
}

impl Stack {
    /// Starts the stack and waits until every service answers its gRPC
    /// health check (at most `ready_within`).
    pub async fn start(config: &SpawnConfig, ready_within: Duration) -> Result<Stack, String> {
        check_binaries(&config.bin_dir, config.loyalty())?;
        let mut builder = tempfile::Builder::new();
        builder.prefix("loadgen-");
        let dir = match &config.tmp_parent {
            Some(parent) => builder.tempdir_in(parent),
            None => builder.tempdir(),
        }
        .map_err(|e| format!("creating a temp dir: {e}"))?;
        let dir_path = dir.path().to_path_buf();
        // gRPC ports of orchestrator, payment-svc, inventory-svc, then their
        // metrics ports; then loyalty-svc's gRPC and metrics ports.
        let ports = free_ports(if config.loyalty() { 8 } else { 6 })?;
        let url = |port: u16| format!("http://127.0.0.1:{port}");
        let mut stack = Stack {
            orchestrator: url(ports[0]),
            payment: url(ports[1]),
            inventory: url(ports[2]),
            loyalty: config.loyalty().then(|| url(ports[6])),
            procs: Vec::new(),
            mongo: None,
            store_label: "embedded (SQLite)".to_owned(),
            metrics: Vec::new(),
            dir: Some(dir),
            dir_path,
            discard_data: false,
        };
        let mongo_uri = if config.mongo {
            Some(stack.open_mongo().await?)
        } else {
            None
        };
        let deadline = Instant::now() + ready_within;
        let data_dir = stack.dir_path.clone();
        let service = |name, port, metrics| {
            service_command(config, &data_dir, mongo_uri.as_deref(), name, port, metrics)
        };
        stack.spawn("payment-svc", service("payment-svc", ports[1], ports[4])?)?;
        stack.spawn(
            "inventory-svc",
            service("inventory-svc", ports[2], ports[5])?,
        )?;
        if config.loyalty() {
            stack.spawn(LOYALTY, service(LOYALTY, ports[6], ports[7])?)?;
        }
        stack.wait_ready("payment-svc", deadline).await?;
        stack.wait_ready("inventory-svc", deadline).await?;
        let mut orchestrator = service("orchestrator", ports[0], ports[3])?;
        orchestrator.arg("--step-address").arg(format!(
            "payment={},inventory={}",
            stack.payment, stack.inventory
        ));
        if let Some(loyalty) = stack.loyalty.clone() {
            stack.wait_ready(LOYALTY, deadline).await?;
            let steps = stack.write_steps_file(&loyalty, config.steps)?;
            orchestrator.arg("--steps-file").arg(steps);
        }
        stack.spawn("orchestrator", orchestrator)?;
        stack.wait_ready("orchestrator", deadline).await?;
        if serves_metrics(config) {
            let mut metrics: Vec<u16> = ports[3..6].to_vec();
            if config.loyalty() {
                metrics.push(ports[7]);
            }
            stack.metrics = metrics
                .iter()
                .map(|p| SocketAddr::from(([127, 0, 0, 1], *p)))
                .collect();
        }
        // Report order: orchestrator, payment-svc, inventory-svc, loyalty-svc.
        let order = services(true);
        stack
            .procs
            .sort_by_key(|p| order.iter().position(|b| *b == p.name));
        Ok(stack)
    }

    /// Writes the saga of `steps` steps (payment, inventory, then the
    /// [`loyalty_steps`] at `loyalty`) as a steps file in the data dir;
    /// returns its path.
    fn write_steps_file(&self, loyalty: &str, steps: u8) -> Result<PathBuf, String> {
        let path = self.dir_path.join("saga-steps.toml");
        let text = saga_tests::loyalty::steps_file_text(steps, loyalty);
        std::fs::write(&path, text).map_err(|e| format!("writing {}: {e}", path.display()))?;
        Ok(path)
    }

    /// The MongoDB URI: MONGODB_URI when set, else the test server's, which
    /// this starts (its log in the data dir).
    async fn open_mongo(&mut self) -> Result<String, String> {
        if let Some(uri) = mongo_server::external_uri() {
            self.store_label = format!("MongoDB at {}", mongo_client::redact(&uri));
            return Ok(uri);
        }
        let options = ServerOptions {
            log: Some(self.dir_path.join(format!("{}.log", mongo_server::NAME))),
            ..ServerOptions::default()
        };
        let server = tokio::task::spawn_blocking(move || MongoServer::start(options))
            .await
            .map_err(|e| format!("starting the MongoDB test server: {e}"))??;
        self.store_label = server.label().to_owned();
        let uri = server.uri();
        self.mongo = Some(server);
        Ok(uri)
    }

    /// Starts service `name`, logging to `<data dir>/<name>.log`.
    fn spawn(&mut self, name: &'static str, mut cmd: Command) -> Result<(), String> {
        let log = self.dir_path.join(format!("{name}.log"));
        let (out, err) = log_file(&log)?;
        cmd.stdout(out).stderr(err);
        let child = process::spawn_tied(cmd).map_err(|e| format!("starting {name}: {e}"))?;
        self.procs.push(Proc { name, child, log });
        Ok(())
    }

    /// Waits until service `name` answers its health check as SERVING.
    async fn wait_ready(&mut self, name: &str, deadline: Instant) -> Result<(), String> {
        let url = match name {
            "orchestrator" => self.orchestrator.clone(),
            "payment-svc" => self.payment.clone(),
            LOYALTY => self.loyalty.clone().unwrap_or_default(),
            _ => self.inventory.clone(),
        };
        let endpoint = Endpoint::from_shared(url.clone())
            .map_err(|e| format!("{url}: {e}"))?
            .connect_timeout(Duration::from_millis(500))
            .timeout(Duration::from_secs(2));
        loop {
            if let Some(proc) = self.procs.iter_mut().find(|p| p.name == name)
                && let Ok(Some(status)) = proc.child.try_wait()
            {
                return Err(format!(
                    "{name} exited during start-up ({status}); its log:\n{}",
                    log_tail(&proc.log, 20)
                ));
            }
            let last = match health(&endpoint).await {
                Ok(()) => return Ok(()),
                Err(e) => e,
            };
            if Instant::now() >= deadline {
                let log = self
                    .procs
                    .iter()
                    .find(|p| p.name == name)
                    .map(|p| log_tail(&p.log, 20))
                    .unwrap_or_default();
                return Err(format!(
                    "{name} did not become ready at {url} ({last}); its log:\n{log}"
                ));
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// orchestrator, payment-svc, inventory-svc URLs.
    pub fn urls(&self) -> Urls {
        (
            self.orchestrator.clone(),
            self.payment.clone(),
            self.inventory.clone(),
        )
    }

    /// The processes to report on: the services, then the MongoDB test
    /// server if one was started.
    pub fn watched(&self) -> Vec<Watched> {
        let services = self.procs.iter().map(|p| Watched {
            name: p.name.to_owned(),
            pid: p.child.id(),
        });
        let server = self.mongo.as_ref().and_then(|m| {
            m.pid().map(|pid| Watched {
                name: mongo_server::NAME.to_owned(),
                pid,
            })
        });
        services.chain(server).collect()
    }

    /// Every log: (name, path), the services' then the test server's.
    fn logs(&self) -> Vec<(&str, &Path)> {
        let services = self.procs.iter().map(|p| (p.name, p.log.as_path()));
        let server = self
            .mongo
            .as_ref()
            .and_then(|m| m.log().map(|log| (mongo_server::NAME, log)));
        services.chain(server).collect()
    }

    /// Lines in all the logs together.
    pub fn log_lines(&self) -> usize {
        self.logs().iter().map(|(_, log)| log_lines(log)).sum()
    }

    /// Prints the end of every non-empty log to stderr.
    pub fn dump_logs(&self, lines: usize) {
        for (name, log) in self.logs() {
            let tail = log_tail(log, lines);
            if !tail.trim().is_empty() {
                eprintln!("--- last lines of {name} ({}):", log.display());
                eprintln!("{tail}");
            }
        }
    }

    /// Keeps the data dir after exit (`--keep-data`, or a failed run).
    pub fn keep(&mut self) -> PathBuf {
        if let Some(dir) = self.dir.take() {
            return dir.keep();
        }
        self.dir_path.clone()
    }

    /// Lets dropping the stack delete its data dir (unless
    /// [`Stack::keep`] kept it): the run went well.
    pub fn discard_data(&mut self) {
        self.discard_data = true;
    }
}

impl Drop for Stack {
    fn drop(&mut self) {
        // Orchestrator first, so no saga is driven against a stopped
        // participant; the MongoDB test server (a field) after all of them.
        for p in &mut self.procs {
            let _ = process::stop(&mut p.child, STOP_GRACE);
        }
        // A run that did not go well keeps its data and logs for a look
        // (the test command prints the logs from the line below).
        if !self.discard_data && self.dir.is_some() {
            eprintln!("{KEPT} {}", self.keep().display());
        }
    }
}

/// Ok when the service at `endpoint` answers its health check as SERVING;
/// else what it said.
async fn health(endpoint: &Endpoint) -> Result<(), String> {
    let channel = endpoint.connect().await.map_err(|e| e.to_string())?;
    let reply = HealthClient::new(channel)
        .check(HealthCheckRequest {
            service: String::new(),
        })
        .await;
    match reply {
        Ok(r) if r.get_ref().status == ServingStatus::Serving as i32 => Ok(()),
        Ok(r) => Err(format!("health status {}", r.get_ref().status)),
        Err(s) => Err(format!("{:?}: {}", s.code(), s.message())),
    }
}

/// Whether the spawned services serve metrics: on MongoDB (commands per
/// saga) and when store bytes per saga are measured.
fn serves_metrics(config: &SpawnConfig) -> bool {
    config.mongo || config.purge_interval.is_some()
}

/// The command that runs service `name` on `port` (metrics on `metrics`),
/// its data under `data_dir` or in MongoDB at `mongo_uri`. Nothing from our
/// environment may change the set-up.
fn service_command(
    config: &SpawnConfig,
    data_dir: &Path,
    mongo_uri: Option<&str>,
    name: &'static str,
    port: u16,
    metrics: u16,
) -> Result<Command, String> {
    let mut cmd = Command::new(config.bin_dir.join(name));
    let data = data_dir.join(name);
    std::fs::create_dir_all(&data).map_err(|e| format!("creating {}: {e}", data.display()))?;
    cmd.arg("--listen")
        .arg(SocketAddr::from(([127, 0, 0, 1], port)).to_string())
        .arg("--data-dir")
        .arg(&data)
        .arg("--durability")
        .arg(config.durability)
        .env("RUST_LOG", "warn")
        // The orchestrator's console would take port 8080; not measured.
        .env("NO_CONSOLE", "true")
        .env_remove("MONGODB_URI")
        .stdin(Stdio::null());
    // Nothing from the caller's environment may change the set-up (fault
    // injection, other addresses, databases).
    for (key, _) in std::env::vars_os() {
        let key = key.to_string_lossy().into_owned();
        if key.starts_with("FAULT_")
            || key.starts_with("TLS_")
            || key.ends_with("_MONGODB_DATABASE")
            || key.ends_with("_LISTEN")
            || key.ends_with("_ADDR")
            || key.ends_with("_DATA_DIR")
            || key == "SAGA_STEPS_FILE"
            || key == loyalty_svc::rules::BLOCKED_ENV
        {
            cmd.env_remove(key);
        }
    }
    // Metrics cost CPU on every call: off, except on MongoDB, where the
    // report counts each service's commands per saga from them, and when
    // the report gives store bytes per saga from `store_size_bytes`.
    if serves_metrics(config) {
        cmd.env_remove("NO_METRICS");
    } else {
        cmd.env("NO_METRICS", "true");
    }
    // The gauge is refreshed once per purge round: a short interval, so
    // the report need not wait long for a fresh value.
    if let Some(interval) = config.purge_interval {
        cmd.env(
            "PURGE_INTERVAL",
            service_kit::limits::format_duration(interval),
        );
    }
    match &config.admin_token {
        Some(token) => cmd.env("ADMIN_TOKEN", token),
        None => cmd.env_remove("ADMIN_TOKEN"),
    };
    if let Some(uri) = mongo_uri {
        let short = name.trim_end_matches("-svc");
        cmd.arg("--mongodb-uri")
            .arg(uri)
            .arg("--mongodb-database")
            .arg(format!("{}_{short}", config.run.replace('-', "_")));
    }
    // Newer services serve Prometheus metrics on a fixed default port: give
    // each a free one so runs never collide.
    if supports_flag(&config.bin_dir.join(name), "--metrics-listen") {
        cmd.arg("--metrics-listen")
            .arg(SocketAddr::from(([127, 0, 0, 1], metrics)).to_string());
    }
    Ok(cmd)
}
