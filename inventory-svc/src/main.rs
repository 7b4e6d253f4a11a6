//! Stand-alone inventory-svc binary.

/// mimalloc: every gRPC call allocates many small buffers; glibc malloc
/// showed up at ~6% of CPU in profiles under load.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

use clap::Parser;
use inventory_svc::config::Config;
use inventory_svc::store::{InventoryStore, MongoInventoryStore, SqliteInventoryStore};
use service_kit::shutdown::Shutdown;
use std::sync::Arc;

#[tokio::main]
async fn main() -> std::process::ExitCode {
    let config = Config::parse();
    service_kit::telemetry::init(config.log_format);
    match run(config).await {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(error) => {
            tracing::error!(%error, "inventory-svc stopped");
            std::process::ExitCode::FAILURE
        }
    }
}

async fn run(config: Config) -> Result<(), Box<dyn std::error::Error>> {
    // Checked before anything else: a bad TLS file or token stops start-up
    // at once, naming the flag.
    let options = config.serve_options()?;
    let shutdown = Shutdown::new();
    shutdown.on_signals();
    let store: Arc<dyn InventoryStore> = match &config.mongodb_uri {
        Some(uri) => {
            let db = service_kit::mongo::connect(
                uri,
                &config.mongodb_database,
                "inventory-svc",
                &shutdown,
            )
            .await?;
            Arc::new(MongoInventoryStore::open(db).await?)
        }
        None => {
            tracing::info!(db = %config.database_path().display(), "embedded store");
            Arc::new(SqliteInventoryStore::open(
                &config.database_path(),
                config.durability,
            )?)
        }
    };
    let faults = Arc::new(config.faults.build()?);
    let settings = faults.settings();
    if settings.is_enabled() {
        tracing::warn!(%settings, "fault injection ON: calls will fail, be delayed or lose replies on purpose");
    }
    let listener = service_kit::server::bind(config.listen).await?;
    tracing::info!(addr = %listener.local_addr()?, "inventory-svc serving");
    // After the gRPC port is bound, so a busy gRPC port fails start-up
    // before an exporter is left serving. Logs the scrape URL.
    match config.metrics.start()? {
        Some(_) => operation_history::metrics::describe(),
        None => tracing::info!("metrics disabled (--no-metrics)"),
    }
    options.log_startup("inventory-svc");
    inventory_svc::serve_with(store, faults, options, listener, shutdown).await?;
    Ok(())
}
