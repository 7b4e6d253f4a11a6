//! TLS end to end, with certificates made at test time (rcgen): payment-svc
//! serves TLS from `--tls-cert`/`--tls-key` files; a client trusting the CA
//! (`--tls-ca`) calls it — by name or by IP address, `https://` or an
//! `http://` address upgraded because a CA is set; a plaintext client and a
//! client trusting another CA are refused and change nothing. With
//! `--tls-client-auth` a client must also present a certificate the CA
//! signed. And the whole stack over mutual TLS: the orchestrator serves
//! TLS and calls TLS participants that require its client certificate
//! (`participant_channel_with`).

use embedded_store::Durability;
use participant_kit::faults::Faults;
use payment_svc::store::SqlitePaymentStore;
use rcgen::{BasicConstraints, CertificateParams, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair};
use saga_proto::payment::v1 as payment;
use saga_proto::payment::v1::payment_service_client::PaymentServiceClient;
use service_kit::auth::AdminConfig;
use service_kit::server::{LimitsConfig, ServeOptions};
use service_kit::shutdown::Shutdown;
use service_kit::tls::{TlsConfig, client_endpoint, error_chain};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;
use tokio::task::JoinHandle;
use tonic::transport::{Channel, Endpoint};

/// PEM files of a test PKI in a temp dir.
struct Pki {
    dir: tempfile::TempDir,
}

impl Pki {
    fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    /// The CA bundle clients trust.
    fn ca(&self) -> TlsConfig {
        TlsConfig {
            tls_ca: Some(self.path("ca.pem")),
            ..TlsConfig::default()
        }
    }
}

fn ca(name: &str) -> (rcgen::Certificate, Issuer<'static, KeyPair>) {
    let key = KeyPair::generate().expect("key");
    let mut params = CertificateParams::new(Vec::<String>::new()).expect("params");
    params
        .distinguished_name
        .push(rcgen::DnType::CommonName, name);
    params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    let cert = params.self_signed(&key).expect("self-signed CA");
    (cert, Issuer::new(params, key))
}

fn leaf(
    dir: &Path,
    name: &str,
    sans: &[&str],
    usage: &[ExtendedKeyUsagePurpose],
    issuer: &Issuer<'static, KeyPair>,
) {
    let key = KeyPair::generate().expect("key");
    let mut params =
        CertificateParams::new(sans.iter().map(|s| (*s).to_owned()).collect::<Vec<_>>())
            .expect("params");
    params.extended_key_usages = usage.to_vec();
    let cert = params.signed_by(&key, issuer).expect("signed");
    std::fs::write(dir.join(format!("{name}.pem")), cert.pem()).expect("write cert");
    std::fs::write(dir.join(format!("{name}.key")), key.serialize_pem()).expect("write key");
}

/// A CA, a server certificate it signed for localhost and 127.0.0.1, a
/// client certificate it signed, the orchestrator's certificate (server and
/// client), and an unrelated CA.
fn pki() -> Pki {
    let dir = tempfile::tempdir().expect("tempdir");
    let (ca_cert, issuer) = ca("saga test CA");
    std::fs::write(dir.path().join("ca.pem"), ca_cert.pem()).expect("write CA");
    leaf(
        dir.path(),
        "server",
        &["localhost", "127.0.0.1"],
        &[ExtendedKeyUsagePurpose::ServerAuth],
        &issuer,
    );
    leaf(
        dir.path(),
        "client",
        &["orchestrator"],
        &[ExtendedKeyUsagePurpose::ClientAuth],
        &issuer,
    );
    // The orchestrator's own: it serves TLS and is a client of the
    // participants with the same --tls-cert/--tls-key.
    leaf(
        dir.path(),
        "orchestrator",
        &["localhost", "127.0.0.1"],
        &[
            ExtendedKeyUsagePurpose::ServerAuth,
            ExtendedKeyUsagePurpose::ClientAuth,
        ],
        &issuer,
    );
    let (other_ca, _) = ca("some other CA");
    std::fs::write(dir.path().join("other-ca.pem"), other_ca.pem()).expect("write other CA");
    Pki { dir }
}

