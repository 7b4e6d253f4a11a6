//! The loyalty steps' invariants (`--steps 3` to 5: every step after
//! payment and inventory is one of loyalty-svc's, each under a name of its
//! own — `loyalty`, `loyalty-2`, `loyalty-3`), checked on the stopped
//! loyalty-svc store beside the sagas, as [`crate::audit`] checks
//! payment and inventory: loyalty-svc is a participant of the generic
//! contract, so what must hold is what the protocol promises any such
//! participant — one effective act per request id whatever the retries,
//! lost replies and SIGKILLs, and a compensation that takes it back once.
//!
//! - every COMPLETED saga holds, at each loyalty step, exactly one applied
//!   act of its order's points (`total_cents / 100`) and no compensation
//!   that undid it;
//! - every CANCELLED saga nets to no act at each loyalty step it reached
//!   (an applied act was compensated after it), and its compensations ran
//!   in reverse order: the last loyalty step first, then inventory, then
//!   payment (the order of the steps' `compensated` entries in its
//!   history);
//! - at most one applied act and one undoing compensation per request id
//!   over every stored row, and no (request id, kind) stored twice;
//! - every loyalty record belongs to a saga of the run and a loyalty step;
//! - each customer's points are exactly what its COMPLETED orders earned
//!   at every loyalty step.

use crate::audit::{Finding, history};
use crate::drive::Accepted;
use crate::snapshot::{LoyaltyStore, Op};
use orchestrator::saga::{Saga, SagaStatus, StepStatus, TransitionState};
use std::collections::{BTreeMap, HashMap};

/// The order compensations must run in: the reverse of the saga's steps
/// (payment, inventory, then `loyalty`).
fn compensation_order_of(loyalty: &[String]) -> Vec<&str> {
    let mut order: Vec<&str> = ["payment", "inventory"]
        .into_iter()
        .chain(loyalty.iter().map(String::as_str))
        .collect();
    order.reverse();
    order
}

/// The findings on loyalty-svc's store `store` for the run's `orders`, the
/// sagas by id in `by_id`, loyalty-svc serving the steps `loyalty`.
pub fn check(
    store: &LoyaltyStore,
    orders: &BTreeMap<usize, Accepted>,
    by_id: &HashMap<&str, &Saga>,
    loyalty: &[String],
) -> Vec<Finding> {
    let expected_order = compensation_order_of(loyalty);
    let rows = by_request(&store.ops);
    let mut completed = Vec::new();
    let mut cancelled = Vec::new();
    let mut earned: BTreeMap<String, i64> = BTreeMap::new();
    // CANCELLED sagas that reached loyalty, and those whose act was applied
    // there (then compensated).
    let (mut reached, mut undone) = (0, 0);
    for (a, step) in orders
        .values()
        .flat_map(|a| loyalty.iter().map(move |step| (a, step)))
    {
        let Some(s) = by_id.get(a.saga_id.as_str()) else {
            continue;
        };
        let rid = format!("{}:{step}", a.saga_id);
        let ops = rows.get(rid.as_str()).map(Vec::as_slice).unwrap_or(&[]);
        let points = loyalty_svc::rules::points(a.spec.total_cents);
        let problem = match s.status {
            SagaStatus::Completed => {
                *earned.entry(a.spec.customer_id.clone()).or_default() += points;
                completed_problem(ops, points)
            }
            SagaStatus::Cancelled => {
                if reached_loyalty(s, step, ops) {
                    reached += 1;
                    undone += usize::from(count(ops, "act", "applied") > 0);
                }
                cancelled_problem(s, step, ops, &expected_order)
            }
            _ => None,
        };
        if let Some(p) = problem {
            let line = format!(
                "saga {} ({}) at {step}: {p}; its rows [{}]\n{}",
                a.saga_id,
                a.spec.request_id,
                describe(ops),
                history(s)
            );
            match s.status {
                SagaStatus::Completed => completed.push(line),
                _ => cancelled.push(line),
            }
        }
    }
    vec![
        Finding::new(
            "loyalty: every COMPLETED order awarded its points exactly once (one applied act, never undone)",
            completed,
        ),
        Finding::new(
            format!(
                "loyalty: every CANCELLED order nets to no points at each loyalty step it reached ({reached} (order, step) pairs, {undone} with an applied act), compensations in reverse order ({})",
                expected_order.join(", ")
            ),
            cancelled,
        ),
        Finding::new(
            format!(
                "loyalty: at most one effective act per request id over every stored row ({} rows), no (request id, kind) twice",
                store.ops.len()
            ),
            repeated(&rows),
        ),
        Finding::new(
            "loyalty: every record belongs to a saga of this run and a loyalty step",
            orphans(&rows, by_id, loyalty),
        ),
        Finding::new(
            "loyalty: each customer's points = Σ points of its COMPLETED orders at every loyalty step",
            points_problems(&store.points, &earned),
        ),
    ]
}

