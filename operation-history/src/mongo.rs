//! The operationHistory collection in MongoDB.
//!
//! A record's `_id` is `<kind>:<request_id>` (kinds contain no `:`), and a
//! unique index on `(request_id, kind)` states the guarantee explicitly.
//! [`HistoryTx::insert_or_get`] is one `findOneAndUpdate` with `upsert` and
//! `$setOnInsert`, returning the document as it was *before*: `None` means
//! this call inserted it, anything else is the record that already held the
//! key. Inside a transaction a concurrent claim of the same key surfaces as
//! a WriteConflict (TransientTransactionError) and the whole transaction is
//! retried — it then sees the winner.

use crate::{HistoryTx, OperationRecord, RecordStatus};
use bson::{Document, doc};
use mongodb::error::Error;
use mongodb::options::ReturnDocument;
use mongodb::{ClientSession, Collection, Database, IndexModel};

/// Collection name.
pub const COLLECTION: &str = "operation_history";
/// Name of the unique index on `(request_id, kind)`.
pub const UNIQUE_INDEX: &str = "request_id_kind_unique";

/// Indexes the collection needs (created idempotently at start-up).
pub fn indexes() -> Vec<IndexModel> {
    use service_kit::mongo::index;
    vec![
        index(UNIQUE_INDEX, doc! { "request_id": 1, "kind": 1 }, true),
        index(
            "subject_recent",
            doc! { "subject": 1, "recorded_at_ms": -1 },
            false,
        ),
    ]
}

/// The barrier's view of an open MongoDB transaction: the database and the
/// session the transaction runs on. Participants add their own effects by
/// implementing their storage traits for this type.
pub struct MongoHistory<'s> {
    pub db: &'s Database,
    pub session: &'s mut ClientSession,
}

impl<'s> MongoHistory<'s> {
    pub fn new(db: &'s Database, session: &'s mut ClientSession) -> Self {
        MongoHistory { db, session }
    }

    fn collection(&self) -> Collection<Document> {
        self.db.collection(COLLECTION)
    }
}

fn id(request_id: &str, kind: &str) -> String {
    format!("{kind}:{request_id}")
}

fn to_document(r: &OperationRecord) -> Document {
    doc! {
        "request_id": &r.request_id,
        "kind": &r.kind,
        "subject": &r.subject,
        "amount": r.amount,
        "fingerprint": &r.fingerprint,
        "parameters": &r.parameters,
        "status": r.status.as_str(),
        "detail": &r.detail,
        "recorded_at_ms": r.recorded_at_ms,
    }
}

fn bad(field: &str) -> Error {
    Error::custom(format!("operation_history document has a bad {field}"))
}

/// Decodes a stored record. Integers are read leniently (int32 or int64).
pub fn from_document(d: &Document) -> Result<OperationRecord, Error> {
    let text = |f: &str| d.get_str(f).map(str::to_owned).map_err(|_| bad(f));
    let number = |f: &str| service_kit::mongo::int64(d, f).ok_or_else(|| bad(f));
    let status = RecordStatus::parse(d.get_str("status").map_err(|_| bad("status"))?)
        .ok_or_else(|| bad("status"))?;
    Ok(OperationRecord {
        request_id: text("request_id")?,
        kind: text("kind")?,
        subject: text("subject")?,
        amount: number("amount")?,
        fingerprint: text("fingerprint")?,
        parameters: text("parameters")?,
        status,
        detail: text("detail")?,
        recorded_at_ms: number("recorded_at_ms")?,
    })
}

impl HistoryTx for MongoHistory<'_> {
    type Error = Error;

    async fn insert_or_get(
        &mut self,
        r: &OperationRecord,
    ) -> Result<Option<OperationRecord>, Error> {
        let before = self
            .collection()
            .find_one_and_update(
                doc! { "_id": id(&r.request_id, &r.kind) },
                doc! { "$setOnInsert": to_document(r) },
            )
            .upsert(true)
            .return_document(ReturnDocument::Before)
            .session(&mut *self.session)
            .await?;
        before.as_ref().map(from_document).transpose()
    }

    async fn set_status(
        &mut self,
        request_id: &str,
        kind: &str,
        status: RecordStatus,
        detail: &str,
    ) -> Result<(), Error> {
        let updated = self
            .collection()
            .update_one(
                doc! { "_id": id(request_id, kind) },
                doc! { "$set": { "status": status.as_str(), "detail": detail } },
            )
            .session(&mut *self.session)
            .await?;
        if updated.matched_count == 1 {
            Ok(())
        } else {
            Err(Error::custom(format!(
                "operation {kind}:{request_id} vanished inside its transaction"
            )))
        }
    }
}

/// The most recent records about one subject, newest first.
pub async fn recent_for_subject(
    db: &Database,
    subject: &str,
    limit: usize,
) -> Result<Vec<OperationRecord>, Error> {
    use futures::TryStreamExt;
    let limit = i64::try_from(limit).unwrap_or(i64::MAX);
    let docs: Vec<Document> = db
        .collection::<Document>(COLLECTION)
        .find(doc! { "subject": subject })
        .sort(doc! { "recorded_at_ms": -1, "request_id": -1 })
        .limit(limit)
        .await?
        .try_collect()
        .await?;
    docs.iter().map(from_document).collect()
}
