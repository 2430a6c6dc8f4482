//! `roce sim` end to end: outputs, HPCC inputs, and bad input.

use std::path::Path;
use std::process::Command;

fn roce() -> Command {
    Command::new(env!("CARGO_BIN_EXE_roce"))
}

fn scenarios() -> std::path::PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scenarios")
}

#[test]
fn incast_writes_every_output() {
    let dir = tempfile::tempdir().unwrap();
    let out = roce()
        .args(["sim"])
        .arg(scenarios().join("incast.toml"))
        .arg("--out")
        .arg(dir.path())
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    for f in [
        "fct.csv",
        "summary.json",
        "queues.csv",
        "pfc.csv",
        "pfc.pcap",
        "slowdown_cdf.png",
        "slowdown_cdf.svg",
        "flow_throughput.png",
        "queue_length.png",
    ] {
        assert!(dir.path().join(f).exists(), "{f} missing");
    }
    let s: serde_json::Value =
        serde_json::from_slice(&std::fs::read(dir.path().join("summary.json")).unwrap()).unwrap();
    assert_eq!(s["flows"]["finished"], 8);
    assert_eq!(s["drops"], 0);
    assert!(s["pfc_pause_frames"].as_u64().unwrap() > 0);
    assert!(s["slowdown"]["p99"].as_f64().unwrap() >= 1.0);
    let fct = std::fs::read_to_string(dir.path().join("fct.csv")).unwrap();
    assert!(
        fct.starts_with(
            "flow_id,src,dst,size_bytes,start_ns,finish_ns,fct_ns,ideal_fct_ns,slowdown"
        )
    );
}

#[test]
fn bad_scenario_is_one_located_line() {
    let dir = tempfile::tempdir().unwrap();
    let cases = [
        (
            "[topology]\nkind = \"star\"\nhosts = 1\n",
            "bad.toml:3: topology.hosts:",
        ),
        (
            "[topology]\nkind = \"ring\"\n",
            "bad.toml:2: topology.kind:",
        ),
        (
            "[topology]\nkind = \"star\"\nhosts = 4\n[[workload]]\nkind = \"poisson\"\nload = 0.3\ncdf = \"nope.txt\"\nduration_us = 10\n",
            "bad.toml:7: workload[0].cdf:",
        ),
        ("seed = \"x\"\n", "bad.toml:1:"),
    ];
    for (text, want) in cases {
        let p = dir.path().join("bad.toml");
        std::fs::write(&p, text).unwrap();
        let out = roce().arg("sim").arg(&p).output().unwrap();
        assert!(!out.status.success());
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(err.lines().count(), 1, "{err}");
        assert!(!err.contains("panicked"));
        let want = format!("{}", p.display()).replace("bad.toml", "") + want;
        assert!(err.contains(&want), "{err} does not contain {want}");
    }
    let out = roce().args(["sim", "/no/such/file.toml"]).output().unwrap();
    assert!(!out.status.success());
}

#[test]
fn hpcc_config_runs_and_writes_its_formats() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    // Nodes 0-2 are hosts, 3 is a switch.
    std::fs::write(
        d.join("topo.txt"),
        "4 1 3\n3\n0 3 100Gbps 1000ns 0\n1 3 100Gbps 1000ns 0\n2 3 100Gbps 1000ns 0\n",
    )
    .unwrap();
    std::fs::write(
        d.join("flow.txt"),
        "2\n0 2 3 100 300000 0.000001\n1 2 3 100 300000 0.000001\n",
    )
    .unwrap();
    let config = "ENABLE_QCN 1\nUSE_DYNAMIC_PFC_THRESHOLD 1\nPACKET_PAYLOAD_SIZE 1000\nTOPOLOGY_FILE topo.txt\nFLOW_FILE flow.txt\nFCT_OUTPUT_FILE fct.txt\nPFC_OUTPUT_FILE pfc.txt\nCC_MODE 1\nRATE_AI 5Mb/s\nBUFFER_SIZE 1\nKMAX_MAP 1 100000000000 400\nKMIN_MAP 1 100000000000 100\nPMAX_MAP 1 100000000000 0.2\nFROBNICATE 3\n";
    std::fs::write(d.join("config.txt"), config).unwrap();
    // Its own outputs land where the config says, relative to the working
    // directory (as with third.cc); ours in --out.
    let out = roce()
        .current_dir(d)
        .args(["sim", "--no-plots", "--hpcc-config"])
        .arg(d.join("config.txt"))
        .arg("--out")
        .arg(d.join("out"))
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    assert!(err.contains("unknown key FROBNICATE"), "{err}");
    assert!(
        !err.contains("not implemented"),
        "CC_MODE 1 runs DCQCN: {err}"
    );
    let fct = std::fs::read_to_string(d.join("fct.txt")).unwrap();
    assert_eq!(fct.lines().count(), 2, "{fct}");
    let f: Vec<&str> = fct.lines().next().unwrap().split(' ').collect();
    assert_eq!(f.len(), 8);
    assert!(f[0] == "0b000001" || f[0] == "0b000101", "{fct}");
    assert_eq!(f[1], "0b000201");
    assert_eq!(f[4], "300000");
    assert_eq!(f[5], "1000");
    assert!(d.join("pfc.txt").exists());
    assert!(d.join("out/fct.csv").exists() && d.join("out/summary.json").exists());
    // A link speed missing from a K map is an error naming the key.
    std::fs::write(
        d.join("config.txt"),
        config.replace("KMAX_MAP 1 100000000000 400", "KMAX_MAP 1 25000000000 400"),
    )
    .unwrap();
    let out = roce()
        .current_dir(d)
        .args(["sim", "--hpcc-config"])
        .arg(d.join("config.txt"))
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("KMAX_MAP") && err.contains("100000000000"),
        "{err}"
    );
}
