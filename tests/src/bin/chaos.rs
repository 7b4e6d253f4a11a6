//! Chaos soak: the three real service binaries as separate processes, many
//! concurrent orders, injected participant faults (transient errors, lost
//! replies, business refusals, latency), the orchestrator SIGKILLed and
//! restarted, each participant SIGKILLed and restarted — then the faults
//! stop, every saga must become terminal, and the stores (read directly
//! after a graceful stop) must balance: money and stock moved exactly by the
//! COMPLETED orders, each exactly once; CANCELLED orders net to zero.
//!
//! ```sh
//! cargo build --workspace --bins
//! cargo run -p saga-tests --bin chaos -- --sagas 200 --orchestrator-kills 1
//! cargo run -p saga-tests --bin chaos -- --backend mongo
//! ```
//!
//! The last line is `chaos: <passed> passed, <failed> failed`; the exit code
//! is 0 only when every check passed (2 when the service binaries are not
//! built).

#[path = "chaos/audit.rs"]
mod audit;
#[path = "chaos/cluster.rs"]
mod cluster;
#[path = "chaos/drive.rs"]
mod drive;

use clap::Parser;
use cluster::{Emulator, FaultCounts, Proc, Role, channel, free_addr};
use drive::Drive;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use saga_proto::faults::v1 as faults;
use saga_proto::faults::v1::fault_service_client::FaultServiceClient;
use saga_proto::saga::v1 as pb;
use saga_proto::saga::v1::saga_service_client::SagaServiceClient;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
enum Backend {
    /// SQLite files in the work dir.
    Embedded,
    /// MongoDB: MONGODB_URI if set, else the wire-protocol emulator.
    Mongo,
}

#[derive(Debug, Clone, clap::Parser)]
#[command(
    name = "chaos",
    about = "Chaos soak: real service processes, injected faults, SIGKILLs, then an audit of every store"
)]
struct Args {
    /// Orders (sagas) to create.
    #[arg(long, default_value_t = 1_000)]
    sagas: usize,
    /// Concurrent CreateOrder workers.
    #[arg(long, default_value_t = 32)]
    concurrency: usize,
    /// Times the orchestrator is SIGKILLed (and restarted) during the drive.
    #[arg(long, default_value_t = 2)]
    orchestrator_kills: u32,
    /// Times each participant is SIGKILLed (and restarted) during the drive.
    #[arg(long, default_value_t = 1)]
    participant_restarts: u32,
    #[arg(long, value_enum, default_value_t = Backend::Embedded)]
    backend: Backend,
    /// Seed of the orders and of the fault sequences (default: from the clock;
    /// printed).
    #[arg(long)]
    seed: Option<u64>,
    /// How long every saga has to become terminal once the faults stop.
    #[arg(long, default_value_t = 60)]
    settle_secs: u64,
    /// Probability that a participant call fails with UNAVAILABLE first.
    #[arg(long, default_value_t = 0.05)]
    transient_rate: f64,
    /// Probability that an applied call's reply is lost (UNAVAILABLE).
    #[arg(long, default_value_t = 0.05)]
    drop_reply_rate: f64,
    /// Probability that a Charge/Deduct is refused (FAILED_PRECONDITION).
    #[arg(long, default_value_t = 0.02)]
    refusal_rate: f64,
    /// Each participant call is delayed by a uniform 0..=N ms.
    #[arg(long, default_value_t = 5)]
    latency_ms: u32,
    /// Share of orders after which an already-accepted order is sent again.
    #[arg(long, default_value_t = 0.05)]
    duplicate_rate: f64,
    /// Directory for data and logs (default: a fresh temp dir, removed when
    /// every check passed, kept and printed otherwise).
    #[arg(long)]
    work_dir: Option<PathBuf>,
    /// Keep the work dir even when every check passed.
    #[arg(long)]
    keep_work_dir: bool,
    /// Directory of the orchestrator/payment-svc/inventory-svc binaries
    /// (default: the directory of this executable).
    #[arg(long)]
    bin_dir: Option<PathBuf>,
    /// RUST_LOG of the services.
    #[arg(long, default_value = "warn")]
    log_level: String,
    /// The whole run is abandoned (children killed) after this long.
    #[arg(long, default_value_t = 600)]
    timeout_secs: u64,
}

