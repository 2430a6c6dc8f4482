//! Switch forwarding tables in a compact form for the packet path.
//!
//! [`Routes`] keeps next hops for every node × destination host (about
//! 1 MB for the 320-host fat tree, ten times that for 1,024 hosts), and a
//! lookup per packet per hop then misses the cache. But every host has
//! exactly one link, so every shortest path to a host runs through the
//! switch it hangs off: a switch's next hops toward a host are its next
//! hops toward all hosts of that edge switch, except at the edge switch
//! itself, where it is the host's own port. [`Fib`] stores one row per
//! switch and one column per edge switch (the fat tree: 56 × 20 entries)
//! plus each host's port, and is checked entry by entry against
//! [`Routes`] when built; when a fabric does not reduce this way the full
//! table is used as it is.

use crate::topology::{NodeKind, Routes, Topology};

/// Next hops of every switch toward every host.
#[derive(Debug)]
pub enum Fib {
    Compact(Compact),
    Full(Routes),
}

/// The reduced table (see the module documentation).
#[derive(Debug)]
pub struct Compact {
    /// Edge switch (node) of each host.
    host_edge: Vec<u32>,
    /// The edge switch's port toward each host.
    host_port: Vec<u16>,
    /// Column of each host: the index of its edge switch among edges.
    host_col: Vec<u32>,
    /// Row of each node (switches only).
    row: Vec<u32>,
    cols: usize,
    /// `(start, len)` into `ports` for each row × column.
    spans: Vec<(u32, u16)>,
    ports: Vec<u16>,
}

impl Fib {
    /// The compact form of `routes` when it is exact, else `routes` itself.
    pub fn new(topo: &Topology, routes: Routes) -> Fib {
        match Compact::build(topo, &routes) {
            Some(c) => Fib::Compact(c),
            None => Fib::Full(routes),
        }
    }

    /// Next-hop ports at switch `node` toward host `dst` (`dst` must be a
    /// host index).
    #[inline]
    pub fn get(&self, node: usize, dst: u32) -> &[u16] {
        match self {
            Fib::Compact(c) => c.get(node, dst),
            Fib::Full(r) => r.get(node, dst),
        }
    }

    pub fn is_compact(&self) -> bool {
        matches!(self, Fib::Compact(_))
    }
}

impl Compact {
    #[inline]
    fn get(&self, node: usize, dst: u32) -> &[u16] {
        let d = dst as usize;
        if self.host_edge[d] as usize == node {
            return std::slice::from_ref(&self.host_port[d]);
        }
        let (s, n) = self.spans[self.row[node] as usize * self.cols + self.host_col[d] as usize];
        &self.ports[s as usize..s as usize + usize::from(n)]
    }

    fn build(topo: &Topology, routes: &Routes) -> Option<Compact> {
        let n_hosts = topo.n_hosts();
        let mut host_edge = Vec::with_capacity(n_hosts);
        let mut host_port = Vec::with_capacity(n_hosts);
        let mut host_col = Vec::with_capacity(n_hosts);
        let mut edges: Vec<usize> = Vec::new();
        let mut col_of = vec![u32::MAX; topo.nodes.len()];
        let mut rep = Vec::new();
        for (h, &hn) in topo.hosts.iter().enumerate() {
            let [link] = topo.ports[hn].as_slice() else {
                return None;
            };
            let edge = link.peer;
            if topo.nodes[edge].kind != NodeKind::Switch {
                return None;
            }
            let [port] = routes.get(edge, h as u32) else {
                return None;
            };
            if col_of[edge] == u32::MAX {
                col_of[edge] = edges.len() as u32;
                edges.push(edge);
                rep.push(h as u32);
            }
            host_edge.push(edge as u32);
            host_port.push(*port);
            host_col.push(col_of[edge]);
        }
        let switches: Vec<usize> = (0..topo.nodes.len())
            .filter(|&i| topo.nodes[i].kind == NodeKind::Switch)
            .collect();
        let mut row = vec![u32::MAX; topo.nodes.len()];
        let cols = edges.len();
        let mut spans = Vec::with_capacity(switches.len() * cols);
        let mut ports = Vec::new();
        for (r, &s) in switches.iter().enumerate() {
            row[s] = r as u32;
            for &h in &rep {
                let hops = routes.get(s, h);
                spans.push((ports.len() as u32, hops.len() as u16));
                ports.extend_from_slice(hops);
            }
        }
        let c = Compact {
            host_edge,
            host_port,
            host_col,
            row,
            cols,
            spans,
            ports,
        };
        // Exact or not at all.
        for &s in &switches {
            for h in 0..n_hosts as u32 {
                if c.get(s, h) != routes.get(s, h) {
                    return None;
                }
            }
        }
        Some(c)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::topology::gbps;

    #[test]
    fn fat_tree_reduces_exactly() {
        let t = Topology::fat_tree(2, 2, 2, 3, 2, gbps(100), gbps(400), 1_000_000).unwrap();
        let r = t.routes();
        let fib = Fib::new(&t, t.routes());
        assert!(fib.is_compact());
        for s in 0..t.nodes.len() {
            if t.nodes[s].kind == NodeKind::Switch {
                for h in 0..t.n_hosts() as u32 {
                    assert_eq!(fib.get(s, h), r.get(s, h));
                }
            }
        }
    }
}
