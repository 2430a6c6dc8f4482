//! TIMELY, DCTCP and Swift in the fabric: several long flows share one
//! 100 Gb/s bottleneck (a 4:1 incast on one switch) and each controller
//! shapes the queue the way its design says it should; every flow finishes
//! with every algorithm.

use roce_sim::scenario::Scenario;
use roce_sim::{Report, Simulator};
use std::path::Path;

const SENDERS: usize = 4;
const SIZE: u64 = 4_000_000;

/// The 4:1 incast with `cc` as its `[cc]` table and `ecn` as its marking.
fn run(cc: &str, ecn: &str, extra_transport: &str) -> Report {
    run_sized(cc, ecn, extra_transport, SIZE)
}

fn run_sized(cc: &str, ecn: &str, extra_transport: &str, size: u64) -> Report {
    let src = format!(
        r#"
seed = 1
stop_us = 100000
[transport]
mtu = 1024
data_priority = 3
control_priority = 6
{extra_transport}
[switch]
buffer_kb = 8192
pfc = "dynamic"
alpha = 0.125
{ecn}
[cc]
{cc}
[topology]
kind = "star"
hosts = {hosts}
host_gbps = 100
link_delay_ns = 1000
[[workload]]
kind = "incast"
dst = 0
size = {size}
start_us = 0
[output]
sample_us = 1
"#,
        hosts = SENDERS + 1
    );
    let sc = Scenario::parse(&src, "cc_family.toml", Path::new("."), None).unwrap();
    let mut sim = Simulator::new(sc.cfg, sc.topo, &sc.flows).unwrap();
    sim.run().expect("the run finishes every flow");
    sim.report()
}

fn complete(r: &Report) {
    assert_eq!(r.flows.len(), SENDERS);
    assert!(r.flows.iter().all(|f| f.ok), "every flow completes");
    assert_eq!(r.counters.dropped_pkts, 0);
}

/// Queue samples (bytes) toward the receiver between `from_us` and the
/// first flow's completion (while all flows compete).
fn queue_samples(r: &Report, from_us: u64) -> Vec<u64> {
    let dst = r.host_nodes[0];
    let port = r.ports.iter().find(|p| p.peer == dst).unwrap();
    let end = r.flows.iter().filter_map(|f| f.finish).min().unwrap();
    r.queues
        .iter()
        .filter(|q| q.node == port.node && q.port == port.port)
        .filter(|q| q.time >= from_us * 1_000_000 && q.time < end)
        .map(|q| q.bytes)
        .collect()
}

fn mean(v: &[u64]) -> f64 {
    v.iter().sum::<u64>() as f64 / v.len().max(1) as f64
}

/// Completion times of the equal flows that started together: max / min.
fn fct_spread(r: &Report) -> f64 {
    let f: Vec<u64> = r.flows.iter().filter_map(|f| f.finish).collect();
    *f.iter().max().unwrap() as f64 / *f.iter().min().unwrap() as f64
}

const NO_ECN: &str = "";
/// DCTCP's marking: every packet above K = 100 KB (Kmin = Kmax, Pmax = 1).
const STEP_K100: &str = "[switch.ecn]\nkmin_kb = 100\nkmax_kb = 100\npmax = 1.0";

/// The incast's base RTT: two 1 µs links each way, plus a 1 KB frame's
/// and an ACK's serialization at 100 Gb/s (about 0.1 µs each).
const BASE_RTT_NS: f64 = 4_000.0 + 200.0;
/// Bytes per ns of the 100 Gb/s bottleneck.
const LINE_B_PER_NS: f64 = 12.5;

#[test]
fn every_flow_finishes_with_every_algorithm() {
    for (cc, ecn, tr) in [
        ("algorithm = \"none\"", NO_ECN, ""),
        ("algorithm = \"dcqcn\"", STEP_K100, ""),
        ("algorithm = \"dcqcn\"\npreset = \"paper\"", STEP_K100, ""),
        (
            "algorithm = \"dcqcn\"\npreset = \"hpcc-ns3\"",
            STEP_K100,
            "",
        ),
        // ConnectX's byte counter (`rpg_byte_reset` 32767 B) raises the
        // rate every few microseconds at 100 Gb/s.
        (
            "algorithm = \"dcqcn\"\npreset = \"connectx\"",
            STEP_K100,
            "",
        ),
        (
            "algorithm = \"dcqcn\"\npreset = \"connectx\"\nrpg_byte_reset = 0",
            STEP_K100,
            "",
        ),
        ("algorithm = \"hpcc\"", NO_ECN, "ack_every = 1"),
        ("algorithm = \"hpcc-pint\"", NO_ECN, "ack_every = 1"),
        (
            "algorithm = \"hpcc-pint\"\npint_log_base = 1.01\npint_prob = 0.25",
            NO_ECN,
            "ack_every = 1",
        ),
        ("algorithm = \"timely\"", NO_ECN, "ack_every = 1"),
        (
            "algorithm = \"timely\"\npreset = \"hpcc-ns3\"",
            NO_ECN,
            "ack_every = 1",
        ),
        ("algorithm = \"dctcp\"", STEP_K100, "ack_every = 1"),
        (
            "algorithm = \"dctcp\"\nvariant = \"window\"",
            STEP_K100,
            "ack_every = 1",
        ),
        ("algorithm = \"swift\"", NO_ECN, "ack_every = 1"),
    ] {
        let r = run_sized(cc, ecn, tr, 1_000_000);
        complete(&r);
        if !cc.contains("hpcc") {
            // Equal flows started together share the bottleneck equally
            // (HPCC's first-RTT window race, and HPCC-PINT's, leaves it
            // ~25 % apart here).
            assert!(fct_spread(&r) < 1.1, "{cc}: spread {}", fct_spread(&r));
        }
    }
}

