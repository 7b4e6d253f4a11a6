//! Spans over OTLP, as a collector receives them: the real binaries —
//! payment-svc, inventory-svc, loyalty-svc (a generic step) and the
//! orchestrator, each its own process with its own `OTEL_SERVICE_NAME` —
//! export to an OTLP/gRPC receiver the test serves
//! ([`saga_tests::otlp_receiver`]).
//!
//! - `one_trace_per_saga_across_the_services`: a completed and a
//!   compensated order (loyalty-svc refuses the customer, so inventory then
//!   payment are compensated). The services run with the SDK's default
//!   5 s batch delay and are stopped with SIGTERM right after the sagas end,
//!   so the spans checked are the ones the graceful shutdown flushed. Each
//!   saga is one trace, its id the saga's: CreateOrder is the root, the
//!   `saga` span its child, every step attempt and compensation a child of
//!   that, in order (compensations in reverse), and each participant's span
//!   a child of the step attempt that called it, from its own service.
//! - `a_saga_resumed_after_a_restart_continues_its_trace`: the orchestrator
//!   stops while inventory-svc is down (the saga retrying its deduct); a new
//!   orchestrator process on the same store resumes it once inventory-svc
//!   is up. Both processes' `saga` spans are in the saga's trace, children
//!   of the first process's CreateOrder span.
//!
//! The binaries must be built (`cargo build --workspace --bins`; the test
//! command does). Every wait is on a condition with a timeout; every
//! process is stopped by the test, also when it fails.

use saga_proto::inventory::v1 as inventory;
use saga_proto::inventory::v1::inventory_service_client::InventoryServiceClient;
use saga_proto::payment::v1 as payment;
use saga_proto::payment::v1::payment_service_client::PaymentServiceClient;
use saga_proto::saga::v1 as saga;
use saga_proto::saga::v1::order_service_client::OrderServiceClient;
use saga_tests::otlp_receiver::{OtlpReceiver, ReceivedSpan};
use saga_tests::service_process::{ServiceProcess, free_addr};
use saga_tests::{channel, order_request, wait_terminal};
use std::net::SocketAddr;
use std::path::Path;
use std::time::Duration;
use tokio::time::Instant;

/// How long a service has to start, a saga to end, a process to stop.
const LIMIT: Duration = Duration::from_secs(30);

/// Starts `binary` on `addr` with `args` and `env`, exporting its spans
/// to `receiver` as `OTEL_SERVICE_NAME=binary`; waits until it is ready.
async fn start(
    binary: &'static str,
    addr: SocketAddr,
    args: &[&str],
    env: &[(&str, &str)],
    receiver: &OtlpReceiver,
    dir: &Path,
) -> ServiceProcess {
    let endpoint = receiver.endpoint();
    let mut env = env.to_vec();
    env.extend([
        ("OTEL_EXPORTER_OTLP_ENDPOINT", endpoint.as_str()),
        ("OTEL_SERVICE_NAME", binary),
    ]);
    let service = ServiceProcess::spawn(binary, addr, args, &env, dir);
    service.until_ready(LIMIT).await;
    service
}

/// A participant binary (`--data-dir` under `dir`, no metrics) exporting
/// to `receiver`.
async fn participant(
    binary: &'static str,
    addr: SocketAddr,
    env: &[(&str, &str)],
    receiver: &OtlpReceiver,
    dir: &Path,
) -> ServiceProcess {
    let data = dir.join(binary);
    let data = data.to_str().expect("UTF-8 path");
    let args = ["--data-dir", data, "--no-metrics"];
    start(binary, addr, &args, env, receiver, dir).await
}

