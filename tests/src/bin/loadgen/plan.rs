//! The run as planned: the flags checked and every default resolved for the
//! mode (full, `--smoke`, `--single`) and the store (the MongoDB test
//! servers get fewer workers: they serialise transactions).

use crate::args::{Args, Backend};
use crate::catalog::Mix;
use crate::procs::{self, Watched};
use crate::stack::{self, SpawnConfig};
use saga_tests::mongo_server;
use std::path::PathBuf;
use std::time::Duration;

/// What kind of run.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    Full,
    Smoke,
    Single,
}

impl Mode {
    /// From `--smoke` / `--single`.
    fn of(args: &Args) -> Mode {
        if args.smoke {
            Mode::Smoke
        } else if args.single {
            Mode::Single
        } else {
            Mode::Full
        }
    }

    /// Its name in the report.
    pub fn as_str(self) -> &'static str {
        match self {
            Mode::Full => "full",
            Mode::Smoke => "smoke",
            Mode::Single => "single",
        }
    }

    /// Its defaults; on a MongoDB test server (`stand_in`) fewer workers
    /// and a longer purge interval.
    fn defaults(self, stand_in: bool) -> Defaults {
        let (concurrency, amount, warmup, cancel, compensate, timeout) = match self {
            Mode::Full => (64, Amount::Seconds(10.0), 1.0, 0.0, 0.0, 900.0),
            Mode::Smoke => (16, Amount::Sagas(300), 0.0, 0.1, 0.05, 300.0),
            Mode::Single => (1, Amount::Sagas(2000), 0.5, 0.0, 0.0, 900.0),
        };
        let concurrency = match (stand_in, self) {
            (true, Mode::Full) => 8,
            (true, _) => concurrency.min(4),
            (false, _) => concurrency,
        };
        // The store size gauges' period: short, so their waits are short;
        // on the test server longer, as each refresh is a collStats that
        // scans the collections under the server's global lock.
        let purge_interval = Duration::from_secs(if stand_in { 5 } else { 1 });
        Defaults {
            concurrency,
            amount,
            warmup,
            cancel,
            compensate,
            timeout,
            purge_interval,
        }
    }
}

/// What a mode does unless a flag says otherwise.
struct Defaults {
    concurrency: usize,
    amount: Amount,
    warmup: f64,
    cancel: f64,
    compensate: f64,
    timeout: f64,
    /// The spawned services' purge interval (store bytes per saga).
    purge_interval: Duration,
}

/// A running stack's orchestrator, payment-svc and inventory-svc URLs.
pub type Urls = (String, String, String);

/// How much to measure.
#[derive(Clone, Copy, Debug)]
pub enum Amount {
    Sagas(u64),
    Seconds(f64),
}

/// The run, with every default resolved.
pub struct Plan {
    pub mode: Mode,
    /// The stack to start (none against a running stack).
    pub spawn: Option<SpawnConfig>,
    /// A running stack: orchestrator, payment-svc, inventory-svc URLs.
    pub addrs: Option<Urls>,
    /// A running stack's processes to report on.
    pub pids: Vec<Watched>,
    /// Steps of the saga (`--steps`): 2, or up to 5 with loyalty-svc.
    pub steps: u8,
    /// A running stack's loyalty-svc (`--loyalty`, with `--steps` > 2).
    pub loyalty: Option<String>,
    pub concurrency: usize,
    pub connections: usize,
    pub amount: Amount,
    /// Seconds of uncounted traffic before each measured phase.
    pub warmup: f64,
    pub items: usize,
    pub mix: Mix,
    pub customers: usize,
    pub products: usize,
    pub seed_concurrency: usize,
    pub floor: bool,
    pub timeout: Duration,
    pub call_timeout: Duration,
    /// Run id: prefix of every name the run creates.
    pub run: String,
    pub admin_token: Option<String>,
    /// `--concurrency` with several values: one measured level each (empty:
    /// a single run at `concurrency`).
    pub sweep: Vec<usize>,
    /// Where the sweep's JSON goes.
    pub sweep_json: PathBuf,
    /// Where the sweep's SVG plot goes, if anywhere.
    pub plot: Option<PathBuf>,
    /// The services' purge interval, when store bytes per saga are measured
    /// (not with `--no-store-size`, in a sweep, nor against a running stack).
    pub store_size: Option<Duration>,
}

