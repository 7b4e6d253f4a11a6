//! The flags of `loadgen`: one `Args`, turned into a [`crate::plan::Plan`]
//! with every default resolved.

use std::path::PathBuf;
use std::time::Duration;

/// Store of a spawned stack.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Backend {
    /// SQLite files in a fresh temp dir.
    Embedded,
    /// MongoDB: MONGODB_URI when set, else the MongoDB test server
    /// (SecantusDB, scripts/secantusdb.sh).
    Mongo,
}

/// `--durability` of a spawned stack's embedded stores.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum DurabilityArg {
    /// Commits survive kill -9 of a service.
    Process,
    /// fsync on every (group) commit.
    PowerLoss,
}

impl DurabilityArg {
    /// The services' `--durability` value.
    pub fn as_str(self) -> &'static str {
        match self {
            DurabilityArg::Process => "process",
            DurabilityArg::PowerLoss => "power-loss",
        }
    }
}

#[derive(Debug, clap::Parser)]
#[command(
    name = "loadgen",
    about = "Load generator: saga throughput and latency versus the raw Charge+Deduct floor"
)]
/// The command line.
pub struct Args {
    /// Orchestrator of a running stack (e.g. http://127.0.0.1:50051);
    /// needs --payment and --inventory too (and --loyalty with --steps 3).
    /// Without it the stack is spawned.
    #[arg(long, requires_all = ["payment", "inventory"], conflicts_with = "spawn")]
    pub orchestrator: Option<String>,
    /// payment-svc of the running stack (seeding, floor, audit).
    #[arg(long, requires = "orchestrator")]
    pub payment: Option<String>,
    /// inventory-svc of the running stack (seeding, floor, audit).
    #[arg(long, requires = "orchestrator")]
    pub inventory: Option<String>,
    /// loyalty-svc of the running stack (`--steps 3` or more: its
    /// ListOperations for the audit), serving every step after the second
    /// in the orchestrator's steps file (see [`crate::stack::loyalty_steps`]).
    #[arg(long, requires = "orchestrator")]
    pub loyalty: Option<String>,
    /// Steps of the saga: 2 (payment, inventory: the default) up to 5;
    /// each step after the second awards loyalty-svc's points, a generic
    /// `participant.v1.SagaStepService` step under a name of its own
    /// (`loyalty`, `loyalty-2`, `loyalty-3`: its own request ids and
    /// records). A spawned stack starts one loyalty-svc beside the
    /// participants, on the same backend, serving them all, and the
    /// orchestrator with a steps file.
    #[arg(long, default_value_t = 2, value_parser = clap::value_parser!(u8).range(2..=5))]
    pub steps: u8,
    /// Start orchestrator, payment-svc and inventory-svc (the binaries next
    /// to this one) on free 127.0.0.1 ports with fresh data. The default.
    #[arg(long)]
    pub spawn: bool,
    /// Store of the spawned stack.
    #[arg(long, value_enum, default_value_t = Backend::Embedded)]
    pub backend: Backend,
    /// Durability of the spawned stack's embedded stores.
    #[arg(long, env = "DURABILITY", value_enum, default_value_t = DurabilityArg::Process)]
    pub durability: DurabilityArg,
    /// Where the service binaries are (default: next to loadgen).
    #[arg(long)]
    pub bin_dir: Option<PathBuf>,
    /// Parent of the spawned stack's temp data dir (default: the system temp dir).
    #[arg(long)]
    pub tmp_dir: Option<PathBuf>,
    /// Keep the spawned stack's data dir and logs.
    #[arg(long)]
    pub keep_data: bool,
    /// Calls in flight at once (default 64; smoke 16; single 1). On the
    /// MongoDB test server (a Python server, the bottleneck) the defaults
    /// are 8 and 4: more only adds write-conflict retries. A list
    /// (`1,4,16,64,256`) is a sweep: one measured phase per concurrency,
    /// against the same stack, each `--duration` long (default 5 s).
    #[arg(short = 'c', long, value_delimiter = ',', num_args = 1..)]
    pub concurrency: Vec<usize>,
    /// Where a sweep writes its figures as JSON (default `loadgen-sweep.json`).
    #[arg(long)]
    pub sweep_json: Option<PathBuf>,
    /// Where a sweep draws its latency-versus-throughput plot (SVG).
    #[arg(long)]
    pub plot: Option<PathBuf>,
    /// Measure this many sagas (default: --duration 10).
    #[arg(short = 'n', long, conflicts_with = "duration")]
    pub sagas: Option<u64>,
    /// Measure for this many seconds.
    #[arg(short = 'd', long)]
    pub duration: Option<f64>,
    /// Seconds of uncounted traffic before each measured phase (default 1;
    /// smoke 0; single 0.5). Its errors still count.
    #[arg(long)]
    pub warmup: Option<f64>,
    /// HTTP/2 connections per service, shared round-robin by the workers.
    #[arg(long, default_value_t = 8)]
    pub connections: usize,
    /// Lines per order (distinct products, quantity 1, 100 cents each).
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u16).range(1..=100))]
    pub items: u16,
    /// Fraction of orders whose charge is refused (a customer with 1 cent):
    /// CANCELLED with nothing to undo (default 0; smoke 0.1).
    #[arg(long)]
    pub cancel_ratio: Option<f64>,
    /// Fraction of orders whose deduction is refused (a product short of
    /// stock): charge then refund, CANCELLED (default 0; smoke 0.05).
    #[arg(long)]
    pub compensate_ratio: Option<f64>,
    /// Seeded customers with huge balances, to spread the write load
    /// (default 256; 32 with --backend mongo).
    #[arg(long)]
    pub customers: Option<usize>,
    /// Seeded products with huge stock (default 256; 32 with --backend mongo).
    #[arg(long)]
    pub products: Option<usize>,
    /// Concurrent seeding calls (default 32; 4 with --backend mongo, whose
    /// test server is slow).
    #[arg(long)]
    pub seed_concurrency: Option<usize>,
    /// Skip the raw floor (Charge + Deduct without the orchestrator).
    #[arg(long)]
    pub no_floor: bool,
    /// Short CI run (300 sagas at concurrency 16 with a cancel and
    /// compensation mix): fails on errors, stuck sagas or a mix mismatch,
    /// never on timings. Last line: `loadgen smoke: N passed, N failed`.
    #[arg(long, conflicts_with = "single")]
    pub smoke: bool,
    /// Sequential single-saga latency on an idle stack (concurrency 1,
    /// 2000 sagas unless --sagas).
    #[arg(long)]
    pub single: bool,
    /// Give up after this many seconds in all (default 900; smoke 300).
    #[arg(long)]
    pub timeout: Option<f64>,
    /// Deadline of one CreateOrder (sent as grpc-timeout; the orchestrator
    /// holds a `wait` call at most that long) or floor RPC, in ms.
    #[arg(long, default_value_t = 20_000)]
    pub call_timeout_ms: u64,
    /// Processes of a running stack to report memory and CPU of:
    /// `name=pid,...`, or bare pids (orchestrator, payment-svc, inventory-svc,
    /// loyalty-svc).
    #[arg(long, value_delimiter = ',')]
    pub pids: Vec<String>,
    /// How often the spawned services refresh their `store_size_bytes`
    /// gauge (their `--purge-interval`, given as PURGE_INTERVAL; e.g. 1s,
    /// 500ms). Store bytes per saga reads the gauges before and after the
    /// measured saga phase, each time once every gauge has held its value
    /// for more than an interval (1.5 × it, at least interval + 0.5 s).
    /// Default 1s; 5s on the MongoDB test server, whose collStats scans
    /// every collection under its global lock. Not measured in a sweep nor
    /// against a running stack.
    #[arg(long, value_parser = service_kit::limits::parse_duration)]
    pub purge_interval: Option<Duration>,
    /// Do not measure store bytes per saga: an embedded stack serves no
    /// metrics (they cost CPU on every call), the services keep their own
    /// purge interval, and no time is spent waiting for the gauges.
    #[arg(long)]
    pub no_store_size: bool,
    /// Admin token for the seeding calls (Deposit, AddStock) when the
    /// services require one; a spawned stack is given the same token.
    #[arg(long, env = "ADMIN_TOKEN", hide_env_values = true)]
    pub admin_token: Option<String>,
}
