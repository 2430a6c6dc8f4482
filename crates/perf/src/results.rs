//! What a run measured, per size, and the kernel's figure beside it.

use crate::{Error, Result};
use crate::{Kind, Test, Verb};
use roce_verbs::{Endpoint, StageProfile, Stats};
use serde::Serialize;
use std::time::Duration;

/// Everything one size's run measured.
#[derive(Debug, Clone, Serialize)]
pub struct SizeResult {
    pub size: usize,
    pub iterations: u64,
    pub seconds: f64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub bw_gbps: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub bw_peak_mib: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub bw_avg_mib: Option<f64>,
    pub msg_rate_mpps: f64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub latency_us: Option<Latency>,
    pub verified: Option<bool>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub baseline: Option<Baseline>,
    /// Where each side's engine spent the run, per stage.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub profile: Option<SideProfiles>,
    /// `--analyze`: the stages as a table, the binding one named.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub analysis: Option<roce_verbs::Analysis>,
}

#[derive(Debug, Clone, Copy, Serialize)]
pub struct SideProfiles {
    pub client: StageProfile,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub server: Option<StageProfile>,
}

/// The kernel's own figure for one size, run right after roce's
/// (`--baseline`), and roce's ratio to it.
#[derive(Debug, Clone, Copy, Serialize)]
pub struct Baseline {
    /// `tcp_stream` (bandwidth tests) or `udp_pingpong` (latency tests).
    pub kind: &'static str,
    /// TCP stream of writes of the same size over loopback.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tcp_gbps: Option<f64>,
    /// Bandwidth tests: the kernel-only ceiling in the engine's shape,
    /// `udp_gso_stream` of datagrams the size of a full WRITE packet (path
    /// MTU plus BTH and ICRC), GSO sends into a GRO socket, counted at the
    /// receiver; none where the kernel has no UDP GSO or GRO.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub udp_gso_gbps: Option<f64>,
    /// The datagram size of `udp_gso_gbps` (bytes of UDP payload).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub udp_gso_datagram: Option<usize>,
    /// UDP ping-pong's t_typical: half the round trip for WRITE and SEND
    /// (perftest's measure for those), the whole round trip for READ and
    /// atomics (one operation is one round trip).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub udp_typical_us: Option<f64>,
    /// The same with RoCE's shape and none of its processing (WRITE and
    /// SEND only; see `roce_verbs::baseline`): the kernel's share.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rc_shaped_typical_us: Option<f64>,
    /// roce's bandwidth over TCP's, or roce's t_typical over UDP's.
    pub ratio: f64,
}

#[derive(Debug, Clone, Copy, Serialize)]
pub struct Latency {
    pub min: f64,
    pub max: f64,
    pub typical: f64,
    pub avg: f64,
    pub stdev: f64,
    pub p99: f64,
    pub p999: f64,
}

impl Latency {
    pub fn from_ns(mut v: Vec<f64>) -> Option<Latency> {
        if v.is_empty() {
            return None;
        }
        v.sort_by(f64::total_cmp);
        let n = v.len();
        let avg = v.iter().sum::<f64>() / n as f64;
        let var = v.iter().map(|x| (x - avg) * (x - avg)).sum::<f64>() / n as f64;
        let pct = |p: f64| v[((n as f64 * p).ceil() as usize).clamp(1, n) - 1];
        let us = |x: f64| x / 1000.0;
        Some(Latency {
            min: us(v[0]),
            max: us(v[n - 1]),
            typical: us(v[n / 2]),
            avg: us(avg),
            stdev: us(var.sqrt()),
            p99: us(pct(0.99)),
            p999: us(pct(0.999)),
        })
    }
}

/// `--analyze`: the size's stage profiles against what it moved, beside the
/// kernel's figure when the baseline ran.
pub(crate) fn analysis_for(r: &SizeResult) -> Option<roce_verbs::Analysis> {
    let p = r.profile?;
    let work = roce_verbs::profile::Workload {
        message_bytes: r.size as u64,
        messages: r.iterations,
        seconds: r.seconds,
    };
    let kernel = r.baseline.map(|b| roce_verbs::profile::KernelFigure {
        kind: b.kind.to_string(),
        gbps: b.tcp_gbps,
        typical_us: b.udp_typical_us,
    });
    let mut sides = vec![("client", &p.client)];
    if let Some(s) = &p.server {
        sides.push(("server", s));
    }
    Some(roce_verbs::analyze(&sides, &work, kernel))
}

