//! The gRPC client channel the orchestrator calls its participants through:
//! [`GrpcChannel`], hyper-util's pooled HTTP/2 client (the hyper tonic's own
//! channel is built on) as a tower service the generated clients call, with
//! every call held to its deadline until the last byte of the reply.
//!
//! Why not tonic's `Channel`: it hands every call to a `tower::buffer`
//! worker task and back, one more task wake-up each way per call. Same-run
//! A/B (BENCHMARKS.md, "The client channel"): the idle saga, two calls, paid
//! for it in orchestrator context switches and CPU and in latency, while
//! throughput at concurrency 64 was equal. hyper-util's client sends a call
//! on the connection from the caller's own task.
//!
//! What the channel does:
//! - **Lazy connection, reconnected on demand**: nothing is connected until
//!   the first call; one HTTP/2 connection carries every call (hyper-util's
//!   pool), and a connection that closed (the server went away, or sent
//!   GOAWAY on a graceful restart) is replaced by the next call. The pool
//!   never closes an idle connection itself (no idle timeout): the
//!   keep-alive pings below say when one is dead.
//! - **TLS** exactly as [`crate::tls::client_target`] decides it
//!   (`https://`, or any address once `--tls-ca` is set): tokio-rustls, ALPN
//!   `h2` required, the server's certificate checked for the address's host.
//! - **The connect timeout** bounds the name's resolution and the TCP
//!   connect and, once more, the TLS handshake. A connection attempt that
//!   runs out of it, or fails, fails the call `UNAVAILABLE`.
//! - **Every address of a name** is tried: hyper-util's `HttpConnector`
//!   does Happy Eyeballs (RFC 6555) — the addresses of the resolver's first
//!   family one after another, each with its share of the connect timeout
//!   (a black-holed address cannot use all of it), and the other family's
//!   in parallel 300 ms later.
//! - **`TCP_NODELAY`** and **HTTP/2 keep-alive pings** (every
//!   [`KEEP_ALIVE_INTERVAL`], also while idle), so an idle connection whose
//!   peer vanished is replaced before a call finds out.
//! - Plaintext connections write through
//!   [`crate::coalesced_writes::CoalescedWrites`], as the servers' do, so a
//!   request's headers, its message and its end of stream leave in one
//!   write, and requests pass through
//!   [`crate::small_frames::SmallFrames`], so a larger one does too.
//! - **The call deadline over the whole reply.** The generated client writes
//!   the `grpc-timeout` header (`Request::set_timeout`); here the deadline
//!   runs from the call's start to the end of the reply — head, body and
//!   trailers — and a call past it fails `DEADLINE_EXCEEDED`. A server (or
//!   a path to it) stalled after its headers cannot hold a call.
//! - **A call that fails below gRPC retires its client** (no reply: the
//!   connection failed, or its connection task is gone because the runtime
//!   it was spawned on ended — a channel shared by two runtimes, as tests
//!   that crash one orchestrator do): the next call makes a new one on its
//!   own runtime instead of failing the same way forever.
//! - **A call past its deadline retires its connection**: the next call
//!   opens a new one (calls in flight finish on the old one). A peer that
//!   vanished without closing the connection (no RST, no FIN: a host gone,
//!   a network partition) would otherwise time out every call sent on it
//!   until the keep-alive ping noticed, up to 40 s — long enough to use up
//!   a step's attempts and compensate sagas that did not need it.
//!
//! [`GrpcChannel::in_process`] puts any tower service in the place of the
//! connection: calls then go to that service (a deterministic simulation's
//! network delivering them to a participant's generated tonic server in the
//! same process), under the same deadline. Everything above the channel —
//! the generated clients, tonic's codec, the deadline — is the code that
//! runs in production.

use crate::coalesced_writes::CoalescedWrites;
use crate::small_frames::SmallFrames;
use crate::tls::{TlsConfig, TlsError};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::{Connected, Connection, HttpConnector};
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use rustls::pki_types::ServerName;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex, MutexGuard};
use std::task::{Context, Poll};
use std::time::Duration;
use tokio::net::TcpStream;
use tonic::body::Body;
use tonic::codegen::http;
use tower_service::Service;

