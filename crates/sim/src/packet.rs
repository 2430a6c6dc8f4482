//! A packet in flight through the fabric. The transport part is the RNIC's
//! own `TransportRepr`; the simulator adds what the network needs (who,
//! which priority, how big on the wire, ECN bits, INT) and moves only a
//! length for the payload.

use roce_rnic::IntHop;
use roce_wire::{AethRepr, BthRepr, Opcode, Psn, Syndrome, TransportRepr};

/// Ethernet (14) + IPv4 (20) + UDP (8) before the InfiniBand transport.
pub const L2_L4_HEADER: u64 = 14 + 20 + 8;
/// Ethernet FCS.
pub const FCS: u64 = 4;
/// Preamble and start-of-frame delimiter (8) plus minimum inter-frame gap (12).
pub const PREAMBLE_IFG: u64 = 20;
/// Most INT hops a packet records (a 3-tier fat tree has 5 switches).
pub const MAX_INT_HOPS: usize = 8;

/// Per-hop telemetry stamped by switches for HPCC: one packet's hop
/// records, kept in a side table of the simulator (indexed by
/// [`IntRef::rec`]) rather than behind a box in the packet body. Every
/// switch hop writes one record, and a box holding a `Vec` made that three
/// dependent cache misses (body, box, buffer) plus an allocator round trip
/// per packet; here it is the packet's header (whose [`IntRef`] says
/// where and how many, and which a switch has loaded to route the packet)
/// and the hop's own line. Aligned to cache lines: a path of five
/// switches (a 3-tier fat tree's longest) takes two lines.
#[derive(Debug, Clone, Copy, Default)]
#[repr(C, align(64))]
pub struct IntRec {
    pub hops: [IntStamp; MAX_INT_HOPS],
}

/// One switch's stamp as the simulator keeps it: an [`IntHop`] in 24
/// bytes rather than 32, the queue length in 32 bits and the link rate
/// as its place in the simulator's table of rates.
///
/// Why: with HPCC every data packet's record is written hop by hop and
/// read back once, by its ACK's sender, and both find its lines gone
/// from the core's caches (cachegrind with a 1 MB last level, the 1 ms
/// HPCC fat tree: the stamps' stores and `on_int`'s loads were 6.3 M of
/// the 23.8 M misses). Five 32-byte hops span three lines; five of these
/// span two.
///
/// Measured dead end (session 38): 12-byte stamps (time and byte counter
/// modulo 2^32, HPCC taking their differences modulo 2^32) with the five
/// hops' rates in four bits each, so that a five-switch path's record
/// fills one line and a longer one two (128 bytes, not 192). Outputs
/// identical on every HPCC and PINT fat-tree config, but 152 M more
/// instructions on the 1 ms HPCC fat tree (15.39 G against 15.24 G: the
/// packing) and user time even on the 5 ms run (four interleaved pairs:
/// 7.98, 8.16, 8.27, 7.76 s before against 8.13, 8.15, 7.95, 8.09 s): on
/// this machine's large last-level cache the second line was no longer
/// a cost.
///
/// Measured again, exact by bounds rather than by wrapping (session 47,
/// on a machine where HPCC's run took 35 % longer than DCQCN's, against
/// 13 % on session 46's): for ns-3 configs stopping before 2^32 ns, 12-byte
/// stamps of the time (u32 ns), the byte counter in 128-byte units (u32,
/// exact below 2^39 bytes, which a port cannot send by then) and the
/// queue in 16-byte units beside the rate's place (28 and 4 bits; ns-3's
/// encoding rounds both to those units), laid over the same record, the
/// RNIC unchanged. Outputs identical on the 1 ms and fat5ms HPCC runs.
/// With a 2 MB last level (callgrind, 1 ms HPCC fat tree) read misses
/// fell from 2.15 M to 1.30 M and write misses from 3.47 M to 2.49 M, the
/// echoed hops' copy from 0.89 M to 0.27 M; instructions rose from
/// 13,529 M to 13,736 M. The fat5ms HPCC user time came out even (six
/// interleaved pairs: 9.81, 8.73, 8.70, 8.65, 8.57, 8.38 s against 8.85,
/// 8.94, 8.74, 8.51, 9.12, 8.29 s), and perf still put 5.6 % of the
/// samples on the copy's first load: the ACK waits for one line either
/// way, and a line fewer did not shorten that wait.
///
/// Exact: a queue never holds more than its switch admits, which the
/// simulator checks fits 32 bits before a run with INT starts
/// ([`crate::pfc::Mmu::max_admitted`]), and the rate's table is built from
/// the switches' ports.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[repr(C)]
pub struct IntStamp {
    /// Nanoseconds.
    pub ts: u64,
    pub tx_bytes: u64,
    pub qlen: u32,
    /// The port's link rate: an index into the simulator's rates.
    pub rate: u32,
}

impl IntStamp {
    /// The hop as congestion control reads it; `rates` is the table
    /// [`rate`](Self::rate) indexes (a rate not in it reads as 0 b/s,
    /// which HPCC skips).
    #[inline(always)]
    pub fn hop(&self, rates: &[u64]) -> IntHop {
        IntHop {
            ts: self.ts,
            tx_bytes: self.tx_bytes,
            qlen: u64::from(self.qlen),
            link_bps: rates.get(self.rate as usize).copied().unwrap_or(0),
        }
    }
}

