//! The invariants of the chaos audit, checked on a simulated run: while it
//! runs (each saga call as it leaves its host) and at its end (the stores).
//!
//! - every saga terminal — FAILED only with a reason — and every order the
//!   client placed has one;
//! - at most one effective charge and deduct (and refund and restock) per
//!   request id, counted over the participants' committed effects, not
//!   over their records, so a second effect the barrier let through shows;
//! - each saga's effects match its end: COMPLETED charged and deducted
//!   once, CANCELLED nothing left; money and stock conserved: every
//!   balance and availability is its start plus the effects of the run's
//!   sagas, and no effect belongs to no saga;
//! - compensations in reverse order (a saga's restock is sent before its
//!   refund), and each only once its intent is stored (the saga saved as
//!   compensating that step);
//! - each saga's history one linear sequence of versions, each written by
//!   one instance, the writer changing only with a claim
//!   ([`orchestrator::history_audit`], shared with the chaos audit);
//! - no call sent past the send window (by the sender's clock), and no
//!   call reaching a participant after its retention deleted the request
//!   id's records (checked by the stores as calls arrive).

use crate::events::Events;
use crate::net::Sent;
use crate::scenario::{self, Scenario};
use crate::store::history::Effect;
use crate::store::{SharedInventory, SharedPayment, SharedSagaTable};
use orchestrator::saga::{Saga, SagaStatus, StepStatus};
use std::collections::BTreeMap;
use std::sync::Mutex;

/// What the audit reads.
pub struct Input<'a> {
    /// The run's scenario.
    pub scenario: &'a Scenario,
    /// Where violations go.
    pub events: &'a Events,
    /// The saga store.
    pub sagas: &'a SharedSagaTable,
    /// payment-svc's store.
    pub payment: &'a SharedPayment,
    /// inventory-svc's store.
    pub inventory: &'a SharedInventory,
    /// Orders the client placed, by request id (their saga id).
    pub acked: &'a Mutex<BTreeMap<String, String>>,
    /// The saga calls sent so far.
    pub sends: &'a Sends,
    /// A host's wall clock now.
    pub now_ms: Box<dyn Fn(&str) -> i64 + 'a>,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// Every saga call sent: per request id, each call and when (ms into the
