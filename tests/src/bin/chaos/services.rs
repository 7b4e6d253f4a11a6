//! The services of a run together — both participants (and loyalty-svc with
//! `--third-step loyalty`, whose steps file the orchestrators then run) and
//! `--orchestrators` orchestrator instances on one shared saga store: how
//! each is started
//! (ports, flags, environment), SIGKILLed and restarted, revived when it
//! dies on its own, and stopped at the end — and the [`Tally`] of all that
//! for the report and the checks.

use crate::args::Args;
use crate::cluster::{self, Proc, Role, free_addr};
use crate::faults::{self, FaultCounts};
use crate::scrape::{self, OrchestratorCounters};
use crate::storage::Storage;
use serde::{Deserialize, Serialize};
use std::net::SocketAddr;
use std::path::Path;
use std::time::{Duration, Instant};

/// How long a (re)started service has to answer.
pub const START_LIMIT: Duration = Duration::from_secs(60);

/// Which process a kill is aimed at.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Target {
    Payment,
    Inventory,
    /// loyalty-svc (`--third-step loyalty`).
    Loyalty,
    /// Orchestrator instance `i` (0-based).
    Orchestrator(usize),
}

/// One SIGKILL of an orchestrator instance, as it went.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct OrchestratorKill {
    /// Across instances, from 1.
    pub number: u32,
    /// The victim's instance id.
    pub instance: String,
    /// The sagas the victim held a lease on when it died (not terminal),
    /// read from the store right after the SIGKILL.
    pub in_flight: Vec<String>,
    /// Whether the victim was kept down until other instances had claimed
    /// every one of them.
    pub waited_for_takeover: bool,
    /// Whether, when it came back, none of them was leased to it any more.
    pub taken_over_before_return: bool,
    /// How long it was down, ms.
    pub down_ms: u64,
    /// When it was SIGKILLed (reaped), ms since the epoch.
    #[serde(default)]
    pub killed_at_ms: i64,
    /// When it was started again, ms since the epoch.
    #[serde(default)]
    pub restarted_at_ms: i64,
    /// Kept down for the takeover: how long after the SIGKILL the store
    /// last held a saga leased to it, ms (`None`: not waited for, or not
    /// taken over).
    #[serde(default)]
    pub taken_over_after_ms: Option<u64>,
}

/// What happened to the services, for the report.
#[derive(Default)]
pub struct Tally {
    /// Across instances.
    pub orchestrator_kills: u32,
    pub orchestrator_kill_log: Vec<OrchestratorKill>,
    /// payment-svc, inventory-svc, loyalty-svc.
    pub participant_restarts: [u32; 3],
    /// Kills that did not go as planned.
    pub event_problems: Vec<String>,
    /// Services that died without our SIGKILL.
    pub unexpected_exits: Vec<String>,
    /// Injected faults of payment-svc, inventory-svc, loyalty-svc over all
    /// their lives.
    pub faults: [FaultCounts; 3],
    pub fault_reads_missed: u32,
    /// Every orchestrator's counters over all its lives (read before each
    /// SIGKILL and at the end).
    pub counters: OrchestratorCounters,
    /// Readings that failed (the counters are then a lower bound).
    pub counter_reads_missed: u32,
}

impl Tally {
    /// Injected faults of every participant together.
    pub fn all_faults(&self) -> FaultCounts {
        self.faults[0].plus(self.faults[1]).plus(self.faults[2])
    }

    /// Whether a kill already left its in-flight sagas to other instances.
    pub fn takeover_kill_done(&self) -> bool {
        self.orchestrator_kill_log
            .iter()
            .any(|k| !k.in_flight.is_empty() && k.taken_over_before_return)
    }
}

/// The service processes of a run.
pub struct Services {
    pub payment: Proc,
    pub inventory: Proc,
    /// The third step's service (`--third-step loyalty`).
    pub loyalty: Option<Proc>,
    pub orchestrators: Vec<Proc>,
    /// The orchestrators' counters of earlier lives, per instance.
    earlier: Vec<OrchestratorCounters>,
    pub timing: Timing,
}

/// A process's environment variables, name then value.
type Env = Vec<(String, String)>;

/// The environment of every service process (log level, backtraces,
/// `NO_COLOR` passed on), and the participants': that plus the fault
/// injection the run asks for.
fn process_env(args: &Args) -> (Env, Env) {
    let mut base = vec![
        ("RUST_LOG".to_owned(), args.log_level.clone()),
        ("RUST_BACKTRACE".to_owned(), "1".to_owned()),
    ];
    if let Ok(v) = std::env::var("NO_COLOR") {
        base.push(("NO_COLOR".into(), v));
    }
    let mut faulty = base.clone();
    faulty.extend(faults::injection_env(args));
    (base, faulty)
}

