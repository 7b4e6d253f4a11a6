//! The stopped services' stores read directly — SQLite files read-only, or
//! the MongoDB collections — into one [`Snapshot`] for the audit. Reading
//! the stores, not asking the services, is the point: the audit must see
//! what survived the SIGKILLs, not what a service believes.

use bson::{Document, doc};
use futures::TryStreamExt;
use orchestrator::saga::Saga;
use rusqlite::{Connection, OpenFlags};
use std::collections::HashMap;
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

/// Everything the audit reads: every stored row, as stored — nothing is
/// keyed or deduplicated here, so a second row under one key (which the
/// unique indexes should make impossible) reaches the audit as a second
/// row.
#[derive(Debug, Default)]
pub struct Snapshot {
    pub sagas: Vec<Saga>,
    /// Every operationHistory row of payment-svc.
    pub payment_ops: Vec<Op>,
    /// Every operationHistory row of inventory-svc.
    pub inventory_ops: Vec<Op>,
    /// request_id → lines (every row).
    pub deduct_lines: HashMap<String, Vec<DeductLine>>,
    /// Every accounts row: (customer, balance).
    pub balances: Vec<(String, i64)>,
    /// Every products row: (product, available).
    pub stock: Vec<(String, i64)>,
    /// loyalty-svc's store (`--third-step loyalty`).
    pub loyalty: Option<LoyaltyStore>,
}

/// loyalty-svc's store: its operationHistory and its points.
#[derive(Debug, Default)]
pub struct LoyaltyStore {
    /// Every operationHistory row.
    pub ops: Vec<Op>,
    /// Every loyalty_points row: (customer, points).
    pub points: Vec<(String, i64)>,
}

fn open(path: &Path) -> Result<Connection, String> {
    embedded_store::connect(
        path,
        OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_NO_MUTEX,
    )
    .map_err(|e| format!("open {} read-only: {e}", path.display()))
}

fn ops_sqlite(conn: &Connection) -> rusqlite::Result<Vec<Op>> {
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
    rows.collect()
}

fn pairs(conn: &Connection, sql: &str) -> rusqlite::Result<Vec<(String, i64)>> {
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

/// Reads loyalty-svc's embedded store in its data dir `dir`.
pub fn read_loyalty_sqlite(dir: &Path) -> Result<LoyaltyStore, String> {
    let conn = open(&dir.join("loyalty.db"))?;
    let ops = ops_sqlite(&conn).map_err(|e| format!("loyalty operation_history: {e}"))?;
    let table = loyalty_svc::rules::POINTS;
    let sql = format!("SELECT {}, {} FROM {}", table.key, table.value, table.table);
    let points = pairs(&conn, &sql).map_err(|e| format!("loyalty {}: {e}", table.table))?;
    Ok(LoyaltyStore { ops, points })
}

/// Reads loyalty-svc's MongoDB database `db`.
pub async fn read_loyalty_mongo(uri: &str, db: &str) -> Result<LoyaltyStore, String> {
    let client = mongodb::Client::with_uri_str(uri)
        .await
        .map_err(|e| format!("connect: {e}"))?;
    let db = client.database(db);
    let ops = ops_mongo(&db).await?;
    let table = loyalty_svc::rules::POINTS;
    let mut points = Vec::new();
    for d in all(&db, table.table).await? {
        points.push((text(&d, "_id")?, int(&d, table.value)?));
    }
    Ok(LoyaltyStore { ops, points })
}

fn int(d: &Document, f: &str) -> Result<i64, String> {
    mongo_client::integer("snapshot", d, f)
        .map_err(|wrong| wrong.to_string())?
        .ok_or_else(|| format!("document without integer {f}: {d}"))
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

async fn ops_mongo(db: &mongodb::Database) -> Result<Vec<Op>, String> {
    let mut out = Vec::new();
    for d in all(db, participant_kit::mongo::COLLECTION).await? {
        let op = Op {
            request_id: text(&d, "request_id")?,
            kind: text(&d, "kind")?,
            subject: text(&d, "subject")?,
            amount: int(&d, "amount")?,
            status: text(&d, "status")?,
        };
        out.push(op);
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
            .push((text(&d, "_id")?, int(&d, "balance_cents")?));
    }
    let inv = client.database(inventory);
    snap.inventory_ops = ops_mongo(&inv).await?;
    for d in all(&inv, "products").await? {
        snap.stock.push((text(&d, "_id")?, int(&d, "available")?));
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

/// Not-terminal sagas whose lease names `owner`, read from the SQLite saga
/// store while the orchestrators run.
pub fn leased_to_sqlite(dir: &Path, owner: &str) -> Result<Vec<String>, String> {
    let conn = open(&dir.join("orchestrator.db"))?;
    let mut stmt = conn
        .prepare(
            "SELECT saga_id FROM sagas WHERE status IN ('running', 'compensating') AND lease_owner = ?1",
        )
        .map_err(|e| format!("orchestrator sagas: {e}"))?;
    let rows = stmt
        .query_map([owner], |r| r.get::<_, String>(0))
        .map_err(|e| format!("orchestrator sagas: {e}"))?;
    rows.collect::<Result<_, _>>()
        .map_err(|e| format!("orchestrator sagas: {e}"))
}

/// Not-terminal sagas whose lease names `owner`, on MongoDB.
pub async fn leased_to_mongo(
    client: &mongodb::Client,
    db: &str,
    owner: &str,
) -> Result<Vec<String>, String> {
    let docs: Vec<Document> = client
        .database(db)
        .collection::<Document>("sagas")
        .find(doc! { "status": { "$in": ["running", "compensating"] }, "lease_owner": owner })
        .projection(doc! { "_id": 1 })
        .await
        .map_err(|e| format!("{db}.sagas: {e}"))?
        .try_collect()
        .await
        .map_err(|e| format!("{db}.sagas: {e}"))?;
    docs.iter().map(|d| text(d, "_id")).collect()
}
