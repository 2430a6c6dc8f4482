//! RED-style ECN marking on switch egress, as DCQCN prescribes (Zhu et al.,
//! "Congestion Control for Large-Scale RDMA Deployments", SIGCOMM 2015, §3):
//! below `kmin` bytes never mark, above `kmax` always mark, and in between
//! mark with a probability rising linearly from 0 to `pmax`. The decision is
//! taken on the instantaneous queue when a packet leaves, as the HPCC ns-3
//! switch does, so marks reflect the queue the packet actually waited in.

use serde::{Deserialize, Serialize};

/// Marking thresholds for one egress queue.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct EcnConfig {
    pub kmin_bytes: u64,
    pub kmax_bytes: u64,
    pub pmax: f64,
}

impl EcnConfig {
    /// Marking probability for a queue of `qlen` bytes.
    pub fn probability(&self, qlen: u64) -> f64 {
        if qlen <= self.kmin_bytes {
            0.0
        } else if qlen > self.kmax_bytes || self.kmax_bytes <= self.kmin_bytes {
            1.0
        } else {
            self.pmax * (qlen - self.kmin_bytes) as f64 / (self.kmax_bytes - self.kmin_bytes) as f64
        }
    }

    /// Whether to mark, given a uniform draw `u` in [0, 1).
    pub fn mark(&self, qlen: u64, u: f64) -> bool {
        Self::mark_at(self.probability(qlen), u)
    }

    /// [`mark`](Self::mark) with the queue's probability `p` already
    /// computed (the switch computes it once: it also decides whether a
    /// draw is taken at all).
    #[inline]
    pub fn mark_at(p: f64, u: f64) -> bool {
        p >= 1.0 || (p > 0.0 && u < p)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn red_curve() {
        let e = EcnConfig {
            kmin_bytes: 100,
            kmax_bytes: 300,
            pmax: 0.2,
        };
        assert_eq!(e.probability(50), 0.0);
        assert_eq!(e.probability(100), 0.0);
        assert!((e.probability(200) - 0.1).abs() < 1e-12);
        assert_eq!(e.probability(301), 1.0);
        assert!(e.mark(400, 0.99));
        assert!(!e.mark(200, 0.5));
        assert!(e.mark(200, 0.05));
        // The probability computed once and the draw applied apart: never
        // at 0 (even for a draw of 0), always at 1, else below p.
        for (q, u, want) in [
            (50, 0.0, false),
            (150, 0.01, true),
            (150, 0.06, false),
            (200, 0.09, true),
            (200, 0.11, false),
            (400, 0.999, true),
        ] {
            assert_eq!(EcnConfig::mark_at(e.probability(q), u), want, "{q} {u}");
        }
    }
}
