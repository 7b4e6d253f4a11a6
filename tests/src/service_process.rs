//! One of our service binaries running as a child process, the way an
//! operator runs it: flags and environment given explicitly (nothing of
//! the test's own environment leaks in), its log in a file, readiness read
//! over `grpc.health.v1`, and a stop that is SIGTERM then SIGKILL — also
//! when the test fails, since it happens on drop.

use crate::process::{self, spawn_tied};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::Duration;
use tokio::time::Instant;
use tonic_health::pb::health_check_response::ServingStatus;

/// Pause between two polls of a condition.
const POLL: Duration = Duration::from_millis(20);

/// A free port on 127.0.0.1 (bound and released: the service binds it
/// right after).
pub fn free_addr() -> SocketAddr {
    let probe = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    probe.local_addr().expect("addr")
}

/// A service binary running as a child process; stopped when dropped.
#[derive(Debug)]
pub struct ServiceProcess {
    /// The binary's name (`payment-svc`, `orchestrator`, …).
    pub name: &'static str,
    /// Where its gRPC server listens.
    pub addr: SocketAddr,
    /// Its stdout and stderr, one file.
    pub log: PathBuf,
    child: Child,
}

impl ServiceProcess {
    /// Starts `binary` listening on `addr` (`--listen` added after `args`)
    /// with only `RUST_LOG=info` and `env` in its environment, its output in
    /// a log file under `dir`. Does not wait: see [`Self::until_ready`].
    pub fn spawn(
        binary: &'static str,
        addr: SocketAddr,
        args: &[&str],
        env: &[(&str, &str)],
        dir: &Path,
    ) -> ServiceProcess {
        let log = dir.join(format!("{binary}-{}.log", addr.port()));
        let stdout = std::fs::File::create(&log).expect("log file");
        let stderr = stdout.try_clone().expect("log file");
        let mut cmd = Command::new(process::workspace_binary(binary));
        cmd.args(args)
            .args(["--listen", &addr.to_string()])
            .env_clear()
            .env("RUST_LOG", "info")
            .envs(env.iter().copied())
            .stdin(Stdio::null())
            .stdout(stdout)
            .stderr(stderr);
        let child = spawn_tied(cmd).unwrap_or_else(|e| panic!("start {binary}: {e}"));
        ServiceProcess {
            name: binary,
            addr,
            log,
            child,
        }
    }

    /// The last `n` lines of its log.
    pub fn log_tail(&self, n: usize) -> Vec<String> {
        process::log_tail(&self.log, n)
    }

    /// Waits (at most `within`) until its readiness (health `""`) reads
    /// SERVING; panics with its log otherwise.
    pub async fn until_ready(&self, within: Duration) {
        let until = Instant::now() + within;
        while crate::health(self.addr, "").await != Ok(ServingStatus::Serving) {
            assert!(
                Instant::now() < until,
                "{} not ready within {within:?}; its log: {:?}",
                self.name,
                self.log_tail(20)
            );
            tokio::time::sleep(POLL).await;
        }
    }

    /// Sends SIGTERM (the process is ours and not reaped: its pid is).
    pub fn sigterm(&self) {
        let pid = libc::pid_t::try_from(self.child.id()).expect("pid");
        // SAFETY: kill(2) on our own child, not yet reaped.
        unsafe { libc::kill(pid, libc::SIGTERM) };
    }

    /// Waits (at most `within`) for the process to exit on its own.
    pub async fn exited(&mut self, within: Duration) -> ExitStatus {
        let until = Instant::now() + within;
        loop {
            if let Some(status) = self.child.try_wait().expect("try_wait") {
                return status;
            }
            assert!(
                Instant::now() < until,
                "{} still running after {within:?}; its log: {:?}",
                self.name,
                self.log_tail(20)
            );
            tokio::time::sleep(POLL).await;
        }
    }

    /// Stops it with SIGTERM and asserts a clean exit (0, not killed)
    /// within `within`: the graceful drain.
    pub async fn stop_cleanly(mut self, within: Duration) {
        self.sigterm();
        let status = self.exited(within).await;
        assert!(
            status.success(),
            "{} exited with {status}; its log: {:?}",
            self.name,
            self.log_tail(20)
        );
    }
}

impl Drop for ServiceProcess {
    fn drop(&mut self) {
        let _ = process::stop(&mut self.child, Duration::from_secs(5));
    }
}
