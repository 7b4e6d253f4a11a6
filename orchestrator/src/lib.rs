//! The saga orchestrator.
//!
//! `CreateOrder` persists an order saga — the order and the intent of its
//! first step — before anything else, then drives it through its steps,
//! each a participant of `participant.v1.SagaStepService` (by default:
//! charge the customer at payment-svc, deduct the stock at inventory-svc).
//! When a step is refused, the steps already applied are compensated in
//! reverse order (refund).
//! Every outcome is persisted before the next RPC, so after a crash each
//! unfinished saga is simply resumed from its stored state.
//!
//! Module map:
//! - [`saga`]: the saga as data (domain types, no wire or database types).
//! - [`engine`]: the pure state machine — what to do next, how an outcome
//!   moves the saga on.
//! - [`step`]: what a step is ([`step::SagaStep`]: names plus action and
//!   compensation) and a saga definition (a list of steps).
//! - [`participant`]: every step over the participant contract (batched
//!   under load), and the one place participant answers are read into
//!   domain outcomes.
//! - [`executor`]: runs the engine's decisions with retries and persists
//!   every result; leases and the recovery sweep.
//! - [`store`]: the storage trait and its embedded SQLite and MongoDB
//!   backends.
//! - [`app`]: the use cases (create, get, list, recover).
//! - [`grpc`] / [`convert`]: the thin `saga.v1` adapters and validation.
//! - [`client_auth`]: the client token the API and the console require
//!   when one is configured (`--client-token`).
//! - [`history_audit`]: whether a stored saga history is one linear
//!   sequence of versions (the chaos audit and the simulation check it).
//! - [`hub`]: wakes `wait`ing callers (and watchers) when their saga
//!   changes.
//! - [`console`]: the saga console — HTML pages and a JSON API over the
//!   same use cases, on its own HTTP listener.
//! - [`retention`]: finished sagas expire — the purge of the embedded
//!   store (MongoDB: a TTL index), the archive written before deleting.
//! - [`steps_file`]: the saga's steps from configuration (each a
//!   `participant.v1.SagaStepService` at an address).
//! - [`config`]: the binary's command line.

#![warn(missing_docs)]

pub mod app;
pub mod client_auth;
pub mod config;
pub mod console;
pub mod convert;
pub mod engine;
pub mod executor;
pub mod grpc;
pub mod history_audit;
pub mod hub;
pub mod participant;
pub mod retention;
pub mod saga;
pub mod step;
pub mod steps_file;
pub mod store;

use executor::{Executor, LeasePolicy, RetryPolicy};
use service_kit::server::{GrpcServer, ServeError, ServeOptions};
use service_kit::shutdown::Shutdown;
use std::sync::Arc;
use std::time::Duration;
use step::SagaDefinition;
use tokio::net::TcpListener;

/// Tunables of a running orchestrator.
#[derive(Debug, Clone)]
pub struct Settings {
    /// Attempt budgets, backoff and step deadline.
    pub retry: RetryPolicy,
    /// This instance's name, lease length and sweep interval.
    pub lease: LeasePolicy,
    /// Longest a CreateOrder with `wait` is held.
    pub max_wait: Duration,
    /// Cap on sagas driven at once by this instance.
    pub max_in_flight: usize,
    /// After SIGTERM, how long in-flight steps get to finish and persist.
    pub shutdown_grace: Duration,
    /// Save after every step (see `--save-every-step`): no save is left out.
    pub save_every_step: bool,
    /// How long finished sagas are kept, the archive, the purge interval.
    /// The store must have been opened with the same
    /// ([`retention::RetentionSettings::store`]).
    pub retention: retention::RetentionSettings,
    /// The hosts the console answers to and its cap on live streams.
    pub console: console::ConsoleSettings,
    /// Where time comes from: leases, deadlines, windows and every sleep of
    /// the executor (the system clock; a manual one in tests).
    pub clock: service_kit::clock::SharedClock,
}

impl Default for Settings {
    fn default() -> Self {
        Settings {
            retry: RetryPolicy::default(),
            lease: LeasePolicy::default(),
            max_wait: Duration::from_secs(30),
            max_in_flight: 10_000,
            shutdown_grace: Duration::from_secs(10),
            save_every_step: false,
            retention: retention::RetentionSettings::default(),
            console: console::ConsoleSettings::default(),
            clock: service_kit::clock::system(),
        }
    }
}

