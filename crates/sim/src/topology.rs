//! Fabric graphs: nodes (hosts and switches) joined by full-duplex links,
//! the standard datacenter shapes, validation, and shortest-path ECMP
//! routing tables.
//!
//! Routing follows what a BGP/ECMP Clos fabric converges to and what the
//! HPCC ns-3 simulator computes: for every destination host, a breadth-first
//! search backwards from it over switches (never through another host); a
//! switch's next hops toward that host are all neighbours one hop closer.

use std::collections::{HashMap, HashSet, VecDeque};

/// Why a topology is unusable.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TopologyError {
    #[error("link {index}: unknown node `{name}`")]
    UnknownNode { index: usize, name: String },
    #[error("link {index}: duplicate link between `{a}` and `{b}`")]
    DuplicateLink { index: usize, a: String, b: String },
    #[error("link {index}: `{name}` is linked to itself")]
    SelfLink { index: usize, name: String },
    #[error("link {index}: rate must be positive")]
    ZeroRate { index: usize },
    #[error("node name `{0}` is used twice")]
    DuplicateName(String),
    #[error("host `{name}` has {links} links; a host needs exactly one")]
    HostLinks { name: String, links: usize },
    #[error("host `{0}` is linked straight to another host; put a switch between them")]
    HostToHost(String),
    #[error("the fabric is disconnected: `{a}` cannot reach `{b}`")]
    Disconnected { a: String, b: String },
    #[error("{0}")]
    Shape(String),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NodeKind {
    Host,
    Switch,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Node {
    pub name: String,
    pub kind: NodeKind,
}

/// A full-duplex link; both directions have the same rate and delay.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Link {
    pub a: usize,
    pub b: usize,
    pub rate_bps: u64,
    pub delay_ps: u64,
}

/// One end of a link as seen from a node.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PortRef {
    pub link: usize,
    pub peer: usize,
    pub peer_port: u16,
    pub rate_bps: u64,
    pub delay_ps: u64,
}

/// A validated fabric.
#[derive(Debug, Clone)]
pub struct Topology {
    pub nodes: Vec<Node>,
    pub links: Vec<Link>,
    /// Node index of host `h`, in host order.
    pub hosts: Vec<usize>,
    /// Host index of each node (`None` for switches).
    pub host_of: Vec<Option<u32>>,
    /// Ports of each node, in link order.
    pub ports: Vec<Vec<PortRef>>,
    /// The machine each node is a part of, named by its first node: the
    /// node itself, except for the further NICs of a multi-homed host
    /// (see [`from_parts_in_machines`](Self::from_parts_in_machines)).
    pub machine: Vec<usize>,
    /// Whether some machine has more than one NIC.
    pub multi_homed: bool,
}

const G: u64 = 1_000_000_000;

/// Incremental construction by name.
#[derive(Debug, Default)]
pub struct Builder {
    nodes: Vec<Node>,
    index: HashMap<String, usize>,
    links: Vec<(String, String, u64, u64)>,
}

impl Builder {
    pub fn new() -> Self {
        Self::default()
    }
    pub fn host(&mut self, name: impl Into<String>) -> &mut Self {
        self.node(name.into(), NodeKind::Host)
    }
    pub fn switch(&mut self, name: impl Into<String>) -> &mut Self {
        self.node(name.into(), NodeKind::Switch)
    }
    fn node(&mut self, name: String, kind: NodeKind) -> &mut Self {
        self.index.entry(name.clone()).or_insert(self.nodes.len());
        self.nodes.push(Node { name, kind });
        self
    }
    pub fn link(
        &mut self,
        a: impl Into<String>,
        b: impl Into<String>,
        rate_bps: u64,
        delay_ps: u64,
    ) -> &mut Self {
        self.links.push((a.into(), b.into(), rate_bps, delay_ps));
        self
    }

