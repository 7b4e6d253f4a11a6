//! Call batching, the orchestrator's side: several sagas' Acts (or
//! Compensates) to one participant sent as one ActBatch (CompensateBatch)
//! RPC of `participant.v1.SagaStepService`, by a [`Batcher`] per step and
//! kind of call. The participant's side, which runs each call of a batch
//! on its own, is `participant_kit::batch`; the rules both keep are in
//! docs/participant-protocol.md ("Batches").
//!
//! Why: at concurrency 64 each RPC end costs tens of microseconds of HTTP/2
//! and kernel TCP work on both sides, about as much as the participant's
//! transaction itself (BENCHMARKS.md). The calls of many sagas in flight
//! can share one RPC without changing what any of them means: the
//! participant applies each call of a batch exactly as the call on its own
//! (its own operationHistory record and transaction, its own status), so a
//! call's outcome, its idempotency and its retries are the same either way.
//! Every step is batched the same way, whoever wrote its participant.
//!
//! How, with no wait added when there is nothing to share — a call never
//! waits for others to arrive, beyond one turn of the runtime:
//! - A call that finds fewer than [`MAX_IN_FLIGHT`] RPCs in flight waits
//!   one turn of the runtime (`yield_now`) for company. Then, when no call
//!   queued behind it meanwhile, it goes out on its own (the plain Act or
//!   Compensate) from the saga's own task — so an idle saga is called
//!   exactly as without batching; else it leaves with them in one batch,
//!   sent by a task of its own (their RPC must not end with this caller).
//!   Why the turn: the calls of a step arrive in bursts, each batch's reply
//!   waking its sagas together to call their next step; without it the
//!   first two of every burst went alone, and most RPCs carried one call
//!   (at c64 with 3 steps, ~70% of the RPCs for ~12% of the calls). With
//!   it (same-minutes A/B): 3,486 → 4,147 sagas/s at c64, CPU per saga
//!   −12% (orchestrator) and −16% (participants), idle sagas unchanged.
//! - A call that finds [`MAX_IN_FLIGHT`] RPCs in flight, or another call
//!   waiting its turn, queues. When an RPC in flight ends, the calls queued
//!   meanwhile leave together in one batch RPC, sent by a task of its own.
//!   So batches form only under load. A call waits in the queue at most
//!   [`FLUSH_AFTER`]: if the RPCs in flight are slower than that (a slow
//!   participant), it has the queue sent at once, past the in-flight
//!   limit — it too by a task of its own, so that no batch's RPC ends with
//!   the caller that formed it.
//! - **A call takes no longer than it would alone.** A batch's deadline is
//!   the call deadline less the time its oldest call queued, and a queued
//!   call gives up (DEADLINE_EXCEEDED, retried) after the call deadline plus
//!   the connect timeout, which is what a single call may take — the bound
//!   the lease is sized for (`config.rs`). A call whose caller gave up is
//!   left out of the batch.
//! - A batch failing as a whole (connection lost, deadline, UNAVAILABLE)
//!   fails each of its calls with that status, which each saga classifies
//!   and retries as it would its own call. A status that would read as a
//!   business refusal describes the RPC, not any call, so it reaches the
//!   calls as UNKNOWN (retried, never taken for a refusal that needs no
//!   compensation); so does an answer with the wrong number of results,
//!   and a result whose request id is not its call's.
//! - **A batch never dooms its calls by its deadline alone.** One deadline
//!   covers all the calls of a batch: on a slow store (a MongoDB under
//!   write conflicts on hot documents) a large batch can miss it on every
//!   retry although each call alone would fit. So a batch that ends
//!   DEADLINE_EXCEEDED halves the number of calls later batches carry
//!   (down to one: single calls), and the retries of its calls go out in
//!   those smaller batches.
//! - A batch holds at most [`MAX_BATCH`] calls and [`MAX_BATCH_BYTES`]
//!   bytes of them. A participant that refuses a batch before running any
//!   call of it — UNIMPLEMENTED (a participant without the batch calls,
//!   which are optional), INVALID_ARGUMENT (more calls than it takes) or
//!   "decoded message length too large" (over its request limit) — gets
//!   that batch's calls again on their own at once, and from then on
//!   single calls only, or batches of half that many calls or bytes (never
//!   under 1 KiB, the smallest limit a participant accepts). Not forever:
//!   a participant is upgraded or restarted with a larger limit while the
//!   orchestrator runs, so [`RETRY_BATCHES_AFTER`] after the last refusal
//!   batches are tried again, or the budgets double (up to their maxima);
//!   a refused try costs one batch resent on its own, once per period.
//!
//! Counted: `saga_participant_batches_total{step}` batch RPCs sent and
//! `saga_participant_batched_calls_total{step}` calls they carried (their
//! ratio is the mean batch size; calls sent on their own are not counted),
//! and `saga_participant_batches_halved_total{step}` batches that missed
//! their deadline (each halving the calls of later batches).

