//! What every `SagaStore` must do, whatever it stores in.

use orchestrator::engine::{self, Next, Outcome, StepNames};
use orchestrator::saga::{Attention, Lease, Order, OrderItem, Saga, SagaStatus};
use orchestrator::store::{Created, SagaFilter, SagaStore, StoreError};
use std::collections::HashSet;
use std::sync::Arc;

type Store = Arc<dyn SagaStore>;

/// The steps of the sagas stored here (the order saga's names).
const STEPS: &[StepNames] = &[
    StepNames {
        name: "payment",
        action: "charge",
        compensation: "refund",
    },
    StepNames {
        name: "inventory",
        action: "deduct",
        compensation: "restock",
    },
];

/// Every case of this suite, for [`crate::conformance_cases`].
#[macro_export]
macro_rules! saga_store_conformance {
    ($open:path) => {
        $crate::conformance_cases!(
            $open,
            saga_tests::conformance::sagas,
            [
                a_created_saga_reads_back_identically_by_either_id,
                a_duplicate_request_id_returns_the_existing_saga,
                fifty_concurrent_creates_of_one_request_id_make_one_saga,
                save_requires_the_version_it_read,
                concurrent_saves_of_one_version_let_exactly_one_win,
                listing_is_newest_first_in_pages_and_filters_by_status,
                claimable_sagas_are_unfinished_with_an_expired_or_own_lease,
                listing_by_customer_is_newest_first_in_pages_and_combines_with_status,
                counts_by_status_follow_every_create_and_save,
                only_completed_and_cancelled_sagas_expire_and_an_expired_request_id_starts_anew,
                a_refused_saga_is_marked_for_attention_until_a_version_is_saved,
            ]
        );
    };
}

/// Records an outcome the test knows fits the saga.
fn record(saga: &mut Saga, work: Next, outcome: Outcome, now_ms: i64) {
    engine::record_outcome(saga, work, outcome, now_ms).expect("the outcome fits the saga");
}

fn saga(id: &str, request_id: &str, created_at_ms: i64) -> Saga {
    saga_of("alice", id, request_id, created_at_ms)
}

fn saga_of(customer_id: &str, id: &str, request_id: &str, created_at_ms: i64) -> Saga {
    let order = Order {
        order_id: format!("order-{id}"),
        customer_id: customer_id.into(),
        items: vec![OrderItem {
            product_id: "sku-apple".into(),
            quantity: 2,
            unit_price_cents: i64::MAX / 4,
        }],
        total_cents: i64::MAX / 2,
    };
    let mut s = engine::start(
        STEPS,
        id.into(),
        request_id.into(),
        "fp".into(),
        order,
        created_at_ms,
    );
    s.version = 1;
    s
}

async fn create_new(store: &Store, s: &Saga) {
    assert_eq!(store.create(s).await.expect("create"), Created::New);
}

pub async fn a_created_saga_reads_back_identically_by_either_id(store: Store) {
    let mut s = saga("s1", "r1", 1_000);
    // Exercise every field: a refusal, a compensation retry, a reason.
    record(&mut s, Next::Act(0), Outcome::Succeeded, 1_001);
    record(
        &mut s,
        Next::Act(1),
        Outcome::Refused("short: \"sku\" ünïcode".into()),
        1_002,
    );
    record(
        &mut s,
        Next::Compensate(0),
        Outcome::CompensationRetrying("down".into()),
        1_003,
    );
    create_new(&store, &s).await;
    assert_eq!(store.get("s1").await.expect("get"), Some(s.clone()));
    assert_eq!(store.get_by_request_id("r1").await.expect("get"), Some(s));
    assert_eq!(store.get("nope").await.expect("get"), None);
    assert_eq!(store.get_by_request_id("nope").await.expect("get"), None);
}

pub async fn a_duplicate_request_id_returns_the_existing_saga(store: Store) {
    let first = saga("s1", "same", 1);
    create_new(&store, &first).await;
    let second = saga("s2", "same", 2);
    match store.create(&second).await.expect("create") {
        Created::Existing(existing) => assert_eq!(*existing, first),
        other => panic!("expected the existing saga, got {other:?}"),
    }
    assert_eq!(store.get("s2").await.expect("get"), None);
}

