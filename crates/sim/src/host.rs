//! The host data path between an RNIC and its memory: the half of the
//! reference text's path (§3, §5.1–5.3, §5.7–5.8) that lies outside the
//! fabric.
//!
//! Without a profile a simulated host is an RNIC feeding its port
//! directly. With one, every packet pays its way through the host:
//!
//! * **transmit** (§3.2, §3.6, §5.2, §5.3): the WQE engine takes a message
//!   at most every `1 / message rate`, the packetizer a packet every
//!   `1 / packet rate`; the first packet of a message waits for its WQE
//!   (a PCIe read; the next WQE of a QP is prefetched while one runs; a
//!   lone inline WQE is pushed by MMIO instead); each packet looks its QP
//!   up in an LRU QP-context cache and each page it reads in an LRU
//!   translation cache — a miss is a PCIe read of the entry, a few in
//!   flight at once, so round robin over more QPs than the cache holds
//!   falls to the miss-service rate (the cliff of §5.3); the payload is
//!   read from the source DDR in MRRS-sized non-posted reads, each holding
//!   one of a limited number of tags for its round trip, so bandwidth is
//!   capped by the link and by Little's law (tags × MRRS / latency);
//! * **receive** (§3.3, §5.7): an arriving data packet waits in a finite
//!   RX buffer, in order, until its QP context is present and its DMA
//!   write has crossed PCIe and landed in the target DDR; a buffer the host
//!   cannot drain pauses the ToR with PFC on a lossless priority, or drops
//!   (RX drops) without;
//! * **completions** (§1.6, §5.8): each CQE is a PCIe write and the CPU's
//!   time to poll it; posting WQEs and receive WQEs costs CPU time too.
//!
//! PCIe directions and the memory are timelines that book each transfer in
//! the first idle gap at or after it is wanted (transfers are offered in
//! event order, not time order); engines are FIFO servers; tags and fetch
//! slots are pools. All advance in closed form as packets pass: no events
//! are needed but one to wake the port when a staged packet's DMA is done
//! and one to send XON when the RX buffer drains. The costs come from
//! `roce_host` (`Pcie::dma_read`/`dma_write` per transfer, the RNIC's and
//! CPU's figures, DDR and NUMA bandwidth), the crate `roce analyze` uses,
//! so the simulator and the analyst share every formula; the tests in
//! `tests/host_path.rs` hold the two within 10 % on single-bottleneck runs.

use crate::event::Ps;
use serde::Serialize;
use std::collections::{BTreeMap, HashMap, VecDeque};

/// What a host's data path costs, resolved from a hardware profile (and a
/// scenario's per-host overrides) before the run. Link times come from
/// [`roce_host::Pcie::dma_read`] / [`dma_write`](roce_host::Pcie::dma_write)
/// per transfer, so TLP headers, completion splitting and DLLP overhead are
/// the analyst's.
#[derive(Debug, Clone, PartialEq)]
pub struct HostParams {
    /// Profile name, for the report.
    pub profile: String,
    pub pcie: roce_host::Pcie,
    /// Per-direction TLP bandwidth of the link, Gb/s.
    pub tlp_gbps: f64,
    /// Round trip of a non-posted read, plus the NUMA hop when buffers
    /// are remote.
    pub read_latency_ps: Ps,
    /// Outstanding payload reads (tags).
    pub read_tags: usize,
    /// WQE engine time per message: 1 / message-rate ceiling.
    pub msg_ps: Ps,
    /// Packetizer (and receive parser) time per packet: 1 / packet rate.
    pub pkt_ps: Ps,
    /// Memory time per byte (reads and writes share the socket's DDR;
    /// through the inter-socket link when buffers are remote).
    pub mem_ps_per_byte: f64,
    /// Bytes of the WQE fetched per message.
    pub wqe_bytes: u64,
    /// Bytes of a receive WQE fetched per received SEND.
    pub recv_wqe_bytes: u64,
    /// The profile's RNIC (inline WQE sizes, doorbell record).
    pub rnic: roce_host::rnic::Rnic,
    /// Messages up to this size are pushed inline (0: inline off).
    pub inline_max: u64,
    pub qp_cache_entries: usize,
    pub qp_context_bytes: u64,
    pub mr_cache_entries: usize,
    pub mtt_entry_bytes: u64,
    /// Translations one miss fetches: a 64-byte line of MTT entries (a
    /// streaming buffer then misses once per line of pages, not per page).
    pub mtt_per_fetch: u64,
    /// Pages of the translation granularity, bytes; a translation
    /// cache line covers `page_bytes × mtt_per_fetch`.
    pub page_bytes: u64,
    /// Context and translation fetches in flight at once.
    pub context_fetches: usize,
    pub rx_buffer_bytes: u64,
    pub cqe_bytes: u64,
    /// CPU time to poll and handle one CQE.
    pub poll_cqe_ps: Ps,
    /// CPU time to build one WQE, and to ring a doorbell.
    pub post_wqe_ps: Ps,
    pub doorbell_ps: Ps,
    /// CPU time to post one receive WQE.
    pub post_recv_ps: Ps,
    /// Closed-form capacities, for utilisation in the report.
    pub caps: HostCaps,
}

/// Bytes of translations (MTT entries) fetched per miss: one cache line,
/// the unit a DMA read of host memory returns at once.
pub const MTT_FETCH_BYTES: u64 = 64;

/// Knobs of the workload a host runs that the profile does not fix.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct HostKnobs {
    /// Push messages that fit inline.
    pub inline: bool,
    pub numa: roce_host::Placement,
    /// Scatter/gather entries per WQE.
    pub sges: u32,
}

fn ps_of_ns(ns: f64) -> Ps {
    (ns * 1e3).round() as Ps
}

