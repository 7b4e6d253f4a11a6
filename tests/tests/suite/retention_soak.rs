//! Steady-load soak of retention on the embedded stores (ignored: run it
//! by hand, see docs/testing.md, "The retention soak"):
//!
//! ```sh
//! SOAK_SECS=300 SOAK_RETENTION_SECS=60 cargo test --release -p saga-tests \
//!     --test suite retention_soak -- --ignored --nocapture
//! ```
//!
//! All three services in this process on embedded stores in a temp dir;
//! orders at full speed (`SOAK_CONCURRENCY`, default 32, CreateOrder with
//! wait), or at a steady `SOAK_RATE` sagas/s when set, for `SOAK_SECS`
//! (default 300) with a saga and history retention
//! of `SOAK_RETENTION_SECS` (default 60) and a 5 s purge interval. Every
//! 10 s it samples each store's file (page_count × page_size, free pages,
//! WAL) and prints a table; at the end it writes the samples as CSV and an
//! SVG plot to `target/retention-soak/`, and the purge batches' durations
//! (from the INFO lines) as a summary. It checks that, after two retention
//! periods, each file's bytes per live saga (sagas still stored) stay
//! within 25 % of their first settled value: the size follows the live
//! window (rate × retention), not the total ever written — at full speed
//! the rate itself varies, so the absolute size moves with it.

use orchestrator::retention::RetentionSettings;
use participant_kit::HistoryRetention;
use saga_tests::{Stack, Storage};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

