//! DCTCP (Alizadeh et al., "Data Center TCP", SIGCOMM 2010, §3.1) on RDMA.
//!
//! Switches mark CE above a queue threshold K; the responder echoes each
//! mark in its ACK (BTH BECN, [`AckFeedback::ecn_echo`]); once per window of
//! data the sender updates α ← (1 − g)·α + g·F, F the fraction of the
//! window's bytes whose ACKs were marked, and on a marked ACK it cuts by
//! α/2 — at most once per window (until data sent after the cut is
//! acknowledged, TCP's CWR state).
//!
//! Two forms:
//! * [`DctcpVariant::Rate`] — as the HPCC ns-3 simulator's `CC_MODE 8` runs
//!   DCTCP on a NIC: the *rate* is cut (R ← R·(1 − α/2), floor `MIN_RATE`)
//!   and, outside CWR, grows by `DCTCP_RATE_AI` once per window.
//! * [`DctcpVariant::Window`] — the paper's: a congestion window W cut the
//!   same way and grown by one MSS per window of ACKs (congestion avoidance,
//!   W ← W + MSS·acked/W), starting at the line-rate BDP (RDMA has no slow
//!   start) and never below one MSS.

use super::{AckFeedback, CongestionControl};
use crate::types::Nanos;

#[derive(Debug, Clone, Copy, PartialEq)]
pub enum DctcpVariant {
    /// Rate-based (HPCC ns-3 `CC_MODE 8`).
    Rate {
        /// Additive increase per window outside CWR (`DCTCP_RATE_AI`).
        rate_ai_bps: u64,
    },
    /// Window-based (the paper's TCP form).
    Window {
        /// Segment size the window grows by.
        mss_bytes: u64,
        /// Initial and largest window (bytes): the line-rate BDP.
        max_window_bytes: u64,
    },
}

#[derive(Debug, Clone, Copy, PartialEq)]
pub struct DctcpConfig {
    /// α's EWMA gain g (paper: 1/16; ns-3 `EWMA_GAIN`).
    pub g: f64,
    /// α before any feedback (ns-3 starts at 1, so the first marks cut by half).
    pub initial_alpha: f64,
    /// Lowest rate (rate form) — the window form stops at one MSS.
    pub min_rate_bps: u64,
    pub variant: DctcpVariant,
}

impl DctcpConfig {
    /// HPCC ns-3 `CC_MODE 8` defaults: g = 1/16, α₀ = 1, `DCTCP_RATE_AI`
    /// 1000 Mb/s, `MIN_RATE` 100 Mb/s.
    pub fn hpcc_ns3() -> DctcpConfig {
        DctcpConfig {
            g: 1.0 / 16.0,
            initial_alpha: 1.0,
            min_rate_bps: 100_000_000,
            variant: DctcpVariant::Rate {
                rate_ai_bps: 1_000_000_000,
            },
        }
    }

    /// The paper's window form (g = 1/16) for a path with this BDP and MSS.
    pub fn window(mss_bytes: u64, bdp_bytes: u64) -> DctcpConfig {
        DctcpConfig {
            g: 1.0 / 16.0,
            initial_alpha: 1.0,
            min_rate_bps: 100_000_000,
            variant: DctcpVariant::Window {
                mss_bytes: mss_bytes.max(1),
                max_window_bytes: bdp_bytes.max(mss_bytes).max(1),
            },
        }
    }
}

/// One QP's DCTCP sender.
#[derive(Debug, Clone)]
pub struct Dctcp {
    cfg: DctcpConfig,
    line: f64,
    rate: f64,
    window: f64,
    alpha: f64,
    /// `snd_nxt` when the current α window began (`None` until the first ACK).
    window_end: Option<u64>,
    acked_in_window: u64,
    marked_in_window: u64,
    /// In CWR until `snd_una` passes this.
    cwr_until: Option<u64>,
    /// Cuts applied.
    pub cuts: u64,
}

