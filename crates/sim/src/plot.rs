//! Plots of a run, as PNG and SVG, drawn to say what happened:
//!
//! - `slowdown_cdf`: the FCT slowdown CDF;
//! - `slowdown_by_size`: each flow's slowdown against its size, with the
//!   median and p99 per size band and the ideal (1: the flow alone);
//! - `flow_throughput`: the traced flows' goodput, averaged over a trailing
//!   window named in the title, one panel per flow on one rate scale (the raw
//!   samples are in `flow_goodput.csv`);
//! - `queue_length`: the largest egress queues, drawn at every sampling
//!   instant with 0 where the queue was empty (`queues.csv` lists only
//!   non-empty queues);
//! - `pfc_pauses`: XOFF frames sent per time bin, and how many port ×
//!   priority pairs were paused;
//! - `busiest_links`: the ports that sent the most, as a share of their
//!   line rate over the run.
//!
//! plotters is built without its default `ttf` feature (which needs
//! fontconfig); text is drawn with `ab_glyph` from an embedded DejaVu Sans
//! (Bitstream Vera licence, see `assets/DejaVuSans.LICENSE`), so plotting
//! works on headless machines and in CI.

use crate::event::Ps;
use crate::metrics::Report;
use plotters::coord::Shift;
use plotters::prelude::*;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Once;

static FONT: &[u8] = include_bytes!("../assets/DejaVuSans.ttf");
static REGISTER: Once = Once::new();

const SIZE: (u32, u32) = (1000, 600);

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

type Points = Vec<(f64, f64)>;
type Series = Vec<(String, Points)>;

/// Colours told apart at a glance on white: Tableau 10, then ten darker
/// ones (Palette99's later colours are too pale for thin lines), then
/// Palette99.
fn colour(i: usize) -> RGBColor {
    const SET: [(u8, u8, u8); 20] = [
        (31, 119, 180),
        (255, 127, 14),
        (44, 160, 44),
        (214, 39, 40),
        (148, 103, 189),
        (140, 86, 75),
        (227, 119, 194),
        (127, 127, 127),
        (188, 189, 34),
        (23, 190, 207),
        (0, 0, 128),
        (128, 0, 0),
        (0, 100, 0),
        (0, 0, 0),
        (199, 21, 133),
        (0, 128, 128),
        (184, 134, 11),
        (72, 61, 139),
        (139, 69, 19),
        (85, 107, 47),
    ];
    match SET.get(i) {
        Some(&(r, g, b)) => RGBColor(r, g, b),
        None => {
            let c = Palette99::pick(i).to_rgba();
            RGBColor(c.0, c.1, c.2)
        }
    }
}

fn e(x: impl std::fmt::Display) -> String {
    x.to_string()
}

/// A line chart on linear axes starting at y = 0.
struct Chart<'a> {
    title: &'a str,
    x: &'a str,
    y: &'a str,
    series: Series,
    /// Draw points as well as lines (sparse series).
    points: bool,
}

fn bounds<'a>(pts: impl Iterator<Item = &'a (f64, f64)>) -> (f64, f64, f64) {
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
    (x0, x1, y1)
}

fn draw<DB: DrawingBackend>(root: DrawingArea<DB, Shift>, c: &Chart<'_>) -> Result<(), String> {
    root.fill(&WHITE).map_err(e)?;
    let root = root.titled(c.title, ("sans-serif", 22)).map_err(e)?;
    // The legend gets its own column at the right, so it never hides a
    // line (16 traced flows make a tall legend).
    let (w, _) = root.dim_in_pixel();
    let (plot_area, legend_area) = root.split_horizontally(w.saturating_sub(LEGEND_W));
    let (x0, x1, y1) = bounds(c.series.iter().flat_map(|(_, v)| v.iter()));
    let mut chart = ChartBuilder::on(&plot_area)
        .margin(12)
        .x_label_area_size(40)
        .y_label_area_size(70)
        .build_cartesian_2d(x0..x1, 0.0..y1 * 1.05)
        .map_err(e)?;
    chart
        .configure_mesh()
        .x_desc(c.x)
        .y_desc(c.y)
        .label_style(("sans-serif", 13))
        .draw()
        .map_err(e)?;
    for (i, (_, pts)) in c.series.iter().enumerate() {
        let color = colour(i);
        chart
            .draw_series(LineSeries::new(pts.iter().copied(), color.stroke_width(2)))
            .map_err(e)?;
        if c.points {
            chart
                .draw_series(pts.iter().map(|&p| Circle::new(p, 3, color.filled())))
                .map_err(e)?;
        }
    }
    for (i, (name, pts)) in c.series.iter().enumerate() {
        let y = 20 + 20 * i as i32;
        // A line equal to an earlier one is drawn under it: say so.
        let name = match c.series[..i].iter().position(|(_, p)| p == pts) {
            Some(j) => format!("{name} (= {})", j + 1),
            None => format!("{}. {name}", i + 1),
        };
        let color = colour(i);
        legend_area
            .draw(&PathElement::new(
                vec![(4, y), (26, y)],
                color.stroke_width(3),
            ))
            .map_err(e)?;
        legend_area
            .draw(&Text::new(
                name,
                (32, y - 7),
                ("sans-serif", 12).into_font(),
            ))
            .map_err(e)?;
    }
    if c.series.is_empty() {
        legend_area
            .draw(&Text::new(
                "nothing sampled",
                (4, 20),
                ("sans-serif", 12).into_font(),
            ))
            .map_err(e)?;
    }
    root.present().map_err(e)
}

