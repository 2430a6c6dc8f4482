//! `roce validate`: named simulator scenarios checked against what the
//! papers that designed each congestion controller predict.
//!
//! Every [`Check`] states what is compared, the expected value and where it
//! comes from (a paper's figure or model, derived here and cited), what the
//! simulator measured, the tolerance and the verdict; [`write_markdown`]
//! turns a suite into `validation.md` with one plot per check.
//!
//! The suite has a *fast* variant (shorter runs, fewer flow counts) that
//! `cargo test` runs, so a regression in any controller fails CI; the full
//! variant runs long enough for DCQCN's α (time constant τ'/g) to settle.
//!
//! Loss recovery is checked by IRN's headline comparison: IRN without PFC
//! against go-back-N with PFC on the same incast (Mittal et al., SIGCOMM
//! 2018).

use crate::ecn::EcnConfig;
use crate::event::{PS_PER_US, Ps};
use crate::hpcc::Experiment;
use crate::metrics::Report;
use crate::plot::{self, PlotError};
use crate::scenario::{Scenario, ScenarioError};
use crate::sim::{EcnPolicy, SimError, Simulator};
use roce_rnic::cc::dcqcn::DcqcnConfig;
use serde::Serialize;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

/// Why the suite could not run (a failed *check* is not an error).
#[derive(Debug, thiserror::Error)]
pub enum ValidateError {
    #[error("scenario {name}: {source}")]
    Scenario {
        name: String,
        #[source]
        source: ScenarioError,
    },
    #[error("HPCC-format scenario {name}: {source}")]
    Hpcc {
        name: String,
        #[source]
        source: crate::hpcc::HpccError,
    },
    #[error("run {name}: {source}")]
    Sim {
        name: String,
        #[source]
        source: SimError,
    },
    #[error("run {name}: {what}")]
    Measure { name: String, what: String },
    #[error(transparent)]
    Plot(#[from] PlotError),
    #[error("writing {path}: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
}

/// One comparison of a measurement with an expectation.
#[derive(Debug, Clone, Serialize)]
pub struct Check {
    pub name: String,
    /// What is compared, in words.
    pub what: String,
    pub expected: f64,
    /// Where the expected value comes from.
    pub source: String,
    pub measured: f64,
    pub unit: String,
    /// The tolerance in words ("±25 %", "≥ 0.95").
    pub tolerance: String,
    /// The accepted range of `measured`.
    pub lo: f64,
    pub hi: f64,
    pub pass: bool,
    /// How the scenario was run.
    pub scenario: String,
    /// The plot's file stem (PNG and SVG), relative to the output directory.
    pub plot: String,
}

impl Check {
    #[allow(clippy::too_many_arguments)]
    fn new(
        name: &str,
        what: &str,
        expected: f64,
        source: &str,
        measured: f64,
        unit: &str,
        tolerance: String,
        (lo, hi): (f64, f64),
        scenario: String,
    ) -> Check {
        Check {
            name: name.into(),
            what: what.into(),
            expected,
            source: source.into(),
            measured,
            unit: unit.into(),
            tolerance,
            lo,
            hi,
            pass: measured.is_finite() && measured >= lo && measured <= hi,
            scenario,
            plot: name.into(),
        }
    }
}

/// The suite's outcome.
#[derive(Debug, Clone, Serialize)]
pub struct Validation {
    pub fast: bool,
    pub checks: Vec<Check>,
}

impl Validation {
    pub fn passed(&self) -> bool {
        self.checks.iter().all(|c| c.pass)
    }
}

/// Runs every scenario, writes one plot per check into `out` and returns
/// the checks (`validation.md` is [`write_markdown`]'s).
pub fn run(fast: bool, out: &Path) -> Result<Validation, ValidateError> {
    std::fs::create_dir_all(out).map_err(|source| ValidateError::Io {
        path: out.into(),
        source,
    })?;
    let mut checks = Vec::new();
    checks.push(dcqcn_fair_share(fast, out)?);
    checks.extend(dcqcn_fixed_point(fast, out)?);
    checks.extend(timely_shares(fast, out)?);
    checks.extend(hpcc_queue(fast, out)?);
    checks.push(dctcp_queue(fast, out)?);
    checks.push(swift_delay(fast, out)?);
    checks.extend(hpcc_cc_modes(fast, out)?);
    checks.extend(irn_vs_pfc(fast, out)?);
    Ok(Validation { fast, checks })
}

// ---------------------------------------------------------------------------
// Scenarios and measurements
// ---------------------------------------------------------------------------

/// Link rate of every scenario built here.
const LINE_BPS: f64 = 100e9;
const MTU: u64 = 1024;
/// RoCEv2 bytes around a payload, as the switch queues them: Ethernet 14,
/// IPv4 20, UDP 8, BTH 12, ICRC 4, FCS 4.
const HEADERS: u64 = 62;
const LINK_DELAY_NS: u64 = 1000;
/// A long-lived flow: larger than anything a run can send.
const LONG: u64 = 2_000_000_000;

/// A star of `hosts` 100 Gb/s hosts around one switch (host 0 receives),
/// with `flows` as `(src, start_µs)` long-lived writes to host 0.
fn star(
    cc: &str,
    ecn: &str,
    transport: &str,
    flows: &[(u32, f64)],
    stop_us: f64,
    sample_us: f64,
) -> String {
    let hosts = flows.iter().map(|f| f.0).max().unwrap_or(1) + 1;
    let list: Vec<String> = flows
        .iter()
        .map(|(s, t)| format!("{{ src = {s}, dst = 0, size = {LONG}, start_us = {t} }}"))
        .collect();
    format!(
        r#"seed = 1
stop_us = {stop_us}
[transport]
mtu = {MTU}
data_priority = 3
control_priority = 6
{transport}
[switch]
buffer_kb = 16384
pfc = "dynamic"
alpha = 0.125
{ecn}
[cc]
{cc}
[topology]
kind = "star"
hosts = {hosts}
host_gbps = 100
link_delay_ns = {LINK_DELAY_NS}
[[workload]]
kind = "flows"
flows = [{list}]
[output]
sample_us = {sample_us}
trace_flows = 64
"#,
        list = list.join(", ")
    )
}

fn simulate(name: &str, src: &str) -> Result<Report, ValidateError> {
    let sc =
        Scenario::parse(src, &format!("{name}.toml"), Path::new("."), None).map_err(|source| {
            ValidateError::Scenario {
                name: name.into(),
                source,
            }
        })?;
    let mut sim =
        Simulator::new(sc.cfg, sc.topo, &sc.flows).map_err(|source| ValidateError::Sim {
            name: name.into(),
            source,
        })?;
    sim.run().map_err(|source| ValidateError::Sim {
        name: name.into(),
        source,
    })?;
    Ok(sim.into_report())
}

fn measure_err(name: &str, what: &str) -> ValidateError {
    ValidateError::Measure {
        name: name.into(),
        what: what.into(),
    }
}

/// The switch egress toward host `dst`: (node, port).
fn port_to(r: &Report, dst: u32) -> Option<(u32, u16)> {
    let node = *r.host_nodes.get(dst as usize)?;
    r.ports
        .iter()
        .find(|p| p.peer == node)
        .map(|p| (p.node, p.port))
}

/// The queue toward host `dst` at every sampling instant in `[t0, t1)`,
/// 0 where no row was logged (the log lists non-empty queues only), summed
/// over priorities.
fn queue_trace(r: &Report, dst: u32, t0: Ps, t1: Ps) -> Vec<(Ps, u64)> {
    let Some((node, port)) = port_to(r, dst) else {
        return Vec::new();
    };
    if r.sample == 0 {
        return Vec::new();
    }
    let first = t0.div_ceil(r.sample);
    let last = t1.min(r.now).div_ceil(r.sample);
    let mut v: Vec<(Ps, u64)> = (first..last).map(|k| (k * r.sample, 0)).collect();
    for q in &r.queues {
        if q.node == node && q.port == port && q.time >= t0 && q.time < t1 {
            let k = (q.time / r.sample).saturating_sub(first) as usize;
            if let Some(slot) = v.get_mut(k) {
                slot.1 += q.bytes;
            }
        }
    }
    v
}

fn mean_queue(trace: &[(Ps, u64)]) -> f64 {
    trace.iter().map(|s| s.1 as f64).sum::<f64>() / trace.len().max(1) as f64
}

/// Bytes flow `id` had delivered by `t` (its last progress sample at or
/// before `t`).
fn delivered_by(r: &Report, id: u32, t: Ps) -> u64 {
    r.flow_progress
        .iter()
        .filter(|(ts, f, _)| *f == id && *ts <= t)
        .map(|s| s.2)
        .max()
        .unwrap_or(0)
}

/// Each flow's goodput (b/s) over `[t0, t1]`.
fn shares(r: &Report, t0: Ps, t1: Ps) -> Vec<f64> {
    let dt = (t1 - t0) as f64 / 1e12;
    r.flows
        .iter()
        .map(|f| (delivered_by(r, f.id, t1) - delivered_by(r, f.id, t0)) as f64 * 8.0 / dt)
        .collect()
}

/// Jain's fairness index (Σx)² / (n·Σx²): 1 when all are equal, 1/n when
/// one takes everything (Jain, Chiu and Hawe, DEC-TR-301, 1984).
pub fn jain(x: &[f64]) -> f64 {
    let s: f64 = x.iter().sum();
    let s2: f64 = x.iter().map(|v| v * v).sum();
    if s2 == 0.0 {
        return 0.0;
    }
    s * s / (x.len() as f64 * s2)
}

/// Each flow's goodput in Gb/s averaged over `window` ending at every
/// progress sample, from `r.flow_progress`.
fn goodput_series(r: &Report, window: Ps) -> Vec<(String, Vec<(f64, f64)>)> {
    let step = (window / r.sample.max(1)).max(1) as usize;
    r.flows
        .iter()
        .map(|f| {
            let pts: Vec<(Ps, u64)> = r
                .flow_progress
                .iter()
                .filter(|s| s.1 == f.id)
                .map(|s| (s.0, s.2))
                .collect();
            let series = pts
                .iter()
                .enumerate()
                .skip(step)
                .step_by(step)
                .map(|(i, &(t, b))| {
                    let (t0, b0) = pts[i - step];
                    let gbps = (b - b0) as f64 * 8.0 / ((t - t0) as f64 / 1e12) / 1e9;
                    (t as f64 / 1e9, gbps)
                })
                .collect();
            (format!("flow {} (host {})", f.id, f.src), series)
        })
        .collect()
}

fn ms(t: Ps) -> f64 {
    t as f64 / 1e9
}

fn queue_kb_series(trace: &[(Ps, u64)], every: usize) -> Vec<(f64, f64)> {
    trace
        .iter()
        .step_by(every.max(1))
        .map(|&(t, b)| (ms(t), b as f64 / 1e3))
        .collect()
}

fn level(label: String, x0: f64, x1: f64, y: f64) -> (String, Vec<(f64, f64)>) {
    (label, vec![(x0, y), (x1, y)])
}

// ---------------------------------------------------------------------------
// DCQCN
// ---------------------------------------------------------------------------

/// The marking every DCQCN run here uses: Zhu et al., SIGCOMM 2015 §5
/// (Kmin 5 KB, Kmax 200 KB, Pmax 1 %), the values the CoNEXT 2016 fluid
/// model is evaluated with.
const DCQCN_ECN: &str = "[switch.ecn]\nkmin_kb = 5\nkmax_kb = 200\npmax = 0.01";
const KMIN: f64 = 5.0 * 1024.0;
const KMAX: f64 = 200.0 * 1024.0;
const PMAX: f64 = 0.01;

/// The DCQCN settings of every DCQCN run here, as `[cc]` TOML and as the
/// controller's configuration the fluid model reads.
///
/// Full suite: the paper's preset (Zhu et al., SIGCOMM 2015 §5: g = 1/256,
/// T = 55 µs, B = 10 MB, R_AI = 40 Mb/s). Fast suite: g = 1/16 and
/// R_AI = 200 Mb/s. g does not enter the fixed point
/// (α* = 1 − (1 − p)^{τ'R}), only how fast α gets there (τ'/g: 14 ms
/// against 0.9 ms). The start-up incast cuts every flow far below its
/// share, and with B = 10 MB the timer's R_AI per T is all a slowed flow
/// gains (0.7 Gb/s per ms at 40 Mb/s), so the fast runs raise R_AI, which
/// the model takes as an input: they are checked against their own fixed
/// point. (Tried and rejected: a 64 KB byte counter recovers quickly but
/// favours fast flows, whose byte stage and so hyper increase run more
/// often — Jain's index fell to 0.39; a 10 µs timer, shorter than the
/// 50 µs CNP interval, undoes each cut by fast recovery before the next
/// CNP and lets 8 flows fill the buffer.)
fn dcqcn_setting(fast: bool) -> (&'static str, DcqcnConfig) {
    if fast {
        (
            "algorithm = \"dcqcn\"\nrate_ai_mbps = 200",
            DcqcnConfig {
                rate_ai_bps: 200_000_000,
                ..DcqcnConfig::default()
            },
        )
    } else {
        (
            "algorithm = \"dcqcn\"\npreset = \"paper\"",
            DcqcnConfig::paper(),
        )
    }
}

fn dcqcn_cc(fast: bool) -> &'static str {
    dcqcn_setting(fast).0
}

