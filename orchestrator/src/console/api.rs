//! The console's JSON API, over the same use cases as `saga.v1`.
//!
//! | request | answer |
//! |---|---|
//! | `GET /api/sagas?status=&q=&page_token=&page_size=` | a ListSagasResponse (+ `matched`) |
//! | `GET /api/counts` | sagas per status |
//! | `GET /api/sagas/{id}` | a Saga |
//! | `GET /api/sagas/{id}/records` | each step's ListOperationsResponse |
//! | `GET /api/sagas/{id}/events` | server-sent events ([`super::events`]) |
//! | `POST /api/sagas/{id}/retry` | RetrySaga (admin token) |
//!
//! Input is validated exactly as the gRPC adapters do (the same
//! `service_kit::validate` functions, the same page tokens), and an error
//! is `{"code", "message", "field", "fields", "reason", "domain"}` with the
//! HTTP status of its gRPC code ([`http_status`]): INVALID_ARGUMENT 400
//! naming the field (`fields`: every bad field, the gRPC BadRequest's),
//! NOT_FOUND 404, FAILED_PRECONDITION / ALREADY_EXISTS / ABORTED 409,
//! UNAUTHENTICATED 401, RESOURCE_EXHAUSTED 429, UNAVAILABLE 503;
//! `reason`/`domain` are the gRPC ErrorInfo's (`SAGA_NOT_FOUND`,
//! `CLIENT_TOKEN_REQUIRED`, …), null when it has none.

use super::{Console, json};
use crate::app::{AppError, Orchestrator};
use crate::convert;
use crate::grpc::{DEFAULT_PAGE, MAX_PAGE};
use crate::saga::{Saga, SagaStatus};
use crate::store::{Cursor, SagaFilter};
use axum::Json;
use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use saga_proto::saga::v1 as pb;
use serde_json::{Value, json};
use service_kit::validate;
use std::sync::Arc;
use tonic::{Code, Status};

/// An API error: a gRPC status, answered with the matching HTTP status.
#[derive(Debug)]
pub struct ApiError(pub Status);

impl From<Status> for ApiError {
    fn from(status: Status) -> Self {
        ApiError(status)
    }
}

impl From<AppError> for ApiError {
    fn from(error: AppError) -> Self {
        ApiError(error.into())
    }
}

/// The HTTP status and the name of a gRPC code.
pub fn http_status(code: Code) -> (StatusCode, &'static str) {
    match code {
        Code::Ok => (StatusCode::OK, "OK"),
        Code::InvalidArgument => (StatusCode::BAD_REQUEST, "INVALID_ARGUMENT"),
        Code::OutOfRange => (StatusCode::BAD_REQUEST, "OUT_OF_RANGE"),
        Code::NotFound => (StatusCode::NOT_FOUND, "NOT_FOUND"),
        Code::AlreadyExists => (StatusCode::CONFLICT, "ALREADY_EXISTS"),
        Code::FailedPrecondition => (StatusCode::CONFLICT, "FAILED_PRECONDITION"),
        Code::Aborted => (StatusCode::CONFLICT, "ABORTED"),
        Code::Unauthenticated => (StatusCode::UNAUTHORIZED, "UNAUTHENTICATED"),
        Code::PermissionDenied => (StatusCode::FORBIDDEN, "PERMISSION_DENIED"),
        Code::ResourceExhausted => (StatusCode::TOO_MANY_REQUESTS, "RESOURCE_EXHAUSTED"),
        Code::Unavailable => (StatusCode::SERVICE_UNAVAILABLE, "UNAVAILABLE"),
        Code::DeadlineExceeded => (StatusCode::GATEWAY_TIMEOUT, "DEADLINE_EXCEEDED"),
        Code::Unimplemented => (StatusCode::NOT_IMPLEMENTED, "UNIMPLEMENTED"),
        Code::Cancelled => (
            StatusCode::from_u16(499).unwrap_or(StatusCode::BAD_REQUEST),
            "CANCELLED",
        ),
        Code::Unknown => (StatusCode::INTERNAL_SERVER_ERROR, "UNKNOWN"),
        Code::Internal => (StatusCode::INTERNAL_SERVER_ERROR, "INTERNAL"),
        Code::DataLoss => (StatusCode::INTERNAL_SERVER_ERROR, "DATA_LOSS"),
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let (status, code) = http_status(self.0.code());
        let message = self.0.message();
        let fields = service_kit::errors::bad_fields(&self.0);
        let (domain, reason) = match service_kit::errors::reason_of(&self.0) {
            Some((domain, reason)) => (Some(domain), Some(reason)),
            None => (None, None),
        };
        let body = json!({
            "code": code,
            "message": message,
            "field": fields.first(),
            "fields": fields,
            "reason": reason,
            "domain": domain,
        });
        let mut response = (status, Json(body)).into_response();
        if status == StatusCode::UNAUTHORIZED {
            response.headers_mut().insert(
                header::WWW_AUTHENTICATE,
                HeaderValue::from_static("Bearer realm=\"saga console\""),
            );
        }
        response
    }
}

