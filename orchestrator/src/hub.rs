//! In-process notification of saga changes, so a `CreateOrder` with `wait`
//! wakes as soon as its saga is terminal instead of polling the store.
//!
//! It is an optimisation only: waiters also re-read the store periodically,
//! so a saga driven by another process (or a notification that raced the
//! subscription) is still seen.

use crate::saga::Saga;
use std::collections::HashMap;
use std::sync::Mutex;
use tokio::sync::watch;

/// Latest saga state per saga id, for those someone is waiting on.
#[derive(Default)]
pub struct SagaHub {
    watchers: Mutex<HashMap<String, watch::Sender<Option<Saga>>>>,
}

impl SagaHub {
    /// An empty hub.
    pub fn new() -> Self {
        Self::default()
    }

    /// Starts watching `saga_id`.
    pub fn subscribe(&self, saga_id: &str) -> watch::Receiver<Option<Saga>> {
        let Ok(mut watchers) = self.watchers.lock() else {
            // A poisoned lock only loses notifications; waiters still poll.
            return watch::channel(None).1;
        };
        watchers
            .entry(saga_id.to_owned())
            .or_insert_with(|| watch::channel(None).0)
            .subscribe()
    }

    /// Tells waiters about a persisted state of `saga`.
    pub fn publish(&self, saga: &Saga) {
        let Ok(watchers) = self.watchers.lock() else {
            return;
        };
        if let Some(tx) = watchers.get(&saga.saga_id) {
            tx.send_replace(Some(saga.clone()));
        }
    }

    /// Forgets `saga_id` once nobody watches it any more.
    pub fn release(&self, saga_id: &str) {
        let Ok(mut watchers) = self.watchers.lock() else {
            return;
        };
        if watchers
            .get(saga_id)
            .is_some_and(|tx| tx.receiver_count() == 0)
        {
            watchers.remove(saga_id);
        }
    }

    /// Number of sagas being watched (for tests and metrics).
    pub fn watched(&self) -> usize {
        self.watchers.lock().map(|w| w.len()).unwrap_or(0)
    }
}
