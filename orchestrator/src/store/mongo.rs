//! The MongoDB saga store (production).
//!
//! One document per saga: `_id` = saga_id, the indexed fields (`request_id`,
//! `status`, `customer_id`, `version`, times, lease) at the top level and
//! the full saga under `saga`. Every write touches that one document, so a **single-document
//! atomic update** is enough — no transaction: `create` is an insert that
//! the unique `request_id` index arbitrates, and `save` is an update whose
//! filter includes the version read (optimistic concurrency).
//!
//! Retention: a COMPLETED or CANCELLED saga carries `expire_at`, a BSON
//! Date (its finish time plus the retention), and a TTL index on it lets
//! the server delete it some time after that date (mongod's TTL monitor
//! runs every 60 s). Every other saga has `expire_at: null`, which a TTL
//! index never expires, so a FAILED or unfinished saga cannot be deleted
//! whatever the index does. A changed retention applies to sagas that
//! finish from then on.
//!
//! A duplicate-key error is only "already exists" when it comes from the
//! `request_id` index (or, if the server does not say which index, when a
//! saga with that request id can be read back); any other is an error.

mod migrations;

use super::{
    Created, Cursor, Page, SagaFilter, SagaRetention, SagaStore, StatusCounts, StoreError,
    StoreStats, decode_each, merge_claimable,
};
use crate::saga::{Attention, Saga, SagaStatus};
use async_trait::async_trait;
use bson::{Document, doc};
use futures::TryStreamExt;
use mongo_client::{duplicate_key, index, ttl_index};
use mongodb::error::Error;
use mongodb::{Collection, Database};

const SAGAS: &str = "sagas";
const REQUEST_ID_INDEX: &str = "request_id_unique";
const CLAIMABLE_INDEX: &str = "claimable";
/// The TTL index on `expire_at`; it also serves the archive's scan.
const EXPIRE_INDEX: &str = "expire_at_ttl";

/// Saga store in a MongoDB database.
#[derive(Clone, Debug)]
pub struct MongoSagaStore {
    sagas: Collection<Document>,
    db: Database,
    retention: SagaRetention,
}

/// How `sagas` is sharded: by request id (hashed), the key of its unique
/// index; every save names it, so a write goes to one shard.
pub const SHARD_KEY: mongo_client::ShardKey = mongo_client::ShardKey {
    collection: SAGAS,
    field: "request_id",
};

/// The indexes of `sagas` (created at open): unique by request id;
/// newest-first listing, optionally by status, by customer or both; counts
/// by status; recovery by `claimable_after_ms` (and owner).
pub fn indexes() -> Vec<mongodb::IndexModel> {
    vec![
        index(REQUEST_ID_INDEX, doc! { "request_id": 1 }, true),
        index("newest", doc! { "created_at_ms": -1, "_id": -1 }, false),
        index(
            "status_newest",
            doc! { "status": 1, "created_at_ms": -1, "_id": -1 },
            false,
        ),
        index(CLAIMABLE_INDEX, doc! { "claimable_after_ms": 1 }, false),
        index(
            "own_claimable",
            doc! { "lease_owner": 1, "claimable_after_ms": 1 },
            false,
        ),
        index(
            "customer_newest",
            doc! { "customer_id": 1, "created_at_ms": -1, "_id": -1 },
            false,
        ),
        index(
            "customer_status_newest",
            doc! { "customer_id": 1, "status": 1, "created_at_ms": -1, "_id": -1 },
            false,
        ),
        index(
            "attention_newest",
            doc! { "needs_attention": 1, "created_at_ms": -1, "_id": -1 },
            false,
        ),
        ttl_index(EXPIRE_INDEX, "expire_at"),
    ]
}

impl MongoSagaStore {
    /// Uses `db`, creating the indexes (idempotent): sagas unique by
    /// request_id; newest-first listing, optionally by status or by
    /// customer; counts by status; recovery by `claimable_after_ms` (and
    /// owner); the TTL index on `expire_at`. Sagas of an earlier schema
    /// version are brought to the latest ([`migrations`]; finished sagas
    /// are dated on a task of their own, after this returns). Keeps
    /// finished sagas for the default retention.
    pub async fn open(db: Database) -> Result<Self, Error> {
        Self::open_with(db, SagaRetention::default()).await
    }

