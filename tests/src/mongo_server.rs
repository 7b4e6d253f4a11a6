//! The one launcher of the MongoDB test server. No MongoDB can be installed
//! on the development machines or in CI, so the storage tests
//! ([`crate::backends`]), the outage tests, the chaos soak and the load
//! generator all start a MongoDB-compatible server as a child process — the
//! same way, here.
//!
//! - **Which server.** [`ServerKind::Emulator`], the wire-protocol emulator
//!   (`scripts/mongo-emulator.sh`, the default), or [`ServerKind::SecantusDb`]
//!   (`scripts/secantusdb.sh`). [`ServerKind::from_env`] reads
//!   `SAGA_MONGO_SERVER`: unset, empty or `emulator` is the emulator,
//!   `secantusdb` is SecantusDB. [`MongoServer::start_default`], and through
//!   it the test binaries, chaos and loadgen, follow it. A real MongoDB
//!   (`MONGODB_URI`, [`external_uri`]) replaces either where the caller
//!   allows it.
//! - **Ready.** Both scripts print one line `READY <port>` on stdout once
//!   they accept connections. The launcher waits for it (a script's first
//!   run builds its virtualenv, which can take a minute or more), then keeps
//!   draining stdout so the server never blocks on a full pipe. Connect with
//!   [`MongoServer::uri`].
//! - **Stopped.** By [`MongoServer::stop`] and on drop, also while a panic
//!   unwinds: SIGTERM to its process group, SIGKILL after a grace (3 s for
//!   the emulator, 5 s for SecantusDB). Its stdin is a pipe we hold, so the
//!   emulator also exits once this process is gone, and any server is
//!   SIGKILLed when this process dies ([`crate::process::spawn_tied`]).
//! - **Outages with the data kept.** [`MongoServer::outage`]: the emulator
//!   through its `{emulatorOutage: <ms>}` admin command (its data lives in
//!   its memory, so stopping it would lose them); SecantusDB is stopped and
//!   started again on the same port and storage path. By hand:
//!   [`MongoServer::stop`], then [`MongoServer::start_again`].

use crate::process;
use bson::doc;
use std::fs::OpenOptions;
use std::io::{BufRead, BufReader};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};
use std::sync::mpsc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// A real MongoDB to use instead of a launched test server: `MONGODB_URI`,
/// when set and not empty.
pub fn external_uri() -> Option<String> {
    std::env::var("MONGODB_URI")
        .ok()
        .filter(|uri| !uri.is_empty())
}

/// Which MongoDB-compatible server to launch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ServerKind {
    /// `scripts/mongo-emulator.sh`: mockupdb framing + mongomock semantics,
    /// data in memory, transactions serialised.
    Emulator,
    /// `scripts/secantusdb.sh`: SecantusDB, a MongoDB-compatible server over
    /// WiredTiger, data in a storage directory.
    SecantusDb,
}

impl ServerKind {
    /// The environment variable [`ServerKind::from_env`] reads.
    pub const ENV: &'static str = "SAGA_MONGO_SERVER";

    /// The kind `SAGA_MONGO_SERVER` asks for: `emulator` (also when unset
    /// or empty) or `secantusdb`.
    pub fn from_env() -> Result<ServerKind, String> {
        match std::env::var(Self::ENV) {
            Err(_) => Ok(ServerKind::Emulator),
            Ok(v) if v.is_empty() || v == "emulator" => Ok(ServerKind::Emulator),
            Ok(v) if v == "secantusdb" => Ok(ServerKind::SecantusDb),
            Ok(v) => Err(format!(
                "{}={v:?}: expected `emulator` or `secantusdb`",
                Self::ENV
            )),
        }
    }

    /// What test output calls this target; never "real MongoDB".
    pub fn label(self) -> &'static str {
        match self {
            ServerKind::Emulator => {
                "emulated MongoDB (mockupdb + mongomock wire-protocol emulator, not a real server)"
            }
            ServerKind::SecantusDb => {
                "SecantusDB (MongoDB-compatible server over WiredTiger, not a real MongoDB)"
            }
        }
    }

    /// Short name: of its process and log file in the tools' output.
    pub fn name(self) -> &'static str {
        match self {
            ServerKind::Emulator => "mongo-emulator",
            ServerKind::SecantusDb => "secantusdb",
        }
    }

    /// How long it gets to exit after SIGTERM before SIGKILL.
    fn grace(self) -> Duration {
        match self {
            ServerKind::Emulator => Duration::from_secs(3),
            ServerKind::SecantusDb => Duration::from_secs(5),
        }
    }

    /// `scripts/<name>.sh`: from this crate's source tree, or beside a
    /// binary in `target/<profile>/`.
    fn script(self) -> Result<PathBuf, String> {
        let file = format!("{}.sh", self.name());
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
            .ok_or_else(|| {
                format!("scripts/{file} not found (set MONGODB_URI to use a real MongoDB)")
            })
    }
}

