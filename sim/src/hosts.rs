//! Starting each kind of host over its surviving store: an orchestrator
//! (the real executor, sweeper and CreateOrder use case behind its
//! generated tonic server), payment-svc and inventory-svc (their real gRPC
//! adapters, the participant kit's pipeline and barrier, the retention
//! purge) — everything the binaries start, minus sockets and threads.

use crate::disk::Disk;
use crate::events::Events;
use crate::host::{Incarnation, SimClock};
use crate::net::Net;
use crate::rng::Rng;
use crate::scenario;
use crate::store::{MemInventoryStore, MemPaymentStore, MemSagaStore};
use crate::store::{SharedInventory, SharedPayment, SharedSagaTable};
use orchestrator::app::Orchestrator;
use orchestrator::executor::Executor;
use orchestrator::hub::SagaHub;
use orchestrator::retention::RetentionSettings;
use orchestrator::store::SagaRetention;
use participant_kit::{HistoryRetention, Kit};
use service_kit::clock::SharedClock;
use service_kit::shutdown::Shutdown;
use std::sync::Arc;
use std::sync::atomic::AtomicI64;
use std::time::Duration;
use tokio::time::Instant;
use tonic::service::Routes;

/// What every host of one run shares.
#[derive(Clone)]
pub struct Cluster {
    /// The run's randomness.
    pub rng: Rng,
    /// The run's log.
    pub events: Events,
    /// The network.
    pub net: Net,
    /// Wall time at the start (ms since the epoch).
    pub base_ms: i64,
    /// Simulated time at the start.
    pub start: Instant,
    /// The saga store's committed state (shared by the orchestrators).
    pub sagas: SharedSagaTable,
    /// payment-svc's committed state.
    pub payment: SharedPayment,
    /// inventory-svc's committed state.
    pub inventory: SharedInventory,
    /// The seed of the orchestrators' backoff jitter.
    pub seed: u64,
}

/// One host's lasting parts: its storage and its clock's skew.
#[derive(Clone)]
pub struct HostParts {
    /// The host's name.
    pub name: &'static str,
    /// Its storage.
    pub disk: Disk,
    /// Its clock's skew (ms).
    pub skew: Arc<AtomicI64>,
}

impl Cluster {
    fn clock(&self, host: &HostParts, incarnation: &Incarnation) -> SharedClock {
        Arc::new(SimClock::new(
            self.base_ms,
            self.start,
            host.skew.clone(),
            incarnation.clone(),
        ))
    }

    /// Starts a new incarnation of `host`, answering on the network.
    pub fn start(&self, host: &HostParts) -> Incarnation {
        let incarnation = Incarnation::new();
        let routes = match host.name {
            "payment" => Ok(self.payment_svc(host, &incarnation)),
            "inventory" => Ok(self.inventory_svc(host, &incarnation)),
            _ => self.orchestrator(host, &incarnation),
        };
        match routes {
            Ok(routes) => {
                self.net.serve(host.name, routes, incarnation.clone());
                self.events.log(format!("host {}: started", host.name));
            }
            Err(error) => self.events.violated("the simulation runs", error),
        }
        incarnation
    }

    fn kit(&self, clock: SharedClock) -> Kit {
        Kit::plain()
            .with_clock(clock)
            .with_history(HistoryRetention {
                keep: scenario::history_retention(),
                purge_interval: Duration::from_secs(1),
            })
    }

    fn purge(
        &self,
        kit: &Kit,
        label: &'static str,
        store: Arc<dyn participant_kit::HistoryExpiry>,
    ) {
        let purger = participant_kit::retention::HistoryPurger::new(store, kit.history().keep);
        tokio::spawn(service_kit::purge::run_purge_loop(
            Arc::new(purger),
            label,
            kit.history().purge_interval,
            kit.clock().clone(),
            Shutdown::new(),
        ));
    }

    fn payment_svc(&self, host: &HostParts, incarnation: &Incarnation) -> Routes {
        use saga_proto::payment::v1::payment_service_server::PaymentServiceServer;
        let clock = self.clock(host, incarnation);
        let store = Arc::new(MemPaymentStore::new(
            self.payment.clone(),
            host.disk.clone(),
            incarnation.clone(),
            clock.clone(),
            self.events.clone(),
        ));
        let kit = self.kit(clock);
        self.purge(&kit, "payment", store.clone());
        let api = payment_svc::grpc::PaymentApi::new(store.clone(), kit.clone());
        let steps: Arc<dyn payment_svc::store::PaymentStore> = store.clone();
        Routes::new(PaymentServiceServer::new(api))
            .add_service(step_service(steps, &kit))
            .add_service(participant_kit::history_service::service(store, &kit))
    }

