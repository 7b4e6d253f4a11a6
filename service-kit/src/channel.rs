//! A gRPC client channel that is one HTTP/2 connection, used directly by
//! the calling task: what the orchestrator calls its participants through.
//!
//! Why not tonic's `Channel`: it puts a `tower::Buffer` in front of the
//! connection, a task of its own that every call is handed to and whose
//! answer is handed back. Here a call goes from the caller's task straight
//! to hyper's connection task, one task hand-off less per call: measured
//! (BENCHMARKS.md, session 8) 2–3% more sagas/s at concurrency 64; idle
//! latency and CPU unchanged within noise.
//!
//! What tonic's channel did and this one keeps:
//! - **Lazy connection, reconnected on demand.** Nothing is connected until
//!   the first call; a call that finds the connection closed (the server
//!   went away) connects again. One connection attempt runs at a time, and
//!   every call that waited for it shares its outcome, so a server that is
//!   down costs one connect timeout, not one per queued call.
//! - **The call deadline** (`grpc-timeout`, set by `Request::set_timeout`)
//!   is enforced here too, over the whole reply — its head, its body and
//!   its trailers — and a call past it fails `DEADLINE_EXCEEDED`. (tonic's
//!   own timeout stops at the response head and says `CANCELLED`; a server
//!   stalled after its headers held a call indefinitely.) The connect
//!   timeout comes on top of it (it bounds the wait for a connection).
//! - **TLS** as [`crate::tls::client_endpoint`] decides it (`https://`, or
//!   any address once `--tls-ca` is set), with ALPN `h2`.
//!
//! And what it adds:
//! - **A call past its deadline retires its connection**: the next call
//!   opens a new one (calls in flight finish on the old one). A peer that
//!   vanished without closing the connection (no RST, no FIN: a host gone,
//!   a network partition) would otherwise time out every call sent on it
//!   until the keep-alive ping noticed, up to 40 s — long enough to use up
//!   a step's attempts and compensate sagas that did not need it.
//! - **A request the connection never took** (it closed between the check
//!   and the send) is sent once more on a new connection: it cannot have
//!   reached the server, so the caller loses none of its attempts to it.
//! - **HTTP/2 keep-alive pings** (every [`KEEP_ALIVE_INTERVAL`], also idle),
//!   so an idle connection whose peer vanished is replaced before a call
//!   finds out.

use crate::tls::{ALPN_H2, ClientTarget, TlsConfig, TlsError, client_target};
use hyper::body::Incoming;
use hyper::client::conn::http2::SendRequest;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex, MutexGuard};
use std::task::{Context, Poll};
use std::time::Duration;
use tonic::body::Body;
use tonic::codegen::http;

/// How often an HTTP/2 ping checks the connection.
pub const KEEP_ALIVE_INTERVAL: Duration = Duration::from_secs(30);
/// How long a ping may go unanswered before the connection is dropped.
pub const KEEP_ALIVE_TIMEOUT: Duration = Duration::from_secs(10);

type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// What a call on a [`GrpcChannel`] returns.
pub type ResponseFuture =
    Pin<Box<dyn Future<Output = Result<http::Response<ResponseBody>, BoxError>> + Send + 'static>>;

/// A channel to one gRPC server: one lazily opened HTTP/2 connection
/// (plaintext or TLS), shared by clones, reopened when it closes. Use it
/// wherever tonic's `Channel` goes (`XServiceClient::new(channel)`).
#[derive(Clone)]
pub struct GrpcChannel {
    shared: Arc<Shared>,
}

impl std::fmt::Debug for GrpcChannel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GrpcChannel")
            .field("uri", &self.shared.target.uri)
            .field("tls", &self.shared.target.tls.is_some())
            .finish()
    }
}

struct Shared {
    target: ClientTarget,
    connect_timeout: Duration,
    state: Mutex<State>,
    /// Held while one connection attempt runs.
    connecting: tokio::sync::Mutex<()>,
}

