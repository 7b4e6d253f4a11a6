//! `--concurrency 1,4,16,64,256`: one stack, one seeding, then per level a
//! warm-up, a measured saga phase and (unless `--no-floor`) the floor at
//! the same concurrency. Prints a table, writes the figures as JSON and,
//! with `--plot`, draws latency against throughput as an SVG (written here
//! by hand: a few lines of markup need no plotting crate).

use crate::catalog::Catalog;
use crate::plan::{Plan, Urls};
use crate::procs::Watched;
use crate::run::{self, Outcome};
use crate::scrape;
use crate::tally::Tally;
use crate::workload::{self, Clients, Kind, Phase};
use std::fmt::Write as _;
use std::net::SocketAddr;
use std::sync::Arc;

/// One level of a sweep.
pub struct Point {
    pub concurrency: usize,
    pub warmup: Option<Tally>,
    pub saga: Tally,
    /// CPU seconds per watched process during the measured saga phase.
    pub cpu_saga: Vec<Option<f64>>,
    pub floor_warmup: Option<Tally>,
    pub floor: Option<Tally>,
    /// MongoDB commands during the measured saga phase (MongoDB only).
    pub mongo: Option<scrape::Counts>,
}

impl Point {
    /// Every tally of the level.
    pub fn tallies(&self) -> impl Iterator<Item = &Tally> {
        self.saga_tallies().chain(self.floor_tallies())
    }

    /// The saga warm-up and the measured saga phase.
    pub fn saga_tallies(&self) -> impl Iterator<Item = &Tally> {
        self.warmup.iter().chain(std::iter::once(&self.saga))
    }

    /// The floor warm-up and the measured floor.
    pub fn floor_tallies(&self) -> impl Iterator<Item = &Tally> {
        self.floor_warmup.iter().chain(self.floor.iter())
    }
}

/// What a sweep runs against.
pub struct Context<'a> {
    pub watched: &'a [Watched],
    pub metrics: &'a [SocketAddr],
    pub urls: &'a Urls,
    pub cat: &'a Arc<Catalog>,
}

/// Runs every level in `plan.sweep`, each with its own connections
/// (at most `--connections`, at most one per worker).
pub async fn run(plan: &Plan, out: &mut Outcome, ctx: &Context<'_>) -> Result<(), String> {
    for &concurrency in &plan.sweep {
        out.stage = "a sweep level";
        eprintln!("loadgen: sweep level, concurrency {concurrency}");
        let (orchestrator, payment, inventory) = ctx.urls;
        let clients = Clients::connect(
            orchestrator,
            payment,
            inventory,
            plan.connections.clamp(1, concurrency),
            plan.admin_token.as_deref(),
        )
        .await?;
        let phase = |kind, tag: String, stop| Phase {
            kind,
            tag,
            concurrency,
            stop,
            mix: plan.mix,
            call_timeout: plan.call_timeout,
        };
        let warmup = if plan.warmup > 0.0 {
            let w = phase(Kind::Saga, format!("c{concurrency}w"), run::warmup(plan));
            Some(workload::run_phase(&clients, ctx.cat, &w).await)
        } else {
            None
        };
        let measured = phase(Kind::Saga, format!("c{concurrency}m"), run::measured(plan));
        let (saga, cpu_saga, mongo) =
            run::timed_phase(&clients, ctx.cat, &measured, ctx.watched, ctx.metrics).await;
        let (mut floor_warmup, mut floor) = (None, None);
        if plan.floor && saga.ok > 0 {
            if plan.warmup > 0.0 {
                let w = phase(Kind::Floor, format!("c{concurrency}fw"), run::warmup(plan));
                floor_warmup = Some(workload::run_phase(&clients, ctx.cat, &w).await);
            }
            let f = phase(
                Kind::Floor,
                format!("c{concurrency}f"),
                workload::Stop::Count(saga.ok),
            );
            floor = Some(workload::run_phase(&clients, ctx.cat, &f).await);
        }
        out.sweep.push(Point {
            concurrency,
            warmup,
            saga,
            cpu_saga,
            floor_warmup,
            floor,
            mongo,
        });
    }
    Ok(())
}

