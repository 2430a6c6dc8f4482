//! Swift (Kumar et al., "Swift: Delay is Simple and Effective for Congestion
//! Control in the Datacenter", SIGCOMM 2020, §3, Algorithm 1).
//!
//! A window (in packets, possibly below one) steered toward a *target
//! delay*:
//! * delay < target: additive increase, cwnd += ai/cwnd per acked packet
//!   (cwnd ≥ 1) or ai per acked packet (cwnd < 1);
//! * delay ≥ target, at most once per RTT: multiplicative decrease
//!   cwnd ← cwnd·max(1 − β·(delay − target)/delay, 1 − max_mdf);
//! * a retransmission timeout cuts by (1 − max_mdf), and after
//!   `retx_reset_threshold` in a row resets cwnd to `min_cwnd`; a NAK (fast
//!   recovery) cuts by (1 − max_mdf) once per RTT.
//!
//! The fabric target grows with the path's hop count (`hop_scale` per hop)
//! and, to keep many flows fair and queues bounded (§3.5, flow-based
//! scaling), as the window shrinks: target += clamp(α/√cwnd + β', 0,
//! fs_range) with α = fs_range/(1/√fs_min_cwnd − 1/√fs_max_cwnd) and
//! β' = −α/√fs_max_cwnd, so the boost is fs_range at fs_min_cwnd and 0 at
//! fs_max_cwnd. Swift keeps a second window for the *endpoint* delay
//! (receiver NIC/host queueing) against its own target and sends by the
//! smaller one; RoCE ACKs carry no receiver timestamps, so here the
//! endpoint delay is only what a driver passes to [`Swift::on_delays`]
//! (the RNIC passes 0: its responder answers as soon as a packet arrives).
//!
//! Below one packet per RTT the window cannot express the rate, so the
//! sender paces: one packet every RTT/cwnd (§3.4).

use super::{AckFeedback, CongestionControl};
use crate::types::Nanos;

#[derive(Debug, Clone, Copy, PartialEq)]
pub struct SwiftConfig {
    /// Fabric base target delay (covers the unloaded RTT of the shortest path).
    pub base_target_ns: Nanos,
    /// Extra target per hop of the path.
    pub hop_scale_ns: Nanos,
    /// Hops on this QP's path (switches traversed).
    pub hops: u32,
    /// Largest flow-scaling boost of the target.
    pub fs_range_ns: Nanos,
    /// Window (packets) at which the flow-scaling boost is the whole range.
    pub fs_min_cwnd: f64,
    /// Window (packets) at which the flow-scaling boost is zero.
    pub fs_max_cwnd: f64,
    /// Endpoint target delay.
    pub endpoint_target_ns: Nanos,
    /// Additive increase (packets per RTT).
    pub ai: f64,
    /// Multiplicative-decrease gain.
    pub beta: f64,
    /// Largest fraction one decrease removes.
    pub max_mdf: f64,
    /// Smallest window (packets); below 1 the sender paces.
    pub min_cwnd: f64,
    /// Largest window (packets), e.g. the line-rate BDP.
    pub max_cwnd: f64,
    /// Bytes per packet (the path MTU's payload).
    pub mss_bytes: u64,
    /// Consecutive timeouts before the window resets to `min_cwnd`.
    pub retx_reset_threshold: u32,
    /// Add the QP's measured minimum RTT to the fabric target, so that
    /// `base_target_ns` is the allowance above the path's base delay. Swift
    /// sets its base target to the unloaded fabric delay plus an allowance
    /// (§3.1, §3.5); on a fabric that base is known (propagation and
    /// serialization), on real sockets it is not — it is the host's own
    /// send/receive path, 10–60 µs on a loaded loopback — so it is taken
    /// from the samples' minimum instead.
    pub target_over_min_rtt: bool,
}

