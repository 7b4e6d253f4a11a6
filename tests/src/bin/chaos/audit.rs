//! The invariants of a soak, checked on the stopped stores ([`Snapshot`])
//! against what was seeded and what was ordered: every saga terminal and
//! not FAILED, every COMPLETED order charged and deducted exactly once,
//! every CANCELLED order netting to zero, money and stock moved by exactly
//! the COMPLETED orders, and no effect outside this run's sagas.

use crate::drive::{Initial, OrderSpec};
use crate::snapshot::{DeductLine, Op, Snapshot};
use orchestrator::saga::{Saga, SagaStatus, StepStatus};
use std::collections::{BTreeMap, HashMap};

/// Accepted orders: index → (spec, saga id).
type Orders = BTreeMap<usize, (OrderSpec, String)>;

/// One checked invariant: its name and the offending cases (empty = pass).
#[derive(Debug)]
pub struct Finding {
    pub name: String,
    pub problems: Vec<String>,
}

/// Figures the audit derives from the saga documents.
#[derive(Debug, Default)]
pub struct Figures {
    pub completed: usize,
    pub cancelled: usize,
    pub failed: usize,
    pub other: usize,
    /// Σ (attempts − 1) + Σ (compensation_attempts − 1) over all steps.
    pub step_retries: u64,
    /// Steps that ended compensated.
    pub compensations: u64,
    /// Sagas with at least one step retried.
    pub sagas_with_retries: usize,
    /// Saga durations (updated − created), ms, terminal sagas only.
    pub durations_ms: Vec<i64>,
}

/// How the run's operations look in the participants' history.
struct Effect {
    charge: Option<Op>,
    refund: Option<Op>,
    deduct: Option<Op>,
    restock: Option<Op>,
    lines: Vec<DeductLine>,
}

impl Effect {
    fn charged(&self) -> bool {
        self.charge.as_ref().is_some_and(|c| c.status == "applied")
            && self.refund.as_ref().is_none_or(|r| r.status != "undone")
    }

    fn deducted(&self) -> bool {
        self.deduct.as_ref().is_some_and(|d| d.status == "applied")
            && self.restock.as_ref().is_none_or(|r| r.status != "undone")
    }

    fn lines_deducted(&self) -> usize {
        self.lines.iter().filter(|l| l.status == "deducted").count()
    }

    fn describe(&self) -> String {
        let op = |o: &Option<Op>| {
            o.as_ref()
                .map_or("-".to_owned(), |o| format!("{}({})", o.status, o.amount))
        };
        format!(
            "charge={} refund={} deduct={} restock={} lines=[{}]",
            op(&self.charge),
            op(&self.refund),
            op(&self.deduct),
            op(&self.restock),
            self.lines
                .iter()
                .map(|l| format!(
                    "{}:{}x{}:{}",
                    l.line_index, l.product_id, l.quantity, l.status
                ))
                .collect::<Vec<_>>()
                .join(",")
        )
    }
}

impl Effect {
    /// The history records of saga `saga_id`'s two steps.
    fn of(snap: &Snapshot, saga_id: &str) -> Effect {
        let pay = format!("{saga_id}:payment");
        let inv = format!("{saga_id}:inventory");
        let get = |m: &HashMap<(String, String), Op>, rid: &str, kind: &str| {
            m.get(&(rid.to_owned(), kind.to_owned())).cloned()
        };
        let mut lines = snap.deduct_lines.get(&inv).cloned().unwrap_or_default();
        lines.sort_by_key(|l| l.line_index);
        Effect {
            charge: get(&snap.payment_ops, &pay, "charge"),
            refund: get(&snap.payment_ops, &pay, "refund"),
            deduct: get(&snap.inventory_ops, &inv, "deduct"),
            restock: get(&snap.inventory_ops, &inv, "restock"),
            lines,
        }
    }

    /// What is wrong with it for a COMPLETED `spec` (empty: nothing).
    fn completed_problems(&self, spec: &OrderSpec) -> Vec<&'static str> {
        let mut bad = Vec::new();
        if !self.charged() {
            bad.push("no effective charge");
        } else if self
            .charge
            .as_ref()
            .is_some_and(|c| c.amount != spec.total_cents || c.subject != spec.customer_id)
        {
            bad.push("charge amount/customer differs from the order");
        }
        if !self.deducted() {
            bad.push("no effective deduction");
        }
        let lines_ok = self.lines.len() == spec.items.len()
            && self.lines_deducted() == spec.items.len()
            && self
                .lines
                .iter()
                .zip(&spec.items)
                .all(|(l, (p, q, _))| l.product_id == *p && l.quantity == *q);
        if !lines_ok {
            bad.push("deducted lines differ from the order");
        }
        bad
    }
}