/// The sweep's table (after the usual report).
pub fn print(out: &Outcome) {
    if out.sweep.is_empty() {
        return;
    }
    let names: Vec<&str> = out.procs.iter().map(|p| p.name.as_str()).collect();
    println!();
    print!(
        "{:>6} {:>10} {:>8} {:>8} {:>8} {:>10} {:>7}",
        "conc", "sagas/s", "p50 ms", "p99 ms", "max ms", "floor/s", "ratio"
    );
    for n in &names {
        print!(" {:>14}", format!("{} µs", short(n)));
    }
    println!("   (CPU µs per saga)");
    for p in &out.sweep {
        let floor = p.floor.as_ref().map(Tally::rate);
        print!(
            "{:>6} {:>10.1} {:>8.3} {:>8.3} {:>8.3} {:>10} {:>7}",
            p.concurrency,
            p.saga.rate(),
            p.saga.quantile_ms(0.5),
            p.saga.quantile_ms(0.99),
            p.saga.max_ms(),
            floor.map_or("-".into(), |f| format!("{f:.1}")),
            floor
                .filter(|f| *f > 0.0)
                .map_or("-".into(), |f| format!("{:.3}", p.saga.rate() / f)),
        );
        for cpu in &p.cpu_saga {
            print!(
                " {:>14}",
                per_saga_us(*cpu, p.saga.ok).map_or("-".into(), |us| format!("{us:.0}"))
            );
        }
        println!();
    }
}

fn short(name: &str) -> &str {
    name.trim_end_matches("-svc")
}

/// CPU µs per saga from CPU seconds over `sagas` sagas.
pub fn per_saga_us(cpu_s: Option<f64>, sagas: u64) -> Option<f64> {
    cpu_s.filter(|_| sagas > 0).map(|s| s * 1e6 / sagas as f64)
}

/// The sweep as JSON: one object per level.
pub fn json(out: &Outcome) -> serde_json::Value {
    let levels: Vec<_> = out
        .sweep
        .iter()
        .map(|p| {
            let cpu: serde_json::Map<String, serde_json::Value> = out
                .procs
                .iter()
                .zip(&p.cpu_saga)
                .map(|(proc_, cpu)| {
                    (
                        proc_.name.clone(),
                        serde_json::json!(per_saga_us(*cpu, p.saga.ok).map(|v| v.round())),
                    )
                })
                .collect();
            serde_json::json!({
                "concurrency": p.concurrency,
                "sagas": p.saga.ok,
                "sagas_per_s": (p.saga.rate() * 10.0).round() / 10.0,
                "p50_ms": p.saga.quantile_ms(0.5),
                "p90_ms": p.saga.quantile_ms(0.9),
                "p99_ms": p.saga.quantile_ms(0.99),
                "max_ms": p.saga.max_ms(),
                "errors": p.tallies().map(|t| t.problems()).sum::<u64>(),
                "floor_per_s": p.floor.as_ref().map(|f| (f.rate() * 10.0).round() / 10.0),
                "floor_p50_ms": p.floor.as_ref().map(|f| f.quantile_ms(0.5)),
                "floor_p99_ms": p.floor.as_ref().map(|f| f.quantile_ms(0.99)),
                "ratio": p.floor.as_ref().filter(|f| f.rate() > 0.0)
                    .map(|f| ((p.saga.rate() / f.rate()) * 1000.0).round() / 1000.0),
                "cpu_us_per_saga": cpu,
                "mongo_commands_per_saga": p.mongo.as_ref().map(|d| crate::report::mongo_json(d, p.saga.ok)),
            })
        })
        .collect();
    serde_json::json!({ "store": out.store, "levels": levels })
}

/// Latency (p50 and p99, log scale) against throughput, one point per
/// level, labelled with its concurrency.
pub fn svg(out: &Outcome, title: &str) -> String {
    let points: Vec<PlotPoint> = out
        .sweep
        .iter()
        .map(|p| PlotPoint {
            concurrency: p.concurrency,
            rate: p.saga.rate(),
            p50: p.saga.quantile_ms(0.5).max(0.01),
            p99: p.saga.quantile_ms(0.99).max(0.01),
        })
        .collect();
    let chart = Chart::fit(&points);
    let mut s = String::new();
    chart.header(&mut s, title);
    // Grid and axes.
    chart.x_grid(&mut s);
    chart.y_grid(&mut s);
    chart.frame(&mut s);
    // The two curves, then the points and their labels.
    for curve in [
        Curve {
            latency: |p| p.p50,
            colour: "#1f77b4",
            name: "p50",
            label_dy: 16.0,
            legend_y: TOP + 18.0,
        },
        Curve {
            latency: |p| p.p99,
            colour: "#d62728",
            name: "p99",
            label_dy: -8.0,
            legend_y: TOP + 36.0,
        },
    ] {
        chart.curve(&mut s, &points, &curve);
    }
    s.push_str("</svg>\n");
    s
}