/// Passed/failed checks, printed as they are decided.
#[derive(Default)]
struct Checks {
    passed: u32,
    failed: u32,
}

impl Checks {
    fn check(&mut self, ok: bool, name: &str, detail: &str) {
        if ok {
            self.passed += 1;
            println!("  PASS  {name}{}", suffix(detail));
        } else {
            self.failed += 1;
            println!("  FAIL  {name}{}", suffix(detail));
        }
    }

    fn problems(&mut self, name: &str, problems: &[String]) {
        self.check(problems.is_empty(), name, "");
        for p in problems.iter().take(20) {
            println!("          - {p}");
        }
        if problems.len() > 20 {
            println!("          … and {} more", problems.len() - 20);
        }
    }
}

fn suffix(detail: &str) -> String {
    if detail.is_empty() {
        String::new()
    } else {
        format!(" — {detail}")
    }
}

fn main() -> std::process::ExitCode {
    let args = Args::parse();
    let bin_dir = match args.bin_dir.clone().or_else(|| {
        std::env::current_exe()
            .ok()
            .and_then(|p| p.parent().map(Path::to_path_buf))
    }) {
        Some(d) => d,
        None => {
            eprintln!("chaos: cannot find the directory of this executable; pass --bin-dir");
            return std::process::ExitCode::from(2);
        }
    };
    let missing: Vec<String> = [Role::Orchestrator, Role::Payment, Role::Inventory]
        .iter()
        .map(|r| bin_dir.join(r.binary()))
        .filter(|p| !p.is_file())
        .map(|p| p.display().to_string())
        .collect();
    if !missing.is_empty() {
        eprintln!(
            "chaos: service binaries not found: {}\nchaos: build them first with:\n\n    cargo build --workspace --bins\n\n(with --release if this chaos binary is a release build)",
            missing.join(", ")
        );
        return std::process::ExitCode::from(2);
    }
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("tokio runtime");
    let mut checks = Checks::default();
    let started = Instant::now();
    let work = work_dir(&args);
    let outcome = runtime.block_on(async {
        let run = run(&args, &bin_dir, &work, &mut checks);
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
        std::process::ExitCode::SUCCESS
    } else {
        std::process::ExitCode::FAILURE
    }
}

fn work_dir(args: &Args) -> PathBuf {
    args.work_dir.clone().unwrap_or_else(|| {
        let stamp = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_millis())
            .unwrap_or(0);
        std::env::temp_dir().join(format!("saga-chaos-{}-{stamp}", std::process::id()))
    })
}

/// Where the services keep their state.
enum Storage {
    Embedded {
        payment: PathBuf,
        inventory: PathBuf,
        orchestrator: PathBuf,
    },
    Mongo {
        uri: String,
        label: &'static str,
        payment: String,
        inventory: String,
        orchestrator: String,
        /// Kept alive for the whole run.
        _emulator: Option<Emulator>,
    },
}

impl Storage {
    fn args(&self, role: Role) -> Vec<String> {
        match self {
            Storage::Embedded {
                payment,
                inventory,
                orchestrator,
            } => {
                let dir = match role {
                    Role::Payment => payment,
                    Role::Inventory => inventory,
                    Role::Orchestrator => orchestrator,
                };
                vec!["--data-dir".into(), dir.display().to_string()]
            }
            Storage::Mongo {
                uri,
                payment,
                inventory,
                orchestrator,
                ..
            } => {
                let db = match role {
                    Role::Payment => payment,
                    Role::Inventory => inventory,
                    Role::Orchestrator => orchestrator,
                };
                vec![
                    "--mongodb-uri".into(),
                    uri.clone(),
                    "--mongodb-database".into(),
                    db.clone(),
                ]
            }
        }
    }
}

