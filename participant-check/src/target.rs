//! The participant under check, and the calls the rules make to it: fresh
//! step calls, Act, Compensate and ListOperations with the token (or
//! deliberately without it), each under a deadline.
//!
//! A participant may answer UNAVAILABLE, ABORTED or RESOURCE_EXHAUSTED to a
//! call it did not record (a conflict it could not resolve, a store that
//! is down): the protocol lets it, and the orchestrator calls again. So do
//! the rules, with the same request id and a backoff, up to
//! [`RETRY_ATTEMPTS`] times; any other status is the participant's answer.

use crate::order::OrderSpec;
use saga_proto::participant::v1 as pb;
use saga_proto::participant::v1::operation_history_service_client::OperationHistoryServiceClient;
use saga_proto::participant::v1::saga_step_service_client::SagaStepServiceClient;
use std::time::Duration;
use tonic::metadata::AsciiMetadataValue;
use tonic::transport::{Channel, Endpoint};
use tonic::{Code, Request, Status};

/// Calls of one rule's request id that may be retried after a transient
/// answer.
pub const RETRY_ATTEMPTS: u32 = 8;

/// How the kit reaches the participant and what it sends it.
#[derive(Debug, Clone)]
pub struct Settings {
    /// `HOST:PORT`, or a URI (`http://HOST:PORT`).
    pub addr: String,
    /// The service token, when the participant requires one.
    pub token: Option<String>,
    /// The step name in every request id (`<saga_id>:<step>`).
    pub step: String,
    /// An order the participant applies.
    pub order: OrderSpec,
    /// An order the participant refuses; the refusal rules need it.
    pub refused_order: Option<OrderSpec>,
    /// Concurrent calls in the concurrency rules.
    pub concurrency: usize,
    /// Deadline of each call.
    pub call_timeout: Duration,
    /// The kind an Act's record is listed under (`act`; payment-svc
    /// `charge`, inventory-svc `deduct`).
    pub action_kind: String,
    /// The kind a Compensate's record is listed under (`compensate`;
    /// `refund`, `restock`).
    pub compensation_kind: String,
}

impl Settings {
    /// Settings for `addr` with the defaults: no token, step
    /// `participant-check`, the default order, 50 concurrent calls, 10 s
    /// per call.
    pub fn new(addr: impl Into<String>) -> Self {
        Settings {
            addr: addr.into(),
            token: None,
            step: "participant-check".into(),
            order: OrderSpec::default(),
            refused_order: None,
            concurrency: 50,
            call_timeout: Duration::from_secs(10),
            action_kind: crate::expect::record::ACT.into(),
            compensation_kind: crate::expect::record::COMPENSATE.into(),
        }
    }
}

/// Which authorization a call carries.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Auth {
    /// The configured token (none when none is configured).
    Token,
    /// No `authorization` header at all.
    Missing,
    /// A token that is not the configured one.
    Wrong,
}

/// A connected participant.
#[derive(Debug, Clone)]
pub struct Target {
    settings: Settings,
    channel: Channel,
    token: Option<AsciiMetadataValue>,
    wrong_token: AsciiMetadataValue,
}

/// Why the kit could not start checking.
#[derive(Debug)]
pub struct ConnectError(pub String);

impl std::fmt::Display for ConnectError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for ConnectError {}

fn bearer(token: &str) -> Result<AsciiMetadataValue, ConnectError> {
    AsciiMetadataValue::try_from(format!("Bearer {token}"))
        .map_err(|_| ConnectError("--token: not a valid header value".into()))
}

impl Target {
    /// Connects to the participant `settings` names (within 5 s).
    pub async fn connect(settings: Settings) -> Result<Target, ConnectError> {
        let uri = if settings.addr.contains("://") {
            settings.addr.clone()
        } else {
            format!("http://{}", settings.addr)
        };
        let endpoint = Endpoint::from_shared(uri.clone())
            .map_err(|e| ConnectError(format!("--addr {}: {e}", settings.addr)))?
            .connect_timeout(Duration::from_secs(5))
            .tcp_nodelay(true);
        let channel = endpoint
            .connect()
            .await
            .map_err(|e| ConnectError(format!("cannot reach {uri}: {e}")))?;
        let token = settings.token.as_deref().map(bearer).transpose()?;
        let wrong = format!("{}-wrong", settings.token.as_deref().unwrap_or("none"));
        Ok(Target {
            wrong_token: bearer(&wrong)?,
            settings,
            channel,
            token,
        })
    }