    fn inventory_svc(&self, host: &HostParts, incarnation: &Incarnation) -> Routes {
        use saga_proto::inventory::v1::inventory_service_server::InventoryServiceServer;
        let clock = self.clock(host, incarnation);
        let store = Arc::new(MemInventoryStore::new(
            self.inventory.clone(),
            host.disk.clone(),
            incarnation.clone(),
            clock.clone(),
            self.events.clone(),
        ));
        let kit = self.kit(clock);
        self.purge(&kit, "inventory", store.clone());
        let api = inventory_svc::grpc::InventoryApi::new(store.clone(), kit.clone());
        let steps: Arc<dyn inventory_svc::store::InventoryStore> = store.clone();
        Routes::new(InventoryServiceServer::new(api))
            .add_service(step_service(steps, &kit))
            .add_service(participant_kit::history_service::service(store, &kit))
    }

    fn orchestrator(&self, host: &HostParts, incarnation: &Incarnation) -> Result<Routes, String> {
        use saga_proto::saga::v1::order_service_server::OrderServiceServer;
        use saga_proto::saga::v1::saga_service_server::SagaServiceServer;
        let clock = self.clock(host, incarnation);
        let store = Arc::new(MemSagaStore::new(
            self.sagas.clone(),
            host.disk.clone(),
            incarnation.clone(),
            SagaRetention::default(),
        ));
        let limits = scenario::limits();
        // The default saga, each step over the simulated network to the
        // host its step is named after, through the participant contract
        // as in the binary.
        let caller = orchestrator::participant::call::Caller::new(limits.call_timeout);
        let steps = orchestrator::steps_file::default_steps()
            .iter()
            .map(
                |spec| -> Result<Arc<dyn orchestrator::step::SagaStep>, String> {
                    let to = match spec.name.as_str() {
                        "payment" => "payment",
                        "inventory" => "inventory",
                        other => return Err(format!("no host serves the step {other:?}")),
                    };
                    let channel = self.net.channel(host.name, incarnation.clone(), to);
                    Ok(Arc::new(orchestrator::participant::ParticipantStep::new(
                        spec,
                        channel,
                        caller.clone(),
                    )))
                },
            )
            .collect::<Result<Vec<_>, String>>()?;
        let definition = Arc::new(
            orchestrator::step::SagaDefinition::new(steps)
                .map_err(|e| format!("{}: no order saga: {e}", host.name))?,
        );
        let mut retention = RetentionSettings::default();
        retention.set_windows(&limits, scenario::history_retention());
        let settings = orchestrator::Settings {
            retry: scenario::retry_policy(self.seed ^ self.rng.u64()),
            lease: scenario::lease_policy(host.name),
            clock,
            retention,
            ..Default::default()
        };
        let hub = Arc::new(SagaHub::new());
        let shutdown = Shutdown::new();
        let executor = Arc::new(Executor::new(
            store.clone(),
            definition,
            hub.clone(),
            shutdown.clone(),
            &settings,
        ));
        tokio::spawn(executor.clone().run_sweeper());
        let rng = self.rng.clone();
        let ids: orchestrator::app::SagaIds = Arc::new(move || {
            let mut bytes = [0u8; 16];
            bytes[..8].copy_from_slice(&rng.u64().to_le_bytes());
            bytes[8..].copy_from_slice(&rng.u64().to_le_bytes());
            uuid::Builder::from_random_bytes(bytes).into_uuid()
        });
        let app = Orchestrator::new(store, executor, hub, shutdown)
            .with_retry_window(settings.retention.retry_window)
            .with_saga_ids(ids);
        let app = Arc::new(app);
        let api = orchestrator::grpc::OrderApi::new(app.clone(), settings.max_wait);
        let saga_api = SagaServiceServer::new(orchestrator::grpc::SagaApi::new(app));
        Ok(Routes::new(OrderServiceServer::new(api)).add_service(saga_api))
    }
}

/// `participant.v1.SagaStepService` over a participant's store, as its
/// binary serves it (participant_kit's StepApi).
fn step_service<S: ?Sized + participant_kit::step::StepStore>(
    store: Arc<S>,
    kit: &Kit,
) -> saga_proto::participant::v1::saga_step_service_server::SagaStepServiceServer<
    participant_kit::step::StepApi,
> {
    participant_kit::step::StepApi::server(Arc::new(participant_kit::step::Shared(store)), kit)
}
