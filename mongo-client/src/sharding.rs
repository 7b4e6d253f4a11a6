//! The sharding plan, declared next to the indexes it must agree with.
//!
//! A sharded MongoDB collection can only enforce a unique index whose keys
//! start with the shard key, so the data model decides whether this product
//! can shard at all. Each store declares its collections' shard keys here
//! ([`ShardKey`]) beside its index list, and a test
//! (`tests/tests/suite/sharding_plan.rs`) checks every unique index against them;
//! `tests/tests/query_plans.rs` checks that every write filter names its
//! collection's shard key, so writes go to one shard. docs/storage.md,
//! "Sharding", explains the choices.

use bson::Document;
use mongodb::IndexModel;

/// How one collection is sharded: by one field, hashed (ids and request
/// ids are often sequential, and a ranged key would send every new document
/// to one shard).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ShardKey {
    /// The collection.
    pub collection: &'static str,
    /// The shard key's field.
    pub field: &'static str,
}

impl ShardKey {
    /// The `shardCollection` key document: `{field: "hashed"}`.
    pub fn key(&self) -> Document {
        bson::doc! { self.field: "hashed" }
    }

    /// Why `index` could not exist on the sharded collection, if it could
    /// not: a unique index must start with the shard key. (The `_id` index
    /// is unique per shard only, which is enough where `_id` is derived
    /// from the shard key or is a fresh UUID.)
    pub fn incompatible(&self, index: &IndexModel) -> Option<String> {
        let unique = index
            .options
            .as_ref()
            .and_then(|o| o.unique)
            .unwrap_or(false);
        let first = index.keys.keys().next().map(String::as_str);
        if unique && first != Some(self.field) {
            let name = index
                .options
                .as_ref()
                .and_then(|o| o.name.clone())
                .unwrap_or_default();
            return Some(format!(
                "{}: unique index {name} {} does not start with the shard key {}",
                self.collection, index.keys, self.field
            ));
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bson::doc;

    #[test]
    fn unique_indexes_must_start_with_the_shard_key() {
        let key = ShardKey {
            collection: "c",
            field: "request_id",
        };
        assert_eq!(key.key(), doc! { "request_id": "hashed" });
        let ok = crate::index("u", doc! { "request_id": 1, "kind": 1 }, true);
        assert_eq!(key.incompatible(&ok), None);
        let other = crate::index("o", doc! { "created_at_ms": -1 }, false);
        assert_eq!(key.incompatible(&other), None);
        let bad = crate::index("b", doc! { "kind": 1, "request_id": 1 }, true);
        assert!(key.incompatible(&bad).is_some_and(|m| m.contains("b")));
    }
}
