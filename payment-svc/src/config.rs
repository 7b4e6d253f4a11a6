//! Configuration of the stand-alone `payment-svc` binary. Every flag has an
//! environment fallback and a default that works with zero flags.

use service_kit::embedded::Durability;
use service_kit::faults::FaultConfig;
use service_kit::telemetry::LogFormat;
use std::net::SocketAddr;
use std::path::PathBuf;

/// Database name used when none is configured (also by the dev stack).
pub const DEFAULT_MONGODB_DATABASE: &str = "saga_payment";

#[derive(Debug, Clone, clap::Parser)]
#[command(
    name = "payment-svc",
    about = "Payment participant of the order saga (charge, refund)"
)]
pub struct Config {
    /// Address to serve gRPC on.
    #[arg(long, env = "PAYMENT_LISTEN", default_value = "127.0.0.1:50052")]
    pub listen: SocketAddr,
    /// Directory holding the embedded store (payment.db).
    #[arg(long, env = "PAYMENT_DATA_DIR", default_value = "data")]
    pub data_dir: PathBuf,
    /// MongoDB connection string. When set, MongoDB is the store and no
    /// embedded file is written.
    #[arg(long, env = "MONGODB_URI", hide_env_values = true)]
    pub mongodb_uri: Option<String>,
    /// MongoDB database of this service.
    #[arg(long, env = "PAYMENT_MONGODB_DATABASE", default_value = DEFAULT_MONGODB_DATABASE)]
    pub mongodb_database: String,
    /// process: survives kill -9; power-loss: fsync on every (group) commit.
    #[arg(long, env = "DURABILITY", value_enum, default_value_t = Durability::Process)]
    pub durability: Durability,
    #[arg(long, env = "LOG_FORMAT", value_enum, default_value_t = LogFormat::Text)]
    pub log_format: LogFormat,
    /// Fault injection (`--fault-*` / `FAULT_*`); off by default.
    #[command(flatten)]
    pub faults: FaultConfig,
}

impl Config {
    /// Path of the embedded database file.
    pub fn database_path(&self) -> PathBuf {
        self.data_dir.join("payment.db")
    }
}
