//! The kill schedule: the SIGKILLs of `--orchestrator-kills` and
//! `--participant-restarts` spread evenly over the drive (by accepted
//! orders), and the loop that carries them out while the CreateOrder
//! workers run.

use crate::args::Args;
use crate::cluster::Role;
use crate::drive::Drive;
use crate::services::{Services, Tally};
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
    pub role: Role,
}

/// The kills spread evenly over the drive: orchestrator and participants
/// interleaved.
pub fn schedule(args: &Args) -> Vec<Kill> {
    let mut roles = Vec::new();
    for i in 0..args.orchestrator_kills.max(args.participant_restarts) {
        if i < args.orchestrator_kills {
            roles.push(Role::Orchestrator);
        }
        if i < args.participant_restarts {
            roles.push(Role::Payment);
            roles.push(Role::Inventory);
        }
    }
    let n = roles.len();
    roles
        .into_iter()
        .enumerate()
        .map(|(i, role)| Kill {
            at: (i + 1) * args.sagas / (n + 1),
            role,
        })
        .collect()
}

/// Runs the CreateOrder workers and, beside them, the kill schedule
/// (reviving any service that dies on its own); returns when the workers
/// are done and every kill happened. `rng` draws the pause before each
/// restart.
pub async fn drive_with_kills(
    args: &Args,
    seed: u64,
    rng: &mut StdRng,
    svc: &mut Services,
    tally: &mut Tally,
) -> Result<Arc<Drive>, String> {
    let drive = Arc::new(Drive::default());
    let deadline = Instant::now() + Duration::from_secs(args.timeout_secs);
    let orders = crate::cluster::channel(svc.orchestrator.addr, Duration::from_secs(5));
    let workers = spawn_workers(args, seed, &drive, &orders, deadline);
    let kills = schedule(args);
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
            svc.kill_and_restart(kill.role, pause, &progress, kill.at, tally)
                .await?;
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

/// `--concurrency` workers sharing one drive.
fn spawn_workers(
    args: &Args,
    seed: u64,
    drive: &Arc<Drive>,
    orders: &Channel,
    deadline: Instant,
) -> Vec<tokio::task::JoinHandle<()>> {
    let (n, dup) = (args.sagas, args.duplicate_rate.clamp(0.0, 1.0));
    (0..args.concurrency.max(1))
        .map(|w| {
            let (d, ch) = (drive.clone(), orders.clone());
            tokio::spawn(async move { d.worker(w, seed, n, dup, ch, deadline).await })
        })
        .collect()
}
