//! Drop-in reading of the HPCC ns-3 simulator's experiments
//! (github.com/alibaba-edu/High-Precision-Congestion-Control,
//! `simulation/scratch/third.cc`): its key/value `config.txt`, its topology
//! and flow files, and its FCT and PFC output formats, so an experiment
//! written for it runs here unchanged.
//!
//! Formats (as third.cc reads and writes them):
//! * topology: `nodes switches links`, then the switch ids, then one line
//!   per link `src dst rate delay error_rate` (`100Gbps`, `1000ns`);
//! * flows: the count, then `src dst priority dport size start_seconds`;
//! * FCT output: `sip dip sport dport size start_ns fct_ns standalone_fct_ns`
//!   with IPs in hex as `0x0b000001 + (id/256)·0x10000 + (id%256)·0x100`;
//! * PFC output: `time_ns node node_type if_index type` (1 = paused,
//!   0 = resumed), logged by the device that receives the PFC frame;
//!   interface indices start at 1.
//! * queue monitor (`QLEN_MON_FILE`): see [`crate::qlen`].
//!
//! Outputs are written where the config names them, relative to the
//! working directory (third.cc `fopen`s them as given).

use crate::baseline::{HopCost, max_base_rtt_ps, ns3_standalone_fct_ns};
use crate::cc::{CcConfig, DctcpSettings, HpccSettings, PintSettings};
use crate::ecmp::EcmpMode;
use crate::ecn::EcnConfig;
use crate::event::{PS_PER_NS, PS_PER_S, PS_PER_US, Ps, ser_ps};
use crate::metrics::Report;
use crate::ns3_trace::{NodeId, node_ids};
use crate::packet::Ns3Int;
use crate::pfc::{Threshold, quanta_for};
use crate::qlen::QlenMonConfig;
use crate::sim::{EcnPolicy, LinkFailure, Ns3Window, SimConfig, SimError};
use crate::topology::{Link, Node, NodeKind, Topology};
use crate::workload::{FlowOp, FlowSpec};
use roce_rnic::{DcqcnConfig, Mtu, TimelyConfig};
use std::collections::BTreeMap;
use std::io::Write;
use std::path::{Path, PathBuf};

/// A problem with an HPCC experiment's files.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{file}:{line}: {field}: {msg}")]
pub struct HpccError {
    pub file: String,
    pub line: usize,
    pub field: String,
    pub msg: String,
}

/// Congestion-control modes of the HPCC simulator (`CC_MODE`).
pub fn cc_mode_name(m: u32) -> &'static str {
    match m {
        1 => "DCQCN",
        3 => "HPCC",
        7 => "TIMELY",
        8 => "DCTCP",
        10 => "HPCC-PINT",
        0 => "none",
        _ => "unknown",
    }
}

/// Keys that parameterise congestion control (DCQCN with CC_MODE 1, HPCC
/// with CC_MODE 3, TIMELY with 7, DCTCP with 8, HPCC-PINT with 10).
const CC_KEYS: &[&str] = &[
    "RATE_AI",
    "RATE_HAI",
    "MIN_RATE",
    "EWMA_GAIN",
    "RP_TIMER",
    "ALPHA_RESUME_INTERVAL",
    "RATE_DECREASE_INTERVAL",
    "FAST_RECOVERY_TIMES",
    "CLAMP_TARGET_RATE",
    "HAS_WIN",
    "GLOBAL_T",
    "VAR_WIN",
    "FAST_REACT",
    "U_TARGET",
    "MI_THRESH",
    "INT_MULTI",
    "RATE_BOUND",
    "DCTCP_RATE_AI",
    "MULTI_RATE",
    "SAMPLE_FEEDBACK",
    "PINT_LOG_BASE",
    "PINT_PROB",
];

/// Keys accepted without effect, and why.
const IGNORED: &[(&str, &str)] = &[
    ("DATA_RATE", "link rates come from the topology file"),
    ("LINK_DELAY", "link delays come from the topology file"),
    (
        "L2_CHUNK_SIZE",
        "the RNIC's go-back-N replaces the L2 chunk model",
    ),
    (
        "L2_BACK_TO_ZERO",
        "the RNIC's go-back-N replaces the L2 chunk model",
    ),
];

/// An experiment read from HPCC-format files.
#[derive(Debug, Clone)]
pub struct Experiment {
    pub cfg: SimConfig,
    pub topo: Topology,
    pub flows: Vec<FlowSpec>,
    /// Things the user should know (unknown keys, unimplemented modes).
    pub warnings: Vec<String>,
    pub cc_mode: u32,
    /// Original node id of each host (host index order).
    pub host_ids: Vec<u32>,
    pub flow_dports: Vec<u16>,
    /// The further NICs of multi-homed hosts (see [`read_topology_rates`]).
    pub nic_nodes: Vec<NicNode>,
    /// ns-3's packet trace (`TRACE_OUTPUT_FILE`; see [`crate::ns3_trace`]).
    pub trace: Option<TraceSpec>,
    /// FCT_OUTPUT_FILE, PFC_OUTPUT_FILE and (when given) QLEN_MON_FILE.
    pub outputs: Vec<OutputFile>,
    pub payload_size: u32,
}

/// ns-3's packet trace as the config asks for it: third.cc writes its
/// header (every device's rate, the largest BDP) to `TRACE_OUTPUT_FILE`
/// whenever the key is given, and with `ENABLE_TRACE 1` (its default) a
/// record per packet event at the nodes `TRACE_FILE` lists.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TraceSpec {
    pub output: OutputFile,
    pub enabled: bool,
    /// Node ids, as the file gives them.
    pub nodes: Vec<u32>,
    /// `SimSetting::win`: third.cc's `maxBdp`, bytes.
    pub win: u32,
}

/// An output file the config names. Its path is used as given: a relative
/// one is relative to the working directory, as third.cc's `fopen` takes
/// it (the input files alone are also looked up next to the config).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OutputFile {
    /// `FCT_OUTPUT_FILE`, `PFC_OUTPUT_FILE` or `QLEN_MON_FILE`.
    pub key: &'static str,
    pub path: PathBuf,
    /// Where the config names it (0: third.cc's default name).
    pub config: String,
    pub line: usize,
}

impl OutputFile {
    fn error(&self, what: &str, e: &std::io::Error) -> HpccError {
        HpccError {
            file: self.config.clone(),
            line: self.line,
            field: self.key.to_string(),
            msg: format!("cannot {what} {}: {e}", self.path.display()),
        }
    }

    /// Creates the file (and any missing folders), empty: what third.cc's
    /// `fopen(…, "w")` does before its run, so a bad path fails before the
    /// simulation rather than after it.
    fn create(&self) -> Result<std::fs::File, HpccError> {
        if let Some(dir) = self.path.parent().filter(|d| !d.as_os_str().is_empty()) {
            std::fs::create_dir_all(dir).map_err(|e| self.error("create the folder of", &e))?;
        }
        std::fs::File::create(&self.path).map_err(|e| self.error("create", &e))
    }
}

fn parse_rate(s: &str) -> Option<u64> {
    let lower = s.to_ascii_lowercase();
    let (num, mult) = [
        ("gbps", 1e9),
        ("gb/s", 1e9),
        ("mbps", 1e6),
        ("mb/s", 1e6),
        ("kbps", 1e3),
        ("kb/s", 1e3),
        ("bps", 1.0),
        ("b/s", 1.0),
    ]
    .iter()
    .find_map(|(u, m)| lower.strip_suffix(u).map(|n| (n.to_string(), *m)))?;
    let v: f64 = num.trim().parse().ok()?;
    (v > 0.0).then(|| (v * mult).round() as u64)
}

fn parse_time_ps(s: &str) -> Option<Ps> {
    let (num, mult) = [
        ("ps", 1.0),
        ("ns", 1e3),
        ("us", 1e6),
        ("ms", 1e9),
        ("s", 1e12),
    ]
    .iter()
    .find_map(|(u, m)| s.strip_suffix(u).map(|n| (n, *m)))?;
    let v: f64 = num.trim().parse().ok()?;
    (v >= 0.0).then(|| (v * mult).round() as Ps)
}

/// Finds an input file the way users run third.cc: relative to the working
/// directory, else to the config's directory or its parent.
fn find(config_dir: &Path, p: &str) -> PathBuf {
    let direct = PathBuf::from(p);
    if direct.is_absolute() || direct.exists() {
        return direct;
    }
    for base in [Some(config_dir), config_dir.parent()]
        .into_iter()
        .flatten()
    {
        let c = base.join(p);
        if c.exists() {
            return c;
        }
    }
    direct
}