/// The orchestrator binary over payment, inventory and (when given)
/// loyalty at those addresses, its store under `dir`.
async fn orchestrator(
    addrs: &Addrs,
    loyalty: Option<SocketAddr>,
    receiver: &OtlpReceiver,
    dir: &Path,
) -> ServiceProcess {
    let steps = dir.join("saga-steps.toml");
    let mut file = orchestrator::steps_file::DEFAULT_STEPS.to_owned();
    if let Some(loyalty) = loyalty {
        file.push_str(&format!(
            "\n[[steps]]\nname = \"loyalty\"\naddress = \"http://{loyalty}\"\naction = \"award_points\"\ncompensation = \"revoke_points\"\n"
        ));
    }
    std::fs::write(&steps, file).expect("steps file");
    let data = dir.join("orchestrator");
    let (payment, inventory) = (
        format!("http://{}", addrs.payment),
        format!("http://{}", addrs.inventory),
    );
    let args = [
        "serve",
        "--data-dir",
        data.to_str().expect("UTF-8 path"),
        "--steps-file",
        steps.to_str().expect("UTF-8 path"),
        "--step-address",
        &format!("payment={},inventory={}", &payment, &inventory),
        "--no-console",
        "--no-metrics",
        "--retry-max-delay-ms",
        "200",
    ];
    start(
        "orchestrator",
        addrs.orchestrator,
        &args,
        &[],
        receiver,
        dir,
    )
    .await
}

/// The services' addresses, fixed for the test so a restart reuses them.
struct Addrs {
    payment: SocketAddr,
    inventory: SocketAddr,
    orchestrator: SocketAddr,
}

impl Addrs {
    fn free() -> Addrs {
        Addrs {
            payment: free_addr(),
            inventory: free_addr(),
            orchestrator: free_addr(),
        }
    }
}

async fn deposit(addr: SocketAddr, customer: &str, cents: i64) {
    PaymentServiceClient::new(channel(addr).await)
        .deposit(payment::DepositRequest {
            request_id: format!("deposit-{customer}"),
            customer_id: customer.into(),
            amount_cents: cents,
        })
        .await
        .expect("deposit");
}

async fn add_stock(addr: SocketAddr, product: &str, units: i64) {
    InventoryServiceClient::new(channel(addr).await)
        .add_stock(inventory::AddStockRequest {
            request_id: format!("stock-{product}"),
            product_id: product.into(),
            quantity: units,
        })
        .await
        .expect("add stock");
}

/// CreateOrder (waiting for the end) of one apple for `customer`.
async fn order(addr: SocketAddr, request_id: &str, customer: &str) -> saga::Saga {
    OrderServiceClient::new(channel(addr).await)
        .create_order(order_request(
            request_id,
            customer,
            &[("sku-apple", 1, 250)],
            true,
        ))
        .await
        .expect("create order")
        .into_inner()
        .saga
        .expect("the saga of a waiting CreateOrder")
}

/// The trace id of a saga created without a client `traceparent`: its
/// UUID's 32 hex digits.
fn trace_id_of(saga_id: &str) -> String {
    uuid::Uuid::parse_str(saga_id)
        .expect("saga ids are UUIDs")
        .simple()
        .to_string()
}

/// The spans of one trace, with lookups by name and parent.
struct Trace {
    spans: Vec<ReceivedSpan>,
}

impl Trace {
    fn of(all: &[ReceivedSpan], trace_id: &str) -> Trace {
        let mut spans: Vec<ReceivedSpan> = all
            .iter()
            .filter(|s| s.trace_id == trace_id)
            .cloned()
            .collect();
        spans.sort_by_key(|s| s.start_ns);
        Trace { spans }
    }

    /// The only span named `name` (panics listing the trace otherwise).
    fn one(&self, name: &str) -> &ReceivedSpan {
        let found: Vec<&ReceivedSpan> = self.spans.iter().filter(|s| s.name == name).collect();
        assert_eq!(found.len(), 1, "one {name:?} span in {}", self.listing());
        found[0]
    }

    /// The children of `parent`, oldest first.
    fn children(&self, parent: &ReceivedSpan) -> Vec<&ReceivedSpan> {
        self.spans
            .iter()
            .filter(|s| s.parent_span_id == parent.span_id)
            .collect()
    }

    /// The single child of `parent` (a participant's span under a step
    /// attempt).
    fn only_child(&self, parent: &ReceivedSpan) -> &ReceivedSpan {
        let children = self.children(parent);
        assert_eq!(
            children.len(),
            1,
            "one child of {:?} in {}",
            parent.name,
            self.listing()
        );
        children[0]
    }

    /// One line per span: service, name, id, parent.
    fn listing(&self) -> String {
        self.spans
            .iter()
            .map(|s| {
                format!(
                    "\n  {} {:?} {} <- {}",
                    s.service, s.name, s.span_id, s.parent_span_id
                )
            })
            .collect()
    }
}

