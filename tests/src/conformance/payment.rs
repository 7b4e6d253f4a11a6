//! What every `PaymentStore` must do, whatever it stores in.

use participant_kit::{
    ActionReply, Admission, CompensationEffect, ParticipantError, Refusal, RefusalReason,
};
use payment_svc::store::{PaymentStore, Transfer};
use std::sync::Arc;

type Store = Arc<dyn PaymentStore>;

/// Every case of this suite, for [`crate::conformance_cases`].
#[macro_export]
macro_rules! payment_store_conformance {
    ($open:path) => {
        $crate::conformance_cases!(
            $open,
            saga_tests::conformance::payment,
            [
                duplicate_charge_replays_without_a_second_effect,
                fifty_concurrent_duplicate_charges_charge_once,
                refund_undoes_exactly_once_even_when_repeated_concurrently,
                null_compensation_blocks_the_late_charge,
                reused_request_id_with_other_parameters_changes_nothing,
                refusals_are_recorded_and_replayed,
                deposits_create_accounts_and_refuse_overflow,
                account_lists_recent_operations_newest_first,
                an_outside_refusal_never_overrides_an_applied_charge,
                operations_of_a_request_id_list_its_records_oldest_first,
            ]
        );
    };
}

fn t(request_id: &str, customer: &str, cents: i64) -> Transfer {
    Transfer::new(request_id.into(), customer.into(), cents)
}

async fn fund(store: &Store, customer: &str, cents: i64) {
    let reply = store
        .deposit(t(&format!("fund-{customer}"), customer, cents))
        .await
        .expect("deposit");
    assert!(matches!(reply, ActionReply::Applied { .. }), "{reply:?}");
}

async fn balance(store: &Store, customer: &str) -> Option<i64> {
    store
        .account(customer.into(), 10)
        .await
        .expect("account")
        .map(|a| a.balance_cents)
}

pub async fn duplicate_charge_replays_without_a_second_effect(store: Store) {
    fund(&store, "alice", 1_000).await;
    let first = store
        .charge(t("c1", "alice", 300), Admission::Apply)
        .await
        .expect("charge");
    assert_eq!(
        first,
        ActionReply::Applied {
            value: 700,
            replayed: false
        }
    );
    let again = store
        .charge(t("c1", "alice", 300), Admission::Apply)
        .await
        .expect("charge again");
    assert_eq!(
        again,
        ActionReply::Applied {
            value: 700,
            replayed: true
        }
    );
    assert_eq!(balance(&store, "alice").await, Some(700));
}

pub async fn fifty_concurrent_duplicate_charges_charge_once(store: Store) {
    fund(&store, "alice", 10_000).await;
    let calls: Vec<_> = (0..50)
        .map(|_| {
            let store = store.clone();
            tokio::spawn(
                async move { store.charge(t("c50", "alice", 100), Admission::Apply).await },
            )
        })
        .collect();
    let mut fresh = 0;
    for call in calls {
        match call.await.expect("join").expect("charge") {
            ActionReply::Applied { value, replayed } => {
                assert_eq!(value, 9_900);
                fresh += usize::from(!replayed);
            }
            other => panic!("unexpected {other:?}"),
        }
    }
    assert_eq!(fresh, 1);
    assert_eq!(balance(&store, "alice").await, Some(9_900));
}

pub async fn refund_undoes_exactly_once_even_when_repeated_concurrently(store: Store) {
    fund(&store, "alice", 1_000).await;
    store
        .charge(t("r1", "alice", 400), Admission::Apply)
        .await
        .expect("charge");
    let calls: Vec<_> = (0..20)
        .map(|_| {
            let store = store.clone();
            tokio::spawn(async move { store.refund(t("r1", "alice", 400)).await })
        })
        .collect();
    let mut fresh = 0;
    for call in calls {
        let result = call.await.expect("join").expect("refund");
        assert_eq!(result.effect, CompensationEffect::Undone);
        fresh += usize::from(!result.replayed);
    }
    assert_eq!(fresh, 1);
    assert_eq!(balance(&store, "alice").await, Some(1_000));
    // A late duplicate of the charge does not charge again, and is told the
    // charge was compensated since (not "applied").
    let late = store
        .charge(t("r1", "alice", 400), Admission::Apply)
        .await
        .expect_err("late charge");
    assert!(
        matches!(late, ParticipantError::AlreadyCompensated(_)),
        "{late:?}"
    );
    assert_eq!(balance(&store, "alice").await, Some(1_000));
    // So is an outside refusal of it.
    let refused = store
        .charge(
            t("r1", "alice", 400),
            Admission::Refuse(Refusal::new(RefusalReason::Insufficient, "injected")),
        )
        .await
        .expect_err("late refused charge");
    assert!(matches!(refused, ParticipantError::AlreadyCompensated(_)));
}

