//! Congestion control for the simulated hosts: which controller each flow's
//! sending QP gets (the controllers themselves are the RNIC's:
//! [`roce_rnic::Dcqcn`], [`roce_rnic::Hpcc`], [`roce_rnic::Timely`],
//! [`roce_rnic::Dctcp`], [`roce_rnic::Swift`]), and how the simulator
//! derives what they need from the fabric (line rate, base RTT, hops, MSS).

use crate::event::{PS_PER_NS, Ps, ser_ps};
use crate::topology::{Routes, Topology};
use roce_rnic::{
    CongestionControl, Dcqcn, DcqcnConfig, Dctcp, DctcpConfig, DctcpVariant, Hpcc, HpccConfig,
    NoCc, Swift, SwiftConfig, Timely, TimelyConfig,
};

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

/// DCTCP settings as experiments state them (see [`roce_rnic::Dctcp`]).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct DctcpSettings {
    /// α's gain g (`EWMA_GAIN`).
    pub g: f64,
    pub initial_alpha: f64,
    /// Rate form (HPCC ns-3 `CC_MODE 8`) or the paper's window form.
    pub window: bool,
    /// Rate form: increase per window (`DCTCP_RATE_AI`).
    pub rate_ai_bps: u64,
    /// Rate form: floor (`MIN_RATE`).
    pub min_rate_bps: u64,
}

impl Default for DctcpSettings {
    /// HPCC ns-3 `CC_MODE 8`: g = 1/16, α₀ = 1, 1000 Mb/s per window, 100 Mb/s floor.
    fn default() -> Self {
        let d = DctcpConfig::hpcc_ns3();
        let DctcpVariant::Rate { rate_ai_bps } = d.variant else {
            unreachable!("the ns-3 preset is the rate form")
        };
        DctcpSettings {
            g: d.g,
            initial_alpha: d.initial_alpha,
            window: false,
            rate_ai_bps,
            min_rate_bps: d.min_rate_bps,
        }
    }
}

/// Swift settings; the delays and the window bound default to the fabric's.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct SwiftSettings {
    /// Fabric base target. `None`: the largest base RTT between two hosts.
    pub base_target_ns: Option<u64>,
    pub hop_scale_ns: u64,
    /// `None`: 5 × the base target.
    pub fs_range_ns: Option<u64>,
    pub fs_min_cwnd: f64,
    pub fs_max_cwnd: f64,
    pub endpoint_target_ns: u64,
    pub ai: f64,
    pub beta: f64,
    pub max_mdf: f64,
    pub min_cwnd: f64,
    /// Largest window in packets. `None`: the line-rate BDP of the base RTT.
    pub max_cwnd: Option<f64>,
    pub retx_reset_threshold: u32,
}

