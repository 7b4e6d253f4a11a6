//! The three services of a run together: how each is started (ports,
//! flags, environment), SIGKILLed and restarted, revived when it dies on
//! its own, and stopped at the end — and the [`Tally`] of all that for the
//! report and the checks.

use crate::args::Args;
use crate::cluster::{self, Proc, Role, free_addr};
use crate::faults::{self, FaultCounts};
use crate::storage::Storage;
use std::net::SocketAddr;
use std::path::Path;
use std::time::{Duration, Instant};

/// How long a (re)started service has to answer.
pub const START_LIMIT: Duration = Duration::from_secs(60);

/// What happened to the services, for the report.
#[derive(Default)]
pub struct Tally {
    pub orchestrator_kills: u32,
    /// payment-svc, inventory-svc.
    pub participant_restarts: [u32; 2],
    /// Kills that did not go as planned.
    pub event_problems: Vec<String>,
    /// Services that died without our SIGKILL.
    pub unexpected_exits: Vec<String>,
    /// Injected faults of payment-svc, inventory-svc over all their lives.
    pub faults: [FaultCounts; 2],
    pub fault_reads_missed: u32,
}

impl Tally {
    /// Counts a SIGKILL of `role`; returns what the output calls it and its
    /// number ("kill #n" of the orchestrator, "restart #n" of a participant).
    fn count_kill(&mut self, role: Role) -> (&'static str, u32) {
        let n = match role {
            Role::Orchestrator => &mut self.orchestrator_kills,
            Role::Payment => &mut self.participant_restarts[0],
            Role::Inventory => &mut self.participant_restarts[1],
        };
        *n += 1;
        let what = if role == Role::Orchestrator {
            "kill"
        } else {
            "restart"
        };
        (what, *n)
    }

    /// Injected faults of both participants together.
    pub fn all_faults(&self) -> FaultCounts {
        self.faults[0].plus(self.faults[1])
    }
}

/// The three service processes.
pub struct Services {
    pub payment: Proc,
    pub inventory: Proc,
    pub orchestrator: Proc,
}

impl Services {
    /// The three services of a run on free ports, not started yet: the
    /// participants inject faults from the start; the orchestrator retries
    /// patiently with short call timeouts and leases.
    pub fn new(
        args: &Args,
        bin_dir: &Path,
        work: &Path,
        storage: &Storage,
        seed: u64,
    ) -> Result<Services, String> {
        let log = |role: Role| work.join("logs").join(format!("{}.log", role.binary()));
        let mut base_env = vec![
            ("RUST_LOG".to_owned(), args.log_level.clone()),
            ("RUST_BACKTRACE".to_owned(), "1".to_owned()),
        ];
        if let Ok(v) = std::env::var("NO_COLOR") {
            base_env.push(("NO_COLOR".into(), v));
        }
        let mut fault_env = base_env.clone();
        fault_env.extend(faults::injection_env(args));
        let addr = || free_addr().map_err(|e| format!("no free port: {e}"));
        let (pay_addr, inv_addr, orch_addr) = (addr()?, addr()?, addr()?);
        let service = |role: Role, addr: SocketAddr, mut argv: Vec<String>, env| {
            argv.extend(storage.args(role));
            Proc::new(
                role,
                bin_dir.join(role.binary()),
                addr,
                argv,
                env,
                log(role),
                seed,
            )
        };
        let listen = |a: SocketAddr| vec!["--listen".to_owned(), a.to_string()];
        Ok(Services {
            payment: service(Role::Payment, pay_addr, listen(pay_addr), fault_env.clone()),
            inventory: service(Role::Inventory, inv_addr, listen(inv_addr), fault_env),
            orchestrator: service(
                Role::Orchestrator,
                orch_addr,
                orchestrator_args(orch_addr, pay_addr, inv_addr, Timing::of(storage)),
                base_env,
            ),
        })
    }

    /// One of the three.
    pub fn get(&mut self, role: Role) -> &mut Proc {
        match role {
            Role::Payment => &mut self.payment,
            Role::Inventory => &mut self.inventory,
            Role::Orchestrator => &mut self.orchestrator,
        }
    }

    /// Starts the participants, then the orchestrator, each once it answers.
    pub async fn start(&mut self) -> Result<(), String> {
        for role in [Role::Payment, Role::Inventory, Role::Orchestrator] {
            let p = self.get(role);
            p.start(START_LIMIT).await?;
            println!(
                "chaos: {} pid {} on {} (log {})",
                p.name(),
                p.pid().unwrap_or(0),
                p.addr,
                p.log.display()
            );
        }
        Ok(())
    }

