//! Cross-checks of the simulated host data path against the closed form
//! `roce analyze` computes (`roce_host::analyze`): on a scenario with one
//! bottleneck, the simulated goodput agrees within 10 % and both name the
//! same binding hop — PCIe-bound, message-rate-bound, cache-miss-bound,
//! network-bound — and a many-to-one incast shows the receiver's PCIe
//! binding before the network, with PFC pausing the ToR (or, without PFC,
//! RX drops).

use roce_host::analyze::analyze;
use roce_host::{Profile, Workload};
use roce_rnic::Mtu;
use roce_sim::host::{HostKnobs, HostParams, HostPlan};
use roce_sim::workload::{FlowOp, FlowSpec};
use roce_sim::{PS_PER_NS, Report, SimConfig, Simulator, Topology};

/// A 100G ConnectX-5-class host in a Gen3 x16 slot (the numbers of
/// `profiles/100g-gen3x16-ddr4-1s.toml`), with 2 MiB pages so that a
/// streaming buffer's first-touch translation misses are negligible.
const BASE: &str = r#"name = "test host"
[cpu]
cores_per_socket = 16
post_wqe_ns = 20.0
post_recv_ns = 15.0
doorbell_ns = 100.0
inline_block_ns = 10.0
poll_cqe_ns = 40.0
[numa]
sockets = 1
nic_socket = 0
inter_socket_gbps = 0.0
inter_socket_latency_ns = 0.0
[ddr]
generation = "ddr4"
mt_per_s = 2666.0
channels_per_socket = 6
efficiency = 0.8
latency_ns = 90.0
[pcie]
generation = 3
lanes = 16
mps = 256
mrrs = 512
rcb = 64
completion_split = "mps"
address_bits = 64
read_latency_ns = 800.0
max_outstanding_reads = 256
[rnic]
port_gbps = 100.0
message_rate_mpps = 60.0
packet_rate_mpps = 100.0
max_inline_bytes = 220
wqe_bytes = 64
sge_bytes = 16
cqe_bytes = 64
doorbell_bytes = 8
qp_cache_entries = 1024
qp_context_bytes = 256
mr_cache_entries = 16384
mtt_entry_bytes = 8
page_bytes = 2097152
context_fetches_outstanding = 8
rx_buffer_kib = 1024
[fabric]
leaves = 1
spines = 1
hosts_per_leaf = 32
uplinks_per_leaf = 8
uplink_gbps = 400.0
switch_buffer_mib = 32.0
switch_latency_ns = 600.0
vlan = false
ipv6 = false
"#;

/// The base profile with `key = value` lines replaced.
fn profile(changes: &[(&str, &str)]) -> Profile {
    let mut src = BASE.to_string();
    for (key, value) in changes {
        let line = src
            .lines()
            .find(|l| l.starts_with(&format!("{key} =")))
            .unwrap_or_else(|| panic!("no key {key}"))
            .to_string();
        src = src.replace(&line, &format!("{key} = {value}"));
    }
    Profile::from_toml_str(&src, "test.toml").expect("test profile")
}

struct Case {
    profile: Profile,
    /// Senders (hosts 1..=senders) all writing to host 0.
    senders: u32,
    /// QPs (flows) per sender.
    qps: u32,
    /// Bytes per flow.
    flow_bytes: u64,
    message: u64,
    mtu: Mtu,
    pfc: bool,
    /// Buffers on the far socket.
    remote: bool,
}

struct Outcome {
    report: Report,
    /// Payload into the target, all sources, Gb/s.
    goodput_gbps: f64,
}

fn simulate(c: &Case) -> Outcome {
    let hosts = c.senders as usize + 1;
    let line = (c.profile.rnic.port_gbps * 1e9) as u64;
    let topo = Topology::star(hosts, line, 1_000 * PS_PER_NS).expect("star");
    let mut flows = Vec::new();
    for s in 1..=c.senders {
        for _ in 0..c.qps {
            flows.push(FlowSpec {
                src: s,
                dst: 0,
                size: c.flow_bytes,
                start: 0,
                op: FlowOp::Write,
            });
        }
    }
    let mut cfg = SimConfig {
        mtu: c.mtu,
        message_bytes: Some(c.message),
        // Nearly unsignaled, as a bandwidth benchmark runs.
        signal_every: 64,
        host: Some(HostPlan {
            default: HostParams::from_profile(
                &c.profile,
                HostKnobs {
                    sges: 1,
                    numa: if c.remote {
                        roce_host::Placement::Remote
                    } else {
                        roce_host::Placement::Local
                    },
                    ..HostKnobs::default()
                },
            ),
            per_host: Default::default(),
        }),
        sample: 0,
        ..SimConfig::default()
    };
    if !c.pfc {
        cfg.buffer.lossless = 0;
    }
    let mut sim = Simulator::new(cfg, topo, &flows).expect("simulator");
    sim.run().expect("the run finishes every flow");
    let report = sim.report();
    assert!(report.flows.iter().all(|f| f.ok), "every flow finishes");
    // What reached the target's memory per second of its activity (an
    // ACK leaves once a packet is in the RX buffer, so flow completion
    // times alone would count the buffer's last megabyte as delivered).
    let t = report
        .host_path
        .as_ref()
        .expect("a profile run has the table");
    Outcome {
        goodput_gbps: t.hosts[0].memory_write_gbps,
        report,
    }
}

