//! A flow with the fabric to itself: the base RTT between hosts and the
//! ideal flow completion time, each computed here and nowhere else.
//!
//! Two conventions live side by side, each where its reader needs it:
//!
//! - ours, to the picosecond with whole frames on the wire: the base RTT
//!   the congestion controllers are given ([`crate::cc`]) and `fct.csv`'s
//!   `ideal_fct_ns`, the slowdown's denominator ([`ideal_fct`]);
//! - the HPCC ns-3 simulator's (`scratch/third.cc`: `CalculateRoute`'s
//!   `pairRtt` and `qp_finish`'s standalone FCT), with delays and one
//!   `PACKET_PAYLOAD_SIZE` packet's serialization per hop in whole
//!   nanoseconds: HPCC's T under `--hpcc-config` and the last column of
//!   `FCT_OUTPUT_FILE` ([`ns3_standalone_fct_ns`]), so a drop-in run reads
//!   as ns-3's does.

use crate::event::{PS_PER_NS, Ps, ser_ps};
use crate::packet::{FCS, L2_L4_HEADER, frame_len};
use crate::topology::{PortRef, Routes, Topology};
use roce_rnic::Mtu;
use roce_wire::{BthRepr, Opcode, RethRepr, TransportRepr};

/// What one hop of a base RTT serializes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HopCost {
    /// One `wire`-byte frame per hop, to the picosecond (ours).
    Frame { wire: u64 },
    /// third.cc's `pairRtt`: each link's delay and one `payload`-byte
    /// packet's serialization, each rounded down to whole ns per hop.
    Ns3 { payload: u32 },
}

/// Bytes in flight over `rtt_ns` at `bps`: third.cc's BDP (`maxBdp`,
/// `pairBdp`), rounded down.
pub fn bdp_bytes(rtt_ns: u64, bps: u64) -> u64 {
    (u128::from(rtt_ns) * u128::from(bps) / 1_000_000_000 / 8) as u64
}

/// A path's base RTT: twice its propagation delay plus one packet
/// serialized at every hop (HPCC ns-3's definition), per `hop`.
pub fn path_rtt_ps(path: &[PortRef], hop: HopCost) -> Ps {
    match hop {
        HopCost::Frame { wire } => path
            .iter()
            .map(|p| 2 * p.delay_ps + ser_ps(wire, p.rate_bps))
            .sum(),
        HopCost::Ns3 { payload } => {
            let ns: u64 = path
                .iter()
                .map(|p| {
                    2 * (p.delay_ps / PS_PER_NS)
                        + u64::from(payload) * 1_000_000_000 * 8 / p.rate_bps
                })
                .sum();
            ns * PS_PER_NS
        }
    }
}

/// Fabrics up to this many hosts are measured over every host pair (as
/// third.cc's `maxRtt` always is); larger ones from three sources (the
/// first, middle and last host), which symmetric fabrics make enough.
const ALL_PAIRS_UP_TO: u32 = 512;

/// The largest [`path_rtt_ps`] between two hosts: the fabric's base RTT,
/// HPCC's T.
pub fn max_base_rtt_ps(topo: &Topology, routes: &Routes, hop: HopCost) -> Ps {
    let n = topo.n_hosts() as u32;
    let sources: Vec<u32> = if n <= ALL_PAIRS_UP_TO {
        (0..n).collect()
    } else {
        vec![0, n / 2, n - 1]
    };
    let mut best = 0;
    for &s in &sources {
        for d in (0..n).filter(|&d| d != s) {
            best = best.max(path_rtt_ps(&topo.path(routes, s, d), hop));
        }
    }
    best
}