    /// Checks the graph and builds port tables.
    pub fn build(self) -> Result<Topology, TopologyError> {
        if self.index.len() != self.nodes.len() {
            let mut seen = HashSet::new();
            for n in &self.nodes {
                if !seen.insert(&n.name) {
                    return Err(TopologyError::DuplicateName(n.name.clone()));
                }
            }
        }
        let mut links = Vec::with_capacity(self.links.len());
        let mut pairs = HashSet::new();
        for (index, (a, b, rate_bps, delay_ps)) in self.links.into_iter().enumerate() {
            let find = |name: &String| {
                self.index
                    .get(name)
                    .copied()
                    .ok_or_else(|| TopologyError::UnknownNode {
                        index,
                        name: name.clone(),
                    })
            };
            let (ia, ib) = (find(&a)?, find(&b)?);
            if ia == ib {
                return Err(TopologyError::SelfLink { index, name: a });
            }
            if rate_bps == 0 {
                return Err(TopologyError::ZeroRate { index });
            }
            if !pairs.insert((ia.min(ib), ia.max(ib))) {
                return Err(TopologyError::DuplicateLink { index, a, b });
            }
            links.push(Link {
                a: ia,
                b: ib,
                rate_bps,
                delay_ps,
            });
        }
        Topology::from_parts(self.nodes, links)
    }
}

impl Topology {
    /// Heap bytes of the description (names, links, port lists).
    pub fn heap_bytes(&self) -> u64 {
        use std::mem::{size_of, size_of_val};
        let names: usize = self.nodes.iter().map(|n| n.name.capacity()).sum();
        let ports: usize = self.ports.iter().map(|p| size_of_val(&p[..])).sum();
        (names
            + ports
            + size_of_val(&self.nodes[..])
            + size_of_val(&self.links[..])
            + size_of_val(&self.hosts[..])
            + size_of_val(&self.host_of[..])
            + size_of_val(&self.machine[..])
            + self.ports.len() * size_of::<Vec<PortRef>>()) as u64
    }

    /// Builds from nodes and links that are already indexed.
    pub fn from_parts(nodes: Vec<Node>, links: Vec<Link>) -> Result<Topology, TopologyError> {
        let machine = (0..nodes.len()).collect();
        Self::from_parts_in_machines(nodes, links, machine)
    }

    /// [`from_parts`](Self::from_parts) with host nodes grouped into
    /// machines: `machine[i]` names the first node of node `i`'s machine.
    /// A multi-homed host is one machine with one host node (a NIC, with
    /// its one link) per link, as the HPCC ns-3 simulator gives such a
    /// host one NIC per link: routes toward any of its NICs lead to the
    /// nearest of them, as ns-3's search from the host does (see
    /// [`routes`](Self::routes)), and a packet for one of them may arrive
    /// at another.
    ///
    /// Only hosts may share a machine, the first node of each must be its
    /// own, and a machine's NICs must reach distinct switches (ns-3 keys
    /// a host's neighbours by node, so two links to one switch would be
    /// one route).
    pub fn from_parts_in_machines(
        nodes: Vec<Node>,
        links: Vec<Link>,
        machine: Vec<usize>,
    ) -> Result<Topology, TopologyError> {
        let mut ports: Vec<Vec<PortRef>> = vec![Vec::new(); nodes.len()];
        for (i, l) in links.iter().enumerate() {
            let pa = ports[l.a].len() as u16;
            let pb = ports[l.b].len() as u16;
            ports[l.a].push(PortRef {
                link: i,
                peer: l.b,
                peer_port: pb,
                rate_bps: l.rate_bps,
                delay_ps: l.delay_ps,
            });
            ports[l.b].push(PortRef {
                link: i,
                peer: l.a,
                peer_port: pa,
                rate_bps: l.rate_bps,
                delay_ps: l.delay_ps,
            });
        }
        let mut hosts = Vec::new();
        let mut host_of = vec![None; nodes.len()];
        for (i, n) in nodes.iter().enumerate() {
            if n.kind == NodeKind::Host {
                if ports[i].len() != 1 {
                    return Err(TopologyError::HostLinks {
                        name: n.name.clone(),
                        links: ports[i].len(),
                    });
                }
                if nodes[ports[i][0].peer].kind == NodeKind::Host {
                    return Err(TopologyError::HostToHost(n.name.clone()));
                }
                host_of[i] = Some(hosts.len() as u32);
                hosts.push(i);
            }
        }
        if hosts.is_empty() {
            return Err(TopologyError::Shape("the fabric has no hosts".into()));
        }
        let mut topo = Topology {
            nodes,
            links,
            hosts,
            host_of,
            ports,
            machine: Vec::new(),
            multi_homed: false,
        };
        topo.set_machines(machine)?;
        // Connectivity: everything reachable from node 0, a machine's
        // NICs being one node.
        let nics = topo.machine_nics();
        let mut seen = vec![false; topo.nodes.len()];
        let mut q = VecDeque::from([0usize]);
        seen[0] = true;
        while let Some(n) = q.pop_front() {
            let m = topo.machine[n];
            let mut reach: Vec<usize> = topo.ports[n].iter().map(|p| p.peer).collect();
            reach.extend(nics.get(&m).into_iter().flatten().copied());
            for x in reach {
                if !seen[x] {
                    seen[x] = true;
                    q.push_back(x);
                }
            }
        }
        if let Some(far) = seen.iter().position(|s| !s) {
            return Err(TopologyError::Disconnected {
                a: topo.nodes[0].name.clone(),
                b: topo.nodes[far].name.clone(),
            });
        }
        Ok(topo)
    }

