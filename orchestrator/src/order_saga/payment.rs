//! The order saga's payment step: charge the order's total, refund it.

use super::call::Caller;
use crate::saga::{Saga, Step};
use crate::step::{ParticipantRecord, SagaStep, StepOutcome};
use async_trait::async_trait;
use saga_proto::participant::v1::operation_history_service_client::OperationHistoryServiceClient;
use saga_proto::payment::v1 as pb;
use saga_proto::payment::v1::payment_service_client::PaymentServiceClient;
use service_kit::channel::GrpcChannel;

/// Charge (action) and Refund (compensation) of payment-svc.
pub struct PaymentStep {
    client: PaymentServiceClient<GrpcChannel>,
    /// The same channel's `OperationHistoryService`, for [`SagaStep::records`].
    history: OperationHistoryServiceClient<GrpcChannel>,
    caller: Caller,
}

impl PaymentStep {
    /// The step over a channel to payment-svc.
    pub fn new(channel: GrpcChannel, caller: Caller) -> Self {
        PaymentStep {
            client: PaymentServiceClient::new(channel.clone()),
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

    async fn act(&self, saga: &Saga, step: &Step) -> StepOutcome {
        let charge = pb::ChargeRequest {
            request_id: step.request_id.clone(),
            customer_id: saga.order.customer_id.clone(),
            amount_cents: saga.order.total_cents,
        };
        let reply = self
            .client
            .clone()
            .charge(self.caller.request(saga, charge))
            .await;
        Caller::outcome(reply)
    }

    async fn compensate(&self, saga: &Saga, step: &Step) -> StepOutcome {
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
        Caller::outcome(reply)
    }

    async fn records(&self, saga: &Saga, step: &Step) -> Result<Vec<ParticipantRecord>, String> {
        self.caller
            .records(&self.history, saga, &step.request_id)
            .await
    }
}
