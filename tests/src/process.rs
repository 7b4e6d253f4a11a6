//! Child processes of the tests and tools: spawned so that they die with
//! this process, stopped by pid (or process group) with SIGTERM and then
//! SIGKILL, and the last lines of their logs for error messages.
//!
//! It exists because the chaos soak, the load generator and the MongoDB
//! test-server launcher ([`crate::mongo_server`]) all start children that
//! must never outlive them — not when they fail, panic or time out, and not
//! when they are themselves killed.

use std::io;
use std::io::{BufRead, BufReader};
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Child, ChildStdout, Command, ExitStatus};
use std::sync::OnceLock;
use std::sync::mpsc;
use std::time::{Duration, Instant};

/// Makes the child get SIGKILL when the *thread* that spawns it dies (Linux
/// `PR_SET_PDEATHSIG`; it survives the `exec` of a script into its
/// interpreter). A child spawned from a short-lived thread (a test's, or one
/// of tokio's blocking pool) would die with that thread, so use
/// [`spawn_tied`], which spawns from a thread that lives as long as the
/// process.
pub fn die_with_parent(cmd: &mut Command) {
    // SAFETY: prctl is async-signal-safe and touches no memory of the
    // parent; nothing else runs between fork and exec.
    unsafe {
        cmd.pre_exec(|| {
            #[cfg(target_os = "linux")]
            libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL);
            Ok(())
        });
    }
}

/// A spawn request for the spawner thread, and where its answer goes.
type SpawnRequest = (Command, mpsc::Sender<io::Result<Child>>);

/// Spawns `cmd` so that the child is SIGKILLed when this process dies
/// ([`die_with_parent`]), whichever thread calls this: the spawn itself
/// happens on one thread that lives as long as the process.
pub fn spawn_tied(mut cmd: Command) -> io::Result<Child> {
    static SPAWNER: OnceLock<io::Result<mpsc::Sender<SpawnRequest>>> = OnceLock::new();
    die_with_parent(&mut cmd);
    let spawner = SPAWNER.get_or_init(|| {
        let (requests, incoming) = mpsc::channel::<SpawnRequest>();
        std::thread::Builder::new()
            .name("child-spawner".into())
            .spawn(move || {
                for (mut cmd, answer) in incoming {
                    let _ = answer.send(cmd.spawn());
                }
            })
            .map(|_| requests)
    });
    let gone = || io::Error::other("the child-spawner thread is gone");
    let spawner = spawner
        .as_ref()
        .map_err(|e| io::Error::new(e.kind(), e.to_string()))?;
    let (answer, answered) = mpsc::channel();
    spawner.send((cmd, answer)).map_err(|_| gone())?;
    answered.recv().map_err(|_| gone())?
}

/// How a child ended when it was stopped.
#[derive(Debug, Clone, Copy)]
pub struct Stopped {
    /// How the process ended.
    pub status: ExitStatus,
    /// It did not exit within the grace period of its SIGTERM and was
    /// SIGKILLed.
    pub killed: bool,
}

/// Stops a child: SIGTERM, up to `grace` for it to exit, then SIGKILL; then
/// reaps it. A child that leads its own process group (spawned with
/// `process_group(0)`) is signalled as a group, so whatever it started goes
/// too. Signals go only to a child not yet reaped, so its pid (and group id)
/// cannot have been reused.
pub fn stop(child: &mut Child, grace: Duration) -> io::Result<Stopped> {
    let Ok(pid) = libc::pid_t::try_from(child.id()) else {
        return Err(io::Error::other("pid out of range"));
    };
    if state(pid) == State::Reaped {
        return Ok(Stopped {
            status: child.wait()?,
            killed: false,
        });
    }
    // SAFETY: getpgid on our own child, not reaped yet.
    let target = if unsafe { libc::getpgid(pid) } == pid {
        -pid
    } else {
        pid
    };
    // SAFETY: kill(2) on our unreaped child (or the group it leads).
    unsafe { libc::kill(target, libc::SIGTERM) };
    let until = Instant::now() + grace;
    let mut exited = state(pid) != State::Running;
    while !exited && Instant::now() < until {
        std::thread::sleep(Duration::from_millis(10));
        exited = state(pid) != State::Running;
    }
    if !exited || target < 0 {
        // SAFETY: as above; the leader is at most a zombie, so the ids are
        // still ours. For a group this also ends any straggler.
        unsafe { libc::kill(target, libc::SIGKILL) };
    }
    Ok(Stopped {
        status: child.wait()?,
        killed: !exited,
    })
}

/// Where a child is in its life, as far as its pid is concerned.
#[derive(Debug, PartialEq, Eq)]
enum State {
    Running,
    /// Exited but not reaped: the pid is still ours.
    Exited,
    /// Already reaped (e.g. by `Child::try_wait`): the pid may be reused.
    Reaped,
}

