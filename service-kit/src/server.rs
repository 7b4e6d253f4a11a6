//! gRPC serving shared by the three services: every server gets reflection
//! (v1 and v1alpha — grpcurl 1.8.6 only speaks v1alpha) and
//! `grpc.health.v1` with readiness and liveness apart ([`crate::health`]).
//!
//! A [`GrpcServer`] lives through four moments:
//!
//! 1. **Started** ([`GrpcServer::start`]) right after the bind, before the
//!    store is opened: health answers (liveness SERVING, readiness
//!    NOT_SERVING) and so does reflection; the services answer UNAVAILABLE.
//! 2. **Ready** ([`GrpcServer::ready`]) with the services' routes, once the
//!    store is open: readiness SERVING, calls served.
//! 3. **Draining** from the first moment of the shutdown
//!    ([`GrpcServer::run`]): readiness NOT_SERVING, new calls to the
//!    services UNAVAILABLE, liveness still SERVING, while the calls in
//!    flight and the service's own work (the orchestrator's steps) finish.
//! 4. **Closed**: the listener and the connections end; the process exits.
//!
//! One server started early with its services behind a gate, rather than
//! the store opened before the bind or a health-only server replaced by the
//! full one once the store is open: opening MongoDB can last as long as
//! MongoDB is down, and only a server that already answers can tell a probe
//! "alive, not ready" meanwhile; a replaced server would drop the probes'
//! connections at the switch and leave a moment in which nothing accepts.
//! The gate costs one look at the request path per call. A server whose
//! store is already open (the tests' in-process services) is made ready
//! before it accepts anything, so it never answers UNAVAILABLE.
//!
//! The server stays open through the drain, instead of closing its listener
//! at the signal, so that a probe can read NOT_SERVING (and liveness
//! SERVING) while in-flight work finishes.
//!
//! [`ServeOptions`] carries what the security and limit flags decide for one
//! server — TLS ([`crate::tls`]), the admin token ([`crate::auth`]) and the
//! largest accepted request ([`LimitsConfig`]) — built once from the flags
//! by [`ServeOptions::from_flags`]. [`GrpcServer::new`] applies the TLS
//! part; the services apply the rest when they build their generated
//! servers (`.max_decoding_message_size(options.max_request_bytes)`, a
//! [`TokenAuth`] check in each admin RPC).

use crate::auth::{AdminConfig, InvalidToken, Role, TokenAuth};
use crate::health::{Gate, Readiness};
use crate::shutdown::Shutdown;
use crate::tls::{TlsConfig, TlsError};
use std::fmt;
use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;
use std::task::{Context, Poll};
use tokio::net::TcpListener;
use tonic::codegen::http;
use tonic::service::Routes;
use tonic::transport::ServerTlsConfig;

/// Largest request message a server accepts by default: 1 MiB. Larger
/// requests are refused with RESOURCE_EXHAUSTED before they are decoded.
pub const DEFAULT_MAX_REQUEST_BYTES: usize = 1024 * 1024;

/// Request limits; `#[command(flatten)]` it into a service's clap config.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::Args)]
#[command(next_help_heading = "Limits")]
pub struct LimitsConfig {
    /// Largest request message accepted, in bytes; larger ones are refused
    /// with RESOURCE_EXHAUSTED.
    #[arg(long, env = "MAX_REQUEST_BYTES", default_value_t = DEFAULT_MAX_REQUEST_BYTES, value_parser = parse_request_bytes)]
    pub max_request_bytes: usize,
}

/// Smallest accepted `--max-request-bytes` (smaller would refuse ordinary
/// calls).
pub const MIN_MAX_REQUEST_BYTES: usize = 1024;

/// clap value parser for `--max-request-bytes`: a number of bytes, at least
/// [`MIN_MAX_REQUEST_BYTES`].
fn parse_request_bytes(s: &str) -> Result<usize, String> {
    let n: usize = s
        .trim()
        .parse()
        .map_err(|e| format!("not a number of bytes ({e})"))?;
    if n < MIN_MAX_REQUEST_BYTES {
        return Err(format!(
            "must be at least {MIN_MAX_REQUEST_BYTES} bytes (got {n})"
        ));
    }
    Ok(n)
}

