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
//! the RSS of each service.
//!
//! ```sh
//! cargo build --release --workspace --bins
//! ./target/release/loadgen --smoke                       # CI: fails on errors/stuck sagas, never on timings
//! ./target/release/loadgen --concurrency 64 --duration 10
//! ./target/release/loadgen --single                      # sequential single-saga latency
//! ./target/release/loadgen --backend mongo --smoke
//! ./target/release/loadgen --durability power-loss --duration 5
//! ```
//!
//! Besides the human-readable report, one line `loadgen-json: {...}` carries
//! every figure for scripts. The exit code is non-zero when any call failed,
//! any saga was stuck or FAILED, an order ended other than its mix class
//! says, a saga of the run is left unfinished, or the audit does not add up.

#[path = "loadgen/procs.rs"]
mod procs;
#[path = "loadgen/stack.rs"]
mod stack;
#[path = "loadgen/workload.rs"]
mod workload;

use clap::Parser;
use procs::Watched;
use stack::{SpawnConfig, Stack};
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::{Duration, Instant};
use workload::{Catalog, Clients, Kind, Mix, Phase, Stop, Tally};

#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
enum Backend {
    /// SQLite files in a fresh temp dir.
    Embedded,
    /// MongoDB: MONGODB_URI when set, else the emulator
    /// (scripts/mongo-emulator.sh).
    Mongo,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
enum DurabilityArg {
    /// Commits survive kill -9 of a service.
    Process,
    /// fsync on every (group) commit.
    PowerLoss,
}

impl DurabilityArg {
    fn as_str(self) -> &'static str {
        match self {
            DurabilityArg::Process => "process",
            DurabilityArg::PowerLoss => "power-loss",
        }
    }
}

#[derive(Debug, clap::Parser)]
#[command(
    name = "loadgen",
    about = "Load generator: saga throughput and latency versus the raw Charge+Deduct floor"
)]
struct Args {
    /// Orchestrator of a running stack (e.g. http://127.0.0.1:50051);
    /// needs --payment and --inventory too. Without it the stack is spawned.
    #[arg(long, requires_all = ["payment", "inventory"], conflicts_with = "spawn")]
    orchestrator: Option<String>,
    /// payment-svc of the running stack (seeding, floor, audit).
    #[arg(long, requires = "orchestrator")]
    payment: Option<String>,
    /// inventory-svc of the running stack (seeding, floor, audit).
    #[arg(long, requires = "orchestrator")]
    inventory: Option<String>,
    /// Start orchestrator, payment-svc and inventory-svc (the binaries next
    /// to this one) on free 127.0.0.1 ports with fresh data. The default.
    #[arg(long)]
    spawn: bool,
    /// Store of the spawned stack.
    #[arg(long, value_enum, default_value_t = Backend::Embedded)]
    backend: Backend,
    /// Durability of the spawned stack's embedded stores.
    #[arg(long, env = "DURABILITY", value_enum, default_value_t = DurabilityArg::Process)]
    durability: DurabilityArg,
    /// Where the service binaries are (default: next to loadgen).
    #[arg(long)]
    bin_dir: Option<PathBuf>,
    /// Parent of the spawned stack's temp data dir (default: the system temp dir).
    #[arg(long)]
    tmp_dir: Option<PathBuf>,
    /// Keep the spawned stack's data dir and logs.
    #[arg(long)]
    keep_data: bool,
    /// Calls in flight at once (default 64; smoke 16; single 1). On the
    /// MongoDB emulator, which runs one transaction at a time, the defaults
    /// are 8 and 4: more only adds write-conflict retries.
    #[arg(short = 'c', long)]
    concurrency: Option<usize>,
    /// Measure this many sagas (default: --duration 10).
    #[arg(short = 'n', long, conflicts_with = "duration")]
    sagas: Option<u64>,
    /// Measure for this many seconds.
    #[arg(short = 'd', long)]
    duration: Option<f64>,
    /// Seconds of uncounted traffic before each measured phase (default 1;
    /// smoke 0; single 0.5). Its errors still count.
    #[arg(long)]
    warmup: Option<f64>,
    /// HTTP/2 connections per service, shared round-robin by the workers.
    #[arg(long, default_value_t = 8)]
    connections: usize,
    /// Lines per order (distinct products, quantity 1, 100 cents each).
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u16).range(1..=100))]
    items: u16,
    /// Fraction of orders whose charge is refused (a customer with 1 cent):
    /// CANCELLED with nothing to undo (default 0; smoke 0.1).
    #[arg(long)]
    cancel_ratio: Option<f64>,
    /// Fraction of orders whose deduction is refused (a product short of
    /// stock): charge then refund, CANCELLED (default 0; smoke 0.05).
    #[arg(long)]
    compensate_ratio: Option<f64>,
    /// Seeded customers with huge balances, to spread the write load
    /// (default 256; 32 with --backend mongo).
    #[arg(long)]
    customers: Option<usize>,
    /// Seeded products with huge stock (default 256; 32 with --backend mongo).
    #[arg(long)]
    products: Option<usize>,
    /// Concurrent seeding calls (default 32; 4 with --backend mongo, whose
    /// emulator serialises transactions).
    #[arg(long)]
    seed_concurrency: Option<usize>,
    /// Skip the raw floor (Charge + Deduct without the orchestrator).
    #[arg(long)]
    no_floor: bool,
    /// Short CI run (300 sagas at concurrency 16 with a cancel and
    /// compensation mix): fails on errors, stuck sagas or a mix mismatch,
    /// never on timings. Last line: `loadgen smoke: N passed, N failed`.
    #[arg(long, conflicts_with = "single")]
    smoke: bool,
    /// Sequential single-saga latency on an idle stack (concurrency 1,
    /// 2000 sagas unless --sagas).
    #[arg(long)]
    single: bool,
    /// Give up after this many seconds in all (default 900; smoke 300).
    #[arg(long)]
    timeout: Option<f64>,
    /// Deadline of one CreateOrder (sent as grpc-timeout; the orchestrator
    /// holds a `wait` call at most that long) or floor RPC, in ms.
    #[arg(long, default_value_t = 20_000)]
    call_timeout_ms: u64,
    /// Processes of a running stack to report memory and CPU of:
    /// `name=pid,...`, or bare pids (orchestrator, payment-svc, inventory-svc).
    #[arg(long, value_delimiter = ',')]
    pids: Vec<String>,
    /// Admin token for the seeding calls (Deposit, AddStock) when the
    /// services require one; a spawned stack is given the same token.
    #[arg(long, env = "ADMIN_TOKEN", hide_env_values = true)]
    admin_token: Option<String>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Mode {
    Full,
    Smoke,
    Single,
}

