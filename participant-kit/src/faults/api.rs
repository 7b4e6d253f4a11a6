//! `faults.v1.FaultService`: the admin API that reads and changes a
//! participant's fault settings at run time.

use super::{FaultSettings, Faults};
use saga_proto::faults::v1 as pb;
use saga_proto::faults::v1::fault_service_server::FaultServiceServer;
use service_kit::auth::TokenAuth;
use service_kit::server::ServeOptions;
use std::sync::Arc;
use tonic::server::NamedService;
use tonic::{Request, Response, Status};

/// Full name of the admin service, for reflection's `served` list.
pub const SERVICE_NAME: &str = <FaultServiceServer<FaultApi> as NamedService>::NAME;

impl From<pb::FaultSettings> for FaultSettings {
    fn from(s: pb::FaultSettings) -> Self {
        FaultSettings {
            transient_error_rate: s.transient_error_rate,
            added_latency_ms: s.added_latency_ms,
            drop_reply_rate: s.drop_reply_rate,
            refusal_rate: s.refusal_rate,
            seed: s.seed,
        }
    }
}

impl From<FaultSettings> for pb::FaultSettings {
    fn from(s: FaultSettings) -> Self {
        pb::FaultSettings {
            transient_error_rate: s.transient_error_rate,
            added_latency_ms: s.added_latency_ms,
            drop_reply_rate: s.drop_reply_rate,
            refusal_rate: s.refusal_rate,
            seed: s.seed,
        }
    }
}

/// `faults.v1.FaultService` over a participant's [`Faults`].
pub struct FaultApi {
    faults: Arc<Faults>,
    admin: TokenAuth,
}

impl FaultApi {
    /// Open to every caller (no admin token).
    pub fn new(faults: Arc<Faults>) -> Self {
        Self::with_admin(faults, TokenAuth::open())
    }

    /// Both RPCs require the admin token when `admin` has one.
    pub fn with_admin(faults: Arc<Faults>, admin: TokenAuth) -> Self {
        FaultApi { faults, admin }
    }

    /// Who may read or change faults: the admin token's holders (everyone
    /// when none is configured). Checked first, so a refused call reads and
    /// changes nothing.
    fn authorize<T>(&self, request: &Request<T>) -> Result<(), Status> {
        self.admin.check(request.metadata())
    }
}

/// The admin service guarded by `options.admin`, accepting requests of at
/// most `options.max_request_bytes`.
pub fn service_with(faults: Arc<Faults>, options: &ServeOptions) -> FaultServiceServer<FaultApi> {
    FaultServiceServer::new(FaultApi::with_admin(faults, options.admin.clone()))
        .max_decoding_message_size(options.max_request_bytes)
}

#[tonic::async_trait]
impl pb::fault_service_server::FaultService for FaultApi {
    async fn set_faults(
        &self,
        request: Request<pb::FaultSettings>,
    ) -> Result<Response<pb::FaultStatus>, Status> {
        self.authorize(&request)?;
        let settings = FaultSettings::from(request.into_inner());
        self.faults.set(settings)?;
        if settings.is_enabled() {
            tracing::warn!(%settings, "fault injection ON (set at run time)");
        } else {
            tracing::info!(%settings, "fault injection off (set at run time)");
        }
        Ok(Response::new(status(&self.faults)))
    }

    async fn get_faults(
        &self,
        request: Request<pb::GetFaultsRequest>,
    ) -> Result<Response<pb::FaultStatus>, Status> {
        self.authorize(&request)?;
        Ok(Response::new(status(&self.faults)))
    }
}

/// Settings and counters as the wire reply.
fn status(faults: &Faults) -> pb::FaultStatus {
    let c = faults.counters();
    pb::FaultStatus {
        settings: Some(faults.settings().into()),
        transient_errors: c.transient_errors,
        dropped_replies: c.dropped_replies,
        refusals: c.refusals,
        delayed_calls: c.delayed_calls,
    }
}
