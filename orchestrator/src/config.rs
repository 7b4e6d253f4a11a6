//! Command line of the `orchestrator` binary: `serve` (also the default).
//! Every flag has an environment fallback and a default that makes the
//! zero-flag command work. [`EngineConfig`], [`MongoConfig`] and
//! [`MetricsConfig`] are also what the dev stack (`dev-stack`) flattens into
//! its own flags.

use embedded_store::Durability;
use service_kit::limits::{self, CallLimits};
use service_kit::telemetry::LogFormat;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

#[derive(Debug, clap::Parser)]
#[command(
    name = "orchestrator",
    about = "Saga orchestrator for orders: payment (charge/refund) then inventory (deduct/restock)",
    args_conflicts_with_subcommands = true
)]
/// The `orchestrator` command line.
pub struct Cli {
    #[command(subcommand)]
    /// `serve` (optional: it is the default).
    pub command: Option<Command>,
    #[command(flatten)]
    /// The flags of the default `serve`.
    pub serve: ServeConfig,
}

/// The subcommands.
#[derive(Debug, clap::Subcommand)]
pub enum Command {
    /// Run the orchestrator (the default).
    Serve(ServeConfig),
}

/// Defaults of the orchestrator's `--metrics-listen` (dev: the endpoint of
/// all three services, as they share one process).
#[derive(Debug, Clone)]
pub struct OrchestratorMetrics;

impl service_kit::metrics::MetricsDefaults for OrchestratorMetrics {
    const LISTEN_ENV: &'static str = "ORCHESTRATOR_METRICS_LISTEN";
    const LISTEN: &'static str = "127.0.0.1:9461";
}

/// The orchestrator's metrics flags.
pub type MetricsConfig = service_kit::metrics::MetricsConfig<OrchestratorMetrics>;

/// Where state is kept; shared by `serve` and `dev`.
#[derive(Debug, Clone, clap::Args)]
pub struct MongoConfig {
    /// MongoDB connection string. When set, MongoDB is the store (dev: for
    /// all three services) and no embedded file is written.
    #[arg(long, env = "MONGODB_URI", hide_env_values = true)]
    pub mongodb_uri: Option<String>,
    /// MongoDB database of the orchestrator.
    #[arg(
        long,
        env = "ORCHESTRATOR_MONGODB_DATABASE",
        default_value = "saga_orchestrator"
    )]
    pub mongodb_database: String,
}