/// Checks every invariant; returns the findings (one per invariant) and
/// the figures.
pub fn check(snap: &Snapshot, orders: &Orders, initial: &Initial) -> (Vec<Finding>, Figures) {
    let by_id: HashMap<&str, &Saga> = snap.sagas.iter().map(|s| (s.saga_id.as_str(), s)).collect();
    let settled = Settlement::of(snap, orders, &by_id);
    let findings = vec![
        Finding::new(
            "every saga COMPLETED or CANCELLED in the store (none FAILED, none missing)",
            terminal(snap, orders),
        ),
        Finding::new(
            "every COMPLETED order: exactly one effective charge and one effective deduction",
            settled.completed,
        ),
        Finding::new("every CANCELLED order nets to zero", settled.cancelled),
        Finding::new(
            "money: initial − final balance = Σ COMPLETED totals, per customer",
            moved(
                &initial.balances,
                &snap.balances,
                &settled.spent,
                |n| format!("COMPLETED orders total {n}"),
                "account missing",
            ),
        ),
        Finding::new(
            "stock: initial − final = Σ COMPLETED quantities, per product",
            moved(
                &initial.stock,
                &snap.stock,
                &settled.taken,
                |n| format!("COMPLETED orders hold {n} units"),
                "product missing",
            ),
        ),
        Finding::new(
            "no charge/refund/deduct/restock outside this run's sagas",
            orphans(snap, &by_id),
        ),
    ];
    (findings, figures(snap))
}

impl Finding {
    fn new(name: &str, problems: Vec<String>) -> Finding {
        Finding {
            name: name.to_owned(),
            problems,
        }
    }
}

/// Outcome counts, retries, compensations and durations of the stored
/// sagas.
fn figures(snap: &Snapshot) -> Figures {
    let mut figures = Figures::default();
    for s in &snap.sagas {
        match s.status {
            SagaStatus::Completed => figures.completed += 1,
            SagaStatus::Cancelled => figures.cancelled += 1,
            SagaStatus::Failed => figures.failed += 1,
            _ => figures.other += 1,
        }
        let mut retried = false;
        for step in &s.steps {
            let r = u64::from(step.attempts.saturating_sub(1))
                + u64::from(step.compensation_attempts.saturating_sub(1));
            figures.step_retries += r;
            retried |= r > 0;
            if step.status == StepStatus::Compensated {
                figures.compensations += 1;
            }
        }
        if retried {
            figures.sagas_with_retries += 1;
        }
        if s.status.is_terminal() {
            figures.durations_ms.push(s.updated_at_ms - s.created_at_ms);
        }
    }
    figures
}

/// Every order the tool created has its saga, terminal and not FAILED,
/// holding the order that was sent; and the store holds no other saga.
fn terminal(snap: &Snapshot, orders: &Orders) -> Vec<String> {
    let by_request: HashMap<&str, &Saga> = snap
        .sagas
        .iter()
        .map(|s| (s.request_id.as_str(), s))
        .collect();
    let mut problems = Vec::new();
    for (spec, saga_id) in orders.values() {
        match by_request.get(spec.request_id.as_str()) {
            None => problems.push(format!("{}: no saga in the store", spec.request_id)),
            Some(s) if s.saga_id != *saga_id => problems.push(format!(
                "{}: CreateOrder answered saga {saga_id}, the store holds {}",
                spec.request_id, s.saga_id
            )),
            Some(s) if !matches!(s.status, SagaStatus::Completed | SagaStatus::Cancelled) => {
                problems.push(format!(
                    "{} saga {}: {} ({}) steps: {}",
                    spec.request_id,
                    s.saga_id,
                    s.status.as_str().to_uppercase(),
                    s.reason.as_deref().unwrap_or(""),
                    steps(s)
                ))
            }
            Some(s) if !same_order(s, spec) => problems.push(format!(
                "{} saga {}: stored order differs from the one sent",
                spec.request_id, s.saga_id
            )),
            Some(_) => {}
        }
    }
    if snap.sagas.len() != orders.len() {
        problems.push(format!(
            "the store holds {} sagas, the tool created {}",
            snap.sagas.len(),
            orders.len()
        ));
    }
    problems
}

/// Whether the stored saga holds the order that was sent.
fn same_order(s: &Saga, spec: &OrderSpec) -> bool {
    let o = &s.order;
    o.customer_id == spec.customer_id
        && o.total_cents == spec.total_cents
        && o.items.len() == spec.items.len()
        && o.items.iter().zip(&spec.items).all(|(a, (p, q, c))| {
            a.product_id == *p && a.quantity == *q && a.unit_price_cents == *c
        })
}

