//! Bearer-token authentication of the RPCs that must not be open to
//! everyone, for two roles:
//!
//! - **admin** ([`AdminConfig`]: `--admin-token` / `ADMIN_TOKEN`): payment
//!   `Deposit`, inventory `AddStock`, the `faults.v1.FaultService` of both
//!   participants and the orchestrator's `RetrySaga` change money, stock or
//!   behaviour outside any saga;
//! - **service** ([`ServiceConfig`]: `--service-token` / `SERVICE_TOKEN`):
//!   the saga RPCs of the participants (Charge, Refund, Deduct, Restock),
//!   which only the orchestrator may call — it sends the token with every
//!   participant call;
//! - **client** ([`ClientConfig`]: `--client-token` / `CLIENT_TOKEN`): the
//!   orchestrator's client API (CreateOrder, GetSaga, ListSagas,
//!   WatchSaga, RetrySaga) and its console; the admin token passes there too
//!   ([`TokenAuth::check_or`]).
//!
//! When a role's token is configured its RPCs require the gRPC metadata
//! `authorization: Bearer <token>` and answer UNAUTHENTICATED otherwise,
//! before anything is validated or stored. A participant's reads
//! (GetAccount, GetProduct) require either token once either is configured
//! ([`check_any`]). With no token configured every call passes: that is the
//! dev default (the one-command dev stack and most tests run that way), and
//! [`TokenAuth::log_startup`] says so with a WARN line.
//!
//! A refusal is UNAUTHENTICATED with a `google.rpc.ErrorInfo` whose reason
//! says which token was wanted (`ADMIN_TOKEN_REQUIRED`,
//! `SERVICE_TOKEN_REQUIRED`, `CLIENT_TOKEN_REQUIRED`, `READ_TOKEN_REQUIRED`,
//! domain [`AUTH_DOMAIN`]).
//!
//! Tokens are secret: [`TokenAuth`], [`AdminConfig`] and [`ServiceConfig`]
//! never print them (Debug and Display show `<redacted>`), refused calls are
//! logged without the presented value, the comparison is constant-time over
//! SHA-256 digests (so neither the content nor the length leaks through
//! timing), and an outgoing header is marked sensitive (never indexed by
//! HPACK).

use crate::errors::{AUTH_DOMAIN, ErrorReason};
use sha2::{Digest, Sha256};
use std::fmt;
use std::sync::Arc;
use subtle::ConstantTimeEq;
use tonic::metadata::{AsciiMetadataValue, MetadataMap};
use tonic::{Code, Request, Status};

/// The metadata key carrying the token.
pub const HEADER: &str = "authorization";

/// Message of every refused admin call (the same for a missing, malformed
/// or wrong token, so a caller learns nothing from it).
pub const UNAUTHENTICATED_MESSAGE: &str = "admin call needs `authorization: Bearer <token>`";

/// Message of every refused saga call to a participant.
pub const SERVICE_UNAUTHENTICATED_MESSAGE: &str =
    "saga call needs `authorization: Bearer <service token>`";

/// Message of every refused read when a token is configured.
pub const READ_UNAUTHENTICATED_MESSAGE: &str =
    "read needs `authorization: Bearer <service or admin token>`";

/// Message of every refused client call when a client token is configured.
pub const CLIENT_UNAUTHENTICATED_MESSAGE: &str =
    "call needs `authorization: Bearer <client token>` (or the admin token)";

/// ErrorInfo reason of a refused read ([`check_any`]).
pub const READ_TOKEN_REQUIRED: &str = "READ_TOKEN_REQUIRED";

/// Whose token a [`TokenAuth`] checks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Role {
    /// The admin RPCs (`--admin-token` / `ADMIN_TOKEN`).
    Admin,
    /// The participants' saga RPCs, called by the orchestrator
    /// (`--service-token` / `SERVICE_TOKEN`).
    Service,
    /// The orchestrator's client API and console (`--client-token` /
    /// `CLIENT_TOKEN`).
    Client,
}

