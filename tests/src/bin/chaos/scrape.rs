//! The orchestrators' Prometheus counters the soak needs, read over HTTP
//! from each instance's `/metrics`: before every SIGKILL (a killed life's
//! counters die with it) and once at the end, then summed over lives.

use serde::{Deserialize, Serialize};
use std::net::SocketAddr;
use std::time::Duration;

/// The counters of one orchestrator life (or a sum of lives).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct OrchestratorCounters {
    /// `saga_lease_takeovers_total`: sagas this instance claimed from
    /// another owner whose lease had expired.
    pub takeovers: u64,
    /// `saga_lease_takeovers_of_live_owner_total`: sagas this instance lost
    /// while it was still driving them.
    pub live_owner_takeovers: u64,
    /// `saga_started_total`: sagas this instance created.
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
            started: value("saga_started_total"),
            batches: value("saga_participant_batches_total"),
            batched_calls: value("saga_participant_batched_calls_total"),
        }
    }
}

/// `GET /metrics` from `addr`, parsed; None if it does not answer (a few
/// tries).
pub async fn read(addr: SocketAddr) -> Option<OrchestratorCounters> {
    for _ in 0..10 {
        let reply = tokio::time::timeout(
            Duration::from_secs(2),
            saga_tests::http::get(addr, "/metrics"),
        )
        .await;
        if let Ok(Ok((200, text))) = reply {
            return Some(OrchestratorCounters::parse(&text));
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counters_are_read_from_the_exposition() {
        let text = "# TYPE saga_lease_takeovers_total counter\nsaga_lease_takeovers_total 3\n\
                    saga_lease_takeovers_of_live_owner_total 1\nsaga_started_total 12\n\
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
    }
}