impl Default for LimitsConfig {
    fn default() -> Self {
        LimitsConfig {
            max_request_bytes: DEFAULT_MAX_REQUEST_BYTES,
        }
    }
}

/// How one server is exposed: TLS or plaintext, who may call its admin
/// RPCs, how large a request may be. `Default` is the dev default:
/// plaintext, admin RPCs open, 1 MiB.
#[derive(Clone)]
pub struct ServeOptions {
    /// `Some`: serve TLS with this identity (see [`TlsConfig::server_tls`]).
    pub tls: Option<ServerTlsConfig>,
    /// Token check of the admin RPCs.
    pub admin: TokenAuth,
    /// Token check of a participant's saga RPCs (open on the orchestrator,
    /// which has none).
    pub service: TokenAuth,
    /// Token check of the orchestrator's client API and console (open on
    /// the participants, which have none).
    pub client: TokenAuth,
    /// Applied to every generated service with
    /// `.max_decoding_message_size(..)`.
    pub max_request_bytes: usize,
}

impl Default for ServeOptions {
    fn default() -> Self {
        ServeOptions {
            tls: None,
            admin: TokenAuth::open(),
            service: TokenAuth::open_for(Role::Service),
            client: TokenAuth::open_for(Role::Client),
            max_request_bytes: DEFAULT_MAX_REQUEST_BYTES,
        }
    }
}

impl fmt::Debug for ServeOptions {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ServeOptions")
            .field("tls", &self.tls.is_some())
            .field("admin", &self.admin)
            .field("service", &self.service)
            .field("client", &self.client)
            .field("max_request_bytes", &self.max_request_bytes)
            .finish()
    }
}

