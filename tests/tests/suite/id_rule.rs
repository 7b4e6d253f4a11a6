//! Every identifier a caller sends obeys one rule,
//! [`service_kit::validate::id_problem`] (1 to 128 bytes, no control
//! characters, no invisible format characters, no leading or trailing
//! whitespace; refused, never trimmed). Generated strings — ASCII,
//! whitespace, control and format characters, multi-byte characters,
//! lengths around 128 bytes — go into every id field of every RPC that
//! takes one, on real servers: the RPC answers INVALID_ARGUMENT naming
//! exactly that field (message and `google.rpc.BadRequest`) iff the rule
//! refuses the string, and a refused call stores nothing (no saga, no
//! operation recorded, balance and stock unchanged). An accepted id is
//! stored as sent, not trimmed.
//!
//! One stack per family (saga.v1, payment.v1, inventory.v1, participant.v1),
//! one string per case put into each of the family's fields.

use orchestrator::store::Cursor;
use proptest::prelude::*;
use proptest::test_runner::{Config, TestCaseError, TestRunner};
use saga_proto::inventory::v1 as inventory;
use saga_proto::inventory::v1::inventory_service_client::InventoryServiceClient;
use saga_proto::participant::v1 as participant;
use saga_proto::participant::v1::operation_history_service_client::OperationHistoryServiceClient;
use saga_proto::participant::v1::saga_step_service_client::SagaStepServiceClient;
use saga_proto::payment::v1 as payment;
use saga_proto::payment::v1::payment_service_client::PaymentServiceClient;
use saga_proto::saga::v1 as saga;
use saga_proto::saga::v1::order_service_client::OrderServiceClient;
use saga_proto::saga::v1::saga_service_client::SagaServiceClient;
use saga_tests::Stack;
use service_kit::validate::{INVISIBLE_FORMAT, id_problem};
use std::cell::Cell;
use std::time::Duration;
use tonic::Code;
use tonic::transport::Channel;

/// Cases per family: each puts one string into every field of the family.
const CASES: u32 = 64;

const CUSTOMER: &str = "alice";
const PRODUCT: &str = "sku-apple";

/// Whitespace (`char::is_whitespace`), some of it also control characters.
const WHITESPACE: &[char] = &[
    ' ', '\t', '\u{85}', '\u{A0}', '\u{1680}', '\u{2003}', '\u{2028}', '\u{202F}', '\u{3000}',
];
const CONTROL: &[char] = &['\0', '\n', '\r', '\u{1B}', '\u{7F}', '\u{80}', '\u{9F}'];

/// Both ends of every range of invisible format characters.
fn format_chars() -> Vec<char> {
    INVISIBLE_FORMAT
        .iter()
        .flat_map(|&(first, last)| [first, last])
        .collect()
}

/// One piece of a generated id.
fn piece() -> impl Strategy<Value = String> {
    prop_oneof![
        5 => "[a-zA-Z0-9_:.-]{1,12}",
        2 => "[éß€中顧🍐𝄞]{1,4}",
        1 => proptest::sample::select(WHITESPACE).prop_map(String::from),
        1 => proptest::sample::select(CONTROL).prop_map(String::from),
        1 => proptest::sample::select(format_chars()).prop_map(String::from),
    ]
}

/// Generated ids: pieces glued together, lengths around 128 bytes (ASCII
/// and multi-byte), empty, whitespace only.
fn id_value() -> impl Strategy<Value = String> {
    let long = ("[a-z]{110,127}", "[a-z]{0,6}|[é€🍐]{0,3}", piece())
        .prop_map(|(head, tail, end)| format!("{head}{tail}{end}"));
    prop_oneof![
        8 => proptest::collection::vec(piece(), 1..5).prop_map(|p| p.concat()),
        3 => long,
        1 => "[é€🍐]{40,70}",
        1 => Just(String::new()),
        1 => proptest::collection::vec(proptest::sample::select(WHITESPACE), 1..4)
            .prop_map(String::from_iter),
    ]
}