/// Width of the legend column of line charts, in pixels.
const LEGEND_W: u32 = 250;

/// Rows × columns of small multiples for `n` series.
fn panel_grid(n: usize) -> (usize, usize) {
    let cols = match n {
        0..=3 => 1,
        4..=8 => 2,
        9..=12 => 3,
        _ => 4,
    };
    (n.div_ceil(cols).max(1), cols)
}

/// Small multiples: one panel per series on a shared rate axis, so each
/// flow's story reads on its own (eight flows taking turns under PFC are a
/// tangle on one chart), and the panels compare at a glance.
fn draw_panels<DB: DrawingBackend>(
    root: DrawingArea<DB, Shift>,
    title: &str,
    series: &Series,
    rows: usize,
    cols: usize,
) -> Result<(), String> {
    root.fill(&WHITE).map_err(e)?;
    let root = root.titled(title, ("sans-serif", 20)).map_err(e)?;
    if series.is_empty() {
        root.draw(&Text::new(
            "no flow was traced (output.trace_flows = 0 or sample_us = 0)",
            (20, 20),
            ("sans-serif", 14).into_font(),
        ))
        .map_err(e)?;
        return root.present().map_err(e);
    }
    // One rate scale for all. One time axis too when the flows overlap
    // (an incast); else each panel spans its own flow's lifetime (in a big
    // run a 5 KB flow and an 18 MB one differ by 1000× in duration).
    let (u0, u1, y1) = bounds(series.iter().flat_map(|(_, v)| v.iter()));
    let shared_x = series.iter().all(|(_, v)| {
        let (a, b, _) = bounds(v.iter());
        b - a >= (u1 - u0) / 3.0
    });
    let areas = root.split_evenly((rows, cols));
    for (i, ((name, pts), area)) in series.iter().zip(&areas).enumerate() {
        let c = colour(i);
        let (x0, x1) = if shared_x {
            (u0, u1)
        } else {
            let (a, b, _) = bounds(pts.iter());
            (a, b)
        };
        let bottom = i + cols >= series.len();
        let mut chart = ChartBuilder::on(area)
            .caption(name, ("sans-serif", 13))
            .margin(6)
            .x_label_area_size(if bottom { 32 } else { 18 })
            .y_label_area_size(45)
            .build_cartesian_2d(x0..x1, 0.0..y1 * 1.05)
            .map_err(e)?;
        let mut mesh = chart.configure_mesh();
        mesh.x_labels(if cols > 2 { 3 } else { 5 })
            .x_label_formatter(&|x| format!("{x:.0}"))
            .y_labels(4)
            .y_label_formatter(&|y| format!("{y:.0}"))
            .light_line_style(WHITE)
            .y_desc("Gb/s")
            .label_style(("sans-serif", 11));
        if bottom {
            mesh.x_desc("time (µs)");
        }
        mesh.draw().map_err(e)?;
        chart
            .draw_series(LineSeries::new(pts.iter().copied(), c.stroke_width(2)))
            .map_err(e)?;
        if pts.len() <= 3 {
            // Too short for a line: show the samples themselves.
            chart
                .draw_series(pts.iter().map(|&p| Circle::new(p, 4, c.filled())))
                .map_err(e)?;
        }
    }
    root.present().map_err(e)
}

/// A flow size for a legend: bytes, KB or MB with sensible digits.
fn size_label(b: u64) -> String {
    let x = b as f64;
    match b {
        0..1_000 => format!("{b} B"),
        1_000..10_000 => format!("{:.1} KB", x / 1e3),
        10_000..1_000_000 => format!("{:.0} KB", x / 1e3),
        1_000_000..10_000_000 => format!("{:.2} MB", x / 1e6),
        _ => format!("{:.1} MB", x / 1e6),
    }
}