/// How sagas are driven; shared by `serve` and `dev`.
#[derive(Debug, Clone, clap::Args)]
pub struct EngineConfig {
    /// Deadline of one participant call, in milliseconds.
    #[arg(long, env = "CALL_TIMEOUT_MS", default_value_t = limits::DEFAULT_CALL_TIMEOUT_MS, value_parser = limits::limit_ms_parser())]
    pub call_timeout_ms: u64,
    /// Attempts of a forward step before its outcome counts as unknown and
    /// the saga compensates.
    #[arg(long, env = "ACTION_ATTEMPTS", default_value_t = limits::DEFAULT_ACTION_ATTEMPTS, value_parser = limits::attempts_parser())]
    pub action_attempts: u32,
    /// Attempts of a compensation before the saga is marked FAILED.
    #[arg(long, env = "COMPENSATION_ATTEMPTS", default_value_t = limits::DEFAULT_COMPENSATION_ATTEMPTS, value_parser = limits::attempts_parser())]
    pub compensation_attempts: u32,
    /// A forward step still failing transiently this long after it started
    /// is given up and compensated, in milliseconds.
    #[arg(long, env = "STEP_DEADLINE_MS", default_value_t = limits::DEFAULT_STEP_DEADLINE_MS, value_parser = limits::limit_ms_parser())]
    pub step_deadline_ms: u64,
    /// Name of this orchestrator instance in saga leases. Default:
    /// `<hostname>:<gRPC port>`, stable across restarts, so a restarted
    /// instance resumes its own sagas at once.
    #[arg(long, env = "ORCHESTRATOR_INSTANCE_ID")]
    pub instance_id: Option<String>,
    /// Longest delay between two attempts of a step, before jitter, in
    /// milliseconds (jitter can add as much again).
    #[arg(long, env = "RETRY_MAX_DELAY_MS", default_value_t = limits::DEFAULT_RETRY_MAX_DELAY_MS, value_parser = limits::limit_ms_parser())]
    pub retry_max_delay_ms: u64,
    /// How long a saga lease lasts without renewal, in milliseconds; another
    /// instance takes the saga over after that. Must exceed the longest gap
    /// between two saves of a driven saga: the connect timeout (2 s) plus
    /// the call timeout plus twice the largest retry delay (full jitter).
    #[arg(long, env = "LEASE_TTL_MS", default_value_t = limits::DEFAULT_LEASE_TTL_MS, value_parser = limits::limit_ms_parser())]
    pub lease_ttl_ms: u64,
    /// How often the recovery sweep looks for sagas to resume, in
    /// milliseconds.
    #[arg(long, env = "SWEEP_INTERVAL_MS", default_value_t = 1_000, value_parser = limits::limit_ms_parser())]
    pub sweep_interval_ms: u64,
    /// Cap on sagas driven at once by this instance; beyond it CreateOrder
    /// answers RESOURCE_EXHAUSTED instead of queueing without bound.
    #[arg(long, env = "MAX_IN_FLIGHT", default_value_t = 10_000)]
    pub max_in_flight: usize,
    /// After SIGTERM/SIGINT, how long in-flight steps get to finish and
    /// persist before the process exits, in milliseconds.
    #[arg(long, env = "SHUTDOWN_GRACE_MS", default_value_t = 10_000, value_parser = limits::limit_ms_parser())]
    pub shutdown_grace_ms: u64,
    /// Save the saga after every step, also between a first-attempt
    /// success and the next action (by default those saves are left out
    /// while the lease is young: a run of first-attempt successes is saved
    /// at its end, and a claim marks every step after the stored one as
    /// possibly sent). Set it while instances of an earlier build still run
    /// beside this one, or may be rolled back to: they mark at most the one
    /// step after the stored one, and would not compensate the others.
    #[arg(long, env = "SAVE_EVERY_STEP", default_value_t = false)]
    pub save_every_step: bool,
    /// Longest CreateOrder with `wait` is held when the client sets no
    /// deadline, in milliseconds.
    #[arg(long, env = "MAX_WAIT_MS", default_value_t = 30_000, value_parser = limits::limit_ms_parser())]
    pub max_wait_ms: u64,
    /// process: survives kill -9; power-loss: fsync on every (group) commit.
    #[arg(long, env = "DURABILITY", value_enum, default_value_t = Durability::Process)]
    pub durability: Durability,
    #[arg(long, env = "LOG_FORMAT", value_enum, default_value_t = LogFormat::Text)]
    /// Log lines as text or JSON.
    pub log_format: LogFormat,
}

impl EngineConfig {
    /// Deadline of one participant call.
    pub fn call_timeout(&self) -> Duration {
        Duration::from_millis(self.call_timeout_ms)
    }

    /// How participant calls are made: this deadline, carrying `service`'s
    /// token.
    pub fn caller(
        &self,
        service: service_kit::auth::TokenAuth,
    ) -> crate::participant::call::Caller {
        crate::participant::call::Caller::new(self.call_timeout()).with_service_token(service)
    }

    /// Longest a CreateOrder with `wait` is held.
    pub fn max_wait(&self) -> Duration {
        Duration::from_millis(self.max_wait_ms)
    }

    /// The attempt budgets and deadline as the executor uses them.
    pub fn retry_policy(&self) -> crate::executor::RetryPolicy {
        crate::executor::RetryPolicy {
            action_attempts: self.action_attempts.max(1),
            compensation_attempts: self.compensation_attempts.max(1),
            step_deadline: Duration::from_millis(self.step_deadline_ms),
            max_delay: Duration::from_millis(self.retry_max_delay_ms.max(1)),
            ..Default::default()
        }
    }

    /// The longest a healthy owner can go between two saves of a saga it
    /// drives, leaving out the store's own latency: a backoff sleep (up to
    /// twice the largest retry delay, with backon's jitter), then a call
    /// that first waits for its connection and then runs to its deadline.
    /// A lease must outlast it, or it can expire under a live owner.
    pub fn longest_gap_between_saves(&self) -> Duration {
        self.retry_policy().longest_sleep()
            + crate::PARTICIPANT_CONNECT_TIMEOUT
            + self.call_timeout()
    }