fn analyst(c: &Case) -> roce_host::analyze::Analysis {
    let w = Workload::from_pairs(&[
        "op=write".to_string(),
        format!("size={}", c.message),
        format!("qps={}", c.qps),
        format!("incast={}", c.senders),
        format!("mtu={}", c.mtu.bytes()),
        format!("numa={}", if c.remote { "remote" } else { "local" }),
        // The simulator posts a flow's WQEs with one doorbell and signals
        // one in 64.
        "batch=64".to_string(),
        "signal_every=64".to_string(),
    ])
    .expect("workload");
    analyze(&c.profile, &w).expect("analysis")
}

/// Simulates `c`, checks the goodput against the analyst's within 10 %
/// and that both name `binding`.
fn cross_check(c: &Case, binding: &str) -> Outcome {
    let a = analyst(c);
    let o = simulate(c);
    let table = o
        .report
        .host_path
        .as_ref()
        .expect("a profile run has the table");
    let want = a.total_goodput_gbps;
    let err = (o.goodput_gbps - want).abs() / want;
    eprintln!(
        "analyst: {} at {:.2} Gb/s; simulated: {} at {:.2} Gb/s ({:+.1} %)\n{}",
        a.binding_hop().name,
        want,
        table.binding,
        o.goodput_gbps,
        (o.goodput_gbps / want - 1.0) * 100.0,
        table.render()
    );
    assert_eq!(a.binding_hop().name, binding, "{}", a.reason);
    assert_eq!(table.binding, binding, "{}", table.reason);
    assert!(
        err < 0.10,
        "simulated {:.2} Gb/s vs analysed {want:.2} Gb/s",
        o.goodput_gbps
    );
    o
}

#[test]
fn network_bound() {
    cross_check(
        &Case {
            profile: profile(&[]),
            senders: 1,
            qps: 1,
            flow_bytes: 4 << 20,
            message: 65536,
            mtu: Mtu::Mtu4096,
            pfc: true,
            remote: false,
        },
        "port",
    );
}

#[test]
fn pcie_bound_200g_in_gen3_slot() {
    let o = cross_check(
        &Case {
            profile: profile(&[("port_gbps", "200.0")]),
            senders: 1,
            qps: 1,
            flow_bytes: 4 << 20,
            message: 65536,
            mtu: Mtu::Mtu4096,
            pfc: true,
            remote: false,
        },
        // The receiver's DMA writes (16-byte headers) bind just before the
        // sender's reads (12-byte completion headers).
        "rx_pcie",
    );
    let t = o.report.host_path.unwrap();
    assert!(
        t.hops
            .iter()
            .find(|h| h.name == "port")
            .unwrap()
            .utilisation
            < 0.7
    );
}

#[test]
fn message_rate_bound() {
    cross_check(
        &Case {
            profile: profile(&[("message_rate_mpps", "20.0")]),
            senders: 1,
            qps: 8,
            flow_bytes: 256 << 10,
            message: 256,
            mtu: Mtu::Mtu1024,
            pfc: true,
            remote: false,
        },
        "rnic_tx",
    );
}

#[test]
fn cache_miss_bound() {
    // 1,024 QPs round robin over a 16-entry QP-context cache: nearly every
    // message fetches its context (8 fetches in flight, 800 ns each). The
    // simulated LRU misses every time; the analyst's independent-reference
    // model 98.4 % of the time. The messages are small because with 256 B
    // payloads the receiver's DMA writes, booked when each context
    // arrives, queue its next context requests behind them (reads may not
    // pass posted writes) and stretch each fetch by ~150 ns, which the
    // closed form does not count (the simulation then runs ~20 % slower).
    let o = cross_check(
        &Case {
            profile: profile(&[("qp_cache_entries", "16")]),
            senders: 1,
            qps: 1024,
            flow_bytes: 16 << 10,
            message: 64,
            mtu: Mtu::Mtu1024,
            pfc: true,
            remote: false,
        },
        "rnic_tx",
    );
    let t = o.report.host_path.unwrap();
    assert!(t.hosts[1].qp_cache_miss_rate > 0.9, "{:?}", t.hosts[1]);
}

#[test]
fn qp_cache_cliff() {
    // The same small WRITEs with the QPs fitting the cache run at the
    // message rate; past it they fall to the miss-service rate.
    let run = |qps: u32| {
        simulate(&Case {
            profile: profile(&[("qp_cache_entries", "16")]),
            senders: 1,
            qps,
            flow_bytes: (4 << 20) / u64::from(qps),
            message: 256,
            mtu: Mtu::Mtu1024,
            pfc: true,
            remote: false,
        })
        .goodput_gbps
    };
    let (fits, spills) = (run(8), run(64));
    assert!(
        spills < fits * 0.5,
        "{fits:.1} Gb/s with 8 QPs, {spills:.1} with 64"
    );
}