/// The flow completion time with the fabric to itself: the sender
/// serializes every packet at the path's slowest link, the largest packet
/// is store-and-forwarded once by every other hop, every link's delay is
/// paid, and the final ACK returns over the same links.
pub fn ideal_fct(path: &[PortRef], size: u64, mtu: Mtu, ifg: u64) -> Ps {
    if path.is_empty() {
        return 0;
    }
    let m = u64::from(mtu.bytes());
    let n = size.div_ceil(m).max(1);
    let wire = |op: Opcode, reth: bool, len: u64| {
        let mut t = TransportRepr::new(BthRepr {
            opcode: op,
            ..Default::default()
        });
        if reth {
            t.reth = Some(RethRepr::default());
        }
        frame_len(&t, len as usize) + ifg
    };
    let (total_wire, max_wire) = if n == 1 {
        let w = wire(Opcode::RcWriteOnly, true, size);
        (w, w)
    } else {
        let first = wire(Opcode::RcWriteFirst, true, m);
        let mid = wire(Opcode::RcWriteMiddle, false, m);
        let last = wire(Opcode::RcWriteLast, false, size - (n - 1) * m);
        (first + mid * (n - 2) + last, first.max(mid).max(last))
    };
    let rmin = path.iter().map(|p| p.rate_bps).min().unwrap_or(1);
    let mut t = ser_ps(total_wire, rmin);
    let ack = 66 + ifg;
    for p in path {
        t += p.delay_ps * 2 + ser_ps(ack, p.rate_bps);
        if p.rate_bps != rmin {
            t += ser_ps(max_wire, p.rate_bps);
        }
    }
    // Every hop but one bottleneck store-and-forwards the largest packet.
    let bottlenecks = path.iter().filter(|p| p.rate_bps == rmin).count() as u64;
    t += ser_ps(max_wire, rmin) * bottlenecks.saturating_sub(1);
    t
}

/// third.cc's standalone FCT (`qp_finish`), in ns: the pair's base RTT
/// ([`HopCost::Ns3`] with `payload`, `PACKET_PAYLOAD_SIZE`) plus the flow's
/// bytes with per-packet headers at the path's slowest link. The headers
/// are ours (RoCEv2 data-packet headers, FCS and `ifg`, from the first
/// packet's RETH on, `mtu` per packet) where ns-3 counts its own 48 bytes.
pub fn ns3_standalone_fct_ns(path: &[PortRef], size: u64, payload: u32, mtu: Mtu, ifg: u64) -> u64 {
    let Some(bw) = path.iter().map(|p| p.rate_bps).min() else {
        return 0;
    };
    let rtt = path_rtt_ps(path, HopCost::Ns3 { payload }) / PS_PER_NS;
    let n = size.div_ceil(u64::from(mtu.bytes())).max(1);
    // BTH (12), ICRC (4); the first packet also carries a RETH (16).
    let per_pkt = L2_L4_HEADER + 12 + 4 + FCS + ifg;
    let total = size + n * per_pkt + 16;
    rtt + total * 8 * 1_000_000_000 / bw
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::topology::gbps;

    #[test]
    fn both_conventions_on_one_path() {
        // Two 100 Gb/s links of 1 µs: 2 × (2 µs + 1000 B at 100 Gb/s).
        let t = Topology::star(2, gbps(100), 1_000_000).unwrap();
        let path = t.path(&t.routes(), 0, 1);
        assert_eq!(
            path_rtt_ps(&path, HopCost::Frame { wire: 1000 }),
            2 * (2_000_000 + 80_000)
        );
        assert_eq!(
            path_rtt_ps(&path, HopCost::Ns3 { payload: 1000 }),
            2 * (2_000_000 + 80_000)
        );
        // They part where third.cc rounds each hop down to whole ns:
        // 1001 B take 80.08 ns.
        assert_eq!(
            path_rtt_ps(&path, HopCost::Frame { wire: 1001 }),
            2 * (2_000_000 + 80_080)
        );
        assert_eq!(
            path_rtt_ps(&path, HopCost::Ns3 { payload: 1001 }),
            2 * (2_000_000 + 80_000)
        );
        assert_eq!(
            max_base_rtt_ps(&t, &t.routes(), HopCost::Ns3 { payload: 1001 }),
            2 * (2_000_000 + 80_000)
        );
    }

    #[test]
    fn the_largest_rtt_is_across_the_fabric() {
        let t = Topology::fat_tree(5, 4, 4, 16, 16, gbps(100), gbps(400), 1_000_000).unwrap();
        let r = t.routes();
        let hop = HopCost::Frame { wire: 1086 };
        let across = path_rtt_ps(&t.path(&r, 0, 319), hop);
        assert_eq!(max_base_rtt_ps(&t, &r, hop), across);
        assert!(across > path_rtt_ps(&t.path(&r, 0, 1), hop));
    }
}
