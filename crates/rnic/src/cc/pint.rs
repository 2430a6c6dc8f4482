//! HPCC-PINT (Ben Basat et al., "PINT: Probabilistic In-band Network
//! Telemetry", SIGCOMM 2020, §4.3; the HPCC ns-3 simulator's `CC_MODE 10`).
//!
//! HPCC's INT costs every data packet and every ACK 8 bytes per hop. PINT
//! keeps one number instead: each switch folds its egress port's
//! utilisation into a per-port estimate as packets leave, encodes it on a
//! logarithmic scale in a byte or two ([`PintCodec`]), and a packet keeps
//! the largest value of its path. The receiver echoes that value in its
//! ACK and the sender, on a sampled fraction of its ACKs, steers its rate
//! as HPCC does from the bottleneck's utilisation U directly (the switch
//! has done the EWMA that HPCC's sender does from per-hop counters).
//!
//! The switch's estimate is the simulator's to keep (it is the network's
//! state); this module holds what both ends share: the encoding, and the
//! sender's controller ([`HpccPint`]), which reuses [`Hpcc`]'s window.

use super::hpcc::{Hpcc, HpccConfig};
use super::{AckFeedback, CongestionControl};
use crate::types::Nanos;

/// Concurrent flows the encoding is scaled for: a utilisation U is coded
/// as `ceil(U × 512)` on the logarithmic scale, so the smallest non-zero
/// U it tells apart is 1/512 (ns-3 `Pint::max_concurrent`).
pub const PINT_MAX_CONCURRENT: u32 = 512;

/// The logarithmic code of a utilisation: value `p` stands for
/// `base^p / 512`. What a header carries is [`PintCodec::bytes`] wide
/// (one byte for base 1.05, two for 1.01); a code wider than that keeps
/// its low bits, as ns-3's header does.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct PintCodec {
    log_base: f64,
    /// ln(base), and its inverse.
    ln_base: f64,
    log_factor: f64,
    /// The bits a header keeps.
    mask: u16,
}

impl PintCodec {
    /// The code of base `log_base` (> 1; ns-3's `PINT_LOG_BASE`, default
    /// 1.05). `None` for a base of 1 or less, or not a number.
    pub fn new(log_base: f64) -> Option<PintCodec> {
        if !(log_base > 1.0 && log_base.is_finite()) {
            return None;
        }
        let mut c = PintCodec {
            log_base,
            ln_base: log_base.ln(),
            log_factor: 1.0 / log_base.ln(),
            mask: u16::MAX,
        };
        c.mask = match c.bytes() {
            0 | 1 => 0xff,
            _ => u16::MAX,
        };
        Some(c)
    }

    pub fn log_base(&self) -> f64 {
        self.log_base
    }

    /// Bits of the largest code: that of U = 512 (ns-3 `get_n_bits`).
    pub fn bits(&self) -> u32 {
        let max = f64::from(PINT_MAX_CONCURRENT);
        let max_value = (max * max).ln() * self.log_factor;
        max_value.log2().ceil().max(0.0) as u32
    }

    /// Bytes a header gives the code (ns-3 `get_n_bytes`).
    pub fn bytes(&self) -> u32 {
        self.bits().div_ceil(8)
    }

    /// base^p, as `exp(p · ln base)`: one call, where `powi` multiplies
    /// its way up to a code in the thousands (base 1.01) and was 6 % of a
    /// fat-tree run's time spent coding (perf). It differs from ns-3's
    /// `pow` by a few units in the last place, far below a step of the code.
    #[inline]
    fn power(&self, p: u16) -> f64 {
        (f64::from(p) * self.ln_base).exp()
    }

    /// The code of `u`, rounded up or down at random so that its expected
    /// value is `u`'s (ns-3 `encode_u`): `draw` is a uniform draw of 16
    /// bits, and the code rounds up when it falls under the fraction of
    /// the way `ceil(u × 512)` lies between the two neighbouring powers
    /// of the base. Stored as a header keeps it (see [`PintCodec`]).
    pub fn encode(&self, u: f64, draw: u16) -> u16 {
        let u_int = scaled(u);
        let power = f64::from(u_int).ln() * self.log_factor;
        let (p_upper, p_lower) = (power.ceil() as u16, power.floor() as u16);
        // The upper power is the lower's next (ns-3 takes it one step up
        // when the two codes are the same, at an exact power).
        let lower = self.power(p_lower);
        let upper = lower * self.log_base;
        let p = if rounds_up(f64::from(u_int), lower, upper, draw) {
            p_upper
        } else {
            p_lower
        };
        p & self.mask
    }

