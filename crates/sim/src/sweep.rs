//! Parameter sweeps: one base scenario, a grid of overrides and a list of
//! seeds, expanded into runs that can be split across machines.
//!
//! A sweep file names a base scenario (relative to the sweep file), the
//! seeds, and under `[grid]` dotted paths into the scenario's TOML with the
//! values each takes (see `scenarios/sweep/README.md`):
//!
//! ```toml
//! base = "../incast.toml"
//! seeds = [1, 2, 3]
//! [grid]
//! "cc.algorithm" = ["dcqcn", "hpcc"]
//! "workload.0.size" = [100000, 1000000]
//! ```
//!
//! Every combination of grid values is run with every seed: run `i` is the
//! `i`-th in row-major order (the first key, in the file's sorted key
//! order, varies slowest; the seed fastest). An override is written into
//! the parsed TOML value tree of the base before the scenario is checked,
//! so a value the scenario rejects fails that run with a message naming the
//! key, while the other runs go on.
//!
//! Shard `I` of `N` runs the runs whose index is `I` modulo `N` (dealt
//! round-robin, so each shard gets a share of every grid region and of
//! the expensive runs). Because a run is a pure function of its scenario and
//! seed, and the table leaves wall-clock figures out, shards collected
//! together give the very table an unsharded sweep writes.

use crate::metrics::Summary;
use crate::plot::{self, PlotError};
use crate::scenario::Scenario;
use crate::sim::Simulator;
use serde::Deserialize;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Instant;
use toml::Value;

/// The exit status of `roce sim sweep` when every run of its slice went and
/// is in the table but some failed: not 0, so a scheduler (a Slurm array
/// task, a Kubernetes Job's index) marks the slice failed, and not 1 (a
/// sweep that could not start), so a Job's pod failure policy can tell a
/// deterministic result, which a retry would only repeat, from a setup
/// error.
pub const EXIT_RUNS_FAILED: i32 = 3;

/// A sweep that cannot be set up, or its table not written or merged.
///
/// The I/O variants carry their `std::io::Error` in their message rather
/// than as a `source()`: an error-chain printer (anyhow's `{:#}`) would
/// otherwise print "No such file or directory" twice.
#[derive(Debug, thiserror::Error)]
pub enum SweepError {
    #[error("{file}: cannot read: {error}")]
    Read { file: String, error: std::io::Error },
    #[error("{file}: base scenario {base}: cannot read: {error}")]
    Base {
        file: String,
        base: String,
        error: std::io::Error,
    },
    #[error("{file}:{line}: {msg}")]
    Syntax {
        file: String,
        line: usize,
        msg: String,
    },
    #[error("{file}: grid key `{key}`: {msg}")]
    Key {
        file: String,
        key: String,
        msg: String,
    },
    #[error("{file}: {msg}")]
    Invalid { file: String, msg: String },
    #[error("shard: {0}")]
    Shard(String),
    #[error("{path}: {error}")]
    Io { path: String, error: std::io::Error },
    #[error("{path}: {msg}")]
    Table { path: String, msg: String },
    #[error(transparent)]
    Plot(#[from] PlotError),
}

fn io_err(path: &Path) -> impl FnOnce(std::io::Error) -> SweepError + '_ {
    move |error| SweepError::Io {
        path: path.display().to_string(),
        error,
    }
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct SweepFile {
    base: String,
    seeds: Option<Vec<u64>>,
    #[serde(default)]
    grid: toml::Table,
}

/// A loaded sweep: the base scenario's TOML tree and the grid.
#[derive(Debug, Clone)]
pub struct Sweep {
    /// The sweep file, for messages.
    pub file: String,
    /// The base scenario file.
    pub base_file: PathBuf,
    base_dir: PathBuf,
    base: Value,
    /// The swept keys, in order (sorted, as TOML tables are).
    pub keys: Vec<String>,
    values: Vec<Vec<Value>>,
    seeds: Option<Vec<u64>>,
}

/// One run of a sweep: its index, the value of each swept key, its seed
/// (`None`: the base scenario's own).
#[derive(Debug, Clone, PartialEq)]
pub struct RunSpec {
    pub index: usize,
    pub params: Vec<(String, Value)>,
    pub seed: Option<u64>,
}

impl RunSpec {
    /// The folder of this run under the sweep's output directory.
    pub fn dir_name(&self) -> String {
        format!("run-{:05}", self.index)
    }
}

/// Slice `index` of `count` (`index` counts from 0).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Shard {
    pub index: usize,
    pub count: usize,
}

impl Shard {
    /// The whole sweep.
    pub const ALL: Shard = Shard { index: 0, count: 1 };