/// The plot's canvas (px): size and the margins around the plotting area.
const W: f64 = 720.0;
const H: f64 = 440.0;
const LEFT: f64 = 70.0;
const RIGHT: f64 = 30.0;
const TOP: f64 = 50.0;
const BOTTOM: f64 = 60.0;

/// One level on the plot: latencies at least 0.01 ms (a log scale has no
/// zero).
struct PlotPoint {
    concurrency: usize,
    /// Sagas/s.
    rate: f64,
    p50: f64,
    p99: f64,
}

/// One latency curve: which latency, how it is drawn and where its legend
/// goes.
struct Curve {
    latency: fn(&PlotPoint) -> f64,
    colour: &'static str,
    name: &'static str,
    /// The point labels' offset from the points.
    label_dy: f64,
    legend_y: f64,
}

/// The axes' ranges: throughput from 0 to a round figure above the
/// fastest level, latency over whole decades around every point.
struct Chart {
    x_top: f64,
    /// log10 of the lowest and highest latency on the axis (ms).
    y_lo: f64,
    y_hi: f64,
}

impl Chart {
    fn fit(points: &[PlotPoint]) -> Chart {
        let x_max = points.iter().map(|p| p.rate).fold(1.0, f64::max);
        let y_lo = points
            .iter()
            .map(|p| p.p50)
            .fold(f64::INFINITY, f64::min)
            .log10()
            .floor();
        let y_hi = points
            .iter()
            .map(|p| p.p99)
            .fold(0.01, f64::max)
            .log10()
            .ceil()
            .max(y_lo + 1.0);
        Chart {
            x_top: nice_ceiling(x_max * 1.08),
            y_lo,
            y_hi,
        }
    }

    /// Sagas/s → px.
    fn x(&self, v: f64) -> f64 {
        LEFT + v / self.x_top * (W - LEFT - RIGHT)
    }

    /// Latency ms → px (log scale).
    fn y(&self, ms: f64) -> f64 {
        TOP + (self.y_hi - ms.log10()) / (self.y_hi - self.y_lo) * (H - TOP - BOTTOM)
    }

