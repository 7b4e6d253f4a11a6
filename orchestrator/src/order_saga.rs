//! The order saga — the one place that defines it.
//!
//! Steps in forward order: payment (charge / refund), then inventory
//! (deduct / restock). Each step is one [`SagaStep`] value carrying its
//! names and both its calls ([`payment::PaymentStep`],
//! [`inventory::InventoryStep`]); [`OrderParticipants::definition`] lists
//! them. To add a step, write its `SagaStep` (a forgotten compensation does
//! not compile) and add it to that list.
//!
//! This is the orchestrator's gRPC client edge: requests carry the call
//! deadline and trace context ([`call`]), every participant status is
//! classified into a domain outcome here ([`classify`]), so no wire type
//! reaches the executor, and under load the forward calls of many sagas
//! share one batch RPC ([`call_batching`]).

pub mod call;
pub mod call_batching;
pub mod classify;
pub mod inventory;
pub mod payment;

use crate::step::{DefinitionError, SagaDefinition, SagaStep};
use service_kit::channel::GrpcChannel;
use std::sync::Arc;
use std::time::Duration;

/// Name of the payment step.
pub const PAYMENT: &str = "payment";
/// Name of the inventory step.
pub const INVENTORY: &str = "inventory";

/// The order saga's participants, reached over gRPC.
#[derive(Clone)]
pub struct OrderParticipants {
    payment: Arc<payment::PaymentStep>,
    inventory: Arc<inventory::InventoryStep>,
}

impl OrderParticipants {
    /// Participants on these channels; each call's deadline is
    /// `call_timeout`; no service token is sent.
    pub fn new(payment: GrpcChannel, inventory: GrpcChannel, call_timeout: Duration) -> Self {
        Self::with_caller(payment, inventory, call::Caller::new(call_timeout))
    }

    /// Participants on these channels, called as `caller` says (deadline,
    /// service token).
    pub fn with_caller(payment: GrpcChannel, inventory: GrpcChannel, caller: call::Caller) -> Self {
        OrderParticipants {
            payment: Arc::new(payment::PaymentStep::new(payment, caller.clone())),
            inventory: Arc::new(inventory::InventoryStep::new(inventory, caller)),
        }
    }

    /// The order saga's steps in forward order.
    pub fn steps(&self) -> Vec<Arc<dyn SagaStep>> {
        vec![self.payment.clone(), self.inventory.clone()]
    }

    /// The order saga (an error only if the steps' names collided).
    pub fn definition(&self) -> Result<SagaDefinition, DefinitionError> {
        SagaDefinition::new(self.steps())
    }
}
