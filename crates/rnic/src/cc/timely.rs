//! TIMELY (Mittal et al., "TIMELY: RTT-based Congestion Control for the
//! Datacenter", SIGCOMM 2015, Algorithm 1). A rate-based controller steered
//! by the *gradient* of the RTT rather than its level:
//!
//! * `new_rtt_diff = rtt − prev_rtt`; `rtt_diff ← (1 − α)·rtt_diff + α·new_rtt_diff`;
//!   `gradient = rtt_diff / D_minRTT`.
//! * rtt < T_low: R ← R + δ (the queue is too short to matter);
//! * rtt > T_high: R ← R·(1 − β·(1 − T_high/rtt)) (a standing queue);
//! * gradient ≤ 0: R ← R + N·δ, where N = 5 after `hai_after` consecutive
//!   increases (hyper-active increase), else 1;
//! * gradient > 0: R ← R·(1 − β·gradient).
//!
//! # When the rate is updated
//!
//! The paper computes a new rate once per *completion event*: its NIC
//! sends in segments of 16–64 KB and each segment's acknowledgement yields
//! one RTT sample and one update (§4–5), so a flow updates once per
//! segment of its own bytes — faster flows more often, the asymmetry the
//! CoNEXT 2016 analysis of TIMELY (Zhu et al., §4) works from. That is the
//! default here (`segment_bytes` = 64 KB, the range's top, the least CPU
//! per byte): an update each time another segment's worth of bytes is
//! acknowledged, on the newest RTT sample.
//!
//! The HPCC ns-3 simulator's `CC_MODE 7` (rdma-hw.cc, `HandleAckTimely`)
//! updates once per round trip instead: when an ACK passes `snd_nxt` as it
//! was at the previous update. `segment_bytes = 0` selects that, and the
//! `hpcc-ns3` preset (what `CC_MODE 7` runs) sets it. Either way the first
//! update only records its RTT, as both do.

use super::{AckFeedback, CongestionControl};
use crate::types::Nanos;

#[derive(Debug, Clone, Copy, PartialEq)]
pub struct TimelyConfig {
    /// Below this RTT, increase additively whatever the gradient.
    pub t_low_ns: Nanos,
    /// Above this RTT, decrease in proportion to the excess.
    pub t_high_ns: Nanos,
    /// EWMA weight of the newest RTT difference.
    pub alpha: f64,
    /// Multiplicative decrease factor.
    pub beta: f64,
    /// Additive increase δ.
    pub delta_bps: u64,
    /// Increase during hyper-active increase (the paper's N·δ, N = 5).
    pub hai_delta_bps: u64,
    /// Consecutive increases before hyper-active increase.
    pub hai_after: u32,
    /// D_minRTT, the gradient's normaliser. 0: the QP's measured minimum RTT.
    pub min_rtt_ns: Nanos,
    /// Lowest rate.
    pub min_rate_bps: u64,
    /// Below T_low, step by the hyper-active increase too once `hai_after`
    /// increases have passed (ns-3 does; the paper's Algorithm 1 adds δ there).
    pub hai_below_t_low: bool,
    /// Acknowledged bytes per rate update: the paper's completion event (a
    /// segment). 0: once per round trip, as the HPCC ns-3 simulator does.
    pub segment_bytes: u64,
}

impl Default for TimelyConfig {
    /// The paper's settings (T_low 50 µs, T_high 500 µs, α 0.875, β 0.8,
    /// D_minRTT 20 µs — the values the HPCC ns-3 simulator also defaults to
    /// — with δ 10 Mb/s and N = 5, so HAI adds 50 Mb/s), a 100 Mb/s floor,
    /// one update per 64 KB segment acknowledged.
    fn default() -> Self {
        TimelyConfig {
            t_low_ns: 50_000,
            t_high_ns: 500_000,
            alpha: 0.875,
            beta: 0.8,
            delta_bps: 10_000_000,
            hai_delta_bps: 50_000_000,
            hai_after: 5,
            min_rtt_ns: 20_000,
            min_rate_bps: 100_000_000,
            hai_below_t_low: false,
            segment_bytes: 64 * 1024,
        }
    }
}

impl TimelyConfig {
    /// The HPCC ns-3 simulator's `CC_MODE 7` defaults (rdma-hw.cc:
    /// `TimelyAlpha` 0.875, `TimelyBeta` 0.8, `TimelyTLow` 50 µs,
    /// `TimelyTHigh` 500 µs, `TimelyMinRtt` 20 µs; increases of `RateAI`
    /// (5 Mb/s) and, after 5 increases of either kind, `RateHAI` (50 Mb/s);
    /// `MinRate` 100 Mb/s), one update per round trip (`HandleAckTimely`).
    pub fn hpcc_ns3() -> TimelyConfig {
        TimelyConfig {
            delta_bps: 5_000_000,
            hai_delta_bps: 50_000_000,
            hai_below_t_low: true,
            segment_bytes: 0,
            ..TimelyConfig::default()
        }
    }
}

