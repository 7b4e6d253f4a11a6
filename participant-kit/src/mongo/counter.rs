//! The participants' counters (balances, stock) in MongoDB: each move is
//! one conditional statement inside the open transaction (see
//! [`crate::counter`]).

use super::MongoHistory;
use crate::ParticipantError;
use crate::counter::{Add, Counter, Take};
use bson::{Document, doc};
use mongodb::error::Error;
use mongodb::options::ReturnDocument;

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
    /// ([`crate::Failure::RollBack`]). Keys must be distinct.
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
