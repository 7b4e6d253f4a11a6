//! W3C trace context across the three services, and the OpenTelemetry
//! spans that make one saga one trace.
//!
//! Always: the orchestrator sends `traceparent` with every participant call
//! (the trace id is the saga's: see `Saga::trace_id`), and the participants
//! put the trace id into the span of the call they serve, so one saga's log
//! lines join up.
//!
//! When spans are exported ([`crate::telemetry`]), the same header also
//! names the caller's span, and these helpers give each span its place in
//! the saga's trace:
//! - [`ServerSpan`]: a server call's span recorded when the call ends, with
//!   ids chosen then — CreateOrder's trace is the saga's, known only once the
//!   saga is made, and its span id is derived from a key (the saga id);
//! - [`continue_trace`]: a span whose parent is that root span, found again
//!   from the key alone — so a saga driven after a restart, by any
//!   instance, continues the same trace under the same CreateOrder span;
//! - [`outgoing`]: the `traceparent` of a call made in the current span,
//!   naming that span as the callee's parent;
//! - [`RemoteParent`]: the caller's span, adopted by the span of the call it
//!   made.
//!
//! Without export every helper returns at its first line (one atomic load)
//! and `traceparent` carries a fresh span id, as it always did: nothing
//! OpenTelemetry is built on a call's path.
//!
//! Sampling: a continued trace is sampled as the configured sampler decides
//! for its root from the trace id alone (what `traceidratio` and the
//! `always_*` samplers look at), so every driver of one saga agrees. A
//! client that sends `traceparent` with the sampled flag off while the
//! sampler keeps its trace id gets the saga's spans without its own.

use crate::telemetry;
use opentelemetry::trace::{
    Span as _, SpanContext, SpanId, SpanKind, Status, TraceContextExt, TraceFlags, TraceId,
    TraceState, Tracer as _,
};
use opentelemetry::{Context, KeyValue};
use sha2::{Digest, Sha256};
use std::time::SystemTime;
use tonic::metadata::MetadataMap;
use tracing::Span;
use tracing_opentelemetry::OpenTelemetrySpanExt;

/// Header name (lower case, as gRPC metadata keys are).
pub const TRACEPARENT: &str = "traceparent";

/// A `traceparent` value for `trace_id` (32 lowercase hex digits) with a
/// fresh span id: `00-<trace_id>-<span_id>-01` (sampled).
pub fn traceparent(trace_id: &str) -> String {
    let span_id: u64 = rand::random::<u64>() | 1;
    format!("00-{trace_id}-{span_id:016x}-01")
}

/// The trace id of an incoming call's `traceparent`, if well formed.
pub fn trace_id(metadata: &MetadataMap) -> Option<String> {
    trace_id_of(metadata.get(TRACEPARENT)?.to_str().ok()?)
}

/// The trace id of a `traceparent` value, if well formed (a call of a
/// batch carries its own).
pub fn trace_id_of(traceparent: &str) -> Option<String> {
    parse(traceparent).map(str::to_owned)
}

fn parse(value: &str) -> Option<&str> {
    fields(value).map(|(trace_id, _, _)| trace_id)
}

/// The trace id, span id and flags of a well-formed `traceparent`.
fn fields(value: &str) -> Option<(&str, &str, &str)> {
    let mut parts = value.split('-');
    let (version, trace_id, span_id, flags) =
        (parts.next()?, parts.next()?, parts.next()?, parts.next()?);
    let hex = |s: &str, len: usize| s.len() == len && s.bytes().all(|b| b.is_ascii_hexdigit());
    let valid = hex(version, 2)
        && version != "ff"
        && hex(trace_id, 32)
        && trace_id.bytes().any(|b| b != b'0')
        && hex(span_id, 16)
        && span_id.bytes().any(|b| b != b'0')
        && hex(flags, 2);
    valid.then_some((trace_id, span_id, flags))
}

/// The `traceparent` of a call of trace `trace_id` made in the current
/// span: when spans are exported and the current span is of that trace,
/// it names that span (and its sampling decision), so the callee's span
/// becomes its child; otherwise [`traceparent`], a fresh span id.
pub fn outgoing(trace_id: &str) -> String {
    telemetry::active()
        .and_then(|_| current_span_header(trace_id))
        .unwrap_or_else(|| traceparent(trace_id))
}