/// The HPCC ns-3 simulator's INT hop record (its `IntHop`), for runs of
/// its configs: a switch's byte counter and queue length go into 20- and
/// 17-bit fields in units of 128 and 80 bytes times `INT_MULTI`, so the
/// sender's HPCC reads them rounded down to those units. Our own runs
/// stamp exact counters.
///
/// The queue field's 17 bits hold `2^17 · 80 · multi` bytes (10.5 MB at
/// `INT_MULTI 1`); a longer queue wraps there, as ns-3's bit field does.
/// The byte counter's 20 bits and the timestamp's 24 (in ns) wrap too, but
/// ns-3 takes their differences modulo the field, which gives the exact
/// difference while less than 134 MB · multi passes a port and less than
/// 16.7 ms elapses between two of one QP's records of it; here the
/// counters do not wrap, so the two differ only past that.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Ns3Int {
    /// `INT_MULTI` (at least 1).
    pub multi: u32,
}

impl Ns3Int {
    /// ns-3's `IntHop::byteUnit` and `qlenUnit`.
    const BYTE_UNIT: u64 = 128;
    const QLEN_UNIT: u64 = 80;
    /// The queue field's width (`IntHop::qlenWidth`).
    const QLEN_BITS: u32 = 17;

    /// The link rates the record's 3-bit field codes (`IntHop::Set`).
    pub const LINE_RATES: [u64; 5] = [
        25_000_000_000,
        50_000_000_000,
        100_000_000_000,
        200_000_000_000,
        400_000_000_000,
    ];

    /// The byte counter and queue length as ns-3's record gives them back
    /// (`GetBytes`, `GetQlen`): `tx_bytes` and `qlen` rounded down to the
    /// units, the queue's count of units wrapped to its field, and the
    /// queue's bytes wrapped to 32 bits as `GetQlen`'s `uint32_t` product
    /// wraps them (only past `INT_MULTI` 409).
    ///
    /// Every HPCC run of an ns-3 config stamps through this at each switch
    /// a data packet leaves, so the usual `INT_MULTI` (a power of two:
    /// run.py writes NIC Gb/s ÷ 25) takes a mask and a division by the
    /// constant 5 (80 = 16 · 5), which compile to shifts and a multiply,
    /// instead of two 64-bit divisions by a run-time divisor: 143 M fewer
    /// instructions of 15.49 G on the 1 ms HPCC fat tree (cachegrind,
    /// session 37), outputs identical.
    #[inline(always)]
    pub fn encode(self, tx_bytes: u64, qlen: u64) -> (u64, u64) {
        let multi = self.multi.max(1);
        if multi == 1 {
            // The default and the shipped configs' value: the shifts with
            // a constant 0 fold away.
            return Self::encode_shifted(0, tx_bytes, qlen);
        }
        if multi.is_power_of_two() {
            return Self::encode_shifted(multi.trailing_zeros(), tx_bytes, qlen);
        }
        self.encode_by_division(tx_bytes, qlen)
    }

    /// [`encode`](Self::encode) for `INT_MULTI` = 2^`s`.
    #[inline(always)]
    fn encode_shifted(s: u32, tx_bytes: u64, qlen: u64) -> (u64, u64) {
        let units = ((qlen >> (4 + s)) / 5) & ((1 << Self::QLEN_BITS) - 1);
        let q = Self::QLEN_UNIT << s;
        (
            tx_bytes & !((Self::BYTE_UNIT << s) - 1),
            (units * q) & u64::from(u32::MAX),
        )
    }

    /// [`encode`](Self::encode) as ns-3 writes it, for any `INT_MULTI`.
    #[inline(never)]
    #[cold]
    fn encode_by_division(self, tx_bytes: u64, qlen: u64) -> (u64, u64) {
        let multi = u64::from(self.multi.max(1));
        let (b, q) = (Self::BYTE_UNIT * multi, Self::QLEN_UNIT * multi);
        let units = (qlen / q) & ((1 << Self::QLEN_BITS) - 1);
        (tx_bytes / b * b, (units * q) & u64::from(u32::MAX))
    }

    /// The link rate the record gives back for a port of `bps`: ns-3's
    /// `IntHop::Set` codes only [`LINE_RATES`](Self::LINE_RATES) (printing
    /// an error for any other and leaving the field at its zeroed 25
    /// Gb/s), so a 10G or 40G port reads as 25G in HPCC there.
    pub fn line_rate(bps: u64) -> u64 {
        if Self::LINE_RATES.contains(&bps) {
            bps
        } else {
            Self::LINE_RATES[0]
        }
    }
}

/// Where a packet's (or a flow's echoed) INT lives: a record of the
/// simulator's INT table and how many hops it holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct IntRef {
    pub rec: u32,
    pub len: u8,
}

impl IntRef {
    /// No INT.
    pub const NONE: IntRef = IntRef {
        rec: u32::MAX,
        len: 0,
    };

    /// A record of the INT table (not [`NONE`](Self::NONE), nor a PINT
    /// code: see [`PINT_TAG`]).
    pub fn is_some(self) -> bool {
        self.rec & PINT_TAG == 0
    }

    /// A PINT code in the place of a record (HPCC-PINT keeps no records).
    pub fn pint(code: u16) -> IntRef {
        IntRef {
            rec: PINT_TAG | u32::from(code),
            len: 0,
        }
    }

