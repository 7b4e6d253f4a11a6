//! `--spawn`: the real `orchestrator`, `payment-svc` and `inventory-svc`
//! binaries (found next to the loadgen executable) as child processes on free
//! 127.0.0.1 ports, with their data in a fresh temp dir or in fresh MongoDB
//! databases. Dropping the [`Stack`] stops every child.

use std::fs::File;
use std::io::{BufRead, BufReader};
use std::net::{SocketAddr, TcpListener};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::time::{Duration, Instant};
use tonic::transport::Endpoint;
use tonic_health::pb::HealthCheckRequest;
use tonic_health::pb::health_check_response::ServingStatus;
use tonic_health::pb::health_client::HealthClient;

/// The service binaries, in start order of the participants.
pub const BINARIES: [&str; 3] = ["orchestrator", "payment-svc", "inventory-svc"];

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
}

/// One child process.
pub struct Proc {
    pub name: &'static str,
    pub child: Child,
    pub log: PathBuf,
    /// Held open so the MongoDB emulator (which exits when its stdin closes)
    /// lives exactly as long as the stack.
    stdin: Option<ChildStdin>,
}

impl Proc {
    pub fn pid(&self) -> u32 {
        self.child.id()
    }
}

/// The running stack; dropping it stops every child (SIGTERM, then SIGKILL).
pub struct Stack {
    pub orchestrator: String,
    pub payment: String,
    pub inventory: String,
    /// Services first (orchestrator, payment-svc, inventory-svc), then the
    /// MongoDB emulator if one was started.
    pub procs: Vec<Proc>,
    /// "embedded (SQLite)", "emulated MongoDB ..." or "MongoDB at ...".
    pub store_label: String,
    dir: Option<tempfile::TempDir>,
    pub dir_path: PathBuf,
}

/// Where the service binaries are expected: next to this executable.
pub fn default_bin_dir() -> PathBuf {
    std::env::current_exe()
        .ok()
        .and_then(|exe| exe.parent().map(Path::to_path_buf))
        .unwrap_or_else(|| PathBuf::from("."))
}

