//! The HPCC ns-3 simulator's ECMP, reproduced so that `--hpcc-config`
//! runs send every flow down the path ns-3 sends it (issue 12 part 3:
//! under PFC alone the flows that suffer are the ones whose paths
//! collide, so the tails of the two simulators only compare when the
//! collisions are the same).
//!
//! Three things decide ns-3's next hop, read from its `switch-node.cc`
//! and `third.cc`:
//!
//! * **The hash.** `SwitchNode::GetOutDev` hashes 12 bytes — source IP,
//!   destination IP, then `sport | dport << 16` (for an ACK, the ACK's own
//!   ports: the data's swapped) — with 32-bit MurmurHash3 seeded by the
//!   switch's node id (`m_ecmpSeed = m_id`, never reset by third.cc), and
//!   takes the hash modulo the number of next hops.
//! * **The ports.** Each host pair numbers its flows' source ports 10000,
//!   10001, … in flow-file order; the destination port is the flow file's.
//! * **The order of the next hops.** third.cc's `CalculateRoute` runs a
//!   breadth-first search from each host and appends a node to a
//!   neighbour's next-hop list as the search reaches the neighbour from
//!   it, iterating neighbours in the order of a `std::map` keyed by node
//!   *pointers*. That order is the order of the nodes in memory: hosts
//!   are small objects on the heap, allocated in id order; a switch
//!   carries a 2 MB counter array (`m_bytes[257][257][8]`), so each is its
//!   own `mmap`, placed below the previous one. Hosts therefore come
//!   first, by id, and switches after them, by *decreasing* id
//!   ([`ns3_pointer_rank`]). This is an inference about glibc's allocator
//!   (allocations above its 128 kB mmap threshold, maps placed top-down),
//!   not something ns-3 states; the per-flow FCT agreement it gives is the
//!   evidence (`scenarios/HPCC_COMPARISON.md`).

use crate::topology::{NodeKind, Topology};

/// 32-bit MurmurHash3 (Austin Appleby's public-domain design) of the
/// three little-endian words `key`, as `SwitchNode::EcmpHash` computes it
/// for its 12-byte key.
pub fn murmur3_words(key: [u32; 3], seed: u32) -> u32 {
    murmur3_mixed(key.map(murmur3_mix), seed)
}

/// MurmurHash3's scramble of one key word before it meets the state: the
/// part of the hash that does not depend on the seed. ns-3's key is the
/// same at every switch a packet crosses and only the seed (the switch's
/// id) changes, so the simulator scrambles each word once (the addresses
/// when it builds its table, the ports when the packet is made) and every
/// hop runs only [`murmur3_mixed`]: nine multiplications and rotations
/// fewer per switch hop, three of them on the chain the egress port
/// waits on.
#[inline]
pub const fn murmur3_mix(k: u32) -> u32 {
    k.wrapping_mul(0xcc9e_2d51)
        .rotate_left(15)
        .wrapping_mul(0x1b87_3593)
}

/// [`murmur3_words`] of the key whose words [`murmur3_mix`] made `mixed`.
#[inline]
pub fn murmur3_mixed(mixed: [u32; 3], seed: u32) -> u32 {
    let mut h = seed;
    for k in mixed {
        h ^= k;
        h = h.rotate_left(13);
        h = h.wrapping_mul(5).wrapping_add(0xe654_6b64);
    }
    h ^= 12;
    h ^= h >> 16;
    h = h.wrapping_mul(0x85eb_ca6b);
    h ^= h >> 13;
    h = h.wrapping_mul(0xc2b2_ae35);
    h ^ (h >> 16)
}

/// ns-3's `RdmaQueuePair::GetHash` (and `RdmaRxQueuePair`'s, from the
/// receiver's side): `Hash32`, 32-bit MurmurHash3 seeded with 0x8BADF00D,
/// of the QP's own address, its peer's, its own port and its peer's, as
/// 12 little-endian bytes. A multi-homed host puts the QP on the NIC this
/// picks among those on a shortest path (`RdmaHw::GetNicIdxOfQp`).
pub fn qp_hash(sip: u32, dip: u32, sport: u16, dport: u16) -> u32 {
    const NS3_HASH_SEED: u32 = 0x8BAD_F00D;
    murmur3_words(
        [sip, dip, u32::from(sport) | u32::from(dport) << 16],
        NS3_HASH_SEED,
    )
}

/// Index of ns-3's next hop among `n` for a packet from `sip` to `dip`
/// with UDP ports `ports` (`sport | dport << 16`) at the switch with node
/// id `node`.
pub fn select(sip: u32, dip: u32, ports: u32, node: u32, n: usize) -> usize {
    select_mixed(
        [murmur3_mix(sip), murmur3_mix(dip), murmur3_mix(ports)],
        node,
        n,
    )
}

