//! HPCC (Li et al., "HPCC: High Precision Congestion Control", SIGCOMM 2019,
//! Algorithm 1). The sender keeps a window W (and paces at W/T); every ACK
//! carries in-band telemetry from each hop — timestamp, bytes sent, queue
//! length, link rate — from which the sender estimates the normalised
//! in-flight bytes U of the most loaded link and steers W toward η·BDP:
//! multiplicatively when U ≥ η (or after `max_stage` additive steps),
//! additively (W_AI) otherwise. The reference window Wc only moves once per
//! RTT, so one congestion event is not reacted to twice.

use super::{CongestionControl, IntHop};
use crate::types::Nanos;

#[derive(Debug, Clone, Copy, PartialEq)]
pub struct HpccConfig {
    /// Target utilisation η.
    pub eta: f64,
    pub max_stage: u32,
    /// Additive increase per step, in bytes.
    pub w_ai: f64,
    /// Base round-trip time T.
    pub base_rtt_ns: Nanos,
}

impl HpccConfig {
    /// The paper's settings (η = 0.95, maxStage = 5) for a host of
    /// `line_rate_bps` with base RTT `base_rtt_ns`; W_AI is BDP·(1−η)/100.
    pub fn new(line_rate_bps: u64, base_rtt_ns: Nanos) -> HpccConfig {
        let bdp = line_rate_bps as f64 / 8.0 * base_rtt_ns as f64 / 1e9;
        HpccConfig {
            eta: 0.95,
            max_stage: 5,
            w_ai: bdp * (1.0 - 0.95) / 100.0,
            base_rtt_ns,
        }
    }
}

#[derive(Debug, Clone)]
pub struct Hpcc {
    cfg: HpccConfig,
    line_bps: f64,
    w_init: f64,
    w: f64,
    wc: f64,
    u: f64,
    inc_stage: u32,
    last: Vec<IntHop>,
    sent: u64,
    acked: u64,
    last_update_seq: u64,
}

impl Hpcc {
    pub fn new(cfg: HpccConfig, line_rate_bps: u64) -> Hpcc {
        let w_init = line_rate_bps as f64 / 8.0 * cfg.base_rtt_ns as f64 / 1e9;
        Hpcc {
            cfg,
            line_bps: line_rate_bps as f64,
            w_init,
            w: w_init,
            wc: w_init,
            u: 0.0,
            inc_stage: 0,
            last: Vec::new(),
            sent: 0,
            acked: 0,
            last_update_seq: 0,
        }
    }

    pub fn window(&self) -> f64 {
        self.w
    }
    pub fn utilisation(&self) -> f64 {
        self.u
    }

    fn measure_inflight(&mut self, hops: &[IntHop]) -> f64 {
        let t = self.cfg.base_rtt_ns as f64;
        let mut u = 0.0;
        let mut tau = t;
        for (i, h) in hops.iter().enumerate() {
            let Some(prev) = self.last.get(i) else {
                continue;
            };
            if h.ts <= prev.ts || h.link_bps == 0 {
                continue;
            }
            let dt = (h.ts - prev.ts) as f64;
            let b = h.link_bps as f64 / 8.0 / 1e9; // bytes per ns
            let tx_rate = h.tx_bytes.saturating_sub(prev.tx_bytes) as f64 / dt;
            let ui = h.qlen.min(prev.qlen) as f64 / (b * t) + tx_rate / b;
            if ui > u {
                u = ui;
                tau = dt;
            }
        }
        let tau = tau.min(t);
        self.u = (1.0 - tau / t) * self.u + tau / t * u;
        self.u
    }

    fn compute_wind(&mut self, u: f64, update_wc: bool) -> f64 {
        let w = if u >= self.cfg.eta || self.inc_stage >= self.cfg.max_stage {
            let w = self.wc / (u / self.cfg.eta).max(1e-9) + self.cfg.w_ai;
            if update_wc {
                self.inc_stage = 0;
                self.wc = w;
            }
            w
        } else {
            let w = self.wc + self.cfg.w_ai;
            if update_wc {
                self.inc_stage += 1;
                self.wc = w;
            }
            w
        };
        w.clamp(self.cfg.w_ai.max(1.0), self.w_init)
    }
}

impl CongestionControl for Hpcc {
    fn name(&self) -> &'static str {
        "hpcc"
    }
    fn on_send(&mut self, _now: Nanos, bytes: usize) {
        self.sent += bytes as u64;
    }
    fn on_ack(&mut self, _now: Nanos, acked_bytes: u64, _rtt: Option<Nanos>) {
        self.acked += acked_bytes;
    }
    fn on_int(&mut self, _now: Nanos, hops: &[IntHop]) {
        if self.last.len() == hops.len() && !hops.is_empty() {
            let u = self.measure_inflight(hops);
            // A new RTT has begun once data sent after the last update is acknowledged.
            let new_rtt = self.acked > self.last_update_seq;
            self.w = self.compute_wind(u, new_rtt);
            if new_rtt {
                self.last_update_seq = self.sent;
            }
        }
        self.last.clear();
        self.last.extend_from_slice(hops);
    }
    fn window_bytes(&self) -> Option<u64> {
        Some(self.w as u64)
    }
    fn rate_bps(&self) -> Option<u64> {
        let r = self.w * 8.0 * 1e9 / self.cfg.base_rtt_ns as f64;
        (r < self.line_bps).then_some(r as u64)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hop(ts: Nanos, tx: u64, qlen: u64) -> IntHop {
        IntHop {
            ts,
            tx_bytes: tx,
            qlen,
            link_bps: 100_000_000_000,
        }
    }

    #[test]
    fn full_link_with_a_queue_shrinks_the_window_idle_link_grows_it() {
        let cfg = HpccConfig::new(100_000_000_000, 10_000);
        let mut h = Hpcc::new(cfg, 100_000_000_000);
        let bdp = h.window();
        assert_eq!(bdp, 125_000.0);
        // A saturated link (12.5 B/ns) with a standing queue of one BDP: U ≈ 2.
        let mut tx = 0;
        for i in 0..20u64 {
            h.on_send(0, 10_000);
            h.on_ack(0, 10_000, None);
            tx += 12_500;
            h.on_int(i * 1_000, &[hop(i * 1_000, tx, 125_000)]);
        }
        assert!(h.utilisation() > 1.5, "U = {}", h.utilisation());
        assert!(h.window() < 0.6 * bdp, "W = {}", h.window());
        assert!(h.rate_bps().is_some());
        // The queue drains and the link idles: the window climbs back.
        let w_low = h.window();
        for i in 20..400u64 {
            h.on_send(0, 10_000);
            h.on_ack(0, 10_000, None);
            h.on_int(i * 1_000, &[hop(i * 1_000, tx, 0)]);
        }
        assert!(h.window() > w_low);
        assert!(h.utilisation() < 0.1);
    }
}
