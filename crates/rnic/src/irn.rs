//! IRN loss recovery (Mittal et al., "Revisiting Network Support for RDMA",
//! SIGCOMM 2018) as a per-QP alternative to IBA go-back-N.
//!
//! What changes against go-back-N (paper §3):
//! - the responder keeps out-of-order request packets instead of dropping
//!   them and reports what it holds with SACK-style NAKs (below); WRITE
//!   packets are placed in memory on arrival at offsets their PSN gives
//!   (§3.3, §4.2), so only their headers wait for the gap to close;
//! - the requester remembers which PSNs the responder holds and retransmits
//!   only the ones missing below the highest it has heard of, once per
//!   recovery episode; the episode ends when the cumulative ACK passes what
//!   had been sent when it began (§3.1);
//! - two retransmission timeouts: RTO_low when at most N packets are in
//!   flight (a tail loss no NAK will reveal), RTO_high otherwise (§3.1);
//!   in flight means sent and neither acknowledged nor reported held, so a
//!   resend lost behind a BDP of held packets is recovered after RTO_low;
//! - BDP-FC: at most a bandwidth-delay product of packets in flight (§3.2),
//!   which also bounds what the responder must hold. READ responses count:
//!   a READ's responses take one PSN each, so a READ longer than the room
//!   under the cap is asked for in segments, each an ordinary READ request
//!   (its own PSN, RETH address and length) for at most that room, the
//!   next once responses make room. Without this, one 1 MB READ had its
//!   ~1,000 responses in flight at once whatever the cap. The responder
//!   answers each segment as its own READ (FIRST…LAST), holds a READ
//!   credit per unanswered segment, and finds a re-requested range by the
//!   segment it falls in, so a re-request never spans two segments.
//!
//! # The SACK NAK on the wire
//!
//! The paper's NACK (§3.1) carries the cumulative acknowledgement and the
//! PSN of the packet that triggered it, one NACK per out-of-order arrival;
//! §4.2 lists the extra header state RoCE lacks for it. Sent that way on
//! real sockets, a 1 % loss rate made nearly every data packet a NAK (1.36 M
//! NAKs for 1.50 M packets at 1 % loss, with a window of up to 1,024
//! packets most arrivals sit behind some hole), and the NAK path became
//! the binding stage. (With the scheme below, a 3 s run at 1 % loss sent
//! 17,971 NAKs for 938,662 data packets, about two per packet lost, and
//! the RNIC logic fell to under 200 ns per packet on either side.)
//! So a NAK here reports a *run* of held PSNs, a SACK
//! block as in TCP (RFC 2018), and is sent only when what the requester
//! needs to know changes — the hole set — or when a held packet asks for
//! an acknowledgement. Vendors' selective-repeat designs differ in the
//! same direction: Mellanox's (US 10,430,374) NAKs the missing packet and
//! resends only it; AMD's (US 2024/0311333) sends one "new hole" NAK per
//! hole but still acknowledges every packet received after it, which this
//! design coalesces as ACKs are:
//!
//! - a packet that opens a new hole: first, if the run below it grew since
//!   it was last reported, that run (so nothing held is left unreported
//!   below a higher block), then a block of the one packet — which is
//!   exactly the paper's NACK (cumulative ACK, triggering PSN);
//! - a packet that extends the highest run: nothing, unless it asks for an
//!   acknowledgement (BTH AckReq, every `ack_req_every` packets), then the
//!   run — held packets are acknowledged as often as in-order ones;
//! - a packet that fills part of a hole above the first, or a copy of one
//!   already held: the run it belongs to;
//! - the first hole filled with holes left above it: a NAK instead of the
//!   ACK, with the new cumulative PSN and the run above the new first hole.
//!
//! The packet is a valid RoCEv2 Acknowledge (opcode 0x11) with the AETH
//! syndrome "NAK, PSN sequence error" (IBA 9.7.5.2.4); its BTH PSN is the
//! first missing PSN, which acknowledges everything before it exactly as
//! IBA defines. The block rides in the AETH's 24-bit MSN field, which a
//! requester uses only to retire messages on ACKs (IBA 9.7.5.1.2) and which
//! a go-back-N requester never reads from a PSN-sequence-error NAK: bits
//! 23..12 are the block's first PSN minus the cumulative PSN (1..4095),
//! bits 11..0 its length minus one. Both ends of an IRN QP agree on the
//! mode out of band (as they must for the paper's NACK too); Wireshark
//! decodes the packet as an ordinary NAK whose MSN is a number.
//! A block more than 4,095 PSNs above the cumulative PSN is not sent (the
//! requester learns of it when the cumulative PSN moves up); a longer run
//! is reported by its first 4,096 PSNs. Either way the requester knows of
//! fewer held packets than there are, which can only cost a duplicate.
//!
//! READ responses follow the same scheme with the roles swapped: the
//! requester places each response at its offset (known from the PSN) and
//! re-requests only the missing response ranges with a shortened READ.