use super::reply::{is_refusal, over_size_limit};
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;
use tokio::sync::oneshot;
use tokio::time::Instant;
use tonic::{Code, Status};

/// RPCs of one kind in flight to one participant before calls queue.
pub const MAX_IN_FLIGHT: usize = 2;
/// Longest a call waits in the queue for an RPC in flight to end.
pub const FLUSH_AFTER: Duration = Duration::from_millis(50);
/// Most calls in one batch RPC, at first (the participants of this
/// repository accept 1,000).
pub const MAX_BATCH: usize = 256;
/// Most bytes of calls in one batch RPC, at first: far below the
/// participants' default request limit (1 MiB, `--max-request-bytes`).
pub const MAX_BATCH_BYTES: usize = 64 * 1024;
/// The smallest byte budget: the smallest request limit a participant
/// accepts (`service_kit::server::MIN_MAX_REQUEST_BYTES`).
pub const MIN_BATCH_BYTES: usize = service_kit::server::MIN_MAX_REQUEST_BYTES;
/// How long after a participant's last refusal of a batch the batcher
/// tries batches again (after UNIMPLEMENTED) or doubles its byte budget
/// (after a batch over the request limit).
pub const RETRY_BATCHES_AFTER: Duration = Duration::from_secs(60);
/// The shortest deadline a batch is sent with.
const MIN_BATCH_DEADLINE: Duration = Duration::from_millis(100);

/// A boxed future, as the transport below returns them.
pub type BoxFuture<T> = Pin<Box<dyn Future<Output = T> + Send + 'static>>;

/// One call's result in a batch: the request id it says it answers, and
/// what the call on its own would have ended with.
#[derive(Debug)]
pub struct Answer<R> {
    /// The request id of the call this answers.
    pub request_id: String,
    /// The call's reply or status.
    pub result: Result<R, Status>,
}

/// What a batch RPC answers: one result per call, in their order, or the
/// status of the RPC as a whole.
pub type BatchReply<R> = Result<Vec<Answer<R>>, Status>;

/// The two ways to send one kind of call to a participant.
pub trait Transport: Send + Sync + 'static {
    /// A call's request message (cloned when batched, so that a batch the
    /// participant cannot take can be sent again as single calls).
    type Request: Clone + Send + 'static;
    /// A call's reply message.
    type Reply: Send + 'static;

    /// The call on its own, carrying `traceparent`, with the call deadline.
    fn one(
        &self,
        request: Self::Request,
        traceparent: String,
    ) -> BoxFuture<Result<Self::Reply, Status>>;

    /// Several calls in one RPC with `deadline`: one result per call, in
    /// their order; `Err` when the RPC as a whole failed.
    fn many(
        &self,
        calls: Vec<(Self::Request, String)>,
        deadline: Duration,
    ) -> BoxFuture<BatchReply<Self::Reply>>;

    /// A call's size in a batch, in bytes.
    fn size(request: &Self::Request, traceparent: &str) -> usize;

    /// Whether a result naming `request_id` answers `request`: a batch's
    /// results are matched to its calls by position, and checked.
    fn answers(request: &Self::Request, request_id: &str) -> bool;
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
    /// The deadline of one call.
    call_timeout: Duration,
    /// How long a queued call waits for its result before it gives up:
    /// what a single call may take (call deadline + connect timeout).
    patience: Duration,
    state: Mutex<State<T>>,
}

