//! What a participant binary is, written once for payment-svc and
//! inventory-svc: its flags ([`ParticipantConfig`], with per-service names
//! and defaults from [`ParticipantDefaults`]) and its start-up sequence
//! ([`run`]): check TLS and token, connect the store (MongoDB, waiting for it,
//! or the embedded file), build the fault injector, bind, start metrics,
//! serve until SIGTERM/SIGINT.

use crate::auth::AdminConfig;
use crate::faults::{FaultConfig, Faults};
use crate::metrics::{MetricsConfig, MetricsDefaults};
use crate::server::{LimitsConfig, OptionsError, ServeOptions};
use crate::shutdown::Shutdown;
use crate::telemetry::LogFormat;
use crate::tls::TlsConfig;
use embedded_store::Durability;
use std::fmt;
use std::future::Future;
use std::marker::PhantomData;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use tokio::net::TcpListener;

/// Names and defaults that differ between the participants.
pub trait ParticipantDefaults: MetricsDefaults {
    /// Binary name, e.g. `payment-svc`.
    const NAME: &'static str;
    /// Env of `--listen`, e.g. `PAYMENT_LISTEN`, and its default.
    const GRPC_LISTEN_ENV: &'static str;
    const GRPC_LISTEN: &'static str;
    /// Env of `--data-dir`, e.g. `PAYMENT_DATA_DIR`.
    const DATA_DIR_ENV: &'static str;
    /// File of the embedded store inside the data dir, e.g. `payment.db`.
    const DATABASE_FILE: &'static str;
    /// Env of `--mongodb-database` and its default.
    const MONGODB_DATABASE_ENV: &'static str;
    const MONGODB_DATABASE: &'static str;
}

/// A participant's flags; every one has an environment fallback and a
/// default that works with zero flags. `Debug` redacts the MongoDB password
/// and the admin token.
#[derive(Clone, clap::Args)]
pub struct ParticipantConfig<D: ParticipantDefaults> {
    /// Address to serve gRPC on.
    #[arg(long, env = D::GRPC_LISTEN_ENV, default_value = D::GRPC_LISTEN)]
    pub listen: SocketAddr,
    /// Directory holding the embedded store.
    #[arg(long, env = D::DATA_DIR_ENV, default_value = "data")]
    pub data_dir: PathBuf,
    /// MongoDB connection string. When set, MongoDB is the store and no
    /// embedded file is written.
    #[arg(long, env = "MONGODB_URI", hide_env_values = true)]
    pub mongodb_uri: Option<String>,
    /// MongoDB database of this service.
    #[arg(long, env = D::MONGODB_DATABASE_ENV, default_value = D::MONGODB_DATABASE)]
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
    pub metrics: MetricsConfig<D>,
    #[arg(skip)]
    defaults: PhantomData<D>,
}