/// What the terminal sagas did to the participants.
struct Settlement {
    /// COMPLETED orders without exactly one effective charge and deduction.
    completed: Vec<String>,
    /// CANCELLED orders that left an effect behind.
    cancelled: Vec<String>,
    /// Customer → cents the COMPLETED orders should have taken.
    spent: BTreeMap<String, i64>,
    /// Product → units the COMPLETED orders should have taken.
    taken: BTreeMap<String, i64>,
}

impl Settlement {
    fn of(snap: &Snapshot, orders: &Orders, by_id: &HashMap<&str, &Saga>) -> Settlement {
        let mut out = Settlement {
            completed: Vec::new(),
            cancelled: Vec::new(),
            spent: BTreeMap::new(),
            taken: BTreeMap::new(),
        };
        for (spec, saga_id) in orders.values() {
            let Some(s) = by_id.get(saga_id.as_str()) else {
                continue;
            };
            let fx = Effect::of(snap, saga_id);
            match s.status {
                SagaStatus::Completed => {
                    let bad = fx.completed_problems(spec);
                    if !bad.is_empty() {
                        out.completed.push(format!(
                            "saga {saga_id} ({}): {}; {}\n{}",
                            spec.request_id,
                            bad.join(", "),
                            fx.describe(),
                            history(s)
                        ));
                    }
                    *out.spent.entry(spec.customer_id.clone()).or_default() += spec.total_cents;
                    for (p, q, _) in &spec.items {
                        *out.taken.entry(p.clone()).or_default() += q;
                    }
                }
                SagaStatus::Cancelled
                    if fx.charged() || fx.deducted() || fx.lines_deducted() > 0 =>
                {
                    out.cancelled.push(format!(
                        "saga {saga_id} ({}): does not net to zero; {}\n{}",
                        spec.request_id,
                        fx.describe(),
                        history(s)
                    ));
                }
                _ => {}
            }
        }
        out
    }
}

/// Per key (customer or product): initial − final = expected. `what`
/// words the expectation, `missing` a key absent at the end.
fn moved(
    initial: &BTreeMap<String, i64>,
    now: &BTreeMap<String, i64>,
    expected: &BTreeMap<String, i64>,
    what: impl Fn(i64) -> String,
    missing: &str,
) -> Vec<String> {
    let mut problems = Vec::new();
    for (key, start) in initial {
        let want = expected.get(key).copied().unwrap_or(0);
        match now.get(key).copied() {
            Some(end) if start - end == want => {}
            Some(end) => problems.push(format!(
                "{key}: initial {start} − final {end} = {} but {}",
                start - end,
                what(want)
            )),
            None => problems.push(format!("{key}: {missing}")),
        }
    }
    problems
}

/// Saga-step operations that belong to no saga of this run.
fn orphans(snap: &Snapshot, by_id: &HashMap<&str, &Saga>) -> Vec<String> {
    let mut problems = Vec::new();
    for (ops, suffix) in [
        (&snap.payment_ops, ":payment"),
        (&snap.inventory_ops, ":inventory"),
    ] {
        for op in ops.values() {
            if matches!(op.kind.as_str(), "deposit" | "add_stock") {
                continue;
            }
            let owner = op.request_id.strip_suffix(suffix);
            if !owner.is_some_and(|id| by_id.contains_key(id)) {
                problems.push(format!(
                    "{} {} {} ({})",
                    op.kind, op.request_id, op.status, op.subject
                ));
            }
        }
    }
    problems
}

/// A saga's steps in one line.
pub fn steps(s: &Saga) -> String {
    s.steps
        .iter()
        .map(|st| {
            format!(
                "{}={} (attempts {}, compensation attempts {}{})",
                st.name,
                st.status.as_str(),
                st.attempts,
                st.compensation_attempts,
                st.last_error
                    .as_deref()
                    .map(|e| format!(", last error {e}"))
                    .unwrap_or_default()
            )
        })
        .collect::<Vec<_>>()
        .join("; ")
}

/// A saga's history, one transition per line (for failure reports).
pub fn history(s: &Saga) -> String {
    let start = s.history.first().map_or(0, |t| t.at_ms);
    s.history
        .iter()
        .map(|t| {
            format!(
                "              +{:>5} ms {:<10} {} → {}  {}",
                t.at_ms - start,
                t.step.as_deref().unwrap_or("saga"),
                t.from,
                t.to,
                t.detail
            )
        })
        .collect::<Vec<_>>()
        .join("\n")
}