/// An API answer.
pub type ApiResult = Result<Json<Value>, ApiError>;

/// Answers the framework's own refusals as the API's errors: a query or a
/// path axum could not read (400, plain text) and a method a path does not
/// take (405, no body) become `{"code", "message", "field"}` like every
/// other error, which the pages and clients read.
pub async fn json_refusals(
    request: axum::extract::Request,
    next: axum::middleware::Next,
) -> Response {
    let method = request.method().clone();
    let response = next.run(request).await;
    let status = response.status();
    let refusal = status == StatusCode::BAD_REQUEST || status == StatusCode::METHOD_NOT_ALLOWED;
    let json = response
        .headers()
        .get(header::CONTENT_TYPE)
        .is_some_and(|v| v.as_bytes().starts_with(b"application/json"));
    if !refusal || json {
        return response;
    }
    let (parts, body) = response.into_parts();
    let allow = parts.headers.get(header::ALLOW).cloned();
    let (code, message) = if status == StatusCode::METHOD_NOT_ALLOWED {
        let takes = match allow.as_ref().and_then(|a| a.to_str().ok()) {
            Some(allowed) => format!("it takes {allowed}"),
            None => "the API's paths take GET, and POST for /api/sagas/{saga_id}/retry".to_owned(),
        };
        (
            "UNIMPLEMENTED",
            format!("this path does not take {method}: {takes}"),
        )
    } else {
        let text = axum::body::to_bytes(body, 4096)
            .await
            .map(|b| String::from_utf8_lossy(&b).into_owned())
            .unwrap_or_default();
        let text = if text.is_empty() {
            "the request could not be read".to_owned()
        } else {
            text
        };
        ("INVALID_ARGUMENT", text)
    };
    let body = json!({
        "code": code,
        "message": message,
        "field": Value::Null,
        "fields": [],
        "reason": Value::Null,
        "domain": Value::Null,
    });
    let mut answer = (status, Json(body)).into_response();
    if let Some(allow) = allow {
        answer.headers_mut().insert(header::ALLOW, allow);
    }
    answer
}

/// The query of `GET /api/sagas`; every parameter is optional.
#[derive(Debug, Default, serde::Deserialize)]
pub struct ListParams {
    /// `SAGA_STATUS_FAILED`, `FAILED` or `failed`; empty or absent: all.
    pub status: Option<String>,
    /// A saga id, request id or customer id.
    pub q: Option<String>,
    /// `next_page_token` of the previous page.
    pub page_token: Option<String>,
    /// 1 to 500 (default 50), as ListSagas.
    pub page_size: Option<String>,
    /// `true`: only the sagas the store refused to save (marked for
    /// attention), as ListSagas' `needs_attention`; not with `status` or `q`.
    pub attention: Option<String>,
}

/// The `attention` flag: `true`/`1` or `false`/`0`/empty.
fn attention_param(raw: Option<&str>) -> Result<bool, Status> {
    match raw.unwrap_or_default().trim() {
        "" | "false" | "0" => Ok(false),
        "true" | "1" => Ok(true),
        _ => Err(validate::invalid("attention", "must be true or false")),
    }
}