    /// Parses `I/N`.
    pub fn parse(s: &str) -> Result<Shard, SweepError> {
        let bad = || SweepError::Shard(format!("expected I/N with 0 ≤ I < N, got `{s}`"));
        let (i, n) = s.split_once('/').ok_or_else(bad)?;
        let index: usize = i.trim().parse().map_err(|_| bad())?;
        let count: usize = n.trim().parse().map_err(|_| bad())?;
        if count == 0 || index >= count {
            return Err(bad());
        }
        Ok(Shard { index, count })
    }

    /// The shard a job array gives this process, read through `var` (the
    /// environment): a Slurm array task (`SLURM_ARRAY_TASK_ID` less
    /// `SLURM_ARRAY_TASK_MIN`, of `SLURM_ARRAY_TASK_COUNT`), or a
    /// Kubernetes Indexed Job's pod (`JOB_COMPLETION_INDEX`, of
    /// `ROCE_SWEEP_SHARDS`, which the manifest sets to its `completions`:
    /// Kubernetes does not tell a pod the count). `None` outside a job
    /// array.
    pub fn from_env(var: impl Fn(&str) -> Option<String>) -> Result<Option<Shard>, SweepError> {
        let num = |name: &str| -> Result<Option<usize>, SweepError> {
            match var(name) {
                None => Ok(None),
                Some(v) => v.trim().parse().map(Some).map_err(|_| {
                    SweepError::Shard(format!("{name}={v:?} is not a non-negative integer"))
                }),
            }
        };
        let (index, count, names) = if let Some(id) = num("SLURM_ARRAY_TASK_ID")? {
            let min = num("SLURM_ARRAY_TASK_MIN")?.unwrap_or(0);
            let count = num("SLURM_ARRAY_TASK_COUNT")?.ok_or_else(|| {
                SweepError::Shard(
                    "SLURM_ARRAY_TASK_ID is set but SLURM_ARRAY_TASK_COUNT is not".into(),
                )
            })?;
            let index = id.checked_sub(min).ok_or_else(|| {
                SweepError::Shard(format!(
                    "SLURM_ARRAY_TASK_ID {id} is below SLURM_ARRAY_TASK_MIN {min}"
                ))
            })?;
            (
                index,
                count,
                "SLURM_ARRAY_TASK_ID - SLURM_ARRAY_TASK_MIN of SLURM_ARRAY_TASK_COUNT",
            )
        } else if let Some(index) = num("JOB_COMPLETION_INDEX")? {
            let count = num("ROCE_SWEEP_SHARDS")?.ok_or_else(|| {
                SweepError::Shard(
                    "JOB_COMPLETION_INDEX is set but ROCE_SWEEP_SHARDS (the Job's completions) is not; set it or pass --shard I/N".into(),
                )
            })?;
            (index, count, "JOB_COMPLETION_INDEX of ROCE_SWEEP_SHARDS")
        } else {
            return Ok(None);
        };
        if count == 0 || index >= count {
            return Err(SweepError::Shard(format!(
                "{names} gives shard {index} of {count}: expected 0 ≤ I < N (a Slurm array should be contiguous, e.g. --array=0-{})",
                count.saturating_sub(1)
            )));
        }
        Ok(Some(Shard { index, count }))
    }

    /// True when run `index` belongs to this shard.
    pub fn owns(&self, index: usize) -> bool {
        index % self.count == self.index
    }

    /// The name of this shard's table: `sweep.csv` for the whole sweep,
    /// `sweep-shard-I-of-N.csv` for a slice (so every array task can write
    /// into one shared folder).
    pub fn table_name(&self) -> String {
        if self.count == 1 {
            "sweep.csv".into()
        } else {
            format!("sweep-shard-{}-of-{}.csv", self.index, self.count)
        }
    }
}

/// Writes `new` at the dotted `path` in `v`: a segment names a table key
/// (missing tables are created) or, in an array such as `workload`, an
/// index from 0. The last segment's key need not exist: the scenario's
/// own checking decides whether it is a field.
fn set_path(v: &mut Value, path: &[&str], new: Value) -> Result<(), String> {
    let Some((head, rest)) = path.split_first() else {
        *v = new;
        return Ok(());
    };
    match v {
        Value::Table(t) => {
            if rest.is_empty() {
                t.insert(head.to_string(), new);
                return Ok(());
            }
            let child = t
                .entry(head.to_string())
                .or_insert_with(|| Value::Table(toml::Table::new()));
            set_path(child, rest, new)
        }
        Value::Array(a) => {
            let n = a.len();
            let i: usize = head
                .parse()
                .map_err(|_| format!("`{head}` is not an index into an array of {n}"))?;
            let child = a
                .get_mut(i)
                .ok_or_else(|| format!("index {i} is out of range (the array has {n} items)"))?;
            set_path(child, rest, new)
        }
        other => Err(format!(
            "`{head}` goes inside a {}, which is neither a table nor an array",
            other.type_str()
        )),
    }
}

