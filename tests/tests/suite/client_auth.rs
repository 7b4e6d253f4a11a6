//! The orchestrator's client token (`--client-token` / `CLIENT_TOKEN`),
//! against real servers on ephemeral ports: with one configured, every
//! `saga.v1` RPC — CreateOrder, GetSaga, ListSagas, WatchSaga, RetrySaga —
//! called without it or with a wrong one is UNAUTHENTICATED, with the
//! ErrorInfo reason `CLIENT_TOKEN_REQUIRED` decoded from the status details,
//! and reads or changes nothing; with it (or the admin token) every RPC
//! works, RetrySaga still needing the admin token; the console's API and
//! event stream answer 401 with the same reason without it while its pages
//! stay readable. The counting of the refusals is in `metrics.rs`, where the
//! process-wide recorder is installed.

use orchestrator::console::ConsoleSettings;
use saga_proto::saga::v1 as pb;
use saga_proto::saga::v1::order_service_client::OrderServiceClient;
use saga_proto::saga::v1::saga_service_client::SagaServiceClient;
use saga_tests::{Stack, order_request};
use service_kit::auth::{Role, TokenAuth};
use service_kit::server::ServeOptions;
use std::net::SocketAddr;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tonic::Code;
use tonic::service::interceptor::InterceptedService;
use tonic::transport::Channel;
use tonic_types::StatusExt;

const CLIENT_TOKEN: &str = "client-token-for-the-tests-0123";
const ADMIN_TOKEN: &str = "admin-token-for-the-tests-45678";

type Orders = OrderServiceClient<InterceptedService<Channel, TokenAuth>>;
type Sagas = SagaServiceClient<InterceptedService<Channel, TokenAuth>>;

/// The callers that must not get in: no token, and a wrong one (one
/// character off; a malformed header is covered by service-kit's tests).
fn intruders() -> Vec<(&'static str, TokenAuth)> {
    vec![
        ("no token", TokenAuth::open_for(Role::Client)),
        (
            "a wrong token",
            TokenAuth::with_token_for(Role::Client, "client-token-for-the-tests-0124")
                .expect("token"),
        ),
    ]
}

fn client() -> TokenAuth {
    TokenAuth::with_token_for(Role::Client, CLIENT_TOKEN).expect("token")
}

fn admin() -> TokenAuth {
    TokenAuth::with_token(ADMIN_TOKEN).expect("token")
}

/// Asserts `result` is UNAUTHENTICATED with ErrorInfo `reason` in the
/// shared auth domain, read from the details.
#[track_caller]
fn refused_for<T: std::fmt::Debug>(what: &str, reason: &str, result: Result<T, tonic::Status>) {
    let status = result.expect_err(what);
    assert_eq!(status.code(), Code::Unauthenticated, "{what}: {status:?}");
    let info = status
        .get_details_error_info()
        .unwrap_or_else(|| panic!("{what}: no ErrorInfo in {status:?}"));
    assert_eq!(
        (info.domain.as_str(), info.reason.as_str()),
        (service_kit::errors::AUTH_DOMAIN, reason),
        "{what}"
    );
    assert!(!status.message().contains(CLIENT_TOKEN), "{what}");
}

/// Participants (open), and an orchestrator with a client and an admin
/// token serving its console too.
struct Guarded {
    stack: Stack,
    orchestrator: saga_tests::Running,
    console: SocketAddr,
}

impl Guarded {
    async fn start() -> Guarded {
        let stack = Stack::without_orchestrator().await;
        stack.deposit("alice", 1_000).await;
        stack.add_stock("sku-apple", 10).await;
        let console = saga_tests::listener("127.0.0.1:0".parse().expect("addr")).await;
        let console_addr = console.local_addr().expect("addr");
        let options = ServeOptions {
            admin: admin(),
            ..ServeOptions::default()
        }
        .with_client(client());
        let orchestrator = stack
            .orchestrator_harness()
            .options(options)
            .adjust(|settings| settings.console = ConsoleSettings::default())
            .console(console)
            .start()
            .await;
        Guarded {
            stack,
            orchestrator,
            console: console_addr,
        }
    }

    async fn clients(&self, auth: TokenAuth) -> (Orders, Sagas) {
        let channel = saga_tests::channel(self.orchestrator.addr).await;
        (
            OrderServiceClient::with_interceptor(channel.clone(), auth.clone()),
            SagaServiceClient::with_interceptor(channel, auth),
        )
    }

    async fn stop(self) {
        self.orchestrator.stop().await;
        self.stack.stop().await;
    }
}