impl Experiment {
    /// Reads `config` and the files it names.
    pub fn load(config: &Path, seed: Option<u64>) -> Result<Experiment, HpccError> {
        let cfile = config.display().to_string();
        let text = std::fs::read_to_string(config).map_err(|e| HpccError {
            file: cfile.clone(),
            line: 0,
            field: "(file)".into(),
            msg: format!("cannot read: {e}"),
        })?;
        let dir = config.parent().unwrap_or(Path::new("."));
        let mut kv: BTreeMap<String, (usize, Vec<String>)> = BTreeMap::new();
        let mut warnings = Vec::new();
        for (i, raw) in text.lines().enumerate() {
            let l = raw.split('#').next().unwrap_or("").trim();
            if l.is_empty() {
                continue;
            }
            let mut it = l.split_whitespace();
            let key = it.next().unwrap_or("").to_string();
            let vals: Vec<String> = it.map(str::to_string).collect();
            kv.insert(key, (i + 1, vals));
        }
        let err = |line: usize, field: &str, msg: String| HpccError {
            file: cfile.clone(),
            line,
            field: field.to_string(),
            msg,
        };
        let one = |key: &str| -> Option<(usize, String)> {
            kv.get(key)
                .and_then(|(l, v)| v.first().map(|s| (*l, s.clone())))
        };
        let num = |key: &str| -> Result<Option<f64>, HpccError> {
            match one(key) {
                None => Ok(None),
                Some((l, v)) => v
                    .parse::<f64>()
                    .map(Some)
                    .map_err(|_| err(l, key, format!("expected a number, got `{v}`"))),
            }
        };
        let mut cfg = SimConfig {
            seed: seed.unwrap_or(1),
            ..SimConfig::default()
        };
        let mut used: Vec<&str> = Vec::new();
        // Congestion control.
        // third.cc's default is 1 (DCQCN). An unknown mode is an error
        // although ns-3 runs it: rdma-hw.cc's rate updates all test
        // `m_cc_mode` against 1, 3, 7, 8 and 10, so any other number there
        // silently sends at line rate — never what a config asking for a
        // controller meant. 0 is the conventional "no congestion control"
        // (the `_none` configs of scenarios/hpcc/) and runs as such.
        let cc_mode = match one("CC_MODE") {
            None => 1,
            Some((l, v)) => match v.parse::<u32>() {
                Ok(m @ (0 | 1 | 3 | 7 | 8 | 10)) => m,
                _ => {
                    return Err(err(
                        l,
                        "CC_MODE",
                        format!(
                            "unknown congestion-control mode `{v}`: the HPCC ns-3 simulator has 1 (DCQCN), 3 (HPCC), 7 (TIMELY), 8 (DCTCP) and 10 (HPCC-PINT), all implemented here, and 0 runs with no congestion control"
                        ),
                    ));
                }
            },
        };
        used.push("CC_MODE");
        let rate = |key: &str| -> Result<Option<u64>, HpccError> {
            match one(key) {
                None => Ok(None),
                Some((l, v)) => parse_rate(&v).map(Some).ok_or_else(|| {
                    err(l, key, format!("expected a rate such as 50Mb/s, got `{v}`"))
                }),
            }
        };
        // third.cc's intervals are in microseconds.
        let us_ns = |key: &str| -> Result<Option<u64>, HpccError> {
            Ok(num(key)?.map(|us| (us * 1e3).round() as u64))
        };
        // A switch: any number but 0 is on, as third.cc reads them into
        // integers and then a bool.
        let flag = |key: &str, default: bool| -> Result<bool, HpccError> {
            Ok(num(key)?.map_or(default, |v| v != 0.0))
        };
        // A gain is a fraction: 0 < g ≤ 1.
        let gain = |key: &str| -> Result<Option<f64>, HpccError> {
            match num(key)? {
                Some(g) if !(g > 0.0 && g <= 1.0) => {
                    let l = kv.get(key).map_or(0, |(l, _)| *l);
                    Err(err(l, key, format!("expected a gain 0 < g ≤ 1, got {g}")))
                }
                g => Ok(g),
            }
        };
        // ns-3 bounds every mode's bytes in flight by the fabric's largest
        // BDP with HAS_WIN 1 (its default), scaled by rate / line rate with
        // VAR_WIN 1: HPCC's own window is that; the others get it as a
        // bound over their rate (`BdpWindow`), sized once the topology is
        // read (below).
        let has_win = num("HAS_WIN")?.unwrap_or(1.0) != 0.0;
        let var_win = num("VAR_WIN")?.unwrap_or(0.0) != 0.0;
        if has_win && cc_mode != 3 && cc_mode != 10 {
            cfg.ns3_window = Some(Ns3Window { bytes: 0, var_win });
        }
        // HPCC's knobs, which HPCC-PINT reads the same way: η, maxStage,
        // window steps of RATE_AI × T (third.cc's m_rai in rate terms; T
        // the largest base RTT, GLOBAL_T 1) and the rate floor.
        let hpcc_knobs = || -> Result<HpccSettings, HpccError> {
            let mut h = HpccSettings::default();
            if let Some(u) = num("U_TARGET")? {
                h.eta = u;
            }
            if let Some(m) = num("MI_THRESH")? {
                h.max_stage = m as u32;
            }
            h.rate_ai_bps = Some(rate("RATE_AI")?.unwrap_or(50_000_000));
            h.min_rate_bps = rate("MIN_RATE")?;
            // The window and pacing switches, third.cc's defaults where
            // the config is silent: a window (HAS_WIN 1) of the line rate's
            // size (VAR_WIN 0), paced at the rate (RATE_BOUND 1).
            h.opts.windowed = has_win;
            h.opts.var_window = var_win;
            h.opts.paced = flag("RATE_BOUND", true)?;
            Ok(h)
        };
        match cc_mode {
            1 => {
                // ns-3's DCQCN (the Mellanox model): timer-driven increase,
                // no byte counter; its defaults where the config is silent.
                let mut d = DcqcnConfig::hpcc_ns3();
                if let Some(g) = gain("EWMA_GAIN")? {
                    d.g = g;
                }
                d.rate_ai_bps = rate("RATE_AI")?.unwrap_or(d.rate_ai_bps);
                d.rate_hai_bps = rate("RATE_HAI")?.unwrap_or(d.rate_hai_bps);
                d.min_rate_bps = rate("MIN_RATE")?.unwrap_or(d.min_rate_bps);
                d.rp_timer_ns = us_ns("RP_TIMER")?.unwrap_or(d.rp_timer_ns);
                d.alpha_resume_interval_ns =
                    us_ns("ALPHA_RESUME_INTERVAL")?.unwrap_or(d.alpha_resume_interval_ns);
                d.rate_decrease_interval_ns =
                    us_ns("RATE_DECREASE_INTERVAL")?.unwrap_or(d.rate_decrease_interval_ns);
                if let Some(f) = num("FAST_RECOVERY_TIMES")? {
                    d.fast_recovery_times = f as u32;
                }
                if let Some(c) = num("CLAMP_TARGET_RATE")? {
                    d.clamp_target_rate = c != 0.0;
                }
                // ns-3 flags the ACK of every CE-marked packet as a CNP and
                // the reaction point samples those flags once per
                // alpha-update and rate-decrease interval: every CE-marked
                // packet gets a CNP here too, so no interval that saw a mark
                // goes without one (pacing them at the 1 µs alpha interval
                // misses some intervals and lets alpha decay).
                cfg.rnic.cnp_interval_ns = 0;
                cfg.cc = CcConfig::Dcqcn(d);
            }
            7 => {
                // ns-3's TIMELY: its rdma-hw.cc defaults (α 0.875, β 0.8,
                // T_low 50 µs, T_high 500 µs, D_minRTT 20 µs — no config
                // keys reach them), RATE_AI / RATE_HAI steps, MIN_RATE. The
                // RTT comes from a send timestamp echoed in each ACK; here
                // from the RNIC's per-packet send times, with the 8 bytes
                // of ns-3's timestamp field (its INT header in TS mode)
                // on the wire in every data packet and ACK.
                let mut t = TimelyConfig::hpcc_ns3();
                t.delta_bps = rate("RATE_AI")?.unwrap_or(t.delta_bps);
                t.hai_delta_bps = rate("RATE_HAI")?.unwrap_or(t.hai_delta_bps);
                t.min_rate_bps = rate("MIN_RATE")?.unwrap_or(t.min_rate_bps);
                cfg.cc = CcConfig::Timely(t);
                cfg.int_wire_bytes = 8;
            }
            8 => {
                // ns-3's DCTCP: receivers flag the ACK of each CE-marked
                // packet; α from the flagged fraction once per window
                // (EWMA_GAIN), a cut of α/2 at most once per window, and
                // DCTCP_RATE_AI per window otherwise; MIN_RATE floor.
                let mut d = DctcpSettings::default();
                if let Some(g) = gain("EWMA_GAIN")? {
                    d.g = g;
                }
                d.rate_ai_bps = rate("DCTCP_RATE_AI")?.unwrap_or(d.rate_ai_bps);
                d.min_rate_bps = rate("MIN_RATE")?.unwrap_or(d.min_rate_bps);
                cfg.cc = CcConfig::Dctcp(d);
            }
            3 => {
                let mut h = hpcc_knobs()?;
                h.fast_react = flag("FAST_REACT", true)?;
                if !has_win {
                    // rdma-hw.cc's HPCC update divides each hop's queue by
                    // the QP's window, m_win, which HAS_WIN 0 makes 0.
                    warnings.push(
                        "HAS_WIN 0 with CC_MODE 3: ns-3's HPCC update divides each hop's queue by the window, 0 there (a queued hop's load is infinite, an empty one's not a number), so its rates there are not meaningful; here the load keeps the base-RTT BDP in that term and only the window's bound is off".into(),
                    );
                }
                // third.cc's defaults: a rate per hop, every hop read.
                h.opts.multi_rate = flag("MULTI_RATE", true)?;
                h.opts.sample_feedback = flag("SAMPLE_FEEDBACK", false)?;
                // The INT record's units (`IntHop::multi`); 0 would divide
                // by zero there.
                let multi = match num("INT_MULTI")? {
                    None => 1,
                    Some(m) if m >= 1.0 && m.fract() == 0.0 && m <= f64::from(u32::MAX) => m as u32,
                    Some(m) => {
                        let l = kv.get("INT_MULTI").map_or(0, |(l, _)| *l);
                        return Err(err(
                            l,
                            "INT_MULTI",
                            format!("expected a whole number ≥ 1, got {m}"),
                        ));
                    }
                };
                cfg.ns3_int = Some(Ns3Int { multi });
                cfg.cc = CcConfig::Hpcc(h);
                cfg.int = true;
                // ns-3's INT field has room for 5 hops (5 × 8 bytes + a
                // 2-byte hop count) in every data packet and every ACK.
                cfg.int_wire_bytes = 42;
            }
            10 => {
                // HPCC-PINT (rdma-hw.cc `UpdateRateHpPint`, switch-node.cc,
                // pint.cc): HPCC's rate step from one utilisation code
                // per packet. It reads U_TARGET, MI_THRESH, RATE_AI and
                // MIN_RATE as HPCC does, and always reacts to a sampled
                // ACK (FAST_REACT is not read).
                let mut p = PintSettings {
                    hpcc: hpcc_knobs()?,
                    ..PintSettings::default()
                };
                // third.cc's defaults: base 1.05, every ACK read.
                if let Some(b) = num("PINT_LOG_BASE")? {
                    if roce_rnic::cc::PintCodec::new(b).is_none() {
                        let l = kv.get("PINT_LOG_BASE").map_or(0, |(l, _)| *l);
                        return Err(err(
                            l,
                            "PINT_LOG_BASE",
                            format!("expected a base > 1, got {b}"),
                        ));
                    }
                    p.log_base = b;
                }
                if let Some(q) = num("PINT_PROB")? {
                    if !(q > 0.0 && q <= 1.0) {
                        let l = kv.get("PINT_PROB").map_or(0, |(l, _)| *l);
                        return Err(err(
                            l,
                            "PINT_PROB",
                            format!("expected a probability 0 < p ≤ 1, got {q}"),
                        ));
                    }
                    p.prob = q;
                }
                cfg.cc = CcConfig::HpccPint(p);
                // ns-3's INT header in PINT mode: the code's 2-byte union,
                // in every data packet and every ACK.
                cfg.int_wire_bytes = 2;
            }
            // CC_MODE 0 (checked above: nothing else reaches here): no
            // congestion control; PFC and ECN marking still apply.
            _ => {}
        }
        // ns-3 paces every mode at its rate unless RATE_BOUND is 0; only
        // HPCC's and HPCC-PINT's controllers here can leave the rate
        // unpaced.
        if cc_mode != 3 && cc_mode != 10 && !flag("RATE_BOUND", true)? {
            warnings.push(format!(
                "RATE_BOUND 0 is not modelled with CC_MODE {cc_mode}: the RNIC paces at the rate; running as RATE_BOUND 1"
            ));
        }
        for k in CC_KEYS {
            used.push(k);
        }
        for (k, why) in IGNORED {
            if kv.contains_key(*k) {
                warnings.push(format!("{k} is accepted but has no effect: {why}"));
            }
            used.push(k);
        }
        // Switches.
        let qcn = num("ENABLE_QCN")?.unwrap_or(1.0) != 0.0;
        used.push("ENABLE_QCN");
        // third.cc passes USE_DYNAMIC_PFC_THRESHOLD to its NICs' devices,
        // which never read it: its switch MMU always uses the dynamic
        // threshold.
        if num("USE_DYNAMIC_PFC_THRESHOLD")?.unwrap_or(1.0) == 0.0 {
            warnings.push(
                "USE_DYNAMIC_PFC_THRESHOLD 0 has no effect in ns-3 (its switch MMU always uses the dynamic threshold); it is ignored here too".into(),
            );
        }
        used.push("USE_DYNAMIC_PFC_THRESHOLD");
        if let Some(mb) = num("BUFFER_SIZE")? {
            cfg.buffer.size_bytes = (mb * 1024.0 * 1024.0) as u64;
        }
        used.push("BUFFER_SIZE");
        // The switch MMU of switch-mmu.cc and third.cc: a dynamic threshold
        // of free >> 3 (alpha 1/8) on ports at the NIC's speed, one shift
        // less per doubling of speed above it (1/2 on a 400G port over
        // 100G NICs); 4 kB reserved per ingress queue, taken from the pool
        // once per port; headroom 3 × rate × delay per port; XON 3 kB
        // under the threshold.
        cfg.buffer.threshold = Threshold::Dynamic { alpha: 0.125 };
        cfg.buffer.reserve_bytes = 4 * 1024;
        cfg.buffer.reserve_once_per_port = true;
        cfg.buffer.headroom_bytes = None;
        cfg.buffer.headroom_link_bdps = Some(3);
        cfg.buffer.xon_offset_bytes = 3 * 1024;
        // Switches queue ACKs (and the CNPs standing in for ns-3's ACK
        // flag) with the data (switch-node.cc: AckHighPrio is never set,
        // and an ACK carries its flow's priority group).
        cfg.switch_control_prio = Some(cfg.data_prio);
        // ns-3 sends PFC frames from the port's queue 0: after the frame
        // on the wire.
        cfg.pfc_after_frame = true;
        let payload = num("PACKET_PAYLOAD_SIZE")?.unwrap_or(1000.0) as u32;
        // `GLOBAL_T` other than 1: each QP's window (`HAS_WIN`) and HPCC's T
        // are its own pair's BDP and base RTT (third.cc passes `pairBdp`
        // and `pairRtt` for the flow instead of `maxBdp` and `maxRtt`).
        if num("GLOBAL_T")?.is_some_and(|g| g != 1.0) {
            cfg.ns3_pair_t = Some(payload);
        }
        used.push("PACKET_PAYLOAD_SIZE");
        cfg.mtu = Mtu::from_bytes(payload).unwrap_or_else(|| {
            let m = [256, 512, 1024, 2048, 4096]
                .into_iter()
                .min_by_key(|m| (i64::from(*m) - i64::from(payload)).abs())
                .and_then(Mtu::from_bytes)
                .unwrap_or(Mtu::Mtu1024);
            warnings.push(format!(
                "PACKET_PAYLOAD_SIZE {payload} is not an InfiniBand MTU; the RNIC segments at {} bytes",
                m.bytes()
            ));
            m
        });
        // ns-3's receiver compares L2_ACK_INTERVAL with the bytes received
        // so far and ACKs every packet once past it, so after the first
        // L2_ACK_INTERVAL bytes every data packet is ACKed (0 means no ACKs,
        // and its flows never finish).
        match num("L2_ACK_INTERVAL")? {
            Some(0.0) => warnings.push(
                "L2_ACK_INTERVAL 0 turns ACKs off in ns-3 (its flows never finish); every packet is ACKed here".into(),
            ),
            Some(n) if n > f64::from(payload) => warnings.push(format!(
                "L2_ACK_INTERVAL {n} (bytes in ns-3): packets before the first {n} bytes go un-ACKed there; every packet is ACKed here"
            )),
            _ => {}
        }
        cfg.rnic.ack_req_every = 1;
        used.push("L2_ACK_INTERVAL");
        // A host's ACKs (and NAKs, CNPs) leave from a queue of their own,
        // ahead of any QP's data (qbb-net-device.cc's GetNextQindex), and
        // switches, whose AckHighPrio stays 0, queue them with the data.
        // third.cc's ack_high_prio (default 0) only says whether a pause of
        // the data's priority also holds that queue (ack_q_idx 3) or not
        // (ack_q_idx 0).
        let ack_high = num("ACK_HIGH_PRIO")?.unwrap_or(0.0);
        cfg.control_prio = 7;
        cfg.host_control_paused_with = (ack_high == 0.0).then_some(cfg.data_prio);
        used.push("ACK_HIGH_PRIO");
        // third.cc hands PAUSE_TIME (µs) to QbbNetDevice::PauseTime, a
        // whole number of µs, and every XOFF carries that same time on
        // every link, whatever its speed; its receiver then holds the pause
        // until the XON. Here an XOFF carries the time in the quanta of the
        // link it is sent on (512 bit times of that link), and the switch
        // refreshes it halfway while XOFF holds, so it too lasts until the
        // XON. Absent, XOFF carries the most quanta a frame holds.
        if let Some(us) = num("PAUSE_TIME")? {
            let line = kv.get("PAUSE_TIME").map_or(0, |x| x.0);
            if us.is_nan() || us < 1.0 {
                return Err(err(
                    line,
                    "PAUSE_TIME",
                    format!(
                        "{us} µs: ns-3 keeps whole µs, and an XOFF carrying 0 reads as an XON there (PFC never pauses); give at least 1"
                    ),
                ));
            }
            cfg.buffer.pause_time_ps = Some((us.trunc() as u64).saturating_mul(PS_PER_US));
        }
        used.push("PAUSE_TIME");
        let stop_s = num("SIMULATOR_STOP_TIME")?;
        if let Some(s) = stop_s {
            cfg.stop = Some((s * PS_PER_S as f64) as Ps);
        }
        used.push("SIMULATOR_STOP_TIME");
        // `LINK_DOWN t a b`: the link between nodes a and b goes down at
        // 2 s + t µs (third.cc schedules `TakeDownLink` then, and only for
        // t > 0); the nodes are checked against the topology below.
        let mut link_down = None;
        if let Some((l, v)) = kv.get("LINK_DOWN") {
            let bad = |why: &str| err(*l, "LINK_DOWN", why.into());
            let f: Vec<u64> = (v.iter().take(3).map(|x| x.parse::<u64>()))
                .collect::<Result<_, _>>()
                .map_err(|_| bad("expected `time_us node_a node_b` (whole numbers)"))?;
            match f[..] {
                [0, ..] => {}
                [t, a, b] => {
                    let (a, b) = (u32::try_from(a), u32::try_from(b));
                    let (Ok(a), Ok(b)) = (a, b) else {
                        return Err(bad("node ids must fit 32 bits"));
                    };
                    let at = (2 * PS_PER_S).saturating_add(t.saturating_mul(PS_PER_US));
                    link_down = Some((*l, LinkFailure { at, a, b }));
                }
                _ => return Err(bad("expected `time_us node_a node_b` (whole numbers)")),
            }
        }
        used.push("LINK_DOWN");
        // Every link's frames are lost at this rate where the topology
        // file gives the link none of its own (third.cc: one error model
        // on every device, a link's own where its fifth column is > 0).
        let error_rate = match num("ERROR_RATE_PER_LINK")? {
            Some(r) if !(0.0..=1.0).contains(&r) => {
                let l = kv.get("ERROR_RATE_PER_LINK").map_or(0, |x| x.0);
                return Err(err(
                    l,
                    "ERROR_RATE_PER_LINK",
                    format!("a loss rate must be within 0..=1, got {r}"),
                ));
            }
            r => r.unwrap_or(0.0),
        };
        used.push("ERROR_RATE_PER_LINK");
        // K/P maps.
        let map = |key: &str| -> Result<BTreeMap<u64, f64>, HpccError> {
            let mut m = BTreeMap::new();
            if let Some((l, v)) = kv.get(key) {
                let n: usize = v.first().and_then(|x| x.parse().ok()).ok_or_else(|| {
                    err(*l, key, "expected a count of (rate, value) pairs".into())
                })?;
                if v.len() != 1 + 2 * n {
                    return Err(err(*l, key, format!("expected {n} (rate, value) pairs")));
                }
                for i in 0..n {
                    let r: u64 = v[1 + 2 * i]
                        .parse()
                        .map_err(|_| err(*l, key, format!("bad rate `{}`", v[1 + 2 * i])))?;
                    let x: f64 = v[2 + 2 * i]
                        .parse()
                        .map_err(|_| err(*l, key, format!("bad value `{}`", v[2 + 2 * i])))?;
                    m.insert(r, x);
                }
            }
            Ok(m)
        };
        let (kmin, kmax, pmax) = (map("KMIN_MAP")?, map("KMAX_MAP")?, map("PMAX_MAP")?);
        used.extend(["KMIN_MAP", "KMAX_MAP", "PMAX_MAP"]);
        // Files.
        let path_of = |key: &str| -> Result<(usize, String), HpccError> {
            one(key).ok_or_else(|| err(0, key, "required".into()))
        };
        let (_, topo_name) = path_of("TOPOLOGY_FILE")?;
        let (_, flow_name) = path_of("FLOW_FILE")?;
        used.extend([
            "TOPOLOGY_FILE",
            "FLOW_FILE",
            "FCT_OUTPUT_FILE",
            "PFC_OUTPUT_FILE",
            "QLEN_MON_FILE",
            "QLEN_MON_START",
            "QLEN_MON_END",
        ]);
        // third.cc's default names; no QLEN_MON_FILE, no queue monitor file.
        let output = |key: &'static str, default: Option<&str>| {
            let (line, path) = match one(key) {
                Some((l, p)) => (l, p),
                None => (0, default?.to_string()),
            };
            Some(OutputFile {
                key,
                path: PathBuf::from(path),
                config: cfile.clone(),
                line,
            })
        };
        let mut outputs: Vec<OutputFile> = Vec::new();
        for o in [
            output("FCT_OUTPUT_FILE", Some("fct.txt")),
            output("PFC_OUTPUT_FILE", Some("pfc.txt")),
            output("QLEN_MON_FILE", None),
        ]
        .into_iter()
        .flatten()
        {
            match outputs.iter().find(|p| p.path == o.path) {
                Some(p) => warnings.push(format!(
                    "{} and {} name the same file {}: only {} is written",
                    p.key,
                    o.key,
                    o.path.display(),
                    p.key
                )),
                None => outputs.push(o),
            }
        }
        // The packet trace: its file only where the config names one
        // (third.cc opens an empty name and fails), its records unless
        // ENABLE_TRACE says 0 (third.cc's default is 1).
        used.extend(["TRACE_FILE", "TRACE_OUTPUT_FILE", "ENABLE_TRACE"]);
        let trace_output = one("TRACE_OUTPUT_FILE").map(|(line, path)| OutputFile {
            key: "TRACE_OUTPUT_FILE",
            path: PathBuf::from(path),
            config: cfile.clone(),
            line,
        });
        let trace_enabled = num("ENABLE_TRACE")?.is_none_or(|v| v != 0.0);
        if let Some(o) = &trace_output
            && let Some(same) = outputs.iter().find(|p| p.path == o.path)
        {
            return Err(err(
                o.line,
                "TRACE_OUTPUT_FILE",
                format!("{} is also {}", o.path.display(), same.key),
            ));
        }
        if outputs.iter().any(|o| o.key == "QLEN_MON_FILE") {
            // Nanoseconds, third.cc's defaults; sampling ends with the run
            // (SIMULATOR_STOP_TIME, third.cc's default 3.01 s).
            let ns = |key: &str, default: u64| -> Result<Ps, HpccError> {
                Ok(num(key)?.map_or(default, |v| v.max(0.0) as u64) * PS_PER_NS)
            };
            cfg.qlen_monitor = Some(QlenMonConfig {
                start: ns("QLEN_MON_START", 2_000_000_000)?,
                end: ns("QLEN_MON_END", 2_100_000_000)?,
                stop: (stop_s.unwrap_or(3.01) * PS_PER_S as f64) as Ps,
            });
        }
        // An unknown key is a warning, not an error, because ns-3 ignores
        // it too: third.cc's reader compares each token it reads as a key
        // with the names it knows and has no `else`, so an unknown key's
        // value is read as the next key, matches nothing either, and the
        // run goes on with the default the misspelt key meant to change
        // (`U_TARGETT 0.9` runs with U_TARGET 0.95 there). The warning says
        // which known key a near miss probably meant.
        for (k, (l, _)) in &kv {
            if !used.contains(&k.as_str()) {
                let hint = did_you_mean(k, &used)
                    .map(|m| {
                        format!("; did you mean {m}? ns-3 ignores it too, so {m} keeps its default")
                    })
                    .unwrap_or_default();
                warnings.push(format!("{cfile}:{l}: unknown key {k} (ignored{hint})"));
            }
        }
        let (topo, host_ids, link_rates, nic_nodes) = read_topology_rates(&find(dir, &topo_name))?;
        let trace_nodes = match (&trace_output, trace_enabled) {
            (Some(_), true) => {
                let Some((_, name)) = one("TRACE_FILE") else {
                    return Err(err(
                        kv.get("TRACE_OUTPUT_FILE").map_or(0, |x| x.0),
                        "TRACE_FILE",
                        "required with TRACE_OUTPUT_FILE unless ENABLE_TRACE is 0 (it lists the \
                         nodes to trace)"
                            .into(),
                    ));
                };
                read_trace_nodes(&find(dir, &name), topo.nodes.len() - nic_nodes.len())?
            }
            _ => Vec::new(),
        };
        if error_rate > 0.0 || link_rates.iter().any(|&r| r > 0.0) {
            cfg.link_loss = (link_rates.iter())
                .map(|&r| if r > 0.0 { r } else { error_rate })
                .collect();
        }
        if let Some((l, f)) = link_down {
            let why = match f.port_in(&topo) {
                Ok(_) => None,
                Err(SimError::HostLinkDown { host, .. }) => Some(format!(
                    "node {host} is a host: ns-3 then finds no route for the host's QPs and stops \
                     on an assertion (RdmaHw::GetNicIdxOfQp); take down a link between two switches"
                )),
                Err(_) => Some(format!(
                    "no link joins nodes {} and {} in {topo_name}",
                    f.a, f.b
                )),
            };
            if let Some(why) = why {
                return Err(err(l, "LINK_DOWN", why));
            }
            if topo.multi_homed {
                warnings.push(format!(
                    "{cfile}:{l}: LINK_DOWN with multi-homed hosts: each QP stays on the NIC \
                     picked when its flow starts; ns-3 picks a receiver's NIC again for every \
                     ACK from the routes after the failure, so where the failure leaves one NIC \
                     of a host farther from a peer, its ACKs may leave by another NIC there"
                ));
            }
            cfg.link_failures.push(f);
        }
        if let Some(ps) = cfg.buffer.pause_time_ps {
            warnings.extend(pause_time_warnings(&topo, ps));
        }
        if cfg.ns3_int.is_some() {
            let mut odd: Vec<u64> = topo
                .links
                .iter()
                .map(|l| l.rate_bps)
                .filter(|r| !Ns3Int::LINE_RATES.contains(r))
                .collect();
            odd.sort_unstable();
            odd.dedup();
            if !odd.is_empty() {
                let list: Vec<String> = odd.iter().map(|r| format!("{} b/s", r)).collect();
                warnings.push(format!(
                    "links at {}: ns-3's INT record codes only 25, 50, 100, 200 and 400 Gb/s and reads any other rate as 25 Gb/s in HPCC's update; so does this run",
                    list.join(", ")
                ));
            }
        }
        // third.cc's `get_nic_rate`: the rate of the first host's link.
        cfg.buffer.alpha_speed_ref_bps = host_ids.first().and_then(|&h| {
            topo.links
                .iter()
                .find(|l| l.a == h as usize || l.b == h as usize)
                .map(|l| l.rate_bps)
        });
        // ns-3's links carry frames back to back: no preamble, SFD or
        // inter-frame gap (the point-to-point device's InterframeGap is 0).
        cfg.ifg_bytes = 0;
        // HPCC's T (GLOBAL_T 1) and window as third.cc computes them: the
        // largest pair RTT, with PACKET_PAYLOAD_SIZE (not a whole frame)
        // serialized per hop.
        let hpcc = match &mut cfg.cc {
            CcConfig::Hpcc(h) => Some(h),
            CcConfig::HpccPint(p) => Some(&mut p.hpcc),
            _ => None,
        };
        // Over every pair of hosts, so worked out once (HPCC's T, the
        // window, the trace's header may each want it).
        let max_rtt = std::cell::OnceCell::new();
        let max_rtt_ns = || {
            *max_rtt.get_or_init(|| {
                (max_base_rtt_ps(&topo, &topo.routes(), HopCost::Ns3 { payload }) / PS_PER_NS)
                    .max(1)
            })
        };
        if let Some(h) = hpcc
            && h.base_rtt_ns.is_none()
        {
            h.base_rtt_ns = Some(max_rtt_ns());
        }
        // third.cc's maxBdp: the largest pair RTT at the hosts' rate.
        if let Some(w) = &mut cfg.ns3_window {
            let line = cfg.buffer.alpha_speed_ref_bps.unwrap_or(100_000_000_000);
            w.bytes = crate::baseline::bdp_bytes(max_rtt_ns(), line);
        }
        if qcn {
            let mut rates: Vec<u64> = topo.links.iter().map(|l| l.rate_bps).collect();
            rates.sort_unstable();
            rates.dedup();
            let line = |k: &str| kv.get(k).map_or(0, |x| x.0);
            let mut by = Vec::new();
            for r in rates {
                let (a, b, c) = (kmin.get(&r), kmax.get(&r), pmax.get(&r));
                let missing = [
                    ("KMIN_MAP", a.is_none()),
                    ("KMAX_MAP", b.is_none()),
                    ("PMAX_MAP", c.is_none()),
                ]
                .into_iter()
                .find(|x| x.1);
                if let Some((k, _)) = missing {
                    return Err(err(
                        line(k),
                        k,
                        format!(
                            "no entry for link speed {r} b/s (the topology has links of that speed)"
                        ),
                    ));
                }
                if let (Some(a), Some(b), Some(c)) = (a, b, c) {
                    by.push((
                        r,
                        EcnConfig {
                            kmin_bytes: (*a * 1000.0) as u64,
                            kmax_bytes: (*b * 1000.0) as u64,
                            pmax: *c,
                        },
                    ));
                }
            }
            cfg.ecn = EcnPolicy::BySpeed(by);
        }
        let trace = trace_output.map(|output| TraceSpec {
            output,
            enabled: trace_enabled,
            nodes: trace_nodes,
            win: cfg.ns3_window.map_or_else(
                || {
                    let line = cfg.buffer.alpha_speed_ref_bps.unwrap_or(100_000_000_000);
                    crate::baseline::bdp_bytes(max_rtt_ns(), line)
                },
                |w| w.bytes,
            ) as u32,
        });
        let (mut flows, dports) = read_flows(&find(dir, &flow_name), &host_ids)?;
        let flow_ports = ns3_flow_ports(&flows, &dports);
        place_on_nics(&topo, &mut flows, &flow_ports);
        if cfg.ns3_int.is_some() {
            warnings.extend(long_path_warning(&topo, &flows));
        }
        cfg.ecmp = EcmpMode::Ns3 { flow_ports };
        Ok(Experiment {
            cfg,
            topo,
            flows,
            warnings,
            cc_mode,
            host_ids,
            flow_dports: dports,
            nic_nodes,
            trace,
            outputs,
            payload_size: payload,
        })
    }

    /// The last FCT column, computed as third.cc's `qp_finish` does (see
    /// [`ns3_standalone_fct_ns`]) on the route from `src` to `dst`.
    pub fn standalone_fct_ns(
        &self,
        routes: &crate::topology::Routes,
        src: u32,
        dst: u32,
        size: u64,
    ) -> u64 {
        ns3_standalone_fct_ns(
            &self.topo.path(routes, src, dst),
            size,
            self.payload_size,
            self.cfg.mtu,
            self.cfg.ifg_bytes,
        )
    }

    /// Creates `TRACE_OUTPUT_FILE` (if the config names one) and writes
    /// its header, as third.cc does before its run; with the trace on,
    /// returns where the run's records go (the same file, buffered).
    pub fn open_trace(&self) -> Result<Option<crate::ns3_trace::PacketTrace>, HpccError> {
        use crate::ns3_trace::{PacketTrace, port_speeds, sim_setting_bytes};
        let Some(t) = &self.trace else {
            return Ok(None);
        };
        let mut w = std::io::BufWriter::with_capacity(1 << 20, t.output.create()?);
        w.write_all(&sim_setting_bytes(&port_speeds(&self.topo), t.win))
            .and_then(|()| w.flush())
            .map_err(|e| t.output.error("write", &e))?;
        if !t.enabled {
            return Ok(None);
        }
        let mut ids = node_ids(&self.topo);
        for id in &mut ids {
            id.traced = t.nodes.contains(&u32::from(id.id));
        }
        Ok(Some(PacketTrace::new(ids, Box::new(w))))
    }

    /// Creates every output file the config names, empty, with the
    /// folders they need: a missing or unwritable path is an error here,
    /// before the run, as third.cc opens them before its run. (Call
    /// [`write_outputs`](Self::write_outputs) after the run.)
    pub fn prepare_outputs(&self) -> Result<(), HpccError> {
        for o in &self.outputs {
            o.create()?;
        }
        Ok(())
    }

    /// Writes the FCT, PFC and queue-monitor files in third.cc's formats at
    /// the paths the config gives (see [`OutputFile`]); returns them.
    pub fn write_outputs(&self, r: &Report) -> Result<Vec<PathBuf>, HpccError> {
        let mut written = Vec::new();
        for o in &self.outputs {
            let mut w = std::io::BufWriter::new(o.create()?);
            match o.key {
                "FCT_OUTPUT_FILE" => self.write_fct(r, &mut w),
                "PFC_OUTPUT_FILE" => write_pfc(r, &node_ids(&self.topo), &mut w),
                _ => w.write_all(r.qlen_mon.as_deref().unwrap_or("").as_bytes()),
            }
            .and_then(|()| w.flush())
            .map_err(|e| o.error("write", &e))?;
            written.push(o.path.clone());
        }
        Ok(written)
    }

    /// `sip dip sport dport size start_ns fct_ns standalone_fct_ns`, one
    /// line per finished flow in finishing order (third.cc's `qp_finish`).
    fn write_fct(&self, r: &Report, w: &mut impl Write) -> std::io::Result<()> {
        let mut done: Vec<_> = r.flows.iter().filter(|f| f.ok).collect();
        done.sort_by_key(|f| (f.finish, f.id));
        let routes = self.topo.routes();
        for f in done {
            let Some(fct_ps) = f.fct() else {
                continue;
            };
            writeln!(
                w,
                "{:08x} {:08x} {} {} {} {} {} {}",
                hpcc_ip(self.host_ids[f.src as usize]),
                hpcc_ip(self.host_ids[f.dst as usize]),
                f.sport,
                self.flow_dports.get(f.id as usize).copied().unwrap_or(100),
                f.size,
                f.start / PS_PER_NS,
                fct_ps / PS_PER_NS,
                self.standalone_fct_ns(&routes, f.src, f.dst, f.size)
            )?;
        }
        Ok(())
    }
}