pub async fn fifty_concurrent_creates_of_one_request_id_make_one_saga(store: Store) {
    let calls: Vec<_> = (0..50)
        .map(|i| {
            let store = store.clone();
            tokio::spawn(async move { store.create(&saga(&format!("c{i}"), "contended", i)).await })
        })
        .collect();
    let mut winners = Vec::new();
    let mut seen = HashSet::new();
    for (i, call) in calls.into_iter().enumerate() {
        match call.await.expect("join").expect("create") {
            Created::New => winners.push(format!("c{i}")),
            Created::Existing(existing) => {
                seen.insert(existing.saga_id);
            }
        }
    }
    assert_eq!(winners.len(), 1, "exactly one insert wins");
    seen.retain(|id| id != &winners[0]);
    assert!(seen.is_empty(), "every loser saw the winner: {seen:?}");
    let page = store
        .list(&SagaFilter::default(), 100, None)
        .await
        .expect("list");
    assert_eq!(page.sagas.len(), 1);
}

pub async fn save_requires_the_version_it_read(store: Store) {
    let mut s = saga("v1", "rv1", 1);
    create_new(&store, &s).await;
    record(&mut s, Next::Act(0), Outcome::Succeeded, 2);
    s.version = 2;
    store.save(&s).await.expect("save v2");
    // Saving "version 2" again means the writer read version 1: stale.
    let err = store.save(&s).await.expect_err("stale save");
    assert!(matches!(err, StoreError::Conflict { .. }), "{err:?}");
    s.version = 3;
    store.save(&s).await.expect("save v3");
    assert_eq!(
        store.get("v1").await.expect("get").map(|x| x.version),
        Some(3)
    );
}

pub async fn concurrent_saves_of_one_version_let_exactly_one_win(store: Store) {
    let base = saga("race", "rrace", 1);
    create_new(&store, &base).await;
    let calls: Vec<_> = (0..20)
        .map(|i| {
            let store = store.clone();
            let mut s = base.clone();
            s.version = 2;
            s.reason = Some(format!("writer {i}"));
            tokio::spawn(async move { (i, store.save(&s).await) })
        })
        .collect();
    let mut won = Vec::new();
    for call in calls {
        let (i, result) = call.await.expect("join");
        match result {
            Ok(()) => won.push(i),
            Err(StoreError::Conflict { .. }) => {}
            Err(other) => panic!("unexpected {other:?}"),
        }
    }
    assert_eq!(won.len(), 1, "exactly one writer advances the saga");
    let stored = store.get("race").await.expect("get").expect("exists");
    assert_eq!(stored.reason, Some(format!("writer {}", won[0])));
}

pub async fn listing_is_newest_first_in_pages_and_filters_by_status(store: Store) {
    // Two sagas share a timestamp: the saga id breaks the tie.
    let times = [10, 20, 20, 30, 40];
    for (i, t) in times.iter().enumerate() {
        let mut s = saga(&format!("l{i}"), &format!("rl{i}"), *t);
        if i % 2 == 1 {
            record(&mut s, Next::Act(0), Outcome::Refused("no".into()), t + 1);
        }
        create_new(&store, &s).await;
    }
    let mut seen = Vec::new();
    let mut after = None;
    loop {
        let page = store
            .list(&SagaFilter::default(), 2, after)
            .await
            .expect("list");
        assert!(page.sagas.len() <= 2);
        seen.extend(page.sagas.iter().map(|s| s.saga_id.clone()));
        match page.next {
            Some(next) => after = Some(next),
            None => break,
        }
    }
    assert_eq!(seen, ["l4", "l3", "l2", "l1", "l0"]);
    let cancelled = store
        .list(&SagaFilter::status(Some(SagaStatus::Cancelled)), 10, None)
        .await
        .expect("list");
    let ids: Vec<_> = cancelled.sagas.iter().map(|s| s.saga_id.as_str()).collect();
    assert_eq!(ids, ["l3", "l1"]);
    assert!(cancelled.next.is_none());
    let none = store
        .list(&SagaFilter::status(Some(SagaStatus::Failed)), 10, None)
        .await
        .expect("list");
    assert!(none.sagas.is_empty());
}

