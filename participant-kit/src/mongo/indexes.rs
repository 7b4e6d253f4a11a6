//! The operationHistory collection's indexes and the shard keys of the
//! participants' collections.

use bson::{Document, doc};
use mongodb::error::Error;
use mongodb::{Database, IndexModel};

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

/// Creates the operationHistory's [`indexes`] in `db` (idempotent), and
/// drops `subject_recent` (a subject's records without the request-id tie
/// break), which no query uses and every write would pay for.
pub async fn ensure_history_indexes(db: &Database) -> Result<(), Error> {
    mongo_client::ensure_indexes(
        &db.collection::<Document>(COLLECTION),
        indexes(),
        &["subject_recent"],
    )
    .await
}