struct State<T: Transport> {
    /// Calls waiting for a batch, oldest first.
    queue: Vec<Queued<T>>,
    /// The ticket of the next call queued.
    next_ticket: u64,
    /// The call that found the way free and waits one turn for company
    /// (while it does, the calls that arrive queue behind it).
    lingering: Option<u64>,
    /// RPCs in flight (single calls and batches).
    in_flight: usize,
    /// The participant answered UNIMPLEMENTED to a batch: single calls only.
    no_batches: bool,
    /// Most calls per batch: [`MAX_BATCH`], halved each time a batch
    /// misses its deadline or the participant refuses it as too many.
    max_calls: usize,
    /// Most bytes of calls per batch: [`MAX_BATCH_BYTES`], halved each
    /// time the participant refuses a batch as too large.
    max_bytes: usize,
    /// When the participant last refused a batch (or a batch missed its
    /// deadline), while `no_batches` or a smaller budget follows from it.
    refused_at: Option<Instant>,
}

struct Queued<T: Transport> {
    /// Which call this is, among the calls of this batcher.
    ticket: u64,
    request: T::Request,
    traceparent: String,
    /// `T::size` of the call.
    bytes: usize,
    queued_at: Instant,
    reply: oneshot::Sender<Result<T::Reply, Status>>,
}

/// Counts one RPC in flight until dropped — also when its future is
/// dropped half-way, or panics — and then hands the queue to a new sender.
struct InFlight<T: Transport> {
    shared: Arc<Shared<T>>,
}

impl<T: Transport> Drop for InFlight<T> {
    fn drop(&mut self) {
        let next = {
            let mut state = self.shared.state();
            state.in_flight -= 1;
            state.next_batch()
        };
        send_next(&self.shared, next);
    }
}

/// Sends `next` (its RPC counted in flight) from a task of its own.
fn send_next<T: Transport>(shared: &Arc<Shared<T>>, next: Option<Vec<Queued<T>>>) {
    let Some(batch) = next else { return };
    match tokio::runtime::Handle::try_current() {
        Ok(runtime) => {
            runtime.spawn(send_guarded(shared.clone(), batch));
        }
        // No runtime (it is shutting down): the batch is dropped, its
        // callers see UNAVAILABLE, and its RPC is not in flight.
        Err(_) => shared.state().in_flight -= 1,
    }
}

/// A call waiting its turn for company. Dropped before it ends (its
/// caller gave up), it lets the calls queued behind it go.
struct Lingering<T: Transport> {
    shared: Arc<Shared<T>>,
    ticket: Option<u64>,
}

impl<T: Transport> Lingering<T> {
    /// The turn is over: where the call goes.
    fn end(mut self) -> Go<T> {
        let ticket = self.ticket.take().unwrap_or_default();
        self.shared.state().end_linger(ticket)
    }
}

impl<T: Transport> Drop for Lingering<T> {
    fn drop(&mut self) {
        let Some(ticket) = self.ticket else { return };
        let next = {
            let mut state = self.shared.state();
            state.stop_lingering(ticket);
            state.queue.retain(|q| q.ticket != ticket);
            state.next_batch()
        };
        send_next(&self.shared, next);
    }
}

impl<T: Transport> Batcher<T> {
    /// `step`'s calls sent through `transport`, each with `call_timeout`;
    /// a queued call gives up after `call_timeout + connect_timeout`.
    pub fn new(
        step: &'static str,
        transport: T,
        call_timeout: Duration,
        connect_timeout: Duration,
    ) -> Self {
        Batcher {
            shared: Arc::new(Shared {
                transport,
                step,
                call_timeout,
                patience: call_timeout + connect_timeout,
                state: Mutex::new(State::new()),
            }),
        }
    }

