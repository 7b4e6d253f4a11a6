//! `--concurrency 1,4,16,64,256`: one stack, one seeding, then per level a
//! warm-up, a measured saga phase and (unless `--no-floor`) the floor at
//! the same concurrency. Prints a table, writes the figures as JSON and,
//! with `--plot`, draws latency against throughput as an SVG (plotters'
//! SVG backend).

use crate::catalog::Catalog;
use crate::plan::{Plan, Urls};
use crate::procs::Watched;
use crate::run::{self, Outcome};
use crate::scrape;
use crate::tally::Tally;
use crate::workload::{self, Clients, Kind, Phase};
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};
use std::error::Error;
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

/// One level on the plot: latencies at least 0.01 ms (a log scale has no
/// zero).
struct PlotPoint {
    concurrency: usize,
    /// Sagas/s.
    rate: f64,
    p50: f64,
    p99: f64,
}

/// A latency curve: its name, its colour, which latency, and how far below
/// its points (px) their labels go.
type Curve = (&'static str, RGBColor, fn(&PlotPoint) -> f64, i32);

/// Latency (p50 and p99, log scale over whole decades) against throughput
/// (from 0 to a round figure above the fastest level), one point per
/// level, labelled with its concurrency.
pub fn svg(out: &Outcome, title: &str) -> Result<String, String> {
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
    let mut svg = String::new();
    draw(&mut svg, &points, title).map_err(|e| format!("drawing the plot: {e}"))?;
    Ok(svg)
}

fn draw(svg: &mut String, points: &[PlotPoint], title: &str) -> Result<(), Box<dyn Error>> {
    let x_top = nice_ceiling(points.iter().map(|p| p.rate).fold(1.0, f64::max) * 1.08);
    let decade = |ms: f64, round: fn(f64) -> f64| 10f64.powf(round(ms.log10()));
    let y_lo = decade(
        points.iter().map(|p| p.p50).fold(f64::INFINITY, f64::min),
        f64::floor,
    );
    let y_hi =
        decade(points.iter().map(|p| p.p99).fold(0.01, f64::max), f64::ceil).max(y_lo * 10.0);
    let root = SVGBackend::with_string(svg, (720, 440)).into_drawing_area();
    root.fill(&WHITE)?;
    let mut chart = ChartBuilder::on(&root)
        .caption(title, ("sans-serif", 15))
        .margin(12)
        .x_label_area_size(40)
        .y_label_area_size(60)
        .build_cartesian_2d(0.0..x_top, (y_lo..y_hi).log_scale())?;
    chart
        .configure_mesh()
        .x_labels(6)
        .x_label_formatter(&|v| format!("{v:.0}"))
        .y_label_formatter(&|ms| trim_ms(*ms))
        .x_desc("sagas/s (CreateOrder with wait, until terminal)")
        .y_desc("latency, ms (log scale)")
        .draw()?;
    let curves: [Curve; 2] = [
        ("p50", RGBColor(0x1f, 0x77, 0xb4), |p| p.p50, 14),
        ("p99", RGBColor(0xd6, 0x27, 0x28), |p| p.p99, -10),
    ];
    for (name, colour, latency, label_dy) in curves {
        let line = points.iter().map(|p| (p.rate, latency(p)));
        chart
            .draw_series(LineSeries::new(line, colour.stroke_width(2)))?
            .label(name)
            .legend(move |(x, y)| PathElement::new([(x, y), (x + 26, y)], colour.stroke_width(2)));
        let label = ("sans-serif", 12)
            .into_font()
            .color(&colour)
            .pos(Pos::new(HPos::Center, VPos::Center));
        chart.draw_series(points.iter().map(|p| {
            EmptyElement::at((p.rate, latency(p)))
                + Circle::new((0, 0), 3.5, colour.filled())
                + Text::new(format!("c={}", p.concurrency), (0, label_dy), label.clone())
        }))?;
    }
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::UpperLeft)
        .background_style(WHITE)
        .border_style(BLACK)
        .draw()?;
    root.present()?;
    Ok(())
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
        let written =
            svg(out, &title).and_then(|svg| std::fs::write(path, svg).map_err(|e| e.to_string()));
        match written {
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

    #[test]
    fn the_plot_shows_both_curves_and_every_level() {
        let point = |concurrency, rate, p50, p99| PlotPoint {
            concurrency,
            rate,
            p50,
            p99,
        };
        let points = [
            point(1, 120.0, 0.8, 2.5),
            point(16, 1_900.0, 3.1, 9.0),
            point(64, 4_300.0, 12.0, 40.0),
        ];
        let mut svg = String::new();
        draw(&mut svg, &points, "saga latency & throughput").expect("drawn");
        if let Ok(path) = std::env::var("SWEEP_PLOT_SAMPLE") {
            std::fs::write(path, &svg).expect("write the sample");
        }
        assert!(svg.starts_with("<svg"), "{svg}");
        for shown in [
            "saga latency &amp; throughput",
            "c=1",
            "c=16",
            "c=64",
            "p50",
            "p99",
            "sagas/s (CreateOrder with wait, until terminal)",
            "latency, ms (log scale)",
        ] {
            // plotters writes each text on a line of its own.
            assert!(svg.lines().any(|l| l == shown), "{shown} not in\n{svg}");
        }
    }
}