/// What a `PAUSE_TIME` of `ps` does differently from ns-3 on this fabric's
/// links: a pause capped at 0xffff quanta, or one that runs out before its
/// refresh arrives (ns-3's pauses last until the XON whatever their time).
/// The known key within two edits of `key` (a typo's likely intent).
fn did_you_mean<'a>(key: &str, known: &[&'a str]) -> Option<&'a str> {
    known
        .iter()
        .map(|k| (edit_distance(key, k), *k))
        .filter(|(d, _)| *d <= 2)
        .min()
        .map(|(_, k)| k)
}

/// Levenshtein distance (insertions, deletions, substitutions).
fn edit_distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut row: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut diag = row[0];
        row[0] = i + 1;
        for (j, cb) in b.iter().enumerate() {
            let next = (diag + usize::from(ca != *cb))
                .min(row[j] + 1)
                .min(row[j + 1] + 1);
            diag = row[j + 1];
            row[j + 1] = next;
        }
    }
    row[b.len()]
}

/// Switches ns-3's INT header has room for (`IntHeader::maxHop`).
const NS3_INT_HOPS: usize = 5;

/// ns-3's HPCC with flows through more than [`NS3_INT_HOPS`] switches:
/// its header's hop count passes the room, and its update then skips
/// every ACK of the flow (`if (ih.nhop <= IntHeader::maxHop)`), so their
/// rates never move there; here HPCC reads every hop. A warning naming
/// how many flows, not an imitation: such a flow runs without congestion
/// control in ns-3.
fn long_path_warning(topo: &Topology, flows: &[FlowSpec]) -> Option<String> {
    let routes = topo.routes();
    let long = flows
        .iter()
        .filter(|f| topo.path(&routes, f.src, f.dst).len().saturating_sub(1) > NS3_INT_HOPS)
        .count();
    (long > 0).then(|| {
        format!(
            "{long} flows cross more than {NS3_INT_HOPS} switches: ns-3's INT header holds {NS3_INT_HOPS} hops and its HPCC then never updates their rates; here HPCC reads every hop"
        )
    })
}

