//! `participant.v1.SagaStepService` over a [`StepStore`]: checks and
//! converts each call, runs it through the participant pipeline, maps the
//! outcome to the contract's reply — for one call (Act, Compensate) and
//! for every call of a batch (ActBatch, CompensateBatch) alike.
//!
//! The pipeline's pieces are the kit's (the token check and timer of
//! [`Kit::call`], the fault injector, `participant_operations_total`, the
//! span and its log line); they are composed here rather than through
//! [`Call::action`](crate::Call::action) because in this contract a
//! business refusal is an OK reply (`OUTCOME_REFUSED` with its reason
//! code), not a status. So is an Act that arrives after its compensation:
//! `REFUSED` with `ALREADY_COMPENSATED`, as the protocol's table says.
//!
//! A call of a batch is the call on its own ([`crate::batch`]): its own
//! timer, span in its own trace, faults, transaction and result; only the
//! token is checked once, for the batch, and a batch over
//! [`MAX_BATCH_CALLS`](crate::batch::MAX_BATCH_CALLS) is refused whole,
//! naming `calls`, before any call runs.

use super::call::StepCall;
use super::rules::ALREADY_COMPENSATED;
use super::store::StepStore;
use crate::faults::CallKind;
use crate::pipeline::Call;
use crate::{ActionReply, CompensationResult, Kit, ParticipantError, batch, metrics, wire};
use saga_proto::participant::v1 as pb;
use saga_proto::participant::v1::act_reply::Outcome;
use saga_proto::participant::v1::saga_step_service_server::{
    SagaStepService, SagaStepServiceServer,
};
use service_kit::server::{GrpcServer, ServeError};
use service_kit::shutdown::Shutdown;
use std::sync::Arc;
use tokio::net::TcpListener;
use tonic::server::NamedService;
use tonic::service::Routes;
use tonic::{Request, Response, Status};
use tracing::{Instrument, Span};

/// Implements `participant.v1.SagaStepService` over a [`StepStore`].
pub struct StepApi {
    store: Arc<dyn StepStore>,
    kit: Kit,
}

impl StepApi {
    /// The service over `store`, with `kit`'s faults and tokens.
    pub fn new(store: Arc<dyn StepStore>, kit: Kit) -> Self {
        StepApi { store, kit }
    }

    /// The generated server of this service, accepting requests up to the
    /// kit's request limit.
    pub fn server(store: Arc<dyn StepStore>, kit: &Kit) -> SagaStepServiceServer<StepApi> {
        SagaStepServiceServer::new(StepApi::new(store, kit.clone()))
            .max_decoding_message_size(kit.max_request_bytes())
    }
}

/// The name of `participant.v1.SagaStepService`, which health and
/// reflection answer for before the store is open.
pub const SERVICE_NAME: &str = <SagaStepServiceServer<StepApi> as NamedService>::NAME;

/// Serves `SagaStepService` over `store` (with `kit`'s faults, TLS, tokens
/// and limits), plus `OperationHistoryService` over the same store, the
/// `faults.v1` admin API, reflection, health and the history purge, on
/// `listener` until `shutdown` fires and the calls in flight have finished;
/// `label` names the store in its size gauge.
pub async fn serve(
    store: Arc<dyn StepStore>,
    kit: Kit,
    label: &'static str,
    listener: TcpListener,
    shutdown: Shutdown,
) -> Result<(), ServeError> {
    let server = kit.server(SERVICE_NAME, listener, &shutdown)?;
    serve_on(store, kit, label, server).await
}

/// [`serve`] on `server` (from [`Kit::server`], which may already answer
/// health): ready from now until its shutdown.
pub async fn serve_on(
    store: Arc<dyn StepStore>,
    kit: Kit,
    label: &'static str,
    server: GrpcServer,
) -> Result<(), ServeError> {
    kit.serve_on(Routes::default(), label, store, server).await
}

/// The span of one step call, named (in exported traces) and timed by
/// the store's kind of record — `charge`, `deduct`, `act`, … — so a step
/// call reads like the participant's own operation of that kind.
fn span(rpc: &'static str, call: &StepCall, trace_id: &str) -> Span {
    tracing::info_span!(
        "step",
        "otel.name" = rpc,
        rpc,
        request_id = %call.request_id,
        step = %call.step,
        attempt = call.attempt,
        customer_id = %call.order.customer_id,
        trace_id = %trace_id,
    )
}

fn compensate_reply(result: CompensationResult) -> pb::CompensateReply {
    pb::CompensateReply {
        effect: wire::effect(&result),
        detail: String::new(),
        replayed: result.replayed,
    }
}

impl StepApi {
    /// An Act's outcome as the contract answers it.
    fn act_reply(
        &self,
        reply: Result<ActionReply<String>, ParticipantError>,
    ) -> Result<pb::ActReply, Status> {
        match reply {
            Ok(ActionReply::Applied { value, replayed }) => Ok(pb::ActReply {
                outcome: Outcome::Applied.into(),
                reason_code: String::new(),
                detail: value,
                replayed,
            }),
            Ok(ActionReply::Refused { refusal, replayed }) => {
                let refusal = self.store.refusal(&refusal);
                Ok(pb::ActReply {
                    outcome: Outcome::Refused.into(),
                    reason_code: refusal.reason_code,
                    detail: refusal.detail,
                    replayed,
                })
            }
            // Decided by the record that holds the key, like a replay.
            Err(ParticipantError::AlreadyCompensated(detail)) => Ok(pb::ActReply {
                outcome: Outcome::Refused.into(),
                reason_code: ALREADY_COMPENSATED.to_owned(),
                detail,
                replayed: true,
            }),
            Err(error) => Err(error.into()),
        }
    }

