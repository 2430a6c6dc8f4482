//! Queue pairs: the state machine of IBA 10.3 and the per-QP context the
//! requester, completer and responder share.

use crate::cc::CongestionControl;
use crate::cq::{Cq, CqHandle};
use crate::error::{Result, VerbsError};
use crate::irn::{Episode, IrnConfig, Recovery};
use crate::memory::{Memory, Payload};
use crate::mr::{MrTable, PdHandle};
use crate::srq::{Srq, SrqHandle};
use crate::types::{Access, Mtu, Nanos, QpType, RecvWr, SendWr, Wc, WcStatus};
use crate::{AsyncEvent, Counters, RnicConfig};
use roce_wire::Psn;
use std::collections::{BTreeMap, VecDeque};
use std::net::SocketAddr;

/// QP states (`ibv_qp_state`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum QpState {
    Reset,
    Init,
    Rtr,
    Rts,
    /// Send queue drained: no new WQEs are started.
    Sqd,
    /// Send queue error (UD): the SQ stopped after a local error.
    Sqe,
    Err,
}

/// Creation attributes (`ibv_qp_init_attr`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct QpInitAttr {
    pub qp_type: QpType,
    pub pd: PdHandle,
    pub send_cq: CqHandle,
    pub recv_cq: CqHandle,
    pub srq: Option<SrqHandle>,
    pub max_send_wr: u32,
    pub max_recv_wr: u32,
    pub max_send_sge: u32,
    pub max_recv_sge: u32,
    pub max_inline_data: u32,
    /// Every send WQE generates a completion, signaled or not.
    pub sq_sig_all: bool,
    /// Loss recovery (RC): go-back-N, or IRN's selective retransmission.
    /// Both ends of a connection must use the same mode.
    pub recovery: Recovery,
}

impl QpInitAttr {
    /// Defaults a perftest user would pick: 128-deep queues, 4 SGEs, 64 B inline.
    pub fn new(qp_type: QpType, pd: PdHandle, send_cq: CqHandle, recv_cq: CqHandle) -> Self {
        QpInitAttr {
            qp_type,
            pd,
            send_cq,
            recv_cq,
            srq: None,
            max_send_wr: 128,
            max_recv_wr: 128,
            max_send_sge: 4,
            max_recv_sge: 4,
            max_inline_data: 64,
            sq_sig_all: false,
            recovery: Recovery::GoBackN,
        }
    }
}

/// Attributes for [`crate::Rnic::modify_qp`] (`ibv_qp_attr`; a `Some` field is
/// one bit of the attribute mask).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct QpAttr {
    pub pkey_index: Option<u16>,
    pub port_num: Option<u8>,
    pub qp_access_flags: Option<Access>,
    pub qkey: Option<u32>,
    /// Address vector: the peer's IP and UDP port.
    pub ah: Option<SocketAddr>,
    pub path_mtu: Option<Mtu>,
    pub dest_qp_num: Option<u32>,
    pub rq_psn: Option<u32>,
    pub max_dest_rd_atomic: Option<u8>,
    pub min_rnr_timer: Option<u8>,
    pub sq_psn: Option<u32>,
    pub timeout: Option<u8>,
    pub retry_cnt: Option<u8>,
    pub rnr_retry: Option<u8>,
    pub max_rd_atomic: Option<u8>,
    /// DSCP for this QP's packets (traffic class).
    pub dscp: Option<u8>,
    /// UDP source port (ECMP entropy); defaults to a hash of the QPN.
    pub udp_sport: Option<u16>,
}

macro_rules! attr_names {
    ($self:ident: $($f:ident),*) => {{
        let mut v: Vec<&'static str> = Vec::new();
        $( if $self.$f.is_some() { v.push(stringify!($f)); } )*
        v
    }};
}

