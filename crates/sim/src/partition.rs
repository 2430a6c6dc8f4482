//! Which nodes a partitioned run handles together, and for how long at a
//! time (see [`crate::event::Partition`] for the order and why it is exact).
//!
//! Groups follow the fabric's own locality: hosts in runs of consecutive
//! host numbers (a fat tree's pods, a leaf-spine's racks), then each switch
//! with the group of every switch or host below it, layer by layer up from
//! the hosts. A switch whose lower neighbours lie in several groups (a fat
//! tree's cores, a leaf-spine's spines) belongs to none by nature; those
//! are dealt out evenly, so every group holds a share of them.

use crate::event::Ps;
use crate::topology::{NodeKind, Topology};

/// Hosts per group: a k=32 fat tree's pod (256 hosts, its 32 switches and
/// their packets) makes a window's work that the caches hold.
pub const HOSTS_PER_GROUP: usize = 256;

/// The nodes' groups, numbered from 1 (group 0 is the queue's own, for
/// events of no node), and the shortest link delay between two groups.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Groups {
    pub node_group: Vec<u32>,
    pub groups: u32,
    pub min_cross_delay: Ps,
}

/// Groups of about [`HOSTS_PER_GROUP`] hosts, or `None` where the fabric
/// is too small for two or no link between groups has a delay (a window
/// must be shorter than every such link).
pub fn group_nodes(topo: &Topology, groups: Option<u32>) -> Option<Groups> {
    let n_hosts = topo.hosts.len();
    let g = groups.unwrap_or((n_hosts / HOSTS_PER_GROUP) as u32);
    if g < 2 || n_hosts < g as usize {
        return None;
    }
    let n = topo.nodes.len();
    const NONE: u32 = u32::MAX;
    let mut group = vec![NONE; n];
    for (h, &node) in topo.hosts.iter().enumerate() {
        group[node] = 1 + (h as u64 * u64::from(g) / n_hosts as u64) as u32;
    }
    // Layer by layer up from the hosts: a switch's lower neighbours are
    // those of the layer before.
    let mut layer: Vec<usize> = topo.hosts.clone();
    let mut depth = vec![u32::MAX; n];
    for &h in &layer {
        depth[h] = 0;
    }
    let mut d = 0;
    while !layer.is_empty() {
        d += 1;
        let mut next = Vec::new();
        for &x in &layer {
            for p in &topo.ports[x] {
                if depth[p.peer] == u32::MAX && topo.nodes[p.peer].kind == NodeKind::Switch {
                    depth[p.peer] = d;
                    next.push(p.peer);
                }
            }
        }
        let mut spanning = Vec::new();
        for &x in &next {
            let mut below = (topo.ports[x].iter())
                .filter(|p| depth[p.peer] < d)
                .map(|p| group[p.peer]);
            let first = below.next().unwrap_or(NONE);
            if first != NONE && below.all(|b| b == first) {
                group[x] = first;
            } else {
                spanning.push(x);
            }
        }
        // This layer's spanning switches, dealt out evenly in the order
        // found (before the layer above looks at them).
        let ns = spanning.len() as u64;
        for (i, &x) in spanning.iter().enumerate() {
            group[x] = 1 + (i as u64 * u64::from(g) / ns) as u32;
        }
        layer = next;
    }
    // Nodes no host reaches handle no packets: any group does.
    for x in group.iter_mut().filter(|x| **x == NONE) {
        *x = 1;
    }
    let min_cross_delay = (topo.links.iter())
        .filter(|l| group[l.a] != group[l.b])
        .map(|l| l.delay_ps)
        .min()?;
    (min_cross_delay > 0).then_some(Groups {
        node_group: group,
        groups: g,
        min_cross_delay,
    })
}

/// The window: as long as the shortest link between groups allows, and a
/// whole fraction of the sampling interval (`sample`, 0 for none) so
/// that every sample falls at a window's start, where it sees every
/// group at the same time.
pub fn window_for(min_cross_delay: Ps, sample: Ps) -> Ps {
    if sample == 0 || sample <= min_cross_delay {
        return if sample == 0 { min_cross_delay } else { sample };
    }
    let mut k = sample.div_ceil(min_cross_delay);
    while !sample.is_multiple_of(k) {
        k += 1;
    }
    sample / k
}

#[cfg(test)]
mod tests {
    use super::*;

    const US: Ps = 1_000_000;

    #[test]
    fn a_fat_tree_groups_by_pod_and_deals_out_its_cores() {
        // k=8-like: 8 pods of 4 ToRs x 8 hosts (256 hosts per pod).
        let t = Topology::fat_tree(8, 4, 4, 64, 16, 100_000_000_000, 100_000_000_000, US).unwrap();
        let g = group_nodes(&t, None).unwrap();
        assert_eq!(g.groups, 8);
        assert_eq!(g.min_cross_delay, US);
        let name = |x: usize| t.nodes[x].name.as_str();
        for (x, &grp) in g.node_group.iter().enumerate() {
            assert!((1..=8).contains(&grp), "{} in group {grp}", name(x));
            let n = name(x);
            let idx = |p: &str| n[p.len()..].parse::<u32>().unwrap();
            let want = if n.starts_with("h") {
                1 + idx("h") / 256
            } else if n.starts_with("tor") {
                1 + idx("tor") / 4
            } else if n.starts_with("agg") {
                1 + idx("agg") / 4
            } else {
                // 16 cores dealt out two to a group.
                1 + idx("core") / 2
            };
            assert_eq!(grp, want, "{n}");
        }
    }

    #[test]
    fn too_small_or_delay_free_fabrics_are_not_partitioned() {
        let t = Topology::fat_tree(5, 4, 4, 16, 16, 100_000_000_000, 400_000_000_000, US).unwrap();
        assert_eq!(group_nodes(&t, None), None, "320 hosts: one group");
        assert!(group_nodes(&t, Some(5)).is_some());
        let t0 = Topology::fat_tree(5, 4, 4, 16, 16, 100_000_000_000, 400_000_000_000, 0).unwrap();
        assert_eq!(group_nodes(&t0, Some(5)), None, "no delay: no window");
    }

    #[test]
    fn windows_divide_the_sampling_interval() {
        assert_eq!(window_for(US, 10 * US), US);
        assert_eq!(window_for(US, 0), US);
        assert_eq!(window_for(3 * US, 10 * US), 2_500_000);
        assert_eq!(window_for(US, US / 2), US / 2);
        for (d, s) in [(700_000, 10 * US), (1_300, 7 * US), (999, 1_000_003)] {
            let w = window_for(d, s);
            assert!(w <= d && s % w == 0, "{d} {s} -> {w}");
        }
    }
}
