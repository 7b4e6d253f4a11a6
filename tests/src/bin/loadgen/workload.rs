//! The traffic: seeding, the saga phase (CreateOrder with `wait`), the raw
//! floor (Charge then Deduct straight to the participants), and the checks
//! run afterwards (no saga of this run left non-terminal; balances and stock
//! add up).

use futures::StreamExt;
use hdrhistogram::Histogram;
use saga_proto::inventory::v1 as inventory;
use saga_proto::inventory::v1::inventory_service_client::InventoryServiceClient;
use saga_proto::payment::v1 as payment;
use saga_proto::payment::v1::payment_service_client::PaymentServiceClient;
use saga_proto::saga::v1 as saga;
use saga_proto::saga::v1::order_service_client::OrderServiceClient;
use saga_proto::saga::v1::saga_service_client::SagaServiceClient;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};
use tokio::task::JoinSet;
use tonic::metadata::AsciiMetadataValue;
use tonic::transport::{Channel, Endpoint};

/// Price of one unit of every product, in cents.
pub const PRICE_CENTS: i64 = 100;
/// Opening balance of every "rich" customer: never the limit.
pub const RICH_BALANCE: i64 = 1_000_000_000_000_000;
/// Opening stock of every product: never the limit.
pub const STOCK: i64 = 1_000_000_000_000;
/// Balance of the "poor" customers whose charge is refused.
pub const POOR_BALANCE: i64 = 1;
/// Stock of the "short" product whose deduction is refused (orders ask 2).
pub const SHORT_STOCK: i64 = 1;
/// How many poor customers.
const POOR_CUSTOMERS: usize = 8;
/// Error messages kept per phase.
const SAMPLES: usize = 5;
/// Concurrent audit reads.
const ADMIN_CONCURRENCY: usize = 32;

/// Latency histogram: 1 µs to 10 minutes, 3 significant digits.
pub fn histogram() -> Histogram<u64> {
    Histogram::new_with_bounds(1, 600_000_000, 3).expect("valid histogram bounds")
}

/// What an order is expected to end as.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Class {
    /// Rich customer, stocked products: COMPLETED.
    Complete,
    /// Poor customer: the charge is refused, CANCELLED with nothing to undo.
    RefuseCharge,
    /// The short product: deduct refused, the charge is refunded, CANCELLED.
    Compensate,
}

/// The mix, as fractions of all orders.
#[derive(Clone, Copy, Debug)]
pub struct Mix {
    pub cancel: f64,
    pub compensate: f64,
}

impl Mix {
    /// Class of order `k`: a low-discrepancy (golden ratio) sequence, so any
    /// stretch of orders holds very nearly the requested fractions.
    pub fn class(&self, k: u64) -> Class {
        let u = ((k as f64 + 1.0) * 0.618_033_988_749_894_9).fract();
        if u < self.cancel {
            Class::RefuseCharge
        } else if u < self.cancel + self.compensate {
            Class::Compensate
        } else {
            Class::Complete
        }
    }
}

/// Names of everything this run creates; all start with the run id, so a
/// run against a shared stack never meets another run's data.
pub struct Catalog {
    pub run: String,
    pub customers: usize,
    pub products: usize,
    pub items: usize,
}

impl Catalog {
    fn customer(&self, i: usize) -> String {
        format!("{}-c{i}", self.run)
    }
    fn poor(&self, i: usize) -> String {
        format!("{}-p{i}", self.run)
    }
    fn product(&self, i: usize) -> String {
        format!("{}-s{i}", self.run)
    }
    fn short(&self) -> String {
        format!("{}-short", self.run)
    }

    /// Total of a normal order (and of a floor pair's charge).
    pub fn order_total(&self) -> i64 {
        PRICE_CENTS * self.items as i64
    }

    /// Distinct stocked products of order `k`.
    fn lines(&self, k: u64) -> Vec<(String, i64)> {
        let base = (k % self.products as u64) as usize;
        (0..self.items)
            .map(|j| (self.product((base + j) % self.products), 1))
            .collect()
    }