    /// Checks and sets [`machine`](Self::machine) (see
    /// [`from_parts_in_machines`](Self::from_parts_in_machines)).
    fn set_machines(&mut self, machine: Vec<usize>) -> Result<(), TopologyError> {
        let n = self.nodes.len();
        if machine.len() != n {
            return Err(TopologyError::Shape(format!(
                "{} machine entries for {n} nodes",
                machine.len()
            )));
        }
        let mut peers: HashMap<usize, Vec<usize>> = HashMap::new();
        for (i, &m) in machine.iter().enumerate() {
            if m == i {
                continue;
            }
            let ok = m < i
                && machine[m] == m
                && self.nodes[i].kind == NodeKind::Host
                && self.nodes[m].kind == NodeKind::Host;
            if !ok {
                return Err(TopologyError::Shape(format!(
                    "node `{}` is put in machine {m}: only hosts share a machine, which is \
                     named by its first node, a host of its own machine",
                    self.nodes[i].name
                )));
            }
        }
        for &h in &self.hosts {
            let seen = peers.entry(machine[h]).or_default();
            let peer = self.ports[h][0].peer;
            if seen.contains(&peer) {
                return Err(TopologyError::Shape(format!(
                    "host `{}` has two links to `{}`; a multi-homed host's links must reach \
                     distinct switches",
                    self.nodes[machine[h]].name, self.nodes[peer].name
                )));
            }
            seen.push(peer);
        }
        self.multi_homed = machine.iter().enumerate().any(|(i, &m)| m != i);
        self.machine = machine;
        Ok(())
    }

    /// The host nodes (NICs) of each machine with more than one, by the
    /// machine's first node, in node order.
    pub fn machine_nics(&self) -> HashMap<usize, Vec<usize>> {
        let mut out: HashMap<usize, Vec<usize>> = HashMap::new();
        if self.multi_homed {
            for &h in &self.hosts {
                out.entry(self.machine[h]).or_default().push(h);
            }
            out.retain(|_, v| v.len() > 1);
        }
        out
    }

    pub fn n_hosts(&self) -> usize {
        self.hosts.len()
    }

    /// Every port's line rate summed, in bits per second: both ends of
    /// every link, so twice the links' capacity.
    pub fn port_capacity_bps(&self) -> u128 {
        (self.ports.iter().flatten())
            .map(|p| u128::from(p.rate_bps))
            .sum()
    }

