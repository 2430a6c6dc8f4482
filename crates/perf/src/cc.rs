//! `--cc`, `--cc-param`, `--cc-line-rate` and `--ce-red`: congestion control
//! on the run's QPs, named as the simulator's `[cc]` table names it (one
//! parser, `roce_rnic::cc::params`), and what it did, for the report.

use crate::error::fail;
use crate::{Options, Result};
use roce_rnic::cc::{CcConfig, CcParams};
use roce_verbs::{CcSettings, RedConfig};
use serde::Serialize;
use std::net::IpAddr;

/// The algorithms a real path can run: HPCC needs switches that stamp INT,
/// which no socket path carries.
pub const ALGORITHMS: &[&str] = &["none", "dcqcn", "timely", "swift", "dctcp"];

/// The controller `--cc` and `--cc-param` describe, and the CNP interval
/// DCQCN's `min_time_between_cnps` sets. One usage error names whatever is
/// wrong: the algorithm, the parameter, its value.
pub(crate) fn choice(args: &Options) -> Result<(CcConfig, Option<u64>)> {
    let alg = args.cc.as_str();
    if !ALGORITHMS.contains(&alg) {
        if alg == "hpcc" {
            fail!(
                Usage,
                "--cc hpcc: HPCC steers by in-band telemetry that switches stamp, which no path of UDP sockets carries; choose one of {}",
                ALGORITHMS.join(", ")
            );
        }
        fail!(
            Usage,
            "--cc {alg}: unknown algorithm; choose one of {}",
            ALGORITHMS.join(", ")
        );
    }
    let mut p = CcParams::new(alg);
    for kv in &args.cc_params {
        let Some((k, v)) = kv.split_once('=') else {
            fail!(Usage, "--cc-param {kv}: expected KEY=VALUE");
        };
        let k = k.trim();
        if k == "algorithm" {
            fail!(Usage, "--cc-param {kv}: the algorithm is --cc's");
        }
        p.set(k, v)
            .map_err(|e| crate::Error::Usage(format!("--cc-param {kv}: {}", e.msg)))?;
    }
    roce_verbs::cc::real_socket_defaults(&mut p);
    let c = p.build().map_err(|e| {
        let given = args
            .cc_params
            .iter()
            .find(|kv| kv.split_once('=').is_some_and(|(k, _)| k.trim() == e.key));
        match given {
            Some(kv) => crate::Error::Usage(format!("--cc-param {kv}: {}", e.msg)),
            None => crate::Error::Usage(format!("--cc {alg}: {}: {}", e.key, e.msg)),
        }
    })?;
    Ok((c.cc, c.cnp_interval_ns))
}

/// `--cc-line-rate` in Gb/s, else the speed of the interface holding `ip`,
/// else 100 Gb/s (loopback reports no speed).
pub(crate) fn line_rate_bps(args: &Options, ip: IpAddr) -> Result<u64> {
    match args.cc_line_rate {
        Some(g) if !(g.is_finite() && g > 0.0) => {
            fail!(
                Usage,
                "--cc-line-rate {g}: expected a positive rate in Gb/s"
            )
        }
        Some(g) => Ok((g * 1e9).round() as u64),
        None => Ok(roce_verbs::cc::line_rate_for(ip)),
    }
}

/// The engine's default QP congestion control for a side on `ip`.
pub(crate) fn settings(args: &Options, ip: IpAddr) -> Result<(CcSettings, Option<u64>)> {
    let (cc, cnp) = choice(args)?;
    let mut s = CcSettings::new(cc, line_rate_bps(args, ip)?);
    s.rate_limit_bps = match args.rate_limit {
        Some(g) if !(g.is_finite() && g > 0.0) => {
            fail!(Usage, "--rate-limit {g}: expected a positive rate in Gb/s")
        }
        g => g.map(|g| (g * 1e9).round().max(1.0) as u64),
    };
    Ok((s, cnp))
}

/// `--cnp-dscp`: a DSCP is six bits.
pub(crate) fn cnp_dscp(args: &Options) -> Result<Option<u8>> {
    match args.cnp_dscp {
        Some(d) if d > 63 => fail!(Usage, "--cnp-dscp {d}: a DSCP is 0..=63"),
        d => Ok(d),
    }
}

/// `--ce-red KMIN,KMAX,PMAX`.
pub(crate) fn red(args: &Options) -> Result<Option<RedConfig>> {
    args.ce_red
        .as_deref()
        .map(|s| RedConfig::parse(s).map_err(|e| crate::Error::Usage(format!("--ce-red {s}: {e}"))))
        .transpose()
}

/// What the client's QPs' congestion control did (`--json`'s `cc`).
#[derive(Debug, Clone, Serialize)]
pub struct CcReport {
    pub algorithm: String,
    /// The line rate rate-based controllers start from.
    pub line_rate_gbps: f64,
    /// CNPs the client's QPs took (and the server sent).
    pub cnps_rx: u64,
    pub cnps_tx_by_server: u64,
    /// Cuts over all the client's QPs.
    pub rate_cuts: u64,
    /// Sum over the QPs of their rate at the end (`None`: unpaced).
    pub rate_gbps: Option<f64>,
    /// Lowest rate any QP was paced at (`None`: never paced).
    pub min_rate_gbps: Option<f64>,
    pub qps: Vec<QpCc>,
}

/// One QP's congestion control at the end of the run.
#[derive(Debug, Clone, Serialize)]
pub struct QpCc {
    pub qpn: u32,
    pub rate_cuts: u64,
    pub rate_gbps: Option<f64>,
    pub min_rate_gbps: Option<f64>,
    pub window_bytes: Option<u64>,
}

fn gbps(b: u64) -> f64 {
    b as f64 / 1e9
}

impl CcReport {
    pub(crate) fn new(
        args: &Options,
        line_rate_bps: u64,
        qps: &[roce_verbs::Qp],
        cnps_rx: u64,
        cnps_tx_by_server: u64,
    ) -> CcReport {
        let qps: Vec<QpCc> = qps
            .iter()
            .filter_map(|q| {
                q.cc_stats().map(|s| QpCc {
                    qpn: q.qpn(),
                    rate_cuts: s.rate_cuts,
                    rate_gbps: s.rate_bps.map(gbps),
                    min_rate_gbps: s.min_rate_bps.map(gbps),
                    window_bytes: s.window_bytes,
                })
            })
            .collect();
        let rates: Option<Vec<f64>> = qps.iter().map(|q| q.rate_gbps).collect();
        CcReport {
            algorithm: args.cc.clone(),
            line_rate_gbps: gbps(line_rate_bps),
            cnps_rx,
            cnps_tx_by_server,
            rate_cuts: qps.iter().map(|q| q.rate_cuts).sum(),
            rate_gbps: rates.filter(|r| !r.is_empty()).map(|r| r.iter().sum()),
            min_rate_gbps: qps
                .iter()
                .filter_map(|q| q.min_rate_gbps)
                .min_by(f64::total_cmp),
            qps,
        }
    }
}
