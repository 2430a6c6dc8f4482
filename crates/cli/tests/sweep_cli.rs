//! `roce sim sweep` and `roce sim collect` from the command line: a job
//! array's variables choose the shard, and collected shards equal the
//! whole sweep.

use std::path::{Path, PathBuf};
use std::process::Command;

const ARRAY_VARS: [&str; 5] = [
    "SLURM_ARRAY_TASK_ID",
    "SLURM_ARRAY_TASK_MIN",
    "SLURM_ARRAY_TASK_COUNT",
    "JOB_COMPLETION_INDEX",
    "ROCE_SWEEP_SHARDS",
];

/// `roce` with no job-array variables from the calling environment.
fn roce() -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_roce"));
    for v in ARRAY_VARS {
        c.env_remove(v);
    }
    c
}

fn ok(c: &mut Command) -> String {
    let out = c.output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

fn sweep_file(dir: &Path) -> PathBuf {
    let base = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scenarios/incast.toml");
    let f = dir.join("s.toml");
    std::fs::write(
        &f,
        format!(
            "base = {:?}\nseeds = [3]\n[grid]\n\"workload.0.size\" = [10000, 20000, 30000]\n",
            base.display().to_string()
        ),
    )
    .unwrap();
    f
}

#[test]
fn job_array_shards_collect_to_the_whole_sweep() {
    let tmp = tempfile::tempdir().unwrap();
    let sweep = sweep_file(tmp.path());
    let whole = tmp.path().join("whole");
    ok(roce()
        .args(["sim", "sweep"])
        .arg(&sweep)
        .arg("--out")
        .arg(&whole)
        .args(["-j", "2", "--no-plots"]));
    // A Slurm array of two tasks numbered 1 and 2, then a Kubernetes one.
    let shared = tmp.path().join("shared");
    for id in ["1", "2"] {
        let out = ok(roce()
            .args(["sim", "sweep"])
            .arg(&sweep)
            .arg("--out")
            .arg(&shared)
            .args(["-j", "1", "--no-plots"])
            .env("SLURM_ARRAY_TASK_ID", id)
            .env("SLURM_ARRAY_TASK_MIN", "1")
            .env("SLURM_ARRAY_TASK_COUNT", "2"));
        assert!(out.contains("sweep-shard-"), "{out}");
    }
    assert!(shared.join("sweep-shard-0-of-2.csv").is_file());
    assert!(shared.join("sweep-shard-1-of-2.csv").is_file());
    let out = ok(roce()
        .args(["sim", "collect"])
        .arg(&shared)
        .arg("--out")
        .arg(&shared));
    assert!(out.contains("3 runs collected"), "{out}");
    let a = std::fs::read_to_string(whole.join("sweep.csv")).unwrap();
    let b = std::fs::read_to_string(shared.join("sweep.csv")).unwrap();
    assert_eq!(a, b);
    assert_eq!(a.lines().count(), 4, "{a}");
    assert!(shared.join("sweep_workload_0_size.png").is_file());
    for run in ["run-00000", "run-00001", "run-00002"] {
        assert!(shared.join(run).join("fct.csv").is_file(), "{run}");
        assert!(shared.join(run).join("run.json").is_file(), "{run}");
    }

    // Pod 1 of a 3-completion Indexed Job runs run 1 only.
    let out = ok(roce()
        .args(["sim", "sweep"])
        .arg(&sweep)
        .arg("--out")
        .arg(tmp.path().join("k8s"))
        .arg("--dry-run")
        .env("JOB_COMPLETION_INDEX", "1")
        .env("ROCE_SWEEP_SHARDS", "3"));
    let mine: Vec<&str> = out.lines().filter(|l| l.ends_with(" *")).collect();
    assert_eq!(mine.len(), 1, "{out}");
    assert!(
        mine[0].starts_with("run-00001 workload.0.size=20000 seed=3"),
        "{out}"
    );
}

#[test]
fn a_job_index_without_a_count_is_an_error() {
    let tmp = tempfile::tempdir().unwrap();
    let sweep = sweep_file(tmp.path());
    let out = roce()
        .args(["sim", "sweep"])
        .arg(&sweep)
        .arg("--out")
        .arg(tmp.path().join("o"))
        .env("JOB_COMPLETION_INDEX", "0")
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("ROCE_SWEEP_SHARDS"), "{err}");
    let out = roce()
        .args(["sim", "sweep"])
        .arg(&sweep)
        .args(["--out", "x", "--shard", "2/2"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("expected I/N"));
}

#[test]
fn failed_runs_are_recorded_and_fail_the_exit_status() {
    let tmp = tempfile::tempdir().unwrap();
    let base = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scenarios/incast.toml");
    let f = tmp.path().join("s.toml");
    std::fs::write(
        &f,
        format!(
            "base = {:?}\nseeds = [3]\n[grid]\n\"cc.algorithm\" = [\"none\", \"cubic\"]\n",
            base.display().to_string()
        ),
    )
    .unwrap();
    let out_dir = tmp.path().join("o");
    let out = roce()
        .args(["sim", "sweep"])
        .arg(&f)
        .arg("--out")
        .arg(&out_dir)
        .args(["-j", "1", "--no-plots"])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    // Not 1 (a sweep that could not start): a Job's pod failure policy
    // tells the two apart.
    assert_eq!(
        out.status.code(),
        Some(roce_sim::sweep::EXIT_RUNS_FAILED),
        "{err}"
    );
    // The others went on and every run is in the table.
    let table = std::fs::read_to_string(out_dir.join("sweep.csv")).unwrap();
    assert_eq!(table.lines().count(), 3, "{table}");
    assert!(table.lines().nth(1).unwrap().contains(",ok,"), "{table}");
    assert!(out_dir.join("run-00000").join("fct.csv").is_file());
    // The summary names the failed run and only it.
    assert!(err.contains("1 of 2 runs of"), "{err}");
    assert!(
        err.contains("run-00001 cc.algorithm=cubic seed=3: cc.algorithm: expected"),
        "{err}"
    );
    assert!(!err.contains("run-00000 cc.algorithm"), "{err}");
}

#[test]
fn sweep_setup_mistakes_are_one_clear_message() {
    let tmp = tempfile::tempdir().unwrap();
    let run = |src: &str| {
        let f = tmp.path().join("bad.toml");
        std::fs::write(&f, src).unwrap();
        let out = roce()
            .args(["sim", "sweep"])
            .arg(&f)
            .arg("--out")
            .arg(tmp.path().join("o"))
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(1));
        String::from_utf8_lossy(&out.stderr).into_owned()
    };
    let err = run("base = \"nope.toml\"\n");
    assert!(err.contains("bad.toml: base scenario"), "{err}");
    assert!(err.contains("nope.toml: cannot read"), "{err}");
    assert_eq!(err.matches("No such file").count(), 1, "{err}");
    let base = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scenarios/incast.toml");
    let err = run(&format!(
        "base = {:?}\n[grid]\n\"cc.algoritm\" = [\"dcqcn\", \"hpcc\"]\n",
        base.display().to_string()
    ));
    assert!(
        err.contains("bad.toml: grid key `cc.algoritm`")
            && err.contains("unknown field `algoritm`"),
        "{err}"
    );
    // Nothing ran.
    assert!(!tmp.path().join("o").exists(), "{err}");
    assert_eq!(err.lines().count(), 1, "{err}");
}
