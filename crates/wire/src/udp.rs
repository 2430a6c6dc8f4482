//! UDP (RFC 768). RoCEv2 uses destination port 4791; the source port is free
//! and carries per-QP entropy for ECMP (RoCEv2 Annex A17.3).

use crate::error::{Error, Result, need};
use serde::Serialize;

/// IANA port for RoCEv2.
pub const ROCEV2_PORT: u16 = 4791;
pub const UDP_HEADER_LEN: usize = 8;

/// The meaning of a UDP header.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct UdpRepr {
    pub src_port: u16,
    pub dst_port: u16,
    /// Checksum as on the wire (0 means "none", usual for RoCEv2 over IPv4).
    pub checksum: u16,
}

/// A view of a UDP datagram.
#[derive(Debug, Clone)]
pub struct UdpPacket<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> UdpPacket<T> {
    pub const fn new_unchecked(buffer: T) -> Self {
        UdpPacket { buffer }
    }
    /// Checks the header fits and the length field matches the bytes present.
    pub fn new_checked(buffer: T) -> Result<Self> {
        let p = UdpPacket { buffer };
        let b = p.buffer.as_ref();
        need("UDP", b, UDP_HEADER_LEN)?;
        let len = usize::from(p.len());
        if len < UDP_HEADER_LEN || len > b.len() {
            return Err(Error::LengthMismatch {
                layer: "UDP",
                field: len,
                actual: b.len(),
            });
        }
        Ok(p)
    }
    fn b(&self) -> &[u8] {
        self.buffer.as_ref()
    }
    pub fn src_port(&self) -> u16 {
        u16::from_be_bytes([self.b()[0], self.b()[1]])
    }
    pub fn dst_port(&self) -> u16 {
        u16::from_be_bytes([self.b()[2], self.b()[3]])
    }
    #[allow(clippy::len_without_is_empty)]
    pub fn len(&self) -> u16 {
        u16::from_be_bytes([self.b()[4], self.b()[5]])
    }
    pub fn checksum(&self) -> u16 {
        u16::from_be_bytes([self.b()[6], self.b()[7]])
    }
    pub fn payload(&self) -> &[u8] {
        &self.b()[UDP_HEADER_LEN..usize::from(self.len())]
    }
}

impl UdpRepr {
    pub fn parse<T: AsRef<[u8]>>(p: &UdpPacket<T>) -> UdpRepr {
        UdpRepr {
            src_port: p.src_port(),
            dst_port: p.dst_port(),
            checksum: p.checksum(),
        }
    }
    pub const fn buffer_len(&self) -> usize {
        UDP_HEADER_LEN
    }
    /// Writes the header for a payload of `payload_len` bytes; the checksum
    /// field is written as stored in `self` (the frame builder fills it in).
    pub fn emit(&self, b: &mut [u8], payload_len: usize) -> Result<()> {
        if b.len() < UDP_HEADER_LEN {
            return Err(Error::BufferTooSmall {
                need: UDP_HEADER_LEN,
                have: b.len(),
            });
        }
        let len = UDP_HEADER_LEN + payload_len;
        if len > 0xffff {
            return Err(Error::FieldOverflow {
                field: "udp.len",
                value: len as u64,
            });
        }
        b[0..2].copy_from_slice(&self.src_port.to_be_bytes());
        b[2..4].copy_from_slice(&self.dst_port.to_be_bytes());
        b[4..6].copy_from_slice(&(len as u16).to_be_bytes());
        b[6..8].copy_from_slice(&self.checksum.to_be_bytes());
        Ok(())
    }
}
