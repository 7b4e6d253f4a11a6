//! Where the services keep their state for one run: SQLite files under the
//! work dir, or three (four with `--third-step`) fresh MongoDB databases — on `MONGODB_URI` when set,
//! else on a MongoDB test server this run starts
//! ([`saga_tests::mongo_server`]) and stops when the storage is dropped.
//! It gives each service its storage flags and reads the stores back for
//! the audit.

use crate::args::Backend;
use crate::cluster::Role;
use crate::snapshot::{self, Snapshot};
use saga_tests::mongo_server::{self, MongoServer, ServerOptions};
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};

/// Where the services keep their state, and the MongoDB test server that
/// holds it (if this run started one; kept for the whole run).
pub struct Storage {
    stores: Stores,
    _server: Option<MongoServer>,
    /// A client for reads during the run (MongoDB only), made on first use.
    client: tokio::sync::OnceCell<mongodb::Client>,
}

/// The three stores.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub enum Stores {
    Embedded {
        payment: PathBuf,
        inventory: PathBuf,
        orchestrator: PathBuf,
        /// loyalty-svc's data dir (`--third-step loyalty`).
        #[serde(default)]
        loyalty: Option<PathBuf>,
    },
    Mongo {
        uri: String,
        label: String,
        /// Where the test server this run started keeps its data (None on
        /// `MONGODB_URI`): `--audit-only` starts it again there.
        server_storage: Option<PathBuf>,
        payment: String,
        inventory: String,
        orchestrator: String,
        /// loyalty-svc's database (`--third-step loyalty`).
        #[serde(default)]
        loyalty: Option<String>,
    },
}

impl Storage {
    /// The storage of a run: data dirs under `work`, or databases named
    /// after `run_tag` (starting the MongoDB test server, logging to
    /// `work/logs/`, unless `MONGODB_URI` is set); loyalty-svc's too when
    /// `loyalty`.
    pub async fn open(
        backend: Backend,
        work: &Path,
        run_tag: &str,
        loyalty: bool,
    ) -> Result<Storage, String> {
        if backend == Backend::Embedded {
            let dir = |n: &str| work.join("data").join(n);
            let stores = Stores::Embedded {
                payment: dir("payment"),
                inventory: dir("inventory"),
                orchestrator: dir("orchestrator"),
                loyalty: loyalty.then(|| dir("loyalty")),
            };
            return Ok(Storage {
                stores,
                _server: None,
                client: Default::default(),
            });
        }
        let (uri, label, server, server_storage) = match mongo_server::external_uri() {
            Some(uri) => (uri, "real MongoDB (MONGODB_URI)", None, None),
            None => {
                let path = work.join("mongo-data");
                let server = start_server(work, path.clone()).await?;
                (server.uri(), server.label(), Some(server), Some(path))
            }
        };
        println!("chaos: storage {label} at {}", mongo_client::redact(&uri));
        let stores = Stores::Mongo {
            uri,
            label: label.to_owned(),
            server_storage,
            payment: format!("chaos_{run_tag}_payment"),
            inventory: format!("chaos_{run_tag}_inventory"),
            orchestrator: format!("chaos_{run_tag}_orchestrator"),
            loyalty: loyalty.then(|| format!("chaos_{run_tag}_loyalty")),
        };
        Ok(Storage {
            stores,
            _server: server,
            client: Default::default(),
        })
    }

    /// The stores of a kept run described by `stores` (its manifest's), for
    /// `--audit-only`: the SQLite files as they are, or the MongoDB
    /// databases — on the test server started again on its kept data
    /// directory, or on the URI the run used.
    pub async fn reopen(stores: Stores, work: &Path) -> Result<Storage, String> {
        let (stores, server) = match stores {
            // The work dir may have been moved or copied: its own data.
            Stores::Embedded { loyalty, .. } => {
                return Storage::open(Backend::Embedded, work, "", loyalty.is_some()).await;
            }
            Stores::Mongo {
                server_storage: Some(_),
                label,
                payment,
                inventory,
                orchestrator,
                loyalty,
                ..
            } => {
                let path = work.join("mongo-data");
                let server = start_server(work, path.clone()).await?;
                let stores = Stores::Mongo {
                    uri: server.uri(),
                    label,
                    server_storage: Some(path),
                    payment,
                    inventory,
                    orchestrator,
                    loyalty,
                };
                (stores, Some(server))
            }
            other => (other, None),
        };
        Ok(Storage {
            stores,
            _server: server,
            client: Default::default(),
        })
    }

    /// What the manifest records to find the stores again.
    pub fn stores(&self) -> &Stores {
        &self.stores
    }

    /// The MongoDB target's label (MongoDB only).
    pub fn label(&self) -> Option<&str> {
        match &self.stores {
            Stores::Embedded { .. } => None,
            Stores::Mongo { label, .. } => Some(label),
        }
    }