#[derive(Default)]
struct State {
    open: Option<Open>,
    /// Connection attempts finished so far.
    attempts: u64,
    /// Why the last attempt failed.
    last_error: Option<String>,
}

impl GrpcChannel {
    /// A channel to `addr` (`http://host:port`, `https://host:port` or
    /// `host:port`; over TLS as [`crate::tls::client_endpoint`] decides),
    /// connecting on first use; each connection attempt may take
    /// `connect_timeout`. Only a bad address or TLS file is an error here.
    pub fn lazy(addr: &str, tls: &TlsConfig, connect_timeout: Duration) -> Result<Self, TlsError> {
        let target = client_target(addr, tls)?;
        Ok(GrpcChannel {
            shared: Arc::new(Shared {
                target,
                connect_timeout,
                state: Mutex::new(State::default()),
                connecting: tokio::sync::Mutex::new(()),
            }),
        })
    }

    /// The server's URI (`https://` when TLS is used).
    pub fn uri(&self) -> &http::Uri {
        &self.shared.target.uri
    }
}

impl tower_service::Service<http::Request<Body>> for GrpcChannel {
    type Response = http::Response<ResponseBody>;
    type Error = BoxError;
    type Future = ResponseFuture;

    /// Always ready: HTTP/2 flow control and the server's stream limit
    /// apply back-pressure inside the call.
    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), BoxError>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, request: http::Request<Body>) -> ResponseFuture {
        let shared = self.shared.clone();
        Box::pin(async move {
            let (mut head, body) = request.into_parts();
            let deadline = crate::deadline::of(&head.headers).map(|timeout| Deadline {
                sleep: Box::pin(tokio::time::sleep(timeout)),
                timeout,
            });
            let mut uri = http::uri::Parts::from(std::mem::take(&mut head.uri));
            uri.scheme = shared.target.uri.scheme().cloned();
            uri.authority = shared.target.uri.authority().cloned();
            head.uri = http::Uri::from_parts(uri)?;
            shared
                .exchange(http::Request::from_parts(head, body), deadline)
                .await
        })
    }
}

/// A call's deadline: one timer for the whole call, the response head and
/// then its body.
struct Deadline {
    sleep: Pin<Box<tokio::time::Sleep>>,
    timeout: Duration,
}

impl Deadline {
    fn exceeded(&self) -> BoxError {
        Box::new(tonic::Status::deadline_exceeded(format!(
            "no complete reply within the call's deadline ({:?})",
            self.timeout
        )))
    }
}

/// The response body of a [`GrpcChannel`] call: hyper's body, failing with
/// `DEADLINE_EXCEEDED` once the call's deadline passes. The deadline
/// covers the whole reply, not only its head: a server (or a path to it)
/// that stalls after the response headers cannot hold a call past its
/// deadline, and the connection is then replaced as after any timeout.
pub struct ResponseBody {
    inner: Incoming,
    deadline: Option<(Deadline, Arc<Shared>, u64)>,
}

impl std::fmt::Debug for ResponseBody {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ResponseBody")
            .field("inner", &self.inner)
            .field(
                "deadline",
                &self.deadline.as_ref().map(|(d, _, _)| d.timeout),
            )
            .finish()
    }
}

