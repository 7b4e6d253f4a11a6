//! TLS (rustls, ring provider) for the gRPC servers and for the clients that
//! call them. Off by default: plaintext stays the dev default.
//!
//! - A **server** serves TLS when [`TlsConfig`] has `--tls-cert` and
//!   `--tls-key` ([`TlsConfig::server_tls`], used by
//!   [`crate::server::ServeOptions`]). With `--tls-client-auth` it also
//!   requires a client certificate signed by `--tls-ca` (mutual TLS).
//! - A **client** ([`client_target`] for the orchestrator's
//!   [`crate::channel::GrpcChannel`], [`client_endpoint`] for a plain tonic
//!   channel) calls over TLS when the address is
//!   `https://…` or `--tls-ca` is set (then an `http://` address is upgraded
//!   to `https://`). It verifies the server against the `--tls-ca` bundle
//!   (without one: the public web PKI roots), for the host of the address
//!   (a name or an IP address, which the certificate's subject alternative
//!   names must contain). When `--tls-cert`/`--tls-key` are set too they are
//!   offered as its client certificate (only used by servers asking for one).
//!
//! Every file is read and checked up front, so a wrong path, an empty bundle
//! or a key that does not belong to the certificate is a start-up error
//! naming the flag, not a failed handshake later.
//!
//! The process-wide rustls crypto provider is ring's, installed once by
//! [`install_crypto_provider`] (the mongodb driver's rustls uses ring too;
//! aws-lc is never built).

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Once};
use std::time::Duration;
use tonic::codegen::http;
use tonic::transport::{Certificate, ClientTlsConfig, Endpoint, Identity, ServerTlsConfig};

/// The ALPN protocol id of HTTP/2, which a gRPC client asks for.
pub const ALPN_H2: &[u8] = b"h2";

/// `--tls-cert` and `--tls-key` as read: the PEM text tonic's servers take
/// and the parsed chain and key a rustls client takes.
struct IdentityFiles {
    cert_pem: Vec<u8>,
    key_pem: Vec<u8>,
    chain: Vec<CertificateDer<'static>>,
    key: PrivateKeyDer<'static>,
}

/// Longest a TLS handshake may take on a server before the connection is
/// dropped (a client that connects and says nothing holds no slot forever).
pub const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// TLS flags; `#[command(flatten)]` it into a service's clap config.
#[derive(Debug, Clone, Default, PartialEq, Eq, clap::Args)]
#[command(next_help_heading = "TLS (off by default: plaintext)")]
pub struct TlsConfig {
    /// PEM certificate chain this server presents (leaf first). With
    /// --tls-key it turns TLS on.
    #[arg(long, env = "TLS_CERT", requires = "tls_key")]
    pub tls_cert: Option<PathBuf>,
    /// PEM private key of --tls-cert (PKCS#8, PKCS#1 or SEC1).
    #[arg(long, env = "TLS_KEY", requires = "tls_cert")]
    pub tls_key: Option<PathBuf>,
    /// PEM CA bundle. Clients verify the servers they call against it (and
    /// call them over TLS); with --tls-client-auth a server requires client
    /// certificates it signed.
    #[arg(long, env = "TLS_CA")]
    pub tls_ca: Option<PathBuf>,
    /// Require a client certificate signed by --tls-ca (mutual TLS).
    #[arg(
        long,
        env = "TLS_CLIENT_AUTH",
        requires = "tls_ca",
        requires = "tls_cert"
    )]
    pub tls_client_auth: bool,
}

/// A TLS set-up that cannot work; each names the flag to fix.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    #[error("--tls-cert and --tls-key go together: set both or neither")]
    /// Only one of `--tls-cert` / `--tls-key` was given.
    Incomplete,
    #[error(
        "--tls-client-auth needs --tls-ca (the CA that signs client certificates) and a server certificate (--tls-cert, --tls-key)"
    )]
    /// `--tls-client-auth` without `--tls-ca`.
    ClientAuthIncomplete,
    #[error("{flag} {}: {source}", path.display())]
    /// A file could not be read.
    Read {
        /// The flag that named it.
        flag: &'static str,
        /// The file.
        path: PathBuf,
        #[source]
        /// Why.
        source: std::io::Error,
    },
    #[error("{flag} {}: {problem}", path.display())]
    /// A file holds no usable certificate or key.
    Invalid {
        /// The flag that named it.
        flag: &'static str,
        /// The file.
        path: PathBuf,
        /// What is wrong.
        problem: String,
    },
    /// A rustls client configuration could not be built.
    #[error("TLS client set-up failed: {0}")]
    Setup(String),
    /// A participant address that cannot be used as an endpoint.
    #[error("address {addr:?}: {problem}")]
    Address {
        /// The address.
        addr: String,
        /// What is wrong with it.
        problem: String,
    },
}

