//! Every server answers grpc.health.v1 and server reflection — v1alpha too,
//! which is all grpcurl 1.8.6 speaks — advertising only what it serves.

use saga_tests::{Stack, channel};
use std::net::SocketAddr;
use tokio_stream::StreamExt;

async fn listed_services_v1alpha(addr: SocketAddr) -> Vec<String> {
    use tonic_reflection::pb::v1alpha::ServerReflectionRequest;
    use tonic_reflection::pb::v1alpha::server_reflection_client::ServerReflectionClient;
    use tonic_reflection::pb::v1alpha::server_reflection_request::MessageRequest;
    use tonic_reflection::pb::v1alpha::server_reflection_response::MessageResponse;
    let mut client = ServerReflectionClient::new(channel(addr).await);
    let request = ServerReflectionRequest {
        host: String::new(),
        message_request: Some(MessageRequest::ListServices(String::new())),
    };
    let mut replies = client
        .server_reflection_info(tokio_stream::iter([request]))
        .await
        .expect("reflection")
        .into_inner();
    let reply = replies.next().await.expect("one reply").expect("ok reply");
    match reply.message_response {
        Some(MessageResponse::ListServicesResponse(list)) => {
            let mut names: Vec<_> = list.service.into_iter().map(|s| s.name).collect();
            names.sort();
            names
        }
        other => panic!("unexpected reflection reply {other:?}"),
    }
}

async fn describes_symbol_v1(addr: SocketAddr, symbol: &str) -> bool {
    use tonic_reflection::pb::v1::ServerReflectionRequest;
    use tonic_reflection::pb::v1::server_reflection_client::ServerReflectionClient;
    use tonic_reflection::pb::v1::server_reflection_request::MessageRequest;
    use tonic_reflection::pb::v1::server_reflection_response::MessageResponse;
    let mut client = ServerReflectionClient::new(channel(addr).await);
    let request = ServerReflectionRequest {
        host: String::new(),
        message_request: Some(MessageRequest::FileContainingSymbol(symbol.into())),
    };
    let mut replies = client
        .server_reflection_info(tokio_stream::iter([request]))
        .await
        .expect("reflection")
        .into_inner();
    let reply = replies.next().await.expect("one reply").expect("ok reply");
    matches!(reply.message_response, Some(MessageResponse::FileDescriptorResponse(f)) if !f.file_descriptor_proto.is_empty())
}

async fn serving(addr: SocketAddr, service: &str) -> bool {
    use tonic_health::pb::health_check_response::ServingStatus;
    use tonic_health::pb::health_client::HealthClient;
    let reply = HealthClient::new(channel(addr).await)
        .check(tonic_health::pb::HealthCheckRequest {
            service: service.into(),
        })
        .await
        .expect("health")
        .into_inner();
    reply.status() == ServingStatus::Serving
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_server_offers_health_and_reflection() {
    let stack = Stack::start().await;
    let reflection = ["grpc.health.v1.Health"];
    let expect = |own: &[&str]| {
        let mut v: Vec<String> = own
            .iter()
            .chain(reflection.iter())
            .map(|s| s.to_string())
            .collect();
        v.sort();
        v
    };
    let orchestrator = listed_services_v1alpha(stack.orchestrator.addr).await;
    assert_eq!(
        orchestrator,
        expect(&["saga.v1.OrderService", "saga.v1.SagaService"])
    );
    assert_eq!(
        listed_services_v1alpha(stack.payment.addr).await,
        expect(&["faults.v1.FaultService", "payment.v1.PaymentService"])
    );
    assert_eq!(
        listed_services_v1alpha(stack.inventory.addr).await,
        expect(&["faults.v1.FaultService", "inventory.v1.InventoryService"])
    );

    assert!(describes_symbol_v1(stack.orchestrator.addr, "saga.v1.OrderService").await);
    assert!(describes_symbol_v1(stack.payment.addr, "payment.v1.ChargeRequest").await);

    assert!(serving(stack.orchestrator.addr, "saga.v1.OrderService").await);
    assert!(serving(stack.payment.addr, "payment.v1.PaymentService").await);
    assert!(serving(stack.inventory.addr, "inventory.v1.InventoryService").await);
    stack.stop().await;
}
