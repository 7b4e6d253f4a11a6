//! `payment.v1` adapter: checks and converts wire types, calls the store,
//! maps results to replies and status codes. No business logic lives here.
//!
//! Charge and Refund consult the fault injector ([`Faults`]) after their
//! input is validated: before the store call (latency, transient error,
//! refusal) and after it (lost reply). GetAccount and Deposit are never
//! faulted (see `service_kit::faults` for why).
//!
//! Deposit is an admin RPC: when an admin token is configured
//! (`service_kit::auth`) it requires `authorization: Bearer <token>` and
//! answers UNAUTHENTICATED otherwise, before its input is even validated.
//!
//! Every mutating call is counted once its outcome is committed, before a
//! lost reply is injected (`participant_operations_total{kind, result}`, see
//! `operation_history::metrics`), and runs in a span carrying its
//! `request_id` and the caller's W3C `trace_id` (from `traceparent`; empty
//! when absent), so its log lines join the orchestrator's saga. Every call
//! is timed (`participant_call_duration_seconds{rpc}`).

use crate::store::{AccountView, PaymentStore, Transfer};
use operation_history::metrics as history_metrics;
use operation_history::{ActionReply, CompensationResult, OperationRecord};
use operation_history::{Refusal, RefusalReason};
use saga_proto::payment::v1 as pb;
use service_kit::auth::AdminAuth;
use service_kit::faults::{CallKind, Faults, REFUSAL_MESSAGE};
use service_kit::metrics::CallTimer;
use service_kit::{trace, validate};
use std::sync::Arc;
use tonic::{Code, Request, Response, Status};
use tracing::Instrument;

/// Default and maximum number of operations returned by GetAccount.
const DEFAULT_OPERATIONS: usize = 20;
const MAX_OPERATIONS: usize = 100;

/// Implements `payment.v1.PaymentService` over a [`PaymentStore`].
pub struct PaymentApi {
    store: Arc<dyn PaymentStore>,
    faults: Arc<Faults>,
    admin: AdminAuth,
}

impl PaymentApi {
    /// Consulting `faults` on every Charge and Refund.
    pub fn with_faults(store: Arc<dyn PaymentStore>, faults: Arc<Faults>) -> Self {
        PaymentApi {
            store,
            faults,
            admin: AdminAuth::open(),
        }
    }

    /// Deposit requires `admin`'s token (open by default).
    pub fn with_admin(self, admin: AdminAuth) -> Self {
        PaymentApi { admin, ..self }
    }
}

