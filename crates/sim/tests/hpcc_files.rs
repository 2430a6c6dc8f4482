//! The HPCC ns-3 simulator's input files as `roce sim --hpcc-config` reads
//! them, under random input: the topology, flow and config parsers answer
//! every file with an experiment or a typed error (never a panic), and
//! random two-tier fabrics of multi-homed hosts (hosts on one to three
//! ToRs, as the HPCC repository's `mix/ali_32host_10rack.txt` puts each on
//! two) run every flow to the end under every CC mode.

use proptest::prelude::*;
use roce_sim::Simulator;
use roce_sim::hpcc::Experiment;
use std::path::{Path, PathBuf};

/// A folder of its own per call (proptest runs cases one after another,
/// the test harness runs tests side by side).
fn folder(tag: &str) -> PathBuf {
    use std::sync::atomic::{AtomicU64, Ordering};
    static N: AtomicU64 = AtomicU64::new(0);
    let d = std::env::temp_dir().join(format!(
        "roce-hpcc-files-{tag}-{}-{}",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    ));
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// Loads a config naming `topo.txt` and `flow.txt` written from `topo` and
/// `flows`, with `extra` keys; the folder is removed after.
fn load(tag: &str, topo: &str, flows: &str, extra: &str) -> Result<Experiment, String> {
    let d = folder(tag);
    std::fs::write(d.join("topo.txt"), topo).unwrap();
    std::fs::write(d.join("flow.txt"), flows).unwrap();
    std::fs::write(
        d.join("config.txt"),
        format!(
            "TOPOLOGY_FILE topo.txt\nFLOW_FILE flow.txt\n\
             FCT_OUTPUT_FILE {0}/fct.txt\nPFC_OUTPUT_FILE {0}/pfc.txt\n{extra}",
            d.display()
        ),
    )
    .unwrap();
    let e = Experiment::load(&d.join("config.txt"), None).map_err(|e| e.to_string());
    let _ = std::fs::remove_dir_all(&d);
    e
}

/// Words a topology or flow file is made of, right and wrong.
fn word() -> impl Strategy<Value = String> {
    prop_oneof![
        (0u32..12).prop_map(|n| n.to_string()),
        Just("100Gbps".to_string()),
        Just("25Gbps".to_string()),
        Just("1000ns".to_string()),
        Just("0".to_string()),
        Just("0.5".to_string()),
        Just("2.0".to_string()),
        Just("-1".to_string()),
        Just("99999999999999999999".to_string()),
        Just("1e3".to_string()),
        Just("x".to_string()),
        Just("\n".to_string()),
    ]
}

fn text() -> impl Strategy<Value = String> {
    prop::collection::vec(word(), 0..40).prop_map(|w| w.join(" "))
}

/// A two-tier fabric of `racks` racks under `spines` spines, each rack
/// with `tors` ToRs, each host on `homes[h]` of its rack's ToRs (the
/// first ones), as an HPCC topology file; and its host ids.
fn fabric(racks: usize, tors: usize, spines: usize, homes: &[usize]) -> (String, Vec<usize>) {
    let hosts = homes.len();
    let per_rack = hosts.div_ceil(racks);
    let tor = |r: usize, i: usize| hosts + r * tors + i;
    let spine = |s: usize| hosts + racks * tors + s;
    let mut links = Vec::new();
    for (h, &k) in homes.iter().enumerate() {
        let r = h / per_rack;
        for i in 0..k.clamp(1, tors) {
            links.push((h, tor(r, i), 25));
        }
    }
    for r in 0..racks {
        for i in 0..tors {
            for s in 0..spines {
                links.push((tor(r, i), spine(s), 100));
            }
        }
    }
    let switches: Vec<String> = (hosts..hosts + racks * tors + spines)
        .map(|x| x.to_string())
        .collect();
    let mut t = format!(
        "{} {} {}\n{}\n",
        hosts + switches.len(),
        switches.len(),
        links.len(),
        switches.join(" ")
    );
    for (a, b, g) in links {
        t += &format!("{a} {b} {g}Gbps 1000ns 0\n");
    }
    (t, (0..hosts).collect())
}

const KMAPS: &str = "KMAX_MAP 2 25000000000 400 100000000000 1600\n\
                     KMIN_MAP 2 25000000000 100 100000000000 400\n\
                     PMAX_MAP 2 25000000000 0.2 100000000000 0.2\n\
                     BUFFER_SIZE 8\nSIMULATOR_STOP_TIME 2.5\n";

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    /// Any topology and flow file: an experiment or an error, no panic;
    /// an experiment's hosts each have one port, grouped into machines
    /// named by their first node.
    #[test]
    fn any_topology_or_flow_file_loads_or_fails_cleanly(topo in text(), flows in text()) {
        if let Ok(e) = load("any", &topo, &flows, "CC_MODE 1\nENABLE_QCN 0\n") {
            for &h in &e.topo.hosts {
                prop_assert_eq!(e.topo.ports[h].len(), 1);
                let m = e.topo.machine[h];
                prop_assert!(m <= h && e.topo.machine[m] == m);
            }
            prop_assert_eq!(e.host_ids.len(), e.topo.n_hosts());
        }
    }

    /// Hosts linked at random to random nodes (twice to one switch, to
    /// another host, to nothing): an experiment or an error naming a line.
    #[test]
    fn random_links_load_or_fail_cleanly(
        n in 2usize..8,
        s in 1usize..4,
        links in prop::collection::vec((0usize..10, 0usize..10), 0..14),
    ) {
        let s = s.min(n - 1);
        let sw: Vec<String> = (n - s..n).map(|x| x.to_string()).collect();
        let mut topo = format!("{n} {s} {}\n{}\n", links.len(), sw.join(" "));
        for (a, b) in &links {
            topo += &format!("{a} {b} 100Gbps 1000ns 0\n");
        }
        let flows = "1\n0 1 3 100 10000 2.0\n";
        if let Err(e) = load("links", &topo, flows, &format!("CC_MODE 1\n{KMAPS}")) {
            prop_assert!(e.contains("topo.txt") || e.contains("flow.txt"), "{}", e);
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 24, ..ProptestConfig::default() })]

    /// Random two-tier fabrics of hosts on one, two or three ToRs of their
    /// rack, random flows among them, each CC mode: every flow finishes,
    /// and the FCT file has a line per flow.
    #[test]
    fn multi_homed_fabrics_finish_every_flow(
        racks in 1usize..4,
        tors in 1usize..4,
        spines in 1usize..3,
        homes in prop::collection::vec(1usize..4, 2..10),
        pairs in prop::collection::vec((0usize..10, 0usize..10, 1u64..200_000), 1..12),
        cc in prop::sample::select(vec![0u32, 1, 3, 7, 8, 10]),
    ) {
        let (topo, hosts) = fabric(racks, tors, spines, &homes);
        let flows: Vec<String> = pairs
            .iter()
            .map(|&(a, b, size)| (hosts[a % hosts.len()], hosts[b % hosts.len()], size))
            .filter(|(a, b, _)| a != b)
            .enumerate()
            .map(|(i, (a, b, size))| format!("{a} {b} 3 100 {size} {}", 2.0 + i as f64 * 1e-6))
            .collect();
        prop_assume!(!flows.is_empty());
        let text = format!("{}\n{}\n", flows.len(), flows.join("\n"));
        let qcn = if cc == 0 { "CC_MODE 1\nENABLE_QCN 0\n".to_string() } else { format!("CC_MODE {cc}\n") };
        let e = load("run", &topo, &text, &format!("{qcn}{KMAPS}"))
            .map_err(|e| TestCaseError::fail(format!("{e}\n{topo}")))?;
        prop_assert_eq!(e.topo.multi_homed, homes.iter().any(|&k| k.min(tors) > 1));
        let mut sim = Simulator::new(e.cfg.clone(), e.topo.clone(), &e.flows).unwrap();
        let outcome = sim.run();
        let r = sim.report();
        prop_assert!(outcome.is_ok(), "{:?}\n{}", outcome, topo);
        prop_assert_eq!(r.summary(1.0).flows.finished, flows.len(), "{}\n{}", topo, text);
        let d = folder("fct");
        let mut e = e;
        for o in &mut e.outputs {
            o.path = d.join(o.path.file_name().unwrap());
        }
        e.prepare_outputs().unwrap();
        e.write_outputs(&r).unwrap();
        let fct = std::fs::read_to_string(d.join("fct.txt")).unwrap();
        let _ = std::fs::remove_dir_all(&d);
        prop_assert_eq!(fct.lines().count(), flows.len());
    }
}

