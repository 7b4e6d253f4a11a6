//! The media-upload participant (`examples/media-upload`, a step on
//! `@saga/participant` whose Act uploads one object per order line to an
//! external HTTP media store and whose Compensate deletes them) and its
//! fake media store, each as a child process of a test, run as in
//! production: `node src/main.js` and `node src/store-main.js`,
//! configured by their environment, ready when they print `READY <port>`.
//!
//! It exists so that `cargo test` proves a step with an effect no
//! transaction can undo, end to end with the orchestrator and through the
//! conformance kit. The store is driven over its admin routes
//! ([`MediaStore::fault`], [`MediaStore::release`], [`MediaStore::state`]):
//! it can fail, hang, lose a reply or hold one, which is how a test knows
//! that a PUT happened and its Act did not commit.
//!
//! The example must be installed first (`scripts/test-examples.sh
//! --build-only`, the test command's "examples build" stage, packs
//! `@saga/participant` and runs `npm ci` in `examples/media-upload`):
//! [`MediaApp::find`] says whether it is, and a test without it skips with
//! a printed reason — or fails, under `CI=true` or `REQUIRE_EXAMPLES=1`.
//!
//! Each process is SIGKILLed when this test process dies
//! ([`crate::node_process`]), stopped by pid (SIGTERM, then SIGKILL) when
//! dropped, also while a failing test unwinds; the participant can be
//! SIGKILLed and started again on the same port and database.

use crate::node_process::{self, NodeChild};
use orchestrator::step::SagaDefinition;
use orchestrator::steps_file::StepSpec;
use saga_proto::participant::v1 as participant;
use serde::Deserialize;
use service_kit::auth::{Role, TokenAuth};
use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

/// The step's name in the saga and its request ids (`<saga_id>:media`).
pub const STEP: &str = "media";

/// The example's directory in this repository.
fn app_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples/media-upload")
}

/// The installed example and the `node` that runs it.
#[derive(Debug, Clone)]
pub struct MediaApp {
    dir: PathBuf,
}

impl MediaApp {
    /// The installed example, or why it cannot run (`node` missing from
    /// PATH, dependencies not installed).
    pub fn locate() -> Result<MediaApp, String> {
        let dir = app_dir();
        node_process::require_node("the media-upload step")?;
        for needed in [
            dir.join("src/main.js"),
            dir.join("src/store-main.js"),
            dir.join("node_modules/@saga/participant/package.json"),
        ] {
            if !needed.exists() {
                return Err(format!(
                    "the media-upload example is not installed ({} missing): run scripts/test-examples.sh --build-only (it packs @saga/participant, then runs `npm ci` in examples/media-upload; scripts/test.sh's examples build stage does)",
                    needed.display()
                ));
            }
        }
        Ok(MediaApp { dir })
    }

    /// The installed example; `None` (with the reason printed) when it
    /// cannot run and examples are not required, a panic naming the fix
    /// when they are ([`node_process::examples_required`]).
    pub fn find() -> Option<MediaApp> {
        node_process::found("the media-upload example", Self::locate())
    }

    fn script(&self, name: &str) -> PathBuf {
        self.dir.join("src").join(name)
    }
}

/// A fault of the media store, for the next requests of one method.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fault {
    /// Answer 500, change nothing.
    Fail,
    /// Change nothing, never answer.
    Hang,
    /// Apply, then close the connection before any reply.
    Lose,
    /// Keep the request unapplied and unanswered until released.
    Hold,
    /// Apply at once, answer only when released: the caller's crash
    /// between the effect and its commit.
    HoldReply,
}

impl Fault {
    fn as_str(self) -> &'static str {
        match self {
            Fault::Fail => "fail",
            Fault::Hang => "hang",
            Fault::Lose => "lose",
            Fault::Hold => "hold",
            Fault::HoldReply => "holdReply",
        }
    }
}

