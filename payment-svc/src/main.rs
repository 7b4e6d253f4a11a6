//! Stand-alone payment-svc binary.

use clap::Parser;
use payment_svc::config::Config;
use payment_svc::store::SqlitePaymentStore;
use service_kit::shutdown::Shutdown;
use std::sync::Arc;

#[tokio::main]
async fn main() -> std::process::ExitCode {
    let config = Config::parse();
    service_kit::telemetry::init(config.log_format);
    match run(config).await {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(error) => {
            tracing::error!(%error, "payment-svc stopped");
            std::process::ExitCode::FAILURE
        }
    }
}

async fn run(config: Config) -> Result<(), Box<dyn std::error::Error>> {
    let store = SqlitePaymentStore::open(&config.database_path(), config.durability)?;
    let listener = service_kit::server::bind(config.listen).await?;
    tracing::info!(addr = %listener.local_addr()?, db = %config.database_path().display(), "payment-svc serving");
    let shutdown = Shutdown::new();
    shutdown.on_signals();
    payment_svc::serve(Arc::new(store), listener, shutdown).await?;
    Ok(())
}
