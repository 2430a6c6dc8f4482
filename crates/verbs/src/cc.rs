//! Congestion control for QPs on real sockets: which controller of the
//! RNIC's (`roce_rnic::cc`) each QP gets, and the figures the network
//! cannot tell it here (the line rate and base RTT that the simulator
//! derives from its fabric).
//!
//! A context holds the default ([`crate::EngineConfig::cc`]); a
//! [`crate::QpBuilder::cc`] overrides it for one QP. The receiver's side
//! needs nothing: every RNIC turns CE-marked data into CNPs (RoCEv2 Annex
//! A17.9, opcode 0x81) paced by `RnicConfig::cnp_interval_ns`, and echoes
//! marks in ACKs when `RnicConfig::ecn_echo` is on (DCTCP).

use roce_rnic::CongestionControl;
use roce_rnic::cc::RateLimit;
use roce_rnic::cc::{AckFeedback, CcConfig, CcParams, CcPlan, RttSample};
use roce_rnic::types::Nanos;
use std::net::IpAddr;

/// Line rate assumed when the interface's speed cannot be read (loopback
/// has none): 100 Gb/s, the speed RoCE deployments and DCQCN's defaults
/// (rate steps in Mb/s, 100 Gb/s fabrics in HPCC's evaluation) assume.
pub const DEFAULT_LINE_RATE_BPS: u64 = 100_000_000_000;

/// Base RTT assumed for the delay-based controllers (Swift's target,
/// DCTCP's window BDP): 20 µs, about what this software stack measures
/// with `roce perf write_lat` on loopback (two one-way latencies).
pub const DEFAULT_BASE_RTT_NS: u64 = 20_000;

/// Swift's target allowance above the measured base RTT on real sockets
/// (`base_target_us` when not given), and TIMELY's T_low / T_high above it
/// (`t_low_us` / `t_high_us`). On a loaded loopback the samples of a QP
/// paced far below capacity ran from a 10–58 µs minimum to a median of
/// 113–119 µs and a 90th percentile of 158 µs — the hosts' scheduling,
/// not queueing — while an unpaced QP's ran 0.5–17 ms (its socket
/// backlog). A target that fixed noise exceeds holds the QP at its floor
/// (Swift's fabric default of 20 µs: 0.03 Gb/s, 9 % of `--cc none` on an
/// idle machine), so the allowances sit above that noise and below the
/// milliseconds an unchecked backlog costs.
pub const REAL_SOCKET_SWIFT_ALLOWANCE_US: f64 = 250.0;
pub const REAL_SOCKET_TIMELY_T_LOW_US: f64 = 250.0;
pub const REAL_SOCKET_TIMELY_T_HIGH_US: f64 = 2500.0;
/// TIMELY's additive step δ and floor on real sockets (`rate_ai_mbps`,
/// `min_rate_mbps` when not given): the paper's δ is 10 Mb/s on a 10 Gb/s
/// NIC, a thousandth of the line, so 100 Mb/s at the 100 Gb/s a loopback
/// is taken to run at, with hyper-active increase 5 × that (the paper's
/// N = 5). The floor is a hundredth of the line: a QP at 100 Mb/s takes
/// 5 ms per 64 KiB message, too few updates a second to climb back from a
/// cut (on a loaded loopback a QP at
/// the 100 Mb/s floor moved 0.10 Gb/s for a whole 2 s run).
/// (TIMELY updates once per 64 KB acknowledged, or once per round trip in
/// its `hpcc-ns3` preset: either way a QP at the floor updates rarely.)
pub const REAL_SOCKET_TIMELY_AI_MBPS: f64 = 100.0;
pub const REAL_SOCKET_TIMELY_HAI_MBPS: f64 = 500.0;
pub const REAL_SOCKET_TIMELY_MIN_RATE_MBPS: f64 = 1000.0;
/// TIMELY's gradient normaliser D_minRTT on real sockets (`min_rtt_us`
/// when not given): T_high's allowance, 2.5 ms, the span of delay the
/// controller works in. The paper normalises by the fabric's minimum RTT
/// (20 µs), a scale at which its NIC-timestamped samples are smooth; here
/// successive samples differ by 50–200 µs of host scheduling, so by a
/// 10–60 µs minimum every positive difference read as a gradient of 1–3
/// and cut the rate to its floor. Measured (`delay_cc` test, debug build,
/// 10 Mb/s floor, share of `--cc none`): D_minRTT 250 µs 13 %, 1 ms 40 %,
/// 2.5 ms 95 %; a release `roce perf write_bw --loopback -s 65536 -D 2 --cc
/// timely` on a loaded machine: 250 µs 3.7–4.2 Gb/s, 2.5 ms 3.7 Gb/s, 100 µs
/// 1.5 Gb/s, beside 7–14 Gb/s for `--cc none` (T_high still bounds the
/// delay: above it TIMELY cuts whatever the gradient).
pub const REAL_SOCKET_TIMELY_D_MINRTT_US: f64 = 2500.0;

