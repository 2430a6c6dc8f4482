//! The scenario file: a TOML description of a fabric, its switches, its
//! transport settings and its traffic, checked field by field.
//!
//! Every mistake is reported as one line naming the file, the line, the
//! field and what was expected, e.g.
//! `incast.toml:12: topology.hosts: expected at least 2 hosts, got 1`.
//! The schema is documented in `scenarios/README.md`.

use crate::cc::CcConfig;
use crate::ecn::EcnConfig;
use crate::event::{PS_PER_NS, PS_PER_US, Ps};
use crate::link::Scheduler;
use crate::pfc::{BufferConfig, Threshold};
use crate::sim::{EcnPolicy, SimConfig};
use crate::topology::{Builder, Topology, gbps};
use crate::workload::{self, Cdf, FlowOp, FlowSpec};
use rand_chacha::ChaCha8Rng;
use rand_chacha::rand_core::SeedableRng;
use roce_rnic::Mtu;
use roce_rnic::cc::CcParams;
use serde::Deserialize;
use std::path::{Path, PathBuf};
use toml::de::{DeTable, DeValue};

/// A scenario mistake, located.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{file}:{line}: {field}: {msg}")]
pub struct ScenarioError {
    pub file: String,
    pub line: usize,
    pub field: String,
    pub msg: String,
}

#[derive(Debug, Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct File {
    name: Option<String>,
    seed: Option<u64>,
    stop_us: Option<f64>,
    #[serde(default)]
    transport: Transport,
    #[serde(default)]
    switch: Switch,
    cc: Option<CcParams>,
    topology: Option<Topo>,
    #[serde(default)]
    workload: Vec<Work>,
    #[serde(default)]
    output: Output,
    host: Option<HostTable>,
    #[serde(default)]
    link_down: Vec<LinkDown>,
    /// The chance that any link loses a frame it carries.
    loss_rate: Option<f64>,
}

/// `[[link_down]]`: the link between switches `a` and `b` (node names)
/// fails at `at_us` (see [`crate::sim::LinkFailure`]).
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct LinkDown {
    at_us: f64,
    a: String,
    b: String,
}

/// `[host]`: the hardware profile every host runs on, and per-host
/// overrides (`[[host.override]]`).
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct HostTable {
    profile: String,
    inline: Option<bool>,
    numa: Option<String>,
    sges: Option<u32>,
    #[serde(default, rename = "override")]
    overrides: Vec<HostOverride>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct HostOverride {
    hosts: Vec<HostRef>,
    profile: Option<String>,
    inline: Option<bool>,
    numa: Option<String>,
    sges: Option<u32>,
}

#[derive(Debug, Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct Transport {
    mtu: Option<u32>,
    op: Option<String>,
    data_priority: Option<u8>,
    control_priority: Option<u8>,
    ack_every: Option<u32>,
    timeout: Option<u8>,
    retry_cnt: Option<u8>,
    ecn: Option<bool>,
    cnp_interval_us: Option<f64>,
    /// Preamble + inter-frame gap bytes per frame.
    ifg_bytes: Option<u64>,
    message_bytes: Option<u64>,
    signal_every: Option<u32>,
    /// "gbn" (go-back-N) or "irn".
    recovery: Option<String>,
    /// IRN's BDP-FC limit in packets.
    bdp_pkts: Option<u32>,
    /// IRN's two retransmission timeouts.
    rto_low_us: Option<f64>,
    rto_high_us: Option<f64>,
    /// DSCP of data packets (default 8 × data_priority).
    data_dscp: Option<u8>,
    /// DSCP of CNPs (default 8 × control_priority).
    cnp_dscp: Option<u8>,
    /// Per-QP rate limit of every sender QP.
    qp_rate_limit_gbps: Option<f64>,
}

