//! `grpc-health <addr> [service]`: asks a server's `grpc.health.v1` whether
//! it is SERVING and exits 0 if so, 1 otherwise. Used as the container
//! healthcheck and as Kubernetes' exec probe, so the runtime image needs no
//! shell or extra tools. The service name says which answer
//! ([`service_kit::health`]): `""` (the default) is readiness — NOT_SERVING
//! until the store is open and again from SIGTERM on, what compose's
//! `service_healthy` and a readiness probe want — and `liveness` is
//! SERVING as long as the server answers, what a liveness probe wants.
//!
//! It reads the same TLS settings as the services (`--tls-ca`/`TLS_CA`,
//! `--tls-cert`/`TLS_CERT`, …), so in a container whose service serves TLS
//! it probes over TLS too: an address without a scheme becomes `https://`
//! when a certificate or CA is configured, and the server is verified
//! against `TLS_CA` (its certificate must name the probed host, e.g.
//! 127.0.0.1).

use clap::Parser;
use service_kit::tls::{TlsConfig, client_endpoint, error_chain};
use std::process::ExitCode;
use std::time::Duration;
use tonic_health::pb::health_check_response::ServingStatus;
use tonic_health::pb::{HealthCheckRequest, health_client::HealthClient};

#[derive(Debug, clap::Parser)]
#[command(
    name = "grpc-health",
    about = "Exit 0 when a gRPC server's grpc.health.v1 says SERVING"
)]
struct Args {
    /// `host:port`, `http://host:port` or `https://host:port`.
    addr: String,
    /// Service to ask about: empty (the server as a whole) for readiness,
    /// `liveness` for liveness, or a served service's full name.
    #[arg(default_value = "")]
    service: String,
    #[command(flatten)]
    tls: TlsConfig,
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> ExitCode {
    let args = Args::parse();
    let tls_configured = args.tls.server_enabled() || args.tls.tls_ca.is_some();
    let url = if args.addr.contains("://") {
        args.addr.clone()
    } else if tls_configured {
        format!("https://{}", args.addr)
    } else {
        format!("http://{}", args.addr)
    };
    match check(&url, &args.tls, args.service).await {
        Ok(ServingStatus::Serving) => ExitCode::SUCCESS,
        Ok(status) => {
            eprintln!("{url}: {status:?}");
            ExitCode::FAILURE
        }
        Err(error) => {
            eprintln!("{url}: {error}");
            ExitCode::FAILURE
        }
    }
}

async fn check(url: &str, tls: &TlsConfig, service: String) -> Result<ServingStatus, String> {
    let channel = client_endpoint(url, tls)
        .map_err(|e| e.to_string())?
        .connect_timeout(Duration::from_secs(2))
        .timeout(Duration::from_secs(2))
        .connect()
        .await
        .map_err(|e| error_chain(&e))?;
    let reply = HealthClient::new(channel)
        .check(HealthCheckRequest { service })
        .await
        .map_err(|s| s.to_string())?;
    Ok(reply.into_inner().status())
}
