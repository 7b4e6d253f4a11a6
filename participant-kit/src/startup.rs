//! A participant binary's start-up, written once: parse the flags, check
//! TLS and tokens, build the fault injector, bind, start metrics, answer
//! health (liveness SERVING, readiness NOT_SERVING), open the store
//! (MongoDB, waiting for it, or the embedded file), then serve — ready —
//! until SIGTERM/SIGINT and drain; exit non-zero with one line on any
//! start-up error. The gRPC server answers before the store is open so a
//! probe can tell a participant waiting for MongoDB (alive, not ready) from
//! a dead one ([`service_kit::health`]).

use crate::config::{ParticipantConfig, ParticipantDefaults};
use crate::pipeline::Kit;
use embedded_store::Durability;
use service_kit::limits::CallLimits;
pub use service_kit::server::GrpcServer;
use service_kit::server::ServeError;
use service_kit::shutdown::Shutdown;
use std::future::Future;
use std::path::Path;
use std::sync::Arc;

/// Any start-up error; printed as one line.
pub type BoxError = Box<dyn std::error::Error>;

/// What differs between participant binaries: how the store is opened and
/// which gRPC service is served over it. [`main`] does the rest.
pub trait Participant: ParticipantDefaults {
    /// The participant's store trait object, e.g. `dyn PaymentStore`.
    type Store: ?Sized + Send + Sync + 'static;

    /// The full name of its own gRPC service (`payment.v1.PaymentService`):
    /// health and reflection answer for it before the store is open.
    const SERVICE: &'static str;

    /// Opens (creating if needed) the embedded store at `path`.
    fn open_embedded(path: &Path, durability: Durability) -> Result<Arc<Self::Store>, BoxError>;

    /// Opens the store in a MongoDB database (creating its indexes), its
    /// records expiring `history_retention` after they were recorded.
    fn open_mongo(
        db: mongodb::Database,
        history_retention: std::time::Duration,
    ) -> impl Future<Output = Result<Arc<Self::Store>, BoxError>>;

    /// Serves the participant's gRPC service over `store` on `server`
    /// (from [`Kit::server`], maybe already answering health) until its
    /// shutdown fires and the calls in flight have finished, with `kit`'s
    /// faults and options (usually through [`Kit::serve_on`]).
    fn serve(
        store: Arc<Self::Store>,
        kit: Kit,
        server: GrpcServer,
    ) -> impl Future<Output = Result<(), ServeError>>;
}

#[derive(clap::Parser)]
struct Cli<P: ParticipantDefaults> {
    #[command(flatten)]
    config: ParticipantConfig<P>,
}

/// The whole `main` of a participant binary: flags, logging, a tokio
/// runtime, [`run`], the exit code.
pub fn main<P: Participant>() -> std::process::ExitCode {
    use clap::{CommandFactory, FromArgMatches};
    let command = Cli::<P>::command().name(P::NAME).about(P::ABOUT);
    let cli = match Cli::<P>::from_arg_matches(&command.get_matches()) {
        Ok(cli) => cli,
        Err(error) => error.exit(),
    };
    let _telemetry = service_kit::telemetry::init(cli.config.log_format);
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(error) => {
            eprintln!("{}: cannot start the runtime: {error}", P::NAME);
            return std::process::ExitCode::FAILURE;
        }
    };
    match runtime.block_on(run::<P>(cli.config)) {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(error) => {
            tracing::error!(%error, "{} stopped", P::NAME);
            eprintln!("{}: {error}", P::NAME);
            std::process::ExitCode::FAILURE
        }
    }
}

/// Warns when the server keeps a dead participant's transaction locks
/// longer than the orchestrator (its limits mirrored by this participant's
/// flags) retries a step; says so when the server does not report it.
async fn check_transaction_lifetime(db: &mongodb::Database, limits: &CallLimits) {
    match mongo_client::transaction_lifetime(db).await {
        Some(lifetime) => match limits.check_transaction_lifetime(lifetime) {
            Ok(()) => tracing::info!(
                lifetime = service_kit::limits::format_duration(lifetime),
                "transaction lifetime shorter than a step's retries"
            ),
            Err(warning) => tracing::warn!("{warning}"),
        },
        None => tracing::info!(
            "the server does not report transactionLifetimeLimitSeconds: keep it below the orchestrator's retries of one step ({})",
            service_kit::limits::format_duration(limits.least_forward_span())
        ),
    }
}

/// Start-up and serving, until SIGTERM/SIGINT and the drain after it.
pub async fn run<P: Participant>(config: ParticipantConfig<P>) -> Result<(), BoxError> {
    // Checked before anything else: a bad TLS file or token stops start-up
    // at once, naming the flag.
    let options = config.serve_options()?;
    // A history retention below the minimum is refused before anything
    // is opened: one line saying why.
    let history = config.retention.settings()?;
    let shutdown = Shutdown::new();
    shutdown.on_signals();
    let faults = Arc::new(config.faults.build()?);
    let settings = faults.settings();
    if settings.is_enabled() {
        tracing::warn!(%settings, "fault injection ON: calls will fail, be delayed or lose replies on purpose");
    }
    let listener = service_kit::server::bind(config.listen).await?;
    tracing::info!(addr = %listener.local_addr()?, "{} answering health; ready once its store is open", P::NAME);
    // After the gRPC port is bound, so a busy gRPC port fails start-up
    // before an exporter is left serving. Logs the scrape URL.
    match config.metrics.start()? {
        Some(_) => {
            crate::metrics::describe();
            crate::retention::describe();
        }
        None => tracing::info!("metrics disabled (--no-metrics)"),
    }
    options.log_participant_startup(P::NAME);
    tracing::info!(
        history_retention = service_kit::limits::format_duration(history.keep),
        minimum = service_kit::limits::format_duration(
            config.retention.limits().minimum_history_retention()
        ),
        limits = %config.retention.limits(),
        "operationHistory retention"
    );
    let kit = Kit::new(faults, options).with_history(history);
    let mut server = kit.server(P::SERVICE, listener, &shutdown)?;
    server.start();
    let store = open_store::<P>(&config, history.keep, &shutdown).await?;
    P::serve(store, kit, server).await?;
    Ok(())
}