/// Serves `saga.v1` on `listener` until `shutdown` fires, with the recovery
/// sweep running beside it (it resumes this instance's unfinished sagas at
/// once and any saga whose lease expired).
pub async fn serve(
    store: Arc<dyn store::SagaStore>,
    definition: Arc<SagaDefinition>,
    settings: Settings,
    listener: TcpListener,
    shutdown: Shutdown,
) -> Result<(), ServeError> {
    serve_with(
        store,
        definition,
        settings,
        ServeOptions::default(),
        listener,
        shutdown,
    )
    .await
}

/// [`serve`] as `options` say: TLS or plaintext, the admin token RetrySaga
/// requires, the largest accepted request. No console.
pub async fn serve_with(
    store: Arc<dyn store::SagaStore>,
    definition: Arc<SagaDefinition>,
    settings: Settings,
    options: ServeOptions,
    listener: TcpListener,
    shutdown: Shutdown,
) -> Result<(), ServeError> {
    serve_with_console(
        store, definition, settings, options, listener, None, shutdown,
    )
    .await
}

/// [`serve_with`], plus the saga console ([`console`]) on `console` when
/// given: beside the gRPC server, over the same use cases, with RetrySaga's
/// admin token, stopping with the same `shutdown`. Ready at once: the store
/// is open.
pub async fn serve_with_console(
    store: Arc<dyn store::SagaStore>,
    definition: Arc<SagaDefinition>,
    settings: Settings,
    options: ServeOptions,
    listener: TcpListener,
    console: Option<TcpListener>,
    shutdown: Shutdown,
) -> Result<(), ServeError> {
    let server = grpc_server(&options, listener, &shutdown)?;
    serve_on(store, definition, settings, options, server, console).await
}

/// The orchestrator's gRPC server on `listener`: `saga.v1` OrderService
/// and SagaService behind readiness, with health and reflection, draining
/// once `shutdown` fires. Started at once ([`GrpcServer::start`]) it
/// answers health while the saga store opens; [`serve_on`] makes it ready.
pub fn grpc_server(
    options: &ServeOptions,
    listener: TcpListener,
    shutdown: &Shutdown,
) -> Result<GrpcServer, ServeError> {
    use saga_proto::saga::v1::order_service_server::OrderServiceServer;
    use saga_proto::saga::v1::saga_service_server::SagaServiceServer;
    GrpcServer::new(
        options,
        listener,
        saga_proto::FILE_DESCRIPTOR_SET,
        &[
            <OrderServiceServer<grpc::OrderApi> as tonic::server::NamedService>::NAME,
            <SagaServiceServer<grpc::SagaApi> as tonic::server::NamedService>::NAME,
        ],
        shutdown,
    )
}

/// [`serve_with_console`] on `server` (from [`grpc_server`], which may
/// already answer health): the recovery sweep starts, then the server is
/// ready; at its shutdown it drains — readiness NOT_SERVING, in-flight
/// steps finishing and persisting for at most `settings.shutdown_grace` —
/// and returns once it has closed.
pub async fn serve_on(
    store: Arc<dyn store::SagaStore>,
    definition: Arc<SagaDefinition>,
    settings: Settings,
    options: ServeOptions,
    mut server: GrpcServer,
    console: Option<TcpListener>,
) -> Result<(), ServeError> {
    let shutdown = server.shutdown().clone();
    let hub = Arc::new(hub::SagaHub::new());
    let executor = Arc::new(Executor::new(
        store.clone(),
        definition,
        hub.clone(),
        shutdown.clone(),
        &settings,
    ));
    let sweeper = tokio::spawn(executor.clone().run_sweeper());
    let purge = spawn_purge(store.clone(), &settings, shutdown.clone());
    let app = Arc::new(
        app::Orchestrator::new(store, executor.clone(), hub, shutdown.clone())
            .with_retry_window(settings.retention.retry_window),
    );
    let console = console.map(|listener| {
        tokio::spawn(console::serve(
            app.clone(),
            client_guard(&options),
            settings.console.clone(),
            listener,
            shutdown.clone(),
        ))
    });
    server.ready(grpc_routes(app, &settings, &options));
    let served = server.run(drain(&executor, settings.shutdown_grace)).await;
    let _ = sweeper.await;
    let _ = purge.await;
    if let Some(console) = console {
        console_stopped(console).await;
    }
    served
}

/// Starts the periodic purge of expired sagas (archived first when an
/// archive directory is configured); it ends with `shutdown`.
fn spawn_purge(
    store: Arc<dyn store::SagaStore>,
    settings: &Settings,
    shutdown: Shutdown,
) -> tokio::task::JoinHandle<()> {
    let archive = settings
        .retention
        .archive_dir
        .as_deref()
        .map(retention::Archive::new);
    let purger = retention::SagaPurger::new(store, archive);
    tokio::spawn(service_kit::purge::run_purge_loop(
        Arc::new(purger),
        "orchestrator",
        settings.retention.purge_interval,
        settings.clock.clone(),
        shutdown,
    ))
}

