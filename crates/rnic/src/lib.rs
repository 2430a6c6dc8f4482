//! `roce-rnic`: a software RDMA NIC as a sans-IO state machine.
//!
//! Like quinn-proto, nothing here owns a socket, a thread or a clock. The
//! driver (the UDP engine in `roce-verbs`, or the fabric simulator) feeds
//! packets in with [`Rnic::handle_packet`], takes packets out with
//! [`Rnic::poll_transmit`] (or reads each where it was built with
//! [`Rnic::poll_transmit_with`], as the simulator does), asks
//! [`Rnic::poll_timeout`] when to call
//! [`Rnic::handle_timeout`], and reads completions with [`Rnic::poll_cq`].
//! Time is always an argument, so the same inputs give the same outputs.
//!
//! The verbs objects (PD, MR, CQ, QP, SRQ) follow libibverbs; the transport
//! follows the InfiniBand Architecture Specification vol. 1, chapter 9 (RC and
//! UD), carried over RoCEv2 (Annex A17).

// The one unsafe line of the RNIC is reading the TSC (`clock::ticks`) for
// the engine's stage profile; everything else is safe code. `deny`, not
// `forbid`, so that module alone can opt out.
#![deny(unsafe_code)]

pub mod cc;
#[allow(unsafe_code)]
pub mod clock;
pub mod cq;
pub mod error;
pub mod footprint;
pub mod fuzzing;
pub mod irn;
pub mod memory;
pub mod mr;
pub mod pair;
pub mod prefetch;
pub mod qp;
mod requester;
mod responder;
pub mod srq;
pub mod status;
mod table;
pub mod types;

pub use cc::{
    AckFeedback, CcConfig, CcParamError, CcParams, CongestionControl, Dcqcn, DcqcnConfig, Dctcp,
    DctcpConfig, DctcpVariant, FixedRate, Hpcc, HpccConfig, IntHop, NoCc, RttSample, Swift,
    SwiftConfig, Telemetry, Timely, TimelyConfig,
};
pub use cq::CqHandle;
pub use error::{Result, VerbsError};
pub use footprint::Footprint;
pub use irn::{IrnConfig, Recovery};
pub use memory::{
    GATHER_MAX, Gather, Memory, Payload, PayloadRef, RealMemory, Resolved, VirtualMemory,
};
pub use mr::{Mr, PdHandle};
pub use qp::{QpAttr, QpInitAttr, QpState};
pub use srq::SrqHandle;
pub use status::QpStatus;
pub use types::*;

use crate::cq::Cq;
use crate::mr::MrTable;
use crate::qp::{Ctx, Qp, SendWqe};
use crate::srq::Srq;
use crate::table::{QpTable, ReadySet, Timers};
use roce_wire::{Opcode, TransportRepr};
use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::net::SocketAddr;

/// Bytes a RoCEv2 packet carries outside the IB transport headers: Ethernet
/// (14), IPv4 (20), UDP (8), ICRC (4) and FCS (4). Used for pacing and counters.
pub const PACKET_OVERHEAD: u64 = 14 + 20 + 8 + 4 + 4;

/// Device-wide settings.
///
/// `repr(C)`: what the per-packet paths read (CNP pacing, ECN, the ACK
/// request interval, pacing catch-up, the source check) fills the first
/// cache line; the device limits, read when objects are made, follow.
#[derive(Debug, Clone, PartialEq, Eq)]
#[repr(C)]
pub struct RnicConfig {
    /// Minimum interval between CNPs for one QP (the NP's CNP pacing).
    pub cnp_interval_ns: u64,
    /// How far behind its pacing schedule a rate-paced QP may fall and
    /// still catch up by sending back to back (ns). 0: a packet polled late
    /// restarts the schedule from `now`, right where the driver polls on
    /// time (the simulator, whose event queue wakes the RNIC exactly at
    /// each pacing gap's end). A driver that wakes late — a thread on an
    /// OS timer and a shared CPU — loses each wake-up's lateness with 0:
    /// a `roce perf --rate-limit 5` QP on loopback moved 0.53 Gb/s, each
    /// 6.5 µs gap stretched to a ≈ 60 µs wake-up. Like the horizon of
    /// Linux's fq pacer, a catch-up bounds the burst to rate × catch-up.
    pub pacing_catch_up_ns: u64,
    /// DSCP of CNPs (ConnectX's default is 48).
    pub cnp_dscp: u8,
    /// Mark data packets ECN-capable (ECT(0)).
    pub ecn: bool,
    /// Echo CE marks to the sender in ACKs (BTH BECN), as DCTCP's receiver
    /// echoes ECE; off by default (CNPs are RoCEv2's congestion signal).
    pub ecn_echo: bool,
    /// An RC QP takes packets only from its connected peer's address; with
    /// this set the UDP source port must match the peer's too, not only its
    /// IP. RoCEv2 (IBA Annex A17) makes the source port flow entropy, so a
    /// NIC on a fabric knows its
    /// peer by IP (the GID) alone, and the simulator and the frame-level
    /// pair send from per-QP entropy ports. Over real sockets a peer *is* a
    /// socket (many engines share 127.0.0.1), so `roce-verbs` turns it on.
    pub match_source_port: bool,
    /// Request an ACK at least every this many packets of a long message.
    pub ack_req_every: u32,
    /// Most request PSNs a QP keeps unacknowledged.
    pub max_outstanding_pkts: u32,
    pub max_qp: u32,
    pub max_cq: u32,
    pub max_mr: u32,
    pub max_cqe: u32,
    pub max_qp_wr: u32,
    pub max_sge: u32,
    pub max_inline_data: u32,
    /// The port's active MTU: the largest UD message (UD is never
    /// segmented, IBA 9.7.2 / C9-3; RC QPs take their path MTU at RTR).
    pub port_mtu: Mtu,
    /// IRN's BDP and timeouts, for QPs created with [`Recovery::Irn`].
    pub irn: IrnConfig,
}

impl Default for RnicConfig {
    fn default() -> Self {
        RnicConfig {
            cnp_interval_ns: 50_000,
            cnp_dscp: 48,
            ecn: true,
            ecn_echo: false,
            ack_req_every: 64,
            max_outstanding_pkts: 1 << 14,
            max_qp: 1 << 16,
            max_cq: 1 << 16,
            max_mr: 1 << 20,
            max_cqe: 1 << 22,
            max_qp_wr: 1 << 15,
            max_sge: 32,
            max_inline_data: 1024,
            match_source_port: false,
            port_mtu: Mtu::Mtu1024,
            irn: IrnConfig::default(),
            pacing_catch_up_ns: 0,
        }
    }
}

/// Device counters (the ones `rdma statistic` and ethtool show for real NICs).
///
/// `repr(C)`: the counters every packet moves come first, in one cache line.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[repr(C)]
pub struct Counters {
    pub tx_pkts: u64,
    pub tx_bytes: u64,
    pub rx_pkts: u64,
    pub rx_payload_bytes: u64,
    pub retransmits: u64,
    pub rewinds: u64,
    pub timeouts: u64,
    pub acks_tx: u64,
    pub naks_tx: u64,
    pub naks_rx: u64,
    pub rnr_naks_tx: u64,
    pub rnr_naks_rx: u64,
    pub read_resp_tx: u64,
    pub out_of_sequence: u64,
    pub duplicates: u64,
    pub stale_acks: u64,
    pub atomics_executed: u64,
    pub atomic_replays: u64,
    pub ce_rx: u64,
    pub cnps_tx: u64,
    pub cnps_rx: u64,
    pub cq_overflows: u64,
    pub qkey_violations: u64,
    pub ud_no_recv_drops: u64,
    pub rx_unknown_qp: u64,
    pub rx_dropped_state: u64,
    pub rx_malformed: u64,
    pub rx_bad_source: u64,
}

