//! The saga console in a real browser: headless Chromium, driven through
//! WebDriver, against the console of a real stack (participants and
//! orchestrator with service and admin tokens, embedded stores).
//!
//! A person opening the console sees every saga with its status and the
//! counts per status; the status filter and the search narrow the list; a
//! saga's page shows its order, steps, timeline and what the participants
//! recorded; a running saga's page follows it live, without reloading,
//! until it is terminal; a FAILED saga is retried from "Needs attention"
//! with the admin token once its cause is fixed; and a customer id that is
//! HTML shows as text. Screenshots of the list and of a saga page are
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
use orchestrator::step::{ParticipantRecord, SagaDefinition, SagaStep, StepOutcome};
use participant_kit::faults::Faults;
use saga_proto::inventory::v1 as inventory;
use saga_proto::payment::v1 as payment;
use saga_proto::saga::v1 as pb;
use saga_tests::{Running, Service, channel, order_request, wait_terminal};
use serde_json::{Value, json};
use service_kit::auth::{Role, TokenAuth};
use service_kit::server::ServeOptions;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};
use tokio::sync::watch;

const ADMIN: &str = "console-admin-token-0123456789";
const SERVICE: &str = "console-service-token-0123456789";
/// A customer id that is HTML: it must show as these characters.
const XSS: &str = "<img src=x onerror=alert(1)>";
/// The customer whose sagas wait at their first action until released.
const HELD: &str = "carol";

/// A real step whose compensation fails while `broken` (the cause a person
/// must fix), and whose action waits while `held` for [`HELD`]'s sagas (so
/// a saga can be watched running).
struct Controlled {
    inner: Arc<dyn SagaStep>,
    broken: Arc<AtomicBool>,
    held: watch::Receiver<bool>,
}

#[async_trait]
impl SagaStep for Controlled {
    fn name(&self) -> &'static str {
        self.inner.name()
    }

    fn action(&self) -> &'static str {
        self.inner.action()
    }

    fn compensation(&self) -> &'static str {
        self.inner.compensation()
    }

    async fn act(&self, saga: &Saga, step: &Step) -> StepOutcome {
        if saga.order.customer_id == HELD {
            let mut held = self.held.clone();
            let _ = held.wait_for(|held| !held).await;
        }
        self.inner.act(saga, step).await
    }

    async fn compensate(&self, saga: &Saga, step: &Step) -> StepOutcome {
        if self.broken.load(Ordering::SeqCst) {
            return StepOutcome::Transient("UNAVAILABLE: the refund path is down (test)".into());
        }
        self.inner.compensate(saga, step).await
    }

    async fn records(&self, saga: &Saga, step: &Step) -> Result<Vec<ParticipantRecord>, String> {
        self.inner.records(saga, step).await
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
    broken: Arc<AtomicBool>,
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
        let broken = Arc::new(AtomicBool::new(false));
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
            Arc::new(Controlled {
                inner,
                broken: broken.clone(),
                held: held.clone(),
            }) as Arc<dyn SagaStep>
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
            broken,
            hold,
        }
    }

    fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.console)
    }

    async fn seed(&self) {
        let mut payments = payment::payment_service_client::PaymentServiceClient::new(
            channel(self.payment.addr).await,
        );
        for (customer, cents) in [("alice", 100_000), ("bob", 100), (HELD, 10_000)] {
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
    // bob holds 100 cents: the charge is refused.
    let cancelled = stack
        .order("web-2", "bob", ("sku-apple", 1, 5_000), true)
        .await;
    // 5 pears, 3 in stock: charged, deduct refused, the refund keeps
    // failing: FAILED after 3 attempts.
    stack.broken.store(true, Ordering::SeqCst);
    let failed = stack
        .order("web-3", "alice", ("sku-pear", 5, 200), true)
        .await;
    let xss = stack.order("web-4", XSS, ("sku-apple", 1, 100), true).await;
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
    a_running_saga_page_updates_without_reload(&mut b, &stack).await;
    retry_from_needs_attention_finishes_a_failed_saga(&mut b, &stack, &sagas).await;

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

async fn a_saga_page_shows_order_steps_timeline_and_records(
    b: &mut Browser,
    stack: &ConsoleStack,
    s: &Sagas,
) {
    b.open(&stack.url(&format!("/sagas/{}", s.completed))).await;
    let steps = b
        .wait_for(
            "both steps succeeded",
            "const rows = [...document.querySelectorAll('#steps tbody tr')];
             const done = rows.map(r => r.querySelector('.status').innerText.trim());
             return rows.length === 2 && done.every(t => t.endsWith('succeeded')) ? done : null;",
            vec![],
        )
        .await;
    assert_eq!(steps.as_array().map(Vec::len), Some(2));
    let customer = b
        .eval(
            "return document.querySelector('[data-fact=customer]').textContent;",
            vec![],
        )
        .await;
    assert_eq!(customer, json!("alice"));
    let total = b
        .eval(
            "return document.getElementById('total').textContent;",
            vec![],
        )
        .await;
    assert_eq!(total, json!("3.00"));
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

/// Waits until the records of `step` list exactly these (kind, status).
async fn records_show(b: &mut Browser, step: &str, expected: &[(&str, &str)]) {
    let expected: Vec<Value> = expected.iter().map(|(k, s)| json!([k, s])).collect();
    b.wait_for(
        &format!("the {step} records {expected:?}"),
        "const rows = [...document.querySelectorAll(`#records [data-step='${arguments[0]}'] tbody tr`)];
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
        cause.as_str().unwrap_or_default().contains("refund"),
        "{cause}"
    );
    // The person fixes the cause, then retries; the console asks for the
    // admin token (one is configured) and sends it.
    stack.broken.store(false, Ordering::SeqCst);
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
    b.open(&stack.url(&format!("/sagas/{}", s.failed))).await;
    b.wait_for(
        "the retried saga cancelled (refunded)",
        "return document.body.dataset.sagaStatus === 'SAGA_STATUS_CANCELLED';",
        vec![],
    )
    .await;
    records_show(b, "payment", &[("charge", "applied"), ("refund", "undone")]).await;
    let shot = docs("console-saga.png");
    b.screenshot(&shot).await;
    drop_unless_updating(&shot);
    let done = wait_terminal(stack.orchestrator.addr, &s.failed, Duration::from_secs(10)).await;
    assert_eq!(done.status(), pb::SagaStatus::Cancelled);
}
