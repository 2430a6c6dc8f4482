//! The shipped scenarios, run: determinism and the PFC pathologies.

use roce_sim::Simulator;
use roce_sim::scenario::Scenario;
use std::path::{Path, PathBuf};

fn scenario(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../scenarios")
        .join(name)
}

fn fct_csv(src: &str, seed: Option<u64>) -> String {
    let base = scenario("");
    let sc = Scenario::parse(src, "t.toml", &base, seed).unwrap();
    let mut sim = Simulator::new(sc.cfg, sc.topo, &sc.flows).unwrap();
    sim.run().unwrap();
    let mut out = Vec::new();
    sim.report().write_fct_csv(&mut out).unwrap();
    String::from_utf8(out).unwrap()
}

const SMALL_POISSON: &str = r#"
[switch]
buffer_kb = 1024
[switch.ecn]
kmin_kb = 20
kmax_kb = 80
pmax = 0.2
[topology]
kind = "leaf_spine"
leaves = 2
spines = 2
hosts_per_leaf = 4
oversubscription = 2.0
[[workload]]
kind = "poisson"
cdf = "workloads/FbHdp_distribution.txt"
load = 0.5
duration_us = 200
"#;

#[test]
fn same_seed_same_fct_csv() {
    let a = fct_csv(SMALL_POISSON, Some(7));
    let b = fct_csv(SMALL_POISSON, Some(7));
    assert!(a.lines().count() > 20, "{a}");
    assert_eq!(a, b);
    let c = fct_csv(SMALL_POISSON, Some(8));
    assert_ne!(a, c);
}

#[test]
fn pfc_head_of_line_blocking_and_spreading() {
    let sc = Scenario::load(&scenario("pfc_hol_blocking.toml"), None).unwrap();
    let victim_host = sc
        .topo
        .hosts
        .iter()
        .position(|&n| sc.topo.nodes[n].name == "v")
        .unwrap() as u32;
    let victim_node = sc.topo.hosts[victim_host as usize] as u32;
    let mut sim = Simulator::new(sc.cfg, sc.topo, &sc.flows).unwrap();
    sim.run().unwrap();
    let r = sim.report();
    assert_eq!(r.counters.dropped_pkts, 0);
    let victim = r.flows.iter().find(|f| f.src == victim_host).unwrap();
    // The victim's destination is idle, yet it is held behind the incast.
    assert!(
        victim.slowdown().unwrap() > 3.0,
        "victim slowdown {:?}",
        victim.slowdown()
    );
    // Congestion spreading: the victim's own NIC was paused.
    let v_port = r.ports.iter().find(|p| p.node == victim_node).unwrap();
    assert!(v_port.xoff_rx[3] > 0, "{v_port:?}");
}

#[test]
fn incast_scenario_pauses_and_stays_lossless() {
    let sc = Scenario::load(&scenario("incast.toml"), None).unwrap();
    let mut sim = Simulator::new(sc.cfg, sc.topo, &sc.flows).unwrap();
    sim.run().unwrap();
    let r = sim.report();
    let c = &r.counters;
    assert_eq!(c.dropped_pkts, 0);
    assert!(c.pfc_xoff_tx > 0);
    assert!(r.flows.iter().all(|f| f.ok));
    assert_eq!(
        c.injected_bytes,
        c.delivered_bytes + c.dropped_bytes + c.live_bytes
    );
    assert!(!r.pfc_frames.is_empty(), "capture_pfc keeps the frames");
    assert_eq!(r.pfc_frames[0].1.len(), 60);
}

#[test]
fn cyclic_buffer_dependency_deadlock_is_detected() {
    let sc = Scenario::load(&scenario("pfc_deadlock_ring.toml"), None).unwrap();
    let mut sim = Simulator::new(sc.cfg, sc.topo, &sc.flows).unwrap();
    sim.run().unwrap();
    let r = sim.report();
    let d = r.counters.deadlock.as_deref().expect("deadlock reported");
    // The report names the cycle: every ring link is paused and holds bytes.
    for hop in ["s0:", "s1:", "s2:", "s3:", "s4:"] {
        assert!(d.contains(hop), "{d}");
    }
    assert!(r.flows.iter().all(|f| f.finish.is_none()));
    assert_eq!(r.counters.dropped_pkts, 0);
}
