//! The seed's §5.9 table, computed: for a workload on a profile, every hop
//! of the DDR → PCIe → RNIC → port → fabric → RNIC → PCIe → DDR → CPU path
//! with its capacity, the workload's demand on it, its utilisation, the
//! metric to watch there, and the hop that binds.
//!
//! # The model
//!
//! The workload is a saturating sender (like perftest's bandwidth tests):
//! each data source pushes messages as fast as the slowest hop allows.
//! Every hop has one or more constraints of the form "this many units per
//! message, at most this many units per second" — link bytes, PCIe read
//! requests in flight, packets, work requests, cache misses, CPU
//! nanoseconds. A hop's message ceiling `M` is the lowest of its
//! constraints; the achieved message rate per source is `R = min M`, and
//! the hop with that minimum binds. Hops shared by the `incast` sources
//! (the leaf port towards the receiver, the receiver's RNIC, PCIe, DDR and
//! CPU) carry `incast` times the per-source traffic.
//!
//! For each hop we report, in the hop's own units (link bytes for PCIe and
//! the port, payload for DDR):
//! - `demand` = `R` × the hop's bytes (and operations) per message;
//! - `utilisation` = `R / M` (1.0 at the binding hop);
//! - `capacity` = `demand / utilisation`: what the hop could carry of the
//!   same traffic mix (for a link bound by bytes, exactly its bandwidth).
//!
//! Data flows from the *source* (where the payload lives) to the *target*:
//! for SEND and WRITE the requester is the source; for READ (and ATOMIC)
//! the responder is, and the requester's WQE and CQE costs land on the
//! target side.
//!
//! Descriptor traffic (WQEs, CQEs, doorbell records) is charged to PCIe but
//! not to DDR: with DDIO it lives in the last-level cache. SRQ's benefit
//! (shared receive buffers) is memory footprint, which is not modelled.
//! Reverse-direction packets (ACKs, READ requests, atomic responses) use
//! the other direction of full-duplex links and are not charged. When a
//! receiver-side hop binds below the port's rate, the reason says how long
//! the RX buffer absorbs line-rate arrivals before PFC or drops.

use crate::ethernet::Packets;
use crate::numa::Placement;
use crate::pcie::LinkBytes;
use crate::profile::Profile;
use crate::workload::{Op, Workload};

/// One hop of the DDR-to-DDR path.
#[derive(Debug, Clone, PartialEq)]
pub struct Hop {
    /// `source_ddr`, `tx_pcie`, `rnic_tx`, `port`, `leaf`, `spine`,
    /// `rnic_rx`, `rx_pcie`, `target_ddr`, `cpu_cq`.
    pub name: &'static str,
    /// What the hop could carry of this traffic mix, Gb/s of its own bytes.
    pub capacity_gbps: f64,
    /// ... and in its own operations per second (see `unit`), millions.
    pub capacity_mpps: f64,
    pub demand_gbps: f64,
    pub demand_mpps: f64,
    pub utilisation: f64,
    /// What a user watches there (the seed's §5.9 third column).
    pub metric: &'static str,
    /// What `*_mpps` counts here: packets, TLPs, messages, CQEs.
    pub unit: &'static str,
    /// Payload goodput per source this hop alone would allow, Gb/s.
    pub ceiling_gbps: f64,
    /// The constraint inside the hop that sets its ceiling, with numbers.
    pub limit: String,
}

/// The analysis of one workload on one profile.
#[derive(Debug, Clone, PartialEq)]
pub struct Analysis {
    pub workload: Workload,
    pub hops: Vec<Hop>,
    /// Index of the binding hop in `hops`.
    pub binding: usize,
    /// One line: why that hop binds.
    pub reason: String,
    /// Messages per second per source, millions.
    pub message_rate_mps: f64,
    /// Payload goodput per source, Gb/s.
    pub goodput_gbps: f64,
    /// Payload goodput into the target (all sources), Gb/s.
    pub total_goodput_gbps: f64,
}

impl Analysis {
    pub fn binding_hop(&self) -> &Hop {
        &self.hops[self.binding]
    }

    pub fn hop(&self, name: &str) -> Option<&Hop> {
        self.hops.iter().find(|h| h.name == name)
    }
}

/// A workload the profile cannot run.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AnalyzeError {
    #[error("numa=remote needs a profile with two or more sockets (this one has {0})")]
    NoRemoteSocket(u32),
    #[error("size=0: nothing moves; use a message of at least 1 byte")]
    EmptyMessage,
    #[error("threads={threads}: the profile's hosts have {cores} cores")]
    TooManyThreads { threads: u32, cores: u32 },
}

/// The hop names in path order.
pub const HOPS: [&str; 10] = [
    "source_ddr",
    "tx_pcie",
    "rnic_tx",
    "port",
    "leaf",
    "spine",
    "rnic_rx",
    "rx_pcie",
    "target_ddr",
    "cpu_cq",
];

/// The §5.9 metric column for each hop.
pub fn metric(hop: &str) -> &'static str {
    match hop {
        "source_ddr" => "memory bandwidth, remote NUMA access",
        "tx_pcie" => "PCIe throughput, read completion latency",
        "rnic_tx" => "NIC counters, QP cache miss, PPS",
        "port" => "port utilization, packet size",
        "leaf" => "ECN marks, PFC pause, drops",
        "spine" => "link utilization, ECMP distribution",
        "rnic_rx" => "RX drops, CNP, PCIe write",
        "rx_pcie" => "PCIe write throughput",
        "target_ddr" => "memory bandwidth, application consume rate",
        _ => "CPU utilization, CQ polling cost",
    }
}

/// "At most `capacity` units per second, `per_msg` units per message."
struct Constraint {
    per_msg: f64,
    capacity: f64,
    what: String,
}

impl Constraint {
    fn msgs_per_s(&self) -> f64 {
        if self.per_msg <= 0.0 {
            f64::INFINITY
        } else {
            self.capacity / self.per_msg
        }
    }
}

/// A hop before the rate is known.
struct Draft {
    name: &'static str,
    unit: &'static str,
    /// Bytes of the hop's own kind per message (multiplicity included).
    bytes: f64,
    /// Operations per message (multiplicity included).
    ops: f64,
    constraints: Vec<Constraint>,
}

