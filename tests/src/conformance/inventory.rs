//! What every `InventoryStore` must do, whatever it stores in.

use inventory_svc::store::{DEDUCT, Deduction, InventoryStore, Line, StockAddition};
use participant_kit::{
    ActionReply, Admission, CompensationEffect, ParticipantError, RefusalReason,
};
use std::sync::Arc;
use std::time::Duration;

type Store = Arc<dyn InventoryStore>;

/// Every case of this suite, for [`crate::conformance_cases`].
#[macro_export]
macro_rules! inventory_store_conformance {
    ($open:path) => {
        $crate::conformance_cases!(
            $open,
            saga_tests::conformance::inventory,
            [
                multi_line_deduct_is_all_or_nothing_and_its_refusal_is_replayed,
                duplicate_deduct_replays_without_a_second_effect,
                fifty_concurrent_duplicate_deducts_take_stock_once,
                restock_puts_back_once_even_when_repeated,
                twenty_concurrent_restocks_put_back_once,
                null_compensation_then_late_deduct_is_refused_without_effect,
                parameter_mismatch_is_refused_and_changes_nothing,
                add_stock_creates_replays_and_refuses_overflow,
                product_listing_shows_each_line_with_its_index,
                an_outside_refusal_never_overrides_an_applied_deduct,
                operations_of_a_request_id_list_records_then_lines,
            ]
        );
    };
}

fn deduction(request_id: &str, lines: &[(&str, i64)]) -> Deduction {
    Deduction::new(
        request_id.to_owned(),
        lines
            .iter()
            .map(|&(product_id, quantity)| Line {
                product_id: product_id.to_owned(),
                quantity,
            })
            .collect(),
    )
}

fn addition(request_id: &str, product_id: &str, quantity: i64) -> StockAddition {
    StockAddition {
        request_id: request_id.to_owned(),
        product_id: product_id.to_owned(),
        quantity,
    }
}

async fn stock(store: &Store, product_id: &str, quantity: i64) {
    let reply = store
        .add_stock(addition(
            &format!("stock-{product_id}-{quantity}"),
            product_id,
            quantity,
        ))
        .await
        .expect("add stock");
    assert!(
        matches!(
            reply,
            ActionReply::Applied {
                replayed: false,
                ..
            }
        ),
        "{reply:?}"
    );
}

async fn available(store: &Store, product_id: &str) -> Option<i64> {
    store
        .product(product_id.to_owned(), 100)
        .await
        .expect("product")
        .map(|p| p.available)
}

/// Statuses of the deduct lines of `product_id`, newest first.
async fn line_statuses(store: &Store, product_id: &str) -> Vec<String> {
    store
        .product(product_id.to_owned(), 100)
        .await
        .expect("product")
        .expect("exists")
        .recent_operations
        .into_iter()
        .filter(|o| o.kind == DEDUCT)
        .map(|o| o.status)
        .collect()
}

