//! Where the started services keep their state: SQLite files in a
//! directory, or databases on the MongoDB test target; the stores of each
//! service opened there the way the binaries open them.

use crate::backends;
use embedded_store::Durability;
use inventory_svc::store::SqliteInventoryStore;
use orchestrator::store::SqliteSagaStore;
use payment_svc::store::SqlitePaymentStore;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

/// Where a started service keeps its state.
#[derive(Clone, Debug)]
pub enum Storage {
    /// SQLite files in this directory.
    Embedded(PathBuf),
    /// MongoDB databases named `<prefix>_<service>` at `uri`.
    Mongo {
        /// The server.
        uri: String,
        /// Databases are named `<prefix>_<service>`.
        prefix: String,
    },
}

impl From<&Path> for Storage {
    fn from(dir: &Path) -> Self {
        Storage::Embedded(dir.to_path_buf())
    }
}

impl From<&PathBuf> for Storage {
    fn from(dir: &PathBuf) -> Self {
        Storage::Embedded(dir.clone())
    }
}

impl Storage {
    /// Fresh databases on the MongoDB test target, or `None` when there is
    /// none (see [`backends::mongo`]).
    pub fn fresh_mongo() -> Option<Storage> {
        let target = backends::mongo()?;
        Some(Storage::Mongo {
            uri: target.uri,
            prefix: format!("stack_{}", uuid::Uuid::now_v7().simple()),
        })
    }

    async fn mongo_db(uri: &str, prefix: &str, service: &str) -> mongodb::Database {
        mongo_client::connect(
            uri,
            &format!("{prefix}_{service}"),
            service,
            std::future::pending(),
        )
        .await
        .expect("connect to MongoDB")
    }

    pub(crate) async fn payment(
        &self,
        keep: Duration,
    ) -> Arc<dyn payment_svc::store::PaymentStore> {
        match self {
            Storage::Embedded(dir) => Arc::new(
                SqlitePaymentStore::open(&dir.join("payment.db"), Durability::Process)
                    .expect("open payment"),
            ),
            Storage::Mongo { uri, prefix } => Arc::new(
                payment_svc::store::MongoPaymentStore::open_with(
                    Self::mongo_db(uri, prefix, "payment").await,
                    keep,
                )
                .await
                .expect("open payment"),
            ),
        }
    }

    pub(crate) async fn inventory(
        &self,
        keep: Duration,
    ) -> Arc<dyn inventory_svc::store::InventoryStore> {
        match self {
            Storage::Embedded(dir) => Arc::new(
                SqliteInventoryStore::open(&dir.join("inventory.db"), Durability::Process)
                    .expect("open inventory"),
            ),
            Storage::Mongo { uri, prefix } => Arc::new(
                inventory_svc::store::MongoInventoryStore::open_with(
                    Self::mongo_db(uri, prefix, "inventory").await,
                    keep,
                )
                .await
                .expect("open inventory"),
            ),
        }
    }

    /// loyalty-svc's store (the generic step participant, `rules` deciding
    /// whom it refuses) in this storage: `loyalty.db`, or the
    /// `<prefix>_loyalty` database.
    pub(crate) async fn loyalty(
        &self,
        keep: Duration,
        rules: loyalty_svc::rules::LoyaltyRules,
    ) -> Arc<dyn participant_kit::step::RulesStore> {
        match self {
            Storage::Embedded(dir) => Arc::new(
                participant_kit::step::SqliteSteps::open(
                    &dir.join("loyalty.db"),
                    Durability::Process,
                    rules,
                )
                .expect("open loyalty"),
            ),
            Storage::Mongo { uri, prefix } => Arc::new(
                participant_kit::step::MongoSteps::open_with(
                    Self::mongo_db(uri, prefix, "loyalty").await,
                    keep,
                    rules,
                )
                .await
                .expect("open loyalty"),
            ),
        }
    }

    /// The saga store in this storage (default retention).
    pub async fn sagas(&self) -> Arc<dyn orchestrator::store::SagaStore> {
        self.sagas_with(Default::default()).await
    }

    /// The saga store in this storage, keeping finished sagas as
    /// `retention` says.
    pub async fn sagas_with(
        &self,
        retention: orchestrator::store::SagaRetention,
    ) -> Arc<dyn orchestrator::store::SagaStore> {
        match self {
            Storage::Embedded(dir) => Arc::new(
                SqliteSagaStore::open(&dir.join("orchestrator.db"), Durability::Process)
                    .expect("open sagas")
                    .with_retention(retention),
            ),
            Storage::Mongo { uri, prefix } => Arc::new(
                orchestrator::store::MongoSagaStore::open_with(
                    Self::mongo_db(uri, prefix, "orchestrator").await,
                    retention,
                )
                .await
                .expect("open sagas"),
            ),
        }
    }
}
