//! A packet in flight through the fabric. The transport part is the RNIC's
//! own `TransportRepr`; the simulator adds what the network needs (who,
//! which priority, how big on the wire, ECN bits, INT) and moves only a
//! length for the payload.

use roce_rnic::IntHop;
use roce_wire::{AethRepr, BthRepr, Opcode, Syndrome, TransportRepr};

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
/// per packet; here it is the body (which says where and how many) and
/// the hop's own line. Aligned to cache lines so a hop never straddles two.
#[derive(Debug, Clone, Copy, Default)]
#[repr(C, align(64))]
pub struct IntRec {
    pub hops: [IntHop; MAX_INT_HOPS],
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
}

/// The parts of a frame only its endpoints read: the base transport header
/// inline, and the extension headers, which only the first and last
/// packets of a message and ACKs carry, in a side table of the simulator.
/// A fabric holds millions of packets under congestion (5.4 M on a k=32
/// fat tree at 30 % load), and a whole `TransportRepr` per packet made
/// bodies 144 bytes each, most of the run's memory; this is 32.
///
/// Aligned to 32 bytes like [`Packet`], so a body is one cache line.
#[derive(Debug, Clone)]
#[repr(align(32))]
pub struct PacketBody {
    pub bth: BthRepr,
    /// What follows the BTH: [`NO_EXT`] when the BTH is all there is; an
    /// AETH packed in place (bit [`EXT_AETH`] set, see [`Ext`]) when that
    /// is the only extension header, as on every ACK; otherwise the index
    /// of the packet's whole `TransportRepr` in the side table.
    pub ext: u32,
    /// The packet's INT record, or [`IntRef::NONE`].
    pub int: IntRef,
}

/// [`PacketBody::ext`] of a packet with no extension headers.
pub const NO_EXT: u32 = u32::MAX;

/// The bit of [`PacketBody::ext`] that marks an AETH packed in place:
/// below it, the AETH's wire form (IBA 9.3.5: a syndrome byte, whose top
/// bit is reserved and 0, then the 24-bit MSN). Side-table indexes stay
/// below it (2³¹ entries of 136 bytes would be 292 GB).
///
/// Every ACK carries an AETH and nothing else past its BTH. Kept in the
/// side table, an ACK's arrival copied a 136-byte `TransportRepr` out of
/// a line that had long left the cache: a miss per ACK, for 4 bytes.
pub const EXT_AETH: u32 = 1 << 31;

/// A packet's extension headers as [`PacketBody::ext`] holds them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ext {
    None,
    Aeth(AethRepr),
    /// Index into the simulator's side table of whole `TransportRepr`s.
    Table(u32),
}

impl Ext {
    /// How `repr`'s extension headers are kept: none, an AETH packed in
    /// place (only when it is the sole extension header and packs and
    /// unpacks to exactly itself), or the side table (`Table(0)`, the
    /// caller allocates the place).
    pub fn of(repr: &TransportRepr) -> Ext {
        let r = repr;
        let others = r.deth.is_some()
            || r.reth.is_some()
            || r.atomic_eth.is_some()
            || r.atomic_ack_eth.is_some()
            || r.immdt.is_some()
            || r.ieth.is_some();
        match r.aeth {
            None if !others => Ext::None,
            Some(a) if !others && Self::packed(a).is_some() => Ext::Aeth(a),
            _ => Ext::Table(0),
        }
    }

    /// `a` packed in place, if it fits exactly.
    fn packed(a: AethRepr) -> Option<u32> {
        let syn = a.syndrome.to_u8();
        let v = EXT_AETH | u32::from(syn) << 24 | a.msn;
        (syn < 0x80 && a.msn <= 0xff_ffff && v != NO_EXT && Syndrome::from_u8(syn) == a.syndrome)
            .then_some(v)
    }

    /// The [`PacketBody::ext`] value (`Table(i)` needs `i < EXT_AETH`).
    pub fn encode(self) -> u32 {
        match self {
            Ext::None => NO_EXT,
            Ext::Aeth(a) => Self::packed(a).expect("Ext::of checked that it packs"),
            Ext::Table(i) => {
                assert!(i < EXT_AETH, "extension side table full");
                i
            }
        }
    }

    pub fn decode(v: u32) -> Ext {
        if v == NO_EXT {
            Ext::None
        } else if v & EXT_AETH != 0 {
            Ext::Aeth(AethRepr {
                syndrome: Syndrome::from_u8((v >> 24) as u8 & 0x7f),
                msn: v & 0xff_ffff,
            })
        } else {
            Ext::Table(v)
        }
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
    fn the_hot_part_is_small() {
        // One 32-byte-aligned half line each: never two lines.
        assert_eq!(std::mem::size_of::<Packet>(), 32);
        assert_eq!(std::mem::align_of::<Packet>(), 32);
        assert_eq!(std::mem::size_of::<PacketBody>(), 32);
        assert_eq!(std::mem::align_of::<PacketBody>(), 32);
    }

    #[test]
    fn int_hops_sit_inside_cache_lines() {
        assert_eq!(std::mem::size_of::<IntHop>(), 32);
        assert_eq!(std::mem::align_of::<IntRec>(), 64);
        assert_eq!(std::mem::size_of::<IntRec>(), 32 * MAX_INT_HOPS);
    }

    #[test]
    fn an_aeth_alone_packs_in_place_and_comes_back_whole() {
        use roce_wire::NakCode;
        let ack = |syndrome, msn| {
            let mut t = TransportRepr::new(BthRepr {
                opcode: Opcode::RcAck,
                ..Default::default()
            });
            t.aeth = Some(AethRepr { syndrome, msn });
            t
        };
        for (syn, msn) in [
            (Syndrome::Ack { credits: 31 }, 0),
            (Syndrome::Ack { credits: 0 }, 0xff_ffff),
            (Syndrome::RnrNak { timer: 14 }, 77),
            (Syndrome::Nak(NakCode::PsnSequenceError), 5),
            (Syndrome::Nak(NakCode::RemoteAccessError), 0x12_3456),
        ] {
            let t = ack(syn, msn);
            let e = Ext::of(&t);
            assert_eq!(e, Ext::Aeth(t.aeth.unwrap()));
            let v = e.encode();
            assert_ne!(v, NO_EXT);
            assert_eq!(Ext::decode(v), e);
        }
        // What does not pack exactly goes to the side table: an MSN past
        // 24 bits, a syndrome with its reserved top bit, the one value
        // that would read as "no extension", and an AETH beside another
        // extension header.
        assert_eq!(
            Ext::of(&ack(Syndrome::Ack { credits: 1 }, 1 << 24)),
            Ext::Table(0)
        );
        assert_eq!(Ext::of(&ack(Syndrome::Reserved(0xc0), 1)), Ext::Table(0));
        let all_ones = Syndrome::from_u8(0x7f);
        assert_eq!(Ext::of(&ack(all_ones, 0xff_ffff)), Ext::Table(0));
        let mut t = ack(Syndrome::Ack { credits: 31 }, 1);
        t.immdt = Some(9);
        assert_eq!(Ext::of(&t), Ext::Table(0));
        // A bare BTH has nothing.
        assert_eq!(Ext::of(&TransportRepr::new(t.bth)), Ext::None);
        assert_eq!(Ext::decode(Ext::Table(12).encode()), Ext::Table(12));
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