/// One QP's congestion control as it stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CcStats {
    pub algorithm: &'static str,
    /// The current rate (`None`: line rate, unpaced).
    pub rate_bps: Option<u64>,
    /// The lowest rate the QP was paced at or a CNP cut it to (`None`:
    /// never below the line).
    pub min_rate_bps: Option<u64>,
    pub window_bytes: Option<u64>,
    /// Multiplicative cuts so far.
    pub rate_cuts: u64,
}

/// Asynchronous events (`ibv_get_async_event`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AsyncEvent {
    /// A completion could not be stored: the CQ is full (IBV_EVENT_CQ_ERR).
    CqOverflow { cq: CqHandle, qpn: u32 },
    /// An SRQ fell below its armed limit (IBV_EVENT_SRQ_LIMIT_REACHED).
    SrqLimitReached { srq: SrqHandle },
}

/// A packet the RNIC wants sent.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Transmit {
    /// Destination IP and UDP port.
    pub dst: SocketAddr,
    /// UDP source port (per-QP ECMP entropy).
    pub udp_sport: u16,
    pub dscp: u8,
    /// Send as ECT(0).
    pub ecn_capable: bool,
    /// QPN of the sending QP.
    pub src_qpn: u32,
    pub repr: TransportRepr,
    pub payload: Payload,
}

/// Where a transmit poll's packet goes (see
/// [`Rnic::poll_transmit_into`]): the builder of the packet calls
/// [`put`](Self::put) with it, by value, as its last act.
pub trait TransmitSink {
    type Out;
    /// Takes the packet the RNIC built.
    fn put(self, t: Transmit) -> Self::Out;
    /// Takes the packet the RNIC built with its sending QP's context (see
    /// [`Rnic::set_qp_context`]); the RNIC calls this one. A driver that
    /// keeps a record per QP finds it from the context without a lookup
    /// of its own, whose line, read once per packet sent, is a cache miss
    /// at scale (issue 12).
    #[inline(always)]
    fn put_from(self, t: Transmit, context: u64) -> Self::Out
    where
        Self: Sized,
    {
        let _ = context;
        self.put(t)
    }
}

/// `poll_transmit`'s sink: the packet itself.
struct Whole;

impl TransmitSink for Whole {
    type Out = Transmit;
    #[inline(always)]
    fn put(self, t: Transmit) -> Transmit {
        t
    }
}

/// `poll_transmit_with`'s sink: a callback reading the packet.
///
/// Measured dead end (session 21): the simulator's callback as this sink
/// (a closure, as before). Called from three builders (a data packet, an
/// ACK, a CNP), the compiler kept it out of line and stored the whole
/// `Transmit` for it as before: 19 M instructions more on the 1 ms HPCC
/// fat tree (15,165 M to 15,184 M), where a sink whose `put` is forced
/// inline (the simulator's `HeadSink`) saved 134 M.
struct With<F>(F);

impl<R, F: FnOnce(&Transmit) -> R> TransmitSink for With<F> {
    type Out = R;
    #[inline]
    fn put(self, t: Transmit) -> R {
        (self.0)(&t)
    }
}

/// A failed post: which work request (`bad_wr`) and why.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("work request {index}: {error}")]
pub struct PostError {
    pub index: usize,
    pub error: VerbsError,
}

/// The software RNIC.
///
/// `repr(C)`, in the order written: what every driver call reads (the
/// clock, the QP table, the ready set, the timers) shares the first lines,
/// then the per-packet counters and configuration, each a line of its
/// own. A simulator drives thousands of RNICs in turn, so each call finds
/// its RNIC out of cache, and Rust's own layout spread those fields over
/// more lines than a packet needs (issue 12).
#[repr(C, align(64))]
pub struct Rnic<M: Memory = RealMemory> {
    qps: QpTable,
    /// QPs that may have a packet to send now (others wait for a timer or input).
    ready: ReadySet,
    /// The latest `now` a driver call brought (to tell a due pacing gap).
    clock: Nanos,
    rr_next: u32,
    next_qpn: u32,
    /// What the port holds back (see [`set_tx_hold`](Self::set_tx_hold)):
    /// [`HOLD_REQUESTS`] and [`HOLD_RESPONSES`] bits.
    hold: u8,
    /// Completions waiting in all CQs together: a driver that polls after
    /// every call asks [`has_completions`](Self::has_completions) on this
    /// line instead of searching `cqs`, whose tree node is a line of its
    /// own (at 8,192 hosts a miss on every packet a host handled, three
    /// quarters of the simulator's time after each RNIC call).
    cqes: usize,
    /// Each QP's next deadline, ordered: `poll_timeout` is the first entry.
    timers: Timers,
    counters: Counters,
    cfg: RnicConfig,
    mem: M,
    mrs: MrTable,
    cqs: BTreeMap<u32, Cq>,
    srqs: BTreeMap<u32, Srq>,
    events: VecDeque<AsyncEvent>,
    pds: BTreeSet<u32>,
    next_pd: u32,
    next_cq: u32,
    next_srq: u32,
    /// The QPs [`handle_timeout`](Self::handle_timeout) found due, one
    /// list kept for every call (see `Timers::take_due`). Last, off the
    /// lines every call reads.
    due: Vec<(Nanos, u32)>,
}

/// A posted WR needs a free slot in its queue and no more SGEs than allowed.
fn check_room(
    queue: &'static str,
    used: usize,
    depth: u32,
    sges: usize,
    max_sge: u32,
) -> Result<()> {
    if used as u32 >= depth {
        return Err(VerbsError::QueueFull { queue, depth });
    }
    if sges as u32 > max_sge {
        return Err(VerbsError::TooManySge {
            count: sges,
            max: max_sge,
        });
    }
    Ok(())
}

/// Files the next deadline of QP `qpn`, already in hand (`ready` says
/// whether it is in the ready set). True when the timer index changed and
/// needs settling ([`settle`]).
// Forced: grown by the in-place re-file, it was no longer inlined into
// `touch` and the transmit poll, and its call cost more than the re-file
// saved (issue 12, cachegrind on the mid-size fat5ms run).
#[inline(always)]
fn refile_qp(qp: &mut Qp, qpn: u32, ready: bool, clock: Nanos, timers: &mut Timers) -> bool {
    let next = qp.next_deadline(ready, clock);
    if qp.filed == next {
        return false;
    }
    // The entry under the old deadline is no longer current.
    let old = std::mem::replace(&mut qp.filed, next);
    timers.refile(old, next, qpn);
    true
}

/// After QP `qpn` (in hand) sent a packet: the next poll starts after
/// it, and it is re-filed (true: the timer index needs [`settle`]). A QP left with nothing to send
/// ([`Qp::idle_tx`]: typically a receiver that just sent its only ACK)
/// leaves the ready set now, as `Rnic::touch` keeps it out: otherwise the
/// next poll would visit it only to find it empty and drop it then, one
/// empty visit per ACK sent (issue 12). That visit would change nothing
/// but `last_poll`, which is read only while a request is unsent, and an
/// idle QP's deadline does not depend on whether it is ready.
#[inline]
fn sent(
    qp: &mut Qp,
    qpn: u32,
    ready: &mut ReadySet,
    rr_next: &mut u32,
    clock: Nanos,
    timers: &mut Timers,
) -> bool {
    *rr_next = qpn.wrapping_add(1);
    let more = !qp.idle_tx();
    if !more {
        ready.remove(&qpn);
    }
    refile_qp(qp, qpn, more, clock, timers)
}