use crate::types::Nanos;
use roce_wire::Psn;

/// How an RC QP recovers from lost packets.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum Recovery {
    /// IBA go-back-N: the responder drops out-of-order packets and NAKs the
    /// first gap; the requester resends everything from there.
    #[default]
    GoBackN,
    /// IRN: selective retransmission and BDP-based flow control.
    Irn,
}

impl Recovery {
    /// The names scenarios and command lines use.
    pub fn name(self) -> &'static str {
        match self {
            Recovery::GoBackN => "gbn",
            Recovery::Irn => "irn",
        }
    }
}

impl std::str::FromStr for Recovery {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "gbn" | "go-back-n" => Ok(Recovery::GoBackN),
            "irn" => Ok(Recovery::Irn),
            other => Err(format!(
                "unknown loss recovery `{other}` (expected gbn or irn)"
            )),
        }
    }
}

/// IRN's knobs (paper §3.1–3.2; defaults are its 40 Gb/s settings).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct IrnConfig {
    /// BDP-FC: most packets (PSNs) a requester keeps in flight.
    pub bdp_pkts: u32,
    /// Timeout while at most `rto_low_pkts` packets are in flight.
    pub rto_low_ns: Nanos,
    /// Timeout otherwise.
    pub rto_high_ns: Nanos,
    /// N of the paper: the in-flight count that selects RTO_low.
    pub rto_low_pkts: u32,
}

impl Default for IrnConfig {
    fn default() -> Self {
        IrnConfig {
            bdp_pkts: 128,
            rto_low_ns: 100_000,
            rto_high_ns: 320_000,
            rto_low_pkts: 3,
        }
    }
}

/// One requester recovery episode.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Episode {
    /// Next PSN to consider for retransmission.
    pub next: Psn,
    /// Retransmit PSNs before this one (the highest the responder reported holding).
    pub end: Psn,
    /// The episode ends once everything up to this PSN is acknowledged.
    pub until: Psn,
    /// After resending one PSN found lost again, carry on from here, so the
    /// resends already under way behind it are not sent twice.
    pub resume: Option<Psn>,
}

/// A request packet the responder holds until the gap before it fills.
#[derive(Debug, Clone)]
pub(crate) struct Held {
    pub src: std::net::SocketAddr,
    pub repr: roce_wire::TransportRepr,
    pub data: HeldData,
}

#[derive(Debug, Clone)]
pub(crate) enum HeldData {
    Bytes(Vec<u8>),
    Virtual(u32),
    /// Already placed at its offset in the message (this many bytes): only
    /// the header waits, for the in-order bookkeeping (MSN, completions, ACKs).
    Placed(u32),
}

impl Held {
    pub fn payload(&self) -> crate::memory::PayloadRef<'_> {
        match &self.data {
            HeldData::Bytes(b) => crate::memory::PayloadRef::Bytes(b),
            HeldData::Virtual(n) | HeldData::Placed(n) => crate::memory::PayloadRef::Virtual(*n),
        }
    }
}

