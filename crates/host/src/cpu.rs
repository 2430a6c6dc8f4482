//! CPU cost of driving the RNIC (the seed's §5.8): posting WQEs, ringing
//! doorbells, pushing inline WQEs and polling CQEs.
//!
//! Costs are per operation in nanoseconds of one core, from the profile.
//! A doorbell is an uncached (or write-combined) MMIO store that leaves the
//! core's store buffer for the PCIe root complex; doorbell batching pays it
//! once per batch (Kalia et al., "Design Guidelines for High Performance
//! RDMA Systems", USENIX ATC 2016). Unsignaled WQEs and CQ
//! moderation cut the CQEs the application polls.

use serde::Deserialize;

/// The `[cpu]` section.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Cpu {
    pub cores_per_socket: u32,
    /// Building one send WQE in the queue (cache-resident), ns.
    pub post_wqe_ns: f64,
    /// Posting one receive WQE, ns.
    pub post_recv_ns: f64,
    /// One doorbell MMIO store, ns.
    pub doorbell_ns: f64,
    /// Copying one 64-byte block of an inline WQE to the NIC's BAR, ns.
    pub inline_block_ns: f64,
    /// Polling and handling one CQE, ns.
    pub poll_cqe_ns: f64,
}

impl Cpu {
    pub fn validate(&self) -> Result<(), (&'static str, String)> {
        if self.cores_per_socket == 0 {
            return Err(("cores_per_socket", "must be at least 1".into()));
        }
        for (f, v) in [
            ("post_wqe_ns", self.post_wqe_ns),
            ("post_recv_ns", self.post_recv_ns),
            ("doorbell_ns", self.doorbell_ns),
            ("inline_block_ns", self.inline_block_ns),
            ("poll_cqe_ns", self.poll_cqe_ns),
        ] {
            if !(v.is_finite() && v >= 0.0) {
                return Err((f, format!("{v}: must be zero or positive")));
            }
        }
        Ok(())
    }

    /// Requester CPU time per message, ns: the WQE, a share of the
    /// doorbell (`batch` WQEs per doorbell), `inline_blocks` 64-byte
    /// blocks pushed through the BAR, and a share of a CQE (one signaled
    /// WQE every `signal_every`).
    pub fn requester_ns(&self, batch: u32, signal_every: u32, inline_blocks: u64) -> f64 {
        self.post_wqe_ns
            + self.doorbell_ns / f64::from(batch.max(1))
            + self.inline_block_ns * inline_blocks as f64
            + self.poll_cqe_ns / f64::from(signal_every.max(1))
    }

    /// Responder CPU time per received SEND, ns: a receive completion to
    /// poll and a receive WQE to post again (receives are always signaled).
    pub fn responder_send_ns(&self) -> f64 {
        self.poll_cqe_ns + self.post_recv_ns
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn batching_and_signaling_cut_cost() {
        let c = Cpu {
            cores_per_socket: 16,
            post_wqe_ns: 20.0,
            post_recv_ns: 15.0,
            doorbell_ns: 100.0,
            inline_block_ns: 10.0,
            poll_cqe_ns: 40.0,
        };
        assert!(c.validate().is_ok());
        // 20 + 100 + 40 = 160 ns; batch 16 and one CQE in 16:
        // 20 + 6.25 + 2.5 = 28.75 ns.
        assert_eq!(c.requester_ns(1, 1, 0), 160.0);
        assert_eq!(c.requester_ns(16, 16, 0), 28.75);
        // Inline 2 blocks adds 20 ns.
        assert_eq!(c.requester_ns(1, 1, 2), 180.0);
        assert_eq!(c.responder_send_ns(), 55.0);
    }
}