fn incast(pfc: bool) -> Outcome {
    // An x8 slot: the receiver's DMA writes (~57 Gb/s) bind before its
    // 100G port when 4 senders write to it.
    let c = Case {
        profile: profile(&[("lanes", "8")]),
        senders: 4,
        qps: 1,
        flow_bytes: 2 << 20,
        message: 65536,
        mtu: Mtu::Mtu4096,
        pfc,
        remote: false,
    };
    if pfc {
        cross_check(&c, "rx_pcie")
    } else {
        simulate(&c)
    }
}

#[test]
fn incast_binds_at_the_receivers_pcie_with_pfc() {
    let o = incast(true);
    let t = o.report.host_path.as_ref().unwrap();
    assert_eq!(t.hosts[0].rx_drops, 0);
    // The receiver paused its ToR.
    let recv_node = o.report.host_nodes[0];
    let xoff: u64 = o
        .report
        .ports
        .iter()
        .filter(|p| p.node == recv_node)
        .map(|p| p.xoff_tx.iter().sum::<u64>())
        .sum();
    assert!(xoff > 0, "the receiver sent XOFF");
}

#[test]
fn incast_without_pfc_drops_at_the_receiver() {
    let o = incast(false);
    let t = o.report.host_path.as_ref().unwrap();
    assert!(t.hosts[0].rx_drops > 0, "{:?}", t.hosts[0]);
}

#[test]
fn profile_runs_are_deterministic() {
    let c = Case {
        profile: profile(&[("lanes", "8")]),
        senders: 3,
        qps: 2,
        flow_bytes: 256 << 10,
        message: 4096,
        mtu: Mtu::Mtu1024,
        pfc: true,
        remote: false,
    };
    let (a, b) = (simulate(&c), simulate(&c));
    assert_eq!(a.report.flows, b.report.flows);
    assert_eq!(a.report.host_path, b.report.host_path);
    assert_eq!(a.report.events, b.report.events);
}

#[test]
fn read_tags_bind_by_littles_law() {
    // 16 outstanding 512-byte reads per 800 ns: 82 Gb/s, below the port.
    let o = cross_check(
        &Case {
            profile: profile(&[("max_outstanding_reads", "16")]),
            senders: 1,
            qps: 1,
            flow_bytes: 4 << 20,
            message: 65536,
            mtu: Mtu::Mtu4096,
            pfc: true,
            remote: false,
        },
        "tx_pcie",
    );
    let h = &o.report.host_path.unwrap().hosts[1];
    assert!(h.read_tags_util > 0.95, "{h:?}");
}

#[test]
fn remote_numa_binds_at_memory() {
    // Buffers on the far socket of a two-socket host whose inter-socket
    // link carries 60 Gb/s: memory binds on both ends before the port.
    let c = Case {
        profile: profile(&[
            ("sockets", "2"),
            ("inter_socket_gbps", "60.0"),
            ("inter_socket_latency_ns", "100.0"),
        ]),
        senders: 1,
        qps: 1,
        flow_bytes: 4 << 20,
        message: 65536,
        mtu: Mtu::Mtu4096,
        pfc: true,
        remote: true,
    };
    let a = analyst(&c);
    let o = simulate(&c);
    let t = o.report.host_path.as_ref().unwrap();
    eprintln!(
        "analyst: {} at {:.2} Gb/s; simulated: {} at {:.2} Gb/s\n{}",
        a.binding_hop().name,
        a.total_goodput_gbps,
        t.binding,
        o.goodput_gbps,
        t.render()
    );
    assert_eq!(a.binding_hop().name, "source_ddr", "{}", a.reason);
    // Source and target memory are equally loaded; either may come out
    // busiest.
    assert!(
        ["source_ddr", "target_ddr"].contains(&t.binding),
        "{}",
        t.reason
    );
    let err = (o.goodput_gbps / a.total_goodput_gbps - 1.0).abs();
    assert!(
        err < 0.10,
        "{:.2} vs {:.2}",
        o.goodput_gbps,
        a.total_goodput_gbps
    );
}

#[test]
fn shipped_example_names_the_receivers_pcie() {
    // scenarios/incast_host_pcie.toml: four 200G senders on Gen4 x16 into
    // a receiver in a Gen3 x16 slot, with the shipped profiles.
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../scenarios/incast_host_pcie.toml");
    let sc = roce_sim::scenario::Scenario::load(&path, None).expect("example loads");
    let mut sim = Simulator::new(sc.cfg, sc.topo, &sc.flows).expect("simulator");
    sim.run().expect("the run finishes every flow");
    let r = sim.report();
    assert!(r.flows.iter().all(|f| f.ok));
    let t = r.host_path.expect("the table");
    assert_eq!(t.binding, "rx_pcie", "{}", t.render());
    assert_eq!(t.hosts[0].rx_drops, 0);
    assert!(r.counters.pfc_xoff_tx > 0, "the receiver paused its ToR");
    let port = t.hops.iter().find(|h| h.name == "leaf").unwrap();
    assert!(port.utilisation < 0.7, "{}", t.render());
}
