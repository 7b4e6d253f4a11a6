//! Generic steps (`participant.v1.SagaStepService`) without Node.js: the
//! order saga with loyalty-svc, the Rust participant of the generic
//! contract, as its third step — on both storage backends —, a participant
//! that answers badly, and a steps file that does not make a saga.
//!
//! - `a_three_step_order_completes_and_awards_points_once`
//! - `a_blocked_customer_restocks_then_refunds`
//! - `a_participant_that_answers_badly_is_retried_then_compensated`: an
//!   unknown outcome, an empty reply, a 1 MB detail, an unknown status
//!   code — each a bounded, recorded error, retried within the budget,
//!   then compensated
//! - `a_malformed_steps_file_stops_the_binary_with_one_line`

saga_tests::on_every_backend_bare!(
    a_three_step_order_completes_and_awards_points_once,
    a_blocked_customer_restocks_then_refunds,
);

use orchestrator::saga::TEXT_KEPT;
use prost::Message;
use saga_proto::participant::v1 as participant;
use saga_proto::participant::v1::saga_step_service_server::{
    SagaStepService, SagaStepServiceServer,
};
use saga_proto::saga::v1 as pb;
use saga_tests::loyalty::Loyalty;
use saga_tests::step_named as step;
use saga_tests::{OrchestratorHarness, Stack, compensation_order, fast_retry, operations};
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use tonic::{Request, Response, Status};

/// The stack's orchestrator for payment, inventory, then loyalty.
async fn with_loyalty(mut stack: Stack, loyalty: &Loyalty) -> Stack {
    let orchestrator = OrchestratorHarness::with_steps(
        stack.storage.clone(),
        stack.payment.addr,
        stack.inventory.addr,
        &[loyalty.step()],
    )
    .start()
    .await;
    stack.orchestrator = Some(orchestrator);
    stack
}

async fn a_three_step_order_completes_and_awards_points_once(stack: Stack) {
    let loyalty = Loyalty::start(&stack.storage, &[]).await;
    let stack = with_loyalty(stack, &loyalty).await;
    stack.deposit("alice", 10_000).await;
    stack.add_stock("sku-apple", 10).await;

    let reply = stack
        .order("o-points", "alice", &[("sku-apple", 3, 850)])
        .await
        .expect("create order");
    assert_eq!(reply.status(), pb::SagaStatus::Completed, "{reply:?}");
    let saga = reply.saga.expect("saga");
    let names: Vec<&str> = saga.steps.iter().map(|s| s.name.as_str()).collect();
    assert_eq!(names, ["payment", "inventory", "loyalty"]);
    let points = step(&saga, "loyalty");
    assert_eq!(points.status(), pb::StepStatus::Succeeded);
    assert_eq!(points.action, "award_points");
    assert_eq!(stack.balance("alice").await, 7_450);
    assert_eq!(stack.stock("sku-apple").await, 7);
    // 2,550 cents earn 25 points, awarded once.
    assert_eq!(loyalty.points("alice").await, Some(25));
    let records = operations(loyalty.addr(), &points.request_id).await;
    let kinds: Vec<(&str, &str)> = records
        .iter()
        .map(|r| (r.kind.as_str(), r.status.as_str()))
        .collect();
    assert_eq!(kinds, [("act", "applied")]);

    // The same CreateOrder again is the same saga: nothing more awarded.
    let again = stack
        .order("o-points", "alice", &[("sku-apple", 3, 850)])
        .await
        .expect("repeat");
    assert!(!again.created);
    assert_eq!(loyalty.points("alice").await, Some(25));
    stack.stop().await;
    loyalty.stop().await;
}

async fn a_blocked_customer_restocks_then_refunds(stack: Stack) {
    let loyalty = Loyalty::start(&stack.storage, &["mallory"]).await;
    let stack = with_loyalty(stack, &loyalty).await;
    stack.deposit("mallory", 10_000).await;
    stack.add_stock("sku-apple", 10).await;

    let reply = stack
        .order("o-mallory", "mallory", &[("sku-apple", 2, 1_000)])
        .await
        .expect("create order");
    assert_eq!(reply.status(), pb::SagaStatus::Cancelled, "{reply:?}");
    let saga = reply.saga.expect("saga");
    assert_eq!(step(&saga, "loyalty").status(), pb::StepStatus::Refused);
    assert!(saga.reason.contains("CUSTOMER_BLOCKED"), "{}", saga.reason);
    assert_eq!(
        saga.refusal_code, "CUSTOMER_BLOCKED",
        "the ActReply's reason_code"
    );
    assert_eq!(compensation_order(&saga), ["inventory", "payment"]);
    assert_eq!(stack.balance("mallory").await, 10_000);
    assert_eq!(stack.stock("sku-apple").await, 10);
    assert_eq!(loyalty.points("mallory").await, None);
    stack.stop().await;
    loyalty.stop().await;
}

