//! IPv4 (RFC 791) as RoCEv2 uses it: DSCP picks the traffic class, the ECN
//! bits carry ECT(0)/CE for DCQCN (RFC 3168), DF is set.

use crate::error::{Error, Result, need};
use serde::Serialize;
use std::net::Ipv4Addr;

pub const PROTO_UDP: u8 = 17;
pub const IPV4_HEADER_LEN: usize = 20;

/// Internet checksum (RFC 1071) over `data`, starting from `sum`.
pub fn ones_complement_sum(mut sum: u32, data: &[u8]) -> u32 {
    let mut chunks = data.chunks_exact(2);
    for c in &mut chunks {
        sum += u32::from(u16::from_be_bytes([c[0], c[1]]));
    }
    if let [last] = chunks.remainder() {
        sum += u32::from(*last) << 8;
    }
    sum
}

/// Folds a 32-bit one's-complement sum and complements it.
pub fn fold_checksum(mut sum: u32) -> u16 {
    while sum > 0xffff {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    !(sum as u16)
}

/// A view of an IPv4 header and what follows it.
#[derive(Debug, Clone)]
pub struct Ipv4Packet<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> Ipv4Packet<T> {
    pub const fn new_unchecked(buffer: T) -> Self {
        Ipv4Packet { buffer }
    }
    /// Checks version, IHL and that the header and total length fit the buffer.
    pub fn new_checked(buffer: T) -> Result<Self> {
        let p = Ipv4Packet { buffer };
        let b = p.buffer.as_ref();
        need("IPv4", b, IPV4_HEADER_LEN)?;
        if p.version() != 4 {
            return Err(Error::BadIpVersion(p.version()));
        }
        let ihl = p.header_len();
        if ihl < IPV4_HEADER_LEN {
            return Err(Error::BadIpHeaderLen(b[0] & 0xf));
        }
        need("IPv4 options", b, ihl)?;
        let total = usize::from(p.total_len());
        if total < ihl || total > b.len() {
            return Err(Error::LengthMismatch {
                layer: "IPv4",
                field: total,
                actual: b.len(),
            });
        }
        Ok(p)
    }
    fn b(&self) -> &[u8] {
        self.buffer.as_ref()
    }
    pub fn version(&self) -> u8 {
        self.b()[0] >> 4
    }
    pub fn header_len(&self) -> usize {
        usize::from(self.b()[0] & 0xf) * 4
    }
    pub fn dscp(&self) -> u8 {
        self.b()[1] >> 2
    }
    pub fn ecn(&self) -> u8 {
        self.b()[1] & 3
    }
    pub fn total_len(&self) -> u16 {
        u16::from_be_bytes([self.b()[2], self.b()[3]])
    }
    pub fn ident(&self) -> u16 {
        u16::from_be_bytes([self.b()[4], self.b()[5]])
    }
    pub fn dont_frag(&self) -> bool {
        self.b()[6] & 0x40 != 0
    }
    pub fn ttl(&self) -> u8 {
        self.b()[8]
    }
    pub fn protocol(&self) -> u8 {
        self.b()[9]
    }
    pub fn checksum(&self) -> u16 {
        u16::from_be_bytes([self.b()[10], self.b()[11]])
    }
    pub fn src(&self) -> Ipv4Addr {
        Ipv4Addr::new(self.b()[12], self.b()[13], self.b()[14], self.b()[15])
    }
    pub fn dst(&self) -> Ipv4Addr {
        Ipv4Addr::new(self.b()[16], self.b()[17], self.b()[18], self.b()[19])
    }
    /// True when the header checksum verifies.
    pub fn checksum_ok(&self) -> bool {
        fold_checksum(ones_complement_sum(0, &self.b()[..self.header_len()])) == 0
    }
    /// The bytes after the header, up to the total length.
    pub fn payload(&self) -> &[u8] {
        &self.b()[self.header_len()..usize::from(self.total_len())]
    }
}

/// The meaning of an IPv4 header (options are not produced; they are skipped on parse).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Ipv4Repr {
    pub src: Ipv4Addr,
    pub dst: Ipv4Addr,
    pub dscp: u8,
    pub ecn: u8,
    pub ident: u16,
    pub dont_frag: bool,
    pub ttl: u8,
    pub protocol: u8,
    /// Bytes after the IP header.
    pub payload_len: usize,
}

impl Ipv4Repr {
    pub fn parse<T: AsRef<[u8]>>(p: &Ipv4Packet<T>) -> Ipv4Repr {
        Ipv4Repr {
            src: p.src(),
            dst: p.dst(),
            dscp: p.dscp(),
            ecn: p.ecn(),
            ident: p.ident(),
            dont_frag: p.dont_frag(),
            ttl: p.ttl(),
            protocol: p.protocol(),
            payload_len: usize::from(p.total_len()) - p.header_len(),
        }
    }
    pub const fn buffer_len(&self) -> usize {
        IPV4_HEADER_LEN
    }
    /// Writes a 20-byte header with a correct checksum.
    pub fn emit(&self, b: &mut [u8]) -> Result<()> {
        if b.len() < IPV4_HEADER_LEN {
            return Err(Error::BufferTooSmall {
                need: IPV4_HEADER_LEN,
                have: b.len(),
            });
        }
        let total = IPV4_HEADER_LEN + self.payload_len;
        if total > 0xffff {
            return Err(Error::FieldOverflow {
                field: "ipv4.total_len",
                value: total as u64,
            });
        }
        if self.dscp > 63 || self.ecn > 3 {
            return Err(Error::FieldOverflow {
                field: "ipv4.dscp/ecn",
                value: u64::from(self.dscp.max(self.ecn)),
            });
        }
        b[0] = 0x45;
        b[1] = (self.dscp << 2) | self.ecn;
        b[2..4].copy_from_slice(&(total as u16).to_be_bytes());
        b[4..6].copy_from_slice(&self.ident.to_be_bytes());
        b[6] = if self.dont_frag { 0x40 } else { 0 };
        b[7] = 0;
        b[8] = self.ttl;
        b[9] = self.protocol;
        b[10] = 0;
        b[11] = 0;
        b[12..16].copy_from_slice(&self.src.octets());
        b[16..20].copy_from_slice(&self.dst.octets());
        let c = fold_checksum(ones_complement_sum(0, &b[..IPV4_HEADER_LEN]));
        b[10..12].copy_from_slice(&c.to_be_bytes());
        Ok(())
    }
}
