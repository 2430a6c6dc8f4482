//! The InfiniBand transport part of a RoCEv2 packet: BTH, the extension
//! headers its opcode calls for, payload, pad and ICRC — everything inside the
//! UDP datagram. This is what the RNIC consumes and produces.

use crate::bth::{BTH_LEN, BthPacket, BthRepr};
use crate::error::{Error, Result, need};
use crate::ext::{
    AethRepr, AtomicAckEthRepr, AtomicEthRepr, DethRepr, RethRepr, emit_u32, parse_u32,
};
use crate::opcode::{Headers, Opcode};

/// Length of the trailing ICRC.
pub const ICRC_LEN: usize = 4;

/// BTH plus extension headers. Which `Option`s are `Some` is dictated by
/// `bth.opcode`'s layout; [`TransportRepr::emit_headers`] refuses a mismatch.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct TransportRepr {
    pub bth: BthRepr,
    pub deth: Option<DethRepr>,
    pub reth: Option<RethRepr>,
    pub atomic_eth: Option<AtomicEthRepr>,
    pub aeth: Option<AethRepr>,
    pub atomic_ack_eth: Option<AtomicAckEthRepr>,
    pub immdt: Option<u32>,
    pub ieth: Option<u32>,
}

/// A parsed UDP payload borrowed from its buffer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TransportPacket<'a> {
    pub repr: TransportRepr,
    /// Message data carried by this packet (pad removed).
    pub payload: &'a [u8],
    /// The ICRC as on the wire (as a little-endian u32).
    pub icrc: u32,
}

impl TransportRepr {
    /// A repr with `bth` and no extension headers.
    pub fn new(bth: BthRepr) -> Self {
        TransportRepr {
            bth,
            ..Default::default()
        }
    }

    /// The extension headers present in this repr.
    pub fn headers(&self) -> Headers {
        let mut h = Headers::EMPTY;
        let mut add = |present: bool, which: Headers| {
            if present {
                h = h.with(which);
            }
        };
        add(self.deth.is_some(), Headers::DETH);
        add(self.reth.is_some(), Headers::RETH);
        add(self.atomic_eth.is_some(), Headers::ATOMIC_ETH);
        add(self.aeth.is_some(), Headers::AETH);
        add(self.atomic_ack_eth.is_some(), Headers::ATOMIC_ACK_ETH);
        add(self.immdt.is_some(), Headers::IMMDT);
        add(self.ieth.is_some(), Headers::IETH);
        if self.bth.opcode == Opcode::Cnp {
            h = h.with(Headers::CNP_PAD);
        }
        h
    }

    /// Bytes of BTH plus extension headers.
    pub fn header_len(&self) -> usize {
        // The sum [`Headers::len`] gives for `self.headers()`, without
        // building the set: this runs once per packet in the simulator.
        let n = |present: bool, len: usize| usize::from(present) * len;
        BTH_LEN
            + n(self.deth.is_some(), 8)
            + n(self.reth.is_some(), 16)
            + n(self.atomic_eth.is_some(), 28)
            + n(self.aeth.is_some(), 4)
            + n(self.atomic_ack_eth.is_some(), 8)
            + n(self.immdt.is_some(), 4)
            + n(self.ieth.is_some(), 4)
            + n(self.bth.opcode == Opcode::Cnp, 16)
    }

    /// Pad bytes needed after `payload_len` bytes to reach a 4-byte boundary.
    pub const fn pad_for(payload_len: usize) -> u8 {
        ((4 - (payload_len % 4)) % 4) as u8
    }

    /// Whole UDP payload length for `payload_len` data bytes (headers, data, pad, ICRC).
    pub fn buffer_len(&self, payload_len: usize) -> usize {
        self.header_len() + payload_len + usize::from(Self::pad_for(payload_len)) + ICRC_LEN
    }