    /// The limits that bound how long calls for one request id keep
    /// reaching a participant, for a saga of `steps` steps: what the
    /// participants' minimum history retention is computed from.
    pub fn call_limits(&self, steps: usize) -> CallLimits {
        let retry = self.retry_policy();
        CallLimits {
            call_timeout: self.call_timeout(),
            action_attempts: retry.action_attempts,
            compensation_attempts: retry.compensation_attempts,
            step_deadline: retry.step_deadline,
            lease_ttl: Duration::from_millis(self.lease_ttl_ms),
            retry_max_delay: retry.max_delay,
            steps: u32::try_from(steps).unwrap_or(u32::MAX),
        }
    }

    /// Everything the running orchestrator needs, for an instance serving
    /// on `listen`.
    pub fn settings(&self, listen: SocketAddr) -> Result<crate::Settings, String> {
        let retry = self.retry_policy();
        let ttl = Duration::from_millis(self.lease_ttl_ms);
        let longest_gap = self.longest_gap_between_saves();
        if ttl <= longest_gap {
            return Err(format!(
                "--lease-ttl-ms ({} ms) must exceed the longest gap between two saves of a saga ({} ms: \
                 connect timeout {} ms + --call-timeout-ms {} ms + 2 × --retry-max-delay-ms {} ms, \
                 a backoff sleep reaching twice the delay with jitter); a shorter lease can expire \
                 under a live owner and another instance would take its sagas over",
                self.lease_ttl_ms,
                longest_gap.as_millis(),
                crate::PARTICIPANT_CONNECT_TIMEOUT.as_millis(),
                self.call_timeout_ms,
                retry.max_delay.as_millis()
            ));
        }
        let owner = self
            .instance_id
            .clone()
            .unwrap_or_else(|| format!("{}:{}", hostname(), listen.port()));
        Ok(crate::Settings {
            retry,
            lease: crate::executor::LeasePolicy {
                owner,
                ttl,
                sweep_interval: Duration::from_millis(self.sweep_interval_ms.max(10)),
            },
            max_wait: self.max_wait(),
            max_in_flight: self.max_in_flight.max(1),
            shutdown_grace: Duration::from_millis(self.shutdown_grace_ms),
            save_every_step: self.save_every_step,
            retention: crate::retention::RetentionSettings::default(),
            console: crate::console::ConsoleSettings::default(),
            clock: service_kit::clock::system(),
        })
    }
}

/// How long finished sagas are kept, and where they are archived; shared
/// by `serve` and `dev`.
#[derive(Debug, Clone, clap::Args)]
pub struct RetentionConfig {
    /// COMPLETED and CANCELLED sagas are deleted this long after they
    /// finished (`7d`, `12h`, `90s`; `off` keeps them). FAILED and
    /// unfinished sagas are never deleted. This is also CreateOrder's
    /// idempotency window: a request id reused after its saga was deleted
    /// starts a new saga.
    #[arg(long, env = "SAGA_RETENTION", default_value = "7d", value_parser = limits::parse_retention)]
    // Spelled out so clap takes the parser's `Option` (off) as the value
    // rather than making the flag optional.
    pub saga_retention: std::option::Option<Duration>,
    /// Before deleting an expired saga, append it as one JSON line to
    /// `<dir>/sagas-YYYY-MM-DD.jsonl` (synced first). Unset: no archive.
    #[arg(long, env = "ORCHESTRATOR_ARCHIVE_DIR")]
    pub archive_dir: Option<PathBuf>,
    /// How often the embedded store is purged of expired sagas (and the
    /// store gauges are refreshed).
    #[arg(long, env = "PURGE_INTERVAL", default_value = "10s", value_parser = limits::parse_duration)]
    pub purge_interval: Duration,
}

impl RetentionConfig {
    /// The settings these flags say.
    pub fn settings(&self) -> crate::retention::RetentionSettings {
        crate::retention::RetentionSettings {
            saga_retention: self.saga_retention,
            archive_dir: self.archive_dir.clone(),
            purge_interval: self.purge_interval.max(Duration::from_millis(10)),
            // The default limits' window; `serve` and `dev` set the one their
            // limits and the participants' history retention give.
            ..Default::default()
        }
    }
}