/// Fills in the real-socket defaults of the delay-based controllers (the
/// constants above) where `p` leaves them unset: what `roce perf --cc`
/// runs unless `--cc-param` says otherwise. A named `preset` runs as its
/// source gives it, thresholds included.
pub fn real_socket_defaults(p: &mut CcParams) {
    match p.algorithm.as_str() {
        "swift" => {
            p.base_target_us
                .get_or_insert(REAL_SOCKET_SWIFT_ALLOWANCE_US);
        }
        "timely" if p.preset.is_none() => {
            if p.t_low_us.is_none() && p.t_high_us.is_none() {
                p.t_low_us = Some(REAL_SOCKET_TIMELY_T_LOW_US);
                p.t_high_us = Some(REAL_SOCKET_TIMELY_T_HIGH_US);
            }
            p.rate_ai_mbps.get_or_insert(REAL_SOCKET_TIMELY_AI_MBPS);
            p.rate_hai_mbps.get_or_insert(REAL_SOCKET_TIMELY_HAI_MBPS);
            p.min_rate_mbps
                .get_or_insert(REAL_SOCKET_TIMELY_MIN_RATE_MBPS);
            p.min_rtt_us.get_or_insert(REAL_SOCKET_TIMELY_D_MINRTT_US);
        }
        _ => {}
    }
}

/// One QP's congestion control, resolved for a real network.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct CcSettings {
    pub config: CcConfig,
    /// The rate rate-based controllers start at and return to.
    pub line_rate_bps: u64,
    /// The base RTT where a controller's defaults come from the fabric.
    pub base_rtt_ns: u64,
    /// A per-QP rate limit on top of the controller (the NIC's shaper).
    pub rate_limit_bps: Option<u64>,
    /// Delay targets count from the QP's measured minimum RTT (TIMELY's
    /// T_low/T_high, Swift's base target become allowances above it), as
    /// the base delay of a path of sockets is the hosts' own and unknown
    /// beforehand. On by default; off, the targets are absolute RTTs.
    pub delay_over_min_rtt: bool,
}

impl Default for CcSettings {
    fn default() -> Self {
        CcSettings {
            config: CcConfig::None,
            line_rate_bps: DEFAULT_LINE_RATE_BPS,
            base_rtt_ns: DEFAULT_BASE_RTT_NS,
            rate_limit_bps: None,
            delay_over_min_rtt: true,
        }
    }
}

impl CcSettings {
    /// `config` at `line_rate_bps` with the default base RTT.
    pub fn new(config: CcConfig, line_rate_bps: u64) -> CcSettings {
        CcSettings {
            config,
            line_rate_bps,
            ..CcSettings::default()
        }
    }

