//! The engine's rules, one scenario per test.

use super::*;
use crate::saga::OrderItem;

/// Records an outcome the test knows fits.
fn record(saga: &mut Saga, work: Next, outcome: Outcome, now_ms: i64) {
    record_outcome(saga, work, outcome, now_ms).expect("the outcome fits the saga");
}

const TWO_STEPS: &[StepNames] = &[
    StepNames {
        name: "payment",
        action: "charge",
        compensation: "refund",
    },
    StepNames {
        name: "inventory",
        action: "deduct",
        compensation: "restock",
    },
];

fn saga() -> Saga {
    let order = Order {
        order_id: "o1".into(),
        customer_id: "alice".into(),
        items: vec![OrderItem {
            product_id: "sku".into(),
            quantity: 1,
            unit_price_cents: 5,
        }],
        total_cents: 5,
    };
    start(TWO_STEPS, "s1".into(), "r1".into(), "fp".into(), order, 1)
}

fn statuses(s: &Saga) -> Vec<StepStatus> {
    s.steps.iter().map(|s| s.status).collect()
}

#[test]
fn a_new_saga_records_the_intent_of_its_first_step_with_stable_request_ids() {
    let s = saga();
    assert_eq!(s.status, SagaStatus::Running);
    assert_eq!(statuses(&s), [StepStatus::Running, StepStatus::Pending]);
    assert_eq!(s.steps[0].request_id, "s1:payment");
    assert_eq!(s.steps[1].request_id, "s1:inventory");
    assert_eq!(next(&s), Next::Act(0));
}

#[test]
fn happy_path_runs_steps_in_order_and_completes() {
    let mut s = saga();
    record(&mut s, Next::Act(0), Outcome::Succeeded, 2);
    assert_eq!(statuses(&s), [StepStatus::Succeeded, StepStatus::Running]);
    assert_eq!(next(&s), Next::Act(1));
    record(&mut s, Next::Act(1), Outcome::Succeeded, 3);
    assert_eq!(s.status, SagaStatus::Completed);
    assert_eq!(next(&s), Next::Done);
    assert_eq!(s.history.last().map(|t| t.to.as_str()), Some("completed"));
}

#[test]
fn refusal_of_the_first_step_cancels_with_nothing_to_compensate() {
    let mut s = saga();
    record(
        &mut s,
        Next::Act(0),
        Outcome::Refused("insufficient funds".into()),
        2,
    );
    assert_eq!(s.status, SagaStatus::Cancelled);
    assert_eq!(statuses(&s), [StepStatus::Refused, StepStatus::Skipped]);
    assert!(
        s.reason
            .as_deref()
            .unwrap_or("")
            .contains("insufficient funds")
    );
}

#[test]
fn refusal_of_a_later_step_compensates_earlier_steps_in_reverse() {
    let mut s = saga();
    record(&mut s, Next::Act(0), Outcome::Succeeded, 2);
    record(&mut s, Next::Act(1), Outcome::Refused("short".into()), 3);
    assert_eq!(s.status, SagaStatus::Compensating);
    assert_eq!(
        statuses(&s),
        [StepStatus::Compensating, StepStatus::Refused]
    );
    assert_eq!(next(&s), Next::Compensate(0));
    record(&mut s, Next::Compensate(0), Outcome::Compensated, 4);
    assert_eq!(s.status, SagaStatus::Cancelled);
    assert_eq!(statuses(&s), [StepStatus::Compensated, StepStatus::Refused]);
}

#[test]
fn a_refusal_code_is_kept_through_a_failed_compensation_and_its_retry() {
    let mut s = saga();
    assert_eq!(s.refusal_code, None);
    record(&mut s, Next::Act(0), Outcome::Succeeded, 2);
    let refusal = Refusal::new(Some("INSUFFICIENT_STOCK".into()), "short of sku-pear");
    record(&mut s, Next::Act(1), Outcome::Refused(refusal), 3);
    assert_eq!(s.refusal_code.as_deref(), Some("INSUFFICIENT_STOCK"));
    assert!(
        s.reason
            .as_deref()
            .unwrap_or("")
            .contains("short of sku-pear")
    );
    record(
        &mut s,
        Next::Compensate(0),
        Outcome::CompensationGaveUp("down".into()),
        4,
    );
    assert_eq!(s.status, SagaStatus::Failed);
    assert!(resume(&mut s, 5));
    record(&mut s, Next::Compensate(0), Outcome::Compensated, 6);
    assert_eq!(s.status, SagaStatus::Cancelled);
    assert_eq!(s.refusal_code.as_deref(), Some("INSUFFICIENT_STOCK"));
    let mut without = saga();
    record(&mut without, Next::Act(0), Outcome::Refused("no".into()), 2);
    assert_eq!(without.refusal_code, None, "a refusal without a code");
}

