//! The switch/NIC configuration surfaces of a scenario, run: DSCP →
//! priority classification, which priorities are lossless, ECN thresholds
//! per priority, and the CNPs' DSCP. Each test flips one key and checks the
//! fabric behaves differently for the reason the key names.

use roce_sim::scenario::Scenario;
use roce_sim::{Report, Simulator};
use std::path::Path;

/// An 8:1 incast into a small shared buffer: enough to overflow it without
/// PFC and to make PFC pause with it.
fn incast(transport: &str, switch: &str) -> String {
    format!(
        r#"
stop_us = 3000
[transport]
mtu = 1024
{transport}
[switch]
buffer_kb = 512
{switch}
[topology]
kind = "star"
hosts = 9
host_gbps = 100
link_delay_ns = 1000
[[workload]]
kind = "incast"
dst = 0
senders = [1, 2, 3, 4, 5, 6, 7, 8]
size = 200000
"#
    )
}

fn run(src: &str) -> (Report, [u64; 8], [u64; 8]) {
    let base = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scenarios");
    let sc = Scenario::parse(src, "t.toml", &base, None).unwrap();
    let mut sim = Simulator::new(sc.cfg, sc.topo, &sc.flows).unwrap();
    sim.run().unwrap();
    let (by_prio, cnps) = (sim.injected_by_prio(), sim.cnps_by_prio());
    (sim.report(), by_prio, cnps)
}

fn xoff_sent(r: &Report, prio: usize) -> u64 {
    r.ports.iter().map(|p| p.xoff_tx[prio]).sum()
}

#[test]
fn dscp_map_moves_data_to_the_lossless_priority_or_off_it() {
    // Data marked DSCP 26 (AF31); the map puts it on priority 5.
    let t = "data_dscp = 26";
    // Priority 5 lossless: the incast pauses on 5 and nothing is lost.
    let (r, by_prio, _) = run(&incast(
        t,
        "dscp_to_prio = { 26 = 5 }\nlossless_priorities = [5]",
    ));
    assert!(by_prio[5] > 1000, "{by_prio:?}");
    assert_eq!(by_prio[3], 0, "{by_prio:?}");
    assert_eq!(r.counters.dropped_pkts, 0);
    assert!(xoff_sent(&r, 5) > 0);
    assert_eq!(xoff_sent(&r, 3), 0);
    // Only priority 3 lossless: the same traffic on 5 is lossy, so the full
    // buffer drops it and no one is paused.
    let (r, by_prio, _) = run(&incast(
        t,
        "dscp_to_prio = { 26 = 5 }\nlossless_priorities = [3]",
    ));
    assert!(by_prio[5] > 1000, "{by_prio:?}");
    assert!(r.counters.dropped_pkts > 0);
    assert_eq!(r.counters.pfc_xoff_tx, 0);
    // Without the map DSCP 26 is priority 26 / 8 = 3, which is lossless.
    let (r, by_prio, _) = run(&incast(t, "lossless_priorities = [3]"));
    assert!(by_prio[3] > 1000, "{by_prio:?}");
    assert_eq!(r.counters.dropped_pkts, 0);
    assert!(xoff_sent(&r, 3) > 0);
}

#[test]
fn ecn_thresholds_apply_per_priority_with_the_global_as_fallback() {
    let dcqcn = "[cc]\nalgorithm = \"dcqcn\"";
    // A global curve that never marks at this buffer size...
    let never = "[switch.ecn]\nkmin_kb = 100000\nkmax_kb = 200000\npmax = 0.1";
    let (r, ..) = run(&format!("{}\n{dcqcn}", incast("", never)));
    assert_eq!(r.counters.ecn_marks, 0);
    // ... overridden on the data priority (3): marks, and CNPs follow.
    let low = "[switch.ecn_priority.3]\nkmin_kb = 5\nkmax_kb = 50\npmax = 0.5";
    let (r, ..) = run(&format!("{}\n{low}\n{dcqcn}", incast("", never)));
    assert!(r.counters.ecn_marks > 0);
    assert!(r.counters.cnps_rx > 0);
    // The same override on a priority that carries nothing changes nothing.
    let other = "[switch.ecn_priority.4]\nkmin_kb = 5\nkmax_kb = 50\npmax = 0.5";
    let (r, ..) = run(&format!("{}\n{other}\n{dcqcn}", incast("", never)));
    assert_eq!(r.counters.ecn_marks, 0);
    // A per-priority curve alone (no [switch.ecn]) marks only its queue.
    let (r, ..) = run(&format!("{}\n{dcqcn}", incast("", low)));
    assert!(r.counters.ecn_marks > 0);
}

#[test]
fn cnps_carry_the_configured_dscp_and_priority() {
    let marks = "[switch.ecn]\nkmin_kb = 5\nkmax_kb = 50\npmax = 0.5";
    let cc = "[cc]\nalgorithm = \"dcqcn\"";
    // Default: CNPs ride the control priority (6) like ACKs.
    let (r, _, cnps) = run(&format!("{}\n{cc}", incast("", marks)));
    assert!(r.counters.cnps_tx > 0);
    assert_eq!(cnps[6], r.counters.cnps_tx, "{cnps:?}");
    // cnp_dscp = 40: classified as DSCP 40 → priority 5.
    let (r, _, cnps) = run(&format!("{}\n{cc}", incast("cnp_dscp = 40", marks)));
    assert!(r.counters.cnps_tx > 0);
    assert_eq!(cnps[5], r.counters.cnps_tx, "{cnps:?}");
    assert_eq!(cnps[6], 0);
    // And through the switch's map: DSCP 40 → priority 2.
    let (r, _, cnps) = run(&format!(
        "{}\n{cc}",
        incast(
            "cnp_dscp = 40",
            &format!("dscp_to_prio = {{ 40 = 2 }}\n{marks}")
        )
    ));
    assert!(r.counters.cnps_tx > 0);
    assert_eq!(cnps[2], r.counters.cnps_tx, "{cnps:?}");
}

#[test]
fn per_qp_rate_limit_caps_each_sender() {
    // One 1 MB flow on an idle 100G link: without a limit it finishes near
    // line rate; capped at 10 Gb/s it takes at least 1 MB × 8 / 10 Gb/s.
    let one = |t: &str| {
        format!(
            "[transport]\n{t}\n[topology]\nkind = \"star\"\nhosts = 2\nhost_gbps = 100\n[[workload]]\nkind = \"flows\"\nflows = [{{ src = 1, dst = 0, size = 1000000 }}]\n"
        )
    };
    let fct = |src: &str| {
        let (r, ..) = run(src);
        let f = r.flows[0];
        f.finish.unwrap() - f.start
    };
    let free = fct(&one(""));
    let capped = fct(&one("qp_rate_limit_gbps = 10"));
    let ten_g = 1_000_000 * 8 * roce_sim::PS_PER_S / 10_000_000_000;
    assert!(free < ten_g / 5, "free {free} ps");
    assert!(capped >= ten_g, "capped {capped} ps < {ten_g} ps");
    assert!(capped < ten_g * 12 / 10, "capped {capped} ps");
}
