//! An OTLP/gRPC trace receiver for the tests: the `TraceService` of the
//! published OpenTelemetry protos (`opentelemetry-proto`), served on an
//! ephemeral port, keeping every span it is sent in memory.
//!
//! It exists so a test can check what the services export the way a
//! collector (Jaeger, Tempo, the OpenTelemetry Collector) receives it: over
//! the wire, from the real binaries, with each span's service name taken
//! from its resource.

use opentelemetry_proto::tonic::collector::trace::v1::trace_service_server::{
    TraceService, TraceServiceServer,
};
use opentelemetry_proto::tonic::collector::trace::v1::{
    ExportTraceServiceRequest, ExportTraceServiceResponse,
};
use opentelemetry_proto::tonic::common::v1::any_value::Value;
use opentelemetry_proto::tonic::common::v1::{AnyValue, KeyValue};
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, PoisonError};
use tokio::task::JoinHandle;
use tokio_stream::wrappers::TcpListenerStream;
use tonic::{Request, Response, Status};

/// One received span, flattened: ids in lowercase hex (the parent empty for
/// a root), its service, name and attributes as text.
#[derive(Clone, Debug, PartialEq)]
pub struct ReceivedSpan {
    /// `service.name` of the resource it came with.
    pub service: String,
    /// The span's name.
    pub name: String,
    /// 32 hex digits.
    pub trace_id: String,
    /// 16 hex digits.
    pub span_id: String,
    /// 16 hex digits; empty for a root span.
    pub parent_span_id: String,
    /// Start time, ns since the epoch.
    pub start_ns: u64,
    /// Attributes, values as text (strings unquoted).
    pub attributes: Vec<(String, String)>,
    /// Whether its status is an error.
    pub error: bool,
}

impl ReceivedSpan {
    /// The attribute `key` as text, if the span has it.
    pub fn attribute(&self, key: &str) -> Option<&str> {
        self.attributes
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
    }
}

/// A running receiver; stops serving when dropped.
pub struct OtlpReceiver {
    /// Where it listens (127.0.0.1, ephemeral port).
    pub addr: SocketAddr,
    spans: Arc<Mutex<Vec<ReceivedSpan>>>,
    exports: Arc<Mutex<usize>>,
    task: JoinHandle<()>,
}

impl OtlpReceiver {
    /// Starts a receiver on a free port of 127.0.0.1.
    pub async fn start() -> OtlpReceiver {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind the OTLP receiver");
        let addr = listener.local_addr().expect("receiver address");
        let sink = Sink::default();
        let (spans, exports) = (sink.spans.clone(), sink.exports.clone());
        let task = tokio::spawn(async move {
            let _ = tonic::transport::Server::builder()
                .add_service(TraceServiceServer::new(sink))
                .serve_with_incoming(TcpListenerStream::new(listener))
                .await;
        });
        OtlpReceiver {
            addr,
            spans,
            exports,
            task,
        }
    }

    /// The value of `OTEL_EXPORTER_OTLP_ENDPOINT` that reaches it.
    pub fn endpoint(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Every span received so far, in arrival order.
    pub fn spans(&self) -> Vec<ReceivedSpan> {
        self.spans
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// How many Export calls it has answered.
    pub fn exports(&self) -> usize {
        *self.exports.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

impl Drop for OtlpReceiver {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// The served `TraceService`: appends what it is sent.
#[derive(Default)]
struct Sink {
    spans: Arc<Mutex<Vec<ReceivedSpan>>>,
    exports: Arc<Mutex<usize>>,
}

#[tonic::async_trait]
impl TraceService for Sink {
    async fn export(
        &self,
        request: Request<ExportTraceServiceRequest>,
    ) -> Result<Response<ExportTraceServiceResponse>, Status> {
        let mut received = Vec::new();
        for resource_spans in request.into_inner().resource_spans {
            let service = resource_spans
                .resource
                .as_ref()
                .and_then(|r| text_of(&r.attributes, "service.name"))
                .unwrap_or_default();
            for scope in resource_spans.scope_spans {
                received.extend(scope.spans.into_iter().map(|span| {
                    ReceivedSpan {
                        service: service.clone(),
                        trace_id: hex::encode(&span.trace_id),
                        span_id: hex::encode(&span.span_id),
                        parent_span_id: hex::encode(&span.parent_span_id),
                        start_ns: span.start_time_unix_nano,
                        attributes: span
                            .attributes
                            .iter()
                            .map(|kv| (kv.key.clone(), text(kv.value.as_ref())))
                            .collect(),
                        // STATUS_CODE_ERROR = 2.
                        error: span.status.is_some_and(|s| s.code == 2),
                        name: span.name,
                    }
                }));
            }
        }
        self.spans
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .extend(received);
        *self.exports.lock().unwrap_or_else(PoisonError::into_inner) += 1;
        Ok(Response::new(ExportTraceServiceResponse {
            partial_success: None,
        }))
    }
}

/// The attribute `key` of `attributes` as text.
fn text_of(attributes: &[KeyValue], key: &str) -> Option<String> {
    attributes
        .iter()
        .find(|kv| kv.key == key)
        .map(|kv| text(kv.value.as_ref()))
}

/// An attribute value as text.
fn text(value: Option<&AnyValue>) -> String {
    match value.and_then(|v| v.value.as_ref()) {
        Some(Value::StringValue(s)) => s.clone(),
        Some(Value::BoolValue(b)) => b.to_string(),
        Some(Value::IntValue(i)) => i.to_string(),
        Some(Value::DoubleValue(d)) => d.to_string(),
        Some(other) => format!("{other:?}"),
        None => String::new(),
    }
}