/// The stack, one channel to each of its services (thousands of calls,
/// not thousands of connections), and a runtime to drive them from the
/// (synchronous) runner.
struct World {
    runtime: tokio::runtime::Runtime,
    stack: Stack,
    orchestrator: Channel,
    payment: Channel,
    inventory: Channel,
    next: Cell<u64>,
    accepted: Cell<u32>,
    refused: Cell<u32>,
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
            stack.deposit(CUSTOMER, 1_000_000).await;
            stack.add_stock(PRODUCT, 100_000).await;
            stack
        });
        let (orchestrator, payment, inventory) = runtime.block_on(async {
            (
                saga_tests::channel(stack.orchestrator().addr).await,
                saga_tests::channel(stack.payment.addr).await,
                saga_tests::channel(stack.inventory.addr).await,
            )
        });
        World {
            runtime,
            stack,
            orchestrator,
            payment,
            inventory,
            next: Cell::new(0),
            accepted: Cell::new(0),
            refused: Cell::new(0),
        }
    }

    /// A request id no other call of the test uses.
    fn fresh(&self, what: &str) -> String {
        self.next.set(self.next.get() + 1);
        format!("id-rule-{what}-{}", self.next.get())
    }

    /// Runs [`CASES`] generated ids through `case`, then checks both
    /// verdicts of the rule were exercised.
    fn run<F, Fut>(&self, family: &str, case: F)
    where
        F: Fn(String) -> Fut,
        Fut: std::future::Future<Output = Result<(), TestCaseError>>,
    {
        let mut runner = TestRunner::new(Config {
            cases: CASES,
            failure_persistence: None,
            ..Config::default()
        });
        let outcome = runner.run(&id_value(), |value| {
            if id_problem(&value).is_some() {
                self.refused.set(self.refused.get() + 1);
            } else {
                self.accepted.set(self.accepted.get() + 1);
            }
            self.runtime.block_on(async {
                tokio::time::timeout(Duration::from_secs(60), case(value))
                    .await
                    .map_err(|_| TestCaseError::fail(format!("{family}: no answer")))?
            })
        });
        if let Err(failure) = outcome {
            panic!("{family}: {failure}");
        }
        assert!(
            self.accepted.get() > 0 && self.refused.get() > 0,
            "{family}: {} ids accepted, {} refused: the generator missed a verdict",
            self.accepted.get(),
            self.refused.get()
        );
    }

    fn stop(self) {
        self.runtime.block_on(self.stack.stop());
    }
}

/// The verdict the rule gives `value` in `field`, and whether the RPC's
/// answer `result` matches it: INVALID_ARGUMENT naming exactly `field`
/// (message and BadRequest) when `refused`, anything else otherwise.
fn verdict<T>(
    rpc: &str,
    field: &str,
    value: &str,
    refused: bool,
    result: &Result<T, tonic::Status>,
) -> Result<(), TestCaseError> {
    match result {
        Err(status) if status.code() == Code::InvalidArgument => {
            prop_assert!(
                refused,
                "{} refused {} = {:?}, which the rule accepts: {}",
                rpc,
                field,
                value,
                status.message()
            );
            prop_assert!(
                status.message().starts_with(&format!("{field}: ")),
                "{} refused {:?} without naming {}: {}",
                rpc,
                value,
                field,
                status.message()
            );
            prop_assert_eq!(
                service_kit::errors::bad_fields(status),
                vec![field.to_owned()],
                "{} BadRequest for {:?}",
                rpc,
                value
            );
        }
        other => prop_assert!(
            !refused,
            "{} accepted {} = {:?}, which the rule refuses ({:?}): {:?}",
            rpc,
            field,
            value,
            id_problem(value),
            other.as_ref().err()
        ),
    }
    Ok(())
}

/// What the rule says of `value` as an id.
fn rule_refuses(value: &str) -> bool {
    id_problem(value).is_some()
}

/// Every record a participant holds under `request_id`.
async fn operations(participant: &Channel, request_id: &str) -> Vec<participant::Operation> {
    OperationHistoryServiceClient::new(participant.clone())
        .list_operations(participant::ListOperationsRequest {
            request_id: request_id.to_owned(),
        })
        .await
        .expect("ListOperations answers")
        .into_inner()
        .operations
}

