//! Test harness: the real services started in-process on ephemeral ports,
//! their stores in a directory the test owns (or on the MongoDB test
//! target), and typed clients. A tour:
//!
//! - [`harness`]: [`OrchestratorHarness`] and [`ParticipantHarness`], the
//!   one way a test starts a service, and [`Running`], what it gets back.
//! - [`storage`]: [`Storage`], where the services keep their state.
//! - [`stack`]: [`Stack`], both participants and usually an orchestrator
//!   over one storage — what most scenarios start with.
//! - [`settings`]: the test settings and retry policies, and the leased
//!   saga tests plant for recovery to find.
//! - [`clients`]: typed calls (CreateOrder, balances, stocks, waiting for a
//!   saga to end).
//! - Here: the order saga as the binary builds it ([`order_saga`]) and
//!   [`on_every_backend!`], which runs a scenario on each storage backend.
//! - [`backends`] opens fresh stores on every storage target and
//!   [`conformance`] holds the storage suites every backend must pass;
//!   [`intercepted_store`], [`wrapped_step`] and [`crash`] wrap the real
//!   store, steps and process to fail precisely.
//! - [`http`] and [`prometheus`]: GET over HTTP and the Prometheus
//!   exposition parser, for the tests and the tools.
//! - Generic steps (`participant.v1.SagaStepService`): [`generic_step`]
//!   and [`saga_with_steps`] build the saga of a steps file; [`loyalty`]
//!   starts loyalty-svc in-process, [`shipping`] the NestJS participant as
//!   a child process; [`on_every_backend_bare!`] gives a scenario both
//!   participants and no orchestrator, so it starts the one its steps need.
//! - [`mongo_server`] launches the MongoDB test server (SecantusDB) for the
//!   tests and the tools (`src/bin/chaos`, `src/bin/loadgen`); [`process`]
//!   ties every child process to this one and stops it; [`reflection`] and
//!   [`saga_list`] read what the services list.
//! - [`otlp_receiver`]: an OTLP/gRPC trace receiver, to check the spans
//!   the services export.

#![warn(missing_docs)]

pub mod backends;
pub mod clients;
pub mod conformance;
pub mod crash;
pub mod harness;
pub mod http;
pub mod intercepted_store;
pub mod loyalty;
pub mod mongo_server;
pub mod otlp_receiver;
pub mod process;
pub mod prometheus;
pub mod reflection;
pub mod saga_list;
pub mod service_process;
pub mod settings;
pub mod shipping;
pub mod stack;
pub mod storage;
pub mod wrapped_step;

pub use clients::*;
pub use harness::{OrchestratorHarness, ParticipantHarness, Running, Service, listener};
pub use settings::*;
pub use stack::Stack;
pub use storage::Storage;

use orchestrator::order_saga::OrderParticipants;
use orchestrator::step::SagaDefinition;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

/// The real participants' clients, as the orchestrator binary builds them.
pub fn participants(payment: SocketAddr, inventory: SocketAddr) -> OrderParticipants {
    OrderParticipants::new(
        orchestrator::participant_channel(&format!("http://{payment}")).expect("payment channel"),
        orchestrator::participant_channel(&format!("http://{inventory}"))
            .expect("inventory channel"),
        Duration::from_secs(2),
    )
}

/// The order saga over the real participants, as the orchestrator binary
/// builds it.
pub fn order_saga(payment: SocketAddr, inventory: SocketAddr) -> Arc<SagaDefinition> {
    Arc::new(
        participants(payment, inventory)
            .definition()
            .expect("order saga"),
    )
}

/// A steps file entry for a participant of the generic contract at `addr`:
/// step `name`, its action and compensation labelled `labels` (default
/// `act` / `compensate`).
pub fn generic_step(
    name: &str,
    addr: SocketAddr,
    labels: Option<(&str, &str)>,
) -> orchestrator::steps_file::StepSpec {
    let (action, compensation) = labels.unwrap_or(("act", "compensate"));
    orchestrator::steps_file::StepSpec::Generic(orchestrator::steps_file::GenericSpec {
        name: name.to_owned(),
        address: format!("http://{addr}"),
        action: action.to_owned(),
        compensation: compensation.to_owned(),
    })
}

/// The saga a steps file listing payment, inventory and then `more` makes,
/// over the real participants, as the orchestrator binary builds it
/// (`OrderParticipants::definition_of`).
pub fn saga_with_steps(
    payment: SocketAddr,
    inventory: SocketAddr,
    more: &[orchestrator::steps_file::StepSpec],
) -> Arc<SagaDefinition> {
    let mut specs = orchestrator::steps_file::default_steps();
    specs.extend_from_slice(more);
    Arc::new(
        participants(payment, inventory)
            .definition_of(&specs, &Default::default())
            .expect("the saga of the steps"),
    )
}

/// Steps of the order saga as the orchestrator defines it: the
/// participants' `--saga-steps` for it.
pub fn order_saga_steps() -> u32 {
    let nowhere = SocketAddr::from(([127, 0, 0, 1], 1));
    u32::try_from(order_saga(nowhere, nowhere).steps().len()).unwrap_or(u32::MAX)
}

/// Runs each scenario — an `async fn(Stack)` of the test file — once per
/// storage backend: on embedded stores, and on fresh MongoDB databases of
/// the test target (skipped when none is available and none is required).
#[macro_export]
macro_rules! on_every_backend {
    ($($name:ident),* $(,)?) => {
        mod embedded {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $name() {
                    super::$name($crate::Stack::start().await).await;
                }
            )*
        }
        mod mongo {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $name() {
                    let Some(stack) = $crate::Stack::start_mongo().await else { return };
                    super::$name(stack).await;
                }
            )*
        }
    };
}

/// Runs each scenario — an `async fn(Stack)` of the test file — once per
/// storage backend, like [`on_every_backend!`], but on a stack of both
/// participants *without* an orchestrator: the scenario starts the one its
/// saga needs (e.g. [`OrchestratorHarness::with_steps`]), and no other
/// instance can take its sagas over.
#[macro_export]
macro_rules! on_every_backend_bare {
    ($($name:ident),* $(,)?) => {
        mod embedded {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $name() {
                    super::$name($crate::Stack::without_orchestrator().await).await;
                }
            )*
        }
        mod mongo {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $name() {
                    let Some(stack) = $crate::Stack::without_orchestrator_mongo().await else { return };
                    super::$name(stack).await;
                }
            )*
        }
    };
}
