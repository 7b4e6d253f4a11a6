//! Starting the real services in-process: [`OrchestratorHarness`] and
//! [`ParticipantHarness`] are the one way each is started (on an ephemeral
//! port unless told otherwise), and [`Running`] is what a started service
//! gives back.
//!
//! Each service runs on its own [`Shutdown`], so a test can stop and
//! restart one of them on the same port and storage.

use crate::Storage;
use orchestrator::step::SagaDefinition;
use orchestrator::store::SagaStore;
use participant_kit::faults::Faults;
use participant_kit::{HistoryRetention, Kit};
use service_kit::server::ServeOptions;
use service_kit::shutdown::Shutdown;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;
use tokio::net::TcpListener;
use tokio::task::JoinHandle;

/// One running service.
pub struct Running {
    /// Where the service listens.
    pub addr: SocketAddr,
    shutdown: Shutdown,
    task: Option<JoinHandle<()>>,
}

impl Running {
    /// Stops the service and waits until it no longer serves.
    pub async fn stop(mut self) {
        self.halt().await;
    }

    /// Stops the service in place (its address stays known for a
    /// restart). A server that failed or panicked fails the test here:
    /// each server task panics with the error `serve` returned.
    pub async fn halt(&mut self) {
        self.shutdown.trigger();
        if let Some(task) = self.task.take()
            && let Err(error) = task.await
        {
            panic!("the service at {} failed: {error}", self.addr);
        }
    }

    /// A service at `addr` serving as `serve` does until its shutdown is
    /// triggered; `serve`'s error fails the test (see [`Running::halt`]).
    pub(crate) fn spawn<F, E>(addr: SocketAddr, serve: impl FnOnce(Shutdown) -> F) -> Running
    where
        F: Future<Output = Result<(), E>> + Send + 'static,
        E: std::fmt::Display,
    {
        let shutdown = Shutdown::new();
        let serving = serve(shutdown.clone());
        let task = tokio::spawn(async move {
            if let Err(error) = serving.await {
                panic!("serve on {addr}: {error}");
            }
        });
        Running {
            addr,
            shutdown,
            task: Some(task),
        }
    }
}

/// A server task that already ended by panicking (each server task panics
/// with the error `serve` returned) fails the test when its handle is
/// dropped without [`Running::stop`]: the failure surfaces even if the
/// test never stops the service. Never blocks: a task still running is
/// left as it is, and a test already panicking is not panicked again.
impl Drop for Running {
    fn drop(&mut self) {
        use futures::FutureExt;
        if std::thread::panicking() {
            return;
        }
        let Some(task) = self.task.take() else {
            return;
        };
        if !task.is_finished() {
            return;
        }
        // Finished, so one poll yields its result without waiting.
        if let Some(Err(error)) = task.now_or_never()
            && error.is_panic()
        {
            panic!("the service at {} failed: {error}", self.addr);
        }
    }
}

/// Which participant to start.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Service {
    /// payment-svc.
    Payment,
    /// inventory-svc.
    Inventory,
}

