//! The path every mutating participant call takes, written once.
//!
//! A participant's gRPC handler only maps its proto to domain types and
//! calls its store; everything around that is the same for every call of
//! every participant, so it lives here:
//!
//! 1. the call is timed (`participant_call_duration_seconds{rpc}`) however
//!    it ends, and its token (service token for saga calls, admin token for
//!    admin calls) is checked before anything else — a refused call is
//!    counted (`participant_unauthenticated_total{rpc}`) and changes nothing;
//! 2. the caller's W3C trace id (`traceparent`) is read, so the call's span
//!    joins the orchestrator's saga;
//! 3. inside that span the fault injector may delay the call or fail it
//!    transiently, or tell the store to refuse it ([`Admission`]) — which the
//!    store does *through the barrier*;
//! 4. the store applies the call and its operationHistory record in one
//!    transaction;
//! 5. the committed outcome is counted (`participant_operations_total`),
//!    before a lost reply may be injected (the effect happened all the same);
//! 6. a business refusal becomes its status code.
//!
//! [`Kit`] is what a participant's adapter holds; [`Kit::call`] starts one
//! call and [`Call::action`] / [`Call::compensation`] run the rest. The
//! adapter then logs the result with [`logged!`](crate::logged), a macro
//! so that the line carries the participant's own log target.

use crate::faults::{self, CallKind, Faults};
use crate::history_service::{self, OperationLog};
use crate::outcome::{ActionReply, Admission, ParticipantError};
use crate::refusal_reasons::RefusalReasons;
use crate::retention::{HistoryExpiry, HistoryPurger, HistoryRetention};
use crate::step::{self, StepStore};
use crate::{CompensationResult, metrics};
use service_kit::clock::SharedClock;
use service_kit::metrics::CallTimer;
use service_kit::server::{GrpcServer, ServeError, ServeOptions};
use service_kit::shutdown::Shutdown;
use service_kit::trace::RemoteParent;
use std::future::Future;
use std::sync::Arc;
use tokio::net::TcpListener;
use tonic::service::Routes;
use tonic::{Request, Status};
use tracing::{Instrument, Span};

/// What every participant adapter shares: the fault injector and how the
/// server is exposed (TLS, admin token, request limit). Cheap to clone.
#[derive(Clone, Debug)]
pub struct Kit {
    faults: Arc<Faults>,
    options: ServeOptions,
    history: HistoryRetention,
    clock: SharedClock,
    refusal_reasons: RefusalReasons,
}

impl Kit {
    /// A kit injecting `faults`, served as `options` say, keeping the
    /// operationHistory for the default retention.
    pub fn new(faults: Arc<Faults>, options: ServeOptions) -> Kit {
        Kit {
            faults,
            options,
            history: HistoryRetention::default(),
            clock: service_kit::clock::system(),
            refusal_reasons: RefusalReasons::GENERIC,
        }
    }

    /// The kit answering business refusals with `reasons` in their
    /// ErrorInfo (each participant's adapter names its own).
    pub fn with_refusal_reasons(mut self, reasons: RefusalReasons) -> Kit {
        self.refusal_reasons = reasons;
        self
    }

    /// The kit measuring time by `clock` (the history's expiry, the purge's
    /// rounds): the system clock unless a test or a simulation moves it.
    pub fn with_clock(mut self, clock: SharedClock) -> Kit {
        self.clock = clock;
        self
    }

    /// The clock the kit measures time by.
    pub fn clock(&self) -> &SharedClock {
        &self.clock
    }

    /// The kit keeping the operationHistory as `history` says (the store
    /// must have been opened with the same retention).
    pub fn with_history(mut self, history: HistoryRetention) -> Kit {
        self.history = history;
        self
    }

    /// How long the operationHistory is kept.
    pub fn history(&self) -> HistoryRetention {
        self.history
    }

    /// No faults, plaintext, admin RPCs open, default limits (tests, tools).
    pub fn plain() -> Kit {
        Kit::new(Arc::new(Faults::disabled()), ServeOptions::default())
    }

    /// The fault injector (shared with the `faults.v1` admin service).
    pub fn faults(&self) -> &Arc<Faults> {
        &self.faults
    }

    /// How the server is exposed.
    pub fn options(&self) -> &ServeOptions {
        &self.options
    }

    /// The largest request a participant's service must accept.
    pub fn max_request_bytes(&self) -> usize {
        self.options.max_request_bytes
    }

