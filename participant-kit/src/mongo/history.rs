//! The barrier's records in MongoDB.
//!
//! A record's `_id` is `<kind>:<request_id>` (kinds contain no `:`), and a
//! unique index on `(request_id, kind)` states the guarantee explicitly.
//! [`HistoryTx::insert`] is one `insert`: a duplicate key on either index
//! means the key was taken (and MongoDB has aborted the transaction).
//! [`HistoryTx::insert_or_get`] is one `findOneAndUpdate` with `upsert` and
//! `$setOnInsert`, returning the document as it was *before*: `None` means
//! this call inserted it, anything else is the record that already held the
//! key, and the transaction goes on. Inside a transaction a concurrent claim
//! of the same key surfaces as a WriteConflict (TransientTransactionError)
//! and the whole transaction is retried — it then sees the winner.

use super::indexes::{COLLECTION, UNIQUE_INDEX};
use super::participant_error;
use crate::{HistoryTx, OperationRecord, ParticipantError, RecordStatus};
use bson::{Document, doc};
use mongodb::error::Error;
use mongodb::options::ReturnDocument;
use mongodb::{ClientSession, Collection, Database};

/// A participant's database and how long its records live there: what
/// [`transact`](super::transact) runs on.
#[derive(Clone, Debug)]
pub struct HistoryDb {
    db: Database,
    keep: std::time::Duration,
    limit: super::ConflictLimit,
}

impl HistoryDb {
    /// Records in `db` expire `keep` after they were recorded.
    pub fn new(db: Database, keep: std::time::Duration) -> Self {
        HistoryDb {
            db,
            keep,
            limit: super::ConflictLimit::default(),
        }
    }

    /// How many of this participant's transactions run at once.
    pub fn limit(&self) -> &super::ConflictLimit {
        &self.limit
    }

    /// The database.
    pub fn db(&self) -> &Database {
        &self.db
    }

    /// Bytes of `collections` by the server's accounting (collStats size
    /// + index size), as a participant reports it.
    pub async fn size_bytes(&self, collections: &[&str]) -> Result<u64, ParticipantError> {
        mongo_client::collection_bytes(&self.db, collections)
            .await
            .map_err(participant_error)
    }
}

/// The `expire_at` of something recorded at `recorded_at_ms` and kept
/// `keep`.
fn expire_at(recorded_at_ms: i64, keep: std::time::Duration) -> bson::DateTime {
    let keep = i64::try_from(keep.as_millis()).unwrap_or(i64::MAX);
    bson::DateTime::from_millis(recorded_at_ms.saturating_add(keep))
}

/// The barrier's view of an open MongoDB transaction: the database and the
/// session the transaction runs on. Participants add their own effects by
/// implementing their storage traits for this type.
pub struct MongoHistory<'s> {
    /// The participant's database.
    pub db: &'s Database,
    /// The session the transaction runs on.
    pub session: &'s mut ClientSession,
    keep: std::time::Duration,
}

impl<'s> MongoHistory<'s> {
    /// The transaction on `session` in `history`'s database.
    pub fn new(history: &'s HistoryDb, session: &'s mut ClientSession) -> Self {
        MongoHistory {
            db: &history.db,
            session,
            keep: history.keep,
        }
    }

    /// The `expire_at` date of anything recorded at `recorded_at_ms` in
    /// this transaction (records, inventory's order lines).
    pub fn expire_at(&self, recorded_at_ms: i64) -> bson::DateTime {
        expire_at(recorded_at_ms, self.keep)
    }

    fn collection(&self) -> Collection<Document> {
        self.db.collection(COLLECTION)
    }
}

fn id(request_id: &str, kind: &str) -> String {
    format!("{kind}:{request_id}")
}

fn to_document(r: &OperationRecord, keep: std::time::Duration) -> Document {
    doc! {
        "expire_at": expire_at(r.recorded_at_ms, keep),
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

/// Decodes a stored record (integers as Int64 or Int32).
pub fn from_document(d: &Document) -> Result<OperationRecord, Error> {
    let text = |f: &str| d.get_str(f).map(str::to_owned).map_err(|_| bad(f));
    let number = |f: &str| {
        mongo_client::integer(COLLECTION, d, f)
            .map_err(Error::custom)?
            .ok_or_else(|| bad(f))
    };
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

    async fn insert(&mut self, r: &OperationRecord) -> Result<bool, Error> {
        let mut document = to_document(r, self.keep);
        document.insert("_id", id(&r.request_id, &r.kind));
        match self
            .collection()
            .insert_one(document)
            .session(&mut *self.session)
            .await
        {
            Ok(_) => Ok(true),
            Err(e) => match mongo_client::duplicate_key(&e) {
                // Both unique keys (`_id` and UNIQUE_INDEX) encode
                // `(request_id, kind)`.
                Some(dup)
                    if dup.is_index("_id_", &["_id"]) == Some(true)
                        || dup
                            .is_index(UNIQUE_INDEX, &["request_id", "kind"])
                            .unwrap_or(true) =>
                {
                    Ok(false)
                }
                _ => Err(e),
            },
        }
    }

    async fn insert_or_get(
        &mut self,
        r: &OperationRecord,
    ) -> Result<Option<OperationRecord>, Error> {
        let before = self
            .collection()
            .find_one_and_update(
                doc! { "_id": id(&r.request_id, &r.kind), "request_id": &r.request_id },
                doc! { "$setOnInsert": to_document(r, self.keep) },
            )
            .upsert(true)
            .return_document(ReturnDocument::Before)
            .session(&mut *self.session)
            .await?;
        before.as_ref().map(from_document).transpose()
    }

    async fn get(
        &mut self,
        request_id: &str,
        kind: &str,
    ) -> Result<Option<OperationRecord>, Error> {
        let found = self
            .collection()
            .find_one(doc! { "_id": id(request_id, kind), "request_id": request_id })
            .session(&mut *self.session)
            .await?;
        found.as_ref().map(from_document).transpose()
    }
}

/// Every record under `request_id` (one per kind), oldest first — what
/// `ListOperations` shows. Served by the unique `(request_id, kind)` index;
/// a request id has one record per kind (a handful), so they are put in
/// time order here rather than by a sort stage in the server.
pub async fn records_of(db: &Database, request_id: &str) -> Result<Vec<OperationRecord>, Error> {
    use futures::TryStreamExt;
    let docs: Vec<Document> = db
        .collection::<Document>(COLLECTION)
        .find(doc! { "request_id": request_id })
        .await?
        .try_collect()
        .await?;
    let mut records = docs
        .iter()
        .map(from_document)
        .collect::<Result<Vec<_>, _>>()?;
    records.sort_by(|a, b| {
        (a.recorded_at_ms, a.kind.as_str()).cmp(&(b.recorded_at_ms, b.kind.as_str()))
    });
    Ok(records)
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
