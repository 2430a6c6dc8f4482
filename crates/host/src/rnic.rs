//! The RNIC's engines and caches (the seed's §5.3).
//!
//! A message costs the RNIC more than its bytes: a doorbell (a CPU store to
//! the NIC's BAR), a WQE fetch (a DMA read of the descriptor, unless the
//! CPU pushed it inline, BlueFlame-style), a QP-context lookup and an
//! MR-translation (MTT) lookup for every page it touches, the payload DMA,
//! packetization, and a CQE written back if the WQE is signaled. The
//! context and translation caches are finite: a miss is an extra PCIe read
//! of the missing entry, and the engine can have only a few such fetches
//! in flight, so past the cache a small-message workload falls off a cliff.
//!
//! Cache hit ratio: with `W` equally popular entries (QPs served round
//! robin or at random) and a cache of `C`, the independent-reference model
//! gives a hit ratio of `C / W` for `W > C` (a uniformly random working set
//! larger than the cache). Real NICs may do worse with strict round robin
//! over an LRU cache; this is the optimistic, standard closed form.

use crate::pcie::{LinkBytes, Pcie};
use serde::Deserialize;

/// The `[rnic]` section.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Rnic {
    /// Port speed (MAC data rate), Gb/s.
    pub port_gbps: f64,
    /// Work requests per second the transmit engine can process (doorbell,
    /// WQE parse, scheduling), millions, per port.
    pub message_rate_mpps: f64,
    /// Packets per second through the packetizer and the receive parser,
    /// millions, per port.
    pub packet_rate_mpps: f64,
    /// Largest payload that can ride inside the WQE.
    pub max_inline_bytes: u32,
    /// Send WQE size with one scatter/gather entry, bytes.
    pub wqe_bytes: u32,
    /// Each scatter/gather entry (data segment), bytes.
    pub sge_bytes: u32,
    /// Completion queue entry, bytes.
    pub cqe_bytes: u32,
    /// Doorbell record written by the CPU, bytes.
    pub doorbell_bytes: u32,
    /// QP contexts the NIC caches on chip.
    pub qp_cache_entries: u32,
    /// Bytes fetched from host memory on a QP-context miss.
    pub qp_context_bytes: u32,
    /// Address translations (MTT entries, one per page) cached on chip.
    pub mr_cache_entries: u32,
    /// Bytes fetched per translation miss.
    pub mtt_entry_bytes: u32,
    /// Translation granularity: the registered memory's page size.
    pub page_bytes: u32,
    /// Context/translation fetches the NIC overlaps.
    pub context_fetches_outstanding: u32,
    /// Receive packet buffer, KiB.
    pub rx_buffer_kib: u32,
}

/// WQEs are built from 64-byte basic blocks (mlx5 WQEBB; a cache line).
pub const WQE_BLOCK: u64 = 64;
/// Header of an inline data segment.
pub const INLINE_SEG_HEADER: u64 = 4;

/// Miss ratio of a cache of `entries` over `working_set` equally popular
/// items (independent-reference model): `1 − C/W` past the cache, else 0.
pub fn miss_ratio(entries: u64, working_set: u64) -> f64 {
    if working_set <= entries || working_set == 0 {
        0.0
    } else {
        1.0 - entries as f64 / working_set as f64
    }
}

