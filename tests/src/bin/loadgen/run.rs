//! One load run, stage by stage: start (or attach to) the stack, seed, the
//! saga phase (between fresh readings of the store size gauges), the store
//! check, the floor phase, the audit. Every figure lands in [`Outcome`] as
//! soon as it is known, so a timeout or a signal still reports what was
//! done.

use crate::catalog::Catalog;
use crate::check::{self, Audit};
use crate::loyalty::{self, LoyaltyAudit};
use crate::plan::{Amount, Plan, Urls};
use crate::procs::{self, Watched};
use crate::report;
use crate::scrape;
use crate::stack::{KEPT, Stack};
use crate::sweep;
use crate::tally::Tally;
use crate::workload::{self, Clients, Kind, Phase, Stop};
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// One process in the report.
pub struct ProcReport {
    pub name: String,
    pub pid: u32,
    /// Right after the measured saga phase (the sweep's last level), before
    /// the store check, the floor and the audits: the audits list every
    /// saga of the run through the orchestrator, which would otherwise be
    /// measured as the saga path's memory. At the end of the run when the
    /// run stopped earlier.
    pub memory: Option<procs::Memory>,
    /// CPU seconds during the measured saga phase.
    pub cpu_saga: Option<f64>,
    /// CPU seconds during the measured floor phase.
    pub cpu_floor: Option<f64>,
}

/// The store size gauges around the measured saga phase.
pub struct StoreSize {
    /// The services' purge interval: the gauges' period.
    pub interval: Duration,
    /// Fresh values after the warm-up, before the measured phase.
    pub before: scrape::Settled,
    /// Fresh values after it (None if the run stopped first).
    pub after: Option<scrape::Settled>,
}

impl StoreSize {
    /// `service`'s store bytes per saga over `sagas` sagas; None when a
    /// side lacks its gauge or no saga finished.
    pub fn per_saga(&self, service: &str, sagas: u64) -> Option<f64> {
        let after = self.after.as_ref()?;
        scrape::bytes_per_saga(&self.before.sizes, &after.sizes, service, sagas)
    }
}

/// Everything measured; filled in as the run goes, so a timeout still
/// reports what was done.
#[derive(Default)]
pub struct Outcome {
    /// What was driven (`spawned; <store>; durability …` or a running stack).
    pub store: String,
    pub seed_secs: Option<f64>,
    pub warmup: Option<Tally>,
    pub saga: Option<Tally>,
    pub floor_warmup: Option<Tally>,
    pub floor: Option<Tally>,
    /// Sagas of the run not terminal (or FAILED) in the store, with samples.
    pub unfinished: Option<(u64, Vec<String>)>,
    pub audit: Option<Audit>,
    pub audit_skipped: Option<String>,
    /// `--steps 3`: loyalty-svc's points checked against the sagas.
    pub loyalty_audit: Option<LoyaltyAudit>,
    pub procs: Vec<ProcReport>,
    /// MongoDB commands sent during the measured saga phase, per service
    /// and command (MongoDB backend only).
    pub mongo_saga: Option<scrape::Counts>,
    /// Each service's `store_size_bytes` before and after the measured saga
    /// phase (a spawned stack, unless `--no-store-size`; not in a sweep).
    pub store_size: Option<StoreSize>,
    /// A sweep's levels, in the order run (empty unless `--concurrency`
    /// was a list).
    pub sweep: Vec<sweep::Point>,
    /// Why the run stopped early (error, timeout, signal).
    pub fatal: Option<String>,
    /// What was going on (for a timeout message).
    pub stage: &'static str,
}

