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
//!
//! IPv6 is carried the same way: the ICRC covers the 40-byte IPv6 header
//! with traffic class, flow label and hop limit masked (IBA A17.3.3), and
//! there is no IP ID, so nothing below about IDs applies to it.
//!
//! UDP GSO changes one thing: the kernel gives the segments of one GSO send
//! the IP IDs 0, 1, 2, … (`inet_gso_segment` numbers them up from the ID
//! `ip_select_ident_segs` gave the whole send, 0 for an unconnected DF
//! socket), so segment `k` must carry the ICRC for ID `k`. The ICRC is
//! affine in the ID for a fixed length, so [`IdentDelta`] moves an ICRC from
//! one ID to another without touching the rest of the packet (a corrupted
//! packet stays corrupted).

use roce_rnic::{GATHER_MAX, Gather, Payload, RealMemory, Resolved, Transmit};
use roce_wire::{
    BTH_LEN, EthernetRepr, ICRC_LEN, Ipv4Repr, Ipv6Repr, Mac, TransportPacket, TransportRepr,
};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

/// IPv4 header (no options) plus UDP header.
pub const IP_UDP_LEN: usize = 20 + 8;
/// Largest BTH plus extension headers any opcode carries (RETH+ImmDt, AtomicETH, CNP pad…).
pub const MAX_HEAD: usize = 64;

/// A datagram's payload: bytes of its own, or a gather list of the RNIC's
/// registered memory read when the datagram is sent (zero-copy transmit).
#[derive(Debug, Clone)]
pub enum Body {
    Owned(Vec<u8>),
    Host(Gather),
}

/// One datagram ready for `sendmsg`: a header, the payload pieces, a tail.
#[derive(Debug, Clone)]
pub struct OutDatagram {
    pub dst: SocketAddr,
    /// The IP TOS byte (IPv6: traffic class): DSCP << 2 | ECN.
    pub tos: u8,
    pub head: [u8; MAX_HEAD],
    pub head_len: usize,
    pub body: Body,
    /// Pad then ICRC.
    pub tail: [u8; 8],
    pub tail_len: usize,
    /// The IP ID the ICRC was computed for (0 unless the datagram is segment
    /// `ident` of a GSO send).
    pub ident: u16,
    /// The ICRC in `tail` covers the bytes that will be sent. A
    /// [`Body::Host`] datagram is sealed (its ICRC computed over the
    /// memory as it is then) right before it goes, and unsealed again if it
    /// has to wait: memory may change while it waits, and the ICRC must be
    /// the one of the bytes the kernel copies.
    pub sealed: bool,
}

impl OutDatagram {
    /// Bytes of UDP payload.
    pub fn len(&self) -> usize {
        self.head_len + self.body_len() + self.tail_len
    }
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
    fn body_len(&self) -> usize {
        match &self.body {
            Body::Owned(v) => v.len(),
            Body::Host(g) => g.len(),
        }
    }
    /// An RC ACK or NAK: no payload, nothing waits on its order.
    pub fn is_ack(&self) -> bool {
        self.head_len > 0 && self.head[0] == roce_wire::Opcode::RcAck.to_u8()
    }
    /// Flips one bit at byte `at` (mod length) of the UDP payload: the
    /// fault injector's corruption. A [`Body::Host`] payload is left alone
    /// (it is the sender's memory): [`materialize`](Self::materialize) first.
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
        let body = self.body_len();
        if i < body {
            if let Body::Owned(v) = &mut self.body {
                v[i] ^= mask;
            }
            return;
        }
        i -= body;
        self.tail[i] ^= mask;
    }
    /// Moves the ICRC to the one for IP ID `ident` (see [`IdentDelta`]).
    pub fn set_ident(&mut self, ident: u16, deltas: &mut IdentDelta) {
        // IPv6 has no ID: every segment keeps the one ICRC.
        if ident == self.ident || self.tail_len < ICRC_LEN || self.dst.is_ipv6() {
            return;
        }
        let at = self.tail_len - ICRC_LEN;
        let mut crc = [0u8; 4];
        crc.copy_from_slice(&self.tail[at..self.tail_len]);
        let crc = u32::from_le_bytes(crc) ^ deltas.delta(self.len(), ident ^ self.ident);
        self.tail[at..self.tail_len].copy_from_slice(&crc.to_le_bytes());
        self.ident = ident;
    }
    /// The payload pieces as slices (a [`Body::Host`] one read from `mem`);
    /// `None` when its buffer is no longer allocated.
    pub fn body_slices<'a>(&'a self, mem: &'a RealMemory) -> Option<Resolved<'a>> {
        match &self.body {
            Body::Owned(v) => Some(Resolved::one(v)),
            Body::Host(g) => mem.resolve(g).ok(),
        }
    }
    /// Computes the ICRC (for IP ID 0) of a [`Body::Host`] datagram over
    /// its bytes as they are in `mem` now. False when its buffer is gone.
    /// The prefix state of its shape is taken from (or kept in) `prefixes`.
    pub fn seal(&mut self, src: SocketAddr, mem: &RealMemory, prefixes: &mut IcrcPrefixes) -> bool {
        if self.sealed {
            return true;
        }
        let Some(body) = self.body_slices(mem) else {
            return false;
        };
        let pad = self.tail_len - ICRC_LEN;
        let mut pieces: [&[u8]; GATHER_MAX + 2] = [&[]; GATHER_MAX + 2];
        pieces[0] = &self.head[..self.head_len];
        let mut n = 1;
        for b in body.iter() {
            pieces[n] = b;
            n += 1;
        }
        pieces[n] = &self.tail[..pad];
        let crc = prefixes.icrc(src, self.dst, &pieces[..n + 1]);
        self.tail[pad..pad + ICRC_LEN].copy_from_slice(&crc.to_le_bytes());
        self.ident = 0;
        self.sealed = true;
        true
    }
    /// Marks a [`Body::Host`] datagram that must wait as needing a new ICRC.
    pub fn unseal(&mut self) {
        if matches!(self.body, Body::Host(_)) {
            self.sealed = false;
        }
    }
    /// Copies a [`Body::Host`] payload out of `mem` into bytes of its own
    /// (for the fault injector, which corrupts and holds datagrams). False
    /// when its buffer is gone.
    pub fn materialize(
        &mut self,
        src: SocketAddr,
        mem: &RealMemory,
        prefixes: &mut IcrcPrefixes,
    ) -> bool {
        if !self.seal(src, mem, prefixes) {
            return false;
        }
        if let Body::Host(_) = &self.body {
            let Some(v) = self.body_slices(mem).map(|r| r.concat()) else {
                return false;
            };
            self.body = Body::Owned(v);
        }
        true
    }
    /// The UDP payload as one vector (for captures).
    pub fn to_vec(&self, mem: &RealMemory) -> Vec<u8> {
        let mut v = Vec::with_capacity(self.len());
        v.extend_from_slice(&self.head[..self.head_len]);
        if let Some(body) = self.body_slices(mem) {
            for b in body.iter() {
                v.extend_from_slice(b);
            }
        }
        v.extend_from_slice(&self.tail[..self.tail_len]);
        v
    }
}