macro_rules! render {
    ($dir:expr, $stem:expr, |$root:ident| $body:expr) => {
        render!($dir, $stem, SIZE, |$root| $body)
    };
    ($dir:expr, $stem:expr, $size:expr, |$root:ident| $body:expr) => {{
        let png = $dir.join(format!("{}.png", $stem));
        let svg = $dir.join(format!("{}.svg", $stem));
        let err = |p: &Path| {
            let file = p.display().to_string();
            move |msg| PlotError::Draw { file, msg }
        };
        {
            let $root = BitMapBackend::new(&png, $size).into_drawing_area();
            $body.map_err(err(&png))?;
        }
        {
            let $root = SVGBackend::new(&svg, $size).into_drawing_area();
            $body.map_err(err(&svg))?;
        }
        Ok::<Vec<PathBuf>, PlotError>(vec![png, svg])
    }};
}

fn write(dir: &Path, stem: &str, c: &Chart<'_>) -> Result<Vec<PathBuf>, PlotError> {
    render!(dir, stem, |root| draw(root, c))
}

/// A line chart of named series on linear axes starting at y = 0 (one
/// series per line; a constant series draws a reference level such as a
/// model's prediction), written as `<stem>.png` and `<stem>.svg`.
pub fn write_lines(
    dir: &Path,
    stem: &str,
    title: &str,
    x_desc: &str,
    y_desc: &str,
    series: Vec<(String, Vec<(f64, f64)>)>,
) -> Result<Vec<PathBuf>, PlotError> {
    register();
    let c = Chart {
        title,
        x: x_desc,
        y: y_desc,
        points: series.iter().all(|(_, v)| v.len() <= 32),
        series,
    };
    write(dir, stem, &c)
}

/// A round number of µs near `x` (1, 2 or 5 × a power of ten).
fn nice_us(x: f64) -> f64 {
    if x.is_nan() || x <= 0.0 {
        return 1.0;
    }
    let p = 10f64.powf(x.log10().floor());
    let m = x / p;
    p * if m < 1.5 {
        1.0
    } else if m < 3.5 {
        2.0
    } else if m < 7.5 {
        5.0
    } else {
        10.0
    }
}

fn us(p: Ps) -> f64 {
    p as f64 / 1e6
}

/// The averaging window of the goodput plot: about a 30th of the traced
/// span, rounded (long enough to average out PFC's pause/resume bursts,
/// short enough to show rate changes), never shorter than one sample.
pub fn goodput_window(r: &Report) -> Ps {
    let (lo, hi) = r
        .flow_progress
        .iter()
        .fold((Ps::MAX, 0), |(lo, hi), &(t, _, _)| (lo.min(t), hi.max(t)));
    if r.sample == 0 || hi <= lo {
        return r.sample;
    }
    let w = (nice_us(us(hi - lo) / 30.0) * 1e6) as Ps;
    (w / r.sample).max(1) * r.sample
}

/// Each traced flow's goodput at every sample, averaged over the trailing
/// `window` (shorter at the flow's start).
fn goodput_series(r: &Report, window: Ps) -> Series {
    let mut per: BTreeMap<u32, Vec<(Ps, u64)>> = BTreeMap::new();
    for &(t, f, b) in &r.flow_progress {
        per.entry(f).or_default().push((t, b));
    }
    per.into_iter()
        .map(|(f, mut v)| {
            // Nothing is delivered before the flow starts: with that point a
            // flow shorter than one sample still gets its rate.
            if let Some(fl) = r.flows.get(f as usize)
                && v.first().is_some_and(|&(t, _)| t > fl.start)
            {
                v.insert(0, (fl.start, 0));
            }
            let mut j = 0;
            let pts = (1..v.len())
                .map(|i| {
                    while v[i].0 - v[j].0 > window {
                        j += 1;
                    }
                    let j = j.min(i - 1);
                    let dt = (v[i].0 - v[j].0) as f64 / 1e12;
                    let gbps = (v[i].1 - v[j].1) as f64 * 8.0 / dt / 1e9;
                    (us(v[i].0), gbps)
                })
                .collect();
            let name = r
                .flows
                .get(f as usize)
                .map(|fl| {
                    format!(
                        "flow {f}: {} → {}, {}",
                        r.host_name(fl.src),
                        r.host_name(fl.dst),
                        size_label(fl.size)
                    )
                })
                .unwrap_or_else(|| format!("flow {f}"));
            (name, pts)
        })
        .collect()
}