/// ListOperations with `value` as its request id.
async fn check_list_operations(
    rpc: &str,
    participant: &Channel,
    value: &str,
) -> Result<(), TestCaseError> {
    let result = OperationHistoryServiceClient::new(participant.clone())
        .list_operations(participant::ListOperationsRequest {
            request_id: value.to_owned(),
        })
        .await;
    verdict(rpc, "request_id", value, rule_refuses(value), &result)
}

/// How many sagas the orchestrator holds.
async fn saga_count(orchestrator: &Channel) -> usize {
    let mut count = 0;
    let mut page_token = String::new();
    loop {
        let page = SagaServiceClient::new(orchestrator.clone())
            .list_sagas(saga::ListSagasRequest {
                page_size: 500,
                page_token,
                ..Default::default()
            })
            .await
            .expect("ListSagas answers")
            .into_inner();
        count += page.sagas.len();
        if page.next_page_token.is_empty() {
            return count;
        }
        page_token = page.next_page_token;
    }
}

#[test]
fn saga_v1_ids_obey_the_one_rule() {
    let world = World::start();
    let world_ref = &world;
    let orchestrator = &world.orchestrator;
    let sagas = || SagaServiceClient::new(orchestrator.clone());
    world.run("saga.v1", |value| async move {
        let refused = rule_refuses(&value);
        // CreateOrder: the value in each id field, the others good.
        let item = |product_id: &str| saga::OrderItem {
            product_id: product_id.to_owned(),
            quantity: 1,
            unit_price_cents: 1,
        };
        let fields = ["request_id", "customer_id", "items[1].product_id"];
        for field in fields {
            let mut request = saga::CreateOrderRequest {
                request_id: world_ref.fresh("order"),
                customer_id: CUSTOMER.to_owned(),
                items: vec![item(PRODUCT), item(PRODUCT)],
                wait: false,
            };
            match field {
                "request_id" => request.request_id = value.clone(),
                "customer_id" => request.customer_id = value.clone(),
                _ => request.items[1].product_id = value.clone(),
            }
            let before = if refused {
                saga_count(orchestrator).await
            } else {
                0
            };
            let result = OrderServiceClient::new(orchestrator.clone())
                .create_order(request.clone())
                .await;
            verdict("CreateOrder", field, &value, refused, &result)?;
            if refused {
                prop_assert_eq!(
                    saga_count(orchestrator).await,
                    before,
                    "a refused CreateOrder stored a saga"
                );
                continue;
            }
            // Accepted: stored as sent, not trimmed.
            let stored = sagas()
                .get_saga(saga::GetSagaRequest {
                    lookup: Some(saga::get_saga_request::Lookup::RequestId(
                        request.request_id.clone(),
                    )),
                })
                .await
                .map_err(|e| TestCaseError::fail(format!("GetSaga after CreateOrder: {e:?}")))?
                .into_inner();
            let order = stored.order.unwrap_or_default();
            prop_assert_eq!(&stored.request_id, &request.request_id);
            prop_assert_eq!(&order.customer_id, &request.customer_id);
            prop_assert_eq!(&order.items[1].product_id, &request.items[1].product_id);
        }
        // The reads: nothing to store, the same verdict.
        use saga::get_saga_request::Lookup;
        for (field, lookup) in [
            ("saga_id", Lookup::SagaId(value.clone())),
            ("request_id", Lookup::RequestId(value.clone())),
        ] {
            let result = sagas()
                .get_saga(saga::GetSagaRequest {
                    lookup: Some(lookup),
                })
                .await;
            verdict("GetSaga", field, &value, refused, &result)?;
        }
        let result = sagas()
            .retry_saga(saga::RetrySagaRequest {
                saga_id: value.clone(),
            })
            .await;
        verdict("RetrySaga", "saga_id", &value, refused, &result)?;
        let result = async {
            let mut stream = sagas()
                .watch_saga(saga::WatchSagaRequest {
                    saga_id: value.clone(),
                })
                .await?
                .into_inner();
            stream.message().await
        }
        .await;
        verdict("WatchSaga", "saga_id", &value, refused, &result)?;
        // ListSagas: a well-formed, checked token around the value as its
        // saga id; and the value itself, which is no token (unless empty:
        // the first page).
        let token = orchestrator::convert::encode_cursor(&Cursor {
            created_at_ms: 1_700_000_000_000,
            saga_id: value.clone(),
        });
        for (page_token, refused) in [(token, refused), (value.clone(), !value.is_empty())] {
            let result = sagas()
                .list_sagas(saga::ListSagasRequest {
                    page_token: page_token.clone(),
                    ..Default::default()
                })
                .await;
            verdict("ListSagas", "page_token", &page_token, refused, &result)?;
        }
        Ok(())
    });
    world.stop();
}

