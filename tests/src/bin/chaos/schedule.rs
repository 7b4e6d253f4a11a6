//! The kill schedule: the SIGKILLs of `--orchestrator-kills` (each of a
//! random instance) and `--participant-restarts` spread evenly over the
//! drive (by accepted orders), and the loop that carries them out while the
//! CreateOrder workers run.

use crate::args::Args;
use crate::drive::Drive;
use crate::services::{Services, Tally, Target};
use crate::storage::Storage;
use rand::Rng;
use rand::rngs::StdRng;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};
use tonic::transport::Channel;

/// One planned SIGKILL (and restart) of a service.
#[derive(Debug, Clone, Copy)]
pub struct Kill {
    /// After this many accepted orders (or once the workers are done).
    pub at: usize,
    pub target: Target,
}

/// The kills spread evenly over the drive: orchestrators and participants
/// interleaved; each orchestrator kill picks its victim at random (`rng`,
/// so the seed decides).
pub fn schedule(args: &Args, rng: &mut StdRng) -> Vec<Kill> {
    let mut targets = Vec::new();
    for i in 0..args.orchestrator_kills.max(args.participant_restarts) {
        if i < args.orchestrator_kills {
            let victim = rng.random_range(0..args.orchestrators.max(1) as usize);
            targets.push(Target::Orchestrator(victim));
        }
        if i < args.participant_restarts {
            targets.push(Target::Payment);
            targets.push(Target::Inventory);
            if args.loyalty() {
                targets.push(Target::Loyalty);
            }
        }
    }
    let n = targets.len();
    targets
        .into_iter()
        .enumerate()
        .map(|(i, target)| Kill {
            at: (i + 1) * args.sagas / (n + 1),
            target,
        })
        .collect()
}

/// Runs the CreateOrder workers and, beside them, the kill schedule
/// (reviving any service that dies on its own); returns when the workers
/// are done and every kill happened. `rng` draws the victims and the pause
/// before each restart. With several orchestrators, kills keep their
/// victim down until its sagas are taken over by the others, until one
/// such kill found sagas to take over; later ones restart after a short
/// pause (the victim then resumes its own sagas).
pub async fn drive_with_kills(
    args: &Args,
    seed: u64,
    rng: &mut StdRng,
    svc: &mut Services,
    storage: &Storage,
    tally: &mut Tally,
) -> Result<Arc<Drive>, String> {
    let drive = Arc::new(Drive::default());
    let deadline = Instant::now() + Duration::from_secs(args.timeout_secs);
    let orders: Vec<Channel> = svc
        .orchestrator_addrs()
        .into_iter()
        .map(|a| crate::cluster::channel(a, svc.timing.client_timeout))
        .collect();
    let workers = spawn_workers(args, seed, &drive, &orders, deadline);
    let kills = schedule(args, rng);
    let mut next = 0;
    let mut last_progress = Instant::now();
    let started = Instant::now();
    loop {
        svc.revive(tally).await?;
        let accepted = drive.accepted.load(Ordering::Relaxed);
        let done = drive.workers_done.load(Ordering::Relaxed) == workers.len();
        if let Some(kill) = kills.get(next)
            && (accepted >= kill.at || done)
        {
            next += 1;
            let pause = Duration::from_millis(rng.random_range(200..=500));
            let progress = format!("[{accepted}/{} accepted]", args.sagas);
            match kill.target {
                Target::Orchestrator(i) => {
                    let await_takeover = args.orchestrators > 1 && !tally.takeover_kill_done();
                    svc.kill_orchestrator(
                        i,
                        storage,
                        pause,
                        await_takeover,
                        &progress,
                        kill.at,
                        tally,
                    )
                    .await?
                }
                participant => {
                    svc.restart_participant(participant, pause, &progress, kill.at, tally)
                        .await?
                }
            }
            continue;
        }
        if done && next >= kills.len() {
            break;
        }
        if last_progress.elapsed() >= Duration::from_secs(10) {
            last_progress = Instant::now();
            println!(
                "chaos: … {accepted}/{} accepted, {} seen terminal after {:.0} s ({} CreateOrder retries)",
                args.sagas,
                drive.finished.load(Ordering::Relaxed),
                started.elapsed().as_secs_f64(),
                drive.create_retries.load(Ordering::Relaxed)
            );
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    for w in workers {
        w.await.map_err(|e| format!("worker panicked: {e}"))?;
    }
    Ok(drive)
}

/// `--concurrency` workers sharing one drive, each talking to every
/// instance.
fn spawn_workers(
    args: &Args,
    seed: u64,
    drive: &Arc<Drive>,
    orders: &[Channel],
    deadline: Instant,
) -> Vec<tokio::task::JoinHandle<()>> {
    let (n, dup) = (args.sagas, args.duplicate_rate.clamp(0.0, 1.0));
    (0..args.concurrency.max(1))
        .map(|w| {
            let (d, ch) = (drive.clone(), orders.to_vec());
            tokio::spawn(async move { d.worker(w, seed, n, dup, ch, deadline).await })
        })
        .collect()
}