    /// Customer and lines of saga `k` of the given class.
    fn order(&self, k: u64, class: Class) -> (String, Vec<saga::OrderItem>) {
        let customer = match class {
            Class::RefuseCharge => self.poor((k % POOR_CUSTOMERS as u64) as usize),
            _ => self.customer((k % self.customers as u64) as usize),
        };
        let mut lines = self.lines(k);
        if class == Class::Compensate
            && let Some(last) = lines.last_mut()
        {
            *last = (self.short(), SHORT_STOCK + 1);
        }
        let items = lines
            .into_iter()
            .map(|(product_id, quantity)| saga::OrderItem {
                product_id,
                quantity,
                unit_price_cents: PRICE_CENTS,
            })
            .collect();
        (customer, items)
    }
}

/// Channel pools (HTTP/2 connections) to each service.
#[derive(Clone)]
pub struct Clients {
    pub orders: Vec<OrderServiceClient<Channel>>,
    pub sagas: SagaServiceClient<Channel>,
    pub payments: Vec<PaymentServiceClient<Channel>>,
    pub inventories: Vec<InventoryServiceClient<Channel>>,
    /// `authorization: Bearer <token>` for the admin RPCs (seeding).
    pub admin: Option<AsciiMetadataValue>,
}

async fn channels(url: &str, n: usize) -> Result<Vec<Channel>, String> {
    let endpoint = Endpoint::from_shared(url.to_owned())
        .map_err(|e| format!("{url}: {e}"))?
        .tcp_nodelay(true)
        .connect_timeout(Duration::from_secs(5));
    let mut out = Vec::with_capacity(n);
    for _ in 0..n {
        out.push(
            endpoint
                .connect()
                .await
                .map_err(|e| format!("connecting to {url}: {e}"))?,
        );
    }
    Ok(out)
}

impl Clients {
    pub async fn connect(
        orchestrator: &str,
        payment: &str,
        inventory: &str,
        connections: usize,
        admin_token: Option<&str>,
    ) -> Result<Clients, String> {
        let admin = admin_token
            .map(|t| {
                let mut v = AsciiMetadataValue::try_from(format!("Bearer {t}"))
                    .map_err(|_| "--admin-token: not a valid header value".to_owned())?;
                v.set_sensitive(true);
                Ok::<_, String>(v)
            })
            .transpose()?;
        let orders = channels(orchestrator, connections).await?;
        let sagas = SagaServiceClient::new(orders[0].clone());
        Ok(Clients {
            orders: orders.into_iter().map(OrderServiceClient::new).collect(),
            sagas,
            payments: channels(payment, connections)
                .await?
                .into_iter()
                .map(PaymentServiceClient::new)
                .collect(),
            inventories: channels(inventory, connections)
                .await?
                .into_iter()
                .map(InventoryServiceClient::new)
                .collect(),
            admin,
        })
    }
}

fn status_text(s: &tonic::Status) -> String {
    format!("{:?}: {}", s.code(), s.message())
}

/// Adds the admin bearer token, if any, to a request.
fn with_admin<T>(
    token: &Option<AsciiMetadataValue>,
    mut req: tonic::Request<T>,
) -> tonic::Request<T> {
    if let Some(token) = token {
        req.metadata_mut().insert("authorization", token.clone());
    }
    req
}

