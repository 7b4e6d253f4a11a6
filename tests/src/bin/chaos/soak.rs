//! One soak, phase by phase: storage, start, seed, drive with the kill
//! schedule, settle (faults off, every saga terminal), stop, audit, report,
//! checks. Each phase is a function; [`Outcome`] carries what they found to
//! the report and the checks.

use crate::args::Args;
use crate::audit::{self, Figures, Finding};
use crate::checks::Checks;
use crate::cluster::channel;
use crate::drive::{self, Drive, Initial, OrderSpec};
use crate::faults::{self, FaultCounts};
use crate::report;
use crate::schedule;
use crate::services::{Services, Tally};
use crate::storage::Storage;
use rand::SeedableRng;
use rand::rngs::StdRng;
use saga_proto::saga::v1 as pb;
use saga_proto::saga::v1::saga_service_client::SagaServiceClient;
use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

/// Everything a finished run found, for the report and the checks.
pub struct Outcome {
    pub seed: u64,
    /// The MongoDB target's label (MongoDB backend only).
    pub storage_label: Option<&'static str>,
    pub drive: Arc<Drive>,
    /// Accepted orders: index → (spec, saga id).
    pub orders: BTreeMap<usize, (OrderSpec, String)>,
    pub tally: Tally,
    /// Injected faults of both participants together.
    pub faults: FaultCounts,
    pub drive_secs: f64,
    pub settle_secs: f64,
    /// Sagas still not terminal when the settle phase ended.
    pub stuck: Vec<pb::Saga>,
    pub stop_problems: Vec<String>,
    pub findings: Vec<Finding>,
    pub figures: Figures,
}

impl Outcome {
    /// Duplicate CreateOrders sent.
    pub fn duplicates(&self) -> u64 {
        self.drive.duplicates_sent.load(Ordering::Relaxed)
    }
}

/// The whole soak; every check lands in `checks`. An error means the run
/// could not go on (a service would not start, seeding failed, …).
pub async fn run(
    args: &Args,
    bin_dir: &Path,
    work: &Path,
    checks: &mut Checks,
) -> Result<(), String> {
    let seed = args.seed.unwrap_or_else(|| {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_secs() % 1_000_000)
            .unwrap_or(1)
    });
    let mut rng = StdRng::seed_from_u64(seed);
    std::fs::create_dir_all(work.join("logs")).map_err(|e| format!("{}: {e}", work.display()))?;
    let run_tag = format!("{seed}_{}", std::process::id());
    introduce(args, seed, bin_dir, work);
    let storage = Storage::open(args.backend, work, &run_tag).await?;
    let mut svc = Services::new(args, bin_dir, work, &storage, seed)?;
    svc.start().await?;
    let initial = seed_participants(args, &svc, &run_tag).await?;

    let mut tally = Tally::default();
    let drive_started = Instant::now();
    let drive = schedule::drive_with_kills(args, seed, &mut rng, &mut svc, &mut tally).await?;
    let drive_secs = drive_started.elapsed().as_secs_f64();
    report_drive(args, &drive, drive_secs);
    let (stuck, settle_secs) = settle(args, seed, &mut svc, &mut tally).await?;
    svc.read_faults(&mut tally).await;
    let stop_problems = svc.stop().await;

    let snapshot = storage.snapshot().await?;
    let orders = drive.orders.lock().expect("lock").clone();
    let (findings, figures) = audit::check(&snapshot, &orders, &initial);
    let outcome = Outcome {
        seed,
        storage_label: storage.label(),
        faults: tally.all_faults(),
        drive,
        orders,
        tally,
        drive_secs,
        settle_secs,
        stuck,
        stop_problems,
        findings,
        figures,
    };
    report::print(args, &outcome);
    checks.judge(args, &outcome);
    if checks.failed == 0 {
        storage.drop_databases().await;
    }
    Ok(())
}

/// The run's settings, first thing in the output.
fn introduce(args: &Args, seed: u64, bin_dir: &Path, work: &Path) {
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
}

/// Seeds the balances and stock the run's orders are planned against.
async fn seed_participants(args: &Args, svc: &Services, run_tag: &str) -> Result<Initial, String> {
    let initial = drive::plan_initial(args.sagas);
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

/// Faults off, then waits up to `--settle-secs` for every saga to become
/// terminal (reviving services that die meanwhile). Returns the sagas still
/// open and how long it took.
async fn settle(
    args: &Args,
    seed: u64,
    svc: &mut Services,
    tally: &mut Tally,
) -> Result<(Vec<pb::Saga>, f64), String> {
    for p in [&svc.payment, &svc.inventory] {
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
    let mut sagas = SagaServiceClient::new(channel(svc.orchestrator.addr, Duration::from_secs(5)));
    let open_statuses = [pb::SagaStatus::Running, pb::SagaStatus::Compensating];
    let stuck = loop {
        svc.revive(tally).await?;
        let open = match saga_tests::saga_list::sagas_in(&mut sagas, &open_statuses, 1_000).await {
            Ok(open) => open,
            Err(e) if started.elapsed() >= limit => {
                return Err(format!("ListSagas keeps failing: {e}"));
            }
            Err(_) => {
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
