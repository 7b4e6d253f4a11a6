//! One soak, phase by phase: storage, start, seed, drive with the kill
//! schedule, the contention races, settle (faults off, every saga
//! terminal), stop, manifest, audit, report, checks. Each phase is a
//! function; [`Outcome`] carries what they found to the report and the
//! checks. [`audit_only`] runs the audit alone on a kept run.

use crate::args::{Args, Backend};
use crate::audit::{self, Figures, Finding};
use crate::checks::Checks;
use crate::cluster::channel;
use crate::contention::{self, Plan};
use crate::drive::{self, Drive, Initial, Orders};
use crate::faults::{self, FaultCounts};
use crate::manifest::{self, Manifest};
use crate::report;
use crate::schedule;
use crate::services::{Services, Tally, instance_id, instance_name};
use crate::storage::Storage;
use rand::SeedableRng;
use rand::rngs::StdRng;
use saga_proto::saga::v1 as pb;
use saga_proto::saga::v1::saga_service_client::SagaServiceClient;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

/// Everything a finished run found, for the report and the checks.
pub struct Outcome {
    pub seed: u64,
    /// The MongoDB target's label (MongoDB backend only).
    pub storage_label: Option<String>,
    pub drive: Arc<Drive>,
    /// Accepted orders (the drive's, then the contention phase's).
    pub orders: Orders,
    pub tally: Tally,
    /// Injected faults of both participants together.
    pub faults: FaultCounts,
    pub drive_secs: f64,
    /// The contention phase, when there was one.
    pub contention: Option<contention::Phase>,
    pub settle_secs: f64,
    /// Sagas still not terminal when the settle phase ended.
    pub stuck: Vec<pb::Saga>,
    pub stop_problems: Vec<String>,
    pub findings: Vec<Finding>,
    pub figures: Figures,
    pub lease_ttl_ms: u64,
    /// loyalty-svc's operationHistory rows (`--third-step loyalty`).
    pub loyalty_rows: Option<usize>,
}

impl Outcome {
    /// Duplicate CreateOrders sent.
    pub fn duplicates(&self) -> u64 {
        self.drive.duplicates_sent.load(Ordering::Relaxed)
    }
}

/// The run's seed: `--seed`, else from the clock.
fn seed_of(args: &Args) -> u64 {
    args.seed.unwrap_or_else(|| {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_secs() % 1_000_000)
            .unwrap_or(1)
    })
}

/// The whole soak; every check lands in `checks`. An error means the run
/// could not go on (a service would not start, seeding failed, …).
pub async fn run(
    args: &Args,
    bin_dir: &Path,
    work: &Path,
    checks: &mut Checks,
) -> Result<(), String> {
    let seed = seed_of(args);
    let mut rng = StdRng::seed_from_u64(seed);
    std::fs::create_dir_all(work.join("logs")).map_err(|e| format!("{}: {e}", work.display()))?;
    let run_tag = format!("{seed}_{}", std::process::id());
    introduce(args, seed, bin_dir, work);
    let storage = Storage::open(args.backend, work, &run_tag, args.loyalty()).await?;
    let mut svc = Services::new(args, bin_dir, work, &storage, seed)?;
    svc.start().await?;
    let plan = Plan::new(args.contention_orders);
    let initial = seed_participants(args, &svc, &run_tag, plan.as_ref()).await?;

    let mut tally = Tally::default();
    let drive_started = Instant::now();
    let drive =
        schedule::drive_with_kills(args, seed, &mut rng, &mut svc, &storage, &mut tally).await?;
    let drive_secs = drive_started.elapsed().as_secs_f64();
    report_drive(args, &drive, drive_secs);
    let mut orders = drive.orders.lock().expect("lock").clone();
    let phase = match &plan {
        Some(plan) => Some(contend(args, seed, plan, &svc, &mut orders).await?),
        None => None,
    };
    let (stuck, settle_secs) = settle(args, seed, &mut svc, &mut tally).await?;
    svc.read_faults(&mut tally).await;
    svc.read_counters(&mut tally).await;
    let stop_problems = svc.stop().await;

    let snapshot = storage.snapshot().await?;
    let run = Manifest {
        seed,
        backend: format!("{:?}", args.backend).to_lowercase(),
        instances: instance_ids(args),
        stores: storage.stores().clone(),
        initial,
        orders: orders.clone(),
        contention: contention_manifest(plan, phase.as_ref()),
        kills: tally.orchestrator_kill_log.clone(),
        counters: tally.counters,
        loyalty_steps: args.loyalty_steps(),
    };
    run.write(work)?;
    let (findings, figures) = audit::check(&snapshot, &run);
    let outcome = Outcome {
        seed,
        storage_label: storage.label().map(str::to_owned),
        faults: tally.all_faults(),
        drive,
        orders,
        tally,
        drive_secs,
        contention: phase,
        settle_secs,
        stuck,
        stop_problems,
        findings,
        figures,
        lease_ttl_ms: svc.timing.lease_ttl_ms,
        loyalty_rows: snapshot.loyalty.as_ref().map(|l| l.ops.len()),
    };
    report::print(args, &outcome);
    checks.judge(args, &outcome);
    after_checks(args, bin_dir, work, &storage, &snapshot, checks).await
}

