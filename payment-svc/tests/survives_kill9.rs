//! The embedded store loses no acknowledged write when the process is
//! killed with SIGKILL: the real binary is started, loaded with concurrent
//! deposits, killed mid-stream — once a given number of writes were
//! acknowledged, not after a number of milliseconds — and restarted on the
//! same data directory.

use saga_proto::payment::v1 as pb;
use saga_proto::payment::v1::payment_service_client::PaymentServiceClient;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;
use tonic::transport::Channel;

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("free port")
}

/// The payment-svc process; SIGKILLed when dropped, so a failing test
/// leaves nothing running.
struct Service(Child);

impl Service {
    fn kill(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

impl Drop for Service {
    fn drop(&mut self) {
        self.kill();
    }
}

fn start(dir: &std::path::Path, port: u16) -> Service {
    Service(
        Command::new(env!("CARGO_BIN_EXE_payment-svc"))
            .args(["--listen", &format!("127.0.0.1:{port}"), "--data-dir"])
            .arg(dir)
            .env("RUST_LOG", "warn")
            .env("NO_METRICS", "true")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("spawn payment-svc"),
    )
}

/// A client once the service is ready: it answers health as soon as it
/// listens but calls only once its store is open (UNAVAILABLE before), so
/// a read is tried until it is answered with anything else.
async fn connect(port: u16) -> PaymentServiceClient<Channel> {
    let endpoint = tonic::transport::Endpoint::from_shared(format!("http://127.0.0.1:{port}"))
        .expect("endpoint");
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    while tokio::time::Instant::now() < deadline {
        if let Ok(channel) = endpoint.connect().await {
            let mut client = PaymentServiceClient::new(channel);
            let probe = client
                .get_account(pb::GetAccountRequest {
                    customer_id: "readiness-probe".into(),
                    operation_limit: 1,
                })
                .await;
            match probe {
                Err(status) if status.code() == tonic::Code::Unavailable => {}
                _ => return client,
            }
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    panic!("payment-svc was not ready on {port} within 60 s");
}

fn deposit(i: usize) -> pb::DepositRequest {
    pb::DepositRequest {
        request_id: format!("kill9-{i}"),
        customer_id: "alice".into(),
        amount_cents: 1,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acknowledged_deposits_survive_sigkill() {
    let dir = tempfile::tempdir().expect("tempdir");
    let port = free_port();
    let mut child = start(dir.path(), port);
    let client = connect(port).await;

    // 16 writers deposit 1 cent each with distinct request ids until killed.
    const WRITERS: usize = 16;
    const PER_WRITER: usize = 10_000;
    /// Acknowledged writes before the kill: enough group commits that the
    /// kill lands in the middle of steady load.
    const KILL_AFTER: usize = 500;
    let stop = Arc::new(AtomicBool::new(false));
    let acks = Arc::new(AtomicUsize::new(0));
    let mut writers = Vec::new();
    for w in 0..WRITERS {
        let mut client = client.clone();
        let stop = stop.clone();
        let acks = acks.clone();
        writers.push(tokio::spawn(async move {
            let mut acknowledged = Vec::new();
            for n in 0..PER_WRITER {
                if stop.load(Ordering::Relaxed) {
                    break;
                }
                let i = w * PER_WRITER + n;
                match client.deposit(deposit(i)).await {
                    Ok(_) => {
                        acknowledged.push(i);
                        acks.fetch_add(1, Ordering::Relaxed);
                    }
                    Err(_) => break,
                }
            }
            acknowledged
        }));
    }
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    while acks.load(Ordering::Relaxed) < KILL_AFTER {
        assert!(
            tokio::time::Instant::now() < deadline,
            "only {} deposits acknowledged in 60 s",
            acks.load(Ordering::Relaxed)
        );
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    child.kill();
    stop.store(true, Ordering::Relaxed);
    let mut acknowledged = Vec::new();
    for w in writers {
        acknowledged.extend(w.await.expect("writer"));
    }
    assert!(acknowledged.len() >= KILL_AFTER);

    let mut child = start(dir.path(), port);
    let mut client = connect(port).await;
    let balance = client
        .get_account(pb::GetAccountRequest {
            customer_id: "alice".into(),
            operation_limit: 0,
        })
        .await
        .expect("account after restart")
        .into_inner()
        .balance_cents;
    // Every acknowledged deposit is there; at most the in-flight ones more.
    let acked = i64::try_from(acknowledged.len()).expect("count");
    assert!(
        balance >= acked,
        "lost acknowledged deposits: balance {balance} < acknowledged {acked}"
    );
    assert!(balance <= acked + i64::try_from(WRITERS).expect("writers"));
    // And each of them is recorded: a retry replays instead of applying.
    for i in acknowledged.iter().step_by(17) {
        let reply = client
            .deposit(deposit(*i))
            .await
            .expect("retry")
            .into_inner();
        assert!(reply.replayed, "deposit {i} was not recorded");
    }
    child.kill();
    println!("kill -9: {acked} acknowledged deposits, balance after restart {balance}");
}