/// The largest queues (by peak) at every sampling instant, 0 where the
/// queue was empty.
fn queue_series(r: &Report, n: usize) -> Series {
    let mut peak: BTreeMap<(u32, u16, u8), u64> = BTreeMap::new();
    for s in &r.queues {
        let e = peak.entry((s.node, s.port, s.prio)).or_default();
        *e = (*e).max(s.bytes);
    }
    let mut top: Vec<_> = peak.into_iter().collect();
    top.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
    top.truncate(n);
    if top.is_empty() || r.sample == 0 {
        return Vec::new();
    }
    // Samples are taken at 0, sample, 2 × sample, ... until the run ends;
    // a log cut short at max_rows says nothing after its last row.
    let end = if r.queues.len() >= r.max_rows {
        r.queues.last().map_or(0, |s| s.time)
    } else {
        r.now
    };
    // From the first flow's start: an HPCC config's flows start at 2 s.
    let k0 = (first_start(r) / r.sample) as usize;
    let n_samples = ((end / r.sample) as usize + 1).saturating_sub(k0);
    top.iter()
        .map(|&((node, port, prio), _)| {
            let mut v = vec![0u64; n_samples];
            for s in r
                .queues
                .iter()
                .filter(|s| (s.node, s.port, s.prio) == (node, port, prio))
            {
                let k = (s.time / r.sample) as usize;
                if let Some(x) = k.checked_sub(k0).and_then(|k| v.get_mut(k)) {
                    *x = s.bytes;
                }
            }
            let name = format!(
                "{} → {} (port {}, p{})",
                r.node_names[node as usize],
                r.peer_name(node, port),
                port,
                prio
            );
            let pts = v
                .into_iter()
                .enumerate()
                .map(|(k, b)| (us((k + k0) as Ps * r.sample), b as f64 / 1e3))
                .collect();
            (name, pts)
        })
        .collect()
}

/// When traffic begins: the first flow's start (0 without flows). Plots
/// over time start there, as an HPCC config's flows start at 2 s.
fn first_start(r: &Report) -> Ps {
    r.flows.iter().map(|f| f.start).min().unwrap_or(0)
}

/// Draws every plot into `dir`; returns the files written.
pub fn write_plots(r: &Report, dir: &Path) -> Result<Vec<PathBuf>, PlotError> {
    register();
    let mut out = Vec::new();
    // Slowdown CDF.
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
    out.extend(render!(dir, "slowdown_cdf", |root| draw_cdf(root, &cdf))?);
    out.extend(render!(dir, "slowdown_by_size", |root| draw_by_size(
        root, r
    ))?);
    // Goodput.
    let window = goodput_window(r);
    let title = format!(
        "Per-flow goodput (trailing {} µs average of {} µs samples)",
        us(window),
        us(r.sample)
    );
    let series = goodput_series(r, window);
    let (rows, cols) = panel_grid(series.len());
    let size = (SIZE.0, SIZE.1.max(60 + rows as u32 * 150));
    out.extend(render!(dir, "flow_throughput", size, |root| draw_panels(
        root, &title, &series, rows, cols
    ))?);
    // Queues.
    let title = format!(
        "Egress queue length, largest queues (sampled every {} µs)",
        us(r.sample)
    );
    out.extend(write(
        dir,
        "queue_length",
        &Chart {
            title: &title,
            x: "time (µs)",
            y: "KB",
            series: queue_series(r, 6),
            points: false,
        },
    )?);
    out.extend(render!(dir, "pfc_pauses", |root| draw_pfc(root, r))?);
    out.extend(render!(dir, "busiest_links", |root| draw_links(root, r))?);
    Ok(out)
}

fn draw_cdf<DB: DrawingBackend>(
    root: DrawingArea<DB, Shift>,
    cdf: &[(f64, f64)],
) -> Result<(), String> {
    root.fill(&WHITE).map_err(e)?;
    let x0 = cdf.first().map_or(1.0, |p| p.0) / 1.05;
    let x1 = cdf.last().map_or(2.0, |p| p.0).max(x0 * 1.1) * 1.05;
    // A step per flow: the CDF is flat between slowdowns.
    let mut pts = vec![(x0, 0.0)];
    let mut last = 0.0;
    for &(x, y) in cdf {
        pts.push((x, last));
        pts.push((x, y));
        last = y;
    }
    let caption = format!("FCT slowdown CDF ({} flows)", cdf.len());
    // Log x when slowdowns span a decade or more (the tails of big runs),
    // linear otherwise (a log axis over 9..13 has one label).
    macro_rules! body {
        ($x:expr, $desc:expr) => {{
            let mut chart = ChartBuilder::on(&root)
                .caption(&caption, ("sans-serif", 22))
                .margin(12)
                .x_label_area_size(40)
                .y_label_area_size(70)
                .build_cartesian_2d($x, 0.0..1.0)
                .map_err(e)?;
            chart
                .configure_mesh()
                .x_desc($desc)
                .y_desc("fraction of flows")
                .x_labels(12)
                .x_label_formatter(&|x| slowdown_label(*x))
                .light_line_style(WHITE)
                .label_style(("sans-serif", 13))
                .draw()
                .map_err(e)?;
            chart
                .draw_series(LineSeries::new(pts, colour(0).stroke_width(2)))
                .map_err(e)?;
        }};
    }
    if x1 / x0 >= 10.0 {
        body!(
            (x0..x1).log_scale(),
            "slowdown (FCT / ideal FCT), log scale"
        );
    } else {
        body!(x0..x1, "slowdown (FCT / ideal FCT)");
    }
    root.present().map_err(e)
}