impl SwiftConfig {
    /// Settings for a path whose line-rate window is `max_cwnd` packets of
    /// `mss_bytes`: the paper's AI = 1 packet, β = 0.8, max_mdf = 0.5,
    /// fs_min_cwnd = 0.1, fs_max_cwnd = 100, min_cwnd = 0.001 and
    /// retransmit reset after 5 timeouts; the delays are the caller's
    /// (`base_target_ns`, 1 µs per hop, fs_range = 5 × base target, endpoint
    /// target 10 µs, defaults for a 100 Gb/s fabric with µs-scale RTTs).
    pub fn new(base_target_ns: Nanos, mss_bytes: u64, max_cwnd: f64) -> SwiftConfig {
        SwiftConfig {
            base_target_ns,
            hop_scale_ns: 1_000,
            hops: 0,
            fs_range_ns: 5 * base_target_ns,
            fs_min_cwnd: 0.1,
            fs_max_cwnd: 100.0,
            endpoint_target_ns: 10_000,
            ai: 1.0,
            beta: 0.8,
            max_mdf: 0.5,
            min_cwnd: 0.001,
            max_cwnd: max_cwnd.max(1.0),
            mss_bytes: mss_bytes.max(1),
            retx_reset_threshold: 5,
            target_over_min_rtt: false,
        }
    }
}

/// One QP's Swift sender.
#[derive(Debug, Clone)]
pub struct Swift {
    cfg: SwiftConfig,
    fcwnd: f64,
    ecwnd: f64,
    last_decrease: Option<Nanos>,
    /// The last RTT sample (for the once-per-RTT decrease and pacing).
    rtt: Nanos,
    /// The smallest RTT sampled (0 before the first sample).
    min_rtt: Nanos,
    retransmits: u32,
    /// Decreases applied.
    pub cuts: u64,
    /// The parts of the fabric target that depend only on the settings,
    /// worked out once: every ACK asks for the target, and recomputing
    /// them cost two square roots and three divisions an ACK (`benches/cc.rs`).
    fs: FlowScaling,
}

/// The fabric target's constant parts (the flow-scaling boost is
/// α/√cwnd − β, clamped to [0, range]; see the module docs).
#[derive(Debug, Clone, Copy)]
struct FlowScaling {
    /// Base target plus the per-hop scaling of this path.
    fixed: f64,
    /// α (0 when the range is empty: no boost).
    a: f64,
    /// α/√fs_max_cwnd.
    a_inv_max: f64,
    range: f64,
    on: bool,
}

/// 1/√w, with w kept off zero.
fn inv_sqrt(w: f64) -> f64 {
    1.0 / w.max(1e-9).sqrt()
}

impl FlowScaling {
    fn new(c: &SwiftConfig) -> FlowScaling {
        let range = c.fs_range_ns as f64;
        let span = inv_sqrt(c.fs_min_cwnd) - inv_sqrt(c.fs_max_cwnd);
        let on = span > 0.0;
        let a = if on { range / span } else { 0.0 };
        FlowScaling {
            fixed: c.base_target_ns as f64 + f64::from(c.hops) * c.hop_scale_ns as f64,
            a,
            a_inv_max: a * inv_sqrt(c.fs_max_cwnd),
            range,
            on,
        }
    }
}

impl Swift {
    pub fn new(cfg: SwiftConfig) -> Swift {
        Swift {
            cfg,
            fcwnd: cfg.max_cwnd,
            ecwnd: cfg.max_cwnd,
            last_decrease: None,
            rtt: cfg.base_target_ns.max(1),
            retransmits: 0,
            min_rtt: 0,
            cuts: 0,
            fs: FlowScaling::new(&cfg),
        }
    }

    /// The window in packets: the smaller of the fabric and endpoint windows.
    pub fn cwnd(&self) -> f64 {
        self.fcwnd.min(self.ecwnd)
    }

    /// The fabric target for the current window (§3.5).
    pub fn fabric_target_ns(&self) -> f64 {
        let s = &self.fs;
        let boost = if s.on {
            (s.a * inv_sqrt(self.fcwnd) - s.a_inv_max).clamp(0.0, s.range)
        } else {
            0.0
        };
        let base = if self.cfg.target_over_min_rtt {
            self.min_rtt as f64
        } else {
            0.0
        };
        base + s.fixed + boost
    }

    fn can_decrease(&self, now: Nanos) -> bool {
        self.last_decrease
            .is_none_or(|t| now.saturating_sub(t) >= self.rtt)
    }

    fn clamp(&self, w: f64) -> f64 {
        w.clamp(self.cfg.min_cwnd, self.cfg.max_cwnd)
    }

