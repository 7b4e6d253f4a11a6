//! `participant.v1` conversions both participants' adapters use: the effect
//! of a compensation and one operationHistory entry (or listed operation).

use crate::record::{LoggedOperation, OperationRecord};
use crate::{CompensationEffect, CompensationResult};
use saga_proto::participant::v1 as pb;
use service_kit::time::timestamp;
use service_kit::validate;
use tonic::Status;

/// Operations a read (GetAccount, GetProduct) lists when it asks for none.
pub const DEFAULT_OPERATIONS: usize = 20;
/// Most operations a read lists.
pub const MAX_OPERATIONS: usize = 100;

/// The `operation_limit` of a read: 0 means [`DEFAULT_OPERATIONS`], at most
/// [`MAX_OPERATIONS`] (INVALID_ARGUMENT naming the field otherwise).
pub fn operation_limit(value: i32) -> Result<usize, Status> {
    validate::limit("operation_limit", value, DEFAULT_OPERATIONS, MAX_OPERATIONS)
}

/// The wire value of a compensation's effect.
pub fn effect(result: &CompensationResult) -> i32 {
    match result.effect {
        CompensationEffect::Undone => pb::CompensationEffect::Undone,
        CompensationEffect::NullCompensation => pb::CompensationEffect::NullCompensation,
        CompensationEffect::NothingToUndo => pb::CompensationEffect::NothingToUndo,
    }
    .into()
}

/// An operationHistory record as the wire shows it.
pub fn operation(r: OperationRecord) -> pb::Operation {
    logged(r.into())
}

/// A listed operation (a record or an order line) as the wire shows it.
pub fn logged(o: LoggedOperation) -> pb::Operation {
    pb::Operation {
        request_id: o.request_id,
        kind: o.kind,
        status: o.status,
        amount: o.amount,
        detail: o.detail,
        recorded_at: Some(timestamp(o.recorded_at_ms)),
        line_index: o.line_index,
        subject: o.subject,
    }
}