fn pause_time_warnings(topo: &Topology, ps: Ps) -> Vec<String> {
    let mut speeds: Vec<(u64, Ps)> = topo
        .links
        .iter()
        .map(|l| (l.rate_bps, l.delay_ps))
        .collect();
    speeds.sort_unstable();
    speeds.dedup();
    let mut capped = Vec::new();
    let mut lapse = Vec::new();
    for (rate, delay) in speeds {
        let q = quanta_for(ps, rate);
        let dur = crate::sim::pause_ps(q, rate);
        if dur < ps && !capped.contains(&rate) {
            capped.push(rate);
        }
        // The refresh leaves halfway and needs a PFC frame's serialization
        // and the link's delay to land.
        if dur - dur / 2 <= ser_ps(64, rate) + delay {
            lapse.push(format!(
                "{} Gb/s with {} ns",
                rate / 1_000_000_000,
                delay / PS_PER_NS
            ));
        }
    }
    let us = ps / PS_PER_US;
    let mut w = Vec::new();
    if !capped.is_empty() {
        let at: Vec<String> = capped
            .iter()
            .map(|r| format!("{} Gb/s", r / 1_000_000_000))
            .collect();
        w.push(format!(
            "PAUSE_TIME {us} µs is more than a PFC frame's 0xffff quanta hold at {}: pauses there last 0xffff quanta (refreshed while XOFF holds)",
            at.join(", ")
        ));
    }
    if !lapse.is_empty() {
        w.push(format!(
            "PAUSE_TIME {us} µs: on links of {} a pause runs out before the refresh sent halfway through it arrives, so it lapses between refreshes (ns-3 holds a pause until the XON)",
            lapse.join(", ")
        ));
    }
    w
}

/// ns-3's interface index of our port `port` of a node. Both count a
/// node's ports in the order the topology file lists its links; ns-3 from 1
/// (its device 0 is the loopback), we from 0 (`pfc.csv`, `queues.csv`).
/// Node ids are the file's in both (`pfc.csv` names node 7 `host7` or
/// `switch7`).
pub fn ns3_if_index(port: u16) -> u32 {
    u32::from(port) + 1
}

/// `time_ns node node_type if_index 1|0` per pause (1) and resume or
/// expiry (0) at the device receiving the PFC frame (third.cc's `get_pfc`):
/// `pfc.csv`'s `pause`, `resume` and `expire` rows, in ns-3's numbering
/// ([`ns3_if_index`]).
///
/// One line per pause episode: ns-3's switch sends XOFF once and its pause
/// lasts until the XON, where ours re-sends XOFF before the pause it asked
/// for runs out. Those refreshes are not written (`pfc.csv` keeps them), so
/// the file counts what ns-3's counts.
///
/// Nodes are named as `ids` (from [`crate::ns3_trace::node_ids`], which
/// the packet trace names them by too) gives: a multi-homed host's
/// further NICs by the host's id and the NIC's interface index. A node
/// `ids` does not cover keeps its own id.
fn write_pfc(r: &Report, ids: &[NodeId], w: &mut impl Write) -> std::io::Result<()> {
    let mut paused = std::collections::HashSet::new();
    for e in &r.pfc {
        let key = (e.node, e.port, e.prio);
        let t = match e.what {
            "pause" if paused.insert(key) => 1,
            "resume" | "expire" if paused.remove(&key) => 0,
            // A link that went down lifts its pauses; ns-3 writes nothing.
            "down" => {
                paused.remove(&key);
                continue;
            }
            _ => continue,
        };
        let node_type = u32::from(!r.host_nodes.contains(&e.node));
        let (node, if_index) = match ids.get(e.node as usize) {
            Some(id) => (u32::from(id.id), u32::from(id.intf0) + u32::from(e.port)),
            None => (e.node, ns3_if_index(e.port)),
        };
        writeln!(
            w,
            "{} {} {} {} {}",
            e.time / PS_PER_NS,
            node,
            node_type,
            if_index,
            t
        )?;
    }
    Ok(())
}

/// Each flow's `(sport, dport)` as third.cc numbers them: source ports
/// 10000, 10001, … per (source, destination) pair in flow-file order
/// (`portNumder`), the destination port from the flow file. They are the
/// FCT file's port columns and what ns-3's ECMP hashes.
pub fn ns3_flow_ports(flows: &[FlowSpec], dports: &[u16]) -> Vec<(u16, u16)> {
    let mut next: std::collections::HashMap<(u32, u32), u16> = Default::default();
    flows
        .iter()
        .enumerate()
        .map(|(i, f)| {
            let n = next.entry((f.src, f.dst)).or_insert(10000);
            let sport = *n;
            *n = n.wrapping_add(1);
            (sport, dports.get(i).copied().unwrap_or(100))
        })
        .collect()
}

/// Moves each flow's ends to the NICs ns-3 puts its QPs on, where a host
/// has more than one (see [`read_topology_rates`]): `flows` name the
/// hosts' own nodes, `ports` are the flows' `(sport, dport)`.
///
/// ns-3's `RdmaHw` keeps, per destination, the host's interfaces on a
/// shortest path, in the order its route search reached them
/// (`m_rtTable`, filled from `nextHop`), and picks one by a hash of the
/// QP's addresses and ports, modulo their count: the sender by
/// `GetNicIdxOfQp` (its address, the receiver's, `sport`, `dport`), the
/// receiver, which sends the ACKs, by `GetNicIdxOfRxQp` (the same from its
/// side: its address first and the ports swapped; see
/// [`crate::ecmp::ns3::qp_hash`]).
/// The choice holds for the QP's life, as no host link goes down here.
pub fn place_on_nics(topo: &Topology, flows: &mut [FlowSpec], ports: &[(u16, u16)]) {
    use crate::ecmp::ns3::{next_hop_order, ns3_pointer_rank, qp_hash};
    let nics = topo.machine_nics();
    if nics.is_empty() {
        return;
    }
    let mut orders: std::collections::HashMap<usize, Vec<Vec<usize>>> = Default::default();
    // The NIC of machine `me` ns-3 sends from toward machine `peer`.
    let mut pick = |me: usize, peer: usize, sport: u16, dport: u16| -> Option<usize> {
        let mine = nics.get(&me)?;
        let order = orders
            .entry(peer)
            .or_insert_with(|| next_hop_order(topo, peer, |x| ns3_pointer_rank(topo, x)));
        let on_path: Vec<usize> = (order[me].iter())
            .filter_map(|&sw| mine.iter().copied().find(|&x| topo.ports[x][0].peer == sw))
            .collect();
        let n = on_path.len() as u32;
        let hash = qp_hash(hpcc_ip(me as u32), hpcc_ip(peer as u32), sport, dport);
        (n > 0).then(|| on_path[(hash % n) as usize])
    };
    for (f, &(sport, dport)) in flows.iter_mut().zip(ports) {
        let (h, d) = (topo.hosts[f.src as usize], topo.hosts[f.dst as usize]);
        let (hm, dm) = (topo.machine[h], topo.machine[d]);
        if let Some(nic) = pick(hm, dm, sport, dport) {
            f.src = topo.host_of[nic].unwrap_or(f.src);
        }
        if let Some(nic) = pick(dm, hm, dport, sport) {
            f.dst = topo.host_of[nic].unwrap_or(f.dst);
        }
    }
}

/// The HPCC simulator's address of node `id`.
pub fn hpcc_ip(id: u32) -> u32 {
    0x0b00_0001 + (id / 256) * 0x0001_0000 + (id % 256) * 0x0000_0100
}

fn tokens(text: &str) -> Vec<(usize, &str)> {
    text.lines()
        .enumerate()
        .flat_map(|(i, l)| l.split_whitespace().map(move |t| (i + 1, t)))
        .collect()
}

/// Reads a topology file; node ids are kept (node `i` is node `i`).
pub fn read_topology(path: &Path) -> Result<(Topology, Vec<u32>), HpccError> {
    read_topology_rates(path).map(|(t, h, _, _)| (t, h))
}

/// [`read_topology`], with each link's error rate (its fifth column: the
/// chance that a frame it carries is lost; 0 for none).
#[allow(clippy::type_complexity)]
pub fn read_topology_rates(
    path: &Path,
) -> Result<(Topology, Vec<u32>, Vec<f64>, Vec<NicNode>), HpccError> {
    let (file, text) = read_input(path)?;
    let toks = tokens(&text);
    let mut it = toks.iter();
    let err = |line: usize, field: &str, msg: String| input_error(&file, line, field, msg);
    let mut next_num = |field: &str| -> Result<(usize, u64), HpccError> {
        let (l, t) = it
            .next()
            .ok_or_else(|| err(0, field, "unexpected end of file".into()))?;
        t.parse()
            .map(|v| (*l, v))
            .map_err(|_| err(*l, field, format!("expected a number, got `{t}`")))
    };
    let (_, n) = next_num("node count")?;
    let (_, s) = next_num("switch count")?;
    let (_, m) = next_num("link count")?;
    let n = n as usize;
    let mut kind = vec![NodeKind::Host; n];
    for _ in 0..s {
        let (l, id) = next_num("switch id")?;
        if id as usize >= n {
            return Err(err(
                l,
                "switch id",
                format!("{id} is not below the node count {n}"),
            ));
        }
        kind[id as usize] = NodeKind::Switch;
    }
    let mut links = Vec::new();
    let mut rates = Vec::new();
    let rest: Vec<&(usize, &str)> = toks.iter().skip(3 + s as usize).collect();
    for i in 0..m as usize {
        let f = rest.get(i * 5..i * 5 + 5).ok_or_else(|| {
            err(
                rest.last().map_or(0, |x| x.0),
                "links",
                format!("expected {m} links, found {i}"),
            )
        })?;
        let l = f[0].0;
        let id = |t: &str, what: &str| -> Result<usize, HpccError> {
            t.parse::<usize>()
                .ok()
                .filter(|&v| v < n)
                .ok_or_else(|| err(l, what, format!("expected a node id below {n}, got `{t}`")))
        };
        let a = id(f[0].1, "src")?;
        let b = id(f[1].1, "dst")?;
        let rate = parse_rate(f[2].1).ok_or_else(|| {
            err(
                l,
                "rate",
                format!("expected a rate like 100Gbps, got `{}`", f[2].1),
            )
        })?;
        let delay = parse_time_ps(f[3].1).ok_or_else(|| {
            err(
                l,
                "delay",
                format!("expected a time like 1000ns, got `{}`", f[3].1),
            )
        })?;
        let e: f64 = f[4].1.parse().map_err(|_| {
            err(
                l,
                "error_rate",
                format!("expected a number, got `{}`", f[4].1),
            )
        })?;
        // third.cc gives a link its own error model only above 0 (0 or
        // less: the config's `ERROR_RATE_PER_LINK`).
        if e.is_nan() || e > 1.0 {
            return Err(err(
                l,
                "error_rate",
                format!("a loss rate must be at most 1, got {e}"),
            ));
        }
        rates.push(e.max(0.0));
        links.push(Link {
            a,
            b,
            rate_bps: rate,
            delay_ps: delay,
        });
    }
    // A host on more than one link (the HPCC repository's
    // `mix/ali_32host_10rack.txt` puts each host on two ToRs): third.cc
    // gives it a NIC per link, all behind one `RdmaHw`. Here its first
    // link keeps the host's node, and each further link gets a NIC node
    // of its own, numbered after the file's nodes (so every id the file
    // names keeps its meaning) and grouped with the host's node into one
    // machine (`Topology::from_parts_in_machines`).
    let mut host_links: std::collections::BTreeMap<usize, Vec<(usize, usize)>> =
        std::collections::BTreeMap::new();
    for (i, link) in links.iter().enumerate() {
        for (end, other) in [(link.a, link.b), (link.b, link.a)] {
            if kind[end] == NodeKind::Host {
                host_links.entry(end).or_default().push((i, other));
            }
        }
    }
    let mut nodes: Vec<Node> = kind
        .iter()
        .enumerate()
        .map(|(i, k)| Node {
            name: match k {
                NodeKind::Host => format!("host{i}"),
                NodeKind::Switch => format!("switch{i}"),
            },
            kind: *k,
        })
        .collect();
    let mut machine: Vec<usize> = (0..n).collect();
    let mut nic_ports = Vec::new();
    for (&host, on) in host_links.iter().filter(|(_, v)| v.len() > 1) {
        for (k, &(li, other)) in on.iter().enumerate().skip(1) {
            let line = rest.get(li * 5).map_or(0, |t| t.0);
            if kind[other] == NodeKind::Host {
                return Err(err(
                    line,
                    "src/dst",
                    format!(
                        "host {host} is linked straight to host {other}; put a switch between them"
                    ),
                ));
            }
            if on[..k].iter().any(|&(_, o)| o == other) {
                return Err(err(
                    line,
                    "src/dst",
                    format!(
                        "host {host} has a second link to node {other}: ns-3 keeps one route per \
                         neighbour, so a multi-homed host's links must reach distinct switches"
                    ),
                ));
            }
            let nic = nodes.len();
            nodes.push(Node {
                name: format!("host{host}.nic{}", k + 1),
                kind: NodeKind::Host,
            });
            machine.push(host);
            nic_ports.push(NicNode {
                node: nic,
                host: host as u32,
                if_index: k as u32 + 1,
            });
            let l = &mut links[li];
            if l.a == host {
                l.a = nic;
            } else {
                l.b = nic;
            }
        }
    }
    let mut host_ids: Vec<u32> = (0..n as u32)
        .filter(|&i| kind[i as usize] == NodeKind::Host)
        .collect();
    host_ids.extend(nic_ports.iter().map(|x| x.host));
    let topo = Topology::from_parts_in_machines(nodes, links, machine)
        .map_err(|e| err(1, "topology", e.to_string()))?;
    Ok((topo, host_ids, rates, nic_ports))
}

