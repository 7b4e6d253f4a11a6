//! The operationHistory collection in MongoDB.
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
//!
//! [`transact`] runs one participant rule in a multi-document transaction,
//! written once for both participants.
//!
//! Retention: every record carries `expire_at`, a BSON Date (its recording
//! time plus the history retention, [`HistoryDb`]), and a TTL index on it
//! lets the server delete it some time after that date. A changed
//! retention applies to records written from then on.

use crate::counter::{Add, Counter, Take};
use crate::{Admission, Failure, HistoryTx, OperationRecord, ParticipantError, RecordStatus};
use bson::{Document, doc};
use futures::FutureExt;
use futures::future::BoxFuture;
use mongodb::error::Error;
use mongodb::options::{ReadConcern, ReturnDocument};
use mongodb::{ClientSession, Collection, Database, IndexModel};

/// Collection name.
pub const COLLECTION: &str = "operation_history";
/// Name of the unique index on `(request_id, kind)`.
pub const UNIQUE_INDEX: &str = "request_id_kind_unique";
/// Name of the TTL index on `expire_at` (also used by inventory's lines).
pub const EXPIRE_INDEX: &str = "expire_at_ttl";

/// How the operationHistory is sharded: by request id (hashed), the key of
/// the barrier's unique index; every lookup names it, so it goes to one
/// shard. (A participant call's transaction then spans the record's shard
/// and the account's or product's: a distributed commit in a sharded
/// cluster.)
pub const SHARD_KEY: mongo_client::ShardKey = mongo_client::ShardKey {
    collection: COLLECTION,
    field: "request_id",
};

/// How a counter's collection (accounts, products) is sharded: by its
/// `_id` (the customer or product id, hashed), which every take and add
/// names.
pub fn counter_shard_key(counter: &crate::counter::Counter) -> mongo_client::ShardKey {
    mongo_client::ShardKey {
        collection: counter.table,
        field: "_id",
    }
}

/// Indexes the collection needs: the barrier's unique key, and a subject's
/// records newest first (ties broken by request id, so the listing's sort
/// is the index's own order and never a sort in memory).
pub fn indexes() -> Vec<IndexModel> {
    use mongo_client::index;
    vec![
        index(UNIQUE_INDEX, doc! { "request_id": 1, "kind": 1 }, true),
        index(
            "subject_newest",
            doc! { "subject": 1, "recorded_at_ms": -1, "request_id": -1 },
            false,
        ),
        mongo_client::ttl_index(EXPIRE_INDEX, "expire_at"),
    ]
}

/// Creates the operationHistory's [`indexes`] in `db` (idempotent), dropping
/// the one they replace (`subject_recent`, without the request-id tie
/// break).
pub async fn ensure_history_indexes(db: &Database) -> Result<(), Error> {
    mongo_client::ensure_indexes(
        &db.collection::<Document>(COLLECTION),
        indexes(),
        &["subject_recent"],
    )
    .await
}

/// A participant's database and how long its records live there: what
/// [`transact`] runs on.
#[derive(Clone, Debug)]
pub struct HistoryDb {
    db: Database,
    keep: std::time::Duration,
}