    /// [`MongoSagaStore::open`] keeping finished sagas as `retention` says.
    pub async fn open_with(db: Database, retention: SagaRetention) -> Result<Self, Error> {
        let sagas = db.collection::<Document>(SAGAS);
        mongo_client::ensure_indexes(&sagas, indexes(), migrations::REPLACED_INDEXES).await?;
        migrations::migrate(&sagas).await?;
        migrations::date_finished_in_background(sagas.clone(), retention);
        Ok(MongoSagaStore {
            sagas,
            db,
            retention,
        })
    }

    async fn find_one(&self, filter: Document) -> Result<Option<Saga>, StoreError> {
        let found = self.sagas.find_one(filter).await.map_err(store_error)?;
        found.as_ref().map(decode).transpose()
    }

    async fn find_many(
        &self,
        filter: Document,
        sort: Document,
        limit: usize,
    ) -> Result<Vec<Saga>, StoreError> {
        let docs = self.find_documents(filter, sort, limit).await?;
        docs.iter().map(decode).collect()
    }

    async fn find_documents(
        &self,
        filter: Document,
        sort: Document,
        limit: usize,
    ) -> Result<Vec<Document>, StoreError> {
        self.sagas
            .find(filter)
            .sort(sort)
            .limit(i64::try_from(limit).unwrap_or(i64::MAX))
            .await
            .map_err(store_error)?
            .try_collect()
            .await
            .map_err(store_error)
    }
}

/// The saga's `expire_at`: a Date once it may expire, else null.
fn expire_at(retention: &SagaRetention, saga: &Saga) -> bson::Bson {
    match retention.expire_at_ms(saga) {
        Some(ms) => bson::Bson::DateTime(bson::DateTime::from_millis(ms)),
        None => bson::Bson::Null,
    }
}

/// A driver error in domain terms: its class ([`mongo_client::classify`]:
/// an unreachable server, an election, a write conflict or anything the
/// driver labels retryable passes; a document over 16 MB, a failed
/// validation or missing privileges do not) through
/// [`StoreError::classified`].
fn store_error(e: Error) -> StoreError {
    StoreError::classified(mongo_client::classify(&e), e.to_string())
}

fn version(v: u64) -> i64 {
    i64::try_from(v).unwrap_or(i64::MAX)
}

fn encode(saga: &Saga, retention: &SagaRetention) -> Result<Document, StoreError> {
    let body = bson::to_document(saga).map_err(|e| StoreError::Corrupt(e.to_string()))?;
    Ok(doc! {
        "_id": &saga.saga_id,
        "request_id": &saga.request_id,
        "status": saga.status.as_str(),
        "customer_id": &saga.order.customer_id,
        "version": version(saga.version),
        "created_at_ms": saga.created_at_ms,
        "updated_at_ms": saga.updated_at_ms,
        "lease_owner": saga.lease_owner(),
        "lease_until_ms": saga.lease_until_ms(),
        "claimable_after_ms": saga.claimable_after_ms(),
        "expire_at": expire_at(retention, saga),
        "needs_attention": saga.attention.is_some(),
        "saga": body,
    })
}

fn decode(d: &Document) -> Result<Saga, StoreError> {
    let body = d
        .get_document("saga")
        .map_err(|e| StoreError::Corrupt(format!("saga document without body: {e}")))?;
    bson::from_document(body.clone()).map_err(|e| {
        let id = d.get_str("_id").unwrap_or("?");
        StoreError::Corrupt(format!("saga {id}: {e}"))
    })
}

#[async_trait]
impl SagaStore for MongoSagaStore {
    async fn create(&self, saga: &Saga) -> Result<Created, StoreError> {
        let document = encode(saga, &self.retention)?;
        let error = match self.sagas.insert_one(document).await {
            Ok(_) => return Ok(Created::New),
            Err(error) => error,
        };
        let Some(duplicate) = duplicate_key(&error) else {
            return Err(store_error(error));
        };
        match duplicate.is_index(REQUEST_ID_INDEX, &["request_id"]) {
            Some(false) => Err(StoreError::Conflict {
                saga_id: saga.saga_id.clone(),
                expected: 0,
            }),
            // Ours (or unattributed): the existing saga must be readable.
            _ => match self
                .find_one(doc! { "request_id": &saga.request_id })
                .await?
            {
                Some(existing) => Ok(Created::Existing(Box::new(existing))),
                None => Err(StoreError::Conflict {
                    saga_id: saga.saga_id.clone(),
                    expected: 0,
                }),
            },
        }
    }

