//! The HPCC ns-3 simulator's packet trace (`TRACE_OUTPUT_FILE`, `mix.tr`),
//! written as its `third.cc` writes it, so that its `analysis/trace_reader`
//! reads ours.
//!
//! The file is a header, `SimSetting` (every device's line rate and the
//! largest BDP), then with `ENABLE_TRACE 1` one 56-byte `TraceFormat`
//! record per packet event at the devices of the nodes `TRACE_FILE` lists:
//! `Recv` as a frame arrives, `Enqu` and `Dequ` at a switch's egress queue
//! (and at a host's queue of ACKs), `Dequ` as a host's QP sends, `Drop`
//! where a link going down discards a frame. Both are native-endian C
//! structs, padded as x86-64's ABI pads them (`trace-format.h`,
//! `sim-setting.h`; checked field by field in the tests against offsets
//! printed by the C++ compiler).
//!
//! What a record holds is ours where our packets differ from ns-3's (see
//! `scenarios/README.md`): a RoCEv2 frame's size, payload and PSN-derived
//! sequence number, and our CNPs as packets of their own (ns-3 flags its
//! ACKs instead).

use crate::topology::{NodeKind, Topology};
use std::io::{self, Write};

/// Bytes of one `TraceFormat` record.
pub const RECORD_BYTES: usize = 56;

/// `ns3::Event`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum TraceEvent {
    Recv = 0,
    Enqu = 1,
    Dequ = 2,
    Drop = 3,
}

/// ns-3's protocol numbers (`CustomHeader::l3Prot`).
pub mod l3 {
    pub const UDP: u8 = 0x11;
    pub const ACK: u8 = 0xFC;
    pub const NACK: u8 = 0xFD;
    pub const PFC: u8 = 0xFE;
    pub const CNP: u8 = 0xFF;
}

/// The protocol-specific part of a record (`TraceFormat`'s union).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Body {
    Data {
        sport: u16,
        dport: u16,
        seq: u32,
        ts: u64,
        pg: u16,
        payload: u16,
    },
    Ack {
        sport: u16,
        dport: u16,
        flags: u16,
        pg: u16,
        seq: u32,
        ts: u64,
    },
    Pfc {
        time: u32,
        qlen: u32,
        qindex: u8,
    },
    Cnp {
        fid: u16,
        qindex: u8,
        ecn_bits: u8,
        qfb: u16,
        total: u16,
    },
}

/// One `TraceFormat` record.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TraceRecord {
    pub time_ns: u64,
    pub node: u16,
    pub intf: u8,
    pub qidx: u8,
    pub qlen: u32,
    pub sip: u32,
    pub dip: u32,
    pub size: u16,
    pub l3_prot: u8,
    pub event: TraceEvent,
    /// The IP header's ECN bits (ns-3's data carries 0, 3 once marked).
    pub ecn: u8,
    /// 0 host, 1 switch.
    pub node_type: u8,
    pub body: Body,
}

impl TraceRecord {
    /// The record as `TraceFormat::Serialize` writes it.
    pub fn to_bytes(&self) -> [u8; RECORD_BYTES] {
        let mut b = [0u8; RECORD_BYTES];
        let mut put = |at: usize, v: &[u8]| b[at..at + v.len()].copy_from_slice(v);
        put(0, &self.time_ns.to_le_bytes());
        put(8, &self.node.to_le_bytes());
        put(10, &[self.intf, self.qidx]);
        put(12, &self.qlen.to_le_bytes());
        put(16, &self.sip.to_le_bytes());
        put(20, &self.dip.to_le_bytes());
        put(24, &self.size.to_le_bytes());
        put(
            26,
            &[self.l3_prot, self.event as u8, self.ecn, self.node_type],
        );
        match self.body {
            Body::Data {
                sport,
                dport,
                seq,
                ts,
                pg,
                payload,
            } => {
                put(32, &sport.to_le_bytes());
                put(34, &dport.to_le_bytes());
                put(36, &seq.to_le_bytes());
                put(40, &ts.to_le_bytes());
                put(48, &pg.to_le_bytes());
                put(50, &payload.to_le_bytes());
            }
            Body::Ack {
                sport,
                dport,
                flags,
                pg,
                seq,
                ts,
            } => {
                put(32, &sport.to_le_bytes());
                put(34, &dport.to_le_bytes());
                put(36, &flags.to_le_bytes());
                put(38, &pg.to_le_bytes());
                put(40, &seq.to_le_bytes());
                put(48, &ts.to_le_bytes());
            }
            Body::Pfc { time, qlen, qindex } => {
                put(32, &time.to_le_bytes());
                put(36, &qlen.to_le_bytes());
                put(40, &[qindex]);
            }
            Body::Cnp {
                fid,
                qindex,
                ecn_bits,
                qfb,
                total,
            } => {
                put(32, &fid.to_le_bytes());
                put(34, &[qindex, ecn_bits]);
                put(36, &qfb.to_le_bytes());
                put(38, &total.to_le_bytes());
            }
        }
        b
    }

