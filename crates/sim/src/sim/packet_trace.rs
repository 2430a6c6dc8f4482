//! The simulator's side of ns-3's packet trace ([`crate::ns3_trace`]): a
//! record per packet event at the nodes traced, built from the packet and
//! the flow it belongs to. Everything here is cold: the packet path only
//! tests `watch_until`, the time before which queue changes are watched
//! (by the queue-length monitor, or always while a trace is on), or
//! `arrive_checks`, which it tests anyway.

use super::{FlowState, Host, Ns3Flow, SimConfig, Simulator, Slab};
use crate::event::{PS_PER_NS, Ps};
use crate::hpcc::hpcc_ip;
use crate::ns3_trace::{Body, PacketTrace, TraceEvent, TraceRecord, l3};
use crate::packet::Packet;
use crate::topology::Topology;
use roce_wire::TransportRepr;
use roce_wire::{Opcode, Syndrome};

impl Simulator {
    /// Writes ns-3 trace records of the nodes `trace` marks, from now to
    /// the end of the run (see [`crate::ns3_trace`]).
    pub fn set_packet_trace(&mut self, trace: PacketTrace) {
        self.ptrace = Some(Box::new(trace));
        self.watch_until = Ps::MAX;
        self.arrive_checks = true;
    }

    /// The trace handed to [`set_packet_trace`](Self::set_packet_trace),
    /// to [`PacketTrace::finish`] once the run is over.
    pub fn take_packet_trace(&mut self) -> Option<PacketTrace> {
        self.ptrace.take().map(|t| *t)
    }

    /// A record of packet `pkt` at `node`'s `port`, if `node` is traced
    /// (see [`trace_packet`]).
    #[allow(clippy::too_many_arguments)]
    pub(super) fn trace_packet(
        &mut self,
        event: TraceEvent,
        node: u32,
        port: u16,
        qidx: u8,
        qlen: u64,
        pkt: u32,
        ce: bool,
    ) {
        let cx = trace_cx!(self);
        trace_packet(
            &mut self.ptrace,
            &cx,
            event,
            node,
            port,
            qidx,
            qlen,
            pkt,
            ce,
        );
    }

    /// A PFC frame's records: `Enqu` and `Dequ` at the sender's port (ns-3
    /// sends it through queue 0), or `Recv` at the receiver's.
    #[cold]
    #[inline(never)]
    pub(super) fn trace_pfc(&mut self, node: u32, port: u16, prio: u8, quanta: u16, sent: bool) {
        let Some(t) = self.ptrace.as_deref() else {
            return;
        };
        let Some(id) = t.traced(node) else {
            return;
        };
        let p = &self.nodes[node as usize].ports[usize::from(port)];
        let qlen = p.qbytes(usize::from(prio) & 7).min(u64::from(u32::MAX)) as u32;
        let r = TraceRecord {
            time_ns: self.q.now() / PS_PER_NS,
            node: id.id,
            intf: id.intf0.wrapping_add(port as u8),
            qidx: 0,
            qlen: 0,
            sip: 0,
            dip: 0xffff_ffff,
            size: 64,
            l3_prot: l3::PFC,
            event: TraceEvent::Recv,
            ecn: 0,
            node_type: id.node_type,
            body: Body::Pfc {
                time: u32::from(quanta),
                qlen,
                qindex: prio,
            },
        };
        let events: &[TraceEvent] = if sent {
            &[TraceEvent::Enqu, TraceEvent::Dequ]
        } else {
            &[TraceEvent::Recv]
        };
        if let Some(t) = self.ptrace.as_deref_mut() {
            for &event in events {
                t.push(&TraceRecord { event, ..r });
            }
        }
    }
}

/// What a trace record reads of the simulator, borrowed field by field so
/// that the packet path can build it while it holds a port (see
/// `trace_cx!`).
pub(super) struct TraceCx<'a> {
    pub now: Ps,
    pub packets: &'a Slab<Packet>,
    pub exts: &'a [TransportRepr],
    pub hosts: &'a [Host],
    pub flows: &'a [FlowState],
    pub ns3_flows: &'a [Ns3Flow],
    pub cfg: &'a SimConfig,
    pub topo: &'a Topology,
}

