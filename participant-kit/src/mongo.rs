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

use crate::{Failure, HistoryTx, OperationRecord, ParticipantError, RecordStatus};
use bson::{Document, doc};
use futures::FutureExt;
use futures::future::BoxFuture;
use mongodb::error::Error;
use mongodb::options::ReturnDocument;
use mongodb::{ClientSession, Collection, Database, IndexModel};

/// Collection name.
pub const COLLECTION: &str = "operation_history";
/// Name of the unique index on `(request_id, kind)`.
pub const UNIQUE_INDEX: &str = "request_id_kind_unique";

/// Indexes the collection needs (created idempotently at start-up).
pub fn indexes() -> Vec<IndexModel> {
    use mongo_client::index;
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
    /// The participant's database.
    pub db: &'s Database,
    /// The session the transaction runs on.
    pub session: &'s mut ClientSession,
}

impl<'s> MongoHistory<'s> {
    /// The transaction on `session` in `db`.
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
    let number = |f: &str| mongo_client::int64(d, f).ok_or_else(|| bad(f));
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

    async fn get(
        &mut self,
        request_id: &str,
        kind: &str,
    ) -> Result<Option<OperationRecord>, Error> {
        let found = self
            .collection()
            .find_one(doc! { "_id": id(request_id, kind) })
            .session(&mut *self.session)
            .await?;
        found.as_ref().map(from_document).transpose()
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

/// Every record under `request_id` (one per kind), oldest first — what
/// `ListOperations` shows. Served by the unique `(request_id, kind)` index.
pub async fn records_of(db: &Database, request_id: &str) -> Result<Vec<OperationRecord>, Error> {
    use futures::TryStreamExt;
    let docs: Vec<Document> = db
        .collection::<Document>(COLLECTION)
        .find(doc! { "request_id": request_id })
        .sort(doc! { "recorded_at_ms": 1, "kind": 1 })
        .await?
        .try_collect()
        .await?;
    docs.iter().map(from_document).collect()
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

/// Runs one participant rule (effect + operationHistory record) in a
/// multi-document transaction on `db`, written once for both participants.
///
/// Why a transaction: the effect and its record live in different
/// documents, and a single-document update cannot make both atomic. The
/// driver's `and_run` retries the whole rule on TransientTransactionError
/// (e.g. a WriteConflict when two calls with the same request id race) and
/// retries an unknown commit result. A refusal decided inside the rule is
/// returned as a custom error, so the transaction aborts and nothing it
/// claimed survives; it comes back out as the same [`ParticipantError`].
pub async fn transact<I, R, F>(db: &Database, input: I, rule: F) -> Result<R, ParticipantError>
where
    I: Send + Sync,
    R: Send,
    F: for<'a> Fn(&'a mut MongoHistory<'a>, &'a I) -> BoxFuture<'a, Result<R, Failure<Error>>>
        + Send
        + Sync,
{
    let mut session = db.client().start_session().await.map_err(unavailable)?;
    let outcome = session
        .start_transaction()
        .and_run((db, &input, &rule), |session, (db, input, rule)| {
            async move {
                let mut tx = MongoHistory::new(db, session);
                match rule(&mut tx, input).await {
                    Ok(r) => Ok(r),
                    Err(Failure::Store(e)) => Err(e),
                    Err(Failure::Refused(e)) => Err(Error::custom(e)),
                }
            }
            .boxed()
        })
        .await;
    outcome.map_err(|e| match e.get_custom::<ParticipantError>() {
        Some(refused) => refused.clone(),
        None => unavailable(e),
    })
}

/// A driver error as the participant reports it: UNAVAILABLE, retryable.
pub fn unavailable(e: Error) -> ParticipantError {
    ParticipantError::Store(e.to_string())
}