/// How often an HTTP/2 ping checks the connection.
pub const KEEP_ALIVE_INTERVAL: Duration = Duration::from_secs(30);
/// How long a ping may go unanswered before the connection is dropped.
pub const KEEP_ALIVE_TIMEOUT: Duration = Duration::from_secs(10);

type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// What a call on a [`GrpcChannel`] returns.
pub type ResponseFuture =
    Pin<Box<dyn Future<Output = Result<http::Response<ReplyBody>, BoxError>> + Send + 'static>>;

/// A channel to one gRPC server, lazily connecting, shared by clones, with
/// the call deadline enforced over the whole reply (see the module docs).
/// The generated clients take it as they take tonic's `Channel`
/// (`XServiceClient::new(channel)`).
#[derive(Clone)]
pub struct GrpcChannel {
    shared: Arc<Shared>,
}

impl std::fmt::Debug for GrpcChannel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GrpcChannel")
            .field("uri", self.uri())
            .finish()
    }
}

struct Shared {
    /// The scheme and authority every call's path is sent to.
    uri: http::Uri,
    /// How calls get there.
    route: Route,
    /// The client calls go to; `None` until the first call (its connection
    /// task runs on the runtime of the call that made it) and after one was
    /// retired.
    current: Mutex<Option<Current>>,
}

enum Route {
    /// Over a connection of [`Connector`]'s.
    Connect(Connector),
    /// To a service in this process ([`GrpcChannel::in_process`]).
    InProcess(Mutex<InProcess>),
}

/// The HTTP/2 client in use and which one it is (one more per client
/// made), so that a call retires exactly the client it saw fail, never a
/// newer one another call made since.
struct Current {
    client: HttpClient,
    id: u64,
}

type HttpClient = Client<Connector, Body>;

impl GrpcChannel {
    /// A channel to `addr` (`http://host:port`, `https://host:port` or
    /// `host:port`; over TLS as [`crate::tls::client_target`] decides),
    /// connecting on first use; a connection attempt may take
    /// `connect_timeout` to connect and as long again for the TLS
    /// handshake. Only a bad address or TLS file is an error here.
    pub fn lazy(addr: &str, tls: &TlsConfig, connect_timeout: Duration) -> Result<Self, TlsError> {
        let target = crate::tls::client_target(addr, tls)?;
        Ok(GrpcChannel {
            shared: Arc::new(Shared {
                uri: target.uri,
                route: Route::Connect(Connector::new(connect_timeout, target.tls)),
                current: Mutex::new(None),
            }),
        })
    }

    /// A channel whose calls go to `service` instead of over a connection
    /// (named `uri`, an `http://` URI): what a
    /// simulation passes to deliver calls in-process, through its simulated
    /// network, to a server's generated tonic service. The call deadline is
    /// enforced as on a real channel.
    pub fn in_process<S>(uri: http::Uri, service: S) -> Self
    where
        S: tower_service::Service<
                http::Request<Body>,
                Response = http::Response<Body>,
                Error = BoxError,
            > + Clone
            + Send
            + 'static,
        S::Future: Send + 'static,
    {
        GrpcChannel {
            shared: Arc::new(Shared {
                uri,
                route: Route::InProcess(Mutex::new(InProcess::new(service))),
                current: Mutex::new(None),
            }),
        }
    }

    /// The server's URI (`https://` when TLS is used).
    pub fn uri(&self) -> &http::Uri {
        &self.shared.uri
    }
}