pub async fn claimable_sagas_are_unfinished_with_an_expired_or_own_lease(store: Store) {
    let lease = |owner: &str, until_ms| {
        Some(Lease {
            owner: owner.into(),
            until_ms,
        })
    };
    let mut expired = saga("u-expired", "ru1", 3);
    expired.lease = lease("a", 50);
    let mut compensating = saga("u-comp", "ru2", 1);
    record(&mut compensating, Next::Act(0), Outcome::Succeeded, 2);
    record(
        &mut compensating,
        Next::Act(1),
        Outcome::Refused("short".into()),
        2,
    );
    assert_eq!(compensating.status, SagaStatus::Compensating);
    compensating.lease = None;
    let mut held = saga("u-held", "ru3", 2);
    held.lease = lease("b", 1_000);
    let mut done = saga("u-done", "ru4", 2);
    record(&mut done, Next::Act(0), Outcome::Refused("no".into()), 2);
    for s in [&expired, &compensating, &held, &done] {
        create_new(&store, s).await;
    }
    let ids = |sagas: Vec<Saga>| sagas.into_iter().map(|s| s.saga_id).collect::<Vec<_>>();
    // At t=100: a's lease expired, the unleased one is free, b holds its own.
    let now = ids(store.claimable(100, None, 10).await.expect("claimable"));
    assert_eq!(now, ["u-comp", "u-expired"]);
    // b, restarting, may take its own saga back at once.
    let own = ids(store
        .claimable(100, Some("b"), 10)
        .await
        .expect("claimable"));
    assert_eq!(own, ["u-comp", "u-expired", "u-held"]);
    // After b's lease expires anyone may; terminal sagas never. Longest
    // waiting first: unleased, then by lease expiry.
    let later = ids(store.claimable(2_000, None, 10).await.expect("claimable"));
    assert_eq!(later, ["u-comp", "u-expired", "u-held"]);
    assert_eq!(
        ids(store.claimable(2_000, None, 1).await.expect("claimable")),
        ["u-comp"]
    );
    assert_eq!(
        ids(store.claimable(100, Some("b"), 2).await.expect("claimable")),
        ["u-comp", "u-expired"]
    );
    // The lease is stored with the saga.
    assert_eq!(
        store
            .get("u-held")
            .await
            .expect("get")
            .and_then(|s| s.lease),
        lease("b", 1_000)
    );
    // A save moves the saga in the claimable order: b releases its lease
    // (a graceful shutdown) and the saga is free at once; finishing it
    // takes it out for good.
    let mut released = store.get("u-held").await.expect("get").expect("stored");
    released.lease = None;
    released.version += 1;
    store.save(&released).await.expect("save");
    let now = ids(store.claimable(100, None, 10).await.expect("claimable"));
    assert_eq!(now, ["u-comp", "u-held", "u-expired"]);
    let mut finished = store.get("u-comp").await.expect("get").expect("stored");
    record(&mut finished, Next::Compensate(0), Outcome::Compensated, 3);
    assert!(finished.status.is_terminal(), "{:?}", finished.status);
    finished.version += 1;
    store.save(&finished).await.expect("save");
    let now = ids(store
        .claimable(100, Some("b"), 10)
        .await
        .expect("claimable"));
    assert_eq!(now, ["u-held", "u-expired"]);
}

pub async fn listing_by_customer_is_newest_first_in_pages_and_combines_with_status(store: Store) {
    // bob's sagas interleave with others'; two share a timestamp.
    let sagas = [
        ("bob", "c0", 10),
        ("carol", "c1", 15),
        ("bob", "c2", 20),
        ("bob", "c3", 20),
        ("bobby", "c4", 25),
        ("bob", "c5", 30),
    ];
    for (customer, id, t) in sagas {
        let mut s = saga_of(customer, id, &format!("r{id}"), t);
        if id == "c2" || id == "c5" {
            record(&mut s, Next::Act(0), Outcome::Refused("no".into()), t + 1);
        }
        create_new(&store, &s).await;
    }
    let bob = SagaFilter {
        status: None,
        customer_id: Some("bob".into()),
        needs_attention: false,
    };
    let mut seen = Vec::new();
    let mut after = None;
    loop {
        let page = store.list(&bob, 3, after).await.expect("list");
        assert!(page.sagas.len() <= 3);
        assert!(page.sagas.iter().all(|s| s.order.customer_id == "bob"));
        seen.extend(page.sagas.iter().map(|s| s.saga_id.clone()));
        match page.next {
            Some(next) => after = Some(next),
            None => break,
        }
    }
    assert_eq!(seen, ["c5", "c3", "c2", "c0"]);
    // A save keeps the saga findable by its customer.
    let mut c0 = store.get("c0").await.expect("get").expect("c0");
    record(&mut c0, Next::Act(0), Outcome::Refused("no".into()), 11);
    c0.version += 1;
    store.save(&c0).await.expect("save");
    let cancelled = SagaFilter {
        status: Some(SagaStatus::Cancelled),
        customer_id: Some("bob".into()),
        needs_attention: false,
    };
    let page = store.list(&cancelled, 10, None).await.expect("list");
    let ids: Vec<_> = page.sagas.iter().map(|s| s.saga_id.as_str()).collect();
    assert_eq!(ids, ["c5", "c2", "c0"]);
    assert!(page.next.is_none());
    let nobody = SagaFilter {
        status: None,
        customer_id: Some("nobody".into()),
        needs_attention: false,
    };
    assert!(
        store
            .list(&nobody, 10, None)
            .await
            .expect("list")
            .sagas
            .is_empty()
    );
}