    /// Makes one call: on its own when the way is free and no other call
    /// comes along within one turn of the runtime, else in a batch.
    pub async fn call(&self, request: T::Request, traceparent: String) -> Result<T::Reply, Status> {
        let queued_at = Instant::now();
        let (reply, mut waiting) = oneshot::channel();
        let ticket = {
            let mut state = self.shared.state();
            let linger = state.in_flight < MAX_IN_FLIGHT && state.lingering.is_none();
            let ticket = state.push(Queued {
                ticket: 0,
                bytes: T::size(&request, &traceparent),
                request,
                traceparent,
                queued_at,
                reply,
            });
            if linger {
                state.lingering = Some(ticket);
            }
            linger.then_some(ticket)
        };
        if let Some(ticket) = ticket {
            // The way is free: wait one turn for the calls of other sagas
            // woken with this one (by the reply of the batch before).
            let lingering = Lingering {
                shared: self.shared.clone(),
                ticket: Some(ticket),
            };
            tokio::task::yield_now().await;
            let go = lingering.end();
            match go {
                Go::Alone(q) => {
                    let _in_flight = InFlight {
                        shared: self.shared.clone(),
                    };
                    return self.shared.transport.one(q.request, q.traceparent).await;
                }
                // From a task of its own, as every batch formed under load:
                // the other calls' RPC must not end with this caller.
                Go::Batch(batch) => send_next(&self.shared, Some(batch)),
                Go::Queued => {}
            }
        }
        let give_up = queued_at + self.shared.patience;
        let flush_at = queued_at + FLUSH_AFTER;
        if flush_at < give_up {
            tokio::select! {
                biased;
                result = &mut waiting => return received(result),
                () = tokio::time::sleep_until(flush_at) => {}
            }
            // Still queued: the RPCs in flight are slow. Send the queue
            // now, past the in-flight limit, from a task of its own like
            // every batch: the other calls' RPC must not end with this
            // caller.
            let batch = self.shared.state().take_batch();
            send_next(&self.shared, batch);
        }
        match tokio::time::timeout_at(give_up, waiting).await {
            Ok(result) => received(result),
            Err(_) => Err(Status::deadline_exceeded(format!(
                "no reply within {:?} (queued for a batch)",
                self.shared.patience
            ))),
        }
    }

    /// Calls queued right now.
    #[cfg(test)]
    fn queued(&self) -> usize {
        self.shared.state().queue.len()
    }
}

/// A queued call's result, as its sender handed it over.
fn received<R>(result: Result<Result<R, Status>, oneshot::error::RecvError>) -> Result<R, Status> {
    result.unwrap_or_else(|_| {
        Err(Status::unavailable(
            "the batch carrying this call was dropped",
        ))
    })
}

impl<T: Transport> Shared<T> {
    fn state(&self) -> MutexGuard<'_, State<T>> {
        // Every update of `State` is complete before any call that could
        // panic, so a poisoned lock still holds a consistent state.
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }
}

impl<T: Transport> State<T> {
    /// Nothing queued or in flight; batches of up to [`MAX_BATCH_BYTES`].
    fn new() -> Self {
        State {
            queue: Vec::new(),
            next_ticket: 0,
            lingering: None,
            in_flight: 0,
            no_batches: false,
            max_calls: MAX_BATCH,
            max_bytes: MAX_BATCH_BYTES,
            refused_at: None,
        }
    }

    /// Queues `call` with the next ticket; returns its ticket.
    fn push(&mut self, mut call: Queued<T>) -> u64 {
        let ticket = self.next_ticket;
        self.next_ticket += 1;
        call.ticket = ticket;
        self.queue.push(call);
        ticket
    }

    /// The call `ticket` waits for company no longer (if it was the one
    /// waiting): the next call to find the way free may wait in its turn.
    fn stop_lingering(&mut self, ticket: u64) {
        if self.lingering == Some(ticket) {
            self.lingering = None;
        }
    }