/// Starts or attaches to the stack, measures, and records the processes'
/// memory; a spawned stack is stopped when this returns (or is dropped).
pub async fn drive(plan: &Plan, out: &mut Outcome) -> Result<(), String> {
    let mut stack = start_stack(plan, out).await?;
    let (urls, mut watched, metrics, loyalty) = match (&stack, &plan.addrs) {
        (Some(s), _) => (s.urls(), s.watched(), s.metrics.clone(), s.loyalty.clone()),
        (None, Some(addrs)) => {
            out.store = format!("running stack at {}", addrs.0);
            let loyalty = plan.loyalty.clone();
            (addrs.clone(), plan.pids.clone(), Vec::new(), loyalty)
        }
        (None, None) => return Err("no stack to drive".into()),
    };
    watched.push(Watched {
        name: "loadgen".into(),
        pid: std::process::id(),
    });
    let endpoints = Endpoints {
        commands: if plan.spawn.as_ref().is_some_and(|c| c.mongo) {
            metrics.clone()
        } else {
            Vec::new()
        },
        gauges: plan.store_size.map(|interval| (metrics.clone(), interval)),
    };
    let targets = Targets {
        urls: &urls,
        loyalty: loyalty.as_deref(),
    };
    let result = measure(plan, out, &watched, &endpoints, &targets).await;
    out.procs = watched
        .iter()
        .enumerate()
        .map(|(i, w)| ProcReport {
            name: w.name.clone(),
            pid: w.pid,
            memory: out
                .procs
                .get(i)
                .and_then(|p| p.memory)
                .or_else(|| procs::memory(w.pid)),
            cpu_saga: out.procs.get(i).and_then(|p| p.cpu_saga),
            cpu_floor: out.procs.get(i).and_then(|p| p.cpu_floor),
        })
        .collect();
    if let Some(s) = &mut stack {
        let failed = result.is_err() || !report::failures(plan, out).is_empty();
        wrap_up(plan, s, failed);
    }
    result
}

/// The services' Prometheus endpoints, by what is read from them.
struct Endpoints {
    /// `mongodb_commands_total` (MongoDB only; else empty).
    commands: Vec<SocketAddr>,
    /// `store_size_bytes`, with the services' purge interval (None when
    /// store bytes per saga are not measured).
    gauges: Option<(Vec<SocketAddr>, Duration)>,
}

/// The services a run calls.
struct Targets<'a> {
    /// orchestrator, payment-svc, inventory-svc.
    urls: &'a Urls,
    /// loyalty-svc (`--steps` > 2), for its audit.
    loyalty: Option<&'a str>,
}

/// The spawned stack, or none when driving a running one.
async fn start_stack(plan: &Plan, out: &mut Outcome) -> Result<Option<Stack>, String> {
    let Some(config) = &plan.spawn else {
        return Ok(None);
    };
    eprintln!(
        "loadgen: starting orchestrator, payment-svc, inventory-svc{} from {} ({}, durability {})",
        if config.loyalty() {
            ", loyalty-svc"
        } else {
            ""
        },
        config.bin_dir.display(),
        if config.mongo { "mongo" } else { "embedded" },
        config.durability
    );
    out.stage = "start-up";
    let s = Stack::start(config, Duration::from_secs(60)).await?;
    out.store = format!(
        "spawned; {}; durability {}",
        s.store_label, config.durability
    );
    Ok(Some(s))
}

/// The spawned stack's logs: their end when the run failed, else how much
/// they hold. Its data dir is kept when the run failed or on
/// `--keep-data`, and deleted with the stack otherwise.
fn wrap_up(plan: &Plan, stack: &mut Stack, failed: bool) {
    if failed {
        stack.dump_logs(15);
    } else {
        let lines = stack.log_lines();
        if lines > 0 {
            eprintln!(
                "loadgen: the services logged {lines} warning/error lines (--keep-data keeps them)"
            );
        }
    }
    if failed || plan.spawn.as_ref().is_some_and(|c| c.keep_data) {
        eprintln!("{KEPT} {}", stack.keep().display());
    } else {
        stack.discard_data();
    }
}

