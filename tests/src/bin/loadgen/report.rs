//! What a run prints on stdout: why it failed (never because of timings),
//! the human-readable report, and one `loadgen-json: {...}` line carrying
//! every figure for scripts.

use crate::plan::{Amount, Mode, Plan};
use crate::run::Outcome;
use crate::stack::{self, BINARIES, LOYALTY};
use crate::tally::Tally;

/// Why the run fails (empty: it passed). Never about timings.
pub fn failures(plan: &Plan, out: &Outcome) -> Vec<String> {
    let mut why = Vec::new();
    if let Some(f) = &out.fatal {
        why.push(f.clone());
    }
    for (name, tally) in phases(out) {
        if let Some(t) = tally
            && t.problems() > 0
        {
            why.push(format!(
                "{name}: {} errors, {} stuck, {} FAILED, {} mix mismatches, {} duplicates",
                t.errors, t.stuck, t.failed, t.mismatches, t.duplicates
            ));
        }
    }
    for p in &out.sweep {
        let problems: u64 = p.tallies().map(Tally::problems).sum();
        if problems > 0 {
            why.push(format!(
                "sweep level {}: {problems} errors, stuck, FAILED, mix mismatches or duplicates",
                p.concurrency
            ));
        }
    }
    match &out.saga {
        Some(t) if t.ok == 0 && out.fatal.is_none() => why.push("no saga finished".into()),
        Some(t) => {
            if let Amount::Sagas(n) = plan.amount
                && t.ok + t.problems() < n
            {
                why.push(format!(
                    "only {} of {n} sagas were driven",
                    t.ok + t.problems()
                ));
            }
        }
        None => {}
    }
    if let Some((n, _)) = &out.unfinished
        && *n > 0
    {
        why.push(format!(
            "{n} sagas of this run are not terminal (or FAILED) in the store"
        ));
    }
    if let Some(a) = &out.audit
        && !a.ok
    {
        why.push(format!("audit: {}", a.detail));
    }
    if let Some(a) = &out.loyalty_audit
        && !a.ok
    {
        why.push(format!("loyalty audit: {}", a.detail));
    }
    why
}

