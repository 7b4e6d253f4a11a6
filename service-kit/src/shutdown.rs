//! Graceful shutdown as a value: one [`Shutdown`] is cloned into every task
//! that must stop; triggering it wakes them all, and late subscribers see it
//! immediately.
//!
//! Triggering it is also the first moment of the drain: the server's
//! [`Readiness`](crate::health::Readiness) reads this very flag, so its
//! health answers NOT_SERVING from the trigger on, with nothing to be told
//! and no task in between, while the server keeps answering until the work
//! in flight has finished ([`crate::server::GrpcServer::run`]).

use tokio::sync::watch;

/// A shutdown signal shared by clones.
#[derive(Clone, Debug)]
pub struct Shutdown {
    tx: std::sync::Arc<watch::Sender<bool>>,
}

impl Default for Shutdown {
    fn default() -> Self {
        Self::new()
    }
}

impl Shutdown {
    /// A signal nobody triggered yet.
    pub fn new() -> Self {
        let (tx, _rx) = watch::channel(false);
        Shutdown {
            tx: std::sync::Arc::new(tx),
        }
    }

    /// Asks everything holding a clone to stop; readiness reads
    /// NOT_SERVING from now on.
    pub fn trigger(&self) {
        self.tx.send_replace(true);
    }

    /// Whether [`Shutdown::trigger`] was called.
    pub fn is_triggered(&self) -> bool {
        *self.tx.borrow()
    }

    /// Resolves once [`Shutdown::trigger`] was called (at once if it was).
    pub async fn wait(&self) {
        let mut rx = self.tx.subscribe();
        // An error means the sender is gone, which cannot happen while
        // `self` holds it; either way there is nothing left to wait for.
        let _ = rx.wait_for(|stop| *stop).await;
    }

    /// Triggers on SIGINT or SIGTERM.
    pub fn on_signals(&self) {
        let this = self.clone();
        tokio::spawn(async move {
            wait_for_signal().await;
            tracing::info!("shutdown signal received");
            this.trigger();
        });
    }
}

async fn wait_for_signal() {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{SignalKind, signal};
        match signal(SignalKind::terminate()) {
            Ok(mut term) => {
                tokio::select! {
                    _ = tokio::signal::ctrl_c() => {}
                    _ = term.recv() => {}
                }
            }
            Err(error) => {
                tracing::warn!(%error, "cannot listen for SIGTERM; only SIGINT stops the service");
                let _ = tokio::signal::ctrl_c().await;
            }
        }
    }
    #[cfg(not(unix))]
    {
        let _ = tokio::signal::ctrl_c().await;
    }
}
