//! Prometheus metrics over HTTP.
//!
//! Code records through the `metrics` facade (`metrics::counter!` …) — a
//! no-op until [`serve_metrics`] installs the Prometheus recorder, which also
//! serves `GET /metrics` on its own port. One recorder per process: the dev
//! command, which runs all three services in one process, serves them all on
//! one endpoint.
//!
//! Each binary flattens a [`MetricsConfig`] into its flags
//! (`--metrics-listen`, `--no-metrics`), with its own environment variable
//! and default port given by a [`MetricsDefaults`] marker type, and calls
//! [`MetricsConfig::start`]. Participants time their calls with
//! [`CallTimer`] (`participant_call_duration_seconds{rpc}`).

use std::fmt;
use std::marker::PhantomData;
use std::net::SocketAddr;
use std::time::Instant;

/// Why the exporter could not start.
#[derive(Debug, thiserror::Error)]
#[error("metrics exporter on {addr}: {message}")]
pub struct MetricsError {
    addr: SocketAddr,
    message: String,
}

/// Installs the process-wide Prometheus recorder and serves it on `addr`
/// (`http://<addr>/metrics`), on the current tokio runtime if there is one.
pub fn serve_metrics(addr: SocketAddr) -> Result<(), MetricsError> {
    let error = |e: &dyn fmt::Display| MetricsError {
        addr,
        message: e.to_string(),
    };
    let builder = metrics_exporter_prometheus::PrometheusBuilder::new()
        .with_http_listener(addr)
        .set_buckets(&[
            0.0002, 0.0005, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1.0, 2.0, 5.0,
        ])
        .map_err(|e| error(&e))?;
    // The exporter runs on the caller's runtime, or on a thread of its own
    // when there is none (a test installing it once for its whole binary).
    builder.install().map_err(|e| error(&e))?;
    metrics::describe_histogram!(
        "participant_call_duration_seconds",
        metrics::Unit::Seconds,
        "Participant gRPC calls by RPC, from arrival to reply (errors included)."
    );
    tracing::info!(url = %format!("http://{addr}/metrics"), "serving Prometheus metrics");
    Ok(())
}

/// Per-binary defaults of [`MetricsConfig`]: the environment variable of
/// `--metrics-listen` and its default address. Implement it on a unit
/// struct deriving `Clone`.
pub trait MetricsDefaults: Clone + Send + Sync + 'static {
    /// Environment variable of `--metrics-listen`, e.g. `PAYMENT_METRICS_LISTEN`.
    const LISTEN_ENV: &'static str;
    /// Default of `--metrics-listen`, e.g. `127.0.0.1:9462`.
    const LISTEN: &'static str;
}

/// The metrics flags; `#[command(flatten)]` it into a binary's clap config
/// with that binary's [`MetricsDefaults`]:
///
/// - `--metrics-listen <addr>` (env `D::LISTEN_ENV`, default `D::LISTEN`):
///   serve Prometheus metrics at `http://<addr>/metrics`;
/// - `--no-metrics` (env `NO_METRICS`): serve none.
#[derive(Clone, clap::Args)]
#[command(next_help_heading = "Metrics")]
pub struct MetricsConfig<D: MetricsDefaults> {
    /// Serve Prometheus metrics at `http://<addr>/metrics`.
    #[arg(long, env = D::LISTEN_ENV, default_value = D::LISTEN)]
    pub metrics_listen: SocketAddr,
    /// Do not serve metrics.
    #[arg(long, env = "NO_METRICS")]
    pub no_metrics: bool,
    #[arg(skip)]
    defaults: PhantomData<D>,
}

impl<D: MetricsDefaults> MetricsConfig<D> {
    /// Metrics served on `listen`, or none when `enabled` is false.
    pub fn new(listen: SocketAddr, enabled: bool) -> Self {
        MetricsConfig {
            metrics_listen: listen,
            no_metrics: !enabled,
            defaults: PhantomData,
        }
    }

    /// Starts the exporter unless disabled; returns the scrape URL.
    pub fn start(&self) -> Result<Option<String>, MetricsError> {
        if self.no_metrics {
            return Ok(None);
        }
        serve_metrics(self.metrics_listen)?;
        Ok(Some(format!("http://{}/metrics", self.metrics_listen)))
    }
}

impl<D: MetricsDefaults> fmt::Debug for MetricsConfig<D> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("MetricsConfig")
            .field("metrics_listen", &self.metrics_listen)
            .field("no_metrics", &self.no_metrics)
            .finish()
    }
}

impl<D: MetricsDefaults> PartialEq for MetricsConfig<D> {
    fn eq(&self, other: &Self) -> bool {
        self.metrics_listen == other.metrics_listen && self.no_metrics == other.no_metrics
    }
}

impl<D: MetricsDefaults> Eq for MetricsConfig<D> {}

/// Times one participant call: records its duration in
/// `participant_call_duration_seconds{rpc}` when dropped, so every way out
/// of the handler (reply, error, cancelled call) is measured.
#[derive(Debug)]
#[must_use = "the call is timed until the timer is dropped"]
pub struct CallTimer {
    rpc: &'static str,
    started: Instant,
}

impl CallTimer {
    /// Starts timing a call of `rpc` (`"charge"`, `"deduct"`, …).
    pub fn start(rpc: &'static str) -> CallTimer {
        CallTimer {
            rpc,
            started: Instant::now(),
        }
    }
}

impl Drop for CallTimer {
    fn drop(&mut self) {
        metrics::histogram!("participant_call_duration_seconds", "rpc" => self.rpc)
            .record(self.started.elapsed().as_secs_f64());
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Debug, Clone)]
    struct Test;

    impl MetricsDefaults for Test {
        const LISTEN_ENV: &'static str = "SERVICE_KIT_TEST_METRICS_LISTEN";
        const LISTEN: &'static str = "127.0.0.1:9499";
    }

    #[derive(Debug, clap::Parser)]
    struct Cli {
        #[command(flatten)]
        metrics: MetricsConfig<Test>,
    }

    #[test]
    fn flags_have_the_binary_default_and_can_be_turned_off() {
        let cli = Cli::try_parse_from(["x"]).unwrap();
        assert_eq!(
            cli.metrics,
            MetricsConfig::new("127.0.0.1:9499".parse().unwrap(), true)
        );
        let cli =
            Cli::try_parse_from(["x", "--metrics-listen", "0.0.0.0:1234", "--no-metrics"]).unwrap();
        assert_eq!(cli.metrics.metrics_listen, "0.0.0.0:1234".parse().unwrap());
        assert!(cli.metrics.no_metrics);
        assert_eq!(
            cli.metrics.start().unwrap(),
            None,
            "disabled: nothing served"
        );
        let e = Cli::try_parse_from(["x", "--metrics-listen", "nope"]).unwrap_err();
        assert!(e.to_string().contains("--metrics-listen"), "{e}");
        let help = Cli::try_parse_from(["x", "--help"])
            .unwrap_err()
            .to_string();
        assert!(help.contains("SERVICE_KIT_TEST_METRICS_LISTEN"), "{help}");
    }
}
