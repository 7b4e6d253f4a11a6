//! One saga's log lines join up across the three services.
//!
//! The orchestrator sends W3C `traceparent` with every participant call and
//! the participants put the trace id into the span of the call they serve.
//! The trace id is the CreateOrder caller's when it sent a `traceparent`
//! (the client's trace wins: the saga joins it), else the saga id's 32 hex
//! digits. This test binary captures every JSON log line of the in-process
//! [`Stack`] in memory, runs a completed, a compensated and a client-traced
//! order, and checks that the orchestrator's lines for each saga and both
//! participants' lines for its calls carry the expected `trace_id`.
//!
//! The subscriber is global to the process, so this file holds one test.

use saga_proto::saga::v1 as saga;
use saga_tests::Stack;
use serde_json::Value;
use std::io::Write;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;
use tracing_subscriber::EnvFilter;
use tracing_subscriber::fmt::MakeWriter;

/// Every formatted line, in memory.
#[derive(Clone, Default)]
struct Capture(Arc<Mutex<Vec<u8>>>);

impl Capture {
    /// Installs the process-wide JSON subscriber writing into a new capture.
    fn install() -> Capture {
        let capture = Capture::default();
        let subscriber = tracing_subscriber::fmt()
            .json()
            .with_current_span(true)
            .with_span_list(true)
            .with_env_filter(EnvFilter::new(
                "warn,orchestrator=debug,participant_kit=debug,payment_svc=debug,inventory_svc=debug",
            ))
            .with_writer(capture.clone())
            .finish();
        tracing::subscriber::set_global_default(subscriber).expect("one subscriber per process");
        capture
    }

    /// The captured lines, each parsed as a JSON object.
    fn lines(&self) -> Vec<Value> {
        let bytes = self
            .0
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone();
        String::from_utf8(bytes)
            .expect("UTF-8 logs")
            .lines()
            .map(|line| {
                serde_json::from_str(line).unwrap_or_else(|e| panic!("not JSON ({e}): {line}"))
            })
            .collect()
    }
}

impl Write for Capture {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .extend_from_slice(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl<'a> MakeWriter<'a> for Capture {
    type Writer = Capture;

    fn make_writer(&'a self) -> Self::Writer {
        self.clone()
    }
}

/// The spans a line was logged in, outermost first.
fn spans(line: &Value) -> &[Value] {
    line["spans"].as_array().map(Vec::as_slice).unwrap_or(&[])
}

/// The span named `name` the line was logged in, if any.
fn span<'a>(line: &'a Value, name: &str) -> Option<&'a Value> {
    spans(line).iter().find(|s| s["name"] == name)
}

/// The `trace_id` of the innermost span of the line that has one.
fn trace_id(line: &Value) -> Option<&str> {
    spans(line)
        .iter()
        .rev()
        .find_map(|s| s["trace_id"].as_str())
}

fn target(line: &Value) -> &str {
    line["target"].as_str().unwrap_or_default()
}

fn message(line: &Value) -> &str {
    line["fields"]["message"].as_str().unwrap_or_default()
}

/// The participant calls (the `rpc` of their `step` spans) whose lines
/// carry a request id.
const PARTICIPANT_SPANS: [&str; 4] = ["charge", "refund", "deduct", "restock"];

/// The lines of one saga: the orchestrator's (logged in its `saga` span)
/// and the participants' (logged in the span of a call for one of its
/// steps, whose request ids are `<saga_id>:<step>`).
struct SagaLines<'a> {
    orchestrator: Vec<&'a Value>,
    participants: Vec<(&'static str, &'a Value)>,
}