impl Draft {
    fn ceiling(&self) -> (f64, &str) {
        self.constraints
            .iter()
            .map(|c| (c.msgs_per_s(), c.what.as_str()))
            .fold((f64::INFINITY, ""), |a, b| if b.0 < a.0 { b } else { a })
    }
}

/// What one message costs one host, as the analysis charges it. The
/// simulator charges the same, so the two agree by construction.
#[derive(Debug, Default, Clone, Copy, PartialEq)]
pub struct HostCost {
    /// Bytes and TLPs on the host's PCIe link, per direction.
    pub pcie: LinkBytes,
    /// Non-posted read requests (each holds a tag for a read latency).
    pub pcie_reads: f64,
    /// Payload bytes the NIC DMAs from or to this host's DDR.
    pub memory_bytes: f64,
    /// QP-context miss ratio of this host's NIC.
    pub qp_miss_ratio: f64,
    /// Translation (MTT) misses per message on this host's NIC.
    pub mtt_misses: f64,
    /// CPU time per message on this host, ns of one core.
    pub cpu_ns: f64,
    /// Whether this host's NIC processes the work request (the requester).
    pub work_request: bool,
}

impl HostCost {
    fn read(&mut self, b: LinkBytes) {
        self.pcie_reads += b.tlps_to_host;
        self.pcie += b;
    }

    fn posted(&mut self, b: LinkBytes) {
        self.pcie += b;
    }

    /// Cache misses per message (QP context + translations).
    pub fn misses(&self) -> f64 {
        self.qp_miss_ratio + self.mtt_misses
    }

    fn scaled(self, k: f64) -> Self {
        Self {
            pcie: self.pcie * k,
            pcie_reads: self.pcie_reads * k,
            memory_bytes: self.memory_bytes * k,
            qp_miss_ratio: self.qp_miss_ratio * k,
            mtt_misses: self.mtt_misses * k,
            cpu_ns: self.cpu_ns * k,
            work_request: self.work_request,
        }
    }
}

/// What one message of a workload costs: its packets in the data
/// direction and the work on the requester and on the responder. Miss
/// ratios account for `incast` (the shared host serves every source's QPs).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct MessageCost {
    /// Payload bytes (8 for ATOMIC).
    pub size: u64,
    /// Data-direction packets (responses for READ).
    pub data: Packets,
    /// Whether the payload rides in the WQE.
    pub inline: bool,
    pub requester: HostCost,
    pub responder: HostCost,
}

/// Per-message costs of `w` on `p` (see [`MessageCost`]).
pub fn message_cost(p: &Profile, w: &Workload) -> MessageCost {
    let (pcie, rnic, cpu) = (&p.pcie, &p.rnic, &p.cpu);
    let framing = p.fabric.framing();
    // ATOMIC moves 8 bytes whatever `size` says.
    let size = if w.op == Op::Atomic { 8 } else { w.size };
    let data = framing.message(w.op, size, w.mtu);
    let inline = w.inline && matches!(w.op, Op::Send | Op::Write) && rnic.inline_fits(size);
    let batch = u64::from(w.batch.max(1));
    let signal = f64::from(w.signal_every.max(1));
    let qps = u64::from(w.qps.max(1));
    let incast = u64::from(w.incast.max(1));
    // For READ the one requester talks to every source; otherwise the one
    // responder serves every source's QPs.
    let (req_qps, resp_qps) = if w.op == Op::Read {
        (qps * incast, qps)
    } else {
        (qps, qps * incast)
    };

    // The requester: doorbell and WQE (or an inline push), CQEs, contexts.
    let mut req = HostCost {
        work_request: true,
        ..HostCost::default()
    };
    if inline && batch == 1 {
        // BlueFlame-style push: the WQE, data included, is the doorbell.
        req.posted(pcie.mmio_write(rnic.inline_wqe_bytes(size)));
    } else {
        // One doorbell and one WQE fetch per batch.
        let wqe = if inline {
            rnic.inline_wqe_bytes(size)
        } else {
            rnic.wqe_fetch_bytes(w.sges)
        };
        req.posted(pcie.mmio_write(u64::from(rnic.doorbell_bytes)) * (1.0 / batch as f64));
        req.read(pcie.dma_read(wqe * batch) * (1.0 / batch as f64));
    }
    req.posted(rnic.cqe_pcie(pcie) * (1.0 / signal));
    req.qp_miss_ratio = rnic.qp_miss_ratio(req_qps);
    req.read(rnic.qp_miss_pcie(pcie) * req.qp_miss_ratio);
    let inline_blocks = if inline {
        rnic.inline_wqe_bytes(size) / 64
    } else {
        0
    };
    req.cpu_ns = cpu.requester_ns(w.batch, w.signal_every, inline_blocks);

    let mut resp = HostCost {
        qp_miss_ratio: rnic.qp_miss_ratio(resp_qps),
        ..HostCost::default()
    };
    resp.read(rnic.qp_miss_pcie(pcie) * resp.qp_miss_ratio);

    // The payload: read at the source (one DMA per SGE), written at the
    // target; each page it spans is a translation.
    let chunks = sge_chunks(size, w.sges);
    let pages: u64 = chunks.iter().map(|&(c, k)| k * rnic.pages(c)).sum();
    let (mut payload_read, mut payload_write) = (LinkBytes::default(), LinkBytes::default());
    for (c, k) in chunks {
        if k > 0 {
            payload_read += pcie.dma_read(c) * k as f64;
            payload_write += pcie.dma_write(c) * k as f64;
        }
    }
    let mtt = rnic.mr_miss_pcie(pcie);
    let requester_is_source = w.op.requester_is_source();
    let (src, dst, src_qps, dst_qps) = if requester_is_source {
        (&mut req, &mut resp, req_qps, resp_qps)
    } else {
        (&mut resp, &mut req, resp_qps, req_qps)
    };
    // Source buffers: one per QP; an inline payload needs no DMA at all.
    if !inline {
        src.read(payload_read);
        src.memory_bytes += size as f64;
        src.mtt_misses = pages as f64 * rnic.mr_miss_ratio(src_qps * pages);
        src.read(mtt * src.mtt_misses);
    }
    if w.op == Op::Atomic {
        // The responder's NIC writes the modified operand back.
        src.posted(pcie.dma_write(8));
    }
    dst.posted(payload_write);
    dst.memory_bytes += size as f64;
    dst.mtt_misses = pages as f64 * rnic.mr_miss_ratio(dst_qps * pages);
    dst.read(mtt * dst.mtt_misses);
    if w.op == Op::Send {
        // A receive WQE fetched, a receive CQE written, both handled by
        // the receiver's CPU (receives are always signaled).
        resp.read(pcie.dma_read(rnic.recv_wqe_bytes(w.sges)));
        resp.posted(rnic.cqe_pcie(pcie));
        resp.cpu_ns = cpu.responder_send_ns();
    }
    MessageCost {
        size,
        data,
        inline,
        requester: req,
        responder: resp,
    }
}

