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

pub mod config;
pub mod grpc;
pub mod store;

use service_kit::server::{self, ServeError};
use service_kit::shutdown::Shutdown;
use std::sync::Arc;
use tokio::net::TcpListener;

/// Serves the payment service on `listener` until `shutdown` fires.
pub async fn serve(
    store: Arc<dyn store::PaymentStore>,
    listener: TcpListener,
    shutdown: Shutdown,
) -> Result<(), ServeError> {
    use saga_proto::payment::v1::payment_service_server::PaymentServiceServer;
    let service = PaymentServiceServer::new(grpc::PaymentApi::new(store));
    let routes = tonic::service::Routes::new(service);
    let routes =
        server::with_standard_services::<PaymentServiceServer<grpc::PaymentApi>>(routes, &[])
            .await?;
    server::serve(routes, listener, shutdown).await
}
