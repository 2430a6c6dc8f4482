//! Congestion control chosen by name: the `[cc]` table of a simulator
//! scenario and `roce perf --cc ALG --cc-param KEY=VALUE` share this one
//! parser, so a parameter has the same name, unit and range everywhere.
//!
//! [`CcParams`] holds the keys as written (DCQCN's under the paper's names
//! or NVIDIA ConnectX's mlx5 firmware names, TIMELY's, DCTCP's, Swift's,
//! HPCC's); [`CcParams::build`] checks them — an unknown algorithm, a key of
//! another algorithm, a value out of range — and gives a [`CcConfig`], each
//! error naming its key. [`CcPlan`] resolves what a config leaves to the
//! network (line rate, base RTT, MSS) and makes one controller per QP.

use super::{
    CongestionControl, Dcqcn, DcqcnConfig, Dctcp, DctcpConfig, DctcpVariant, Hpcc, HpccConfig,
    HpccOptions, HpccPint, HpccPintConfig, NoCc, PintCodec, Swift, SwiftConfig, Timely,
    TimelyConfig,
};
use serde::Deserialize;

/// A bad congestion-control parameter: which key, and what was expected.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{key}: {msg}")]
pub struct CcParamError {
    /// The key at fault (`algorithm` for an unknown algorithm).
    pub key: String,
    pub msg: String,
}

impl CcParamError {
    pub fn new(key: impl Into<String>, msg: impl Into<String>) -> CcParamError {
        CcParamError {
            key: key.into(),
            msg: msg.into(),
        }
    }
}

/// True for a positive number (false for NaN).
fn positive(x: f64) -> bool {
    x > 0.0
}

/// True for a number ≥ 0 (false for NaN).
fn nonneg(x: f64) -> bool {
    x >= 0.0
}

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
    /// The HPCC ns-3 simulator's variants (`MULTI_RATE`,
    /// `SAMPLE_FEEDBACK`, `HAS_WIN`, `VAR_WIN`, `RATE_BOUND`), handed to the
    /// controller as they are.
    pub opts: HpccOptions,
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
            opts: HpccOptions::default(),
        }
    }
}

/// HPCC-PINT settings as experiments state them (see
/// [`crate::cc::HpccPint`]): HPCC's, the code's base and the fraction of
/// ACKs the sender reads.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct PintSettings {
    /// η, maxStage, the additive step, T and the rate floor, as HPCC's
    /// (`fast_react` is not read: PINT reacts to every ACK it samples).
    pub hpcc: HpccSettings,
    /// The code's base (`PINT_LOG_BASE`; ns-3's default 1.05).
    pub log_base: f64,
    /// Fraction of ACKs the sender reads (`PINT_PROB`; default 1).
    pub prob: f64,
}

impl Default for PintSettings {
    fn default() -> Self {
        PintSettings {
            hpcc: HpccSettings::default(),
            log_base: 1.05,
            prob: 1.0,
        }
    }
}

/// DCTCP settings as experiments state them (see [`crate::cc::Dctcp`]).
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
    /// HPCC-PINT: switches fold their ports' utilisation into one code per
    /// packet, receivers echo it in ACKs.
    HpccPint(PintSettings),
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
            CcConfig::HpccPint(_) => "hpcc-pint",
            CcConfig::Timely(_) => "timely",
            CcConfig::Dctcp(_) => "dctcp",
            CcConfig::Swift(_) => "swift",
        }
    }
}

#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CcParams {
    /// `none`, `dcqcn`, `hpcc`, `hpcc-pint`, `timely`, `dctcp` or `swift`.
    pub algorithm: String,
    /// A named parameter set the other keys adjust (dcqcn, timely).
    pub preset: Option<String>,
    // DCQCN, by the paper's names
    pub g: Option<f64>,
    pub rate_hai_mbps: Option<f64>,
    pub min_rate_mbps: Option<f64>,
    pub rp_timer_us: Option<f64>,
    pub alpha_resume_interval_us: Option<f64>,
    pub rate_decrease_interval_us: Option<f64>,
    pub byte_counter: Option<u64>,
    pub fast_recovery_times: Option<u32>,
    pub clamp_target_rate: Option<bool>,
    // DCQCN, by ConnectX's mlx5 names
    pub rpg_ai_rate: Option<f64>,
    pub rpg_hai_rate: Option<f64>,
    pub rpg_time_reset: Option<f64>,
    pub rpg_byte_reset: Option<u64>,
    pub rpg_threshold: Option<u32>,
    pub rpg_min_dec_fac: Option<f64>,
    pub rpg_min_rate: Option<f64>,
    pub rpg_gd: Option<u32>,
    pub dce_tcp_g: Option<f64>,
    pub dce_tcp_rtt: Option<f64>,
    pub initial_alpha_value: Option<f64>,
    pub min_time_between_cnps: Option<f64>,
    pub rate_reduce_monitor_period: Option<f64>,
    pub clamp_tgt_rate: Option<u8>,
    pub clamp_tgt_rate_after_time_inc: Option<u8>,
    // several
    pub rate_ai_mbps: Option<f64>,
    // HPCC
    pub eta: Option<f64>,
    pub max_stage: Option<u32>,
    pub base_rtt_us: Option<f64>,
    pub multi_rate: Option<bool>,
    pub sample_feedback: Option<bool>,
    // HPCC-PINT
    pub pint_log_base: Option<f64>,
    pub pint_prob: Option<f64>,
    // TIMELY
    pub t_low_us: Option<f64>,
    pub t_high_us: Option<f64>,
    pub alpha: Option<f64>,
    pub beta: Option<f64>,
    pub hai_after: Option<u32>,
    pub min_rtt_us: Option<f64>,
    pub segment_bytes: Option<u64>,
    // DCTCP
    pub initial_alpha: Option<f64>,
    pub variant: Option<String>,
    // Swift
    pub base_target_us: Option<f64>,
    pub hop_scale_us: Option<f64>,
    pub fs_range_us: Option<f64>,
    pub fs_min_cwnd: Option<f64>,
    pub fs_max_cwnd: Option<f64>,
    pub endpoint_target_us: Option<f64>,
    pub ai: Option<f64>,
    pub max_mdf: Option<f64>,
    pub min_cwnd: Option<f64>,
    pub max_cwnd: Option<f64>,
    pub retx_reset_threshold: Option<u32>,
}

