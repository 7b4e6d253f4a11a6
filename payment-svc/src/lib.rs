//! payment-svc — the payment participant of the order saga.
//!
//! It holds customer balances (int64 cents) and offers Charge and its
//! compensation Refund. Every mutating call goes through the shared
//! operationHistory barrier (`operation-history` crate), so a retried,
//! duplicated, reordered or late call never charges twice, and a refund is
//! applied at most once.
//!
//! - [`store`]: the [`store::PaymentStore`] trait (domain types only) and its
//!   embedded SQLite backend.
//! - [`grpc`]: the thin adapter from `payment.v1` to the store: validation,
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

/// Serves the payment service and the `faults.v1.FaultService` admin API
/// over `faults` on `listener` until `shutdown` fires, as `options` say: TLS
/// or plaintext, the admin token required by Deposit and the fault API,
/// the largest accepted request.
pub async fn serve_with(
    store: Arc<dyn store::PaymentStore>,
    faults: Arc<Faults>,
    options: ServeOptions,
    listener: TcpListener,
    shutdown: Shutdown,
) -> Result<(), ServeError> {
    use saga_proto::payment::v1::payment_service_server::PaymentServiceServer;
    let api =
        grpc::PaymentApi::with_faults(store, faults.clone()).with_admin(options.admin.clone());
    let service =
        PaymentServiceServer::new(api).max_decoding_message_size(options.max_request_bytes);
    let routes =
        tonic::service::Routes::new(service).add_service(faults::service_with(faults, &options));
    let routes = server::with_standard_services_limited::<PaymentServiceServer<grpc::PaymentApi>>(
        routes,
        &[faults::SERVICE_NAME],
        options.max_request_bytes,
    )
    .await?;
    server::serve_with(&options, routes, listener, shutdown).await
}
