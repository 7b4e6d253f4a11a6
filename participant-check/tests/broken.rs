//! The kit fails each deliberately broken participant by the name of the
//! rule it breaks, and passes the same participant without the flaw — so
//! each failure is the flaw's, not the kit's.
//!
//! - `a_correct_participant_passes_every_rule`: the reference, no flaw.
//! - `no_dedupe_fails_the_repeat_and_concurrency_rules`: every Act applies.
//! - `undoing_twice_fails_the_compensation_rules`: Compensate undoes every
//!   time and records nothing.
//! - `no_null_compensation_fails_the_compensate_first_rules`: a Compensate
//!   before its Act records nothing, so the late Act applies.
//! - `ignoring_the_token_fails_token_required`.
//! - `check_then_insert_fails_only_under_concurrency`: a read before the
//!   write instead of a unique key, which one call at a time never shows.
//! - `a_batch_without_its_barrier_fails_the_batch_rules`: every call of a
//!   batch applies, however often it comes; single calls are right.
//! - `a_batch_answered_out_of_order_fails_the_batch_rules`.
//! - `a_participant_without_batches_skips_only_the_batch_rules`: batches
//!   are optional.

mod support;

use support::memory::{self, Flaws};
use support::{check, settings};

const TOKEN: &str = "check-token";

/// `rules` failed (each by name), and every rule in `kept` passed.
fn assert_fails(report: &participant_check::Report, rules: &[&str], kept: &[&str]) {
    let failed = report.failed_rules();
    for rule in rules {
        assert!(failed.contains(rule), "{rule} should fail:\n{report}");
    }
    for rule in kept {
        assert_eq!(
            report.verdict(rule),
            Some(&participant_check::Verdict::Pass),
            "{rule} should pass:\n{report}"
        );
    }
}

#[tokio::test]
async fn a_correct_participant_passes_every_rule() {
    let served = memory::serve(Flaws::default(), Some(TOKEN)).await;
    let report = check(settings(served.addr, Some(TOKEN))).await;
    support::assert_all_pass(&report);
}

#[tokio::test]
async fn no_dedupe_fails_the_repeat_and_concurrency_rules() {
    let flaws = Flaws {
        no_dedupe: true,
        ..Flaws::default()
    };
    let served = memory::serve(flaws, None).await;
    let report = check(settings(served.addr, None)).await;
    assert_fails(
        &report,
        &[
            "repeat-act-replays",
            "refusal-replays",
            "act-after-undo-refused",
            "late-act-refused",
            "concurrent-acts-one-effect",
        ],
        &["first-act-applies", "compensate-undoes-once"],
    );
    // The failures are real double effects: each Act of the concurrency
    // rule added points again.
    assert!(served.points("participant-check") > 25 * 50, "{report}");
}

#[tokio::test]
async fn undoing_twice_fails_the_compensation_rules() {
    let flaws = Flaws {
        undoes_twice: true,
        ..Flaws::default()
    };
    let served = memory::serve(flaws, None).await;
    let report = check(settings(served.addr, None)).await;
    assert_fails(
        &report,
        &[
            "compensate-undoes-once",
            "repeat-compensate-replays",
            "concurrent-compensates-one-undo",
        ],
        &[
            "first-act-applies",
            "repeat-act-replays",
            "compensate-before-act-null",
        ],
    );
}

#[tokio::test]
async fn no_null_compensation_fails_the_compensate_first_rules() {
    let flaws = Flaws {
        no_null_compensation: true,
        ..Flaws::default()
    };
    let served = memory::serve(flaws, None).await;
    let report = check(settings(served.addr, None)).await;
    assert_fails(
        &report,
        &["compensate-before-act-null", "late-act-refused"],
        &[
            "first-act-applies",
            "repeat-act-replays",
            "compensate-undoes-once",
            "repeat-compensate-replays",
        ],
    );
    // The race rule fails whenever a Compensate got there first in one of
    // its 25 races; the Act then applied after its compensation.
    if let Some(participant_check::Verdict::Fail(why)) =
        report.verdict("act-races-compensate-consistent")
    {
        assert!(why.starts_with("race "), "{why}");
    }
}

#[tokio::test]
async fn ignoring_the_token_fails_token_required() {
    let flaws = Flaws {
        ignores_token: true,
        ..Flaws::default()
    };
    let served = memory::serve(flaws, Some(TOKEN)).await;
    let report = check(settings(served.addr, Some(TOKEN))).await;
    assert_eq!(
        report.failed_rules(),
        ["token-required", "batch-token-required"],
        "{report}"
    );
}

#[tokio::test]
async fn check_then_insert_fails_only_under_concurrency() {
    let flaws = Flaws {
        check_then_insert: true,
        ..Flaws::default()
    };
    let served = memory::serve(flaws, None).await;
    let report = check(settings(served.addr, None)).await;
    assert_fails(
        &report,
        &[
            "concurrent-acts-one-effect",
            "concurrent-compensates-one-undo",
        ],
        &[
            "first-act-applies",
            "repeat-act-replays",
            "changed-parameters-refused",
            "refusal-replays",
            "compensate-undoes-once",
            "repeat-compensate-replays",
            "act-after-undo-refused",
            "compensate-refused-nothing-to-undo",
            "compensate-before-act-null",
            "late-act-refused",
            "history-lists-records",
        ],
    );
}

#[tokio::test]
async fn a_batch_without_its_barrier_fails_the_batch_rules() {
    let flaws = Flaws {
        batch_no_dedupe: true,
        ..Flaws::default()
    };
    let served = memory::serve(flaws, None).await;
    let report = check(settings(served.addr, None)).await;
    assert_fails(
        &report,
        &["batch-duplicates-apply-once", "batch-retried-replays"],
        &[
            "repeat-act-replays",
            "concurrent-acts-one-effect",
            "batch-results-in-order",
            "batch-refusal-is-the-calls-own",
        ],
    );
}

#[tokio::test]
async fn a_batch_answered_out_of_order_fails_the_batch_rules() {
    let flaws = Flaws {
        batch_reordered: true,
        ..Flaws::default()
    };
    let served = memory::serve(flaws, None).await;
    let report = check(settings(served.addr, None)).await;
    assert_fails(
        &report,
        &[
            "batch-results-in-order",
            "batch-refusal-is-the-calls-own",
            "batch-compensates",
        ],
        &["repeat-act-replays", "compensate-undoes-once"],
    );
}

#[tokio::test]
async fn a_participant_without_batches_skips_only_the_batch_rules() {
    let flaws = Flaws {
        no_batches: true,
        ..Flaws::default()
    };
    let served = memory::serve(flaws, Some(TOKEN)).await;
    let report = check(settings(served.addr, Some(TOKEN))).await;
    assert_eq!(report.failed(), 0, "{report}");
    for outcome in &report.outcomes {
        let skipped = matches!(outcome.verdict, participant_check::Verdict::Skip(_));
        assert_eq!(
            skipped,
            outcome.rule.starts_with("batch-"),
            "{}: {report}",
            outcome.rule
        );
    }
}
