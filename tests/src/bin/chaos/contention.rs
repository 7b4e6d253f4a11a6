//! The contention phase: many orders sent at once, spread over every
//! orchestrator instance, race for the last units of one product and for
//! the last cents of one customer. Exactly as many may succeed as the stock
//! and the money allow; every other one must end CANCELLED with the
//! business reason (insufficient stock / insufficient funds). A quarter of
//! them are also sent, at the same moment, to a second instance: the two
//! answers must name one saga.
//!
//! The phase runs after the drive, with every instance up, with the
//! participants' transient errors, lost replies and latency still on but
//! their injected refusals off (an injected refusal would cancel an order
//! for a reason that is not the race's). Its orders join the run's, so
//! every other check (money, stock, effects, histories) covers them too.

use crate::drive::{Accepted, Drive, Initial, OrderSpec};
use saga_proto::saga::v1::CreateOrderResponse;
use saga_proto::saga::v1::order_service_client::OrderServiceClient;
use saga_proto::saga::v1::saga_service_client::SagaServiceClient;
use serde::{Deserialize, Serialize};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tonic::transport::Channel;

/// The product whose last units are raced for.
pub const LAST_SKU: &str = "chaos-last-sku";
/// The customer whose last cents are raced for.
pub const LAST_CUSTOMER: &str = "chaos-last-customer";
/// What the money race buys (never runs short).
pub const PLENTY_SKU: &str = "chaos-plenty-sku";
/// Customers of the stock race (never run short).
const RICH: usize = 4;

fn rich(i: usize) -> String {
    format!("chaos-rich-{i:02}")
}

/// Which race an order is in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum Race {
    /// One unit of [`LAST_SKU`], paid by a rich customer.
    Stock,
    /// One unit of [`PLENTY_SKU`] at `price_cents`, paid by [`LAST_CUSTOMER`].
    Money,
}

impl Race {
    /// What a losing order's saga reason must say.
    pub fn reason(self) -> &'static str {
        match self {
            Race::Stock => "insufficient stock",
            Race::Money => "insufficient funds",
        }
    }
}

/// The two races' sizes and what was seeded for them.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Plan {
    pub stock_orders: usize,
    /// Units of [`LAST_SKU`]: as many stock-race orders may succeed.
    pub stock_units: i64,
    pub money_orders: usize,
    /// Money-race orders [`LAST_CUSTOMER`] can pay.
    pub affordable: usize,
    pub price_cents: i64,
    /// `affordable × price − 1 + price`: after the winners, `price − 1`
    /// cents are left, one short of another order.
    pub balance_cents: i64,
}

impl Plan {
    /// The races of `orders` orders (none below 2): half and half, a third
    /// of each able to succeed.
    pub fn new(orders: usize) -> Option<Plan> {
        if orders < 2 {
            return None;
        }
        let stock_orders = orders / 2;
        let money_orders = orders - stock_orders;
        let affordable = (money_orders / 3).max(1);
        let price_cents = 250;
        Some(Plan {
            stock_orders,
            stock_units: (stock_orders as i64 / 3).max(1),
            money_orders,
            affordable,
            price_cents,
            balance_cents: affordable as i64 * price_cents + price_cents - 1,
        })
    }

    /// Adds the races' accounts and products to what is seeded.
    pub fn seed_into(&self, initial: &mut Initial) {
        initial.stock.insert(LAST_SKU.into(), self.stock_units);
        initial
            .stock
            .insert(PLENTY_SKU.into(), self.money_orders as i64 * 10 + 10);
        initial
            .balances
            .insert(LAST_CUSTOMER.into(), self.balance_cents);
        for i in 0..RICH {
            initial.balances.insert(rich(i), 1_000_000);
        }
    }

    /// Every order of both races, interleaved.
    pub fn orders(&self, seed: u64) -> Vec<(OrderSpec, Race)> {
        let mut out = Vec::new();
        for j in 0..self.stock_orders.max(self.money_orders) {
            if j < self.stock_orders {
                out.push((
                    spec(seed, "stock", j, rich(j % RICH), LAST_SKU, 100),
                    Race::Stock,
                ));
            }
            if j < self.money_orders {
                out.push((
                    spec(
                        seed,
                        "money",
                        j,
                        LAST_CUSTOMER.into(),
                        PLENTY_SKU,
                        self.price_cents,
                    ),
                    Race::Money,
                ));
            }
        }
        out
    }

    /// How many of `race`'s orders must succeed.
    pub fn winners(&self, race: Race) -> usize {
        match race {
            Race::Stock => (self.stock_units as usize).min(self.stock_orders),
            Race::Money => self.affordable.min(self.money_orders),
        }
    }
}

fn spec(seed: u64, race: &str, j: usize, customer: String, sku: &str, price: i64) -> OrderSpec {
    OrderSpec {
        request_id: format!("chaos-{seed}-contention-{race}-{j}"),
        customer_id: customer,
        items: vec![(sku.to_owned(), 1, price)],
        total_cents: price,
    }
}

/// What the phase saw (its verdict comes from the stores, in the audit).
#[derive(Debug, Default)]
pub struct Phase {
    /// Accepted orders, in sending order, with their race.
    pub orders: Vec<(Accepted, Race)>,
    /// Orders also sent to a second instance at the same moment.
    pub concurrent_duplicates: usize,
    /// Pairs whose two answers did not name one saga (or both claimed to
    /// have created it).
    pub duplicate_problems: Vec<String>,
    /// Orders not accepted, sagas not seen terminal.
    pub problems: Vec<String>,
    pub secs: f64,
}