/// Deposits and stock for the whole run.
pub async fn seed(clients: &Clients, cat: &Catalog, concurrency: usize) -> Result<(), String> {
    enum Job {
        Deposit(String, i64),
        Stock(String, i64),
    }
    let mut jobs: Vec<Job> = Vec::new();
    jobs.extend((0..cat.customers).map(|i| Job::Deposit(cat.customer(i), RICH_BALANCE)));
    jobs.extend((0..POOR_CUSTOMERS).map(|i| Job::Deposit(cat.poor(i), POOR_BALANCE)));
    jobs.extend((0..cat.products).map(|i| Job::Stock(cat.product(i), STOCK)));
    jobs.push(Job::Stock(cat.short(), SHORT_STOCK));
    let run = &cat.run;
    let results: Vec<Result<(), String>> = futures::stream::iter(jobs.into_iter().enumerate())
        .map(|(n, job)| {
            let mut pay = clients.payments[n % clients.payments.len()].clone();
            let mut inv = clients.inventories[n % clients.inventories.len()].clone();
            async move {
                let admin = clients.admin.clone();
                match job {
                    Job::Deposit(customer_id, amount_cents) => pay
                        .deposit(with_admin(
                            &admin,
                            tonic::Request::new(payment::DepositRequest {
                                request_id: format!("{run}-seed-{customer_id}"),
                                customer_id,
                                amount_cents,
                            }),
                        ))
                        .await
                        .map(|_| ())
                        .map_err(|s| format!("Deposit: {}", status_text(&s))),
                    Job::Stock(product_id, quantity) => inv
                        .add_stock(with_admin(
                            &admin,
                            tonic::Request::new(inventory::AddStockRequest {
                                request_id: format!("{run}-seed-{product_id}"),
                                product_id,
                                quantity,
                            }),
                        ))
                        .await
                        .map(|_| ())
                        .map_err(|s| format!("AddStock: {}", status_text(&s))),
                }
            }
        })
        .buffer_unordered(concurrency.max(1))
        .collect()
        .await;
    results.into_iter().collect()
}

/// When a phase stops issuing calls.
#[derive(Clone, Copy, Debug)]
pub enum Stop {
    Count(u64),
    Until(Instant),
}

/// Everything counted in one phase.
#[derive(Clone)]
pub struct Tally {
    /// Latency of successful calls (µs).
    pub hist: Histogram<u64>,
    /// Calls that ended as expected-shaped replies (terminal sagas / pairs).
    pub ok: u64,
    pub completed: u64,
    pub cancelled: u64,
    /// CANCELLED with the payment step REFUSED (nothing to undo).
    pub refused_charge: u64,
    /// CANCELLED with the payment step COMPENSATED (refunded).
    pub compensated: u64,
    pub expected_completed: u64,
    pub expected_cancelled: u64,
    /// Sagas that ended FAILED.
    pub failed: u64,
    /// Replies whose status was not terminal.
    pub stuck: u64,
    /// RPC errors (the outcome is unknown).
    pub errors: u64,
    /// Terminal, but not the outcome its class should have had.
    pub mismatches: u64,
    /// `created: false` for a fresh request id.
    pub duplicates: u64,
    pub samples: Vec<String>,
    pub wall: Duration,
}

impl Tally {
    pub fn new() -> Tally {
        Tally {
            hist: histogram(),
            ok: 0,
            completed: 0,
            cancelled: 0,
            refused_charge: 0,
            compensated: 0,
            expected_completed: 0,
            expected_cancelled: 0,
            failed: 0,
            stuck: 0,
            errors: 0,
            mismatches: 0,
            duplicates: 0,
            samples: Vec::new(),
            wall: Duration::ZERO,
        }
    }

    fn note(&mut self, what: String) {
        if self.samples.len() < SAMPLES {
            self.samples.push(what);
        }
    }

    fn merge(&mut self, o: Tally) {
        let _ = self.hist.add(&o.hist);
        self.ok += o.ok;
        self.completed += o.completed;
        self.cancelled += o.cancelled;
        self.refused_charge += o.refused_charge;
        self.compensated += o.compensated;
        self.expected_completed += o.expected_completed;
        self.expected_cancelled += o.expected_cancelled;
        self.failed += o.failed;
        self.stuck += o.stuck;
        self.errors += o.errors;
        self.mismatches += o.mismatches;
        self.duplicates += o.duplicates;
        for s in o.samples {
            self.note(s);
        }
    }

    /// Everything that makes a run fail.
    pub fn problems(&self) -> u64 {
        self.failed + self.stuck + self.errors + self.mismatches + self.duplicates
    }

