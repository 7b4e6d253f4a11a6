//! `inventory.v1` adapter: checks and converts wire types, hands each call
//! to the participant pipeline (`participant_kit::pipeline`: timer, span,
//! faults, store, metrics, reply) and maps results back. No business logic
//! lives here.
//!
//! AddStock is an admin RPC: when an admin token is configured it requires
//! `authorization: Bearer <token>` and answers UNAUTHENTICATED otherwise,
//! before its input is even validated.

use crate::store::{Deduction, InventoryStore, Line, ProductOperation, ProductView, StockAddition};
use participant_kit::faults::CallKind;
use participant_kit::pipeline::Call;
use participant_kit::{Kit, wire};
use saga_proto::inventory::v1 as pb;
use saga_proto::participant::v1 as participant;
use service_kit::time::timestamp;
use service_kit::validate;
use std::sync::Arc;
use tonic::{Request, Response, Status};

/// Most lines accepted in one Deduct or Restock.
pub const MAX_LINES: usize = 100;

/// The ErrorInfo reasons of this participant's business refusals (domain
/// `inventory.v1`): an unknown product is `PRODUCT_NOT_FOUND`, a deduct over the availability `INSUFFICIENT_STOCK`,
/// stock added past the largest availability `STOCK_OVERFLOW`. An API: never rename one.
pub const REFUSAL_REASONS: participant_kit::RefusalReasons = participant_kit::RefusalReasons {
    domain: "inventory.v1",
    not_found: "PRODUCT_NOT_FOUND",
    insufficient: "INSUFFICIENT_STOCK",
    overflow: "STOCK_OVERFLOW",
};

/// Implements `inventory.v1.InventoryService` over an [`InventoryStore`].
pub struct InventoryApi {
    store: Arc<dyn InventoryStore>,
    kit: Kit,
}

impl InventoryApi {
    /// The service over `store`, with `kit`'s faults and admin token.
    pub fn new(store: Arc<dyn InventoryStore>, kit: Kit) -> Self {
        InventoryApi {
            store,
            kit: kit.with_refusal_reasons(REFUSAL_REASONS),
        }
    }
}

/// Checks a Deduct/Restock request: ids, 1..=[`MAX_LINES`] lines, positive
/// quantities whose sum fits in an int64; every bad field is named at once.
fn deduction(request_id: String, lines: Vec<pb::Line>) -> Result<Deduction, Status> {
    let mut bad = validate::Violations::new();
    bad.id("request_id", &request_id);
    if lines.is_empty() || lines.len() > MAX_LINES {
        // A request past the cap is not read line by line.
        bad.add(
            "lines",
            format!("must hold 1 to {MAX_LINES} lines (got {})", lines.len()),
        );
    } else {
        for (i, line) in lines.iter().enumerate() {
            bad.id(format!("lines[{i}].product_id"), &line.product_id);
            bad.positive(format!("lines[{i}].quantity"), line.quantity);
        }
    }
    bad.into_result()?;
    let deduction = Deduction::new(
        request_id,
        lines
            .into_iter()
            .map(|line| Line {
                product_id: line.product_id,
                quantity: line.quantity,
            })
            .collect(),
    );
    if deduction.total_units().is_none() {
        return Err(validate::invalid(
            "lines",
            "total quantity does not fit in an int64",
        ));
    }
    Ok(deduction)
}

/// A product's operation as the wire shows it.
fn operation(product_id: &str, o: ProductOperation) -> participant::Operation {
    participant::Operation {
        request_id: o.request_id,
        kind: o.kind,
        status: o.status,
        amount: o.quantity,
        detail: o.detail,
        recorded_at: Some(timestamp(o.recorded_at_ms)),
        line_index: o.line_index,
        subject: product_id.to_owned(),
    }
}

/// The call's span, named after the RPC: which order lines and which trace.
macro_rules! deduction_span {
    ($rpc:literal, $d:expr, $trace_id:expr) => {
        tracing::info_span!(
            $rpc,
            request_id = %$d.request_id,
            lines = $d.lines.len(),
            trace_id = %$trace_id,
        )
    };
}

impl InventoryApi {
    /// One Deduct, started (token checked) as `call`.
    async fn deduct_one(
        &self,
        call: Call<'_>,
        r: pb::DeductRequest,
    ) -> Result<pb::DeductResponse, Status> {
        let deduction = deduction(r.request_id, r.lines)?;
        let request_id = deduction.request_id.clone();
        let span = deduction_span!("deduct", &deduction, call.trace_id());
        let ((), replayed) = participant_kit::logged!(
            &span,
            call.action(span.clone(), &request_id, |admission| {
                self.store.deduct(deduction, admission)
            })
            .await
        )?;
        Ok(pb::DeductResponse {
            request_id,
            replayed,
        })
    }
}