    /// Starts a saga call (Charge, Refund, Deduct, Restock) named `rpc`:
    /// the service token is checked first, so a refused call reads and
    /// changes nothing.
    pub fn call<T>(
        &self,
        rpc: &'static str,
        kind: CallKind,
        request: &Request<T>,
    ) -> Result<Call<'_>, Status> {
        let call = self.start(rpc, kind, request);
        authenticated(rpc, self.options.service.check(request.metadata()))?;
        Ok(call)
    }

    /// Starts an admin call (Deposit, AddStock): the admin token is checked
    /// first, so a refused call reads and changes nothing. Never faulted.
    pub fn admin_call<T>(
        &self,
        rpc: &'static str,
        request: &Request<T>,
    ) -> Result<Call<'_>, Status> {
        let call = self.start(rpc, CallKind::Admin, request);
        authenticated(rpc, self.options.admin.check(request.metadata()))?;
        Ok(call)
    }

    /// Times a read (GetAccount, GetProduct, ListOperations), which needs the service or the
    /// admin token once either is configured. Never faulted, never counted
    /// as an operation.
    pub fn read<T>(&self, rpc: &'static str, request: &Request<T>) -> Result<CallTimer, Status> {
        let timer = CallTimer::start(rpc);
        let guards = [&self.options.service, &self.options.admin];
        authenticated(
            rpc,
            service_kit::auth::check_any(&guards, request.metadata()),
        )?;
        Ok(timer)
    }

    /// Starts a batch of saga calls (ActBatch, CompensateBatch) named `rpc`
    /// holding `calls` calls, timed as a whole under `rpc` (each call is
    /// timed under its own name too): the service token is checked once,
    /// for the batch, before anything else, and the batch may hold at most
    /// [`MAX_BATCH_CALLS`](crate::batch::MAX_BATCH_CALLS) calls. Each call
    /// then starts with [`Kit::batched_call`].
    pub fn batch<T>(
        &self,
        rpc: &'static str,
        request: &Request<T>,
        calls: usize,
    ) -> Result<CallTimer, Status> {
        let timer = CallTimer::start(rpc);
        authenticated(rpc, self.options.service.check(request.metadata()))?;
        crate::batch::check_size(calls)?;
        Ok(timer)
    }

    /// Starts one call of a batch whose token [`Kit::batch`] checked: timed
    /// and counted under its own `rpc` (`act`, `compensate`), its span in
    /// the trace of its own `traceparent` — exactly as if it had come on
    /// its own.
    pub fn batched_call(&self, rpc: &'static str, kind: CallKind, traceparent: &str) -> Call<'_> {
        self.started(
            rpc,
            kind,
            service_kit::trace::trace_id_of(traceparent),
            RemoteParent::of_header(traceparent),
        )
    }

    fn start<T>(&self, rpc: &'static str, kind: CallKind, request: &Request<T>) -> Call<'_> {
        let metadata = request.metadata();
        self.started(
            rpc,
            kind,
            service_kit::trace::trace_id(metadata),
            RemoteParent::of(metadata),
        )
    }

    /// A call timed from now, in the trace `trace_id` (none: empty), made
    /// by the span `caller` (known only when spans are exported).
    fn started(
        &self,
        rpc: &'static str,
        kind: CallKind,
        trace_id: Option<String>,
        caller: Option<RemoteParent>,
    ) -> Call<'_> {
        Call {
            kit: self,
            rpc,
            kind,
            trace_id: trace_id.unwrap_or_default(),
            caller,
            _timer: CallTimer::start(rpc),
        }
    }

    /// This participant's gRPC server on `listener`: `service` (its own
    /// gRPC service), `participant.v1.SagaStepService` (every participant
    /// serves the step contract), `participant.v1.OperationHistoryService`
    /// and the `faults.v1` admin API behind readiness, with health and
    /// reflection, draining once `shutdown` fires. Started at once
    /// ([`GrpcServer::start`]) it answers health while the store opens;
    /// [`Kit::serve_on`] makes it ready.
    pub fn server(
        &self,
        service: &'static str,
        listener: TcpListener,
        shutdown: &Shutdown,
    ) -> Result<GrpcServer, ServeError> {
        let mut services = vec![service];
        if service != step::SERVICE_NAME {
            services.push(step::SERVICE_NAME);
        }
        services.extend([history_service::SERVICE_NAME, faults::SERVICE_NAME]);
        GrpcServer::new(
            &self.options,
            listener,
            saga_proto::FILE_DESCRIPTOR_SET,
            &services,
            shutdown,
        )
    }

    /// Serves `routes` (the participant's own services, if any, its main
    /// one named `service`) plus `participant.v1.SagaStepService` and
    /// `participant.v1.OperationHistoryService` over `store`, the
    /// `faults.v1` admin API, reflection and health on `listener` until
    /// `shutdown` fires and the calls in flight have finished; beside it,
    /// the purge of the same store every purge interval, its gauge
    /// labelled `store_size_bytes{service = label}`. Ready at once: the
    /// store is open.
    pub async fn serve(
        &self,
        routes: Routes,
        service: &'static str,
        label: &'static str,
        store: Arc<dyn StepStore>,
        listener: TcpListener,
        shutdown: Shutdown,
    ) -> Result<(), ServeError> {
        let server = self.server(service, listener, &shutdown)?;
        self.serve_on(routes, label, store, server).await
    }

    /// [`Kit::serve`] on a `server` from [`Kit::server`], which may already
    /// be answering health: ready from now, draining once its shutdown
    /// fires, returning once it has closed.
    pub async fn serve_on(
        &self,
        routes: Routes,
        label: &'static str,
        store: Arc<dyn StepStore>,
        mut server: GrpcServer,
    ) -> Result<(), ServeError> {
        let log: Arc<dyn OperationLog> = store.clone();
        let expiry: Arc<dyn HistoryExpiry> = store.clone();
        let purge = tokio::spawn(service_kit::purge::run_purge_loop(
            Arc::new(HistoryPurger::new(expiry, self.history.keep)),
            label,
            self.history.purge_interval,
            self.clock.clone(),
            server.shutdown().clone(),
        ));
        server.ready(
            routes
                .add_service(step::StepApi::server(store, self))
                .add_service(history_service::service(log, self))
                .add_service(faults::service_with(self.faults.clone(), &self.options)),
        );
        let served = server.run(std::future::ready(())).await;
        purge.abort();
        served
    }
}

