//! Reading the stopped services' stores directly (SQLite files read-only,
//! or the MongoDB collections) and checking the invariants against what was
//! seeded and what was ordered.

use crate::drive::{Initial, OrderSpec};
use bson::{Document, doc};
use futures::TryStreamExt;
use orchestrator::saga::{Saga, SagaStatus, StepStatus};
use rusqlite::{Connection, OpenFlags};
use std::collections::{BTreeMap, HashMap};
use std::path::Path;

/// One operationHistory record (the fields the audit needs).
#[derive(Debug, Clone)]
pub struct Op {
    pub request_id: String,
    pub kind: String,
    pub subject: String,
    pub amount: i64,
    pub status: String,
}

/// One row of inventory's deduct_lines.
#[derive(Debug, Clone)]
pub struct DeductLine {
    pub line_index: i64,
    pub product_id: String,
    pub quantity: i64,
    pub status: String,
}

/// Everything the audit reads.
#[derive(Debug, Default)]
pub struct Snapshot {
    pub sagas: Vec<Saga>,
    /// (request_id, kind) → record.
    pub payment_ops: HashMap<(String, String), Op>,
    pub inventory_ops: HashMap<(String, String), Op>,
    /// request_id → lines.
    pub deduct_lines: HashMap<String, Vec<DeductLine>>,
    pub balances: BTreeMap<String, i64>,
    pub stock: BTreeMap<String, i64>,
}

fn open(path: &Path) -> Result<Connection, String> {
    Connection::open_with_flags(
        path,
        OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_NO_MUTEX,
    )
    .map_err(|e| format!("open {} read-only: {e}", path.display()))
}

fn ops_sqlite(conn: &Connection) -> rusqlite::Result<HashMap<(String, String), Op>> {
    let mut stmt =
        conn.prepare("SELECT request_id, kind, subject, amount, status FROM operation_history")?;
    let rows = stmt.query_map([], |r| {
        Ok(Op {
            request_id: r.get(0)?,
            kind: r.get(1)?,
            subject: r.get(2)?,
            amount: r.get(3)?,
            status: r.get(4)?,
        })
    })?;
    let mut out = HashMap::new();
    for op in rows {
        let op = op?;
        out.insert((op.request_id.clone(), op.kind.clone()), op);
    }
    Ok(out)
}

fn pairs(conn: &Connection, sql: &str) -> rusqlite::Result<BTreeMap<String, i64>> {
    let mut stmt = conn.prepare(sql)?;
    let rows = stmt.query_map([], |r| Ok((r.get(0)?, r.get(1)?)))?;
    rows.collect()
}

/// Reads the three embedded stores under `dirs` (payment, inventory,
/// orchestrator data directories).
pub fn read_sqlite(payment: &Path, inventory: &Path, sagas: &Path) -> Result<Snapshot, String> {
    let e = |what: &str| {
        let what = what.to_owned();
        move |err: rusqlite::Error| format!("{what}: {err}")
    };
    let mut snap = Snapshot::default();
    let pay = open(&payment.join("payment.db"))?;
    snap.payment_ops = ops_sqlite(&pay).map_err(e("payment operation_history"))?;
    snap.balances = pairs(&pay, "SELECT customer_id, balance_cents FROM accounts")
        .map_err(e("payment accounts"))?;
    let inv = open(&inventory.join("inventory.db"))?;
    snap.inventory_ops = ops_sqlite(&inv).map_err(e("inventory operation_history"))?;
    snap.stock = pairs(&inv, "SELECT product_id, available FROM products")
        .map_err(e("inventory products"))?;
    {
        let mut stmt = inv
            .prepare(
                "SELECT request_id, line_index, product_id, quantity, status FROM deduct_lines",
            )
            .map_err(e("inventory deduct_lines"))?;
        let rows = stmt
            .query_map([], |r| {
                Ok((
                    r.get::<_, String>(0)?,
                    DeductLine {
                        line_index: r.get(1)?,
                        product_id: r.get(2)?,
                        quantity: r.get(3)?,
                        status: r.get(4)?,
                    },
                ))
            })
            .map_err(e("inventory deduct_lines"))?;
        for row in rows {
            let (rid, line) = row.map_err(e("inventory deduct_lines"))?;
            snap.deduct_lines.entry(rid).or_default().push(line);
        }
    }
    let orch = open(&sagas.join("orchestrator.db"))?;
    let mut stmt = orch
        .prepare("SELECT saga_id, doc FROM sagas")
        .map_err(e("orchestrator sagas"))?;
    let rows = stmt
        .query_map([], |r| Ok((r.get::<_, String>(0)?, r.get::<_, String>(1)?)))
        .map_err(e("orchestrator sagas"))?;
    for row in rows {
        let (id, json) = row.map_err(e("orchestrator sagas"))?;
        let saga: Saga =
            serde_json::from_str(&json).map_err(|err| format!("saga {id}: bad doc: {err}"))?;
        snap.sagas.push(saga);
    }
    Ok(snap)
}