/// How the fake participant answers every Act.
#[derive(Clone, Copy, Debug)]
enum BadAnswer {
    /// `outcome: 42`, a value the contract does not have.
    UnknownOutcome,
    /// An `ActReply` with nothing set (`OUTCOME_UNSPECIFIED`).
    Empty,
    /// `OUTCOME_APPLIED` with a 1 MB detail: over the 64 KB the
    /// orchestrator reads.
    HugeDetail,
    /// grpc-status 42 (no such code) with a 4 KB message.
    UnknownCode,
}

/// What the orchestrator must have recorded for it (in the step's
/// `last_error`).
impl BadAnswer {
    fn recorded(self) -> &'static str {
        match self {
            BadAnswer::UnknownOutcome => "the participant answered an unknown outcome (42)",
            BadAnswer::Empty => "the participant answered no outcome",
            BadAnswer::HugeDetail => "OutOfRange",
            BadAnswer::UnknownCode => "Unknown: xxxx",
        }
    }
}

/// A `participant.v1.SagaStepService` that answers every Act badly and
/// confirms every Compensate (`NULL_COMPENSATION`); it counts both.
struct BadParticipant {
    answer: BadAnswer,
    acts: Arc<AtomicU32>,
    compensates: Arc<AtomicU32>,
}

/// The message of an [`BadAnswer::UnknownCode`] status: 4 KB, so the
/// orchestrator must cut what it keeps.
const LONG_MESSAGE: usize = 4 * 1024;

#[tonic::async_trait]
impl SagaStepService for BadParticipant {
    async fn act(
        &self,
        _request: Request<participant::StepCall>,
    ) -> Result<Response<participant::ActReply>, Status> {
        self.acts.fetch_add(1, Ordering::SeqCst);
        let reply = |outcome: i32, detail: String| participant::ActReply {
            outcome,
            detail,
            ..Default::default()
        };
        match self.answer {
            BadAnswer::UnknownOutcome => Ok(Response::new(reply(42, String::new()))),
            BadAnswer::Empty => Ok(Response::new(participant::ActReply::default())),
            BadAnswer::HugeDetail => Ok(Response::new(reply(
                participant::act_reply::Outcome::Applied as i32,
                "d".repeat(1024 * 1024),
            ))),
            // Sent as UNKNOWN (2) and rewritten to 42 on the way out
            // (`unknown_code`): tonic has no status for an unknown code.
            BadAnswer::UnknownCode => Err(Status::unknown("x".repeat(LONG_MESSAGE))),
        }
    }

    async fn compensate(
        &self,
        _request: Request<participant::StepCall>,
    ) -> Result<Response<participant::CompensateReply>, Status> {
        self.compensates.fetch_add(1, Ordering::SeqCst);
        Ok(Response::new(participant::CompensateReply {
            effect: participant::CompensationEffect::NullCompensation as i32,
            ..Default::default()
        }))
    }

    /// Batches are optional: this participant has none, so it is called
    /// one call at a time.
    async fn act_batch(
        &self,
        _request: Request<participant::StepCallBatch>,
    ) -> Result<Response<participant::ActBatchReply>, Status> {
        Err(Status::unimplemented("no batches"))
    }

    async fn compensate_batch(
        &self,
        _request: Request<participant::StepCallBatch>,
    ) -> Result<Response<participant::CompensateBatchReply>, Status> {
        Err(Status::unimplemented("no batches"))
    }
}

/// Rewrites a reply's `grpc-status: 2` (UNKNOWN) to 42, a code no gRPC
/// library knows.
fn unknown_code(
    mut response: tonic::codegen::http::Response<tonic::body::Body>,
) -> tonic::codegen::http::Response<tonic::body::Body> {
    let headers = response.headers_mut();
    if headers.get("grpc-status").is_some_and(|v| v == "2") {
        headers.insert(
            "grpc-status",
            tonic::codegen::http::HeaderValue::from_static("42"),
        );
    }
    response
}

/// Serves `participant` on a free port until `stop` fires; its address.
async fn serve_bad(
    participant: BadParticipant,
    stop: tokio::sync::oneshot::Receiver<()>,
) -> std::net::SocketAddr {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let addr = listener.local_addr().expect("addr");
    let server = tonic::transport::Server::builder()
        .layer(tower::util::MapResponseLayer::new(unknown_code))
        .add_service(SagaStepServiceServer::new(participant))
        .serve_with_incoming_shutdown(
            tokio_stream::wrappers::TcpListenerStream::new(listener),
            async {
                let _ = stop.await;
            },
        );
    tokio::spawn(async move { server.await.expect("the bad participant serves") });
    addr
}

