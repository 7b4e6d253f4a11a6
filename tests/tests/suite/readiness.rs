//! Health that means ready, read the way a load balancer or a Kubernetes
//! probe reads it: the real binaries run as processes, and `grpc.health.v1`
//! Check is asked for `""` (readiness of the server as a whole), a served
//! service's name (readiness too) and `"liveness"`.
//!
//! - `a_service_whose_store_is_down_is_alive_but_not_ready_until_it_comes_up`:
//!   payment-svc and the orchestrator start while their MongoDB is
//!   unreachable; both answer liveness SERVING and readiness NOT_SERVING
//!   (their calls UNAVAILABLE) while they retry, and turn SERVING once the
//!   MongoDB test server comes up on that port.
//! - `sigterm_under_load_turns_readiness_off_at_once_and_drains`: a
//!   payment-svc under a stream of Charges (each delayed by injected
//!   latency, so some are always in flight) gets SIGTERM: readiness reads
//!   NOT_SERVING at once, liveness SERVING until the process is gone, the
//!   Charges in flight finish, new ones are refused UNAVAILABLE, and the
//!   process exits 0; restarted on the same data, the balance counts
//!   exactly the Charges acknowledged.
//!
//! Every wait is on a condition with a timeout, never a fixed sleep. The
//! transitions seen and their timings are printed (`--nocapture`). The
//! service binaries must be built (`cargo build --workspace --bins`; the
//! test command does).

use saga_proto::payment::v1 as payment;
use saga_proto::payment::v1::payment_service_client::PaymentServiceClient;
use saga_tests::health;
use saga_tests::mongo_server::{MongoServer, ServerOptions};
use saga_tests::service_process::{ServiceProcess, free_addr};
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;
use tokio::sync::Mutex;
use tokio::time::Instant;
use tonic::transport::Channel;
use tonic_health::pb::health_check_response::ServingStatus;

/// Pause between two polls of a condition.
const POLL: Duration = Duration::from_millis(10);

/// Polls `service`'s health at `addr` until it answers `want` (at most
/// `within`); how long that took.
async fn until_health(
    addr: SocketAddr,
    service: &str,
    want: ServingStatus,
    within: Duration,
) -> Duration {
    let started = Instant::now();
    loop {
        let now = health(addr, service).await;
        if now == Ok(want) {
            return started.elapsed();
        }
        assert!(
            started.elapsed() < within,
            "{addr} {service:?}: not {want:?} within {within:?}, last {now:?}"
        );
        tokio::time::sleep(POLL).await;
    }
}

/// A port where nothing answers MongoDB: each connection is accepted,
/// counted and closed, so a test can wait until a service has tried it.
struct DeadPort {
    port: u16,
    attempts: Arc<AtomicUsize>,
    task: tokio::task::JoinHandle<()>,
}

impl DeadPort {
    async fn open() -> DeadPort {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let port = listener.local_addr().expect("addr").port();
        let attempts = Arc::new(AtomicUsize::new(0));
        let counted = attempts.clone();
        let task = tokio::spawn(async move {
            while let Ok((socket, _)) = listener.accept().await {
                counted.fetch_add(1, Ordering::SeqCst);
                drop(socket);
            }
        });
        DeadPort {
            port,
            attempts,
            task,
        }
    }

    /// Waits until `n` connections in all were tried.
    async fn tried(&self, n: usize) {
        let until = Instant::now() + Duration::from_secs(60);
        while self.attempts.load(Ordering::SeqCst) < n {
            assert!(Instant::now() < until, "fewer than {n} attempts in 60 s");
            tokio::time::sleep(POLL).await;
        }
    }

    /// Stops answering and frees the port.
    async fn close(self) -> u16 {
        self.task.abort();
        let _ = self.task.await;
        self.port
    }
}

/// The MongoDB test server on `port`; `None` (the rest of the test
/// skipped) when it cannot be started and `REQUIRE_MONGO` is not 1.
async fn mongo_on(port: u16) -> Option<MongoServer> {
    let started = tokio::task::spawn_blocking(move || {
        MongoServer::start(ServerOptions {
            port,
            ..ServerOptions::default()
        })
    })
    .await
    .expect("start the MongoDB test server");
    match started {
        Ok(server) => Some(server),
        Err(why) if std::env::var("REQUIRE_MONGO").is_ok_and(|v| v == "1") => {
            panic!("MongoDB required but unavailable: {why}")
        }
        Err(why) => {
            eprintln!("MongoDB test server unavailable ({why}): the store's coming up not tested");
            None
        }
    }
}

