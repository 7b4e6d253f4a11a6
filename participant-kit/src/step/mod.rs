//! The step contract (`participant.v1.SagaStepService`,
//! `docs/participant-protocol.md`) for a Rust service: everything but its
//! business rules.
//!
//! Every participant serves it through [`StepStore`] and [`StepApi`]
//! (single calls and the batch calls, one pipeline): payment-svc and
//! inventory-svc map a [`StepCall`] onto their own stores; a service that
//! is only a step writes [`StepRules`] and gets the stores too.
//!
//! A service of the generic contract differs from another only in what its
//! Act does and how its Compensate undoes it. So it writes [`StepRules`]
//! (generic over [`StepTx`], the store transaction, so one set of rules
//! runs on both backends) and declares its binary with
//! [`step_participant!`](crate::step_participant); the kit gives it the
//! rest, each written once for every participant:
//!
//! - the barrier ([`crate::barrier`]) around every call, its records under
//!   the kinds `act` and `compensate` — the rules are asked to act at most
//!   once per request id and to undo at most once ([`protocol`]);
//! - the operationHistory on the embedded store ([`SqliteSteps`]) or
//!   MongoDB ([`MongoSteps`]), with the rules' counters in the same
//!   transaction, `ListOperations` and the history retention;
//! - the pipeline ([`grpc`]): service token, timer, span, fault injection,
//!   `participant_operations_total{kind="act"|"compensate"}`, the reply as
//!   the contract reads it;
//! - flags and start-up ([`crate::startup`]), the same as payment-svc's.
//!
//! Module map: [`call`] (the call, checked, and its fingerprint),
//! [`rules`] (what a participant writes), [`protocol`] (the rules inside
//! the barrier), [`store`] (the store traits), [`sqlite`] / [`mongo`] (its
//! backends), [`grpc`] (the adapter and [`serve`]).

pub mod call;
pub mod grpc;
pub mod mongo;
pub mod protocol;
pub mod rules;
pub mod sqlite;
pub mod store;

pub use call::{Order, OrderLine, StepCall};
pub use grpc::{SERVICE_NAME, StepApi, serve, serve_on};
pub use mongo::{MongoRules, MongoSteps};
pub use protocol::{ACT, COMPENSATE, StepInput};
pub use rules::{
    ALREADY_COMPENSATED, Acted, INJECTED_REFUSAL, Listing, StepRefusal, StepRules, StepTx,
};
pub use sqlite::SqliteSteps;
pub use store::{RulesStore, Shared, StepStore, domain_refusal};

/// What [`step_rules_on_mongo!`](crate::step_rules_on_mongo) expands to
/// names; not part of the API.
#[doc(hidden)]
pub use futures::future::BoxFuture;
#[doc(hidden)]
pub use mongodb::error::Error as MongoError;

/// Declares a participant of the generic contract in one place: its names
/// and defaults (as [`participant_defaults!`](crate::participant_defaults):
/// `<PREFIX>_LISTEN`, `<PREFIX>_DATA_DIR`, `<PREFIX>_MONGODB_DATABASE`,
/// `<PREFIX>_METRICS_LISTEN`) and its rules, with the function that builds
/// them at start-up (`fn() -> Result<Rules, E>`, `E` printable: a bad
/// setting stops start-up with one line). Expands to the marker type and
/// its [`Participant`](crate::Participant) impl, so the binary's `main` is
/// `participant_kit::main::<Marker>()`: the embedded store by default,
/// MongoDB with `MONGODB_URI`, every flag of the other participants.
#[macro_export]
macro_rules! step_participant {
    (
        $(#[$meta:meta])*
        $type:ident {
            name: $name:literal,
            about: $about:literal,
            env_prefix: $prefix:literal,
            listen: $listen:literal,
            metrics_listen: $metrics:literal,
            database_file: $file:literal,
            mongodb_database: $database:literal,
            rules: $rules:ty = $make:path $(,)?
        }
    ) => {
        $crate::participant_defaults!(
            $(#[$meta])*
            $type {
                name: $name,
                about: $about,
                env_prefix: $prefix,
                listen: $listen,
                metrics_listen: $metrics,
                database_file: $file,
                mongodb_database: $database,
            }
        );

        $crate::step_rules_on_mongo!($rules);

        impl $crate::startup::Participant for $type {
            type Store = dyn $crate::step::RulesStore;

            const SERVICE: &'static str = $crate::step::SERVICE_NAME;

            fn open_embedded(
                path: &::std::path::Path,
                durability: $crate::__private::Durability,
            ) -> Result<::std::sync::Arc<Self::Store>, $crate::startup::BoxError> {
                let rules: $rules = $make()?;
                Ok(::std::sync::Arc::new($crate::step::SqliteSteps::open(
                    path, durability, rules,
                )?))
            }

            async fn open_mongo(
                db: $crate::__private::Database,
                history_retention: $crate::__private::Duration,
            ) -> Result<::std::sync::Arc<Self::Store>, $crate::startup::BoxError> {
                let rules: $rules = $make()?;
                Ok(::std::sync::Arc::new(
                    $crate::step::MongoSteps::open_with(db, history_retention, rules).await?,
                ))
            }

            async fn serve(
                store: ::std::sync::Arc<Self::Store>,
                kit: $crate::Kit,
                server: $crate::startup::GrpcServer,
            ) -> Result<(), $crate::__private::ServeError> {
                let store: ::std::sync::Arc<dyn $crate::step::StepStore> = store;
                $crate::step::serve_on(store, kit, $name, server).await
            }
        }
    };
}