/// True when the dotted `path` names an item the base already holds.
fn has_path(v: &Value, path: &[&str]) -> bool {
    let Some((head, rest)) = path.split_first() else {
        return true;
    };
    let child = match v {
        Value::Table(t) => t.get(*head),
        Value::Array(a) => head.parse::<usize>().ok().and_then(|i| a.get(i)),
        _ => None,
    };
    child.is_some_and(|c| has_path(c, rest))
}

/// When the scenario `v` is rejected because one of `path`'s segments is
/// not a field where it stands, the scenario's message; `None` when it
/// parses or fails for another reason.
fn unknown_field(v: &Value, path: &[&str], base_name: &str, base_dir: &Path) -> Option<String> {
    let src = toml::to_string(v).ok()?;
    let e = Scenario::parse(&src, base_name, base_dir, None).err()?;
    // The `[cc]` table names its unknown keys `cc.KEY` with the chosen
    // algorithm's parameters; every other table in serde's words.
    let field = e.field.rsplit('.').next().unwrap_or(&e.field);
    if !path.contains(&field) {
        return None;
    }
    if e.msg.starts_with("unknown field") {
        Some(format!("{base_name} has no such field: {}", e.msg))
    } else if e.msg.starts_with("not a parameter of algorithm")
        || e.msg.starts_with("not a congestion-control parameter")
    {
        Some(format!(
            "{base_name} has no such field: unknown field `{field}`: {}",
            e.msg
        ))
    } else {
        None
    }
}

