//! IEEE 802.1Qbb priority flow control frames.
//!
//! A PFC frame is a MAC control frame (EtherType 0x8808, opcode 0x0101) sent to
//! the reserved multicast 01:80:C2:00:00:01. It carries a class-enable vector
//! (one bit per priority) and eight pause times in quanta of 512 bit times;
//! a time of zero for an enabled class means XON (resume).

use crate::error::{Error, Result, need};
use crate::eth::{ETHERTYPE_MAC_CONTROL, EthernetRepr, Mac};
use serde::Serialize;

/// Destination of every PFC frame.
pub const PFC_DST: Mac = Mac([0x01, 0x80, 0xc2, 0x00, 0x00, 0x01]);
/// MAC control opcode for PFC.
pub const PFC_OPCODE: u16 = 0x0101;
/// MAC control payload: opcode, vector, 8 times, padded to the 46-byte minimum.
pub const PFC_PAYLOAD_LEN: usize = 46;

/// The meaning of a PFC frame body.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize)]
pub struct PfcRepr {
    /// Bit `p` set means the time for priority `p` is valid.
    pub class_enable: u8,
    /// Pause time per priority, in quanta (512 bit times each).
    pub quanta: [u16; 8],
}

impl PfcRepr {
    /// Parses the MAC control payload (after the EtherType).
    pub fn parse(b: &[u8]) -> Result<PfcRepr> {
        need("PFC", b, 20)?;
        let opcode = u16::from_be_bytes([b[0], b[1]]);
        if opcode != PFC_OPCODE {
            return Err(Error::NotPfc(opcode));
        }
        let mut quanta = [0u16; 8];
        for (i, q) in quanta.iter_mut().enumerate() {
            *q = u16::from_be_bytes([b[4 + 2 * i], b[5 + 2 * i]]);
        }
        Ok(PfcRepr {
            class_enable: b[3],
            quanta,
        })
    }

    /// Writes the 46-byte MAC control payload (zero padded).
    pub fn emit(&self, b: &mut [u8]) -> Result<()> {
        if b.len() < PFC_PAYLOAD_LEN {
            return Err(Error::BufferTooSmall {
                need: PFC_PAYLOAD_LEN,
                have: b.len(),
            });
        }
        b[..PFC_PAYLOAD_LEN].fill(0);
        b[0..2].copy_from_slice(&PFC_OPCODE.to_be_bytes());
        b[2] = 0;
        b[3] = self.class_enable;
        for (i, q) in self.quanta.iter().enumerate() {
            b[4 + 2 * i..6 + 2 * i].copy_from_slice(&q.to_be_bytes());
        }
        Ok(())
    }

    /// Pause time for `prio` in nanoseconds at `link_bps`, or `None` when the
    /// class is not enabled.
    pub fn pause_ns(&self, prio: u8, link_bps: u64) -> Option<u64> {
        if prio > 7 || self.class_enable & (1 << prio) == 0 || link_bps == 0 {
            return None;
        }
        Some(u64::from(self.quanta[usize::from(prio)]) * 512 * 1_000_000_000 / link_bps)
    }

    /// A complete 60-byte PFC frame (without FCS) from `src`.
    pub fn to_frame(&self, src: Mac) -> Vec<u8> {
        let eth = EthernetRepr {
            dst: PFC_DST,
            src,
            vlan: None,
            ethertype: ETHERTYPE_MAC_CONTROL,
        };
        let mut f = vec![0u8; eth.buffer_len() + PFC_PAYLOAD_LEN];
        // Both emits write into a buffer sized for them, so neither can fail.
        let _ = eth.emit(&mut f);
        let _ = self.emit(&mut f[14..]);
        f
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pfc_frame_layout() {
        let r = PfcRepr {
            class_enable: 0b0000_1000,
            quanta: [0, 0, 0, 0xffff, 0, 0, 0, 0],
        };
        let f = r.to_frame(Mac([2, 0, 0, 0, 0, 1]));
        assert_eq!(f.len(), 60);
        assert_eq!(&f[12..18], &[0x88, 0x08, 0x01, 0x01, 0x00, 0x08]);
        assert_eq!(&f[24..26], &[0xff, 0xff]);
        assert_eq!(PfcRepr::parse(&f[14..]).unwrap(), r);
        // 65535 quanta at 100 Gb/s: 65535*512 bits = 335.5 us.
        assert_eq!(r.pause_ns(3, 100_000_000_000), Some(335_539));
        assert_eq!(r.pause_ns(2, 100_000_000_000), None);
    }
}
