//! The retention pass (`--retention-pass`): proof that expiry happens and
//! touches nothing live, run after the audited soak so that nothing the
//! audit reads can be purged before it (the soak's orchestrators keep
//! finished sagas forever, `--saga-retention off`).
//!
//! The same stores are served again by one orchestrator and both
//! participants, all three given the *same* short orchestrator limits (so
//! the participants derive the same minimum history retention and accept
//! one in seconds), a saga retention of 1 s and a purge every second. Then:
//!
//! - a few orders are sent while payment-svc is down: with one attempt per
//!   step they end FAILED (the refund cannot reach it) — live sagas a
//!   person must see, which must survive every expiry;
//! - a few orders complete normally: their sagas and every participant
//!   record they left must disappear once the retention has passed;
//! - every COMPLETED or CANCELLED saga of the soak must disappear too (on
//!   MongoDB the orchestrator dates them at open — the soak left them
//!   undated — and the server's TTL monitor deletes them);
//! - the soak's participant records go as well on the embedded stores,
//!   whose purge applies the current retention to every record; on MongoDB
//!   a record keeps the expiry date it was written with (7 days here), so
//!   they must all still be there;
//! - the soak's FAILED sagas, every account and every product row are
//!   exactly as the audit read them.

use crate::args::{Args, Backend};
use crate::checks::Checks;
use crate::cluster::{self, Proc, Role, free_addr};
use crate::services::START_LIMIT;
use crate::snapshot::Snapshot;
use crate::storage::Storage;
use orchestrator::saga::{Saga, SagaStatus};
use saga_proto::inventory::v1 as inventory;
use saga_proto::payment::v1 as payment;
use saga_proto::saga::v1 as pb;
use service_kit::limits::CallLimits;
use std::collections::HashSet;
use std::net::SocketAddr;
use std::path::Path;
use std::time::{Duration, Instant};

/// Orders that end FAILED (sent while payment-svc is down).
const LIVE_ORDERS: usize = 3;
/// Orders that complete and must then expire.
const EXPIRING_ORDERS: usize = 10;

/// The limits all three services run with: short, so the minimum history
/// retention is seconds. SecantusDB answers slowly, so calls get longer
/// there.
fn limits(backend: Backend) -> CallLimits {
    let call = match backend {
        Backend::Embedded => Duration::from_millis(200),
        Backend::Mongo => Duration::from_millis(1_000),
    };
    let retry_max_delay = Duration::from_millis(10);
    CallLimits {
        call_timeout: call,
        action_attempts: 1,
        compensation_attempts: 1,
        step_deadline: call,
        // Above the orchestrator's longest gap between two saves:
        // connect wait + call + 2 × max delay.
        lease_ttl: service_kit::limits::PARTICIPANT_CONNECT_TIMEOUT
            + call
            + retry_max_delay * 2
            + Duration::from_millis(100),
        retry_max_delay,
        steps: saga_tests::order_saga_steps(),
    }
}

/// The environment of all three services: the limits (the participants
/// mirror the orchestrator's flags through the same variables, and are
/// told the order saga's step count), the retentions and the purge
/// interval.
fn env(args: &Args, limits: &CallLimits, keep: Duration) -> Vec<(String, String)> {
    let ms = |d: Duration| d.as_millis().to_string();
    vec![
        ("RUST_LOG".into(), args.log_level.clone()),
        ("CALL_TIMEOUT_MS".into(), ms(limits.call_timeout)),
        ("ACTION_ATTEMPTS".into(), limits.action_attempts.to_string()),
        (
            "COMPENSATION_ATTEMPTS".into(),
            limits.compensation_attempts.to_string(),
        ),
        ("STEP_DEADLINE_MS".into(), ms(limits.step_deadline)),
        ("LEASE_TTL_MS".into(), ms(limits.lease_ttl)),
        ("RETRY_MAX_DELAY_MS".into(), ms(limits.retry_max_delay)),
        ("SAGA_STEPS".into(), limits.steps.to_string()),
        ("SAGA_RETENTION".into(), "1s".into()),
        (
            "HISTORY_RETENTION".into(),
            format!("{}ms", keep.as_millis()),
        ),
        ("PURGE_INTERVAL".into(), "1s".into()),
    ]
}

/// The three services of the pass, stopped on drop if still running.
struct Trio {
    payment: Proc,
    inventory: Proc,
    orchestrator: Proc,
}

