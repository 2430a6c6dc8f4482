//! Plots of a run, as PNG and SVG: the FCT slowdown CDF, per-flow
//! throughput over time, and egress queue length over time.
//!
//! plotters is built without its default `ttf` feature (which needs
//! fontconfig); text is drawn with `ab_glyph` from an embedded DejaVu Sans
//! (Bitstream Vera licence, see `assets/DejaVuSans.LICENSE`), so plotting
//! works on headless machines and in CI.

use crate::metrics::Report;
use plotters::coord::Shift;
use plotters::prelude::*;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Once;

static FONT: &[u8] = include_bytes!("../assets/DejaVuSans.ttf");
static REGISTER: Once = Once::new();

/// Why a plot could not be drawn.
#[derive(Debug, thiserror::Error)]
pub enum PlotError {
    #[error("drawing {file}: {msg}")]
    Draw { file: String, msg: String },
}

fn register() {
    REGISTER.call_once(|| {
        // The embedded font is valid; if registration failed, text would be
        // missing but the plot would still be written.
        let _ = plotters::style::register_font("sans-serif", FontStyle::Normal, FONT);
    });
}

type Series = Vec<(String, Vec<(f64, f64)>)>;

struct Chart<'a> {
    title: &'a str,
    x: &'a str,
    y: &'a str,
    series: Series,
}

fn draw<DB: DrawingBackend>(root: DrawingArea<DB, Shift>, c: &Chart<'_>) -> Result<(), String> {
    root.fill(&WHITE).map_err(|e| e.to_string())?;
    let pts = c.series.iter().flat_map(|(_, v)| v.iter());
    let (mut x0, mut x1, mut y1) = (f64::MAX, f64::MIN, 0f64);
    for &(x, y) in pts {
        x0 = x0.min(x);
        x1 = x1.max(x);
        y1 = y1.max(y);
    }
    if x0 > x1 {
        (x0, x1) = (0.0, 1.0);
    }
    if x1 <= x0 {
        x1 = x0 + 1.0;
    }
    if y1 <= 0.0 {
        y1 = 1.0;
    }
    let mut chart = ChartBuilder::on(&root)
        .caption(c.title, ("sans-serif", 22))
        .margin(12)
        .x_label_area_size(40)
        .y_label_area_size(70)
        .build_cartesian_2d(x0..x1, 0.0..y1 * 1.05)
        .map_err(|e| e.to_string())?;
    chart
        .configure_mesh()
        .x_desc(c.x)
        .y_desc(c.y)
        .label_style(("sans-serif", 13))
        .draw()
        .map_err(|e| e.to_string())?;
    for (i, (name, pts)) in c.series.iter().enumerate() {
        let color = Palette99::pick(i).to_rgba();
        chart
            .draw_series(LineSeries::new(pts.iter().copied(), color.stroke_width(2)))
            .map_err(|e| e.to_string())?
            .label(name.clone())
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 16, y)], color));
    }
    if c.series.len() > 1 {
        chart
            .configure_series_labels()
            .background_style(WHITE.mix(0.85))
            .border_style(BLACK)
            .label_font(("sans-serif", 12))
            .draw()
            .map_err(|e| e.to_string())?;
    }
    root.present().map_err(|e| e.to_string())
}

fn write(dir: &Path, stem: &str, c: &Chart<'_>) -> Result<Vec<PathBuf>, PlotError> {
    let png = dir.join(format!("{stem}.png"));
    let svg = dir.join(format!("{stem}.svg"));
    let err = |p: &Path| {
        let file = p.display().to_string();
        move |msg| PlotError::Draw { file, msg }
    };
    draw(BitMapBackend::new(&png, (900, 560)).into_drawing_area(), c).map_err(err(&png))?;
    draw(SVGBackend::new(&svg, (900, 560)).into_drawing_area(), c).map_err(err(&svg))?;
    Ok(vec![png, svg])
}

/// Draws the three plots into `dir`; returns the files written.
pub fn write_plots(r: &Report, dir: &Path) -> Result<Vec<PathBuf>, PlotError> {
    register();
    let mut out = Vec::new();
    // 1. Slowdown CDF.
    let mut sd: Vec<f64> = r
        .flows
        .iter()
        .filter(|f| f.ok)
        .filter_map(|f| f.slowdown())
        .collect();
    sd.sort_by(|a, b| a.total_cmp(b));
    let n = sd.len().max(1) as f64;
    let cdf: Vec<(f64, f64)> = sd
        .iter()
        .enumerate()
        .map(|(i, &s)| (s, (i + 1) as f64 / n))
        .collect();
    out.extend(write(
        dir,
        "slowdown_cdf",
        &Chart {
            title: "FCT slowdown CDF",
            x: "slowdown (FCT / ideal FCT)",
            y: "fraction of flows",
            series: vec![("flows".into(), cdf)],
        },
    )?);
    // 2. Per-flow throughput from delivered-byte samples.
    let mut per: BTreeMap<u32, Vec<(u64, u64)>> = BTreeMap::new();
    for &(t, f, b) in &r.flow_progress {
        per.entry(f).or_default().push((t, b));
    }
    let series: Series = per
        .into_iter()
        .map(|(f, v)| {
            let pts = v
                .windows(2)
                .map(|w| {
                    let dt = (w[1].0 - w[0].0) as f64 / 1e12;
                    let gbps = (w[1].1 - w[0].1) as f64 * 8.0 / dt / 1e9;
                    (w[1].0 as f64 / 1e6, gbps)
                })
                .collect();
            (format!("flow {f}"), pts)
        })
        .collect();
    out.extend(write(
        dir,
        "flow_throughput",
        &Chart {
            title: "Per-flow goodput",
            x: "time (µs)",
            y: "Gb/s",
            series,
        },
    )?);
    // 3. The busiest queues over time.
    let mut peak: BTreeMap<(u32, u16, u8), u64> = BTreeMap::new();
    for s in &r.queues {
        let e = peak.entry((s.node, s.port, s.prio)).or_default();
        *e = (*e).max(s.bytes);
    }
    let mut top: Vec<_> = peak.into_iter().collect();
    top.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
    top.truncate(6);
    let times: Vec<u64> = {
        let mut t: Vec<u64> = r.queues.iter().map(|s| s.time).collect();
        t.dedup();
        t
    };
    let series: Series = top
        .iter()
        .map(|&((node, port, prio), _)| {
            let mut at: BTreeMap<u64, u64> = times.iter().map(|&t| (t, 0)).collect();
            for s in r
                .queues
                .iter()
                .filter(|s| (s.node, s.port, s.prio) == (node, port, prio))
            {
                at.insert(s.time, s.bytes);
            }
            let name = format!(
                "{} port {} prio {}",
                r.node_names[node as usize], port, prio
            );
            (
                name,
                at.into_iter()
                    .map(|(t, b)| (t as f64 / 1e6, b as f64 / 1e3))
                    .collect(),
            )
        })
        .collect();
    out.extend(write(
        dir,
        "queue_length",
        &Chart {
            title: "Egress queue length (largest queues)",
            x: "time (µs)",
            y: "KB",
            series,
        },
    )?);
    Ok(out)
}
