//! Congestion control in the fabric: DCQCN and HPCC against no control in
//! the same 8:1 incast (`scenarios/incast*.toml`), and determinism with
//! each controller on.

use roce_sim::scenario::Scenario;
use roce_sim::{Report, Simulator};
use std::path::{Path, PathBuf};

fn scenario(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../scenarios")
        .join(name)
}

fn run(name: &str) -> Report {
    let sc = Scenario::load(&scenario(name), None).unwrap();
    let mut sim = Simulator::new(sc.cfg, sc.topo, &sc.flows).unwrap();
    sim.run().unwrap();
    sim.report()
}

fn fct_csv(r: &Report) -> String {
    let mut out = Vec::new();
    r.write_fct_csv(&mut out).unwrap();
    String::from_utf8(out).unwrap()
}

/// Peak bytes queued on the switch port toward the incast's receiver.
fn bottleneck_peak(r: &Report) -> u64 {
    let dst = r.host_nodes[0];
    r.ports
        .iter()
        .filter(|p| p.peer == dst)
        .map(|p| p.max_qbytes.iter().copied().max().unwrap_or(0))
        .max()
        .unwrap()
}

/// Mean bytes queued toward the receiver over the samples taken while
/// flows ran (queues.csv, every `sample_us`), after the first `skip_us`.
fn bottleneck_mean(r: &Report, skip_us: u64) -> f64 {
    let dst = r.host_nodes[0];
    let end = r.flows.iter().filter_map(|f| f.finish).max().unwrap();
    let from = skip_us * 1_000_000;
    let port = r.ports.iter().find(|p| p.peer == dst).unwrap();
    let bytes: u64 = r
        .queues
        .iter()
        .filter(|q| q.node == port.node && q.port == port.port && q.time >= from)
        .map(|q| q.bytes)
        .sum();
    let sample = 1_000_000; // sample_us = 1 in the incast scenarios
    bytes as f64 / ((end - from) / sample) as f64
}

fn lossless_and_complete(r: &Report) {
    let c = &r.counters;
    assert_eq!(c.dropped_pkts, 0);
    assert!(r.flows.iter().all(|f| f.ok), "every flow completes");
    assert_eq!(
        c.injected_bytes,
        c.delivered_bytes + c.dropped_bytes + c.live_bytes
    );
}

#[test]
fn dcqcn_cuts_rates_and_pauses_less_than_no_cc() {
    let none = run("incast.toml");
    let dcqcn = run("incast_dcqcn.toml");
    lossless_and_complete(&none);
    lossless_and_complete(&dcqcn);
    let (n, d) = (&none.counters, &dcqcn.counters);
    assert!(d.ecn_marks > 0 && d.cnps_tx > 0, "{d:?}");
    assert_eq!(d.cnps_rx, d.cnps_tx, "every CNP reaches its sender");
    assert!(
        d.pfc_xoff_tx < n.pfc_xoff_tx,
        "DCQCN {} pause frames vs {} without CC",
        d.pfc_xoff_tx,
        n.pfc_xoff_tx
    );
    assert!(
        bottleneck_peak(&dcqcn) < bottleneck_peak(&none),
        "{} vs {}",
        bottleneck_peak(&dcqcn),
        bottleneck_peak(&none)
    );
}

/// HPCC from per-hop INT, and HPCC-PINT from one code per packet.
#[test]
fn hpcc_keeps_the_bottleneck_queue_far_smaller_than_no_cc() {
    let none = run("incast.toml");
    for name in ["incast_hpcc.toml", "incast_pint.toml"] {
        hpcc_against_no_cc(name, &none);
    }
}

fn hpcc_against_no_cc(name: &str, none: &Report) {
    let hpcc = run(name);
    lossless_and_complete(&hpcc);
    assert_eq!(
        hpcc.counters.int_hops > 0,
        name == "incast_hpcc.toml",
        "{name}: switches stamped INT (HPCC-PINT stamps no hops)"
    );
    // The first RTT's windows (8 x BDP) arrive before any feedback can;
    // after that HPCC drains the queue and holds it near empty.
    let (qn, qh) = (bottleneck_mean(none, 20), bottleneck_mean(&hpcc, 20));
    assert!(
        qh * 10.0 < qn,
        "{name}: mean queue {qh:.0} B vs {qn:.0} B without CC"
    );
    assert!(hpcc.counters.pfc_xoff_tx < none.counters.pfc_xoff_tx);
    // The link stays busy: the incast finishes no later than 1.5x the
    // no-CC run (which keeps the bottleneck saturated through PFC).
    let last = |r: &Report| r.flows.iter().filter_map(|f| f.finish).max().unwrap();
    assert!(
        last(&hpcc) * 2 < last(none) * 3,
        "{name}: {} vs {}",
        last(&hpcc),
        last(none)
    );
}