#[test]
fn dctcp_holds_the_queue_around_k() {
    // DCTCP's steady state (Alizadeh et al. §3.3): the queue oscillates
    // around the marking threshold K with an amplitude of a few packets per
    // flow; without control the incast fills the buffer up to PFC.
    const K: f64 = 100.0 * 1024.0;
    let none = mean(&queue_samples(
        &run("algorithm = \"none\"", NO_ECN, ""),
        100,
    ));
    assert!(none > 10.0 * K, "no control: {none:.0} B");
    for cc in [
        "algorithm = \"dctcp\"",
        "algorithm = \"dctcp\"\nvariant = \"window\"",
    ] {
        let r = run(cc, STEP_K100, "ack_every = 1");
        complete(&r);
        assert!(r.counters.ecn_marks > 0);
        let q = mean(&queue_samples(&r, 100));
        assert!(
            q > 0.5 * K && q < 1.5 * K,
            "{cc}: mean queue {q:.0} B vs K = {K} B"
        );
        assert!(fct_spread(&r) < 1.05, "{cc}: {}", fct_spread(&r));
    }
}

#[test]
fn swift_holds_the_delay_at_its_target() {
    // With flow scaling and hop scaling off, Swift's target is the base
    // target; at equilibrium the RTT sits there, so the bottleneck queue
    // holds (target − base RTT) of queueing delay.
    for target_us in [8.0, 12.0] {
        let r = run(
            &format!(
                "algorithm = \"swift\"\nbase_target_us = {target_us}\nhop_scale_us = 0\nfs_range_us = 0.001"
            ),
            NO_ECN,
            "ack_every = 1",
        );
        complete(&r);
        let delay_ns = mean(&queue_samples(&r, 100)) / LINE_B_PER_NS;
        let want = target_us * 1e3 - BASE_RTT_NS;
        assert!(
            (delay_ns - want).abs() < 1_000.0,
            "target {target_us} µs: queueing {delay_ns:.0} ns, expected {want:.0} ns"
        );
        assert!(fct_spread(&r) < 1.05);
    }
}

#[test]
fn timely_reacts_to_the_rtt_gradient() {
    // T_high beyond any RTT here: every decrease comes from the gradient
    // (or nothing does). Against the same controller with T_low above every
    // RTT (which only ever increases, i.e. no control), the gradient alone
    // drains the standing queue of the incast.
    let grad = run(
        "algorithm = \"timely\"\nt_high_us = 5000",
        NO_ECN,
        "ack_every = 1",
    );
    let blind = run(
        "algorithm = \"timely\"\nt_low_us = 4000\nt_high_us = 5000",
        NO_ECN,
        "ack_every = 1",
    );
    complete(&grad);
    complete(&blind);
    let (qg, qb) = (
        mean(&queue_samples(&grad, 100)),
        mean(&queue_samples(&blind, 100)),
    );
    assert!(qg < 0.7 * qb, "gradient {qg:.0} B vs blind {qb:.0} B");
    assert!(fct_spread(&grad) < 1.05);
}

/// HPCC-PINT steers the incast's senders from the one code per packet
/// the switch raises: after the first round trips the bottleneck's queue
/// stays near empty, as HPCC's does from its full telemetry, where
/// senders without congestion control fill it (and PFC holds them).
/// Sampling a quarter of the ACKs still holds it.
#[test]
fn hpcc_pint_keeps_the_bottleneck_queue_near_empty() {
    let none = run("algorithm = \"none\"", NO_ECN, "ack_every = 1");
    let hpcc = run("algorithm = \"hpcc\"", NO_ECN, "ack_every = 1");
    complete(&none);
    complete(&hpcc);
    let q_none = mean(&queue_samples(&none, 50));
    let q_hpcc = mean(&queue_samples(&hpcc, 50));
    for cc in [
        "algorithm = \"hpcc-pint\"",
        "algorithm = \"hpcc-pint\"\npint_prob = 0.25",
    ] {
        let pint = run(cc, NO_ECN, "ack_every = 1");
        complete(&pint);
        let q = mean(&queue_samples(&pint, 50));
        assert!(
            q < 0.1 * q_none && q < 4.0 * q_hpcc.max(1000.0),
            "{cc}: mean queue {q:.0} B against {q_none:.0} B without control and {q_hpcc:.0} B with HPCC"
        );
    }
}

/// Deterministic with each new controller: same seed, same FCTs.
#[test]
fn same_seed_same_result() {
    for (cc, ecn) in [
        ("algorithm = \"timely\"", NO_ECN),
        ("algorithm = \"dctcp\"", STEP_K100),
        ("algorithm = \"swift\"", NO_ECN),
        ("algorithm = \"hpcc-pint\"\npint_prob = 0.5", NO_ECN),
    ] {
        let fct = |r: &Report| -> Vec<Option<u64>> { r.flows.iter().map(|f| f.finish).collect() };
        let a = run_sized(cc, ecn, "ack_every = 1", 500_000);
        let b = run_sized(cc, ecn, "ack_every = 1", 500_000);
        assert_eq!(fct(&a), fct(&b), "{cc}");
        assert_eq!(a.events, b.events);
    }
}