/// Installs ring as the process-wide rustls crypto provider, once. Harmless
/// when a provider is already installed (that one stays).
pub fn install_crypto_provider() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        let _ = rustls::crypto::ring::default_provider().install_default();
    });
}

fn read(flag: &'static str, path: &Path) -> Result<Vec<u8>, TlsError> {
    std::fs::read(path).map_err(|source| TlsError::Read {
        flag,
        path: path.to_owned(),
        source,
    })
}

fn invalid(flag: &'static str, path: &Path, problem: impl Into<String>) -> TlsError {
    TlsError::Invalid {
        flag,
        path: path.to_owned(),
        problem: problem.into(),
    }
}

/// The PEM certificates in `path` (at least one).
fn certificates(
    flag: &'static str,
    path: &Path,
) -> Result<(Vec<u8>, Vec<CertificateDer<'static>>), TlsError> {
    let pem = read(flag, path)?;
    let certs = CertificateDer::pem_slice_iter(&pem)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| invalid(flag, path, format!("not a PEM certificate file ({e})")))?;
    if certs.is_empty() {
        return Err(invalid(
            flag,
            path,
            "holds no PEM certificate (-----BEGIN CERTIFICATE-----)",
        ));
    }
    Ok((pem, certs))
}

/// The PEM private key in `path`.
fn private_key(
    flag: &'static str,
    path: &Path,
) -> Result<(Vec<u8>, PrivateKeyDer<'static>), TlsError> {
    let pem = read(flag, path)?;
    let key = PrivateKeyDer::from_pem_slice(&pem)
        .map_err(|e| invalid(flag, path, format!("holds no usable PEM private key ({e})")))?;
    Ok((pem, key))
}

impl TlsConfig {
    /// Whether this process serves TLS (certificate and key are set).
    pub fn server_enabled(&self) -> bool {
        self.tls_cert.is_some() && self.tls_key.is_some()
    }

    /// The flags fit together (clap checks this too; this covers configs
    /// built in code).
    pub fn validate(&self) -> Result<(), TlsError> {
        if self.tls_cert.is_some() != self.tls_key.is_some() {
            return Err(TlsError::Incomplete);
        }
        if self.tls_client_auth && (self.tls_ca.is_none() || !self.server_enabled()) {
            return Err(TlsError::ClientAuthIncomplete);
        }
        Ok(())
    }

    /// `--tls-cert` and `--tls-key`, read and checked to belong together.
    fn identity_files(&self) -> Result<Option<IdentityFiles>, TlsError> {
        let (Some(cert_path), Some(key_path)) = (&self.tls_cert, &self.tls_key) else {
            return Ok(None);
        };
        let (cert_pem, chain) = certificates("--tls-cert", cert_path)?;
        let (key_pem, key) = private_key("--tls-key", key_path)?;
        rustls::sign::CertifiedKey::from_der(
            chain.clone(),
            key.clone_key(),
            &rustls::crypto::ring::default_provider(),
        )
        .map_err(|e| {
            invalid(
                "--tls-key",
                key_path,
                format!("does not fit --tls-cert {} ({e})", cert_path.display()),
            )
        })?;
        Ok(Some(IdentityFiles {
            cert_pem,
            key_pem,
            chain,
            key,
        }))
    }

    /// `--tls-cert` and `--tls-key` as a tonic identity (the servers').
    fn identity(&self) -> Result<Option<Identity>, TlsError> {
        Ok(self
            .identity_files()?
            .map(|files| Identity::from_pem(files.cert_pem, files.key_pem)))
    }

    fn ca(&self) -> Result<Option<Certificate>, TlsError> {
        match &self.tls_ca {
            Some(path) => Ok(Some(Certificate::from_pem(
                certificates("--tls-ca", path)?.0,
            ))),
            None => Ok(None),
        }
    }