    /// The sagas (ids) not terminal whose lease names `owner`, read from
    /// the saga store while the services run (SQLite read-only beside the
    /// writers, which WAL allows; MongoDB by the indexed status).
    pub async fn leased_to(&self, owner: &str) -> Result<Vec<String>, String> {
        match &self.stores {
            Stores::Embedded { orchestrator, .. } => {
                snapshot::leased_to_sqlite(orchestrator, owner)
            }
            Stores::Mongo {
                uri, orchestrator, ..
            } => {
                let client = self
                    .client
                    .get_or_try_init(|| async {
                        mongodb::Client::with_uri_str(uri)
                            .await
                            .map_err(|e| format!("connect: {e}"))
                    })
                    .await?;
                snapshot::leased_to_mongo(client, orchestrator, owner).await
            }
        }
    }

    /// The storage flags of `role`'s service.
    pub fn args(&self, role: Role) -> Vec<String> {
        match &self.stores {
            Stores::Embedded {
                payment,
                inventory,
                orchestrator,
                loyalty,
            } => {
                let dir = pick(role, payment, inventory, orchestrator, loyalty.as_ref());
                vec!["--data-dir".into(), dir.display().to_string()]
            }
            Stores::Mongo {
                uri,
                payment,
                inventory,
                orchestrator,
                loyalty,
                ..
            } => vec![
                "--mongodb-uri".into(),
                uri.clone(),
                "--mongodb-database".into(),
                pick(role, payment, inventory, orchestrator, loyalty.as_ref()).clone(),
            ],
        }
    }

    /// The three stores as they are now (the services must be stopped).
    pub async fn snapshot(&self) -> Result<Snapshot, String> {
        match &self.stores {
            Stores::Embedded {
                payment,
                inventory,
                orchestrator,
                loyalty,
            } => {
                let mut snap = snapshot::read_sqlite(payment, inventory, orchestrator)?;
                if let Some(dir) = loyalty {
                    snap.loyalty = Some(snapshot::read_loyalty_sqlite(dir)?);
                }
                Ok(snap)
            }
            Stores::Mongo {
                uri,
                payment,
                inventory,
                orchestrator,
                loyalty,
                ..
            } => {
                let mut snap = snapshot::read_mongo(uri, payment, inventory, orchestrator).await?;
                if let Some(db) = loyalty {
                    snap.loyalty = Some(snapshot::read_loyalty_mongo(uri, db).await?);
                }
                Ok(snap)
            }
        }
    }

    /// Drops the run's MongoDB databases (nothing to do for the embedded
    /// stores, whose work dir goes as a whole).
    pub async fn drop_databases(&self) {
        if let Stores::Mongo {
            uri,
            payment,
            inventory,
            orchestrator,
            loyalty,
            ..
        } = &self.stores
            && let Ok(client) = mongodb::Client::with_uri_str(uri).await
        {
            for db in [payment, inventory, orchestrator]
                .into_iter()
                .chain(loyalty)
            {
                let _ = client.database(db).drop().await;
            }
        }
    }
}

/// `role`'s one of the stores (loyalty-svc's only exists with
/// `--third-step`, which is what starts a loyalty-svc at all).
fn pick<T>(role: Role, payment: T, inventory: T, orchestrator: T, loyalty: Option<T>) -> T {
    match role {
        Role::Payment => payment,
        Role::Inventory => inventory,
        Role::Orchestrator => orchestrator,
        Role::Loyalty => loyalty.expect("loyalty-svc runs only with its store (--third-step)"),
    }
}

/// How often the soak's test server logs its own command timings
/// (`STATS` lines in `logs/secantusdb.log`).
pub const STATS_SECONDS: u32 = 5;

/// transactionLifetimeLimitSeconds of the soak's test server.
pub const TRANSACTION_LIFETIME_SECONDS: u32 = 5;

/// The MongoDB test server on `storage_path` (in the work dir, so a kept
/// run can be audited again), logging to `work/logs/secantusdb.log`, with a
/// short transaction lifetime: the soak SIGKILLs participants, and a
/// participant killed inside a transaction leaves its locks held that long
/// (as on mongod, whose compose set-up shortens it the same way).
async fn start_server(work: &Path, storage_path: PathBuf) -> Result<MongoServer, String> {
    let options = ServerOptions {
        log: Some(
            work.join("logs")
                .join(format!("{}.log", mongo_server::NAME)),
        ),
        storage_path: Some(storage_path),
        transaction_lifetime_seconds: Some(TRANSACTION_LIFETIME_SECONDS),
        // The retention pass waits for TTL deletes; mongod's monitor runs
        // every 60 s.
        ttl_sweep_seconds: Some(1),
        // Its own timing of every command in its log, to tell a slow test
        // server from a slow client.
        stats_seconds: Some(STATS_SECONDS),
        ..ServerOptions::default()
    };
    tokio::task::spawn_blocking(move || MongoServer::start(options))
        .await
        .map_err(|e| format!("starting the MongoDB test server: {e}"))?
}