    /// Equal-cost next-hop ports toward each host, for every node:
    /// `table.get(node, host)` is a slice of port numbers.
    ///
    /// A host hangs off one switch (its edge), so a breadth-first search
    /// backwards from it is the search from its edge switch one hop longer:
    /// every node but the host itself and its edge switch has the same next
    /// hops toward every host of that edge switch. One search per edge
    /// switch, and one row per edge switch, give the whole table: 512
    /// searches and 39 MB for the 8,192 hosts of a k=32 fat tree, where a
    /// row per host took 8,192 searches and 0.75 GB (issue 12). A host not
    /// hung off one switch gets a search and a row of its own.
    pub fn routes(&self) -> Routes {
        self.routes_over(|_, _| true)
    }

    /// [`routes`](Self::routes) over the ports `is_up(node, port)` accepts
    /// only: the links taken down (both ends answer `false`) are neither
    /// searched nor next hops, as the HPCC ns-3 simulator's route
    /// computation skips a link it took down (third.cc `TakeDownLink`).
    pub fn routes_over(&self, is_up: impl Fn(usize, usize) -> bool) -> Routes {
        let n = self.nodes.len();
        let h = self.hosts.len();
        // A multi-homed host's NICs are searched from together.
        let nics = self.machine_nics();
        // The search source of each host's group: its edge switch, or the
        // host (its machine) itself when it has no single switch link.
        let mut group_of_src = vec![u32::MAX; n];
        let mut sources: Vec<usize> = Vec::new();
        let mut group = Vec::with_capacity(h);
        let mut edge = Vec::with_capacity(h);
        for &hn in &self.hosts {
            let up = match self.ports[hn].as_slice() {
                [l] if self.nodes[l.peer].kind == NodeKind::Switch
                    && !nics.contains_key(&self.machine[hn]) =>
                {
                    Some(*l)
                }
                _ => None,
            };
            let src = up.map_or(self.machine[hn], |l| l.peer);
            if group_of_src[src] == u32::MAX {
                group_of_src[src] = sources.len() as u32;
                sources.push(src);
            }
            group.push(group_of_src[src]);
            edge.push(up.map_or((u32::MAX, 0), |l| (l.peer as u32, l.peer_port)));
        }
        let g = sources.len();
        let mut spans = vec![(0u32, 0u16); n * g];
        let mut ports_flat: Vec<u16> = Vec::new();
        let mut dist = vec![u32::MAX; n];
        let mut q = VecDeque::new();
        for (gi, &src) in sources.iter().enumerate() {
            dist.fill(u32::MAX);
            q.clear();
            for &s in nics.get(&src).map_or(std::slice::from_ref(&src), |v| v) {
                dist[s] = 0;
                q.push_back(s);
            }
            while let Some(x) = q.pop_front() {
                for (pi, p) in self.ports[x].iter().enumerate() {
                    if !is_up(x, pi) {
                        continue;
                    }
                    if dist[p.peer] == u32::MAX {
                        dist[p.peer] = dist[x] + 1;
                        // Transit only through switches.
                        if self.nodes[p.peer].kind == NodeKind::Switch {
                            q.push_back(p.peer);
                        }
                    }
                }
            }
            for (node, ports) in self.ports.iter().enumerate() {
                if dist[node] == 0 || dist[node] == u32::MAX {
                    continue;
                }
                let start = ports_flat.len() as u32;
                for (pi, p) in ports.iter().enumerate() {
                    if is_up(node, pi) && dist[p.peer] != u32::MAX && dist[p.peer] + 1 == dist[node]
                    {
                        // A host is a next hop only when it is the destination
                        // (a source of a host's own search, at distance 0;
                        // at an edge switch `get` answers with the host's
                        // port).
                        if self.nodes[p.peer].kind == NodeKind::Host && dist[p.peer] != 0 {
                            continue;
                        }
                        ports_flat.push(pi as u16);
                    }
                }
                spans[node * g + gi] = (start, (ports_flat.len() as u32 - start) as u16);
            }
        }
        Routes {
            groups: g,
            group,
            edge,
            host_node: self.hosts.iter().map(|&x| x as u32).collect(),
            spans,
            ports: ports_flat,
        }
    }

