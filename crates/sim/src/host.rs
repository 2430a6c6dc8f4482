//! The host data path between an RNIC and its memory: the half of the
//! reference text's path (§3, §5.1–5.3, §5.7–5.8) that lies outside the
//! fabric.
//!
//! Without a profile a simulated host is an RNIC feeding its port
//! directly. With one, every packet pays its way through the host:
//!
//! * **transmit** (§3.2, §5.2, §5.3): the RNIC's packetizer takes a packet
//!   at most every `1 / message rate`; it looks the QP up in its
//!   QP-context cache and the MR in its translation cache (a miss is an
//!   extra PCIe read that stalls the packetizer: the throughput cliff of
//!   many QPs); the first packet of a WQE fetches the WQE over PCIe unless
//!   it was pushed inline; the payload is read from the source DDR in
//!   MRRS-sized non-posted reads, each holding one of a limited number of
//!   tags for a read round trip, so bandwidth is capped both by the link
//!   and by Little's law (tags × MRRS / latency);
//! * **receive** (§3.3, §5.7): an arriving data packet waits in a finite
//!   RX buffer while its DMA write crosses PCIe and lands in the target
//!   DDR; a buffer the host cannot drain back-pressures the ToR with PFC
//!   on a lossless priority, or drops (counted as RX drops) without;
//! * **completions** (§1.6, §5.8): each CQE costs the CPU time to poll it,
//!   with one poll per `cq_moderation` CQEs.
//!
//! Every resource is a FIFO server with a `free_at` time, advanced in
//! closed form as packets pass: no events are needed except to wake the
//! port when a packet's DMA finishes and to send XON when the RX buffer
//! drains. The costs (per-byte times, latencies, sizes) come from
//! `roce_host`, the crate `roce analyze` uses, so the simulator and the
//! analyst cannot disagree on a formula.

use crate::event::Ps;
use serde::Serialize;
use std::collections::{BTreeMap, HashMap, VecDeque};

/// What a host's data path costs: resolved from a hardware profile (and a
/// scenario's per-host overrides) before the run. Times are picoseconds;
/// `*_ps_per_byte` are the inverse of an effective bandwidth that already
/// counts every protocol overhead (TLP headers, DLLPs, line encoding).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct HostParams {
    /// Profile name, for the report.
    pub profile: String,
    /// Packetizer time per packet: 1 / the RNIC's message-rate ceiling.
    pub rnic_pkt_ps: Ps,
    /// PCIe device-to-host (DMA write) time per payload byte.
    pub pcie_write_ps_per_byte: f64,
    /// PCIe host-to-device (read completion) time per payload byte.
    pub pcie_read_ps_per_byte: f64,
    /// Upstream time of one read request TLP.
    pub pcie_read_req_ps: Ps,
    /// Round trip of a non-posted read, request to last completion byte
    /// excluded (includes the NUMA hop when buffers are remote).
    pub read_latency_ps: Ps,
    /// Outstanding non-posted reads (tags / completion credits).
    pub read_tags: usize,
    /// Max read request size.
    pub mrrs: u32,
    /// Source DDR read time per byte (through the inter-socket link when
    /// buffers are remote).
    pub ddr_read_ps_per_byte: f64,
    /// Target DDR write time per byte.
    pub ddr_write_ps_per_byte: f64,
    /// Bytes of a WQE fetched per WQE (0 with inline).
    pub wqe_bytes: u32,
    /// Messages up to this size are pushed inline with the doorbell and
    /// skip both the WQE fetch and the payload read.
    pub inline_max: u32,
    /// QP contexts the RNIC caches (0: unlimited).
    pub qp_cache_entries: usize,
    /// Bytes read over PCIe on a QP-context miss.
    pub qp_context_bytes: u32,
    /// MR translations (MPT entries) cached (0: unlimited).
    pub mr_cache_entries: usize,
    /// Bytes read over PCIe on a translation miss.
    pub mr_entry_bytes: u32,
    /// RX buffer bytes.
    pub rx_buffer_bytes: u64,
    /// Bytes written over PCIe per CQE.
    pub cqe_bytes: u32,
    /// CPU time to process one CQE.
    pub cqe_cpu_ps: Ps,
    /// CPU time of one poll of the CQ (paid once per `cq_moderation` CQEs).
    pub poll_cpu_ps: Ps,
    /// CQEs handled per poll.
    pub cq_moderation: u32,
    /// Capacities for the report (Gb/s of payload, Mpps).
    pub caps: HostCaps,
}

