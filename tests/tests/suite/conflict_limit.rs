//! Write conflicts lower how many transactions a participant runs at once
//! on MongoDB (participant-kit/src/mongo/conflict_limit.rs), through the
//! one transaction runner every Rust participant uses: transactions that
//! write one document at the same time each apply once, and their conflicts
//! reach the limit. Needs the MongoDB test target (skips without one).

use futures::FutureExt;
use participant_kit::counter::Counter;
use participant_kit::mongo::{HistoryDb, MAX_TRANSACTIONS, MongoHistory, transact};
use participant_kit::{Admission, Failure};
use std::time::Duration;

/// A counter of the test's own.
const HITS: Counter = Counter {
    table: "hits",
    key: "_id",
    value: "hits",
};

/// Adds one to the counter `key`, then holds the transaction open a while,
/// so that every other transaction on `key` meanwhile conflicts with it.
fn add_one<'a>(
    tx: &'a mut MongoHistory<'a>,
    key: &'a &'static str,
    _: &'a Admission,
) -> futures::future::BoxFuture<'a, Result<(), Failure<mongodb::error::Error>>> {
    async move {
        tx.add(&HITS, key, 1).await.map_err(Failure::Store)?;
        tokio::time::sleep(Duration::from_millis(20)).await;
        Ok(())
    }
    .boxed()
}

/// Never asked for: no rule here takes a key.
fn no_replay<'a>(
    _: &'a mut MongoHistory<'a>,
    _: &'a &'static str,
) -> futures::future::BoxFuture<'a, Result<(), Failure<mongodb::error::Error>>> {
    async { Err(Failure::RollBack) }.boxed()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn conflicting_transactions_apply_once_each_and_lower_the_limit() {
    let Some(target) = saga_tests::backends::mongo() else {
        eprintln!("skipped: no MongoDB test target");
        return;
    };
    let name = format!("conflicts_{}", uuid::Uuid::now_v7().simple());
    let db = mongo_client::connect(&target.uri, &name, "test", std::future::pending())
        .await
        .expect("connect to MongoDB");
    let history = HistoryDb::new(db.clone(), Duration::from_secs(3600));
    assert_eq!(history.limit().limit(), MAX_TRANSACTIONS);
    // The counter exists first: every transaction updates it.
    transact(&history, "hot", Admission::Apply, add_one, no_replay)
        .await
        .expect("the first add");
    const AT_ONCE: i64 = 16;
    let adds =
        (0..AT_ONCE).map(|_| transact(&history, "hot", Admission::Apply, add_one, no_replay));
    for added in futures::future::join_all(adds).await {
        added.expect("each add applies, its conflicts retried");
    }
    let hits = db
        .collection::<bson::Document>(HITS.table)
        .find_one(bson::doc! { "_id": "hot" })
        .await
        .expect("read the counter")
        .expect("the counter");
    assert_eq!(hits.get_i64("hits").ok(), Some(1 + AT_ONCE));
    // 16 transactions holding one document 20 ms each cannot all have run
    // at once without conflicting: the conflicts halved the limit, and the
    // few commits since cannot have raised it back.
    assert!(
        history.limit().limit() < MAX_TRANSACTIONS / 2,
        "limit {} after {AT_ONCE} conflicting transactions",
        history.limit().limit()
    );
    let _ = db.drop().await;
}