#[test]
fn a_step_whose_outcome_is_unknown_is_compensated_too_before_earlier_ones() {
    let mut s = saga();
    record(&mut s, Next::Act(0), Outcome::Succeeded, 2);
    record(
        &mut s,
        Next::Act(1),
        Outcome::Retrying("unavailable".into()),
        3,
    );
    assert_eq!(s.steps[1].attempts, 2);
    record(
        &mut s,
        Next::Act(1),
        Outcome::GaveUp("unavailable".into()),
        4,
    );
    assert_eq!(next(&s), Next::Compensate(1));
    record(&mut s, Next::Compensate(1), Outcome::Compensated, 5);
    assert_eq!(next(&s), Next::Compensate(0));
    record(&mut s, Next::Compensate(0), Outcome::Compensated, 6);
    assert_eq!(s.status, SagaStatus::Cancelled);
}

#[test]
fn exhausted_compensation_fails_the_saga_and_resume_finishes_it() {
    let mut s = saga();
    record(&mut s, Next::Act(0), Outcome::Succeeded, 2);
    record(&mut s, Next::Act(1), Outcome::Refused("short".into()), 3);
    record(
        &mut s,
        Next::Compensate(0),
        Outcome::CompensationRetrying("down".into()),
        4,
    );
    assert_eq!(s.steps[0].compensation_attempts, 2);
    record(
        &mut s,
        Next::Compensate(0),
        Outcome::CompensationGaveUp("down".into()),
        5,
    );
    assert_eq!(s.status, SagaStatus::Failed);
    assert_eq!(next(&s), Next::Done);
    assert!(resume(&mut s, 6));
    assert_eq!(s.steps[0].compensation_attempts, 1);
    assert_eq!(next(&s), Next::Compensate(0));
    record(&mut s, Next::Compensate(0), Outcome::Compensated, 7);
    assert_eq!(s.status, SagaStatus::Cancelled);
    assert!(!resume(&mut s, 8));
}

#[test]
fn stale_or_mismatched_outcomes_are_refused_naming_the_saga_and_change_nothing() {
    let mut s = saga();
    let before = s.clone();
    let misfits = [
        (Next::Act(1), Outcome::Succeeded),
        (Next::Act(0), Outcome::Compensated),
        (Next::Compensate(0), Outcome::Compensated),
        (Next::Done, Outcome::Succeeded),
    ];
    for (work, outcome) in misfits {
        let label = outcome.as_str();
        let misfit = record_outcome(&mut s, work, outcome, 2).expect_err("does not fit");
        assert_eq!(misfit.saga_id, "s1");
        assert_eq!((misfit.work, misfit.expected), (work, Next::Act(0)));
        assert!(misfit.to_string().contains("saga s1"), "{misfit}");
        assert!(misfit.to_string().contains(label), "{misfit}");
    }
    assert_eq!(s, before);
}

#[test]
fn history_is_append_only_and_names_steps() {
    let mut s = saga();
    let first = s.history.clone();
    record(&mut s, Next::Act(0), Outcome::Succeeded, 2);
    assert_eq!(&s.history[..first.len()], &first[..]);
    assert!(
        s.history
            .iter()
            .any(|t| t.step.as_deref() == Some("payment") && t.to == TransitionState::Succeeded)
    );
}

/// Steps named `s0`, `s1`, … (action and compensation named alike).
const MANY: &[StepNames] = &[
    named("s0"),
    named("s1"),
    named("s2"),
    named("s3"),
    named("s4"),
];

const fn named(name: &'static str) -> StepNames {
    StepNames {
        name,
        action: name,
        compensation: name,
    }
}

/// How a forward step ends in [`run`].
#[derive(Clone, Copy, PartialEq)]
enum Fate {
    Succeeds,
    Refused,
    Unknown,
}

