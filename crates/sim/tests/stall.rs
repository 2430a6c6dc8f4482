//! Flows that never finish (issue 12): the lost wake-up behind them, the
//! error a stalled run returns, and a property test that every flow of
//! random small fabrics and workloads finishes under every congestion
//! control the simulator offers.

use proptest::prelude::*;
use roce_sim::scenario::Scenario;
use roce_sim::{SimError, Simulator};
use std::path::Path;

fn parse(src: &str) -> Scenario {
    let base = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scenarios");
    Scenario::parse(src, "t.toml", &base, None).unwrap()
}

/// Runs `src` to the end: the run's outcome and, per flow, whether it ended
/// well.
fn run(src: &str) -> (Result<(), SimError>, Vec<bool>) {
    let sc = parse(src);
    let mut sim = Simulator::new(sc.cfg, sc.topo, &sc.flows).unwrap();
    let outcome = sim.run();
    (outcome, sim.report().flows.iter().map(|f| f.ok).collect())
}

/// Host 1 sends to host 0 and to host 2 while host 2 also sends to host 0:
/// the 2:1 incast at host 0 marks CE, so host 1's flow to it is paced by
/// DCQCN while the flow to host 2 keeps host 1's port busy. Before the fix,
/// the paced QP's next packet left from a port event (the end of the other
/// flow's frame), which moved its pacing deadline without re-arming the
/// host's timer; its DCQCN timers then ran late and stayed overdue, the
/// RNIC's earliest deadline lay in the past, and with no ACK due (fewer
/// than `ack_every` packets sent since the last) nothing woke the host
/// again: flow 0 ended `unfinished` with the event queue empty.
const PACED_BEHIND_A_BUSY_PORT: &str = r#"
[switch.ecn]
kmin_kb = 100
kmax_kb = 400
pmax = 0.2
[cc]
algorithm = "dcqcn"
[topology]
kind = "star"
hosts = 3
host_gbps = 100
link_delay_ns = 1000
[[workload]]
kind = "flows"
flows = [
  { src = 1, dst = 0, size = 1000000 },
  { src = 2, dst = 0, size = 1000000 },
  { src = 1, dst = 2, size = 1000000 },
]
"#;

#[test]
fn dcqcn_paced_qp_sharing_a_busy_port_finishes() {
    let (outcome, ok) = run(PACED_BEHIND_A_BUSY_PORT);
    assert_eq!(outcome, Ok(()));
    assert_eq!(ok, [true, true, true]);
}