    /// The `<svg>` element, a white background and the title.
    fn header(&self, s: &mut String, title: &str) {
        let _ = writeln!(
            s,
            r#"<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{H}" viewBox="0 0 {W} {H}" font-family="sans-serif" font-size="12">"#
        );
        let _ = writeln!(s, r#"<rect width="{W}" height="{H}" fill="white"/>"#);
        let _ = writeln!(
            s,
            r#"<text x="{}" y="24" text-anchor="middle" font-size="15">{}</text>"#,
            W / 2.0,
            escape(title)
        );
    }

    /// Six vertical grid lines with their throughput.
    fn x_grid(&self, s: &mut String) {
        for i in 0..=5 {
            let v = self.x_top * f64::from(i) / 5.0;
            let _ = writeln!(
                s,
                r##"<line x1="{0:.1}" y1="{1}" x2="{0:.1}" y2="{2}" stroke="#ddd"/><text x="{0:.1}" y="{3}" text-anchor="middle">{4:.0}</text>"##,
                self.x(v),
                TOP,
                H - BOTTOM,
                H - BOTTOM + 18.0,
                v
            );
        }
    }

    /// Horizontal grid lines at 1, 2 and 5 × each decade, with their
    /// latency (the decades darker).
    fn y_grid(&self, s: &mut String) {
        let mut decade = self.y_lo;
        while decade <= self.y_hi {
            for m in [1.0, 2.0, 5.0] {
                let ms = 10f64.powf(decade) * m;
                if ms > 10f64.powf(self.y_hi) * 1.0001 {
                    break;
                }
                let _ = writeln!(
                    s,
                    r##"<line x1="{0}" y1="{1:.1}" x2="{2}" y2="{1:.1}" stroke="{3}"/><text x="{4}" y="{5:.1}" text-anchor="end">{6}</text>"##,
                    LEFT,
                    self.y(ms),
                    W - RIGHT,
                    if m == 1.0 { "#bbb" } else { "#eee" },
                    LEFT - 6.0,
                    self.y(ms) + 4.0,
                    trim_ms(ms)
                );
            }
            decade += 1.0;
        }
    }

    /// The plotting area's border and the axis titles.
    fn frame(&self, s: &mut String) {
        let _ = writeln!(
            s,
            r##"<rect x="{LEFT}" y="{TOP}" width="{}" height="{}" fill="none" stroke="#333"/>"##,
            W - LEFT - RIGHT,
            H - TOP - BOTTOM
        );
        let _ = writeln!(
            s,
            r#"<text x="{}" y="{}" text-anchor="middle">sagas/s (CreateOrder with wait, until terminal)</text>"#,
            (LEFT + W - RIGHT) / 2.0,
            H - 18.0
        );
        let _ = writeln!(
            s,
            r#"<text x="18" y="{0}" text-anchor="middle" transform="rotate(-90 18 {0})">latency, ms (log scale)</text>"#,
            (TOP + H - BOTTOM) / 2.0
        );
    }

    /// One curve: the line through the points, each point with its
    /// concurrency, and the legend entry.
    fn curve(&self, s: &mut String, points: &[PlotPoint], curve: &Curve) {
        let Curve {
            latency,
            colour,
            name,
            label_dy,
            legend_y,
        } = curve;
        let path: Vec<String> = points
            .iter()
            .map(|p| format!("{:.1},{:.1}", self.x(p.rate), self.y(latency(p))))
            .collect();
        let _ = writeln!(
            s,
            r#"<polyline points="{}" fill="none" stroke="{colour}" stroke-width="2"/>"#,
            path.join(" ")
        );
        for p in points {
            let v = latency(p);
            let _ = writeln!(
                s,
                r#"<circle cx="{:.1}" cy="{:.1}" r="3.5" fill="{colour}"/><text x="{:.1}" y="{:.1}" text-anchor="middle" fill="{colour}">c={}</text>"#,
                self.x(p.rate),
                self.y(v),
                self.x(p.rate),
                self.y(v) + label_dy,
                p.concurrency
            );
        }
        let _ = writeln!(
            s,
            r#"<line x1="{0}" y1="{1}" x2="{2}" y2="{1}" stroke="{colour}" stroke-width="2"/><text x="{3}" y="{4}">{name}</text>"#,
            LEFT + 14.0,
            legend_y,
            LEFT + 40.0,
            LEFT + 46.0,
            legend_y + 4.0
        );
    }
}

/// The smallest 1, 2 or 5 × 10^k at or above `v`.
fn nice_ceiling(v: f64) -> f64 {
    let decade = 10f64.powf(v.log10().floor());
    [1.0, 2.0, 5.0, 10.0]
        .into_iter()
        .map(|m| m * decade)
        .find(|c| *c >= v)
        .unwrap_or(v)
}

fn trim_ms(ms: f64) -> String {
    if ms >= 1.0 {
        format!("{ms:.0}")
    } else {
        let s = format!("{ms:.3}");
        s.trim_end_matches('0').to_owned()
    }
}

fn escape(text: &str) -> String {
    text.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}

/// Writes the JSON (and the plot, when asked); says where.
pub fn write(plan: &Plan, out: &Outcome) {
    if out.sweep.is_empty() {
        return;
    }
    let json = json(out);
    match std::fs::write(&plan.sweep_json, format!("{json:#}\n")) {
        Ok(()) => println!("sweep JSON written to {}", plan.sweep_json.display()),
        Err(e) => eprintln!("loadgen: writing {}: {e}", plan.sweep_json.display()),
    }
    if let Some(path) = &plan.plot {
        let title = format!(
            "saga latency vs throughput, concurrency {} ({})",
            plan.sweep
                .iter()
                .map(usize::to_string)
                .collect::<Vec<_>>()
                .join(", "),
            out.store
        );
        match std::fs::write(path, svg(out, &title)) {
            Ok(()) => println!("sweep plot written to {}", path.display()),
            Err(e) => eprintln!("loadgen: writing {}: {e}", path.display()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nice_ceilings() {
        assert_eq!(nice_ceiling(4300.0), 5000.0);
        assert_eq!(nice_ceiling(5200.0), 10000.0);
        assert_eq!(nice_ceiling(180.0), 200.0);
    }
}