fn gbps_to_bytes_per_s(g: f64) -> f64 {
    g * 1e9 / 8.0
}

/// Splits `size` bytes over `sges` entries: (chunk, count) pairs.
fn sge_chunks(size: u64, sges: u32) -> [(u64, u64); 2] {
    let n = u64::from(sges.max(1)).min(size.max(1));
    let base = size / n;
    let extra = size % n;
    [(base + 1, extra), (base, n - extra)]
}

/// Analyses `w` on `p`.
pub fn analyze(p: &Profile, w: &Workload) -> Result<Analysis, AnalyzeError> {
    if w.numa == Placement::Remote && !p.numa.has_remote() {
        return Err(AnalyzeError::NoRemoteSocket(p.numa.sockets));
    }
    if w.size == 0 {
        return Err(AnalyzeError::EmptyMessage);
    }
    let cores = p.numa.sockets.saturating_mul(p.cpu.cores_per_socket);
    if w.threads > cores {
        return Err(AnalyzeError::TooManyThreads {
            threads: w.threads,
            cores,
        });
    }
    let (pcie, rnic, cpu) = (&p.pcie, &p.rnic, &p.cpu);
    let n = f64::from(w.incast.max(1));
    let framing = p.fabric.framing();
    let cost = message_cost(p, w);
    let (size, data, inline) = (cost.size, cost.data, cost.inline);
    let pkts = data.count as f64;
    let payload = size as f64;
    let qps = u64::from(w.qps.max(1));
    let read_latency = pcie.read_latency_ns + p.numa.extra_latency_ns(w.numa);
    let requester_is_source = w.op.requester_is_source();
    let (src, dst) = if requester_is_source {
        (cost.requester, cost.responder)
    } else {
        (cost.responder, cost.requester)
    };
    // The target side serves all `incast` sources.
    let dst = dst.scaled(n);
    let threads = f64::from(w.threads.max(1));
    let inline_blocks = if inline {
        rnic.inline_wqe_bytes(size) / 64
    } else {
        0
    };

    // --- Build the hops. ---
    let mem = p.numa.dma_memory_gbps(w.numa, p.ddr.socket_gbps());
    let mem_what = |side: &str| match w.numa {
        Placement::Local => format!(
            "{side} DDR: {:.0} Gb/s sustained ({} × {} MT/s × 8 B × {:.0} %)",
            mem,
            p.ddr.channels_per_socket,
            p.ddr.mt_per_s,
            p.ddr.efficiency * 100.0
        ),
        Placement::Remote => format!(
            "{side} buffers on the far socket: {:.0} Gb/s (inter-socket link; local DDR {:.0} Gb/s)",
            mem,
            p.ddr.socket_gbps()
        ),
    };
    let tlp = pcie.tlp_gbps();
    let link_desc = format!(
        "Gen{} x{}: {:.1} Gb/s per direction at the TLP layer",
        pcie.generation.number(),
        pcie.lanes,
        tlp
    );
    let pcie_draft = |name: &'static str, load: HostCost| {
        let (dir, bytes, tlps) = if load.pcie.to_device >= load.pcie.to_host {
            ("to the NIC", load.pcie.to_device, load.pcie.tlps_to_device)
        } else {
            ("to the host", load.pcie.to_host, load.pcie.tlps_to_host)
        };
        let mut c = vec![Constraint {
            per_msg: bytes,
            capacity: gbps_to_bytes_per_s(tlp),
            what: format!(
                "{link_desc}; {bytes:.0} link bytes {dir} per {}-byte message (TLP headers, framing, descriptors)",
                size
            ),
        }];
        if load.pcie_reads > 0.0 {
            c.push(Constraint {
                per_msg: load.pcie_reads,
                capacity: f64::from(pcie.max_outstanding_reads) / read_latency * 1e9,
                what: format!(
                    "Little's law: {} outstanding reads / {:.0} ns read latency, {:.2} read requests per message",
                    pcie.max_outstanding_reads, read_latency, load.pcie_reads
                ),
            });
        }
        Draft {
            name,
            unit: "TLPs",
            bytes,
            ops: tlps,
            constraints: c,
        }
    };
    let engine = |name: &'static str,
                  messages: f64,
                  requests: bool,
                  packets: f64,
                  misses: f64,
                  qp_miss: f64| {
        let mut c = vec![Constraint {
            per_msg: packets,
            capacity: rnic.packet_rate_mpps * 1e6,
            what: format!(
                "packet engine: {} Mpps, {:.0} packets per message",
                rnic.packet_rate_mpps,
                packets / messages
            ),
        }];
        if requests {
            c.push(Constraint {
                per_msg: messages,
                capacity: rnic.message_rate_mpps * 1e6,
                what: format!(
                    "message-rate ceiling: {} M work requests/s",
                    rnic.message_rate_mpps
                ),
            });
        }
        if misses > 0.0 {
            c.push(Constraint {
                per_msg: misses,
                capacity: rnic.miss_service_mps(pcie.read_latency_ns) * 1e6,
                what: format!(
                    "QP-context/MTT cache misses: {:.0} % QP-context miss ratio, {:.2} misses per message, each an extra PCIe read of {:.0} ns, {} in flight",
                    qp_miss * 100.0,
                    misses / messages,
                    pcie.read_latency_ns,
                    rnic.context_fetches_outstanding
                ),
            });
        }
        Draft {
            name,
            unit: "packets",
            bytes: payload * messages,
            ops: packets,
            constraints: c,
        }
    };

    let port_bps = gbps_to_bytes_per_s(rnic.port_gbps);
    let wire = data.wire_bytes as f64;
    // ECMP: the source's QPs are flows hashed onto the leaf's uplinks.
    let uplinks = f64::from(p.fabric.uplinks_per_leaf);
    let used_uplinks = uplinks * (1.0 - (1.0 - 1.0 / uplinks).powf(qps as f64));
    let sink_uplinks = p.fabric.leaf_uplink_gbps();
    let spine_cap = (used_uplinks * p.fabric.uplink_gbps).min(sink_uplinks / n);
    let spine_what = if used_uplinks * p.fabric.uplink_gbps <= sink_uplinks / n {
        format!(
            "ECMP: {} QP flow(s) hash onto {:.1} of {} uplinks of {} Gb/s",
            qps, used_uplinks, p.fabric.uplinks_per_leaf, p.fabric.uplink_gbps
        )
    } else {
        format!(
            "the target leaf's {} uplinks ({:.0} Gb/s) shared by {} sources (oversubscription {:.1}:1)",
            p.fabric.uplinks_per_leaf,
            sink_uplinks,
            w.incast,
            p.fabric.oversubscription(rnic.port_gbps)
        )
    };
    // CPU: the source host's work per message against the target's (which
    // serves every source).
    let describe = |h: &HostCost, mult: f64| {
        if h.work_request {
            format!(
                "requester: {:.1} ns per message (WQE {} + doorbell {}/{} + CQE {}/{}{}){}",
                h.cpu_ns / mult,
                cpu.post_wqe_ns,
                cpu.doorbell_ns,
                w.batch,
                cpu.poll_cqe_ns,
                w.signal_every,
                if inline {
                    format!(" + {inline_blocks} inline blocks")
                } else {
                    String::new()
                },
                if mult > 1.0 {
                    format!(" × {} sources", w.incast)
                } else {
                    String::new()
                }
            )
        } else {
            format!(
                "receiver: {:.0} ns per received SEND (poll CQE + repost receive) × {} sources",
                h.cpu_ns / mult,
                w.incast
            )
        }
    };
    let (cpu_ns, cpu_mult, cpu_side) = if dst.cpu_ns > src.cpu_ns {
        (dst.cpu_ns, n, describe(&dst, n))
    } else {
        (src.cpu_ns, 1.0, describe(&src, 1.0))
    };

    let drafts = vec![
        Draft {
            name: "source_ddr",
            unit: "packets",
            bytes: src.memory_bytes,
            ops: pkts,
            constraints: vec![Constraint {
                per_msg: src.memory_bytes,
                capacity: gbps_to_bytes_per_s(mem),
                what: mem_what("source"),
            }],
        },
        pcie_draft("tx_pcie", src),
        engine(
            "rnic_tx",
            1.0,
            requester_is_source,
            pkts,
            src.misses(),
            src.qp_miss_ratio,
        ),
        Draft {
            name: "port",
            unit: "packets",
            bytes: wire,
            ops: pkts,
            constraints: vec![Constraint {
                per_msg: wire,
                capacity: port_bps,
                what: format!(
                    "{} Gb/s line rate; {:.0} wire bytes per message ({} packets, MTU {}: headers, preamble, IFG)",
                    rnic.port_gbps, wire, data.count, w.mtu
                ),
            }],
        },
        Draft {
            name: "leaf",
            unit: "packets",
            bytes: wire * n,
            ops: pkts * n,
            constraints: vec![Constraint {
                per_msg: wire * n,
                capacity: port_bps,
                what: if n > 1.0 {
                    format!(
                        "the leaf port to the target ({} Gb/s) is shared by {} sources; the {:.0} MiB switch buffer holds {:.0} µs of the excess (then ECN/PFC)",
                        rnic.port_gbps,
                        w.incast,
                        p.fabric.switch_buffer_mib,
                        p.fabric.switch_buffer_bytes() * 8.0 / ((n - 1.0) * rnic.port_gbps * 1e3)
                    )
                } else {
                    format!(
                        "the leaf port to the target: {} Gb/s line rate",
                        rnic.port_gbps
                    )
                },
            }],
        },
        Draft {
            name: "spine",
            unit: "packets",
            bytes: wire,
            ops: pkts,
            constraints: vec![Constraint {
                per_msg: wire,
                capacity: gbps_to_bytes_per_s(spine_cap),
                what: spine_what,
            }],
        },
        engine(
            "rnic_rx",
            n,
            !requester_is_source,
            pkts * n,
            dst.misses(),
            dst.qp_miss_ratio / n,
        ),
        pcie_draft("rx_pcie", dst),
        Draft {
            name: "target_ddr",
            unit: "packets",
            bytes: dst.memory_bytes,
            ops: pkts * n,
            constraints: vec![Constraint {
                per_msg: dst.memory_bytes,
                capacity: gbps_to_bytes_per_s(mem),
                what: mem_what("target"),
            }],
        },
        Draft {
            name: "cpu_cq",
            unit: "messages",
            bytes: payload * cpu_mult,
            ops: cpu_mult,
            constraints: vec![Constraint {
                per_msg: cpu_ns,
                capacity: threads * 1e9,
                what: format!("{} thread(s); {cpu_side}", w.threads),
            }],
        },
    ];

    // --- Solve: the slowest hop sets the rate. ---
    let ceilings: Vec<(f64, String)> = drafts
        .iter()
        .map(|d| {
            let (m, w) = d.ceiling();
            (m, w.to_string())
        })
        .collect();
    let (binding, rate) =
        ceilings.iter().enumerate().fold(
            (0, f64::INFINITY),
            |a, (i, (m, _))| if *m < a.1 { (i, *m) } else { a },
        );
    let hops: Vec<Hop> = drafts
        .iter()
        .zip(&ceilings)
        .map(|(d, (m, what))| {
            let util = if m.is_finite() { rate / m } else { 0.0 };
            let demand_gbps = rate * d.bytes * 8e-9;
            let demand_mpps = rate * d.ops * 1e-6;
            let (cap_g, cap_p) = if util > 0.0 {
                (demand_gbps / util, demand_mpps / util)
            } else {
                (0.0, 0.0)
            };
            Hop {
                name: d.name,
                capacity_gbps: cap_g,
                capacity_mpps: cap_p,
                demand_gbps,
                demand_mpps,
                utilisation: util,
                metric: metric(d.name),
                unit: d.unit,
                ceiling_gbps: if m.is_finite() {
                    m * payload * 8e-9
                } else {
                    f64::INFINITY
                },
                limit: what.clone(),
            }
        })
        .collect();
    let goodput = rate * payload * 8e-9;
    let b = &hops[binding];
    let runner_up = hops
        .iter()
        .enumerate()
        .filter(|(i, _)| *i != binding)
        .max_by(|a, b| a.1.utilisation.total_cmp(&b.1.utilisation))
        .map(|(_, h)| format!("; next: {} at {:.0} %", h.name, h.utilisation * 100.0))
        .unwrap_or_default();
    // A receiver that drains slower than its port fills its RX buffer
    // whenever the port delivers at line rate (§5.3, §5.7).
    let port_goodput = framing.goodput_gbps(rnic.port_gbps, w.op, size, w.mtu);
    let rx_note = match b.name {
        "rnic_rx" | "rx_pcie" | "target_ddr" if goodput * n < port_goodput => format!(
            "; at line rate the {} KiB RX buffer fills in {:.1} µs, then PFC pauses or drops",
            rnic.rx_buffer_kib,
            rnic.rx_buffer_absorb_ns(port_goodput, goodput * n) / 1e3
        ),
        _ => String::new(),
    };
    let reason = format!(
        "{} binds at {:.1} Gb/s of payload per source ({:.2} M msg/s): {}{}{}",
        b.name,
        goodput,
        rate * 1e-6,
        b.limit,
        rx_note,
        runner_up
    );
    Ok(Analysis {
        workload: w.clone(),
        hops,
        binding,
        reason,
        message_rate_mps: rate * 1e-6,
        goodput_gbps: goodput,
        total_goodput_gbps: goodput * n,
    })
}

