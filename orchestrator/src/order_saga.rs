//! The order saga — the one place that defines it.
//!
//! Steps in forward order: payment (charge / refund), then inventory
//! (deduct / restock). To add a step, add it to [`ORDER_SAGA`] and give
//! [`OrderParticipants::invoke`] the RPCs for its action and compensation.

use crate::engine::{SagaDefinition, StepDefinition};
use crate::executor::{Phase, StepInvoker};
use crate::saga::{Saga, Step};
use async_trait::async_trait;
use saga_proto::inventory::v1 as inventory;
use saga_proto::inventory::v1::inventory_service_client::InventoryServiceClient;
use saga_proto::payment::v1 as payment;
use saga_proto::payment::v1::payment_service_client::PaymentServiceClient;
use std::time::Duration;
use tonic::transport::Channel;
use tonic::{Request, Status};

pub const PAYMENT: &str = "payment";
pub const INVENTORY: &str = "inventory";

/// The order saga's steps.
pub const ORDER_SAGA: SagaDefinition = SagaDefinition {
    steps: &[
        StepDefinition {
            name: PAYMENT,
            action: "charge",
            compensation: "refund",
        },
        StepDefinition {
            name: INVENTORY,
            action: "deduct",
            compensation: "restock",
        },
    ],
};

/// gRPC clients of the order saga's participants.
#[derive(Clone)]
pub struct OrderParticipants {
    payment: PaymentServiceClient<Channel>,
    inventory: InventoryServiceClient<Channel>,
    /// Deadline of one participant call.
    call_timeout: Duration,
}

impl OrderParticipants {
    pub fn new(payment: Channel, inventory: Channel, call_timeout: Duration) -> Self {
        OrderParticipants {
            payment: PaymentServiceClient::new(payment),
            inventory: InventoryServiceClient::new(inventory),
            call_timeout,
        }
    }

    /// A participant request with the call deadline and the saga's trace
    /// context (`traceparent`, trace id = the saga id's 32 hex digits).
    fn request<T>(&self, saga: &Saga, message: T) -> Request<T> {
        let mut request = Request::new(message);
        request.set_timeout(self.call_timeout);
        if let Ok(value) = service_kit::trace::traceparent(&trace_id(saga)).parse() {
            request
                .metadata_mut()
                .insert(service_kit::trace::TRACEPARENT, value);
        }
        request
    }
}

/// The W3C trace id of a saga: its UUID's hex digits (saga ids are UUIDs;
/// anything else is hashed into 32 hex digits).
pub fn trace_id(saga: &Saga) -> String {
    match uuid::Uuid::parse_str(&saga.saga_id) {
        Ok(id) => id.simple().to_string(),
        Err(_) => {
            use sha2::{Digest, Sha256};
            hex::encode(&Sha256::digest(saga.saga_id.as_bytes())[..16])
        }
    }
}

fn lines(saga: &Saga) -> Vec<inventory::Line> {
    saga.order
        .items
        .iter()
        .map(|i| inventory::Line {
            product_id: i.product_id.clone(),
            quantity: i.quantity,
        })
        .collect()
}

#[async_trait]
impl StepInvoker for OrderParticipants {
    async fn invoke(&self, saga: &Saga, step: &Step, phase: Phase) -> Result<(), Status> {
        let request_id = step.request_id.clone();
        let customer_id = saga.order.customer_id.clone();
        let amount_cents = saga.order.total_cents;
        match (step.name.as_str(), phase) {
            (PAYMENT, Phase::Action) => {
                let r = payment::ChargeRequest {
                    request_id,
                    customer_id,
                    amount_cents,
                };
                self.payment
                    .clone()
                    .charge(self.request(saga, r))
                    .await
                    .map(drop)
            }
            (PAYMENT, Phase::Compensation) => {
                let r = payment::RefundRequest {
                    request_id,
                    customer_id,
                    amount_cents,
                };
                self.payment
                    .clone()
                    .refund(self.request(saga, r))
                    .await
                    .map(drop)
            }
            (INVENTORY, Phase::Action) => {
                let r = inventory::DeductRequest {
                    request_id,
                    lines: lines(saga),
                };
                self.inventory
                    .clone()
                    .deduct(self.request(saga, r))
                    .await
                    .map(drop)
            }
            (INVENTORY, Phase::Compensation) => {
                let r = inventory::RestockRequest {
                    request_id,
                    lines: lines(saga),
                };
                self.inventory
                    .clone()
                    .restock(self.request(saga, r))
                    .await
                    .map(drop)
            }
            (other, _) => Err(Status::unimplemented(format!(
                "order saga has no step {other:?}"
            ))),
        }
    }
}
