//! Participants obey only the orchestrator: with a service token
//! configured, Charge, Refund, Deduct and Restock (and the batches of
//! Charge and Deduct) without a token or with a
//! wrong one (the admin token included) answer UNAUTHENTICATED and record
//! nothing; reads need the service or the admin token; the orchestrator,
//! given the token, drives sagas through them as usual — and an
//! orchestrator that does not send it gets nowhere. RetrySaga needs the
//! orchestrator's admin token.

use saga_proto::inventory::v1 as inventory;
use saga_proto::inventory::v1::inventory_service_client::InventoryServiceClient;
use saga_proto::participant::v1 as participant;
use saga_proto::participant::v1::operation_history_service_client::OperationHistoryServiceClient;
use saga_proto::participant::v1::saga_step_service_client::SagaStepServiceClient;
use saga_proto::payment::v1 as payment;
use saga_proto::payment::v1::payment_service_client::PaymentServiceClient;
use saga_proto::saga::v1 as pb;
use saga_tests::{Service, balance_as, channel, order_request, stock_as, wait_terminal};
use service_kit::auth::{
    READ_UNAUTHENTICATED_MESSAGE, Role, SERVICE_UNAUTHENTICATED_MESSAGE, TokenAuth,
};
use service_kit::server::ServeOptions;
use std::net::SocketAddr;

use std::time::Duration;
use tonic::Code;

const SERVICE: &str = "test-service-token-0123456789";
const ADMIN: &str = "test-admin-token-0123456789";

fn service() -> TokenAuth {
    TokenAuth::with_token_for(Role::Service, SERVICE).expect("token")
}

fn admin() -> TokenAuth {
    TokenAuth::with_token(ADMIN).expect("token")
}

fn protected() -> ServeOptions {
    ServeOptions {
        admin: admin(),
        ..ServeOptions::default()
    }
    .with_service(service())
}

/// Callers that must not be admitted to a saga RPC.
fn intruders() -> Vec<(&'static str, TokenAuth)> {
    vec![
        ("no token", TokenAuth::open_for(Role::Service)),
        (
            "wrong token",
            TokenAuth::with_token_for(Role::Service, "test-service-token-0123456788").unwrap(),
        ),
        ("the admin token", admin()),
    ]
}

/// A step call of saga `saga` for alice's order of one apple (100 cents).
fn step_call(saga: &str) -> participant::StepCall {
    participant::StepCall {
        request_id: format!("{saga}:payment"),
        saga_id: saga.into(),
        step: "payment".into(),
        attempt: 1,
        order: Some(participant::Order {
            order_id: "o-1".into(),
            customer_id: "alice".into(),
            lines: vec![participant::OrderLine {
                product_id: "sku-apple".into(),
                quantity: 1,
                unit_price_cents: 100,
            }],
            total_cents: 100,
        }),
    }
}

fn refused<T: std::fmt::Debug>(result: Result<T, tonic::Status>, message: &str, what: &str) {
    let status = result.expect_err(what);
    assert_eq!(status.code(), Code::Unauthenticated, "{what}: {status:?}");
    assert_eq!(status.message(), message, "{what}");
}

/// payment-svc and inventory-svc, protected, with alice holding 1,000
/// cents and 10 apples in stock.
struct Participants {
    payment: saga_tests::Running,
    inventory: saga_tests::Running,
    _dir: tempfile::TempDir,
}

impl Participants {
    async fn start() -> Participants {
        let dir = tempfile::tempdir().expect("tempdir");
        let start = |service| {
            saga_tests::ParticipantHarness::new(service, dir.path())
                .options(protected())
                .start()
        };
        let payment = start(Service::Payment).await;
        let inventory = start(Service::Inventory).await;
        PaymentServiceClient::with_interceptor(channel(payment.addr).await, admin())
            .deposit(payment::DepositRequest {
                request_id: "seed-alice".into(),
                customer_id: "alice".into(),
                amount_cents: 1_000,
            })
            .await
            .expect("deposit");
        InventoryServiceClient::with_interceptor(channel(inventory.addr).await, admin())
            .add_stock(inventory::AddStockRequest {
                request_id: "seed-apple".into(),
                product_id: "sku-apple".into(),
                quantity: 10,
            })
            .await
            .expect("add stock");
        Participants {
            payment,
            inventory,
            _dir: dir,
        }
    }

    async fn stop(self) {
        self.payment.stop().await;
        self.inventory.stop().await;
    }
}

fn charge(request_id: &str) -> payment::ChargeRequest {
    payment::ChargeRequest {
        request_id: request_id.into(),
        customer_id: "alice".into(),
        amount_cents: 100,
    }
}

fn refund(request_id: &str) -> payment::RefundRequest {
    payment::RefundRequest {
        request_id: request_id.into(),
        customer_id: "alice".into(),
        amount_cents: 100,
    }
}

