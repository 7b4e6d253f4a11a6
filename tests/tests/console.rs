//! The saga console in a real browser: headless Chromium, driven through
//! WebDriver, against the console of a real stack (participants and
//! orchestrator with service and admin tokens, embedded stores).
//!
//! A person opening the console sees every saga with its status and the
//! counts per status; the status filter and the search narrow the list; a
//! saga's page shows its order, steps, timeline and what the participants
//! recorded; a running saga's page follows it live, without reloading,
//! until it is terminal; a saga made FAILED by the participants' own fault
//! injection (`faults.v1`: inventory answers every call with a transient
//! error, so the restock compensation cannot complete) is retried from
//! "Needs attention" with the admin token once the fault is cleared, and
//! ends CANCELLED with one charge and one refund; and a customer id that is
//! HTML shows as text, in the list and on its saga page (its error texts
//! too). Screenshots of the list and of a saga page are
//! taken every run; they are written to `docs/` (the README shows them)
//! only with `UPDATE_SCREENSHOTS=1`, so a test run leaves the repository
//! unchanged.
//!
//! Every wait polls the page for a condition, with a timeout; none sleeps
//! for a fixed time.

#[path = "console/browser.rs"]
mod browser;

use async_trait::async_trait;
use browser::Browser;
use orchestrator::order_saga::OrderParticipants;
use orchestrator::order_saga::call::Caller;
use orchestrator::saga::{Saga, Step};
use orchestrator::step::{SagaDefinition, SagaStep, StepOutcome};
use participant_kit::faults::{FaultSettings, Faults, TRANSIENT_MESSAGE};
use saga_proto::faults::v1 as faults;
use saga_proto::inventory::v1 as inventory;
use saga_proto::payment::v1 as payment;
use saga_proto::saga::v1 as pb;
use saga_tests::wrapped_step::{StepHook, Wrapped};
use saga_tests::{Running, Service, channel, order_request, wait_terminal};
use serde_json::{Value, json};
use service_kit::auth::{Role, TokenAuth};
use service_kit::server::ServeOptions;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};
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

    async fn act(&self, saga: &Saga, step: &Step) -> StepOutcome {
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
            saga_tests::start_participant_with(
                service,
                dir.path(),
                Arc::new(Faults::disabled()),
                options.clone(),
                None,
            )
        };
        let payment = start(Service::Payment).await;
        let inventory = start(Service::Inventory).await;
        let (hold, held) = watch::channel(false);
        let caller = Caller::new(Duration::from_secs(2)).with_service_token(service());
        let steps = OrderParticipants::with_caller(
            orchestrator::participant_channel(&format!("http://{}", payment.addr)).expect("ch"),
            orchestrator::participant_channel(&format!("http://{}", inventory.addr)).expect("ch"),
            caller,
        )
        .steps()
        .into_iter()
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
        let grpc = saga_tests::listener("127.0.0.1:0".parse().expect("addr")).await;
        let console = saga_tests::listener("127.0.0.1:0".parse().expect("addr")).await;
        let console_addr = console.local_addr().expect("console addr");
        let port = grpc.local_addr().expect("addr").port();
        let orchestrator = saga_tests::serve_orchestrator_with_console(
            dir.path(),
            definition,
            saga_tests::test_settings(retry, port),
            ServeOptions {
                admin: admin(),
                ..ServeOptions::default()
            },
            grpc,
            Some(console),
        )
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

/// The list's rows as `{saga_id: status}` once it shows `n` rows.
const ROWS: &str = "
    const rows = [...document.querySelectorAll('#sagas tbody tr[data-saga-id]')];
    if (rows.length !== arguments[0]) return null;
    const out = {};
    for (const tr of rows) out[tr.dataset.sagaId] = tr.querySelector('td.status').innerText.trim();
    return out;";

