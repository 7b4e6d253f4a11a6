//! What one seed runs: the cluster, the orders and the faults, all drawn
//! from the seed before the run starts, plus the limits every run shares.

use crate::disk::DiskFaults;
use crate::net::NetFaults;
use crate::rng::Rng;
use orchestrator::executor::{Jitter, LeasePolicy, RetryPolicy};
use service_kit::limits::CallLimits;
use std::time::Duration;

/// The orchestrator limits of every run: short, so that retries, lease
/// expiries and retention all happen within minutes of simulated time.
pub fn limits() -> CallLimits {
    CallLimits {
        call_timeout: Duration::from_millis(1_000),
        action_attempts: 4,
        compensation_attempts: 12,
        step_deadline: Duration::from_secs(10),
        lease_ttl: Duration::from_secs(6),
        retry_max_delay: Duration::from_millis(500),
        steps: 2,
    }
}

/// The retry policy [`limits`] give, its jitter drawn from `seed`.
pub fn retry_policy(seed: u64) -> RetryPolicy {
    let l = limits();
    RetryPolicy {
        action_attempts: l.action_attempts,
        compensation_attempts: l.compensation_attempts,
        min_delay: Duration::from_millis(20),
        max_delay: l.retry_max_delay,
        step_deadline: l.step_deadline,
        jitter: Jitter::seeded(seed),
    }
}

/// The lease policy of orchestrator `owner`.
pub fn lease_policy(owner: &str) -> LeasePolicy {
    LeasePolicy {
        owner: owner.to_owned(),
        ttl: limits().lease_ttl,
        sweep_interval: Duration::from_secs(1),
    }
}

/// How long participants keep their operationHistory: twice the shortest
/// safe retention for [`limits`] — a retry window as long as the minimum
/// (RetrySaga refuses a saga past it), and short enough that a long pause
/// passes it.
pub fn history_retention() -> Duration {
    limits().minimum_history_retention() * 2
}

/// One order the client places.
#[derive(Clone, Debug)]
pub struct OrderPlan {
    /// Its CreateOrder request id.
    pub request_id: String,
    /// Who pays.
    pub customer_id: String,
    /// (product, quantity, unit price).
    pub items: Vec<(String, i64, i64)>,
    /// When the client first sends it (ms into the run).
    pub at_ms: u64,
}

impl OrderPlan {
    /// Σ quantity × unit price.
    pub fn total_cents(&self) -> i64 {
        self.items.iter().map(|(_, q, p)| q * p).sum()
    }
}

/// One scheduled fault.
#[derive(Clone, Debug)]
pub enum Fault {
    /// The host crashes, and restarts `down_ms` later.
    Crash {
        /// The host.
        host: &'static str,
        /// How long it stays down.
        down_ms: u64,
    },
    /// The hosts cannot reach each other for `for_ms`.
    Partition {
        /// One host.
        a: &'static str,
        /// The other.
        b: &'static str,
        /// How long until it heals.
        for_ms: u64,
    },
    /// The host stops for `for_ms` and then goes on (its leases may run
    /// out meanwhile while it still believes it holds them).
    Stall {
        /// The host.
        host: &'static str,
        /// How long it stands still.
        for_ms: u64,
    },
    /// Every orchestrator stops for `down_ms` — longer than the send
    /// window, so the participants' retention passes while sagas wait.
    LongPause {
        /// How long every orchestrator stays down.
        down_ms: u64,
    },
}

