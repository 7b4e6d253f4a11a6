//! The invariants of a soak, checked on the stopped stores ([`Snapshot`])
//! against the run's [`Manifest`] (what was seeded, ordered, killed): every
//! saga terminal and not FAILED, one saga per request id, every COMPLETED
//! order charged and deducted exactly once and every CANCELLED one netting
//! to zero — counted over *every* operationHistory row, so a second row for
//! one step is a second effect, never hidden behind a key —, money and
//! stock moved by exactly the COMPLETED orders and never negative in any
//! row, no effect outside the run's sagas, each saga's history one linear
//! sequence of versions whose writer changes only with a claim, the killed
//! instances' sagas finished (by takeover where the victim stayed down),
//! and the contention races won by exactly as many orders as stock and
//! money allow. With `--third-step loyalty`, loyalty-svc's store is checked
//! too ([`crate::loyalty_steps`]).
//!
//! Everything here reads the stores and the manifest only, so
//! `--audit-only` runs the same checks on a kept run.

use crate::contention::Race;
use crate::drive::{Accepted, OrderSpec};
use crate::manifest::Manifest;
use crate::snapshot::{DeductLine, Op, Snapshot};
use orchestrator::history_audit;
use orchestrator::saga::{Saga, SagaStatus, StepStatus};
use std::collections::{BTreeMap, HashMap};

/// One checked invariant: its name and the offending cases (empty = pass).
#[derive(Debug)]
pub struct Finding {
    pub name: String,
    pub problems: Vec<String>,
}

impl Finding {
    pub(crate) fn new(name: impl Into<String>, problems: Vec<String>) -> Finding {
        Finding {
            name: name.into(),
            problems,
        }
    }
}

/// Figures the audit derives from the stores.
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
    /// "taken over by" entries in the sagas' histories.
    pub takeovers: usize,
    /// Claims of an instance's own sagas after its restart.
    pub own_resumes: usize,
    /// operationHistory rows read (payment, inventory).
    pub op_rows: (usize, usize),
    /// Sagas each instance wrote at least one version of.
    pub sagas_per_writer: BTreeMap<String, usize>,
}

/// The history entry of a claim: another instance took the saga over after
/// its lease expired (`taken over by X: the lease of Y expired at T`).
const TAKEN_OVER: &str = "taken over by ";

/// Every operationHistory row of one saga step (its request id).
#[derive(Default)]
struct Effect {
    charges: Vec<Op>,
    refunds: Vec<Op>,
    deducts: Vec<Op>,
    restocks: Vec<Op>,
    lines: Vec<DeductLine>,
}

fn count(ops: &[Op], status: &str) -> usize {
    ops.iter().filter(|o| o.status == status).count()
}

impl Effect {
    /// The rows of saga `saga_id`'s two steps.
    fn of(rows: &RowsByRequest, saga_id: &str) -> Effect {
        let pay = format!("{saga_id}:payment");
        let inv = format!("{saga_id}:inventory");
        let get = |rid: &str, kind: &str| -> Vec<Op> {
            rows.ops
                .get(rid)
                .map(|ops| ops.iter().filter(|o| o.kind == kind).cloned().collect())
                .unwrap_or_default()
        };
        let mut lines = rows.lines.get(&inv).cloned().unwrap_or_default();
        lines.sort_by_key(|l| l.line_index);
        Effect {
            charges: get(&pay, "charge"),
            refunds: get(&pay, "refund"),
            deducts: get(&inv, "deduct"),
            restocks: get(&inv, "restock"),
            lines,
        }
    }

    /// Effective charges: applied ones not undone by a refund.
    fn net_charges(&self) -> i64 {
        count(&self.charges, "applied") as i64 - count(&self.refunds, "undone") as i64
    }

    fn net_deducts(&self) -> i64 {
        count(&self.deducts, "applied") as i64 - count(&self.restocks, "undone") as i64
    }

    fn lines_deducted(&self) -> usize {
        self.lines.iter().filter(|l| l.status == "deducted").count()
    }