/// `n` flows whose starts are staggered by `stagger_us`, each a different
/// sender: a new flow starts at line rate against flows already cut back.
fn dcqcn_fair_share(fast: bool, out: &Path) -> Result<Check, ValidateError> {
    let name = "dcqcn_fair_share";
    let (stagger, stop) = if fast {
        (500.0, 8_000.0)
    } else {
        (2_000.0, 40_000.0)
    };
    let flows: Vec<(u32, f64)> = (1..=4).map(|i| (i, (i - 1) as f64 * stagger)).collect();
    let r = simulate(
        name,
        &star(dcqcn_cc(fast), DCQCN_ECN, "", &flows, stop, 10.0),
    )?;
    let last = ps_us(stop);
    let from = ps_us(3.0 * stagger + (stop - 3.0 * stagger) / 2.0);
    let s = shares(&r, from, last);
    let j = jain(&s);
    // Equal shares alone do not need DCQCN: with no congestion control the
    // switch's round robin splits the link evenly too (Jain 0.99996), the
    // queue standing at PFC's threshold. DCQCN's fair share is one with
    // the queue on the RED curve, below Kmax (CoNEXT 2016, §3).
    let q = mean_queue(&queue_trace(&r, 0, from, last));
    plot::write_lines(
        out,
        name,
        "DCQCN: 4 staggered flows on one 100 Gb/s link",
        "time (ms)",
        "goodput (Gb/s, 100 µs windows)",
        goodput_series(&r, 100 * PS_PER_US),
    )?;
    Ok(Check::new(
        name,
        "Jain's index of the 4 flows' goodput over the second half of the time all 4 run",
        1.0,
        "the DCQCN fluid model has a unique fixed point, at which every flow gets C/N (Zhu et al., CoNEXT 2016, §3); the DCQCN paper (Zhu et al., SIGCOMM 2015) shows flows converging to equal shares",
        j,
        "",
        format!("≥ 0.95, with the mean queue ≤ Kmax = {:.0} KB", KMAX / 1e3),
        (0.95, 1.0 + 1e-9),
        format!(
            "star, 4 senders → host 0, 100 Gb/s, 1 µs links, MTU {MTU}; starts {stagger} µs apart; {}; RED 5/200 KB/1 %; window {:.1}–{:.1} ms; shares {}; mean queue {:.1} KB",
            dcqcn_cc(fast).replace('\n', ", "),
            ms(from),
            ms(last),
            fmt_gbps(&s),
            q / 1e3
        ),
    ))
    .map(|mut c| {
        c.pass &= q <= KMAX;
        c
    })
}

fn ps_us(us: f64) -> Ps {
    (us * PS_PER_US as f64) as Ps
}

fn fmt_gbps(v: &[f64]) -> String {
    v.iter()
        .map(|x| format!("{:.1}", x / 1e9))
        .collect::<Vec<_>>()
        .join("/")
        + " Gb/s"
}

/// The DCQCN fluid model's parameters (Zhu et al., "ECN or Delay: Lessons
/// Learnt from Analysis of DCQCN and TIMELY", CoNEXT 2016, §3.1, Table 1).
/// Rates are in packets per second, as in the paper: p is a per-packet
/// marking probability, so the model's answer depends on the packet size.
#[derive(Debug, Clone, Copy)]
pub struct DcqcnFluid {
    /// Bottleneck capacity C (b/s).
    pub c_bps: f64,
    /// Flows N.
    pub n: f64,
    /// Bytes per packet on the bottleneck.
    pub pkt_bytes: f64,
    /// RED marking: Kmin, Kmax (bytes), Pmax.
    pub kmin: f64,
    pub kmax: f64,
    pub pmax: f64,
    /// τ: the NP's CNP interval (s).
    pub tau: f64,
    /// τ': the α update interval (s).
    pub tau_alpha: f64,
    /// T: the rate-increase timer (s).
    pub timer: f64,
    /// B: the byte counter (bytes).
    pub byte_counter: f64,
    /// R_AI (b/s).
    pub r_ai_bps: f64,
}