impl HostParams {
    /// The costs of a host built as `p` describes, running `k`.
    pub fn from_profile(p: &roce_host::Profile, k: HostKnobs) -> HostParams {
        let mem_gbps = p.numa.dma_memory_gbps(k.numa, p.ddr.socket_gbps());
        let tlp_gbps = p.pcie.tlp_gbps();
        let r = &p.rnic;
        HostParams {
            profile: p.name.clone(),
            pcie: p.pcie.clone(),
            tlp_gbps,
            read_latency_ps: ps_of_ns(p.pcie.read_latency_ns + p.numa.extra_latency_ns(k.numa)),
            read_tags: p.pcie.max_outstanding_reads.max(1) as usize,
            msg_ps: ps_of_ns(1e3 / r.message_rate_mpps),
            pkt_ps: ps_of_ns(1e3 / r.packet_rate_mpps),
            mem_ps_per_byte: 8e3 / mem_gbps,
            wqe_bytes: r.wqe_fetch_bytes(k.sges.max(1)),
            recv_wqe_bytes: r.recv_wqe_bytes(k.sges.max(1)),
            rnic: r.clone(),
            inline_max: if k.inline {
                u64::from(r.max_inline_bytes)
            } else {
                0
            },
            qp_cache_entries: r.qp_cache_entries as usize,
            qp_context_bytes: u64::from(r.qp_context_bytes),
            mr_cache_entries: r.mr_cache_entries as usize,
            mtt_entry_bytes: u64::from(r.mtt_entry_bytes),
            mtt_per_fetch: (MTT_FETCH_BYTES / u64::from(r.mtt_entry_bytes.max(1))).max(1),
            page_bytes: u64::from(r.page_bytes).max(1),
            context_fetches: r.context_fetches_outstanding.max(1) as usize,
            rx_buffer_bytes: r.rx_buffer_bytes(),
            cqe_bytes: u64::from(r.cqe_bytes),
            poll_cqe_ps: ps_of_ns(p.cpu.poll_cqe_ns),
            post_wqe_ps: ps_of_ns(p.cpu.post_wqe_ns),
            doorbell_ps: ps_of_ns(p.cpu.doorbell_ns),
            post_recv_ps: ps_of_ns(p.cpu.post_recv_ns),
            caps: HostCaps {
                memory_gbps: mem_gbps,
                pcie_tlp_gbps: tlp_gbps,
                message_mpps: r.message_rate_mpps,
                packet_mpps: r.packet_rate_mpps,
            },
        }
    }

    /// Link time of `bytes` of TLPs.
    #[inline]
    fn link_ps(&self, bytes: f64) -> Ps {
        (bytes * 8e3 / self.tlp_gbps).ceil() as Ps
    }
}

/// Closed-form capacities of a host's resources (from `roce_host`).
#[derive(Debug, Clone, Copy, PartialEq, Default, Serialize)]
pub struct HostCaps {
    pub memory_gbps: f64,
    pub pcie_tlp_gbps: f64,
    pub message_mpps: f64,
    pub packet_mpps: f64,
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

/// A link or memory channel that serves transfers as early as it can:
/// a transfer wanting to start at `at` takes the first idle gap of its
/// length from then on. Transfers are offered in event order but not in
/// time order (a packet's payload read is booked before the next packet's
/// earlier WQE fetch), so a plain FIFO would make the fetch wait behind a
/// read that starts later; a timeline of busy intervals does not.
#[derive(Debug, Clone, Default)]
struct Timeline {
    /// Disjoint busy intervals `[start, end)`, sorted, adjacent ones merged.
    iv: VecDeque<(Ps, Ps)>,
    busy: Ps,
}

impl Timeline {
    /// Books `dur` at the first gap at or after `at` (`at` ≥ `now`, and
    /// `now` never goes back); returns the end.
    fn serve(&mut self, now: Ps, at: Ps, dur: Ps) -> Ps {
        while self.iv.front().is_some_and(|&(_, e)| e <= now) {
            self.iv.pop_front();
        }
        if dur == 0 {
            return at;
        }
        self.busy += dur;
        // Fast path: after everything booked.
        match self.iv.back_mut() {
            None => {
                self.iv.push_back((at, at + dur));
                return at + dur;
            }
            Some(last) if at >= last.1 => {
                if at == last.1 {
                    last.1 += dur;
                } else {
                    self.iv.push_back((at, at + dur));
                }
                return at + dur;
            }
            _ => {}
        }
        let mut i = self.iv.partition_point(|&(_, e)| e <= at);
        let mut start = at;
        while i < self.iv.len() {
            let (s, e) = self.iv[i];
            if start + dur <= s {
                break;
            }
            start = start.max(e);
            i += 1;
        }
        let end = start + dur;
        // Insert at `i`, merging with the neighbours it touches.
        let touches_prev = i > 0 && self.iv[i - 1].1 == start;
        let touches_next = i < self.iv.len() && self.iv[i].0 == end;
        match (touches_prev, touches_next) {
            (true, true) => {
                self.iv[i - 1].1 = self.iv[i].1;
                self.iv.remove(i);
            }
            (true, false) => self.iv[i - 1].1 = end,
            (false, true) => self.iv[i].0 = start,
            (false, false) => self.iv.insert(i, (start, end)),
        }
        end
    }
}

#[inline]
fn bytes_ps(bytes: u64, ps_per_byte: f64) -> Ps {
    (bytes as f64 * ps_per_byte).ceil() as Ps
}

/// A multiplicative hash for small integer keys (QPNs, memory keys):
/// the per-packet lookups of a profile run would spend most of their time
/// in SipHash otherwise. Deterministic: no per-process seed.
#[derive(Debug, Clone, Copy, Default)]
struct IntHash(u64);

impl std::hash::Hasher for IntHash {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = (self.0.rotate_left(8) ^ u64::from(b)).wrapping_mul(0x9e37_79b9_7f4a_7c15);
        }
    }
    fn write_u32(&mut self, x: u32) {
        self.write_u64(u64::from(x));
    }
    fn write_u64(&mut self, x: u64) {
        self.0 = (self.0 ^ x).wrapping_mul(0x9e37_79b9_7f4a_7c15);
        self.0 ^= self.0 >> 29;
    }
}