/// A grid value as a table cell and plot label: strings bare, the rest as
/// TOML writes them.
pub fn value_label(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

impl Sweep {
    /// Reads a sweep file and its base scenario.
    pub fn load(path: &Path) -> Result<Sweep, SweepError> {
        let file = path.display().to_string();
        let src = std::fs::read_to_string(path).map_err(|error| SweepError::Read {
            file: file.clone(),
            error,
        })?;
        let dir = path.parent().map(Path::to_path_buf).unwrap_or_default();
        Self::parse(&src, &file, &dir)
    }

    /// Parses sweep text; `dir` is where `base` is resolved from.
    pub fn parse(src: &str, file: &str, dir: &Path) -> Result<Sweep, SweepError> {
        let syntax = |e: toml::de::Error, file: &str, src: &str| SweepError::Syntax {
            file: file.to_string(),
            line: e
                .span()
                .map(|s| src[..s.start.min(src.len())].matches('\n').count() + 1)
                .unwrap_or(1),
            msg: e.message().trim().to_string(),
        };
        let f: SweepFile = toml::from_str(src).map_err(|e| syntax(e, file, src))?;
        let invalid = |msg: String| SweepError::Invalid {
            file: file.to_string(),
            msg,
        };
        if f.seeds.as_ref().is_some_and(Vec::is_empty) {
            return Err(invalid("seeds: expected at least one seed".into()));
        }
        let base_file = dir.join(&f.base);
        let base_src = std::fs::read_to_string(&base_file).map_err(|error| SweepError::Base {
            file: file.to_string(),
            base: base_file.display().to_string(),
            error,
        })?;
        let base_dir = base_file
            .parent()
            .map(Path::to_path_buf)
            .unwrap_or_default();
        let base_name = base_file.display().to_string();
        let base: toml::Table =
            toml::from_str(&base_src).map_err(|e| syntax(e, &base_name, &base_src))?;
        let base = Value::Table(base);
        let mut keys = Vec::new();
        let mut values = Vec::new();
        // Sorted explicitly: toml's table order depends on a cargo feature.
        let mut grid: Vec<(String, Value)> = f.grid.into_iter().collect();
        grid.sort_by(|a, b| a.0.cmp(&b.0));
        for (key, v) in grid {
            let key_err = |msg: String| SweepError::Key {
                file: file.to_string(),
                key: key.clone(),
                msg,
            };
            let Value::Array(list) = v else {
                return Err(key_err(format!(
                    "expected a list of values, got a {}",
                    v.type_str()
                )));
            };
            if list.is_empty() {
                return Err(key_err("expected at least one value".into()));
            }
            let path: Vec<&str> = key.split('.').collect();
            if path.iter().any(|p| p.is_empty()) {
                return Err(key_err("empty segment in the dotted path".into()));
            }
            if ["run", "seed"].contains(&key.as_str()) || SUMMARY_COLUMNS.contains(&key.as_str()) {
                return Err(key_err(
                    "a column of sweep.csv has this name (sweep seeds with `seeds = [...]`)".into(),
                ));
            }
            // The path's shape is the same for every value: check it once.
            let mut probe = base.clone();
            set_path(&mut probe, &path, list[0].clone()).map_err(key_err)?;
            // A path the base does not hold may be a misspelt field: parse
            // the base with this key alone set, and stop the whole sweep
            // before any run if the scenario has no such field (a value the
            // scenario rejects is left to fail its own runs).
            if !has_path(&base, &path)
                && let Some(msg) = unknown_field(&probe, &path, &base_name, &base_dir)
            {
                return Err(key_err(msg));
            }
            keys.push(key);
            values.push(list);
        }
        Ok(Sweep {
            file: file.to_string(),
            base_file,
            base_dir,
            base,
            keys,
            values,
            seeds: f.seeds,
        })
    }

    /// Every run, in index order.
    pub fn runs(&self) -> Vec<RunSpec> {
        let seeds: Vec<Option<u64>> = match &self.seeds {
            Some(s) => s.iter().copied().map(Some).collect(),
            None => vec![None],
        };
        let mut combos: Vec<Vec<(String, Value)>> = vec![Vec::new()];
        for (key, vals) in self.keys.iter().zip(&self.values) {
            combos = combos
                .into_iter()
                .flat_map(|c| {
                    vals.iter().map(move |v| {
                        let mut c = c.clone();
                        c.push((key.clone(), v.clone()));
                        c
                    })
                })
                .collect();
        }
        combos
            .into_iter()
            .flat_map(|params| seeds.iter().map(move |&seed| (params.clone(), seed)))
            .enumerate()
            .map(|(index, (params, seed))| RunSpec {
                index,
                params,
                seed,
            })
            .collect()
    }

    /// The scenario of one run: the base with the run's overrides, checked.
    /// The error names the key or field at fault.
    pub fn scenario(&self, run: &RunSpec) -> Result<Scenario, String> {
        let mut v = self.base.clone();
        for (key, val) in &run.params {
            let path: Vec<&str> = key.split('.').collect();
            set_path(&mut v, &path, val.clone()).map_err(|e| format!("{key}: {e}"))?;
        }
        let src = toml::to_string(&v).map_err(|e| format!("writing the scenario: {e}"))?;
        let label = format!("{} ({})", self.base_file.display(), run.dir_name());
        Scenario::parse(&src, &label, &self.base_dir, run.seed)
            .map_err(|e| format!("{}: {}", e.field, e.msg))
    }
}

/// What one run gave.
#[derive(Debug, Clone)]
pub struct RunOutcome {
    pub run: RunSpec,
    /// The seed it ran with (absent when the scenario was rejected before
    /// one was known).
    pub seed: Option<u64>,
    /// The run's summary, or why it failed.
    pub result: Result<Summary, String>,
    /// Wall-clock seconds (kept out of the table: not deterministic).
    pub wall_seconds: f64,
}

/// How to run a sweep.
#[derive(Debug, Clone)]
pub struct Options {
    /// Runs at once (threads).
    pub jobs: usize,
    /// The slice of the sweep to run.
    pub shard: Shard,
    /// Draw each run's own plots too (the comparison plots are always drawn
    /// for a whole sweep).
    pub run_plots: bool,
}

fn run_one(sweep: &Sweep, run: &RunSpec, out: &Path, plots: bool) -> RunOutcome {
    let t0 = Instant::now();
    let mut seed = run.seed;
    let attempt = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        let sc = sweep.scenario(run)?;
        seed = Some(sc.cfg.seed);
        let mut sim = Simulator::new(sc.cfg, sc.topo, &sc.flows).map_err(|e| e.to_string())?;
        // A stalled run still writes what it measured; it is then recorded
        // as failed, with the stall's message naming the stuck QPs.
        let outcome = sim.run();
        let report = sim.into_report();
        let dir = out.join(run.dir_name());
        let s = report
            .write_all(&dir, t0.elapsed().as_secs_f64())
            .map_err(|e| format!("writing {}: {e}", dir.display()))?;
        let params: serde_json::Map<String, serde_json::Value> = run
            .params
            .iter()
            .map(|(k, v)| (k.clone(), toml_to_json(v)))
            .collect();
        let meta = serde_json::json!({
            "run": run.index,
            "base": sweep.base_file.display().to_string(),
            "params": params,
            "seed": seed,
        });
        let meta_path = dir.join("run.json");
        std::fs::write(&meta_path, format!("{meta:#}\n"))
            .map_err(|e| format!("writing {}: {e}", meta_path.display()))?;
        if plots {
            plot::write_plots(&report, &dir).map_err(|e| e.to_string())?;
        }
        outcome.map_err(|e| e.to_string())?;
        Ok(s)
    }));
    let result = match attempt {
        Ok(r) => r,
        Err(p) => Err(format!(
            "the simulator panicked: {}",
            p.downcast_ref::<String>()
                .map(String::as_str)
                .or_else(|| p.downcast_ref::<&str>().copied())
                .unwrap_or("(no message)")
        )),
    };
    RunOutcome {
        run: run.clone(),
        seed,
        result,
        wall_seconds: t0.elapsed().as_secs_f64(),
    }
}