/// `Rnic::settle_timers` on borrowed fields.
fn settle(timers: &mut Timers, qps: &QpTable) {
    timers.settle(qps.len(), |t, q| {
        qps.get(&q).is_some_and(|x| x.filed == Some(t))
    });
}

/// [`Rnic::set_tx_hold`]'s bit for requests (data a requester sends).
const HOLD_REQUESTS: u8 = 1;
/// [`Rnic::set_tx_hold`]'s bit for responses (ACKs, NAKs, CNPs, read
/// responses).
const HOLD_RESPONSES: u8 = 2;

/// Whether `src` is the peer `ah` names: the same IP, and the same UDP
/// port when `match_port`. Two IPv4 addresses (every simulated host's)
/// are compared as such: comparing the `IpAddr`s each `ip()` builds went
/// through a closure the compiler left out of line, with the address
/// copied to the stack for it (about 30 instructions a packet received,
/// on every packet of the 1 ms HPCC fat tree).
#[inline(always)]
fn is_peer(ah: &SocketAddr, src: &SocketAddr, match_port: bool) -> bool {
    let ip = match (ah, src) {
        (SocketAddr::V4(a), SocketAddr::V4(s)) => a.ip() == s.ip(),
        _ => ah.ip() == src.ip(),
    };
    ip && (!match_port || ah.port() == src.port())
}

fn unknown(kind: &'static str, id: u32) -> VerbsError {
    VerbsError::UnknownObject { kind, id }
}

impl<M: Memory> Rnic<M> {
    pub fn new(cfg: RnicConfig, mem: M) -> Self {
        Rnic {
            cfg,
            mem,
            pds: BTreeSet::new(),
            next_pd: 1,
            mrs: MrTable::default(),
            cqs: BTreeMap::new(),
            next_cq: 1,
            srqs: BTreeMap::new(),
            next_srq: 1,
            qps: QpTable::default(),
            next_qpn: 0x11,
            hold: 0,
            cqes: 0,
            rr_next: 0,
            ready: ReadySet::default(),
            timers: Timers::default(),
            events: VecDeque::new(),
            counters: Counters::default(),
            clock: 0,
            due: Vec::new(),
        }
    }

    /// Sets the port's active MTU (what the driver learns from the link);
    /// UD QPs created afterwards take it as their largest message.
    pub fn set_port_mtu(&mut self, mtu: Mtu) {
        self.cfg.port_mtu = mtu;
    }

    /// Sets how many packets an RC QP may keep unacknowledged (go-back-N's
    /// window), for QPs old and new: a driver whose QPs share one receive
    /// buffer at the peer divides it among them as QPs come and go.
    pub fn set_max_outstanding_pkts(&mut self, n: u32) {
        self.cfg.max_outstanding_pkts = n.max(1);
    }

    /// The RC QPs this RNIC holds, in any state.
    pub fn rc_qp_count(&self) -> usize {
        self.qps
            .values()
            .filter(|q| q.init.qp_type == QpType::Rc)
            .count()
    }

    pub fn config(&self) -> &RnicConfig {
        &self.cfg
    }
    /// Host memory (the application's view of its buffers).
    pub fn mem(&self) -> &M {
        &self.mem
    }
    pub fn mem_mut(&mut self) -> &mut M {
        &mut self.mem
    }
    /// Heap bytes this RNIC holds, by structure (see [`Footprint`]); its
    /// memory (`mem`) is left out.
    pub fn footprint(&self) -> Footprint {
        let mut f = Footprint::default();
        for qp in self.qps.values() {
            qp.footprint(&mut f);
        }
        f.tables = self.qps.heap_bytes()
            + self.ready.heap_bytes()
            + self.timers.heap_bytes()
            + footprint::vec(&self.due)
            + self.mrs.heap_bytes()
            + self.cqs.values().map(Cq::heap_bytes).sum::<u64>()
            + footprint::tree(&self.cqs)
            + footprint::deque(&self.events);
        f
    }

    pub fn counters(&self) -> Counters {
        self.counters
    }

    pub fn alloc_pd(&mut self) -> PdHandle {
        let h = self.next_pd;
        self.next_pd += 1;
        self.pds.insert(h);
        PdHandle(h)
    }

    pub fn dealloc_pd(&mut self, pd: PdHandle) -> Result<()> {
        if !self.pds.contains(&pd.0) {
            return Err(unknown("PD", pd.0));
        }
        let users = self.mrs.count_in(pd)
            + self.qps.values().filter(|q| q.init.pd == pd).count()
            + self.srqs.values().filter(|s| s.pd == pd).count();
        if users > 0 {
            return Err(VerbsError::InUse {
                kind: "PD",
                id: pd.0,
                users,
            });
        }
        self.pds.remove(&pd.0);
        Ok(())
    }

    /// Registers `[addr, addr+len)` of host memory (`ibv_reg_mr`).
    pub fn reg_mr(&mut self, pd: PdHandle, addr: u64, len: u64, access: Access) -> Result<Mr> {
        if !self.pds.contains(&pd.0) {
            return Err(unknown("PD", pd.0));
        }
        // IBA 10.6.3.2 (C10-xx): remote write or atomic access requires local write.
        if (access.contains(Access::REMOTE_WRITE) || access.contains(Access::REMOTE_ATOMIC))
            && !access.contains(Access::LOCAL_WRITE)
        {
            return Err(VerbsError::InvalidAttribute {
                attr: "access",
                why: "REMOTE_WRITE and REMOTE_ATOMIC require LOCAL_WRITE".into(),
            });
        }
        if len > 0 && !self.mem.contains(addr, len) {
            return Err(VerbsError::BadAddress { addr, len });
        }
        Ok(self.mrs.insert(pd, addr, len, access))
    }

    pub fn dereg_mr(&mut self, lkey: u32) -> Result<()> {
        self.mrs.remove(lkey).map(|_| ()).ok_or(unknown("MR", lkey))
    }

    pub fn create_cq(&mut self, cqe: u32) -> Result<CqHandle> {
        if cqe == 0 || cqe > self.cfg.max_cqe {
            return Err(VerbsError::InvalidAttribute {
                attr: "cqe",
                why: format!("must be 1..={}", self.cfg.max_cqe),
            });
        }
        if self.cqs.len() as u32 >= self.cfg.max_cq {
            return Err(VerbsError::OutOfResources("CQ"));
        }
        let h = self.next_cq;
        self.next_cq += 1;
        self.cqs.insert(h, Cq::new(cqe));
        Ok(CqHandle(h))
    }

    pub fn destroy_cq(&mut self, cq: CqHandle) -> Result<()> {
        let users = self
            .qps
            .values()
            .filter(|q| q.init.send_cq == cq || q.init.recv_cq == cq)
            .count();
        if users > 0 {
            return Err(VerbsError::InUse {
                kind: "CQ",
                id: cq.0,
                users,
            });
        }
        let c = self.cqs.remove(&cq.0).ok_or(unknown("CQ", cq.0))?;
        self.cqes -= c.len();
        Ok(())
    }

