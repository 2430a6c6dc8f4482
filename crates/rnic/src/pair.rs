//! Two RNICs joined by a simulated wire, for tests, fuzzing, benchmarks and
//! the demo (quinn-proto's `Pair` is the model).
//!
//! Every packet really becomes a RoCEv2 frame (Ethernet/IPv4/UDP/BTH/…/ICRC)
//! through `roce-wire` and is parsed back on arrival, so corruption is caught
//! by the ICRC exactly as on a real link. The wire has a latency, a rate
//! (serialization), and seeded faults: loss, reordering, duplication,
//! corruption and CE marking. Time jumps straight to the next arrival or
//! timer, so a run is fast and, for one seed, bit-for-bit repeatable.

use crate::memory::{Payload, PayloadRef};
use crate::{
    Access, CqHandle, Mr, Mtu, Nanos, PdHandle, QpAttr, QpInitAttr, QpState, QpType, RealMemory,
    Rnic, RnicConfig, Sge, Transmit,
};
use rand_chacha::ChaCha8Rng;
use rand_chacha::rand_core::{Rng, SeedableRng};
use roce_wire::{EthernetRepr, Frame, FrameRepr, IpRepr, Ipv4Repr, Mac, parse_frame};
use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};

/// The wire between the two RNICs (same in both directions).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct LinkConfig {
    pub latency_ns: u64,
    /// Link rate; 0 means infinitely fast.
    pub rate_bps: u64,
    pub loss: f64,
    /// Probability a packet is held back by `reorder_delay_ns`.
    pub reorder: f64,
    pub reorder_delay_ns: u64,
    pub dup: f64,
    /// Probability one byte of the frame is flipped.
    pub corrupt: f64,
    /// Probability an ECN-capable packet is marked CE.
    pub ce_mark: f64,
    pub seed: u64,
}

impl Default for LinkConfig {
    fn default() -> Self {
        LinkConfig {
            latency_ns: 1_000,
            rate_bps: 100_000_000_000,
            loss: 0.0,
            reorder: 0.0,
            reorder_delay_ns: 5_000,
            dup: 0.0,
            corrupt: 0.0,
            ce_mark: 0.0,
            seed: 1,
        }
    }
}

/// What happened on the wire.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct LinkStats {
    pub frames: u64,
    pub lost: u64,
    pub duplicated: u64,
    pub reordered: u64,
    pub corrupted: u64,
    pub ce_marked: u64,
    /// Frames the receiver refused (ICRC or parse failure).
    pub rejected: u64,
}

/// One frame captured on the wire.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CapturedFrame {
    pub ts_ns: Nanos,
    /// 0 = A→B, 1 = B→A.
    pub dir: usize,
    pub bytes: Vec<u8>,
}

/// Two RNICs and the wire between them.
pub struct Pair {
    pub a: Rnic<RealMemory>,
    pub b: Rnic<RealMemory>,
    pub now: Nanos,
    pub link: LinkConfig,
    pub stats: LinkStats,
    /// When set, every frame put on the wire is recorded (before faults).
    pub capture: Option<Vec<CapturedFrame>>,
    /// Frames to lose on purpose, as (sending side, BTH PSN): the next frame
    /// that matches an entry is dropped and the entry used up, so an entry
    /// listed twice loses a packet and then its first resend.
    pub drop_psns: Vec<(usize, u32)>,
    rng: ChaCha8Rng,
    queue: BinaryHeap<Reverse<(Nanos, u64, usize)>>,
    in_flight: std::collections::HashMap<u64, Vec<u8>>,
    seq: u64,
    busy_until: [Nanos; 2],
    /// When a busy port frees up and its NIC should be asked for more.
    port_wake: [Option<Nanos>; 2],
}