fn toml_to_json(v: &Value) -> serde_json::Value {
    serde_json::to_value(v).unwrap_or(serde_json::Value::Null)
}

/// Runs this shard's runs on `opts.jobs` threads, writing each into
/// `out/run-NNNNN/`; `done` is called as each run ends (from the worker
/// thread). Returns the outcomes in run order. A failed run is an outcome
/// like any other.
pub fn execute(
    sweep: &Sweep,
    out: &Path,
    opts: &Options,
    done: &(dyn Fn(&RunOutcome) + Sync),
) -> Vec<RunOutcome> {
    let runs: Vec<RunSpec> = sweep
        .runs()
        .into_iter()
        .filter(|r| opts.shard.owns(r.index))
        .collect();
    let next = AtomicUsize::new(0);
    let results: Mutex<Vec<RunOutcome>> = Mutex::new(Vec::with_capacity(runs.len()));
    std::thread::scope(|s| {
        for _ in 0..opts.jobs.clamp(1, runs.len().max(1)) {
            s.spawn(|| {
                loop {
                    let i = next.fetch_add(1, Ordering::Relaxed);
                    let Some(run) = runs.get(i) else { break };
                    let o = run_one(sweep, run, out, opts.run_plots);
                    done(&o);
                    results
                        .lock()
                        .unwrap_or_else(std::sync::PoisonError::into_inner)
                        .push(o);
                }
            });
        }
    });
    let mut v = results
        .into_inner()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    v.sort_by_key(|o| o.run.index);
    v
}

/// The summary columns of `sweep.csv`, after `run`, the swept keys and
/// `seed`.
pub const SUMMARY_COLUMNS: [&str; 22] = [
    "status",
    "error",
    "flows",
    "finished",
    "failed",
    "unfinished",
    "slowdown_p50",
    "slowdown_p95",
    "slowdown_p99",
    "slowdown_mean",
    "slowdown_max",
    "drops",
    "pfc_pause_frames",
    "pfc_resume_frames",
    "pfc_paused_us",
    "ecn_marks",
    "cnps",
    "retransmissions",
    "timeouts",
    "simulated_us",
    "events",
    "deadlock",
];

/// A sweep table: a header and rows of cells, sorted by run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Table {
    pub header: Vec<String>,
    pub rows: Vec<Vec<String>>,
}

impl Table {
    /// The table of some outcomes of `keys`' sweep.
    pub fn of(keys: &[String], outcomes: &[RunOutcome]) -> Table {
        let mut header = vec!["run".to_string()];
        header.extend(keys.iter().cloned());
        header.push("seed".into());
        header.extend(SUMMARY_COLUMNS.iter().map(|s| s.to_string()));
        let rows = outcomes
            .iter()
            .map(|o| {
                let mut row = vec![o.run.index.to_string()];
                row.extend(o.run.params.iter().map(|(_, v)| value_label(v)));
                row.push(o.seed.map(|s| s.to_string()).unwrap_or_default());
                row.extend(summary_cells(&o.result));
                row
            })
            .collect();
        Table { header, rows }
    }

    /// The swept keys: the columns between `run` and `seed`.
    pub fn keys(&self) -> &[String] {
        let end = self
            .header
            .iter()
            .position(|h| h == "seed")
            .unwrap_or(1)
            .max(1);
        &self.header[1.min(self.header.len())..end]
    }

    fn col(&self, name: &str) -> Option<usize> {
        self.header.iter().position(|h| h == name)
    }

    /// Writes the table as CSV.
    pub fn write(&self, path: &Path) -> Result<(), SweepError> {
        let err = |e: csv::Error| SweepError::Table {
            path: path.display().to_string(),
            msg: e.to_string(),
        };
        let mut w = csv::Writer::from_path(path).map_err(err)?;
        w.write_record(&self.header).map_err(err)?;
        for r in &self.rows {
            w.write_record(r).map_err(err)?;
        }
        w.flush().map_err(io_err(path))
    }