impl http_body::Body for ResponseBody {
    type Data = bytes::Bytes;
    type Error = BoxError;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<http_body::Frame<bytes::Bytes>, BoxError>>> {
        let this = &mut *self;
        if let Some((deadline, shared, connection)) = &mut this.deadline
            && deadline.sleep.as_mut().poll(cx).is_ready()
        {
            shared.forget(*connection);
            return Poll::Ready(Some(Err(deadline.exceeded())));
        }
        Pin::new(&mut this.inner)
            .poll_frame(cx)
            .map(|frame| frame.map(|f| f.map_err(BoxError::from)))
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> http_body::SizeHint {
        self.inner.size_hint()
    }
}

/// An open connection: its sender and which connection it is (one more
/// per connection opened), so that a call can retire exactly the
/// connection it saw fail, never a newer one another call opened since.
#[derive(Clone)]
struct Open {
    sender: SendRequest<Body>,
    id: u64,
}

/// Sends `request` once on `open`; a request the connection never took
/// (it closed first) comes back with the error.
async fn send_once(
    open: &mut Open,
    request: http::Request<Body>,
) -> Result<http::Response<Incoming>, (hyper::Error, Option<http::Request<Body>>)> {
    if let Err(error) = open.sender.ready().await {
        return Err((error, Some(request)));
    }
    open.sender
        .try_send_request(request)
        .await
        .map_err(|mut e| {
            let request = e.take_message();
            (e.into_error(), request)
        })
}

impl Shared {
    fn state(&self) -> MutexGuard<'_, State> {
        // A panic while holding this lock cannot leave `State` half
        // written (every write is one assignment), so a poisoned lock is
        // still consistent.
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// One call: the request on the open connection (connecting first if
    /// there is none) within the deadline, then the reply's body within the
    /// same deadline.
    ///
    /// A request the connection never took — it closed between the check
    /// and the send, typically after the server's GOAWAY on a graceful
    /// restart — is sent once more on a new connection: it cannot have
    /// reached the server, so resending it is not a retry of the call and
    /// costs the caller none of its attempts. A call whose deadline passes
    /// retires its connection: a peer that vanished without closing it
    /// (no RST, no FIN) would otherwise time out every call sent on it
    /// until the keep-alive ping notices, up to 40 s later.
    async fn exchange(
        self: Arc<Self>,
        mut request: http::Request<Body>,
        mut deadline: Option<Deadline>,
    ) -> Result<http::Response<ResponseBody>, BoxError> {
        let mut resent = false;
        loop {
            let mut open = self.sender().await?;
            let sent = match &mut deadline {
                Some(d) => tokio::select! {
                    biased;
                    sent = send_once(&mut open, request) => sent,
                    () = d.sleep.as_mut() => {
                        self.forget(open.id);
                        return Err(d.exceeded());
                    }
                },
                None => send_once(&mut open, request).await,
            };
            match sent {
                Ok(response) => {
                    let id = open.id;
                    return Ok(response.map(|inner| ResponseBody {
                        inner,
                        deadline: deadline.map(|d| (d, self.clone(), id)),
                    }));
                }
                Err((error, Some(unsent))) if !resent => {
                    tracing::debug!(uri = %self.target.uri, %error, "the connection closed before taking the request: sending it on a new one");
                    self.forget(open.id);
                    request = unsent;
                    resent = true;
                }
                Err((error, _)) => return Err(error.into()),
            }
        }
    }

    /// Retires connection `id` if it is still the open one: the next call
    /// opens a new connection. Calls in flight on it finish there (each
    /// holds its own sender); the connection closes after the last.
    fn forget(&self, id: u64) {
        let mut state = self.state();
        if state.open.as_ref().is_some_and(|open| open.id == id) {
            state.open = None;
        }
    }