/// run), in order.
#[derive(Default)]
pub struct Sends(Mutex<BTreeMap<String, Vec<(&'static str, u128)>>>);

/// A step request id's saga id and step (`<saga_id>:<step>`).
fn split(request_id: &str) -> Option<(&str, &str)> {
    request_id.rsplit_once(':')
}

impl Sends {
    /// Records `sent` and checks it against the stored saga: a
    /// compensation only once its intent is stored, no call past the send
    /// window.
    pub fn sent(&self, input: &Input<'_>, sent: &Sent) {
        lock(&self.0)
            .entry(sent.request_id.clone())
            .or_default()
            .push((sent.call, input.events.elapsed_ms()));
        let Some((saga_id, step)) = split(&sent.request_id) else {
            return;
        };
        let table = lock(input.sagas);
        let Some(saga) = table.saga(saga_id) else {
            input.events.violated(
                "every call belongs to a stored saga",
                format!(
                    "{} {} sent for saga {saga_id}, which is not stored",
                    sent.from, sent.call
                ),
            );
            return;
        };
        if matches!(sent.call, "refund" | "restock") {
            let status = saga.step(step).map(|s| s.status);
            if !matches!(
                status,
                Some(StepStatus::Compensating | StepStatus::Compensated)
            ) {
                input.events.violated(
                    "a compensation is sent only once its intent is stored",
                    format!(
                        "{} sent {} {} while the stored saga (v{}, {}) has the step {status:?}",
                        sent.from, sent.call, sent.request_id, saga.version, saga.status
                    ),
                );
            }
        }
        check_send_window(input, sent, saga);
    }

    fn first(&self, request_id: &str, call: &str) -> Option<u128> {
        lock(&self.0)
            .get(request_id)?
            .iter()
            .find(|(c, _)| *c == call)
            .map(|(_, at)| *at)
    }
}

/// The send window, with the slack of a call the batcher held before it
/// left (the executor checks the window before it hands the call over).
fn check_send_window(input: &Input<'_>, sent: &Sent, saga: &Saga) {
    let limits = scenario::limits();
    let window = orchestrator::retention::send_window(&limits, scenario::history_retention());
    let slack = limits.call_timeout + service_kit::limits::PARTICIPANT_CONNECT_TIMEOUT;
    let age_ms = (input.now_ms)(sent.from) - saga.created_at_ms;
    if age_ms > (window + slack).as_millis() as i64 {
        input.events.violated(
            "no call past the send window",
            format!(
                "{} sent {} {} when the saga was {age_ms} ms old (window {} ms)",
                sent.from,
                sent.call,
                sent.request_id,
                window.as_millis()
            ),
        );
    }
}

/// Whether the run is done: every order placed and its saga terminal.
pub fn settled(input: &Input<'_>) -> bool {
    let acked = lock(input.acked);
    if acked.len() < input.scenario.orders.len() {
        return false;
    }
    let table = lock(input.sagas);
    acked.keys().all(|request_id| {
        table
            .by_request(request_id)
            .is_some_and(|s| s.status.is_terminal())
    }) && table.sagas().iter().all(|s| s.status.is_terminal())
}

/// Runs every end-of-run check, reporting violations to `input.events`.
pub fn check(input: &Input<'_>) {
    let sagas = lock(input.sagas).sagas();
    terminal(input, &sagas);
    for saga in &sagas {
        for problem in [
            orchestrator::history_audit::linear_versions(saga),
            orchestrator::history_audit::single_writer(saga),
        ]
        .into_iter()
        .flatten()
        {
            input.events.violated(
                "each saga's history is one linear sequence of versions",
                problem,
            );
        }
        reverse_compensations(input, saga);
    }
    let payment = lock(input.payment).clone();
    let inventory = lock(input.inventory).clone();
    let by_saga: BTreeMap<&str, &Saga> = sagas.iter().map(|s| (s.saga_id.as_str(), s)).collect();
    effects(input, &by_saga, &payment.effects, "charge", "refund", |s| {
        s.order.total_cents
    });
    effects(
        input,
        &by_saga,
        &inventory.effects,
        "deduct",
        "restock",
        |s| s.order.items.iter().map(|i| i.quantity).sum(),
    );
    conserved(
        input,
        &input.scenario.accounts,
        &payment.accounts,
        &payment.effects,
        "balance",
    );
    conserved(
        input,
        &input.scenario.products,
        &inventory.products,
        &inventory.effects,
        "stock",
    );
}

fn terminal(input: &Input<'_>, sagas: &[Saga]) {
    for saga in sagas {
        if !saga.status.is_terminal() {
            input.events.violated(
                "every saga ends",
                format!(
                    "saga {} ({}) is still {}",
                    saga.saga_id, saga.request_id, saga.status
                ),
            );
        }
        if saga.status == SagaStatus::Failed && saga.reason.is_none() {
            input.events.violated(
                "every saga ends",
                format!("saga {} is FAILED without a reason", saga.saga_id),
            );
        }
    }
    let acked = lock(input.acked);
    let table = lock(input.sagas);
    for order in &input.scenario.orders {
        match acked.get(&order.request_id) {
            None => input.events.violated(
                "every order gets a saga",
                format!("{} was never accepted", order.request_id),
            ),
            Some(saga_id)
                if table.by_request(&order.request_id).map(|s| &s.saga_id) != Some(saga_id) =>
            {
                input.events.violated(
                    "every order gets a saga",
                    format!(
                        "{} was answered with saga {saga_id}, which is not the one stored",
                        order.request_id
                    ),
                )
            }
            Some(_) => {}
        }
    }
}

/// A saga whose inventory step was compensated had its restock sent
/// before its refund.
fn reverse_compensations(input: &Input<'_>, saga: &Saga) {
    let id = |step: &str| format!("{}:{step}", saga.saga_id);
    let restock = input.sends.first(&id("inventory"), "restock");
    let refund = input.sends.first(&id("payment"), "refund");
    if let (Some(restock), Some(refund)) = (restock, refund)
        && refund < restock
    {
        input.events.violated(
            "compensations in reverse order",
            format!(
                "saga {}: refund sent at {refund} ms, before the restock at {restock} ms",
                saga.saga_id
            ),
        );
    }
    if let (None, Some(refund)) = (restock, refund)
        && saga
            .step("inventory")
            .is_some_and(|s| s.status == StepStatus::Compensated)
    {
        input.events.violated(
            "compensations in reverse order",
            format!("saga {}: refund sent at {refund} ms and no restock before it, though inventory ended compensated", saga.saga_id),
        );
    }
}

/// Per step request id: the action's effects total nothing or exactly its
/// amount once, the compensation's likewise; COMPLETED sagas charged once
/// and never refunded, CANCELLED ones netting to zero; no effect outside
/// the run's sagas.
fn effects(
    input: &Input<'_>,
    sagas: &BTreeMap<&str, &Saga>,
    effects: &[Effect],
    action: &str,
    compensation: &str,
    amount: impl Fn(&Saga) -> i64,
) {
    let mut totals: BTreeMap<(&str, &str), i64> = BTreeMap::new();
    for e in effects {
        *totals.entry((e.request_id.as_str(), e.call)).or_default() += e.delta;
    }
    let mut by_request: BTreeMap<&str, (i64, i64)> = BTreeMap::new();
    for ((request_id, call), total) in &totals {
        let entry = by_request.entry(request_id).or_default();
        if *call == action {
            entry.0 += total;
        } else if *call == compensation {
            entry.1 += total;
        }
    }
    for (request_id, (done, undone)) in by_request {
        let Some(saga) = split(request_id).and_then(|(id, _)| sagas.get(id)) else {
            input.events.violated(
                "money and stock conserved",
                format!("{action} effects under {request_id}, which belongs to no saga"),
            );
            continue;
        };
        let amount = amount(saga);
        if done != 0 && done != -amount {
            input.events.violated(
                "at most one effective action and compensation per request id",
                format!(
                    "{request_id}: {action} moved {done} in all, one {action} is {}",
                    -amount
                ),
            );
        }
        if undone != 0 && undone != amount {
            input.events.violated(
                "at most one effective action and compensation per request id",
                format!("{request_id}: {compensation} moved {undone} in all, one is {amount}"),
            );
        }
        let expected = match saga.status {
            SagaStatus::Completed => Some((-amount, 0)),
            SagaStatus::Cancelled => Some((done, -done)),
            _ => None,
        };
        if let Some(expected) = expected
            && expected != (done, undone)
        {
            input.events.violated(
                "each saga's effects match its end",
                format!(
                    "{request_id}: saga {} but {action} {done} and {compensation} {undone}",
                    saga.status
                ),
            );
        }
    }
    for saga in sagas.values().filter(|s| s.status == SagaStatus::Completed) {
        let step = if action == "charge" {
            "payment"
        } else {
            "inventory"
        };
        let request_id = format!("{}:{step}", saga.saga_id);
        if !totals.contains_key(&(request_id.as_str(), action)) {
            input.events.violated(
                "each saga's effects match its end",
                format!("saga {} COMPLETED without its {action}", saga.saga_id),
            );
        }
    }
}

/// Every counter is its start plus the effects committed on it.
fn conserved(
    input: &Input<'_>,
    start: &[(String, i64)],
    now: &BTreeMap<String, i64>,
    effects: &[Effect],
    what: &str,
) {
    let mut expected: BTreeMap<&str, i64> = start.iter().map(|(k, v)| (k.as_str(), *v)).collect();
    for e in effects {
        *expected.entry(e.subject.as_str()).or_default() += e.delta;
    }
    for (subject, value) in now {
        let want = expected.get(subject.as_str()).copied().unwrap_or(0);
        if *value != want || *value < 0 {
            input.events.violated(
                "money and stock conserved",
                format!(
                    "{what} of {subject} is {value}, its start and the run's effects make {want}"
                ),
            );
        }
    }
}