impl QpAttr {
    /// Names of the attributes present.
    pub fn present(&self) -> Vec<&'static str> {
        attr_names!(self: pkey_index, port_num, qp_access_flags, qkey, ah, path_mtu, dest_qp_num,
            rq_psn, max_dest_rd_atomic, min_rnr_timer, sq_psn, timeout, retry_cnt, rnr_retry,
            max_rd_atomic, dscp, udp_sport)
    }

    /// RESET→INIT for an RC QP.
    pub fn init(access: Access) -> QpAttr {
        QpAttr {
            pkey_index: Some(0),
            port_num: Some(1),
            qp_access_flags: Some(access),
            ..Default::default()
        }
    }
    /// RESET→INIT for a UD QP.
    pub fn init_ud(qkey: u32) -> QpAttr {
        QpAttr {
            pkey_index: Some(0),
            port_num: Some(1),
            qkey: Some(qkey),
            ..Default::default()
        }
    }
    /// INIT→RTR for an RC QP, with perftest's defaults for the timers.
    pub fn rtr(ah: SocketAddr, dest_qp_num: u32, rq_psn: u32, mtu: Mtu) -> QpAttr {
        QpAttr {
            ah: Some(ah),
            path_mtu: Some(mtu),
            dest_qp_num: Some(dest_qp_num),
            rq_psn: Some(rq_psn),
            max_dest_rd_atomic: Some(16),
            min_rnr_timer: Some(12),
            ..Default::default()
        }
    }
    /// RTR→RTS for an RC QP, with perftest's defaults (timeout 14, retry 7, rnr_retry 7).
    pub fn rts(sq_psn: u32) -> QpAttr {
        QpAttr {
            sq_psn: Some(sq_psn),
            timeout: Some(14),
            retry_cnt: Some(7),
            rnr_retry: Some(7),
            max_rd_atomic: Some(16),
            ..Default::default()
        }
    }
}

/// Which attributes a transition requires and which it also accepts
/// (IBA 11.2.5.2 Table 91, as `ibv_modify_qp(3)` lists them).
pub(crate) fn transition_rules(
    t: QpType,
    from: QpState,
    to: QpState,
) -> Option<(&'static [&'static str], &'static [&'static str])> {
    use QpState::*;
    const ANY: &[&str] = &["dscp", "udp_sport"];
    let rc = t == QpType::Rc;
    Some(match (from, to) {
        (_, Reset) | (_, Err) => (&[], &[]),
        (Reset, Init) if rc => (&["pkey_index", "port_num", "qp_access_flags"], ANY),
        (Reset, Init) => (&["pkey_index", "port_num", "qkey"], ANY),
        (Init, Init) if rc => (
            &[],
            &[
                "pkey_index",
                "port_num",
                "qp_access_flags",
                "dscp",
                "udp_sport",
            ],
        ),
        (Init, Init) => (
            &[],
            &["pkey_index", "port_num", "qkey", "dscp", "udp_sport"],
        ),
        (Init, Rtr) if rc => (
            &[
                "ah",
                "path_mtu",
                "dest_qp_num",
                "rq_psn",
                "max_dest_rd_atomic",
                "min_rnr_timer",
            ],
            &["pkey_index", "qp_access_flags", "dscp", "udp_sport"],
        ),
        (Init, Rtr) => (&[], &["pkey_index", "qkey", "dscp", "udp_sport"]),
        (Rtr, Rts) if rc => (
            &[
                "sq_psn",
                "timeout",
                "retry_cnt",
                "rnr_retry",
                "max_rd_atomic",
            ],
            &["qp_access_flags", "min_rnr_timer", "dscp", "udp_sport"],
        ),
        (Rtr, Rts) => (&["sq_psn"], &["qkey", "dscp", "udp_sport"]),
        (Rts, Rts) | (Sqd, Rts) if rc => (
            &[],
            &[
                "qp_access_flags",
                "min_rnr_timer",
                "timeout",
                "retry_cnt",
                "rnr_retry",
                "dscp",
                "udp_sport",
            ],
        ),
        (Rts, Rts) | (Sqd, Rts) | (Sqe, Rts) => (&[], &["qkey", "dscp", "udp_sport"]),
        (Rts, Sqd) => (&[], &[]),
        (Sqd, Sqd) if rc => (
            &[],
            &[
                "qp_access_flags",
                "min_rnr_timer",
                "timeout",
                "retry_cnt",
                "rnr_retry",
                "max_rd_atomic",
                "max_dest_rd_atomic",
                "path_mtu",
                "ah",
            ],
        ),
        (Sqd, Sqd) => (&[], &["qkey"]),
        _ => return None,
    })
}