    /// Successful calls per second of wall time.
    pub fn rate(&self) -> f64 {
        let secs = self.wall.as_secs_f64();
        if secs > 0.0 {
            self.ok as f64 / secs
        } else {
            0.0
        }
    }

    fn record(&mut self, elapsed: Duration) {
        let us = u64::try_from(elapsed.as_micros())
            .unwrap_or(u64::MAX)
            .max(1);
        self.hist.saturating_record(us);
    }

    fn saga_reply(
        &mut self,
        id: &str,
        class: Class,
        r: &saga::CreateOrderResponse,
        elapsed: Duration,
    ) {
        if !r.created {
            self.duplicates += 1;
            self.note(format!("{id}: created=false for a fresh request id"));
        }
        let status = saga::SagaStatus::try_from(r.status).unwrap_or(saga::SagaStatus::Unspecified);
        let payment_step = r
            .saga
            .as_ref()
            .and_then(|s| s.steps.iter().find(|step| step.name == "payment"))
            .map(|step| saga::StepStatus::try_from(step.status).unwrap_or_default())
            .unwrap_or_default();
        match status {
            saga::SagaStatus::Completed | saga::SagaStatus::Cancelled => {
                self.ok += 1;
                self.record(elapsed);
                match class {
                    Class::Complete => self.expected_completed += 1,
                    _ => self.expected_cancelled += 1,
                }
                if status == saga::SagaStatus::Completed {
                    self.completed += 1;
                } else {
                    self.cancelled += 1;
                    match payment_step {
                        saga::StepStatus::Refused => self.refused_charge += 1,
                        saga::StepStatus::Compensated => self.compensated += 1,
                        _ => {}
                    }
                }
                let expected = match class {
                    Class::Complete => status == saga::SagaStatus::Completed,
                    Class::RefuseCharge => {
                        status == saga::SagaStatus::Cancelled
                            && payment_step == saga::StepStatus::Refused
                    }
                    Class::Compensate => {
                        status == saga::SagaStatus::Cancelled
                            && payment_step == saga::StepStatus::Compensated
                    }
                };
                if !expected {
                    self.mismatches += 1;
                    let reason = r.saga.as_ref().map(|s| s.reason.as_str()).unwrap_or("");
                    self.note(format!(
                        "{id}: expected {class:?}, got {} (payment step {}) {reason}",
                        status.as_str_name(),
                        payment_step.as_str_name()
                    ));
                }
            }
            saga::SagaStatus::Failed => {
                self.failed += 1;
                let reason = r.saga.as_ref().map(|s| s.reason.as_str()).unwrap_or("");
                self.note(format!("{id}: FAILED: {reason}"));
            }
            other => {
                self.stuck += 1;
                self.note(format!(
                    "{id}: reply after {:.1} s is {} (not terminal)",
                    elapsed.as_secs_f64(),
                    other.as_str_name()
                ));
            }
        }
    }
}

/// What a phase sends.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// CreateOrder with `wait` to the orchestrator.
    Saga,
    /// Charge then Deduct straight to the participants.
    Floor,
}

/// One phase of traffic.
pub struct Phase {
    pub kind: Kind,
    /// Short tag in request ids (unique per phase of a run).
    pub tag: &'static str,
    pub concurrency: usize,
    pub stop: Stop,
    pub mix: Mix,
    pub call_timeout: Duration,
}