/// Closed-form capacities of each host hop, for utilisation in the report
/// (from `roce_host`).
#[derive(Debug, Clone, Copy, PartialEq, Default, Serialize)]
pub struct HostCaps {
    pub source_ddr_gbps: f64,
    pub tx_pcie_gbps: f64,
    pub rnic_mpps: f64,
    pub rx_pcie_gbps: f64,
    pub target_ddr_gbps: f64,
}

/// The host profile of a run: every host's costs, with per-host overrides.
#[derive(Debug, Clone, PartialEq)]
pub struct HostPlan {
    pub default: HostParams,
    /// Hosts (by index) with other costs.
    pub per_host: BTreeMap<u32, HostParams>,
}

impl HostPlan {
    pub fn params(&self, host: u32) -> &HostParams {
        self.per_host.get(&host).unwrap_or(&self.default)
    }
}

/// A packet the RNIC handed out whose payload is still being read.
#[derive(Debug, Clone, Copy)]
pub struct Staged {
    /// When its DMA read and packetizing are done.
    pub ready: Ps,
    pub pkt: u32,
    pub prio: u8,
    pub frame: u32,
    pub markable: bool,
}

/// A FIFO server: one transfer at a time, in the order they are offered.
#[derive(Debug, Clone, Default)]
struct Server {
    free_at: Ps,
    busy: Ps,
}

impl Server {
    /// Serves `dur` starting no earlier than `at`; returns the end.
    #[inline]
    fn serve(&mut self, at: Ps, dur: Ps) -> Ps {
        let s = at.max(self.free_at);
        self.free_at = s + dur;
        self.busy += dur;
        self.free_at
    }
}

#[inline]
fn bytes_ps(bytes: u64, ps_per_byte: f64) -> Ps {
    (bytes as f64 * ps_per_byte).ceil() as Ps
}

/// A least-recently-used set of keys (QPNs, memory keys): what an RNIC's
/// on-chip context caches hold. `touch` is O(log n).
#[derive(Debug, Clone, Default)]
struct Lru {
    cap: usize,
    stamp: u64,
    at: HashMap<u32, u64>,
    order: BTreeMap<u64, u32>,
    hits: u64,
    misses: u64,
}

impl Lru {
    fn new(cap: usize) -> Self {
        Lru {
            cap,
            ..Default::default()
        }
    }

    /// Looks `key` up, inserting it (and evicting the least recently used
    /// key when full); true on a hit. Capacity 0 always hits.
    fn touch(&mut self, key: u32) -> bool {
        if self.cap == 0 {
            self.hits += 1;
            return true;
        }
        self.stamp += 1;
        let s = self.stamp;
        match self.at.insert(key, s) {
            Some(old) => {
                self.order.remove(&old);
                self.order.insert(s, key);
                self.hits += 1;
                true
            }
            None => {
                self.order.insert(s, key);
                if self.at.len() > self.cap
                    && let Some((_, k)) = self.order.pop_first()
                {
                    self.at.remove(&k);
                }
                self.misses += 1;
                false
            }
        }
    }
}

/// What a data packet about to be transmitted needs from the host.
#[derive(Debug, Clone, Copy)]
pub struct TxPacket {
    pub qpn: u32,
    /// Memory key of the source buffer.
    pub mr_key: u32,
    pub payload: u32,
    /// First packet of a WQE (fetches the WQE).
    pub first: bool,
    /// Total size of the WQE's message (decides inline).
    pub message: u64,
}

