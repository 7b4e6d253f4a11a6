//! Spans over OTLP/gRPC, set up from the standard OpenTelemetry variables,
//! and the process-wide state the span helpers of [`crate::trace`] read.
//!
//! - Off unless `OTEL_EXPORTER_OTLP_ENDPOINT` (or
//!   `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`) is set and not empty, and
//!   `OTEL_SDK_DISABLED` is not `true`: then no exporter, no OpenTelemetry
//!   layer and no OpenTelemetry data anywhere on a call's path (every helper
//!   first asks [`active`], one atomic load).
//! - The exporter is `opentelemetry-otlp`'s tonic client, on the tonic 0.14
//!   the services already build. It reads its own variables (endpoint,
//!   `…_TIMEOUT`, `…_HEADERS`, `…_COMPRESSION`; an `https://` endpoint is
//!   dialled with TLS and the webpki roots). The SDK's batch processor exports
//!   from a thread of its own, and tonic's channel needs a Tokio runtime for
//!   its connection tasks: the exporter gets a one-thread runtime of its own,
//!   so it does not depend on the service's runtime being alive — a
//!   participant binary sets telemetry up before it builds its runtime, and
//!   the last spans are flushed after that runtime is gone.
//! - `OTEL_TRACES_SAMPLER` / `OTEL_TRACES_SAMPLER_ARG` are read by the SDK
//!   (default `parentbased_always_on`); a copy of the same sampler tells
//!   [`crate::trace`] whether the root of a trace it continues was sampled.
//! - `OTEL_SERVICE_NAME` (or `service.name` in `OTEL_RESOURCE_ATTRIBUTES`)
//!   names the service; without it, the binary's file name does.
//! - Span ids come from the SDK's random generator, except where a caller
//!   pins them for one span it builds on its own thread
//!   ([`with_pinned_ids`]): OpenTelemetry chooses ids only through its
//!   generator, and a saga's trace id is fixed by the saga (so that a saga
//!   resumed by another process continues the same trace).

use opentelemetry::trace::{SpanId, SpanKind, TraceId, TracerProvider as _};
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::trace::{
    Config, IdGenerator, RandomIdGenerator, SamplingDecision, SdkTracer, SdkTracerProvider,
    ShouldSample,
};
use std::cell::Cell;
use std::sync::OnceLock;
use std::sync::atomic::{AtomicBool, Ordering};

/// The exporting pipeline of this process.
pub(crate) struct Otlp {
    provider: SdkTracerProvider,
    /// What every span of this process is built with (the `tracing` layer's
    /// too).
    pub(crate) tracer: SdkTracer,
    /// The sampler the SDK applies, for decisions about a trace's root.
    sampler: Box<dyn ShouldSample>,
}

impl Otlp {
    /// A pipeline exporting through `provider`, sampling as `sampler` does
    /// (the provider's own sampler).
    fn new(provider: SdkTracerProvider, sampler: Box<dyn ShouldSample>) -> Otlp {
        let tracer = provider.tracer("saga-services");
        Otlp {
            provider,
            tracer,
            sampler,
        }
    }

    /// Whether the root span of trace `trace_id` is sampled: the sampler's
    /// decision for a span without a parent, which for every standard
    /// sampler depends on the trace id alone.
    pub(crate) fn root_sampled(&self, trace_id: TraceId) -> bool {
        let decision = self
            .sampler
            .should_sample(None, trace_id, "root", &SpanKind::Server, &[], &[])
            .decision;
        decision == SamplingDecision::RecordAndSample
    }
}

static OTLP: OnceLock<Otlp> = OnceLock::new();
/// Set once the pipeline is installed, cleared when it is shut down.
static ACTIVE: AtomicBool = AtomicBool::new(false);

/// The exporting pipeline, when spans are exported.
pub(crate) fn active() -> Option<&'static Otlp> {
    if ACTIVE.load(Ordering::Acquire) {
        OTLP.get()
    } else {
        None
    }
}

/// Whether the variables ask for span export.
pub(crate) fn configured() -> bool {
    let set = |name: &str| std::env::var(name).is_ok_and(|v| !v.trim().is_empty());
    let disabled = std::env::var("OTEL_SDK_DISABLED").is_ok_and(|v| v.eq_ignore_ascii_case("true"));
    !disabled && (set("OTEL_EXPORTER_OTLP_ENDPOINT") || set("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"))
}