struct Payment {
    addr: SocketAddr,
    shutdown: Shutdown,
    task: JoinHandle<()>,
    _dir: tempfile::TempDir,
}

impl Payment {
    /// payment-svc serving TLS as the flags in `tls` say.
    async fn start(tls: &TlsConfig) -> Payment {
        let options =
            ServeOptions::from_flags(&AdminConfig::default(), tls, &LimitsConfig::default())
                .expect("TLS flags");
        assert!(options.tls_enabled());
        let dir = tempfile::tempdir().expect("tempdir");
        let store = Arc::new(
            SqlitePaymentStore::open(&dir.path().join("payment.db"), Durability::Process)
                .expect("open payment"),
        );
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let addr = listener.local_addr().expect("local addr");
        let shutdown = Shutdown::new();
        let stop = shutdown.clone();
        let task = tokio::spawn(async move {
            payment_svc::serve(
                store,
                participant_kit::Kit::new(Arc::new(Faults::disabled()), options),
                listener,
                stop,
            )
            .await
            .expect("payment serve");
        });
        Payment {
            addr,
            shutdown,
            task,
            _dir: dir,
        }
    }

    async fn stop(self) {
        self.shutdown.trigger();
        self.task.await.expect("server task");
    }
}

fn server_flags(pki: &Pki) -> TlsConfig {
    TlsConfig {
        tls_cert: Some(pki.path("server.pem")),
        tls_key: Some(pki.path("server.key")),
        ..TlsConfig::default()
    }
}

async fn connect(endpoint: Endpoint) -> Result<Channel, String> {
    endpoint
        .connect_timeout(Duration::from_secs(5))
        .timeout(Duration::from_secs(5))
        .connect()
        .await
        .map_err(|e| error_chain(&e))
}

fn charge(request_id: &str, cents: i64) -> payment::ChargeRequest {
    payment::ChargeRequest {
        request_id: request_id.into(),
        customer_id: "alice".into(),
        amount_cents: cents,
    }
}

async fn balance<T>(client: &mut PaymentServiceClient<T>) -> i64
where
    T: tonic::client::GrpcService<tonic::body::Body>,
    T::Error: Into<tonic::codegen::StdError>,
    T::ResponseBody: tonic::codegen::Body<Data = tonic::codegen::Bytes> + Send + 'static,
    <T::ResponseBody as tonic::codegen::Body>::Error: Into<tonic::codegen::StdError> + Send,
{
    client
        .get_account(payment::GetAccountRequest {
            customer_id: "alice".into(),
            operation_limit: 0,
        })
        .await
        .expect("get account")
        .into_inner()
        .balance_cents
}

