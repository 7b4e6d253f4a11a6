//! The orchestrator's use cases, independent of gRPC (and of HTTP: the
//! console reads through the same ones): create an order saga
//! (idempotently), look sagas up, list and count them, follow one, show what
//! the participants recorded for it, retry a FAILED one.

use crate::engine;
use crate::executor::{Executor, Slot};
use crate::hub::SagaHub;
use crate::saga::{Order, OrderItem, Saga, SagaStatus};
use crate::step::ParticipantRecord;
use crate::store::{Created, Cursor, Page, SagaFilter, SagaStore, StatusCounts, StoreError};
use futures::Stream;
use service_kit::fingerprint::Fingerprint;
use service_kit::shutdown::Shutdown;
use std::sync::Arc;
use std::time::Duration;
use tokio::time::Instant;

/// Where a saga's driver sends its final state (see
/// [`Executor::spawn_reporting`]).
type Finished = tokio::sync::oneshot::Receiver<Saga>;

/// A validated CreateOrder.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NewOrder {
    /// The client's idempotency key.
    pub request_id: String,
    /// Who pays.
    pub customer_id: String,
    /// What is ordered (1 to 100 lines).
    pub items: Vec<OrderItem>,
    /// Σ quantity × unit price, checked for overflow.
    pub total_cents: i64,
    /// The caller's W3C trace id (from `traceparent`), if it sent one.
    pub trace_id: Option<String>,
}

impl NewOrder {
    /// The digest of what a duplicate CreateOrder must repeat exactly (a
    /// differing field is named from the stored order, [`order_fields`]).
    fn fingerprint(&self) -> String {
        let items: Vec<_> = self
            .items
            .iter()
            .map(|i| (&i.product_id, i.quantity, i.unit_price_cents))
            .collect();
        Fingerprint::digest_of([
            ("customer_id", self.customer_id.clone()),
            ("items", format!("{items:?}")),
        ])
    }
}

/// An order's parameters as named fields, for saying which one a reused
/// request id changed (`items[0].quantity: 3 recorded, 5 received`).
fn order_fields(customer_id: &str, items: &[OrderItem]) -> Vec<(String, String)> {
    let mut fields = vec![
        ("customer_id".to_owned(), customer_id.to_owned()),
        ("items".to_owned(), items.len().to_string()),
    ];
    for (i, item) in items.iter().enumerate() {
        fields.push((format!("items[{i}].product_id"), item.product_id.clone()));
        fields.push((format!("items[{i}].quantity"), item.quantity.to_string()));
        fields.push((
            format!("items[{i}].unit_price_cents"),
            item.unit_price_cents.to_string(),
        ));
    }
    fields
}

/// Why a use case failed.
#[derive(Debug, thiserror::Error)]
pub enum AppError {
    /// The request id has a saga with other parameters (ALREADY_EXISTS).
    #[error("request_id {request_id:?} was reused with different parameters: {difference}")]
    RequestIdReused {
        /// The reused key.
        request_id: String,
        /// Which field differs: `items[0].quantity: 3 recorded, 5 received`.
        difference: String,
    },
    #[error("{0}")]
    /// No such saga (NOT_FOUND).
    NotFound(String),
    #[error("{0}")]
    /// The saga is not in a state the call applies to (FAILED_PRECONDITION).
    NotRetryable(String),
    #[error("too many sagas in flight on this orchestrator (cap {0}); retry later")]
    /// This instance drives as many sagas as it may (RESOURCE_EXHAUSTED).
    Saturated(usize),
    #[error(transparent)]
    /// The store failed (UNAVAILABLE, or ABORTED on a conflict).
    Store(#[from] StoreError),
}

/// What one step's participant recorded for a saga.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StepRecords {
    /// The step's name (`payment`, `inventory`).
    pub step: String,
    /// The request id the records are under (`<saga_id>:<step>`).
    pub request_id: String,
    /// Oldest first, or why the participant could not be read.
    pub records: Result<Vec<ParticipantRecord>, String>,
}

/// The result of CreateOrder.
#[derive(Debug, Clone)]
pub struct Placed {
    /// The saga (terminal when `wait` was asked and it finished in time).
    pub saga: Saga,
    /// False when the request id matched an existing saga.
    pub created: bool,
}

/// Where new saga ids come from: a UUID v7 by default (the system clock and
/// the OS's randomness, so ids sort by creation time); a simulation, which
/// must be a function of its seed, gives a seeded source
/// ([`Orchestrator::with_saga_ids`]).
pub type SagaIds = Arc<dyn Fn() -> uuid::Uuid + Send + Sync>;

