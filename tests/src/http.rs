//! Requests without a body over plain HTTP for the tests and tools that
//! read the console's JSON API or a Prometheus endpoint, or drive the fake
//! media store's admin routes: hyper-util's client, the one
//! fantoccini and the services' own stack already build, so no HTTP crate
//! is added for it.
//!
//! A test that needs the exact bytes on the wire (a forged `Host` header,
//! a stream held open) writes them over a socket itself: see
//! `tests/suite/console_hosts.rs`.

use http_body_util::{BodyExt, Empty};
use hyper::body::Bytes;
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use std::fmt::Display;
use std::time::Duration;

/// How long one GET may take, connection and body included.
pub const PATIENCE: Duration = Duration::from_secs(10);

/// `GET http://<addr><path>`: the status code and the body, or why there
/// is none (no connection, no answer within [`PATIENCE`], a body that is
/// not UTF-8).
pub async fn get(addr: impl Display, path: &str) -> Result<(u16, String), String> {
    request(hyper::Method::GET, addr, path).await
}

/// `method http://<addr><path>` without a body: the status code and the
/// body, or why there is none, as [`get`].
pub async fn request(
    method: hyper::Method,
    addr: impl Display,
    path: &str,
) -> Result<(u16, String), String> {
    let url = format!("http://{addr}{path}");
    let request = hyper::Request::builder()
        .method(method.clone())
        .uri(&url)
        .body(Empty::<Bytes>::new())
        .map_err(|e| format!("{method} {url}: {e}"))?;
    // One client per request: a pooled connection would belong to the
    // runtime of the test that opened it.
    let client = Client::builder(TokioExecutor::new()).build_http::<Empty<Bytes>>();
    let exchange = async {
        let reply = client
            .request(request)
            .await
            .map_err(|e| format!("{method} {url}: {e}"))?;
        let status = reply.status().as_u16();
        let body = reply
            .into_body()
            .collect()
            .await
            .map_err(|e| format!("{method} {url}: reading the body: {e}"))?
            .to_bytes();
        let body = String::from_utf8(body.to_vec())
            .map_err(|e| format!("{method} {url}: the body is not UTF-8: {e}"))?;
        Ok((status, body))
    };
    tokio::time::timeout(PATIENCE, exchange)
        .await
        .map_err(|_| format!("{method} {url}: no answer within {PATIENCE:?}"))?
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_closed_port_is_an_error_naming_the_url() {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .expect("a free port")
            .port();
        let error = get(format!("127.0.0.1:{port}"), "/metrics")
            .await
            .expect_err("nothing listens there");
        assert!(
            error.contains(&format!("http://127.0.0.1:{port}/metrics")),
            "{error}"
        );
    }
}