/// One QP's TIMELY sender.
#[derive(Debug, Clone)]
pub struct Timely {
    cfg: TimelyConfig,
    line: f64,
    rate: f64,
    prev_rtt: Option<Nanos>,
    rtt_diff: f64,
    inc_stage: u32,
    /// `snd_nxt` at the last update: the next waits until it is acknowledged
    /// (once per round trip).
    last_update_seq: Option<u64>,
    /// Bytes acknowledged since the last update (once per segment).
    acked_since_update: u64,
    /// Rate decreases applied.
    pub cuts: u64,
}

impl Timely {
    pub fn new(cfg: TimelyConfig, line_rate_bps: u64) -> Timely {
        let line = line_rate_bps as f64;
        Timely {
            cfg,
            line,
            rate: line,
            prev_rtt: None,
            rtt_diff: 0.0,
            inc_stage: 0,
            last_update_seq: None,
            acked_since_update: 0,
            cuts: 0,
        }
    }

    pub fn rate(&self) -> f64 {
        self.rate
    }
    pub fn rtt_diff(&self) -> f64 {
        self.rtt_diff
    }

    /// Algorithm 1 for one RTT sample (`min_rtt`: the measured floor, used
    /// when no D_minRTT is configured).
    pub fn update(&mut self, rtt: Nanos, min_rtt: Nanos) {
        let Some(prev) = self.prev_rtt.replace(rtt) else {
            return;
        };
        let new_diff = rtt as f64 - prev as f64;
        self.rtt_diff = (1.0 - self.cfg.alpha) * self.rtt_diff + self.cfg.alpha * new_diff;
        let d_min = if self.cfg.min_rtt_ns > 0 {
            self.cfg.min_rtt_ns
        } else {
            min_rtt.max(1)
        } as f64;
        let gradient = self.rtt_diff / d_min;
        let floor = self.cfg.min_rate_bps as f64;
        let hai = self.inc_stage >= self.cfg.hai_after;
        if rtt < self.cfg.t_low_ns {
            let step = if hai && self.cfg.hai_below_t_low {
                self.cfg.hai_delta_bps
            } else {
                self.cfg.delta_bps
            };
            self.increase(step as f64);
        } else if rtt > self.cfg.t_high_ns {
            let f = 1.0 - self.cfg.beta * (1.0 - self.cfg.t_high_ns as f64 / rtt as f64);
            self.decrease(f, floor);
        } else if gradient <= 0.0 {
            let step = if hai {
                self.cfg.hai_delta_bps
            } else {
                self.cfg.delta_bps
            };
            self.increase(step as f64);
        } else {
            self.decrease((1.0 - self.cfg.beta * gradient).max(0.0), floor);
        }
    }

    fn increase(&mut self, step: f64) {
        self.rate = (self.rate + step).min(self.line);
        self.inc_stage += 1;
    }

    fn decrease(&mut self, factor: f64, floor: f64) {
        self.rate = (self.rate * factor).max(floor).min(self.line);
        self.inc_stage = 0;
        self.cuts += 1;
    }
}