    /// Reads a table written by [`Table::write`].
    pub fn read(path: &Path) -> Result<Table, SweepError> {
        let err = |msg: String| SweepError::Table {
            path: path.display().to_string(),
            msg,
        };
        let mut r = csv::Reader::from_path(path).map_err(|e| err(e.to_string()))?;
        let header: Vec<String> = r
            .headers()
            .map_err(|e| err(e.to_string()))?
            .iter()
            .map(str::to_string)
            .collect();
        if header.first().map(String::as_str) != Some("run") || !header.iter().any(|h| h == "seed")
        {
            return Err(err("not a sweep table (no `run` and `seed` columns)".into()));
        }
        let mut rows = Vec::new();
        for rec in r.records() {
            let rec = rec.map_err(|e| err(e.to_string()))?;
            rows.push(rec.iter().map(str::to_string).collect());
        }
        let mut t = Table { header, rows };
        t.sort()?;
        Ok(t)
    }

    fn sort(&mut self) -> Result<(), SweepError> {
        let mut keyed = Vec::with_capacity(self.rows.len());
        for r in self.rows.drain(..) {
            let i: usize = r[0].parse().map_err(|_| SweepError::Table {
                path: "(table)".into(),
                msg: format!("run `{}` is not a run number", r[0]),
            })?;
            keyed.push((i, r));
        }
        keyed.sort_by_key(|(i, _)| *i);
        self.rows = keyed.into_iter().map(|(_, r)| r).collect();
        Ok(())
    }

    /// Merges shard tables: one header, each run once (a run in two tables
    /// must agree, as a re-run of a deterministic shard does).
    pub fn merge(tables: Vec<(String, Table)>) -> Result<Table, SweepError> {
        let mut it = tables.into_iter();
        let Some((first_name, mut all)) = it.next() else {
            return Err(SweepError::Table {
                path: "(collect)".into(),
                msg: "no sweep tables to merge".into(),
            });
        };
        for (name, t) in it {
            if t.header != all.header {
                return Err(SweepError::Table {
                    path: name,
                    msg: format!("its columns differ from {first_name}'s: not the same sweep"),
                });
            }
            all.rows.extend(t.rows);
        }
        all.sort()?;
        let mut out: Vec<Vec<String>> = Vec::with_capacity(all.rows.len());
        for r in all.rows {
            match out.last() {
                Some(prev) if prev[0] == r[0] && *prev == r => {}
                Some(prev) if prev[0] == r[0] => {
                    return Err(SweepError::Table {
                        path: "(collect)".into(),
                        msg: format!("run {} appears twice with different results", r[0]),
                    });
                }
                _ => out.push(r),
            }
        }
        all.rows = out;
        Ok(all)
    }
}

fn summary_cells(r: &Result<Summary, String>) -> Vec<String> {
    let s = match r {
        Ok(s) => s,
        Err(e) => {
            let mut v = vec!["error".to_string(), e.clone()];
            v.resize(SUMMARY_COLUMNS.len(), String::new());
            return v;
        }
    };
    let f4 = |x: f64| format!("{x:.4}");
    let sd = |g: fn(&crate::metrics::Percentiles) -> f64| s.slowdown.as_ref().map(g).map(f4);
    vec![
        "ok".into(),
        s.first_error.clone().unwrap_or_default(),
        s.flows.total.to_string(),
        s.flows.finished.to_string(),
        s.flows.failed.to_string(),
        s.flows.unfinished.to_string(),
        sd(|p| p.p50).unwrap_or_default(),
        sd(|p| p.p95).unwrap_or_default(),
        sd(|p| p.p99).unwrap_or_default(),
        sd(|p| p.mean).unwrap_or_default(),
        sd(|p| p.max).unwrap_or_default(),
        s.drops.to_string(),
        s.pfc_pause_frames.to_string(),
        s.pfc_resume_frames.to_string(),
        format!("{:.3}", s.pfc_paused_us),
        s.ecn_marks.to_string(),
        s.cnps.to_string(),
        s.retransmissions.to_string(),
        s.timeouts.to_string(),
        format!("{:.3}", s.simulated_us),
        s.events.to_string(),
        s.deadlock.clone().unwrap_or_default(),
    ]
}

/// Writes a whole sweep's table as `dir/sweep.csv` and its comparison
/// plots; returns the files written.
pub fn write_results(table: &Table, dir: &Path) -> Result<Vec<PathBuf>, SweepError> {
    std::fs::create_dir_all(dir).map_err(io_err(dir))?;
    let csv = dir.join("sweep.csv");
    table.write(&csv)?;
    let mut files = vec![csv];
    files.extend(write_comparison_plots(table, dir)?);
    Ok(files)
}