/// Runs a saga of the first `n` steps of [`MANY`] to its end: each action
/// meets `fate(i)`, every compensation succeeds. Returns the work done in
/// order and the final saga.
fn run(n: usize, fate: impl Fn(usize) -> Fate) -> (Vec<Next>, Saga) {
    let order = Order {
        order_id: "o".into(),
        customer_id: "c".into(),
        items: Vec::new(),
        total_cents: 0,
    };
    let mut s = start(&MANY[..n], "s".into(), "r".into(), "fp".into(), order, 0);
    let mut work = Vec::new();
    for now in 1..100 {
        let w = next(&s);
        if w == Next::Done {
            return (work, s);
        }
        work.push(w);
        let outcome = match w {
            Next::Act(i) => match fate(i) {
                Fate::Succeeds => Outcome::Succeeded,
                Fate::Refused => Outcome::Refused("no".into()),
                Fate::Unknown => Outcome::GaveUp("timeout".into()),
            },
            _ => Outcome::Compensated,
        };
        record(&mut s, w, outcome, now);
    }
    panic!("saga of {n} steps did not end: {s:?}");
}

#[test]
fn every_definition_length_completes_when_every_step_succeeds() {
    for n in [1, 2, 3, 5] {
        let (work, s) = run(n, |_| Fate::Succeeds);
        assert_eq!(work, (0..n).map(Next::Act).collect::<Vec<_>>(), "{n} steps");
        assert_eq!(s.status, SagaStatus::Completed);
        assert!(s.steps.iter().all(|st| st.status == StepStatus::Succeeded));
    }
}

#[test]
fn a_refusal_at_any_position_compensates_the_earlier_steps_in_reverse() {
    for n in [1, 2, 3, 5] {
        for k in 0..n {
            let (work, s) = run(n, |i| {
                if i == k {
                    Fate::Refused
                } else {
                    Fate::Succeeds
                }
            });
            let mut expected: Vec<Next> = (0..=k).map(Next::Act).collect();
            expected.extend((0..k).rev().map(Next::Compensate));
            assert_eq!(work, expected, "{n} steps, refused at {k}");
            assert_eq!(s.status, SagaStatus::Cancelled, "{n} steps, refused at {k}");
            for (i, step) in s.steps.iter().enumerate() {
                let want = match i.cmp(&k) {
                    std::cmp::Ordering::Less => StepStatus::Compensated,
                    std::cmp::Ordering::Equal => StepStatus::Refused,
                    std::cmp::Ordering::Greater => StepStatus::Skipped,
                };
                assert_eq!(step.status, want, "{n} steps, refused at {k}, step {i}");
            }
        }
    }
}

#[test]
fn an_unknown_outcome_at_any_position_is_compensated_first_then_the_earlier_ones() {
    for n in [1, 2, 3, 5] {
        for k in 0..n {
            let (work, s) = run(n, |i| {
                if i == k {
                    Fate::Unknown
                } else {
                    Fate::Succeeds
                }
            });
            let mut expected: Vec<Next> = (0..=k).map(Next::Act).collect();
            expected.extend((0..=k).rev().map(Next::Compensate));
            assert_eq!(work, expected, "{n} steps, unknown at {k}");
            assert_eq!(s.status, SagaStatus::Cancelled);
            assert!(
                s.steps[..=k]
                    .iter()
                    .all(|st| st.status == StepStatus::Compensated),
                "{n} steps, unknown at {k}: {:?}",
                statuses(&s)
            );
            assert!(
                s.steps[k + 1..]
                    .iter()
                    .all(|st| st.status == StepStatus::Skipped)
            );
        }
    }
}