#[tokio::test]
async fn tls_calls_work_with_the_ca_and_fail_otherwise() {
    let pki = pki();
    let server = Payment::start(&server_flags(&pki)).await;
    let port = server.addr.port();

    // By name over https://, trusting the CA: Deposit and Charge work.
    let endpoint = client_endpoint(&format!("https://localhost:{port}"), &pki.ca()).unwrap();
    let mut client = PaymentServiceClient::new(connect(endpoint).await.expect("TLS connect"));
    client
        .deposit(payment::DepositRequest {
            request_id: "dep-1".into(),
            customer_id: "alice".into(),
            amount_cents: 1_000,
        })
        .await
        .expect("deposit over TLS");
    let charged = client
        .charge(charge("charge-1", 300))
        .await
        .expect("charge over TLS")
        .into_inner();
    assert_eq!(charged.balance_cents, 700);

    // By IP address, given as http:// (the default address form): a CA is
    // set, so the client upgrades to TLS and checks the IP against the SANs.
    let endpoint = client_endpoint(&format!("http://127.0.0.1:{port}"), &pki.ca()).unwrap();
    assert_eq!(endpoint.uri().scheme_str(), Some("https"));
    let mut by_ip = PaymentServiceClient::new(connect(endpoint).await.expect("TLS by IP"));
    let charged = by_ip
        .charge(charge("charge-2", 100))
        .await
        .expect("charge over TLS by IP")
        .into_inner();
    assert_eq!(charged.balance_cents, 600);

    // A plaintext client gets no answer from a TLS server.
    let plaintext = Endpoint::from_shared(format!("http://127.0.0.1:{port}")).unwrap();
    match connect(plaintext).await {
        Err(_) => {}
        Ok(channel) => {
            let refused = PaymentServiceClient::new(channel)
                .charge(charge("charge-plain", 50))
                .await;
            assert!(refused.is_err(), "plaintext call answered: {refused:?}");
        }
    }

    // A client trusting another CA refuses the server's certificate.
    let other = TlsConfig {
        tls_ca: Some(pki.path("other-ca.pem")),
        ..TlsConfig::default()
    };
    let endpoint = client_endpoint(&format!("https://localhost:{port}"), &other).unwrap();
    let e = connect(endpoint)
        .await
        .expect_err("a certificate from an untrusted CA is refused");
    assert!(e.contains("certificate"), "{e}");

    // A client with no CA at all trusts only the public web PKI: refused too.
    let endpoint =
        client_endpoint(&format!("https://localhost:{port}"), &TlsConfig::default()).unwrap();
    let e = connect(endpoint)
        .await
        .expect_err("not a public certificate");
    assert!(e.contains("certificate"), "{e}");

    // None of the refused clients charged anything.
    assert_eq!(balance(&mut client).await, 600);
    server.stop().await;
}

#[tokio::test]
async fn mutual_tls_requires_a_client_certificate_the_ca_signed() {
    let pki = pki();
    let server = Payment::start(&TlsConfig {
        tls_ca: Some(pki.path("ca.pem")),
        tls_client_auth: true,
        ..server_flags(&pki)
    })
    .await;
    let addr = format!("https://localhost:{}", server.addr.port());

    // Trusting the server is not enough: no client certificate, no call
    // (with TLS 1.3 the server's alert may only show on the first call).
    let anonymous = client_endpoint(&addr, &pki.ca()).unwrap();
    let refused = match connect(anonymous).await {
        Err(e) => e,
        Ok(channel) => {
            let status = PaymentServiceClient::new(channel)
                .charge(charge("anon", 1))
                .await
                .expect_err("a client without a certificate is refused");
            format!("{status:?}")
        }
    };
    assert!(refused.to_lowercase().contains("certificate"), "{refused}");

    // With the client certificate (the orchestrator's --tls-cert/--tls-key).
    let with_cert = TlsConfig {
        tls_cert: Some(pki.path("client.pem")),
        tls_key: Some(pki.path("client.key")),
        ..pki.ca()
    };
    let endpoint = client_endpoint(&addr, &with_cert).unwrap();
    let mut client = PaymentServiceClient::new(connect(endpoint).await.expect("mTLS connect"));
    let deposited = client
        .deposit(payment::DepositRequest {
            request_id: "dep-1".into(),
            customer_id: "alice".into(),
            amount_cents: 42,
        })
        .await
        .expect("deposit over mutual TLS")
        .into_inner();
    assert_eq!(deposited.balance_cents, 42);
    server.stop().await;
}