fn env_u64(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

#[derive(Clone, Copy, Default)]
struct FileSample {
    pages_bytes: u64,
    free_bytes: u64,
    wal_bytes: u64,
}

fn sample(path: &Path) -> FileSample {
    let conn = embedded_store::connect(path, rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY)
        .expect("open read-only");
    let get = |p: &str| -> u64 {
        conn.query_row(&format!("PRAGMA {p}"), [], |r| r.get::<_, i64>(0))
            .expect("pragma") as u64
    };
    let page = get("page_size");
    let mut wal = path.as_os_str().to_owned();
    wal.push("-wal");
    FileSample {
        pages_bytes: get("page_count") * page,
        free_bytes: get("freelist_count") * page,
        wal_bytes: std::fs::metadata(PathBuf::from(wal))
            .map(|m| m.len())
            .unwrap_or(0),
    }
}

/// Collects the purge loop's INFO lines (JSON) to read the batch timings.
#[derive(Clone, Default)]
struct Lines(Arc<Mutex<Vec<u8>>>);

impl Write for Lines {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

fn mib(bytes: u64) -> f64 {
    bytes as f64 / (1024.0 * 1024.0)
}

fn svg(samples: &[(f64, [FileSample; 3])], retention: f64) -> String {
    let (w, h, left, bottom) = (720.0, 360.0, 60.0, 40.0);
    let t_max = samples.last().map_or(1.0, |s| s.0).max(1.0);
    let y_max = samples
        .iter()
        .flat_map(|(_, f)| f.iter().map(|s| mib(s.pages_bytes)))
        .fold(1.0_f64, f64::max)
        * 1.1;
    let x = |t: f64| left + t / t_max * (w - left - 20.0);
    let y = |v: f64| h - bottom - v / y_max * (h - bottom - 20.0);
    let mut out = format!(
        "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{w}\" height=\"{h}\" font-family=\"sans-serif\" font-size=\"12\">\n\
         <rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n\
         <line x1=\"{left}\" y1=\"{}\" x2=\"{}\" y2=\"{}\" stroke=\"black\"/>\n\
         <line x1=\"{left}\" y1=\"20\" x2=\"{left}\" y2=\"{}\" stroke=\"black\"/>\n\
         <text x=\"{}\" y=\"{}\">seconds</text>\n<text x=\"5\" y=\"15\">MiB (page_count × page_size)</text>\n",
        h - bottom,
        w - 20.0,
        h - bottom,
        h - bottom,
        w / 2.0,
        h - 8.0
    );
    for k in 1..=4 {
        let v = y_max * f64::from(k) / 4.0;
        out += &format!("<text x=\"5\" y=\"{:.0}\">{v:.1}</text>\n", y(v) + 4.0);
    }
    let mut r = retention;
    while r < t_max {
        out += &format!(
            "<line x1=\"{0:.1}\" y1=\"20\" x2=\"{0:.1}\" y2=\"{1}\" stroke=\"#bbb\" stroke-dasharray=\"4\"/>\n",
            x(r),
            h - bottom
        );
        r += retention;
    }
    for (i, (name, colour)) in [
        ("orchestrator", "#1f77b4"),
        ("payment", "#2ca02c"),
        ("inventory", "#d62728"),
    ]
    .iter()
    .enumerate()
    {
        let points: Vec<String> = samples
            .iter()
            .map(|(t, f)| format!("{:.1},{:.1}", x(*t), y(mib(f[i].pages_bytes))))
            .collect();
        out += &format!(
            "<polyline fill=\"none\" stroke=\"{colour}\" stroke-width=\"2\" points=\"{}\"/>\n\
             <text x=\"{}\" y=\"{}\" fill=\"{colour}\">{name}</text>\n",
            points.join(" "),
            w - 130.0,
            40.0 + 16.0 * i as f64
        );
    }
    out + "</svg>\n"
}

#[tokio::test(flavor = "multi_thread")]
#[ignore = "a soak of several minutes: run by hand (docs/testing.md, The retention soak)"]
async fn embedded_store_sizes_are_flat_after_the_first_retention_period() {
    let secs = env_u64("SOAK_SECS", 300);
    let retention = Duration::from_secs(env_u64("SOAK_RETENTION_SECS", 60));
    let concurrency = env_u64("SOAK_CONCURRENCY", 32);
    let rate = env_u64("SOAK_RATE", 0);
    let lines = Lines::default();
    let writer = lines.clone();
    let _ = tracing_subscriber::fmt()
        .json()
        .with_env_filter("service_kit::purge=info")
        .with_writer(move || writer.clone())
        .try_init();

    let dir = tempfile::tempdir().expect("tempdir");
    let stack = Stack::start_retaining(
        tempfile::tempdir().expect("tempdir"),
        Storage::from(dir.path()),
        RetentionSettings {
            saga_retention: Some(retention),
            archive_dir: None,
            purge_interval: Duration::from_secs(5),
            retry_window: None,
            send_window: None,
        },
        // Below the default limits' minimum on purpose: this soak's
        // orchestrator uses fast test limits, and the point is the size.
        HistoryRetention {
            keep: retention,
            purge_interval: Duration::from_secs(5),
        },
    )
    .await;
    stack.deposit("alice", i64::MAX / 2).await;
    stack.add_stock("sku-apple", i64::MAX / 2).await;

    let done = Arc::new(AtomicU64::new(0));
    let started = Instant::now();
    let deadline = started + Duration::from_secs(secs);
    let mut drivers = Vec::new();
    for worker in 0..concurrency {
        let client = stack.orders().await;
        let done = done.clone();
        drivers.push(tokio::spawn(async move {
            let mut client = client;
            let mut n = 0u64;
            // Each worker's share of a steady rate, if one is set.
            let pace =
                (rate > 0).then(|| Duration::from_secs_f64(concurrency as f64 / rate as f64));
            let mut next = Instant::now();
            while Instant::now() < deadline {
                if let Some(pace) = pace {
                    next += pace;
                    tokio::time::sleep_until(next.into()).await;
                }
                let request = saga_tests::order_request(
                    &format!("soak-{worker}-{n}"),
                    "alice",
                    &[("sku-apple", 1, 1)],
                    true,
                );
                if client.create_order(request).await.is_ok() {
                    done.fetch_add(1, Ordering::Relaxed);
                }
                n += 1;
            }
        }));
    }

    let files = ["orchestrator.db", "payment.db", "inventory.db"].map(|f| dir.path().join(f));
    let mut samples: Vec<(f64, [FileSample; 3])> = Vec::new();
    let mut live: Vec<u64> = Vec::new();
    let live_sagas = |path: &Path| -> u64 {
        embedded_store::connect(path, rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY)
            .and_then(|c| c.query_row("SELECT COUNT(*) FROM sagas", [], |r| r.get::<_, i64>(0)))
            .map_or(0, |n| n as u64)
    };
    println!(
        "retention {}s, {concurrency} in flight, {secs}s; MiB = page_count × page_size (free pages, WAL)",
        retention.as_secs()
    );
    println!(
        "   t  sagas  sagas/s   live  orchestrator             payment                  inventory"
    );
    let mut last = (0.0, 0u64);
    while Instant::now() < deadline + Duration::from_secs(1) {
        tokio::time::sleep(Duration::from_secs(10)).await;
        let t = started.elapsed().as_secs_f64();
        let s = files.clone().map(|f| sample(&f));
        let n = done.load(Ordering::Relaxed);
        let per_s = (n - last.1) as f64 / (t - last.0);
        last = (t, n);
        let stored = live_sagas(&files[0]);
        live.push(stored);
        let cell = |f: &FileSample| {
            format!(
                "{:6.1} ({:5.1}, {:5.1})",
                mib(f.pages_bytes),
                mib(f.free_bytes),
                mib(f.wal_bytes)
            )
        };
        println!(
            "{t:4.0} {n:6} {per_s:8.0} {stored:6}  {}  {}  {}",
            cell(&s[0]),
            cell(&s[1]),
            cell(&s[2])
        );
        samples.push((t, s));
    }
    for d in drivers {
        d.await.expect("driver");
    }

    let out = Path::new(env!("CARGO_MANIFEST_DIR")).join("../target/retention-soak");
    std::fs::create_dir_all(&out).expect("out dir");
    let mut csv = String::from(
        "t_s,orchestrator_bytes,orchestrator_free,payment_bytes,payment_free,inventory_bytes,inventory_free\n",
    );
    for (t, s) in &samples {
        csv += &format!(
            "{t:.0},{},{},{},{},{},{}\n",
            s[0].pages_bytes,
            s[0].free_bytes,
            s[1].pages_bytes,
            s[1].free_bytes,
            s[2].pages_bytes,
            s[2].free_bytes
        );
    }
    std::fs::write(out.join("sizes.csv"), csv).expect("csv");
    std::fs::write(
        out.join("sizes.svg"),
        svg(&samples, retention.as_secs_f64()),
    )
    .expect("svg");

    let logged = String::from_utf8(lines.0.lock().unwrap().clone()).unwrap_or_default();
    let mut took: Vec<f64> = logged
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .filter(|v| v["fields"]["message"] == "purge batch")
        .filter_map(|v| v["fields"]["took_ms"].as_f64())
        .collect();
    took.sort_by(f64::total_cmp);
    if !took.is_empty() {
        let at = |q: f64| took[((took.len() - 1) as f64 * q) as usize];
        println!(
            "purge batches: {}, took p50 {:.1} ms, p99 {:.1} ms, max {:.1} ms",
            took.len(),
            at(0.5),
            at(0.99),
            at(1.0)
        );
    }
    println!("wrote {}", out.join("sizes.svg").display());

    // Flat after the first retention period: bytes per live saga stay
    // within 25 % of their first value after two retention periods.
    let settle = 2.0 * retention.as_secs_f64();
    for (i, name) in ["orchestrator", "payment", "inventory"].iter().enumerate() {
        let per_saga: Vec<f64> = samples
            .iter()
            .zip(&live)
            .filter(|((t, _), n)| *t >= settle && **n > 0 && *t < secs as f64)
            .map(|((_, s), n)| s[i].pages_bytes as f64 / *n as f64)
            .collect();
        let (Some(first), Some(max)) =
            (per_saga.first(), per_saga.iter().copied().reduce(f64::max))
        else {
            continue;
        };
        println!("{name}: {first:.0} → max {max:.0} bytes per live saga after {settle:.0} s");
        assert!(
            max <= first * 1.25,
            "{name} grows beyond its live window: {per_saga:?}"
        );
    }
    stack.stop().await;
}
