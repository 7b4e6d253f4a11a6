//! Every step of a saga, reached the one way there is: a participant of
//! `participant.v1.SagaStepService` (docs/participant-protocol.md) — Act to
//! do the step, Compensate to undo it, both with the step's request id and
//! the saga's order, and ActBatch / CompensateBatch to carry many sagas'
//! calls in one RPC when the participant has them.
//!
//! The orchestrator knows the contract, not its participants: payment-svc
//! and inventory-svc are two of them, listed by the default steps file
//! (`orchestrator/default-steps.toml`) like any team's own service in
//! theirs, and they cost what any step costs. A step is a
//! [`ParticipantStep`]; [`definition_of`] turns a steps file into the
//! saga.
//!
//! This is the orchestrator's gRPC client edge: requests carry the call
//! deadline, trace context and service token ([`call`]), every answer is
//! read into a domain outcome here ([`reply`]), so no wire type reaches the
//! executor, and under load the calls of many sagas share one batch RPC
//! ([`batching`]).

pub mod batching;
pub mod call;
pub mod reply;

use crate::saga::{Saga, StepState};
use crate::step::{DefinitionError, ParticipantRecord, SagaDefinition, SagaStep, StepOutcome};
use crate::steps_file::StepSpec;
use async_trait::async_trait;
use batching::{Answer, BatchReply, Batcher, BoxFuture, Transport};
use call::Caller;
use saga_proto::participant::v1 as pb;
use saga_proto::participant::v1::operation_history_service_client::OperationHistoryServiceClient;
use saga_proto::participant::v1::saga_step_service_client::SagaStepServiceClient;
use service_kit::channel::GrpcChannel;
use std::collections::HashSet;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tonic::Status;

/// Why the saga a steps file lists cannot be built.
#[derive(Debug, thiserror::Error)]
pub enum StepsError {
    /// A step's address cannot be called (TLS settings, a malformed URL).
    #[error("step {step:?}: its address {address:?} cannot be called: {source}")]
    Address {
        /// The step.
        step: String,
        /// Its configured address.
        address: String,
        #[source]
        /// Why.
        source: service_kit::tls::TlsError,
    },
    /// The steps do not make a saga.
    #[error(transparent)]
    Definition(#[from] DefinitionError),
}

/// The saga `specs` list (a steps file), in their order: each step over a
/// lazily connecting channel to its address (TLS as `tls` says), called as
/// `caller` says (deadline, service token).
pub fn definition_of(
    specs: &[StepSpec],
    caller: &Caller,
    tls: &service_kit::tls::TlsConfig,
) -> Result<SagaDefinition, StepsError> {
    let steps = specs
        .iter()
        .map(|spec| -> Result<Arc<dyn SagaStep>, StepsError> {
            let channel =
                crate::participant_channel_with(&spec.address, tls).map_err(|source| {
                    StepsError::Address {
                        step: spec.name.clone(),
                        address: spec.address.clone(),
                        source,
                    }
                })?;
            Ok(Arc::new(ParticipantStep::new(
                spec,
                channel,
                caller.clone(),
            )))
        })
        .collect::<Result<Vec<_>, _>>()?;
    Ok(SagaDefinition::new(steps)?)
}

/// A step whose participant implements `participant.v1.SagaStepService`.
pub struct ParticipantStep {
    name: &'static str,
    action: &'static str,
    compensation: &'static str,
    /// Acts, batched under load ([`batching`]).
    acts: Batcher<Acts>,
    /// Compensates, batched under load: a participant that is back after an
    /// outage gets its compensations in as few RPCs as its actions.
    compensations: Batcher<Compensations>,
    /// The same channel's `OperationHistoryService`, for [`SagaStep::records`].
    history: OperationHistoryServiceClient<GrpcChannel>,
    caller: Caller,
}

impl ParticipantStep {
    /// The step `spec` names over a channel to its participant.
    pub fn new(spec: &StepSpec, channel: GrpcChannel, caller: Caller) -> Self {
        let name = lasting(&spec.name);
        let calls = Calls {
            one: SagaStepServiceClient::new(channel.clone())
                .max_decoding_message_size(reply::MAX_REPLY_BYTES),
            // A batch's reply holds many calls' replies: tonic's default
            // limit (4 MiB); one over it shrinks later batches.
            many: SagaStepServiceClient::new(channel.clone()),
            caller: caller.clone(),
        };
        ParticipantStep {
            name,
            action: lasting(&spec.action),
            compensation: lasting(&spec.compensation),
            acts: batcher(name, Acts(calls.clone()), &caller),
            compensations: batcher(name, Compensations(calls), &caller),
            history: OperationHistoryServiceClient::new(channel)
                .max_decoding_message_size(reply::MAX_REPLY_BYTES),
            caller,
        }
    }

