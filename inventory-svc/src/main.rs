//! Stand-alone inventory-svc binary.

use clap::Parser;
use inventory_svc::config::Config;
use inventory_svc::store::SqliteInventoryStore;
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
    let store = SqliteInventoryStore::open(&config.database_path(), config.durability)?;
    let listener = service_kit::server::bind(config.listen).await?;
    tracing::info!(
        addr = %listener.local_addr()?,
        db = %config.database_path().display(),
        "inventory-svc serving"
    );
    let shutdown = Shutdown::new();
    shutdown.on_signals();
    inventory_svc::serve(Arc::new(store), listener, shutdown).await?;
    Ok(())
}
