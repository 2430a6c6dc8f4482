//! The fixed-size extension transport headers that follow the BTH
//! (IBA 9.3: RETH, AETH, AtomicETH, AtomicAckETH, ImmDt, IETH, DETH).
//!
//! Each is a plain `Repr` with `LEN`, `parse` from the start of a slice and
//! `emit` into one; none of them has variable parts, so a view type would add
//! nothing over these.

use crate::error::{Error, Result, need};
use serde::Serialize;

fn be32(b: &[u8]) -> u32 {
    u32::from_be_bytes([b[0], b[1], b[2], b[3]])
}
fn be64(b: &[u8]) -> u64 {
    u64::from_be_bytes([b[0], b[1], b[2], b[3], b[4], b[5], b[6], b[7]])
}
fn be24(b: &[u8]) -> u32 {
    u32::from_be_bytes([0, b[0], b[1], b[2]])
}
fn room(buf: &[u8], n: usize) -> Result<()> {
    if buf.len() < n {
        Err(Error::BufferTooSmall {
            need: n,
            have: buf.len(),
        })
    } else {
        Ok(())
    }
}

/// RDMA Extended Transport Header (IBA 9.3.3): where a WRITE or READ goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize)]
pub struct RethRepr {
    pub va: u64,
    pub rkey: u32,
    pub dma_len: u32,
}

impl RethRepr {
    pub const LEN: usize = 16;
    pub fn parse(b: &[u8]) -> Result<Self> {
        need("RETH", b, Self::LEN)?;
        Ok(RethRepr {
            va: be64(b),
            rkey: be32(&b[8..]),
            dma_len: be32(&b[12..]),
        })
    }
    pub fn emit(&self, b: &mut [u8]) -> Result<()> {
        room(b, Self::LEN)?;
        b[0..8].copy_from_slice(&self.va.to_be_bytes());
        b[8..12].copy_from_slice(&self.rkey.to_be_bytes());
        b[12..16].copy_from_slice(&self.dma_len.to_be_bytes());
        Ok(())
    }
}

/// AtomicETH (IBA 9.3.4): target, key and operands of CMP_SWAP / FETCH_ADD.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize)]
pub struct AtomicEthRepr {
    pub va: u64,
    pub rkey: u32,
    /// Swap value (CMP_SWAP) or addend (FETCH_ADD).
    pub swap_add: u64,
    /// Compare value (CMP_SWAP only; zero for FETCH_ADD).
    pub compare: u64,
}

impl AtomicEthRepr {
    pub const LEN: usize = 28;
    pub fn parse(b: &[u8]) -> Result<Self> {
        need("AtomicETH", b, Self::LEN)?;
        Ok(AtomicEthRepr {
            va: be64(b),
            rkey: be32(&b[8..]),
            swap_add: be64(&b[12..]),
            compare: be64(&b[20..]),
        })
    }
    pub fn emit(&self, b: &mut [u8]) -> Result<()> {
        room(b, Self::LEN)?;
        b[0..8].copy_from_slice(&self.va.to_be_bytes());
        b[8..12].copy_from_slice(&self.rkey.to_be_bytes());
        b[12..20].copy_from_slice(&self.swap_add.to_be_bytes());
        b[20..28].copy_from_slice(&self.compare.to_be_bytes());
        Ok(())
    }
}

/// AtomicAckETH (IBA 9.3.6): the value the target held before the atomic.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize)]
pub struct AtomicAckEthRepr {
    pub orig: u64,
}

impl AtomicAckEthRepr {
    pub const LEN: usize = 8;
    pub fn parse(b: &[u8]) -> Result<Self> {
        need("AtomicAckETH", b, Self::LEN)?;
        Ok(AtomicAckEthRepr { orig: be64(b) })
    }
    pub fn emit(&self, b: &mut [u8]) -> Result<()> {
        room(b, Self::LEN)?;
        b[0..8].copy_from_slice(&self.orig.to_be_bytes());
        Ok(())
    }
}

/// Datagram Extended Transport Header (IBA 9.3.2): UD Q_Key and source QP.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize)]
pub struct DethRepr {
    pub qkey: u32,
    pub src_qp: u32,
}

