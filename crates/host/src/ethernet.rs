//! Ethernet and RoCEv2 framing: how many bytes a message costs on the wire.
//!
//! The seed's §5.4: line rate is not application throughput; a port also
//! carries the preamble and start-of-frame delimiter, the inter-frame gap,
//! the Ethernet, IP and UDP headers, the InfiniBand transport headers (BTH
//! and, per opcode, RETH/AETH/AtomicETH), the ICRC and the FCS. Sizes come
//! from IEEE 802.3 (preamble 7 + SFD 1, minimum frame 64 B, IFG 12 byte
//! times, FCS 4) and the IBA Annex A17 RoCEv2 layout, whose header lengths
//! are `roce_wire`'s constants. The IFG is the standard 12 bytes (a MAC may
//! shrink it to 1–5 bytes above 10G; we do not assume it does).
//!
//! FEC costs no MAC throughput at 100G and above: RS(528,514) with
//! 256b/257b transcoding fits in the PCS rate (IEEE 802.3 clause 91), so
//! the port's nominal speed is its MAC data rate.

use crate::workload::Op;
use roce_wire::{AethRepr, AtomicAckEthRepr, AtomicEthRepr, BTH_LEN, ICRC_LEN, RethRepr};
use serde::Deserialize;

/// Preamble (7) and start-of-frame delimiter (1).
pub const PREAMBLE_SFD: u64 = 8;
/// Inter-frame gap, in byte times.
pub const IFG: u64 = 12;
/// Destination MAC, source MAC, EtherType.
pub const ETH_HEADER: u64 = 14;
/// An 802.1Q tag.
pub const VLAN_TAG: u64 = 4;
/// Frame check sequence.
pub const FCS: u64 = 4;
/// Smallest frame, Ethernet header through FCS.
pub const MIN_FRAME: u64 = 64;
const IPV4: u64 = roce_wire::ipv4::IPV4_HEADER_LEN as u64;
const IPV6: u64 = roce_wire::ipv6::IPV6_HEADER_LEN as u64;
const UDP: u64 = roce_wire::udp::UDP_HEADER_LEN as u64;
const BTH: u64 = BTH_LEN as u64;
const ICRC: u64 = ICRC_LEN as u64;
const RETH: u64 = RethRepr::LEN as u64;
const AETH: u64 = AethRepr::LEN as u64;
const ATOMIC_ETH: u64 = AtomicEthRepr::LEN as u64;
const ATOMIC_ACK_ETH: u64 = AtomicAckEthRepr::LEN as u64;

/// Which encapsulation the fabric uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Framing {
    /// 802.1Q tagged frames (PFC needs a priority, often carried this way).
    pub vlan: bool,
    /// IPv6 instead of IPv4.
    pub ipv6: bool,
}

/// Packets one message puts on the wire in the direction its data flows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Packets {
    pub count: u64,
    /// Bytes on the wire: preamble, frame and IFG of every packet.
    pub wire_bytes: u64,
    /// Application bytes carried.
    pub payload: u64,
}

impl Framing {
    /// Frame bytes (Ethernet header to FCS) of a RoCEv2 packet with
    /// `ext` transport-extension bytes after the BTH and `payload` bytes,
    /// padded to 4 (BTH pad count) and to the minimum frame.
    pub fn frame_bytes(&self, ext: u64, payload: u64) -> u64 {
        let l2 = ETH_HEADER + if self.vlan { VLAN_TAG } else { 0 };
        let ip = if self.ipv6 { IPV6 } else { IPV4 };
        let pad = payload.next_multiple_of(4);
        (l2 + ip + UDP + BTH + ext + pad + ICRC + FCS).max(MIN_FRAME)
    }

    /// Wire bytes of that packet: the frame plus preamble, SFD and IFG.
    pub fn wire_bytes(&self, ext: u64, payload: u64) -> u64 {
        PREAMBLE_SFD + self.frame_bytes(ext, payload) + IFG
    }

    /// The data-direction packets of one message of `size` bytes with
    /// path MTU `mtu` (RoCE MTU: payload bytes per packet).
    ///
    /// WRITE: the first packet carries a RETH. SEND: BTH only. READ: the
    /// response packets, first and last (or only) with an AETH. ATOMIC:
    /// the request, BTH + AtomicETH (its 8 operand bytes are the header).
    pub fn message(&self, op: Op, size: u64, mtu: u64) -> Packets {
        let mtu = mtu.max(1);
        if op == Op::Atomic {
            return Packets {
                count: 1,
                wire_bytes: self.wire_bytes(ATOMIC_ETH, 0),
                payload: 8,
            };
        }
        let count = size.div_ceil(mtu).max(1);
        let mut wire = 0;
        for i in 0..count {
            let payload = if i + 1 < count {
                mtu
            } else {
                size - mtu * (count - 1)
            };
            let ext = match op {
                Op::Write if i == 0 => RETH,
                Op::Read if i == 0 || i + 1 == count => AETH,
                _ => 0,
            };
            wire += self.wire_bytes(ext, payload);
        }
        Packets {
            count,
            wire_bytes: wire,
            payload: size,
        }
    }

