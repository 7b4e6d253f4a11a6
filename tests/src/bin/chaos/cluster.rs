//! The three services as real child processes: spawn, SIGKILL, restart on
//! the same port and data, stop gracefully with SIGTERM. Every child is
//! killed when its [`Proc`] is dropped (also on panic or timeout) and, on
//! Linux, when this process dies (`PR_SET_PDEATHSIG`).

use saga_proto::faults::v1 as faults;
use saga_proto::faults::v1::fault_service_client::FaultServiceClient;
use saga_proto::saga::v1 as saga;
use saga_proto::saga::v1::saga_service_client::SagaServiceClient;
use std::fs::{File, OpenOptions};
use std::io::Write;
use std::net::SocketAddr;
use std::os::unix::process::{CommandExt, ExitStatusExt};
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
}

impl Role {
    pub fn binary(self) -> &'static str {
        match self {
            Role::Payment => "payment-svc",
            Role::Inventory => "inventory-svc",
            Role::Orchestrator => "orchestrator",
        }
    }

    fn index(self) -> u64 {
        match self {
            Role::Payment => 1,
            Role::Inventory => 2,
            Role::Orchestrator => 3,
        }
    }
}

/// Injected-fault counters of one participant (summed over its lives).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct FaultCounts {
    pub transient_errors: u64,
    pub dropped_replies: u64,
    pub refusals: u64,
    pub delayed_calls: u64,
}

impl FaultCounts {
    pub fn add(&mut self, s: &faults::FaultStatus) {
        self.transient_errors += s.transient_errors;
        self.dropped_replies += s.dropped_replies;
        self.refusals += s.refusals;
        self.delayed_calls += s.delayed_calls;
    }

    pub fn plus(self, o: FaultCounts) -> FaultCounts {
        FaultCounts {
            transient_errors: self.transient_errors + o.transient_errors,
            dropped_replies: self.dropped_replies + o.dropped_replies,
            refusals: self.refusals + o.refusals,
            delayed_calls: self.delayed_calls + o.delayed_calls,
        }
    }
}

/// A free 127.0.0.1 port (bound and released; the service rebinds it).
pub fn free_addr() -> std::io::Result<SocketAddr> {
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
    pub addr: SocketAddr,
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
}

impl Proc {
    pub fn new(
        role: Role,
        bin: PathBuf,
        addr: SocketAddr,
        args: Vec<String>,
        env: Vec<(String, String)>,
        log: PathBuf,
        seed: u64,
    ) -> Proc {
        Proc {
            role,
            addr,
            bin,
            args,
            env,
            log,
            child: None,
            starts: 0,
            seed,
            earlier_faults: FaultCounts::default(),
        }
    }

    pub fn name(&self) -> &'static str {
        self.role.binary()
    }

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
            // Metrics ports are fixed by default; several soaks (or a dev
            // stack) on one machine must not collide on them.
            .env("NO_METRICS", "true")
            // Each life draws its own fault sequence.
            .env(
                "FAULT_SEED",
                (self.seed.wrapping_mul(1000) + self.role.index() * 100 + u64::from(self.starts))
                    .to_string(),
            )
            .stdin(Stdio::null())
            .stdout(Stdio::from(log))
            .stderr(Stdio::from(err));
        die_with_parent(&mut cmd);
        let child = cmd
            .spawn()
            .map_err(|e| format!("spawn {}: {e}", self.bin.display()))?;
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

    /// SIGTERM, then waits up to `grace` for a clean exit (SIGKILL after).
    pub async fn terminate(&mut self, grace: Duration) -> Result<ExitStatus, String> {
        let Some(mut child) = self.child.take() else {
            return Err(format!("{} is not running", self.name()));
        };
        let pid = libc::pid_t::try_from(child.id()).map_err(|e| e.to_string())?;
        // SAFETY: kill(2) on the pid of our own unreaped child.
        unsafe {
            libc::kill(pid, libc::SIGTERM);
        }
        let until = Instant::now() + grace;
        loop {
            match child.try_wait() {
                Ok(Some(status)) => return Ok(status),
                Ok(None) if Instant::now() < until => {
                    tokio::time::sleep(Duration::from_millis(20)).await
                }
                _ => {
                    let _ = child.kill();
                    let _ = child.wait();
                    return Err(format!(
                        "{} did not exit within {grace:?} of SIGTERM (killed)",
                        self.name()
                    ));
                }
            }
        }
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
        let mut last = String::new();
        for _ in 0..5 {
            self.spawn()?;
            match self.wait_ready(limit).await {
                Ok(()) => return Ok(()),
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

/// The child gets SIGKILL when this process dies, so a chaos run that is
/// itself killed leaves no services behind.
fn die_with_parent(cmd: &mut Command) {
    // SAFETY: prctl is async-signal-safe; nothing else runs between fork
    // and exec.
    unsafe {
        cmd.pre_exec(|| {
            #[cfg(target_os = "linux")]
            libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL);
            Ok(())
        });
    }
}

/// The last `n` lines of a log file.
pub fn tail(path: &Path, n: usize) -> String {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(n)..]
        .iter()
        .map(|l| format!("    | {l}"))
        .collect::<Vec<_>>()
        .join("\n")
}

/// The MongoDB wire-protocol emulator (`scripts/mongo-emulator.sh`); it
/// exits when its stdin closes, and is killed when dropped.
pub struct Emulator {
    child: Child,
    _stdin: Option<std::process::ChildStdin>,
    pub port: u16,
}

impl Emulator {
    pub fn start(script: &Path, log: &Path) -> Result<Emulator, String> {
        use std::io::{BufRead, BufReader};
        let err = File::create(log).map_err(|e| format!("{}: {e}", log.display()))?;
        let mut cmd = Command::new("bash");
        cmd.arg(script)
            .args(["--port", "0"])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::from(err));
        die_with_parent(&mut cmd);
        let mut child = cmd
            .spawn()
            .map_err(|e| format!("cannot run {}: {e}", script.display()))?;
        let stdout = child.stdout.take().ok_or("no emulator stdout")?;
        let stdin = child.stdin.take();
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let mut sent = false;
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                if !sent && let Some(port) = line.strip_prefix("READY ") {
                    let _ = tx.send(port.trim().parse::<u16>().ok());
                    sent = true;
                }
            }
            if !sent {
                let _ = tx.send(None);
            }
        });
        let mut emulator = Emulator {
            child,
            _stdin: stdin,
            port: 0,
        };
        match rx.recv_timeout(Duration::from_secs(300)) {
            Ok(Some(port)) => {
                emulator.port = port;
                Ok(emulator)
            }
            _ => Err(format!(
                "the MongoDB emulator did not print READY <port>; log: {}\n{}",
                log.display(),
                tail(log, 15)
            )),
        }
    }
}

impl Drop for Emulator {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
