//! The console answers only to hosts it knows (no DNS rebinding: a page
//! elsewhere pointing its own name at the console is refused), lets a
//! configured proxy name retry, caps the sagas followed live at once, and
//! answers even the requests it cannot read as JSON errors.
//!
//! Plain HTTP written over a socket, not through `saga_tests::http`: a
//! forged `Host` header (what a DNS-rebinding page sends) is the behaviour
//! under test, and an HTTP client sets that header itself; so every header
//! here is exactly what is sent.

use orchestrator::console::ConsoleSettings;
use orchestrator::console::hosts::AllowedHosts;
use saga_tests::{Stack, start_order};
use std::net::SocketAddr;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// `method path` over a fresh connection with exactly `headers` (a `Host`
/// among them replaces the address): the status code and the body. The
/// console sends every reply but an event stream with a `Content-Length`,
/// so the body is all that follows the head.
async fn request(
    addr: SocketAddr,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
) -> (u16, String) {
    let mut stream = TcpStream::connect(addr).await.expect("connect");
    let mut request = format!("{method} {path} HTTP/1.1\r\n");
    if !headers.iter().any(|(n, _)| n.eq_ignore_ascii_case("host")) {
        request.push_str(&format!("Host: {addr}\r\n"));
    }
    for (name, value) in headers {
        request.push_str(&format!("{name}: {value}\r\n"));
    }
    request.push_str("Content-Length: 0\r\nConnection: close\r\n\r\n");
    stream.write_all(request.as_bytes()).await.expect("send");
    let mut raw = Vec::new();
    tokio::time::timeout(Duration::from_secs(10), stream.read_to_end(&mut raw))
        .await
        .unwrap_or_else(|_| panic!("{addr} answers {path} within 10 s"))
        .expect("read the reply");
    let raw = String::from_utf8(raw).expect("a UTF-8 reply");
    let (head, body) = raw.split_once("\r\n\r\n").expect("a head and a body");
    assert!(
        !head
            .to_ascii_lowercase()
            .contains("transfer-encoding: chunked"),
        "a chunked reply to {path}: {head}"
    );
    (status(head), body.to_owned())
}

/// The status code of a reply's head.
fn status(head: &str) -> u16 {
    head.split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or_else(|| panic!("no status in {head:?}"))
}

