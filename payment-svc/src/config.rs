//! Configuration of the stand-alone `payment-svc` binary: the shared
//! participant flags (`service_kit::participant::ParticipantConfig`) with
//! this service's names and defaults.

use service_kit::metrics::MetricsDefaults;
use service_kit::participant::{ParticipantConfig, ParticipantDefaults};

/// Database name used when none is configured (also by the dev stack).
pub const DEFAULT_MONGODB_DATABASE: &str = "saga_payment";

/// Default address of the Prometheus endpoint (`--metrics-listen`).
pub const DEFAULT_METRICS_LISTEN: &str = "127.0.0.1:9462";

/// payment-svc's names and defaults: `PAYMENT_LISTEN` (127.0.0.1:50052),
/// `PAYMENT_DATA_DIR` (`data/payment.db`), `PAYMENT_MONGODB_DATABASE`,
/// `PAYMENT_METRICS_LISTEN`.
#[derive(Debug, Clone, Copy)]
pub struct PaymentDefaults;

impl MetricsDefaults for PaymentDefaults {
    const LISTEN_ENV: &'static str = "PAYMENT_METRICS_LISTEN";
    const LISTEN: &'static str = DEFAULT_METRICS_LISTEN;
}

impl ParticipantDefaults for PaymentDefaults {
    const NAME: &'static str = "payment-svc";
    const GRPC_LISTEN_ENV: &'static str = "PAYMENT_LISTEN";
    const GRPC_LISTEN: &'static str = "127.0.0.1:50052";
    const DATA_DIR_ENV: &'static str = "PAYMENT_DATA_DIR";
    const DATABASE_FILE: &'static str = "payment.db";
    const MONGODB_DATABASE_ENV: &'static str = "PAYMENT_MONGODB_DATABASE";
    const MONGODB_DATABASE: &'static str = DEFAULT_MONGODB_DATABASE;
}

/// The payment-svc flags.
pub type Config = ParticipantConfig<PaymentDefaults>;

/// The command line of the binary.
#[derive(Debug, clap::Parser)]
#[command(
    name = "payment-svc",
    about = "Payment participant of the order saga (charge, refund)"
)]
pub struct Cli {
    #[command(flatten)]
    pub config: Config,
}
