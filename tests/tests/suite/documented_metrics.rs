//! The metric families docs/operations.md lists ("Every metric family")
//! are every family the services export: the list is read from that file,
//! so the document is the list, and the real binaries are started as
//! processes, driven through sagas and scraped.
//!
//! - `the_documented_families_follow_the_naming_scheme`: the table parses,
//!   lists each family once, and each name has a component prefix and its
//!   unit (`_total` for a counter, `_seconds` or `_bytes` for a histogram).
//! - `every_family_the_services_export_is_documented` (embedded stores) and
//!   `…_on_mongodb`: orchestrator, payment-svc, inventory-svc and
//!   loyalty-svc, each its own process on ephemeral ports, run three sagas
//!   (completed; refused at payment; refused at loyalty, so inventory and
//!   payment are compensated); each service's `/metrics` must hold only
//!   documented families, of the documented type, with documented labels,
//!   from a service the table says serves them — and the families every
//!   such run must show, so that an empty scrape cannot pass.
//! - `every_family_the_dev_command_exports_is_documented`: the same for
//!   `dev`, all three services in one process on one endpoint, after its
//!   three demo orders.
//!
//! The binaries must be built (`source scripts/lib/build-workspace.sh &&
//! build_workspace`; the test command does). Every wait is on a condition
//! with a timeout; every process is stopped by the test, also when it
//! fails (on drop).

use saga_proto::inventory::v1 as inventory;
use saga_proto::inventory::v1::inventory_service_client::InventoryServiceClient;
use saga_proto::payment::v1 as payment;
use saga_proto::payment::v1::payment_service_client::PaymentServiceClient;
use saga_proto::saga::v1 as saga;
use saga_proto::saga::v1::order_service_client::OrderServiceClient;
use saga_tests::backends::MongoTarget;
use saga_tests::prometheus::{self, Scrape};
use saga_tests::service_process::{ServiceProcess, free_addr};
use saga_tests::{channel, order_request, process};
use std::collections::{BTreeMap, BTreeSet};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;
use tokio::time::Instant;

/// How long a service has to start, the sagas to end, a process to stop.
const LIMIT: Duration = Duration::from_secs(30);

/// Who serves a family: the table's "served by" column.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum ServedBy {
    Orchestrator,
    Participants,
    Every,
}

impl ServedBy {
    fn parse(cell: &str) -> Result<ServedBy, String> {
        match cell {
            "orchestrator" => Ok(ServedBy::Orchestrator),
            "participants" => Ok(ServedBy::Participants),
            "every service" => Ok(ServedBy::Every),
            other => Err(format!(
                "served by {other:?}: not orchestrator, participants or every service"
            )),
        }
    }

    /// Whether a family the table says is served by `self` may come from
    /// a service of role `role`.
    fn includes(self, role: ServedBy) -> bool {
        self == ServedBy::Every || self == role
    }
}

/// One row of the table.
#[derive(Debug)]
struct Documented {
    kind: String,
    labels: BTreeSet<String>,
    served_by: ServedBy,
}

/// The operations manual, where the list is.
fn operations_md() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs/operations.md")
}