impl Rnic {
    pub fn validate(&self) -> Result<(), (&'static str, String)> {
        for (f, v) in [
            ("port_gbps", self.port_gbps),
            ("message_rate_mpps", self.message_rate_mpps),
            ("packet_rate_mpps", self.packet_rate_mpps),
        ] {
            if !(v.is_finite() && v > 0.0) {
                return Err((f, format!("{v}: must be positive")));
            }
        }
        for (f, v) in [
            ("wqe_bytes", self.wqe_bytes),
            ("sge_bytes", self.sge_bytes),
            ("cqe_bytes", self.cqe_bytes),
            ("doorbell_bytes", self.doorbell_bytes),
            ("qp_cache_entries", self.qp_cache_entries),
            ("qp_context_bytes", self.qp_context_bytes),
            ("mr_cache_entries", self.mr_cache_entries),
            ("mtt_entry_bytes", self.mtt_entry_bytes),
            (
                "context_fetches_outstanding",
                self.context_fetches_outstanding,
            ),
            ("rx_buffer_kib", self.rx_buffer_kib),
        ] {
            if v == 0 {
                return Err((f, "must be at least 1".into()));
            }
        }
        if self.wqe_bytes < self.sge_bytes {
            return Err(("wqe_bytes", "smaller than one scatter/gather entry".into()));
        }
        if !self.page_bytes.is_power_of_two() || self.page_bytes < 4096 {
            return Err((
                "page_bytes",
                format!("{}: expected a power of two ≥ 4096", self.page_bytes),
            ));
        }
        Ok(())
    }

    /// Bytes of a send WQE with `sges` scatter/gather entries, in whole
    /// 64-byte blocks.
    pub fn wqe_fetch_bytes(&self, sges: u32) -> u64 {
        let extra = u64::from(sges.max(1) - 1) * u64::from(self.sge_bytes);
        (u64::from(self.wqe_bytes) + extra).next_multiple_of(WQE_BLOCK)
    }

    /// Bytes of a receive WQE with `sges` entries (one data segment each).
    pub fn recv_wqe_bytes(&self, sges: u32) -> u64 {
        u64::from(sges.max(1)) * u64::from(self.sge_bytes)
    }

    /// Whether a payload of `size` bytes may be sent inline.
    pub fn inline_fits(&self, size: u64) -> bool {
        size <= u64::from(self.max_inline_bytes)
    }

    /// Bytes the CPU pushes for an inline WQE carrying `size` bytes: the
    /// WQE without its data segment, an inline header and the data, in
    /// whole 64-byte blocks.
    pub fn inline_wqe_bytes(&self, size: u64) -> u64 {
        (u64::from(self.wqe_bytes - self.sge_bytes) + INLINE_SEG_HEADER + size)
            .next_multiple_of(WQE_BLOCK)
    }

    /// Receive buffer in bytes.
    pub fn rx_buffer_bytes(&self) -> u64 {
        u64::from(self.rx_buffer_kib) * 1024
    }

    /// How long the receive buffer absorbs a burst arriving at `in_gbps`
    /// while draining at `out_gbps`, ns (infinite if it drains faster).
    pub fn rx_buffer_absorb_ns(&self, in_gbps: f64, out_gbps: f64) -> f64 {
        if in_gbps <= out_gbps {
            f64::INFINITY
        } else {
            self.rx_buffer_bytes() as f64 * 8.0 / (in_gbps - out_gbps)
        }
    }

    /// QP-context miss ratio with `active_qps` QPs in use.
    pub fn qp_miss_ratio(&self, active_qps: u64) -> f64 {
        miss_ratio(u64::from(self.qp_cache_entries), active_qps)
    }

    /// Translation miss ratio when `pages` distinct pages are in use.
    pub fn mr_miss_ratio(&self, pages: u64) -> f64 {
        miss_ratio(u64::from(self.mr_cache_entries), pages)
    }

    /// Pages a buffer of `bytes` spans (aligned).
    pub fn pages(&self, bytes: u64) -> u64 {
        bytes.div_ceil(u64::from(self.page_bytes)).max(1)
    }

    /// PCIe traffic of one QP-context miss (a DMA read of the context).
    pub fn qp_miss_pcie(&self, pcie: &Pcie) -> LinkBytes {
        pcie.dma_read(u64::from(self.qp_context_bytes))
    }

    /// PCIe traffic of one translation miss.
    pub fn mr_miss_pcie(&self, pcie: &Pcie) -> LinkBytes {
        pcie.dma_read(u64::from(self.mtt_entry_bytes))
    }

