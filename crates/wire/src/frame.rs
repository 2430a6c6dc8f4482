//! Whole RoCEv2 frames: Ethernet → IP → UDP/4791 → BTH → extension headers →
//! payload → pad → ICRC, built from Reprs and parsed back, plus PFC frames.

use crate::error::{Error, Result};
use crate::eth::{
    ETHERTYPE_IPV4, ETHERTYPE_IPV6, ETHERTYPE_MAC_CONTROL, EthernetFrame, EthernetRepr,
};
use crate::icrc;
use crate::ipv4::{
    IPV4_HEADER_LEN, Ipv4Packet, Ipv4Repr, PROTO_UDP, fold_checksum, ones_complement_sum,
};
use crate::ipv6::{IPV6_HEADER_LEN, Ipv6Packet, Ipv6Repr};
use crate::pfc::PfcRepr;
use crate::transport::{ICRC_LEN, TransportPacket, TransportRepr};
use crate::udp::{ROCEV2_PORT, UDP_HEADER_LEN, UdpPacket, UdpRepr};

/// The IP layer of a RoCEv2 frame.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IpRepr {
    V4(Ipv4Repr),
    V6(Ipv6Repr),
}

impl IpRepr {
    pub const fn header_len(&self) -> usize {
        match self {
            IpRepr::V4(_) => IPV4_HEADER_LEN,
            IpRepr::V6(_) => IPV6_HEADER_LEN,
        }
    }
    pub const fn ecn(&self) -> u8 {
        match self {
            IpRepr::V4(r) => r.ecn,
            IpRepr::V6(r) => r.ecn,
        }
    }
    pub const fn dscp(&self) -> u8 {
        match self {
            IpRepr::V4(r) => r.dscp,
            IpRepr::V6(r) => r.dscp,
        }
    }
    fn set_payload_len(&mut self, n: usize) {
        match self {
            IpRepr::V4(r) => r.payload_len = n,
            IpRepr::V6(r) => r.payload_len = n,
        }
    }
    const fn ethertype(&self) -> u16 {
        match self {
            IpRepr::V4(_) => ETHERTYPE_IPV4,
            IpRepr::V6(_) => ETHERTYPE_IPV6,
        }
    }
}

/// Everything needed to build one RoCEv2 frame except the payload bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FrameRepr {
    pub eth: EthernetRepr,
    /// IP header; its payload length and the IPv4 protocol are filled in on emit.
    pub ip: IpRepr,
    /// UDP source port (the destination is always 4791).
    pub udp_src_port: u16,
    pub transport: TransportRepr,
}

impl FrameRepr {
    /// Total frame length for `payload_len` data bytes.
    pub fn buffer_len(&self, payload_len: usize) -> usize {
        self.eth.buffer_len()
            + self.ip.header_len()
            + UDP_HEADER_LEN
            + self.transport.buffer_len(payload_len)
    }

    /// Builds the frame into a new vector: every length, PadCnt, the IPv4
    /// header checksum, the IPv6 UDP checksum and the ICRC are computed here.
    /// The payload is gathered from `payload` (several slices, as an SGE list).
    pub fn emit_vec(&self, payload: &[&[u8]]) -> Result<Vec<u8>> {
        let plen: usize = payload.iter().map(|p| p.len()).sum();
        let mut out = vec![0u8; self.buffer_len(plen)];
        self.emit(payload, &mut out)?;
        Ok(out)
    }

    /// Builds the frame into `out`, which must be exactly [`buffer_len`](Self::buffer_len) long.
    pub fn emit(&self, payload: &[&[u8]], out: &mut [u8]) -> Result<()> {
        let plen: usize = payload.iter().map(|p| p.len()).sum();
        let total = self.buffer_len(plen);
        if out.len() != total {
            return Err(Error::BufferTooSmall {
                need: total,
                have: out.len(),
            });
        }
        let mut eth = self.eth;
        eth.ethertype = self.ip.ethertype();
        eth.emit(out)?;
        let ip_at = eth.buffer_len();
        let udp_at = ip_at + self.ip.header_len();
        let ib_at = udp_at + UDP_HEADER_LEN;
        let udp_len = total - udp_at;
        let mut ip = self.ip;
        ip.set_payload_len(udp_len);
        match &mut ip {
            IpRepr::V4(r) => {
                r.protocol = PROTO_UDP;
                r.emit(&mut out[ip_at..])?;
            }
            IpRepr::V6(r) => {
                r.next_header = PROTO_UDP;
                r.emit(&mut out[ip_at..])?;
            }
        }
        let udp = UdpRepr {
            src_port: self.udp_src_port,
            dst_port: ROCEV2_PORT,
            checksum: 0,
        };
        udp.emit(&mut out[udp_at..], udp_len - UDP_HEADER_LEN)?;
        let hlen = self.transport.emit_headers(&mut out[ib_at..], plen)?;
        let mut at = ib_at + hlen;
        for p in payload {
            out[at..at + p.len()].copy_from_slice(p);
            at += p.len();
        }
        let icrc_at = total - ICRC_LEN;
        out[at..icrc_at].fill(0);
        let crc = icrc::compute(&out[ip_at..udp_at], &out[udp_at..icrc_at]);
        out[icrc_at..].copy_from_slice(&crc.to_le_bytes());
        if let IpRepr::V6(r) = &ip {
            // RFC 8200 8.1: UDP over IPv6 must carry a checksum. It is masked
            // out of the ICRC, so it can be filled in last.
            let c = udp6_checksum(r, &out[udp_at..]);
            out[udp_at + 6..udp_at + 8].copy_from_slice(&c.to_be_bytes());
        }
        Ok(())
    }
}