    /// Reads a record [`to_bytes`](Self::to_bytes) wrote (or ns-3 did):
    /// the body by the protocol number, `None` for an unknown event.
    pub fn parse(b: &[u8; RECORD_BYTES]) -> Option<TraceRecord> {
        let u16_at = |i: usize| u16::from_le_bytes([b[i], b[i + 1]]);
        let u32_at = |i: usize| u32::from_le_bytes([b[i], b[i + 1], b[i + 2], b[i + 3]]);
        let u64_at = |i: usize| {
            let mut x = [0u8; 8];
            x.copy_from_slice(&b[i..i + 8]);
            u64::from_le_bytes(x)
        };
        let event = match b[27] {
            0 => TraceEvent::Recv,
            1 => TraceEvent::Enqu,
            2 => TraceEvent::Dequ,
            3 => TraceEvent::Drop,
            _ => return None,
        };
        let body = match b[26] {
            l3::ACK | l3::NACK => Body::Ack {
                sport: u16_at(32),
                dport: u16_at(34),
                flags: u16_at(36),
                pg: u16_at(38),
                seq: u32_at(40),
                ts: u64_at(48),
            },
            l3::PFC => Body::Pfc {
                time: u32_at(32),
                qlen: u32_at(36),
                qindex: b[40],
            },
            l3::CNP => Body::Cnp {
                fid: u16_at(32),
                qindex: b[34],
                ecn_bits: b[35],
                qfb: u16_at(36),
                total: u16_at(38),
            },
            _ => Body::Data {
                sport: u16_at(32),
                dport: u16_at(34),
                seq: u32_at(36),
                ts: u64_at(40),
                pg: u16_at(48),
                payload: u16_at(50),
            },
        };
        Some(TraceRecord {
            time_ns: u64_at(0),
            node: u16_at(8),
            intf: b[10],
            qidx: b[11],
            qlen: u32_at(12),
            sip: u32_at(16),
            dip: u32_at(20),
            size: u16_at(24),
            l3_prot: b[26],
            event,
            ecn: b[28],
            node_type: b[29],
            body,
        })
    }
}

/// `SimSetting::Serialize`: the count of devices, then each device's node
/// id (16 bits), interface index (8) and line rate in b/s (64), then the
/// window bound `win` (32). ns-3 lists the devices in the order of its
/// hash maps; `trace_reader` reads them into a map, so any order reads
/// the same (here: by node, then interface).
pub fn sim_setting_bytes(ports: &[(u16, u8, u64)], win: u32) -> Vec<u8> {
    let mut out = Vec::with_capacity(8 + ports.len() * 11);
    out.extend_from_slice(&(ports.len() as u32).to_le_bytes());
    for &(node, intf, bps) in ports {
        out.extend_from_slice(&node.to_le_bytes());
        out.push(intf);
        out.extend_from_slice(&bps.to_le_bytes());
    }
    out.extend_from_slice(&win.to_le_bytes());
    out
}

/// Where a run's trace records go, and at which nodes.
pub struct PacketTrace {
    /// Per simulator node: traced, and its ns-3 id, interface base and
    /// type (see [`NodeId`]).
    nodes: Vec<NodeId>,
    out: Box<dyn Write + Send>,
    error: Option<io::Error>,
    records: u64,
}

/// A simulator node as ns-3 names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NodeId {
    pub traced: bool,
    /// ns-3's node id (a multi-homed host's, for each of its NICs).
    pub id: u16,
    /// The interface index of port 0 (1, or a further NIC's own).
    pub intf0: u8,
    /// 0 host, 1 switch.
    pub node_type: u8,
}

/// How ns-3 names every node of `topo`, none traced: its id (a
/// multi-homed host's for each of its NICs, see
/// [`Topology::from_parts_in_machines`]), the interface index of its port
/// 0 and its type.
pub fn node_ids(topo: &Topology) -> Vec<NodeId> {
    let nics = topo.machine_nics();
    (0..topo.nodes.len())
        .map(|n| {
            let m = topo.machine[n];
            let intf0 = nics
                .get(&m)
                .and_then(|v| v.iter().position(|&x| x == n))
                .map_or(1, |i| i as u8 + 1);
            NodeId {
                traced: false,
                id: m as u16,
                intf0,
                node_type: u8::from(topo.nodes[n].kind == NodeKind::Switch),
            }
        })
        .collect()
}

/// Every device's line rate as [`sim_setting_bytes`] takes them, by node
/// and interface.
pub fn port_speeds(topo: &Topology) -> Vec<(u16, u8, u64)> {
    let ids = node_ids(topo);
    let mut v: Vec<(u16, u8, u64)> = (topo.ports.iter().enumerate())
        .flat_map(|(n, ports)| {
            let id = ids[n];
            (ports.iter().enumerate())
                .map(move |(i, p)| (id.id, id.intf0.wrapping_add(i as u8), p.rate_bps))
        })
        .collect();
    v.sort_unstable();
    v
}