/// How to run the server. The defaults suit the tests: any free port, a
/// temp storage directory, stderr inherited.
#[derive(Debug, Clone)]
pub struct ServerOptions {
    /// Port on 127.0.0.1; 0 picks a free one (kept for restarts).
    pub port: u16,
    /// SecantusDB only: the data directory, reopened intact by a restart.
    /// `None`: a fresh temp directory, removed when the server is dropped.
    pub storage_path: Option<PathBuf>,
    /// SecantusDB only: fsync each commit (acknowledged writes survive a
    /// SIGKILL of the server).
    pub sync_on_commit: bool,
    /// SecantusDB only: configureFailPoint / failCommand.
    pub enable_test_commands: bool,
    /// SecantusDB only: TTL monitor interval (default 60).
    pub ttl_sweep_seconds: Option<u32>,
    /// SecantusDB only: transactionLifetimeLimitSeconds (default 60).
    pub transaction_lifetime_seconds: Option<u32>,
    /// SecantusDB only: answer `hello` without a replica set name.
    pub standalone: bool,
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
            log: None,
            ready_within: Duration::from_secs(300),
        }
    }
}

impl ServerOptions {
    /// The script's arguments for `kind`.
    fn args(&self, kind: ServerKind) -> Vec<String> {
        let mut args = vec!["--port".to_owned(), self.port.to_string()];
        if kind == ServerKind::Emulator {
            return args;
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
    kind: ServerKind,
    /// `port` is the one the server reported, so a restart reuses it.
    options: ServerOptions,
    /// The storage directory we made (SecantusDB without `storage_path`);
    /// removed after the server stops.
    _temp_storage: Option<tempfile::TempDir>,
    state: State,
}

/// Whether the server process is up.
enum State {
    Up(Running),
    Down,
    /// Down for an outage; the thread starts it again when the outage ends.
    ComingBack(JoinHandle<Result<Running, String>>),
}

impl MongoServer {
    /// Starts a server of `kind` and waits until it accepts connections.
    pub fn start(kind: ServerKind, mut options: ServerOptions) -> Result<MongoServer, String> {
        let mut temp_storage = None;
        if kind == ServerKind::SecantusDb && options.storage_path.is_none() {
            let dir = tempfile::Builder::new()
                .prefix("secantusdb-")
                .tempdir()
                .map_err(|e| format!("creating a storage dir for SecantusDB: {e}"))?;
            options.storage_path = Some(dir.path().to_path_buf());
            temp_storage = Some(dir);
        }
        let (running, port) = Running::spawn(kind, &options)?;
        options.port = port;
        Ok(MongoServer {
            kind,
            options,
            _temp_storage: temp_storage,
            state: State::Up(running),
        })
    }

    /// Starts the server `SAGA_MONGO_SERVER` names ([`ServerKind::from_env`])
    /// with default options.
    pub fn start_default() -> Result<MongoServer, String> {
        Self::start(ServerKind::from_env()?, ServerOptions::default())
    }

    /// Which server this is.
    pub fn kind(&self) -> ServerKind {
        self.kind
    }

    /// What test output calls it ([`ServerKind::label`]).
    pub fn label(&self) -> &'static str {
        self.kind.label()
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
    /// gone; data in a storage directory stay. A no-op when it is down; an
    /// error when a restart after an outage had failed.
    pub fn stop(&mut self) -> Result<(), String> {
        match std::mem::replace(&mut self.state, State::Down) {
            State::Up(running) => drop(running),
            State::ComingBack(restart) => match restart.join() {
                Ok(result) => drop(result?),
                Err(_) => return Err(format!("restarting {} panicked", self.kind.name())),
            },
            State::Down => {}
        }
        Ok(())
    }

    /// Starts it again, stopped first if need be, on the same port and
    /// storage path (SecantusDB reopens its data; the emulator starts empty).
    pub fn start_again(&mut self) -> Result<(), String> {
        self.stop()?;
        let (running, _) = Running::spawn(self.kind, &self.options)?;
        self.state = State::Up(running);
        Ok(())
    }

    /// Makes the server unreachable for `length` (connections closed, port
    /// refused), keeping its data; returns once it is down. The emulator
    /// comes back by itself; SecantusDB is started again by a thread of ours
    /// (a later [`MongoServer::stop`] or drop waits for that).
    pub async fn outage(&mut self, length: Duration) -> Result<(), String> {
        match self.kind {
            ServerKind::Emulator => self.emulator_outage(length).await,
            ServerKind::SecantusDb => {
                let began = Instant::now();
                let running = match std::mem::replace(&mut self.state, State::Down) {
                    State::Up(running) => running,
                    other => {
                        self.state = other;
                        return Err("SecantusDB is not up".into());
                    }
                };
                tokio::task::spawn_blocking(move || drop(running))
                    .await
                    .map_err(|e| format!("stopping SecantusDB: {e}"))?;
                let (kind, options) = (self.kind, self.options.clone());
                self.state = State::ComingBack(std::thread::spawn(move || {
                    std::thread::sleep(length.saturating_sub(began.elapsed()));
                    Running::spawn(kind, &options).map(|(running, _)| running)
                }));
                Ok(())
            }
        }
    }

    /// `{emulatorOutage: <ms>}` on the admin database.
    async fn emulator_outage(&self, length: Duration) -> Result<(), String> {
        let uri = format!("{}&serverSelectionTimeoutMS=2000", self.uri());
        let client = mongodb::Client::with_uri_str(uri)
            .await
            .map_err(|e| format!("admin client: {e}"))?;
        let ms = i64::try_from(length.as_millis()).unwrap_or(i64::MAX);
        let reply = client
            .database("admin")
            .run_command(doc! { "emulatorOutage": ms })
            .await
            .map_err(|e| format!("emulatorOutage: {e}"))?;
        if reply.get_f64("ok").ok() == Some(1.0) {
            Ok(())
        } else {
            Err(format!("emulatorOutage: {reply}"))
        }
    }
}

impl Drop for MongoServer {
    fn drop(&mut self) {
        if let Err(e) = self.stop() {
            eprintln!("stopping {}: {e}", self.kind.name());
        }
    }
}

/// One life of the server process; stopping it is dropping it.
struct Running {
    child: Child,
    /// Held open: the emulator exits when it closes.
    stdin: Option<ChildStdin>,
    grace: Duration,
}

impl Running {
    /// Runs the script and waits for `READY <port>`; returns the port.
    fn spawn(kind: ServerKind, options: &ServerOptions) -> Result<(Running, u16), String> {
        let script = kind.script()?;
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
            .args(options.args(kind))
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(stderr)
            // Its own group, so a stop also reaches what the script runs
            // before it execs the server (virtualenv set-up).
            .process_group(0);
        let mut child = process::spawn_tied(cmd)
            .map_err(|e| format!("cannot run {}: {e}", script.display()))?;
        let ready = child.stdout.take().map(watch_for_ready);
        let running = Running {
            stdin: child.stdin.take(),
            child,
            grace: kind.grace(),
        };
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
        Err(format!(
            "{} did not print READY <port> ({why}){log}",
            kind.name()
        ))
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        self.stdin.take();
        if let Err(e) = process::stop(&mut self.child, self.grace) {
            eprintln!("stopping MongoDB test server pid {}: {e}", self.child.id());
        }
    }
}

/// Reads the server's stdout on a thread of its own until it closes; the
/// first `READY <port>` line's port is sent on the returned channel (`None`
/// if stdout closes first or the port does not parse).
fn watch_for_ready(stdout: ChildStdout) -> mpsc::Receiver<Option<u16>> {
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let mut tx = Some(tx);
        for line in BufReader::new(stdout).lines() {
            let Ok(line) = line else { break };
            if let Some(port) = line.strip_prefix("READY ")
                && let Some(tx) = tx.take()
            {
                let _ = tx.send(port.trim().parse().ok());
            }
        }
        if let Some(tx) = tx {
            let _ = tx.send(None);
        }
    });
    rx
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_emulator_gets_only_its_port() {
        let options = ServerOptions {
            port: 4242,
            storage_path: Some("/data".into()),
            sync_on_commit: true,
            ..ServerOptions::default()
        };
        assert_eq!(options.args(ServerKind::Emulator), ["--port", "4242"]);
    }

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
            ..ServerOptions::default()
        };
        assert_eq!(
            options.args(ServerKind::SecantusDb),
            [
                "--port",
                "4242",
                "--storage-path",
                "/data",
                "--sync-on-commit",
                "--enable-test-commands",
                "--standalone",
                "--ttl-sweep-seconds",
                "1",
                "--transaction-lifetime-seconds",
                "5",
            ]
        );
        let plain = ServerOptions {
            storage_path: Some("/data".into()),
            ..ServerOptions::default()
        };
        assert_eq!(
            plain.args(ServerKind::SecantusDb),
            ["--port", "0", "--storage-path", "/data"]
        );
    }

    #[test]
    fn labels_never_claim_a_real_mongodb() {
        for kind in [ServerKind::Emulator, ServerKind::SecantusDb] {
            assert!(kind.label().contains("not a real"), "{}", kind.label());
        }
    }
}
