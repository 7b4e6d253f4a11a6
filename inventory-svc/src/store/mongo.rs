//! The MongoDB inventory store (production).
//!
//! Collections: `products` `{_id: product_id, available}`, `deduct_lines`
//! `{_id: "<request_id>#<line_index>", request_id, line_index, product_id,
//! quantity, status, recorded_at_ms, expire_at}` (unique on `(request_id,
//! line_index)`; TTL on `expire_at`, like the records), and the shared
//! operationHistory. Every integer is stored
//! as an Int64.
//!
//! Deduct touches every product of the order, one line document per line
//! and the operationHistory record; restock and add stock touch several
//! documents too. A single-document update cannot make all of that atomic —
//! all or nothing across the lines, the effect together with its record — so
//! each call runs in a **multi-document transaction**. The driver's
//! `and_run` retries the whole transaction on TransientTransactionError
//! (e.g. a WriteConflict when two calls with the same request id race, or
//! two orders take the same product) and retries an unknown commit result.
//! A refusal decided inside the transaction is returned as a custom error
//! so the transaction is aborted and nothing it claimed survives.

use super::stock::{self, LineStatus, RecordedLine, STOCK, StockTx};
use super::{
    DEDUCT, Deduction, InventoryStore, Line, ProductOperation, ProductView, StockAddition,
};
use async_trait::async_trait;
use bson::{Document, doc};
use futures::FutureExt;
use futures::TryStreamExt;
use mongo_client::{duplicate_key, index};
use mongodb::Database;
use mongodb::error::Error;
use participant_kit::counter::Add;
use participant_kit::mongo::{self as history, MongoHistory, participant_error};
use participant_kit::{
    ActionReply, Admission, CompensationResult, HistoryExpiry, LoggedOperation, OperationLog,
    ParticipantError,
};
use service_kit::purge::PurgeBatch;

const PRODUCTS: &str = "products";
const DEDUCT_LINES: &str = "deduct_lines";
/// Name of the unique index on `deduct_lines (request_id, line_index)`.
const LINE_UNIQUE: &str = "request_id_line_unique";
/// Name of the index listing a product's lines, newest first.
/// A product's deducted lines newest first, ties broken as the listing
/// sorts (request id, line), so its sort is the index's own order.
const PRODUCT_NEWEST: &str = "product_newest";

/// How `deduct_lines` is sharded: by request id (hashed), the key of its
/// unique index; restocks find a deduction's lines by it.
pub const DEDUCT_LINES_SHARD_KEY: mongo_client::ShardKey = mongo_client::ShardKey {
    collection: DEDUCT_LINES,
    field: "request_id",
};

/// The indexes of `deduct_lines`: unique by `(request_id, line_index)`, and
/// a product's lines newest first.
pub fn deduct_line_indexes() -> Vec<mongodb::IndexModel> {
    vec![
        index(LINE_UNIQUE, doc! { "request_id": 1, "line_index": 1 }, true),
        index(
            PRODUCT_NEWEST,
            doc! { "product_id": 1, "recorded_at_ms": -1, "request_id": -1, "line_index": -1 },
            false,
        ),
        mongo_client::ttl_index(history::EXPIRE_INDEX, "expire_at"),
    ]
}

/// Inventory store in a MongoDB database.
#[derive(Clone, Debug)]
pub struct MongoInventoryStore {
    db: Database,
    history: history::HistoryDb,
}

impl MongoInventoryStore {
    /// Uses `db`, creating the indexes the store relies on (idempotent),
    /// with the default history retention.
    pub async fn open(db: Database) -> Result<Self, Error> {
        Self::open_with(db, participant_kit::HistoryRetention::default().keep).await
    }

    /// [`Self::open`], records expiring `keep` after they were recorded
    /// (TTL indexes on `expire_at`).
    pub async fn open_with(db: Database, keep: std::time::Duration) -> Result<Self, Error> {
        history::ensure_history_indexes(&db).await?;
        // Products are keyed by _id = product_id; no other index is needed.
        mongo_client::ensure_indexes(
            &db.collection::<Document>(DEDUCT_LINES),
            deduct_line_indexes(),
            &["product_recent"],
        )
        .await?;
        let history = history::HistoryDb::new(db.clone(), keep);
        Ok(MongoInventoryStore { db, history })
    }
}

fn bad(collection: &str, field: &str) -> Error {
    Error::custom(format!("{collection} document has a bad {field}"))
}

