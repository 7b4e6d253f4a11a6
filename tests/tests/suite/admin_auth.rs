//! Admin RPCs need the bearer token when one is configured: Deposit,
//! AddStock and the fault API (SetFaults, GetFaults) without a token or with
//! a wrong one answer UNAUTHENTICATED — before their input is even checked —
//! and change nothing (balance, stock, fault settings, and the refused
//! request id stays unused); with the right token they work. The saga RPCs
//! (Charge, Deduct) never need it (they need the service token when one is
//! configured: `service_auth.rs`); reads need it once it is configured; and
//! with no token configured everything passes (the dev default).

use participant_kit::faults::FaultSettings;
use saga_proto::faults::v1 as faults_pb;
use saga_proto::faults::v1::fault_service_client::FaultServiceClient;
use saga_proto::inventory::v1 as inventory;
use saga_proto::inventory::v1::inventory_service_client::InventoryServiceClient;
use saga_proto::payment::v1 as payment;
use saga_proto::payment::v1::payment_service_client::PaymentServiceClient;
use saga_tests::{Service, balance, balance_as, channel, stock, stock_as};
use service_kit::auth::{TokenAuth, UNAUTHENTICATED_MESSAGE};
use service_kit::server::ServeOptions;
use std::net::SocketAddr;
use tonic::Code;
use tonic::transport::Channel;

const TOKEN: &str = "test-admin-token-0123456789";

/// One participant on an ephemeral port with its embedded store in its own
/// temp dir, served with `options`.
struct Participant {
    addr: SocketAddr,
    running: saga_tests::Running,
    _dir: tempfile::TempDir,
}

impl Participant {
    async fn start(service: Service, options: ServeOptions) -> Participant {
        let dir = tempfile::tempdir().expect("tempdir");
        let running = saga_tests::ParticipantHarness::new(service, dir.path())
            .options(options)
            .start()
            .await;
        Participant {
            addr: running.addr,
            running,
            _dir: dir,
        }
    }

    async fn stop(self) {
        self.running.stop().await;
    }
}

fn protected() -> ServeOptions {
    ServeOptions {
        admin: TokenAuth::with_token(TOKEN).expect("token"),
        ..ServeOptions::default()
    }
}

/// The three ways to call an admin RPC without being admitted.
fn intruders() -> Vec<(&'static str, TokenAuth)> {
    vec![
        ("no token", TokenAuth::open()),
        (
            "wrong token",
            TokenAuth::with_token("test-admin-token-0123456788").unwrap(),
        ),
        ("token prefix", TokenAuth::with_token("test-admin").unwrap()),
    ]
}

fn admin() -> TokenAuth {
    TokenAuth::with_token(TOKEN).unwrap()
}

fn assert_unauthenticated(result: Result<impl std::fmt::Debug, tonic::Status>, what: &str) {
    let status = result.expect_err(what);
    assert_eq!(status.code(), Code::Unauthenticated, "{what}: {status:?}");
    assert_eq!(status.message(), UNAUTHENTICATED_MESSAGE, "{what}");
}

fn deposit(request_id: &str, customer_id: &str, amount_cents: i64) -> payment::DepositRequest {
    payment::DepositRequest {
        request_id: request_id.into(),
        customer_id: customer_id.into(),
        amount_cents,
    }
}

fn add_stock(request_id: &str, product_id: &str, quantity: i64) -> inventory::AddStockRequest {
    inventory::AddStockRequest {
        request_id: request_id.into(),
        product_id: product_id.into(),
        quantity,
    }
}

async fn operations(addr: SocketAddr, customer: &str) -> usize {
    PaymentServiceClient::with_interceptor(channel(addr).await, admin())
        .get_account(payment::GetAccountRequest {
            customer_id: customer.into(),
            operation_limit: 0,
        })
        .await
        .expect("get account")
        .into_inner()
        .recent_operations
        .len()
}

#[tokio::test]
async fn deposit_needs_the_token_and_a_refused_one_changes_nothing() {
    let p = Participant::start(Service::Payment, protected()).await;
    let ch: Channel = channel(p.addr).await;
    let mut with_token = PaymentServiceClient::with_interceptor(ch.clone(), admin());
    let first = with_token
        .deposit(deposit("dep-1", "alice", 1_000))
        .await
        .expect("deposit with the token")
        .into_inner();
    assert_eq!(first.balance_cents, 1_000);

    for (who, auth) in intruders() {
        let mut client = PaymentServiceClient::with_interceptor(ch.clone(), auth);
        assert_unauthenticated(client.deposit(deposit("dep-2", "alice", 500)).await, who);
        // Refused before validation: bad input is not even looked at.
        assert_unauthenticated(client.deposit(deposit("", "alice", -5)).await, who);
        // A new customer is not created either.
        assert_unauthenticated(client.deposit(deposit("dep-3", "mallory", 9)).await, who);
    }
    assert_eq!(balance_as(p.addr, "alice", admin()).await, 1_000);
    assert_eq!(operations(p.addr, "alice").await, 1);
    let missing = PaymentServiceClient::with_interceptor(ch.clone(), admin())
        .get_account(payment::GetAccountRequest {
            customer_id: "mallory".into(),
            operation_limit: 0,
        })
        .await
        .unwrap_err();
    assert_eq!(missing.code(), Code::NotFound);

    // The refused request id was never recorded: it applies now, once.
    let second = with_token
        .deposit(deposit("dep-2", "alice", 500))
        .await
        .expect("deposit with the token")
        .into_inner();
    assert_eq!((second.balance_cents, second.replayed), (1_500, false));

    // Charge is a saga step, not an admin call: no token needed.
    let charged = PaymentServiceClient::new(ch)
        .charge(payment::ChargeRequest {
            request_id: "charge-1".into(),
            customer_id: "alice".into(),
            amount_cents: 200,
        })
        .await
        .expect("charge without a token")
        .into_inner();
    assert_eq!(charged.balance_cents, 1_300);
    p.stop().await;
}

