//! MongoDB going away. At start, connecting waits and retries with backoff
//! (no panic). Mid-saga, the saga waits the outage out and completes, and
//! nothing that was acknowledged is lost.
//!
//! Outages come from the MongoDB test server
//! ([`MongoServer::begin_outage`]: SecantusDB stopped and started again on
//! the same port and storage — connections closed, data kept), so these
//! tests need a test server: with a real MongoDB (`MONGODB_URI`) they only
//! say so. Each test runs its own server process, so one test's outage
//! never disturbs another test. An outage lasts until the test has seen
//! what it is about (the services' drivers retrying, a call answered
//! UNAVAILABLE), never for a fixed time, and every other wait is on a
//! condition (connection attempts seen, a saga's state), never a fixed
//! sleep. `RUST_LOG=info` shows the services' logs.

use bson::doc;
use saga_proto::payment::v1 as payment;
use saga_proto::payment::v1::payment_service_client::PaymentServiceClient;
use saga_proto::saga::v1 as pb;
use saga_proto::saga::v1::order_service_client::OrderServiceClient;
use saga_proto::saga::v1::saga_service_client::SagaServiceClient;
use saga_tests::mongo_server::{MongoServer, ServerOptions};
use saga_tests::step_named as step;
use saga_tests::{
    OrchestratorHarness, ParticipantHarness, Service, Stack, Storage, channel, fast_retry,
    order_request, wait_terminal,
};
use service_kit::shutdown::Shutdown;
use std::net::SocketAddr;
use std::time::Duration;
use tokio::time::Instant;

/// Whether the MongoDB tests run at all (false only when no MongoDB target
/// is configured and none is required). Each outage test starts a
/// SecantusDB of its own, which it can take down — also when the target is
/// a real MongoDB (`MONGODB_URI`), which it cannot: it says so and runs.
fn test_server_available() -> bool {
    if std::env::var_os("RUST_LOG").is_some() {
        let _ = service_kit::telemetry::init(service_kit::telemetry::LogFormat::Text);
    }
    let Some(target) = saga_tests::backends::mongo() else {
        return false;
    };
    if !target.test_server {
        eprintln!(
            "MongoDB outage tests: on a SecantusDB of their own (they take it down), \
             not on the target, {}",
            target.label
        );
    }
    true
}

/// A test server of this test's own on `port` (0: any port).
async fn start_server(port: u16) -> MongoServer {
    tokio::task::spawn_blocking(move || {
        MongoServer::start(ServerOptions {
            port,
            ..ServerOptions::default()
        })
    })
    .await
    .expect("start the MongoDB test server")
    .expect("the MongoDB test server is up")
}

/// A port where nothing answers MongoDB: every connection is accepted and
/// closed at once, and counted — so a test can wait until a client has
/// tried (and failed) a given number of times instead of sleeping.
struct DeadPort {
    port: u16,
    attempts: std::sync::Arc<std::sync::atomic::AtomicUsize>,
    task: tokio::task::JoinHandle<()>,
}

impl DeadPort {
    async fn open() -> DeadPort {
        Self::open_on(0).await
    }

    /// On `port` of 127.0.0.1 (0: any), e.g. the port of a server that is
    /// down, so its clients' attempts to reach it are counted.
    async fn open_on(port: u16) -> DeadPort {
        let listener =
            saga_tests::listener(std::net::SocketAddr::from(([127, 0, 0, 1], port))).await;
        let port = listener.local_addr().expect("addr").port();
        let attempts = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let counted = attempts.clone();
        let task = tokio::spawn(async move {
            while let Ok((socket, _)) = listener.accept().await {
                counted.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                drop(socket);
            }
        });
        DeadPort {
            port,
            attempts,
            task,
        }
    }

    /// How many connections were tried so far.
    fn attempts(&self) -> usize {
        self.attempts.load(std::sync::atomic::Ordering::SeqCst)
    }

