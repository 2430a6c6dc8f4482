//! Where a run's memory goes, by structure: what a fabric costs per host,
//! per switch port and per flow, and what grows with the packets in
//! flight (issue 12: 8,192 hosts on one core in under 2 GB). Figures are
//! heap bytes the simulator holds (allocator capacities; tree maps count
//! their entries only), not the process's resident set: packet slots are
//! counted up to the most ever used, as only those pages were touched.

use super::{FlowState, Host, Simulator};
use crate::link::Port;
use crate::packet::{IntRec, Packet};
use roce_rnic::Footprint;
use std::fmt::Write as _;
use std::mem::size_of;

/// Heap bytes by structure at one instant, with the counts that turn them
/// into per-host, per-port and per-flow figures.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct MemoryUse {
    /// `(structure, bytes)`, in a fixed order.
    pub parts: Vec<(&'static str, u64)>,
    /// The hosts' RNICs, summed.
    pub rnic: Footprint,
    pub hosts: u64,
    pub switch_ports: u64,
    pub flows: u64,
    /// Packets in the fabric now, and the most packet slots ever used.
    pub live_packets: u64,
    pub packet_slots: u64,
}

impl MemoryUse {
    pub fn total(&self) -> u64 {
        self.parts.iter().map(|p| p.1).sum()
    }

    fn get(&self, name: &str) -> u64 {
        self.parts.iter().find(|p| p.0 == name).map_or(0, |p| p.1)
    }

    /// A table of the parts, then bytes per host (hosts, host ports and
    /// RNIC device tables over the hosts), per switch port (ports and
    /// buffer accounts over the switch ports), per flow record and per
    /// live QP.
    pub fn render(&self) -> String {
        let mut s = String::new();
        let mb = |b: u64| b as f64 / 1e6;
        for (name, b) in &self.parts {
            let _ = writeln!(s, "  {name:<34} {:>10.1} MB", mb(*b));
        }
        let _ = writeln!(s, "  {:<34} {:>10.1} MB", "total", mb(self.total()));
        let per = |b: u64, n: u64| b.checked_div(n).unwrap_or(0);
        let host = self.get(HOSTS) + self.get(HOST_PORTS) + self.rnic.tables;
        let port = self.get(SWITCH_PORTS) + self.get(MMU);
        let qp = self.rnic.total() - self.rnic.tables;
        let pkt = self.get(PACKETS);
        let _ = writeln!(
            s,
            "  per host {} B, per switch port {} B, per flow record {} B, \
             per live QP {} B ({} QPs), per packet slot {} B ({} live, {} slots)",
            per(host, self.hosts),
            per(port, self.switch_ports),
            per(self.get(FLOWS), self.flows),
            per(qp, self.rnic.qps),
            self.rnic.qps,
            per(pkt, self.packet_slots),
            self.live_packets,
            self.packet_slots,
        );
        s
    }
}

const HOSTS: &str = "hosts (host + RNIC device)";
const HOST_PORTS: &str = "host ports";
const SWITCH_PORTS: &str = "switch ports (queues, counters)";
const MMU: &str = "switch buffer accounts";
const FLOWS: &str = "flow records";
const PACKETS: &str = "packets";