/// Checks the flags and resolves the defaults.
pub fn plan(args: Args) -> Result<Plan, String> {
    let mode = Mode::of(&args);
    let mongo = args.orchestrator.is_none() && args.backend == Backend::Mongo;
    let stand_in = mongo && mongo_server::external_uri().is_none();
    let defaults = mode.defaults(stand_in);
    let sweep = sweep(&args, mode, &defaults)?;
    let concurrency = concurrency(
        mode,
        args.concurrency.iter().copied().max(),
        defaults.concurrency,
    )?;
    let default_amount = if sweep.is_empty() {
        defaults.amount
    } else {
        Amount::Seconds(5.0)
    };
    let amount = amount(args.sagas, args.duration, default_amount)?;
    let warmup = warmup(&args, &defaults)?;
    let mix = mix(&args, &defaults)?;
    let population = Population::of(&args, mongo)?;
    let timeout = timeout(&args, &defaults)?;
    let run = format!("lg-{}", &uuid::Uuid::now_v7().simple().to_string()[20..]);
    let pids = procs::parse_pids(&args.pids)?;
    let connections = if mode == Mode::Single {
        1
    } else {
        args.connections.clamp(1, concurrency)
    };
    let (floor, call_timeout) = (!args.no_floor, args.call_timeout_ms.max(1));
    let admin_token = args.admin_token.clone();
    let sweep_json = args
        .sweep_json
        .clone()
        .unwrap_or_else(|| PathBuf::from("loadgen-sweep.json"));
    let plot = args.plot.clone();
    let purge_interval = purge_interval(&args, &defaults, sweep.is_empty())?;
    let (steps, loyalty) = (args.steps, args.loyalty.clone());
    if steps > 2 && args.orchestrator.is_some() && loyalty.is_none() {
        return Err(format!(
            "--steps {steps} against a running stack needs --loyalty (its loyalty-svc)"
        ));
    }
    if steps == 2 && loyalty.is_some() {
        return Err("--loyalty is for --steps 3 or more".into());
    }
    let (spawn, addrs) = target(args, &pids, &run, purge_interval)?;
    let store_size = spawn.as_ref().and_then(|s| s.purge_interval);
    Ok(Plan {
        mode,
        spawn,
        addrs,
        pids,
        steps,
        loyalty,
        concurrency,
        connections,
        amount,
        warmup,
        items: population.items,
        mix,
        customers: population.customers,
        products: population.products,
        seed_concurrency: population.seed_concurrency,
        floor,
        timeout: Duration::from_secs_f64(timeout),
        call_timeout: Duration::from_millis(call_timeout),
        run,
        admin_token,
        sweep,
        sweep_json,
        plot,
        store_size,
    })
}

/// A `--concurrency` list (a sweep, full runs only), each level checked;
/// empty for a single value.
fn sweep(args: &Args, mode: Mode, defaults: &Defaults) -> Result<Vec<usize>, String> {
    if args.concurrency.len() <= 1 {
        return Ok(Vec::new());
    }
    if mode != Mode::Full {
        return Err(
            "a --concurrency list (a sweep) is for full runs, not --smoke or --single".into(),
        );
    }
    for c in &args.concurrency {
        concurrency(mode, Some(*c), defaults.concurrency)?;
    }
    Ok(args.concurrency.clone())
}

/// `--warmup` seconds, checked.
fn warmup(args: &Args, defaults: &Defaults) -> Result<f64, String> {
    let warmup = args.warmup.unwrap_or(defaults.warmup);
    if !(0.0..=3600.0).contains(&warmup) {
        return Err(format!(
            "--warmup must be in [0, 3600] seconds (got {warmup})"
        ));
    }
    Ok(warmup)
}

/// What is seeded and ordered: `--items` per order, `--customers`,
/// `--products` (fewer on MongoDB) and how many seed calls run at once.
struct Population {
    items: usize,
    customers: usize,
    products: usize,
    seed_concurrency: usize,
}

impl Population {
    /// From the flags, checked.
    fn of(args: &Args, mongo: bool) -> Result<Population, String> {
        let items = usize::from(args.items);
        let customers = args.customers.unwrap_or(if mongo { 32 } else { 256 });
        let products = args.products.unwrap_or(if mongo { 32 } else { 256 });
        let seed_concurrency = args.seed_concurrency.unwrap_or(if mongo { 4 } else { 32 });
        if customers == 0 || products < items || customers > 1_000_000 || products > 1_000_000 {
            return Err(format!(
                "need 1 <= --customers <= 1000000 and --items ({items}) <= --products <= 1000000"
            ));
        }
        Ok(Population {
            items,
            customers,
            products,
            seed_concurrency,
        })
    }
}

