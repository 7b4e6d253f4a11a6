//! payment-svc — the payment participant of the order saga.
//!
//! It holds customer balances (int64 cents) and offers Charge and its
//! compensation Refund. Everything a participant shares — the
//! operationHistory barrier that makes a retried, duplicated, reordered or
//! late call harmless, fault injection, the call pipeline, flags and
//! start-up — comes from `participant-kit`; this crate is only:
//!
//! - [`store`]: the [`store::PaymentStore`] trait (domain types only), the
//!   payment rules written once over a store transaction
//!   ([`store::ledger`]), and their embedded SQLite and MongoDB backends;
//! - [`grpc`]: the `payment.v1` mapping to and from the store's types.

#![warn(missing_docs)]

pub mod grpc;
pub mod store;

use embedded_store::Durability;
use participant_kit::Kit;
use participant_kit::startup::{BoxError, Participant};
use saga_proto::payment::v1::payment_service_server::PaymentServiceServer;
use service_kit::server::ServeError;
use service_kit::shutdown::Shutdown;
use std::path::Path;
use std::sync::Arc;
use store::{MongoPaymentStore, PaymentStore, SqlitePaymentStore};
use tokio::net::TcpListener;
use tonic::server::NamedService;

participant_kit::participant_defaults!(
    /// payment-svc's names and defaults: `PAYMENT_LISTEN` (127.0.0.1:50052),
    /// `PAYMENT_DATA_DIR` (`data/payment.db`), `PAYMENT_MONGODB_DATABASE`
    /// (`saga_payment`), `PAYMENT_METRICS_LISTEN` (127.0.0.1:9462).
    Payment {
        name: "payment-svc",
        about: "Payment participant of the order saga (charge, refund)",
        env_prefix: "PAYMENT",
        listen: "127.0.0.1:50052",
        metrics_listen: "127.0.0.1:9462",
        database_file: "payment.db",
        mongodb_database: "saga_payment",
    }
);

impl Participant for Payment {
    type Store = dyn PaymentStore;

    fn open_embedded(path: &Path, durability: Durability) -> Result<Arc<Self::Store>, BoxError> {
        Ok(Arc::new(SqlitePaymentStore::open(path, durability)?))
    }

    async fn open_mongo(db: mongodb::Database) -> Result<Arc<Self::Store>, BoxError> {
        Ok(Arc::new(MongoPaymentStore::open(db).await?))
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

/// Serves `payment.v1.PaymentService` over `store` (with `kit`'s faults,
/// TLS, tokens and limits, plus the `faults.v1` admin API, reflection and
/// health) on `listener` until `shutdown` fires.
pub async fn serve(
    store: Arc<dyn PaymentStore>,
    kit: Kit,
    listener: TcpListener,
    shutdown: Shutdown,
) -> Result<(), ServeError> {
    let api = PaymentServiceServer::new(grpc::PaymentApi::new(store, kit.clone()))
        .max_decoding_message_size(kit.max_request_bytes());
    let name = <PaymentServiceServer<grpc::PaymentApi> as NamedService>::NAME;
    kit.serve(tonic::service::Routes::new(api), name, listener, shutdown)
        .await
}