impl Simulator {
    /// Heap bytes by structure now (see [`MemoryUse`]).
    pub fn memory_use(&self) -> MemoryUse {
        let mut m = MemoryUse::default();
        let mut rnic = Footprint::default();
        let (mut hosts, mut vmem) = (0u64, 0u64);
        for h in &self.hosts {
            rnic.add(&h.rnic.footprint());
            vmem += h.rnic.mem().heap_bytes();
            hosts += (size_of::<Host>() + h.qp_flow.capacity() * size_of::<super::QpSlot>()) as u64;
            if h.path.is_some() {
                hosts += size_of::<crate::host::HostPath>() as u64;
            }
        }
        let (mut host_ports, mut switch_ports, mut n_switch_ports) = (0u64, 0u64, 0u64);
        for n in &self.nodes {
            let b = n
                .ports
                .iter()
                .map(|p| size_of::<Port>() as u64 + p.heap_bytes())
                .sum::<u64>();
            if n.host {
                host_ports += b;
            } else {
                switch_ports += b;
                n_switch_ports += n.ports.len() as u64;
            }
        }
        let mmu: u64 = self.switches.iter().map(|s| s.mmu.heap_bytes()).sum();
        // A flow's echoed INT is a record of the INT table, counted there.
        let flows = (self.flows.capacity() * size_of::<FlowState>()
            + self.ns3_flows.capacity() * size_of::<super::Ns3Flow>()
            + self.ns3_ips.capacity() * 4) as u64;
        let slots = self.packets.len() as u64;
        let packets = slots * size_of::<Packet>() as u64;
        // The INT table: every record ever used (the free ones are reused,
        // never returned) and the free list.
        let ints = (self.ints.len() * size_of::<IntRec>() + self.int_free.capacity() * 4) as u64;
        let outputs = (self.pfc_log.capacity() * size_of::<crate::metrics::PfcEvent>()
            + self.queue_log.capacity() * size_of::<crate::metrics::QueueSample>()
            + self.flow_log.capacity() * size_of::<(u64, u32, u64)>()
            + self
                .pfc_frames
                .iter()
                .map(|f| f.1.capacity() + 32)
                .sum::<usize>()) as u64;
        let hops: u64 = self
            .hops_from
            .values()
            .map(|v| (v.capacity() * 4 + 16) as u64)
            .sum();
        let f = &rnic;
        m.parts = vec![
            ("topology", self.topo.heap_bytes()),
            ("forwarding tables", self.fib.heap_bytes()),
            (HOSTS, hosts),
            (HOST_PORTS, host_ports),
            (SWITCH_PORTS, switch_ports),
            (MMU, mmu),
            ("rnic: QP structs + cc", f.qp_state),
            ("rnic: send queues", f.send_queues),
            ("rnic: recv/response queues", f.recv_queues),
            ("rnic: sent-packet logs", f.sent_logs),
            ("rnic: IRN rings", f.irn),
            ("rnic: device tables", f.tables),
            ("rnic: memory-region maps", vmem),
            (FLOWS, flows),
            (PACKETS, packets),
            (
                "packet extension headers",
                (self.exts.capacity() * size_of::<roce_wire::TransportRepr>()
                    + self.ext_free.capacity() * 4) as u64,
            ),
            ("INT records", ints),
            ("event queue", self.q.heap_bytes()),
            ("outputs (pfc/queue/flow logs)", outputs),
            ("switch-hop cache (Swift)", hops),
        ];
        m.rnic = rnic;
        m.hosts = self.hosts.len() as u64;
        m.switch_ports = n_switch_ports;
        m.flows = self.flows.len() as u64;
        m.live_packets = slots - self.n_free as u64;
        m.packet_slots = slots;
        m
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::SimConfig;
    use crate::topology::{Topology, gbps};
    use crate::workload::{FlowOp, FlowSpec};

    #[test]
    fn counts_what_the_run_holds() {
        let topo = Topology::star(4, gbps(100), 1_000_000).unwrap();
        let flows: Vec<FlowSpec> = (0..3)
            .map(|i| FlowSpec {
                src: i,
                dst: 3,
                size: 200_000,
                start: 0,
                op: FlowOp::Write,
            })
            .collect();
        let mut sim = Simulator::new(SimConfig::default(), topo, &flows).unwrap();
        let idle = sim.memory_use();
        assert_eq!((idle.hosts, idle.switch_ports, idle.flows), (4, 4, 3));
        assert_eq!(idle.rnic.qps, 0);
        assert!(idle.total() > 0);
        // Mid-run: six QPs, packets in flight, records of packets sent.
        while sim.memory_use().live_packets == 0 || sim.events() < 200 {
            sim.step(1);
        }
        let busy = sim.memory_use();
        assert_eq!(busy.rnic.qps, 6);
        assert!(busy.rnic.sent_logs > 0 && busy.rnic.send_queues > 0);
        assert!(busy.live_packets > 0 && busy.packet_slots >= busy.live_packets);
        assert!(busy.render().contains("per live QP"));
        // Finished flows leave no QP behind.
        sim.run().unwrap();
        let done = sim.memory_use();
        assert_eq!((done.rnic.qps, done.rnic.sent_logs), (0, 0));
        assert_eq!(done.live_packets, 0);
    }
}