impl Shared {
    fn current(&self) -> MutexGuard<'_, Option<Current>> {
        // Every write under this lock is one assignment: a panic while it
        // is held cannot leave it half written.
        self.current.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The client in use (made now if there is none) and its id.
    fn client(&self, connector: &Connector) -> (HttpClient, u64) {
        let mut current = self.current();
        if let Some(c) = current.as_ref() {
            return (c.client.clone(), c.id);
        }
        static MADE: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
        let id = MADE.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let client = Client::builder(TokioExecutor::new())
            .http2_only(true)
            .timer(TokioTimer::new())
            .pool_idle_timeout(None)
            .http2_keep_alive_interval(KEEP_ALIVE_INTERVAL)
            .http2_keep_alive_timeout(KEEP_ALIVE_TIMEOUT)
            .http2_keep_alive_while_idle(true)
            .build(connector.clone());
        *current = Some(Current {
            client: client.clone(),
            id,
        });
        (client, id)
    }

    /// Retires client `id` if it is still the one in use: the next call
    /// makes a new one, with a connection of its own. Calls in flight on
    /// the old one finish there; its connection closes after the last.
    fn retire(&self, id: u64) {
        let mut current = self.current();
        if current.as_ref().is_some_and(|c| c.id == id) {
            *current = None;
        }
    }

    /// Sends `request` (whose URI is only the method's path, as the
    /// generated clients write it) to this channel's server.
    fn send(&self, mut request: http::Request<Body>) -> (ResponseHead, u64) {
        match &self.route {
            Route::InProcess(service) => {
                let service = service.lock().unwrap_or_else(|p| p.into_inner()).clone();
                (Box::pin(tower::ServiceExt::oneshot(service, request)), 0)
            }
            Route::Connect(connector) => {
                let mut parts = self.uri.clone().into_parts();
                parts.path_and_query = request.uri().path_and_query().cloned();
                if let Ok(uri) = http::Uri::from_parts(parts) {
                    *request.uri_mut() = uri;
                }
                let (client, id) = self.client(connector);
                let request = request.map(|body| Body::new(SmallFrames::new(body)));
                let reply = client.request(request);
                let reply = async move {
                    match reply.await {
                        Ok(response) => Ok(response.map(Body::new)),
                        // tonic reads a ConnectError as UNAVAILABLE.
                        Err(error) if error.is_connect() => {
                            Err(Box::new(tonic::ConnectError(Box::new(error))) as BoxError)
                        }
                        Err(error) => Err(BoxError::from(error)),
                    }
                };
                (Box::pin(reply), id)
            }
        }
    }
}

/// TCP to every address of the URI's host (hyper-util's Happy Eyeballs),
/// `TCP_NODELAY`, the resolution and the connect within the connect
/// timeout (each address with its share of it), then TLS (within the
/// connect timeout again) or, plaintext, the stream written through
/// [`CoalescedWrites`].
#[derive(Clone)]
struct Connector {
    http: HttpConnector,
    connect_timeout: Duration,
    tls: Option<(tokio_rustls::TlsConnector, ServerName<'static>)>,
}

impl Connector {
    fn new(
        connect_timeout: Duration,
        tls: Option<(Arc<rustls::ClientConfig>, ServerName<'static>)>,
    ) -> Self {
        Connector {
            http: configured(HttpConnector::new(), connect_timeout),
            connect_timeout,
            tls: tls.map(|(config, name)| (tokio_rustls::TlsConnector::from(config), name)),
        }
    }
}

/// `http` as the channel connects: any scheme (TLS comes on top),
/// `TCP_NODELAY`, `connect_timeout` shared among a name's addresses.
fn configured<R>(mut http: HttpConnector<R>, connect_timeout: Duration) -> HttpConnector<R> {
    http.enforce_http(false);
    http.set_nodelay(true);
    http.set_connect_timeout(Some(connect_timeout));
    http
}

impl Service<http::Uri> for Connector {
    type Response = ConnectedStream;
    type Error = BoxError;
    type Future = Pin<Box<dyn Future<Output = Result<ConnectedStream, BoxError>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), BoxError>> {
        self.http.poll_ready(cx).map_err(BoxError::from)
    }

