//! perftest's out-of-band exchange, byte for byte, so `roce perf` and the
//! `ib_*` tools of linux-rdma/perftest face each other either way.
//!
//! What goes over TCP 18515 before, around and after the RDMA, as
//! perftest's `src/perftest_communication.{c,h}` and `src/write_bw.c`
//! (6.29) lay it out, for RC over Ethernet without RDMA-CM:
//!
//! 1. the version string, `MAX_VERSION` = 16 bytes (`exchange_versions`);
//!    the reader takes its number with `atof`, refuses one below 5.70
//!    (`check_version_compatibility`) and negotiates a parameter block at
//!    6.28 and above (`negotiate_params`);
//! 2. the cycle buffer and the cache line size, one 4-byte big-endian int
//!    each (`check_sys_data`, from 5.32);
//! 3. the MTU: the `ibv_mtu` enum printed with `%d`, 2 bytes with its NUL
//!    (`check_mtu`, 2 bytes from 5.31); each side takes the smaller;
//! 4. per QP, the key message (`ctx_hand_shake`): on RoCE always the GID
//!    form, `KEY_PRINT_FMT_GID`, 107 characters and a NUL
//!    (`KEY_MSG_SIZE_GID` = 108): LID, outstanding reads, QPN, PSN, rkey,
//!    VA, the 16 GID bytes, SRQN, all hex and `:`-separated;
//! 5. after the QPs are connected, the keys once more per QP (each side
//!    prints the peer's), and one more key message on QP 0 "after moving
//!    the QP to RTR": a barrier, the "sync" every later step reuses;
//! 6. after a bandwidth run: a sync (the client is done), the client's
//!    report (`xchg_bw_reports`: size, iterations, peak, average and
//!    message rate, 8 bytes each, big-endian) and the closing sync
//!    (`ctx_close_connection`).
//!
//! That is write_bw's order (read_bw's and atomic_bw's too). The SEND and
//! latency tests move steps 4-6 about and add syncs around each size;
//! [`Steps`] says where, test by test.
//!
//! Every exchange is symmetric: the client (the side given a server name)
//! writes first and then reads; the server reads first, then writes.
//!
//! roce announces itself as [`ROCE_VERSION`]: `atof` reads 5.70 from it,
//! so a perftest peer takes it for a 5.70 perftest (no parameter block),
//! and a roce peer recognises the `-roce` tag and adds roce's extension
//! (see `crate::ext`). A plain perftest peer never sees a byte of it.

use std::net::{IpAddr, Ipv4Addr};

/// perftest's default TCP port (`DEF_PORT`).
pub const PORT: u16 = 18515;
/// `MAX_VERSION`: the version string's fixed size.
pub const VERSION_LEN: usize = 16;
/// `KEY_MSG_SIZE_GID`: the key message with a GID, NUL included.
pub const KEY_MSG_LEN: usize = 108;
/// What roce announces: perftest 5.70's protocol, tagged as roce's.
pub const ROCE_VERSION: &str = "5.70-roce1";
/// The tag in a version string that marks a roce peer.
pub const ROCE_TAG: &str = "-roce";
/// The oldest peer perftest itself talks to.
pub const MIN_VERSION: f64 = 5.70;
/// From this version on, perftest exchanges its parameter block
/// (`negotiate_params`), which roce does not speak.
#[allow(clippy::approx_constant)] // perftest 6.28, not τ
pub const NEGOTIATE_VERSION: f64 = 6.28;
/// perftest's cycle buffer default: the page size.
pub const CYCLE_BUFFER: u32 = 4096;
/// The largest cycle buffer a peer may announce: perftest announces its
/// page size (4 KiB to 64 KiB on the machines it runs on); both sides size
/// their buffers by the larger of the two, so an unbounded value from the
/// wire would be an allocation of the peer's choosing.
pub const MAX_CYCLE_BUFFER: u32 = 1 << 24;
/// perftest's cache line default.
pub const CACHE_LINE: u32 = 64;