/// The four phases by name, in order.
fn phases(out: &Outcome) -> [(&'static str, &Option<Tally>); 4] {
    [
        ("saga warmup", &out.warmup),
        ("saga phase", &out.saga),
        ("floor warmup", &out.floor_warmup),
        ("floor phase", &out.floor),
    ]
}

/// Prints the report, then the JSON line; `why` are the failures.
pub fn print(plan: &Plan, out: &Outcome, why: &[String]) {
    header(plan, out);
    table(out);
    outcomes(plan, out);
    store_and_audit(out);
    resources(out);
    store_size(plan, out);
    mongo_commands(out);
    crate::sweep::print(out);
    crate::sweep::write(plan, out);
    verdict(out, why);
    println!("loadgen-json: {}", json(plan, out, why));
}

/// What was driven and how.
fn header(plan: &Plan, out: &Outcome) {
    let amount = match plan.amount {
        Amount::Sagas(n) => format!("{n} sagas"),
        Amount::Seconds(t) => format!("{t} s"),
    };
    println!();
    println!("loadgen ({}) — {}", plan.mode.as_str(), out.store);
    println!(
        "workload: {amount} at concurrency {} over {} connection(s) per service, warmup {} s, {} item(s)/order, \
         mix {:.1}% refused charge + {:.1}% compensated, run id {}",
        plan.concurrency,
        plan.connections,
        plan.warmup,
        plan.items,
        plan.mix.cancel * 100.0,
        plan.mix.compensate * 100.0,
        plan.run
    );
    if plan.steps > 2 {
        println!(
            "steps: {} — payment, inventory, then {} at loyalty-svc (participant.v1.SagaStepService, {} point(s) per order and step)",
            plan.steps,
            stack::loyalty_steps(plan.steps).join(", "),
            loyalty_svc::rules::points(plan.items as i64 * 100)
        );
    }
    if let Some(s) = out.seed_secs {
        println!(
            "seeded {} customers, {} products (+ refusal fixtures) in {s:.2} s",
            plan.customers, plan.products
        );
    }
}

/// One row per phase: throughput and latency.
fn table(out: &Outcome) {
    println!(
        "{:<26} {:>8} {:>8} {:>10} {:>8} {:>8} {:>8} {:>8} {:>8} {:>8}",
        "phase",
        "ok",
        "wall s",
        "per s",
        "mean ms",
        "p50 ms",
        "p90 ms",
        "p99 ms",
        "max ms",
        "problems"
    );
    let rows = [
        ("saga warmup (not counted)", &out.warmup),
        ("saga (CreateOrder, wait)", &out.saga),
        ("floor warmup (not counted)", &out.floor_warmup),
        ("floor (Charge + Deduct)", &out.floor),
    ];
    for (name, tally) in rows {
        if let Some(t) = tally {
            println!("{}", row(name, t));
        }
    }
}

fn row(name: &str, t: &Tally) -> String {
    format!(
        "{name:<26} {:>8} {:>8.2} {:>10.1} {:>8.3} {:>8.3} {:>8.3} {:>8.3} {:>8.3} {:>8}",
        t.ok,
        t.wall.as_secs_f64(),
        t.rate(),
        t.mean_ms(),
        t.quantile_ms(0.5),
        t.quantile_ms(0.9),
        t.quantile_ms(0.99),
        t.max_ms(),
        t.problems()
    )
}

/// Saga against floor, saga outcomes against the mix, and the single-saga
/// targets.
fn outcomes(plan: &Plan, out: &Outcome) {
    if let (Some(s), Some(f)) = (&out.saga, &out.floor)
        && f.rate() > 0.0
    {
        println!(
            "ratio saga/floor throughput: {:.3} ({:.1} sagas/s ÷ {:.1} pairs/s); latency p50 {:.3} ms vs {:.3} ms",
            s.rate() / f.rate(),
            s.rate(),
            f.rate(),
            s.quantile_ms(0.5),
            f.quantile_ms(0.5),
        );
    }
    let Some(t) = &out.saga else {
        return;
    };
    println!(
        "outcomes: COMPLETED {} (expected {}), CANCELLED {} (expected {}: {} refused charge, {} compensated); \
         {:.1} COMPLETED/s",
        t.completed,
        t.expected_completed,
        t.cancelled,
        t.expected_cancelled,
        t.refused_charge,
        t.compensated,
        t.completed_rate()
    );
    println!(
        "problems: errors {}, stuck {}, FAILED {}, mix mismatches {}, duplicates {}",
        t.errors, t.stuck, t.failed, t.mismatches, t.duplicates
    );
    if plan.mode == Mode::Single && !t.hist.is_empty() {
        let (p50, p99) = (t.quantile_ms(0.5), t.quantile_ms(0.99));
        println!(
            "single saga latency: p50 {p50:.3} ms (target ≤ 0.6: {}), p99 {p99:.3} ms (target ≤ 2: {}) — informational",
            if p50 <= 0.6 { "met" } else { "missed" },
            if p99 <= 2.0 { "met" } else { "missed" }
        );
    }
}

/// The store check and the audit.
fn store_and_audit(out: &Outcome) {
    if let Some((n, sample)) = &out.unfinished {
        println!(
            "store: {n} sagas of this run non-terminal or FAILED{}",
            if sample.is_empty() {
                String::new()
            } else {
                format!(" ({})", sample.join(", "))
            }
        );
    }
    match (&out.audit, &out.audit_skipped) {
        (Some(a), _) => println!(
            "audit: {} — {}",
            if a.ok { "ok" } else { "MISMATCH" },
            a.detail
        ),
        (None, Some(why)) => println!("audit: skipped ({why})"),
        _ => {}
    }
    if let Some(a) = &out.loyalty_audit {
        println!(
            "loyalty audit: {} — {}",
            if a.ok { "ok" } else { "MISMATCH" },
            a.detail
        );
    }
}

/// Memory and CPU of every watched process.
fn resources(out: &Outcome) {
    let cpu = |c: Option<f64>| c.map_or("-".to_owned(), |c| format!("{c:.2}"));
    let mut mem_parts = Vec::new();
    let mut cpu_parts = Vec::new();
    for p in &out.procs {
        match p.memory {
            Some(m) => mem_parts.push(format!(
                "{} RSS {:.1} MB (peak {:.1})",
                p.name, m.rss_mb, m.peak_mb
            )),
            None => mem_parts.push(format!("{} n/a", p.name)),
        }
        cpu_parts.push(format!(
            "{} {}|{}",
            p.name,
            cpu(p.cpu_saga),
            cpu(p.cpu_floor)
        ));
    }
    if out.procs.len() <= 1 {
        println!(
            "memory: services n/a (not spawned; pass --pids to report them); {}",
            mem_parts.join(", ")
        );
    } else {
        println!("memory after the saga phase: {}", mem_parts.join(", "));
    }
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    println!(
        "cpu seconds saga|floor phase ({cores} cores; loadgen competes with the services): {}",
        cpu_parts.join(", ")
    );
    let sagas = out.saga.as_ref().map_or(0, |t| t.ok);
    let pairs = out.floor.as_ref().map_or(0, |t| t.ok);
    if sagas == 0 {
        return;
    }
    println!(
        "{:<16} {:>16} {:>22} {:>18}",
        "cpu µs per", "saga (saga phase)", "pair (floor phase)", "store bytes/saga"
    );
    for p in &out.procs {
        let us = |cpu, n| per_us(cpu, n).map_or("-".to_owned(), |v| format!("{v:.0}"));
        println!(
            "{:<16} {:>16} {:>22} {:>18}",
            p.name,
            us(p.cpu_saga, sagas),
            us(p.cpu_floor, pairs),
            store_cell(out, &p.name, sagas)
        );
    }
}

/// `name`'s store bytes per saga in the table: the figure, `n/a` for a
/// service without it (gauge missing or not measured), `-` for a process
/// without a store of its own (loadgen, the MongoDB test server).
fn store_cell(out: &Outcome, name: &str, sagas: u64) -> String {
    if !BINARIES.contains(&name) && name != LOYALTY {
        return "-".to_owned();
    }
    store_per_saga(out, name, sagas).map_or("n/a".to_owned(), |v| format!("{v:.1}"))
}

/// `service`'s store bytes per saga of the measured saga phase.
fn store_per_saga(out: &Outcome, service: &str, sagas: u64) -> Option<f64> {
    out.store_size.as_ref()?.per_saga(service, sagas)
}

/// The services whose stores a run measures: loyalty-svc's too with
/// `--steps 3`.
fn measured_services(plan: &Plan) -> Vec<&'static str> {
    stack::services(plan.steps > 2)
}

