//! `inventory.v1` adapter: checks and converts wire types, calls the store,
//! maps results to replies and status codes. No business logic lives here.
//!
//! Deduct and Restock consult the fault injector ([`Faults`]) after their
//! input is validated: before the store call (latency, transient error,
//! refusal) and after it (lost reply). GetProduct and AddStock are never
//! faulted (see `service_kit::faults` for why).
//!
//! AddStock is an admin RPC: when an admin token is configured
//! (`service_kit::auth`) it requires `authorization: Bearer <token>` and
//! answers UNAUTHENTICATED otherwise, before its input is even validated.
//!
//! Every mutating call is counted once its outcome is committed, before a
//! lost reply is injected (`participant_operations_total{kind, result}`, see
//! `operation_history::metrics`), and runs in a span carrying its
//! `request_id` and the caller's W3C `trace_id` (from `traceparent`; empty
//! when absent), so its log lines join the orchestrator's saga. Every call
//! is timed (`participant_call_duration_seconds{rpc}`).

use crate::store::{Deduction, InventoryStore, Line, ProductOperation, ProductView, StockAddition};
use operation_history::metrics as history_metrics;
use operation_history::{ActionReply, CompensationResult};
use operation_history::{Refusal, RefusalReason};
use saga_proto::inventory::v1 as pb;
use service_kit::auth::AdminAuth;
use service_kit::faults::{CallKind, Faults, REFUSAL_MESSAGE};
use service_kit::metrics::CallTimer;
use service_kit::{trace, validate};
use std::sync::Arc;
use tonic::{Code, Request, Response, Status};
use tracing::Instrument;

/// Default and maximum number of operations returned by GetProduct.
const DEFAULT_OPERATIONS: usize = 20;
const MAX_OPERATIONS: usize = 100;
/// Most lines accepted in one Deduct or Restock.
pub const MAX_LINES: usize = 100;

/// Implements `inventory.v1.InventoryService` over an [`InventoryStore`].
pub struct InventoryApi {
    store: Arc<dyn InventoryStore>,
    faults: Arc<Faults>,
    admin: AdminAuth,
}

impl InventoryApi {
    /// Consulting `faults` on every Deduct and Restock.
    pub fn with_faults(store: Arc<dyn InventoryStore>, faults: Arc<Faults>) -> Self {
        InventoryApi {
            store,
            faults,
            admin: AdminAuth::open(),
        }
    }

    /// AddStock requires `admin`'s token (open by default).
    pub fn with_admin(self, admin: AdminAuth) -> Self {
        InventoryApi { admin, ..self }
    }
}

/// Checks a Deduct/Restock request: ids, 1..=[`MAX_LINES`] lines, positive
/// quantities whose sum fits in an int64.
fn deduction(request_id: String, lines: Vec<pb::Line>) -> Result<Deduction, Status> {
    validate::id("request_id", &request_id)?;
    if lines.is_empty() || lines.len() > MAX_LINES {
        return Err(validate::invalid(
            "lines",
            &format!("must hold 1 to {MAX_LINES} lines (got {})", lines.len()),
        ));
    }
    let mut checked = Vec::with_capacity(lines.len());
    for (i, line) in lines.into_iter().enumerate() {
        validate::id(&format!("lines[{i}].product_id"), &line.product_id)?;
        validate::positive(&format!("lines[{i}].quantity"), line.quantity)?;
        checked.push(Line {
            product_id: line.product_id,
            quantity: line.quantity,
        });
    }
    let deduction = Deduction {
        request_id,
        lines: checked,
    };
    if deduction.total_units().is_none() {
        return Err(validate::invalid(
            "lines",
            "total quantity does not fit in an int64",
        ));
    }
    Ok(deduction)
}

/// Logs, in the call's span, a mutating call that ended in an error status
/// (a business refusal, a hanging or mismatched call, an injected fault),
/// so every call of a saga leaves a line carrying its trace id.
fn logged<T>(span: &tracing::Span, result: Result<T, Status>) -> Result<T, Status> {
    if let Err(status) = &result {
        span.in_scope(|| match status.code() {
            Code::Internal | Code::Unknown | Code::DataLoss => {
                tracing::warn!(code = ?status.code(), error = status.message(), "call failed")
            }
            code => tracing::info!(?code, error = status.message(), "not applied"),
        });
    }
    result
}

/// Business refusals become their status code; applied results the value.
fn applied<T>(reply: ActionReply<T>) -> Result<(T, bool), Status> {
    match reply {
        ActionReply::Applied { value, replayed } => Ok((value, replayed)),
        ActionReply::Refused { refusal, .. } => Err(refusal.into()),
    }
}

pub(crate) fn effect(result: &CompensationResult) -> i32 {
    use operation_history::CompensationEffect as E;
    use pb::CompensationEffect as W;
    match result.effect {
        E::Undone => W::Undone,
        E::NullCompensation => W::NullCompensation,
        E::NothingToUndo => W::NothingToUndo,
    }
    .into()
}

fn operation(o: ProductOperation) -> pb::Operation {
    pb::Operation {
        request_id: o.request_id,
        kind: o.kind,
        status: o.status,
        quantity: o.quantity,
        line_index: o.line_index.unwrap_or(0),
        detail: o.detail,
        recorded_at: Some(timestamp(o.recorded_at_ms)),
    }
}