/// The fixed point of the DCQCN fluid model.
#[derive(Debug, Clone, Copy)]
pub struct DcqcnFixedPoint {
    /// Marking probability p*.
    pub p: f64,
    /// Queue q* (bytes), from the RED curve at p*.
    pub queue: f64,
    pub alpha: f64,
    /// R_T* − R_C* (b/s).
    pub rt_minus_rc_bps: f64,
}

impl DcqcnFluid {
    /// Solves the fixed point of the model's equations (CoNEXT 2016, eqs.
    /// (2)–(5)) with every derivative zero. Writing a = 1 − (1 − p)^{τR}
    /// (a CNP in an interval τ), α* = 1 − (1 − p)^{τ'R} from (3), and
    /// S = R·p·[1/((1 − p)^{−B} − 1) + 1/((1 − p)^{−TR} − 1)] (the rate of
    /// byte-counter and timer increase events), (4) gives
    /// R_T − R_C = R_AI·S·τ/a, and (5) with it R·α*·a² = R_AI·S²·τ², one
    /// equation in p with R = C/N from (2) (dq/dt = 0). Its left side rises
    /// with p as p³ and its right side falls, so bisection finds the one
    /// root; q* follows from the RED curve.
    pub fn fixed_point(&self) -> Option<DcqcnFixedPoint> {
        let r = self.c_bps / 8.0 / self.pkt_bytes / self.n;
        let r_ai = self.r_ai_bps / 8.0 / self.pkt_bytes;
        let b = self.byte_counter / self.pkt_bytes;
        let parts = |p: f64| {
            let keep = 1.0 - p;
            let a = 1.0 - keep.powf(self.tau * r);
            let alpha = 1.0 - keep.powf(self.tau_alpha * r);
            let ev = |k: f64| {
                let d = keep.powf(-k) - 1.0;
                if d > 0.0 { 1.0 / d } else { 0.0 }
            };
            let s = r * p * (ev(b) + ev(self.timer * r));
            (a, alpha, s)
        };
        let f = |p: f64| {
            let (a, alpha, s) = parts(p);
            r * alpha * a * a - r_ai * s * s * self.tau * self.tau
        };
        let (mut lo, mut hi) = (1e-12, 1.0 - 1e-12);
        if f(lo) > 0.0 || f(hi) < 0.0 {
            return None;
        }
        for _ in 0..200 {
            let mid = (lo * hi).sqrt();
            if f(mid) < 0.0 {
                lo = mid;
            } else {
                hi = mid;
            }
        }
        let p = (lo * hi).sqrt();
        let (a, alpha, s) = parts(p);
        let queue = if p >= self.pmax {
            self.kmax
        } else {
            self.kmin + p / self.pmax * (self.kmax - self.kmin)
        };
        Some(DcqcnFixedPoint {
            p,
            queue,
            alpha,
            rt_minus_rc_bps: r_ai * s * self.tau / a * 8.0 * self.pkt_bytes,
        })
    }
}

/// The fluid model with the simulator's DCQCN settings `d` (T, B, R_AI,
/// τ' from crates/rnic/src/cc/dcqcn.rs; the NP's CNP interval τ = 50 µs,
/// `RnicConfig::cnp_interval_ns`) and the marking above, for `n` flows of
/// MTU-sized frames.
pub fn dcqcn_model(n: usize, d: &DcqcnConfig) -> DcqcnFluid {
    DcqcnFluid {
        c_bps: LINE_BPS,
        n: n as f64,
        pkt_bytes: (MTU + HEADERS) as f64,
        kmin: KMIN,
        kmax: KMAX,
        pmax: PMAX,
        tau: roce_rnic::RnicConfig::default().cnp_interval_ns as f64 * 1e-9,
        tau_alpha: d.alpha_resume_interval_ns as f64 * 1e-9,
        timer: d.rp_timer_ns as f64 * 1e-9,
        byte_counter: d.byte_counter as f64,
        r_ai_bps: d.rate_ai_bps as f64,
    }
}

fn dcqcn_fixed_point(fast: bool, out: &Path) -> Result<Vec<Check>, ValidateError> {
    let ns: &[usize] = if fast { &[2, 8] } else { &[2, 4, 8, 16] };
    // Long enough for α (τ'/g) to settle many times over; the average is
    // over the second half.
    let stop = if fast { 6_000.0 } else { 60_000.0 };
    // The model averages out DCQCN's sawtooth and has no fast recovery or
    // hyper increase; the full runs land within 10 % of it. The fast runs
    // (6 ms, g = 1/16 so α's time constant τ'/g is 0.9 ms and the averaged
    // second half starts 3.3 of them in) have settled α, but their R_AI of
    // 200 Mb/s (5 × the paper's) makes each timer step and so the sawtooth
    // around the fixed point 5 × larger than the model's averaging assumes:
    // they land at +30 % (N = 2: 19.9 KB against 15.3 KB) and −35 % (N = 8:
    // 45.8 KB against 70.5 KB). ±40 % is that spread plus a margin for
    // other seeds and parameter sets; with nothing reacting to marks the
    // queue fills toward PFC's threshold, far outside it.
    let (tol, lo, hi) = if fast {
        ("±40 % (fast: 6 ms runs, R_AI 200 Mb/s)", 0.6, 1.4)
    } else {
        ("±25 %", 0.75, 1.25)
    };
    let mut checks = Vec::new();
    let mut model_pts = Vec::new();
    let mut sim_pts = Vec::new();
    for &n in ns {
        let name = format!("dcqcn_fixed_point_n{n}");
        let flows: Vec<(u32, f64)> = (1..=n as u32).map(|i| (i, 0.0)).collect();
        let r = simulate(
            &name,
            &star(dcqcn_cc(fast), DCQCN_ECN, "", &flows, stop, 5.0),
        )?;
        let m = dcqcn_model(n, &dcqcn_setting(fast).1);
        let fp = m
            .fixed_point()
            .ok_or_else(|| measure_err(&name, "the fluid model has no fixed point"))?;
        let (t0, t1) = (ps_us(stop / 2.0), ps_us(stop));
        let trace = queue_trace(&r, 0, t0, t1);
        let q = mean_queue(&trace);
        let util = shares(&r, t0, t1).iter().sum::<f64>() / LINE_BPS;
        model_pts.push((n as f64, fp.queue / 1e3));
        sim_pts.push((n as f64, q / 1e3));
        let full = queue_trace(&r, 0, 0, t1);
        let every = full.len() / 2000 + 1;
        plot::write_lines(
            out,
            &name,
            &format!("DCQCN, {n} flows on 100 Gb/s: bottleneck queue"),
            "time (ms)",
            "queue (KB)",
            vec![
                ("simulated queue".into(), queue_kb_series(&full, every)),
                level(
                    format!("fluid model q* = {:.1} KB", fp.queue / 1e3),
                    0.0,
                    ms(t1),
                    fp.queue / 1e3,
                ),
                level(
                    format!("measured mean = {:.1} KB", q / 1e3),
                    ms(t0),
                    ms(t1),
                    q / 1e3,
                ),
            ],
        )?;
        checks.push(Check::new(
            &name,
            &format!("mean bottleneck queue of {n} long-lived DCQCN flows in steady state (second half of the run)"),
            fp.queue,
            &format!(
                "fixed point of the DCQCN fluid model (Zhu et al., CoNEXT 2016, eqs. 2–5, solved in validate.rs): p* = {:.2e}, α* = {:.3}, q* on the RED curve; the model's rates are in packets/s, here {} B packets ({MTU} B payload + {HEADERS} B RoCEv2 headers); C = 100 Gb/s, τ = {} µs, τ' = {} µs, T = {} µs, B = {} B, R_AI = {} Mb/s",
                fp.p, fp.alpha, MTU + HEADERS, m.tau * 1e6, m.tau_alpha * 1e6, m.timer * 1e6, m.byte_counter, m.r_ai_bps / 1e6
            ),
            q,
            "B",
            tol.into(),
            (fp.queue * lo, fp.queue * hi),
            format!(
                "star, {n} senders → host 0 started together, {stop} µs, {}; RED 5/200 KB/1 %; utilisation {util:.3}",
                dcqcn_cc(fast).replace('\n', ", ")
            ),
        ));
    }
    plot::write_lines(
        out,
        "dcqcn_fixed_point",
        "DCQCN steady-state queue against the fluid model's fixed point",
        "flows N",
        "queue (KB)",
        vec![
            ("fluid model q*".into(), model_pts),
            ("simulated mean".into(), sim_pts),
        ],
    )?;
    Ok(checks)
}

