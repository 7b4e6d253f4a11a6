//! The orchestrators' Prometheus counters the soak needs, read over HTTP
//! from each instance's `/metrics`: before every SIGKILL (a killed life's
//! counters die with it) and once at the end, then summed over lives.

use serde::{Deserialize, Serialize};
use std::net::SocketAddr;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// The counters of one orchestrator life (or a sum of lives).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct OrchestratorCounters {
    /// `saga_lease_takeovers_total`: sagas this instance claimed from
    /// another owner whose lease had expired.
    pub takeovers: u64,
    /// `saga_lease_takeovers_of_live_owner_total`: sagas this instance lost
    /// while it was still driving them.
    pub live_owner_takeovers: u64,
    /// `sagas_started_total`: sagas this instance created.
    pub started: u64,
    /// `saga_participant_batches_total` (every step): batch RPCs sent.
    #[serde(default)]
    pub batches: u64,
    /// `saga_participant_batched_calls_total` (every step): the calls
    /// those batches carried.
    #[serde(default)]
    pub batched_calls: u64,
}

impl OrchestratorCounters {
    /// The sum of two readings.
    pub fn plus(self, o: OrchestratorCounters) -> OrchestratorCounters {
        OrchestratorCounters {
            takeovers: self.takeovers + o.takeovers,
            live_owner_takeovers: self.live_owner_takeovers + o.live_owner_takeovers,
            started: self.started + o.started,
            batches: self.batches + o.batches,
            batched_calls: self.batched_calls + o.batched_calls,
        }
    }

    /// Reads the counters out of a text exposition (absent ones are 0: a
    /// counter appears once first incremented), summed over their labels.
    pub fn parse(text: &str) -> OrchestratorCounters {
        // Line by line, so that a line the parser refuses is skipped, not
        // the whole scrape.
        let samples: Vec<_> = text
            .lines()
            .filter_map(|line| saga_tests::prometheus::parse_exposition(line).ok())
            .flatten()
            .collect();
        let value = |name: &str| -> u64 {
            samples
                .iter()
                .filter(|s| s.name == name)
                .map(|s| s.value as u64)
                .sum()
        };
        OrchestratorCounters {
            takeovers: value("saga_lease_takeovers_total"),
            live_owner_takeovers: value("saga_lease_takeovers_of_live_owner_total"),
            started: value("sagas_started_total"),
            batches: value("saga_participant_batches_total"),
            batched_calls: value("saga_participant_batched_calls_total"),
        }
    }
}

/// `GET /metrics` from `addr`, parsed; None if it does not answer (a few
/// tries).
pub async fn read(addr: SocketAddr) -> Option<OrchestratorCounters> {
    for _ in 0..10 {
        if let Ok(Ok(Some(text))) =
            tokio::time::timeout(Duration::from_secs(2), get_metrics(addr)).await
        {
            return Some(OrchestratorCounters::parse(&text));
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    None
}

/// One HTTP/1.1 request with `Connection: close`; the body (de-chunked)
/// when the status is 200.
async fn get_metrics(addr: SocketAddr) -> std::io::Result<Option<String>> {
    let mut stream = TcpStream::connect(addr).await?;
    stream
        .write_all(
            format!("GET /metrics HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n")
                .as_bytes(),
        )
        .await?;
    let mut raw = Vec::new();
    stream.read_to_end(&mut raw).await?;
    let raw = String::from_utf8_lossy(&raw);
    let Some((head, body)) = raw.split_once("\r\n\r\n") else {
        return Ok(None);
    };
    if !head.starts_with("HTTP/1.1 200") {
        return Ok(None);
    }
    let chunked = head.lines().any(|l| {
        l.to_ascii_lowercase()
            .starts_with("transfer-encoding: chunked")
    });
    Ok(Some(if chunked {
        dechunk(body)
    } else {
        body.to_owned()
    }))
}

/// The payload of a chunked body (sizes in hex, each chunk and size line
/// ended by CRLF).
fn dechunk(mut body: &str) -> String {
    let mut out = String::new();
    while let Some((size, rest)) = body.split_once("\r\n") {
        let Ok(size) = usize::from_str_radix(size.trim(), 16) else {
            break;
        };
        if size == 0 || rest.len() < size {
            break;
        }
        out.push_str(&rest[..size]);
        body = rest[size..].strip_prefix("\r\n").unwrap_or(&rest[size..]);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counters_are_read_from_the_exposition_and_chunks_are_joined() {
        let text = "# TYPE saga_lease_takeovers_total counter\nsaga_lease_takeovers_total 3\n\
                    saga_lease_takeovers_of_live_owner_total 1\nsagas_started_total 12\n\
                    saga_step_retries_total 9\n\
                    saga_participant_batches_total{step=\"payment\"} 2\n\
                    saga_participant_batches_total{step=\"inventory\"} 3\n\
                    saga_participant_batched_calls_total{step=\"payment\"} 7\n";
        let c = OrchestratorCounters::parse(text);
        assert_eq!(
            c,
            OrchestratorCounters {
                takeovers: 3,
                live_owner_takeovers: 1,
                started: 12,
                batches: 5,
                batched_calls: 7,
            }
        );
        assert_eq!(
            OrchestratorCounters::parse(""),
            OrchestratorCounters::default()
        );
        let chunked = "5\r\nhello\r\n6\r\n world\r\n0\r\n\r\n";
        assert_eq!(dechunk(chunked), "hello world");
    }
}