/// A send WQE and its progress.
///
/// `repr(C)`, progress first: what every packet sent or acknowledged reads
/// (PSNs, counts, the inline tag) shares the first cache line, and the
/// work request's opcode and SGEs the next (see [`Qp`]'s layout).
#[derive(Debug)]
#[repr(C)]
pub(crate) struct SendWqe {
    /// Message length in bytes.
    pub len: u64,
    /// First PSN, once the WQE has started.
    pub first_psn: Option<Psn>,
    /// PSNs the message occupies (READ: one per response packet).
    pub npkts: u32,
    /// Packets of this message known to have arrived: ACKed request
    /// packets (SEND/WRITE) or, for a READ, responses received in order.
    pub acked: u32,
    /// Finished; waiting to be retired in order.
    pub done: bool,
    pub status: WcStatus,
    pub signaled: bool,
    /// Local SGEs checked (lkey, PD, bounds, access) on first transmission.
    pub checked: bool,
    /// IRN READ: responses placed past the first missing one (set bits of
    /// `got` at or after `acked`), which have arrived and so are not in
    /// flight, as the SACKed packets of a SEND/WRITE are not.
    pub got_ahead: u32,
    /// IRN READ: responses asked for so far (the end of the last segment).
    pub issued: u32,
    /// Data copied at post time for inline sends.
    pub inline: Option<Payload>,
    pub wr: SendWr,
    /// IRN READ: which response packets have been placed (empty otherwise).
    pub got: Vec<bool>,
    /// IRN READ: the first response index of each READ request issued for
    /// this WQE so far, ascending (BDP-FC splits a READ longer than the
    /// cap allows into several requests; empty otherwise). The responder
    /// answers each as its own READ, so response opcodes (FIRST…LAST) and
    /// its duplicate-request lookup are relative to these segments.
    pub segs: Vec<u32>,
}

impl SendWqe {
    pub fn last_psn(&self) -> Option<Psn> {
        self.first_psn.map(|p| p.add(self.npkts.max(1) - 1))
    }

    /// IRN READ: the segment (request) holding response `idx`, as
    /// `[start, end)` response indices; the whole READ when unsplit.
    pub fn seg_of(&self, idx: u32) -> (u32, u32) {
        let j = self.segs.partition_point(|&s| s <= idx);
        if j == 0 {
            return (0, self.npkts);
        }
        let start = self.segs[j - 1];
        let end = self.segs.get(j).copied().unwrap_or(self.issued);
        (start, end.max(start + 1))
    }

    /// IRN READ: segments issued whose responses have not all arrived in
    /// order; each holds a READ credit at the responder until answered
    /// (an unsplit or not-yet-started READ or an atomic holds one).
    pub fn rd_credits(&self) -> usize {
        if self.segs.is_empty() {
            return 1;
        }
        // Segment ends ascend: those at or before `acked` are answered.
        let answered = self.segs[1..].partition_point(|&s| s <= self.acked)
            + usize::from(self.issued <= self.acked);
        self.segs.len() - answered
    }
}

/// A responder-side control or response item, in the order it must go out.
#[derive(Debug, Clone)]
pub(crate) enum RespItem {
    Ack {
        psn: Psn,
        msn: u32,
        /// Echo a CE mark (BTH BECN) for data this ACK covers.
        ece: bool,
    },
    Nak {
        psn: Psn,
        msn: u32,
        syndrome: roce_wire::Syndrome,
    },
    AtomicAck {
        psn: Psn,
        msn: u32,
        orig: u64,
    },
    Read(ReadJob),
}

/// RDMA READ responses still to be sent.
#[derive(Debug, Clone)]
pub(crate) struct ReadJob {
    /// PSN of the next response packet.
    pub psn: Psn,
    /// Response index of that packet within the whole read (0 = first).
    pub index: u32,
    pub npkts: u32,
    pub va: u64,
    pub remaining: u64,
    pub msn: u32,
    /// Response index to stop before (`npkts`, or less for a READ re-request
    /// that asks for a missing range only).
    pub end: u32,
    /// A replay for a duplicate request (does not hold a new resource).
    pub replay: bool,
}

/// Responder resources kept for duplicate READ/ATOMIC requests (IBA 9.7.5.1.5).
#[derive(Debug, Clone)]
pub(crate) enum Resource {
    Read {
        psn: Psn,
        npkts: u32,
        va: u64,
        rkey: u32,
        len: u64,
    },
    Atomic {
        psn: Psn,
        orig: u64,
    },
}

/// A multi-packet message the responder is in the middle of.
#[derive(Debug, Clone)]
pub(crate) enum InMsg {
    Send {
        wqe: RecvWr,
        offset: u64,
    },
    Write {
        va: u64,
        rkey: u32,
        remaining: u64,
        total: u64,
    },
}

