//! The payment rules (`payment_svc::store::ledger`), one test each, over
//! the embedded store — the ledger running on SQLite's `LedgerTx` inside
//! the kit's transaction runner — in a temp dir; no gRPC.
//!
//! The barrier's own rules (replay, reuse with other parameters, null
//! compensation, concurrent duplicates) are tested once in participant-kit
//! (`tests/barrier_rules.rs`), and what every payment store must do on
//! both backends in the `tests` crate's conformance suite; these are the
//! money rules at their edges: the exact balance, one cent over, a balance
//! at `i64::MAX`.

use embedded_store::Durability;
use participant_kit::{
    ActionReply, Admission, CompensationEffect, CompensationResult, OperationLog, ParticipantError,
    Refusal, RefusalReason,
};
use payment_svc::store::{PaymentStore, SqlitePaymentStore, Transfer};

struct Ledger {
    store: SqlitePaymentStore,
    _dir: tempfile::TempDir,
}

fn open() -> Ledger {
    let dir = tempfile::tempdir().expect("temp dir");
    let store = SqlitePaymentStore::open(&dir.path().join("payment.db"), Durability::Process)
        .expect("open payment store");
    Ledger { store, _dir: dir }
}

fn t(request_id: &str, customer: &str, cents: i64) -> Transfer {
    Transfer {
        parameters: None,
        request_id: request_id.to_owned(),
        customer_id: customer.to_owned(),
        amount_cents: cents,
    }
}

impl Ledger {
    async fn deposit(&self, request_id: &str, customer: &str, cents: i64) -> ActionReply<i64> {
        let deposit = t(request_id, customer, cents);
        self.store.deposit(deposit).await.expect("deposit")
    }

    async fn charge(&self, request_id: &str, customer: &str, cents: i64) -> ActionReply<i64> {
        let charge = t(request_id, customer, cents);
        self.store
            .charge(charge, Admission::Apply)
            .await
            .expect("charge")
    }

    async fn refund(
        &self,
        request_id: &str,
        customer: &str,
        cents: i64,
    ) -> Result<CompensationResult, ParticipantError> {
        self.store.refund(t(request_id, customer, cents)).await
    }

    async fn balance(&self, customer: &str) -> Option<i64> {
        let account = self.store.account(customer.to_owned(), 0).await;
        account.expect("account").map(|a| a.balance_cents)
    }

    /// `(kind, status, detail)` of what is recorded under `request_id`.
    async fn recorded(&self, request_id: &str) -> Vec<(String, String, String)> {
        let mut ops = self
            .store
            .operations(request_id.to_owned())
            .await
            .expect("operations");
        ops.sort_by(|a, b| a.kind.cmp(&b.kind));
        ops.into_iter()
            .map(|o| (o.kind, o.status, o.detail))
            .collect()
    }
}

fn row(kind: &str, status: &str, detail: &str) -> (String, String, String) {
    (kind.to_owned(), status.to_owned(), detail.to_owned())
}

fn applied(value: i64) -> ActionReply<i64> {
    ActionReply::Applied {
        value,
        replayed: false,
    }
}

fn fresh_refusal(reply: ActionReply<i64>) -> Refusal {
    match reply {
        ActionReply::Refused {
            refusal,
            replayed: false,
        } => refusal,
        other => panic!("expected a fresh refusal, got {other:?}"),
    }
}

fn compensation(effect: CompensationEffect, replayed: bool) -> CompensationResult {
    CompensationResult { effect, replayed }
}

#[tokio::test]
async fn a_charge_within_the_balance_takes_exactly_its_amount() {
    let l = open();
    l.deposit("d1", "alice", 1_000).await;

    assert_eq!(l.charge("c1", "alice", 300).await, applied(700));
    assert_eq!(l.balance("alice").await, Some(700));
    assert_eq!(l.recorded("c1").await, [row("charge", "applied", "700")]);

    // The whole balance is within it.
    assert_eq!(l.charge("c2", "alice", 700).await, applied(0));
    assert_eq!(l.balance("alice").await, Some(0));
}

#[tokio::test]
async fn a_charge_beyond_the_balance_is_refused_and_moves_nothing() {
    let l = open();
    l.deposit("d1", "alice", 1_000).await;

    let refusal = fresh_refusal(l.charge("c1", "alice", 1_001).await);
    assert_eq!(refusal.reason, RefusalReason::Insufficient);
    assert_eq!(
        refusal.message,
        "insufficient funds: customer \"alice\" has 1000 cents, charge needs 1001"
    );
    assert_eq!(l.balance("alice").await, Some(1_000));
    let detail = format!("insufficient:{}", refusal.message);
    assert_eq!(l.recorded("c1").await, [row("charge", "refused", &detail)]);
}

#[tokio::test]
async fn a_charge_for_an_unknown_customer_is_refused_and_opens_no_account() {
    let l = open();

    let refusal = fresh_refusal(l.charge("c1", "nobody", 1).await);
    assert_eq!(refusal.reason, RefusalReason::NotFound);
    assert_eq!(refusal.message, "customer \"nobody\" has no account");
    assert_eq!(l.balance("nobody").await, None);
}

#[tokio::test]
async fn a_refund_restores_the_charge_exactly_once() {
    let l = open();
    l.deposit("d1", "alice", 1_000).await;
    l.charge("c1", "alice", 300).await;
    // Another charge in between: the refund adds back the 300, it does
    // not restore an earlier balance.
    l.charge("c2", "alice", 50).await;

    let refund = l.refund("c1", "alice", 300).await.expect("refund");
    assert_eq!(refund, compensation(CompensationEffect::Undone, false));
    assert_eq!(l.balance("alice").await, Some(950));

    let again = l.refund("c1", "alice", 300).await.expect("refund again");
    assert_eq!(again, compensation(CompensationEffect::Undone, true));
    assert_eq!(l.balance("alice").await, Some(950), "restored once");
    assert_eq!(
        l.recorded("c1").await,
        [row("charge", "applied", "700"), row("refund", "undone", "")]
    );
}