/// What a perftest peer sent that roce cannot take.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum PerftestError {
    /// A fixed-size message that does not parse as perftest's.
    #[error("the peer's {what} is not perftest's: {why} (got {got:?})")]
    Malformed {
        what: &'static str,
        why: String,
        got: String,
    },
    /// A well-formed message roce cannot work with.
    #[error("{0}")]
    Incompatible(String),
}

fn malformed(what: &'static str, why: impl Into<String>, got: &[u8]) -> PerftestError {
    PerftestError::Malformed {
        what,
        why: why.into(),
        got: String::from_utf8_lossy(got).into_owned(),
    }
}

/// The version string as sent: NUL-padded to [`VERSION_LEN`].
pub fn encode_version(v: &str) -> [u8; VERSION_LEN] {
    let mut b = [0u8; VERSION_LEN];
    let n = v.len().min(VERSION_LEN - 1);
    b[..n].copy_from_slice(&v.as_bytes()[..n]);
    b
}

/// The peer's version as perftest reads it.
#[derive(Debug, Clone, PartialEq)]
pub struct PeerVersion {
    pub text: String,
    /// What `atof` makes of it.
    pub number: f64,
    /// The peer is roce perf (it carries [`ROCE_TAG`]).
    pub roce: bool,
}

/// Parses the peer's version string; refuses what perftest itself refuses
/// (older than 5.70). A newer perftest reads 5.70 from [`ROCE_VERSION`]
/// and so skips its 6.28 parameter block, as roce does.
pub fn decode_version(b: &[u8; VERSION_LEN]) -> Result<PeerVersion, PerftestError> {
    let end = b.iter().position(|&c| c == 0).ok_or_else(|| {
        malformed(
            "version string",
            "it is not NUL-terminated within 16 bytes",
            b,
        )
    })?;
    let text = std::str::from_utf8(&b[..end])
        .map_err(|_| malformed("version string", "it is not text", b))?
        .to_string();
    // atof: the longest leading decimal number.
    let lead = text.trim_start();
    let mut n = 0;
    let mut dot = false;
    for c in lead.chars() {
        match c {
            '0'..='9' => n += 1,
            '.' if !dot => {
                dot = true;
                n += 1
            }
            _ => break,
        }
    }
    let number: f64 = lead[..n]
        .parse()
        .map_err(|_| malformed("version string", "it does not start with a number", b))?;
    if number < MIN_VERSION {
        return Err(PerftestError::Incompatible(format!(
            "the peer runs perftest {text}; perftest's exchange needs 5.70 or newer"
        )));
    }
    Ok(PeerVersion {
        roce: text.contains(ROCE_TAG),
        text,
        number,
    })
}

/// A 4-byte int as `hton_int` sends it (`check_sys_data`).
pub fn encode_int(v: u32) -> [u8; 4] {
    v.to_be_bytes()
}

pub fn decode_int(b: [u8; 4]) -> u32 {
    u32::from_be_bytes(b)
}

/// The `ibv_mtu` enum of a path MTU in bytes (256 → 1 … 4096 → 5).
pub fn mtu_enum(bytes: u32) -> Option<u8> {
    match bytes {
        256 => Some(1),
        512 => Some(2),
        1024 => Some(3),
        2048 => Some(4),
        4096 => Some(5),
        _ => None,
    }
}

/// The MTU message: `sprintf("%d", ibv_mtu)`, 2 bytes with the NUL.
pub fn encode_mtu(bytes: u32) -> Option<[u8; 2]> {
    mtu_enum(bytes).map(|e| [b'0' + e, 0])
}

/// The peer's MTU in bytes.
pub fn decode_mtu(b: [u8; 2]) -> Result<u32, PerftestError> {
    match b {
        [d @ b'1'..=b'5', 0] => Ok(128 << (d - b'0')),
        _ => Err(malformed(
            "MTU message",
            "expected one digit 1-5 (the ibv_mtu enum) and a NUL",
            &b,
        )),
    }
}

/// One QP's key message (`struct pingpong_dest` as it travels).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Keys {
    /// 0 on RoCE.
    pub lid: u16,
    /// Outstanding RDMA reads and atomics the side accepts.
    pub out_reads: u16,
    pub qpn: u32,
    pub psn: u32,
    pub rkey: u32,
    pub vaddr: u64,
    pub gid: Gid,
    /// 0 without SRQ/XRC/DC.
    pub srqn: u32,
}

