//! [`Stack`]: the services of one test over one temp dir, with typed
//! clients and the few calls most scenarios make (deposit, add stock,
//! order, read a balance or a stock).

use crate::{
    OrchestratorHarness, ParticipantHarness, Running, Service, Storage, balance, channel,
    fast_retry, order_request, stock,
};
use orchestrator::executor::RetryPolicy;
use saga_proto::inventory::v1 as inventory;
use saga_proto::inventory::v1::inventory_service_client::InventoryServiceClient;
use saga_proto::payment::v1 as payment;
use saga_proto::payment::v1::payment_service_client::PaymentServiceClient;
use saga_proto::saga::v1 as saga;
use saga_proto::saga::v1::order_service_client::OrderServiceClient;
use saga_proto::saga::v1::saga_service_client::SagaServiceClient;
use std::path::PathBuf;
use tonic::transport::Channel;

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

    /// Both participants on fresh MongoDB databases of the test target, and
    /// no orchestrator (see [`Stack::without_orchestrator`]); `None` when no
    /// MongoDB is available (and not required).
    pub async fn without_orchestrator_mongo() -> Option<Stack> {
        let storage = Storage::fresh_mongo()?;
        let dir = tempfile::tempdir().expect("tempdir");
        Some(Self::start_on(dir, storage, None).await)
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
        let participant = |service| {
            ParticipantHarness::new(service, storage.clone())
                .history(history)
                .start()
        };
        let payment = participant(Service::Payment).await;
        let inventory = participant(Service::Inventory).await;
        let orchestrator =
            OrchestratorHarness::order_saga(storage.clone(), payment.addr, inventory.addr)
                .adjust(move |settings| settings.retention = sagas)
                .start()
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
        let payment = ParticipantHarness::new(Service::Payment, storage.clone())
            .start()
            .await;
        let inventory = ParticipantHarness::new(Service::Inventory, storage.clone())
            .start()
            .await;
        let orchestrator = match retry {
            Some(retry) => Some(
                OrchestratorHarness::order_saga(storage.clone(), payment.addr, inventory.addr)
                    .retry(retry)
                    .start()
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

    /// An orchestrator of the order saga over this stack's participants and
    /// storage, to configure and start (see [`OrchestratorHarness`]).
    pub fn orchestrator_harness(&self) -> OrchestratorHarness {
        OrchestratorHarness::order_saga(
            self.storage.clone(),
            self.payment.addr,
            self.inventory.addr,
        )
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
        *running = ParticipantHarness::new(service, self.storage.clone())
            .on(running.addr)
            .start()
            .await;
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