/// Size bands of equal flow counts (about 20, at least 10 flows each),
/// each with the median and p99 slowdown of its flows, placed at the
/// band's median size: a band is never a lone flow's noise.
fn size_bands(pts: &[(f64, f64)]) -> (Points, Points) {
    let mut v = pts.to_vec();
    v.sort_by(|a, b| a.0.total_cmp(&b.0).then(a.1.total_cmp(&b.1)));
    let per = (v.len() / 20).max(10);
    let (mut p50, mut p99) = (Vec::new(), Vec::new());
    let mut chunks: Vec<&[(f64, f64)]> = v.chunks(per).collect();
    // Fold a short last band into the one before it.
    if chunks.len() > 1 && chunks.last().is_some_and(|c| c.len() < per / 2) {
        let n = chunks.len();
        let start = v.len() - chunks[n - 2].len() - chunks[n - 1].len();
        chunks.truncate(n - 2);
        chunks.push(&v[start..]);
    }
    for c in chunks {
        let mid = c[c.len() / 2].0;
        let mut s: Vec<f64> = c.iter().map(|p| p.1).collect();
        if let Some(p) = crate::metrics::percentiles(&mut s) {
            p50.push((mid, p.p50));
            p99.push((mid, p.p99));
        }
    }
    (p50, p99)
}

fn draw_by_size<DB: DrawingBackend>(
    root: DrawingArea<DB, Shift>,
    r: &Report,
) -> Result<(), String> {
    root.fill(&WHITE).map_err(e)?;
    let pts: Vec<(f64, f64)> = r
        .flows
        .iter()
        .filter(|f| f.ok)
        .filter_map(|f| Some((f.size as f64, f.slowdown()?)))
        .collect();
    let (mut x0, mut x1, mut y1) = (f64::MAX, 0f64, 2f64);
    for &(x, y) in &pts {
        x0 = x0.min(x);
        x1 = x1.max(x);
        y1 = y1.max(y);
    }
    if pts.is_empty() {
        (x0, x1) = (1e3, 1e6);
    }
    let (x0, x1) = (x0 / 1.5, x1 * 1.5);
    let mut chart = ChartBuilder::on(&root)
        .caption(
            format!("Slowdown by flow size ({} finished flows)", pts.len()),
            ("sans-serif", 22),
        )
        .margin(12)
        .x_label_area_size(40)
        .y_label_area_size(70)
        .build_cartesian_2d((x0..x1).log_scale(), (0.9..y1 * 1.3).log_scale())
        .map_err(e)?;
    chart
        .configure_mesh()
        .x_desc("flow size (bytes), log scale")
        .y_desc("slowdown (FCT / ideal FCT), log scale")
        .x_label_formatter(&|x| bytes_label(*x))
        .y_label_formatter(&|y| slowdown_label(*y))
        .light_line_style(WHITE)
        .label_style(("sans-serif", 13))
        .draw()
        .map_err(e)?;
    let dot = colour(0).mix(if pts.len() > 2000 { 0.25 } else { 0.6 });
    chart
        .draw_series(pts.iter().map(|&p| Circle::new(p, 2, dot.filled())))
        .map_err(e)?
        .label("a flow")
        .legend(move |(x, y)| Circle::new((x + 8, y), 3, dot.filled()));
    let ideal = colour(2);
    chart
        .draw_series(LineSeries::new(
            [(x0, 1.0), (x1, 1.0)],
            ideal.stroke_width(2),
        ))
        .map_err(e)?
        .label("ideal: the flow alone on the fabric (1)")
        .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 16, y)], ideal.stroke_width(3)));
    let (p50, p99) = size_bands(&pts);
    for (i, (name, v)) in [("median per size band", p50), ("p99 per size band", p99)]
        .into_iter()
        .enumerate()
    {
        let c = colour(1 + 2 * i);
        chart
            .draw_series(LineSeries::new(v.iter().copied(), c.stroke_width(3)))
            .map_err(e)?
            .label(name)
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 16, y)], c.stroke_width(3)));
        chart
            .draw_series(v.iter().map(|&p| Circle::new(p, 4, c.filled())))
            .map_err(e)?;
    }
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::UpperLeft)
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK)
        .label_font(("sans-serif", 12))
        .draw()
        .map_err(e)?;
    root.present().map_err(e)
}

fn slowdown_label(y: f64) -> String {
    if y >= 100.0 || (y - y.round()).abs() < 0.01 {
        format!("{y:.0}")
    } else {
        format!("{y:.1}")
    }
}

fn bytes_label(x: f64) -> String {
    match x {
        x if x >= 1e9 => format!("{:.0}GB", x / 1e9),
        x if x >= 1e6 => format!("{:.0}MB", x / 1e6),
        x if x >= 1e3 => format!("{:.0}KB", x / 1e3),
        x => format!("{x:.0}B"),
    }
}

