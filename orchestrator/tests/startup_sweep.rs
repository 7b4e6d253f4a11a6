//! The start-up sweep resumes this instance's sagas from before a restart,
//! never one this process leased since it started (CreateOrder stores a
//! saga before its driver registers, so the first sweep can find a saga
//! that is about to be driven).

use async_trait::async_trait;
use embedded_store::Durability;
use orchestrator::engine::{self, StepNames};
use orchestrator::executor::{Executor, LeasePolicy};
use orchestrator::hub::SagaHub;
use orchestrator::saga::{Lease, Order, Saga, StepState};
use orchestrator::step::{ParticipantRecord, SagaDefinition, SagaStep, StepOutcome};
use orchestrator::store::{SagaStore, SqliteSagaStore};
use service_kit::clock::{Clock, ManualClock};
use service_kit::shutdown::Shutdown;
use std::sync::Arc;
use std::time::Duration;

/// A step whose calls never return: a claimed saga stays where the claim
/// left it.
struct Silent;

#[async_trait]
impl SagaStep for Silent {
    fn name(&self) -> &'static str {
        "only"
    }
    fn action(&self) -> &'static str {
        "do"
    }
    fn compensation(&self) -> &'static str {
        "undo"
    }
    async fn act(&self, _: &Saga, _: &StepState) -> StepOutcome {
        std::future::pending().await
    }
    async fn compensate(&self, _: &Saga, _: &StepState) -> StepOutcome {
        std::future::pending().await
    }
    async fn records(&self, _: &Saga, _: &StepState) -> Result<Vec<ParticipantRecord>, String> {
        Ok(Vec::new())
    }
}

const TTL: Duration = Duration::from_secs(60);

fn leased(id: &str, granted_ms: i64) -> Saga {
    let names = [StepNames {
        name: "only",
        action: "do",
        compensation: "undo",
    }];
    let order = Order {
        order_id: format!("order-{id}"),
        customer_id: "c".into(),
        items: Vec::new(),
        total_cents: 0,
    };
    let mut saga = engine::start(
        &names,
        id.into(),
        format!("req-{id}"),
        "fp".into(),
        order,
        granted_ms,
    );
    saga.version = 1;
    saga.lease = Some(Lease {
        owner: "me".into(),
        until_ms: granted_ms + TTL.as_millis() as i64,
    });
    saga
}

#[tokio::test]
async fn the_start_up_sweep_resumes_sagas_of_a_previous_run_not_those_of_this_one() {
    let dir = tempfile::tempdir().expect("tempdir");
    let store: Arc<dyn SagaStore> = Arc::new(
        SqliteSagaStore::open(&dir.path().join("sagas.db"), Durability::Process).expect("store"),
    );
    let clock = ManualClock::now();
    // Leased by "me" before this process started (a previous run).
    store
        .create(&leased("before-restart", clock.now_ms() - 1_000))
        .await
        .expect("create");
    let settings = orchestrator::Settings {
        lease: LeasePolicy {
            owner: "me".into(),
            ttl: TTL,
            sweep_interval: Duration::from_secs(60),
        },
        max_in_flight: 16,
        clock: clock.clone(),
        ..orchestrator::Settings::default()
    };
    let executor = Arc::new(Executor::new(
        store.clone(),
        Arc::new(
            SagaDefinition::new(vec![Arc::new(Silent) as Arc<dyn SagaStep>]).expect("definition"),
        ),
        Arc::new(SagaHub::new()),
        Shutdown::new(),
        &settings,
    ));
    // Leased by this process and stored, its driver not registered yet.
    store
        .create(&leased("this-run", clock.now_ms()))
        .await
        .expect("create");

    assert_eq!(executor.sweep(true).await.expect("sweep"), 1);
    let version = |id: &'static str| {
        let store = store.clone();
        async move { store.get(id).await.expect("read").expect("stored").version }
    };
    assert_eq!(
        version("before-restart").await,
        2,
        "resumed: claimed with a save"
    );
    assert_eq!(version("this-run").await, 1, "left to its own driver");
}