/// One queue pair.
///
/// `repr(C)` keeps the fields in the order written, hottest first: Rust's
/// own layout sorts by alignment and scattered what one packet reads over
/// twelve of the struct's cache lines, and at 8,192 hosts each of those
/// lines is a miss (issue 12). The order is a cost, never a behaviour.
///
/// Three groups. Lines 0-2 ([`HOT_BYTES`]) hold what every transmit poll
/// and every re-file reads, on either side of a connection: the gates of
/// `idle_tx`, `next_deadline`, `response_due` and `next_request`. A poll that finds nothing to send
/// and a receiver's re-file after a packet touch these lines only, and
/// they are the lines a driver's cache hint loads (the QP table stores QPs
/// inline, so the QP's slot is its first line). Then the packet header's
/// fields and the responder's per-request state; then the requester's and
/// completer's (congestion control, PSNs, the sent log); then what set-up
/// and the rare paths (receive WQEs, READ/ATOMIC resources, IRN) read.
/// The `layout` test pins the hot group's offsets.
#[repr(C, align(64))]
pub struct Qp {
    // Hot: every transmit poll and re-file.
    pub(crate) sq: VecDeque<SendWqe>,
    /// Next packet to transmit: (index into `sq`, packet index in that WQE).
    pub(crate) cursor: (usize, u32),
    pub(crate) rnr_until: Option<Nanos>,
    pub(crate) resp_q: VecDeque<RespItem>,
    pub(crate) rto_deadline: Option<Nanos>,
    /// The deadline this QP is filed under in the RNIC's timer index.
    pub(crate) filed: Option<Nanos>,
    pub(crate) next_send_at: Nanos,
    /// `now` of the last transmit poll (to tell a pacing wait from other blocks).
    pub(crate) last_poll: Nanos,
    pub(crate) cnp_due: Option<(SocketAddr, u32)>,
    pub(crate) state: QpState,
    /// [`irn`](Self::irn), fixed at creation: `init`, which it is read
    /// from, lies among the cold fields.
    pub(crate) irn_rc: bool,
    pub(crate) mtu: Mtu,
    pub(crate) dscp: u8,
    pub(crate) qpn: u32,
    pub(crate) dest_qpn: u32,
    // Every packet's header, and the responder per request packet received.
    pub(crate) ah: Option<SocketAddr>,
    pub(crate) udp_sport: u16,
    pub(crate) timeout: u8,
    /// The ACK being processed echoed a CE mark.
    pub(crate) ece_rx: bool,
    pub(crate) epsn: Psn,
    /// The driver's own word for this QP (as ibverbs' `qp_context`),
    /// handed back with every packet the QP sends (see
    /// [`TransmitSink::put_from`](crate::TransmitSink::put_from)): on the
    /// line of the header fields every packet sent reads.
    pub(crate) context: u64,
    pub(crate) msn: u32,
    pub(crate) access: Access,
    pub(crate) nak_gap: bool,
    /// A CE-marked request arrived since the last ACK was queued (ECN echo).
    pub(crate) ece_pending: bool,
    /// Responder: the request being executed was placed on arrival.
    pub(crate) placed: bool,
    pub(crate) retries_left: u8,
    pub(crate) retry_cnt: u8,
    pub(crate) rnr_retries_left: u8,
    pub(crate) rnr_retry: u8,
    /// When the last CNP was queued ([`NO_CNP`]: never). A plain word, not
    /// an `Option` (16 bytes): the 8 spared keep the QP's context on the
    /// header's line without growing the QP.
    pub(crate) last_cnp: Nanos,
    pub(crate) in_msg: Option<InMsg>,
    // Requester and completer, per packet sent or ACK received.
    pub(crate) cc: crate::cc::Controller,
    pub(crate) inflight_bytes: u64,
    /// Highest PSN ever transmitted (to tell retransmissions from new packets).
    pub(crate) max_sent: Option<Psn>,
    /// PSN for the next WQE that starts.
    pub(crate) next_psn: Psn,
    /// Oldest unacknowledged PSN.
    pub(crate) una: Psn,
    pub(crate) since_ackreq: u32,
    /// Requester, IRN: the first new PSN at or past this one asks for an
    /// ACK, so a resend lost again shows in the SACK it draws.
    pub(crate) irn_probe_at: Option<Psn>,
    /// A rewind already requested for this PSN (one go-back per gap).
    pub(crate) rewound_at: Option<Psn>,
    /// The lowest rate `cc` paced this QP at (reported as the minimum rate).
    pub(crate) cc_min_rate: Option<u64>,
    /// Where the pacing gap now running began, and the wire bytes of the
    /// packet that began it (0: none sent yet): what a controller that
    /// re-times a pending gap when its rate changes
    /// ([`CongestionControl::rescales_gap`](crate::cc::CongestionControl::rescales_gap))
    /// re-times. Kept for such controllers only.
    pub(crate) gap_from: Nanos,
    pub(crate) gap_wire: u32,
    /// When each in-flight PSN range was first sent (RTT samples, Karn's rule).
    pub(crate) sent_log: crate::cc::sample::SentLog,
    // Seldom touched: attributes read at set-up or on rare paths, receive
    // WQEs (the simulator's flows are WRITEs), READ/ATOMIC resources, IRN.
    pub(crate) init: QpInitAttr,
    pub(crate) qkey: u32,
    pub(crate) max_dest_rd_atomic: u8,
    pub(crate) min_rnr_timer: u8,
    pub(crate) max_rd_atomic: u8,
    pub(crate) rq: VecDeque<RecvWr>,
    pub(crate) resources: VecDeque<Resource>,
    pub(crate) irn_cfg: IrnConfig,
    /// Requester: PSNs the responder reported holding, beyond `una`.
    pub(crate) sacked: crate::irn::Scoreboard,
    /// Requester, IRN: for each PSN selectively resent, the highest PSN
    /// sent at that moment. A NAK still naming it as the first missing PSN
    /// while holding a packet sent well after it means the resend was lost.
    pub(crate) resent_at: std::collections::BTreeMap<u32, Psn>,
    /// Requester: the recovery episode under way.
    pub(crate) episode: Option<Episode>,
    /// Responder: out-of-order request packets held, by PSN.
    pub(crate) held: crate::irn::HoldBuffer,
    /// Responder, IRN: the highest run of held PSNs (`None` when nothing is held).
    pub(crate) top_run: Option<crate::irn::TopRun>,
    /// Responder, IRN: the latest WRITE whose FIRST packet was held.
    pub(crate) held_write: Option<crate::irn::HeldWrite>,
}

