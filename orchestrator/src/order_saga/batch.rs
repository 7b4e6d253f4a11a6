//! Several sagas' calls to one participant in one RPC.
//!
//! Why: at concurrency 64 each RPC end costs tens of microseconds of HTTP/2
//! and kernel TCP work on both sides, about as much as the participant's
//! transaction itself (BENCHMARKS.md). The forward calls of many sagas in
//! flight (Charge, Deduct) can share one RPC (ChargeBatch, DeductBatch)
//! without changing what any of them means: the participant applies each
//! call of a batch exactly as the call on its own (its own
//! operationHistory record and transaction, its own status), so a call's
//! outcome, its idempotency and its retries are the same either way.
//!
//! How, with no wait added when there is nothing to share — a call never
//! waits for others to arrive:
//! - A call that finds fewer than [`MAX_IN_FLIGHT`] RPCs in flight and no
//!   call queued goes out at once, on its own (the plain Charge or Deduct),
//!   from the saga's own task: an idle saga is called exactly as without
//!   batching.
//! - Otherwise it queues. When an RPC in flight ends, the calls queued
//!   meanwhile leave together in one batch RPC (up to [`MAX_BATCH`]),
//!   sent by a task of its own, which keeps sending while calls keep
//!   queueing. So batches form only under load, and a call waits at most
//!   for the RPC in flight before it.
//! - A whole batch failing (connection lost, deadline, UNAVAILABLE) fails
//!   each of its calls with that status, which each saga classifies and
//!   retries as it would its own call. A call whose caller gave up (its
//!   wait is bounded by the call deadline plus the connect timeout, as a
//!   single call's is) is left out of the next batch.
//! - A batch holds at most [`MAX_BATCH`] calls and [`MAX_BATCH_BYTES`]
//!   bytes of them. A participant that refuses a batch as a whole before
//!   running any call of it — UNIMPLEMENTED (an older version without the
//!   batch RPC) or RESOURCE_EXHAUSTED (a batch over its request limit) —
//!   gets that batch's calls again on their own, and from then on single
//!   calls only (UNIMPLEMENTED) or batches of half that size.
//!
//! Counted: `saga_participant_batches_total{step}` batch RPCs sent and
//! `saga_participant_batched_calls_total{step}` calls they carried (their
//! ratio is the mean batch size; calls sent on their own are not counted).

use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;
use tokio::sync::oneshot;
use tonic::{Code, Status};

/// RPCs of one kind in flight to one participant before calls queue.
pub const MAX_IN_FLIGHT: usize = 2;
/// Most calls in one batch RPC (the participants accept 1,000).
pub const MAX_BATCH: usize = 256;
/// Most bytes of calls in one batch RPC, at first: far below the
/// participants' default request limit (1 MiB, `--max-request-bytes`).
pub const MAX_BATCH_BYTES: usize = 64 * 1024;

/// A boxed future, as the transport below returns them.
pub type BoxFuture<T> = Pin<Box<dyn Future<Output = T> + Send + 'static>>;

/// What a batch RPC answers: one result per call, in their order, or the
/// status of the RPC as a whole.
pub type BatchReply<R> = Result<Vec<Result<R, Status>>, Status>;

/// The two ways to send one kind of call to a participant.
pub trait Transport: Send + Sync + 'static {
    /// A call's request message (cloned when batched, so that a batch the
    /// participant cannot take can be sent again as single calls).
    type Request: Clone + Send + 'static;
    /// A call's reply message.
    type Reply: Send + 'static;

    /// The call on its own, carrying `traceparent`.
    fn one(
        &self,
        request: Self::Request,
        traceparent: String,
    ) -> BoxFuture<Result<Self::Reply, Status>>;

    /// Several calls in one RPC: one result per call, in their order; `Err`
    /// when the RPC as a whole failed.
    fn many(&self, calls: Vec<(Self::Request, String)>) -> BoxFuture<BatchReply<Self::Reply>>;

    /// A call's size on the wire, in bytes (what a batch's size counts).
    fn size(request: &Self::Request) -> usize;
}