    fn call(&mut self, uri: http::Uri) -> Self::Future {
        let timeout = self.connect_timeout;
        let connecting = tokio::time::timeout(timeout, self.http.call(uri));
        let tls = self.tls.clone();
        Box::pin(async move {
            let tcp = connecting
                .await
                .map_err(|_| format!("connect timed out after {timeout:?}"))??
                .into_inner();
            let Some((connector, name)) = tls else {
                return Ok(ConnectedStream::Plain(TokioIo::new(CoalescedWrites::new(
                    tcp,
                ))));
            };
            let stream = tokio::time::timeout(timeout, connector.connect(name, tcp))
                .await
                .map_err(|_| format!("TLS handshake timeout ({timeout:?})"))??;
            if stream.get_ref().1.alpn_protocol() != Some(crate::tls::ALPN_H2) {
                return Err(
                    "the server did not agree to HTTP/2 in the TLS handshake (ALPN h2)".into(),
                );
            }
            Ok(ConnectedStream::Tls(Box::new(TokioIo::new(stream))))
        })
    }
}

/// A connection the [`Connector`] made: plaintext or TLS.
enum ConnectedStream {
    Plain(TokioIo<CoalescedWrites<TcpStream>>),
    Tls(Box<TokioIo<tokio_rustls::client::TlsStream<TcpStream>>>),
}

impl Connection for ConnectedStream {
    fn connected(&self) -> Connected {
        Connected::new()
    }
}

impl hyper::rt::Read for ConnectedStream {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: hyper::rt::ReadBufCursor<'_>,
    ) -> Poll<std::io::Result<()>> {
        match self.get_mut() {
            ConnectedStream::Plain(io) => Pin::new(io).poll_read(cx, buf),
            ConnectedStream::Tls(io) => Pin::new(io.as_mut()).poll_read(cx, buf),
        }
    }
}

impl hyper::rt::Write for ConnectedStream {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        match self.get_mut() {
            ConnectedStream::Plain(io) => Pin::new(io).poll_write(cx, buf),
            ConnectedStream::Tls(io) => Pin::new(io.as_mut()).poll_write(cx, buf),
        }
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        match self.get_mut() {
            ConnectedStream::Plain(io) => Pin::new(io).poll_flush(cx),
            ConnectedStream::Tls(io) => Pin::new(io.as_mut()).poll_flush(cx),
        }
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        match self.get_mut() {
            ConnectedStream::Plain(io) => Pin::new(io).poll_shutdown(cx),
            ConnectedStream::Tls(io) => Pin::new(io.as_mut()).poll_shutdown(cx),
        }
    }

    fn is_write_vectored(&self) -> bool {
        match self {
            ConnectedStream::Plain(io) => io.is_write_vectored(),
            ConnectedStream::Tls(io) => io.is_write_vectored(),
        }
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        match self.get_mut() {
            ConnectedStream::Plain(io) => Pin::new(io).poll_write_vectored(cx, bufs),
            ConnectedStream::Tls(io) => Pin::new(io.as_mut()).poll_write_vectored(cx, bufs),
        }
    }
}

impl Service<http::Request<Body>> for GrpcChannel {
    type Response = http::Response<ReplyBody>;
    type Error = BoxError;
    type Future = ResponseFuture;

    /// Always ready: the call itself waits for the connection.
    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), BoxError>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, request: http::Request<Body>) -> ResponseFuture {
        let deadline = crate::deadline::of(request.headers()).map(|timeout| Deadline {
            sleep: Box::pin(tokio::time::sleep(timeout)),
            timeout,
        });
        let shared = self.shared.clone();
        let (reply, id) = shared.send(request);
        Box::pin(async move {
            let Some(mut deadline) = deadline else {
                let response = reply.await.inspect_err(|_| shared.retire(id))?;
                return Ok(response.map(|inner| ReplyBody {
                    inner,
                    deadline: None,
                }));
            };
            let response = tokio::select! {
                biased;
                response = reply => response,
                () = deadline.sleep.as_mut() => Err(deadline.exceeded()),
            };
            match response {
                Ok(response) => Ok(response.map(|inner| ReplyBody {
                    inner,
                    deadline: Some((deadline, shared, id)),
                })),
                Err(error) => {
                    shared.retire(id);
                    Err(if timed_out(error.as_ref()) {
                        deadline.exceeded()
                    } else {
                        error
                    })
                }
            }
        })
    }
}