/// Powers of two from `lo` to `hi` inclusive (`lo` rounded down to one).
pub fn sizes_pow2(lo: u64, hi: u64) -> Vec<u64> {
    let mut v = Vec::new();
    let mut s = if lo == 0 {
        1
    } else {
        1u64 << (63 - lo.leading_zeros())
    };
    while s <= hi {
        if s >= lo.max(1) || v.is_empty() {
            v.push(s.max(lo.max(1)));
        }
        match s.checked_mul(2) {
            Some(n) => s = n,
            None => break,
        }
    }
    v.dedup();
    v
}

/// One point of a message-size sweep.
#[derive(Debug, Clone, PartialEq)]
pub struct SweepPoint {
    pub size: u64,
    pub analysis: Analysis,
}

/// Analyses `w` at every size in `sizes`.
pub fn sweep(p: &Profile, w: &Workload, sizes: &[u64]) -> Result<Vec<SweepPoint>, AnalyzeError> {
    sizes
        .iter()
        .map(|&size| {
            let w = Workload { size, ..w.clone() };
            analyze(p, &w).map(|analysis| SweepPoint { size, analysis })
        })
        .collect()
}

/// Where the binding hop changes along a sweep: `(last size of the old
/// hop, first size of the new one, old hop, new hop)`.
pub fn binding_changes(points: &[SweepPoint]) -> Vec<(u64, u64, &'static str, &'static str)> {
    points
        .windows(2)
        .filter_map(|w| {
            let (a, b) = (
                w[0].analysis.binding_hop().name,
                w[1].analysis.binding_hop().name,
            );
            (a != b).then_some((w[0].size, w[1].size, a, b))
        })
        .collect()
}

