//! The one launcher of the MongoDB test server. No MongoDB can be installed
//! on the development machines or in CI, so the storage tests
//! ([`crate::backends`]), the outage tests, the chaos soak and the load
//! generator all start a MongoDB-compatible server as a child process — the
//! same way, here.
//!
//! - **Which server.** SecantusDB (`scripts/secantusdb.sh`, PyPI
//!   `secantusdb`, pinned): a MongoDB-compatible server in Python over
//!   WiredTiger, mongod's own storage engine — concurrent transactions with
//!   real write conflicts, transaction lifetime, TTL indexes, `explain`,
//!   failpoints, a standalone mode. It is the most faithful stand-in these
//!   machines can run, and it is never called a real MongoDB: a real one
//!   (`MONGODB_URI`, [`external_uri`]) replaces it where the caller allows.
//!   It is GPL-2.0: only ever a separate test-only process.
//! - **Ready.** The script prints one line `READY <port>` on stdout once the
//!   server accepts connections. The launcher waits for it (the script's
//!   first run builds its virtualenv, which can take a minute or more), then
//!   keeps draining stdout so the server never blocks on a full pipe.
//!   Connect with [`MongoServer::uri`].
//! - **Stopped.** By [`MongoServer::stop`] and on drop, also while a panic
//!   unwinds: SIGTERM to its process group, SIGKILL after 5 s; and SIGKILLed
//!   when this process dies ([`crate::process::spawn_tied`]).
//! - **Outages with the data kept.** [`MongoServer::outage`] stops the
//!   server and starts it again on the same port and storage path after a
//!   fixed time; [`MongoServer::begin_outage`] and
//!   [`MongoServer::end_outage`] hold it down for as long as the test needs
//!   (until it has seen what it tests). By hand: [`MongoServer::stop`],
//!   then [`MongoServer::start_again`].

use crate::process;
use std::fs::OpenOptions;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

/// A real MongoDB to use instead of a launched test server: `MONGODB_URI`,
/// when set and not empty.
pub fn external_uri() -> Option<String> {
    std::env::var("MONGODB_URI")
        .ok()
        .filter(|uri| !uri.is_empty())
}

/// What test output calls the test server; never "real MongoDB".
pub const LABEL: &str =
    "SecantusDB (MongoDB-compatible server over WiredTiger, not a real MongoDB)";

/// Short name: of its process and log file in the tools' output.
pub const NAME: &str = "secantusdb";

/// How long it gets to exit after SIGTERM before SIGKILL.
const GRACE: Duration = Duration::from_secs(5);

/// `scripts/secantusdb.sh`: from this crate's source tree, or beside a
/// binary in `target/<profile>/`.
fn script() -> Result<PathBuf, String> {
    let file = format!("{NAME}.sh");
    let compiled = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../scripts")
        .join(&file);
    let beside = std::env::current_exe().ok().and_then(|exe| {
        exe.parent()
            .map(|dir| dir.join("../../scripts").join(&file))
    });
    std::iter::once(compiled)
        .chain(beside)
        .find(|p| p.is_file())
        .ok_or_else(|| format!("scripts/{file} not found (set MONGODB_URI to use a real MongoDB)"))
}

/// How to run the server. The defaults suit the tests: any free port, a
/// temp storage directory, stderr inherited.
#[derive(Debug, Clone)]
pub struct ServerOptions {
    /// Port on 127.0.0.1; 0 picks a free one (kept for restarts).
    pub port: u16,
    /// The data directory, reopened intact by a restart. `None`: a fresh
    /// temp directory, removed when the server is dropped.
    pub storage_path: Option<PathBuf>,
    /// fsync each commit (acknowledged writes survive a
    /// SIGKILL of the server).
    pub sync_on_commit: bool,
    /// configureFailPoint / failCommand.
    pub enable_test_commands: bool,
    /// TTL monitor interval (default 60).
    pub ttl_sweep_seconds: Option<u32>,
    /// transactionLifetimeLimitSeconds (default 60).
    pub transaction_lifetime_seconds: Option<u32>,
    /// Answer `hello` without a replica set name.
    pub standalone: bool,
    /// Logs the server's own timing of every command (per database,
    /// command and outcome) every this many seconds (`STATS` lines).
    pub stats_seconds: Option<u32>,
    /// Appends the server's stderr (its log) here; `None` inherits ours.
    pub log: Option<PathBuf>,
    /// How long to wait for `READY <port>`, virtualenv set-up included.
    pub ready_within: Duration,
}

