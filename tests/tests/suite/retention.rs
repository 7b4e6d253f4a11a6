//! Retention, as a user sees it: finished sagas and the participants'
//! records disappear after their retention (on the embedded stores by the
//! purge, on MongoDB by TTL indexes), FAILED and unfinished sagas never
//! do, a CreateOrder with an expired request id starts a new saga while a
//! duplicate inside the window returns the existing one, expired sagas are
//! archived first when an archive directory is set, and a participant
//! refuses to start with a history retention below the minimum.

use futures::FutureExt;
use orchestrator::retention::RetentionSettings;
use orchestrator::saga::{Saga, SagaStatus};
use orchestrator::store::{MongoSagaStore, SagaRetention, SagaStore};
use participant_kit::HistoryRetention;
use saga_proto::participant::v1 as participant;
use saga_proto::participant::v1::operation_history_service_client::OperationHistoryServiceClient;
use saga_proto::saga::v1 as pb;
use saga_tests::mongo_server::{MongoServer, ServerOptions};
use saga_tests::{Stack, Storage, backends};
use std::future::Future;
use std::net::SocketAddr;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const SAGA_RETENTION: Duration = Duration::from_secs(2);
const HISTORY_RETENTION: Duration = Duration::from_secs(3);
const PURGE_INTERVAL: Duration = Duration::from_millis(100);

fn history() -> HistoryRetention {
    HistoryRetention {
        keep: HISTORY_RETENTION,
        purge_interval: PURGE_INTERVAL,
    }
}

fn sagas(archive: Option<&Path>) -> RetentionSettings {
    RetentionSettings {
        saga_retention: Some(SAGA_RETENTION),
        archive_dir: archive.map(Path::to_path_buf),
        purge_interval: PURGE_INTERVAL,
        retry_window: None,
        send_window: None,
    }
}

