//! The `dev-stack` binary: `dev` runs the whole system in one process;
//! `seed` loads the demo data into running participants.

/// mimalloc, as in the service binaries (see `orchestrator`'s main).
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

use dev_stack::config::{Cli, Command};
use orchestrator::config::RENAMED_ENV;

#[tokio::main]
async fn main() -> std::process::ExitCode {
    let (cli, old_names) = service_kit::renamed_env::parse::<Cli>(RENAMED_ENV);
    let result = match cli.command {
        Command::Dev(config) => {
            let _telemetry = service_kit::telemetry::init(config.engine.log_format);
            old_names.iter().for_each(|old| old.warn());
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