impl Services {
    /// The services of a run on free ports, not started yet: the
    /// participants inject faults from the start; the orchestrators retry
    /// patiently with short call timeouts and leases, each with its own
    /// instance id and metrics port.
    pub fn new(
        args: &Args,
        bin_dir: &Path,
        work: &Path,
        storage: &Storage,
        seed: u64,
    ) -> Result<Services, String> {
        let log = |name: &str| work.join("logs").join(format!("{name}.log"));
        let (base_env, fault_env) = process_env(args);
        let addr = || free_addr().map_err(|e| format!("no free port: {e}"));
        let (pay_addr, inv_addr) = (addr()?, addr()?);
        let loyalty_addr = if args.loyalty() { Some(addr()?) } else { None };
        let steps_file = match loyalty_addr {
            Some(a) => Some(write_steps_file(work, a, args.steps)?),
            None => None,
        };
        let timing = Timing::of(storage);
        let participant = |role: Role, addr: SocketAddr, env| {
            let mut argv = vec!["--listen".to_owned(), addr.to_string()];
            argv.extend(storage.args(role));
            let name = role.binary().to_owned();
            Proc::new(
                role,
                name.clone(),
                0,
                bin_dir.join(role.binary()),
                addr,
                argv,
                env,
                log(&name),
                seed,
            )
        };
        let mut orchestrators = Vec::new();
        for i in 0..args.orchestrators as usize {
            let name = instance_name(args.orchestrators, i);
            let orch_addr = addr()?;
            let mut argv = orchestrator_args(
                orch_addr,
                pay_addr,
                inv_addr,
                &format!("chaos-{name}"),
                &timing,
            );
            argv.extend(storage.args(Role::Orchestrator));
            if let Some(file) = &steps_file {
                argv.push("--steps-file".into());
                argv.push(file.display().to_string());
            }
            orchestrators.push(
                Proc::new(
                    Role::Orchestrator,
                    name.clone(),
                    i as u64 + 1,
                    bin_dir.join(Role::Orchestrator.binary()),
                    orch_addr,
                    argv,
                    base_env.clone(),
                    log(&name),
                    seed,
                )
                .with_metrics(addr()?),
            );
        }
        Ok(Services {
            payment: participant(Role::Payment, pay_addr, fault_env.clone()),
            loyalty: loyalty_addr.map(|a| participant(Role::Loyalty, a, fault_env.clone())),
            inventory: participant(Role::Inventory, inv_addr, fault_env),
            earlier: vec![OrchestratorCounters::default(); orchestrators.len()],
            orchestrators,
            timing,
        })
    }

    /// The process a target names (a [`Target::Loyalty`] only exists when
    /// loyalty-svc runs: [`Services::participants`] lists it then).
    pub fn get(&mut self, target: Target) -> &mut Proc {
        match (target, &mut self.loyalty) {
            (Target::Payment, _) => &mut self.payment,
            (Target::Inventory, _) => &mut self.inventory,
            (Target::Loyalty, Some(loyalty)) => loyalty,
            (Target::Loyalty, None) => &mut self.payment,
            (Target::Orchestrator(i), _) => &mut self.orchestrators[i],
        }
    }

    /// The participants of the run: payment, inventory (, loyalty).
    pub fn participants(&self) -> Vec<&Proc> {
        let mut all = vec![&self.payment, &self.inventory];
        all.extend(&self.loyalty);
        all
    }

    /// Every process, participants first.
    fn targets(&self) -> Vec<Target> {
        let mut all = vec![Target::Payment, Target::Inventory];
        if self.loyalty.is_some() {
            all.push(Target::Loyalty);
        }
        all.extend((0..self.orchestrators.len()).map(Target::Orchestrator));
        all
    }

    /// The orchestrators' gRPC addresses, in instance order.
    pub fn orchestrator_addrs(&self) -> Vec<SocketAddr> {
        self.orchestrators.iter().map(|p| p.addr).collect()
    }

    /// Starts the participants, then the orchestrators, each once it answers.
    pub async fn start(&mut self) -> Result<(), String> {
        for target in self.targets() {
            let p = self.get(target);
            p.start(START_LIMIT).await?;
            println!(
                "chaos: {} pid {} on {}, ready after {} ms (log {})",
                p.name(),
                p.pid().unwrap_or(0),
                p.addr,
                p.last_ready.as_millis(),
                p.log.display()
            );
        }
        Ok(())
    }