fn state(pid: libc::pid_t) -> State {
    let Ok(id) = libc::id_t::try_from(pid) else {
        return State::Reaped;
    };
    // SAFETY: an all-zero siginfo_t is valid; waitid with WNOWAIT only
    // looks at our own child and leaves it unreaped.
    let mut info: libc::siginfo_t = unsafe { std::mem::zeroed() };
    let rc = unsafe {
        libc::waitid(
            libc::P_PID,
            id,
            &mut info,
            libc::WEXITED | libc::WNOHANG | libc::WNOWAIT,
        )
    };
    if rc != 0 {
        return State::Reaped;
    }
    // SAFETY: waitid filled `info` (si_pid stays 0 while the child runs).
    if unsafe { info.si_pid() } == 0 {
        State::Running
    } else {
        State::Exited
    }
}

/// A workspace binary (`payment-svc`, `orchestrator`, …) built beside the
/// running test (target/<profile>/); panics naming the fix when missing.
pub fn workspace_binary(name: &str) -> std::path::PathBuf {
    let exe = std::env::current_exe().expect("test binary path");
    let dir = exe
        .parent()
        .and_then(|deps| deps.parent())
        .expect("target dir");
    let binary = dir.join(name);
    assert!(
        binary.exists(),
        "{} is missing: build every binary first (cargo build --workspace --bins; the test command does)",
        binary.display()
    );
    binary
}

/// Reads a child's stdout on a thread of its own until it closes (so the
/// child never blocks on a full pipe); the port of the first `READY <port>`
/// line goes on the returned channel (`None` if stdout closes first or the
/// port does not parse). The MongoDB test server and the NestJS participant
/// both announce themselves so.
pub fn watch_for_ready(stdout: ChildStdout) -> mpsc::Receiver<Option<u16>> {
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

/// The last `n` lines of a log file (none when it cannot be read).
pub fn log_tail(path: &Path, n: usize) -> Vec<String> {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(n)..]
        .iter()
        .map(|l| (*l).to_owned())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::process::ExitStatusExt;

    fn sleeper(script: &str, own_group: bool) -> Child {
        let mut cmd = Command::new("sh");
        cmd.args(["-c", script]);
        if own_group {
            cmd.process_group(0);
        }
        spawn_tied(cmd).expect("spawn sh")
    }

    #[test]
    fn a_child_that_honours_sigterm_stops_without_sigkill() {
        let mut child = sleeper("exec sleep 30", false);
        let stopped = stop(&mut child, Duration::from_secs(5)).expect("stop");
        assert!(!stopped.killed);
        assert_eq!(stopped.status.signal(), Some(libc::SIGTERM));
    }

    #[test]
    fn a_child_that_ignores_sigterm_is_killed_after_the_grace() {
        let mut child = sleeper("trap '' TERM; while :; do sleep 0.05; done", false);
        // Let the shell install its trap first.
        std::thread::sleep(Duration::from_millis(200));
        let began = Instant::now();
        let stopped = stop(&mut child, Duration::from_millis(300)).expect("stop");
        assert!(stopped.killed);
        assert_eq!(stopped.status.signal(), Some(libc::SIGKILL));
        assert!(began.elapsed() >= Duration::from_millis(300));
    }

    #[test]
    fn a_group_leader_takes_its_children_along() {
        let mut child = sleeper("sleep 30 & wait", true);
        std::thread::sleep(Duration::from_millis(200));
        let pgid = libc::pid_t::try_from(child.id()).expect("pid");
        assert_eq!(live_members(pgid), 2, "the shell and its sleep");
        stop(&mut child, Duration::from_secs(5)).expect("stop");
        assert_eq!(
            live_members(pgid),
            0,
            "a process of the stopped group survived"
        );
    }

    /// Processes of group `pgid` that are not zombies (a killed orphan may
    /// wait a moment to be reaped by init).
    fn live_members(pgid: libc::pid_t) -> usize {
        let entries = std::fs::read_dir("/proc").expect("/proc");
        entries
            .filter_map(|e| std::fs::read_to_string(e.ok()?.path().join("stat")).ok())
            .filter(|stat| {
                // After "pid (comm) ": state, ppid, pgrp.
                let rest = stat.rsplit_once(") ").map_or("", |(_, r)| r);
                let fields: Vec<&str> = rest.split_whitespace().collect();
                fields.get(2) == Some(&pgid.to_string().as_str()) && fields.first() != Some(&"Z")
            })
            .count()
    }

    #[test]
    fn an_already_reaped_child_is_not_signalled_again() {
        let mut child = sleeper("exit 3", false);
        let status = child.wait().expect("wait");
        let stopped = stop(&mut child, Duration::from_secs(1)).expect("stop");
        assert_eq!(stopped.status.code(), status.code());
        assert!(!stopped.killed);
    }
}