fn line_id(request_id: &str, line_index: i64) -> String {
    // Unambiguous: the line index after the last '#' is all digits.
    format!("{request_id}#{line_index}")
}

/// The availability in a product document, `None` without a document.
fn available_in(product: Option<Document>) -> Result<Option<i64>, Error> {
    product.map(|p| history::counter_in(&STOCK, &p)).transpose()
}

fn recorded_line(d: &Document) -> Result<RecordedLine, Error> {
    let number = |f: &str| {
        mongo_client::integer(DEDUCT_LINES, d, f)
            .map_err(Error::custom)?
            .ok_or_else(|| bad(DEDUCT_LINES, f))
    };
    let status = d
        .get_str("status")
        .ok()
        .and_then(LineStatus::parse)
        .ok_or_else(|| bad(DEDUCT_LINES, "status"))?;
    Ok(RecordedLine {
        line_index: number("line_index")?,
        product_id: d
            .get_str("product_id")
            .map_err(|_| bad(DEDUCT_LINES, "product_id"))?
            .to_owned(),
        quantity: number("quantity")?,
        status,
    })
}

fn product_operation(d: &Document) -> Result<ProductOperation, Error> {
    let text = |f: &str| {
        d.get_str(f)
            .map(str::to_owned)
            .map_err(|_| bad(DEDUCT_LINES, f))
    };
    let number = |f: &str| {
        mongo_client::integer(DEDUCT_LINES, d, f)
            .map_err(Error::custom)?
            .ok_or_else(|| bad(DEDUCT_LINES, f))
    };
    let line_index =
        i32::try_from(number("line_index")?).map_err(|_| bad(DEDUCT_LINES, "line_index"))?;
    Ok(ProductOperation {
        request_id: text("request_id")?,
        kind: DEDUCT.to_owned(),
        status: text("status")?,
        quantity: number("quantity")?,
        line_index: Some(line_index),
        detail: String::new(),
        recorded_at_ms: number("recorded_at_ms")?,
    })
}

impl StockTx for MongoHistory<'_> {
    async fn available(&mut self, product_id: &str) -> Result<Option<i64>, Error> {
        self.counter(&STOCK, product_id).await
    }

    async fn take(&mut self, takes: &[(&str, i64)]) -> Result<bool, Error> {
        self.take_all(&STOCK, takes).await
    }

    async fn give(&mut self, product_id: &str, units: i64) -> Result<Add, Error> {
        self.add(&STOCK, product_id, units).await
    }

    async fn insert_lines(
        &mut self,
        request_id: &str,
        lines: &[Line],
        recorded_at_ms: i64,
    ) -> Result<bool, Error> {
        let expire_at = self.expire_at(recorded_at_ms);
        let documents = (0_i64..).zip(lines).map(|(line_index, line)| {
            doc! {
                "_id": line_id(request_id, line_index),
                "expire_at": expire_at,
                "request_id": request_id,
                "line_index": line_index,
                "product_id": &line.product_id,
                "quantity": line.quantity,
                "status": LineStatus::Deducted.as_str(),
                "recorded_at_ms": recorded_at_ms,
            }
        });
        let inserted = self
            .db
            .collection::<Document>(DEDUCT_LINES)
            .insert_many(documents)
            .session(&mut *self.session)
            .await;
        match inserted {
            Ok(_) => Ok(true),
            Err(e) => match duplicate_key(&e) {
                // Both unique keys of this collection (`_id` and
                // LINE_UNIQUE) encode `(request_id, line_index)`; a
                // duplicate from anything else is a real error.
                Some(dup)
                    if dup.is_index("_id_", &["_id"]) == Some(true)
                        || dup
                            .is_index(LINE_UNIQUE, &["request_id", "line_index"])
                            .unwrap_or(true) =>
                {
                    Ok(false)
                }
                _ => Err(e),
            },
        }
    }

    async fn lines_of(&mut self, request_id: &str) -> Result<Vec<RecordedLine>, Error> {
        let mut cursor = self
            .db
            .collection::<Document>(DEDUCT_LINES)
            .find(doc! { "request_id": request_id })
            .sort(doc! { "request_id": 1, "line_index": 1 })
            .session(&mut *self.session)
            .await?;
        let docs: Vec<Document> = cursor.stream(&mut *self.session).try_collect().await?;
        docs.iter().map(recorded_line).collect()
    }

    async fn mark_restocked(&mut self, request_id: &str) -> Result<u64, Error> {
        let updated = self
            .db
            .collection::<Document>(DEDUCT_LINES)
            .update_many(
                doc! { "request_id": request_id, "status": LineStatus::Deducted.as_str() },
                doc! { "$set": { "status": LineStatus::Restocked.as_str() } },
            )
            .session(&mut *self.session)
            .await?;
        Ok(updated.modified_count)
    }
}