/// Each service's `store_size_bytes` before and after the measured saga
/// phase, and the growth per saga.
fn store_size(plan: &Plan, out: &Outcome) {
    let sagas = out.saga.as_ref().map_or(0, |t| t.ok);
    let Some(s) = &out.store_size else {
        if out.saga.is_some() && out.sweep.is_empty() {
            println!("store bytes/saga: n/a (not measured: a running stack, or --no-store-size)");
        }
        return;
    };
    let bytes = |v: Option<&f64>| v.map_or("n/a".to_owned(), |v| format!("{v:.0}"));
    let after = s.after.as_ref();
    let parts: Vec<String> = measured_services(plan)
        .iter()
        .map(|name| {
            let (b, a) = (
                s.before.sizes.get(*name),
                after.and_then(|a| a.sizes.get(*name)),
            );
            if b.is_none() && a.is_none() {
                return format!("{name} n/a (no gauge)");
            }
            let per = s
                .per_saga(name, sagas)
                .map_or("n/a".to_owned(), |v| format!("{v:.1}"));
            format!("{name} {} → {} B ({per} B/saga)", bytes(b), bytes(a))
        })
        .collect();
    let waits = match after {
        Some(a) => format!(
            "gauges read after {:.1} s / {:.1} s waits for a refresh{}",
            s.before.waited.as_secs_f64(),
            a.waited.as_secs_f64(),
            if s.before.settled && a.settled {
                ""
            } else {
                " (still moving at the cap: last values)"
            }
        ),
        None => "the run stopped before the gauges were read again".to_owned(),
    };
    println!(
        "store bytes/saga (store_size_bytes after − before the saga phase ÷ {sagas} sagas; purge interval {}, {waits}): {}",
        service_kit::limits::format_duration(s.interval),
        parts.join(", ")
    );
}

