//! The sharding plan (docs/storage.md, "Sharding") agrees with the indexes: every
//! unique index of every collection starts with that collection's shard
//! key, so `shardCollection` would accept each one and uniqueness (one saga
//! per request id, one record per request id and kind, one line per
//! request id and index) still holds across shards.

use mongo_client::ShardKey;
use mongodb::IndexModel;

fn plan() -> Vec<(ShardKey, Vec<IndexModel>)> {
    vec![
        (
            orchestrator::store::MONGO_SHARD_KEY,
            orchestrator::store::mongo_indexes(),
        ),
        (
            participant_kit::mongo::SHARD_KEY,
            participant_kit::mongo::indexes(),
        ),
        (
            inventory_svc::store::DEDUCT_LINES_SHARD_KEY,
            inventory_svc::store::deduct_line_indexes(),
        ),
        (
            participant_kit::mongo::counter_shard_key(&payment_svc::store::ledger::BALANCES),
            Vec::new(),
        ),
        (
            participant_kit::mongo::counter_shard_key(&inventory_svc::store::stock::STOCK),
            Vec::new(),
        ),
    ]
}

#[test]
fn every_unique_index_starts_with_its_collections_shard_key() {
    let plan = plan();
    let problems: Vec<String> = plan
        .iter()
        .flat_map(|(key, indexes)| indexes.iter().filter_map(|i| key.incompatible(i)))
        .collect();
    assert!(problems.is_empty(), "{problems:#?}");
    // Every collection the services write is in the plan, once.
    let mut collections: Vec<_> = plan.iter().map(|(k, _)| k.collection).collect();
    collections.sort_unstable();
    assert_eq!(
        collections,
        [
            "accounts",
            "deduct_lines",
            "operation_history",
            "products",
            "sagas"
        ]
    );
    // Each declared unique index exists (the check is not vacuous).
    let unique = plan
        .iter()
        .flat_map(|(_, i)| i)
        .filter(|i| i.options.as_ref().and_then(|o| o.unique) == Some(true))
        .count();
    assert_eq!(unique, 3);
}