impl Mode {
    fn as_str(self) -> &'static str {
        match self {
            Mode::Full => "full",
            Mode::Smoke => "smoke",
            Mode::Single => "single",
        }
    }
}

#[derive(Clone, Copy, Debug)]
enum Amount {
    Sagas(u64),
    Seconds(f64),
}

/// The run, with every default resolved.
struct Plan {
    mode: Mode,
    spawn: Option<SpawnConfig>,
    addrs: Option<(String, String, String)>,
    pids: Vec<Watched>,
    concurrency: usize,
    connections: usize,
    amount: Amount,
    warmup: f64,
    items: usize,
    mix: Mix,
    customers: usize,
    products: usize,
    seed_concurrency: usize,
    floor: bool,
    timeout: Duration,
    call_timeout: Duration,
    run: String,
    admin_token: Option<String>,
}

fn fraction(name: &str, v: f64) -> Result<f64, String> {
    if (0.0..=1.0).contains(&v) {
        Ok(v)
    } else {
        Err(format!("{name} must be between 0 and 1 (got {v})"))
    }
}

fn plan(args: Args) -> Result<Plan, String> {
    let mode = if args.smoke {
        Mode::Smoke
    } else if args.single {
        Mode::Single
    } else {
        Mode::Full
    };
    let (def_conc, def_amount, def_warmup, def_cancel, def_comp, def_timeout) = match mode {
        Mode::Full => (64, Amount::Seconds(10.0), 1.0, 0.0, 0.0, 900.0),
        Mode::Smoke => (16, Amount::Sagas(300), 0.0, 0.1, 0.05, 300.0),
        Mode::Single => (1, Amount::Sagas(2000), 0.5, 0.0, 0.0, 900.0),
    };
    let mongo = args.orchestrator.is_none() && args.backend == Backend::Mongo;
    let emulated = mongo && std::env::var("MONGODB_URI").map_or(true, |u| u.is_empty());
    let def_conc = match (emulated, mode) {
        (true, Mode::Full) => 8,
        (true, _) => def_conc.min(4),
        (false, _) => def_conc,
    };
    let concurrency = if mode == Mode::Single {
        if args.concurrency.is_some_and(|c| c != 1) {
            return Err("--single runs at concurrency 1".into());
        }
        1
    } else {
        args.concurrency.unwrap_or(def_conc)
    };
    if concurrency == 0 || concurrency > 10_000 {
        return Err(format!(
            "--concurrency must be 1..=10000 (got {concurrency})"
        ));
    }
    let amount = match (args.sagas, args.duration) {
        (Some(0), _) => return Err("--sagas must be positive".into()),
        (Some(n), _) => Amount::Sagas(n),
        (None, Some(t)) if !(t > 0.0 && t <= 86_400.0) => {
            return Err(format!(
                "--duration must be in (0, 86400] seconds (got {t})"
            ));
        }
        (None, Some(t)) => Amount::Seconds(t),
        (None, None) => def_amount,
    };
    let warmup = args.warmup.unwrap_or(def_warmup);
    if !(0.0..=3600.0).contains(&warmup) {
        return Err(format!(
            "--warmup must be in [0, 3600] seconds (got {warmup})"
        ));
    }
    let mix = Mix {
        cancel: fraction("--cancel-ratio", args.cancel_ratio.unwrap_or(def_cancel))?,
        compensate: fraction(
            "--compensate-ratio",
            args.compensate_ratio.unwrap_or(def_comp),
        )?,
    };
    if mix.cancel + mix.compensate > 1.0 {
        return Err("--cancel-ratio + --compensate-ratio must not exceed 1".into());
    }
    let items = usize::from(args.items);
    let customers = args.customers.unwrap_or(if mongo { 32 } else { 256 });
    let products = args.products.unwrap_or(if mongo { 32 } else { 256 });
    let seed_concurrency = args.seed_concurrency.unwrap_or(if mongo { 4 } else { 32 });
    if customers == 0 || products < items || customers > 1_000_000 || products > 1_000_000 {
        return Err(format!(
            "need 1 <= --customers <= 1000000 and --items ({items}) <= --products <= 1000000"
        ));
    }
    let timeout = args.timeout.unwrap_or(def_timeout);
    if !(timeout > 0.0 && timeout <= 7.0 * 86_400.0) {
        return Err(format!("--timeout must be positive (got {timeout})"));
    }
    let run = format!("lg-{}", &uuid::Uuid::now_v7().simple().to_string()[20..]);
    let pids = procs::parse_pids(&args.pids)?;
    let (spawn, addrs) = match args.orchestrator {
        Some(orchestrator) => (
            None,
            Some((
                orchestrator,
                args.payment.unwrap_or_default(),
                args.inventory.unwrap_or_default(),
            )),
        ),
        None => {
            if !pids.is_empty() {
                return Err("--pids is for a running stack (with --orchestrator)".into());
            }
            (
                Some(SpawnConfig {
                    mongo: args.backend == Backend::Mongo,
                    durability: args.durability.as_str(),
                    bin_dir: args.bin_dir.unwrap_or_else(stack::default_bin_dir),
                    tmp_parent: args.tmp_dir,
                    keep_data: args.keep_data,
                    run: run.clone(),
                    admin_token: args.admin_token.clone(),
                }),
                None,
            )
        }
    };
    Ok(Plan {
        mode,
        spawn,
        addrs,
        pids,
        concurrency,
        connections: if mode == Mode::Single {
            1
        } else {
            args.connections.clamp(1, concurrency)
        },
        amount,
        warmup,
        items,
        mix,
        customers,
        products,
        seed_concurrency,
        floor: !args.no_floor,
        timeout: Duration::from_secs_f64(timeout),
        call_timeout: Duration::from_millis(args.call_timeout_ms.max(1)),
        run,
        admin_token: args.admin_token,
    })
}