/// A call's response head on its way: from tonic's channel or from the
/// in-process service.
type ResponseHead =
    Pin<Box<dyn Future<Output = Result<http::Response<Body>, BoxError>> + Send + 'static>>;

/// The service an in-process channel calls.
type InProcess = tower::util::BoxCloneService<http::Request<Body>, http::Response<Body>, BoxError>;

/// Whether `error` is a call's deadline passing: this channel's own, or a
/// `DEADLINE_EXCEEDED` an in-process service answered with.
fn timed_out(error: &(dyn std::error::Error + 'static)) -> bool {
    error
        .downcast_ref::<tonic::Status>()
        .is_some_and(|s| s.code() == tonic::Code::DeadlineExceeded)
}

/// A call's deadline: one timer for the whole call, the response head and
/// then its body.
struct Deadline {
    sleep: Pin<Box<tokio::time::Sleep>>,
    timeout: Duration,
}

impl Deadline {
    fn status(&self) -> tonic::Status {
        tonic::Status::deadline_exceeded(format!(
            "no complete reply within the call's deadline ({:?})",
            self.timeout
        ))
    }

    fn exceeded(&self) -> BoxError {
        Box::new(self.status())
    }
}

/// The response body of a [`GrpcChannel`] call: tonic's body, failing with
/// `DEADLINE_EXCEEDED` once the call's deadline passes (and retiring the
/// channel, as a call whose head came too late does).
pub struct ReplyBody {
    inner: Body,
    deadline: Option<(Deadline, Arc<Shared>, u64)>,
}

impl std::fmt::Debug for ReplyBody {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ReplyBody")
            .field("inner", &self.inner)
            .field(
                "deadline",
                &self.deadline.as_ref().map(|(d, _, _)| d.timeout),
            )
            .finish()
    }
}

impl http_body::Body for ReplyBody {
    type Data = bytes::Bytes;
    type Error = tonic::Status;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<http_body::Frame<bytes::Bytes>, tonic::Status>>> {
        let this = &mut *self;
        if let Some((deadline, shared, id)) = &mut this.deadline
            && deadline.sleep.as_mut().poll(cx).is_ready()
        {
            shared.retire(*id);
            return Poll::Ready(Some(Err(deadline.status())));
        }
        Pin::new(&mut this.inner).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        http_body::Body::is_end_stream(&self.inner)
    }

    fn size_hint(&self) -> http_body::SizeHint {
        http_body::Body::size_hint(&self.inner)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};

    #[test]
    fn addresses_decide_plaintext_or_tls() {
        let t = Duration::from_secs(1);
        let plain = GrpcChannel::lazy("127.0.0.1:1", &TlsConfig::default(), t).unwrap();
        assert_eq!(plain.uri().to_string(), "http://127.0.0.1:1/");
        let tls = GrpcChannel::lazy("https://localhost:1", &TlsConfig::default(), t).unwrap();
        assert_eq!(tls.uri().scheme_str(), Some("https"));
        let ipv6 = GrpcChannel::lazy("https://[::1]:1", &TlsConfig::default(), t).unwrap();
        assert_eq!(ipv6.uri().host(), Some("[::1]"));
        let default_port =
            GrpcChannel::lazy("https://localhost", &TlsConfig::default(), t).unwrap();
        assert_eq!(default_port.uri().port_u16(), None, "https's 443");
        let e = GrpcChannel::lazy("ftp://localhost:1", &TlsConfig::default(), t).unwrap_err();
        assert!(e.to_string().contains("scheme"), "{e}");
        let e = GrpcChannel::lazy("http://", &TlsConfig::default(), t).unwrap_err();
        assert!(e.to_string().contains("address"), "{e}");
    }

    /// A port nothing listens on (a listener bound, then closed).
    async fn closed_port() -> u16 {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        listener.local_addr().unwrap().port()
    }