    /// The utilisation code `p` stands for (ns-3 `decode_u`).
    pub fn decode(&self, p: u16) -> f64 {
        self.power(p & self.mask) / f64::from(PINT_MAX_CONCURRENT)
    }

    /// The larger of a packet's code so far and a hop's, as the header
    /// keeps it: the hop's code replaces the packet's when it is larger
    /// before truncation (ns-3 compares the new power with the stored one).
    pub fn fold(&self, stored: u16, hop: u16) -> u16 {
        if hop > stored {
            hop & self.mask
        } else {
            stored
        }
    }
}

/// [`PintCodec::encode`] by table, for a switch that codes every data
/// packet it sends: the base's powers up to the code of 2^32 (about 2,200
/// for base 1.01), searched from a hint (a port's previous code: U moves
/// little from packet to packet), instead of a logarithm and a power per
/// packet (5 % of a fat-tree run's time, perf). The same codes as
/// `encode`, whose powers the table holds.
#[derive(Debug, Clone)]
pub struct PintTable {
    codec: PintCodec,
    powers: Vec<f64>,
}

impl PintTable {
    pub fn new(codec: PintCodec) -> PintTable {
        // Codes up to one past that of the largest `ceil(u × 512)`.
        let top = (f64::from(u32::MAX).ln() * codec.log_factor).ceil() as u32 + 2;
        let top = top.min(u32::from(u16::MAX));
        PintTable {
            codec,
            powers: (0..=top as u16).map(|p| codec.power(p)).collect(),
        }
    }

    pub fn codec(&self) -> &PintCodec {
        &self.codec
    }

    /// [`PintCodec::encode`] of `u` with `draw`, searching from code
    /// `hint`. Returns the code before the header's truncation (the hint
    /// for the next one) and the code as the header keeps it.
    pub fn encode(&self, u: f64, hint: u16, draw: u16) -> (u16, u16) {
        let x = f64::from(scaled(u));
        let last = self.powers.len() - 2;
        let mut p = usize::from(hint).min(last);
        // powers[p] ≤ x < powers[p + 1]: the floor of x's logarithm.
        while p > 0 && self.powers[p] > x {
            p -= 1;
        }
        while p < last && self.powers[p + 1] <= x {
            p += 1;
        }
        let lower = self.powers[p];
        let upper = lower * self.codec.log_base;
        // At an exact power the fraction is 0 and the code stays p, as
        // `encode`'s equal ceiling and floor give.
        let code = p as u16 + u16::from(rounds_up(x, lower, upper, draw));
        (code, code & self.codec.mask)
    }
}

/// `ceil(u × 512)`, at least 1, saturating as C's conversion of a float
/// to an unsigned integer does on x86 for the values a code meets (`u`
/// is a utilisation: finite, not negative). Without `f64::ceil`, a libm
/// call on x86-64's baseline.
#[inline]
fn scaled(u: f64) -> u32 {
    let y = u * f64::from(PINT_MAX_CONCURRENT);
    let i = y as u32;
    let i = if f64::from(i) < y {
        i.saturating_add(1)
    } else {
        i
    };
    i.max(1)
}

/// Whether a code of `x` between the powers `lower` ≤ x < `upper` rounds
/// up for `draw`: when the draw falls under the fraction of the way `x`
/// lies between them, of 65,536 (ns-3: `rand() % 65536 < (x − lower) /
/// (upper − lower) · 65536`), compared multiplied out: the same verdict
/// but where the two products meet within a rounding, and a division
/// less per packet a switch codes.
#[inline]
fn rounds_up(x: f64, lower: f64, upper: f64, draw: u16) -> bool {
    f64::from(draw) * (upper - lower) < (x - lower) * 65536.0
}

/// [`HpccPint`]'s settings: HPCC's window settings, the code, and the
/// fraction of ACKs the sender reads.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct HpccPintConfig {
    /// η, the additive step, maxStage, T and the rate floor as HPCC's
    /// (`fast_react` is not read: PINT always reacts to a sampled ACK).
    pub hpcc: HpccConfig,
    pub codec: PintCodec,
    /// An ACK is read when a uniform 16-bit draw falls under this (ns-3:
    /// `65536 × PINT_PROB`; 65,536 reads every ACK).
    pub sample_threshold: u32,
    /// The sampling draws' seed (a QP's own, for runs that repeat).
    pub seed: u64,
}

/// One QP's HPCC-PINT sender (ns-3 `RdmaHw::HandleAckHpPint` and
/// `UpdateRateHpPint`): on a sampled ACK, HPCC's window step with U the
/// echoed bottleneck utilisation; a full update (the reference window
/// moves) once data sent after the last full one is acknowledged, a fast
/// reaction from the reference window otherwise.
#[derive(Debug, Clone)]
pub struct HpccPint {
    hpcc: Hpcc,
    codec: PintCodec,
    threshold: u32,
    rng: u64,
    sampled: u64,
}

