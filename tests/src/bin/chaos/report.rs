//! The `== chaos report` block: what the run did (sagas, retries, injected
//! faults, kills, timings), printed before the checks so a failed check can
//! be read against it.

use crate::args::Args;
use crate::soak::Outcome;
use std::sync::atomic::Ordering;

/// Prints the report, ending with a blank line.
pub fn print(args: &Args, outcome: &Outcome) {
    println!();
    println!(
        "== chaos report (seed {}, backend {:?})",
        outcome.seed, args.backend
    );
    if let Some(label) = &outcome.storage_label {
        println!("  storage:               {label}");
    }
    sagas(outcome);
    faults(outcome);
    timings(outcome);
    println!();
}

/// Saga outcomes and the retries the drive needed.
fn sagas(outcome: &Outcome) {
    let (figures, drive) = (&outcome.figures, &outcome.drive);
    println!(
        "  sagas:                 {} created, {} completed, {} cancelled, {} failed, {} not terminal",
        outcome.orders.len(),
        figures.completed,
        figures.cancelled,
        figures.failed,
        figures.other
    );
    println!(
        "  duplicates sent:       {} ({} answered by another instance); {} CreateOrder retries moved to another instance",
        outcome.duplicates(),
        drive.duplicates_elsewhere.load(Ordering::Relaxed),
        drive.failovers.load(Ordering::Relaxed)
    );
    println!(
        "  operationHistory:      {} payment rows, {} inventory rows{}",
        figures.op_rows.0,
        figures.op_rows.1,
        outcome
            .loyalty_rows
            .map(|n| format!(", {n} loyalty rows"))
            .unwrap_or_default()
    );
    println!(
        "  CreateOrder retries:   {}",
        drive.create_retries.load(Ordering::Relaxed)
    );
    println!(
        "  GetSaga poll retries:  {} ({} sagas not seen terminal during the drive)",
        drive.poll_errors.load(Ordering::Relaxed),
        drive.unfinished_waits.load(Ordering::Relaxed)
    );
    let mut errors: Vec<_> = drive
        .errors_by_code
        .lock()
        .expect("lock")
        .clone()
        .into_iter()
        .collect();
    if !errors.is_empty() {
        errors.sort();
        println!(
            "    (errors seen: {})",
            errors
                .iter()
                .map(|(c, n)| format!("{c} {n}"))
                .collect::<Vec<_>>()
                .join(", ")
        );
    }
    println!(
        "  step retries:          {} (in {} sagas)",
        figures.step_retries, figures.sagas_with_retries
    );
}

/// Injected faults (in all and per participant), compensations and kills.
fn faults(outcome: &Outcome) {
    let (f, tally) = (&outcome.faults, &outcome.tally);
    println!(
        "  injected:              {} transient errors, {} lost replies, {} refusals, {} delayed calls",
        f.transient_errors, f.dropped_replies, f.refusals, f.delayed_calls
    );
    let third = args_third(outcome);
    for (i, name) in ["payment-svc", "inventory-svc", "loyalty-svc"]
        .iter()
        .enumerate()
        .take(if third { 3 } else { 2 })
    {
        let c = tally.faults[i];
        println!(
            "    {name:<14} {} transient, {} lost replies, {} refusals, {} delayed",
            c.transient_errors, c.dropped_replies, c.refusals, c.delayed_calls
        );
    }
    println!("  compensations:         {}", outcome.figures.compensations);
    println!(
        "  orchestrator kills:    {} across {} instance(s) (SIGKILL, restarted)",
        tally.orchestrator_kills,
        outcome.figures.sagas_per_writer.len().max(1)
    );
    println!(
        "  lease takeovers:       {} in the histories, {} counted by the orchestrators' metrics ({} of a live owner); {} own sagas resumed after a restart; lease TTL {} ms",
        outcome.figures.takeovers,
        tally.counters.takeovers,
        tally.counters.live_owner_takeovers,
        outcome.figures.own_resumes,
        outcome.lease_ttl_ms
    );
    if !outcome.figures.sagas_per_writer.is_empty() {
        println!(
            "  sagas per instance:    {} (an instance counts every saga it wrote a version of)",
            outcome
                .figures
                .sagas_per_writer
                .iter()
                .map(|(w, n)| format!("{w} {n}"))
                .collect::<Vec<_>>()
                .join(", ")
        );
    }
    println!(
        "  participant restarts:  payment-svc {}, inventory-svc {}{} (SIGKILL, restarted)",
        tally.participant_restarts[0],
        tally.participant_restarts[1],
        if third {
            format!(", loyalty-svc {}", tally.participant_restarts[2])
        } else {
            String::new()
        }
    );
}

/// Whether the run had loyalty-svc as its third step.
fn args_third(outcome: &Outcome) -> bool {
    outcome.loyalty_rows.is_some()
}

/// Saga durations, drive and settle times.
fn timings(outcome: &Outcome) {
    let mut durations = outcome.figures.durations_ms.clone();
    durations.sort_unstable();
    let pct = |q: f64| {
        if durations.is_empty() {
            0
        } else {
            durations[((durations.len() - 1) as f64 * q).round() as usize]
        }
    };
    println!(
        "  saga duration:         p50 {} ms, p99 {} ms, max {} ms",
        pct(0.5),
        pct(0.99),
        durations.last().copied().unwrap_or(0)
    );
    println!(
        "  drive:                 {:.1} s ({:.1} sagas/s); settled {:.1} s after faults stopped",
        outcome.drive_secs,
        outcome.drive.accepted.load(Ordering::Relaxed) as f64 / outcome.drive_secs.max(0.001),
        outcome.settle_secs
    );
    if let Some(phase) = &outcome.contention {
        println!(
            "  contention:            {} orders in {:.1} s, {} sent to two instances at once",
            phase.orders.len(),
            phase.secs,
            phase.concurrent_duplicates
        );
    }
    if outcome.tally.fault_reads_missed > 0 {
        println!(
            "  note: {} GetFaults reading(s) failed; injected counts are a lower bound",
            outcome.tally.fault_reads_missed
        );
    }
}
