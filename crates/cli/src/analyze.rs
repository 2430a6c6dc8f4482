//! `roce analyze`: the seed's §5.9 bottleneck table for a workload on a
//! hardware profile (a thin front over `roce_host::analyze`).
//!
//! `roce analyze PROFILE.toml [--workload KEY=VALUE…] [--json] [--svg FILE]
//! [--png FILE] [--sweep size=64..4M] [--compare]`

use anyhow::{Context, Result, bail};
use clap::Args;
use plotters::prelude::*;
use roce_host::analyze::{self as an, Analysis, Step, SweepPoint};
use roce_host::workload::parse_size;
use roce_host::{Profile, Workload};
use serde_json::{Value, json};
use std::io::Write;
use std::path::{Path, PathBuf};

/// `println!` that ignores a closed stdout (`roce analyze … | head`).
macro_rules! say {
    ($($t:tt)*) => {{
        let _ = writeln!(std::io::stdout(), $($t)*);
    }};
}

#[derive(Debug, Args)]
pub struct AnalyzeArgs {
    /// Hardware profile (TOML; see profiles/ and README.md).
    pub profile: PathBuf,
    /// Workload keys: op=send|write|read|atomic size=BYTES qps=N sges=N
    /// signal_every=N inline=true|false batch=N incast=N numa=local|remote
    /// mtu=256..4096 threads=N (space- or comma-separated).
    #[arg(long, num_args = 1.., value_name = "KEY=VALUE")]
    pub workload: Vec<String>,
    /// Print one JSON object instead of the table.
    #[arg(long)]
    pub json: bool,
    /// Draw the path with each hop's utilisation as SVG.
    #[arg(long, value_name = "FILE")]
    pub svg: Option<PathBuf>,
    /// ... and as PNG.
    #[arg(long, value_name = "FILE")]
    pub png: Option<PathBuf>,
    /// Sweep the message size over powers of two (e.g. size=64..4M) and
    /// print where the binding hop changes.
    #[arg(long, value_name = "size=LO..HI")]
    pub sweep: Option<String>,
    /// Show how each §5.3/§5.8 optimisation moves the bottleneck.
    #[arg(long)]
    pub compare: bool,
}

pub fn run(args: AnalyzeArgs) -> Result<()> {
    let profile = Profile::load(&args.profile)?;
    let pairs: Vec<&str> = args
        .workload
        .iter()
        .flat_map(|s| s.split([',', ' ']))
        .filter(|s| !s.is_empty())
        .collect();
    let w = Workload::from_pairs(&pairs)?;
    let a = an::analyze(&profile, &w)?;
    let sweep = match &args.sweep {
        Some(spec) => {
            let (lo, hi) = parse_sweep(spec)?;
            Some(an::sweep(&profile, &w, &an::sizes_pow2(lo, hi))?)
        }
        None => None,
    };
    let steps = if args.compare {
        Some(an::compare(&profile, &w)?)
    } else {
        None
    };

    if args.json {
        let mut v = analysis_json(&a);
        v["profile"] = json!(profile.name);
        v["workload"] = json!(w.describe());
        if let Some(pts) = &sweep {
            v["sweep"] = sweep_json(pts);
        }
        if let Some(steps) = &steps {
            v["compare"] = compare_json(steps);
        }
        say!("{v}");
    } else {
        print_table(&profile, &a);
        if let Some(pts) = &sweep {
            print_sweep(pts);
        }
        if let Some(steps) = &steps {
            print_compare(steps);
        }
    }
    for (file, svg) in [(&args.svg, true), (&args.png, false)] {
        if let Some(f) = file {
            draw_path(f, svg, &profile, &a)?;
            if !args.json {
                say!("wrote {}", f.display());
            }
        }
    }
    Ok(())
}

/// `size=64..4M` → (64, 4 MiB).
fn parse_sweep(spec: &str) -> Result<(u64, u64)> {
    let Some((key, range)) = spec.split_once('=') else {
        bail!("--sweep {spec}: expected size=LO..HI, e.g. size=64..4M");
    };
    if key.trim() != "size" {
        bail!("--sweep {spec}: only size can be swept (size=LO..HI)");
    }
    let Some((lo, hi)) = range.split_once("..") else {
        bail!("--sweep {spec}: expected LO..HI, e.g. 64..4M");
    };
    let (Some(lo), Some(hi)) = (parse_size(lo), parse_size(hi)) else {
        bail!("--sweep {spec}: sizes are bytes, e.g. 64, 4K, 4M");
    };
    if lo == 0 || lo > hi {
        bail!("--sweep {spec}: need 1 ≤ LO ≤ HI");
    }
    Ok((lo, hi))
}