/// Polls `done` until it holds; how long that took (panics after
/// `within`). Expiry happens some time after the date, never at it, so
/// tests wait on the condition.
async fn eventually<F, Fut>(what: &str, within: Duration, mut done: F) -> Duration
where
    F: FnMut() -> Fut,
    Fut: Future<Output = bool>,
{
    let started = Instant::now();
    while !done().await {
        assert!(started.elapsed() < within, "{what}: not within {within:?}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    started.elapsed()
}

async fn saga_exists(addr: SocketAddr, saga_id: &str) -> bool {
    let reply = pb::saga_service_client::SagaServiceClient::new(saga_tests::channel(addr).await)
        .get_saga(pb::GetSagaRequest {
            lookup: Some(pb::get_saga_request::Lookup::SagaId(saga_id.into())),
        })
        .await;
    match reply {
        Ok(_) => true,
        Err(status) if status.code() == tonic::Code::NotFound => false,
        Err(status) => panic!("GetSaga {saga_id}: {status}"),
    }
}

async fn records(addr: SocketAddr, request_id: &str) -> usize {
    OperationHistoryServiceClient::new(saga_tests::channel(addr).await)
        .list_operations(participant::ListOperationsRequest {
            request_id: request_id.into(),
        })
        .await
        .expect("ListOperations")
        .into_inner()
        .operations
        .len()
}

/// The scenario both backends run: one COMPLETED and one CANCELLED saga,
/// a duplicate inside the window, both gone after the retention with the
/// participants' records, then the same request id makes a new saga.
/// Returns how long after its retention the first saga was gone.
async fn finished_sagas_and_records_expire(stack: &Stack, within: Duration) -> Duration {
    stack.deposit("alice", 10_000).await;
    stack.add_stock("sku-apple", 100).await;
    let items = [("sku-apple", 1, 100)];
    let done = stack.order("r-done", "alice", &items).await.expect("order");
    assert_eq!(done.status(), pb::SagaStatus::Completed);
    let finished_at = Instant::now();
    let poor = stack
        .order("r-poor", "alice", &[("sku-apple", 1, 1_000_000)])
        .await
        .expect("order");
    assert_eq!(poor.status(), pb::SagaStatus::Cancelled);

    // Inside the window: the existing saga.
    let dup = stack.order("r-done", "alice", &items).await.expect("dup");
    assert!(!dup.created);
    assert_eq!(dup.saga_id, done.saga_id);
    let payment_request = format!("{}:payment", done.saga_id);
    let inventory_request = format!("{}:inventory", done.saga_id);
    assert_eq!(records(stack.payment.addr, &payment_request).await, 1);
    assert_eq!(records(stack.inventory.addr, &inventory_request).await, 2); // record + line

    let orchestrator = stack.orchestrator().addr;
    eventually("the completed saga expires", within, || {
        saga_exists(orchestrator, &done.saga_id).map(|e| !e)
    })
    .await;
    let late = finished_at.elapsed().saturating_sub(SAGA_RETENTION);
    eventually("the cancelled saga expires", within, || {
        saga_exists(orchestrator, &poor.saga_id).map(|e| !e)
    })
    .await;
    for (addr, request_id) in [
        (stack.payment.addr, payment_request),
        (stack.inventory.addr, inventory_request),
        (stack.payment.addr, format!("{}:payment", poor.saga_id)),
    ] {
        eventually("the participants' records expire", within, || {
            records(addr, &request_id).map(|n| n == 0)
        })
        .await;
    }

    // The request id is free again: a new saga, charged again.
    let again = stack.order("r-done", "alice", &items).await.expect("again");
    assert!(again.created);
    assert_ne!(again.saga_id, done.saga_id);
    assert_eq!(again.status(), pb::SagaStatus::Completed);
    assert_eq!(stack.balance("alice").await, 10_000 - 200);
    late
}

/// Runs [`finished_sagas_and_records_expire`] on a stack over `storage`
/// (archiving into `archive` when given), waiting up to `within` for each
/// expiry, and says how late the first one was (`target` names where).
async fn expire_on(storage: Storage, archive: Option<&Path>, within: Duration, target: &str) {
    let stack = Stack::start_retaining(
        tempfile::tempdir().expect("tempdir"),
        storage,
        sagas(archive),
        history(),
    )
    .await;
    let late = finished_sagas_and_records_expire(&stack, within).await;
    eprintln!("{target}: the completed saga was gone {late:?} after its retention");
    stack.stop().await;
}

/// Storage in a fresh set of databases, named `{prefix}_<uuid>_*`, on the
/// MongoDB at `uri`.
fn fresh_mongo(uri: String, prefix: &str) -> Storage {
    Storage::Mongo {
        uri,
        prefix: format!("{prefix}_{}", uuid::Uuid::now_v7().simple()),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn embedded_finished_sagas_are_archived_then_expire_with_their_records() {
    let dir = tempfile::tempdir().expect("tempdir");
    let archive = dir.path().join("archive");
    expire_on(
        Storage::from(dir.path()),
        Some(&archive),
        Duration::from_secs(20),
        "embedded",
    )
    .await;
    assert_archived_once(&archive);
}

/// `archive` holds one day's file with the two finished sagas of
/// [`finished_sagas_and_records_expire`], each once, in the order they
/// expired, each with the time it was archived.
fn assert_archived_once(archive: &Path) {
    let files: Vec<_> = std::fs::read_dir(archive)
        .expect("archive dir")
        .map(|e| e.expect("entry").path())
        .collect();
    assert_eq!(files.len(), 1, "{files:?}");
    let name = files[0].file_name().unwrap().to_string_lossy().into_owned();
    assert!(
        name.starts_with("sagas-") && name.ends_with(".jsonl"),
        "{name}"
    );
    let lines: Vec<serde_json::Value> = std::fs::read_to_string(&files[0])
        .expect("read archive")
        .lines()
        .map(|l| serde_json::from_str(l).expect("one JSON object per line"))
        .collect();
    let archived: Vec<(&str, &str)> = lines
        .iter()
        .map(|l| {
            (
                l["request_id"].as_str().unwrap(),
                l["status"].as_str().unwrap(),
            )
        })
        .collect();
    assert_eq!(archived, [("r-done", "completed"), ("r-poor", "cancelled")]);
    assert!(lines.iter().all(|l| l["archived_at_ms"].is_i64()));
}

/// On MongoDB with an archive directory the orchestrator's purge archives
/// and deletes expired sagas itself (the TTL index waits an hour longer, a
/// backstop only): each lands in the archive exactly once, and the
/// participants' records still go by their TTL index.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mongo_finished_sagas_are_archived_before_they_are_deleted() {
    let Some((_server, uri, within)) = ttl_server() else {
        return;
    };
    let dir = tempfile::tempdir().expect("tempdir");
    let archive = dir.path().join("archive");
    let storage = fresh_mongo(uri, "archive");
    expire_on(storage, Some(&archive), within, "MongoDB archive").await;
    assert_archived_once(&archive);
}

/// A SecantusDB with a 1 s TTL sweep (or the real MongoDB of
/// `MONGODB_URI`, whose TTL monitor runs every 60 s), and how long to wait
/// for an expiry there.
fn ttl_server() -> Option<(Option<MongoServer>, String, Duration)> {
    let target = backends::mongo()?;
    if !target.test_server {
        return Some((None, target.uri, Duration::from_secs(150)));
    }
    let server = MongoServer::start(ServerOptions {
        ttl_sweep_seconds: Some(1),
        ..ServerOptions::default()
    })
    .expect("start a test server with a 1 s TTL sweep");
    let uri = server.uri();
    Some((Some(server), uri, Duration::from_secs(30)))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mongo_ttl_indexes_expire_finished_sagas_and_records() {
    let Some((_server, uri, within)) = ttl_server() else {
        return;
    };
    expire_on(fresh_mongo(uri, "ttl"), None, within, "MongoDB TTL").await;
}

fn saga_in(id: &str, status: SagaStatus, at_ms: i64) -> Saga {
    let order = orchestrator::saga::Order {
        order_id: format!("order-{id}"),
        customer_id: "erin".into(),
        items: vec![orchestrator::saga::OrderItem {
            product_id: "sku".into(),
            quantity: 1,
            unit_price_cents: 1,
        }],
        total_cents: 1,
    };
    let steps = [orchestrator::engine::StepNames {
        name: "payment",
        action: "charge",
        compensation: "refund",
    }];
    let mut s = orchestrator::engine::start(
        &steps,
        id.into(),
        format!("r-{id}"),
        "fp".into(),
        order,
        at_ms,
    );
    s.version = 1;
    s.status = status;
    s.updated_at_ms = at_ms;
    if status.is_terminal() {
        s.lease = None;
    }
    s
}

/// On MongoDB the server deletes: COMPLETED and CANCELLED sagas go some
/// time after their `expire_at`; FAILED, RUNNING and COMPENSATING sagas —
/// no expiry date — stay however many sweeps pass.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mongo_ttl_never_deletes_failed_or_unfinished_sagas() {
    let Some((_server, uri, within)) = ttl_server() else {
        return;
    };
    let db = mongo_client::connect(
        &uri,
        &format!("ttl_sagas_{}", uuid::Uuid::now_v7().simple()),
        "saga-tests",
        std::future::pending(),
    )
    .await
    .expect("connect");
    let store = MongoSagaStore::open_with(
        db,
        SagaRetention {
            keep: Some(Duration::from_secs(1)),
            archive: false,
        },
    )
    .await
    .expect("open");
    let now = service_kit::time::now_ms();
    let all = [
        ("completed", SagaStatus::Completed),
        ("cancelled", SagaStatus::Cancelled),
        ("failed", SagaStatus::Failed),
        ("running", SagaStatus::Running),
        ("compensating", SagaStatus::Compensating),
    ];
    for (id, status) in all {
        store
            .create(&saga_in(id, status, now))
            .await
            .expect("create");
    }
    let expiry = Instant::now() + Duration::from_secs(1);
    for id in ["completed", "cancelled"] {
        let store = &store;
        eventually("a finished saga expires", within, || async move {
            store.get(id).await.expect("get").is_none()
        })
        .await;
    }
    eprintln!(
        "MongoDB TTL: finished sagas gone {:?} after their expire_at",
        Instant::now().saturating_duration_since(expiry)
    );
    // More sweeps pass (three; one on mongod, whose sweep is a minute): each
    // is seen deleting a canary that expired already, and the others are
    // still there after it.
    let sweeps = if within > Duration::from_secs(60) {
        1
    } else {
        3
    };
    for sweep in 0..sweeps {
        let canary = format!("canary-{sweep}");
        store
            .create(&saga_in(&canary, SagaStatus::Completed, now))
            .await
            .expect("create a canary");
        let store = &store;
        let canary = &canary;
        eventually("a later sweep deletes the canary", within, || async move {
            store.get(canary).await.expect("get").is_none()
        })
        .await;
    }
    for id in ["failed", "running", "compensating"] {
        assert!(
            store.get(id).await.expect("get").is_some(),
            "{id} must live"
        );
    }
}

fn binary(name: &str) -> std::path::PathBuf {
    let exe = std::env::current_exe().expect("test binary path");
    let dir = exe
        .parent()
        .and_then(|deps| deps.parent())
        .expect("target dir");
    let binary = dir.join(name);
    assert!(
        binary.exists(),
        "{} is missing: build the workspace (cargo test --workspace builds it)",
        binary.display()
    );
    binary
}

/// Below the minimum derived from the orchestrator's limits, a participant
/// exits at once with one line saying why; mirroring shorter orchestrator
/// limits lowers the minimum.
#[test]
fn a_participant_refuses_a_history_retention_below_the_minimum() {
    let dir = tempfile::tempdir().expect("tempdir");
    for name in ["payment-svc", "inventory-svc"] {
        let output = Command::new(binary(name))
            .args(["--listen", "127.0.0.1:0", "--history-retention", "10m"])
            .arg("--data-dir")
            .arg(dir.path())
            .env("NO_METRICS", "true")
            .env("RUST_LOG", "off")
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .output()
            .expect("run");
        assert!(!output.status.success(), "{name}: {}", output.status);
        let stderr = String::from_utf8_lossy(&output.stderr);
        let lines: Vec<&str> = stderr.lines().collect();
        assert_eq!(lines.len(), 1, "{name}: one line:\n{stderr}");
        assert!(
            lines[0].starts_with(&format!(
                "{name}: --history-retention 10m is below the minimum 31m"
            )),
            "{stderr}"
        );
    }
}

/// Every stage name of an explain's winning plan, outermost first.
fn stages(plan: &bson::Document) -> Vec<String> {
    let mut out = Vec::new();
    let mut node = Some(plan);
    while let Some(n) = node {
        if let Ok(stage) = n.get_str("stage") {
            out.push(stage.to_owned());
        }
        node = n.get_document("inputStage").ok();
    }
    out
}

/// The orchestrator's retention queries on MongoDB — the archive's scan of
/// expired sagas, the oldest finished saga, the backfill of older
/// documents, the delete of an archived saga (explained as the `find` of
/// its filter: explain of `delete` is not reliable on the test server) —
/// are each served by an index: an IXSCAN, no COLLSCAN, no SORT stage.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mongo_retention_queries_are_served_by_an_index() {
    use bson::doc;
    let Some(target) = backends::mongo() else {
        return;
    };
    let db = backends::fresh_database(&target, "plans").await;
    let store = MongoSagaStore::open(db.clone()).await.expect("open");
    let now = service_kit::time::now_ms();
    for (i, status) in SagaStatus::ALL.into_iter().enumerate() {
        store
            .create(&saga_in(&format!("p{i}"), status, now))
            .await
            .expect("create");
    }
    let date = bson::DateTime::from_millis(now);
    let queries = [
        (
            "expired",
            doc! { "find": "sagas", "filter": { "expire_at": { "$lt": date } },
            "sort": { "expire_at": 1 }, "limit": 500 },
        ),
        (
            "oldest finished",
            doc! { "find": "sagas", "filter": { "expire_at": { "$gte": bson::DateTime::from_millis(0) } },
            "sort": { "expire_at": 1 }, "limit": 1 },
        ),
        (
            "backfill",
            doc! { "find": "sagas", "filter": { "expire_at": null, "status": "completed",
            "updated_at_ms": { "$type": "long" } }, "hint": "expire_at_ttl", "limit": 1000 },
        ),
        (
            "delete archived",
            doc! { "find": "sagas", "filter": { "_id": "p2", "expire_at": { "$gte": bson::DateTime::from_millis(0) } },
            "hint": "_id_" },
        ),
    ];
    for (what, find) in queries {
        let explained = db
            .run_command(doc! { "explain": find, "verbosity": "queryPlanner" })
            .await
            .expect("explain");
        let plan = explained
            .get_document("queryPlanner")
            .and_then(|q| q.get_document("winningPlan"))
            .expect("winningPlan");
        let stages = stages(plan);
        assert!(stages.iter().any(|s| s == "IXSCAN"), "{what}: {stages:?}");
        assert!(
            !stages.iter().any(|s| s == "COLLSCAN" || s == "SORT"),
            "{what}: {stages:?}"
        );
    }
}