/// Why a packet could not be built.
#[derive(Debug, thiserror::Error)]
pub enum BuildError {
    #[error("the RNIC produced an unencodable packet: {0}")]
    Encode(#[from] roce_wire::Error),
    #[error("destination {dst} and source {src} are of different IP families")]
    FamilyMismatch { src: SocketAddr, dst: SocketAddr },
    #[error("virtual payloads cannot go on a real wire")]
    VirtualPayload,
}

/// The IPv4 header the kernel emits for one of our datagrams (ID 0, DF, TTL 64).
pub fn ipv4_header(src: Ipv4Addr, dst: Ipv4Addr, tos: u8, udp_payload_len: usize) -> [u8; 20] {
    ipv4_header_id(src, dst, tos, udp_payload_len, 0)
}

/// The IPv4 header as the ICRC sees it: [`ipv4_header`] with TOS, TTL
/// and checksum set to ones, the fields the ICRC masks (IBA A17.3.3). The
/// ICRC of a datagram needs no checksum, so none is computed.
pub fn ipv4_header_masked(src: Ipv4Addr, dst: Ipv4Addr, udp_payload_len: usize) -> [u8; 20] {
    let total = (20 + 8 + udp_payload_len) as u16;
    let mut b = [0u8; 20];
    b[0] = 0x45;
    b[1] = 0xff;
    b[2..4].copy_from_slice(&total.to_be_bytes());
    b[6] = 0x40; // DF, ID 0
    b[8] = 0xff;
    b[9] = 17;
    b[10] = 0xff;
    b[11] = 0xff;
    b[12..16].copy_from_slice(&src.octets());
    b[16..20].copy_from_slice(&dst.octets());
    b
}

/// An IP header as the ICRC sees it: 20 bytes (IPv4) or 40 (IPv6).
#[derive(Debug, Clone, Copy)]
pub struct IpHead {
    b: [u8; 40],
    len: usize,
}

impl IpHead {
    pub fn bytes(&self) -> &[u8] {
        &self.b[..self.len]
    }
}

/// The IP header of a datagram of `udp_payload_len` bytes from `src` to
/// `dst` as the ICRC sees it (IPv4: [`ipv4_header_masked`]; IPv6:
/// [`ipv6_header`] with traffic class, flow label and hop limit set to
/// ones). Mixed families cannot be sent; they get the IPv6 form of both.
pub fn ip_header_masked(src: IpAddr, dst: IpAddr, udp_payload_len: usize) -> IpHead {
    let mut b = [0u8; 40];
    match (src, dst) {
        (IpAddr::V4(s), IpAddr::V4(d)) => {
            b[..20].copy_from_slice(&ipv4_header_masked(s, d, udp_payload_len));
            IpHead { b, len: 20 }
        }
        (s, d) => {
            let mut h = ipv6_header(v6(s), v6(d), 0, udp_payload_len);
            h[0] |= 0x0f;
            h[1..4].fill(0xff);
            h[7] = 0xff;
            b.copy_from_slice(&h);
            IpHead { b, len: 40 }
        }
    }
}

fn v6(ip: IpAddr) -> Ipv6Addr {
    match ip {
        IpAddr::V4(a) => a.to_ipv6_mapped(),
        IpAddr::V6(a) => a,
    }
}

/// The IPv6 header the kernel emits for one of our datagrams (flow label
/// 0 as the socket leaves it, hop limit 64).
pub fn ipv6_header(src: Ipv6Addr, dst: Ipv6Addr, tclass: u8, udp_payload_len: usize) -> [u8; 40] {
    let mut b = [0u8; 40];
    let r = Ipv6Repr {
        src,
        dst,
        dscp: tclass >> 2,
        ecn: tclass & 3,
        flow_label: 0,
        hop_limit: 64,
        next_header: 17,
        payload_len: 8 + udp_payload_len,
    };
    // 40 bytes and a bounded length: as for IPv4, emit cannot fail here.
    let _ = r.emit(&mut b);
    b
}

/// [`ipv4_header`] with IP ID `ident` (segment `ident` of a GSO send).
pub fn ipv4_header_id(
    src: Ipv4Addr,
    dst: Ipv4Addr,
    tos: u8,
    udp_payload_len: usize,
    ident: u16,
) -> [u8; 20] {
    let mut b = [0u8; 20];
    let r = Ipv4Repr {
        src,
        dst,
        dscp: tos >> 2,
        ecn: tos & 3,
        ident,
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

/// The RoCEv2 ICRC over gathered pieces: `ip` (the 20-byte IPv4 or 40-byte
/// IPv6 header), `udp` (8 bytes), then the UDP payload without its ICRC,
/// given as slices whose first one starts with the BTH. Masks exactly what
/// `roce_wire::icrc` masks.
pub fn icrc_gather(ip: &[u8], udp: &[u8; 8], pieces: &[&[u8]]) -> u32 {
    let ip_len = ip.len().min(40);
    let total = 4 + ip_len + 8 + pieces.iter().map(|p| p.len()).sum::<usize>();
    if total <= SMALL_RUN {
        return icrc_small(ip, udp, pieces);
    }
    icrc_from_prefix(prefix_state(ip, udp), pieces)
}

/// The largest ICRC input (from the fifth 0xff byte on) hashed in one run.
const SMALL_RUN: usize = 256;

/// [`icrc_gather`] for an ACK or a small request, whose whole ICRC input
/// fits in [`SMALL_RUN`] bytes.
fn icrc_small(ip: &[u8], udp: &[u8; 8], pieces: &[&[u8]]) -> u32 {
    // The ICRC is CRC-32 over eight 0xff bytes (standing in for the LRH),
    // the masked IP and UDP headers and the payload. CRC-32 starts from
    // all ones, and four 0xff bytes bring its register to zero; from zero,
    // leading zero bytes change nothing. So the input from the fifth 0xff
    // on, right-aligned in a zeroed run of at least 128 bytes (a multiple
    // of 16) and started from a zero register, gives the same CRC, and
    // crc32fast takes its carry-less-multiply path, which it reserves for
    // 128 bytes or more, instead of a table lookup per byte: three to four
    // times fewer instructions for an ACK or a small request.
    let ip_len = ip.len().min(40);
    let head = 4 + ip_len + 8;
    let total = head + pieces.iter().map(|p| p.len()).sum::<usize>();
    let mut run = [0u8; SMALL_RUN];
    let end = total.next_multiple_of(16).clamp(128, SMALL_RUN);
    let start = end - total.min(end);
    let b = &mut run[start..end];
    masked_headers(&mut b[..head], ip, udp);
    let mut n = head;
    for p in pieces {
        let take = p.len().min(b.len() - n);
        b[n..n + take].copy_from_slice(&p[..take]);
        n += take;
    }
    // BTH byte 4 (FECN, BECN, reserved) is masked.
    if n > head + 4 {
        b[head + 4] = 0xff;
    }
    // `new_with_initial(!0)`: crc32fast keeps the register inverted, so
    // this is the zero register.
    let mut h = crc32fast::Hasher::new_with_initial(!0);
    h.update(&run[..start + n]);
    h.finalize()
}

/// Writes, into `b` (`4 + ip.len() + 8` bytes), four 0xff bytes (the last
/// half of the LRH stand-in) and the IP and UDP headers with the fields
/// the ICRC masks set to ones (IBA A17.3.3).
fn masked_headers(b: &mut [u8], ip: &[u8], udp: &[u8; 8]) {
    let ip_len = ip.len().min(40);
    b[..4].fill(0xff);
    b[4..4 + ip_len].copy_from_slice(&ip[..ip_len]);
    b[4 + ip_len..4 + ip_len + 8].copy_from_slice(udp);
    if ip_len == 40 {
        // IPv6 traffic class, flow label and hop limit.
        b[4] |= 0x0f;
        b[5..8].fill(0xff);
        b[4 + 7] = 0xff;
    } else {
        // IPv4 TOS, TTL and header checksum.
        for i in [4 + 1, 4 + 8, 4 + 10, 4 + 11] {
            b[i] = 0xff;
        }
    }
    // The UDP checksum.
    b[4 + ip_len + 6] = 0xff;
    b[4 + ip_len + 7] = 0xff;
}

/// The CRC-32 state (crc32fast's, as `finalize` gives it) after the ICRC's
/// fixed prefix: eight 0xff bytes and the masked IP and UDP headers. It
/// depends only on the addresses, ports and length, so the engine keeps it
/// per datagram shape ([`IcrcPrefixes`]) and each packet's CRC covers
/// only its own UDP payload.
fn prefix_state(ip: &[u8], udp: &[u8; 8]) -> u32 {
    let ip_len = ip.len().min(40);
    let mut b = [0u8; 4 + 4 + 40 + 8];
    b[..4].fill(0xff);
    masked_headers(&mut b[4..4 + 4 + ip_len + 8], ip, udp);
    let mut h = crc32fast::Hasher::new();
    h.update(&b[..4 + 4 + ip_len + 8]);
    h.finalize()
}

/// The ICRC from the prefix state onwards over the UDP payload `pieces`
/// (BTH first, ICRC excluded), BTH byte 4 (FECN, BECN, reserved) masked.
/// The payload proper goes to crc32fast in one call straight from its own
/// memory: each call pays a fixed setup and reduction (on AVX-512, the
/// collapse of sixteen lanes), so one call over 4 KiB is far cheaper than
/// a copied run of headers and a call over the rest.
fn icrc_from_prefix(state: u32, pieces: &[&[u8]]) -> u32 {
    const MASKED: usize = 4;
    let mut h = crc32fast::Hasher::new_with_initial(state);
    let mut off = 0;
    for p in pieces {
        if off <= MASKED && MASKED < off + p.len() {
            let i = MASKED - off;
            h.update(&p[..i]);
            h.update(&[0xff]);
            h.update(&p[i + 1..]);
        } else if !p.is_empty() {
            h.update(p);
        }
        off += p.len();
    }
    h.finalize()
}

/// Prefix states (`prefix_state`) of the datagram shapes an engine sees:
/// a peer and a length, one per packet size of a message (a full packet,
/// the first with its RETH, the last). Found in one comparison when the
/// shape is the last one's, as along a message; a few kept in turn.
#[derive(Debug, Default, Clone)]
pub struct IcrcPrefixes {
    entries: Vec<(SocketAddr, SocketAddr, usize, u32)>,
    last: usize,
    next: usize,
}

/// Shapes [`IcrcPrefixes`] keeps.
const PREFIX_CACHE: usize = 16;

impl IcrcPrefixes {
    pub fn new() -> Self {
        Self::default()
    }

    /// The ICRC of a datagram of UDP payload `pieces` (ICRC excluded) from
    /// `src` to `dst`, with IP ID 0: [`icrc_gather`] over the headers the
    /// kernel emits, with the prefix state of the shape kept.
    pub fn icrc(&mut self, src: SocketAddr, dst: SocketAddr, pieces: &[&[u8]]) -> u32 {
        let udp_len = pieces.iter().map(|p| p.len()).sum::<usize>() + ICRC_LEN;
        let ip_len = if src.is_ipv4() && dst.is_ipv4() {
            20
        } else {
            40
        };
        if 4 + ip_len + 8 + udp_len - ICRC_LEN <= SMALL_RUN {
            let ip = ip_header_masked(src.ip(), dst.ip(), udp_len);
            let udp = udp_header(src.port(), dst.port(), udp_len);
            return icrc_small(ip.bytes(), &udp, pieces);
        }
        let hit =
            |e: &(SocketAddr, SocketAddr, usize, u32)| e.0 == src && e.1 == dst && e.2 == udp_len;
        let state = match self.entries.get(self.last) {
            Some(e) if hit(e) => e.3,
            _ => {
                let i = match self.entries.iter().position(hit) {
                    Some(i) => i,
                    None => {
                        let ip = ip_header_masked(src.ip(), dst.ip(), udp_len);
                        let udp = udp_header(src.port(), dst.port(), udp_len);
                        let e = (src, dst, udp_len, prefix_state(ip.bytes(), &udp));
                        if self.entries.len() < PREFIX_CACHE {
                            self.entries.push(e);
                            self.entries.len() - 1
                        } else {
                            let i = self.next;
                            self.entries[i] = e;
                            self.next = (self.next + 1) % PREFIX_CACHE;
                            i
                        }
                    }
                };
                self.last = i;
                self.entries[i].3
            }
        };
        icrc_from_prefix(state, pieces)
    }
}

/// Builds the datagram for `t`, sent from `src` (the socket's address).
pub fn build(t: Transmit, src: SocketAddr) -> Result<OutDatagram, BuildError> {
    let dst = t.dst;
    if dst.is_ipv4() != src.is_ipv4() {
        return Err(BuildError::FamilyMismatch { src, dst });
    }
    let body = match t.payload {
        Payload::Bytes(b) => Body::Owned(b),
        Payload::Host(g) => Body::Host(g),
        Payload::Virtual(0) => Body::Owned(Vec::new()),
        Payload::Virtual(_) => return Err(BuildError::VirtualPayload),
    };
    let mut head = [0u8; MAX_HEAD];
    let mut d = OutDatagram {
        dst,
        tos: (t.dscp.min(63) << 2) | if t.ecn_capable { 2 } else { 0 },
        head,
        head_len: 0,
        body,
        tail: [0u8; 8],
        tail_len: 0,
        ident: 0,
        sealed: false,
    };
    let body_len = d.body_len();
    d.head_len = t.repr.emit_headers(&mut head, body_len)?;
    d.head = head;
    d.tail_len = usize::from(TransportRepr::pad_for(body_len)) + ICRC_LEN;
    if let Body::Owned(v) = &d.body {
        // Bytes of its own: the ICRC can be computed once, now.
        let pad = d.tail_len - ICRC_LEN;
        let udp_len = d.len();
        let ip = ip_header_masked(src.ip(), dst.ip(), udp_len);
        let udp = udp_header(src.port(), dst.port(), udp_len);
        let crc = icrc_gather(
            ip.bytes(),
            &udp,
            &[&d.head[..d.head_len], v, &d.tail[..pad]],
        );
        d.tail[pad..pad + ICRC_LEN].copy_from_slice(&crc.to_le_bytes());
        d.sealed = true;
    }
    Ok(d)
}

/// Offset of the IP Identification field in the ICRC's input (after the
/// eight 0xff bytes of the pseudo-header, 4 bytes into the IPv4 header).
const ICRC_IDENT_AT: usize = 8 + 4;
/// Lengths whose tables [`IdentDelta`] keeps.
const DELTA_CACHE: usize = 16;
/// IDs whose deltas [`IdentDelta`] keeps ready per length: every segment
/// index a GSO send of the engine's (at most `sys::MAX_GSO_SEGMENTS`) or a
/// GRO buffer (the kernel's `UDP_MAX_SEGMENTS`, 128) can have, so the
/// per-packet case is one load.
const DELTA_DIRECT: usize = 128;

/// How the ICRC changes with the IP ID, per datagram length.
///
/// CRC-32 is affine: for inputs of equal length, `crc(a ^ b) = crc(a) ^
/// crc(b) ^ crc(0)`. The ICRC input of a datagram with ID `x` differs from
/// the one with ID 0 only in the two ID bytes, so `icrc(x) = icrc(0) ^
/// delta(x)`, where `delta` depends on the length alone and is linear in
/// `x`: sixteen values per length (one per ID bit), computed once per
/// length from zero buffers and cached, with the deltas of the small IDs a
/// GSO run uses (segment `k` gets ID `k`) expanded from them, because
/// every segment of a run but the first needs one.
#[derive(Debug, Default, Clone)]
pub struct IdentDelta {
    cache: Vec<DeltaTable>,
    next: usize,
    /// Index in `cache` of the length asked for last (runs share a length).
    last: usize,
}

#[derive(Debug, Clone)]
struct DeltaTable {
    len: usize,
    bits: [u32; 16],
    direct: Box<[u32; DELTA_DIRECT]>,
}

impl DeltaTable {
    fn new(len: usize) -> Self {
        let bits = IdentDelta::table(len);
        let mut direct = Box::new([0u32; DELTA_DIRECT]);
        for (x, d) in direct.iter_mut().enumerate() {
            *d = fold_bits(&bits, x as u16);
        }
        DeltaTable { len, bits, direct }
    }
}

/// The delta of ID `x`: the XOR of the deltas of its set bits (linearity).
fn fold_bits(bits: &[u32; 16], x: u16) -> u32 {
    (0..16)
        .filter(|b| x >> b & 1 == 1)
        .fold(0, |acc, b| acc ^ bits[b])
}

impl IdentDelta {
    pub fn new() -> Self {
        Self::default()
    }

    /// `icrc(ID = a) ^ icrc(ID = b)` for a datagram of `udp_payload_len`
    /// bytes (ICRC included), given `ident = a ^ b`.
    pub fn delta(&mut self, udp_payload_len: usize, ident: u16) -> u32 {
        if ident == 0 {
            return 0;
        }
        let i = match self.cache.get(self.last) {
            Some(t) if t.len == udp_payload_len => self.last,
            _ => match self.cache.iter().position(|t| t.len == udp_payload_len) {
                Some(i) => i,
                None => {
                    let t = DeltaTable::new(udp_payload_len);
                    if self.cache.len() < DELTA_CACHE {
                        self.cache.push(t);
                        self.cache.len() - 1
                    } else {
                        let i = self.next;
                        self.cache[i] = t;
                        self.next = (self.next + 1) % DELTA_CACHE;
                        i
                    }
                }
            },
        };
        self.last = i;
        let t = &self.cache[i];
        match t.direct.get(usize::from(ident)) {
            Some(&d) => d,
            None => fold_bits(&t.bits, ident),
        }
    }

    fn table(udp_payload_len: usize) -> [u32; 16] {
        // pseudo-header, IPv4 and UDP headers, then the UDP payload without its ICRC.
        let n = 8 + IP_UDP_LEN + udp_payload_len.saturating_sub(ICRC_LEN);
        let mut buf = vec![0u8; n.max(ICRC_IDENT_AT + 2)];
        let zero = crc32fast::hash(&buf);
        let mut t = [0u32; 16];
        for (b, v) in t.iter_mut().enumerate() {
            buf[ICRC_IDENT_AT..ICRC_IDENT_AT + 2].copy_from_slice(&(1u16 << b).to_be_bytes());
            *v = crc32fast::hash(&buf) ^ zero;
        }
        t
    }
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
/// (The TOS byte, where CE marks arrive, is masked by the ICRC and plays
/// no part.)
pub fn parse(
    buf: &[u8],
    src: SocketAddr,
    local: SocketAddr,
) -> Result<TransportPacket<'_>, RxError> {
    let mut none = IdentDelta::new();
    parse_segment(buf, src, local, 0, &mut none, &mut IcrcPrefixes::new()).map(|(p, _)| p)
}

/// [`parse`] for segment `k` of a GRO-coalesced receive: the ICRC may be the
/// one for IP ID `k` (a GSO sender's segment `k`, as the kernel numbers
/// them) or for ID 0 (a run of single datagrams from an unconnected DF
/// socket, which GRO on a NIC coalesces as a fixed-ID flow). For `k = 0`,
/// and so for every datagram that was not coalesced, ID 0 is the only
/// candidate: the check is exactly [`parse`]'s. Returns the ID that matched.
pub fn parse_segment<'a>(
    buf: &'a [u8],
    src: SocketAddr,
    local: SocketAddr,
    k: u16,
    deltas: &mut IdentDelta,
    prefixes: &mut IcrcPrefixes,
) -> Result<(TransportPacket<'a>, u16), RxError> {
    let pkt = TransportRepr::parse(buf).map_err(RxError::Malformed)?;
    // parse() checked the length covers BTH and ICRC.
    let body = &buf[..buf.len() - ICRC_LEN];
    debug_assert!(body.len() >= BTH_LEN);
    let computed = prefixes.icrc(src, local, &[body]);
    if computed == pkt.icrc {
        return Ok((pkt, 0));
    }
    if k != 0 && src.is_ipv4() && computed ^ deltas.delta(buf.len(), k) == pkt.icrc {
        return Ok((pkt, k));
    }
    Err(RxError::Icrc {
        wire: pkt.icrc,
        computed,
    })
}

/// A locally administered MAC derived from an IP address (an IPv6 one's
/// last four bytes), for captures.
pub fn mac_for(ip: IpAddr) -> Mac {
    let o = match ip {
        IpAddr::V4(a) => a.octets(),
        IpAddr::V6(a) => {
            let b = a.octets();
            [b[12], b[13], b[14], b[15]]
        }
    };
    Mac([0x02, 0x00, o[0], o[1], o[2], o[3]])
}

/// A full Ethernet frame around a UDP payload, as a capture shows it. The
/// IP header is the one the kernel emits (or, received, the one the ICRC
/// was checked against, with the TOS actually seen).
pub fn ethernet_frame(src: SocketAddr, dst: SocketAddr, tos: u8, udp_payload: &[u8]) -> Vec<u8> {
    ethernet_frame_id(src, dst, tos, udp_payload, 0)
}

/// [`ethernet_frame`] with IP ID `ident` (a GSO segment's).
pub fn ethernet_frame_id(
    src: SocketAddr,
    dst: SocketAddr,
    tos: u8,
    udp_payload: &[u8],
    ident: u16,
) -> Vec<u8> {
    let mut out = Vec::with_capacity(14 + 40 + 8 + udp_payload.len());
    let eth = EthernetRepr {
        dst: mac_for(dst.ip()),
        src: mac_for(src.ip()),
        vlan: None,
        ethertype: if src.is_ipv4() { 0x0800 } else { 0x86dd },
    };
    let mut e = [0u8; 14];
    let _ = eth.emit(&mut e);
    out.extend_from_slice(&e);
    match (src.ip(), dst.ip()) {
        (IpAddr::V4(s), IpAddr::V4(d)) => {
            out.extend_from_slice(&ipv4_header_id(s, d, tos, udp_payload.len(), ident));
        }
        (s, d) => out.extend_from_slice(&ipv6_header(v6(s), v6(d), tos, udp_payload.len())),
    }
    out.extend_from_slice(&udp_header(src.port(), dst.port(), udp_payload.len()));
    out.extend_from_slice(udp_payload);
    out
}

/// The datagrams the kernel cuts a captured UDP GSO frame into.
///
/// A capture on lo shows a GSO send whole, as one frame (IP ID `id`, the
/// whole run as its UDP payload). Cut into `seg`-byte pieces of UDP payload
/// (the last may be shorter), segment `k` gets IP ID `id + k`, its own IP
/// total length and header checksum, and its own UDP length
/// (`inet_gso_segment`, `__udp_gso_segment`); its UDP checksum is written 0
/// here (the ICRC masks it). `frame` is Ethernet, IPv4 without options, UDP.
/// `None` when the frame is not that or `seg` is 0.
pub fn gso_segments(frame: &[u8], seg: usize) -> Option<Vec<Vec<u8>>> {
    const L3: usize = 14;
    const L4: usize = L3 + 20;
    const DATA: usize = L4 + 8;
    if seg == 0 || frame.len() < DATA || frame[L3] != 0x45 || frame[L3 + 9] != 17 {
        return None;
    }
    let udp_len = usize::from(u16::from_be_bytes([frame[L4 + 4], frame[L4 + 5]]));
    if udp_len < 8 || DATA + udp_len - 8 > frame.len() {
        return None;
    }
    let payload = &frame[DATA..DATA + udp_len - 8];
    let id = u16::from_be_bytes([frame[L3 + 4], frame[L3 + 5]]);
    let mut out = Vec::new();
    for (k, chunk) in payload.chunks(seg).enumerate() {
        let mut f = frame[..DATA].to_vec();
        f.extend_from_slice(chunk);
        let ip = &mut f[L3..L4];
        ip[2..4].copy_from_slice(&((20 + 8 + chunk.len()) as u16).to_be_bytes());
        ip[4..6].copy_from_slice(&id.wrapping_add(k as u16).to_be_bytes());
        ip[10..12].copy_from_slice(&[0, 0]);
        let sum = ip
            .chunks(2)
            .map(|w| u32::from(u16::from_be_bytes([w[0], w[1]])))
            .sum::<u32>();
        let sum = (sum & 0xffff) + (sum >> 16);
        let sum = (sum & 0xffff) + (sum >> 16);
        ip[10..12].copy_from_slice(&(!(sum as u16)).to_be_bytes());
        let udp = &mut f[L4..DATA];
        udp[4..6].copy_from_slice(&((8 + chunk.len()) as u16).to_be_bytes());
        udp[6..8].copy_from_slice(&[0, 0]);
        out.push(f);
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use roce_wire::{BthRepr, Opcode, Psn, RethRepr};

    fn v4ip(a: SocketAddr) -> Ipv4Addr {
        match a.ip() {
            IpAddr::V4(v) => v,
            IpAddr::V6(_) => panic!("{a} is not IPv4"),
        }
    }

    /// RoCEv2 over IPv6: the gathered ICRC equals the wire crate's over
    /// the IPv6 header the kernel sends (traffic class, hop limit and flow
    /// label masked), the capture frame decodes with a good ICRC, and a
    /// changed traffic class (an ECN mark) does not spoil it.
    #[test]
    fn ipv6_icrc_matches_the_wire_crate_with_the_v6_masks() {
        let src: SocketAddr = "[fd00::1]:4791".parse().unwrap();
        let dst: SocketAddr = "[fd00::2]:4791".parse().unwrap();
        for len in [0usize, 5, 1024] {
            let mut t = write_first(len);
            t.dst = dst;
            let d = build(t, src).unwrap();
            assert_eq!(d.tos, 26 << 2 | 2);
            let bytes = d.to_vec(&RealMemory::new());
            let (IpAddr::V6(s6), IpAddr::V6(d6)) = (src.ip(), dst.ip()) else {
                unreachable!()
            };
            let udp = udp_header(src.port(), dst.port(), bytes.len());
            let mut udp_onwards = udp.to_vec();
            udp_onwards.extend_from_slice(&bytes[..bytes.len() - 4]);
            for tclass in [d.tos, d.tos | 3, 0] {
                let ip = ipv6_header(s6, d6, tclass, bytes.len());
                let want = roce_wire::icrc::compute(&ip, &udp_onwards);
                assert_eq!(
                    bytes[bytes.len() - 4..],
                    want.to_le_bytes(),
                    "tclass {tclass:#x}"
                );
            }
            let p = parse(&bytes, src, dst).unwrap();
            assert_eq!(p.payload.len(), len);
            // The other direction's addresses give another ICRC.
            assert!(parse(&bytes, dst, src).is_err());
            let f = ethernet_frame(src, dst, d.tos | 3, &bytes);
            let roce_wire::Frame::Roce(rf) = roce_wire::parse_frame(&f).unwrap() else {
                panic!("not RoCE")
            };
            assert!(rf.icrc_ok());
            assert!(matches!(rf.ip, roce_wire::IpRepr::V6(_)));
            assert_eq!(rf.ip.ecn(), 3);
        }
        // Mixed families cannot be built.
        let mut t = write_first(8);
        t.dst = "127.0.0.2:4791".parse().unwrap();
        assert!(matches!(
            build(t, src),
            Err(BuildError::FamilyMismatch { .. })
        ));
    }

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
        let src: SocketAddr = "127.0.0.1:4791".parse().unwrap();
        for len in [0usize, 1, 3, 4, 1023] {
            let d = build(write_first(len), src).unwrap();
            let bytes = d.to_vec(&RealMemory::new());
            let ip = ipv4_header(v4ip(src), v4ip(d.dst), d.tos, bytes.len());
            let udp = udp_header(src.port(), d.dst.port(), bytes.len());
            let mut udp_onwards = udp.to_vec();
            udp_onwards.extend_from_slice(&bytes[..bytes.len() - 4]);
            let want = roce_wire::icrc::compute(&ip, &udp_onwards);
            assert_eq!(bytes[bytes.len() - 4..], want.to_le_bytes());
            // The ICRC masks the TOS byte: a CE mark on the way cannot spoil it.
            let p = parse(&bytes, src, d.dst).unwrap();
            assert_eq!(p.payload.len(), len);
            // With 4791 on both ends, the capture frame decodes with a good ICRC.
            let f = ethernet_frame(src, d.dst, d.tos, &bytes);
            let roce_wire::Frame::Roce(rf) = roce_wire::parse_frame(&f).unwrap() else {
                panic!("not RoCE")
            };
            assert!(rf.icrc_ok() && rf.ip_checksum_ok);
        }
    }

    /// However the UDP payload is cut into pieces (inside the BTH, at the
    /// masked byte, across the end of the first CRC run), the gathered
    /// ICRC is the wire crate's.
    #[test]
    fn gathered_icrc_is_the_same_for_every_split() {
        let (a, b) = (Ipv4Addr::new(10, 0, 0, 1), Ipv4Addr::new(10, 0, 0, 2));
        for len in [12usize, 13, 40, 219, 220, 221, 300, 4200] {
            let body: Vec<u8> = (0..len).map(|i| (i * 7 + 3) as u8).collect();
            let udp = udp_header(0xc000, 4791, len + ICRC_LEN);
            let ip = ipv4_header(a, b, 0x6a, len + ICRC_LEN);
            let mut udp_onwards = udp.to_vec();
            udp_onwards.extend_from_slice(&body);
            let want = roce_wire::icrc::compute(&ip, &udp_onwards);
            let mut cuts: Vec<Vec<usize>> = vec![vec![]];
            for c in [1usize, 3, 4, 5, 12, 200, 220, 221, 1000] {
                if c < len {
                    cuts.push(vec![c]);
                }
            }
            cuts.push((1..len).step_by(3).collect());
            for cut in cuts {
                let mut pieces: Vec<&[u8]> = Vec::new();
                let mut at = 0;
                for &c in &cut {
                    pieces.push(&body[at..c]);
                    at = c;
                }
                pieces.push(&body[at..]);
                assert_eq!(
                    icrc_gather(&ip, &udp, &pieces),
                    want,
                    "len {len} cut {cut:?}"
                );
            }
        }
    }

    /// Zero-copy: the ICRC is computed over the registered buffer when the
    /// datagram is sealed, and again after it had to wait, so it is always
    /// the ICRC of the bytes the kernel copies.
    #[test]
    fn a_zero_copy_datagram_is_sealed_over_memory_as_it_is_when_sent() {
        let src: SocketAddr = "127.0.0.1:4791".parse().unwrap();
        let mut mem = RealMemory::zero_copy();
        let a = mem.alloc(4096);
        mem.set(a, &[0x33; 4096]).unwrap();
        for len in [1usize, 3, 1024, 4096] {
            let mut p = roce_rnic::Memory::empty_payload(&mem);
            roce_rnic::Memory::read_into(&mem, a, len, &mut p).unwrap();
            let mut t = write_first(len);
            t.payload = p;
            let mut d = build(t, src).unwrap();
            assert!(matches!(d.body, Body::Host(_)) && !d.sealed);
            let check = |d: &OutDatagram, mem: &RealMemory, fill: u8| {
                let bytes = d.to_vec(mem);
                let p = parse(&bytes, src, d.dst).unwrap();
                assert!(p.payload.iter().all(|&b| b == fill));
            };
            assert!(d.seal(src, &mem, &mut IcrcPrefixes::new()));
            check(&d, &mem, 0x33);
            // Memory changes while the datagram waits: unsealed, resealed.
            d.unseal();
            mem.set(a, &[0x44; 4096]).unwrap();
            assert!(d.seal(src, &mem, &mut IcrcPrefixes::new()));
            check(&d, &mem, 0x44);
            // Materialized for the fault injector: bytes of its own now.
            assert!(d.materialize(src, &mem, &mut IcrcPrefixes::new()));
            mem.set(a, &[0x33; 4096]).unwrap();
            check(&d, &RealMemory::new(), 0x44);
        }
        // A buffer freed under the datagram: it cannot be sealed.
        let mut p = roce_rnic::Memory::empty_payload(&mem);
        roce_rnic::Memory::read_into(&mem, a, 8, &mut p).unwrap();
        let mut t = write_first(8);
        t.payload = p;
        let mut d = build(t, src).unwrap();
        assert!(mem.free(a));
        assert!(!d.seal(src, &mem, &mut IcrcPrefixes::new()));
        assert!(!d.materialize(src, &mem, &mut IcrcPrefixes::new()));
    }

    /// The kept prefix states give the ICRC computed afresh: for both
    /// families, on both sides of the small-run limit, with the masked
    /// BTH byte at the start of a piece, inside one, and split from the
    /// rest, for shapes (peers and lengths) that alternate and outnumber
    /// what is kept.
    #[test]
    fn kept_prefix_states_give_the_icrc_computed_afresh() {
        let mut prefixes = IcrcPrefixes::new();
        let peers: [(SocketAddr, SocketAddr); 3] = [
            (
                "127.0.0.1:4791".parse().unwrap(),
                "127.0.0.2:4791".parse().unwrap(),
            ),
            (
                "127.0.0.2:4791".parse().unwrap(),
                "127.0.0.1:50000".parse().unwrap(),
            ),
            (
                "[fd00::1]:4791".parse().unwrap(),
                "[fd00::2]:4791".parse().unwrap(),
            ),
        ];
        let lens = (0..PREFIX_CACHE + 2)
            .map(|i| 200 + 229 * i)
            .chain([12, 219, 220, 4108, 4124]);
        for round in 0..2 {
            for len in lens.clone() {
                for (src, dst) in peers {
                    let body: Vec<u8> = (0..len).map(|i| (i * 13 + round) as u8).collect();
                    let udp_len = len + ICRC_LEN;
                    let ip = ip_header_masked(src.ip(), dst.ip(), udp_len);
                    let udp = udp_header(src.port(), dst.port(), udp_len);
                    let want = icrc_gather(ip.bytes(), &udp, &[&body]);
                    for cut in [0usize, 3, 4, 5, 12, len / 2] {
                        let cut = cut.min(len);
                        let (a, b) = body.split_at(cut);
                        assert_eq!(
                            prefixes.icrc(src, dst, &[a, b]),
                            want,
                            "round {round} len {len} cut {cut} {src}->{dst}"
                        );
                    }
                    // The BTH byte 4 is masked, byte 5 is not.
                    let mut c = body.clone();
                    c[4] ^= 0x40;
                    assert_eq!(prefixes.icrc(src, dst, &[&c]), want);
                    c[5] ^= 0x40;
                    assert_ne!(prefixes.icrc(src, dst, &[&c]), want);
                }
            }
        }
    }

    #[test]
    fn the_masked_header_is_the_kernel_header_with_the_icrc_masks() {
        let (a, b) = (Ipv4Addr::new(10, 1, 2, 3), Ipv4Addr::new(192, 168, 7, 9));
        for (tos, len) in [(0u8, 0usize), (0x6a, 4140), (0xff, 1)] {
            let mut h = ipv4_header(a, b, tos, len);
            h[1] = 0xff;
            h[8] = 0xff;
            h[10] = 0xff;
            h[11] = 0xff;
            assert_eq!(ipv4_header_masked(a, b, len), h);
        }
    }

    #[test]
    fn any_flipped_bit_outside_masked_fields_is_caught() {
        let src: SocketAddr = "127.0.0.1:5000".parse().unwrap();
        let d = build(write_first(64), src).unwrap();
        for at in 0..d.len() {
            if at == 4 {
                continue; // BTH byte 4 is masked (FECN/BECN)
            }
            let mut c = d.clone();
            c.flip_bit(at, (at % 8) as u8);
            let bytes = c.to_vec(&RealMemory::new());
            assert!(parse(&bytes, src, d.dst).is_err(), "byte {at}");
        }
        // The wrong source port (another stack's) fails the ICRC too.
        let bytes = d.to_vec(&RealMemory::new());
        let other: SocketAddr = "127.0.0.1:5001".parse().unwrap();
        assert!(matches!(
            parse(&bytes, other, d.dst),
            Err(RxError::Icrc { .. })
        ));
        assert!(matches!(
            parse(&bytes[..10], src, d.dst),
            Err(RxError::Malformed(_))
        ));
    }

    #[test]
    fn ident_delta_moves_the_icrc_to_another_ip_id() {
        let src: SocketAddr = "127.0.0.1:4791".parse().unwrap();
        let mut deltas = IdentDelta::new();
        for len in [0usize, 3, 1024, 4096] {
            let d0 = build(write_first(len), src).unwrap();
            for ident in [1u16, 2, 7, 63, 64, 127, 128, 129, 0x8000, 0xffff] {
                let mut d = d0.clone();
                d.set_ident(ident, &mut deltas);
                let bytes = d.to_vec(&RealMemory::new());
                let n = bytes.len();
                let ip = ipv4_header_id(v4ip(src), v4ip(d.dst), d.tos, n, ident);
                let udp = udp_header(src.port(), d.dst.port(), n);
                let want = icrc_gather(&ip, &udp, &[&bytes[..n - 4]]);
                assert_eq!(bytes[n - 4..], want.to_le_bytes(), "len {len} id {ident}");
                // The frame with that ID decodes with a good ICRC…
                let f = ethernet_frame_id(src, d.dst, d.tos, &bytes, ident);
                let roce_wire::Frame::Roce(rf) = roce_wire::parse_frame(&f).unwrap() else {
                    panic!("not RoCE")
                };
                assert!(rf.icrc_ok() && rf.ip_checksum_ok);
                // …and moving it back restores the original bytes.
                d.set_ident(0, &mut deltas);
                assert_eq!(d.to_vec(&RealMemory::new()), d0.to_vec(&RealMemory::new()));
            }
        }
    }

    #[test]
    fn ident_deltas_stay_right_when_lengths_alternate_and_the_cache_turns_over() {
        // More lengths than the cache keeps, visited twice in alternation:
        // every answer must be the one computed from the bit table afresh.
        let mut deltas = IdentDelta::new();
        for round in 0..2 {
            for len in (0..DELTA_CACHE + 3).map(|i| 40 + 97 * i) {
                for ident in [1u16, 3, 64, 127, 128, 300, 0xffff] {
                    let want = fold_bits(&IdentDelta::table(len), ident);
                    assert_eq!(
                        deltas.delta(len, ident),
                        want,
                        "round {round} len {len} id {ident}"
                    );
                    // The same length again (the shortcut) and another one.
                    assert_eq!(deltas.delta(len, ident), want);
                    assert_eq!(deltas.delta(len + 1, 0), 0);
                }
            }
        }
    }

    #[test]
    fn receive_candidates_are_id_0_alone_and_id_k_only_inside_a_gro_buffer() {
        let src: SocketAddr = "127.0.0.1:4791".parse().unwrap();
        let mut deltas = IdentDelta::new();
        let mut prefixes = IcrcPrefixes::new();
        let d0 = build(write_first(256), src).unwrap();
        let mut d5 = d0.clone();
        d5.set_ident(5, &mut deltas);
        let (b0, b5) = (d0.to_vec(&RealMemory::new()), d5.to_vec(&RealMemory::new()));
        // Alone (k = 0): only the ID-0 ICRC passes.
        assert_eq!(
            parse_segment(&b0, src, d0.dst, 0, &mut deltas, &mut prefixes)
                .unwrap()
                .1,
            0
        );
        assert!(parse(&b5, src, d0.dst).is_err());
        // Segment 5 of a GRO buffer: ID 5 or ID 0.
        assert_eq!(
            parse_segment(&b5, src, d0.dst, 5, &mut deltas, &mut prefixes)
                .unwrap()
                .1,
            5
        );
        assert_eq!(
            parse_segment(&b0, src, d0.dst, 5, &mut deltas, &mut prefixes)
                .unwrap()
                .1,
            0
        );
        assert!(parse_segment(&b5, src, d0.dst, 4, &mut deltas, &mut prefixes).is_err());
        // A flipped bit is caught for every candidate, before or after the ID moved.
        for at in (0..d0.len()).filter(|&a| a != 4) {
            let mut c = d0.clone();
            c.flip_bit(at, 3);
            c.set_ident(5, &mut deltas);
            let b = c.to_vec(&RealMemory::new());
            assert!(
                parse_segment(&b, src, d0.dst, 5, &mut deltas, &mut prefixes).is_err(),
                "byte {at}"
            );
        }
    }

    #[test]
    fn a_gso_frame_cuts_into_frames_with_ids_counting_up() {
        let src: SocketAddr = "127.0.0.1:4791".parse().unwrap();
        let mut deltas = IdentDelta::new();
        let mut run = Vec::new();
        for (k, len) in [1024usize, 1024, 1024, 500].into_iter().enumerate() {
            let mut d = build(write_first(len), src).unwrap();
            d.set_ident(k as u16, &mut deltas);
            run.extend_from_slice(&d.to_vec(&RealMemory::new()));
        }
        let whole = ethernet_frame(src, "127.0.0.2:4791".parse().unwrap(), 0x6a, &run);
        let segs = gso_segments(&whole, 12 + 16 + 1024 + 4).unwrap();
        assert_eq!(segs.len(), 4);
        for (k, f) in segs.iter().enumerate() {
            assert_eq!(u16::from_be_bytes([f[18], f[19]]), k as u16);
            let roce_wire::Frame::Roce(rf) = roce_wire::parse_frame(f).unwrap() else {
                panic!("not RoCE")
            };
            assert!(rf.icrc_ok() && rf.ip_checksum_ok, "segment {k}");
        }
    }
}