    /// Polls up to `max` completions (`ibv_poll_cq`).
    pub fn poll_cq(&mut self, cq: CqHandle, max: usize) -> Vec<Wc> {
        let mut out = Vec::new();
        if let Some(c) = self.cqs.get_mut(&cq.0) {
            while out.len() < max {
                match c.pop() {
                    Some(w) => out.push(w),
                    None => break,
                }
            }
        }
        self.cqes -= out.len();
        out
    }

    /// Completions waiting in `cq`.
    pub fn cq_len(&self, cq: CqHandle) -> usize {
        self.cqs.get(&cq.0).map_or(0, |c| c.len())
    }

    /// Whether any CQ holds a completion: false means every
    /// [`cq_len`](Self::cq_len) is 0, read without searching the CQs.
    #[inline]
    pub fn has_completions(&self) -> bool {
        self.cqes > 0
    }

    pub fn poll_event(&mut self) -> Option<AsyncEvent> {
        self.events.pop_front()
    }

    pub fn create_srq(&mut self, pd: PdHandle, max_wr: u32, max_sge: u32) -> Result<SrqHandle> {
        if !self.pds.contains(&pd.0) {
            return Err(unknown("PD", pd.0));
        }
        if max_wr == 0 || max_wr > self.cfg.max_qp_wr || max_sge > self.cfg.max_sge {
            return Err(VerbsError::InvalidAttribute {
                attr: "max_wr/max_sge",
                why: "out of device limits".into(),
            });
        }
        let h = self.next_srq;
        self.next_srq += 1;
        self.srqs.insert(
            h,
            Srq {
                pd,
                max_wr,
                max_sge,
                queue: VecDeque::new(),
                limit: 0,
            },
        );
        Ok(SrqHandle(h))
    }

    /// Arms the SRQ limit event (`ibv_modify_srq` with IBV_SRQ_LIMIT).
    pub fn arm_srq_limit(&mut self, srq: SrqHandle, limit: u32) -> Result<()> {
        let s = self.srqs.get_mut(&srq.0).ok_or(unknown("SRQ", srq.0))?;
        if limit > s.max_wr {
            return Err(VerbsError::InvalidAttribute {
                attr: "srq_limit",
                why: "larger than max_wr".into(),
            });
        }
        s.limit = limit;
        Ok(())
    }

    /// `ibv_destroy_srq`: refused while a QP still takes its receives from it.
    pub fn destroy_srq(&mut self, srq: SrqHandle) -> Result<()> {
        if !self.srqs.contains_key(&srq.0) {
            return Err(unknown("SRQ", srq.0));
        }
        let users = self
            .qps
            .values()
            .filter(|q| q.init.srq == Some(srq))
            .count();
        if users > 0 {
            return Err(VerbsError::InUse {
                kind: "SRQ",
                id: srq.0,
                users,
            });
        }
        self.srqs.remove(&srq.0);
        Ok(())
    }

    /// Receive WQEs waiting in the SRQ (`ibv_query_srq` reports the limit;
    /// this is what the limit is compared against).
    pub fn srq_len(&self, srq: SrqHandle) -> Result<usize> {
        self.srqs
            .get(&srq.0)
            .map(|s| s.queue.len())
            .ok_or(unknown("SRQ", srq.0))
    }

    pub fn post_srq_recv(
        &mut self,
        srq: SrqHandle,
        wrs: &[RecvWr],
    ) -> core::result::Result<(), PostError> {
        let s = self.srqs.get_mut(&srq.0).ok_or(PostError {
            index: 0,
            error: unknown("SRQ", srq.0),
        })?;
        for (index, wr) in wrs.iter().enumerate() {
            check_room("SRQ", s.queue.len(), s.max_wr, wr.sg_list.len(), s.max_sge)
                .map_err(|error| PostError { index, error })?;
            s.queue.push_back(wr.clone());
        }
        Ok(())
    }

    pub fn create_qp(&mut self, init: QpInitAttr) -> Result<u32> {
        self.create_qp_with_cc(init, Box::new(NoCc))
    }

    /// Creates a QP whose requester is paced by `cc`.
    pub fn create_qp_with_cc(
        &mut self,
        init: QpInitAttr,
        cc: Box<dyn CongestionControl>,
    ) -> Result<u32> {
        if !self.pds.contains(&init.pd.0) {
            return Err(unknown("PD", init.pd.0));
        }
        for cq in [init.send_cq, init.recv_cq] {
            if !self.cqs.contains_key(&cq.0) {
                return Err(unknown("CQ", cq.0));
            }
        }
        if let Some(s) = init.srq {
            let srq = self.srqs.get(&s.0).ok_or(unknown("SRQ", s.0))?;
            if srq.pd != init.pd {
                return Err(VerbsError::PdMismatch("QP and SRQ"));
            }
        }
        let c = &self.cfg;
        let limits = [
            ("max_send_wr", init.max_send_wr, c.max_qp_wr),
            ("max_recv_wr", init.max_recv_wr, c.max_qp_wr),
            ("max_send_sge", init.max_send_sge, c.max_sge),
            ("max_recv_sge", init.max_recv_sge, c.max_sge),
            ("max_inline_data", init.max_inline_data, c.max_inline_data),
        ];
        for (attr, v, max) in limits {
            if v > max {
                return Err(VerbsError::InvalidAttribute {
                    attr,
                    why: format!("{v} exceeds the device limit {max}"),
                });
            }
        }
        if init.max_send_wr == 0 {
            return Err(VerbsError::InvalidAttribute {
                attr: "max_send_wr",
                why: "must be at least 1".into(),
            });
        }
        if self.qps.len() as u32 >= self.cfg.max_qp || self.next_qpn > 0xff_ffff {
            return Err(VerbsError::OutOfResources("QP"));
        }
        let qpn = self.next_qpn;
        self.next_qpn += 1;
        let mut qp = Qp::new(qpn, init, cc);
        qp.irn_cfg = self.cfg.irn;
        if init.qp_type == QpType::Ud {
            qp.mtu = self.cfg.port_mtu;
        }
        self.qps.insert(qpn, qp);
        Ok(qpn)
    }

    pub fn destroy_qp(&mut self, qpn: u32) -> Result<()> {
        if !self.qps.remove(&qpn) {
            return Err(unknown("QP", qpn));
        }
        self.ready.remove(&qpn);
        // Its entry, if any, is no longer current.
        self.settle_timers();
        Ok(())
    }

    /// Re-files `qpn`'s next deadline and marks it ready to be polled.
    fn touch(&mut self, qpn: u32) {
        if !self.touch_known(qpn, |_| {}) {
            self.ready.insert(qpn);
        }
    }

    /// Runs `f` on QP `qpn`, then re-files it as [`touch`](Self::touch)
    /// does, with one table lookup for both; false (nothing done) when
    /// there is no such QP. After a received packet, the check that its
    /// QP exists, the re-file and, for an ACK with INT, the controller's
    /// update all go through the one reference (they were two or three
    /// lookups a packet).
    #[inline]
    fn touch_known(&mut self, qpn: u32, f: impl FnOnce(&mut Qp)) -> bool {
        let Some(q) = self.qps.get_mut(&qpn) else {
            return false;
        };
        f(q);
        // A QP with nothing to send stays out of the ready set (see
        // `Qp::idle_tx`): the poll that would find it empty is skipped. The
        // QP is re-filed through the reference in hand (one table lookup per
        // packet received, not two; issue 12).
        let ready = !q.idle_tx();
        if ready {
            self.ready.insert(qpn);
        } else {
            self.ready.remove(&qpn);
        }
        if refile_qp(q, qpn, ready, self.clock, &mut self.timers) {
            self.settle_timers();
        }
        #[cfg(debug_assertions)]
        self.check_scheduled(qpn);
        true
    }

