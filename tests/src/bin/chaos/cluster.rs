//! One service as a real child process: spawn, SIGKILL, restart on the
//! same port and data, stop gracefully with SIGTERM. Every child is killed
//! when its [`Proc`] is dropped (also on panic or timeout) and, on Linux,
//! when this process dies ([`saga_tests::process::spawn_tied`]).

use crate::faults::FaultCounts;
use saga_proto::faults::v1 as faults;
use saga_proto::faults::v1::fault_service_client::FaultServiceClient;
use saga_proto::saga::v1 as saga;
use saga_proto::saga::v1::saga_service_client::SagaServiceClient;
use saga_tests::process;
use std::fs::OpenOptions;
use std::io::Write;
use std::net::SocketAddr;
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};
use tonic::transport::{Channel, Endpoint};

/// Which service a process runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    Payment,
    Inventory,
    Orchestrator,
    /// The third step (`--third-step loyalty`).
    Loyalty,
}

impl Role {
    /// Its binary's name, also its name in the output.
    pub fn binary(self) -> &'static str {
        match self {
            Role::Payment => "payment-svc",
            Role::Inventory => "inventory-svc",
            Role::Orchestrator => "orchestrator",
            Role::Loyalty => "loyalty-svc",
        }
    }

    fn index(self) -> u64 {
        match self {
            Role::Payment => 1,
            Role::Inventory => 2,
            Role::Orchestrator => 3,
            Role::Loyalty => 4,
        }
    }
}

/// A free 127.0.0.1 port for a service (bound and released; the service
/// binds it, and binds it again after each restart). It is taken *below*
/// the kernel's ephemeral range: a port from that range, once released,
/// can be given to any outgoing connection — one orchestrator's call to a
/// participant could take the port another orchestrator is about to bind,
/// or a killed service's port before its restart. No port is handed out
/// twice in one run.
pub fn free_addr() -> std::io::Result<SocketAddr> {
    use rand::Rng;
    static GIVEN: std::sync::Mutex<Vec<u16>> = std::sync::Mutex::new(Vec::new());
    let low = std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
        .ok()
        .and_then(|r| r.split_whitespace().next()?.parse::<u16>().ok())
        .unwrap_or(32_768);
    let (from, to) = (10_000u16, low.max(10_001));
    let mut given = GIVEN
        .lock()
        .map_err(|_| std::io::Error::other("port list poisoned"))?;
    let mut rng = rand::rng();
    for _ in 0..1_000 {
        let port = rng.random_range(from..to);
        if given.contains(&port) {
            continue;
        }
        if let Ok(l) = std::net::TcpListener::bind(("127.0.0.1", port)) {
            given.push(port);
            return l.local_addr();
        }
    }
    // Nothing free below the ephemeral range: any free port.
    let l = std::net::TcpListener::bind("127.0.0.1:0")?;
    l.local_addr()
}

/// A lazily connecting channel with a per-call deadline; it reconnects by
/// itself after the server restarts.
pub fn channel(addr: SocketAddr, timeout: Duration) -> Channel {
    Endpoint::from_shared(format!("http://{addr}"))
        .expect("valid endpoint")
        .tcp_nodelay(true)
        .connect_timeout(Duration::from_secs(1))
        .timeout(timeout)
        .connect_lazy()
}

/// One service process, restartable on the same port and storage.
pub struct Proc {
    pub role: Role,
    /// Its name in the output: the binary's, or `orchestrator-<n>` when
    /// several orchestrators run (also its `--instance-id`).
    name: String,
    /// 0 for a participant, 1.. for an orchestrator instance.
    instance: u64,
    pub addr: SocketAddr,
    /// Its Prometheus endpoint, when it serves one (orchestrators only:
    /// the soak scrapes their lease takeovers).
    pub metrics: Option<SocketAddr>,
    bin: PathBuf,
    args: Vec<String>,
    env: Vec<(String, String)>,
    pub log: PathBuf,
    child: Option<Child>,
    /// How many times it was started.
    pub starts: u32,
    seed: u64,
    /// Fault counters of earlier lives (participants only).
    pub earlier_faults: FaultCounts,
    /// How long its last [`Proc::start`] took, from the first spawn until
    /// it answered (retried spawns included).
    pub last_ready: Duration,
}