/// The saga console's listener; shared by `serve` and `dev`.
#[derive(Debug, Clone, clap::Args)]
pub struct ConsoleConfig {
    /// Address to serve the saga console (web pages and JSON API) on. Bound
    /// to localhost by default: put a TLS proxy in front to expose it.
    #[arg(
        long,
        env = "ORCHESTRATOR_CONSOLE_LISTEN",
        default_value = "127.0.0.1:8080"
    )]
    pub console_listen: SocketAddr,
    /// Serve no console.
    #[arg(long, env = "NO_CONSOLE")]
    pub no_console: bool,
    /// A host name the console answers to besides IP addresses and
    /// localhost, e.g. the public name of a proxy in front of it; pages
    /// there may also retry. Repeat the flag, or separate names with commas
    /// in the environment. Any other name is refused (403), so that a web
    /// page elsewhere cannot point its own name at the console.
    #[arg(
        long = "console-allowed-host",
        env = "CONSOLE_ALLOWED_HOSTS",
        value_delimiter = ','
    )]
    pub console_allowed_hosts: Vec<String>,
    /// Most sagas followed live at once (each an open event stream polling
    /// the store); one more is answered 429.
    #[arg(long, env = "CONSOLE_MAX_STREAMS", default_value_t = crate::console::DEFAULT_MAX_STREAMS, value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1..=100_000))]
    pub console_max_streams: usize,
}

impl ConsoleConfig {
    /// The console's settings beyond its listener.
    pub fn settings(&self) -> crate::console::ConsoleSettings {
        crate::console::ConsoleSettings {
            allowed_hosts: crate::console::hosts::AllowedHosts::new(&self.console_allowed_hosts),
            max_streams: self.console_max_streams,
        }
    }

    /// Where the console listens, `None` with `--no-console`.
    pub fn listen(&self) -> Option<SocketAddr> {
        (!self.no_console).then_some(self.console_listen)
    }
}

/// The saga's steps; shared by `serve` and `dev`.
#[derive(Debug, Clone, clap::Args)]
pub struct StepsConfig {
    /// A TOML file listing the saga's steps in order, each a
    /// `participant.v1.SagaStepService` at an address
    /// (docs/participant-protocol.md). Without it:
    /// orchestrator/default-steps.toml (payment, then inventory).
    #[arg(long, env = "SAGA_STEPS_FILE")]
    pub steps_file: Option<PathBuf>,
    /// Moves a listed step to another address: NAME=URL, repeated or
    /// comma-separated (e.g. payment=http://payment-svc:50052).
    #[arg(
        long = "step-address",
        env = "SAGA_STEP_ADDRESSES",
        value_delimiter = ','
    )]
    pub step_addresses: Vec<String>,
}

impl StepsConfig {
    /// The configured steps, checked (one line naming the entry at fault).
    pub fn specs(
        &self,
    ) -> Result<Vec<crate::steps_file::StepSpec>, crate::steps_file::StepsFileError> {
        let (specs, file) = match &self.steps_file {
            Some(path) => (crate::steps_file::load(path)?, path.display().to_string()),
            None => (
                crate::steps_file::default_steps(),
                "orchestrator/default-steps.toml (the default)".to_owned(),
            ),
        };
        crate::steps_file::with_addresses(specs, &self.step_addresses)
            .map_err(|problem| crate::steps_file::StepsFileError { file, problem })
    }
}

