//! `roce sim`: the fabric simulator (`roce-sim`) from the command line.
//!
//! `roce sim SCENARIO.toml [--out DIR] [--seed N]` runs a scenario and
//! writes fct.csv, summary.json, queues.csv, pfc.csv and plots into DIR;
//! `roce sim --hpcc-config CONFIG.txt` runs an experiment written for the
//! HPCC ns-3 simulator and also writes its FCT and PFC files;
//! `roce sim sweep SWEEP.toml --out DIR` runs a grid of scenarios (sharded
//! by `--shard I/N` or a Slurm / Kubernetes job array) and
//! `roce sim collect DIR… --out DIR` merges the shards (`roce_sim::sweep`).

use anyhow::{Context, Result, bail};
use clap::Args;
use indicatif::{ProgressBar, ProgressStyle};
use roce_sim::scenario::Scenario;
use roce_sim::{Report, Simulator, Summary};
use std::io::{IsTerminal, Write};
use std::path::{Path, PathBuf};
use std::time::Instant;

/// `println!` that ignores a closed stdout (`roce sim … | head`).
macro_rules! say {
    ($($t:tt)*) => {{
        let _ = writeln!(std::io::stdout(), $($t)*);
    }};
}

#[derive(Debug, Args)]
#[command(args_conflicts_with_subcommands = true)]
pub struct SimArgs {
    #[command(subcommand)]
    pub cmd: Option<SimCmd>,
    /// Scenario file (TOML; see scenarios/README.md).
    pub scenario: Option<PathBuf>,
    /// Output directory (default: `out/sim/<scenario name>`).
    #[arg(long)]
    pub out: Option<PathBuf>,
    /// Seed (overrides the scenario's).
    #[arg(long)]
    pub seed: Option<u64>,
    /// Run an HPCC ns-3 simulator config file (config.txt) instead.
    #[arg(long, value_name = "CONFIG.txt", conflicts_with = "scenario")]
    pub hpcc_config: Option<PathBuf>,
    /// Skip the PNG/SVG plots.
    #[arg(long)]
    pub no_plots: bool,
    /// Print where memory goes (heap bytes by structure, per host, per
    /// switch port, per flow) at the run's largest footprint, to stderr.
    #[arg(long)]
    pub memory: bool,
}

/// `roce sim sweep` and `roce sim collect`.
#[derive(Debug, clap::Subcommand)]
pub enum SimCmd {
    /// Run a sweep: a base scenario × a grid of overrides × seeds (see scenarios/sweep/README.md).
    ///
    /// Exit status: 0 when every run of this shard succeeded; 3 when some
    /// failed (each is recorded with its error in sweep.csv, the others
    /// ran); 1 when the sweep could not start (bad file, bad grid key).
    Sweep(SweepArgs),
    /// Merge the tables of sweep shards into one sweep.csv and its plots.
    Collect {
        /// Folders holding sweep-shard-*.csv (or sweep.csv) files.
        #[arg(required = true)]
        dirs: Vec<PathBuf>,
        /// Where the merged sweep.csv and plots go.
        #[arg(long)]
        out: PathBuf,
    },
}

#[derive(Debug, Args)]
pub struct SweepArgs {
    /// Sweep file (TOML).
    pub sweep: PathBuf,
    /// Output directory: one run-NNNNN folder per run, and sweep.csv.
    #[arg(long)]
    pub out: PathBuf,
    /// Runs at once (default: every core this process may use).
    #[arg(short = 'j', long)]
    pub jobs: Option<usize>,
    /// Run only slice I of N (I from 0). Without it, a Slurm array task
    /// (SLURM_ARRAY_TASK_ID/SLURM_ARRAY_TASK_COUNT) or a Kubernetes Indexed
    /// Job pod (JOB_COMPLETION_INDEX, with ROCE_SWEEP_SHARDS = completions)
    /// runs its own slice.
    #[arg(long, value_name = "I/N")]
    pub shard: Option<String>,
    /// Skip each run's own plots (the comparison plots are still drawn).
    #[arg(long)]
    pub no_plots: bool,
    /// List the runs (index, parameters, seed, shard) without running them.
    #[arg(long)]
    pub dry_run: bool,
}