#[derive(Debug, Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct Switch {
    buffer_kb: Option<u64>,
    reserve_bytes: Option<u64>,
    pfc: Option<String>,
    alpha: Option<f64>,
    xoff_bytes: Option<u64>,
    xon_offset_bytes: Option<u64>,
    headroom_bytes: Option<u64>,
    lossless_priorities: Option<Vec<u8>>,
    pause_quanta: Option<u16>,
    scheduler: Option<String>,
    dwrr_weights: Option<Vec<u32>>,
    int: Option<bool>,
    ecn: Option<Ecn>,
    ecn_by_speed: Option<Vec<EcnSpeed>>,
    /// Per-priority thresholds, keyed by priority ("0".."7").
    ecn_priority: Option<std::collections::BTreeMap<String, Ecn>>,
    /// DSCP ("0".."63") → priority; unlisted DSCPs map to DSCP / 8.
    dscp_to_prio: Option<std::collections::BTreeMap<String, u8>>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Ecn {
    kmin_kb: f64,
    kmax_kb: f64,
    pmax: f64,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct EcnSpeed {
    gbps: f64,
    kmin_kb: f64,
    kmax_kb: f64,
    pmax: f64,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Topo {
    kind: String,
    hosts: Option<toml::Value>,
    host_gbps: Option<f64>,
    link_delay_ns: Option<f64>,
    left: Option<usize>,
    right: Option<usize>,
    core_gbps: Option<f64>,
    leaves: Option<usize>,
    spines: Option<usize>,
    hosts_per_leaf: Option<usize>,
    oversubscription: Option<f64>,
    spine_gbps: Option<f64>,
    pods: Option<usize>,
    tors_per_pod: Option<usize>,
    aggs_per_pod: Option<usize>,
    hosts_per_tor: Option<usize>,
    cores: Option<usize>,
    fabric_gbps: Option<f64>,
    switches: Option<Vec<String>>,
    links: Option<Vec<LinkSpec>>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct LinkSpec {
    a: String,
    b: String,
    gbps: f64,
    delay_ns: Option<f64>,
}

#[derive(Debug, Deserialize, Clone)]
#[serde(untagged)]
enum HostRef {
    Index(u32),
    Name(String),
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct FlowLine {
    src: HostRef,
    dst: HostRef,
    size: u64,
    start_us: Option<f64>,
    op: Option<String>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Work {
    kind: String,
    flows: Option<Vec<FlowLine>>,
    load: Option<f64>,
    cdf: Option<String>,
    duration_us: Option<f64>,
    start_us: Option<f64>,
    hosts: Option<Vec<HostRef>>,
    senders: Option<Vec<HostRef>>,
    dst: Option<HostRef>,
    size: Option<u64>,
}

#[derive(Debug, Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct Output {
    sample_us: Option<f64>,
    trace_flows: Option<usize>,
    capture_pfc: Option<bool>,
    deadlock_us: Option<f64>,
}

/// A loaded scenario, ready to simulate.
#[derive(Debug, Clone)]
pub struct Scenario {
    pub name: String,
    pub cfg: SimConfig,
    pub topo: Topology,
    pub flows: Vec<FlowSpec>,
}

/// 1-based line of byte offset `at` in `src`.
fn byte_line(src: &str, at: usize) -> usize {
    src.as_bytes()[..at.min(src.len())]
        .iter()
        .filter(|&&b| b == b'\n')
        .count()
        + 1
}

/// An unknown key of the `[cc]` table at `span`: its name as `cc.KEY` and
/// the keys of the algorithm the table chose (serde's own message lists
/// every algorithm's), as `roce perf --cc-param` words it.
fn unknown_cc_key(src: &str, span: std::ops::Range<usize>) -> Option<(String, String)> {
    let doc = DeTable::parse(src).ok()?;
    let cc = doc.get_ref().iter().find_map(|(k, v)| match v.get_ref() {
        DeValue::Table(t) if k.get_ref().as_ref() == "cc" => Some(t),
        _ => None,
    })?;
    let key = cc
        .iter()
        .find(|(k, _)| k.span() == span)
        .map(|(k, _)| k.get_ref().to_string())?;
    let alg = cc.iter().find_map(|(k, v)| match v.get_ref() {
        DeValue::String(a) if k.get_ref().as_ref() == "algorithm" => Some(a.to_string()),
        _ => None,
    });
    let msg = match alg {
        Some(alg) if !roce_rnic::cc::params::keys_of(&alg).is_empty() => format!(
            "not a parameter of algorithm \"{alg}\" (its parameters: {})",
            roce_rnic::cc::params::keys_of(&alg).join(", ")
        ),
        _ => "not a congestion-control parameter (set `algorithm` to one of \"none\", \"dcqcn\", \"hpcc\", \"timely\", \"dctcp\", \"swift\" to see its parameters)".to_string(),
    };
    Some((format!("cc.{key}"), msg))
}

/// The span of `key` in `table`, or in its sub-tables (depth first).
fn key_span(table: &DeTable<'_>, key: &str) -> Option<std::ops::Range<usize>> {
    if let Some((k, _)) = table.iter().find(|(k, _)| k.get_ref().as_ref() == key) {
        return Some(k.span());
    }
    table.iter().find_map(|(_, v)| match v.get_ref() {
        DeValue::Table(t) => key_span(t, key),
        _ => None,
    })
}

/// Where a field lives in the file: `[section]` or the `index`-th
/// `[[section]]`, and the key.
struct Loc<'a> {
    section: &'a str,
    index: Option<usize>,
    key: &'a str,
}

struct Ctx<'a> {
    file: String,
    src: &'a str,
    base: PathBuf,
}

impl Ctx<'_> {
    /// The 1-based line of `loc.key` in its section (or in one of the
    /// section's sub-tables, such as `[switch.ecn]` for `switch`), else of
    /// the section itself, else line 1 — read from toml's spanned document,
    /// so it is the line the parser saw, however the file is laid out
    /// (dotted keys, inline tables, comments).
    fn line_of(&self, loc: &Loc<'_>) -> usize {
        let Ok(doc) = DeTable::parse(self.src) else {
            return 1;
        };
        let mut table: &DeTable<'_> = doc.get_ref();
        let mut at: Option<std::ops::Range<usize>> = None;
        for part in loc.section.split('.').filter(|p| !p.is_empty()) {
            let Some((key, value)) = table.iter().find(|(k, _)| k.get_ref().as_ref() == part)
            else {
                return at.map_or(1, |s| byte_line(self.src, s.start));
            };
            at = Some(key.span());
            table = match value.get_ref() {
                DeValue::Table(t) => t,
                DeValue::Array(items) => {
                    let item = items.get(loc.index.unwrap_or(0));
                    match item.map(|i| (i.span(), i.get_ref())) {
                        Some((span, DeValue::Table(t))) => {
                            at = Some(span);
                            t
                        }
                        _ => return at.map_or(1, |s| byte_line(self.src, s.start)),
                    }
                }
                _ => return at.map_or(1, |s| byte_line(self.src, s.start)),
            };
        }
        key_span(table, loc.key)
            .or(at)
            .map_or(1, |s| byte_line(self.src, s.start))
    }

    fn err(&self, loc: Loc<'_>, msg: impl Into<String>) -> ScenarioError {
        let field = match (loc.section, loc.index) {
            ("", _) => loc.key.to_string(),
            (s, Some(i)) => format!("{s}[{i}].{}", loc.key),
            (s, None) => format!("{s}.{}", loc.key),
        };
        ScenarioError {
            file: self.file.clone(),
            line: self.line_of(&loc),
            field,
            msg: msg.into(),
        }
    }
}

fn loc<'a>(section: &'a str, key: &'a str) -> Loc<'a> {
    Loc {
        section,
        index: None,
        key,
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

fn ps_from_us(us: f64) -> Ps {
    (us * PS_PER_US as f64).round() as Ps
}

fn bps_from_gbps(g: f64) -> u64 {
    (g * 1e9).round() as u64
}

impl Scenario {
    /// Reads and checks `path`; `seed` overrides the file's seed.
    pub fn load(path: &Path, seed: Option<u64>) -> Result<Scenario, ScenarioError> {
        let file = path.display().to_string();
        let src = std::fs::read_to_string(path).map_err(|e| ScenarioError {
            file: file.clone(),
            line: 0,
            field: "(file)".into(),
            msg: format!("cannot read: {e}"),
        })?;
        let base = path.parent().map(Path::to_path_buf).unwrap_or_default();
        Self::parse(&src, &file, &base, seed)
    }

    /// Parses scenario text. `file` names it in messages; relative CDF
    /// paths are resolved against `base`.
    pub fn parse(
        src: &str,
        file: &str,
        base: &Path,
        seed: Option<u64>,
    ) -> Result<Scenario, ScenarioError> {
        let ctx = Ctx {
            file: file.to_string(),
            src,
            base: base.to_path_buf(),
        };
        let f: File = toml::from_str(src).map_err(|e| {
            let line = e
                .span()
                .map(|s| src[..s.start.min(src.len())].matches('\n').count() + 1)
                .unwrap_or(1);
            let msg = e.message().trim().to_string();
            let field = msg
                .split('`')
                .nth(1)
                .filter(|_| msg.contains("field"))
                .unwrap_or("(syntax)")
                .to_string();
            if msg.starts_with("unknown field")
                && let Some((field, msg)) = e.span().and_then(|s| unknown_cc_key(src, s))
            {
                return ScenarioError {
                    file: file.to_string(),
                    line,
                    field,
                    msg,
                };
            }
            ScenarioError {
                file: file.to_string(),
                line,
                field,
                msg,
            }
        })?;
        build(&ctx, f, seed)
    }
}

/// The `[cc]` table, checked by the RNIC's parser (shared with `roce perf
/// --cc`); its errors are located at their key's line.
fn build_cc(ctx: &Ctx<'_>, c: &CcParams) -> Result<(CcConfig, Option<u64>), ScenarioError> {
    let choice = c.build().map_err(|e| ctx.err(loc("cc", &e.key), e.msg))?;
    Ok((choice.cc, choice.cnp_interval_ns))
}

fn build(ctx: &Ctx<'_>, f: File, seed: Option<u64>) -> Result<Scenario, ScenarioError> {
    let mut cfg = SimConfig {
        seed: seed.or(f.seed).unwrap_or(1),
        ..SimConfig::default()
    };
    if let Some(s) = f.stop_us {
        if !positive(s) {
            return Err(ctx.err(loc("", "stop_us"), "expected a positive number of µs"));
        }
        cfg.stop = Some(ps_from_us(s));
    }
    // Transport.
    let t = &f.transport;
    if let Some(m) = t.mtu {
        cfg.mtu = Mtu::from_bytes(m).ok_or_else(|| {
            ctx.err(
                loc("transport", "mtu"),
                format!("expected one of 256, 512, 1024, 2048, 4096, got {m}"),
            )
        })?;
    }
    let op = match t.op.as_deref() {
        None | Some("write") => FlowOp::Write,
        Some("send") => FlowOp::Send,
        Some(o) => {
            return Err(ctx.err(
                loc("transport", "op"),
                format!("expected \"write\" or \"send\", got \"{o}\""),
            ));
        }
    };
    for (key, v) in [
        ("data_priority", t.data_priority),
        ("control_priority", t.control_priority),
    ] {
        if v.is_some_and(|p| p > 7) {
            return Err(ctx.err(loc("transport", key), "expected a priority 0..=7"));
        }
    }
    cfg.data_prio = t.data_priority.unwrap_or(cfg.data_prio);
    cfg.control_prio = t.control_priority.unwrap_or(cfg.control_prio);
    if let Some(a) = t.ack_every {
        if a == 0 {
            return Err(ctx.err(loc("transport", "ack_every"), "expected at least 1"));
        }
        cfg.rnic.ack_req_every = a;
    }
    if let Some(v) = t.timeout {
        if v > 31 {
            return Err(ctx.err(loc("transport", "timeout"), "expected 0..=31"));
        }
        cfg.qp_timeout = v;
    }
    if let Some(v) = t.retry_cnt {
        if v > 7 {
            return Err(ctx.err(loc("transport", "retry_cnt"), "expected 0..=7"));
        }
        cfg.retry_cnt = v;
    }
    cfg.rnic.ecn = t.ecn.unwrap_or(true);
    if let Some(us) = t.cnp_interval_us {
        if !nonneg(us) {
            return Err(ctx.err(loc("transport", "cnp_interval_us"), "expected ≥ 0"));
        }
        cfg.rnic.cnp_interval_ns = (us * 1e3) as u64;
    }
    cfg.ifg_bytes = t.ifg_bytes.unwrap_or(cfg.ifg_bytes);
    if let Some(m) = t.message_bytes {
        if m == 0 {
            return Err(ctx.err(loc("transport", "message_bytes"), "expected at least 1"));
        }
        cfg.message_bytes = Some(m);
    }
    if let Some(r) = &t.recovery {
        cfg.recovery = r
            .parse()
            .map_err(|e: String| ctx.err(loc("transport", "recovery"), e))?;
    }
    if let Some(n) = t.bdp_pkts {
        if n == 0 {
            return Err(ctx.err(loc("transport", "bdp_pkts"), "expected at least 1"));
        }
        cfg.rnic.irn.bdp_pkts = n;
    }
    for (key, v, slot) in [
        ("rto_low_us", t.rto_low_us, &mut cfg.rnic.irn.rto_low_ns),
        ("rto_high_us", t.rto_high_us, &mut cfg.rnic.irn.rto_high_ns),
    ] {
        if let Some(us) = v {
            if !(us > 0.0 && us.is_finite()) {
                return Err(ctx.err(loc("transport", key), "expected a positive time"));
            }
            *slot = (us * 1e3) as u64;
        }
    }
    if cfg.rnic.irn.rto_low_ns > cfg.rnic.irn.rto_high_ns {
        return Err(ctx.err(
            loc("transport", "rto_low_us"),
            "RTO_low must not exceed RTO_high",
        ));
    }
    if let Some(k) = t.signal_every {
        if k == 0 {
            return Err(ctx.err(loc("transport", "signal_every"), "expected at least 1"));
        }
        cfg.signal_every = k;
    }
    if let Some(c) = &f.cc {
        let (cc, cnp_interval) = build_cc(ctx, c)?;
        cfg.cc = cc;
        if let Some(ns) = cnp_interval {
            if t.cnp_interval_us.is_some() {
                return Err(ctx.err(
                    loc("cc", "min_time_between_cnps"),
                    "the same knob as [transport] cnp_interval_us (give one of them)",
                ));
            }
            cfg.rnic.cnp_interval_ns = ns;
        }
    }
    // Switches.
    let s = &f.switch;
    // DSCP classification first: it decides the data priority when
    // `[transport] data_dscp` is given, and lossless defaults to that.
    if let Some(m) = &s.dscp_to_prio {
        for (k, &p) in m {
            let at = loc("switch.dscp_to_prio", k);
            let d: u8 = match k.parse() {
                Ok(d) if d <= 63 => d,
                _ => return Err(ctx.err(at, format!("expected a DSCP 0..=63, got \"{k}\""))),
            };
            if p > 7 {
                return Err(ctx.err(at, format!("expected a priority 0..=7, got {p}")));
            }
            cfg.dscp_to_prio[usize::from(d)] = p;
        }
    }
    for (key, v) in [("data_dscp", t.data_dscp), ("cnp_dscp", t.cnp_dscp)] {
        if v.is_some_and(|d| d > 63) {
            return Err(ctx.err(loc("transport", key), "expected a DSCP 0..=63"));
        }
    }
    if let Some(d) = t.data_dscp {
        let p = cfg.dscp_to_prio[usize::from(d)];
        if t.data_priority.is_some_and(|q| q != p) {
            return Err(ctx.err(
                loc("transport", "data_priority"),
                format!(
                    "data_dscp {d} maps to priority {p}; drop data_priority or make them agree"
                ),
            ));
        }
        cfg.data_dscp = Some(d);
        cfg.data_prio = p;
    }
    cfg.cnp_dscp = t.cnp_dscp;
    if let Some(g) = t.qp_rate_limit_gbps {
        if !positive(g) {
            return Err(ctx.err(
                loc("transport", "qp_rate_limit_gbps"),
                "expected a positive rate",
            ));
        }
        cfg.qp_rate_limit_bps = Some(bps_from_gbps(g));
    }
    let mut b = BufferConfig::default();
    if let Some(kb) = s.buffer_kb {
        if kb == 0 {
            return Err(ctx.err(loc("switch", "buffer_kb"), "expected a positive size"));
        }
        b.size_bytes = kb * 1024;
    }
    b.reserve_bytes = s.reserve_bytes.unwrap_or(b.reserve_bytes);
    b.xon_offset_bytes = s.xon_offset_bytes.unwrap_or(b.xon_offset_bytes);
    b.headroom_bytes = s.headroom_bytes.or(b.headroom_bytes);
    b.pause_quanta = s.pause_quanta.unwrap_or(b.pause_quanta);
    if b.pause_quanta == 0 {
        return Err(ctx.err(loc("switch", "pause_quanta"), "expected 1..=65535"));
    }
    if let Some(ps) = &s.lossless_priorities {
        let mut m = 0u8;
        for &p in ps {
            if p > 7 {
                return Err(ctx.err(
                    loc("switch", "lossless_priorities"),
                    format!("expected priorities 0..=7, got {p}"),
                ));
            }
            m |= 1 << p;
        }
        b.lossless = m;
    } else {
        b.lossless = 1 << cfg.data_prio;
    }
    let alpha = s.alpha.unwrap_or(0.125);
    if !positive(alpha) {
        return Err(ctx.err(loc("switch", "alpha"), "expected a positive number"));
    }
    b.threshold = match s.pfc.as_deref() {
        None | Some("dynamic") => Threshold::Dynamic { alpha },
        Some("static") => Threshold::Static {
            bytes: s.xoff_bytes.ok_or_else(|| {
                ctx.err(
                    loc("switch", "xoff_bytes"),
                    "expected a byte count when pfc = \"static\"",
                )
            })?,
        },
        Some("off") => {
            b.lossless = 0;
            Threshold::Dynamic { alpha }
        }
        Some(o) => {
            return Err(ctx.err(
                loc("switch", "pfc"),
                format!("expected \"dynamic\", \"static\" or \"off\", got \"{o}\""),
            ));
        }
    };
    cfg.buffer = b;
    cfg.scheduler = match s.scheduler.as_deref() {
        None | Some("strict") => Scheduler::Strict,
        Some("dwrr") => {
            let mut w = [1u32; 8];
            if let Some(v) = &s.dwrr_weights {
                if v.len() != 8 || v.contains(&0) {
                    return Err(ctx.err(
                        loc("switch", "dwrr_weights"),
                        "expected 8 positive weights, one per priority",
                    ));
                }
                w.copy_from_slice(v);
            }
            Scheduler::Dwrr {
                strict_from: cfg.control_prio,
                weights: w,
            }
        }
        Some(o) => {
            return Err(ctx.err(
                loc("switch", "scheduler"),
                format!("expected \"strict\" or \"dwrr\", got \"{o}\""),
            ));
        }
    };
    cfg.int = s.int.unwrap_or(false);
    let ecn_of = |kmin: f64, kmax: f64, pmax: f64, key: &str| {
        if !(kmin >= 0.0 && kmax >= kmin && (0.0..=1.0).contains(&pmax)) {
            return Err(ctx.err(
                loc("switch", key),
                "expected 0 ≤ kmin_kb ≤ kmax_kb and 0 ≤ pmax ≤ 1",
            ));
        }
        Ok(EcnConfig {
            kmin_bytes: (kmin * 1000.0) as u64,
            kmax_bytes: (kmax * 1000.0) as u64,
            pmax,
        })
    };
    cfg.ecn = match (&s.ecn, &s.ecn_by_speed) {
        (Some(_), Some(_)) => {
            return Err(ctx.err(
                loc("switch", "ecn_by_speed"),
                "give either switch.ecn or switch.ecn_by_speed, not both",
            ));
        }
        (Some(e), None) => EcnPolicy::Fixed(ecn_of(e.kmin_kb, e.kmax_kb, e.pmax, "ecn")?),
        (None, Some(v)) => EcnPolicy::BySpeed(
            v.iter()
                .map(|e| {
                    Ok((
                        bps_from_gbps(e.gbps),
                        ecn_of(e.kmin_kb, e.kmax_kb, e.pmax, "ecn_by_speed")?,
                    ))
                })
                .collect::<Result<_, ScenarioError>>()?,
        ),
        (None, None) => EcnPolicy::Off,
    };
    if let Some(m) = &s.ecn_priority {
        for (k, e) in m {
            let p: usize = match k.parse() {
                Ok(p) if p <= 7 => p,
                _ => {
                    return Err(ctx.err(
                        loc("switch.ecn_priority", k),
                        format!("expected a priority 0..=7, got \"{k}\""),
                    ));
                }
            };
            cfg.ecn_prio[p] = Some(ecn_of(e.kmin_kb, e.kmax_kb, e.pmax, "ecn_priority")?);
        }
    }
    // Output.
    let o = &f.output;
    if let Some(us) = o.sample_us {
        if !nonneg(us) {
            return Err(ctx.err(loc("output", "sample_us"), "expected ≥ 0"));
        }
        cfg.sample = ps_from_us(us);
    }
    cfg.trace_flows = o.trace_flows.unwrap_or(cfg.trace_flows);
    cfg.capture_pfc = o.capture_pfc.unwrap_or(false);
    if let Some(us) = o.deadlock_us {
        cfg.deadlock_after = ps_from_us(us.max(0.0));
    }
    // Topology.
    let Some(tp) = &f.topology else {
        return Err(ctx.err(loc("", "topology"), "missing [topology] table"));
    };
    let topo = topology(ctx, tp)?;
    if let Some(h) = &f.host {
        cfg.host = Some(host_plan(ctx, &topo, h)?);
    }
    if let Some(p) = f.loss_rate {
        if !(0.0..=1.0).contains(&p) {
            return Err(ctx.err(loc("", "loss_rate"), "expected a probability 0..=1"));
        }
        if p > 0.0 {
            cfg.link_loss = vec![p; topo.links.len()];
        }
    }
    for (i, d) in f.link_down.iter().enumerate() {
        cfg.link_failures.push(link_failure(ctx, &topo, i, d)?);
    }
    // Workloads.
    if f.workload.is_empty() {
        return Err(ctx.err(
            loc("", "workload"),
            "expected at least one [[workload]] table",
        ));
    }
    let host_bps = topo
        .hosts
        .first()
        .map(|&h| topo.ports[h][0].rate_bps)
        .unwrap_or(1);
    let mut rng = ChaCha8Rng::seed_from_u64(cfg.seed ^ 0x5eed_f10e);
    let mut flows = Vec::new();
    for (i, w) in f.workload.iter().enumerate() {
        flows.extend(workload_of(ctx, &topo, host_bps, op, i, w, &mut rng)?);
    }
    // Stable order: by start time, then as listed.
    flows.sort_by_key(|f| f.start);
    Ok(Scenario {
        name: f.name.unwrap_or_else(|| "scenario".into()),
        cfg,
        topo,
        flows,
    })
}

/// `[[link_down]]` entry `i`: two switches a link joins, by name.
fn link_failure(
    ctx: &Ctx<'_>,
    topo: &Topology,
    i: usize,
    d: &LinkDown,
) -> Result<crate::sim::LinkFailure, ScenarioError> {
    let at = |key: &'static str| Loc {
        section: "link_down",
        index: Some(i),
        key,
    };
    if !nonneg(d.at_us) {
        return Err(ctx.err(at("at_us"), "expected a time ≥ 0 µs"));
    }
    let mut ids = [0u32; 2];
    for (id, (key, name)) in ids.iter_mut().zip([("a", &d.a), ("b", &d.b)]) {
        let n = (topo.nodes.iter())
            .position(|n| &n.name == name)
            .ok_or_else(|| ctx.err(at(key), format!("no node is named \"{name}\"")))?;
        *id = n as u32;
    }
    let [a, b] = ids;
    let f = crate::sim::LinkFailure {
        at: ps_from_us(d.at_us),
        a,
        b,
    };
    match f.port_in(topo) {
        Ok(_) => Ok(f),
        Err(crate::sim::SimError::HostLinkDown { host, .. }) => {
            let (key, name) = if host == a { ("a", &d.a) } else { ("b", &d.b) };
            Err(ctx.err(
                at(key),
                format!("\"{name}\" is a host; only a link between two switches can fail"),
            ))
        }
        Err(_) => Err(ctx.err(
            at("b"),
            format!("no link joins \"{}\" and \"{}\"", d.a, d.b),
        )),
    }
}

/// Reads a profile named in `[host]` (relative to the scenario file).
fn load_profile(
    ctx: &Ctx<'_>,
    at: Loc<'_>,
    path: &str,
) -> Result<roce_host::Profile, ScenarioError> {
    let p = ctx.base.join(path);
    roce_host::Profile::load(&p).map_err(|e| match e {
        // The profile's own mistake, located in the profile.
        roce_host::ProfileError::Invalid {
            file,
            line,
            field,
            msg,
        } => ScenarioError {
            file,
            line,
            field,
            msg,
        },
        io => ctx.err(at, format!("cannot read profile: {io}")),
    })
}

#[allow(clippy::too_many_arguments)]
fn knobs(
    ctx: &Ctx<'_>,
    section: &'static str,
    index: Option<usize>,
    base: crate::host::HostKnobs,
    profile: &roce_host::Profile,
    inline: Option<bool>,
    numa: Option<&str>,
    sges: Option<u32>,
) -> Result<crate::host::HostKnobs, ScenarioError> {
    let at = |key| Loc {
        section,
        index,
        key,
    };
    let mut k = base;
    k.inline = inline.unwrap_or(k.inline);
    if let Some(n) = numa {
        k.numa = match n {
            "local" => roce_host::Placement::Local,
            "remote" if profile.numa.has_remote() => roce_host::Placement::Remote,
            "remote" => {
                return Err(ctx.err(
                    at("numa"),
                    format!(
                        "\"remote\" needs a profile with two or more sockets (\"{}\" has {})",
                        profile.name, profile.numa.sockets
                    ),
                ));
            }
            o => {
                return Err(ctx.err(
                    at("numa"),
                    format!("expected \"local\" or \"remote\", got \"{o}\""),
                ));
            }
        };
    }
    if let Some(s) = sges {
        if s == 0 || s > 32 {
            return Err(ctx.err(at("sges"), "expected 1..=32"));
        }
        k.sges = s;
    }
    Ok(k)
}

/// `[host]`: every host's data-path costs.
fn host_plan(
    ctx: &Ctx<'_>,
    topo: &Topology,
    h: &HostTable,
) -> Result<crate::host::HostPlan, ScenarioError> {
    use crate::host::{HostKnobs, HostParams};
    let profile = load_profile(ctx, loc("host", "profile"), &h.profile)?;
    let base = knobs(
        ctx,
        "host",
        None,
        HostKnobs {
            sges: 1,
            ..HostKnobs::default()
        },
        &profile,
        h.inline,
        h.numa.as_deref(),
        h.sges,
    )?;
    let mut plan = crate::host::HostPlan {
        default: HostParams::from_profile(&profile, base),
        per_host: Default::default(),
    };
    for (i, o) in h.overrides.iter().enumerate() {
        let at = |key| Loc {
            section: "host.override",
            index: Some(i),
            key,
        };
        let p = match &o.profile {
            Some(path) => load_profile(ctx, at("profile"), path)?,
            None => profile.clone(),
        };
        let k = knobs(
            ctx,
            "host.override",
            Some(i),
            base,
            &p,
            o.inline,
            o.numa.as_deref(),
            o.sges,
        )?;
        let params = HostParams::from_profile(&p, k);
        if o.hosts.is_empty() {
            return Err(ctx.err(at("hosts"), "expected at least one host"));
        }
        for r in &o.hosts {
            let host = resolve(ctx, topo, r, at("hosts"))?;
            plan.per_host.insert(host, params.clone());
        }
    }
    Ok(plan)
}

fn need<T: Copy>(ctx: &Ctx<'_>, v: Option<T>, key: &str, kind: &str) -> Result<T, ScenarioError> {
    v.ok_or_else(|| {
        ctx.err(
            loc("topology", key),
            format!("required for kind = \"{kind}\""),
        )
    })
}

fn topology(ctx: &Ctx<'_>, t: &Topo) -> Result<Topology, ScenarioError> {
    let k = t.kind.as_str();
    let delay = ((t.link_delay_ns.unwrap_or(1000.0)) * PS_PER_NS as f64) as Ps;
    let host_g = t.host_gbps.unwrap_or(100.0);
    if !positive(host_g) {
        return Err(ctx.err(loc("topology", "host_gbps"), "expected a positive rate"));
    }
    let host_bps = bps_from_gbps(host_g);
    let count = |key: &str| -> Result<usize, ScenarioError> {
        match &t.hosts {
            Some(toml::Value::Integer(n)) if *n >= 2 => Ok(*n as usize),
            Some(toml::Value::Integer(n)) => Err(ctx.err(
                loc("topology", key),
                format!("expected at least 2 hosts, got {n}"),
            )),
            Some(_) => Err(ctx.err(loc("topology", key), "expected a host count")),
            None => Err(ctx.err(loc("topology", key), format!("required for kind = \"{k}\""))),
        }
    };
    let shape = |e: crate::topology::TopologyError| ctx.err(loc("topology", "kind"), e.to_string());
    match k {
        "star" => Topology::star(count("hosts")?, host_bps, delay).map_err(shape),
        "dumbbell" => {
            let l = need(ctx, t.left, "left", k)?;
            let r = need(ctx, t.right, "right", k)?;
            let core = bps_from_gbps(t.core_gbps.unwrap_or(host_g));
            Topology::dumbbell(l, r, host_bps, core, delay).map_err(shape)
        }
        "leaf_spine" => Topology::leaf_spine(
            need(ctx, t.leaves, "leaves", k)?,
            need(ctx, t.spines, "spines", k)?,
            need(ctx, t.hosts_per_leaf, "hosts_per_leaf", k)?,
            host_bps,
            t.spine_gbps.map(bps_from_gbps),
            t.oversubscription.unwrap_or(1.0),
            delay,
        )
        .map_err(shape),
        "fat_tree" => Topology::fat_tree(
            need(ctx, t.pods, "pods", k)?,
            need(ctx, t.tors_per_pod, "tors_per_pod", k)?,
            need(ctx, t.aggs_per_pod, "aggs_per_pod", k)?,
            need(ctx, t.hosts_per_tor, "hosts_per_tor", k)?,
            need(ctx, t.cores, "cores", k)?,
            host_bps,
            bps_from_gbps(t.fabric_gbps.unwrap_or(host_g)),
            delay,
        )
        .map_err(shape),
        "custom" => {
            let hosts: Vec<String> = match &t.hosts {
                Some(toml::Value::Array(a)) => a
                    .iter()
                    .map(|v| v.as_str().map(str::to_string))
                    .collect::<Option<_>>()
                    .ok_or_else(|| {
                        ctx.err(loc("topology", "hosts"), "expected a list of host names")
                    })?,
                _ => {
                    return Err(ctx.err(
                        loc("topology", "hosts"),
                        "expected a list of host names for kind = \"custom\"",
                    ));
                }
            };
            let switches = t.switches.clone().unwrap_or_default();
            let links = t.links.as_ref().ok_or_else(|| {
                ctx.err(loc("topology", "links"), "required for kind = \"custom\"")
            })?;
            let mut b = Builder::new();
            for h in &hosts {
                b.host(h.clone());
            }
            for s in &switches {
                b.switch(s.clone());
            }
            for l in links {
                if !positive(l.gbps) {
                    return Err(ctx.err(loc("topology", "links"), "expected gbps > 0"));
                }
                let d = l.delay_ns.map_or(delay, |d| (d * PS_PER_NS as f64) as Ps);
                b.link(l.a.clone(), l.b.clone(), bps_from_gbps(l.gbps), d);
            }
            b.build()
                .map_err(|e| ctx.err(loc("topology", "links"), e.to_string()))
        }
        other => Err(ctx.err(
            loc("topology", "kind"),
            format!(
                "expected \"star\", \"dumbbell\", \"leaf_spine\", \"fat_tree\" or \"custom\", got \"{other}\""
            ),
        )),
    }
}

fn resolve(ctx: &Ctx<'_>, topo: &Topology, h: &HostRef, at: Loc<'_>) -> Result<u32, ScenarioError> {
    match h {
        HostRef::Index(i) if (*i as usize) < topo.n_hosts() => Ok(*i),
        HostRef::Index(i) => Err(ctx.err(
            at,
            format!(
                "host {i} does not exist (hosts are 0..{})",
                topo.n_hosts() - 1
            ),
        )),
        HostRef::Name(n) => topo
            .hosts
            .iter()
            .position(|&x| topo.nodes[x].name == *n)
            .map(|p| p as u32)
            .ok_or_else(|| ctx.err(at, format!("unknown host `{n}`"))),
    }
}

#[allow(clippy::too_many_arguments)]
fn workload_of(
    ctx: &Ctx<'_>,
    topo: &Topology,
    host_bps: u64,
    op: FlowOp,
    i: usize,
    w: &Work,
    rng: &mut ChaCha8Rng,
) -> Result<Vec<FlowSpec>, ScenarioError> {
    let at = |key: &'static str| Loc {
        section: "workload",
        index: Some(i),
        key,
    };
    let start = ps_from_us(w.start_us.unwrap_or(0.0).max(0.0));
    let hosts: Vec<u32> = match &w.hosts {
        Some(v) => v
            .iter()
            .map(|h| resolve(ctx, topo, h, at("hosts")))
            .collect::<Result<_, _>>()?,
        None => (0..topo.n_hosts() as u32).collect(),
    };
    let size = |key| -> Result<u64, ScenarioError> {
        match w.size {
            Some(s) if s > 0 && s <= 1 << 31 => Ok(s),
            Some(s) => Err(ctx.err(at(key), format!("expected 1..=2147483648 bytes, got {s}"))),
            None => Err(ctx.err(at(key), format!("required for kind = \"{}\"", w.kind))),
        }
    };
    let mut v = match w.kind.as_str() {
        "flows" => {
            let list = w
                .flows
                .as_ref()
                .ok_or_else(|| ctx.err(at("flows"), "expected a list of {src, dst, size}"))?;
            let mut out = Vec::new();
            for fl in list {
                let src = resolve(ctx, topo, &fl.src, at("flows"))?;
                let dst = resolve(ctx, topo, &fl.dst, at("flows"))?;
                if src == dst {
                    return Err(ctx.err(at("flows"), format!("flow from host {src} to itself")));
                }
                if fl.size == 0 || fl.size > 1 << 31 {
                    return Err(ctx.err(at("flows"), "flow size must be 1..=2147483648 bytes"));
                }
                let fop = match fl.op.as_deref() {
                    None => op,
                    Some("write") => FlowOp::Write,
                    Some("send") => FlowOp::Send,
                    Some(o) => {
                        return Err(ctx.err(
                            at("flows"),
                            format!("op: expected \"write\" or \"send\", got \"{o}\""),
                        ));
                    }
                };
                out.push(FlowSpec {
                    src,
                    dst,
                    size: fl.size,
                    start: ps_from_us(fl.start_us.unwrap_or(0.0).max(0.0)),
                    op: fop,
                });
            }
            out
        }
        "poisson" => {
            let load = w
                .load
                .ok_or_else(|| ctx.err(at("load"), "required for kind = \"poisson\""))?;
            let cdf_path = w
                .cdf
                .as_ref()
                .ok_or_else(|| ctx.err(at("cdf"), "required for kind = \"poisson\""))?;
            let p = ctx.base.join(cdf_path);
            let text = std::fs::read_to_string(&p)
                .map_err(|e| ctx.err(at("cdf"), format!("cannot read {}: {e}", p.display())))?;
            let cdf = Cdf::parse(&text).map_err(|e| ScenarioError {
                file: p.display().to_string(),
                line: match &e {
                    workload::WorkloadError::Cdf { line, .. } => *line,
                    _ => 0,
                },
                field: "cdf".into(),
                msg: match e {
                    workload::WorkloadError::Cdf { msg, .. } => msg,
                    other => other.to_string(),
                },
            })?;
            let dur = w
                .duration_us
                .ok_or_else(|| ctx.err(at("duration_us"), "required for kind = \"poisson\""))?;
            workload::poisson(&hosts, load, host_bps, &cdf, start, ps_from_us(dur), rng)
                .map_err(|e| ctx.err(at("load"), e.to_string()))?
        }
        "incast" => {
            let dst = resolve(
                ctx,
                topo,
                w.dst
                    .as_ref()
                    .ok_or_else(|| ctx.err(at("dst"), "required for kind = \"incast\""))?,
                at("dst"),
            )?;
            let senders: Vec<u32> = match &w.senders {
                Some(v) => v
                    .iter()
                    .map(|h| resolve(ctx, topo, h, at("senders")))
                    .collect::<Result<_, _>>()?,
                None => hosts.clone(),
            };
            workload::incast(&senders, dst, size("size")?, start)
        }
        "all_to_all" => workload::all_to_all(&hosts, size("size")?, start),
        "permutation" => workload::permutation(&hosts, size("size")?, start, rng),
        other => {
            return Err(ctx.err(
                at("kind"),
                format!(
                    "expected \"flows\", \"poisson\", \"incast\", \"all_to_all\" or \"permutation\", got \"{other}\""
                ),
            ));
        }
    };
    for f in &mut v {
        f.op = if w.kind == "flows" { f.op } else { op };
    }
    Ok(v)
}

/// Default topology rate helper for tests and examples.
pub fn default_host_bps() -> u64 {
    gbps(100)
}

#[cfg(test)]
mod tests {
    use super::*;
    use roce_rnic::DcqcnConfig;

    fn parse(s: &str) -> Result<Scenario, ScenarioError> {
        Scenario::parse(s, "t.toml", Path::new("."), None)
    }

    #[test]
    fn minimal_star() {
        let s = parse(
            "[topology]\nkind = \"star\"\nhosts = 3\n\n[[workload]]\nkind = \"incast\"\ndst = 0\nsize = 1000\n",
        )
        .unwrap();
        assert_eq!(s.flows.len(), 2);
        assert_eq!(s.topo.n_hosts(), 3);
    }

    /// `[[link_down]]` names two switches a link joins and a time; each
    /// mistake is an error at its entry and key.
    #[test]
    fn link_down_table() {
        let base = "[topology]\nkind = \"leaf_spine\"\nleaves = 2\nspines = 2\nhosts_per_leaf = 2\n[[workload]]\nkind = \"incast\"\ndst = 0\nsize = 1000\n";
        let s = parse(&format!(
            "{base}[[link_down]]\nat_us = 5\na = \"leaf1\"\nb = \"spine0\"\n"
        ))
        .unwrap();
        let [f] = s.cfg.link_failures[..] else {
            panic!("{:?}", s.cfg.link_failures)
        };
        let name = |n: u32| s.topo.nodes[n as usize].name.as_str();
        assert_eq!(
            (f.at, name(f.a), name(f.b)),
            (5 * PS_PER_US, "leaf1", "spine0")
        );
        for (entry, field, says) in [
            (
                "at_us = -1\na = \"leaf1\"\nb = \"spine0\"",
                "at_us",
                "expected a time",
            ),
            (
                "at_us = 5\na = \"leaf9\"\nb = \"spine0\"",
                "a",
                "no node is named \"leaf9\"",
            ),
            ("at_us = 5\na = \"leaf1\"\nb = \"h2\"", "b", "is a host"),
            (
                "at_us = 5\na = \"spine1\"\nb = \"spine0\"",
                "b",
                "no link joins",
            ),
        ] {
            let e = parse(&format!("{base}[[link_down]]\nat_us = 1\na = \"leaf0\"\nb = \"spine1\"\n[[link_down]]\n{entry}\n")).unwrap_err();
            assert_eq!(e.field, format!("link_down[1].{field}"), "{entry}: {e}");
            assert!(e.msg.contains(says), "{entry}: {e}");
        }
    }

    #[test]
    fn cc_table() {
        let base = "[topology]\nkind = \"star\"\nhosts = 3\n[[workload]]\nkind = \"incast\"\ndst = 0\nsize = 1000\n";
        let s = parse(&format!(
            "[cc]\nalgorithm = \"dcqcn\"\nrp_timer_us = 900\nrate_ai_mbps = 50\n{base}"
        ))
        .unwrap();
        let CcConfig::Dcqcn(d) = s.cfg.cc else {
            panic!("{:?}", s.cfg.cc)
        };
        assert_eq!((d.rp_timer_ns, d.rate_ai_bps), (900_000, 50_000_000));
        let s = parse(&format!("[cc]\nalgorithm = \"hpcc\"\neta = 0.9\n{base}")).unwrap();
        assert!(matches!(s.cfg.cc, CcConfig::Hpcc(h) if h.eta == 0.9 && !h.opts.multi_rate));
        let s = parse(&format!(
            "[cc]\nalgorithm = \"hpcc\"\nmulti_rate = true\nsample_feedback = true\n{base}"
        ))
        .unwrap();
        assert!(
            matches!(s.cfg.cc, CcConfig::Hpcc(h) if h.opts.multi_rate && h.opts.sample_feedback)
        );
        let e = parse(&format!(
            "[cc]\nalgorithm = \"hpcc-pint\"\nmulti_rate = true\n{base}"
        ))
        .unwrap_err();
        assert_eq!((e.line, e.field.as_str()), (3, "cc.multi_rate"), "{e}");
        let e = parse(&format!(
            "[cc]\nalgorithm = \"hpcc\"\nrp_timer_us = 5\n{base}"
        ))
        .unwrap_err();
        assert_eq!((e.line, e.field.as_str()), (3, "cc.rp_timer_us"), "{e}");
        assert!(e.msg.contains("not a parameter of algorithm \"hpcc\""));
        let e = parse(&format!("[cc]\nalgorithm = \"bbr\"\n{base}")).unwrap_err();
        assert_eq!((e.line, e.field.as_str()), (2, "cc.algorithm"), "{e}");
        assert!(e.msg.contains("\"swift\""), "{e}");
        // A key no algorithm has: `cc.`-prefixed, with the chosen
        // algorithm's keys only (not serde's list of every algorithm's).
        let e = parse(&format!(
            "[cc]\nalgorithm = \"timely\"\nrate_aii_mbps = 3\n{base}"
        ))
        .unwrap_err();
        assert_eq!((e.line, e.field.as_str()), (3, "cc.rate_aii_mbps"), "{e}");
        assert!(
            e.msg.contains("not a parameter of algorithm \"timely\"")
                && e.msg.contains("t_low_us")
                && !e.msg.contains("rpg_ai_rate"),
            "{e}"
        );
        let e = parse(&format!("[cc]\nalgorithm = \"bbr\"\nfoo = 1\n{base}")).unwrap_err();
        assert_eq!(e.field, "cc.foo", "{e}");
    }

    #[test]
    fn cc_table_new_algorithms_and_presets() {
        let base = "[topology]\nkind = \"star\"\nhosts = 3\n[[workload]]\nkind = \"incast\"\ndst = 0\nsize = 1000\n";
        let ok = |cc: &str| parse(&format!("[cc]\n{cc}\n{base}")).unwrap().cfg;
        let bad = |cc: &str| parse(&format!("[cc]\n{cc}\n{base}")).unwrap_err();
        // DCQCN presets, and mlx5 names that adjust them.
        let c = ok("algorithm = \"dcqcn\"\npreset = \"paper\"");
        assert_eq!(c.cc, CcConfig::Dcqcn(DcqcnConfig::paper()));
        let c = ok("algorithm = \"dcqcn\"\npreset = \"hpcc-ns3\"");
        assert_eq!(c.cc, CcConfig::Dcqcn(DcqcnConfig::hpcc_ns3()));
        let c = ok(
            "algorithm = \"dcqcn\"\npreset = \"connectx\"\nrpg_ai_rate = 10\ndce_tcp_g = 1008\nrpg_gd = 10\nmin_time_between_cnps = 8",
        );
        let CcConfig::Dcqcn(d) = c.cc else {
            panic!("{:?}", c.cc)
        };
        assert_eq!(d.rate_ai_bps, 10_000_000);
        assert_eq!(d.g, 1.0 - 1008.0 / 1024.0);
        assert_eq!(d.cut_scale, 1.0, "rpg_gd 10: cut by α, not α/2");
        assert_eq!(d.rp_timer_ns, 300_000, "the rest stays ConnectX's");
        assert_eq!(c.rnic.cnp_interval_ns, 8_000);
        let e = bad("algorithm = \"dcqcn\"\npreset = \"mellanox\"");
        assert_eq!((e.line, e.field.as_str()), (3, "cc.preset"), "{e}");
        let e = bad("algorithm = \"dcqcn\"\nrate_ai_mbps = 5\nrpg_ai_rate = 5");
        assert_eq!((e.line, e.field.as_str()), (4, "cc.rpg_ai_rate"), "{e}");
        let e = bad("algorithm = \"dcqcn\"\ng = -0.5");
        assert_eq!((e.line, e.field.as_str()), (3, "cc.g"), "{e}");
        assert!(e.msg.contains("0 < g ≤ 1"), "{e}");
        // TIMELY.
        let c = ok("algorithm = \"timely\"\nt_low_us = 20\nbeta = 0.5\nrate_ai_mbps = 20");
        let CcConfig::Timely(t) = c.cc else {
            panic!("{:?}", c.cc)
        };
        assert_eq!((t.t_low_ns, t.beta, t.delta_bps), (20_000, 0.5, 20_000_000));
        let e = bad("algorithm = \"timely\"\nt_low_us = 600");
        assert_eq!((e.line, e.field.as_str()), (3, "cc.t_low_us"), "{e}");
        assert!(e.msg.contains("t_low_us < t_high_us"), "{e}");
        let e = bad("algorithm = \"timely\"\nalpha = -1");
        assert_eq!((e.line, e.field.as_str()), (3, "cc.alpha"), "{e}");
        // DCTCP.
        let c = ok("algorithm = \"dctcp\"\nvariant = \"window\"\ng = 0.125");
        assert!(matches!(c.cc, CcConfig::Dctcp(d) if d.window && d.g == 0.125));
        let e = bad("algorithm = \"dctcp\"\nvariant = \"window\"\nrate_ai_mbps = 100");
        assert_eq!((e.line, e.field.as_str()), (4, "cc.rate_ai_mbps"), "{e}");
        let e = bad("algorithm = \"dctcp\"\nt_low_us = 5");
        assert!(
            e.msg.contains("not a parameter of algorithm \"dctcp\""),
            "{e}"
        );
        // Swift.
        let c = ok("algorithm = \"swift\"\nbase_target_us = 15\nmax_mdf = 0.25");
        assert!(
            matches!(c.cc, CcConfig::Swift(w) if w.base_target_ns == Some(15_000) && w.max_mdf == 0.25)
        );
        let e = bad("algorithm = \"swift\"\nmax_mdf = 1.5");
        assert_eq!((e.line, e.field.as_str()), (3, "cc.max_mdf"), "{e}");
        let e = bad("algorithm = \"swift\"\nfs_min_cwnd = 200");
        assert_eq!(e.field, "cc.fs_min_cwnd", "{e}");
    }

    #[test]
    fn errors_name_line_and_field() {
        let e = parse(
            "[topology]\nkind = \"star\"\nhosts = 1\n[[workload]]\nkind=\"all_to_all\"\nsize=1\n",
        )
        .unwrap_err();
        assert_eq!((e.line, e.field.as_str()), (3, "topology.hosts"));
        assert_eq!(
            e.to_string(),
            "t.toml:3: topology.hosts: expected at least 2 hosts, got 1"
        );
        let e = parse("[topology]\nkind = \"star\"\nhostz = 3\n").unwrap_err();
        assert_eq!((e.line, e.field.as_str()), (3, "hostz"), "{e}");
        let e = parse("[topology]\nkind = \"star\"\nhosts = 3\n[[workload]]\nkind = \"incast\"\ndst = 0\nsize = 1\n[[workload]]\nkind = \"incast\"\ndst = 9\nsize = 1\n")
            .unwrap_err();
        assert_eq!((e.line, e.field.as_str()), (10, "workload[1].dst"), "{e}");
        let e = parse("[transport]\nmtu = 1500\n[topology]\nkind=\"star\"\nhosts=2\n").unwrap_err();
        assert_eq!((e.line, e.field.as_str()), (2, "transport.mtu"), "{e}");
        let e = parse("[topology\nkind").unwrap_err();
        assert_eq!(e.line, 1);
        // Lines come from toml's spans, so layouts a line-by-line reader
        // would miss are found too: dotted keys at the top level, an
        // inline table, a key after a comment that mentions it.
        let e = parse("topology.kind = \"star\"\n# hosts = 3 would do\ntopology.hosts = 1\n")
            .unwrap_err();
        assert_eq!((e.line, e.field.as_str()), (3, "topology.hosts"), "{e}");
        let e = parse("topology = { kind = \"star\", hosts = 2 }\n\ntransport = { mtu = 1500 }\n")
            .unwrap_err();
        assert_eq!((e.line, e.field.as_str()), (3, "transport.mtu"), "{e}");
    }

    #[test]
    fn dscp_lossless_ecn_priority_and_cnp_dscp_surfaces() {
        let topo = "[topology]\nkind = \"star\"\nhosts = 2\n[[workload]]\nkind = \"incast\"\ndst = 0\nsize = 1000\n";
        // Absent keys: DSCP / 8, CNPs on the control priority, no per-queue ECN.
        let s = parse(topo).unwrap();
        assert_eq!(s.cfg.dscp_to_prio, crate::sim::default_dscp_to_prio());
        assert_eq!((s.cfg.cnp_dscp, s.cfg.data_dscp), (None, None));
        assert_eq!(s.cfg.ecn_prio, [None; 8]);
        assert_eq!(s.cfg.buffer.lossless, 1 << 3);
        // data_dscp picks the data priority through the map, and lossless
        // follows it by default.
        let s = parse(&format!(
            "[transport]\ndata_dscp = 26\ncnp_dscp = 46\n[switch]\ndscp_to_prio = {{ 26 = 5, 46 = 7 }}\n[switch.ecn_priority.5]\nkmin_kb = 10\nkmax_kb = 20\npmax = 0.5\n{topo}"
        ))
        .unwrap();
        assert_eq!((s.cfg.data_dscp, s.cfg.data_prio), (Some(26), 5));
        assert_eq!(s.cfg.cnp_dscp, Some(46));
        assert_eq!(s.cfg.dscp_to_prio[46], 7);
        assert_eq!(s.cfg.dscp_to_prio[24], 3);
        assert_eq!(s.cfg.buffer.lossless, 1 << 5);
        assert_eq!(
            s.cfg.ecn_prio[5],
            Some(EcnConfig {
                kmin_bytes: 10_000,
                kmax_bytes: 20_000,
                pmax: 0.5
            })
        );
        // Each mistake names file, line and field.
        let cases = [
            (
                "[switch]\ndscp_to_prio = { 64 = 1 }\n",
                2,
                "switch.dscp_to_prio.64",
                "expected a DSCP 0..=63, got \"64\"",
            ),
            (
                "[switch.dscp_to_prio]\n10 = 1\n12 = 8\n",
                3,
                "switch.dscp_to_prio.12",
                "expected a priority 0..=7, got 8",
            ),
            (
                "[transport]\nmtu = 1024\ncnp_dscp = 64\n",
                3,
                "transport.cnp_dscp",
                "expected a DSCP 0..=63",
            ),
            (
                "[transport]\nqp_rate_limit_gbps = 0\n",
                2,
                "transport.qp_rate_limit_gbps",
                "expected a positive rate",
            ),
            (
                "[transport]\ndata_dscp = 99\n",
                2,
                "transport.data_dscp",
                "expected a DSCP 0..=63",
            ),
            (
                "[transport]\ndata_priority = 3\ndata_dscp = 40\n",
                2,
                "transport.data_priority",
                "data_dscp 40 maps to priority 5; drop data_priority or make them agree",
            ),
            (
                "[switch]\nbuffer_kb = 100\n[switch.ecn_priority.8]\nkmin_kb = 1\nkmax_kb = 2\npmax = 0.1\n",
                3,
                "switch.ecn_priority.8",
                "expected a priority 0..=7, got \"8\"",
            ),
            (
                "[switch.ecn_priority.2]\nkmin_kb = 10\nkmax_kb = 5\npmax = 0.1\n",
                1,
                "switch.ecn_priority",
                "expected 0 ≤ kmin_kb ≤ kmax_kb and 0 ≤ pmax ≤ 1",
            ),
        ];
        for (src, line, field, msg) in cases {
            let e = parse(&format!("{src}{topo}")).unwrap_err();
            assert_eq!(
                (e.line, e.field.as_str(), e.msg.as_str()),
                (line, field, msg),
                "{src}"
            );
        }
    }

    #[test]
    fn host_table() {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scenarios");
        let parse_at = |s: &str| Scenario::parse(s, "h.toml", &dir, None);
        let base = "[topology]\nkind = \"star\"\nhosts = 3\n[[workload]]\nkind = \"incast\"\ndst = 0\nsize = 1000\n";
        let s = parse_at(&format!(
            "[host]\nprofile = \"../profiles/100g-gen3x16-ddr4-1s.toml\"\ninline = true\n[[host.override]]\nhosts = [\"h2\"]\nprofile = \"../profiles/200g-in-gen3x16-slot.toml\"\n{base}"
        ))
        .unwrap();
        let plan = s.cfg.host.expect("a plan");
        assert!(plan.default.inline_max > 0);
        assert_eq!(plan.params(0), &plan.default);
        assert!(plan.params(2).profile.contains("Gen3 x16 slot"));
        // Mistakes name the field and line.
        let e = parse_at(&format!(
            "[host]\nprofile = \"../profiles/100g-gen3x16-ddr4-1s.toml\"\nnuma = \"remote\"\n{base}"
        ))
        .unwrap_err();
        assert_eq!((e.line, e.field.as_str()), (3, "host.numa"), "{e}");
        let e = parse_at(&format!("[host]\nprofile = \"nope.toml\"\n{base}")).unwrap_err();
        assert_eq!((e.line, e.field.as_str()), (2, "host.profile"), "{e}");
        let e = parse_at(&format!(
            "[host]\nprofile = \"../profiles/100g-gen3x16-ddr4-1s.toml\"\ncolour = 1\n{base}"
        ))
        .unwrap_err();
        assert_eq!((e.line, e.field.as_str()), (3, "colour"), "{e}");
        let e = parse_at(&format!(
            "[host]\nprofile = \"../profiles/100g-gen3x16-ddr4-1s.toml\"\n[[host.override]]\nhosts = [\"h9\"]\n{base}"
        ))
        .unwrap_err();
        assert_eq!(e.field, "host.override[0].hosts", "{e}");
    }

    #[test]
    fn custom_topology_validation() {
        let e = parse(
            "[topology]\nkind = \"custom\"\nhosts = [\"a\", \"b\"]\nswitches = [\"s\"]\nlinks = [\n {a=\"a\", b=\"s\", gbps=100},\n {a=\"b\", b=\"t\", gbps=100},\n]\n",
        )
        .unwrap_err();
        assert_eq!(e.field, "topology.links");
        assert!(e.msg.contains("unknown node `t`"), "{e}");
    }
}