pub async fn counts_by_status_follow_every_create_and_save(store: Store) {
    let count = |counts: &[(SagaStatus, u64)], status| {
        counts
            .iter()
            .find(|(s, _)| *s == status)
            .map(|(_, n)| *n)
            .expect("every status is counted")
    };
    let empty = store.count_by_status().await.expect("counts");
    assert_eq!(
        empty,
        SagaStatus::ALL.iter().map(|s| (*s, 0)).collect::<Vec<_>>(),
        "every status, in order, zeros included"
    );
    for i in 0..4 {
        create_new(&store, &saga(&format!("n{i}"), &format!("rn{i}"), i)).await;
    }
    let mut n0 = store.get("n0").await.expect("get").expect("n0");
    record(&mut n0, Next::Act(0), Outcome::Refused("no".into()), 5);
    n0.version += 1;
    store.save(&n0).await.expect("save");
    let counts = store.count_by_status().await.expect("counts");
    assert_eq!(count(&counts, SagaStatus::Running), 3);
    assert_eq!(count(&counts, SagaStatus::Cancelled), 1);
    assert_eq!(count(&counts, SagaStatus::Completed), 0);
    assert_eq!(counts.iter().map(|(_, n)| n).sum::<u64>(), 4);
}

/// A saga stored as `status` since `at_ms` (the stores persist what they
/// are given; the engine's path to each status is tested elsewhere).
fn saga_in(id: &str, status: SagaStatus, at_ms: i64) -> Saga {
    let mut s = saga(id, &format!("r-{id}"), at_ms);
    s.status = status;
    s.updated_at_ms = at_ms;
    if status.is_terminal() {
        s.lease = None;
    }
    s
}

/// The retention every store is opened with here (the default, 7 days).
const KEEP_MS: i64 = 7 * 24 * 3_600_000;

pub async fn only_completed_and_cancelled_sagas_expire_and_an_expired_request_id_starts_anew(
    store: Store,
) {
    let now = service_kit::time::now_ms();
    for (id, status, ago_ms) in [
        ("completed-old", SagaStatus::Completed, 60_000),
        ("cancelled-old", SagaStatus::Cancelled, 50_000),
        ("failed-old", SagaStatus::Failed, 70_000),
        ("running-old", SagaStatus::Running, 80_000),
        ("compensating-old", SagaStatus::Compensating, 90_000),
        ("completed-new", SagaStatus::Completed, 0),
    ] {
        create_new(&store, &saga_in(id, status, now - ago_ms)).await;
    }
    // As seen 30 s after the retention of the old ones ran out (a time in
    // the future, so no TTL monitor can have acted yet): the finished ones
    // older than that, longest expired first; never FAILED or unfinished.
    let ids = |sagas: Vec<Saga>| sagas.into_iter().map(|s| s.saga_id).collect::<Vec<_>>();
    let expired = store
        .expired(now + KEEP_MS - 30_000, 100)
        .await
        .expect("expired");
    assert_eq!(ids(expired), ["completed-old", "cancelled-old"]);
    let later = store
        .expired(now + KEEP_MS + 10_000, 100)
        .await
        .expect("expired");
    assert_eq!(
        ids(later),
        ["completed-old", "cancelled-old", "completed-new"]
    );
    let limited = store
        .expired(now + KEEP_MS + 10_000, 1)
        .await
        .expect("expired");
    assert_eq!(ids(limited), ["completed-old"]);

    let stats = store.stats().await.expect("stats");
    assert!(stats.size_bytes.is_some_and(|n| n > 0), "{stats:?}");
    assert_eq!(stats.oldest_finished_ms, Some(now - 60_000));

    // Deleting removes only finished sagas, whatever it is given.
    let given: Vec<Saga> = [
        ("completed-old", SagaStatus::Completed),
        ("cancelled-old", SagaStatus::Cancelled),
        ("failed-old", SagaStatus::Failed),
        ("running-old", SagaStatus::Running),
        ("compensating-old", SagaStatus::Compensating),
    ]
    .into_iter()
    .map(|(id, status)| saga_in(id, status, now))
    .collect();
    let deleted = store.delete_finished(&given).await.expect("delete");
    assert_eq!(deleted, 2);
    for gone in ["completed-old", "cancelled-old"] {
        assert_eq!(store.get(gone).await.expect("get"), None, "{gone}");
    }
    for kept in [
        "failed-old",
        "running-old",
        "compensating-old",
        "completed-new",
    ] {
        assert!(store.get(kept).await.expect("get").is_some(), "{kept}");
    }
    assert_eq!(
        store.stats().await.expect("stats").oldest_finished_ms,
        Some(now)
    );

    // The expired request id is free again: a new saga. The one inside the
    // window still answers with its saga.
    let again = saga("completed-again", "r-completed-old", now);
    create_new(&store, &again).await;
    match store
        .create(&saga("dup", "r-completed-new", now))
        .await
        .expect("create")
    {
        Created::Existing(existing) => assert_eq!(existing.saga_id, "completed-new"),
        other => panic!("expected the existing saga, got {other:?}"),
    }
}