    /// The links a packet crosses from host `src` to host `dst` following
    /// the first equal-cost choice at every hop (all choices have the same
    /// length; in the symmetric shapes built here they also have the same
    /// rates and delays).
    pub fn path(&self, routes: &Routes, src: u32, dst: u32) -> Vec<PortRef> {
        let mut out = Vec::new();
        let mut node = self.hosts[src as usize];
        let target = self.hosts[dst as usize];
        // Into any NIC of the destination's machine.
        while self.machine[node] != self.machine[target] && out.len() <= self.nodes.len() {
            let p = match routes.get(node, dst).first() {
                Some(&p) => self.ports[node][usize::from(p)],
                None => break,
            };
            out.push(p);
            node = p.peer;
        }
        out
    }

    /// N hosts on one switch (the classic incast star).
    pub fn star(hosts: usize, rate_bps: u64, delay_ps: u64) -> Result<Topology, TopologyError> {
        let mut b = Builder::new();
        b.switch("sw0");
        for i in 0..hosts {
            b.host(format!("h{i}"));
            b.link(format!("h{i}"), "sw0", rate_bps, delay_ps);
        }
        b.build()
    }

    /// Two switches joined by one (bottleneck) link, `left` and `right` hosts.
    pub fn dumbbell(
        left: usize,
        right: usize,
        host_bps: u64,
        core_bps: u64,
        delay_ps: u64,
    ) -> Result<Topology, TopologyError> {
        let mut b = Builder::new();
        b.switch("swL").switch("swR");
        b.link("swL", "swR", core_bps, delay_ps);
        for i in 0..left + right {
            let sw = if i < left { "swL" } else { "swR" };
            b.host(format!("h{i}"));
            b.link(format!("h{i}"), sw, host_bps, delay_ps);
        }
        b.build()
    }

    /// A two-tier Clos: every leaf connects to every spine. The leaf-spine
    /// link rate is `hosts_per_leaf × host_bps / (spines × oversubscription)`
    /// unless given.
    pub fn leaf_spine(
        leaves: usize,
        spines: usize,
        hosts_per_leaf: usize,
        host_bps: u64,
        spine_bps: Option<u64>,
        oversubscription: f64,
        delay_ps: u64,
    ) -> Result<Topology, TopologyError> {
        if leaves == 0 || spines == 0 || hosts_per_leaf == 0 {
            return Err(TopologyError::Shape(
                "leaf-spine needs at least one leaf, spine and host per leaf".into(),
            ));
        }
        if oversubscription.is_nan() || oversubscription <= 0.0 {
            return Err(TopologyError::Shape(
                "oversubscription must be positive".into(),
            ));
        }
        let up = spine_bps.unwrap_or_else(|| {
            ((hosts_per_leaf as f64 * host_bps as f64) / (spines as f64 * oversubscription)) as u64
        });
        let mut b = Builder::new();
        for s in 0..spines {
            b.switch(format!("spine{s}"));
        }
        for l in 0..leaves {
            b.switch(format!("leaf{l}"));
            for s in 0..spines {
                b.link(format!("leaf{l}"), format!("spine{s}"), up, delay_ps);
            }
        }
        for l in 0..leaves {
            for i in 0..hosts_per_leaf {
                let h = format!("h{}", l * hosts_per_leaf + i);
                b.host(h.clone());
                b.link(h, format!("leaf{l}"), host_bps, delay_ps);
            }
        }
        b.build()
    }