    /// Debug builds: a QP with work left is either ready to be polled or
    /// filed under a deadline, so some driver call will run it again. (Only
    /// a QP waiting for ACKs with no retransmission timer relies on the
    /// network alone.) A QP that is neither would wait forever unseen.
    #[cfg(debug_assertions)]
    fn check_scheduled(&self, qpn: u32) {
        let Some(s) = self.qp_status(qpn) else {
            return;
        };
        let only_acks = !s.unsent && s.responses_queued == 0;
        let rto_off = self.qps.get(&qpn).is_some_and(|q| q.rto_ns().is_none());
        debug_assert!(
            !s.has_work() || s.is_scheduled() || (only_acks && rto_off),
            "QP with work and nothing to wake it: {s}"
        );
    }

    pub fn qp_state(&self, qpn: u32) -> Result<QpState> {
        self.qps
            .get(&qpn)
            .map(|q| q.state)
            .ok_or(unknown("QP", qpn))
    }

    pub fn qp(&self, qpn: u32) -> Option<&Qp> {
        self.qps.get(&qpn)
    }

    /// Sets QP `qpn`'s context: a word of the driver's own (ibverbs'
    /// `qp_context`) that every packet the QP sends hands back (see
    /// [`TransmitSink::put_from`]). Zero until set.
    pub fn set_qp_context(&mut self, qpn: u32, context: u64) -> Result<()> {
        let qp = self.qps.get_mut(&qpn).ok_or_else(|| unknown("QP", qpn))?;
        qp.context = context;
        Ok(())
    }

    /// A read-only snapshot of `qpn`'s transport and scheduling state.
    pub fn qp_status(&self, qpn: u32) -> Option<QpStatus> {
        self.qps
            .get(&qpn)
            .map(|q| QpStatus::of(q, self.ready.contains(&qpn), self.clock))
    }

    /// True when a QP with work (see [`QpStatus::has_work`]) waits to be
    /// visited by [`poll_transmit`](Self::poll_transmit). Linear in the QPs:
    /// for checks, not for a fast path.
    pub fn has_ready_work(&self) -> bool {
        !self.ready.is_empty()
            && self.qps.values().any(|q| {
                self.ready.contains(&q.qpn) && QpStatus::of(q, true, self.clock).has_work()
            })
    }

    /// True when no QP is marked ready: a transmit poll now would come
    /// back empty having changed nothing but the clock (see
    /// [`advance_clock`](Self::advance_clock)). O(1), unlike
    /// [`has_ready_work`](Self::has_ready_work). A driver that knows no
    /// call reached the RNIC since may skip such a poll (the simulator
    /// skips a host's wake-up at the end of a frame that would only find
    /// this; issue 12).
    pub fn nothing_ready(&self) -> bool {
        self.ready.is_empty()
    }

    /// What a transmit poll at `now` that finds nothing ready does: the
    /// RNIC's clock (which verbs calls such as `post_send` read for
    /// pacing) moves to `now` if it is behind. For a driver that skipped
    /// such a poll ([`nothing_ready`](Self::nothing_ready)).
    pub fn advance_clock(&mut self, now: Nanos) {
        self.clock = self.clock.max(now);
    }

    fn split(&mut self) -> (&mut QpTable, Ctx<'_, M>) {
        let Rnic {
            cfg,
            mem,
            mrs,
            cqs,
            srqs,
            events,
            counters,
            qps,
            cqes,
            ..
        } = self;
        (
            qps,
            Ctx {
                cfg,
                mem,
                mrs,
                cqs,
                cqes,
                srqs,
                events,
                counters,
            },
        )
    }

    /// `ibv_modify_qp`: moves `qpn` to `to`, validating `attr` for the transition.
    pub fn modify_qp(&mut self, qpn: u32, to: QpState, attr: &QpAttr) -> Result<()> {
        let (qps, mut ctx) = self.split();
        let qp = qps.get_mut(&qpn).ok_or(unknown("QP", qpn))?;
        qp.modify(to, attr)?;
        match to {
            QpState::Err => qp.enter_error(&mut ctx),
            QpState::Reset => {
                let (init, filed, irn_cfg) = (qp.init, qp.filed, qp.irn_cfg);
                let cc = qp.cc.take();
                *qp = Qp::new(qpn, init, cc);
                qp.irn_cfg = irn_cfg;
                // Still filed in the timer index under its old deadline.
                qp.filed = filed;
            }
            _ => {}
        }
        self.touch(qpn);
        Ok(())
    }

    /// `ibv_post_send`: queues work requests in order; stops at the first bad one.
    pub fn post_send(&mut self, qpn: u32, wrs: &[SendWr]) -> core::result::Result<(), PostError> {
        // A QP with nothing unsent earns no pacing credit while it idles:
        // catch-up (`RnicConfig::pacing_catch_up_ns`) makes good a wake-up
        // the OS delayed while the QP was backlogged, not the time it had
        // nothing to send — else a shaped QP posting a burst after a pause
        // would send up to rate × catch-up at line rate.
        let was_drained = self.cfg.pacing_catch_up_ns > 0
            && self.qps.get(&qpn).is_some_and(|q| q.cursor.0 >= q.sq.len());
        let r = self.post_send_inner(qpn, wrs);
        let clock = self.clock;
        if let Some(q) = self.qps.get_mut(&qpn) {
            if was_drained {
                q.next_send_at = q.next_send_at.max(clock);
            }
            self.touch(qpn);
        }
        r
    }

    fn post_send_inner(&mut self, qpn: u32, wrs: &[SendWr]) -> core::result::Result<(), PostError> {
        let (qps, mut ctx) = self.split();
        let qp = qps.get_mut(&qpn).ok_or(PostError {
            index: 0,
            error: unknown("QP", qpn),
        })?;
        for (index, wr) in wrs.iter().enumerate() {
            let err = |error| PostError { index, error };
            match qp.state {
                QpState::Rts | QpState::Sqd | QpState::Err => {}
                s => return Err(err(VerbsError::WrongState(s))),
            }
            let (depth, max_sge) = (qp.init.max_send_wr, qp.init.max_send_sge);
            check_room("SQ", qp.sq.len(), depth, wr.sg_list.len(), max_sge).map_err(err)?;
            if qp.init.qp_type == QpType::Ud {
                if !matches!(wr.opcode, WrOpcode::Send | WrOpcode::SendWithImm(_)) {
                    return Err(err(VerbsError::UnsupportedOpcode(wr.opcode.name())));
                }
                if wr.ud.is_none() {
                    return Err(err(VerbsError::MissingAddressHandle));
                }
            }
            let len: u64 = wr.sg_list.iter().map(|s| u64::from(s.length)).sum();
            let inline = if wr.flags.inline && !wr.opcode.is_read_or_atomic() {
                if len > u64::from(qp.init.max_inline_data) {
                    return Err(err(VerbsError::InlineTooLarge {
                        len: len as usize,
                        max: qp.init.max_inline_data,
                    }));
                }
                // Inline data is copied now; the buffer may be reused at once.
                // So it is bytes even where packets otherwise name host
                // memory (zero-copy), which would be read only when sent.
                let mut p = match ctx.mem.empty_payload() {
                    Payload::Host(_) => Payload::Bytes(Vec::with_capacity(len as usize)),
                    p => p,
                };
                for s in &wr.sg_list {
                    ctx.mem
                        .read_into(s.addr, s.length as usize, &mut p)
                        .map_err(err)?;
                }
                Some(p)
            } else {
                None
            };
            let wqe = SendWqe {
                // An inline WQE's bytes are in `inline`: its SGEs are done
                // with. (A virtual memory's inline payload is only a length;
                // packets are still cut along the SGEs.)
                wr: if matches!(inline, Some(Payload::Bytes(_))) {
                    SendWr {
                        sg_list: Vec::new(),
                        ..*wr
                    }
                } else {
                    wr.clone()
                },
                inline,
                len,
                first_psn: None,
                npkts: 0,
                acked: 0,
                got: Vec::new(),
                got_ahead: 0,
                segs: Vec::new(),
                issued: 0,
                done: false,
                status: WcStatus::Success,
                signaled: wr.flags.signaled,
                checked: false,
            };
            if qp.state == QpState::Err {
                // Posting to a QP in ERR completes with a flush error (IBA C10-42).
                ctx.complete(
                    qp.init.send_cq,
                    Wc::flushed(wr.wr_id, wr.opcode.wc_opcode(), qpn),
                );
                continue;
            }
            if qp.sq.len() == qp.sq.capacity() {
                // Doubling from one WQE, not the four a first push
                // reserves: a simulated flow's QP posts one WQE of 224
                // bytes and holds its queue's room for life.
                qp.sq.reserve_exact(qp.sq.len().max(1));
            }
            qp.sq.push_back(wqe);
        }
        Ok(())
    }

