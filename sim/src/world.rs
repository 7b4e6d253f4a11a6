//! One run: the scenario of a seed played on one paused current-thread
//! runtime — hosts started, the client placing its orders, the faults
//! applied on schedule, then everything healed and the run continued until
//! every saga is terminal (or the time allowed is up), then the audit.

use crate::audit::{self, Sends};
use crate::disk::{Disk, DiskFaults};
use crate::events::{Events, Violation};
use crate::host::Incarnation;
use crate::hosts::{Cluster, HostParts};
use crate::net::{Net, NetFaults};
use crate::rng::Rng;
use crate::scenario::{self, Fault, OrderPlan, Scenario};
use saga_proto::saga::v1 as pb;
use saga_proto::saga::v1::order_service_client::OrderServiceClient;
use service_kit::defects::Defect;
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::time::Instant;

/// Wall time the simulated clocks start at (2026-01-01T00:00:00Z).
const BASE_MS: i64 = 1_767_225_600_000;
/// How long after the faults end every saga must be terminal.
const SETTLE: Duration = Duration::from_secs(600);

/// What a run found.
#[derive(Debug, Clone)]
pub struct Report {
    /// The seed.
    pub seed: u64,
    /// Every event, in order.
    pub events: Vec<String>,
    /// The invariants broken (empty: the run passed).
    pub violations: Vec<Violation>,
    /// Sagas the run created.
    pub sagas: usize,
    /// Simulated time the run took (ms).
    pub simulated_ms: u128,
    /// What happened, counted: sagas by end, takeovers, faults.
    pub figures: BTreeMap<&'static str, usize>,
}

/// Runs `seed` (with `defect` planted, if any) and audits it.
pub fn run(seed: u64, defect: Option<Defect>) -> Report {
    service_kit::defects::plant(defect);
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .start_paused(true)
        .build();
    let report = match runtime {
        Ok(runtime) => {
            // The world is built inside the runtime: its start instants must
            // be read from the paused clock. Outside it, tokio's
            // `Instant::now()` reads the real clock, and the real time
            // between building the runtime and building the world (a few ms
            // on a loaded machine) would shift every simulated instant.
            let report = runtime.block_on(async move { World::new(seed).run().await });
            runtime.shutdown_background();
            report
        }
        Err(error) => Report {
            seed,
            events: vec![format!("no runtime: {error}")],
            violations: vec![Violation {
                invariant: "the simulation runs",
                detail: error.to_string(),
                at_line: 0,
            }],
            sagas: 0,
            simulated_ms: 0,
            figures: BTreeMap::new(),
        },
    };
    service_kit::defects::plant(None);
    report
}

/// A host's state in the run.
struct Host {
    parts: HostParts,
    /// The live incarnation, `None` while down.
    up: Option<Incarnation>,
}

struct World {
    seed: u64,
    scenario: Scenario,
    cluster: Cluster,
    hosts: Mutex<BTreeMap<&'static str, Host>>,
    /// Request ids the client got an answer for.
    acked: Mutex<BTreeMap<String, String>>,
    sends: Sends,
}

impl World {
    fn new(seed: u64) -> Arc<World> {
        let rng = Rng::new(seed);
        let events = Events::new();
        let net = Net::new(rng.fork(), events.clone());
        let scenario = Scenario::of(seed);
        let cluster = Cluster {
            rng: rng.fork(),
            events: events.clone(),
            net,
            base_ms: BASE_MS,
            start: Instant::now(),
            sagas: Default::default(),
            payment: Default::default(),
            inventory: Default::default(),
            seed,
        };
        let disk_rng = rng.fork();
        let hosts = scenario
            .orchestrators
            .iter()
            .copied()
            .chain(scenario::PARTICIPANTS)
            .map(|name| {
                let skew = scenario
                    .skews
                    .iter()
                    .find(|(h, _)| *h == name)
                    .map_or(0, |(_, s)| *s);
                let parts = HostParts {
                    name,
                    disk: Disk::new(name, disk_rng.fork(), events.clone()),
                    skew: Arc::new(AtomicI64::new(skew)),
                };
                (name, Host { parts, up: None })
            })
            .collect();
        Arc::new(World {
            seed,
            scenario,
            cluster,
            hosts: Mutex::new(hosts),
            acked: Mutex::new(BTreeMap::new()),
            sends: Sends::default(),
        })
    }

