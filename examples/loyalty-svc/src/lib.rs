//! loyalty-svc — loyalty points for an order, a participant of the
//! generic step contract (`participant.v1.SagaStepService`, see
//! `docs/participant-protocol.md`) written in Rust.
//!
//! Act awards the customer one point per whole unit of the order's total
//! (`total_cents / 100`); Compensate takes them back, once; a customer
//! listed in `LOYALTY_BLOCKED_CUSTOMERS` is refused (`CUSTOMER_BLOCKED`).
//! That is all this crate is — [`rules`]. The barrier, both stores (the
//! embedded file by default, MongoDB with `MONGODB_URI`), the pipeline,
//! the service token, fault injection, history retention and every flag
//! come from `participant-kit` ([`participant_kit::step`]), as for
//! payment-svc and inventory-svc.

#![warn(missing_docs)]

pub mod rules;

participant_kit::step_participant!(
    /// loyalty-svc's names and defaults: `LOYALTY_LISTEN` (127.0.0.1:50055),
    /// `LOYALTY_DATA_DIR` (`data/loyalty.db`), `LOYALTY_MONGODB_DATABASE`
    /// (`saga_loyalty`), `LOYALTY_METRICS_LISTEN` (127.0.0.1:9465).
    Loyalty {
        name: "loyalty-svc",
        about: "Loyalty points step of the saga (participant.v1.SagaStepService): awards total_cents / 100 points on Act, takes them back on Compensate, refuses the customers listed in LOYALTY_BLOCKED_CUSTOMERS (comma-separated)",
        env_prefix: "LOYALTY",
        listen: "127.0.0.1:50055",
        metrics_listen: "127.0.0.1:9465",
        database_file: "loyalty.db",
        mongodb_database: "saga_loyalty",
        rules: rules::LoyaltyRules = rules::LoyaltyRules::from_env,
    }
);