/// Every orchestrator instance's `--instance-id`, in instance order.
fn instance_ids(args: &Args) -> Vec<String> {
    (0..args.orchestrators as usize)
        .map(|i| instance_id(&instance_name(args.orchestrators, i)))
        .collect()
}

/// The contention races for the manifest: the plan and every accepted
/// order of the phase with its race.
fn contention_manifest(
    plan: Option<Plan>,
    phase: Option<&contention::Phase>,
) -> Option<manifest::Contention> {
    plan.map(|plan| manifest::Contention {
        orders: phase
            .iter()
            .flat_map(|p| &p.orders)
            .map(|(a, race)| (a.spec.request_id.clone(), *race))
            .collect(),
        plan,
    })
}

/// Once the soak's checks are in: the retention pass (`--retention-pass`,
/// only when every check passed), then, when every check passed and the
/// run is not kept, the MongoDB databases dropped.
async fn after_checks(
    args: &Args,
    bin_dir: &Path,
    work: &Path,
    storage: &Storage,
    snapshot: &crate::snapshot::Snapshot,
    checks: &mut Checks,
) -> Result<(), String> {
    if args.retention_pass && checks.failed == 0 {
        crate::retention::run(args, bin_dir, work, storage, snapshot, checks).await?;
    }
    if checks.failed == 0 && args.work_dir.is_none() && !args.keep_work_dir {
        storage.drop_databases().await;
    }
    Ok(())
}

/// `--audit-only`: the store checks of a kept run, from its manifest and
/// its stores as they are now.
pub async fn audit_only(work: &Path, checks: &mut Checks) -> Result<(), String> {
    let run = Manifest::read(work)?;
    println!(
        "chaos: auditing the kept run in {} (seed {}, backend {}, {} orchestrator instance(s), {} orders, {} orchestrator kill(s))",
        work.display(),
        run.seed,
        run.backend,
        run.instances.len(),
        run.orders.len(),
        run.kills.len()
    );
    let storage = Storage::reopen(run.stores.clone(), work).await?;
    let snapshot = storage.snapshot().await?;
    let (findings, figures) = audit::check(&snapshot, &run);
    println!(
        "  stores: {} sagas ({} completed, {} cancelled, {} failed, {} other), {} payment + {} inventory operationHistory rows, {} takeovers in the histories",
        snapshot.sagas.len(),
        figures.completed,
        figures.cancelled,
        figures.failed,
        figures.other,
        figures.op_rows.0,
        figures.op_rows.1,
        figures.takeovers
    );
    println!("== checks (stores only; what happened during the run is not judged again)");
    for finding in &findings {
        checks.problems(&finding.name, &finding.problems);
    }
    Ok(())
}

/// The run's settings, first thing in the output.
fn introduce(args: &Args, seed: u64, bin_dir: &Path, work: &Path) {
    println!(
        "chaos: seed {seed}, {} sagas, concurrency {}, {} orchestrator instance(s), {} orchestrator kill(s), {} restart(s) per participant, {} contention orders, backend {:?}",
        args.sagas,
        args.concurrency,
        args.orchestrators,
        args.orchestrator_kills,
        args.participant_restarts,
        args.contention_orders,
        args.backend
    );
    if args.orchestrators > 1 && args.backend == Backend::Embedded {
        println!(
            "chaos: {} orchestrator processes share one SQLite saga store (WAL; each write a BEGIN IMMEDIATE transaction with a 5 s busy timeout; saga writes conditional on the version read)",
            args.orchestrators
        );
    }
    if args.loyalty() {
        println!(
            "chaos: {} steps — payment, inventory, then {} at loyalty-svc (participant.v1.SagaStepService), from a steps file",
            args.steps,
            args.loyalty_steps().join(", ")
        );
    }
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
}