impl Keys {
    /// `KEY_PRINT_FMT_GID` with its NUL.
    pub fn encode(&self) -> [u8; KEY_MSG_LEN] {
        use std::fmt::Write as _;
        let mut s = format!(
            "{:04x}:{:04x}:{:06x}:{:06x}:{:08x}:{:016x}:",
            self.lid, self.out_reads, self.qpn, self.psn, self.rkey, self.vaddr
        );
        for b in self.gid.0 {
            let _ = write!(s, "{b:02x}:");
        }
        let _ = write!(s, "{:08x}:", self.srqn);
        let mut out = [0u8; KEY_MSG_LEN];
        let n = s.len().min(KEY_MSG_LEN - 1);
        out[..n].copy_from_slice(&s.as_bytes()[..n]);
        out
    }

    /// Parses a key message. Strict about the shape (23 `:`-terminated hex
    /// fields, then NULs) and the ranges (QPN and PSN are 24 bits, GID
    /// bytes 8), lenient about field widths as perftest's `strtol` is.
    pub fn decode(b: &[u8; KEY_MSG_LEN]) -> Result<Keys, PerftestError> {
        const WHAT: &str = "key message";
        let end = b
            .iter()
            .position(|&c| c == 0)
            .ok_or_else(|| malformed(WHAT, "it is not NUL-terminated within 108 bytes", b))?;
        let text = std::str::from_utf8(&b[..end]).map_err(|_| malformed(WHAT, "not text", b))?;
        let fields: Vec<&str> = text.split(':').collect();
        // 6 + 16 + 1 fields, each followed by ':' (so a final empty piece).
        if fields.len() != 24 || !fields[23].is_empty() {
            return Err(malformed(
                WHAT,
                format!(
                    "expected 23 ':'-terminated fields (LID, reads, QPN, PSN, rkey, VA, 16 GID bytes, SRQN), found {}",
                    fields.len().saturating_sub(1)
                ),
                &b[..end],
            ));
        }
        let hex = |i: usize, name: &str, max: u64| -> Result<u64, PerftestError> {
            let f = fields[i];
            let v = if f.is_empty() || f.len() > 16 {
                None
            } else {
                u64::from_str_radix(f, 16).ok()
            };
            match v {
                Some(v) if v <= max => Ok(v),
                _ => Err(malformed(
                    WHAT,
                    format!("{name} {f:?} is not hex at most {max:#x}"),
                    &b[..end],
                )),
            }
        };
        let mut gid = [0u8; 16];
        for (k, g) in gid.iter_mut().enumerate() {
            *g = hex(6 + k, "a GID byte", 0xff)? as u8;
        }
        Ok(Keys {
            lid: hex(0, "the LID", 0xffff)? as u16,
            out_reads: hex(1, "the outstanding reads", 0xffff)? as u16,
            qpn: hex(2, "the QPN", 0xff_ffff)? as u32,
            psn: hex(3, "the PSN", 0xff_ffff)? as u32,
            rkey: hex(4, "the rkey", 0xffff_ffff)? as u32,
            vaddr: hex(5, "the VA", u64::MAX)?,
            gid: Gid(gid),
            srqn: hex(22, "the SRQN", 0xffff_ffff)? as u32,
        })
    }
}

/// The GIDs in key messages are the verbs API's (IPv4-mapped for IPv4).
pub use roce_verbs::Gid;

impl Keys {
    /// The IPv4 address of the peer's IPv4-mapped GID, which is what the
    /// engine sends to (`ctx_check_gid_compatibility` refuses mixing the
    /// kinds).
    pub fn ipv4(&self) -> Result<Ipv4Addr, PerftestError> {
        match self.gid.ip() {
            Some(IpAddr::V4(v)) => Ok(v),
            Some(IpAddr::V6(v)) => Err(PerftestError::Incompatible(format!(
                "the peer's GID {v} is an IPv6 address and this side's is IPv4-mapped; give the peer an IPv4 GID (perftest's -x) or use IPv4"
            ))),
            None => Err(PerftestError::Incompatible(
                "the peer sent the zero GID (no RoCEv2 address); give it a GID index with an IPv4 address (perftest's -x)".into(),
            )),
        }
    }
}