/// What the media store holds and has seen (`GET /admin/state`).
#[derive(Debug, Clone, Deserialize)]
pub struct StoreState {
    /// The objects it holds now.
    pub objects: Vec<StoredObject>,
    /// Requests by method, and objects created and deleted.
    pub counts: StoreCounts,
    /// How often each key was created (more than once: deleted, then
    /// uploaded again).
    pub created: BTreeMap<String, u32>,
    /// Requests that got each injected fault, by mode.
    pub injected: BTreeMap<String, u32>,
    /// The requests held now.
    pub held: Vec<HeldRequest>,
}

/// The store's counters.
#[derive(Debug, Clone, Deserialize)]
pub struct StoreCounts {
    /// PUT requests received.
    #[serde(rename = "PUT")]
    pub put: u64,
    /// DELETE requests received.
    #[serde(rename = "DELETE")]
    pub delete: u64,
    /// Objects created.
    pub created: u64,
    /// Objects deleted.
    pub deleted: u64,
}

/// An object the store holds.
#[derive(Debug, Clone, Deserialize)]
pub struct StoredObject {
    /// Its key.
    pub key: String,
    /// What was uploaded, as sent.
    pub body: String,
}

/// What the media step uploads for one order line.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct Upload {
    /// The step's request id.
    pub request_id: String,
    /// The saga's id.
    pub saga_id: String,
    /// The order line.
    pub line_index: usize,
    /// The line's product.
    pub product_id: String,
}

impl StoredObject {
    /// The upload it holds; a panic naming the object when it is not one.
    pub fn upload(&self) -> Upload {
        serde_json::from_str(&self.body)
            .unwrap_or_else(|e| panic!("object {} is no upload ({e}): {}", self.key, self.body))
    }
}

impl StoreState {
    /// The objects uploaded for `request_id`, by line.
    pub fn uploads_of(&self, request_id: &str) -> Vec<(&StoredObject, Upload)> {
        let mut of: Vec<_> = self
            .objects
            .iter()
            .map(|o| (o, o.upload()))
            .filter(|(_, u)| u.request_id == request_id)
            .collect();
        of.sort_by_key(|(_, u)| u.line_index);
        of
    }
}

/// A request the store holds.
#[derive(Debug, Clone, Deserialize)]
pub struct HeldRequest {
    /// Its method.
    pub method: String,
    /// The object's key.
    pub key: String,
    /// When its caller closed the connection (ms since the epoch), or
    /// `None` while it still waits for the reply.
    pub client_gone_at: Option<u64>,
}

/// The fake media store as a process, driven over its admin routes.
pub struct MediaStore {
    node: NodeChild,
}

impl MediaStore {
    /// Starts it on a free port and waits for `READY <port>`.
    pub async fn start(app: &MediaApp) -> Result<MediaStore, String> {
        let node = NodeChild::start(
            "media-store",
            app.script("store-main.js"),
            "MEDIA_STORE_LISTEN",
            Vec::new(),
        )
        .await?;
        Ok(MediaStore { node })
    }

    /// Where it listens.
    pub fn addr(&self) -> SocketAddr {
        self.node.addr()
    }

    /// Its URL, as the participant's `MEDIA_STORE_URL`.
    pub fn url(&self) -> String {
        format!("http://{}", self.node.addr())
    }

    /// The next `times` requests of `method` (`PUT`, `DELETE`, `GET`) get
    /// `fault`; every one until [`Self::clear_faults`] with `None`.
    pub async fn fault(&self, method: &str, fault: Fault, times: Option<u32>) {
        let times = times.map(|n| format!("&times={n}")).unwrap_or_default();
        let path = format!(
            "/admin/faults?method={method}&mode={}{times}",
            fault.as_str()
        );
        self.admin(hyper::Method::POST, &path, 204).await;
    }

    /// Clears every fault.
    pub async fn clear_faults(&self) {
        self.admin(hyper::Method::DELETE, "/admin/faults", 204)
            .await;
    }