impl std::fmt::Debug for PacketTrace {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PacketTrace")
            .field("nodes", &self.nodes.len())
            .field("records", &self.records)
            .field("error", &self.error)
            .finish()
    }
}

impl PacketTrace {
    /// Records at the nodes `nodes` marks traced go to `out` (after
    /// whatever the caller wrote there, the [`sim_setting_bytes`] header).
    pub fn new(nodes: Vec<NodeId>, out: Box<dyn Write + Send>) -> PacketTrace {
        PacketTrace {
            nodes,
            out,
            error: None,
            records: 0,
        }
    }

    /// Node `node`'s name in ns-3's terms, if traced.
    #[inline]
    pub fn traced(&self, node: u32) -> Option<NodeId> {
        self.nodes.get(node as usize).copied().filter(|n| n.traced)
    }

    /// Writes `r`; the first write error is kept (and the rest skipped)
    /// for [`finish`](Self::finish).
    pub fn push(&mut self, r: &TraceRecord) {
        if self.error.is_none() {
            match self.out.write_all(&r.to_bytes()) {
                Ok(()) => self.records += 1,
                Err(e) => self.error = Some(e),
            }
        }
    }

    /// Flushes the file: the records written, or the first error.
    pub fn finish(mut self) -> io::Result<u64> {
        if let Some(e) = self.error.take() {
            return Err(e);
        }
        self.out.flush()?;
        Ok(self.records)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The offsets `offsetof` gives for `trace-format.h`'s `TraceFormat`
    /// with g++ 12 on x86-64 (size 56; the union at 32; data's seq at 36
    /// and ts at 40; ack's seq at 40 and ts at 48; pfc's qIndex at 40;
    /// cnp's qfb at 36): each field lands there, and reads back.
    #[test]
    fn records_have_trace_format_s_layout() {
        let r = TraceRecord {
            time_ns: 0x0102_0304_0506_0708,
            node: 0x0a0b,
            intf: 2,
            qidx: 3,
            qlen: 0x1122_3344,
            sip: 0x0b00_0101,
            dip: 0x0b00_0201,
            size: 1086,
            l3_prot: l3::UDP,
            event: TraceEvent::Dequ,
            ecn: 3,
            node_type: 1,
            body: Body::Data {
                sport: 10000,
                dport: 100,
                seq: 0xdead_beef,
                ts: 0x55,
                pg: 3,
                payload: 1024,
            },
        };
        let b = r.to_bytes();
        assert_eq!(b.len(), 56);
        assert_eq!(&b[0..8], &0x0102_0304_0506_0708u64.to_le_bytes());
        assert_eq!(&b[8..12], &[0x0b, 0x0a, 2, 3]);
        assert_eq!(&b[24..30], &[0x3e, 0x04, 0x11, 2, 3, 1]);
        assert_eq!(&b[36..40], &0xdead_beefu32.to_le_bytes());
        assert_eq!(&b[40..48], &0x55u64.to_le_bytes());
        assert_eq!(&b[48..52], &[3, 0, 0, 4]);
        assert_eq!(TraceRecord::parse(&b), Some(r));
        let ack = TraceRecord {
            l3_prot: l3::ACK,
            body: Body::Ack {
                sport: 100,
                dport: 10000,
                flags: 1,
                pg: 3,
                seq: 7000,
                ts: 9,
            },
            ..r
        };
        let b = ack.to_bytes();
        assert_eq!(&b[36..40], &[1, 0, 3, 0]);
        assert_eq!(&b[40..44], &7000u32.to_le_bytes());
        assert_eq!(&b[48..56], &9u64.to_le_bytes());
        assert_eq!(TraceRecord::parse(&b), Some(ack));
        let pfc = TraceRecord {
            l3_prot: l3::PFC,
            body: Body::Pfc {
                time: 65535,
                qlen: 40000,
                qindex: 3,
            },
            ..r
        };
        let b = pfc.to_bytes();
        assert_eq!(b[40], 3);
        assert_eq!(TraceRecord::parse(&b), Some(pfc));
        let cnp = TraceRecord {
            l3_prot: l3::CNP,
            body: Body::Cnp {
                fid: 7,
                qindex: 3,
                ecn_bits: 3,
                qfb: 0,
                total: 0,
            },
            ..r
        };
        assert_eq!(TraceRecord::parse(&cnp.to_bytes()), Some(cnp));
    }

    #[test]
    fn sim_setting_is_count_devices_window() {
        let b = sim_setting_bytes(&[(0, 1, 100_000_000_000), (9, 2, 25_000_000_000)], 1_2345);
        assert_eq!(b.len(), 4 + 2 * 11 + 4);
        assert_eq!(&b[0..4], &2u32.to_le_bytes());
        assert_eq!(&b[4..7], &[0, 0, 1]);
        assert_eq!(&b[7..15], &100_000_000_000u64.to_le_bytes());
        assert_eq!(&b[15..18], &[9, 0, 2]);
        assert_eq!(&b[b.len() - 4..], &12_345u32.to_le_bytes());
    }
}
