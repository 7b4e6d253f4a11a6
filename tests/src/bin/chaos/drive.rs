//! Seeding the participants and driving CreateOrder from concurrent
//! workers: every order is retried with the *same* request id until the
//! orchestrator accepts it (it is down while it is being killed), and a few
//! already-accepted orders are sent again to check they map to the same saga.

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use saga_proto::inventory::v1 as inventory;
use saga_proto::inventory::v1::inventory_service_client::InventoryServiceClient;
use saga_proto::payment::v1 as payment;
use saga_proto::payment::v1::payment_service_client::PaymentServiceClient;
use saga_proto::saga::v1 as saga;
use saga_proto::saga::v1::order_service_client::OrderServiceClient;
use saga_proto::saga::v1::saga_service_client::SagaServiceClient;
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, HashMap};
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::{Duration, Instant};
use tonic::Code;
use tonic::transport::Channel;

/// Customers the orders are spread over.
pub const CUSTOMERS: usize = 20;
/// Longest a worker waits for one saga before moving on.
const SAGA_WAIT: Duration = Duration::from_secs(30);
/// Products the orders are spread over.
pub const PRODUCTS: usize = 10;

/// Customer `i`'s id.
pub fn customer(i: usize) -> String {
    format!("chaos-customer-{i:02}")
}

/// Product `i`'s id.
pub fn product(i: usize) -> String {
    format!("chaos-sku-{i:02}")
}

/// What was seeded: customer → cents, product → units.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct Initial {
    pub balances: BTreeMap<String, i64>,
    pub stock: BTreeMap<String, i64>,
}

/// Balances and stock scaled to the number of sagas: an order costs about
/// 2 lines × 3 units × 250 cents; a quarter of the customers can afford only
/// a fraction of their share and half of the products run short, so real
/// refusals (and with them compensations) happen besides injected ones.
pub fn plan_initial(sagas: usize, contention: Option<&crate::contention::Plan>) -> Initial {
    let n = i64::try_from(sagas.max(10)).unwrap_or(i64::MAX / 4_000);
    let mut initial = Initial::default();
    for i in 0..CUSTOMERS {
        let cents = match i % 4 {
            0 => 15 * n,    // runs out early
            1 => 60 * n,    // about its share
            _ => 1_000 * n, // never runs out
        };
        initial.balances.insert(customer(i), cents);
    }
    for i in 0..PRODUCTS {
        let units = if i % 2 == 0 { n * 3 / 10 } else { n * 2 };
        initial.stock.insert(product(i), units.max(1));
    }
    if let Some(plan) = contention {
        plan.seed_into(&mut initial);
    }
    initial
}

/// Retries a seeding call until it succeeds (the participants do not fault
/// Deposit/AddStock, but they may be starting up).
async fn retry<T, F, Fut>(what: &str, mut call: F) -> Result<T, String>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<T, tonic::Status>>,
{
    let mut last = None;
    for _ in 0..50 {
        match call().await {
            Ok(v) => return Ok(v),
            Err(s) => last = Some(s),
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    Err(format!("{what}: {:?}", last))
}

/// Deposits and adds stock (idempotent request ids), then reads every
/// account and product back to confirm the starting point.
pub async fn seed(
    initial: &Initial,
    payments: Channel,
    stock: Channel,
    tag: &str,
) -> Result<(), String> {
    let p = PaymentServiceClient::new(payments);
    let s = InventoryServiceClient::new(stock);
    for (c, cents) in &initial.balances {
        let deposit = payment::DepositRequest {
            request_id: format!("chaos-{tag}-deposit-{c}"),
            customer_id: c.clone(),
            amount_cents: *cents,
        };
        let account = payment::GetAccountRequest {
            customer_id: c.clone(),
            operation_limit: 1,
        };
        retry("Deposit", || {
            let (mut p, req) = (p.clone(), deposit.clone());
            async move { p.deposit(req).await }
        })
        .await?;
        let held = retry("GetAccount", || {
            let (mut p, req) = (p.clone(), account.clone());
            async move { Ok(p.get_account(req).await?.into_inner().balance_cents) }
        })
        .await?;
        confirm(c, *cents, held, "cents")?;
    }
    for (sku, units) in &initial.stock {
        let add = inventory::AddStockRequest {
            request_id: format!("chaos-{tag}-stock-{sku}"),
            product_id: sku.clone(),
            quantity: *units,
        };
        let product = inventory::GetProductRequest {
            product_id: sku.clone(),
            operation_limit: 1,
        };
        retry("AddStock", || {
            let (mut s, req) = (s.clone(), add.clone());
            async move { s.add_stock(req).await }
        })
        .await?;
        let held = retry("GetProduct", || {
            let (mut s, req) = (s.clone(), product.clone());
            async move { Ok(s.get_product(req).await?.into_inner().available) }
        })
        .await?;
        confirm(sku, *units, held, "units")?;
    }
    Ok(())
}

/// A seeded amount read back must be the one seeded.
fn confirm(what: &str, seeded: i64, held: i64, unit: &str) -> Result<(), String> {
    if held == seeded {
        Ok(())
    } else {
        Err(format!(
            "seeded {what} with {seeded} {unit} but it holds {held}"
        ))
    }
}

/// One order the tool created.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct OrderSpec {
    pub request_id: String,
    pub customer_id: String,
    /// (product, quantity, unit price).
    pub items: Vec<(String, i64, i64)>,
    pub total_cents: i64,
}

impl OrderSpec {
    /// Order `i` of a run: a random customer, 1–3 lines of 1–5 units at
    /// 1–500 cents. Deterministic for (seed, i).
    pub fn generate(seed: u64, i: usize) -> OrderSpec {
        let mut rng = StdRng::seed_from_u64(seed ^ (i as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15));
        let customer_id = customer(rng.random_range(0..CUSTOMERS));
        let lines = rng.random_range(1..=3);
        let mut items = Vec::with_capacity(lines);
        for _ in 0..lines {
            items.push((
                product(rng.random_range(0..PRODUCTS)),
                rng.random_range(1..=5i64),
                rng.random_range(1..=500i64),
            ));
        }
        let total_cents = items.iter().map(|(_, q, p)| q * p).sum();
        OrderSpec {
            request_id: format!("chaos-{seed}-{i}"),
            customer_id,
            items,
            total_cents,
        }
    }

    pub fn request(&self) -> saga::CreateOrderRequest {
        saga::CreateOrderRequest {
            request_id: self.request_id.clone(),
            customer_id: self.customer_id.clone(),
            items: self
                .items
                .iter()
                .map(|(p, q, c)| saga::OrderItem {
                    product_id: p.clone(),
                    quantity: *q,
                    unit_price_cents: *c,
                })
                .collect(),
            wait: false,
        }
    }
}

/// An order an orchestrator accepted.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Accepted {
    pub spec: OrderSpec,
    /// The saga CreateOrder answered with.
    pub saga_id: String,
    /// The instance (0-based) whose CreateOrder first accepted it.
    pub instance: usize,
}

