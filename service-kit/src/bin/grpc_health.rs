//! `grpc-health <addr> [service]`: asks a server's `grpc.health.v1` whether
//! it is SERVING and exits 0 if so, 1 otherwise. Used as the container
//! healthcheck, so the runtime image needs no shell or extra tools.

use std::process::ExitCode;
use std::time::Duration;
use tonic_health::pb::health_check_response::ServingStatus;
use tonic_health::pb::{HealthCheckRequest, health_client::HealthClient};

#[tokio::main(flavor = "current_thread")]
async fn main() -> ExitCode {
    let mut args = std::env::args().skip(1);
    let Some(addr) = args.next() else {
        eprintln!("usage: grpc-health <host:port> [service]");
        return ExitCode::FAILURE;
    };
    let service = args.next().unwrap_or_default();
    let url = if addr.contains("://") {
        addr
    } else {
        format!("http://{addr}")
    };
    match check(&url, service).await {
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

async fn check(url: &str, service: String) -> Result<ServingStatus, Box<dyn std::error::Error>> {
    let channel = tonic::transport::Endpoint::from_shared(url.to_owned())?
        .connect_timeout(Duration::from_secs(2))
        .timeout(Duration::from_secs(2))
        .connect()
        .await?;
    let reply = HealthClient::new(channel)
        .check(HealthCheckRequest { service })
        .await?;
    Ok(reply.into_inner().status())
}