type IntMap<K, V> = HashMap<K, V, std::hash::BuildHasherDefault<IntHash>>;

/// Slab index meaning "none" in the LRU's list.
const NIL: u32 = u32::MAX;

/// A least-recently-used set of keys (QPNs, memory keys): what an RNIC's
/// on-chip context caches hold. A map to slots of a doubly linked list in
/// recency order, so `touch` is O(1).
#[derive(Debug, Clone, Default)]
struct Lru {
    cap: usize,
    at: IntMap<u64, u32>,
    /// (key, prev, next); `head` is the most recent.
    slots: Vec<(u64, u32, u32)>,
    head: u32,
    tail: u32,
    hits: u64,
    misses: u64,
}

impl Lru {
    fn new(cap: usize) -> Self {
        Lru {
            cap,
            head: NIL,
            tail: NIL,
            ..Default::default()
        }
    }

    fn unlink(&mut self, i: u32) {
        let (_, prev, next) = self.slots[i as usize];
        match prev {
            NIL => self.head = next,
            p => self.slots[p as usize].2 = next,
        }
        match next {
            NIL => self.tail = prev,
            n => self.slots[n as usize].1 = prev,
        }
    }

    fn push_front(&mut self, i: u32) {
        self.slots[i as usize].1 = NIL;
        self.slots[i as usize].2 = self.head;
        if self.head != NIL {
            self.slots[self.head as usize].1 = i;
        }
        self.head = i;
        if self.tail == NIL {
            self.tail = i;
        }
    }

    /// Looks `key` up, inserting it (and evicting the least recently used
    /// key when full); true on a hit. Capacity 0 always hits.
    fn touch(&mut self, key: u64) -> bool {
        if self.cap == 0 {
            self.hits += 1;
            return true;
        }
        if let Some(&i) = self.at.get(&key) {
            if self.head != i {
                self.unlink(i);
                self.push_front(i);
            }
            self.hits += 1;
            return true;
        }
        self.misses += 1;
        let i = if self.slots.len() < self.cap {
            self.slots.push((key, NIL, NIL));
            (self.slots.len() - 1) as u32
        } else {
            // Reuse the least recently used slot.
            let i = self.tail;
            self.unlink(i);
            let old = self.slots[i as usize].0;
            self.at.remove(&old);
            self.slots[i as usize].0 = key;
            i
        };
        self.at.insert(key, i);
        self.push_front(i);
        false
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
    /// Messages the QP sends in all (the RNIC prefetches the next WQE
    /// while one runs, as long as there is one).
    pub messages: u64,
}

/// A pool of `n` requests in flight (read tags, context fetches): a new
/// one waits for the oldest to finish when all are taken. Completions are
/// in issue order, so a queue of their times is enough.
#[derive(Debug, Clone, Default)]
struct Slots {
    n: usize,
    done: VecDeque<Ps>,
    /// Sum of the time slots were held.
    held: Ps,
}

impl Slots {
    /// Earliest time a request offered at `at` gets a slot.
    #[inline]
    fn acquire(&mut self, at: Ps) -> Ps {
        let mut t = at;
        if self.done.len() >= self.n.max(1)
            && let Some(d) = self.done.pop_front()
        {
            t = t.max(d);
        }
        while self.done.front().is_some_and(|&d| d <= t) {
            self.done.pop_front();
        }
        t
    }

    #[inline]
    fn release_at(&mut self, from: Ps, done: Ps) {
        let last = self.done.back().copied().unwrap_or(0);
        self.done.push_back(done.max(last));
        self.held += done - from;
    }
}

/// What a DMA read fetches.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Read {
    Payload,
    Wqe,
    /// A QP context or a translation (MTT entry) on a cache miss.
    Context,
    /// The same, for a received packet.
    RxContext,
}

/// A host's data-path state and what it measured.
#[derive(Debug, Clone)]
pub struct HostPath {
    pub p: HostParams,
    /// The RNIC's WQE engine (message rate) and packetizer (packet rate).
    wqe_engine: Server,
    packetizer: Server,
    /// The receive parser (packet rate).
    parser: Server,
    /// Host-to-device direction of the PCIe link (read completions).
    down: Timeline,
    /// Device-to-host direction (read requests, DMA writes, CQEs).
    up: Timeline,
    /// The socket's memory, reads and writes together.
    ddr: Timeline,
    /// The latest time the host was offered work (event time).
    now: Ps,
    cpu: Server,
    tags: Slots,
    fetches: Slots,
    /// Fetch-slot time held for received packets (the rest is transmit's).
    rx_fetch_held: Ps,
    qpc: Lru,
    mrc: Lru,
    /// Payload offset of each QP's next packet (for the pages it touches).
    offsets: IntMap<u32, u64>,
    /// Payload offset of each receiving QP's next packet.
    rx_offsets: IntMap<u32, u64>,
    /// Per QP: messages started, and when its prefetched next WQE arrives.
    wqes: IntMap<u32, (u64, Option<Ps>)>,
    /// Last ready time handed out (packets leave in order).
    last_ready: Ps,
    /// RX buffer: (time the DMA write is done, frame bytes) in order.
    rx: VecDeque<(Ps, u32)>,
    rx_bytes: u64,
    pub rx_xoff: bool,
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
    tx_pkts: u64,
    tx_msgs: u64,
    rx_pkts: u64,
    read_bytes: u64,
    write_bytes: u64,
    reads: u64,
    read_latency_sum: Ps,
    wqe_fetches: u64,
    rx_drops: u64,
    rx_peak: u64,
    cqes: u64,
    first_use: Option<Ps>,
    last_use: Ps,
}