impl DethRepr {
    pub const LEN: usize = 8;
    pub fn parse(b: &[u8]) -> Result<Self> {
        need("DETH", b, Self::LEN)?;
        Ok(DethRepr {
            qkey: be32(b),
            src_qp: be24(&b[5..]),
        })
    }
    pub fn emit(&self, b: &mut [u8]) -> Result<()> {
        room(b, Self::LEN)?;
        if self.src_qp > 0xff_ffff {
            return Err(Error::FieldOverflow {
                field: "deth.src_qp",
                value: self.src_qp.into(),
            });
        }
        b[0..4].copy_from_slice(&self.qkey.to_be_bytes());
        b[4] = 0;
        b[5..8].copy_from_slice(&self.src_qp.to_be_bytes()[1..]);
        Ok(())
    }
}

/// A four-byte big-endian header: ImmDt (IBA 9.3.7) or IETH (9.3.8, an R_Key).
pub(crate) fn parse_u32(layer: &'static str, b: &[u8]) -> Result<u32> {
    need(layer, b, 4)?;
    Ok(be32(b))
}

pub(crate) fn emit_u32(v: u32, b: &mut [u8]) -> Result<()> {
    room(b, 4)?;
    b[0..4].copy_from_slice(&v.to_be_bytes());
    Ok(())
}

/// NAK codes carried in an AETH (IBA 9.7.5.2.4, Table 42).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum NakCode {
    PsnSequenceError,
    InvalidRequest,
    RemoteAccessError,
    RemoteOperationalError,
    InvalidRdRequest,
    /// A reserved code (5..=31).
    Reserved(u8),
}

impl NakCode {
    pub const fn from_u8(v: u8) -> NakCode {
        match v {
            0 => NakCode::PsnSequenceError,
            1 => NakCode::InvalidRequest,
            2 => NakCode::RemoteAccessError,
            3 => NakCode::RemoteOperationalError,
            4 => NakCode::InvalidRdRequest,
            v => NakCode::Reserved(v & 0x1f),
        }
    }
    pub const fn to_u8(self) -> u8 {
        match self {
            NakCode::PsnSequenceError => 0,
            NakCode::InvalidRequest => 1,
            NakCode::RemoteAccessError => 2,
            NakCode::RemoteOperationalError => 3,
            NakCode::InvalidRdRequest => 4,
            NakCode::Reserved(v) => v & 0x1f,
        }
    }
    pub const fn name(self) -> &'static str {
        match self {
            NakCode::PsnSequenceError => "psn_sequence_error",
            NakCode::InvalidRequest => "invalid_request",
            NakCode::RemoteAccessError => "remote_access_error",
            NakCode::RemoteOperationalError => "remote_operational_error",
            NakCode::InvalidRdRequest => "invalid_rd_request",
            NakCode::Reserved(_) => "reserved",
        }
    }
}

/// RNR NAK timer values in microseconds, indexed by the 5-bit code
/// (IBA 9.7.5.2.8, Table 45; code 0 is the longest, 655.36 ms).
pub const RNR_TIMER_US: [u32; 32] = [
    655_360, 10, 20, 30, 40, 60, 80, 120, 160, 240, 320, 480, 640, 960, 1_280, 1_920, 2_560, 3_840,
    5_120, 7_680, 10_240, 15_360, 20_480, 30_720, 40_960, 61_440, 81_920, 122_880, 163_840,
    245_760, 327_680, 491_520,
];

/// Smallest RNR timer code whose delay is at least `us` microseconds
/// (code 0, the longest, when nothing else is long enough).
pub fn rnr_code_for_us(us: u32) -> u8 {
    (1u8..32)
        .find(|&c| RNR_TIMER_US[c as usize] >= us)
        .unwrap_or(0)
}

/// What an AETH syndrome says (IBA 9.7.5.2.2, Table 41).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Syndrome {
    /// Positive acknowledgement with a 5-bit end-to-end credit count (31 = invalid/unlimited).
    Ack { credits: u8 },
    /// Receiver not ready: retry after the timer this code names.
    RnrNak { timer: u8 },
    /// Negative acknowledgement.
    Nak(NakCode),
    /// The reserved `10` syndrome class; kept so nothing is lost in decoding.
    Reserved(u8),
}