    /// `ibv_post_recv`.
    pub fn post_recv(&mut self, qpn: u32, wrs: &[RecvWr]) -> core::result::Result<(), PostError> {
        let (qps, mut ctx) = self.split();
        let qp = qps.get_mut(&qpn).ok_or(PostError {
            index: 0,
            error: unknown("QP", qpn),
        })?;
        for (index, wr) in wrs.iter().enumerate() {
            let err = |error| PostError { index, error };
            if qp.init.srq.is_some() {
                return Err(err(VerbsError::InvalidAttribute {
                    attr: "srq",
                    why: "QP uses an SRQ: post to the SRQ".into(),
                }));
            }
            match qp.state {
                QpState::Reset => return Err(err(VerbsError::WrongState(QpState::Reset))),
                QpState::Err => {
                    ctx.complete(qp.init.recv_cq, Wc::flushed(wr.wr_id, WcOpcode::Recv, qpn));
                    continue;
                }
                _ => {}
            }
            let (depth, max_sge) = (qp.init.max_recv_wr, qp.init.max_recv_sge);
            check_room("RQ", qp.rq.len(), depth, wr.sg_list.len(), max_sge).map_err(err)?;
            qp.rq.push_back(wr.clone());
        }
        Ok(())
    }

    /// Feeds one received packet (the UDP payload, parsed) into the RNIC.
    /// `src` is the sender's IP and UDP port; `ce` is true when the IP header
    /// carried Congestion Experienced.
    pub fn handle_packet(
        &mut self,
        now: Nanos,
        src: SocketAddr,
        ce: bool,
        t: &TransportRepr,
        payload: PayloadRef<'_>,
    ) {
        self.clock = self.clock.max(now);
        self.handle_packet_inner(now, src, ce, t, payload);
        self.touch_known(t.bth.dest_qp, |_| {});
    }

    fn handle_packet_inner(
        &mut self,
        now: Nanos,
        src: SocketAddr,
        ce: bool,
        t: &TransportRepr,
        payload: PayloadRef<'_>,
    ) {
        self.counters.rx_pkts += 1;
        let (qps, mut ctx) = self.split();
        let op = t.bth.opcode;
        let match_port = ctx.cfg.match_source_port;
        // Whether `src` is the connected peer of an RC QP (always true for
        // an unconnected or UD QP: their own checks decide).
        let from_peer = |qp: &Qp| match &qp.ah {
            None => true,
            Some(a) => is_peer(a, &src, match_port),
        };
        if op == Opcode::Cnp {
            // A CNP cuts its QP's rate: only the RC QP's connected peer may
            // send one, or any host could throttle any QP (DCQCN's NP→RP
            // notification, Zhu et al. SIGCOMM 2015 §3, goes peer to peer).
            let Some(qp) = qps.get_mut(&t.bth.dest_qp) else {
                ctx.counters.rx_unknown_qp += 1;
                return;
            };
            if qp.init.qp_type == QpType::Rc && (qp.ah.is_none() || !from_peer(qp)) {
                ctx.counters.rx_bad_source += 1;
                return;
            }
            ctx.counters.cnps_rx += 1;
            qp.cc.on_cnp(now);
            // The lowest rate counts the cut itself, not only rates a
            // packet left at: a driver that polls late may see the rate
            // recover (timers due meanwhile) before its next send.
            if let Some(r) = qp.cc.rate_bps().filter(|r| *r > 0) {
                qp.cc_min_rate = Some(qp.cc_min_rate.map_or(r, |m| m.min(r)));
            }
            return;
        }
        // P_Key: only the default partition exists (IBA 10.9.1.2).
        if t.bth.pkey & 0x7fff != 0x7fff {
            ctx.counters.rx_malformed += 1;
            return;
        }
        let Some(qp) = qps.get_mut(&t.bth.dest_qp) else {
            ctx.counters.rx_unknown_qp += 1;
            return;
        };
        let rc = qp.init.qp_type == QpType::Rc;
        let transport_ok = match op.transport() {
            roce_wire::Transport::Rc => rc,
            roce_wire::Transport::Ud => !rc,
            _ => false,
        };
        if !transport_ok {
            ctx.counters.rx_malformed += 1;
            return;
        }
        // Requests, ACKs, NAKs and read responses alike: a connected QP's
        // context names one peer, and nothing else may move its PSNs.
        if rc && !from_peer(qp) {
            ctx.counters.rx_bad_source += 1;
            return;
        }
        if op.is_request() {
            qp.on_request(now, src, ce, t, payload, &mut ctx);
        } else {
            qp.on_response(now, t, payload, &mut ctx);
        }
    }

    /// [`handle_packet`](Self::handle_packet) for a packet that carried
    /// telemetry back (an HPCC ACK's INT, an HPCC-PINT ACK's code), then
    /// the telemetry to the destination QP's congestion control as
    /// [`handle_int`](Self::handle_int) would, with one re-file of the QP
    /// for both. The same as the two calls in turn: a re-file depends only
    /// on the QP's state and the clock, so the first of two back to back
    /// is overwritten by the second (it leaves at most a stale timer entry,
    /// which the timer index skips); with an ACK per packet under HPCC the
    /// one saved is one per packet.
    pub fn handle_packet_telemetry(
        &mut self,
        now: Nanos,
        src: SocketAddr,
        ce: bool,
        t: &TransportRepr,
        payload: PayloadRef<'_>,
        telemetry: Telemetry<'_>,
    ) {
        self.clock = self.clock.max(now);
        self.handle_packet_inner(now, src, ce, t, payload);
        self.touch_known(t.bth.dest_qp, |qp| qp.on_telemetry(now, telemetry));
    }

    /// Hands in-band network telemetry to `qpn`'s congestion control (HPCC):
    /// the driver calls this with the hops an ACK for that QP carried back.
    pub fn handle_int(&mut self, now: Nanos, qpn: u32, hops: &[IntHop]) {
        self.clock = self.clock.max(now);
        self.touch_known(qpn, |qp| qp.on_telemetry(now, Telemetry::Int(hops)));
    }

