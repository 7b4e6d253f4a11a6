//! The traffic: the clients, seeding, and the phases — the saga phase
//! (CreateOrder with `wait`) and the raw floor (Charge then Deduct straight
//! to the participants) — each run by concurrent closed-loop workers.

use crate::catalog::{
    Catalog, Mix, POOR_BALANCE, POOR_CUSTOMERS, RICH_BALANCE, SHORT_STOCK, STOCK,
};
use crate::tally::Tally;
use futures::StreamExt;
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

/// `n` connections to `url`.
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
    /// `connections` connections to each service; `admin_token` goes with
    /// the seeding calls.
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

/// A status as `Code: message`.
pub fn status_text(s: &tonic::Status) -> String {
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
    pub tag: String,
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
        let worker = Worker {
            orders: clients.orders[w % clients.orders.len()].clone(),
            pay: clients.payments[w % clients.payments.len()].clone(),
            inv: clients.inventories[w % clients.inventories.len()].clone(),
            cat: Arc::clone(cat),
            kind: phase.kind,
            tag: phase.tag.clone(),
            mix: phase.mix,
            call_timeout: phase.call_timeout,
        };
        let (next, stop) = (Arc::clone(&next), phase.stop);
        workers.spawn(async move { worker.run(&next, stop).await });
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

/// One closed-loop worker of a phase, with its own clients.
struct Worker {
    orders: OrderServiceClient<Channel>,
    pay: PaymentServiceClient<Channel>,
    inv: InventoryServiceClient<Channel>,
    cat: Arc<Catalog>,
    kind: Kind,
    tag: String,
    mix: Mix,
    call_timeout: Duration,
}

impl Worker {
    /// Takes the next call number from `next` until `stop`; one call at a
    /// time.
    async fn run(mut self, next: &AtomicU64, stop: Stop) -> Tally {
        let mut tally = Tally::new();
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
            let id = format!("{}-{}{k}", self.cat.run, self.tag);
            match self.kind {
                Kind::Saga => self.saga(k, &id, &mut tally).await,
                Kind::Floor => self.floor(k, &id, &mut tally).await,
            }
        }
        tally
    }

    /// A hard bound on top of the call deadline, should a call hang.
    fn guard(&self) -> Duration {
        self.call_timeout + Duration::from_secs(5)
    }

    /// CreateOrder `k` with `wait`, timed until the saga is terminal.
    async fn saga(&mut self, k: u64, id: &str, tally: &mut Tally) {
        let class = self.mix.class(k);
        let (customer_id, items) = self.cat.order(k, class);
        let mut req = tonic::Request::new(saga::CreateOrderRequest {
            request_id: id.to_owned(),
            customer_id,
            items,
            wait: true,
        });
        req.set_timeout(self.call_timeout);
        let guard = self.guard();
        let t0 = Instant::now();
        let reply = tokio::time::timeout(guard, self.orders.create_order(req)).await;
        let elapsed = t0.elapsed();
        match reply {
            Ok(Ok(r)) => tally.saga_reply(id, class, r.get_ref(), elapsed),
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

    /// Charge then Deduct of pair `k`, timed together.
    async fn floor(&mut self, k: u64, id: &str, tally: &mut Tally) {
        let customer_id = self.cat.customer((k % self.cat.customers as u64) as usize);
        let lines = self
            .cat
            .lines(k)
            .into_iter()
            .map(|(product_id, quantity)| inventory::Line {
                product_id,
                quantity,
            })
            .collect();
        let guard = self.guard();
        let t0 = Instant::now();
        match tokio::time::timeout(guard * 2, self.pair(id, customer_id, lines)).await {
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

    async fn pair(
        &mut self,
        id: &str,
        customer_id: String,
        lines: Vec<inventory::Line>,
    ) -> Result<(), String> {
        let mut charge = tonic::Request::new(payment::ChargeRequest {
            request_id: format!("{id}:payment"),
            customer_id,
            amount_cents: self.cat.order_total(),
        });
        charge.set_timeout(self.call_timeout);
        self.pay
            .charge(charge)
            .await
            .map_err(|s| format!("{id}: Charge {}", status_text(&s)))?;
        let mut deduct = tonic::Request::new(inventory::DeductRequest {
            request_id: format!("{id}:inventory"),
            lines,
        });
        deduct.set_timeout(self.call_timeout);
        self.inv
            .deduct(deduct)
            .await
            .map_err(|s| format!("{id}: Deduct {}", status_text(&s)))?;
        Ok(())
    }
}
