//! Admin authentication: a shared bearer token for the admin RPCs.
//!
//! The admin RPCs — payment `Deposit`, inventory `AddStock`, the
//! `faults.v1.FaultService` of both participants and the orchestrator's
//! `RetrySaga` — change money, stock or behaviour outside any saga, so when a
//! token is configured ([`AdminConfig`]: `--admin-token` / `ADMIN_TOKEN`)
//! they require the gRPC metadata `authorization: Bearer <token>` and answer
//! UNAUTHENTICATED otherwise, before anything is validated or stored. The
//! saga RPCs (Charge, Refund, Deduct, Restock, CreateOrder, reads) never need
//! it.
//!
//! With no token configured every call passes: that is the dev default (the
//! one-command dev stack and the tests run that way), and
//! [`AdminAuth::log_startup`] says so with a WARN line.
//!
//! The token is secret: [`AdminAuth`] and [`AdminConfig`] never print it
//! (Debug and Display show `<redacted>`), refused calls are logged without
//! the presented value, the comparison is constant-time over SHA-256 digests
//! (so neither the content nor the length leaks through timing), and an
//! outgoing header is marked sensitive (never indexed by HPACK).

use sha2::{Digest, Sha256};
use std::fmt;
use std::sync::Arc;
use subtle::ConstantTimeEq;
use tonic::metadata::{AsciiMetadataValue, MetadataMap};
use tonic::{Request, Status};

/// The metadata key carrying the token.
pub const HEADER: &str = "authorization";

/// Message of every refused admin call (the same for a missing, malformed
/// or wrong token, so a caller learns nothing from it).
pub const UNAUTHENTICATED_MESSAGE: &str = "admin call needs `authorization: Bearer <token>`";

/// Who may call the admin RPCs: anyone (no token configured, the dev
/// default) or only callers presenting the configured bearer token. Cheap to
/// clone; never prints the token.
#[derive(Clone, Default)]
pub struct AdminAuth {
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
    "--admin-token / ADMIN_TOKEN: {0} (use 1 to 512 visible ASCII characters, no spaces, e.g. `openssl rand -hex 32`)"
)]
pub struct InvalidToken(&'static str);

fn digest(bytes: &[u8]) -> [u8; 32] {
    Sha256::digest(bytes).into()
}

impl AdminAuth {
    /// Admin RPCs are open to every caller (the dev default).
    pub fn open() -> AdminAuth {
        AdminAuth { token: None }
    }

    /// Admin RPCs require `authorization: Bearer <token>`. The token must be
    /// 1 to 512 visible ASCII characters (what fits in a header as is).
    pub fn with_token(token: &str) -> Result<AdminAuth, InvalidToken> {
        if token.is_empty() {
            return Err(InvalidToken("must not be empty"));
        }
        if token.len() > 512 {
            return Err(InvalidToken("longer than 512 characters"));
        }
        if !token.bytes().all(|b| b.is_ascii_graphic()) {
            return Err(InvalidToken(
                "must hold only visible ASCII characters (no spaces or control characters)",
            ));
        }
        let mut header = AsciiMetadataValue::try_from(format!("Bearer {token}"))
            .map_err(|_| InvalidToken("is not a valid header value"))?;
        header.set_sensitive(true);
        Ok(AdminAuth {
            token: Some(Arc::new(Token {
                header,
                digest: digest(token.as_bytes()),
            })),
        })
    }

    /// Whether a token is configured (admin RPCs are protected).
    pub fn is_required(&self) -> bool {
        self.token.is_some()
    }

    /// Admits an admin call: always when no token is configured, else only
    /// with `authorization: Bearer <token>` (scheme case-insensitive);
    /// UNAUTHENTICATED otherwise. Call it first, before the request is
    /// validated or anything is stored.
    pub fn check(&self, metadata: &MetadataMap) -> Result<(), Status> {
        let Some(token) = &self.token else {
            return Ok(());
        };
        let refused = |reason: &'static str| {
            tracing::warn!(reason, "admin call refused");
            Err(Status::unauthenticated(UNAUTHENTICATED_MESSAGE))
        };
        let Some(value) = metadata.get(HEADER) else {
            return refused("no authorization metadata");
        };
        let Ok(value) = value.to_str() else {
            return refused("authorization metadata is not ASCII");
        };
        let value = value.trim();
        let presented = match value.split_once(' ') {
            Some((scheme, rest)) if scheme.eq_ignore_ascii_case("bearer") => rest.trim(),
            _ => return refused("authorization metadata is not `Bearer <token>`"),
        };
        if bool::from(digest(presented.as_bytes()).ct_eq(&token.digest)) {
            Ok(())
        } else {
            refused("wrong token")
        }
    }

    /// Attaches the token to an outgoing admin call (no-op when none is
    /// configured), for clients of admin RPCs: dev seeding, tests, tools.
    pub fn authorize<T>(&self, request: &mut Request<T>) {
        if let Some(token) = &self.token {
            request.metadata_mut().insert(HEADER, token.header.clone());
        }
    }

    /// `request` with the token attached (see [`AdminAuth::authorize`]).
    pub fn request<T>(&self, message: T) -> Request<T> {
        let mut request = Request::new(message);
        self.authorize(&mut request);
        request
    }

    /// Logs once at start-up whether admin RPCs are protected: WARN when
    /// they are open to every caller. Never logs the token.
    pub fn log_startup(&self, service: &str) {
        if self.is_required() {
            tracing::info!(service, "admin RPCs require a bearer token");
        } else {
            tracing::warn!(
                service,
                "admin RPCs are OPEN to every caller (no --admin-token / ADMIN_TOKEN configured); fine for dev, not for production"
            );
        }
    }
}