/// Each bad answer: the Act is retried exactly as many times as the
/// budget allows, the step records what was wrong (at most 1 KB of it),
/// then the saga compensates every step, the bad one first (its
/// Compensate confirms), and ends CANCELLED with money and stock as
/// before. The orchestrator does not panic and keeps nothing large.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_participant_that_answers_badly_is_retried_then_compensated() {
    let mut stack = Stack::without_orchestrator().await;
    stack.deposit("alice", 10_000).await;
    stack.add_stock("sku-apple", 100).await;
    let retry = fast_retry();
    for (i, answer) in [
        BadAnswer::UnknownOutcome,
        BadAnswer::Empty,
        BadAnswer::HugeDetail,
        BadAnswer::UnknownCode,
    ]
    .into_iter()
    .enumerate()
    {
        let (acts, compensates) = (Arc::new(AtomicU32::new(0)), Arc::new(AtomicU32::new(0)));
        let (stop, stopped) = tokio::sync::oneshot::channel();
        let bad = BadParticipant {
            answer,
            acts: acts.clone(),
            compensates: compensates.clone(),
        };
        let addr = serve_bad(bad, stopped).await;
        let spec = saga_tests::generic_step("sloppy", addr, None);
        stack.orchestrator = Some(
            OrchestratorHarness::with_steps(
                stack.storage.clone(),
                stack.payment.addr,
                stack.inventory.addr,
                &[spec],
            )
            .retry(retry.clone())
            .start()
            .await,
        );
        let reply = stack
            .order(&format!("o-{i}"), "alice", &[("sku-apple", 1, 100)])
            .await
            .expect("create order");
        let saga = reply.saga.clone().expect("saga");
        assert_eq!(
            reply.status(),
            pb::SagaStatus::Cancelled,
            "{answer:?}: {saga:?}"
        );
        let sloppy = step(&saga, "sloppy");
        assert_eq!(sloppy.status(), pb::StepStatus::Compensated, "{answer:?}");
        assert_eq!(sloppy.attempts, retry.action_attempts, "{answer:?}");
        assert_eq!(
            acts.load(Ordering::SeqCst),
            retry.action_attempts,
            "{answer:?}"
        );
        assert_eq!(compensates.load(Ordering::SeqCst), 1, "{answer:?}");
        assert!(
            sloppy.last_error.contains(answer.recorded()),
            "{answer:?}: {:?}",
            sloppy.last_error
        );
        assert!(sloppy.last_error.len() <= TEXT_KEPT, "{answer:?}");
        if let BadAnswer::UnknownCode = answer {
            assert!(sloppy.last_error.ends_with('…'), "{:?}", sloppy.last_error);
        }
        assert!(
            saga.history.iter().all(|t| t.detail.len() <= TEXT_KEPT),
            "{answer:?}: {saga:?}"
        );
        assert_eq!(
            compensation_order(&saga),
            ["sloppy", "inventory", "payment"],
            "{answer:?}"
        );
        // Nothing of a 1 MB reply was kept: the whole saga stays small.
        assert!(
            saga.encoded_len() < 16 * 1024,
            "{answer:?}: {} bytes",
            saga.encoded_len()
        );
        assert_eq!(stack.balance("alice").await, 10_000, "{answer:?}");
        assert_eq!(stack.stock("sku-apple").await, 100, "{answer:?}");
        if let Some(orchestrator) = stack.orchestrator.take() {
            orchestrator.stop().await;
        }
        let _ = stop.send(());
    }
    stack.stop().await;
}

/// A steps file that does not make a saga stops the `orchestrator` binary
/// at start-up: a non-zero exit and one line on stderr naming the entry.
#[test]
fn a_malformed_steps_file_stops_the_binary_with_one_line() {
    let dir = tempfile::tempdir().expect("tempdir");
    let cases = [
        (
            "[[steps]]\nname = \"payment\"\naddress = \"h:1\"\n\n[[steps]]\nname = \"shipping\"\n",
            "step 2 (\"shipping\"): address is missing",
        ),
        (
            "[[steps]]\nname = \"payment\"\naddress = \"h:1\"\n[[steps]]\nbuiltin = \"inventory\"\n",
            "unknown field `builtin`",
        ),
        (
            "[[steps]]\nname = \"loyalty\"\naddress = \"h:1\"\n[[steps]]\nname = \"loyalty\"\naddress = \"h:2\"\n",
            "step 2 (\"loyalty\"): the name \"loyalty\" is used by an earlier step",
        ),
    ];
    for (i, (text, expected)) in cases.into_iter().enumerate() {
        let file = dir.path().join(format!("steps-{i}.toml"));
        std::fs::write(&file, text).expect("write the steps file");
        let output =
            std::process::Command::new(saga_tests::process::workspace_binary("orchestrator"))
                .arg("serve")
                .args(["--listen", "127.0.0.1:0", "--no-console", "--no-metrics"])
                .arg("--data-dir")
                .arg(dir.path().join(format!("data-{i}")))
                .arg("--steps-file")
                .arg(&file)
                .env_remove("MONGODB_URI")
                .env_remove("SAGA_STEPS_FILE")
                .output()
                .expect("run the orchestrator");
        assert!(!output.status.success(), "{text:?} started");
        let stderr = String::from_utf8_lossy(&output.stderr);
        let lines: Vec<&str> = stderr.lines().filter(|l| !l.trim().is_empty()).collect();
        assert_eq!(lines.len(), 1, "{text:?}: {stderr}");
        assert!(
            lines[0].starts_with(&format!("orchestrator: steps file {}: ", file.display())),
            "{}",
            lines[0]
        );
        assert!(lines[0].contains(expected), "{} lacks {expected}", lines[0]);
    }
}
