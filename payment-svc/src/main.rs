//! Stand-alone payment-svc binary: the shared participant start-up
//! (`service_kit::participant`) with this service's stores.

/// mimalloc: every gRPC call allocates many small buffers; glibc malloc
/// showed up at ~6% of CPU in profiles under load.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

use clap::Parser;
use embedded_store::Durability;
use payment_svc::config::{Cli, PaymentDefaults};
use payment_svc::store::{MongoPaymentStore, PaymentStore, SqlitePaymentStore};
use service_kit::faults::Faults;
use service_kit::participant::Participant;
use service_kit::server::{ServeError, ServeOptions};
use service_kit::shutdown::Shutdown;
use std::path::Path;
use std::sync::Arc;
use tokio::net::TcpListener;

struct Payment;

impl Participant for Payment {
    type Store = dyn PaymentStore;

    fn open_embedded(
        path: &Path,
        durability: Durability,
    ) -> Result<Arc<Self::Store>, Box<dyn std::error::Error>> {
        Ok(Arc::new(SqlitePaymentStore::open(path, durability)?))
    }

    async fn open_mongo(
        db: mongodb::Database,
    ) -> Result<Arc<Self::Store>, Box<dyn std::error::Error>> {
        Ok(Arc::new(MongoPaymentStore::open(db).await?))
    }

    async fn serve(
        store: Arc<Self::Store>,
        faults: Arc<Faults>,
        options: ServeOptions,
        listener: TcpListener,
        shutdown: Shutdown,
    ) -> Result<(), ServeError> {
        payment_svc::serve_with(store, faults, options, listener, shutdown).await
    }

    fn metrics_started() {
        operation_history::metrics::describe();
    }
}

#[tokio::main]
async fn main() -> std::process::ExitCode {
    service_kit::participant::main::<PaymentDefaults, Payment>(Cli::parse().config).await
}