fn by_id(saga_id: &str) -> pb::GetSagaRequest {
    pb::GetSagaRequest {
        lookup: Some(pb::get_saga_request::Lookup::SagaId(saga_id.into())),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_a_client_token_every_rpc_needs_it_and_a_refused_call_changes_nothing() {
    let guarded = Guarded::start().await;
    const REQUIRED: &str = "CLIENT_TOKEN_REQUIRED";
    // One saga, created with the token, for the reads to find.
    let (mut orders, mut sagas) = guarded.clients(client()).await;
    let created = orders
        .create_order(order_request(
            "with-token",
            "alice",
            &[("sku-apple", 1, 100)],
            true,
        ))
        .await
        .expect("with the client token")
        .into_inner();
    assert_eq!(created.status(), pb::SagaStatus::Completed);
    let saga_id = created.saga_id;

    for (who, auth) in intruders() {
        let (mut orders, mut sagas) = guarded.clients(auth).await;
        let order = order_request("intruder", "alice", &[("sku-apple", 1, 100)], true);
        refused_for(who, REQUIRED, orders.create_order(order).await);
        refused_for(who, REQUIRED, sagas.get_saga(by_id(&saga_id)).await);
        refused_for(
            who,
            REQUIRED,
            sagas.list_sagas(pb::ListSagasRequest::default()).await,
        );
        let watch = pb::WatchSagaRequest {
            saga_id: saga_id.clone(),
        };
        refused_for(who, REQUIRED, sagas.watch_saga(watch).await);
        let retry = pb::RetrySagaRequest {
            saga_id: saga_id.clone(),
        };
        refused_for(who, REQUIRED, sagas.retry_saga(retry).await);
        // Checked before the input: a bad request is refused for its token.
        let bad = pb::GetSagaRequest { lookup: None };
        refused_for(who, REQUIRED, sagas.get_saga(bad).await);
    }

    // Nothing was stored or moved by the refused CreateOrders.
    let listed = sagas
        .list_sagas(pb::ListSagasRequest::default())
        .await
        .expect("list with the client token")
        .into_inner();
    assert_eq!(
        listed.sagas.len(),
        1,
        "only the saga created with the token"
    );
    assert_eq!(guarded.stack.balance("alice").await, 900);
    assert_eq!(guarded.stack.stock("sku-apple").await, 9);

    // With the token: reads and the stream work.
    let read = sagas
        .get_saga(by_id(&saga_id))
        .await
        .expect("get")
        .into_inner();
    assert_eq!(read.status(), pb::SagaStatus::Completed);
    let mut stream = sagas
        .watch_saga(pb::WatchSagaRequest {
            saga_id: saga_id.clone(),
        })
        .await
        .expect("watch")
        .into_inner();
    let first = stream.message().await.expect("a state").expect("one");
    assert_eq!(first.saga_id, saga_id);

    // RetrySaga needs the admin token on top of the client token.
    let retry = || pb::RetrySagaRequest {
        saga_id: saga_id.clone(),
    };
    refused_for(
        "the client token on RetrySaga",
        "ADMIN_TOKEN_REQUIRED",
        sagas.retry_saga(retry()).await,
    );
    // The admin token passes the client check too: the retry reaches the
    // saga, which is COMPLETED, so it is not retryable — told by reason.
    let (_, mut as_admin) = guarded.clients(admin()).await;
    let not_retryable = as_admin
        .retry_saga(retry())
        .await
        .expect_err("a completed saga");
    assert_eq!(not_retryable.code(), Code::FailedPrecondition);
    let info = not_retryable.get_details_error_info().expect("ErrorInfo");
    assert_eq!(
        (info.domain.as_str(), info.reason.as_str()),
        ("saga.v1", "SAGA_NOT_RETRYABLE")
    );
    as_admin
        .get_saga(by_id(&saga_id))
        .await
        .expect("the admin token reads too");
    guarded.stop().await;
}

/// `GET path` over a fresh connection with `headers`: the status, the head
/// and the body (read to the end: the connection is closed after it).
async fn get(addr: SocketAddr, path: &str, headers: &[(&str, &str)]) -> (u16, String, String) {
    let mut stream = TcpStream::connect(addr).await.expect("connect");
    let mut request = format!("GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n");
    for (name, value) in headers {
        request.push_str(&format!("{name}: {value}\r\n"));
    }
    request.push_str("\r\n");
    stream.write_all(request.as_bytes()).await.expect("send");
    let mut raw = Vec::new();
    tokio::time::timeout(Duration::from_secs(10), stream.read_to_end(&mut raw))
        .await
        .unwrap_or_else(|_| panic!("{addr} answers {path} within 10 s"))
        .expect("read");
    let raw = String::from_utf8(raw).expect("UTF-8");
    let (head, body) = raw.split_once("\r\n\r\n").expect("head and body");
    let status = head
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .expect("a status");
    (status, head.to_ascii_lowercase(), body.to_owned())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_a_client_token_the_console_api_answers_401_without_it_and_its_pages_stay_readable() {
    let guarded = Guarded::start().await;
    let (mut orders, _) = guarded.clients(client()).await;
    let saga_id = orders
        .create_order(order_request(
            "console-1",
            "alice",
            &[("sku-apple", 1, 100)],
            true,
        ))
        .await
        .expect("order")
        .into_inner()
        .saga_id;
    let paths = [
        "/api/counts".to_owned(),
        "/api/sagas".to_owned(),
        format!("/api/sagas/{saga_id}"),
        format!("/api/sagas/{saga_id}/records"),
        format!("/api/sagas/{saga_id}/events"),
    ];
    let bearer = |token: &str| format!("Bearer {token}");
    let wrong = bearer("client-token-for-the-tests-0124");
    for path in &paths {
        for headers in [vec![], vec![("Authorization", wrong.as_str())]] {
            let (status, head, body) = get(guarded.console, path, &headers).await;
            assert_eq!(status, 401, "{path} {headers:?}: {body}");
            assert!(head.contains("www-authenticate: bearer"), "{head}");
            let error: serde_json::Value = serde_json::from_str(&body).expect("JSON");
            assert_eq!(error["code"], "UNAUTHENTICATED", "{body}");
            assert_eq!(error["reason"], "CLIENT_TOKEN_REQUIRED", "{body}");
            assert_eq!(error["domain"], service_kit::errors::AUTH_DOMAIN, "{body}");
            assert!(!body.contains(&saga_id), "{path}: nothing read: {body}");
        }
    }
    // With the client token, or the admin token: answered.
    for token in [CLIENT_TOKEN, ADMIN_TOKEN] {
        let authorization = bearer(token);
        for path in &paths {
            let (status, head, body) =
                get(guarded.console, path, &[("Authorization", &authorization)]).await;
            assert_eq!(status, 200, "{path}: {body}");
            if path.ends_with("/events") {
                assert!(head.contains("content-type: text/event-stream"), "{head}");
                assert!(body.contains("event: saga"), "{body}");
            }
        }
    }
    let (status, _, body) = get(
        guarded.console,
        &format!("/api/sagas/{saga_id}"),
        &[("Authorization", &bearer(CLIENT_TOKEN))],
    )
    .await;
    assert_eq!(status, 200);
    let saga: serde_json::Value = serde_json::from_str(&body).expect("JSON");
    assert_eq!(saga["status"], "SAGA_STATUS_COMPLETED");
    // The pages and their scripts hold no data: readable, so the page that
    // asks for the token can load.
    for page in [
        "/",
        format!("/sagas/{saga_id}").as_str(),
        "/console/common.js",
    ] {
        let (status, _, body) = get(guarded.console, page, &[]).await;
        assert_eq!(status, 200, "{page}: {body}");
    }
    let (_, _, script) = get(guarded.console, "/console/common.js", &[]).await;
    assert!(
        script.contains("sessionStorage"),
        "the page keeps the token"
    );
    assert!(!script.contains("EventSource("), "no header-less stream");
    guarded.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_a_client_token_the_api_and_console_stay_open() {
    let stack = Stack::without_orchestrator().await;
    stack.deposit("alice", 1_000).await;
    stack.add_stock("sku-apple", 10).await;
    let console = saga_tests::listener("127.0.0.1:0".parse().expect("addr")).await;
    let console_addr = console.local_addr().expect("addr");
    let orchestrator = stack.orchestrator_harness().console(console).start().await;
    let channel = saga_tests::channel(orchestrator.addr).await;
    let created = OrderServiceClient::new(channel.clone())
        .create_order(order_request(
            "open-1",
            "alice",
            &[("sku-apple", 1, 100)],
            true,
        ))
        .await
        .expect("no token needed")
        .into_inner();
    SagaServiceClient::new(channel)
        .get_saga(by_id(&created.saga_id))
        .await
        .expect("no token needed");
    let (status, _, _) = get(console_addr, "/api/counts", &[]).await;
    assert_eq!(status, 200);
    orchestrator.stop().await;
    stack.stop().await;
}