    /// How the call `ticket`, which found the way free a turn ago, goes:
    /// alone when no call queued behind it, else with them in a batch
    /// (when the way is still free), else in a batch sent later — or it
    /// went already, taken by a batch sent meanwhile.
    fn end_linger(&mut self, ticket: u64) -> Go<T> {
        self.stop_lingering(ticket);
        let Some(at) = self.queue.iter().position(|q| q.ticket == ticket) else {
            return Go::Queued;
        };
        if self.in_flight >= MAX_IN_FLIGHT {
            return Go::Queued;
        }
        if self.queue.len() == 1 {
            self.in_flight += 1;
            return Go::Alone(self.queue.remove(at));
        }
        match self.take_batch() {
            Some(batch) => Go::Batch(batch),
            None => Go::Queued,
        }
    }

    /// The next batch, if the queue holds one and fewer than
    /// [`MAX_IN_FLIGHT`] RPCs are in flight.
    fn next_batch(&mut self) -> Option<Vec<Queued<T>>> {
        if self.in_flight >= MAX_IN_FLIGHT {
            return None;
        }
        self.take_batch()
    }

    /// Takes a batch off the queue (as many calls as fit, one at least),
    /// counting its RPC in flight; calls whose callers gave up are dropped.
    fn take_batch(&mut self) -> Option<Vec<Queued<T>>> {
        self.queue.retain(|q| !q.reply.is_closed());
        if self.queue.is_empty() {
            return None;
        }
        self.retry_after_refusal();
        self.in_flight += 1;
        let mut bytes = 0;
        let take = self
            .queue
            .iter()
            .take(self.max_calls)
            .take_while(|q| {
                bytes += q.bytes;
                bytes <= self.max_bytes
            })
            .count()
            .max(1);
        Some(self.queue.drain(..take).collect())
    }

    /// Notes why later batches must be smaller, or none at all.
    fn shrink(&mut self, shrink: Shrink) {
        match shrink {
            Shrink::NoBatches => self.no_batches = true,
            Shrink::Bytes(bytes) => {
                self.max_bytes = self.max_bytes.min(bytes / 2).max(MIN_BATCH_BYTES);
            }
            Shrink::Calls(calls) => self.max_calls = self.max_calls.min(calls / 2).max(1),
        }
        self.refused_at = Some(Instant::now());
    }

    /// [`RETRY_BATCHES_AFTER`] past the last refusal: batches again, and
    /// budgets twice as large; once they are back at their maxima the
    /// refusal is forgotten, else they double again a period later.
    fn retry_after_refusal(&mut self) {
        let Some(refused_at) = self.refused_at else {
            return;
        };
        if refused_at.elapsed() < RETRY_BATCHES_AFTER {
            return;
        }
        self.no_batches = false;
        self.max_bytes = self.max_bytes.saturating_mul(2).min(MAX_BATCH_BYTES);
        self.max_calls = self.max_calls.saturating_mul(2).min(MAX_BATCH);
        let shrunk = self.max_bytes < MAX_BATCH_BYTES || self.max_calls < MAX_BATCH;
        self.refused_at = shrunk.then(Instant::now);
        tracing::info!(
            max_bytes = self.max_bytes,
            max_calls = self.max_calls,
            "trying larger batches again since the last refusal or missed deadline"
        );
    }
}

/// Where a call goes after waiting a turn for company.
enum Go<T: Transport> {
    /// On its own (its RPC counted in flight).
    Alone(Queued<T>),
    /// In this batch, with the calls queued behind it (counted in flight).
    Batch(Vec<Queued<T>>),
    /// It waits in the queue (or went with a batch sent meanwhile).
    Queued,
}

/// How later batches shrink after one went wrong.
#[derive(Debug, Clone, Copy)]
enum Shrink {
    /// The participant has no batch calls.
    NoBatches,
    /// A batch of this many bytes was over its request limit.
    Bytes(usize),
    /// A batch of this many calls was too many (refused, or past its
    /// deadline).
    Calls(usize),
}