/// The folder holding this crate's shipped HPCC inputs (for the doc's
/// claim that `dual/` is such a fabric).
#[test]
fn the_shipped_dual_fabric_is_multi_homed() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scenarios/hpcc/dual");
    let e = Experiment::load(&dir.join("config_dual_hpcc.txt"), None).unwrap();
    assert!(e.topo.multi_homed);
    assert_eq!(e.nic_nodes.len(), 256);
    assert_eq!(e.topo.n_hosts(), 512);
}

/// ns-3's packet trace of an 8:1 incast at hosts 0 and 1 and the switch
/// (`TRACE_FILE` 0 1 9): the header lists every device's rate; the
/// records come in time order, from those nodes only, one per event a
/// packet meets there; and the queue lengths they carry add up, record by
/// record, to the bytes enqueued and dequeued before them.
#[test]
fn the_packet_trace_records_every_event_at_the_traced_nodes() {
    use roce_sim::ns3_trace::{Body, RECORD_BYTES, TraceEvent, TraceRecord, l3};
    use std::collections::HashMap;
    let shipped = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scenarios/hpcc");
    let d = folder("trace");
    std::fs::copy(shipped.join("topo_star9.txt"), d.join("topo.txt")).unwrap();
    let size = 100_000u64;
    let flows: String = (1..=8)
        .map(|h| format!("{h} 0 3 100 {size} 2.0\n"))
        .collect();
    std::fs::write(d.join("flow.txt"), format!("8\n{flows}")).unwrap();
    std::fs::write(d.join("trace.txt"), "3\n0 1 9\n").unwrap();
    let tr = d.join("mix.tr");
    std::fs::write(
        d.join("config.txt"),
        format!(
            "TOPOLOGY_FILE topo.txt\nFLOW_FILE flow.txt\nTRACE_FILE trace.txt\n\
             TRACE_OUTPUT_FILE {}\nFCT_OUTPUT_FILE {1}/fct.txt\nPFC_OUTPUT_FILE {1}/pfc.txt\n\
             CC_MODE 1\nKMAX_MAP 1 100000000000 400\nKMIN_MAP 1 100000000000 100\n\
             PMAX_MAP 1 100000000000 0.2\n",
            tr.display(),
            d.display()
        ),
    )
    .unwrap();
    let e = Experiment::load(&d.join("config.txt"), None).unwrap();
    let t = e.open_trace().unwrap().expect("ENABLE_TRACE defaults to 1");
    let mut sim = Simulator::new(e.cfg.clone(), e.topo.clone(), &e.flows).unwrap();
    sim.set_packet_trace(t);
    sim.run().unwrap();
    let n = sim.take_packet_trace().unwrap().finish().unwrap();
    assert_eq!(sim.report().summary(1.0).flows.finished, 8);
    let bytes = std::fs::read(&tr).unwrap();
    let _ = std::fs::remove_dir_all(&d);

    // The header: 18 devices (a port per host, nine at the switch), then
    // the window.
    let devices = u32::from_le_bytes(bytes[0..4].try_into().unwrap()) as usize;
    assert_eq!(devices, 18);
    let mut speeds = Vec::new();
    for i in 0..devices {
        let b = &bytes[4 + i * 11..4 + (i + 1) * 11];
        let node = u16::from_le_bytes([b[0], b[1]]);
        let bps = u64::from_le_bytes(b[3..11].try_into().unwrap());
        assert_eq!(bps, 100_000_000_000);
        speeds.push((node, b[2]));
    }
    let mut want: Vec<(u16, u8)> = (0..9).map(|h| (h, 1)).collect();
    want.extend((1..=9).map(|i| (9, i)));
    assert_eq!(speeds, want);
    let body = &bytes[4 + devices * 11 + 4..];
    assert_eq!(body.len() as u64, n * RECORD_BYTES as u64);

    let recs: Vec<TraceRecord> = body
        .chunks_exact(RECORD_BYTES)
        .map(|c| TraceRecord::parse(c.try_into().unwrap()).unwrap())
        .collect();
    assert!(recs.windows(2).all(|w| w[0].time_ns <= w[1].time_ns));
    assert!(recs.iter().all(|r| [0, 1, 9].contains(&r.node)));
    let count = |node: u16, event: TraceEvent, prot: u8| {
        (recs.iter())
            .filter(|r| r.node == node && r.event == event && r.l3_prot == prot)
            .count()
    };
    let pkts = size.div_ceil(1024) as usize;
    // Host 1 sends its flow's packets, each at its byte offset.
    assert_eq!(count(1, TraceEvent::Dequ, l3::UDP), pkts);
    let seqs: Vec<u32> = (recs.iter())
        .filter(|r| r.node == 1 && r.event == TraceEvent::Dequ && r.l3_prot == l3::UDP)
        .map(|r| match r.body {
            Body::Data {
                seq, sport, dport, ..
            } => {
                assert_eq!((sport, dport), (10000, 100));
                seq
            }
            b => panic!("{b:?}"),
        })
        .collect();
    assert_eq!(seqs, (0..pkts as u32).map(|i| i * 1024).collect::<Vec<_>>());
    // Every data packet reaches the switch and host 0; host 0 queues and
    // sends an ACK for each (ACKs every packet here), which the switch
    // carries back.
    assert_eq!(count(9, TraceEvent::Recv, l3::UDP), 8 * pkts);
    assert_eq!(count(0, TraceEvent::Recv, l3::UDP), 8 * pkts);
    let acks = count(0, TraceEvent::Dequ, l3::ACK);
    assert!(acks > 0);
    assert_eq!(count(0, TraceEvent::Enqu, l3::ACK), acks);
    assert_eq!(count(9, TraceEvent::Recv, l3::ACK), acks);
    // The switch's queues, replayed from the records: each Enqu states
    // the bytes queued before it, each Dequ those left after it.
    let mut queued: HashMap<(u8, u8), u64> = HashMap::new();
    for r in recs.iter().filter(|r| r.node == 9) {
        let q = queued.entry((r.intf, r.qidx)).or_default();
        match r.event {
            TraceEvent::Enqu => {
                assert_eq!(u64::from(r.qlen), *q, "{r:?}");
                *q += u64::from(r.size);
            }
            TraceEvent::Dequ => {
                *q -= u64::from(r.size);
                assert_eq!(u64::from(r.qlen), *q, "{r:?}");
            }
            _ => {}
        }
    }
    assert!(queued.values().all(|&q| q == 0), "{queued:?}");
    // The incast queues at the port to host 0 (interface 1).
    let peak = (recs.iter())
        .filter(|r| r.node == 9 && r.intf == 1 && r.event == TraceEvent::Enqu)
        .map(|r| r.qlen)
        .max();
    assert!(peak.is_some_and(|q| q > 100_000), "{peak:?}");
}