fn int(d: &Document, f: &str) -> Result<i64, String> {
    mongo_client::int64(d, f).ok_or_else(|| format!("document without integer {f}: {d}"))
}

fn text(d: &Document, f: &str) -> Result<String, String> {
    d.get_str(f)
        .map(str::to_owned)
        .map_err(|_| format!("document without string {f}: {d}"))
}

async fn all(db: &mongodb::Database, collection: &str) -> Result<Vec<Document>, String> {
    db.collection::<Document>(collection)
        .find(doc! {})
        .await
        .map_err(|e| format!("{}.{collection}: {e}", db.name()))?
        .try_collect()
        .await
        .map_err(|e| format!("{}.{collection}: {e}", db.name()))
}

async fn ops_mongo(db: &mongodb::Database) -> Result<HashMap<(String, String), Op>, String> {
    let mut out = HashMap::new();
    for d in all(db, participant_kit::mongo::COLLECTION).await? {
        let op = Op {
            request_id: text(&d, "request_id")?,
            kind: text(&d, "kind")?,
            subject: text(&d, "subject")?,
            amount: int(&d, "amount")?,
            status: text(&d, "status")?,
        };
        out.insert((op.request_id.clone(), op.kind.clone()), op);
    }
    Ok(out)
}

/// Reads the three MongoDB databases.
pub async fn read_mongo(
    uri: &str,
    payment: &str,
    inventory: &str,
    sagas: &str,
) -> Result<Snapshot, String> {
    let client = mongodb::Client::with_uri_str(uri)
        .await
        .map_err(|e| format!("connect: {e}"))?;
    let mut snap = Snapshot::default();
    let pay = client.database(payment);
    snap.payment_ops = ops_mongo(&pay).await?;
    for d in all(&pay, "accounts").await? {
        snap.balances
            .insert(text(&d, "_id")?, int(&d, "balance_cents")?);
    }
    let inv = client.database(inventory);
    snap.inventory_ops = ops_mongo(&inv).await?;
    for d in all(&inv, "products").await? {
        snap.stock.insert(text(&d, "_id")?, int(&d, "available")?);
    }
    for d in all(&inv, "deduct_lines").await? {
        snap.deduct_lines
            .entry(text(&d, "request_id")?)
            .or_default()
            .push(DeductLine {
                line_index: int(&d, "line_index")?,
                product_id: text(&d, "product_id")?,
                quantity: int(&d, "quantity")?,
                status: text(&d, "status")?,
            });
    }
    let orch = client.database(sagas);
    for d in all(&orch, "sagas").await? {
        let body = d
            .get_document("saga")
            .map_err(|e| format!("saga document without body: {e}"))?;
        let saga: Saga = bson::from_document(body.clone())
            .map_err(|e| format!("saga {:?}: bad body: {e}", d.get("_id")))?;
        snap.sagas.push(saga);
    }
    Ok(snap)
}

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

fn status_name(s: SagaStatus) -> &'static str {
    s.as_str()
}

