//! A participant binary's flags, written once: [`ParticipantConfig`], with
//! the names and defaults that differ per participant given by a
//! [`ParticipantDefaults`] type (declared with [`participant_defaults!`](crate::participant_defaults)).

use crate::faults::FaultConfig;
use crate::retention::HistoryRetentionConfig;
use embedded_store::Durability;
use service_kit::auth::{AdminConfig, ServiceConfig};
use service_kit::metrics::{MetricsConfig, MetricsDefaults};
use service_kit::server::{LimitsConfig, OptionsError, ServeOptions};
use service_kit::telemetry::LogFormat;
use service_kit::tls::TlsConfig;
use std::fmt;
use std::marker::PhantomData;
use std::net::SocketAddr;
use std::path::PathBuf;

/// Names and defaults that differ between the participants.
pub trait ParticipantDefaults: MetricsDefaults {
    /// Binary name, e.g. `payment-svc`.
    const NAME: &'static str;
    /// One line for `--help`: what this participant does.
    const ABOUT: &'static str;
    /// Env of `--listen`, e.g. `PAYMENT_LISTEN`.
    const GRPC_LISTEN_ENV: &'static str;
    /// Default of `--listen`, e.g. `127.0.0.1:50052`.
    const GRPC_LISTEN: &'static str;
    /// Env of `--data-dir`, e.g. `PAYMENT_DATA_DIR`.
    const DATA_DIR_ENV: &'static str;
    /// File of the embedded store inside the data dir, e.g. `payment.db`.
    const DATABASE_FILE: &'static str;
    /// Env of `--mongodb-database`, e.g. `PAYMENT_MONGODB_DATABASE`.
    const MONGODB_DATABASE_ENV: &'static str;
    /// Default of `--mongodb-database`, e.g. `saga_payment`.
    const MONGODB_DATABASE: &'static str;
}