impl Dctcp {
    pub fn new(cfg: DctcpConfig, line_rate_bps: u64) -> Dctcp {
        let window = match cfg.variant {
            DctcpVariant::Window {
                max_window_bytes, ..
            } => max_window_bytes as f64,
            DctcpVariant::Rate { .. } => 0.0,
        };
        Dctcp {
            cfg,
            line: line_rate_bps as f64,
            rate: line_rate_bps as f64,
            window,
            alpha: cfg.initial_alpha,
            window_end: None,
            acked_in_window: 0,
            marked_in_window: 0,
            cwr_until: None,
            cuts: 0,
        }
    }

    pub fn alpha(&self) -> f64 {
        self.alpha
    }
    pub fn rate(&self) -> f64 {
        self.rate
    }
    pub fn window(&self) -> f64 {
        self.window
    }
}

impl CongestionControl for Dctcp {
    fn rate_cuts(&self) -> u64 {
        self.cuts
    }
    fn name(&self) -> &'static str {
        "dctcp"
    }
    /// Sends move nothing here (no `on_send`): the RNIC spares the call
    /// and the re-read of the readings per packet. A future `on_send`
    /// must turn this back on (debug builds check every send's view).
    fn counts_sends(&self) -> bool {
        false
    }

    fn on_ack_feedback(&mut self, _now: Nanos, fb: &AckFeedback) {
        self.acked_in_window += fb.acked_bytes;
        if fb.ecn_echo {
            self.marked_in_window += fb.acked_bytes;
        }
        // Once per window of data: α ← (1 − g)α + gF.
        let new_window = match self.window_end {
            None => {
                self.window_end = Some(fb.snd_nxt);
                self.acked_in_window = 0;
                self.marked_in_window = 0;
                true
            }
            Some(end) if fb.snd_una > end => {
                let f = if self.acked_in_window > 0 {
                    (self.marked_in_window as f64 / self.acked_in_window as f64).min(1.0)
                } else {
                    0.0
                };
                self.alpha = (1.0 - self.cfg.g) * self.alpha + self.cfg.g * f;
                self.window_end = Some(fb.snd_nxt);
                self.acked_in_window = 0;
                self.marked_in_window = 0;
                true
            }
            Some(_) => false,
        };
        if self.cwr_until.is_some_and(|u| fb.snd_una > u) {
            self.cwr_until = None;
        }
        if fb.ecn_echo && self.cwr_until.is_none() {
            let f = 1.0 - self.alpha / 2.0;
            match self.cfg.variant {
                DctcpVariant::Rate { .. } => {
                    self.rate = (self.rate * f).max(self.cfg.min_rate_bps as f64);
                }
                DctcpVariant::Window { mss_bytes, .. } => {
                    self.window = (self.window * f).max(mss_bytes as f64);
                }
            }
            self.cuts += 1;
            self.cwr_until = Some(fb.snd_nxt);
            return;
        }
        if self.cwr_until.is_some() {
            return;
        }
        match self.cfg.variant {
            DctcpVariant::Rate { rate_ai_bps } => {
                if new_window {
                    self.rate = (self.rate + rate_ai_bps as f64).min(self.line);
                }
            }
            DctcpVariant::Window {
                mss_bytes,
                max_window_bytes,
            } => {
                let inc = mss_bytes as f64 * fb.acked_bytes as f64 / self.window.max(1.0);
                self.window = (self.window + inc).min(max_window_bytes as f64);
            }
        }
    }

    fn rate_bps(&self) -> Option<u64> {
        match self.cfg.variant {
            DctcpVariant::Rate { .. } => (self.rate < self.line).then_some(self.rate as u64),
            DctcpVariant::Window { .. } => None,
        }
    }

    fn window_bytes(&self) -> Option<u64> {
        match self.cfg.variant {
            DctcpVariant::Rate { .. } => None,
            DctcpVariant::Window { .. } => Some(self.window as u64),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const G: u64 = 1_000_000_000;

    fn fb(una: u64, nxt: u64, acked: u64, marked: bool) -> AckFeedback {
        AckFeedback {
            acked_bytes: acked,
            rtt: None,
            ecn_echo: marked,
            snd_una: una,
            snd_nxt: nxt,
            send_point: nxt,
        }
    }

    #[test]
    fn rate_form_cuts_once_per_window_and_tracks_the_marked_fraction() {
        let mut d = Dctcp::new(DctcpConfig::hpcc_ns3(), 100 * G);
        // First ACK opens the first α window (ends at byte 10_000).
        d.on_ack_feedback(0, &fb(1_000, 10_000, 1_000, false));
        assert_eq!(d.rate_bps(), None, "at line rate");
        // A marked ACK: cut by α/2 with α = 1 → 50 G, enter CWR until byte 12_000.
        d.on_ack_feedback(0, &fb(2_000, 12_000, 1_000, true));
        assert_eq!(d.rate_bps(), Some(50 * G));
        // More marks in the same window: no second cut.
        d.on_ack_feedback(0, &fb(3_000, 13_000, 1_000, true));
        assert_eq!(d.rate_bps(), Some(50 * G));
        assert_eq!(d.cuts, 1);
        // The window ending at byte 10_000 closes with the ACK past it: it
        // saw 10 KB acknowledged, 2 KB of it by marked ACKs, F = 0.2.
        for una in (4_000..=10_000).step_by(1_000) {
            d.on_ack_feedback(0, &fb(una, 14_000, 1_000, false));
        }
        d.on_ack_feedback(0, &fb(11_000, 14_000, 1_000, false));
        // α = (1 − 1/16)·1 + (1/16)·(2000/10000) = 0.9375 + 0.0125 = 0.95.
        assert!((d.alpha() - 0.95).abs() < 1e-12, "{}", d.alpha());
        // Still in CWR (byte 12_000 not yet acked): no increase.
        assert_eq!(d.rate_bps(), Some(50 * G));
        // Past the CWR point and into a new window (ends at 14_000): +1 G.
        d.on_ack_feedback(0, &fb(14_001, 20_000, 1_000, false));
        assert_eq!(d.rate_bps(), Some(51 * G));
        // The next cut uses the new α: 51 G·(1 − α'/2).
        let a = d.alpha();
        d.on_ack_feedback(0, &fb(15_000, 21_000, 1_000, true));
        let want = 51e9 * (1.0 - a / 2.0);
        assert!((d.rate() - want).abs() < 1.0);
    }

    #[test]
    fn alpha_decays_without_marks() {
        let mut d = Dctcp::new(DctcpConfig::hpcc_ns3(), 100 * G);
        d.on_ack_feedback(0, &fb(1, 1, 1, false));
        for k in 1..=10u64 {
            d.on_ack_feedback(0, &fb(k * 1000 + 1, k * 1000 + 1000, 1000, false));
        }
        // Ten windows with F = 0: α = (15/16)^10.
        assert!((d.alpha() - (15.0f64 / 16.0).powi(10)).abs() < 1e-12);
    }

    #[test]
    fn window_form_halves_then_grows_one_mss_per_window() {
        let mut d = Dctcp::new(DctcpConfig::window(1000, 100_000), 100 * G);
        assert_eq!(d.window_bytes(), Some(100_000));
        d.on_ack_feedback(0, &fb(1_000, 100_000, 1_000, true));
        // α₀ = 1: W ← W·(1 − 1/2).
        assert_eq!(d.window_bytes(), Some(50_000));
        // Out of CWR, a window's worth of ACKs (50 KB) adds ≈ one MSS.
        let mut una = 100_001;
        for _ in 0..50 {
            d.on_ack_feedback(0, &fb(una, 200_000, 1_000, false));
            una += 1_000;
        }
        let w = d.window();
        assert!(w > 50_900.0 && w < 51_000.0, "{w}");
    }
}
