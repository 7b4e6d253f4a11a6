//! The order saga's payment step: charge the order's total, refund it.

use super::call::{self, Caller};
use super::call_batching::{BatchReply, Batcher, BoxFuture, Transport};
use super::classify::step_outcome_of;
use crate::saga::{Saga, StepState};
use crate::step::{ParticipantRecord, SagaStep, StepOutcome};
use async_trait::async_trait;
use saga_proto::participant::v1::operation_history_service_client::OperationHistoryServiceClient;
use saga_proto::payment::v1 as pb;
use saga_proto::payment::v1::payment_service_client::PaymentServiceClient;
use service_kit::channel::GrpcChannel;

/// Charge (action) and Refund (compensation) of payment-svc.
pub struct PaymentStep {
    client: PaymentServiceClient<GrpcChannel>,
    /// Charges, batched under load ([`super::call_batching`]).
    charges: Batcher<Charges>,
    /// The same channel's `OperationHistoryService`, for [`SagaStep::records`].
    history: OperationHistoryServiceClient<GrpcChannel>,
    caller: Caller,
}

impl PaymentStep {
    /// The step over a channel to payment-svc.
    pub fn new(channel: GrpcChannel, caller: Caller) -> Self {
        let client = PaymentServiceClient::new(channel.clone());
        let charges = Charges {
            client: client.clone(),
            caller: caller.clone(),
        };
        PaymentStep {
            charges: Batcher::new(
                super::PAYMENT,
                charges,
                caller.call_timeout(),
                crate::PARTICIPANT_CONNECT_TIMEOUT,
            ),
            client,
            history: OperationHistoryServiceClient::new(channel),
            caller,
        }
    }
}

#[async_trait]
impl SagaStep for PaymentStep {
    fn name(&self) -> &'static str {
        super::PAYMENT
    }

    fn action(&self) -> &'static str {
        "charge"
    }

    fn compensation(&self) -> &'static str {
        "refund"
    }

    async fn act(&self, saga: &Saga, step: &StepState) -> StepOutcome {
        let charge = pb::ChargeRequest {
            request_id: step.request_id.clone(),
            customer_id: saga.order.customer_id.clone(),
            amount_cents: saga.order.total_cents,
        };
        step_outcome_of(self.charges.call(charge, call::traceparent(saga)).await)
    }

    async fn compensate(&self, saga: &Saga, step: &StepState) -> StepOutcome {
        let refund = pb::RefundRequest {
            request_id: step.request_id.clone(),
            customer_id: saga.order.customer_id.clone(),
            amount_cents: saga.order.total_cents,
        };
        let reply = self
            .client
            .clone()
            .refund(self.caller.request(saga, refund))
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

/// Charge on its own, or several in one ChargeBatch.
struct Charges {
    client: PaymentServiceClient<GrpcChannel>,
    caller: Caller,
}

impl Transport for Charges {
    type Request = pb::ChargeRequest;
    type Reply = pb::ChargeResponse;

    fn one(
        &self,
        request: pb::ChargeRequest,
        traceparent: String,
    ) -> BoxFuture<Result<pb::ChargeResponse, tonic::Status>> {
        let mut client = self.client.clone();
        let request = self.caller.traced_request(request, &traceparent);
        Box::pin(async move { Ok(client.charge(request).await?.into_inner()) })
    }

    fn answers(request: &pb::ChargeRequest, reply: &pb::ChargeResponse) -> bool {
        reply.request_id == request.request_id
    }

    fn size(request: &pb::ChargeRequest, traceparent: &str) -> usize {
        // The call's message inside its batch entry: tag, length, fields.
        prost::Message::encoded_len(request) + traceparent.len() + 8
    }

    fn many(
        &self,
        calls: Vec<(pb::ChargeRequest, String)>,
        deadline: std::time::Duration,
    ) -> BoxFuture<BatchReply<pb::ChargeResponse>> {
        let mut client = self.client.clone();
        let calls = calls
            .into_iter()
            .map(|(request, traceparent)| pb::ChargeCall {
                request: Some(request),
                traceparent,
            })
            .collect();
        let request = self
            .caller
            .request_with_deadline(pb::ChargeBatchRequest { calls }, deadline);
        Box::pin(async move {
            let reply = client.charge_batch(request).await?.into_inner();
            Ok(reply
                .results
                .into_iter()
                .map(|r| {
                    call::batch_result(r.result.map(|r| match r {
                        pb::charge_result::Result::Reply(reply) => Ok(reply),
                        pb::charge_result::Result::Error(e) => Err(e),
                    }))
                })
                .collect())
        })
    }
}