    /// PCIe traffic of one CQE write.
    pub fn cqe_pcie(&self, pcie: &Pcie) -> LinkBytes {
        pcie.dma_write(u64::from(self.cqe_bytes))
    }

    /// Misses per second the NIC can serve: `outstanding` fetches, each
    /// taking one PCIe read round trip (Little's law), millions.
    pub fn miss_service_mps(&self, read_latency_ns: f64) -> f64 {
        f64::from(self.context_fetches_outstanding) / read_latency_ns * 1e3
    }

    /// Messages per second (millions) the engine sustains when each
    /// message misses `misses_per_msg` times on average: the message-rate
    /// ceiling, or the miss-service rate divided by the misses.
    pub fn message_mpps_with_misses(&self, misses_per_msg: f64, read_latency_ns: f64) -> f64 {
        if misses_per_msg <= 0.0 {
            self.message_rate_mpps
        } else {
            self.message_rate_mpps
                .min(self.miss_service_mps(read_latency_ns) / misses_per_msg)
        }
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    pub fn cx5() -> Rnic {
        Rnic {
            port_gbps: 100.0,
            message_rate_mpps: 60.0,
            packet_rate_mpps: 100.0,
            max_inline_bytes: 220,
            wqe_bytes: 64,
            sge_bytes: 16,
            cqe_bytes: 64,
            doorbell_bytes: 8,
            qp_cache_entries: 1024,
            qp_context_bytes: 256,
            mr_cache_entries: 16384,
            mtt_entry_bytes: 8,
            page_bytes: 4096,
            context_fetches_outstanding: 8,
            rx_buffer_kib: 1024,
        }
    }

    #[test]
    fn cache_cliff() {
        // 2000 QPs over 1024 entries: hit 1024/2000 = 0.512, miss 0.488.
        let r = cx5();
        assert_eq!(r.qp_miss_ratio(1000), 0.0);
        assert!((r.qp_miss_ratio(2000) - 0.488).abs() < 1e-12);
        // 8 fetches in flight, 1 µs each → 8 M misses/s; at 0.488 misses
        // per message the engine manages 8 / 0.488 = 16.39 M msg/s.
        assert!((r.miss_service_mps(1000.0) - 8.0).abs() < 1e-12);
        assert!((r.message_mpps_with_misses(0.488, 1000.0) - 16.393).abs() < 1e-3);
        assert_eq!(r.message_mpps_with_misses(0.0, 1000.0), 60.0);
    }

    #[test]
    fn wqe_sizes() {
        let r = cx5();
        // One SGE: 64 B; four: 64 + 48 = 112 → 128 B.
        assert_eq!(r.wqe_fetch_bytes(1), 64);
        assert_eq!(r.wqe_fetch_bytes(4), 128);
        // Inline 64 B: 48 + 4 + 64 = 116 → 128 B; 8 B: 60 → 64 B.
        assert_eq!(r.inline_wqe_bytes(64), 128);
        assert_eq!(r.inline_wqe_bytes(8), 64);
        assert!(r.inline_fits(220) && !r.inline_fits(221));
        assert_eq!(r.recv_wqe_bytes(2), 32);
    }

    #[test]
    fn rx_buffer_absorbs_bursts() {
        // 1 MiB absorbing 200 Gb/s in, 100 Gb/s out: 8388608 bits / 100
        // Gb/s = 83.9 µs.
        let r = cx5();
        assert!((r.rx_buffer_absorb_ns(200.0, 100.0) - 83886.08).abs() < 1e-6);
        assert!(r.rx_buffer_absorb_ns(50.0, 100.0).is_infinite());
    }

    #[test]
    fn validation() {
        let mut r = cx5();
        assert!(r.validate().is_ok());
        r.port_gbps = 0.0;
        assert_eq!(r.validate().unwrap_err().0, "port_gbps");
        let mut r = cx5();
        r.page_bytes = 1000;
        assert_eq!(r.validate().unwrap_err().0, "page_bytes");
    }
}