/// A WRITE whose FIRST packet the responder holds past a gap, its RETH
/// checked: where the rest of the message's packets go (see `irn_place`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct HeldWrite {
    /// PSN of the FIRST packet.
    pub first: Psn,
    pub va: u64,
    /// The message's length (the RETH's DMA length).
    pub len: u64,
}

/// The responder's held packets, a slot per PSN from the expected PSN on.
/// Held PSNs lie within a BDP above it (BDP-FC), so a ring indexed by the
/// distance is O(1) per packet held or released; a `BTreeMap` of these
/// ~200-byte entries spent its time allocating nodes and shifting entries
/// within them (a fifth of the responder thread at 1 % loss on real sockets).
#[derive(Debug, Clone, Default)]
pub(crate) struct HoldBuffer {
    /// The PSN of slot 0.
    base: Psn,
    slots: std::collections::VecDeque<Option<Held>>,
    count: usize,
}

impl HoldBuffer {
    /// Heap bytes held (see [`crate::footprint`]).
    pub(crate) fn heap_bytes(&self) -> u64 {
        let data = self.slots.iter().flatten().map(|h| match &h.data {
            HeldData::Bytes(v) => crate::footprint::vec(v),
            _ => 0,
        });
        crate::footprint::deque(&self.slots) + data.sum::<u64>()
    }

    pub fn is_empty(&self) -> bool {
        self.count == 0
    }

    fn index(&self, psn: Psn) -> Option<usize> {
        (!psn.before(self.base)).then(|| psn.distance_from(self.base) as usize)
    }

    pub fn contains(&self, psn: Psn) -> bool {
        self.index(psn)
            .and_then(|i| self.slots.get(i))
            .is_some_and(Option::is_some)
    }

    /// Holds `h` at `psn`, which lies at or after `epsn` (the expected PSN).
    pub fn insert(&mut self, epsn: Psn, psn: Psn, h: Held) {
        if self.count == 0 {
            self.slots.clear();
            self.base = epsn;
        }
        let Some(i) = self.index(psn) else {
            return;
        };
        if self.slots.len() <= i {
            self.slots.resize_with(i + 1, || None);
        }
        if self.slots[i].replace(h).is_none() {
            self.count += 1;
        }
    }

    /// Takes the packet held at `psn`, if any.
    pub fn take(&mut self, psn: Psn) -> Option<Held> {
        let i = self.index(psn)?;
        let h = self.slots.get_mut(i)?.take()?;
        self.count -= 1;
        Some(h)
    }

    /// Drops everything held before `epsn` (what an executed READ's PSN
    /// range swallowed is stale) and makes `epsn` slot 0.
    pub fn advance(&mut self, epsn: Psn) {
        let n = self.index(epsn).unwrap_or(0).min(self.slots.len());
        for h in self.slots.drain(..n) {
            if h.is_some() {
                self.count -= 1;
            }
        }
        self.base = epsn;
        if self.count == 0 {
            self.slots.clear();
        }
    }

    pub fn clear(&mut self) {
        self.slots.clear();
        self.count = 0;
    }
}

/// Bits of the MSN field that hold a SACK block's offset from the cumulative PSN.
const SACK_LEN_BITS: u32 = 12;
/// Largest offset and largest length − 1 a SACK block can carry.
const SACK_FIELD_MAX: u32 = (1 << SACK_LEN_BITS) - 1;

/// Packs the SACK block `[first, last]` for a NAK whose cumulative PSN is
/// `cum` into the AETH MSN field (see the module doc). `None` when `first`
/// is not within 4,095 PSNs above `cum`; a longer run is cut to 4,096 PSNs.
pub(crate) fn encode_sack(cum: Psn, first: Psn, last: Psn) -> Option<u32> {
    if !first.after(cum) || last.before(first) {
        return None;
    }
    let off = first.distance_from(cum);
    if off > SACK_FIELD_MAX {
        return None;
    }
    let len = last.distance_from(first).min(SACK_FIELD_MAX);
    Some((off << SACK_LEN_BITS) | len)
}