    /// The call the contract sends for this step of `saga`, on `attempt`.
    fn call(&self, saga: &Saga, step: &StepState, attempt: u32) -> pb::StepCall {
        let order = &saga.order;
        pb::StepCall {
            request_id: step.request_id.clone(),
            saga_id: saga.saga_id.clone(),
            step: self.name.to_owned(),
            attempt,
            order: Some(pb::Order {
                order_id: order.order_id.clone(),
                customer_id: order.customer_id.clone(),
                lines: order
                    .items
                    .iter()
                    .map(|item| pb::OrderLine {
                        product_id: item.product_id.clone(),
                        quantity: item.quantity,
                        unit_price_cents: item.unit_price_cents,
                    })
                    .collect(),
                total_cents: order.total_cents,
            }),
        }
    }
}

#[async_trait]
impl SagaStep for ParticipantStep {
    fn name(&self) -> &'static str {
        self.name
    }

    fn action(&self) -> &'static str {
        self.action
    }

    fn compensation(&self) -> &'static str {
        self.compensation
    }

    async fn act(&self, saga: &Saga, step: &StepState) -> StepOutcome {
        let call = self.call(saga, step, step.attempts);
        reply::act_outcome(self.acts.call(call, call::traceparent(saga)).await)
    }

    async fn compensate(&self, saga: &Saga, step: &StepState) -> StepOutcome {
        let call = self.call(saga, step, step.compensation_attempts);
        let reply = self.compensations.call(call, call::traceparent(saga)).await;
        reply::compensation_outcome(reply)
    }

    async fn records(
        &self,
        saga: &Saga,
        step: &StepState,
    ) -> Result<Vec<ParticipantRecord>, String> {
        self.caller
            .records(&self.history, saga, &step.request_id)
            .await
    }
}

/// `step`'s calls through `transport`: a queued call waits at most what a
/// single call may take.
fn batcher<T: Transport>(step: &'static str, transport: T, caller: &Caller) -> Batcher<T> {
    Batcher::new(
        step,
        transport,
        caller.call_timeout(),
        crate::PARTICIPANT_CONNECT_TIMEOUT,
    )
}

/// The clients one step's calls go out on.
#[derive(Clone)]
struct Calls {
    /// Single calls, their replies limited to [`reply::MAX_REPLY_BYTES`].
    one: SagaStepServiceClient<GrpcChannel>,
    /// Batches.
    many: SagaStepServiceClient<GrpcChannel>,
    caller: Caller,
}

impl Calls {
    /// A batch of `calls` as the contract carries it, with `deadline`.
    fn batch(
        &self,
        calls: Vec<(pb::StepCall, String)>,
        deadline: Duration,
    ) -> tonic::Request<pb::StepCallBatch> {
        let calls = calls
            .into_iter()
            .map(|(call, traceparent)| pb::BatchedStepCall {
                call: Some(call),
                traceparent,
            })
            .collect();
        self.caller
            .request_with_deadline(pb::StepCallBatch { calls }, deadline)
    }
}

