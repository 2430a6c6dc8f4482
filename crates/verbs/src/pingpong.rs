//! The out-of-band message of rdma-core's libibverbs examples
//! (`ibv_rc_pingpong`, `ibv_ud_pingpong`, …): over TCP (port 18515 by
//! default) each side sends `"%04x:%06x:%06x:%s"` — LID, QPN, PSN and the
//! 32-hex-digit GID — in a fixed 52-byte buffer (the format plus its NUL),
//! the client first; then the client sends `"done"` with its NUL so the
//! server knows the client has connected its QP. Speaking it byte for byte
//! lets the examples in `crates/verbs/examples` face the real tools.

use crate::error::{Error, Result};
use crate::gid::Gid;
use std::io::{Read, Write};

/// Size of the message buffer: `sizeof "0000:000000:000000:" + 32 hex digits`.
pub const MSG_LEN: usize = 52;
/// The client's last word, NUL included.
pub const DONE: &[u8; 5] = b"done\0";
/// The examples' default TCP port.
pub const DEFAULT_PORT: u16 = 18515;

/// One side's address (`struct pingpong_dest`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Dest {
    /// Always 0 on RoCE (no subnet manager assigns LIDs).
    pub lid: u16,
    pub qpn: u32,
    pub psn: u32,
    pub gid: Gid,
}

impl Dest {
    /// The 52-byte message (the text, then NULs).
    pub fn to_message(&self) -> [u8; MSG_LEN] {
        let text = format!(
            "{:04x}:{:06x}:{:06x}:{}",
            self.lid,
            self.qpn & 0xff_ffff,
            self.psn & 0xff_ffff,
            self.gid.to_wire()
        );
        let mut m = [0u8; MSG_LEN];
        m[..text.len()].copy_from_slice(text.as_bytes());
        m
    }

    /// Parses a message; anything but the format is one clear error.
    pub fn parse(msg: &[u8]) -> Result<Dest> {
        let end = msg.iter().position(|&b| b == 0).unwrap_or(msg.len());
        let text = std::str::from_utf8(&msg[..end]).map_err(|_| bad(msg))?;
        let mut f = text.split(':');
        let (Some(lid), Some(qpn), Some(psn), Some(gid), None) =
            (f.next(), f.next(), f.next(), f.next(), f.next())
        else {
            return Err(bad(msg));
        };
        let hex = |s: &str, max: u32| {
            u32::from_str_radix(s, 16)
                .ok()
                .filter(|v| *v <= max && !s.is_empty())
                .ok_or_else(|| bad(msg))
        };
        Ok(Dest {
            lid: hex(lid, 0xffff)? as u16,
            qpn: hex(qpn, 0xff_ffff)?,
            psn: hex(psn, 0xff_ffff)?,
            gid: Gid::from_wire(gid)?,
        })
    }

    /// Sends this side's message.
    pub fn send(&self, s: &mut impl Write) -> Result<()> {
        s.write_all(&self.to_message())
            .map_err(io("sending the local address"))
    }

    /// Reads the peer's message.
    pub fn recv(s: &mut impl Read) -> Result<Dest> {
        let mut m = [0u8; MSG_LEN];
        s.read_exact(&mut m)
            .map_err(io("reading the remote address"))?;
        Dest::parse(&m)
    }
}

/// The client's "done".
pub fn send_done(s: &mut impl Write) -> Result<()> {
    s.write_all(DONE).map_err(io("sending done"))
}

/// The server waits for the client's "done".
pub fn recv_done(s: &mut impl Read) -> Result<()> {
    let mut m = [0u8; DONE.len()];
    s.read_exact(&mut m).map_err(io("reading done"))?;
    if &m != DONE {
        return Err(Error::Exchange {
            peer: "pingpong client".into(),
            why: format!("expected \"done\", got {:?}", String::from_utf8_lossy(&m)),
        });
    }
    Ok(())
}

fn bad(msg: &[u8]) -> Error {
    Error::Exchange {
        peer: "pingpong peer".into(),
        why: format!(
            "{:?} is not an rdma-core pingpong address (LID:QPN:PSN:GID in hex)",
            String::from_utf8_lossy(msg).trim_end_matches('\0')
        ),
    }
}

fn io(what: &'static str) -> impl Fn(std::io::Error) -> Error {
    move |e| Error::Io {
        context: what.into(),
        source: e,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The bytes `ibv_rc_pingpong -g 1` sends from 10.1.16.62 with QPN
    /// 0x35 and PSN 0x947b54 (the format string and `gid_to_wire_gid`).
    const RXE: &[u8] = b"0000:000035:947b54:00000000000000000000ffff0a01103e\0";

    #[test]
    fn message_matches_the_c_format_byte_for_byte() {
        assert_eq!(RXE.len(), MSG_LEN);
        let d = Dest {
            lid: 0,
            qpn: 0x35,
            psn: 0x947b54,
            gid: Gid::from_ip("10.1.16.62".parse().unwrap()),
        };
        assert_eq!(&d.to_message()[..], RXE);
        assert_eq!(Dest::parse(RXE).unwrap(), d);
    }

    #[test]
    fn zero_gid_and_ipv6() {
        let m = b"0000:000001:000002:00000000000000000000000000000000\0";
        let d = Dest::parse(m).unwrap();
        assert!(d.gid.is_zero());
        let v6 = Dest {
            gid: Gid::from_ip("fd00::1".parse().unwrap()),
            ..d
        };
        assert_eq!(Dest::parse(&v6.to_message()).unwrap(), v6);
    }

    #[test]
    fn garbage_is_one_clear_error() {
        for m in [
            &b"{\"qpn\":1}"[..],
            b"0000:000035:947b54",
            b"0000:1000000:000000:00000000000000000000000000000000",
            b"0000:000035:947b54:00000000000000000000ffff0a01103e:x",
            b"zzzz:000035:947b54:00000000000000000000ffff0a01103e",
        ] {
            let e = Dest::parse(m).unwrap_err();
            assert!(
                e.to_string().contains("not an rdma-core pingpong address")
                    || e.to_string().contains("GID"),
                "{e}"
            );
        }
        let mut r: &[u8] = b"dune\0";
        assert!(recv_done(&mut r).is_err());
        let mut r: &[u8] = DONE;
        recv_done(&mut r).unwrap();
    }
}