/// Keys of the `[cc]` table each algorithm accepts (besides `algorithm`).
const CC_KEYS: &[(&str, &[&str])] = &[
    ("none", &[]),
    (
        "dcqcn",
        &[
            "preset",
            "g",
            "rate_ai_mbps",
            "rate_hai_mbps",
            "min_rate_mbps",
            "rp_timer_us",
            "alpha_resume_interval_us",
            "rate_decrease_interval_us",
            "byte_counter",
            "fast_recovery_times",
            "clamp_target_rate",
            "rpg_ai_rate",
            "rpg_hai_rate",
            "rpg_time_reset",
            "rpg_byte_reset",
            "rpg_threshold",
            "rpg_min_dec_fac",
            "rpg_min_rate",
            "rpg_gd",
            "dce_tcp_g",
            "dce_tcp_rtt",
            "initial_alpha_value",
            "min_time_between_cnps",
            "rate_reduce_monitor_period",
            "clamp_tgt_rate",
            "clamp_tgt_rate_after_time_inc",
        ],
    ),
    (
        "hpcc",
        &[
            "eta",
            "max_stage",
            "rate_ai_mbps",
            "base_rtt_us",
            "min_rate_mbps",
            "multi_rate",
            "sample_feedback",
        ],
    ),
    (
        "hpcc-pint",
        &[
            "eta",
            "max_stage",
            "rate_ai_mbps",
            "base_rtt_us",
            "min_rate_mbps",
            "pint_log_base",
            "pint_prob",
        ],
    ),
    (
        "timely",
        &[
            "preset",
            "t_low_us",
            "t_high_us",
            "alpha",
            "beta",
            "rate_ai_mbps",
            "rate_hai_mbps",
            "hai_after",
            "min_rtt_us",
            "min_rate_mbps",
            "segment_bytes",
        ],
    ),
    (
        "dctcp",
        &[
            "variant",
            "g",
            "initial_alpha",
            "rate_ai_mbps",
            "min_rate_mbps",
        ],
    ),
    (
        "swift",
        &[
            "base_target_us",
            "hop_scale_us",
            "fs_range_us",
            "fs_min_cwnd",
            "fs_max_cwnd",
            "endpoint_target_us",
            "ai",
            "beta",
            "max_mdf",
            "min_cwnd",
            "max_cwnd",
            "retx_reset_threshold",
        ],
    ),
];

impl CcParams {
    /// The keys present, in the table's declaration order.
    fn present(&self) -> Vec<&'static str> {
        let mut v = Vec::new();
        let mut k = |name: &'static str, here: bool| {
            if here {
                v.push(name);
            }
        };
        k("preset", self.preset.is_some());
        k("g", self.g.is_some());
        k("rate_hai_mbps", self.rate_hai_mbps.is_some());
        k("min_rate_mbps", self.min_rate_mbps.is_some());
        k("rp_timer_us", self.rp_timer_us.is_some());
        k(
            "alpha_resume_interval_us",
            self.alpha_resume_interval_us.is_some(),
        );
        k(
            "rate_decrease_interval_us",
            self.rate_decrease_interval_us.is_some(),
        );
        k("byte_counter", self.byte_counter.is_some());
        k("fast_recovery_times", self.fast_recovery_times.is_some());
        k("clamp_target_rate", self.clamp_target_rate.is_some());
        k("rpg_ai_rate", self.rpg_ai_rate.is_some());
        k("rpg_hai_rate", self.rpg_hai_rate.is_some());
        k("rpg_time_reset", self.rpg_time_reset.is_some());
        k("rpg_byte_reset", self.rpg_byte_reset.is_some());
        k("rpg_threshold", self.rpg_threshold.is_some());
        k("rpg_min_dec_fac", self.rpg_min_dec_fac.is_some());
        k("rpg_min_rate", self.rpg_min_rate.is_some());
        k("rpg_gd", self.rpg_gd.is_some());
        k("dce_tcp_g", self.dce_tcp_g.is_some());
        k("dce_tcp_rtt", self.dce_tcp_rtt.is_some());
        k("initial_alpha_value", self.initial_alpha_value.is_some());
        k(
            "min_time_between_cnps",
            self.min_time_between_cnps.is_some(),
        );
        k(
            "rate_reduce_monitor_period",
            self.rate_reduce_monitor_period.is_some(),
        );
        k("clamp_tgt_rate", self.clamp_tgt_rate.is_some());
        k(
            "clamp_tgt_rate_after_time_inc",
            self.clamp_tgt_rate_after_time_inc.is_some(),
        );
        k("rate_ai_mbps", self.rate_ai_mbps.is_some());
        k("eta", self.eta.is_some());
        k("max_stage", self.max_stage.is_some());
        k("multi_rate", self.multi_rate.is_some());
        k("sample_feedback", self.sample_feedback.is_some());
        k("base_rtt_us", self.base_rtt_us.is_some());
        k("pint_log_base", self.pint_log_base.is_some());
        k("pint_prob", self.pint_prob.is_some());
        k("t_low_us", self.t_low_us.is_some());
        k("t_high_us", self.t_high_us.is_some());
        k("alpha", self.alpha.is_some());
        k("beta", self.beta.is_some());
        k("hai_after", self.hai_after.is_some());
        k("min_rtt_us", self.min_rtt_us.is_some());
        k("segment_bytes", self.segment_bytes.is_some());
        k("initial_alpha", self.initial_alpha.is_some());
        k("variant", self.variant.is_some());
        k("base_target_us", self.base_target_us.is_some());
        k("hop_scale_us", self.hop_scale_us.is_some());
        k("fs_range_us", self.fs_range_us.is_some());
        k("fs_min_cwnd", self.fs_min_cwnd.is_some());
        k("fs_max_cwnd", self.fs_max_cwnd.is_some());
        k("endpoint_target_us", self.endpoint_target_us.is_some());
        k("ai", self.ai.is_some());
        k("max_mdf", self.max_mdf.is_some());
        k("min_cwnd", self.min_cwnd.is_some());
        k("max_cwnd", self.max_cwnd.is_some());
        k("retx_reset_threshold", self.retx_reset_threshold.is_some());
        v
    }
}

