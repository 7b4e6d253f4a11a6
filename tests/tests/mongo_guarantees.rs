//! What the services guarantee on MongoDB beyond the storage conformance
//! suites:
//!
//! - a balance or an availability stored as another type (the Double that
//!   mongosh writes) is an error naming the document — never read as
//!   missing, never written over;
//! - a standalone server is refused at start-up, naming the fix, because
//!   the participants need multi-document transactions;
//! - every write the three services send carries write concern majority
//!   with journaling (inside a transaction: its commit), and every
//!   participant transaction reads at snapshot;
//! - the saga store tells errors that pass from errors that do not, fills
//!   in the fields an older version did not write (the expiry dates of
//!   finished sagas beside the open store) and drops the indexes it
//!   replaced.
//!
//! The target is printed when the first test starts (SecantusDB unless
//! `MONGODB_URI` names a real MongoDB).

use bson::{Bson, Document, doc};
use inventory_svc::store::{Deduction, InventoryStore, Line, MongoInventoryStore, StockAddition};
use participant_kit::{ActionReply, ParticipantError};
use payment_svc::store::{MongoPaymentStore, PaymentStore, Transfer};
use saga_tests::Stack;
use saga_tests::backends::{fresh_database, mongo};
use saga_tests::mongo_server::{MongoServer, ServerOptions};
use std::process::{Command, Stdio};
use std::time::Duration;