// ---------------------------------------------------------------------------
// TIMELY
// ---------------------------------------------------------------------------

/// TIMELY in its gradient regime: T_low (2 µs) below this fabric's 4.2 µs
/// base RTT, so every update follows the RTT gradient (the regime the
/// CoNEXT 2016 analysis, §4, studies; with the paper's T_low = 50 µs every
/// RTT here is "low" and TIMELY is plain additive increase), and δ =
/// 100 Mb/s, HAI 500 Mb/s so 100 Gb/s is reached in milliseconds. The
/// paper's update timing (one per 64 KB segment acknowledged), which the
/// CoNEXT 2016 analysis assumes: a faster flow updates more often.
const TIMELY_CC: &str =
    "algorithm = \"timely\"\nt_low_us = 2\nt_high_us = 50\nrate_ai_mbps = 100\nrate_hai_mbps = 500";

/// Two TIMELY flows, the second starting `lag_us` after the first (so the
/// two begin the shared phase at different rates).
fn timely_run(name: &str, lag_us: f64, stop: f64) -> Result<Report, ValidateError> {
    simulate(
        name,
        &star(
            TIMELY_CC,
            "",
            "ack_every = 1",
            &[(1, 0.0), (2, lag_us)],
            stop,
            10.0,
        ),
    )
}

fn timely_shares(fast: bool, out: &Path) -> Result<Vec<Check>, ValidateError> {
    // The lagging flow's shares settle within about 5 ms of its start.
    let stop = if fast { 12_000.0 } else { 40_000.0 };
    let lags: &[f64] = if fast {
        &[0.0, 1_000.0]
    } else {
        &[0.0, 1_000.0, 2_000.0, 5_000.0, 10_000.0]
    };
    let mut fractions = Vec::new();
    let mut noise = 0f64;
    let mut series = Vec::new();
    let mut jains = Vec::new();
    for (i, lag) in lags.iter().enumerate() {
        let name = format!("timely_lag{}", i);
        let r = timely_run(&name, *lag, stop)?;
        let from = ps_us(lag + (stop - lag) / 2.0);
        let s = shares(&r, from, ps_us(stop));
        let frac = |v: &[f64]| v.first().copied().unwrap_or(0.0) / v.iter().sum::<f64>().max(1.0);
        fractions.push(frac(&s));
        // Within-run drift: the share over the window's two halves.
        let mid = ps_us(lag + 3.0 * (stop - lag) / 4.0);
        let drift = (frac(&shares(&r, from, mid)) - frac(&shares(&r, mid, ps_us(stop)))).abs();
        noise = f64::max(noise, drift);
        let q = mean_queue(&queue_trace(&r, 0, from, ps_us(stop)));
        jains.push((jain(&s), s, q, r.counters.pfc_xoff_tx));
        for (label, pts) in goodput_series(&r, 100 * PS_PER_US) {
            series.push((format!("second flow +{lag} µs: {label}"), pts));
        }
    }
    plot::write_lines(
        out,
        "timely_shares",
        "TIMELY: two flows, started together and apart",
        "time (ms)",
        "goodput (Gb/s, 100 µs windows)",
        series.clone(),
    )?;
    plot::write_lines(
        out,
        "timely_no_unique_fixed_point",
        "TIMELY: two flows, started together and apart",
        "time (ms)",
        "goodput (Gb/s, 100 µs windows)",
        series,
    )?;
    let scen = |i: usize| {
        format!(
            "star, 2 senders → host 0, TIMELY (T_low 2 µs, T_high 50 µs, δ 100 Mb/s, HAI 500 Mb/s, else the paper's: one update per 64 KB segment acknowledged), ACK per packet; second flow starts {} µs after the first; {stop} µs; shares over the second half of the shared phase: {}, mean queue {:.0} KB, {} PFC pauses in the run",
            lags[i],
            fmt_gbps(&jains[i].1),
            jains[i].2 / 1e3,
            jains[i].3
        )
    };
    let gap = fractions.iter().copied().fold(f64::MIN, f64::max)
        - fractions.iter().copied().fold(f64::MAX, f64::min);
    Ok(vec![
        Check::new(
            "timely_shares",
            "Jain's index of two TIMELY flows started together",
            1.0,
            "symmetric flows with identical RTT samples take identical steps (TIMELY's update, Mittal et al. SIGCOMM 2015 Alg. 1), so equal starts stay equal",
            jains[0].0,
            "",
            "≥ 0.95".into(),
            (0.95, 1.0 + 1e-9),
            scen(0),
        ),
        Check::new(
            "timely_no_unique_fixed_point",
            "spread (max − min) of the first flow's share of the bottleneck across runs that differ only in when the second flow starts (so the shared phase begins at different rates)",
            0.0,
            "TIMELY has no unique fixed point, so different starting rates end at different shares (Zhu et al., CoNEXT 2016, §4; the abstract: TIMELY \"can converge to stable regime with arbitrary unfairness\"); a unique fixed point would make this spread 0 up to measurement noise",
            gap,
            "",
            format!(
                "≥ 3 × the largest within-run drift of that share (between the two halves of a run's window: {noise:.4}), and ≥ 0.01"
            ),
            (f64::max(3.0 * noise, 0.01), 1.0),
            format!(
                "{}. The splits differ persistently. With ns-3's update timing (once per round trip, CC_MODE 7; segment_bytes = 0) both flows take equal additive steps; with the paper's (once per segment, so the faster flow also increases more often) the spread is wider (fast suite: 0.051 with ns-3's timing, 0.117 with the paper's)",
                (0..lags.len()).map(scen).collect::<Vec<_>>().join("; ")
            ),
        ),
    ])
}

// ---------------------------------------------------------------------------
// HPCC, DCTCP, Swift
// ---------------------------------------------------------------------------

fn incast4(stop: f64) -> Vec<(u32, f64)> {
    let _ = stop;
    (1..=4).map(|i| (i, 0.0)).collect()
}

fn hpcc_queue(fast: bool, out: &Path) -> Result<Vec<Check>, ValidateError> {
    let stop = if fast { 1_000.0 } else { 10_000.0 };
    let r = simulate(
        "hpcc_queue",
        &star(
            "algorithm = \"hpcc\"",
            "",
            "ack_every = 1",
            &incast4(stop),
            stop,
            1.0,
        ),
    )?;
    let (t0, t1) = (ps_us(stop / 2.0), ps_us(stop));
    let trace = queue_trace(&r, 0, t0, t1);
    let q = mean_queue(&trace);
    let util = shares(&r, t0, t1).iter().sum::<f64>() / LINE_BPS;
    let full = queue_trace(&r, 0, 0, t1);
    plot::write_lines(
        out,
        "hpcc_queue",
        "HPCC: 4 long flows into one 100 Gb/s port",
        "time (ms)",
        "queue (KB)",
        vec![(
            "bottleneck queue".into(),
            queue_kb_series(&full, full.len() / 2000 + 1),
        )],
    )?;
    plot::write_lines(
        out,
        "hpcc_utilisation",
        "HPCC: 4 long flows into one 100 Gb/s port",
        "time (ms)",
        "goodput (Gb/s, 20 µs windows)",
        goodput_series(&r, 20 * PS_PER_US),
    )?;
    let scen = format!(
        "star, 4 senders → host 0 started together, HPCC (η = 0.95), ACK per packet; {stop} µs; second half"
    );
    // One MTU frame: the queue HPCC's η < 1 leaves is a fraction of one.
    let frame = (MTU + HEADERS) as f64;
    Ok(vec![
        Check::new(
            "hpcc_queue",
            "mean bottleneck queue in steady state",
            0.0,
            "HPCC aims inflight bytes at η·BDP with η = 0.95, so the link stays 5 % under capacity and the queue drains (Li et al., SIGCOMM 2019, §3)",
            q,
            "B",
            format!("≤ {frame:.0} B (one frame)"),
            (0.0, frame),
            scen.clone(),
        ),
        Check::new(
            "hpcc_utilisation",
            "bottleneck goodput / line rate in steady state",
            0.95,
            "η = 0.95, HPCC's target utilisation (Li et al., SIGCOMM 2019, §3.3); goodput excludes headers, so the payload share of a frame lowers it",
            util,
            "",
            "0.85–1.0".into(),
            (0.85, 1.0),
            scen,
        ),
    ])
}

