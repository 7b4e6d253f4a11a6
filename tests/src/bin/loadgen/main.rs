//! `loadgen`: load generator for the saga stack.
//!
//! Drives `CreateOrder{wait: true}` at concurrency C for N sagas or T
//! seconds, either against a running stack (`--orchestrator/--payment/
//! --inventory`) or against a stack it starts itself from the real service
//! binaries next to its own executable (`--spawn`, the default). Each call is
//! timed until the saga is terminal. In the same run it measures the raw
//! floor — the same Charge + Deduct RPCs sent straight to the participants at
//! the same concurrency, after the saga phase, against the same processes —
//! and prints saga throughput / floor throughput. It then checks that no
//! saga of the run is left unfinished and that balances and stock moved by
//! exactly what the successful sagas and floor pairs account for, and prints
//! the RSS of each service and how many bytes each service's store grew by
//! per saga (its `store_size_bytes` gauge, read fresh before and after the
//! measured saga phase; `--no-store-size` skips it).
//!
//! ```sh
//! cargo build --release --workspace --bins
//! ./target/release/loadgen --smoke                       # CI: fails on errors/stuck sagas, never on timings
//! ./target/release/loadgen --concurrency 64 --duration 10
//! ./target/release/loadgen --single                      # sequential single-saga latency
//! ./target/release/loadgen --steps 3                     # a third, generic step: loyalty-svc
//! ./target/release/loadgen --steps 5                     # three generic steps
//! ./target/release/loadgen --backend mongo --smoke
//! ./target/release/loadgen --durability power-loss --duration 5
//! ./target/release/loadgen --concurrency 1,4,16,64,256 --plot docs/sweep.svg  # sweep
//! ```
//!
//! Besides the human-readable report, one line `loadgen-json: {...}` carries
//! every figure for scripts. The exit code is non-zero when any call failed,
//! any saga was stuck or FAILED, an order ended other than its mix class
//! says, a saga of the run is left unfinished, or the audit does not add up.
//!
//! Module map:
//! - [`args`]: the flags; [`plan`]: the run with every default resolved.
//! - [`stack`]: the spawned stack (the three services, loyalty-svc with
//!   `--steps` above 2, and the MongoDB test server when `--backend mongo` has no
//!   `MONGODB_URI`).
//! - [`catalog`]: the names and amounts a run uses and its outcome mix.
//! - [`workload`]: clients, seeding, and the phases' workers; [`tally`]:
//!   what one phase counted.
//! - [`check`]: the store check and the money/stock audit afterwards;
//!   [`loyalty`]: with `--steps` above 2, loyalty-svc's points per saga
//!   and step.
//! - [`procs`]: memory and CPU of the watched processes.
//! - [`run`]: the stages in order; [`report`]: the verdict, the report and
//!   the JSON line (CPU µs per saga per process; store bytes per saga per
//!   service from the `store_size_bytes` gauges and, on MongoDB, commands
//!   per saga per service, both read by [`scrape`]).
//! - [`sweep`]: `--concurrency 1,4,16,64,256`, its table, JSON and SVG plot.

mod args;
mod catalog;
mod check;
mod loyalty;
mod plan;
mod procs;
mod report;
mod run;
mod scrape;
mod stack;
mod sweep;
mod tally;
mod workload;

use args::Args;
use clap::Parser;
use plan::Mode;
use run::Outcome;
use std::process::ExitCode;
use std::time::Duration;

fn main() -> ExitCode {
    let args = Args::parse();
    let smoke = args.smoke;
    let plan = match plan::plan(args) {
        Ok(p) => p,
        Err(e) => {
            eprintln!("loadgen: {e}");
            if smoke {
                println!("loadgen smoke: 0 passed, 1 failed");
            }
            return ExitCode::from(2);
        }
    };
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(r) => r,
        Err(e) => {
            eprintln!("loadgen: cannot start the runtime: {e}");
            return ExitCode::from(2);
        }
    };
    let mut out = Outcome::default();
    // The stack lives inside `run::drive`: a timeout or a signal drops that
    // future, which stops the spawned services.
    let fatal = runtime.block_on(async {
        tokio::select! {
            r = tokio::time::timeout(plan.timeout, run::drive(&plan, &mut out)) => match r {
                Ok(Ok(())) => None,
                Ok(Err(e)) => Some(Some(e)),
                Err(_) => Some(None),
            },
            why = interrupted() => Some(Some(why.to_owned())),
        }
    });
    let fatal = fatal.map(|f| {
        f.unwrap_or_else(|| {
            format!(
                "global timeout of {:.0} s reached during {}",
                plan.timeout.as_secs_f64(),
                out.stage
            )
        })
    });
    runtime.shutdown_timeout(Duration::from_secs(2));
    if let Some(e) = &fatal {
        eprintln!("loadgen: {e}");
    }
    out.fatal = fatal;
    let why = report::failures(&plan, &out);
    report::print(&plan, &out, &why);
    if plan.mode == Mode::Smoke {
        if why.is_empty() {
            println!("loadgen smoke: 1 passed, 0 failed");
        } else {
            println!("loadgen smoke: 0 passed, 1 failed");
        }
    }
    if why.is_empty() {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}

/// Resolves when SIGINT or SIGTERM arrives, saying which.
async fn interrupted() -> &'static str {
    let mut term = match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
        Ok(s) => s,
        Err(_) => {
            let _ = tokio::signal::ctrl_c().await;
            return "interrupted";
        }
    };
    tokio::select! {
        _ = tokio::signal::ctrl_c() => "interrupted (SIGINT)",
        _ = term.recv() => "terminated (SIGTERM)",
    }
}