/// Whether the list shows exactly the saga `arguments[0]`.
const ONLY: &str = "
    const rows = [...document.querySelectorAll('#sagas tbody tr[data-saga-id]')];
    return rows.length === 1 && rows[0].dataset.sagaId === arguments[0];";

/// The counts at the top as `{status: n}` once they say `total` sagas.
const COUNTS: &str = "
    const all = document.querySelector('#counts [data-status=all] .n');
    if (!all || all.textContent !== String(arguments[0])) return null;
    const out = {};
    for (const b of document.querySelectorAll('#counts .count'))
        out[b.dataset.status] = Number(b.querySelector('.n').textContent);
    return out;";

async fn the_list_shows_every_saga_with_its_status_and_the_counts(b: &mut Browser, s: &Sagas) {
    let rows = b
        .wait_for("the four sagas in the list", ROWS, vec![json!(4)])
        .await;
    for (id, label) in [
        (&s.completed, "completed"),
        (&s.cancelled, "cancelled"),
        (&s.failed, "failed"),
        (&s.xss, "cancelled"),
    ] {
        let shown = rows[id.as_str()].as_str().unwrap_or_default();
        assert!(
            shown.ends_with(label),
            "saga {id} shows {shown:?}, not {label}"
        );
    }
    let counts = b
        .wait_for("counts of four sagas", COUNTS, vec![json!(4)])
        .await;
    assert_eq!(
        counts,
        json!({"all": 4, "running": 0, "compensating": 0, "completed": 1, "cancelled": 2, "failed": 1})
    );
}

async fn the_status_filter_and_the_search_narrow_the_list(b: &mut Browser, s: &Sagas) {
    b.eval(
        "const s = document.getElementById('status'); s.value = 'FAILED';
         s.dispatchEvent(new Event('change'));",
        vec![],
    )
    .await;
    let rows = b
        .wait_for("only the FAILED saga", ROWS, vec![json!(1)])
        .await;
    assert!(rows.get(&s.failed).is_some(), "{rows}");
    let url = b.eval("return location.search;", vec![]).await;
    assert_eq!(
        url,
        json!("?status=FAILED"),
        "the filter is kept in the URL"
    );
    for (q, expected, matched) in [
        ("bob", &s.cancelled, "customer id"),
        ("web-1", &s.completed, "request id"),
        (s.xss.as_str(), &s.xss, "saga id"),
    ] {
        b.eval(
            "document.getElementById('status').value = '';
             document.getElementById('q').value = arguments[0];
             document.getElementById('filters').requestSubmit();",
            vec![json!(q)],
        )
        .await;
        b.wait_for(
            &format!("the search for {q} to list only {expected}"),
            ONLY,
            vec![json!(expected)],
        )
        .await;
        let notice = b
            .wait_for(
                "what matched",
                "return document.getElementById('notice').innerText;",
                vec![],
            )
            .await;
        assert!(
            notice
                .as_str()
                .unwrap_or_default()
                .ends_with(&format!("matched by {matched}.")),
            "{notice}"
        );
    }
    b.eval("document.getElementById('clear').click();", vec![])
        .await;
    b.wait_for("all four sagas again", ROWS, vec![json!(4)])
        .await;
}