    /// What `qpn`'s congestion controller has done (see [`CcStats`]).
    pub fn cc_stats(&self, qpn: u32) -> Option<CcStats> {
        self.qps.get(&qpn).map(|q| CcStats {
            algorithm: q.cc.name(),
            rate_bps: q.cc.rate_bps(),
            min_rate_bps: q.cc_min_rate,
            window_bytes: q.cc.window_bytes(),
            rate_cuts: q.cc.rate_cuts(),
        })
    }

    /// The name of `qpn`'s congestion controller and its current rate and window.
    pub fn cc_state(&self, qpn: u32) -> Option<(&'static str, Option<u64>, Option<u64>)> {
        self.qps
            .get(&qpn)
            .map(|q| (q.cc.name(), q.cc.rate_bps(), q.cc.window_bytes()))
    }

    /// The next packet to send, if any may leave at `now`. Each QP sends its
    /// responses and control packets before new requests; QPs with work are
    /// served round-robin. Only QPs marked ready are visited, so an idle QP
    /// costs nothing here.
    pub fn poll_transmit(&mut self, now: Nanos) -> Option<Transmit> {
        self.poll_transmit_into(now, Whole)
    }

    /// [`poll_transmit`](Self::poll_transmit) for a driver that reads the
    /// packet where the RNIC built it: `f` sees the [`Transmit`] by
    /// reference and returns what the driver keeps of it (`None`: nothing
    /// may leave now, and `f` is not called).
    ///
    /// Why: a `Transmit` is about 200 bytes (a `SocketAddr`, a whole
    /// `TransportRepr` with every optional extension header, a `Payload`),
    /// and returning it by value copies it out of the RNIC and again into
    /// the driver's frame. The UDP engine serialises it and does not mind;
    /// the fabric simulator keeps 32 bytes of it per packet and sends
    /// millions of packets a second, so those copies were a measurable
    /// share of its cost per event (issue 12). The callback is the
    /// sans-IO analogue of quinn-proto writing a datagram into the
    /// caller's buffer: the RNIC still decides everything, the driver
    /// only chooses the shape it receives the packet in.
    ///
    /// `f` runs inside the packet's builder, on the packet as the builder
    /// made it (see [`poll_transmit_into`](Self::poll_transmit_into)), before the poll's own
    /// bookkeeping ends: it cannot reach the RNIC, so nothing it sees
    /// differs.
    #[inline]
    pub fn poll_transmit_with<R>(
        &mut self,
        now: Nanos,
        f: impl FnOnce(&Transmit) -> R,
    ) -> Option<R> {
        self.poll_transmit_into(now, With(f))
    }

    /// [`poll_transmit`](Self::poll_transmit) into `sink`: the packet's
    /// builder hands it to [`TransmitSink::put`] by value as its last act
    /// (a builder with nothing to send hands the sink back, and the poll
    /// goes on to the next QP). `put` runs before the poll's own
    /// bookkeeping ends, but it cannot reach the RNIC, so nothing it sees
    /// differs. Debug builds then check every QP visited is still
    /// scheduled.
    ///
    /// Why: the builders returned the packet (a `Transmit` of about 200
    /// bytes) and the poll passed a reference to it to the driver's
    /// callback. The packet then had to exist in memory whole: the builder
    /// stored every field of it (about 60 instructions a data packet, 35
    /// an ACK, on the 1 ms HPCC fat tree) and the callback, out of line,
    /// loaded back the few the simulator keeps. A sink whose `put` is
    /// inlined into the builder is handed the fields where they lie.
    #[inline]
    pub fn poll_transmit_into<S: TransmitSink>(&mut self, now: Nanos, f: S) -> Option<S::Out> {
        #[cfg(debug_assertions)]
        {
            let mut polled = Vec::new();
            let out = self.poll_ready(now, &mut polled, f);
            for qpn in polled {
                self.check_scheduled(qpn);
            }
            out
        }
        #[cfg(not(debug_assertions))]
        self.poll_ready(now, &mut Vec::new(), f)
    }

    /// [`poll_transmit`](Self::poll_transmit)'s loop. The fields are borrowed
    /// apart once for the whole poll, not once per QP visited, and each
    /// visited QP is re-filed through the reference already in hand rather
    /// than a second table lookup: this runs for every packet sent (issue
    /// 12). Debug builds list the QPs visited in `polled`, to check each is
    /// still scheduled once the borrows end. The packet found goes to `f`
    /// where it lies (see [`poll_transmit_with`](Self::poll_transmit_with)).
    #[cfg_attr(not(debug_assertions), allow(unused_variables))]
    fn poll_ready<S: TransmitSink>(
        &mut self,
        now: Nanos,
        polled: &mut Vec<u32>,
        f: S,
    ) -> Option<S::Out> {
        let mut f = f;
        self.clock = self.clock.max(now);
        if self.hold != 0 {
            return self.poll_held(now, f);
        }
        let Rnic {
            qps,
            ready,
            clock,
            rr_next,
            timers,
            cfg,
            mem,
            mrs,
            cqs,
            cqes,
            srqs,
            events,
            counters,
            ..
        } = self;
        let mut ctx = Ctx {
            cfg,
            mem,
            mrs,
            cqs,
            cqes,
            srqs,
            events,
            counters,
        };
        while !ready.is_empty() {
            let qpn = ready.next_from(*rr_next)?;
            #[cfg(debug_assertions)]
            polled.push(qpn);
            let Some(qp) = qps.get_mut(&qpn) else {
                ready.remove(&qpn);
                continue;
            };
            // The packet goes to `f` inside its builder (see
            // `poll_transmit_into`);
            // a builder with nothing to send hands `f` back. (Measured dead
            // ends, when the builders returned the packet for `f` to read
            // here: writing it through an `&mut Option` built with
            // `Option::insert`, to spare the copy out of their own local:
            // the copy went, but the insert cost nearly as much; net 5 M
            // instructions fewer for data and 2 M more for ACKs on the
            // mid-size fat5ms run; issue 12. Another: one call site of
            // `f`, through a reference to whichever local holds the packet.
            // `f` was then inlined, 24 M instructions fewer, but a `memcpy`
            // of the packet came with it, 29 M more: net +5 M with HPCC,
            // -8 M with DCQCN; session 19.)
            if qp.response_due() {
                match qp.next_response(&mut ctx, f) {
                    Ok(r) => {
                        if sent(qp, qpn, ready, rr_next, *clock, timers) {
                            settle(timers, qps);
                        }
                        return Some(r);
                    }
                    Err(g) => f = g,
                }
            }
            match qp.next_request(now, &mut ctx, f) {
                Ok(r) => {
                    if sent(qp, qpn, ready, rr_next, *clock, timers) {
                        settle(timers, qps);
                    }
                    return Some(r);
                }
                Err(g) => f = g,
            }
            // Nothing now: wait for input or this QP's next deadline.
            ready.remove(&qpn);
            if refile_qp(qp, qpn, false, *clock, timers) {
                settle(timers, qps);
            }
        }
        None
    }

