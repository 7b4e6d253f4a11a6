//! The list of sagas: every saga with its status and the counts per
//! status; the status filter and the search narrow it; a customer id that
//! is HTML shows as text.

use super::*;

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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_list_shows_every_saga_with_its_status_and_the_counts() {
    tour(async |b, _, s| {
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
        let shot = docs("console-list.png");
        b.screenshot(&shot).await;
        drop_unless_updating(&shot);
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_status_filter_and_the_search_narrow_the_list() {
    tour(async |b, _, s| {
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
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn html_in_a_customer_id_shows_as_text() {
    tour(async |b, _, s| {
        b.wait_for("the four sagas in the list", ROWS, vec![json!(4)])
            .await;
        let shown = b
            .eval(
                "const tr = document.querySelector(`#sagas tr[data-saga-id='${arguments[0]}']`);
                 return tr.querySelector('td.customer').textContent;",
                vec![json!(s.xss)],
            )
            .await;
        assert_eq!(shown, json!(XSS));
        assert_no_html_ran(b).await;
    })
    .await;
}
