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
//!   a child process, [`media_upload`] the media-upload step and its fake
//!   media store as two; [`on_every_backend_bare!`] gives a scenario both
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
pub mod media_upload;
pub mod mongo_server;
pub mod node_process;
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

use orchestrator::step::{SagaDefinition, SagaStep};
use orchestrator::steps_file::StepSpec;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

/// The default steps file's steps at these participants (what
/// `--step-address payment=...,inventory=...` makes of it).
pub fn order_steps(payment: SocketAddr, inventory: SocketAddr) -> Vec<StepSpec> {
    orchestrator::steps_file::with_addresses(
        orchestrator::steps_file::default_steps(),
        &[
            format!("payment=http://{payment}"),
            format!("inventory=http://{inventory}"),
        ],
    )
    .expect("the default steps at these addresses")
}

/// The saga `specs` list, each step called with a 2 s deadline, as the
/// orchestrator binary builds it.
pub fn saga_of(specs: &[StepSpec]) -> Arc<SagaDefinition> {
    let caller = orchestrator::participant::call::Caller::new(Duration::from_secs(2));
    Arc::new(
        orchestrator::participant::definition_of(specs, &caller, &Default::default())
            .expect("the saga of the steps"),
    )
}

/// The order saga over these channels to payment-svc and inventory-svc
/// (TLS, an in-process link), called as `caller` says (deadline, token).
pub fn order_saga_on(
    payment: service_kit::channel::GrpcChannel,
    inventory: service_kit::channel::GrpcChannel,
    caller: orchestrator::participant::call::Caller,
) -> Arc<SagaDefinition> {
    let specs = orchestrator::steps_file::default_steps();
    let steps = specs
        .iter()
        .zip([payment, inventory])
        .map(|(spec, channel)| -> Arc<dyn SagaStep> {
            Arc::new(orchestrator::participant::ParticipantStep::new(
                spec,
                channel,
                caller.clone(),
            ))
        })
        .collect();
    Arc::new(SagaDefinition::new(steps).expect("the order saga"))
}

/// The order saga's steps over the real participants, as the orchestrator
/// binary builds them (to wrap some in a test's own step).
pub fn participants(payment: SocketAddr, inventory: SocketAddr) -> Vec<Arc<dyn SagaStep>> {
    order_saga(payment, inventory).steps().to_vec()
}

/// The order saga over the real participants, as the orchestrator binary
/// builds it.
pub fn order_saga(payment: SocketAddr, inventory: SocketAddr) -> Arc<SagaDefinition> {
    saga_of(&order_steps(payment, inventory))
}

/// A steps file entry for a participant of the contract at `addr`: step
/// `name`, its action and compensation labelled `labels` (default `act` /
/// `compensate`).
pub fn generic_step(name: &str, addr: SocketAddr, labels: Option<(&str, &str)>) -> StepSpec {
    let (action, compensation) = labels.unwrap_or(("act", "compensate"));
    StepSpec {
        name: name.to_owned(),
        address: format!("http://{addr}"),
        action: action.to_owned(),
        compensation: compensation.to_owned(),
    }
}

/// The saga a steps file listing payment, inventory and then `more` makes,
/// over the real participants, as the orchestrator binary builds it.
pub fn saga_with_steps(
    payment: SocketAddr,
    inventory: SocketAddr,
    more: &[StepSpec],
) -> Arc<SagaDefinition> {
    let mut specs = order_steps(payment, inventory);
    specs.extend_from_slice(more);
    saga_of(&specs)
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