/// A further NIC of a multi-homed host (see [`read_topology_rates`]): our
/// node, and ns-3's host id and interface index for it (the host's links
/// counted from 1 in the file's order).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NicNode {
    pub node: usize,
    pub host: u32,
    pub if_index: u32,
}

/// An input file's name as errors give it, and its text (an error at
/// line 0, field `(file)`, if it cannot be read).
fn read_input(path: &Path) -> Result<(String, String), HpccError> {
    let file = path.display().to_string();
    match std::fs::read_to_string(path) {
        Ok(text) => Ok((file, text)),
        Err(e) => Err(input_error(&file, 0, "(file)", format!("cannot read: {e}"))),
    }
}

fn input_error(file: &str, line: usize, field: &str, msg: String) -> HpccError {
    HpccError {
        file: file.to_string(),
        line,
        field: field.to_string(),
        msg,
    }
}

/// Reads a `TRACE_FILE`: a count, then that many node ids (below `n`, the
/// topology file's node count).
pub fn read_trace_nodes(path: &Path, n: usize) -> Result<Vec<u32>, HpccError> {
    let (file, text) = read_input(path)?;
    let err = |line: usize, field: &str, msg: String| input_error(&file, line, field, msg);
    let toks = tokens(&text);
    let mut it = toks.iter();
    let (l, count) = it
        .next()
        .ok_or_else(|| err(1, "node count", "empty file".into()))?;
    let count: usize = count.parse().map_err(|_| {
        err(
            *l,
            "node count",
            format!("expected a number, got `{count}`"),
        )
    })?;
    let mut nodes = Vec::with_capacity(count.min(n));
    for i in 0..count {
        let (l, t) = it.next().ok_or_else(|| {
            err(
                0,
                "node id",
                format!("expected {count} node ids, found {i}"),
            )
        })?;
        let id: u32 = t
            .parse()
            .ok()
            .filter(|&v: &u32| (v as usize) < n)
            .ok_or_else(|| {
                err(
                    *l,
                    "node id",
                    format!("expected a node id below {n}, got `{t}`"),
                )
            })?;
        nodes.push(id);
    }
    Ok(nodes)
}

/// Reads a flow file; returns flows (host indices) and their dports.
pub fn read_flows(path: &Path, host_ids: &[u32]) -> Result<(Vec<FlowSpec>, Vec<u16>), HpccError> {
    let (file, text) = read_input(path)?;
    let err = |line: usize, field: &str, msg: String| input_error(&file, line, field, msg);
    let mut lines = text
        .lines()
        .enumerate()
        .filter(|(_, l)| !l.trim().is_empty());
    let (l0, first) = lines
        .next()
        .ok_or_else(|| err(1, "flow count", "empty file".into()))?;
    let n: usize = first.trim().parse().map_err(|_| {
        err(
            l0 + 1,
            "flow count",
            format!("expected a number, got `{}`", first.trim()),
        )
    })?;
    let host = |id: &str, line: usize, field: &str| -> Result<u32, HpccError> {
        let v: u32 = id
            .parse()
            .map_err(|_| err(line, field, format!("expected a node id, got `{id}`")))?;
        host_ids
            .iter()
            .position(|&h| h == v)
            .map(|p| p as u32)
            .ok_or_else(|| err(line, field, format!("node {v} is not a host")))
    };
    let mut flows = Vec::with_capacity(n);
    let mut dports = Vec::with_capacity(n);
    for _ in 0..n {
        let (i, l) = lines
            .next()
            .ok_or_else(|| err(text.lines().count(), "flows", format!("expected {n} flows")))?;
        let line = i + 1;
        let f: Vec<&str> = l.split_whitespace().collect();
        if f.len() < 6 {
            return Err(err(
                line,
                "flow",
                "expected `src dst priority dport size start_seconds`".into(),
            ));
        }
        let src = host(f[0], line, "src")?;
        let dst = host(f[1], line, "dst")?;
        let dport: u16 = f[3]
            .parse()
            .map_err(|_| err(line, "dport", format!("expected a port, got `{}`", f[3])))?;
        let size: u64 = f[4]
            .parse()
            .ok()
            .filter(|&s| s > 0 && s <= 1 << 31)
            .ok_or_else(|| {
                err(
                    line,
                    "size",
                    format!("expected 1..=2^31 bytes, got `{}`", f[4]),
                )
            })?;
        let start: f64 = f[5]
            .parse()
            .ok()
            .filter(|&s: &f64| s >= 0.0)
            .ok_or_else(|| {
                err(
                    line,
                    "start_time",
                    format!("expected seconds ≥ 0, got `{}`", f[5]),
                )
            })?;
        if src == dst {
            return Err(err(line, "dst", "a flow to its own source".into()));
        }
        flows.push(FlowSpec {
            src,
            dst,
            size,
            start: (start * PS_PER_S as f64).round() as Ps,
            op: FlowOp::Write,
        });
        dports.push(dport);
    }
    Ok((flows, dports))
}

#[cfg(test)]
mod tests {
    use super::*;
    use roce_rnic::cc::HpccOptions;

    #[test]
    fn units() {
        assert_eq!(parse_rate("100Gbps"), Some(100_000_000_000));
        assert_eq!(parse_rate("25Gb/s"), Some(25_000_000_000));
        assert_eq!(parse_time_ps("1000ns"), Some(1_000_000));
        assert_eq!(parse_time_ps("0.001ms"), Some(1_000_000));
        assert_eq!(hpcc_ip(0), 0x0b00_0001);
        assert_eq!(hpcc_ip(257), 0x0b01_0101);
    }

    /// Writes a two-host experiment with `extra` config lines into a
    /// fresh directory and loads it.
    fn load_with(tag: &str, extra: &str) -> Experiment {
        try_load_with(tag, extra).unwrap()
    }

    /// An experiment from a topology, flow file and config written to a
    /// folder of its own (`tag`), removed after loading.
    fn load_files(
        tag: &str,
        topo: &str,
        flows: &str,
        config: &str,
    ) -> Result<Experiment, HpccError> {
        let d = std::env::temp_dir().join(format!("roce-hpcc-{tag}-{}", std::process::id()));
        std::fs::create_dir_all(&d).unwrap();
        std::fs::write(d.join("topo.txt"), topo).unwrap();
        std::fs::write(d.join("flow.txt"), flows).unwrap();
        std::fs::write(
            d.join("config.txt"),
            format!("TOPOLOGY_FILE topo.txt\nFLOW_FILE flow.txt\n{config}"),
        )
        .unwrap();
        let e = Experiment::load(&d.join("config.txt"), None);
        let _ = std::fs::remove_dir_all(&d);
        e
    }

    /// [`load_with`]'s config: `extra` starts at its line 6.
    fn try_load_with(tag: &str, extra: &str) -> Result<Experiment, HpccError> {
        load_files(
            &format!("cc-{tag}"),
            "3 1 2\n2\n0 2 100Gbps 1000ns 0\n1 2 100Gbps 1000ns 0\n",
            "1\n0 1 3 100 10000 0.000001\n",
            &format!(
                "KMAX_MAP 1 100000000000 400\nKMIN_MAP 1 100000000000 100\nPMAX_MAP 1 100000000000 0.2\n{extra}"
            ),
        )
    }

    /// A DCQCN config over hosts 0 and 1 under switches 2 and 3, which are
    /// joined (the hosts' links are the topology file's lines 3 and 4, the
    /// switches' line 5; the second host's link has error rate `link1`),
    /// with `extra` from the config's line 5 on.
    fn load_two_switches(tag: &str, link1: &str, extra: &str) -> Result<Experiment, HpccError> {
        let d = std::env::temp_dir().join(format!("roce-hpcc-{tag}-{}", std::process::id()));
        std::fs::create_dir_all(&d).unwrap();
        let topo = format!(
            "4 2 3\n2 3\n0 2 100Gbps 1000ns 0\n1 3 100Gbps 1000ns {link1}\n2 3 100Gbps 1000ns 0\n"
        );
        std::fs::write(d.join("topo.txt"), topo).unwrap();
        std::fs::write(d.join("flow.txt"), "1\n0 1 3 100 10000 2.000001\n").unwrap();
        let cfg = format!(
            "TOPOLOGY_FILE topo.txt\nFLOW_FILE flow.txt\nENABLE_QCN 0\nCC_MODE 1\n{extra}\n"
        );
        std::fs::write(d.join("config.txt"), cfg).unwrap();
        let e = Experiment::load(&d.join("config.txt"), None);
        let _ = std::fs::remove_dir_all(&d);
        e
    }

    /// `GLOBAL_T` other than 1 gives each QP its own pair's T and window
    /// (with `PACKET_PAYLOAD_SIZE` for ns-3's hop cost), under every mode
    /// that has either, with no warning; 1 or absent, the fabric's largest.
    #[test]
    fn global_t_0_is_a_t_and_window_per_pair() {
        for mode in ["1", "3", "7", "8", "10"] {
            let e = load_with(
                "gt0",
                &format!("CC_MODE {mode}\nGLOBAL_T 0\nPACKET_PAYLOAD_SIZE 900\n"),
            );
            assert_eq!(e.cfg.ns3_pair_t, Some(900), "CC_MODE {mode}");
            assert!(
                e.warnings.iter().all(|w| !w.contains("GLOBAL_T")),
                "{:?}",
                e.warnings
            );
            for t in ["GLOBAL_T 1\n", ""] {
                let e = load_with("gt1", &format!("CC_MODE {mode}\n{t}"));
                assert_eq!(e.cfg.ns3_pair_t, None, "CC_MODE {mode} {t}");
            }
        }
    }

    /// A failure that lifts a pause ends it in `pfc.csv` with a `down` row,
    /// which the ns-3 PFC file skips: there the pause is left open, as
    /// ns-3's `TakeDown` traces nothing.
    #[test]
    fn a_failed_links_pauses_end_with_down_rows() {
        let src = r#"
seed = 1
[transport]
timeout = 8
[switch]
buffer_kb = 256
pfc = "dynamic"
alpha = 0.125
[topology]
kind = "dumbbell"
left = 4
right = 1
core_gbps = 400
[[workload]]
kind = "incast"
dst = 4
size = 2000000
[[link_down]]
at_us = 30
a = "swL"
b = "swR"
[output]
sample_us = 0
"#;
        let base = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scenarios");
        let sc = crate::scenario::Scenario::parse(src, "t.toml", &base, None).unwrap();
        let mut sim = crate::sim::Simulator::new(sc.cfg, sc.topo.clone(), &sc.flows).unwrap();
        sim.run().unwrap();
        let r = sim.report();
        let swl = sc.topo.nodes.iter().position(|n| n.name == "swL").unwrap() as u32;
        let down: Vec<_> = r.pfc.iter().filter(|e| e.what == "down").collect();
        assert!(
            !down.is_empty(),
            "no pause was lifted: {:?}",
            &r.pfc[..r.pfc.len().min(20)]
        );
        assert!(
            down.iter()
                .all(|e| e.node == swl && e.time == 30 * PS_PER_US)
        );
        let mut file = Vec::new();
        write_pfc(&r, &[], &mut file).unwrap();
        let text = String::from_utf8(file).unwrap();
        let last = (text.lines()).rfind(|l| l.split(' ').nth(1) == Some(&swl.to_string()));
        // The lifted pause's last line is its start: no resume is written.
        assert!(last.is_some_and(|l| l.ends_with(" 1")), "{text}");
        // Cut off, every flow fails once its retries run out.
        assert!(r.flows.iter().all(|f| !f.ok));
    }

    /// `LINK_DOWN t a b` as third.cc reads it: `0 0 0` (its default) is no
    /// failure; otherwise the link between switches a and b fails 2 s +
    /// t µs into the run. A host's link, two nodes with no link between
    /// them, or a short or non-numeric line is an error naming the line.
    #[test]
    fn link_down_reads_as_third_cc_takes_it() {
        let load = |extra: &str| load_two_switches("ld", "0", extra);
        assert!(
            load("LINK_DOWN 0 0 0")
                .unwrap()
                .cfg
                .link_failures
                .is_empty()
        );
        assert!(load("").unwrap().cfg.link_failures.is_empty());
        let e = load("LINK_DOWN 500 3 2").unwrap();
        let at = 2 * PS_PER_S + 500 * PS_PER_US;
        assert_eq!(e.cfg.link_failures, vec![LinkFailure { at, a: 3, b: 2 }]);
        for (line, says) in [
            ("LINK_DOWN 500 0 2", "node 0 is a host"),
            ("LINK_DOWN 500 2 1", "node 1 is a host"),
            ("LINK_DOWN 500 2 9", "no link joins nodes 2 and 9"),
            ("LINK_DOWN 500 2 2", "no link joins nodes 2 and 2"),
            ("LINK_DOWN 500 2", "expected `time_us node_a node_b`"),
            ("LINK_DOWN 1e3 2 3", "expected `time_us node_a node_b`"),
        ] {
            let e = load(line).unwrap_err();
            assert_eq!((e.line, e.field.as_str()), (5, "LINK_DOWN"), "{line}: {e}");
            assert!(e.msg.contains(says), "{line}: {e}");
        }
        // The run: the failure reaches the simulator, which takes the link
        // down (the one flow's path) and reports the flow unfinished at
        // its stop, as ns-3 would never finish it either.
        let mut e = load("LINK_DOWN 1 2 3").unwrap();
        e.cfg.stop = Some(2 * PS_PER_S + 50 * PS_PER_US);
        let mut sim = crate::sim::Simulator::new(e.cfg, e.topo, &e.flows).unwrap();
        sim.run().unwrap();
        let r = sim.report();
        assert!(r.counters.dropped_pkts > 0);
        assert_eq!(r.summary(1.0).flows.unfinished, 1);
    }