/// [`Qp::last_cnp`] before the QP's first CNP.
pub(crate) const NO_CNP: Nanos = Nanos::MAX;

/// Bytes at the head of a [`Qp`] that every transmit poll and re-file
/// reads (see its layout): what a driver's cache hint should load.
pub const HOT_BYTES: usize = 192;

impl Qp {
    /// Hands `sink` a packet this QP sends to `dst`: the header fields
    /// every packet of the QP carries, and the QP's context (see
    /// [`TransmitSink::put_from`](crate::TransmitSink::put_from)).
    #[inline(always)]
    pub(crate) fn put<S: crate::TransmitSink>(
        &self,
        sink: S,
        dst: std::net::SocketAddr,
        dscp: u8,
        ecn_capable: bool,
        repr: roce_wire::TransportRepr,
        payload: Payload,
    ) -> S::Out {
        let t = crate::Transmit {
            dst,
            udp_sport: self.udp_sport,
            dscp,
            ecn_capable,
            src_qpn: self.qpn,
            repr,
            payload,
        };
        sink.put_from(t, self.context)
    }

    pub(crate) fn new(qpn: u32, init: QpInitAttr, cc: Box<dyn CongestionControl>) -> Qp {
        Qp {
            qpn,
            init,
            irn_rc: init.recovery == Recovery::Irn && init.qp_type == QpType::Rc,
            state: QpState::Reset,
            access: Access::NONE,
            qkey: 0,
            ah: None,
            mtu: Mtu::Mtu1024,
            dest_qpn: 0,
            max_dest_rd_atomic: 0,
            min_rnr_timer: 0,
            timeout: 0,
            retry_cnt: 0,
            rnr_retry: 0,
            max_rd_atomic: 0,
            dscp: 26,
            udp_sport: 0xc000 | ((qpn ^ (qpn >> 14)) & 0x3fff) as u16,
            context: 0,
            sq: VecDeque::new(),
            cursor: (0, 0),
            next_psn: Psn::new(0),
            una: Psn::new(0),
            retries_left: 0,
            rnr_retries_left: 0,
            rto_deadline: None,
            rnr_until: None,
            rewound_at: None,
            since_ackreq: 0,
            max_sent: None,
            next_send_at: 0,
            last_poll: 0,
            filed: None,
            inflight_bytes: 0,
            cc: crate::cc::Controller::new(cc),
            cc_min_rate: None,
            gap_from: 0,
            gap_wire: 0,
            sent_log: Default::default(),
            rq: VecDeque::new(),
            epsn: Psn::new(0),
            msn: 0,
            in_msg: None,
            nak_gap: false,
            resources: VecDeque::new(),
            resp_q: VecDeque::new(),
            cnp_due: None,
            last_cnp: NO_CNP,
            ece_pending: false,
            ece_rx: false,
            irn_cfg: IrnConfig::default(),
            sacked: crate::irn::Scoreboard::default(),
            resent_at: std::collections::BTreeMap::new(),
            irn_probe_at: None,
            episode: None,
            held: crate::irn::HoldBuffer::default(),
            top_run: None,
            held_write: None,
            placed: false,
        }
    }

