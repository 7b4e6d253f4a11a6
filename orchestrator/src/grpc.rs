//! `saga.v1` adapters: OrderService and SagaService over [`Orchestrator`].
//! They validate and convert (see [`crate::convert`]) and map errors to
//! status codes; the use cases live in [`crate::app`].

use crate::app::{AppError, NewOrder, Orchestrator};
use crate::client_auth::ClientGuard;
use crate::convert;
use saga_proto::saga::v1 as pb;
use service_kit::errors::ErrorReason;
use service_kit::trace::{Ended, ServerSpan};
use service_kit::validate;
use std::sync::Arc;
use std::time::Duration;
use tokio::time::Instant;
use tonic::metadata::MetadataMap;
use tonic::{Code, Request, Response, Status};

/// ListSagas page size when none is asked (the console's too).
pub const DEFAULT_PAGE: usize = 50;
/// Largest ListSagas page (the console's too).
pub const MAX_PAGE: usize = 500;

/// The ErrorInfo domain of the orchestrator's own reasons.
pub const DOMAIN: &str = "saga.v1";

impl AppError {
    /// The status code and `google.rpc.ErrorInfo` reason (domain
    /// [`DOMAIN`]) of this failure: the table in `saga.proto`.
    pub fn code_and_reason(&self) -> (Code, ErrorReason) {
        use crate::store::StoreError;
        let reason = |name| ErrorReason::new(DOMAIN, name);
        match self {
            AppError::RequestIdReused {
                request_id,
                difference,
            } => {
                let mut info = reason("REQUEST_ID_REUSED").with("request_id", request_id);
                if let Some(field) = service_kit::errors::differing_field(difference) {
                    info = info.with("field", field);
                }
                (Code::AlreadyExists, info)
            }
            AppError::NotFound(_) => (Code::NotFound, reason("SAGA_NOT_FOUND")),
            AppError::NotRetryable(_) => (Code::FailedPrecondition, reason("SAGA_NOT_RETRYABLE")),
            AppError::Saturated(cap) => (
                Code::ResourceExhausted,
                reason("TOO_MANY_SAGAS_IN_FLIGHT").with("cap", cap),
            ),
            AppError::Store(StoreError::Conflict { .. }) => {
                (Code::Aborted, reason("STORE_CONFLICT"))
            }
            AppError::Store(StoreError::Rejected(_)) => (Code::Internal, reason("STORE_REJECTED")),
            AppError::Store(StoreError::Corrupt(_)) => {
                (Code::Internal, reason("STORED_DATA_CORRUPT"))
            }
            AppError::Store(_) => (Code::Unavailable, reason("STORE_UNAVAILABLE")),
        }
    }
}

impl From<AppError> for Status {
    fn from(e: AppError) -> Status {
        let (code, reason) = e.code_and_reason();
        reason.status(code, e.to_string())
    }
}

/// `saga.v1.OrderService`.
pub struct OrderApi {
    app: Arc<Orchestrator>,
    /// Longest a `wait` call is held when the client set no deadline.
    max_wait: Duration,
    /// Who may call (everyone when no client token is configured).
    guard: ClientGuard,
}

impl OrderApi {
    /// The service over `app`, open to every caller (see `with_guard`);
    /// `wait` is held at most `max_wait`.
    pub fn new(app: Arc<Orchestrator>, max_wait: Duration) -> Self {
        OrderApi {
            app,
            max_wait,
            guard: ClientGuard::open(),
        }
    }

    /// CreateOrder requires `guard`'s client token.
    pub fn with_guard(self, guard: ClientGuard) -> Self {
        OrderApi { guard, ..self }
    }
}

/// Reads the client's deadline (the `grpc-timeout` header).
pub fn client_timeout(metadata: &MetadataMap) -> Option<Duration> {
    service_kit::deadline::of(metadata.as_ref())
}

#[tonic::async_trait]
impl pb::order_service_server::OrderService for OrderApi {
    async fn create_order(
        &self,
        request: Request<pb::CreateOrderRequest>,
    ) -> Result<Response<pb::CreateOrderResponse>, Status> {
        // Checked first, so a refused call changes nothing.
        self.guard.check("create_order", request.metadata())?;
        // Reply a little before the client's deadline, so it gets the state
        // rather than DEADLINE_EXCEEDED.
        let wait_for = client_timeout(request.metadata())
            .map(|t| {
                t.saturating_sub(t / 10)
                    .saturating_sub(Duration::from_millis(20))
            })
            .unwrap_or(self.max_wait)
            .min(self.max_wait);
        let trace_id = service_kit::trace::trace_id(request.metadata());
        let span = ServerSpan::start(CREATE_ORDER, request.metadata());
        let r = request.into_inner();
        let wait = r.wait;
        let wait_until = wait.then(|| Instant::now() + wait_for);
        let placed: Result<crate::app::Placed, Status> = async {
            let order = NewOrder {
                trace_id,
                ..convert::new_order(r)?
            };
            Ok(self.app.create_order(order, wait_until).await?)
        }
        .await;
        if let Some(span) = span {
            end_create_order_span(span, &placed);
        }
        let placed = placed?;
        let saga = placed.saga;
        Ok(Response::new(pb::CreateOrderResponse {
            saga_id: saga.saga_id.clone(),
            order_id: saga.order.order_id.clone(),
            status: convert::saga_status(saga.status).into(),
            created: placed.created,
            saga: wait.then(|| convert::saga(saga)),
        }))
    }
}

/// CreateOrder's span name (its full gRPC method name).
const CREATE_ORDER: &str = "saga.v1.OrderService/CreateOrder";