pub fn run(args: SimArgs) -> Result<()> {
    match args.cmd {
        Some(SimCmd::Sweep(a)) => return sweep(a),
        Some(SimCmd::Collect { dirs, out }) => return collect(&dirs, &out),
        None => {}
    }
    if let Some(cfg) = &args.hpcc_config {
        return run_hpcc(
            cfg,
            args.out.as_deref(),
            args.seed,
            !args.no_plots,
            args.memory,
        );
    }
    let Some(path) = &args.scenario else {
        bail!("give a scenario file (roce sim SCENARIO.toml) or --hpcc-config CONFIG.txt");
    };
    let sc = Scenario::load(path, args.seed)?;
    let out = args
        .out
        .clone()
        .unwrap_or_else(|| Path::new("out/sim").join(&sc.name));
    let (report, wall, outcome) = simulate(sc.cfg, sc.topo, &sc.flows, args.memory)?;
    finish(&report, wall, &out, !args.no_plots)?;
    Ok(outcome?)
}

/// Runs a simulation with a progress bar on a terminal. Besides the report
/// and the wall time, gives the run's outcome: a stalled run (flows left
/// with nothing more to simulate) is an error the caller returns once the
/// results, which help find the cause, are written. With `memory`, prints
/// the simulator's memory by structure at its largest (sampled between
/// batches of events).
pub fn simulate(
    cfg: roce_sim::SimConfig,
    topo: roce_sim::Topology,
    flows: &[roce_sim::workload::FlowSpec],
    memory: bool,
) -> Result<(Report, f64, Result<(), roce_sim::SimError>)> {
    simulate_traced(cfg, topo, flows, memory, None).map(|(r, w, o, _)| (r, w, o))
}

/// What [`simulate_traced`] returns: the report, the wall time (s), the
/// run's outcome and the packet records written (with a trace).
type Traced = (Report, f64, Result<(), roce_sim::SimError>, Option<u64>);

/// [`simulate`], writing ns-3's packet trace to `trace` (if any); also
/// returns how many records it took.
pub fn simulate_traced(
    cfg: roce_sim::SimConfig,
    topo: roce_sim::Topology,
    flows: &[roce_sim::workload::FlowSpec],
    memory: bool,
    trace: Option<roce_sim::ns3_trace::PacketTrace>,
) -> Result<Traced> {
    let t0 = Instant::now();
    let mut sim = Simulator::new(cfg, topo, flows)?;
    if let Some(t) = trace {
        sim.set_packet_trace(t);
    }
    let bar = std::io::stderr().is_terminal().then(|| {
        let b = ProgressBar::new(sim.n_flows() as u64);
        b.set_style(
            ProgressStyle::with_template("{elapsed_precise} [{bar:40}] {pos}/{len} flows {msg}")
                .unwrap_or_else(|_| ProgressStyle::default_bar())
                .progress_chars("=> "),
        );
        // Show only for runs longer than a second.
        b.set_draw_target(indicatif::ProgressDrawTarget::hidden());
        b
    });
    let mut peak: Option<roce_sim::sim::MemoryUse> = None;
    while !sim.done() {
        sim.step(1 << 16);
        if memory {
            let m = sim.memory_use();
            if peak.as_ref().is_none_or(|p| m.total() > p.total()) {
                peak = Some(m);
            }
        }
        if let Some(b) = &bar {
            if b.is_hidden() && t0.elapsed().as_secs_f64() > 1.0 {
                b.set_draw_target(indicatif::ProgressDrawTarget::stderr());
            }
            b.set_position(sim.finished() as u64);
            b.set_message(format!(
                "{:.1} us simulated, {} events",
                sim.now() as f64 / 1e6,
                sim.events()
            ));
        }
    }
    if let Some(b) = bar {
        b.finish_and_clear();
    }
    if let Some(m) = peak {
        eprintln!(
            "memory at its largest (heap bytes by structure):\n{}",
            m.render()
        );
    }
    let outcome = sim.outcome();
    let records = match sim.take_packet_trace() {
        Some(t) => Some(t.finish().context("writing the packet trace")?),
        None => None,
    };
    Ok((
        sim.into_report(),
        t0.elapsed().as_secs_f64(),
        outcome,
        records,
    ))
}

/// Writes the output files and prints a short summary.
pub fn finish(report: &Report, wall: f64, out: &Path, plots: bool) -> Result<Summary> {
    let s = report
        .write_all(out, wall)
        .with_context(|| format!("writing results to {}", out.display()))?;
    print_summary(&s, out);
    if plots {
        let files = roce_sim::plot::write_plots(report, out)?;
        for f in files
            .iter()
            .filter(|f| f.extension().is_some_and(|e| e == "png"))
        {
            say!("plot: {}", f.display());
        }
    }
    if let Some(d) = &s.deadlock {
        say!("DEADLOCK: {d}");
    }
    if let Some(t) = &s.host_path {
        say!("{}", t.render().trim_end());
    }
    Ok(s)
}

