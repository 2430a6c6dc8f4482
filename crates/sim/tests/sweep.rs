//! Sweeps end to end: a sweep run whole equals the same sweep run as two
//! shards and collected; failed runs are recorded; the shipped Slurm and
//! Kubernetes examples parse and agree with the sharding contract.

use roce_sim::sweep::{self, Options, Shard, Sweep, Table};
use std::path::{Path, PathBuf};

fn scenarios() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scenarios")
}

/// 3 algorithms (one the scenario rejects) × 2 sizes × 2 seeds = 12 runs of
/// a small incast.
fn small_sweep(dir: &Path) -> Sweep {
    let base = scenarios().join("incast.toml");
    let src = format!(
        "base = {:?}\nseeds = [1, 2]\n[grid]\n\"cc.algorithm\" = [\"none\", \"hpcc\", \"cubic\"]\n\"workload.0.size\" = [20000, 60000]\n",
        base.display().to_string()
    );
    let f = dir.join("s.toml");
    std::fs::write(&f, src).unwrap();
    Sweep::load(&f).unwrap()
}

fn run(sw: &Sweep, out: &Path, shard: Shard) -> Table {
    let opts = Options {
        jobs: 2,
        shard,
        run_plots: false,
    };
    let outcomes = sweep::execute(sw, out, &opts, &|_| {});
    Table::of(&sw.keys, &outcomes)
}

#[test]
fn shards_collected_equal_the_whole_sweep() {
    let tmp = tempfile::tempdir().unwrap();
    let sw = small_sweep(tmp.path());
    assert_eq!(sw.runs().len(), 12);
    // Whole.
    let whole_dir = tmp.path().join("whole");
    let whole = run(&sw, &whole_dir, Shard::ALL);
    sweep::write_results(&whole, &whole_dir).unwrap();
    // Two shards into one shared folder, then collected.
    let shards_dir = tmp.path().join("shards");
    for i in 0..2 {
        let shard = Shard { index: i, count: 2 };
        let t = run(&sw, &shards_dir, shard);
        assert_eq!(t.rows.len(), 6);
        std::fs::create_dir_all(&shards_dir).unwrap();
        t.write(&shards_dir.join(shard.table_name())).unwrap();
    }
    let merged_dir = tmp.path().join("merged");
    let (merged, files, missing) =
        sweep::collect(std::slice::from_ref(&shards_dir), &merged_dir).unwrap();
    assert!(missing.is_empty(), "{missing:?}");
    assert_eq!(merged, whole);
    let a = std::fs::read(whole_dir.join("sweep.csv")).unwrap();
    let b = std::fs::read(merged_dir.join("sweep.csv")).unwrap();
    assert_eq!(a, b, "collected shards differ from the whole sweep");
    for f in ["sweep_cc_algorithm.png", "sweep_workload_0_size.png"] {
        assert!(files.contains(&merged_dir.join(f)), "{f} not drawn");
    }
    // A run's own outputs are the same whichever process ran it.
    for run in ["run-00000", "run-00005"] {
        let a = std::fs::read(whole_dir.join(run).join("fct.csv")).unwrap();
        let b = std::fs::read(shards_dir.join(run).join("fct.csv")).unwrap();
        assert_eq!(a, b, "{run}");
    }

    // The table: the swept values, the seed, and each run's figures.
    let col = |name: &str| whole.header.iter().position(|h| h == name).unwrap();
    assert_eq!(
        &whole.header[..4],
        ["run", "cc.algorithm", "workload.0.size", "seed"]
    );
    let (alg, status, error, finished) = (
        col("cc.algorithm"),
        col("status"),
        col("error"),
        col("finished"),
    );
    for r in &whole.rows {
        if r[alg] == "cubic" {
            assert_eq!(r[status], "error");
            assert!(
                r[error].starts_with("cc.algorithm: expected"),
                "{}",
                r[error]
            );
        } else {
            assert_eq!(r[status], "ok", "{r:?}");
            assert_eq!(r[finished], "8", "{r:?}");
        }
    }
    assert_eq!(
        whole.rows.iter().filter(|r| r[status] == "error").count(),
        4
    );
    // Seeds vary fastest; sizes reach the scenario.
    assert_eq!(whole.rows[0][col("seed")], "1");
    assert_eq!(whole.rows[1][col("seed")], "2");
    let size_of = |run: usize| {
        let fct = std::fs::read_to_string(whole_dir.join(format!("run-{run:05}/fct.csv"))).unwrap();
        fct.lines()
            .nth(1)
            .unwrap()
            .split(',')
            .nth(3)
            .unwrap()
            .to_string()
    };
    assert_eq!(size_of(0), "20000");
    assert_eq!(size_of(2), "60000");

    // A missing shard is named.
    std::fs::remove_file(shards_dir.join("sweep-shard-1-of-2.csv")).unwrap();
    let (_, _, missing) = sweep::collect(&[shards_dir], &tmp.path().join("partial")).unwrap();
    assert_eq!(missing, ["sweep-shard-1-of-2.csv"]);
}

