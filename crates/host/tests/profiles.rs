//! The shipped profiles load, and the cases issue 11 names come out of them.

use roce_host::analyze::{analyze, compare};
use roce_host::{Analysis, Profile, Workload};
use std::path::PathBuf;

fn profile(name: &str) -> Profile {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../profiles")
        .join(name);
    Profile::load(&path).unwrap_or_else(|e| panic!("{e}"))
}

fn run(p: &Profile, kv: &str) -> Analysis {
    let pairs: Vec<&str> = kv.split(' ').collect();
    analyze(p, &Workload::from_pairs(&pairs).expect("workload")).expect("analysis")
}

const ALL: [&str; 4] = [
    "100g-gen3x16-ddr4-1s.toml",
    "200g-gen4x16-ddr4-2s.toml",
    "200g-in-gen3x16-slot.toml",
    "400g-gen5x16-ddr5-1s.toml",
];

#[test]
fn every_shipped_profile_loads() {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../profiles");
    let mut n = 0;
    for e in std::fs::read_dir(dir).unwrap() {
        let path = e.unwrap().path();
        if path.extension().is_some_and(|x| x == "toml") {
            Profile::load(&path).unwrap_or_else(|e| panic!("{e}"));
            n += 1;
        }
    }
    assert!(n >= ALL.len());
}

#[test]
fn a_200g_nic_in_a_gen3_slot_binds_on_pcie() {
    // 4 KiB WRITEs: the 200G port could carry 195 Gb/s of payload; the
    // Gen3 x16 link 113.7 Gb/s at the TLP layer, of which 4096/4532 is
    // payload: 102.75 Gb/s.
    let a = run(&profile("200g-in-gen3x16-slot.toml"), "op=write size=4K");
    assert_eq!(a.binding_hop().name, "tx_pcie", "{}", a.reason);
    assert!((a.goodput_gbps - 102.75).abs() < 0.01, "{}", a.goodput_gbps);
    // The same NIC in its Gen4 slot is bound by its port.
    let a = run(&profile("200g-gen4x16-ddr4-2s.toml"), "op=write size=4K");
    assert_eq!(a.binding_hop().name, "port", "{}", a.reason);
}

#[test]
fn small_sends_bind_on_the_message_rate_everywhere() {
    for name in ALL.iter().filter(|n| !n.contains("in-gen3")) {
        let p = profile(name);
        let a = run(&p, "op=send size=64 qps=16 threads=16 batch=16");
        assert_eq!(a.binding_hop().name, "rnic_tx", "{name}: {}", a.reason);
        assert!(
            a.reason.contains("message-rate ceiling"),
            "{name}: {}",
            a.reason
        );
        assert!((a.message_rate_mps - p.rnic.message_rate_mpps).abs() < 1e-9);
    }
}

#[test]
fn two_thousand_qps_fall_off_the_cache_everywhere() {
    for name in ALL {
        let p = profile(name);
        let few = run(&p, "op=write size=64 qps=16 threads=16 batch=16");
        let many = run(&p, "op=write size=64 qps=2000 threads=16 batch=16");
        assert!(
            many.reason.contains("QP-context"),
            "{name}: {}",
            many.reason
        );
        assert!(many.goodput_gbps < few.goodput_gbps * 0.75, "{name}");
        let steps = compare(
            &p,
            &Workload::from_pairs(&["op=write", "size=64", "qps=2000", "threads=16", "batch=16"])
                .unwrap(),
        )
        .unwrap();
        let fewer = steps.iter().find(|s| s.name == "fewer_qps").unwrap();
        assert!(
            !fewer.analysis.reason.contains("QP-context"),
            "{name}: {}",
            fewer.analysis.reason
        );
    }
}