impl HostPath {
    pub fn new(p: HostParams) -> Self {
        HostPath {
            qpc: Lru::new(p.qp_cache_entries),
            mrc: Lru::new(p.mr_cache_entries.div_ceil(p.mtt_per_fetch as usize)),
            tags: Slots {
                n: p.read_tags,
                ..Slots::default()
            },
            fetches: Slots {
                n: p.context_fetches,
                ..Slots::default()
            },
            p,
            wqe_engine: Server::default(),
            packetizer: Server::default(),
            parser: Server::default(),
            down: Timeline::default(),
            up: Timeline::default(),
            ddr: Timeline::default(),
            now: 0,
            cpu: Server::default(),
            offsets: IntMap::default(),
            wqes: IntMap::default(),
            rx_offsets: IntMap::default(),
            rx_fetch_held: 0,
            last_ready: 0,
            rx: VecDeque::new(),
            rx_bytes: 0,
            rx_xoff: false,
            pipe: VecDeque::new(),
            pipe_depth: 1,
            wake_at: None,
            xoff_at: u64::MAX,
            xon_at: u64::MAX,
            xoff_prio: 0,
            lossless: false,
            tx_pkts: 0,
            tx_msgs: 0,
            rx_pkts: 0,
            read_bytes: 0,
            write_bytes: 0,
            reads: 0,
            read_latency_sum: 0,
            wqe_fetches: 0,
            rx_drops: 0,
            rx_peak: 0,
            cqes: 0,
            first_use: None,
            last_use: 0,
        }
    }

    fn used(&mut self, t: Ps) {
        self.first_use.get_or_insert(t);
        self.last_use = self.last_use.max(t);
    }

    /// One DMA read of `bytes` (≤ MRRS) offered at `at`: it holds a read
    /// tag (`Read::Payload`, `Read::Wqe`) or a context-fetch slot
    /// (`Read::Context`); the request goes up, the payload is read from
    /// memory (descriptors and contexts come from the LLC, as with DDIO)
    /// while the round trip runs, and the completions come down the link.
    /// Returns when the last byte arrived.
    fn read(&mut self, at: Ps, bytes: u64, kind: Read) -> Ps {
        let context = matches!(kind, Read::Context | Read::RxContext);
        let t = if context {
            self.fetches.acquire(at)
        } else {
            self.tags.acquire(at)
        };
        let link = self.p.pcie.dma_read(bytes);
        let now = self.now;
        let issued = self.up.serve(now, t, self.p.link_ps(link.to_host));
        let mut data_at = issued + self.p.read_latency_ps;
        if kind == Read::Payload {
            let m = self
                .ddr
                .serve(now, issued, bytes_ps(bytes, self.p.mem_ps_per_byte));
            data_at = data_at.max(m);
        }
        let done = self
            .down
            .serve(now, data_at, self.p.link_ps(link.to_device));
        if context {
            self.fetches.release_at(t, done);
            if kind == Read::RxContext {
                self.rx_fetch_held += done - t;
            }
        } else {
            self.tags.release_at(t, done);
        }
        if kind == Read::Payload {
            self.reads += 1;
            self.read_latency_sum += done - t;
            self.read_bytes += bytes;
        }
        done
    }

    /// A data packet the RNIC hands out at `now`: when it is ready for the
    /// port (WQE fetched, contexts present, payload read, packetized).
    pub fn tx_data(&mut self, now: Ps, pk: TxPacket) -> Ps {
        self.now = self.now.max(now);
        self.used(now);
        self.tx_pkts += 1;
        let mut t = now;
        let inline = pk.message <= self.p.inline_max;
        if pk.first {
            // One message through the WQE engine; its WQE comes over PCIe
            // unless the CPU pushed it with the doorbell. The RNIC fetches
            // a QP's next WQE while the current one runs.
            self.tx_msgs += 1;
            t = self.wqe_engine.serve(t, self.p.msg_ps);
            if inline && pk.messages == 1 {
                // A lone inline WQE is pushed with its doorbell
                // (BlueFlame): host-to-device MMIO, no fetch.
                let b = self
                    .p
                    .pcie
                    .mmio_write(self.p.rnic.inline_wqe_bytes(pk.message));
                self.down.serve(self.now, t, self.p.link_ps(b.to_device));
            } else {
                // Posted in a batch (one doorbell), WQEs are fetched, inline
                // ones with their data.
                let bytes = if inline {
                    self.p.rnic.inline_wqe_bytes(pk.message)
                } else {
                    self.p.wqe_bytes
                };
                let (started, prefetched) = self.wqes.remove(&pk.qpn).unwrap_or((0, None));
                let wqe_at = match prefetched {
                    Some(r) => r,
                    None => {
                        self.wqe_fetches += 1;
                        self.read(t, bytes, Read::Wqe)
                    }
                };
                if started + 1 < pk.messages {
                    self.wqe_fetches += 1;
                    let next = self.read(t, bytes, Read::Wqe);
                    self.wqes.insert(pk.qpn, (started + 1, Some(next)));
                }
                t = t.max(wqe_at);
            }
        }
        // The QP's context and the translations of the pages the payload
        // touches; a miss waits for a fetch (a few overlap).
        if !self.qpc.touch(u64::from(pk.qpn)) {
            t = self.read(t, self.p.qp_context_bytes, Read::Context);
        }
        if !inline && pk.payload > 0 {
            let off = self.offsets.entry(pk.qpn).or_insert(0);
            let line = self.p.page_bytes * self.p.mtt_per_fetch;
            let (first_page, last_page) = (*off / line, (*off + u64::from(pk.payload) - 1) / line);
            *off += u64::from(pk.payload);
            let mut fetched = t;
            for page in first_page..=last_page {
                if !self.mrc.touch((u64::from(pk.mr_key) << 32) ^ page) {
                    let bytes = self.p.mtt_entry_bytes * self.p.mtt_per_fetch;
                    fetched = fetched.max(self.read(t, bytes, Read::Context));
                }
            }
            t = fetched;
        }
        let mut ready = self.packetizer.serve(t, self.p.pkt_ps);
        if !inline {
            let mrrs = u64::from(self.p.pcie.mrrs.max(1));
            let mut left = u64::from(pk.payload);
            while left > 0 {
                let b = left.min(mrrs);
                ready = ready.max(self.read(t, b, Read::Payload));
                left -= b;
            }
        }
        ready = ready.max(self.last_ready);
        self.last_ready = ready;
        self.used(ready);
        ready
    }

