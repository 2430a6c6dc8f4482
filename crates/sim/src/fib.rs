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
    /// Per host: its edge switch, the column of that edge switch, and the
    /// list holding the host's own port there (one 8-byte entry, so a
    /// lookup reads one line for it).
    host: Vec<HostRoute>,
    /// Per node: the first entry of its row in `spans` (switches only).
    row_base: Vec<u32>,
    /// Per switch and edge switch: which list of `rows` holds the next
    /// hops (two bytes an entry, so a k=32 fat tree's 655,360 entries
    /// take 1.3 MB).
    spans: Vec<u16>,
    /// The distinct lists of next hops, each a row of `1 << shift` `u16`s
    /// starting at a cache line: its length, then its ports. A lookup
    /// reads the row where a list once named a `(start, len)` pair that
    /// then named the ports: one dependent load (and line) fewer on every
    /// switch hop, whose egress port waits on the chain.
    rows: Vec<u16>,
    /// Where row 0 starts in `rows` (the first line-aligned slot).
    first: usize,
    shift: u32,
    /// Choose the host's own list at its edge switch by a branch, not
    /// by reading `spans` either way: in a table too large for the cache
    /// (a k=32 fat tree's 1.3 MB) that read is a miss the choice would
    /// wait on, which costs more than the branch's mispredictions.
    edge_by_branch: bool,
    /// Lists stored (for the tests' look at `rows`).
    #[cfg(test)]
    count: usize,
}