    /// Bytes the message's requester-side control packets put on the
    /// *reverse* direction: the READ request (BTH + RETH), the ATOMIC
    /// response (BTH + AETH + AtomicAckETH) and one coalesced ACK (BTH +
    /// AETH) per SEND/WRITE message.
    pub fn reverse(&self, op: Op) -> Packets {
        let ext = match op {
            Op::Read => RETH,
            Op::Atomic => AETH + ATOMIC_ACK_ETH,
            Op::Send | Op::Write => AETH,
        };
        Packets {
            count: 1,
            wire_bytes: self.wire_bytes(ext, 0),
            payload: 0,
        }
    }

    /// Application goodput of back-to-back messages on a port of
    /// `port_gbps`, Gb/s.
    pub fn goodput_gbps(&self, port_gbps: f64, op: Op, size: u64, mtu: u64) -> f64 {
        let p = self.message(op, size, mtu);
        port_gbps * p.payload as f64 / p.wire_bytes as f64
    }

    /// Packets per second a port of `port_gbps` carries for this message
    /// shape, in millions.
    pub fn port_mpps(&self, port_gbps: f64, op: Op, size: u64, mtu: u64) -> f64 {
        let p = self.message(op, size, mtu);
        port_gbps * 1e3 / 8.0 * p.count as f64 / p.wire_bytes as f64
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const V4: Framing = Framing {
        vlan: false,
        ipv6: false,
    };

    #[test]
    fn per_packet_overhead_is_82_bytes_for_ipv4() {
        // 8 (preamble+SFD) + 14 + 20 + 8 + 12 (BTH) + 4 (ICRC) + 4 (FCS)
        // + 12 (IFG) = 82 bytes around the payload.
        assert_eq!(V4.wire_bytes(0, 1000), 1082);
        let v6 = Framing {
            vlan: true,
            ipv6: true,
        };
        assert_eq!(v6.wire_bytes(0, 1000), 1082 + 4 + 20);
    }

    #[test]
    fn goodput_per_mtu_at_100g() {
        // A 1 MiB WRITE, MTU 4096: 256 packets of 4096 + 82, plus 16 B of
        // RETH once: 100 × 1048576 / (256 × 4178 + 16) = 98.04 Gb/s.
        let g = V4.goodput_gbps(100.0, Op::Write, 1 << 20, 4096);
        assert!((g - 98.036).abs() < 0.01, "{g}");
        // MTU 1024: 1024 packets of 1106 → 92.58 Gb/s.
        let g = V4.goodput_gbps(100.0, Op::Write, 1 << 20, 1024);
        assert!((g - 92.587).abs() < 0.01, "{g}");
        // MTU 256: 256/338 → 75.74 Gb/s.
        let g = V4.goodput_gbps(100.0, Op::Send, 1 << 20, 256);
        assert!((g - 75.74).abs() < 0.01, "{g}");
    }

    #[test]
    fn small_messages_and_pps() {
        // A 64 B SEND: 64 + 82 = 146 B on the wire → 100e9 / (146 × 8)
        // = 85.62 Mpps and 43.84 Gb/s of goodput.
        assert_eq!(V4.message(Op::Send, 64, 4096).wire_bytes, 146);
        assert!((V4.port_mpps(100.0, Op::Send, 64, 4096) - 85.616).abs() < 0.01);
        assert!((V4.goodput_gbps(100.0, Op::Send, 64, 4096) - 43.836).abs() < 0.01);
        // A 1-byte payload pads to 4: frame 14+20+8+12+4+4+4 = 66 ≥ 64.
        assert_eq!(V4.frame_bytes(0, 1), 66);
        // An ACK-sized frame under 64 B is padded to the minimum frame.
        assert_eq!(V4.frame_bytes(0, 0), 64);
    }

    #[test]
    fn opcode_headers() {
        // READ of 8192 B, MTU 4096: two responses, first and last with AETH.
        let r = V4.message(Op::Read, 8192, 4096);
        assert_eq!((r.count, r.wire_bytes), (2, 2 * (4096 + 82 + 4)));
        // Three packets: the middle one has no AETH.
        assert_eq!(
            V4.message(Op::Read, 3 * 1024, 1024).wire_bytes,
            3 * 1106 + 8
        );
        // ATOMIC: BTH + AtomicETH(28), no payload: 82 + 28 = 110.
        assert_eq!(V4.message(Op::Atomic, 8, 4096).wire_bytes, 110);
        // A zero-length WRITE is still one packet.
        assert_eq!(V4.message(Op::Write, 0, 4096).count, 1);
        assert_eq!(V4.reverse(Op::Read).wire_bytes, 82 + 16);
    }
}