/// Records CreateOrder's span once the call's outcome is known. A call that
/// made a saga is the root of the saga's trace: its ids are the saga's (see
/// [`service_kit::trace::continue_trace`]), so the saga's spans — driven
/// now or by any instance after a restart — are its children. A duplicate
/// is a span of the existing saga's trace with an id of its own; a refused
/// call, a span of the caller's trace (or a new one).
fn end_create_order_span(span: ServerSpan, placed: &Result<crate::app::Placed, Status>) {
    let trace_id = placed.as_ref().ok().map(|p| p.saga.trace_id());
    let ended = match placed {
        Ok(placed) => Ended {
            trace_id: trace_id.as_deref(),
            root_key: placed.created.then_some(placed.saga.saga_id.as_str()),
            attributes: vec![
                ("saga_id", placed.saga.saga_id.clone()),
                ("request_id", placed.saga.request_id.clone()),
                ("created", placed.created.to_string()),
                ("status", placed.saga.status.as_str().to_owned()),
            ],
            error: None,
        },
        Err(status) => Ended {
            attributes: vec![("rpc.grpc.status_code", (status.code() as i32).to_string())],
            error: Some(status.message().to_owned()),
            ..Ended::default()
        },
    };
    span.end(ended);
}

/// `saga.v1.SagaService`.
pub struct SagaApi {
    app: Arc<Orchestrator>,
    /// Who may call (everyone when no token is configured); RetrySaga
    /// also needs the admin token when one is configured.
    guard: ClientGuard,
}

impl SagaApi {
    /// The service over `app`, open to everyone (see `with_guard`).
    pub fn new(app: Arc<Orchestrator>) -> Self {
        SagaApi {
            app,
            guard: ClientGuard::open(),
        }
    }

    /// Every RPC requires `guard`'s client token, RetrySaga its admin token.
    pub fn with_guard(self, guard: ClientGuard) -> Self {
        SagaApi { guard, ..self }
    }
}

#[tonic::async_trait]
impl pb::saga_service_server::SagaService for SagaApi {
    async fn get_saga(
        &self,
        request: Request<pb::GetSagaRequest>,
    ) -> Result<Response<pb::Saga>, Status> {
        use pb::get_saga_request::Lookup;
        self.guard.check("get_saga", request.metadata())?;
        let saga = match request.into_inner().lookup {
            Some(Lookup::SagaId(id)) => {
                validate::id("saga_id", &id)?;
                self.app.get(&id).await?
            }
            Some(Lookup::RequestId(id)) => {
                validate::id("request_id", &id)?;
                self.app.get_by_request_id(&id).await?
            }
            None => return Err(validate::invalid("saga_id", "set saga_id or request_id")),
        };
        Ok(Response::new(convert::saga(saga)))
    }

    type WatchSagaStream =
        std::pin::Pin<Box<dyn futures::Stream<Item = Result<pb::Saga, Status>> + Send>>;

    async fn watch_saga(
        &self,
        request: Request<pb::WatchSagaRequest>,
    ) -> Result<Response<Self::WatchSagaStream>, Status> {
        use futures::StreamExt;
        self.guard.check("watch_saga", request.metadata())?;
        let r = request.into_inner();
        validate::id("saga_id", &r.saga_id)?;
        let states = self.app.watch(&r.saga_id).await?;
        Ok(Response::new(Box::pin(
            states.map(|saga| Ok(convert::saga(saga))),
        )))
    }

    async fn retry_saga(
        &self,
        request: Request<pb::RetrySagaRequest>,
    ) -> Result<Response<pb::Saga>, Status> {
        // Admin only: checked first, so a refused call changes nothing.
        self.guard.check_admin("retry_saga", request.metadata())?;
        let r = request.into_inner();
        validate::id("saga_id", &r.saga_id)?;
        let saga = self.app.retry(&r.saga_id).await?;
        Ok(Response::new(convert::saga(saga)))
    }

    async fn list_sagas(
        &self,
        request: Request<pb::ListSagasRequest>,
    ) -> Result<Response<pb::ListSagasResponse>, Status> {
        self.guard.check("list_sagas", request.metadata())?;
        let r = request.into_inner();
        let status = convert::status_filter(r.status)?;
        let page_size = validate::limit("page_size", r.page_size, DEFAULT_PAGE, MAX_PAGE)?;
        let after = convert::decode_cursor(&r.page_token)?;
        if r.needs_attention && status.is_some() {
            return Err(validate::invalid(
                "needs_attention",
                "cannot be combined with status (a saga that needs attention is RUNNING or COMPENSATING)",
            ));
        }
        let filter = crate::store::SagaFilter {
            needs_attention: r.needs_attention,
            ..crate::store::SagaFilter::status(status)
        };
        let page = self.app.list(&filter, page_size, after).await?;
        Ok(Response::new(pb::ListSagasResponse {
            next_page_token: page
                .next
                .as_ref()
                .map(convert::encode_cursor)
                .unwrap_or_default(),
            sagas: page.sagas.into_iter().map(convert::saga).collect(),
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn grpc_timeout_headers_are_parsed() {
        let mut m = MetadataMap::new();
        assert_eq!(client_timeout(&m), None);
        for (raw, expected) in [
            ("5S", Duration::from_secs(5)),
            ("250m", Duration::from_millis(250)),
            ("2M", Duration::from_secs(120)),
            ("100u", Duration::from_micros(100)),
        ] {
            m.insert("grpc-timeout", raw.parse().unwrap());
            assert_eq!(client_timeout(&m), Some(expected));
        }
        m.insert("grpc-timeout", "x".parse().unwrap());
        assert_eq!(client_timeout(&m), None);
    }
}
