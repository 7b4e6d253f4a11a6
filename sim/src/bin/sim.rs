//! `sim`: runs seeds of the deterministic simulation (see the `sim`
//! crate's docs and docs/simulation.md).
//!
//! - `sim --seeds N [--from S]`: seeds S..S+N; `sim --minutes M`: seeds
//!   from S on for M minutes. Prints seeds per minute and simulated sagas
//!   per second; stops at the first violation, printing its seed, the
//!   invariant and the event log leading to it. Exit status 1 then.
//! - `sim --seed N`: replays seed N, printing its whole event log.
//! - `--defect NAME` plants a known bug (`skip-save-before-compensation`,
//!   `barrier-accepts-duplicate`, `drop-version-check`,
//!   `compensate-in-forward-order`) to watch it being found.

use clap::Parser;
use service_kit::defects::Defect;
use std::process::ExitCode;
use std::time::{Duration, Instant};

#[derive(Parser, Debug)]
#[command(
    name = "sim",
    about = "Deterministic simulation of the saga system, one seed per run"
)]
struct Args {
    /// Replay this one seed and print its whole event log.
    #[arg(long)]
    seed: Option<u64>,
    /// Run this many seeds.
    #[arg(long)]
    seeds: Option<u64>,
    /// Run seeds for this many minutes.
    #[arg(long)]
    minutes: Option<f64>,
    /// The first seed.
    #[arg(long, default_value_t = 0)]
    from: u64,
    /// Plant a known bug (see the module docs for the names).
    #[arg(long, value_parser = parse_defect)]
    defect: Option<Defect>,
}

fn parse_defect(name: &str) -> Result<Defect, String> {
    Defect::parse(name).ok_or_else(|| {
        let names: Vec<&str> = Defect::ALL.iter().map(|d| d.name()).collect();
        format!("unknown defect {name:?}; one of {}", names.join(", "))
    })
}

fn main() -> ExitCode {
    let args = Args::parse();
    if let Some(seed) = args.seed {
        let report = sim::world::run(seed, args.defect);
        for line in &report.events {
            println!("{line}");
        }
        return finish(&report, true);
    }
    let budget = args.minutes.map(|m| Duration::from_secs_f64(m * 60.0));
    let count = args
        .seeds
        .unwrap_or(if budget.is_some() { u64::MAX } else { 100 });
    let started = Instant::now();
    let (mut runs, mut sagas, mut simulated_ms) = (0u64, 0usize, 0u128);
    let mut figures = std::collections::BTreeMap::new();
    for seed in args.from..args.from.saturating_add(count) {
        if budget.is_some_and(|b| started.elapsed() >= b) {
            break;
        }
        let report = sim::world::run(seed, args.defect);
        runs += 1;
        sagas += report.sagas;
        simulated_ms += report.simulated_ms;
        for (name, n) in &report.figures {
            *figures.entry(*name).or_insert(0) += n;
        }
        if !report.violations.is_empty() {
            return finish(&report, false);
        }
    }
    let secs = started.elapsed().as_secs_f64().max(1e-9);
    println!(
        "{runs} seeds passed in {secs:.1} s: {:.0} seeds/min, {:.0} simulated sagas/s ({sagas} sagas, {:.0} simulated minutes)",
        runs as f64 * 60.0 / secs,
        sagas as f64 / secs,
        simulated_ms as f64 / 60_000.0
    );
    let figures: Vec<String> = figures.iter().map(|(k, v)| format!("{k} {v}")).collect();
    println!("in all: {}", figures.join(", "));
    ExitCode::SUCCESS
}

/// Prints a run's violations (with the log leading to the first unless
/// the whole log was printed); the exit status.
fn finish(report: &sim::world::Report, printed_log: bool) -> ExitCode {
    let Some(first) = report.violations.first() else {
        println!(
            "seed {}: every invariant holds ({} sagas)",
            report.seed, report.sagas
        );
        return ExitCode::SUCCESS;
    };
    if !printed_log {
        let end = first.at_line.min(report.events.len());
        println!(
            "event log of seed {} leading to the violation:",
            report.seed
        );
        for line in &report.events[end.saturating_sub(80)..end] {
            println!("{line}");
        }
    }
    for v in &report.violations {
        println!(
            "VIOLATION seed {}: {}: {}",
            report.seed, v.invariant, v.detail
        );
    }
    println!("replay it with: sim --seed {}", report.seed);
    ExitCode::FAILURE
}