/// The current span's `traceparent`, if it is a span of trace `trace_id`.
fn current_span_header(trace_id: &str) -> Option<String> {
    let cx = Span::current().context();
    let span = cx.span();
    let current = span.span_context();
    let ours = current.is_valid() && TraceId::from_hex(trace_id).ok() == Some(current.trace_id());
    ours.then(|| {
        format!(
            "00-{}-{}-{:02x}",
            current.trace_id(),
            current.span_id(),
            current.trace_flags().to_u8()
        )
    })
}

/// The span that made a call, named by the call's `traceparent`: the span
/// of the call served becomes its child ([`RemoteParent::adopt`]).
#[derive(Clone, Debug, PartialEq)]
pub struct RemoteParent(SpanContext);

impl RemoteParent {
    /// The caller's span, when spans are exported and the call carries a
    /// well-formed `traceparent` (otherwise nothing is parsed).
    pub fn of(metadata: &MetadataMap) -> Option<RemoteParent> {
        telemetry::active()?;
        RemoteParent::of_header(metadata.get(TRACEPARENT)?.to_str().ok()?)
    }

    /// The span a `traceparent` value names (a call of a batch carries its
    /// own), when spans are exported and the value is well formed.
    pub fn of_header(traceparent: &str) -> Option<RemoteParent> {
        telemetry::active()?;
        let (trace_id, span_id, flags) = fields(traceparent)?;
        let context = SpanContext::new(
            TraceId::from_hex(trace_id).ok()?,
            SpanId::from_hex(span_id).ok()?,
            TraceFlags::new(u8::from_str_radix(flags, 16).ok()?),
            true,
            TraceState::default(),
        );
        Some(RemoteParent(context))
    }

    /// Makes `span` — created, not entered yet — a child of this span.
    pub fn adopt(&self, span: &Span) {
        set_parent(span, self.0.clone());
    }
}

/// Makes `span` — created, not entered yet — a child of the root span of
/// trace `trace_id` that a [`ServerSpan`] recorded with `root_key`: the same
/// parent whichever process makes the span, before or after a restart.
/// Nothing when spans are not exported or `trace_id` is malformed.
pub fn continue_trace(span: &Span, trace_id: &str, root_key: &str) {
    let Some(otlp) = telemetry::active() else {
        return;
    };
    let Some(trace_id) = valid_trace_id(trace_id) else {
        return;
    };
    let flags = if otlp.root_sampled(trace_id) {
        TraceFlags::SAMPLED
    } else {
        TraceFlags::NOT_SAMPLED
    };
    let root = SpanContext::new(
        trace_id,
        root_span_id(root_key),
        flags,
        true,
        TraceState::default(),
    );
    set_parent(span, root);
}

fn set_parent(span: &Span, parent: SpanContext) {
    // Fails only for a span already entered, disabled or not exported: it
    // then keeps the parent it has.
    let _ = span.set_parent(Context::new().with_remote_span_context(parent));
}

/// The span id of the root span recorded with `key`.
fn root_span_id(key: &str) -> SpanId {
    let digest = Sha256::new()
        .chain_update(b"root-span:")
        .chain_update(key.as_bytes())
        .finalize();
    let mut bytes = [0; 8];
    bytes.copy_from_slice(&digest[..8]);
    SpanId::from(u64::from_be_bytes(bytes).max(1))
}

fn valid_trace_id(hex: &str) -> Option<TraceId> {
    TraceId::from_hex(hex)
        .ok()
        .filter(|id| *id != TraceId::INVALID)
}

/// A server call's span, recorded when the call ends: its trace and span
/// id may depend on what the call did (CreateOrder's are its saga's).
#[derive(Debug)]
pub struct ServerSpan {
    rpc: &'static str,
    started: SystemTime,
    parent: Option<RemoteParent>,
}

/// How a [`ServerSpan`] ended.
#[derive(Debug, Default)]
pub struct Ended<'a> {
    /// The trace it belongs to; `None`: the caller's, else a new one. The
    /// caller's span stays its parent when it is of this trace.
    pub trace_id: Option<&'a str>,
    /// The key its span id is derived from, for [`continue_trace`]; `None`:
    /// a random span id.
    pub root_key: Option<&'a str>,
    /// Attributes (`saga.id`, …).
    pub attributes: Vec<(&'static str, String)>,
    /// Why the call failed, if it did.
    pub error: Option<String>,
}

