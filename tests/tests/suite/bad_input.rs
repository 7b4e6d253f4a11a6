//! Bad input gets INVALID_ARGUMENT naming the field — in the message for
//! people and in a `google.rpc.BadRequest` for programs, decoded here from
//! the status details — and nothing is stored.

use saga_proto::inventory::v1 as inventory;
use saga_proto::participant::v1 as participant;
use saga_proto::participant::v1::operation_history_service_client::OperationHistoryServiceClient;
use saga_proto::payment::v1 as payment;
use saga_proto::saga::v1 as pb;
use saga_tests::{Stack, order_request};
use tonic::Code;
use tonic_types::StatusExt;

/// The fields the `google.rpc.BadRequest` of `status` names, in order.
fn bad_fields(status: &tonic::Status) -> Vec<String> {
    let bad = status
        .get_details_bad_request()
        .unwrap_or_else(|| panic!("no BadRequest in {status:?}"));
    bad.field_violations.into_iter().map(|v| v.field).collect()
}

fn item(product: &str, quantity: i64, price: i64) -> pb::OrderItem {
    pb::OrderItem {
        product_id: product.into(),
        quantity,
        unit_price_cents: price,
    }
}

fn request(request_id: &str, customer: &str, items: Vec<pb::OrderItem>) -> pb::CreateOrderRequest {
    pb::CreateOrderRequest {
        request_id: request_id.into(),
        customer_id: customer.into(),
        items,
        wait: true,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_create_orders_name_the_field_and_store_nothing() {
    let stack = Stack::start().await;
    stack.deposit("alice", 1_000).await;
    stack.add_stock("sku-apple", 10).await;
    let ok = || vec![item("sku-apple", 1, 100)];
    let long = "x".repeat(129);
    // 65 characters, 130 bytes: the limit is in bytes of UTF-8.
    let wide = "é".repeat(65);
    let cases: Vec<(pb::CreateOrderRequest, &str)> = vec![
        (request("", "alice", ok()), "request_id"),
        (request(&long, "alice", ok()), "request_id"),
        (request("r", "", ok()), "customer_id"),
        (request("r", &long, ok()), "customer_id"),
        (request("r", "alice", vec![]), "items"),
        (
            request("r", "alice", vec![item("sku-apple", 1, 1); 101]),
            "items",
        ),
        (
            request("r", "alice", vec![item("", 1, 1)]),
            "items[0].product_id",
        ),
        (
            request(
                "r",
                "alice",
                vec![item("sku-apple", 1, 1), item(&long, 1, 1)],
            ),
            "items[1].product_id",
        ),
        (
            request("r", "alice", vec![item("sku-apple", 0, 1)]),
            "items[0].quantity",
        ),
        (
            request("r", "alice", vec![item("sku-apple", -3, 1)]),
            "items[0].quantity",
        ),
        (
            request("r", "alice", vec![item("sku-apple", 1, 0)]),
            "items[0].unit_price_cents",
        ),
        (
            request("r", "alice", vec![item("sku-apple", 1, -100)]),
            "items[0].unit_price_cents",
        ),
        (
            request("r", "alice", vec![item("sku-apple", i64::MAX, 2)]),
            "items[0]",
        ),
        (
            request(
                "r",
                "alice",
                vec![item("sku-apple", 1, i64::MAX), item("sku-apple", 1, 1)],
            ),
            "items",
        ),
        (request("r\u{0}", "alice", ok()), "request_id"),
        (request(&wide, "alice", ok()), "request_id"),
        (request("r", &wide, ok()), "customer_id"),
        (
            request("r", "alice", vec![item(&wide, 1, 1)]),
            "items[0].product_id",
        ),
    ];
    let mut orders = stack.orders().await;
    for (req, field) in cases {
        let err = orders
            .create_order(req.clone())
            .await
            .expect_err("must be refused");
        assert_eq!(err.code(), Code::InvalidArgument, "{req:?}: {err:?}");
        let named = err.message().split(':').next().unwrap_or_default();
        assert_eq!(named, field, "{}", err.message());
        assert_eq!(bad_fields(&err), [field], "{req:?}");
        assert!(err.get_details_error_info().is_none(), "{err:?}");
    }
    // Every bad field at once, in request order, one violation each.
    let many = orders
        .create_order(request(
            "",
            "alice",
            vec![
                item("sku-apple", 1, 1),
                item("", 0, 5),
                item("sku-pear", 2, -1),
            ],
        ))
        .await
        .expect_err("must be refused");
    assert_eq!(many.code(), Code::InvalidArgument);
    assert_eq!(
        bad_fields(&many),
        [
            "request_id",
            "items[1].product_id",
            "items[1].quantity",
            "items[2].unit_price_cents"
        ]
    );
    let described: Vec<String> = many
        .get_details_bad_request()
        .expect("BadRequest")
        .field_violations
        .into_iter()
        .map(|v| v.description)
        .collect();
    assert_eq!(described[2], "must be positive (got 0)");
    assert!(
        many.message()
            .starts_with("request_id: must not be empty; ")
    );
    // 128 bytes of multibyte characters is still an id.
    orders
        .create_order(request(&"é".repeat(64), "alice", ok()))
        .await
        .expect("a 128-byte request id");
    // Exactly 100 items is accepted (the limit is inclusive).
    let hundred = orders
        .create_order(request(
            "r-100",
            "alice",
            vec![item("sku-apple", 1, 1); 100],
        ))
        .await
        .expect("100 items");
    assert_eq!(
        hundred.into_inner().status(),
        pb::SagaStatus::Cancelled,
        "only 10 apples in stock"
    );

    let listed = stack
        .sagas()
        .await
        .list_sagas(pb::ListSagasRequest::default())
        .await
        .expect("list")
        .into_inner();
    assert_eq!(listed.sagas.len(), 2, "only the valid orders were stored");
    assert_eq!(stack.balance("alice").await, 900, "the 128-byte order");
    assert_eq!(stack.stock("sku-apple").await, 9);
    stack.stop().await;
}

/// A participant call with several bad fields names every one of them at
/// once, in the order of the request, and moves nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn participant_calls_name_every_bad_field_at_once() {
    let stack = Stack::start().await;
    stack.deposit("alice", 1_000).await;
    stack.add_stock("sku-apple", 10).await;
    let charge = payment::ChargeRequest {
        request_id: String::new(),
        customer_id: "\u{7}".into(),
        amount_cents: 0,
    };
    let err = stack
        .payments()
        .await
        .charge(charge)
        .await
        .expect_err("bad");
    assert_eq!(err.code(), Code::InvalidArgument);
    assert_eq!(
        bad_fields(&err),
        ["request_id", "customer_id", "amount_cents"]
    );
    let line = |product_id: &str, quantity| inventory::Line {
        product_id: product_id.into(),
        quantity,
    };
    let deduct = inventory::DeductRequest {
        request_id: String::new(),
        lines: vec![line("", 0), line("sku-apple", 1), line("sku-apple", -1)],
    };
    let err = stack
        .inventory()
        .await
        .deduct(deduct)
        .await
        .expect_err("bad");
    assert_eq!(
        bad_fields(&err),
        [
            "request_id",
            "lines[0].product_id",
            "lines[0].quantity",
            "lines[2].quantity"
        ]
    );
    let add = inventory::AddStockRequest {
        request_id: "ok-1".into(),
        product_id: String::new(),
        quantity: -5,
    };
    let err = stack
        .inventory()
        .await
        .add_stock(add)
        .await
        .expect_err("bad");
    assert_eq!(bad_fields(&err), ["product_id", "quantity"]);
    assert_eq!(stack.balance("alice").await, 1_000);
    assert_eq!(stack.stock("sku-apple").await, 10);
}

/// Asserts `result` is INVALID_ARGUMENT naming exactly `field`, refused
/// for its length in bytes (130: 65 two-byte characters).
fn refused_as_too_long<T: std::fmt::Debug>(
    rpc: &str,
    field: &str,
    result: Result<tonic::Response<T>, tonic::Status>,
) {
    let err = result.expect_err(rpc);
    assert_eq!(err.code(), Code::InvalidArgument, "{rpc} {field}: {err:?}");
    let named = err.message().split(':').next().unwrap_or_default();
    assert_eq!(named, field, "{rpc}: {}", err.message());
    assert_eq!(bad_fields(&err), [field], "{rpc}");
    assert!(
        err.message().contains("got 130"),
        "{rpc} {field}: refused for its 130 bytes: {}",
        err.message()
    );
}

/// Every participant RPC that takes an id refuses one of 65 characters
/// whose UTF-8 form is 130 bytes (the limit is 128 bytes, not 128
/// characters) with INVALID_ARGUMENT naming the field, and nothing moves
/// or is recorded; ids of 128 and 100 bytes of the same characters are
/// accepted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn participant_rpcs_refuse_ids_over_128_bytes_of_multibyte_characters() {
    let stack = Stack::start().await;
    stack.deposit("alice", 1_000).await;
    stack.add_stock("sku-apple", 10).await;
    let wide = "é".repeat(65);
    assert_eq!((wide.chars().count(), wide.len()), (65, 130));
    let mut payments = stack.payments().await;
    let mut stock = stack.inventory().await;
    for (request_id, customer_id, field) in [
        (wide.as_str(), "alice", "request_id"),
        ("bad-1", wide.as_str(), "customer_id"),
    ] {
        let (request_id, customer_id) = (request_id.to_owned(), customer_id.to_owned());
        let charge = payment::ChargeRequest {
            request_id: request_id.clone(),
            customer_id: customer_id.clone(),
            amount_cents: 100,
        };
        refused_as_too_long("Charge", field, payments.charge(charge).await);
        let refund = payment::RefundRequest {
            request_id: request_id.clone(),
            customer_id: customer_id.clone(),
            amount_cents: 100,
        };
        refused_as_too_long("Refund", field, payments.refund(refund).await);
        let deposit = payment::DepositRequest {
            request_id,
            customer_id,
            amount_cents: 100,
        };
        refused_as_too_long("Deposit", field, payments.deposit(deposit).await);
    }
    refused_as_too_long(
        "GetAccount",
        "customer_id",
        payments
            .get_account(payment::GetAccountRequest {
                customer_id: wide.clone(),
                operation_limit: 0,
            })
            .await,
    );

    let line = |product_id: &str| inventory::Line {
        product_id: product_id.into(),
        quantity: 1,
    };
    for (request_id, lines, field) in [
        (wide.as_str(), vec![line("sku-apple")], "request_id"),
        ("bad-2", vec![line(&wide)], "lines[0].product_id"),
        (
            "bad-3",
            vec![line("sku-apple"), line(&wide)],
            "lines[1].product_id",
        ),
    ] {
        let deduct = inventory::DeductRequest {
            request_id: request_id.into(),
            lines: lines.clone(),
        };
        refused_as_too_long("Deduct", field, stock.deduct(deduct).await);
        let restock = inventory::RestockRequest {
            request_id: request_id.into(),
            lines,
        };
        refused_as_too_long("Restock", field, stock.restock(restock).await);
    }
    for (request_id, product_id, field) in [
        (wide.as_str(), "sku-apple", "request_id"),
        ("bad-4", wide.as_str(), "product_id"),
    ] {
        let add = inventory::AddStockRequest {
            request_id: request_id.into(),
            product_id: product_id.into(),
            quantity: 1,
        };
        refused_as_too_long("AddStock", field, stock.add_stock(add).await);
    }
    refused_as_too_long(
        "GetProduct",
        "product_id",
        stock
            .get_product(inventory::GetProductRequest {
                product_id: wide.clone(),
                operation_limit: 0,
            })
            .await,
    );
    for addr in [stack.payment.addr, stack.inventory.addr] {
        let mut history = OperationHistoryServiceClient::new(saga_tests::channel(addr).await);
        refused_as_too_long(
            "ListOperations",
            "request_id",
            history
                .list_operations(participant::ListOperationsRequest {
                    request_id: wide.clone(),
                })
                .await,
        );
    }

    // Nothing moved, nothing was recorded: alice's and the apples' only
    // records are still the seeding ones.
    let account = payments
        .get_account(payment::GetAccountRequest {
            customer_id: "alice".into(),
            operation_limit: 100,
        })
        .await
        .expect("account")
        .into_inner();
    assert_eq!(account.balance_cents, 1_000);
    assert_eq!(account.recent_operations.len(), 1, "{account:?}");
    let product = stock
        .get_product(inventory::GetProductRequest {
            product_id: "sku-apple".into(),
            operation_limit: 100,
        })
        .await
        .expect("product")
        .into_inner();
    assert_eq!(product.available, 10);
    assert_eq!(product.recent_operations.len(), 1, "{product:?}");

    // 128 bytes (64 characters) is still an id, and so is 100 bytes.
    let id_128 = "é".repeat(64);
    let id_100 = "é".repeat(50);
    let charged = payments
        .charge(payment::ChargeRequest {
            request_id: id_128.clone(),
            customer_id: "alice".into(),
            amount_cents: 100,
        })
        .await
        .expect("a 128-byte request id")
        .into_inner();
    assert_eq!(charged.balance_cents, 900);
    stock
        .deduct(inventory::DeductRequest {
            request_id: id_128,
            lines: vec![line("sku-apple")],
        })
        .await
        .expect("a 128-byte request id");
    stack.deposit(&id_100, 50).await;
    assert_eq!(stack.balance(&id_100).await, 50, "a 100-byte customer id");
    stack.add_stock(&id_100, 5).await;
    assert_eq!(stack.stock(&id_100).await, 5, "a 100-byte product id");
    assert_eq!(stack.balance("alice").await, 900);
    assert_eq!(stack.stock("sku-apple").await, 9);
    stack.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_saga_queries_name_the_field() {
    let stack = Stack::start().await;
    let mut sagas = stack.sagas().await;
    let cases = [
        (
            pb::ListSagasRequest {
                status: 99,
                ..Default::default()
            },
            "status",
        ),
        (
            pb::ListSagasRequest {
                page_token: "not-a-token".into(),
                ..Default::default()
            },
            "page_token",
        ),
        (
            pb::ListSagasRequest {
                page_size: -1,
                ..Default::default()
            },
            "page_size",
        ),
        (
            pb::ListSagasRequest {
                page_size: 501,
                ..Default::default()
            },
            "page_size",
        ),
    ];
    for (req, field) in cases {
        let err = sagas.list_sagas(req).await.expect_err("refused");
        assert_eq!(err.code(), Code::InvalidArgument);
        assert!(err.message().starts_with(field), "{}", err.message());
        assert_eq!(bad_fields(&err), [field]);
    }
    let combined = sagas
        .list_sagas(pb::ListSagasRequest {
            needs_attention: true,
            status: pb::SagaStatus::Failed.into(),
            ..Default::default()
        })
        .await
        .expect_err("refused");
    assert_eq!(combined.code(), Code::InvalidArgument);
    assert_eq!(bad_fields(&combined), ["needs_attention"]);
    for (lookup, field) in [
        (None, "saga_id"),
        (
            Some(pb::get_saga_request::Lookup::SagaId(String::new())),
            "saga_id",
        ),
        (
            Some(pb::get_saga_request::Lookup::RequestId(String::new())),
            "request_id",
        ),
        (
            Some(pb::get_saga_request::Lookup::SagaId("é".repeat(65))),
            "saga_id",
        ),
    ] {
        let err = sagas
            .get_saga(pb::GetSagaRequest { lookup })
            .await
            .expect_err("refused");
        assert_eq!(err.code(), Code::InvalidArgument);
        assert!(err.message().starts_with(field), "{}", err.message());
        assert_eq!(bad_fields(&err), [field]);
    }
    for saga_id in [String::new(), "é".repeat(65)] {
        let watch = sagas
            .watch_saga(pb::WatchSagaRequest {
                saga_id: saga_id.clone(),
            })
            .await
            .expect_err("refused");
        assert_eq!(watch.code(), Code::InvalidArgument);
        assert!(
            watch.message().starts_with("saga_id"),
            "{}",
            watch.message()
        );
        assert_eq!(bad_fields(&watch), ["saga_id"]);
        let retry = sagas
            .retry_saga(pb::RetrySagaRequest { saga_id })
            .await
            .expect_err("refused");
        assert_eq!(retry.code(), Code::InvalidArgument);
        assert!(
            retry.message().starts_with("saga_id"),
            "{}",
            retry.message()
        );
        assert_eq!(bad_fields(&retry), ["saga_id"]);
    }
    stack.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_edited_page_token_is_refused() {
    use base64::Engine;
    use base64::engine::general_purpose::URL_SAFE_NO_PAD;
    let stack = Stack::start().await;
    stack.deposit("alice", 1_000).await;
    stack.add_stock("sku-apple", 10).await;
    for i in 0..3 {
        stack
            .order(&format!("page-{i}"), "alice", &[("sku-apple", 1, 1)])
            .await
            .expect("order");
    }
    let mut sagas = stack.sagas().await;
    let page = |page_token: String| pb::ListSagasRequest {
        page_size: 1,
        page_token,
        ..Default::default()
    };
    let first = sagas
        .list_sagas(page(String::new()))
        .await
        .expect("list")
        .into_inner();
    let token = first.next_page_token;
    assert!(!token.is_empty());
    let second = sagas
        .list_sagas(page(token.clone()))
        .await
        .expect("next page");
    assert_eq!(second.into_inner().sagas.len(), 1);
    // The token decodes; edit the position it carries and re-encode.
    let raw = String::from_utf8(URL_SAFE_NO_PAD.decode(&token).expect("base64")).expect("utf-8");
    let (ms, rest) = raw.split_once(':').expect("shape");
    let earlier: i64 = ms.parse::<i64>().expect("ms") - 1;
    for edited in [
        format!("{earlier}:{rest}"),
        raw.replacen('-', "0", 1),
        raw.rsplit_once(':').expect("check").0.to_owned(),
    ] {
        let err = sagas
            .list_sagas(page(URL_SAFE_NO_PAD.encode(edited)))
            .await
            .expect_err("edited token refused");
        assert_eq!(err.code(), Code::InvalidArgument);
        assert!(err.message().starts_with("page_token"), "{}", err.message());
        assert_eq!(bad_fields(&err), ["page_token"]);
    }
    stack.stop().await;
}

/// A deterministic generator, so a failure reproduces.
struct Lcg(u64);

impl Lcg {
    fn next(&mut self) -> u64 {
        self.0 = self
            .0
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        self.0 >> 11
    }
    fn pick<'a>(&mut self, from: &[&'a str]) -> &'a str {
        from[(self.next() as usize) % from.len()]
    }
    fn number(&mut self) -> i64 {
        let choices = [0, 1, -1, 2, 1000, i64::MAX, i64::MIN, i64::MAX / 2, 3];
        choices[(self.next() as usize) % choices.len()]
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_input_makes_a_service_panic_or_break_its_invariants() {
    let stack = Stack::start().await;
    stack.deposit("alice", 1_000_000).await;
    stack.add_stock("sku-apple", 1_000).await;
    let long = "é".repeat(70);
    let strings = [
        "",
        "alice",
        "sku-apple",
        "sku-apple",
        "r",
        "💥",
        long.as_str(),
        "a\tb",
        "ghost",
    ];
    let mut rng = Lcg(7);
    let mut orders = stack.orders().await;
    let mut ok = 0;
    for i in 0..300 {
        let n = (rng.next() % 4) as usize;
        let items: Vec<_> = (0..n)
            .map(|_| (rng.pick(&strings), rng.number(), rng.number()))
            .collect();
        let request_id = format!("{}{}", rng.pick(&strings), i);
        let req = order_request(&request_id, rng.pick(&strings), &items, true);
        match orders.create_order(req).await {
            Ok(_) => ok += 1,
            // Request ids are unique here, so a refusal is bad input.
            Err(e) => {
                assert_eq!(e.code(), Code::InvalidArgument, "unexpected {e:?}");
                // The details name the field the message starts with.
                let fields = bad_fields(&e);
                assert!(
                    e.message().starts_with(&format!("{}: ", fields[0])),
                    "{e:?}"
                );
            }
        }
    }
    assert!(ok > 0, "some generated orders were valid");
    // Still serving, and the books balance: what left alice's account and
    // the shelf is exactly what her completed orders took.
    let completed = stack
        .sagas()
        .await
        .list_sagas(pb::ListSagasRequest {
            status: pb::SagaStatus::Completed.into(),
            page_size: 500,
            page_token: String::new(),
            needs_attention: false,
        })
        .await
        .expect("list")
        .into_inner()
        .sagas;
    let orders: Vec<_> = completed.iter().filter_map(|s| s.order.clone()).collect();
    let spent: i64 = orders
        .iter()
        .filter(|o| o.customer_id == "alice")
        .map(|o| o.total_cents)
        .sum();
    let taken: i64 = orders
        .iter()
        .flat_map(|o| o.items.iter())
        .filter(|i| i.product_id == "sku-apple")
        .map(|i| i.quantity)
        .sum();
    assert_eq!(stack.balance("alice").await, 1_000_000 - spent);
    assert_eq!(stack.stock("sku-apple").await, 1_000 - taken);
    stack.stop().await;
}