/// Runs one phase: `concurrency` workers, each issuing one call at a time
/// until the phase's stop condition.
pub async fn run_phase(clients: &Clients, cat: &Arc<Catalog>, phase: &Phase) -> Tally {
    let next = Arc::new(AtomicU64::new(0));
    let started = Instant::now();
    let mut workers = JoinSet::new();
    for w in 0..phase.concurrency {
        let clients = clients.clone();
        let cat = Arc::clone(cat);
        let next = Arc::clone(&next);
        let (kind, tag, stop, mix, call_timeout) = (
            phase.kind,
            phase.tag,
            phase.stop,
            phase.mix,
            phase.call_timeout,
        );
        workers.spawn(async move {
            let mut tally = Tally::new();
            let mut orders = clients.orders[w % clients.orders.len()].clone();
            let mut pay = clients.payments[w % clients.payments.len()].clone();
            let mut inv = clients.inventories[w % clients.inventories.len()].clone();
            // A hard bound on top of the call deadline, should a call hang.
            let guard = call_timeout + Duration::from_secs(5);
            loop {
                let k = match stop {
                    Stop::Count(n) => {
                        let k = next.fetch_add(1, Ordering::Relaxed);
                        if k >= n {
                            break;
                        }
                        k
                    }
                    Stop::Until(t) => {
                        if Instant::now() >= t {
                            break;
                        }
                        next.fetch_add(1, Ordering::Relaxed)
                    }
                };
                let id = format!("{}-{tag}{k}", cat.run);
                match kind {
                    Kind::Saga => {
                        let class = mix.class(k);
                        let (customer_id, items) = cat.order(k, class);
                        let mut req = tonic::Request::new(saga::CreateOrderRequest {
                            request_id: id.clone(),
                            customer_id,
                            items,
                            wait: true,
                        });
                        req.set_timeout(call_timeout);
                        let t0 = Instant::now();
                        let reply = tokio::time::timeout(guard, orders.create_order(req)).await;
                        let elapsed = t0.elapsed();
                        match reply {
                            Ok(Ok(r)) => tally.saga_reply(&id, class, r.get_ref(), elapsed),
                            Ok(Err(s)) => {
                                tally.errors += 1;
                                tally.note(format!("{id}: CreateOrder {}", status_text(&s)));
                            }
                            Err(_) => {
                                tally.errors += 1;
                                tally.note(format!("{id}: CreateOrder hung past {guard:?}"));
                            }
                        }
                    }
                    Kind::Floor => {
                        let customer_id = cat.customer((k % cat.customers as u64) as usize);
                        let lines = cat
                            .lines(k)
                            .into_iter()
                            .map(|(product_id, quantity)| inventory::Line {
                                product_id,
                                quantity,
                            })
                            .collect();
                        let t0 = Instant::now();
                        let pair = async {
                            let mut charge = tonic::Request::new(payment::ChargeRequest {
                                request_id: format!("{id}:payment"),
                                customer_id,
                                amount_cents: cat.order_total(),
                            });
                            charge.set_timeout(call_timeout);
                            pay.charge(charge)
                                .await
                                .map_err(|s| format!("{id}: Charge {}", status_text(&s)))?;
                            let mut deduct = tonic::Request::new(inventory::DeductRequest {
                                request_id: format!("{id}:inventory"),
                                lines,
                            });
                            deduct.set_timeout(call_timeout);
                            inv.deduct(deduct)
                                .await
                                .map_err(|s| format!("{id}: Deduct {}", status_text(&s)))?;
                            Ok::<(), String>(())
                        };
                        match tokio::time::timeout(guard * 2, pair).await {
                            Ok(Ok(())) => {
                                tally.ok += 1;
                                tally.record(t0.elapsed());
                            }
                            Ok(Err(e)) => {
                                tally.errors += 1;
                                tally.note(e);
                            }
                            Err(_) => {
                                tally.errors += 1;
                                tally.note(format!("{id}: Charge+Deduct hung"));
                            }
                        }
                    }
                }
            }
            tally
        });
    }
    let mut total = Tally::new();
    while let Some(done) = workers.join_next().await {
        match done {
            Ok(t) => total.merge(t),
            Err(e) => {
                total.errors += 1;
                total.note(format!("worker died: {e}"));
            }
        }
    }
    total.wall = started.elapsed();
    total
}

