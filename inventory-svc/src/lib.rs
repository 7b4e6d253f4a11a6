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
//! - [`grpc`]: the `inventory.v1` mapping to and from the store's types;
//! - [`step`]: the same store as a saga step (`participant.v1.SagaStepService`,
//!   served by the kit): Act deducts the order's lines, Compensate restocks them.

#![warn(missing_docs)]

pub mod grpc;
pub mod step;
pub mod store;

use saga_proto::inventory::v1::inventory_service_server::InventoryServiceServer;

participant_kit::participant!(
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
        store: dyn store::InventoryStore,
        embedded: store::SqliteInventoryStore,
        mongo: store::MongoInventoryStore,
        server: InventoryServiceServer,
        api: grpc::InventoryApi,
    }
);
