//! Typed calls to started services for the scenarios: a connected
//! channel, CreateOrder, balances and stocks, and waiting for a saga to end.

use saga_proto::inventory::v1 as inventory;
use saga_proto::inventory::v1::inventory_service_client::InventoryServiceClient;
use saga_proto::payment::v1 as payment;
use saga_proto::payment::v1::payment_service_client::PaymentServiceClient;
use saga_proto::saga::v1 as saga;
use saga_proto::saga::v1::order_service_client::OrderServiceClient;
use saga_proto::saga::v1::saga_service_client::SagaServiceClient;
use service_kit::auth::TokenAuth;
use std::net::SocketAddr;
use std::time::Duration;
use tonic::transport::Channel;

/// A CreateOrder request; items are (product, quantity, unit price).
pub fn order_request(
    request_id: &str,
    customer: &str,
    items: &[(&str, i64, i64)],
    wait: bool,
) -> saga::CreateOrderRequest {
    saga::CreateOrderRequest {
        request_id: request_id.into(),
        customer_id: customer.into(),
        items: items
            .iter()
            .map(|(p, q, c)| saga::OrderItem {
                product_id: (*p).into(),
                quantity: *q,
                unit_price_cents: *c,
            })
            .collect(),
        wait,
    }
}

/// CreateOrder without waiting at the orchestrator on `addr`; the new
/// saga's id.
pub async fn start_order(
    addr: SocketAddr,
    request_id: &str,
    customer: &str,
    items: &[(&str, i64, i64)],
) -> String {
    OrderServiceClient::new(channel(addr).await)
        .create_order(order_request(request_id, customer, items, false))
        .await
        .expect("create")
        .into_inner()
        .saga_id
}

/// The `participant.v1` step call the orchestrator sends for step `step`
/// of `saga` (a late or duplicated call, as a test replays it).
pub fn step_call_of(saga: &saga::Saga, step: &str) -> saga_proto::participant::v1::StepCall {
    use saga_proto::participant::v1 as participant;
    let order = saga.order.clone().unwrap_or_default();
    participant::StepCall {
        request_id: format!("{}:{step}", saga.saga_id),
        saga_id: saga.saga_id.clone(),
        step: step.to_owned(),
        attempt: 1,
        order: Some(participant::Order {
            order_id: order.order_id,
            customer_id: order.customer_id,
            lines: order
                .items
                .into_iter()
                .map(|i| participant::OrderLine {
                    product_id: i.product_id,
                    quantity: i.quantity,
                    unit_price_cents: i.unit_price_cents,
                })
                .collect(),
            total_cents: order.total_cents,
        }),
    }
}

/// A `participant.v1.SagaStepService` client of the participant at `addr`.
pub async fn steps(
    addr: SocketAddr,
) -> saga_proto::participant::v1::saga_step_service_client::SagaStepServiceClient<Channel> {
    saga_proto::participant::v1::saga_step_service_client::SagaStepServiceClient::new(
        channel(addr).await,
    )
}

/// A connected channel (retrying while the server starts).
pub async fn channel(addr: SocketAddr) -> Channel {
    let endpoint =
        tonic::transport::Endpoint::from_shared(format!("http://{addr}")).expect("endpoint");
    for _ in 0..100 {
        if let Ok(channel) = endpoint.connect().await {
            return channel;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    panic!("cannot connect to {addr}");
}

/// The balance of `customer` (GetAccount without a token).
pub async fn balance(payment_addr: SocketAddr, customer: &str) -> i64 {
    balance_as(payment_addr, customer, TokenAuth::open()).await
}

/// The balance of `customer`, read presenting `auth`'s token.
pub async fn balance_as(payment_addr: SocketAddr, customer: &str, auth: TokenAuth) -> i64 {
    PaymentServiceClient::with_interceptor(channel(payment_addr).await, auth)
        .get_account(payment::GetAccountRequest {
            customer_id: customer.into(),
            operation_limit: 0,
        })
        .await
        .expect("get account")
        .into_inner()
        .balance_cents
}

/// The stock of `product` (GetProduct without a token).
pub async fn stock(inventory_addr: SocketAddr, product: &str) -> i64 {
    stock_as(inventory_addr, product, TokenAuth::open()).await
}

/// The stock of `product`, read presenting `auth`'s token.
pub async fn stock_as(inventory_addr: SocketAddr, product: &str, auth: TokenAuth) -> i64 {
    InventoryServiceClient::with_interceptor(channel(inventory_addr).await, auth)
        .get_product(inventory::GetProductRequest {
            product_id: product.into(),
            operation_limit: 0,
        })
        .await
        .expect("get product")
        .into_inner()
        .available
}

/// The history entries of `saga` that record a change of its driver: a
/// takeover, a claim or a resume (`engine::claim`'s details). Empty for a
/// saga its creating instance drove to the end.
pub fn ownership_changes(saga: &saga::Saga) -> Vec<&str> {
    saga.history
        .iter()
        .map(|t| t.detail.as_str())
        .filter(|d| {
            d.starts_with("taken over")
                || d.starts_with("claimed by")
                || d.starts_with("resumed by")
        })
        .collect()
}

/// The step of `saga` named `name` (a panic naming both when it has
/// none).
pub fn step_named<'a>(saga: &'a saga::Saga, name: &str) -> &'a saga::Step {
    saga.steps
        .iter()
        .find(|s| s.name == name)
        .unwrap_or_else(|| panic!("no step {name} in {saga:?}"))
}