    /// What a destroyed QP's slot holds in the RNIC's table (see
    /// `table::QpTable`): number [`crate::table::DEAD`], and nothing on
    /// the heap (no controller, empty queues).
    pub(crate) fn tombstone() -> Qp {
        Qp::tombstone_numbered(crate::table::DEAD)
    }

    /// A tombstone numbered `qpn` (tests: a QP that holds nothing).
    pub(crate) fn tombstone_numbered(qpn: u32) -> Qp {
        let init = QpInitAttr::new(QpType::Rc, PdHandle(0), CqHandle(0), CqHandle(0));
        Qp::new(qpn, init, Box::new(crate::cc::NoCc))
    }

    pub fn qpn(&self) -> u32 {
        self.qpn
    }
    pub fn state(&self) -> QpState {
        self.state
    }
    pub fn qp_type(&self) -> QpType {
        self.init.qp_type
    }

    /// The next instant this QP has timed work: retransmission, the end of an
    /// RNR wait, the end of a pacing gap it is blocked on, or a CC tick.
    /// A gap that ended by `now` is no deadline for a `ready` QP: the next
    /// transmit poll visits it anyway, and no timer can do more.
    pub(crate) fn next_deadline(&self, ready: bool, now: Nanos) -> Option<Nanos> {
        // A QP with nothing unsent (every receiver) reads no pacing state.
        // (Tests joined with `&`, not `&&`: cheap and free of effects, and
        // one branch on the whole mispredicts less than the chain did.)
        let pacing = ((self.cursor.0 < self.sq.len())
            & (self.next_send_at > self.last_poll)
            & !(ready & (self.next_send_at <= now)))
            .then_some(self.next_send_at);
        // The earliest of four optional deadlines, written out: this runs
        // on every re-file, several times per packet. (Measured dead end:
        // a branch-free form, absent deadlines as `Nanos::MAX`, and `&`
        // in `idle_tx`, cut cachegrind's mispredicts on the mid-size
        // fat5ms run by 0.8 M but cost 48 M instructions more; issue 12.)
        let min = |a: Option<Nanos>, b: Option<Nanos>| match (a, b) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        min(
            min(self.rto_deadline, self.rnr_until),
            min(pacing, self.cc.next_tick()),
        )
    }

    /// True when a transmit poll of this QP could only come back empty:
    /// no CNP or response queued, no request left to (re)send, no RNR wait
    /// to clear, and no IRN retransmission episode. Such a QP need not sit
    /// in the ready set: a receiver that only ACKs every N packets would
    /// otherwise cost one empty visit per packet it receives (issue 12).
    /// The poll it is spared would have changed nothing but `last_poll`,
    /// which [`next_deadline`](Self::next_deadline) reads only while a
    /// request is unsent, and every post re-reads it after a fresh poll.
    pub(crate) fn idle_tx(&self) -> bool {
        self.cnp_due.is_none()
            && self.resp_q.is_empty()
            && self.rnr_until.is_none()
            && self.cursor.0 >= self.sq.len()
            && !self.irn()
    }

    /// True when the requester may have something to (re)send: a WQE not
    /// yet sent in full, an RNR wait, or an IRN episode (what
    /// [`idle_tx`](Self::idle_tx) asks of the requester side).
    pub(crate) fn requests_pending(&self) -> bool {
        self.cursor.0 < self.sq.len() || self.rnr_until.is_some() || self.irn()
    }

    /// Retransmission timeout: 4.096 µs × 2^timeout (IBA 9.7.6.1.3); 0 = infinite.
    pub fn rto_ns(&self) -> Option<Nanos> {
        (self.timeout != 0).then(|| 4096u64 << self.timeout.min(31))
    }