fn lines() -> Vec<inventory::Line> {
    vec![inventory::Line {
        product_id: "sku-apple".into(),
        quantity: 2,
    }]
}

/// The request ids alice's account has records of.
async fn recorded(addr: SocketAddr) -> Vec<String> {
    PaymentServiceClient::with_interceptor(channel(addr).await, admin())
        .get_account(payment::GetAccountRequest {
            customer_id: "alice".into(),
            operation_limit: 100,
        })
        .await
        .expect("get account")
        .into_inner()
        .recent_operations
        .into_iter()
        .map(|o| o.request_id)
        .collect()
}

#[tokio::test]
async fn saga_rpcs_need_the_service_token_and_a_refused_call_records_nothing() {
    let p = Participants::start().await;
    let pay = channel(p.payment.addr).await;
    let inv = channel(p.inventory.addr).await;
    for (who, auth) in intruders() {
        let mut payments = PaymentServiceClient::with_interceptor(pay.clone(), auth.clone());
        let mut stock = InventoryServiceClient::with_interceptor(inv.clone(), auth.clone());
        let m = SERVICE_UNAUTHENTICATED_MESSAGE;
        refused(payments.charge(charge("c-1")).await, m, who);
        refused(payments.refund(refund("c-2")).await, m, who);
        // Refused before validation: bad input is not even looked at.
        refused(payments.charge(charge("")).await, m, who);
        let deduct = inventory::DeductRequest {
            request_id: "d-1".into(),
            lines: lines(),
        };
        refused(stock.deduct(deduct).await, m, who);
        let restock = inventory::RestockRequest {
            request_id: "d-2".into(),
            lines: lines(),
        };
        refused(stock.restock(restock).await, m, who);
        // The step contract the same, its batches refused as a whole,
        // none of their calls applied.
        for addr in [&pay, &inv] {
            let mut steps = SagaStepServiceClient::with_interceptor(addr.clone(), auth.clone());
            let call = step_call("s-1");
            refused(steps.act(call.clone()).await, m, who);
            refused(steps.compensate(call.clone()).await, m, who);
            let batch = participant::StepCallBatch {
                calls: vec![participant::BatchedStepCall {
                    call: Some(call),
                    traceparent: String::new(),
                }],
            };
            refused(steps.act_batch(batch.clone()).await, m, who);
            refused(steps.compensate_batch(batch).await, m, who);
        }
    }
    assert_eq!(balance_as(p.payment.addr, "alice", service()).await, 1_000);
    assert_eq!(stock_as(p.inventory.addr, "sku-apple", service()).await, 10);
    assert_eq!(recorded(p.payment.addr).await, ["seed-alice"]);

    // With the token: applied — including c-2, whose refund was refused
    // above and so claimed nothing (no null compensation blocks it).
    let mut payments = PaymentServiceClient::with_interceptor(pay, service());
    let charged = payments.charge(charge("c-1")).await.expect("charge");
    assert_eq!(charged.into_inner().balance_cents, 900);
    let charged = payments.charge(charge("c-2")).await.expect("charge");
    assert_eq!(charged.into_inner().balance_cents, 800);
    let refunded = payments.refund(refund("c-2")).await.expect("refund");
    assert_eq!(
        refunded.into_inner().effect(),
        saga_proto::participant::v1::CompensationEffect::Undone
    );
    InventoryServiceClient::with_interceptor(inv, service())
        .deduct(inventory::DeductRequest {
            request_id: "d-1".into(),
            lines: lines(),
        })
        .await
        .expect("deduct");
    assert_eq!(balance_as(p.payment.addr, "alice", admin()).await, 900);
    assert_eq!(stock_as(p.inventory.addr, "sku-apple", admin()).await, 8);
    p.stop().await;
}

#[tokio::test]
async fn reads_need_the_service_or_the_admin_token() {
    let p = Participants::start().await;
    let mut anonymous = PaymentServiceClient::new(channel(p.payment.addr).await);
    let account = payment::GetAccountRequest {
        customer_id: "alice".into(),
        operation_limit: 0,
    };
    refused(
        anonymous.get_account(account.clone()).await,
        READ_UNAUTHENTICATED_MESSAGE,
        "anonymous GetAccount",
    );
    let mut products = InventoryServiceClient::new(channel(p.inventory.addr).await);
    let product = inventory::GetProductRequest {
        product_id: "sku-apple".into(),
        operation_limit: 0,
    };
    refused(
        products.get_product(product).await,
        READ_UNAUTHENTICATED_MESSAGE,
        "anonymous GetProduct",
    );
    assert_eq!(balance_as(p.payment.addr, "alice", service()).await, 1_000);
    assert_eq!(balance_as(p.payment.addr, "alice", admin()).await, 1_000);
    assert_eq!(stock_as(p.inventory.addr, "sku-apple", service()).await, 10);
    // ListOperations, on both participants, is such a read too.
    for addr in [p.payment.addr, p.inventory.addr] {
        let list = || participant::ListOperationsRequest {
            request_id: "seed-alice".into(),
        };
        let history = |auth: TokenAuth| async move {
            OperationHistoryServiceClient::with_interceptor(channel(addr).await, auth)
                .list_operations(list())
                .await
        };
        refused(
            history(TokenAuth::open_for(Role::Service)).await,
            READ_UNAUTHENTICATED_MESSAGE,
            "anonymous ListOperations",
        );
        for auth in [service(), admin()] {
            history(auth).await.expect("ListOperations with a token");
        }
    }
    p.stop().await;
}

