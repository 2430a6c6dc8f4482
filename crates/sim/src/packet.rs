//! A packet in flight through the fabric. The transport part is the RNIC's
//! own `TransportRepr`; the simulator adds what the network needs (who,
//! which priority, how big on the wire, ECN bits, INT) and moves only a
//! length for the payload.

use roce_rnic::IntHop;
use roce_wire::{AethRepr, BthRepr, Opcode, TransportRepr};

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
/// and the hop's own line. Aligned to cache lines so a hop never straddles two.
#[derive(Debug, Clone, Copy, Default)]
#[repr(C, align(64))]
pub struct IntRec {
    pub hops: [IntHop; MAX_INT_HOPS],
}

/// Where a packet's (or a flow's echoed) INT lives: a record of the
/// simulator's INT table and how many hops it holds.
///
/// Packed (5 bytes) so it fits in the spare bytes of a [`Packet`]: a
/// switch stamping a hop then reads only the header line it has already
/// loaded to route the packet, and can start loading the hop's line as
/// soon as it arrives (in the body, it cost a second cold line per hop).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(C, packed)]
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

    pub fn is_some(self) -> bool {
        self.rec != u32::MAX
    }
}

/// One frame's network-visible fields: what switches read and write.
/// Kept small (and `Copy`) because every hop touches it; the transport
/// headers, which only the two hosts read, live in a [`PacketBody`] beside
/// it.
///
/// Aligned to 32 bytes so that in the packet table no packet straddles two
/// cache lines (at 28 bytes from a 16-byte-aligned allocation, half of
/// them did, and reading one cost two misses).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(align(32))]
pub struct Packet {
    pub src: u32,
    pub dst: u32,
    /// Frame length from destination MAC to FCS: what buffers hold.
    pub frame: u32,
    /// Message bytes carried.
    pub payload: u32,
    /// Flow this packet belongs to (`u32::MAX` when unknown).
    pub flow: u32,
    pub sport: u16,
    pub prio: u8,
    pub ecn_capable: bool,
    pub ce: bool,
    /// ACK, NAK, atomic ACK or CNP (see [`is_control`]).
    pub control: bool,
    /// The packet's INT record (data packets, which switches stamp, and
    /// ACKs, which echo one back), or [`IntRef::NONE`].
    pub int: IntRef,
}

/// The parts of a frame only its endpoints read: the base transport header
/// inline, an ACK's AETH inline too, and the other extension headers,
/// which only the first and last packets of a message carry, in a side
/// table of the simulator. (Every ACK has an AETH: in the side table each
/// cost its sender a 136-byte write and its receiver a copy out of three
/// cold lines, 7 % of an HPCC run's time with the INT lookups.)
/// A fabric holds millions of packets under congestion (5.4 M on a k=32
/// fat tree at 30 % load), and a whole `TransportRepr` per packet made
/// bodies 144 bytes each, most of the run's memory; this is 32.
///
/// Aligned to 32 bytes like [`Packet`], so a body is one cache line.
#[derive(Debug, Clone, Copy)]
#[repr(align(32))]
pub struct PacketBody {
    pub bth: BthRepr,
    /// The index of the packet's whole `TransportRepr` in the side table,
    /// or [`NO_EXT`] when the BTH and `aeth` are all it has.
    pub ext: u32,
    /// The AETH of a packet whose only extension header it is (with
    /// `ext` = [`NO_EXT`]).
    pub aeth: Option<AethRepr>,
}

impl PacketBody {
    /// The body of a packet with transport headers `repr`, whose whole
    /// `TransportRepr` (when the BTH and an AETH do not say it all) sits in
    /// the side table at `ext()` (called only then).
    pub fn new(repr: &TransportRepr, ext: impl FnOnce() -> u32) -> PacketBody {
        let r = repr;
        let bare = r.deth.is_none()
            && r.reth.is_none()
            && r.atomic_eth.is_none()
            && r.atomic_ack_eth.is_none()
            && r.immdt.is_none()
            && r.ieth.is_none();
        PacketBody {
            bth: r.bth,
            ext: if bare { NO_EXT } else { ext() },
            aeth: if bare { r.aeth } else { None },
        }
    }

    /// The transport headers, given the side table (read only when the
    /// packet has headers beyond a BTH and an AETH).
    #[inline]
    pub fn repr(&self, exts: &[TransportRepr]) -> TransportRepr {
        match self.ext {
            NO_EXT => {
                let mut t = TransportRepr::new(self.bth);
                t.aeth = self.aeth;
                t
            }
            e => exts[e as usize],
        }
    }
}

/// [`PacketBody::ext`] of a packet with no extension headers.
pub const NO_EXT: u32 = u32::MAX;

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
    fn the_hot_part_is_small() {
        // One 32-byte-aligned half line each: never two lines.
        assert_eq!(std::mem::size_of::<Packet>(), 32);
        assert_eq!(std::mem::align_of::<Packet>(), 32);
        assert_eq!(std::mem::size_of::<PacketBody>(), 32);
        assert_eq!(std::mem::align_of::<PacketBody>(), 32);
    }

    /// An ACK's AETH rides in the body and the side table is not used; a
    /// packet with other extension headers keeps them all in the table;
    /// either way the endpoint reads back exactly what was sent.
    #[test]
    fn bodies_give_back_the_transport_headers() {
        let mut ack = TransportRepr::new(BthRepr {
            opcode: Opcode::RcAck,
            psn: roce_wire::Psn::new(77),
            ..Default::default()
        });
        ack.aeth = Some(AethRepr {
            syndrome: roce_wire::Syndrome::Ack { credits: 31 },
            msn: 0x00ab_cdef,
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
            opcode: Opcode::RcWriteMiddle,
            ..Default::default()
        });
        let mut exts = Vec::new();
        for (repr, in_table) in [
            (ack, false),
            (first, true),
            (atomic_ack, true),
            (middle, false),
        ] {
            let body = PacketBody::new(&repr, || {
                exts.push(repr);
                (exts.len() - 1) as u32
            });
            assert_eq!(body.ext != NO_EXT, in_table, "{:?}", repr.bth.opcode);
            assert_eq!(body.repr(&exts), repr);
        }
        assert_eq!(exts.len(), 2);
    }

    #[test]
    fn int_hops_sit_inside_cache_lines() {
        assert_eq!(std::mem::size_of::<IntHop>(), 32);
        assert_eq!(std::mem::align_of::<IntRec>(), 64);
        assert_eq!(std::mem::size_of::<IntRec>(), 32 * MAX_INT_HOPS);
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
}