#[test]
fn bad_grid_paths_stop_before_running() {
    let tmp = tempfile::tempdir().unwrap();
    let base = scenarios().join("incast.toml");
    let load = |grid: &str| {
        let f = tmp.path().join("bad.toml");
        std::fs::write(
            &f,
            format!("base = {:?}\n[grid]\n{grid}\n", base.display().to_string()),
        )
        .unwrap();
        Sweep::load(&f).unwrap_err().to_string()
    };
    let e = load("\"workload.3.size\" = [1]");
    assert!(
        e.contains("grid key `workload.3.size`") && e.contains("out of range"),
        "{e}"
    );
    let e = load("\"name.x\" = [1]");
    assert!(e.contains("grid key `name.x`"), "{e}");
    let e = load("\"cc.algorithm\" = []");
    assert!(e.contains("at least one value"), "{e}");
    let e = load("\"seed\" = [1, 2]");
    assert!(e.contains("seeds = [...]"), "{e}");
    // A misspelt field stops the sweep before any run, naming the key and
    // the sweep file, wherever the misspelt segment stands.
    for (key, field) in [
        ("cc.algoritm", "algoritm"),
        ("ccc.algorithm", "ccc"),
        ("workload.0.sise", "sise"),
        ("switch.ecn.kmn_kb", "kmn_kb"),
    ] {
        let e = load(&format!("\"{key}\" = [1]\n\"cc.algorithm\" = [\"none\"]"));
        assert!(
            e.contains(&format!("bad.toml: grid key `{key}`"))
                && e.contains(&format!("unknown field `{field}`")),
            "{e}"
        );
    }
    // A value the scenario rejects is not a key error: its runs fail alone.
    load_ok(
        tmp.path(),
        &base,
        "\"cc.algorithm\" = [\"cubic\", \"none\"]",
    );
    // A missing base is one message naming its path.
    let f = tmp.path().join("nobase.toml");
    std::fs::write(&f, "base = \"nope.toml\"\n").unwrap();
    let e = Sweep::load(&f).unwrap_err();
    assert!(std::error::Error::source(&e).is_none());
    let e = e.to_string();
    assert!(e.contains("nobase.toml: base scenario"), "{e}");
    assert!(e.contains("nope.toml: cannot read"), "{e}");
}

fn load_ok(dir: &Path, base: &Path, grid: &str) -> Sweep {
    let f = dir.join("good.toml");
    std::fs::write(
        &f,
        format!("base = {:?}\n[grid]\n{grid}\n", base.display().to_string()),
    )
    .unwrap();
    Sweep::load(&f).unwrap()
}