/// Range checks of `[cc]` values, each error naming its key and line.
struct CcCheck;

impl CcCheck {
    fn err(&self, key: &str, msg: impl Into<String>) -> CcParamError {
        CcParamError::new(key, msg)
    }
    fn pos(&self, key: &str, v: Option<f64>) -> Result<Option<f64>, CcParamError> {
        match v {
            Some(x) if !positive(x) || !x.is_finite() => {
                Err(self.err(key, format!("expected a positive number, got {x}")))
            }
            v => Ok(v),
        }
    }
    /// 0 < x ≤ 1 (gains, fractions).
    fn frac(&self, key: &str, v: Option<f64>) -> Result<Option<f64>, CcParamError> {
        match v {
            Some(x) if !(x > 0.0 && x <= 1.0) => {
                Err(self.err(key, format!("expected 0 < {key} ≤ 1, got {x}")))
            }
            v => Ok(v),
        }
    }
    fn mbps(&self, key: &str, v: Option<f64>) -> Result<Option<u64>, CcParamError> {
        Ok(self.pos(key, v)?.map(|x| (x * 1e6).round() as u64))
    }
    fn us(&self, key: &str, v: Option<f64>) -> Result<Option<u64>, CcParamError> {
        Ok(self.pos(key, v)?.map(|x| (x * 1e3).round() as u64))
    }
    /// The same knob under two names is ambiguous.
    fn one_of<T>(
        &self,
        a: (&str, Option<T>),
        b: (&str, Option<T>),
    ) -> Result<Option<T>, CcParamError> {
        match (a.1, b.1) {
            (Some(_), Some(_)) => Err(self.err(
                b.0,
                format!("the same parameter as {} (give one of them)", a.0),
            )),
            (x, y) => Ok(x.or(y)),
        }
    }
}

/// What [`CcParams::build`] gives: the controller settings and, for
/// DCQCN's `min_time_between_cnps`, the receivers' CNP interval.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct CcChoice {
    pub cc: CcConfig,
    /// Nanoseconds between CNPs a receiver sends one QP, if set here.
    pub cnp_interval_ns: Option<u64>,
}

impl CcParams {
    /// Parameters of `algorithm` with nothing set (its defaults).
    pub fn new(algorithm: &str) -> CcParams {
        CcParams {
            algorithm: algorithm.to_string(),
            ..CcParams::default()
        }
    }

    /// Checks the algorithm and its parameters (keys of another algorithm
    /// are mistakes, not silently ignored).
    pub fn build(&self) -> Result<CcChoice, CcParamError> {
        let (cc, cnp_interval_ns) = build_cc(self)?;
        Ok(CcChoice {
            cc,
            cnp_interval_ns,
        })
    }
}

/// HPCC's keys of `c` (HPCC-PINT takes the same ones).
fn hpcc_settings(c: &CcParams, ck: &CcCheck) -> Result<HpccSettings, CcParamError> {
    let mut h = HpccSettings::default();
    if let Some(e) = c.eta {
        if !(e > 0.0 && e <= 1.0) {
            return Err(ck.err("eta", "expected 0 < eta ≤ 1"));
        }
        h.eta = e;
    }
    h.max_stage = c.max_stage.unwrap_or(h.max_stage);
    h.rate_ai_bps = ck.mbps("rate_ai_mbps", c.rate_ai_mbps)?;
    h.base_rtt_ns = ck.us("base_rtt_us", c.base_rtt_us)?;
    h.min_rate_bps = ck.mbps("min_rate_mbps", c.min_rate_mbps)?;
    h.opts.multi_rate = c.multi_rate.unwrap_or(h.opts.multi_rate);
    h.opts.sample_feedback = c.sample_feedback.unwrap_or(h.opts.sample_feedback);
    Ok(h)
}

/// Largest `rpg_byte_reset` ConnectX accepts: the field is 15 bits wide.
const RPG_BYTE_RESET_MAX: u64 = (1 << 15) - 1;

