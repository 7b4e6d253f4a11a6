//! MongoDB commands per saga, counted by the services themselves: each
//! service's Prometheus endpoint exposes `mongodb_commands_total{service,
//! command}` (the driver's command monitoring, `mongo-client`), read before
//! and after a measured phase. On a stand-in server the timings say little;
//! the number of commands — round trips to the database — carries over to a
//! real MongoDB.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// The counter's name.
const COUNTER: &str = "mongodb_commands_total";

/// `(service, command)` → commands sent so far.
pub type Counts = BTreeMap<(String, String), f64>;

/// One scrape of every endpoint; an endpoint that does not answer counts
/// nothing (the report then shows fewer commands, not a failure).
pub async fn snapshot(endpoints: &[SocketAddr]) -> Counts {
    let mut counts = Counts::new();
    for addr in endpoints {
        if let Ok(text) = get_metrics(*addr).await {
            for (key, value) in parse(&text) {
                *counts.entry(key).or_default() += value;
            }
        }
    }
    counts
}

/// Commands sent between two snapshots, per service and command.
pub fn delta(before: &Counts, after: &Counts) -> Counts {
    after
        .iter()
        .map(|(k, v)| (k.clone(), v - before.get(k).copied().unwrap_or(0.0)))
        .filter(|(_, v)| *v > 0.0)
        .collect()
}

/// `GET /metrics` over plain HTTP/1.1 (the exporter's listener), the body.
async fn get_metrics(addr: SocketAddr) -> Result<String, String> {
    let fetch = async {
        let mut stream = tokio::net::TcpStream::connect(addr)
            .await
            .map_err(|e| e.to_string())?;
        stream
            .write_all(b"GET /metrics HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n")
            .await
            .map_err(|e| e.to_string())?;
        let mut raw = Vec::new();
        stream
            .read_to_end(&mut raw)
            .await
            .map_err(|e| e.to_string())?;
        let text = String::from_utf8_lossy(&raw).into_owned();
        Ok::<_, String>(match text.split_once("\r\n\r\n") {
            Some((_, body)) => body.to_owned(),
            None => text,
        })
    };
    tokio::time::timeout(Duration::from_secs(5), fetch)
        .await
        .map_err(|_| format!("{addr}: no answer within 5 s"))?
}

/// The counter's samples in a Prometheus text exposition.
fn parse(text: &str) -> Vec<((String, String), f64)> {
    text.lines()
        .filter_map(|line| {
            let rest = line.strip_prefix(COUNTER)?.strip_prefix('{')?;
            let (labels, value) = rest.split_once('}')?;
            let value: f64 = value.trim().parse().ok()?;
            let mut service = String::new();
            let mut command = String::new();
            for pair in labels.split(',') {
                let Some((name, quoted)) = pair.split_once('=') else {
                    continue;
                };
                let unquoted = quoted.trim().trim_matches('"').to_owned();
                match name.trim() {
                    "service" => service = unquoted,
                    "command" => command = unquoted,
                    _ => {}
                }
            }
            Some(((service, command), value))
        })
        .collect()
}

/// Per service: commands per saga in all, and per command kind.
pub fn per_saga(delta: &Counts, sagas: u64) -> BTreeMap<String, (f64, BTreeMap<String, f64>)> {
    let n = sagas.max(1) as f64;
    let mut out: BTreeMap<String, (f64, BTreeMap<String, f64>)> = BTreeMap::new();
    for ((service, command), v) in delta {
        let entry = out.entry(service.clone()).or_default();
        entry.0 += v / n;
        *entry.1.entry(command.clone()).or_default() += v / n;
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_the_counter_whatever_the_label_order() {
        let text = "# TYPE mongodb_commands_total counter\n\
            mongodb_commands_total{service=\"payment\",command=\"insert\"} 12\n\
            mongodb_commands_total{command=\"commitTransaction\",service=\"payment\"} 4\n\
            other_total{service=\"payment\"} 9\n";
        let parsed = parse(text);
        assert_eq!(
            parsed,
            vec![
                (("payment".into(), "insert".into()), 12.0),
                (("payment".into(), "commitTransaction".into()), 4.0)
            ]
        );
        let before: Counts = [(("payment".to_owned(), "insert".to_owned()), 2.0)].into();
        let after: Counts = parsed.into_iter().collect();
        let d = delta(&before, &after);
        let per = per_saga(&d, 2);
        assert_eq!(per["payment"].0, 7.0);
        assert_eq!(per["payment"].1["insert"], 5.0);
    }
}