/// The `saga.v1` services, OrderService and SagaService, each accepting
/// requests up to the configured size (health and reflection are the
/// server's own).
fn grpc_routes(
    app: Arc<app::Orchestrator>,
    settings: &Settings,
    options: &ServeOptions,
) -> tonic::service::Routes {
    use saga_proto::saga::v1::order_service_server::OrderServiceServer;
    use saga_proto::saga::v1::saga_service_server::SagaServiceServer;

    let limit = options.max_request_bytes;
    let guard = client_guard(options);
    tonic::service::Routes::new(
        OrderServiceServer::new(
            grpc::OrderApi::new(app.clone(), settings.max_wait).with_guard(guard.clone()),
        )
        .max_decoding_message_size(limit),
    )
    .add_service(
        SagaServiceServer::new(grpc::SagaApi::new(app).with_guard(guard))
            .max_decoding_message_size(limit),
    )
}

/// Who may call the client API and read the console: `options`' client
/// token (or its admin token); RetrySaga also needs the admin token.
fn client_guard(options: &ServeOptions) -> client_auth::ClientGuard {
    client_auth::ClientGuard::new(options.client.clone(), options.admin.clone())
}

/// From the shutdown on, while the server drains (readiness NOT_SERVING,
/// new calls refused): lets in-flight steps finish and persist, for at most
/// `grace`; what is still running then resumes from its persisted state on
/// the next start (or another instance).
async fn drain(executor: &Executor, grace: std::time::Duration) {
    if tokio::time::timeout(grace, executor.drained())
        .await
        .is_err()
    {
        tracing::warn!(
            sagas = executor.in_flight(),
            "grace period over with sagas still in flight; they resume from their persisted state"
        );
    }
}

/// Waits for the console's task (it ends at shutdown) and logs how it
/// ended: the console is for people, so its failure does not stop sagas.
async fn console_stopped(console: tokio::task::JoinHandle<std::io::Result<()>>) {
    match console.await {
        Ok(Ok(())) => {}
        Ok(Err(error)) => tracing::error!(%error, "the console stopped with an error"),
        Err(error) => tracing::error!(%error, "the console failed"),
    }
}

/// Opens the saga store: MongoDB when a URI is configured (waiting for the
/// server if it is not up yet), else the embedded store in `data_dir`;
/// keeping finished sagas as `retention` says.
pub async fn open_saga_store(
    mongo: &config::MongoConfig,
    data_dir: &std::path::Path,
    durability: embedded_store::Durability,
    retention: store::SagaRetention,
    shutdown: &Shutdown,
) -> Result<Arc<dyn store::SagaStore>, Box<dyn std::error::Error>> {
    Ok(match &mongo.mongodb_uri {
        Some(uri) => {
            let db = mongo_client::connect(
                uri,
                &mongo.mongodb_database,
                "orchestrator",
                shutdown.wait(),
            )
            .await?;
            Arc::new(store::MongoSagaStore::open_with(db, retention).await?)
        }
        None => {
            let path = data_dir.join(config::DATABASE_FILE);
            Arc::new(store::SqliteSagaStore::open(&path, durability)?.with_retention(retention))
        }
    })
}

/// How long a participant call may wait for its connection before the call
/// itself starts (a lazily connecting channel connects on first use and
/// after the participant went away). It comes on top of the call timeout,
/// so the start-up check of the lease TTL counts it.
pub const PARTICIPANT_CONNECT_TIMEOUT: Duration = service_kit::limits::PARTICIPANT_CONNECT_TIMEOUT;

/// A lazily connecting channel to a participant
/// ([`service_kit::channel::GrpcChannel`]): the orchestrator starts even
/// when a participant is down, and calls to it fail (and are retried) until
/// it is up.
pub fn participant_channel(
    addr: &str,
) -> Result<service_kit::channel::GrpcChannel, service_kit::tls::TlsError> {
    participant_channel_with(addr, &service_kit::tls::TlsConfig::default())
}

/// [`participant_channel`] over TLS when `tls` has a CA or `addr` is
/// `https://` (an `http://` address is upgraded when a CA is set).
pub fn participant_channel_with(
    addr: &str,
    tls: &service_kit::tls::TlsConfig,
) -> Result<service_kit::channel::GrpcChannel, service_kit::tls::TlsError> {
    service_kit::channel::GrpcChannel::lazy(addr, tls, PARTICIPANT_CONNECT_TIMEOUT)
}