async fn html_in_a_customer_id_shows_as_text(b: &mut Browser, s: &Sagas) {
    let shown = b
        .eval(
            "const tr = document.querySelector(`#sagas tr[data-saga-id='${arguments[0]}']`);
             return tr.querySelector('td.customer').textContent;",
            vec![json!(s.xss)],
        )
        .await;
    assert_eq!(shown, json!(XSS));
    let images = b
        .eval("return document.querySelectorAll('img').length;", vec![])
        .await;
    assert_eq!(images, json!(0), "the customer id became an element");
    assert!(
        b.client.get_alert_text().await.is_err(),
        "an alert is open: the customer id ran as script"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_person_follows_filters_and_retries_sagas_in_the_console() {
    let Some(chromedriver) = browser::chromedriver() else {
        return;
    };
    let started = Instant::now();
    let stack = ConsoleStack::start().await;
    stack.seed().await;
    let sagas = create_sagas(&stack).await;
    let logs = tempfile::tempdir().expect("log dir");
    let mut b = Browser::start(&chromedriver, logs.path()).await;

    b.open(&stack.url("/")).await;
    the_list_shows_every_saga_with_its_status_and_the_counts(&mut b, &sagas).await;
    html_in_a_customer_id_shows_as_text(&mut b, &sagas).await;
    let shot = docs("console-list.png");
    b.screenshot(&shot).await;
    drop_unless_updating(&shot);
    the_status_filter_and_the_search_narrow_the_list(&mut b, &sagas).await;
    the_api_answers_errors_as_json_with_their_status(&mut b, &sagas).await;
    the_api_pages_with_list_sagas_tokens(&mut b, &stack).await;
    a_saga_page_shows_order_steps_timeline_and_records(&mut b, &stack, &sagas).await;
    a_cancelled_saga_page_shows_the_refusal_and_the_refund(&mut b, &stack, &sagas).await;
    a_failed_saga_page_shows_the_failing_compensation(&mut b, &stack, &sagas).await;
    html_in_a_customer_id_shows_as_text_on_its_saga_page(&mut b, &stack, &sagas).await;
    // Before the live scenario: the injected fault stays on until the
    // person clears it here, and the live saga needs inventory working.
    retry_from_needs_attention_finishes_a_failed_saga(&mut b, &stack, &sagas).await;
    a_running_saga_page_updates_without_reload(&mut b, &stack).await;

    b.close().await;
    stack.stop().await;
    eprintln!("console browser test: {:?}", started.elapsed());
}

/// `[HTTP status, JSON body]` of a request the page makes (same origin).
async fn fetch(b: &mut Browser, path: &str, method: &str) -> Value {
    const FETCH: &str = "
        const done = arguments[arguments.length - 1];
        fetch(arguments[0], { method: arguments[1] })
          .then(async (r) => done([r.status, await r.json()]))
          .catch((e) => done(String(e)));";
    match b
        .client
        .execute_async(FETCH, vec![json!(path), json!(method)])
        .await
    {
        Ok(value) => value,
        Err(e) => b.fail(&format!("fetch {method} {path}: {e}")),
    }
}

async fn the_api_answers_errors_as_json_with_their_status(b: &mut Browser, s: &Sagas) {
    let bad = fetch(b, "/api/sagas?status=SLEEPING", "GET").await;
    assert_eq!(bad[0], json!(400), "{bad}");
    assert_eq!(bad[1]["field"], json!("status"), "{bad}");
    let missing = fetch(b, "/api/sagas/no-such-saga", "GET").await;
    assert_eq!(missing[0], json!(404), "{missing}");
    assert_eq!(missing[1]["code"], json!("NOT_FOUND"), "{missing}");
    let refused = fetch(b, &format!("/api/sagas/{}/retry", s.failed), "POST").await;
    assert_eq!(refused[0], json!(401), "retry without the token: {refused}");
    let completed = fetch(b, &format!("/api/sagas/{}", s.completed), "GET").await;
    assert_eq!(completed[1]["status"], json!("SAGA_STATUS_COMPLETED"));
}

/// `/api/sagas` pages as ListSagas does, with the same tokens: a token
/// from one continues the listing in the other.
async fn the_api_pages_with_list_sagas_tokens(b: &mut Browser, stack: &ConsoleStack) {
    let ids = |page: &Value| -> Vec<String> {
        page["sagas"]
            .as_array()
            .map(|sagas| {
                sagas
                    .iter()
                    .filter_map(|s| s["saga_id"].as_str().map(str::to_owned))
                    .collect()
            })
            .unwrap_or_default()
    };
    let first = fetch(b, "/api/sagas?page_size=3", "GET").await;
    let token = first[1]["next_page_token"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    assert!(!token.is_empty(), "{first}");
    let second = fetch(
        b,
        &format!("/api/sagas?page_size=3&page_token={token}"),
        "GET",
    )
    .await;
    let mut sagas =
        pb::saga_service_client::SagaServiceClient::new(channel(stack.orchestrator.addr).await);
    let grpc = |page_token: String| pb::ListSagasRequest {
        page_size: 3,
        page_token,
        ..Default::default()
    };
    let grpc_first = sagas
        .list_sagas(grpc(String::new()))
        .await
        .expect("list")
        .into_inner();
    let grpc_second = sagas
        .list_sagas(grpc(token))
        .await
        .expect("list")
        .into_inner();
    let grpc_ids = |page: &pb::ListSagasResponse| -> Vec<String> {
        page.sagas.iter().map(|s| s.saga_id.clone()).collect()
    };
    assert_eq!(ids(&first[1]), grpc_ids(&grpc_first));
    assert_eq!(ids(&second[1]), grpc_ids(&grpc_second));
    assert_eq!(
        first[1]["next_page_token"],
        json!(grpc_first.next_page_token)
    );
    let edited = fetch(b, "/api/sagas?page_token=bm9wZQ", "GET").await;
    assert_eq!(
        (edited[0].clone(), edited[1]["field"].clone()),
        (json!(400), json!("page_token"))
    );
}

/// What the open saga page shows (see [`SagaPage`]) once it shows the saga
/// status `arguments[0]` and the participants' records are loaded.
const PAGE: &str = "
    if (document.body.dataset.sagaStatus !== arguments[0]) return null;
    if (document.getElementById('records').dataset.loaded !== 'true') return null;
    const text = (root, selector) => root.querySelector(selector).textContent;
    return {
      customer: text(document, '[data-fact=customer]'),
      reason: text(document, '#reason'),
      total: text(document, '#total'),
      lines: [...document.querySelectorAll('#lines tbody tr')]
        .map(r => [text(r, '.product'), r.cells[2].textContent]),
      steps: [...document.querySelectorAll('#steps tbody tr')].map(r => ({
        name: r.dataset.step,
        status: r.querySelector('.status [data-status]').dataset.status,
        attempts: text(r, '.attempts'),
        compensation_attempts: text(r, '.compensation-attempts'),
        took: text(r, '.took'),
        error: text(r, '.error'),
      })),
    };";

/// A saga page as a person reads it.
#[derive(Debug, serde::Deserialize)]
struct SagaPage {
    customer: String,
    /// "Why: …", or empty.
    reason: String,
    total: String,
    /// (product, quantity) of each order line.
    lines: Vec<(String, String)>,
    steps: Vec<StepRow>,
}

/// One row of a saga page's steps table.
#[derive(Debug, serde::Deserialize)]
struct StepRow {
    name: String,
    status: String,
    attempts: String,
    compensation_attempts: String,
    /// How long the step took, as shown ("—" while it has not finished).
    took: String,
    /// The step's last error, or empty.
    error: String,
}

impl SagaPage {
    /// Opens saga `id`'s page and reads it once it shows `status`
    /// (`SAGA_STATUS_…`).
    async fn open(b: &mut Browser, stack: &ConsoleStack, id: &str, status: &str) -> SagaPage {
        b.open(&stack.url(&format!("/sagas/{id}"))).await;
        SagaPage::read(b, status).await
    }

    /// Reads the open saga page once it shows `status`.
    async fn read(b: &mut Browser, status: &str) -> SagaPage {
        let page = b
            .wait_for(
                &format!("the saga page {status}"),
                PAGE,
                vec![json!(status)],
            )
            .await;
        serde_json::from_value(page.clone()).unwrap_or_else(|e| panic!("{e}: {page}"))
    }

    /// Each step as (name, status, attempts, compensation attempts).
    fn steps(&self) -> Vec<(&str, &str, &str, &str)> {
        self.steps
            .iter()
            .map(|s| {
                (
                    s.name.as_str(),
                    s.status.as_str(),
                    s.attempts.as_str(),
                    s.compensation_attempts.as_str(),
                )
            })
            .collect()
    }

    /// Each step's last error.
    fn errors(&self) -> Vec<&str> {
        self.steps.iter().map(|s| s.error.as_str()).collect()
    }

    /// Asserts every step shows how long it took ("12 ms", "1.25 s").
    fn assert_durations_shown(&self) {
        for step in &self.steps {
            assert!(
                is_duration(&step.took),
                "{}: took {:?}",
                step.name,
                step.took
            );
        }
    }
}

/// Whether `text` is a duration as the console shows one under a minute.
fn is_duration(text: &str) -> bool {
    let number = |n: &str| !n.is_empty() && n.chars().all(|c| c.is_ascii_digit() || c == '.');
    text.strip_suffix(" ms")
        .or_else(|| text.strip_suffix(" s"))
        .is_some_and(number)
}

fn lines(items: &[(&str, &str)]) -> Vec<(String, String)> {
    items
        .iter()
        .map(|(p, q)| ((*p).to_owned(), (*q).to_owned()))
        .collect()
}

async fn a_saga_page_shows_order_steps_timeline_and_records(
    b: &mut Browser,
    stack: &ConsoleStack,
    s: &Sagas,
) {
    let page = SagaPage::open(b, stack, &s.completed, "SAGA_STATUS_COMPLETED").await;
    assert_eq!(page.customer, "alice");
    assert_eq!(page.total, "3.00");
    assert_eq!(page.lines, lines(&[("sku-apple", "2")]));
    assert_eq!(page.reason, "", "a completed saga has no reason");
    assert_eq!(
        page.steps(),
        [
            ("payment", "succeeded", "1", "0"),
            ("inventory", "succeeded", "1", "0")
        ]
    );
    assert_eq!(page.errors(), ["", ""]);
    page.assert_durations_shown();
    let timeline = b
        .eval(
            "return [...document.querySelectorAll('#timeline li')].map(li => li.querySelector('.since').textContent);",
            vec![],
        )
        .await;
    let timeline = timeline.as_array().cloned().unwrap_or_default();
    assert!(timeline.len() >= 3, "{timeline:?}");
    assert_eq!(timeline[0], json!("start"));
    assert!(
        timeline[1..]
            .iter()
            .all(|t| t.as_str().is_some_and(|t| t.starts_with('+'))),
        "{timeline:?}"
    );
    records_show(b, "payment", &[("charge", "applied")]).await;
    records_show(
        b,
        "inventory",
        &[("deduct", "applied"), ("deduct", "deducted")],
    )
    .await;
}

/// bob's 5 pears (3 in stock): charged, the deduct refused, refunded.
async fn a_cancelled_saga_page_shows_the_refusal_and_the_refund(
    b: &mut Browser,
    stack: &ConsoleStack,
    s: &Sagas,
) {
    let page = SagaPage::open(b, stack, &s.cancelled, "SAGA_STATUS_CANCELLED").await;
    assert_eq!(page.customer, "bob");
    assert_eq!(page.lines, lines(&[("sku-pear", "5")]));
    assert_eq!(page.total, "10.00");
    assert_eq!(
        page.steps(),
        [
            ("payment", "compensated", "1", "1"),
            ("inventory", "refused", "1", "0")
        ]
    );
    let refusal = "insufficient stock: product \"sku-pear\" has 3 units available, deduct needs 5";
    assert_eq!(page.errors()[0], "");
    assert!(page.errors()[1].ends_with(refusal), "{:?}", page.errors());
    assert!(page.reason.starts_with("Why: "), "{:?}", page.reason);
    assert!(page.reason.ends_with(refusal), "{:?}", page.reason);
    page.assert_durations_shown();
    records_show(b, "payment", &[("charge", "applied"), ("refund", "undone")]).await;
    records_show(b, "inventory", &[("deduct", "refused")]).await;
}

/// alice's order while inventory fails every call: charged, the deduct
/// given up after 5 attempts, its restock after 3.
async fn a_failed_saga_page_shows_the_failing_compensation(
    b: &mut Browser,
    stack: &ConsoleStack,
    s: &Sagas,
) {
    let page = SagaPage::open(b, stack, &s.failed, "SAGA_STATUS_FAILED").await;
    assert_eq!(page.customer, "alice");
    assert_eq!(page.lines, lines(&[("sku-pear", "2")]));
    assert_eq!(
        page.steps(),
        [
            ("payment", "succeeded", "1", "0"),
            ("inventory", "compensating", "5", "3")
        ]
    );
    let injected = format!("Unavailable: {TRANSIENT_MESSAGE}");
    assert_eq!(page.errors(), ["", injected.as_str()]);
    assert_eq!(
        page.reason,
        format!("Why: restock could not be completed: {injected}")
    );
    assert!(is_duration(&page.steps[0].took), "{:?}", page.steps[0]);
    assert_eq!(
        page.steps[1].took, "—",
        "the inventory step has not finished"
    );
    let retry = b
        .eval(
            "return !document.getElementById('retry-bar').hidden;",
            vec![],
        )
        .await;
    assert_eq!(retry, json!(true), "a FAILED saga offers Retry");
    records_show(b, "payment", &[("charge", "applied")]).await;
    // Every inventory call failed before doing anything.
    records_show(b, "inventory", &[]).await;
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

async fn html_in_a_customer_id_shows_as_text_on_its_saga_page(
    b: &mut Browser,
    stack: &ConsoleStack,
    s: &Sagas,
) {
    let page = SagaPage::open(b, stack, &s.xss, "SAGA_STATUS_CANCELLED").await;
    assert_eq!(page.customer, XSS);
    // payment-svc's refusal names the customer: the error text is HTML too.
    let refusal = format!("customer {XSS:?} has no account");
    assert!(page.errors()[0].ends_with(&refusal), "{:?}", page.errors());
    assert!(page.reason.ends_with(&refusal), "{:?}", page.reason);
    let timeline = b
        .eval(
            "return [...document.querySelectorAll('#timeline .detail')].some(d => d.textContent.includes(arguments[0]));",
            vec![json!(XSS)],
        )
        .await;
    assert_eq!(
        timeline,
        json!(true),
        "the timeline shows the refusal as text"
    );
    assert_no_html_ran(b).await;
}

/// Waits until the records of `step` list exactly these (kind, status).
async fn records_show(b: &mut Browser, step: &str, expected: &[(&str, &str)]) {
    let expected: Vec<Value> = expected.iter().map(|(k, s)| json!([k, s])).collect();
    b.wait_for(
        &format!("the {step} records {expected:?}"),
        "const section = document.querySelector(`#records [data-step='${arguments[0]}']`);
         if (!section) return false;
         const rows = [...section.querySelectorAll('tbody tr')];
         const got = rows.map(r => [r.dataset.kind, r.dataset.recordStatus]);
         return JSON.stringify(got) === JSON.stringify(arguments[1]);",
        vec![json!(step), json!(expected)],
    )
    .await;
}

async fn a_running_saga_page_updates_without_reload(b: &mut Browser, stack: &ConsoleStack) {
    stack.hold.send_replace(true);
    let id = stack
        .order("web-5", HELD, ("sku-apple", 3, 100), false)
        .await;
    b.open(&stack.url(&format!("/sagas/{id}"))).await;
    b.wait_for(
        "the saga running, followed live",
        "return document.body.dataset.sagaStatus === 'SAGA_STATUS_RUNNING'
            && document.getElementById('live').textContent.includes('live');",
        vec![],
    )
    .await;
    // Survives only if the page is never reloaded.
    b.eval("window.__stillTheSamePage = true;", vec![]).await;
    stack.hold.send_replace(false);
    b.wait_for(
        "the saga completed on the open page",
        "return document.body.dataset.sagaStatus === 'SAGA_STATUS_COMPLETED'
            && document.getElementById('live').textContent === 'final';",
        vec![],
    )
    .await;
    let same = b
        .eval("return window.__stillTheSamePage === true;", vec![])
        .await;
    assert_eq!(same, json!(true), "the page was reloaded");
    records_show(b, "payment", &[("charge", "applied")]).await;
}

async fn retry_from_needs_attention_finishes_a_failed_saga(
    b: &mut Browser,
    stack: &ConsoleStack,
    s: &Sagas,
) {
    b.open(&stack.url("/attention")).await;
    let row = format!("#failed tr[data-saga-id='{}']", s.failed);
    let cause = b
        .wait_for(
            "the FAILED saga and its cause",
            "const tr = document.querySelector(arguments[0]); return tr && tr.querySelector('.cause').innerText;",
            vec![json!(row)],
        )
        .await;
    assert!(
        cause
            .as_str()
            .unwrap_or_default()
            .contains("restock could not be completed"),
        "{cause}"
    );
    // The person fixes the cause (clears the injected fault), then
    // retries; the console asks for the admin token (one is configured)
    // and sends it.
    stack.inventory_faults(FaultSettings::disabled()).await;
    b.eval(
        "document.querySelector(arguments[0] + ' button.retry').click();",
        vec![json!(row)],
    )
    .await;
    b.wait_for(
        "the admin token form",
        "return !document.getElementById('token-form').hidden;",
        vec![],
    )
    .await;
    b.eval(
        "document.getElementById('admin-token').value = arguments[0];
         document.getElementById('token-form').requestSubmit();",
        vec![json!(ADMIN)],
    )
    .await;
    b.wait_for(
        "the retry accepted",
        "const r = document.querySelector(arguments[0] + ' .result'); return r && r.textContent.startsWith('retried');",
        vec![json!(row)],
    )
    .await;
    let in_url = b.eval("return location.href;", vec![]).await;
    assert!(
        !in_url.as_str().unwrap_or_default().contains(ADMIN),
        "the token is in the URL"
    );
    // The compensations finish: the deduct that never ran is blocked by a
    // null compensation, the charge refunded.
    let page = SagaPage::open(b, stack, &s.failed, "SAGA_STATUS_CANCELLED").await;
    assert_eq!(
        page.steps(),
        [
            ("payment", "compensated", "1", "1"),
            ("inventory", "compensated", "5", "1")
        ]
    );
    let injected = format!("Unavailable: {TRANSIENT_MESSAGE}");
    assert_eq!(page.errors(), ["", injected.as_str()]);
    page.assert_durations_shown();
    // Why it was cancelled, not the failure the person fixed.
    assert_eq!(
        page.reason,
        format!("Why: deduct gave up after 5 attempts: {injected}")
    );
    records_show(b, "payment", &[("charge", "applied"), ("refund", "undone")]).await;
    records_show(
        b,
        "inventory",
        &[("deduct", "blocked"), ("restock", "null_compensation")],
    )
    .await;
    let shot = docs("console-saga.png");
    b.screenshot(&shot).await;
    drop_unless_updating(&shot);
    let done = wait_terminal(stack.orchestrator.addr, &s.failed, Duration::from_secs(10)).await;
    assert_eq!(done.status(), pb::SagaStatus::Cancelled);
    assert_eq!(
        done.reason,
        format!("deduct gave up after 5 attempts: {injected}")
    );
    // One charge, one refund: alice paid for her completed order only.
    assert_eq!(
        saga_tests::balance_as(stack.payment.addr, "alice", admin()).await,
        100_000 - 300
    );
    assert_eq!(
        saga_tests::stock_as(stack.inventory.addr, "sku-pear", admin()).await,
        3,
        "nothing deducted"
    );
}