impl Default for ServerOptions {
    fn default() -> Self {
        ServerOptions {
            port: 0,
            storage_path: None,
            sync_on_commit: false,
            enable_test_commands: false,
            ttl_sweep_seconds: None,
            transaction_lifetime_seconds: None,
            standalone: false,
            stats_seconds: None,
            log: None,
            ready_within: Duration::from_secs(300),
        }
    }
}

impl ServerOptions {
    /// The script's arguments.
    fn args(&self) -> Vec<String> {
        let mut args = vec!["--port".to_owned(), self.port.to_string()];
        // Its log shares the tests' stderr: warnings and errors only.
        if self.log.is_none() {
            args.extend(["--log-level".to_owned(), "WARNING".to_owned()]);
        }
        if let Some(path) = &self.storage_path {
            args.extend(["--storage-path".to_owned(), path.display().to_string()]);
        }
        let flags = [
            (self.sync_on_commit, "--sync-on-commit"),
            (self.enable_test_commands, "--enable-test-commands"),
            (self.standalone, "--standalone"),
        ];
        args.extend(
            flags
                .iter()
                .filter(|(on, _)| *on)
                .map(|(_, f)| f.to_string()),
        );
        let numbers = [
            (self.ttl_sweep_seconds, "--ttl-sweep-seconds"),
            (
                self.transaction_lifetime_seconds,
                "--transaction-lifetime-seconds",
            ),
            (self.stats_seconds, "--stats-seconds"),
        ];
        for (value, flag) in numbers {
            if let Some(n) = value {
                args.extend([flag.to_owned(), n.to_string()]);
            }
        }
        args
    }
}

/// A MongoDB test server of ours: started, restartable on the same port and
/// storage, stopped when dropped.
pub struct MongoServer {
    /// `port` is the one the server reported, so a restart reuses it.
    options: ServerOptions,
    /// The storage directory we made (when no `storage_path` was given);
    /// removed after the server stops.
    _temp_storage: Option<tempfile::TempDir>,
    state: State,
}

/// Whether the server process is up.
enum State {
    Up(Running),
    Down,
}

impl MongoServer {
    /// Starts a server and waits until it accepts connections.
    pub fn start(mut options: ServerOptions) -> Result<MongoServer, String> {
        let mut temp_storage = None;
        if options.storage_path.is_none() {
            let dir = tempfile::Builder::new()
                .prefix("secantusdb-")
                .tempdir()
                .map_err(|e| format!("creating a storage dir for SecantusDB: {e}"))?;
            options.storage_path = Some(dir.path().to_path_buf());
            temp_storage = Some(dir);
        }
        let (running, port) = Running::spawn(&options)?;
        options.port = port;
        Ok(MongoServer {
            options,
            _temp_storage: temp_storage,
            state: State::Up(running),
        })
    }

    /// Starts a server with default options.
    pub fn start_default() -> Result<MongoServer, String> {
        Self::start(ServerOptions::default())
    }

    /// What test output calls it ([`LABEL`]).
    pub fn label(&self) -> &'static str {
        LABEL
    }

    /// Its port on 127.0.0.1 (the same across restarts).
    pub fn port(&self) -> u16 {
        self.options.port
    }

    /// `mongodb://127.0.0.1:<port>/?directConnection=true`.
    pub fn uri(&self) -> String {
        format!("mongodb://127.0.0.1:{}/?directConnection=true", self.port())
    }

    /// Its pid while it is up (for resource reports).
    pub fn pid(&self) -> Option<u32> {
        match &self.state {
            State::Up(running) => Some(running.child.id()),
            _ => None,
        }
    }

    /// The file its log goes to, if not our stderr.
    pub fn log(&self) -> Option<&Path> {
        self.options.log.as_deref()
    }

    /// Stops it (SIGTERM, SIGKILL after the grace) and waits until it is
    /// gone; data in a storage directory stay. A no-op when it is down.
    pub fn stop(&mut self) -> Result<(), String> {
        match std::mem::replace(&mut self.state, State::Down) {
            State::Up(running) => drop(running),
            State::Down => {}
        }
        Ok(())
    }

    /// Starts it again, stopped first if need be, on the same port and
    /// storage path (it reopens its data).
    pub fn start_again(&mut self) -> Result<(), String> {
        self.stop()?;
        let (running, _) = Running::spawn(&self.options)?;
        self.state = State::Up(running);
        Ok(())
    }

    /// Makes the server unreachable (connections closed, port refused),
    /// keeping its data, until [`MongoServer::end_outage`]; returns once it
    /// is down. The test decides when the outage ends: once it has seen
    /// what the outage is for.
    pub async fn begin_outage(&mut self) -> Result<(), String> {
        let running = match std::mem::replace(&mut self.state, State::Down) {
            State::Up(running) => running,
            other => {
                self.state = other;
                return Err(format!("{NAME} is not up"));
            }
        };
        tokio::task::spawn_blocking(move || drop(running))
            .await
            .map_err(|e| format!("stopping {NAME}: {e}"))
    }

    /// Ends an outage begun by [`MongoServer::begin_outage`]: starts the
    /// server again on the same port and storage path and returns once it
    /// accepts connections.
    pub async fn end_outage(&mut self) -> Result<(), String> {
        if !matches!(self.state, State::Down) {
            return Err(format!("{NAME} is not down"));
        }
        let options = self.options.clone();
        let running = tokio::task::spawn_blocking(move || Running::spawn(&options))
            .await
            .map_err(|e| format!("starting {NAME} again: {e}"))??
            .0;
        self.state = State::Up(running);
        Ok(())
    }
}