    /// One window's reaction to a delay against its target (Algorithm 1).
    fn react(
        &self,
        w: f64,
        delay: f64,
        target: f64,
        acked_pkts: f64,
        may_cut: bool,
    ) -> (f64, bool) {
        if delay < target {
            let inc = if w >= 1.0 {
                self.cfg.ai / w * acked_pkts
            } else {
                self.cfg.ai * acked_pkts
            };
            (self.clamp(w + inc), false)
        } else if may_cut {
            let f = (1.0 - self.cfg.beta * (delay - target) / delay).max(1.0 - self.cfg.max_mdf);
            (self.clamp(w * f), true)
        } else {
            (w, false)
        }
    }

    /// An ACK of `acked_bytes` measured `fabric` and `endpoint` delay at `now`.
    pub fn on_delays(&mut self, now: Nanos, fabric: Nanos, endpoint: Nanos, acked_bytes: u64) {
        self.retransmits = 0;
        self.rtt = fabric.max(1);
        let pkts = acked_bytes as f64 / self.cfg.mss_bytes as f64;
        let may_cut = self.can_decrease(now);
        let target = self.fabric_target_ns();
        let (f, cut_f) = self.react(self.fcwnd, fabric as f64, target, pkts, may_cut);
        let et = self.cfg.endpoint_target_ns as f64;
        let (e, cut_e) = self.react(self.ecwnd, endpoint as f64, et, pkts, may_cut);
        self.fcwnd = f;
        self.ecwnd = e;
        if cut_f || cut_e {
            self.last_decrease = Some(now);
            self.cuts += 1;
        }
    }

    fn loss_cut(&mut self, now: Nanos) {
        if self.can_decrease(now) {
            let f = 1.0 - self.cfg.max_mdf;
            self.fcwnd = self.clamp(self.fcwnd * f);
            self.ecwnd = self.clamp(self.ecwnd * f);
            self.last_decrease = Some(now);
            self.cuts += 1;
        }
    }
}