fn dctcp_queue(fast: bool, out: &Path) -> Result<Check, ValidateError> {
    const K: f64 = 100.0 * 1024.0;
    let stop = if fast { 1_500.0 } else { 10_000.0 };
    let r = simulate(
        "dctcp_queue",
        &star(
            "algorithm = \"dctcp\"",
            "[switch.ecn]\nkmin_kb = 100\nkmax_kb = 100\npmax = 1.0",
            "ack_every = 1",
            &incast4(stop),
            stop,
            1.0,
        ),
    )?;
    let (t0, t1) = (ps_us(stop / 2.0), ps_us(stop));
    let q = mean_queue(&queue_trace(&r, 0, t0, t1));
    let full = queue_trace(&r, 0, 0, t1);
    plot::write_lines(
        out,
        "dctcp_queue",
        "DCTCP (CC_MODE 8 style): 4 long flows, K = 100 KB",
        "time (ms)",
        "queue (KB)",
        vec![
            (
                "bottleneck queue".into(),
                queue_kb_series(&full, full.len() / 2000 + 1),
            ),
            level("K".into(), 0.0, ms(t1), K / 1e3),
        ],
    )?;
    Ok(Check::new(
        "dctcp_queue",
        "mean bottleneck queue in steady state",
        K,
        "DCTCP's queue oscillates around the marking threshold K (Alizadeh et al., SIGCOMM 2010, §3.3: amplitude O(√(C·RTT·N)) ≪ K here)",
        q,
        "B",
        "±50 %".into(),
        (0.5 * K, 1.5 * K),
        format!(
            "star, 4 senders → host 0 started together, DCTCP (rate, HPCC ns-3 CC_MODE 8 style), step marking at K = 100 KB, ACK per packet; {stop} µs; second half"
        ),
    ))
}

fn swift_delay(fast: bool, out: &Path) -> Result<Check, ValidateError> {
    const TARGET_US: f64 = 10.0;
    // Two 1 µs links each way plus a frame's and an ACK's serialisation.
    let base_rtt_ns = 4.0 * LINK_DELAY_NS as f64 + 200.0;
    let stop = if fast { 1_500.0 } else { 10_000.0 };
    let r = simulate(
        "swift_delay",
        &star(
            &format!(
                "algorithm = \"swift\"\nbase_target_us = {TARGET_US}\nhop_scale_us = 0\nfs_range_us = 0.001"
            ),
            "",
            "ack_every = 1",
            &incast4(stop),
            stop,
            1.0,
        ),
    )?;
    let (t0, t1) = (ps_us(stop / 2.0), ps_us(stop));
    let bytes_per_us = LINE_BPS / 8.0 / 1e6;
    let delay_us = |b: f64| b / bytes_per_us;
    let measured = base_rtt_ns / 1e3 + delay_us(mean_queue(&queue_trace(&r, 0, t0, t1)));
    let full = queue_trace(&r, 0, 0, t1);
    plot::write_lines(
        out,
        "swift_delay",
        "Swift: 4 long flows, target delay 10 µs",
        "time (ms)",
        "RTT = base + queueing (µs)",
        vec![
            (
                "base RTT + bottleneck queueing".into(),
                full.iter()
                    .step_by(full.len() / 2000 + 1)
                    .map(|&(t, b)| (ms(t), base_rtt_ns / 1e3 + delay_us(b as f64)))
                    .collect(),
            ),
            level("target".into(), 0.0, ms(t1), TARGET_US),
        ],
    )?;
    Ok(Check::new(
        "swift_delay",
        "mean RTT in steady state: base RTT + the bottleneck queue's delay",
        TARGET_US,
        "Swift's AIMD drives the measured delay to its target (Kumar et al., SIGCOMM 2020, §3.1); flow and hop scaling off, so target = base_target",
        measured,
        "µs",
        "±1 µs".into(),
        (TARGET_US - 1.0, TARGET_US + 1.0),
        format!(
            "star, 4 senders → host 0 started together, Swift base_target 10 µs, ACK per packet; {stop} µs; second half; base RTT {:.1} µs",
            base_rtt_ns / 1e3
        ),
    ))
}

// ---------------------------------------------------------------------------
// IRN without PFC against go-back-N with PFC
// ---------------------------------------------------------------------------

/// An `n`:1 incast of `size`-byte writes into host 0 through one switch
/// whose buffer overflows without PFC, plus one *victim* write of the same
/// size from each incast sender `i` to its own idle receiver `n + i`: the
/// victims cross no congested link, so only PFC's head-of-line blocking
/// (pausing the sender's whole link for the incast's sake, Mittal et al.,
/// SIGCOMM 2018, §2) can slow them. The same fabric, seed and flows for
/// every (recovery, PFC) pair, so only loss recovery and flow control
/// differ. No congestion control, as in the IRN paper's "no CC" columns.
fn irn_incast(recovery: &str, pfc: &str, n: u32, size: u64) -> String {
    let flows: Vec<String> = (1..=n)
        .flat_map(|i| {
            [
                format!("{{ src = {i}, dst = 0, size = {size}, start_us = 0 }}"),
                format!(
                    "{{ src = {i}, dst = {}, size = {size}, start_us = 0 }}",
                    n + i
                ),
            ]
        })
        .collect();
    format!(
        r#"seed = 1
[transport]
mtu = {MTU}
data_priority = 3
control_priority = 6
recovery = "{recovery}"
ack_every = {IRN_ACK_EVERY}
timeout = {IRN_GBN_TIMEOUT}
bdp_pkts = {IRN_BDP_PKTS}
rto_low_us = 100
rto_high_us = 320
[switch]
buffer_kb = {IRN_BUFFER_KB}
pfc = "{pfc}"
[topology]
kind = "star"
hosts = {hosts}
host_gbps = 100
link_delay_ns = {LINK_DELAY_NS}
[[workload]]
kind = "flows"
flows = [{flows}]
"#,
        hosts = 2 * n + 1,
        flows = flows.join(", ")
    )
}

/// ACK coalescing below the BDP cap: with `ack_every` (default 64) above
/// `bdp_pkts` an IRN sender stalls at its cap until the receiver's next
/// ACK, which never comes before RTO.
const IRN_ACK_EVERY: u32 = 16;
/// Go-back-N's local ACK timeout exponent: 4.096 µs × 2^6 = 262 µs, next
/// to IRN's RTO_high (320 µs), so go-back-N is not handicapped by a
/// longer timer than IRN's.
const IRN_GBN_TIMEOUT: u32 = 6;
/// IRN's BDP-FC cap: the paper's 100 Gb/s × (base RTT) in MTU packets,
/// the star's base RTT is about 4.2 µs: 52 KB, 51 packets of 1024 + 62 bytes.
const IRN_BDP_PKTS: u32 = 51;
/// A switch buffer deep enough for PFC's headroom (go-back-N + PFC runs
/// lossless; 512 KB and less drop even with PFC) and shallow enough that
/// without PFC the incast drops.
const IRN_BUFFER_KB: u32 = 1024;

/// Mean FCT (µs) over all flows; a flow that never finished counts with
/// the run's end as its finish, a lower bound on what it would have taken.
fn mean_fct_us(r: &Report) -> f64 {
    let n = r.flows.len().max(1) as f64;
    r.flows
        .iter()
        .map(|f| f.finish.unwrap_or(r.now).saturating_sub(f.start) as f64 / PS_PER_US as f64)
        .sum::<f64>()
        / n
}

