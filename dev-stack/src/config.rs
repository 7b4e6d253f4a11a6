//! The `dev-stack` command line: `dev` (everything in one process) and
//! `seed` (demo data into running participants). Every flag has a default
//! that makes the zero-flag command work.

use orchestrator::config::{
    ConsoleConfig, EngineConfig, MetricsConfig, MongoConfig, RetentionConfig, StepsConfig,
};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

/// The command line.
#[derive(Debug, clap::Parser)]
#[command(
    name = "dev-stack",
    about = "The saga orchestrator's demo: all three services in one process, or demo data for a running stack"
)]
pub struct Cli {
    /// What to do.
    #[command(subcommand)]
    pub command: Command,
}

/// The subcommands.
#[derive(Debug, clap::Subcommand)]
pub enum Command {
    /// Run orchestrator, payment-svc and inventory-svc in one process with
    /// embedded stores and demo data, and print grpcurl commands to try.
    Dev(Box<DevConfig>),
    /// Seed the demo accounts and products into running participants
    /// (idempotent; waits until they answer).
    Seed(SeedConfig),
}

/// `dev-stack seed`.
#[derive(Debug, Clone, clap::Args)]
pub struct SeedConfig {
    /// payment-svc address.
    #[arg(long, env = "PAYMENT_ADDR", default_value = "http://127.0.0.1:50052")]
    pub payment_addr: String,
    /// inventory-svc address.
    #[arg(long, env = "INVENTORY_ADDR", default_value = "http://127.0.0.1:50053")]
    pub inventory_addr: String,
    /// Token the participants' Deposit/AddStock require (if any).
    #[command(flatten)]
    pub admin: service_kit::auth::AdminConfig,
    /// `--tls-ca` to call participants over TLS.
    #[command(flatten)]
    pub tls: service_kit::tls::TlsConfig,
}

/// `dev-stack dev`.
#[derive(Debug, Clone, clap::Args)]
pub struct DevConfig {
    /// Directory for the three embedded stores (relative to the current
    /// directory).
    #[arg(long, env = "DEV_DATA_DIR", default_value = "data")]
    pub data_dir: PathBuf,
    /// The orchestrator's gRPC address.
    #[arg(long, default_value = "127.0.0.1:50051")]
    pub orchestrator_listen: SocketAddr,
    /// payment-svc's gRPC address.
    #[arg(long, default_value = "127.0.0.1:50052")]
    pub payment_listen: SocketAddr,
    /// inventory-svc's gRPC address.
    #[arg(long, default_value = "127.0.0.1:50053")]
    pub inventory_listen: SocketAddr,
    /// The saga console (`--console-listen`, default 127.0.0.1:8080;
    /// `--no-console`).
    #[command(flatten)]
    pub console: ConsoleConfig,
    /// The saga's steps (`--steps-file`): payment and inventory (hosted
    /// here, whatever address the file gives them) by default; a file may
    /// add participants running elsewhere (e.g. examples/nestjs-shipping).
    #[command(flatten)]
    pub steps: StepsConfig,
    /// Fault injection in both participants (each gets its own sequence),
    /// to watch retries and compensations happen.
    #[command(flatten)]
    pub faults: participant_kit::faults::FaultConfig,
    /// MongoDB for all three services instead of embedded stores.
    #[command(flatten)]
    pub mongo: MongoConfig,
    /// One Prometheus endpoint for all three services (one process).
    #[command(flatten)]
    pub metrics: MetricsConfig,
    /// How the orchestrator drives sagas.
    #[command(flatten)]
    pub engine: EngineConfig,
    /// Retention of finished sagas (`--saga-retention`, `--archive-dir`,
    /// `--purge-interval`, also the participants' purge interval).
    #[command(flatten)]
    pub retention: RetentionConfig,
    /// How long the participants keep their operationHistory. Default: the
    /// saga retention, never less than 24 × the minimum computed from the
    /// orchestrator limits above; below the minimum, `dev` refuses to start.
    #[arg(long, env = "HISTORY_RETENTION", value_parser = service_kit::limits::parse_duration)]
    pub history_retention: Option<Duration>,
    /// One admin token for all three services (and the seeding calls).
    #[command(flatten)]
    pub admin: service_kit::auth::AdminConfig,
    /// The service token the participants require and the orchestrator
    /// sends.
    #[command(flatten)]
    pub service: service_kit::auth::ServiceConfig,
    /// One certificate for all three servers (it must name 127.0.0.1) and
    /// `--tls-ca` to verify it (required with TLS: dev calls its own
    /// participants).
    #[command(flatten)]
    pub tls: service_kit::tls::TlsConfig,
    /// Request limits of all three servers.
    #[command(flatten)]
    pub limits: service_kit::server::LimitsConfig,
}