/// The orchestrator on an ephemeral port over the protected participants,
/// sending `token`, with its store in the returned temp dir.
async fn orchestrator(
    p: &Participants,
    token: TokenAuth,
) -> (saga_tests::Running, tempfile::TempDir) {
    let definition = saga_tests::order_saga_on(
        orchestrator::participant_channel(&format!("http://{}", p.payment.addr)).unwrap(),
        orchestrator::participant_channel(&format!("http://{}", p.inventory.addr)).unwrap(),
        orchestrator::participant::call::Caller::new(Duration::from_secs(2))
            .with_service_token(token),
    );
    let mut retry = saga_tests::fast_retry();
    retry.action_attempts = 3;
    let dir = tempfile::tempdir().expect("tempdir");
    let options = ServeOptions {
        admin: admin(),
        ..ServeOptions::default()
    };
    let running = saga_tests::OrchestratorHarness::new(dir.path(), definition)
        .retry(retry)
        .options(options)
        .start()
        .await;
    (running, dir)
}

#[tokio::test]
async fn the_orchestrator_sends_the_token_and_one_without_it_gets_nowhere() {
    let p = Participants::start().await;
    let (with_token, _dir) = orchestrator(&p, service()).await;
    let mut orders =
        pb::order_service_client::OrderServiceClient::new(channel(with_token.addr).await);
    let done = orders
        .create_order(order_request(
            "o-1",
            "alice",
            &[("sku-apple", 3, 100)],
            true,
        ))
        .await
        .expect("create")
        .into_inner();
    assert_eq!(done.status(), pb::SagaStatus::Completed);
    assert_eq!(balance_as(p.payment.addr, "alice", admin()).await, 700);
    assert_eq!(stock_as(p.inventory.addr, "sku-apple", admin()).await, 7);

    // Without the token every charge attempt is UNAUTHENTICATED (an unknown
    // outcome, retried); the budget runs out, the charge is compensated —
    // also refused — and the saga needs a person. Nothing moved.
    let (without, _other_dir) = orchestrator(&p, TokenAuth::open_for(Role::Service)).await;
    let created = pb::order_service_client::OrderServiceClient::new(channel(without.addr).await)
        .create_order(order_request(
            "o-2",
            "alice",
            &[("sku-apple", 1, 100)],
            false,
        ))
        .await
        .expect("create")
        .into_inner();
    let saga = wait_terminal(without.addr, &created.saga_id, Duration::from_secs(30)).await;
    assert_eq!(saga.status(), pb::SagaStatus::Failed, "{saga:?}");
    assert!(saga.reason.contains("Unauthenticated"), "{}", saga.reason);
    assert_eq!(balance_as(p.payment.addr, "alice", admin()).await, 700);
    assert_eq!(stock_as(p.inventory.addr, "sku-apple", admin()).await, 7);
    assert_eq!(
        recorded(p.payment.addr).await.len(),
        2,
        "seed and o-1's charge only"
    );

    // RetrySaga is an admin call: refused without the admin token (the
    // service token is no substitute), and the saga stays as it was.
    let retry = || pb::RetrySagaRequest {
        saga_id: created.saga_id.clone(),
    };
    let sagas = channel(without.addr).await;
    for (who, auth) in [
        ("no token", TokenAuth::open()),
        ("the service token", service()),
    ] {
        let mut client =
            pb::saga_service_client::SagaServiceClient::with_interceptor(sagas.clone(), auth);
        refused(
            client.retry_saga(retry()).await,
            service_kit::auth::UNAUTHENTICATED_MESSAGE,
            who,
        );
    }
    let unchanged = wait_terminal(without.addr, &created.saga_id, Duration::from_secs(1)).await;
    assert_eq!(
        unchanged.version, saga.version,
        "a refused RetrySaga changes nothing"
    );
    let resumed = pb::saga_service_client::SagaServiceClient::with_interceptor(sagas, admin())
        .retry_saga(retry())
        .await
        .expect("retry with the admin token")
        .into_inner();
    assert_eq!(resumed.status(), pb::SagaStatus::Compensating);
    with_token.stop().await;
    without.stop().await;
    p.stop().await;
}
