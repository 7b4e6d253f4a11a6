//! The console's JSON API: errors answered as JSON with their status,
//! pages with ListSagas' tokens.

use super::*;

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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_api_answers_errors_as_json_with_their_status() {
    tour(async |b, _, s| {
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
    })
    .await;
}

/// `/api/sagas` pages as ListSagas does, with the same tokens: a token
/// from one continues the listing in the other.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_api_pages_with_list_sagas_tokens() {
    tour(async |b, stack, _| {
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
    })
    .await;
}
