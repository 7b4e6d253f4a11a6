//! Test harness: starts the real services on ephemeral ports with real
//! embedded stores in a directory the test owns, and gives typed clients.
//!
//! Each service runs on its own [`Shutdown`], so a test can stop and restart
//! one of them on the same port and data directory.
//!
//! [`backends`] opens fresh stores on every storage target and
//! [`conformance`] holds the storage suites every backend must pass.
//! [`mongo_server`] launches the MongoDB test server (SecantusDB) for them and for the tools (`src/bin/chaos`,
//! `src/bin/loadgen`); [`process`] ties every child process to this one
//! and stops it; [`saga_list`] pages through ListSagas.

#![warn(missing_docs)]

pub mod backends;
pub mod conformance;
pub mod crash;
pub mod http;
pub mod intercepted_store;
pub mod mongo_server;
pub mod process;
pub mod prometheus;
pub mod reflection;
pub mod saga_list;
pub mod wrapped_step;

use embedded_store::Durability;
use inventory_svc::store::SqliteInventoryStore;
use orchestrator::executor::RetryPolicy;
use orchestrator::order_saga::OrderParticipants;
use orchestrator::step::SagaDefinition;
use orchestrator::store::SqliteSagaStore;
use payment_svc::store::SqlitePaymentStore;
use saga_proto::inventory::v1 as inventory;
use saga_proto::inventory::v1::inventory_service_client::InventoryServiceClient;
use saga_proto::payment::v1 as payment;
use saga_proto::payment::v1::payment_service_client::PaymentServiceClient;
use saga_proto::saga::v1 as saga;
use saga_proto::saga::v1::order_service_client::OrderServiceClient;
use saga_proto::saga::v1::saga_service_client::SagaServiceClient;
use service_kit::auth::TokenAuth;
use service_kit::shutdown::Shutdown;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;
use tokio::task::JoinHandle;
use tonic::transport::Channel;

/// One running service.
pub struct Running {
    /// Where the service listens.
    pub addr: SocketAddr,
    shutdown: Shutdown,
    task: Option<JoinHandle<()>>,
}

impl Running {
    /// Stops the service and waits until it no longer serves.
    pub async fn stop(mut self) {
        self.halt().await;
    }

    /// Stops the service in place (its address stays known for a
    /// restart). A server that failed or panicked fails the test here:
    /// each server task panics with the error `serve` returned.
    pub async fn halt(&mut self) {
        self.shutdown.trigger();
        if let Some(task) = self.task.take()
            && let Err(error) = task.await
        {
            panic!("the service at {} failed: {error}", self.addr);
        }
    }
}

/// A server task that already ended by panicking (each server task panics
/// with the error `serve` returned) fails the test when its handle is
/// dropped without [`Running::stop`]: the failure surfaces even if the
/// test never stops the service. Never blocks: a task still running is
/// left as it is, and a test already panicking is not panicked again.
impl Drop for Running {
    fn drop(&mut self) {
        use futures::FutureExt;
        if std::thread::panicking() {
            return;
        }
        let Some(task) = self.task.take() else {
            return;
        };
        if !task.is_finished() {
            return;
        }
        // Finished, so one poll yields its result without waiting.
        if let Some(Err(error)) = task.now_or_never()
            && error.is_panic()
        {
            panic!("the service at {} failed: {error}", self.addr);
        }
    }
}

/// Which service to start and where.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Service {
    /// payment-svc.
    Payment,
    /// inventory-svc.
    Inventory,
}

