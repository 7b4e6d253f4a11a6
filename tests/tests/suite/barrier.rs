//! The operationHistory barrier seen from a client: duplicated, concurrent,
//! reordered and late calls to payment-svc (Charge/Refund) and inventory-svc
//! (Deduct/Restock), over real gRPC servers with real embedded stores.
//!
//! Every test checks the observable effect (balance, stock, recorded
//! operations), not only the reply.

use saga_proto::inventory::v1 as inventory;
use saga_proto::inventory::v1::inventory_service_client::InventoryServiceClient;
use saga_proto::payment::v1 as payment;
use saga_proto::payment::v1::payment_service_client::PaymentServiceClient;
use saga_tests::{ParticipantHarness, Service, Stack};
use tonic::transport::Channel;
use tonic::{Code, Status};
use tonic_types::StatusExt;

type Payments = PaymentServiceClient<Channel>;
type Inventory = InventoryServiceClient<Channel>;

// ---------------------------------------------------------------- helpers

async fn charge(
    client: &mut Payments,
    request_id: &str,
    customer: &str,
    cents: i64,
) -> Result<payment::ChargeResponse, Status> {
    client
        .charge(payment::ChargeRequest {
            request_id: request_id.into(),
            customer_id: customer.into(),
            amount_cents: cents,
        })
        .await
        .map(tonic::Response::into_inner)
}

async fn refund(
    client: &mut Payments,
    request_id: &str,
    customer: &str,
    cents: i64,
) -> Result<payment::RefundResponse, Status> {
    client
        .refund(payment::RefundRequest {
            request_id: request_id.into(),
            customer_id: customer.into(),
            amount_cents: cents,
        })
        .await
        .map(tonic::Response::into_inner)
}

async fn deposit(
    client: &mut Payments,
    request_id: &str,
    customer: &str,
    cents: i64,
) -> Result<payment::DepositResponse, Status> {
    client
        .deposit(payment::DepositRequest {
            request_id: request_id.into(),
            customer_id: customer.into(),
            amount_cents: cents,
        })
        .await
        .map(tonic::Response::into_inner)
}

async fn account(client: &mut Payments, customer: &str) -> Result<payment::Account, Status> {
    client
        .get_account(payment::GetAccountRequest {
            customer_id: customer.into(),
            operation_limit: 100,
        })
        .await
        .map(tonic::Response::into_inner)
}

fn lines(items: &[(&str, i64)]) -> Vec<inventory::Line> {
    items
        .iter()
        .map(|&(product_id, quantity)| inventory::Line {
            product_id: product_id.into(),
            quantity,
        })
        .collect()
}

async fn deduct(
    client: &mut Inventory,
    request_id: &str,
    items: &[(&str, i64)],
) -> Result<inventory::DeductResponse, Status> {
    deduct_lines(client, request_id, lines(items)).await
}

async fn deduct_lines(
    client: &mut Inventory,
    request_id: &str,
    lines: Vec<inventory::Line>,
) -> Result<inventory::DeductResponse, Status> {
    client
        .deduct(inventory::DeductRequest {
            request_id: request_id.into(),
            lines,
        })
        .await
        .map(tonic::Response::into_inner)
}

async fn restock(
    client: &mut Inventory,
    request_id: &str,
    items: &[(&str, i64)],
) -> Result<inventory::RestockResponse, Status> {
    restock_lines(client, request_id, lines(items)).await
}

async fn restock_lines(
    client: &mut Inventory,
    request_id: &str,
    lines: Vec<inventory::Line>,
) -> Result<inventory::RestockResponse, Status> {
    client
        .restock(inventory::RestockRequest {
            request_id: request_id.into(),
            lines,
        })
        .await
        .map(tonic::Response::into_inner)
}

async fn add_stock(
    client: &mut Inventory,
    request_id: &str,
    product: &str,
    units: i64,
) -> Result<inventory::AddStockResponse, Status> {
    client
        .add_stock(inventory::AddStockRequest {
            request_id: request_id.into(),
            product_id: product.into(),
            quantity: units,
        })
        .await
        .map(tonic::Response::into_inner)
}

async fn product(client: &mut Inventory, product: &str) -> Result<inventory::Product, Status> {
    client
        .get_product(inventory::GetProductRequest {
            product_id: product.into(),
            operation_limit: 100,
        })
        .await
        .map(tonic::Response::into_inner)
}

/// The deduct lines GetProduct lists for `product` and `request_id`, as
/// (line_index, quantity, status).
async fn deduct_lines_of(
    client: &mut Inventory,
    product_id: &str,
    request_id: &str,
) -> Vec<(i32, i64, String)> {
    product(client, product_id)
        .await
        .expect("get product")
        .recent_operations
        .into_iter()
        .filter(|o| o.kind == "deduct" && o.request_id == request_id)
        .map(|o| (o.line_index.unwrap_or_default(), o.amount, o.status))
        .collect()
}

