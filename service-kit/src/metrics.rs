//! Prometheus metrics over HTTP.
//!
//! Code records through the `metrics` facade (`metrics::counter!` …) — a
//! no-op until [`serve_metrics`] installs the Prometheus recorder, which also
//! serves `GET /metrics` on its own port. One recorder per process: the dev
//! command, which runs all three services in one process, serves them all on
//! one endpoint.

use std::net::SocketAddr;

/// Why the exporter could not start.
#[derive(Debug, thiserror::Error)]
#[error("metrics exporter on {addr}: {message}")]
pub struct MetricsError {
    addr: SocketAddr,
    message: String,
}

/// Installs the process-wide Prometheus recorder and serves it on `addr`
/// (`http://<addr>/metrics`). Must be called from inside a tokio runtime.
pub fn serve_metrics(addr: SocketAddr) -> Result<(), MetricsError> {
    metrics_exporter_prometheus::PrometheusBuilder::new()
        .with_http_listener(addr)
        .set_buckets(&[
            0.0002, 0.0005, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1.0, 2.0, 5.0,
        ])
        .and_then(|b| b.install())
        .map_err(|e| MetricsError {
            addr,
            message: e.to_string(),
        })?;
    tracing::info!(url = %format!("http://{addr}/metrics"), "serving Prometheus metrics");
    Ok(())
}
