//! What the kit's tests serve: participants of the generic contract on
//! ephemeral ports — an in-memory one whose flaws can be switched on one
//! by one ([`memory`]), and loyalty-svc on a real store ([`loyalty`]).

#![allow(dead_code)] // each test file uses part of it

pub mod loyalty;
pub mod memory;

use participant_check::{OrderSpec, Report, Settings};
use std::net::SocketAddr;

/// The customer the test participants refuse.
pub const BLOCKED: &str = "blocked-customer";

/// The order they refuse.
pub fn refused_order() -> OrderSpec {
    OrderSpec::parse(&format!(
        r#"{{"customer_id":"{BLOCKED}","lines":[{{"product_id":"p-1","quantity":1,"unit_price_cents":700}}]}}"#
    ))
    .expect("refused order")
}

/// The kit's settings for a participant at `addr`: the refused order, 50
/// concurrent calls.
pub fn settings(addr: SocketAddr, token: Option<&str>) -> Settings {
    let mut settings = Settings::new(addr.to_string());
    settings.refused_order = Some(refused_order());
    settings.token = token.map(str::to_owned);
    settings
}

/// Runs every rule against `settings`' participant; the report, printed.
pub async fn check(settings: Settings) -> Report {
    let report = participant_check::run(settings, |outcome| eprintln!("{outcome}"))
        .await
        .expect("the participant is reachable");
    eprintln!("{}", report.summary());
    report
}

/// Every rule passed; none was skipped.
pub fn assert_all_pass(report: &Report) {
    assert_eq!(report.failed(), 0, "{report}");
    assert_eq!(
        report.passed(),
        participant_check::rules::all().len(),
        "{report}"
    );
}