pub async fn multi_line_deduct_is_all_or_nothing_and_its_refusal_is_replayed(store: Store) {
    stock(&store, "apple", 10).await;
    stock(&store, "pear", 1).await;

    let order = deduction("o1", &[("apple", 3), ("pear", 2)]);
    let first = store
        .deduct(order.clone(), Admission::Apply)
        .await
        .expect("deduct");
    let ActionReply::Refused { refusal, replayed } = first else {
        panic!("expected a refusal, got {first:?}");
    };
    assert!(!replayed);
    assert_eq!(refusal.reason, RefusalReason::Insufficient);
    assert!(refusal.message.contains("\"pear\""), "{}", refusal.message);
    assert!(
        refusal.message.contains("has 1 units"),
        "{}",
        refusal.message
    );
    assert!(refusal.message.contains("needs 2"), "{}", refusal.message);
    assert_eq!(available(&store, "apple").await, Some(10));
    assert_eq!(available(&store, "pear").await, Some(1));

    // The same call later, even with stock now there, gets the same answer.
    stock(&store, "pear", 5).await;
    let again = store
        .deduct(order, Admission::Apply)
        .await
        .expect("deduct again");
    assert_eq!(
        again,
        ActionReply::Refused {
            refusal,
            replayed: true
        }
    );
    assert_eq!(available(&store, "apple").await, Some(10));
    assert_eq!(available(&store, "pear").await, Some(6));
    assert!(line_statuses(&store, "apple").await.is_empty());

    // Repeated products are added up before the check: 6 + 5 > 10.
    let split = store
        .deduct(
            deduction("o2", &[("apple", 6), ("pear", 1), ("apple", 5)]),
            Admission::Apply,
        )
        .await
        .expect("deduct");
    assert!(
        matches!(
            split,
            ActionReply::Refused { ref refusal, .. } if refusal.reason == RefusalReason::Insufficient
        ),
        "{split:?}"
    );
    assert_eq!(available(&store, "apple").await, Some(10));
    assert_eq!(available(&store, "pear").await, Some(6));

    // An unknown product refuses the whole order too.
    let unknown = store
        .deduct(
            deduction("o3", &[("apple", 1), ("plum", 1)]),
            Admission::Apply,
        )
        .await
        .expect("deduct");
    let ActionReply::Refused { refusal, .. } = unknown else {
        panic!("expected a refusal, got {unknown:?}");
    };
    assert_eq!(refusal.reason, RefusalReason::NotFound);
    assert!(refusal.message.contains("\"plum\""), "{}", refusal.message);
    assert_eq!(available(&store, "apple").await, Some(10));
    assert_eq!(available(&store, "plum").await, None);

    // When everything fits, every line is taken.
    let ok = store
        .deduct(
            deduction("o4", &[("apple", 6), ("pear", 1), ("apple", 4)]),
            Admission::Apply,
        )
        .await
        .expect("deduct");
    assert_eq!(
        ok,
        ActionReply::Applied {
            value: (),
            replayed: false
        }
    );
    assert_eq!(available(&store, "apple").await, Some(0));
    assert_eq!(available(&store, "pear").await, Some(5));
    assert_eq!(
        line_statuses(&store, "apple").await,
        vec!["deducted", "deducted"]
    );
}

pub async fn duplicate_deduct_replays_without_a_second_effect(store: Store) {
    stock(&store, "apple", 10).await;
    let order = deduction("o1", &[("apple", 4)]);
    let first = store
        .deduct(order.clone(), Admission::Apply)
        .await
        .expect("deduct");
    let second = store
        .deduct(order, Admission::Apply)
        .await
        .expect("deduct again");
    assert_eq!(
        first,
        ActionReply::Applied {
            value: (),
            replayed: false
        }
    );
    assert_eq!(
        second,
        ActionReply::Applied {
            value: (),
            replayed: true
        }
    );
    assert_eq!(available(&store, "apple").await, Some(6));
    assert_eq!(line_statuses(&store, "apple").await, vec!["deducted"]);
}

pub async fn fifty_concurrent_duplicate_deducts_take_stock_once(store: Store) {
    stock(&store, "apple", 100).await;
    stock(&store, "pear", 100).await;
    let order = deduction("o1", &[("apple", 7), ("pear", 2), ("apple", 1)]);
    let calls: Vec<_> = (0..50)
        .map(|_| {
            let store = store.clone();
            let order = order.clone();
            tokio::spawn(async move { store.deduct(order, Admission::Apply).await })
        })
        .collect();
    let mut fresh = 0;
    let mut replayed = 0;
    for call in calls {
        match call.await.expect("join").expect("deduct") {
            ActionReply::Applied {
                replayed: false, ..
            } => fresh += 1,
            ActionReply::Applied { replayed: true, .. } => replayed += 1,
            other => panic!("unexpected {other:?}"),
        }
    }
    assert_eq!((fresh, replayed), (1, 49));
    assert_eq!(available(&store, "apple").await, Some(92));
    assert_eq!(available(&store, "pear").await, Some(98));
    assert_eq!(
        line_statuses(&store, "apple").await,
        vec!["deducted", "deducted"]
    );
    assert_eq!(line_statuses(&store, "pear").await, vec!["deducted"]);
}