/// Everything one seed runs.
#[derive(Clone, Debug)]
pub struct Scenario {
    /// Orchestrator hosts (`orch-1` ...).
    pub orchestrators: Vec<&'static str>,
    /// Initial balances.
    pub accounts: Vec<(String, i64)>,
    /// Initial stock.
    pub products: Vec<(String, i64)>,
    /// The orders.
    pub orders: Vec<OrderPlan>,
    /// Faults, each at a time (ms into the run).
    pub faults: Vec<(u64, Fault)>,
    /// The network until the faults end.
    pub net: NetFaults,
    /// Store failures until the faults end, per host.
    pub disks: Vec<(&'static str, DiskFaults)>,
    /// Each host's clock skew (ms).
    pub skews: Vec<(&'static str, i64)>,
    /// When the faults end (ms into the run): the network heals, stores
    /// stop failing and every host is up again.
    pub faults_end_ms: u64,
    /// The chance (per mille) that the client sends an order twice.
    pub duplicate_per_mille: u32,
}

const ORCHESTRATORS: [&str; 3] = ["orch-1", "orch-2", "orch-3"];
/// The participant hosts.
pub const PARTICIPANTS: [&str; 2] = ["payment", "inventory"];

impl Scenario {
    /// The scenario of `seed`.
    pub fn of(seed: u64) -> Scenario {
        let rng = Rng::new(seed ^ 0x5EED_5CE7_A810);
        let orchestrators = ORCHESTRATORS[..rng.range(1, 3) as usize].to_vec();
        let accounts = (0..rng.range(2, 3))
            .map(|i| (format!("cust-{i}"), rng.range(0, 60) as i64 * 100))
            .collect::<Vec<_>>();
        let products = (0..2)
            .map(|i| (format!("sku-{i}"), rng.range(0, 12) as i64))
            .collect::<Vec<_>>();
        let faults_end_ms = rng.range(10_000, 40_000);
        let orders = (0..rng.range(4, 12))
            .map(|i| OrderPlan {
                request_id: format!("order-{i}"),
                customer_id: accounts[rng.below(accounts.len())].0.clone(),
                items: (0..rng.range(1, 2))
                    .map(|_| {
                        (
                            products[rng.below(products.len())].0.clone(),
                            rng.range(1, 3) as i64,
                            rng.range(1, 9) as i64 * 100,
                        )
                    })
                    .collect(),
                at_ms: rng.range(0, faults_end_ms),
            })
            .collect();
        let hosts: Vec<&'static str> = orchestrators.iter().copied().chain(PARTICIPANTS).collect();
        Scenario {
            faults: faults(&rng, &hosts, faults_end_ms),
            net: NetFaults {
                delay_ms: (0, [3, 30, 300][rng.below(3)]),
                lose_request_per_mille: [0, 20, 100][rng.below(3)],
                lose_reply_per_mille: [0, 20, 100][rng.below(3)],
                duplicate_per_mille: [0, 50, 200][rng.below(3)],
            },
            disks: hosts
                .iter()
                .map(|h| {
                    let on = rng.chance(300);
                    let faults = DiskFaults {
                        refuse_per_mille: if on { [10, 50][rng.below(2)] } else { 0 },
                        timeout_per_mille: if on { [0, 10][rng.below(2)] } else { 0 },
                    };
                    (*h, faults)
                })
                .collect(),
            skews: hosts
                .iter()
                .map(|h| {
                    let skew = if rng.chance(250) {
                        rng.range(0, 16_000) as i64 - 8_000
                    } else {
                        0
                    };
                    (*h, skew)
                })
                .collect(),
            orchestrators,
            accounts,
            products,
            orders,
            faults_end_ms,
            duplicate_per_mille: 150,
        }
    }
}

/// The fault schedule: a few crashes and partitions, now and then a long
/// pause of every orchestrator.
fn faults(rng: &Rng, hosts: &[&'static str], end_ms: u64) -> Vec<(u64, Fault)> {
    let mut faults = Vec::new();
    for _ in 0..rng.range(0, 4) {
        let host = hosts[rng.below(hosts.len())];
        let down_ms = rng.range(100, 10_000);
        faults.push((rng.range(0, end_ms), Fault::Crash { host, down_ms }));
    }
    for _ in 0..rng.range(0, 3) {
        let a = hosts[rng.below(hosts.len())];
        let b = hosts[rng.below(hosts.len())];
        if a != b {
            let for_ms = rng.range(500, 8_000);
            faults.push((rng.range(0, end_ms), Fault::Partition { a, b, for_ms }));
        }
    }
    for _ in 0..rng.range(0, 2) {
        let host = hosts[rng.below(hosts.len())];
        let for_ms = rng.range(1_000, 15_000);
        faults.push((rng.range(0, end_ms), Fault::Stall { host, for_ms }));
    }
    if rng.chance(80) {
        let down_ms = history_retention().as_millis() as u64 + rng.range(0, 60_000);
        faults.push((rng.range(0, end_ms), Fault::LongPause { down_ms }));
    }
    faults.sort_by_key(|(at, _)| *at);
    faults
}