/// The operations GetAccount lists for `customer` and `request_id`, as
/// (kind, status, amount_cents), sorted by kind.
async fn account_operations_of(
    client: &mut Payments,
    customer: &str,
    request_id: &str,
) -> Vec<(String, String, i64)> {
    let mut ops: Vec<_> = account(client, customer)
        .await
        .expect("get account")
        .recent_operations
        .into_iter()
        .filter(|o| o.request_id == request_id)
        .map(|o| (o.kind, o.status, o.amount))
        .collect();
    ops.sort();
    ops
}

/// Unwraps the error of `result`, checking its code.
#[track_caller]
fn refused<T: std::fmt::Debug>(result: Result<T, Status>, code: Code) -> Status {
    match result {
        Ok(reply) => panic!("expected {code:?}, got a reply: {reply:?}"),
        Err(status) => {
            assert_eq!(status.code(), code, "unexpected status: {status:?}");
            status
        }
    }
}

/// Checks an INVALID_ARGUMENT whose message starts with `field` + ':' and
/// whose `google.rpc.BadRequest` names exactly that field.
#[track_caller]
fn invalid_field<T: std::fmt::Debug>(result: Result<T, Status>, field: &str) {
    let status = refused(result, Code::InvalidArgument);
    assert!(
        status.message().starts_with(&format!("{field}:")),
        "message should start with {field:?}: {:?}",
        status.message()
    );
    let bad = status.get_details_bad_request().expect("a BadRequest");
    let fields: Vec<_> = bad
        .field_violations
        .iter()
        .map(|v| v.field.as_str())
        .collect();
    assert_eq!(fields, [field], "{status:?}");
}

/// The `google.rpc.ErrorInfo` of `status`, checked to say `reason` in
/// `domain`: read from the details, never from the message.
#[track_caller]
fn error_info(status: &Status, domain: &str, reason: &str) -> tonic_types::ErrorInfo {
    let info = status
        .get_details_error_info()
        .unwrap_or_else(|| panic!("no ErrorInfo in {status:?}"));
    assert_eq!(
        (info.domain.as_str(), info.reason.as_str()),
        (domain, reason),
        "{status:?}"
    );
    info
}

#[track_caller]
fn assert_mentions(status: &Status, words: &str) {
    assert!(
        status.message().contains(words),
        "message should mention {words:?}: {:?}",
        status.message()
    );
}

const PAY_UNDONE: saga_proto::participant::v1::CompensationEffect =
    saga_proto::participant::v1::CompensationEffect::Undone;
const INV_UNDONE: saga_proto::participant::v1::CompensationEffect =
    saga_proto::participant::v1::CompensationEffect::Undone;

