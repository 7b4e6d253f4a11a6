//! A minimal HTTP/1.1 GET for the tests that read the console's JSON API
//! or a Prometheus endpoint: one request per connection, the whole answer
//! read until the server closes it (de-chunked when it is chunked). No
//! client crate: the tests need nothing more, and a plain socket shows
//! exactly what was sent.

use std::fmt::Display;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// `GET http://<addr><path>` over a fresh connection: the status code and
/// the body (de-chunked when the reply is chunked). Panics (failing the
/// test) when the server cannot be reached, takes over 10 s, or answers
/// something that is not HTTP.
pub async fn get(addr: impl Display, path: &str) -> (u16, String) {
    request(addr, "GET", path, &[]).await
}

/// `method` on `http://<addr><path>` with `headers` beside the usual ones
/// (a `Host` among them replaces the address), as [`get`] does.
pub async fn request(
    addr: impl Display,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
) -> (u16, String) {
    let addr = addr.to_string();
    let mut stream = TcpStream::connect(&addr)
        .await
        .unwrap_or_else(|e| panic!("connect to {addr}: {e}"));
    let mut request = format!("{method} {path} HTTP/1.1\r\n");
    if !headers.iter().any(|(n, _)| n.eq_ignore_ascii_case("host")) {
        request.push_str(&format!("Host: {addr}\r\n"));
    }
    for (name, value) in headers {
        request.push_str(&format!("{name}: {value}\r\n"));
    }
    request.push_str("Content-Length: 0\r\nConnection: close\r\n\r\n");
    stream
        .write_all(request.as_bytes())
        .await
        .expect("send request");
    let mut raw = Vec::new();
    tokio::time::timeout(Duration::from_secs(10), stream.read_to_end(&mut raw))
        .await
        .unwrap_or_else(|_| panic!("{addr} answers {path} within 10 s"))
        .expect("read reply");
    let raw = String::from_utf8(raw).expect("UTF-8 reply");
    let (head, body) = raw
        .split_once("\r\n\r\n")
        .unwrap_or_else(|| panic!("no header end in {raw:?}"));
    let mut head_lines = head.split("\r\n");
    let status_line = head_lines.next().unwrap_or_default();
    let status: u16 = status_line
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("bad status line {status_line:?}"));
    let chunked = head_lines.any(|h| {
        let (name, value) = h.split_once(':').unwrap_or((h, ""));
        name.trim().eq_ignore_ascii_case("transfer-encoding")
            && value.to_ascii_lowercase().contains("chunked")
    });
    let body = if chunked {
        dechunk(body)
    } else {
        body.to_owned()
    };
    (status, body)
}

fn dechunk(mut body: &str) -> String {
    let mut out = String::new();
    loop {
        let (size_line, rest) = body.split_once("\r\n").expect("chunk size line");
        let size_hex = size_line.split(';').next().unwrap_or_default().trim();
        let size = usize::from_str_radix(size_hex, 16).expect("hex chunk size");
        if size == 0 {
            return out;
        }
        out.push_str(&rest[..size]);
        body = rest[size..].strip_prefix("\r\n").expect("CRLF after chunk");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_chunked_body_is_joined() {
        assert_eq!(dechunk("3\r\nabc\r\n2;x=y\r\nde\r\n0\r\n\r\n"), "abcde");
    }
}
