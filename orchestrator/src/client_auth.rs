//! Who may call the orchestrator's client API — CreateOrder, GetSaga,
//! ListSagas, WatchSaga, RetrySaga — and read its console: anyone when no
//! client token is configured (the dev stack, most tests), else a caller
//! presenting `authorization: Bearer <client token>` or the admin token.
//!
//! Why a token of its own: the service token lets its holder move money
//! in the participants, the admin token retries sagas; a dashboard or an
//! order front end needs neither, and is given only this one. RetrySaga
//! still needs the admin token on top when one is configured.
//!
//! Every refused call is UNAUTHENTICATED with a `google.rpc.ErrorInfo`
//! (`CLIENT_TOKEN_REQUIRED`, or `ADMIN_TOKEN_REQUIRED` for RetrySaga, in
//! `service_kit::errors::AUTH_DOMAIN`) and counted in
//! `saga_unauthenticated_total{rpc}` — `rpc` is the gRPC method in
//! snake case, or `console` for the console's API.

use service_kit::auth::{Role, TokenAuth};
use tonic::Status;
use tonic::metadata::MetadataMap;

/// The metric counting refused calls.
pub const UNAUTHENTICATED_TOTAL: &str = "saga_unauthenticated_total";

/// The `rpc` label of the console's refused requests.
pub const CONSOLE: &str = "console";

/// The client and admin tokens the API checks. Cheap to clone.
#[derive(Clone, Debug)]
pub struct ClientGuard {
    client: TokenAuth,
    admin: TokenAuth,
}

impl ClientGuard {
    /// Calls need `client`'s token (or `admin`'s, when configured); RetrySaga
    /// needs `admin`'s when configured.
    pub fn new(client: TokenAuth, admin: TokenAuth) -> Self {
        ClientGuard { client, admin }
    }

    /// Everything open (no client nor admin token).
    pub fn open() -> Self {
        ClientGuard::new(TokenAuth::open_for(Role::Client), TokenAuth::open())
    }

    /// Whether a client token is configured.
    pub fn is_required(&self) -> bool {
        self.client.is_required()
    }

    /// Admits a call of `rpc` presenting the client (or admin) token;
    /// counts a refusal.
    pub fn check(&self, rpc: &'static str, metadata: &MetadataMap) -> Result<(), Status> {
        counted(rpc, self.client.check_or(&self.admin, metadata))
    }

    /// Admits an admin call of `rpc` (RetrySaga): the client check, then
    /// the admin token's when one is configured; counts a refusal.
    pub fn check_admin(&self, rpc: &'static str, metadata: &MetadataMap) -> Result<(), Status> {
        self.check(rpc, metadata)?;
        counted(rpc, self.admin.check(metadata))
    }
}

fn counted(rpc: &'static str, check: Result<(), Status>) -> Result<(), Status> {
    if check.is_err() {
        metrics::counter!(UNAUTHENTICATED_TOTAL, "rpc" => rpc).increment(1);
    }
    check
}

/// Gives [`UNAUTHENTICATED_TOTAL`] its `# HELP` text (once the recorder is
/// installed; counting works without it).
pub fn describe() {
    metrics::describe_counter!(
        UNAUTHENTICATED_TOTAL,
        "Client API calls and console requests refused with UNAUTHENTICATED (missing or wrong client or admin token), by RPC (`console` for the console)."
    );
}

#[cfg(test)]
mod tests {
    use super::*;
    use service_kit::errors::{AUTH_DOMAIN, reason_of};

    fn metadata(value: Option<&str>) -> MetadataMap {
        let mut m = MetadataMap::new();
        if let Some(v) = value {
            m.insert("authorization", v.parse().unwrap());
        }
        m
    }

    #[test]
    fn the_client_token_opens_the_api_and_retry_also_needs_the_admin_token() {
        let client = TokenAuth::with_token_for(Role::Client, "client-token-0123").unwrap();
        let admin = TokenAuth::with_token("admin-token-0123").unwrap();
        let guard = ClientGuard::new(client.clone(), admin.clone());
        let as_client = metadata(Some("Bearer client-token-0123"));
        let as_admin = metadata(Some("Bearer admin-token-0123"));
        assert!(guard.check("get_saga", &as_client).is_ok());
        assert!(guard.check("get_saga", &as_admin).is_ok());
        assert!(guard.check_admin("retry_saga", &as_admin).is_ok());
        let retry = guard.check_admin("retry_saga", &as_client).unwrap_err();
        assert_eq!(
            reason_of(&retry),
            Some((AUTH_DOMAIN.into(), "ADMIN_TOKEN_REQUIRED".into()))
        );
        for bad in [None, Some("Bearer nope"), Some("client-token-0123")] {
            let refused = guard.check("list_sagas", &metadata(bad)).unwrap_err();
            assert_eq!(refused.code(), tonic::Code::Unauthenticated);
            assert_eq!(
                reason_of(&refused),
                Some((AUTH_DOMAIN.into(), "CLIENT_TOKEN_REQUIRED".into()))
            );
        }
        // No client token: the API is open; RetrySaga only needs the admin's.
        let open_client = ClientGuard::new(TokenAuth::open_for(Role::Client), admin);
        assert!(!open_client.is_required());
        assert!(open_client.check("create_order", &metadata(None)).is_ok());
        assert!(
            open_client
                .check_admin("retry_saga", &metadata(None))
                .is_err()
        );
        assert!(
            ClientGuard::open()
                .check_admin("retry_saga", &metadata(None))
                .is_ok()
        );
    }
}