/// A host's data-path state and what it measured.
#[derive(Debug, Clone)]
pub struct HostPath {
    pub p: HostParams,
    rnic: Server,
    /// Host-to-device direction of the PCIe link (read completions).
    down: Server,
    /// Device-to-host direction (read requests, DMA writes, CQEs).
    up: Server,
    src_ddr: Server,
    dst_ddr: Server,
    cpu: Server,
    /// Completion times of outstanding reads (non-decreasing: the link is
    /// FIFO).
    tags: VecDeque<Ps>,
    tag_busy: Ps,
    qpc: Lru,
    mrc: Lru,
    /// Last ready time handed out (packets leave in order).
    last_ready: Ps,
    /// RX buffer: (time the DMA write is done, frame bytes) in order.
    rx: VecDeque<(Ps, u32)>,
    rx_bytes: u64,
    pub rx_xoff: bool,
    /// Moderation counter.
    cqes_since_poll: u32,
    /// Packets between the RNIC and the port, in order.
    pub pipe: VecDeque<Staged>,
    /// Most packets in `pipe` (enough to keep every tag busy).
    pub pipe_depth: usize,
    /// A port wake-up is scheduled for this time.
    pub wake_at: Option<Ps>,
    /// RX-buffer levels that send XOFF and XON (lossless data priority).
    pub xoff_at: u64,
    pub xon_at: u64,
    pub xoff_prio: u8,
    pub lossless: bool,
    // Measured.
    pub tx_pkts: u64,
    pub rx_pkts: u64,
    pub read_bytes: u64,
    pub write_bytes: u64,
    pub reads: u64,
    read_latency_sum: Ps,
    pub wqe_fetches: u64,
    pub rx_drops: u64,
    pub rx_peak: u64,
    pub cqes: u64,
    pub polls: u64,
    pub first_use: Option<Ps>,
    pub last_use: Ps,
}

impl HostPath {
    pub fn new(p: HostParams) -> Self {
        HostPath {
            qpc: Lru::new(p.qp_cache_entries),
            mrc: Lru::new(p.mr_cache_entries),
            p,
            rnic: Server::default(),
            down: Server::default(),
            up: Server::default(),
            src_ddr: Server::default(),
            dst_ddr: Server::default(),
            cpu: Server::default(),
            tags: VecDeque::new(),
            tag_busy: 0,
            last_ready: 0,
            rx: VecDeque::new(),
            rx_bytes: 0,
            rx_xoff: false,
            cqes_since_poll: 0,
            pipe: VecDeque::new(),
            pipe_depth: 1,
            wake_at: None,
            xoff_at: u64::MAX,
            xon_at: u64::MAX,
            xoff_prio: 0,
            lossless: false,
            tx_pkts: 0,
            rx_pkts: 0,
            read_bytes: 0,
            write_bytes: 0,
            reads: 0,
            read_latency_sum: 0,
            wqe_fetches: 0,
            rx_drops: 0,
            rx_peak: 0,
            cqes: 0,
            polls: 0,
            first_use: None,
            last_use: 0,
        }
    }

    fn used(&mut self, t: Ps) {
        self.first_use.get_or_insert(t);
        self.last_use = self.last_use.max(t);
    }

    /// One non-posted read of `bytes` (≤ MRRS) issued no earlier than
    /// `at`: it waits for a tag, its request goes up, the source DDR and
    /// the read round trip run, and the completion data comes down the
    /// link. Returns when the last byte arrived.
    fn read(&mut self, at: Ps, bytes: u32, ddr: bool) -> Ps {
        let mut t = at;
        if self.tags.len() >= self.p.read_tags.max(1) {
            let free = self.tags.pop_front().unwrap_or(0);
            t = t.max(free);
        }
        while self.tags.front().is_some_and(|&d| d <= t) {
            self.tags.pop_front();
        }
        let issued = self.up.serve(t, self.p.pcie_read_req_ps);
        let mut data_at = issued + self.p.read_latency_ps;
        if ddr {
            let d = self
                .src_ddr
                .serve(issued, bytes_ps(u64::from(bytes), self.p.ddr_read_ps_per_byte));
            data_at = data_at.max(d);
        }
        let done = self.down.serve(
            data_at,
            bytes_ps(u64::from(bytes), self.p.pcie_read_ps_per_byte),
        );
        self.tags.push_back(done);
        self.tag_busy += done - t;
        self.reads += 1;
        self.read_latency_sum += done - t;
        self.read_bytes += u64::from(bytes);
        done
    }