pub async fn restock_puts_back_once_even_when_repeated(store: Store) {
    stock(&store, "apple", 10).await;
    stock(&store, "pear", 3).await;
    let order = deduction("o1", &[("apple", 4), ("pear", 3), ("apple", 1)]);
    store
        .deduct(order.clone(), Admission::Apply)
        .await
        .expect("deduct");
    assert_eq!(available(&store, "apple").await, Some(5));
    assert_eq!(available(&store, "pear").await, Some(0));

    let first = store.restock(order.clone()).await.expect("restock");
    assert_eq!(first.effect, CompensationEffect::Undone);
    assert!(!first.replayed);
    for _ in 0..3 {
        let again = store.restock(order.clone()).await.expect("restock again");
        assert_eq!(again.effect, CompensationEffect::Undone);
        assert!(again.replayed);
    }
    assert_eq!(available(&store, "apple").await, Some(10));
    assert_eq!(available(&store, "pear").await, Some(3));
    assert_eq!(
        line_statuses(&store, "apple").await,
        vec!["restocked", "restocked"]
    );
    assert_eq!(line_statuses(&store, "pear").await, vec!["restocked"]);

    // A deduct retried after its restock takes nothing again, and is told
    // it was compensated since (not "applied").
    let late = store
        .deduct(order, Admission::Apply)
        .await
        .expect_err("late deduct");
    assert!(
        matches!(late, ParticipantError::AlreadyCompensated(_)),
        "{late:?}"
    );
    assert_eq!(available(&store, "apple").await, Some(10));

    // Compensating a refused deduct has nothing to undo.
    let refused = deduction("o2", &[("pear", 100)]);
    let reply = store
        .deduct(refused.clone(), Admission::Apply)
        .await
        .expect("deduct");
    assert!(matches!(reply, ActionReply::Refused { .. }), "{reply:?}");
    let result = store.restock(refused).await.expect("restock");
    assert_eq!(result.effect, CompensationEffect::NothingToUndo);
    assert_eq!(available(&store, "pear").await, Some(3));
}

pub async fn twenty_concurrent_restocks_put_back_once(store: Store) {
    stock(&store, "apple", 10).await;
    stock(&store, "pear", 10).await;
    let order = deduction("r1", &[("apple", 4), ("pear", 2), ("apple", 3)]);
    store
        .deduct(order.clone(), Admission::Apply)
        .await
        .expect("deduct");
    let calls: Vec<_> = (0..20)
        .map(|_| {
            let store = store.clone();
            let order = order.clone();
            tokio::spawn(async move { store.restock(order).await })
        })
        .collect();
    let mut fresh = 0;
    for call in calls {
        let result = call.await.expect("join").expect("restock");
        assert_eq!(result.effect, CompensationEffect::Undone);
        fresh += usize::from(!result.replayed);
    }
    assert_eq!(fresh, 1);
    assert_eq!(available(&store, "apple").await, Some(10));
    assert_eq!(available(&store, "pear").await, Some(10));
    assert_eq!(
        line_statuses(&store, "apple").await,
        vec!["restocked", "restocked"]
    );
}

pub async fn null_compensation_then_late_deduct_is_refused_without_effect(store: Store) {
    stock(&store, "apple", 10).await;
    let order = deduction("o1", &[("apple", 4)]);

    let result = store.restock(order.clone()).await.expect("restock first");
    assert_eq!(result.effect, CompensationEffect::NullCompensation);
    assert!(!result.replayed);
    assert_eq!(available(&store, "apple").await, Some(10));

    for _ in 0..2 {
        let late = store.deduct(order.clone(), Admission::Apply).await;
        assert!(
            matches!(late, Err(ParticipantError::AlreadyCompensated(_))),
            "{late:?}"
        );
    }
    assert_eq!(available(&store, "apple").await, Some(10));
    assert!(line_statuses(&store, "apple").await.is_empty());

    let again = store.restock(order).await.expect("restock again");
    assert_eq!(again.effect, CompensationEffect::NullCompensation);
    assert!(again.replayed);
}

pub async fn parameter_mismatch_is_refused_and_changes_nothing(store: Store) {
    stock(&store, "apple", 10).await;
    stock(&store, "pear", 10).await;
    store
        .deduct(
            deduction("o1", &[("apple", 3), ("pear", 1)]),
            Admission::Apply,
        )
        .await
        .expect("deduct");

    for other in [
        deduction("o1", &[("apple", 4), ("pear", 1)]),
        deduction("o1", &[("pear", 1), ("apple", 3)]),
        deduction("o1", &[("apple", 3)]),
    ] {
        let deduct = store.deduct(other.clone(), Admission::Apply).await;
        assert!(
            matches!(deduct, Err(ParticipantError::ParameterMismatch(ref m)) if m.message.contains("different parameters")),
            "{deduct:?}"
        );
        let restock = store.restock(other).await;
        assert!(
            matches!(restock, Err(ParticipantError::ParameterMismatch(_))),
            "{restock:?}"
        );
    }
    assert_eq!(available(&store, "apple").await, Some(7));
    assert_eq!(available(&store, "pear").await, Some(9));
    assert_eq!(line_statuses(&store, "apple").await, vec!["deducted"]);

    // The refused restocks left no claim behind: the right one still works.
    let result = store
        .restock(deduction("o1", &[("apple", 3), ("pear", 1)]))
        .await
        .expect("restock");
    assert_eq!(result.effect, CompensationEffect::Undone);
    assert!(!result.replayed);
    assert_eq!(available(&store, "apple").await, Some(10));
    assert_eq!(available(&store, "pear").await, Some(10));
}