pub async fn null_compensation_blocks_the_late_charge(store: Store) {
    fund(&store, "alice", 1_000).await;
    let null = store
        .refund(t("n1", "alice", 100))
        .await
        .expect("refund first");
    assert_eq!(null.effect, CompensationEffect::NullCompensation);
    assert!(!null.replayed);
    let again = store
        .refund(t("n1", "alice", 100))
        .await
        .expect("refund again");
    assert_eq!(again.effect, CompensationEffect::NullCompensation);
    assert!(again.replayed);
    let late = store
        .charge(t("n1", "alice", 100), Admission::Apply)
        .await
        .expect_err("hanging charge refused");
    assert!(
        matches!(late, ParticipantError::AlreadyCompensated(_)),
        "{late:?}"
    );
    assert_eq!(balance(&store, "alice").await, Some(1_000));
}

pub async fn reused_request_id_with_other_parameters_changes_nothing(store: Store) {
    fund(&store, "alice", 1_000).await;
    fund(&store, "bob", 1_000).await;
    store
        .charge(t("m1", "alice", 100), Admission::Apply)
        .await
        .expect("charge");
    for other in [t("m1", "alice", 101), t("m1", "bob", 100)] {
        let err = store
            .charge(other, Admission::Apply)
            .await
            .expect_err("mismatch");
        assert!(
            matches!(err, ParticipantError::ParameterMismatch(_)),
            "{err:?}"
        );
        assert!(err.to_string().contains("different parameters"), "{err}");
    }
    let err = store
        .refund(t("m1", "alice", 5))
        .await
        .expect_err("mismatched refund");
    assert!(
        matches!(err, ParticipantError::ParameterMismatch(_)),
        "{err:?}"
    );
    assert_eq!(balance(&store, "alice").await, Some(900));
    assert_eq!(balance(&store, "bob").await, Some(1_000));
    // The refused refund claimed nothing: the real one still undoes.
    let refund = store.refund(t("m1", "alice", 100)).await.expect("refund");
    assert_eq!(
        (refund.effect, refund.replayed),
        (CompensationEffect::Undone, false)
    );
}

pub async fn refusals_are_recorded_and_replayed(store: Store) {
    fund(&store, "bob", 100).await;
    let refused = store
        .charge(t("f1", "bob", 250), Admission::Apply)
        .await
        .expect("charge");
    let ActionReply::Refused {
        refusal,
        replayed: false,
    } = refused
    else {
        panic!("expected a fresh refusal, got {refused:?}")
    };
    assert_eq!(refusal.reason, RefusalReason::Insufficient);
    store.deposit(t("more", "bob", 500)).await.expect("deposit");
    let again = store
        .charge(t("f1", "bob", 250), Admission::Apply)
        .await
        .expect("charge again");
    assert!(
        matches!(again, ActionReply::Refused { replayed: true, .. }),
        "{again:?}"
    );
    assert_eq!(balance(&store, "bob").await, Some(600));
    let unknown = store
        .charge(t("f2", "nobody", 1), Admission::Apply)
        .await
        .expect("charge");
    let ActionReply::Refused { refusal, .. } = unknown else {
        panic!("{unknown:?}")
    };
    assert_eq!(refusal.reason, RefusalReason::NotFound);
    assert_eq!(balance(&store, "nobody").await, None);
    // Compensating a refused charge has nothing to undo.
    let undo = store.refund(t("f1", "bob", 250)).await.expect("refund");
    assert_eq!(undo.effect, CompensationEffect::NothingToUndo);
    assert_eq!(balance(&store, "bob").await, Some(600));
}

pub async fn deposits_create_accounts_and_refuse_overflow(store: Store) {
    assert_eq!(balance(&store, "carol").await, None);
    let first = store
        .deposit(t("d1", "carol", i64::MAX - 5))
        .await
        .expect("deposit");
    assert_eq!(
        first,
        ActionReply::Applied {
            value: i64::MAX - 5,
            replayed: false
        }
    );
    let replay = store
        .deposit(t("d1", "carol", i64::MAX - 5))
        .await
        .expect("replay");
    assert_eq!(
        replay,
        ActionReply::Applied {
            value: i64::MAX - 5,
            replayed: true
        }
    );
    let over = store.deposit(t("d2", "carol", 6)).await.expect("deposit");
    let ActionReply::Refused { refusal, .. } = over else {
        panic!("{over:?}")
    };
    assert_eq!(refusal.reason, RefusalReason::Overflow);
    assert_eq!(balance(&store, "carol").await, Some(i64::MAX - 5));
}

