//! loyalty-svc served in-process on an ephemeral port, as its binary
//! serves it (`participant_kit::step::serve`), over a real store: the
//! embedded file in a temp dir, or a fresh MongoDB database.

use loyalty_svc::rules::LoyaltyRules;
use participant_kit::Kit;
use participant_kit::faults::Faults;
use participant_kit::step::{MongoSteps, RulesStore, SqliteSteps};
use service_kit::auth::{Role, TokenAuth};
use service_kit::server::ServeOptions;
use service_kit::shutdown::Shutdown;
use std::net::SocketAddr;
use std::sync::Arc;

/// loyalty-svc, serving until dropped.
pub struct Loyalty {
    /// Where it listens.
    pub addr: SocketAddr,
    /// Its store, to read points with.
    pub store: Arc<dyn RulesStore>,
    shutdown: Shutdown,
    _dir: Option<tempfile::TempDir>,
}

impl Drop for Loyalty {
    fn drop(&mut self) {
        self.shutdown.trigger();
    }
}

fn rules() -> LoyaltyRules {
    LoyaltyRules::new([super::BLOCKED.to_owned()])
}

fn kit(token: Option<&str>) -> Kit {
    let service = match token {
        Some(token) => TokenAuth::with_token_for(Role::Service, token).expect("token"),
        None => TokenAuth::open_for(Role::Service),
    };
    Kit::new(
        Arc::new(Faults::disabled()),
        ServeOptions::default().with_service(service),
    )
}

async fn serve(
    store: Arc<dyn RulesStore>,
    token: Option<&str>,
    dir: Option<tempfile::TempDir>,
) -> Loyalty {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let addr = listener.local_addr().expect("addr");
    let shutdown = Shutdown::new();
    tokio::spawn(participant_kit::step::serve(
        store.clone(),
        kit(token),
        "loyalty-svc",
        listener,
        shutdown.clone(),
    ));
    Loyalty {
        addr,
        store,
        shutdown,
        _dir: dir,
    }
}

/// loyalty-svc on the embedded store in a temp dir.
pub async fn embedded(token: Option<&str>) -> Loyalty {
    let dir = tempfile::tempdir().expect("tempdir");
    let store = SqliteSteps::open(
        &dir.path().join("loyalty.db"),
        embedded_store::Durability::Process,
        rules(),
    )
    .expect("open the embedded store");
    serve(Arc::new(store), token, Some(dir)).await
}

/// loyalty-svc on a fresh database of the MongoDB test target; `None` when
/// there is none (the launcher says why, and fails with REQUIRE_MONGO=1).
pub async fn mongo(token: Option<&str>) -> Option<Loyalty> {
    let target = saga_tests::backends::mongo()?;
    let db = saga_tests::backends::fresh_database(&target, "loyalty").await;
    let store = MongoSteps::open_with(
        db,
        participant_kit::HistoryRetention::default().keep,
        rules(),
    )
    .await
    .expect("open the MongoDB store");
    Some(serve(Arc::new(store), token, None).await)
}