    /// The open connection, connecting first if there is none.
    async fn sender(&self) -> Result<Open, BoxError> {
        let attempts_seen = {
            let state = self.state();
            if let Some(open) = state.open.as_ref().filter(|o| !o.sender.is_closed()) {
                return Ok(open.clone());
            }
            state.attempts
        };
        let _one_attempt = self.connecting.lock().await;
        {
            let state = self.state();
            if let Some(open) = state.open.as_ref().filter(|o| !o.sender.is_closed()) {
                return Ok(open.clone());
            }
            if state.attempts != attempts_seen
                && let Some(why) = &state.last_error
            {
                // An attempt ran while this call waited, and failed: its
                // answer is this call's too. (One that succeeded and whose
                // connection has closed since is no answer: connect again.)
                return Err(tonic::ConnectError(why.clone().into()).into());
            }
        }
        let outcome = match tokio::time::timeout(self.connect_timeout, self.connect()).await {
            Ok(outcome) => outcome,
            Err(_) => Err(format!("connect timed out after {:?}", self.connect_timeout).into()),
        };
        let mut state = self.state();
        state.attempts += 1;
        match outcome {
            Ok(sender) => {
                let open = Open {
                    sender,
                    id: state.attempts,
                };
                state.open = Some(open.clone());
                state.last_error = None;
                Ok(open)
            }
            Err(error) => {
                let why = crate::tls::error_chain(error.as_ref());
                tracing::debug!(uri = %self.target.uri, error = %why, "connection attempt failed");
                state.open = None;
                state.last_error = Some(why.clone());
                Err(tonic::ConnectError(why.into()).into())
            }
        }
    }