/// Every row grouped by request id (every row kept).
fn by_request(ops: &[Op]) -> BTreeMap<&str, Vec<Op>> {
    let mut rows: BTreeMap<&str, Vec<Op>> = BTreeMap::new();
    for op in ops {
        rows.entry(op.request_id.as_str())
            .or_default()
            .push(op.clone());
    }
    rows
}

fn count(ops: &[Op], kind: &str, status: &str) -> usize {
    ops.iter()
        .filter(|o| o.kind == kind && o.status == status)
        .count()
}

fn describe(ops: &[Op]) -> String {
    ops.iter()
        .map(|o| format!("{} {}({})", o.kind, o.status, o.amount))
        .collect::<Vec<_>>()
        .join(", ")
}

/// What is wrong with a COMPLETED saga's loyalty rows `ops` (None:
/// nothing) for an order worth `points`.
fn completed_problem(ops: &[Op], points: i64) -> Option<String> {
    let applied: Vec<&Op> = ops
        .iter()
        .filter(|o| o.kind == "act" && o.status == "applied")
        .collect();
    let undone = count(ops, "compensate", "undone");
    match (applied.as_slice(), undone) {
        ([act], 0) if act.amount == points => None,
        ([act], 0) => Some(format!("awarded {} points, not {points}", act.amount)),
        ([], _) => Some("no points awarded".to_owned()),
        (_, 0) => Some(format!("{} applied acts", applied.len())),
        (_, n) => Some(format!(
            "its points were taken back ({n} undoing compensation)"
        )),
    }
}

/// Whether saga `s` (its rows `ops` at loyalty step `step`) reached that
/// step.
fn reached_loyalty(s: &Saga, step: &str, ops: &[Op]) -> bool {
    !ops.is_empty()
        || s.steps.iter().any(|st| {
            st.name == step && !matches!(st.status, StepStatus::Pending | StepStatus::Skipped)
        })
}

/// What is wrong with a CANCELLED saga `s` whose rows at loyalty step
/// `step` are `ops`, its compensations due in `expected_order`.
fn cancelled_problem(s: &Saga, step: &str, ops: &[Op], expected_order: &[&str]) -> Option<String> {
    if !reached_loyalty(s, step, ops) {
        return None;
    }
    let applied = count(ops, "act", "applied");
    let undone = count(ops, "compensate", "undone");
    if applied != undone {
        return Some(format!(
            "{applied} applied act(s) but {undone} undoing compensation(s): points left behind"
        ));
    }
    let order = compensation_order(s);
    let mut expected: Vec<&str> = expected_order.to_vec();
    expected.retain(|name| order.contains(name));
    (order != expected).then(|| format!("compensated in the order {order:?}"))
}

/// The steps in the order their `compensated` entries stand in the saga's
/// history (each step once; a history trimmed in its middle keeps its
/// entries in order).
fn compensation_order(s: &Saga) -> Vec<&str> {
    let mut order: Vec<&str> = Vec::new();
    for t in &s.history {
        if t.to == TransitionState::Compensated
            && let Some(step) = t.step.as_deref()
            && !order.contains(&step)
        {
            order.push(step);
        }
    }
    order
}

/// Request ids with a second applied act or undoing compensation, or a
/// (request id, kind) stored twice.
fn repeated(rows: &BTreeMap<&str, Vec<Op>>) -> Vec<String> {
    let mut problems = Vec::new();
    for (rid, ops) in rows {
        for (kind, status) in [("act", "applied"), ("compensate", "undone")] {
            let n = count(ops, kind, status);
            if n > 1 {
                problems.push(format!("{rid}: {n} {status} {kind} rows"));
            }
        }
        let mut kinds: BTreeMap<&str, usize> = BTreeMap::new();
        for op in ops {
            *kinds.entry(op.kind.as_str()).or_default() += 1;
        }
        for (kind, n) in kinds.into_iter().filter(|(_, n)| *n > 1) {
            problems.push(format!("{rid}: ({rid}, {kind}) stored {n} times"));
        }
    }
    problems
}

