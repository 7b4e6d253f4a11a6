//! Chaos soak: the real service binaries as separate processes — both
//! participants and `--orchestrators N` orchestrator instances sharing one
//! saga store —, many concurrent orders spread over the instances (their
//! duplicates sent to other instances), injected participant faults
//! (transient errors, lost replies, business refusals, latency),
//! orchestrator instances SIGKILLed and restarted (one kept down until the
//! others took its sagas over), each participant SIGKILLed and restarted,
//! then a contention phase (orders racing for the last units of a product
//! and the last cents of a customer) — then the faults stop, every saga
//! must become terminal, and the stores (read directly after a graceful
//! stop) must balance: money and stock moved exactly by the COMPLETED
//! orders, each exactly once, counted over every stored row; CANCELLED
//! orders net to zero; histories linear; the races won by exactly as many
//! orders as stock and money allow.
//!
//! ```sh
//! cargo build --workspace --bins
//! cargo run -p saga-tests --bin chaos -- --sagas 300 --orchestrators 2 --orchestrator-kills 1
//! cargo run -p saga-tests --bin chaos -- --orchestrators 3 --orchestrator-kills 3 --backend mongo
//! cargo run -p saga-tests --bin chaos -- --sagas 300 --retention-pass
//! cargo run -p saga-tests --bin chaos -- --sagas 300 --third-step loyalty
//! cargo run -p saga-tests --bin chaos -- --audit-only --work-dir /tmp/saga-chaos-…
//! ```
//!
//! The last line is `chaos: <passed> passed, <failed> failed`; the exit code
//! is 0 only when every check passed (2 when the service binaries are not
//! built).
//!
//! Module map, in the order a run uses them:
//! - [`args`]: the flags.
//! - [`storage`]: where the services keep their state (work-dir SQLite
//!   files, or MongoDB databases on `MONGODB_URI` or the test server).
//! - [`cluster`]: one service as a child process (spawn, SIGKILL, restart,
//!   SIGTERM); [`services`]: all of them, the orchestrator kills (and the
//!   sagas each victim held), and what happened to them.
//! - [`faults`]: the participants' fault injection (settings, counters);
//!   [`scrape`]: the orchestrators' takeover counters from `/metrics`.
//! - [`drive`]: seeding, and the concurrent CreateOrder workers;
//!   [`schedule`]: the SIGKILLs spread over the drive.
//! - [`contention`]: the races for the last units and the last cents.
//! - [`soak`]: the run, phase by phase: seed, drive, contention, settle,
//!   stop, manifest, audit (and `--audit-only`).
//! - [`manifest`]: `chaos-run.json`, what the audit needs besides the
//!   stores; [`snapshot`]: the stopped stores read directly, every row;
//!   [`audit`]: the invariants checked on them.
//! - [`report`]: the figures; [`checks`]: the PASS/FAIL lines.
//! - [`retention`]: with `--retention-pass`, the stores served again with
//!   retention in seconds: what finished expires, nothing live is touched.
//! - [`loyalty_steps`]: with `--steps 3` to 5, loyalty-svc (a generic
//!   step) as every step after payment and inventory, and its store's
//!   invariants.

mod args;
mod audit;
mod checks;
mod cluster;
mod contention;
mod drive;
mod faults;
mod loyalty_steps;
mod manifest;
mod report;
mod retention;
mod schedule;
mod scrape;
mod services;
mod snapshot;
mod soak;
mod storage;

use args::Args;
use checks::Checks;
use clap::Parser;
use cluster::Role;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::{Duration, Instant};

fn main() -> ExitCode {
    let args = Args::parse();
    if args.audit_only {
        return audit_only(&args);
    }
    let bin_dir = match find_binaries(&args) {
        Ok(dir) => dir,
        Err(why) => {
            eprintln!("{why}");
            return ExitCode::from(2);
        }
    };
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("tokio runtime");
    let mut checks = Checks::default();
    let started = Instant::now();
    let work = work_dir(&args);
    let outcome = runtime.block_on(async {
        let run = soak::run(&args, &bin_dir, &work, &mut checks);
        tokio::select! {
            r = run => r,
            _ = tokio::time::sleep(Duration::from_secs(args.timeout_secs)) => {
                Err(format!("global timeout of {} s reached; every child was killed", args.timeout_secs))
            }
            _ = tokio::signal::ctrl_c() => Err("interrupted; every child was killed".into()),
        }
    });
    if let Err(e) = outcome {
        checks.check(false, "the soak ran to the end", &e);
    }
    runtime.shutdown_timeout(Duration::from_secs(2));
    println!("elapsed: {:.1} s", started.elapsed().as_secs_f64());
    let all_passed = checks.failed == 0;
    if all_passed && args.work_dir.is_none() && !args.keep_work_dir {
        let _ = std::fs::remove_dir_all(&work);
    } else {
        println!("work dir (data and logs) kept: {}", work.display());
    }
    println!("chaos: {} passed, {} failed", checks.passed, checks.failed);
    if all_passed {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}

/// `--audit-only --work-dir DIR`: the store checks of a kept run; exit 0
/// only when all pass (the work dir is left as it is).
fn audit_only(args: &Args) -> ExitCode {
    let Some(work) = args.work_dir.as_deref() else {
        eprintln!("chaos: --audit-only needs --work-dir");
        return ExitCode::from(2);
    };
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("tokio runtime");
    let mut checks = Checks::default();
    if let Err(e) = runtime.block_on(soak::audit_only(work, &mut checks)) {
        checks.check(false, "the kept run could be audited", &e);
    }
    runtime.shutdown_timeout(Duration::from_secs(2));
    println!("chaos: {} passed, {} failed", checks.passed, checks.failed);
    if checks.failed == 0 {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}

/// The directory holding the three service binaries (`--bin-dir`, else the
/// directory of this executable); an error saying how to build them when
/// one is missing.
fn find_binaries(args: &Args) -> Result<PathBuf, String> {
    let bin_dir = args
        .bin_dir
        .clone()
        .or_else(|| {
            std::env::current_exe()
                .ok()
                .and_then(|p| p.parent().map(Path::to_path_buf))
        })
        .ok_or("chaos: cannot find the directory of this executable; pass --bin-dir")?;
    let mut roles = vec![Role::Orchestrator, Role::Payment, Role::Inventory];
    if args.loyalty() {
        roles.push(Role::Loyalty);
    }
    let missing: Vec<String> = roles
        .iter()
        .map(|r| bin_dir.join(r.binary()))
        .filter(|p| !p.is_file())
        .map(|p| p.display().to_string())
        .collect();
    if missing.is_empty() {
        Ok(bin_dir)
    } else {
        Err(format!(
            "chaos: service binaries not found: {}\nchaos: build them first with:\n\n    cargo build --workspace --bins\n\n(with --release if this chaos binary is a release build)",
            missing.join(", ")
        ))
    }
}

/// `--work-dir`, else a fresh directory in the system temp dir.
fn work_dir(args: &Args) -> PathBuf {
    args.work_dir.clone().unwrap_or_else(|| {
        let stamp = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_millis())
            .unwrap_or(0);
        std::env::temp_dir().join(format!("saga-chaos-{}-{stamp}", std::process::id()))
    })
}