impl CongestionControl for Swift {
    fn rate_cuts(&self) -> u64 {
        self.cuts
    }
    fn name(&self) -> &'static str {
        "swift"
    }
    /// Sends move nothing here (no `on_send`): the RNIC spares the call
    /// and the re-read of the readings per packet. A future `on_send`
    /// must turn this back on (debug builds check every send's view).
    fn counts_sends(&self) -> bool {
        false
    }

    fn on_ack_feedback(&mut self, now: Nanos, fb: &AckFeedback) {
        match fb.rtt {
            Some(s) => {
                self.min_rtt = s.min_rtt;
                self.on_delays(now, s.rtt, 0, fb.acked_bytes)
            }
            // Karn: no timing, but progress still ends a timeout streak.
            None => self.retransmits = 0,
        }
    }

    fn on_nak(&mut self, now: Nanos) {
        self.retransmits = 0;
        self.loss_cut(now);
    }

    fn on_timeout(&mut self, now: Nanos) {
        self.retransmits += 1;
        if self.retransmits >= self.cfg.retx_reset_threshold {
            self.fcwnd = self.cfg.min_cwnd;
            self.ecwnd = self.cfg.min_cwnd;
            self.last_decrease = Some(now);
            self.cuts += 1;
        } else {
            self.loss_cut(now);
        }
    }

    fn window_bytes(&self) -> Option<u64> {
        // Below one packet the window stays one packet; pacing does the rest.
        Some((self.cwnd().max(1.0) * self.cfg.mss_bytes as f64) as u64)
    }

    fn rate_bps(&self) -> Option<u64> {
        let w = self.cwnd();
        // One packet every RTT/cwnd: cwnd·MSS bytes per RTT.
        (w < 1.0).then(|| (w * self.cfg.mss_bytes as f64 * 8.0 * 1e9 / self.rtt as f64) as u64)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn over_min_rtt_the_target_is_the_base_rtt_plus_the_allowance() {
        let mut c = SwiftConfig::new(100_000, 4096, 100.0);
        c.fs_range_ns = 0;
        c.target_over_min_rtt = true;
        let mut s = Swift::new(c);
        let sample = |rtt, min_rtt| AckFeedback {
            acked_bytes: 4096,
            rtt: Some(crate::cc::RttSample { rtt, min_rtt }),
            ..AckFeedback::default()
        };
        s.on_ack_feedback(1_000, &sample(120_000, 60_000));
        assert_eq!(s.fabric_target_ns(), 160_000.0);
        // 150 µs is under 60 + 100 µs: no cut, where a fixed 100 µs target cuts.
        s.on_ack_feedback(400_000, &sample(150_000, 60_000));
        assert_eq!(s.cuts, 0);
        let mut fixed = Swift::new(SwiftConfig {
            target_over_min_rtt: false,
            ..c
        });
        fixed.on_ack_feedback(400_000, &sample(150_000, 60_000));
        assert_eq!(fixed.cuts, 1);
    }

    fn s(max_cwnd: f64) -> Swift {
        Swift::new(SwiftConfig::new(20_000, 1000, max_cwnd))
    }

    #[test]
    fn target_scales_with_hops_and_shrinking_window() {
        let mut cfg = SwiftConfig::new(20_000, 1000, 1000.0);
        cfg.hops = 3;
        let mut w = Swift::new(cfg);
        // cwnd ≥ fs_max_cwnd: no flow boost; base + 3 hops × 1 µs.
        assert!((w.fabric_target_ns() - 23_000.0).abs() < 1e-6);
        // cwnd = fs_min_cwnd: the whole fs_range (5 × 20 µs) is added.
        w.fcwnd = 0.1;
        assert!((w.fabric_target_ns() - 123_000.0).abs() < 1e-6);
        // In between it is α/√cwnd + β': at cwnd = 1,
        // α = 100 µs/(1/√0.1 − 1/√100), boost = α·(1 − 0.1).
        w.fcwnd = 1.0;
        let a = 100_000.0 / (1.0 / 0.1f64.sqrt() - 0.1);
        assert!((w.fabric_target_ns() - (23_000.0 + a * 0.9)).abs() < 1e-6);
    }

    #[test]
    fn below_target_additive_above_multiplicative_once_per_rtt() {
        let mut w = s(100.0);
        w.fcwnd = 10.0;
        // Delay 10 µs is below even the 20 µs base target: +ai/cwnd per packet.
        w.on_delays(0, 10_000, 0, 1000);
        assert!((w.cwnd() - 10.1).abs() < 1e-12);
        // Delay 100 µs, well above target T: cwnd·max(1 − 0.8(100 − T)/100, 0.5).
        let t = w.fabric_target_ns();
        let want = 10.1 * (1.0 - 0.8 * (100_000.0 - t) / 100_000.0).max(0.5);
        w.on_delays(1_000, 100_000, 0, 1000);
        assert!((w.cwnd() - want).abs() < 1e-9, "{} vs {want}", w.cwnd());
        // Within the next RTT (100 µs) no second decrease.
        let c = w.cwnd();
        w.on_delays(50_000, 100_000, 0, 1000);
        assert_eq!(w.cwnd(), c);
        // After it, another.
        w.on_delays(102_000, 100_000, 0, 1000);
        assert!(w.cwnd() < c);
        assert_eq!(w.cuts, 2);
    }

    #[test]
    fn endpoint_congestion_binds_through_its_own_window() {
        let mut w = s(100.0);
        w.on_delays(0, 10_000, 50_000, 1000);
        // The fabric window is at its maximum and stays there; the endpoint
        // delay 50 µs is over its 10 µs target: ecwnd·max(1 − 0.8·40/50,
        // 1 − max_mdf) = 100·max(0.36, 0.5) = 50, and that window binds.
        assert_eq!(w.cwnd(), 50.0);
    }

    #[test]
    fn below_one_packet_it_paces_one_packet_per_rtt_over_cwnd() {
        let mut w = s(100.0);
        w.fcwnd = 0.5;
        w.rtt = 40_000;
        // 0.5 packets per 40 µs = 1000 B every 80 µs = 100 Mb/s.
        assert_eq!(w.rate_bps(), Some(100_000_000));
        assert_eq!(w.window_bytes(), Some(1000));
        // Additive increase below 1 adds ai per acked packet.
        w.on_delays(0, 10_000, 0, 1000);
        assert!((w.cwnd() - 1.5).abs() < 1e-12);
        assert_eq!(w.rate_bps(), None);
    }

    #[test]
    fn repeated_timeouts_reset_to_min_cwnd() {
        let mut w = s(100.0);
        for i in 0..4u64 {
            w.on_timeout(i * 1_000_000);
        }
        // Four cuts of max_mdf: 100 · 0.5^4.
        assert!((w.cwnd() - 6.25).abs() < 1e-12);
        w.on_timeout(5_000_000);
        assert_eq!(w.cwnd(), 0.001);
    }
}
