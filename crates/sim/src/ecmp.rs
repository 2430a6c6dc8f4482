//! Equal-cost multipath: pick one of several next hops by hashing the
//! RoCEv2 5-tuple (source and destination IP, UDP source and destination
//! port, protocol 17). RoCEv2 fixes the destination port at 4791, so the
//! UDP source port — chosen per QP — is the entropy that spreads flows
//! (RoCEv2 spec, Annex A17.3.1). Each switch mixes in its own seed so that
//! consecutive tiers do not make correlated choices (hash polarization).

pub mod ns3;

/// How switches choose among equal-cost next hops.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub enum EcmpMode {
    /// Our hash of the RoCEv2 5-tuple ([`select`]), seeded per switch from
    /// the run's seed; each QP's UDP source port is drawn at random.
    #[default]
    Hash,
    /// The HPCC ns-3 simulator's choice ([`ns3`]): its hash, its order of
    /// next hops, and its ports, `(sport, dport)` per flow.
    Ns3 { flow_ports: Vec<(u16, u16)> },
}

/// Fields the hash covers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FiveTuple {
    pub src_ip: u32,
    pub dst_ip: u32,
    pub src_port: u16,
    pub dst_port: u16,
    pub protocol: u8,
}

/// A 64-bit finalizer (SplitMix64's), good avalanche and cheap.
fn mix(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// The hash of `t` under `seed`.
pub fn hash(t: &FiveTuple, seed: u64) -> u64 {
    let a = (u64::from(t.src_ip) << 32) | u64::from(t.dst_ip);
    let b = (u64::from(t.src_port) << 24) | (u64::from(t.dst_port) << 8) | u64::from(t.protocol);
    mix(mix(a ^ seed) ^ b.wrapping_add(seed.rotate_left(17)))
}

/// Index of the chosen next hop among `n` (n ≥ 1).
pub fn select(t: &FiveTuple, seed: u64, n: usize) -> usize {
    if n <= 1 {
        0
    } else {
        (hash(t, seed) % n as u64) as usize
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn source_port_spreads_flows() {
        let mut counts = [0u32; 4];
        for sport in 0..4000u16 {
            let t = FiveTuple {
                src_ip: 0x0a00_0001,
                dst_ip: 0x0a00_0002,
                src_port: 49152 + sport,
                dst_port: 4791,
                protocol: 17,
            };
            counts[select(&t, 7, 4)] += 1;
        }
        for c in counts {
            assert!((850..1150).contains(&c), "{counts:?}");
        }
    }

    #[test]
    fn deterministic() {
        let t = FiveTuple {
            src_ip: 1,
            dst_ip: 2,
            src_port: 3,
            dst_port: 4791,
            protocol: 17,
        };
        assert_eq!(hash(&t, 9), hash(&t, 9));
        assert_ne!(hash(&t, 9), hash(&t, 10));
    }
}