impl HistoryDb {
    /// Records in `db` expire `keep` after they were recorded.
    pub fn new(db: Database, keep: std::time::Duration) -> Self {
        HistoryDb { db, keep }
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

/// Integer types a counter may hold: Int32 (small numbers written by tools)
/// or Int64.
fn integer_types() -> bson::Bson {
    bson::Bson::Array(vec!["int".into(), "long".into()])
}

/// The counter in `document`; a value of another type (or none) is an
/// error naming the document, never "nothing" (see `mongo_client::fields`).
pub fn counter_in(c: &Counter, document: &Document) -> Result<i64, Error> {
    match mongo_client::integer(c.table, document, c.value) {
        Ok(Some(value)) => Ok(value),
        Ok(None) => Err(Error::custom(mongo_client::NotAnInteger {
            collection: c.table.into(),
            id: document
                .get("_id")
                .map(ToString::to_string)
                .unwrap_or_default(),
            field: c.value.into(),
            found: "nothing".into(),
        })),
        Err(wrong) => Err(Error::custom(wrong)),
    }
}

impl MongoHistory<'_> {
    /// `$inc` of the counter under `key` by `by` where `bound` holds of
    /// its value (and the value is an integer); the document after, `None`
    /// when nothing matched.
    async fn move_counter(
        &mut self,
        c: &Counter,
        key: &str,
        bound: Document,
        by: i64,
    ) -> Result<Option<Document>, Error> {
        let mut condition = bound;
        condition.insert("$type", integer_types());
        self.db
            .collection::<Document>(c.table)
            .find_one_and_update(
                doc! { "_id": key, c.value: condition },
                doc! { "$inc": { c.value: by } },
            )
            .return_document(ReturnDocument::After)
            .session(&mut *self.session)
            .await
    }

    async fn counter_document(
        &mut self,
        c: &Counter,
        key: &str,
    ) -> Result<Option<Document>, Error> {
        self.db
            .collection::<Document>(c.table)
            .find_one(doc! { "_id": key })
            .session(&mut *self.session)
            .await
    }

    /// The counter under `key` in this transaction, `None` when absent.
    pub async fn counter(&mut self, c: &Counter, key: &str) -> Result<Option<i64>, Error> {
        match self.counter_document(c, key).await? {
            Some(document) => counter_in(c, &document).map(Some),
            None => Ok(None),
        }
    }

    /// Takes `by` from the counter under `key` if it holds that much: one
    /// `findAndModify` whose filter is the bound, read only when it matched
    /// nothing, to say why.
    pub async fn take(&mut self, c: &Counter, key: &str, by: i64) -> Result<Take, Error> {
        if let Some(after) = self.move_counter(c, key, doc! { "$gte": by }, -by).await? {
            return Ok(Take::Done(counter_in(c, &after)?));
        }
        Ok(match self.counter(c, key).await? {
            None => Take::Missing,
            Some(have) => Take::Short { have },
        })
    }

    /// Takes every `(key, by)` if each counter holds its amount, in one
    /// `update` command of conditional statements: true when all matched.
    /// On false some may have been taken — the caller must roll back
    /// ([`Failure::RollBack`]). Keys must be distinct.
    pub async fn take_all(&mut self, c: &Counter, takes: &[(&str, i64)]) -> Result<bool, Error> {
        let updates: Vec<Document> = takes
            .iter()
            .map(|(key, by)| {
                doc! {
                    "q": { "_id": *key, c.value: { "$gte": *by, "$type": integer_types() } },
                    "u": { "$inc": { c.value: -*by } },
                }
            })
            .collect();
        let reply = self
            .db
            .run_command(doc! { "update": c.table, "updates": updates, "ordered": true })
            .session(&mut *self.session)
            .await?;
        if let Ok(errors) = reply.get_array("writeErrors")
            && !errors.is_empty()
        {
            return Err(Error::custom(ParticipantError::Store(format!(
                "update of {} failed: {errors:?}",
                c.table
            ))));
        }
        let matched = mongo_client::integer(c.table, &reply, "n").map_err(Error::custom)?;
        Ok(matched == i64::try_from(takes.len()).ok())
    }

    /// Adds `by` to the counter under `key`, creating it if absent, unless
    /// the sum would overflow: one `findAndModify` whose filter is the
    /// bound; when it matches nothing, a read says whether the counter is
    /// absent (then it is inserted) or full.
    pub async fn add(&mut self, c: &Counter, key: &str, by: i64) -> Result<Add, Error> {
        let bound = doc! { "$lte": i64::MAX - by.max(0) };
        if let Some(after) = self.move_counter(c, key, bound, by).await? {
            return Ok(Add::Done(counter_in(c, &after)?));
        }
        if let Some(have) = self.counter(c, key).await? {
            return Ok(Add::Overflow { have });
        }
        self.db
            .collection::<Document>(c.table)
            .insert_one(doc! { "_id": key, c.value: by })
            .session(&mut *self.session)
            .await?;
        Ok(Add::Done(by))
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

/// A rule over the open transaction: `apply(tx, input, admission)`.
pub type Apply<I, R> = for<'a> fn(
    &'a mut MongoHistory<'a>,
    &'a I,
    &'a Admission,
) -> BoxFuture<'a, Result<R, Failure<Error>>>;

/// The answer from the record when the key was taken: `replay(tx, input)`.
pub type Replay<I, R> =
    for<'a> fn(&'a mut MongoHistory<'a>, &'a I) -> BoxFuture<'a, Result<R, Failure<Error>>>;

/// How a rule left its transaction other than by a store error: carried
/// through the driver as a custom error, which aborts the transaction.
#[derive(Debug, Clone)]
enum Escape {
    Refused(ParticipantError),
    Taken,
    RollBack,
}

/// Runs a participant rule over `input` in a multi-document transaction on
/// `db`, written once for both participants.
///
/// Why a transaction: the effect and its record live in different
/// documents, and a single-document update cannot make both atomic. The
/// transaction reads at snapshot (unless the URI set a read concern) and
/// commits with the client's write concern (majority + journal unless the
/// URI says otherwise; see `mongo_client::connect`). The driver's `and_run`
/// retries the whole rule on TransientTransactionError (e.g. a WriteConflict
/// when two calls with the same request id race) and retries an unknown
/// commit result. As in `crate::sqlite::transact`: when the rule finds its
/// key taken the transaction is aborted and `replay` answers from the record
/// in a second transaction; when it finds a business refusal after part of
/// its effect, it is aborted and `apply` runs again with
/// [`Admission::Verify`] to record why.
pub async fn transact<I, R>(
    history: &HistoryDb,
    input: I,
    admission: Admission,
    apply: Apply<I, R>,
    replay: Replay<I, R>,
) -> Result<R, ParticipantError>
where
    I: Send + Sync,
    R: Send,
{
    let db = history;
    let mut session = db
        .db
        .client()
        .start_session()
        .await
        .map_err(participant_error)?;
    let mut admission = admission;
    loop {
        let context = (&input, admission.clone());
        let applied = run(db, &mut session, &context, |tx, context| {
            apply(tx, context.0, &context.1)
        })
        .await;
        match applied {
            Err(Escape::Taken) => break,
            Err(Escape::RollBack) if admission == Admission::Apply => {
                admission = Admission::Verify;
            }
            Err(Escape::RollBack) => {
                return Err(Failure::<Error>::RollBack.into_participant_error());
            }
            Err(Escape::Refused(e)) => return Err(e),
            Ok(reply) => return Ok(reply),
        }
    }
    run(db, &mut session, &input, replay)
        .await
        .map_err(|escape| match escape {
            Escape::Refused(e) => e,
            Escape::Taken | Escape::RollBack => ParticipantError::Corrupt(
                "replaying a recorded operation asked for a rollback".into(),
            ),
        })
}

/// One transaction of `rule` over `context`: its reply, or how it escaped.
async fn run<C, R, F>(
    db: &HistoryDb,
    session: &mut ClientSession,
    context: &C,
    rule: F,
) -> Result<R, Escape>
where
    C: Sync,
    R: Send,
    F: for<'a> Fn(&'a mut MongoHistory<'a>, &'a C) -> BoxFuture<'a, Result<R, Failure<Error>>>
        + Send
        + Sync,
{
    let mut transaction = session.start_transaction();
    if db.db.read_concern().is_none() {
        transaction = transaction.read_concern(ReadConcern::snapshot());
    }
    let outcome = transaction
        .and_run((db, context, &rule), |session, (db, context, rule)| {
            async move {
                let mut tx = MongoHistory::new(db, session);
                rule(&mut tx, context)
                    .await
                    .map_err(|failure| match failure {
                        Failure::Store(e) => e,
                        Failure::Refused(e) => Error::custom(Escape::Refused(e)),
                        Failure::Taken => Error::custom(Escape::Taken),
                        Failure::RollBack => Error::custom(Escape::RollBack),
                    })
            }
            .boxed()
        })
        .await;
    outcome.map_err(|e| match e.get_custom::<Escape>() {
        Some(escape) => escape.clone(),
        None => Escape::Refused(participant_error(e)),
    })
}

/// A driver error as the participant reports it: a refusal carried through
/// the driver as is; stored data of the wrong type as corrupt (INTERNAL,
/// logged at ERROR — a person must fix the document); anything else as
/// UNAVAILABLE, for the caller to retry.
pub fn participant_error(e: Error) -> ParticipantError {
    if let Some(refused) = e.get_custom::<ParticipantError>() {
        return refused.clone();
    }
    if let Some(mismatch) = e.get_custom::<mongo_client::NotAnInteger>() {
        tracing::error!(error = %mismatch, "stored data needs a person");
        return ParticipantError::Corrupt(mismatch.to_string());
    }
    ParticipantError::Store(e.to_string())
}
