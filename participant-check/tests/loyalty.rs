//! loyalty-svc, the Rust participant of the generic contract, keeps every
//! rule of the protocol: on the embedded store, with and without a service
//! token, and on MongoDB (SecantusDB unless `MONGODB_URI` names a real
//! one). Its points say the same as its records.

mod support;

use loyalty_svc::rules::POINTS;
use support::{check, loyalty, settings};

const TOKEN: &str = "loyalty-token";
/// Orders the rules leave applied (see the first test).
const APPLIED_ORDERS: i64 = 5 + 8 + 1 + 2 + 4;

#[tokio::test]
async fn loyalty_on_the_embedded_store_passes_every_rule() {
    let served = loyalty::embedded(Some(TOKEN)).await;
    let report = check(settings(served.addr, Some(TOKEN))).await;
    support::assert_all_pass(&report);
    // What stayed applied is what the records say stayed applied: every
    // rule's Acts were undone except those of first-act-applies,
    // repeat-act-replays, changed-parameters-refused,
    // concurrent-acts-one-effect and token-required (five orders) and of
    // the batch rules batch-results-in-order (8), batch-duplicates-apply-once
    // (1), batch-refusal-is-the-calls-own (2) and batch-retried-replays (4):
    // twenty orders of 25 points.
    let points = served
        .store
        .counter(POINTS, "participant-check".into())
        .await
        .expect("read points");
    assert_eq!(points, Some(APPLIED_ORDERS * 25));
    let blocked = served
        .store
        .counter(POINTS, support::BLOCKED.into())
        .await
        .expect("read points");
    assert_eq!(blocked, None);
}

#[tokio::test]
async fn loyalty_without_a_token_skips_only_token_required() {
    let served = loyalty::embedded(None).await;
    let report = check(settings(served.addr, None)).await;
    assert_eq!(report.failed(), 0, "{report}");
    assert!(
        matches!(
            report.verdict("token-required"),
            Some(participant_check::Verdict::Skip(_))
        ),
        "{report}"
    );
}

#[tokio::test]
async fn loyalty_on_mongodb_passes_every_rule() {
    let Some(served) = loyalty::mongo(Some(TOKEN)).await else {
        return;
    };
    let report = check(settings(served.addr, Some(TOKEN))).await;
    support::assert_all_pass(&report);
    let points = served
        .store
        .counter(POINTS, "participant-check".into())
        .await
        .expect("read points");
    assert_eq!(points, Some(APPLIED_ORDERS * 25));
}