/// A's address.
pub const ADDR_A: SocketAddr = SocketAddr::new(IpAddr::V4(Ipv4Addr::new(10, 0, 0, 1)), 4791);
/// B's address.
pub const ADDR_B: SocketAddr = SocketAddr::new(IpAddr::V4(Ipv4Addr::new(10, 0, 0, 2)), 4791);
const MAC: [Mac; 2] = [Mac([2, 0, 0, 0, 0, 0xa]), Mac([2, 0, 0, 0, 0, 0xb])];

impl Pair {
    pub fn new(link: LinkConfig) -> Pair {
        Self::with_config(link, RnicConfig::default())
    }

    pub fn with_config(link: LinkConfig, cfg: RnicConfig) -> Pair {
        Pair {
            a: Rnic::new(cfg.clone(), RealMemory::new()),
            b: Rnic::new(cfg, RealMemory::new()),
            now: 0,
            rng: ChaCha8Rng::seed_from_u64(link.seed),
            link,
            stats: LinkStats::default(),
            capture: None,
            drop_psns: Vec::new(),
            queue: BinaryHeap::new(),
            in_flight: Default::default(),
            seq: 0,
            busy_until: [0; 2],
            port_wake: [None; 2],
        }
    }

    fn chance(&mut self, p: f64) -> bool {
        p > 0.0 && (self.rng.next_u64() >> 11) as f64 / (1u64 << 53) as f64 <= p
    }

    fn rnic(&mut self, side: usize) -> &mut Rnic<RealMemory> {
        if side == 0 { &mut self.a } else { &mut self.b }
    }

    /// Builds the frame for a transmit from `side`.
    /// `mem` is the sending side's memory, which reads a
    /// [`Payload::Host`] gather list at this moment, as a NIC's DMA would.
    /// `None` when the gather list's buffer was freed under the queued
    /// packet: nothing can be read, so nothing is sent.
    pub fn frame_for(side: usize, t: &Transmit, ce: bool, mem: &RealMemory) -> Option<Vec<u8>> {
        let (src, dst) = if side == 0 {
            (ADDR_A, ADDR_B)
        } else {
            (ADDR_B, ADDR_A)
        };
        let ip = |a: SocketAddr| match a.ip() {
            IpAddr::V4(v) => v,
            IpAddr::V6(_) => Ipv4Addr::UNSPECIFIED,
        };
        let _ = dst;
        let f = FrameRepr {
            eth: EthernetRepr {
                dst: MAC[1 - side],
                src: MAC[side],
                vlan: None,
                ethertype: 0,
            },
            ip: IpRepr::V4(Ipv4Repr {
                src: ip(src),
                dst: ip(t.dst),
                dscp: t.dscp,
                ecn: if ce {
                    3
                } else if t.ecn_capable {
                    2
                } else {
                    0
                },
                ident: 0,
                dont_frag: true,
                ttl: 64,
                protocol: 17,
                payload_len: 0,
            }),
            udp_src_port: t.udp_sport,
            transport: t.repr,
        };
        let owned;
        let data: &[u8] = match &t.payload {
            Payload::Bytes(b) => b,
            Payload::Virtual(n) => {
                owned = vec![0u8; *n as usize];
                &owned
            }
            Payload::Host(g) => {
                owned = mem.resolve(g).ok()?.concat();
                &owned
            }
        };
        // The RNIC only produces layouts the opcode table allows; a failure
        // here is a bug worth a loud test failure, not a silent drop.
        Some(
            f.emit_vec(&[data])
                .expect("RNIC produced an unencodable packet"),
        )
    }