    /// The server side: `None` when no certificate is configured
    /// (plaintext), else the identity (and, with --tls-client-auth, the
    /// client CA), every file read and checked now.
    pub fn server_tls(&self) -> Result<Option<ServerTlsConfig>, TlsError> {
        self.validate()?;
        let Some(identity) = self.identity()? else {
            return Ok(None);
        };
        install_crypto_provider();
        let mut config = ServerTlsConfig::new()
            .identity(identity)
            .timeout(HANDSHAKE_TIMEOUT);
        let client_ca = if self.tls_client_auth {
            self.ca()?
        } else {
            None
        };
        if let Some(ca) = client_ca {
            config = config.client_ca_root(ca);
        }
        Ok(Some(config))
    }

    /// The client side as [`crate::channel::GrpcChannel`] connects: `None`
    /// for plaintext (no CA and `use_tls` false), else a rustls client that
    /// verifies servers against --tls-ca (or the web PKI roots), offers the
    /// client identity when one is configured, and asks for HTTP/2 (ALPN
    /// `h2`) — what [`TlsConfig::client_tls`] sets up inside tonic.
    pub fn client_rustls(
        &self,
        use_tls: bool,
    ) -> Result<Option<Arc<rustls::ClientConfig>>, TlsError> {
        self.validate()?;
        let ca = match &self.tls_ca {
            Some(path) => Some((path, certificates("--tls-ca", path)?.1)),
            None => None,
        };
        if !use_tls && ca.is_none() {
            return Ok(None);
        }
        let setup = |e: rustls::Error| TlsError::Setup(e.to_string());
        let mut roots = rustls::RootCertStore::empty();
        match ca {
            Some((path, certs)) => {
                for cert in certs {
                    roots
                        .add(cert)
                        .map_err(|e| invalid("--tls-ca", path, format!("not a usable CA ({e})")))?;
                }
            }
            None => roots.extend(webpki_roots::TLS_SERVER_ROOTS.iter().cloned()),
        }
        let builder = rustls::ClientConfig::builder_with_provider(Arc::new(
            rustls::crypto::ring::default_provider(),
        ))
        .with_safe_default_protocol_versions()
        .map_err(setup)?
        .with_root_certificates(roots);
        let mut config = match self.identity_files()? {
            Some(files) => builder
                .with_client_auth_cert(files.chain, files.key)
                .map_err(setup)?,
            None => builder.with_no_client_auth(),
        };
        config.alpn_protocols = vec![ALPN_H2.to_vec()];
        Ok(Some(Arc::new(config)))
    }

    /// The client side inside tonic (the tools' and tests' plain tonic
    /// channels): `None` for plaintext (no CA and `use_tls` false), else
    /// verification against --tls-ca (or the web PKI roots) plus the client
    /// identity when one is configured.
    pub fn client_tls(&self, use_tls: bool) -> Result<Option<ClientTlsConfig>, TlsError> {
        self.validate()?;
        let ca = self.ca()?;
        if !use_tls && ca.is_none() {
            return Ok(None);
        }
        install_crypto_provider();
        let mut config = ClientTlsConfig::new();
        config = match ca {
            Some(ca) => config.ca_certificate(ca),
            None => config.with_webpki_roots(),
        };
        if let Some(identity) = self.identity()? {
            config = config.identity(identity);
        }
        Ok(Some(config))
    }
}

/// `addr` (`http://host:port`, `https://host:port` or bare `host:port`)
/// as (whether `https://` was asked for, `host:port…`).
fn split_address(addr: &str) -> Result<(bool, &str), TlsError> {
    let trimmed = addr.trim();
    let (scheme, rest) = match trimmed.split_once("://") {
        Some((scheme, rest)) => (scheme.to_ascii_lowercase(), rest),
        None => ("http".to_owned(), trimmed),
    };
    if scheme != "http" && scheme != "https" {
        return Err(TlsError::Address {
            addr: addr.to_owned(),
            problem: format!("scheme must be http:// or https:// (got {scheme}://)"),
        });
    }
    Ok((scheme == "https", rest))
}