    /// A data packet the RNIC hands out at `now`: when it is ready for the
    /// port (its payload read and packetized).
    pub fn tx_data(&mut self, now: Ps, pk: TxPacket) -> Ps {
        self.used(now);
        self.tx_pkts += 1;
        let start = now.max(self.rnic.free_at);
        let mut t = start;
        // Context lookups stall the packetizer until the entry is back.
        if !self.qpc.touch(pk.qpn) {
            t = self.read(t, self.p.qp_context_bytes, false);
        }
        if !self.mrc.touch(pk.mr_key) {
            t = self.read(t, self.p.mr_entry_bytes, false);
        }
        let inline = pk.message <= u64::from(self.p.inline_max);
        if pk.first && !inline && self.p.wqe_bytes > 0 {
            self.wqe_fetches += 1;
            t = self.read(t, self.p.wqe_bytes, false);
        }
        // The packetizer is busy for the stall plus one packet time; the
        // payload reads pipeline behind it, limited by the tags.
        let slot = t + self.p.rnic_pkt_ps;
        self.rnic.busy += slot - start;
        self.rnic.free_at = slot;
        let mut ready = slot;
        if !inline {
            let mut left = pk.payload;
            while left > 0 {
                let b = left.min(self.p.mrrs.max(1));
                ready = ready.max(self.read(t, b, true));
                left -= b;
            }
        }
        ready = ready.max(self.last_ready);
        self.last_ready = ready;
        self.used(ready);
        ready
    }

    /// A control packet (ACK, NAK, CNP): it takes a packetizer slot but
    /// reads nothing, and is not held back.
    pub fn tx_control(&mut self, now: Ps) {
        self.tx_pkts += 1;
        let s = now.max(self.rnic.free_at);
        self.rnic.free_at = s + self.p.rnic_pkt_ps;
        self.rnic.busy += self.p.rnic_pkt_ps;
    }

    /// RX-buffer bytes still waiting for their DMA write at `now`.
    pub fn rx_occupancy(&mut self, now: Ps) -> u64 {
        while let Some(&(d, b)) = self.rx.front() {
            if d > now {
                break;
            }
            self.rx.pop_front();
            self.rx_bytes -= u64::from(b);
        }
        self.rx_bytes
    }

    /// When the RX buffer will hold at most `level` bytes (now if it does).
    pub fn rx_drained_to(&self, level: u64) -> Option<Ps> {
        let mut left = self.rx_bytes;
        if left <= level {
            return None;
        }
        for &(d, b) in &self.rx {
            left -= u64::from(b);
            if left <= level {
                return Some(d);
            }
        }
        self.rx.back().map(|x| x.0)
    }

    /// A data packet of `frame` bytes carrying `payload` arrived at `now`
    /// for `qpn`: `false` if the RX buffer has no room (an RX drop).
    /// Otherwise the packet is placed by DMA write (after a QP-context
    /// lookup) and holds its buffer space until the write is done.
    pub fn rx_data(&mut self, now: Ps, qpn: u32, frame: u32, payload: u32) -> bool {
        self.used(now);
        let occ = self.rx_occupancy(now);
        if occ + u64::from(frame) > self.p.rx_buffer_bytes {
            self.rx_drops += 1;
            return false;
        }
        self.rx_pkts += 1;
        let mut t = now;
        if !self.qpc.touch(qpn) {
            t = self.read(t, self.p.qp_context_bytes, false);
        }
        let b = u64::from(payload);
        let link = self.up.serve(t, bytes_ps(b, self.p.pcie_write_ps_per_byte));
        let ddr = self
            .dst_ddr
            .serve(t, bytes_ps(b, self.p.ddr_write_ps_per_byte));
        let done = link.max(ddr);
        self.write_bytes += b;
        self.rx.push_back((done, frame));
        self.rx_bytes += u64::from(frame);
        self.rx_peak = self.rx_peak.max(self.rx_bytes);
        self.used(done);
        true
    }

    /// A CQE generated at `now`: its PCIe write, then the CPU polls it.
    /// Returns when the application has seen it.
    pub fn cqe(&mut self, now: Ps) -> Ps {
        self.cqes += 1;
        let w = self
            .up
            .serve(now, bytes_ps(u64::from(self.p.cqe_bytes), self.p.pcie_write_ps_per_byte));
        let mut cost = self.p.cqe_cpu_ps;
        if self.cqes_since_poll == 0 {
            self.polls += 1;
            cost += self.p.poll_cpu_ps;
        }
        self.cqes_since_poll = (self.cqes_since_poll + 1) % self.p.cq_moderation.max(1);
        let seen = self.cpu.serve(w, cost);
        self.used(seen);
        seen
    }