#[test]
fn the_history_stays_bounded_however_often_a_step_is_retried() {
    use crate::saga::{HISTORY_HEAD, HISTORY_KEPT, TEXT_KEPT};
    let mut s = saga();
    let retries = 1_000;
    // A participant's error of 4 KB of multibyte text.
    let long_error = "é".repeat(2_048);
    for attempt in 0..retries {
        record(
            &mut s,
            Next::Act(0),
            Outcome::Retrying(format!("{attempt}: {long_error}")),
            10 + attempt,
        );
    }
    record(&mut s, Next::Act(0), Outcome::Succeeded, 5_000);
    assert_eq!(s.history.len(), HISTORY_KEPT);
    // 1 created + 1 started + retries + succeeded + next step started.
    let seen = 2 + retries as usize + 2;
    assert_eq!(s.history_omitted, (seen - HISTORY_KEPT) as u64);
    // The beginning is kept as it was; the end is the latest.
    assert_eq!(s.history[0].detail, "saga created");
    assert!(
        s.history[HISTORY_HEAD - 1]
            .detail
            .starts_with(&format!("attempt failed, retrying: {}:", HISTORY_HEAD - 3))
    );
    assert_eq!(s.history.last().map(|t| t.at_ms), Some(5_000));
    // Texts are cut at a character boundary, marked as cut.
    for t in &s.history {
        assert!(t.detail.len() <= TEXT_KEPT, "{}", t.detail.len());
    }
    let error = s.steps[0].last_error.as_deref().unwrap_or_default();
    assert!(
        error.len() <= TEXT_KEPT && error.ends_with('…'),
        "{}",
        error.len()
    );
    // It still round-trips.
    let json = serde_json::to_string(&s).expect("encode");
    let back: Saga = serde_json::from_str(&json).expect("decode");
    assert_eq!(back, s);
}

#[test]
fn each_save_stamps_only_the_entries_it_added_with_its_version_and_writer() {
    let mut s = saga();
    s.version = 1;
    s.stamp_history("a");
    let created = s.history.len();
    record(&mut s, Next::Act(0), Outcome::Succeeded, 2);
    s.version = 2;
    s.stamp_history("a");
    s.lease = Some(Lease {
        owner: "a".into(),
        until_ms: 2,
    });
    record_claim(
        &mut s,
        Lease {
            owner: "b".into(),
            until_ms: 10,
        },
        3,
    );
    s.version = 3;
    s.stamp_history("b");
    record_release(&mut s, "b", 4);
    s.version = 4;
    s.stamp_history("b");
    s.stamp_history("c"); // nothing new: nothing restamped
    let stamps: Vec<(u64, &str)> = s
        .history
        .iter()
        .map(|t| (t.version.unwrap(), t.by.as_deref().unwrap()))
        .collect();
    assert!(stamps[..created].iter().all(|st| *st == (1, "a")));
    assert!(stamps[created..].windows(2).all(|w| w[0].0 <= w[1].0));
    assert_eq!(stamps.last(), Some(&(4, "b")));
    assert_eq!(stamps[stamps.len() - 2], (3, "b"));
    assert!(
        s.history[stamps.len() - 2]
            .detail
            .starts_with("taken over by b")
    );
    assert_eq!(
        s.history.last().unwrap().detail,
        "lease released by b at shutdown"
    );
    assert_eq!(s.lease, None);
}

#[test]
fn a_resumed_saga_ends_with_the_cause_of_its_compensation_not_the_fixed_failure() {
    let mut s = saga();
    record(&mut s, Next::Act(0), Outcome::Succeeded, 2);
    record(&mut s, Next::Act(1), Outcome::Refused("short".into()), 3);
    let give_up = |s: &mut Saga, now| {
        record(
            s,
            Next::Compensate(0),
            Outcome::CompensationGaveUp("down".into()),
            now,
        );
    };
    give_up(&mut s, 4);
    assert_eq!(s.status, SagaStatus::Failed);
    assert_eq!(
        s.reason.as_deref(),
        Some("refund could not be completed: down")
    );

    // Resumed: compensating again because of the refusal.
    assert!(resume(&mut s, 5));
    assert_eq!(s.reason.as_deref(), Some("short"));
    // Failing again shows the new failure; a second resume puts the cause
    // back again.
    give_up(&mut s, 6);
    assert_eq!(
        s.reason.as_deref(),
        Some("refund could not be completed: down")
    );
    assert!(resume(&mut s, 7));
    record(&mut s, Next::Compensate(0), Outcome::Compensated, 8);
    assert_eq!(s.status, SagaStatus::Cancelled);
    assert_eq!(s.reason.as_deref(), Some("short"));
    // The failures stay in the history.
    assert!(
        s.history.iter().any(|t| t.to == TransitionState::Failed
            && t.detail == "refund could not be completed: down")
    );
}