    /// Restarts any service that died on its own (and records it).
    pub async fn revive(&mut self, tally: &mut Tally) -> Result<(), String> {
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
                p.start(START_LIMIT).await?;
            }
        }
        Ok(())
    }

    /// SIGKILLs `role`'s service, waits `pause`, and starts it again on the
    /// same port and storage. A participant's fault counters are read first
    /// (the SIGKILL loses them). `progress` is the drive's "[accepted/total
    /// accepted]" and `at` the point the kill was planned at, for the output.
    pub async fn kill_and_restart(
        &mut self,
        role: Role,
        pause: Duration,
        progress: &str,
        at: usize,
        tally: &mut Tally,
    ) -> Result<(), String> {
        let p = self.get(role);
        if role != Role::Orchestrator {
            match faults::read(p.addr).await {
                Some(s) => p.earlier_faults.add(&s),
                None => tally.fault_reads_missed += 1,
            }
        }
        match p.kill9() {
            Ok(()) => {
                let (what, n) = tally.count_kill(role);
                println!(
                    "chaos: {progress} SIGKILLed {} ({what} #{n}, planned at {at}); restarting in {} ms",
                    p.name(),
                    pause.as_millis()
                );
            }
            Err(e) => tally.event_problems.push(e),
        }
        tokio::time::sleep(pause).await;
        let restarted = Instant::now();
        p.start(START_LIMIT).await?;
        println!(
            "chaos: {} back (pid {}, ready after {} ms)",
            p.name(),
            p.pid().unwrap_or(0),
            restarted.elapsed().as_millis()
        );
        Ok(())
    }

    /// Both participants' fault counters over all their lives, into `tally`.
    pub async fn read_faults(&self, tally: &mut Tally) {
        for (i, p) in [&self.payment, &self.inventory].into_iter().enumerate() {
            match faults::read(p.addr).await {
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
    }

    /// A graceful stop, orchestrator first so that no call is in flight
    /// when the participants stop; returns what did not go cleanly.
    pub async fn stop(&mut self) -> Vec<String> {
        let mut problems = Vec::new();
        for role in [Role::Orchestrator, Role::Payment, Role::Inventory] {
            let p = self.get(role);
            match p.terminate(Duration::from_secs(20)).await {
                Ok(status) if status.success() => {}
                Ok(status) => problems.push(format!(
                    "{} exited with {status} on SIGTERM; log {}",
                    p.name(),
                    p.log.display()
                )),
                Err(e) => problems.push(e),
            }
        }
        problems
    }
}

/// How long a participant call and a lease last, per store: the embedded
/// stores answer in milliseconds; the MongoDB test server is a Python
/// server whose transactions take tens of milliseconds under load, and a
/// participant SIGKILLed inside one leaves its locks held for the server's
/// transaction lifetime — a call timeout shorter than that would only pile
/// up conflicting retries.
/// The lease must outlast the orchestrator's longest gap between two saves
/// (its start-up check): 2 s connect timeout + call timeout + twice the
/// largest retry delay (backon's jitter).
pub struct Timing {
    pub call_timeout_ms: u64,
    pub retry_max_delay_ms: u64,
    pub lease_ttl_ms: u64,
}

impl Timing {
    pub fn of(storage: &Storage) -> Timing {
        match storage.label() {
            // 2 000 + 500 + 2 × 500 = 3 500 < 4 000.
            None => Timing {
                call_timeout_ms: 500,
                retry_max_delay_ms: 500,
                lease_ttl_ms: 4_000,
            },
            // 2 000 + 5 000 + 2 × 1 000 = 9 000 < 10 000.
            Some(_) => Timing {
                call_timeout_ms: 5_000,
                retry_max_delay_ms: 1_000,
                lease_ttl_ms: 10_000,
            },
        }
    }
}

/// The orchestrator's flags (storage flags come after): short call
/// timeouts and leases, many attempts, a fast recovery sweep; no console
/// (it would take port 8080, and the soak reads the stores itself).
fn orchestrator_args(
    orch: SocketAddr,
    payment: SocketAddr,
    inventory: SocketAddr,
    timing: Timing,
) -> Vec<String> {
    let (call_timeout, lease_ttl, max_delay) = (
        timing.call_timeout_ms.to_string(),
        timing.lease_ttl_ms.to_string(),
        timing.retry_max_delay_ms.to_string(),
    );
    [
        "serve",
        "--listen",
        &orch.to_string(),
        "--payment-addr",
        &format!("http://{payment}"),
        "--inventory-addr",
        &format!("http://{inventory}"),
        "--instance-id",
        "chaos-orchestrator",
        "--call-timeout-ms",
        &call_timeout,
        "--lease-ttl-ms",
        &lease_ttl,
        "--retry-max-delay-ms",
        &max_delay,
        "--action-attempts",
        "50",
        "--compensation-attempts",
        "10000",
        "--sweep-interval-ms",
        "200",
        "--no-console",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect()
}
