//! HPCC-PINT's switch side (the HPCC ns-3 simulator's `CC_MODE 10`,
//! `SwitchNode::SwitchNotifyDequeue`): each switch port keeps an estimate
//! of its utilisation U, updated as every packet leaves it, and a data
//! packet leaving carries the largest code of U along its path
//! ([`roce_rnic::cc::PintCodec`]). The receiver echoes the code in its ACK
//! and the sender's [`roce_rnic::cc::HpccPint`] reacts to it.
//!
//! The estimate is HPCC's per-hop load, `qlen / (B·T) + txRate / B`,
//! averaged over T as HPCC's sender averages it, but computed by a switch
//! from what it has at hand: the time since the port's previous departure
//! `dt` (at most T), that packet's size and the queue left behind,
//!
//! ```text
//! U ← dt·qlen/(B·T²) + bytes/(B·T) + U·(T − dt)/T
//! ```
//!
//! each factor an integer rounded at random to 16 significant bits, as
//! ns-3's `log2apprx` rounds it (a switch pipeline's lookup tables; see
//! [`estimate`] for where this differs). The random draws are this run's
//! own (seeded from the run's seed), not C's `rand()`: agreement with
//! ns-3 is statistical.

use rand_chacha::ChaCha8Rng;
use rand_chacha::rand_core::{Rng, SeedableRng};
use roce_rnic::cc::{PintCodec, PintTable};

/// Significant bits `log2apprx` keeps of its argument (ns-3's m).
const KEEP_BITS: u32 = 16;

/// One switch port's estimate, with the factors its link's rate and T
/// give each term (computed once: three divisions per departure were a
/// tenth of the coding's time).
#[derive(Debug, Clone, Copy, Default)]
struct PortState {
    /// U, the port's utilisation estimate.
    u: f64,
    /// When the port's previous packet left (ns; 0 before any).
    last_ns: u64,
    /// That packet's size (bytes; 0 before any).
    last_bytes: u32,
    /// The port's last code before truncation: where the next search of
    /// the code table starts.
    hint: u16,
    /// 256·10^9 / (B·T²), 10^9 / (B·T): the queue's and the last
    /// packet's terms per unit (B bytes/s, T ns).
    c_queue: f64,
    c_bytes: f64,
}

/// Every switch port's estimate, and the draws that round them.
pub(crate) struct PintSwitches {
    table: PintTable,
    /// T (ns): the fabric's largest base RTT, ns-3's `MaxRtt`.
    max_rtt_ns: u64,
    /// 1 / (8192·T): the carried-over term's factor.
    c_carry: f64,
    /// Every switch's ports in turn; switch `s`'s from `first[s]`.
    ports: Vec<PortState>,
    first: Vec<u32>,
    rng: ChaCha8Rng,
}

impl PintSwitches {
    /// Estimates for switches whose ports' link rates (b/s) are
    /// `port_rates`, switch by switch, coding with `codec`, averaging
    /// over `max_rtt_ns`.
    pub(crate) fn new(
        codec: PintCodec,
        max_rtt_ns: u64,
        port_rates: impl IntoIterator<Item = Vec<u64>>,
        seed: u64,
    ) -> PintSwitches {
        let t = max_rtt_ns.max(1) as f64;
        let (mut ports, mut first) = (Vec::new(), Vec::new());
        for rates in port_rates {
            first.push(ports.len() as u32);
            ports.extend(rates.into_iter().map(|bps| {
                let b = (bps / 8).max(1) as f64;
                PortState {
                    c_queue: 256.0 * 1e9 / (b * t * t),
                    c_bytes: 1e9 / (b * t),
                    ..PortState::default()
                }
            }));
        }
        first.push(ports.len() as u32);
        PintSwitches {
            table: PintTable::new(codec),
            max_rtt_ns: max_rtt_ns.max(1),
            c_carry: 1.0 / (8192.0 * t),
            ports,
            first,
            // Apart from the ECN coin's stream: PINT's draws do not move it.
            rng: ChaCha8Rng::seed_from_u64(seed ^ 0x5049_4e54_5049_4e54),
        }
    }

    pub(crate) fn codec(&self) -> &PintCodec {
        self.table.codec()
    }

    /// A packet of `bytes` leaves port `port` of switch `sw` at `now_ns`,
    /// leaving `qlen` bytes queued on the port. For data (`data`), returns
    /// the code of the port's new estimate; every packet, data or not,
    /// counts as the port's last.
    pub(crate) fn depart(
        &mut self,
        sw: usize,
        port: usize,
        now_ns: u64,
        qlen: u64,
        bytes: u32,
        data: bool,
    ) -> Option<u16> {
        let t = self.max_rtt_ns;
        let i = *self.first.get(sw)? as usize + port;
        if i >= *self.first.get(sw + 1)? as usize {
            return None;
        }
        let s = self.ports.get_mut(i)?;
        let code = if data {
            let rng = &mut self.rng;
            let dt = now_ns.saturating_sub(s.last_ns).min(t);
            let u = estimate(s, dt, t, self.c_carry, qlen, || rng.next_u32());
            s.u = u;
            let (raw, kept) = self.table.encode(u, s.hint, (rng.next_u32() >> 16) as u16);
            s.hint = raw;
            Some(kept)
        } else {
            None
        };
        s.last_ns = now_ns;
        s.last_bytes = bytes;
        code
    }
}