    #[tokio::test]
    async fn every_address_of_a_name_is_tried_with_nodelay() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let live = listener.local_addr().unwrap();
        let dead = std::net::SocketAddr::from(([127, 0, 0, 1], closed_port().await));
        // A name that resolves to a refusing address first, then the live one.
        let resolver = tower::service_fn(move |_name| async move {
            Ok::<_, std::io::Error>(vec![dead, live].into_iter())
        });
        let mut http = configured(
            HttpConnector::new_with_resolver(resolver),
            Duration::from_secs(30),
        );
        let uri: http::Uri = format!("https://replicas.test:{}", live.port())
            .parse()
            .unwrap();
        let started = std::time::Instant::now();
        let tcp = http.call(uri).await.expect("the live address connects");
        assert_eq!(tcp.inner().peer_addr().unwrap(), live);
        assert!(tcp.inner().nodelay().unwrap(), "TCP_NODELAY");
        assert!(
            started.elapsed() < Duration::from_secs(15),
            "a refusal passes the address over without using up the timeout"
        );
        let plain = Connector::new(Duration::from_secs(30), None)
            .call(format!("http://localhost:{}", live.port()).parse().unwrap())
            .await
            .expect("a name connects");
        let ConnectedStream::Plain(plain) = plain else {
            panic!("no TLS was asked for")
        };
        assert!(plain.inner().get_ref().nodelay().unwrap(), "TCP_NODELAY");
        let _accepted = listener.accept().await.unwrap();
    }

    fn health_client(
        channel: &GrpcChannel,
    ) -> tonic_health::pb::health_client::HealthClient<GrpcChannel> {
        tonic_health::pb::health_client::HealthClient::new(channel.clone())
    }

    fn check(timeout: Option<Duration>) -> tonic::Request<tonic_health::pb::HealthCheckRequest> {
        let mut request = tonic::Request::new(tonic_health::pb::HealthCheckRequest::default());
        if let Some(timeout) = timeout {
            request.set_timeout(timeout);
        }
        request
    }

    #[tokio::test]
    async fn the_connect_timeout_bounds_the_tls_handshake_too() {
        // A TCP listener that never speaks: the TLS handshake hangs.
        let silent = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = silent.local_addr().unwrap();
        let connect_timeout = Duration::from_millis(300);
        let channel = GrpcChannel::lazy(
            &format!("https://localhost:{}", addr.port()),
            &TlsConfig::default(),
            connect_timeout,
        )
        .unwrap();
        let started = std::time::Instant::now();
        let status = tokio::time::timeout(
            Duration::from_secs(10),
            health_client(&channel).check(check(None)),
        )
        .await
        .expect("a silent server held the call past the connect timeout")
        .expect_err("the server never answers");
        let elapsed = started.elapsed();
        assert_eq!(status.code(), tonic::Code::Unavailable, "{status:?}");
        let why = crate::tls::error_chain(&status);
        assert!(why.to_lowercase().contains("timeout"), "{why}");
        assert!(
            elapsed >= connect_timeout && elapsed < connect_timeout * 3,
            "{elapsed:?}"
        );
        drop(silent);
    }

    #[tokio::test]
    async fn calls_to_a_server_that_never_answers_end_at_their_deadline() {
        let silent = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = silent.local_addr().unwrap();
        let channel = GrpcChannel::lazy(
            &format!("https://localhost:{}", addr.port()),
            &TlsConfig::default(),
            Duration::from_millis(300),
        )
        .unwrap();
        let deadline = Duration::from_millis(800);
        let started = std::time::Instant::now();
        let calls = (0..8).map(|_| {
            let mut client = health_client(&channel);
            async move { client.check(check(Some(deadline))).await }
        });
        for result in futures::future::join_all(calls).await {
            let status = result.expect_err("the server never answers");
            assert!(
                matches!(
                    status.code(),
                    tonic::Code::Unavailable | tonic::Code::DeadlineExceeded
                ),
                "{status:?}"
            );
        }
        let elapsed = started.elapsed();
        assert!(
            elapsed < deadline * 2,
            "8 calls queued for one connection took {elapsed:?}: longer than their deadline"
        );
        drop(silent);
    }

    /// How the scripted server below replies.
    #[derive(Clone, Copy)]
    enum Script {
        /// Response headers, then a body that never ends.
        StallAfterHeaders,
        /// A whole gRPC reply (`grpc.health.v1` SERVING), then GOAWAY: the
        /// connection serves one call and closes gracefully.
        OneReplyThenGoAway,
    }

    /// A response body: the frames given, then (if `stall`) nothing ever.
    struct Scripted {
        frames: std::collections::VecDeque<http_body::Frame<bytes::Bytes>>,
        stall: bool,
    }

    impl http_body::Body for Scripted {
        type Data = bytes::Bytes;
        type Error = std::convert::Infallible;

        fn poll_frame(
            mut self: Pin<&mut Self>,
            _cx: &mut Context<'_>,
        ) -> Poll<Option<Result<http_body::Frame<bytes::Bytes>, Self::Error>>> {
            match self.frames.pop_front() {
                Some(frame) => Poll::Ready(Some(Ok(frame))),
                None if self.stall => Poll::Pending,
                None => Poll::Ready(None),
            }
        }
    }

    /// What a scripted server saw.
    #[derive(Default)]
    struct Seen {
        connections: AtomicUsize,
        /// The `grpc-timeout` of the last request.
        grpc_timeout: Mutex<Option<String>>,
    }

    /// An HTTP/2 server on a free port that replies as `script` says.
    async fn scripted_server(script: Script) -> (String, Arc<Seen>) {
        use hyper_util::rt::TokioExecutor;
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = format!("http://{}", listener.local_addr().unwrap());
        let seen = Arc::new(Seen::default());
        let server_seen = seen.clone();
        tokio::spawn(async move {
            while let Ok((tcp, _)) = listener.accept().await {
                server_seen.connections.fetch_add(1, Ordering::SeqCst);
                let (replied, on_reply) = tokio::sync::mpsc::unbounded_channel::<()>();
                let seen = server_seen.clone();
                let service = hyper::service::service_fn(move |request: http::Request<_>| {
                    let _ = replied.send(());
                    *seen.grpc_timeout.lock().unwrap() = request
                        .headers()
                        .get(crate::deadline::GRPC_TIMEOUT)
                        .and_then(|v| v.to_str().ok())
                        .map(str::to_owned);
                    let (frames, stall) = match script {
                        Script::StallAfterHeaders => (vec![], true),
                        Script::OneReplyThenGoAway => {
                            let mut trailers = http::HeaderMap::new();
                            trailers.insert("grpc-status", http::HeaderValue::from_static("0"));
                            let message = bytes::Bytes::from_static(&[0, 0, 0, 0, 2, 0x08, 0x01]);
                            let frames = vec![
                                http_body::Frame::data(message),
                                http_body::Frame::trailers(trailers),
                            ];
                            (frames, false)
                        }
                    };
                    let response = http::Response::builder()
                        .header("content-type", "application/grpc")
                        .body(Scripted {
                            frames: frames.into(),
                            stall,
                        });
                    async move { response }
                });
                let connection = hyper::server::conn::http2::Builder::new(TokioExecutor::new())
                    .serve_connection(TokioIo::new(tcp), service);
                tokio::spawn(async move {
                    let mut on_reply = on_reply;
                    tokio::pin!(connection);
                    tokio::select! {
                        _ = connection.as_mut() => return,
                        _ = on_reply.recv() => {}
                    }
                    if matches!(script, Script::OneReplyThenGoAway) {
                        connection.as_mut().graceful_shutdown();
                    }
                    let _ = connection.await;
                });
            }
        });
        (addr, seen)
    }

    #[tokio::test]
    async fn the_deadline_covers_the_reply_body_and_retires_the_connection() {
        let (addr, seen) = scripted_server(Script::StallAfterHeaders).await;
        let channel =
            GrpcChannel::lazy(&addr, &TlsConfig::default(), Duration::from_secs(2)).unwrap();
        let timeout = Duration::from_millis(300);
        for call in 1..=2 {
            let started = std::time::Instant::now();
            let outcome = tokio::time::timeout(
                Duration::from_secs(10),
                health_client(&channel).check(check(Some(timeout))),
            )
            .await
            .expect("a reply stalled after its headers held the call past its deadline");
            let status = outcome.expect_err("the body never ends");
            assert_eq!(status.code(), tonic::Code::DeadlineExceeded, "{status:?}");
            let elapsed = started.elapsed();
            assert!(
                elapsed >= timeout && elapsed < timeout * 5,
                "call {call} took {elapsed:?}"
            );
            assert_eq!(
                seen.connections.load(Ordering::SeqCst),
                call,
                "each timed-out call retires its connection: the next one opens a new one"
            );
            let sent = seen.grpc_timeout.lock().unwrap().clone();
            let sent = sent.as_deref().and_then(crate::deadline::parse);
            assert!(
                sent.is_some_and(|t| t <= timeout && t > timeout / 2),
                "the server is told the deadline: {sent:?}"
            );
        }
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_channel_made_on_a_runtime_that_ended_is_replaced() {
        // A plain health server, on this test's runtime.
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = format!("http://{}", listener.local_addr().unwrap());
        let (_reporter, health) = tonic_health::server::health_reporter();
        tokio::spawn(
            tonic::transport::Server::builder()
                .add_service(health)
                .serve_with_incoming(tonic::transport::server::TcpIncoming::from(listener)),
        );
        let channel =
            GrpcChannel::lazy(&addr, &TlsConfig::default(), Duration::from_secs(2)).unwrap();
        // First used (so made) on a runtime of its own, which then ends
        // and takes tonic's worker task with it.
        let first = channel.clone();
        std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap();
            runtime
                .block_on(health_client(&first).check(check(None)))
                .expect("the first call");
        })
        .join()
        .unwrap();
        // From this runtime: the dead channel fails at most one call, and
        // is replaced.
        let mut replies = Vec::new();
        for _ in 0..3 {
            let reply = tokio::time::timeout(
                Duration::from_secs(10),
                health_client(&channel).check(check(None)),
            )
            .await
            .expect("a call through a dead worker held past 10 s");
            replies.push(reply.map(|_| ()).map_err(|s| s.code()));
        }
        assert!(replies[1..].iter().all(Result::is_ok), "{replies:?}");
    }

    #[tokio::test]
    async fn connections_closed_gracefully_under_traffic_fail_no_call() {
        let (addr, seen) = scripted_server(Script::OneReplyThenGoAway).await;
        let channel =
            GrpcChannel::lazy(&addr, &TlsConfig::default(), Duration::from_secs(2)).unwrap();
        // Eight callers at once, so that calls are queued on a connection
        // when its GOAWAY arrives.
        let (callers, each) = (8, 25);
        let calls = callers * each;
        let results = futures::future::join_all((0..callers).map(|_| {
            let channel = channel.clone();
            async move {
                let mut failed = Vec::new();
                for _ in 0..each {
                    let reply = health_client(&channel)
                        .check(check(Some(Duration::from_secs(5))))
                        .await;
                    if let Err(status) = reply {
                        failed.push(status);
                    }
                }
                failed
            }
        }))
        .await;
        let failed: Vec<_> = results.into_iter().flatten().collect();
        assert!(
            failed.is_empty(),
            "{} of {calls} calls failed: {:?}",
            failed.len(),
            &failed[..failed.len().min(3)]
        );
        // (hyper's graceful shutdown still serves the streams opened
        // before its final GOAWAY: ~10 calls per connection here.)
        let connections = seen.connections.load(Ordering::SeqCst);
        assert!(
            connections >= 5,
            "the server closed its connections again and again under traffic: {connections}"
        );
    }
}