impl HpccPint {
    pub fn new(cfg: HpccPintConfig, line_rate_bps: u64) -> HpccPint {
        HpccPint {
            hpcc: Hpcc::new(cfg.hpcc, line_rate_bps),
            codec: cfg.codec,
            threshold: cfg.sample_threshold,
            // SplitMix64's state: any seed, zero included, is fine.
            rng: cfg.seed,
            sampled: 0,
        }
    }

    /// The window the controller steers (bytes).
    pub fn window(&self) -> f64 {
        self.hpcc.window()
    }

    /// The utilisation of the last sampled ACK.
    pub fn utilisation(&self) -> f64 {
        self.hpcc.utilisation()
    }

    /// ACKs read so far.
    pub fn sampled(&self) -> u64 {
        self.sampled
    }

    /// 16 uniform bits (SplitMix64).
    fn draw(&mut self) -> u32 {
        self.rng = self.rng.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.rng;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        ((z ^ (z >> 31)) >> 48) as u32
    }
}

impl CongestionControl for HpccPint {
    fn name(&self) -> &'static str {
        "hpcc-pint"
    }
    fn counts_sends(&self) -> bool {
        false
    }
    fn acks_move_readings(&self) -> bool {
        // As HPCC's: an ACK notes the sequence space; the window moves on
        // the echoed code.
        false
    }
    fn on_ack_feedback(&mut self, now: Nanos, fb: &AckFeedback) {
        self.hpcc.on_ack_feedback(now, fb);
    }
    fn on_rewind(&mut self, now: Nanos, send_point: u64) {
        self.hpcc.on_rewind(now, send_point);
    }
    fn on_pint(&mut self, _now: Nanos, power: u16) {
        // Every ACK draws, read or not (ns-3 draws `rand()` per ACK).
        if self.threshold < 65536 && self.draw() >= self.threshold {
            return;
        }
        self.sampled += 1;
        self.hpcc.on_utilisation(self.codec.decode(power));
    }
    fn window_bytes(&self) -> Option<u64> {
        self.hpcc.window_bytes()
    }
    fn rate_bps(&self) -> Option<u64> {
        self.hpcc.rate_bps()
    }
    fn rescales_gap(&self) -> Option<u64> {
        // ns-3's `UpdateRateHpPint` calls `ChangeRate` too.
        self.hpcc.rescales_gap()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// ns-3's defaults: base 1.05 needs 8 bits (codes up to 256), run.py's
    /// 1.01 needs 11 (two bytes).
    #[test]
    fn code_widths_follow_the_base() {
        let c = PintCodec::new(1.05).unwrap();
        assert_eq!((c.bits(), c.bytes()), (8, 1));
        let c = PintCodec::new(1.01).unwrap();
        assert_eq!((c.bits(), c.bytes()), (11, 2));
        assert!(PintCodec::new(1.0).is_none());
        assert!(PintCodec::new(f64::NAN).is_none());
        assert!(PintCodec::new(0.5).is_none());
    }

    /// A code decodes to within one step of the base of what was encoded,
    /// rounding down for draws above the fraction and up below it.
    #[test]
    fn codes_round_to_the_neighbouring_powers() {
        let c = PintCodec::new(1.05).unwrap();
        for u in [0.01, 0.3, 0.95, 1.0, 1.7, 12.0] {
            let lo = c.decode(c.encode(u, u16::MAX));
            let hi = c.decode(c.encode(u, 0));
            let q = (u * 512.0).ceil() / 512.0;
            assert!(
                lo <= q * (1.0 + 1e-12) && q <= hi * (1.0 + 1e-12),
                "{u}: {lo} {q} {hi}"
            );
            assert!(hi / lo <= 1.05 * 1.05 + 1e-9, "{u}: {lo} {hi}");
        }
        // Anything under 1/512 codes as 1/512's code, 0.
        assert_eq!(c.encode(0.0, 0), 0);
        assert_eq!(c.encode(1e-9, 0), 0);
        assert_eq!(c.decode(0), 1.0 / 512.0);
    }

    /// Random rounding is unbiased: the mean decoded value over uniform
    /// draws is the encoded value (to the grid of 1/512).
    #[test]
    fn random_rounding_keeps_the_mean() {
        let c = PintCodec::new(1.05).unwrap();
        for u in [0.2, 0.9, 3.3] {
            let n = 65536u32;
            let mean: f64 =
                (0..n).map(|d| c.decode(c.encode(u, d as u16))).sum::<f64>() / f64::from(n);
            let q = (u * 512.0).ceil() / 512.0;
            assert!((mean - q).abs() / q < 1e-3, "{u}: mean {mean} against {q}");
        }
    }

    /// The table gives `encode`'s codes from any hint.
    #[test]
    fn the_table_encodes_as_the_codec() {
        for base in [1.01, 1.05, 1.2] {
            let c = PintCodec::new(base).unwrap();
            let t = PintTable::new(c);
            let mut x = 0x1234_5678_9abc_def0u64;
            for i in 0..200_000u32 {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                let u = (x >> 11) as f64 / (1u64 << 53) as f64 * 40.0;
                let draw = (x >> 3) as u16;
                let hint = (i % 700) as u16;
                let (raw, kept) = t.encode(u, hint, draw);
                assert_eq!(kept, c.encode(u, draw), "base {base}, u {u}, draw {draw}");
                assert_eq!(raw & c.mask, kept);
            }
            // Exact powers and the extremes.
            for u in [0.0, 1.0 / 512.0, 1.0, 512.0, 1e7] {
                for draw in [0, 40_000, u16::MAX] {
                    assert_eq!(
                        t.encode(u, 0, draw).1,
                        c.encode(u, draw),
                        "base {base}, u {u}"
                    );
                }
            }
        }
    }

    /// A header of one byte keeps the low 8 bits, and the path's code is
    /// the largest hop's.
    #[test]
    fn fold_keeps_the_largest_as_the_header_holds_it() {
        let c = PintCodec::new(1.05).unwrap();
        assert_eq!(c.fold(0, 40), 40);
        assert_eq!(c.fold(40, 12), 40);
        assert_eq!(c.fold(40, 300), 300 & 0xff);
        let w = PintCodec::new(1.01).unwrap();
        assert_eq!(w.fold(40, 300), 300);
    }

    fn config(prob: f64) -> HpccPintConfig {
        HpccPintConfig {
            hpcc: HpccConfig::new(100_000_000_000, 10_000),
            codec: PintCodec::new(1.05).unwrap(),
            sample_threshold: (65536.0 * prob) as u32,
            seed: 7,
        }
    }

    fn ack(c: &mut HpccPint, sent: u64, acked: u64) {
        c.on_ack_feedback(
            0,
            &AckFeedback {
                snd_una: acked,
                snd_nxt: sent,
                send_point: sent,
                ..AckFeedback::default()
            },
        );
    }

    /// An overloaded bottleneck (U = 2η) halves the window from the
    /// reference window; an idle one grows it additively; the first
    /// sampled ACK only starts the sequence.
    #[test]
    fn windows_follow_the_echoed_utilisation() {
        let mut c = HpccPint::new(config(1.0), 100_000_000_000);
        let w0 = c.window();
        let code = |u: f64| c.codec.encode(u, 0);
        let (busy, idle) = (code(1.9), code(0.1));
        ack(&mut c, 10_000, 0);
        c.on_pint(0, busy);
        assert_eq!(
            c.window(),
            w0,
            "the first feedback only starts the sequence"
        );
        ack(&mut c, 20_000, 11_000);
        c.on_pint(0, busy);
        let u = c.codec.decode(busy);
        let want = w0 / (u / 0.95) + c.hpcc.w_ai();
        assert!(
            (c.window() - want).abs() < 1e-6,
            "{} against {want}",
            c.window()
        );
        assert!(c.rate_bps().is_some(), "below line rate: paced");
        // Idle path: additive steps from the new reference window.
        let w1 = c.window();
        ack(&mut c, 30_000, 21_000);
        c.on_pint(0, idle);
        assert!((c.window() - (w1 + c.hpcc.w_ai())).abs() < 1e-6);
        assert_eq!(c.sampled(), 3);
    }

    /// With PINT_PROB p, about p of the ACKs are read, the same ones for
    /// the same seed.
    #[test]
    fn sampling_reads_the_configured_fraction() {
        let run = |seed| {
            let mut c = HpccPint::new(
                HpccPintConfig {
                    seed,
                    ..config(0.25)
                },
                100_000_000_000,
            );
            for i in 0..40_000u64 {
                ack(&mut c, i * 1000, i * 1000);
                c.on_pint(i, 10);
            }
            c.sampled()
        };
        let n = run(1);
        assert!(
            (9_500..10_500).contains(&n),
            "{n} of 40,000 read at p = 0.25"
        );
        assert_eq!(run(1), n);
        assert_ne!(run(2), n);
        let mut all = HpccPint::new(config(1.0), 100_000_000_000);
        for i in 0..100 {
            all.on_pint(i, 10);
        }
        assert_eq!(all.sampled(), 100);
    }
}
