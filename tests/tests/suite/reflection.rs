//! Every server answers grpc.health.v1 and server reflection — v1alpha too,
//! which is all grpcurl 1.8.6 speaks — advertising only what it serves.

use saga_tests::{Stack, channel};
use std::net::SocketAddr;

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
    let orchestrator = saga_tests::reflection::listed_services(stack.orchestrator().addr).await;
    assert_eq!(
        orchestrator,
        expect(&["saga.v1.OrderService", "saga.v1.SagaService"])
    );
    assert_eq!(
        saga_tests::reflection::listed_services(stack.payment.addr).await,
        expect(&[
            "faults.v1.FaultService",
            "participant.v1.OperationHistoryService",
            "participant.v1.SagaStepService",
            "payment.v1.PaymentService"
        ])
    );
    assert_eq!(
        saga_tests::reflection::listed_services(stack.inventory.addr).await,
        expect(&[
            "faults.v1.FaultService",
            "inventory.v1.InventoryService",
            "participant.v1.OperationHistoryService",
            "participant.v1.SagaStepService"
        ])
    );

    assert!(
        saga_tests::reflection::describes(stack.orchestrator().addr, "saga.v1.OrderService").await
    );
    assert!(
        saga_tests::reflection::describes(stack.payment.addr, "payment.v1.ChargeRequest").await
    );

    assert!(serving(stack.orchestrator().addr, "saga.v1.OrderService").await);
    assert!(serving(stack.payment.addr, "payment.v1.PaymentService").await);
    assert!(serving(stack.inventory.addr, "inventory.v1.InventoryService").await);
    for addr in [stack.payment.addr, stack.inventory.addr] {
        assert!(
            saga_tests::reflection::describes(addr, "participant.v1.OperationHistoryService").await
        );
        assert!(serving(addr, "participant.v1.OperationHistoryService").await);
        assert!(saga_tests::reflection::describes(addr, "participant.v1.SagaStepService").await);
        assert!(serving(addr, "participant.v1.SagaStepService").await);
    }
    stack.stop().await;
}
