//! The media-upload example (`examples/media-upload`, a step on
//! `@saga/participant` whose effect is an HTTP upload to an external media
//! store) keeps every rule of the kit it can be asked to, batches
//! included, with a service token: the participant run as in production
//! (`node src/main.js`, configured by its environment, ready when it prints
//! `READY <port>`) on a fresh database of the MongoDB test target, uploading
//! to the fake media store run as a process of its own (`node
//! src/store-main.js`; `saga_tests::media_upload`). It refuses nothing, so
//! the three rules that need a refused order are skipped, and only they.
//! Afterwards the store holds exactly the objects of the orders the rules
//! left applied, each created once.
//!
//! The example must be installed first (the test command's examples build
//! stage, `scripts/test-examples.sh --build-only`, does it); without it the
//! test skips with a printed reason, or fails under `CI=true` or
//! `REQUIRE_EXAMPLES=1`. Both processes are SIGKILLed when this process
//! dies and stopped by pid (SIGTERM, then SIGKILL) when the test ends, also
//! on failure.

mod support;

use participant_check::{OrderSpec, Settings, Verdict};
use saga_tests::media_upload::{MediaApp, MediaConfig, MediaProcess, MediaStore, STEP};
use std::collections::BTreeMap;

const TOKEN: &str = "media-upload-token";

/// The rules that need `--refused-order`: media-upload refuses no order.
const REFUSAL_RULES: [&str; 3] = [
    "refusal-replays",
    "compensate-refused-nothing-to-undo",
    "batch-refusal-is-the-calls-own",
];

/// Orders the rules leave applied without a refused order:
/// first-act-applies, repeat-act-replays, changed-parameters-refused,
/// concurrent-acts-one-effect and token-required (one each),
/// batch-results-in-order (8), batch-duplicates-apply-once (1) and
/// batch-retried-replays (4). Every other rule's Acts were undone,
/// refused or never applied.
const APPLIED_ORDERS: usize = 5 + 8 + 1 + 4;

/// Lines of the order the kit sends: each one object.
const LINES: usize = 2;

#[tokio::test]
async fn the_media_upload_example_passes_every_rule_it_can() {
    let Some(app) = MediaApp::find() else {
        return;
    };
    let Some(target) = saga_tests::backends::mongo() else {
        return;
    };
    let store = MediaStore::start(&app)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let mut config = MediaConfig::new(&target.uri, &store);
    config.service_token = Some(TOKEN.to_owned());
    let media = MediaProcess::start(&app, config)
        .await
        .unwrap_or_else(|e| panic!("{e}"));

    let mut settings = Settings::new(media.addr().to_string());
    settings.step = STEP.into();
    settings.token = Some(TOKEN.into());
    settings.order = OrderSpec::parse(
        r#"{"customer_id":"c","lines":[{"product_id":"photo-1","quantity":1,"unit_price_cents":100},{"product_id":"photo-2","quantity":2,"unit_price_cents":300}]}"#,
    )
    .expect("order");
    let report = support::check(settings).await;
    if report.failed() > 0 {
        eprintln!(
            "media-upload's last log lines:\n{}\nthe media store's:\n{}",
            media.log_tail(),
            store.log_tail()
        );
    }
    assert_eq!(report.failed(), 0, "{report}");
    for rule in REFUSAL_RULES {
        assert!(
            matches!(report.verdict(rule), Some(Verdict::Skip(_))),
            "{rule}: {report}"
        );
    }
    assert_eq!(
        report.passed(),
        participant_check::rules::all().len() - REFUSAL_RULES.len(),
        "{report}"
    );

    // The store holds the objects of the applied orders only — each order
    // all its lines, under its own request id, whose records say applied
    // and never undone — and no object was ever uploaded twice (an Act
    // running again after its compensation would).
    let state = store.state().await;
    assert!(state.created.values().all(|n| *n == 1), "{state:?}");
    let mut by_request: BTreeMap<String, Vec<usize>> = BTreeMap::new();
    for object in &state.objects {
        let upload = object.upload();
        by_request
            .entry(upload.request_id)
            .or_default()
            .push(upload.line_index);
    }
    assert_eq!(by_request.len(), APPLIED_ORDERS, "{by_request:?}");
    for (request_id, mut lines) in by_request {
        lines.sort_unstable();
        assert_eq!(lines, (0..LINES).collect::<Vec<_>>(), "{request_id}");
        let records = media.records(&request_id).await;
        let kinds: Vec<(&str, &str)> = records
            .iter()
            .map(|r| (r.kind.as_str(), r.status.as_str()))
            .collect();
        assert_eq!(kinds, [("act", "applied")], "{request_id}");
    }
    assert_eq!(
        state.counts.created - state.counts.deleted,
        (APPLIED_ORDERS * LINES) as u64,
        "{state:?}"
    );
    drop(media);
    drop(store);
}
