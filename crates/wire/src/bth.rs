//! Base Transport Header (IBA 9.2, 12 bytes).
//!
//! ```text
//!  0: OpCode(8)
//!  1: SE(1) M(1) PadCnt(2) TVer(4)
//!  2: P_Key(16)
//!  4: FECN(1) BECN(1) Resv6(6)        <- the "Resv8a" byte the ICRC masks
//!  5: DestQP(24)
//!  8: AckReq(1) Resv7(7)
//!  9: PSN(24)
//! ```
//! RoCEv2 keeps the IBA FECN/BECN bits in byte 4; the ICRC treats that whole
//! byte as variant (see [`crate::icrc`]).

use crate::error::{Error, Result, need};
use crate::opcode::Opcode;
use crate::psn::Psn;

/// Length of a BTH.
pub const BTH_LEN: usize = 12;

/// A read/write view of a BTH at the start of a buffer.
#[derive(Debug, Clone)]
pub struct BthPacket<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> BthPacket<T> {
    /// Wraps a buffer without checking its length; accessors may panic.
    pub const fn new_unchecked(buffer: T) -> Self {
        BthPacket { buffer }
    }
    /// Wraps a buffer, checking it holds a whole BTH; no accessor panics after.
    pub fn new_checked(buffer: T) -> Result<Self> {
        need("BTH", buffer.as_ref(), BTH_LEN)?;
        Ok(BthPacket { buffer })
    }
    /// Gives the buffer back.
    pub fn into_inner(self) -> T {
        self.buffer
    }
    fn b(&self) -> &[u8] {
        self.buffer.as_ref()
    }
    pub fn opcode(&self) -> Opcode {
        Opcode::from_u8(self.b()[0])
    }
    pub fn solicited(&self) -> bool {
        self.b()[1] & 0x80 != 0
    }
    pub fn mig_req(&self) -> bool {
        self.b()[1] & 0x40 != 0
    }
    pub fn pad_count(&self) -> u8 {
        (self.b()[1] >> 4) & 0x3
    }
    pub fn tver(&self) -> u8 {
        self.b()[1] & 0x0f
    }
    pub fn pkey(&self) -> u16 {
        u16::from_be_bytes([self.b()[2], self.b()[3]])
    }
    pub fn fecn(&self) -> bool {
        self.b()[4] & 0x80 != 0
    }
    pub fn becn(&self) -> bool {
        self.b()[4] & 0x40 != 0
    }
    pub fn dest_qp(&self) -> u32 {
        u32::from_be_bytes([0, self.b()[5], self.b()[6], self.b()[7]])
    }
    pub fn ack_req(&self) -> bool {
        self.b()[8] & 0x80 != 0
    }
    pub fn psn(&self) -> Psn {
        Psn::new(u32::from_be_bytes([
            0,
            self.b()[9],
            self.b()[10],
            self.b()[11],
        ]))
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> BthPacket<T> {
    fn m(&mut self) -> &mut [u8] {
        self.buffer.as_mut()
    }
    pub fn set_opcode(&mut self, op: Opcode) {
        self.m()[0] = op.to_u8();
    }
    pub fn set_flags(&mut self, se: bool, m: bool, pad: u8, tver: u8) {
        self.m()[1] = (u8::from(se) << 7) | (u8::from(m) << 6) | ((pad & 3) << 4) | (tver & 0xf);
    }
    pub fn set_pkey(&mut self, v: u16) {
        self.m()[2..4].copy_from_slice(&v.to_be_bytes());
    }
    pub fn set_fecn_becn(&mut self, fecn: bool, becn: bool) {
        self.m()[4] = (u8::from(fecn) << 7) | (u8::from(becn) << 6);
    }
    pub fn set_dest_qp(&mut self, qpn: u32) {
        self.m()[5..8].copy_from_slice(&qpn.to_be_bytes()[1..]);
    }
    pub fn set_ack_req(&mut self, a: bool) {
        self.m()[8] = u8::from(a) << 7;
    }
    pub fn set_psn(&mut self, psn: Psn) {
        self.m()[9..12].copy_from_slice(&psn.value().to_be_bytes()[1..]);
    }
}

/// The meaning of a BTH.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BthRepr {
    pub opcode: Opcode,
    pub solicited: bool,
    pub mig_req: bool,
    pub pad_count: u8,
    pub tver: u8,
    pub pkey: u16,
    pub fecn: bool,
    pub becn: bool,
    pub dest_qp: u32,
    pub ack_req: bool,
    pub psn: Psn,
}

impl Default for BthRepr {
    fn default() -> Self {
        BthRepr {
            opcode: Opcode::RcSendOnly,
            solicited: false,
            mig_req: false,
            pad_count: 0,
            tver: 0,
            pkey: 0xffff,
            fecn: false,
            becn: false,
            dest_qp: 0,
            ack_req: false,
            psn: Psn::new(0),
        }
    }
}

impl BthRepr {
    /// Reads a BTH. Unknown opcodes and TVer are reported by the frame parser,
    /// which knows whether it wants to be strict; this only reads fields.
    pub fn parse<T: AsRef<[u8]>>(p: &BthPacket<T>) -> BthRepr {
        BthRepr {
            opcode: p.opcode(),
            solicited: p.solicited(),
            mig_req: p.mig_req(),
            pad_count: p.pad_count(),
            tver: p.tver(),
            pkey: p.pkey(),
            fecn: p.fecn(),
            becn: p.becn(),
            dest_qp: p.dest_qp(),
            ack_req: p.ack_req(),
            psn: p.psn(),
        }
    }