/// Builds the exporter and the provider from the variables and installs
/// them for this process (once: a second call returns the first pipeline).
pub(crate) fn start() -> Result<&'static Otlp, String> {
    if let Some(otlp) = OTLP.get() {
        return Ok(otlp);
    }
    let runtime = exporter_runtime()?;
    let exporter = {
        // tonic's channel spawns its connection tasks on the runtime it is
        // made in.
        let _entered = runtime.enter();
        opentelemetry_otlp::SpanExporter::builder()
            .with_tonic()
            .build()
            .map_err(|e| format!("the OTLP span exporter: {e}"))?
    };
    let sampler = Config::default().sampler;
    let provider = SdkTracerProvider::builder()
        .with_batch_exporter(exporter)
        .with_sampler(sampler.clone())
        .with_id_generator(PinnableIds::default())
        .with_resource(resource())
        .build();
    Ok(install(Otlp::new(provider, sampler)))
}

/// Makes `otlp` this process's pipeline (the first one wins).
fn install(otlp: Otlp) -> &'static Otlp {
    let installed = OTLP.get_or_init(|| otlp);
    ACTIVE.store(true, Ordering::Release);
    installed
}

/// Exports what is still buffered and stops the pipeline; spans ended
/// afterwards are dropped. Waits at most `OTEL_BSP_EXPORT_TIMEOUT` (30 s
/// by default) per pending batch, as the SDK does.
pub(crate) fn shutdown() {
    if !ACTIVE.swap(false, Ordering::AcqRel) {
        return;
    }
    if let Some(otlp) = OTLP.get()
        && let Err(error) = otlp.provider.shutdown()
    {
        tracing::warn!(%error, "the last spans may not have been exported");
    }
}

/// The runtime the exporter's connections live on, for the life of the
/// process (never dropped: a runtime must not be dropped inside another's
/// tasks, and the guard that flushes may be dropped in one).
fn exporter_runtime() -> Result<&'static tokio::runtime::Runtime, String> {
    static RUNTIME: OnceLock<tokio::runtime::Runtime> = OnceLock::new();
    if let Some(runtime) = RUNTIME.get() {
        return Ok(runtime);
    }
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .thread_name("otlp-export")
        .enable_all()
        .build()
        .map_err(|e| format!("the OTLP exporter's runtime: {e}"))?;
    Ok(RUNTIME.get_or_init(|| runtime))
}

/// The SDK's resource (`OTEL_RESOURCE_ATTRIBUTES`, `OTEL_SERVICE_NAME`),
/// named after the binary when neither names the service.
fn resource() -> Resource {
    let named = std::env::var("OTEL_SERVICE_NAME").is_ok_and(|v| !v.is_empty())
        || std::env::var("OTEL_RESOURCE_ATTRIBUTES").is_ok_and(|v| {
            v.split(',')
                .any(|pair| pair.trim_start().starts_with("service.name="))
        });
    let builder = Resource::builder();
    if named {
        builder.build()
    } else {
        builder.with_service_name(binary_name()).build()
    }
}

/// This binary's file name (`orchestrator`, `payment-svc`, …).
fn binary_name() -> String {
    std::env::args_os()
        .next()
        .and_then(|path| {
            std::path::Path::new(&path)
                .file_name()
                .map(|name| name.to_string_lossy().into_owned())
        })
        .unwrap_or_else(|| "saga-service".to_owned())
}

thread_local! {
    /// Ids the next span built on this thread must have.
    static PINNED: Cell<(Option<TraceId>, Option<SpanId>)> = const { Cell::new((None, None)) };
}

/// Runs `build` — which must build exactly one span, synchronously — with
/// the ids that span takes from the generator pinned: `trace_id` when it
/// has no parent, `span_id` always (`None`: random, as usual).
pub(crate) fn with_pinned_ids<R>(
    trace_id: Option<TraceId>,
    span_id: Option<SpanId>,
    build: impl FnOnce() -> R,
) -> R {
    PINNED.with(|pinned| pinned.set((trace_id, span_id)));
    let built = build();
    PINNED.with(|pinned| pinned.set((None, None)));
    built
}

/// The SDK's random ids, unless [`with_pinned_ids`] pinned the next ones.
#[derive(Debug, Default)]
struct PinnableIds(RandomIdGenerator);

impl IdGenerator for PinnableIds {
    fn new_trace_id(&self) -> TraceId {
        let pinned = PINNED.with(|pinned| {
            let (trace_id, span_id) = pinned.get();
            pinned.set((None, span_id));
            trace_id
        });
        pinned.unwrap_or_else(|| self.0.new_trace_id())
    }

    fn new_span_id(&self) -> SpanId {
        let pinned = PINNED.with(|pinned| {
            let (trace_id, span_id) = pinned.get();
            pinned.set((trace_id, None));
            span_id
        });
        pinned.unwrap_or_else(|| self.0.new_span_id())
    }
}
