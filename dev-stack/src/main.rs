//! The `dev-stack` binary: `dev` runs the whole system in one process;
//! `seed` loads the demo data into running participants.

/// mimalloc, as in the service binaries (see `orchestrator`'s main).
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

use clap::Parser;
use dev_stack::config::{Cli, Command};

#[tokio::main]
async fn main() -> std::process::ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Dev(config) => {
            let _telemetry = service_kit::telemetry::init(config.engine.log_format);
            dev_stack::stack::run(*config).await
        }
        Command::Seed(config) => {
            let _telemetry = service_kit::telemetry::init(Default::default());
            dev_stack::seed::seed_when_up(&config).await
        }
    };
    match result {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(error) => {
            tracing::error!(%error, "dev-stack stopped");
            eprintln!("dev-stack: {error}");
            std::process::ExitCode::FAILURE
        }
    }
}