// ------------------------------------------------------- 1. duplicates

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_duplicated_charge_is_replayed_and_charges_only_once() {
    let stack = Stack::start().await;
    let mut pay = stack.payments().await;
    stack.deposit("alice", 1_000).await;

    let first = charge(&mut pay, "order-1", "alice", 300).await.unwrap();
    assert_eq!(first.request_id, "order-1");
    assert_eq!(first.balance_cents, 700);
    assert!(!first.replayed);

    let second = charge(&mut pay, "order-1", "alice", 300).await.unwrap();
    assert_eq!(second.request_id, "order-1");
    assert_eq!(second.balance_cents, 700, "same result as the first reply");
    assert!(second.replayed);
    assert_eq!(stack.balance("alice").await, 700, "charged once");

    assert_eq!(
        account_operations_of(&mut pay, "alice", "order-1").await,
        vec![("charge".into(), "applied".into(), 300)]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_duplicated_deduct_is_replayed_and_takes_stock_only_once() {
    let stack = Stack::start().await;
    let mut inv = stack.inventory().await;
    stack.add_stock("apple", 10).await;

    let first = deduct(&mut inv, "order-1", &[("apple", 3)]).await.unwrap();
    assert_eq!(first.request_id, "order-1");
    assert!(!first.replayed);

    let second = deduct(&mut inv, "order-1", &[("apple", 3)]).await.unwrap();
    assert_eq!(second.request_id, "order-1");
    assert!(second.replayed);
    assert_eq!(stack.stock("apple").await, 7, "deducted once");
    assert_eq!(
        deduct_lines_of(&mut inv, "apple", "order-1").await,
        vec![(0, 3, "deducted".into())]
    );
}

// ----------------------------------------- 2. concurrent duplicates

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fifty_concurrent_duplicate_charges_charge_once() {
    let stack = Stack::start().await;
    stack.deposit("alice", 10_000).await;
    let pay = stack.payments().await;

    let tasks: Vec<_> = (0..50)
        .map(|_| {
            let mut client = pay.clone();
            tokio::spawn(async move { charge(&mut client, "order-1", "alice", 100).await })
        })
        .collect();
    let mut fresh = 0;
    let mut replayed = 0;
    for task in tasks {
        let reply = task.await.expect("task").expect("charge");
        assert_eq!(
            reply.balance_cents, 9_900,
            "every reply carries the one result"
        );
        if reply.replayed {
            replayed += 1;
        } else {
            fresh += 1;
        }
    }
    assert_eq!((fresh, replayed), (1, 49));
    assert_eq!(stack.balance("alice").await, 9_900);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fifty_concurrent_duplicate_deducts_take_stock_once() {
    let stack = Stack::start().await;
    stack.add_stock("apple", 100).await;
    stack.add_stock("pear", 100).await;
    let inv = stack.inventory().await;

    let tasks: Vec<_> = (0..50)
        .map(|_| {
            let mut client = inv.clone();
            tokio::spawn(async move {
                deduct(&mut client, "order-1", &[("apple", 2), ("pear", 5)]).await
            })
        })
        .collect();
    let mut fresh = 0;
    let mut replayed = 0;
    for task in tasks {
        let reply = task.await.expect("task").expect("deduct");
        if reply.replayed {
            replayed += 1;
        } else {
            fresh += 1;
        }
    }
    assert_eq!((fresh, replayed), (1, 49));
    assert_eq!(stack.stock("apple").await, 98);
    assert_eq!(stack.stock("pear").await, 95);
}

// ----------------------------------------------------- 3. compensation

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refund_undoes_a_charge_exactly_once_and_repeats_are_replayed() {
    let stack = Stack::start().await;
    let mut pay = stack.payments().await;
    stack.deposit("alice", 1_000).await;
    charge(&mut pay, "order-1", "alice", 300).await.unwrap();
    assert_eq!(stack.balance("alice").await, 700);

    let first = refund(&mut pay, "order-1", "alice", 300).await.unwrap();
    assert_eq!(first.request_id, "order-1");
    assert_eq!(first.effect(), PAY_UNDONE);
    assert!(!first.replayed);
    assert_eq!(stack.balance("alice").await, 1_000);

    let again = refund(&mut pay, "order-1", "alice", 300).await.unwrap();
    assert_eq!(again.effect(), PAY_UNDONE);
    assert!(again.replayed);
    assert_eq!(stack.balance("alice").await, 1_000, "no second refund");

    // A late retry of the charge does not charge again, and does not say
    // "applied" either: the charge was compensated since.
    let late = charge(&mut pay, "order-1", "alice", 300).await.unwrap_err();
    assert_eq!(late.code(), Code::FailedPrecondition, "{late:?}");
    assert!(late.message().contains("already compensated"), "{late:?}");
    assert_eq!(stack.balance("alice").await, 1_000);

    assert_eq!(
        account_operations_of(&mut pay, "alice", "order-1").await,
        vec![
            ("charge".into(), "applied".into(), 300),
            ("refund".into(), "undone".into(), 300),
        ]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn twenty_concurrent_refunds_undo_the_charge_once() {
    let stack = Stack::start().await;
    let mut pay = stack.payments().await;
    stack.deposit("alice", 1_000).await;
    charge(&mut pay, "order-1", "alice", 300).await.unwrap();

    let tasks: Vec<_> = (0..20)
        .map(|_| {
            let mut client = pay.clone();
            tokio::spawn(async move { refund(&mut client, "order-1", "alice", 300).await })
        })
        .collect();
    let mut fresh = 0;
    for task in tasks {
        let reply = task.await.expect("task").expect("refund");
        assert_eq!(reply.effect(), PAY_UNDONE);
        if !reply.replayed {
            fresh += 1;
        }
    }
    assert_eq!(fresh, 1, "exactly one refund did the undo");
    assert_eq!(stack.balance("alice").await, 1_000);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restock_puts_back_a_deduct_exactly_once_and_repeats_are_replayed() {
    let stack = Stack::start().await;
    let mut inv = stack.inventory().await;
    stack.add_stock("apple", 10).await;
    stack.add_stock("pear", 4).await;
    let order = [("apple", 3), ("pear", 4)];
    deduct(&mut inv, "order-1", &order).await.unwrap();
    assert_eq!(
        (stack.stock("apple").await, stack.stock("pear").await),
        (7, 0)
    );

    let first = restock(&mut inv, "order-1", &order).await.unwrap();
    assert_eq!(first.request_id, "order-1");
    assert_eq!(first.effect(), INV_UNDONE);
    assert!(!first.replayed);
    assert_eq!(
        (stack.stock("apple").await, stack.stock("pear").await),
        (10, 4)
    );

    let again = restock(&mut inv, "order-1", &order).await.unwrap();
    assert_eq!(again.effect(), INV_UNDONE);
    assert!(again.replayed);
    assert_eq!(
        (stack.stock("apple").await, stack.stock("pear").await),
        (10, 4),
        "no second restock"
    );

    let late = deduct(&mut inv, "order-1", &order).await.unwrap_err();
    assert_eq!(late.code(), Code::FailedPrecondition, "{late:?}");
    assert!(late.message().contains("already compensated"), "{late:?}");
    assert_eq!(
        (stack.stock("apple").await, stack.stock("pear").await),
        (10, 4),
        "a late deduct retry does not take stock again"
    );
    assert_eq!(
        deduct_lines_of(&mut inv, "apple", "order-1").await,
        vec![(0, 3, "restocked".into())]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn twenty_concurrent_restocks_put_stock_back_once() {
    let stack = Stack::start().await;
    let mut inv = stack.inventory().await;
    stack.add_stock("apple", 10).await;
    deduct(&mut inv, "order-1", &[("apple", 6)]).await.unwrap();
    assert_eq!(stack.stock("apple").await, 4);

    let tasks: Vec<_> = (0..20)
        .map(|_| {
            let mut client = inv.clone();
            tokio::spawn(async move { restock(&mut client, "order-1", &[("apple", 6)]).await })
        })
        .collect();
    let mut fresh = 0;
    for task in tasks {
        let reply = task.await.expect("task").expect("restock");
        assert_eq!(reply.effect(), INV_UNDONE);
        if !reply.replayed {
            fresh += 1;
        }
    }
    assert_eq!(fresh, 1, "exactly one restock did the undo");
    assert_eq!(stack.stock("apple").await, 10);
}

// ------------------------------------------------ 4. null compensation

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refund_before_its_charge_is_a_null_compensation_and_the_late_charge_is_refused() {
    let stack = Stack::start().await;
    let mut pay = stack.payments().await;
    stack.deposit("alice", 1_000).await;

    let early = refund(&mut pay, "order-1", "alice", 300).await.unwrap();
    assert_eq!(
        early.effect(),
        saga_proto::participant::v1::CompensationEffect::NullCompensation
    );
    assert!(!early.replayed);
    assert_eq!(stack.balance("alice").await, 1_000, "nothing refunded");

    let again = refund(&mut pay, "order-1", "alice", 300).await.unwrap();
    assert_eq!(
        again.effect(),
        saga_proto::participant::v1::CompensationEffect::NullCompensation
    );
    assert!(again.replayed);
    assert_eq!(stack.balance("alice").await, 1_000);

    for _ in 0..2 {
        let late = refused(
            charge(&mut pay, "order-1", "alice", 300).await,
            Code::FailedPrecondition,
        );
        assert_mentions(&late, "compensated");
        error_info(&late, "participant.v1", "ALREADY_COMPENSATED");
        assert_eq!(
            stack.balance("alice").await,
            1_000,
            "late charge not applied"
        );
    }

    assert_eq!(
        account_operations_of(&mut pay, "alice", "order-1").await,
        vec![
            ("charge".into(), "blocked".into(), 300),
            ("refund".into(), "null_compensation".into(), 300),
        ]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_null_refund_for_an_unknown_customer_creates_no_account() {
    let stack = Stack::start().await;
    let mut pay = stack.payments().await;

    let early = refund(&mut pay, "order-1", "nobody", 300).await.unwrap();
    assert_eq!(
        early.effect(),
        saga_proto::participant::v1::CompensationEffect::NullCompensation
    );
    refused(account(&mut pay, "nobody").await, Code::NotFound);
    let late = refused(
        charge(&mut pay, "order-1", "nobody", 300).await,
        Code::FailedPrecondition,
    );
    assert_mentions(&late, "compensated");
    refused(account(&mut pay, "nobody").await, Code::NotFound);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restock_before_its_deduct_is_a_null_compensation_and_the_late_deduct_is_refused() {
    let stack = Stack::start().await;
    let mut inv = stack.inventory().await;
    stack.add_stock("apple", 10).await;
    stack.add_stock("pear", 5).await;
    let order = [("apple", 3), ("pear", 1)];

    let early = restock(&mut inv, "order-1", &order).await.unwrap();
    assert_eq!(
        early.effect(),
        saga_proto::participant::v1::CompensationEffect::NullCompensation
    );
    assert!(!early.replayed);
    assert_eq!(
        (stack.stock("apple").await, stack.stock("pear").await),
        (10, 5),
        "nothing put back"
    );

    let again = restock(&mut inv, "order-1", &order).await.unwrap();
    assert_eq!(
        again.effect(),
        saga_proto::participant::v1::CompensationEffect::NullCompensation
    );
    assert!(again.replayed);

    for _ in 0..2 {
        let late = refused(
            deduct(&mut inv, "order-1", &order).await,
            Code::FailedPrecondition,
        );
        assert_mentions(&late, "compensated");
        error_info(&late, "participant.v1", "ALREADY_COMPENSATED");
        assert_eq!(
            (stack.stock("apple").await, stack.stock("pear").await),
            (10, 5),
            "late deduct not applied"
        );
    }
    // GetProduct lists deduct lines per product: none was taken.
    assert!(
        deduct_lines_of(&mut inv, "apple", "order-1")
            .await
            .is_empty()
    );
    assert!(
        deduct_lines_of(&mut inv, "pear", "order-1")
            .await
            .is_empty()
    );
}

// ------------------------------------- 5. request id reused differently

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reusing_a_charge_request_id_with_different_parameters_is_refused() {
    let stack = Stack::start().await;
    let mut pay = stack.payments().await;
    stack.deposit("alice", 1_000).await;
    stack.deposit("bob", 1_000).await;
    charge(&mut pay, "order-1", "alice", 300).await.unwrap();

    let other_amount = refused(
        charge(&mut pay, "order-1", "alice", 400).await,
        Code::AlreadyExists,
    );
    assert_mentions(&other_amount, "amount_cents: 300 recorded, 400 received");
    let reused = error_info(&other_amount, "participant.v1", "REQUEST_ID_REUSED");
    assert_eq!(reused.metadata["request_id"], "order-1");
    assert_eq!(reused.metadata["kind"], "charge");
    assert_eq!(reused.metadata["field"], "amount_cents");
    let other_customer = refused(
        charge(&mut pay, "order-1", "bob", 300).await,
        Code::AlreadyExists,
    );
    assert_mentions(&other_customer, "customer_id: alice recorded, bob received");
    let reused = error_info(&other_customer, "participant.v1", "REQUEST_ID_REUSED");
    assert_eq!(reused.metadata["field"], "customer_id");
    assert_eq!(stack.balance("alice").await, 700);
    assert_eq!(stack.balance("bob").await, 1_000);

    // A refund whose parameters differ from the charge is refused too, and
    // leaves no trace: the matching refund afterwards still undoes.
    let wrong_refund = refused(
        refund(&mut pay, "order-1", "alice", 400).await,
        Code::AlreadyExists,
    );
    assert_mentions(&wrong_refund, "amount_cents: 300 recorded, 400 received");
    let reused = error_info(&wrong_refund, "participant.v1", "REQUEST_ID_REUSED");
    assert_eq!(reused.metadata["field"], "amount_cents");
    let wrong_customer = refused(
        refund(&mut pay, "order-1", "bob", 300).await,
        Code::AlreadyExists,
    );
    assert_mentions(&wrong_customer, "customer_id: alice recorded, bob received");
    assert_eq!(stack.balance("alice").await, 700);
    assert_eq!(stack.balance("bob").await, 1_000);

    let right = refund(&mut pay, "order-1", "alice", 300).await.unwrap();
    assert_eq!(right.effect(), PAY_UNDONE);
    assert!(!right.replayed);
    assert_eq!(stack.balance("alice").await, 1_000);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reusing_a_deduct_request_id_with_different_lines_is_refused() {
    let stack = Stack::start().await;
    let mut inv = stack.inventory().await;
    stack.add_stock("apple", 10).await;
    stack.add_stock("pear", 10).await;
    deduct(&mut inv, "order-1", &[("apple", 2)]).await.unwrap();

    for (other, field) in [
        (
            vec![("apple", 3)],
            "lines[0].quantity: 2 recorded, 3 received",
        ),
        (
            vec![("pear", 2)],
            "lines[0].product_id: apple recorded, pear received",
        ),
        (
            vec![("apple", 2), ("pear", 1)],
            "lines: 1 recorded, 2 received",
        ),
    ] {
        let status = refused(
            deduct(&mut inv, "order-1", &other).await,
            Code::AlreadyExists,
        );
        assert_mentions(&status, field);
        let reused = error_info(&status, "participant.v1", "REQUEST_ID_REUSED");
        let named = field.split_once(": ").expect("field: difference").0;
        assert_eq!(reused.metadata["field"], named, "{status:?}");
        assert_eq!(reused.metadata["kind"], "deduct");
    }
    assert_eq!(
        (stack.stock("apple").await, stack.stock("pear").await),
        (8, 10)
    );

    for (other, field) in [
        (
            vec![("apple", 5)],
            "lines[0].quantity: 2 recorded, 5 received",
        ),
        (
            vec![("apple", 2), ("pear", 1)],
            "lines: 1 recorded, 2 received",
        ),
    ] {
        let status = refused(
            restock(&mut inv, "order-1", &other).await,
            Code::AlreadyExists,
        );
        assert_mentions(&status, field);
    }
    assert_eq!(
        (stack.stock("apple").await, stack.stock("pear").await),
        (8, 10)
    );

    let right = restock(&mut inv, "order-1", &[("apple", 2)]).await.unwrap();
    assert_eq!(right.effect(), INV_UNDONE);
    assert!(!right.replayed);
    assert_eq!(stack.stock("apple").await, 10);
}

// ------------------------------------------- 6. recorded business refusals

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_charge_refused_for_insufficient_funds_stays_refused_when_retried_after_a_deposit() {
    let stack = Stack::start().await;
    let mut pay = stack.payments().await;
    deposit(&mut pay, "dep-1", "alice", 100).await.unwrap();

    let first = refused(
        charge(&mut pay, "order-1", "alice", 250).await,
        Code::FailedPrecondition,
    );
    assert_mentions(&first, "insufficient funds");
    error_info(&first, "payment.v1", "INSUFFICIENT_FUNDS");
    assert_eq!(stack.balance("alice").await, 100);

    let topped_up = deposit(&mut pay, "dep-2", "alice", 500).await.unwrap();
    assert_eq!(topped_up.balance_cents, 600);

    let retry = refused(
        charge(&mut pay, "order-1", "alice", 250).await,
        Code::FailedPrecondition,
    );
    assert_eq!(retry.message(), first.message(), "the recorded refusal");
    error_info(&retry, "payment.v1", "INSUFFICIENT_FUNDS");
    assert_eq!(stack.balance("alice").await, 600);

    let fresh = charge(&mut pay, "order-2", "alice", 250).await.unwrap();
    assert!(!fresh.replayed);
    assert_eq!(fresh.balance_cents, 350);
    assert_eq!(stack.balance("alice").await, 350);
    assert_eq!(
        account_operations_of(&mut pay, "alice", "order-1").await,
        vec![("charge".into(), "refused".into(), 250)]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_charge_for_an_unknown_customer_is_not_found_and_stays_so_when_retried() {
    let stack = Stack::start().await;
    let mut pay = stack.payments().await;

    let unknown = refused(
        charge(&mut pay, "order-1", "ghost", 100).await,
        Code::NotFound,
    );
    error_info(&unknown, "payment.v1", "ACCOUNT_NOT_FOUND");
    refused(account(&mut pay, "ghost").await, Code::NotFound);

    deposit(&mut pay, "dep-1", "ghost", 500).await.unwrap();
    let replayed = refused(
        charge(&mut pay, "order-1", "ghost", 100).await,
        Code::NotFound,
    );
    error_info(&replayed, "payment.v1", "ACCOUNT_NOT_FOUND");
    assert_eq!(stack.balance("ghost").await, 500);
    let fresh = charge(&mut pay, "order-2", "ghost", 100).await.unwrap();
    assert_eq!(fresh.balance_cents, 400);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deduct_refused_for_short_stock_stays_refused_when_retried_after_adding_stock() {
    let stack = Stack::start().await;
    let mut inv = stack.inventory().await;
    add_stock(&mut inv, "stock-1", "apple", 2).await.unwrap();

    let first = refused(
        deduct(&mut inv, "order-1", &[("apple", 5)]).await,
        Code::FailedPrecondition,
    );
    assert_mentions(&first, "insufficient stock");
    error_info(&first, "inventory.v1", "INSUFFICIENT_STOCK");
    assert_eq!(stack.stock("apple").await, 2);

    let added = add_stock(&mut inv, "stock-2", "apple", 10).await.unwrap();
    assert_eq!(added.available, 12);

    let retry = refused(
        deduct(&mut inv, "order-1", &[("apple", 5)]).await,
        Code::FailedPrecondition,
    );
    assert_eq!(retry.message(), first.message(), "the recorded refusal");
    error_info(&retry, "inventory.v1", "INSUFFICIENT_STOCK");
    assert_eq!(stack.stock("apple").await, 12);

    let fresh = deduct(&mut inv, "order-2", &[("apple", 5)]).await.unwrap();
    assert!(!fresh.replayed);
    assert_eq!(stack.stock("apple").await, 7);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deduct_of_an_unknown_product_is_not_found_and_takes_nothing() {
    let stack = Stack::start().await;
    let mut inv = stack.inventory().await;
    stack.add_stock("apple", 10).await;

    let status = refused(
        deduct(&mut inv, "order-1", &[("apple", 1), ("plum", 1)]).await,
        Code::NotFound,
    );
    assert_mentions(&status, "plum");
    error_info(&status, "inventory.v1", "PRODUCT_NOT_FOUND");
    assert_eq!(stack.stock("apple").await, 10);
    refused(product(&mut inv, "plum").await, Code::NotFound);

    add_stock(&mut inv, "stock-plum", "plum", 3).await.unwrap();
    refused(
        deduct(&mut inv, "order-1", &[("apple", 1), ("plum", 1)]).await,
        Code::NotFound,
    );
    assert_eq!(
        (stack.stock("apple").await, stack.stock("plum").await),
        (10, 3)
    );
}

// --------------------------------------------- 7. multi-line all or nothing

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_multi_line_deduct_is_all_or_nothing_and_lines_keep_their_index() {
    let stack = Stack::start().await;
    let mut inv = stack.inventory().await;
    stack.add_stock("apple", 10).await;
    stack.add_stock("pear", 3).await;

    let short = refused(
        deduct(&mut inv, "order-1", &[("apple", 2), ("pear", 5)]).await,
        Code::FailedPrecondition,
    );
    assert_mentions(&short, "pear");
    assert_eq!(
        (stack.stock("apple").await, stack.stock("pear").await),
        (10, 3),
        "the apple line was not taken either"
    );
    assert!(
        deduct_lines_of(&mut inv, "apple", "order-1")
            .await
            .is_empty()
    );

    let order = [("apple", 2), ("pear", 1)];
    deduct(&mut inv, "order-2", &order).await.unwrap();
    assert_eq!(
        (stack.stock("apple").await, stack.stock("pear").await),
        (8, 2)
    );
    assert_eq!(
        deduct_lines_of(&mut inv, "apple", "order-2").await,
        vec![(0, 2, "deducted".into())]
    );
    assert_eq!(
        deduct_lines_of(&mut inv, "pear", "order-2").await,
        vec![(1, 1, "deducted".into())]
    );

    let back = restock(&mut inv, "order-2", &order).await.unwrap();
    assert_eq!(back.effect(), INV_UNDONE);
    assert_eq!(
        (stack.stock("apple").await, stack.stock("pear").await),
        (10, 3)
    );
    assert_eq!(
        deduct_lines_of(&mut inv, "apple", "order-2").await,
        vec![(0, 2, "restocked".into())]
    );
    assert_eq!(
        deduct_lines_of(&mut inv, "pear", "order-2").await,
        vec![(1, 1, "restocked".into())]
    );
}

// ------------------------------------ 8. compensating a refused action

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn refunding_a_refused_charge_has_nothing_to_undo() {
    let stack = Stack::start().await;
    let mut pay = stack.payments().await;
    stack.deposit("alice", 100).await;
    refused(
        charge(&mut pay, "order-1", "alice", 250).await,
        Code::FailedPrecondition,
    );

    let first = refund(&mut pay, "order-1", "alice", 250).await.unwrap();
    assert_eq!(
        first.effect(),
        saga_proto::participant::v1::CompensationEffect::NothingToUndo
    );
    assert!(!first.replayed);
    assert_eq!(stack.balance("alice").await, 100, "no money appeared");

    let again = refund(&mut pay, "order-1", "alice", 250).await.unwrap();
    assert_eq!(
        again.effect(),
        saga_proto::participant::v1::CompensationEffect::NothingToUndo
    );
    assert!(again.replayed);
    assert_eq!(stack.balance("alice").await, 100);
    assert_eq!(
        account_operations_of(&mut pay, "alice", "order-1").await,
        vec![
            ("charge".into(), "refused".into(), 250),
            ("refund".into(), "nothing_to_undo".into(), 250),
        ]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn restocking_a_refused_deduct_has_nothing_to_undo() {
    let stack = Stack::start().await;
    let mut inv = stack.inventory().await;
    stack.add_stock("apple", 10).await;
    stack.add_stock("pear", 3).await;
    let order = [("apple", 2), ("pear", 5)];
    refused(
        deduct(&mut inv, "order-1", &order).await,
        Code::FailedPrecondition,
    );

    let first = restock(&mut inv, "order-1", &order).await.unwrap();
    assert_eq!(
        first.effect(),
        saga_proto::participant::v1::CompensationEffect::NothingToUndo
    );
    assert!(!first.replayed);
    assert_eq!(
        (stack.stock("apple").await, stack.stock("pear").await),
        (10, 3),
        "no stock appeared"
    );

    let again = restock(&mut inv, "order-1", &order).await.unwrap();
    assert_eq!(
        again.effect(),
        saga_proto::participant::v1::CompensationEffect::NothingToUndo
    );
    assert!(again.replayed);
    assert_eq!(
        (stack.stock("apple").await, stack.stock("pear").await),
        (10, 3)
    );
}

// -------------------------------------------------------- 9. bad input

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_payment_input_is_rejected_naming_the_field_and_nothing_is_stored() {
    let stack = Stack::start().await;
    let mut pay = stack.payments().await;
    stack.deposit("alice", 1_000).await;
    let long = "x".repeat(129);

    invalid_field(charge(&mut pay, "", "alice", 100).await, "request_id");
    invalid_field(charge(&mut pay, &long, "alice", 100).await, "request_id");
    invalid_field(charge(&mut pay, "order-1", "", 100).await, "customer_id");
    invalid_field(charge(&mut pay, "order-1", &long, 100).await, "customer_id");
    invalid_field(
        charge(&mut pay, "order-1", "alice", 0).await,
        "amount_cents",
    );
    invalid_field(
        charge(&mut pay, "order-1", "alice", -100).await,
        "amount_cents",
    );

    invalid_field(refund(&mut pay, "", "alice", 100).await, "request_id");
    invalid_field(refund(&mut pay, &long, "alice", 100).await, "request_id");
    invalid_field(refund(&mut pay, "order-1", &long, 100).await, "customer_id");
    invalid_field(
        refund(&mut pay, "order-1", "alice", 0).await,
        "amount_cents",
    );
    invalid_field(
        refund(&mut pay, "order-1", "alice", -100).await,
        "amount_cents",
    );

    invalid_field(
        deposit(&mut pay, "dep-1", "newbie", 0).await,
        "amount_cents",
    );
    invalid_field(
        deposit(&mut pay, "dep-1", "newbie", -5).await,
        "amount_cents",
    );
    invalid_field(deposit(&mut pay, "", "newbie", 5).await, "request_id");

    assert_eq!(stack.balance("alice").await, 1_000);
    refused(account(&mut pay, "newbie").await, Code::NotFound);
    assert!(
        account_operations_of(&mut pay, "alice", "order-1")
            .await
            .is_empty()
    );

    // Nothing was recorded under the ids either: they are still fresh.
    let first = charge(&mut pay, "order-1", "alice", 100).await.unwrap();
    assert!(!first.replayed);
    assert_eq!(first.balance_cents, 900);
    let dep = deposit(&mut pay, "dep-1", "newbie", 5).await.unwrap();
    assert!(!dep.replayed);
    assert_eq!(dep.balance_cents, 5);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_inventory_input_is_rejected_naming_the_field_and_nothing_is_stored() {
    let stack = Stack::start().await;
    let mut inv = stack.inventory().await;
    stack.add_stock("apple", 200).await;
    let long = "x".repeat(129);

    invalid_field(deduct(&mut inv, "", &[("apple", 1)]).await, "request_id");
    invalid_field(deduct(&mut inv, &long, &[("apple", 1)]).await, "request_id");
    invalid_field(deduct(&mut inv, "order-1", &[]).await, "lines");
    invalid_field(
        deduct_lines(&mut inv, "order-1", lines(&[("apple", 1); 101])).await,
        "lines",
    );
    invalid_field(
        deduct(&mut inv, "order-1", &[("apple", 1), ("apple", 0)]).await,
        "lines[1].quantity",
    );
    invalid_field(
        deduct(&mut inv, "order-1", &[("apple", 1), ("apple", -3)]).await,
        "lines[1].quantity",
    );
    invalid_field(
        deduct(&mut inv, "order-1", &[(long.as_str(), 1)]).await,
        "lines[0].product_id",
    );
    invalid_field(
        deduct(&mut inv, "order-1", &[("apple", 1), ("", 1)]).await,
        "lines[1].product_id",
    );

    invalid_field(restock(&mut inv, "", &[("apple", 1)]).await, "request_id");
    invalid_field(
        restock(&mut inv, &long, &[("apple", 1)]).await,
        "request_id",
    );
    invalid_field(restock(&mut inv, "order-1", &[]).await, "lines");
    invalid_field(
        restock_lines(&mut inv, "order-1", lines(&[("apple", 1); 101])).await,
        "lines",
    );
    invalid_field(
        restock(&mut inv, "order-1", &[("apple", 1), ("apple", 0)]).await,
        "lines[1].quantity",
    );

    invalid_field(add_stock(&mut inv, "s-1", "melon", 0).await, "quantity");
    invalid_field(add_stock(&mut inv, "s-1", "melon", -1).await, "quantity");
    invalid_field(add_stock(&mut inv, "s-1", &long, 1).await, "product_id");
    invalid_field(add_stock(&mut inv, "", "melon", 1).await, "request_id");

    assert_eq!(stack.stock("apple").await, 200);
    refused(product(&mut inv, "melon").await, Code::NotFound);
    assert!(
        deduct_lines_of(&mut inv, "apple", "order-1")
            .await
            .is_empty()
    );

    // The ids are still fresh; 100 lines is the accepted maximum.
    let first = deduct_lines(&mut inv, "order-1", lines(&[("apple", 1); 100]))
        .await
        .unwrap();
    assert!(!first.replayed);
    assert_eq!(stack.stock("apple").await, 100);
    let added = add_stock(&mut inv, "s-1", "melon", 4).await.unwrap();
    assert!(!added.replayed);
    assert_eq!(added.available, 4);
}

// ------------------------------------------------------- 10. restarts

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn balances_and_recorded_charges_survive_a_payment_restart() {
    let mut stack = Stack::start().await;
    stack.deposit("alice", 1_000).await;
    {
        let mut pay = stack.payments().await;
        charge(&mut pay, "order-1", "alice", 300).await.unwrap();
        refused(
            charge(&mut pay, "order-2", "alice", 5_000).await,
            Code::FailedPrecondition,
        );
    }

    let addr = stack.payment.addr;
    let dir = stack.path();
    stack.payment.stop().await;
    stack.payment = ParticipantHarness::new(Service::Payment, &dir)
        .on(addr)
        .start()
        .await;
    assert_eq!(stack.payment.addr, addr);

    let mut pay = stack.payments().await;
    assert_eq!(stack.balance("alice").await, 700);
    let again = charge(&mut pay, "order-1", "alice", 300).await.unwrap();
    assert!(again.replayed);
    assert_eq!(again.balance_cents, 700);
    assert_eq!(stack.balance("alice").await, 700, "not charged twice");
    stack.deposit("alice", 10_000).await;
    refused(
        charge(&mut pay, "order-2", "alice", 5_000).await,
        Code::FailedPrecondition,
    );
    assert_eq!(stack.balance("alice").await, 10_700);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stock_and_recorded_deducts_survive_an_inventory_restart() {
    let mut stack = Stack::start().await;
    stack.add_stock("apple", 10).await;
    {
        let mut inv = stack.inventory().await;
        deduct(&mut inv, "order-1", &[("apple", 4)]).await.unwrap();
    }

    let addr = stack.inventory.addr;
    let dir = stack.path();
    stack.inventory.stop().await;
    stack.inventory = ParticipantHarness::new(Service::Inventory, &dir)
        .on(addr)
        .start()
        .await;

    let mut inv = stack.inventory().await;
    assert_eq!(stack.stock("apple").await, 6);
    let again = deduct(&mut inv, "order-1", &[("apple", 4)]).await.unwrap();
    assert!(again.replayed);
    assert_eq!(stack.stock("apple").await, 6, "not deducted twice");
    let back = restock(&mut inv, "order-1", &[("apple", 4)]).await.unwrap();
    assert_eq!(back.effect(), INV_UNDONE);
    assert_eq!(stack.stock("apple").await, 10);
}
