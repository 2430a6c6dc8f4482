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
//! each product taken, as ns-3 takes it, through base-2 logarithms of
//! integers rounded at random to 16 significant bits (`log2apprx`: a
//! switch pipeline's lookup tables), so that the figures here follow
//! ns-3's, approximation included. The random draws are this run's own
//! (seeded from the run's seed), not C's `rand()`: agreement with ns-3 is
//! statistical.

use rand_chacha::ChaCha8Rng;
use rand_chacha::rand_core::{Rng, SeedableRng};
use roce_rnic::cc::PintCodec;

/// Fixed-point scale of `log2apprx`'s results: 2^15 (ns-3's parameters
/// b = 20, m = 16, l = 20 give a shift of l − 5 = 15).
const LOG_SHIFT: u32 = 15;
/// Significant bits `log2apprx` keeps of its argument (ns-3's m).
const KEEP_BITS: u32 = 16;

/// One switch port's estimate.
#[derive(Debug, Clone, Copy, Default)]
struct PortState {
    /// U, the port's utilisation estimate.
    u: f64,
    /// When the port's previous packet left (ns; 0 before any).
    last_ns: u64,
    /// That packet's size (bytes; 0 before any).
    last_bytes: u32,
}

/// Every switch port's estimate, and the draws that round them.
pub(crate) struct PintSwitches {
    codec: PintCodec,
    /// T (ns): the fabric's largest base RTT, ns-3's `MaxRtt`.
    max_rtt_ns: u64,
    /// Per switch, per port.
    ports: Vec<Vec<PortState>>,
    rng: ChaCha8Rng,
}

impl PintSwitches {
    /// Estimates for switches with `ports_per_switch` ports each, coding
    /// with `codec`, averaging over `max_rtt_ns`.
    pub(crate) fn new(
        codec: PintCodec,
        max_rtt_ns: u64,
        ports_per_switch: impl IntoIterator<Item = usize>,
        seed: u64,
    ) -> PintSwitches {
        PintSwitches {
            codec,
            max_rtt_ns: max_rtt_ns.max(1),
            ports: ports_per_switch
                .into_iter()
                .map(|n| vec![PortState::default(); n])
                .collect(),
            // Apart from the ECN coin's stream: PINT's draws do not move it.
            rng: ChaCha8Rng::seed_from_u64(seed ^ 0x5049_4e54_5049_4e54),
        }
    }

    pub(crate) fn codec(&self) -> &PintCodec {
        &self.codec
    }

    /// A packet of `bytes` leaves port `port` of switch `sw` at `now_ns`,
    /// leaving `qlen` bytes queued on the port, whose link runs at
    /// `rate_bps`. For data (`data`), returns the code of the port's new
    /// estimate; every packet, data or not, counts as the port's last.
    pub(crate) fn depart(
        &mut self,
        sw: usize,
        port: usize,
        now_ns: u64,
        qlen: u64,
        rate_bps: u64,
        bytes: u32,
        data: bool,
    ) -> Option<u16> {
        let t = self.max_rtt_ns;
        let Some(s) = self.ports.get_mut(sw).and_then(|p| p.get_mut(port)) else {
            return None;
        };
        let code = if data {
            let rng = &mut self.rng;
            let dt = now_ns.saturating_sub(s.last_ns).min(t);
            let u = estimate(s, dt, t, qlen, rate_bps / 8, || rng.next_u32());
            s.u = u;
            Some(self.codec.encode(u, (self.rng.next_u32() >> 16) as u16))
        } else {
            None
        };
        s.last_ns = now_ns;
        s.last_bytes = bytes;
        code
    }
}