/// Declares a participant's names and defaults in one line each: the
/// binary name, the environment prefix (`PAYMENT` gives `PAYMENT_LISTEN`,
/// `PAYMENT_DATA_DIR`, `PAYMENT_MONGODB_DATABASE`, `PAYMENT_METRICS_LISTEN`),
/// the default gRPC and metrics addresses, the embedded file and the
/// MongoDB database.
#[macro_export]
macro_rules! participant_defaults {
    (
        $(#[$meta:meta])*
        $type:ident {
            name: $name:literal,
            about: $about:literal,
            env_prefix: $prefix:literal,
            listen: $listen:literal,
            metrics_listen: $metrics:literal,
            database_file: $file:literal,
            mongodb_database: $database:literal $(,)?
        }
    ) => {
        $(#[$meta])*
        #[derive(Debug, Clone, Copy)]
        pub struct $type;

        impl $crate::__private::MetricsDefaults for $type {
            const LISTEN_ENV: &'static str = concat!($prefix, "_METRICS_LISTEN");
            const LISTEN: &'static str = $metrics;
        }

        impl $crate::ParticipantDefaults for $type {
            const NAME: &'static str = $name;
            const ABOUT: &'static str = $about;
            const GRPC_LISTEN_ENV: &'static str = concat!($prefix, "_LISTEN");
            const GRPC_LISTEN: &'static str = $listen;
            const DATA_DIR_ENV: &'static str = concat!($prefix, "_DATA_DIR");
            const DATABASE_FILE: &'static str = $file;
            const MONGODB_DATABASE_ENV: &'static str = concat!($prefix, "_MONGODB_DATABASE");
            const MONGODB_DATABASE: &'static str = $database;
        }
    };
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
    /// Log lines as text or JSON.
    pub log_format: LogFormat,
    /// Fault injection (`--fault-*` / `FAULT_*`); off by default.
    #[command(flatten)]
    pub faults: FaultConfig,
    /// How long the operationHistory is kept (`--history-retention`,
    /// `--purge-interval`, the orchestrator limits it is checked against).
    #[command(flatten)]
    pub retention: HistoryRetentionConfig,
    /// Admin token (`--admin-token` / `ADMIN_TOKEN`); unset: admin RPCs open.
    #[command(flatten)]
    pub admin: AdminConfig,
    /// Service token (`--service-token` / `SERVICE_TOKEN`) the saga RPCs
    /// require; unset: open to every caller.
    #[command(flatten)]
    pub service: ServiceConfig,
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
            .field("retention", &self.retention)
            .field("admin", &self.admin)
            .field("service", &self.service)
            .field("tls", &self.tls)
            .field("limits", &self.limits)
            .field("metrics", &self.metrics)
            .finish()
    }
}

impl<D: ParticipantDefaults> ParticipantConfig<D> {
    /// TLS, admin and service tokens and request limit of the server,
    /// every file read and checked now.
    pub fn serve_options(&self) -> Result<ServeOptions, OptionsError> {
        let service = self.service.build()?;
        Ok(ServeOptions::from_flags(&self.admin, &self.tls, &self.limits)?.with_service(service))
    }

    /// Path of the embedded database file.
    pub fn database_path(&self) -> PathBuf {
        self.data_dir.join(D::DATABASE_FILE)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    crate::participant_defaults!(Test {
        name: "test-svc",
        about: "A test participant",
        env_prefix: "TEST_SVC",
        listen: "127.0.0.1:50052",
        metrics_listen: "127.0.0.1:9462",
        database_file: "test.db",
        mongodb_database: "saga_test",
    });

    #[test]
    fn names_are_derived_from_the_prefix() {
        assert_eq!(
            <Test as ParticipantDefaults>::GRPC_LISTEN_ENV,
            "TEST_SVC_LISTEN"
        );
        assert_eq!(
            <Test as ParticipantDefaults>::DATA_DIR_ENV,
            "TEST_SVC_DATA_DIR"
        );
        assert_eq!(
            <Test as ParticipantDefaults>::MONGODB_DATABASE_ENV,
            "TEST_SVC_MONGODB_DATABASE"
        );
        assert_eq!(
            <Test as MetricsDefaults>::LISTEN_ENV,
            "TEST_SVC_METRICS_LISTEN"
        );
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
            service_kit::server::DEFAULT_MAX_REQUEST_BYTES
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

    /// The default retention is the saga retention, a retention below the
    /// minimum is refused in one line naming both, and mirroring shorter
    /// orchestrator limits lowers the minimum.
    #[test]
    fn history_retention_defaults_and_refuses_below_the_minimum() {
        let config = parse(&[]).unwrap();
        let settings = config.retention.settings().unwrap();
        assert_eq!(settings.keep, service_kit::limits::DEFAULT_SAGA_RETENTION);
        let short = parse(&["--history-retention", "10m"]).unwrap();
        let why = short.retention.settings().unwrap_err();
        assert!(
            why.starts_with("--history-retention 10m is below the minimum 31m"),
            "{why}"
        );
        let fast = parse(&[
            "--history-retention",
            "10m",
            "--compensation-attempts",
            "5",
            "--call-timeout-ms",
            "1000",
        ])
        .unwrap();
        assert_eq!(
            fast.retention.settings().unwrap().keep,
            std::time::Duration::from_secs(600)
        );
    }

    /// The minimum grows with the steps of the saga: a retention that is
    /// safe for the two-step order saga is refused for a three-step one
    /// (465 s per step, twice), and the step count is bounded.
    #[test]
    fn more_saga_steps_raise_the_minimum_history_retention() {
        let two = parse(&["--history-retention", "40m"]).unwrap();
        assert_eq!(two.retention.limits().steps, 2);
        assert!(two.retention.settings().is_ok());
        let three = parse(&["--history-retention", "40m", "--saga-steps", "3"]).unwrap();
        assert_eq!(
            three.retention.limits().minimum_history_retention(),
            std::time::Duration::from_secs(3 * 2 * 465)
        );
        let why = three.retention.settings().unwrap_err();
        assert!(
            why.starts_with("--history-retention 40m is below the minimum 46m 30s"),
            "{why}"
        );
        assert!(why.contains("3 steps"), "{why}");
        for bad in ["0", "1001", "-1", "two"] {
            assert!(parse(&["--saga-steps", bad]).is_err(), "{bad}");
        }
    }

    /// The largest values every limit flag accepts compute the minimum and
    /// the default retention without overflowing.
    #[test]
    fn the_largest_accepted_limits_do_not_overflow() {
        let week = service_kit::limits::MAX_LIMIT_MS.to_string();
        let attempts = service_kit::limits::MAX_ATTEMPTS.to_string();
        let steps = service_kit::limits::MAX_SAGA_STEPS.to_string();
        let mut flags = vec![];
        for flag in [
            "--call-timeout-ms",
            "--step-deadline-ms",
            "--lease-ttl-ms",
            "--retry-max-delay-ms",
        ] {
            flags.extend([flag, week.as_str()]);
        }
        flags.extend(["--action-attempts", attempts.as_str()]);
        flags.extend(["--compensation-attempts", attempts.as_str()]);
        flags.extend(["--saga-steps", steps.as_str()]);
        let config = parse(&flags).unwrap();
        let keep = config.retention.settings().expect("the default is safe");
        assert!(keep.keep >= config.retention.limits().minimum_history_retention());
    }
}