/// UDP checksum over the IPv6 pseudo-header (RFC 8200 8.1); 0 is sent as 0xffff.
pub fn udp6_checksum(ip: &Ipv6Repr, udp: &[u8]) -> u16 {
    let mut sum = ones_complement_sum(0, &ip.src.octets());
    sum = ones_complement_sum(sum, &ip.dst.octets());
    sum += udp.len() as u32;
    sum += u32::from(PROTO_UDP);
    sum = ones_complement_sum(sum, &udp[..6]);
    sum = ones_complement_sum(sum, &udp[8..]);
    match fold_checksum(sum) {
        0 => 0xffff,
        c => c,
    }
}

/// A parsed RoCEv2 frame borrowed from its buffer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RoceFrame<'a> {
    pub eth: EthernetRepr,
    pub ip: IpRepr,
    pub udp: UdpRepr,
    pub transport: TransportRepr,
    pub payload: &'a [u8],
    /// ICRC as on the wire.
    pub icrc_wire: u32,
    /// ICRC computed over the received bytes.
    pub icrc_computed: u32,
    /// IPv4 header checksum verified (always true for IPv6).
    pub ip_checksum_ok: bool,
}

impl RoceFrame<'_> {
    pub fn icrc_ok(&self) -> bool {
        self.icrc_wire == self.icrc_computed
    }
}

/// What an Ethernet frame turned out to be.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[allow(clippy::large_enum_variant)] // parsed on the stack, never stored in bulk
pub enum Frame<'a> {
    Roce(RoceFrame<'a>),
    Pfc { eth: EthernetRepr, pfc: PfcRepr },
}

/// Parses an Ethernet frame (no FCS) as RoCEv2 or PFC. Any frame that is
/// neither, or is malformed, gets a typed error. An ICRC mismatch is not an
/// error here: it is reported in [`RoceFrame::icrc_ok`] so tools can show it.
pub fn parse_frame(buf: &[u8]) -> Result<Frame<'_>> {
    parse_frame_ports(buf, &[])
}

/// [`parse_frame`], also taking UDP datagrams to or from any of `also` as
/// RoCEv2: Wireshark's "Decode As" (which matches a UDP port on either
/// side). A stack that found 4791 taken runs on another port; each of its
/// datagrams carries that port as source or destination, so naming it is
/// enough to decode both directions.
pub fn parse_frame_ports<'a>(buf: &'a [u8], also: &[u16]) -> Result<Frame<'a>> {
    let ef = EthernetFrame::new_checked(buf)?;
    let eth = EthernetRepr::parse(&ef);
    let ip_bytes = &buf[ef.header_len()..];
    let (ip, ip_hdr, udp_bytes, ip_checksum_ok) = match eth.ethertype {
        ETHERTYPE_IPV4 => {
            let p = Ipv4Packet::new_checked(ip_bytes)?;
            let r = Ipv4Repr::parse(&p);
            if r.protocol != PROTO_UDP {
                return Err(Error::NotUdp(r.protocol));
            }
            let ok = p.checksum_ok();
            let hl = p.header_len();
            let tl = usize::from(p.total_len());
            (IpRepr::V4(r), &ip_bytes[..hl], &ip_bytes[hl..tl], ok)
        }
        ETHERTYPE_IPV6 => {
            let p = Ipv6Packet::new_checked(ip_bytes)?;
            let r = Ipv6Repr::parse(&p);
            if r.next_header != PROTO_UDP {
                return Err(Error::NotUdp(r.next_header));
            }
            let end = IPV6_HEADER_LEN + usize::from(p.payload_len());
            (
                IpRepr::V6(r),
                &ip_bytes[..IPV6_HEADER_LEN],
                &ip_bytes[IPV6_HEADER_LEN..end],
                true,
            )
        }
        ETHERTYPE_MAC_CONTROL => {
            let pfc = PfcRepr::parse(ip_bytes)?;
            return Ok(Frame::Pfc { eth, pfc });
        }
        other => return Err(Error::UnsupportedEtherType(other)),
    };
    let up = UdpPacket::new_checked(udp_bytes)?;
    let udp = UdpRepr::parse(&up);
    if udp.dst_port != ROCEV2_PORT
        && !also
            .iter()
            .any(|p| *p == udp.dst_port || *p == udp.src_port)
    {
        return Err(Error::WrongUdpPort(udp.dst_port));
    }
    let udp_len = usize::from(up.len());
    let TransportPacket {
        repr,
        payload,
        icrc,
    } = TransportRepr::parse(&udp_bytes[UDP_HEADER_LEN..udp_len])?;
    let computed = icrc::compute(ip_hdr, &udp_bytes[..udp_len - ICRC_LEN]);
    Ok(Frame::Roce(RoceFrame {
        eth,
        ip,
        udp,
        transport: repr,
        payload,
        icrc_wire: icrc,
        icrc_computed: computed,
        ip_checksum_ok,
    }))
}