impl Trio {
    async fn stop(&mut self) {
        for p in [
            &mut self.orchestrator,
            &mut self.payment,
            &mut self.inventory,
        ] {
            if p.pid().is_some() {
                let _ = p.terminate(Duration::from_secs(10)).await;
            }
        }
    }
}

impl Drop for Trio {
    fn drop(&mut self) {
        for p in [
            &mut self.orchestrator,
            &mut self.payment,
            &mut self.inventory,
        ] {
            if p.pid().is_some() {
                let _ = p.kill9();
            }
        }
    }
}

/// Runs the pass on the stores of the soak just audited (`before`: what the
/// audit read).
pub async fn run(
    args: &Args,
    bin_dir: &Path,
    work: &Path,
    storage: &Storage,
    before: &Snapshot,
    checks: &mut Checks,
) -> Result<(), String> {
    let limits = limits(args.backend);
    let keep = limits.minimum_history_retention();
    println!(
        "chaos: retention pass — saga retention 1 s, history retention {} ms (the minimum for {limits}), purge every 1 s",
        keep.as_millis()
    );
    let env = env(args, &limits, keep);
    let addr = || free_addr().map_err(|e| format!("no free port: {e}"));
    let (pay_addr, inv_addr, orch_addr) = (addr()?, addr()?, addr()?);
    let log = |name: &str| work.join("logs").join(format!("retention-{name}.log"));
    let participant = |role: Role, addr: SocketAddr| {
        let mut argv = vec!["--listen".to_owned(), addr.to_string()];
        argv.extend(storage.args(role));
        Proc::new(
            role,
            format!("retention-{}", role.binary()),
            0,
            bin_dir.join(role.binary()),
            addr,
            argv,
            env.clone(),
            log(role.binary()),
            0,
        )
    };
    let mut orchestrator_argv: Vec<String> = [
        "serve",
        "--listen",
        &orch_addr.to_string(),
        "--step-address",
        &format!(
            "payment={},inventory={}",
            &format!("http://{pay_addr}"),
            &format!("http://{inv_addr}")
        ),
        "--instance-id",
        "chaos-retention",
        "--sweep-interval-ms",
        "200",
        "--no-console",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    orchestrator_argv.extend(storage.args(Role::Orchestrator));
    let mut trio = Trio {
        payment: participant(Role::Payment, pay_addr),
        inventory: participant(Role::Inventory, inv_addr),
        orchestrator: Proc::new(
            Role::Orchestrator,
            "retention-orchestrator".into(),
            1,
            bin_dir.join(Role::Orchestrator.binary()),
            orch_addr,
            orchestrator_argv,
            env.clone(),
            log("orchestrator"),
            0,
        ),
    };
    let outcome = drive_and_watch(args, &mut trio, storage, before, keep, checks).await;
    trio.stop().await;
    outcome
}

/// Starts the trio, sends the pass's orders and judges what expired and
/// what stayed.
async fn drive_and_watch(
    args: &Args,
    trio: &mut Trio,
    storage: &Storage,
    before: &Snapshot,
    keep: Duration,
    checks: &mut Checks,
) -> Result<(), String> {
    for p in [
        &mut trio.payment,
        &mut trio.inventory,
        &mut trio.orchestrator,
    ] {
        p.start(START_LIMIT).await?;
        println!(
            "chaos: {} ready after {} ms",
            p.name(),
            p.last_ready.as_millis()
        );
    }
    let mut clients = Clients::connect(trio);
    clients.fund().await?;
    let live = clients.failed_orders(&mut trio.payment).await?;
    let expiring = clients.completed_orders().await?;
    let soak_ops = op_keys(before);
    let new_ops = new_records(storage, &soak_ops, checks).await?;
    let watch = Watch {
        before,
        soak_finished: before
            .sagas
            .iter()
            .filter(|s| finished(s))
            .map(|s| s.saga_id.as_str())
            .collect(),
        soak_failed: before.sagas.iter().filter(|s| !finished(s)).collect(),
        soak_ops,
        new_ops,
        expiring,
        live,
        embedded: args.backend == Backend::Embedded,
    };
    let expiry = watch.wait_for_expiry(storage, keep).await?;
    watch.check_gone(checks, &expiry, keep);
    watch.check_untouched(checks, &expiry.last);
    Ok(())
}

/// The customer every order of the pass is paid by.
const CUSTOMER: &str = "retention-customer";
/// The product every order of the pass buys.
const PRODUCT: &str = "retention-sku";

/// The pass's gRPC clients of the trio.
struct Clients {
    pay: payment::payment_service_client::PaymentServiceClient<tonic::transport::Channel>,
    inv: inventory::inventory_service_client::InventoryServiceClient<tonic::transport::Channel>,
    orders: pb::order_service_client::OrderServiceClient<tonic::transport::Channel>,
    sagas: pb::saga_service_client::SagaServiceClient<tonic::transport::Channel>,
}

impl Clients {
    fn connect(trio: &Trio) -> Clients {
        let timeout = Duration::from_secs(30);
        Clients {
            pay: payment::payment_service_client::PaymentServiceClient::new(cluster::channel(
                trio.payment.addr,
                timeout,
            )),
            inv: inventory::inventory_service_client::InventoryServiceClient::new(
                cluster::channel(trio.inventory.addr, timeout),
            ),
            orders: pb::order_service_client::OrderServiceClient::new(cluster::channel(
                trio.orchestrator.addr,
                timeout,
            )),
            sagas: pb::saga_service_client::SagaServiceClient::new(cluster::channel(
                trio.orchestrator.addr,
                timeout,
            )),
        }
    }

    /// Money and stock for every order of the pass.
    async fn fund(&mut self) -> Result<(), String> {
        self.pay
            .deposit(payment::DepositRequest {
                request_id: "retention-deposit".into(),
                customer_id: CUSTOMER.into(),
                amount_cents: 1_000_000,
            })
            .await
            .map_err(|e| format!("deposit: {e}"))?;
        self.inv
            .add_stock(inventory::AddStockRequest {
                request_id: "retention-stock".into(),
                product_id: PRODUCT.into(),
                quantity: 1_000,
            })
            .await
            .map_err(|e| format!("add stock: {e}"))?;
        Ok(())
    }

    /// The live sagas: orders sent while payment-svc is down, so that with
    /// one attempt per step they end FAILED. Returns their ids once all are
    /// FAILED, with payment-svc started again.
    async fn failed_orders(&mut self, payment: &mut Proc) -> Result<Vec<String>, String> {
        payment.terminate(Duration::from_secs(10)).await?;
        let mut live = Vec::new();
        for i in 0..LIVE_ORDERS {
            let saga = self
                .orders
                .create_order(order(format!("retention-live-{i}")))
                .await
                .map_err(|e| format!("create live order: {e}"))?
                .into_inner()
                .saga_id;
            live.push(saga);
        }
        self.await_failed(&live).await?;
        payment.start(START_LIMIT).await?;
        Ok(live)
    }

    /// Waits (60 s at most, from now) until every saga of `live` is FAILED.
    async fn await_failed(&mut self, live: &[String]) -> Result<(), String> {
        let limit = Instant::now() + Duration::from_secs(60);
        for id in live {
            loop {
                let s = get(&mut self.sagas, id).await?;
                if s.status() == pb::SagaStatus::Failed {
                    break;
                }
                if Instant::now() > limit {
                    return Err(format!(
                        "live saga {id} did not end FAILED: {:?}",
                        s.status()
                    ));
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
        Ok(())
    }

    /// The expiring sagas: orders that complete, then must go with their
    /// records.
    async fn completed_orders(&mut self) -> Result<HashSet<String>, String> {
        let mut expiring = HashSet::new();
        for i in 0..EXPIRING_ORDERS {
            let answer = self
                .orders
                .create_order(order(format!("retention-done-{i}")))
                .await
                .map_err(|e| format!("create order: {e}"))?
                .into_inner();
            expiring.insert(answer.saga_id);
        }
        Ok(expiring)
    }
}

/// One order of the pass (one unit of [`PRODUCT`] for [`CUSTOMER`]),
/// answered once its saga is terminal.
fn order(id: String) -> pb::CreateOrderRequest {
    pb::CreateOrderRequest {
        request_id: id,
        customer_id: CUSTOMER.into(),
        items: vec![pb::OrderItem {
            product_id: PRODUCT.into(),
            quantity: 1,
            unit_price_cents: 100,
        }],
        wait: true,
    }
}

/// A participant record's key: (request id, kind).
type OpKey = (String, String);

/// The keys of every participant record of `snap`, both participants.
fn op_keys(snap: &Snapshot) -> HashSet<OpKey> {
    snap.payment_ops
        .iter()
        .chain(&snap.inventory_ops)
        .map(|o| (o.request_id.clone(), o.kind.clone()))
        .collect()
}

/// Whether a saga is finished (COMPLETED or CANCELLED): what the saga
/// retention removes.
fn finished(s: &Saga) -> bool {
    matches!(s.status, SagaStatus::Completed | SagaStatus::Cancelled)
}

/// The participant records written since the audit (the pass's orders'),
/// checked to exist: without them there would be nothing new to expire.
async fn new_records(
    storage: &Storage,
    soak_ops: &HashSet<OpKey>,
    checks: &mut Checks,
) -> Result<HashSet<OpKey>, String> {
    let now = storage.snapshot().await?;
    let new_ops: HashSet<OpKey> = op_keys(&now)
        .into_iter()
        .filter(|k| !soak_ops.contains(k))
        .collect();
    checks.check(
        !new_ops.is_empty(),
        "retention pass: the new orders left participant records to expire",
        &format!("{} records", new_ops.len()),
    );
    Ok(new_ops)
}

/// What the pass expects to expire and what it must leave alone.
struct Watch<'a> {
    /// The stores as the audit read them.
    before: &'a Snapshot,
    /// The soak's COMPLETED or CANCELLED sagas: to expire.
    soak_finished: HashSet<&'a str>,
    /// The soak's other sagas: to stay as they were.
    soak_failed: Vec<&'a Saga>,
    /// The soak's participant records: to expire on the embedded stores,
    /// to stay on MongoDB (dated 7 days when written).
    soak_ops: HashSet<OpKey>,
    /// The pass's participant records: to expire.
    new_ops: HashSet<OpKey>,
    /// The pass's completed sagas: to expire.
    expiring: HashSet<String>,
    /// The pass's FAILED sagas: to stay.
    live: Vec<String>,
    embedded: bool,
}

/// How the wait for expiry ended.
struct Expiry {
    /// The stores when it ended.
    last: Snapshot,
    /// What was still there (empty: everything went).
    remaining: Vec<String>,
    /// Seconds it took.
    took: f64,
}

impl Watch<'_> {
    /// Reads the stores every 500 ms until everything due has expired, or
    /// the retention plus the purge interval (and a margin) has passed.
    async fn wait_for_expiry(&self, storage: &Storage, keep: Duration) -> Result<Expiry, String> {
        // The retention plus the purge interval; MongoDB's TTL monitor runs
        // every 60 s on mongod (1 s on the test server the soak starts).
        let ttl_monitor = if self.embedded { 1 } else { 60 };
        let deadline = keep + Duration::from_secs(30 + ttl_monitor);
        let started = Instant::now();
        let (last, remaining) = loop {
            let snap = storage.snapshot().await?;
            let remaining = self.still_there(&snap);
            if remaining.is_empty() || started.elapsed() > deadline {
                break (snap, remaining);
            }
            tokio::time::sleep(Duration::from_millis(500)).await;
        };
        Ok(Expiry {
            last,
            remaining,
            took: started.elapsed().as_secs_f64(),
        })
    }

    /// What `snap` still holds of what must expire, counted per kind.
    fn still_there(&self, snap: &Snapshot) -> Vec<String> {
        let ids: HashSet<&str> = snap.sagas.iter().map(|s| s.saga_id.as_str()).collect();
        let ops = op_keys(snap);
        let mut remaining = Vec::new();
        let finished_left = self
            .soak_finished
            .iter()
            .filter(|id| ids.contains(*id))
            .count();
        if finished_left > 0 {
            remaining.push(format!("{finished_left} finished sagas of the soak"));
        }
        let new_left = self
            .expiring
            .iter()
            .filter(|id| ids.contains(id.as_str()))
            .count();
        if new_left > 0 {
            remaining.push(format!("{new_left} finished sagas of this pass"));
        }
        let new_ops_left = self.new_ops.iter().filter(|k| ops.contains(*k)).count();
        if new_ops_left > 0 {
            remaining.push(format!("{new_ops_left} participant records of this pass"));
        }
        if self.embedded {
            let soak_left = self.soak_ops.iter().filter(|k| ops.contains(*k)).count()
                + snap
                    .deduct_lines
                    .keys()
                    .filter(|r| self.before.deduct_lines.contains_key(*r))
                    .count();
            if soak_left > 0 {
                remaining.push(format!("{soak_left} participant records of the soak"));
            }
        }
        remaining
    }

    /// The check that everything due expired.
    fn check_gone(&self, checks: &mut Checks, expiry: &Expiry, keep: Duration) {
        let Expiry {
            remaining, took, ..
        } = expiry;
        checks.check(
            remaining.is_empty(),
            "retention pass: every finished saga and every expired participant record is gone",
            &if remaining.is_empty() {
                format!(
                    "{} soak sagas, {} new sagas, {} new records{} in {took:.1} s (history retention {:.1} s)",
                    self.soak_finished.len(),
                    self.expiring.len(),
                    self.new_ops.len(),
                    if self.embedded {
                        format!(", {} soak records", self.soak_ops.len())
                    } else {
                        String::new()
                    },
                    keep.as_secs_f64()
                )
            } else {
                format!("still there after {took:.1} s: {}", remaining.join(", "))
            },
        );
    }

    /// The check that nothing live was touched: FAILED sagas, accounts,
    /// products (and on MongoDB the soak's records) as they were.
    fn check_untouched(&self, checks: &mut Checks, last: &Snapshot) {
        let mut problems = self.changed_sagas(last);
        problems.extend(self.changed_rows(last));
        checks.check(
            problems.is_empty(),
            "retention pass: FAILED sagas, accounts, products (and on MongoDB the soak's records, dated 7 days) untouched",
            &if problems.is_empty() {
                format!(
                    "{} soak sagas not finished, {} FAILED of this pass, {} accounts, {} products",
                    self.soak_failed.len(),
                    self.live.len(),
                    self.before.balances.len(),
                    self.before.stock.len()
                )
            } else {
                problems.join("; ")
            },
        );
    }

    /// The soak's unfinished sagas and the pass's FAILED ones that changed
    /// or went.
    fn changed_sagas(&self, last: &Snapshot) -> Vec<String> {
        let mut problems = Vec::new();
        for s in &self.soak_failed {
            match last.sagas.iter().find(|x| x.saga_id == s.saga_id) {
                Some(x) if x.version == s.version && x.status == s.status => {}
                Some(x) => problems.push(format!(
                    "soak saga {} changed: {:?} v{}",
                    s.saga_id, x.status, x.version
                )),
                None => problems.push(format!(
                    "soak saga {} ({:?}) was deleted",
                    s.saga_id, s.status
                )),
            }
        }
        for id in &self.live {
            match last.sagas.iter().find(|x| &x.saga_id == id) {
                Some(x) if x.status == SagaStatus::Failed => {}
                Some(x) => problems.push(format!("FAILED saga {id} is now {:?}", x.status)),
                None => problems.push(format!("FAILED saga {id} was deleted")),
            }
        }
        problems
    }

    /// Accounts and products that changed or went, and on MongoDB the
    /// soak's participant records that went.
    fn changed_rows(&self, last: &Snapshot) -> Vec<String> {
        let mut problems = Vec::new();
        let unchanged = |label: &str,
                         was: &[(String, i64)],
                         now: &[(String, i64)],
                         problems: &mut Vec<String>| {
            for row in was {
                if !now.contains(row) {
                    problems.push(format!("{label} {} changed or deleted", row.0));
                }
            }
        };
        unchanged(
            "account",
            &self.before.balances,
            &last.balances,
            &mut problems,
        );
        unchanged("product", &self.before.stock, &last.stock, &mut problems);
        if !self.embedded {
            let ops = op_keys(last);
            let gone = self.soak_ops.iter().filter(|k| !ops.contains(*k)).count();
            if gone > 0 {
                problems.push(format!(
                    "{gone} soak records written with a 7-day expiry were deleted"
                ));
            }
        }
        problems
    }
}

async fn get(
    sagas: &mut pb::saga_service_client::SagaServiceClient<tonic::transport::Channel>,
    id: &str,
) -> Result<pb::Saga, String> {
    sagas
        .get_saga(pb::GetSagaRequest {
            lookup: Some(pb::get_saga_request::Lookup::SagaId(id.to_owned())),
        })
        .await
        .map(tonic::Response::into_inner)
        .map_err(|e| format!("GetSaga {id}: {e}"))
}