#[derive(Debug, Clone, Copy)]
struct HostRoute {
    edge: u32,
    col: u16,
    /// The list (in `rows`) of the host's one port at its edge switch.
    list: u16,
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
    #[inline(always)]
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
                    + size_of_val(&c.rows[..])) as u64
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
    // Hosts under one edge switch share their lists; a multi-homed
    // host's NICs share theirs, and no one else's.
    let nics = topo.machine_nics();
    let edge_of = |hn: usize| match topo.ports[hn].as_slice() {
        [l] if !nics.contains_key(&topo.machine[hn]) => l.peer,
        _ => usize::MAX - topo.machine[hn],
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
                let peer = topo.machine[topo.ports[s][usize::from(*p)].peer];
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
    /// Row bytes start on a line: a lookup then reads one line of `rows`.
    const LINE_U16: usize = 32;
    /// See [`Compact::edge_by_branch`]: half a typical L2.
    const BRANCH_ABOVE_BYTES: usize = 512 << 10;

    // Inlined: out of line, the call and its register saves were a fifth
    // of a lookup that the switch arrival then waits on.
    #[inline(always)]
    fn get(&self, node: usize, dst: u32) -> &[u16] {
        let h = &self.host[dst as usize];
        let list = if self.edge_by_branch {
            if h.edge as usize == node {
                h.list
            } else {
                self.spans[self.row_base[node] as usize + usize::from(h.col)]
            }
        } else {
            // The row's entry is read either way and the host's own list
            // chosen without a branch: a third of switch hops end at the
            // edge switch, unpredictably, and the branch mispredicted on
            // about one lookup in seven.
            let via = (self.row_base.get(node))
                .and_then(|&b| self.spans.get(b as usize + usize::from(h.col)))
                .copied()
                .unwrap_or(h.list);
            let own = u16::from(h.edge as usize == node).wrapping_neg();
            (h.list & own) | (via & !own)
        };
        self.row(list)
    }

    /// The next hops of list `list`, which must be an id `build` stored
    /// (every entry of `host` and `spans` is one), read without bounds
    /// checks: the row's start and its range were three checks (six
    /// instructions) on every switch hop.
    #[inline(always)]
    fn row(&self, list: u16) -> &[u16] {
        let at = self.first + (usize::from(list) << self.shift);
        debug_assert!(at < self.rows.len());
        // SAFETY: `lay_out` made `rows` `first + lists × stride` long (and
        // more), with list `list` (an id below the lists' count: the ids
        // `build` hands out index `lists`) at `at`, its length there being
        // below the stride (`stride > widest`), so `at + 1 + n` is at most
        // `first + (list + 1) × stride`, within `rows`.
        unsafe {
            let n = usize::from(*self.rows.get_unchecked(at));
            debug_assert!(at + 1 + n <= self.rows.len() && n < 1 << self.shift);
            self.rows.get_unchecked(at + 1..at + 1 + n)
        }
    }

    /// The list ids of `lists` (each stored once) laid out as rows (see
    /// [`Compact::rows`]): the rows, the offset of row 0, the row shift.
    fn lay_out(lists: &[&[u16]]) -> Option<(Vec<u16>, usize, u32)> {
        let widest = lists.iter().map(|l| l.len()).max().unwrap_or(0);
        let stride = (widest + 1).next_power_of_two();
        let shift = stride.trailing_zeros();
        let mut rows = vec![0u16; lists.len() * stride + Self::LINE_U16];
        // The first slot whose address is a multiple of a line (the
        // allocation is at least 2-byte aligned, so one is within a line).
        let misalign = (rows.as_ptr() as usize / 2) % Self::LINE_U16;
        let first = (Self::LINE_U16 - misalign) % Self::LINE_U16;
        for (i, l) in lists.iter().enumerate() {
            let at = first + (i << shift);
            rows[at] = u16::try_from(l.len()).ok()?;
            rows[at + 1..at + 1 + l.len()].copy_from_slice(l);
        }
        Some((rows, first, shift))
    }

    fn build(topo: &Topology, routes: &Routes) -> Option<Compact> {
        // A multi-homed host is reached over more than one edge switch.
        if topo.multi_homed {
            return None;
        }
        let n_hosts = topo.n_hosts();
        let mut host = Vec::with_capacity(n_hosts);
        let mut edges: Vec<usize> = Vec::new();
        let mut col_of = vec![u32::MAX; topo.nodes.len()];
        let mut rep = Vec::new();
        // Each distinct list of next hops is stored once: a switch sends
        // toward most edge switches over the same uplinks, so a k=32 fat
        // tree has a few thousand distinct lists among 655,360 entries
        // (the lists then take kilobytes instead of 11 MB, and stay in
        // the cache). A host's own port at its edge switch is a list of
        // one, shared by the hosts on that port number.
        let mut lists: Vec<&[u16]> = Vec::new();
        let mut seen: std::collections::HashMap<&[u16], u16> = Default::default();
        let mut id_of = |hops| -> Option<u16> {
            Some(match seen.get(hops) {
                Some(&id) => id,
                None => {
                    let id = u16::try_from(lists.len()).ok()?;
                    lists.push(hops);
                    seen.insert(hops, id);
                    id
                }
            })
        };
        for (h, &hn) in topo.hosts.iter().enumerate() {
            let [link] = topo.ports[hn].as_slice() else {
                return None;
            };
            let edge = link.peer;
            if topo.nodes[edge].kind != NodeKind::Switch {
                return None;
            }
            let own = routes.get(edge, h as u32);
            let [_] = own else {
                return None;
            };
            if col_of[edge] == u32::MAX {
                col_of[edge] = edges.len() as u32;
                edges.push(edge);
                rep.push(h as u32);
            }
            host.push(HostRoute {
                edge: edge as u32,
                col: u16::try_from(col_of[edge]).ok()?,
                list: id_of(own)?,
            });
        }
        let switches: Vec<usize> = (0..topo.nodes.len())
            .filter(|&i| topo.nodes[i].kind == NodeKind::Switch)
            .collect();
        let mut row_base = vec![u32::MAX; topo.nodes.len()];
        let cols = edges.len();
        let mut spans = Vec::with_capacity(switches.len() * cols);
        for (r, &s) in switches.iter().enumerate() {
            row_base[s] = u32::try_from(r * cols).ok()?;
            for &h in &rep {
                spans.push(id_of(routes.get(s, h))?);
            }
        }
        let (rows, first, shift) = Self::lay_out(&lists)?;
        let edge_by_branch = std::mem::size_of_val(&spans[..]) > Self::BRANCH_ABOVE_BYTES;
        let c = Compact {
            host,
            row_base,
            spans,
            rows,
            first,
            shift,
            edge_by_branch,
            #[cfg(test)]
            count: lists.len(),
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

    /// The stored lists, in id order.
    #[cfg(test)]
    fn lists(&self) -> Vec<&[u16]> {
        (0..self.count)
            .map(|i| self.first + (i << self.shift))
            .map(|at| &self.rows[at + 1..at + 1 + usize::from(self.rows[at])])
            .collect()
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
        let stored = c.lists();
        let lists: std::collections::HashSet<&[u16]> = stored.iter().copied().collect();
        assert_eq!(lists.len(), stored.len());
        assert!(c.spans.len() > lists.len());
        // Both ways of choosing the edge switch's own port agree.
        let mut c2 = Compact::build(&t, &r).expect("reduces");
        c2.edge_by_branch = !c.edge_by_branch;
        for s in 0..t.nodes.len() {
            if t.nodes[s].kind == NodeKind::Switch {
                for h in 0..t.n_hosts() as u32 {
                    assert_eq!(c2.get(s, h), r.get(s, h));
                }
            }
        }
        // Every row starts on a cache line.
        assert_eq!((c.rows.as_ptr() as usize + 2 * c.first) % 64, 0);
    }
}
