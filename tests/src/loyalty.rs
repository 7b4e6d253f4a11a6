//! loyalty-svc (`examples/loyalty-svc`), the Rust participant of the
//! generic step contract, started in-process like the built-in
//! participants: so a generic step is covered end to end by `cargo test`
//! even where Node.js is missing, on both storage backends.

use crate::{Running, Storage, harness};
use loyalty_svc::rules::{LoyaltyRules, POINTS};
use participant_kit::faults::Faults;
use participant_kit::step::RulesStore;
use participant_kit::{HistoryRetention, Kit};
use service_kit::server::ServeOptions;
use std::net::SocketAddr;
use std::sync::Arc;

/// The step's name in the saga (loyalty-svc's `saga-steps.toml`).
pub const STEP: &str = "loyalty";

/// A running loyalty-svc and its store, to read the points it keeps.
pub struct Loyalty {
    /// The service.
    pub running: Running,
    /// Its store.
    pub store: Arc<dyn RulesStore>,
}

impl Loyalty {
    /// loyalty-svc over its store in `storage` (see [`Storage`]) on a free
    /// port, refusing the customers in `blocked`, with open serve options
    /// and no faults.
    pub async fn start(storage: &Storage, blocked: &[&str]) -> Loyalty {
        let rules = LoyaltyRules::new(blocked.iter().map(|c| (*c).to_owned()));
        let kit = Kit::new(Arc::new(Faults::disabled()), ServeOptions::default())
            .with_history(HistoryRetention::default());
        let store = storage.loyalty(kit.history().keep, rules).await;
        let listener = harness::listener(harness::any_port()).await;
        let addr = listener.local_addr().expect("local addr");
        let served = store.clone();
        let running = Running::spawn(addr, |stop| {
            participant_kit::step::serve(served, kit, "loyalty-svc", listener, stop)
        });
        Loyalty { running, store }
    }

    /// Where it listens.
    pub fn addr(&self) -> SocketAddr {
        self.running.addr
    }

    /// The steps file entry of its step: `loyalty`, `award_points` /
    /// `revoke_points`, at its address.
    pub fn step(&self) -> orchestrator::steps_file::StepSpec {
        crate::generic_step(STEP, self.addr(), Some(("award_points", "revoke_points")))
    }

    /// The points `customer` holds (`None`: never awarded any).
    pub async fn points(&self, customer: &str) -> Option<i64> {
        self.store
            .counter(POINTS, customer.to_owned())
            .await
            .expect("read points")
    }

    /// Stops it.
    pub async fn stop(self) {
        self.running.stop().await;
    }
}