#[derive(Debug, Clone, clap::Args)]
/// `orchestrator serve`: the orchestrator alone, calling remote participants.
pub struct ServeConfig {
    /// Address to serve gRPC on.
    #[arg(long, env = "ORCHESTRATOR_LISTEN", default_value = "127.0.0.1:50051")]
    pub listen: SocketAddr,
    /// Directory holding the embedded store (orchestrator.db).
    #[arg(long, env = "ORCHESTRATOR_DATA_DIR", default_value = "data")]
    pub data_dir: PathBuf,
    #[command(flatten)]
    /// The saga's steps (`--steps-file`, `--step-address`).
    pub steps: StepsConfig,
    #[command(flatten)]
    /// The saga console (`--console-listen`, `--no-console`).
    pub console: ConsoleConfig,
    #[command(flatten)]
    /// MongoDB instead of the embedded store.
    pub mongo: MongoConfig,
    #[command(flatten)]
    /// Retention of finished sagas (`--saga-retention`, `--archive-dir`,
    /// `--purge-interval`).
    pub retention: RetentionConfig,
    /// How long the participants keep their operationHistory — the value
    /// they run with (same flag and variable, so one environment configures
    /// all three). RetrySaga refuses a FAILED saga created longer ago than
    /// this less the time a retry's calls may take. Default: the
    /// participants' default for this instance's limits.
    #[arg(long, env = "HISTORY_RETENTION", value_parser = limits::parse_duration)]
    pub history_retention: Option<Duration>,
    #[command(flatten)]
    /// The Prometheus endpoint.
    pub metrics: MetricsConfig,
    #[command(flatten)]
    /// How sagas are driven.
    pub engine: EngineConfig,
    /// Admin token RetrySaga requires (`--admin-token` / `ADMIN_TOKEN`).
    #[command(flatten)]
    pub admin: service_kit::auth::AdminConfig,
    /// Client token the client API (CreateOrder, GetSaga, ListSagas,
    /// WatchSaga, RetrySaga) and the console require (`--client-token` /
    /// `CLIENT_TOKEN`); unset: open to every caller.
    #[command(flatten)]
    pub client: service_kit::auth::ClientConfig,
    /// Service token sent with every participant call (`--service-token` /
    /// `SERVICE_TOKEN`), which the participants' saga RPCs require.
    #[command(flatten)]
    pub service: service_kit::auth::ServiceConfig,
    /// TLS of this server (`--tls-cert`, `--tls-key`) and of its calls to
    /// the participants (`--tls-ca`; a client certificate from
    /// `--tls-cert`/`--tls-key` when they ask for one).
    #[command(flatten)]
    pub tls: service_kit::tls::TlsConfig,
    #[command(flatten)]
    /// Request limits.
    pub limits: service_kit::server::LimitsConfig,
}

fn hostname() -> String {
    std::env::var("HOSTNAME")
        .ok()
        .or_else(|| std::fs::read_to_string("/etc/hostname").ok())
        .map(|h| h.trim().to_owned())
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| "localhost".to_owned())
}