/// Milliseconds since the epoch as a protobuf timestamp.
pub fn timestamp(ms: i64) -> prost_types::Timestamp {
    prost_types::Timestamp {
        seconds: ms.div_euclid(1000),
        nanos: i32::try_from(ms.rem_euclid(1000) * 1_000_000).unwrap_or(0),
    }
}

#[tonic::async_trait]
impl pb::inventory_service_server::InventoryService for InventoryApi {
    async fn deduct(
        &self,
        request: Request<pb::DeductRequest>,
    ) -> Result<Response<pb::DeductResponse>, Status> {
        let _timer = CallTimer::start("deduct");
        let trace_id = trace::trace_id(request.metadata()).unwrap_or_default();
        let r = request.into_inner();
        let deduction = deduction(r.request_id, r.lines)?;
        let request_id = deduction.request_id.clone();
        let span = tracing::info_span!(
            "deduct",
            request_id = %request_id,
            lines = deduction.lines.len(),
            trace_id = %trace_id,
        );
        let result = async move {
            let admitted = self.faults.before(CallKind::Action, &request_id).await?;
            let reply = if admitted.refuse() {
                let refusal = Refusal::new(RefusalReason::Insufficient, REFUSAL_MESSAGE);
                self.store.refuse_deduct(deduction, refusal).await
            } else {
                self.store.deduct(deduction).await
            };
            // Counted once committed, before a lost reply is injected (the
            // deduct was applied all the same).
            history_metrics::action("deduct", &reply);
            let reply = reply.map_err(Status::from).and_then(applied);
            let ((), replayed) = self.faults.after(admitted, &request_id, reply)?;
            tracing::debug!(replayed, "deducted");
            Ok(Response::new(pb::DeductResponse {
                request_id,
                replayed,
            }))
        }
        .instrument(span.clone())
        .await;
        logged(&span, result)
    }

    async fn restock(
        &self,
        request: Request<pb::RestockRequest>,
    ) -> Result<Response<pb::RestockResponse>, Status> {
        let _timer = CallTimer::start("restock");
        let trace_id = trace::trace_id(request.metadata()).unwrap_or_default();
        let r = request.into_inner();
        let deduction = deduction(r.request_id, r.lines)?;
        let request_id = deduction.request_id.clone();
        let span = tracing::info_span!(
            "restock",
            request_id = %request_id,
            lines = deduction.lines.len(),
            trace_id = %trace_id,
        );
        let result = async move {
            let admitted = self
                .faults
                .before(CallKind::Compensation, &request_id)
                .await?;
            let reply = self.store.restock(deduction).await;
            history_metrics::compensation("restock", &reply);
            let result = self
                .faults
                .after(admitted, &request_id, reply.map_err(Status::from))?;
            tracing::info!(effect = ?result.effect, replayed = result.replayed, "restock");
            Ok(Response::new(pb::RestockResponse {
                request_id,
                effect: effect(&result),
                replayed: result.replayed,
            }))
        }
        .instrument(span.clone())
        .await;
        logged(&span, result)
    }

    async fn get_product(
        &self,
        request: Request<pb::GetProductRequest>,
    ) -> Result<Response<pb::Product>, Status> {
        let _timer = CallTimer::start("get_product");
        let r = request.into_inner();
        validate::id("product_id", &r.product_id)?;
        let limit = validate::limit(
            "operation_limit",
            r.operation_limit,
            DEFAULT_OPERATIONS,
            MAX_OPERATIONS,
        )?;
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
        Ok(Response::new(pb::Product {
            product_id,
            available,
            recent_operations: recent_operations.into_iter().map(operation).collect(),
        }))
    }

    async fn add_stock(
        &self,
        request: Request<pb::AddStockRequest>,
    ) -> Result<Response<pb::AddStockResponse>, Status> {
        let _timer = CallTimer::start("add_stock");
        // Admin only: checked before anything else, so a refused call
        // changes nothing.
        self.admin.check(request.metadata())?;
        let trace_id = trace::trace_id(request.metadata()).unwrap_or_default();
        let r = request.into_inner();
        validate::id("request_id", &r.request_id)?;
        validate::id("product_id", &r.product_id)?;
        validate::positive("quantity", r.quantity)?;
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
            trace_id = %trace_id,
        );
        let result = async move {
            // Admin seeding: never faulted (draws nothing); asked anyway so
            // the policy lives in one place.
            let admitted = self.faults.before(CallKind::Admin, &request_id).await?;
            let reply = self.store.add_stock(addition).await;
            history_metrics::action("add_stock", &reply);
            let reply = reply.map_err(Status::from).and_then(applied);
            let (available, replayed) = self.faults.after(admitted, &request_id, reply)?;
            tracing::debug!(available, replayed, "stock added");
            Ok(Response::new(pb::AddStockResponse {
                request_id,
                available,
                replayed,
            }))
        }
        .instrument(span.clone())
        .await;
        logged(&span, result)
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

    #[test]
    fn timestamps_split_milliseconds() {
        let t = timestamp(1_500);
        assert_eq!((t.seconds, t.nanos), (1, 500_000_000));
        let t = timestamp(-1);
        assert_eq!((t.seconds, t.nanos), (-1, 999_000_000));
    }
}
