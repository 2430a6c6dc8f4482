//! RoCEv2 GIDs. A RoCEv2 port is addressed by its IP address, written as a
//! 128-bit GID: an IPv6 address as itself, an IPv4 address IPv4-mapped
//! (`::ffff:a.b.c.d`, RFC 4291 2.5.5.2), as the RoCEv2 annex (IBA A17.4.5.1)
//! and Linux's GID table store them. Every device here has one GID, the
//! address it is opened on: index 0 of its table.

use crate::error::{Error, Result};
use std::fmt;
use std::net::{IpAddr, Ipv6Addr};

/// A 16-byte GID in network order (`union ibv_gid`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct Gid(pub [u8; 16]);

impl Gid {
    /// The GID of an IP address (IPv4 addresses IPv4-mapped).
    pub fn from_ip(ip: IpAddr) -> Gid {
        match ip {
            IpAddr::V4(a) => Gid(a.to_ipv6_mapped().octets()),
            IpAddr::V6(a) => Gid(a.octets()),
        }
    }

    /// The all-zero GID, what a libibverbs example sends when given no GID
    /// index (InfiniBand without a GRH).
    pub fn is_zero(&self) -> bool {
        self.0 == [0; 16]
    }

    /// The IP address this GID names: IPv4 for an IPv4-mapped GID, else
    /// IPv6; `None` for the zero GID.
    pub fn ip(&self) -> Option<IpAddr> {
        if self.is_zero() {
            return None;
        }
        let v6 = Ipv6Addr::from(self.0);
        Some(match v6.to_ipv4_mapped() {
            Some(v4) => IpAddr::V4(v4),
            None => IpAddr::V6(v6),
        })
    }

    /// The 32 hex digits rdma-core's examples send (`gid_to_wire_gid`):
    /// four 32-bit words in network order, each `%08x`, so the bytes in order.
    pub fn to_wire(&self) -> String {
        self.0.iter().map(|b| format!("{b:02x}")).collect()
    }

    /// Parses the 32-hex-digit form of [`to_wire`](Self::to_wire).
    pub fn from_wire(s: &str) -> Result<Gid> {
        let bad = || Error::BadEndpoint(format!("{s:?} is not a GID (32 hex digits)"));
        if s.len() != 32 || !s.bytes().all(|b| b.is_ascii_hexdigit()) {
            return Err(bad());
        }
        let mut g = [0u8; 16];
        for (i, b) in g.iter_mut().enumerate() {
            *b = u8::from_str_radix(&s[2 * i..2 * i + 2], 16).map_err(|_| bad())?;
        }
        Ok(Gid(g))
    }
}

/// As `inet_ntop(AF_INET6, …)` prints it (`::ffff:10.0.0.1`, `fd00::1`, `::`).
impl fmt::Display for Gid {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", Ipv6Addr::from(self.0))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ipv4_is_mapped_and_back() {
        let g = Gid::from_ip("10.1.16.62".parse().unwrap());
        assert_eq!(g.to_string(), "::ffff:10.1.16.62");
        assert_eq!(g.to_wire(), "00000000000000000000ffff0a01103e");
        assert_eq!(g.ip(), Some("10.1.16.62".parse().unwrap()));
        assert_eq!(Gid::from_wire(&g.to_wire()).unwrap(), g);
    }

    #[test]
    fn ipv6_is_itself_and_zero_is_none() {
        let g = Gid::from_ip("fd00::2".parse().unwrap());
        assert_eq!(g.to_string(), "fd00::2");
        assert_eq!(g.to_wire(), "fd000000000000000000000000000002");
        assert_eq!(g.ip(), Some("fd00::2".parse().unwrap()));
        assert_eq!(Gid::default().to_string(), "::");
        assert_eq!(Gid::default().ip(), None);
    }

    #[test]
    fn bad_wire_gids_are_refused() {
        for s in ["", "00", &"0".repeat(31), &"g".repeat(32), &"0".repeat(33)] {
            assert!(Gid::from_wire(s).is_err(), "{s:?}");
        }
    }
}
