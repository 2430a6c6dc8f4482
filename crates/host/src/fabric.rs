//! The leaf/spine fabric between the two hosts (the seed's §5.5–§5.6):
//! port speeds, uplinks and oversubscription, switch buffer, framing.

use crate::ethernet::Framing;
use serde::Deserialize;

/// The `[fabric]` section.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Fabric {
    pub leaves: u32,
    pub spines: u32,
    /// Hosts (downlinks) per leaf, each at the host's port speed.
    pub hosts_per_leaf: u32,
    /// Uplinks from each leaf towards the spines.
    pub uplinks_per_leaf: u32,
    pub uplink_gbps: f64,
    /// Shared packet buffer of one switch, MiB.
    pub switch_buffer_mib: f64,
    /// Port-to-port latency of one switch, ns.
    pub switch_latency_ns: f64,
    /// 802.1Q tagged frames.
    pub vlan: bool,
    /// IPv6 instead of IPv4.
    pub ipv6: bool,
}

impl Fabric {
    pub fn validate(&self) -> Result<(), (&'static str, String)> {
        for (f, v) in [
            ("leaves", self.leaves),
            ("spines", self.spines),
            ("hosts_per_leaf", self.hosts_per_leaf),
            ("uplinks_per_leaf", self.uplinks_per_leaf),
        ] {
            if v == 0 {
                return Err((f, "must be at least 1".into()));
            }
        }
        if !(self.uplink_gbps.is_finite() && self.uplink_gbps > 0.0) {
            return Err((
                "uplink_gbps",
                format!("{}: bandwidth must be positive", self.uplink_gbps),
            ));
        }
        if !(self.switch_buffer_mib.is_finite() && self.switch_buffer_mib > 0.0) {
            return Err(("switch_buffer_mib", "must be positive".into()));
        }
        if !(self.switch_latency_ns.is_finite() && self.switch_latency_ns >= 0.0) {
            return Err(("switch_latency_ns", "must be zero or positive".into()));
        }
        Ok(())
    }

    pub fn framing(&self) -> Framing {
        Framing {
            vlan: self.vlan,
            ipv6: self.ipv6,
        }
    }

    /// Leaf oversubscription: downlink capacity over uplink capacity.
    pub fn oversubscription(&self, host_port_gbps: f64) -> f64 {
        f64::from(self.hosts_per_leaf) * host_port_gbps
            / (f64::from(self.uplinks_per_leaf) * self.uplink_gbps)
    }

    /// A leaf's total uplink capacity, Gb/s.
    pub fn leaf_uplink_gbps(&self) -> f64 {
        f64::from(self.uplinks_per_leaf) * self.uplink_gbps
    }

    /// Uplink capacity one host gets when every host on its leaf sends
    /// across the spine at once (fair share), capped at its port, Gb/s.
    pub fn uplink_share_gbps(&self, host_port_gbps: f64) -> f64 {
        (self.leaf_uplink_gbps() / f64::from(self.hosts_per_leaf)).min(host_port_gbps)
    }

    /// Switch buffer in bytes.
    pub fn switch_buffer_bytes(&self) -> f64 {
        self.switch_buffer_mib * 1024.0 * 1024.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn oversubscription_3_to_1() {
        // 48 × 100G down, 8 × 200G up: 4800 / 1600 = 3:1; each host's
        // share of the uplinks is 1600 / 48 = 33.3 Gb/s.
        let f = Fabric {
            leaves: 4,
            spines: 8,
            hosts_per_leaf: 48,
            uplinks_per_leaf: 8,
            uplink_gbps: 200.0,
            switch_buffer_mib: 32.0,
            switch_latency_ns: 600.0,
            vlan: false,
            ipv6: false,
        };
        assert!(f.validate().is_ok());
        assert_eq!(f.oversubscription(100.0), 3.0);
        assert!((f.uplink_share_gbps(100.0) - 33.333).abs() < 1e-3);
    }
}
