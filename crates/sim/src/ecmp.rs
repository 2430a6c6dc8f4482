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
/// Unlike [`ns3::select_mixed`] it skips the hash for one next hop: this hash
/// costs more, and large fabrics (where it is used) route each arrival
/// twice, once ahead to prefetch its egress port.
pub fn select(t: &FiveTuple, seed: u64, n: usize) -> usize {
    if n <= 1 { 0 } else { rem64(hash(t, seed), n) }
}

/// Next-hop counts up to this take their remainder by multiplication
/// ([`rem32`], [`rem64`]); larger ones divide.
const FAST_REM_MAX: usize = 64;

/// `⌈2⁶⁴ / d⌉` (wrapped: 0 for `d` = 1) for each `d` up to
/// [`FAST_REM_MAX`] (0 for `d` = 0, never used).
static REM32_M: [u64; FAST_REM_MAX + 1] = {
    let mut t = [0u64; FAST_REM_MAX + 1];
    let mut d = 1;
    while d <= FAST_REM_MAX {
        t[d] = (u64::MAX / d as u64).wrapping_add(1);
        d += 1;
    }
    t
};

/// `⌈2¹²⁸ / d⌉` (wrapped) for each `d` up to [`FAST_REM_MAX`].
static REM64_M: [u128; FAST_REM_MAX + 1] = {
    let mut t = [0u128; FAST_REM_MAX + 1];
    let mut d = 1;
    while d <= FAST_REM_MAX {
        t[d] = (u128::MAX / d as u128).wrapping_add(1);
        d += 1;
    }
    t
};

/// `x % n` for `n ≥ 1`. Every switch hop takes the hash of its packet
/// modulo the number of next hops, and the egress port waits on it: a
/// hardware division there took 20-90 cycles. With `c = ⌈2^F / n⌉` the
/// remainder is the high half of `(c·x mod 2^F)·n`, exactly, for every
/// `x` below `2^(F/2)` (Lemire, Kaser and Kurz, "Faster remainder by
/// direct computation", Software: Practice and Experience 49(6), 2019,
/// Theorem 1, with `F` = 64 for 32-bit `x`).
#[inline]
pub fn rem32(x: u32, n: usize) -> usize {
    match REM32_M.get(n) {
        Some(&c) if n > 0 => {
            let frac = c.wrapping_mul(u64::from(x));
            ((u128::from(frac) * n as u128) >> 64) as usize
        }
        _ => (u64::from(x) % n as u64) as usize,
    }
}

/// [`rem32`] for 64-bit `x` (`F` = 128).
#[inline]
pub fn rem64(x: u64, n: usize) -> usize {
    match REM64_M.get(n) {
        Some(&c) if n > 0 => {
            let frac = c.wrapping_mul(u128::from(x));
            // The high 64 bits of the 192-bit `frac × n`.
            let n = n as u128;
            let lo = ((frac as u64 as u128) * n) >> 64;
            let hi = (frac >> 64) * n;
            ((lo + hi) >> 64) as usize
        }
        _ => (x % n as u64) as usize,
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

    /// The multiplying remainders agree with `%` for every next-hop count
    /// they cover (and a few they do not), at the ends of the range and on
    /// a spread of values between.
    #[test]
    fn fast_remainders_are_exact() {
        let mut x = 0x9e37_79b9_7f4a_7c15u64;
        let mut samples: Vec<u64> = vec![0, 1, 2, u64::MAX, u64::MAX - 1, 1 << 63, (1 << 63) - 1];
        samples.extend([u64::from(u32::MAX), u64::from(u32::MAX) - 1, 1 << 32]);
        for _ in 0..20_000 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            samples.push(x);
        }
        for n in 1..=FAST_REM_MAX + 3 {
            for &v in &samples {
                for v in [v, v - v % n as u64, (v - v % n as u64).wrapping_sub(1)] {
                    assert_eq!(rem64(v, n), (v % n as u64) as usize, "{v} % {n}");
                    let w = v as u32;
                    assert_eq!(rem32(w, n), (w % n as u32) as usize, "{w} % {n}");
                }
            }
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
