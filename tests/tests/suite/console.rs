//! The saga console in a real browser: headless Chromium, driven through
//! WebDriver, against the console of a real stack (participants and
//! orchestrator with service and admin tokens, embedded stores). One test
//! per thing a person does or sees, each on a [`Tour`] of its own (a fresh
//! stack, its four sagas, a browser):
//!
//! - [`list`]: every saga with its status and the counts per status; the
//!   status filter and the search narrow the list; a customer id that is
//!   HTML shows as text.
//! - [`api`]: the JSON API answers errors as JSON with their status, and
//!   pages with ListSagas' tokens.
//! - [`saga_page`]: a saga's page shows its order, steps, timeline and what
//!   the participants recorded — completed, cancelled, failed, and with
//!   HTML in its texts; a running saga's page follows it live, without
//!   reloading, until it is terminal.
//! - [`attention`]: a saga made FAILED by the participants' own fault
//!   injection (`faults.v1`: inventory answers every call with a transient
//!   error, so the restock compensation cannot complete) is retried from
//!   "Needs attention" with the admin token once the fault is cleared, and
//!   ends CANCELLED with one charge and one refund.
//! - [`client_token`]: with a client token configured, the page asks for
//!   it, keeps it for the tab and sends it (API and event stream).
//!
//! Screenshots of the list and of a saga page are taken every run; they are
//! written to `docs/` (the README shows them) only with
//! `UPDATE_SCREENSHOTS=1`, so a test run leaves the repository unchanged.
//!
//! Without chromedriver each test says it skipped and why, and passes —
//! unless `CI=true` or `REQUIRE_BROWSER=1` (the test command sets it),
//! where it fails (see [`browser::chromedriver`]).
//!
//! Every wait polls the page for a condition, with a timeout; none sleeps
//! for a fixed time.

#[path = "console/api.rs"]
mod api;
#[path = "console/attention.rs"]
mod attention;
#[path = "console/browser.rs"]
mod browser;
#[path = "console/client_token.rs"]
mod client_token;
#[path = "console/list.rs"]
mod list;
#[path = "console/saga_page.rs"]
mod saga_page;

use async_trait::async_trait;
use browser::Browser;
use orchestrator::participant::call::Caller;
use orchestrator::saga::{Saga, StepState};
use orchestrator::step::{SagaDefinition, SagaStep, StepOutcome};
use participant_kit::faults::{FaultSettings, TRANSIENT_MESSAGE};
use saga_proto::faults::v1 as faults;
use saga_proto::inventory::v1 as inventory;
use saga_proto::payment::v1 as payment;
use saga_proto::saga::v1 as pb;
use saga_tests::wrapped_step::{StepHook, Wrapped};
use saga_tests::{
    OrchestratorHarness, ParticipantHarness, Running, Service, channel, order_request,
    wait_terminal,
};
use serde_json::{Value, json};
use service_kit::auth::{Role, TokenAuth};
use service_kit::server::ServeOptions;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::watch;

const ADMIN: &str = "console-admin-token-0123456789";
const SERVICE: &str = "console-service-token-0123456789";
/// A customer id that is HTML: it must show as these characters.
const XSS: &str = "<img src=x onerror=alert(1)>";
/// The customer whose sagas wait at their first action until released.
const HELD: &str = "carol";

/// A real step whose action waits while `held` for [`HELD`]'s sagas, so a
/// saga can be watched running and then let go at a moment the test
/// chooses. Only the live-update scenario needs it: the participants' fault
/// injection can fail or delay a call, but a random delay cannot be
/// released on cue, and a page that must be seen RUNNING before the saga
/// ends needs exactly that. Every failure in this test comes from the
/// participants' fault injection instead.
struct Held {
    inner: Arc<dyn SagaStep>,
    held: watch::Receiver<bool>,
}

#[async_trait]
impl StepHook for Held {
    fn inner(&self) -> &Arc<dyn SagaStep> {
        &self.inner
    }

    async fn act(&self, saga: &Saga, step: &StepState) -> StepOutcome {
        if saga.order.customer_id == HELD {
            let mut held = self.held.clone();
            let _ = held.wait_for(|held| !held).await;
        }
        self.inner.act(saga, step).await
    }
}

fn admin() -> TokenAuth {
    TokenAuth::with_token(ADMIN).expect("admin token")
}

