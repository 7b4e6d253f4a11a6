//! What the two participants' in-memory stores share: the handle one
//! incarnation holds ([`MemParticipantStore`]: each call one store
//! operation, scheduled by the simulated disk and checked against the
//! retention) and the transaction view a rule runs on ([`Tx`]: the
//! operationHistory barrier, and the journal of effects the audit counts).
//! payment.rs and inventory.rs add only their own rules' state and
//! primitives.

use super::history::{Effect, History, MemError};
use crate::disk::Disk;
use crate::events::Events;
use crate::host::Incarnation;
use participant_kit::{HistoryTx, OperationRecord, ParticipantError};
use service_kit::clock::SharedClock;
use std::sync::{Arc, Mutex};

/// The committed state of one participant: its own tables beside the
/// operationHistory and the journal of effects.
pub trait ParticipantState: Default + Send + 'static {
    /// The service's name, as violations report it (`payment-svc`).
    const SERVICE: &'static str;
    /// The name of its simulated disk.
    const DISK: &'static str;
    /// The operationHistory.
    fn history(&mut self) -> &mut History;
    /// Every committed effect on a counter, in order.
    fn effects(&mut self) -> &mut Vec<Effect>;
}

/// One call's view of a participant's state inside its transaction.
pub struct Tx<'s, S> {
    /// The state (a copy until the transaction commits).
    pub state: &'s mut S,
    request_id: String,
    call: &'static str,
    /// The participant's clock at the call.
    pub now_ms: i64,
}

impl<'s, S: ParticipantState> Tx<'s, S> {
    /// The view of `state` for `call` of `request_id` at `now_ms`.
    pub fn new(state: &'s mut S, request_id: &str, call: &'static str, now_ms: i64) -> Self {
        Tx {
            state,
            request_id: request_id.to_owned(),
            call,
            now_ms,
        }
    }

    /// Journals that this call moved `subject`'s counter by `delta`.
    pub fn moved(&mut self, subject: &str, delta: i64) {
        let effect = Effect {
            request_id: self.request_id.clone(),
            call: self.call,
            subject: subject.to_owned(),
            delta,
        };
        self.state.effects().push(effect);
    }
}

impl<S: ParticipantState> HistoryTx for Tx<'_, S> {
    type Error = MemError;

    async fn insert(&mut self, record: &OperationRecord) -> Result<bool, MemError> {
        let now_ms = self.now_ms;
        Ok(self.state.history().insert(record, now_ms))
    }

    async fn insert_or_get(
        &mut self,
        record: &OperationRecord,
    ) -> Result<Option<OperationRecord>, MemError> {
        let now_ms = self.now_ms;
        let history = self.state.history();
        let existing = history.get(&record.request_id, &record.kind);
        if existing.is_none() {
            history.insert(record, now_ms);
        }
        Ok(existing)
    }

    async fn get(
        &mut self,
        request_id: &str,
        kind: &str,
    ) -> Result<Option<OperationRecord>, MemError> {
        Ok(self.state.history().get(request_id, kind))
    }
}

/// A handle on a participant's store for one incarnation.
pub struct MemParticipantStore<S> {
    state: Arc<Mutex<S>>,
    disk: Disk,
    incarnation: Incarnation,
    clock: SharedClock,
    events: Events,
}

impl<S: ParticipantState> MemParticipantStore<S> {
    /// A handle on `state` for `incarnation`, its operations scheduled by
    /// `disk`, its records stamped by `clock`; a call for a request id
    /// whose records the retention deleted is reported to `events`.
    pub fn new(
        state: Arc<Mutex<S>>,
        disk: Disk,
        incarnation: Incarnation,
        clock: SharedClock,
        events: Events,
    ) -> Self {
        MemParticipantStore {
            state,
            disk,
            incarnation,
            clock,
            events,
        }
    }

    /// A fresh store outside any simulated run (its conformance tests).
    pub fn standalone() -> Self {
        Self::new(
            Arc::default(),
            Disk::instant(S::DISK),
            Incarnation::new(),
            service_kit::clock::system(),
            Events::new(),
        )
    }

    /// Runs `call` (named `name`, for `request_id` or "" when it is for
    /// none) on the state, with the participant's clock, as one store
    /// operation.
    pub(super) async fn call<T>(
        &self,
        name: &'static str,
        request_id: &str,
        call: impl FnOnce(&mut S, i64) -> Result<T, ParticipantError>,
    ) -> Result<T, ParticipantError> {
        let (state, now_ms) = (self.state.clone(), self.clock.now_ms());
        let events = self.events.clone();
        let request_id = request_id.to_owned();
        self.disk
            .io(&self.incarnation, name, move || {
                let mut state = state.lock().unwrap_or_else(|p| p.into_inner());
                if state.history().purged.contains(&request_id) {
                    events.violated(
                        "no call past the send window",
                        format!(
                            "{} received {name} {request_id} after the retention deleted its records",
                            S::SERVICE
                        ),
                    );
                }
                call(&mut state, now_ms)
            })
            .await
            .map_err(|e| ParticipantError::Store(e.to_string()))?
    }
}