    /// A controller for a QP whose packets carry up to `mss` payload bytes.
    /// A real path here crosses no switch the controller could count, so
    /// Swift's hop scaling sees 0 hops.
    pub fn controller(&self, mss: u64) -> Box<dyn CongestionControl> {
        let line = self.line_rate_bps.max(1);
        let mut plan = CcPlan::new(&self.config, line, || self.base_rtt_ns, mss.max(1));
        if let CcPlan::Swift(s) = &mut plan {
            s.target_over_min_rtt = self.delay_over_min_rtt;
        }
        let c = plan.controller(line, || 0);
        let c: Box<dyn CongestionControl> = match plan {
            CcPlan::Timely(_) if self.delay_over_min_rtt => Box::new(OverMinRtt { inner: c }),
            _ => c,
        };
        match self.rate_limit_bps {
            Some(cap_bps) => Box::new(RateLimit { inner: c, cap_bps }),
            None => c,
        }
    }

    /// Receivers must echo CE marks in their ACKs (DCTCP).
    pub fn ecn_echo(&self) -> bool {
        matches!(self.config, CcConfig::Dctcp(_))
    }
}

/// TIMELY with T_low and T_high counted from the QP's minimum RTT: the
/// controller sees each sample less that minimum (the queueing above the
/// path's base), so its thresholds are allowances above the base. Its
/// gradient — a difference of successive samples — is the same; its
/// D_minRTT normaliser is the `min_rtt_us` parameter (on real sockets
/// [`REAL_SOCKET_TIMELY_D_MINRTT_US`] unless given; `min_rtt_us = 0` uses
/// the measured minimum).
struct OverMinRtt {
    inner: Box<dyn CongestionControl>,
}

impl CongestionControl for OverMinRtt {
    roce_rnic::forward_to_inner!();
    fn on_ack_feedback(&mut self, now: Nanos, fb: &AckFeedback) {
        let fb = AckFeedback {
            rtt: fb.rtt.map(|s| RttSample {
                rtt: s.rtt.saturating_sub(s.min_rtt),
                min_rtt: s.min_rtt,
            }),
            ..*fb
        };
        self.inner.on_ack_feedback(now, &fb)
    }
    fn rate_bps(&self) -> Option<u64> {
        self.inner.rate_bps()
    }
    fn window_bytes(&self) -> Option<u64> {
        self.inner.window_bytes()
    }
}

/// The line rate of the interface holding `ip`, as ethtool reports it;
/// `None` where the kernel reports none (loopback, some virtual devices).
pub fn interface_speed_bps(ip: IpAddr) -> Option<u64> {
    crate::sys::interface_speed_mbps(ip).map(|m| u64::from(m) * 1_000_000)
}

/// The line rate to assume on `ip`: its interface's speed, else
/// [`DEFAULT_LINE_RATE_BPS`].
pub fn line_rate_for(ip: IpAddr) -> u64 {
    interface_speed_bps(ip).unwrap_or(DEFAULT_LINE_RATE_BPS)
}

#[cfg(test)]
mod tests {
    use super::*;
    use roce_rnic::cc::CcParams;

    #[test]
    fn a_dcqcn_controller_starts_at_the_line_rate_and_a_cnp_cuts_it() {
        let cc = CcParams::new("dcqcn").build().unwrap().cc;
        let mut c = CcSettings::new(cc, 10_000_000_000).controller(4096);
        assert_eq!(c.name(), "dcqcn");
        // At the line rate DCQCN does not pace.
        assert_eq!(c.rate_bps(), None);
        c.on_cnp(1_000);
        // The cut comes at the reaction point's next decrease check.
        let t = c.next_tick().expect("a decrease check is due");
        c.on_tick(t);
        assert!(c.rate_bps().unwrap() < 10_000_000_000);
        assert_eq!(c.rate_cuts(), 1);
    }

    #[test]
    fn none_is_unpaced_and_dctcp_asks_for_ecn_echo() {
        let s = CcSettings::default();
        assert_eq!(s.controller(1024).rate_bps(), None);
        assert!(!s.ecn_echo());
        let d = CcSettings::new(CcParams::new("dctcp").build().unwrap().cc, 1);
        assert!(d.ecn_echo());
    }