/// A security or limit flag that cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum OptionsError {
    #[error(transparent)]
    /// A TLS flag.
    Tls(#[from] TlsError),
    #[error(transparent)]
    /// The admin token.
    Admin(#[from] InvalidToken),
}

impl ServeOptions {
    /// The options the flags ask for; every file is read and checked now.
    pub fn from_flags(
        admin: &AdminConfig,
        tls: &TlsConfig,
        limits: &LimitsConfig,
    ) -> Result<ServeOptions, OptionsError> {
        Ok(ServeOptions {
            tls: tls.server_tls()?,
            admin: admin.build()?,
            service: TokenAuth::open_for(Role::Service),
            client: TokenAuth::open_for(Role::Client),
            max_request_bytes: limits.max_request_bytes,
        })
    }

    /// These options with saga RPCs guarded by `service` (participants).
    pub fn with_service(self, service: TokenAuth) -> ServeOptions {
        ServeOptions { service, ..self }
    }

    /// These options with the client API and console guarded by `client`
    /// (the orchestrator).
    pub fn with_client(self, client: TokenAuth) -> ServeOptions {
        ServeOptions { client, ..self }
    }

    /// Whether this server serves TLS.
    pub fn tls_enabled(&self) -> bool {
        self.tls.is_some()
    }

    /// Logs, once at start-up, how `service` is exposed (never a secret):
    /// TLS or plaintext, the request limit, and WARN when admin RPCs are
    /// open.
    pub fn log_startup(&self, service: &str) {
        tracing::info!(
            service,
            tls = self.tls_enabled(),
            max_request_bytes = self.max_request_bytes,
            "serving {}",
            if self.tls_enabled() {
                "TLS"
            } else {
                "plaintext"
            }
        );
        self.admin.log_startup(service);
    }

    /// [`ServeOptions::log_startup`] for a participant, which also says
    /// whether its saga RPCs are guarded by the service token.
    pub fn log_participant_startup(&self, service: &str) {
        self.log_startup(service);
        self.service.log_startup(service);
    }
}

/// Why a server could not start or stopped with an error.
#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    #[error("binding {addr}: {source}")]
    /// The address could not be bound.
    Bind {
        /// The address.
        addr: SocketAddr,
        #[source]
        /// Why.
        source: std::io::Error,
    },
    #[error("reflection: {0}")]
    /// Reflection could not be built from the descriptor sets.
    Reflection(#[from] tonic_reflection::server::Error),
    #[error("transport: {}", crate::tls::error_chain(.0))]
    /// The transport failed (TLS set-up, the listener).
    Transport(#[from] tonic::transport::Error),
    #[error("the server task failed: {0}")]
    /// The task serving the connections panicked.
    Task(#[from] tokio::task::JoinError),
}

/// Binds `addr` (port 0 picks a free port; read it back with `local_addr`).
pub async fn bind(addr: SocketAddr) -> Result<TcpListener, ServeError> {
    TcpListener::bind(addr)
        .await
        .map_err(|source| ServeError::Bind { addr, source })
}

/// One service's gRPC server, from the bind to the exit; see the module
/// docs for its life.
///
/// Nothing is accepted until [`GrpcServer::start`] (health and reflection
/// only) or [`GrpcServer::ready`] (everything); [`GrpcServer::run`] serves
/// until the shutdown and then drains. Dropped without `run` (a start-up
/// error), it stops at once.
pub struct GrpcServer {
    readiness: Readiness,
    gate: Gate,
    shutdown: Shutdown,
    /// The server, built but not yet accepting.
    pending: Option<Pin<Box<dyn Future<Output = Served> + Send>>>,
    /// The server accepting, on its own task.
    task: Option<tokio::task::JoinHandle<Served>>,
}

/// How the server's accept loop ended.
type Served = Result<(), tonic::transport::Error>;

impl fmt::Debug for GrpcServer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("GrpcServer")
            .field("readiness", &self.readiness)
            .field("accepting", &self.task.is_some())
            .finish()
    }
}

impl GrpcServer {
    /// A server on `listener` for the services named `served` (their
    /// protos in `descriptors`, the encoded file descriptor set, which
    /// reflection serves — only for `served` and health), exposed as
    /// `options` say, draining once `shutdown` fires. Fails on a TLS
    /// set-up error or a descriptor set reflection cannot read.
    pub fn new(
        options: &ServeOptions,
        listener: TcpListener,
        descriptors: &'static [u8],
        served: &[&'static str],
        shutdown: &Shutdown,
    ) -> Result<GrpcServer, ServeError> {
        let readiness = Readiness::new(served, shutdown);
        let always = standard_routes(&readiness, descriptors, served, options.max_request_bytes)?;
        let gate = Gate::new(readiness.clone(), always);
        let mut builder = tonic::transport::Server::builder();
        if let Some(tls) = &options.tls {
            crate::tls::install_crypto_provider();
            builder = builder.tls_config(tls.clone())?;
        }
        let closing = readiness.clone();
        let serving = builder
            .layer(tower_layer::layer_fn(crate::small_frames::SmallReplyFrames))
            .layer(tower_layer::layer_fn(OversizeIsResourceExhausted))
            .serve_with_incoming_shutdown(gate.clone(), incoming(listener), async move {
                closing.closed().await
            });
        Ok(GrpcServer {
            readiness,
            gate,
            shutdown: shutdown.clone(),
            pending: Some(Box::pin(serving)),
            task: None,
        })
    }

    /// Starts accepting: health (liveness SERVING, readiness NOT_SERVING)
    /// and reflection answer from now on, the services UNAVAILABLE until
    /// [`GrpcServer::ready`]. A no-op once accepting.
    pub fn start(&mut self) {
        if let Some(serving) = self.pending.take() {
            self.task = Some(tokio::spawn(serving));
        }
    }

    /// The services are ready: `routes` answers their calls and readiness
    /// reads SERVING from now until the shutdown. Starts accepting if it
    /// had not, after the routes are in place, so a server started ready
    /// never answers UNAVAILABLE. Only the first call's routes are used.
    pub fn ready(&mut self, routes: Routes) {
        if self.gate.open(routes) {
            tracing::info!("ready: readiness SERVING");
        } else {
            tracing::warn!("GrpcServer::ready called twice; the first routes stay");
        }
        self.start();
    }

    /// The shutdown this server drains on.
    pub fn shutdown(&self) -> &Shutdown {
        &self.shutdown
    }

    /// What this server's health reports.
    pub fn readiness(&self) -> &Readiness {
        &self.readiness
    }

    /// Serves until the shutdown fires, then drains: readiness reads
    /// NOT_SERVING and new calls to the services are refused UNAVAILABLE
    /// at once, while health (liveness SERVING) keeps answering until both
    /// `drain` (the service's own in-flight work) and the calls in flight
    /// have finished; then the server closes. Returns early with the
    /// server's error if it fails before the shutdown.
    pub async fn run(mut self, drain: impl Future<Output = ()>) -> Result<(), ServeError> {
        self.start();
        let Some(mut task) = self.task.take() else {
            return Ok(());
        };
        tokio::select! {
            ended = &mut task => {
                self.readiness.close();
                return joined(ended);
            }
            () = self.shutdown.wait() => {}
        }
        tracing::info!(
            "draining: readiness NOT_SERVING, new calls refused, calls in flight finishing"
        );
        tokio::join!(drain, self.gate.idle());
        self.readiness.close();
        let closed = joined(task.await);
        tracing::info!("gRPC server closed");
        closed
    }
}

impl Drop for GrpcServer {
    fn drop(&mut self) {
        self.readiness.close();
        if let Some(task) = self.task.take() {
            task.abort();
        }
    }
}

/// The server task's end as this module's error.
fn joined(ended: Result<Served, tokio::task::JoinError>) -> Result<(), ServeError> {
    Ok(ended??)
}

/// Health and reflection, each accepting requests of at most
/// `max_request_bytes`. Reflection advertises the `served` services and
/// health — not every service in `descriptors` (the runtime takes the
/// descriptor set as a value, so it knows no service's proto).
fn standard_routes(
    readiness: &Readiness,
    descriptors: &'static [u8],
    served: &[&'static str],
    max_request_bytes: usize,
) -> Result<Routes, ServeError> {
    let reflection = || {
        let mut builder = tonic_reflection::server::Builder::configure()
            .register_encoded_file_descriptor_set(descriptors)
            .register_encoded_file_descriptor_set(tonic_health::pb::FILE_DESCRIPTOR_SET)
            .with_service_name("grpc.health.v1.Health");
        for name in served {
            builder = builder.with_service_name(*name);
        }
        builder
    };
    Ok(Routes::new(
        readiness
            .health_service()
            .max_decoding_message_size(max_request_bytes),
    )
    .add_service(
        reflection()
            .build_v1()?
            .max_decoding_message_size(max_request_bytes),
    )
    .add_service(
        reflection()
            .build_v1alpha()?
            .max_decoding_message_size(max_request_bytes),
    ))
}

/// Answers RESOURCE_EXHAUSTED — what the gRPC status code guide prescribes
/// for a message over the receiver's limit, and what other gRPC stacks send
/// — where tonic answers OUT_OF_RANGE ("decoded message length too large").
/// Every other response passes untouched.
#[derive(Clone, Debug)]
struct OversizeIsResourceExhausted<S>(S);

/// The start of tonic's message for a request over the decoding limit.
const OVERSIZE_MESSAGE_PREFIX: &[u8] = b"Error, decoded message length too large";

impl<S, B, ResBody> tonic::codegen::Service<http::Request<B>> for OversizeIsResourceExhausted<S>
where
    S: tonic::codegen::Service<http::Request<B>, Response = http::Response<ResBody>>,
    S::Future: Send + 'static,
    S::Error: 'static,
    ResBody: 'static,
{
    type Response = http::Response<ResBody>;
    type Error = S::Error;
    type Future = Pin<Box<dyn Future<Output = Result<Self::Response, Self::Error>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.0.poll_ready(cx)
    }

    fn call(&mut self, request: http::Request<B>) -> Self::Future {
        let reply = self.0.call(request);
        Box::pin(async move {
            let mut response = reply.await?;
            oversize_is_resource_exhausted(response.headers_mut());
            Ok(response)
        })
    }
}

/// Rewrites a trailers-only OUT_OF_RANGE "decoded message length too large"
/// status (as tonic refuses an oversize request) to RESOURCE_EXHAUSTED.
fn oversize_is_resource_exhausted(headers: &mut http::HeaderMap) {
    let out_of_range = (tonic::Code::OutOfRange as i32).to_string();
    if headers.get("grpc-status").map(|v| v.as_bytes()) != Some(out_of_range.as_bytes()) {
        return;
    }
    let oversize = headers
        .get("grpc-message")
        .is_some_and(|m| percent_decode(m.as_bytes()).starts_with(OVERSIZE_MESSAGE_PREFIX));
    if oversize {
        let code = (tonic::Code::ResourceExhausted as i32).to_string();
        headers.insert(
            "grpc-status",
            http::HeaderValue::from_str(&code).expect("digits are a header value"),
        );
    }
}

/// `%XX` sequences decoded (grpc-message is percent-encoded).
fn percent_decode(raw: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(raw.len());
    let mut i = 0;
    while i < raw.len() {
        let hex = raw
            .get(i + 1..i + 3)
            .and_then(|h| std::str::from_utf8(h).ok())
            .and_then(|h| u8::from_str_radix(h, 16).ok());
        match (raw[i], hex) {
            (b'%', Some(byte)) => {
                out.push(byte);
                i += 3;
            }
            (byte, _) => {
                out.push(byte);
                i += 1;
            }
        }
    }
    out
}

/// Accepted connections with TCP_NODELAY — gRPC may write headers, data
/// and trailers separately, and with Nagle's algorithm the later small
/// writes would wait for the peer's delayed ACK, about 40 ms per call —
/// and a small reply's data and trailers in one write
/// ([`crate::coalesced_writes`]), written at once (a server does not wait
/// for company: see there why).
fn incoming(
    listener: TcpListener,
) -> impl futures::Stream<
    Item = std::io::Result<crate::coalesced_writes::CoalescedWrites<tokio::net::TcpStream>>,
> {
    use futures::TryStreamExt;
    tonic::transport::server::TcpIncoming::from(listener)
        .with_nodelay(Some(true))
        .map_ok(crate::coalesced_writes::CoalescedWrites::writing_at_once)
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Debug, clap::Parser)]
    struct Cli {
        #[command(flatten)]
        limits: LimitsConfig,
    }

    #[test]
    fn limit_flag_defaults_to_1_mib_and_has_a_floor() {
        let cli = Cli::try_parse_from(["x"]).unwrap();
        assert_eq!(cli.limits.max_request_bytes, DEFAULT_MAX_REQUEST_BYTES);
        let cli = Cli::try_parse_from(["x", "--max-request-bytes", "65536"]).unwrap();
        assert_eq!(cli.limits.max_request_bytes, 65536);
        for bad in ["1023", "-1", "lots"] {
            let e = Cli::try_parse_from(["x".into(), format!("--max-request-bytes={bad}")])
                .unwrap_err();
            assert!(e.to_string().contains("--max-request-bytes"), "{e}");
        }
    }

    #[test]
    fn only_oversize_out_of_range_becomes_resource_exhausted() {
        let status = |code: tonic::Code, message: &str| {
            let mut headers = http::HeaderMap::new();
            tonic::Status::new(code, message)
                .add_header(&mut headers)
                .unwrap();
            oversize_is_resource_exhausted(&mut headers);
            tonic::Status::from_header_map(&headers).unwrap()
        };
        let oversize = status(
            tonic::Code::OutOfRange,
            "Error, decoded message length too large: found 9 bytes, the limit is: 8 bytes",
        );
        assert_eq!(oversize.code(), tonic::Code::ResourceExhausted);
        assert!(oversize.message().contains("found 9 bytes"));
        let other = status(tonic::Code::OutOfRange, "page 7 does not exist");
        assert_eq!(other.code(), tonic::Code::OutOfRange);
        let unrelated = status(
            tonic::Code::InvalidArgument,
            "Error, decoded message length too large",
        );
        assert_eq!(unrelated.code(), tonic::Code::InvalidArgument);
    }

    #[test]
    fn options_debug_shows_no_secret() {
        let options = ServeOptions {
            admin: TokenAuth::with_token("zz-secret-zz").unwrap(),
            ..ServeOptions::default()
        };
        let shown = format!("{options:?}");
        assert!(!shown.contains("zz-secret-zz"), "{shown}");
        assert!(shown.contains("tls: false"), "{shown}");
    }
}