    /// A three-tier fat tree in pods: each pod has `tors_per_pod` ToRs and
    /// `aggs_per_pod` aggregation switches, fully meshed; aggregation switch
    /// `j` of every pod connects to core group `j` (`cores / aggs_per_pod`
    /// cores). With 5 pods × 4 ToR × 16 hosts, 4 aggs per pod and 16 cores
    /// this is the 320-host tree of the HPCC paper (Li et al., SIGCOMM 2019).
    #[allow(clippy::too_many_arguments)]
    pub fn fat_tree(
        pods: usize,
        tors_per_pod: usize,
        aggs_per_pod: usize,
        hosts_per_tor: usize,
        cores: usize,
        host_bps: u64,
        fabric_bps: u64,
        delay_ps: u64,
    ) -> Result<Topology, TopologyError> {
        if pods == 0 || tors_per_pod == 0 || aggs_per_pod == 0 || hosts_per_tor == 0 {
            return Err(TopologyError::Shape(
                "fat-tree needs pods, ToRs, aggregation switches and hosts".into(),
            ));
        }
        if cores == 0 || !cores.is_multiple_of(aggs_per_pod) {
            return Err(TopologyError::Shape(format!(
                "fat-tree cores ({cores}) must be a positive multiple of aggs_per_pod ({aggs_per_pod})"
            )));
        }
        let per_group = cores / aggs_per_pod;
        let mut b = Builder::new();
        let n_hosts = pods * tors_per_pod * hosts_per_tor;
        // Hosts first, so host h is node h (as in the HPCC topology files).
        for h in 0..n_hosts {
            b.host(format!("h{h}"));
        }
        for t in 0..pods * tors_per_pod {
            b.switch(format!("tor{t}"));
        }
        for a in 0..pods * aggs_per_pod {
            b.switch(format!("agg{a}"));
        }
        for c in 0..cores {
            b.switch(format!("core{c}"));
        }
        for h in 0..n_hosts {
            b.link(
                format!("h{h}"),
                format!("tor{}", h / hosts_per_tor),
                host_bps,
                delay_ps,
            );
        }
        for p in 0..pods {
            for t in 0..tors_per_pod {
                for a in 0..aggs_per_pod {
                    b.link(
                        format!("tor{}", p * tors_per_pod + t),
                        format!("agg{}", p * aggs_per_pod + a),
                        fabric_bps,
                        delay_ps,
                    );
                }
            }
        }
        for p in 0..pods {
            for a in 0..aggs_per_pod {
                for c in 0..per_group {
                    b.link(
                        format!("agg{}", p * aggs_per_pod + a),
                        format!("core{}", a * per_group + c),
                        fabric_bps,
                        delay_ps,
                    );
                }
            }
        }
        b.build()
    }
}

/// Next-hop tables (see [`Topology::routes`]).
#[derive(Debug, Clone)]
pub struct Routes {
    /// Rows of `spans` per node: one per group of hosts sharing next hops.
    groups: usize,
    /// Each host's group.
    group: Vec<u32>,
    /// Each host's edge switch and the host's port there (`u32::MAX`: the
    /// host is a group of its own).
    edge: Vec<(u32, u16)>,
    /// Each host's node.
    host_node: Vec<u32>,
    spans: Vec<(u32, u16)>,
    ports: Vec<u16>,
}

impl Routes {
    /// Heap bytes of the tables.
    pub fn heap_bytes(&self) -> u64 {
        use std::mem::size_of_val;
        (size_of_val(&self.group[..])
            + size_of_val(&self.edge[..])
            + size_of_val(&self.host_node[..])
            + size_of_val(&self.spans[..])
            + size_of_val(&self.ports[..])) as u64
    }

    /// Next-hop ports at `node` toward host `dst`.
    pub fn get(&self, node: usize, dst: u32) -> &[u16] {
        let d = dst as usize;
        let (edge, _) = &self.edge[d];
        if *edge as usize == node {
            return std::slice::from_ref(&self.edge[d].1);
        }
        if self.host_node[d] as usize == node {
            return &[];
        }
        let (s, n) = self.spans[node * self.groups + self.group[d] as usize];
        &self.ports[s as usize..s as usize + usize::from(n)]
    }

    /// [`get`](Self::get), to reorder (the hops of a host's whole group).
    pub fn hops_mut(&mut self, node: usize, dst: u32) -> &mut [u16] {
        let d = dst as usize;
        if self.edge[d].0 as usize == node {
            return std::slice::from_mut(&mut self.edge[d].1);
        }
        if self.host_node[d] as usize == node {
            return &mut [];
        }
        let (s, n) = self.spans[node * self.groups + self.group[d] as usize];
        &mut self.ports[s as usize..s as usize + usize::from(n)]
    }
}