    /// The PINT code this holds, if one.
    pub fn pint_code(self) -> Option<u16> {
        (self.rec & PINT_TAG != 0 && self.rec != u32::MAX).then_some(self.rec as u16)
    }
}

/// An [`IntRef`]'s record with this bit set is no record: with HPCC-PINT
/// the packet's field holds a PINT code (low 16 bits) instead, as ns-3's
/// INT header holds the code in PINT mode. Records never reach 2^31 (the
/// table would take 128 GB first).
pub const PINT_TAG: u32 = 1 << 31;

/// The INT record no packet owns: where a switch writes the hop of a
/// packet it does not stamp (an ACK, a CNP, a full record), so that the
/// stamp is the same stores whatever the packet, without a branch on its
/// kind. ACKs and data leave a switch in no order a predictor learns, and
/// the branch mispredicted on about half of all switch departures
/// (cachegrind, HPCC on the 320-host fat tree: 2.6 M of the 11.6 M
/// mispredicts HPCC adds to DCQCN, and as many again at the arrival's
/// prefetch of the same hop). The simulator makes it its first record.
pub const INT_SCRATCH: u32 = 0;

// A flat hop index splits into record and hop by a shift and a mask.
const _: () = assert!(MAX_INT_HOPS.is_power_of_two());

/// Largest host index a [`Packet`] holds (hosts are 24-bit, as their
/// addresses are: 10.0.0.1 plus the index).
pub const MAX_HOST: u32 = (1 << 24) - 2;
/// [`Packet::dst`] of a frame addressed to no host of the fabric.
pub const NO_HOST: u32 = (1 << 24) - 1;
const LOW24: u32 = (1 << 24) - 1;

/// Network flags (top byte of `src_flags`).
const F_PRIO: u32 = 7;
const F_ECN_CAPABLE: u32 = 1 << 3;
const F_CE: u32 = 1 << 4;
const F_CONTROL: u32 = 1 << 5;
const F_NS3_KEY: u32 = 1 << 6;

/// BTH flags (top byte of `psn_bits`), and how `tail` reads.
const B_SOLICITED: u32 = 1;
const B_ACK_REQ: u32 = 1 << 1;
const B_FECN: u32 = 1 << 2;
const B_BECN: u32 = 1 << 3;
const B_PAD_SHIFT: u32 = 4;
const B_TAIL_SHIFT: u32 = 6;
const TAIL_NONE: u32 = 0;
const TAIL_AETH: u32 = 1;
const TAIL_EXT: u32 = 2;

/// One frame in flight, in 32 bytes: what switches read and write (source
/// and destination host, priority and ECN bits, frame length, the ECMP key,
/// the INT record) and what only its endpoints read (payload length, the
/// base transport header and an ACK's AETH, packed as on the wire). Half a
/// cache line, aligned, so a switch hop or a host touches one line.
///
/// A fabric holds millions of frames under congestion (876,000 live on a
/// k=32 fat tree 400 µs into WebSearch at 30 % load), and this slot was
/// most of what each costs: two 32-byte halves (a network header and a
/// body of unpacked `BthRepr` and `Option<AethRepr>`) took 64 bytes.
///
/// Packets whose headers do not fit (extension headers other than an
/// AETH, which only a message's first and last packets carry, or BTH
/// fields the simulator's RNICs never set: a P_Key other than the default,
/// TVer, MigReq) keep their whole `TransportRepr` in a side table of the
/// simulator, and `tail` holds its index.
///
/// The flow a packet belongs to is not stored: its endpoint finds it from
/// the destination QP (QPNs are never reused on a host), and switches need
/// none — ns-3's ECMP hash, which depends on the flow's ports, reads them
/// from the packet's `ecmp` key.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(C, align(32))]
pub struct Packet {
    /// Sending host (low 24 bits) and the network flags.
    src_flags: u32,
    /// Destination host (low 24 bits, [`NO_HOST`] when none) and the INT
    /// hops recorded so far (top 8).
    dst_hops: u32,
    /// The ECMP key: the UDP source port, or with [`F_NS3_KEY`] ns-3's
    /// `sport | dport << 16` in the packet's direction, scrambled as its
    /// hash scrambles it (see [`Packet::set_ns3_ports`]).
    ecmp: u32,
    /// Index of the packet's INT record (`u32::MAX`: none).
    int_rec: u32,
    /// Frame length from destination MAC to FCS: what buffers hold.
    frame: u16,
    /// Message bytes carried.
    payload: u16,
    /// BTH: destination QP (low 24 bits) and opcode (top 8).
    qp_op: u32,
    /// BTH: PSN (low 24 bits), SE, AckReq, FECN, BECN, PadCnt, and what
    /// `tail` holds (top 8).
    psn_bits: u32,
    /// The AETH (syndrome in the top 8 bits, MSN below), the side-table
    /// index of the whole `TransportRepr`, or 0.
    tail: u32,
}

/// What a [`Packet`] is made of, besides its transport headers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Net {
    pub src: u32,
    /// Destination host, or anything above [`MAX_HOST`] for none.
    pub dst: u32,
    pub prio: u8,
    pub ecn_capable: bool,
    /// ACK, NAK, atomic ACK or CNP (see [`is_control`]).
    pub control: bool,
    pub frame: u32,
    pub payload: u32,
    /// The UDP source port.
    pub sport: u16,
}