impl Proc {
    /// A service of `role` run from `bin` with `args` and `env` (nothing
    /// else of our environment but PATH), listening on `addr`, logging to
    /// `log`; not started yet. `seed` seeds each life's fault sequence.
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        role: Role,
        name: String,
        instance: u64,
        bin: PathBuf,
        addr: SocketAddr,
        args: Vec<String>,
        env: Vec<(String, String)>,
        log: PathBuf,
        seed: u64,
    ) -> Proc {
        Proc {
            role,
            name,
            instance,
            metrics: None,
            addr,
            bin,
            args,
            env,
            log,
            child: None,
            starts: 0,
            seed,
            earlier_faults: FaultCounts::default(),
            last_ready: Duration::ZERO,
        }
    }

    /// Serves its metrics on `addr` (passed as `--metrics-listen`).
    pub fn with_metrics(mut self, addr: SocketAddr) -> Proc {
        self.args.push("--metrics-listen".into());
        self.args.push(addr.to_string());
        self.metrics = Some(addr);
        self
    }

    /// Its name in the output.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Its pid while it runs.
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    /// Starts the process (it must not be running).
    pub fn spawn(&mut self) -> Result<(), String> {
        assert!(self.child.is_none(), "{} already running", self.name());
        self.starts += 1;
        let mut log = OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.log)
            .map_err(|e| format!("open {}: {e}", self.log.display()))?;
        let _ = writeln!(
            log,
            "===== chaos: start #{} of {} on {} =====",
            self.starts,
            self.name(),
            self.addr
        );
        let err = log
            .try_clone()
            .map_err(|e| format!("log {}: {e}", self.log.display()))?;
        let mut cmd = Command::new(&self.bin);
        cmd.args(&self.args)
            // Nothing from this environment may redirect a service (e.g. a
            // MONGODB_URI picked up by clap's env fallback).
            .env_clear()
            .envs(std::env::var_os("PATH").map(|p| ("PATH".to_owned(), p)))
            .envs(self.env.iter().map(|(k, v)| (k.clone(), v.clone())))
            // Each life draws its own fault sequence.
            .env(
                "FAULT_SEED",
                (self.seed.wrapping_mul(1000)
                    + self.role.index() * 100
                    + self.instance * 10_000
                    + u64::from(self.starts))
                .to_string(),
            );
        if self.metrics.is_none() {
            // Metrics ports are fixed by default; several soaks (or a dev
            // stack) on one machine must not collide on them.
            cmd.env("NO_METRICS", "true");
        }
        cmd.stdin(Stdio::null())
            .stdout(Stdio::from(log))
            .stderr(Stdio::from(err));
        let child =
            process::spawn_tied(cmd).map_err(|e| format!("spawn {}: {e}", self.bin.display()))?;
        self.child = Some(child);
        Ok(())
    }

    /// The exit status if the process ended on its own.
    pub fn exited(&mut self) -> Option<ExitStatus> {
        let child = self.child.as_mut()?;
        match child.try_wait() {
            Ok(Some(status)) => {
                self.child = None;
                Some(status)
            }
            _ => None,
        }
    }

    /// SIGKILL and reap. Returns whether the process was alive and died of
    /// the SIGKILL.
    pub fn kill9(&mut self) -> Result<(), String> {
        let mut child = self
            .child
            .take()
            .ok_or_else(|| format!("{} is not running", self.name()))?;
        if let Ok(Some(status)) = child.try_wait() {
            return Err(format!(
                "{} had already exited before the SIGKILL ({status})",
                self.name()
            ));
        }
        child
            .kill()
            .map_err(|e| format!("SIGKILL {}: {e}", self.name()))?;
        let status = child
            .wait()
            .map_err(|e| format!("wait {}: {e}", self.name()))?;
        if status.signal() == Some(libc::SIGKILL) {
            Ok(())
        } else {
            Err(format!("{} ended with {status}, not SIGKILL", self.name()))
        }
    }

    /// SIGTERM, then waits up to `grace` for a clean exit (SIGKILL after,
    /// which is an error).
    pub async fn terminate(&mut self, grace: Duration) -> Result<ExitStatus, String> {
        let Some(mut child) = self.child.take() else {
            return Err(format!("{} is not running", self.name()));
        };
        let stopped = tokio::task::spawn_blocking(move || process::stop(&mut child, grace))
            .await
            .map_err(|e| e.to_string())
            .and_then(|r| r.map_err(|e| e.to_string()))
            .map_err(|e| format!("stopping {}: {e}", self.name()))?;
        if stopped.killed {
            return Err(format!(
                "{} did not exit within {grace:?} of SIGTERM (killed)",
                self.name()
            ));
        }
        Ok(stopped.status)
    }

    /// Waits until the service answers a call, or fails if it exits or
    /// `limit` passes.
    pub async fn wait_ready(&mut self, limit: Duration) -> Result<(), String> {
        let until = Instant::now() + limit;
        let ch = channel(self.addr, Duration::from_secs(2));
        loop {
            let ok = match self.role {
                Role::Orchestrator => SagaServiceClient::new(ch.clone())
                    .list_sagas(saga::ListSagasRequest {
                        page_size: 1,
                        ..Default::default()
                    })
                    .await
                    .is_ok(),
                _ => FaultServiceClient::new(ch.clone())
                    .get_faults(faults::GetFaultsRequest {})
                    .await
                    .is_ok(),
            };
            if ok {
                return Ok(());
            }
            if let Some(status) = self.exited() {
                return Err(format!(
                    "{} exited during start-up ({status}); log: {}\n{}",
                    self.name(),
                    self.log.display(),
                    tail(&self.log, 15)
                ));
            }
            if Instant::now() >= until {
                return Err(format!(
                    "{} not ready within {limit:?}; log: {}\n{}",
                    self.name(),
                    self.log.display(),
                    tail(&self.log, 15)
                ));
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// Starts and waits until ready; a start that fails (e.g. the port is
    /// not free yet) is retried a few times.
    pub async fn start(&mut self, limit: Duration) -> Result<(), String> {
        let began = Instant::now();
        let mut last = String::new();
        for _ in 0..5 {
            self.spawn()?;
            match self.wait_ready(limit).await {
                Ok(()) => {
                    self.last_ready = began.elapsed();
                    return Ok(());
                }
                Err(e) if self.child.is_none() => {
                    last = e;
                    tokio::time::sleep(Duration::from_millis(300)).await;
                }
                Err(e) => return Err(e),
            }
        }
        Err(last)
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// The last `n` lines of a log file, indented under a message.
pub fn tail(path: &Path, n: usize) -> String {
    process::log_tail(path, n)
        .iter()
        .map(|l| format!("    | {l}"))
        .collect::<Vec<_>>()
        .join("\n")
}
