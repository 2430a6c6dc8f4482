//! What one side tells the other before RDMA can start: where its QP is
//! (IP, UDP port, QPN), where its packet numbering starts (PSN), the path
//! MTU, and the memory it exposes (address, length, rkey). libibverbs
//! programs pass this over a TCP socket or a file; [`crate::exchange`] does
//! the TCP part.

use serde::{Deserialize, Serialize};
use std::net::{IpAddr, SocketAddr};

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Endpoint {
    /// The device's IP address (its GID: IPv4-mapped for IPv4, see
    /// [`crate::Gid`]). On the wire of the JSON exchange it is the address
    /// as text, as before for IPv4.
    pub ip: IpAddr,
    pub udp_port: u16,
    pub qpn: u32,
    /// First PSN the side sends (the peer's expected PSN).
    pub psn: u32,
    /// Path MTU in bytes.
    pub mtu: u32,
    /// Exposed region: address, length, rkey (all 0 when none).
    pub addr: u64,
    pub len: u64,
    pub rkey: u32,
}

impl Endpoint {
    pub fn socket_addr(&self) -> SocketAddr {
        SocketAddr::new(self.ip, self.udp_port)
    }

    /// The remote address `off` bytes into the exposed region.
    pub fn remote_addr(&self, off: u64) -> u64 {
        self.addr + off
    }
}
