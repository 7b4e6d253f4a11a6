//! A saga's page: its order, steps, timeline and what the participants
//! recorded — completed, cancelled, failed, with HTML in its texts — and a
//! running saga followed live until it is terminal.

use super::*;

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
pub(super) struct SagaPage {
    pub(super) customer: String,
    /// "Why: …", or empty.
    pub(super) reason: String,
    pub(super) total: String,
    /// (product, quantity) of each order line.
    pub(super) lines: Vec<(String, String)>,
    pub(super) steps: Vec<StepRow>,
}

/// One row of a saga page's steps table.
#[derive(Debug, serde::Deserialize)]
pub(super) struct StepRow {
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
    pub(super) async fn open(
        b: &mut Browser,
        stack: &ConsoleStack,
        id: &str,
        status: &str,
    ) -> SagaPage {
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
    pub(super) fn steps(&self) -> Vec<(&str, &str, &str, &str)> {
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
    pub(super) fn errors(&self) -> Vec<&str> {
        self.steps.iter().map(|s| s.error.as_str()).collect()
    }

    /// Asserts every step shows how long it took ("12 ms", "1.25 s").
    pub(super) fn assert_durations_shown(&self) {
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
pub(super) fn is_duration(text: &str) -> bool {
    let number = |n: &str| !n.is_empty() && n.chars().all(|c| c.is_ascii_digit() || c == '.');
    text.strip_suffix(" ms")
        .or_else(|| text.strip_suffix(" s"))
        .is_some_and(number)
}

pub(super) fn lines(items: &[(&str, &str)]) -> Vec<(String, String)> {
    items
        .iter()
        .map(|(p, q)| ((*p).to_owned(), (*q).to_owned()))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_saga_page_shows_order_steps_timeline_and_records() {
    tour(async |b, stack, s| {
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
    })
    .await;
}

/// bob's 5 pears (3 in stock): charged, the deduct refused, refunded.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancelled_saga_page_shows_the_refusal_and_the_refund() {
    tour(async |b, stack, s| {
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
        let refusal =
            "insufficient stock: product \"sku-pear\" has 3 units available, deduct needs 5";
        assert_eq!(page.errors()[0], "");
        assert!(page.errors()[1].ends_with(refusal), "{:?}", page.errors());
        assert!(page.reason.starts_with("Why: "), "{:?}", page.reason);
        assert!(
            page.reason
                .ends_with(&format!("{refusal} [INSUFFICIENT_STOCK]")),
            "the refusal's words, then its code: {:?}",
            page.reason
        );
        page.assert_durations_shown();
        records_show(b, "payment", &[("charge", "applied"), ("refund", "undone")]).await;
        records_show(b, "inventory", &[("deduct", "refused")]).await;
    })
    .await;
}

/// alice's order while inventory fails every call: charged, the deduct
/// given up after 5 attempts, its restock after 3.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_saga_page_shows_the_failing_compensation() {
    tour(async |b, stack, s| {
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
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn html_in_a_customer_id_shows_as_text_on_its_saga_page() {
    tour(async |b, stack, s| {
        let page = SagaPage::open(b, stack, &s.xss, "SAGA_STATUS_CANCELLED").await;
        assert_eq!(page.customer, XSS);
        // payment-svc's refusal names the customer: the error text is HTML too.
        let refusal = format!("customer {XSS:?} has no account");
        assert!(page.errors()[0].ends_with(&refusal), "{:?}", page.errors());
        assert!(
            page.reason
                .ends_with(&format!("{refusal} [ACCOUNT_NOT_FOUND]")),
            "{:?}",
            page.reason
        );
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
    })
    .await;
}

/// Waits until the records of `step` list exactly these (kind, status).
pub(super) async fn records_show(b: &mut Browser, step: &str, expected: &[(&str, &str)]) {
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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_running_saga_page_updates_without_reload() {
    tour(async |b, stack, _| {
        // The tour's failed saga left inventory failing every call; the live
        // saga needs it working.
        stack.inventory_faults(FaultSettings::disabled()).await;
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
    })
    .await;
}