impl Role {
    fn flag(self) -> &'static str {
        match self {
            Role::Admin => "--admin-token / ADMIN_TOKEN",
            Role::Service => "--service-token / SERVICE_TOKEN",
            Role::Client => "--client-token / CLIENT_TOKEN",
        }
    }

    fn refusal(self) -> &'static str {
        match self {
            Role::Admin => UNAUTHENTICATED_MESSAGE,
            Role::Service => SERVICE_UNAUTHENTICATED_MESSAGE,
            Role::Client => CLIENT_UNAUTHENTICATED_MESSAGE,
        }
    }

    /// The ErrorInfo reason of a call refused for want of this role's token.
    pub fn reason(self) -> &'static str {
        match self {
            Role::Admin => "ADMIN_TOKEN_REQUIRED",
            Role::Service => "SERVICE_TOKEN_REQUIRED",
            Role::Client => "CLIENT_TOKEN_REQUIRED",
        }
    }

    /// The UNAUTHENTICATED status of a call refused for want of this role's
    /// token (the same for a missing, malformed or wrong token).
    pub fn unauthenticated(self) -> Status {
        unauthenticated(self.reason(), self.refusal())
    }
}

/// UNAUTHENTICATED saying `message`, with ErrorInfo `reason` in
/// [`AUTH_DOMAIN`].
fn unauthenticated(reason: &'static str, message: &str) -> Status {
    ErrorReason::new(AUTH_DOMAIN, reason).status(Code::Unauthenticated, message)
}

/// Who may call one role's RPCs: anyone (no token configured, the dev
/// default) or only callers presenting the configured bearer token. Cheap to
/// clone; never prints the token.
#[derive(Clone)]
pub struct TokenAuth {
    role: Role,
    token: Option<Arc<Token>>,
}

struct Token {
    /// `Bearer <token>`, marked sensitive, for outgoing calls.
    header: AsciiMetadataValue,
    /// SHA-256 of the token, compared in constant time.
    digest: [u8; 32],
}

/// A token that cannot be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "{flag}: {problem} (use 1 to 512 visible ASCII characters, no spaces, e.g. `openssl rand -hex 32`)"
)]
pub struct InvalidToken {
    flag: &'static str,
    problem: &'static str,
}

fn digest(bytes: &[u8]) -> [u8; 32] {
    Sha256::digest(bytes).into()
}

impl TokenAuth {
    /// Admin RPCs open to every caller (the dev default).
    pub fn open() -> TokenAuth {
        TokenAuth::open_for(Role::Admin)
    }

    /// `role`'s RPCs open to every caller.
    pub fn open_for(role: Role) -> TokenAuth {
        TokenAuth { role, token: None }
    }

    /// Admin RPCs require `authorization: Bearer <token>`.
    pub fn with_token(token: &str) -> Result<TokenAuth, InvalidToken> {
        TokenAuth::with_token_for(Role::Admin, token)
    }

    /// `role`'s RPCs require `authorization: Bearer <token>`. The token must
    /// be 1 to 512 visible ASCII characters (what fits in a header as is).
    pub fn with_token_for(role: Role, token: &str) -> Result<TokenAuth, InvalidToken> {
        let invalid = |problem| InvalidToken {
            flag: role.flag(),
            problem,
        };
        if token.is_empty() {
            return Err(invalid("must not be empty"));
        }
        if token.len() > 512 {
            return Err(invalid("longer than 512 characters"));
        }
        if !token.bytes().all(|b| b.is_ascii_graphic()) {
            return Err(invalid(
                "must hold only visible ASCII characters (no spaces or control characters)",
            ));
        }
        let mut header = AsciiMetadataValue::try_from(format!("Bearer {token}"))
            .map_err(|_| invalid("is not a valid header value"))?;
        header.set_sensitive(true);
        Ok(TokenAuth {
            role,
            token: Some(Arc::new(Token {
                header,
                digest: digest(token.as_bytes()),
            })),
        })
    }

    /// Whose token this checks.
    pub fn role(&self) -> Role {
        self.role
    }