/// Seed, saga phase, store check, floor phase, audit.
async fn measure(
    plan: &Plan,
    out: &mut Outcome,
    watched: &[Watched],
    endpoints: &Endpoints,
    targets: &Targets<'_>,
) -> Result<(), String> {
    let urls = targets.urls;
    let (orchestrator, payment, inventory) = urls;
    out.procs = watched
        .iter()
        .map(|w| ProcReport {
            name: w.name.clone(),
            pid: w.pid,
            memory: None,
            cpu_saga: None,
            cpu_floor: None,
        })
        .collect();
    let clients = Clients::connect(
        orchestrator,
        payment,
        inventory,
        plan.connections,
        plan.admin_token.as_deref(),
    )
    .await?;
    let cat = Arc::new(Catalog {
        run: plan.run.clone(),
        customers: plan.customers,
        products: plan.products,
        items: plan.items,
    });
    seed(plan, out, &clients, &cat).await?;
    if !plan.sweep.is_empty() {
        let ctx = sweep::Context {
            watched,
            metrics: &endpoints.commands,
            urls,
            cat: &cat,
        };
        sweep::run(plan, out, &ctx).await?;
        note_memory(out);
        out.stage = "the store check";
        out.unfinished = Some(check::unfinished_sagas(&clients, &plan.run).await?);
        return audit(out, &clients, &cat, targets.loyalty, plan.steps).await;
    }
    let saga_ok = saga_phase(plan, out, &clients, &cat, watched, endpoints).await;
    note_memory(out);
    out.stage = "the store check";
    out.unfinished = Some(check::unfinished_sagas(&clients, &plan.run).await?);
    if plan.floor && saga_ok > 0 {
        floor_phase(plan, out, &clients, &cat, watched).await;
    }
    audit(out, &clients, &cat, targets.loyalty, plan.steps).await
}

/// Reads every watched process's memory now, as the report's figure.
fn note_memory(out: &mut Outcome) {
    for p in &mut out.procs {
        p.memory = procs::memory(p.pid);
    }
}

async fn seed(
    plan: &Plan,
    out: &mut Outcome,
    clients: &Clients,
    cat: &Catalog,
) -> Result<(), String> {
    let t0 = Instant::now();
    out.stage = "seeding";
    eprintln!(
        "loadgen: seeding {} customers and {} products",
        plan.customers, plan.products
    );
    workload::seed(clients, cat, plan.seed_concurrency).await?;
    out.seed_secs = Some(t0.elapsed().as_secs_f64());
    Ok(())
}

/// Warmup (if any) and the measured CreateOrder phase, between fresh
/// readings of the store size gauges (when measured); returns the sagas
/// that ended as expected-shaped replies.
async fn saga_phase(
    plan: &Plan,
    out: &mut Outcome,
    clients: &Clients,
    cat: &Arc<Catalog>,
    watched: &[Watched],
    endpoints: &Endpoints,
) -> u64 {
    out.stage = "saga phase";
    eprintln!("loadgen: saga phase");
    if plan.warmup > 0.0 {
        let warm = phase(plan, Kind::Saga, "w", warmup(plan));
        out.warmup = Some(workload::run_phase(clients, cat, &warm).await);
    }
    if let Some((addrs, interval)) = &endpoints.gauges {
        let before = store_sizes(out, addrs, *interval, "before").await;
        out.store_size = Some(StoreSize {
            interval: *interval,
            before,
            after: None,
        });
    }
    out.stage = "saga phase";
    let measured = phase(plan, Kind::Saga, "m", measured(plan));
    let (saga, cpu, mongo) =
        timed_phase(clients, cat, &measured, watched, &endpoints.commands).await;
    for (p, c) in out.procs.iter_mut().zip(cpu) {
        p.cpu_saga = c;
    }
    out.mongo_saga = mongo;
    let ok = saga.ok;
    out.saga = Some(saga);
    if let Some((addrs, interval)) = &endpoints.gauges {
        let after = store_sizes(out, addrs, *interval, "after").await;
        if let Some(s) = &mut out.store_size {
            s.after = Some(after);
        }
    }
    ok
}

/// Fresh `store_size_bytes` of every service at `addrs`, refreshed every
/// `interval` (see [`scrape::settle`]).
async fn store_sizes(
    out: &mut Outcome,
    addrs: &[SocketAddr],
    interval: Duration,
    when: &str,
) -> scrape::Settled {
    out.stage = "the wait for fresh store size gauges";
    eprintln!(
        "loadgen: waiting for fresh store_size_bytes gauges {when} the measured phase (purge interval {})",
        service_kit::limits::format_duration(interval)
    );
    scrape::settle(addrs, interval).await
}

