//! Traffic: explicit flows and the standard generators — Poisson arrivals
//! with sizes from an empirical CDF, incast, all-to-all and permutation.
//!
//! Each flow becomes one RC QP pair moving `size` bytes with one RDMA WRITE
//! (or SEND). Generators draw from a seeded ChaCha stream, so a seed fixes
//! the whole workload.

use crate::event::{PS_PER_S, Ps};
use rand_chacha::ChaCha8Rng;
use rand_chacha::rand_core::Rng;

/// Why a workload cannot be built.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum WorkloadError {
    #[error("line {line}: {msg}")]
    Cdf { line: usize, msg: String },
    #[error("{0}")]
    Invalid(String),
}

/// The verb a flow uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum FlowOp {
    #[default]
    Write,
    Send,
}

/// One flow: `size` bytes from host `src` to host `dst`, starting at `start`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FlowSpec {
    pub src: u32,
    pub dst: u32,
    pub size: u64,
    pub start: Ps,
    pub op: FlowOp,
}

/// An empirical flow-size distribution: points `(bytes, cumulative %)`,
/// sampled by linear interpolation between points (the convention of the
/// HPCC and pFabric traffic generators).
#[derive(Debug, Clone, PartialEq)]
pub struct Cdf {
    points: Vec<(f64, f64)>,
}

impl Cdf {
    /// Parses `<size> <cumulative percent>` lines; blank lines and `#`
    /// comments are skipped. Percentages must rise to 100.
    pub fn parse(text: &str) -> Result<Cdf, WorkloadError> {
        let mut points: Vec<(f64, f64)> = Vec::new();
        for (i, raw) in text.lines().enumerate() {
            let line = i + 1;
            let l = raw.split('#').next().unwrap_or("").trim();
            if l.is_empty() {
                continue;
            }
            let mut it = l.split_whitespace();
            let err = |msg: &str| WorkloadError::Cdf {
                line,
                msg: msg.to_string(),
            };
            let size: f64 = it
                .next()
                .and_then(|s| s.parse().ok())
                .ok_or_else(|| err("expected `<size in bytes> <cumulative percent>`"))?;
            let pct: f64 = it
                .next()
                .and_then(|s| s.parse().ok())
                .ok_or_else(|| err("expected a cumulative percent after the size"))?;
            if it.next().is_some() {
                return Err(err("expected two numbers"));
            }
            if !(size >= 0.0 && size.is_finite() && (0.0..=100.0).contains(&pct)) {
                return Err(err("size must be ≥ 0 and percent within 0..=100"));
            }
            if let Some(&(ps, pp)) = points.last()
                && (size < ps || pct < pp)
            {
                return Err(err("sizes and percents must not decrease"));
            }
            points.push((size, pct));
        }
        match points.last() {
            None => Err(WorkloadError::Cdf {
                line: 0,
                msg: "no points".into(),
            }),
            Some(&(_, p)) if (p - 100.0).abs() > 1e-9 => Err(WorkloadError::Cdf {
                line: text.lines().count(),
                msg: format!("the last cumulative percent is {p}, expected 100"),
            }),
            _ => Ok(Cdf { points }),
        }
    }

    /// The size at cumulative percent `pct` (0..=100).
    pub fn quantile(&self, pct: f64) -> f64 {
        let p = &self.points;
        if pct <= p[0].1 {
            return p[0].0;
        }
        for w in p.windows(2) {
            let ((s0, p0), (s1, p1)) = (w[0], w[1]);
            if pct <= p1 {
                if p1 <= p0 {
                    return s1;
                }
                return s0 + (s1 - s0) * (pct - p0) / (p1 - p0);
            }
        }
        p[p.len() - 1].0
    }

    /// Mean size of the interpolated distribution.
    pub fn mean(&self) -> f64 {
        let p = &self.points;
        let mut m = p[0].0 * p[0].1 / 100.0;
        for w in p.windows(2) {
            let ((s0, p0), (s1, p1)) = (w[0], w[1]);
            m += (s0 + s1) / 2.0 * (p1 - p0) / 100.0;
        }
        m
    }

    /// A size drawn with `rng` (at least one byte).
    pub fn sample(&self, rng: &mut ChaCha8Rng) -> u64 {
        (self.quantile(uniform(rng) * 100.0).round() as u64).max(1)
    }
}

/// Uniform in [0, 1) with 53 bits.
pub fn uniform(rng: &mut ChaCha8Rng) -> f64 {
    (rng.next_u64() >> 11) as f64 / (1u64 << 53) as f64
}

fn exp(rng: &mut ChaCha8Rng, mean: f64) -> f64 {
    -mean * (1.0 - uniform(rng)).ln()
}

