//! `roce sim --hpcc-config` as a drop-in for the HPCC ns-3 simulator's
//! `third`: FCT_OUTPUT_FILE, PFC_OUTPUT_FILE and QLEN_MON_FILE land where
//! the config names them, relative to the working directory, in new folders
//! if need be; a path that cannot be written stops it before the run.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

fn roce() -> Command {
    Command::new(env!("CARGO_BIN_EXE_roce"))
}

fn hpcc_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scenarios/hpcc")
}

/// The value of `key` in a config's text.
fn value(config: &str, key: &str) -> Option<String> {
    config.lines().find_map(|l| {
        let mut it = l.split_whitespace();
        (it.next() == Some(key)).then(|| it.next().unwrap_or("").to_string())
    })
}

/// The `config_*.txt` files of `dir`, sorted.
fn configs_in(dir: &Path) -> Vec<PathBuf> {
    let mut configs: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| {
            p.file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.starts_with("config_") && n.ends_with(".txt"))
        })
        .collect();
    configs.sort();
    configs
}

/// Runs every config at once, each from its own empty working directory,
/// and checks that every output the config names lands at its path there
/// (and nowhere beside the config), with one FCT line per flow.
fn run_and_check(configs: Vec<PathBuf>) {
    let runs: Vec<(PathBuf, tempfile::TempDir, Child)> = configs
        .into_iter()
        .map(|c| {
            let cwd = tempfile::tempdir().unwrap();
            let child = roce()
                .current_dir(cwd.path())
                .args(["sim", "--no-plots", "--hpcc-config"])
                .arg(&c)
                .arg("--out")
                .arg(cwd.path().join("ours"))
                .stdout(Stdio::null())
                .stderr(Stdio::piped())
                .spawn()
                .unwrap();
            (c, cwd, child)
        })
        .collect();
    for (config, cwd, child) in runs {
        let out = child.wait_with_output().unwrap();
        let name = config.display();
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "{name}: {err}");
        let text = std::fs::read_to_string(&config).unwrap();
        let beside = config.parent().unwrap();
        let flows: usize = {
            let f = value(&text, "FLOW_FILE").unwrap();
            let f = std::fs::read_to_string(beside.join(f)).unwrap();
            f.split_whitespace().next().unwrap().parse().unwrap()
        };
        let mut seen = 0;
        for key in [
            "FCT_OUTPUT_FILE",
            "PFC_OUTPUT_FILE",
            "QLEN_MON_FILE",
            "TRACE_OUTPUT_FILE",
        ] {
            let Some(rel) = value(&text, key) else {
                continue;
            };
            seen += 1;
            let at = cwd.path().join(&rel);
            assert!(at.is_file(), "{name}: {key} {rel} not at {}", at.display());
            // Nothing beside the config itself.
            assert!(!beside.join(&rel).exists(), "{name}: {rel} beside it");
        }
        assert!(seen >= 2, "{name}: names FCT and PFC outputs at least");
        // ns-3's packet trace: its header (a device count, 11 bytes per
        // device, the window), then with ENABLE_TRACE 1 56-byte records.
        if let Some(rel) = value(&text, "TRACE_OUTPUT_FILE") {
            let b = std::fs::read(cwd.path().join(&rel)).unwrap();
            let devices = u32::from_le_bytes(b[0..4].try_into().unwrap()) as usize;
            assert!(devices > 0, "{name}: {rel}");
            let records = b.len() - (4 + 11 * devices + 4);
            assert_eq!(records % 56, 0, "{name}: {rel}");
            if value(&text, "ENABLE_TRACE").as_deref() == Some("0") {
                assert_eq!(records, 0, "{name}: {rel} has records");
            }
        }
        let fct =
            std::fs::read_to_string(cwd.path().join(value(&text, "FCT_OUTPUT_FILE").unwrap()))
                .unwrap();
        assert_eq!(fct.lines().count(), flows, "{name}: one line per flow");
        assert!(
            fct.lines().all(|l| l.split(' ').count() == 8),
            "{name}: {fct}"
        );
        // Our own files stay in --out.
        assert!(cwd.path().join("ours/fct.csv").is_file(), "{name}");
        assert!(cwd.path().join("ours/summary.json").is_file(), "{name}");
    }
}

#[test]
fn shipped_configs_write_every_output_at_its_configured_path() {
    let configs = configs_in(&hpcc_dir());
    assert!(configs.len() >= 10, "{configs:?}");
    run_and_check(configs);
}

/// How many flows of a large run's flow file the configs of `dual/`,
/// `fat5ms/`, `fat10ms/`, `host25g/`, `load50/` and `switches/` run here:
/// all 3,571
/// (7,097, 32,910) take minutes in a
/// debug build, and what is under test is where the outputs go, which a
/// few flows show as well.
const LARGE_RUN_FLOWS: usize = 24;

/// The configs of each subfolder of `scenarios/hpcc/` (`dual/`: hosts on
/// two ToRs each, `fat5ms/`, `fat10ms/`, `host25g/`: the fat tree at 25
/// and 100 Gb/s, `load50/`:
/// 2 ms at 50 % load, FB Hadoop and WebSearch, and `switches/`: the 1 ms
/// fat tree with HPCC's switches changed one at a time) as shipped, from
/// a copy of their folder layout (`../trace.txt` one level up, and
/// `../topo_fat320.txt` for all but `dual/` and `host25g/`) whose flow
/// file is cut to
/// its first [`LARGE_RUN_FLOWS`] flows.
#[test]
fn large_run_configs_write_every_output_at_their_configured_paths() {
    let mut folders: Vec<String> = std::fs::read_dir(hpcc_dir())
        .unwrap()
        .map(|e| e.unwrap())
        .filter(|e| e.file_type().unwrap().is_dir())
        .map(|e| e.file_name().into_string().unwrap())
        .collect();
    folders.sort();
    assert_eq!(
        folders,
        ["dual", "fat10ms", "fat5ms", "host25g", "load50", "switches"]
    );
    for folder in &folders {
        check_large_run_folder(folder);
    }
}