    /// Whether a token is configured (admin RPCs are protected).
    pub fn is_required(&self) -> bool {
        self.token.is_some()
    }

    /// Admits a call: always when no token is configured, else only with
    /// `authorization: Bearer <token>` (scheme case-insensitive);
    /// UNAUTHENTICATED otherwise. Call it first, before the request is
    /// validated or anything is stored.
    pub fn check(&self, metadata: &MetadataMap) -> Result<(), Status> {
        match self.verdict(metadata) {
            Verdict::Admitted => Ok(()),
            Verdict::Refused(reason) => {
                tracing::warn!(reason, role = ?self.role, "call refused");
                Err(self.role.unauthenticated())
            }
        }
    }

    /// Admits a call this role guards, or one presenting `also`'s
    /// configured token (the admin token wherever the client token is
    /// required): always when this role has no token; UNAUTHENTICATED
    /// with this role's reason otherwise.
    pub fn check_or(&self, also: &TokenAuth, metadata: &MetadataMap) -> Result<(), Status> {
        if also.is_required() && matches!(also.verdict(metadata), Verdict::Admitted) {
            return Ok(());
        }
        self.check(metadata)
    }

    fn verdict(&self, metadata: &MetadataMap) -> Verdict {
        let Some(token) = &self.token else {
            return Verdict::Admitted;
        };
        match presented(metadata) {
            Err(reason) => Verdict::Refused(reason),
            Ok(presented) if bool::from(digest(presented.as_bytes()).ct_eq(&token.digest)) => {
                Verdict::Admitted
            }
            Ok(_) => Verdict::Refused("wrong token"),
        }
    }

    /// Attaches the token to an outgoing admin call (no-op when none is
    /// configured), for clients of admin RPCs: dev seeding, tests, tools.
    pub fn authorize<T>(&self, request: &mut Request<T>) {
        if let Some(token) = &self.token {
            request.metadata_mut().insert(HEADER, token.header.clone());
        }
    }

    /// `request` with the token attached (see [`TokenAuth::authorize`]).
    pub fn request<T>(&self, message: T) -> Request<T> {
        let mut request = Request::new(message);
        self.authorize(&mut request);
        request
    }

    /// Logs once at start-up whether this role's RPCs are protected: WARN
    /// when they are open to every caller. Never logs the token.
    pub fn log_startup(&self, service: &str) {
        let rpcs = match self.role {
            Role::Admin => "admin RPCs",
            Role::Service => "saga RPCs",
            Role::Client => "client RPCs and the console",
        };
        if self.is_required() {
            tracing::info!(service, "{rpcs} require a bearer token");
        } else {
            tracing::warn!(
                service,
                "{rpcs} are OPEN to every caller (no {} configured); fine for dev, not for production",
                self.role.flag()
            );
        }
    }
}

/// What [`TokenAuth::verdict`] decided.
enum Verdict {
    Admitted,
    Refused(&'static str),
}

/// The token an incoming call presents, or why it presents none.
fn presented(metadata: &MetadataMap) -> Result<&str, &'static str> {
    let value = metadata
        .get(HEADER)
        .ok_or("no authorization metadata")?
        .to_str()
        .map_err(|_| "authorization metadata is not ASCII")?
        .trim();
    match value.split_once(' ') {
        Some((scheme, rest)) if scheme.eq_ignore_ascii_case("bearer") => Ok(rest.trim()),
        _ => Err("authorization metadata is not `Bearer <token>`"),
    }
}

/// Admits a read (GetAccount, GetProduct): open while no token of any
/// `guard` is configured, else only with one of their tokens.
pub fn check_any(guards: &[&TokenAuth], metadata: &MetadataMap) -> Result<(), Status> {
    let configured: Vec<&&TokenAuth> = guards.iter().filter(|g| g.is_required()).collect();
    if configured.is_empty()
        || configured
            .iter()
            .any(|g| matches!(g.verdict(metadata), Verdict::Admitted))
    {
        return Ok(());
    }
    tracing::warn!("read refused: no configured token presented");
    Err(unauthenticated(
        READ_TOKEN_REQUIRED,
        READ_UNAUTHENTICATED_MESSAGE,
    ))
}