/// What a refused call to payment-svc must leave as it was.
#[derive(Debug, PartialEq)]
struct Account {
    balance: i64,
    newest: Option<(String, String, String)>,
}

async fn account(payment: &Channel) -> Account {
    let account = PaymentServiceClient::new(payment.clone())
        .get_account(payment::GetAccountRequest {
            customer_id: CUSTOMER.to_owned(),
            operation_limit: 1,
        })
        .await
        .expect("GetAccount answers")
        .into_inner();
    Account {
        balance: account.balance_cents,
        newest: account
            .recent_operations
            .first()
            .map(|o| (o.request_id.clone(), o.kind.clone(), o.status.clone())),
    }
}

#[test]
fn payment_v1_ids_obey_the_one_rule() {
    let world = World::start();
    let world_ref = &world;
    let channel = &world.payment;
    world.run("payment.v1", |value| async move {
        let refused = rule_refuses(&value);
        for rpc in ["Charge", "Refund", "Deposit"] {
            for field in ["request_id", "customer_id"] {
                let (request_id, customer_id) = match field {
                    "request_id" => (value.clone(), CUSTOMER.to_owned()),
                    _ => (world_ref.fresh("payment"), value.clone()),
                };
                let before = if refused {
                    Some(account(channel).await)
                } else {
                    None
                };
                let mut client = PaymentServiceClient::new(channel.clone());
                let result = match rpc {
                    "Charge" => client
                        .charge(payment::ChargeRequest {
                            request_id: request_id.clone(),
                            customer_id: customer_id.clone(),
                            amount_cents: 1,
                        })
                        .await
                        .map(drop),
                    "Refund" => client
                        .refund(payment::RefundRequest {
                            request_id: request_id.clone(),
                            customer_id: customer_id.clone(),
                            amount_cents: 1,
                        })
                        .await
                        .map(drop),
                    _ => client
                        .deposit(payment::DepositRequest {
                            request_id: request_id.clone(),
                            customer_id: customer_id.clone(),
                            amount_cents: 1,
                        })
                        .await
                        .map(drop),
                };
                verdict(rpc, field, &value, refused, &result)?;
                if refused {
                    prop_assert_eq!(
                        Some(account(channel).await),
                        before,
                        "{} refused yet moved money",
                        rpc
                    );
                    if field == "customer_id" {
                        prop_assert!(
                            operations(channel, &request_id).await.is_empty(),
                            "a refused {} was recorded",
                            rpc
                        );
                    }
                } else if rpc == "Deposit" && field == "customer_id" {
                    // Stored as sent: the account is the very id.
                    let made = client
                        .get_account(payment::GetAccountRequest {
                            customer_id: customer_id.clone(),
                            operation_limit: 0,
                        })
                        .await
                        .map_err(|e| {
                            TestCaseError::fail(format!("GetAccount after Deposit: {e:?}"))
                        })?
                        .into_inner();
                    prop_assert_eq!(made.customer_id, customer_id);
                }
            }
        }
        let result = PaymentServiceClient::new(channel.clone())
            .get_account(payment::GetAccountRequest {
                customer_id: value.clone(),
                operation_limit: 0,
            })
            .await;
        verdict("GetAccount", "customer_id", &value, refused, &result)?;
        check_list_operations("ListOperations (payment)", channel, &value).await
    });
    world.stop();
}

