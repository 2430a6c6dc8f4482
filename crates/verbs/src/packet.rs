//! RoCEv2 datagrams as a kernel UDP socket carries them.
//!
//! The kernel writes the IP and UDP headers, so the engine only builds the
//! UDP payload (BTH, extension headers, payload, pad, ICRC). The ICRC still
//! covers the IP and UDP headers, so the engine reconstructs the headers the
//! kernel will emit: an unconnected socket with DF set sends IP ID 0, the
//! source port is the socket's port (not the RNIC's per-QP `udp_sport`), and
//! TOS/TTL/checksum are masked by the ICRC anyway. On receive the same
//! reconstruction (ID 0) checks the sender's ICRC; a peer whose stack uses
//! another IP ID would fail it — only a raw-socket path could read that ID.
//!
//! The ICRC is computed here in a streaming fashion over the pieces (headers,
//! payload, tail), so the payload is never copied into a contiguous buffer;
//! a unit test holds it equal to `roce_wire::icrc::compute`.

use roce_rnic::{Payload, Transmit};
use roce_wire::{BTH_LEN, EthernetRepr, ICRC_LEN, Ipv4Repr, Mac, TransportPacket, TransportRepr};
use std::net::{Ipv4Addr, SocketAddrV4};

/// IPv4 header (no options) plus UDP header.
pub const IP_UDP_LEN: usize = 20 + 8;
/// Largest BTH plus extension headers any opcode carries (RETH+ImmDt, AtomicETH, CNP pad…).
pub const MAX_HEAD: usize = 64;

/// One datagram ready for `sendmsg`: three gather pieces.
#[derive(Debug, Clone)]
pub struct OutDatagram {
    pub dst: SocketAddrV4,
    /// The IP TOS byte: DSCP << 2 | ECN.
    pub tos: u8,
    pub head: [u8; MAX_HEAD],
    pub head_len: usize,
    pub payload: Vec<u8>,
    /// Pad then ICRC.
    pub tail: [u8; 8],
    pub tail_len: usize,
}

impl OutDatagram {
    /// Bytes of UDP payload.
    pub fn len(&self) -> usize {
        self.head_len + self.payload.len() + self.tail_len
    }
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
    /// An RC ACK or NAK: no payload, nothing waits on its order.
    pub fn is_ack(&self) -> bool {
        self.head_len > 0 && self.head[0] == roce_wire::Opcode::RcAck.to_u8()
    }
    /// Flips one bit at byte `at` (mod length) of the UDP payload: the fault injector's corruption.
    pub fn flip_bit(&mut self, at: usize, bit: u8) {
        let n = self.len();
        if n == 0 {
            return;
        }
        let mut i = at % n;
        let mask = 1u8 << (bit % 8);
        if i < self.head_len {
            self.head[i] ^= mask;
            return;
        }
        i -= self.head_len;
        if i < self.payload.len() {
            self.payload[i] ^= mask;
            return;
        }
        i -= self.payload.len();
        self.tail[i] ^= mask;
    }
    /// The UDP payload as one vector (for captures).
    pub fn to_vec(&self) -> Vec<u8> {
        let mut v = Vec::with_capacity(self.len());
        v.extend_from_slice(&self.head[..self.head_len]);
        v.extend_from_slice(&self.payload);
        v.extend_from_slice(&self.tail[..self.tail_len]);
        v
    }
}