    fn describe(&self) -> String {
        let ops = |o: &[Op]| {
            if o.is_empty() {
                "-".to_owned()
            } else {
                o.iter()
                    .map(|o| format!("{}({})", o.status, o.amount))
                    .collect::<Vec<_>>()
                    .join("+")
            }
        };
        format!(
            "charge={} refund={} deduct={} restock={} lines=[{}]",
            ops(&self.charges),
            ops(&self.refunds),
            ops(&self.deducts),
            ops(&self.restocks),
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

    /// What is wrong with it for a COMPLETED `spec` (empty: nothing).
    fn completed_problems(&self, spec: &OrderSpec) -> Vec<&'static str> {
        let mut bad = Vec::new();
        match count(&self.charges, "applied") {
            0 => bad.push("no applied charge"),
            1 => {}
            _ => bad.push("more than one applied charge"),
        }
        if self.net_charges() != 1 {
            bad.push("not exactly one effective charge");
        } else if self
            .charges
            .iter()
            .any(|c| c.amount != spec.total_cents || c.subject != spec.customer_id)
        {
            bad.push("charge amount/customer differs from the order");
        }
        match count(&self.deducts, "applied") {
            0 => bad.push("no applied deduction"),
            1 => {}
            _ => bad.push("more than one applied deduction"),
        }
        if self.net_deducts() != 1 {
            bad.push("not exactly one effective deduction");
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

    /// Whether a CANCELLED order left an effect behind.
    fn leaves_effect(&self) -> bool {
        self.net_charges() != 0 || self.net_deducts() != 0 || self.lines_deducted() > 0
    }
}

/// Every operationHistory row and deducted line grouped by request id (a
/// grouping that keeps every row; nothing is keyed away).
#[derive(Default)]
struct RowsByRequest {
    ops: HashMap<String, Vec<Op>>,
    lines: HashMap<String, Vec<DeductLine>>,
}

impl RowsByRequest {
    fn of(snap: &Snapshot) -> RowsByRequest {
        let mut rows = RowsByRequest::default();
        for op in snap.payment_ops.iter().chain(&snap.inventory_ops) {
            rows.ops
                .entry(op.request_id.clone())
                .or_default()
                .push(op.clone());
        }
        rows.lines = snap.deduct_lines.clone();
        rows
    }
}

/// Checks every invariant; returns the findings (one per invariant) and
/// the figures.
pub fn check(snap: &Snapshot, run: &Manifest) -> (Vec<Finding>, Figures) {
    let audit = Audit::of(snap, run);
    let settled = Settlement::of(&run.orders, &audit.by_id, &audit.rows);
    let mut findings = audit.record_findings();
    findings.extend(audit.settlement_findings(settled));
    findings.extend(audit.store_findings());
    let figures = figures(snap);
    findings.extend(audit.kill_findings(&figures));
    findings.extend(audit.contention_findings());
    if let Some(store) = &snap.loyalty {
        findings.extend(crate::loyalty_steps::check(
            store,
            &run.orders,
            &audit.by_id,
            &run.loyalty_steps,
        ));
    }
    (findings, figures)
}

/// What the checks read: the stores and the manifest, with the stores'
/// rows grouped for lookups.
struct Audit<'a> {
    snap: &'a Snapshot,
    run: &'a Manifest,
    by_id: HashMap<&'a str, &'a Saga>,
    rows: RowsByRequest,
    /// Customer → final balance (summed over its rows).
    balances: BTreeMap<String, i64>,
    /// Product → final stock (summed over its rows).
    stock: BTreeMap<String, i64>,
}

impl<'a> Audit<'a> {
    fn of(snap: &'a Snapshot, run: &'a Manifest) -> Audit<'a> {
        Audit {
            snap,
            run,
            by_id: snap.sagas.iter().map(|s| (s.saga_id.as_str(), s)).collect(),
            rows: RowsByRequest::of(snap),
            balances: totals(&snap.balances),
            stock: totals(&snap.stock),
        }
    }

    /// The sagas and participant records as records: every order has its
    /// saga, once; no record or effect twice.
    fn record_findings(&self) -> Vec<Finding> {
        let (snap, run) = (self.snap, self.run);
        vec![
            Finding::new(
                "every saga COMPLETED or CANCELLED in the store (none FAILED, none missing)",
                terminal(snap, &run.orders),
            ),
            Finding::new(
                format!(
                    "one saga per request id ({} orders, duplicates sent across {} instance(s))",
                    run.orders.len(),
                    run.instances.len()
                ),
                one_saga_per_request(snap),
            ),
            Finding::new(
                format!(
                    "every operationHistory row counted ({} payment + {} inventory rows): no (request id, kind) recorded twice",
                    snap.payment_ops.len(),
                    snap.inventory_ops.len()
                ),
                repeated_keys(snap),
            ),
            Finding::new(
                "no second effective charge or deduct (or deducted line) for one step",
                second_effects(&self.rows),
            ),
        ]
    }

    /// What the terminal sagas did: per order, then money and stock per
    /// customer and product.
    fn settlement_findings(&self, settled: Settlement) -> Vec<Finding> {
        let initial = &self.run.initial;
        vec![
            Finding::new(
                "every COMPLETED order: exactly one effective charge and one effective deduction",
                settled.completed,
            ),
            Finding::new("every CANCELLED order nets to zero", settled.cancelled),
            Finding::new(
                "money: initial − final balance = Σ COMPLETED totals, per customer",
                moved(
                    &initial.balances,
                    &self.balances,
                    &settled.spent,
                    |n| format!("COMPLETED orders total {n}"),
                    "account missing",
                ),
            ),
            Finding::new(
                "stock: initial − final = Σ COMPLETED quantities, per product",
                moved(
                    &initial.stock,
                    &self.stock,
                    &settled.taken,
                    |n| format!("COMPLETED orders hold {n} units"),
                    "product missing",
                ),
            ),
        ]
    }

    /// Rows that must never exist (negative, orphaned) and the sagas'
    /// histories as sequences of saves.
    fn store_findings(&self) -> Vec<Finding> {
        let snap = self.snap;
        vec![
            Finding::new(
                "balances and stock never negative in any stored row (one row per account and product)",
                negatives(snap),
            ),
            Finding::new(
                "every participant effect belongs to a saga of this run (no orphan charge/refund/deduct/restock/line)",
                orphans(snap, &self.by_id),
            ),
            Finding::new(
                "each saga's history is one linear sequence of versions 1..=version (no version twice, no gap)",
                snap.sagas
                    .iter()
                    .filter_map(history_audit::linear_versions)
                    .collect(),
            ),
            Finding::new(
                "no saga advanced by two instances: each version written by one instance, the writer changing only with a claim",
                snap.sagas
                    .iter()
                    .filter_map(history_audit::single_writer)
                    .collect(),
            ),
        ]
    }

    /// The SIGKILLed orchestrators' sagas: finished, and — with several
    /// instances — taken over by the others.
    fn kill_findings(&self, figures: &Figures) -> Vec<Finding> {
        let run = self.run;
        let mut findings = vec![Finding::new(
            format!(
                "every saga an orchestrator held when SIGKILLed reached a terminal state ({} sagas over {} kill(s))",
                run.kills.iter().map(|k| k.in_flight.len()).sum::<usize>(),
                run.kills.len()
            ),
            victims_terminal(run, &self.by_id),
        )];
        if run.instances.len() > 1 && !run.kills.is_empty() {
            findings.push(Finding::new(
                format!(
                    "lease takeovers happened (counted in the stored histories: {})",
                    figures.takeovers
                ),
                if figures.takeovers > 0 {
                    Vec::new()
                } else {
                    vec!["no saga history holds a takeover".to_owned()]
                },
            ));
            let (problems, taken, landed) = taken_over_before_return(run, &self.by_id);
            findings.push(Finding::new(
                format!(
                    "a SIGKILLed instance's sagas were taken over by other instances before it returned ({taken} taken over, {landed} finished by a write it sent before dying)"
                ),
                problems,
            ));
        }
        findings
    }

    /// The contention races, when the run had them.
    fn contention_findings(&self) -> Vec<Finding> {
        let Some(contention) = &self.run.contention else {
            return Vec::new();
        };
        [Race::Stock, Race::Money]
            .into_iter()
            .map(|race| {
                let (name, problems) = race_result(
                    self.run,
                    contention,
                    race,
                    &self.by_id,
                    &self.balances,
                    &self.stock,
                );
                Finding::new(name, problems)
            })
            .collect()
    }
}

/// Sum of rows per key (a duplicated row counts twice: the negative-row
/// check names it).
fn totals(rows: &[(String, i64)]) -> BTreeMap<String, i64> {
    let mut out = BTreeMap::new();
    for (k, v) in rows {
        *out.entry(k.clone()).or_insert(0) += v;
    }
    out
}

/// Outcome counts, retries, compensations, durations and ownership moves
/// of the stored sagas.
fn figures(snap: &Snapshot) -> Figures {
    let mut figures = Figures {
        op_rows: (snap.payment_ops.len(), snap.inventory_ops.len()),
        ..Figures::default()
    };
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
        figures.takeovers += s
            .history
            .iter()
            .filter(|t| t.detail.starts_with(TAKEN_OVER))
            .count();
        figures.own_resumes += s
            .history
            .iter()
            .filter(|t| t.detail.starts_with("resumed by ") && t.detail.contains("its own lease"))
            .count();
        let mut writers: Vec<&str> = s.history.iter().filter_map(|t| t.by.as_deref()).collect();
        writers.sort_unstable();
        writers.dedup();
        for w in writers {
            *figures.sagas_per_writer.entry(w.to_owned()).or_default() += 1;
        }
    }
    figures
}