#[test]
fn a_resumed_saga_whose_unknown_outcome_caused_the_compensation_keeps_that_cause() {
    let mut s = saga();
    record(&mut s, Next::Act(0), Outcome::Succeeded, 2);
    record(
        &mut s,
        Next::Act(1),
        Outcome::GaveUp("unavailable".into()),
        3,
    );
    let cause = "deduct gave up after 1 attempts: unavailable";
    assert_eq!(s.reason.as_deref(), Some(cause));
    record(
        &mut s,
        Next::Compensate(1),
        Outcome::CompensationGaveUp("still unavailable".into()),
        4,
    );
    assert_eq!(
        s.reason.as_deref(),
        Some("restock could not be completed: still unavailable")
    );
    assert!(resume(&mut s, 5));
    record(&mut s, Next::Compensate(1), Outcome::Compensated, 6);
    record(&mut s, Next::Compensate(0), Outcome::Compensated, 7);
    assert_eq!(s.status, SagaStatus::Cancelled);
    assert_eq!(s.reason.as_deref(), Some(cause));
}

#[test]
fn a_resumed_saga_whose_history_lost_the_cause_has_no_reason_rather_than_the_failure() {
    let mut s = saga();
    record(&mut s, Next::Act(0), Outcome::Succeeded, 2);
    // Enough retries that the move to compensating is neither among the
    // first transitions kept nor among the latest.
    for now in 3..23 {
        record(
            &mut s,
            Next::Act(1),
            Outcome::Retrying("unavailable".into()),
            now,
        );
    }
    record(&mut s, Next::Act(1), Outcome::Refused("short".into()), 23);
    for now in 24..124 {
        record(
            &mut s,
            Next::Compensate(0),
            Outcome::CompensationRetrying("down".into()),
            now,
        );
    }
    record(
        &mut s,
        Next::Compensate(0),
        Outcome::CompensationGaveUp("down".into()),
        124,
    );
    assert!(s.history_omitted > 0);
    assert!(
        !s.history
            .iter()
            .any(|t| t.to == TransitionState::Compensating && t.from == TransitionState::Running)
    );
    assert!(resume(&mut s, 125));
    assert_eq!(s.reason, None);
    record(&mut s, Next::Compensate(0), Outcome::Compensated, 126);
    assert_eq!(s.status, SagaStatus::Cancelled);
    assert_eq!(s.reason, None);
}

/// Runs a saga of the first `n` steps of [`MANY`] as the executor does,
/// leaving out the saves [`may_skip_save`] allows: every action meets
/// `fate(i)`, every compensation succeeds. Returns the number of saves
/// (the creating write included) and, for every action sent, the step and
/// the saga as the store held it at that moment.
fn run_saving(n: usize, fate: impl Fn(usize) -> Fate) -> (usize, Vec<(usize, Saga)>) {
    let order = Order {
        order_id: "o".into(),
        customer_id: "c".into(),
        items: Vec::new(),
        total_cents: 0,
    };
    let mut s = start(&MANY[..n], "s".into(), "r".into(), "fp".into(), order, 0);
    let mut stored = s.clone();
    let mut saves = 1;
    let mut sent = Vec::new();
    for now in 1..100 {
        let w = next(&s);
        if w == Next::Done {
            return (saves, sent);
        }
        let outcome = match w {
            Next::Act(i) => {
                sent.push((i, stored.clone()));
                match fate(i) {
                    Fate::Succeeds => Outcome::Succeeded,
                    Fate::Refused => Outcome::Refused("no".into()),
                    Fate::Unknown => Outcome::GaveUp("timeout".into()),
                }
            }
            _ => Outcome::Compensated,
        };
        record(&mut s, w, outcome, now);
        if !may_skip_save(&s, w) {
            stored = s.clone();
            saves += 1;
        }
    }
    panic!("saga of {n} steps did not end: {s:?}");
}

fn claimed(mut s: Saga) -> Saga {
    record_claim(
        &mut s,
        Lease {
            owner: "b".into(),
            until_ms: 1_000,
        },
        500,
    );
    s
}