    fn send(&mut self, side: usize, t: Transmit) {
        let psn = t.repr.bth.psn.value();
        if let Some(i) = self.drop_psns.iter().position(|&d| d == (side, psn)) {
            self.drop_psns.remove(i);
            self.stats.lost += 1;
            return;
        }
        let ce = t.ecn_capable && self.chance(self.link.ce_mark);
        if ce {
            self.stats.ce_marked += 1;
        }
        let mem = if side == 0 {
            self.a.mem()
        } else {
            self.b.mem()
        };
        let Some(mut frame) = Self::frame_for(side, &t, ce, mem) else {
            self.stats.lost += 1;
            return;
        };
        self.stats.frames += 1;
        // Serialization including preamble, SFD, FCS and inter-frame gap (24 B).
        let ser = ((frame.len() as u64 + 24) * 8 * 1_000_000_000)
            .checked_div(self.link.rate_bps)
            .unwrap_or(0);
        let start = self.busy_until[side].max(self.now);
        let depart = start + ser;
        self.busy_until[side] = depart;
        self.port_wake[side] = Some(depart);
        if let Some(c) = &mut self.capture {
            // Stamped when the first bit goes on the wire.
            c.push(CapturedFrame {
                ts_ns: start,
                dir: side,
                bytes: frame.clone(),
            });
        }
        if self.chance(self.link.loss) {
            self.stats.lost += 1;
            return;
        }
        if self.chance(self.link.corrupt) {
            self.stats.corrupted += 1;
            let i = (self.rng.next_u64() % frame.len() as u64) as usize;
            let bit = 1u8 << (self.rng.next_u64() % 8);
            frame[i] ^= bit;
        }
        let copies = if self.chance(self.link.dup) {
            self.stats.duplicated += 1;
            2
        } else {
            1
        };
        for _ in 0..copies {
            let mut at = depart + self.link.latency_ns;
            if self.chance(self.link.reorder) {
                self.stats.reordered += 1;
                at += self.link.reorder_delay_ns;
            }
            self.seq += 1;
            self.in_flight.insert(self.seq, frame.clone());
            self.queue.push(Reverse((at, self.seq, 1 - side)));
        }
    }

    /// Each NIC pulls its next packet only when its port is free, as a real
    /// NIC's transmit pipeline does; so a rate limit set by congestion
    /// control applies to packets not yet sent, not to a backlog.
    fn flush(&mut self) {
        loop {
            let mut any = false;
            for side in 0..2 {
                if self.busy_until[side] > self.now {
                    continue;
                }
                let now = self.now;
                match self.rnic(side).poll_transmit(now) {
                    Some(t) => {
                        self.send(side, t);
                        any = true;
                    }
                    None => self.port_wake[side] = None,
                }
            }
            if !any {
                break;
            }
        }
    }

    fn deliver(&mut self, to: usize, frame: &[u8]) {
        let Ok(Frame::Roce(f)) = parse_frame(frame) else {
            self.stats.rejected += 1;
            return;
        };
        if !f.icrc_ok() || !f.ip_checksum_ok {
            self.stats.rejected += 1;
            return;
        }
        let IpRepr::V4(ip) = f.ip else { return };
        let src = SocketAddr::new(IpAddr::V4(ip.src), f.udp.src_port);
        let now = self.now;
        self.rnic(to).handle_packet(
            now,
            src,
            ip.ecn == 3,
            &f.transport,
            PayloadRef::Bytes(f.payload),
        );
    }

    /// Time of the next event, if anything is pending.
    pub fn next_event(&self) -> Option<Nanos> {
        let q = self.queue.peek().map(|Reverse((t, _, _))| *t);
        [
            q,
            self.a.poll_timeout(),
            self.b.poll_timeout(),
            self.port_wake[0],
            self.port_wake[1],
        ]
        .into_iter()
        .flatten()
        .min()
    }

    /// Advances to the next event and handles it. False when nothing is pending.
    pub fn step(&mut self) -> bool {
        self.flush();
        let Some(t) = self.next_event() else {
            return false;
        };
        self.now = self.now.max(t);
        while let Some(&Reverse((at, seq, to))) = self.queue.peek() {
            if at > self.now {
                break;
            }
            self.queue.pop();
            if let Some(frame) = self.in_flight.remove(&seq) {
                self.deliver(to, &frame);
            }
        }
        let now = self.now;
        self.a.handle_timeout(now);
        self.b.handle_timeout(now);
        self.flush();
        true
    }