/// IRN's headline (Mittal et al., SIGCOMM 2018, abstract and §4.2): IRN
/// without PFC against RoCE's go-back-N with PFC, and go-back-N without
/// PFC to show why RoCE needed PFC. The PFC run must be lossless and the
/// IRN run must drop, or the comparison is not the paper's.
fn irn_vs_pfc(fast: bool, out: &Path) -> Result<Vec<Check>, ValidateError> {
    let (n, size) = if fast {
        (16u32, 200_000u64)
    } else {
        (16, 1_000_000)
    };
    let runs = [
        ("go-back-N + PFC", "gbn", "dynamic"),
        ("IRN, no PFC", "irn", "off"),
        ("go-back-N, no PFC", "gbn", "off"),
    ];
    let mut reports = Vec::new();
    for (label, recovery, pfc) in runs {
        let name = format!("irn_vs_pfc_{recovery}_pfc_{pfc}");
        let r = simulate(&name, &irn_incast(recovery, pfc, n, size))?;
        reports.push((label, r));
    }
    if reports[0].1.counters.dropped_pkts != 0 {
        return Err(measure_err(
            "irn_vs_pfc",
            "the PFC fabric dropped packets: go-back-N with PFC must run lossless",
        ));
    }
    if reports[1].1.counters.dropped_pkts == 0 {
        return Err(measure_err(
            "irn_vs_pfc",
            "the fabric without PFC dropped nothing: the comparison would not be under loss",
        ));
    }
    let fct = |i: usize| mean_fct_us(&reports[i].1);
    let (gbn_pfc, irn, gbn_lossy) = (fct(0), fct(1), fct(2));
    let describe = |i: usize| {
        let r = &reports[i].1;
        format!(
            "{}: mean FCT {:.1} µs, {} dropped, {} resent, {} timeouts, {} PFC XOFF sent, {}/{} flows done",
            reports[i].0,
            mean_fct_us(r),
            r.counters.dropped_pkts,
            r.counters.retransmits,
            r.counters.timeouts,
            r.counters.pfc_xoff_tx,
            r.flows
                .iter()
                .filter(|f| f.ok && f.finish.is_some())
                .count(),
            r.flows.len()
        )
    };
    let setting = format!(
        "star, {n}:1 incast of {size}-byte writes into host 0 plus one {size}-byte victim write from each incast sender to its own idle receiver, all started together; 100 Gb/s, 1 µs links, {IRN_BUFFER_KB} KB switch buffer, MTU {MTU}, ack_every {IRN_ACK_EVERY}, no CC; go-back-N timeout 4.096 µs × 2^{IRN_GBN_TIMEOUT}; IRN bdp_pkts {IRN_BDP_PKTS}, RTO_low 100 µs, RTO_high 320 µs. {}; {}; {}",
        describe(0),
        describe(1),
        describe(2)
    );
    let mut series = Vec::new();
    for (label, r) in &reports {
        let mut fcts: Vec<(f64, f64)> = r
            .flows
            .iter()
            .map(|f| {
                (
                    f.id as f64,
                    f.finish.unwrap_or(r.now).saturating_sub(f.start) as f64 / PS_PER_US as f64,
                )
            })
            .collect();
        fcts.sort_by(|a, b| a.0.total_cmp(&b.0));
        series.push((label.to_string(), fcts));
    }
    plot::write_lines(
        out,
        "irn_vs_pfc",
        &format!("{n}:1 incast + victims: IRN without PFC vs go-back-N with and without PFC"),
        "flow id",
        "FCT (µs)",
        series,
    )?;
    let mut checks = vec![
        Check::new(
            "irn_nopfc_vs_gbn_pfc",
            "mean FCT of IRN without PFC ÷ mean FCT of go-back-N (RoCE) with PFC, same flows",
            0.5,
            "IRN paper (Mittal et al., SIGCOMM 2018), abstract and §4.2: IRN without PFC outperforms RoCE with PFC by 6–83 % (average and tail FCT and slowdown across their scenarios), i.e. a ratio of 0.17–0.94; the expected value is that range's middle. Here IRN wins by dropping PFC's head-of-line blocking of the victims and by its BDP cap keeping the incast's queue short",
            irn / gbn_pfc,
            "×",
            "0.17–0.94 (the paper's 6–83 % better)".into(),
            (0.17, 0.94),
            setting.clone(),
        ),
        Check::new(
            "gbn_nopfc_vs_gbn_pfc",
            "mean FCT of go-back-N without PFC ÷ mean FCT of go-back-N with PFC, same flows (unfinished flows count to the run's end)",
            1.0,
            "IRN paper §1–2: RoCE's go-back-N needs a lossless (PFC) fabric; dropping PFC without IRN makes it slower (ratio > 1, a bound of ours, not a paper figure)",
            gbn_lossy / gbn_pfc,
            "×",
            "> 1".into(),
            (1.0 + 1e-9, f64::MAX),
            setting.clone(),
        ),
        Check::new(
            "gbn_nopfc_vs_irn_nopfc",
            "mean FCT of go-back-N ÷ mean FCT of IRN, both without PFC, same flows and drops (unfinished flows count to the run's end)",
            2.0,
            "IRN paper §3–4: selective retransmission and BDP-FC, not PFC, are what make losses cheap; go-back-N resends whole windows per loss. The bound (at least 1.5 × slower) is ours, not a paper figure",
            gbn_lossy / irn,
            "×",
            "≥ 1.5".into(),
            (1.5, f64::MAX),
            setting,
        ),
    ];
    for c in &mut checks {
        c.plot = "irn_vs_pfc".into();
    }
    Ok(checks)
}

// ---------------------------------------------------------------------------
// HPCC-format incast, every CC_MODE
// ---------------------------------------------------------------------------

/// The HPCC-format validation inputs (`scenarios/validate/` and the
/// `scenarios/hpcc/` topology and trace files they name), built into the
/// binary so an installed `roce validate` needs no source tree.
const HPCC_INPUTS: [(&str, &str); 9] = [
    (
        "validate/config_incast8_mode1.txt",
        include_str!("../../../scenarios/validate/config_incast8_mode1.txt"),
    ),
    (
        "validate/config_incast8_mode3.txt",
        include_str!("../../../scenarios/validate/config_incast8_mode3.txt"),
    ),
    (
        "validate/config_incast8_mode10.txt",
        include_str!("../../../scenarios/validate/config_incast8_mode10.txt"),
    ),
    (
        "validate/config_incast8_mode7.txt",
        include_str!("../../../scenarios/validate/config_incast8_mode7.txt"),
    ),
    (
        "validate/config_incast8_mode8.txt",
        include_str!("../../../scenarios/validate/config_incast8_mode8.txt"),
    ),
    (
        "validate/flow_incast8_20mb.txt",
        include_str!("../../../scenarios/validate/flow_incast8_20mb.txt"),
    ),
    (
        "validate/flow_incast8_5mb.txt",
        include_str!("../../../scenarios/validate/flow_incast8_5mb.txt"),
    ),
    (
        "hpcc/topo_star9.txt",
        include_str!("../../../scenarios/hpcc/topo_star9.txt"),
    ),
    (
        "hpcc/trace.txt",
        include_str!("../../../scenarios/hpcc/trace.txt"),
    ),
];

/// The flow file the configs name (the full suite's): 8 × 20 MB, so the
/// incast lasts about 14 ms and every controller has thousands of round
/// trips to act in.
const CC_MODE_FLOWS_FULL: &str = "flow_incast8_20mb.txt";
/// The fast suite's: 8 × 5 MB (about 3.4 ms with all 8 active).
const CC_MODE_FLOWS_FAST: &str = "flow_incast8_5mb.txt";

fn io_error(path: &Path, source: std::io::Error) -> ValidateError {
    ValidateError::Io {
        path: path.into(),
        source,
    }
}

/// Writes [`HPCC_INPUTS`] under `out/hpcc_inputs/` (the configs' relative
/// paths resolve there, as in the repository) and returns its `validate/`.
fn hpcc_dir(out: &Path) -> Result<PathBuf, ValidateError> {
    let root = out.join("hpcc_inputs");
    for (rel, text) in HPCC_INPUTS {
        let path = root.join(rel);
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir).map_err(|e| io_error(dir, e))?;
        }
        std::fs::write(&path, text).map_err(|e| io_error(&path, e))?;
    }
    Ok(root.join("validate"))
}

/// One run of the HPCC-format incast and what the checks read from it.
struct IncastRun {
    report: Report,
    /// The second half of the time all 8 flows are active (start to the
    /// first completion): past the start-up transient, before any flow
    /// leaves.
    window: (Ps, Ps),
    /// Mean queue toward the receiver over the window (bytes).
    queue: f64,
    /// Goodput into the receiver over the window ÷ line rate.
    util: f64,
}