    /// What this host measured.
    pub fn measured(&self, host: u32, port_tx_bytes: u64, port_bps: u64) -> HostMeasured {
        let span = self
            .first_use
            .map_or(0, |f| self.last_use.saturating_sub(f))
            .max(1) as f64;
        let gbps = |bytes: u64| bytes as f64 * 8.0 / span * 1e3;
        let tags = self.p.read_tags.max(1) as f64;
        HostMeasured {
            host,
            active_us: span / 1e6,
            source_ddr_gbps: gbps(self.read_bytes),
            source_ddr_util: self.src_ddr.busy as f64 / span,
            tx_pcie_gbps: gbps(self.read_bytes),
            tx_pcie_util: (self.down.busy as f64 / span).max(self.tag_busy as f64 / (tags * span)),
            read_latency_ns: if self.reads > 0 {
                self.read_latency_sum as f64 / self.reads as f64 / 1e3
            } else {
                0.0
            },
            rnic_mpps: self.tx_pkts as f64 / span * 1e6,
            rnic_util: self.rnic.busy as f64 / span,
            qp_cache_miss_rate: rate(self.qpc.misses, self.qpc.hits),
            mr_cache_miss_rate: rate(self.mrc.misses, self.mrc.hits),
            wqe_fetches: self.wqe_fetches,
            port_util: port_tx_bytes as f64 * 8.0 / port_bps.max(1) as f64 / span * 1e12,
            rx_pcie_gbps: gbps(self.write_bytes),
            rx_pcie_util: self.up.busy as f64 / span,
            rx_drops: self.rx_drops,
            rx_buffer_peak: self.rx_peak,
            target_ddr_gbps: gbps(self.write_bytes),
            target_ddr_util: self.dst_ddr.busy as f64 / span,
            cqes: self.cqes,
            polls: self.polls,
            cpu_util: self.cpu.busy as f64 / span,
            cq_cost_ns_per_cqe: if self.cqes > 0 {
                self.cpu.busy as f64 / self.cqes as f64 / 1e3
            } else {
                0.0
            },
        }
    }
}

fn rate(miss: u64, hit: u64) -> f64 {
    if miss + hit == 0 {
        0.0
    } else {
        miss as f64 / (miss + hit) as f64
    }
}

/// One host's measured data path (the host rows of the §5.9 table).
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct HostMeasured {
    pub host: u32,
    /// From the host's first to its last data-path activity.
    pub active_us: f64,
    pub source_ddr_gbps: f64,
    pub source_ddr_util: f64,
    pub tx_pcie_gbps: f64,
    /// The larger of the link's busy fraction and the tags' occupancy.
    pub tx_pcie_util: f64,
    /// Mean read round trip, tag wait to last byte.
    pub read_latency_ns: f64,
    pub rnic_mpps: f64,
    pub rnic_util: f64,
    pub qp_cache_miss_rate: f64,
    pub mr_cache_miss_rate: f64,
    pub wqe_fetches: u64,
    pub port_util: f64,
    pub rx_pcie_gbps: f64,
    pub rx_pcie_util: f64,
    pub rx_drops: u64,
    pub rx_buffer_peak: u64,
    pub target_ddr_gbps: f64,
    pub target_ddr_util: f64,
    pub cqes: u64,
    pub polls: u64,
    pub cpu_util: f64,
    pub cq_cost_ns_per_cqe: f64,
}

/// A host's data path on a port of `rate_bps` and `delay_ps` to its ToR:
/// the staging depth that keeps every read tag busy, and the RX-buffer
/// levels for PFC (XOFF leaves room for what is still in flight when the
/// pause takes effect, as a switch's headroom does).
pub fn attach(
    p: HostParams,
    cfg: &crate::sim::SimConfig,
    rate_bps: u64,
    delay_ps: Ps,
    max_frame: u64,
) -> HostPath {
    let mut h = HostPath::new(p);
    let mtu = u64::from(cfg.mtu.bytes());
    let in_flight = (h.p.read_tags as u64 * u64::from(h.p.mrrs)).div_ceil(mtu) as usize;
    h.pipe_depth = cfg.nic_staging_pkts.max(in_flight + 2);
    h.lossless = cfg.buffer.lossless & (1 << cfg.data_prio) != 0;
    h.xoff_prio = cfg.data_prio;
    let headroom = crate::pfc::auto_headroom(rate_bps, delay_ps, max_frame);
    h.xoff_at = h.p.rx_buffer_bytes.saturating_sub(headroom);
    h.xon_at = h.xoff_at.saturating_sub(cfg.buffer.xon_offset_bytes);
    h
}