    /// The loss-recovery mode this QP was created with.
    pub fn recovery(&self) -> Recovery {
        self.init.recovery
    }

    pub(crate) fn irn(&self) -> bool {
        debug_assert_eq!(
            self.irn_rc,
            self.init.recovery == Recovery::Irn && self.init.qp_type == QpType::Rc
        );
        self.irn_rc
    }

    /// The timeout to arm now: IBA's for go-back-N; IRN's RTO_low while
    /// at most N packets are in flight and RTO_high otherwise (IRN §3.1).
    /// A QP whose `timeout` is 0 (infinite) keeps no timer in either mode.
    pub(crate) fn rto_now(&self, in_flight: u32) -> Option<Nanos> {
        let base = self.rto_ns()?;
        if !self.irn() {
            return Some(base);
        }
        let c = self.irn_cfg;
        Some(if in_flight <= c.rto_low_pkts {
            c.rto_low_ns
        } else {
            c.rto_high_ns
        })
    }

    /// Applies `attr` for a transition to `to`, validating it first.
    pub(crate) fn modify(&mut self, to: QpState, attr: &QpAttr) -> Result<()> {
        let from = self.state;
        let (required, optional) = transition_rules(self.init.qp_type, from, to)
            .ok_or(VerbsError::InvalidTransition { from, to })?;
        let present = attr.present();
        for r in required {
            if !present.contains(r) {
                return Err(VerbsError::MissingAttribute { from, to, attr: r });
            }
        }
        for p in &present {
            if !required.contains(p) && !optional.contains(p) {
                return Err(VerbsError::UnexpectedAttribute { from, to, attr: p });
            }
        }
        let bad = |attr: &'static str, why: &str| {
            Err(VerbsError::InvalidAttribute {
                attr,
                why: why.to_string(),
            })
        };
        if attr.timeout.is_some_and(|v| v > 31) {
            return bad("timeout", "must be 0..=31");
        }
        if attr.retry_cnt.is_some_and(|v| v > 7) {
            return bad("retry_cnt", "must be 0..=7");
        }
        if attr.rnr_retry.is_some_and(|v| v > 7) {
            return bad("rnr_retry", "must be 0..=7 (7 = infinite)");
        }
        if attr.min_rnr_timer.is_some_and(|v| v > 31) {
            return bad("min_rnr_timer", "must be 0..=31");
        }
        if attr.max_rd_atomic.is_some_and(|v| v > 16) {
            return bad("max_rd_atomic", "must be 0..=16");
        }
        if attr.max_dest_rd_atomic.is_some_and(|v| v > 16) {
            return bad("max_dest_rd_atomic", "must be 0..=16");
        }
        if attr.dest_qp_num.is_some_and(|v| v > 0xff_ffff) {
            return bad("dest_qp_num", "must fit 24 bits");
        }
        if attr.rq_psn.is_some_and(|v| v > Psn::MASK) || attr.sq_psn.is_some_and(|v| v > Psn::MASK)
        {
            return bad("rq_psn/sq_psn", "must fit 24 bits");
        }
        if attr.dscp.is_some_and(|v| v > 63) {
            return bad("dscp", "must be 0..=63");
        }
        if attr.port_num == Some(0) {
            return bad("port_num", "ports are numbered from 1");
        }
        // Validated: apply.
        if let Some(v) = attr.qp_access_flags {
            self.access = v;
        }
        if let Some(v) = attr.qkey {
            self.qkey = v;
        }
        if let Some(v) = attr.ah {
            self.ah = Some(v);
        }
        if let Some(v) = attr.path_mtu {
            self.mtu = v;
        }
        if let Some(v) = attr.dest_qp_num {
            self.dest_qpn = v;
        }
        if let Some(v) = attr.rq_psn {
            self.epsn = Psn::new(v);
        }
        if let Some(v) = attr.max_dest_rd_atomic {
            self.max_dest_rd_atomic = v;
        }
        if let Some(v) = attr.min_rnr_timer {
            self.min_rnr_timer = v;
        }
        if let Some(v) = attr.sq_psn {
            self.next_psn = Psn::new(v);
            self.una = Psn::new(v);
        }
        if let Some(v) = attr.timeout {
            self.timeout = v;
        }
        if let Some(v) = attr.retry_cnt {
            self.retry_cnt = v;
            self.retries_left = v;
        }
        if let Some(v) = attr.rnr_retry {
            self.rnr_retry = v;
            self.rnr_retries_left = v;
        }
        if let Some(v) = attr.max_rd_atomic {
            self.max_rd_atomic = v;
        }
        if let Some(v) = attr.dscp {
            self.dscp = v;
        }
        if let Some(v) = attr.udp_sport {
            self.udp_sport = v;
        }
        self.state = to;
        Ok(())
    }
}

