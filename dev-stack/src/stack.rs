//! `dev`: payment-svc, inventory-svc and the orchestrator in one process,
//! each on its own port, with embedded stores under one data directory (or
//! MongoDB databases when a URI is given), seeded with the demo data.

use crate::config::DevConfig;
use inventory_svc::store::{InventoryStore, MongoInventoryStore, SqliteInventoryStore};
use orchestrator::order_saga::OrderParticipants;
use payment_svc::store::{MongoPaymentStore, PaymentStore, SqlitePaymentStore};
use service_kit::server;
use service_kit::shutdown::Shutdown;
use std::sync::Arc;

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

/// `dev-stack dev`: runs the three services until SIGTERM/SIGINT.
pub async fn run(config: DevConfig) -> Result<(), Box<dyn std::error::Error>> {
    let shutdown = Shutdown::new();
    shutdown.on_signals();
    let metrics_url = config.metrics.start()?;
    if metrics_url.is_some() {
        participant_kit::metrics::describe();
    }
    let (payment_store, inventory_store) = participant_stores(&config, &shutdown).await?;
    let saga_store = orchestrator::open_saga_store(
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
        orchestrator::participant_channel_with(&format!("http://{payment_addr}"), &config.tls)?;
    let inventory_channel =
        orchestrator::participant_channel_with(&format!("http://{inventory_addr}"), &config.tls)?;
    crate::seed::seed(
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
    let banner = crate::banner::banner(
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
    let result = orchestrator::serve_with(
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