/// Seeds the balances and stock the run's orders are planned against.
async fn seed_participants(
    args: &Args,
    svc: &Services,
    run_tag: &str,
    plan: Option<&Plan>,
) -> Result<Initial, String> {
    let initial = drive::plan_initial(args.sagas, plan);
    drive::seed(
        &initial,
        channel(svc.payment.addr, Duration::from_secs(5)),
        channel(svc.inventory.addr, Duration::from_secs(5)),
        run_tag,
    )
    .await?;
    println!(
        "chaos: seeded {} customers ({} cents in total) and {} products ({} units)",
        initial.balances.len(),
        initial.balances.values().sum::<i64>(),
        initial.stock.len(),
        initial.stock.values().sum::<i64>()
    );
    Ok(initial)
}

fn report_drive(args: &Args, drive: &Drive, drive_secs: f64) {
    let accepted = drive.accepted.load(Ordering::Relaxed);
    println!(
        "chaos: drive done: {accepted}/{} accepted, {} seen terminal, in {drive_secs:.1} s ({:.1} sagas/s)",
        args.sagas,
        drive.finished.load(Ordering::Relaxed),
        accepted as f64 / drive_secs.max(0.001)
    );
}

/// The contention races, with injected refusals off; their accepted orders
/// join `orders` (after the drive's).
async fn contend(
    args: &Args,
    seed: u64,
    plan: &Plan,
    svc: &Services,
    orders: &mut Orders,
) -> Result<contention::Phase, String> {
    for p in svc.participants() {
        if !faults::without_refusals(p.addr, args, seed).await {
            return Err(format!("SetFaults (no refusals) on {} failed", p.name()));
        }
    }
    println!(
        "chaos: contention: {} orders at once across {} instance(s) for the last {} unit(s) of {} and the last {} cents of {} (injected refusals off)",
        plan.stock_orders + plan.money_orders,
        svc.orchestrators.len(),
        plan.stock_units,
        contention::LAST_SKU,
        plan.balance_cents,
        contention::LAST_CUSTOMER
    );
    let channels: Vec<_> = svc
        .orchestrator_addrs()
        .into_iter()
        .map(|a| channel(a, svc.timing.client_timeout))
        .collect();
    let phase = contention::run(plan, seed, &channels, Duration::from_secs(args.settle_secs)).await;
    for (j, (accepted, _)) in phase.orders.iter().enumerate() {
        orders.insert(args.sagas + j, accepted.clone());
    }
    println!(
        "chaos: contention done: {} accepted in {:.1} s",
        phase.orders.len(),
        phase.secs
    );
    Ok(phase)
}

/// Faults off, then waits up to `--settle-secs` for every saga to become
/// terminal (reviving services that die meanwhile). Returns the sagas still
/// open and how long it took.
async fn settle(
    args: &Args,
    seed: u64,
    svc: &mut Services,
    tally: &mut Tally,
) -> Result<(Vec<pb::Saga>, f64), String> {
    for p in svc.participants() {
        if !faults::turn_off(p.addr, seed).await {
            return Err(format!("SetFaults (off) on {} failed", p.name()));
        }
    }
    let started = Instant::now();
    let limit = Duration::from_secs(args.settle_secs);
    println!(
        "chaos: faults stopped; waiting up to {} s for every saga to become terminal",
        args.settle_secs
    );
    let mut clients: Vec<_> = svc
        .orchestrator_addrs()
        .into_iter()
        .map(|a| SagaServiceClient::new(channel(a, svc.timing.client_timeout)))
        .collect();
    let open_statuses = [pb::SagaStatus::Running, pb::SagaStatus::Compensating];
    let mut at = 0;
    let stuck = loop {
        svc.revive(tally).await?;
        let client = &mut clients[at % svc.orchestrators.len()];
        let open = match saga_tests::saga_list::sagas_in(client, &open_statuses, 1_000).await {
            Ok(open) => open,
            Err(e) if started.elapsed() >= limit => {
                return Err(format!("ListSagas keeps failing: {e}"));
            }
            Err(_) => {
                at += 1;
                tokio::time::sleep(Duration::from_millis(200)).await;
                continue;
            }
        };
        if open.is_empty() || started.elapsed() >= limit {
            break open;
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    };
    Ok((stuck, started.elapsed().as_secs_f64()))
}