/// What a refused call to inventory-svc must leave as it was.
async fn product(inventory: &Channel) -> (i64, Option<(String, String, String)>) {
    let product = InventoryServiceClient::new(inventory.clone())
        .get_product(inventory::GetProductRequest {
            product_id: PRODUCT.to_owned(),
            operation_limit: 1,
        })
        .await
        .expect("GetProduct answers")
        .into_inner();
    (
        product.available,
        product
            .recent_operations
            .first()
            .map(|o| (o.request_id.clone(), o.kind.clone(), o.status.clone())),
    )
}

#[test]
fn inventory_v1_ids_obey_the_one_rule() {
    let world = World::start();
    let world_ref = &world;
    let channel = &world.inventory;
    world.run("inventory.v1", |value| async move {
        let refused = rule_refuses(&value);
        let line = |product_id: &str| inventory::Line {
            product_id: product_id.to_owned(),
            quantity: 1,
        };
        for (rpc, field) in [
            ("Deduct", "request_id"),
            ("Deduct", "lines[1].product_id"),
            ("Restock", "request_id"),
            ("Restock", "lines[1].product_id"),
            ("AddStock", "request_id"),
            ("AddStock", "product_id"),
        ] {
            let (request_id, product_id) = if field == "request_id" {
                (value.clone(), PRODUCT.to_owned())
            } else {
                (world_ref.fresh("inventory"), value.clone())
            };
            let lines = vec![line(PRODUCT), line(&product_id)];
            let before = if refused {
                Some(product(channel).await)
            } else {
                None
            };
            let mut client = InventoryServiceClient::new(channel.clone());
            let result = match rpc {
                "Deduct" => client
                    .deduct(inventory::DeductRequest {
                        request_id: request_id.clone(),
                        lines,
                    })
                    .await
                    .map(drop),
                "Restock" => client
                    .restock(inventory::RestockRequest {
                        request_id: request_id.clone(),
                        lines,
                    })
                    .await
                    .map(drop),
                _ => client
                    .add_stock(inventory::AddStockRequest {
                        request_id: request_id.clone(),
                        product_id: product_id.clone(),
                        quantity: 1,
                    })
                    .await
                    .map(drop),
            };
            verdict(rpc, field, &value, refused, &result)?;
            if refused {
                prop_assert_eq!(
                    Some(product(channel).await),
                    before,
                    "{} refused yet moved stock",
                    rpc
                );
                if field != "request_id" {
                    prop_assert!(
                        operations(channel, &request_id).await.is_empty(),
                        "a refused {} was recorded",
                        rpc
                    );
                }
            } else if rpc == "AddStock" && field == "product_id" {
                let made = client
                    .get_product(inventory::GetProductRequest {
                        product_id: product_id.clone(),
                        operation_limit: 0,
                    })
                    .await
                    .map_err(|e| TestCaseError::fail(format!("GetProduct after AddStock: {e:?}")))?
                    .into_inner();
                prop_assert_eq!(made.product_id, product_id);
            }
        }
        let result = InventoryServiceClient::new(channel.clone())
            .get_product(inventory::GetProductRequest {
                product_id: value.clone(),
                operation_limit: 0,
            })
            .await;
        verdict("GetProduct", "product_id", &value, refused, &result)?;
        check_list_operations("ListOperations (inventory)", channel, &value).await
    });
    world.stop();
}

/// The id fields of a `participant.v1.StepCall`, as a refusal names them.
const STEP_CALL_FIELDS: [&str; 6] = [
    "request_id",
    "saga_id",
    "step",
    "order.order_id",
    "order.customer_id",
    "order.lines[0].product_id",
];