    /// Releases every held request; how many there were.
    pub async fn release(&self) -> usize {
        #[derive(Deserialize)]
        struct Released {
            released: usize,
        }
        let body = self.admin(hyper::Method::POST, "/admin/release", 200).await;
        serde_json::from_str::<Released>(&body)
            .unwrap_or_else(|e| panic!("the store's release answer {body:?}: {e}"))
            .released
    }

    /// What it holds and has seen.
    pub async fn state(&self) -> StoreState {
        let body = self.admin(hyper::Method::GET, "/admin/state", 200).await;
        serde_json::from_str(&body).unwrap_or_else(|e| panic!("the store's state {body:?}: {e}"))
    }

    /// Its state once it holds at least `n` requests; a panic past
    /// `within`.
    pub async fn wait_held(&self, n: usize, within: Duration) -> StoreState {
        let deadline = tokio::time::Instant::now() + within;
        loop {
            let state = self.state().await;
            if state.held.len() >= n {
                return state;
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "the media store did not hold {n} requests within {within:?}: {state:?}"
            );
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }

    /// The last lines of its log, for a failure message.
    pub fn log_tail(&self) -> String {
        self.node.log_tail()
    }

    /// An admin request that must answer `expected`; its body.
    async fn admin(&self, method: hyper::Method, path: &str, expected: u16) -> String {
        match crate::http::request(method.clone(), self.addr(), path).await {
            Ok((status, body)) if status == expected => body,
            Ok((status, body)) => panic!(
                "{method} {path} on the media store answered {status}, expected {expected}: {body}"
            ),
            Err(e) => panic!("{e}; the media store's log:\n{}", self.log_tail()),
        }
    }
}

/// How to run the media-upload participant.
#[derive(Debug, Clone)]
pub struct MediaConfig {
    /// Its MongoDB (the test target's URI).
    pub mongodb_uri: String,
    /// Its own database there.
    pub database: String,
    /// The media store (`MEDIA_STORE_URL`).
    pub store_url: String,
    /// `SERVICE_TOKEN`: Act, Compensate and ListOperations need it.
    pub service_token: Option<String>,
    /// `MEDIA_CALL_TIMEOUT_MS`: the longest one request to the store may
    /// take (its default, 2 s, when `None`), cut to the call's deadline.
    pub call_timeout_ms: Option<u64>,
}

impl MediaConfig {
    /// A fresh database `media_<uuid>` on `mongodb_uri`, uploading to
    /// `store`, no token.
    pub fn new(mongodb_uri: &str, store: &MediaStore) -> Self {
        MediaConfig {
            mongodb_uri: mongodb_uri.to_owned(),
            database: format!("media_{}", uuid::Uuid::now_v7().simple()),
            store_url: store.url(),
            service_token: None,
            call_timeout_ms: None,
        }
    }
}

/// An upload intent the participant recorded (its `uploads` collection).
#[derive(Debug, Clone, Deserialize)]
pub struct Intent {
    /// The object's key.
    pub key: String,
    /// The order line.
    pub line_index: i64,
    /// `intended` (the object may exist), or `deleted` by a compensation.
    pub status: String,
}

/// The running media-upload participant: restartable on the same port and
/// database, stopped when dropped.
pub struct MediaProcess {
    node: NodeChild,
    config: MediaConfig,
}

impl MediaProcess {
    /// Starts it on a free port and waits for `READY <port>`.
    pub async fn start(app: &MediaApp, config: MediaConfig) -> Result<MediaProcess, String> {
        let mut env = vec![
            ("MONGODB_URI", config.mongodb_uri.clone()),
            ("MONGODB_DATABASE", config.database.clone()),
            ("MEDIA_STORE_URL", config.store_url.clone()),
        ];
        if let Some(token) = &config.service_token {
            env.push(("SERVICE_TOKEN", token.clone()));
        }
        if let Some(ms) = config.call_timeout_ms {
            env.push(("MEDIA_CALL_TIMEOUT_MS", ms.to_string()));
        }
        let node =
            NodeChild::start("media-upload", app.script("main.js"), "MEDIA_LISTEN", env).await?;
        Ok(MediaProcess { node, config })
    }