    #[test]
    fn a_rate_limit_caps_the_controller_and_keeps_its_cuts() {
        let mut s = CcSettings::new(CcParams::new("dcqcn").build().unwrap().cc, 10_000_000_000);
        s.rate_limit_bps = Some(2_000_000_000);
        let mut c = s.controller(4096);
        assert_eq!((c.name(), c.rate_bps()), ("dcqcn", Some(2_000_000_000)));
        // Cuts below the cap show through it.
        for k in 0..8 {
            c.on_cnp(1_000 + k * 100_000);
            while let Some(t) = c.next_tick().filter(|&t| t <= 1_000 + k * 100_000 + 50_000) {
                c.on_tick(t);
            }
        }
        assert!(c.rate_bps().unwrap() < 2_000_000_000, "{:?}", c.rate_bps());
        assert!(c.rate_cuts() >= 1);
        let n = CcSettings {
            rate_limit_bps: Some(1_000_000),
            ..CcSettings::default()
        };
        assert_eq!(n.controller(1024).rate_bps(), Some(1_000_000));
    }

    #[test]
    fn real_socket_defaults_fill_only_what_is_unset() {
        let mut p = CcParams::new("timely");
        p.set("rate_ai_mbps", "20").unwrap();
        real_socket_defaults(&mut p);
        assert_eq!(p.t_low_us, Some(REAL_SOCKET_TIMELY_T_LOW_US));
        assert_eq!(p.t_high_us, Some(REAL_SOCKET_TIMELY_T_HIGH_US));
        assert_eq!(p.rate_ai_mbps, Some(20.0), "given: kept");
        assert_eq!(p.min_rtt_us, Some(REAL_SOCKET_TIMELY_D_MINRTT_US));
        // One threshold given: the other keeps the algorithm's default,
        // so the pair is the user's to make consistent.
        let mut q = CcParams::new("timely");
        q.set("t_high_us", "900").unwrap();
        real_socket_defaults(&mut q);
        assert_eq!(q.t_low_us, None);
        let mut w = CcParams::new("swift");
        real_socket_defaults(&mut w);
        assert_eq!(w.base_target_us, Some(REAL_SOCKET_SWIFT_ALLOWANCE_US));
        // A named preset runs as its source gives it: nothing is filled.
        let mut n = CcParams::new("timely");
        n.set("preset", "hpcc-ns3").unwrap();
        real_socket_defaults(&mut n);
        assert_eq!((n.t_low_us, n.t_high_us, n.min_rtt_us), (None, None, None));
        assert!(w.build().is_ok() && q.build().is_ok() && p.build().is_ok() && n.build().is_ok());
    }

    /// Over the minimum RTT, a path whose base delay is 1 ms reads as no
    /// queueing; with absolute thresholds the same samples exceed T_high.
    #[test]
    fn timely_over_min_rtt_reads_the_queueing_above_the_base() {
        let cc = CcParams::new("timely").build().unwrap().cc;
        let cuts = |over: bool| {
            let s = CcSettings {
                delay_over_min_rtt: over,
                ..CcSettings::new(cc, 10_000_000_000)
            };
            let mut c = s.controller(4096);
            // A 64 KB segment per ACK: TIMELY's default updates once per
            // segment acknowledged (the paper's completion event).
            for k in 1..=10u64 {
                let fb = AckFeedback {
                    acked_bytes: 65536,
                    rtt: Some(RttSample {
                        rtt: 1_000_000,
                        min_rtt: 1_000_000,
                    }),
                    snd_una: 65536 * k,
                    snd_nxt: 65536 * k,
                    ..AckFeedback::default()
                };
                c.on_ack_feedback(k * 1_000_000, &fb);
            }
            c.rate_cuts()
        };
        assert_eq!(cuts(true), 0);
        assert!(cuts(false) > 0);
    }

    #[test]
    fn loopback_has_no_speed() {
        assert_eq!(interface_speed_bps("127.0.0.1".parse().unwrap()), None);
        assert_eq!(
            line_rate_for("127.0.0.1".parse().unwrap()),
            DEFAULT_LINE_RATE_BPS
        );
    }
}