    fn events(&self) -> &Events {
        &self.cluster.events
    }

    fn hosts(&self) -> std::sync::MutexGuard<'_, BTreeMap<&'static str, Host>> {
        self.hosts.lock().unwrap_or_else(|p| p.into_inner())
    }

    async fn run(self: Arc<Self>) -> Report {
        self.events()
            .log(format!("seed {} scenario {:?}", self.seed, self.scenario));
        self.seed_stores();
        self.watch_sends();
        let names: Vec<&'static str> = self.hosts().keys().copied().collect();
        for name in names {
            self.start(name);
        }
        self.cluster.net.set_faults(self.scenario.net);
        for (host, faults) in &self.scenario.disks {
            self.disk(host).set_faults(*faults);
        }
        for order in self.scenario.orders.clone() {
            tokio::spawn(self.clone().place(order));
        }
        for (at_ms, fault) in self.scenario.faults.clone() {
            tokio::spawn(self.clone().inject(at_ms, fault));
        }
        tokio::time::sleep(Duration::from_millis(self.scenario.faults_end_ms)).await;
        self.heal();
        self.settle().await;
        if self.retry_failed().await {
            self.settle().await;
        }
        audit::check(&self.audit_input());
        let sagas = self
            .cluster
            .sagas
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .sagas();
        let events = self.events().lines();
        self.cluster.net.clear();
        Report {
            seed: self.seed,
            figures: figures(&sagas, &events),
            events,
            violations: self.events().violations(),
            sagas: sagas.len(),
            simulated_ms: self.events().elapsed_ms(),
        }
    }

    /// The initial balances and stock, written as committed state.
    fn seed_stores(&self) {
        let mut payment = self
            .cluster
            .payment
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        for (customer, cents) in &self.scenario.accounts {
            payment.accounts.insert(customer.clone(), *cents);
        }
        drop(payment);
        let mut inventory = self
            .cluster
            .inventory
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        for (product, units) in &self.scenario.products {
            inventory.products.insert(product.clone(), *units);
        }
    }

    fn watch_sends(self: &Arc<Self>) {
        let world = Arc::downgrade(self);
        self.cluster.net.observe(Arc::new(move |sent| {
            if let Some(world) = world.upgrade() {
                world.sends.sent(&world.audit_input(), sent);
            }
        }));
    }