#[tokio::test]
async fn add_stock_needs_the_token_and_a_refused_one_changes_nothing() {
    let p = Participant::start(Service::Inventory, protected()).await;
    let ch = channel(p.addr).await;
    let mut with_token = InventoryServiceClient::with_interceptor(ch.clone(), admin());
    with_token
        .add_stock(add_stock("stock-1", "sku-apple", 10))
        .await
        .expect("add stock with the token");

    for (who, auth) in intruders() {
        let mut client = InventoryServiceClient::with_interceptor(ch.clone(), auth);
        assert_unauthenticated(
            client.add_stock(add_stock("stock-2", "sku-apple", 5)).await,
            who,
        );
        assert_unauthenticated(client.add_stock(add_stock("", "", 0)).await, who);
    }
    assert_eq!(stock_as(p.addr, "sku-apple", admin()).await, 10);

    let added = with_token
        .add_stock(add_stock("stock-2", "sku-apple", 5))
        .await
        .expect("add stock with the token")
        .into_inner();
    assert_eq!((added.available, added.replayed), (15, false));

    // Deduct is a saga step: no token needed.
    InventoryServiceClient::new(ch)
        .deduct(inventory::DeductRequest {
            request_id: "deduct-1".into(),
            lines: vec![inventory::Line {
                product_id: "sku-apple".into(),
                quantity: 4,
            }],
        })
        .await
        .expect("deduct without a token");
    assert_eq!(stock_as(p.addr, "sku-apple", admin()).await, 11);
    p.stop().await;
}

#[tokio::test]
async fn fault_api_needs_the_token_on_both_participants() {
    for service in [Service::Payment, Service::Inventory] {
        let p = Participant::start(service, protected()).await;
        let ch = channel(p.addr).await;
        let faulty: faults_pb::FaultSettings = FaultSettings {
            transient_error_rate: 1.0,
            added_latency_ms: 0,
            drop_reply_rate: 0.0,
            refusal_rate: 0.0,
            seed: 42,
        }
        .into();

        for (who, auth) in intruders() {
            let mut client = FaultServiceClient::with_interceptor(ch.clone(), auth);
            assert_unauthenticated(client.set_faults(faulty).await, who);
            // Invalid settings: still UNAUTHENTICATED, not INVALID_ARGUMENT.
            let invalid = faults_pb::FaultSettings {
                refusal_rate: 7.0,
                ..faulty
            };
            assert_unauthenticated(client.set_faults(invalid).await, who);
            assert_unauthenticated(client.get_faults(faults_pb::GetFaultsRequest {}).await, who);
        }

        let mut with_token = FaultServiceClient::with_interceptor(ch.clone(), admin());
        let unchanged = with_token
            .get_faults(faults_pb::GetFaultsRequest {})
            .await
            .expect("get faults with the token")
            .into_inner();
        assert_eq!(
            unchanged.settings,
            Some(FaultSettings::disabled().into()),
            "{service:?}: refused SetFaults changed nothing"
        );
        let set = with_token
            .set_faults(faulty)
            .await
            .expect("set faults with the token")
            .into_inner();
        assert_eq!(set.settings, Some(faulty));
        p.stop().await;
    }
}

#[tokio::test]
async fn without_a_configured_token_everything_passes() {
    let payment_svc = Participant::start(Service::Payment, ServeOptions::default()).await;
    let inventory_svc = Participant::start(Service::Inventory, ServeOptions::default()).await;
    let pay = channel(payment_svc.addr).await;
    let inv = channel(inventory_svc.addr).await;
    // No metadata at all, and a token nobody asked for: both pass.
    for (i, auth) in [TokenAuth::open(), admin()].into_iter().enumerate() {
        PaymentServiceClient::with_interceptor(pay.clone(), auth.clone())
            .deposit(deposit(&format!("open-{i}"), "bob", 100))
            .await
            .expect("open deposit");
        InventoryServiceClient::with_interceptor(inv.clone(), auth.clone())
            .add_stock(add_stock(&format!("open-{i}"), "sku-pear", 3))
            .await
            .expect("open add stock");
        let mut faults = FaultServiceClient::with_interceptor(pay.clone(), auth);
        faults
            .set_faults(faults_pb::FaultSettings::from(FaultSettings::disabled()))
            .await
            .expect("open set faults");
        faults
            .get_faults(faults_pb::GetFaultsRequest {})
            .await
            .expect("open get faults");
    }
    assert_eq!(balance(payment_svc.addr, "bob").await, 200);
    assert_eq!(stock(inventory_svc.addr, "sku-pear").await, 6);
    payment_svc.stop().await;
    inventory_svc.stop().await;
}
