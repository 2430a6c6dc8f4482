//! Congestion control for the simulated hosts: which controller each flow's
//! sending QP gets (the controllers themselves are the RNIC's,
//! [`roce_rnic::Dcqcn`] and [`roce_rnic::Hpcc`]), and how the simulator
//! derives what they need from the fabric (line rate, base RTT).

use crate::event::{PS_PER_NS, Ps, ser_ps};
use crate::topology::{Routes, Topology};
use roce_rnic::{CongestionControl, Dcqcn, DcqcnConfig, Hpcc, HpccConfig, NoCc};

/// HPCC settings as experiments state them; the window form the RNIC's
/// controller takes ([`HpccConfig`]) is derived per run from the fabric.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct HpccSettings {
    /// Target utilisation η (HPCC ns-3: `U_TARGET`).
    pub eta: f64,
    /// Additive steps before a multiplicative one (`MI_THRESH`).
    pub max_stage: u32,
    /// Additive increase as a rate (`RATE_AI`); the window step is
    /// `rate_ai_bps / 8 × base RTT`. `None`: the paper's BDP·(1−η)/100.
    pub rate_ai_bps: Option<u64>,
    /// Base RTT T. `None`: the largest base RTT between any two hosts
    /// (HPCC ns-3 with `GLOBAL_T 1`).
    pub base_rtt_ns: Option<u64>,
    /// Rate floor (`MIN_RATE`). `None`: the RNIC's default, 100 Mb/s.
    pub min_rate_bps: Option<u64>,
    /// React to every ACK between the once-per-RTT updates (`FAST_REACT`).
    pub fast_react: bool,
}

impl Default for HpccSettings {
    fn default() -> Self {
        HpccSettings {
            eta: 0.95,
            max_stage: 5,
            rate_ai_bps: None,
            base_rtt_ns: None,
            min_rate_bps: None,
            fast_react: true,
        }
    }
}

/// The congestion controller of every flow's sender.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub enum CcConfig {
    /// Line rate; only PFC (and drops) limit senders.
    #[default]
    None,
    /// DCQCN reaction point on the sender; the receiver's RNIC sends CNPs
    /// for CE-marked data (paced by `RnicConfig::cnp_interval_ns`).
    Dcqcn(DcqcnConfig),
    /// HPCC: switches stamp INT on data, receivers echo it in ACKs.
    Hpcc(HpccSettings),
}

impl CcConfig {
    pub fn name(&self) -> &'static str {
        match self {
            CcConfig::None => "none",
            CcConfig::Dcqcn(_) => "dcqcn",
            CcConfig::Hpcc(_) => "hpcc",
        }
    }
}

/// What a run's controllers are built from.
#[derive(Debug, Clone, Copy)]
pub(crate) enum CcPlan {
    None,
    Dcqcn(DcqcnConfig),
    Hpcc(HpccConfig),
}

impl CcPlan {
    pub(crate) fn new(cc: &CcConfig, topo: &Topology, routes: &Routes, max_wire: u64) -> CcPlan {
        match cc {
            CcConfig::None => CcPlan::None,
            CcConfig::Dcqcn(d) => CcPlan::Dcqcn(*d),
            CcConfig::Hpcc(h) => {
                let line = topo
                    .hosts
                    .iter()
                    .filter_map(|&n| topo.ports[n].first().map(|p| p.rate_bps))
                    .max()
                    .unwrap_or(100_000_000_000);
                let rtt = h
                    .base_rtt_ns
                    .unwrap_or_else(|| max_base_rtt_ps(topo, routes, max_wire) / PS_PER_NS)
                    .max(1);
                let mut c = HpccConfig::new(line, rtt);
                c.eta = h.eta;
                c.max_stage = h.max_stage;
                if let Some(ai) = h.rate_ai_bps {
                    c.w_ai = ai as f64 / 8.0 * rtt as f64 / 1e9;
                }
                if let Some(m) = h.min_rate_bps {
                    c.min_rate_bps = m;
                }
                c.fast_react = h.fast_react;
                CcPlan::Hpcc(c)
            }
        }
    }

    /// A controller for a sending QP on a host whose NIC runs at `line_bps`.
    pub(crate) fn controller(&self, line_bps: u64) -> Box<dyn CongestionControl> {
        match self {
            CcPlan::None => Box::new(NoCc),
            CcPlan::Dcqcn(d) => Box::new(Dcqcn::new(*d, line_bps)),
            CcPlan::Hpcc(h) => Box::new(Hpcc::new(*h, line_bps)),
        }
    }

    /// The HPCC base RTT in use, if HPCC.
    pub(crate) fn hpcc(&self) -> Option<HpccConfig> {
        match self {
            CcPlan::Hpcc(h) => Some(*h),
            _ => None,
        }
    }
}

/// The largest base RTT between two hosts, as HPCC ns-3 computes it: twice
/// the path's propagation delay plus one full data frame's serialization at
/// every hop. Symmetric fabrics reach their maximum from any host, so
/// large fabrics are measured from a few sources only.
pub fn max_base_rtt_ps(topo: &Topology, routes: &Routes, max_wire: u64) -> Ps {
    let n = topo.n_hosts() as u32;
    let sources: Vec<u32> = if n <= 256 {
        (0..n).collect()
    } else {
        vec![0, n / 2, n - 1]
    };
    let mut best = 0;
    for &s in &sources {
        for d in 0..n {
            if d == s {
                continue;
            }
            let path = topo.path(routes, s, d);
            let rtt: Ps = path
                .iter()
                .map(|p| 2 * p.delay_ps + ser_ps(max_wire, p.rate_bps))
                .sum();
            best = best.max(rtt);
        }
    }
    best
}