    /// What the kit was asked to send.
    pub fn settings(&self) -> &Settings {
        &self.settings
    }

    /// Whether `operation` is a record of the barrier, and which:
    /// [`ACT`](crate::expect::record::ACT) or
    /// [`COMPENSATE`](crate::expect::record::COMPENSATE) under the kinds
    /// the participant records them as. A record of an order line (with a
    /// `line_index`) is the participant's own, not the barrier's.
    pub fn barrier_kind(&self, operation: &pb::Operation) -> Option<&'static str> {
        use crate::expect::record::{ACT, COMPENSATE};
        if operation.line_index.is_some() {
            None
        } else if operation.kind == self.settings.action_kind {
            Some(ACT)
        } else if operation.kind == self.settings.compensation_kind {
            Some(COMPENSATE)
        } else {
            None
        }
    }

    /// Whether the participant has the batch calls: an empty ActBatch is
    /// answered (not UNIMPLEMENTED).
    pub async fn has_batches(&self) -> bool {
        let empty = self.act_batch_once(Vec::new(), Auth::Token).await;
        !matches!(empty, Err(s) if s.code() == Code::Unimplemented)
    }

    /// One ActBatch of `calls`: each result's request id and the call's
    /// reply or status, in the order answered.
    pub async fn act_batch_once(
        &self,
        calls: Vec<pb::StepCall>,
        auth: Auth,
    ) -> Result<Vec<(String, Result<pb::ActReply, Status>)>, Status> {
        use pb::act_result::Result as One;
        let mut client = SagaStepServiceClient::new(self.channel.clone());
        let reply = client
            .act_batch(self.request(batch(calls), auth))
            .await?
            .into_inner();
        Ok(reply
            .results
            .into_iter()
            .map(|r| {
                let result = match r.result {
                    Some(One::Reply(reply)) => Ok(reply),
                    Some(One::Error(e)) => Err(call_status(e)),
                    None => Err(Status::internal(
                        "a batch result with neither reply nor error",
                    )),
                };
                (r.request_id, result)
            })
            .collect())
    }

    /// One CompensateBatch of `calls`, as [`Target::act_batch_once`].
    pub async fn compensate_batch_once(
        &self,
        calls: Vec<pb::StepCall>,
        auth: Auth,
    ) -> Result<Vec<(String, Result<pb::CompensateReply, Status>)>, Status> {
        use pb::compensate_result::Result as One;
        let mut client = SagaStepServiceClient::new(self.channel.clone());
        let reply = client
            .compensate_batch(self.request(batch(calls), auth))
            .await?
            .into_inner();
        Ok(reply
            .results
            .into_iter()
            .map(|r| {
                let result = match r.result {
                    Some(One::Reply(reply)) => Ok(reply),
                    Some(One::Error(e)) => Err(call_status(e)),
                    None => Err(Status::internal(
                        "a batch result with neither reply nor error",
                    )),
                };
                (r.request_id, result)
            })
            .collect())
    }

    /// A call of a fresh saga (`<uuid v7>:<step>`, attempt 1) for `order`.
    pub fn fresh_call(&self, order: &OrderSpec) -> pb::StepCall {
        let saga_id = uuid::Uuid::now_v7().to_string();
        pb::StepCall {
            request_id: format!("{saga_id}:{}", self.settings.step),
            order: Some(order.order(&saga_id)),
            saga_id,
            step: self.settings.step.clone(),
            attempt: 1,
        }
    }

    fn request<T>(&self, message: T, auth: Auth) -> Request<T> {
        let mut request = Request::new(message);
        request.set_timeout(self.settings.call_timeout);
        let header = match auth {
            Auth::Token => self.token.clone(),
            Auth::Missing => None,
            Auth::Wrong => Some(self.wrong_token.clone()),
        };
        if let Some(header) = header {
            request.metadata_mut().insert("authorization", header);
        }
        request
    }

    /// One Act, as the participant answers it.
    pub async fn act_once(&self, call: &pb::StepCall, auth: Auth) -> Result<pb::ActReply, Status> {
        let mut client = SagaStepServiceClient::new(self.channel.clone());
        let reply = client.act(self.request(call.clone(), auth)).await?;
        Ok(reply.into_inner())
    }

    /// One Compensate, as the participant answers it.
    pub async fn compensate_once(
        &self,
        call: &pb::StepCall,
        auth: Auth,
    ) -> Result<pb::CompensateReply, Status> {
        let mut client = SagaStepServiceClient::new(self.channel.clone());
        let reply = client.compensate(self.request(call.clone(), auth)).await?;
        Ok(reply.into_inner())
    }

    /// One ListOperations.
    pub async fn list_once(
        &self,
        request_id: &str,
        auth: Auth,
    ) -> Result<Vec<pb::Operation>, Status> {
        let mut client = OperationHistoryServiceClient::new(self.channel.clone());
        let request = pb::ListOperationsRequest {
            request_id: request_id.to_owned(),
        };
        let reply = client.list_operations(self.request(request, auth)).await?;
        Ok(reply.into_inner().operations)
    }

    /// Act with the token, again after a transient answer (the next
    /// attempt number each time).
    pub async fn act(&self, call: &pb::StepCall) -> Result<pb::ActReply, Status> {
        let mut call = call.clone();
        retrying(|attempt| {
            call.attempt = attempt;
            let call = call.clone();
            async move { self.act_once(&call, Auth::Token).await }
        })
        .await
    }

    /// Compensate with the token, again after a transient answer.
    pub async fn compensate(&self, call: &pb::StepCall) -> Result<pb::CompensateReply, Status> {
        let mut call = call.clone();
        retrying(|attempt| {
            call.attempt = attempt;
            let call = call.clone();
            async move { self.compensate_once(&call, Auth::Token).await }
        })
        .await
    }

    /// The records under `request_id`, with the token, again after a
    /// transient answer.
    pub async fn list(&self, request_id: &str) -> Result<Vec<pb::Operation>, Status> {
        retrying(|_| self.list_once(request_id, Auth::Token)).await
    }
}