    /// Tells the transmit poll what the port cannot send now: requests
    /// (the priority a requester's data goes out on is paused) and
    /// responses (the priority of ACKs, NAKs and CNPs is paused). A poll
    /// passes over what is held, leaving its QP marked ready for the poll
    /// after the pause, and still hands out the rest: a NIC whose data is
    /// paused by PFC keeps acknowledging what it receives, as the HPCC
    /// ns-3 simulator's does (its `GetNextQindex` skips a QP whose
    /// priority is paused and still serves the ACK queue). Without it, the
    /// paused data a driver had taken filled its staging queue and the
    /// ACKs behind it waited for the pause to end (issue 12).
    ///
    /// Nothing is held until this is called; a driver that calls it sets
    /// it again whenever a pause starts or ends.
    pub fn set_tx_hold(&mut self, requests: bool, responses: bool) {
        self.hold = (u8::from(requests) * HOLD_REQUESTS) | (u8::from(responses) * HOLD_RESPONSES);
    }

    /// [`poll_ready`](Self::poll_ready) while something is held (see
    /// [`set_tx_hold`](Self::set_tx_hold)): each QP marked ready is
    /// visited at most once, in turn from `rr_next`. What is held is
    /// passed over and keeps its QP marked; a QP with nothing else is
    /// unmarked and re-filed as the plain poll does. Out of line: pauses
    /// are rare, and the plain poll runs for every packet sent.
    ///
    /// Why a loop of its own, repeating the plain one's (session 39,
    /// callgrind on the 1 ms HPCC fat tree, outputs identical): one loop
    /// for both, counting visits and testing the holds on every QP,
    /// cost 15,364 M instructions against 15,243 M without holds (+0.8 %);
    /// with the held loop apart, 15,259 M (+0.1 %).
    #[cold]
    #[inline(never)]
    fn poll_held<S: TransmitSink>(&mut self, now: Nanos, f: S) -> Option<S::Out> {
        let mut f = f;
        let (hold_req, hold_resp) = (
            self.hold & HOLD_REQUESTS != 0,
            self.hold & HOLD_RESPONSES != 0,
        );
        let Rnic {
            qps,
            ready,
            clock,
            rr_next,
            timers,
            cfg,
            mem,
            mrs,
            cqs,
            cqes,
            srqs,
            events,
            counters,
            ..
        } = self;
        let mut ctx = Ctx {
            cfg,
            mem,
            mrs,
            cqs,
            cqes,
            srqs,
            events,
            counters,
        };
        let mut from = *rr_next;
        // At most one visit per QP marked now (a visit may unmark one, and
        // the search wraps round).
        for _ in 0..ready.len() {
            let qpn = ready.next_from(from)?;
            from = qpn.wrapping_add(1);
            let Some(qp) = qps.get_mut(&qpn) else {
                ready.remove(&qpn);
                continue;
            };
            let mut held = false;
            if qp.response_due() {
                if hold_resp {
                    held = true;
                } else {
                    match qp.next_response(&mut ctx, f) {
                        Ok(r) => {
                            if sent(qp, qpn, ready, rr_next, *clock, timers) {
                                settle(timers, qps);
                            }
                            return Some(r);
                        }
                        Err(g) => f = g,
                    }
                }
            }
            if hold_req {
                held |= qp.requests_pending();
            } else {
                match qp.next_request(now, &mut ctx, f) {
                    Ok(r) => {
                        if sent(qp, qpn, ready, rr_next, *clock, timers) {
                            settle(timers, qps);
                        }
                        return Some(r);
                    }
                    Err(g) => f = g,
                }
            }
            if !held {
                ready.remove(&qpn);
                if refile_qp(qp, qpn, false, *clock, timers) {
                    settle(timers, qps);
                }
            }
        }
        None
    }

    /// When [`handle_timeout`](Self::handle_timeout) next has work: the
    /// earliest retransmission, RNR, pacing or congestion-control deadline.
    /// Once `handle_timeout(now)` ran, it is later than `now`: a QP ready
    /// to send whose pacing gap has ended waits for
    /// [`poll_transmit`](Self::poll_transmit), not for a timer, so that gap
    /// is no deadline here (a due one would hide every later deadline from
    /// a driver that sleeps until the first; issue 12).
    pub fn poll_timeout(&self) -> Option<Nanos> {
        self.timers.first()
    }

    /// Keeps the timer index's first entry current (see [`Timers`]).
    fn settle_timers(&mut self) {
        let qps = &self.qps;
        self.timers.settle(qps.len(), |t, q| {
            qps.get(&q).is_some_and(|x| x.filed == Some(t))
        });
    }

    /// Runs the timers due at `now`.
    pub fn handle_timeout(&mut self, now: Nanos) {
        self.clock = self.clock.max(now);
        if self.timers.first().is_none_or(|t| t > now) {
            return;
        }
        // Each QP due now runs once; one due again at `now` waits for the
        // next call rather than spinning here.
        let qps = &self.qps;
        let mut due = std::mem::take(&mut self.due);
        self.timers.take_due(
            now,
            |t, q| qps.get(&q).is_some_and(|x| x.filed == Some(t)),
            &mut due,
        );
        self.settle_timers();
        // The fields borrowed apart once for all the QPs due, and each QP
        // re-filed as `touch` does through the reference in hand: `touch`
        // looked the QP up a second time and `split` built the context
        // anew for every QP (a host's timer fires once per paced packet).
        let Rnic {
            qps,
            ready,
            clock,
            timers,
            cfg,
            mem,
            mrs,
            cqs,
            cqes,
            srqs,
            events,
            counters,
            ..
        } = self;
        let mut ctx = Ctx {
            cfg,
            mem,
            mrs,
            cqs,
            cqes,
            srqs,
            events,
            counters,
        };
        for &(_, qpn) in &due {
            let Some(qp) = qps.get_mut(&qpn) else {
                // As `touch` leaves a QPN it does not know.
                ready.insert(qpn);
                continue;
            };
            qp.filed = None;
            if qp.cc.next_tick().is_some_and(|t| t <= now) {
                qp.cc.on_tick(now);
            }
            if qp.rnr_until.is_some_and(|t| t <= now) {
                qp.rnr_until = None;
            }
            qp.on_timer(now, &mut ctx);
            // `touch_known`'s re-file.
            let more = !qp.idle_tx();
            if more {
                ready.insert(qpn);
            } else {
                ready.remove(&qpn);
            }
            if refile_qp(qp, qpn, more, *clock, timers) {
                settle(timers, qps);
            }
        }
        self.due = due;
        #[cfg(debug_assertions)]
        for i in 0..self.due.len() {
            self.check_scheduled(self.due[i].1);
        }
    }
}

impl<M: Memory> Rnic<M> {
    /// A one-paragraph dump of a QP's transport state, for debugging.
    pub fn debug_qp(&self, qpn: u32) -> String {
        let Some(q) = self.qps.get(&qpn) else {
            return format!("no QP {qpn}");
        };
        let sq: Vec<String> =
            q.sq.iter()
                .map(|w| {
                    format!(
                        "{}:{}@{:?}+{} r{} d{}",
                        w.wr.wr_id,
                        w.wr.opcode.name(),
                        w.first_psn.map(|p| p.value()),
                        w.npkts,
                        w.acked,
                        w.done
                    )
                })
                .collect();
        format!(
            "QP {qpn} {:?} next_psn={} una={} epsn={} cursor={:?} rto={:?} rnr={:?} rewound={:?} retries={} in_msg={:?} resp_q={} sq=[{}] rq={}",
            q.state,
            q.next_psn,
            q.una,
            q.epsn,
            q.cursor,
            q.rto_deadline,
            q.rnr_until,
            q.rewound_at,
            q.retries_left,
            q.in_msg.is_some(),
            q.resp_q.len(),
            sq.join(", "),
            q.rq.len()
        )
    }
}