/// Polls GetSaga until the saga is terminal (or panics after `timeout`).
pub async fn wait_terminal(addr: SocketAddr, saga_id: &str, timeout: Duration) -> saga::Saga {
    let mut client = SagaServiceClient::new(channel(addr).await);
    let deadline = tokio::time::Instant::now() + timeout;
    loop {
        let s = client
            .get_saga(saga::GetSagaRequest {
                lookup: Some(saga::get_saga_request::Lookup::SagaId(saga_id.into())),
            })
            .await
            .expect("get saga")
            .into_inner();
        let terminal = matches!(
            s.status(),
            saga::SagaStatus::Completed | saga::SagaStatus::Cancelled | saga::SagaStatus::Failed
        );
        if terminal {
            return s;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "saga {saga_id} not terminal: {s:?}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// What the participant at `addr` recorded under `request_id`
/// (`participant.v1.OperationHistoryService/ListOperations`, without a
/// token), oldest first.
pub async fn operations(
    addr: SocketAddr,
    request_id: &str,
) -> Vec<saga_proto::participant::v1::Operation> {
    use saga_proto::participant::v1 as participant;
    participant::operation_history_service_client::OperationHistoryServiceClient::new(
        channel(addr).await,
    )
    .list_operations(participant::ListOperationsRequest {
        request_id: request_id.into(),
    })
    .await
    .expect("list operations")
    .into_inner()
    .operations
}

/// The steps of `saga` in the order their compensations finished, read
/// from its history (the transitions to `compensated`).
pub fn compensation_order(saga: &saga::Saga) -> Vec<&str> {
    saga.history
        .iter()
        .filter(|t| !t.step.is_empty() && t.to == "compensated")
        .map(|t| t.step.as_str())
        .collect()
}

/// What a health check of `service` (`""`: the whole server, `"liveness"`,
/// or a service name) at `addr` answers, on a new connection as a probe
/// makes; `Err` when nothing answers.
pub async fn health(
    addr: SocketAddr,
    service: &str,
) -> Result<tonic_health::pb::health_check_response::ServingStatus, String> {
    use tonic_health::pb::HealthCheckRequest;
    use tonic_health::pb::health_client::HealthClient;
    let channel = tonic::transport::Endpoint::from_shared(format!("http://{addr}"))
        .map_err(|e| e.to_string())?
        .connect_timeout(Duration::from_secs(1))
        .timeout(Duration::from_secs(2))
        .connect()
        .await
        .map_err(|e| e.to_string())?;
    HealthClient::new(channel)
        .check(HealthCheckRequest {
            service: service.into(),
        })
        .await
        .map(|reply| reply.into_inner().status())
        .map_err(|status| format!("{:?}: {}", status.code(), status.message()))
}

/// Waits (`within` at most) until the service at `addr` is ready: its
/// gRPC health for the whole server (`""`) says SERVING, which a service
/// started as a process says only once its store is open — before that
/// it answers calls UNAVAILABLE.
pub async fn wait_ready(addr: SocketAddr, within: Duration) {
    use tonic_health::pb::health_check_response::ServingStatus;
    let deadline = tokio::time::Instant::now() + within;
    while health(addr, "").await != Ok(ServingStatus::Serving) {
        assert!(
            tokio::time::Instant::now() < deadline,
            "{addr} was not ready within {within:?}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}