/// A saga whose next version the store refused is marked beside its stored
/// version (which stays), listed by `needs_attention`, claimable again only
/// from the retry time; a stale mark (the saga moved on) writes nothing;
/// the next saved version clears the mark.
pub async fn a_refused_saga_is_marked_for_attention_until_a_version_is_saved(store: Store) {
    let now = service_kit::time::now_ms();
    let mut s = saga("attn", "r-attn", now);
    s.lease = Some(Lease {
        owner: "a".into(),
        until_ms: now - 1,
    });
    create_new(&store, &s).await;
    let other = saga("calm", "r-calm", now + 1);
    create_new(&store, &other).await;
    let only_flagged = SagaFilter {
        needs_attention: true,
        ..SagaFilter::default()
    };
    assert!(
        store
            .list(&only_flagged, 10, None)
            .await
            .expect("list")
            .sagas
            .is_empty()
    );

    // The refused next version: version + 1, as save takes it.
    let mut refused = s.clone();
    refused.version += 1;
    let first = Attention::refused(None, "document too large".into(), now);
    let retry_at = now + 60_000;
    assert!(
        store
            .flag_attention(&refused, &first, retry_at)
            .await
            .expect("flag")
    );

    let stored = store.get("attn").await.expect("get").expect("saga");
    assert_eq!(
        stored.version, s.version,
        "the mark does not change the version"
    );
    assert_eq!(stored.attention.as_ref(), Some(&first));
    assert_eq!(stored.history, s.history);
    let listed = store.list(&only_flagged, 10, None).await.expect("list");
    let ids: Vec<_> = listed.sagas.iter().map(|x| x.saga_id.as_str()).collect();
    assert_eq!(ids, ["attn"]);
    assert_eq!(listed.sagas[0].attention.as_ref(), Some(&first));
    let claimable = |at: i64| {
        let store = store.clone();
        async move {
            store
                .claimable(at, None, 10)
                .await
                .expect("claimable")
                .into_iter()
                .map(|x| x.saga_id)
                .collect::<Vec<_>>()
        }
    };
    assert!(
        !claimable(now + 1_000).await.contains(&"attn".to_owned()),
        "not before the retry time"
    );
    assert!(claimable(retry_at + 1).await.contains(&"attn".to_owned()));

    // A repeated refusal keeps the first time.
    let again = Attention::refused(stored.attention.as_ref(), "still too large".into(), now + 5);
    assert_eq!((again.since_ms, again.last_ms), (now, now + 5));
    assert!(
        store
            .flag_attention(&refused, &again, retry_at)
            .await
            .expect("flag")
    );

    // A version the store accepts clears it.
    let mut next = store.get("attn").await.expect("get").expect("saga");
    next.attention = None;
    next.version += 1;
    store.save(&next).await.expect("save");
    let cleared = store.get("attn").await.expect("get").expect("saga");
    assert_eq!(cleared.attention, None);
    assert!(
        store
            .list(&only_flagged, 10, None)
            .await
            .expect("list")
            .sagas
            .is_empty()
    );

    // Marking a version that is no longer the stored one writes nothing.
    assert!(
        !store
            .flag_attention(&refused, &first, retry_at)
            .await
            .expect("stale flag")
    );
    assert_eq!(
        store
            .get("attn")
            .await
            .expect("get")
            .expect("saga")
            .attention,
        None
    );
}