pub async fn add_stock_creates_replays_and_refuses_overflow(store: Store) {
    assert_eq!(available(&store, "apple").await, None);
    let add = addition("s1", "apple", 5);
    let first = store.add_stock(add.clone()).await.expect("add stock");
    let second = store.add_stock(add.clone()).await.expect("add stock again");
    assert_eq!(
        first,
        ActionReply::Applied {
            value: 5,
            replayed: false
        }
    );
    assert_eq!(
        second,
        ActionReply::Applied {
            value: 5,
            replayed: true
        }
    );
    let mismatch = store
        .add_stock(StockAddition {
            quantity: 6,
            ..add.clone()
        })
        .await;
    assert!(
        matches!(mismatch, Err(ParticipantError::ParameterMismatch(_))),
        "{mismatch:?}"
    );
    assert_eq!(available(&store, "apple").await, Some(5));

    let overflow = store
        .add_stock(addition("s2", "apple", i64::MAX))
        .await
        .expect("add stock");
    let ActionReply::Refused {
        refusal,
        replayed: false,
    } = overflow
    else {
        panic!("expected a fresh refusal, got {overflow:?}");
    };
    assert_eq!(refusal.reason, RefusalReason::Overflow);
    let again = store
        .add_stock(addition("s2", "apple", i64::MAX))
        .await
        .expect("add stock again");
    assert_eq!(
        again,
        ActionReply::Refused {
            refusal,
            replayed: true
        }
    );
    assert_eq!(available(&store, "apple").await, Some(5));

    // Up to the last unit that fits is fine.
    let full = store
        .add_stock(addition("s3", "apple", i64::MAX - 5))
        .await
        .expect("add stock");
    assert_eq!(
        full,
        ActionReply::Applied {
            value: i64::MAX,
            replayed: false
        }
    );
    assert_eq!(available(&store, "apple").await, Some(i64::MAX));
}

pub async fn product_listing_shows_each_line_with_its_index(store: Store) {
    stock(&store, "apple", 20).await;
    stock(&store, "pear", 20).await;
    tokio::time::sleep(Duration::from_millis(3)).await;
    store
        .deduct(
            deduction("o1", &[("apple", 6), ("pear", 1), ("apple", 4)]),
            Admission::Apply,
        )
        .await
        .expect("deduct");
    tokio::time::sleep(Duration::from_millis(3)).await;
    store
        .deduct(
            deduction("o2", &[("pear", 2), ("apple", 3)]),
            Admission::Apply,
        )
        .await
        .expect("deduct");
    tokio::time::sleep(Duration::from_millis(3)).await;
    store
        .restock(deduction("o2", &[("pear", 2), ("apple", 3)]))
        .await
        .expect("restock");
    // A refused stock addition is listed too.
    store
        .add_stock(addition("s-over", "apple", i64::MAX))
        .await
        .expect("add stock");

    let apple = store
        .product("apple".into(), 100)
        .await
        .expect("product")
        .expect("exists");
    assert_eq!(apple.product_id, "apple");
    assert_eq!(apple.available, 10);
    let mut listed: Vec<_> = apple
        .recent_operations
        .iter()
        .map(|o| {
            (
                o.request_id.as_str(),
                o.kind.as_str(),
                o.status.as_str(),
                o.line_index,
                o.quantity,
            )
        })
        .collect();
    listed.sort();
    assert_eq!(
        listed,
        vec![
            ("o1", "deduct", "deducted", Some(0), 6),
            ("o1", "deduct", "deducted", Some(2), 4),
            ("o2", "deduct", "restocked", Some(1), 3),
            ("s-over", "add_stock", "refused", None, i64::MAX),
            ("stock-apple-20", "add_stock", "applied", None, 20),
        ]
    );
    assert!(
        apple
            .recent_operations
            .windows(2)
            .all(|w| w[0].recorded_at_ms >= w[1].recorded_at_ms),
        "{:?}",
        apple.recent_operations
    );
    // The stock addition came first, so it is listed last.
    assert_eq!(
        apple
            .recent_operations
            .last()
            .map(|o| o.request_id.as_str()),
        Some("stock-apple-20")
    );

    let pear = store
        .product("pear".into(), 100)
        .await
        .expect("product")
        .expect("exists");
    let mut lines: Vec<_> = pear
        .recent_operations
        .iter()
        .filter(|o| o.kind == DEDUCT)
        .map(|o| (o.request_id.as_str(), o.line_index, o.status.as_str()))
        .collect();
    lines.sort();
    assert_eq!(
        lines,
        vec![("o1", Some(1), "deducted"), ("o2", Some(0), "restocked")]
    );

    let limited = store
        .product("apple".into(), 2)
        .await
        .expect("product")
        .expect("exists");
    assert_eq!(limited.recent_operations.len(), 2);
    assert_eq!(limited.available, 10);
}