/// Checks that the three service binaries exist in `dir`.
pub fn check_binaries(dir: &Path) -> Result<(), String> {
    let missing: Vec<String> = BINARIES
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

/// A port that was free a moment ago. All three are reserved at once so
/// they differ; the tiny window before the service binds is accepted.
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

fn mongo_script() -> Option<PathBuf> {
    let compiled = Path::new(env!("CARGO_MANIFEST_DIR")).join("../scripts/mongo-emulator.sh");
    let beside = default_bin_dir().join("../../scripts/mongo-emulator.sh");
    [compiled, beside].into_iter().find(|p| p.is_file())
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
    let text = std::fs::read_to_string(path).unwrap_or_default();
    if text.trim().is_empty() {
        return "(empty)".to_owned();
    }
    let lines: Vec<&str> = text.lines().collect();
    let from = lines.len().saturating_sub(n);
    lines[from..].join("\n")
}

/// Number of lines in a log file.
pub fn log_lines(path: &Path) -> usize {
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

/// Ties a child to this process: it gets SIGKILL if the thread that
/// spawned it dies. Children are spawned from the thread running the
/// runtime's `block_on` (the main thread), which lives as long as the
/// process, so this only fires when loadgen itself is killed.
fn die_with_parent(cmd: &mut Command) {
    // SAFETY: prctl is async-signal-safe and touches no memory of the parent.
    unsafe {
        cmd.pre_exec(|| {
            libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL);
            Ok(())
        });
    }
}

impl Stack {
    /// Starts the stack and waits until every service answers its gRPC
    /// health check (at most `ready_within`).
    pub async fn start(config: &SpawnConfig, ready_within: Duration) -> Result<Stack, String> {
        check_binaries(&config.bin_dir)?;
        let mut builder = tempfile::Builder::new();
        builder.prefix("loadgen-");
        let dir = match &config.tmp_parent {
            Some(parent) => builder.tempdir_in(parent),
            None => builder.tempdir(),
        }
        .map_err(|e| format!("creating a temp dir: {e}"))?;
        let dir_path = dir.path().to_path_buf();
        // gRPC ports of orchestrator, payment-svc, inventory-svc, then their
        // metrics ports.
        let ports = free_ports(6)?;
        let url = |port: u16| format!("http://127.0.0.1:{port}");
        let mut stack = Stack {
            orchestrator: url(ports[0]),
            payment: url(ports[1]),
            inventory: url(ports[2]),
            procs: Vec::new(),
            store_label: "embedded (SQLite)".to_owned(),
            dir: Some(dir),
            dir_path: dir_path.clone(),
        };

        // MongoDB: MONGODB_URI when set, else the wire-protocol emulator.
        let mongo_uri = if config.mongo {
            match std::env::var("MONGODB_URI") {
                Ok(uri) if !uri.is_empty() => {
                    stack.store_label = format!("MongoDB at {}", mongo_client::redact(&uri));
                    Some(uri)
                }
                _ => {
                    let log = dir_path.join("mongo-emulator.log");
                    let (emulator, port) =
                        tokio::task::spawn_blocking(move || start_emulator(&log))
                            .await
                            .map_err(|e| format!("starting the MongoDB emulator: {e}"))??;
                    stack.procs.push(emulator);
                    stack.store_label =
                        "emulated MongoDB (scripts/mongo-emulator.sh: mockupdb + mongomock, not a real server)"
                            .to_owned();
                    Some(format!("mongodb://127.0.0.1:{port}/?directConnection=true"))
                }
            }
        } else {
            None
        };

        let service = |name: &'static str, port: u16, metrics: u16| -> Result<Command, String> {
            let mut cmd = Command::new(config.bin_dir.join(name));
            let data = dir_path.join(name);
            std::fs::create_dir_all(&data)
                .map_err(|e| format!("creating {}: {e}", data.display()))?;
            cmd.arg("--listen")
                .arg(SocketAddr::from(([127, 0, 0, 1], port)).to_string())
                .arg("--data-dir")
                .arg(&data)
                .arg("--durability")
                .arg(config.durability)
                .env("RUST_LOG", "warn")
                .env("NO_METRICS", "true")
                .env_remove("MONGODB_URI")
                .stdin(Stdio::null());
            // Nothing from the caller's environment may change the set-up
            // (fault injection, other addresses, databases).
            for (key, _) in std::env::vars_os() {
                let key = key.to_string_lossy().into_owned();
                if key.starts_with("FAULT_")
                    || key.starts_with("TLS_")
                    || key.ends_with("_MONGODB_DATABASE")
                    || key.ends_with("_LISTEN")
                    || key.ends_with("_ADDR")
                    || key.ends_with("_DATA_DIR")
                {
                    cmd.env_remove(key);
                }
            }
            match &config.admin_token {
                Some(token) => cmd.env("ADMIN_TOKEN", token),
                None => cmd.env_remove("ADMIN_TOKEN"),
            };
            if let Some(uri) = &mongo_uri {
                let short = name.trim_end_matches("-svc");
                cmd.arg("--mongodb-uri")
                    .arg(uri)
                    .arg("--mongodb-database")
                    .arg(format!("{}_{short}", config.run.replace('-', "_")));
            }
            // Newer services serve Prometheus metrics on a fixed default
            // port: give each a free one so runs never collide.
            if supports_flag(&config.bin_dir.join(name), "--metrics-listen") {
                cmd.arg("--metrics-listen")
                    .arg(SocketAddr::from(([127, 0, 0, 1], metrics)).to_string());
            }
            die_with_parent(&mut cmd);
            Ok(cmd)
        };

        let deadline = Instant::now() + ready_within;
        let mut payment = service("payment-svc", ports[1], ports[4])?;
        stack.spawn("payment-svc", &mut payment)?;
        let mut inventory = service("inventory-svc", ports[2], ports[5])?;
        stack.spawn("inventory-svc", &mut inventory)?;
        stack
            .wait_ready("payment-svc", &stack.payment.clone(), deadline)
            .await?;
        stack
            .wait_ready("inventory-svc", &stack.inventory.clone(), deadline)
            .await?;
        let mut orchestrator = service("orchestrator", ports[0], ports[3])?;
        orchestrator
            .arg("--payment-addr")
            .arg(&stack.payment)
            .arg("--inventory-addr")
            .arg(&stack.inventory);
        stack.spawn("orchestrator", &mut orchestrator)?;
        stack
            .wait_ready("orchestrator", &stack.orchestrator.clone(), deadline)
            .await?;
        // Report order: orchestrator, payment-svc, inventory-svc, emulator.
        stack.procs.sort_by_key(|p| {
            BINARIES
                .iter()
                .position(|b| *b == p.name)
                .unwrap_or(BINARIES.len())
        });
        Ok(stack)
    }

    fn spawn(&mut self, name: &'static str, cmd: &mut Command) -> Result<(), String> {
        let log = self.dir_path.join(format!("{name}.log"));
        let (out, err) = log_file(&log)?;
        let child = cmd
            .stdout(out)
            .stderr(err)
            .spawn()
            .map_err(|e| format!("starting {name}: {e}"))?;
        self.procs.push(Proc {
            name,
            child,
            log,
            stdin: None,
        });
        Ok(())
    }

    async fn wait_ready(&mut self, name: &str, url: &str, deadline: Instant) -> Result<(), String> {
        let endpoint = Endpoint::from_shared(url.to_owned())
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
            let last = match endpoint.connect().await {
                Ok(channel) => {
                    let reply = HealthClient::new(channel)
                        .check(HealthCheckRequest {
                            service: String::new(),
                        })
                        .await;
                    match reply {
                        Ok(r) if r.get_ref().status == ServingStatus::Serving as i32 => {
                            return Ok(());
                        }
                        Ok(r) => format!("health status {}", r.get_ref().status),
                        Err(s) => format!("{:?}: {}", s.code(), s.message()),
                    }
                }
                Err(e) => e.to_string(),
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

    /// Prints the end of every non-empty service log to stderr.
    pub fn dump_logs(&self, lines: usize) {
        for p in &self.procs {
            let tail = log_tail(&p.log, lines);
            if !tail.trim().is_empty() {
                eprintln!("--- last lines of {} ({}):", p.name, p.log.display());
                eprintln!("{tail}");
            }
        }
    }

    /// Keeps the data dir after exit (`--keep-data`).
    pub fn keep(&mut self) -> PathBuf {
        if let Some(dir) = self.dir.take() {
            return dir.keep();
        }
        self.dir_path.clone()
    }
}

impl Drop for Stack {
    fn drop(&mut self) {
        // Orchestrator first, so no saga is driven against a stopped
        // participant; the emulator last.
        for p in &mut self.procs {
            p.stdin.take();
            if let Ok(None) = p.child.try_wait() {
                if let Ok(pid) = i32::try_from(p.child.id()) {
                    // SAFETY: plain syscall on the pid of our own child,
                    // which has not been reaped yet (try_wait said so).
                    unsafe {
                        libc::kill(pid, libc::SIGTERM);
                    }
                }
                let until = Instant::now() + Duration::from_secs(3);
                while Instant::now() < until {
                    if let Ok(Some(_)) = p.child.try_wait() {
                        break;
                    }
                    std::thread::sleep(Duration::from_millis(10));
                }
                let _ = p.child.kill();
            }
            let _ = p.child.wait();
        }
    }
}

/// Starts `scripts/mongo-emulator.sh --port 0`, waits for `READY <port>`.
fn start_emulator(log: &Path) -> Result<(Proc, u16), String> {
    let script = mongo_script().ok_or(
        "scripts/mongo-emulator.sh not found (set MONGODB_URI to use a real MongoDB)".to_owned(),
    )?;
    let (err, _) = log_file(log)?;
    let mut cmd = Command::new("bash");
    cmd.arg(&script)
        .args(["--port", "0"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(err);
    // No die_with_parent here: this runs on a blocking-pool thread, which
    // exits when idle. The emulator exits by itself when its stdin (held
    // by this process) closes, which covers loadgen being killed.
    let mut child = cmd
        .spawn()
        .map_err(|e| format!("running {}: {e}", script.display()))?;
    let stdout = child.stdout.take().ok_or("no emulator stdout")?;
    let stdin = child.stdin.take();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let mut lines = BufReader::new(stdout).lines();
        let mut sent = false;
        for line in lines.by_ref() {
            let Ok(line) = line else { break };
            if !sent && let Some(port) = line.strip_prefix("READY ") {
                let _ = tx.send(port.trim().parse::<u16>().ok());
                sent = true;
            }
        }
        // Keep draining until the emulator exits so it never blocks.
        drop(tx);
    });
    let mut proc = Proc {
        name: "mongo-emulator",
        child,
        log: log.to_path_buf(),
        stdin,
    };
    // The first run may have to create the emulator's venv.
    match rx.recv_timeout(Duration::from_secs(300)) {
        Ok(Some(port)) => Ok((proc, port)),
        other => {
            let _ = proc.child.kill();
            let _ = proc.child.wait();
            Err(format!(
                "the MongoDB emulator did not report READY ({}); its log:\n{}",
                match other {
                    Ok(_) => "bad READY line",
                    Err(_) => "exited or timed out",
                },
                log_tail(log, 20)
            ))
        }
    }
}