fn build_cc(c: &CcParams) -> Result<(CcConfig, Option<u64>), CcParamError> {
    let alg = c.algorithm.as_str();
    let Some((_, allowed)) = CC_KEYS.iter().find(|(name, _)| *name == alg) else {
        return Err(CcParamError::new(
            "algorithm",
            format!(
                "expected \"none\", \"dcqcn\", \"hpcc\", \"hpcc-pint\", \"timely\", \"dctcp\" or \"swift\", got \"{alg}\""
            ),
        ));
    };
    if let Some(k) = c.present().into_iter().find(|k| !allowed.contains(k)) {
        return Err(CcParamError::new(
            k,
            format!("not a parameter of algorithm \"{alg}\""),
        ));
    }
    let ck = CcCheck;
    let mut cnp_interval = None;
    let cc = match alg {
        "none" => CcConfig::None,
        "dcqcn" => {
            let mut d = match c.preset.as_deref() {
                None => DcqcnConfig::default(),
                Some(p) => DcqcnConfig::preset(p).ok_or_else(|| {
                    ck.err(
                        "preset",
                        format!("expected \"paper\", \"connectx\" or \"hpcc-ns3\", got \"{p}\""),
                    )
                })?,
            };
            // mlx5's dce_tcp_g G means g = 1 − G/1024 (α ← (G/1024)·α + (1 − G/1024)).
            let dce_g = match c.dce_tcp_g {
                Some(v) if !(0.0..1024.0).contains(&v) => {
                    return Err(ck.err("dce_tcp_g", format!("expected 0..=1023, got {v}")));
                }
                v => v.map(|v| 1.0 - v / 1024.0),
            };
            if let Some(g) = ck.one_of(("g", ck.frac("g", c.g)?), ("dce_tcp_g", dce_g))? {
                if g <= 0.0 {
                    return Err(ck.err("dce_tcp_g", "1024 would make g = 0"));
                }
                d.g = g;
            }
            let pick = |a: (&str, Option<f64>), b: (&str, Option<f64>)| ck.one_of(a, b);
            if let Some(r) = pick(
                ("rate_ai_mbps", c.rate_ai_mbps),
                ("rpg_ai_rate", c.rpg_ai_rate),
            )? {
                d.rate_ai_bps = ck.mbps("rate_ai_mbps", Some(r))?.unwrap_or(d.rate_ai_bps);
            }
            if let Some(r) = pick(
                ("rate_hai_mbps", c.rate_hai_mbps),
                ("rpg_hai_rate", c.rpg_hai_rate),
            )? {
                d.rate_hai_bps = ck.mbps("rate_hai_mbps", Some(r))?.unwrap_or(d.rate_hai_bps);
            }
            if let Some(r) = pick(
                ("min_rate_mbps", c.min_rate_mbps),
                ("rpg_min_rate", c.rpg_min_rate),
            )? {
                d.min_rate_bps = ck.mbps("min_rate_mbps", Some(r))?.unwrap_or(d.min_rate_bps);
            }
            if let Some(t) = pick(
                ("rp_timer_us", c.rp_timer_us),
                ("rpg_time_reset", c.rpg_time_reset),
            )? {
                d.rp_timer_ns = ck.us("rp_timer_us", Some(t))?.unwrap_or(d.rp_timer_ns);
            }
            if let Some(t) = pick(
                ("alpha_resume_interval_us", c.alpha_resume_interval_us),
                ("dce_tcp_rtt", c.dce_tcp_rtt),
            )? {
                d.alpha_resume_interval_ns = ck
                    .us("alpha_resume_interval_us", Some(t))?
                    .unwrap_or(d.alpha_resume_interval_ns);
            }
            if let Some(t) = pick(
                ("rate_decrease_interval_us", c.rate_decrease_interval_us),
                ("rate_reduce_monitor_period", c.rate_reduce_monitor_period),
            )? {
                d.rate_decrease_interval_ns = ck
                    .us("rate_decrease_interval_us", Some(t))?
                    .unwrap_or(d.rate_decrease_interval_ns);
            }
            // ConnectX's `rpg_byte_reset` is a count of bytes in a 15-bit
            // field (see `DcqcnConfig::connectx`): a larger value is no
            // setting the NIC can hold. `byte_counter` has no such bound.
            if let Some(v) = c.rpg_byte_reset.filter(|v| *v > RPG_BYTE_RESET_MAX) {
                return Err(ck.err(
                    "rpg_byte_reset",
                    format!("expected 0..={RPG_BYTE_RESET_MAX} (bytes, 0 = off), got {v}"),
                ));
            }
            if let Some(b) = ck.one_of(
                ("byte_counter", c.byte_counter),
                ("rpg_byte_reset", c.rpg_byte_reset),
            )? {
                d.byte_counter = b;
            }
            if let Some(f) = ck.one_of(
                ("fast_recovery_times", c.fast_recovery_times),
                ("rpg_threshold", c.rpg_threshold),
            )? {
                d.fast_recovery_times = f;
            }
            let flag = |key: &str, v: Option<u8>| -> Result<Option<bool>, CcParamError> {
                match v {
                    Some(x) if x > 1 => Err(ck.err(key, format!("expected 0 or 1, got {x}"))),
                    v => Ok(v.map(|x| x == 1)),
                }
            };
            if let Some(b) = ck.one_of(
                ("clamp_target_rate", c.clamp_target_rate),
                ("clamp_tgt_rate", flag("clamp_tgt_rate", c.clamp_tgt_rate)?),
            )? {
                d.clamp_target_rate = b;
            }
            if let Some(b) = flag(
                "clamp_tgt_rate_after_time_inc",
                c.clamp_tgt_rate_after_time_inc,
            )? {
                d.clamp_after_time_inc = b;
            }
            if let Some(v) = c.rpg_min_dec_fac {
                if !(0.0..=100.0).contains(&v) {
                    return Err(ck.err("rpg_min_dec_fac", format!("expected 0..=100 (%), got {v}")));
                }
                d.min_decrease_factor = v / 100.0;
            }
            if let Some(gd) = c.rpg_gd {
                if !(10..=11).contains(&gd) {
                    return Err(ck.err("rpg_gd", format!("expected 10 or 11, got {gd}")));
                }
                // α (10 fraction bits) shifted right by rpg_gd: α/2^(gd−10).
                d.cut_scale = 1.0 / f64::from(1u32 << (gd - 10));
            }
            if let Some(v) = c.initial_alpha_value {
                if !(1.0..=1023.0).contains(&v) {
                    return Err(
                        ck.err("initial_alpha_value", format!("expected 1..=1023, got {v}"))
                    );
                }
                d.initial_alpha = v / 1024.0;
            }
            if let Some(v) = c.min_time_between_cnps {
                if !nonneg(v) {
                    return Err(
                        ck.err("min_time_between_cnps", format!("expected ≥ 0 µs, got {v}"))
                    );
                }
                cnp_interval = Some((v * 1e3).round() as u64);
            }
            CcConfig::Dcqcn(d)
        }
        "hpcc" => CcConfig::Hpcc(hpcc_settings(c, &ck)?),
        "hpcc-pint" => {
            let mut p = PintSettings {
                hpcc: hpcc_settings(c, &ck)?,
                ..PintSettings::default()
            };
            if let Some(b) = c.pint_log_base {
                if PintCodec::new(b).is_none() {
                    return Err(ck.err("pint_log_base", format!("expected a base > 1, got {b}")));
                }
                p.log_base = b;
            }
            if let Some(q) = c.pint_prob {
                if !(q > 0.0 && q <= 1.0) {
                    return Err(ck.err("pint_prob", format!("expected 0 < p ≤ 1, got {q}")));
                }
                p.prob = q;
            }
            CcConfig::HpccPint(p)
        }
        "timely" => {
            let mut t = match c.preset.as_deref() {
                None | Some("paper") => TimelyConfig::default(),
                Some("hpcc-ns3") => TimelyConfig::hpcc_ns3(),
                Some(p) => {
                    return Err(ck.err(
                        "preset",
                        format!("expected \"paper\" or \"hpcc-ns3\", got \"{p}\""),
                    ));
                }
            };
            t.t_low_ns = ck.us("t_low_us", c.t_low_us)?.unwrap_or(t.t_low_ns);
            t.t_high_ns = ck.us("t_high_us", c.t_high_us)?.unwrap_or(t.t_high_ns);
            if t.t_low_ns >= t.t_high_ns {
                let key = if c.t_low_us.is_some() {
                    "t_low_us"
                } else {
                    "t_high_us"
                };
                return Err(ck.err(
                    key,
                    format!(
                        "expected t_low_us < t_high_us, got {} ≥ {} µs",
                        t.t_low_ns as f64 / 1e3,
                        t.t_high_ns as f64 / 1e3
                    ),
                ));
            }
            t.alpha = ck.frac("alpha", c.alpha)?.unwrap_or(t.alpha);
            t.beta = ck.frac("beta", c.beta)?.unwrap_or(t.beta);
            t.delta_bps = ck
                .mbps("rate_ai_mbps", c.rate_ai_mbps)?
                .unwrap_or(t.delta_bps);
            t.hai_delta_bps = ck
                .mbps("rate_hai_mbps", c.rate_hai_mbps)?
                .unwrap_or(t.hai_delta_bps);
            t.hai_after = c.hai_after.unwrap_or(t.hai_after);
            // 0 is documented: normalise by the QP's measured minimum RTT.
            t.min_rtt_ns = match c.min_rtt_us {
                Some(m) if !(nonneg(m) && m.is_finite()) => {
                    return Err(ck.err("min_rtt_us", format!("expected ≥ 0 µs, got {m}")));
                }
                Some(m) => (m * 1e3).round() as u64,
                None => t.min_rtt_ns,
            };
            // 0 is ns-3's once-per-round-trip update; a segment is at most
            // a message's worth (2 GiB, IBA's largest).
            if let Some(b) = c.segment_bytes {
                if b > 1 << 31 {
                    return Err(ck.err(
                        "segment_bytes",
                        format!(
                            "expected 0 (once per round trip) or at most 2147483648 bytes, got {b}"
                        ),
                    ));
                }
                t.segment_bytes = b;
            }
            t.min_rate_bps = ck
                .mbps("min_rate_mbps", c.min_rate_mbps)?
                .unwrap_or(t.min_rate_bps);
            CcConfig::Timely(t)
        }
        "dctcp" => {
            let window = match c.variant.as_deref() {
                None | Some("rate") => false,
                Some("window") => true,
                Some(v) => {
                    return Err(ck.err(
                        "variant",
                        format!("expected \"rate\" or \"window\", got \"{v}\""),
                    ));
                }
            };
            let mut d = DctcpSettings {
                window,
                ..DctcpSettings::default()
            };
            d.g = ck.frac("g", c.g)?.unwrap_or(d.g);
            d.initial_alpha = match c.initial_alpha {
                Some(a) if !(0.0..=1.0).contains(&a) => {
                    return Err(ck.err(
                        "initial_alpha",
                        format!("expected 0 ≤ initial_alpha ≤ 1, got {a}"),
                    ));
                }
                a => a.unwrap_or(d.initial_alpha),
            };
            if d.window {
                for (k, here) in [
                    ("rate_ai_mbps", c.rate_ai_mbps.is_some()),
                    ("min_rate_mbps", c.min_rate_mbps.is_some()),
                ] {
                    if here {
                        return Err(ck.err(k, "a parameter of variant \"rate\", not \"window\""));
                    }
                }
            }
            d.rate_ai_bps = ck
                .mbps("rate_ai_mbps", c.rate_ai_mbps)?
                .unwrap_or(d.rate_ai_bps);
            d.min_rate_bps = ck
                .mbps("min_rate_mbps", c.min_rate_mbps)?
                .unwrap_or(d.min_rate_bps);
            CcConfig::Dctcp(d)
        }
        "swift" => {
            let mut w = SwiftSettings {
                base_target_ns: ck.us("base_target_us", c.base_target_us)?,
                ..SwiftSettings::default()
            };
            if let Some(h) = c.hop_scale_us {
                if !nonneg(h) {
                    return Err(ck.err("hop_scale_us", format!("expected ≥ 0 µs, got {h}")));
                }
                w.hop_scale_ns = (h * 1e3).round() as u64;
            }
            w.fs_range_ns = ck.us("fs_range_us", c.fs_range_us)?;
            w.fs_min_cwnd = ck
                .pos("fs_min_cwnd", c.fs_min_cwnd)?
                .unwrap_or(w.fs_min_cwnd);
            w.fs_max_cwnd = ck
                .pos("fs_max_cwnd", c.fs_max_cwnd)?
                .unwrap_or(w.fs_max_cwnd);
            if w.fs_min_cwnd >= w.fs_max_cwnd {
                let key = if c.fs_min_cwnd.is_some() {
                    "fs_min_cwnd"
                } else {
                    "fs_max_cwnd"
                };
                return Err(ck.err(key, "expected fs_min_cwnd < fs_max_cwnd"));
            }
            w.endpoint_target_ns = ck
                .us("endpoint_target_us", c.endpoint_target_us)?
                .unwrap_or(w.endpoint_target_ns);
            w.ai = ck.pos("ai", c.ai)?.unwrap_or(w.ai);
            w.beta = ck.frac("beta", c.beta)?.unwrap_or(w.beta);
            w.max_mdf = match c.max_mdf {
                Some(m) if !(m > 0.0 && m < 1.0) => {
                    return Err(ck.err("max_mdf", format!("expected 0 < max_mdf < 1, got {m}")));
                }
                m => m.unwrap_or(w.max_mdf),
            };
            w.min_cwnd = ck.pos("min_cwnd", c.min_cwnd)?.unwrap_or(w.min_cwnd);
            w.max_cwnd = ck.pos("max_cwnd", c.max_cwnd)?;
            if w.max_cwnd.is_some_and(|m| m < w.min_cwnd.max(1.0)) {
                return Err(ck.err("max_cwnd", "expected max_cwnd ≥ max(min_cwnd, 1)"));
            }
            if let Some(r) = c.retx_reset_threshold {
                if r == 0 {
                    return Err(ck.err("retx_reset_threshold", "expected at least 1"));
                }
                w.retx_reset_threshold = r;
            }
            CcConfig::Swift(w)
        }
        _ => unreachable!("CC_KEYS names every algorithm"),
    };
    Ok((cc, cnp_interval))
}