/// How often a waiter re-reads the store in case a notification was missed.
const WAIT_POLL: Duration = Duration::from_millis(500);

/// A hub subscription that unsubscribes when dropped.
struct Watcher {
    hub: Arc<SagaHub>,
    saga_id: String,
    rx: tokio::sync::watch::Receiver<Option<Saga>>,
}

impl Watcher {
    fn new(hub: Arc<SagaHub>, saga_id: &str) -> Self {
        let rx = hub.subscribe(saga_id);
        Watcher {
            hub,
            saga_id: saga_id.to_owned(),
            rx,
        }
    }
}

impl Drop for Watcher {
    fn drop(&mut self) {
        // Our receiver still counts until this returns; release() only
        // forgets the saga once no receiver is left, so swap ours out first.
        self.rx = tokio::sync::watch::channel(None).1;
        self.hub.release(&self.saga_id);
    }
}

/// The orchestrator's use cases.
pub struct Orchestrator {
    store: Arc<dyn SagaStore>,
    executor: Arc<Executor>,
    hub: Arc<SagaHub>,
    shutdown: Shutdown,
    retry_window: Option<Duration>,
    saga_ids: Option<SagaIds>,
}

impl Orchestrator {
    /// The use cases over `store`, driving sagas with `executor`.
    pub fn new(
        store: Arc<dyn SagaStore>,
        executor: Arc<Executor>,
        hub: Arc<SagaHub>,
        shutdown: Shutdown,
    ) -> Self {
        Orchestrator {
            store,
            executor,
            hub,
            shutdown,
            retry_window: None,
            saga_ids: None,
        }
    }

    /// New sagas take their ids from `ids` instead of a UUID v7.
    pub fn with_saga_ids(mut self, ids: SagaIds) -> Self {
        self.saga_ids = Some(ids);
        self
    }

    /// A new saga's id.
    fn new_saga_id(&self) -> String {
        match &self.saga_ids {
            Some(ids) => ids().to_string(),
            None => uuid::Uuid::now_v7().to_string(),
        }
    }

    /// RetrySaga refuses a saga created longer than `window` ago (see
    /// [`crate::retention::RetentionSettings::retry_window`]); `None`: no
    /// limit.
    pub fn with_retry_window(mut self, window: Option<Duration>) -> Self {
        self.retry_window = window;
        self
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
        let saga_id = self.new_saga_id();
        let order_id = format!("order-{saga_id}");
        let domain = Order {
            order_id,
            customer_id: order.customer_id,
            items: order.items,
            total_cents: order.total_cents,
        };
        let mut saga = engine::start(
            self.executor.definition().names(),
            saga_id,
            order.request_id,
            fingerprint,
            domain,
            self.executor.clock().now_ms(),
        );
        saga.version = 1;
        saga.lease = Some(self.executor.new_lease());
        saga.client_trace_id = order.trace_id;
        saga.stamp_history(self.executor.owner());
        // A place among the in-flight sagas is reserved before anything is
        // stored, so a refusal at the cap leaves no trace. (A duplicate of an
        // existing saga needs no place: it is answered from the store.)
        let Some(slot) = self.executor.reserve() else {
            return match self.store.get_by_request_id(&saga.request_id).await? {
                Some(existing) => self.duplicate(existing, &saga, wait_until).await,
                None => Err(AppError::Saturated(self.executor.max_in_flight())),
            };
        };
        let (created, finished) = self
            .insert_and_start(saga.clone(), slot, wait_until.is_some())
            .await?;
        match created {
            Created::New => {
                let saga = match wait_until {
                    Some(deadline) => self.wait_for_driver(saga, finished, deadline).await,
                    None => saga,
                };
                Ok(Placed {
                    saga,
                    created: true,
                })
            }
            Created::Existing(existing) => self.duplicate(*existing, &saga, wait_until).await,
        }
    }

    /// Inserts `saga` and, when it is new, starts driving it — on a task of
    /// its own, so that both happen whatever becomes of the CreateOrder
    /// call: a caller that goes away (its deadline passes, it disconnects)
    /// drops the request's future, and had the insert and the start been
    /// awaited there, a saga stored but never started would wait for its
    /// own lease to expire before the recovery sweep picked it up.
    ///
    /// With `report`, the driver of a new saga also sends its final state
    /// on the returned channel (see [`Executor::spawn_reporting`]).
    async fn insert_and_start(
        &self,
        saga: Saga,
        slot: Slot,
        report: bool,
    ) -> Result<(Created, Option<Finished>), AppError> {
        let (store, executor) = (self.store.clone(), self.executor.clone());
        let task = tokio::spawn(async move {
            let created = store.create(&saga).await?;
            let mut finished = None;
            if created == Created::New {
                tracing::info!(saga_id = %saga.saga_id, request_id = %saga.request_id, total_cents = saga.order.total_cents, "saga created");
                metrics::counter!("saga_started_total").increment(1);
                if report {
                    finished = executor.spawn_reporting(saga, slot);
                } else {
                    executor.spawn(saga, slot);
                }
            }
            Ok::<_, StoreError>((created, finished))
        });
        match task.await {
            Ok(created) => Ok(created?),
            Err(error) => Err(AppError::Store(StoreError::Unavailable(format!(
                "the task storing the saga failed: {error}"
            )))),
        }
    }