/// The port's new U (ns-3's "approximate calc"): `dt` ns since its last
/// departure (at most `t`), `qlen` bytes queued, a link of `b` bytes/s.
fn estimate(
    s: &PortState,
    dt: u64,
    t: u64,
    qlen: u64,
    b: u64,
    mut draw: impl FnMut() -> u32,
) -> f64 {
    let fct = f64::from(1u32 << LOG_SHIFT);
    let log_t = (t as f64).log2() * fct;
    let log_b = (b.max(1) as f64).log2() * fct;
    let log_1e9 = 1e9f64.log2() * fct;
    let pow2 = |x: f64| (x / fct).exp2();
    let mut u = 0.0;
    if qlen >> 8 > 0 {
        // dt·qlen·1e9 / (B·T²), qlen in units of 256 bytes.
        let (ldt, lq) = (log2apprx(dt, &mut draw), log2apprx(qlen >> 8, &mut draw));
        u += pow2(ldt as f64 + lq as f64 + log_1e9 - log_b - 2.0 * log_t) * 256.0;
    }
    if s.last_bytes > 0 {
        // bytes·1e9 / (B·T): the previous packet's share of T.
        let lb = log2apprx(u64::from(s.last_bytes), &mut draw);
        u += pow2(lb as f64 + log_1e9 - log_b - log_t);
    }
    if t > dt && s.u > 0.0 {
        // U·(T − dt)/T, U in units of 1/8192.
        let ltd = log2apprx(t - dt, &mut draw);
        let lu = log2apprx(
            (s.u * 8192.0).round().min(f64::from(i32::MAX)) as u64,
            &mut draw,
        );
        u += pow2(ltd as f64 + lu as f64 - log_t) / 8192.0;
    }
    u
}

/// ns-3's `log2apprx(x, 20, 16, 20)`: log2(x) in fixed point (× 2^15),
/// `x` first cut to its 16 most significant bits, rounding the cut up
/// with the probability of the bits cut (against `draw()`'s low bits).
/// log2(0) is minus infinity; ns-3's conversion of it to `int` gives
/// `INT_MIN` on x86, which takes the term it enters to 0 — as here.
fn log2apprx(x: u64, draw: &mut impl FnMut() -> u32) -> i32 {
    if x == 0 {
        return i32::MIN;
    }
    let msb = u64::BITS - x.leading_zeros();
    let mut y = x;
    if msb > KEEP_BITS {
        let cut = msb - KEEP_BITS;
        let mask = (1u64 << cut) - 1;
        y = (x >> cut) << cut;
        if x & mask > u64::from(draw()) & mask {
            y += 1 << cut;
        }
    }
    ((y as f64).log2() * f64::from(1u32 << LOG_SHIFT)) as i32
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Small integers are exact; large ones are cut to 16 bits and
    /// rounded up or down, never further than one step of the 16th bit.
    #[test]
    fn log2apprx_is_fixed_point_log2() {
        let mut zero = || 0u32;
        assert_eq!(log2apprx(1, &mut zero), 0);
        assert_eq!(log2apprx(1024, &mut zero), 10 << 15);
        assert_eq!(log2apprx(0, &mut zero), i32::MIN);
        let x = (1u64 << 20) + 5;
        let down = log2apprx(x, &mut || u32::MAX);
        let up = log2apprx(x, &mut || 0);
        assert_eq!(down, 20 << 15, "the cut bits fall below the draw");
        assert_eq!(up, ((((1u64 << 20) + 16) as f64).log2() * 32768.0) as i32);
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
            let mut p = PintSwitches::new(codec, t, [4], 1);
            let mut last = 0;
            for i in 1..20_000u64 {
                last = p.depart(0, 1, i * gap, qlen, rate, bytes, true).unwrap();
            }
            let u = p.ports[0][1].u;
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
        let mut p = PintSwitches::new(codec, 10_000, [2], 1);
        for i in 1..1000u64 {
            p.depart(0, 0, i * 80, 0, 100_000_000_000, 1000, true);
        }
        assert!(p.ports[0][0].u > 0.9);
        p.depart(0, 0, 1000 * 80 + 50_000, 0, 100_000_000_000, 1000, true);
        assert!(p.ports[0][0].u < 0.1, "{}", p.ports[0][0].u);
        // ACKs update the port's last departure but carry no code.
        assert_eq!(p.depart(0, 0, 200_000, 0, 100_000_000_000, 60, false), None);
        assert_eq!(p.ports[0][0].last_bytes, 60);
        assert_eq!(p.depart(9, 0, 0, 0, 1, 1, true), None, "no such switch");
    }
}