/// Warmup (if any) and as many Charge + Deduct pairs as the saga phase
/// measured.
async fn floor_phase(
    plan: &Plan,
    out: &mut Outcome,
    clients: &Clients,
    cat: &Arc<Catalog>,
    watched: &[Watched],
) {
    out.stage = "floor phase";
    eprintln!("loadgen: floor phase (Charge + Deduct straight to the participants)");
    if plan.warmup > 0.0 {
        let warm = phase(plan, Kind::Floor, "fw", warmup(plan));
        out.floor_warmup = Some(workload::run_phase(clients, cat, &warm).await);
    }
    let pairs = match plan.amount {
        Amount::Sagas(n) => n,
        Amount::Seconds(_) => out.saga.as_ref().map_or(0, |t| t.ok),
    };
    let measured = phase(plan, Kind::Floor, "f", Stop::Count(pairs));
    let (floor, cpu, _) = timed_phase(clients, cat, &measured, watched, &[]).await;
    for (p, c) in out.procs.iter_mut().zip(cpu) {
        p.cpu_floor = c;
    }
    out.floor = Some(floor);
}

/// The money/stock audit, and with loyalty-svc at `loyalty` its points,
/// when every call's outcome is known.
async fn audit(
    out: &mut Outcome,
    clients: &Clients,
    cat: &Catalog,
    loyalty: Option<&str>,
    steps: u8,
) -> Result<(), String> {
    let tallies = [&out.warmup, &out.saga, &out.floor_warmup, &out.floor];
    let levels = out.sweep.iter().flat_map(|p| p.tallies());
    let unknown: u64 = tallies
        .iter()
        .filter_map(|t| t.as_ref())
        .chain(levels)
        .map(|t| t.errors + t.stuck)
        .sum();
    if unknown > 0 {
        out.audit_skipped = Some(format!("{unknown} calls ended with an unknown outcome"));
        return Ok(());
    }
    let completed: u64 = [&out.warmup, &out.saga]
        .iter()
        .filter_map(|t| t.as_ref())
        .chain(out.sweep.iter().flat_map(|p| p.saga_tallies()))
        .map(|t| t.completed)
        .sum();
    let pairs: u64 = [&out.floor_warmup, &out.floor]
        .iter()
        .filter_map(|t| t.as_ref())
        .chain(out.sweep.iter().flat_map(|p| p.floor_tallies()))
        .map(|t| t.ok)
        .sum();
    out.stage = "the audit";
    out.audit = Some(check::audit(clients, cat, completed + pairs).await?);
    if let Some(url) = loyalty {
        out.stage = "the loyalty audit";
        let points = loyalty_svc::rules::points(cat.order_total());
        let steps = crate::stack::loyalty_steps(steps);
        out.loyalty_audit =
            Some(loyalty::audit(clients, url, &cat.run, points, completed, &steps).await?);
    }
    Ok(())
}

/// Runs a measured phase; also returns each watched process's CPU seconds
/// during it and, when `metrics` names the services' Prometheus endpoints,
/// the MongoDB commands they sent.
pub async fn timed_phase(
    clients: &Clients,
    cat: &Arc<Catalog>,
    phase: &Phase,
    watched: &[Watched],
    metrics: &[SocketAddr],
) -> (Tally, Vec<Option<f64>>, Option<scrape::Counts>) {
    let commands_before = if metrics.is_empty() {
        None
    } else {
        Some(scrape::snapshot(metrics).await)
    };
    let before = procs::cpu_snapshot(watched);
    let tally = workload::run_phase(clients, cat, phase).await;
    let used = procs::cpu_used(&before, &procs::cpu_snapshot(watched));
    let commands = match commands_before {
        Some(b) => Some(scrape::delta(&b, &scrape::snapshot(metrics).await)),
        None => None,
    };
    (tally, used, commands)
}

pub fn phase(plan: &Plan, kind: Kind, tag: &str, stop: Stop) -> Phase {
    Phase {
        kind,
        tag: tag.to_owned(),
        concurrency: plan.concurrency,
        stop,
        mix: plan.mix,
        call_timeout: plan.call_timeout,
    }
}

/// `--warmup` seconds from now.
pub fn warmup(plan: &Plan) -> Stop {
    Stop::Until(Instant::now() + Duration::from_secs_f64(plan.warmup))
}

/// The measured amount, from now.
pub fn measured(plan: &Plan) -> Stop {
    match plan.amount {
        Amount::Sagas(n) => Stop::Count(n),
        Amount::Seconds(t) => Stop::Until(Instant::now() + Duration::from_secs_f64(t)),
    }
}
