//! MongoDB commands per saga on the happy path, counted with the driver's
//! command monitoring (every command is one network round trip in
//! production; a stand-in's speed says nothing about mongod's, so commands
//! are counted, not timed). Targets: the orchestrator ≤ 3 writes and no
//! reads per saga; Charge ≤ 3 commands including its commit; Deduct ≤ 4
//! whatever the number of lines. The recovery sweep's periodic scans are
//! not per saga and are left out (they are counted apart and printed).

use mongo_client::monitor::{RecordedCommand, record_commands, recorded_commands};
use orchestrator::executor::RetryPolicy;
use saga_tests::{Stack, fast_retry};
use std::collections::BTreeMap;
use std::time::Duration;

/// A read or write the saga caused (not the sweep's scan, not a session
/// end or a heartbeat).
fn sweep_scan(c: &RecordedCommand) -> bool {
    c.name == "find"
        && c.body
            .get_document("filter")
            .is_ok_and(|f| f.contains_key("claimable_after_ms"))
}

/// Runs `SAGAS` orders of `lines` lines each; the commands they caused,
/// per (service, command name), and how many sweep scans ran meanwhile.
async fn commands_of_orders(
    stack: &Stack,
    lines: usize,
) -> (BTreeMap<(String, String), usize>, usize) {
    let items: Vec<(String, i64, i64)> = (0..lines)
        .map(|l| (format!("sku-{l}"), 1 + l as i64 % 3, 10))
        .collect();
    let items: Vec<(&str, i64, i64)> = items.iter().map(|(p, q, c)| (p.as_str(), *q, *c)).collect();
    let before = recorded_commands().len();
    for i in 0..SAGAS {
        let reply = stack
            .order(&format!("rt-{lines}-{i}"), "alice", &items)
            .await
            .expect("order");
        assert_eq!(
            reply.status,
            i32::from(saga_proto::saga::v1::SagaStatus::Completed)
        );
    }
    let commands: Vec<_> = recorded_commands().split_off(before);
    let mut per: BTreeMap<(String, String), usize> = BTreeMap::new();
    let mut sweeps = 0;
    for c in &commands {
        if sweep_scan(c) {
            sweeps += 1;
            continue;
        }
        *per.entry((c.service.clone(), c.name.clone())).or_default() += 1;
    }
    (per, sweeps)
}

const SAGAS: usize = 10;

/// The budget holds for orders of 1, 3 and 10 lines: Deduct writes every
/// line in one command, so its cost does not grow with the order.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_saga_costs_at_most_its_budget_of_mongodb_commands() {
    record_commands();
    // The save between charge and deduct is left out only while the
    // saga's lease is young (within the longest backoff sleep of its
    // grant, 200 ms with the tests' fast retry): a charge slowed past that
    // by a busy machine is saved — correct, and one update more than the
    // happy path this test counts. A 1 s backoff cap makes that window 2 s.
    let retry = RetryPolicy {
        max_delay: Duration::from_secs(1),
        ..fast_retry()
    };
    let Some(stack) = Stack::start_mongo_retrying(retry).await else {
        return;
    };
    stack.deposit("alice", 1_000_000).await;
    for l in 0..10 {
        stack.add_stock(&format!("sku-{l}"), 1_000).await;
    }
    for lines in [1, 3, 10] {
        let (per, sweeps) = commands_of_orders(&stack, lines).await;
        check_budget(&per, sweeps, lines);
    }
    stack.stop().await;
}

/// Asserts the per-saga budget on `per` (commands of `SAGAS` sagas of
/// `lines` lines each), printing the table.
fn check_budget(per: &BTreeMap<(String, String), usize>, sweeps: usize, lines: usize) {
    let mut table = String::new();
    for ((service, name), n) in per {
        table.push_str(&format!(
            "{service:<13} {name:<18} {:.2}/saga\n",
            *n as f64 / SAGAS as f64
        ));
    }
    eprintln!(
        "MongoDB commands per saga ({SAGAS} sagas, {lines} lines each; sweep scans apart: {sweeps}):\n{table}"
    );
    let count = |service: &str, names: &[&str]| -> f64 {
        per.iter()
            .filter(|((s, n), _)| s == service && (names.is_empty() || names.contains(&n.as_str())))
            .map(|(_, n)| *n)
            .sum::<usize>() as f64
            / SAGAS as f64
    };
    let writes = count(
        "orchestrator",
        &["insert", "update", "findAndModify", "delete"],
    );
    let reads = count("orchestrator", &["find", "aggregate", "count"]);
    let payment = count("payment", &[]);
    let inventory = count("inventory", &[]);
    // Each saga is stored and charged and deducted, so none can be free.
    assert!(
        writes >= 1.0 && payment >= 2.0 && inventory >= 2.0,
        "{table}"
    );
    // The insert (the saga and its first intent) and the final update: the
    // save between charge and deduct is left out on the happy path.
    assert!(writes <= 2.0, "orchestrator writes/saga {writes}\n{table}");
    assert!(reads == 0.0, "orchestrator reads/saga {reads}\n{table}");
    assert!(payment <= 3.0, "Charge commands/saga {payment}\n{table}");
    assert!(
        inventory <= 4.0,
        "Deduct commands/saga with {lines} lines: {inventory}\n{table}"
    );
}