impl Default for SwiftSettings {
    fn default() -> Self {
        let c = SwiftConfig::new(1, 1, 1.0);
        SwiftSettings {
            base_target_ns: None,
            hop_scale_ns: c.hop_scale_ns,
            fs_range_ns: None,
            fs_min_cwnd: c.fs_min_cwnd,
            fs_max_cwnd: c.fs_max_cwnd,
            endpoint_target_ns: c.endpoint_target_ns,
            ai: c.ai,
            beta: c.beta,
            max_mdf: c.max_mdf,
            min_cwnd: c.min_cwnd,
            max_cwnd: None,
            retx_reset_threshold: c.retx_reset_threshold,
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
    /// TIMELY: the RTT gradient of the RNIC's per-ACK samples.
    Timely(TimelyConfig),
    /// DCTCP: receivers echo CE marks in their ACKs.
    Dctcp(DctcpSettings),
    /// Swift: a window steered to a target delay from the RTT samples.
    Swift(SwiftSettings),
}

impl CcConfig {
    pub fn name(&self) -> &'static str {
        match self {
            CcConfig::None => "none",
            CcConfig::Dcqcn(_) => "dcqcn",
            CcConfig::Hpcc(_) => "hpcc",
            CcConfig::Timely(_) => "timely",
            CcConfig::Dctcp(_) => "dctcp",
            CcConfig::Swift(_) => "swift",
        }
    }
}

/// What a run's controllers are built from.
#[derive(Debug, Clone, Copy)]
pub(crate) enum CcPlan {
    None,
    Dcqcn(DcqcnConfig),
    Hpcc(HpccConfig),
    Timely(TimelyConfig),
    Dctcp(DctcpConfig),
    /// Swift's settings with everything but the per-flow hop count resolved.
    Swift(SwiftConfig),
}

/// The fastest host link of the fabric.
fn host_line_bps(topo: &Topology) -> u64 {
    topo.hosts
        .iter()
        .filter_map(|&n| topo.ports[n].first().map(|p| p.rate_bps))
        .max()
        .unwrap_or(100_000_000_000)
}

impl CcPlan {
    /// `max_wire`: the largest data frame on the wire; `mss`: its payload.
    pub(crate) fn new(
        cc: &CcConfig,
        topo: &Topology,
        routes: &Routes,
        max_wire: u64,
        mss: u64,
    ) -> CcPlan {
        let fabric_rtt_ns = || (max_base_rtt_ps(topo, routes, max_wire) / PS_PER_NS).max(1);
        let bdp_bytes = |rtt_ns: u64| host_line_bps(topo) / 8 * rtt_ns / 1_000_000_000;
        match cc {
            CcConfig::None => CcPlan::None,
            CcConfig::Dcqcn(d) => CcPlan::Dcqcn(*d),
            CcConfig::Timely(t) => CcPlan::Timely(*t),
            CcConfig::Dctcp(d) => CcPlan::Dctcp(DctcpConfig {
                g: d.g,
                initial_alpha: d.initial_alpha,
                min_rate_bps: d.min_rate_bps,
                variant: if d.window {
                    let w = DctcpConfig::window(mss, bdp_bytes(fabric_rtt_ns()));
                    w.variant
                } else {
                    DctcpVariant::Rate {
                        rate_ai_bps: d.rate_ai_bps,
                    }
                },
            }),
            CcConfig::Swift(s) => {
                let rtt = fabric_rtt_ns();
                let base = s.base_target_ns.unwrap_or(rtt).max(1);
                let max_cwnd = s
                    .max_cwnd
                    .unwrap_or_else(|| bdp_bytes(rtt) as f64 / mss.max(1) as f64);
                let mut c = SwiftConfig::new(base, mss, max_cwnd);
                c.hop_scale_ns = s.hop_scale_ns;
                c.fs_range_ns = s.fs_range_ns.unwrap_or(5 * base);
                c.fs_min_cwnd = s.fs_min_cwnd;
                c.fs_max_cwnd = s.fs_max_cwnd;
                c.endpoint_target_ns = s.endpoint_target_ns;
                c.ai = s.ai;
                c.beta = s.beta;
                c.max_mdf = s.max_mdf;
                c.min_cwnd = s.min_cwnd;
                c.retx_reset_threshold = s.retx_reset_threshold;
                CcPlan::Swift(c)
            }
            CcConfig::Hpcc(h) => {
                let line = host_line_bps(topo);
                let rtt = h.base_rtt_ns.unwrap_or_else(fabric_rtt_ns).max(1);
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

    /// A controller for a sending QP on a host whose NIC runs at `line_bps`,
    /// on a path through `hops()` switches (asked only by Swift).
    pub(crate) fn controller(
        &self,
        line_bps: u64,
        hops: impl FnOnce() -> u32,
    ) -> Box<dyn CongestionControl> {
        match self {
            CcPlan::None => Box::new(NoCc),
            CcPlan::Dcqcn(d) => Box::new(Dcqcn::new(*d, line_bps)),
            CcPlan::Hpcc(h) => Box::new(Hpcc::new(*h, line_bps)),
            CcPlan::Timely(t) => Box::new(Timely::new(*t, line_bps)),
            CcPlan::Dctcp(d) => Box::new(Dctcp::new(*d, line_bps)),
            CcPlan::Swift(s) => Box::new(Swift::new(SwiftConfig { hops: hops(), ..*s })),
        }
    }

    /// Receivers must echo CE marks in ACKs (DCTCP).
    pub(crate) fn ecn_echo(&self) -> bool {
        matches!(self, CcPlan::Dctcp(_))
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

/// Switches between `src` (a node) and every node, by breadth-first search
/// over the links: the hop count of a shortest (ECMP) path, as Swift reads
/// it from the TTL of received packets.
pub(crate) fn switch_hops_from(topo: &Topology, src: usize) -> Vec<u32> {
    let mut dist = vec![u32::MAX; topo.nodes.len()];
    let mut q = std::collections::VecDeque::new();
    dist[src] = 0;
    q.push_back(src);
    while let Some(n) = q.pop_front() {
        for p in &topo.ports[n] {
            let m = p.peer;
            if dist[m] == u32::MAX {
                dist[m] = dist[n] + 1;
                q.push_back(m);
            }
        }
    }
    // Links crossed minus one: the switches in between.
    dist.iter().map(|d| d.saturating_sub(1)).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::topology::gbps;

    #[test]
    fn swift_hops_are_the_switches_on_a_shortest_path() {
        let t = Topology::fat_tree(5, 4, 4, 16, 16, gbps(100), gbps(400), 1_000_000).unwrap();
        let r = t.routes();
        let from0 = switch_hops_from(&t, t.hosts[0]);
        for dst in [1usize, 16, 100, 319] {
            // The routed path's links, minus one: the switches crossed.
            let want = t.path(&r, 0, dst as u32).len() as u32 - 1;
            assert_eq!(from0[t.hosts[dst]], want, "host 0 → {dst}");
        }
        // Same ToR: one switch; another pod: ToR, agg, core, agg, ToR.
        assert_eq!(from0[t.hosts[1]], 1);
        assert_eq!(from0[t.hosts[319]], 5);
    }
}
