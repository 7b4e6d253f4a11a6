//! `payment.v1` adapter: checks and converts wire types, hands each call to
//! the participant pipeline (`participant_kit::pipeline`: timer, span,
//! faults, store, metrics, reply) and maps results back. No business logic
//! lives here.
//!
//! Deposit is an admin RPC: when an admin token is configured it requires
//! `authorization: Bearer <token>` and answers UNAUTHENTICATED otherwise,
//! before its input is even validated.

use crate::store::{AccountView, PaymentStore, Transfer};
use participant_kit::faults::CallKind;
use participant_kit::pipeline::Call;
use participant_kit::{Kit, wire};
use saga_proto::payment::v1 as pb;
use service_kit::validate;
use std::sync::Arc;
use tonic::{Request, Response, Status};

/// The ErrorInfo reasons of this participant's business refusals (domain
/// `payment.v1`): a customer without an account is `ACCOUNT_NOT_FOUND`, a charge over the balance `INSUFFICIENT_FUNDS`,
/// a deposit past the largest balance `BALANCE_OVERFLOW`. An API: never rename one.
pub const REFUSAL_REASONS: participant_kit::RefusalReasons = participant_kit::RefusalReasons {
    domain: "payment.v1",
    not_found: "ACCOUNT_NOT_FOUND",
    insufficient: "INSUFFICIENT_FUNDS",
    overflow: "BALANCE_OVERFLOW",
};

/// Implements `payment.v1.PaymentService` over a [`PaymentStore`].
pub struct PaymentApi {
    store: Arc<dyn PaymentStore>,
    kit: Kit,
}

impl PaymentApi {
    /// The service over `store`, with `kit`'s faults and admin token.
    pub fn new(store: Arc<dyn PaymentStore>, kit: Kit) -> Self {
        PaymentApi {
            store,
            kit: kit.with_refusal_reasons(REFUSAL_REASONS),
        }
    }
}

fn transfer(
    request_id: String,
    customer_id: String,
    amount_cents: i64,
) -> Result<Transfer, Status> {
    let mut bad = validate::Violations::new();
    bad.id("request_id", &request_id);
    bad.id("customer_id", &customer_id);
    bad.positive("amount_cents", amount_cents);
    bad.into_result()?;
    Ok(Transfer::new(request_id, customer_id, amount_cents))
}

/// The call's span, named after the RPC: what the transfer is and which
/// trace it belongs to.
macro_rules! span {
    ($rpc:literal, $t:expr, $trace_id:expr) => {
        tracing::info_span!(
            $rpc,
            request_id = %$t.request_id,
            customer_id = %$t.customer_id,
            amount_cents = $t.amount_cents,
            trace_id = %$trace_id,
        )
    };
}

impl PaymentApi {
    /// One Charge, started (token checked) as `call`.
    async fn charge_one(
        &self,
        call: Call<'_>,
        r: pb::ChargeRequest,
    ) -> Result<pb::ChargeResponse, Status> {
        let charge = transfer(r.request_id, r.customer_id, r.amount_cents)?;
        let request_id = charge.request_id.clone();
        let span = span!("charge", &charge, call.trace_id());
        let (balance_cents, replayed) = participant_kit::logged!(
            &span,
            call.action(span.clone(), &request_id, |admission| {
                self.store.charge(charge, admission)
            })
            .await
        )?;
        Ok(pb::ChargeResponse {
            request_id,
            balance_cents,
            replayed,
        })
    }
}

#[tonic::async_trait]
impl pb::payment_service_server::PaymentService for PaymentApi {
    async fn charge(
        &self,
        request: Request<pb::ChargeRequest>,
    ) -> Result<Response<pb::ChargeResponse>, Status> {
        let call = self.kit.call("charge", CallKind::Action, &request)?;
        let reply = self.charge_one(call, request.into_inner()).await?;
        Ok(Response::new(reply))
    }

    async fn refund(
        &self,
        request: Request<pb::RefundRequest>,
    ) -> Result<Response<pb::RefundResponse>, Status> {
        let call = self.kit.call("refund", CallKind::Compensation, &request)?;
        let r = request.into_inner();
        let refund = transfer(r.request_id, r.customer_id, r.amount_cents)?;
        let request_id = refund.request_id.clone();
        let span = span!("refund", &refund, call.trace_id());
        let result = participant_kit::logged!(
            &span,
            call.compensation(span.clone(), &request_id, || self.store.refund(refund))
                .await
        )?;
        Ok(Response::new(pb::RefundResponse {
            request_id,
            effect: wire::effect(&result),
            replayed: result.replayed,
        }))
    }

    async fn get_account(
        &self,
        request: Request<pb::GetAccountRequest>,
    ) -> Result<Response<pb::Account>, Status> {
        let _timer = self.kit.read("get_account", &request)?;
        let r = request.into_inner();
        validate::id("customer_id", &r.customer_id)?;
        let limit = wire::operation_limit(r.operation_limit)?;
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
            recent_operations: recent_operations.into_iter().map(wire::operation).collect(),
        }))
    }

    async fn deposit(
        &self,
        request: Request<pb::DepositRequest>,
    ) -> Result<Response<pb::DepositResponse>, Status> {
        let call = self.kit.admin_call("deposit", &request)?;
        let r = request.into_inner();
        let deposit = transfer(r.request_id, r.customer_id, r.amount_cents)?;
        let request_id = deposit.request_id.clone();
        let span = span!("deposit", &deposit, call.trace_id());
        let (balance_cents, replayed) = participant_kit::logged!(
            &span,
            call.action(span.clone(), &request_id, |_| self.store.deposit(deposit))
                .await
        )?;
        Ok(Response::new(pb::DepositResponse {
            request_id,
            balance_cents,
            replayed,
        }))
    }
}
