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

/// One entry of a port's GID table (`ibv_query_gid` and the entry's
/// `gid_type`, always RoCEv2 here).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GidEntry {
    pub index: u32,
    pub gid: Gid,
    /// The interface the address is on (show_gids' `DEV` column).
    pub netdev: String,
}

impl GidEntry {
    /// The address a device opens on to have this GID.
    pub fn ip(&self) -> IpAddr {
        self.gid.ip().unwrap_or(IpAddr::V6(Ipv6Addr::UNSPECIFIED))
    }
}

/// The GID table of the port on `netdev`, as rxe fills it from the
/// interface's addresses (the kernel's `roce_gid_mgmt`): the IPv6
/// link-local address first (rxe's default GID), then each IPv4 address
/// IPv4-mapped, then the other IPv6 addresses, in the order the interface
/// lists them; one RoCEv2 entry each (rxe's port is RoCEv2 only —
/// `rxe_port_immutable` sets `RDMA_CORE_PORT_IBA_ROCE_UDP_ENCAP` alone —
/// so the indexes match rxe's; a NIC that also has RoCE v1 lists a v1 twin
/// of each entry and numbers differently).
pub fn gid_table(netdev: &str) -> Vec<GidEntry> {
    table_from(netdev, &crate::sys::interface_addresses())
}

/// Every interface's GID table, interfaces in the order they are listed.
pub fn gid_tables() -> Vec<(String, Vec<GidEntry>)> {
    let addrs = crate::sys::interface_addresses();
    let mut names: Vec<String> = Vec::new();
    for (n, _) in &addrs {
        if !names.contains(n) {
            names.push(n.clone());
        }
    }
    names
        .into_iter()
        .map(|n| {
            let t = table_from(&n, &addrs);
            (n, t)
        })
        .collect()
}

/// The interface holding `ip` (the one with that address, else the one
/// whose subnet holds it, as 127.0.0.2 is lo's).
pub fn netdev_of(ip: IpAddr) -> Option<String> {
    crate::sys::interface_name(ip)
}

fn table_from(netdev: &str, addrs: &[(String, IpAddr)]) -> Vec<GidEntry> {
    let mine = || addrs.iter().filter(|(n, _)| n == netdev).map(|(_, ip)| *ip);
    let link_local = |ip: &IpAddr| matches!(ip, IpAddr::V6(v) if v.is_unicast_link_local());
    let ordered = mine()
        .filter(link_local)
        .chain(mine().filter(IpAddr::is_ipv4))
        .chain(mine().filter(|ip| ip.is_ipv6() && !link_local(ip)));
    ordered
        .enumerate()
        .map(|(i, ip)| GidEntry {
            index: i as u32,
            gid: Gid::from_ip(ip),
            netdev: netdev.to_string(),
        })
        .collect()
}

impl Gid {
    /// As show_gids prints a GID: eight groups of four hex digits.
    pub fn to_show_gids(&self) -> String {
        self.0
            .chunks(2)
            .map(|c| format!("{:02x}{:02x}", c[0], c[1]))
            .collect::<Vec<_>>()
            .join(":")
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
    fn gid_table_orders_as_rxe() {
        let addrs: Vec<(String, IpAddr)> = [
            ("lo", "127.0.0.1"),
            ("eth0", "10.0.0.5"),
            ("eth0", "2001:db8::5"),
            ("eth0", "fe80::1:2"),
            ("eth0", "10.0.1.5"),
            ("lo", "::1"),
        ]
        .iter()
        .map(|(n, a)| (n.to_string(), a.parse().unwrap()))
        .collect();
        let t = table_from("eth0", &addrs);
        let ips: Vec<String> = t.iter().map(|e| e.ip().to_string()).collect();
        assert_eq!(ips, ["fe80::1:2", "10.0.0.5", "10.0.1.5", "2001:db8::5"]);
        assert_eq!(t[1].gid.to_string(), "::ffff:10.0.0.5");
        assert_eq!(
            t[1].gid.to_show_gids(),
            "0000:0000:0000:0000:0000:ffff:0a00:0005"
        );
        assert_eq!((t[3].index, t[3].netdev.as_str()), (3, "eth0"));
        let lo = table_from("lo", &addrs);
        assert_eq!(lo.len(), 2);
        assert!(table_from("eth9", &addrs).is_empty());
    }

    #[test]
    fn this_hosts_lo_has_its_loopback_gids() {
        let lo = gid_table("lo");
        assert!(
            lo.iter().any(|e| e.ip() == IpAddr::from([127, 0, 0, 1])),
            "{lo:?}"
        );
        assert_eq!(
            netdev_of("127.0.0.2".parse().unwrap()).as_deref(),
            Some("lo")
        );
    }

    #[test]
    fn bad_wire_gids_are_refused() {
        for s in ["", "00", &"0".repeat(31), &"g".repeat(32), &"0".repeat(33)] {
            assert!(Gid::from_wire(s).is_err(), "{s:?}");
        }
    }
}
