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
//! table is used as it is. Entries name one of the table's distinct lists
//! of next hops (a switch reaches most edge switches over the same
//! uplinks), so the table of a k=32 fat tree (8,192 hosts) takes 1.4 MB,
//! not the 22 MB of a list per entry.

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
    /// Per host: its edge switch, its port there, and the column of that
    /// edge switch (one 8-byte entry, so a lookup reads one line for it).
    host: Vec<HostRoute>,
    /// Per node: the first entry of its row in `spans` (switches only).
    row_base: Vec<u32>,
    /// Per switch and edge switch: which of `lists` holds the next hops
    /// (two bytes an entry, so a k=32 fat tree's 655,360 entries take
    /// 1.3 MB).
    spans: Vec<u16>,
    /// The distinct lists of next hops: `(start, len)` in `ports`.
    lists: Vec<(u32, u16)>,
    ports: Vec<u16>,
}

#[derive(Debug, Clone, Copy)]
struct HostRoute {
    edge: u32,
    port: u16,
    col: u16,
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

    /// Starts loading the entry [`get`](Self::get) reads for (`node`,
    /// `dst`): at 8,192 hosts the compact table is 1.3 MB and a lookup per
    /// switch hop missed the cache (a sixth of the packet path's stalls).
    /// Out-of-range arguments prefetch nothing.
    #[inline]
    pub fn prefetch(&self, node: usize, dst: u32) {
        if let Fib::Compact(c) = self
            && let Some(h) = c.host.get(dst as usize)
            && h.edge as usize != node
            && let Some(&base) = c.row_base.get(node)
            && let Some(e) = c.spans.get(base as usize + usize::from(h.col))
        {
            crate::sim::prefetch_line(e);
        }
    }

    /// Heap bytes of the tables.
    pub fn heap_bytes(&self) -> u64 {
        use std::mem::size_of_val;
        match self {
            Fib::Compact(c) => {
                (size_of_val(&c.host[..])
                    + size_of_val(&c.row_base[..])
                    + size_of_val(&c.spans[..])
                    + size_of_val(&c.lists[..])
                    + size_of_val(&c.ports[..])) as u64
            }
            Fib::Full(r) => r.heap_bytes(),
        }
    }

    pub fn is_compact(&self) -> bool {
        matches!(self, Fib::Compact(_))
    }
}

/// Puts every switch's next hops in another simulator's order (the
/// same set of ports): `order(host_node)` gives, per node, the
/// neighbours it forwards to toward that host, first to last. It is
/// called once per edge switch, as hosts sharing one share their next
/// hops here. Done on [`Routes`] before [`Fib::new`], so the compact
/// table stores (and shares) the reordered lists and is checked against
/// them.
pub fn reorder(
    routes: &mut Routes,
    topo: &Topology,
    mut order: impl FnMut(usize) -> Vec<Vec<usize>>,
) {
    let edge_of = |hn: usize| match topo.ports[hn].as_slice() {
        [l] => l.peer,
        _ => usize::MAX - hn,
    };
    let mut dsts: Vec<u32> = (0..topo.n_hosts() as u32).collect();
    dsts.sort_by_key(|&d| edge_of(topo.hosts[d as usize]));
    let switches: Vec<usize> = (0..topo.nodes.len())
        .filter(|&i| topo.nodes[i].kind == NodeKind::Switch)
        .collect();
    let mut last: Option<(usize, Vec<Vec<usize>>)> = None;
    for d in dsts {
        let hn = topo.hosts[d as usize];
        let e = edge_of(hn);
        if last.as_ref().is_none_or(|(k, _)| *k != e) {
            last = Some((e, order(hn)));
        }
        let Some((_, lists)) = &last else { continue };
        for &s in &switches {
            let pos = |p: &u16| {
                let peer = topo.ports[s][usize::from(*p)].peer;
                lists[s]
                    .iter()
                    .position(|&x| x == peer)
                    .unwrap_or(usize::MAX)
            };
            routes.hops_mut(s, d).sort_by_key(pos);
        }
    }
}

impl Compact {
    #[inline]
    fn get(&self, node: usize, dst: u32) -> &[u16] {
        let h = &self.host[dst as usize];
        if h.edge as usize == node {
            return std::slice::from_ref(&h.port);
        }
        let l = self.spans[self.row_base[node] as usize + usize::from(h.col)];
        let (s, n) = self.lists[usize::from(l)];
        &self.ports[s as usize..s as usize + usize::from(n)]
    }

    fn build(topo: &Topology, routes: &Routes) -> Option<Compact> {
        let n_hosts = topo.n_hosts();
        let mut host = Vec::with_capacity(n_hosts);
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
            host.push(HostRoute {
                edge: edge as u32,
                port: *port,
                col: u16::try_from(col_of[edge]).ok()?,
            });
        }
        let switches: Vec<usize> = (0..topo.nodes.len())
            .filter(|&i| topo.nodes[i].kind == NodeKind::Switch)
            .collect();
        let mut row_base = vec![u32::MAX; topo.nodes.len()];
        let cols = edges.len();
        let mut spans = Vec::with_capacity(switches.len() * cols);
        // Each distinct list of next hops is stored once: a switch sends
        // toward most edge switches over the same uplinks, so a k=32 fat
        // tree has a few thousand distinct lists among 655,360 entries
        // (the lists then take kilobytes instead of 11 MB, and stay in
        // the cache).
        let mut ports = Vec::new();
        let mut lists = Vec::new();
        let mut seen: std::collections::HashMap<&[u16], u16> = Default::default();
        for (r, &s) in switches.iter().enumerate() {
            row_base[s] = u32::try_from(r * cols).ok()?;
            for &h in &rep {
                let hops = routes.get(s, h);
                let id = match seen.get(hops) {
                    Some(&id) => id,
                    None => {
                        let id = u16::try_from(lists.len()).ok()?;
                        lists.push((ports.len() as u32, hops.len() as u16));
                        ports.extend_from_slice(hops);
                        seen.insert(hops, id);
                        id
                    }
                };
                spans.push(id);
            }
        }
        let c = Compact {
            host,
            row_base,
            spans,
            lists,
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
        // Each distinct list of next hops is stored once.
        let Fib::Compact(c) = &fib else {
            unreachable!()
        };
        let lists: std::collections::HashSet<&[u16]> = (c.lists.iter())
            .map(|&(s, n)| &c.ports[s as usize..s as usize + usize::from(n)])
            .collect();
        assert_eq!(lists.len(), c.lists.len());
        assert_eq!(c.ports.len(), lists.iter().map(|l| l.len()).sum::<usize>());
        assert!(c.spans.len() > lists.len());
    }
}