/// Accepted orders by index (the contention phase's come after the
/// drive's).
pub type Orders = BTreeMap<usize, Accepted>;

/// Shared state of the drive.
#[derive(Default)]
pub struct Drive {
    /// Next order index to create.
    next: AtomicUsize,
    /// Orders accepted so far (first time only).
    pub accepted: AtomicUsize,
    /// CreateOrder attempts that failed and were retried.
    pub create_retries: AtomicU64,
    pub duplicates_sent: AtomicU64,
    /// Duplicates sent to another instance than the one that accepted the
    /// order.
    pub duplicates_elsewhere: AtomicU64,
    /// CreateOrder attempts moved to the next instance after a failure.
    pub failovers: AtomicU64,
    /// Accepted orders.
    pub orders: Mutex<Orders>,
    /// Errors seen per status code (while retrying).
    pub errors_by_code: Mutex<HashMap<String, u64>>,
    /// Problems: orders never accepted, duplicates that did not match.
    pub problems: Mutex<Vec<String>>,
    pub duplicate_mismatches: Mutex<Vec<String>>,
    pub workers_done: AtomicUsize,
    /// Accepted sagas a worker saw terminal (it waits for each before
    /// creating the next, so `concurrency` sagas are in flight).
    pub finished: AtomicUsize,
    /// Sagas a worker stopped waiting for (the settle phase checks them).
    pub unfinished_waits: AtomicUsize,
    /// GetSaga polls that failed (orchestrator down) and were retried.
    pub poll_errors: AtomicU64,
}

/// Codes after which a retry cannot help (the request itself is refused).
fn is_final(code: Code) -> bool {
    matches!(
        code,
        Code::InvalidArgument
            | Code::AlreadyExists
            | Code::FailedPrecondition
            | Code::NotFound
            | Code::PermissionDenied
            | Code::Unimplemented
            | Code::OutOfRange
            | Code::Unauthenticated
    )
}

impl Drive {
    /// Sends `spec` to instance `first`, moving on to the next instance
    /// after each failure, until one answers; None if it was refused for
    /// good or `deadline` passed (recorded as a problem). Returns the reply
    /// and the instance that gave it.
    pub async fn create(
        &self,
        clients: &mut [OrderServiceClient<Channel>],
        first: usize,
        spec: &OrderSpec,
        deadline: Instant,
    ) -> Option<(saga::CreateOrderResponse, usize)> {
        let mut delay = Duration::from_millis(25);
        let mut at = first % clients.len();
        loop {
            match clients[at].create_order(spec.request()).await {
                Ok(r) => return Some((r.into_inner(), at)),
                Err(status) => {
                    *self
                        .errors_by_code
                        .lock()
                        .expect("lock")
                        .entry(format!("{:?}", status.code()))
                        .or_default() += 1;
                    if is_final(status.code()) || Instant::now() >= deadline {
                        self.problems.lock().expect("lock").push(format!(
                            "CreateOrder {} not accepted: {:?}: {}",
                            spec.request_id,
                            status.code(),
                            status.message()
                        ));
                        return None;
                    }
                    self.create_retries.fetch_add(1, Ordering::Relaxed);
                    if clients.len() > 1 {
                        // The same request id to another instance: a
                        // cross-instance duplicate if the first one stored it.
                        at = (at + 1) % clients.len();
                        self.failovers.fetch_add(1, Ordering::Relaxed);
                    }
                    tokio::time::sleep(delay).await;
                    delay = (delay * 2).min(Duration::from_millis(500));
                }
            }
        }
    }