impl CcParams {
    /// Sets `key` from its text form, as `--cc-param key=value` gives it
    /// (numbers, `true`/`false`, bare or quoted words). Whether the key
    /// belongs to the algorithm and its range are [`build`](Self::build)'s.
    pub fn set(&mut self, key: &str, value: &str) -> Result<(), CcParamError> {
        fn parse<T: std::str::FromStr>(key: &str, value: &str) -> Result<T, CcParamError>
        where
            T::Err: std::fmt::Display,
        {
            value
                .parse::<T>()
                .map_err(|e| CcParamError::new(key, format!("cannot read \"{value}\": {e}")))
        }
        let value = value.trim().trim_matches('"');
        match key {
            "algorithm" => self.algorithm = value.to_string(),
            "preset" => self.preset = Some(parse::<String>(key, value)?),
            "g" => self.g = Some(parse::<f64>(key, value)?),
            "rate_hai_mbps" => self.rate_hai_mbps = Some(parse::<f64>(key, value)?),
            "min_rate_mbps" => self.min_rate_mbps = Some(parse::<f64>(key, value)?),
            "rp_timer_us" => self.rp_timer_us = Some(parse::<f64>(key, value)?),
            "alpha_resume_interval_us" => {
                self.alpha_resume_interval_us = Some(parse::<f64>(key, value)?)
            }
            "rate_decrease_interval_us" => {
                self.rate_decrease_interval_us = Some(parse::<f64>(key, value)?)
            }
            "byte_counter" => self.byte_counter = Some(parse::<u64>(key, value)?),
            "fast_recovery_times" => self.fast_recovery_times = Some(parse::<u32>(key, value)?),
            "clamp_target_rate" => self.clamp_target_rate = Some(parse::<bool>(key, value)?),
            "rpg_ai_rate" => self.rpg_ai_rate = Some(parse::<f64>(key, value)?),
            "rpg_hai_rate" => self.rpg_hai_rate = Some(parse::<f64>(key, value)?),
            "rpg_time_reset" => self.rpg_time_reset = Some(parse::<f64>(key, value)?),
            "rpg_byte_reset" => self.rpg_byte_reset = Some(parse::<u64>(key, value)?),
            "rpg_threshold" => self.rpg_threshold = Some(parse::<u32>(key, value)?),
            "rpg_min_dec_fac" => self.rpg_min_dec_fac = Some(parse::<f64>(key, value)?),
            "rpg_min_rate" => self.rpg_min_rate = Some(parse::<f64>(key, value)?),
            "rpg_gd" => self.rpg_gd = Some(parse::<u32>(key, value)?),
            "dce_tcp_g" => self.dce_tcp_g = Some(parse::<f64>(key, value)?),
            "dce_tcp_rtt" => self.dce_tcp_rtt = Some(parse::<f64>(key, value)?),
            "initial_alpha_value" => self.initial_alpha_value = Some(parse::<f64>(key, value)?),
            "min_time_between_cnps" => self.min_time_between_cnps = Some(parse::<f64>(key, value)?),
            "rate_reduce_monitor_period" => {
                self.rate_reduce_monitor_period = Some(parse::<f64>(key, value)?)
            }
            "clamp_tgt_rate" => self.clamp_tgt_rate = Some(parse::<u8>(key, value)?),
            "clamp_tgt_rate_after_time_inc" => {
                self.clamp_tgt_rate_after_time_inc = Some(parse::<u8>(key, value)?)
            }
            "rate_ai_mbps" => self.rate_ai_mbps = Some(parse::<f64>(key, value)?),
            "eta" => self.eta = Some(parse::<f64>(key, value)?),
            "max_stage" => self.max_stage = Some(parse::<u32>(key, value)?),
            "base_rtt_us" => self.base_rtt_us = Some(parse::<f64>(key, value)?),
            "multi_rate" => self.multi_rate = Some(parse::<bool>(key, value)?),
            "sample_feedback" => self.sample_feedback = Some(parse::<bool>(key, value)?),
            "pint_log_base" => self.pint_log_base = Some(parse::<f64>(key, value)?),
            "pint_prob" => self.pint_prob = Some(parse::<f64>(key, value)?),
            "t_low_us" => self.t_low_us = Some(parse::<f64>(key, value)?),
            "t_high_us" => self.t_high_us = Some(parse::<f64>(key, value)?),
            "alpha" => self.alpha = Some(parse::<f64>(key, value)?),
            "beta" => self.beta = Some(parse::<f64>(key, value)?),
            "hai_after" => self.hai_after = Some(parse::<u32>(key, value)?),
            "segment_bytes" => self.segment_bytes = Some(parse::<u64>(key, value)?),
            "min_rtt_us" => self.min_rtt_us = Some(parse::<f64>(key, value)?),
            "initial_alpha" => self.initial_alpha = Some(parse::<f64>(key, value)?),
            "variant" => self.variant = Some(parse::<String>(key, value)?),
            "base_target_us" => self.base_target_us = Some(parse::<f64>(key, value)?),
            "hop_scale_us" => self.hop_scale_us = Some(parse::<f64>(key, value)?),
            "fs_range_us" => self.fs_range_us = Some(parse::<f64>(key, value)?),
            "fs_min_cwnd" => self.fs_min_cwnd = Some(parse::<f64>(key, value)?),
            "fs_max_cwnd" => self.fs_max_cwnd = Some(parse::<f64>(key, value)?),
            "endpoint_target_us" => self.endpoint_target_us = Some(parse::<f64>(key, value)?),
            "ai" => self.ai = Some(parse::<f64>(key, value)?),
            "max_mdf" => self.max_mdf = Some(parse::<f64>(key, value)?),
            "min_cwnd" => self.min_cwnd = Some(parse::<f64>(key, value)?),
            "max_cwnd" => self.max_cwnd = Some(parse::<f64>(key, value)?),
            "retx_reset_threshold" => self.retx_reset_threshold = Some(parse::<u32>(key, value)?),
            _ => {
                return Err(CcParamError::new(
                    key,
                    format!(
                        "not a congestion-control parameter (those of \"{}\": {})",
                        self.algorithm,
                        keys_of(&self.algorithm).join(", ")
                    ),
                ));
            }
        }
        Ok(())
    }
}