    /// `ERROR_RATE_PER_LINK` and the topology file's fifth column as third.cc
    /// reads them: a link's own rate where it gives one above 0, the
    /// config's elsewhere; none at all is a lossless fabric; a rate outside
    /// 0..=1 is an error naming its line.
    #[test]
    fn error_rates_read_as_third_cc_reads_them() {
        let load = |link1: &str, extra: &str| load_two_switches("er", link1, extra);
        let loss = |link1: &str, extra: &str| load(link1, extra).unwrap().cfg.link_loss;
        assert!(loss("0", "ERROR_RATE_PER_LINK 0.0000").is_empty());
        assert!(loss("0", "").is_empty());
        assert_eq!(loss("0.01", ""), [0.0, 0.01, 0.0]);
        assert_eq!(
            loss("0.01", "ERROR_RATE_PER_LINK 0.001"),
            [0.001, 0.01, 0.001]
        );
        assert_eq!(loss("0", "ERROR_RATE_PER_LINK 0.001"), [0.001; 3]);
        let e = load("0", "ERROR_RATE_PER_LINK 2").unwrap_err();
        assert_eq!(
            (e.line, e.field.as_str()),
            (5, "ERROR_RATE_PER_LINK"),
            "{e}"
        );
        assert!(e.msg.contains("0..=1"), "{e}");
        // Below 0 reads as 0, as in third.cc (`if (error_rate > 0)`).
        assert_eq!(loss("-0.5", "ERROR_RATE_PER_LINK 0.001"), [0.001; 3]);
        let e = load("1.5", "").unwrap_err();
        assert_eq!((e.line, e.field.as_str()), (4, "error_rate"), "{e}");
        // Not a warning any more: the rate is modelled.
        let e = load("0", "ERROR_RATE_PER_LINK 0.001").unwrap();
        assert!(
            e.warnings.iter().all(|w| !w.contains("ERROR_RATE")),
            "{:?}",
            e.warnings
        );
    }

    /// Source ports as third.cc numbers them (per host pair from 10000, in
    /// flow-file order), the flow file's destination ports, and ns-3's
    /// ECMP under `--hpcc-config`.
    #[test]
    fn flows_get_ns3_s_ports_and_ecmp() {
        let flows: Vec<FlowSpec> = [(0, 1), (0, 1), (1, 0), (0, 1), (2, 1)]
            .into_iter()
            .map(|(src, dst)| FlowSpec {
                src,
                dst,
                size: 1000,
                start: 0,
                op: FlowOp::Write,
            })
            .collect();
        assert_eq!(
            ns3_flow_ports(&flows, &[100, 100, 7, 100, 100]),
            vec![
                (10000, 100),
                (10001, 100),
                (10000, 7),
                (10002, 100),
                (10000, 100)
            ]
        );
        let e = load_with("ecmp", "");
        assert_eq!(
            e.cfg.ecmp,
            EcmpMode::Ns3 {
                flow_ports: vec![(10000, 100)]
            }
        );
    }

    #[test]
    fn cc_mode_1_is_dcqcn_with_microsecond_timers() {
        let e = load_with(
            "dcqcn",
            "CC_MODE 1\nALPHA_RESUME_INTERVAL 1\nRATE_DECREASE_INTERVAL 4\nCLAMP_TARGET_RATE 0\nRP_TIMER 900\nEWMA_GAIN 0.00390625\nFAST_RECOVERY_TIMES 1\nRATE_AI 50Mb/s\nRATE_HAI 100Mb/s\nMIN_RATE 100Mb/s\nL2_ACK_INTERVAL 1\n",
        );
        let CcConfig::Dcqcn(d) = e.cfg.cc else {
            panic!("{:?}", e.cfg.cc)
        };
        assert_eq!(d.g, 0.00390625);
        assert_eq!(d.rate_ai_bps, 50_000_000);
        assert_eq!(d.rate_hai_bps, 100_000_000);
        assert_eq!(d.min_rate_bps, 100_000_000);
        assert_eq!(d.rp_timer_ns, 900_000);
        assert_eq!(d.alpha_resume_interval_ns, 1_000);
        assert_eq!(d.rate_decrease_interval_ns, 4_000);
        assert_eq!(d.byte_counter, 0);
        assert_eq!(d.fast_recovery_times, 1);
        assert!(!d.clamp_target_rate);
        assert_eq!(e.cfg.rnic.cnp_interval_ns, 0);
        assert_eq!(e.cfg.rnic.ack_req_every, 1);
        assert!(
            e.warnings.iter().all(|w| !w.contains("CC_MODE")),
            "{:?}",
            e.warnings
        );
    }

    #[test]
    fn ack_high_prio_absent_means_acks_share_the_data_queue() {
        // Hosts send ACKs first; a pause of the data holds them unless
        // ACK_HIGH_PRIO is 1.
        for (tag, extra) in [("ack-absent", ""), ("ack-0", "ACK_HIGH_PRIO 0\n")] {
            let e = load_with(tag, &format!("CC_MODE 1\n{extra}"));
            assert!(e.cfg.control_prio > e.cfg.data_prio);
            assert_eq!(e.cfg.host_control_paused_with, Some(e.cfg.data_prio));
            assert_eq!(e.cfg.switch_control_prio, Some(e.cfg.data_prio));
        }
        let e = load_with("ack-1", "CC_MODE 1\nACK_HIGH_PRIO 1\n");
        assert!(e.cfg.control_prio > e.cfg.data_prio);
        assert_eq!(e.cfg.host_control_paused_with, None);
        // Either way ns-3's switches queue ACKs with the data.
        assert_eq!(e.cfg.switch_control_prio, Some(e.cfg.data_prio));
    }

    #[test]
    fn the_switch_buffer_is_third_cc_s() {
        let e = load_with("mmu", "CC_MODE 1\nBUFFER_SIZE 2\n");
        let b = e.cfg.buffer;
        assert_eq!(b.size_bytes, 2 << 20);
        assert_eq!(b.threshold, Threshold::Dynamic { alpha: 0.125 });
        // Alpha doubles per doubling of speed over the first host's link.
        assert_eq!(b.alpha_speed_ref_bps, Some(100_000_000_000));
        assert_eq!(b.alpha_for(0.125, 400_000_000_000), 0.5);
        assert_eq!((b.reserve_bytes, b.reserve_once_per_port), (4096, true));
        assert_eq!(b.headroom_for(100_000_000_000, 1_000_000, 1100), 37_500);
        assert_eq!(b.xon_offset_bytes, 3072);
        assert!(e.cfg.pfc_after_frame);
        // ns-3's MMU never reads USE_DYNAMIC_PFC_THRESHOLD.
        let e = load_with("mmu-static", "CC_MODE 1\nUSE_DYNAMIC_PFC_THRESHOLD 0\n");
        assert_eq!(e.cfg.buffer.threshold, Threshold::Dynamic { alpha: 0.125 });
        assert!(
            e.warnings
                .iter()
                .any(|w| w.contains("USE_DYNAMIC_PFC_THRESHOLD 0 has no effect")),
            "{:?}",
            e.warnings
        );
    }

