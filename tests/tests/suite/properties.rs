//! Random well-typed requests to every RPC of the three services (and the
//! `OperationHistoryService` both participants serve), over
//! gRPC (proptest, shrinking on failure): whatever arrives, no service
//! panics or stops answering; every refusal carries a documented code for
//! that RPC, and an INVALID_ARGUMENT names one of the request's fields
//! (`items[3].quantity: …`); and a refused call changes nothing — no
//! balance, no stock, no saga.

use proptest::prelude::*;
use proptest::test_runner::{Config, TestCaseError, TestRunner};
use saga_proto::faults::v1 as faults;
use saga_proto::faults::v1::fault_service_client::FaultServiceClient;
use saga_proto::inventory::v1 as inventory;
use saga_proto::participant::v1 as participant;
use saga_proto::participant::v1::operation_history_service_client::OperationHistoryServiceClient;
use saga_proto::payment::v1 as payment;
use saga_proto::saga::v1 as saga;
use saga_tests::Stack;
use std::time::Duration;
use tonic::Code;

const CUSTOMERS: [&str; 2] = ["alice", "bob"];
const PRODUCTS: [&str; 2] = ["sku-apple", "sku-pear"];

/// Ids: known ones (so some calls succeed), empty, long, multibyte,
/// control characters, anything printable.
fn id() -> impl Strategy<Value = String> {
    prop_oneof![
        3 => proptest::sample::select(vec!["alice", "bob", "sku-apple", "sku-pear", "r-1"])
            .prop_map(str::to_owned),
        1 => Just(String::new()),
        1 => "[a-z]{120,140}",
        1 => "é{60,70}",
        1 => "[a-z]{0,3}[\u{0}-\u{1f}][a-z]{0,3}",
        2 => "\\PC{0,20}",
    ]
}

/// Amounts: ordinary, zero, negative, huge, the extremes.
fn amount() -> impl Strategy<Value = i64> {
    prop_oneof![
        4 => 1i64..500,
        1 => Just(0i64),
        1 => -1000i64..0,
        1 => Just(i64::MAX),
        1 => Just(i64::MIN),
        1 => any::<i64>(),
    ]
}

fn item() -> impl Strategy<Value = saga::OrderItem> {
    (id(), amount(), amount()).prop_map(|(product_id, quantity, price)| saga::OrderItem {
        product_id,
        quantity,
        unit_price_cents: price,
    })
}

fn items() -> impl Strategy<Value = Vec<saga::OrderItem>> {
    prop_oneof![
        8 => proptest::collection::vec(item(), 0..4),
        1 => proptest::collection::vec(item(), 101..=101),
    ]
}

fn line() -> impl Strategy<Value = inventory::Line> {
    (id(), amount()).prop_map(|(product_id, quantity)| inventory::Line {
        product_id,
        quantity,
    })
}

fn lines() -> impl Strategy<Value = Vec<inventory::Line>> {
    prop_oneof![
        8 => proptest::collection::vec(line(), 0..4),
        1 => proptest::collection::vec(line(), 101..=101),
    ]
}

/// Everything a refused call must not change.
#[derive(Debug, PartialEq)]
struct Books {
    balances: Vec<i64>,
    stock: Vec<i64>,
    sagas: usize,
}

/// The stack and a runtime to call it from the (synchronous) runner.
struct World {
    runtime: tokio::runtime::Runtime,
    stack: Stack,
}

impl World {
    fn start() -> World {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .expect("runtime");
        let stack = runtime.block_on(async {
            let stack = Stack::start().await;
            for customer in CUSTOMERS {
                stack.deposit(customer, 1_000_000).await;
            }
            for product in PRODUCTS {
                stack.add_stock(product, 1_000).await;
            }
            stack
        });
        World { runtime, stack }
    }

    /// The books — also proof that every service still answers.
    async fn books(&self) -> Books {
        let mut balances = Vec::new();
        for customer in CUSTOMERS {
            balances.push(self.stack.balance(customer).await);
        }
        let mut stock = Vec::new();
        for product in PRODUCTS {
            stock.push(self.stack.stock(product).await);
        }
        let mut sagas = 0;
        let mut page_token = String::new();
        loop {
            let page = self
                .stack
                .sagas()
                .await
                .list_sagas(saga::ListSagasRequest {
                    page_size: 500,
                    page_token,
                    ..Default::default()
                })
                .await
                .expect("ListSagas answers")
                .into_inner();
            sagas += page.sagas.len();
            if page.next_page_token.is_empty() {
                break;
            }
            page_token = page.next_page_token;
        }
        Books {
            balances,
            stock,
            sagas,
        }
    }

