//! The Node.js examples (`examples/nestjs-shipping`, `examples/media-upload`
//! and its fake media store) as child processes of a test, written once:
//! whether they can run here, and one process's lives.
//!
//! A process is run as in production — `node <script>`, configured only by
//! the environment given (nothing of the test's own leaks in but `PATH`),
//! ready when it prints `READY <port>` — SIGKILLed when this test process
//! dies ([`process::spawn_tied`]), stopped by pid (SIGTERM, then SIGKILL)
//! when dropped, also while a failing test unwinds, and can be SIGKILLed
//! and started again on the same port.

use crate::process;
use std::io::Write;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

/// How long start-up may take (Node loads the protos and connects to
/// MongoDB; a loaded machine is slow).
const READY_WITHIN: Duration = Duration::from_secs(60);

/// How long a process has to exit after SIGTERM before SIGKILL.
const GRACE: Duration = Duration::from_secs(10);

/// Whether a missing example fails the test instead of skipping it:
/// `CI=true` or `REQUIRE_EXAMPLES=1`.
pub fn examples_required() -> bool {
    std::env::var("CI").is_ok_and(|v| v == "true")
        || std::env::var("REQUIRE_EXAMPLES").is_ok_and(|v| v == "1")
}

/// Why `what` cannot run here when `node` is not on PATH.
pub(crate) fn require_node(what: &str) -> Result<(), String> {
    let node = Command::new("node")
        .arg("--version")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status();
    if node.is_ok_and(|s| s.success()) {
        Ok(())
    } else {
        Err(format!("`node` is not on PATH (Node.js >= 20 runs {what})"))
    }
}

/// The example `located`; `None` (with the reason printed) when it cannot
/// run and examples are not required, a panic naming `what` and the fix
/// when they are ([`examples_required`]).
pub(crate) fn found<T>(what: &str, located: Result<T, String>) -> Option<T> {
    match located {
        Ok(app) => Some(app),
        Err(why) if examples_required() => {
            panic!("{what} is required (CI=true or REQUIRE_EXAMPLES=1): {why}")
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

/// One Node process: restartable on the same port, its stderr appended to
/// one log over every life, stopped when dropped.
pub(crate) struct NodeChild {
    /// For messages: `nestjs-shipping`, `media-upload`, `media-store`.
    name: &'static str,
    script: PathBuf,
    /// The variable that says where it listens (`host:port`).
    listen_var: &'static str,
    env: Vec<(&'static str, String)>,
    addr: SocketAddr,
    log: tempfile::NamedTempFile,
    child: Option<Child>,
}

impl NodeChild {
    /// Starts `node script` with `env`, listening on a free port named by
    /// `listen_var`, and waits for its `READY <port>`.
    pub(crate) async fn start(
        name: &'static str,
        script: PathBuf,
        listen_var: &'static str,
        env: Vec<(&'static str, String)>,
    ) -> Result<NodeChild, String> {
        let log = tempfile::Builder::new()
            .prefix(&format!("{name}-"))
            .suffix(".log")
            .tempfile()
            .map_err(|e| format!("a log file for {name}: {e}"))?;
        let mut node = NodeChild {
            name,
            script,
            listen_var,
            env,
            addr: SocketAddr::from(([127, 0, 0, 1], 0)),
            log,
            child: None,
        };
        node.spawn().await?;
        Ok(node)
    }

    /// Where it listens.
    pub(crate) fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Its pid while it runs.
    pub(crate) fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    fn command(&self) -> Result<Command, String> {
        let stderr = self
            .log
            .reopen()
            .map_err(|e| format!("{}'s log: {e}", self.name))?;
        let mut cmd = Command::new("node");
        cmd.arg(&self.script)
            // Nothing of the test's environment may redirect it.
            .env_clear()
            .envs(std::env::var_os("PATH").map(|p| ("PATH", p)))
            .env(self.listen_var, self.addr.to_string())
            .envs(self.env.iter().map(|(k, v)| (*k, v.as_str())))
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::from(stderr));
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
                return Err(format!("{} has no stdout", self.name));
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
                    stop(self.name, child).await?;
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
            "{} did not start ({why}); its log:\n{}",
            self.name,
            self.log_tail()
        ))
    }

    /// SIGKILLs it (no chance to finish what it was doing) and reaps it.
    pub(crate) fn kill9(&mut self) -> Result<(), String> {
        let name = self.name;
        let mut child = self
            .child
            .take()
            .ok_or_else(|| format!("{name} is not running"))?;
        child.kill().map_err(|e| format!("SIGKILL {name}: {e}"))?;
        child.wait().map_err(|e| format!("reaping {name}: {e}"))?;
        Ok(())
    }

    /// Starts it again (stopped first if it runs) on the same port;
    /// returns once it prints `READY`.
    pub(crate) async fn restart(&mut self) -> Result<(), String> {
        if let Some(child) = self.child.take() {
            stop(self.name, child).await?;
        }
        self.spawn().await
    }

    /// The last lines of its log, for a failure message.
    pub(crate) fn log_tail(&self) -> String {
        process::log_tail(self.log.path(), 20).join("\n")
    }

    /// The last `n` lines of its log that contain `needle`, over every
    /// life, for a failure message.
    pub(crate) fn log_lines_with(&self, needle: &str, n: usize) -> String {
        let log = std::fs::read_to_string(self.log.path()).unwrap_or_default();
        let lines: Vec<&str> = log.lines().filter(|l| l.contains(needle)).collect();
        lines[lines.len().saturating_sub(n)..].join("\n")
    }
}

impl Drop for NodeChild {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take()
            && let Err(e) = process::stop(&mut child, GRACE)
        {
            eprintln!("stopping {} pid {}: {e}", self.name, child.id());
        }
    }
}

/// Stops a life (SIGTERM, SIGKILL after the grace) off the async threads.
async fn stop(name: &str, mut child: Child) -> Result<(), String> {
    tokio::task::spawn_blocking(move || process::stop(&mut child, GRACE))
        .await
        .map_err(|e| format!("stopping {name}: {e}"))?
        .map(|_| ())
        .map_err(|e| format!("stopping {name}: {e}"))
}
