//! Congestion control for the simulated hosts: which controller each flow's
//! sending QP gets (the controllers themselves are the RNIC's:
//! [`roce_rnic::Dcqcn`], [`roce_rnic::Hpcc`], [`roce_rnic::Timely`],
//! [`roce_rnic::Dctcp`], [`roce_rnic::Swift`]), and how the simulator
//! derives what they need from the fabric (line rate, base RTT, hops, MSS).

use crate::baseline::{HopCost, max_base_rtt_ps};
use crate::event::PS_PER_NS;
use crate::topology::{Routes, Topology};
pub use roce_rnic::cc::{
    CcConfig, CcPlan, DctcpSettings, HpccSettings, PintSettings, SwiftSettings,
};

/// What a run's controllers are built from (the RNIC's, shared with the
/// real stack), resolved against this fabric: the hosts' line rate, the
/// largest base RTT between two hosts, and `mss` (a full packet's payload);
/// `max_wire` is the largest data frame on the wire.
pub(crate) fn plan(
    cc: &CcConfig,
    topo: &Topology,
    routes: &Routes,
    max_wire: u64,
    mss: u64,
) -> CcPlan {
    // The fabric's base RTT with one full data frame per hop (see
    // [`crate::baseline`]).
    let fabric_rtt_ns =
        || max_base_rtt_ps(topo, routes, HopCost::Frame { wire: max_wire }) / PS_PER_NS;
    CcPlan::new(cc, host_line_bps(topo), fabric_rtt_ns, mss)
}

/// The fastest host link of the fabric.
fn host_line_bps(topo: &Topology) -> u64 {
    topo.hosts
        .iter()
        .filter_map(|&n| topo.ports[n].first().map(|p| p.rate_bps))
        .max()
        .unwrap_or(100_000_000_000)
}

/// Switches between `src` (a node) and every node, by breadth-first search
/// over the links: the hop count of a shortest (ECMP) path, as Swift reads
/// it from the TTL of received packets.
pub(crate) fn switch_hops_from(topo: &Topology, src: usize) -> Vec<u32> {
    let mut dist = vec![u32::MAX; topo.nodes.len()];
    let mut q = std::collections::VecDeque::new();
    dist[src] = 0;
    q.push_back(src);
    while let Some(n) = q.pop_front() {
        for p in &topo.ports[n] {
            let m = p.peer;
            if dist[m] == u32::MAX {
                dist[m] = dist[n] + 1;
                q.push_back(m);
            }
        }
    }
    // Links crossed minus one: the switches in between.
    dist.iter().map(|d| d.saturating_sub(1)).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::topology::gbps;

    #[test]
    fn swift_hops_are_the_switches_on_a_shortest_path() {
        let t = Topology::fat_tree(5, 4, 4, 16, 16, gbps(100), gbps(400), 1_000_000).unwrap();
        let r = t.routes();
        let from0 = switch_hops_from(&t, t.hosts[0]);
        for dst in [1usize, 16, 100, 319] {
            // The routed path's links, minus one: the switches crossed.
            let want = t.path(&r, 0, dst as u32).len() as u32 - 1;
            assert_eq!(from0[t.hosts[dst]], want, "host 0 → {dst}");
        }
        // Same ToR: one switch; another pod: ToR, agg, core, agg, ToR.
        assert_eq!(from0[t.hosts[1]], 1);
        assert_eq!(from0[t.hosts[319]], 5);
    }

    #[test]
    fn a_host_is_one_switch_further_than_its_edge_switch() {
        // What lets the simulator keep one row per edge switch.
        let t = Topology::fat_tree(5, 4, 4, 16, 16, gbps(100), gbps(400), 1_000_000).unwrap();
        for src in [0usize, 17, 200] {
            let h = t.hosts[src];
            let edge = t.ports[h][0].peer;
            let (from_h, from_edge) = (switch_hops_from(&t, h), switch_hops_from(&t, edge));
            for (dst, &d) in t.hosts.iter().enumerate().filter(|&(d, _)| d != src) {
                assert_eq!(from_edge[d] + 1, from_h[d], "{src} → {dst}");
            }
        }
    }
}