impl<D: ParticipantDefaults> fmt::Debug for ParticipantConfig<D> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct(D::NAME)
            .field("listen", &self.listen)
            .field("data_dir", &self.data_dir)
            .field(
                "mongodb_uri",
                &self.mongodb_uri.as_deref().map(mongo_client::redact),
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

impl<D: ParticipantDefaults> ParticipantConfig<D> {
    /// TLS, admin token and request limit of the server, every file read
    /// and checked now.
    pub fn serve_options(&self) -> Result<ServeOptions, OptionsError> {
        ServeOptions::from_flags(&self.admin, &self.tls, &self.limits)
    }

    /// Path of the embedded database file.
    pub fn database_path(&self) -> PathBuf {
        self.data_dir.join(D::DATABASE_FILE)
    }
}

type BoxError = Box<dyn std::error::Error>;

/// How a participant opens its store and serves it; [`run`] does the rest.
pub trait Participant {
    /// The participant's store trait object, e.g. `dyn PaymentStore`.
    type Store: ?Sized + Send + Sync + 'static;

    fn open_embedded(path: &Path, durability: Durability) -> Result<Arc<Self::Store>, BoxError>;

    fn open_mongo(
        db: mongodb::Database,
    ) -> impl Future<Output = Result<Arc<Self::Store>, BoxError>>;

    fn serve(
        store: Arc<Self::Store>,
        faults: Arc<Faults>,
        options: ServeOptions,
        listener: TcpListener,
        shutdown: Shutdown,
    ) -> impl Future<Output = Result<(), crate::server::ServeError>>;

    /// Called once the metrics exporter runs (to describe metrics).
    fn metrics_started() {}
}

/// The participant binary's start-up and serving, until SIGTERM/SIGINT.
pub async fn run<D: ParticipantDefaults, P: Participant>(
    config: ParticipantConfig<D>,
) -> Result<(), BoxError> {
    // Checked before anything else: a bad TLS file or token stops start-up
    // at once, naming the flag.
    let options = config.serve_options()?;
    let shutdown = Shutdown::new();
    shutdown.on_signals();
    let store = match &config.mongodb_uri {
        Some(uri) => {
            let db = mongo_client::connect(uri, &config.mongodb_database, D::NAME, shutdown.wait())
                .await?;
            P::open_mongo(db).await?
        }
        None => {
            tracing::info!(db = %config.database_path().display(), "embedded store");
            P::open_embedded(&config.database_path(), config.durability)?
        }
    };
    let faults = Arc::new(config.faults.build()?);
    let settings = faults.settings();
    if settings.is_enabled() {
        tracing::warn!(%settings, "fault injection ON: calls will fail, be delayed or lose replies on purpose");
    }
    let listener = crate::server::bind(config.listen).await?;
    tracing::info!(addr = %listener.local_addr()?, "{} serving", D::NAME);
    // After the gRPC port is bound, so a busy gRPC port fails start-up
    // before an exporter is left serving. Logs the scrape URL.
    match config.metrics.start()? {
        Some(_) => P::metrics_started(),
        None => tracing::info!("metrics disabled (--no-metrics)"),
    }
    options.log_startup(D::NAME);
    P::serve(store, faults, options, listener, shutdown).await?;
    Ok(())
}

/// `main` of a participant binary once its flags are parsed: logging, run,
/// exit code.
pub async fn main<D: ParticipantDefaults, P: Participant>(
    config: ParticipantConfig<D>,
) -> std::process::ExitCode {
    crate::telemetry::init(config.log_format);
    match run::<D, P>(config).await {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(error) => {
            tracing::error!(%error, "{} stopped", D::NAME);
            std::process::ExitCode::FAILURE
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Debug, Clone)]
    struct Test;

    impl MetricsDefaults for Test {
        const LISTEN_ENV: &'static str = "TEST_SVC_METRICS_LISTEN";
        const LISTEN: &'static str = "127.0.0.1:9462";
    }

    impl ParticipantDefaults for Test {
        const NAME: &'static str = "test-svc";
        const GRPC_LISTEN_ENV: &'static str = "TEST_SVC_LISTEN";
        const GRPC_LISTEN: &'static str = "127.0.0.1:50052";
        const DATA_DIR_ENV: &'static str = "TEST_SVC_DATA_DIR";
        const DATABASE_FILE: &'static str = "test.db";
        const MONGODB_DATABASE_ENV: &'static str = "TEST_SVC_MONGODB_DATABASE";
        const MONGODB_DATABASE: &'static str = "saga_test";
    }

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        config: ParticipantConfig<Test>,
    }

    fn parse(args: &[&str]) -> Result<ParticipantConfig<Test>, clap::Error> {
        Cli::try_parse_from(std::iter::once("svc").chain(args.iter().copied())).map(|c| c.config)
    }

    #[test]
    fn defaults_are_plaintext_open_1_mib_and_metrics_on() {
        let config = parse(&[]).unwrap();
        assert_eq!(config.listen, "127.0.0.1:50052".parse().unwrap());
        assert_eq!(config.database_path(), PathBuf::from("data/test.db"));
        assert_eq!(config.mongodb_database, "saga_test");
        let options = config.serve_options().unwrap();
        assert!(!options.tls_enabled());
        assert!(!options.admin.is_required());
        assert_eq!(
            options.max_request_bytes,
            crate::server::DEFAULT_MAX_REQUEST_BYTES
        );
        assert_eq!(
            config.metrics.metrics_listen,
            "127.0.0.1:9462".parse().unwrap()
        );
        assert!(!config.metrics.no_metrics);
        let off = parse(&["--metrics-listen", "0.0.0.0:19000", "--no-metrics"]).unwrap();
        assert!(off.metrics.no_metrics);
    }

    #[test]
    fn debug_never_shows_secrets() {
        let config = parse(&[
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
        let e = parse(&["--max-request-bytes", "10"]).unwrap_err();
        assert!(e.to_string().contains("at least 1024"), "{e}");
    }
}
