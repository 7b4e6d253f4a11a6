//! payment-svc and inventory-svc are saga steps like any other: the kit
//! passes them through every rule of the contract, batches included, on
//! the embedded store and on MongoDB (SecantusDB unless `MONGODB_URI`
//! names a real one), checked under their own history kinds (charge /
//! refund, deduct / restock).
//!
//! Each is started in-process as its binary serves it, funded through its
//! domain API (a deposit, stock), and refuses an order whose customer has
//! no account / whose product it does not sell.

mod support;

use participant_check::{OrderSpec, Settings};
use saga_proto::inventory::v1 as inventory;
use saga_proto::payment::v1 as payment;
use saga_tests::{ParticipantHarness, Running, Service, Storage, channel};
use service_kit::auth::{Role, TokenAuth};
use service_kit::server::ServeOptions;

/// The service token both are started with (and the kit sends).
const TOKEN: &str = "builtin-token";

/// Enough for every rule's acts (a few hundred orders of 2500 cents /
/// 2 units) many times over.
const PLENTY: i64 = 1_000_000_000;

fn order() -> OrderSpec {
    OrderSpec::default()
}

/// An order the participant refuses: `customer`/`product` it has never
/// heard of.
fn unknown(customer: &str, product: &str) -> OrderSpec {
    OrderSpec::parse(&format!(
        r#"{{"customer_id":"{customer}","lines":[{{"product_id":"{product}","quantity":1,"unit_price_cents":700}}]}}"#
    ))
    .expect("refused order")
}

fn settings(participant: &Running, refused: OrderSpec, kinds: (&str, &str)) -> Settings {
    let mut settings = Settings::new(participant.addr.to_string());
    settings.refused_order = Some(refused);
    settings.action_kind = kinds.0.into();
    settings.compensation_kind = kinds.1.into();
    settings.token = Some(TOKEN.into());
    settings
}

/// `service` on `storage`, requiring [`TOKEN`] of its callers.
async fn start(service: Service, storage: Storage) -> Running {
    let token = TokenAuth::with_token_for(Role::Service, TOKEN).expect("token");
    ParticipantHarness::new(service, storage)
        .options(ServeOptions::default().with_service(token))
        .start()
        .await
}

async fn payment_passes_every_rule(storage: Storage) {
    let payment_svc = start(Service::Payment, storage).await;
    let customer = order().customer_id;
    payment::payment_service_client::PaymentServiceClient::new(channel(payment_svc.addr).await)
        .deposit(payment::DepositRequest {
            request_id: "fund-participant-check".into(),
            customer_id: customer.clone(),
            amount_cents: PLENTY,
        })
        .await
        .expect("deposit");
    let refused = unknown("no-such-customer", "participant-check-item");
    let report = support::check(settings(&payment_svc, refused, ("charge", "refund"))).await;
    support::assert_all_pass(&report);
    payment_svc.stop().await;
}

async fn inventory_passes_every_rule(storage: Storage) {
    let inventory_svc = start(Service::Inventory, storage).await;
    let product = order().lines[0].product_id.clone();
    inventory::inventory_service_client::InventoryServiceClient::new(
        channel(inventory_svc.addr).await,
    )
    .add_stock(inventory::AddStockRequest {
        request_id: "stock-participant-check".into(),
        product_id: product,
        quantity: PLENTY,
    })
    .await
    .expect("add stock");
    let refused = unknown("participant-check", "no-such-product");
    let report = support::check(settings(&inventory_svc, refused, ("deduct", "restock"))).await;
    support::assert_all_pass(&report);
    inventory_svc.stop().await;
}

#[tokio::test]
async fn payment_on_the_embedded_store_passes_every_rule() {
    let dir = tempfile::tempdir().expect("tempdir");
    payment_passes_every_rule(dir.path().into()).await;
}

#[tokio::test]
async fn inventory_on_the_embedded_store_passes_every_rule() {
    let dir = tempfile::tempdir().expect("tempdir");
    inventory_passes_every_rule(dir.path().into()).await;
}

#[tokio::test]
async fn payment_on_mongodb_passes_every_rule() {
    let Some(storage) = Storage::fresh_mongo() else {
        return;
    };
    payment_passes_every_rule(storage).await;
}

#[tokio::test]
async fn inventory_on_mongodb_passes_every_rule() {
    let Some(storage) = Storage::fresh_mongo() else {
        return;
    };
    inventory_passes_every_rule(storage).await;
}