impl Packet {
    /// The packet `net` with transport headers `repr`; `ext()` (called
    /// only when the headers do not fit the slot) keeps `repr` in the side
    /// table and says where. `net.src` must be at most [`MAX_HOST`] (the
    /// simulator refuses larger fabrics), the frame and payload at most
    /// 65,535 bytes (a RoCEv2 frame is at most a 4 KiB payload plus headers).
    // Inlined into the host's transmit poll, which builds `net` from the
    // RNIC's packet field by field (issue 12).
    #[inline(always)]
    pub fn new(net: Net, repr: &TransportRepr, ext: impl FnOnce() -> u32) -> Packet {
        // The checks' messages are formatted out of line, from values
        // passed in registers: formatting `net`'s fields in place made the
        // compiler store the whole of `net` to the stack first, on every
        // packet sent (issue 12).
        if net.src > MAX_HOST {
            bad_host(net.src);
        }
        let (Ok(frame), Ok(payload)) = (u16::try_from(net.frame), u16::try_from(net.payload))
        else {
            bad_frame(net.frame, net.payload);
        };
        let flags = u32::from(net.prio) & F_PRIO
            | if net.ecn_capable { F_ECN_CAPABLE } else { 0 }
            | if net.control { F_CONTROL } else { 0 };
        let r = repr;
        let b = &r.bth;
        // Every test evaluated (`&`, not `&&`): they are cheap and free of
        // effects, and one branch on the whole is predictable where a
        // chain of them, taken differently by a host's data and its ACKs,
        // mispredicted about once per packet sent (issue 12).
        let fits = r.deth.is_none()
            & r.reth.is_none()
            & r.atomic_eth.is_none()
            & r.atomic_ack_eth.is_none()
            & r.immdt.is_none()
            & r.ieth.is_none()
            & (b.pkey == 0xffff)
            & (b.tver == 0)
            & !b.mig_req
            & (b.pad_count < 4)
            & (b.dest_qp <= LOW24)
            & !matches!(b.opcode, Opcode::Unknown(_))
            & r.aeth.is_none_or(|a| a.msn <= LOW24 && packs(a.syndrome));
        let (kind, tail) = match (fits, r.aeth) {
            (false, _) => (TAIL_EXT, ext()),
            (true, None) => (TAIL_NONE, 0),
            (true, Some(a)) => (
                TAIL_AETH,
                u32::from(syndrome_byte(a.syndrome)) << 24 | a.msn,
            ),
        };
        let bits = if b.solicited { B_SOLICITED } else { 0 }
            | if b.ack_req { B_ACK_REQ } else { 0 }
            | if b.fecn { B_FECN } else { 0 }
            | if b.becn { B_BECN } else { 0 }
            | u32::from(b.pad_count & 3) << B_PAD_SHIFT
            | kind << B_TAIL_SHIFT;
        Packet {
            src_flags: net.src | flags << 24,
            dst_hops: net.dst.min(NO_HOST),
            ecmp: u32::from(net.sport),
            int_rec: u32::MAX,
            frame,
            payload,
            qp_op: b.dest_qp & LOW24 | u32::from(b.opcode.to_u8()) << 24,
            psn_bits: b.psn.value() | bits << 24,
            tail,
        }
    }

    #[inline]
    fn flags(&self) -> u32 {
        self.src_flags >> 24
    }

    #[inline]
    pub fn src(&self) -> u32 {
        self.src_flags & LOW24
    }

    /// The destination host ([`NO_HOST`] when none).
    #[inline]
    pub fn dst(&self) -> u32 {
        self.dst_hops & LOW24
    }

    #[inline]
    pub fn prio(&self) -> u8 {
        (self.flags() & F_PRIO) as u8
    }

    #[inline]
    pub fn set_prio(&mut self, prio: u8) {
        self.src_flags = self.src_flags & !(F_PRIO << 24) | (u32::from(prio) & F_PRIO) << 24;
    }

    #[inline]
    pub fn ecn_capable(&self) -> bool {
        self.flags() & F_ECN_CAPABLE != 0
    }

    #[inline]
    pub fn ce(&self) -> bool {
        self.flags() & F_CE != 0
    }

    /// Marks congestion experienced.
    #[inline]
    pub fn set_ce(&mut self) {
        self.src_flags |= F_CE << 24;
    }

    /// Marks congestion experienced if `ce`, without a branch.
    #[inline(always)]
    pub fn mark_ce_if(&mut self, ce: bool) {
        self.src_flags |= u32::from(ce) * (F_CE << 24);
    }

    /// ACK, NAK, atomic ACK or CNP.
    #[inline]
    pub fn control(&self) -> bool {
        self.flags() & F_CONTROL != 0
    }

    #[inline]
    pub fn frame(&self) -> u32 {
        u32::from(self.frame)
    }

    /// Adds `bytes` to the frame (an INT field).
    pub fn grow(&mut self, bytes: u32) {
        let Ok(frame) = u16::try_from(self.frame() + bytes) else {
            panic!("frame of {} bytes", self.frame() + bytes);
        };
        self.frame = frame;
    }

    #[inline]
    pub fn payload(&self) -> u32 {
        u32::from(self.payload)
    }

    /// The UDP source port, the packet's only ECMP key when
    /// [`Packet::ns3_key`] is `None`; meaningless when it is `Some` (the
    /// field then holds ns-3's scrambled key).
    #[inline]
    pub fn sport(&self) -> u16 {
        self.ecmp as u16
    }