    /// Runs `cases` random requests from `strategy` through `call`, which
    /// returns the call's result; checks the refusal rules around it.
    fn check<S, F, Fut, T>(
        &self,
        rpc: &str,
        strategy: S,
        allowed: &'static [Code],
        fields: &'static [&'static str],
        call: F,
    ) where
        S: Strategy,
        S::Value: std::fmt::Debug + Clone,
        F: Fn(S::Value) -> Fut,
        Fut: std::future::Future<Output = Result<T, tonic::Status>>,
    {
        let mut runner = TestRunner::new(Config {
            cases: 48,
            failure_persistence: None,
            ..Config::default()
        });
        let outcome = runner.run(&strategy, |request| {
            self.runtime.block_on(async {
                let before = self.books().await;
                let result = tokio::time::timeout(Duration::from_secs(30), call(request))
                    .await
                    .map_err(|_| TestCaseError::fail(format!("{rpc}: no answer")))?;
                let after = self.books().await;
                if let Err(status) = result {
                    refusal_is_documented(rpc, &status, allowed, fields)?;
                    prop_assert_eq!(
                        &before,
                        &after,
                        "{} refused ({:?}) yet changed the books",
                        rpc,
                        status
                    );
                }
                Ok(())
            })
        });
        if let Err(failure) = outcome {
            panic!("{rpc}: {failure}");
        }
    }
}

/// A refusal carries one of `allowed`; an INVALID_ARGUMENT's message starts
/// with a field of the request (`items[3].quantity: …`).
fn refusal_is_documented(
    rpc: &str,
    status: &tonic::Status,
    allowed: &[Code],
    fields: &[&str],
) -> Result<(), TestCaseError> {
    prop_assert!(
        allowed.contains(&status.code()),
        "{} answered an undocumented {:?}: {}",
        rpc,
        status.code(),
        status.message()
    );
    prop_assert!(
        !status.message().is_empty(),
        "{} refused without a message",
        rpc
    );
    if status.code() == Code::InvalidArgument {
        let named = status.message().split(':').next().unwrap_or_default();
        let root = named.split(['[', '.']).next().unwrap_or_default();
        prop_assert!(
            fields.contains(&root),
            "{} INVALID_ARGUMENT names no field of the request: {}",
            rpc,
            status.message()
        );
    }
    Ok(())
}

const BUSINESS: &[Code] = &[
    Code::InvalidArgument,
    Code::NotFound,
    Code::FailedPrecondition,
    Code::AlreadyExists,
    Code::OutOfRange,
];

#[test]
fn random_requests_to_the_orchestrator_are_served_or_refused_cleanly() {
    let world = World::start();
    let orders = || async { world.stack.orders().await };
    let sagas = || async { world.stack.sagas().await };
    world.check(
        "CreateOrder",
        (id(), id(), items()),
        &[Code::InvalidArgument, Code::AlreadyExists],
        &["request_id", "customer_id", "items"],
        |(request_id, customer_id, items)| async {
            orders()
                .await
                .create_order(saga::CreateOrderRequest {
                    request_id,
                    customer_id,
                    items,
                    wait: true,
                })
                .await
        },
    );
    world.check(
        "GetSaga",
        (any::<bool>(), id()),
        &[Code::InvalidArgument, Code::NotFound],
        &["saga_id", "request_id"],
        |(by_saga_id, key)| async move {
            use saga::get_saga_request::Lookup;
            let lookup = if by_saga_id {
                Lookup::SagaId(key)
            } else {
                Lookup::RequestId(key)
            };
            sagas()
                .await
                .get_saga(saga::GetSagaRequest {
                    lookup: Some(lookup),
                })
                .await
        },
    );
    world.check(
        "ListSagas",
        (any::<i32>(), -5i32..600, "\\PC{0,30}"),
        &[Code::InvalidArgument],
        &["status", "page_size", "page_token"],
        |(status, page_size, page_token)| async move {
            sagas()
                .await
                .list_sagas(saga::ListSagasRequest {
                    status: status % 8,
                    page_size,
                    page_token,
                    needs_attention: false,
                })
                .await
        },
    );
    world.check(
        "RetrySaga",
        id(),
        &[
            Code::InvalidArgument,
            Code::NotFound,
            Code::FailedPrecondition,
        ],
        &["saga_id"],
        |saga_id| async {
            sagas()
                .await
                .retry_saga(saga::RetrySagaRequest { saga_id })
                .await
        },
    );
    world.check(
        "WatchSaga",
        id(),
        &[Code::InvalidArgument, Code::NotFound],
        &["saga_id"],
        |saga_id| async {
            let mut stream = sagas()
                .await
                .watch_saga(saga::WatchSagaRequest { saga_id })
                .await?
                .into_inner();
            stream.message().await
        },
    );
    world.runtime.block_on(world.stack.stop());
}