/// Batches one kind of call to one participant. Cheap to clone.
pub struct Batcher<T: Transport> {
    shared: Arc<Shared<T>>,
}

impl<T: Transport> Clone for Batcher<T> {
    fn clone(&self) -> Self {
        Batcher {
            shared: self.shared.clone(),
        }
    }
}

struct Shared<T: Transport> {
    transport: T,
    /// The step whose calls these are (the metrics' label).
    step: &'static str,
    /// How long a queued call waits for its result before it gives up.
    patience: Duration,
    state: Mutex<State<T>>,
}

struct State<T: Transport> {
    /// Calls waiting for the next batch. Not empty only while
    /// [`MAX_IN_FLIGHT`] RPCs are in flight: one of them sends it.
    queue: Vec<Queued<T>>,
    in_flight: usize,
    /// The participant answered UNIMPLEMENTED to a batch: single calls only.
    no_batches: bool,
    /// Most bytes of calls per batch: [`MAX_BATCH_BYTES`], halved each
    /// time the participant refuses a batch as too large.
    max_bytes: usize,
}

struct Queued<T: Transport> {
    request: T::Request,
    /// `T::size(&request)`.
    bytes: usize,
    traceparent: String,
    reply: oneshot::Sender<Result<T::Reply, Status>>,
}

/// Counts one RPC in flight; its drop — also when the call's future is
/// dropped half-way — hands the queue to a sender task.
struct InFlight<T: Transport> {
    shared: Arc<Shared<T>>,
}

impl<T: Transport> Drop for InFlight<T> {
    fn drop(&mut self) {
        let next = {
            let mut state = self.shared.state();
            state.in_flight -= 1;
            self.shared.next_batch(&mut state)
        };
        if let Some(batch) = next {
            // Outside a runtime (it is shutting down) the batch is dropped:
            // its callers see UNAVAILABLE.
            if let Ok(runtime) = tokio::runtime::Handle::try_current() {
                runtime.spawn(send_batches(self.shared.clone(), batch));
            }
        }
    }
}

impl<T: Transport> Batcher<T> {
    /// `step`'s calls sent through `transport`; a queued call waits at
    /// most `patience` (the call deadline plus the connect timeout: what a
    /// single call may take) before it fails DEADLINE_EXCEEDED.
    pub fn new(step: &'static str, transport: T, patience: Duration) -> Self {
        Batcher {
            shared: Arc::new(Shared {
                transport,
                step,
                patience,
                state: Mutex::new(State {
                    queue: Vec::new(),
                    in_flight: 0,
                    no_batches: false,
                    max_bytes: MAX_BATCH_BYTES,
                }),
            }),
        }
    }

    /// Makes one call: at once on its own when the way is free, else in
    /// the next batch.
    pub async fn call(&self, request: T::Request, traceparent: String) -> Result<T::Reply, Status> {
        let route = {
            let mut state = self.shared.state();
            if state.in_flight < MAX_IN_FLIGHT && state.queue.is_empty() {
                state.in_flight += 1;
                Ok((request, traceparent))
            } else {
                let (reply, waiting) = oneshot::channel();
                state.queue.push(Queued {
                    bytes: T::size(&request),
                    request,
                    traceparent,
                    reply,
                });
                Err(waiting)
            }
        };
        let waiting = match route {
            Ok((request, traceparent)) => {
                let _in_flight = InFlight {
                    shared: self.shared.clone(),
                };
                return self.shared.transport.one(request, traceparent).await;
            }
            Err(waiting) => waiting,
        };
        match tokio::time::timeout(self.shared.patience, waiting).await {
            Ok(Ok(result)) => result,
            Ok(Err(_)) => Err(Status::unavailable(
                "the batch carrying this call was dropped",
            )),
            Err(_) => Err(Status::deadline_exceeded(format!(
                "no reply within {:?} (queued for a batch)",
                self.shared.patience
            ))),
        }
    }

    /// Calls queued right now (for tests and metrics).
    pub fn queued(&self) -> usize {
        self.shared.state().queue.len()
    }
}