    /// ns-3's `sport | dport << 16` of the packet's direction, if set, as
    /// [`murmur3_mix`](crate::ecmp::ns3::murmur3_mix) scrambled it (the
    /// form its hash takes at every switch, see
    /// [`select_mixed`](crate::ecmp::ns3::select_mixed)).
    #[inline]
    pub fn ns3_key(&self) -> Option<u32> {
        (self.flags() & F_NS3_KEY != 0).then_some(self.ecmp)
    }

    /// Keys ns-3's ECMP hash with `ports` (instead of the source port),
    /// scrambled once here rather than at each switch the packet crosses.
    pub fn set_ns3_ports(&mut self, ports: u32) {
        self.ecmp = crate::ecmp::ns3::murmur3_mix(ports);
        self.src_flags |= F_NS3_KEY << 24;
    }

    /// The packet's INT record, or [`IntRef::NONE`].
    #[inline]
    pub fn int(&self) -> IntRef {
        IntRef {
            rec: self.int_rec,
            len: (self.dst_hops >> 24) as u8,
        }
    }

    /// The packet's PINT code (HPCC-PINT), if it carries one.
    #[inline]
    pub fn pint(&self) -> Option<u16> {
        self.int().pint_code()
    }

    /// Carries PINT code `code`.
    #[inline]
    pub fn set_pint(&mut self, code: u16) {
        self.set_int(IntRef::pint(code));
    }

    #[inline]
    pub fn set_int(&mut self, int: IntRef) {
        self.int_rec = int.rec;
        self.dst_hops = self.dst_hops & LOW24 | u32::from(int.len) << 24;
    }

    /// Where a switch stamps this packet's next hop, as a flat index into
    /// the INT records' hops (record × [`MAX_INT_HOPS`] + hop): the next
    /// hop of its record for data with a record that has room (HPCC §3.2
    /// stamps data only, see the simulator's `send_frame`), else 0, the
    /// first hop of [`INT_SCRATCH`]. A caller writes (or prefetches) a hop
    /// either way: no branch on the packet's kind, in a few flag
    /// operations (selecting a record and a hop apart took twice as many
    /// instructions).
    #[inline(always)]
    pub fn int_hop(&self) -> usize {
        let len = self.dst_hops >> 24;
        let stamp = (self.src_flags & (F_CONTROL << 24) == 0)
            & (self.int_rec & PINT_TAG == 0)
            & (len < MAX_INT_HOPS as u32);
        let at = (self.int_rec as usize)
            .wrapping_mul(MAX_INT_HOPS)
            .wrapping_add(len as usize);
        at & usize::from(stamp).wrapping_neg()
    }

    /// [`int_hop`](Self::int_hop), counting the hop in the packet when it
    /// is one of its own (the scratch record's is not: a packet's record
    /// is never the scratch).
    #[inline(always)]
    pub fn take_int_hop(&mut self) -> usize {
        let at = self.int_hop();
        self.count_int_hop(at);
        at
    }

    /// Counts hop `at` (this packet's [`int_hop`](Self::int_hop), read
    /// earlier) in the packet when it is one of its own.
    #[inline(always)]
    pub fn count_int_hop(&mut self, at: usize) {
        self.dst_hops += u32::from(at >= MAX_INT_HOPS) << 24;
    }

    /// Makes this (freed) slot a link of the simulator's free list: the
    /// next free slot is `next`. Overwrites the source host and the
    /// network flags only, so the INT record and the side-table index
    /// stay readable until the slot is reused.
    #[inline]
    pub fn set_free_next(&mut self, next: u32) {
        self.src_flags = next;
    }

    /// The free slot after this one (see [`Packet::set_free_next`]).
    #[inline]
    pub fn free_next(&self) -> u32 {
        self.src_flags
    }

    /// The BTH opcode, read without unpacking the headers (a side-table
    /// packet keeps its opcode in the slot too).
    #[inline]
    pub fn opcode(&self) -> Opcode {
        Opcode::from_u8((self.qp_op >> 24) as u8)
    }

    /// The destination QPN, as far as the slot holds it: exact for a
    /// packet whose headers fit the slot, anything for one whose headers
    /// are in the side table. For cache hints only (see
    /// [`repr`](Self::repr) for the headers).
    #[inline]
    pub fn dest_qp_hint(&self) -> u32 {
        self.qp_op & LOW24
    }

    /// The side-table index of the packet's `TransportRepr`, if its
    /// headers did not fit the slot.
    #[inline]
    pub fn ext(&self) -> Option<u32> {
        (self.psn_bits >> (24 + B_TAIL_SHIFT) == TAIL_EXT).then_some(self.tail)
    }

    /// The transport headers, given the side table (read only for a
    /// packet whose headers did not fit).
    #[inline]
    pub fn repr(&self, exts: &[TransportRepr]) -> TransportRepr {
        let bits = self.psn_bits >> 24;
        let kind = bits >> B_TAIL_SHIFT;
        if kind == TAIL_EXT {
            return exts[self.tail as usize];
        }
        let mut t = TransportRepr::new(BthRepr {
            opcode: Opcode::from_u8((self.qp_op >> 24) as u8),
            solicited: bits & B_SOLICITED != 0,
            mig_req: false,
            pad_count: ((bits >> B_PAD_SHIFT) & 3) as u8,
            tver: 0,
            pkey: 0xffff,
            fecn: bits & B_FECN != 0,
            becn: bits & B_BECN != 0,
            dest_qp: self.qp_op & LOW24,
            ack_req: bits & B_ACK_REQ != 0,
            psn: Psn::new(self.psn_bits),
        });
        if kind == TAIL_AETH {
            t.aeth = Some(AethRepr {
                syndrome: Syndrome::from_u8((self.tail >> 24) as u8),
                msn: self.tail & LOW24,
            });
        }
        t
    }
}