    /// Waits until `n` connections were tried.
    async fn tried(&self, n: usize) {
        let deadline = Instant::now() + Duration::from_secs(30);
        while self.attempts.load(std::sync::atomic::Ordering::SeqCst) < n {
            assert!(Instant::now() < deadline, "fewer than {n} attempts in 30 s");
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }

    /// Stops answering and frees the port.
    async fn close(self) -> u16 {
        self.task.abort();
        let _ = self.task.await;
        self.port
    }
}

async fn get_saga(addr: SocketAddr, lookup: pb::get_saga_request::Lookup) -> pb::Saga {
    SagaServiceClient::new(channel(addr).await)
        .get_saga(pb::GetSagaRequest {
            lookup: Some(lookup),
        })
        .await
        .expect("get saga")
        .into_inner()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connect_keeps_retrying_until_shutdown() {
    // Nothing answers on this port; pings fail after 200 ms each.
    let dead = DeadPort::open().await;
    let uri = format!(
        "mongodb://127.0.0.1:{}/?directConnection=true&serverSelectionTimeoutMS=200",
        dead.port
    );
    let shutdown = Shutdown::new();
    let connecting = tokio::spawn({
        let shutdown = shutdown.clone();
        async move { mongo_client::connect(&uri, "outage_nowhere", "saga-tests", shutdown.wait()).await }
    });
    // Several failed pings later, connect is still trying.
    dead.tried(6).await;
    assert!(
        !connecting.is_finished(),
        "connect gave up (or panicked) while MongoDB was down"
    );
    shutdown.trigger();
    let result = tokio::time::timeout(Duration::from_secs(2), connecting)
        .await
        .expect("connect stops promptly on shutdown")
        .expect("connect did not panic");
    let error = result.expect_err("no server, so no database");
    assert!(
        matches!(
            &error,
            mongo_client::ConnectError::Driver(e)
                if matches!(e.kind.as_ref(), mongodb::error::ErrorKind::ServerSelection { .. })
        ),
        "the last ping's error: {error}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connect_waits_for_mongodb_to_come_up() {
    if !test_server_available() {
        return;
    }
    // A short selection timeout makes each ping fail fast, so connect goes
    // round its retry loop (and logs "MongoDB unreachable; retrying") while
    // nothing answers on the port.
    let dead = DeadPort::open().await;
    let uri = format!(
        "mongodb://127.0.0.1:{}/?directConnection=true&serverSelectionTimeoutMS=250",
        dead.port
    );
    let started = Instant::now();
    let connecting = tokio::spawn(async move {
        mongo_client::connect(&uri, "outage_connect", "saga-tests", std::future::pending()).await
    });
    dead.tried(3).await;
    assert!(
        !connecting.is_finished(),
        "connect finished (or panicked) with nothing answering"
    );
    let port = dead.close().await;

    let server = start_server(port).await;
    assert_eq!(server.port(), port);
    let up = started.elapsed();
    let db = tokio::time::timeout(Duration::from_secs(10), connecting)
        .await
        .expect("connect completes within 10 s of MongoDB coming up")
        .expect("connect did not panic")
        .expect("connected");
    let connected = started.elapsed();
    let pong = db.run_command(doc! { "ping": 1 }).await.expect("ping");
    assert_eq!(pong.get_f64("ok").ok(), Some(1.0));
    eprintln!(
        "connect: {} up after {up:?}, connected after {connected:?} ({:?} later)",
        saga_tests::mongo_server::NAME,
        connected - up
    );
    drop(server);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_saga_waits_out_a_mongodb_outage_and_completes() {
    // Production driver settings: operations wait up to 5 s for a server,
    // so the driver itself waits out a short outage (one that ends once
    // the services have met it; should it outlast the 5 s, the saves fail
    // and are retried as in the next test).
    saga_through_an_outage("", false).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_saga_retries_its_saves_through_a_mongodb_outage_and_completes() {
    // Operations give up after 250 ms without a server, so during the
    // outage saves fail (StoreError::Unavailable) and the executor retries;
    // the outage lasts until a CreateOrder sent during it was refused.
    saga_through_an_outage("&serverSelectionTimeoutMS=250", true).await;
}

/// How many connection attempts to MongoDB's port the services make
/// during an outage before it ends: each service's driver tries again
/// (every 500 ms at most) while an operation waits for a server, so
/// several attempts mean the services met the outage and kept trying.
const ATTEMPTS_IN_OUTAGE: usize = 6;

/// Two sagas acknowledged before an outage (one stuck retrying its charge
/// because payment is down, which comes back during the outage), and one
/// CreateOrder sent during it: all complete, each charged and deducted
/// once. `uri_options` are appended to every service's MongoDB URI. The
/// outage lasts until the services' drivers tried to reach MongoDB
/// [`ATTEMPTS_IN_OUTAGE`] times, payment's start-up is seen waiting for it
/// and, when `refused_during_outage` (operations give up fast), the order
/// sent during the outage was refused.
async fn saga_through_an_outage(uri_options: &str, refused_during_outage: bool) {
    if !test_server_available() {
        return;
    }
    let mut server = start_server(0).await;
    let storage = Storage::Mongo {
        uri: format!("{}{uri_options}", server.uri()),
        prefix: format!("outage_{}", uuid::Uuid::now_v7().simple()),
    };
    // Patient enough to retry the charge through the participant's and
    // MongoDB's downtime.
    let mut patient = fast_retry();
    patient.action_attempts = 1_000;
    let payment = ParticipantHarness::new(Service::Payment, storage.clone())
        .start()
        .await;
    let inventory = ParticipantHarness::new(Service::Inventory, storage.clone())
        .start()
        .await;
    let orchestrator =
        OrchestratorHarness::order_saga(storage.clone(), payment.addr, inventory.addr)
            .retry(patient)
            .start()
            .await;
    let stack = Stack {
        dir: tempfile::tempdir().expect("tempdir"),
        storage,
        payment,
        inventory,
        orchestrator: None,
    };
    stack.deposit("alice", 1_000).await;
    stack.add_stock("sku-apple", 10).await;
    let Stack {
        storage,
        payment,
        inventory,
        ..
    } = stack;

    // Payment is down, so the first saga keeps retrying (and saving) its charge.
    let payment_addr = payment.addr;
    payment.stop().await;
    let mut orders = OrderServiceClient::new(channel(orchestrator.addr).await);
    let first = orders
        .create_order(order_request(
            "outage-1",
            "alice",
            &[("sku-apple", 2, 100)],
            false,
        ))
        .await
        .expect("create first")
        .into_inner();
    assert!(first.created);
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let s = get_saga(
            orchestrator.addr,
            pb::get_saga_request::Lookup::SagaId(first.saga_id.clone()),
        )
        .await;
        if step(&s, "payment").attempts >= 2 {
            assert_eq!(s.status(), pb::SagaStatus::Running);
            break;
        }
        assert!(Instant::now() < deadline, "charge never retried: {s:?}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // Acknowledged just before MongoDB goes away.
    let second = orders
        .create_order(order_request(
            "outage-2",
            "alice",
            &[("sku-apple", 1, 100)],
            false,
        ))
        .await
        .expect("create second")
        .into_inner();
    assert!(second.created);

    server.begin_outage().await.expect("outage");
    let outage_started = Instant::now();
    // While MongoDB is down its port accepts every connection, closes it
    // and counts it: the services' attempts to reach it are seen.
    let port = DeadPort::open_on(server.port()).await;
    // An order placed during the outage is either acknowledged (then it
    // must complete) or refused as UNAVAILABLE (then the client retries it).
    // The third order, sent during the outage and again after it as a
    // client does: the same request each time.
    let third_order = order_request("outage-3", "alice", &[("sku-apple", 1, 100)], false);
    let third_call = tokio::spawn({
        let mut orders = orders.clone();
        let third_order = third_order.clone();
        async move {
            let sent = orders.create_order(third_order).await;
            (sent, outage_started.elapsed())
        }
    });
    // Payment comes back during the outage, on the same store and port; its
    // start-up waits for MongoDB (it returns once its store answered).
    let payment_back = tokio::spawn(
        ParticipantHarness::new(Service::Payment, storage.clone())
            .on(payment_addr)
            .start(),
    );
    port.tried(ATTEMPTS_IN_OUTAGE).await;
    if refused_during_outage {
        let deadline = Instant::now() + Duration::from_secs(30);
        while !third_call.is_finished() {
            assert!(
                Instant::now() < deadline,
                "CreateOrder unanswered 30 s into the outage"
            );
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }
    assert!(
        !payment_back.is_finished(),
        "payment's start-up returned (or panicked) without MongoDB"
    );
    let attempts = port.attempts();
    let held = outage_started.elapsed();
    port.close().await;
    server.end_outage().await.expect("end of the outage");

    let (third, third_answered) = tokio::time::timeout(Duration::from_secs(30), third_call)
        .await
        .expect("CreateOrder answered within 30 s of the outage's end")
        .expect("CreateOrder task");
    let third_acknowledged = match &third {
        Ok(reply) => {
            assert!(
                !refused_during_outage,
                "acknowledged with MongoDB unreachable: {reply:?}"
            );
            Some(reply.get_ref().saga_id.clone())
        }
        Err(status) => {
            assert_eq!(status.code(), tonic::Code::Unavailable, "{status:?}");
            None
        }
    };
    let payment = tokio::time::timeout(Duration::from_secs(30), payment_back)
        .await
        .expect("payment's store open within 30 s of the outage's end")
        .expect("payment's start-up did not panic");
    let payment_back = outage_started.elapsed();
    // Sent again as a client does after UNAVAILABLE: until it is answered
    // (the orchestrator's driver sees MongoDB back at its next check,
    // which may come after payment's did).
    let deadline = Instant::now() + Duration::from_secs(30);
    let third = loop {
        let sent = orders.create_order(third_order.clone()).await;
        match sent {
            Ok(reply) => break reply.into_inner(),
            Err(status) if status.code() == tonic::Code::Unavailable => {
                assert!(
                    Instant::now() < deadline,
                    "create third 30 s after the outage: {status:?}"
                );
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            Err(status) => panic!("create third after the outage: {status:?}"),
        }
    };
    match &third_acknowledged {
        Some(saga_id) => {
            assert_eq!(&third.saga_id, saga_id);
            assert!(
                !third.created,
                "acknowledged once MongoDB answered, so a duplicate now"
            );
        }
        None => assert!(third.created, "refused, so stored only now"),
    }

    let mut done = Vec::new();
    for saga_id in [&first.saga_id, &second.saga_id, &third.saga_id] {
        let saga = wait_terminal(orchestrator.addr, saga_id, Duration::from_secs(30)).await;
        assert_eq!(saga.status(), pb::SagaStatus::Completed, "{saga:?}");
        done.push(saga);
    }
    let all_done = outage_started.elapsed();
    assert!(step(&done[0], "payment").attempts > 2);

    // Every acknowledged order is still there, found by its request id.
    for (request_id, saga_id) in [
        ("outage-1", &first.saga_id),
        ("outage-2", &second.saga_id),
        ("outage-3", &third.saga_id),
    ] {
        let s = get_saga(
            orchestrator.addr,
            pb::get_saga_request::Lookup::RequestId(request_id.into()),
        )
        .await;
        assert_eq!(&s.saga_id, saga_id);
        assert_eq!(s.status(), pb::SagaStatus::Completed);
    }
    assert_eq!(
        saga_tests::balance(payment.addr, "alice").await,
        1_000 - 200 - 100 - 100,
        "each order charged exactly once"
    );
    assert_eq!(
        saga_tests::stock(inventory.addr, "sku-apple").await,
        10 - 2 - 1 - 1,
        "each order deducted exactly once"
    );
    eprintln!(
        "outage held {held:?} ({attempts} connection attempts; URI options {uri_options:?}): \
         CreateOrder sent during it answered after {third_answered:?} ({}), payment's store \
         open again after {payment_back:?}, all three sagas COMPLETED after {all_done:?}",
        if third_acknowledged.is_some() {
            "acknowledged"
        } else {
            "UNAVAILABLE"
        }
    );
    orchestrator.stop().await;
    payment.stop().await;
    inventory.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_participant_answers_unavailable_during_an_outage_and_recovers() {
    if !test_server_available() {
        return;
    }
    let mut server = start_server(0).await;
    // Operations give up after 400 ms without a server (production: 5 s),
    // so the outage is seen rather than waited out.
    let storage = Storage::Mongo {
        uri: format!("{}&serverSelectionTimeoutMS=400", server.uri()),
        prefix: format!("outage_{}", uuid::Uuid::now_v7().simple()),
    };
    let payment = ParticipantHarness::new(Service::Payment, storage)
        .start()
        .await;
    let mut client = PaymentServiceClient::new(channel(payment.addr).await);
    let deposit = |request_id: &str, cents: i64| payment::DepositRequest {
        request_id: request_id.into(),
        customer_id: "bob".into(),
        amount_cents: cents,
    };
    let account = || payment::GetAccountRequest {
        customer_id: "bob".into(),
        operation_limit: 10,
    };
    client
        .deposit(deposit("bob-1", 500))
        .await
        .expect("deposit before the outage");

    server.begin_outage().await.expect("outage");
    let outage_started = Instant::now();
    // While MongoDB is down its port accepts every connection, closes it
    // and counts it: the participant's attempts to reach it are seen.
    let port = DeadPort::open_on(server.port()).await;
    // The outage lasts until the read was answered and the write below was
    // seen waiting, so no answer can come from a server that is back.
    let during = tokio::time::timeout(Duration::from_secs(30), client.get_account(account()))
        .await
        .expect("GetAccount answered during the outage");
    let answered_after = outage_started.elapsed();
    let status = during.expect_err("no MongoDB, no account");
    assert_eq!(
        status.code(),
        tonic::Code::Unavailable,
        "after {answered_after:?}: {status:?}"
    );
    // A write during the outage runs in a transaction, which the driver
    // retries while the server is unreachable (up to its 2 min limit): it
    // waits the outage out or, past that, is UNAVAILABLE. Retried with the
    // same request id, it counts once.
    let tried_before = port.attempts();
    let write = tokio::spawn({
        let mut client = client.clone();
        async move { client.deposit(deposit("bob-2", 250)).await }
    });
    let deadline = Instant::now() + Duration::from_secs(30);
    while !write.is_finished() && port.attempts() < tried_before + 3 {
        assert!(
            Instant::now() < deadline,
            "the participant stopped trying to reach MongoDB with a write pending"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    port.close().await;
    server.end_outage().await.expect("end of the outage");
    let write = tokio::time::timeout(Duration::from_secs(30), write)
        .await
        .expect("Deposit answered within 30 s of the outage's end")
        .expect("Deposit task");
    let written = match &write {
        Ok(_) => 250,
        Err(status) => {
            assert_eq!(status.code(), tonic::Code::Unavailable, "{status:?}");
            0
        }
    };

    let deadline = Instant::now() + Duration::from_secs(30);
    let view = loop {
        match client.get_account(account()).await {
            Ok(view) => break view.into_inner(),
            Err(status) => {
                assert_eq!(status.code(), tonic::Code::Unavailable, "{status:?}");
                assert!(Instant::now() < deadline, "never recovered: {status:?}");
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
    };
    let recovered = outage_started.elapsed();
    assert_eq!(
        view.balance_cents,
        500 + written,
        "the deposit during the outage counted exactly if it was acknowledged: {write:?}"
    );
    client
        .deposit(deposit("bob-2", 250))
        .await
        .expect("deposit retried after the outage");
    let view = client
        .get_account(account())
        .await
        .expect("account")
        .into_inner();
    assert_eq!(view.balance_cents, 750, "each deposit counted once");
    eprintln!(
        "participant: UNAVAILABLE after {answered_after:?} ({}), the write during the outage {}, \
         serving again after {recovered:?}",
        status.message(),
        if written > 0 {
            "waited it out"
        } else {
            "UNAVAILABLE"
        }
    );
    payment.stop().await;
}