/// Store bytes per saga as JSON: per service (null without the gauge),
/// `total` (null unless every service has it), and how the gauges were read.
fn store_json(plan: &Plan, out: &Outcome) -> serde_json::Value {
    let Some(s) = &out.store_size else {
        return serde_json::Value::Null;
    };
    let sagas = out.saga.as_ref().map_or(0, |t| t.ok);
    let per: Vec<(&str, Option<f64>)> = measured_services(plan)
        .iter()
        .map(|name| (*name, s.per_saga(name, sagas)))
        .collect();
    let total = per.iter().map(|(_, v)| *v).sum::<Option<f64>>().map(r3);
    let services: serde_json::Map<String, serde_json::Value> = per
        .into_iter()
        .map(|(name, v)| (name.to_owned(), serde_json::json!(v.map(r3))))
        .collect();
    serde_json::json!({
        "total": total,
        "services": services,
        "sagas": sagas,
        "purge_interval_s": r3(s.interval.as_secs_f64()),
        "wait_before_s": r3(s.before.waited.as_secs_f64()),
        "wait_after_s": s.after.as_ref().map(|a| r3(a.waited.as_secs_f64())),
        "settled": s.before.settled && s.after.as_ref().is_some_and(|a| a.settled),
    })
}

/// CPU µs per call from CPU seconds over `n` calls.
fn per_us(cpu_s: Option<f64>, n: u64) -> Option<f64> {
    crate::sweep::per_saga_us(cpu_s, n)
}

/// MongoDB commands per saga of the measured saga phase, per service and
/// per command kind (MongoDB backend only).
fn mongo_commands(out: &Outcome) {
    let (Some(delta), Some(t)) = (&out.mongo_saga, &out.saga) else {
        return;
    };
    if t.ok == 0 {
        return;
    }
    let per = crate::scrape::per_saga(delta, t.ok);
    let total: f64 = per.values().map(|(n, _)| n).sum();
    println!(
        "MongoDB commands per saga (from each service's mongodb_commands_total): {total:.2} in all"
    );
    for (service, (n, by_command)) in &per {
        let kinds: Vec<String> = by_command
            .iter()
            .map(|(c, v)| format!("{c} {v:.2}"))
            .collect();
        println!("  {service:<14} {n:>6.2}  ({})", kinds.join(", "));
    }
}

/// MongoDB commands per saga as JSON: per service, `total` and `by_command`.
pub fn mongo_json(delta: &crate::scrape::Counts, sagas: u64) -> serde_json::Value {
    let per = crate::scrape::per_saga(delta, sagas);
    let total: f64 = per.values().map(|(n, _)| n).sum();
    let services: serde_json::Map<String, serde_json::Value> = per
        .into_iter()
        .map(|(service, (n, by_command))| {
            (
                service,
                serde_json::json!({
                    "total": r3(n),
                    "by_command": by_command.into_iter().map(|(c, v)| (c, serde_json::json!(r3(v)))).collect::<serde_json::Map<_, _>>(),
                }),
            )
        })
        .collect();
    serde_json::json!({ "total": r3(total), "services": services })
}

/// Sample errors, then `result: ok` or one `FAIL:` line per failure.
fn verdict(out: &Outcome, why: &[String]) {
    for (_, t) in phases(out) {
        for s in t.iter().flat_map(|t| &t.samples) {
            println!("  e.g. {s}");
        }
    }
    if why.is_empty() {
        println!("result: ok");
    } else {
        for w in why {
            println!("FAIL: {w}");
        }
    }
}

/// Rounds to 3 decimals for the JSON line.
fn r3(v: f64) -> f64 {
    (v * 1000.0).round() / 1000.0
}

