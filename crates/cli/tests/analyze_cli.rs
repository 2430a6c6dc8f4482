//! `roce analyze` end to end: the JSON contract, the cases issue 11 names,
//! sweep, compare, pictures, and bad input.

use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn roce() -> Command {
    Command::new(env!("CARGO_BIN_EXE_roce"))
}

fn profile(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../profiles")
        .join(name)
}

fn analyze(profile_file: &Path, args: &[&str]) -> Output {
    roce()
        .arg("analyze")
        .arg(profile_file)
        .args(args)
        .output()
        .unwrap()
}

fn json(profile_file: &Path, workload: &[&str]) -> Value {
    let mut args = vec!["--json", "--workload"];
    args.extend_from_slice(workload);
    let out = analyze(profile_file, &args);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("one JSON object")
}

#[test]
fn json_contract() {
    let v = json(
        &profile("100g-gen3x16-ddr4-1s.toml"),
        &["op=write", "size=4K"],
    );
    let hops = v["hops"].as_array().unwrap();
    let names: Vec<&str> = hops.iter().map(|h| h["name"].as_str().unwrap()).collect();
    assert_eq!(
        names,
        [
            "source_ddr",
            "tx_pcie",
            "rnic_tx",
            "port",
            "leaf",
            "spine",
            "rnic_rx",
            "rx_pcie",
            "target_ddr",
            "cpu_cq"
        ]
    );
    for h in hops {
        for k in [
            "capacity_gbps",
            "capacity_mpps",
            "demand_gbps",
            "utilisation",
        ] {
            assert!(h[k].as_f64().is_some_and(f64::is_finite), "{k} in {h}");
        }
        assert!(!h["metric"].as_str().unwrap().is_empty());
    }
    let binding = v["binding"].as_str().unwrap();
    assert!(names.contains(&binding));
    assert!(v["reason"].as_str().unwrap().starts_with(binding));
    // The binding hop is the one at 100 %.
    let b = hops.iter().find(|h| h["name"] == binding).unwrap();
    assert!((b["utilisation"].as_f64().unwrap() - 1.0).abs() < 1e-9);
}

#[test]
fn named_cases() {
    // 4 KiB WRITEs from a 200G NIC in a Gen3 x16 slot stop at the PCIe limit.
    let v = json(
        &profile("200g-in-gen3x16-slot.toml"),
        &["op=write", "size=4K"],
    );
    assert_eq!(v["binding"], "tx_pcie", "{}", v["reason"]);
    assert!((v["goodput_gbps"].as_f64().unwrap() - 102.75).abs() < 0.01);
    // 64 B SENDs stop at the message-rate ceiling.
    let v = json(
        &profile("100g-gen3x16-ddr4-1s.toml"),
        &["op=send", "size=64", "qps=16", "threads=16", "batch=16"],
    );
    assert_eq!(v["binding"], "rnic_tx");
    assert!(
        v["reason"]
            .as_str()
            .unwrap()
            .contains("message-rate ceiling")
    );
    // 2,000 QPs fall off the QP-context cache (comma-separated keys work too).
    let v = json(
        &profile("100g-gen3x16-ddr4-1s.toml"),
        &["op=write,size=64,qps=2000,threads=16"],
    );
    assert!(
        v["reason"].as_str().unwrap().contains("QP-context"),
        "{}",
        v["reason"]
    );
}

#[test]
fn table_sweep_and_compare() {
    let out = analyze(
        &profile("100g-gen3x16-ddr4-1s.toml"),
        &[
            "--workload",
            "op=write",
            "qps=2000",
            "threads=16",
            "--sweep",
            "size=64..4M",
            "--compare",
        ],
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let s = String::from_utf8(out.stdout).unwrap();
    assert!(s.contains("binding:") && s.contains("reason:"), "{s}");
    // The binding hop is marked in the table.
    assert!(s.lines().any(|l| l.starts_with("* ")), "{s}");
    assert!(s.contains("binding changes between"), "{s}");
    for opt in [
        "unsignaled+cq_moderation",
        "inline",
        "doorbell_batch",
        "larger_mtu",
        "fewer_sges",
        "fewer_qps",
    ] {
        assert!(s.contains(opt), "{opt} missing:\n{s}");
    }
    // JSON carries the sweep and the comparison too.
    let out = analyze(
        &profile("100g-gen3x16-ddr4-1s.toml"),
        &[
            "--json",
            "--sweep",
            "size=64..1M",
            "--compare",
            "--workload",
            "size=64",
            "qps=2000",
            "threads=16",
        ],
    );
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["sweep"]["points"].as_array().unwrap().len(), 15);
    assert!(!v["sweep"]["changes"].as_array().unwrap().is_empty());
    let fewer = v["compare"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["name"] == "fewer_qps")
        .unwrap();
    assert!(fewer["goodput_gbps"].as_f64().unwrap() > v["goodput_gbps"].as_f64().unwrap() * 2.0);
}