/// PFC over time: XOFF frames sent per bin (top), and the most port ×
/// priority pairs paused at once in each bin (bottom), from `pfc.csv`'s
/// pause / resume / expire events.
fn draw_pfc<DB: DrawingBackend>(root: DrawingArea<DB, Shift>, r: &Report) -> Result<(), String> {
    root.fill(&WHITE).map_err(e)?;
    let t0 = first_start(r);
    let end = r.now.max(t0 + 1);
    let bin = ((nice_us(us(end - t0) / 100.0) * 1e6) as Ps).max(1);
    let t0 = t0 / bin * bin;
    let nbins = ((end - t0) / bin) as usize + 1;
    let mut xoff = vec![0u64; nbins];
    let mut paused_max = vec![0u64; nbins];
    let mut paused: BTreeMap<(u32, u16, u8), bool> = BTreeMap::new();
    let mut now_paused = 0u64;
    let mut cur_bin = 0;
    for ev in &r.pfc {
        let b = ((ev.time.saturating_sub(t0) / bin) as usize).min(nbins - 1);
        while cur_bin < b {
            cur_bin += 1;
            paused_max[cur_bin] = paused_max[cur_bin].max(now_paused);
        }
        let key = (ev.node, ev.port, ev.prio);
        match ev.what {
            "xoff_tx" => xoff[b] += 1,
            "pause" => {
                let was = paused.insert(key, true).unwrap_or(false);
                now_paused += u64::from(!was);
            }
            "resume" | "expire" | "down" => {
                let was = paused.insert(key, false).unwrap_or(false);
                now_paused -= u64::from(was);
            }
            _ => {}
        }
        paused_max[b] = paused_max[b].max(now_paused);
    }
    while cur_bin + 1 < nbins {
        cur_bin += 1;
        paused_max[cur_bin] = paused_max[cur_bin].max(now_paused);
    }
    let total: u64 = xoff.iter().sum();
    let title = if total == 0 {
        "PFC over time: no pause frames were sent".to_string()
    } else {
        format!(
            "PFC over time ({total} XOFF frames sent, bins of {} µs)",
            us(bin)
        )
    };
    let root = root.titled(&title, ("sans-serif", 22)).map_err(e)?;
    let (top, bottom) = root.split_vertically(SIZE.1 / 2 - 20);
    let panel = |area: &DrawingArea<DB, Shift>,
                 v: &[u64],
                 y: &str,
                 c: RGBColor,
                 x_desc: &str|
     -> Result<(), String> {
        let y1 = v.iter().copied().max().unwrap_or(0).max(1) as f64 * 1.1;
        let mut ch = ChartBuilder::on(area)
            .margin(10)
            .x_label_area_size(35)
            .y_label_area_size(70)
            .build_cartesian_2d(us(t0)..us(t0 + nbins as Ps * bin), 0.0..y1)
            .map_err(e)?;
        ch.configure_mesh()
            .x_desc(x_desc)
            .y_desc(y)
            .y_label_formatter(&|v| {
                // Counts: label whole numbers only.
                if (v - v.round()).abs() < 1e-9 {
                    format!("{v:.0}")
                } else {
                    String::new()
                }
            })
            .label_style(("sans-serif", 12))
            .draw()
            .map_err(e)?;
        ch.draw_series(v.iter().enumerate().map(|(i, &n)| {
            let x = us(t0 + i as Ps * bin);
            Rectangle::new([(x, 0.0), (x + us(bin), n as f64)], c.filled())
        }))
        .map_err(e)?;
        Ok(())
    };
    panel(&top, &xoff, "XOFF frames sent", colour(3), "")?;
    panel(
        &bottom,
        &paused_max,
        "port×prio paused",
        colour(0),
        "time (µs)",
    )?;
    root.present().map_err(e)
}