/// [`select`] of the key words scrambled by [`murmur3_mix`] (what the
/// simulator's packet path keeps).
///
/// Hashes even for one next hop (`n` = 1 gives 0 either way): on the
/// packet path a branch on `n` mispredicted, as hops down to a host (one
/// next hop) and hops up (several) come in no order.
#[inline]
pub fn select_mixed(mixed: [u32; 3], node: u32, n: usize) -> usize {
    if n == 0 {
        0
    } else {
        super::rem32(murmur3_mixed(mixed, node), n)
    }
}

/// Where ns-3's `std::map<Ptr<Node>, …>` puts node `id` (see the module
/// documentation): hosts first by id, then switches by decreasing id.
pub fn ns3_pointer_rank(topo: &Topology, id: usize) -> u64 {
    match topo.nodes[id].kind {
        // A multi-homed host's further NICs are parts of its one node.
        NodeKind::Host => topo.machine[id] as u64,
        NodeKind::Switch => (1u64 << 32) + (u64::from(u32::MAX) - id as u64),
    }
}

/// ns-3's next-hop lists toward host node `host`: for every node, the
/// neighbours it forwards to, in the order third.cc's `CalculateRoute`
/// appends them (its breadth-first search, visiting each node's
/// neighbours in `rank` order, transiting switches only).
pub fn next_hop_order(
    topo: &Topology,
    host: usize,
    rank: impl Fn(usize) -> u64,
) -> Vec<Vec<usize>> {
    next_hop_order_over(topo, host, rank, |_, _| true)
}

/// [`next_hop_order`] over the ports `is_up(node, port)` accepts: third.cc's
/// `CalculateRoute` skips a neighbour whose link is down, as it does again
/// for every host after `TakeDownLink`.
pub fn next_hop_order_over(
    topo: &Topology,
    host: usize,
    rank: impl Fn(usize) -> u64,
    is_up: impl Fn(usize, usize) -> bool,
) -> Vec<Vec<usize>> {
    let n = topo.nodes.len();
    let mut dis = vec![u32::MAX; n];
    let mut next_hops = vec![Vec::new(); n];
    // A multi-homed host is one node in ns-3, with the links of all its
    // NICs: searched from as one, and reached as one (named by its first
    // node; see `Topology::from_parts_in_machines`).
    let nics = topo.machine_nics();
    let host = topo.machine[host];
    let mut q = vec![host];
    dis[host] = 0;
    let mut i = 0;
    let mut nbrs = Vec::new();
    while i < q.len() {
        let now = q[i];
        i += 1;
        let d = dis[now];
        nbrs.clear();
        for &x in nics.get(&now).map_or(std::slice::from_ref(&now), |v| v) {
            nbrs.extend(
                (topo.ports[x].iter().enumerate())
                    .filter(|&(pi, _)| is_up(x, pi))
                    .map(|(_, p)| topo.machine[p.peer]),
            );
        }
        nbrs.sort_unstable_by_key(|&x| rank(x));
        nbrs.dedup();
        for &next in &nbrs {
            if dis[next] == u32::MAX {
                dis[next] = d + 1;
                if topo.nodes[next].kind == NodeKind::Switch {
                    q.push(next);
                }
            }
            if dis[next] == d + 1 {
                next_hops[next].push(now);
            }
        }
    }
    next_hops
}

#[cfg(test)]
mod tests {

    /// `Hash32` values printed by the HPCC repository's ns-3 itself (its
    /// core library, on the 12-byte buffer `RdmaQueuePair::GetHash`
    /// builds).
    #[test]
    fn qp_hash_is_ns3_s() {
        assert_eq!(qp_hash(0x0b00_0001, 0x0b00_0101, 10000, 100), 3_887_419_479);
        assert_eq!(qp_hash(0x0b00_6f01, 0x0b00_ae01, 10001, 100), 2_385_788_728);
        assert_eq!(qp_hash(0x0b01_2a01, 0x0b00_3301, 10002, 100), 3_848_372_989);
    }

    use super::*;

    /// Reference values of 32-bit MurmurHash3 over 12 bytes, computed from
    /// the published algorithm (x86_32 variant) with an independent byte
    /// oriented implementation in the test below.
    fn murmur3_bytes(key: &[u8], seed: u32) -> u32 {
        let mut h = seed;
        let chunks = key.chunks_exact(4);
        let tail = chunks.remainder();
        for c in chunks {
            let mut k = u32::from_le_bytes([c[0], c[1], c[2], c[3]]);
            k = k.wrapping_mul(0xcc9e_2d51);
            k = k.rotate_left(15);
            k = k.wrapping_mul(0x1b87_3593);
            h ^= k;
            h = h.rotate_left(13);
            h = h.wrapping_add(h << 2).wrapping_add(0xe654_6b64);
        }
        let mut k = 0u32;
        for (i, b) in tail.iter().enumerate() {
            k |= u32::from(*b) << (8 * i);
        }
        if !tail.is_empty() {
            k = k
                .wrapping_mul(0xcc9e_2d51)
                .rotate_left(15)
                .wrapping_mul(0x1b87_3593);
            h ^= k;
        }
        h ^= key.len() as u32;
        h ^= h >> 16;
        h = h.wrapping_mul(0x85eb_ca6b);
        h ^= h >> 13;
        h = h.wrapping_mul(0xc2b2_ae35);
        h ^ (h >> 16)
    }

