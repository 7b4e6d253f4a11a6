//! Oversize requests are refused with RESOURCE_EXHAUSTED before they are
//! decoded (so before validation and before the store), on the participant's
//! own service and on its fault admin API; requests under the limit are
//! served as usual.

use embedded_store::Durability;
use participant_kit::faults::Faults;
use payment_svc::store::SqlitePaymentStore;
use saga_proto::faults::v1 as faults_pb;
use saga_proto::faults::v1::fault_service_client::FaultServiceClient;
use saga_proto::payment::v1 as pb;
use saga_proto::payment::v1::payment_service_client::PaymentServiceClient;
use service_kit::server::{DEFAULT_MAX_REQUEST_BYTES, ServeOptions};
use service_kit::shutdown::Shutdown;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;
use tonic::Code;
use tonic::transport::Channel;

struct Running {
    addr: SocketAddr,
    shutdown: Shutdown,
    task: tokio::task::JoinHandle<()>,
    _dir: tempfile::TempDir,
}

async fn start(options: ServeOptions) -> Running {
    let dir = tempfile::tempdir().expect("tempdir");
    let store = Arc::new(
        SqlitePaymentStore::open(&dir.path().join("payment.db"), Durability::Process)
            .expect("open payment"),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let addr = listener.local_addr().expect("local addr");
    let shutdown = Shutdown::new();
    let stop = shutdown.clone();
    let task = tokio::spawn(async move {
        payment_svc::serve(
            store,
            participant_kit::Kit::new(Arc::new(Faults::disabled()), options),
            listener,
            stop,
        )
        .await
        .expect("payment serve");
    });
    Running {
        addr,
        shutdown,
        task,
        _dir: dir,
    }
}

async fn channel(addr: SocketAddr) -> Channel {
    let endpoint = tonic::transport::Endpoint::from_shared(format!("http://{addr}")).unwrap();
    for _ in 0..100 {
        if let Ok(channel) = endpoint.connect().await {
            return channel;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    panic!("cannot connect to {addr}");
}

fn deposit(customer_id: String) -> pb::DepositRequest {
    pb::DepositRequest {
        request_id: "d1".into(),
        customer_id,
        amount_cents: 100,
    }
}

#[tokio::test]
async fn default_limit_refuses_requests_over_1_mib() {
    let running = start(ServeOptions::default()).await;
    let mut client = PaymentServiceClient::new(channel(running.addr).await);

    let huge = "x".repeat(DEFAULT_MAX_REQUEST_BYTES + 1);
    let status = client.deposit(deposit(huge)).await.unwrap_err();
    assert_eq!(status.code(), Code::ResourceExhausted, "{status:?}");

    // Under the limit: decoded, then refused by validation as usual.
    let big = "x".repeat(DEFAULT_MAX_REQUEST_BYTES / 2);
    let status = client.deposit(deposit(big)).await.unwrap_err();
    assert_eq!(status.code(), Code::InvalidArgument, "{status:?}");

    // Nothing was stored; the server still serves.
    client
        .deposit(deposit("alice".into()))
        .await
        .expect("deposit");
    let account = client
        .get_account(pb::GetAccountRequest {
            customer_id: "alice".into(),
            operation_limit: 0,
        })
        .await
        .expect("account")
        .into_inner();
    assert_eq!(account.balance_cents, 100);
    assert_eq!(account.recent_operations.len(), 1);

    running.shutdown.trigger();
    running.task.await.unwrap();
}

#[tokio::test]
async fn configured_limit_applies_to_every_service() {
    let running = start(ServeOptions {
        max_request_bytes: 4096,
        ..ServeOptions::default()
    })
    .await;
    let channel = channel(running.addr).await;
    let mut payments = PaymentServiceClient::new(channel.clone());

    let status = payments
        .charge(pb::ChargeRequest {
            request_id: "c1".into(),
            customer_id: "y".repeat(8 * 1024),
            amount_cents: 1,
        })
        .await
        .unwrap_err();
    assert_eq!(status.code(), Code::ResourceExhausted, "{status:?}");
    let status = payments
        .charge(pb::ChargeRequest {
            request_id: "c1".into(),
            customer_id: "nobody".into(),
            amount_cents: 1,
        })
        .await
        .unwrap_err();
    assert_ne!(status.code(), Code::ResourceExhausted, "{status:?}");

    // The fault admin API has the same limit (an unknown field of 8 KiB
    // makes the request large without changing its meaning).
    let status = raw_get_faults(channel.clone(), 8 * 1024).await.unwrap_err();
    assert_eq!(status.code(), Code::ResourceExhausted, "{status:?}");
    raw_get_faults(channel.clone(), 16)
        .await
        .expect("small padded GetFaults");
    FaultServiceClient::new(channel)
        .get_faults(faults_pb::GetFaultsRequest {})
        .await
        .expect("small GetFaults");

    running.shutdown.trigger();
    running.task.await.unwrap();
}

/// GetFaults with `n` bytes of an unknown field (number 15), which the
/// server skips once decoded.
async fn raw_get_faults(
    channel: Channel,
    n: usize,
) -> Result<faults_pb::FaultStatus, tonic::Status> {
    let mut grpc = tonic::client::Grpc::new(channel);
    grpc.ready()
        .await
        .map_err(|e| tonic::Status::unavailable(e.to_string()))?;
    let path =
        tonic::codegen::http::uri::PathAndQuery::from_static("/faults.v1.FaultService/GetFaults");
    let codec = tonic_prost::ProstCodec::<RawGetFaults, faults_pb::FaultStatus>::default();
    let request = tonic::Request::new(RawGetFaults {
        padding: vec![0; n],
    });
    Ok(grpc.unary(request, path, codec).await?.into_inner())
}

/// Wire-compatible with `GetFaultsRequest` plus an unknown bytes field.
#[derive(Clone, PartialEq, prost::Message)]
struct RawGetFaults {
    #[prost(bytes = "vec", tag = "15")]
    padding: Vec<u8>,
}
