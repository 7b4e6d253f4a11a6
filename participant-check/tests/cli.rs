//! The `participant-check` command as a user runs it: one line per rule,
//! the closing `N passed, M failed`, and its exit status — 0 when every
//! rule held, 1 when one failed, 2 when it could not check at all.

mod support;

use std::process::{Command, Output};
use support::memory::{self, Flaws};

/// Runs the command with `args` (off the runtime's threads, so the
/// participant it checks keeps serving).
async fn participant_check(args: Vec<String>) -> Output {
    tokio::task::spawn_blocking(move || {
        Command::new(env!("CARGO_BIN_EXE_participant-check"))
            .args(args)
            .env_remove("SERVICE_TOKEN")
            .output()
            .expect("run participant-check")
    })
    .await
    .expect("join")
}

fn refused_order_json() -> String {
    format!(
        r#"{{"customer_id":"{}","lines":[{{"product_id":"p-1","quantity":1,"unit_price_cents":700}}]}}"#,
        support::BLOCKED
    )
}

fn lines(output: &Output) -> Vec<String> {
    String::from_utf8_lossy(&output.stdout)
        .lines()
        .map(str::to_owned)
        .collect()
}

#[tokio::test]
async fn a_participant_keeping_every_rule_exits_0_with_one_pass_line_per_rule() {
    let served = memory::serve(Flaws::default(), Some("t0k3n")).await;
    let output = participant_check(vec![
        "--addr".into(),
        served.addr.to_string(),
        "--token".into(),
        "t0k3n".into(),
        "--refused-order".into(),
        refused_order_json(),
        "--concurrency".into(),
        "20".into(),
    ])
    .await;
    let lines = lines(&output);
    let rules = participant_check::rules::all();
    assert_eq!(output.status.code(), Some(0), "{lines:#?}");
    assert_eq!(lines.len(), rules.len() + 1, "{lines:#?}");
    for (line, rule) in lines.iter().zip(&rules) {
        assert_eq!(line, &format!("PASS {}", rule.name));
    }
    assert_eq!(
        lines.last().map(String::as_str),
        Some(format!("{} passed, 0 failed", rules.len()).as_str())
    );
}

#[tokio::test]
async fn a_broken_participant_exits_1_naming_the_rules_it_breaks() {
    let flaws = Flaws {
        no_dedupe: true,
        ..Flaws::default()
    };
    let served = memory::serve(flaws, None).await;
    let output = participant_check(vec!["--addr".into(), served.addr.to_string()]).await;
    let lines = lines(&output);
    assert_eq!(output.status.code(), Some(1), "{lines:#?}");
    assert!(
        lines
            .iter()
            .any(|l| l.starts_with("FAIL concurrent-acts-one-effect: ")),
        "{lines:#?}"
    );
    assert!(
        lines.contains(
            &"SKIP refusal-replays: needs --refused-order, an order the participant refuses"
                .to_owned()
        ),
        "{lines:#?}"
    );
    let failed = lines.iter().filter(|l| l.starts_with("FAIL ")).count();
    let passed = lines.iter().filter(|l| l.starts_with("PASS ")).count();
    assert_eq!(
        lines.last(),
        Some(&format!("{passed} passed, {failed} failed")),
        "{lines:#?}"
    );
}

#[tokio::test]
async fn nothing_to_check_exits_2_with_one_line_saying_why() {
    let closed = {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        listener.local_addr().expect("addr")
    };
    let output = participant_check(vec!["--addr".into(), closed.to_string()]).await;
    assert_eq!(output.status.code(), Some(2));
    assert!(lines(&output).is_empty());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.starts_with(&format!("participant-check: cannot reach http://{closed}")),
        "{stderr}"
    );
    let output = participant_check(vec![
        "--addr".into(),
        closed.to_string(),
        "--order".into(),
        r#"{"customer_id":"c","total_cents":5}"#.into(),
    ])
    .await;
    assert_eq!(output.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("total_cents is 5 but the lines add up to 0"),
        "{stderr}"
    );
}