fn analysis_json(a: &Analysis) -> Value {
    let hops: Vec<Value> = a
        .hops
        .iter()
        .map(|h| {
            json!({
                "name": h.name,
                "capacity_gbps": h.capacity_gbps,
                "capacity_mpps": h.capacity_mpps,
                "demand_gbps": h.demand_gbps,
                "demand_mpps": h.demand_mpps,
                "utilisation": h.utilisation,
                "metric": h.metric,
                "unit": h.unit,
                "ceiling_gbps": h.ceiling_gbps,
                "limit": h.limit,
            })
        })
        .collect();
    json!({
        "hops": hops,
        "binding": a.binding_hop().name,
        "reason": a.reason,
        "message_rate_mps": a.message_rate_mps,
        "goodput_gbps": a.goodput_gbps,
        "total_goodput_gbps": a.total_goodput_gbps,
    })
}

fn sweep_json(pts: &[SweepPoint]) -> Value {
    let points: Vec<Value> = pts
        .iter()
        .map(|p| {
            json!({
                "size": p.size,
                "binding": p.analysis.binding_hop().name,
                "goodput_gbps": p.analysis.goodput_gbps,
                "message_rate_mps": p.analysis.message_rate_mps,
            })
        })
        .collect();
    let changes: Vec<Value> = an::binding_changes(pts)
        .into_iter()
        .map(|(a, b, from, to)| json!({"after": a, "at": b, "from": from, "to": to}))
        .collect();
    json!({"points": points, "changes": changes})
}

fn compare_json(steps: &[Step]) -> Value {
    let hop = steps[0].analysis.binding_hop().name;
    Value::Array(
        steps
            .iter()
            .map(|s| {
                json!({
                    "baseline_hop_ceiling_gbps": s.analysis.hop(hop).map(|h| h.ceiling_gbps),
                    "name": s.name,
                    "change": s.change,
                    "applies": s.applies,
                    "binding": s.analysis.binding_hop().name,
                    "goodput_gbps": s.analysis.goodput_gbps,
                    "message_rate_mps": s.analysis.message_rate_mps,
                    "reason": s.analysis.reason,
                })
            })
            .collect(),
    )
}

fn size_str(n: u64) -> String {
    match n {
        n if n >= 1 << 20 && n % (1 << 20) == 0 => format!("{}M", n >> 20),
        n if n >= 1 << 10 && n % (1 << 10) == 0 => format!("{}K", n >> 10),
        n => n.to_string(),
    }
}

fn print_table(p: &Profile, a: &Analysis) {
    say!("profile:  {}", p.name);
    say!("workload: {}", a.workload.describe());
    say!();
    say!(
        "  {:<11} {:>10} {:>10} {:>10} {:>10} {:>6}  {:<8} {}",
        "hop",
        "cap Gb/s",
        "cap M/s",
        "dem Gb/s",
        "dem M/s",
        "util",
        "unit",
        "watch"
    );
    for (i, h) in a.hops.iter().enumerate() {
        let mark = if i == a.binding { '*' } else { ' ' };
        say!(
            "{mark} {:<11} {:>10.1} {:>10.2} {:>10.1} {:>10.2} {:>5.0}%  {:<8} {}",
            h.name,
            h.capacity_gbps,
            h.capacity_mpps,
            h.demand_gbps,
            h.demand_mpps,
            h.utilisation * 100.0,
            h.unit,
            h.metric
        );
    }
    say!();
    say!("binding:  {}", a.binding_hop().name);
    say!("reason:   {}", a.reason);
    say!(
        "goodput:  {:.2} Gb/s per source ({:.3} M msg/s); {:.2} Gb/s into the target",
        a.goodput_gbps,
        a.message_rate_mps,
        a.total_goodput_gbps
    );
}

fn print_sweep(pts: &[SweepPoint]) {
    say!();
    say!("sweep:");
    say!(
        "  {:>6} {:<11} {:>10} {:>10}",
        "size",
        "binding",
        "Gb/s",
        "M msg/s"
    );
    for p in pts {
        say!(
            "  {:>6} {:<11} {:>10.2} {:>10.3}",
            size_str(p.size),
            p.analysis.binding_hop().name,
            p.analysis.goodput_gbps,
            p.analysis.message_rate_mps
        );
    }
    let changes = an::binding_changes(pts);
    if changes.is_empty() {
        say!("binding hop does not change over the sweep");
    }
    for (a, b, from, to) in changes {
        say!(
            "binding changes between {} and {}: {from} -> {to}",
            size_str(a),
            size_str(b)
        );
    }
}

