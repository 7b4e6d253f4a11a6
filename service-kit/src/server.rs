//! gRPC server start-up shared by the three services: every server gets
//! reflection (v1 and v1alpha — grpcurl 1.8.6 only speaks v1alpha) and
//! `grpc.health.v1`, and stops serving when the [`Shutdown`] fires.

use crate::shutdown::Shutdown;
use std::net::SocketAddr;
use tokio::net::TcpListener;
use tokio_stream::wrappers::TcpListenerStream;
use tonic::server::NamedService;
use tonic::service::Routes;

/// Why a server could not start or stopped with an error.
#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    #[error("binding {addr}: {source}")]
    Bind {
        addr: SocketAddr,
        #[source]
        source: std::io::Error,
    },
    #[error("reflection: {0}")]
    Reflection(#[from] tonic_reflection::server::Error),
    #[error("transport: {0}")]
    Transport(#[from] tonic::transport::Error),
}

/// Binds `addr` (port 0 picks a free port; read it back with `local_addr`).
pub async fn bind(addr: SocketAddr) -> Result<TcpListener, ServeError> {
    TcpListener::bind(addr)
        .await
        .map_err(|source| ServeError::Bind { addr, source })
}

/// Adds reflection and health to `routes` and marks service `S` as serving.
/// Reflection advertises `S`, the other `served` services and health — not
/// every service in the shared descriptor set.
pub async fn with_standard_services<S: NamedService>(
    routes: Routes,
    served: &[&str],
) -> Result<Routes, ServeError> {
    let reflection = || {
        let mut builder = tonic_reflection::server::Builder::configure()
            .register_encoded_file_descriptor_set(saga_proto::FILE_DESCRIPTOR_SET)
            .register_encoded_file_descriptor_set(tonic_health::pb::FILE_DESCRIPTOR_SET)
            .with_service_name(S::NAME)
            .with_service_name("grpc.health.v1.Health");
        for name in served {
            builder = builder.with_service_name(*name);
        }
        builder
    };
    let (reporter, health) = tonic_health::server::health_reporter();
    reporter.set_serving::<S>().await;
    Ok(routes
        .add_service(health)
        .add_service(reflection().build_v1()?)
        .add_service(reflection().build_v1alpha()?))
}

/// Serves `routes` on `listener` until `shutdown` fires; in-flight calls are
/// allowed to finish.
pub async fn serve(
    routes: Routes,
    listener: TcpListener,
    shutdown: Shutdown,
) -> Result<(), ServeError> {
    tonic::transport::Server::builder()
        .add_routes(routes)
        .serve_with_incoming_shutdown(TcpListenerStream::new(listener), async move {
            shutdown.wait().await
        })
        .await?;
    Ok(())
}