/// The ports that sent the most, as a share of line rate over the run.
fn draw_links<DB: DrawingBackend>(root: DrawingArea<DB, Shift>, r: &Report) -> Result<(), String> {
    root.fill(&WHITE).map_err(e)?;
    let t0 = first_start(r);
    let secs = r.now.saturating_sub(t0) as f64 / 1e12;
    let mut util: Vec<(String, f64)> = r
        .ports
        .iter()
        .filter(|p| p.tx_bytes > 0 && p.rate_bps > 0 && secs > 0.0)
        .map(|p| {
            (
                format!(
                    "{} → {} ({} Gb/s)",
                    r.node_names[p.node as usize],
                    r.node_names[p.peer as usize],
                    p.rate_bps as f64 / 1e9
                ),
                p.tx_bytes as f64 * 8.0 / (p.rate_bps as f64 * secs) * 100.0,
            )
        })
        .collect();
    util.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
    util.truncate(15);
    let n = util.len().max(1);
    let x1 = util.first().map_or(100.0, |u| u.1).max(1.0) * 1.1;
    let mut chart = ChartBuilder::on(&root)
        .caption(
            format!(
                "Busiest links: bytes sent / line rate, {:.1}–{:.1} µs",
                us(t0),
                us(r.now)
            ),
            ("sans-serif", 22),
        )
        .margin(12)
        .x_label_area_size(40)
        .y_label_area_size(200)
        .build_cartesian_2d(0.0..x1, 0.0..n as f64)
        .map_err(e)?;
    let labels: Vec<String> = util.iter().map(|u| u.0.clone()).collect();
    chart
        .configure_mesh()
        .disable_y_mesh()
        .y_labels(n * 2 + 1)
        .y_label_formatter(&|y| {
            // Bars sit at k + 0.5 from the top; label their centres only.
            let k = y.floor() as usize;
            if (y - y.floor() - 0.5).abs() < 1e-6 && k < n {
                labels.get(n - 1 - k).cloned().unwrap_or_default()
            } else {
                String::new()
            }
        })
        .x_desc("% of line rate")
        .label_style(("sans-serif", 12))
        .draw()
        .map_err(e)?;
    chart
        .draw_series(util.iter().enumerate().map(|(i, u)| {
            let y = (n - 1 - i) as f64;
            Rectangle::new([(0.0, y + 0.15), (u.1, y + 0.85)], colour(0).filled())
        }))
        .map_err(e)?;
    root.present().map_err(e)
}

/// A comparison plot of a sweep: `categories` along x (a swept key's
/// values, in sweep order), a log-scale y; for each series, every run's
/// value as a dot and the median over the runs at each category as a line.
pub fn write_categorical(
    dir: &Path,
    stem: &str,
    title: &str,
    x_desc: &str,
    categories: &[String],
    series: &[(String, Vec<(usize, f64)>)],
) -> Result<Vec<PathBuf>, PlotError> {
    register();
    render!(dir, stem, |root| draw_categorical(
        root, title, x_desc, categories, series
    ))
}

/// The median (the mean of the middle two of an even count).
fn median(v: &mut [f64]) -> Option<f64> {
    v.sort_by(|a, b| a.total_cmp(b));
    let n = v.len();
    match n {
        0 => None,
        _ if n % 2 == 1 => Some(v[n / 2]),
        _ => Some((v[n / 2 - 1] + v[n / 2]) / 2.0),
    }
}

