//! The loyalty rules over the embedded store, one behaviour each: what
//! Act awards, what Compensate takes back (once), whom it refuses.

use embedded_store::Durability;
use loyalty_svc::rules::{CUSTOMER_BLOCKED, LoyaltyRules, POINTS};
use participant_kit::step::{Order, OrderLine, RulesStore, SqliteSteps, StepCall, StepStore};
use participant_kit::{ActionReply, Admission, CompensationEffect};

struct Store {
    store: SqliteSteps<LoyaltyRules>,
    _dir: tempfile::TempDir,
}

fn store() -> Store {
    let dir = tempfile::tempdir().unwrap();
    let rules = LoyaltyRules::parse("blocked-1").unwrap();
    let store =
        SqliteSteps::open(&dir.path().join("loyalty.db"), Durability::Process, rules).unwrap();
    Store { store, _dir: dir }
}

fn call(saga: &str, customer: &str, unit_price_cents: i64) -> StepCall {
    StepCall {
        request_id: format!("{saga}:loyalty"),
        saga_id: saga.into(),
        step: "loyalty".into(),
        attempt: 1,
        order: Order {
            order_id: format!("order-{saga}"),
            customer_id: customer.into(),
            lines: vec![OrderLine {
                product_id: "p".into(),
                quantity: 1,
                unit_price_cents,
            }],
            total_cents: unit_price_cents,
        },
    }
}

impl Store {
    async fn points(&self, customer: &str) -> Option<i64> {
        self.store.counter(POINTS, customer.into()).await.unwrap()
    }

    async fn act(&self, call: &StepCall) -> ActionReply<String> {
        self.store
            .act(call.clone(), Admission::Apply)
            .await
            .unwrap()
    }
}

#[tokio::test]
async fn an_act_awards_one_point_per_whole_unit_of_the_total() {
    let s = store();
    let reply = s.act(&call("s-1", "ann", 2599)).await;
    assert_eq!(
        reply,
        ActionReply::Applied {
            value: "25 points to \"ann\" (now 25)".into(),
            replayed: false
        }
    );
    s.act(&call("s-2", "ann", 1000)).await;
    assert_eq!(s.points("ann").await, Some(35));
    // Under a unit: applied, no points.
    let small = s.act(&call("s-3", "bob", 99)).await;
    assert!(matches!(small, ActionReply::Applied { .. }), "{small:?}");
    assert_eq!(s.points("bob").await, Some(0));
}

#[tokio::test]
async fn a_compensation_takes_back_exactly_what_its_act_awarded_once() {
    let s = store();
    let first = call("s-1", "ann", 2500);
    s.act(&first).await;
    s.act(&call("s-2", "ann", 1000)).await;
    let undone = s.store.compensate(first.clone()).await.unwrap();
    assert_eq!(undone.effect, CompensationEffect::Undone);
    assert!(!undone.replayed);
    assert_eq!(s.points("ann").await, Some(10));
    let again = s.store.compensate(first).await.unwrap();
    assert_eq!(again.effect, CompensationEffect::Undone);
    assert!(again.replayed);
    assert_eq!(s.points("ann").await, Some(10));
}

#[tokio::test]
async fn a_blocked_customer_is_refused_and_earns_nothing() {
    let s = store();
    let blocked = call("s-1", "blocked-1", 5000);
    match s.act(&blocked).await {
        ActionReply::Refused { refusal, replayed } => {
            assert!(!replayed);
            assert!(
                refusal.message.starts_with(&format!("{CUSTOMER_BLOCKED}:")),
                "{refusal:?}"
            );
        }
        other => panic!("expected a refusal, got {other:?}"),
    }
    assert_eq!(s.points("blocked-1").await, None);
    let undo = s.store.compensate(blocked).await.unwrap();
    assert_eq!(undo.effect, CompensationEffect::NothingToUndo);
}