fn print_summary(s: &Summary, out: &Path) {
    say!(
        "flows: {} total, {} finished, {} failed, {} unfinished",
        s.flows.total,
        s.flows.finished,
        s.flows.failed,
        s.flows.unfinished
    );
    if let Some(p) = &s.slowdown {
        say!(
            "slowdown: p50 {:.2}  p95 {:.2}  p99 {:.2}  (mean {:.2})",
            p.p50,
            p.p95,
            p.p99,
            p.mean
        );
    }
    say!(
        "drops {}  PFC pause frames {}  paused {:.1} us  ECN marks {}  CNPs {}  retransmissions {}",
        s.drops,
        s.pfc_pause_frames,
        s.pfc_paused_us,
        s.ecn_marks,
        s.cnps,
        s.retransmissions
    );
    say!(
        "{} events in {:.3} s wall ({:.2} M events/s), {:.1} us simulated",
        s.events,
        s.wall_seconds,
        s.events_per_second / 1e6,
        s.simulated_us
    );
    if let Some(p) = s.partition {
        say!(
            "partitioned: {} groups of nodes run in turn over {} ns windows (exact; see scenarios/SCALE.md)",
            p.groups,
            p.window_ns
        );
    }
    say!("results in {}", out.display());
}

/// Runs an HPCC ns-3 experiment. Its own outputs (FCT_OUTPUT_FILE,
/// PFC_OUTPUT_FILE, QLEN_MON_FILE, TRACE_OUTPUT_FILE) go where the config says, relative to
/// the working directory as with third.cc, and are created (with their
/// folders) before the run so a bad path fails at once; `--out` receives
/// our own files (fct.csv, summary.json, plots, ...).
fn run_hpcc(
    config: &Path,
    out: Option<&Path>,
    seed: Option<u64>,
    plots: bool,
    memory: bool,
) -> Result<()> {
    let exp = roce_sim::hpcc::Experiment::load(config, seed)?;
    for w in &exp.warnings {
        eprintln!("roce: warning: {w}");
    }
    let out = out.map(Path::to_path_buf).unwrap_or_else(|| {
        config
            .parent()
            .map(|p| p.join("roce-sim-out"))
            .unwrap_or_else(|| PathBuf::from("out/sim/hpcc"))
    });
    exp.prepare_outputs()?;
    let trace = exp.open_trace()?;
    let (report, wall, outcome, records) =
        simulate_traced(exp.cfg.clone(), exp.topo.clone(), &exp.flows, memory, trace)?;
    finish(&report, wall, &out, plots)?;
    for f in exp.write_outputs(&report)? {
        say!("wrote {}", f.display());
    }
    if let Some(t) = &exp.trace {
        match records {
            Some(n) => say!("wrote {} ({n} packet records)", t.output.path.display()),
            None => say!(
                "wrote {} (header only: ENABLE_TRACE 0)",
                t.output.path.display()
            ),
        }
    }
    Ok(outcome?)
}

/// The `roce demo` section: a small incast where a switch queue builds up
/// and PFC pauses the senders; prints the plot paths.
pub fn demo_section(out: &Path) -> Result<()> {
    say!("== Simulated 8:1 incast: a queue builds and PFC pauses the senders ==");
    let src = include_str!("../../../scenarios/incast.toml");
    let base = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scenarios");
    let sc = Scenario::parse(src, "scenarios/incast.toml", &base, None)?;
    let dir = out.join("sim-incast");
    let (report, wall, outcome) = simulate(sc.cfg, sc.topo, &sc.flows, false)?;
    let s = finish(&report, wall, &dir, true)?;
    outcome?;
    let peak = report
        .ports
        .iter()
        .map(|p| p.max_qbytes.iter().max().copied().unwrap_or(0))
        .max()
        .unwrap_or(0);
    say!(
        "peak egress queue {:.1} KB; {} PFC pause frames; {} drops\n",
        peak as f64 / 1e3,
        s.pfc_pause_frames,
        s.drops
    );
    Ok(())
}

/// Some runs of a sweep failed, all recorded: `main` exits with
/// [`roce_sim::sweep::EXIT_RUNS_FAILED`] rather than 1.
#[derive(Debug)]
pub struct RunsFailed(String);

impl std::fmt::Display for RunsFailed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for RunsFailed {}