#[test]
fn the_happy_path_saves_twice_whatever_the_number_of_steps() {
    for n in 1..=MANY.len() {
        let (made, _) = run_saving(n, |_| Fate::Succeeds);
        assert_eq!(made, 2, "{n} steps: the creating write and the last");
    }
    // A failure path saves every transition after the refusal.
    let (made, _) = run_saving(2, |i| {
        if i == 1 {
            Fate::Refused
        } else {
            Fate::Succeeds
        }
    });
    assert_eq!(
        made, 3,
        "create, refusal + refund intent, refunded (the deduct intent was not saved)"
    );
    let (made, _) = run_saving(5, |i| {
        if i == 3 {
            Fate::Refused
        } else {
            Fate::Succeeds
        }
    });
    assert_eq!(
        made,
        2 + 3,
        "create, the refusal with the first compensation's intent, then each of the three compensations"
    );
}

#[test]
fn after_a_crash_at_any_send_the_claimed_saga_knows_the_step_may_have_been_sent() {
    for n in [1, 2, 3, 5] {
        for k in 0..n {
            for failure in [Fate::Refused, Fate::Unknown] {
                let (_, sent) = run_saving(n, |i| if i == k { failure } else { Fate::Succeeds });
                for (i, stored) in sent {
                    let s = claimed(stored);
                    assert!(
                        matches!(
                            s.steps[i].status,
                            StepStatus::Running | StepStatus::Succeeded
                        ),
                        "{n} steps, fails at {k}, crash at the send of {i}: {:?}",
                        statuses(&s)
                    );
                }
            }
        }
    }
}

#[test]
fn a_claim_marks_every_step_after_the_stored_one_and_only_once() {
    let s = claimed(saga());
    assert_eq!(statuses(&s), [StepStatus::Running, StepStatus::Running]);
    assert_eq!(
        s.history.last().map(|t| t.detail.as_str()),
        Some("may have been sent by the previous owner after its last save")
    );
    let again = claimed(s.clone());
    assert_eq!(statuses(&again), statuses(&s));
    let marks = |s: &Saga| {
        s.history
            .iter()
            .filter(|t| t.detail.starts_with("may have been"))
            .count()
    };
    assert_eq!(marks(&again), 1, "a second claim marks nothing new");

    // Five steps, crashed while the third was sent: the store still holds
    // the first one's intent, and every later step may have been sent.
    let (_, sent) = run_saving(5, |_| Fate::Succeeds);
    let (_, stored) = &sent[2];
    let s = claimed(stored.clone());
    assert_eq!(statuses(&s), [StepStatus::Running; 5]);
    assert_eq!(marks(&s), 4, "one entry per step marked");
    // A saga saved past its first steps (a retried step is saved) marks
    // only what follows the stored one.
    let mut s = start(
        &MANY[..5],
        "s".into(),
        "r".into(),
        "fp".into(),
        saga().order,
        0,
    );
    record(
        &mut s,
        Next::Act(0),
        Outcome::Retrying("unavailable".into()),
        1,
    );
    record(&mut s, Next::Act(0), Outcome::Succeeded, 2);
    record(
        &mut s,
        Next::Act(1),
        Outcome::Retrying("unavailable".into()),
        3,
    );
    let s = claimed(s);
    assert_eq!(
        statuses(&s),
        [
            StepStatus::Succeeded,
            StepStatus::Running,
            StepStatus::Running,
            StepStatus::Running,
            StepStatus::Running
        ]
    );
    // A compensating saga was saved at every step since: nothing to mark.
    let mut s = saga();
    record(&mut s, Next::Act(0), Outcome::Succeeded, 2);
    record(&mut s, Next::Act(1), Outcome::Refused("no".into()), 3);
    assert_eq!(s.status, SagaStatus::Compensating);
    assert_eq!(statuses(&claimed(s.clone())), statuses(&s));
}

#[test]
fn a_claimed_saga_of_many_steps_that_compensates_undoes_every_possibly_sent_step_in_reverse() {
    let (_, sent) = run_saving(4, |_| Fate::Succeeds);
    let (_, stored) = &sent[3];
    let mut s = claimed(stored.clone());
    record(&mut s, Next::Act(0), Outcome::Succeeded, 600);
    record(&mut s, Next::Act(1), Outcome::Refused("no".into()), 601);
    let mut undone = Vec::new();
    while let Next::Compensate(i) = next(&s) {
        undone.push(i);
        record(&mut s, Next::Compensate(i), Outcome::Compensated, 602);
    }
    assert_eq!(undone, [3, 2, 0], "the refused step applied nothing");
    assert_eq!(s.status, SagaStatus::Cancelled);
}

