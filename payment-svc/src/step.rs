//! payment-svc as a saga step: `participant.v1.SagaStepService` (served
//! by the participant kit, [`participant_kit::step`]) over the same store
//! and the same rules as Charge and Refund.
//!
//! Act charges the order's total to its customer, Compensate refunds it:
//! a step call *is* a charge and its refund, recorded under the kinds
//! `charge` and `refund` like the domain RPCs' — so the operationHistory,
//! `ListOperations`, GetAccount and the metrics read the same whichever
//! way a charge came. The parameters a repeat must match are every field
//! of the step call (its saga, step and order), as the contract says; a
//! domain Charge under the same request id is another call.

use crate::grpc::REFUSAL_REASONS;
use crate::store::{CHARGE, PaymentStore, REFUND, Transfer};
use async_trait::async_trait;
use participant_kit::step::{StepCall, StepRefusal, StepStore, domain_refusal};
use participant_kit::{ActionReply, Admission, CompensationResult, ParticipantError, Refusal};

/// The charge a step call asks for: the order's total from its customer.
/// A total that is not positive cannot be charged (INVALID_ARGUMENT naming
/// `order.total_cents`).
fn charge_of(call: StepCall) -> Result<Transfer, ParticipantError> {
    if call.order.total_cents <= 0 {
        return Err(ParticipantError::InvalidArgument {
            field: "order.total_cents".to_owned(),
            problem: format!(
                "must be positive to be charged (got {})",
                call.order.total_cents
            ),
        });
    }
    let parameters = Some(call.fingerprint());
    Ok(Transfer {
        request_id: call.request_id,
        customer_id: call.order.customer_id,
        amount_cents: call.order.total_cents,
        parameters,
    })
}

#[async_trait]
impl StepStore for dyn PaymentStore {
    fn kinds(&self) -> (&'static str, &'static str) {
        (CHARGE, REFUND)
    }

    async fn act(
        &self,
        call: StepCall,
        admission: Admission,
    ) -> Result<ActionReply<String>, ParticipantError> {
        let charge = charge_of(call)?;
        let amount = charge.amount_cents;
        Ok(match self.charge(charge, admission).await? {
            ActionReply::Applied { value, replayed } => ActionReply::Applied {
                value: format!("charged {amount} cents, balance {value} cents"),
                replayed,
            },
            ActionReply::Refused { refusal, replayed } => {
                ActionReply::Refused { refusal, replayed }
            }
        })
    }

    async fn compensate(&self, call: StepCall) -> Result<CompensationResult, ParticipantError> {
        self.refund(charge_of(call)?).await
    }

    fn refusal(&self, refusal: &Refusal) -> StepRefusal {
        domain_refusal(refusal, &REFUSAL_REASONS)
    }
}
