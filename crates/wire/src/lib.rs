//! `roce-wire`: RoCEv2 packets, byte-exact.
//!
//! Two levels, as in smoltcp: packet views (`BthPacket`, `Ipv4Packet`, …)
//! over any `AsRef<[u8]>` that check their length once in `new_checked`, and
//! `Repr` types with `parse`/`emit`/`buffer_len` that say what the bytes mean.
//! [`frame::FrameRepr`] builds a whole frame (Ethernet to ICRC) and
//! [`frame::parse_frame`] reads one back. The opcode table in [`opcode`] is the
//! single source of truth for which headers each packet carries.

#![forbid(unsafe_code)]

pub mod bth;
pub mod error;
pub mod eth;
pub mod ext;
pub mod frame;
pub mod icrc;
pub mod ipv4;
pub mod ipv6;
pub mod opcode;
pub mod pcap;
pub mod pfc;
pub mod psn;
pub mod sample;
pub mod transport;
pub mod udp;

pub use bth::{BTH_LEN, BthPacket, BthRepr};
pub use error::{Error, Result};
pub use eth::{EthernetRepr, Mac, VlanTag};
pub use ext::{
    AethRepr, AtomicAckEthRepr, AtomicEthRepr, DethRepr, NakCode, RNR_TIMER_US, RethRepr, Syndrome,
    rnr_code_for_us,
};
pub use frame::{Frame, FrameRepr, IpRepr, RoceFrame, parse_frame, parse_frame_ports};
pub use ipv4::Ipv4Repr;
pub use ipv6::Ipv6Repr;
pub use opcode::{Headers, Opcode, Transport};
pub use pfc::PfcRepr;
pub use psn::Psn;
pub use transport::{ICRC_LEN, TransportPacket, TransportRepr};
pub use udp::{ROCEV2_PORT, UdpRepr};