#[test]
fn random_requests_to_payment_are_served_or_refused_cleanly() {
    let world = World::start();
    let payments = || async { world.stack.payments().await };
    let transfer = || (id(), id(), amount());
    world.check(
        "Charge",
        transfer(),
        BUSINESS,
        &["request_id", "customer_id", "amount_cents"],
        |(request_id, customer_id, amount_cents)| async move {
            payments()
                .await
                .charge(payment::ChargeRequest {
                    request_id,
                    customer_id,
                    amount_cents,
                })
                .await
        },
    );
    world.check(
        "Refund",
        transfer(),
        BUSINESS,
        &["request_id", "customer_id", "amount_cents"],
        |(request_id, customer_id, amount_cents)| async move {
            payments()
                .await
                .refund(payment::RefundRequest {
                    request_id,
                    customer_id,
                    amount_cents,
                })
                .await
        },
    );
    world.check(
        "Deposit",
        transfer(),
        &[Code::InvalidArgument, Code::AlreadyExists, Code::OutOfRange],
        &["request_id", "customer_id", "amount_cents"],
        |(request_id, customer_id, amount_cents)| async move {
            payments()
                .await
                .deposit(payment::DepositRequest {
                    request_id,
                    customer_id,
                    amount_cents,
                })
                .await
        },
    );
    world.check(
        "GetAccount",
        (id(), any::<i32>()),
        &[Code::InvalidArgument, Code::NotFound],
        &["customer_id", "operation_limit"],
        |(customer_id, operation_limit)| async move {
            payments()
                .await
                .get_account(payment::GetAccountRequest {
                    customer_id,
                    operation_limit,
                })
                .await
        },
    );
    check_faults(&world, world.stack.payment.addr);
    check_history(&world, world.stack.payment.addr);
    world.runtime.block_on(world.stack.stop());
}

#[test]
fn random_requests_to_inventory_are_served_or_refused_cleanly() {
    let world = World::start();
    let inventory = || async { world.stack.inventory().await };
    world.check(
        "Deduct",
        (id(), lines()),
        BUSINESS,
        &["request_id", "lines"],
        |(request_id, lines)| async move {
            inventory()
                .await
                .deduct(inventory::DeductRequest { request_id, lines })
                .await
        },
    );
    world.check(
        "Restock",
        (id(), lines()),
        BUSINESS,
        &["request_id", "lines"],
        |(request_id, lines)| async move {
            inventory()
                .await
                .restock(inventory::RestockRequest { request_id, lines })
                .await
        },
    );
    world.check(
        "AddStock",
        (id(), id(), amount()),
        &[Code::InvalidArgument, Code::AlreadyExists, Code::OutOfRange],
        &["request_id", "product_id", "quantity"],
        |(request_id, product_id, quantity)| async move {
            inventory()
                .await
                .add_stock(inventory::AddStockRequest {
                    request_id,
                    product_id,
                    quantity,
                })
                .await
        },
    );
    world.check(
        "GetProduct",
        (id(), any::<i32>()),
        &[Code::InvalidArgument, Code::NotFound],
        &["product_id", "operation_limit"],
        |(product_id, operation_limit)| async move {
            inventory()
                .await
                .get_product(inventory::GetProductRequest {
                    product_id,
                    operation_limit,
                })
                .await
        },
    );
    check_faults(&world, world.stack.inventory.addr);
    check_history(&world, world.stack.inventory.addr);
    world.runtime.block_on(world.stack.stop());
}

/// ListOperations with random request ids: answered (known or not) or
/// refused as INVALID_ARGUMENT naming `request_id`.
fn check_history(world: &World, addr: std::net::SocketAddr) {
    world.check(
        "ListOperations",
        id(),
        &[Code::InvalidArgument],
        &["request_id"],
        |request_id| async move {
            OperationHistoryServiceClient::new(saga_tests::channel(addr).await)
                .list_operations(participant::ListOperationsRequest { request_id })
                .await
        },
    );
}

/// SetFaults with random settings: invalid ones name their field; valid
/// ones are applied — and turned off again at once, so no other call is
/// faulted. GetFaults always answers.
fn check_faults(world: &World, addr: std::net::SocketAddr) {
    let rate = prop_oneof![
        3 => 0.0f64..=1.0,
        1 => Just(f64::NAN),
        1 => Just(f64::INFINITY),
        1 => -2.0f64..0.0,
        1 => 1.0f64..3.0,
    ];
    let settings = (rate.clone(), 0u32..3, rate.clone(), rate, any::<u64>()).prop_map(
        |(transient, latency, drop, refusal, seed)| faults::FaultSettings {
            transient_error_rate: transient,
            added_latency_ms: latency,
            drop_reply_rate: drop,
            refusal_rate: refusal,
            seed,
        },
    );
    world.check(
        "SetFaults",
        settings,
        &[Code::InvalidArgument],
        &["transient_error_rate", "drop_reply_rate", "refusal_rate"],
        |settings| async move {
            let mut client = FaultServiceClient::new(saga_tests::channel(addr).await);
            let set = client.set_faults(settings).await;
            let off: faults::FaultSettings =
                participant_kit::faults::FaultSettings::disabled().into();
            client.set_faults(off).await.expect("faults off again");
            client
                .get_faults(faults::GetFaultsRequest {})
                .await
                .expect("GetFaults answers");
            set
        },
    );
}