/// Every order the tool created has its saga, terminal and not FAILED,
/// holding the order that was sent; and the store holds no other saga.
fn terminal(snap: &Snapshot, orders: &BTreeMap<usize, Accepted>) -> Vec<String> {
    let by_request: HashMap<&str, &Saga> = snap
        .sagas
        .iter()
        .map(|s| (s.request_id.as_str(), s))
        .collect();
    let mut problems = Vec::new();
    for a in orders.values() {
        let (spec, saga_id) = (&a.spec, &a.saga_id);
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

/// No request id has two sagas in the store.
fn one_saga_per_request(snap: &Snapshot) -> Vec<String> {
    let mut by_request: BTreeMap<&str, Vec<&str>> = BTreeMap::new();
    for s in &snap.sagas {
        by_request
            .entry(s.request_id.as_str())
            .or_default()
            .push(s.saga_id.as_str());
    }
    by_request
        .into_iter()
        .filter(|(_, ids)| ids.len() > 1)
        .map(|(rid, ids)| {
            format!(
                "request id {rid} has {} sagas: {}",
                ids.len(),
                ids.join(", ")
            )
        })
        .collect()
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

/// (request id, kind) keys held by more than one row, per participant.
fn repeated_keys(snap: &Snapshot) -> Vec<String> {
    let mut problems = Vec::new();
    for (who, ops) in [
        ("payment-svc", &snap.payment_ops),
        ("inventory-svc", &snap.inventory_ops),
    ] {
        let mut seen: BTreeMap<(&str, &str), Vec<&Op>> = BTreeMap::new();
        for op in ops {
            seen.entry((op.request_id.as_str(), op.kind.as_str()))
                .or_default()
                .push(op);
        }
        for ((rid, kind), rows) in seen.into_iter().filter(|(_, r)| r.len() > 1) {
            problems.push(format!(
                "{who}: {} operationHistory rows for ({rid}, {kind}): {}",
                rows.len(),
                rows.iter()
                    .map(|o| format!("{}({})", o.status, o.amount))
                    .collect::<Vec<_>>()
                    .join(", ")
            ));
        }
    }
    problems
}

/// A step request id with more than one applied charge or deduct, or a
/// deducted line recorded twice.
fn second_effects(rows: &RowsByRequest) -> Vec<String> {
    let mut problems = Vec::new();
    let mut ids: Vec<&String> = rows.ops.keys().collect();
    ids.sort();
    for rid in ids {
        let ops = &rows.ops[rid];
        for kind in ["charge", "deduct"] {
            let applied = ops
                .iter()
                .filter(|o| o.kind == kind && o.status == "applied")
                .count();
            if applied > 1 {
                problems.push(format!(
                    "{rid}: second effective {kind} ({applied} applied {kind} rows)"
                ));
            }
        }
    }
    let mut lines: Vec<(&String, &Vec<DeductLine>)> = rows.lines.iter().collect();
    lines.sort_by_key(|(rid, _)| *rid);
    for (rid, lines) in lines {
        let mut per_index: BTreeMap<i64, usize> = BTreeMap::new();
        for l in lines {
            *per_index.entry(l.line_index).or_default() += 1;
        }
        for (index, n) in per_index.into_iter().filter(|(_, n)| *n > 1) {
            problems.push(format!("{rid}: line {index} recorded {n} times"));
        }
    }
    problems
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
    fn of(
        orders: &BTreeMap<usize, Accepted>,
        by_id: &HashMap<&str, &Saga>,
        rows: &RowsByRequest,
    ) -> Settlement {
        let mut out = Settlement {
            completed: Vec::new(),
            cancelled: Vec::new(),
            spent: BTreeMap::new(),
            taken: BTreeMap::new(),
        };
        for a in orders.values() {
            let (spec, saga_id) = (&a.spec, &a.saga_id);
            let Some(s) = by_id.get(saga_id.as_str()) else {
                continue;
            };
            let fx = Effect::of(rows, saga_id);
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
                SagaStatus::Cancelled if fx.leaves_effect() => {
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

/// Negative balances, stock, amounts or line quantities in any row, and
/// accounts or products stored twice.
fn negatives(snap: &Snapshot) -> Vec<String> {
    let mut problems = Vec::new();
    for (what, rows) in [("balance of", &snap.balances), ("stock of", &snap.stock)] {
        let mut seen: BTreeMap<&str, usize> = BTreeMap::new();
        for (key, value) in rows {
            *seen.entry(key.as_str()).or_default() += 1;
            if *value < 0 {
                problems.push(format!("negative {what} {key}: {value}"));
            }
        }
        for (key, n) in seen.into_iter().filter(|(_, n)| *n > 1) {
            problems.push(format!("{what} {key} stored in {n} rows"));
        }
    }
    for op in snap.payment_ops.iter().chain(&snap.inventory_ops) {
        if op.amount < 0 {
            problems.push(format!(
                "negative amount in operationHistory {} {}: {}",
                op.kind, op.request_id, op.amount
            ));
        }
    }
    for (rid, lines) in &snap.deduct_lines {
        for l in lines.iter().filter(|l| l.quantity <= 0) {
            problems.push(format!(
                "deducted line {rid}#{} has quantity {}",
                l.line_index, l.quantity
            ));
        }
    }
    problems
}

/// Saga-step operations and deducted lines whose request id belongs to no
/// saga of this run.
fn orphans(snap: &Snapshot, by_id: &HashMap<&str, &Saga>) -> Vec<String> {
    let mut problems = Vec::new();
    let owner = |rid: &str, suffix: &str| {
        rid.strip_suffix(suffix)
            .is_some_and(|id| by_id.contains_key(id))
    };
    for (ops, suffix) in [
        (&snap.payment_ops, ":payment"),
        (&snap.inventory_ops, ":inventory"),
    ] {
        for op in ops {
            if matches!(op.kind.as_str(), "deposit" | "add_stock") {
                continue;
            }
            if !owner(&op.request_id, suffix) {
                problems.push(format!(
                    "{} {} {} ({}): its request id belongs to no saga",
                    op.kind, op.request_id, op.status, op.subject
                ));
            }
        }
    }
    let mut rids: Vec<&String> = snap.deduct_lines.keys().collect();
    rids.sort();
    for rid in rids {
        if !owner(rid, ":inventory") {
            problems.push(format!(
                "deducted lines under {rid}: the request id belongs to no saga"
            ));
        }
    }
    problems
}

/// Every saga a victim held when it was SIGKILLed is terminal now.
fn victims_terminal(run: &Manifest, by_id: &HashMap<&str, &Saga>) -> Vec<String> {
    let mut problems = Vec::new();
    for kill in &run.kills {
        for id in &kill.in_flight {
            match by_id.get(id.as_str()) {
                None => problems.push(format!(
                    "kill #{} of {}: saga {id} is not in the store",
                    kill.number, kill.instance
                )),
                Some(s) if !matches!(s.status, SagaStatus::Completed | SagaStatus::Cancelled) => {
                    problems.push(format!(
                        "kill #{} of {}: saga {id} is {}",
                        kill.number,
                        kill.instance,
                        s.status.as_str()
                    ))
                }
                Some(_) => {}
            }
        }
    }
    problems
}

/// At least one kill left sagas that other instances took over while the
/// victim was down. Each saga the victim held when it died was either taken
/// over from it by another instance, or finished by a write the victim had
/// sent before it died (a server can apply a dead client's last write after
/// the death: the history then ends with the victim's terminal version,
/// prepared before the SIGKILL); and nothing in any of them was written by
/// the victim while it was down.
fn taken_over_before_return(
    run: &Manifest,
    by_id: &HashMap<&str, &Saga>,
) -> (Vec<String>, usize, usize) {
    let mut problems = Vec::new();
    let mut proven = 0;
    let (mut all_taken, mut all_landed) = (0, 0);
    for kill in run.kills.iter().filter(|k| k.waited_for_takeover) {
        if !kill.taken_over_before_return {
            problems.push(format!(
                "kill #{} of {}: {} saga(s) still leased to it after {} ms down",
                kill.number,
                kill.instance,
                kill.in_flight.len(),
                kill.down_ms
            ));
            continue;
        }
        let (taken, landed) = victim_sagas(kill, by_id, &mut problems);
        if taken > 0 && taken + landed == kill.in_flight.len() {
            proven += 1;
        }
        all_taken += taken;
        all_landed += landed;
    }
    if proven == 0 && problems.is_empty() {
        problems.push(format!(
            "no kill left in-flight sagas to the other instances (kills: {})",
            run.kills
                .iter()
                .map(|k| format!("#{} {} held {}", k.number, k.instance, k.in_flight.len()))
                .collect::<Vec<_>>()
                .join("; ")
        ));
    }
    (problems, all_taken, all_landed)
}

/// How the sagas `kill`'s victim held when it died went on (for
/// [`taken_over_before_return`]): how many were taken over from it and how
/// many finished by a write it sent before dying; anything else, or an
/// entry it wrote while down, lands in `problems`.
fn victim_sagas(
    kill: &crate::services::OrchestratorKill,
    by_id: &HashMap<&str, &Saga>,
    problems: &mut Vec<String>,
) -> (usize, usize) {
    let victim = kill.instance.as_str();
    let from = format!("the lease of {victim} expired");
    let (mut taken, mut landed) = (0, 0);
    for id in &kill.in_flight {
        let Some(s) = by_id.get(id.as_str()) else {
            problems.push(format!(
                "kill #{}: saga {id} is not in the store",
                kill.number
            ));
            continue;
        };
        let by_victim = |t: &&orchestrator::saga::Transition| t.by.as_deref() == Some(victim);
        if let Some(t) = s
            .history
            .iter()
            .filter(by_victim)
            .find(|t| t.at_ms > kill.killed_at_ms && t.at_ms < kill.restarted_at_ms)
        {
            problems.push(format!(
                "kill #{} of {victim}: saga {id} has an entry by it while it was down ({:?} at {})",
                kill.number, t.detail, t.at_ms
            ));
        } else if s.history.iter().any(|t| {
            t.detail.starts_with(TAKEN_OVER)
                && t.detail.contains(&from)
                && t.by.as_deref() != Some(victim)
        }) {
            taken += 1;
        } else if s.status.is_terminal()
            && s.history
                .last()
                .is_some_and(|t| t.by.as_deref() == Some(victim) && t.at_ms <= kill.killed_at_ms)
        {
            landed += 1;
        } else {
            problems.push(format!(
                "kill #{} of {victim}: saga {id} was neither taken over from it nor finished by a write it sent before dying\n{}",
                kill.number,
                history(s)
            ));
        }
    }
    (taken, landed)
}

/// One race of the contention phase: exactly its winners COMPLETED, every
/// other order CANCELLED with the race's business reason, and the contended
/// stock or money left exactly as the winners leave it.
fn race_result(
    run: &Manifest,
    contention: &crate::manifest::Contention,
    race: Race,
    by_id: &HashMap<&str, &Saga>,
    balances: &BTreeMap<String, i64>,
    stock: &BTreeMap<String, i64>,
) -> (String, Vec<String>) {
    let plan = &contention.plan;
    let sent = match race {
        Race::Stock => plan.stock_orders,
        Race::Money => plan.money_orders,
    };
    let want = plan.winners(race);
    let RaceSagas {
        completed,
        cancelled,
        mut problems,
    } = RaceSagas::of(run, contention, race, by_id);
    let accepted = contention.orders.iter().filter(|(_, r)| *r == race).count();
    if accepted != sent {
        problems.push(format!(
            "{accepted} of {sent} orders of the race were accepted"
        ));
    }
    if completed != want {
        problems.push(format!("{completed} COMPLETED, but exactly {want} can be"));
    }
    let outcome = format!(
        "{completed} COMPLETED (exactly {want} can be), {cancelled} CANCELLED with \"{}\"",
        race.reason()
    );
    let name = match race {
        Race::Stock => {
            problems.extend(stock_left(plan, want, stock));
            format!(
                "contention: {sent} orders across every instance for the last {} unit(s) of {}: {outcome}",
                plan.stock_units,
                crate::contention::LAST_SKU
            )
        }
        Race::Money => {
            problems.extend(money_left(plan, want, balances));
            format!(
                "contention: {sent} orders across every instance for the last {} cents of {} ({} each): {outcome}",
                plan.balance_cents,
                crate::contention::LAST_CUSTOMER,
                plan.price_cents
            )
        }
    };
    (name, problems)
}

/// How one race's accepted orders ended in the store.
struct RaceSagas {
    completed: usize,
    cancelled: usize,
    /// Orders without a saga, CANCELLED for another reason than the
    /// race's, or neither COMPLETED nor CANCELLED.
    problems: Vec<String>,
}

impl RaceSagas {
    fn of(
        run: &Manifest,
        contention: &crate::manifest::Contention,
        race: Race,
        by_id: &HashMap<&str, &Saga>,
    ) -> RaceSagas {
        let by_request: HashMap<&str, &Accepted> = run
            .orders
            .values()
            .map(|a| (a.spec.request_id.as_str(), a))
            .collect();
        let mut out = RaceSagas {
            completed: 0,
            cancelled: 0,
            problems: Vec::new(),
        };
        for (rid, r) in contention.orders.iter().filter(|(_, r)| *r == race) {
            let Some(s) = by_request
                .get(rid.as_str())
                .and_then(|a| by_id.get(a.saga_id.as_str()))
            else {
                out.problems.push(format!("{rid}: no saga"));
                continue;
            };
            match s.status {
                SagaStatus::Completed => out.completed += 1,
                SagaStatus::Cancelled => {
                    out.cancelled += 1;
                    let reason = s.reason.as_deref().unwrap_or("");
                    if !reason.contains(r.reason()) {
                        out.problems.push(format!(
                            "{rid} saga {}: CANCELLED for {reason:?}, not {:?}",
                            s.saga_id,
                            r.reason()
                        ));
                    }
                }
                other => out
                    .problems
                    .push(format!("{rid} saga {}: {}", s.saga_id, other.as_str())),
            }
        }
        out
    }
}

/// The stock race's product left with anything but its units less the
/// winners'.
fn stock_left(
    plan: &crate::contention::Plan,
    want: usize,
    stock: &BTreeMap<String, i64>,
) -> Option<String> {
    let left = stock.get(crate::contention::LAST_SKU).copied();
    let expected = plan.stock_units - want as i64;
    (left != Some(expected)).then(|| {
        format!(
            "{} holds {left:?} units at the end, expected {expected}",
            crate::contention::LAST_SKU
        )
    })
}

/// The money race's customer left with anything but its balance less the
/// winners' payments.
fn money_left(
    plan: &crate::contention::Plan,
    want: usize,
    balances: &BTreeMap<String, i64>,
) -> Option<String> {
    let left = balances.get(crate::contention::LAST_CUSTOMER).copied();
    let expected = plan.balance_cents - want as i64 * plan.price_cents;
    (left != Some(expected)).then(|| {
        format!(
            "{} holds {left:?} cents at the end, expected {expected}",
            crate::contention::LAST_CUSTOMER
        )
    })
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
    history_audit::history(s)
}