/// The status filter: a `saga.v1.SagaStatus` name, with or without its
/// `SAGA_STATUS_` prefix, any case. Empty or `all` means every status.
pub fn status_param(raw: Option<&str>) -> Result<Option<SagaStatus>, Status> {
    let raw = raw.unwrap_or_default().trim();
    if raw.is_empty() || raw.eq_ignore_ascii_case("all") {
        return Ok(None);
    }
    let upper = raw.to_ascii_uppercase();
    let name = match upper.strip_prefix("SAGA_STATUS_") {
        Some(_) => upper.clone(),
        None => format!("SAGA_STATUS_{upper}"),
    };
    match pb::SagaStatus::from_str_name(&name) {
        Some(pb::SagaStatus::Unspecified) | None => Err(validate::invalid(
            "status",
            "one of RUNNING, COMPENSATING, COMPLETED, CANCELLED, FAILED",
        )),
        Some(status) => convert::status_filter(status.into()),
    }
}

fn page_size_param(raw: Option<&str>) -> Result<usize, Status> {
    let raw = raw.unwrap_or_default().trim();
    let value = if raw.is_empty() {
        0
    } else {
        raw.parse::<i32>()
            .map_err(|_| validate::invalid("page_size", "must be a number from 1 to 500"))?
    };
    validate::limit("page_size", value, DEFAULT_PAGE, MAX_PAGE)
}

/// `GET /api/sagas`: newest first, filtered by status and by `q`; paged
/// with the tokens ListSagas uses.
pub async fn list(State(console): State<Arc<Console>>, Query(p): Query<ListParams>) -> ApiResult {
    let status = status_param(p.status.as_deref())?;
    let page_size = page_size_param(p.page_size.as_deref())?;
    let after = convert::decode_cursor(p.page_token.as_deref().unwrap_or_default())?;
    let q = p.q.as_deref().map(str::trim).unwrap_or_default();
    let attention = attention_param(p.attention.as_deref())?;
    if attention && (status.is_some() || !q.is_empty()) {
        return Err(validate::invalid(
            "attention",
            "lists every saga marked for attention; not combined with status or q",
        )
        .into());
    }
    let (sagas, next, matched) = if attention {
        let filter = SagaFilter {
            needs_attention: true,
            ..SagaFilter::status(None)
        };
        let page = console.app.list(&filter, page_size, after).await?;
        (page.sagas, page.next, None)
    } else if q.is_empty() {
        let page = console
            .app
            .list(&SagaFilter::status(status), page_size, after)
            .await?;
        (page.sagas, page.next, None)
    } else {
        validate::id("q", q)?;
        search(&console.app, q, status, page_size, after).await?
    };
    let sagas: Vec<pb::Saga> = sagas.into_iter().map(convert::saga).collect();
    let token = next
        .as_ref()
        .map(convert::encode_cursor)
        .unwrap_or_default();
    Ok(Json(json::page(&sagas, &token, matched)))
}