#[tokio::test]
async fn a_refund_of_a_refused_charge_has_nothing_to_undo() {
    let l = open();
    l.deposit("d1", "alice", 100).await;
    fresh_refusal(l.charge("c1", "alice", 250).await);

    let refund = l.refund("c1", "alice", 250).await.expect("refund");
    assert_eq!(
        refund,
        compensation(CompensationEffect::NothingToUndo, false)
    );
    assert_eq!(l.balance("alice").await, Some(100), "no money appears");
}

#[tokio::test]
async fn a_refund_of_a_charge_never_received_moves_nothing_and_refuses_the_charge_later() {
    let l = open();
    l.deposit("d1", "alice", 100).await;

    let refund = l.refund("c1", "alice", 40).await.expect("refund");
    assert_eq!(
        refund,
        compensation(CompensationEffect::NullCompensation, false)
    );
    assert_eq!(l.balance("alice").await, Some(100));
    let late = l.store.charge(t("c1", "alice", 40), Admission::Apply).await;
    assert!(
        matches!(late, Err(ParticipantError::AlreadyCompensated(_))),
        "{late:?}"
    );
    assert_eq!(l.balance("alice").await, Some(100));

    // For a customer without an account, no account is opened.
    let refund = l.refund("c2", "nobody", 40).await.expect("refund");
    assert_eq!(refund.effect, CompensationEffect::NullCompensation);
    assert_eq!(l.balance("nobody").await, None);
}

#[tokio::test]
async fn a_deposit_opens_the_account_then_adds_to_it() {
    let l = open();

    assert_eq!(l.deposit("d1", "carol", 500).await, applied(500));
    assert_eq!(l.deposit("d2", "carol", 250).await, applied(750));
    assert_eq!(l.balance("carol").await, Some(750));
    assert_eq!(l.recorded("d2").await, [row("deposit", "applied", "750")]);
}

#[tokio::test]
async fn a_deposit_that_would_overflow_is_refused_and_keeps_the_balance() {
    let l = open();
    l.deposit("d1", "carol", i64::MAX - 5).await;

    // Up to i64::MAX exactly is a balance.
    assert_eq!(l.deposit("d2", "carol", 5).await, applied(i64::MAX));
    let refusal = fresh_refusal(l.deposit("d3", "carol", 1).await);
    assert_eq!(refusal.reason, RefusalReason::Overflow);
    assert!(
        refusal.message.contains(&i64::MAX.to_string()),
        "{}",
        refusal.message
    );
    assert_eq!(l.balance("carol").await, Some(i64::MAX));
    let big = fresh_refusal(l.deposit("d4", "carol", i64::MAX).await);
    assert_eq!(big.reason, RefusalReason::Overflow);
    assert_eq!(l.balance("carol").await, Some(i64::MAX));
}

/// A refund cannot be refused (its charge was applied), so one that would
/// overflow is an error and nothing of it is recorded: the same refund
/// succeeds once there is room.
#[tokio::test]
async fn a_refund_that_would_overflow_is_out_of_range_and_succeeds_once_there_is_room() {
    let l = open();
    l.deposit("d1", "dave", 100).await;
    l.charge("c1", "dave", 40).await;
    l.deposit("d2", "dave", i64::MAX - 60).await;
    assert_eq!(l.balance("dave").await, Some(i64::MAX));

    let over = l.refund("c1", "dave", 40).await;
    assert!(
        matches!(over, Err(ParticipantError::OutOfRange(ref m)) if m.contains("overflow")),
        "{over:?}"
    );
    assert_eq!(l.balance("dave").await, Some(i64::MAX));
    assert_eq!(l.recorded("c1").await, [row("charge", "applied", "60")]);

    l.charge("c2", "dave", 40).await;
    let refund = l.refund("c1", "dave", 40).await.expect("refund");
    assert_eq!(refund, compensation(CompensationEffect::Undone, false));
    assert_eq!(l.balance("dave").await, Some(i64::MAX));
}

/// The gRPC adapter rejects these first; the rules refuse them too, so a
/// direct call can neither credit money through Charge nor take it
/// through Deposit, and is told why instead of "store unavailable".
#[tokio::test]
async fn an_amount_that_is_not_positive_is_out_of_range_and_moves_nothing() {
    let l = open();
    l.deposit("d1", "alice", 100).await;
    let out_of_range = |result: &Result<_, ParticipantError>| matches!(result, Err(ParticipantError::OutOfRange(m)) if m.contains("must be positive"));

    for cents in [0, -5, i64::MIN] {
        let charge = l
            .store
            .charge(t("c1", "alice", cents), Admission::Apply)
            .await;
        assert!(out_of_range(&charge.map(|_| ())), "charge {cents}");
        let deposit = l.store.deposit(t("d2", "alice", cents)).await;
        assert!(out_of_range(&deposit.map(|_| ())), "deposit {cents}");
        let refund = l.refund("c1", "alice", cents).await;
        assert!(out_of_range(&refund.map(|_| ())), "refund {cents}");
    }
    assert_eq!(l.balance("alice").await, Some(100));
    assert_eq!(l.recorded("c1").await, []);
    assert_eq!(l.recorded("d2").await, []);
}
