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
//!   is enforced here too: the call fails with `TimeoutExpired`, which tonic
//!   turns into `CANCELLED`, as its own channel does. The connect timeout
//!   comes on top of it (it bounds the wait for a connection).
//! - **TLS** as [`crate::tls::client_endpoint`] decides it (`https://`, or
//!   any address once `--tls-ca` is set), with ALPN `h2`.
//!
//! And one thing it adds: HTTP/2 keep-alive pings (every
//! [`KEEP_ALIVE_INTERVAL`], also idle), so a connection whose peer vanished
//! without closing it is noticed and replaced instead of timing out every
//! call sent on it.

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
    Pin<Box<dyn Future<Output = Result<http::Response<Incoming>, BoxError>> + Send + 'static>>;

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
    sender: Option<SendRequest<Body>>,
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
    type Response = http::Response<Incoming>;
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
            let deadline = grpc_timeout(&head.headers);
            let mut uri = http::uri::Parts::from(std::mem::take(&mut head.uri));
            uri.scheme = shared.target.uri.scheme().cloned();
            uri.authority = shared.target.uri.authority().cloned();
            head.uri = http::Uri::from_parts(uri)?;
            let request = http::Request::from_parts(head, body);
            let mut sender = shared.sender().await?;
            let call = async move {
                sender.ready().await?;
                Ok::<_, BoxError>(sender.send_request(request).await?)
            };
            match deadline {
                Some(deadline) => tokio::time::timeout(deadline, call)
                    .await
                    .unwrap_or_else(|_| Err(tonic::TimeoutExpired(()).into())),
                None => call.await,
            }
        })
    }
}

impl Shared {
    fn state(&self) -> MutexGuard<'_, State> {
        // A panic while holding this lock cannot leave `State` half
        // written (every write is one assignment), so a poisoned lock is
        // still consistent.
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The open connection's sender, connecting first if there is none.
    async fn sender(&self) -> Result<SendRequest<Body>, BoxError> {
        let attempts_seen = {
            let state = self.state();
            if let Some(sender) = state.sender.as_ref().filter(|s| !s.is_closed()) {
                return Ok(sender.clone());
            }
            state.attempts
        };
        let _one_attempt = self.connecting.lock().await;
        {
            let state = self.state();
            if let Some(sender) = state.sender.as_ref().filter(|s| !s.is_closed()) {
                return Ok(sender.clone());
            }
            if state.attempts != attempts_seen {
                // An attempt ran while this call waited, and failed: its
                // answer is this call's too.
                let why = state.last_error.clone().unwrap_or_default();
                return Err(tonic::ConnectError(why.into()).into());
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
                state.sender = Some(sender.clone());
                state.last_error = None;
                Ok(sender)
            }
            Err(error) => {
                let why = crate::tls::error_chain(error.as_ref());
                tracing::debug!(uri = %self.target.uri, error = %why, "connection attempt failed");
                state.sender = None;
                state.last_error = Some(why.clone());
                Err(tonic::ConnectError(why.into()).into())
            }
        }
    }

    /// TCP (`TCP_NODELAY`), TLS when configured, the HTTP/2 handshake; the
    /// connection is driven by a task of its own until it closes.
    async fn connect(&self) -> Result<SendRequest<Body>, BoxError> {
        let target = &self.target;
        let tcp = tokio::net::TcpStream::connect((target.host(), target.port())).await?;
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
            None => handshake(tcp).await,
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

/// The call's deadline, from the `grpc-timeout` header.
fn grpc_timeout(headers: &http::HeaderMap) -> Option<Duration> {
    crate::deadline::parse(headers.get(crate::deadline::GRPC_TIMEOUT)?.to_str().ok()?)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_deadline_comes_from_the_grpc_timeout_header() {
        let mut headers = http::HeaderMap::new();
        assert_eq!(grpc_timeout(&headers), None);
        headers.insert(crate::deadline::GRPC_TIMEOUT, "1500m".parse().unwrap());
        assert_eq!(grpc_timeout(&headers), Some(Duration::from_millis(1500)));
    }

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
}
