//! The saga orchestrator.
//!
//! `CreateOrder` persists an order saga — the order and the intent of its
//! first step — before anything else, then drives it: charge the customer
//! (payment-svc), deduct the stock (inventory-svc). When a step is refused,
//! the steps already applied are compensated in reverse order (refund).
//! Every outcome is persisted before the next RPC, so after a crash each
//! unfinished saga is simply resumed from its stored state.
//!
//! Module map:
//! - [`saga`]: the saga as data (domain types, no wire or database types).
//! - [`engine`]: the pure state machine — what to do next, how an outcome
//!   moves the saga on.
//! - [`order_saga`]: the order saga's single definition and its RPCs.
//! - [`executor`]: runs the engine's decisions with retries and persists
//!   every result.
//! - [`classify`]: which participant errors are refusals, which transient.
//! - [`store`]: the storage trait and the embedded SQLite backend.
//! - [`app`]: the use cases (create, get, list, recover).
//! - [`grpc`] / [`convert`]: the thin `saga.v1` adapters and validation.
//! - [`hub`]: wakes `wait`ing callers when their saga changes.
//! - [`config`] / [`dev`]: the binary's command line and the one-command dev
//!   stack.

pub mod app;
pub mod classify;
pub mod config;
pub mod convert;
pub mod dev;
pub mod engine;
pub mod executor;
pub mod grpc;
pub mod hub;
pub mod order_saga;
pub mod saga;
pub mod store;

use executor::{Executor, LeasePolicy, RetryPolicy, StepInvoker};
use service_kit::server::{self, ServeError};
use service_kit::shutdown::Shutdown;
use std::sync::Arc;
use std::time::Duration;
use tokio::net::TcpListener;

/// Tunables of a running orchestrator.
#[derive(Debug, Clone)]
pub struct Settings {
    pub retry: RetryPolicy,
    pub lease: LeasePolicy,
    pub max_wait: Duration,
}

impl Default for Settings {
    fn default() -> Self {
        Settings {
            retry: RetryPolicy::default(),
            lease: LeasePolicy::default(),
            max_wait: Duration::from_secs(30),
        }
    }
}

/// Serves `saga.v1` on `listener` until `shutdown` fires, with the recovery
/// sweep running beside it (it resumes this instance's unfinished sagas at
/// once and any saga whose lease expired).
pub async fn serve(
    store: Arc<dyn store::SagaStore>,
    invoker: Arc<dyn StepInvoker>,
    settings: Settings,
    listener: TcpListener,
    shutdown: Shutdown,
) -> Result<(), ServeError> {
    use saga_proto::saga::v1::order_service_server::OrderServiceServer;
    use saga_proto::saga::v1::saga_service_server::SagaServiceServer;

    let hub = Arc::new(hub::SagaHub::new());
    let executor = Arc::new(Executor::new(
        store.clone(),
        invoker,
        settings.retry.clone(),
        settings.lease.clone(),
        hub.clone(),
        shutdown.clone(),
    ));
    let sweeper = tokio::spawn(executor.clone().run_sweeper());
    let app = Arc::new(app::Orchestrator::new(store, executor, hub));
    let routes = tonic::service::Routes::new(OrderServiceServer::new(grpc::OrderApi::new(
        app.clone(),
        settings.max_wait,
    )))
    .add_service(SagaServiceServer::new(grpc::SagaApi::new(app)));
    let routes = server::with_standard_services::<OrderServiceServer<grpc::OrderApi>>(
        routes,
        &[<SagaServiceServer<grpc::SagaApi> as tonic::server::NamedService>::NAME],
    )
    .await?;
    let served = server::serve(routes, listener, shutdown).await;
    let _ = sweeper.await;
    served
}

/// Opens the saga store: MongoDB when a URI is configured (waiting for the
/// server if it is not up yet), else the embedded store in `data_dir`.
pub async fn open_saga_store(
    mongo: &config::MongoConfig,
    data_dir: &std::path::Path,
    durability: service_kit::embedded::Durability,
    shutdown: &Shutdown,
) -> Result<Arc<dyn store::SagaStore>, Box<dyn std::error::Error>> {
    Ok(match &mongo.mongodb_uri {
        Some(uri) => {
            let db =
                service_kit::mongo::connect(uri, &mongo.mongodb_database, "orchestrator", shutdown)
                    .await?;
            Arc::new(store::MongoSagaStore::open(db).await?)
        }
        None => {
            let path = data_dir.join(config::DATABASE_FILE);
            tracing::info!(db = %path.display(), "embedded store");
            Arc::new(store::SqliteSagaStore::open(&path, durability)?)
        }
    })
}

/// A lazily connecting channel to a participant: the orchestrator starts
/// even when a participant is down, and calls to it fail (and are retried)
/// until it is up.
pub fn participant_channel(
    addr: &str,
) -> Result<tonic::transport::Channel, tonic::transport::Error> {
    Ok(tonic::transport::Endpoint::from_shared(addr.to_owned())?
        .tcp_nodelay(true)
        .connect_timeout(Duration::from_secs(2))
        .connect_lazy())
}