impl Keys {
    /// The peer's address from its GID, checked against this side's as
    /// perftest's `ctx_check_gid_compatibility` does: both IPv4-mapped or
    /// both IPv6, never one of each (and never the zero GID, which names
    /// no RoCEv2 address).
    pub fn ip_for(&self, local: IpAddr) -> Result<IpAddr, PerftestError> {
        match (self.gid.ip(), local) {
            (Some(IpAddr::V6(v)), _) if v.segments()[0] & 0xffc0 == 0xfe80 => {
                Err(PerftestError::Incompatible(format!(
                    "the peer's GID {v} is an IPv6 link-local address, which roce cannot reach yet (it carries no scope id): give the peer an IPv4 or global GID (perftest's -x)"
                )))
            }
            (Some(peer), local) if peer.is_ipv4() == local.is_ipv4() => Ok(peer),
            (Some(IpAddr::V6(v)), IpAddr::V4(l)) => Err(PerftestError::Incompatible(format!(
                "the peer's GID {v} is an IPv6 address and this side's ({l}) is IPv4-mapped: give both sides IPv6 addresses (--bind) or the peer an IPv4 GID (perftest's -x)"
            ))),
            (Some(IpAddr::V4(v)), l) => Err(PerftestError::Incompatible(format!(
                "the peer's GID ::ffff:{v} is an IPv4 address and this side's ({l}) is IPv6: give both sides IPv4 addresses (--bind) or the peer an IPv6 GID (perftest's -x)"
            ))),
            _ => Err(PerftestError::Incompatible(
                "the peer sent the zero GID (no RoCEv2 address); give it a GID index with an IP address (perftest's -x)".into(),
            )),
        }
    }
}

/// The order of the key messages and syncs of one perftest test, as its
/// `main` lays them out (perftest 6.29, `src/*_bw.c`, `src/*_lat.c`, RC
/// and UD over Ethernet without RDMA-CM, neither duplex nor DURATION).
/// Each field is one place the tests differ; every message is a 108-byte
/// key message (`ctx_hand_shake`) except the report.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Steps {
    /// One key message on QP 0 before the per-QP keys: the latency tests
    /// of WRITE, READ and atomics (`write_lat.c`, `read_lat.c`,
    /// `atomic_lat.c`); the SEND tests and bandwidth tests start with the
    /// per-QP keys.
    pub keys_first: bool,
    /// The sync after RTR comes right after `ctx_connect`, before the
    /// second round of per-QP keys (`send_bw.c`, `send_lat.c`); the others
    /// send the second round first.
    pub sync_before_second_keys: bool,
    /// A sync before each size's run, once the receiver posted its
    /// receives (`ctx_set_recv_wqes`, then `ctx_hand_shake`): the SEND
    /// tests.
    pub sync_before_size: bool,
    /// With `-a` (`RUN_ALL`), a sync after each size's run too:
    /// `send_bw.c`.
    pub sync_after_size_all: bool,
    /// After the run a sync and the client's report (`xchg_bw_reports`):
    /// the WRITE, READ and atomic bandwidth tests, whose server is passive.
    pub bw_report: bool,
    /// The closing sync (`ctx_close_connection`): every test but
    /// `write_lat`, whose sides end when their ping-pong ends.
    pub close_sync: bool,
}

/// The steps of a test by verb (`send`, `write`, `read`, `atomic`) and kind.
pub fn steps(send: bool, write: bool, bw: bool) -> Steps {
    let lat = !bw;
    Steps {
        keys_first: lat && !send,
        sync_before_second_keys: send,
        sync_before_size: send,
        sync_after_size_all: send && bw,
        bw_report: bw && !send,
        close_sync: !(lat && write),
    }
}

/// The client's report after a bandwidth run (`struct bw_report_data`'s
/// exchanged fields), in perftest's order.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct BwReport {
    pub size: u64,
    pub iters: u64,
    /// MiB/s, as perftest's default report format.
    pub bw_peak: f64,
    pub bw_avg: f64,
    /// Mpps.
    pub msg_rate: f64,
}