/// One plot per swept key (or against the seed when only seeds vary):
/// the slowdown percentiles of every run at each value (dots) and their
/// median over the runs sharing that value (lines).
pub fn write_comparison_plots(table: &Table, dir: &Path) -> Result<Vec<PathBuf>, SweepError> {
    let mut keys: Vec<String> = table.keys().to_vec();
    if keys.is_empty() {
        keys.push("seed".into());
    }
    let status = table.col("status");
    let mut files = Vec::new();
    for key in &keys {
        let Some(kc) = table.col(key) else { continue };
        let mut cats: Vec<String> = Vec::new();
        for r in &table.rows {
            if !cats.contains(&r[kc]) {
                cats.push(r[kc].clone());
            }
        }
        let mut series = Vec::new();
        for name in ["p50", "p95", "p99"] {
            let Some(c) = table.col(&format!("slowdown_{name}")) else {
                continue;
            };
            let pts: Vec<(usize, f64)> = table
                .rows
                .iter()
                .filter(|r| status.is_none_or(|s| r[s] == "ok"))
                .filter_map(|r| {
                    let x = cats.iter().position(|v| *v == r[kc])?;
                    Some((x, r[c].parse::<f64>().ok()?))
                })
                .collect();
            series.push((format!("slowdown {name}"), pts));
        }
        let stem = format!(
            "sweep_{}",
            key.chars()
                .map(|c| if c.is_ascii_alphanumeric() { c } else { '_' })
                .collect::<String>()
        );
        files.extend(plot::write_categorical(
            dir,
            &stem,
            &format!("Slowdown against {key}"),
            key,
            &cats,
            &series,
        )?);
    }
    Ok(files)
}

/// The tables in a collect input: a shard folder's `sweep-shard-*.csv`
/// files, else its `sweep.csv`.
pub fn tables_in(dir: &Path) -> Result<Vec<PathBuf>, SweepError> {
    let mut shards = Vec::new();
    for e in std::fs::read_dir(dir).map_err(io_err(dir))? {
        let p = e.map_err(io_err(dir))?.path();
        let name = p.file_name().and_then(|n| n.to_str()).unwrap_or("");
        if name.starts_with("sweep-shard-") && name.ends_with(".csv") {
            shards.push(p);
        }
    }
    shards.sort();
    if shards.is_empty() && dir.join("sweep.csv").is_file() {
        shards.push(dir.join("sweep.csv"));
    }
    Ok(shards)
}

/// Shards named `sweep-shard-I-of-N.csv` that `files` lack: a collect of
/// an array whose tasks have not all finished.
pub fn missing_shards(files: &[PathBuf]) -> Vec<String> {
    let mut seen: Vec<(usize, usize)> = Vec::new();
    for f in files {
        let name = f.file_name().and_then(|n| n.to_str()).unwrap_or("");
        let Some(rest) = name
            .strip_prefix("sweep-shard-")
            .and_then(|r| r.strip_suffix(".csv"))
        else {
            continue;
        };
        if let Some((i, n)) = rest.split_once("-of-")
            && let (Ok(i), Ok(n)) = (i.parse(), n.parse())
        {
            seen.push((i, n));
        }
    }
    let mut missing = Vec::new();
    let mut counts: Vec<usize> = seen.iter().map(|s| s.1).collect();
    counts.sort();
    counts.dedup();
    for n in counts {
        for i in 0..n {
            if !seen.contains(&(i, n)) {
                missing.push(format!("sweep-shard-{i}-of-{n}.csv"));
            }
        }
    }
    missing
}