    /// Reads a BTH from the start of `buf`.
    pub fn parse_bytes(buf: &[u8]) -> Result<BthRepr> {
        Ok(Self::parse(&BthPacket::new_checked(buf)?))
    }

    /// Bytes [`emit`](Self::emit) writes.
    pub const fn buffer_len(&self) -> usize {
        BTH_LEN
    }

    /// Writes every byte of the BTH (reserved bits as zero).
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, p: &mut BthPacket<T>) -> Result<()> {
        if self.dest_qp > 0xff_ffff {
            return Err(Error::FieldOverflow {
                field: "bth.dest_qp",
                value: self.dest_qp.into(),
            });
        }
        if self.pad_count > 3 || self.tver > 15 {
            return Err(Error::FieldOverflow {
                field: "bth.pad_count/tver",
                value: self.pad_count.max(self.tver).into(),
            });
        }
        p.set_opcode(self.opcode);
        p.set_flags(self.solicited, self.mig_req, self.pad_count, self.tver);
        p.set_pkey(self.pkey);
        p.set_fecn_becn(self.fecn, self.becn);
        p.set_dest_qp(self.dest_qp);
        p.set_ack_req(self.ack_req);
        p.set_psn(self.psn);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fields_land_where_iba_puts_them() {
        let r = BthRepr {
            opcode: Opcode::RcWriteFirst,
            solicited: true,
            mig_req: true,
            pad_count: 2,
            tver: 0,
            pkey: 0xffff,
            fecn: false,
            becn: true,
            dest_qp: 0x00_1234,
            ack_req: true,
            psn: Psn::new(0xab_cdef),
        };
        let mut buf = [0xa5u8; 12];
        r.emit(&mut BthPacket::new_unchecked(&mut buf[..])).unwrap();
        assert_eq!(
            buf,
            [
                0x06, 0xe0, 0xff, 0xff, 0x40, 0x00, 0x12, 0x34, 0x80, 0xab, 0xcd, 0xef
            ]
        );
        assert_eq!(BthRepr::parse_bytes(&buf).unwrap(), r);
        assert!(BthRepr::parse_bytes(&buf[..11]).is_err());
    }
}
