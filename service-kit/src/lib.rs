//! What the three services share, so each is only its own logic.
//!
//! - [`auth`]: the bearer tokens (admin, service, client) checked by the
//!   RPCs they guard and attached by their clients.
//! - [`clock`]: time as a parameter ([`clock::Clock`]): the system clock in
//!   services, a manual one in tests.
//! - [`channel`]: the gRPC client channel the orchestrator calls its
//!   participants through: hyper-util's pooled HTTP/2 client under the
//!   generated clients, with the call deadline held over the whole reply.
//! - [`coalesced_writes`]: a connection that lets h2 send a small message
//!   and its trailers in one write (servers and the client channel).
//! - [`deadline`]: the `grpc-timeout` header, read by servers and by the
//!   client channel.
//! - [`errors`]: the rich error model: a `google.rpc.BadRequest` on
//!   INVALID_ARGUMENT, a `google.rpc.ErrorInfo` reason on every refusal.
//! - [`fingerprint`]: a stable digest of a request's parameters, which tells
//!   a true duplicate (same request id, same parameters) from a reused id.
//! - [`limits`]: the orchestrator's limits ([`limits::CallLimits`]) and
//!   the minimum safe operationHistory retention they give (one function
//!   both sides use), their defaults, the bounds and parsers of the limit
//!   and duration flags.
//! - [`metrics`]: the Prometheus exporter (HTTP) behind the `metrics` facade.
//! - [`purge`]: the periodic purge of the embedded stores in small
//!   batches, and the store gauges it refreshes.
//! - [`server`]: gRPC start-up with server reflection (v1 and v1alpha, so
//!   grpcurl 1.8.6 works) and `grpc.health.v1`;
//!   [`server::ServeOptions`] (TLS, admin token, request size limit) is
//!   what the security and limit flags decide for one server.
//! - [`shutdown`]: one small type that tells every task to stop.
//! - [`trace`]: W3C `traceparent` propagation, so one saga's logs — and,
//!   when spans are exported, its spans — join up
//!   across the three services.
//! - [`small_frames`]: message bodies handed to h2 in pieces it copies
//!   into its write buffer, so a message over 1 KiB and its trailers leave
//!   in one write (server replies and client requests).
//! - [`telemetry`]: `tracing` set-up (text or JSON lines) and the span
//!   export over OTLP that the `OTEL_*` variables turn on.
//! - [`time`]: wall-clock milliseconds and protobuf timestamps.
//! - [`tls`]: rustls TLS flags (`--tls-cert`, `--tls-key`, `--tls-ca`,
//!   `--tls-client-auth`) for servers and the clients that call them.
//! - [`validate`]: field checks that become INVALID_ARGUMENT naming the
//!   field (a BadRequest violation per bad field).

#![warn(missing_docs)]

pub mod auth;
pub mod channel;
pub mod clock;
pub mod coalesced_writes;
pub mod deadline;
pub mod defects;
pub mod errors;
pub mod fingerprint;
pub mod health;
pub mod limits;
pub mod metrics;
pub mod purge;
pub mod server;
pub mod shutdown;
pub mod small_frames;
pub mod telemetry;
pub mod time;
pub mod tls;
pub mod trace;
pub mod validate;