fn transfer(
    request_id: String,
    customer_id: String,
    amount_cents: i64,
) -> Result<Transfer, Status> {
    validate::id("request_id", &request_id)?;
    validate::id("customer_id", &customer_id)?;
    validate::positive("amount_cents", amount_cents)?;
    Ok(Transfer {
        request_id,
        customer_id,
        amount_cents,
    })
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

/// Business refusals become their status code; applied results the balance.
fn applied(reply: ActionReply<i64>) -> Result<(i64, bool), Status> {
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

fn operation(r: OperationRecord) -> pb::Operation {
    pb::Operation {
        request_id: r.request_id,
        kind: r.kind,
        status: r.status.as_str().to_owned(),
        amount_cents: r.amount,
        detail: r.detail,
        recorded_at: Some(timestamp(r.recorded_at_ms)),
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
impl pb::payment_service_server::PaymentService for PaymentApi {
    async fn charge(
        &self,
        request: Request<pb::ChargeRequest>,
    ) -> Result<Response<pb::ChargeResponse>, Status> {
        let _timer = CallTimer::start("charge");
        let trace_id = trace::trace_id(request.metadata()).unwrap_or_default();
        let r = request.into_inner();
        let charge = transfer(r.request_id, r.customer_id, r.amount_cents)?;
        let request_id = charge.request_id.clone();
        let span = tracing::info_span!(
            "charge",
            request_id = %request_id,
            customer_id = %charge.customer_id,
            amount_cents = charge.amount_cents,
            trace_id = %trace_id,
        );
        let result = async move {
            let admitted = self.faults.before(CallKind::Action, &request_id).await?;
            let reply = if admitted.refuse() {
                let refusal = Refusal::new(RefusalReason::Insufficient, REFUSAL_MESSAGE);
                self.store.refuse_charge(charge, refusal).await
            } else {
                self.store.charge(charge).await
            };
            // Counted once committed, before a lost reply is injected (the
            // charge was applied all the same).
            history_metrics::action("charge", &reply);
            let reply = reply.map_err(Status::from).and_then(applied);
            let (balance_cents, replayed) = self.faults.after(admitted, &request_id, reply)?;
            tracing::debug!(balance_cents, replayed, "charged");
            Ok(Response::new(pb::ChargeResponse {
                request_id,
                balance_cents,
                replayed,
            }))
        }
        .instrument(span.clone())
        .await;
        logged(&span, result)
    }

    async fn refund(
        &self,
        request: Request<pb::RefundRequest>,
    ) -> Result<Response<pb::RefundResponse>, Status> {
        let _timer = CallTimer::start("refund");
        let trace_id = trace::trace_id(request.metadata()).unwrap_or_default();
        let r = request.into_inner();
        let refund = transfer(r.request_id, r.customer_id, r.amount_cents)?;
        let request_id = refund.request_id.clone();
        let span = tracing::info_span!(
            "refund",
            request_id = %request_id,
            customer_id = %refund.customer_id,
            amount_cents = refund.amount_cents,
            trace_id = %trace_id,
        );
        let result = async move {
            let admitted = self
                .faults
                .before(CallKind::Compensation, &request_id)
                .await?;
            let reply = self.store.refund(refund).await;
            history_metrics::compensation("refund", &reply);
            let result = self
                .faults
                .after(admitted, &request_id, reply.map_err(Status::from))?;
            tracing::info!(effect = ?result.effect, replayed = result.replayed, "refund");
            Ok(Response::new(pb::RefundResponse {
                request_id,
                effect: effect(&result),
                replayed: result.replayed,
            }))
        }
        .instrument(span.clone())
        .await;
        logged(&span, result)
    }

    async fn get_account(
        &self,
        request: Request<pb::GetAccountRequest>,
    ) -> Result<Response<pb::Account>, Status> {
        let _timer = CallTimer::start("get_account");
        let r = request.into_inner();
        validate::id("customer_id", &r.customer_id)?;
        let limit = validate::limit(
            "operation_limit",
            r.operation_limit,
            DEFAULT_OPERATIONS,
            MAX_OPERATIONS,
        )?;
        let Some(AccountView {
            customer_id,
            balance_cents,
            recent_operations,
        }) = self.store.account(r.customer_id.clone(), limit).await?
        else {
            return Err(Status::not_found(format!(
                "customer {:?} has no account",
                r.customer_id
            )));
        };
        Ok(Response::new(pb::Account {
            customer_id,
            balance_cents,
            recent_operations: recent_operations.into_iter().map(operation).collect(),
        }))
    }

    async fn deposit(
        &self,
        request: Request<pb::DepositRequest>,
    ) -> Result<Response<pb::DepositResponse>, Status> {
        let _timer = CallTimer::start("deposit");
        // Admin only: checked before anything else, so a refused call
        // changes nothing.
        self.admin.check(request.metadata())?;
        let trace_id = trace::trace_id(request.metadata()).unwrap_or_default();
        let r = request.into_inner();
        let deposit = transfer(r.request_id, r.customer_id, r.amount_cents)?;
        let request_id = deposit.request_id.clone();
        let span = tracing::info_span!(
            "deposit",
            request_id = %request_id,
            customer_id = %deposit.customer_id,
            amount_cents = deposit.amount_cents,
            trace_id = %trace_id,
        );
        let result = async move {
            // Admin seeding: never faulted (draws nothing); asked anyway so
            // the policy lives in one place.
            let admitted = self.faults.before(CallKind::Admin, &request_id).await?;
            let reply = self.store.deposit(deposit).await;
            history_metrics::action("deposit", &reply);
            let reply = reply.map_err(Status::from).and_then(applied);
            let (balance_cents, replayed) = self.faults.after(admitted, &request_id, reply)?;
            tracing::debug!(balance_cents, replayed, "deposited");
            Ok(Response::new(pb::DepositResponse {
                request_id,
                balance_cents,
                replayed,
            }))
        }
        .instrument(span.clone())
        .await;
        logged(&span, result)
    }
}