/// A stack whose inventory is down (sagas stay RUNNING, so their event
/// streams stay open) and whose console allows `console.example.com` and
/// at most one live stream.
async fn stack() -> (Stack, saga_tests::Running, SocketAddr) {
    let stack = Stack::with_inventory_down().await;
    let retry = saga_tests::retry_until(Duration::from_secs(600));
    let console = saga_tests::listener("127.0.0.1:0".parse().expect("addr")).await;
    let console_addr = console.local_addr().expect("addr");
    let orchestrator = stack
        .orchestrator_harness()
        .retry(retry)
        .adjust(|settings| {
            settings.console = ConsoleSettings {
                allowed_hosts: AllowedHosts::new(["console.example.com"]),
                max_streams: 1,
            }
        })
        .console(console)
        .start()
        .await;
    (stack, orchestrator, console_addr)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_name_pointed_at_the_console_by_a_page_elsewhere_is_refused() {
    let (stack, orchestrator, console) = stack().await;
    let port = console.port();
    for host in [
        format!("127.0.0.1:{port}"),
        format!("localhost:{port}"),
        format!("[::1]:{port}"),
        "console.example.com".to_owned(),
    ] {
        let (code, body) = request(console, "GET", "/api/sagas", &[("Host", &host)]).await;
        assert_eq!(code, 200, "{host}: {body}");
    }
    for path in ["/api/sagas", "/", "/api/sagas/x/retry"] {
        let method = if path.ends_with("retry") {
            "POST"
        } else {
            "GET"
        };
        let (code, body) = request(
            console,
            method,
            path,
            &[("Host", &format!("evil.example:{port}"))],
        )
        .await;
        assert_eq!(code, 403, "{path}: {body}");
        assert!(
            body.contains("does not answer to the host") && body.contains("evil.example"),
            "{body}"
        );
    }

    // Retry from a page at the configured proxy name passes the origin
    // check (and finds no such saga); from any other origin it does not.
    let proxied = [
        ("Host", "127.0.0.1:8080"),
        ("Origin", "https://console.example.com"),
    ];
    let (code, body) = request(console, "POST", "/api/sagas/nope/retry", &proxied).await;
    assert_eq!(code, 404, "{body}");
    let elsewhere = [("Origin", "https://evil.example")];
    let (code, body) = request(console, "POST", "/api/sagas/nope/retry", &elsewhere).await;
    assert_eq!(code, 403, "{body}");
    orchestrator.stop().await;
    stack.stop().await;
}

/// A query or path the framework cannot read, and a method a path does not
/// take, are answered as every other API error: JSON with a code.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unreadable_requests_are_answered_as_json_errors() {
    let (stack, orchestrator, console) = stack().await;
    for (method, path, status, code) in [
        (
            "GET",
            "/api/sagas?page_size=1&page_size=2",
            400,
            "INVALID_ARGUMENT",
        ),
        ("GET", "/api/sagas/%FF", 400, "INVALID_ARGUMENT"),
        ("GET", "/api/sagas/x/retry", 405, "UNIMPLEMENTED"),
        ("DELETE", "/api/sagas", 405, "UNIMPLEMENTED"),
    ] {
        let (got, body) = request(console, method, path, &[]).await;
        assert_eq!(got, status, "{method} {path}: {body}");
        let error: serde_json::Value = serde_json::from_str(&body)
            .unwrap_or_else(|e| panic!("{method} {path}: not JSON ({e}): {body}"));
        assert_eq!(error["code"], code, "{body}");
        assert!(
            error["message"].as_str().is_some_and(|m| !m.is_empty()),
            "{body}"
        );
    }
    let (_, body) = request(console, "GET", "/api/sagas/x/retry", &[]).await;
    assert!(
        body.contains("does not take GET") && body.contains("POST"),
        "names the method: {body}"
    );
    orchestrator.stop().await;
    stack.stop().await;
}

/// Opens `GET <path>` and returns the status once the head has arrived,
/// with the connection still open (an event stream stays open until the
/// saga ends).
async fn open(addr: SocketAddr, path: &str) -> (u16, TcpStream) {
    let mut stream = TcpStream::connect(addr).await.expect("connect");
    let request = format!("GET {path} HTTP/1.1\r\nHost: {addr}\r\n\r\n");
    stream.write_all(request.as_bytes()).await.expect("send");
    let mut head = Vec::new();
    let mut byte = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") {
        let n = tokio::time::timeout(Duration::from_secs(10), stream.read(&mut byte))
            .await
            .expect("a head within 10 s")
            .expect("read");
        assert_eq!(n, 1, "the connection closed before the head ended");
        head.push(byte[0]);
    }
    (status(&String::from_utf8_lossy(&head)), stream)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sagas_followed_live_are_capped_and_a_closed_stream_frees_its_place() {
    let (stack, orchestrator, console) = stack().await;
    let saga_id = start_order(
        orchestrator.addr,
        "live-1",
        "alice",
        &[("sku-apple", 1, 100)],
    )
    .await;
    let path = format!("/api/sagas/{saga_id}/events");
    let (code, first) = open(console, &path).await;
    assert_eq!(code, 200);
    let (code, body) = request(console, "GET", &path, &[]).await;
    assert_eq!(code, 429, "{body}");
    assert!(body.contains("--console-max-streams"), "{body}");
    // Other requests are not affected.
    assert_eq!(request(console, "GET", "/api/sagas", &[]).await.0, 200);
    drop(first);
    // The server sees the closed stream at its next write (an event or a
    // keep-alive): wait for the place to come back.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    loop {
        let (code, stream) = open(console, &path).await;
        if code == 200 {
            drop(stream);
            break;
        }
        assert_eq!(code, 429);
        assert!(
            tokio::time::Instant::now() < deadline,
            "the closed stream's place never came back"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    orchestrator.stop().await;
    stack.stop().await;
}