/// Sagas of this run that are not terminal (RUNNING, COMPENSATING) or ended
/// FAILED, according to the orchestrator's store. Bounded paging.
pub async fn unfinished_sagas(clients: &Clients, run: &str) -> Result<(u64, Vec<String>), String> {
    let mut sagas = clients.sagas.clone();
    let mut count = 0;
    let mut sample = Vec::new();
    for status in [
        saga::SagaStatus::Running,
        saga::SagaStatus::Compensating,
        saga::SagaStatus::Failed,
    ] {
        let mut token = String::new();
        for _ in 0..100 {
            let page = sagas
                .list_sagas(saga::ListSagasRequest {
                    status: status as i32,
                    page_size: 500,
                    page_token: token.clone(),
                })
                .await
                .map_err(|s| format!("ListSagas: {}", status_text(&s)))?
                .into_inner();
            for s in page.sagas.iter().filter(|s| s.request_id.starts_with(run)) {
                count += 1;
                if sample.len() < SAMPLES {
                    sample.push(format!("{} {}", s.request_id, status.as_str_name()));
                }
            }
            if page.next_page_token.is_empty() {
                break;
            }
            token = page.next_page_token;
        }
    }
    Ok((count, sample))
}

/// Result of the money/stock audit.
pub struct Audit {
    pub ok: bool,
    pub detail: String,
}

/// Checks that balances and stock moved by exactly what the successful
/// sagas and floor pairs account for: every COMPLETED saga and floor pair
/// took one order total and one unit per line; refused and compensated
/// orders left nothing behind.
pub async fn audit(clients: &Clients, cat: &Catalog, applied: u64) -> Result<Audit, String> {
    let pay = clients.payments[0].clone();
    let inv = clients.inventories[0].clone();
    let balances: Vec<Result<i64, String>> = futures::stream::iter(
        (0..cat.customers)
            .map(|i| cat.customer(i))
            .chain((0..POOR_CUSTOMERS).map(|i| cat.poor(i))),
    )
    .map(|customer_id| {
        let mut pay = pay.clone();
        async move {
            pay.get_account(payment::GetAccountRequest {
                customer_id,
                operation_limit: 1,
            })
            .await
            .map(|r| r.into_inner().balance_cents)
            .map_err(|s| format!("GetAccount: {}", status_text(&s)))
        }
    })
    .buffered(ADMIN_CONCURRENCY)
    .collect()
    .await;
    let balances: Vec<i64> = balances.into_iter().collect::<Result<_, _>>()?;
    let stock: Vec<Result<i64, String>> = futures::stream::iter(
        (0..cat.products)
            .map(|i| cat.product(i))
            .chain(std::iter::once(cat.short())),
    )
    .map(|product_id| {
        let mut inv = inv.clone();
        async move {
            inv.get_product(inventory::GetProductRequest {
                product_id,
                operation_limit: 1,
            })
            .await
            .map(|r| r.into_inner().available)
            .map_err(|s| format!("GetProduct: {}", status_text(&s)))
        }
    })
    .buffered(ADMIN_CONCURRENCY)
    .collect()
    .await;
    let stock: Vec<i64> = stock.into_iter().collect::<Result<_, _>>()?;

    let charged: i128 = balances[..cat.customers]
        .iter()
        .map(|b| i128::from(RICH_BALANCE) - i128::from(*b))
        .sum();
    let want_charged = i128::from(applied) * i128::from(cat.order_total());
    let deducted: i128 = stock[..cat.products]
        .iter()
        .map(|a| i128::from(STOCK) - i128::from(*a))
        .sum();
    let want_deducted = i128::from(applied) * cat.items as i128;
    let poor_ok = balances[cat.customers..].iter().all(|b| *b == POOR_BALANCE);
    let short = stock[cat.products];
    let ok =
        charged == want_charged && deducted == want_deducted && poor_ok && short == SHORT_STOCK;
    let detail = format!(
        "charged {charged} cents (expected {want_charged}), deducted {deducted} units (expected {want_deducted}), \
         refused customers {}, short product {short} (expected {SHORT_STOCK})",
        if poor_ok { "untouched" } else { "CHANGED" }
    );
    Ok(Audit { ok, detail })
}