/// The families of docs/operations.md's "Every metric family" table.
fn documented() -> BTreeMap<String, Documented> {
    let path = operations_md();
    let text =
        std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("read {}: {e}", path.display()));
    parse_table(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// The cells of one table row, trimmed.
fn cells(line: &str) -> Vec<&str> {
    let inner = line.trim().trim_start_matches('|').trim_end_matches('|');
    inner.split('|').map(str::trim).collect()
}

/// `` `name` `` → `name`; `None` for a cell that is not one code span.
fn code(cell: &str) -> Option<&str> {
    let name = cell.strip_prefix('`')?.strip_suffix('`')?;
    (!name.is_empty() && !name.contains('`')).then_some(name)
}

/// Parses the first table after the `### Every metric family` heading;
/// a row whose first cell is not one code span (`| **sagas** | …`) heads a
/// group and is skipped.
fn parse_table(text: &str) -> Result<BTreeMap<String, Documented>, String> {
    let (_, section) = text
        .split_once("\n### Every metric family\n")
        .ok_or("no \"### Every metric family\" section")?;
    let mut lines = section
        .lines()
        .skip_while(|l| !l.starts_with('|'))
        .take_while(|l| l.starts_with('|'));
    let header = cells(lines.next().ok_or("no table in the section")?);
    let column = |name: &str| {
        header
            .iter()
            .position(|h| *h == name)
            .ok_or(format!("the table has no {name:?} column: {header:?}"))
    };
    let (family, kind, labels, served_by) = (
        column("family")?,
        column("type")?,
        column("labels")?,
        column("served by")?,
    );
    lines.next(); // |---|---|
    let mut families = BTreeMap::new();
    for line in lines {
        let row = cells(line);
        let Some(name) = row.get(family).copied().and_then(code) else {
            continue;
        };
        let cell = |i: usize| {
            row.get(i)
                .copied()
                .ok_or(format!("{name}: a row of {} cells", row.len()))
        };
        let kind = match cell(kind)? {
            k @ ("counter" | "gauge" | "histogram") => k.to_owned(),
            other => return Err(format!("{name}: type {other:?}")),
        };
        let labels = match cell(labels)? {
            "—" => BTreeSet::new(),
            list => list
                .split(',')
                .map(|l| {
                    code(l.trim())
                        .map(str::to_owned)
                        .ok_or(format!("{name}: label {l:?} is not `name`"))
                })
                .collect::<Result<_, _>>()?,
        };
        let served_by = ServedBy::parse(cell(served_by)?).map_err(|e| format!("{name}: {e}"))?;
        let row = Documented {
            kind,
            labels,
            served_by,
        };
        if families.insert(name.to_owned(), row).is_some() {
            return Err(format!("{name} is listed twice"));
        }
    }
    if families.is_empty() {
        return Err("the table lists no family".into());
    }
    Ok(families)
}

/// A family as one scrape exports it.
#[derive(Debug)]
struct Exported {
    kind: String,
    labels: BTreeSet<String>,
}

/// Every family of `scrape`: its `# TYPE` lines, and the labels its
/// samples carry (a histogram's `le` aside); a sample of no typed family
/// is a problem.
fn exported(scrape: &Scrape) -> (BTreeMap<String, Exported>, Vec<String>) {
    let mut families: BTreeMap<String, Exported> = BTreeMap::new();
    for line in scrape.text.lines() {
        let mut words = line.split_whitespace();
        if let (Some("#"), Some("TYPE"), Some(name), Some(kind)) =
            (words.next(), words.next(), words.next(), words.next())
        {
            let kind = kind.to_owned();
            let labels = BTreeSet::new();
            families.insert(name.to_owned(), Exported { kind, labels });
        }
    }
    let mut problems = Vec::new();
    for sample in &scrape.samples {
        let histogram_of = ["_bucket", "_sum", "_count"]
            .iter()
            .filter_map(|suffix| sample.name.strip_suffix(suffix))
            .find(|base| families.get(*base).is_some_and(|f| f.kind == "histogram"));
        let name = match histogram_of {
            Some(base) => base,
            None if families.contains_key(&sample.name) => sample.name.as_str(),
            None => {
                problems.push(format!("sample {} has no # TYPE line", sample.name));
                continue;
            }
        };
        let family = families.get_mut(name).expect("a typed family");
        family.labels.extend(
            sample
                .labels
                .keys()
                .filter(|l| !(histogram_of.is_some() && *l == "le"))
                .cloned(),
        );
    }
    (families, problems)
}

/// What in `scrape` (from `service`, of `role`; `None`: the dev command,
/// which is every role) the table does not say.
fn undocumented(
    service: &str,
    role: Option<ServedBy>,
    scrape: &Scrape,
    docs: &BTreeMap<String, Documented>,
) -> Vec<String> {
    let (families, mut problems) = exported(scrape);
    for problem in &mut problems {
        *problem = format!("{service}: {problem}");
    }
    for (name, family) in &families {
        let Some(doc) = docs.get(name) else {
            problems.push(format!(
                "{service} exports {name} ({}, labels {:?}), which the table does not list",
                family.kind, family.labels
            ));
            continue;
        };
        if doc.kind != family.kind {
            problems.push(format!(
                "{service} exports {name} as a {}, the table says {}",
                family.kind, doc.kind
            ));
        }
        let extra: Vec<_> = family.labels.difference(&doc.labels).collect();
        if !extra.is_empty() {
            problems.push(format!(
                "{service} exports {name} with labels {extra:?} the table does not list ({:?})",
                doc.labels
            ));
        }
        if let Some(role) = role
            && !doc.served_by.includes(role)
        {
            problems.push(format!(
                "{service} ({role:?}) exports {name}, which the table says is served by {:?}",
                doc.served_by
            ));
        }
    }
    problems
}

/// Fails with every problem of every scrape at once, and the scrapes.
fn assert_documented(scrapes: &[(String, Option<ServedBy>, Scrape)], must: &[(&str, &[&str])]) {
    let docs = documented();
    let mut problems = Vec::new();
    for (service, role, scrape) in scrapes {
        problems.extend(undocumented(service, *role, scrape, &docs));
        let (families, _) = exported(scrape);
        let wanted = must
            .iter()
            .filter(|(who, _)| service.starts_with(who))
            .flat_map(|(_, names)| names.iter());
        for name in wanted {
            if !families.contains_key(*name) {
                problems.push(format!("{service} does not export {name} after the sagas"));
            }
        }
    }
    if !problems.is_empty() {
        let texts: Vec<String> = scrapes
            .iter()
            .map(|(service, _, s)| format!("--- {service}\n{}", s.text))
            .collect();
        panic!(
            "docs/operations.md (\"Every metric family\") and what the services export differ:\n  {}\n\n{}",
            problems.join("\n  "),
            texts.join("\n")
        );
    }
}

#[test]
fn the_documented_families_follow_the_naming_scheme() {
    let docs = documented();
    assert!(docs.len() >= 20, "{docs:?}");
    for (name, doc) in &docs {
        assert!(
            [
                "saga_",
                "participant_",
                "store_",
                "embedded_store_",
                "mongodb_"
            ]
            .iter()
            .any(|prefix| name.starts_with(prefix)),
            "{name}: no component prefix"
        );
        match doc.kind.as_str() {
            "counter" => assert!(name.ends_with("_total"), "{name}: a counter ends in _total"),
            "histogram" => assert!(
                name.ends_with("_seconds") || name.ends_with("_bytes"),
                "{name}: a histogram ends in its unit"
            ),
            _ => assert!(!name.ends_with("_total"), "{name}: a gauge is no _total"),
        }
    }
    let mut text = std::fs::read_to_string(operations_md()).expect("operations.md");
    text = text.replace("| `saga_in_flight` |", "| `saga_started_total` |");
    assert!(
        parse_table(&text).is_err_and(|e| e.contains("saga_started_total is listed twice")),
        "the parser sees a family listed twice"
    );
}

/// The stores the services run on.
enum Backend<'a> {
    Embedded,
    Mongo(&'a MongoTarget),
}

/// A service binary and where it serves its metrics.
struct Running {
    process: ServiceProcess,
    metrics: SocketAddr,
    role: ServedBy,
}

/// Starts `binary` (its gRPC on a free port, its metrics on another, its
/// store per `backend`, data under `dir`) with `args` and `env` added;
/// waits until it is ready.
async fn start(
    binary: &'static str,
    role: ServedBy,
    args: &[&str],
    env: &[(&str, &str)],
    backend: &Backend<'_>,
    dir: &Path,
) -> Running {
    let metrics = free_addr();
    let data = dir.join(binary);
    let (metrics_s, data_s) = (metrics.to_string(), data.to_str().expect("UTF-8 path"));
    let database = format!(
        "test_{}_{}",
        binary.replace('-', "_"),
        uuid::Uuid::now_v7().simple()
    );
    let mut all_args = args.to_vec();
    all_args.extend(["--data-dir", data_s, "--metrics-listen", &metrics_s]);
    let mut all_env = env.to_vec();
    if let Backend::Mongo(target) = backend {
        all_args.extend(["--mongodb-database", database.as_str()]);
        all_env.push(("MONGODB_URI", target.uri.as_str()));
    }
    let process = ServiceProcess::spawn(binary, free_addr(), &all_args, &all_env, dir);
    process.until_ready(LIMIT).await;
    Running {
        process,
        metrics,
        role,
    }
}

/// CreateOrder (waiting for the end) of one apple at `cents` for `customer`.
async fn order(addr: SocketAddr, request_id: &str, customer: &str, cents: i64) -> saga::Saga {
    OrderServiceClient::new(channel(addr).await)
        .create_order(order_request(
            request_id,
            customer,
            &[("sku-apple", 1, cents)],
            true,
        ))
        .await
        .expect("create order")
        .into_inner()
        .saga
        .expect("the saga of a waiting CreateOrder")
}

/// The four services on `backend`, three sagas through them, every
/// scrape checked against the table.
async fn the_services_on(backend: Backend<'_>) {
    let dir = tempfile::tempdir().expect("temp dir");
    let dir = dir.path();
    let participant = ServedBy::Participants;
    let payment = start("payment-svc", participant, &[], &[], &backend, dir).await;
    let inventory = start("inventory-svc", participant, &[], &[], &backend, dir).await;
    let blocked = [("LOYALTY_BLOCKED_CUSTOMERS", "mallory")];
    let loyalty = start("loyalty-svc", participant, &[], &blocked, &backend, dir).await;
    let steps = dir.join("saga-steps.toml");
    let loyalty_url = format!("http://{}", loyalty.process.addr);
    std::fs::write(
        &steps,
        saga_tests::loyalty::steps_file_text(3, &loyalty_url),
    )
    .expect("steps file");
    let addresses = format!(
        "payment=http://{},inventory=http://{}",
        payment.process.addr, inventory.process.addr
    );
    let args = [
        "serve",
        "--steps-file",
        steps.to_str().expect("UTF-8 path"),
        "--step-address",
        &addresses,
        "--console-listen",
        "127.0.0.1:0",
        "--retry-max-delay-ms",
        "200",
    ];
    let role = ServedBy::Orchestrator;
    let orchestrator = start("orchestrator", role, &args, &[], &backend, dir).await;

    let mut payments = PaymentServiceClient::new(channel(payment.process.addr).await);
    for (customer, cents) in [("alice", 100_000), ("bob", 100), ("mallory", 100_000)] {
        payments
            .deposit(payment::DepositRequest {
                request_id: format!("deposit-{customer}"),
                customer_id: customer.into(),
                amount_cents: cents,
            })
            .await
            .expect("deposit");
    }
    InventoryServiceClient::new(channel(inventory.process.addr).await)
        .add_stock(inventory::AddStockRequest {
            request_id: "stock-sku-apple".into(),
            product_id: "sku-apple".into(),
            quantity: 10,
        })
        .await
        .expect("add stock");
    let addr = orchestrator.process.addr;
    let sagas = [
        (order(addr, "families-1", "alice", 250).await, "completed"),
        (order(addr, "families-2", "bob", 5_000).await, "refused"),
        (
            order(addr, "families-3", "mallory", 250).await,
            "compensated",
        ),
    ];
    for (saga, what) in &sagas {
        let want = match *what {
            "completed" => saga::SagaStatus::Completed,
            _ => saga::SagaStatus::Cancelled,
        };
        assert_eq!(saga.status(), want, "{what}: {saga:?}");
    }

    let services = [orchestrator, payment, inventory, loyalty];
    let mut scrapes = Vec::new();
    for service in &services {
        // What a reply was sent before, and the first purge round's
        // figures, may be recorded a little later.
        let scrape = prometheus::scrape_until(service.metrics, |s| {
            let present = |name| s.matching(name, &[]).next().is_some();
            present("store_purge_rounds_total")
                && match service.role {
                    ServedBy::Orchestrator => {
                        s.sum("saga_finished_total", &[]) == 3.0
                            && s.value("saga_in_flight", &[]) == Some(0.0)
                    }
                    _ => present("participant_operations_total"),
                }
        })
        .await;
        scrapes.push((service.process.name.to_owned(), Some(service.role), scrape));
    }
    let store = match backend {
        Backend::Embedded => "embedded_store_commits_total",
        Backend::Mongo(_) => "mongodb_commands_total",
    };
    let participants: &[&str] = &[
        "participant_operations_total",
        "participant_call_duration_seconds",
        "store_size_bytes",
        "store_purge_rounds_total",
        store,
    ];
    assert_documented(
        &scrapes,
        &[
            (
                "orchestrator",
                &[
                    "saga_started_total",
                    "saga_finished_total",
                    "saga_in_flight",
                    "saga_step_duration_seconds",
                    "saga_compensations_total",
                    "store_size_bytes",
                    "store_purge_rounds_total",
                    store,
                ],
            ),
            ("payment-svc", participants),
            ("inventory-svc", participants),
            ("loyalty-svc", participants),
        ],
    );
    for service in services {
        service.process.stop_cleanly(LIMIT).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_family_the_services_export_is_documented() {
    the_services_on(Backend::Embedded).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_family_the_services_export_is_documented_on_mongodb() {
    let Some(target) = saga_tests::backends::mongo() else {
        return;
    };
    the_services_on(Backend::Mongo(&target)).await;
}

/// A child process stopped (SIGTERM, then SIGKILL) when dropped.
struct StopOnDrop(Option<Child>);

impl Drop for StopOnDrop {
    fn drop(&mut self) {
        if let Some(mut child) = self.0.take() {
            let _ = process::stop(&mut child, Duration::from_secs(5));
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_family_the_dev_command_exports_is_documented() {
    let dir = tempfile::tempdir().expect("temp dir");
    let metrics = free_addr();
    let log = dir.path().join("dev-stack.log");
    let out = std::fs::File::create(&log).expect("log file");
    let mut cmd = Command::new(process::workspace_binary("dev-stack"));
    cmd.arg("dev")
        .args(["--data-dir".as_ref(), dir.path().join("data").as_os_str()])
        .args(["--orchestrator-listen", "127.0.0.1:0"])
        .args(["--payment-listen", "127.0.0.1:0"])
        .args(["--inventory-listen", "127.0.0.1:0"])
        .args(["--console-listen", "127.0.0.1:0"])
        .args(["--metrics-listen", &metrics.to_string()])
        .env_clear()
        .env("RUST_LOG", "info")
        .stdin(Stdio::null())
        .stdout(out.try_clone().expect("log file"))
        .stderr(out);
    let mut dev = StopOnDrop(Some(process::spawn_tied(cmd).expect("spawn dev-stack")));
    // Its three demo orders, placed at start-up, all ended.
    let until = Instant::now() + Duration::from_secs(60);
    let scrape = loop {
        let scrape = prometheus::fetch(metrics).await;
        if let Ok(s) = &scrape
            && s.sum("saga_finished_total", &[]) >= 3.0
            && s.value("saga_in_flight", &[]) == Some(0.0)
        {
            break scrape.expect("a scrape");
        }
        assert!(
            Instant::now() < until,
            "dev: no three finished sagas on its /metrics within 60 s ({:?}); its log: {:?}",
            scrape.err(),
            process::log_tail(&log, 20)
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert_documented(
        &[("dev".to_owned(), None, scrape)],
        &[(
            "dev",
            &[
                "saga_started_total",
                "saga_finished_total",
                "participant_operations_total",
                "embedded_store_commits_total",
            ],
        )],
    );
    let mut child = dev.0.take().expect("the dev process");
    let stopped = process::stop(&mut child, LIMIT).expect("stop dev");
    assert!(
        !stopped.killed && stopped.status.success(),
        "dev: {stopped:?}; its log: {:?}",
        process::log_tail(&log, 20)
    );
}
