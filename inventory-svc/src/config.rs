//! Configuration of the stand-alone `inventory-svc` binary: the shared
//! participant flags (`service_kit::participant::ParticipantConfig`) with
//! this service's names and defaults.

use service_kit::metrics::MetricsDefaults;
use service_kit::participant::{ParticipantConfig, ParticipantDefaults};

/// Database name used when none is configured (also by the dev stack).
pub const DEFAULT_MONGODB_DATABASE: &str = "saga_inventory";

/// Default address of the Prometheus endpoint (`--metrics-listen`).
pub const DEFAULT_METRICS_LISTEN: &str = "127.0.0.1:9463";

/// inventory-svc's names and defaults: `INVENTORY_LISTEN` (127.0.0.1:50053),
/// `INVENTORY_DATA_DIR` (`data/inventory.db`), `INVENTORY_MONGODB_DATABASE`,
/// `INVENTORY_METRICS_LISTEN`.
#[derive(Debug, Clone, Copy)]
pub struct InventoryDefaults;

impl MetricsDefaults for InventoryDefaults {
    const LISTEN_ENV: &'static str = "INVENTORY_METRICS_LISTEN";
    const LISTEN: &'static str = DEFAULT_METRICS_LISTEN;
}

impl ParticipantDefaults for InventoryDefaults {
    const NAME: &'static str = "inventory-svc";
    const GRPC_LISTEN_ENV: &'static str = "INVENTORY_LISTEN";
    const GRPC_LISTEN: &'static str = "127.0.0.1:50053";
    const DATA_DIR_ENV: &'static str = "INVENTORY_DATA_DIR";
    const DATABASE_FILE: &'static str = "inventory.db";
    const MONGODB_DATABASE_ENV: &'static str = "INVENTORY_MONGODB_DATABASE";
    const MONGODB_DATABASE: &'static str = DEFAULT_MONGODB_DATABASE;
}

/// The inventory-svc flags.
pub type Config = ParticipantConfig<InventoryDefaults>;

/// The command line of the binary.
#[derive(Debug, clap::Parser)]
#[command(
    name = "inventory-svc",
    about = "Inventory participant of the order saga (deduct, restock)"
)]
pub struct Cli {
    #[command(flatten)]
    pub config: Config,
}