impl<T: Transport> Shared<T> {
    fn state(&self) -> MutexGuard<'_, State<T>> {
        // Every update of `State` is complete before any call that could
        // panic, so a poisoned lock still holds a consistent state.
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Takes the next batch off the queue, counting its RPC in flight; the
    /// calls whose callers gave up are dropped from it.
    fn next_batch(&self, state: &mut State<T>) -> Option<Vec<Queued<T>>> {
        state.queue.retain(|q| !q.reply.is_closed());
        if state.queue.is_empty() || state.in_flight >= MAX_IN_FLIGHT {
            return None;
        }
        state.in_flight += 1;
        // As many calls as fit in the batch's bytes (always one at least).
        let mut bytes = 0;
        let take = state
            .queue
            .iter()
            .take(MAX_BATCH)
            .take_while(|q| {
                bytes += q.bytes;
                bytes <= state.max_bytes
            })
            .count()
            .max(1);
        Some(state.queue.drain(..take).collect())
    }
}

/// Sends `batch`, hands each call its result, and goes on with the calls
/// queued meanwhile until the queue is empty.
async fn send_batches<T: Transport>(shared: Arc<Shared<T>>, mut batch: Vec<Queued<T>>) {
    loop {
        send_batch(&shared, batch).await;
        let next = {
            let mut state = shared.state();
            state.in_flight -= 1;
            shared.next_batch(&mut state)
        };
        match next {
            Some(more) => batch = more,
            None => return,
        }
    }
}

async fn send_batch<T: Transport>(shared: &Shared<T>, batch: Vec<Queued<T>>) {
    let no_batches = shared.state().no_batches;
    if batch.len() == 1 || no_batches {
        send_singles(shared, batch).await;
        return;
    }
    let calls: Vec<_> = batch
        .iter()
        .map(|q| (q.request.clone(), q.traceparent.clone()))
        .collect();
    let count = calls.len();
    metrics::counter!("saga_participant_batches_total", "step" => shared.step).increment(1);
    metrics::counter!("saga_participant_batched_calls_total", "step" => shared.step)
        .increment(count as u64);
    match shared.transport.many(calls).await {
        Ok(results) => {
            let got = results.len();
            let mut results = results.into_iter();
            for q in batch {
                let result = results.next().unwrap_or_else(|| {
                    Err(Status::internal(format!(
                        "the participant answered {got} results to a batch of {count} calls"
                    )))
                });
                let _ = q.reply.send(result);
            }
        }
        // Refused as a whole before any call of it ran: the batch RPC does
        // not exist there (an older participant), or the batch is over the
        // participant's request limit. Its calls go again, on their own.
        Err(status) if matches!(status.code(), Code::Unimplemented | Code::ResourceExhausted) => {
            {
                let mut state = shared.state();
                if status.code() == Code::Unimplemented {
                    state.no_batches = true;
                    tracing::info!(
                        error = status.message(),
                        "the participant has no batch RPC: single calls from now on"
                    );
                } else {
                    let bytes: usize = batch.iter().map(|q| q.bytes).sum();
                    state.max_bytes = state.max_bytes.min(bytes / 2).max(1);
                    tracing::info!(
                        error = status.message(),
                        bytes,
                        max_bytes = state.max_bytes,
                        "a batch over the participant's request limit: smaller batches from now on"
                    );
                }
            }
            send_singles(shared, batch).await;
        }
        Err(status) => {
            for q in batch {
                let _ = q
                    .reply
                    .send(Err(Status::new(status.code(), status.message())));
            }
        }
    }
}

/// Sends each call of `batch` on its own, concurrently.
async fn send_singles<T: Transport>(shared: &Shared<T>, batch: Vec<Queued<T>>) {
    let singles = batch.into_iter().map(|q| async move {
        let result = shared.transport.one(q.request, q.traceparent).await;
        let _ = q.reply.send(result);
    });
    futures::future::join_all(singles).await;
}

#[cfg(test)]
mod tests;
