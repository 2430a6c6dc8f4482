//! IRN on a lossy fabric (Mittal et al., SIGCOMM 2018, §5: RoCE without
//! PFC). An 8:1 incast into a switch with a small buffer and `pfc = "off"`
//! drops packets; with IRN every flow finishes, and it resends fewer
//! packets than go-back-N on the same fabric and seed.

use roce_sim::Simulator;
use roce_sim::metrics::Report;
use roce_sim::scenario::Scenario;
use std::path::Path;

fn lossy_incast(recovery: &str) -> String {
    format!(
        r#"
seed = 3
[transport]
mtu = 1024
recovery = "{recovery}"
timeout = 8
[switch]
buffer_kb = 128
pfc = "off"
[topology]
kind = "star"
hosts = 9
host_gbps = 100
link_delay_ns = 1000
[[workload]]
kind = "incast"
dst = 0
senders = [1, 2, 3, 4, 5, 6, 7, 8]
size = 400000
start_us = 0
"#
    )
}

fn run(src: &str) -> Report {
    let base = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scenarios");
    let sc = Scenario::parse(src, "t.toml", &base, None).unwrap();
    let mut sim = Simulator::new(sc.cfg, sc.topo, &sc.flows).unwrap();
    let _ = sim.run();
    sim.report()
}

#[test]
fn irn_finishes_every_flow_on_a_lossy_fabric() {
    let irn = run(&lossy_incast("irn"));
    assert!(
        irn.counters.dropped_pkts > 0,
        "the fabric must drop for this test to mean anything"
    );
    assert!(
        irn.flows.iter().all(|f| f.ok && f.finish.is_some()),
        "IRN: every flow finishes: {:?}",
        irn.flows
    );
    let gbn = run(&lossy_incast("gbn"));
    eprintln!(
        "lossy 8:1 incast: go-back-N dropped {} resent {} (failed flows {}); IRN dropped {} resent {}",
        gbn.counters.dropped_pkts,
        gbn.counters.retransmits,
        gbn.counters.failed_flows,
        irn.counters.dropped_pkts,
        irn.counters.retransmits
    );
    assert!(
        irn.counters.retransmits < gbn.counters.retransmits,
        "IRN resent {} packets, go-back-N {}",
        irn.counters.retransmits,
        gbn.counters.retransmits
    );
}

#[test]
fn unknown_recovery_is_an_error_naming_the_field() {
    let base = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scenarios");
    let e = Scenario::parse(&lossy_incast("sack"), "t.toml", &base, None).unwrap_err();
    assert_eq!(e.field, "transport.recovery", "{e}");
}

/// With ACKs requested every 64 packets and a BDP cap of 51, an IRN sender
/// must still ask for an ACK before it reaches its cap: otherwise, on a
/// fabric that loses nothing, it stops at the cap until a timeout fires.
#[test]
fn irn_asks_for_acks_within_its_bdp_cap() {
    let src = r#"
seed = 1
[transport]
mtu = 1024
recovery = "irn"
bdp_pkts = 51
ack_every = 64
[topology]
kind = "star"
hosts = 3
host_gbps = 100
link_delay_ns = 1000
[[workload]]
kind = "flows"
flows = [{ src = 1, dst = 0, size = 1000000 }, { src = 2, dst = 0, size = 1000000 }]
"#;
    let r = run(src);
    assert_eq!(r.counters.dropped_pkts, 0, "a lossless run");
    assert!(r.flows.iter().all(|f| f.ok), "{:?}", r.flows);
    assert_eq!(
        (r.counters.timeouts, r.counters.retransmits),
        (0, 0),
        "no timeout and nothing resent where nothing was lost"
    );
}