    /// Parses a UDP payload. Strict about everything the layout fixes:
    /// unknown opcodes, TVer other than 0, payload on an opcode that has
    /// none, and a PadCnt larger than the payload are errors. The ICRC is
    /// returned, not checked: checking it needs the IP header.
    pub fn parse(buf: &[u8]) -> Result<TransportPacket<'_>> {
        let bth = BthRepr::parse(&BthPacket::new_checked(buf)?);
        if bth.tver != 0 {
            return Err(Error::BadTver(bth.tver));
        }
        let layout = bth
            .opcode
            .layout()
            .ok_or(Error::UnknownOpcode(bth.opcode.to_u8()))?;
        let hdrs = layout.headers;
        let hlen = BTH_LEN + hdrs.len();
        need(layout.name, buf, hlen + ICRC_LEN)?;
        let mut repr = TransportRepr::new(bth);
        let mut at = BTH_LEN;
        if hdrs.contains(Headers::DETH) {
            repr.deth = Some(DethRepr::parse(&buf[at..])?);
            at += DethRepr::LEN;
        }
        if hdrs.contains(Headers::RETH) {
            repr.reth = Some(RethRepr::parse(&buf[at..])?);
            at += RethRepr::LEN;
        }
        if hdrs.contains(Headers::ATOMIC_ETH) {
            repr.atomic_eth = Some(AtomicEthRepr::parse(&buf[at..])?);
            at += AtomicEthRepr::LEN;
        }
        if hdrs.contains(Headers::AETH) {
            repr.aeth = Some(AethRepr::parse(&buf[at..])?);
            at += AethRepr::LEN;
        }
        if hdrs.contains(Headers::ATOMIC_ACK_ETH) {
            repr.atomic_ack_eth = Some(AtomicAckEthRepr::parse(&buf[at..])?);
            at += AtomicAckEthRepr::LEN;
        }
        if hdrs.contains(Headers::IMMDT) {
            repr.immdt = Some(parse_u32("ImmDt", &buf[at..])?);
            at += 4;
        }
        if hdrs.contains(Headers::IETH) {
            repr.ieth = Some(parse_u32("IETH", &buf[at..])?);
            at += 4;
        }
        if hdrs.contains(Headers::CNP_PAD) {
            at += 16;
        }
        let end = buf.len() - ICRC_LEN;
        let body = &buf[at..end];
        let pad = usize::from(bth.pad_count);
        if pad > body.len() {
            return Err(Error::PadTooLarge {
                pad: bth.pad_count,
                payload: body.len(),
            });
        }
        let payload = &body[..body.len() - pad];
        if !layout.payload && !body.is_empty() {
            return Err(Error::UnexpectedPayload {
                opcode: layout.name,
                len: body.len(),
            });
        }
        let mut icrc = [0u8; 4];
        icrc.copy_from_slice(&buf[end..]);
        Ok(TransportPacket {
            repr,
            payload,
            icrc: u32::from_le_bytes(icrc),
        })
    }

    /// Writes BTH and extension headers at the start of `b`, with PadCnt
    /// set for `payload_len`. Returns the header length. Fails when the
    /// headers present do not match the opcode's layout.
    pub fn emit_headers(&self, b: &mut [u8], payload_len: usize) -> Result<usize> {
        let layout = self
            .bth
            .opcode
            .layout()
            .ok_or(Error::UnknownOpcode(self.bth.opcode.to_u8()))?;
        if layout.headers != self.headers() {
            return Err(Error::LayoutMismatch(layout.name));
        }
        if !layout.payload && payload_len > 0 {
            return Err(Error::UnexpectedPayload {
                opcode: layout.name,
                len: payload_len,
            });
        }
        let hlen = self.header_len();
        if b.len() < hlen {
            return Err(Error::BufferTooSmall {
                need: hlen,
                have: b.len(),
            });
        }
        let mut bth = self.bth;
        bth.pad_count = Self::pad_for(payload_len);
        bth.emit(&mut BthPacket::new_unchecked(&mut b[..BTH_LEN]))?;
        let mut at = BTH_LEN;
        if let Some(d) = &self.deth {
            d.emit(&mut b[at..])?;
            at += DethRepr::LEN;
        }
        if let Some(r) = &self.reth {
            r.emit(&mut b[at..])?;
            at += RethRepr::LEN;
        }
        if let Some(a) = &self.atomic_eth {
            a.emit(&mut b[at..])?;
            at += AtomicEthRepr::LEN;
        }
        if let Some(a) = &self.aeth {
            a.emit(&mut b[at..])?;
            at += AethRepr::LEN;
        }
        if let Some(a) = &self.atomic_ack_eth {
            a.emit(&mut b[at..])?;
            at += AtomicAckEthRepr::LEN;
        }
        if let Some(v) = self.immdt {
            emit_u32(v, &mut b[at..])?;
            at += 4;
        }
        if let Some(v) = self.ieth {
            emit_u32(v, &mut b[at..])?;
            at += 4;
        }
        if layout.headers.contains(Headers::CNP_PAD) {
            b[at..at + 16].fill(0);
            at += 16;
        }
        Ok(at)
    }
}