/// Checks every invariant; returns the findings (one per invariant) and
/// the figures.
pub fn check(
    snap: &Snapshot,
    orders: &BTreeMap<usize, (OrderSpec, String)>,
    initial: &Initial,
) -> (Vec<Finding>, Figures) {
    let mut figures = Figures::default();
    let by_request: HashMap<&str, &Saga> = snap
        .sagas
        .iter()
        .map(|s| (s.request_id.as_str(), s))
        .collect();
    let by_id: HashMap<&str, &Saga> = snap.sagas.iter().map(|s| (s.saga_id.as_str(), s)).collect();

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

    // 1. Every order the tool created has its saga, terminal and not FAILED.
    let mut terminal = Vec::new();
    for (spec, saga_id) in orders.values() {
        match by_request.get(spec.request_id.as_str()) {
            None => terminal.push(format!("{}: no saga in the store", spec.request_id)),
            Some(s) if s.saga_id != *saga_id => terminal.push(format!(
                "{}: CreateOrder answered saga {saga_id}, the store holds {}",
                spec.request_id, s.saga_id
            )),
            Some(s) if !matches!(s.status, SagaStatus::Completed | SagaStatus::Cancelled) => {
                terminal.push(format!(
                    "{} saga {}: {} ({}) steps: {}",
                    spec.request_id,
                    s.saga_id,
                    status_name(s.status).to_uppercase(),
                    s.reason.as_deref().unwrap_or(""),
                    steps(s)
                ))
            }
            Some(s) => {
                let o = &s.order;
                let same = o.customer_id == spec.customer_id
                    && o.total_cents == spec.total_cents
                    && o.items.len() == spec.items.len()
                    && o.items.iter().zip(&spec.items).all(|(a, (p, q, c))| {
                        a.product_id == *p && a.quantity == *q && a.unit_price_cents == *c
                    });
                if !same {
                    terminal.push(format!(
                        "{} saga {}: stored order differs from the one sent",
                        spec.request_id, s.saga_id
                    ));
                }
            }
        }
    }
    if snap.sagas.len() != orders.len() {
        terminal.push(format!(
            "the store holds {} sagas, the tool created {}",
            snap.sagas.len(),
            orders.len()
        ));
    }

    // 2./3. Effects per saga.
    let mut completed_effects = Vec::new();
    let mut cancelled_effects = Vec::new();
    let mut spent: BTreeMap<String, i64> = BTreeMap::new();
    let mut taken: BTreeMap<String, i64> = BTreeMap::new();
    for (spec, saga_id) in orders.values() {
        let Some(s) = by_id.get(saga_id.as_str()) else {
            continue;
        };
        let pay = format!("{saga_id}:payment");
        let inv = format!("{saga_id}:inventory");
        let get = |m: &HashMap<(String, String), Op>, rid: &str, kind: &str| {
            m.get(&(rid.to_owned(), kind.to_owned())).cloned()
        };
        let mut lines = snap.deduct_lines.get(&inv).cloned().unwrap_or_default();
        lines.sort_by_key(|l| l.line_index);
        let fx = Effect {
            charge: get(&snap.payment_ops, &pay, "charge"),
            refund: get(&snap.payment_ops, &pay, "refund"),
            deduct: get(&snap.inventory_ops, &inv, "deduct"),
            restock: get(&snap.inventory_ops, &inv, "restock"),
            lines,
        };
        match s.status {
            SagaStatus::Completed => {
                let mut bad = Vec::new();
                if !fx.charged() {
                    bad.push("no effective charge");
                } else if fx
                    .charge
                    .as_ref()
                    .is_some_and(|c| c.amount != spec.total_cents || c.subject != spec.customer_id)
                {
                    bad.push("charge amount/customer differs from the order");
                }
                if !fx.deducted() {
                    bad.push("no effective deduction");
                }
                let lines_ok = fx.lines.len() == spec.items.len()
                    && fx.lines_deducted() == spec.items.len()
                    && fx
                        .lines
                        .iter()
                        .zip(&spec.items)
                        .all(|(l, (p, q, _))| l.product_id == *p && l.quantity == *q);
                if !lines_ok {
                    bad.push("deducted lines differ from the order");
                }
                if !bad.is_empty() {
                    completed_effects.push(format!(
                        "saga {saga_id} ({}): {}; {}\n{}",
                        spec.request_id,
                        bad.join(", "),
                        fx.describe(),
                        history(s)
                    ));
                }
                *spent.entry(spec.customer_id.clone()).or_default() += spec.total_cents;
                for (p, q, _) in &spec.items {
                    *taken.entry(p.clone()).or_default() += q;
                }
            }
            SagaStatus::Cancelled if fx.charged() || fx.deducted() || fx.lines_deducted() > 0 => {
                cancelled_effects.push(format!(
                    "saga {saga_id} ({}): does not net to zero; {}\n{}",
                    spec.request_id,
                    fx.describe(),
                    history(s)
                ));
            }
            _ => {}
        }
    }

    // 4. Money per customer and stock per product.
    let mut money = Vec::new();
    for (c, start) in &initial.balances {
        let end = snap.balances.get(c).copied();
        let expected = spent.get(c).copied().unwrap_or(0);
        match end {
            Some(end) if start - end == expected => {}
            Some(end) => money.push(format!(
                "{c}: initial {start} − final {end} = {} but COMPLETED orders total {expected}",
                start - end
            )),
            None => money.push(format!("{c}: account missing")),
        }
    }
    let mut stock = Vec::new();
    for (p, start) in &initial.stock {
        let end = snap.stock.get(p).copied();
        let expected = taken.get(p).copied().unwrap_or(0);
        match end {
            Some(end) if start - end == expected => {}
            Some(end) => stock.push(format!(
                "{p}: initial {start} − final {end} = {} but COMPLETED orders hold {expected} units",
                start - end
            )),
            None => stock.push(format!("{p}: product missing")),
        }
    }

    // 5. No saga-step operation that belongs to no saga of this run.
    let mut orphans = Vec::new();
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
                orphans.push(format!(
                    "{} {} {} ({})",
                    op.kind, op.request_id, op.status, op.subject
                ));
            }
        }
    }

    let findings = vec![
        Finding {
            name: "every saga COMPLETED or CANCELLED in the store (none FAILED, none missing)"
                .into(),
            problems: terminal,
        },
        Finding {
            name: "every COMPLETED order: exactly one effective charge and one effective deduction"
                .into(),
            problems: completed_effects,
        },
        Finding {
            name: "every CANCELLED order nets to zero".into(),
            problems: cancelled_effects,
        },
        Finding {
            name: "money: initial − final balance = Σ COMPLETED totals, per customer".into(),
            problems: money,
        },
        Finding {
            name: "stock: initial − final = Σ COMPLETED quantities, per product".into(),
            problems: stock,
        },
        Finding {
            name: "no charge/refund/deduct/restock outside this run's sagas".into(),
            problems: orphans,
        },
    ];
    (findings, figures)
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