fn service() -> TokenAuth {
    TokenAuth::with_token_for(Role::Service, SERVICE).expect("service token")
}

/// The stack under test and the switches of its steps.
struct ConsoleStack {
    _dir: tempfile::TempDir,
    payment: Running,
    inventory: Running,
    orchestrator: Running,
    console: SocketAddr,
    hold: watch::Sender<bool>,
}

impl ConsoleStack {
    async fn start() -> ConsoleStack {
        let dir = tempfile::tempdir().expect("tempdir");
        let options = ServeOptions {
            admin: admin(),
            ..ServeOptions::default()
        }
        .with_service(service());
        let start = |service| {
            ParticipantHarness::new(service, dir.path())
                .options(options.clone())
                .start()
        };
        let payment = start(Service::Payment).await;
        let inventory = start(Service::Inventory).await;
        let (hold, held) = watch::channel(false);
        let caller = Caller::new(Duration::from_secs(2)).with_service_token(service());
        let steps = saga_tests::order_saga_on(
            orchestrator::participant_channel(&format!("http://{}", payment.addr)).expect("ch"),
            orchestrator::participant_channel(&format!("http://{}", inventory.addr)).expect("ch"),
            caller,
        )
        .steps()
        .iter()
        .cloned()
        .map(|inner| {
            Wrapped::step(Held {
                inner,
                held: held.clone(),
            })
        })
        .collect();
        let definition = Arc::new(SagaDefinition::new(steps).expect("definition"));
        let mut retry = saga_tests::fast_retry();
        retry.compensation_attempts = 3;
        let console = saga_tests::listener("127.0.0.1:0".parse().expect("addr")).await;
        let console_addr = console.local_addr().expect("console addr");
        let orchestrator = OrchestratorHarness::new(dir.path(), definition)
            .retry(retry)
            .options(ServeOptions {
                admin: admin(),
                ..ServeOptions::default()
            })
            .console(console)
            .start()
            .await;
        ConsoleStack {
            _dir: dir,
            payment,
            inventory,
            orchestrator,
            console: console_addr,
            hold,
        }
    }

    /// SetFaults on inventory-svc (`faults.v1`, with the admin token).
    async fn inventory_faults(&self, settings: FaultSettings) {
        faults::fault_service_client::FaultServiceClient::new(channel(self.inventory.addr).await)
            .set_faults(admin().request(faults::FaultSettings::from(settings)))
            .await
            .expect("set faults");
    }

    fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.console)
    }

    async fn seed(&self) {
        let mut payments = payment::payment_service_client::PaymentServiceClient::new(
            channel(self.payment.addr).await,
        );
        for (customer, cents) in [("alice", 100_000), ("bob", 10_000), (HELD, 10_000)] {
            payments
                .deposit(admin().request(payment::DepositRequest {
                    request_id: format!("seed-{customer}"),
                    customer_id: customer.into(),
                    amount_cents: cents,
                }))
                .await
                .expect("deposit");
        }
        let mut stock = inventory::inventory_service_client::InventoryServiceClient::new(
            channel(self.inventory.addr).await,
        );
        for (product, units) in [("sku-apple", 100), ("sku-pear", 3)] {
            stock
                .add_stock(admin().request(inventory::AddStockRequest {
                    request_id: format!("seed-{product}"),
                    product_id: product.into(),
                    quantity: units,
                }))
                .await
                .expect("add stock");
        }
    }

    /// CreateOrder; waits for the end unless `wait` is false. Returns the
    /// saga id.
    async fn order(
        &self,
        request_id: &str,
        customer: &str,
        item: (&str, i64, i64),
        wait: bool,
    ) -> String {
        let mut orders = pb::order_service_client::OrderServiceClient::new(
            channel(self.orchestrator.addr).await,
        );
        orders
            .create_order(order_request(request_id, customer, &[item], wait))
            .await
            .expect("create order")
            .into_inner()
            .saga_id
    }

    async fn stop(self) {
        self.orchestrator.stop().await;
        self.payment.stop().await;
        self.inventory.stop().await;
    }
}

/// The sagas the test created, by what they show.
struct Sagas {
    completed: String,
    cancelled: String,
    failed: String,
    xss: String,
}