    /// Runs until nothing is pending or `limit_ns` of simulated time passed.
    /// Returns true when the pair went idle.
    pub fn drive_for(&mut self, limit_ns: Nanos) -> bool {
        let end = self.now.saturating_add(limit_ns);
        loop {
            self.flush();
            match self.next_event() {
                None => return true,
                Some(t) if t > end => return false,
                _ => {
                    self.step();
                }
            }
        }
    }

    /// Runs until idle (at most 100 simulated seconds).
    pub fn drive(&mut self) -> bool {
        self.drive_for(100_000_000_000)
    }

    /// Creates, on both sides, a PD, a CQ, a buffer with an MR, and an RC QP,
    /// and connects the two QPs through RESET→INIT→RTR→RTS.
    pub fn rc_pair(&mut self, o: &RcOptions) -> crate::Result<(Endpoint, Endpoint)> {
        let ea = Self::endpoint(&mut self.a, o, QpType::Rc)?;
        let eb = Self::endpoint(&mut self.b, o, QpType::Rc)?;
        for (r, me, peer, addr, my_psn, peer_psn) in [
            (&mut self.a, &ea, &eb, ADDR_B, o.psn_a, o.psn_b),
            (&mut self.b, &eb, &ea, ADDR_A, o.psn_b, o.psn_a),
        ] {
            r.modify_qp(me.qpn, QpState::Init, &QpAttr::init(o.qp_access))?;
            let mut rtr = QpAttr::rtr(addr, peer.qpn, peer_psn, o.mtu);
            rtr.min_rnr_timer = Some(o.min_rnr_timer);
            r.modify_qp(me.qpn, QpState::Rtr, &rtr)?;
            let mut rts = QpAttr::rts(my_psn);
            rts.timeout = Some(o.timeout);
            rts.retry_cnt = Some(o.retry_cnt);
            rts.rnr_retry = Some(o.rnr_retry);
            r.modify_qp(me.qpn, QpState::Rts, &rts)?;
        }
        Ok((ea, eb))
    }

    /// Connects RC QP `qa` on A and `qb` on B with the textbook defaults
    /// (all access rights, PSN 0 both ways, `QpAttr::rtr`/`QpAttr::rts`), for
    /// QPs created by hand (with their own controller, SRQ, or limits).
    pub fn connect(&mut self, qa: u32, qb: u32, mtu: Mtu) -> crate::Result<()> {
        for (r, me, peer, addr) in [(&mut self.a, qa, qb, ADDR_B), (&mut self.b, qb, qa, ADDR_A)] {
            r.modify_qp(me, QpState::Init, &QpAttr::init(Access::ALL))?;
            r.modify_qp(me, QpState::Rtr, &QpAttr::rtr(addr, peer, 0, mtu))?;
            r.modify_qp(me, QpState::Rts, &QpAttr::rts(0))?;
        }
        Ok(())
    }

    /// Like [`rc_pair`](Self::rc_pair) for UD QPs (Q_Key `o.qkey`).
    pub fn ud_pair(&mut self, o: &RcOptions) -> crate::Result<(Endpoint, Endpoint)> {
        let ea = Self::endpoint(&mut self.a, o, QpType::Ud)?;
        let eb = Self::endpoint(&mut self.b, o, QpType::Ud)?;
        for (r, me, psn) in [(&mut self.a, &ea, o.psn_a), (&mut self.b, &eb, o.psn_b)] {
            r.modify_qp(me.qpn, QpState::Init, &QpAttr::init_ud(o.qkey))?;
            r.modify_qp(me.qpn, QpState::Rtr, &QpAttr::default())?;
            r.modify_qp(
                me.qpn,
                QpState::Rts,
                &QpAttr {
                    sq_psn: Some(psn),
                    ..Default::default()
                },
            )?;
        }
        Ok((ea, eb))
    }