    /// A control packet (ACK, NAK, CNP) takes a packetizer slot but reads
    /// nothing and is not held back.
    pub fn tx_control(&mut self, now: Ps) {
        self.tx_pkts += 1;
        self.packetizer.serve(now, self.p.pkt_ps);
    }

    /// The CPU posts `wqes` WQEs with one doorbell at `now` (charged to
    /// the CPU; the RNIC sees them at once).
    #[cold]
    #[inline(never)]
    pub fn post(&mut self, now: Ps, wqes: u64) {
        self.now = self.now.max(now);
        self.used(now);
        let db = self
            .p
            .pcie
            .mmio_write(u64::from(self.p.rnic.doorbell_bytes));
        self.down.serve(now, now, self.p.link_ps(db.to_device));
        self.cpu
            .serve(now, self.p.post_wqe_ps * wqes + self.p.doorbell_ps);
    }

    /// The CPU posts `n` receive WQEs at `now`.
    #[cold]
    #[inline(never)]
    pub fn post_recv(&mut self, now: Ps, n: u64) {
        self.now = self.now.max(now);
        self.used(now);
        self.cpu.serve(now, self.p.post_recv_ps * n);
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

    /// When the RX buffer will hold at most `level` bytes (`None`: it
    /// does now).
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
    /// for `qpn`, into the buffer of memory key `mr_key` (`recv_wqe`: the
    /// first of a SEND, which fetches a receive WQE): `false` if the RX
    /// buffer has no room (an RX drop).
    /// Otherwise it is parsed, its QP context looked up, and its payload
    /// written by DMA into the target's memory; it holds its buffer space
    /// until the write is done.
    pub fn rx_data(
        &mut self,
        now: Ps,
        qpn: u32,
        frame: u32,
        payload: u32,
        recv_wqe: bool,
        mr_key: u32,
    ) -> bool {
        self.now = self.now.max(now);
        self.used(now);
        let occ = self.rx_occupancy(now);
        if occ + u64::from(frame) > self.p.rx_buffer_bytes {
            self.rx_drops += 1;
            return false;
        }
        self.rx_pkts += 1;
        let mut t = self.parser.serve(now, self.p.pkt_ps);
        if !self.qpc.touch(u64::from(qpn)) {
            t = self.read(t, self.p.qp_context_bytes, Read::RxContext);
        }
        // The target buffer's translations, page by page.
        let off = self.rx_offsets.entry(qpn).or_insert(0);
        let line = self.p.page_bytes * self.p.mtt_per_fetch;
        let pages = (*off / line, (*off + u64::from(payload.max(1)) - 1) / line);
        *off += u64::from(payload);
        let mut fetched = t;
        for page in pages.0..=pages.1 {
            if !self.mrc.touch((u64::from(mr_key) << 32) ^ page) {
                let bytes = self.p.mtt_entry_bytes * self.p.mtt_per_fetch;
                fetched = fetched.max(self.read(t, bytes, Read::RxContext));
            }
        }
        t = fetched;
        if recv_wqe {
            // The first packet of a SEND consumes a receive WQE.
            t = self.read(t, self.p.recv_wqe_bytes, Read::Wqe);
        }
        let b = u64::from(payload);
        let link = self
            .up
            .serve(now, t, self.p.link_ps(self.p.pcie.dma_write(b).to_host));
        let mem = self.ddr.serve(now, t, bytes_ps(b, self.p.mem_ps_per_byte));
        // Placed in arrival order (the receive pipeline is in order), so
        // the buffer frees from its head.
        let done = link.max(mem).max(self.rx.back().map_or(0, |&(d, _)| d));
        self.write_bytes += b;
        self.rx.push_back((done, frame));
        self.rx_bytes += u64::from(frame);
        self.rx_peak = self.rx_peak.max(self.rx_bytes);
        self.used(done);
        true
    }

    /// A CQE generated at `now`: its PCIe write, then the CPU polls it.
    /// Returns when the application has seen it.
    #[cold]
    #[inline(never)]
    pub fn cqe(&mut self, now: Ps) -> Ps {
        self.cqes += 1;
        self.now = self.now.max(now);
        let w = self.up.serve(
            now,
            now,
            self.p
                .link_ps(self.p.pcie.dma_write(self.p.cqe_bytes).to_host),
        );
        let seen = self.cpu.serve(w, self.p.poll_cqe_ps);
        self.used(seen);
        seen
    }

    /// What this host measured; its port sent `port_tx_bytes` of frames
    /// (plus `ifg` per packet) at `port_bps`.
    pub fn measured(&self, host: u32, port_tx_bytes: u64, ifg: u64, port_bps: u64) -> HostMeasured {
        let port_wire_bytes = port_tx_bytes + ifg * self.tx_pkts;
        let span = self
            .first_use
            .map_or(0, |f| self.last_use.saturating_sub(f))
            .max(1) as f64;
        let gbps = |bytes: u64| bytes as f64 * 8.0 / span * 1e3;
        let util = |busy: Ps| busy as f64 / span;
        let pool = |s: &Slots| s.held as f64 / (s.n.max(1) as f64 * span);
        HostMeasured {
            host,
            active_us: span / 1e6,
            memory_read_gbps: gbps(self.read_bytes),
            memory_write_gbps: gbps(self.write_bytes),
            memory_util: util(self.ddr.busy),
            pcie_read_gbps: gbps(self.read_bytes),
            pcie_to_device_util: util(self.down.busy),
            read_tags_util: pool(&self.tags),
            read_latency_ns: if self.reads > 0 {
                self.read_latency_sum as f64 / self.reads as f64 / 1e3
            } else {
                0.0
            },
            context_fetch_util: (self.fetches.held - self.rx_fetch_held) as f64
                / (self.fetches.n.max(1) as f64 * span),
            rx_context_fetch_util: self.rx_fetch_held as f64
                / (self.fetches.n.max(1) as f64 * span),
            tx_mpps: self.tx_pkts as f64 / span * 1e6,
            tx_msgs_mpps: self.tx_msgs as f64 / span * 1e6,
            wqe_engine_util: util(self.wqe_engine.busy),
            packetizer_util: util(self.packetizer.busy),
            qp_cache_miss_rate: rate(self.qpc.misses, self.qpc.hits),
            mr_cache_miss_rate: rate(self.mrc.misses, self.mrc.hits),
            wqe_fetches: self.wqe_fetches,
            port_util: port_wire_bytes as f64 * 8.0 / port_bps.max(1) as f64 / span * 1e12,
            rx_mpps: self.rx_pkts as f64 / span * 1e6,
            parser_util: util(self.parser.busy),
            pcie_write_gbps: gbps(self.write_bytes),
            pcie_to_host_util: util(self.up.busy),
            rx_drops: self.rx_drops,
            rx_buffer_peak_bytes: self.rx_peak,
            cqes: self.cqes,
            cpu_util: util(self.cpu.busy),
            cq_poll_ns_per_cqe: self.p.poll_cqe_ps as f64 / 1e3,
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
/// Utilisations are busy time over the host's active time; a pool's
/// (tags, context fetches) is slot-time held over slots × active time.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct HostMeasured {
    pub host: u32,
    /// From the host's first to its last data-path activity.
    pub active_us: f64,
    pub memory_read_gbps: f64,
    pub memory_write_gbps: f64,
    pub memory_util: f64,
    pub pcie_read_gbps: f64,
    pub pcie_to_device_util: f64,
    pub read_tags_util: f64,
    /// Mean payload read round trip, tag wait excluded, to last byte.
    pub read_latency_ns: f64,
    /// Context/translation fetch slots held for transmit, and for receive.
    pub context_fetch_util: f64,
    pub rx_context_fetch_util: f64,
    pub tx_mpps: f64,
    pub tx_msgs_mpps: f64,
    pub wqe_engine_util: f64,
    pub packetizer_util: f64,
    pub qp_cache_miss_rate: f64,
    pub mr_cache_miss_rate: f64,
    pub wqe_fetches: u64,
    pub port_util: f64,
    pub rx_mpps: f64,
    pub parser_util: f64,
    pub pcie_write_gbps: f64,
    pub pcie_to_host_util: f64,
    pub rx_drops: u64,
    pub rx_buffer_peak_bytes: u64,
    pub cqes: u64,
    pub cpu_util: f64,
    pub cq_poll_ns_per_cqe: f64,
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
    let in_flight = (h.p.read_tags as u64 * u64::from(h.p.pcie.mrrs)).div_ceil(mtu) as usize;
    h.pipe_depth = cfg.nic_staging_pkts.max(in_flight + 2);
    h.lossless = cfg.buffer.lossless & (1 << cfg.data_prio) != 0;
    h.xoff_prio = cfg.data_prio;
    let headroom = crate::pfc::auto_headroom(rate_bps, delay_ps, max_frame);
    h.xoff_at = h.p.rx_buffer_bytes.saturating_sub(headroom);
    h.xon_at = h.xoff_at.saturating_sub(cfg.buffer.xon_offset_bytes);
    h
}

/// One hop of the DDR-to-DDR path, as the run measured it.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct HopUse {
    /// `source_ddr`, `tx_pcie`, `rnic_tx`, `port`, `leaf`, `spine`,
    /// `rnic_rx`, `rx_pcie`, `target_ddr`, `cpu_cq` (the analyst's names).
    pub name: &'static str,
    /// The busiest instance's busy fraction (0..1).
    pub utilisation: f64,
    /// Where: a host (`h3`) or a link (`leaf0→h3`).
    pub at: String,
    /// What a user watches there (the reference table's third column).
    pub metric: &'static str,
    /// Its measured values.
    pub measured: String,
}

/// A link between two switches: how much of it the run used.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct LinkUse {
    pub link: String,
    pub gbps: f64,
    pub utilisation: f64,
}

/// The reference text's §5.9 table filled from a run: each hop's
/// utilisation and metric, and the hop that bound the run.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct PathTable {
    pub profile: String,
    pub hops: Vec<HopUse>,
    /// The hop with the highest utilisation (the first on the path on a tie).
    pub binding: &'static str,
    pub reason: String,
    pub hosts: Vec<HostMeasured>,
    /// Every switch-to-switch link (ECMP spread), in node order.
    pub spine_links: Vec<LinkUse>,
    /// The most uneven leaf: its busiest uplink over the mean of its
    /// uplinks (1 = even; n = everything on one of n).
    pub ecmp_spread: Option<f64>,
}

