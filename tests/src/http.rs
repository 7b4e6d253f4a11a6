//! A minimal HTTP/1.1 GET for the tests that read the console's JSON API
//! or a Prometheus endpoint: one request per connection, the whole answer
//! read until the server closes it. No client crate: the tests need nothing
//! more, and a plain socket shows exactly what was sent.

use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// `GET path` from `addr` (`host:port`); the status code and the body.
/// Panics (failing the test) when the server cannot be reached or answers
/// something that is not HTTP.
pub async fn get(addr: &str, path: &str) -> (u16, String) {
    let mut stream = tokio::net::TcpStream::connect(addr)
        .await
        .unwrap_or_else(|e| panic!("connect to {addr}: {e}"));
    let request = format!("GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n");
    stream
        .write_all(request.as_bytes())
        .await
        .expect("send the request");
    let mut response = String::new();
    stream
        .read_to_string(&mut response)
        .await
        .expect("read the response");
    let (head, body) = response
        .split_once("\r\n\r\n")
        .unwrap_or_else(|| panic!("not an HTTP response: {response:?}"));
    let status = head
        .split_whitespace()
        .nth(1)
        .and_then(|code| code.parse().ok())
        .unwrap_or_else(|| panic!("no status in {head:?}"));
    (status, body.to_owned())
}
