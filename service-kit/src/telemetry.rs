//! Logging and span export, set up once by every binary:
//!
//! - log lines filtered `RUST_LOG`-style (default `info`), human text by
//!   default, one JSON object per line with `--log-format json`;
//! - spans exported over OTLP/gRPC when `OTEL_EXPORTER_OTLP_ENDPOINT` is set
//!   ([`otlp`] says which variables count): every INFO-or-above `tracing`
//!   span becomes an OpenTelemetry span, with its INFO-or-above events as
//!   span events, whatever `RUST_LOG` keeps in the log. Unset, the
//!   subscriber is the logging one alone: no OpenTelemetry layer, nothing
//!   built per span or per call.
//!
//! [`init`] returns the [`Telemetry`] guard: dropped at the end of `main`,
//! it exports the spans still buffered, so a saga's last spans leave a
//! process that stops.

mod otlp;

pub(crate) use otlp::{Otlp, active, with_pinned_ids};

use tracing::Subscriber;
use tracing::level_filters::LevelFilter;
use tracing_subscriber::filter::Targets;
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::registry::LookupSpan;
use tracing_subscriber::util::SubscriberInitExt;
use tracing_subscriber::{EnvFilter, Layer, Registry};

/// How log lines are written.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum LogFormat {
    #[default]
    /// Human-readable lines.
    Text,
    /// One JSON object per line.
    Json,
}

/// Held by `main` for as long as the process runs: dropping it exports
/// the spans still buffered and stops the export.
#[must_use = "hold it until main returns: dropping it stops the span export"]
#[derive(Debug)]
pub struct Telemetry {
    exporting: bool,
}

impl Telemetry {
    /// Whether this process exports spans.
    pub fn exporting(&self) -> bool {
        self.exporting
    }
}

impl Drop for Telemetry {
    fn drop(&mut self) {
        if self.exporting {
            otlp::shutdown();
        }
    }
}

/// Whether spans are being exported (the OTLP pipeline is up).
pub fn exporting() -> bool {
    active().is_some()
}

/// Installs the global subscriber — and, when the variables ask for it,
/// the OTLP span export; a second call (tests) is a no-op. A span export
/// that cannot be set up (a malformed endpoint) is logged as an error and
/// the service runs without it.
pub fn init(format: LogFormat) -> Telemetry {
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info"));
    if !otlp::configured() {
        let builder = tracing_subscriber::fmt().with_env_filter(filter);
        let _ = match format {
            LogFormat::Text => builder.try_init(),
            LogFormat::Json => builder.json().flatten_event(true).try_init(),
        };
        return Telemetry { exporting: false };
    }
    let started = otlp::start();
    let spans = started.as_ref().ok().map(|otlp| span_layer(otlp));
    let installed = tracing_subscriber::registry()
        .with(log_layer(format).with_filter(filter))
        .with(spans)
        .try_init()
        .is_ok();
    match started {
        Ok(_) if installed => {
            tracing::info!("exporting spans over OTLP");
            Telemetry { exporting: true }
        }
        Ok(_) => Telemetry { exporting: false },
        Err(error) => {
            tracing::error!(%error, "spans are not exported");
            Telemetry { exporting: false }
        }
    }
}

/// The log lines, as `format` says.
fn log_layer(format: LogFormat) -> Box<dyn Layer<Registry> + Send + Sync> {
    let layer = tracing_subscriber::fmt::layer();
    match format {
        LogFormat::Text => layer.boxed(),
        LogFormat::Json => layer.json().flatten_event(true).boxed(),
    }
}

/// `tracing` spans as OpenTelemetry spans: INFO and above, whatever the log
/// filter keeps, except the exporter's own (which would feed themselves).
fn span_layer<S>(otlp: &Otlp) -> impl Layer<S> + use<S>
where
    S: Subscriber + for<'span> LookupSpan<'span>,
{
    let own = Targets::new()
        .with_default(LevelFilter::INFO)
        .with_target("opentelemetry", LevelFilter::OFF)
        .with_target("opentelemetry_sdk", LevelFilter::OFF)
        .with_target("opentelemetry-otlp", LevelFilter::OFF)
        .with_target("opentelemetry_otlp", LevelFilter::OFF);
    tracing_opentelemetry::layer()
        .with_tracer(otlp.tracer.clone())
        .with_threads(false)
        .with_filter(own)
}
