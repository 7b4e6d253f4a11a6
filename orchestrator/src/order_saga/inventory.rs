//! The order saga's inventory step: deduct every line of the order, put
//! them back.

use super::call::Caller;
use crate::saga::{Saga, Step};
use crate::step::{ParticipantRecord, SagaStep, StepOutcome};
use async_trait::async_trait;
use saga_proto::inventory::v1 as pb;
use saga_proto::inventory::v1::inventory_service_client::InventoryServiceClient;
use saga_proto::participant::v1::operation_history_service_client::OperationHistoryServiceClient;
use service_kit::channel::GrpcChannel;

/// Deduct (action) and Restock (compensation) of inventory-svc.
pub struct InventoryStep {
    client: InventoryServiceClient<GrpcChannel>,
    /// The same channel's `OperationHistoryService`, for [`SagaStep::records`].
    history: OperationHistoryServiceClient<GrpcChannel>,
    caller: Caller,
}

impl InventoryStep {
    /// The step over a channel to inventory-svc.
    pub fn new(channel: GrpcChannel, caller: Caller) -> Self {
        InventoryStep {
            client: InventoryServiceClient::new(channel.clone()),
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

    async fn act(&self, saga: &Saga, step: &Step) -> StepOutcome {
        let deduct = pb::DeductRequest {
            request_id: step.request_id.clone(),
            lines: lines(saga),
        };
        let reply = self
            .client
            .clone()
            .deduct(self.caller.request(saga, deduct))
            .await;
        Caller::outcome(reply)
    }

    async fn compensate(&self, saga: &Saga, step: &Step) -> StepOutcome {
        let restock = pb::RestockRequest {
            request_id: step.request_id.clone(),
            lines: lines(saga),
        };
        let reply = self
            .client
            .clone()
            .restock(self.caller.request(saga, restock))
            .await;
        Caller::outcome(reply)
    }

    async fn records(&self, saga: &Saga, step: &Step) -> Result<Vec<ParticipantRecord>, String> {
        self.caller
            .records(&self.history, saga, &step.request_id)
            .await
    }
}
