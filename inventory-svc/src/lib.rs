//! inventory-svc — the inventory participant of the order saga.
//!
//! It holds available units per product (int64) and offers Deduct — every
//! line of an order, all or nothing — and its compensation Restock. Each
//! deducted line is recorded under the stable key `(request_id,
//! line_index)`, which is what Restock puts back. Everything a participant
//! shares — the operationHistory barrier, fault injection, the call
//! pipeline, flags and start-up — comes from `participant-kit`; this crate
//! is only:
//!
//! - [`store`]: the [`store::InventoryStore`] trait (domain types only), the
//!   inventory rules written once over a store transaction
//!   ([`store::stock`]), and their embedded SQLite and MongoDB backends;
//! - [`grpc`]: the `inventory.v1` mapping to and from the store's types.

#![warn(missing_docs)]

pub mod grpc;
pub mod store;

use embedded_store::Durability;
use participant_kit::Kit;
use participant_kit::startup::{BoxError, Participant};
use saga_proto::inventory::v1::inventory_service_server::InventoryServiceServer;
use service_kit::server::ServeError;
use service_kit::shutdown::Shutdown;
use std::path::Path;
use std::sync::Arc;
use store::{InventoryStore, MongoInventoryStore, SqliteInventoryStore};
use tokio::net::TcpListener;
use tonic::server::NamedService;

participant_kit::participant_defaults!(
    /// inventory-svc's names and defaults: `INVENTORY_LISTEN`
    /// (127.0.0.1:50053), `INVENTORY_DATA_DIR` (`data/inventory.db`),
    /// `INVENTORY_MONGODB_DATABASE` (`saga_inventory`),
    /// `INVENTORY_METRICS_LISTEN` (127.0.0.1:9463).
    Inventory {
        name: "inventory-svc",
        about: "Inventory participant of the order saga (deduct, restock)",
        env_prefix: "INVENTORY",
        listen: "127.0.0.1:50053",
        metrics_listen: "127.0.0.1:9463",
        database_file: "inventory.db",
        mongodb_database: "saga_inventory",
    }
);

impl Participant for Inventory {
    type Store = dyn InventoryStore;

    fn open_embedded(path: &Path, durability: Durability) -> Result<Arc<Self::Store>, BoxError> {
        Ok(Arc::new(SqliteInventoryStore::open(path, durability)?))
    }

    async fn open_mongo(db: mongodb::Database) -> Result<Arc<Self::Store>, BoxError> {
        Ok(Arc::new(MongoInventoryStore::open(db).await?))
    }

    async fn serve(
        store: Arc<Self::Store>,
        kit: Kit,
        listener: TcpListener,
        shutdown: Shutdown,
    ) -> Result<(), ServeError> {
        serve(store, kit, listener, shutdown).await
    }
}

/// Serves `inventory.v1.InventoryService` over `store` (with `kit`'s
/// faults, TLS, tokens and limits, plus the `faults.v1` admin API,
/// reflection and health) on `listener` until `shutdown` fires.
pub async fn serve(
    store: Arc<dyn InventoryStore>,
    kit: Kit,
    listener: TcpListener,
    shutdown: Shutdown,
) -> Result<(), ServeError> {
    let api = InventoryServiceServer::new(grpc::InventoryApi::new(store, kit.clone()))
        .max_decoding_message_size(kit.max_request_bytes());
    let name = <InventoryServiceServer<grpc::InventoryApi> as NamedService>::NAME;
    kit.serve(tonic::service::Routes::new(api), name, listener, shutdown)
        .await
}
