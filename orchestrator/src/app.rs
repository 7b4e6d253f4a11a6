//! The orchestrator's use cases, independent of gRPC: create an order saga
//! (idempotently), look sagas up, list them, retry a FAILED one.

use crate::engine;
use crate::executor::Executor;
use crate::hub::SagaHub;
use crate::order_saga::ORDER_SAGA;
use crate::saga::{Order, OrderItem, Saga, SagaStatus};
use crate::store::{Created, Cursor, Page, SagaStore, StoreError};
use operation_history::{Fingerprint, now_ms};
use std::sync::Arc;
use std::time::Duration;
use tokio::time::Instant;

/// A validated CreateOrder.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NewOrder {
    pub request_id: String,
    pub customer_id: String,
    pub items: Vec<OrderItem>,
    pub total_cents: i64,
}

impl NewOrder {
    /// What a duplicate CreateOrder must repeat exactly.
    fn fingerprint(&self) -> Fingerprint {
        let items: Vec<_> = self
            .items
            .iter()
            .map(|i| (&i.product_id, i.quantity, i.unit_price_cents))
            .collect();
        Fingerprint::of([
            ("customer_id", self.customer_id.clone()),
            ("items", format!("{items:?}")),
        ])
    }
}

/// Why a use case failed.
#[derive(Debug, thiserror::Error)]
pub enum AppError {
    #[error(
        "request_id {0:?} was reused with different parameters (customer or items differ from the saga it created)"
    )]
    RequestIdReused(String),
    #[error("{0}")]
    NotFound(String),
    #[error("{0}")]
    NotRetryable(String),
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// The result of CreateOrder.
#[derive(Debug, Clone)]
pub struct Placed {
    pub saga: Saga,
    /// False when the request id matched an existing saga.
    pub created: bool,
}

/// How often a waiter re-reads the store in case a notification was missed.
const WAIT_POLL: Duration = Duration::from_millis(500);

/// The orchestrator's use cases.
pub struct Orchestrator {
    store: Arc<dyn SagaStore>,
    executor: Arc<Executor>,
    hub: Arc<SagaHub>,
}

impl Orchestrator {
    pub fn new(store: Arc<dyn SagaStore>, executor: Arc<Executor>, hub: Arc<SagaHub>) -> Self {
        Orchestrator {
            store,
            executor,
            hub,
        }
    }

    /// Persists the order saga (order and intent of its first step) and
    /// starts it; a duplicate request id returns the existing saga. With
    /// `wait_until`, returns once the saga is terminal or the time is up.
    pub async fn create_order(
        &self,
        order: NewOrder,
        wait_until: Option<Instant>,
    ) -> Result<Placed, AppError> {
        let fingerprint = order.fingerprint();
        let saga_id = uuid::Uuid::now_v7().to_string();
        let order_id = format!("order-{saga_id}");
        let domain = Order {
            order_id,
            customer_id: order.customer_id,
            items: order.items,
            total_cents: order.total_cents,
        };
        let mut saga = engine::start(
            &ORDER_SAGA,
            saga_id,
            order.request_id,
            fingerprint.as_str().to_owned(),
            domain,
            now_ms(),
        );
        saga.version = 1;
        saga.lease = Some(self.executor.new_lease());
        let (saga, created) = match self.store.create(&saga).await? {
            Created::New => {
                tracing::info!(saga_id = %saga.saga_id, request_id = %saga.request_id, total_cents = saga.order.total_cents, "saga created");
                (saga, true)
            }
            Created::Existing(existing) if existing.fingerprint == saga.fingerprint => {
                (*existing, false)
            }
            Created::Existing(_) => return Err(AppError::RequestIdReused(saga.request_id)),
        };
        let saga = match wait_until {
            Some(deadline) => {
                let watcher = self.hub.subscribe(&saga.saga_id);
                if created {
                    self.executor.spawn(saga.clone());
                }
                let done = self.wait(saga, watcher, deadline).await;
                self.hub.release(&done.saga_id);
                done
            }
            None => {
                if created {
                    self.executor.spawn(saga.clone());
                }
                saga
            }
        };
        Ok(Placed { saga, created })
    }

    async fn wait(
        &self,
        mut saga: Saga,
        mut watcher: tokio::sync::watch::Receiver<Option<Saga>>,
        deadline: Instant,
    ) -> Saga {
        loop {
            if saga.status.is_terminal() {
                return saga;
            }
            tokio::select! {
                changed = watcher.changed() => {
                    if changed.is_err() {
                        tokio::time::sleep_until(deadline.min(Instant::now() + WAIT_POLL)).await;
                    }
                    let latest = watcher.borrow_and_update().clone();
                    if let Some(latest) = latest.filter(|l| l.version >= saga.version) {
                        saga = latest;
                    }
                }
                _ = tokio::time::sleep(WAIT_POLL) => {
                    if let Ok(Some(stored)) = self.store.get(&saga.saga_id).await
                        && stored.version >= saga.version
                    {
                        saga = stored;
                    }
                }
                _ = tokio::time::sleep_until(deadline) => return saga,
            }
        }
    }

    pub async fn get(&self, saga_id: &str) -> Result<Saga, AppError> {
        self.store
            .get(saga_id)
            .await?
            .ok_or_else(|| AppError::NotFound(format!("no saga with saga_id {saga_id:?}")))
    }

    pub async fn get_by_request_id(&self, request_id: &str) -> Result<Saga, AppError> {
        self.store
            .get_by_request_id(request_id)
            .await?
            .ok_or_else(|| AppError::NotFound(format!("no saga with request_id {request_id:?}")))
    }

    pub async fn list(
        &self,
        status: Option<SagaStatus>,
        page_size: usize,
        after: Option<Cursor>,
    ) -> Result<Page, AppError> {
        Ok(self.store.list(status, page_size, after).await?)
    }

    /// RetrySaga: gives a FAILED saga's compensations a fresh budget and
    /// drives it again (after a person fixed the cause).
    pub async fn retry(&self, saga_id: &str) -> Result<Saga, AppError> {
        let mut saga = self.get(saga_id).await?;
        if !engine::resume(&mut saga, now_ms()) {
            return Err(AppError::NotRetryable(format!(
                "saga {saga_id} is {}; only FAILED sagas can be retried",
                saga.status.as_str()
            )));
        }
        saga.version += 1;
        saga.lease = Some(self.executor.new_lease());
        self.store.save(&saga).await?;
        tracing::info!(saga_id, "saga resumed by RetrySaga");
        self.executor.spawn(saga.clone());
        Ok(saga)
    }
}