#[test]
fn shipped_sweep_and_job_examples() {
    let dir = scenarios().join("sweep");
    let sw = Sweep::load(&dir.join("cc_load.toml")).unwrap();
    assert_eq!(sw.runs().len(), 12);
    for r in sw.runs() {
        sw.scenario(&r)
            .unwrap_or_else(|e| panic!("{}: {e}", r.dir_name()));
    }

    // The sbatch script is valid bash; sbatch itself checks it where present.
    let sbatch = dir.join("slurm.sbatch");
    let st = std::process::Command::new("bash")
        .arg("-n")
        .arg(&sbatch)
        .status()
        .unwrap();
    assert!(st.success(), "bash -n {}", sbatch.display());
    let text = std::fs::read_to_string(&sbatch).unwrap();
    assert!(
        text.contains("#SBATCH --array=0-"),
        "the array must count from 0"
    );
    assert!(text.contains("sim sweep") && text.contains("sim collect"));
    if let Ok(out) = std::process::Command::new("sbatch")
        .arg("--test-only")
        .arg(&sbatch)
        .arg("a")
        .arg("b")
        .output()
    {
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }

    // The Kubernetes manifests parse, the Job is indexed, and the shard
    // count it gives roce equals its completions.
    use yaml_rust2::{Yaml, YamlLoader};
    let job =
        &YamlLoader::load_from_str(&std::fs::read_to_string(dir.join("k8s-job.yaml")).unwrap())
            .unwrap()[0];
    assert_eq!(job["kind"].as_str(), Some("Job"));
    let spec = &job["spec"];
    assert_eq!(spec["completionMode"].as_str(), Some("Indexed"));
    let completions = spec["completions"].as_i64().unwrap();
    let c = &spec["template"]["spec"]["containers"][0];
    let cmd: Vec<&str> = c["command"]
        .as_vec()
        .unwrap()
        .iter()
        .filter_map(Yaml::as_str)
        .collect();
    assert_eq!(&cmd[..3], ["roce", "sim", "sweep"]);
    let env = c["env"].as_vec().unwrap();
    let shards = env
        .iter()
        .find(|e| e["name"].as_str() == Some("ROCE_SWEEP_SHARDS"))
        .and_then(|e| e["value"].as_str())
        .unwrap();
    assert_eq!(shards, completions.to_string());
    // What roce reads in pod 0 of that Job.
    let s = Shard::from_env(|k| match k {
        "JOB_COMPLETION_INDEX" => Some("0".into()),
        "ROCE_SWEEP_SHARDS" => Some(shards.into()),
        _ => None,
    })
    .unwrap();
    assert_eq!(
        s,
        Some(Shard {
            index: 0,
            count: completions as usize
        })
    );
    let collect =
        &YamlLoader::load_from_str(&std::fs::read_to_string(dir.join("k8s-collect.yaml")).unwrap())
            .unwrap()[0];
    let cmd: Vec<&str> = collect["spec"]["template"]["spec"]["containers"][0]["command"]
        .as_vec()
        .unwrap()
        .iter()
        .filter_map(Yaml::as_str)
        .collect();
    assert_eq!(&cmd[..3], ["roce", "sim", "collect"]);

    // A slice with failed runs fails its index at once (a re-run of a
    // deterministic run would fail the same way) and leaves the others be.
    let rules = spec["podFailurePolicy"]["rules"].as_vec().unwrap();
    let fail_index = rules
        .iter()
        .find(|r| r["action"].as_str() == Some("FailIndex"))
        .expect("a FailIndex rule");
    let on = &fail_index["onExitCodes"];
    assert_eq!(on["containerName"].as_str(), c["name"].as_str());
    assert_eq!(on["operator"].as_str(), Some("In"));
    let codes: Vec<i64> = on["values"]
        .as_vec()
        .unwrap()
        .iter()
        .filter_map(Yaml::as_i64)
        .collect();
    assert_eq!(codes, [i64::from(sweep::EXIT_RUNS_FAILED)]);
    assert!(spec["backoffLimitPerIndex"].as_i64().is_some());
    assert_eq!(
        spec["template"]["spec"]["restartPolicy"].as_str(),
        Some("Never")
    );
}

/// The sbatch script as an array task with the lowest index whose sweep
/// had failed runs: it still queues the collect, then ends with the
/// sweep's status. `roce` and `sbatch` are stand-ins on PATH that log
/// their arguments.
#[test]
fn sbatch_script_queues_the_collect_and_keeps_the_sweeps_status() {
    let tmp = tempfile::tempdir().unwrap();
    let bin = tmp.path().join("bin");
    std::fs::create_dir(&bin).unwrap();
    let log = tmp.path().join("log");
    let stub = |name: &str, status: i32| {
        let p = bin.join(name);
        std::fs::write(
            &p,
            format!(
                "#!/bin/sh\necho \"{name} $*\" >> {:?}\nexit {status}\n",
                log.display().to_string()
            ),
        )
        .unwrap();
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755)).unwrap();
    };
    stub("roce", sweep::EXIT_RUNS_FAILED);
    stub("sbatch", 0);
    let path = format!(
        "{}:{}",
        bin.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let out = std::process::Command::new("bash")
        .arg(scenarios().join("sweep/slurm.sbatch"))
        .args(["s.toml", "out"])
        .env("PATH", path)
        .env("SLURM_ARRAY_TASK_ID", "0")
        .env("SLURM_ARRAY_TASK_MIN", "0")
        .env("SLURM_ARRAY_JOB_ID", "77")
        .env("SLURM_CPUS_PER_TASK", "2")
        .output()
        .unwrap();
    assert_eq!(
        out.status.code(),
        Some(sweep::EXIT_RUNS_FAILED),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let log = std::fs::read_to_string(&log).unwrap();
    let lines: Vec<&str> = log.lines().collect();
    assert_eq!(lines.len(), 2, "{log}");
    assert!(
        lines[0].starts_with("roce sim sweep s.toml --out out -j 2"),
        "{log}"
    );
    assert!(
        lines[1].starts_with("sbatch --dependency=afterany:77") && lines[1].contains("sim collect"),
        "{log}"
    );
}