/// Everything a QP touches besides itself, borrowed from the RNIC for one call.
///
/// Generic over the memory (`dyn Memory` by default) so that a driver's
/// memory is called directly: the simulator's range checks, one or two per
/// packet, were calls through a vtable that could not be inlined (issue 12).
pub(crate) struct Ctx<'a, Mem: Memory + ?Sized = dyn Memory> {
    pub cfg: &'a RnicConfig,
    pub mem: &'a mut Mem,
    pub mrs: &'a MrTable,
    pub cqs: &'a mut BTreeMap<u32, Cq>,
    /// The RNIC's count of completions waiting in `cqs`.
    pub cqes: &'a mut usize,
    pub srqs: &'a mut BTreeMap<u32, Srq>,
    pub events: &'a mut VecDeque<AsyncEvent>,
    pub counters: &'a mut Counters,
}

impl<Mem: Memory + ?Sized> Ctx<'_, Mem> {
    /// Delivers a completion; a full CQ raises [`AsyncEvent::CqOverflow`].
    pub fn complete(&mut self, cq: CqHandle, wc: Wc) {
        match self.cqs.get_mut(&cq.0) {
            Some(c) => {
                if c.push(wc) {
                    *self.cqes += 1;
                } else {
                    self.counters.cq_overflows += 1;
                    self.events
                        .push_back(AsyncEvent::CqOverflow { cq, qpn: wc.qp_num });
                }
            }
            None => self.counters.cq_overflows += 1,
        }
    }
}

#[cfg(test)]
mod layout {
    use super::{HOT_BYTES, Qp};
    use std::mem::offset_of;

    /// Every field a transmit poll or a re-file reads lies in the first
    /// [`HOT_BYTES`]: a field moved out of them (or one grown so that
    /// others are pushed out) costs a cache miss per packet at scale,
    /// with nothing else to show for it.
    #[test]
    fn hot_fields_lie_in_the_first_lines() {
        // (offset, size) of each hot field.
        let hot = [
            (offset_of!(Qp, sq), 32, "sq"),
            (offset_of!(Qp, cursor), 16, "cursor"),
            (offset_of!(Qp, rnr_until), 16, "rnr_until"),
            (offset_of!(Qp, resp_q), 32, "resp_q"),
            (offset_of!(Qp, rto_deadline), 16, "rto_deadline"),
            (offset_of!(Qp, filed), 16, "filed"),
            (offset_of!(Qp, next_send_at), 8, "next_send_at"),
            (offset_of!(Qp, last_poll), 8, "last_poll"),
            (offset_of!(Qp, cnp_due), 36, "cnp_due"),
            (offset_of!(Qp, state), 1, "state"),
            (offset_of!(Qp, irn_rc), 1, "irn_rc"),
            (offset_of!(Qp, mtu), 1, "mtu"),
            (offset_of!(Qp, dscp), 1, "dscp"),
            (offset_of!(Qp, qpn), 4, "qpn"),
            (offset_of!(Qp, dest_qpn), 4, "dest_qpn"),
        ];
        for (off, size, name) in hot {
            assert!(off + size <= HOT_BYTES, "{name} at {off}+{size}");
        }
        // The sizes assumed above.
        assert_eq!(std::mem::size_of::<std::collections::VecDeque<u8>>(), 32);
        assert_eq!(
            std::mem::size_of::<Option<(std::net::SocketAddr, u32)>>(),
            36
        );
        // The first line: what a poll of a QP with nothing to send reads.
        assert_eq!(offset_of!(Qp, rnr_until), 48);
        assert_eq!(offset_of!(Qp, filed), 112);
        assert_eq!(offset_of!(Qp, dest_qpn), 188);
        assert_eq!(std::mem::align_of::<Qp>(), 64);
        // The whole: a QP is stored inline in its table, so each byte is
        // one per QP slot.
        assert!(
            std::mem::size_of::<Qp>() <= 896,
            "{}",
            std::mem::size_of::<Qp>()
        );
    }
}
