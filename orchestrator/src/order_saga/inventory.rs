//! The order saga's inventory step: deduct every line of the order, put
//! them back.

use super::call::{self, Caller};
use super::call_batching::{BatchReply, Batcher, BoxFuture, Transport};
use super::classify::step_outcome_of;
use crate::saga::{Saga, StepState};
use crate::step::{ParticipantRecord, SagaStep, StepOutcome};
use async_trait::async_trait;
use saga_proto::inventory::v1 as pb;
use saga_proto::inventory::v1::inventory_service_client::InventoryServiceClient;
use saga_proto::participant::v1::operation_history_service_client::OperationHistoryServiceClient;
use service_kit::channel::GrpcChannel;

/// Deduct (action) and Restock (compensation) of inventory-svc.
pub struct InventoryStep {
    client: InventoryServiceClient<GrpcChannel>,
    /// Deductions, batched under load ([`super::call_batching`]).
    deductions: Batcher<Deductions>,
    /// The same channel's `OperationHistoryService`, for [`SagaStep::records`].
    history: OperationHistoryServiceClient<GrpcChannel>,
    caller: Caller,
}

impl InventoryStep {
    /// The step over a channel to inventory-svc.
    pub fn new(channel: GrpcChannel, caller: Caller) -> Self {
        let client = InventoryServiceClient::new(channel.clone());
        let deductions = Deductions {
            client: client.clone(),
            caller: caller.clone(),
        };
        InventoryStep {
            deductions: Batcher::new(
                super::INVENTORY,
                deductions,
                caller.call_timeout(),
                crate::PARTICIPANT_CONNECT_TIMEOUT,
            ),
            client,
            history: OperationHistoryServiceClient::new(channel),
            caller,
        }
    }
}

/// The order's lines, in order: a line's position is its stable
/// `line_index` at the participant.
fn lines(saga: &Saga) -> Vec<pb::Line> {
    saga.order
        .items
        .iter()
        .map(|i| pb::Line {
            product_id: i.product_id.clone(),
            quantity: i.quantity,
        })
        .collect()
}

#[async_trait]
impl SagaStep for InventoryStep {
    fn name(&self) -> &'static str {
        super::INVENTORY
    }

    fn action(&self) -> &'static str {
        "deduct"
    }

    fn compensation(&self) -> &'static str {
        "restock"
    }

    async fn act(&self, saga: &Saga, step: &StepState) -> StepOutcome {
        let deduct = pb::DeductRequest {
            request_id: step.request_id.clone(),
            lines: lines(saga),
        };
        step_outcome_of(self.deductions.call(deduct, call::traceparent(saga)).await)
    }

    async fn compensate(&self, saga: &Saga, step: &StepState) -> StepOutcome {
        let restock = pb::RestockRequest {
            request_id: step.request_id.clone(),
            lines: lines(saga),
        };
        let reply = self
            .client
            .clone()
            .restock(self.caller.request(saga, restock))
            .await;
        step_outcome_of(reply)
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

/// Deduct on its own, or several in one DeductBatch.
struct Deductions {
    client: InventoryServiceClient<GrpcChannel>,
    caller: Caller,
}

impl Transport for Deductions {
    type Request = pb::DeductRequest;
    type Reply = pb::DeductResponse;

    fn one(
        &self,
        request: pb::DeductRequest,
        traceparent: String,
    ) -> BoxFuture<Result<pb::DeductResponse, tonic::Status>> {
        let mut client = self.client.clone();
        let request = self.caller.traced_request(request, &traceparent);
        Box::pin(async move { Ok(client.deduct(request).await?.into_inner()) })
    }

    fn answers(request: &pb::DeductRequest, reply: &pb::DeductResponse) -> bool {
        reply.request_id == request.request_id
    }

    fn size(request: &pb::DeductRequest, traceparent: &str) -> usize {
        // The call's message inside its batch entry: tag, length, fields.
        prost::Message::encoded_len(request) + traceparent.len() + 8
    }

    fn many(
        &self,
        calls: Vec<(pb::DeductRequest, String)>,
        deadline: std::time::Duration,
    ) -> BoxFuture<BatchReply<pb::DeductResponse>> {
        let mut client = self.client.clone();
        let calls = calls
            .into_iter()
            .map(|(request, traceparent)| pb::DeductCall {
                request: Some(request),
                traceparent,
            })
            .collect();
        let request = self
            .caller
            .request_with_deadline(pb::DeductBatchRequest { calls }, deadline);
        Box::pin(async move {
            let reply = client.deduct_batch(request).await?.into_inner();
            Ok(reply
                .results
                .into_iter()
                .map(|r| {
                    call::batch_result(r.result.map(|r| match r {
                        pb::deduct_result::Result::Reply(reply) => Ok(reply),
                        pb::deduct_result::Result::Error(e) => Err(e),
                    }))
                })
                .collect())
        })
    }
}