/// READ and atomic latency tests time a whole round trip (one operation
/// is one); WRITE and SEND report half of one, as perftest does.
pub(crate) fn whole_round_trip(test: Test) -> bool {
    matches!(test.verb, Verb::Read | Verb::Atomic)
}

/// Runs the kernel's baseline for one size's result (see [`Baseline`]);
/// none for a latency test whose messages no UDP datagram holds. `mtu` is
/// the path MTU the run used (it sizes the UDP GSO ceiling's datagrams).
pub(crate) fn baseline_for(test: Test, r: &SizeResult, mtu: usize) -> Result<Option<Baseline>> {
    use roce_verbs::baseline as kernel;
    if test.kind == Kind::Lat && r.size > kernel::MAX_PINGPONG_SIZE {
        return Ok(None);
    }
    Ok(Some(match test.kind {
        Kind::Bw => {
            // As long as roce ran, within reason.
            let dur = Duration::from_secs_f64(r.seconds.clamp(0.5, 10.0));
            let t = kernel::tcp_stream(r.size, dur).map_err(|source| Error::Io {
                what: "the TCP baseline".into(),
                source,
            })?;
            // A full packet of the run: BTH, up to an MTU of payload, ICRC.
            let seg = r.size.clamp(1, mtu.max(1)).next_multiple_of(4) + 16;
            let gso = kernel::udp_gso_stream(seg, dur).ok().map(|g| g.gbps());
            Baseline {
                kind: "tcp_stream",
                tcp_gbps: Some(t.gbps()),
                udp_gso_gbps: gso,
                udp_gso_datagram: gso.map(|_| seg),
                udp_typical_us: None,
                rc_shaped_typical_us: None,
                ratio: r.bw_gbps.unwrap_or(0.0) / t.gbps().max(1e-9),
            }
        }
        Kind::Lat => {
            let half = kernel::typical(&kernel::udp_pingpong(r.size, r.iterations).map_err(
                |source| Error::Io {
                    what: "the UDP baseline".into(),
                    source,
                },
            )?) / 1000.0;
            let whole = whole_round_trip(test);
            let udp = if whole { 2.0 * half } else { half };
            let shaped = if whole {
                None
            } else {
                let s = kernel::rc_shaped_pingpong(r.size, r.iterations).map_err(|source| {
                    Error::Io {
                        what: "the RC-shaped UDP baseline".into(),
                        source,
                    }
                })?;
                Some(kernel::typical(&s) / 1000.0)
            };
            Baseline {
                kind: "udp_pingpong",
                tcp_gbps: None,
                udp_gso_gbps: None,
                udp_gso_datagram: None,
                udp_typical_us: Some(udp),
                rc_shaped_typical_us: shaped,
                ratio: r.latency_us.map_or(0.0, |l| l.typical) / udp.max(1e-9),
            }
        }
    }))
}

/// What a server reports after serving one client.
#[derive(Debug, Clone)]
pub struct Served {
    /// One line: the peer, the packets, the data check.
    pub summary: String,
    /// As [`Report::notes`].
    pub notes: Vec<String>,
}

/// What the client measured, for the printer or the application.
#[derive(Debug, Clone)]
pub struct Report {
    pub test: Test,
    /// The server's version string as perftest's exchange gave it (e.g.
    /// `5.70-roce1` for roce perf, `6.29` for an `ib_*` tool).
    pub peer_version: String,
    /// What the caller should tell the user (e.g. an engine that moved off
    /// UDP 4791 because another stack holds it), the server's first.
    pub notes: Vec<String>,
    pub results: Vec<SizeResult>,
    pub local: Vec<Endpoint>,
    pub remote: Vec<Endpoint>,
    pub counters: Stats,
    pub server_counters: Stats,
    /// What the client's QPs' congestion control did.
    pub cc: crate::cc::CcReport,
    pub details: Vec<String>,
}

impl Report {
    /// `--analyze`: each size's stage table.
    pub(crate) fn analyze(&mut self, args: &crate::Options) {
        if args.analyze {
            for x in &mut self.results {
                x.analysis = analysis_for(x);
            }
        }
    }
}