    #[test]
    fn murmur3_known_answers() {
        // Published test vectors of MurmurHash3_x86_32.
        assert_eq!(murmur3_bytes(b"", 0), 0);
        assert_eq!(murmur3_bytes(b"", 1), 0x514e_28b7);
        assert_eq!(murmur3_bytes(b"Hello, world!", 1234), 0xfaf6_cdb3);
        assert_eq!(
            murmur3_bytes(b"The quick brown fox jumps over the lazy dog", 0),
            0x2e4f_f723
        );
    }

    /// A diamond: host 0 under switch 2, host 1 under switch 5, two paths
    /// between them through switches 3 and 4. Toward host 1, switch 2
    /// lists its next hops as ns-3's search from host 1 reaches it: from
    /// switch 5 the search visits switch 4 before switch 3 (higher id,
    /// lower address), so 4 comes first; with ids in rising order it would
    /// be 3.
    #[test]
    fn next_hops_in_the_order_of_ns3_s_search() {
        use crate::topology::{Link, Node};
        let kinds = [
            NodeKind::Host,
            NodeKind::Host,
            NodeKind::Switch,
            NodeKind::Switch,
            NodeKind::Switch,
            NodeKind::Switch,
        ];
        let nodes = kinds
            .iter()
            .enumerate()
            .map(|(i, k)| Node {
                name: format!("n{i}"),
                kind: *k,
            })
            .collect();
        let links = [(0, 2), (2, 3), (2, 4), (3, 5), (4, 5), (5, 1)]
            .into_iter()
            .map(|(a, b)| Link {
                a,
                b,
                rate_bps: 100_000_000_000,
                delay_ps: 1_000_000,
            })
            .collect();
        let topo = Topology::from_parts(nodes, links).unwrap();
        let order = next_hop_order(&topo, 1, |x| ns3_pointer_rank(&topo, x));
        assert_eq!(order[2], vec![4, 3]);
        assert_eq!(order[3], vec![5]);
        assert_eq!(order[5], vec![1]);
        let rising = next_hop_order(&topo, 1, |x| x as u64);
        assert_eq!(rising[2], vec![3, 4]);
        // The simulator's table, reordered the same way.
        let peers = |fib: &crate::fib::Fib| -> Vec<usize> {
            fib.get(2, 1)
                .iter()
                .map(|&p| topo.ports[2][usize::from(p)].peer)
                .collect()
        };
        assert_eq!(
            peers(&crate::fib::Fib::new(&topo, topo.routes())),
            vec![3, 4]
        );
        let mut routes = topo.routes();
        crate::fib::reorder(&mut routes, &topo, |h| {
            next_hop_order(&topo, h, |x| ns3_pointer_rank(&topo, x))
        });
        let fib = crate::fib::Fib::new(&topo, routes);
        assert!(fib.is_compact(), "the reordered table still reduces");
        assert_eq!(peers(&fib), vec![4, 3]);
    }

    #[test]
    fn select_is_the_byte_hash_reduced() {
        // `select` (the word form, scrambled in two steps) against the
        // independent byte-oriented hash, reduced to `n` next hops.
        for (sip, dip, ports) in [
            (0x0b00_0001u32, 0x0b00_0101u32, 10000u32 | 100 << 16),
            (0x0b01_3f01, 0x0b00_9901, 100 | 10003 << 16),
        ] {
            let mut b = Vec::new();
            for w in [sip, dip, ports] {
                b.extend_from_slice(&w.to_le_bytes());
            }
            for (node, n) in [(320u32, 1usize), (321, 2), (375, 3), (400, 4), (9, 16)] {
                let want = super::super::rem32(murmur3_bytes(&b, node), n);
                assert_eq!(select(sip, dip, ports, node, n), want);
            }
        }
    }

    #[test]
    fn word_form_equals_byte_form() {
        for (sip, dip, ports, seed) in [
            (0x0b00_0001u32, 0x0b00_0101u32, 10000u32 | 100 << 16, 320u32),
            (0x0b01_3f01, 0x0b00_9901, 100 | 10003 << 16, 375),
            (0, 0, 0, 0),
        ] {
            let mut b = Vec::new();
            for w in [sip, dip, ports] {
                b.extend_from_slice(&w.to_le_bytes());
            }
            assert_eq!(
                murmur3_words([sip, dip, ports], seed),
                murmur3_bytes(&b, seed)
            );
        }
    }
}