fn sweep(a: SweepArgs) -> Result<()> {
    use roce_sim::sweep::{self, Shard, Sweep};
    let sw = Sweep::load(&a.sweep)?;
    let shard = match &a.shard {
        Some(s) => Shard::parse(s)?,
        None => Shard::from_env(|k| std::env::var(k).ok())?.unwrap_or(Shard::ALL),
    };
    let all = sw.runs();
    let mine = all.iter().filter(|r| shard.owns(r.index)).count();
    if a.dry_run {
        for r in &all {
            let params: Vec<String> = r
                .params
                .iter()
                .map(|(k, v)| format!("{k}={}", sweep::value_label(v)))
                .collect();
            let seed = r.seed.map_or("(base)".to_string(), |s| s.to_string());
            let owner = r.index % shard.count;
            say!(
                "{} {} seed={seed} shard {owner}/{}{}",
                r.dir_name(),
                params.join(" "),
                shard.count,
                if shard.owns(r.index) { " *" } else { "" }
            );
        }
        say!(
            "{} runs; shard {}/{} runs {mine} of them (marked *)",
            all.len(),
            shard.index,
            shard.count
        );
        return Ok(());
    }
    let jobs = a
        .jobs
        .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()));
    std::fs::create_dir_all(&a.out).with_context(|| format!("creating {}", a.out.display()))?;
    say!(
        "sweep {}: {} runs, shard {}/{} runs {mine} on {jobs} threads into {}",
        sw.file,
        all.len(),
        shard.index,
        shard.count,
        a.out.display()
    );
    let bar = ProgressBar::new(mine as u64);
    let tty = std::io::stderr().is_terminal();
    if tty {
        bar.set_style(
            ProgressStyle::with_template("{elapsed_precise} [{bar:40}] {pos}/{len} runs {msg}")
                .unwrap_or_else(|_| ProgressStyle::default_bar())
                .progress_chars("=> "),
        );
    } else {
        bar.set_draw_target(indicatif::ProgressDrawTarget::hidden());
    }
    let failed = std::sync::atomic::AtomicUsize::new(0);
    let opts = sweep::Options {
        jobs,
        shard,
        run_plots: !a.no_plots,
    };
    let outcomes = sweep::execute(&sw, &a.out, &opts, &|o| {
        if let Err(e) = &o.result {
            let n = failed.fetch_add(1, std::sync::atomic::Ordering::Relaxed) + 1;
            bar.set_message(format!("{n} failed"));
            bar.suspend(|| eprintln!("roce: {} failed: {e}", o.run.dir_name()));
        }
        bar.inc(1);
        if !tty {
            // A batch job's log: one line per run instead of a bar.
            say!(
                "{} {} ({}/{mine}, {:.1} s)",
                o.run.dir_name(),
                if o.result.is_ok() { "done" } else { "failed" },
                bar.position(),
                o.wall_seconds
            );
        }
    });
    bar.finish_and_clear();
    let table = sweep::Table::of(&sw.keys, &outcomes);
    if shard.count == 1 {
        for f in sweep::write_results(&table, &a.out)? {
            say!("wrote {}", f.display());
        }
    } else {
        let f = a.out.join(shard.table_name());
        table.write(&f)?;
        say!("wrote {}", f.display());
        say!(
            "when every shard is done: roce sim collect {} --out {}",
            a.out.display(),
            a.out.display()
        );
    }
    let failed = failed.into_inner();
    say!("{} runs, {} failed", outcomes.len(), failed);
    // Every run went on and is in the table; the exit status still tells a
    // batch scheduler (Slurm, a Kubernetes Job) that some of them failed.
    let failures: Vec<String> = outcomes
        .iter()
        .filter_map(|o| {
            let e = o.result.as_ref().err()?;
            let params: Vec<String> = o
                .run
                .params
                .iter()
                .map(|(k, v)| format!("{k}={}", sweep::value_label(v)))
                .collect();
            let seed = o.seed.map_or("(base)".to_string(), |s| s.to_string());
            Some(format!(
                "  {} {} seed={seed}: {e}",
                o.run.dir_name(),
                params.join(" ")
            ))
        })
        .collect();
    if !failures.is_empty() {
        const SHOWN: usize = 20;
        let more = failures.len().saturating_sub(SHOWN);
        let mut list = failures[..failures.len().min(SHOWN)].join("\n");
        if more > 0 {
            list.push_str(&format!("\n  ... and {more} more"));
        }
        return Err(RunsFailed(format!(
            "{} of {} runs of {} failed (recorded in the table with their errors):\n{list}",
            failures.len(),
            outcomes.len(),
            sw.file
        ))
        .into());
    }
    Ok(())
}

fn collect(dirs: &[PathBuf], out: &Path) -> Result<()> {
    let (table, written, missing) = roce_sim::sweep::collect(dirs, out)?;
    for m in &missing {
        eprintln!("roce: warning: {m} is missing: its runs are not in the table");
    }
    for f in written {
        say!("wrote {}", f.display());
    }
    say!("{} runs collected", table.rows.len());
    Ok(())
}