/// Checks `trace`'s root (CreateOrder, of `saga_id`) and its `saga` span
/// (children: the step attempts); the step attempts' names and services,
/// oldest first.
fn check_saga_tree<'t>(trace: &'t Trace, saga_id: &str, request_id: &str) -> Vec<&'t ReceivedSpan> {
    let root = trace.one("saga.v1.OrderService/CreateOrder");
    assert_eq!(root.service, "orchestrator");
    assert_eq!(root.parent_span_id, "", "CreateOrder is the root");
    assert_eq!(root.attribute("saga_id"), Some(saga_id));
    assert_eq!(root.attribute("request_id"), Some(request_id));
    let driver = trace.one("saga");
    assert_eq!(driver.parent_span_id, root.span_id, "{}", trace.listing());
    assert_eq!(driver.attribute("saga_id"), Some(saga_id));
    let steps = trace.children(driver);
    for step in &steps {
        assert_eq!(step.service, "orchestrator");
        assert_eq!(step.attribute("saga_id"), Some(saga_id));
        assert_eq!(step.attribute("attempt"), Some("1"), "{step:?}");
        let name = step.attribute("step").expect("step attribute");
        let request = format!("{saga_id}:{name}");
        assert_eq!(step.attribute("request_id"), Some(request.as_str()));
    }
    steps
}

