//! With a client token configured the page asks for it: the list page
//! shows the token form on the API's first 401, and once the token is
//! typed it lists the sagas, keeps the token in the tab's sessionStorage
//! (not in a URL), and a saga's page then loads and follows its saga with
//! it — the event stream read with fetch, the token in its header.

use super::*;

const CLIENT: &str = "console-client-token-0123456789";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_page_asks_for_the_client_token_keeps_it_for_the_tab_and_sends_it() {
    let Some(chromedriver) = browser::chromedriver() else {
        return;
    };
    let stack = saga_tests::Stack::without_orchestrator().await;
    stack.deposit("alice", 1_000).await;
    stack.add_stock("sku-apple", 10).await;
    let console = saga_tests::listener("127.0.0.1:0".parse().expect("addr")).await;
    let console_addr = console.local_addr().expect("addr");
    let client = TokenAuth::with_token_for(Role::Client, CLIENT).expect("token");
    let orchestrator = stack
        .orchestrator_harness()
        .options(ServeOptions::default().with_client(client.clone()))
        .console(console)
        .start()
        .await;
    let mut orders = pb::order_service_client::OrderServiceClient::with_interceptor(
        channel(orchestrator.addr).await,
        client,
    );
    let saga_id = orders
        .create_order(order_request(
            "web-token-1",
            "alice",
            &[("sku-apple", 1, 100)],
            true,
        ))
        .await
        .expect("order with the token")
        .into_inner()
        .saga_id;

    let mut b = Browser::borrow(&chromedriver).await;
    b.open(&format!("http://{console_addr}/")).await;
    b.wait_for(
        "the client token form",
        "const f = document.getElementById('client-token-form');
         return f !== null && !f.hidden;",
        vec![],
    )
    .await;
    b.eval(
        "document.getElementById('client-token').value = arguments[0];
         document.getElementById('client-token-form').requestSubmit();",
        vec![json!(CLIENT)],
    )
    .await;
    b.wait_for(
        "the saga listed with the token",
        "return [...document.querySelectorAll('#sagas tbody tr[data-saga-id]')]
             .some(tr => tr.dataset.sagaId === arguments[0]);",
        vec![json!(saga_id)],
    )
    .await;
    let kept = b
        .eval(
            "return [sessionStorage.getItem('saga-console-client-token'), location.href];",
            vec![],
        )
        .await;
    assert_eq!(kept[0], json!(CLIENT), "kept for the tab");
    assert!(
        !kept[1].as_str().unwrap_or_default().contains(CLIENT),
        "never in a URL: {kept}"
    );
    // Another page of the tab: no form, the saga read and followed with the
    // kept token until its (already) terminal state.
    b.open(&format!("http://{console_addr}/sagas/{saga_id}"))
        .await;
    b.wait_for(
        "the saga page with the kept token",
        "const f = document.getElementById('client-token-form');
         return (f === null || f.hidden)
             && document.body.dataset.sagaStatus === 'SAGA_STATUS_COMPLETED'
             && document.getElementById('live').textContent === 'final';",
        vec![],
    )
    .await;
    b.give_back().await;
    orchestrator.stop().await;
    stack.stop().await;
}
