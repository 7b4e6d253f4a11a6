//! The `orchestrator` binary: `serve` (default) or `dev`.

use clap::Parser;
use orchestrator::config::{Cli, Command, ServeConfig};
use orchestrator::order_saga::OrderParticipants;
use service_kit::shutdown::Shutdown;
use std::sync::Arc;

#[tokio::main]
async fn main() -> std::process::ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        Some(Command::Dev(config)) => {
            service_kit::telemetry::init(config.engine.log_format);
            orchestrator::dev::run(config).await
        }
        Some(Command::Serve(config)) => serve(config).await,
        Some(Command::Seed(config)) => {
            service_kit::telemetry::init(Default::default());
            orchestrator::dev::seed_when_up(&config.payment_addr, &config.inventory_addr).await
        }
        None => serve(cli.serve).await,
    };
    match result {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(error) => {
            tracing::error!(%error, "orchestrator stopped");
            eprintln!("orchestrator: {error}");
            std::process::ExitCode::FAILURE
        }
    }
}

async fn serve(config: ServeConfig) -> Result<(), Box<dyn std::error::Error>> {
    service_kit::telemetry::init(config.engine.log_format);
    let shutdown = Shutdown::new();
    shutdown.on_signals();
    let store = orchestrator::open_saga_store(
        &config.mongo,
        &config.data_dir,
        config.engine.durability,
        &shutdown,
    )
    .await?;
    let invoker = OrderParticipants::new(
        orchestrator::participant_channel(&config.payment_addr)?,
        orchestrator::participant_channel(&config.inventory_addr)?,
        config.engine.call_timeout(),
    );
    let listener = service_kit::server::bind(config.listen).await?;
    tracing::info!(addr = %listener.local_addr()?, "orchestrator serving");
    let settings = config.engine.settings(config.listen)?;
    orchestrator::serve(store, Arc::new(invoker), settings, listener, shutdown).await?;
    Ok(())
}