    #[test]
    fn the_pfc_file_has_one_line_per_pause_episode() {
        use crate::metrics::PfcEvent;
        let ev = |time: Ps, node: u32, what: &'static str| PfcEvent {
            time: time * PS_PER_NS,
            node,
            port: 0,
            prio: 3,
            what,
        };
        let r = Report {
            pfc: vec![
                ev(1, 5, "xoff_tx"),
                ev(2, 4, "pause"),
                // A refresh while paused, then the XON.
                ev(3, 4, "pause"),
                ev(4, 4, "resume"),
                // A pause that ran out, then one more episode.
                ev(5, 4, "pause"),
                ev(6, 4, "expire"),
                ev(7, 4, "resume"),
                ev(8, 4, "pause"),
            ],
            host_nodes: vec![4],
            now: 0,
            events: 0,
            counters: Default::default(),
            flows: Vec::new(),
            ports: Vec::new(),
            queues: Vec::new(),
            flow_progress: Vec::new(),
            pfc_frames: Vec::new(),
            node_names: Vec::new(),
            qlen_mon: None,
            host_path: None,
            sample: 0,
            max_rows: 100,
        };
        let mut out = Vec::new();
        write_pfc(&r, &[], &mut out).unwrap();
        assert_eq!(
            String::from_utf8(out).unwrap(),
            "2 4 0 1 1\n4 4 0 1 0\n5 4 0 1 1\n6 4 0 1 0\n8 4 0 1 1\n"
        );
    }

    #[test]
    fn output_files_are_where_the_config_says_and_the_monitor_follows_qlen_keys() {
        let e = load_with(
            "outputs",
            "CC_MODE 1\nFCT_OUTPUT_FILE r/fct.txt\nQLEN_MON_FILE q.txt\nQLEN_MON_START 5\nSIMULATOR_STOP_TIME 2.5\n",
        );
        let keys: Vec<(&str, &Path)> = e
            .outputs
            .iter()
            .map(|o| (o.key, o.path.as_path()))
            .collect();
        assert_eq!(
            keys,
            [
                ("FCT_OUTPUT_FILE", Path::new("r/fct.txt")),
                ("PFC_OUTPUT_FILE", Path::new("pfc.txt")),
                ("QLEN_MON_FILE", Path::new("q.txt")),
            ]
        );
        assert_eq!(
            e.cfg.qlen_monitor,
            Some(QlenMonConfig {
                start: 5_000,
                end: 2_100_000_000 * PS_PER_NS,
                stop: 2_500_000_000 * PS_PER_NS,
            })
        );
        let quiet = load_with("no-qlen", "CC_MODE 1\n");
        assert_eq!(quiet.cfg.qlen_monitor, None);
        assert_eq!(quiet.outputs.len(), 2);
    }

    #[test]
    fn standalone_fct_follows_third_cc() {
        let e = load_with("standalone", "CC_MODE 3\n");
        let routes = e.topo.routes();
        // Base RTT: 2 links x (2 x 1000 ns + 1000 B at 100 Gb/s = 80 ns);
        // bytes: 10 packets of the 1024-byte MTU, each with 62 bytes of
        // headers and FCS (no preamble or gap: ns-3 has none), plus one
        // RETH, at 100 Gb/s.
        let bytes = 10_000 + 10 * 62 + 16;
        assert_eq!(
            e.standalone_fct_ns(&routes, 0, 1, 10_000),
            2 * (2_000 + 80) + bytes * 8 / 100
        );
    }

    #[test]
    fn cc_mode_3_is_hpcc_and_other_modes_say_so() {
        // T is third.cc's maxRtt: 2 x 2080 ns on the two-link pair; its
        // defaults where the config is silent: a rate per hop, a window
        // of the line rate's size, INT in units of 128 and 80 bytes.
        let e = load_with("hpcc-t", "CC_MODE 3\n");
        assert_eq!(
            e.cfg.cc,
            CcConfig::Hpcc(HpccSettings {
                base_rtt_ns: Some(4160),
                rate_ai_bps: Some(50_000_000),
                opts: HpccOptions {
                    multi_rate: true,
                    var_window: false,
                    ..HpccOptions::default()
                },
                ..HpccSettings::default()
            })
        );
        assert_eq!(e.cfg.ns3_int, Some(Ns3Int { multi: 1 }));
        let e = load_with(
            "hpcc",
            "CC_MODE 3\nU_TARGET 0.9\nMI_THRESH 3\nRATE_AI 50Mb/s\nHAS_WIN 1\nVAR_WIN 1\nFAST_REACT 0\n",
        );
        let CcConfig::Hpcc(h) = e.cfg.cc else {
            panic!("{:?}", e.cfg.cc)
        };
        assert_eq!(h.eta, 0.9);
        assert_eq!(h.max_stage, 3);
        assert_eq!(h.rate_ai_bps, Some(50_000_000));
        assert!(e.cfg.int, "HPCC needs INT");
        assert!(!h.fast_react, "FAST_REACT 0 is honoured");
        let none = load_with("none", "CC_MODE 0\n");
        assert_eq!(none.cfg.cc, CcConfig::None);
        assert!(
            none.warnings.iter().all(|w| !w.contains("CC_MODE")),
            "{:?}",
            none.warnings
        );
    }

    /// HPCC's switches in third.cc (`MULTI_RATE`, `SAMPLE_FEEDBACK`,
    /// `HAS_WIN`, `VAR_WIN`, `RATE_BOUND`, `INT_MULTI`) each reach the
    /// controller, with no warning; a bad `INT_MULTI` is an error at its
    /// line; `RATE_BOUND 0` warns where only the rate may hold back.
    #[test]
    fn hpcc_switches_read_as_third_cc_reads_them() {
        let hpcc = |name: &str, extra: &str| {
            let e = load_with(name, &format!("CC_MODE 3\n{extra}"));
            // (The default payload, 1000 bytes, is not an IB MTU.)
            let other = |w: &&String| !w.contains("PACKET_PAYLOAD_SIZE");
            assert!(
                !e.warnings.iter().any(|w| other(&w)),
                "{name}: {:?}",
                e.warnings
            );
            let CcConfig::Hpcc(h) = e.cfg.cc else {
                panic!("{:?}", e.cfg.cc)
            };
            (h, e.cfg.ns3_int)
        };
        let (h, int) = hpcc(
            "run-py",
            "HAS_WIN 1\nVAR_WIN 1\nINT_MULTI 4\nMULTI_RATE 0\nSAMPLE_FEEDBACK 0\nRATE_BOUND 1\n",
        );
        assert_eq!(h.opts, HpccOptions::default());
        assert_eq!(int, Some(Ns3Int { multi: 4 }));
        let (h, _) = hpcc(
            "flipped",
            "HAS_WIN 1\nMULTI_RATE 1\nSAMPLE_FEEDBACK 1\nRATE_BOUND 0\n",
        );
        let o = h.opts;
        assert!(o.multi_rate && o.sample_feedback && o.windowed && !o.var_window && !o.paced);
        // HAS_WIN 0: no window, and a warning that ns-3's HPCC is not
        // comparable there (it divides by the zero window).
        let e = load_with("nowin", "CC_MODE 3\nHAS_WIN 0\n");
        let CcConfig::Hpcc(h) = e.cfg.cc else {
            panic!("{:?}", e.cfg.cc)
        };
        assert!(!h.opts.windowed);
        assert!(
            e.warnings
                .iter()
                .any(|w| w.contains("HAS_WIN 0") && w.contains("not meaningful")),
            "{:?}",
            e.warnings
        );
        for bad in ["0", "2.5", "-1"] {
            let e =
                try_load_with("bad-multi", &format!("CC_MODE 3\nINT_MULTI {bad}\n")).unwrap_err();
            assert_eq!((e.line, e.field.as_str()), (7, "INT_MULTI"), "{bad}: {e}");
        }
        let pint = load_with("pint", "CC_MODE 10\nHAS_WIN 1\nVAR_WIN 0\nRATE_BOUND 0\n");
        let CcConfig::HpccPint(p) = pint.cfg.cc else {
            panic!("{:?}", pint.cfg.cc)
        };
        let o = p.hpcc.opts;
        assert!(o.windowed && !o.var_window && !o.paced);
        assert!(
            pint.warnings
                .iter()
                .all(|w| w.contains("PACKET_PAYLOAD_SIZE")),
            "{:?}",
            pint.warnings
        );
        assert_eq!(pint.cfg.ns3_int, None, "PINT carries no hop records");
        let dcqcn = load_with("dcqcn", "CC_MODE 1\nRATE_BOUND 0\n");
        assert!(
            dcqcn.warnings.iter().any(|w| w.contains("RATE_BOUND 0")),
            "{:?}",
            dcqcn.warnings
        );
    }

    /// Links at rates ns-3's INT record does not code (10G, 40G) read as
    /// 25G in HPCC's update there: the run imitates it and says so.
    #[test]
    fn int_rates_ns3_does_not_code_read_as_25g() {
        let e = load_files(
            "40g",
            "3 1 2\n2\n0 2 40Gbps 1000ns 0\n1 2 100Gbps 1000ns 0\n",
            "1\n0 1 3 100 10000 2.000001\n",
            "CC_MODE 3\nPACKET_PAYLOAD_SIZE 1024\nKMAX_MAP 2 40000000000 160 100000000000 400\nKMIN_MAP 2 40000000000 40 100000000000 100\nPMAX_MAP 2 40000000000 0.2 100000000000 0.2\n",
        )
        .unwrap();
        assert!(
            e.warnings
                .iter()
                .any(|w| w.contains("40000000000 b/s") && w.contains("25 Gb/s")),
            "{:?}",
            e.warnings
        );
        let mut sim = crate::sim::Simulator::new(e.cfg.clone(), e.topo.clone(), &e.flows).unwrap();
        assert!(
            sim.int_rates.contains(&25_000_000_000),
            "{:?}",
            sim.int_rates
        );
        assert!(
            !sim.int_rates.contains(&40_000_000_000),
            "{:?}",
            sim.int_rates
        );
        sim.run().unwrap();
    }

    /// A flow through more than 5 switches warns under HPCC (ns-3's INT
    /// header overflows and its HPCC never updates the flow); 5 do not.
    #[test]
    fn hpcc_flows_past_five_switches_warn() {
        let chain = |switches: u32, tag: &str| {
            let ids: Vec<String> = (2..2 + switches).map(|i| i.to_string()).collect();
            let mut topo = format!(
                "{} {switches} {}\n{}\n",
                switches + 2,
                switches + 1,
                ids.join(" ")
            );
            topo += "0 2 100Gbps 1000ns 0\n";
            for i in 2..1 + switches {
                topo += &format!("{i} {} 100Gbps 1000ns 0\n", i + 1);
            }
            topo += &format!("{} 1 100Gbps 1000ns 0\n", 1 + switches);
            let flows = "2\n0 1 3 100 10000 2.000001\n1 0 3 100 10000 2.000001\n";
            let config = "CC_MODE 3\nPACKET_PAYLOAD_SIZE 1024\nKMAX_MAP 1 100000000000 400\nKMIN_MAP 1 100000000000 100\nPMAX_MAP 1 100000000000 0.2\n";
            load_files(&format!("chain-{tag}"), &topo, flows, config)
                .unwrap()
                .warnings
        };
        let six = chain(6, "six");
        assert!(
            six.iter()
                .any(|w| w.starts_with("2 flows cross more than 5 switches")),
            "{six:?}"
        );
        let five = chain(5, "five");
        assert!(!five.iter().any(|w| w.contains("switches:")), "{five:?}");
    }

    #[test]
    fn a_misspelt_key_warns_with_the_key_it_probably_meant() {
        let e = load_with("typo", "CC_MODE 3\nU_TARGETT 0.9\nFROBNICATE 1\n");
        let CcConfig::Hpcc(h) = e.cfg.cc else {
            panic!("{:?}", e.cfg.cc)
        };
        // As in ns-3, the misspelt key changes nothing.
        assert_eq!(h.eta, HpccSettings::default().eta);
        let w = e.warnings.join("\n");
        assert!(
            w.contains("unknown key U_TARGETT (ignored; did you mean U_TARGET?"),
            "{w}"
        );
        assert!(w.contains("unknown key FROBNICATE (ignored)"), "{w}");
    }

    /// The error of loading a config of `text` alone (no topology or flow
    /// files: the errors tested come before they are read).
    fn load_err(tag: &str, text: &str) -> HpccError {
        let d = std::env::temp_dir().join(format!("roce-hpcc-err-{tag}-{}", std::process::id()));
        std::fs::create_dir_all(&d).unwrap();
        std::fs::write(d.join("config.txt"), text).unwrap();
        let e = Experiment::load(&d.join("config.txt"), None).unwrap_err();
        let _ = std::fs::remove_dir_all(&d);
        e
    }

    /// An unknown or unimplemented mode is one error naming the file and
    /// line, not a line-rate run (ns-3 would run it without any controller).
    #[test]
    fn unknown_cc_modes_are_errors_naming_the_line() {
        for (mode, says) in [
            ("99", "unknown congestion-control mode `99`"),
            ("5", "unknown congestion-control mode `5`"),
            ("1.5", "unknown congestion-control mode `1.5`"),
        ] {
            let e = load_err("ccmode", &format!("ENABLE_QCN 1\nCC_MODE {mode}\n"));
            assert_eq!((e.line, e.field.as_str()), (2, "CC_MODE"), "{e}");
            assert!(e.msg.contains(says), "{e}");
        }
    }

    /// A host on two links (the HPCC repository's
    /// `mix/ali_32host_10rack.txt` puts every host on two ToRs) is one
    /// machine with a NIC per link, as ns-3's: the second link gets a
    /// node after the file's, its PFC lines name the host and interface
    /// 2, and each flow's QPs sit on the NICs ns-3's hash picks. Packets
    /// reach whichever NIC the fabric brings them to and go to their QP.
    #[test]
    fn a_multi_homed_host_gets_a_nic_per_link() {
        use crate::ecmp::ns3::qp_hash;
        // Hosts 0 and 1, each on switches 2 and 3; nothing else.
        let topo = "4 2 4\n2 3\n0 2 100Gbps 1000ns 0\n1 2 100Gbps 1000ns 0\n\
                    0 3 100Gbps 1000ns 0\n1 3 100Gbps 1000ns 0\n";
        let mut flows = String::from("24\n");
        for i in 0..24 {
            let (s, d) = if i % 2 == 0 { (0, 1) } else { (1, 0) };
            flows += &format!("{s} {d} 3 100 20000 {}\n", 2.0 + f64::from(i) * 1e-6);
        }
        let ecn = "KMAX_MAP 1 100000000000 400\nKMIN_MAP 1 100000000000 100\n\
                   PMAX_MAP 1 100000000000 0.2\nCC_MODE 1\n";
        let e = load_files("dual", topo, &flows, ecn).unwrap();
        let t = &e.topo;
        let names: Vec<&str> = t.nodes.iter().map(|n| n.name.as_str()).collect();
        assert_eq!(
            names,
            [
                "host0",
                "host1",
                "switch2",
                "switch3",
                "host0.nic2",
                "host1.nic2"
            ]
        );
        assert_eq!(t.machine, [0, 1, 2, 3, 0, 1]);
        assert_eq!(e.host_ids, [0, 1, 0, 1]);
        assert_eq!(
            e.nic_nodes,
            [
                NicNode {
                    node: 4,
                    host: 0,
                    if_index: 2
                },
                NicNode {
                    node: 5,
                    host: 1,
                    if_index: 2
                },
            ]
        );
        // Both NICs of either host are two hops from the other host, in
        // the order ns-3's search from the peer reaches their switches:
        // switches by decreasing id (see `ns3_pointer_rank`), so the NIC
        // on switch 3 (host index 2 or 3) first, then the host's own node.
        let nics = |h: u32| [h + 2, h];
        let ip = |h: u32| hpcc_ip(h);
        let ports = ns3_flow_ports(&read_flows_of(&flows), &[100; 24]);
        let mut split = [false; 2];
        for (i, (f, &(sport, dport))) in e.flows.iter().zip(&ports).enumerate() {
            let (s, d) = (e.host_ids[f.src as usize], e.host_ids[f.dst as usize]);
            let tx = nics(s)[(qp_hash(ip(s), ip(d), sport, dport) % 2) as usize];
            let rx = nics(d)[(qp_hash(ip(d), ip(s), dport, sport) % 2) as usize];
            assert_eq!((f.src, f.dst), (tx, rx), "flow {i} ({sport})");
            split[usize::from(f.src < 2)] = true;
        }
        assert_eq!(split, [true, true], "the hash uses both NICs");
        // The run: a sender's data reaches the receiver at the NIC on its
        // own switch, whichever NIC the receiving QP is on (half the
        // flows here), and the ACKs likewise. Every flow finishes, and
        // every NIC sends.
        let mut sim = crate::sim::Simulator::new(e.cfg.clone(), e.topo.clone(), &e.flows).unwrap();
        sim.run().unwrap();
        let r = sim.report();
        assert_eq!(r.summary(1.0).flows.finished, 24);
        for node in [0, 1, 4, 5] {
            let sent: u64 = (r.ports.iter())
                .filter(|p| p.node == node)
                .map(|p| p.tx_bytes)
                .sum();
            assert!(sent > 0, "NIC node {node} sent nothing");
        }
        // A PFC line of the second NIC names the host and interface 2.
        let r = Report {
            pfc: vec![crate::metrics::PfcEvent {
                time: 7 * PS_PER_NS,
                node: 5,
                port: 0,
                prio: 3,
                what: "pause",
            }],
            host_nodes: vec![0, 1, 4, 5],
            ..sim.report()
        };
        let mut out = Vec::new();
        write_pfc(&r, &crate::ns3_trace::node_ids(&e.topo), &mut out).unwrap();
        assert_eq!(String::from_utf8(out).unwrap(), "7 1 0 2 1\n");
    }

    /// A link failure in a fabric of multi-homed hosts runs, with a
    /// warning where ours differs: a QP keeps the NIC it started on.
    #[test]
    fn a_link_failure_with_multi_homed_hosts_warns() {
        let topo = "5 3 6\n2 3 4\n0 2 100Gbps 1000ns 0\n0 3 100Gbps 1000ns 0\n\
                    1 2 100Gbps 1000ns 0\n1 3 100Gbps 1000ns 0\n\
                    2 4 100Gbps 1000ns 0\n3 4 100Gbps 1000ns 0\n";
        let config = "KMAX_MAP 1 100000000000 400\nKMIN_MAP 1 100000000000 100\n\
                      PMAX_MAP 1 100000000000 0.2\nCC_MODE 1\nLINK_DOWN 500 2 4\n";
        let e = load_files("dual-down", topo, "1\n0 1 3 100 10000 2.0\n", config).unwrap();
        assert_eq!(e.cfg.link_failures.len(), 1);
        assert!(
            e.warnings
                .iter()
                .any(|w| w.contains("config.txt:7: LINK_DOWN with multi-homed")),
            "{:?}",
            e.warnings
        );
    }

    /// `TRACE_OUTPUT_FILE`, `ENABLE_TRACE` and `TRACE_FILE` as third.cc
    /// reads them: the file only where named, records unless ENABLE_TRACE
    /// is 0 (its default is 1), the nodes from TRACE_FILE, which must then
    /// exist and name nodes of the topology; errors name the line.
    #[test]
    fn the_packet_trace_keys_read_as_third_cc_reads_them() {
        let d = std::env::temp_dir().join(format!("roce-hpcc-trace-{}", std::process::id()));
        std::fs::create_dir_all(&d).unwrap();
        std::fs::write(
            d.join("topo.txt"),
            "3 1 2\n2\n0 2 100Gbps 1000ns 0\n1 2 100Gbps 1000ns 0\n",
        )
        .unwrap();
        std::fs::write(d.join("flow.txt"), "1\n0 1 3 100 10000 2.0\n").unwrap();
        std::fs::write(d.join("trace.txt"), "2\n0 2\n").unwrap();
        std::fs::write(d.join("bad_trace.txt"), "2\n0 7\n").unwrap();
        let load = |extra: &str| {
            std::fs::write(
                d.join("config.txt"),
                format!(
                    "TOPOLOGY_FILE topo.txt\nFLOW_FILE flow.txt\nCC_MODE 1\nENABLE_QCN 0\n{extra}"
                ),
            )
            .unwrap();
            Experiment::load(&d.join("config.txt"), None)
        };
        assert_eq!(load("").unwrap().trace, None, "no file named: none written");
        let t = load("TRACE_FILE trace.txt\nTRACE_OUTPUT_FILE out/mix.tr\n")
            .unwrap()
            .trace
            .unwrap();
        assert!(t.enabled, "third.cc's ENABLE_TRACE is 1 by default");
        assert_eq!(t.nodes, [0, 2]);
        assert_eq!((t.output.key, t.output.line), ("TRACE_OUTPUT_FILE", 6));
        assert_eq!(t.output.path, PathBuf::from("out/mix.tr"));
        assert!(t.win > 0);
        let t = load("TRACE_OUTPUT_FILE mix.tr\nENABLE_TRACE 0\n")
            .unwrap()
            .trace
            .unwrap();
        assert!(
            !t.enabled && t.nodes.is_empty(),
            "no TRACE_FILE needed for the header alone"
        );
        for (extra, field, line, says) in [
            ("TRACE_OUTPUT_FILE mix.tr\n", "TRACE_FILE", 5, "required"),
            (
                "TRACE_FILE bad_trace.txt\nTRACE_OUTPUT_FILE mix.tr\n",
                "node id",
                2,
                "below 3",
            ),
            (
                "TRACE_FILE nope.txt\nTRACE_OUTPUT_FILE mix.tr\n",
                "(file)",
                0,
                "cannot read",
            ),
            (
                "FCT_OUTPUT_FILE x.txt\nTRACE_OUTPUT_FILE x.txt\nENABLE_TRACE 0\n",
                "TRACE_OUTPUT_FILE",
                6,
                "also FCT_OUTPUT_FILE",
            ),
        ] {
            let e = load(extra).unwrap_err();
            assert_eq!((e.field.as_str(), e.line), (field, line), "{extra}: {e}");
            assert!(e.msg.contains(says), "{extra}: {e}");
        }
        let _ = std::fs::remove_dir_all(&d);
    }

    /// The flow file's `(src, dst)` pairs, for [`ns3_flow_ports`].
    fn read_flows_of(text: &str) -> Vec<FlowSpec> {
        let d = std::env::temp_dir().join(format!("roce-hpcc-flows-{}", std::process::id()));
        std::fs::write(&d, text).unwrap();
        let (f, _) = read_flows(&d, &[0, 1]).unwrap();
        let _ = std::fs::remove_file(&d);
        f
    }

    /// A multi-homed host's links must reach distinct switches (ns-3
    /// keeps one route per neighbour node) and never another host: an
    /// error at the offending line.
    #[test]
    fn a_multi_homed_host_needs_distinct_switches() {
        for (topo, says) in [
            (
                "3 1 2\n2\n0 2 25Gbps 1000ns 0\n0 2 25Gbps 1000ns 0\n",
                "second link to node 2",
            ),
            (
                "3 1 2\n2\n0 2 25Gbps 1000ns 0\n0 1 25Gbps 1000ns 0\n",
                "linked straight to host 1",
            ),
        ] {
            let Err(e) = load_files("dual-bad", topo, "1\n0 1 3 100 10000 2.0\n", "CC_MODE 1\n")
            else {
                panic!("{topo} loaded");
            };
            assert_eq!((e.line, e.field.as_str()), (4, "src/dst"), "{e}");
            assert!(e.msg.contains(says), "{e}");
        }
    }

    /// CC_MODE 10 is HPCC-PINT with third.cc's defaults (base 1.05, every
    /// ACK read) or the config's, HPCC's knobs read as mode 3 reads them,
    /// a 2-byte code in every data packet and ACK, and T the fabric's.
    #[test]
    fn cc_mode_10_is_hpcc_pint() {
        let e = load_with(
            "pint",
            "CC_MODE 10\nU_TARGET 0.9\nMI_THRESH 3\nRATE_AI 40Mb/s\n",
        );
        let CcConfig::HpccPint(p) = e.cfg.cc else {
            panic!("{:?}", e.cfg.cc)
        };
        assert_eq!((p.log_base, p.prob), (1.05, 1.0));
        assert_eq!((p.hpcc.eta, p.hpcc.max_stage), (0.9, 3));
        assert_eq!(p.hpcc.rate_ai_bps, Some(40_000_000));
        assert!(p.hpcc.base_rtt_ns.is_some_and(|t| t > 0));
        assert_eq!(e.cfg.int_wire_bytes, 2);
        assert!(!e.cfg.int, "no per-hop INT records");
        assert!(
            e.warnings.iter().all(|w| !w.contains("PINT")),
            "{:?}",
            e.warnings
        );
        let e = load_with(
            "pint-set",
            "CC_MODE 10\nPINT_LOG_BASE 1.01\nPINT_PROB 0.0625\n",
        );
        let CcConfig::HpccPint(p) = e.cfg.cc else {
            panic!()
        };
        assert_eq!((p.log_base, p.prob), (1.01, 0.0625));
        for (extra, field) in [
            ("PINT_LOG_BASE 1", "PINT_LOG_BASE"),
            ("PINT_PROB 0", "PINT_PROB"),
        ] {
            let e = load_err("pint", &format!("ENABLE_QCN 1\nCC_MODE 10\n{extra}\n"));
            assert_eq!((e.line, e.field.as_str()), (3, field), "{e}");
        }
    }

    #[test]
    fn cc_mode_7_is_timely_with_ns3_defaults() {
        let e = load_with("timely", "CC_MODE 7\nHAS_WIN 0\n");
        assert_eq!(e.cfg.cc, CcConfig::Timely(TimelyConfig::hpcc_ns3()));
        let CcConfig::Timely(t) = e.cfg.cc else {
            unreachable!()
        };
        // rdma-hw.cc's TypeId defaults.
        assert_eq!((t.alpha, t.beta), (0.875, 0.8));
        assert_eq!(
            (t.t_low_ns, t.t_high_ns, t.min_rtt_ns),
            (50_000, 500_000, 20_000)
        );
        assert_eq!((t.delta_bps, t.hai_delta_bps), (5_000_000, 50_000_000));
        assert!(
            e.warnings
                .iter()
                .all(|w| !w.contains("CC_MODE") && !w.contains("HAS_WIN")),
            "{:?}",
            e.warnings
        );
        let e = load_with(
            "timely-keys",
            "CC_MODE 7\nRATE_AI 20Mb/s\nRATE_HAI 200Mb/s\nMIN_RATE 1000Mb/s\n",
        );
        let CcConfig::Timely(t) = e.cfg.cc else {
            panic!("{:?}", e.cfg.cc)
        };
        assert_eq!(
            (t.delta_bps, t.hai_delta_bps, t.min_rate_bps),
            (20_000_000, 200_000_000, 1_000_000_000)
        );
        // HAS_WIN 1 (third.cc's default): ns-3's window over the rate,
        // the fabric's largest BDP (here one 100G hop each way: 1 µs
        // links, 1000-byte packets), not scaled without VAR_WIN 1.
        let w = e.cfg.ns3_window.expect("HAS_WIN defaults to 1");
        assert!(!w.var_win);
        assert!((20_000..60_000).contains(&w.bytes), "{w:?}");
        assert_eq!(e.cfg.int_wire_bytes, 8, "TIMELY's timestamp field");
        let v = load_with("timely-var", "CC_MODE 7\nVAR_WIN 1\n");
        assert_eq!(v.cfg.ns3_window, Some(Ns3Window { var_win: true, ..w }));
        for (mode, ours) in [
            ("3", false),
            ("10", false),
            ("0", true),
            ("1", true),
            ("8", true),
        ] {
            let e = load_with("win-modes", &format!("CC_MODE {mode}\n"));
            assert_eq!(e.cfg.ns3_window.is_some(), ours, "CC_MODE {mode}");
        }
        assert!(
            load_with("timely", "CC_MODE 7\nHAS_WIN 0\n")
                .cfg
                .ns3_window
                .is_none()
        );
    }

    #[test]
    fn cc_mode_8_is_dctcp_with_ns3_defaults() {
        let e = load_with("dctcp", "CC_MODE 8\nHAS_WIN 0\n");
        assert_eq!(e.cfg.cc, CcConfig::Dctcp(DctcpSettings::default()));
        let e = load_with(
            "dctcp-keys",
            "CC_MODE 8\nEWMA_GAIN 0.125\nDCTCP_RATE_AI 500Mb/s\nHAS_WIN 0\n",
        );
        let CcConfig::Dctcp(d) = e.cfg.cc else {
            panic!("{:?}", e.cfg.cc)
        };
        assert_eq!((d.g, d.rate_ai_bps, d.window), (0.125, 500_000_000, false));
    }

    /// Hosts 0 (400 Gb/s) and 1 (100 Gb/s) each send 1 MB to host 2
    /// (100 Gb/s) through switch 3 with a 1 MB buffer and a static XOFF
    /// threshold (1/8 of it): both ingress ports of the switch pause
    /// their senders. Returns the experiment and its report, PFC frames
    /// captured.
    fn mixed_speed_incast(tag: &str, extra: &str) -> (Experiment, Report) {
        let d = std::env::temp_dir().join(format!("roce-hpcc-{tag}-{}", std::process::id()));
        std::fs::create_dir_all(&d).unwrap();
        std::fs::write(
            d.join("topo.txt"),
            "4 1 3\n3\n0 3 400Gbps 1000ns 0\n1 3 100Gbps 1000ns 0\n2 3 100Gbps 1000ns 0\n",
        )
        .unwrap();
        std::fs::write(
            d.join("flow.txt"),
            "2\n0 2 3 100 1000000 0.000001\n1 2 3 100 1000000 0.000001\n",
        )
        .unwrap();
        std::fs::write(
            d.join("config.txt"),
            format!("TOPOLOGY_FILE topo.txt\nFLOW_FILE flow.txt\nCC_MODE 0\nENABLE_QCN 0\nBUFFER_SIZE 1\nUSE_DYNAMIC_PFC_THRESHOLD 0\n{extra}"),
        )
        .unwrap();
        let mut e = Experiment::load(&d.join("config.txt"), None).unwrap();
        let _ = std::fs::remove_dir_all(&d);
        e.cfg.capture_pfc = true;
        let mut sim = crate::sim::Simulator::new(e.cfg.clone(), e.topo.clone(), &e.flows).unwrap();
        sim.run().unwrap();
        let r = sim.report();
        (e, r)
    }

    #[test]
    fn pause_time_is_one_time_in_the_quanta_of_each_link() {
        let e = load_with("pause-time", "CC_MODE 1\nPAUSE_TIME 5.9\n");
        assert_eq!(
            e.cfg.buffer.pause_time_ps,
            Some(5 * PS_PER_US),
            "whole µs, as ns-3 keeps it"
        );
        let d = std::env::temp_dir().join(format!("roce-hpcc-pause0-{}", std::process::id()));
        std::fs::create_dir_all(&d).unwrap();
        std::fs::write(d.join("config.txt"), "CC_MODE 1\nPAUSE_TIME 0.5\n").unwrap();
        let err = Experiment::load(&d.join("config.txt"), None).unwrap_err();
        let _ = std::fs::remove_dir_all(&d);
        assert_eq!((err.line, err.field.as_str()), (2, "PAUSE_TIME"), "{err}");

        let (e, r) = mixed_speed_incast("pause-quanta", "PAUSE_TIME 5\n");
        assert!(
            e.warnings.iter().all(|w| !w.contains("PAUSE_TIME")),
            "{:?}",
            e.warnings
        );
        // Each XOFF names its sender (node, port) in its source MAC.
        let mut rates = Vec::new();
        for (_, f) in &r.pfc_frames {
            let (node, port) = (u32::from_be_bytes([0, f[8], f[9], f[10]]), f[11]);
            let pfc = roce_wire::PfcRepr::parse(&f[14..]).unwrap();
            let q = pfc.quanta[usize::from(e.cfg.data_prio)];
            if q == 0 {
                continue; // XON
            }
            let rate = e.topo.ports[node as usize][usize::from(port)].rate_bps;
            assert_eq!(
                q,
                quanta_for(5 * PS_PER_US, rate),
                "XOFF from node {node} port {port} at {rate} b/s"
            );
            assert_eq!(
                pfc.pause_ns(e.cfg.data_prio, rate).map(|ns| ns / 1000),
                Some(5),
                "5 µs at {rate} b/s"
            );
            rates.push(rate);
        }
        rates.sort_unstable();
        rates.dedup();
        assert_eq!(
            rates,
            [100_000_000_000, 400_000_000_000],
            "XOFF went out on both speeds"
        );
        // 3907 quanta at 400 Gb/s, 977 at 100 Gb/s: the same 5 µs.
        assert_eq!(quanta_for(5 * PS_PER_US, 400_000_000_000), 3907);
        assert_eq!(quanta_for(5 * PS_PER_US, 100_000_000_000), 977);

        // A time too short to be refreshed over a 1 µs link, and one too
        // long for a frame's 0xffff quanta (335.5 µs at 100 Gb/s), are said.
        let e = load_with("pause-short", "CC_MODE 1\nPAUSE_TIME 1\n");
        assert!(
            e.warnings
                .iter()
                .any(|w| w.contains("lapses between refreshes")),
            "{:?}",
            e.warnings
        );
        let e = load_with("pause-long", "CC_MODE 1\nPAUSE_TIME 400\n");
        assert!(
            e.warnings
                .iter()
                .any(|w| w.contains("PAUSE_TIME 400 µs is more than") && w.contains("at 100 Gb/s")),
            "{:?}",
            e.warnings
        );
        let e = load_with("pause-fits", "CC_MODE 1\nPAUSE_TIME 300\n");
        assert!(
            e.warnings.iter().all(|w| !w.contains("PAUSE_TIME")),
            "{:?}",
            e.warnings
        );
    }

    #[test]
    fn pfc_csv_and_the_pfc_file_number_nodes_and_ports_alike() {
        let (e, r) = mixed_speed_incast("pfc-numbering", "");
        assert!(r.pfc.iter().any(|p| p.what == "pause"), "the incast pauses");
        let mut csv = Vec::new();
        r.write_pfc_csv(&mut csv).unwrap();
        let mut txt = Vec::new();
        write_pfc(&r, &[], &mut txt).unwrap();
        // pfc.csv's pause/resume/expire rows (at the paused port), in
        // ns-3's numbering: node id from the name, if_index = port + 1.
        let from_csv: Vec<String> = String::from_utf8(csv)
            .unwrap()
            .lines()
            .skip(1)
            .filter_map(|l| {
                let c: Vec<&str> = l.split(',').collect();
                let kind = match c[4] {
                    "pause" => 1,
                    "resume" | "expire" => 0,
                    _ => return None,
                };
                let id: u32 = c[1]
                    .trim_start_matches(char::is_alphabetic)
                    .parse()
                    .unwrap();
                let port: u32 = c[2].parse().unwrap();
                let node_type = u32::from(c[1].starts_with("switch"));
                // pfc.csv keeps ps (ns with 3 decimals); ns-3's file whole ns.
                let ns = c[0].split('.').next().unwrap();
                Some(format!("{ns} {id} {node_type} {} {kind}", port + 1))
            })
            .collect();
        let from_txt: Vec<String> = String::from_utf8(txt)
            .unwrap()
            .lines()
            .map(str::to_string)
            .collect();
        assert!(!from_txt.is_empty());
        assert_eq!(from_csv, from_txt);
        // The hosts are paused on their one port: ns-3's device 1 (0 is
        // the loopback), pfc.csv's port 0; host 0 is node 0 in both.
        assert!(
            from_txt.iter().any(|l| l.split(' ').nth(1) == Some("0")),
            "{from_txt:?}"
        );
        assert!(
            from_txt.iter().all(|l| l.split(' ').nth(3) == Some("1")),
            "{from_txt:?}"
        );
        assert_eq!(e.host_ids, [0, 1, 2]);
    }

    #[test]
    fn a_gain_out_of_range_is_one_error_with_its_line() {
        let e = load_err("gain", "CC_MODE 8\nEWMA_GAIN -0.5\n");
        assert_eq!((e.line, e.field.as_str()), (2, "EWMA_GAIN"), "{e}");
        assert!(e.msg.contains("0 < g ≤ 1"), "{e}");
    }
}