/// The port's new U (ns-3's "approximate calc"): `dt` ns since its last
/// departure (at most `t`), `qlen` bytes queued; `c_carry` is
/// 1 / (8192·T).
///
/// ns-3 takes each product through `log2apprx`, a fixed-point base-2
/// logarithm (15 fractional bits) of each integer first cut at random to
/// 16 significant bits, and back through `pow(2, ·)`. The cut is kept here
/// ([`round16`]); the products are then taken directly, which differs
/// from the fixed-point route by the logarithms' truncation, at most
/// 2^-15 of a doubling (2·10^-5 relative) per factor: a five-hundredth of
/// a step of the finest code in use (base 1.01), where the five
/// logarithms and three powers per departure took 17 % of a fat-tree
/// run's time (perf).
fn estimate(
    s: &PortState,
    dt: u64,
    t: u64,
    c_carry: f64,
    qlen: u64,
    mut draw: impl FnMut() -> u32,
) -> f64 {
    let mut u = 0.0;
    if qlen >> 8 > 0 {
        // dt·qlen·1e9 / (B·T²), qlen in units of 256 bytes.
        let (dt_r, q_r) = (round16(dt, &mut draw), round16(qlen >> 8, &mut draw));
        u += dt_r * q_r * s.c_queue;
    }
    if s.last_bytes > 0 {
        // bytes·1e9 / (B·T): the previous packet's share of T.
        u += round16(u64::from(s.last_bytes), &mut draw) * s.c_bytes;
    }
    if t > dt && s.u > 0.0 {
        // U·(T − dt)/T, U in units of 1/8192 (rounded to nearest; ns-3's
        // `round`, here without a libm call: U is positive).
        let u_int = (s.u * 8192.0 + 0.5).min(f64::from(i32::MAX)) as u64;
        u += round16(t - dt, &mut draw) * round16(u_int, &mut draw) * c_carry;
    }
    u
}

/// `x` cut to its 16 most significant bits, the cut rounded up with the
/// probability of the bits cut (against `draw()`'s low bits), as ns-3's
/// `log2apprx` cuts its argument (m = 16).
fn round16(x: u64, draw: &mut impl FnMut() -> u32) -> f64 {
    let msb = u64::BITS - x.leading_zeros();
    if msb <= KEEP_BITS {
        return x as f64;
    }
    let cut = msb - KEEP_BITS;
    let mask = (1u64 << cut) - 1;
    let mut y = (x >> cut) << cut;
    if x & mask > u64::from(draw()) & mask {
        y += 1 << cut;
    }
    y as f64
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Integers of up to 16 bits are exact; larger ones are cut to 16
    /// bits and rounded up or down, with the probability of the bits cut.
    #[test]
    fn round16_keeps_sixteen_bits() {
        let mut zero = || 0u32;
        assert_eq!(round16(0, &mut zero), 0.0);
        assert_eq!(round16(65_535, &mut zero), 65_535.0);
        let x = (1u64 << 20) + 5;
        assert_eq!(
            round16(x, &mut || u32::MAX),
            (1u64 << 20) as f64,
            "the cut bits fall below the draw"
        );
        assert_eq!(round16(x, &mut || 0), ((1u64 << 20) + 32) as f64);
        // Over every draw of the five cut bits, the mean is exact.
        let mut d = 0u32;
        let mean = (0..32)
            .map(|_| {
                d += 1;
                round16(x, &mut || d - 1)
            })
            .sum::<f64>()
            / 32.0;
        assert_eq!(mean, x as f64);
    }

    /// A port sending back to back at line rate with no queue settles at
    /// U ≈ 1; with a queue of one BDP, at U ≈ 2.
    #[test]
    fn a_busy_port_settles_at_its_load() {
        let (t, rate) = (10_000u64, 100_000_000_000u64);
        let bytes = 1000u32;
        let gap = u64::from(bytes) * 8 * 1_000_000_000 / rate; // 80 ns
        let bdp = rate / 8 * t / 1_000_000_000;
        for (qlen, want) in [(0u64, 1.0), (bdp, 2.0)] {
            let codec = PintCodec::new(1.05).unwrap();
            let mut p = PintSwitches::new(codec, t, [vec![rate; 4]], 1);
            let mut last = 0;
            for i in 1..20_000u64 {
                last = p.depart(0, 1, i * gap, qlen, bytes, true).unwrap();
            }
            let u = p.ports[1].u;
            assert!(
                (u - want).abs() < 0.1 * want,
                "qlen {qlen}: U {u} against {want}"
            );
            let d = codec.decode(last);
            assert!(
                (d / u - 1.0).abs() < 0.1,
                "code {last} decodes to {d} against {u}"
            );
        }
    }

    /// An idle port's estimate decays: after a gap of T it holds only the
    /// last packet's share.
    #[test]
    fn an_idle_port_decays() {
        let codec = PintCodec::new(1.05).unwrap();
        let rate = 100_000_000_000;
        let mut p = PintSwitches::new(codec, 10_000, [vec![rate; 2], vec![rate; 3]], 1);
        for i in 1..1000u64 {
            p.depart(0, 0, i * 80, 0, 1000, true);
        }
        assert!(p.ports[0].u > 0.9);
        p.depart(0, 0, 1000 * 80 + 50_000, 0, 1000, true);
        assert!(p.ports[0].u < 0.1, "{}", p.ports[0].u);
        // ACKs update the port's last departure but carry no code.
        assert_eq!(p.depart(0, 0, 200_000, 0, 60, false), None);
        assert_eq!(p.ports[0].last_bytes, 60);
        assert_eq!(p.ports[1].last_bytes, 0, "the next port is its own");
        assert_eq!(p.depart(9, 0, 0, 0, 1, true), None, "no such switch");
        assert_eq!(p.depart(0, 2, 0, 0, 1, true), None, "no such port");
        assert!(p.depart(1, 2, 0, 0, 1, true).is_some());
    }
}