/// Binds `addr`, retrying briefly (a restarted service rebinds its old port).
pub async fn listener(addr: SocketAddr) -> tokio::net::TcpListener {
    // A restarted service rebinds its old port; the previous listener was
    // just closed, so retry briefly.
    for _ in 0..50 {
        if let Ok(l) = tokio::net::TcpListener::bind(addr).await {
            return l;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    panic!("cannot bind {addr}");
}

fn any_port() -> SocketAddr {
    SocketAddr::from(([127, 0, 0, 1], 0))
}

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

    async fn payment(&self, keep: Duration) -> Arc<dyn payment_svc::store::PaymentStore> {
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

    async fn inventory(&self, keep: Duration) -> Arc<dyn inventory_svc::store::InventoryStore> {
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

/// Starts payment-svc or inventory-svc with its store in `storage`.
pub async fn start_participant(
    service: Service,
    storage: impl Into<Storage>,
    addr: Option<SocketAddr>,
) -> Running {
    start_participant_with(
        service,
        storage,
        Arc::new(participant_kit::faults::Faults::disabled()),
        service_kit::server::ServeOptions::default(),
        addr,
    )
    .await
}

/// Starts a participant with a fault injector and serve options (TLS,
/// admin token, limits).
pub async fn start_participant_with(
    service: Service,
    storage: impl Into<Storage>,
    faults: Arc<participant_kit::faults::Faults>,
    options: service_kit::server::ServeOptions,
    addr: Option<SocketAddr>,
) -> Running {
    start_participant_kit(
        service,
        storage,
        participant_kit::Kit::new(faults, options),
        addr,
    )
    .await
}

/// Starts a participant with `kit` (faults, serve options, history
/// retention; its store opened with the same retention).
pub async fn start_participant_kit(
    service: Service,
    storage: impl Into<Storage>,
    kit: participant_kit::Kit,
    addr: Option<SocketAddr>,
) -> Running {
    let storage = storage.into();
    let listener = listener(addr.unwrap_or_else(any_port)).await;
    let addr = listener.local_addr().expect("local addr");
    let shutdown = Shutdown::new();
    let stop = shutdown.clone();
    let keep = kit.history().keep;
    let task = match service {
        Service::Payment => {
            let store = storage.payment(keep).await;
            tokio::spawn(async move {
                payment_svc::serve(store, kit, listener, stop)
                    .await
                    .expect("payment serve");
            })
        }
        Service::Inventory => {
            let store = storage.inventory(keep).await;
            tokio::spawn(async move {
                inventory_svc::serve(store, kit, listener, stop)
                    .await
                    .expect("inventory serve");
            })
        }
    };
    Running {
        addr,
        shutdown,
        task: Some(task),
    }
}

/// Retry settings that keep tests fast.
pub fn fast_retry() -> RetryPolicy {
    RetryPolicy {
        action_attempts: 5,
        compensation_attempts: 30,
        min_delay: Duration::from_millis(5),
        max_delay: Duration::from_millis(100),
        step_deadline: Duration::from_secs(30),
    }
}

/// A saga of `steps` for `order` as CreateOrder stores it (version 1,
/// request id `r-<id>`), created at `created_ms` and leased by `owner`
/// until `until_ms`: what tests plant in a store for recovery to find.
pub fn leased_saga(
    steps: &[orchestrator::engine::StepNames],
    id: &str,
    order: orchestrator::saga::Order,
    created_ms: i64,
    owner: &str,
    until_ms: i64,
) -> orchestrator::saga::Saga {
    let mut saga = orchestrator::engine::start(
        steps,
        id.into(),
        format!("r-{id}"),
        "fp".into(),
        order,
        created_ms,
    );
    saga.version = 1;
    saga.lease = Some(orchestrator::saga::Lease {
        owner: owner.into(),
        until_ms,
    });
    saga
}

/// Retries that do not run out of attempts (10,000), with `step_deadline`:
/// a failing step goes on until the deadline or the test says otherwise.
pub fn retry_until(step_deadline: Duration) -> RetryPolicy {
    RetryPolicy {
        action_attempts: 10_000,
        step_deadline,
        ..fast_retry()
    }
}

/// The order saga's orchestrator over `stack`'s participants and store, on
/// a free port, with the test settings for `retry` as `adjust` changes
/// them.
pub async fn serve_order_orchestrator(
    stack: &Stack,
    retry: RetryPolicy,
    adjust: impl FnOnce(&mut orchestrator::Settings),
) -> Running {
    let listener = listener("127.0.0.1:0".parse().expect("addr")).await;
    let port = listener.local_addr().expect("addr").port();
    let mut settings = test_settings(retry, port);
    adjust(&mut settings);
    serve_orchestrator_with(
        stack.storage.clone(),
        order_saga(stack.payment.addr, stack.inventory.addr),
        settings,
        listener,
    )
    .await
}

/// Settings of an orchestrator instance named `owner` whose leases last
/// `ttl`, retrying as `retry`, with a 50 ms recovery sweep: what the lease,
/// recovery and store-fault tests start (each several instances, or one
/// whose name its assertions use).
pub fn instance_settings(owner: &str, ttl: Duration, retry: RetryPolicy) -> orchestrator::Settings {
    orchestrator::Settings {
        retry,
        lease: orchestrator::executor::LeasePolicy {
            owner: owner.into(),
            ttl,
            sweep_interval: Duration::from_millis(50),
        },
        max_wait: Duration::from_secs(10),
        max_in_flight: 10_000,
        shutdown_grace: Duration::from_secs(5),
        save_every_step: false,
        retention: Default::default(),
        console: Default::default(),
    }
}

/// Test settings: `retry`, short leases owned by `test-<port>` (stable
/// across a restart on the same port), a fast recovery sweep.
pub fn test_settings(retry: RetryPolicy, port: u16) -> orchestrator::Settings {
    let mut settings = instance_settings(&format!("test-{port}"), Duration::from_secs(3), retry);
    settings.lease.sweep_interval = Duration::from_millis(100);
    settings.max_wait = Duration::from_secs(20);
    settings
}

/// Starts the orchestrator with its store in `storage`, calling the given
/// participants.
pub async fn start_orchestrator(
    storage: impl Into<Storage>,
    payment: SocketAddr,
    inventory: SocketAddr,
    retry: RetryPolicy,
    addr: Option<SocketAddr>,
) -> Running {
    let listener = listener(addr.unwrap_or_else(any_port)).await;
    let port = listener.local_addr().expect("local addr").port();
    serve_orchestrator(
        storage,
        payment,
        inventory,
        test_settings(retry, port),
        listener,
    )
    .await
}

/// The real participants' clients, as the orchestrator binary builds them.
pub fn participants(payment: SocketAddr, inventory: SocketAddr) -> OrderParticipants {
    OrderParticipants::new(
        orchestrator::participant_channel(&format!("http://{payment}")).expect("payment channel"),
        orchestrator::participant_channel(&format!("http://{inventory}"))
            .expect("inventory channel"),
        Duration::from_secs(2),
    )
}

/// The order saga over the real participants, as the orchestrator binary
/// builds it.
pub fn order_saga(payment: SocketAddr, inventory: SocketAddr) -> Arc<SagaDefinition> {
    Arc::new(
        participants(payment, inventory)
            .definition()
            .expect("order saga"),
    )
}

/// Steps of the order saga as the orchestrator defines it: the
/// participants' `--saga-steps` for it.
pub fn order_saga_steps() -> u32 {
    let nowhere = SocketAddr::from(([127, 0, 0, 1], 1));
    u32::try_from(order_saga(nowhere, nowhere).steps().len()).unwrap_or(u32::MAX)
}

/// Starts the orchestrator with explicit settings on a bound listener.
pub async fn serve_orchestrator(
    storage: impl Into<Storage>,
    payment: SocketAddr,
    inventory: SocketAddr,
    settings: orchestrator::Settings,
    listener: tokio::net::TcpListener,
) -> Running {
    serve_orchestrator_with(storage, order_saga(payment, inventory), settings, listener).await
}

/// Starts the orchestrator with any saga definition (tests wrap the real
/// steps to inject failures precisely).
pub async fn serve_orchestrator_with(
    storage: impl Into<Storage>,
    definition: Arc<SagaDefinition>,
    settings: orchestrator::Settings,
    listener: tokio::net::TcpListener,
) -> Running {
    serve_orchestrator_as(
        storage,
        definition,
        settings,
        service_kit::server::ServeOptions::default(),
        listener,
    )
    .await
}

/// Starts the orchestrator served as `options` say (TLS, admin token).
pub async fn serve_orchestrator_as(
    storage: impl Into<Storage>,
    definition: Arc<SagaDefinition>,
    settings: orchestrator::Settings,
    options: service_kit::server::ServeOptions,
    listener: tokio::net::TcpListener,
) -> Running {
    serve_orchestrator_with_console(storage, definition, settings, options, listener, None).await
}

/// [`serve_orchestrator_as`], plus the saga console on `console` when
/// given (it stops with the orchestrator).
pub async fn serve_orchestrator_with_console(
    storage: impl Into<Storage>,
    definition: Arc<SagaDefinition>,
    settings: orchestrator::Settings,
    options: service_kit::server::ServeOptions,
    listener: tokio::net::TcpListener,
    console: Option<tokio::net::TcpListener>,
) -> Running {
    let store = storage.into().sagas_with(settings.retention.store()).await;
    serve_orchestrator_on(store, definition, settings, options, listener, console)
}

/// Starts the orchestrator on any saga store (tests wrap the real one to
/// slow it down or make it fail precisely), served as `options` say, with
/// the console on `console` when given.
pub fn serve_orchestrator_on(
    store: Arc<dyn orchestrator::store::SagaStore>,
    definition: Arc<SagaDefinition>,
    settings: orchestrator::Settings,
    options: service_kit::server::ServeOptions,
    listener: tokio::net::TcpListener,
    console: Option<tokio::net::TcpListener>,
) -> Running {
    let addr = listener.local_addr().expect("local addr");
    let shutdown = Shutdown::new();
    let stop = shutdown.clone();
    let task = tokio::spawn(async move {
        orchestrator::serve_with_console(
            store, definition, settings, options, listener, console, stop,
        )
        .await
        .expect("orchestrator serve");
    });
    Running {
        addr,
        shutdown,
        task: Some(task),
    }
}

/// The services of one test over one temp dir: both participants and,
/// unless the test starts exactly the orchestrator instances it talks
/// about ([`Stack::without_orchestrator`]), one orchestrator.
pub struct Stack {
    /// The temp dir the embedded stores live in.
    pub dir: tempfile::TempDir,
    /// Where all three services keep their state.
    pub storage: Storage,
    /// payment-svc.
    pub payment: Running,
    /// inventory-svc.
    pub inventory: Running,
    /// The stack's own orchestrator, if it has one (see
    /// [`Stack::orchestrator`]).
    pub orchestrator: Option<Running>,
}

impl Stack {
    /// All three services on embedded stores in a fresh temp dir.
    pub async fn start() -> Stack {
        let dir = tempfile::tempdir().expect("tempdir");
        let storage = Storage::from(dir.path());
        Self::start_on(dir, storage, Some(fast_retry())).await
    }

    /// [`Stack::without_orchestrator`] with inventory down, alice holding
    /// 1,000 cents and `sku-apple` 10 units: an order is charged, then its
    /// deduct keeps failing until the test restarts inventory.
    pub async fn with_inventory_down() -> Stack {
        let mut stack = Stack::without_orchestrator().await;
        stack.deposit("alice", 1_000).await;
        stack.add_stock("sku-apple", 10).await;
        stack.halt(Service::Inventory).await;
        stack
    }

    /// Both participants on embedded stores in a fresh temp dir, and no
    /// orchestrator: the test starts the instances it talks about, and no
    /// hidden one can take a saga over behind its back.
    pub async fn without_orchestrator() -> Stack {
        let dir = tempfile::tempdir().expect("tempdir");
        let storage = Storage::from(dir.path());
        Self::start_on(dir, storage, None).await
    }

    /// All three services on fresh MongoDB databases of the test target;
    /// `None` when no MongoDB is available (and not required).
    pub async fn start_mongo() -> Option<Stack> {
        Self::start_mongo_retrying(fast_retry()).await
    }

    /// [`Stack::start_mongo`] with its orchestrator retrying as `retry`.
    pub async fn start_mongo_retrying(retry: RetryPolicy) -> Option<Stack> {
        let storage = Storage::fresh_mongo()?;
        let dir = tempfile::tempdir().expect("tempdir");
        Some(Self::start_on(dir, storage, Some(retry)).await)
    }

    /// All three services over `storage`, the orchestrator keeping
    /// finished sagas as `sagas` says and the participants their records
    /// as `history` says (each store opened accordingly).
    pub async fn start_retaining(
        dir: tempfile::TempDir,
        storage: Storage,
        sagas: orchestrator::retention::RetentionSettings,
        history: participant_kit::HistoryRetention,
    ) -> Stack {
        let kit = || participant_kit::Kit::plain().with_history(history);
        let payment = start_participant_kit(Service::Payment, storage.clone(), kit(), None).await;
        let inventory =
            start_participant_kit(Service::Inventory, storage.clone(), kit(), None).await;
        let listener = listener(any_port()).await;
        let port = listener.local_addr().expect("local addr").port();
        let mut settings = test_settings(fast_retry(), port);
        settings.retention = sagas;
        let orchestrator = serve_orchestrator(
            storage.clone(),
            payment.addr,
            inventory.addr,
            settings,
            listener,
        )
        .await;
        Stack {
            dir,
            storage,
            payment,
            inventory,
            orchestrator: Some(orchestrator),
        }
    }

    /// Both participants over `storage` and, with `retry`, an orchestrator
    /// retrying as it says.
    async fn start_on(
        dir: tempfile::TempDir,
        storage: Storage,
        retry: Option<RetryPolicy>,
    ) -> Stack {
        let payment = start_participant(Service::Payment, storage.clone(), None).await;
        let inventory = start_participant(Service::Inventory, storage.clone(), None).await;
        let orchestrator = match retry {
            Some(retry) => Some(
                start_orchestrator(storage.clone(), payment.addr, inventory.addr, retry, None)
                    .await,
            ),
            None => None,
        };
        Stack {
            dir,
            storage,
            payment,
            inventory,
            orchestrator,
        }
    }

    /// The stack's own orchestrator (panics on a stack started
    /// [`Stack::without_orchestrator`]).
    pub fn orchestrator(&self) -> &Running {
        self.orchestrator
            .as_ref()
            .expect("this stack was started without an orchestrator")
    }

    /// Stops one participant (its port stays reserved for [`Stack::restart`]).
    pub async fn halt(&mut self, service: Service) {
        match service {
            Service::Payment => self.payment.halt().await,
            Service::Inventory => self.inventory.halt().await,
        }
    }

    /// Starts a halted participant again on the same storage and port.
    pub async fn restart(&mut self, service: Service) {
        let running = match service {
            Service::Payment => &mut self.payment,
            Service::Inventory => &mut self.inventory,
        };
        running.halt().await;
        *running = start_participant(service, self.storage.clone(), Some(running.addr)).await;
    }

    /// The temp dir's path.
    pub fn path(&self) -> PathBuf {
        self.dir.path().to_path_buf()
    }

    /// A client of the stack's orchestrator's OrderService.
    pub async fn orders(&self) -> OrderServiceClient<Channel> {
        OrderServiceClient::new(channel(self.orchestrator().addr).await)
    }

    /// A client of the stack's orchestrator's SagaService.
    pub async fn sagas(&self) -> SagaServiceClient<Channel> {
        SagaServiceClient::new(channel(self.orchestrator().addr).await)
    }

    /// A client of payment-svc.
    pub async fn payments(&self) -> PaymentServiceClient<Channel> {
        PaymentServiceClient::new(channel(self.payment.addr).await)
    }

    /// A client of inventory-svc.
    pub async fn inventory(&self) -> InventoryServiceClient<Channel> {
        InventoryServiceClient::new(channel(self.inventory.addr).await)
    }

    /// Gives `customer` an account holding `cents`.
    pub async fn deposit(&self, customer: &str, cents: i64) {
        self.payments()
            .await
            .deposit(payment::DepositRequest {
                request_id: format!("deposit-{customer}-{cents}"),
                customer_id: customer.into(),
                amount_cents: cents,
            })
            .await
            .expect("deposit");
    }

    /// Puts `units` of `product` in stock.
    pub async fn add_stock(&self, product: &str, units: i64) {
        self.inventory()
            .await
            .add_stock(inventory::AddStockRequest {
                request_id: format!("stock-{product}-{units}"),
                product_id: product.into(),
                quantity: units,
            })
            .await
            .expect("add stock");
    }

    /// The balance of `customer`.
    pub async fn balance(&self, customer: &str) -> i64 {
        balance(self.payment.addr, customer).await
    }

    /// The stock of `product`.
    pub async fn stock(&self, product: &str) -> i64 {
        stock(self.inventory.addr, product).await
    }

    /// CreateOrder with `wait`.
    pub async fn order(
        &self,
        request_id: &str,
        customer: &str,
        items: &[(&str, i64, i64)],
    ) -> Result<saga::CreateOrderResponse, tonic::Status> {
        self.orders()
            .await
            .create_order(order_request(request_id, customer, items, true))
            .await
            .map(|r| r.into_inner())
    }

    /// Stops every service (checking each stopped cleanly) and hands back
    /// the temp dir.
    pub async fn stop(self) -> tempfile::TempDir {
        if let Some(orchestrator) = self.orchestrator {
            orchestrator.stop().await;
        }
        self.payment.stop().await;
        self.inventory.stop().await;
        self.dir
    }
}

/// A CreateOrder request; items are (product, quantity, unit price).
pub fn order_request(
    request_id: &str,
    customer: &str,
    items: &[(&str, i64, i64)],
    wait: bool,
) -> saga::CreateOrderRequest {
    saga::CreateOrderRequest {
        request_id: request_id.into(),
        customer_id: customer.into(),
        items: items
            .iter()
            .map(|(p, q, c)| saga::OrderItem {
                product_id: (*p).into(),
                quantity: *q,
                unit_price_cents: *c,
            })
            .collect(),
        wait,
    }
}

/// CreateOrder without waiting at the orchestrator on `addr`; the new
/// saga's id.
pub async fn start_order(
    addr: SocketAddr,
    request_id: &str,
    customer: &str,
    items: &[(&str, i64, i64)],
) -> String {
    OrderServiceClient::new(channel(addr).await)
        .create_order(order_request(request_id, customer, items, false))
        .await
        .expect("create")
        .into_inner()
        .saga_id
}

/// A connected channel (retrying while the server starts).
pub async fn channel(addr: SocketAddr) -> Channel {
    let endpoint =
        tonic::transport::Endpoint::from_shared(format!("http://{addr}")).expect("endpoint");
    for _ in 0..100 {
        if let Ok(channel) = endpoint.connect().await {
            return channel;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    panic!("cannot connect to {addr}");
}

/// The balance of `customer` (GetAccount without a token).
pub async fn balance(payment_addr: SocketAddr, customer: &str) -> i64 {
    balance_as(payment_addr, customer, TokenAuth::open()).await
}

/// The balance of `customer`, read presenting `auth`'s token.
pub async fn balance_as(payment_addr: SocketAddr, customer: &str, auth: TokenAuth) -> i64 {
    PaymentServiceClient::with_interceptor(channel(payment_addr).await, auth)
        .get_account(payment::GetAccountRequest {
            customer_id: customer.into(),
            operation_limit: 0,
        })
        .await
        .expect("get account")
        .into_inner()
        .balance_cents
}

/// The stock of `product` (GetProduct without a token).
pub async fn stock(inventory_addr: SocketAddr, product: &str) -> i64 {
    stock_as(inventory_addr, product, TokenAuth::open()).await
}

/// The stock of `product`, read presenting `auth`'s token.
pub async fn stock_as(inventory_addr: SocketAddr, product: &str, auth: TokenAuth) -> i64 {
    InventoryServiceClient::with_interceptor(channel(inventory_addr).await, auth)
        .get_product(inventory::GetProductRequest {
            product_id: product.into(),
            operation_limit: 0,
        })
        .await
        .expect("get product")
        .into_inner()
        .available
}

/// The history entries of `saga` that record a change of its driver: a
/// takeover, a claim or a resume (`engine::claim`'s details). Empty for a
/// saga its creating instance drove to the end.
pub fn ownership_changes(saga: &saga::Saga) -> Vec<&str> {
    saga.history
        .iter()
        .map(|t| t.detail.as_str())
        .filter(|d| {
            d.starts_with("taken over")
                || d.starts_with("claimed by")
                || d.starts_with("resumed by")
        })
        .collect()
}

/// Polls GetSaga until the saga is terminal (or panics after `timeout`).
pub async fn wait_terminal(addr: SocketAddr, saga_id: &str, timeout: Duration) -> saga::Saga {
    let mut client = SagaServiceClient::new(channel(addr).await);
    let deadline = tokio::time::Instant::now() + timeout;
    loop {
        let s = client
            .get_saga(saga::GetSagaRequest {
                lookup: Some(saga::get_saga_request::Lookup::SagaId(saga_id.into())),
            })
            .await
            .expect("get saga")
            .into_inner();
        let terminal = matches!(
            s.status(),
            saga::SagaStatus::Completed | saga::SagaStatus::Cancelled | saga::SagaStatus::Failed
        );
        if terminal {
            return s;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "saga {saga_id} not terminal: {s:?}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Runs each scenario — an `async fn(Stack)` of the test file — once per
/// storage backend: on embedded stores, and on fresh MongoDB databases of
/// the test target (skipped when none is available and none is required).
#[macro_export]
macro_rules! on_every_backend {
    ($($name:ident),* $(,)?) => {
        mod embedded {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $name() {
                    super::$name($crate::Stack::start().await).await;
                }
            )*
        }
        mod mongo {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $name() {
                    let Some(stack) = $crate::Stack::start_mongo().await else { return };
                    super::$name(stack).await;
                }
            )*
        }
    };
}

#[cfg(test)]
mod tests {
    use super::*;

    fn running(task: JoinHandle<()>) -> Running {
        Running {
            addr: any_port(),
            shutdown: Shutdown::new(),
            task: Some(task),
        }
    }

    /// Waits (10 s at most) until `task` has ended.
    async fn ended(task: &JoinHandle<()>) {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
        while !task.is_finished() {
            assert!(tokio::time::Instant::now() < deadline, "task still running");
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }

    #[tokio::test]
    #[should_panic(expected = "failed: task")]
    async fn dropping_a_service_whose_server_panicked_fails_the_test() {
        let task = tokio::spawn(async { panic!("payment serve: bind error") });
        ended(&task).await;
        drop(running(task));
    }

    #[tokio::test]
    async fn dropping_a_service_still_serving_or_ended_cleanly_does_not_block_or_fail() {
        let serving = running(tokio::spawn(std::future::pending()));
        let started = std::time::Instant::now();
        drop(serving);
        assert!(started.elapsed() < Duration::from_secs(5), "Drop blocked");
        let task = tokio::spawn(async {});
        ended(&task).await;
        drop(running(task));
    }

    #[tokio::test]
    async fn a_test_already_panicking_is_not_panicked_again() {
        let task = tokio::spawn(async { panic!("serve failed") });
        ended(&task).await;
        let service = running(task);
        // Dropped while unwinding: a second panic would abort the process.
        let unwound = std::panic::catch_unwind(std::panic::AssertUnwindSafe(move || {
            let _service = service;
            panic!("the test's own failure");
        }));
        let payload = unwound.expect_err("the test's panic");
        assert_eq!(
            payload.downcast_ref::<&str>(),
            Some(&"the test's own failure")
        );
    }
}