    async fn save(&self, saga: &Saga) -> Result<(), StoreError> {
        let expected = saga.version.saturating_sub(1);
        let body = bson::to_document(saga).map_err(|e| StoreError::Corrupt(e.to_string()))?;
        let updated = self
            .sagas
            .update_one(
                doc! {
                    "_id": &saga.saga_id,
                    "request_id": &saga.request_id,
                    "version": version(expected),
                },
                doc! { "$set": {
                    "status": saga.status.as_str(),
                    "customer_id": &saga.order.customer_id,
                    "version": version(saga.version),
                    "updated_at_ms": saga.updated_at_ms,
                    "lease_owner": saga.lease_owner(),
                    "lease_until_ms": saga.lease_until_ms(),
                    "claimable_after_ms": saga.claimable_after_ms(),
                    "expire_at": expire_at(&self.retention, saga),
                    "needs_attention": saga.attention.is_some(),
                    "saga": body,
                } },
            )
            .await
            .map_err(store_error)?;
        if updated.matched_count == 1 {
            Ok(())
        } else {
            Err(StoreError::Conflict {
                saga_id: saga.saga_id.clone(),
                expected,
            })
        }
    }

    async fn get(&self, saga_id: &str) -> Result<Option<Saga>, StoreError> {
        self.find_one(doc! { "_id": saga_id }).await
    }

    async fn get_by_request_id(&self, request_id: &str) -> Result<Option<Saga>, StoreError> {
        self.find_one(doc! { "request_id": request_id }).await
    }

    async fn list(
        &self,
        filter: &SagaFilter,
        page_size: usize,
        after: Option<Cursor>,
    ) -> Result<Page, StoreError> {
        let shown = filter;
        let mut filter = Document::new();
        if let Some(status) = shown.status {
            filter.insert("status", status.as_str());
        }
        if let Some(customer_id) = &shown.customer_id {
            filter.insert("customer_id", customer_id);
        }
        if shown.needs_attention {
            filter.insert("needs_attention", true);
        }
        let newest_first = doc! { "created_at_ms": -1, "_id": -1 };
        let wanted = page_size.saturating_add(1);
        // After a cursor: the rest of its millisecond, then everything older
        // — two range scans of the same index rather than one `$or`, which
        // planners serve worse.
        let mut sagas = Vec::new();
        if let Some(c) = &after {
            let mut same_ms = filter.clone();
            same_ms.insert("created_at_ms", c.created_at_ms);
            same_ms.insert("_id", doc! { "$lt": &c.saga_id });
            sagas = self
                .find_many(same_ms, newest_first.clone(), wanted)
                .await?;
            filter.insert("created_at_ms", doc! { "$lt": c.created_at_ms });
        }
        if sagas.len() < wanted {
            let more = self
                .find_many(filter, newest_first, wanted - sagas.len())
                .await?;
            sagas.extend(more);
        }
        let next = if sagas.len() > page_size {
            sagas.truncate(page_size);
            sagas.last().map(|s| Cursor {
                created_at_ms: s.created_at_ms,
                saga_id: s.saga_id.clone(),
            })
        } else {
            None
        };
        Ok(Page { sagas, next })
    }

    async fn count_by_status(&self) -> Result<StatusCounts, StoreError> {
        // One count per status, each a scan of the `status_newest` index's
        // range for that status (COUNT_SCAN): no saga document is read.
        let counts = futures::future::try_join_all(SagaStatus::ALL.iter().map(|status| async {
            let n = self
                .sagas
                .count_documents(doc! { "status": status.as_str() })
                .await
                .map_err(store_error)?;
            Ok::<_, StoreError>((*status, n))
        }))
        .await?;
        Ok(counts)
    }

    async fn claimable(
        &self,
        now_ms: i64,
        owner: Option<&str>,
        limit: usize,
    ) -> Result<Vec<Saga>, StoreError> {
        // Two range scans, no $or (which planners serve worse) and no sort
        // stage: each sort is the index's own order after its equalities.
        let expired = self
            .find_documents(
                doc! { "claimable_after_ms": { "$lt": now_ms } },
                doc! { "claimable_after_ms": 1 },
                limit,
            )
            .await?;
        let own = match owner {
            Some(owner) => {
                self.find_documents(
                    doc! { "lease_owner": owner, "claimable_after_ms": { "$lt": i64::MAX } },
                    doc! { "lease_owner": 1, "claimable_after_ms": 1 },
                    limit,
                )
                .await?
            }
            None => Vec::new(),
        };
        Ok(merge_claimable(
            decode_each(expired, decode),
            decode_each(own, decode),
            limit,
        ))
    }