/// Runs `config_incast8_mode{mode}.txt` with the fast or full flow file,
/// and with `CC_MODE {run_as}` in place of its own when given (the
/// no-congestion-control reference and the tests that prove each check
/// fails without its controller).
fn hpcc_incast(
    dir: &Path,
    mode: u32,
    run_as: Option<u32>,
    fast: bool,
) -> Result<IncastRun, ValidateError> {
    let name = match run_as {
        Some(m) => format!("hpcc_cc_mode_{mode}_as_{m}"),
        None => format!("hpcc_cc_mode_{mode}"),
    };
    let file = format!("config_incast8_mode{mode}.txt");
    let text = HPCC_INPUTS
        .iter()
        .find(|(rel, _)| rel.ends_with(&file))
        .map(|(_, t)| *t)
        .ok_or_else(|| measure_err(&name, "no such built-in config"))?;
    let flows = if fast {
        CC_MODE_FLOWS_FAST
    } else {
        CC_MODE_FLOWS_FULL
    };
    let text: String = text
        .lines()
        .map(|l| match l.split_whitespace().next() {
            Some("FLOW_FILE") => format!("FLOW_FILE {flows}"),
            Some("CC_MODE") if run_as.is_some() => format!("CC_MODE {}", run_as.unwrap_or(0)),
            // No congestion control means no window either (ns-3's
            // HAS_WIN bounds every mode's bytes in flight).
            Some("HAS_WIN") if run_as.is_some() => "HAS_WIN 0".to_string(),
            _ => l.to_string(),
        })
        .collect::<Vec<_>>()
        .join("\n");
    let path = dir.join(format!("{name}.txt"));
    std::fs::write(&path, text).map_err(|e| io_error(&path, e))?;
    let e = Experiment::load(&path, None).map_err(|source| ValidateError::Hpcc {
        name: name.clone(),
        source,
    })?;
    let mut sim = Simulator::new(e.cfg, e.topo, &e.flows).map_err(|source| ValidateError::Sim {
        name: name.clone(),
        source,
    })?;
    sim.run().map_err(|source| ValidateError::Sim {
        name: name.clone(),
        source,
    })?;
    let report = sim.report();
    let start = report.flows.iter().map(|f| f.start).min().unwrap_or(0);
    let first_done = report
        .flows
        .iter()
        .map(|f| f.finish)
        .min()
        .flatten()
        .ok_or_else(|| measure_err(&name, "a flow did not finish"))?;
    let window = (start + (first_done - start) / 2, first_done);
    let queue = mean_queue(&queue_trace(&report, 0, window.0, window.1));
    let util = shares(&report, window.0, window.1).iter().sum::<f64>() / LINE_BPS;
    Ok(IncastRun {
        report,
        window,
        queue,
        util,
    })
}

/// The goodput every check asks of the link while it holds the queue: a
/// controller that idles the link is no answer. 1000-byte payloads in
/// frames of 1000 + 62 bytes (+ 20 of preamble and gap) carry at most
/// 92 % of the line as goodput; HPCC's η = 0.95 leaves 88 %; with no
/// controller the link is full (0.94 measured). Measured in the window:
/// DCQCN 0.94/0.92 (full/fast run), HPCC 0.86/0.86, DCTCP 0.92/0.92 and
/// TIMELY 0.89/0.72 — the fast run's 5 MB flows end while TIMELY's
/// additive increase is still climbing back. 0.7 admits all of them and
/// fails a controller that idles a third of the link.
const CC_MODE_MIN_UTIL: f64 = 0.7;

/// What `CC_MODE mode`'s controller is designed to do to the bottleneck
/// queue on this incast, given the run's marking at 100 Gb/s (`ecn`):
/// (expected, accepted range, tolerance, where it comes from).
fn cc_mode_band(mode: u32, ecn: Option<EcnConfig>) -> (f64, (f64, f64), String, String) {
    // Without a controller the queue fills to PFC's dynamic threshold: each
    // of the 8 ingress ports pauses at α·(free buffer) with α = 1/8, so
    // together they hold 8α/(1 + 8α) of the 32 MB buffer, half of it.
    const NO_CC: &str = "Without a controller the queue fills to PFC's dynamic threshold instead: 8 ingress ports each paused at α = 1/8 of the free buffer hold 8α/(1 + 8α), half the 32 MB buffer, 16.8 MB";
    let (kmin, kmax, pmax) = ecn.map_or((0.0, 0.0, 0.0), |e| {
        (e.kmin_bytes as f64, e.kmax_bytes as f64, e.pmax)
    });
    match mode {
        1 => (
            kmin,
            (0.0, kmax),
            format!("≤ Kmax = {:.0} KB", kmax / 1e3),
            format!(
                "DCQCN reacts only to ECN marks, which RED puts on a queue above Kmin = {:.0} KB with a probability rising to Pmax = {pmax} at Kmax = {:.0} KB (KMIN_MAP/KMAX_MAP/PMAX_MAP); the fluid model's fixed point lies on that curve below Kmax since p* < Pmax (Zhu et al., CoNEXT 2016, §3), and the sawtooth around it dips below Kmin (the expected value, where marking starts). {NO_CC}",
                kmin / 1e3,
                kmax / 1e3
            ),
        ),
        3 => (
            0.0,
            (0.0, 10e3),
            "≤ 10 KB (ten 1 KB packets)".into(),
            format!(
                "HPCC steers each flow's bytes in flight to η·BDP with η = U_TARGET = 0.95, so the bottleneck runs 5 % under capacity and its queue drains to near zero (Li et al., SIGCOMM 2019, §3.2–3.3); the bound of ten packets is ours, not a paper figure. {NO_CC}"
            ),
        ),
        10 => (
            0.0,
            (0.0, 10e3),
            "≤ 10 KB (ten 1 KB packets)".into(),
            format!(
                "HPCC-PINT steers each flow as HPCC does (η = U_TARGET = 0.95), from the bottleneck's utilisation that the switch folds into one logarithmic code per packet instead of per-hop telemetry; PINT's evaluation shows it keeps HPCC's near-empty queues and FCTs (Ben Basat et al., SIGCOMM 2020, §4.3 and §6). The bound of ten packets is ours, as for CC_MODE 3. {NO_CC}"
            ),
        ),
        7 => {
            let t = roce_rnic::cc::TimelyConfig::hpcc_ns3();
            let bound = t.t_high_ns as f64 * 1e-9 * LINE_BPS / 8.0;
            (
                bound,
                (0.0, bound),
                format!("≤ T_high × 100 Gb/s = {:.2} MB", bound / 1e6),
                format!(
                    "TIMELY cuts its rate multiplicatively whenever an RTT exceeds T_high = {} µs, whatever the gradient (Mittal et al., SIGCOMM 2015, Alg. 1; ns-3's rdma-hw.cc default, which no config key changes), so the queue stays below T_high's worth of queueing at line rate, {:.2} MB (the 4 µs base RTT only tightens this); TIMELY has no unique fixed point within that bound (Zhu et al., CoNEXT 2016, §4), so no value inside it is predicted. {NO_CC}, 1.34 ms of queueing",
                    t.t_high_ns / 1000,
                    bound / 1e6
                ),
            )
        }
        _ => (
            kmax,
            (0.5 * kmax, 1.5 * kmax),
            format!("±50 % of K = {:.0} KB", kmax / 1e3),
            format!(
                "DCTCP's queue oscillates around the step-marking threshold K = {:.0} KB (KMIN = KMAX, PMAX 1), with an amplitude O(√(C·RTT·N)) ≪ K (Alizadeh et al., SIGCOMM 2010, §3.3); the same band as dctcp_queue. {NO_CC}",
                kmax / 1e3
            ),
        ),
    }
}

/// The check of `CC_MODE mode` on `run` (its own run, or the same input
/// run with another mode, to show the check needs the controller):
/// the mean bottleneck queue in its controller's band, with the link at
/// least [`CC_MODE_MIN_UTIL`] busy meanwhile. `reference`: the same input
/// with `CC_MODE 0`, for the record.
fn cc_mode_check(
    mode: u32,
    run: &IncastRun,
    ecn: Option<EcnConfig>,
    reference: Option<&IncastRun>,
    fast: bool,
) -> Check {
    let (expected, (lo, hi), tolerance, source) = cc_mode_band(mode, ecn);
    let r = &run.report;
    let mut c = Check::new(
        &format!("hpcc_cc_mode_{mode}"),
        &format!(
            "8:1 incast of long flows (HPCC-format files), CC_MODE {mode} ({}): mean queue toward the receiver over the second half of the time all 8 flows run, while the link stays ≥ {:.0} % busy",
            crate::hpcc::cc_mode_name(mode),
            CC_MODE_MIN_UTIL * 100.0
        ),
        expected,
        &source,
        run.queue,
        "B",
        format!("{tolerance}, and goodput ≥ {CC_MODE_MIN_UTIL} of the line"),
        (lo, hi),
        format!(
            "scenarios/validate/config_incast8_mode{mode}.txt with {}; window {:.2}–{:.2} ms: goodput {:.3} of the line, {} PFC pauses sent in the run, {}/{} flows done, last FCT {:.2} ms{}",
            if fast { CC_MODE_FLOWS_FAST } else { CC_MODE_FLOWS_FULL },
            ms(run.window.0),
            ms(run.window.1),
            run.util,
            r.counters.pfc_xoff_tx,
            r.flows.iter().filter(|f| f.ok).count(),
            r.flows.len(),
            r.flows.iter().filter_map(|f| f.fct()).max().map_or(f64::NAN, ms),
            reference.map_or(String::new(), |n| format!(
                "; the same input with CC_MODE 0 (no congestion control): mean queue {:.0} KB, goodput {:.3}, {} PFC pauses",
                n.queue / 1e3,
                n.util,
                n.report.counters.pfc_xoff_tx
            ))
        ),
    );
    c.pass &= run.util >= CC_MODE_MIN_UTIL;
    c.plot = "hpcc_cc_modes".into();
    c
}

