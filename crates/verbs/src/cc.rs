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
use roce_rnic::cc::{CcConfig, CcPlan};
use std::net::IpAddr;

/// Line rate assumed when the interface's speed cannot be read (loopback
/// has none): 100 Gb/s, the speed RoCE deployments and DCQCN's defaults
/// (rate steps in Mb/s, 100 Gb/s fabrics in HPCC's evaluation) assume.
pub const DEFAULT_LINE_RATE_BPS: u64 = 100_000_000_000;

/// Base RTT assumed for the delay-based controllers (Swift's target,
/// DCTCP's window BDP): 20 µs, about what this software stack measures
/// with `roce perf write_lat` on loopback (two one-way latencies).
pub const DEFAULT_BASE_RTT_NS: u64 = 20_000;

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
}

impl Default for CcSettings {
    fn default() -> Self {
        CcSettings {
            config: CcConfig::None,
            line_rate_bps: DEFAULT_LINE_RATE_BPS,
            base_rtt_ns: DEFAULT_BASE_RTT_NS,
            rate_limit_bps: None,
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
        let c =
            CcPlan::new(&self.config, line, || self.base_rtt_ns, mss.max(1)).controller(line, || 0);
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
    fn loopback_has_no_speed() {
        assert_eq!(interface_speed_bps("127.0.0.1".parse().unwrap()), None);
        assert_eq!(
            line_rate_for("127.0.0.1".parse().unwrap()),
            DEFAULT_LINE_RATE_BPS
        );
    }
}
