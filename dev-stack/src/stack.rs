//! `dev`: payment-svc, inventory-svc and the orchestrator in one process,
//! each on its own port, with embedded stores under one data directory (or
//! MongoDB databases when a URI is given), seeded with the demo data.
//!
//! Each of the three gRPC servers answers health from its bind on, as the
//! separate binaries do: liveness SERVING, readiness NOT_SERVING until its
//! own store is open (and, for the orchestrator, its recovery sweep
//! started), NOT_SERVING again through the drain after SIGTERM/SIGINT.

use crate::banner::Addresses;
use crate::config::DevConfig;
use inventory_svc::store::{InventoryStore, MongoInventoryStore, SqliteInventoryStore};
use participant_kit::{HistoryRetention, Kit, Participant};
use payment_svc::store::{MongoPaymentStore, PaymentStore, SqlitePaymentStore};
use service_kit::channel::GrpcChannel;
use service_kit::server::{self, GrpcServer};
use service_kit::shutdown::Shutdown;
use std::sync::Arc;
use tokio::net::TcpListener;

type BoxError = Box<dyn std::error::Error>;

/// The participants' stores for the dev stack: MongoDB databases when a URI
/// is configured, else SQLite files under the data directory.
async fn participant_stores(
    config: &DevConfig,
    history: HistoryRetention,
    shutdown: &Shutdown,
) -> Result<(Arc<dyn PaymentStore>, Arc<dyn InventoryStore>), BoxError> {
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
                Arc::new(MongoPaymentStore::open_with(payment_db, history.keep).await?),
                Arc::new(MongoInventoryStore::open_with(inventory_db, history.keep).await?),
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

/// The participants' history retention: `--history-retention`, checked
/// against the minimum computed from this stack's own orchestrator
/// `limits` and saga (one process, so the participants know them exactly).
fn history_retention(
    config: &DevConfig,
    limits: &service_kit::limits::CallLimits,
) -> Result<HistoryRetention, BoxError> {
    let keep = limits.history_retention(config.history_retention)?;
    Ok(HistoryRetention {
        keep,
        purge_interval: config.retention.purge_interval,
    })
}

/// The three listeners, bound before anything is served so a busy port
/// fails start-up at once.
struct Listeners {
    payment: TcpListener,
    inventory: TcpListener,
    orchestrator: TcpListener,
    console: Option<TcpListener>,
}

impl Listeners {
    async fn bind(config: &DevConfig) -> Result<Listeners, BoxError> {
        let console = match config.console.listen() {
            Some(addr) => Some(server::bind(addr).await?),
            None => None,
        };
        Ok(Listeners {
            payment: server::bind(config.payment_listen).await?,
            inventory: server::bind(config.inventory_listen).await?,
            orchestrator: server::bind(config.orchestrator_listen).await?,
            console,
        })
    }

    /// Where each server listens, for the banner and the channels.
    fn addresses(&self) -> Result<Addresses, BoxError> {
        Ok(Addresses {
            orchestrator: self.orchestrator.local_addr()?.to_string(),
            payment: self.payment.local_addr()?.to_string(),
            inventory: self.inventory.local_addr()?.to_string(),
            console: match &self.console {
                Some(console) => Some(format!("http://{}/", console.local_addr()?)),
                None => None,
            },
        })
    }
}

/// The three gRPC servers, answering health (readiness NOT_SERVING) from
/// the moment they are started, before any store is opened.
struct Servers {
    payment: GrpcServer,
    inventory: GrpcServer,
    orchestrator: GrpcServer,
}

impl Servers {
    /// Starts a server on each of `listeners`' gRPC listeners; the console
    /// listener is handed back as it is.
    fn start(
        listeners: Listeners,
        kits: (&Kit, &Kit),
        options: &server::ServeOptions,
        shutdown: &Shutdown,
    ) -> Result<(Servers, Option<TcpListener>), BoxError> {
        let (payment, inventory) = kits;
        let mut servers = Servers {
            payment: payment.server(
                <payment_svc::Payment as Participant>::SERVICE,
                listeners.payment,
                shutdown,
            )?,
            inventory: inventory.server(
                <inventory_svc::Inventory as Participant>::SERVICE,
                listeners.inventory,
                shutdown,
            )?,
            orchestrator: orchestrator::grpc_server(options, listeners.orchestrator, shutdown)?,
        };
        servers.payment.start();
        servers.inventory.start();
        servers.orchestrator.start();
        Ok((servers, listeners.console))
    }
}

/// One set of TLS / token / limit options for all three servers.
fn serve_options(config: &DevConfig) -> Result<server::ServeOptions, BoxError> {
    let options = server::ServeOptions::from_flags(&config.admin, &config.tls, &config.limits)?
        .with_service(config.service.build()?);
    if options.tls_enabled() && config.tls.tls_ca.is_none() {
        return Err("dev with TLS needs --tls-ca too: it calls its own participants".into());
    }
    options.log_participant_startup("dev stack");
    Ok(options)
}

/// The orchestrator's channels to its two participants in this process
/// (`http://` is upgraded to `https://` when `--tls-ca` is set).
fn channels(config: &DevConfig, addrs: &Addresses) -> Result<(GrpcChannel, GrpcChannel), BoxError> {
    let channel =
        |addr: &str| orchestrator::participant_channel_with(&format!("http://{addr}"), &config.tls);
    Ok((channel(&addrs.payment)?, channel(&addrs.inventory)?))
}

/// The saga's steps with payment and inventory, when it lists them, at the
/// participants this process hosts; any other step stays where its steps
/// file says (e.g. examples/nestjs-shipping).
fn hosted_here(
    mut specs: Vec<orchestrator::steps_file::StepSpec>,
    addrs: &Addresses,
) -> Vec<orchestrator::steps_file::StepSpec> {
    for spec in &mut specs {
        match spec.name.as_str() {
            "payment" => spec.address = format!("http://{}", addrs.payment),
            "inventory" => spec.address = format!("http://{}", addrs.inventory),
            _ => {}
        }
    }
    specs
}

/// Places the demo orders once the orchestrator (already bound at `addr`)
/// serves; a failure is logged, never fatal: the demo data is a
/// convenience.
async fn demo_orders(config: DevConfig, addr: String) {
    let channel =
        match orchestrator::participant_channel_with(&format!("http://{addr}"), &config.tls) {
            Ok(channel) => channel,
            Err(error) => {
                tracing::warn!(%error, "demo orders not placed");
                return;
            }
        };
    if let Err(status) = crate::seed::demo_orders(channel).await {
        tracing::warn!(%status, "demo orders not placed");
    }
}

/// `dev-stack dev`: runs the three services until SIGTERM/SIGINT.
pub async fn run(config: DevConfig) -> Result<(), BoxError> {
    let shutdown = Shutdown::new();
    shutdown.on_signals();
    let metrics_url = config.metrics.start()?;
    if metrics_url.is_some() {
        participant_kit::metrics::describe();
        participant_kit::retention::describe();
        orchestrator::retention::describe();
    }
    let listeners = Listeners::bind(&config).await?;
    let addrs = listeners.addresses()?;
    let options = serve_options(&config)?;
    let (payment_channel, inventory_channel) = channels(&config, &addrs)?;
    let specs = hosted_here(config.steps.specs()?, &addrs);
    let caller = config.engine.caller(options.service.clone());
    let definition = orchestrator::participant::definition_of(&specs, &caller, &config.tls)?;
    let limits = config.engine.call_limits(definition.steps().len());
    let history = history_retention(&config, &limits)?;
    let kit = || -> Result<Kit, BoxError> {
        Ok(Kit::new(Arc::new(config.faults.build()?), options.clone()).with_history(history))
    };
    let (payment_kit, inventory_kit) = (kit()?, kit()?);
    let (servers, console) = Servers::start(
        listeners,
        (&payment_kit, &inventory_kit),
        &options,
        &shutdown,
    )?;
    let (payment_store, inventory_store) = participant_stores(&config, history, &shutdown).await?;
    let retention = config.retention.settings();
    let saga_store = orchestrator::open_saga_store(
        &config.mongo,
        &config.data_dir,
        config.engine.durability,
        retention.store(),
        &shutdown,
    )
    .await?;
    if config.faults.settings().is_enabled() {
        tracing::warn!(settings = ?config.faults.settings(), "fault injection ON in payment-svc and inventory-svc");
    }
    let payment = tokio::spawn(payment_svc::serve_on(
        payment_store,
        payment_kit,
        servers.payment,
    ));
    let inventory = tokio::spawn(inventory_svc::serve_on(
        inventory_store,
        inventory_kit,
        servers.inventory,
    ));

    crate::seed::seed_once_ready(payment_channel, inventory_channel, &options.admin).await?;
    let mut settings = config.engine.settings(config.orchestrator_listen)?;
    settings.retention = retention;
    settings.retention.set_windows(&limits, history.keep);
    settings.console = config.console.settings();
    crate::banner::print(&config, &options, &addrs, metrics_url.as_deref());
    let demo = tokio::spawn(demo_orders(config.clone(), addrs.orchestrator.clone()));
    let result = orchestrator::serve_on(
        saga_store,
        Arc::new(definition),
        settings,
        options,
        servers.orchestrator,
        console,
    )
    .await;
    demo.abort();
    shutdown.trigger();
    stopped("payment-svc", payment).await;
    stopped("inventory-svc", inventory).await;
    Ok(result?)
}

/// Waits for a participant's server task and logs how it ended.
async fn stopped(name: &str, task: tokio::task::JoinHandle<Result<(), server::ServeError>>) {
    match task.await {
        Ok(Ok(())) => {}
        Ok(Err(error)) => tracing::error!(%error, "{name} stopped with an error"),
        Err(error) => tracing::error!(%error, "{name} panicked"),
    }
}