/// The parameters `algorithm` accepts (empty for an unknown one).
pub fn keys_of(algorithm: &str) -> &'static [&'static str] {
    CC_KEYS
        .iter()
        .find(|(name, _)| *name == algorithm)
        .map_or(&[], |(_, k)| k)
}

/// HPCC's controller settings from `h` for hosts of `line_bps`, T the
/// fabric's base RTT unless `h` sets it.
fn hpcc_config(h: &HpccSettings, line_bps: u64, fabric_rtt_ns: impl Fn() -> u64) -> HpccConfig {
    let rtt = h.base_rtt_ns.unwrap_or_else(fabric_rtt_ns).max(1);
    let mut c = HpccConfig::new(line_bps, rtt);
    c.eta = h.eta;
    c.max_stage = h.max_stage.min(u32::from(u16::MAX)) as u16;
    if let Some(ai) = h.rate_ai_bps {
        c.w_ai = ai as f64 / 8.0 * rtt as f64 / 1e9;
    }
    if let Some(m) = h.min_rate_bps {
        c.min_rate_bps = m;
    }
    c.fast_react = h.fast_react;
    c.opts = h.opts;
    c
}

/// What a run's controllers are built from: a [`CcConfig`] with what it
/// leaves to the network resolved.
#[derive(Debug, Clone, Copy)]
pub enum CcPlan {
    None,
    Dcqcn(DcqcnConfig),
    Hpcc(HpccConfig),
    HpccPint(HpccPintConfig),
    Timely(TimelyConfig),
    Dctcp(DctcpConfig),
    /// Swift's settings with everything but the per-flow hop count resolved.
    Swift(SwiftConfig),
}