/// Binds `addr`, retrying briefly (a restarted service rebinds its old port).
pub async fn listener(addr: SocketAddr) -> TcpListener {
    // The previous listener on a restarted service's port was just closed.
    for _ in 0..50 {
        if let Ok(l) = TcpListener::bind(addr).await {
            return l;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    panic!("cannot bind {addr}");
}

/// Any free port on the loopback interface.
pub(crate) fn any_port() -> SocketAddr {
    SocketAddr::from(([127, 0, 0, 1], 0))
}

/// Where the orchestrator keeps its sagas.
enum Sagas {
    /// The saga store of this storage, opened with the settings' retention.
    In(Storage),
    /// A store the test built (wrapped to slow it down or make it fail).
    Store(Arc<dyn SagaStore>),
}

/// A change to the orchestrator's settings, applied in order at start.
type Adjust = Box<dyn FnOnce(&mut orchestrator::Settings) + Send>;

/// An orchestrator to start: a saga definition over a store, with the
/// test settings (see [`crate::test_settings`]: fast retries, leases owned
/// by `test-<port>`), open serve options, no console, on a free port —
/// each of which a test may change before [`OrchestratorHarness::start`].
///
/// ```ignore
/// let orchestrator = OrchestratorHarness::new(dir.path(), definition)
///     .retry(patient)
///     .console(console_listener)
///     .start()
///     .await;
/// ```
#[must_use = "nothing runs until start"]
pub struct OrchestratorHarness {
    sagas: Sagas,
    definition: Arc<SagaDefinition>,
    settings: Option<orchestrator::Settings>,
    adjust: Vec<Adjust>,
    options: ServeOptions,
    addr: Option<SocketAddr>,
    console: Option<TcpListener>,
}

impl OrchestratorHarness {
    /// `definition`'s orchestrator with its sagas in `storage`.
    pub fn new(storage: impl Into<Storage>, definition: Arc<SagaDefinition>) -> Self {
        OrchestratorHarness {
            sagas: Sagas::In(storage.into()),
            definition,
            settings: None,
            adjust: Vec::new(),
            options: ServeOptions::default(),
            addr: None,
            console: None,
        }
    }

    /// The orchestrator of the saga whose steps are payment, inventory and
    /// then `more` (steps file entries, e.g. [`crate::generic_step`]), as
    /// the binary builds it from a steps file, with its sagas in `storage`.
    pub fn with_steps(
        storage: impl Into<Storage>,
        payment: SocketAddr,
        inventory: SocketAddr,
        more: &[orchestrator::steps_file::StepSpec],
    ) -> Self {
        Self::new(storage, crate::saga_with_steps(payment, inventory, more))
    }

    /// The order saga's orchestrator over the participants at `payment` and
    /// `inventory`, as the binary builds it, with its sagas in `storage`.
    pub fn order_saga(
        storage: impl Into<Storage>,
        payment: SocketAddr,
        inventory: SocketAddr,
    ) -> Self {
        Self::new(storage, crate::order_saga(payment, inventory))
    }

    /// Keeps the sagas in `store` instead of the storage's own saga store
    /// (tests wrap the real one to slow it down or make it fail precisely).
    pub fn store(mut self, store: Arc<dyn SagaStore>) -> Self {
        self.sagas = Sagas::Store(store);
        self
    }

    /// Starts from `settings` instead of the test settings.
    pub fn settings(mut self, settings: orchestrator::Settings) -> Self {
        self.settings = Some(settings);
        self
    }

    /// Retries as `retry` says.
    pub fn retry(self, retry: orchestrator::executor::RetryPolicy) -> Self {
        self.adjust(move |settings| settings.retry = retry)
    }

    /// Changes the settings as `adjust` does (after [`Self::settings`] and
    /// [`Self::retry`] given before it).
    pub fn adjust(
        mut self,
        adjust: impl FnOnce(&mut orchestrator::Settings) + Send + 'static,
    ) -> Self {
        self.adjust.push(Box::new(adjust));
        self
    }

    /// Serves as `options` say (TLS, admin token, limits).
    pub fn options(mut self, options: ServeOptions) -> Self {
        self.options = options;
        self
    }

    /// Serves the saga console on `listener` too (it stops with the
    /// orchestrator).
    pub fn console(mut self, listener: TcpListener) -> Self {
        self.console = Some(listener);
        self
    }

    /// Listens on `addr` (a restart on the port of an instance just
    /// stopped) instead of a free port.
    pub fn on(mut self, addr: SocketAddr) -> Self {
        self.addr = Some(addr);
        self
    }

    /// Binds, opens the store and serves; returns once the orchestrator
    /// accepts connections.
    pub async fn start(self) -> Running {
        let listener = listener(self.addr.unwrap_or_else(any_port)).await;
        let addr = listener.local_addr().expect("local addr");
        let port = addr.port();
        let mut settings = self
            .settings
            .unwrap_or_else(|| crate::test_settings(crate::fast_retry(), port));
        for adjust in self.adjust {
            adjust(&mut settings);
        }
        let store = match self.sagas {
            Sagas::In(storage) => storage.sagas_with(settings.retention.store()).await,
            Sagas::Store(store) => store,
        };
        let (definition, options, console) = (self.definition, self.options, self.console);
        Running::spawn(addr, |stop| {
            orchestrator::serve_with_console(
                store, definition, settings, options, listener, console, stop,
            )
        })
    }
}

/// A participant to start: payment-svc or inventory-svc over its store in
/// a storage, without faults, served with open options, keeping its
/// history for the default retention, on a free port — each of which a
/// test may change before [`ParticipantHarness::start`].
#[must_use = "nothing runs until start"]
pub struct ParticipantHarness {
    service: Service,
    storage: Storage,
    faults: Arc<Faults>,
    options: ServeOptions,
    history: HistoryRetention,
    addr: Option<SocketAddr>,
}

impl ParticipantHarness {
    /// `service` with its store in `storage`.
    pub fn new(service: Service, storage: impl Into<Storage>) -> Self {
        ParticipantHarness {
            service,
            storage: storage.into(),
            faults: Arc::new(Faults::disabled()),
            options: ServeOptions::default(),
            history: HistoryRetention::default(),
            addr: None,
        }
    }

    /// Injects faults as `faults` says (shared with its `faults.v1` admin
    /// service).
    pub fn faults(mut self, faults: Arc<Faults>) -> Self {
        self.faults = faults;
        self
    }

    /// Serves as `options` say (TLS, admin and service tokens, limits).
    pub fn options(mut self, options: ServeOptions) -> Self {
        self.options = options;
        self
    }

    /// Keeps the operation history as `history` says (its store opened
    /// with the same retention).
    pub fn history(mut self, history: HistoryRetention) -> Self {
        self.history = history;
        self
    }

    /// Listens on `addr` (a restart on the port of a participant just
    /// halted) instead of a free port.
    pub fn on(mut self, addr: SocketAddr) -> Self {
        self.addr = Some(addr);
        self
    }

    /// Binds, opens the store and serves; returns once the participant
    /// accepts connections.
    pub async fn start(self) -> Running {
        let listener = listener(self.addr.unwrap_or_else(any_port)).await;
        let addr = listener.local_addr().expect("local addr");
        let kit = Kit::new(self.faults, self.options).with_history(self.history);
        let keep = kit.history().keep;
        match self.service {
            Service::Payment => {
                let store = self.storage.payment(keep).await;
                Running::spawn(addr, |stop| payment_svc::serve(store, kit, listener, stop))
            }
            Service::Inventory => {
                let store = self.storage.inventory(keep).await;
                Running::spawn(addr, |stop| {
                    inventory_svc::serve(store, kit, listener, stop)
                })
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn running(task: JoinHandle<()>) -> Running {
        Running {
            addr: any_port(),
            shutdown: Shutdown::new(),
            task: Some(task),
        }
    }

    /// Waits (10 s at most) until `task` has ended.
    async fn ended(task: &JoinHandle<()>) {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
        while !task.is_finished() {
            assert!(tokio::time::Instant::now() < deadline, "task still running");
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }

    #[tokio::test]
    #[should_panic(expected = "failed: task")]
    async fn dropping_a_service_whose_server_panicked_fails_the_test() {
        let task = tokio::spawn(async { panic!("payment serve: bind error") });
        ended(&task).await;
        drop(running(task));
    }

    #[tokio::test]
    async fn dropping_a_service_still_serving_or_ended_cleanly_does_not_block_or_fail() {
        let serving = running(tokio::spawn(std::future::pending()));
        let started = std::time::Instant::now();
        drop(serving);
        assert!(started.elapsed() < Duration::from_secs(5), "Drop blocked");
        let task = tokio::spawn(async {});
        ended(&task).await;
        drop(running(task));
    }

    #[tokio::test]
    async fn a_test_already_panicking_is_not_panicked_again() {
        let task = tokio::spawn(async { panic!("serve failed") });
        ended(&task).await;
        let service = running(task);
        // Dropped while unwinding: a second panic would abort the process.
        let unwound = std::panic::catch_unwind(std::panic::AssertUnwindSafe(move || {
            let _service = service;
            panic!("the test's own failure");
        }));
        let payload = unwound.expect_err("the test's panic");
        assert_eq!(
            payload.downcast_ref::<&str>(),
            Some(&"the test's own failure")
        );
    }
}