/// Attaches the token to every call of a client:
/// `PaymentServiceClient::with_interceptor(channel, auth.clone())`.
impl tonic::service::Interceptor for AdminAuth {
    fn call(&mut self, mut request: Request<()>) -> Result<Request<()>, Status> {
        self.authorize(&mut request);
        Ok(request)
    }
}

impl fmt::Debug for AdminAuth {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("AdminAuth")
            .field("token", &self.token.as_ref().map(|_| "<redacted>"))
            .finish()
    }
}

impl fmt::Display for AdminAuth {
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
    pub fn build(&self) -> Result<AdminAuth, InvalidToken> {
        match &self.admin_token {
            Some(token) => AdminAuth::with_token(token),
            None => Ok(AdminAuth::open()),
        }
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
        let auth = AdminAuth::open();
        assert!(!auth.is_required());
        assert!(auth.check(&metadata(None)).is_ok());
        assert!(auth.check(&metadata(Some("Bearer whatever"))).is_ok());
        let mut request = Request::new(());
        auth.authorize(&mut request);
        assert!(request.metadata().get(HEADER).is_none());
    }

    #[test]
    fn token_is_required_and_compared() {
        let auth = AdminAuth::with_token(TOKEN).unwrap();
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
        let auth = AdminAuth::with_token(TOKEN).unwrap();
        let request = auth.request(());
        let value = request.metadata().get(HEADER).unwrap();
        assert!(value.is_sensitive());
        assert_eq!(value.to_str().unwrap(), format!("Bearer {TOKEN}"));
        assert!(auth.check(request.metadata()).is_ok());
        let other = AdminAuth::with_token("another").unwrap();
        assert!(other.check(request.metadata()).is_err());
        // The interceptor does the same.
        let mut interceptor = auth.clone();
        let intercepted =
            tonic::service::Interceptor::call(&mut interceptor, Request::new(())).unwrap();
        assert!(auth.check(intercepted.metadata()).is_ok());
    }

    #[test]
    fn unusable_tokens_are_refused() {
        for bad in ["", "has space", "tab\there", "ünïcode", &"x".repeat(513)] {
            let e = AdminAuth::with_token(bad).unwrap_err();
            assert!(e.to_string().contains("--admin-token"), "{e}");
        }
        assert!(AdminAuth::with_token(&"x".repeat(512)).is_ok());
    }

    #[derive(Debug, clap::Parser)]
    struct Cli {
        #[command(flatten)]
        admin: AdminConfig,
    }

    #[test]
    fn debug_and_display_never_print_the_token() {
        let cli = Cli::try_parse_from(["x", "--admin-token", TOKEN]).unwrap();
        let auth = cli.admin.build().unwrap();
        for shown in [
            format!("{cli:?}"),
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
