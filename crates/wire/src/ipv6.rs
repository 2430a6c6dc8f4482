//! IPv6 (RFC 8200): traffic class carries DSCP and ECN, as in IPv4.

use crate::error::{Error, Result, need};
use serde::Serialize;
use std::net::Ipv6Addr;

pub const IPV6_HEADER_LEN: usize = 40;

/// A view of an IPv6 header and payload (extension headers are not supported:
/// RoCEv2 puts UDP directly after the fixed header).
#[derive(Debug, Clone)]
pub struct Ipv6Packet<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> Ipv6Packet<T> {
    pub const fn new_unchecked(buffer: T) -> Self {
        Ipv6Packet { buffer }
    }
    pub fn new_checked(buffer: T) -> Result<Self> {
        let p = Ipv6Packet { buffer };
        let b = p.buffer.as_ref();
        need("IPv6", b, IPV6_HEADER_LEN)?;
        if b[0] >> 4 != 6 {
            return Err(Error::BadIpVersion(b[0] >> 4));
        }
        let plen = usize::from(p.payload_len());
        if IPV6_HEADER_LEN + plen > b.len() {
            return Err(Error::LengthMismatch {
                layer: "IPv6",
                field: plen,
                actual: b.len() - IPV6_HEADER_LEN,
            });
        }
        Ok(p)
    }
    fn b(&self) -> &[u8] {
        self.buffer.as_ref()
    }
    pub fn traffic_class(&self) -> u8 {
        (self.b()[0] << 4) | (self.b()[1] >> 4)
    }
    pub fn flow_label(&self) -> u32 {
        u32::from_be_bytes([0, self.b()[1] & 0xf, self.b()[2], self.b()[3]])
    }
    pub fn payload_len(&self) -> u16 {
        u16::from_be_bytes([self.b()[4], self.b()[5]])
    }
    pub fn next_header(&self) -> u8 {
        self.b()[6]
    }
    pub fn hop_limit(&self) -> u8 {
        self.b()[7]
    }
    pub fn src(&self) -> Ipv6Addr {
        let mut a = [0u8; 16];
        a.copy_from_slice(&self.b()[8..24]);
        Ipv6Addr::from(a)
    }
    pub fn dst(&self) -> Ipv6Addr {
        let mut a = [0u8; 16];
        a.copy_from_slice(&self.b()[24..40]);
        Ipv6Addr::from(a)
    }
    pub fn payload(&self) -> &[u8] {
        &self.b()[IPV6_HEADER_LEN..IPV6_HEADER_LEN + usize::from(self.payload_len())]
    }
}

/// The meaning of an IPv6 header.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Ipv6Repr {
    pub src: Ipv6Addr,
    pub dst: Ipv6Addr,
    pub dscp: u8,
    pub ecn: u8,
    pub flow_label: u32,
    pub hop_limit: u8,
    pub next_header: u8,
    pub payload_len: usize,
}

impl Ipv6Repr {
    pub fn parse<T: AsRef<[u8]>>(p: &Ipv6Packet<T>) -> Ipv6Repr {
        let tc = p.traffic_class();
        Ipv6Repr {
            src: p.src(),
            dst: p.dst(),
            dscp: tc >> 2,
            ecn: tc & 3,
            flow_label: p.flow_label(),
            hop_limit: p.hop_limit(),
            next_header: p.next_header(),
            payload_len: usize::from(p.payload_len()),
        }
    }
    pub const fn buffer_len(&self) -> usize {
        IPV6_HEADER_LEN
    }
    pub fn emit(&self, b: &mut [u8]) -> Result<()> {
        if b.len() < IPV6_HEADER_LEN {
            return Err(Error::BufferTooSmall {
                need: IPV6_HEADER_LEN,
                have: b.len(),
            });
        }
        if self.payload_len > 0xffff || self.flow_label > 0xf_ffff || self.dscp > 63 || self.ecn > 3
        {
            return Err(Error::FieldOverflow {
                field: "ipv6 length/flow_label/dscp/ecn",
                value: self.payload_len as u64,
            });
        }
        let tc = (self.dscp << 2) | self.ecn;
        let word = (6u32 << 28) | (u32::from(tc) << 20) | self.flow_label;
        b[0..4].copy_from_slice(&word.to_be_bytes());
        b[4..6].copy_from_slice(&(self.payload_len as u16).to_be_bytes());
        b[6] = self.next_header;
        b[7] = self.hop_limit;
        b[8..24].copy_from_slice(&self.src.octets());
        b[24..40].copy_from_slice(&self.dst.octets());
        Ok(())
    }
}