#[tonic::async_trait]
impl pb::inventory_service_server::InventoryService for InventoryApi {
    async fn deduct(
        &self,
        request: Request<pb::DeductRequest>,
    ) -> Result<Response<pb::DeductResponse>, Status> {
        let call = self.kit.call("deduct", CallKind::Action, &request)?;
        let reply = self.deduct_one(call, request.into_inner()).await?;
        Ok(Response::new(reply))
    }

    async fn restock(
        &self,
        request: Request<pb::RestockRequest>,
    ) -> Result<Response<pb::RestockResponse>, Status> {
        let call = self.kit.call("restock", CallKind::Compensation, &request)?;
        let r = request.into_inner();
        let deduction = deduction(r.request_id, r.lines)?;
        let request_id = deduction.request_id.clone();
        let span = deduction_span!("restock", &deduction, call.trace_id());
        let result = participant_kit::logged!(
            &span,
            call.compensation(span.clone(), &request_id, || self.store.restock(deduction))
                .await
        )?;
        Ok(Response::new(pb::RestockResponse {
            request_id,
            effect: wire::effect(&result),
            replayed: result.replayed,
        }))
    }

    async fn get_product(
        &self,
        request: Request<pb::GetProductRequest>,
    ) -> Result<Response<pb::Product>, Status> {
        let _timer = self.kit.read("get_product", &request)?;
        let r = request.into_inner();
        validate::id("product_id", &r.product_id)?;
        let limit = wire::operation_limit(r.operation_limit)?;
        let Some(ProductView {
            product_id,
            available,
            recent_operations,
        }) = self.store.product(r.product_id.clone(), limit).await?
        else {
            return Err(Status::not_found(format!(
                "product {:?} does not exist",
                r.product_id
            )));
        };
        let recent_operations = recent_operations
            .into_iter()
            .map(|o| operation(&product_id, o))
            .collect();
        Ok(Response::new(pb::Product {
            product_id,
            available,
            recent_operations,
        }))
    }

    async fn add_stock(
        &self,
        request: Request<pb::AddStockRequest>,
    ) -> Result<Response<pb::AddStockResponse>, Status> {
        let call = self.kit.admin_call("add_stock", &request)?;
        let r = request.into_inner();
        let mut bad = validate::Violations::new();
        bad.id("request_id", &r.request_id);
        bad.id("product_id", &r.product_id);
        bad.positive("quantity", r.quantity);
        bad.into_result()?;
        let addition = StockAddition {
            request_id: r.request_id,
            product_id: r.product_id,
            quantity: r.quantity,
        };
        let request_id = addition.request_id.clone();
        let span = tracing::info_span!(
            "add_stock",
            request_id = %request_id,
            product_id = %addition.product_id,
            quantity = addition.quantity,
            trace_id = %call.trace_id(),
        );
        let (available, replayed) = participant_kit::logged!(
            &span,
            call.action(span.clone(), &request_id, |_| {
                self.store.add_stock(addition)
            })
            .await
        )?;
        Ok(Response::new(pb::AddStockResponse {
            request_id,
            available,
            replayed,
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tonic::Code;

    fn line(product_id: &str, quantity: i64) -> pb::Line {
        pb::Line {
            product_id: product_id.to_owned(),
            quantity,
        }
    }

    fn rejected(request_id: &str, lines: Vec<pb::Line>) -> String {
        let status = deduction(request_id.to_owned(), lines).unwrap_err();
        assert_eq!(status.code(), Code::InvalidArgument);
        status.message().to_owned()
    }

    #[test]
    fn deductions_are_checked_field_by_field() {
        let ok = deduction("o1".into(), vec![line("a", 1), line("b", 2)]).unwrap();
        assert_eq!(ok.lines.len(), 2);
        assert!(rejected("", vec![line("a", 1)]).starts_with("request_id:"));
        assert!(rejected("o1", vec![]).starts_with("lines:"));
        assert!(rejected("o1", vec![line("a", 1); MAX_LINES + 1]).starts_with("lines:"));
        assert!(deduction("o1".into(), vec![line("a", 1); MAX_LINES]).is_ok());
        let bad_id = vec![line("a", 1), line("b", 1), line("", 1)];
        assert!(rejected("o1", bad_id).starts_with("lines[2].product_id:"));
        let bad_quantity = vec![line("a", 1), line("b", 0)];
        assert!(rejected("o1", bad_quantity).starts_with("lines[1].quantity:"));
        let overflow = vec![line("a", i64::MAX), line("b", 1)];
        assert!(rejected("o1", overflow).starts_with("lines:"));
    }
}