/// `--timeout` seconds, checked.
fn timeout(args: &Args, defaults: &Defaults) -> Result<f64, String> {
    let timeout = args.timeout.unwrap_or(defaults.timeout);
    if !(timeout > 0.0 && timeout <= 7.0 * 86_400.0) {
        return Err(format!("--timeout must be positive (got {timeout})"));
    }
    Ok(timeout)
}

/// `--purge-interval`, checked; None when store bytes per saga are not
/// measured (`--no-store-size`, or a sweep: it has several measured
/// phases, and it keeps metrics off on an embedded stack).
fn purge_interval(
    args: &Args,
    defaults: &Defaults,
    single_level: bool,
) -> Result<Option<Duration>, String> {
    let purge_interval = args.purge_interval.unwrap_or(defaults.purge_interval);
    if purge_interval < Duration::from_millis(10) {
        return Err(format!(
            "--purge-interval must be at least 10ms (got {})",
            service_kit::limits::format_duration(purge_interval)
        ));
    }
    Ok((!args.no_store_size && single_level).then_some(purge_interval))
}

/// `--concurrency` (1 for `--single`), checked.
fn concurrency(mode: Mode, flag: Option<usize>, default: usize) -> Result<usize, String> {
    let concurrency = if mode == Mode::Single {
        if flag.is_some_and(|c| c != 1) {
            return Err("--single runs at concurrency 1".into());
        }
        1
    } else {
        flag.unwrap_or(default)
    };
    if concurrency == 0 || concurrency > 10_000 {
        return Err(format!(
            "--concurrency must be 1..=10000 (got {concurrency})"
        ));
    }
    Ok(concurrency)
}

/// `--sagas` or `--duration`, checked.
fn amount(sagas: Option<u64>, duration: Option<f64>, default: Amount) -> Result<Amount, String> {
    match (sagas, duration) {
        (Some(0), _) => Err("--sagas must be positive".into()),
        (Some(n), _) => Ok(Amount::Sagas(n)),
        (None, Some(t)) if !(t > 0.0 && t <= 86_400.0) => Err(format!(
            "--duration must be in (0, 86400] seconds (got {t})"
        )),
        (None, Some(t)) => Ok(Amount::Seconds(t)),
        (None, None) => Ok(default),
    }
}

/// `--cancel-ratio` and `--compensate-ratio`, checked.
fn mix(args: &Args, defaults: &Defaults) -> Result<Mix, String> {
    let mix = Mix {
        cancel: fraction(
            "--cancel-ratio",
            args.cancel_ratio.unwrap_or(defaults.cancel),
        )?,
        compensate: fraction(
            "--compensate-ratio",
            args.compensate_ratio.unwrap_or(defaults.compensate),
        )?,
    };
    if mix.cancel + mix.compensate > 1.0 {
        return Err("--cancel-ratio + --compensate-ratio must not exceed 1".into());
    }
    Ok(mix)
}

fn fraction(name: &str, v: f64) -> Result<f64, String> {
    if (0.0..=1.0).contains(&v) {
        Ok(v)
    } else {
        Err(format!("{name} must be between 0 and 1 (got {v})"))
    }
}

/// A running stack (`--orchestrator`, …) or the stack to spawn.
fn target(
    args: Args,
    pids: &[Watched],
    run: &str,
    purge_interval: Option<Duration>,
) -> Result<(Option<SpawnConfig>, Option<Urls>), String> {
    if let Some(orchestrator) = args.orchestrator {
        let addrs = (
            orchestrator,
            args.payment.unwrap_or_default(),
            args.inventory.unwrap_or_default(),
        );
        return Ok((None, Some(addrs)));
    }
    if !pids.is_empty() {
        return Err("--pids is for a running stack (with --orchestrator)".into());
    }
    let spawn = SpawnConfig {
        mongo: args.backend == Backend::Mongo,
        durability: args.durability.as_str(),
        bin_dir: args.bin_dir.unwrap_or_else(stack::default_bin_dir),
        tmp_parent: args.tmp_dir,
        keep_data: args.keep_data,
        run: run.to_owned(),
        admin_token: args.admin_token,
        purge_interval,
        steps: args.steps,
    };
    Ok((Some(spawn), None))
}