impl Drop for MongoServer {
    fn drop(&mut self) {
        if let Err(e) = self.stop() {
            eprintln!("stopping {NAME}: {e}");
        }
    }
}

/// One life of the server process; stopping it is dropping it.
struct Running {
    child: Child,
}

impl Running {
    /// Runs the script and waits for `READY <port>`; returns the port.
    fn spawn(options: &ServerOptions) -> Result<(Running, u16), String> {
        let script = script()?;
        let stderr = match &options.log {
            Some(path) => OpenOptions::new()
                .create(true)
                .append(true)
                .open(path)
                .map(Stdio::from)
                .map_err(|e| format!("{}: {e}", path.display()))?,
            None => Stdio::inherit(),
        };
        let mut cmd = Command::new("bash");
        cmd.arg(&script)
            .args(options.args())
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(stderr)
            // Its own group, so a stop also reaches what the script runs
            // before it execs the server (virtualenv set-up).
            .process_group(0);
        let mut child = process::spawn_tied(cmd)
            .map_err(|e| format!("cannot run {}: {e}", script.display()))?;
        let ready = child.stdout.take().map(process::watch_for_ready);
        let running = Running { child };
        let why = match ready.map(|r| r.recv_timeout(options.ready_within)) {
            Some(Ok(Some(port))) => return Ok((running, port)),
            Some(Ok(None)) => "exited or printed a bad READY line",
            Some(Err(_)) => "timed out",
            None => "no stdout",
        };
        drop(running);
        let log = options.log.as_deref().map_or(String::new(), |path| {
            format!(
                "; its log {}:\n{}",
                path.display(),
                process::log_tail(path, 20).join("\n")
            )
        });
        Err(format!("{NAME} did not print READY <port> ({why}){log}"))
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        if let Err(e) = process::stop(&mut self.child, GRACE) {
            eprintln!("stopping MongoDB test server pid {}: {e}", self.child.id());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn secantusdb_gets_every_option_it_is_given() {
        let options = ServerOptions {
            port: 4242,
            storage_path: Some("/data".into()),
            sync_on_commit: true,
            enable_test_commands: true,
            ttl_sweep_seconds: Some(1),
            transaction_lifetime_seconds: Some(5),
            standalone: true,
            stats_seconds: Some(10),
            ..ServerOptions::default()
        };
        assert_eq!(
            options.args(),
            [
                "--port",
                "4242",
                "--log-level",
                "WARNING",
                "--storage-path",
                "/data",
                "--sync-on-commit",
                "--enable-test-commands",
                "--standalone",
                "--ttl-sweep-seconds",
                "1",
                "--transaction-lifetime-seconds",
                "5",
                "--stats-seconds",
                "10",
            ]
        );
        // A server logging to a file (the tools' servers) keeps its INFO log.
        let plain = ServerOptions {
            storage_path: Some("/data".into()),
            log: Some("/logs/secantusdb.log".into()),
            ..ServerOptions::default()
        };
        assert_eq!(plain.args(), ["--port", "0", "--storage-path", "/data"]);
    }

    #[test]
    fn the_label_never_claims_a_real_mongodb() {
        assert!(LABEL.contains("not a real"), "{LABEL}");
    }
}
