//! A participant SIGKILLed inside a MongoDB transaction costs delay, not a
//! cancelled order.
//!
//! payment-svc runs as a real process. A `failCommand` failpoint holds its
//! next `commitTransaction`, so the Charge's writes are done but not
//! committed and their locks are held; the test waits until they are
//! (a probe transaction on the account meets WriteConflict), SIGKILLs the
//! process and starts it again. Retries of the same request id meet
//! WriteConflict until the server's transaction lifetime (3 s here, 60 s on
//! a default mongod, 10 s in compose) aborts the dead transaction; then the
//! Charge applies once and the saga completes. Needs the test server (its
//! lifetime is set at start-up); with a real MongoDB it says so and skips.

use bson::doc;
use orchestrator::executor::RetryPolicy;
use saga_proto::inventory::v1 as inventory;
use saga_proto::inventory::v1::inventory_service_client::InventoryServiceClient;
use saga_proto::payment::v1 as payment;
use saga_proto::payment::v1::payment_service_client::PaymentServiceClient;
use saga_proto::saga::v1 as pb;
use saga_proto::saga::v1::order_service_client::OrderServiceClient;
use saga_tests::mongo_server::{MongoServer, ServerOptions};
use saga_tests::process::{spawn_tied, stop};
use saga_tests::{
    OrchestratorHarness, ParticipantHarness, Service, Storage, balance, channel, order_request,
    wait_terminal,
};
use std::net::SocketAddr;
use std::process::{Child, Command, Stdio};
use std::time::Duration;
use tokio::time::Instant;

fn start_payment(addr: SocketAddr, uri: &str, database: &str) -> Child {
    let mut cmd = Command::new(saga_tests::process::workspace_binary("payment-svc"));
    cmd.args(["--listen", &addr.to_string(), "--mongodb-uri", uri])
        .args(["--mongodb-database", database, "--no-metrics"])
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    spawn_tied(cmd).expect("start payment-svc")
}

/// Whether the account's document is locked by an open transaction: a
/// probe transaction writing it meets WriteConflict (and is aborted, so
/// it changes nothing).
async fn account_locked(db: &mongodb::Database, customer: &str) -> bool {
    let mut session = db.client().start_session().await.expect("session");
    session.start_transaction().await.expect("start");
    let probe = db
        .collection::<bson::Document>("accounts")
        .update_one(
            doc! { "_id": customer },
            // A real change (a no-op update writes nothing, so conflicts
            // with nothing); the transaction is aborted.
            doc! { "$set": { "lock_probe": uuid::Uuid::now_v7().to_string() } },
        )
        .session(&mut session)
        .await;
    let _ = session.abort_transaction().await;
    matches!(
        probe.as_ref().map_err(|e| e.kind.as_ref()),
        Err(mongodb::error::ErrorKind::Command(c)) if c.code == 112
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_participant_killed_inside_a_transaction_costs_delay_not_the_order() {
    let Some(target) = saga_tests::backends::mongo() else {
        return;
    };
    if !target.test_server {
        // Not skipped: its transaction lifetime is set at start, so it runs
        // on a SecantusDB of its own.
        eprintln!(
            "on a SecantusDB of its own (the target is {})",
            target.label
        );
    }
    let server = tokio::task::spawn_blocking(|| {
        MongoServer::start(ServerOptions {
            enable_test_commands: true,
            transaction_lifetime_seconds: Some(3),
            ..ServerOptions::default()
        })
    })
    .await
    .expect("join")
    .expect("start a test server");
    let uri = server.uri();
    let prefix = format!("killed_{}", uuid::Uuid::now_v7().simple());
    let payment_db = format!("{prefix}_payment");
    let storage = Storage::Mongo {
        uri: uri.clone(),
        prefix,
    };
    let payment_addr = {
        let probe = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        probe.local_addr().expect("addr")
    };
    let mut payment_process = start_payment(payment_addr, &uri, &payment_db);
    saga_tests::wait_ready(payment_addr, Duration::from_secs(60)).await;
    let inventory = ParticipantHarness::new(Service::Inventory, storage.clone())
        .start()
        .await;
    // Patient enough for a restart and the lifetime: attempts × call
    // timeout (2 s in tests) and the backoff outlast 3 s.
    let policy = RetryPolicy {
        action_attempts: 8,
        compensation_attempts: 30,
        min_delay: Duration::from_millis(100),
        max_delay: Duration::from_secs(1),
        step_deadline: Duration::from_secs(60),
        jitter: Default::default(),
    };
    let orchestrator =
        OrchestratorHarness::order_saga(storage.clone(), payment_addr, inventory.addr)
            .retry(policy)
            .start()
            .await;

    PaymentServiceClient::new(channel(payment_addr).await)
        .deposit(payment::DepositRequest {
            request_id: "dep-alice".into(),
            customer_id: "alice".into(),
            amount_cents: 1_000,
        })
        .await
        .expect("deposit");
    InventoryServiceClient::new(channel(inventory.addr).await)
        .add_stock(inventory::AddStockRequest {
            request_id: "stock-apple".into(),
            product_id: "sku-apple".into(),
            quantity: 10,
        })
        .await
        .expect("add stock");

    let db = mongo_client::connect(&uri, &payment_db, "probe", std::future::pending())
        .await
        .expect("connect");
    db.client()
        .database("admin")
        .run_command(doc! {
            "configureFailPoint": "failCommand",
            "mode": { "times": 1 },
            "data": {
                "failCommands": ["commitTransaction"],
                "blockConnection": true,
                "blockTimeMS": 15_000,
                "appName": "payment-svc",
            },
        })
        .await
        .expect("failpoint");

    let created = OrderServiceClient::new(channel(orchestrator.addr).await)
        .create_order(order_request(
            "killed-1",
            "alice",
            &[("sku-apple", 2, 150)],
            false,
        ))
        .await
        .expect("create order")
        .into_inner();

    // The Charge's writes are in and uncommitted: the account is locked.
    let deadline = Instant::now() + Duration::from_secs(30);
    while !account_locked(&db, "alice").await {
        assert!(
            Instant::now() < deadline,
            "the Charge never held the account"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let killed_at = Instant::now();
    payment_process.kill().expect("SIGKILL payment-svc");
    let _ = payment_process.wait();
    let mut payment_process = start_payment(payment_addr, &uri, &payment_db);

    let saga = wait_terminal(orchestrator.addr, &created.saga_id, Duration::from_secs(60)).await;
    let delay = killed_at.elapsed();
    let _ = stop(&mut payment_process, Duration::from_secs(5));
    assert_eq!(saga.status(), pb::SagaStatus::Completed, "{saga:?}");
    let charge = saga_tests::step_named(&saga, "payment");
    assert!(
        charge.attempts >= 2,
        "the Charge never had to retry: {charge:?}"
    );
    let mut payment_process = start_payment(payment_addr, &uri, &payment_db);
    saga_tests::wait_ready(payment_addr, Duration::from_secs(60)).await;
    assert_eq!(
        balance(payment_addr, "alice").await,
        1_000 - 300,
        "charged exactly once"
    );
    let _ = stop(&mut payment_process, Duration::from_secs(5));
    eprintln!(
        "killed inside a transaction: completed {:.1} s after the kill (lifetime 3 s), {} Charge attempts",
        delay.as_secs_f64(),
        charge.attempts
    );
    orchestrator.stop().await;
    inventory.stop().await;
    drop(server);
}