pub async fn an_outside_refusal_never_overrides_an_applied_deduct(store: Store) {
    use participant_kit::{Refusal, RefusalReason};
    stock(&store, "sku-x", 10).await;
    let outside = || Refusal::new(RefusalReason::Insufficient, "injected business refusal");
    store
        .deduct(deduction("y1", &[("sku-x", 2)]), Admission::Apply)
        .await
        .expect("deduct");
    let replayed = store
        .deduct(
            deduction("y1", &[("sku-x", 2)]),
            Admission::Refuse(outside()),
        )
        .await
        .expect("refuse");
    assert_eq!(
        replayed,
        ActionReply::Applied {
            value: (),
            replayed: true
        }
    );
    let refused = store
        .deduct(
            deduction("y2", &[("sku-x", 3)]),
            Admission::Refuse(outside()),
        )
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
        .deduct(deduction("y2", &[("sku-x", 3)]), Admission::Apply)
        .await
        .expect("deduct");
    assert!(
        matches!(after, ActionReply::Refused { replayed: true, .. }),
        "{after:?}"
    );
    assert_eq!(available(&store, "sku-x").await, Some(8));
}

/// `(kind, status, amount, line_index, subject)` of what `ListOperations`
/// would list.
async fn operations(
    store: &Store,
    request_id: &str,
) -> Vec<(String, String, i64, Option<i32>, String)> {
    store
        .operations(request_id.into())
        .await
        .expect("operations")
        .into_iter()
        .map(|o| {
            assert_eq!(o.request_id, request_id);
            (o.kind, o.status, o.amount, o.line_index, o.subject)
        })
        .collect()
}

fn op(
    kind: &str,
    status: &str,
    amount: i64,
    line_index: Option<i32>,
    subject: &str,
) -> (String, String, i64, Option<i32>, String) {
    (
        kind.into(),
        status.into(),
        amount,
        line_index,
        subject.into(),
    )
}

pub async fn operations_of_a_request_id_list_records_then_lines(store: Store) {
    stock(&store, "fig", 20).await;
    stock(&store, "kiwi", 20).await;
    assert_eq!(operations(&store, "o1").await, []);
    let order = deduction("o1", &[("fig", 6), ("kiwi", 1), ("fig", 4)]);
    store
        .deduct(order.clone(), Admission::Apply)
        .await
        .expect("deduct");
    store
        .deduct(deduction("o10", &[("fig", 1)]), Admission::Apply)
        .await
        .expect("deduct");
    assert_eq!(
        operations(&store, "o1").await,
        [
            op("deduct", "applied", 11, None, ""),
            op("deduct", "deducted", 6, Some(0), "fig"),
            op("deduct", "deducted", 1, Some(1), "kiwi"),
            op("deduct", "deducted", 4, Some(2), "fig"),
        ]
    );
    tokio::time::sleep(Duration::from_millis(3)).await;
    store.restock(order).await.expect("restock");
    assert_eq!(
        operations(&store, "o1").await,
        [
            op("deduct", "applied", 11, None, ""),
            op("restock", "undone", 11, None, ""),
            op("deduct", "restocked", 6, Some(0), "fig"),
            op("deduct", "restocked", 1, Some(1), "kiwi"),
            op("deduct", "restocked", 4, Some(2), "fig"),
        ]
    );
    // A refused deduct has its record and no line.
    store
        .deduct(deduction("o2", &[("fig", 1_000)]), Admission::Apply)
        .await
        .expect("refused deduct");
    let refused = operations(&store, "o2").await;
    assert_eq!(refused.len(), 1, "{refused:?}");
    assert_eq!(
        (refused[0].0.as_str(), refused[0].1.as_str()),
        ("deduct", "refused")
    );
}
