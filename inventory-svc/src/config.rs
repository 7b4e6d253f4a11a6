//! Configuration of the stand-alone `inventory-svc` binary. Every flag has an
//! environment fallback and a default that works with zero flags.

use service_kit::auth::AdminConfig;
use service_kit::embedded::Durability;
use service_kit::faults::FaultConfig;
use service_kit::metrics::{MetricsConfig, MetricsDefaults};
use service_kit::server::{LimitsConfig, OptionsError, ServeOptions};
use service_kit::telemetry::LogFormat;
use service_kit::tls::TlsConfig;
use std::fmt;
use std::net::SocketAddr;
use std::path::PathBuf;

/// Database name used when none is configured (also by the dev stack).
pub const DEFAULT_MONGODB_DATABASE: &str = "saga_inventory";

/// Default address of the Prometheus endpoint (`--metrics-listen`).
pub const DEFAULT_METRICS_LISTEN: &str = "127.0.0.1:9463";

/// inventory-svc's metrics flags: `--metrics-listen` (env
/// `INVENTORY_METRICS_LISTEN`, default [`DEFAULT_METRICS_LISTEN`]) and
/// `--no-metrics`.
#[derive(Debug, Clone, Copy)]
pub struct InventoryMetrics;

impl MetricsDefaults for InventoryMetrics {
    const LISTEN_ENV: &'static str = "INVENTORY_METRICS_LISTEN";
    const LISTEN: &'static str = DEFAULT_METRICS_LISTEN;
}

/// `Debug` redacts the MongoDB password and the admin token.
#[derive(Clone, clap::Parser)]
#[command(
    name = "inventory-svc",
    about = "Inventory participant of the order saga (deduct, restock)"
)]
pub struct Config {
    /// Address to serve gRPC on.
    #[arg(long, env = "INVENTORY_LISTEN", default_value = "127.0.0.1:50053")]
    pub listen: SocketAddr,
    /// Directory holding the embedded store (inventory.db).
    #[arg(long, env = "INVENTORY_DATA_DIR", default_value = "data")]
    pub data_dir: PathBuf,
    /// MongoDB connection string. When set, MongoDB is the store and no
    /// embedded file is written.
    #[arg(long, env = "MONGODB_URI", hide_env_values = true)]
    pub mongodb_uri: Option<String>,
    /// MongoDB database of this service.
    #[arg(long, env = "INVENTORY_MONGODB_DATABASE", default_value = DEFAULT_MONGODB_DATABASE)]
    pub mongodb_database: String,
    /// process: survives kill -9; power-loss: fsync on every (group) commit.
    #[arg(long, env = "DURABILITY", value_enum, default_value_t = Durability::Process)]
    pub durability: Durability,
    #[arg(long, env = "LOG_FORMAT", value_enum, default_value_t = LogFormat::Text)]
    pub log_format: LogFormat,
    /// Fault injection (`--fault-*` / `FAULT_*`); off by default.
    #[command(flatten)]
    pub faults: FaultConfig,
    /// Admin token (`--admin-token` / `ADMIN_TOKEN`); unset: admin RPCs open.
    #[command(flatten)]
    pub admin: AdminConfig,
    /// TLS (`--tls-cert`, `--tls-key`, `--tls-ca`, `--tls-client-auth`);
    /// unset: plaintext.
    #[command(flatten)]
    pub tls: TlsConfig,
    /// Request limits (`--max-request-bytes`).
    #[command(flatten)]
    pub limits: LimitsConfig,
    /// Prometheus metrics over HTTP (`--metrics-listen`, `--no-metrics`).
    #[command(flatten)]
    pub metrics: MetricsConfig<InventoryMetrics>,
}

impl fmt::Debug for Config {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Config")
            .field("listen", &self.listen)
            .field("data_dir", &self.data_dir)
            .field(
                "mongodb_uri",
                &self.mongodb_uri.as_deref().map(service_kit::mongo::redact),
            )
            .field("mongodb_database", &self.mongodb_database)
            .field("durability", &self.durability)
            .field("log_format", &self.log_format)
            .field("faults", &self.faults)
            .field("admin", &self.admin)
            .field("tls", &self.tls)
            .field("limits", &self.limits)
            .field("metrics", &self.metrics)
            .finish()
    }
}

impl Config {
    /// TLS, admin token and request limit of the server, every file read
    /// and checked now.
    pub fn serve_options(&self) -> Result<ServeOptions, OptionsError> {
        ServeOptions::from_flags(&self.admin, &self.tls, &self.limits)
    }

    /// Path of the embedded database file.
    pub fn database_path(&self) -> PathBuf {
        self.data_dir.join("inventory.db")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[test]
    fn defaults_are_plaintext_open_and_1_mib() {
        let config = Config::try_parse_from(["svc"]).unwrap();
        let options = config.serve_options().unwrap();
        assert!(!options.tls_enabled());
        assert!(!options.admin.is_required());
        assert_eq!(
            options.max_request_bytes,
            service_kit::server::DEFAULT_MAX_REQUEST_BYTES
        );
    }

    #[test]
    fn metrics_are_served_on_9463_unless_turned_off() {
        let config = Config::try_parse_from(["svc"]).unwrap();
        assert_eq!(
            config.metrics.metrics_listen,
            DEFAULT_METRICS_LISTEN.parse().unwrap()
        );
        assert!(!config.metrics.no_metrics);
        let config =
            Config::try_parse_from(["svc", "--metrics-listen", "0.0.0.0:19000", "--no-metrics"])
                .unwrap();
        assert_eq!(
            config.metrics.metrics_listen,
            "0.0.0.0:19000".parse().unwrap()
        );
        assert!(config.metrics.no_metrics);
    }

    #[test]
    fn debug_never_shows_secrets() {
        let config = Config::try_parse_from([
            "svc",
            "--mongodb-uri",
            "mongodb://app:hunter2@db:27017/",
            "--admin-token",
            "t0ps3cret",
            "--max-request-bytes",
            "4096",
        ])
        .unwrap();
        let shown = format!("{config:?}");
        assert!(!shown.contains("hunter2"), "{shown}");
        assert!(!shown.contains("t0ps3cret"), "{shown}");
        assert!(shown.contains("app:***@db"), "{shown}");
        let options = config.serve_options().unwrap();
        assert!(options.admin.is_required());
        assert_eq!(options.max_request_bytes, 4096);
        assert!(!format!("{options:?}").contains("t0ps3cret"));
        let e = Config::try_parse_from(["svc", "--max-request-bytes", "10"]).unwrap_err();
        assert!(e.to_string().contains("at least 1024"), "{e}");
    }
}