/// Merges the tables found in `dirs` and writes `out/sweep.csv` and its
/// plots. Returns the merged table, the files written, and the shard
/// tables that were expected but not found.
pub fn collect(
    dirs: &[PathBuf],
    out: &Path,
) -> Result<(Table, Vec<PathBuf>, Vec<String>), SweepError> {
    let mut files = Vec::new();
    for d in dirs {
        let found = tables_in(d)?;
        if found.is_empty() {
            return Err(SweepError::Table {
                path: d.display().to_string(),
                msg: "no sweep.csv or sweep-shard-*.csv here".into(),
            });
        }
        files.extend(found);
    }
    let missing = missing_shards(&files);
    let tables = files
        .iter()
        .map(|f| Ok((f.display().to_string(), Table::read(f)?)))
        .collect::<Result<Vec<_>, SweepError>>()?;
    let t = Table::merge(tables)?;
    let written = write_results(&t, out)?;
    Ok((t, written, missing))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env(pairs: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> {
        let v: Vec<(String, String)> = pairs
            .iter()
            .map(|(a, b)| (a.to_string(), b.to_string()))
            .collect();
        move |k| v.iter().find(|(a, _)| a == k).map(|(_, b)| b.clone())
    }

    #[test]
    fn shard_from_flag_and_job_arrays() {
        assert_eq!(Shard::parse("1/4").unwrap(), Shard { index: 1, count: 4 });
        assert!(Shard::parse("4/4").is_err());
        assert!(Shard::parse("0/0").is_err());
        assert!(Shard::parse("x").is_err());
        assert_eq!(Shard::from_env(env(&[])).unwrap(), None);
        let slurm = env(&[
            ("SLURM_ARRAY_TASK_ID", "3"),
            ("SLURM_ARRAY_TASK_MIN", "1"),
            ("SLURM_ARRAY_TASK_COUNT", "4"),
        ]);
        assert_eq!(
            Shard::from_env(slurm).unwrap(),
            Some(Shard { index: 2, count: 4 })
        );
        assert!(Shard::from_env(env(&[("SLURM_ARRAY_TASK_ID", "3")])).is_err());
        let k8s = env(&[("JOB_COMPLETION_INDEX", "0"), ("ROCE_SWEEP_SHARDS", "2")]);
        assert_eq!(
            Shard::from_env(k8s).unwrap(),
            Some(Shard { index: 0, count: 2 })
        );
        let e = Shard::from_env(env(&[("JOB_COMPLETION_INDEX", "0")])).unwrap_err();
        assert!(e.to_string().contains("ROCE_SWEEP_SHARDS"), "{e}");
        let e = Shard::from_env(env(&[
            ("JOB_COMPLETION_INDEX", "2"),
            ("ROCE_SWEEP_SHARDS", "2"),
        ]))
        .unwrap_err();
        assert!(e.to_string().contains("shard 2 of 2"), "{e}");
        // Every run in exactly one shard.
        for i in 0..10 {
            let owners = (0..3)
                .filter(|&s| Shard { index: s, count: 3 }.owns(i))
                .count();
            assert_eq!(owners, 1);
        }
    }

    #[test]
    fn dotted_paths_into_tables_and_arrays() {
        let mut v: Value = Value::Table(
            toml::from_str(
                "[cc]\nalgorithm = \"none\"\n[[workload]]\nsize = 1\n[[workload]]\nsize = 2\n",
            )
            .unwrap(),
        );
        set_path(&mut v, &["workload", "1", "size"], Value::Integer(9)).unwrap();
        set_path(&mut v, &["cc", "algorithm"], Value::String("hpcc".into())).unwrap();
        set_path(&mut v, &["switch", "ecn", "pmax"], Value::Float(0.5)).unwrap();
        assert_eq!(v["workload"][1]["size"].as_integer(), Some(9));
        assert_eq!(v["workload"][0]["size"].as_integer(), Some(1));
        assert_eq!(v["cc"]["algorithm"].as_str(), Some("hpcc"));
        assert_eq!(v["switch"]["ecn"]["pmax"].as_float(), Some(0.5));
        let e = set_path(&mut v, &["workload", "2", "size"], Value::Integer(1)).unwrap_err();
        assert!(e.contains("out of range"), "{e}");
        let e = set_path(&mut v, &["workload", "x"], Value::Integer(1)).unwrap_err();
        assert!(e.contains("not an index"), "{e}");
        let e = set_path(&mut v, &["cc", "algorithm", "x"], Value::Integer(1)).unwrap_err();
        assert!(e.contains("string"), "{e}");
    }

    #[test]
    fn merge_rejects_conflicts_and_dedups_reruns() {
        let t = |rows: &[&[&str]]| Table {
            header: vec!["run".into(), "seed".into(), "status".into()],
            rows: rows
                .iter()
                .map(|r| r.iter().map(|s| s.to_string()).collect())
                .collect(),
        };
        let a = t(&[&["2", "1", "ok"], &["0", "1", "ok"]]);
        let b = t(&[&["1", "1", "ok"], &["2", "1", "ok"]]);
        let m = Table::merge(vec![("a".into(), a.clone()), ("b".into(), b)]).unwrap();
        let runs: Vec<&str> = m.rows.iter().map(|r| r[0].as_str()).collect();
        assert_eq!(runs, ["0", "1", "2"]);
        let c = t(&[&["2", "1", "error"]]);
        assert!(Table::merge(vec![("a".into(), a), ("c".into(), c)]).is_err());
        let missing = missing_shards(&[PathBuf::from("d/sweep-shard-0-of-3.csv")]);
        assert_eq!(
            missing,
            ["sweep-shard-1-of-3.csv", "sweep-shard-2-of-3.csv"]
        );
    }
}