    async fn expired(&self, now_ms: i64, limit: usize) -> Result<Vec<Saga>, StoreError> {
        if self.retention.keep.is_none() {
            return Ok(Vec::new());
        }
        // Finished before now − keep ⟺ expire_at (finish + keep + grace)
        // before now + grace: a range of the TTL index, in its order.
        let grace = if self.retention.archive {
            i64::try_from(super::ARCHIVE_GRACE.as_millis()).unwrap_or(i64::MAX)
        } else {
            0
        };
        let before = bson::DateTime::from_millis(now_ms.saturating_add(grace));
        let docs = self
            .find_documents(
                doc! { "expire_at": { "$lt": before } },
                doc! { "expire_at": 1 },
                limit,
            )
            .await?;
        Ok(decode_each(docs, decode))
    }

    async fn flag_attention(
        &self,
        saga: &Saga,
        attention: &Attention,
        retry_after_ms: i64,
    ) -> Result<bool, StoreError> {
        let attention = bson::to_bson(attention).map_err(|e| StoreError::Corrupt(e.to_string()))?;
        let updated = self
            .sagas
            .update_one(
                doc! {
                    "_id": &saga.saga_id,
                    "request_id": &saga.request_id,
                    "version": version(saga.version.saturating_sub(1)),
                },
                doc! { "$set": {
                    "needs_attention": true,
                    "saga.attention": attention,
                    "claimable_after_ms": retry_after_ms,
                } },
            )
            .await
            .map_err(store_error)?;
        Ok(updated.matched_count == 1)
    }

    async fn delete_finished(&self, sagas: &[Saga]) -> Result<u64, StoreError> {
        // One delete per saga, each by `_id` and request id (the shard
        // key) and only while it carries an expiry date: a FAILED or
        // unfinished saga has none, so it cannot be deleted here by
        // mistake. Hinted to `_id_`: with several indexes applicable the
        // test server scans the collection (and an `$in` of ids beside a
        // second field would too). Concurrent, with the client's write
        // concern.
        let deletes = sagas.iter().map(|saga| async move {
            self.sagas
                .delete_one(doc! {
                    "_id": &saga.saga_id,
                    "request_id": &saga.request_id,
                    "expire_at": { "$gte": bson::DateTime::from_millis(0) },
                })
                .hint(mongodb::options::Hint::Name("_id_".to_owned()))
                .await
                .map(|r| r.deleted_count)
        });
        let deleted = futures::future::try_join_all(deletes)
            .await
            .map_err(store_error)?;
        Ok(deleted.into_iter().sum())
    }

    async fn purge_expired(&self, _now_ms: i64, _limit: usize) -> Result<u64, StoreError> {
        // The TTL index deletes expired sagas.
        Ok(0)
    }

    async fn stats(&self) -> Result<StoreStats, StoreError> {
        let size = mongo_client::collection_bytes(&self.db, &[SAGAS])
            .await
            .map_err(store_error)?;
        // The soonest expiry is the oldest finish (one retention for all).
        let oldest = self
            .sagas
            .find_one(doc! { "expire_at": { "$gte": bson::DateTime::from_millis(0) } })
            .sort(doc! { "expire_at": 1 })
            .projection(doc! { "saga.updated_at_ms": 1 })
            .await
            .map_err(store_error)?;
        let oldest_finished_ms = oldest.and_then(|d| {
            d.get_document("saga")
                .ok()
                .and_then(|s| s.get_i64("updated_at_ms").ok())
        });
        Ok(StoreStats {
            size_bytes: Some(size),
            oldest_finished_ms,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use mongodb::error::ErrorKind;

    /// What passes is waited out; what the server will refuse again stops
    /// the driver and flags the saga (see `Executor::persist`).
    #[test]
    fn driver_errors_map_to_what_the_executor_does_about_them() {
        let server = |code: i32, name: &str| -> Error {
            let reply = doc! { "ok": 0, "code": code, "codeName": name, "errmsg": name };
            Error::from(ErrorKind::Command(
                bson::from_document::<mongodb::error::CommandError>(reply).expect("command error"),
            ))
        };
        assert!(matches!(
            store_error(server(112, "WriteConflict")),
            StoreError::Unavailable(_)
        ));
        assert!(matches!(
            store_error(Error::from(std::io::Error::from(
                std::io::ErrorKind::ConnectionReset
            ))),
            StoreError::Unavailable(_)
        ));
        assert!(matches!(
            store_error(server(10334, "BSONObjectTooLarge")),
            StoreError::Rejected(_)
        ));
        assert!(matches!(
            store_error(server(13, "Unauthorized")),
            StoreError::Rejected(_)
        ));
    }
}
