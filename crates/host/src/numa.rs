//! NUMA: where the buffers and the NIC sit, and what crossing sockets costs.
//!
//! The seed's §5.1: a buffer on the other socket from the NIC makes every
//! DMA cross the inter-socket link (Intel UPI, AMD xGMI), which adds
//! latency to each read and caps bandwidth at that link's rate.

use serde::Deserialize;

/// The `[numa]` section.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Numa {
    /// Sockets in the host.
    pub sockets: u32,
    /// The socket the NIC's PCIe root port belongs to (0-based).
    pub nic_socket: u32,
    /// Usable bandwidth of the inter-socket links, per direction, Gb/s
    /// (ignored with one socket).
    pub inter_socket_gbps: f64,
    /// Extra latency of a remote access, ns.
    pub inter_socket_latency_ns: f64,
}

/// Where the workload's buffers are, seen from the NIC.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Placement {
    #[default]
    Local,
    Remote,
}

impl Numa {
    pub fn validate(&self) -> Result<(), (&'static str, String)> {
        if self.sockets == 0 {
            return Err(("sockets", "must be at least 1".into()));
        }
        if self.nic_socket >= self.sockets {
            return Err((
                "nic_socket",
                format!(
                    "socket {} does not exist ({} sockets)",
                    self.nic_socket, self.sockets
                ),
            ));
        }
        if self.sockets > 1 && !(self.inter_socket_gbps.is_finite() && self.inter_socket_gbps > 0.0)
        {
            return Err((
                "inter_socket_gbps",
                format!("{}: bandwidth must be positive", self.inter_socket_gbps),
            ));
        }
        if !(self.inter_socket_latency_ns.is_finite() && self.inter_socket_latency_ns >= 0.0) {
            return Err(("inter_socket_latency_ns", "must be zero or positive".into()));
        }
        Ok(())
    }

    /// Whether a remote placement is possible at all.
    pub fn has_remote(&self) -> bool {
        self.sockets > 1
    }

    /// Memory bandwidth a DMA stream can get from buffers at `placement`,
    /// given one socket's sustained DDR bandwidth, Gb/s.
    pub fn dma_memory_gbps(&self, placement: Placement, socket_ddr_gbps: f64) -> f64 {
        match placement {
            Placement::Local => socket_ddr_gbps,
            Placement::Remote => socket_ddr_gbps.min(self.inter_socket_gbps),
        }
    }

    /// Latency a DMA read gains from the placement, ns.
    pub fn extra_latency_ns(&self, placement: Placement) -> f64 {
        match placement {
            Placement::Local => 0.0,
            Placement::Remote => self.inter_socket_latency_ns,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn remote_is_capped_by_the_link() {
        let n = Numa {
            sockets: 2,
            nic_socket: 0,
            inter_socket_gbps: 332.8,
            inter_socket_latency_ns: 60.0,
        };
        assert!(n.validate().is_ok());
        assert_eq!(n.dma_memory_gbps(Placement::Local, 900.0), 900.0);
        assert_eq!(n.dma_memory_gbps(Placement::Remote, 900.0), 332.8);
        assert_eq!(n.extra_latency_ns(Placement::Remote), 60.0);
        let bad = Numa { nic_socket: 2, ..n };
        assert_eq!(bad.validate().unwrap_err().0, "nic_socket");
    }
}
