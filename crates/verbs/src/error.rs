//! The verbs layer's one error type. Transport failures are not errors:
//! they arrive as completions with a `WcStatus`, as on real hardware.

use std::net::SocketAddr;
use std::time::Duration;

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("{context}: {source}")]
    Io {
        context: String,
        #[source]
        source: std::io::Error,
    },
    #[error(transparent)]
    Verbs(#[from] roce_rnic::VerbsError),
    #[error(transparent)]
    Post(#[from] roce_rnic::PostError),
    #[error(
        "{0}: open the device on a specific local address (the ICRC covers the source IP, so it must be known)"
    )]
    UnspecifiedAddress(SocketAddr),
    #[error("UDP {0} is already in use (another RoCE stack?); choose another UDP port")]
    AddrInUse(SocketAddr),
    #[error(
        "path MTU mismatch: this side uses {local} B, the peer {remote} B; run both sides with the same -m/--mtu"
    )]
    MtuMismatch { local: u32, remote: u32 },
    #[error("the peer's endpoint is invalid: {0}")]
    BadEndpoint(String),
    #[error("out-of-band exchange with {peer}: {why}")]
    Exchange { peer: String, why: String },
    #[error("timed out after {0:?} waiting for completions")]
    Timeout(Duration),
    #[error(
        "SRQ limit {limit} is above the SRQ's size {max_wr}: the event fires when fewer than `limit` receives remain, so the limit must be at most the size"
    )]
    SrqLimit { limit: u32, max_wr: u32 },
    #[error(
        "the {0} belongs to another device (context); a QP takes only its own device's objects"
    )]
    WrongDevice(&'static str),
    #[error(
        "{remote} and the device address {local} are of different IP families: an IPv6 address cannot talk to an IPv4 peer (nor the reverse) over RoCEv2"
    )]
    AddressFamily {
        local: SocketAddr,
        remote: SocketAddr,
    },
    #[error("{0}")]
    Pcap(#[from] roce_wire::pcap::PcapError),
    #[error("memory access outside the region: offset {off} + {len} > {region} bytes")]
    OutOfRegion {
        off: usize,
        len: usize,
        region: usize,
    },
}

pub type Result<T> = std::result::Result<T, Error>;