/// An endpoint for `addr` (`http://host:port`, `https://host:port` or bare
/// `host:port`), over TLS when the address is `https://` or `tls` has a CA
/// (then `http://` and bare addresses are upgraded to `https://`). The
/// server's certificate must name the host of `addr`. For the tools' and
/// tests' plain tonic channels; the orchestrator's calls go through
/// [`crate::channel::GrpcChannel`], which takes a [`client_target`].
pub fn client_endpoint(addr: &str, tls: &TlsConfig) -> Result<Endpoint, TlsError> {
    let (https, rest) = split_address(addr)?;
    let client_tls = tls.client_tls(https)?;
    let uri = client_uri(addr, rest, client_tls.is_some())?;
    let endpoint = Endpoint::from(uri);
    match client_tls {
        Some(config) => endpoint.tls_config(config).map_err(|e| TlsError::Address {
            addr: addr.to_owned(),
            problem: format!("TLS set-up failed ({})", error_chain(&e)),
        }),
        None => Ok(endpoint),
    }
}

/// Where a [`crate::channel::GrpcChannel`] calls, and how.
#[derive(Debug, Clone)]
pub struct ClientTarget {
    /// `http://host:port` or `https://host:port`.
    pub uri: http::Uri,
    /// Over TLS: the rustls client and the name the server's certificate
    /// must carry (the host of the address: a DNS name or an IP address).
    pub tls: Option<(Arc<rustls::ClientConfig>, ServerName<'static>)>,
}

/// The [`ClientTarget`] for `addr`, by the rules of [`client_endpoint`].
pub fn client_target(addr: &str, tls: &TlsConfig) -> Result<ClientTarget, TlsError> {
    let (https, rest) = split_address(addr)?;
    let config = tls.client_rustls(https)?;
    let uri = client_uri(addr, rest, config.is_some())?;
    let tls = match config {
        None => None,
        Some(config) => {
            let host = uri.host().unwrap_or_default();
            let name = host.trim_start_matches('[').trim_end_matches(']');
            let name = ServerName::try_from(name.to_owned()).map_err(|e| TlsError::Address {
                addr: addr.to_owned(),
                problem: format!("{host} is not a name a certificate can carry ({e})"),
            })?;
            Some((config, name))
        }
    };
    Ok(ClientTarget { uri, tls })
}

/// `scheme://rest` as a URI with a host.
fn client_uri(addr: &str, rest: &str, tls: bool) -> Result<http::Uri, TlsError> {
    let bad = |problem: String| TlsError::Address {
        addr: addr.to_owned(),
        problem,
    };
    let scheme = if tls { "https" } else { "http" };
    let uri: http::Uri = format!("{scheme}://{rest}")
        .parse()
        .map_err(|e| bad(format!("not a valid URI ({e})")))?;
    if uri.host().is_none_or(str::is_empty) {
        return Err(bad("no host".to_owned()));
    }
    Ok(uri)
}

/// `error: cause: cause…` (tonic's transport errors keep the useful part in
/// their sources).
pub fn error_chain(error: &dyn std::error::Error) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        let cause_text = cause.to_string();
        if !text.contains(&cause_text) {
            text.push_str(": ");
            text.push_str(&cause_text);
        }
        source = cause.source();
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    struct Files {
        dir: tempfile::TempDir,
    }

    impl Files {
        fn path(&self, name: &str) -> PathBuf {
            self.dir.path().join(name)
        }
    }

    /// A CA, a server certificate for localhost/127.0.0.1 it signed, and an
    /// unrelated key, as PEM files.
    fn files() -> Files {
        let dir = tempfile::tempdir().unwrap();
        let ca_key = rcgen::KeyPair::generate().unwrap();
        let mut ca_params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
        ca_params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
        let ca = ca_params.self_signed(&ca_key).unwrap();
        let issuer = rcgen::Issuer::new(ca_params, ca_key);
        let key = rcgen::KeyPair::generate().unwrap();
        let params =
            rcgen::CertificateParams::new(vec!["localhost".into(), "127.0.0.1".into()]).unwrap();
        let cert = params.signed_by(&key, &issuer).unwrap();
        let other = rcgen::KeyPair::generate().unwrap();
        std::fs::write(dir.path().join("ca.pem"), ca.pem()).unwrap();
        std::fs::write(dir.path().join("cert.pem"), cert.pem()).unwrap();
        std::fs::write(dir.path().join("key.pem"), key.serialize_pem()).unwrap();
        std::fs::write(dir.path().join("other-key.pem"), other.serialize_pem()).unwrap();
        std::fs::write(dir.path().join("empty.pem"), "").unwrap();
        Files { dir }
    }

    #[derive(Debug, clap::Parser)]
    struct Cli {
        #[command(flatten)]
        tls: TlsConfig,
    }

