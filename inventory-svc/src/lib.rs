//! inventory-svc — the inventory participant of the order saga.
//!
//! It holds available units per product (int64) and offers Deduct — every
//! line of an order, all or nothing — and its compensation Restock. Every
//! mutating call goes through the shared operationHistory barrier
//! (`operation-history` crate), so a retried, duplicated, reordered or late
//! call never takes stock twice, and a restock is applied at most once. Each
//! deducted line is also recorded under the stable key
//! `(request_id, line_index)`, which is what Restock puts back.
//!
//! - [`store`]: the [`store::InventoryStore`] trait (domain types only), the
//!   inventory rules written once over a store transaction
//!   ([`store::stock`]), and their embedded SQLite and MongoDB backends.
//! - [`grpc`]: the thin adapter from `inventory.v1` to the store: validation,
//!   conversions, status codes.
//! - [`config`]: flags and environment for the stand-alone binary.
//!
//! Next to its own service it serves `faults.v1.FaultService`, the admin API
//! of the fault injector (`service_kit::faults`), which its adapter consults
//! on every mutating call.

pub mod config;
pub mod grpc;
pub mod store;

use service_kit::faults::{self, Faults};
use service_kit::server::{self, ServeError, ServeOptions};
use service_kit::shutdown::Shutdown;
use std::sync::Arc;
use tokio::net::TcpListener;

/// Serves the inventory service and the `faults.v1.FaultService` admin API
/// over `faults` on `listener` until `shutdown` fires, as `options` say: TLS
/// or plaintext, the admin token required by AddStock and the fault API,
/// the largest accepted request.
pub async fn serve_with(
    store: Arc<dyn store::InventoryStore>,
    faults: Arc<Faults>,
    options: ServeOptions,
    listener: TcpListener,
    shutdown: Shutdown,
) -> Result<(), ServeError> {
    use saga_proto::inventory::v1::inventory_service_server::InventoryServiceServer;
    let api =
        grpc::InventoryApi::with_faults(store, faults.clone()).with_admin(options.admin.clone());
    let service =
        InventoryServiceServer::new(api).max_decoding_message_size(options.max_request_bytes);
    let routes =
        tonic::service::Routes::new(service).add_service(faults::service_with(faults, &options));
    let routes =
        server::with_standard_services_limited::<InventoryServiceServer<grpc::InventoryApi>>(
            routes,
            &[faults::SERVICE_NAME],
            options.max_request_bytes,
        )
        .await?;
    server::serve_with(&options, routes, listener, shutdown).await
}