    /// Faults, store, count, reply: the pipeline of one Act.
    async fn act_once(&self, call: StepCall) -> Result<pb::ActReply, Status> {
        let faults = self.kit.faults();
        let request_id = call.request_id.clone();
        let admitted = faults.before(CallKind::Action, &request_id).await?;
        let reply = self.store.act(call, admitted.admission()).await;
        metrics::action(self.store.kinds().0, &reply);
        faults.after(admitted, &request_id, self.act_reply(reply))
    }

    /// Faults, store, count, reply: the pipeline of one Compensate.
    async fn compensate_once(&self, call: StepCall) -> Result<pb::CompensateReply, Status> {
        let faults = self.kit.faults();
        let request_id = call.request_id.clone();
        let admitted = faults.before(CallKind::Compensation, &request_id).await?;
        let reply = self.store.compensate(call).await;
        metrics::compensation(self.store.kinds().1, &reply);
        let reply = reply.map(compensate_reply).map_err(Status::from);
        faults.after(admitted, &request_id, reply)
    }

    /// One Act started (token checked, timed) as `timed`: checked,
    /// spanned, run and logged — alone or in a batch.
    async fn act_started(
        &self,
        timed: Call<'_>,
        call: pb::StepCall,
    ) -> Result<pb::ActReply, Status> {
        let call = StepCall::try_from(call)?;
        let span = span(self.store.kinds().0, &call, timed.trace_id());
        timed.join_caller(&span);
        crate::logged!(&span, self.act_once(call).instrument(span.clone()).await)
    }

    /// One Compensate started as `timed`, as [`StepApi::act_started`].
    async fn compensate_started(
        &self,
        timed: Call<'_>,
        call: pb::StepCall,
    ) -> Result<pb::CompensateReply, Status> {
        let call = StepCall::try_from(call)?;
        let span = span(self.store.kinds().1, &call, timed.trace_id());
        timed.join_caller(&span);
        crate::logged!(
            &span,
            self.compensate_once(call).instrument(span.clone()).await
        )
    }
}

/// A batch's calls with their positions, each checked to carry a call
/// (INVALID_ARGUMENT naming `calls[i].call` as that call's own result).
fn batched(
    calls: Vec<pb::BatchedStepCall>,
) -> impl Iterator<Item = (String, Result<(pb::StepCall, String), Status>)> {
    calls.into_iter().enumerate().map(|(i, batched)| {
        let request_id = batched
            .call
            .as_ref()
            .map(|c| c.request_id.clone())
            .unwrap_or_default();
        let call = batched
            .call
            .map(|c| (c, batched.traceparent))
            .ok_or_else(|| {
                service_kit::validate::invalid(&format!("calls[{i}].call"), "must be set")
            });
        (request_id, call)
    })
}

#[tonic::async_trait]
impl SagaStepService for StepApi {
    async fn act(&self, request: Request<pb::StepCall>) -> Result<Response<pb::ActReply>, Status> {
        // Token first: a refused call reads and changes nothing. Held for
        // its timer.
        let timed = self
            .kit
            .call(self.store.kinds().0, CallKind::Action, &request)?;
        let reply = self.act_started(timed, request.into_inner()).await?;
        Ok(Response::new(reply))
    }

    async fn compensate(
        &self,
        request: Request<pb::StepCall>,
    ) -> Result<Response<pb::CompensateReply>, Status> {
        let timed = self
            .kit
            .call(self.store.kinds().1, CallKind::Compensation, &request)?;
        let reply = self.compensate_started(timed, request.into_inner()).await?;
        Ok(Response::new(reply))
    }

    async fn act_batch(
        &self,
        request: Request<pb::StepCallBatch>,
    ) -> Result<Response<pb::ActBatchReply>, Status> {
        let _timer = self
            .kit
            .batch("act_batch", &request, request.get_ref().calls.len())?;
        let calls = batched(request.into_inner().calls);
        let results = batch::run(calls, |(request_id, call)| async move {
            let result = match call {
                Ok((call, traceparent)) => {
                    let timed =
                        self.kit
                            .batched_call(self.store.kinds().0, CallKind::Action, &traceparent);
                    self.act_started(timed, call).await
                }
                Err(status) => Err(status),
            };
            pb::ActResult {
                request_id,
                result: Some(match result {
                    Ok(reply) => pb::act_result::Result::Reply(reply),
                    Err(status) => pb::act_result::Result::Error(batch::call_error(&status)),
                }),
            }
        })
        .await;
        Ok(Response::new(pb::ActBatchReply { results }))
    }

    async fn compensate_batch(
        &self,
        request: Request<pb::StepCallBatch>,
    ) -> Result<Response<pb::CompensateBatchReply>, Status> {
        let _timer = self
            .kit
            .batch("compensate_batch", &request, request.get_ref().calls.len())?;
        let calls = batched(request.into_inner().calls);
        let results = batch::run(calls, |(request_id, call)| async move {
            let result = match call {
                Ok((call, traceparent)) => {
                    let timed = self.kit.batched_call(
                        self.store.kinds().1,
                        CallKind::Compensation,
                        &traceparent,
                    );
                    self.compensate_started(timed, call).await
                }
                Err(status) => Err(status),
            };
            pb::CompensateResult {
                request_id,
                result: Some(match result {
                    Ok(reply) => pb::compensate_result::Result::Reply(reply),
                    Err(status) => pb::compensate_result::Result::Error(batch::call_error(&status)),
                }),
            }
        })
        .await;
        Ok(Response::new(pb::CompensateBatchReply { results }))
    }
}
