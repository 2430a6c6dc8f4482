//! One error type for everything that can be wrong with bytes on the wire.

use thiserror::Error;

/// Why a buffer could not be read (or written) as the packet it claims to be.
///
/// Every parser in this crate returns one of these instead of panicking; the
/// variants carry enough context for a one-line diagnostic in `roce pcap decode`.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum Error {
    /// The buffer ends before the named header does.
    #[error("truncated {layer}: need {need} bytes, have {have}")]
    Truncated {
        layer: &'static str,
        need: usize,
        have: usize,
    },
    /// An EtherType that carries neither IPv4, IPv6 nor MAC control (PFC).
    #[error("unsupported EtherType 0x{0:04x}")]
    UnsupportedEtherType(u16),
    /// The IP version nibble does not match the EtherType.
    #[error("bad IP version {0}")]
    BadIpVersion(u8),
    /// IPv4 IHL below 5 or beyond the buffer.
    #[error("bad IPv4 header length {0}")]
    BadIpHeaderLen(u8),
    /// The IP header's checksum is wrong.
    #[error("IPv4 header checksum mismatch: wire 0x{wire:04x}, computed 0x{computed:04x}")]
    BadIpChecksum { wire: u16, computed: u16 },
    /// IP payload is not UDP.
    #[error("IP protocol {0} is not UDP")]
    NotUdp(u8),
    /// UDP, but not to the RoCEv2 port (4791).
    #[error(
        "UDP destination port {0} is not RoCEv2 (4791); if a RoCE stack ran on another port, decode that port as RoCEv2 (`roce pcap decode --udp-port N`, Wireshark's Decode As)"
    )]
    WrongUdpPort(u16),
    /// An IP or UDP length field that disagrees with the bytes present.
    #[error("{layer} length field says {field} bytes, but {actual} are present")]
    LengthMismatch {
        layer: &'static str,
        field: usize,
        actual: usize,
    },
    /// A BTH opcode this implementation has no layout for.
    #[error("unknown BTH opcode 0x{0:02x}")]
    UnknownOpcode(u8),
    /// BTH transport header version other than 0 (IBA 9.2: TVer must be 0).
    #[error("unsupported BTH TVer {0}")]
    BadTver(u8),
    /// PadCnt larger than the payload it claims to pad.
    #[error("PadCnt {pad} larger than the {payload}-byte payload")]
    PadTooLarge { pad: u8, payload: usize },
    /// An opcode that carries no payload arrived with one (or vice versa).
    #[error("opcode {opcode} must carry no payload, but {len} bytes follow its headers")]
    UnexpectedPayload { opcode: &'static str, len: usize },
    /// The extension headers given do not match the opcode's layout.
    #[error("extension headers do not match the layout of {0}")]
    LayoutMismatch(&'static str),
    /// A MAC control frame that is not an 802.1Qbb PFC frame.
    #[error("MAC control opcode 0x{0:04x} is not PFC (0x0101)")]
    NotPfc(u16),
    /// A value that does not fit its field when emitting.
    #[error("{field} value {value} does not fit")]
    FieldOverflow { field: &'static str, value: u64 },
    /// The buffer given to an emitter is too small.
    #[error("emit buffer too small: need {need} bytes, have {have}")]
    BufferTooSmall { need: usize, have: usize },
}

/// Result alias for this crate.
pub type Result<T> = core::result::Result<T, Error>;

/// Fails with [`Error::Truncated`] unless `buf` holds at least `need` bytes.
#[inline]
pub(crate) fn need(layer: &'static str, buf: &[u8], need: usize) -> Result<()> {
    if buf.len() < need {
        Err(Error::Truncated {
            layer,
            need,
            have: buf.len(),
        })
    } else {
        Ok(())
    }
}