/// `calls` as a batch, each with a trace context of its own.
fn batch(calls: Vec<pb::StepCall>) -> pb::StepCallBatch {
    pb::StepCallBatch {
        calls: calls
            .into_iter()
            .map(|call| pb::BatchedStepCall {
                traceparent: format!(
                    "00-{}-{:016x}-01",
                    uuid::Uuid::now_v7().simple(),
                    u64::from(call.attempt) + 1
                ),
                call: Some(call),
            })
            .collect(),
    }
}

/// A batched call's error as the status of the call on its own.
fn call_status(e: pb::CallError) -> Status {
    Status::with_details(Code::from_i32(e.code), e.message, e.details.into())
}

/// Whether the protocol lets a participant answer `code` without having
/// recorded anything, for the caller to try again.
pub fn is_transient(code: Code) -> bool {
    matches!(
        code,
        Code::Unavailable | Code::Aborted | Code::ResourceExhausted
    )
}

/// Runs `call(attempt)` from attempt 1 until it answers other than
/// transiently or [`RETRY_ATTEMPTS`] ran out, sleeping 10 ms doubling to
/// 640 ms between attempts.
async fn retrying<T, F, Fut>(mut call: F) -> Result<T, Status>
where
    F: FnMut(u32) -> Fut,
    Fut: std::future::Future<Output = Result<T, Status>>,
{
    let mut attempt = 1;
    loop {
        match call(attempt).await {
            Err(status) if is_transient(status.code()) && attempt < RETRY_ATTEMPTS => {
                let backoff = Duration::from_millis(10 << (attempt - 1).min(6));
                tokio::time::sleep(backoff).await;
                attempt += 1;
            }
            other => return other,
        }
    }
}