impl CongestionControl for Timely {
    fn rate_cuts(&self) -> u64 {
        self.cuts
    }
    fn name(&self) -> &'static str {
        "timely"
    }
    /// Sends move nothing here (no `on_send`): the RNIC spares the call
    /// and the re-read of the readings per packet. A future `on_send`
    /// must turn this back on (debug builds check every send's view).
    fn counts_sends(&self) -> bool {
        false
    }

    fn on_ack_feedback(&mut self, _now: Nanos, fb: &AckFeedback) {
        let seg = self.cfg.segment_bytes;
        if seg > 0 {
            // A completion event per segment's worth of bytes acknowledged;
            // one update however many segments an ACK completes, and none
            // until an RTT sample comes (a resent packet's gives none).
            self.acked_since_update = self.acked_since_update.saturating_add(fb.acked_bytes);
            if self.acked_since_update < seg {
                return;
            }
            let Some(s) = fb.rtt else { return };
            self.acked_since_update %= seg;
            self.update(s.rtt, s.min_rtt);
            return;
        }
        let Some(s) = fb.rtt else { return };
        if self.last_update_seq.is_some_and(|seq| fb.snd_una <= seq) {
            return;
        }
        self.last_update_seq = Some(fb.snd_nxt);
        self.update(s.rtt, s.min_rtt);
    }

    fn rate_bps(&self) -> Option<u64> {
        (self.rate < self.line).then_some(self.rate as u64)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cc::RttSample;

    const G: u64 = 1_000_000_000;

    fn t() -> Timely {
        let mut t = Timely::new(TimelyConfig::default(), 100 * G);
        t.rate = 10.0 * G as f64;
        t
    }

    #[test]
    fn above_t_high_cuts_by_the_excess() {
        let mut t = t();
        t.update(100_000, 10_000);
        // Algorithm 1: R·(1 − β(1 − T_high/rtt)) = 10 G·(1 − 0.8·(1 − 500/1000)) = 6 G.
        t.update(1_000_000, 10_000);
        assert!((t.rate() - 6.0e9).abs() < 1.0, "{}", t.rate());
    }

    #[test]
    fn positive_gradient_cuts_by_beta_times_gradient() {
        let mut t = t();
        t.update(100_000, 10_000);
        // new_rtt_diff = 20 µs; rtt_diff = 0.875·20 = 17.5 µs; gradient =
        // 17.5/20 = 0.875; R·(1 − 0.8·0.875) = 10 G·0.3 = 3 G.
        t.update(120_000, 10_000);
        assert!((t.rtt_diff() - 17_500.0).abs() < 1e-9);
        assert!((t.rate() - 3.0e9).abs() < 1.0, "{}", t.rate());
        assert_eq!(t.cuts, 1);
    }

    #[test]
    fn negative_gradient_adds_delta_then_hyper_active() {
        let mut t = t();
        t.update(200_000, 10_000);
        let mut rtt = 200_000;
        let mut rates = vec![t.rate()];
        for _ in 0..7 {
            rtt -= 1_000;
            t.update(rtt, 10_000);
            rates.push(t.rate());
        }
        let steps: Vec<f64> = rates.windows(2).map(|w| w[1] - w[0]).collect();
        // Five increases of δ = 10 Mb/s, then N·δ = 50 Mb/s (HAI).
        for s in &steps[..5] {
            assert!((s - 10e6).abs() < 1.0, "{steps:?}");
        }
        for s in &steps[5..] {
            assert!((s - 50e6).abs() < 1.0, "{steps:?}");
        }
    }

    #[test]
    fn below_t_low_increases_even_when_rtt_rises() {
        let mut t = t();
        t.update(10_000, 10_000);
        t.update(40_000, 10_000);
        assert!((t.rate() - 10.01e9).abs() < 1.0);
        // The paper adds δ below T_low however long the streak; ns-3 steps
        // by RATE_HAI there too after five increases.
        for _ in 0..5 {
            t.update(40_000, 10_000);
        }
        assert!((t.rate() - 10.06e9).abs() < 1.0);
        let mut n = Timely::new(TimelyConfig::hpcc_ns3(), 100 * G);
        n.rate = 10.0 * G as f64;
        for _ in 0..7 {
            n.update(40_000, 10_000);
        }
        // First sample only records; then 5 × 5 Mb/s and 1 × 50 Mb/s.
        assert!(
            (n.rate() - (10.0e9 + 25e6 + 50e6)).abs() < 1.0,
            "{}",
            n.rate()
        );
    }

    fn fb(acked: u64, una: u64, nxt: u64, rtt: Nanos) -> AckFeedback {
        AckFeedback {
            acked_bytes: acked,
            rtt: Some(RttSample {
                rtt,
                min_rtt: 10_000,
            }),
            ecn_echo: false,
            snd_una: una,
            snd_nxt: nxt,
            send_point: nxt,
        }
    }

    #[test]
    fn paper_updates_once_per_segment_acknowledged() {
        let mut t = Timely::new(TimelyConfig::default(), 100 * G);
        assert_eq!(t.cfg.segment_bytes, 64 * 1024);
        // The first completed segment records its RTT only.
        t.on_ack_feedback(0, &fb(64 * 1024, 64 * 1024, 1 << 20, 100_000));
        // 63 KB more: no completion yet, however bad the RTT.
        t.on_ack_feedback(0, &fb(63 * 1024, 127 * 1024, 1 << 20, 2_000_000));
        assert_eq!(t.rate_bps(), None);
        // The segment completes — before snd_nxt of the last update is
        // acknowledged, where ns-3 would still wait: 1000 µs > T_high → 60 G.
        t.on_ack_feedback(0, &fb(1024, 128 * 1024, 1 << 20, 1_000_000));
        assert_eq!(t.rate_bps(), Some(60 * G));
        // An ACK without an RTT sample (a resend's) completes no update; the
        // next sample does, once, though 3 segments' bytes were acknowledged.
        let cuts = t.cuts;
        let mut no_rtt = fb(128 * 1024, 256 * 1024, 1 << 20, 0);
        no_rtt.rtt = None;
        t.on_ack_feedback(0, &no_rtt);
        assert_eq!(t.cuts, cuts);
        t.on_ack_feedback(0, &fb(64 * 1024, 320 * 1024, 1 << 20, 1_000_000));
        assert_eq!(t.cuts, cuts + 1);
        assert_eq!(t.rate_bps(), Some(36 * G));
    }

    #[test]
    fn one_update_per_round_trip() {
        let mut t = Timely::new(TimelyConfig::hpcc_ns3(), 100 * G);
        let fb = |una, nxt, rtt| fb(1000, una, nxt, rtt);
        // First sample: records RTT, next update waits for byte 100_000.
        t.on_ack_feedback(0, &fb(1000, 100_000, 100_000));
        // Samples inside that round trip are ignored, however bad.
        t.on_ack_feedback(0, &fb(50_000, 150_000, 2_000_000));
        assert_eq!(t.rate_bps(), None);
        // Past it: rtt 1000 µs > T_high → 100 G·0.6 = 60 G.
        t.on_ack_feedback(0, &fb(100_001, 200_000, 1_000_000));
        assert_eq!(t.rate_bps(), Some(60 * G));
    }
}