/// [`Packet::new`]'s refusal of a host beyond [`MAX_HOST`].
#[cold]
#[inline(never)]
fn bad_host(src: u32) -> ! {
    panic!("host {src} in a packet")
}

/// [`Packet::new`]'s refusal of a frame or payload over 65,535 bytes.
#[cold]
#[inline(never)]
fn bad_frame(frame: u32, payload: u32) -> ! {
    panic!("frame of {frame} bytes (payload {payload})")
}

/// `s.to_u8()`, a plain ACK's (the credits, which `packs` bounded)
/// without the jump table the whole match compiles to.
#[inline(always)]
fn syndrome_byte(s: Syndrome) -> u8 {
    match s {
        Syndrome::Ack { credits } => credits & 0x1f,
        s => s.to_u8(),
    }
}

/// Whether `s` comes back from its byte (some values of the enum, such as
/// an ACK with more than 5 bits of credits, have no byte of their own).
/// A plain ACK is settled by one compare: the derived `==` on the
/// round-tripped value compiled to a jump table whose indirect branch
/// mispredicted about once per ACK sent (issue 12).
#[inline]
fn packs(s: Syndrome) -> bool {
    match s {
        Syndrome::Ack { credits } => credits < 32,
        s => Syndrome::from_u8(s.to_u8()) == s,
    }
}

/// ACKs, NAKs, atomic ACKs and CNPs: the control traffic that rides the
/// control priority.
pub fn is_control(repr: &TransportRepr) -> bool {
    matches!(
        repr.bth.opcode,
        Opcode::RcAck | Opcode::RcAtomicAck | Opcode::Cnp
    )
}

/// Frame bytes (MAC header to FCS) of a RoCEv2 packet with `repr` and
/// `payload` bytes: L2–L4 headers, BTH and extension headers, payload, pad,
/// ICRC, FCS.
pub fn frame_len(repr: &TransportRepr, payload: usize) -> u64 {
    L2_L4_HEADER + repr.buffer_len(payload) as u64 + FCS
}

#[cfg(test)]
mod tests {
    use super::*;
    use roce_wire::BthRepr;

    #[test]
    fn a_packet_is_half_a_line() {
        // 32 bytes aligned to 32: never two lines.
        assert_eq!(std::mem::size_of::<Packet>(), 32);
        assert_eq!(std::mem::align_of::<Packet>(), 32);
    }

    fn net(src: u32, dst: u32) -> Net {
        Net {
            src,
            dst,
            prio: 3,
            ecn_capable: true,
            control: false,
            frame: 1086,
            payload: 1024,
            sport: 0xc123,
        }
    }

    /// `packs` is exactly "the syndrome survives its byte", on every byte
    /// and on values no byte decodes to (wide credits or timers, a
    /// reserved class holding another class's byte, a NAK code past 5 bits).
    #[test]
    fn packs_is_the_round_trip() {
        use roce_wire::{NakCode, Syndrome};
        let mut all: Vec<Syndrome> = (0..=255u8).map(Syndrome::from_u8).collect();
        all.extend([
            Syndrome::Ack { credits: 32 },
            Syndrome::Ack { credits: 255 },
            Syndrome::RnrNak { timer: 40 },
            Syndrome::Reserved(0x05),
            Syndrome::Reserved(0x45),
            Syndrome::Nak(NakCode::Reserved(0x25)),
        ]);
        for s in all {
            assert_eq!(packs(s), Syndrome::from_u8(s.to_u8()) == s, "{s:?}");
            assert_eq!(syndrome_byte(s), s.to_u8(), "{s:?}");
        }
        assert!(packs(Syndrome::Ack { credits: 31 }));
        assert!(!packs(Syndrome::Ack { credits: 32 }));
    }