/// Why a packet could not be built.
#[derive(Debug, thiserror::Error)]
pub enum BuildError {
    #[error("the RNIC produced an unencodable packet: {0}")]
    Encode(#[from] roce_wire::Error),
    #[error("destination {0} is not IPv4")]
    NotIpv4(std::net::SocketAddr),
    #[error("virtual payloads cannot go on a real wire")]
    VirtualPayload,
}

/// The IPv4 header the kernel emits for one of our datagrams (ID 0, DF, TTL 64).
pub fn ipv4_header(src: Ipv4Addr, dst: Ipv4Addr, tos: u8, udp_payload_len: usize) -> [u8; 20] {
    let mut b = [0u8; 20];
    let r = Ipv4Repr {
        src,
        dst,
        dscp: tos >> 2,
        ecn: tos & 3,
        ident: 0,
        dont_frag: true,
        ttl: 64,
        protocol: 17,
        payload_len: 8 + udp_payload_len,
    };
    // 20 bytes and a bounded length: emit cannot fail for a datagram the
    // socket accepted; a zeroed header only makes the ICRC check fail.
    let _ = r.emit(&mut b);
    b
}

/// The UDP header (checksum 0, as RoCEv2 over IPv4 sends it).
pub fn udp_header(sport: u16, dport: u16, udp_payload_len: usize) -> [u8; 8] {
    let mut b = [0u8; 8];
    b[0..2].copy_from_slice(&sport.to_be_bytes());
    b[2..4].copy_from_slice(&dport.to_be_bytes());
    b[4..6].copy_from_slice(&((8 + udp_payload_len) as u16).to_be_bytes());
    b
}

/// The RoCEv2 ICRC over gathered pieces: `ip` (20-byte IPv4 header), `udp`
/// (8 bytes), then the UDP payload without its ICRC, given as slices whose
/// first one starts with the BTH. Masks exactly what `roce_wire::icrc` masks.
pub fn icrc_gather(ip: &[u8; 20], udp: &[u8; 8], pieces: &[&[u8]]) -> u32 {
    let mut h = crc32fast::Hasher::new();
    h.update(&[0xff; 8]);
    let mut ipm = *ip;
    ipm[1] = 0xff;
    ipm[8] = 0xff;
    ipm[10] = 0xff;
    ipm[11] = 0xff;
    h.update(&ipm);
    let mut udpm = *udp;
    udpm[6] = 0xff;
    udpm[7] = 0xff;
    h.update(&udpm);
    // BTH byte 4 (FECN/BECN/Resv) is masked; it may straddle no piece
    // boundary in practice (the first piece holds the whole BTH), but the
    // loop below handles any split.
    let mut off = 0usize;
    for p in pieces {
        if off <= 4 && off + p.len() > 4 {
            let i = 4 - off;
            h.update(&p[..i]);
            h.update(&[0xff]);
            h.update(&p[i + 1..]);
        } else {
            h.update(p);
        }
        off += p.len();
    }
    h.finalize()
}

/// Builds the datagram for `t`, sent from `src` (the socket's address).
pub fn build(t: Transmit, src: SocketAddrV4) -> Result<OutDatagram, BuildError> {
    let std::net::SocketAddr::V4(dst) = t.dst else {
        return Err(BuildError::NotIpv4(t.dst));
    };
    let payload = match t.payload {
        Payload::Bytes(b) => b,
        Payload::Virtual(0) => Vec::new(),
        Payload::Virtual(_) => return Err(BuildError::VirtualPayload),
    };
    let mut head = [0u8; MAX_HEAD];
    let head_len = t.repr.emit_headers(&mut head, payload.len())?;
    let pad = usize::from(TransportRepr::pad_for(payload.len()));
    let udp_len = head_len + payload.len() + pad + ICRC_LEN;
    let tos = (t.dscp.min(63) << 2) | if t.ecn_capable { 2 } else { 0 };
    let ip = ipv4_header(*src.ip(), *dst.ip(), tos, udp_len);
    let udp = udp_header(src.port(), dst.port(), udp_len);
    let zeros = [0u8; 3];
    let crc = icrc_gather(&ip, &udp, &[&head[..head_len], &payload, &zeros[..pad]]);
    let mut tail = [0u8; 8];
    tail[pad..pad + 4].copy_from_slice(&crc.to_le_bytes());
    Ok(OutDatagram {
        dst,
        tos,
        head,
        head_len,
        payload,
        tail,
        tail_len: pad + ICRC_LEN,
    })
}

/// Why a received datagram was dropped.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RxError {
    #[error("malformed: {0}")]
    Malformed(roce_wire::Error),
    #[error("ICRC mismatch: wire {wire:#010x}, computed {computed:#010x}")]
    Icrc { wire: u32, computed: u32 },
}

/// Parses a received UDP payload from `src` to `local` and checks its ICRC.
pub fn parse(
    buf: &[u8],
    src: SocketAddrV4,
    local: SocketAddrV4,
    tos: u8,
) -> Result<TransportPacket<'_>, RxError> {
    let pkt = TransportRepr::parse(buf).map_err(RxError::Malformed)?;
    // parse() checked the length covers BTH and ICRC.
    let body = &buf[..buf.len() - ICRC_LEN];
    let ip = ipv4_header(*src.ip(), *local.ip(), tos, buf.len());
    let udp = udp_header(src.port(), local.port(), buf.len());
    debug_assert!(body.len() >= BTH_LEN);
    let computed = icrc_gather(&ip, &udp, &[body]);
    if computed != pkt.icrc {
        return Err(RxError::Icrc {
            wire: pkt.icrc,
            computed,
        });
    }
    Ok(pkt)
}