/// The 100 Gb/s marking of `config_incast8_mode{mode}.txt`.
fn incast_ecn(dir: &Path, mode: u32) -> Result<Option<EcnConfig>, ValidateError> {
    let name = format!("hpcc_cc_mode_{mode}");
    let e = Experiment::load(&dir.join(format!("config_incast8_mode{mode}.txt")), None)
        .map_err(|source| ValidateError::Hpcc { name, source })?;
    Ok(match &e.cfg.ecn {
        EcnPolicy::BySpeed(v) => v.iter().find(|(r, _)| *r as f64 == LINE_BPS).map(|x| x.1),
        EcnPolicy::Fixed(c) => Some(*c),
        EcnPolicy::Off => None,
    })
}

fn hpcc_cc_modes(fast: bool, out: &Path) -> Result<Vec<Check>, ValidateError> {
    let dir = hpcc_dir(out)?;
    let reference = hpcc_incast(&dir, 1, Some(0), fast)?;
    let mut checks = Vec::new();
    let mut series = Vec::new();
    let every = |t: &[(Ps, u64)]| t.len() / 1000 + 1;
    let trace = |r: &IncastRun| queue_trace(&r.report, 0, 0, r.report.now);
    let t = trace(&reference);
    series.push((
        "CC_MODE 0 (no congestion control)".to_string(),
        queue_kb_series(&t, every(&t)),
    ));
    for mode in [1u32, 3, 7, 8, 10] {
        let run = hpcc_incast(&dir, mode, None, fast)?;
        let t = trace(&run);
        series.push((
            format!("CC_MODE {mode} ({})", crate::hpcc::cc_mode_name(mode)),
            queue_kb_series(&t, every(&t)),
        ));
        checks.push(cc_mode_check(
            mode,
            &run,
            incast_ecn(&dir, mode)?,
            Some(&reference),
            fast,
        ));
    }
    plot::write_lines(
        out,
        "hpcc_cc_modes",
        "HPCC-format 8:1 incast: queue toward the receiver, each CC_MODE",
        "time (ms)",
        "queue (KB)",
        series,
    )?;
    Ok(checks)
}

// ---------------------------------------------------------------------------
// The report
// ---------------------------------------------------------------------------

fn num(v: f64, unit: &str) -> String {
    // f64::MAX stands for "no upper bound" (JSON has no infinity).
    let s = if v.is_infinite() || v.abs() == f64::MAX {
        if v > 0.0 { "∞" } else { "−∞" }.to_string()
    } else if v == 0.0 {
        "0".to_string()
    } else if v.abs() >= 100.0 {
        format!("{v:.0}")
    } else if v.abs() >= 0.01 {
        format!("{v:.3}")
    } else {
        format!("{v:.2e}")
    };
    if unit.is_empty() {
        s
    } else {
        format!("{s} {unit}")
    }
}

fn verdict(c: &Check) -> &'static str {
    if c.pass { "PASS" } else { "**FAIL**" }
}

/// `validation.md`: a summary table, then each check's detail and plot.
pub fn markdown(v: &Validation, command: &str) -> String {
    let mut s = String::new();
    let passed = v.checks.iter().filter(|c| c.pass).count();
    let _ = writeln!(s, "# Congestion-control validation\n");
    let _ = writeln!(
        s,
        "`{command}` — {} suite, {passed}/{} checks pass. Every run is deterministic (seed 1).\n",
        if v.fast { "fast" } else { "full" },
        v.checks.len()
    );
    let _ = writeln!(
        s,
        "| check | expected | measured | tolerance | result |\n|---|---|---|---|---|"
    );
    for c in &v.checks {
        let _ = writeln!(
            s,
            "| [{}](#{}) | {} | {} | {} | {} |",
            c.name,
            c.name,
            num(c.expected, &c.unit),
            num(c.measured, &c.unit),
            c.tolerance,
            verdict(c)
        );
    }
    for c in &v.checks {
        let _ = writeln!(s, "\n## {}\n", c.name);
        let _ = writeln!(s, "- **Compared:** {}", c.what);
        let _ = writeln!(
            s,
            "- **Expected:** {} — {}",
            num(c.expected, &c.unit),
            c.source
        );
        let _ = writeln!(s, "- **Measured:** {}", num(c.measured, &c.unit));
        let _ = writeln!(
            s,
            "- **Tolerance:** {} (accepted {} … {})",
            c.tolerance,
            num(c.lo, &c.unit),
            num(c.hi, &c.unit)
        );
        let _ = writeln!(s, "- **Scenario:** {}", c.scenario);
        let _ = writeln!(s, "- **Result:** {}", verdict(c));
        let _ = writeln!(s);
        let _ = writeln!(s, "![{}]({}.png)", c.name, c.plot);
    }
    s
}

/// Writes `validation.md` into `out`.
pub fn write_markdown(v: &Validation, out: &Path, command: &str) -> Result<PathBuf, ValidateError> {
    let path = out.join("validation.md");
    std::fs::write(&path, markdown(v, command)).map_err(|source| ValidateError::Io {
        path: path.clone(),
        source,
    })?;
    Ok(path)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn jain_index() {
        assert!((jain(&[1.0, 1.0, 1.0]) - 1.0).abs() < 1e-12);
        assert!((jain(&[1.0, 0.0]) - 0.5).abs() < 1e-12);
    }

    #[test]
    fn fluid_fixed_point_rises_with_n() {
        // More flows → lower per-flow rate → more marking needed to hold
        // them (p* grows as N^(4/3) for small p, CoNEXT 2016 §3.2).
        let q: Vec<f64> = [2, 4, 8, 16]
            .iter()
            .map(|&n| {
                dcqcn_model(n, &DcqcnConfig::paper())
                    .fixed_point()
                    .unwrap()
                    .queue
            })
            .collect();
        assert!(q.windows(2).all(|w| w[1] > w[0]), "{q:?}");
        let p2 = dcqcn_model(2, &DcqcnConfig::paper())
            .fixed_point()
            .unwrap()
            .p;
        let p16 = dcqcn_model(16, &DcqcnConfig::paper())
            .fixed_point()
            .unwrap()
            .p;
        let slope = (p16 / p2).ln() / 8f64.ln();
        assert!((slope - 4.0 / 3.0).abs() < 0.1, "{slope}");
    }

    /// Each CC_MODE check needs its controller: the same input run with
    /// CC_MODE 0 (no congestion control) fails it (the queue fills to
    /// PFC's threshold).
    #[test]
    fn cc_mode_checks_fail_without_their_controller() {
        let out = tempfile::tempdir().unwrap();
        let dir = hpcc_dir(out.path()).unwrap();
        for mode in [1u32, 3, 7, 8, 10] {
            let none = hpcc_incast(&dir, mode, Some(0), true).unwrap();
            let c = cc_mode_check(mode, &none, incast_ecn(&dir, mode).unwrap(), None, true);
            eprintln!("CC_MODE {mode} run as 0: {} {}", c.measured, c.scenario);
            assert!(
                !c.pass,
                "CC_MODE {mode}'s check passed with no congestion control: {c:#?}"
            );
        }
    }

    /// The fast suite: every check passes, so a regression in any
    /// controller (or the fabric under it) fails CI.
    #[test]
    fn fast_suite_passes() {
        let dir = tempfile::tempdir().unwrap();
        let v = run(true, dir.path()).unwrap();
        for c in &v.checks {
            eprintln!(
                "{:<28} {} expected {} measured {} ({})",
                c.name, c.pass, c.expected, c.measured, c.scenario
            );
        }
        let failed: Vec<String> = v
            .checks
            .iter()
            .filter(|c| !c.pass)
            .map(|c| {
                format!(
                    "{}: measured {} vs [{}, {}]",
                    c.name, c.measured, c.lo, c.hi
                )
            })
            .collect();
        assert!(failed.is_empty(), "{failed:#?}");
        assert!(v.checks.len() >= 12);
        for c in &v.checks {
            assert!(dir.path().join(format!("{}.png", c.plot)).exists());
        }
    }
}