impl ServerSpan {
    /// Starts timing the call `rpc` (`package.Service/Method`), made by the
    /// caller that `metadata`'s `traceparent` names; `None` when spans are
    /// not exported.
    pub fn start(rpc: &'static str, metadata: &MetadataMap) -> Option<ServerSpan> {
        telemetry::active()?;
        Some(ServerSpan {
            rpc,
            started: SystemTime::now(),
            parent: RemoteParent::of(metadata),
        })
    }

    /// Records the span, ended now, as `ended` says.
    pub fn end(self, ended: Ended<'_>) {
        let Some(otlp) = telemetry::active() else {
            return;
        };
        let trace_id = ended.trace_id.and_then(valid_trace_id);
        let parent = self
            .parent
            .filter(|p| trace_id.is_none_or(|t| p.0.trace_id() == t));
        let cx = match parent {
            Some(parent) => Context::new().with_remote_span_context(parent.0),
            None => Context::new(),
        };
        let (service, method) = self.rpc.split_once('/').unwrap_or(("", self.rpc));
        let mut attributes = vec![
            KeyValue::new("rpc.system", "grpc"),
            KeyValue::new("rpc.service", service),
            KeyValue::new("rpc.method", method),
        ];
        attributes.extend(
            ended
                .attributes
                .into_iter()
                .map(|(k, v)| KeyValue::new(k, v)),
        );
        let builder = otlp
            .tracer
            .span_builder(self.rpc)
            .with_kind(SpanKind::Server)
            .with_start_time(self.started)
            .with_attributes(attributes);
        let span_id = ended.root_key.map(root_span_id);
        let mut span = telemetry::with_pinned_ids(trace_id, span_id, || {
            builder.start_with_context(&otlp.tracer, &cx)
        });
        if let Some(error) = ended.error {
            span.set_status(Status::error(error));
        }
        span.end();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn traceparents_round_trip_and_garbage_is_ignored() {
        let id = "0af7651916cd43dd8448eb211c80319c";
        let header = traceparent(id);
        assert_eq!(parse(&header), Some(id));
        assert_eq!(header.len(), 55);
        for bad in [
            "",
            "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331",
            "00-00000000000000000000000000000000-b7ad6b7169203331-01",
            "00-0af7651916cd43dd8448eb211c80319c-0000000000000000-01",
            "ff-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",
            "00-0AF7651916CD43DD8448EB211C80319Z-b7ad6b7169203331-01",
        ] {
            assert_eq!(parse(bad), None, "{bad}");
        }
        let mut metadata = MetadataMap::new();
        metadata.insert(TRACEPARENT, header.parse().expect("ascii"));
        assert_eq!(trace_id(&metadata).as_deref(), Some(id));
    }

    /// No span export in this test process: the helpers build nothing
    /// OpenTelemetry, and the header is what it always was.
    #[test]
    fn without_export_the_helpers_are_inert() {
        let id = "0af7651916cd43dd8448eb211c80319c";
        assert!(!telemetry::exporting());
        let header = outgoing(id);
        assert_eq!(parse(&header), Some(id));
        assert_ne!(outgoing(id), header, "a fresh span id per call");
        let mut metadata = MetadataMap::new();
        metadata.insert(TRACEPARENT, header.parse().expect("ascii"));
        assert_eq!(RemoteParent::of(&metadata), None);
        assert_eq!(RemoteParent::of_header(&header), None);
        assert!(ServerSpan::start("saga.v1.OrderService/CreateOrder", &metadata).is_none());
        // Harmless on a span no OpenTelemetry layer sees.
        continue_trace(&Span::none(), id, "saga");
    }

    /// A saga's root span id is found again from its key alone, by any
    /// process: what lets a resumed saga continue its trace.
    #[test]
    fn a_root_span_id_depends_on_its_key_alone() {
        let key = "01a22aaf-9d56-7107-8f54-c77f523befdf";
        assert_eq!(root_span_id(key), root_span_id(key));
        assert_ne!(root_span_id(key), root_span_id("another saga"));
        assert_ne!(root_span_id(key), SpanId::INVALID);
    }
}