/// File name of the orchestrator's embedded store inside its data dir.
pub const DATABASE_FILE: &str = "orchestrator.db";

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    fn engine(flags: &[&str]) -> EngineConfig {
        let mut argv = vec!["orchestrator"];
        argv.extend_from_slice(flags);
        Cli::try_parse_from(argv).expect("flags parse").serve.engine
    }

    #[test]
    fn every_step_is_saved_only_when_asked() {
        let settings = |flags: &[&str]| engine(flags).settings(listen()).expect("settings");
        assert!(!settings(&[]).save_every_step);
        assert!(settings(&["--save-every-step"]).save_every_step);
    }

    fn listen() -> SocketAddr {
        "127.0.0.1:50051".parse().expect("addr")
    }

    #[test]
    fn the_longest_gap_counts_full_jitter_and_the_connect_timeout() {
        let e = engine(&["--call-timeout-ms", "500", "--retry-max-delay-ms", "300"]);
        // 2 000 connect + 500 call + 2 × 300 jittered sleep.
        assert_eq!(e.longest_gap_between_saves(), Duration::from_millis(3_100));
        // The defaults: 2 000 + 5 000 + 2 × 2 000.
        assert_eq!(
            engine(&[]).longest_gap_between_saves(),
            Duration::from_millis(11_000)
        );
        assert!(
            engine(&[]).settings(listen()).is_ok(),
            "the defaults must pass"
        );
    }

    #[test]
    fn a_lease_the_old_check_accepted_but_jitter_or_connecting_can_outlast_is_refused() {
        // The old check (call + max delay = 5 000 + 2 000) accepted 7 001 ms;
        // a jittered sleep of up to 4 000 ms plus a 2 000 ms connect wait
        // before a 5 000 ms call can leave 11 000 ms between two saves.
        for ttl in ["7001", "10999", "11000"] {
            let error = engine(&["--lease-ttl-ms", ttl])
                .settings(listen())
                .expect_err("a lease shorter than the worst gap must be refused");
            assert!(error.contains("--lease-ttl-ms"), "{error}");
            assert!(error.contains("11000 ms"), "{error}");
            assert!(error.contains("2 × --retry-max-delay-ms"), "{error}");
        }
        let settings = engine(&["--lease-ttl-ms", "11001"])
            .settings(listen())
            .expect("one millisecond more is enough");
        assert_eq!(settings.lease.ttl, Duration::from_millis(11_001));
    }

    #[test]
    fn the_retry_delay_flag_sets_the_backoff_cap_the_check_uses() {
        let e = engine(&[
            "--call-timeout-ms",
            "500",
            "--retry-max-delay-ms",
            "500",
            "--lease-ttl-ms",
            "3600",
        ]);
        let settings = e.settings(listen()).expect("3 600 > 2 000 + 500 + 1 000");
        assert_eq!(settings.retry.max_delay, Duration::from_millis(500));
        assert_eq!(settings.retry.longest_sleep(), Duration::from_millis(1_000));
        assert!(
            engine(&[
                "--call-timeout-ms",
                "500",
                "--retry-max-delay-ms",
                "500",
                "--lease-ttl-ms",
                "3500",
            ])
            .settings(listen())
            .is_err()
        );
    }

    /// A limit too large for the time arithmetic is refused by name at
    /// start-up; the largest accepted ones compute every derived span
    /// without overflowing (they would panic, or wrap in a release build).
    #[test]
    fn limit_flags_are_bounded_and_the_largest_accepted_ones_do_not_overflow() {
        let mut argv = vec!["orchestrator"];
        argv.extend_from_slice(&["--max-wait-ms", "18446744073709551615"]);
        let error = Cli::try_parse_from(argv).expect_err("beyond 7 days");
        assert!(error.to_string().contains("--max-wait-ms"), "{error}");
        assert!(
            Cli::try_parse_from(["orchestrator", "--compensation-attempts", "4294967295"]).is_err()
        );
        let week = limits::MAX_LIMIT_MS.to_string();
        let attempts = limits::MAX_ATTEMPTS.to_string();
        let mut flags = vec![];
        for flag in [
            "--call-timeout-ms",
            "--step-deadline-ms",
            "--retry-max-delay-ms",
            "--lease-ttl-ms",
            "--sweep-interval-ms",
            "--shutdown-grace-ms",
            "--max-wait-ms",
        ] {
            flags.extend([flag, week.as_str()]);
        }
        flags.extend(["--action-attempts", attempts.as_str()]);
        flags.extend(["--compensation-attempts", attempts.as_str()]);
        let e = engine(&flags);
        let limits = e.call_limits(2);
        let minimum = limits.minimum_history_retention();
        assert!(minimum > Duration::from_millis(limits::MAX_LIMIT_MS));
        assert!(limits.default_history_retention() >= minimum);
        assert!(e.longest_gap_between_saves() > e.max_wait());
        let _ = e.settings(listen());
        let _ = crate::retention::retry_window(&limits, minimum);
    }

    /// The participants compute their minimum history retention from the
    /// orchestrator's default limits for `--saga-steps`, which defaults to
    /// the order saga's step count: both must be what the orchestrator
    /// does with zero flags and its own definition, backoff included.
    #[tokio::test]
    async fn the_shared_call_limits_are_the_orchestrators_defaults() {
        let cli = Cli::try_parse_from(["orchestrator"]).unwrap();
        let caller = crate::participant::call::Caller::new(Duration::from_secs(1));
        let specs = cli.serve.steps.specs().expect("the default steps");
        let definition = crate::participant::definition_of(&specs, &caller, &Default::default())
            .expect("the order saga");
        assert_eq!(
            definition.steps().len(),
            limits::ORDER_SAGA_STEPS as usize,
            "ORDER_SAGA_STEPS must count the order saga's steps"
        );
        let defaults = CallLimits::orchestrator_defaults(limits::ORDER_SAGA_STEPS);
        assert_eq!(
            cli.serve.engine.call_limits(definition.steps().len()),
            defaults
        );
        assert_eq!(
            crate::executor::RetryPolicy::default().max_delay,
            defaults.retry_max_delay
        );
        let settings = cli.serve.retention.settings();
        assert_eq!(settings, crate::retention::RetentionSettings::default());
        let off = Cli::try_parse_from(["orchestrator", "--saga-retention", "off"]).unwrap();
        assert_eq!(off.serve.retention.saga_retention, None);
        assert!(Cli::try_parse_from(["orchestrator", "--saga-retention", "soon"]).is_err());
    }
}