#[test]
fn same_seed_same_fct_csv_with_cc() {
    for name in ["incast_dcqcn.toml", "incast_hpcc.toml", "incast_pint.toml"] {
        let a = fct_csv(&run(name));
        let b = fct_csv(&run(name));
        assert_eq!(a, b, "{name}");
    }
}

/// HPCC reacts to the hops its *data* crosses: the receiver echoes the
/// data's INT in the ACK, and switches stamp data packets only (HPCC §3.2;
/// the ns-3 reference stamps UDP data alone). Host 0 sends 2 MB to host 1
/// over an idle port while hosts 2 and 3 fill the port toward host 0, the
/// one its ACKs cross, in the same queue as the data (as ns-3's switches
/// queue them). When ACKs stamped their own way back, the flow read that
/// port's queue as its own and slowed down with the incast.
#[test]
fn hpcc_ignores_congestion_on_the_ack_path() {
    let src = r#"
name = "hpcc_ack_path"
seed = 1
[transport]
mtu = 1024
data_priority = 3
control_priority = 3
ack_every = 1
[cc]
algorithm = "hpcc"
[topology]
kind = "star"
hosts = 8
host_gbps = 100
link_delay_ns = 1000
[[workload]]
kind = "flows"
flows = [
  { src = 0, dst = 1, size = 2000000 },
  { src = 2, dst = 0, size = 1000000, start_us = 5 },
  { src = 3, dst = 0, size = 1000000, start_us = 25 },
  { src = 4, dst = 0, size = 1000000, start_us = 45 },
  { src = 5, dst = 0, size = 1000000, start_us = 65 },
  { src = 6, dst = 0, size = 1000000, start_us = 85 },
  { src = 7, dst = 0, size = 1000000, start_us = 105 },
]
"#;
    let base = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scenarios");
    let sc = Scenario::parse(src, "hpcc_ack_path.toml", &base, None).unwrap();
    let mut sim = Simulator::new(sc.cfg, sc.topo, &sc.flows).unwrap();
    sim.run().unwrap();
    let r = sim.report();
    lossless_and_complete(&r);
    let f = r.flows.iter().find(|f| f.src == 0).unwrap();
    let slowdown = f.fct().unwrap() as f64 / f.ideal as f64;
    assert!(slowdown < 1.25, "0 -> 1 slowdown {slowdown:.2}");
}

/// HPCC reading INT as the HPCC ns-3 simulator's record holds it
/// (`SimConfig::ns3_int`): the stamps are applied at every hop. In ns-3's
/// units (`INT_MULTI 1`: 128-byte counters, 80-byte queues) the 8:1
/// incast still completes and keeps its queue short, but not to the same
/// FCTs as exact counters; in units so coarse that every queue reads
/// empty and every counter still, HPCC is blind: the senders stay at line
/// rate, held back only by their windows, and the queue stands.
#[test]
fn hpcc_reads_int_in_ns3_units() {
    use roce_sim::packet::Ns3Int;
    let with = |int: Option<Ns3Int>| {
        let sc = Scenario::load(&scenario("incast_hpcc.toml"), None).unwrap();
        let mut cfg = sc.cfg;
        cfg.ns3_int = int;
        let mut sim = Simulator::new(cfg, sc.topo, &sc.flows).unwrap();
        sim.run().unwrap();
        sim.report()
    };
    let exact = with(None);
    let units = with(Some(Ns3Int { multi: 1 }));
    let blind = with(Some(Ns3Int { multi: 1 << 24 }));
    for r in [&exact, &units, &blind] {
        lossless_and_complete(r);
    }
    assert_ne!(fct_csv(&exact), fct_csv(&units), "the units move the FCTs");
    // Mean queue toward the receiver after the first 20 µs (the start's
    // burst, one window from each sender, is the same in every run).
    let [qe, qu, qb] = [&exact, &units, &blind].map(|r| bottleneck_mean(r, 20));
    assert!(
        qu < 2.0 * qe && qe < 2.0 * qu,
        "exact {qe:.0}, units {qu:.0}"
    );
    // Blind, the senders keep to line rate and their windows alone: a
    // standing queue of the windows' excess.
    assert!(qb > 5.0 * qe, "blind {qb:.0}, exact {qe:.0}");
}