/// The readiness names of each service: the server as a whole and one
/// service it serves.
const PAYMENT_NAMES: [&str; 2] = ["", "payment.v1.PaymentService"];
const ORCHESTRATOR_NAMES: [&str; 2] = ["", "saga.v1.OrderService"];

async fn get_account(addr: SocketAddr) -> Result<i64, tonic::Status> {
    PaymentServiceClient::new(saga_tests::channel(addr).await)
        .get_account(payment::GetAccountRequest {
            customer_id: "alice".into(),
            operation_limit: 0,
        })
        .await
        .map(|reply| reply.into_inner().balance_cents)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_service_whose_store_is_down_is_alive_but_not_ready_until_it_comes_up() {
    let dir = tempfile::tempdir().expect("tempdir");
    let dead = DeadPort::open().await;
    let uri = format!("mongodb://127.0.0.1:{}/?directConnection=true", dead.port);
    let run = uuid::Uuid::now_v7().simple().to_string();
    let (payment_db, orchestrator_db) = (format!("ready_pay_{run}"), format!("ready_orc_{run}"));
    let payment = ServiceProcess::spawn(
        "payment-svc",
        free_addr(),
        &[
            "--mongodb-uri",
            &uri,
            "--mongodb-database",
            &payment_db,
            "--no-metrics",
        ],
        &[],
        dir.path(),
    );
    let orchestrator = ServiceProcess::spawn(
        "orchestrator",
        free_addr(),
        &[
            "serve",
            "--mongodb-uri",
            &uri,
            "--mongodb-database",
            &orchestrator_db,
            "--no-console",
            "--no-metrics",
            "--step-address",
            &format!(
                "payment={},inventory={}",
                "http://127.0.0.1:1", "http://127.0.0.1:1"
            ),
        ],
        &[],
        dir.path(),
    );
    let services = [
        (&payment, PAYMENT_NAMES),
        (&orchestrator, ORCHESTRATOR_NAMES),
    ];

    for (service, _) in &services {
        let alive = until_health(
            service.addr,
            "liveness",
            ServingStatus::Serving,
            Duration::from_secs(30),
        )
        .await;
        eprintln!(
            "{}: liveness SERVING {alive:.2?} after start, its store unreachable",
            service.name
        );
    }
    // Both are in their store's retry loop: a few connections each tried
    // and refused.
    dead.tried(6).await;
    for (service, names) in &services {
        for name in names {
            assert_eq!(
                health(service.addr, name).await,
                Ok(ServingStatus::NotServing),
                "{} {name:?} while its store is unreachable",
                service.name
            );
        }
        assert_eq!(
            health(service.addr, "liveness").await,
            Ok(ServingStatus::Serving)
        );
    }
    let refused = get_account(payment.addr).await.expect_err("not ready");
    assert_eq!(refused.code(), tonic::Code::Unavailable, "{refused:?}");
    assert!(refused.message().contains("not ready"), "{refused:?}");
    eprintln!(
        "store unreachable ({} connections refused): readiness NOT_SERVING, liveness SERVING, calls UNAVAILABLE",
        dead.attempts.load(Ordering::SeqCst)
    );

    let port = dead.close().await;
    let Some(_mongo) = mongo_on(port).await else {
        payment.stop_cleanly(Duration::from_secs(30)).await;
        orchestrator.stop_cleanly(Duration::from_secs(30)).await;
        return;
    };
    let up = Instant::now();
    for (service, names) in &services {
        until_health(
            service.addr,
            names[0],
            ServingStatus::Serving,
            Duration::from_secs(60),
        )
        .await;
        eprintln!(
            "{}: readiness NOT_SERVING -> SERVING {:.2?} after the store came up",
            service.name,
            up.elapsed()
        );
        for name in names {
            assert_eq!(health(service.addr, name).await, Ok(ServingStatus::Serving));
        }
        assert_eq!(
            health(service.addr, "liveness").await,
            Ok(ServingStatus::Serving)
        );
    }
    // Served now: the store answers that alice has no account.
    assert_eq!(
        get_account(payment.addr).await.map_err(|s| s.code()),
        Err(tonic::Code::NotFound)
    );
    payment.stop_cleanly(Duration::from_secs(30)).await;
    orchestrator.stop_cleanly(Duration::from_secs(30)).await;
}

/// How one Charge of the load ended.
#[derive(Debug, Clone)]
struct Charged {
    sent: Instant,
    ended: Instant,
    result: Result<(), tonic::Status>,
}

/// Charges of 1 cent to alice, one after another on `channel`, each
/// recorded, until `stop` is set or a call is refused or cannot reach the
/// server (a client would go to another instance then).
async fn charge_loop(
    channel: Channel,
    worker: usize,
    stop: Arc<AtomicBool>,
    calls: Arc<Mutex<Vec<Charged>>>,
) {
    let mut client = PaymentServiceClient::new(channel);
    for n in 0.. {
        if stop.load(Ordering::SeqCst) {
            return;
        }
        let sent = Instant::now();
        let result = client
            .charge(payment::ChargeRequest {
                request_id: format!("load-{worker}-{n}"),
                customer_id: "alice".into(),
                amount_cents: 1,
            })
            .await
            .map(|_| ());
        let failed = result.is_err();
        calls.lock().await.push(Charged {
            sent,
            ended: Instant::now(),
            result,
        });
        if failed {
            return;
        }
    }
}

/// Health answers of `service` at `addr` with when each came, polled
/// until nothing answers or `stop` is set.
async fn watch_health(
    addr: SocketAddr,
    service: &'static str,
    stop: Arc<AtomicBool>,
) -> Vec<(Instant, Result<ServingStatus, String>)> {
    let mut seen = Vec::new();
    while !stop.load(Ordering::SeqCst) {
        let answer = health(addr, service).await;
        let gone = answer.is_err();
        seen.push((Instant::now(), answer));
        if gone {
            break;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    seen
}

const DEPOSIT: i64 = 1_000_000;
const WORKERS: usize = 16;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_under_load_turns_readiness_off_at_once_and_drains() {
    let dir = tempfile::tempdir().expect("tempdir");
    let data = dir.path().join("data");
    let data_arg = data.to_str().expect("utf-8 path");
    let args = ["--data-dir", data_arg, "--no-metrics"];
    let mut with_latency = args.to_vec();
    with_latency.extend(["--fault-latency-ms", "800"]);
    let mut service =
        ServiceProcess::spawn("payment-svc", free_addr(), &with_latency, &[], dir.path());
    until_health(
        service.addr,
        "",
        ServingStatus::Serving,
        Duration::from_secs(30),
    )
    .await;
    PaymentServiceClient::new(saga_tests::channel(service.addr).await)
        .deposit(payment::DepositRequest {
            request_id: "deposit".into(),
            customer_id: "alice".into(),
            amount_cents: DEPOSIT,
        })
        .await
        .expect("deposit");

    let stop = Arc::new(AtomicBool::new(false));
    let calls = Arc::new(Mutex::new(Vec::new()));
    let mut load = Vec::new();
    for worker in 0..WORKERS {
        let channel = saga_tests::channel(service.addr).await;
        load.push(tokio::spawn(charge_loop(
            channel,
            worker,
            stop.clone(),
            calls.clone(),
        )));
    }
    // Under load: enough Charges answered that some are surely in flight.
    let until = Instant::now() + Duration::from_secs(30);
    while calls.lock().await.len() < 2 * WORKERS {
        assert!(Instant::now() < until, "the load does not move");
        tokio::time::sleep(POLL).await;
    }
    let probing = Arc::new(AtomicBool::new(false));
    let readiness = tokio::spawn(watch_health(service.addr, "", probing.clone()));
    let liveness = tokio::spawn(watch_health(service.addr, "liveness", probing.clone()));

    let sigterm = Instant::now();
    service.sigterm();
    let status = service.exited(Duration::from_secs(30)).await;
    let exited = Instant::now();
    assert!(status.success(), "exit status {status}");
    stop.store(true, Ordering::SeqCst);
    probing.store(true, Ordering::SeqCst);
    for worker in load {
        worker.await.expect("load worker");
    }
    let readiness = readiness.await.expect("readiness probe");
    let liveness = liveness.await.expect("liveness probe");
    let calls = calls.lock().await.clone();

    // Readiness: SERVING until the signal, NOT_SERVING from the first
    // answer after it to the end.
    let after = |at: &Instant| at.saturating_duration_since(sigterm);
    let first_not_serving = readiness
        .iter()
        .find(|(_, answer)| *answer == Ok(ServingStatus::NotServing))
        .map(|(at, _)| *at)
        .expect("readiness read NOT_SERVING after SIGTERM");
    assert!(
        readiness
            .iter()
            .filter(|(at, _)| *at > first_not_serving)
            .all(|(_, answer)| answer.is_err() || *answer == Ok(ServingStatus::NotServing)),
        "readiness SERVING again after NOT_SERVING: {readiness:?}"
    );
    assert!(
        after(&first_not_serving) < Duration::from_secs(1),
        "readiness NOT_SERVING only {:?} after SIGTERM",
        after(&first_not_serving)
    );
    // Liveness: never NOT_SERVING; SERVING after readiness went off.
    assert!(
        liveness
            .iter()
            .all(|(_, answer)| answer.is_err() || *answer == Ok(ServingStatus::Serving)),
        "liveness not SERVING: {liveness:?}"
    );
    let last_alive = liveness
        .iter()
        .filter(|(_, answer)| *answer == Ok(ServingStatus::Serving))
        .map(|(at, _)| *at)
        .max()
        .expect("liveness answered");
    assert!(
        last_alive > first_not_serving,
        "liveness not seen SERVING during the drain"
    );

    // The Charges sent before the signal all finished: acknowledged, or
    // refused by the draining server before anything was done; none cut.
    let before: Vec<&Charged> = calls.iter().filter(|c| c.sent < sigterm).collect();
    for call in &before {
        if let Err(status) = &call.result {
            assert_eq!(status.code(), tonic::Code::Unavailable, "{status:?}");
            assert!(
                status.message().contains("shutting down"),
                "a Charge sent before SIGTERM was cut: {status:?}"
            );
        }
    }
    let finished_in_drain = before
        .iter()
        .filter(|c| c.result.is_ok() && c.ended > sigterm)
        .count();
    assert!(
        finished_in_drain > 0,
        "no Charge was in flight at SIGTERM: {} sent before",
        before.len()
    );
    let refused = calls
        .iter()
        .filter(|c| {
            c.result
                .as_ref()
                .is_err_and(|s| s.message().contains("shutting down"))
        })
        .count();
    let acknowledged = calls.iter().filter(|c| c.result.is_ok()).count();
    let drain_ended = calls
        .iter()
        .filter(|c| c.result.is_ok())
        .map(|c| c.ended)
        .max()
        .expect("acknowledged Charges");
    eprintln!(
        "SIGTERM under load ({WORKERS} callers, Charges delayed 0..800 ms): readiness SERVING -> NOT_SERVING {:.1?} after the signal; \
         {} liveness answers, all SERVING, the last {:.1?} after the signal; {finished_in_drain} Charges in flight finished \
         (the last {:.1?} after the signal), {refused} refused UNAVAILABLE while draining; exit 0 {:.1?} after the signal",
        after(&first_not_serving),
        liveness.iter().filter(|(_, a)| a.is_ok()).count(),
        after(&last_alive),
        after(&drain_ended),
        after(&exited),
    );

    // Restarted on the same data: every acknowledged Charge, and only
    // those, was applied.
    let service = ServiceProcess::spawn("payment-svc", free_addr(), &args, &[], dir.path());
    until_health(
        service.addr,
        "",
        ServingStatus::Serving,
        Duration::from_secs(30),
    )
    .await;
    let balance = get_account(service.addr).await.expect("balance");
    assert_eq!(
        balance,
        DEPOSIT - i64::try_from(acknowledged).expect("count")
    );
    service.stop_cleanly(Duration::from_secs(30)).await;
}