/// Checks that the participant span under `step` is `name` from `service`
/// for the same request id.
fn check_participant(trace: &Trace, step: &ReceivedSpan, service: &str, name: &str) {
    let served = trace.only_child(step);
    assert_eq!(
        (served.service.as_str(), served.name.as_str()),
        (service, name),
        "under {:?}: {}",
        step.name,
        trace.listing()
    );
    assert_eq!(served.attribute("request_id"), step.attribute("request_id"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_trace_per_saga_across_the_services() {
    let dir = tempfile::tempdir().expect("tempdir");
    let receiver = OtlpReceiver::start().await;
    let addrs = Addrs::free();
    let loyalty_addr = free_addr();
    let payment = participant("payment-svc", addrs.payment, &[], &receiver, dir.path()).await;
    let inventory = participant("inventory-svc", addrs.inventory, &[], &receiver, dir.path()).await;
    let blocked = [("LOYALTY_BLOCKED_CUSTOMERS", "mallory")];
    let loyalty = participant("loyalty-svc", loyalty_addr, &blocked, &receiver, dir.path()).await;
    let orchestrator = orchestrator(&addrs, Some(loyalty_addr), &receiver, dir.path()).await;
    deposit(addrs.payment, "alice", 10_000).await;
    deposit(addrs.payment, "mallory", 10_000).await;
    add_stock(addrs.inventory, "sku-apple", 10).await;

    let completed = order(addrs.orchestrator, "otel-completed", "alice").await;
    assert_eq!(completed.status(), saga::SagaStatus::Completed);
    let cancelled = order(addrs.orchestrator, "otel-cancelled", "mallory").await;
    assert_eq!(cancelled.status(), saga::SagaStatus::Cancelled);
    let before_stop = receiver.spans().len();
    for service in [orchestrator, loyalty, inventory, payment] {
        service.stop_cleanly(LIMIT).await;
    }
    let spans = receiver.spans();
    eprintln!(
        "{} spans received ({before_stop} before the services stopped) in {} exports",
        spans.len(),
        receiver.exports()
    );

    let trace = Trace::of(&spans, &trace_id_of(&completed.saga_id));
    let steps = check_saga_tree(&trace, &completed.saga_id, "otel-completed");
    let names: Vec<&str> = steps.iter().map(|s| s.name.as_str()).collect();
    assert_eq!(
        names,
        ["payment action", "inventory action", "loyalty action"],
        "{}",
        trace.listing()
    );
    check_participant(&trace, steps[0], "payment-svc", "charge");
    check_participant(&trace, steps[1], "inventory-svc", "deduct");
    check_participant(&trace, steps[2], "loyalty-svc", "act");
    assert_eq!(trace.spans.len(), 8, "{}", trace.listing());
    eprintln!(
        "completed saga: {} spans{}",
        trace.spans.len(),
        trace.listing()
    );

    let trace = Trace::of(&spans, &trace_id_of(&cancelled.saga_id));
    let steps = check_saga_tree(&trace, &cancelled.saga_id, "otel-cancelled");
    let names: Vec<&str> = steps.iter().map(|s| s.name.as_str()).collect();
    assert_eq!(
        names,
        [
            "payment action",
            "inventory action",
            "loyalty action",
            "inventory compensation",
            "payment compensation",
        ],
        "compensations in reverse order: {}",
        trace.listing()
    );
    assert_eq!(steps[2].attribute("outcome"), Some("refused"));
    check_participant(&trace, steps[0], "payment-svc", "charge");
    check_participant(&trace, steps[1], "inventory-svc", "deduct");
    check_participant(&trace, steps[2], "loyalty-svc", "act");
    check_participant(&trace, steps[3], "inventory-svc", "restock");
    check_participant(&trace, steps[4], "payment-svc", "refund");
    assert_eq!(trace.spans.len(), 12, "{}", trace.listing());
    eprintln!(
        "compensated saga: {} spans{}",
        trace.spans.len(),
        trace.listing()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_saga_resumed_after_a_restart_continues_its_trace() {
    let dir = tempfile::tempdir().expect("tempdir");
    let receiver = OtlpReceiver::start().await;
    let addrs = Addrs::free();
    let payment = participant("payment-svc", addrs.payment, &[], &receiver, dir.path()).await;
    // inventory-svc is not up yet: the deduct is retried.
    let first = orchestrator(&addrs, None, &receiver, dir.path()).await;
    deposit(addrs.payment, "alice", 10_000).await;
    let saga_id = OrderServiceClient::new(channel(addrs.orchestrator).await)
        .create_order(order_request(
            "otel-resumed",
            "alice",
            &[("sku-apple", 1, 250)],
            false,
        ))
        .await
        .expect("create order")
        .into_inner()
        .saga_id;
    let trace_id = trace_id_of(&saga_id);
    // Stopped once the deduct has failed at least once (the step spans of
    // the first process are flushed by its shutdown).
    let started = Instant::now();
    while !retrying(&first.log) {
        assert!(
            started.elapsed() < LIMIT,
            "no failed deduct logged: {:?}",
            first.log_tail(20)
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    first.stop_cleanly(LIMIT).await;

    let inventory = participant("inventory-svc", addrs.inventory, &[], &receiver, dir.path()).await;
    add_stock(addrs.inventory, "sku-apple", 10).await;
    let second = orchestrator(&addrs, None, &receiver, dir.path()).await;
    let done = wait_terminal(addrs.orchestrator, &saga_id, LIMIT).await;
    assert_eq!(done.status(), saga::SagaStatus::Completed);
    for service in [second, inventory, payment] {
        service.stop_cleanly(LIMIT).await;
    }

    let trace = Trace::of(&receiver.spans(), &trace_id);
    let root = trace.one("saga.v1.OrderService/CreateOrder");
    let drivers: Vec<&ReceivedSpan> = trace.spans.iter().filter(|s| s.name == "saga").collect();
    assert_eq!(drivers.len(), 2, "one per process: {}", trace.listing());
    for driver in &drivers {
        assert_eq!(driver.parent_span_id, root.span_id, "{}", trace.listing());
    }
    let resumed = trace.children(drivers[1]);
    let names: Vec<&str> = resumed.iter().map(|s| s.name.as_str()).collect();
    assert_eq!(names, ["inventory action"], "{}", trace.listing());
    check_participant(&trace, resumed[0], "inventory-svc", "deduct");
    let first_attempts = trace.children(drivers[0]);
    assert!(
        first_attempts
            .iter()
            .any(|s| s.name == "inventory action" && s.error),
        "the first process's failed deduct: {}",
        trace.listing()
    );
    eprintln!(
        "resumed saga: {} spans{}",
        trace.spans.len(),
        trace.listing()
    );
}

/// Whether the orchestrator's log (at `log`) shows a failed attempt.
fn retrying(log: &Path) -> bool {
    std::fs::read_to_string(log).is_ok_and(|text| text.contains("attempt failed; retrying"))
}