fn print_compare(steps: &[Step]) {
    say!();
    say!("optimisations (seed §5.3/§5.8), each alone then all together:");
    let base = &steps[0].analysis;
    let hop = base.binding_hop().name;
    say!(
        "  {:<25} {:<22} {:<11} {:>9} {:>9} {:>8} {:>16}",
        "optimisation",
        "change",
        "binding",
        "Gb/s",
        "M msg/s",
        "vs base",
        format!("{hop} ceiling")
    );
    for s in steps {
        let change = if s.name == "baseline" {
            ""
        } else {
            s.change.as_str()
        };
        let ceiling = s.analysis.hop(hop).map_or(f64::NAN, |h| h.ceiling_gbps);
        say!(
            "  {:<25} {:<22} {:<11} {:>9.2} {:>9.3} {:>7.2}x {:>11.2} Gb/s",
            s.name,
            change,
            s.analysis.binding_hop().name,
            s.analysis.goodput_gbps,
            s.analysis.message_rate_mps,
            s.analysis.goodput_gbps / base.goodput_gbps,
            ceiling
        );
    }
}

static FONT: &[u8] = include_bytes!("../../sim/assets/DejaVuSans.ttf");

/// Draws the path as a row of hops, each filled to its utilisation, the
/// binding one in red. plotters runs headless: no `ttf` feature, the
/// embedded DejaVu Sans drawn through `ab_glyph` (as `roce sim`'s plots).
fn draw_path(file: &Path, svg: bool, p: &Profile, a: &Analysis) -> Result<()> {
    let _ = plotters::style::register_font("sans-serif", FontStyle::Normal, FONT);
    let size = (1400, 460);
    let res = if svg {
        draw_on(SVGBackend::new(file, size).into_drawing_area(), p, a)
    } else {
        draw_on(BitMapBackend::new(file, size).into_drawing_area(), p, a)
    };
    res.with_context(|| format!("drawing {}", file.display()))
}

fn draw_on<DB: DrawingBackend>(
    root: DrawingArea<DB, plotters::coord::Shift>,
    p: &Profile,
    a: &Analysis,
) -> Result<()> {
    let e = |e: DrawingAreaErrorKind<DB::ErrorType>| anyhow::anyhow!("{e}");
    root.fill(&WHITE).map_err(e)?;
    let title = ("sans-serif", 22).into_font();
    let small = ("sans-serif", 14).into_font();
    let label = ("sans-serif", 15).into_font();
    root.draw(&Text::new(p.name.clone(), (20, 10), title))
        .map_err(e)?;
    root.draw(&Text::new(a.workload.describe(), (20, 40), small.clone()))
        .map_err(e)?;
    let n = a.hops.len() as i32;
    let (x0, w, gap, top, h) = (20, 122, 14, 80, 200);
    for (i, hop) in a.hops.iter().enumerate() {
        let x = x0 + i as i32 * (w + gap);
        let binding = i == a.binding;
        let color = if binding { RED } else { RGBColor(60, 110, 200) };
        let util = hop.utilisation.clamp(0.0, 1.0);
        let fill_h = (f64::from(h) * util).round() as i32;
        root.draw(&Rectangle::new(
            [(x, top + h - fill_h), (x + w, top + h)],
            color.mix(0.55).filled(),
        ))
        .map_err(e)?;
        root.draw(&Rectangle::new(
            [(x, top), (x + w, top + h)],
            color.stroke_width(if binding { 4 } else { 1 }),
        ))
        .map_err(e)?;
        root.draw(&Text::new(hop.name, (x + 4, top + h + 8), label.clone()))
            .map_err(e)?;
        root.draw(&Text::new(
            format!("{:.0} %", hop.utilisation * 100.0),
            (x + 4, top + 6),
            label.clone(),
        ))
        .map_err(e)?;
        root.draw(&Text::new(
            format!("{:.1} Gb/s", hop.capacity_gbps),
            (x + 4, top + h + 30),
            small.clone(),
        ))
        .map_err(e)?;
        root.draw(&Text::new(
            format!(
                "{:.1} M{}/s",
                hop.capacity_mpps,
                if hop.unit == "TLPs" { "TLP" } else { "" }
            ),
            (x + 4, top + h + 48),
            small.clone(),
        ))
        .map_err(e)?;
        if i + 1 < n as usize {
            let ay = top + h / 2;
            root.draw(&PathElement::new(
                vec![(x + w, ay), (x + w + gap, ay)],
                BLACK.stroke_width(2),
            ))
            .map_err(e)?;
        }
    }
    // The reason, wrapped.
    let mut y = top + h + 80;
    let mut line = String::new();
    for word in format!("binding: {}", a.reason).split(' ') {
        if line.len() + word.len() > 150 {
            root.draw(&Text::new(line.clone(), (20, y), small.clone()))
                .map_err(e)?;
            y += 20;
            line.clear();
        }
        if !line.is_empty() {
            line.push(' ');
        }
        line.push_str(word);
    }
    root.draw(&Text::new(line, (20, y), small)).map_err(e)?;
    root.present().map_err(e)?;
    Ok(())
}