#[test]
fn a_claimed_saga_that_compensates_undoes_the_possibly_sent_step_first() {
    let mut s = claimed(saga());
    record(&mut s, Next::Act(0), Outcome::GaveUp("timeout".into()), 600);
    assert_eq!(next(&s), Next::Compensate(1), "{:?}", statuses(&s));
    record(&mut s, Next::Compensate(1), Outcome::Compensated, 601);
    assert_eq!(next(&s), Next::Compensate(0));
    record(&mut s, Next::Compensate(0), Outcome::Compensated, 602);
    assert_eq!(s.status, SagaStatus::Cancelled);
    assert_eq!(
        statuses(&s),
        [StepStatus::Compensated, StepStatus::Compensated]
    );

    // Refused on replay: it applied nothing, the step after it is undone.
    let mut s = claimed(saga());
    record(&mut s, Next::Act(0), Outcome::Refused("no".into()), 600);
    assert_eq!(next(&s), Next::Compensate(1));
    record(&mut s, Next::Compensate(1), Outcome::Compensated, 601);
    assert_eq!(s.status, SagaStatus::Cancelled);
    assert_eq!(statuses(&s), [StepStatus::Refused, StepStatus::Compensated]);

    // Going forward it ends as if nothing had happened.
    let mut s = claimed(saga());
    record(&mut s, Next::Act(0), Outcome::Succeeded, 600);
    assert_eq!(next(&s), Next::Act(1));
    record(&mut s, Next::Act(1), Outcome::Succeeded, 601);
    assert_eq!(s.status, SagaStatus::Completed);
}

#[test]
fn only_a_first_attempt_success_may_go_unsaved() {
    let mut s = saga();
    record(&mut s, Next::Act(0), Outcome::Succeeded, 2);
    assert!(may_skip_save(&s, Next::Act(0)));
    record(&mut s, Next::Act(1), Outcome::Succeeded, 3);
    assert!(!may_skip_save(&s, Next::Act(1)), "the end is saved");

    // A step that needed retries spent part of its deadline: saved, so a
    // recovered saga never replays it with little of the deadline left.
    let mut s = saga();
    record(
        &mut s,
        Next::Act(0),
        Outcome::Retrying("unavailable".into()),
        2,
    );
    record(&mut s, Next::Act(0), Outcome::Succeeded, 3);
    assert_eq!(s.status, SagaStatus::Running);
    assert!(!may_skip_save(&s, Next::Act(0)));

    let mut s = saga();
    record(&mut s, Next::Act(0), Outcome::Refused("no".into()), 2);
    assert!(!may_skip_save(&s, Next::Act(0)));
}

#[test]
fn an_abandoned_saga_is_failed_with_its_steps_as_they_were_and_a_terminal_one_is_not_touched() {
    // Compensating: the refund's effect is unknown and stays so.
    let mut s = saga();
    record(&mut s, Next::Act(0), Outcome::Succeeded, 2);
    record(&mut s, Next::Act(1), Outcome::Refused("no stock".into()), 3);
    assert_eq!(next(&s), Next::Compensate(0));
    assert!(abandon(&mut s, "past the send window", 9));
    assert_eq!(s.status, SagaStatus::Failed);
    assert_eq!(s.reason.as_deref(), Some("past the send window"));
    assert_eq!(
        statuses(&s),
        [StepStatus::Compensating, StepStatus::Refused]
    );
    assert_eq!(next(&s), Next::Done);
    assert_eq!(s.updated_at_ms, 9);
    let last = s.history.last().expect("a transition");
    assert_eq!(
        (last.from.as_str(), last.to.as_str(), last.detail.as_str()),
        ("compensating", "failed", "past the send window")
    );

    // Running: the charge may or may not have been applied.
    let mut running = saga();
    assert!(abandon(&mut running, "late", 4));
    assert_eq!(running.status, SagaStatus::Failed);
    assert_eq!(
        statuses(&running),
        [StepStatus::Running, StepStatus::Pending]
    );

    // Terminal: nothing changes.
    let mut done = saga();
    record(&mut done, Next::Act(0), Outcome::Succeeded, 2);
    record(&mut done, Next::Act(1), Outcome::Succeeded, 3);
    let before = done.clone();
    assert!(!abandon(&mut done, "late", 9));
    assert_eq!(done, before);
}