/// The SACK block `[first, last]` a PSN-sequence-error NAK with cumulative
/// PSN `cum` and MSN `msn` reports held, if any (offset 0: none).
pub(crate) fn decode_sack(cum: Psn, msn: u32) -> Option<(Psn, Psn)> {
    let off = (msn >> SACK_LEN_BITS) & SACK_FIELD_MAX;
    if off == 0 {
        return None;
    }
    let first = cum.add(off);
    Some((first, first.add(msn & SACK_FIELD_MAX)))
}

/// The responder's highest run of held PSNs (what a new hole above it
/// would leave unreported) and how much of it the requester has been told.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct TopRun {
    pub first: Psn,
    pub last: Psn,
    /// The highest PSN of the run the last NAK reported.
    pub reported: Psn,
}

/// The requester's SACK scoreboard: which PSNs from the oldest
/// unacknowledged one on the responder reported holding. A bit per PSN
/// relative to a base that follows the cumulative ACK, so recording a
/// block, asking about a PSN and moving the base are O(1) per PSN and
/// never scan what is recorded (a `BTreeSet` pruned on every ACK was
/// O(window) per ACK).
#[derive(Debug, Clone, Default)]
pub(crate) struct Scoreboard {
    base: Psn,
    held: std::collections::VecDeque<bool>,
    /// How many of `held` are set: the packets that reached the responder
    /// and so are not in flight (RTO_low's count, §3.1), kept as bits are
    /// set and dropped so reading it never scans the window.
    count: u32,
}

impl Scoreboard {
    /// Heap bytes held (see [`crate::footprint`]).
    pub(crate) fn heap_bytes(&self) -> u64 {
        crate::footprint::deque(&self.held)
    }

    /// Forgets everything before `una`.
    pub fn advance(&mut self, una: Psn) {
        if self.held.is_empty() || !una.in_window(self.base, self.held.len() as u32) {
            self.clear();
            self.base = una;
            return;
        }
        let n = una.distance_from(self.base) as usize;
        let gone = self.held.drain(..n).filter(|h| *h).count() as u32;
        self.count -= gone;
        self.base = una;
    }

    /// Records `[first, last]` as held; `una` is the oldest unacknowledged
    /// PSN (what lies before it is dropped).
    pub fn insert(&mut self, una: Psn, first: Psn, last: Psn) {
        self.advance(una);
        let first = if first.before(una) { una } else { first };
        if last.before(first) {
            return;
        }
        let (a, b) = (
            first.distance_from(una) as usize,
            last.distance_from(una) as usize,
        );
        if self.held.len() <= b {
            self.held.resize(b + 1, false);
        }
        for h in self.held.range_mut(a..=b) {
            self.count += u32::from(!*h);
            *h = true;
        }
    }

    /// How many PSNs from the base on are reported held.
    pub fn held_count(&self) -> u32 {
        self.count
    }

    /// Whether `p` was reported held.
    pub fn contains(&self, p: Psn) -> bool {
        !p.before(self.base)
            && self
                .held
                .get(p.distance_from(self.base) as usize)
                .copied()
                .unwrap_or(false)
    }

    /// Forgets that `p` was held.
    pub fn remove(&mut self, p: Psn) {
        if !p.before(self.base)
            && let Some(h) = self.held.get_mut(p.distance_from(self.base) as usize)
        {
            self.count -= u32::from(*h);
            *h = false;
        }
    }