    fn endpoint(r: &mut Rnic<RealMemory>, o: &RcOptions, t: QpType) -> crate::Result<Endpoint> {
        let pd = r.alloc_pd();
        let cq = r.create_cq(o.cq_depth)?;
        let buf = r.mem_mut().alloc(o.buf_len);
        let mr = r.reg_mr(pd, buf, o.buf_len as u64, o.mr_access)?;
        let mut init = QpInitAttr::new(t, pd, cq, cq);
        init.max_send_wr = o.max_send_wr;
        init.max_recv_wr = o.max_recv_wr;
        init.sq_sig_all = o.sq_sig_all;
        init.recovery = o.recovery;
        let qpn = r.create_qp(init)?;
        Ok(Endpoint {
            pd,
            cq,
            qpn,
            buf,
            mr,
        })
    }
}

/// One side of a connected pair.
#[derive(Debug, Clone, Copy)]
pub struct Endpoint {
    pub pd: PdHandle,
    pub cq: CqHandle,
    pub qpn: u32,
    /// Address of the registered buffer.
    pub buf: u64,
    pub mr: Mr,
}

impl Endpoint {
    /// An SGE over `[off, off+len)` of this endpoint's buffer.
    pub fn sge(&self, off: u64, len: u32) -> Sge {
        Sge {
            addr: self.buf + off,
            length: len,
            lkey: self.mr.lkey,
        }
    }
}

/// Knobs for [`Pair::rc_pair`].
#[derive(Debug, Clone, Copy)]
pub struct RcOptions {
    pub mtu: Mtu,
    pub buf_len: usize,
    pub psn_a: u32,
    pub psn_b: u32,
    pub timeout: u8,
    pub retry_cnt: u8,
    pub rnr_retry: u8,
    pub min_rnr_timer: u8,
    pub max_send_wr: u32,
    pub max_recv_wr: u32,
    pub cq_depth: u32,
    pub sq_sig_all: bool,
    pub mr_access: Access,
    pub qp_access: Access,
    pub qkey: u32,
    /// Loss recovery of the RC QPs (both sides).
    pub recovery: crate::Recovery,
}

impl Default for RcOptions {
    fn default() -> Self {
        RcOptions {
            mtu: Mtu::Mtu1024,
            buf_len: 1 << 16,
            psn_a: 0x100,
            psn_b: 0x200,
            timeout: 8,
            retry_cnt: 7,
            rnr_retry: 7,
            min_rnr_timer: 1,
            max_send_wr: 256,
            max_recv_wr: 256,
            cq_depth: 4096,
            sq_sig_all: false,
            mr_access: Access::ALL,
            qp_access: Access::ALL,
            qkey: 0x1111_1111,
            recovery: crate::Recovery::GoBackN,
        }
    }
}

/// Moves every packet the two RNICs want to send straight into the other,
/// with no frames, no wire and no delay, until both are quiet at `now`.
/// Returns the number of packets moved. This is the "no I/O" path the
/// benchmarks and the RNIC fuzz target use.
pub fn shuttle<M: crate::Memory>(a: &mut Rnic<M>, b: &mut Rnic<M>, now: Nanos) -> u64 {
    // Everything `from` has to send, into `to`; how many packets moved.
    fn drain<M: crate::Memory>(
        from: &mut Rnic<M>,
        to: &mut Rnic<M>,
        src: SocketAddr,
        now: Nanos,
    ) -> u64 {
        let mut moved = 0;
        while let Some(t) = from.poll_transmit(now) {
            // A gather list is read from the sender's memory now.
            let payload = from.mem().materialize(t.payload);
            if let Some(p) = payload.as_ref().and_then(|p| p.as_ref()) {
                to.handle_packet(now, src, false, &t.repr, p);
            }
            moved += 1;
        }
        moved
    }
    let mut moved = 0;
    loop {
        let n = drain(a, b, ADDR_A, now) + drain(b, a, ADDR_B, now);
        if n == 0 {
            return moved;
        }
        moved += n;
    }
}