impl BwReport {
    /// The five 8-byte big-endian words, each its own exchange.
    pub fn words(&self) -> [[u8; 8]; 5] {
        [
            self.size.to_be_bytes(),
            self.iters.to_be_bytes(),
            self.bw_peak.to_bits().to_be_bytes(),
            self.bw_avg.to_bits().to_be_bytes(),
            self.msg_rate.to_bits().to_be_bytes(),
        ]
    }

    pub fn from_words(w: [[u8; 8]; 5]) -> BwReport {
        let f = |b: [u8; 8]| f64::from_bits(u64::from_be_bytes(b));
        BwReport {
            size: u64::from_be_bytes(w[0]),
            iters: u64::from_be_bytes(w[1]),
            bw_peak: f(w[2]),
            bw_avg: f(w[3]),
            msg_rate: f(w[4]),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What perftest's `sprintf(msg, KEY_PRINT_FMT_GID, ...)` writes for
    /// lid 0, out_reads 16, QPN 0x11, PSN 0xabcdef, rkey 0x1234,
    /// VA 0x7f00deadbeef and the GID of 192.168.1.10, SRQN 0: the format
    /// `%04x:%04x:%06x:%06x:%08x:%016llx:` + 16 × `%02x:` + `%08x:`.
    const RXE_KEYS: &str = "0000:0010:000011:abcdef:00001234:00007f00deadbeef:00:00:00:00:00:00:00:00:00:00:ff:ff:c0:a8:01:0a:00000000:";

    fn sample() -> Keys {
        Keys {
            lid: 0,
            out_reads: 16,
            qpn: 0x11,
            psn: 0xabcdef,
            rkey: 0x1234,
            vaddr: 0x7f00_dead_beef,
            gid: Gid::from_ip("192.168.1.10".parse().unwrap()),
            srqn: 0,
        }
    }

    /// rxe's default GID (index 0) is the link-local address; a peer that
    /// announces it cannot be reached without a scope, and says so.
    #[test]
    fn a_link_local_peer_gid_is_one_clear_error() {
        let mut k = sample();
        k.gid = Gid::from_ip("fe80::1c2:3ff:fe04:506".parse().unwrap());
        let e = k
            .ip_for("fd00::1".parse().unwrap())
            .unwrap_err()
            .to_string();
        assert!(e.contains("link-local"), "{e}");
        k.gid = Gid::from_ip("fd00::2".parse().unwrap());
        assert_eq!(
            k.ip_for("fd00::1".parse().unwrap()).unwrap(),
            "fd00::2".parse::<IpAddr>().unwrap()
        );
    }

    #[test]
    fn key_message_is_perftests_gid_format() {
        assert_eq!(RXE_KEYS.len(), KEY_MSG_LEN - 1);
        let b = sample().encode();
        assert_eq!(&b[..KEY_MSG_LEN - 1], RXE_KEYS.as_bytes());
        assert_eq!(b[KEY_MSG_LEN - 1], 0);
        let mut wire = [0u8; KEY_MSG_LEN];
        wire[..RXE_KEYS.len()].copy_from_slice(RXE_KEYS.as_bytes());
        let k = Keys::decode(&wire).unwrap();
        assert_eq!(k, sample());
        assert_eq!(k.ipv4().unwrap(), Ipv4Addr::new(192, 168, 1, 10));
    }

    #[test]
    fn key_message_takes_wide_fields_as_strtol_does() {
        // A 32-bit VA printed without padding still parses.
        let s = "0:10:11:1:2:ffff:00:00:00:00:00:00:00:00:00:00:ff:ff:0a:00:00:01:0:";
        let mut wire = [0u8; KEY_MSG_LEN];
        wire[..s.len()].copy_from_slice(s.as_bytes());
        let k = Keys::decode(&wire).unwrap();
        assert_eq!((k.qpn, k.psn, k.vaddr), (0x11, 1, 0xffff));
        assert_eq!(k.ipv4().unwrap(), Ipv4Addr::new(10, 0, 0, 1));
    }

    #[test]
    fn bad_key_messages_are_one_clear_error() {
        let cases: [(&[u8], &str); 5] = [
            (b"{\"Hello\":{}}\n", "23 ':'-terminated fields"),
            (&[b'x'; KEY_MSG_LEN], "NUL-terminated"),
            (
                b"0000:0010:1000000:abcdef:00001234:7f00deadbeef:00:00:00:00:00:00:00:00:00:00:ff:ff:c0:a8:01:0a:00000000:",
                "the QPN",
            ),
            (
                b"0000:0010:000011:abcdef:00001234:7f00deadbeef:00:00:00:00:00:00:00:00:00:00:ff:ff:c0:a8:01:100:00000000:",
                "a GID byte",
            ),
            (
                b"0000:0010:000011:abcdef:0000123g:00007f00deadbeef:00:00:00:00:00:00:00:00:00:00:ff:ff:c0:a8:01:0a:00000000:",
                "the rkey",
            ),
        ];
        for (got, why) in cases {
            let mut wire = [0u8; KEY_MSG_LEN];
            let n = got.len().min(KEY_MSG_LEN);
            wire[..n].copy_from_slice(&got[..n]);
            let e = Keys::decode(&wire).unwrap_err();
            assert!(e.to_string().contains(why), "{e}");
            assert!(e.to_string().contains("not perftest's"), "{e}");
        }
    }

    #[test]
    fn ipv6_gid_is_refused_against_an_ipv4_side() {
        let mut k = sample();
        k.gid = Gid::from_ip("fd00::2".parse().unwrap());
        let k = Keys::decode(&k.encode()).unwrap();
        assert!(k.ipv4().unwrap_err().to_string().contains("IPv6"));
    }

    #[test]
    fn versions_as_atof_reads_them() {
        // perftest 6.29's own string (VERSION in configure.ac).
        let v = decode_version(&encode_version("6.29")).unwrap();
        assert_eq!((v.number, v.roce), (6.29, false));
        let v = decode_version(&encode_version(ROCE_VERSION)).unwrap();
        assert_eq!((v.number, v.roce), (5.70, true));
        assert!(v.number < NEGOTIATE_VERSION);
        assert_eq!(&encode_version(ROCE_VERSION)[..11], b"5.70-roce1\0");
        assert!(matches!(
            decode_version(&encode_version("5.3")),
            Err(PerftestError::Incompatible(_))
        ));
        assert!(matches!(
            decode_version(b"RoCE roce roce r"),
            Err(PerftestError::Malformed { .. })
        ));
        assert!(matches!(
            decode_version(&encode_version("{\"Hello\"")),
            Err(PerftestError::Malformed { .. })
        ));
    }

    #[test]
    fn mtu_and_ints_as_perftest_sends_them() {
        // sprintf("%d", IBV_MTU_4096) = "5".
        assert_eq!(encode_mtu(4096), Some(*b"5\0"));
        assert_eq!(encode_mtu(1024), Some(*b"3\0"));
        assert_eq!(encode_mtu(1500), None);
        assert_eq!(decode_mtu(*b"1\0"), Ok(256));
        assert_eq!(decode_mtu(*b"4\0"), Ok(2048));
        assert!(decode_mtu(*b"9\0").is_err());
        assert!(decode_mtu(*b"40").is_err());
        // hton_int(4096)
        assert_eq!(encode_int(4096), [0, 0, 0x10, 0]);
        assert_eq!(decode_int([0, 0, 0, 64]), 64);
    }

    #[test]
    fn bw_report_words_are_big_endian() {
        let r = BwReport {
            size: 65536,
            iters: 5000,
            bw_peak: 1.5,
            bw_avg: 1.0,
            msg_rate: 0.25,
        };
        let w = r.words();
        assert_eq!(w[0], [0, 0, 0, 0, 0, 1, 0, 0]);
        assert_eq!(w[1], [0, 0, 0, 0, 0, 0, 0x13, 0x88]);
        // hton_double(1.0): 0x3ff0000000000000 big-endian.
        assert_eq!(w[3], [0x3f, 0xf0, 0, 0, 0, 0, 0, 0]);
        assert_eq!(BwReport::from_words(w), r);
    }
}