    /// The headers a packet is made with come back exactly: in the slot
    /// when they fit (the BTH, an ACK's AETH), from the side table when
    /// not (other extension headers, unusual BTH fields, unknown opcodes).
    #[test]
    fn packets_give_back_the_transport_headers() {
        let mut ack = TransportRepr::new(BthRepr {
            opcode: Opcode::RcAck,
            psn: roce_wire::Psn::new(0xfe_dcba),
            dest_qp: 0xff_fffe,
            ..Default::default()
        });
        ack.aeth = Some(AethRepr {
            syndrome: roce_wire::Syndrome::Ack { credits: 31 },
            msn: 0x00ab_cdef,
        });
        let mut nak = ack;
        nak.aeth = Some(AethRepr {
            syndrome: roce_wire::Syndrome::Nak(roce_wire::NakCode::PsnSequenceError),
            msn: 3,
        });
        let mut first = TransportRepr::new(BthRepr {
            opcode: Opcode::RcWriteFirst,
            ..Default::default()
        });
        first.reth = Some(roce_wire::RethRepr {
            va: 0x1000,
            rkey: 9,
            dma_len: 4096,
        });
        let mut atomic_ack = TransportRepr::new(BthRepr {
            opcode: Opcode::RcAtomicAck,
            ..Default::default()
        });
        atomic_ack.aeth = ack.aeth;
        atomic_ack.atomic_ack_eth = Some(roce_wire::AtomicAckEthRepr { orig: 5 });
        let middle = TransportRepr::new(BthRepr {
            opcode: Opcode::RcWriteLast,
            solicited: true,
            pad_count: 3,
            fecn: true,
            becn: true,
            ack_req: true,
            dest_qp: 0x12_3456,
            psn: roce_wire::Psn::new(77),
            ..Default::default()
        });
        let mut odd_pkey = middle;
        odd_pkey.bth.pkey = 0x8001;
        let mut tver = middle;
        tver.bth.tver = 1;
        let mut mig = middle;
        mig.bth.mig_req = true;
        let mut wide_qp = middle;
        wide_qp.bth.dest_qp = 1 << 24;
        let mut wide_msn = ack;
        wide_msn.aeth = Some(AethRepr {
            syndrome: roce_wire::Syndrome::Ack { credits: 1 },
            msn: 1 << 24,
        });
        let unknown = TransportRepr::new(BthRepr {
            opcode: Opcode::Unknown(0x1f),
            ..Default::default()
        });
        let cnp = TransportRepr::new(BthRepr {
            opcode: Opcode::Cnp,
            becn: true,
            ..Default::default()
        });
        let mut exts = Vec::new();
        for (repr, in_table) in [
            (ack, false),
            (nak, false),
            (first, true),
            (atomic_ack, true),
            (middle, false),
            (odd_pkey, true),
            (tver, true),
            (mig, true),
            (wide_qp, true),
            (wide_msn, true),
            (unknown, true),
            (cnp, false),
        ] {
            let p = Packet::new(net(5, 9), &repr, || {
                exts.push(repr);
                (exts.len() - 1) as u32
            });
            assert_eq!(p.ext().is_some(), in_table, "{:?}", repr.bth);
            assert_eq!(p.repr(&exts), repr);
            assert_eq!(
                (p.src(), p.dst(), p.frame(), p.payload()),
                (5, 9, 1086, 1024)
            );
        }
        assert_eq!(exts.len(), 8);
    }

    /// What switches read and write keeps to its own bits.
    #[test]
    fn network_fields_round_trip() {
        let t = TransportRepr::new(BthRepr {
            opcode: Opcode::RcWriteMiddle,
            psn: roce_wire::Psn::new(0xff_ffff),
            dest_qp: 0xff_ffff,
            ..Default::default()
        });
        let mut p = Packet::new(net(MAX_HOST, u32::MAX), &t, || unreachable!());
        assert_eq!((p.src(), p.dst()), (MAX_HOST, NO_HOST));
        assert_eq!(
            (p.prio(), p.ecn_capable(), p.ce(), p.control()),
            (3, true, false, false)
        );
        assert_eq!((p.sport(), p.ns3_key()), (0xc123, None));
        assert_eq!(p.int(), IntRef::NONE);
        p.set_ce();
        p.set_prio(7);
        p.set_int(IntRef {
            rec: 0xdead,
            len: 8,
        });
        p.grow(42);
        assert_eq!(
            (p.prio(), p.ecn_capable(), p.ce(), p.control()),
            (7, true, true, false)
        );
        assert_eq!(
            p.int(),
            IntRef {
                rec: 0xdead,
                len: 8
            }
        );
        assert_eq!((p.src(), p.dst(), p.frame()), (MAX_HOST, NO_HOST, 1128));
        p.set_ns3_ports(0x12b7_c123);
        assert_eq!(
            p.ns3_key(),
            Some(crate::ecmp::ns3::murmur3_mix(0x12b7_c123))
        );
        // What a switch picks from the stored key (its addresses
        // scrambled as the simulator's table keeps them) is ns-3's pick
        // from the plain words.
        use crate::ecmp::ns3::{murmur3_mix, select, select_mixed};
        let key = p.ns3_key().expect("set above");
        for (sip, dip) in [(0x0b00_0001u32, 0x0b00_0101u32), (0x0b01_3f01, 0x0b00_9901)] {
            for (node, n) in [(320u32, 1usize), (321, 2), (375, 4), (400, 7), (3, 16)] {
                assert_eq!(
                    select_mixed([murmur3_mix(sip), murmur3_mix(dip), key], node, n),
                    select(sip, dip, 0x12b7_c123, node, n)
                );
            }
        }
        assert_eq!(p.repr(&[]), t);
        let mut c = net(0, 1);
        c.control = true;
        c.ecn_capable = false;
        let p = Packet::new(c, &t, || unreachable!());
        assert_eq!((p.ecn_capable(), p.control(), p.dst()), (false, true, 1));
    }

