//! The soak's flags: one `Args`, parsed once in `main` and read by every
//! phase.

use std::path::PathBuf;

/// Where the services keep their state.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Backend {
    /// SQLite files in the work dir.
    Embedded,
    /// MongoDB: MONGODB_URI if set, else the MongoDB test server
    /// (SecantusDB, scripts/secantusdb.sh).
    Mongo,
}

/// The command line.
#[derive(Debug, Clone, clap::Parser)]
#[command(
    name = "chaos",
    about = "Chaos soak: real service processes, injected faults, SIGKILLs, then an audit of every store"
)]
pub struct Args {
    /// Orders (sagas) to create.
    #[arg(long, default_value_t = 1_000)]
    pub sagas: usize,
    /// Concurrent CreateOrder workers.
    #[arg(long, default_value_t = 32)]
    pub concurrency: usize,
    /// Orchestrator processes sharing one saga store, each with its own
    /// `--instance-id`; CreateOrder calls (and their duplicates) are spread
    /// over all of them.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=16))]
    pub orchestrators: u32,
    /// Times an orchestrator is SIGKILLed (and restarted) during the drive,
    /// counted across instances. With several instances the first kill
    /// keeps its victim down until other instances took over every saga it
    /// was driving (longer than the lease TTL).
    #[arg(long, default_value_t = 2)]
    pub orchestrator_kills: u32,
    /// Times each participant (loyalty-svc too, with `--third-step`) is
    /// SIGKILLed (and restarted) during the drive.
    #[arg(long, default_value_t = 1)]
    pub participant_restarts: u32,
    #[arg(long, value_enum, default_value_t = Backend::Embedded)]
    pub backend: Backend,
    /// Steps of the saga: 2 (payment, inventory: the default) up to 5.
    /// Every step after the second is one of loyalty-svc
    /// (`examples/loyalty-svc`, the Rust participant of the generic step
    /// contract: points per order, taken back on compensation) under a
    /// name of its own (`loyalty`, `loyalty-2`, `loyalty-3`): the
    /// orchestrators run a steps file, loyalty-svc is spawned on the run's
    /// backend, injected with the same faults and SIGKILLed like the
    /// participants, and the audit checks its points at every step.
    #[arg(long, default_value_t = 2, value_parser = clap::value_parser!(u8).range(2..=5))]
    pub steps: u8,
    /// Seed of the orders and of the fault sequences (default: from the clock;
    /// printed).
    #[arg(long)]
    pub seed: Option<u64>,
    /// How long every saga has to become terminal once the faults stop.
    #[arg(long, default_value_t = 60)]
    pub settle_secs: u64,
    /// Probability that a participant call fails with UNAVAILABLE first.
    #[arg(long, default_value_t = 0.05)]
    pub transient_rate: f64,
    /// Probability that an applied call's reply is lost (UNAVAILABLE).
    #[arg(long, default_value_t = 0.05)]
    pub drop_reply_rate: f64,
    /// Probability that a Charge/Deduct is refused (FAILED_PRECONDITION).
    #[arg(long, default_value_t = 0.02)]
    pub refusal_rate: f64,
    /// Each participant call is delayed by a uniform 0..=N ms.
    #[arg(long, default_value_t = 5)]
    pub latency_ms: u32,
    /// Share of orders after which an already-accepted order is sent again.
    #[arg(long, default_value_t = 0.05)]
    pub duplicate_rate: f64,
    /// Orders of the contention phase (0: none): after the drive, half of
    /// them race for the last units of one product, half for the last
    /// cents of one customer, sent at once across every instance.
    #[arg(long, default_value_t = 40)]
    pub contention_orders: usize,
    /// Directory for data and logs (default: a fresh temp dir, removed when
    /// every check passed, kept and printed otherwise).
    #[arg(long)]
    pub work_dir: Option<PathBuf>,
    /// Audit the stores of a kept run (`--work-dir` of an earlier run, which
    /// holds its `chaos-run.json`) without running anything; the exit code
    /// says whether every store check passed.
    #[arg(long, requires = "work_dir")]
    pub audit_only: bool,
    /// After the audit passed, serve the same stores again with a saga
    /// retention of 1 s and the shortest safe history retention, and check
    /// that finished sagas and expired participant records go while FAILED
    /// sagas, accounts and products stay (see `retention.rs`). The soak's
    /// own orchestrators always run with `--saga-retention off`, so nothing
    /// the audit reads can expire before it.
    #[arg(long)]
    pub retention_pass: bool,
    /// Keep the work dir even when every check passed.
    #[arg(long)]
    pub keep_work_dir: bool,
    /// Directory of the orchestrator/payment-svc/inventory-svc binaries
    /// (default: the directory of this executable).
    #[arg(long)]
    pub bin_dir: Option<PathBuf>,
    /// RUST_LOG of the services.
    #[arg(long, default_value = "warn")]
    pub log_level: String,
    /// The whole run is abandoned (children killed) after this long.
    #[arg(long, default_value_t = 600)]
    pub timeout_secs: u64,
}

impl Args {
    /// Whether the saga has loyalty steps (more than two steps), so
    /// loyalty-svc runs.
    pub fn loyalty(&self) -> bool {
        self.steps > 2
    }

    /// The names of the loyalty steps (none in a two-step saga).
    pub fn loyalty_steps(&self) -> Vec<String> {
        saga_tests::loyalty::steps_after_the_built_ins(self.steps)
    }
}