/// A call's size in a batch: its message, its trace context, and the
/// entry's tags and lengths.
fn batched_size(call: &pb::StepCall, traceparent: &str) -> usize {
    prost::Message::encoded_len(call) + traceparent.len() + 8
}

/// Act on its own, or several in one ActBatch.
struct Acts(Calls);

impl Transport for Acts {
    type Request = pb::StepCall;
    type Reply = pb::ActReply;

    fn one(
        &self,
        call: pb::StepCall,
        traceparent: String,
    ) -> BoxFuture<Result<pb::ActReply, Status>> {
        let mut client = self.0.one.clone();
        let request = self.0.caller.traced_request(call, &traceparent);
        Box::pin(async move { Ok(client.act(request).await?.into_inner()) })
    }

    fn many(
        &self,
        calls: Vec<(pb::StepCall, String)>,
        deadline: Duration,
    ) -> BoxFuture<BatchReply<pb::ActReply>> {
        let mut client = self.0.many.clone();
        let request = self.0.batch(calls, deadline);
        Box::pin(async move {
            let reply = client.act_batch(request).await?.into_inner();
            Ok(reply
                .results
                .into_iter()
                .map(|r| Answer {
                    request_id: r.request_id,
                    result: call::batch_result(r.result.map(|r| match r {
                        pb::act_result::Result::Reply(reply) => Ok(reply),
                        pb::act_result::Result::Error(e) => Err(e),
                    })),
                })
                .collect())
        })
    }

    fn size(call: &pb::StepCall, traceparent: &str) -> usize {
        batched_size(call, traceparent)
    }

    fn answers(call: &pb::StepCall, request_id: &str) -> bool {
        call.request_id == request_id
    }
}

/// Compensate on its own, or several in one CompensateBatch.
struct Compensations(Calls);

impl Transport for Compensations {
    type Request = pb::StepCall;
    type Reply = pb::CompensateReply;

    fn one(
        &self,
        call: pb::StepCall,
        traceparent: String,
    ) -> BoxFuture<Result<pb::CompensateReply, Status>> {
        let mut client = self.0.one.clone();
        let request = self.0.caller.traced_request(call, &traceparent);
        Box::pin(async move { Ok(client.compensate(request).await?.into_inner()) })
    }

    fn many(
        &self,
        calls: Vec<(pb::StepCall, String)>,
        deadline: Duration,
    ) -> BoxFuture<BatchReply<pb::CompensateReply>> {
        let mut client = self.0.many.clone();
        let request = self.0.batch(calls, deadline);
        Box::pin(async move {
            let reply = client.compensate_batch(request).await?.into_inner();
            Ok(reply
                .results
                .into_iter()
                .map(|r| Answer {
                    request_id: r.request_id,
                    result: call::batch_result(r.result.map(|r| match r {
                        pb::compensate_result::Result::Reply(reply) => Ok(reply),
                        pb::compensate_result::Result::Error(e) => Err(e),
                    })),
                })
                .collect())
        })
    }

    fn size(call: &pb::StepCall, traceparent: &str) -> usize {
        batched_size(call, traceparent)
    }

    fn answers(call: &pb::StepCall, request_id: &str) -> bool {
        call.request_id == request_id
    }
}

/// A configured name, kept for the life of the process: step names are
/// `&'static str` everywhere (the engine's step names, metric labels), and
/// a process reads its steps file once, so each distinct name is allocated
/// once (a test that builds many definitions reuses them).
fn lasting(name: &str) -> &'static str {
    static NAMES: Mutex<Option<HashSet<&'static str>>> = Mutex::new(None);
    let Ok(mut names) = NAMES.lock() else {
        return Box::leak(name.to_owned().into_boxed_str());
    };
    let names = names.get_or_insert_with(HashSet::new);
    if let Some(known) = names.get(name) {
        return known;
    }
    let leaked: &'static str = Box::leak(name.to_owned().into_boxed_str());
    names.insert(leaked);
    leaked
}