/// A locally administered MAC derived from an IPv4 address, for captures.
pub fn mac_for(ip: Ipv4Addr) -> Mac {
    let o = ip.octets();
    Mac([0x02, 0x00, o[0], o[1], o[2], o[3]])
}

/// A full Ethernet frame around a UDP payload, as a capture shows it. The
/// IP header is the one the kernel emits (or, received, the one the ICRC
/// was checked against, with the TOS actually seen).
pub fn ethernet_frame(
    src: SocketAddrV4,
    dst: SocketAddrV4,
    tos: u8,
    udp_payload: &[u8],
) -> Vec<u8> {
    let mut out = Vec::with_capacity(14 + IP_UDP_LEN + udp_payload.len());
    let eth = EthernetRepr {
        dst: mac_for(*dst.ip()),
        src: mac_for(*src.ip()),
        vlan: None,
        ethertype: 0x0800,
    };
    let mut e = [0u8; 14];
    let _ = eth.emit(&mut e);
    out.extend_from_slice(&e);
    out.extend_from_slice(&ipv4_header(*src.ip(), *dst.ip(), tos, udp_payload.len()));
    out.extend_from_slice(&udp_header(src.port(), dst.port(), udp_payload.len()));
    out.extend_from_slice(udp_payload);
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use roce_wire::{BthRepr, Opcode, Psn, RethRepr};

    fn write_first(len: usize) -> Transmit {
        let mut repr = TransportRepr::new(BthRepr {
            opcode: Opcode::RcWriteOnly,
            dest_qp: 0x12,
            psn: Psn::new(7),
            pkey: 0xffff,
            ..Default::default()
        });
        repr.reth = Some(RethRepr {
            va: 0x1000,
            rkey: 0x55,
            dma_len: len as u32,
        });
        Transmit {
            dst: "127.0.0.2:4791".parse().unwrap(),
            udp_sport: 0xc011,
            dscp: 26,
            ecn_capable: true,
            src_qpn: 0x11,
            repr,
            payload: Payload::Bytes((0..len).map(|i| i as u8).collect()),
        }
    }

    #[test]
    fn gathered_icrc_matches_the_wire_crate_and_parse_accepts_it() {
        let src: SocketAddrV4 = "127.0.0.1:4791".parse().unwrap();
        for len in [0usize, 1, 3, 4, 1023] {
            let d = build(write_first(len), src).unwrap();
            let bytes = d.to_vec();
            let ip = ipv4_header(*src.ip(), *d.dst.ip(), d.tos, bytes.len());
            let udp = udp_header(src.port(), d.dst.port(), bytes.len());
            let mut udp_onwards = udp.to_vec();
            udp_onwards.extend_from_slice(&bytes[..bytes.len() - 4]);
            let want = roce_wire::icrc::compute(&ip, &udp_onwards);
            assert_eq!(bytes[bytes.len() - 4..], want.to_le_bytes());
            // Received with CE set: TOS is masked, still valid.
            let p = parse(&bytes, src, d.dst, d.tos | 3).unwrap();
            assert_eq!(p.payload.len(), len);
            // With 4791 on both ends, the capture frame decodes with a good ICRC.
            let f = ethernet_frame(src, d.dst, d.tos, &bytes);
            let roce_wire::Frame::Roce(rf) = roce_wire::parse_frame(&f).unwrap() else {
                panic!("not RoCE")
            };
            assert!(rf.icrc_ok() && rf.ip_checksum_ok);
        }
    }

    #[test]
    fn any_flipped_bit_outside_masked_fields_is_caught() {
        let src: SocketAddrV4 = "127.0.0.1:5000".parse().unwrap();
        let d = build(write_first(64), src).unwrap();
        for at in 0..d.len() {
            if at == 4 {
                continue; // BTH byte 4 is masked (FECN/BECN)
            }
            let mut c = d.clone();
            c.flip_bit(at, (at % 8) as u8);
            let bytes = c.to_vec();
            assert!(parse(&bytes, src, d.dst, d.tos).is_err(), "byte {at}");
        }
        // The wrong source port (another stack's) fails the ICRC too.
        let bytes = d.to_vec();
        let other: SocketAddrV4 = "127.0.0.1:5001".parse().unwrap();
        assert!(matches!(
            parse(&bytes, other, d.dst, d.tos),
            Err(RxError::Icrc { .. })
        ));
        assert!(matches!(
            parse(&bytes[..10], src, d.dst, d.tos),
            Err(RxError::Malformed(_))
        ));
    }
}