    /// Where it listens.
    pub fn addr(&self) -> SocketAddr {
        self.node.addr()
    }

    /// How it runs.
    pub fn config(&self) -> &MediaConfig {
        &self.config
    }

    /// The steps file entry of the step it serves: [`STEP`],
    /// `upload_media` / `delete_media`, at its address.
    pub fn step(&self) -> StepSpec {
        crate::generic_step(STEP, self.addr(), Some(("upload_media", "delete_media")))
    }

    /// SIGKILLs it (no chance to finish what it was doing) and reaps it.
    pub fn kill9(&mut self) -> Result<(), String> {
        self.node.kill9()
    }

    /// Starts it again (stopped first if it runs) on the same port and
    /// database; returns once it prints `READY`.
    pub async fn restart(&mut self) -> Result<(), String> {
        self.node.restart().await
    }

    /// The last lines of its log, for a failure message.
    pub fn log_tail(&self) -> String {
        self.node.log_tail()
    }

    /// What it recorded under `request_id` (ListOperations, with its
    /// service token), oldest first.
    pub async fn records(&self, request_id: &str) -> Vec<participant::Operation> {
        let auth = match &self.config.service_token {
            Some(token) => TokenAuth::with_token_for(Role::Service, token).expect("the token"),
            None => TokenAuth::open_for(Role::Service),
        };
        participant::operation_history_service_client::OperationHistoryServiceClient::new(
            crate::channel(self.addr()).await,
        )
        .list_operations(auth.request(participant::ListOperationsRequest {
            request_id: request_id.into(),
        }))
        .await
        .unwrap_or_else(|e| panic!("ListOperations {request_id} on media-upload: {e}"))
        .into_inner()
        .operations
    }

    /// Its database, read directly (what a crash left uncommitted is
    /// invisible there).
    pub async fn database(&self) -> mongodb::Database {
        mongo_client::connect(
            &self.config.mongodb_uri,
            &self.config.database,
            "saga-tests",
            std::future::pending(),
        )
        .await
        .expect("connect to the media-upload database")
    }

    /// The operationHistory records under `request_id`, as committed.
    pub async fn committed_records(&self, request_id: &str) -> u64 {
        self.database()
            .await
            .collection::<bson::Document>("operation_history")
            .count_documents(bson::doc! { "request_id": request_id })
            .await
            .expect("count operation_history")
    }

    /// The upload intents recorded under `request_id`, by line.
    pub async fn intents(&self, request_id: &str) -> Vec<Intent> {
        use futures::TryStreamExt;
        let mut intents: Vec<Intent> = self
            .database()
            .await
            .collection::<Intent>("uploads")
            .find(bson::doc! { "request_id": request_id })
            .await
            .expect("find uploads")
            .try_collect()
            .await
            .expect("read uploads");
        intents.sort_by_key(|i| i.line_index);
        intents
    }
}

/// The deadline of each participant call in [`saga_with_media`]: the
/// orchestrator binary's default `--call-timeout-ms`.
pub const CALL_TIMEOUT: Duration = Duration::from_secs(5);

/// The saga of payment, inventory and then `more` (steps file entries),
/// as the orchestrator binary builds it with its default call timeout
/// ([`CALL_TIMEOUT`]) and, when given, the service token on every call.
pub fn saga_with_media(
    payment: SocketAddr,
    inventory: SocketAddr,
    more: &[StepSpec],
    token: Option<&str>,
) -> Arc<SagaDefinition> {
    let mut specs = crate::order_steps(payment, inventory);
    specs.extend_from_slice(more);
    let mut caller = orchestrator::participant::call::Caller::new(CALL_TIMEOUT);
    if let Some(token) = token {
        caller = caller
            .with_service_token(TokenAuth::with_token_for(Role::Service, token).expect("token"));
    }
    Arc::new(
        orchestrator::participant::definition_of(&specs, &caller, &Default::default())
            .expect("the saga of the steps"),
    )
}