/// A [`TraceCx`] of the simulator `$s`'s fields.
macro_rules! trace_cx {
    ($s:expr) => {
        $crate::sim::packet_trace::TraceCx {
            now: $s.q.now(),
            packets: &$s.packets,
            exts: &$s.exts,
            hosts: &$s.hosts,
            flows: &$s.flows,
            ns3_flows: &$s.ns3_flows,
            cfg: &$s.cfg,
            topo: &$s.topo,
        }
    };
}
pub(super) use trace_cx;

impl TraceCx<'_> {
    /// ns-3's address of host `h` (0 for none).
    fn ip(&self, h: u32) -> u32 {
        (self.topo.hosts.get(h as usize)).map_or(0, |&n| hpcc_ip(self.topo.machine[n] as u32))
    }

    /// The flow of `host`'s QP `qpn` (`u32::MAX`: none).
    fn flow_of(&self, host: u32, qpn: u32) -> u32 {
        (self.hosts.get(host as usize))
            .and_then(|h| h.qp_flow.get(qpn.checked_sub(h.qpn_base)? as usize))
            .map_or(u32::MAX, |s| s.flow)
    }
}

/// A record of packet `pkt` at `node`'s `port`, if `node` is traced:
/// `qidx` and `qlen` as ns-3 gives them for `event` (the queue's bytes
/// after a dequeue, before an enqueue); `ce` a mark the packet takes on
/// leaving here (ours travels with the arrival).
#[cold]
#[inline(never)]
#[allow(clippy::too_many_arguments)]
pub(super) fn trace_packet(
    trace: &mut Option<Box<PacketTrace>>,
    cx: &TraceCx<'_>,
    event: TraceEvent,
    node: u32,
    port: u16,
    qidx: u8,
    qlen: u64,
    pkt: u32,
    ce: bool,
) {
    let Some(t) = trace.as_deref_mut() else {
        return;
    };
    let Some(id) = t.traced(node) else {
        return;
    };
    let Some(p) = cx.packets.get(pkt as usize) else {
        return;
    };
    let repr = p.repr(cx.exts);
    let (src, dst, size, payload) = (p.src(), p.dst(), p.frame(), p.payload());
    let ecn = if ce || p.ce() { 3 } else { 0 };
    let psn = repr.bth.psn.value();
    // The flow, through the QP the packet is for (at its destination).
    let flow = cx.flow_of(dst, repr.bth.dest_qp);
    let ports = cx.ns3_flows.get(flow as usize).map_or(0, |f| f.ports);
    let (sport, dport) = (ports as u16, (ports >> 16) as u16);
    let mtu = u64::from(cx.cfg.mtu.bytes());
    let size_of_flow = cx
        .flows
        .get(flow as usize)
        .map_or(u64::MAX, |f| f.spec.size);
    let pg = u16::from(cx.cfg.data_prio);
    let (l3_prot, body) = match (repr.bth.opcode, repr.aeth.map(|a| a.syndrome)) {
        (Opcode::Cnp, _) => (
            l3::CNP,
            Body::Cnp {
                fid: flow as u16,
                qindex: cx.cfg.data_prio,
                ecn_bits: 3,
                qfb: 0,
                total: 0,
            },
        ),
        (_, Some(s)) => {
            // ns-3's ACK names the next byte expected: past the PSN
            // acknowledged, and a NAK's PSN (the one expected).
            let (prot, next) = match s {
                Syndrome::Ack { .. } => (l3::ACK, u64::from(psn) + 1),
                _ => (l3::NACK, u64::from(psn)),
            };
            (
                prot,
                Body::Ack {
                    sport: dport,
                    dport: sport,
                    flags: 0,
                    pg,
                    seq: (next * mtu).min(size_of_flow) as u32,
                    ts: 0,
                },
            )
        }
        _ => (
            l3::UDP,
            Body::Data {
                sport,
                dport,
                seq: (u64::from(psn) * mtu) as u32,
                ts: 0,
                pg,
                payload: payload as u16,
            },
        ),
    };
    t.push(&TraceRecord {
        time_ns: cx.now / PS_PER_NS,
        node: id.id,
        intf: id.intf0.wrapping_add(port as u8),
        qidx,
        qlen: qlen.min(u64::from(u32::MAX)) as u32,
        sip: cx.ip(src),
        dip: cx.ip(dst),
        size: size.min(u32::from(u16::MAX)) as u16,
        l3_prot,
        event,
        ecn,
        node_type: id.node_type,
        body,
    });
}