    #[test]
    fn flags_parse_and_must_fit_together() {
        let cli = Cli::try_parse_from(["x"]).unwrap();
        assert_eq!(cli.tls, TlsConfig::default());
        assert!(!cli.tls.server_enabled());
        let e = Cli::try_parse_from(["x", "--tls-cert", "c.pem"]).unwrap_err();
        assert!(e.to_string().contains("--tls-key"), "{e}");
        let e = Cli::try_parse_from(["x", "--tls-key", "k.pem"]).unwrap_err();
        assert!(e.to_string().contains("--tls-cert"), "{e}");
        let e = Cli::try_parse_from(["x", "--tls-client-auth"]).unwrap_err();
        assert!(e.to_string().contains("--tls-ca"), "{e}");
        let cli = Cli::try_parse_from(["x", "--tls-cert", "c.pem", "--tls-key", "k.pem"]).unwrap();
        assert!(cli.tls.server_enabled());
        // The same checks for configs built in code.
        let half = TlsConfig {
            tls_cert: Some("c.pem".into()),
            ..Default::default()
        };
        assert!(matches!(half.server_tls(), Err(TlsError::Incomplete)));
        let no_ca = TlsConfig {
            tls_cert: Some("c.pem".into()),
            tls_key: Some("k.pem".into()),
            tls_client_auth: true,
            ..Default::default()
        };
        assert!(matches!(
            no_ca.server_tls(),
            Err(TlsError::ClientAuthIncomplete)
        ));
    }

    #[test]
    fn server_files_are_checked_up_front() {
        let f = files();
        let good = TlsConfig {
            tls_cert: Some(f.path("cert.pem")),
            tls_key: Some(f.path("key.pem")),
            ..Default::default()
        };
        assert!(good.server_tls().unwrap().is_some());
        assert!(TlsConfig::default().server_tls().unwrap().is_none());

        let missing = TlsConfig {
            tls_cert: Some(f.path("nope.pem")),
            ..good.clone()
        };
        let e = missing.server_tls().unwrap_err().to_string();
        assert!(
            e.starts_with("--tls-cert ") && e.contains("nope.pem"),
            "{e}"
        );

        let empty = TlsConfig {
            tls_cert: Some(f.path("empty.pem")),
            ..good.clone()
        };
        let e = empty.server_tls().unwrap_err().to_string();
        assert!(e.contains("no PEM certificate"), "{e}");

        let not_a_key = TlsConfig {
            tls_key: Some(f.path("cert.pem")),
            ..good.clone()
        };
        let e = not_a_key.server_tls().unwrap_err().to_string();
        assert!(
            e.starts_with("--tls-key ") && e.contains("private key"),
            "{e}"
        );

        let wrong_key = TlsConfig {
            tls_key: Some(f.path("other-key.pem")),
            ..good.clone()
        };
        let e = wrong_key.server_tls().unwrap_err().to_string();
        assert!(e.contains("does not fit --tls-cert"), "{e}");
    }

    #[test]
    fn client_endpoints_use_tls_when_asked() {
        let f = files();
        let plain = client_endpoint("http://127.0.0.1:1", &TlsConfig::default()).unwrap();
        assert_eq!(plain.uri().scheme_str(), Some("http"));
        let bare = client_endpoint("127.0.0.1:1", &TlsConfig::default()).unwrap();
        assert_eq!(bare.uri().to_string(), "http://127.0.0.1:1/");
        let public = client_endpoint("https://example.com:443", &TlsConfig::default()).unwrap();
        assert_eq!(public.uri().scheme_str(), Some("https"));

        let with_ca = TlsConfig {
            tls_ca: Some(f.path("ca.pem")),
            ..Default::default()
        };
        let upgraded = client_endpoint("http://localhost:1", &with_ca).unwrap();
        assert_eq!(upgraded.uri().scheme_str(), Some("https"));
        let bad_ca = TlsConfig {
            tls_ca: Some(f.path("empty.pem")),
            ..Default::default()
        };
        let e = client_endpoint("http://localhost:1", &bad_ca).unwrap_err();
        assert!(e.to_string().starts_with("--tls-ca "), "{e}");
        let e = client_endpoint("ftp://localhost:1", &TlsConfig::default()).unwrap_err();
        assert!(e.to_string().contains("scheme"), "{e}");
    }
}