/// One process in the report.
struct ProcReport {
    name: String,
    pid: u32,
    memory: Option<procs::Memory>,
    cpu_saga: Option<f64>,
    cpu_floor: Option<f64>,
}

/// Everything measured; filled in as the run goes, so a timeout still
/// reports what was done.
#[derive(Default)]
struct Outcome {
    store: String,
    seed_secs: Option<f64>,
    warmup: Option<Tally>,
    saga: Option<Tally>,
    floor_warmup: Option<Tally>,
    floor: Option<Tally>,
    unfinished: Option<(u64, Vec<String>)>,
    audit: Option<workload::Audit>,
    audit_skipped: Option<String>,
    procs: Vec<ProcReport>,
    fatal: Option<String>,
    /// What was going on (for a timeout message).
    stage: &'static str,
}

fn ms(us: u64) -> f64 {
    us as f64 / 1000.0
}

async fn drive(plan: &Plan, out: &mut Outcome) -> Result<(), String> {
    let mut stack = None;
    let (orchestrator, payment, inventory) = match (&plan.spawn, &plan.addrs) {
        (Some(config), _) => {
            eprintln!(
                "loadgen: starting orchestrator, payment-svc, inventory-svc from {} ({}, durability {})",
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
            let addrs = (
                s.orchestrator.clone(),
                s.payment.clone(),
                s.inventory.clone(),
            );
            stack = Some(s);
            addrs
        }
        (None, Some(addrs)) => {
            out.store = format!("running stack at {}", addrs.0);
            addrs.clone()
        }
        (None, None) => return Err("no stack to drive".into()),
    };
    let mut watched: Vec<Watched> = match &stack {
        Some(s) => s
            .procs
            .iter()
            .map(|p| Watched {
                name: p.name.to_owned(),
                pid: p.pid(),
            })
            .collect(),
        None => plan.pids.clone(),
    };
    watched.push(Watched {
        name: "loadgen".into(),
        pid: std::process::id(),
    });
    let result = measure(plan, out, &watched, &orchestrator, &payment, &inventory).await;
    out.procs = watched
        .iter()
        .enumerate()
        .map(|(i, w)| ProcReport {
            name: w.name.clone(),
            pid: w.pid,
            memory: procs::memory(w.pid),
            cpu_saga: out.procs.get(i).and_then(|p| p.cpu_saga),
            cpu_floor: out.procs.get(i).and_then(|p| p.cpu_floor),
        })
        .collect();
    if let Some(s) = &mut stack {
        let bad = result.is_err() || !failures(plan, out).is_empty();
        if bad {
            s.dump_logs(15);
        } else {
            let lines: usize = s.procs.iter().map(|p| stack::log_lines(&p.log)).sum();
            if lines > 0 {
                eprintln!(
                    "loadgen: the services logged {lines} warning/error lines (--keep-data keeps them)"
                );
            }
        }
        if plan.spawn.as_ref().is_some_and(|c| c.keep_data) {
            eprintln!("loadgen: data and logs kept in {}", s.keep().display());
        }
    }
    result
}

async fn measure(
    plan: &Plan,
    out: &mut Outcome,
    watched: &[Watched],
    orchestrator: &str,
    payment: &str,
    inventory: &str,
) -> Result<(), String> {
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
    let t0 = Instant::now();
    out.stage = "seeding";
    eprintln!(
        "loadgen: seeding {} customers and {} products",
        plan.customers, plan.products
    );
    workload::seed(&clients, &cat, plan.seed_concurrency).await?;
    out.seed_secs = Some(t0.elapsed().as_secs_f64());

    let phase = |kind, tag, stop| Phase {
        kind,
        tag,
        concurrency: plan.concurrency,
        stop,
        mix: plan.mix,
        call_timeout: plan.call_timeout,
    };
    let warm = || Stop::Until(Instant::now() + Duration::from_secs_f64(plan.warmup));
    let measured = || match plan.amount {
        Amount::Sagas(n) => Stop::Count(n),
        Amount::Seconds(t) => Stop::Until(Instant::now() + Duration::from_secs_f64(t)),
    };

    out.stage = "saga phase";
    eprintln!("loadgen: saga phase");
    if plan.warmup > 0.0 {
        out.warmup =
            Some(workload::run_phase(&clients, &cat, &phase(Kind::Saga, "w", warm())).await);
    }
    let before = procs::cpu_snapshot(watched);
    let saga = workload::run_phase(&clients, &cat, &phase(Kind::Saga, "m", measured())).await;
    let used = procs::cpu_used(&before, &procs::cpu_snapshot(watched));
    for (p, c) in out.procs.iter_mut().zip(used) {
        p.cpu_saga = c;
    }
    let saga_ok = saga.ok;
    out.saga = Some(saga);
    out.stage = "the store check";
    out.unfinished = Some(workload::unfinished_sagas(&clients, &plan.run).await?);

    if plan.floor && saga_ok > 0 {
        out.stage = "floor phase";
        eprintln!("loadgen: floor phase (Charge + Deduct straight to the participants)");
        if plan.warmup > 0.0 {
            out.floor_warmup =
                Some(workload::run_phase(&clients, &cat, &phase(Kind::Floor, "fw", warm())).await);
        }
        let pairs = match plan.amount {
            Amount::Sagas(n) => n,
            Amount::Seconds(_) => saga_ok,
        };
        let before = procs::cpu_snapshot(watched);
        let floor =
            workload::run_phase(&clients, &cat, &phase(Kind::Floor, "f", Stop::Count(pairs))).await;
        let used = procs::cpu_used(&before, &procs::cpu_snapshot(watched));
        for (p, c) in out.procs.iter_mut().zip(used) {
            p.cpu_floor = c;
        }
        out.floor = Some(floor);
    }

    let tallies = [&out.warmup, &out.saga, &out.floor_warmup, &out.floor];
    let unknown: u64 = tallies
        .iter()
        .filter_map(|t| t.as_ref())
        .map(|t| t.errors + t.stuck)
        .sum();
    if unknown == 0 {
        let applied: u64 = [&out.warmup, &out.saga]
            .iter()
            .filter_map(|t| t.as_ref())
            .map(|t| t.completed)
            .sum::<u64>()
            + [&out.floor_warmup, &out.floor]
                .iter()
                .filter_map(|t| t.as_ref())
                .map(|t| t.ok)
                .sum::<u64>();
        out.stage = "the audit";
        out.audit = Some(workload::audit(&clients, &cat, applied).await?);
    } else {
        out.audit_skipped = Some(format!("{unknown} calls ended with an unknown outcome"));
    }
    Ok(())
}

/// Why the run fails (empty: it passed). Never about timings.
fn failures(plan: &Plan, out: &Outcome) -> Vec<String> {
    let mut why = Vec::new();
    if let Some(f) = &out.fatal {
        why.push(f.clone());
    }
    let named = [
        ("saga warmup", &out.warmup),
        ("saga phase", &out.saga),
        ("floor warmup", &out.floor_warmup),
        ("floor phase", &out.floor),
    ];
    for (name, tally) in named {
        if let Some(t) = tally
            && t.problems() > 0
        {
            why.push(format!(
                "{name}: {} errors, {} stuck, {} FAILED, {} mix mismatches, {} duplicates",
                t.errors, t.stuck, t.failed, t.mismatches, t.duplicates
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
    why
}

fn row(name: &str, t: &Tally) -> String {
    let h = &t.hist;
    let q = |q: f64| {
        if h.is_empty() {
            0.0
        } else {
            ms(h.value_at_quantile(q))
        }
    };
    format!(
        "{name:<26} {:>8} {:>8.2} {:>10.1} {:>8.3} {:>8.3} {:>8.3} {:>8.3} {:>8.3} {:>8}",
        t.ok,
        t.wall.as_secs_f64(),
        t.rate(),
        if h.is_empty() { 0.0 } else { h.mean() / 1000.0 },
        q(0.5),
        q(0.9),
        q(0.99),
        if h.is_empty() { 0.0 } else { ms(h.max()) },
        t.problems()
    )
}

/// Rounds to 3 decimals for the JSON line.
fn r3(v: f64) -> f64 {
    (v * 1000.0).round() / 1000.0
}

fn tally_json(t: &Tally, saga: bool) -> serde_json::Value {
    let h = &t.hist;
    let q = |q: f64| {
        if h.is_empty() {
            0.0
        } else {
            ms(h.value_at_quantile(q))
        }
    };
    let wall = t.wall.as_secs_f64();
    let mut v = serde_json::json!({
        "count": t.ok,
        "wall_s": r3(wall),
        "per_s": r3(t.rate()),
        "mean_ms": r3(if h.is_empty() { 0.0 } else { h.mean() / 1000.0 }),
        "p50_ms": q(0.5),
        "p90_ms": q(0.9),
        "p99_ms": q(0.99),
        "max_ms": if h.is_empty() { 0.0 } else { ms(h.max()) },
        "errors": t.errors,
    });
    if saga {
        let extra = serde_json::json!({
            "completed_per_s": r3(if wall > 0.0 { t.completed as f64 / wall } else { 0.0 }),
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

fn report(plan: &Plan, out: &Outcome, why: &[String]) {
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
    if let Some(s) = out.seed_secs {
        println!(
            "seeded {} customers, {} products (+ refusal fixtures) in {s:.2} s",
            plan.customers, plan.products
        );
    }
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
    if let Some(t) = &out.warmup {
        println!("{}", row("saga warmup (not counted)", t));
    }
    if let Some(t) = &out.saga {
        println!("{}", row("saga (CreateOrder, wait)", t));
    }
    if let Some(t) = &out.floor_warmup {
        println!("{}", row("floor warmup (not counted)", t));
    }
    if let Some(t) = &out.floor {
        println!("{}", row("floor (Charge + Deduct)", t));
    }
    if let (Some(s), Some(f)) = (&out.saga, &out.floor)
        && f.rate() > 0.0
    {
        println!(
            "ratio saga/floor throughput: {:.3} ({:.1} sagas/s ÷ {:.1} pairs/s); latency p50 {:.3} ms vs {:.3} ms",
            s.rate() / f.rate(),
            s.rate(),
            f.rate(),
            ms(s.hist.value_at_quantile(0.5)),
            ms(f.hist.value_at_quantile(0.5)),
        );
    }
    if let Some(t) = &out.saga {
        println!(
            "outcomes: COMPLETED {} (expected {}), CANCELLED {} (expected {}: {} refused charge, {} compensated); \
             {:.1} COMPLETED/s",
            t.completed,
            t.expected_completed,
            t.cancelled,
            t.expected_cancelled,
            t.refused_charge,
            t.compensated,
            if t.wall.as_secs_f64() > 0.0 {
                t.completed as f64 / t.wall.as_secs_f64()
            } else {
                0.0
            }
        );
        println!(
            "problems: errors {}, stuck {}, FAILED {}, mix mismatches {}, duplicates {}",
            t.errors, t.stuck, t.failed, t.mismatches, t.duplicates
        );
    }
    if plan.mode == Mode::Single
        && let Some(t) = &out.saga
        && !t.hist.is_empty()
    {
        let (p50, p99) = (
            ms(t.hist.value_at_quantile(0.5)),
            ms(t.hist.value_at_quantile(0.99)),
        );
        println!(
            "single saga latency: p50 {p50:.3} ms (target ≤ 0.6: {}), p99 {p99:.3} ms (target ≤ 2: {}) — informational",
            if p50 <= 0.6 { "met" } else { "missed" },
            if p99 <= 2.0 { "met" } else { "missed" }
        );
    }
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
        println!("memory at end: {}", mem_parts.join(", "));
    }
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    println!(
        "cpu seconds saga|floor phase ({cores} cores; loadgen competes with the services): {}",
        cpu_parts.join(", ")
    );
    for t in [&out.warmup, &out.saga, &out.floor_warmup, &out.floor]
        .into_iter()
        .flatten()
    {
        for s in &t.samples {
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

    let json = serde_json::json!({
        "mode": plan.mode.as_str(),
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
        "processes": out.procs.iter().map(|p| serde_json::json!({
            "name": p.name,
            "pid": p.pid,
            "rss_mb": p.memory.map(|m| r3(m.rss_mb)),
            "peak_rss_mb": p.memory.map(|m| r3(m.peak_mb)),
            "cpu_s_saga": p.cpu_saga.map(r3),
            "cpu_s_floor": p.cpu_floor.map(r3),
        })).collect::<Vec<_>>(),
        "passed": why.is_empty(),
        "failures": why,
    });
    println!("loadgen-json: {json}");
}

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

fn main() -> ExitCode {
    let args = Args::parse();
    let smoke = args.smoke;
    let plan = match plan(args) {
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
    // The stack lives inside `drive`: a timeout or a signal drops that
    // future, which stops the spawned services.
    let fatal = runtime.block_on(async {
        tokio::select! {
            r = tokio::time::timeout(plan.timeout, drive(&plan, &mut out)) => match r {
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
    let why = failures(&plan, &out);
    report(&plan, &out, &why);
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