/// Sends every order of `plan` at once — order `j` to instance `j % n`,
/// every fourth also to instance `j + 1` — and waits until each is
/// terminal (at most `limit`).
pub async fn run(plan: &Plan, seed: u64, channels: &[Channel], limit: Duration) -> Phase {
    let started = Instant::now();
    let deadline = started + limit;
    let drive = Arc::new(Drive::default());
    let orders = plan.orders(seed);
    let gate = Arc::new(tokio::sync::Barrier::new(orders.len()));
    let mut tasks = Vec::new();
    for (j, (spec, race)) in orders.into_iter().enumerate() {
        let racer = Racer {
            drive: drive.clone(),
            gate: gate.clone(),
            channels: channels.to_vec(),
            deadline,
        };
        tasks.push(tokio::spawn(racer.race(j, spec, race)));
    }
    let mut phase = Phase::default();
    for task in tasks {
        match task.await {
            Ok(sent) => {
                if let Some(a) = sent.accepted {
                    phase.orders.push((a, sent.race));
                }
                phase.concurrent_duplicates += usize::from(sent.twice);
                phase.duplicate_problems.extend(sent.problem);
            }
            Err(e) => phase
                .problems
                .push(format!("a contention task failed: {e}")),
        }
    }
    phase
        .problems
        .extend(drive.problems.lock().expect("lock").iter().cloned());
    let unfinished = drive
        .unfinished_waits
        .load(std::sync::atomic::Ordering::Relaxed);
    if unfinished > 0 {
        phase.problems.push(format!(
            "{unfinished} contention saga(s) not terminal within {} s",
            limit.as_secs()
        ));
    }
    phase.secs = started.elapsed().as_secs_f64();
    phase
}

/// What one contention task needs: the shared drive, the gate that lets
/// every order go at once, the instances, and when to give up.
struct Racer {
    drive: Arc<Drive>,
    gate: Arc<tokio::sync::Barrier>,
    channels: Vec<Channel>,
    deadline: Instant,
}

/// How one order of a race went.
struct Sent {
    accepted: Option<Accepted>,
    race: Race,
    /// Whether it was also sent to a second instance.
    twice: bool,
    /// The two answers disagreed (see [`duplicate_problem`]).
    problem: Option<String>,
}

impl Racer {
    /// Sends order `j` once every order is ready (to a second instance at
    /// the same moment when `j % 4 == 0`), then waits until its saga is
    /// terminal.
    async fn race(self, j: usize, spec: OrderSpec, race: Race) -> Sent {
        let Racer {
            drive,
            gate,
            channels,
            deadline,
        } = self;
        let n = channels.len();
        let mut first: Vec<_> = channels
            .iter()
            .cloned()
            .map(OrderServiceClient::new)
            .collect();
        let mut second = first.clone();
        let twice = j.is_multiple_of(4);
        gate.wait().await;
        let (a, b) = tokio::join!(drive.create(&mut first, j % n, &spec, deadline), async {
            if twice {
                drive
                    .create(&mut second, (j + 1) % n, &spec, deadline)
                    .await
            } else {
                None
            }
        });
        let problem = duplicate_problem(&spec, &a, &b);
        let accepted = a.map(|(reply, instance)| Accepted {
            spec,
            saga_id: reply.saga_id,
            instance,
        });
        if let Some(acc) = &accepted {
            let mut sagas: Vec<_> = channels.into_iter().map(SagaServiceClient::new).collect();
            drive
                .await_terminal(&mut sagas, acc.instance, &acc.saga_id, deadline)
                .await;
        }
        Sent {
            accepted,
            race,
            twice,
            problem,
        }
    }
}

/// An answer (and the instance that gave it) to a CreateOrder.
type Answer = Option<(CreateOrderResponse, usize)>;

/// When one order was sent to two instances and both answered: what is
/// wrong if the answers name two sagas, or both claim to have created it.
fn duplicate_problem(spec: &OrderSpec, a: &Answer, b: &Answer) -> Option<String> {
    let (Some((a, ai)), Some((b, bi))) = (a, b) else {
        return None;
    };
    (a.saga_id != b.saga_id || (a.created && b.created)).then(|| {
        format!(
            "{}: instance {} answered saga {} (created={}), instance {} saga {} (created={})",
            spec.request_id,
            ai + 1,
            a.saga_id,
            a.created,
            bi + 1,
            b.saga_id,
            b.created
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_races_leave_a_third_able_to_win_and_the_last_cents_one_short() {
        assert!(Plan::new(1).is_none());
        let plan = Plan::new(40).unwrap();
        assert_eq!((plan.stock_orders, plan.money_orders), (20, 20));
        assert_eq!(plan.winners(Race::Stock), 6);
        assert_eq!(plan.winners(Race::Money), 6);
        assert_eq!(plan.balance_cents, 6 * 250 + 249);
        let orders = plan.orders(7);
        assert_eq!(orders.len(), 40);
        let ids: std::collections::HashSet<_> =
            orders.iter().map(|(o, _)| o.request_id.clone()).collect();
        assert_eq!(ids.len(), 40, "request ids are unique");
        let mut initial = Initial::default();
        plan.seed_into(&mut initial);
        assert_eq!(initial.stock[LAST_SKU], 6);
        assert_eq!(initial.balances[LAST_CUSTOMER], 1_749);
    }
}