/// One optimisation of the seed's §5.3/§5.8 applied to a workload.
#[derive(Debug, Clone, PartialEq)]
pub struct Step {
    /// `baseline`, `unsignaled+cq_moderation`, `inline`, `doorbell_batch`,
    /// `larger_mtu`, `fewer_sges`, `fewer_qps`, `all`.
    pub name: &'static str,
    /// The workload keys changed, or why the optimisation does not apply.
    pub change: String,
    pub applies: bool,
    pub analysis: Analysis,
}

/// The workload, then each optimisation on its own, then all together.
pub fn compare(p: &Profile, w: &Workload) -> Result<Vec<Step>, AnalyzeError> {
    let fit_qps = (p.rnic.qp_cache_entries / 2 / w.incast.max(1)).max(1);
    let inline_ok = matches!(w.op, Op::Send | Op::Write) && p.rnic.inline_fits(w.size);
    type Tweak = fn(&mut Workload, u32);
    let tweaks: [(&'static str, &str, bool, Tweak); 6] = [
        (
            "unsignaled+cq_moderation",
            "signal_every=64",
            w.signal_every < 64,
            |w, _| w.signal_every = 64,
        ),
        ("inline", "inline=true", inline_ok && !w.inline, |w, _| {
            w.inline = true
        }),
        ("doorbell_batch", "batch=16", w.batch < 16, |w, _| {
            w.batch = 16
        }),
        ("larger_mtu", "mtu=4096", w.mtu < 4096, |w, _| w.mtu = 4096),
        ("fewer_sges", "sges=1", w.sges > 1, |w, _| w.sges = 1),
        ("fewer_qps", "qps=", w.qps > fit_qps, |w, q| w.qps = q),
    ];
    let mut steps = vec![Step {
        name: "baseline",
        change: w.describe(),
        applies: true,
        analysis: analyze(p, w)?,
    }];
    let mut all = w.clone();
    for (name, change, applies, tweak) in tweaks {
        let mut t = w.clone();
        let change = if name == "fewer_qps" {
            format!("{change}{fit_qps}")
        } else {
            change.to_string()
        };
        if applies {
            tweak(&mut t, fit_qps);
            tweak(&mut all, fit_qps);
        }
        let why_not = match name {
            "inline" if !inline_ok => format!(
                "n/a: inline needs send/write of at most {} B",
                p.rnic.max_inline_bytes
            ),
            _ => "n/a: already".to_string(),
        };
        steps.push(Step {
            name,
            change: if applies { change } else { why_not },
            applies,
            analysis: analyze(p, &t)?,
        });
    }
    steps.push(Step {
        name: "all",
        change: "all of the above".into(),
        applies: true,
        analysis: analyze(p, &all)?,
    });
    Ok(steps)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::profile::tests::sample;

    fn run(p: &Profile, kv: &[&str]) -> Analysis {
        analyze(p, &Workload::from_pairs(kv).expect("workload")).expect("analysis")
    }

    /// The sample profile (100G, Gen3 x16) with 256 read tags and 800 ns
    /// read latency, as the shipped Gen3 profile.
    fn gen3() -> Profile {
        let mut p = sample();
        p.pcie.max_outstanding_reads = 256;
        p.pcie.read_latency_ns = 800.0;
        p
    }

    fn bytes_per_msg(a: &Analysis, hop: &str) -> f64 {
        let h = a.hop(hop).expect("hop");
        h.demand_gbps / 8e-9 / a.message_rate_mps / 1e6
    }

    #[test]
    fn message_cost_of_a_4k_write() {
        // Requester: doorbell 32 B + WQE completion 84 B + 64 completions
        // of 64 + 20 B towards the NIC = 5492 B; WQE request 24 + 8 payload
        // requests of 24 + CQE 88 towards the host = 304 B; 9 reads.
        // Responder: 16 writes of 256 + 24 = 4480 B towards the host.
        let c = message_cost(
            &gen3(),
            &Workload::from_pairs(&["op=write", "size=4K"]).unwrap(),
        );
        let (q, r) = (c.requester, c.responder);
        assert_eq!(
            (q.pcie.to_device, q.pcie.to_host, q.pcie_reads),
            (5492.0, 304.0, 9.0)
        );
        assert_eq!((q.memory_bytes, q.cpu_ns, q.misses()), (4096.0, 160.0, 0.0));
        assert!(q.work_request && !r.work_request);
        assert_eq!(
            (r.pcie.to_host, r.pcie.to_device, r.pcie_reads),
            (4480.0, 0.0, 0.0)
        );
        assert_eq!((r.memory_bytes, r.cpu_ns), (4096.0, 0.0));
        assert_eq!((c.data.count, c.data.wire_bytes), (1, 4194));
        // A SEND adds the receive WQE (16 B: 24 up, 36 down) and the
        // receive CQE (88 up) and the receiver's CPU (15 + 40 ns).
        let s = message_cost(
            &gen3(),
            &Workload::from_pairs(&["op=send", "size=4K"]).unwrap(),
        );
        assert_eq!(s.responder.pcie.to_host, 4480.0 + 24.0 + 88.0);
        assert_eq!(s.responder.pcie.to_device, 36.0);
        assert_eq!(s.responder.cpu_ns, 55.0);
    }

    #[test]
    fn hop_names_and_binding_at_full_utilisation() {
        let a = run(&gen3(), &["op=write", "size=64K"]);
        let names: Vec<_> = a.hops.iter().map(|h| h.name).collect();
        assert_eq!(names, HOPS);
        assert!((a.binding_hop().utilisation - 1.0).abs() < 1e-9);
        for h in &a.hops {
            assert!(h.utilisation <= 1.0 + 1e-9, "{}: {}", h.name, h.utilisation);
            assert!((h.demand_gbps - h.capacity_gbps * h.utilisation).abs() < 1e-6);
        }
        assert_eq!(metric("leaf"), "ECN marks, PFC pause, drops");
    }

    #[test]
    fn write_4k_from_200g_nic_in_gen3_x16_binds_on_pcie() {
        // A 200G port (goodput 4096/4194 × 200 = 195.3 Gb/s) behind Gen3
        // x16. Per 4 KiB message the source link carries, towards the NIC,
        // a 32 B doorbell, an 84 B WQE completion and 64 completions of
        // 64 + 20 B (RCB-sized): 5492 B. 113.69 Gb/s × 4096/5492 = 84.8
        // Gb/s. With MPS-sized completions: 32 + 84 + 16 × 276 = 4532 B →
        // 102.75 Gb/s.
        let mut p = gen3();
        p.rnic.port_gbps = 200.0;
        let a = run(&p, &["op=write", "size=4K"]);
        assert_eq!(a.binding_hop().name, "tx_pcie", "{}", a.reason);
        assert!((a.goodput_gbps - 84.79).abs() < 0.05, "{}", a.goodput_gbps);
        assert_eq!(bytes_per_msg(&a, "tx_pcie").round(), 5492.0);
        assert!(a.hop("port").unwrap().utilisation < 0.5);
        p.pcie.completion_split = crate::pcie::CompletionSplit::Mps;
        let a = run(&p, &["op=write", "size=4K"]);
        assert_eq!(a.binding_hop().name, "tx_pcie");
        assert!((a.goodput_gbps - 102.75).abs() < 0.05, "{}", a.goodput_gbps);
        // The same NIC in a Gen4 x16 slot is port-bound.
        p.pcie.generation = crate::pcie::Generation::Gen4;
        let a = run(&p, &["op=write", "size=4K"]);
        assert_eq!(a.binding_hop().name, "port", "{}", a.reason);
    }

    #[test]
    fn small_sends_bind_on_message_rate() {
        // 64 B SENDs, 16 QPs and threads: the port could carry 85.6 Mpps,
        // PCIe 200 B per message towards the NIC (71 M msg/s), the NIC's
        // engine 60 M work requests/s: it binds, at 60 × 64 × 8 = 30.72 Gb/s.
        let a = run(&gen3(), &["op=send", "size=64", "qps=16", "threads=16"]);
        assert_eq!(a.binding_hop().name, "rnic_tx", "{}", a.reason);
        assert!(a.reason.contains("message-rate ceiling"), "{}", a.reason);
        assert!((a.goodput_gbps - 30.72).abs() < 1e-6);
        assert!((a.hop("port").unwrap().demand_mpps - 60.0).abs() < 1e-9);
        // One thread cannot post that fast: 160 ns per message → 6.25 M/s.
        let a = run(&gen3(), &["op=send", "size=64"]);
        assert_eq!(a.binding_hop().name, "cpu_cq", "{}", a.reason);
        assert!((a.message_rate_mps - 6.25).abs() < 1e-9);
    }

    #[test]
    fn two_thousand_qps_fall_off_the_qp_cache() {
        // 1024 cached contexts, 2000 QPs: 48.8 % misses; 8 fetches of
        // 800 ns in flight serve 10 M misses/s → 20.5 M msg/s, a third of
        // the 60 M/s with 16 QPs.
        let p = gen3();
        let few = run(&p, &["op=write", "size=64", "qps=16", "threads=16"]);
        let many = run(&p, &["op=write", "size=64", "qps=2000", "threads=16"]);
        assert_eq!(few.binding_hop().name, "rnic_tx");
        assert!(few.reason.contains("message-rate"), "{}", few.reason);
        assert!(
            many.binding_hop().name.starts_with("rnic_"),
            "{}",
            many.reason
        );
        assert!(many.reason.contains("QP-context"), "{}", many.reason);
        assert!(
            (many.message_rate_mps - 10.0 / 0.488).abs() < 1e-6,
            "{}",
            many.message_rate_mps
        );
        assert!(many.goodput_gbps < few.goodput_gbps / 2.0);
        // The misses are extra PCIe reads: 0.488 × (256 + 4 × 20) B more
        // towards the NIC per message.
        let extra = bytes_per_msg(&many, "tx_pcie") - bytes_per_msg(&few, "tx_pcie");
        assert!((extra - 0.488 * 336.0).abs() < 1e-6, "{extra}");
        // Fewer QPs is the cure.
        let steps = compare(
            &p,
            &Workload::from_pairs(&["op=write", "size=64", "qps=2000", "threads=16"]).unwrap(),
        )
        .unwrap();
        let fewer = steps.iter().find(|s| s.name == "fewer_qps").unwrap();
        assert!(
            fewer.applies && fewer.change == "qps=512",
            "{}",
            fewer.change
        );
        assert!(
            !fewer.analysis.reason.contains("QP-context"),
            "{}",
            fewer.analysis.reason
        );
    }

    #[test]
    fn unsignaled_and_batching_relieve_the_cpu() {
        // One thread, 64 B WRITEs: 20 + 100 + 40 = 160 ns per message.
        // signal_every=64: 20 + 100 + 0.625 = 120.6 ns; batch=16: 20 +
        // 6.25 + 40 = 66.25 ns.
        let p = gen3();
        let base = run(&p, &["op=write", "size=64"]);
        let unsig = run(&p, &["op=write", "size=64", "signal_every=64"]);
        let batch = run(&p, &["op=write", "size=64", "batch=16"]);
        assert_eq!(base.binding_hop().name, "cpu_cq");
        assert!((base.message_rate_mps - 1e3 / 160.0).abs() < 1e-9);
        assert!((unsig.message_rate_mps - 1e3 / 120.625).abs() < 1e-9);
        assert!((batch.message_rate_mps - 1e3 / 66.25).abs() < 1e-9);
        // Fewer CQEs: 88 B less towards the host per message, × 63/64.
        // Fewer doorbells: 32 B × 15/16 less towards the NIC.
        let up = |a: &Analysis| {
            let h = a.hop("tx_pcie").unwrap();
            h.demand_mpps / a.message_rate_mps
        };
        assert!(up(&batch) < up(&base));
    }

    #[test]
    fn inline_skips_the_payload_read() {
        // With 64 tags at 1 µs, two reads per 64 B SEND (WQE + payload)
        // cap PCIe at 32 M msg/s; a BlueFlame push needs no read at all,
        // and the binding moves to the message-rate ceiling.
        let p = sample();
        let kv = ["op=send", "size=64", "qps=16", "threads=16"];
        let base = run(&p, &kv);
        assert_eq!(base.binding_hop().name, "tx_pcie", "{}", base.reason);
        assert!(base.reason.contains("Little"), "{}", base.reason);
        let inl = run(&p, &[&kv[..], &["inline=true"]].concat());
        assert_eq!(inl.binding_hop().name, "rnic_tx", "{}", inl.reason);
        assert_eq!(inl.hop("source_ddr").unwrap().demand_gbps, 0.0);
        assert!(!inl.hop("tx_pcie").unwrap().limit.contains("Little"));
        // Too big to inline: unchanged.
        let big = run(&p, &["op=send", "size=4K", "inline=true"]);
        assert!(big.hop("source_ddr").unwrap().demand_gbps > 0.0);
    }

    #[test]
    fn larger_mtu_cuts_packets() {
        // 64 KiB WRITEs at MTU 256: 256 packets of 338 B → 75.7 Gb/s of
        // goodput at most; at MTU 4096 the port carries 16 packets of 4178.
        let p = gen3();
        let small = run(&p, &["op=write", "size=64K", "mtu=256"]);
        let big = run(&p, &["op=write", "size=64K", "mtu=4096"]);
        assert_eq!(small.binding_hop().name, "port", "{}", small.reason);
        assert!((small.goodput_gbps - 100.0 * 65536.0 / (256.0 * 338.0 + 16.0)).abs() < 1e-6);
        assert!(big.goodput_gbps > small.goodput_gbps);
        let pkts = |a: &Analysis| a.hop("port").unwrap().demand_mpps / a.message_rate_mps;
        assert!((pkts(&small) - 256.0).abs() < 1e-9 && (pkts(&big) - 16.0).abs() < 1e-9);
    }

    #[test]
    fn more_sges_cost_reads_and_descriptor_bytes() {
        // 16 SGEs of 256 B: the WQE grows to 64 + 15 × 16 = 304 → 320 B and
        // the payload takes 16 read requests instead of 8. With 8 tags the
        // reads bind: 8 / 0.8 µs = 10 M reads/s over 17 reads per message.
        let mut p = gen3();
        p.pcie.max_outstanding_reads = 8;
        let one = run(&p, &["op=write", "size=4K"]);
        let many = run(&p, &["op=write", "size=4K", "sges=16"]);
        assert!(bytes_per_msg(&many, "tx_pcie") > bytes_per_msg(&one, "tx_pcie"));
        assert_eq!(many.binding_hop().name, "tx_pcie");
        assert!(
            (many.message_rate_mps - 10.0 / 17.0).abs() < 1e-9,
            "{}",
            many.message_rate_mps
        );
        assert!(
            (one.message_rate_mps - 10.0 / 9.0).abs() < 1e-9,
            "{}",
            one.message_rate_mps
        );
    }

    #[test]
    fn incast_binds_at_the_receiver() {
        // Eight 100G senders into one: the leaf port to the target binds,
        // each source gets an eighth of its goodput.
        let p = gen3();
        let one = run(&p, &["op=write", "size=64K"]);
        let a = run(&p, &["op=write", "size=64K", "incast=8"]);
        assert_eq!(a.binding_hop().name, "leaf", "{}", a.reason);
        assert!((a.total_goodput_gbps - 100.0 * 65536.0 / (16.0 * 4178.0 + 16.0)).abs() < 1e-6);
        assert!(a.goodput_gbps < one.goodput_gbps / 7.0);
        // A target with one slow DDR channel binds before the network.
        let mut q = gen3();
        q.ddr.channels_per_socket = 1;
        q.ddr.mt_per_s = 1600.0;
        q.ddr.efficiency = 0.5;
        let a = run(&q, &["op=write", "size=64K", "incast=8"]);
        assert_eq!(a.binding_hop().name, "target_ddr", "{}", a.reason);
        assert!((a.total_goodput_gbps - 51.2).abs() < 1e-6);
        // The port delivers 100 × 65536 / (16 × 4178 + 16) = 98.01 Gb/s of
        // payload, DDR drains 51.2: the 1 MiB RX buffer fills in
        // 8388608 bits / 46.81 Gb/s = 179.2 µs.
        assert!(
            a.reason.contains("RX buffer fills in 179.2 µs"),
            "{}",
            a.reason
        );
    }

    #[test]
    fn remote_numa_crosses_the_socket_link() {
        let mut p = gen3();
        p.numa.inter_socket_gbps = 50.0;
        let a = run(&p, &["op=write", "size=64K", "numa=remote"]);
        assert_eq!(a.binding_hop().name, "source_ddr", "{}", a.reason);
        assert!((a.goodput_gbps - 50.0).abs() < 1e-6);
        let mut one = p.clone();
        one.numa.sockets = 1;
        let e = analyze(&one, &Workload::from_pairs(&["numa=remote"]).unwrap()).unwrap_err();
        assert_eq!(e, AnalyzeError::NoRemoteSocket(1));
        // 2 sockets × 16 cores.
        let e = analyze(&p, &Workload::from_pairs(&["threads=33"]).unwrap()).unwrap_err();
        assert_eq!(
            e,
            AnalyzeError::TooManyThreads {
                threads: 33,
                cores: 32
            }
        );
        assert!(analyze(&p, &Workload::from_pairs(&["threads=32"]).unwrap()).is_ok());
    }

    #[test]
    fn read_puts_the_requester_on_the_target_side() {
        // For READ the responder sources the data: its PCIe carries the
        // completions; the requester's message engine sits at rnic_rx.
        let p = gen3();
        let a = run(&p, &["op=read", "size=64", "qps=16", "threads=16"]);
        assert_eq!(a.binding_hop().name, "rnic_rx", "{}", a.reason);
        assert!(a.reason.contains("message-rate"), "{}", a.reason);
        let at = run(&p, &["op=atomic", "qps=16", "threads=16"]);
        assert!((at.goodput_gbps - at.message_rate_mps * 64e-3).abs() < 1e-9);
        // ATOMIC, responder (source) link towards the host: the 8-byte read
        // request (24 B) and the write-back (16 + 8 + 8 = 32 B) = 56 B.
        // Requester (target): WQE read request 24 + result write 32 + CQE
        // 16 + 8 + 64 = 88 → 144 B towards the host.
        assert!((bytes_per_msg(&at, "tx_pcie") - 56.0).abs() < 1e-6);
        assert!((bytes_per_msg(&at, "rx_pcie") - 144.0).abs() < 1e-6);
    }

    #[test]
    fn sweep_finds_where_the_binding_changes() {
        let p = gen3();
        let w = Workload::from_pairs(&["op=write", "qps=16", "threads=16"]).unwrap();
        let sizes = sizes_pow2(64, 4 << 20);
        assert_eq!(
            (sizes[0], *sizes.last().unwrap(), sizes.len()),
            (64, 4 << 20, 17)
        );
        let pts = sweep(&p, &w, &sizes).unwrap();
        let ch = binding_changes(&pts);
        assert!(!ch.is_empty());
        assert_eq!(pts[0].analysis.binding_hop().name, "rnic_tx");
        assert_ne!(pts.last().unwrap().analysis.binding_hop().name, "rnic_tx");
        assert_eq!(ch[0].2, "rnic_tx");
    }

    #[test]
    fn compare_lists_every_optimisation() {
        let p = gen3();
        let w = Workload::from_pairs(&["op=send", "size=64", "qps=2000", "sges=2", "mtu=1024"])
            .unwrap();
        let steps = compare(&p, &w).unwrap();
        let names: Vec<_> = steps.iter().map(|s| s.name).collect();
        assert_eq!(
            names,
            [
                "baseline",
                "unsignaled+cq_moderation",
                "inline",
                "doorbell_batch",
                "larger_mtu",
                "fewer_sges",
                "fewer_qps",
                "all"
            ]
        );
        assert!(steps.iter().all(|s| s.applies));
        let all = steps.last().unwrap();
        assert!(all.analysis.goodput_gbps > steps[0].analysis.goodput_gbps);
    }
}