fn corrupt_naming(result: &Result<impl std::fmt::Debug, ParticipantError>, id: &str) -> bool {
    matches!(result, Err(ParticipantError::Corrupt(m)) if m.contains(id) && m.contains("Double"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_balance_stored_as_a_double_is_an_error_and_is_never_written_over() {
    let Some(target) = mongo() else { return };
    let db = fresh_database(&target, "payment").await;
    let store = MongoPaymentStore::open(db.clone()).await.expect("open");
    let accounts = db.collection::<Document>("accounts");
    let original = doc! { "_id": "dora", "balance_cents": 1000.0 };
    accounts.insert_one(original.clone()).await.expect("insert");
    let transfer = |request_id: &str, cents| Transfer {
        parameters: None,
        request_id: request_id.into(),
        customer_id: "dora".into(),
        amount_cents: cents,
    };

    let deposit = store.deposit(transfer("d1", 5)).await;
    assert!(corrupt_naming(&deposit, "dora"), "{deposit:?}");
    let charge = store
        .charge(transfer("c1", 5), participant_kit::Admission::Apply)
        .await;
    assert!(corrupt_naming(&charge, "dora"), "{charge:?}");
    let view = store.account("dora".into(), 10).await;
    assert!(corrupt_naming(&view, "dora"), "{view:?}");

    let stored = accounts
        .find_one(doc! { "_id": "dora" })
        .await
        .expect("find");
    assert_eq!(stored, Some(original), "the document was written over");
    let records = db
        .collection::<Document>("operation_history")
        .count_documents(doc! {})
        .await
        .expect("count");
    assert_eq!(records, 0, "a refused-as-corrupt call left a record");

    // Fixed by a person (NumberLong), the account works again.
    accounts
        .update_one(
            doc! { "_id": "dora" },
            doc! { "$set": { "balance_cents": Bson::Int64(1000) } },
        )
        .await
        .expect("fix");
    let deposit = store.deposit(transfer("d1", 5)).await.expect("deposit");
    assert_eq!(
        deposit,
        ActionReply::Applied {
            value: 1005,
            replayed: false
        }
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_availability_stored_as_a_double_is_an_error_and_is_never_written_over() {
    let Some(target) = mongo() else { return };
    let db = fresh_database(&target, "inventory").await;
    let store = MongoInventoryStore::open(db.clone()).await.expect("open");
    let products = db.collection::<Document>("products");
    let original = doc! { "_id": "sku-odd", "available": 40.0 };
    products.insert_one(original.clone()).await.expect("insert");

    let added = store
        .add_stock(StockAddition {
            request_id: "s1".into(),
            product_id: "sku-odd".into(),
            quantity: 1,
        })
        .await;
    assert!(corrupt_naming(&added, "sku-odd"), "{added:?}");
    let deduction = Deduction {
        parameters: None,
        request_id: "o1".into(),
        lines: vec![Line {
            product_id: "sku-odd".into(),
            quantity: 2,
        }],
    };
    // The conditional take does not match a Double; verifying first then
    // reads it, and says so.
    let deducted = store
        .deduct(deduction, participant_kit::Admission::Apply)
        .await;
    assert!(corrupt_naming(&deducted, "sku-odd"), "{deducted:?}");
    let view = store.product("sku-odd".into(), 10).await;
    assert!(corrupt_naming(&view, "sku-odd"), "{view:?}");

    let stored = products
        .find_one(doc! { "_id": "sku-odd" })
        .await
        .expect("find");
    assert_eq!(stored, Some(original), "the document was written over");
    for collection in ["operation_history", "deduct_lines"] {
        let n = db
            .collection::<Document>(collection)
            .count_documents(doc! {})
            .await
            .expect("count");
        assert_eq!(
            n, 0,
            "{collection} holds a row of a call refused as corrupt"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_standalone_server_is_refused_with_the_fix_named() {
    let Some(target) = mongo() else { return };
    if !target.test_server {
        // Not skipped: a standalone server of its own, on SecantusDB.
        eprintln!(
            "standalone check: on a SecantusDB of its own (the target is {})",
            target.label
        );
    }
    let server = MongoServer::start(ServerOptions {
        standalone: true,
        ..ServerOptions::default()
    })
    .expect("start a standalone test server");

    let refused = mongo_client::connect(
        &server.uri(),
        "standalone_check",
        "saga-tests",
        std::future::pending(),
    )
    .await
    .expect_err("a standalone server must be refused");
    assert!(
        matches!(refused, mongo_client::ConnectError::Standalone { .. }),
        "{refused}"
    );
    assert!(refused.to_string().contains("--replSet"), "{refused}");

    // The service itself exits non-zero, saying why.
    let mut service = Command::new(saga_tests::process::workspace_binary("payment-svc"))
        .args(["--listen", "127.0.0.1:0", "--mongodb-uri", &server.uri()])
        .env("NO_METRICS", "true")
        .env("RUST_LOG", "error")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn payment-svc");
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    let status = loop {
        if let Some(status) = service.try_wait().expect("wait") {
            break status;
        }
        if std::time::Instant::now() > deadline {
            let _ = service.kill();
            let _ = service.wait();
            panic!("payment-svc kept running against a standalone server");
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    let mut stderr = String::new();
    if let Some(mut pipe) = service.stderr.take() {
        use std::io::Read;
        let _ = pipe.read_to_string(&mut stderr);
    }
    assert!(!status.success(), "exit status {status}");
    assert!(
        stderr.contains("standalone") && stderr.contains("--replSet"),
        "stderr does not name the problem and the fix:\n{stderr}"
    );
}

/// Write commands outside a transaction, and the commit of one, must say
/// `{w: "majority", j: true}`.
fn is_write(name: &str) -> bool {
    matches!(
        name,
        "insert" | "update" | "delete" | "findAndModify" | "commitTransaction"
    )
}

/// A statement inside a transaction (its commit carries the concern).
fn in_transaction(name: &str, body: &Document) -> bool {
    body.get_bool("autocommit") == Ok(false) && name != "commitTransaction"
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_write_of_every_service_is_majority_and_journaled() {
    mongo_client::monitor::record_commands();
    let Some(stack) = Stack::start_mongo().await else {
        return;
    };
    stack.deposit("alice", 10_000).await;
    stack.add_stock("sku-apple", 5).await;
    let done = stack
        .order("o-ok", "alice", &[("sku-apple", 2, 100)])
        .await
        .expect("order");
    let refused = stack
        .order(
            "o-short",
            "alice",
            &[("sku-apple", 2, 100), ("sku-pear", 1, 5)],
        )
        .await
        .expect("order");
    assert_ne!(done.status, refused.status, "{done:?} / {refused:?}");
    stack.stop().await;

    let commands = mongo_client::monitor::recorded_commands();
    let writes: Vec<_> = commands
        .iter()
        .filter(|c| is_write(&c.name) && !in_transaction(&c.name, &c.body))
        .collect();
    for service in ["orchestrator", "payment", "inventory"] {
        assert!(
            writes.iter().any(|c| c.service == service),
            "no write of {service} was seen: {:?}",
            commands
                .iter()
                .map(|c| (&c.service, &c.name))
                .collect::<Vec<_>>()
        );
    }
    assert!(
        writes.iter().any(|c| c.name == "commitTransaction"),
        "no transaction was committed"
    );
    for write in writes {
        let concern = write.body.get_document("writeConcern");
        let ok = concern
            .is_ok_and(|wc| wc.get_str("w") == Ok("majority") && wc.get_bool("j") == Ok(true));
        assert!(
            ok,
            "{} {} without majority+journal: {}",
            write.service, write.name, write.body
        );
    }
    // Every participant transaction reads at snapshot: its first command
    // (the one that starts it) carries the read concern.
    let starts: Vec<_> = commands
        .iter()
        .filter(|c| c.body.get_bool("startTransaction") == Ok(true))
        .collect();
    for service in ["payment", "inventory"] {
        assert!(
            starts.iter().any(|c| c.service == service),
            "no transaction of {service} was started"
        );
    }
    for start in starts {
        let level = start
            .body
            .get_document("readConcern")
            .and_then(|rc| rc.get_str("level"));
        assert_eq!(
            level,
            Ok("snapshot"),
            "{} {} starts a transaction without snapshot reads: {}",
            start.service,
            start.name,
            start.body
        );
    }
}

/// A saga as the orchestrator starts it, leased to `owner` until `until_ms`.
fn leased_saga(id: &str, owner: &str, until_ms: i64) -> orchestrator::saga::Saga {
    use orchestrator::engine::StepNames;
    use orchestrator::saga::{Order, OrderItem};
    let steps = [StepNames {
        name: "payment",
        action: "charge",
        compensation: "refund",
    }];
    let order = Order {
        order_id: format!("order-{id}"),
        customer_id: "erin".into(),
        items: vec![OrderItem {
            product_id: "sku".into(),
            quantity: 1,
            unit_price_cents: 5,
        }],
        total_cents: 5,
    };
    saga_tests::leased_saga(&steps, id, order, 1, owner, until_ms)
}

/// Sagas stored by a version without `claimable_after_ms` get it when the
/// store opens (an expired lease becomes claimable, a finished saga never),
/// and a stored saga that cannot be decoded is skipped by recovery instead
/// of stopping it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn older_sagas_get_their_claimable_time_and_an_undecodable_one_is_skipped() {
    use orchestrator::engine::{self, Next, Outcome};
    use orchestrator::store::{MongoSagaStore, SagaStore};
    let Some(target) = mongo() else { return };
    let db = fresh_database(&target, "orchestrator").await;
    let store = MongoSagaStore::open(db.clone()).await.expect("open");
    let expired = leased_saga("old-expired", "a", 50);
    let held = leased_saga("old-held", "b", 5_000);
    let mut finished = leased_saga("old-finished", "a", 50);
    engine::record_outcome(&mut finished, Next::Act(0), Outcome::Succeeded, 2).expect("fits");
    finished.lease = None;
    for saga in [&expired, &held, &finished] {
        store.create(saga).await.expect("create");
    }
    let sagas = db.collection::<Document>("sagas");
    // The older shape: no claimable_after_ms at all.
    sagas
        .update_many(doc! {}, doc! { "$unset": { "claimable_after_ms": "" } })
        .await
        .expect("unset");
    // A document no version could decode, claimable by its fields.
    sagas
        .insert_one(doc! {
            "_id": "broken", "request_id": "r-broken", "status": "running",
            "claimable_after_ms": 0_i64, "saga": { "saga_id": 7 },
        })
        .await
        .expect("insert");

    let store = MongoSagaStore::open(db.clone()).await.expect("reopen");
    let claimable_after = |id: &'static str| {
        let sagas = sagas.clone();
        async move {
            let d = sagas.find_one(doc! { "_id": id }).await.expect("find");
            d.and_then(|d| d.get_i64("claimable_after_ms").ok())
        }
    };
    assert_eq!(claimable_after("old-expired").await, Some(50));
    assert_eq!(claimable_after("old-held").await, Some(5_000));
    assert_eq!(claimable_after("old-finished").await, Some(i64::MAX));

    let ids = |sagas: Vec<orchestrator::saga::Saga>| {
        sagas.into_iter().map(|s| s.saga_id).collect::<Vec<_>>()
    };
    let now = store.claimable(100, None, 10).await.expect("claimable");
    assert_eq!(ids(now), ["old-expired"]);
    let own = store
        .claimable(100, Some("b"), 10)
        .await
        .expect("claimable");
    assert_eq!(ids(own), ["old-expired", "old-held"]);
}

/// Finished sagas stored while the retention was off get their
/// `expire_at` once a store with a retention opens — on a task of its own,
/// never before `open` returns (dating a whole database one saga at a time
/// held an orchestrator unready for 38 s over 1,040 sagas): here the
/// dating's first update is held 5 s by a failpoint, and `open` returns
/// before. Each is dated its finish plus the retention; an unfinished saga
/// stays undated, and a finished one whose `updated_at_ms` cannot be read
/// is left as it is.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn finished_sagas_are_dated_beside_the_open_store() {
    use orchestrator::engine::{self, Next, Outcome};
    use orchestrator::store::{MongoSagaStore, SagaRetention, SagaStore};
    use std::time::Instant;
    if mongo().is_none() {
        return;
    }
    // Failpoints: on a SecantusDB of its own, whatever the target.
    let server = tokio::task::spawn_blocking(|| {
        MongoServer::start(ServerOptions {
            enable_test_commands: true,
            ..ServerOptions::default()
        })
    })
    .await
    .expect("join")
    .expect("start a test server with failpoints");
    let db = mongo_client::connect(
        &server.uri(),
        "dating_check",
        "saga-tests",
        std::future::pending(),
    )
    .await
    .expect("connect");
    let off = SagaRetention {
        keep: None,
        archive: false,
    };
    let store = MongoSagaStore::open_with(db.clone(), off)
        .await
        .expect("open");
    let running = leased_saga("still-running", "a", 5_000);
    let mut finished = Vec::new();
    for i in 0..40 {
        let mut saga = leased_saga(&format!("done-{i}"), "a", 50);
        engine::record_outcome(&mut saga, Next::Act(0), Outcome::Succeeded, 2).expect("fits");
        saga.lease = None;
        finished.push(saga);
    }
    for saga in finished.iter().chain([&running]) {
        store.create(saga).await.expect("create");
    }
    let sagas = db.collection::<Document>("sagas");
    sagas
        .insert_one(doc! {
            "_id": "broken", "request_id": "r-broken", "status": "completed",
            "updated_at_ms": "yesterday", "expire_at": Bson::Null, "saga": { "saga_id": 7 },
        })
        .await
        .expect("insert");
    let held = Duration::from_secs(5);
    db.client()
        .database("admin")
        .run_command(doc! {
            "configureFailPoint": "failCommand",
            "mode": { "times": 1 },
            "data": {
                "failCommands": ["update"],
                "blockConnection": true,
                "blockTimeMS": i64::try_from(held.as_millis()).expect("ms"),
            },
        })
        .await
        .expect("configure failpoint");

    let retention = SagaRetention {
        keep: Some(Duration::from_secs(3_600)),
        archive: false,
    };
    let opening = Instant::now();
    MongoSagaStore::open_with(db.clone(), retention)
        .await
        .expect("reopen");
    let opened = opening.elapsed();
    assert!(
        opened < held,
        "open waited for the dating: {opened:?} (its first update is held {held:?})"
    );
    let expire_at = |id: String| {
        let sagas = sagas.clone();
        async move {
            let d = sagas.find_one(doc! { "_id": id }).await.expect("find");
            d.and_then(|d| d.get_datetime("expire_at").ok().copied())
        }
    };
    let until = Instant::now() + Duration::from_secs(60);
    for saga in &finished {
        loop {
            if let Some(at) = expire_at(saga.saga_id.clone()).await {
                assert_eq!(
                    at.timestamp_millis(),
                    saga.updated_at_ms + 3_600_000,
                    "{}",
                    saga.saga_id
                );
                break;
            }
            assert!(Instant::now() < until, "{} not dated", saga.saga_id);
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
    assert_eq!(expire_at("still-running".into()).await, None);
    assert_eq!(expire_at("broken".into()).await, None);
}

/// A saga stored by the first version — no lease at all (no `saga.lease`,
/// no `lease_owner`, no `claimable_after_ms`) — is claimable at once when a
/// later version opens the store, and the index that version's recovery
/// scan used (`status_updated`, replaced by `claimable_after_ms`) is
/// dropped: no query uses it and it would cost every write.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_saga_stored_before_leases_existed_is_claimable_and_the_old_index_goes() {
    use orchestrator::store::{MongoSagaStore, SagaStore};
    let Some(target) = mongo() else { return };
    let db = fresh_database(&target, "orchestrator").await;
    let store = MongoSagaStore::open(db.clone()).await.expect("open");
    store
        .create(&leased_saga("pre-lease", "a", 5_000))
        .await
        .expect("create");
    let sagas = db.collection::<Document>("sagas");
    sagas
        .update_one(
            doc! { "_id": "pre-lease" },
            doc! { "$unset": { "saga.lease": "", "lease_owner": "", "claimable_after_ms": "" } },
        )
        .await
        .expect("unset");
    sagas
        .create_index(mongo_client::index(
            "status_updated",
            doc! { "status": 1, "updated_at_ms": 1 },
            false,
        ))
        .await
        .expect("old index");

    let store = MongoSagaStore::open(db.clone()).await.expect("reopen");
    let stored = store.get("pre-lease").await.expect("get").expect("stored");
    assert_eq!(stored.lease, None, "no lease was invented");
    let doc = sagas
        .find_one(doc! { "_id": "pre-lease" })
        .await
        .expect("find")
        .expect("stored");
    assert_eq!(doc.get_i64("claimable_after_ms").ok(), Some(0));
    let claimable = store.claimable(100, None, 10).await.expect("claimable");
    let ids: Vec<_> = claimable.into_iter().map(|s| s.saga_id).collect();
    assert_eq!(ids, ["pre-lease"]);
    let names = sagas.list_index_names().await.expect("indexes");
    assert!(
        !names.iter().any(|n| n == "status_updated"),
        "the replaced index is dropped: {names:?}"
    );
    for index in orchestrator::store::mongo_indexes() {
        let name = index.options.and_then(|o| o.name).expect("named");
        assert!(names.contains(&name), "{name} created: {names:?}");
    }
}

/// The saga store tells a failure that passes from one that will not:
/// a write conflict or a dropped connection is `Unavailable` (the executor
/// waits it out), a validation failure is `Rejected` (reported, not
/// retried forever) — on the server's own error replies, injected with
/// `failCommand`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn saga_store_errors_are_classified_from_the_servers_replies() {
    use orchestrator::store::{MongoSagaStore, SagaStore, StoreError};
    let Some(target) = mongo() else { return };
    if !target.test_server {
        // Not skipped: failpoints on a SecantusDB of its own.
        eprintln!(
            "failpoint check: on a SecantusDB of its own (the target is {})",
            target.label
        );
    }
    let server = tokio::task::spawn_blocking(|| {
        MongoServer::start(ServerOptions {
            enable_test_commands: true,
            ..ServerOptions::default()
        })
    })
    .await
    .expect("join")
    .expect("start a test server with failpoints");
    let db = mongo_client::connect(
        &format!("{}&retryWrites=false", server.uri()),
        "classify_check",
        "saga-tests",
        std::future::pending(),
    )
    .await
    .expect("connect");
    let store = MongoSagaStore::open(db.clone()).await.expect("open");
    let mut saga = leased_saga("classified", "a", 50);
    store.create(&saga).await.expect("create");
    let admin = db.client().database("admin");
    let fail_next_update = |data: Document| {
        let admin = admin.clone();
        async move {
            let mut data = data;
            data.insert("failCommands", vec!["update"]);
            admin
                .run_command(doc! {
                    "configureFailPoint": "failCommand",
                    "mode": { "times": 1 },
                    "data": data,
                })
                .await
                .expect("configure failpoint");
        }
    };
    saga.version = 2;
    for (data, transient) in [
        (
            doc! { "errorCode": 112, "errorLabels": ["TransientTransactionError"] },
            true,
        ),
        (doc! { "errorCode": 50 }, true),
        (doc! { "closeConnection": true }, true),
        (doc! { "errorCode": 121 }, false),
        (doc! { "errorCode": 13 }, false),
    ] {
        fail_next_update(data.clone()).await;
        let result = store.save(&saga).await;
        match (&result, transient) {
            (Err(StoreError::Unavailable(_)), true) | (Err(StoreError::Rejected(_)), false) => {}
            _ => panic!("{data}: {result:?}"),
        }
    }
    // Nothing was written by the failed saves; the next one succeeds.
    store.save(&saga).await.expect("save after the failpoints");
    let stored = store.get("classified").await.expect("get").expect("stored");
    assert_eq!(stored.version, 2);
    drop(server);
}

/// Indexes an older version created and this one replaced (same purpose,
/// keys without the tie break its listing sorts by) are dropped at open,
/// and their replacements created.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replaced_indexes_are_dropped_when_a_participant_opens() {
    let Some(target) = mongo() else { return };
    for service in ["payment", "inventory"] {
        let db = fresh_database(&target, service).await;
        let mut old = vec![(
            "operation_history",
            mongo_client::index(
                "subject_recent",
                doc! { "subject": 1, "recorded_at_ms": -1 },
                false,
            ),
        )];
        if service == "inventory" {
            old.push((
                "deduct_lines",
                mongo_client::index(
                    "product_recent",
                    doc! { "product_id": 1, "recorded_at_ms": -1 },
                    false,
                ),
            ));
        }
        for (collection, index) in old.clone() {
            db.collection::<Document>(collection)
                .create_index(index)
                .await
                .expect("old index");
        }
        if service == "payment" {
            MongoPaymentStore::open(db.clone()).await.expect("open");
        } else {
            MongoInventoryStore::open(db.clone()).await.expect("open");
        }
        for (collection, replaced, replacement) in [
            ("operation_history", "subject_recent", "subject_newest"),
            ("deduct_lines", "product_recent", "product_newest"),
        ]
        .into_iter()
        .take(old.len())
        {
            let names = db
                .collection::<Document>(collection)
                .list_index_names()
                .await
                .expect("list indexes");
            assert!(!names.iter().any(|n| n == replaced), "{service}: {names:?}");
            assert!(
                names.iter().any(|n| n == replacement),
                "{service}: {names:?}"
            );
        }
    }
}
