//! participant-check — the conformance kit of the participant protocol
//! (`docs/participant-protocol.md`).
//!
//! It drives any participant of the generic step contract black-box, over
//! gRPC only (`participant.v1.SagaStepService` and
//! `OperationHistoryService.ListOperations`), through every rule of the
//! protocol's barrier table — first call, repeat, other parameters,
//! compensation after and before the action, late action, concurrent
//! duplicates, an action racing its compensation, the listing, the token —
//! and says for each rule whether the participant keeps it. It does not
//! trust replies alone: wherever the records can tell, it reads them back.
//!
//! Module map:
//! - [`target`]: the participant, reached at an address, and the calls
//!   (fresh request ids `<uuid v7>:<step>`, token, deadline, the retries
//!   the protocol allows);
//! - [`order`]: the orders sent (`--order`, `--refused-order` JSON);
//! - [`expect`]: what an answer and the records must be, each failure one
//!   line;
//! - [`rules`]: the rules by name, and [`check`], which runs them all.
//!
//! The `participant-check` binary prints one line per rule (`PASS <rule>`,
//! `FAIL <rule>: <why>`, `SKIP <rule>: <why>`) and `N passed, M failed`.

#![warn(missing_docs)]

pub mod expect;
pub mod order;
pub mod rules;
pub mod target;

pub use order::OrderSpec;
pub use rules::{Outcome, Report, Verdict, check};
pub use target::{Settings, Target};

/// Connects to the participant `settings` names and runs every rule,
/// handing each verdict to `each` as it is known.
pub async fn run(
    settings: Settings,
    each: impl FnMut(&Outcome),
) -> Result<Report, target::ConnectError> {
    let target = Target::connect(settings).await?;
    Ok(check(&target, each).await)
}
