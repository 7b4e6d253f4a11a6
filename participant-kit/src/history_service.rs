//! `participant.v1.OperationHistoryService`: what a participant recorded
//! under one request id, written once and served by every participant.
//!
//! Why it exists: a saga's steps leave their trace at the participants (the
//! action's record, its compensation's, a blocked action, inventory's order
//! lines), and a person following a saga — through the orchestrator's
//! console or with grpcurl — needs to see it without reading a database.
//! The orchestrator knows each step's request id, so the read is by request
//! id, served by the unique key every backend already has:
//! `(request_id, kind)` for the operationHistory, `(request_id, line_index)`
//! for inventory's lines.
//!
//! A participant provides the read through [`OperationLog`], which its store
//! trait extends; [`Kit::serve`](crate::Kit::serve) serves this service over
//! it. Like the other reads it is never faulted and needs the service or the
//! admin token once either is configured ([`Kit::read`](crate::Kit::read)).

use crate::outcome::ParticipantError;
use crate::pipeline::Kit;
use crate::record::LoggedOperation;
use crate::wire;
use async_trait::async_trait;
use saga_proto::participant::v1 as pb;
use saga_proto::participant::v1::operation_history_service_server::{
    OperationHistoryService, OperationHistoryServiceServer,
};
use service_kit::validate;
use std::sync::Arc;
use tonic::{Request, Response, Status};

/// Name of the service, as reflection and health list it.
pub const SERVICE_NAME: &str =
    <OperationHistoryServiceServer<HistoryApi> as tonic::server::NamedService>::NAME;

/// What a participant's store lists for one request id.
#[async_trait]
pub trait OperationLog: Send + Sync + 'static {
    /// Every operation recorded under `request_id`, oldest first: its
    /// operationHistory records (see `sqlite::records_of` /
    /// `mongo::records_of`), then any order lines the participant recorded
    /// under it. Empty for an unknown request id.
    async fn operations(
        &self,
        request_id: String,
    ) -> Result<Vec<LoggedOperation>, ParticipantError>;
}

/// Implements `OperationHistoryService` over an [`OperationLog`].
pub struct HistoryApi {
    log: Arc<dyn OperationLog>,
    kit: Kit,
}

impl HistoryApi {
    /// The service over `log`, guarded as `kit`'s reads are.
    pub fn new(log: Arc<dyn OperationLog>, kit: Kit) -> Self {
        HistoryApi { log, kit }
    }
}

/// The service, ready to add to a participant's routes.
pub fn service(log: Arc<dyn OperationLog>, kit: &Kit) -> OperationHistoryServiceServer<HistoryApi> {
    OperationHistoryServiceServer::new(HistoryApi::new(log, kit.clone()))
        .max_decoding_message_size(kit.max_request_bytes())
}

#[tonic::async_trait]
impl OperationHistoryService for HistoryApi {
    async fn list_operations(
        &self,
        request: Request<pb::ListOperationsRequest>,
    ) -> Result<Response<pb::ListOperationsResponse>, Status> {
        let _timer = self.kit.read("list_operations", &request)?;
        let r = request.into_inner();
        validate::id("request_id", &r.request_id)?;
        let operations = self.log.operations(r.request_id).await?;
        Ok(Response::new(pb::ListOperationsResponse {
            operations: operations.into_iter().map(wire::logged).collect(),
        }))
    }
}