/// A good step call (one unit at one cent) with `value` in `field`.
fn step_call(request_id: String, step: &str, field: &str, value: &str) -> participant::StepCall {
    let mut call = participant::StepCall {
        saga_id: format!("saga-{request_id}"),
        request_id,
        step: step.to_owned(),
        attempt: 1,
        order: Some(participant::Order {
            order_id: "order-1".to_owned(),
            customer_id: CUSTOMER.to_owned(),
            lines: vec![participant::OrderLine {
                product_id: PRODUCT.to_owned(),
                quantity: 1,
                unit_price_cents: 1,
            }],
            total_cents: 1,
        }),
    };
    let order = call.order.as_mut().expect("order");
    let slot = match field {
        "request_id" => &mut call.request_id,
        "saga_id" => &mut call.saga_id,
        "step" => &mut call.step,
        "order.order_id" => &mut order.order_id,
        "order.customer_id" => &mut order.customer_id,
        _ => &mut order.lines[0].product_id,
    };
    *slot = value.to_owned();
    call
}

/// One call of `rpc` on the step service at `addr`: a batch's one result
/// read back as the status that call alone would have got.
async fn step_rpc(
    participant: &Channel,
    rpc: &str,
    call: participant::StepCall,
) -> Result<(), tonic::Status> {
    let mut client = SagaStepServiceClient::new(participant.clone());
    let batch = participant::StepCallBatch {
        calls: vec![participant::BatchedStepCall {
            call: Some(call.clone()),
            traceparent: String::new(),
        }],
    };
    let error = match rpc {
        "Act" => return client.act(call).await.map(drop),
        "Compensate" => return client.compensate(call).await.map(drop),
        "ActBatch" => client
            .act_batch(batch)
            .await?
            .into_inner()
            .results
            .into_iter()
            .next()
            .and_then(|r| match r.result {
                Some(participant::act_result::Result::Error(e)) => Some(e),
                _ => None,
            }),
        _ => client
            .compensate_batch(batch)
            .await?
            .into_inner()
            .results
            .into_iter()
            .next()
            .and_then(|r| match r.result {
                Some(participant::compensate_result::Result::Error(e)) => Some(e),
                _ => None,
            }),
    };
    match error {
        None => Ok(()),
        Some(e) => Err(tonic::Status::with_details(
            Code::from_i32(e.code),
            e.message,
            e.details.into(),
        )),
    }
}

/// participant.v1 on both participants (payment-svc and inventory-svc
/// serve the kit's SagaStepService and OperationHistoryService).
#[test]
fn participant_v1_ids_obey_the_one_rule() {
    let world = World::start();
    let world_ref = &world;
    let (payment, inventory) = (&world.payment, &world.inventory);
    world.run("participant.v1", |value| async move {
        let books = || async { (account(payment).await, product(inventory).await) };
        for (step, channel) in [("payment", payment), ("inventory", inventory)] {
            for rpc in ["Act", "Compensate", "ActBatch", "CompensateBatch"] {
                for field in STEP_CALL_FIELDS {
                    // A step name is an id, and narrower: 1 to 32 bytes of
                    // a-z 0-9 _ -.
                    let refused = rule_refuses(&value)
                        || (field == "step"
                            && !(value.len() <= 32
                                && value.bytes().all(|b| {
                                    b.is_ascii_lowercase()
                                        || b.is_ascii_digit()
                                        || b == b'_'
                                        || b == b'-'
                                })));
                    let request_id = world_ref.fresh(step);
                    let call = step_call(request_id.clone(), step, field, &value);
                    let before = if refused { Some(books().await) } else { None };
                    let result = step_rpc(channel, rpc, call).await;
                    verdict(&format!("{rpc} ({step})"), field, &value, refused, &result)?;
                    if refused {
                        prop_assert_eq!(
                            Some(books().await),
                            before,
                            "a refused {} moved something",
                            rpc
                        );
                        if field != "request_id" {
                            prop_assert!(
                                operations(channel, &request_id).await.is_empty(),
                                "a refused {} was recorded",
                                rpc
                            );
                        }
                    }
                }
            }
            check_list_operations(&format!("ListOperations ({step})"), channel, &value).await?;
        }
        Ok(())
    });
    world.stop();
}
