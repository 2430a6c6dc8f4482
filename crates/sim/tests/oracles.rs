//! Analytic oracles: the simulator against what must be true.

use roce_sim::event::{PS_PER_US, Ps};
use roce_sim::sim::{SimConfig, Simulator};
use roce_sim::topology::{Topology, gbps};
use roce_sim::workload::{FlowOp, FlowSpec, incast};

fn flow(src: u32, dst: u32, size: u64, start: Ps) -> FlowSpec {
    FlowSpec {
        src,
        dst,
        size,
        start,
        op: FlowOp::Write,
    }
}

#[test]
fn single_flow_fct_equals_ideal() {
    for (size, topo) in [
        (
            1_000_000u64,
            Topology::star(2, gbps(100), PS_PER_US).unwrap(),
        ),
        (
            100_000,
            Topology::fat_tree(2, 2, 2, 2, 2, gbps(100), gbps(400), PS_PER_US).unwrap(),
        ),
        (777, Topology::star(2, gbps(25), 2 * PS_PER_US).unwrap()),
    ] {
        let n = topo.n_hosts() as u32;
        let mut sim =
            Simulator::new(SimConfig::default(), topo, &[flow(0, n - 1, size, 0)]).unwrap();
        sim.run().unwrap();
        let r = sim.report();
        let f = r.flows[0];
        assert!(f.ok, "{:?}", r.counters);
        let fct = f.fct().unwrap() as f64;
        let err = (fct - f.ideal as f64).abs() / f.ideal as f64;
        assert!(
            err < 0.01,
            "size {size}: fct {fct} ideal {} err {err}",
            f.ideal
        );
    }
}

#[test]
fn incast_with_pfc_is_lossless_and_saturates() {
    let n = 8u32;
    let topo = Topology::star(n as usize + 1, gbps(100), PS_PER_US).unwrap();
    let senders: Vec<u32> = (1..=n).collect();
    let size = 2_000_000;
    let flows = incast(&senders, 0, size, 0);
    let mut cfg = SimConfig::default();
    cfg.buffer.size_bytes = 2 << 20;
    let mut sim = Simulator::new(cfg, topo, &flows).unwrap();
    sim.run().unwrap();
    let r = sim.report();
    let c = &r.counters;
    eprintln!("{c:?}");
    assert_eq!(c.dropped_pkts, 0, "PFC must make the fabric lossless");
    assert!(c.pfc_xoff_tx > 0, "the incast must trigger PFC");
    assert!(r.flows.iter().all(|f| f.ok));
    assert_eq!(
        c.injected_bytes,
        c.delivered_bytes + c.dropped_bytes + c.live_bytes
    );
    // Goodput bound: payload / wire bytes per MTU packet at 100 Gb/s.
    let last = r.flows.iter().filter_map(|f| f.finish).max().unwrap();
    let goodput = (u64::from(n) * size) as f64 * 8.0 / (last as f64 / 1e12);
    let bound = 100e9 * 1024.0 / (1024.0 + 12.0 + 42.0 + 8.0 + 20.0);
    assert!(
        goodput > 0.95 * bound && goodput <= bound * 1.001,
        "{goodput} vs {bound}"
    );
}