impl Syndrome {
    pub const fn from_u8(v: u8) -> Syndrome {
        let low = v & 0x1f;
        match (v >> 5) & 0x3 {
            0 => Syndrome::Ack { credits: low },
            1 => Syndrome::RnrNak { timer: low },
            3 => Syndrome::Nak(NakCode::from_u8(low)),
            _ => Syndrome::Reserved(v),
        }
    }
    pub const fn to_u8(self) -> u8 {
        match self {
            Syndrome::Ack { credits } => credits & 0x1f,
            Syndrome::RnrNak { timer } => 0x20 | (timer & 0x1f),
            Syndrome::Nak(c) => 0x60 | c.to_u8(),
            Syndrome::Reserved(v) => v,
        }
    }
    /// `ack`, `rnr_nak`, `nak` or `reserved`.
    pub const fn kind(self) -> &'static str {
        match self {
            Syndrome::Ack { .. } => "ack",
            Syndrome::RnrNak { .. } => "rnr_nak",
            Syndrome::Nak(_) => "nak",
            Syndrome::Reserved(_) => "reserved",
        }
    }
    /// For an RNR NAK, the delay in microseconds.
    pub const fn rnr_timer_us(self) -> Option<u32> {
        match self {
            Syndrome::RnrNak { timer } => Some(RNR_TIMER_US[(timer & 0x1f) as usize]),
            _ => None,
        }
    }
}

/// ACK Extended Transport Header (IBA 9.3.5): syndrome and MSN.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AethRepr {
    pub syndrome: Syndrome,
    /// Message sequence number (24 bits): count of completed requests.
    pub msn: u32,
}

impl AethRepr {
    pub const LEN: usize = 4;
    pub fn parse(b: &[u8]) -> Result<Self> {
        need("AETH", b, Self::LEN)?;
        Ok(AethRepr {
            syndrome: Syndrome::from_u8(b[0]),
            msn: be24(&b[1..]),
        })
    }
    pub fn emit(&self, b: &mut [u8]) -> Result<()> {
        room(b, Self::LEN)?;
        b[0] = self.syndrome.to_u8();
        b[1..4].copy_from_slice(&(self.msn & 0xff_ffff).to_be_bytes()[1..]);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn aeth_syndromes() {
        for v in 0u8..=255 {
            let s = Syndrome::from_u8(v);
            if v & 0x80 == 0 {
                assert_eq!(s.to_u8(), v, "{v:#x}");
            }
        }
        assert_eq!(
            Syndrome::from_u8(0x60),
            Syndrome::Nak(NakCode::PsnSequenceError)
        );
        assert_eq!(
            Syndrome::from_u8(0x62),
            Syndrome::Nak(NakCode::RemoteAccessError)
        );
        assert_eq!(Syndrome::from_u8(0x2e).rnr_timer_us(), Some(1_280));
        assert_eq!(Syndrome::from_u8(0x20).rnr_timer_us(), Some(655_360));
        assert_eq!(rnr_code_for_us(1_000), 14);
        assert_eq!(rnr_code_for_us(10), 1);
        assert_eq!(rnr_code_for_us(1_000_000), 0);
    }

    #[test]
    fn deth_and_reth_layout() {
        let mut b = [0xa5u8; 16];
        DethRepr {
            qkey: 0x1122_3344,
            src_qp: 0xabcdef,
        }
        .emit(&mut b)
        .unwrap();
        assert_eq!(&b[..8], &[0x11, 0x22, 0x33, 0x44, 0, 0xab, 0xcd, 0xef]);
        RethRepr {
            va: 0x0102_0304_0506_0708,
            rkey: 0xdead_beef,
            dma_len: 4096,
        }
        .emit(&mut b)
        .unwrap();
        assert_eq!(
            b,
            [
                1, 2, 3, 4, 5, 6, 7, 8, 0xde, 0xad, 0xbe, 0xef, 0, 0, 0x10, 0
            ]
        );
        assert!(RethRepr::parse(&b[..15]).is_err());
    }
}