/// HPCC's window on a lossy fabric: drops at the 40 Gb/s core make the
/// sender go back to its oldest unacknowledged packet. Before the fix the
/// lost bytes stayed counted in flight, so a window smaller than them
/// blocked the resend that would have acknowledged them; each timeout
/// rewound again to the same blocked state until the retries ran out and
/// the flow failed with RETRY_EXC_ERR (found by `every_flow_finishes`).
#[test]
fn hpcc_window_lets_a_go_back_n_resend_out() {
    let (outcome, ok) = run(r#"
[transport]
ack_every = 1
[switch]
buffer_kb = 1024
pfc = "off"
[switch.ecn]
kmin_kb = 10
kmax_kb = 40
pmax = 0.5
[cc]
algorithm = "hpcc"
[topology]
kind = "dumbbell"
left = 1
right = 1
core_gbps = 40
[[workload]]
kind = "flows"
flows = [
  { src = 0, dst = 1, size = 68061, start_us = 0 },
  { src = 0, dst = 1, size = 29577, start_us = 1 },
  { src = 0, dst = 1, size = 76479, start_us = 8 },
  { src = 0, dst = 1, size = 104041, start_us = 13 },
]
"#);
    assert_eq!(outcome, Ok(()));
    assert_eq!(ok, [true; 4]);
}

/// A run that really cannot finish: lossy switches with a tiny buffer drop
/// the incast's packets, and with `timeout = 0` (no retransmission timer,
/// IBA 9.7.6.1.3) a sender whose last packets were lost waits for an ACK
/// forever. The event queue empties; the run must say so, naming the
/// stalled QPs, rather than end with flows quietly `unfinished`.
#[test]
fn a_run_that_stalls_is_an_error_naming_the_stalled_qps() {
    let src = include_str!("data/stall_incast.toml");
    let (outcome, ok) = run(src);
    let Err(SimError::Stalled(stall)) = outcome else {
        panic!("expected a stall, got {outcome:?}");
    };
    let unfinished = ok.iter().filter(|ok| !**ok).count();
    assert!(unfinished > 0);
    assert_eq!(stall.unfinished, unfinished);
    assert_eq!(stall.flows, 4);
    let first = &stall.first[0];
    assert!(
        !ok[first.flow as usize],
        "the first one named is unfinished"
    );
    let sender = first.sender.as_ref().expect("the sender's QP is alive");
    // Waiting for the ACK of packets that were dropped, with no timer.
    assert_ne!(sender.una, sender.next_psn);
    assert_eq!(sender.rto_deadline, None);
    let msg = stall.to_string();
    assert!(msg.contains("the run stalled"), "{msg}");
    assert!(msg.contains(&format!("flow {}", first.flow)), "{msg}");
    assert!(msg.contains("una"), "{msg}");
}

/// With a stop time, a run cut short is not a stall.
#[test]
fn stopping_early_is_not_a_stall() {
    let src = format!("stop_us = 20\n{PACED_BEHIND_A_BUSY_PORT}");
    let (outcome, ok) = run(&src);
    assert_eq!(outcome, Ok(()));
    assert!(ok.iter().all(|ok| !ok));
}

fn fabric() -> impl Strategy<Value = (String, u32)> {
    prop_oneof![
        (2u32..6).prop_map(|n| (format!("kind = \"star\"\nhosts = {n}"), n)),
        (1u32..4, 1u32..4).prop_map(|(l, r)| (
            format!("kind = \"dumbbell\"\nleft = {l}\nright = {r}\ncore_gbps = 40"),
            l + r
        )),
        (2u32..4, 1u32..3, 2u32..4).prop_map(|(leaves, spines, per)| (
            format!(
                "kind = \"leaf_spine\"\nleaves = {leaves}\nspines = {spines}\n\
                 hosts_per_leaf = {per}\noversubscription = 2.0"
            ),
            leaves * per
        )),
        Just((
            "kind = \"fat_tree\"\npods = 2\ntors_per_pod = 2\naggs_per_pod = 2\n\
             hosts_per_tor = 2\ncores = 2\nfabric_gbps = 100"
                .to_string(),
            8
        )),
    ]
}

/// Flows as (src, dst, size, start µs) over `hosts` hosts, src ≠ dst.
fn flows(hosts: u32) -> impl Strategy<Value = Vec<(u32, u32, u64, u64)>> {
    prop::collection::vec((0..hosts, 1..hosts, 1u64..400_000, 0u64..30), 1..8).prop_map(move |v| {
        v.into_iter()
            .map(|(s, d, size, t)| (s, (s + d) % hosts, size, t))
            .collect()
    })
}

/// `flows` as the inline table list of a `kind = "flows"` workload.
fn toml_flows(flows: Vec<(u32, u32, u64, u64)>) -> String {
    let entries: Vec<String> = (flows.into_iter())
        .map(|(s, d, size, t)| format!("{{ src = {s}, dst = {d}, size = {size}, start_us = {t} }}"))
        .collect();
    entries.join(", ")
}

/// Every congestion control the simulator offers, with every preset and
/// variant: the `[cc]` table of each.
const CC: [&str; 13] = [
    "algorithm = \"none\"",
    "algorithm = \"dcqcn\"",
    "algorithm = \"dcqcn\"\npreset = \"paper\"",
    "algorithm = \"dcqcn\"\npreset = \"connectx\"",
    "algorithm = \"dcqcn\"\npreset = \"hpcc-ns3\"",
    "algorithm = \"hpcc\"",
    "algorithm = \"hpcc-pint\"",
    "algorithm = \"hpcc-pint\"\npint_prob = 0.25",
    "algorithm = \"timely\"",
    "algorithm = \"timely\"\npreset = \"hpcc-ns3\"",
    "algorithm = \"dctcp\"",
    "algorithm = \"dctcp\"\nvariant = \"window\"",
    "algorithm = \"swift\"",
];

/// The busy-port workload above under every controller, each with
/// per-packet ACKs and with one ACK request in 16 packets (the case the
/// lost wake-up needed): every flow finishes and the run ends cleanly.
#[test]
fn paced_qp_sharing_a_busy_port_finishes_under_every_algorithm() {
    for cc in CC {
        for ack_every in [1, 16] {
            let src = format!(
                "[transport]\nack_every = {ack_every}\n{}",
                PACED_BEHIND_A_BUSY_PORT.replace("algorithm = \"dcqcn\"", cc)
            );
            let (outcome, ok) = run(&src);
            assert_eq!(outcome, Ok(()), "{cc}, ack_every {ack_every}");
            assert_eq!(ok, [true, true, true], "{cc}, ack_every {ack_every}");
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]

    /// Every flow of a random small fabric and workload finishes, under
    /// every congestion control, with and without PFC, with marking
    /// thresholds low enough that the controllers act.
    #[test]
    fn every_flow_finishes(
        (topology, flows) in fabric()
            .prop_flat_map(|(topology, hosts)| (Just(topology), flows(hosts))),
        cc in 0usize..CC.len(),
        per_packet_acks in any::<bool>(),
        lossless in any::<bool>(),
        seed in 0u64..1000,
    ) {
        let src = format!(
            "seed = {seed}\n[transport]\nack_every = {ack}\n\
             [switch]\nbuffer_kb = 1024\npfc = \"{pfc}\"\n\
             [switch.ecn]\nkmin_kb = 10\nkmax_kb = 40\npmax = 0.5\n\
             [cc]\n{cc}\n[topology]\n{topology}\n\
             [[workload]]\nkind = \"flows\"\nflows = [{flows}]\n[output]\nsample_us = 0\n",
            ack = if per_packet_acks { 1 } else { 16 },
            pfc = if lossless { "dynamic" } else { "off" },
            cc = CC[cc],
            flows = toml_flows(flows),
        );
        let (outcome, ok) = run(&src);
        prop_assert_eq!(outcome, Ok(()), "{}", src);
        prop_assert!(ok.iter().all(|ok| *ok), "{:?}\n{}", ok, src);
    }
}

/// A fabric with two paths between every pair of switches' hosts, and one
/// of its switch-to-switch links (by the two switches' names) chosen by
/// `pick`.
fn redundant_fabric() -> impl Strategy<Value = (String, u32, (String, String))> {
    prop_oneof![
        (2u32..4, 2u32..4, 1u32..3, any::<prop::sample::Index>()).prop_map(
            |(leaves, spines, per, pick)| {
                let i = pick.index((leaves * spines) as usize) as u32;
                (
                    format!(
                        "kind = \"leaf_spine\"\nleaves = {leaves}\nspines = {spines}\n\
                         hosts_per_leaf = {per}"
                    ),
                    leaves * per,
                    (
                        format!("leaf{}", i / spines),
                        format!("spine{}", i % spines),
                    ),
                )
            }
        ),
        // Pods of two ToRs and two aggregation switches; aggregation
        // switch a of a pod reaches core a.
        any::<prop::sample::Index>().prop_map(|pick| {
            let i = pick.index(12);
            let link = if i < 8 {
                let (p, t, a) = (i / 4, (i / 2) % 2, i % 2);
                (format!("tor{}", 2 * p + t), format!("agg{}", 2 * p + a))
            } else {
                let (p, a) = ((i - 8) / 2, i % 2);
                (format!("agg{}", 2 * p + a), format!("core{a}"))
            };
            (
                "kind = \"fat_tree\"\npods = 2\ntors_per_pod = 2\naggs_per_pod = 2\n\
                 hosts_per_tor = 2\ncores = 2\nfabric_gbps = 100"
                    .to_string(),
                8,
                link,
            )
        }),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 32, ..ProptestConfig::default() })]

    /// A switch-to-switch link of a fabric with another path fails at a
    /// random time while random flows run, on links that lose frames at
    /// random or not: what it held is lost, the switches route around it,
    /// and every flow still finishes under every congestion control (a run
    /// that stopped with work left would be a `Stalled` error), with and
    /// without PFC.
    #[test]
    fn every_flow_finishes_around_a_failed_link(
        ((topology, (a, b)), flows) in redundant_fabric()
            .prop_flat_map(|(topology, hosts, link)| (Just((topology, link)), flows(hosts))),
        cc in 0usize..CC.len(),
        lossless in any::<bool>(),
        at_us in 0u64..40,
        lossy in any::<bool>(),
        seed in 0u64..1000,
    ) {
        let src = format!(
            "seed = {seed}\nloss_rate = {loss}\n[transport]\ntimeout = 8\n\
             [switch]\nbuffer_kb = 1024\npfc = \"{pfc}\"\n\
             [switch.ecn]\nkmin_kb = 10\nkmax_kb = 40\npmax = 0.5\n\
             [cc]\n{cc}\n[topology]\n{topology}\n\
             [[workload]]\nkind = \"flows\"\nflows = [{flows}]\n\
             [[link_down]]\nat_us = {at_us}\na = \"{a}\"\nb = \"{b}\"\n\
             [output]\nsample_us = 0\n",
            pfc = if lossless { "dynamic" } else { "off" },
            cc = CC[cc],
            flows = toml_flows(flows),
            loss = if lossy { 0.002 } else { 0.0 },
        );
        let (outcome, ok) = run(&src);
        prop_assert_eq!(outcome, Ok(()), "{}", src);
        prop_assert!(ok.iter().all(|ok| *ok), "{:?}\n{}", ok, src);
    }
}