/// Poisson arrivals on every host of `hosts` at `load` of `host_bps`, sizes
/// from `cdf`, destinations uniform over the other hosts, in
/// `[start, start + duration)`. Mean inter-arrival per host is
/// `mean_size × 8 / (host_bps × load)`.
pub fn poisson(
    hosts: &[u32],
    load: f64,
    host_bps: u64,
    cdf: &Cdf,
    start: Ps,
    duration: Ps,
    rng: &mut ChaCha8Rng,
) -> Result<Vec<FlowSpec>, WorkloadError> {
    if !(load > 0.0 && load <= 1.0) {
        return Err(WorkloadError::Invalid(format!(
            "load {load} must be within (0, 1]"
        )));
    }
    if hosts.len() < 2 {
        return Err(WorkloadError::Invalid(
            "Poisson traffic needs at least two hosts".into(),
        ));
    }
    let mean_gap_s = cdf.mean() * 8.0 / (host_bps as f64 * load);
    let mean_gap_ps = mean_gap_s * PS_PER_S as f64;
    let end = start + duration;
    let mut out = Vec::new();
    // Per host, in host order, so the draw sequence is fixed by the seed.
    for &src in hosts {
        let mut t = start as f64 + exp(rng, mean_gap_ps);
        while (t as Ps) < end {
            let mut dst = hosts[(rng.next_u64() % (hosts.len() as u64 - 1)) as usize];
            if dst == src {
                dst = hosts[hosts.len() - 1];
            }
            out.push(FlowSpec {
                src,
                dst,
                size: cdf.sample(rng),
                start: t as Ps,
                op: FlowOp::Write,
            });
            t += exp(rng, mean_gap_ps);
        }
    }
    Ok(out)
}

/// Every sender sends `size` bytes to `dst` at `start`.
pub fn incast(senders: &[u32], dst: u32, size: u64, start: Ps) -> Vec<FlowSpec> {
    senders
        .iter()
        .filter(|&&s| s != dst)
        .map(|&src| FlowSpec {
            src,
            dst,
            size,
            start,
            op: FlowOp::Write,
        })
        .collect()
}

/// Every host sends `size` bytes to every other host at `start`.
pub fn all_to_all(hosts: &[u32], size: u64, start: Ps) -> Vec<FlowSpec> {
    let mut out = Vec::new();
    for &src in hosts {
        for &dst in hosts {
            if src != dst {
                out.push(FlowSpec {
                    src,
                    dst,
                    size,
                    start,
                    op: FlowOp::Write,
                });
            }
        }
    }
    out
}

/// A random derangement: every host sends to exactly one other host and
/// receives from exactly one.
pub fn permutation(hosts: &[u32], size: u64, start: Ps, rng: &mut ChaCha8Rng) -> Vec<FlowSpec> {
    let n = hosts.len();
    if n < 2 {
        return Vec::new();
    }
    // Sattolo's algorithm yields a single cycle: no fixed points.
    let mut p: Vec<usize> = (0..n).collect();
    for i in (1..n).rev() {
        let j = (rng.next_u64() % i as u64) as usize;
        p.swap(i, j);
    }
    (0..n)
        .map(|i| FlowSpec {
            src: hosts[i],
            dst: hosts[p[i]],
            size,
            start,
            op: FlowOp::Write,
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand_chacha::rand_core::SeedableRng;

    #[test]
    fn cdf_interpolates_and_means() {
        let c = Cdf::parse("100 0\n200 50\n400 100\n").unwrap();
        assert_eq!(c.quantile(25.0), 150.0);
        assert_eq!(c.quantile(75.0), 300.0);
        assert!((c.mean() - 225.0).abs() < 1e-9);
        assert!(matches!(
            Cdf::parse("1 0\n2 40\n"),
            Err(WorkloadError::Cdf { line: 2, .. })
        ));
        assert!(matches!(
            Cdf::parse("1 0\nx 40\n"),
            Err(WorkloadError::Cdf { line: 2, .. })
        ));
    }

    #[test]
    fn shipped_websearch_mean() {
        let text = include_str!("../../../scenarios/workloads/WebSearch_distribution.txt");
        let c = Cdf::parse(text).unwrap();
        let m = c.mean();
        assert!((1.5e6..2.0e6).contains(&m), "{m}");
    }

    #[test]
    fn poisson_hits_the_load() {
        let c = Cdf::parse("1000 0\n1000 100\n").unwrap();
        let mut rng = ChaCha8Rng::seed_from_u64(1);
        let hosts: Vec<u32> = (0..8).collect();
        let f = poisson(
            &hosts,
            0.5,
            100_000_000_000,
            &c,
            0,
            PS_PER_S / 1000,
            &mut rng,
        )
        .unwrap();
        // 8 hosts × 1 ms × 50 Gb/s / 8000 bits = 50,000 flows.
        let n = f.len() as f64;
        assert!((n - 50_000.0).abs() < 1_000.0, "{n}");
        assert!(f.iter().all(|x| x.src != x.dst));
    }

    #[test]
    fn permutation_is_a_derangement() {
        let mut rng = ChaCha8Rng::seed_from_u64(3);
        let hosts: Vec<u32> = (0..16).collect();
        let f = permutation(&hosts, 10, 0, &mut rng);
        let mut rx = [0; 16];
        for x in &f {
            assert_ne!(x.src, x.dst);
            rx[x.dst as usize] += 1;
        }
        assert!(rx.iter().all(|&r| r == 1));
    }
}
