//! `participant.v1.SagaStepService` over a [`StepStore`]: checks and
//! converts the call, runs it through the participant pipeline, maps the
//! outcome to the contract's reply.
//!
//! The pipeline's pieces are the kit's (the token check and timer of
//! [`Kit::call`], the fault injector, `participant_operations_total`, the
//! span and its log line); they are composed here rather than through
//! [`Call::action`](crate::Call::action) because in this contract a
//! business refusal is an OK reply (`OUTCOME_REFUSED` with its reason
//! code), not a status. So is an Act that arrives after its compensation:
//! `REFUSED` with `ALREADY_COMPENSATED`, as the protocol's table says.

use super::call::StepCall;
use super::protocol::{ACT, COMPENSATE, step_refusal};
use super::rules::ALREADY_COMPENSATED;
use super::store::StepStore;
use crate::faults::CallKind;
use crate::{ActionReply, CompensationResult, HistoryExpiry, Kit, OperationLog, ParticipantError};
use crate::{metrics, wire};
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
    let api = SagaStepServiceServer::new(StepApi::new(store.clone(), kit.clone()))
        .max_decoding_message_size(kit.max_request_bytes());
    let log: Arc<dyn OperationLog> = store.clone();
    let expiry: Arc<dyn HistoryExpiry> = store;
    kit.serve_on(Routes::new(api), label, log, expiry, server)
        .await
}

fn span(rpc: &'static str, call: &StepCall, trace_id: &str) -> Span {
    tracing::info_span!(
        "step",
        rpc,
        request_id = %call.request_id,
        step = %call.step,
        attempt = call.attempt,
        customer_id = %call.order.customer_id,
        trace_id = %trace_id,
    )
}

/// An Act's outcome as the contract answers it.
fn act_reply(reply: Result<ActionReply<String>, ParticipantError>) -> Result<pb::ActReply, Status> {
    match reply {
        Ok(ActionReply::Applied { value, replayed }) => Ok(pb::ActReply {
            outcome: Outcome::Applied.into(),
            reason_code: String::new(),
            detail: value,
            replayed,
        }),
        Ok(ActionReply::Refused { refusal, replayed }) => {
            let refusal = step_refusal(&refusal);
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

fn compensate_reply(result: CompensationResult) -> pb::CompensateReply {
    pb::CompensateReply {
        effect: wire::effect(&result),
        detail: String::new(),
        replayed: result.replayed,
    }
}

impl StepApi {
    /// Faults, store, count, reply: the pipeline of one Act.
    async fn act_once(&self, call: StepCall) -> Result<pb::ActReply, Status> {
        let faults = self.kit.faults();
        let request_id = call.request_id.clone();
        let admitted = faults.before(CallKind::Action, &request_id).await?;
        let reply = self.store.act(call, admitted.admission()).await;
        metrics::action(ACT, &reply);
        faults.after(admitted, &request_id, act_reply(reply))
    }

    /// Faults, store, count, reply: the pipeline of one Compensate.
    async fn compensate_once(&self, call: StepCall) -> Result<pb::CompensateReply, Status> {
        let faults = self.kit.faults();
        let request_id = call.request_id.clone();
        let admitted = faults.before(CallKind::Compensation, &request_id).await?;
        let reply = self.store.compensate(call).await;
        metrics::compensation(COMPENSATE, &reply);
        let reply = reply.map(compensate_reply).map_err(Status::from);
        faults.after(admitted, &request_id, reply)
    }
}

#[tonic::async_trait]
impl SagaStepService for StepApi {
    async fn act(&self, request: Request<pb::StepCall>) -> Result<Response<pb::ActReply>, Status> {
        // Token first: a refused call reads and changes nothing. Held for
        // its timer.
        let timed = self.kit.call(ACT, CallKind::Action, &request)?;
        let call = StepCall::try_from(request.into_inner())?;
        let span = span(ACT, &call, timed.trace_id());
        timed.join_caller(&span);
        let reply = crate::logged!(&span, self.act_once(call).instrument(span.clone()).await);
        drop(timed);
        Ok(Response::new(reply?))
    }

    async fn compensate(
        &self,
        request: Request<pb::StepCall>,
    ) -> Result<Response<pb::CompensateReply>, Status> {
        let timed = self
            .kit
            .call(COMPENSATE, CallKind::Compensation, &request)?;
        let call = StepCall::try_from(request.into_inner())?;
        let span = span(COMPENSATE, &call, timed.trace_id());
        timed.join_caller(&span);
        let reply = crate::logged!(
            &span,
            self.compensate_once(call).instrument(span.clone()).await
        );
        drop(timed);
        Ok(Response::new(reply?))
    }
}