/// The participant's store: MongoDB when a URI is configured (waiting for
/// the server until it answers or `shutdown` fires, then making the
/// indexes), else the embedded file.
async fn open_store<P: Participant>(
    config: &ParticipantConfig<P>,
    keep: std::time::Duration,
    shutdown: &Shutdown,
) -> Result<Arc<P::Store>, BoxError> {
    match &config.mongodb_uri {
        Some(uri) => {
            let db = mongo_client::connect(uri, &config.mongodb_database, P::NAME, shutdown.wait())
                .await?;
            check_transaction_lifetime(&db, &config.retention.limits()).await;
            P::open_mongo(db, keep).await
        }
        None => P::open_embedded(&config.database_path(), config.durability),
    }
}

/// Declares a participant in one place: its names and defaults (see
/// [`participant_defaults!`](crate::participant_defaults)), its store trait
/// and the embedded and MongoDB types implementing it, and its gRPC service
/// (the generated server type and the adapter it wraps, whose constructor
/// is `new(store, kit)`). The store trait object must implement
/// [`StepStore`](crate::step::StepStore) (how the store serves the step
/// contract) and extend
/// [`OperationLog`](crate::OperationLog). Expands to the marker type, its
/// [`Participant`] impl, a `pub async fn serve(store, kit, listener,
/// shutdown)` that serves the service (with `SagaStepService` and
/// `OperationHistoryService` over the store, the `faults.v1` admin API, reflection and health, and the
/// store's purge) until `shutdown` fires and the calls in flight have
/// finished, and `pub async fn serve_on(store, kit, server)`, the same on a
/// server from [`Kit::server`] that may already answer health. The store trait must also extend
/// [`HistoryExpiry`](crate::HistoryExpiry), and the MongoDB type have
/// `open_with(db, history_retention)`.
#[macro_export]
macro_rules! participant {
    (
        $(#[$meta:meta])*
        $type:ident {
            name: $name:literal,
            about: $about:literal,
            env_prefix: $prefix:literal,
            listen: $listen:literal,
            metrics_listen: $metrics:literal,
            database_file: $file:literal,
            mongodb_database: $database:literal,
            store: $store:ty,
            embedded: $embedded:ty,
            mongo: $mongo:ty,
            server: $server:ident,
            api: $api:ty $(,)?
        }
    ) => {
        $crate::participant_defaults!(
            $(#[$meta])*
            $type {
                name: $name,
                about: $about,
                env_prefix: $prefix,
                listen: $listen,
                metrics_listen: $metrics,
                database_file: $file,
                mongodb_database: $database,
            }
        );

        impl $crate::startup::Participant for $type {
            type Store = $store;

            const SERVICE: &'static str =
                <$server<$api> as $crate::__private::NamedService>::NAME;

            fn open_embedded(
                path: &::std::path::Path,
                durability: $crate::__private::Durability,
            ) -> Result<::std::sync::Arc<Self::Store>, $crate::startup::BoxError> {
                Ok(::std::sync::Arc::new(<$embedded>::open(path, durability)?))
            }

            async fn open_mongo(
                db: $crate::__private::Database,
                history_retention: $crate::__private::Duration,
            ) -> Result<::std::sync::Arc<Self::Store>, $crate::startup::BoxError> {
                Ok(::std::sync::Arc::new(<$mongo>::open_with(db, history_retention).await?))
            }

            async fn serve(
                store: ::std::sync::Arc<Self::Store>,
                kit: $crate::Kit,
                server: $crate::startup::GrpcServer,
            ) -> Result<(), $crate::__private::ServeError> {
                serve_on(store, kit, server).await
            }
        }

        /// Serves this participant's gRPC service over `store` (with `kit`'s
        /// faults, TLS, tokens and limits, plus `OperationHistoryService`
        /// over the same store, the `faults.v1` admin API, reflection and
        /// health) on `listener` until `shutdown` fires and the calls in
        /// flight have finished.
        pub async fn serve(
            store: ::std::sync::Arc<$store>,
            kit: $crate::Kit,
            listener: $crate::__private::TcpListener,
            shutdown: $crate::__private::Shutdown,
        ) -> Result<(), $crate::__private::ServeError> {
            let name = <$type as $crate::startup::Participant>::SERVICE;
            let server = kit.server(name, listener, &shutdown)?;
            serve_on(store, kit, server).await
        }

        /// [`serve`] on `server` (from `Kit::server`, which may already
        /// answer health): ready from now until its shutdown.
        pub async fn serve_on(
            store: ::std::sync::Arc<$store>,
            kit: $crate::Kit,
            server: $crate::startup::GrpcServer,
        ) -> Result<(), $crate::__private::ServeError> {
            let api = $server::new(<$api>::new(store.clone(), kit.clone()))
                .max_decoding_message_size(kit.max_request_bytes());
            let steps: $crate::__private::Arc<dyn $crate::step::StepStore> =
                $crate::__private::Arc::new($crate::step::Shared(store));
            kit.serve_on($crate::__private::Routes::new(api), $name, steps, server)
                .await
        }
    };
}