async fn create_sagas(stack: &ConsoleStack) -> Sagas {
    let completed = stack
        .order("web-1", "alice", ("sku-apple", 2, 150), true)
        .await;
    // 5 pears, 3 in stock: charged, deduct refused, refunded.
    let cancelled = stack
        .order("web-2", "bob", ("sku-pear", 5, 200), true)
        .await;
    // No account: the charge is refused, with the customer id in its text.
    let xss = stack.order("web-3", XSS, ("sku-apple", 1, 100), true).await;
    // Inventory fails every call (fault injection): charged, the deduct
    // gives up after 5 attempts, its restock after 3: FAILED. The fault
    // stays until a person clears it (see the retry scenario).
    stack
        .inventory_faults(FaultSettings {
            transient_error_rate: 1.0,
            ..FaultSettings::disabled()
        })
        .await;
    let failed = stack
        .order("web-4", "alice", ("sku-pear", 2, 200), true)
        .await;
    let status = |id: String| async move {
        wait_terminal(stack.orchestrator.addr, &id, Duration::from_secs(10))
            .await
            .status()
    };
    assert_eq!(status(completed.clone()).await, pb::SagaStatus::Completed);
    assert_eq!(status(cancelled.clone()).await, pb::SagaStatus::Cancelled);
    assert_eq!(status(failed.clone()).await, pb::SagaStatus::Failed);
    assert_eq!(status(xss.clone()).await, pb::SagaStatus::Cancelled);
    Sagas {
        completed,
        cancelled,
        failed,
        xss,
    }
}

/// One scenario's world: a fresh [`ConsoleStack`], seeded, with its four
/// [`Sagas`], and a browser showing the list. Each test takes a tour of
/// its own, so no scenario depends on what another one did; only the
/// browser is shared, between tests, never during one.
struct Tour {
    stack: ConsoleStack,
    sagas: Sagas,
    b: Browser,
}

impl Tour {
    /// The tour, or None (having said why) when there is no chromedriver
    /// and none is required. Tests take one through [`tour`].
    async fn start() -> Option<Tour> {
        let chromedriver = browser::chromedriver()?;
        let stack = ConsoleStack::start().await;
        stack.seed().await;
        let sagas = create_sagas(&stack).await;
        let mut b = Browser::borrow(&chromedriver).await;
        b.open(&stack.url("/")).await;
        // The list's script has run (its handlers are attached) once it
        // marked the list loaded; a scenario that acts at once must not
        // act on a page whose script has not (seen in CI: a status filter
        // set before the script ran was reset by it and never applied).
        b.wait_for(
            "the list loaded by its script",
            "return document.getElementById('sagas').dataset.loaded === 'true';",
            vec![],
        )
        .await;
        Some(Tour { stack, sagas, b })
    }

    /// Gives the browser back (see [`Browser::give_back`]) and stops the
    /// stack.
    async fn end(self) {
        self.b.give_back().await;
        self.stack.stop().await;
    }
}

/// Runs `scenario` on a [`Tour`] of its own, with its browser, stack and
/// sagas; skips (having said why) when there is no browser and none is
/// required.
async fn tour(scenario: impl AsyncFnOnce(&mut Browser, &ConsoleStack, &Sagas)) {
    let Some(mut t) = Tour::start().await else {
        return;
    };
    scenario(&mut t.b, &t.stack, &t.sagas).await;
    t.end().await;
}

/// Asserts the open page made no element and opened no alert out of the
/// HTML it shows as text.
async fn assert_no_html_ran(b: &mut Browser) {
    let images = b
        .eval("return document.querySelectorAll('img').length;", vec![])
        .await;
    assert_eq!(images, json!(0), "the customer id became an element");
    assert!(
        b.client.get_alert_text().await.is_err(),
        "an alert is open: the customer id ran as script"
    );
}

/// Where a screenshot goes: `docs/` with `UPDATE_SCREENSHOTS=1`, else the
/// system's temp dir.
fn docs(file: &str) -> PathBuf {
    if std::env::var("UPDATE_SCREENSHOTS").is_ok_and(|v| v == "1") {
        Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../docs")
            .join(file)
    } else {
        std::env::temp_dir().join(format!("saga-{}-{file}", std::process::id()))
    }
}

/// Removes a screenshot taken only to check it can be (not kept unless
/// `UPDATE_SCREENSHOTS=1`).
fn drop_unless_updating(shot: &Path) {
    if !std::env::var("UPDATE_SCREENSHOTS").is_ok_and(|v| v == "1") {
        let _ = std::fs::remove_file(shot);
    }
}