    /// Polls GetSaga (from instance `at`, moving on after a failure) until
    /// the saga is terminal, or `limit` passes.
    pub async fn await_terminal(
        &self,
        clients: &mut [SagaServiceClient<Channel>],
        mut at: usize,
        saga_id: &str,
        limit: Instant,
    ) {
        let mut delay = Duration::from_millis(10);
        loop {
            tokio::time::sleep(delay).await;
            delay = (delay * 3 / 2).min(Duration::from_millis(200));
            at %= clients.len();
            match clients[at]
                .get_saga(saga::GetSagaRequest {
                    lookup: Some(saga::get_saga_request::Lookup::SagaId(saga_id.to_owned())),
                })
                .await
            {
                Ok(r) => {
                    let status = r.into_inner().status;
                    if [
                        saga::SagaStatus::Completed,
                        saga::SagaStatus::Cancelled,
                        saga::SagaStatus::Failed,
                    ]
                    .iter()
                    .any(|s| *s as i32 == status)
                    {
                        self.finished.fetch_add(1, Ordering::Relaxed);
                        return;
                    }
                }
                Err(_) => {
                    self.poll_errors.fetch_add(1, Ordering::Relaxed);
                    at += 1;
                }
            }
            if Instant::now() >= limit {
                self.unfinished_waits.fetch_add(1, Ordering::Relaxed);
                return;
            }
        }
    }

    /// One worker: takes the next order index until `total` are issued,
    /// creates it on instance `index % instances` (the next one when that
    /// one fails) and waits until it is terminal (closed loop).
    pub async fn worker(
        &self,
        worker: usize,
        seed: u64,
        total: usize,
        duplicate_rate: f64,
        channels: Vec<Channel>,
        deadline: Instant,
    ) {
        let mut clients: Vec<_> = channels
            .iter()
            .cloned()
            .map(OrderServiceClient::new)
            .collect();
        let mut sagas: Vec<_> = channels.into_iter().map(SagaServiceClient::new).collect();
        let mut rng = StdRng::seed_from_u64(seed.wrapping_add(7_919 * worker as u64 + 1));
        loop {
            let i = self.next.fetch_add(1, Ordering::Relaxed);
            if i >= total {
                break;
            }
            let spec = OrderSpec::generate(seed, i);
            if let Some((reply, instance)) = self.create(&mut clients, i, &spec, deadline).await {
                let saga_id = reply.saga_id.clone();
                self.orders.lock().expect("lock").insert(
                    i,
                    Accepted {
                        spec,
                        saga_id: saga_id.clone(),
                        instance,
                    },
                );
                self.accepted.fetch_add(1, Ordering::Relaxed);
                let limit = (Instant::now() + SAGA_WAIT).min(deadline);
                self.await_terminal(&mut sagas, instance, &saga_id, limit)
                    .await;
            }
            if rng.random_bool(duplicate_rate) {
                self.duplicate(&mut clients, &mut rng, deadline).await;
            }
        }
        self.workers_done.fetch_add(1, Ordering::Relaxed);
    }

    /// Sends an already-accepted order again, to another instance than the
    /// one that accepted it (when there are several): it must return the
    /// same saga and `created: false`.
    async fn duplicate(
        &self,
        clients: &mut [OrderServiceClient<Channel>],
        rng: &mut StdRng,
        deadline: Instant,
    ) {
        let picked = {
            let orders = self.orders.lock().expect("lock");
            if orders.is_empty() {
                return;
            }
            let n = rng.random_range(0..orders.len());
            orders.values().nth(n).cloned()
        };
        let Some(first) = picked else {
            return;
        };
        self.duplicates_sent.fetch_add(1, Ordering::Relaxed);
        let elsewhere = (first.instance + 1) % clients.len();
        if let Some((reply, at)) = self.create(clients, elsewhere, &first.spec, deadline).await {
            if at != first.instance {
                self.duplicates_elsewhere.fetch_add(1, Ordering::Relaxed);
            }
            if reply.saga_id != first.saga_id || reply.created {
                self.duplicate_mismatches
                    .lock()
                    .expect("lock")
                    .push(format!(
                        "{}: instance {} created saga {}, the duplicate on instance {} got saga {} (created={})",
                        first.spec.request_id,
                        first.instance + 1,
                        first.saga_id,
                        at + 1,
                        reply.saga_id,
                        reply.created
                    ));
            }
        }
    }
}