    /// Answers a CreateOrder whose request id already has a saga.
    async fn duplicate(
        &self,
        existing: Saga,
        asked: &Saga,
        wait_until: Option<Instant>,
    ) -> Result<Placed, AppError> {
        if existing.fingerprint != asked.fingerprint {
            let recorded = order_fields(&existing.order.customer_id, &existing.order.items);
            let asked_fields = order_fields(&asked.order.customer_id, &asked.order.items);
            let difference = service_kit::fingerprint::first_difference(&recorded, &asked_fields)
                .unwrap_or_else(|| "the parameters differ".to_owned());
            return Err(AppError::RequestIdReused {
                request_id: asked.request_id.clone(),
                difference,
            });
        }
        let saga = match wait_until {
            Some(deadline) => {
                let mut watcher = Watcher::new(self.hub.clone(), &existing.saga_id);
                self.wait(existing, &mut watcher, deadline).await
            }
            None => existing,
        };
        Ok(Placed {
            saga,
            created: false,
        })
    }

    /// Waits for the driver of a saga this call created to report its final
    /// state. If the driver stops early (superseded, shutting down) the
    /// wait goes on through the hub and the store; at the deadline it
    /// answers with the latest stored state.
    async fn wait_for_driver(
        &self,
        created: Saga,
        finished: Option<Finished>,
        deadline: Instant,
    ) -> Saga {
        if let Some(finished) = finished {
            tokio::select! {
                biased;
                done = finished => if let Ok(saga) = done {
                    return saga;
                },
                _ = tokio::time::sleep_until(deadline) => {
                    return match self.store.get(&created.saga_id).await {
                        Ok(Some(stored)) if stored.version > created.version => stored,
                        _ => created,
                    };
                }
            }
        }
        // Subscribe before reading, so no change between the two is missed.
        let mut watcher = Watcher::new(self.hub.clone(), &created.saga_id);
        let latest = match self.store.get(&created.saga_id).await {
            Ok(Some(stored)) if stored.version > created.version => stored,
            _ => created,
        };
        self.wait(latest, &mut watcher, deadline).await
    }

    async fn wait(&self, mut saga: Saga, watcher: &mut Watcher, deadline: Instant) -> Saga {
        loop {
            if saga.status.is_terminal() {
                return saga;
            }
            tokio::select! {
                biased;
                newer = self.newer(&saga, watcher) => match newer {
                    Some(newer) => saga = newer,
                    None => return saga,
                },
                _ = tokio::time::sleep_until(deadline) => return saga,
            }
        }
    }

    /// The next version of `seen` after it, from the hub or (every
    /// [`WAIT_POLL`], for sagas driven elsewhere) the store. `None` at
    /// shutdown.
    async fn newer(&self, seen: &Saga, watcher: &mut Watcher) -> Option<Saga> {
        loop {
            tokio::select! {
                biased;
                changed = watcher.rx.changed() => {
                    if changed.is_err() {
                        // The hub forgot this saga; rely on polling.
                        tokio::time::sleep(WAIT_POLL).await;
                    }
                    let latest = watcher.rx.borrow_and_update().clone();
                    if let Some(latest) = latest.filter(|l| l.version > seen.version) {
                        return Some(latest);
                    }
                }
                _ = tokio::time::sleep(WAIT_POLL) => {
                    if let Ok(Some(stored)) = self.store.get(&seen.saga_id).await
                        && stored.version > seen.version
                    {
                        return Some(stored);
                    }
                }
                _ = self.shutdown.wait() => return None,
            }
        }
    }

