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
//! - [`grpc`]: the `payment.v1` mapping to and from the store's types;
//! - [`step`]: the same store as a saga step (`participant.v1.SagaStepService`,
//!   served by the kit): Act charges the order's total, Compensate refunds it.

#![warn(missing_docs)]

pub mod grpc;
pub mod step;
pub mod store;

use saga_proto::payment::v1::payment_service_server::PaymentServiceServer;

participant_kit::participant!(
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
        store: dyn store::PaymentStore,
        embedded: store::SqlitePaymentStore,
        mongo: store::MongoPaymentStore,
        server: PaymentServiceServer,
        api: grpc::PaymentApi,
    }
);
