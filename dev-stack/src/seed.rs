//! The demo data — two customers, two products — loaded through the
//! participants' own admin RPCs with fixed request ids, so seeding twice
//! (a restart, the compose `seed` job) changes nothing. `dev` also places
//! the three demo orders of its banner ([`DEMO_ORDERS`]), so the console
//! has sagas to show from the start; their request ids make that
//! idempotent too.

use saga_proto::inventory::v1 as inventory;
use saga_proto::payment::v1 as payment;

/// Demo customers and their opening balances (cents).
pub const DEMO_ACCOUNTS: [(&str, i64); 2] = [("alice", 1_000_000), ("bob", 1_000)];
/// Demo products and their opening stock (units).
pub const DEMO_PRODUCTS: [(&str, i64); 2] = [("sku-apple", 1_000), ("sku-pear", 3)];

/// `dev-stack seed`: waits until both participants answer, then seeds.
pub async fn seed_when_up(
    config: &crate::config::SeedConfig,
) -> Result<(), Box<dyn std::error::Error>> {
    let admin = config.admin.build()?;
    let payment = orchestrator::participant_channel_with(&config.payment_addr, &config.tls)?;
    let inventory = orchestrator::participant_channel_with(&config.inventory_addr, &config.tls)?;
    seed_once_ready(payment, inventory, &admin).await?;
    Ok(())
}

/// [`seed`], sent again with backoff (200 ms to 3 s, up to 40 times) while
/// a participant cannot take it yet: unreachable, or UNAVAILABLE until its
/// store is open. `dev` seeds the participants it has just started, which
/// on a loaded machine are not ready at the first call either.
pub async fn seed_once_ready(
    payment: service_kit::channel::GrpcChannel,
    inventory: service_kit::channel::GrpcChannel,
    admin: &service_kit::auth::TokenAuth,
) -> Result<(), tonic::Status> {
    use backon::{BackoffBuilder, ExponentialBuilder};
    let mut backoff = ExponentialBuilder::default()
        .with_min_delay(std::time::Duration::from_millis(200))
        .with_max_delay(std::time::Duration::from_secs(3))
        .with_max_times(40)
        .build();
    loop {
        match seed(payment.clone(), inventory.clone(), admin).await {
            Ok(()) => {
                tracing::info!("demo data seeded");
                return Ok(());
            }
            // A wrong or missing token does not get better by waiting.
            Err(status) if status.code() == tonic::Code::Unauthenticated => return Err(status),
            Err(status) => match backoff.next() {
                Some(delay) => {
                    tracing::warn!(%status, "participants not ready; retrying seed");
                    tokio::time::sleep(delay).await;
                }
                None => return Err(status),
            },
        }
    }
}

/// Idempotent seeding through the services' own APIs.
pub async fn seed(
    payment_channel: service_kit::channel::GrpcChannel,
    inventory_channel: service_kit::channel::GrpcChannel,
    admin: &service_kit::auth::TokenAuth,
) -> Result<(), tonic::Status> {
    let mut payment = payment::payment_service_client::PaymentServiceClient::new(payment_channel);
    let mut inventory =
        inventory::inventory_service_client::InventoryServiceClient::new(inventory_channel);
    for (customer_id, amount_cents) in DEMO_ACCOUNTS {
        payment
            .deposit(admin.request(payment::DepositRequest {
                request_id: format!("seed-{customer_id}"),
                customer_id: customer_id.to_owned(),
                amount_cents,
            }))
            .await?;
    }
    for (product_id, quantity) in DEMO_PRODUCTS {
        inventory
            .add_stock(admin.request(inventory::AddStockRequest {
                request_id: format!("seed-{product_id}"),
                product_id: product_id.to_owned(),
                quantity,
            }))
            .await?;
    }
    Ok(())
}

/// The banner's demo orders: (request id, customer, product, quantity,
/// unit price in cents) — one COMPLETED, one CANCELLED at the charge, one
/// CANCELLED at the stock (charged, then refunded).
pub const DEMO_ORDERS: [(&str, &str, &str, i64, i64); 3] = [
    ("demo-1", "alice", "sku-apple", 2, 150),
    ("demo-2", "bob", "sku-apple", 1, 5_000),
    ("demo-3", "alice", "sku-pear", 5, 200),
];

/// Places [`DEMO_ORDERS`] through the orchestrator's own CreateOrder (a
/// restart finds them by request id and places nothing), one after the
/// other, each waited for. The orchestrator answers UNAVAILABLE until it is
/// ready (its store open, its recovery sweep started), which on a loaded
/// machine outlasts the first call: an UNAVAILABLE order is sent again,
/// same request id, with backoff (up to ~1 min in all).
pub async fn demo_orders(
    orchestrator_channel: service_kit::channel::GrpcChannel,
) -> Result<(), tonic::Status> {
    use backon::{BackoffBuilder, ExponentialBuilder};
    use saga_proto::saga::v1 as saga;
    let mut orders = saga::order_service_client::OrderServiceClient::new(orchestrator_channel);
    for (request_id, customer_id, product_id, quantity, unit_price_cents) in DEMO_ORDERS {
        let request = saga::CreateOrderRequest {
            request_id: request_id.to_owned(),
            customer_id: customer_id.to_owned(),
            items: vec![saga::OrderItem {
                product_id: product_id.to_owned(),
                quantity,
                unit_price_cents,
            }],
            wait: true,
        };
        let mut backoff = ExponentialBuilder::default()
            .with_min_delay(std::time::Duration::from_millis(100))
            .with_max_delay(std::time::Duration::from_secs(2))
            .with_max_times(40)
            .build();
        let placed = loop {
            match orders.create_order(request.clone()).await {
                Ok(reply) => break reply.into_inner(),
                Err(status) if status.code() == tonic::Code::Unavailable => match backoff.next() {
                    Some(delay) => {
                        tracing::debug!(request_id, %status, "orchestrator not ready; demo order sent again");
                        tokio::time::sleep(delay).await;
                    }
                    None => return Err(status),
                },
                Err(status) => return Err(status),
            }
        };
        tracing::info!(request_id, saga_id = %placed.saga_id, status = ?placed.status(), created = placed.created, "demo order");
    }
    Ok(())
}