/// Every figure of the run as one JSON object.
fn json(plan: &Plan, out: &Outcome, why: &[String]) -> serde_json::Value {
    serde_json::json!({
        "mode": plan.mode.as_str(),
        "steps": plan.steps,
        "store": out.store,
        "backend": plan.spawn.as_ref().map(|c| if c.mongo { "mongo" } else { "embedded" }).unwrap_or("external"),
        "durability": plan.spawn.as_ref().map(|c| c.durability),
        "concurrency": plan.concurrency,
        "connections": plan.connections,
        "items": plan.items,
        "cancel_ratio": plan.mix.cancel,
        "compensate_ratio": plan.mix.compensate,
        "warmup_s": plan.warmup,
        "saga_warmup": out.warmup.as_ref().map(|t| tally_json(t, true)),
        "saga": out.saga.as_ref().map(|t| tally_json(t, true)),
        "floor_warmup": out.floor_warmup.as_ref().map(|t| tally_json(t, false)),
        "floor": out.floor.as_ref().map(|t| tally_json(t, false)),
        "ratio": match (&out.saga, &out.floor) {
            (Some(s), Some(f)) if f.rate() > 0.0 => Some(r3(s.rate() / f.rate())),
            _ => None,
        },
        "unfinished_in_store": out.unfinished.as_ref().map(|u| u.0),
        "audit": match (&out.audit, &out.audit_skipped) {
            (Some(a), _) => if a.ok { "ok" } else { "mismatch" },
            (None, Some(_)) => "skipped",
            _ => "not run",
        },
        "loyalty_audit": out.loyalty_audit.as_ref().map(|a| if a.ok { "ok" } else { "mismatch" }),
        "processes": out.procs.iter().map(|p| serde_json::json!({
            "name": p.name,
            "pid": p.pid,
            "rss_mb": p.memory.map(|m| r3(m.rss_mb)),
            "peak_rss_mb": p.memory.map(|m| r3(m.peak_mb)),
            "cpu_s_saga": p.cpu_saga.map(r3),
            "cpu_s_floor": p.cpu_floor.map(r3),
            "cpu_us_per_saga": per_us(p.cpu_saga, out.saga.as_ref().map_or(0, |t| t.ok)).map(|v| v.round()),
            "cpu_us_per_floor_pair": per_us(p.cpu_floor, out.floor.as_ref().map_or(0, |t| t.ok)).map(|v| v.round()),
            "store_bytes_before": out.store_size.as_ref().and_then(|s| s.before.sizes.get(&p.name)).map(|b| b.round() as i64),
            "store_bytes_after": out.store_size.as_ref().and_then(|s| s.after.as_ref()?.sizes.get(&p.name)).map(|b| b.round() as i64),
            "store_bytes_per_saga": store_per_saga(out, &p.name, out.saga.as_ref().map_or(0, |t| t.ok)).map(r3),
        })).collect::<Vec<_>>(),
        "mongo_commands_per_saga": match (&out.mongo_saga, &out.saga) {
            (Some(d), Some(t)) if t.ok > 0 => Some(mongo_json(d, t.ok)),
            _ => None,
        },
        "store_bytes_per_saga": store_json(plan, out),
        "sweep": (!out.sweep.is_empty()).then(|| crate::sweep::json(out)),
        "passed": why.is_empty(),
        "failures": why,
    })
}

/// One phase's figures; saga phases add their outcomes.
fn tally_json(t: &Tally, saga: bool) -> serde_json::Value {
    let mut v = serde_json::json!({
        "count": t.ok,
        "wall_s": r3(t.wall.as_secs_f64()),
        "per_s": r3(t.rate()),
        "mean_ms": r3(t.mean_ms()),
        "p50_ms": t.quantile_ms(0.5),
        "p90_ms": t.quantile_ms(0.9),
        "p99_ms": t.quantile_ms(0.99),
        "max_ms": t.max_ms(),
        "errors": t.errors,
    });
    if saga {
        let extra = serde_json::json!({
            "completed_per_s": r3(t.completed_rate()),
            "completed": t.completed,
            "cancelled": t.cancelled,
            "cancelled_refused_charge": t.refused_charge,
            "cancelled_compensated": t.compensated,
            "expected_completed": t.expected_completed,
            "expected_cancelled": t.expected_cancelled,
            "failed": t.failed,
            "stuck": t.stuck,
            "mix_mismatches": t.mismatches,
            "duplicates": t.duplicates,
        });
        if let (Some(v), serde_json::Value::Object(extra)) = (v.as_object_mut(), extra) {
            v.extend(extra);
        }
    }
    v
}
