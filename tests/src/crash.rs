//! An orchestrator that can be *crashed* in-process: it runs on its own
//! tokio runtime, and [`CrashableOrchestrator::crash`] drops that runtime
//! without any shutdown — its drivers stop between two instructions, leases
//! are not released, nothing is flushed beyond what was already committed.
//! (The chaos soak does the same with real processes and SIGKILL.)

use crate::Storage;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

/// An orchestrator on its own runtime, to be crashed.
pub struct CrashableOrchestrator {
    /// Where it serves gRPC.
    pub addr: SocketAddr,
    runtime: Option<tokio::runtime::Runtime>,
    /// What `serve` returned, once it has (it must not, before the crash).
    ended: Arc<Mutex<Option<Result<(), String>>>>,
}

impl CrashableOrchestrator {
    /// Starts an orchestrator on its own runtime (call from a blocking-safe
    /// context, e.g. inside `tokio::task::spawn_blocking`, or from a
    /// multi-thread test runtime via `block_in_place`).
    pub fn start(
        storage: Storage,
        definition: Arc<orchestrator::step::SagaDefinition>,
        settings: orchestrator::Settings,
    ) -> CrashableOrchestrator {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .expect("runtime");
        let std_listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        std_listener.set_nonblocking(true).expect("nonblocking");
        let addr = std_listener.local_addr().expect("addr");
        let ended = Arc::new(Mutex::new(None));
        let result = ended.clone();
        runtime.spawn(async move {
            let listener = tokio::net::TcpListener::from_std(std_listener).expect("listener");
            let store = storage.sagas().await;
            let shutdown = service_kit::shutdown::Shutdown::new();
            let served = orchestrator::serve(store, definition, settings, listener, shutdown).await;
            if let Ok(mut slot) = result.lock() {
                *slot = Some(served.map_err(|e| e.to_string()));
            }
        });
        CrashableOrchestrator {
            addr,
            runtime: Some(runtime),
            ended,
        }
    }

    /// Stops everything at once, as `kill -9` would. Fails the test if the
    /// server had already stopped on its own (an error, or returning at
    /// all: nothing asked it to).
    pub fn crash(mut self) {
        if let Ok(ended) = self.ended.lock() {
            assert!(
                ended.is_none(),
                "the orchestrator at {} had stopped before the crash: {ended:?}",
                self.addr
            );
        }
        if let Some(runtime) = self.runtime.take() {
            runtime.shutdown_background();
        }
    }
}

impl Drop for CrashableOrchestrator {
    fn drop(&mut self) {
        if let Some(runtime) = self.runtime.take() {
            runtime.shutdown_background();
        }
    }
}