    /// A switch stamps data with room in its record, at the next hop,
    /// and counts it; an ACK (whose record is the echo it carries back),
    /// a packet without INT and a full record all get the scratch
    /// record's first hop and keep their count.
    #[test]
    fn switches_stamp_data_only_and_others_write_the_scratch() {
        let t = TransportRepr::new(BthRepr {
            opcode: Opcode::RcWriteMiddle,
            ..Default::default()
        });
        let mut d = Packet::new(net(1, 2), &t, || unreachable!());
        assert_eq!(d.int_hop(), 0, "no INT record");
        d.set_int(IntRef { rec: 5, len: 0 });
        for hop in 0..MAX_INT_HOPS {
            assert_eq!(d.take_int_hop(), 5 * MAX_INT_HOPS + hop);
            assert_eq!(usize::from(d.int().len), hop + 1);
        }
        assert_eq!(d.take_int_hop(), 0, "a full record");
        assert_eq!(d.int(), IntRef { rec: 5, len: 8 });
        let mut c = net(2, 1);
        c.control = true;
        let mut a = Packet::new(c, &t, || unreachable!());
        a.set_int(IntRef { rec: 7, len: 5 });
        assert_eq!(a.take_int_hop(), 0, "an ACK's echo is not stamped");
        assert_eq!(a.int(), IntRef { rec: 7, len: 5 });
    }

    #[test]
    fn five_int_hops_take_two_cache_lines() {
        assert_eq!(std::mem::size_of::<IntStamp>(), 24);
        assert_eq!(std::mem::align_of::<IntRec>(), 64);
        assert_eq!(std::mem::size_of::<IntRec>(), 24 * MAX_INT_HOPS);
        assert!(5 * std::mem::size_of::<IntStamp>() <= 128);
    }

    #[test]
    fn a_stamp_reads_back_as_the_hop_it_records() {
        let s = IntStamp {
            ts: 1 << 40,
            tx_bytes: u64::MAX - 3,
            qlen: u32::MAX,
            rate: 1,
        };
        let rates = [25_000_000_000, 400_000_000_000];
        assert_eq!(
            s.hop(&rates),
            IntHop {
                ts: 1 << 40,
                tx_bytes: u64::MAX - 3,
                qlen: u64::from(u32::MAX),
                link_bps: 400_000_000_000,
            }
        );
        assert_eq!(IntStamp { rate: 2, ..s }.hop(&rates).link_bps, 0);
    }

    #[test]
    fn ack_frame_is_66_bytes() {
        let mut t = TransportRepr::new(BthRepr {
            opcode: Opcode::RcAck,
            ..Default::default()
        });
        t.aeth = Some(roce_wire::AethRepr {
            syndrome: roce_wire::Syndrome::Ack { credits: 31 },
            msn: 0,
        });
        // 14 + 20 + 8 + BTH 12 + AETH 4 + ICRC 4 + FCS 4.
        assert_eq!(frame_len(&t, 0), 66);
        assert_eq!(
            frame_len(&t, 0),
            roce_rnic::PACKET_OVERHEAD + t.header_len() as u64
        );
    }

    /// ns-3's `IntHop::Set` then `GetBytes`/`GetQlen`: rounded down to
    /// 128 and 80 bytes times `INT_MULTI`, the queue's units wrapped to 17
    /// bits; 0 reads as 1.
    #[test]
    fn ns3_int_units() {
        let one = Ns3Int { multi: 1 };
        assert_eq!(one.encode(1_000, 1_000), (896, 960));
        assert_eq!(one.encode(127, 79), (0, 0));
        assert_eq!(one.encode(128, 80), (128, 80));
        let four = Ns3Int { multi: 4 };
        assert_eq!(four.encode(1_000, 1_000), (512, 960));
        assert_eq!(four.encode(511, 319), (0, 0));
        // 2^17 units of 80 bytes wrap to 0, as the bit field does.
        let full = (1u64 << 17) * 80;
        assert_eq!(one.encode(0, full + 160).1, 160);
        assert_eq!(one.encode(0, full - 80).1, full - 80);
        assert_eq!(four.encode(0, full + 160).1, full, "4x the reach");
        assert_eq!(Ns3Int { multi: 0 }.encode(1_000, 1_000), (896, 960));
        // GetQlen's uint32_t product wraps past INT_MULTI 409.
        let big = Ns3Int { multi: 1_000 };
        let q = 100_000 * 80_000;
        assert_eq!(big.encode(0, q).1, q & u64::from(u32::MAX));
        // Rates the 3-bit field does not code read as 25G.
        assert_eq!(Ns3Int::line_rate(100_000_000_000), 100_000_000_000);
        assert_eq!(Ns3Int::line_rate(10_000_000_000), 25_000_000_000);
        assert_eq!(Ns3Int::line_rate(40_000_000_000), 25_000_000_000);
    }

    /// The power-of-two path of `Ns3Int::encode` gives what ns-3's
    /// divisions give, for counters across their whole range (the queue's
    /// wrap and the product's 32-bit wrap included).
    #[test]
    fn ns3_int_shifts_agree_with_division() {
        let mut x = 0x9e37_79b9_7f4a_7c15u64;
        let mut next = || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        };
        for s in 0..12 {
            let e = Ns3Int { multi: 1 << s };
            for _ in 0..20_000 {
                let (a, b) = (next(), next());
                // Small, middling and full-width values alike.
                for (tx, q) in [(a, b), (a >> 40, b >> 40), (a >> 20, b >> 28)] {
                    assert_eq!(e.encode(tx, q), e.encode_by_division(tx, q), "{s} {tx} {q}");
                }
            }
            for q in [0, 79, 80, 81, (1u64 << 17) * 80 - 1, (1u64 << 17) * 80] {
                let q = q << s;
                assert_eq!(e.encode(q, q), e.encode_by_division(q, q));
            }
        }
    }
}
