//! How a saga's steps call a participant: every request carries the call
//! deadline, the saga's trace context and the service token (when one is
//! configured); every reply becomes a domain
//! [`StepOutcome`](crate::step::StepOutcome) at the edge
//! ([`super::reply`]). The same goes for reading what a participant
//! recorded under a step's request id
//! (`participant.v1.OperationHistoryService/ListOperations`, which every
//! participant serves): [`Caller::records`].

use crate::saga::Saga;
use crate::step::ParticipantRecord;
use saga_proto::participant::v1 as participant;
use saga_proto::participant::v1::operation_history_service_client::OperationHistoryServiceClient;
use service_kit::auth::{Role, TokenAuth};
use service_kit::channel::GrpcChannel;
use std::time::Duration;
use tonic::{Code, Request, Status};

/// What every participant call of a saga shares.
#[derive(Debug, Clone)]
pub struct Caller {
    /// Deadline of one participant call.
    call_timeout: Duration,
    /// The token the participants' saga RPCs require (none: open).
    service: TokenAuth,
}

impl Caller {
    /// Calls with `call_timeout` as their deadline and no service token.
    pub fn new(call_timeout: Duration) -> Self {
        Caller {
            call_timeout,
            service: TokenAuth::open_for(Role::Service),
        }
    }

    /// These calls carrying `service`'s token.
    pub fn with_service_token(self, service: TokenAuth) -> Self {
        Caller { service, ..self }
    }

    /// A participant request with the call deadline and the saga's trace
    /// context (`traceparent`, trace id = the saga id's 32 hex digits).
    pub fn request<T>(&self, saga: &Saga, message: T) -> Request<T> {
        self.traced_request(message, &traceparent(saga))
    }

    /// A participant request with the call deadline and `traceparent`.
    pub fn traced_request<T>(&self, message: T, traceparent: &str) -> Request<T> {
        let mut request = self.request_with_deadline(message, self.call_timeout);
        if let Ok(value) = traceparent.parse() {
            request
                .metadata_mut()
                .insert(service_kit::trace::TRACEPARENT, value);
        }
        request
    }

    /// A participant request with `deadline` and the service token, no
    /// trace context: what a batch (ActBatch, CompensateBatch) is sent as,
    /// each call in it carrying its own.
    pub fn request_with_deadline<T>(&self, message: T, deadline: Duration) -> Request<T> {
        let mut request = self.service.request(message);
        request.set_timeout(deadline);
        request
    }

    /// The deadline of one participant call.
    pub fn call_timeout(&self) -> Duration {
        self.call_timeout
    }

    /// What the participant on `history` recorded under `request_id`
    /// (ListOperations, with the deadline, trace context and service
    /// token of a step call). `Err` carries the status, for display.
    pub async fn records(
        &self,
        history: &OperationHistoryServiceClient<GrpcChannel>,
        saga: &Saga,
        request_id: &str,
    ) -> Result<Vec<ParticipantRecord>, String> {
        let request = participant::ListOperationsRequest {
            request_id: request_id.to_owned(),
        };
        let reply = history
            .clone()
            .list_operations(self.request(saga, request))
            .await
            .map_err(|status| format!("{:?}: {}", status.code(), status.message()))?;
        Ok(reply
            .into_inner()
            .operations
            .into_iter()
            .map(record)
            .collect())
    }
}

/// The saga's trace context for a participant call: trace id = the saga
/// id's 32 hex digits (or the caller's trace); the span id names the step
/// attempt making the call when spans are exported (the participant's span
/// becomes its child), else a fresh one.
pub fn traceparent(saga: &Saga) -> String {
    service_kit::trace::outgoing(&saga.trace_id())
}

/// One result of a batch as the call on its own would have ended: its
/// reply, or the status its error carries. A result with neither is
/// INTERNAL (transient: the saga retries the call).
pub fn batch_result<T>(result: Option<Result<T, participant::CallError>>) -> Result<T, Status> {
    match result {
        Some(Ok(reply)) => Ok(reply),
        Some(Err(e)) => Err(Status::with_details(
            Code::from_i32(e.code),
            e.message,
            e.details.into(),
        )),
        None => Err(Status::internal(
            "a batch result with neither a reply nor an error",
        )),
    }
}

/// A listed operation in domain terms.
fn record(o: participant::Operation) -> ParticipantRecord {
    let recorded_at_ms = o
        .recorded_at
        .map(|t| {
            t.seconds
                .saturating_mul(1000)
                .saturating_add(i64::from(t.nanos / 1_000_000))
        })
        .unwrap_or_default();
    ParticipantRecord {
        request_id: o.request_id,
        kind: o.kind,
        status: o.status,
        amount: o.amount,
        detail: o.detail,
        recorded_at_ms,
        line_index: o.line_index,
        subject: o.subject,
    }
}
