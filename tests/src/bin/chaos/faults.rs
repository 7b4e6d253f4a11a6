//! The participants' fault injection as the soak uses it: the `FAULT_*`
//! environment that turns it on at start, `SetFaults` that turns it off for
//! the settle phase, and `GetFaults` counters summed over every life of a
//! participant (a SIGKILL loses the counters of the life it ends, so they
//! are read just before).

use crate::args::Args;
use crate::cluster::channel;
use saga_proto::faults::v1 as faults;
use saga_proto::faults::v1::fault_service_client::FaultServiceClient;
use std::net::SocketAddr;
use std::time::Duration;

/// Injected-fault counters of one participant (summed over its lives).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct FaultCounts {
    pub transient_errors: u64,
    pub dropped_replies: u64,
    pub refusals: u64,
    pub delayed_calls: u64,
}

impl FaultCounts {
    /// Adds one reading of `GetFaults`.
    pub fn add(&mut self, s: &faults::FaultStatus) {
        self.transient_errors += s.transient_errors;
        self.dropped_replies += s.dropped_replies;
        self.refusals += s.refusals;
        self.delayed_calls += s.delayed_calls;
    }

    /// The sum of two counts.
    pub fn plus(self, o: FaultCounts) -> FaultCounts {
        FaultCounts {
            transient_errors: self.transient_errors + o.transient_errors,
            dropped_replies: self.dropped_replies + o.dropped_replies,
            refusals: self.refusals + o.refusals,
            delayed_calls: self.delayed_calls + o.delayed_calls,
        }
    }
}

/// The environment that makes a participant inject the faults `args` ask
/// for from its first call.
pub fn injection_env(args: &Args) -> Vec<(String, String)> {
    [
        ("FAULT_TRANSIENT_RATE", args.transient_rate.to_string()),
        ("FAULT_DROP_REPLY_RATE", args.drop_reply_rate.to_string()),
        ("FAULT_REFUSAL_RATE", args.refusal_rate.to_string()),
        ("FAULT_LATENCY_MS", args.latency_ms.to_string()),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_owned(), v))
    .collect()
}

/// A participant's fault counters right now (None if it does not answer).
pub async fn read(addr: SocketAddr) -> Option<faults::FaultStatus> {
    for _ in 0..10 {
        let mut c = FaultServiceClient::new(channel(addr, Duration::from_secs(2)));
        if let Ok(r) = c.get_faults(faults::GetFaultsRequest {}).await {
            return Some(r.into_inner());
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    None
}

/// Turns every fault off (keeping `seed`); false if the participant never
/// accepted it.
pub async fn turn_off(addr: SocketAddr, seed: u64) -> bool {
    set(
        addr,
        faults::FaultSettings {
            seed,
            ..Default::default()
        },
    )
    .await
}

/// Keeps the faults `args` ask for except the injected refusals (the
/// contention phase: a refusal must be the race's own); false if the
/// participant never accepted it.
pub async fn without_refusals(addr: SocketAddr, args: &Args, seed: u64) -> bool {
    set(
        addr,
        faults::FaultSettings {
            transient_error_rate: args.transient_rate,
            added_latency_ms: args.latency_ms,
            drop_reply_rate: args.drop_reply_rate,
            refusal_rate: 0.0,
            seed,
        },
    )
    .await
}

async fn set(addr: SocketAddr, settings: faults::FaultSettings) -> bool {
    for _ in 0..20 {
        let mut c = FaultServiceClient::new(channel(addr, Duration::from_secs(2)));
        if c.set_faults(settings).await.is_ok() {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    false
}