#[async_trait]
impl InventoryStore for MongoInventoryStore {
    async fn deduct(
        &self,
        deduction: Deduction,
        admission: Admission,
    ) -> Result<ActionReply<()>, ParticipantError> {
        history::transact(
            &self.history,
            deduction,
            admission,
            |tx, d, a| stock::deduct(tx, d, a).boxed(),
            |tx, d| stock::replay_deduct(tx, d).boxed(),
        )
        .await
    }

    async fn restock(&self, deduction: Deduction) -> Result<CompensationResult, ParticipantError> {
        history::transact(
            &self.history,
            deduction,
            Admission::Apply,
            |tx, d, _| stock::restock(tx, d).boxed(),
            |tx, d| stock::replay_restock(tx, d).boxed(),
        )
        .await
    }

    async fn add_stock(
        &self,
        addition: StockAddition,
    ) -> Result<ActionReply<i64>, ParticipantError> {
        history::transact(
            &self.history,
            addition,
            Admission::Apply,
            |tx, a, _| stock::add_stock(tx, a).boxed(),
            |tx, a| stock::replay_add_stock(tx, a).boxed(),
        )
        .await
    }

    async fn product(
        &self,
        product_id: String,
        operation_limit: usize,
    ) -> Result<Option<ProductView>, ParticipantError> {
        let product = self
            .db
            .collection::<Document>(PRODUCTS)
            .find_one(doc! { "_id": &product_id })
            .await
            .map_err(participant_error)?;
        let Some(available) = available_in(product).map_err(participant_error)? else {
            return Ok(None);
        };
        let limit = i64::try_from(operation_limit).unwrap_or(i64::MAX);
        let docs: Vec<Document> = self
            .db
            .collection::<Document>(DEDUCT_LINES)
            .find(doc! { "product_id": &product_id })
            .sort(doc! { "recorded_at_ms": -1, "request_id": -1, "line_index": -1 })
            .limit(limit)
            .await
            .map_err(participant_error)?
            .try_collect()
            .await
            .map_err(participant_error)?;
        let lines = docs
            .iter()
            .map(product_operation)
            .collect::<Result<Vec<_>, _>>()
            .map_err(participant_error)?;
        let operations = history::recent_for_subject(&self.db, &product_id, operation_limit)
            .await
            .map_err(participant_error)?;
        Ok(Some(ProductView::merge(
            product_id,
            available,
            lines,
            operations,
            operation_limit,
        )))
    }
}

#[async_trait]
impl OperationLog for MongoInventoryStore {
    async fn operations(
        &self,
        request_id: String,
    ) -> Result<Vec<LoggedOperation>, ParticipantError> {
        let records = history::records_of(&self.db, &request_id)
            .await
            .map_err(participant_error)?;
        // Served by the unique (request_id, line_index) index.
        let docs: Vec<Document> = self
            .db
            .collection::<Document>(DEDUCT_LINES)
            .find(doc! { "request_id": &request_id })
            .sort(doc! { "line_index": 1 })
            .await
            .map_err(participant_error)?
            .try_collect()
            .await
            .map_err(participant_error)?;
        let lines = docs
            .iter()
            .map(|d| {
                let product_id = d
                    .get_str("product_id")
                    .map_err(|_| bad(DEDUCT_LINES, "product_id"))?;
                Ok(product_operation(d)?.logged(product_id.to_owned()))
            })
            .collect::<Result<Vec<_>, Error>>()
            .map_err(participant_error)?;
        Ok(super::logged_operations(records, lines))
    }
}

#[async_trait]
impl HistoryExpiry for MongoInventoryStore {
    async fn purge_recorded_before(
        &self,
        _cutoff_ms: i64,
        _limit: usize,
    ) -> Result<PurgeBatch, ParticipantError> {
        // The TTL indexes on `expire_at` delete expired records.
        Ok(PurgeBatch::default())
    }

    async fn size_bytes(&self) -> Result<u64, ParticipantError> {
        self.history
            .size_bytes(&[history::COLLECTION, PRODUCTS, DEDUCT_LINES])
            .await
    }
}