/// Attaches the token to every call of a client:
/// `PaymentServiceClient::with_interceptor(channel, auth.clone())`.
impl tonic::service::Interceptor for TokenAuth {
    fn call(&mut self, mut request: Request<()>) -> Result<Request<()>, Status> {
        self.authorize(&mut request);
        Ok(request)
    }
}

impl fmt::Debug for TokenAuth {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TokenAuth")
            .field("role", &self.role)
            .field("token", &self.token.as_ref().map(|_| "<redacted>"))
            .finish()
    }
}

impl fmt::Display for TokenAuth {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(if self.is_required() {
            "bearer token required"
        } else {
            "open (no token configured)"
        })
    }
}

/// Admin authentication flags; `#[command(flatten)]` it into a service's
/// clap config. Prefer the environment variable over the flag: command
/// lines are visible to every local user (`ps`).
#[derive(Clone, Default, PartialEq, Eq, clap::Args)]
#[command(next_help_heading = "Admin authentication")]
pub struct AdminConfig {
    /// Bearer token the admin RPCs (Deposit, AddStock, fault injection,
    /// RetrySaga) require as `authorization: Bearer <token>`. Unset: they
    /// are open to every caller (dev default).
    #[arg(long, env = "ADMIN_TOKEN", hide_env_values = true)]
    pub admin_token: Option<String>,
}

impl AdminConfig {
    /// The configured policy (a bad token is a start-up error).
    pub fn build(&self) -> Result<TokenAuth, InvalidToken> {
        build(Role::Admin, self.admin_token.as_deref())
    }
}

fn build(role: Role, token: Option<&str>) -> Result<TokenAuth, InvalidToken> {
    match token {
        Some(token) => TokenAuth::with_token_for(role, token),
        None => Ok(TokenAuth::open_for(role)),
    }
}

/// Service authentication flags: the token the participants' saga RPCs
/// require, and that the orchestrator sends. Prefer the environment
/// variable over the flag: command lines are visible to every local user.
#[derive(Clone, Default, PartialEq, Eq, clap::Args)]
#[command(next_help_heading = "Service authentication")]
pub struct ServiceConfig {
    /// Bearer token of the participants' saga RPCs (Charge, Refund, Deduct,
    /// Restock): participants require it as `authorization: Bearer
    /// <token>`, the orchestrator sends it. Unset: open (dev default).
    #[arg(long, env = "SERVICE_TOKEN", hide_env_values = true)]
    pub service_token: Option<String>,
}

impl ServiceConfig {
    /// The configured policy (a bad token is a start-up error).
    pub fn build(&self) -> Result<TokenAuth, InvalidToken> {
        build(Role::Service, self.service_token.as_deref())
    }
}

/// Client authentication flags: the token the orchestrator's client API
/// (CreateOrder, GetSaga, ListSagas, WatchSaga, RetrySaga) and its console
/// require.
/// Only `orchestrator serve` has them: the dev stack stays open. Prefer the
/// environment variable over the flag: command lines are visible to every
/// local user.
#[derive(Clone, Default, PartialEq, Eq, clap::Args)]
#[command(next_help_heading = "Client authentication")]
pub struct ClientConfig {
    /// Bearer token of the client API and the console: callers send
    /// `authorization: Bearer <token>` (the admin token passes too). Unset:
    /// open to every caller.
    #[arg(long, env = "CLIENT_TOKEN", hide_env_values = true)]
    pub client_token: Option<String>,
}

impl ClientConfig {
    /// The configured policy (a bad token is a start-up error).
    pub fn build(&self) -> Result<TokenAuth, InvalidToken> {
        build(Role::Client, self.client_token.as_deref())
    }
}

impl fmt::Debug for ClientConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ClientConfig")
            .field(
                "client_token",
                &self.client_token.as_ref().map(|_| "<redacted>"),
            )
            .finish()
    }
}

