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

/// The loyalty steps of a saga of `steps` steps, as the load generator and
/// the chaos soak run it: every step after payment and inventory is one
/// served by loyalty-svc — [`STEP`], then `loyalty-2`, `loyalty-3` — each
/// its own name, so its own request ids (`<saga_id>:<step>`) and records.
pub fn steps_after_the_built_ins(steps: u8) -> Vec<String> {
    (1..=steps.saturating_sub(2))
        .map(|k| match k {
            1 => STEP.to_owned(),
            k => format!("{STEP}-{k}"),
        })
        .collect()
}

/// The steps file of such a saga: payment and inventory as
/// [`orchestrator::steps_file::DEFAULT_STEPS`] has them, then each of
/// [`steps_after_the_built_ins`] at loyalty-svc's `address` (a URL).
pub fn steps_file_text(steps: u8, address: &str) -> String {
    let mut text = orchestrator::steps_file::DEFAULT_STEPS.to_owned();
    for name in steps_after_the_built_ins(steps) {
        text.push_str(&format!(
            "\n[[steps]]\nname = \"{name}\"\naddress = \"{address}\"\n\
             action = \"award_points\"\ncompensation = \"revoke_points\"\n"
        ));
    }
    text
}

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