/// A participant's fault counters right now (None if it does not answer).
async fn read_faults(addr: std::net::SocketAddr) -> Option<faults::FaultStatus> {
    for _ in 0..10 {
        let mut c = FaultServiceClient::new(channel(addr, Duration::from_secs(2)));
        if let Ok(r) = c.get_faults(faults::GetFaultsRequest {}).await {
            return Some(r.into_inner());
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    None
}

async fn set_faults(addr: std::net::SocketAddr, settings: faults::FaultSettings) -> bool {
    for _ in 0..20 {
        let mut c = FaultServiceClient::new(channel(addr, Duration::from_secs(2)));
        if c.set_faults(settings).await.is_ok() {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    false
}

/// What the chaos controller does at a point of the drive.
#[derive(Debug, Clone, Copy)]
enum Event {
    KillOrchestrator,
    Restart(Role),
}

/// Events spread evenly over the drive (by accepted orders).
fn schedule(args: &Args) -> Vec<(usize, Event)> {
    let mut events = Vec::new();
    for i in 0..args.orchestrator_kills.max(args.participant_restarts) {
        if i < args.orchestrator_kills {
            events.push(Event::KillOrchestrator);
        }
        if i < args.participant_restarts {
            events.push(Event::Restart(Role::Payment));
            events.push(Event::Restart(Role::Inventory));
        }
    }
    let n = events.len();
    events
        .into_iter()
        .enumerate()
        .map(|(i, e)| ((i + 1) * args.sagas / (n + 1), e))
        .collect()
}

/// What happened, for the report.
#[derive(Default)]
struct Tally {
    orchestrator_kills: u32,
    participant_restarts: [u32; 2],
    event_problems: Vec<String>,
    unexpected_exits: Vec<String>,
    faults: [FaultCounts; 2],
    fault_reads_missed: u32,
}

struct Services {
    payment: Proc,
    inventory: Proc,
    orchestrator: Proc,
}

impl Services {
    fn get(&mut self, role: Role) -> &mut Proc {
        match role {
            Role::Payment => &mut self.payment,
            Role::Inventory => &mut self.inventory,
            Role::Orchestrator => &mut self.orchestrator,
        }
    }

    /// Restarts any service that died on its own (and records it).
    async fn revive(&mut self, tally: &mut Tally) -> Result<(), String> {
        for role in [Role::Payment, Role::Inventory, Role::Orchestrator] {
            let p = self.get(role);
            if let Some(status) = p.exited() {
                let msg = format!(
                    "{} (pid gone) exited on its own: {status}; log {}\n{}",
                    p.name(),
                    p.log.display(),
                    cluster::tail(&p.log, 10)
                );
                println!("chaos: {msg}");
                tally.unexpected_exits.push(msg);
                p.start(Duration::from_secs(60)).await?;
            }
        }
        Ok(())
    }
}

const START_LIMIT: Duration = Duration::from_secs(60);

async fn run(args: &Args, bin_dir: &Path, work: &Path, checks: &mut Checks) -> Result<(), String> {
    let seed = args.seed.unwrap_or_else(|| {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_secs() % 1_000_000)
            .unwrap_or(1)
    });
    let mut rng = StdRng::seed_from_u64(seed);
    std::fs::create_dir_all(work.join("logs")).map_err(|e| format!("{}: {e}", work.display()))?;
    let run_tag = format!("{seed}_{}", std::process::id());
    println!(
        "chaos: seed {seed}, {} sagas, concurrency {}, {} orchestrator kill(s), {} restart(s) per participant, backend {:?}",
        args.sagas,
        args.concurrency,
        args.orchestrator_kills,
        args.participant_restarts,
        args.backend
    );
    println!(
        "chaos: faults transient {} drop-reply {} refusal {} latency 0..={} ms; settle {} s",
        args.transient_rate,
        args.drop_reply_rate,
        args.refusal_rate,
        args.latency_ms,
        args.settle_secs
    );
    println!("chaos: binaries from {}", bin_dir.display());
    println!("chaos: work dir {}", work.display());

    let storage = match args.backend {
        Backend::Embedded => {
            let dir = |n: &str| work.join("data").join(n);
            Storage::Embedded {
                payment: dir("payment"),
                inventory: dir("inventory"),
                orchestrator: dir("orchestrator"),
            }
        }
        Backend::Mongo => {
            let (uri, label, emulator) = match std::env::var("MONGODB_URI") {
                Ok(uri) if !uri.is_empty() => (uri, "real MongoDB (MONGODB_URI)", None),
                _ => {
                    let script = Path::new(env!("CARGO_MANIFEST_DIR"))
                        .join("..")
                        .join("scripts")
                        .join("mongo-emulator.sh");
                    let emulator =
                        Emulator::start(&script, &work.join("logs").join("mongo-emulator.log"))?;
                    (
                        format!(
                            "mongodb://127.0.0.1:{}/?directConnection=true",
                            emulator.port
                        ),
                        "emulated MongoDB (wire-protocol emulator, not a real server)",
                        Some(emulator),
                    )
                }
            };
            println!("chaos: storage {label} at {}", mongo_client::redact(&uri));
            Storage::Mongo {
                uri,
                label,
                payment: format!("chaos_{run_tag}_payment"),
                inventory: format!("chaos_{run_tag}_inventory"),
                orchestrator: format!("chaos_{run_tag}_orchestrator"),
                _emulator: emulator,
            }
        }
    };

    let log = |n: &str| work.join("logs").join(format!("{n}.log"));
    let mut base_env = vec![
        ("RUST_LOG".to_owned(), args.log_level.clone()),
        ("RUST_BACKTRACE".to_owned(), "1".to_owned()),
    ];
    if let Ok(v) = std::env::var("NO_COLOR") {
        base_env.push(("NO_COLOR".into(), v));
    }
    let mut fault_env = base_env.clone();
    fault_env.extend([
        (
            "FAULT_TRANSIENT_RATE".to_owned(),
            args.transient_rate.to_string(),
        ),
        (
            "FAULT_DROP_REPLY_RATE".to_owned(),
            args.drop_reply_rate.to_string(),
        ),
        (
            "FAULT_REFUSAL_RATE".to_owned(),
            args.refusal_rate.to_string(),
        ),
        ("FAULT_LATENCY_MS".to_owned(), args.latency_ms.to_string()),
    ]);
    let addr = || free_addr().map_err(|e| format!("no free port: {e}"));
    let (pay_addr, inv_addr, orch_addr) = (addr()?, addr()?, addr()?);
    let participant = |role: Role, a: std::net::SocketAddr| {
        let mut argv = vec!["--listen".to_owned(), a.to_string()];
        argv.extend(storage.args(role));
        Proc::new(
            role,
            bin_dir.join(role.binary()),
            a,
            argv,
            fault_env.clone(),
            log(role.binary()),
            seed,
        )
    };
    let mut orch_argv: Vec<String> = [
        "serve",
        "--listen",
        &orch_addr.to_string(),
        "--payment-addr",
        &format!("http://{pay_addr}"),
        "--inventory-addr",
        &format!("http://{inv_addr}"),
        "--instance-id",
        "chaos-orchestrator",
        "--call-timeout-ms",
        "500",
        "--lease-ttl-ms",
        "3000",
        "--action-attempts",
        "50",
        "--compensation-attempts",
        "10000",
        "--sweep-interval-ms",
        "200",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    orch_argv.extend(storage.args(Role::Orchestrator));
    let mut svc = Services {
        payment: participant(Role::Payment, pay_addr),
        inventory: participant(Role::Inventory, inv_addr),
        orchestrator: Proc::new(
            Role::Orchestrator,
            bin_dir.join(Role::Orchestrator.binary()),
            orch_addr,
            orch_argv,
            base_env.clone(),
            log("orchestrator"),
            seed,
        ),
    };
    for role in [Role::Payment, Role::Inventory, Role::Orchestrator] {
        let p = svc.get(role);
        p.start(START_LIMIT).await?;
        println!(
            "chaos: {} pid {} on {} (log {})",
            p.name(),
            p.pid().unwrap_or(0),
            p.addr,
            p.log.display()
        );
    }

    // Seed.
    let initial = drive::plan_initial(args.sagas);
    drive::seed(
        &initial,
        channel(pay_addr, Duration::from_secs(5)),
        channel(inv_addr, Duration::from_secs(5)),
        &run_tag,
    )
    .await?;
    println!(
        "chaos: seeded {} customers ({} cents in total) and {} products ({} units)",
        initial.balances.len(),
        initial.balances.values().sum::<i64>(),
        initial.stock.len(),
        initial.stock.values().sum::<i64>()
    );

    // Drive, with the chaos schedule running beside it.
    let drive = Arc::new(Drive::default());
    let drive_started = Instant::now();
    let drive_deadline = drive_started + Duration::from_secs(args.timeout_secs);
    let orders_channel = channel(orch_addr, Duration::from_secs(5));
    let mut workers = Vec::new();
    for w in 0..args.concurrency.max(1) {
        let d = drive.clone();
        let ch = orders_channel.clone();
        let (n, dup) = (args.sagas, args.duplicate_rate.clamp(0.0, 1.0));
        workers.push(tokio::spawn(async move {
            d.worker(w, seed, n, dup, ch, drive_deadline).await
        }));
    }
    let workers_total = workers.len();
    let events = schedule(args);
    let mut tally = Tally::default();
    let mut next = 0;
    let mut last_progress = Instant::now();
    loop {
        svc.revive(&mut tally).await?;
        let accepted = drive.accepted.load(Ordering::Relaxed);
        let done = drive.workers_done.load(Ordering::Relaxed) == workers_total;
        if next < events.len() && (accepted >= events[next].0 || done) {
            let (at, event) = events[next];
            next += 1;
            let pause = Duration::from_millis(rng.random_range(200..=500));
            match event {
                Event::KillOrchestrator => {
                    let p = &mut svc.orchestrator;
                    match p.kill9() {
                        Ok(()) => {
                            tally.orchestrator_kills += 1;
                            println!(
                                "chaos: [{accepted}/{} accepted] SIGKILLed orchestrator (kill #{}, planned at {at}); restarting in {} ms",
                                args.sagas,
                                tally.orchestrator_kills,
                                pause.as_millis()
                            );
                        }
                        Err(e) => tally.event_problems.push(e),
                    }
                    tokio::time::sleep(pause).await;
                    let t = Instant::now();
                    p.start(START_LIMIT).await?;
                    println!(
                        "chaos: orchestrator back (pid {}, ready after {} ms)",
                        p.pid().unwrap_or(0),
                        t.elapsed().as_millis()
                    );
                }
                Event::Restart(role) => {
                    let i = usize::from(role == Role::Inventory);
                    let p = svc.get(role);
                    match read_faults(p.addr).await {
                        Some(s) => p.earlier_faults.add(&s),
                        None => tally.fault_reads_missed += 1,
                    }
                    match p.kill9() {
                        Ok(()) => {
                            tally.participant_restarts[i] += 1;
                            println!(
                                "chaos: [{accepted}/{} accepted] SIGKILLed {} (restart #{}, planned at {at}); restarting in {} ms",
                                args.sagas,
                                p.name(),
                                tally.participant_restarts[i],
                                pause.as_millis()
                            );
                        }
                        Err(e) => tally.event_problems.push(e),
                    }
                    tokio::time::sleep(pause).await;
                    let t = Instant::now();
                    p.start(START_LIMIT).await?;
                    println!(
                        "chaos: {} back (pid {}, ready after {} ms)",
                        p.name(),
                        p.pid().unwrap_or(0),
                        t.elapsed().as_millis()
                    );
                }
            }
            continue;
        }
        if done && next >= events.len() {
            break;
        }
        if last_progress.elapsed() >= Duration::from_secs(10) {
            last_progress = Instant::now();
            println!(
                "chaos: … {accepted}/{} accepted, {} seen terminal after {:.0} s ({} CreateOrder retries)",
                args.sagas,
                drive.finished.load(Ordering::Relaxed),
                drive_started.elapsed().as_secs_f64(),
                drive.create_retries.load(Ordering::Relaxed)
            );
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    for w in workers {
        w.await.map_err(|e| format!("worker panicked: {e}"))?;
    }
    let drive_secs = drive_started.elapsed().as_secs_f64();
    let accepted = drive.accepted.load(Ordering::Relaxed);
    println!(
        "chaos: drive done: {accepted}/{} accepted, {} seen terminal, in {drive_secs:.1} s ({:.1} sagas/s)",
        args.sagas,
        drive.finished.load(Ordering::Relaxed),
        accepted as f64 / drive_secs.max(0.001)
    );

    // Faults off, then wait for every saga to become terminal.
    let off = faults::FaultSettings {
        seed,
        ..Default::default()
    };
    for p in [&svc.payment, &svc.inventory] {
        if !set_faults(p.addr, off).await {
            return Err(format!("SetFaults (off) on {} failed", p.name()));
        }
    }
    let settle_started = Instant::now();
    println!(
        "chaos: faults stopped; waiting up to {} s for every saga to become terminal",
        args.settle_secs
    );
    let mut sagas = SagaServiceClient::new(channel(orch_addr, Duration::from_secs(5)));
    let stuck = loop {
        svc.revive(&mut tally).await?;
        let open = match non_terminal(&mut sagas).await {
            Ok(open) => open,
            Err(e) => {
                if settle_started.elapsed() >= Duration::from_secs(args.settle_secs) {
                    return Err(format!("ListSagas keeps failing: {e}"));
                }
                tokio::time::sleep(Duration::from_millis(200)).await;
                continue;
            }
        };
        if open.is_empty() || settle_started.elapsed() >= Duration::from_secs(args.settle_secs) {
            break open;
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    };
    let settle_secs = settle_started.elapsed().as_secs_f64();

    // Final fault counters, then a graceful stop: orchestrator first, so no
    // call is in flight when the participants stop.
    for (i, p) in [&svc.payment, &svc.inventory].into_iter().enumerate() {
        match read_faults(p.addr).await {
            Some(s) => {
                let mut now = FaultCounts::default();
                now.add(&s);
                tally.faults[i] = p.earlier_faults.plus(now);
            }
            None => {
                tally.fault_reads_missed += 1;
                tally.faults[i] = p.earlier_faults;
            }
        }
    }
    let mut stop_problems = Vec::new();
    for role in [Role::Orchestrator, Role::Payment, Role::Inventory] {
        let p = svc.get(role);
        match p.terminate(Duration::from_secs(20)).await {
            Ok(status) if status.success() => {}
            Ok(status) => stop_problems.push(format!(
                "{} exited with {status} on SIGTERM; log {}",
                p.name(),
                p.log.display()
            )),
            Err(e) => stop_problems.push(e),
        }
    }

    // Audit the stores.
    let snapshot = match &storage {
        Storage::Embedded {
            payment,
            inventory,
            orchestrator,
        } => audit::read_sqlite(payment, inventory, orchestrator)?,
        Storage::Mongo {
            uri,
            payment,
            inventory,
            orchestrator,
            ..
        } => audit::read_mongo(uri, payment, inventory, orchestrator).await?,
    };
    let orders = drive.orders.lock().expect("lock").clone();
    let (findings, figures) = audit::check(&snapshot, &orders, &initial);

    // Report.
    let f = tally.faults[0].plus(tally.faults[1]);
    let create_retries = drive.create_retries.load(Ordering::Relaxed);
    let duplicates = drive.duplicates_sent.load(Ordering::Relaxed);
    let mut durations = figures.durations_ms.clone();
    durations.sort_unstable();
    let pct = |q: f64| {
        if durations.is_empty() {
            0
        } else {
            durations[((durations.len() - 1) as f64 * q).round() as usize]
        }
    };
    println!();
    println!("== chaos report (seed {seed}, backend {:?})", args.backend);
    if let Storage::Mongo { label, .. } = &storage {
        println!("  storage:               {label}");
    }
    println!(
        "  sagas:                 {} created, {} completed, {} cancelled, {} failed, {} not terminal",
        orders.len(),
        figures.completed,
        figures.cancelled,
        figures.failed,
        figures.other
    );
    println!("  duplicates sent:       {duplicates}");
    println!("  CreateOrder retries:   {create_retries}");
    println!(
        "  GetSaga poll retries:  {} ({} sagas not seen terminal during the drive)",
        drive.poll_errors.load(Ordering::Relaxed),
        drive.unfinished_waits.load(Ordering::Relaxed)
    );
    let errors = drive.errors_by_code.lock().expect("lock").clone();
    if !errors.is_empty() {
        let mut errors: Vec<_> = errors.into_iter().collect();
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
    println!(
        "  injected:              {} transient errors, {} lost replies, {} refusals, {} delayed calls",
        f.transient_errors, f.dropped_replies, f.refusals, f.delayed_calls
    );
    for (i, name) in ["payment-svc", "inventory-svc"].iter().enumerate() {
        let c = tally.faults[i];
        println!(
            "    {name:<14} {} transient, {} lost replies, {} refusals, {} delayed",
            c.transient_errors, c.dropped_replies, c.refusals, c.delayed_calls
        );
    }
    println!("  compensations:         {}", figures.compensations);
    println!(
        "  orchestrator kills:    {} (SIGKILL, restarted)",
        tally.orchestrator_kills
    );
    println!(
        "  participant restarts:  payment-svc {}, inventory-svc {} (SIGKILL, restarted)",
        tally.participant_restarts[0], tally.participant_restarts[1]
    );
    println!(
        "  saga duration:         p50 {} ms, p99 {} ms, max {} ms",
        pct(0.5),
        pct(0.99),
        durations.last().copied().unwrap_or(0)
    );
    println!(
        "  drive:                 {drive_secs:.1} s ({:.1} sagas/s); settled {settle_secs:.1} s after faults stopped",
        orders.len() as f64 / drive_secs.max(0.001)
    );
    if tally.fault_reads_missed > 0 {
        println!(
            "  note: {} GetFaults reading(s) failed; injected counts are a lower bound",
            tally.fault_reads_missed
        );
    }
    println!();
    println!("== checks");

    let mut not_accepted = drive.problems.lock().expect("lock").clone();
    if orders.len() != args.sagas && not_accepted.is_empty() {
        not_accepted.push(format!("{} of {} accepted", orders.len(), args.sagas));
    }
    checks.problems(
        &format!("all {} orders accepted by CreateOrder", args.sagas),
        &not_accepted,
    );
    let mismatches = drive.duplicate_mismatches.lock().expect("lock").clone();
    checks.problems(
        &format!("{duplicates} duplicate CreateOrders returned the same saga (created=false)"),
        &mismatches,
    );
    checks.check(
        tally.orchestrator_kills == args.orchestrator_kills,
        &format!(
            "orchestrator SIGKILLed and restarted {} time(s)",
            args.orchestrator_kills
        ),
        &format!("done {}", tally.orchestrator_kills),
    );
    checks.check(
        tally.participant_restarts == [args.participant_restarts; 2],
        &format!(
            "each participant SIGKILLed and restarted {} time(s)",
            args.participant_restarts
        ),
        &format!(
            "payment {}, inventory {}",
            tally.participant_restarts[0], tally.participant_restarts[1]
        ),
    );
    let mut lifecycle = tally.event_problems.clone();
    lifecycle.extend(tally.unexpected_exits.iter().cloned());
    checks.problems("no service died other than by our SIGKILLs", &lifecycle);
    let stuck_lines: Vec<String> = stuck
        .iter()
        .map(|s| {
            format!(
                "{} ({}) {:?}: {}",
                s.saga_id,
                s.request_id,
                pb::SagaStatus::try_from(s.status).unwrap_or(pb::SagaStatus::Unspecified),
                s.steps
                    .iter()
                    .map(|st| format!(
                        "{}={:?} attempts {} comp {} {}",
                        st.name,
                        pb::StepStatus::try_from(st.status).unwrap_or(pb::StepStatus::Unspecified),
                        st.attempts,
                        st.compensation_attempts,
                        st.last_error
                    ))
                    .collect::<Vec<_>>()
                    .join("; ")
            )
        })
        .collect();
    checks.problems(
        &format!(
            "0 stuck: every saga terminal within {} s after faults stopped ({} stuck)",
            args.settle_secs,
            stuck.len()
        ),
        &stuck_lines,
    );
    checks.problems("services stopped cleanly on SIGTERM", &stop_problems);
    for finding in &findings {
        checks.problems(&finding.name, &finding.problems);
    }
    let expect = |rate: bool, n: u64, what: &str, checks: &mut Checks| {
        if rate {
            checks.check(n > 0, &format!("{what} actually happened"), &n.to_string());
        } else {
            println!("  ----  {what}: {n} (its rate is 0, not asserted)");
        }
    };
    expect(
        args.transient_rate > 0.0,
        f.transient_errors,
        "injected transient errors",
        checks,
    );
    expect(
        args.drop_reply_rate > 0.0,
        f.dropped_replies,
        "injected lost replies",
        checks,
    );
    expect(
        args.refusal_rate > 0.0,
        f.refusals,
        "injected refusals",
        checks,
    );
    expect(
        args.latency_ms > 0,
        f.delayed_calls,
        "injected delays",
        checks,
    );
    expect(
        args.transient_rate > 0.0 || args.drop_reply_rate > 0.0,
        figures.step_retries,
        "step retries",
        checks,
    );
    // Real refusals happen whatever the fault rates (a quarter of the
    // customers and half of the products run short), so there are always
    // compensations to check.
    expect(true, figures.compensations, "compensations", checks);

    if checks.failed == 0
        && let Storage::Mongo {
            uri,
            payment,
            inventory,
            orchestrator,
            ..
        } = &storage
        && let Ok(client) = mongodb::Client::with_uri_str(uri).await
    {
        for db in [payment, inventory, orchestrator] {
            let _ = client.database(db).drop().await;
        }
    }
    Ok(())
}

/// Every RUNNING or COMPENSATING saga, all pages.
async fn non_terminal(
    client: &mut SagaServiceClient<tonic::transport::Channel>,
) -> Result<Vec<pb::Saga>, tonic::Status> {
    let mut out = Vec::new();
    for status in [pb::SagaStatus::Running, pb::SagaStatus::Compensating] {
        let mut token = String::new();
        for _ in 0..1_000 {
            let page = client
                .list_sagas(pb::ListSagasRequest {
                    status: status as i32,
                    page_size: 500,
                    page_token: token.clone(),
                })
                .await?
                .into_inner();
            out.extend(page.sagas);
            if page.next_page_token.is_empty() {
                break;
            }
            token = page.next_page_token;
        }
    }
    Ok(out)
}
