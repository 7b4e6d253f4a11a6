//! inventory-svc as a saga step: `participant.v1.SagaStepService` (served
//! by the participant kit, [`participant_kit::step`]) over the same store
//! and the same rules as Deduct and Restock.
//!
//! Act deducts every line of the order, all or nothing; Compensate puts
//! them back. A step call *is* a deduction and its restock, recorded under
//! the kinds `deduct` and `restock`, each line under its stable
//! `(request_id, line_index)`, like the domain RPCs' — so the
//! operationHistory, `ListOperations`, GetProduct and the metrics read the
//! same whichever way a deduction came. The parameters a repeat must
//! match are every field of the step call (its saga, step and order), as
//! the contract says.

use crate::grpc::{MAX_LINES, REFUSAL_REASONS};
use crate::store::{DEDUCT, Deduction, InventoryStore, Line, RESTOCK};
use async_trait::async_trait;
use participant_kit::step::{StepCall, StepRefusal, StepStore, domain_refusal};
use participant_kit::{ActionReply, Admission, CompensationResult, ParticipantError, Refusal};

/// The deduction a step call asks for: its order's lines, in order (a
/// line's position is its stable index). 1 to [`MAX_LINES`] lines whose
/// units add up in an int64, or INVALID_ARGUMENT naming `order.lines`.
fn deduction_of(call: StepCall) -> Result<Deduction, ParticipantError> {
    let invalid = |problem: String| ParticipantError::InvalidArgument {
        field: "order.lines".to_owned(),
        problem,
    };
    let count = call.order.lines.len();
    if count == 0 || count > MAX_LINES {
        return Err(invalid(format!(
            "must hold 1 to {MAX_LINES} lines (got {count})"
        )));
    }
    let parameters = Some(call.fingerprint());
    let deduction = Deduction {
        request_id: call.request_id,
        lines: call
            .order
            .lines
            .into_iter()
            .map(|line| Line {
                product_id: line.product_id,
                quantity: line.quantity,
            })
            .collect(),
        parameters,
    };
    if deduction.total_units().is_none() {
        return Err(invalid(
            "total quantity does not fit in an int64".to_owned(),
        ));
    }
    Ok(deduction)
}

#[async_trait]
impl StepStore for dyn InventoryStore {
    fn kinds(&self) -> (&'static str, &'static str) {
        (DEDUCT, RESTOCK)
    }

    async fn act(
        &self,
        call: StepCall,
        admission: Admission,
    ) -> Result<ActionReply<String>, ParticipantError> {
        let deduction = deduction_of(call)?;
        let lines = deduction.lines.len();
        let units = deduction.total_units().unwrap_or_default();
        Ok(match self.deduct(deduction, admission).await? {
            ActionReply::Applied {
                value: (),
                replayed,
            } => ActionReply::Applied {
                value: format!("deducted {units} units on {lines} lines"),
                replayed,
            },
            ActionReply::Refused { refusal, replayed } => {
                ActionReply::Refused { refusal, replayed }
            }
        })
    }

    async fn compensate(&self, call: StepCall) -> Result<CompensationResult, ParticipantError> {
        self.restock(deduction_of(call)?).await
    }

    fn refusal(&self, refusal: &Refusal) -> StepRefusal {
        domain_refusal(refusal, &REFUSAL_REASONS)
    }
}
