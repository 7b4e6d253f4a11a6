//! The `orchestrator` binary: `serve` (also the default).

/// mimalloc: every gRPC call allocates many small buffers; glibc malloc
/// showed up at ~6% of CPU in profiles under load.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

use clap::Parser;
use orchestrator::config::{Cli, Command, ServeConfig};
use service_kit::shutdown::Shutdown;
use std::sync::Arc;

#[tokio::main]
async fn main() -> std::process::ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        Some(Command::Serve(config)) => serve(config).await,
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

/// Start-up: the gRPC server answers health (liveness SERVING, readiness
/// NOT_SERVING) from the bind on, while the saga store opens — MongoDB may
/// not be up yet — and is ready once the store is open and the recovery
/// sweep has started; it drains on SIGTERM/SIGINT.
async fn serve(config: ServeConfig) -> Result<(), Box<dyn std::error::Error>> {
    let _telemetry = service_kit::telemetry::init(config.engine.log_format);
    // Bad TLS files or token: a start-up error naming the flag.
    let options =
        service_kit::server::ServeOptions::from_flags(&config.admin, &config.tls, &config.limits)?
            .with_client(config.client.build()?);
    // A steps file that does not make a saga stops the start-up before
    // anything listens.
    let specs = config.steps.specs()?;
    let shutdown = Shutdown::new();
    shutdown.on_signals();
    if config.metrics.start()?.is_some() {
        orchestrator::retention::describe();
        orchestrator::client_auth::describe();
    }
    let listener = service_kit::server::bind(config.listen).await?;
    tracing::info!(addr = %listener.local_addr()?, "orchestrator answering health; ready once its store is open");
    let mut server = orchestrator::grpc_server(&options, listener, &shutdown)?;
    server.start();
    let retention = config.retention.settings();
    let store = orchestrator::open_saga_store(
        &config.mongo,
        &config.data_dir,
        config.engine.durability,
        retention.store(),
        &shutdown,
    )
    .await?;
    let caller = config.engine.caller(config.service.build()?);
    let definition = orchestrator::participant::definition_of(&specs, &caller, &config.tls)?;
    tracing::info!(steps = ?definition.names().iter().map(|n| n.name).collect::<Vec<_>>(), "the saga's steps");
    let console = match config.console.listen() {
        Some(addr) => {
            let console = service_kit::server::bind(addr).await?;
            let url = format!("http://{}/", console.local_addr()?);
            tracing::info!(%url, "saga console serving");
            Some(console)
        }
        None => {
            tracing::info!("saga console disabled (--no-console)");
            None
        }
    };
    let mut settings = config.engine.settings(config.listen)?;
    settings.retention = retention;
    let limits = config.engine.call_limits(definition.steps().len());
    let history = limits.history_retention(config.history_retention)?;
    settings.retention.set_windows(&limits, history);
    settings.console = config.console.settings();
    log_retention(&limits, &settings.retention);
    options.log_startup("orchestrator");
    options.client.log_startup("orchestrator");
    orchestrator::serve_on(
        store,
        Arc::new(definition),
        settings,
        options,
        server,
        console,
    )
    .await?;
    Ok(())
}

/// What retention this instance applies, and what it requires of the
/// participants: their `--history-retention` must be at least the minimum
/// computed from this instance's limits.
fn log_retention(
    limits: &service_kit::limits::CallLimits,
    retention: &orchestrator::retention::RetentionSettings,
) {
    use service_kit::limits::format_duration;
    tracing::info!(
        saga_retention = retention
            .saga_retention
            .map_or("off".to_owned(), format_duration),
        archive_dir = ?retention.archive_dir,
        participants_history_retention_at_least = format_duration(limits.minimum_history_retention()),
        failed_sagas_retryable_for = retention.retry_window.map_or("ever".to_owned(), format_duration),
        sagas_driven_for = retention.send_window.map_or("ever".to_owned(), format_duration),
        %limits,
        "retention: finished sagas expire after the saga retention (the idempotency window of CreateOrder)"
    );
}