/// What a search found: the sagas, where the next page starts, which id
/// matched.
type Found = (Vec<Saga>, Option<Cursor>, Option<&'static str>);

/// `q` as a saga id, else a request id (one saga either way), else a
/// customer id (that customer's sagas, paged). A later page is always the
/// customer's: only that listing has pages.
async fn search(
    app: &Orchestrator,
    q: &str,
    status: Option<SagaStatus>,
    page_size: usize,
    after: Option<Cursor>,
) -> Result<Found, AppError> {
    let wanted = |s: &Saga| status.is_none_or(|status| s.status == status);
    if after.is_none() {
        if let Some(saga) = found(app.get(q).await)? {
            return Ok((
                vec![saga].into_iter().filter(wanted).collect(),
                None,
                Some("saga_id"),
            ));
        }
        if let Some(saga) = found(app.get_by_request_id(q).await)? {
            let sagas = vec![saga].into_iter().filter(wanted).collect();
            return Ok((sagas, None, Some("request_id")));
        }
    }
    let filter = SagaFilter {
        status,
        customer_id: Some(q.to_owned()),
        needs_attention: false,
    };
    let page = app.list(&filter, page_size, after).await?;
    Ok((page.sagas, page.next, Some("customer_id")))
}

/// A lookup's saga, `None` when there is none.
fn found(lookup: Result<Saga, AppError>) -> Result<Option<Saga>, AppError> {
    match lookup {
        Ok(saga) => Ok(Some(saga)),
        Err(AppError::NotFound(_)) => Ok(None),
        Err(error) => Err(error),
    }
}

/// `GET /api/counts`: how many sagas are in each status, in the order a
/// saga passes through them, and the total.
pub async fn counts(State(console): State<Arc<Console>>) -> ApiResult {
    let counts = console.app.counts().await?;
    let total: u64 = counts.iter().map(|(_, n)| n).sum();
    let counts: Vec<Value> = counts
        .into_iter()
        .map(|(status, count)| {
            json!({
                "status": convert::saga_status(status).as_str_name(),
                "count": count,
            })
        })
        .collect();
    Ok(Json(json!({ "counts": counts, "total": total })))
}

/// `GET /api/sagas/{saga_id}`: GetSaga.
pub async fn get(State(console): State<Arc<Console>>, Path(saga_id): Path<String>) -> ApiResult {
    validate::id("saga_id", &saga_id)?;
    let saga = console.app.get(&saga_id).await?;
    Ok(Json(json::saga(&convert::saga(saga))))
}

/// `GET /api/sagas/{saga_id}/records`: what each step's participant
/// recorded under the step's request id (ListOperations on each).
pub async fn records(
    State(console): State<Arc<Console>>,
    Path(saga_id): Path<String>,
) -> ApiResult {
    validate::id("saga_id", &saga_id)?;
    let steps = console.app.records(&saga_id).await?;
    Ok(Json(json::records(&saga_id, &steps)))
}

/// `POST /api/sagas/{saga_id}/retry`: RetrySaga. The admin token is
/// checked first (so a refused call changes nothing), with the gRPC
/// service's own check; a request a browser sends from another site is
/// refused before that.
pub async fn retry(
    State(console): State<Arc<Console>>,
    Path(saga_id): Path<String>,
    headers: HeaderMap,
) -> ApiResult {
    same_origin(&headers, &console.hosts)?;
    console.guard.check_admin(
        crate::client_auth::CONSOLE,
        &tonic::metadata::MetadataMap::from_headers(headers),
    )?;
    validate::id("saga_id", &saga_id)?;
    let saga = console.app.retry(&saga_id).await?;
    Ok(Json(json::saga(&convert::saga(saga))))
}

/// Refuses an `/api/` request without the client token (or the admin
/// token) when one is configured: 401 with `reason`
/// `CLIENT_TOKEN_REQUIRED`, counted in `saga_unauthenticated_total{rpc=
/// "console"}`. The pages and assets hold no data and stay open, so the
/// browser can load the page that asks for the token.
pub async fn client_token(
    State(console): State<Arc<Console>>,
    request: axum::extract::Request,
    next: axum::middleware::Next,
) -> Response {
    if !console.guard.is_required() || !request.uri().path().starts_with("/api/") {
        return next.run(request).await;
    }
    let metadata = tonic::metadata::MetadataMap::from_headers(request.headers().clone());
    match console.guard.check(crate::client_auth::CONSOLE, &metadata) {
        Ok(()) => next.run(request).await,
        Err(refused) => ApiError(refused).into_response(),
    }
}

/// Refuses a request whose `Host` (or HTTP/2 authority) is not one the
/// console answers to ([`super::hosts`]): a DNS name pointed at this
/// machine by a page elsewhere.
pub async fn answered_host(
    State(console): State<Arc<Console>>,
    request: axum::extract::Request,
    next: axum::middleware::Next,
) -> Response {
    let host = match request.headers().get(header::HOST) {
        Some(host) => Some(host.to_str().unwrap_or_default().to_owned()),
        None => request.uri().authority().map(|a| a.as_str().to_owned()),
    };
    match host {
        Some(host) if !console.hosts.admits_host(&host) => {
            ApiError(Status::permission_denied(format!(
                "this console does not answer to the host {host:?}: it answers to IP addresses, \
                 localhost and the names given with --console-allowed-host (a page elsewhere \
                 may not point its own name at it)"
            )))
            .into_response()
        }
        _ => next.run(request).await,
    }
}

/// Refuses a POST a browser sent from a page of another origin (its
/// `Origin` names another host than the one it asked, and not one of the
/// configured names): without a token configured, such a request must not
/// be able to retry sagas. Clients that send no `Origin` (curl) are not
/// browsers on another site.
fn same_origin(headers: &HeaderMap, hosts: &super::hosts::AllowedHosts) -> Result<(), Status> {
    let Some(origin) = headers.get(header::ORIGIN) else {
        return Ok(());
    };
    let host = headers.get(header::HOST).and_then(|h| h.to_str().ok());
    let origin_host = origin
        .to_str()
        .ok()
        .and_then(|o| o.split_once("://"))
        .map(|(_, rest)| rest);
    match (origin_host, host) {
        (Some(origin), Some(host)) if origin.eq_ignore_ascii_case(host) => Ok(()),
        (Some(origin), _) if hosts.admits_origin(origin) => Ok(()),
        _ => Err(Status::permission_denied(
            "a page of another origin may not retry sagas",
        )),
    }
}

/// Anything else: NOT_FOUND, as JSON.
pub async fn not_found() -> ApiError {
    ApiError(Status::not_found("no such page or API; see /api/sagas"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn status_names_are_read_with_or_without_prefix_in_any_case() {
        assert_eq!(status_param(None).unwrap(), None);
        assert_eq!(status_param(Some("")).unwrap(), None);
        assert_eq!(status_param(Some("all")).unwrap(), None);
        for raw in [
            "FAILED",
            "failed",
            "SAGA_STATUS_FAILED",
            "saga_status_failed",
        ] {
            assert_eq!(status_param(Some(raw)).unwrap(), Some(SagaStatus::Failed));
        }
        for bad in ["nope", "UNSPECIFIED", "SAGA_STATUS_UNSPECIFIED", "3"] {
            let e = status_param(Some(bad)).unwrap_err();
            assert_eq!(e.code(), Code::InvalidArgument);
            assert!(e.message().starts_with("status: "), "{}", e.message());
        }
    }

    #[test]
    fn page_sizes_are_checked_as_list_sagas_checks_them() {
        assert_eq!(page_size_param(None).unwrap(), DEFAULT_PAGE);
        assert_eq!(page_size_param(Some("7")).unwrap(), 7);
        for bad in ["x", "-1", "501", "99999999999"] {
            let e = page_size_param(Some(bad)).unwrap_err();
            assert!(e.message().starts_with("page_size: "), "{}", e.message());
        }
    }

    #[test]
    fn grpc_codes_become_their_http_statuses() {
        assert_eq!(
            http_status(Code::InvalidArgument).0,
            StatusCode::BAD_REQUEST
        );
        assert_eq!(http_status(Code::NotFound).0, StatusCode::NOT_FOUND);
        assert_eq!(
            http_status(Code::FailedPrecondition).0,
            StatusCode::CONFLICT
        );
        assert_eq!(
            http_status(Code::Unauthenticated).0,
            StatusCode::UNAUTHORIZED
        );
        assert_eq!(
            http_status(Code::Unavailable).0,
            StatusCode::SERVICE_UNAVAILABLE
        );
    }

    #[test]
    fn a_post_from_another_origin_is_refused() {
        let headers = |origin: Option<&'static str>| {
            let mut h = HeaderMap::new();
            h.insert(header::HOST, HeaderValue::from_static("127.0.0.1:8080"));
            if let Some(o) = origin {
                h.insert(header::ORIGIN, HeaderValue::from_static(o));
            }
            h
        };
        let none = super::super::hosts::AllowedHosts::default();
        assert!(same_origin(&headers(None), &none).is_ok());
        assert!(same_origin(&headers(Some("http://127.0.0.1:8080")), &none).is_ok());
        assert!(same_origin(&headers(Some("https://evil.example")), &none).is_err());
        assert!(same_origin(&headers(Some("null")), &none).is_err());
        // Behind a proxy: the page's origin is the configured public name,
        // the Host the proxy sends is the upstream address.
        let proxy = super::super::hosts::AllowedHosts::new(["console.example.com"]);
        assert!(same_origin(&headers(Some("https://console.example.com")), &proxy).is_ok());
        assert!(same_origin(&headers(Some("https://evil.example")), &proxy).is_err());
    }
}