/// One mutating call on its way through the pipeline.
#[must_use = "run it with Call::action or Call::compensation"]
pub struct Call<'k> {
    kit: &'k Kit,
    rpc: &'static str,
    kind: CallKind,
    trace_id: String,
    /// The caller's span (the orchestrator's step attempt), when spans are
    /// exported and the call named it.
    caller: Option<RemoteParent>,
    _timer: CallTimer,
}

impl Call<'_> {
    /// The caller's W3C trace id (empty without a `traceparent`), for the
    /// call's span.
    pub fn trace_id(&self) -> &str {
        &self.trace_id
    }

    /// Makes `span` — the call's span, created and not entered yet — a
    /// child of the caller's span, so the orchestrator's trace of the saga
    /// shows this call under the step attempt that made it. Nothing when
    /// spans are not exported. [`Call::action`] and [`Call::compensation`]
    /// do it themselves.
    pub fn join_caller(&self, span: &Span) {
        if let Some(caller) = &self.caller {
            caller.adopt(span);
        }
    }

    /// Runs an action (Charge, Deduct, Deposit, AddStock) in `span`:
    /// `apply` gets the fault injector's [`Admission`] and must apply or
    /// refuse through the barrier. Returns the applied value and whether it
    /// was replayed; a business refusal becomes its status code.
    pub async fn action<V, F, Fut>(
        self,
        span: Span,
        request_id: &str,
        apply: F,
    ) -> Result<(V, bool), Status>
    where
        F: FnOnce(Admission) -> Fut,
        Fut: Future<Output = Result<ActionReply<V>, ParticipantError>>,
    {
        let rpc = self.rpc;
        self.join_caller(&span);
        let reasons = self.kit.refusal_reasons;
        async {
            let admitted = self.kit.faults.before(self.kind, request_id).await?;
            let reply = apply(admitted.admission()).await;
            metrics::action(rpc, &reply);
            let reply = reply
                .map_err(Status::from)
                .and_then(|reply| applied(reply, &reasons));
            self.kit.faults.after(admitted, request_id, reply)
        }
        .instrument(span)
        .await
    }

    /// Runs a compensation (Refund, Restock) in `span`.
    pub async fn compensation<F, Fut>(
        self,
        span: Span,
        request_id: &str,
        undo: F,
    ) -> Result<CompensationResult, Status>
    where
        F: FnOnce() -> Fut,
        Fut: Future<Output = Result<CompensationResult, ParticipantError>>,
    {
        let rpc = self.rpc;
        self.join_caller(&span);
        async {
            let admitted = self.kit.faults.before(self.kind, request_id).await?;
            let reply = undo().await;
            metrics::compensation(rpc, &reply);
            let reply = reply.map_err(Status::from);
            self.kit.faults.after(admitted, request_id, reply)
        }
        .instrument(span)
        .await
    }
}

/// Counts a call refused for its token
/// (`participant_unauthenticated_total{rpc}`).
fn authenticated(rpc: &'static str, check: Result<(), Status>) -> Result<(), Status> {
    if check.is_err() {
        metrics::unauthenticated(rpc);
    }
    check
}

/// Business refusals become their status code with the participant's
/// ErrorInfo reason; applied results the value.
fn applied<V>(reply: ActionReply<V>, reasons: &RefusalReasons) -> Result<(V, bool), Status> {
    match reply {
        ActionReply::Applied { value, replayed } => Ok((value, replayed)),
        ActionReply::Refused { refusal, .. } => Err(reasons.status(refusal)),
    }
}

/// Logs the result of a participant call in its span and returns it:
/// DEBUG when it was applied, INFO when it was not (a business refusal, a
/// hanging or mismatched call, an injected fault), WARN when it failed
/// internally — so every call of a saga leaves a line carrying its trace
/// id. A macro, so the line's log target is the participant's module, not
/// this kit's.
#[macro_export]
macro_rules! logged {
    ($span:expr, $result:expr) => {{
        let span: &$crate::__private::Span = $span;
        let result = $result;
        span.in_scope(|| match &result {
            Ok(reply) => $crate::__private::tracing::debug!(?reply, "applied"),
            Err(status) => match status.code() {
                $crate::__private::Code::Internal
                | $crate::__private::Code::Unknown
                | $crate::__private::Code::DataLoss => $crate::__private::tracing::warn!(
                    code = ?status.code(),
                    error = status.message(),
                    "call failed"
                ),
                code => $crate::__private::tracing::info!(
                    ?code,
                    error = status.message(),
                    "not applied"
                ),
            },
        });
        result
    }};
}