    /// TCP (every address of the name, [`crate::dial`]; `TCP_NODELAY`), TLS
    /// when configured, the HTTP/2 handshake; the connection is driven by a
    /// task of its own until it closes.
    async fn connect(&self) -> Result<SendRequest<Body>, BoxError> {
        let target = &self.target;
        let tcp = crate::dial::connect(target.host(), target.port()).await?;
        tcp.set_nodelay(true)?;
        match &target.tls {
            Some(tls) => {
                let tls = tokio_rustls::TlsConnector::from(tls.config.clone())
                    .connect(tls.server_name.clone(), tcp)
                    .await?;
                if tls.get_ref().1.alpn_protocol() != Some(ALPN_H2) {
                    return Err("the server did not agree to HTTP/2 (ALPN h2)".into());
                }
                handshake(tls).await
            }
            None => handshake(crate::coalesced_writes::CoalescedWrites(tcp)).await,
        }
    }
}

async fn handshake<IO>(io: IO) -> Result<SendRequest<Body>, BoxError>
where
    IO: tokio::io::AsyncRead + tokio::io::AsyncWrite + Send + Unpin + 'static,
{
    let (sender, connection) = hyper::client::conn::http2::Builder::new(TokioExecutor::new())
        .timer(TokioTimer::new())
        .keep_alive_interval(KEEP_ALIVE_INTERVAL)
        .keep_alive_timeout(KEEP_ALIVE_TIMEOUT)
        .keep_alive_while_idle(true)
        .handshake(TokioIo::new(io))
        .await?;
    tokio::spawn(async move {
        if let Err(error) = connection.await {
            tracing::debug!(%error, "connection closed with an error");
        }
    });
    Ok(sender)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn addresses_decide_plaintext_or_tls() {
        let t = Duration::from_secs(1);
        let plain = GrpcChannel::lazy("127.0.0.1:1", &TlsConfig::default(), t).unwrap();
        assert_eq!(plain.uri().to_string(), "http://127.0.0.1:1/");
        let tls = GrpcChannel::lazy("https://localhost:1", &TlsConfig::default(), t).unwrap();
        assert_eq!(tls.uri().scheme_str(), Some("https"));
        let ipv6 = GrpcChannel::lazy("https://[::1]:1", &TlsConfig::default(), t).unwrap();
        assert_eq!(ipv6.uri().host(), Some("[::1]"));
        assert_eq!(
            ipv6.shared.target.host(),
            "::1",
            "connected to without brackets"
        );
        let tls_name = ipv6
            .shared
            .target
            .tls
            .as_ref()
            .map(|t| t.server_name.to_str());
        assert_eq!(tls_name.as_deref(), Some("::1"));
        let default_port =
            GrpcChannel::lazy("https://localhost", &TlsConfig::default(), t).unwrap();
        assert_eq!(default_port.shared.target.port(), 443);
        assert_eq!(plain.shared.target.port(), 1);
        assert!(plain.shared.target.tls.is_none());
        let e = GrpcChannel::lazy("ftp://localhost:1", &TlsConfig::default(), t).unwrap_err();
        assert!(e.to_string().contains("scheme"), "{e}");
        let e = GrpcChannel::lazy("http://", &TlsConfig::default(), t).unwrap_err();
        assert!(e.to_string().contains("address"), "{e}");
    }

    #[tokio::test]
    async fn calls_waiting_for_one_connection_attempt_share_its_failure() {
        // A TCP listener that never speaks: the TLS handshake hangs until
        // the connect timeout.
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
        let calls = (0..8).map(|_| {
            let mut channel = channel.clone();
            async move {
                let request = http::Request::builder()
                    .uri("/x.Y/Z")
                    .body(Body::empty())
                    .expect("request");
                tower_service::Service::call(&mut channel, request).await
            }
        });
        let results = futures::future::join_all(calls).await;
        let elapsed = started.elapsed();
        for result in results {
            let error = result.expect_err("the server never answers");
            assert!(error.is::<tonic::ConnectError>(), "{error:?}");
            assert!(error.to_string().contains("timed out"), "{error}");
            let status = tonic::Status::from_error(error);
            assert_eq!(status.code(), tonic::Code::Unavailable, "{status:?}");
        }
        assert_eq!(
            channel.shared.state().attempts,
            1,
            "one attempt for 8 calls"
        );
        assert!(
            elapsed < connect_timeout * 3,
            "8 queued calls took {elapsed:?}: one connect timeout each?"
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

    /// An HTTP/2 server on a free port that replies as `script` says;
    /// counts the connections it accepted.
    async fn scripted_server(script: Script) -> (String, Arc<std::sync::atomic::AtomicUsize>) {
        use std::sync::atomic::{AtomicUsize, Ordering};
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = format!("http://{}", listener.local_addr().unwrap());
        let accepted = Arc::new(AtomicUsize::new(0));
        let counter = accepted.clone();
        tokio::spawn(async move {
            while let Ok((tcp, _)) = listener.accept().await {
                counter.fetch_add(1, Ordering::SeqCst);
                let (replied, on_reply) = tokio::sync::mpsc::unbounded_channel::<()>();
                let service = hyper::service::service_fn(move |_request| {
                    let _ = replied.send(());
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
        (addr, accepted)
    }

    fn health_client(
        channel: &GrpcChannel,
    ) -> tonic_health::pb::health_client::HealthClient<GrpcChannel> {
        tonic_health::pb::health_client::HealthClient::new(channel.clone())
    }

    fn check(timeout: Duration) -> tonic::Request<tonic_health::pb::HealthCheckRequest> {
        let mut request = tonic::Request::new(tonic_health::pb::HealthCheckRequest::default());
        request.set_timeout(timeout);
        request
    }

    #[tokio::test]
    async fn the_deadline_covers_the_reply_body_and_retires_the_connection() {
        use std::sync::atomic::Ordering;
        let (addr, accepted) = scripted_server(Script::StallAfterHeaders).await;
        let channel =
            GrpcChannel::lazy(&addr, &TlsConfig::default(), Duration::from_secs(2)).unwrap();
        let timeout = Duration::from_millis(300);
        for call in 1..=2 {
            let started = std::time::Instant::now();
            let outcome = tokio::time::timeout(
                Duration::from_secs(10),
                health_client(&channel).check(check(timeout)),
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
                accepted.load(Ordering::SeqCst),
                call,
                "each timed-out call retires its connection: the next one opens a new one"
            );
        }
    }

    #[tokio::test]
    async fn connections_closed_gracefully_under_traffic_fail_no_call() {
        use std::sync::atomic::Ordering;
        let (addr, accepted) = scripted_server(Script::OneReplyThenGoAway).await;
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
                        .check(check(Duration::from_secs(5)))
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
        let connections = accepted.load(Ordering::SeqCst);
        assert!(
            connections >= 5,
            "the server closed its connections again and again under traffic: {connections}"
        );
    }
}
