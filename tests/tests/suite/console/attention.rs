//! "Needs attention": a FAILED saga retried by a person, with the admin
//! token, once the cause is fixed.

use super::saga_page::{SagaPage, records_show};
use super::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn retry_from_needs_attention_finishes_a_failed_saga() {
    tour(async |b, stack, s| {
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
    })
    .await;
}
