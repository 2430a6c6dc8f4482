//! Ethernet II with an optional IEEE 802.1Q tag.
//!
//! RoCEv2 rides on plain Ethernet II; the 802.1Q tag matters because its PCP
//! is the priority PFC pauses (802.1Qbb) when DSCP-based trust is not used.

use crate::error::{Error, Result, need};
use serde::Serialize;
use std::fmt;

pub const ETHERTYPE_IPV4: u16 = 0x0800;
pub const ETHERTYPE_IPV6: u16 = 0x86dd;
pub const ETHERTYPE_VLAN: u16 = 0x8100;
/// MAC control (802.3 Annex 31B), which carries PFC frames.
pub const ETHERTYPE_MAC_CONTROL: u16 = 0x8808;

/// A 48-bit MAC address.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct Mac(pub [u8; 6]);

impl fmt::Display for Mac {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let b = self.0;
        write!(
            f,
            "{:02x}:{:02x}:{:02x}:{:02x}:{:02x}:{:02x}",
            b[0], b[1], b[2], b[3], b[4], b[5]
        )
    }
}

impl fmt::Debug for Mac {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}

impl Serialize for Mac {
    fn serialize<S: serde::Serializer>(&self, s: S) -> core::result::Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

/// An 802.1Q tag.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize)]
pub struct VlanTag {
    /// Priority code point (0..=7): the PFC priority.
    pub pcp: u8,
    pub dei: bool,
    /// VLAN id (0..=4095).
    pub vid: u16,
}

/// A view of an Ethernet II frame, tagged or not.
#[derive(Debug, Clone)]
pub struct EthernetFrame<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> EthernetFrame<T> {
    pub const fn new_unchecked(buffer: T) -> Self {
        EthernetFrame { buffer }
    }
    /// Checks the buffer holds the whole header, including a tag if present.
    pub fn new_checked(buffer: T) -> Result<Self> {
        let f = EthernetFrame { buffer };
        need("Ethernet", f.buffer.as_ref(), 14)?;
        need("Ethernet", f.buffer.as_ref(), f.header_len())?;
        Ok(f)
    }
    fn b(&self) -> &[u8] {
        self.buffer.as_ref()
    }
    pub fn dst(&self) -> Mac {
        let mut m = [0; 6];
        m.copy_from_slice(&self.b()[0..6]);
        Mac(m)
    }
    pub fn src(&self) -> Mac {
        let mut m = [0; 6];
        m.copy_from_slice(&self.b()[6..12]);
        Mac(m)
    }
    fn tpid(&self) -> u16 {
        u16::from_be_bytes([self.b()[12], self.b()[13]])
    }
    pub fn vlan(&self) -> Option<VlanTag> {
        if self.tpid() != ETHERTYPE_VLAN {
            return None;
        }
        let tci = u16::from_be_bytes([self.b()[14], self.b()[15]]);
        Some(VlanTag {
            pcp: (tci >> 13) as u8,
            dei: tci & 0x1000 != 0,
            vid: tci & 0x0fff,
        })
    }
    pub fn ethertype(&self) -> u16 {
        if self.tpid() == ETHERTYPE_VLAN {
            u16::from_be_bytes([self.b()[16], self.b()[17]])
        } else {
            self.tpid()
        }
    }
    pub fn header_len(&self) -> usize {
        if self.tpid() == ETHERTYPE_VLAN {
            18
        } else {
            14
        }
    }
    pub fn payload(&self) -> &[u8] {
        &self.b()[self.header_len()..]
    }
}

/// The meaning of an Ethernet header.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize)]
pub struct EthernetRepr {
    pub dst: Mac,
    pub src: Mac,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub vlan: Option<VlanTag>,
    pub ethertype: u16,
}

impl EthernetRepr {
    pub fn parse<T: AsRef<[u8]>>(f: &EthernetFrame<T>) -> EthernetRepr {
        EthernetRepr {
            dst: f.dst(),
            src: f.src(),
            vlan: f.vlan(),
            ethertype: f.ethertype(),
        }
    }
    pub const fn buffer_len(&self) -> usize {
        if self.vlan.is_some() { 18 } else { 14 }
    }
    /// Writes the header at the start of `b`.
    pub fn emit(&self, b: &mut [u8]) -> Result<()> {
        let n = self.buffer_len();
        if b.len() < n {
            return Err(Error::BufferTooSmall {
                need: n,
                have: b.len(),
            });
        }
        b[0..6].copy_from_slice(&self.dst.0);
        b[6..12].copy_from_slice(&self.src.0);
        let mut at = 12;
        if let Some(t) = self.vlan {
            if t.pcp > 7 || t.vid > 0x0fff {
                return Err(Error::FieldOverflow {
                    field: "vlan",
                    value: u64::from(t.vid),
                });
            }
            let tci = (u16::from(t.pcp) << 13) | (u16::from(t.dei) << 12) | t.vid;
            b[12..14].copy_from_slice(&ETHERTYPE_VLAN.to_be_bytes());
            b[14..16].copy_from_slice(&tci.to_be_bytes());
            at = 16;
        }
        b[at..at + 2].copy_from_slice(&self.ethertype.to_be_bytes());
        Ok(())
    }
}