    /// WatchSaga: the saga now, then every newer persisted state, ending
    /// with the terminal one (or at shutdown).
    pub async fn watch(
        self: &Arc<Self>,
        saga_id: &str,
    ) -> Result<impl Stream<Item = Saga> + Send + 'static, AppError> {
        // Subscribe before reading, so no change between the two is missed.
        let watcher = Watcher::new(self.hub.clone(), saga_id);
        let first = self.get(saga_id).await?;
        let state = (self.clone(), watcher, Some(first), None::<Saga>);
        Ok(futures::stream::unfold(
            state,
            |(app, mut watcher, pending, last)| async move {
                if let Some(saga) = pending {
                    return Some((saga.clone(), (app, watcher, None, Some(saga))));
                }
                let last = last?;
                if last.status.is_terminal() {
                    return None;
                }
                let next = app.newer(&last, &mut watcher).await?;
                Some((next.clone(), (app, watcher, None, Some(next))))
            },
        ))
    }

    /// One saga by id; NOT_FOUND when there is none.
    pub async fn get(&self, saga_id: &str) -> Result<Saga, AppError> {
        self.store
            .get(saga_id)
            .await?
            .ok_or_else(|| AppError::NotFound(format!("no saga with saga_id {saga_id:?}")))
    }

    /// The saga a CreateOrder request id created; NOT_FOUND when there is none.
    pub async fn get_by_request_id(&self, request_id: &str) -> Result<Saga, AppError> {
        self.store
            .get_by_request_id(request_id)
            .await?
            .ok_or_else(|| AppError::NotFound(format!("no saga with request_id {request_id:?}")))
    }

    /// A page of the sagas `filter` admits, newest first.
    pub async fn list(
        &self,
        filter: &SagaFilter,
        page_size: usize,
        after: Option<Cursor>,
    ) -> Result<Page, AppError> {
        Ok(self.store.list(filter, page_size, after).await?)
    }

    /// How many sagas are in each status.
    pub async fn counts(&self) -> Result<StatusCounts, AppError> {
        Ok(self.store.count_by_status().await?)
    }

    /// What each step's participant recorded under the step's request id,
    /// read from the participants at once (an unreachable one is reported
    /// in its step, not as a failure of the whole read).
    pub async fn records(&self, saga_id: &str) -> Result<Vec<StepRecords>, AppError> {
        let saga = self.get(saga_id).await?;
        let definition = self.executor.definition();
        let reads = saga.steps.iter().map(|step| async {
            let records = match definition.step(&step.name) {
                Some(defined) => defined.records(&saga, step).await,
                None => Err(format!(
                    "step {:?} is not in this orchestrator's saga definition",
                    step.name
                )),
            };
            StepRecords {
                step: step.name.clone(),
                request_id: step.request_id.clone(),
                records,
            }
        });
        Ok(futures::future::join_all(reads).await)
    }

    /// RetrySaga: gives a FAILED saga's compensations a fresh budget and
    /// drives it again (after a person fixed the cause).
    pub async fn retry(&self, saga_id: &str) -> Result<Saga, AppError> {
        let mut saga = self.get(saga_id).await?;
        if saga.status == SagaStatus::Failed {
            self.check_retry_window(&saga)?;
        }
        if !engine::resume(&mut saga, self.executor.clock().now_ms()) {
            return Err(AppError::NotRetryable(format!(
                "saga {saga_id} is {}; only FAILED sagas can be retried",
                saga.status.as_str()
            )));
        }
        let slot = self
            .executor
            .reserve()
            .ok_or(AppError::Saturated(self.executor.max_in_flight()))?;
        saga.version += 1;
        saga.attention = None;
        saga.lease = Some(self.executor.new_lease());
        saga.stamp_history(self.executor.owner());
        if let Err(error) = self.store.save(&saga).await {
            // A save whose reply was lost did resume it.
            if !self.executor.landed(&mut saga, &error).await {
                return Err(error.into());
            }
        }
        tracing::info!(saga_id, "saga resumed by RetrySaga");
        self.executor.spawn(saga.clone(), slot);
        Ok(saga)
    }

    /// Refuses a retry past the retry window: the participants' records of
    /// the saga's steps may be gone by now.
    fn check_retry_window(&self, saga: &Saga) -> Result<(), AppError> {
        let Some(window) = self.retry_window else {
            return Ok(());
        };
        let age_ms = self
            .executor
            .clock()
            .now_ms()
            .saturating_sub(saga.created_at_ms)
            .max(0);
        let age = Duration::from_millis(u64::try_from(age_ms).unwrap_or(0));
        if age <= window {
            return Ok(());
        }
        use service_kit::limits::format_duration;
        Err(AppError::NotRetryable(format!(
            "saga {} was created {} ago, past the retry window of {} (the participants' \
             history retention less the time a retry's calls may take): their records of its \
             steps may be gone, so a refund or restock now could not tell done from never \
             done; reconcile it by hand",
            saga.saga_id,
            format_duration(age),
            format_duration(window)
        )))
    }
}