#[tokio::test]
async fn the_whole_stack_runs_over_mutual_tls() {
    let pki = pki();
    let participant_tls = TlsConfig {
        tls_ca: Some(pki.path("ca.pem")),
        tls_client_auth: true,
        ..server_flags(&pki)
    };
    let options = |tls: &TlsConfig| {
        ServeOptions::from_flags(&AdminConfig::default(), tls, &LimitsConfig::default())
            .expect("TLS flags")
    };
    let dir = tempfile::tempdir().expect("tempdir");
    let start = |service| {
        saga_tests::ParticipantHarness::new(service, dir.path())
            .options(options(&participant_tls))
            .start()
    };
    let payment_svc = start(saga_tests::Service::Payment).await;
    let inventory_svc = start(saga_tests::Service::Inventory).await;

    // The orchestrator: serves TLS, and presents the same certificate to
    // the participants, whose server certificates it checks with the CA.
    let orchestrator_tls = TlsConfig {
        tls_cert: Some(pki.path("orchestrator.pem")),
        tls_key: Some(pki.path("orchestrator.key")),
        tls_ca: Some(pki.path("ca.pem")),
        tls_client_auth: false,
    };
    let channel = |addr: SocketAddr| {
        orchestrator::participant_channel_with(
            &format!("https://localhost:{}", addr.port()),
            &orchestrator_tls,
        )
        .expect("participant channel")
    };
    let (payment_channel, inventory_channel) =
        (channel(payment_svc.addr), channel(inventory_svc.addr));
    let mut payments = PaymentServiceClient::new(payment_channel.clone());
    payments
        .deposit(payment::DepositRequest {
            request_id: "dep-tls".into(),
            customer_id: "alice".into(),
            amount_cents: 1_000,
        })
        .await
        .expect("deposit over mutual TLS");
    saga_proto::inventory::v1::inventory_service_client::InventoryServiceClient::new(
        inventory_channel.clone(),
    )
    .add_stock(saga_proto::inventory::v1::AddStockRequest {
        request_id: "stock-tls".into(),
        product_id: "sku-apple".into(),
        quantity: 5,
    })
    .await
    .expect("add stock over mutual TLS");
    let definition = saga_tests::order_saga_on(
        payment_channel,
        inventory_channel,
        orchestrator::participant::call::Caller::new(Duration::from_secs(5)),
    );
    let orchestrator = saga_tests::OrchestratorHarness::new(dir.path(), definition)
        .options(options(&orchestrator_tls))
        .start()
        .await;
    let port = orchestrator.addr.port();

    // A client that trusts the CA orders over TLS; plaintext is refused.
    let endpoint = client_endpoint(&format!("https://localhost:{port}"), &pki.ca()).unwrap();
    let mut orders = saga_proto::saga::v1::order_service_client::OrderServiceClient::new(
        connect(endpoint).await.expect("TLS connect"),
    );
    let done = orders
        .create_order(saga_tests::order_request(
            "tls-order",
            "alice",
            &[("sku-apple", 2, 150)],
            true,
        ))
        .await
        .expect("CreateOrder over TLS")
        .into_inner();
    assert_eq!(
        done.status(),
        saga_proto::saga::v1::SagaStatus::Completed,
        "{done:?}"
    );
    assert_eq!(balance(&mut payments).await, 700);
    let plaintext = Endpoint::from_shared(format!("http://127.0.0.1:{port}")).unwrap();
    if let Ok(channel) = connect(plaintext).await {
        saga_proto::saga::v1::order_service_client::OrderServiceClient::new(channel)
            .create_order(saga_tests::order_request(
                "plain",
                "alice",
                &[("sku-apple", 1, 1)],
                false,
            ))
            .await
            .expect_err("plaintext to a TLS orchestrator is refused");
    }
    orchestrator.stop().await;
    payment_svc.stop().await;
    inventory_svc.stop().await;
}

#[test]
fn bad_tls_files_stop_start_up_naming_the_flag() {
    let pki = pki();
    let wrong_key = TlsConfig {
        tls_key: Some(pki.path("client.key")),
        ..server_flags(&pki)
    };
    let e = ServeOptions::from_flags(
        &AdminConfig::default(),
        &wrong_key,
        &LimitsConfig::default(),
    )
    .unwrap_err()
    .to_string();
    assert!(
        e.starts_with("--tls-key") && e.contains("does not fit"),
        "{e}"
    );
    let missing = TlsConfig {
        tls_cert: Some(pki.path("nope.pem")),
        ..server_flags(&pki)
    };
    let e = ServeOptions::from_flags(&AdminConfig::default(), &missing, &LimitsConfig::default())
        .unwrap_err()
        .to_string();
    assert!(e.starts_with("--tls-cert") && e.contains("nope.pem"), "{e}");
}