fn draw_categorical<DB: DrawingBackend>(
    root: DrawingArea<DB, Shift>,
    title: &str,
    x_desc: &str,
    cats: &[String],
    series: &[(String, Vec<(usize, f64)>)],
) -> Result<(), String> {
    root.fill(&WHITE).map_err(e)?;
    let y1 = series
        .iter()
        .flat_map(|(_, v)| v.iter().map(|p| p.1))
        .fold(2.0f64, f64::max);
    let n = cats.len().max(1);
    let runs = series.first().map_or(0, |s| s.1.len());
    let mut chart = ChartBuilder::on(&root)
        .caption(
            format!("{title} ({runs} runs: dots; lines: median)"),
            ("sans-serif", 22),
        )
        .margin(12)
        .x_label_area_size(45)
        .y_label_area_size(70)
        .build_cartesian_2d(-0.5..n as f64 - 0.5, (0.9..y1 * 1.3).log_scale())
        .map_err(e)?;
    chart
        .configure_mesh()
        .disable_x_mesh()
        .x_labels(n * 2 + 1)
        .x_label_formatter(&|x| {
            let k = x.round();
            if (x - k).abs() < 1e-6 && k >= 0.0 {
                cats.get(k as usize).cloned().unwrap_or_default()
            } else {
                String::new()
            }
        })
        .x_desc(x_desc)
        .y_desc("slowdown (FCT / ideal FCT), log scale")
        .y_label_formatter(&|y| slowdown_label(*y))
        .light_line_style(WHITE)
        .label_style(("sans-serif", 13))
        .draw()
        .map_err(e)?;
    for (i, (name, pts)) in series.iter().enumerate() {
        let c = colour(i);
        // Offset each series a little so dots of equal value stay visible.
        let dx = (i as f64 - (series.len() as f64 - 1.0) / 2.0) * 0.04;
        chart
            .draw_series(
                pts.iter()
                    .map(|&(x, y)| Circle::new((x as f64 + dx, y), 4, c.mix(0.5).filled())),
            )
            .map_err(e)?;
        let med: Vec<(f64, f64)> = (0..n)
            .filter_map(|k| {
                let mut v: Vec<f64> = pts.iter().filter(|p| p.0 == k).map(|p| p.1).collect();
                Some((k as f64 + dx, median(&mut v)?))
            })
            .collect();
        chart
            .draw_series(LineSeries::new(med, c.stroke_width(2)))
            .map_err(e)?
            .label(name.clone())
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 16, y)], c.stroke_width(3)));
    }
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::UpperLeft)
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK)
        .label_font(("sans-serif", 12))
        .draw()
        .map_err(e)?;
    root.present().map_err(e)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::metrics::{Counters, QueueSample};

    fn report(queues: Vec<QueueSample>, progress: Vec<(Ps, u32, u64)>, now: Ps) -> Report {
        Report {
            now,
            events: 0,
            counters: Counters::default(),
            flows: Vec::new(),
            ports: Vec::new(),
            pfc: Vec::new(),
            queues,
            flow_progress: progress,
            pfc_frames: Vec::new(),
            node_names: vec!["sw".into()],
            host_nodes: Vec::new(),
            sample: 10 * crate::PS_PER_US,
            max_rows: 1000,
            qlen_mon: None,
            host_path: None,
        }
    }

    #[test]
    fn empty_queues_are_drawn_as_zero() {
        let us10 = 10 * crate::PS_PER_US;
        let q = |k: u64, bytes| QueueSample {
            time: k * us10,
            node: 0,
            port: 1,
            prio: 3,
            bytes,
        };
        // Non-empty at 10 and 40 µs only: 20 and 30 µs were empty.
        let r = report(
            vec![q(1, 5000), q(4, 7000)],
            Vec::new(),
            50 * crate::PS_PER_US,
        );
        let s = queue_series(&r, 6);
        assert_eq!(s.len(), 1);
        let ys: Vec<f64> = s[0].1.iter().map(|p| p.1).collect();
        assert_eq!(ys, [0.0, 5.0, 0.0, 0.0, 7.0, 0.0]);
        // A log cut at max_rows says nothing after its last row.
        let mut r = r;
        r.max_rows = 2;
        assert_eq!(queue_series(&r, 6)[0].1.len(), 5);
        // Time before the first flow starts is left out.
        r.max_rows = 1000;
        r.flows.push(crate::metrics::FlowResult {
            id: 0,
            src: 0,
            dst: 0,
            size: 1,
            start: 20 * crate::PS_PER_US,
            finish: None,
            ideal: 1,
            ok: false,
            sport: 0,
        });
        let s = queue_series(&r, 6);
        assert_eq!(s[0].1, [(20.0, 0.0), (30.0, 0.0), (40.0, 7.0), (50.0, 0.0)]);
    }

    #[test]
    fn a_run_gets_every_plot() {
        let src = "[topology]\nkind = \"star\"\nhosts = 4\n[switch]\nbuffer_kb = 200\n\
                   [[workload]]\nkind = \"incast\"\ndst = 0\nsize = 200000\n\
                   [output]\nsample_us = 2\n";
        let sc = crate::scenario::Scenario::parse(src, "t.toml", Path::new("."), None).unwrap();
        let mut sim = crate::Simulator::new(sc.cfg, sc.topo, &sc.flows).unwrap();
        sim.run().expect("the run finishes every flow");
        let r = sim.report();
        assert!(r.counters.pfc_xoff_tx > 0, "the incast should pause");
        let dir = tempfile::tempdir().unwrap();
        let files = write_plots(&r, dir.path()).unwrap();
        for stem in [
            "slowdown_cdf",
            "slowdown_by_size",
            "flow_throughput",
            "queue_length",
            "pfc_pauses",
            "busiest_links",
        ] {
            for ext in ["png", "svg"] {
                let f = dir.path().join(format!("{stem}.{ext}"));
                assert!(files.contains(&f), "{stem}.{ext} not reported");
                let len = std::fs::metadata(&f).unwrap().len();
                assert!(len > 5_000, "{stem}.{ext} is {len} bytes");
            }
        }
        // The three senders' goodput: one panel each.
        let svg = std::fs::read_to_string(dir.path().join("flow_throughput.svg")).unwrap();
        for f in 0..3 {
            assert!(
                svg.contains(&format!("flow {f}: h")),
                "no panel for flow {f}"
            );
        }
    }

    #[test]
    fn goodput_is_a_trailing_window_average() {
        let us10 = 10 * crate::PS_PER_US;
        // 12,500 bytes per 10 µs = 10 Gb/s, then a stall.
        let prog: Vec<(Ps, u32, u64)> = (0..=4)
            .map(|k| (k * us10, 0, k * 12_500))
            .chain((5..=8).map(|k| (k * us10, 0, 50_000)))
            .collect();
        let r = report(Vec::new(), prog, 80 * crate::PS_PER_US);
        let s = goodput_series(&r, 2 * us10);
        let ys: Vec<f64> = s[0]
            .1
            .iter()
            .map(|p| (p.1 * 1000.0).round() / 1000.0)
            .collect();
        assert_eq!(ys, [10.0, 10.0, 10.0, 10.0, 5.0, 0.0, 0.0, 0.0]);
        assert_eq!(nice_us(13.0), 10.0);
        assert_eq!(nice_us(0.3), 0.2);
    }
}