fn check_large_run_folder(folder: &str) {
    let shipped = hpcc_dir().join(folder);
    let layout = tempfile::tempdir().unwrap();
    let root = layout.path().join("hpcc");
    let sub = root.join(folder);
    std::fs::create_dir_all(&sub).unwrap();
    let configs = configs_in(&shipped);
    // At least three in each (PFC-only, DCQCN and HPCC in the large runs).
    assert!(configs.len() >= 3, "{configs:?}");
    let mut copies = Vec::new();
    for c in &configs {
        let text = std::fs::read_to_string(c).unwrap();
        // The inputs a config names, relative to its own folder.
        for key in ["TOPOLOGY_FILE", "TRACE_FILE", "FLOW_FILE"] {
            let rel = value(&text, key).unwrap_or_else(|| panic!("{}: no {key}", c.display()));
            let (from, to) = (shipped.join(&rel), sub.join(&rel));
            if to.exists() {
                continue;
            }
            let body = std::fs::read_to_string(&from)
                .unwrap_or_else(|e| panic!("{}: {key} {rel}: {e}", c.display()));
            let body = if key == "FLOW_FILE" {
                let mut lines = body.lines();
                let total: usize = lines.next().unwrap().trim().parse().unwrap();
                assert!(total > LARGE_RUN_FLOWS, "{rel} has {total} flows");
                let mut cut = format!("{LARGE_RUN_FLOWS}\n");
                for l in lines.take(LARGE_RUN_FLOWS) {
                    cut += l;
                    cut += "\n";
                }
                cut
            } else {
                body
            };
            std::fs::write(&to, body).unwrap();
        }
        let copy = sub.join(c.file_name().unwrap());
        std::fs::write(&copy, text).unwrap();
        copies.push(copy);
    }
    assert!(root.join("trace.txt").is_file());
    run_and_check(copies);
}

/// Two hosts under one switch, one 100 KB flow at 2 s (third.cc's flows
/// start at 2 s), and `outputs` as the output keys.
fn experiment(dir: &Path, outputs: &str) -> PathBuf {
    std::fs::write(
        dir.join("topo.txt"),
        "3 1 2\n2\n0 2 100Gbps 1000ns 0\n1 2 100Gbps 1000ns 0\n",
    )
    .unwrap();
    std::fs::write(dir.join("flow.txt"), "1\n0 1 3 100 100000 2.0\n").unwrap();
    let config = dir.join("config.txt");
    std::fs::write(
        &config,
        format!(
            "TOPOLOGY_FILE topo.txt\nFLOW_FILE flow.txt\nCC_MODE 1\nSIMULATOR_STOP_TIME 2.01\n\
             KMAX_MAP 1 100000000000 400\nKMIN_MAP 1 100000000000 100\n\
             PMAX_MAP 1 100000000000 0.2\n{outputs}"
        ),
    )
    .unwrap();
    config
}

#[test]
fn outputs_go_into_new_folders_and_the_queue_monitor_writes_third_cc_format() {
    let inputs = tempfile::tempdir().unwrap();
    let cwd = tempfile::tempdir().unwrap();
    // Sample the queues from 2 s (a 100 ms mark: one dump there) to 2 s +
    // 1 µs; the run stops at 2.01 s.
    let config = experiment(
        inputs.path(),
        "FCT_OUTPUT_FILE res/a/fct.txt\nPFC_OUTPUT_FILE res/b/pfc.txt\n\
         QLEN_MON_FILE res/q/qlen.txt\nQLEN_MON_START 2000000000\nQLEN_MON_END 2000001000\n",
    );
    let out = roce()
        .current_dir(cwd.path())
        .args(["sim", "--no-plots", "--hpcc-config"])
        .arg(&config)
        .arg("--out")
        .arg(cwd.path().join("ours"))
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let read = |p: &str| std::fs::read_to_string(cwd.path().join(p)).unwrap();
    assert_eq!(read("res/a/fct.txt").lines().count(), 1);
    assert!(cwd.path().join("res/b/pfc.txt").is_file());
    // One dump at 2 s holding the single sample taken then: switch 2's two
    // ports (interfaces 1 and 2), each with one sample of 0 KB.
    assert_eq!(read("res/q/qlen.txt"), "time: 2000000000\n2 1 1\n2 2 1\n");
}

#[test]
fn an_unwritable_output_path_fails_before_the_run() {
    let inputs = tempfile::tempdir().unwrap();
    let cwd = tempfile::tempdir().unwrap();
    // A folder cannot be made where a file is.
    std::fs::write(cwd.path().join("blocker"), "").unwrap();
    let config = experiment(
        inputs.path(),
        "FCT_OUTPUT_FILE fct.txt\nPFC_OUTPUT_FILE blocker/pfc.txt\n",
    );
    let out = roce()
        .current_dir(cwd.path())
        .args(["sim", "--no-plots", "--hpcc-config"])
        .arg(&config)
        .arg("--out")
        .arg(cwd.path().join("ours"))
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("PFC_OUTPUT_FILE") && err.contains("blocker/pfc.txt"),
        "{err}"
    );
    assert!(err.contains("config.txt:"), "names the config line: {err}");
    assert!(
        !cwd.path().join("ours").exists(),
        "no run, so no results: {err}"
    );
}