/// Sends `batch` (its RPC already counted in flight), then lets the next
/// queued batch go.
async fn send_guarded<T: Transport>(shared: Arc<Shared<T>>, batch: Vec<Queued<T>>) {
    let _in_flight = InFlight {
        shared: shared.clone(),
    };
    send_batch(&shared, batch).await;
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
    // The batch may take what is left of its oldest call's deadline.
    let waited = batch
        .iter()
        .map(|q| q.queued_at.elapsed())
        .max()
        .unwrap_or_default();
    let deadline = shared
        .call_timeout
        .saturating_sub(waited)
        .max(MIN_BATCH_DEADLINE);
    metrics::counter!("saga_participant_batches_total", "step" => shared.step).increment(1);
    metrics::counter!("saga_participant_batched_calls_total", "step" => shared.step)
        .increment(count as u64);
    match shared.transport.many(calls, deadline).await {
        Ok(results) if results.len() == count => {
            for (q, answer) in batch.into_iter().zip(results) {
                let result = if T::answers(&q.request, &answer.request_id) {
                    answer.result
                } else {
                    Err(Status::unknown(
                        "the batch answered this call with another call's result",
                    ))
                };
                let _ = q.reply.send(result);
            }
        }
        Ok(results) => {
            let why = format!(
                "the participant answered {} results to a batch of {count} calls",
                results.len()
            );
            for q in batch {
                let _ = q.reply.send(Err(Status::unknown(why.clone())));
            }
        }
        Err(status) if refused_before_running(&status) => {
            let shrink = match status.code() {
                Code::Unimplemented => Shrink::NoBatches,
                Code::InvalidArgument => Shrink::Calls(count),
                _ => Shrink::Bytes(batch.iter().map(|q| q.bytes).sum()),
            };
            {
                let mut state = shared.state();
                state.shrink(shrink);
                tracing::info!(
                    step = shared.step,
                    error = status.message(),
                    calls = count,
                    max_calls = state.max_calls,
                    max_bytes = state.max_bytes,
                    no_batches = state.no_batches,
                    "the participant refused a batch before running it: its calls resent alone, smaller batches (or none) for a while"
                );
            }
            send_singles(shared, batch).await;
        }
        Err(status) => {
            if status.code() == Code::DeadlineExceeded {
                metrics::counter!("saga_participant_batches_halved_total", "step" => shared.step)
                    .increment(1);
                let mut state = shared.state();
                state.shrink(Shrink::Calls(count));
                tracing::info!(
                    step = shared.step,
                    calls = count,
                    max_calls = state.max_calls,
                    "a batch missed its deadline: smaller batches for a while"
                );
            }
            // The RPC's status, not any call's: never a business refusal.
            let code = if is_refusal(status.code()) {
                Code::Unknown
            } else {
                status.code()
            };
            let message = format!("batch {:?}: {}", status.code(), status.message());
            for q in batch {
                let _ = q.reply.send(Err(Status::new(code, message.clone())));
            }
        }
    }
}

/// Whether the participant refused the batch before running any call of
/// it: it has no batch calls, the batch holds more calls than it takes
/// (INVALID_ARGUMENT: a batch RPC fails as a whole only before running),
/// or the batch is over its request limit.
fn refused_before_running(status: &Status) -> bool {
    match status.code() {
        Code::Unimplemented | Code::InvalidArgument => true,
        Code::ResourceExhausted | Code::OutOfRange => over_size_limit(status),
        _ => false,
    }
}

/// Sends each call of `batch` on its own, concurrently (the calls whose
/// callers gave up are left out).
async fn send_singles<T: Transport>(shared: &Shared<T>, batch: Vec<Queued<T>>) {
    let singles = batch
        .into_iter()
        .filter(|q| !q.reply.is_closed())
        .map(|q| async move {
            let result = shared.transport.one(q.request, q.traceparent).await;
            let _ = q.reply.send(result);
        });
    futures::future::join_all(singles).await;
}

#[cfg(test)]
mod tests;