impl CcPlan {
    /// `line_bps`: the hosts' line rate; `fabric_rtt_ns()`: the base RTT
    /// (asked only by the algorithms that need it: HPCC without
    /// `base_rtt_us`, Swift, DCTCP's window form); `mss`: a full packet's payload.
    pub fn new(cc: &CcConfig, line_bps: u64, fabric_rtt_ns: impl Fn() -> u64, mss: u64) -> CcPlan {
        let fabric_rtt_ns = || fabric_rtt_ns().max(1);
        let bdp_bytes = |rtt_ns: u64| line_bps / 8 * rtt_ns / 1_000_000_000;
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
            CcConfig::Hpcc(h) => CcPlan::Hpcc(hpcc_config(h, line_bps, fabric_rtt_ns)),
            CcConfig::HpccPint(p) => CcPlan::HpccPint(HpccPintConfig {
                hpcc: hpcc_config(&p.hpcc, line_bps, fabric_rtt_ns),
                // Checked when the settings were read; a base that is not
                // a code's falls back to ns-3's default.
                codec: PintCodec::new(p.log_base)
                    .unwrap_or_else(|| PintCodec::new(1.05).expect("1.05 is a base")),
                // ns-3: `(uint32_t)(65536 * p)`.
                sample_threshold: (65536.0 * p.prob.clamp(0.0, 1.0)) as u32,
                seed: 0,
            }),
        }
    }

    /// A controller for a sending QP on a host whose NIC runs at `line_bps`,
    /// on a path through `hops()` switches (asked only by Swift).
    pub fn controller(
        &self,
        line_bps: u64,
        hops: impl FnOnce() -> u32,
    ) -> Box<dyn CongestionControl> {
        match self {
            CcPlan::None => Box::new(NoCc),
            CcPlan::Dcqcn(d) => Box::new(Dcqcn::new(*d, line_bps)),
            CcPlan::Hpcc(h) => Box::new(Hpcc::new(*h, line_bps)),
            CcPlan::HpccPint(p) => Box::new(HpccPint::new(*p, line_bps)),
            CcPlan::Timely(t) => Box::new(Timely::new(*t, line_bps)),
            CcPlan::Dctcp(d) => Box::new(Dctcp::new(*d, line_bps)),
            CcPlan::Swift(s) => Box::new(Swift::new(SwiftConfig { hops: hops(), ..*s })),
        }
    }

    /// The plan with HPCC's (and HPCC-PINT's) T set to `rtt_ns`, its window
    /// step W_AI = R_AI · T scaled with it (the same rate step): the HPCC
    /// ns-3 simulator's `GLOBAL_T 0`, where each QP's T is its own pair's
    /// base RTT rather than the fabric's largest. Other algorithms keep
    /// no T and are returned as they are.
    pub fn with_base_rtt(&self, rtt_ns: u64) -> CcPlan {
        let scale = |c: &HpccConfig| HpccConfig {
            w_ai: c.w_ai * rtt_ns.max(1) as f64 / c.base_rtt_ns.max(1) as f64,
            base_rtt_ns: rtt_ns.max(1),
            ..*c
        };
        match self {
            CcPlan::Hpcc(c) => CcPlan::Hpcc(scale(c)),
            CcPlan::HpccPint(p) => CcPlan::HpccPint(HpccPintConfig {
                hpcc: scale(&p.hpcc),
                ..*p
            }),
            other => *other,
        }
    }

    /// Receivers must echo CE marks in ACKs (DCTCP).
    pub fn ecn_echo(&self) -> bool {
        matches!(self, CcPlan::Dctcp(_))
    }

    /// The HPCC base RTT in use, if HPCC.
    pub fn hpcc(&self) -> Option<HpccConfig> {
        match self {
            CcPlan::Hpcc(h) => Some(*h),
            _ => None,
        }
    }

    /// HPCC-PINT's settings, if HPCC-PINT: what switches need to code
    /// their ports' utilisation (the base, and T).
    pub fn pint(&self) -> Option<HpccPintConfig> {
        match self {
            CcPlan::HpccPint(p) => Some(*p),
            _ => None,
        }
    }

    /// [`controller`](Self::controller) with `seed` for the controller's
    /// own random draws (HPCC-PINT's ACK sampling): a run gives each QP
    /// its own, so that runs repeat and QPs do not sample in step.
    pub fn controller_seeded(
        &self,
        line_bps: u64,
        hops: impl FnOnce() -> u32,
        seed: u64,
    ) -> Box<dyn CongestionControl> {
        match self {
            CcPlan::HpccPint(p) => Box::new(HpccPint::new(HpccPintConfig { seed, ..*p }, line_bps)),
            _ => self.controller(line_bps, hops),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `GLOBAL_T 0`'s per-QP T: HPCC's and HPCC-PINT's T replaced, their
    /// window step scaled with it (the same rate step), everything else
    /// kept; other plans unchanged.
    #[test]
    fn with_base_rtt_moves_t_and_the_window_step_together() {
        let mut h = HpccConfig::new(100_000_000_000, 8_000);
        h.eta = 0.9;
        h.w_ai = 500.0;
        let CcPlan::Hpcc(c) = CcPlan::Hpcc(h).with_base_rtt(2_000) else {
            panic!()
        };
        assert_eq!(c.base_rtt_ns, 2_000);
        assert_eq!(c.w_ai, 125.0);
        assert_eq!(
            (c.eta, c.max_stage, c.min_rate_bps),
            (0.9, h.max_stage, h.min_rate_bps)
        );
        let p = HpccPintConfig {
            hpcc: h,
            codec: PintCodec::new(1.05).unwrap(),
            sample_threshold: 7,
            seed: 3,
        };
        let CcPlan::HpccPint(q) = CcPlan::HpccPint(p).with_base_rtt(16_000) else {
            panic!()
        };
        assert_eq!((q.hpcc.base_rtt_ns, q.hpcc.w_ai), (16_000, 1000.0));
        assert_eq!((q.sample_threshold, q.seed), (7, 3));
        let d = DcqcnConfig::default();
        assert!(matches!(CcPlan::Dcqcn(d).with_base_rtt(5), CcPlan::Dcqcn(x) if x == d));
    }

    #[test]
    fn every_key_of_every_algorithm_can_be_set_by_name() {
        for (alg, keys) in CC_KEYS {
            for k in *keys {
                let mut p = CcParams::new(alg);
                let v = match *k {
                    "preset" => "hpcc-ns3",
                    "variant" => "rate",
                    "clamp_target_rate" | "multi_rate" | "sample_feedback" => "true",
                    _ => "1",
                };
                p.set(k, v).unwrap_or_else(|e| panic!("{alg}.{k}: {e}"));
                assert_eq!(p.present(), vec![*k], "{alg}.{k}");
            }
        }
    }

    #[test]
    fn set_then_build_names_the_key_at_fault() {
        let mut p = CcParams::new("dcqcn");
        p.set("rp_timer_us", "300").unwrap();
        p.set("preset", "\"connectx\"").unwrap();
        let CcConfig::Dcqcn(d) = p.build().unwrap().cc else {
            panic!()
        };
        assert_eq!(d.rp_timer_ns, 300_000);
        let e = CcParams::new("dcqcn").set("nope", "1").unwrap_err();
        assert_eq!(e.key, "nope");
        let e = CcParams::new("dcqcn")
            .set("byte_counter", "-3")
            .unwrap_err();
        assert_eq!(e.key, "byte_counter");
        let mut p = CcParams::new("timely");
        p.set("t_low_us", "900").unwrap();
        assert_eq!(p.build().unwrap_err().key, "t_low_us");
        let mut p = CcParams::new("timely");
        p.set("segment_bytes", "4294967296").unwrap();
        assert_eq!(p.build().unwrap_err().key, "segment_bytes");
        assert_eq!(
            CcParams::new("timely")
                .set("segment_bytes", "-1")
                .unwrap_err()
                .key,
            "segment_bytes"
        );
        let mut p = CcParams::new("timely");
        p.set("segment_bytes", "0").unwrap();
        let CcConfig::Timely(t) = p.build().unwrap().cc else {
            panic!()
        };
        assert_eq!(t.segment_bytes, 0, "ns-3's once per round trip");
        let mut p = CcParams::new("timely");
        p.set("preset", "\"hpcc-ns3\"").unwrap();
        let CcConfig::Timely(t) = p.build().unwrap().cc else {
            panic!()
        };
        assert_eq!(t.segment_bytes, 0, "CC_MODE 7 updates once per round trip");
        // D_minRTT 0 is the measured minimum (as documented), not an error;
        // a negative one is.
        let mut p = CcParams::new("timely");
        p.set("min_rtt_us", "0").unwrap();
        let CcConfig::Timely(t) = p.build().unwrap().cc else {
            panic!()
        };
        assert_eq!(t.min_rtt_ns, 0);
        let mut p = CcParams::new("timely");
        p.set("min_rtt_us", "-2").unwrap();
        assert_eq!(p.build().unwrap_err().key, "min_rtt_us");
        let mut p = CcParams::new("swift");
        p.set("g", "0.5").unwrap();
        let e = p.build().unwrap_err();
        assert_eq!(e.key, "g");
        assert!(
            e.msg.contains("not a parameter of algorithm \"swift\""),
            "{e}"
        );
        assert_eq!(CcParams::new("bbr").build().unwrap_err().key, "algorithm");
    }

    #[test]
    fn rpg_byte_reset_is_bytes_up_to_the_15_bit_field() {
        let mut p = CcParams::new("dcqcn");
        p.set("rpg_byte_reset", "32767").unwrap();
        let CcConfig::Dcqcn(d) = p.build().unwrap().cc else {
            panic!()
        };
        assert_eq!(d.byte_counter, 32_767);
        let mut p = CcParams::new("dcqcn");
        p.set("rpg_byte_reset", "32768").unwrap();
        let e = p.build().unwrap_err();
        assert_eq!(e.key, "rpg_byte_reset");
        assert!(e.msg.contains("0..=32767"), "{e}");
        // The paper's name takes any byte count.
        let mut p = CcParams::new("dcqcn");
        p.set("byte_counter", "10000000").unwrap();
        assert!(p.build().is_ok());
    }
}