impl fmt::Debug for ServiceConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ServiceConfig")
            .field(
                "service_token",
                &self.service_token.as_ref().map(|_| "<redacted>"),
            )
            .finish()
    }
}

impl fmt::Debug for AdminConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("AdminConfig")
            .field(
                "admin_token",
                &self.admin_token.as_ref().map(|_| "<redacted>"),
            )
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;
    use tonic::Code;

    const TOKEN: &str = "s3cr3t-token-value";

    fn metadata(value: Option<&str>) -> MetadataMap {
        let mut m = MetadataMap::new();
        if let Some(v) = value {
            m.insert(HEADER, v.parse().unwrap());
        }
        m
    }

    #[test]
    fn open_admits_everything() {
        let auth = TokenAuth::open();
        assert!(!auth.is_required());
        assert!(auth.check(&metadata(None)).is_ok());
        assert!(auth.check(&metadata(Some("Bearer whatever"))).is_ok());
        let mut request = Request::new(());
        auth.authorize(&mut request);
        assert!(request.metadata().get(HEADER).is_none());
    }

    #[test]
    fn token_is_required_and_compared() {
        let auth = TokenAuth::with_token(TOKEN).unwrap();
        assert!(auth.is_required());
        for bad in [
            None,
            Some("Bearer wrong"),
            Some("Bearer s3cr3t-token-valu"),
            Some("Bearer s3cr3t-token-valuee"),
            Some("Basic s3cr3t-token-value"),
            Some(TOKEN),
            Some("Bearer"),
            Some("Bearer "),
        ] {
            let status = auth.check(&metadata(bad)).unwrap_err();
            assert_eq!(status.code(), Code::Unauthenticated, "{bad:?}");
            assert_eq!(status.message(), UNAUTHENTICATED_MESSAGE);
            assert_eq!(
                crate::errors::reason_of(&status),
                Some((AUTH_DOMAIN.into(), "ADMIN_TOKEN_REQUIRED".into()))
            );
            assert!(!status.message().contains(TOKEN));
        }
        for good in [
            "Bearer s3cr3t-token-value",
            "bearer s3cr3t-token-value",
            "BEARER  s3cr3t-token-value ",
        ] {
            assert!(auth.check(&metadata(Some(good))).is_ok(), "{good:?}");
        }
    }

    #[test]
    fn authorize_attaches_a_sensitive_header_the_check_accepts() {
        let auth = TokenAuth::with_token(TOKEN).unwrap();
        let request = auth.request(());
        let value = request.metadata().get(HEADER).unwrap();
        assert!(value.is_sensitive());
        assert_eq!(value.to_str().unwrap(), format!("Bearer {TOKEN}"));
        assert!(auth.check(request.metadata()).is_ok());
        let other = TokenAuth::with_token("another").unwrap();
        assert!(other.check(request.metadata()).is_err());
        // The interceptor does the same.
        let mut interceptor = auth.clone();
        let intercepted =
            tonic::service::Interceptor::call(&mut interceptor, Request::new(())).unwrap();
        assert!(auth.check(intercepted.metadata()).is_ok());
    }

    #[test]
    fn reads_need_either_token_once_one_is_configured() {
        let admin = TokenAuth::with_token(TOKEN).unwrap();
        let service = TokenAuth::with_token_for(Role::Service, "svc-token").unwrap();
        let open_admin = TokenAuth::open();
        let open_service = TokenAuth::open_for(Role::Service);
        assert!(check_any(&[&open_service, &open_admin], &metadata(None)).is_ok());
        for guards in [
            [&service, &admin],
            [&service, &open_admin],
            [&open_service, &admin],
        ] {
            let refused = check_any(&guards, &metadata(None)).unwrap_err();
            assert_eq!(refused.code(), Code::Unauthenticated);
            assert_eq!(refused.message(), READ_UNAUTHENTICATED_MESSAGE);
            assert_eq!(
                crate::errors::reason_of(&refused),
                Some((AUTH_DOMAIN.into(), READ_TOKEN_REQUIRED.into()))
            );
        }
        let with_service = metadata(Some("Bearer svc-token"));
        let with_admin = metadata(Some(&format!("Bearer {TOKEN}")));
        assert!(check_any(&[&service, &admin], &with_service).is_ok());
        assert!(check_any(&[&service, &admin], &with_admin).is_ok());
        assert!(check_any(&[&service, &open_admin], &with_admin).is_err());
        let refused = service.check(&with_admin).unwrap_err();
        assert_eq!(refused.message(), SERVICE_UNAUTHENTICATED_MESSAGE);
        assert_eq!(
            crate::errors::reason_of(&refused),
            Some((AUTH_DOMAIN.into(), "SERVICE_TOKEN_REQUIRED".into()))
        );
    }

    #[test]
    fn the_client_token_or_the_admin_token_passes_where_the_client_token_is_required() {
        let client = TokenAuth::with_token_for(Role::Client, "client-token").unwrap();
        let admin = TokenAuth::with_token(TOKEN).unwrap();
        let open_client = TokenAuth::open_for(Role::Client);
        let with_client = metadata(Some("Bearer client-token"));
        let with_admin = metadata(Some(&format!("Bearer {TOKEN}")));
        assert!(client.check_or(&admin, &with_client).is_ok());
        assert!(client.check_or(&admin, &with_admin).is_ok());
        for bad in [None, Some("Bearer wrong"), Some("client-token")] {
            let refused = client.check_or(&admin, &metadata(bad)).unwrap_err();
            assert_eq!(refused.code(), Code::Unauthenticated);
            assert_eq!(refused.message(), CLIENT_UNAUTHENTICATED_MESSAGE);
            assert_eq!(
                crate::errors::reason_of(&refused),
                Some((AUTH_DOMAIN.into(), "CLIENT_TOKEN_REQUIRED".into()))
            );
        }
        // No client token: open, whatever the admin token.
        assert!(open_client.check_or(&admin, &metadata(None)).is_ok());
        // No admin token: only the client token passes.
        assert!(client.check_or(&TokenAuth::open(), &with_admin).is_err());
    }

    #[test]
    fn unusable_tokens_are_refused() {
        for bad in ["", "has space", "tab\there", "ünïcode", &"x".repeat(513)] {
            let e = TokenAuth::with_token(bad).unwrap_err();
            assert!(e.to_string().contains("--admin-token"), "{e}");
        }
        assert!(TokenAuth::with_token(&"x".repeat(512)).is_ok());
        let e = TokenAuth::with_token_for(Role::Service, "").unwrap_err();
        assert!(e.to_string().contains("--service-token"), "{e}");
        let e = TokenAuth::with_token_for(Role::Client, "a b").unwrap_err();
        assert!(e.to_string().contains("--client-token"), "{e}");
    }

    #[derive(Debug, clap::Parser)]
    struct Cli {
        #[command(flatten)]
        admin: AdminConfig,
        #[command(flatten)]
        client: ClientConfig,
    }

    #[test]
    fn debug_and_display_never_print_the_token() {
        let cli =
            Cli::try_parse_from(["x", "--admin-token", TOKEN, "--client-token", TOKEN]).unwrap();
        let auth = cli.admin.build().unwrap();
        let client = cli.client.build().unwrap();
        assert_eq!(client.role(), Role::Client);
        for shown in [
            format!("{cli:?}"),
            format!("{client:?}"),
            format!("{:?}", cli.admin),
            format!("{auth:?}"),
            format!("{auth}"),
            format!("{:?}", auth.request(())),
        ] {
            assert!(!shown.contains(TOKEN), "{shown}");
        }
        assert!(format!("{auth:?}").contains("<redacted>"));
        let open = Cli::try_parse_from(["x"]).unwrap().admin.build().unwrap();
        assert!(!open.is_required());
        assert_eq!(open.to_string(), "open (no token configured)");
    }
}