    fn audit_input(&self) -> audit::Input<'_> {
        audit::Input {
            scenario: &self.scenario,
            events: self.events(),
            sagas: &self.cluster.sagas,
            payment: &self.cluster.payment,
            inventory: &self.cluster.inventory,
            acked: &self.acked,
            sends: &self.sends,
            now_ms: Box::new(|host: &str| self.now_ms(host)),
        }
    }

    /// `host`'s wall clock now.
    fn now_ms(&self, host: &str) -> i64 {
        let skew = self
            .hosts()
            .get(host)
            .map_or(0, |h| h.parts.skew.load(Ordering::Acquire));
        BASE_MS + self.events().elapsed_ms() as i64 + skew
    }

    fn disk(&self, host: &str) -> Disk {
        match self.hosts().get(host) {
            Some(h) => h.parts.disk.clone(),
            None => Disk::instant("none"),
        }
    }

    fn start(&self, name: &'static str) {
        let parts = match self.hosts().get(name) {
            Some(h) if h.up.is_none() => h.parts.clone(),
            _ => return,
        };
        let incarnation = self.cluster.start(&parts);
        if let Some(h) = self.hosts().get_mut(name) {
            h.up = Some(incarnation);
        }
    }

    /// Crashes `name`; false when it was down already.
    fn crash(&self, name: &'static str) -> bool {
        let Some(incarnation) = self.hosts().get_mut(name).and_then(|h| h.up.take()) else {
            return false;
        };
        incarnation.crash();
        self.events().log(format!("host {name}: crashed"));
        true
    }

    async fn inject(self: Arc<Self>, at_ms: u64, fault: Fault) {
        tokio::time::sleep(Duration::from_millis(at_ms)).await;
        match fault {
            Fault::Crash { host, down_ms } => {
                if self.crash(host) {
                    tokio::time::sleep(Duration::from_millis(down_ms)).await;
                    self.start(host);
                }
            }
            Fault::Stall { host, for_ms } => {
                let up = self.hosts().get(host).and_then(|h| h.up.clone());
                if let Some(incarnation) = up {
                    self.events()
                        .log(format!("host {host}: stalled for {for_ms} ms"));
                    incarnation.stall(Instant::now() + Duration::from_millis(for_ms));
                }
            }
            Fault::Partition { a, b, for_ms } => {
                self.cluster
                    .net
                    .partition(a, b, Duration::from_millis(for_ms));
            }
            Fault::LongPause { down_ms } => {
                self.events()
                    .log(format!("long pause of every orchestrator for {down_ms} ms"));
                let crashed: Vec<&'static str> = self
                    .scenario
                    .orchestrators
                    .iter()
                    .copied()
                    .filter(|o| self.crash(o))
                    .collect();
                tokio::time::sleep(Duration::from_millis(down_ms)).await;
                for o in crashed {
                    self.start(o);
                }
            }
        }
    }

    /// The faults end: the network heals and stores stop failing (hosts
    /// still down come back when their crash's time is up).
    fn heal(&self) {
        self.events().log("faults end: network and stores healthy");
        self.cluster.net.set_faults(NetFaults::HEALTHY);
        self.cluster.net.heal();
        let disks: Vec<Disk> = self
            .hosts()
            .values()
            .map(|h| h.parts.disk.clone())
            .collect();
        for disk in disks {
            disk.set_faults(DiskFaults::default());
        }
    }

    /// Runs until every placed order has a terminal saga, or [`SETTLE`]
    /// after the last fault.
    async fn settle(&self) {
        let last_fault_ms = self
            .scenario
            .faults
            .iter()
            .map(|(at, f)| {
                at + match f {
                    Fault::Crash { down_ms, .. } | Fault::LongPause { down_ms } => *down_ms,
                    Fault::Partition { for_ms, .. } | Fault::Stall { for_ms, .. } => *for_ms,
                }
            })
            .max()
            .unwrap_or(0)
            .max(self.scenario.faults_end_ms);
        let until = self.cluster.start + Duration::from_millis(last_fault_ms) + SETTLE;
        while Instant::now() < until {
            if audit::settled(&self.audit_input()) {
                self.events()
                    .log("settled: every order has a terminal saga");
                return;
            }
            tokio::time::sleep(Duration::from_secs(1)).await;
        }
        self.events().log("time is up: not every saga is terminal");
    }

    /// A person retries every FAILED saga once (RetrySaga, on a random
    /// orchestrator), as the runbook says once the cause is fixed; true
    /// when one was retried. RetrySaga refuses a saga past its retry
    /// window, which stays FAILED.
    async fn retry_failed(&self) -> bool {
        use saga_proto::saga::v1::saga_service_client::SagaServiceClient;
        let failed: Vec<String> = self
            .cluster
            .sagas
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .sagas()
            .into_iter()
            .filter(|s| s.status == orchestrator::saga::SagaStatus::Failed)
            .map(|s| s.saga_id)
            .collect();
        let operator = Incarnation::new();
        let mut retried = false;
        for saga_id in failed {
            let orchestrators = &self.scenario.orchestrators;
            let to = orchestrators[self.cluster.rng.below(orchestrators.len())];
            let channel = self.cluster.net.channel("operator", operator.clone(), to);
            let mut request = tonic::Request::new(pb::RetrySagaRequest {
                saga_id: saga_id.clone(),
            });
            request.set_timeout(Duration::from_secs(3));
            let result = SagaServiceClient::new(channel).retry_saga(request).await;
            let answer = match &result {
                Ok(_) => "resumed".to_owned(),
                Err(status) => format!("{:?}", status.code()),
            };
            self.events()
                .log(format!("operator: RetrySaga {saga_id} on {to}: {answer}"));
            retried |= result.is_ok();
        }
        retried
    }

    /// The client: places `order` with CreateOrder at its time, on a
    /// random orchestrator, again and again (same request id) until one
    /// answers; now and then twice.
    async fn place(self: Arc<Self>, order: OrderPlan) {
        tokio::time::sleep(Duration::from_millis(order.at_ms)).await;
        let client = Incarnation::new();
        let rng = self.cluster.rng.fork();
        let mut sends = 1 + u32::from(rng.chance(self.scenario.duplicate_per_mille));
        while sends > 0 {
            let to = self.scenario.orchestrators[rng.below(self.scenario.orchestrators.len())];
            let channel = self.cluster.net.channel("client", client.clone(), to);
            let mut request = tonic::Request::new(create_order(&order));
            request.set_timeout(Duration::from_secs(3));
            match OrderServiceClient::new(channel).create_order(request).await {
                Ok(reply) => {
                    let saga_id = reply.into_inner().saga_id;
                    self.events().log(format!(
                        "client: {} placed as saga {saga_id}",
                        order.request_id
                    ));
                    self.acked
                        .lock()
                        .unwrap_or_else(|p| p.into_inner())
                        .insert(order.request_id.clone(), saga_id);
                    sends -= 1;
                }
                Err(status) => self.events().log(format!(
                    "client: {} failed on {to}: {:?}",
                    order.request_id,
                    status.code()
                )),
            }
            tokio::time::sleep(rng.millis(200, 2_000)).await;
        }
    }
}