/// Records whose request id is not `<saga of this run>:<loyalty step>`.
fn orphans(
    rows: &BTreeMap<&str, Vec<Op>>,
    by_id: &HashMap<&str, &Saga>,
    loyalty: &[String],
) -> Vec<String> {
    rows.iter()
        .filter(|(rid, _)| {
            !rid.rsplit_once(':').is_some_and(|(saga_id, step)| {
                by_id.contains_key(saga_id) && loyalty.iter().any(|s| s == step)
            })
        })
        .map(|(rid, ops)| format!("{rid}: [{}]", describe(ops)))
        .collect()
}

/// Customers whose stored points (summed over their rows) differ from
/// what their COMPLETED orders earned, or whose points are negative in a
/// row.
fn points_problems(stored: &[(String, i64)], earned: &BTreeMap<String, i64>) -> Vec<String> {
    let mut have: BTreeMap<&str, i64> = BTreeMap::new();
    let mut problems = Vec::new();
    for (customer, points) in stored {
        if *points < 0 {
            problems.push(format!("{customer}: a row holds {points} points"));
        }
        *have.entry(customer.as_str()).or_default() += points;
    }
    let customers: std::collections::BTreeSet<&str> = have
        .keys()
        .copied()
        .chain(earned.keys().map(String::as_str))
        .collect();
    for c in customers {
        let (got, want) = (
            have.get(c).copied().unwrap_or(0),
            earned.get(c).copied().unwrap_or(0),
        );
        if got != want {
            problems.push(format!(
                "{c}: holds {got} points, its COMPLETED orders earned {want}"
            ));
        }
    }
    problems
}

#[cfg(test)]
mod tests {
    use super::*;

    fn op(kind: &str, status: &str, amount: i64) -> Op {
        Op {
            request_id: "s-1:loyalty".to_owned(),
            kind: kind.to_owned(),
            subject: "c-1".to_owned(),
            amount,
            status: status.to_owned(),
        }
    }

    #[test]
    fn a_completed_saga_needs_exactly_one_standing_act_of_its_points() {
        assert_eq!(completed_problem(&[op("act", "applied", 7)], 7), None);
        assert_eq!(
            completed_problem(&[], 7).as_deref(),
            Some("no points awarded")
        );
        assert_eq!(
            completed_problem(&[op("act", "applied", 5)], 7).as_deref(),
            Some("awarded 5 points, not 7")
        );
        let twice = [op("act", "applied", 7), op("act", "applied", 7)];
        assert_eq!(
            completed_problem(&twice, 7).as_deref(),
            Some("2 applied acts")
        );
        let undone = [op("act", "applied", 7), op("compensate", "undone", 7)];
        assert!(completed_problem(&undone, 7).is_some());
    }

    #[test]
    fn a_second_applied_act_or_a_repeated_key_is_named() {
        let twice = [op("act", "applied", 7), op("act", "applied", 7)];
        let rows = by_request(&twice);
        let problems = repeated(&rows);
        assert_eq!(problems.len(), 2, "{problems:?}");
        assert!(problems[0].contains("2 applied act rows"), "{problems:?}");
        let once = [op("act", "applied", 7)];
        assert!(repeated(&by_request(&once)).is_empty());
    }

    #[test]
    fn points_must_match_what_completed_orders_earned() {
        let earned = BTreeMap::from([("c-1".to_owned(), 7)]);
        assert!(points_problems(&[("c-1".to_owned(), 7)], &earned).is_empty());
        assert_eq!(points_problems(&[("c-1".to_owned(), 14)], &earned).len(), 1);
        assert_eq!(points_problems(&[], &earned).len(), 1);
        let stray = [("c-1".to_owned(), 7), ("c-2".to_owned(), 1)];
        assert_eq!(points_problems(&stray, &earned).len(), 1);
    }

    #[test]
    fn records_outside_the_runs_sagas_are_orphans() {
        let once = [op("act", "applied", 7)];
        let rows = by_request(&once);
        assert_eq!(
            orphans(&rows, &HashMap::new(), &["loyalty".into()]).len(),
            1
        );
    }

    #[test]
    fn compensations_run_from_the_last_loyalty_step_back_to_payment() {
        let steps = saga_tests::loyalty::steps_after_the_built_ins(5);
        assert_eq!(
            compensation_order_of(&steps),
            ["loyalty-3", "loyalty-2", "loyalty", "inventory", "payment"]
        );
    }
}