fn saga_lines<'a>(lines: &'a [Value], saga_id: &str) -> SagaLines<'a> {
    let prefix = format!("{saga_id}:");
    let mut found = SagaLines {
        orchestrator: Vec::new(),
        participants: Vec::new(),
    };
    for line in lines {
        if span(line, "saga").is_some_and(|s| s["saga_id"] == saga_id) {
            found.orchestrator.push(line);
        }
        for call in PARTICIPANT_SPANS {
            // A step call's span, named by the kind of call it is.
            let ours = span(line, "step").is_some_and(|s| {
                s["rpc"] == call
                    && s["request_id"]
                        .as_str()
                        .is_some_and(|id| id.starts_with(&prefix))
            });
            if ours {
                found.participants.push((call, line));
            }
        }
    }
    found
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn one_sagas_lines_join_up_across_the_three_services() {
    let logs = Capture::install();
    let stack = Stack::start().await;
    stack.deposit("alice", 10_000).await;
    stack.add_stock("sku-apple", 5).await;

    let completed = stack
        .order("t-completed", "alice", &[("sku-apple", 2, 150)])
        .await
        .expect("order");
    assert_eq!(completed.status(), saga::SagaStatus::Completed);
    let compensated = stack
        .order("t-short", "alice", &[("sku-apple", 50, 10)])
        .await
        .expect("order");
    assert_eq!(compensated.status(), saga::SagaStatus::Cancelled);
    // A caller that sends its own traceparent: the saga continues the
    // caller's trace (its trace id differs from the saga id's).
    let client_trace = "4bf92f3577b34da6a3ce929d0e0e4736";
    let mut request = tonic::Request::new(saga_tests::order_request(
        "t-traced",
        "alice",
        &[("sku-apple", 1, 150)],
        true,
    ));
    request.metadata_mut().insert(
        "traceparent",
        format!("00-{client_trace}-00f067aa0ba902b7-01")
            .parse()
            .expect("header"),
    );
    let traced = stack
        .orders()
        .await
        .create_order(request)
        .await
        .expect("order")
        .into_inner();
    assert_eq!(traced.status(), saga::SagaStatus::Completed);
    assert_eq!(
        traced.saga.as_ref().map(|s| s.trace_id.as_str()),
        Some(client_trace),
        "GetSaga shows the trace the saga joined"
    );
    assert_ne!(traced.saga_id.replace('-', ""), client_trace);

    // "saga finished" is logged when the saga's task ends, which may be just
    // after the reply.
    let ids = [
        completed.saga_id.clone(),
        compensated.saga_id.clone(),
        traced.saga_id.clone(),
    ];
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    let lines = loop {
        let lines = logs.lines();
        let finished = ids.iter().all(|id| {
            saga_lines(&lines, id)
                .orchestrator
                .iter()
                .any(|l| message(l) == "saga finished")
        });
        if finished || tokio::time::Instant::now() >= deadline {
            break lines;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    let dump = || {
        lines
            .iter()
            .map(Value::to_string)
            .collect::<Vec<_>>()
            .join("\n")
    };

    let own = |id: &str| id.replace('-', "");
    for (saga_id, expected, calls) in [
        (
            &completed.saga_id,
            own(&completed.saga_id),
            &["charge", "deduct"][..],
        ),
        (
            &compensated.saga_id,
            own(&compensated.saga_id),
            &["charge", "deduct", "refund"][..],
        ),
        (
            &traced.saga_id,
            client_trace.to_owned(),
            &["charge", "deduct"][..],
        ),
    ] {
        assert_eq!(expected.len(), 32, "trace ids are 32 hex digits");
        let found = saga_lines(&lines, saga_id);

        assert!(
            found
                .orchestrator
                .iter()
                .any(|l| message(l) == "saga finished"),
            "no orchestrator line for saga {saga_id}:\n{}",
            dump()
        );
        for line in &found.orchestrator {
            assert!(target(line).starts_with("orchestrator"), "{line}");
            assert_eq!(
                trace_id(line),
                Some(expected.as_str()),
                "orchestrator line of saga {saga_id} without its trace id: {line}"
            );
        }

        for call in calls {
            let step = if matches!(*call, "charge" | "refund") {
                "payment"
            } else {
                "inventory"
            };
            let lines: Vec<&Value> = found
                .participants
                .iter()
                .filter(|(c, _)| c == call)
                .map(|(_, l)| *l)
                .collect();
            assert!(
                lines
                    .iter()
                    .any(|l| span(l, "step").is_some_and(|s| s["step"] == step)),
                "no line of the {step} participant for the {call} of saga {saga_id}:\n{}",
                dump()
            );
        }
        for (call, line) in &found.participants {
            assert_eq!(
                trace_id(line),
                Some(expected.as_str()),
                "{call} line of saga {saga_id} without its trace id: {line}"
            );
        }
    }

    // Two sagas, two traces.
    assert_ne!(completed.saga_id, compensated.saga_id);

    // A call without `traceparent` (the seeding Deposit) has an empty trace
    // id, not someone else's.
    let deposit = lines
        .iter()
        .find(|l| span(l, "deposit").is_some())
        .unwrap_or_else(|| panic!("no deposit line:\n{}", dump()));
    assert_eq!(trace_id(deposit), Some(""), "{deposit}");

    stack.stop().await;
}