    /// Forgets everything.
    pub fn clear(&mut self) {
        self.held.clear();
        self.count = 0;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sack_block_round_trips_across_the_psn_wrap() {
        let cum = Psn::new(Psn::MASK - 2);
        let msn = encode_sack(cum, cum.add(5), cum.add(9)).expect("fits");
        assert_eq!(decode_sack(cum, msn), Some((cum.add(5), cum.add(9))));
        // The paper's NACK is the one-packet block.
        let msn = encode_sack(cum, cum.add(1), cum.add(1)).expect("fits");
        assert_eq!(decode_sack(cum, msn), Some((cum.add(1), cum.add(1))));
    }

    #[test]
    fn sack_block_limits() {
        let cum = Psn::new(100);
        assert_eq!(
            encode_sack(cum, cum, cum),
            None,
            "a block starts past the hole"
        );
        assert_eq!(encode_sack(cum, cum.add(4096), cum.add(4096)), None);
        let msn = encode_sack(cum, cum.add(4095), cum.add(10_000)).expect("cut");
        assert_eq!(
            decode_sack(cum, msn),
            Some((cum.add(4095), cum.add(4095 + 4095)))
        );
        assert_eq!(decode_sack(cum, 0), None, "offset 0 reports no block");
    }

    fn held(psn: Psn) -> Held {
        Held {
            src: "127.0.0.1:4791".parse().expect("address"),
            repr: roce_wire::TransportRepr::new(roce_wire::BthRepr {
                psn,
                ..Default::default()
            }),
            data: HeldData::Virtual(0),
        }
    }

    #[test]
    fn hold_buffer_holds_takes_and_drops_stale_packets_across_the_wrap() {
        let epsn = Psn::new(Psn::MASK - 1);
        let mut b = HoldBuffer::default();
        assert!(b.is_empty());
        b.insert(epsn, epsn.add(2), held(epsn.add(2)));
        b.insert(epsn, epsn.add(3), held(epsn.add(3)));
        b.insert(epsn, epsn.add(6), held(epsn.add(6)));
        assert!(b.contains(epsn.add(3)) && !b.contains(epsn.add(4)) && !b.contains(epsn));
        assert_eq!(
            b.take(epsn.add(2)).map(|h| h.repr.bth.psn),
            Some(epsn.add(2))
        );
        assert!(b.take(epsn.add(2)).is_none(), "taken once");
        // ePSN moves past 3 (a READ swallowed it): 3 is dropped, 6 stays.
        b.advance(epsn.add(5));
        assert!(!b.contains(epsn.add(3)) && b.contains(epsn.add(6)));
        assert!(b.take(epsn.add(6)).is_some());
        assert!(b.is_empty());
        b.insert(epsn.add(40), epsn.add(41), held(epsn.add(41)));
        assert!(b.contains(epsn.add(41)));
        b.clear();
        assert!(b.is_empty() && !b.contains(epsn.add(41)));
    }

    #[test]
    fn scoreboard_tracks_blocks_as_the_base_moves() {
        let una = Psn::new(Psn::MASK - 1);
        let mut s = Scoreboard::default();
        s.insert(una, una.add(2), una.add(4));
        assert!(!s.contains(una.add(1)));
        assert!(s.contains(una.add(2)) && s.contains(una.add(4)));
        assert!(!s.contains(una.add(5)));
        assert_eq!(s.held_count(), 3);
        s.insert(una, una.add(3), una.add(5));
        assert_eq!(s.held_count(), 4, "a PSN reported twice counts once");
        s.remove(una.add(3));
        s.remove(una.add(3));
        assert!(!s.contains(una.add(3)));
        assert_eq!(s.held_count(), 3);
        s.advance(una.add(3));
        assert!(!s.contains(una.add(2)), "before the base is forgotten");
        assert!(s.contains(una.add(4)));
        assert_eq!(s.held_count(), 2, "4 and 5");
        s.advance(una.add(100));
        assert!(!s.contains(una.add(4)));
        s.insert(una.add(100), una.add(90), una.add(101));
        assert!(s.contains(una.add(100)) && s.contains(una.add(101)));
        assert_eq!(
            s.held_count(),
            2,
            "what fell before the base is not counted"
        );
        s.clear();
        assert!(!s.contains(una.add(101)));
        assert_eq!(s.held_count(), 0);
    }
}