/// Fabric figures the table needs beyond the hosts'.
#[derive(Debug, Clone, Default)]
pub struct FabricUse {
    /// Switch ports facing hosts: (name, utilisation).
    pub leaf: Vec<(String, f64)>,
    pub spine: Vec<LinkUse>,
    /// Each leaf's (a switch with hosts) uplink rates, Gb/s: its ECMP
    /// choices.
    pub uplinks: Vec<Vec<f64>>,
    pub ecn_marks: u64,
    pub pfc_pauses: u64,
    pub drops: u64,
    pub cnps: u64,
}

/// Builds the table from what the hosts and the fabric measured; `names`
/// gives each host's node name.
pub fn path_table(
    profile: &str,
    hosts: &[HostMeasured],
    names: &[String],
    f: &FabricUse,
) -> PathTable {
    let name = |h: u32| names.get(h as usize).cloned().unwrap_or_default();
    // The busiest host by `u`.
    let top = |u: &dyn Fn(&HostMeasured) -> f64| -> (f64, String, Option<&HostMeasured>) {
        hosts
            .iter()
            .map(|h| (u(h), h))
            .fold((0.0, String::new(), None), |best, (v, h)| {
                if v > best.0 {
                    (v, name(h.host), Some(h))
                } else {
                    best
                }
            })
    };
    let share = |h: &HostMeasured, read: bool| {
        let tot = h.memory_read_gbps + h.memory_write_gbps;
        let mine = if read {
            h.memory_read_gbps
        } else {
            h.memory_write_gbps
        };
        if tot > 0.0 {
            h.memory_util * mine / tot
        } else {
            0.0
        }
    };
    let mut hops = Vec::new();
    let mut hop = |name,
                   (u, at, h): (f64, String, Option<&HostMeasured>),
                   metric,
                   m: &dyn Fn(&HostMeasured) -> String| {
        hops.push(HopUse {
            name,
            utilisation: u,
            at,
            metric,
            measured: h.map(m).unwrap_or_default(),
        });
    };
    hop(
        "source_ddr",
        top(&|h| share(h, true)),
        "memory bandwidth, remote NUMA access",
        &|h| format!("{:.1} Gb/s read", h.memory_read_gbps),
    );
    hop(
        "tx_pcie",
        top(&|h| h.pcie_to_device_util.max(h.read_tags_util)),
        "PCIe throughput, read completion latency",
        &|h| {
            format!(
                "{:.1} Gb/s read, {:.0} ns per read, tags {:.0}% busy",
                h.pcie_read_gbps,
                h.read_latency_ns,
                h.read_tags_util * 100.0
            )
        },
    );
    hop(
        "rnic_tx",
        top(&|h| {
            h.wqe_engine_util
                .max(h.packetizer_util)
                .max(h.context_fetch_util)
        }),
        "NIC counters, QP cache miss, PPS",
        &|h| {
            format!(
                "{:.2} Mpps, {:.3} M msg/s, QP-cache miss {:.1}%, MR-cache miss {:.1}%",
                h.tx_mpps,
                h.tx_msgs_mpps,
                h.qp_cache_miss_rate * 100.0,
                h.mr_cache_miss_rate * 100.0
            )
        },
    );
    hop(
        "port",
        top(&|h| h.port_util),
        "port utilization, packet size",
        &|h| format!("{:.1}% of line rate", h.port_util * 100.0),
    );
    let leaf = f.leaf.iter().fold((0.0, String::new()), |b, (n, u)| {
        if *u > b.0 { (*u, n.clone()) } else { b }
    });
    hops.push(HopUse {
        name: "leaf",
        utilisation: leaf.0,
        at: leaf.1,
        metric: "ECN marks, PFC pause, drops",
        measured: format!(
            "{} ECN marks, {} PFC pauses, {} drops",
            f.ecn_marks, f.pfc_pauses, f.drops
        ),
    });
    let spine = f.spine.iter().fold((0.0, String::new()), |b, l| {
        if l.utilisation > b.0 {
            (l.utilisation, l.link.clone())
        } else {
            b
        }
    });
    // ECMP spread: the most uneven leaf's busiest uplink over its mean.
    let ecmp_spread = f
        .uplinks
        .iter()
        .filter(|u| u.len() > 1 && u.iter().sum::<f64>() > 0.0)
        .map(|u| {
            let mean = u.iter().sum::<f64>() / u.len() as f64;
            u.iter().fold(0.0f64, |a, &b| a.max(b)) / mean
        })
        .reduce(f64::max);
    hops.push(HopUse {
        name: "spine",
        utilisation: spine.0,
        at: spine.1,
        metric: "link utilization, ECMP distribution",
        measured: match ecmp_spread {
            Some(s) => format!("ECMP: busiest leaf uplink {s:.2}x its leaf's mean (1 = even)"),
            None => "no traffic over leaf uplinks".into(),
        },
    });
    let cnps = f.cnps;
    let mut hops2 = std::mem::take(&mut hops);
    let mut hop = |name,
                   (u, at, h): (f64, String, Option<&HostMeasured>),
                   metric,
                   m: &dyn Fn(&HostMeasured) -> String| {
        hops2.push(HopUse {
            name,
            utilisation: u,
            at,
            metric,
            measured: h.map(m).unwrap_or_default(),
        });
    };
    hop(
        "rnic_rx",
        top(&|h| h.parser_util.max(h.rx_context_fetch_util)),
        "RX drops, CNP, PCIe write",
        &|h| {
            format!(
                "{:.2} Mpps, {} RX drops, RX buffer peak {} B, {} CNPs (fabric)",
                h.rx_mpps, h.rx_drops, h.rx_buffer_peak_bytes, cnps
            )
        },
    );
    hop(
        "rx_pcie",
        top(&|h| h.pcie_to_host_util),
        "PCIe write throughput",
        &|h| format!("{:.1} Gb/s written", h.pcie_write_gbps),
    );
    hop(
        "target_ddr",
        top(&|h| share(h, false)),
        "memory bandwidth, application consume rate",
        &|h| format!("{:.1} Gb/s written", h.memory_write_gbps),
    );
    hop(
        "cpu_cq",
        top(&|h| h.cpu_util),
        "CPU utilization, CQ polling cost",
        &|h| {
            format!(
                "{} CQEs, {:.0} ns each, CPU {:.2}% busy",
                h.cqes,
                h.cq_poll_ns_per_cqe,
                h.cpu_util * 100.0
            )
        },
    );
    let hops = hops2;
    let b = hops.iter().fold(
        &hops[0],
        |b, h| if h.utilisation > b.utilisation { h } else { b },
    );
    let reason = format!(
        "{} at {} was {:.0}% busy ({}): the busiest hop of the run",
        b.name,
        b.at,
        b.utilisation * 100.0,
        b.measured
    );
    PathTable {
        profile: profile.to_string(),
        binding: b.name,
        reason,
        hops: hops.clone(),
        hosts: hosts.to_vec(),
        spine_links: f.spine.clone(),
        ecmp_spread,
    }
}

