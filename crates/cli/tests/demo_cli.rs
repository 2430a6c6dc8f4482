//! `roce demo` (the README's main command) runs, shows the 20 steps, and
//! leaves captures whose every frame decodes with a good ICRC.

use std::process::Command;

#[test]
fn demo_runs_and_its_captures_decode() {
    let dir = tempfile::tempdir().unwrap();
    let o = Command::new(env!("CARGO_BIN_EXE_roce"))
        .args(["demo", "--out"])
        .arg(dir.path())
        .output()
        .unwrap();
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(
        o.status.success(),
        "demo failed: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    for step in [" 1. ", " 5. ", "10-11.", "17. ", "19. ", "20. "] {
        assert!(out.contains(step), "step {step:?} missing from:\n{out}");
    }
    assert!(out.contains("all data verified"));
    for name in ["sample.pcap", "rc_write.pcap"] {
        let bytes = std::fs::read(dir.path().join(name)).unwrap();
        let cap = roce_wire::pcap::read_capture(&bytes).unwrap();
        assert!(!cap.frames.is_empty());
        for f in &cap.frames {
            match roce_wire::parse_frame(&f.data).unwrap() {
                roce_wire::Frame::Roce(r) => assert!(r.icrc_ok()),
                roce_wire::Frame::Pfc { .. } => {}
            }
        }
    }
}
