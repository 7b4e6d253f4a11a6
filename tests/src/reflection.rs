//! Asking a server's reflection service what it serves, as grpcurl does.

use crate::channel;
use std::net::SocketAddr;
use tokio_stream::StreamExt;

/// The services a server lists over reflection v1alpha (what grpcurl 1.8.6
/// speaks), sorted.
pub async fn listed_services(addr: SocketAddr) -> Vec<String> {
    use tonic_reflection::pb::v1alpha::ServerReflectionRequest;
    use tonic_reflection::pb::v1alpha::server_reflection_client::ServerReflectionClient;
    use tonic_reflection::pb::v1alpha::server_reflection_request::MessageRequest;
    use tonic_reflection::pb::v1alpha::server_reflection_response::MessageResponse;
    let mut client = ServerReflectionClient::new(channel(addr).await);
    let request = ServerReflectionRequest {
        host: String::new(),
        message_request: Some(MessageRequest::ListServices(String::new())),
    };
    let mut replies = client
        .server_reflection_info(tokio_stream::iter([request]))
        .await
        .expect("reflection")
        .into_inner();
    let reply = replies.next().await.expect("one reply").expect("ok reply");
    match reply.message_response {
        Some(MessageResponse::ListServicesResponse(list)) => {
            let mut names: Vec<_> = list.service.into_iter().map(|s| s.name).collect();
            names.sort();
            names
        }
        other => panic!("unexpected reflection reply {other:?}"),
    }
}

/// Whether reflection v1 returns the file defining `symbol`.
pub async fn describes(addr: SocketAddr, symbol: &str) -> bool {
    use tonic_reflection::pb::v1::ServerReflectionRequest;
    use tonic_reflection::pb::v1::server_reflection_client::ServerReflectionClient;
    use tonic_reflection::pb::v1::server_reflection_request::MessageRequest;
    use tonic_reflection::pb::v1::server_reflection_response::MessageResponse;
    let mut client = ServerReflectionClient::new(channel(addr).await);
    let request = ServerReflectionRequest {
        host: String::new(),
        message_request: Some(MessageRequest::FileContainingSymbol(symbol.into())),
    };
    let mut replies = client
        .server_reflection_info(tokio_stream::iter([request]))
        .await
        .expect("reflection")
        .into_inner();
    let reply = replies.next().await.expect("one reply").expect("ok reply");
    matches!(reply.message_response, Some(MessageResponse::FileDescriptorResponse(f)) if !f.file_descriptor_proto.is_empty())
}