/// The run in numbers: how its sagas ended, how often one was taken over,
/// which faults struck.
fn figures(sagas: &[orchestrator::saga::Saga], events: &[String]) -> BTreeMap<&'static str, usize> {
    use orchestrator::saga::SagaStatus;
    let mut f = BTreeMap::new();
    let count = |status| sagas.iter().filter(|s| s.status == status).count();
    f.insert("completed", count(SagaStatus::Completed));
    f.insert("cancelled", count(SagaStatus::Cancelled));
    f.insert("failed", count(SagaStatus::Failed));
    f.insert(
        "failed past the send window",
        sagas
            .iter()
            .filter(|s| {
                s.reason
                    .as_deref()
                    .is_some_and(|r| r.contains("send window"))
            })
            .count(),
    );
    f.insert(
        "takeovers",
        sagas
            .iter()
            .flat_map(|s| &s.history)
            .filter(|t| t.detail.starts_with("taken over by"))
            .count(),
    );
    for (name, needle) in [
        ("crashes", ": crashed"),
        ("stalls", ": stalled for"),
        ("long pauses", "long pause of every"),
        ("partitions", "net: partition"),
        ("messages lost", " lost"),
        ("store faults", "store orch"),
        ("duplicate deliveries", "(duplicate)"),
    ] {
        f.insert(name, events.iter().filter(|l| l.contains(needle)).count());
    }
    f
}

fn create_order(order: &OrderPlan) -> pb::CreateOrderRequest {
    pb::CreateOrderRequest {
        request_id: order.request_id.clone(),
        customer_id: order.customer_id.clone(),
        items: order
            .items
            .iter()
            .map(|(product_id, quantity, unit_price_cents)| pb::OrderItem {
                product_id: product_id.clone(),
                quantity: *quantity,
                unit_price_cents: *unit_price_cents,
            })
            .collect(),
        wait: false,
    }
}