/// Gigabits per second to bits per second.
pub const fn gbps(g: u64) -> u64 {
    g * G
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fat_tree_320_matches_hpcc_shape() {
        let t = Topology::fat_tree(5, 4, 4, 16, 16, gbps(100), gbps(400), 1_000_000).unwrap();
        assert_eq!(t.n_hosts(), 320);
        assert_eq!(t.nodes.len(), 376);
        assert_eq!(t.links.len(), 480);
        let r = t.routes();
        // Host 0 to host 319 crosses ToR, agg, core, agg, ToR: 6 links.
        assert_eq!(t.path(&r, 0, 319).len(), 6);
        // A ToR has 4 equal-cost uplinks toward a remote host.
        let tor0 = t.hosts.len();
        assert_eq!(r.get(tor0, 319).len(), 4);
        assert_eq!(r.get(tor0, 1).len(), 1);
    }

    /// A multi-homed host (machine 0: node 0 on switch 3, node 2 on
    /// switch 4) and a host (node 1) on switch 5, the three switches
    /// under switch 6. Routes toward either NIC of the machine lead to
    /// the nearer NIC: down to it from its own switch, over both of the
    /// machine's switches from above; a path into the machine ends at
    /// whichever NIC it reaches.
    #[test]
    fn routes_lead_to_the_nearest_nic_of_a_machine() {
        let node = |name: &str, kind| Node {
            name: name.into(),
            kind,
        };
        let nodes = vec![
            node("host0", NodeKind::Host),
            node("host1", NodeKind::Host),
            node("host0.nic2", NodeKind::Host),
            node("switch3", NodeKind::Switch),
            node("switch4", NodeKind::Switch),
            node("switch5", NodeKind::Switch),
            node("switch6", NodeKind::Switch),
        ];
        let link = |a, b| Link {
            a,
            b,
            rate_bps: gbps(100),
            delay_ps: 1_000_000,
        };
        let links = vec![
            link(0, 3),
            link(2, 4),
            link(1, 5),
            link(3, 6),
            link(4, 6),
            link(5, 6),
        ];
        let t = Topology::from_parts_in_machines(
            nodes.clone(),
            links.clone(),
            vec![0, 1, 0, 3, 4, 5, 6],
        )
        .unwrap();
        assert!(t.multi_homed);
        assert_eq!(t.machine_nics()[&0], [0, 2]);
        let r = t.routes();
        // Host indices: node 0 → 0, node 1 → 1, node 2 → 2.
        for nic in [0, 2] {
            // Switch 6 reaches the machine over switches 3 and 4 (its ports 0, 1).
            assert_eq!(r.get(6, nic), [0, 1], "toward NIC {nic}");
            // Each of those switches straight down to its own NIC.
            assert_eq!(r.get(3, nic), [0]);
            assert_eq!(r.get(4, nic), [0]);
            // Switch 5 up to switch 6.
            assert_eq!(r.get(5, nic), [1]);
        }
        // Host 1 to the machine: four links, to the NIC on switch 3 (the
        // first next hop), whichever NIC it is addressed to.
        for nic in [0, 2] {
            let path = t.path(&r, 1, nic);
            assert_eq!(path.len(), 4);
            assert_eq!(path.last().map(|p| p.peer), Some(0));
        }
        // Only hosts share machines, and a machine is named by its own
        // first node.
        for bad in [
            vec![0, 1, 3, 3, 4, 5, 6],
            vec![0, 1, 0, 0, 4, 5, 6],
            vec![2, 1, 2, 3, 4, 5, 6],
        ] {
            let b = bad.clone();
            match Topology::from_parts_in_machines(nodes.clone(), links.clone(), bad) {
                Err(TopologyError::Shape(_)) => {}
                other => panic!("{b:?}: {other:?}"),
            }
        }
    }

    /// The table as it was built before it was grouped by edge switch: a
    /// breadth-first search from every host.
    fn routes_per_host(t: &Topology) -> Vec<Vec<Vec<u16>>> {
        let mut out = vec![vec![Vec::new(); t.n_hosts()]; t.nodes.len()];
        for (hi, &hn) in t.hosts.iter().enumerate() {
            let mut dist = vec![u32::MAX; t.nodes.len()];
            dist[hn] = 0;
            let mut q = VecDeque::from([hn]);
            while let Some(x) = q.pop_front() {
                for p in &t.ports[x] {
                    if dist[p.peer] == u32::MAX {
                        dist[p.peer] = dist[x] + 1;
                        if t.nodes[p.peer].kind == NodeKind::Switch {
                            q.push_back(p.peer);
                        }
                    }
                }
            }
            for (node, ports) in t.ports.iter().enumerate() {
                if node == hn || dist[node] == u32::MAX {
                    continue;
                }
                for (pi, p) in ports.iter().enumerate() {
                    let host_peer = t.nodes[p.peer].kind == NodeKind::Host && p.peer != hn;
                    if dist[p.peer] != u32::MAX && dist[p.peer] + 1 == dist[node] && !host_peer {
                        out[node][hi].push(pi as u16);
                    }
                }
            }
        }
        out
    }

    #[test]
    fn routes_by_edge_switch_equal_a_search_per_host() {
        let mut b = Builder::new();
        // Uneven: hosts on a switch that is also a transit hop, a chain,
        // and parallel paths of different lengths.
        b.host("a").host("b").host("c").host("d");
        b.switch("s1").switch("s2").switch("s3").switch("s4");
        b.link("a", "s1", 1, 1)
            .link("b", "s1", 1, 1)
            .link("c", "s2", 1, 1)
            .link("d", "s4", 1, 1)
            .link("s1", "s2", 1, 1)
            .link("s2", "s3", 1, 1)
            .link("s3", "s4", 1, 1)
            .link("s1", "s3", 1, 1);
        for t in [
            Topology::fat_tree(3, 2, 2, 3, 4, gbps(100), gbps(400), 1_000_000).unwrap(),
            Topology::leaf_spine(4, 2, 8, gbps(100), None, 2.0, 1_000_000).unwrap(),
            Topology::star(5, gbps(100), 1_000_000).unwrap(),
            b.build().unwrap(),
        ] {
            let r = t.routes();
            let want = routes_per_host(&t);
            for (node, row) in want.iter().enumerate() {
                for (h, hops) in row.iter().enumerate() {
                    assert_eq!(r.get(node, h as u32), &hops[..], "{node} → {h}");
                }
            }
        }
    }

    #[test]
    fn leaf_spine_oversubscription() {
        let t = Topology::leaf_spine(4, 2, 8, gbps(100), None, 2.0, 1_000_000).unwrap();
        // 8 × 100G down, 2 uplinks at 200G each: 2:1.
        let up = t
            .links
            .iter()
            .find(|l| t.nodes[l.a].name == "leaf0")
            .unwrap();
        assert_eq!(up.rate_bps, gbps(200));
        assert_eq!(t.path(&t.routes(), 0, 31).len(), 4);
    }

    #[test]
    fn validation_errors() {
        let mut b = Builder::new();
        b.host("a").switch("s").link("a", "x", 1, 1);
        assert!(matches!(b.build(), Err(TopologyError::UnknownNode { .. })));
        let mut b = Builder::new();
        b.host("a")
            .switch("s")
            .link("a", "s", 1, 1)
            .link("s", "a", 1, 1);
        assert!(matches!(
            b.build(),
            Err(TopologyError::DuplicateLink { .. })
        ));
        let mut b = Builder::new();
        b.host("a").host("b").switch("s").switch("t");
        b.link("a", "s", 1, 1).link("b", "t", 1, 1);
        assert!(matches!(b.build(), Err(TopologyError::Disconnected { .. })));
    }
}