pub async fn account_lists_recent_operations_newest_first(store: Store) {
    fund(&store, "dave", 1_000).await;
    tokio::time::sleep(std::time::Duration::from_millis(3)).await;
    store
        .charge(t("o1", "dave", 10), Admission::Apply)
        .await
        .expect("charge");
    tokio::time::sleep(std::time::Duration::from_millis(3)).await;
    store.refund(t("o1", "dave", 10)).await.expect("refund");
    let account = store
        .account("dave".into(), 10)
        .await
        .expect("account")
        .expect("exists");
    let kinds: Vec<_> = account
        .recent_operations
        .iter()
        .map(|o| (o.kind.as_str(), o.status.as_str()))
        .collect();
    assert_eq!(
        kinds,
        [
            ("refund", "undone"),
            ("charge", "applied"),
            ("deposit", "applied")
        ]
    );
    let limited = store
        .account("dave".into(), 1)
        .await
        .expect("account")
        .expect("exists");
    assert_eq!(limited.recent_operations.len(), 1);
}

pub async fn an_outside_refusal_never_overrides_an_applied_charge(store: Store) {
    fund(&store, "erin", 1_000).await;
    let outside = || Refusal::new(RefusalReason::Insufficient, "injected business refusal");
    // Applied first (its reply lost, say): a later refusal replays "applied".
    store
        .charge(t("x1", "erin", 100), Admission::Apply)
        .await
        .expect("charge");
    let replayed = store
        .charge(t("x1", "erin", 100), Admission::Refuse(outside()))
        .await
        .expect("refuse");
    assert_eq!(
        replayed,
        ActionReply::Applied {
            value: 900,
            replayed: true
        }
    );
    // Refused first: recorded, so the charge itself now replays the refusal.
    let refused = store
        .charge(t("x2", "erin", 100), Admission::Refuse(outside()))
        .await
        .expect("refuse");
    assert!(
        matches!(
            refused,
            ActionReply::Refused {
                replayed: false,
                ..
            }
        ),
        "{refused:?}"
    );
    let after = store
        .charge(t("x2", "erin", 100), Admission::Apply)
        .await
        .expect("charge");
    let ActionReply::Refused {
        refusal,
        replayed: true,
    } = after
    else {
        panic!("{after:?}")
    };
    assert_eq!(refusal.message, "injected business refusal");
    assert_eq!(balance(&store, "erin").await, Some(900));
    // A parameter mismatch is still refused loudly.
    let err = store
        .charge(t("x1", "erin", 5), Admission::Refuse(outside()))
        .await
        .expect_err("mismatch");
    assert!(
        matches!(err, ParticipantError::ParameterMismatch(_)),
        "{err:?}"
    );
}

/// `(kind, status, amount, subject)` of what `ListOperations` would list.
async fn operations(store: &Store, request_id: &str) -> Vec<(String, String, i64, String)> {
    store
        .operations(request_id.into())
        .await
        .expect("operations")
        .into_iter()
        .map(|o| {
            assert_eq!(o.request_id, request_id);
            assert_eq!(o.line_index, None);
            (o.kind, o.status, o.amount, o.subject)
        })
        .collect()
}

fn op(kind: &str, status: &str, amount: i64, subject: &str) -> (String, String, i64, String) {
    (kind.into(), status.into(), amount, subject.into())
}

pub async fn operations_of_a_request_id_list_its_records_oldest_first(store: Store) {
    fund(&store, "gina", 1_000).await;
    assert_eq!(operations(&store, "o1").await, []);
    store
        .charge(t("o1", "gina", 300), Admission::Apply)
        .await
        .expect("charge");
    // Request ids sharing a prefix are other request ids.
    store
        .charge(t("o10", "gina", 1), Admission::Apply)
        .await
        .expect("charge");
    assert_eq!(
        operations(&store, "o1").await,
        [op("charge", "applied", 300, "gina")]
    );
    tokio::time::sleep(std::time::Duration::from_millis(3)).await;
    store.refund(t("o1", "gina", 300)).await.expect("refund");
    assert_eq!(
        operations(&store, "o1").await,
        [
            op("charge", "applied", 300, "gina"),
            op("refund", "undone", 300, "gina")
        ]
    );
    // A compensation before its action: the blocked action and the null
    // compensation are both listed.
    store
        .refund(t("n1", "gina", 5))
        .await
        .expect("refund first");
    let mut null = operations(&store, "n1").await;
    null.sort();
    assert_eq!(
        null,
        [
            op("charge", "blocked", 5, "gina"),
            op("refund", "null_compensation", 5, "gina")
        ]
    );
    // A refusal is a record too.
    store
        .charge(t("r1", "nobody", 5), Admission::Apply)
        .await
        .expect("refused charge");
    let refused = operations(&store, "r1").await;
    assert_eq!(refused.len(), 1, "{refused:?}");
    assert_eq!(
        (refused[0].0.as_str(), refused[0].1.as_str()),
        ("charge", "refused")
    );
}