#[test]
fn pictures() {
    let dir = tempfile::tempdir().unwrap();
    let (svg, png) = (dir.path().join("path.svg"), dir.path().join("path.png"));
    let out = roce()
        .arg("analyze")
        .arg(profile("400g-gen5x16-ddr5-1s.toml"))
        .arg("--svg")
        .arg(&svg)
        .arg("--png")
        .arg(&png)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = std::fs::read_to_string(&svg).unwrap();
    assert!(text.contains("<svg") && text.contains("cpu_cq") && text.contains("source_ddr"));
    let bytes = std::fs::read(&png).unwrap();
    assert_eq!(&bytes[..8], b"\x89PNG\r\n\x1a\n");
}

fn bad_profile(edit: impl Fn(String) -> String) -> (tempfile::TempDir, PathBuf) {
    let src = std::fs::read_to_string(profile("100g-gen3x16-ddr4-1s.toml")).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("bad.toml");
    std::fs::write(&path, edit(src)).unwrap();
    (dir, path)
}

fn line_of(path: &Path, needle: &str) -> usize {
    let src = std::fs::read_to_string(path).unwrap();
    src.lines().position(|l| l.starts_with(needle)).unwrap() + 1
}

fn error_line(path: &Path) -> String {
    let out = analyze(path, &[]);
    assert!(!out.status.success());
    assert!(out.stdout.is_empty());
    let err = String::from_utf8(out.stderr).unwrap();
    assert_eq!(err.lines().count(), 1, "one line: {err}");
    err
}

#[test]
fn bad_profiles_name_file_line_and_field() {
    let cases: [(&str, &str, &str, &str); 4] = [
        (
            "generation = 3",
            "generation = 9",
            "pcie.generation",
            "unknown PCIe generation",
        ),
        (
            "port_gbps = 100.0",
            "port_gbps = -100.0",
            "rnic.port_gbps",
            "positive",
        ),
        (
            "lanes = 16",
            "lanes = 16\nwidth = 16",
            "pcie.width",
            "unknown field",
        ),
        (
            "uplink_gbps = 100.0",
            "uplink_gbps = 0.0",
            "fabric.uplink_gbps",
            "positive",
        ),
    ];
    for (from, to, field, why) in cases {
        let (_dir, path) = bad_profile(|s| s.replacen(from, to, 1));
        let needle = to.lines().last().unwrap();
        let line = line_of(&path, needle);
        let err = error_line(&path);
        let want = format!("{}:{line}: {field}: ", path.display());
        assert!(err.contains(&want), "want {want} in {err}");
        assert!(err.contains(why), "{err}");
    }
    // A missing field names the field, inside its section.
    let (_dir, path) = bad_profile(|s| s.replacen("mrrs = 512\n", "", 1));
    let err = error_line(&path);
    assert!(
        err.contains("pcie.mrrs") && err.contains("missing field"),
        "{err}"
    );
    assert!(err.contains(&format!("{}:", path.display())), "{err}");
}

#[test]
fn bad_workloads_and_arguments() {
    let p = profile("100g-gen3x16-ddr4-1s.toml");
    for (args, why) in [
        (vec!["--workload", "colour=red"], "unknown key `colour`"),
        (
            vec!["--workload", "op=fetch"],
            "expected send, write, read or atomic",
        ),
        (
            vec!["--workload", "mtu=1500"],
            "expected 256, 512, 1024, 2048 or 4096",
        ),
        (vec!["--workload", "numa=remote"], "two or more sockets"),
        (vec!["--workload", "threads=64"], "16 cores"),
        (vec!["--sweep", "qps=1..8"], "only size"),
        (vec!["--sweep", "size=4M..64"], "LO ≤ HI"),
    ] {
        let out = analyze(&p, &args);
        assert!(!out.status.success(), "{args:?}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains(why), "{args:?}: {err}");
    }
    let out = roce()
        .args(["analyze", "/nonexistent/profile.toml"])
        .output()
        .unwrap();
    assert!(String::from_utf8_lossy(&out.stderr).contains("/nonexistent/profile.toml"));
}