impl PathTable {
    /// The table as text, one hop a line, the binding hop marked.
    pub fn render(&self) -> String {
        let mut s = format!("DDR-to-DDR path ({}), measured:\n", self.profile);
        s += &format!(
            "  {:<11} {:>6}  {:<12} {}\n",
            "hop", "busy", "where", "measured"
        );
        for h in &self.hops {
            let mark = if h.name == self.binding { "*" } else { " " };
            s += &format!(
                "{mark} {:<11} {:>5.1}%  {:<12} {}\n",
                h.name,
                h.utilisation * 100.0,
                h.at,
                h.measured
            );
        }
        s += &format!("binding: {}\n", self.reason);
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn timeline_fills_gaps_and_merges() {
        let mut t = Timeline::default();
        assert_eq!(t.serve(0, 100, 10), 110);
        // Earlier than what is booked, and it fits before it.
        assert_eq!(t.serve(0, 50, 20), 70);
        // Does not fit in [70, 100): goes after 110.
        assert_eq!(t.serve(0, 60, 40), 150);
        // Fits exactly in [70, 100) and merges everything.
        assert_eq!(t.serve(0, 70, 30), 100);
        assert_eq!(t.iv, VecDeque::from([(50, 150)]));
        assert_eq!(t.busy, 100);
        // Past intervals are forgotten once `now` passes them.
        assert_eq!(t.serve(200, 200, 5), 205);
        assert_eq!(t.iv, VecDeque::from([(200, 205)]));
    }

    #[test]
    fn lru_evicts_the_least_recently_used() {
        let mut c = Lru::new(2);
        assert!(!c.touch(1));
        assert!(!c.touch(2));
        assert!(c.touch(1));
        assert!(!c.touch(3)); // evicts 2
        assert!(c.touch(1));
        assert!(!c.touch(2));
        assert_eq!((c.hits, c.misses), (2, 4));
        // Round robin over more keys than entries always misses.
        let mut c = Lru::new(4);
        for i in 0..50u64 {
            c.touch(i % 5);
        }
        assert_eq!(c.hits, 0);
    }

    #[test]
    fn slots_wait_for_the_oldest() {
        let mut s = Slots {
            n: 2,
            ..Slots::default()
        };
        let t = s.acquire(0);
        s.release_at(t, 100);
        let t = s.acquire(0);
        s.release_at(t, 150);
        // Both held: the third waits for the first to finish.
        assert_eq!(s.acquire(10), 100);
        s.release_at(100, 300);
        assert_eq!(s.acquire(120), 150);
        assert_eq!(s.held, 100 + 150 + 200);
    }

    fn params() -> HostParams {
        let src = include_str!("../tests/data/host_profile.toml");
        let p = roce_host::Profile::from_toml_str(src, "host_profile.toml").expect("profile");
        HostParams::from_profile(
            &p,
            HostKnobs {
                sges: 1,
                ..HostKnobs::default()
            },
        )
    }

    #[test]
    fn reads_obey_littles_law() {
        // Back-to-back 4 KiB packets with 4 tags of 512 B and 800 ns of
        // latency: at most 4 × 512 B per 800 ns (20.5 Gb/s) arrive.
        let mut p = params();
        p.read_tags = 4;
        let mut h = HostPath::new(p);
        let mut ready = 0;
        let n = 200;
        for _ in 0..n {
            ready = h.tx_data(
                0,
                TxPacket {
                    qpn: 1,
                    mr_key: 1,
                    payload: 4096,
                    first: false,
                    message: 1 << 20,
                    messages: 1,
                },
            );
        }
        let gbps = (n * 4096 * 8) as f64 / ready as f64 * 1e3;
        // A tag is held for the round trip and its completions' transfer.
        let p = &h.p;
        let hold = p.read_latency_ps as f64 + p.link_ps(p.pcie.dma_read(512).to_device) as f64;
        let little = 4.0 * 512.0 * 8.0 / hold * 1e3;
        assert!(
            gbps <= little * 1.001 && gbps > little * 0.99,
            "{gbps} vs {little}"
        );
        eprintln!("hold per read {}", h.tags.held as f64 / h.reads as f64);
    }

    #[test]
    fn a_full_rx_buffer_drops_and_drains() {
        let mut p = params();
        p.rx_buffer_bytes = 10_000;
        let mut h = HostPath::new(p);
        let mut accepted = 0;
        for _ in 0..20 {
            accepted += u32::from(h.rx_data(0, 1, 1100, 1024, false, 1));
        }
        assert_eq!(accepted, 9);
        assert_eq!(h.rx_drops, 11);
        let drained = h.rx_drained_to(0).expect("bytes are waiting");
        assert_eq!(h.rx_occupancy(drained), 0);
        assert!(h.rx_data(drained, 1, 1100, 1024, false, 1));
    }
}