    /// Restarts any service that died on its own (and records it).
    pub async fn revive(&mut self, tally: &mut Tally) -> Result<(), String> {
        for target in self.targets() {
            let p = self.get(target);
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

    /// SIGKILLs a participant, waits `pause`, and starts it again on the
    /// same port and storage. Its fault counters are read first (the
    /// SIGKILL loses them). `progress` is the drive's "[accepted/total
    /// accepted]" and `at` the point the kill was planned at.
    pub async fn restart_participant(
        &mut self,
        target: Target,
        pause: Duration,
        progress: &str,
        at: usize,
        tally: &mut Tally,
    ) -> Result<(), String> {
        let p = self.get(target);
        match faults::read(p.addr).await {
            Some(s) => p.earlier_faults.add(&s),
            None => tally.fault_reads_missed += 1,
        }
        match p.kill9() {
            Ok(()) => {
                let n = match target {
                    Target::Payment => &mut tally.participant_restarts[0],
                    Target::Loyalty => &mut tally.participant_restarts[2],
                    _ => &mut tally.participant_restarts[1],
                };
                *n += 1;
                println!(
                    "chaos: {progress} SIGKILLed {} (restart #{n}, planned at {at}); restarting in {} ms",
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

    /// SIGKILLs orchestrator `i` (its counters read first), reads from the
    /// store which sagas it was driving, and starts it again: after `pause`,
    /// or — with `await_takeover` — once no saga is leased to it any more
    /// (the other instances claimed them when its leases expired), within
    /// the lease TTL plus `settle` at most.
    #[allow(clippy::too_many_arguments)]
    pub async fn kill_orchestrator(
        &mut self,
        i: usize,
        storage: &Storage,
        pause: Duration,
        await_takeover: bool,
        progress: &str,
        at: usize,
        tally: &mut Tally,
    ) -> Result<(), String> {
        let ttl = Duration::from_millis(self.timing.lease_ttl_ms);
        self.bank_counters(i, tally).await;
        let p = &mut self.orchestrators[i];
        let instance = instance_id(p.name());
        if let Err(e) = p.kill9() {
            tally.event_problems.push(e);
            return p.start(START_LIMIT).await;
        }
        let killed_at = Instant::now();
        let killed_at_ms = service_kit::time::now_ms();
        tally.orchestrator_kills += 1;
        let number = tally.orchestrator_kills;
        tokio::time::sleep(self.timing.drain_after_kill).await;
        let p = &mut self.orchestrators[i];
        let in_flight = leased_to(storage, &instance, tally).await;
        let waits = await_takeover && !in_flight.is_empty();
        println!(
            "chaos: {progress} SIGKILLed {} (kill #{number}, planned at {at}) holding {} saga lease(s); {}",
            p.name(),
            in_flight.len(),
            if waits {
                format!(
                    "kept down until other instances take them over (lease TTL {} ms)",
                    ttl.as_millis()
                )
            } else {
                format!("restarting in {} ms", pause.as_millis())
            }
        );
        let (taken_over, taken_over_after_ms) = if waits {
            let after = await_takeover_of(storage, &instance, killed_at, ttl, tally).await;
            (after.is_some(), after.map(|d| d.as_millis() as u64))
        } else {
            tokio::time::sleep(pause).await;
            let none_left = in_flight.is_empty() || nothing_leased_to(storage, &instance).await;
            (none_left, None)
        };
        let down_ms = killed_at.elapsed().as_millis() as u64;
        let taken_over_note = match taken_over_after_ms {
            Some(ms) => format!(
                "; its {} saga(s) had been taken over {ms} ms after the SIGKILL",
                in_flight.len()
            ),
            None => String::new(),
        };
        let restarted_at_ms = restart_after_kill(p, down_ms, &taken_over_note).await?;
        tally.orchestrator_kill_log.push(OrchestratorKill {
            number,
            instance,
            in_flight,
            waited_for_takeover: waits,
            taken_over_before_return: taken_over,
            down_ms,
            killed_at_ms,
            restarted_at_ms,
            taken_over_after_ms,
        });
        Ok(())
    }

    /// Adds orchestrator `i`'s counters to those of its earlier lives, before
    /// a SIGKILL loses them (a failed reading is counted in `tally`).
    async fn bank_counters(&mut self, i: usize, tally: &mut Tally) {
        match self.orchestrators[i].metrics {
            Some(addr) => match scrape::read(addr).await {
                Some(c) => self.earlier[i] = self.earlier[i].plus(c),
                None => tally.counter_reads_missed += 1,
            },
            None => tally.counter_reads_missed += 1,
        }
    }

    /// Every participant's fault counters over all their lives, into `tally`.
    pub async fn read_faults(&self, tally: &mut Tally) {
        for (i, p) in self.participants().into_iter().enumerate() {
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

    /// Every orchestrator's counters over all its lives, into `tally`.
    pub async fn read_counters(&self, tally: &mut Tally) {
        let mut total = OrchestratorCounters::default();
        for (p, earlier) in self.orchestrators.iter().zip(&self.earlier) {
            total = total.plus(*earlier);
            match p.metrics {
                Some(addr) => match scrape::read(addr).await {
                    Some(c) => total = total.plus(c),
                    None => tally.counter_reads_missed += 1,
                },
                None => tally.counter_reads_missed += 1,
            }
        }
        tally.counters = total;
    }

    /// A graceful stop, orchestrators first so that no call is in flight
    /// when the participants stop; returns what did not go cleanly.
    pub async fn stop(&mut self) -> Vec<String> {
        let mut problems = Vec::new();
        let mut order: Vec<Target> = (0..self.orchestrators.len())
            .map(Target::Orchestrator)
            .collect();
        order.extend([Target::Payment, Target::Inventory]);
        if self.loyalty.is_some() {
            order.push(Target::Loyalty);
        }
        for target in order {
            let p = self.get(target);
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

/// The saga of `steps` steps the orchestrators run when it has loyalty
/// steps: payment, inventory, then each loyalty step at loyalty-svc's
/// `loyalty`; written into `work`, returns its path.
fn write_steps_file(
    work: &Path,
    loyalty: SocketAddr,
    steps: u8,
) -> Result<std::path::PathBuf, String> {
    let path = work.join("saga-steps.toml");
    let text = saga_tests::loyalty::steps_file_text(steps, &format!("http://{loyalty}"));
    std::fs::write(&path, text).map_err(|e| format!("{}: {e}", path.display()))?;
    Ok(path)
}

/// Instance `i`'s name: `orchestrator` alone, `orchestrator-<i+1>` among
/// several.
pub fn instance_name(instances: u32, i: usize) -> String {
    if instances <= 1 {
        "orchestrator".to_owned()
    } else {
        format!("orchestrator-{}", i + 1)
    }
}

/// The `--instance-id` of the instance called `name`.
pub fn instance_id(name: &str) -> String {
    format!("chaos-{name}")
}

/// The sagas leased to `instance` (a SIGKILLed victim) in the store; a
/// failed read is an event problem and counts as none.
async fn leased_to(storage: &Storage, instance: &str, tally: &mut Tally) -> Vec<String> {
    storage.leased_to(instance).await.unwrap_or_else(|e| {
        tally
            .event_problems
            .push(format!("reading the sagas leased to {instance}: {e}"));
        Vec::new()
    })
}

/// Whether the store (read successfully) leases no saga to `instance`.
async fn nothing_leased_to(storage: &Storage, instance: &str) -> bool {
    storage
        .leased_to(instance)
        .await
        .is_ok_and(|left| left.is_empty())
}

/// How long a takeover may go without progress once the victim's leases
/// could have expired: no saga changing hands for this long is a failure.
const TAKEOVER_STALL: Duration = Duration::from_secs(20);

/// Polls the store until no saga is leased to `instance` any more (the
/// other instances took them over); returns how long after the SIGKILL
/// that was. Their leases run out within `ttl` of the SIGKILL; from then
/// on each saga is one claim — one write — of a surviving instance, and a
/// store under load may take a second or more per write, so the wait
/// scales with the store: it gives up (recording an event problem) only
/// when [`TAKEOVER_STALL`] passes without a saga changing hands — at
/// `ttl` + 20 s if none does, 20 s after the last one that did otherwise.
async fn await_takeover_of(
    storage: &Storage,
    instance: &str,
    killed_at: Instant,
    ttl: Duration,
    tally: &mut Tally,
) -> Option<Duration> {
    let mut limit = ttl + TAKEOVER_STALL;
    let mut fewest = usize::MAX;
    loop {
        match storage.leased_to(instance).await {
            Ok(left) if left.is_empty() => return Some(killed_at.elapsed()),
            Ok(left) if left.len() < fewest => {
                if fewest != usize::MAX {
                    limit = limit.max(killed_at.elapsed() + TAKEOVER_STALL);
                }
                fewest = left.len();
            }
            _ => {}
        }
        if killed_at.elapsed() >= limit {
            tally.event_problems.push(format!(
                "{instance}'s sagas were not all taken over within {} ms of its SIGKILL ({} left, none taken over in the last {} s; lease TTL {} ms)",
                limit.as_millis(),
                if fewest == usize::MAX {
                    "an unknown number (the store could not be read)".to_owned()
                } else {
                    fewest.to_string()
                },
                TAKEOVER_STALL.as_secs(),
                ttl.as_millis()
            ));
            return None;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Starts a SIGKILLed orchestrator again and says so (`note` ends the
/// line); returns when it was started, ms since the epoch.
async fn restart_after_kill(p: &mut Proc, down_ms: u64, note: &str) -> Result<i64, String> {
    let restarted = Instant::now();
    let restarted_at_ms = service_kit::time::now_ms();
    p.start(START_LIMIT).await?;
    println!(
        "chaos: {} back after {down_ms} ms down (pid {}, ready after {} ms){note}",
        p.name(),
        p.pid().unwrap_or(0),
        restarted.elapsed().as_millis(),
    );
    Ok(restarted_at_ms)
}

/// How long a participant call and a lease last, per store: the embedded
/// stores answer in milliseconds; the MongoDB test server is a Python
/// server whose transactions take tens of milliseconds under load, and a
/// participant SIGKILLed inside one leaves its locks held for the server's
/// transaction lifetime — a call timeout shorter than that would only pile
/// up conflicting retries.
///
/// The lease must outlast the orchestrator's longest gap between two saves
/// (its start-up check): 2 s connect timeout + call timeout + twice the
/// largest retry delay (backon's jitter).
pub struct Timing {
    pub call_timeout_ms: u64,
    pub retry_max_delay_ms: u64,
    pub lease_ttl_ms: u64,
    /// Each instance's recovery sweep (one query of the saga store).
    pub sweep_interval_ms: u64,
    /// Deadline of the soak's own calls to the orchestrators (CreateOrder,
    /// GetSaga, ListSagas): a slow store makes them slow too.
    pub client_timeout: std::time::Duration,
    /// How long after a SIGKILL the store may still apply writes the
    /// victim had sent (a server works through the commands it received
    /// before the client died); the sagas leased to the victim are read
    /// after it. SQLite: none, the victim wrote in its own process.
    pub drain_after_kill: std::time::Duration,
}

impl Timing {
    pub fn of(storage: &Storage) -> Timing {
        match storage.label() {
            // 2 000 + 500 + 2 × 500 = 3 500 < 4 000.
            None => Timing {
                call_timeout_ms: 500,
                retry_max_delay_ms: 500,
                lease_ttl_ms: 4_000,
                sweep_interval_ms: 200,
                client_timeout: Duration::from_secs(5),
                drain_after_kill: Duration::ZERO,
            },
            // 2 000 + 5 000 + 2 × 1 000 = 9 000 < 10 000. The Python test
            // server answers every query slowly under load: a sweep per
            // second per instance, and patient clients.
            Some(_) => Timing {
                call_timeout_ms: 5_000,
                retry_max_delay_ms: 1_000,
                lease_ttl_ms: 10_000,
                sweep_interval_ms: 1_000,
                client_timeout: Duration::from_secs(20),
                drain_after_kill: Duration::from_secs(2),
            },
        }
    }
}

/// An orchestrator's flags (storage flags come after): its instance id,
/// short call timeouts and leases, many attempts, a fast recovery sweep;
/// no console (it would take port 8080, and the soak reads the stores
/// itself).
fn orchestrator_args(
    orch: SocketAddr,
    payment: SocketAddr,
    inventory: SocketAddr,
    instance_id: &str,
    timing: &Timing,
) -> Vec<String> {
    let (call_timeout, lease_ttl, max_delay, sweep) = (
        timing.call_timeout_ms.to_string(),
        timing.lease_ttl_ms.to_string(),
        timing.retry_max_delay_ms.to_string(),
        timing.sweep_interval_ms.to_string(),
    );
    [
        "serve",
        "--listen",
        &orch.to_string(),
        "--step-address",
        &format!(
            "payment={},inventory={}",
            &format!("http://{payment}"),
            &format!("http://{inventory}")
        ),
        "--instance-id",
        instance_id,
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
        &sweep,
        // Nothing the audit reads may expire first (see `--retention-pass`).
        "--saga-retention",
        "off",
        "--no-console",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect()
}
