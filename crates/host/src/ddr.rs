//! DDR memory: how fast a socket's memory controllers move bytes.
//!
//! The seed's §5.1 and §5.7: both ends' DRAM must source and sink every
//! payload byte, and they share that bandwidth with the CPU. A DDR4 or DDR5
//! channel is 64 data bits wide (DDR5 as two 32-bit subchannels), so its
//! peak is `MT/s × 8 bytes` (JEDEC JESD79-4 / JESD79-5); a socket has
//! `channels` of them. Sustained bandwidth is lower (refresh, bank and
//! read/write turnarounds): the profile's `efficiency` says how much, as a
//! STREAM-style measurement would.

use serde::Deserialize;

/// DDR generation.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum DdrGeneration {
    Ddr4,
    Ddr5,
}

/// The `[ddr]` section: memory per socket.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Ddr {
    pub generation: DdrGeneration,
    /// Transfer rate of one channel, MT/s (e.g. 2933 for DDR4-2933).
    pub mt_per_s: f64,
    /// Populated channels per socket.
    pub channels_per_socket: u32,
    /// Sustained fraction of peak, 0 < efficiency ≤ 1.
    pub efficiency: f64,
    /// Idle load-to-use latency, ns.
    pub latency_ns: f64,
}

/// Bytes per transfer of a 64-bit channel.
pub const CHANNEL_BYTES: f64 = 8.0;

impl Ddr {
    pub fn validate(&self) -> Result<(), (&'static str, String)> {
        if !(self.mt_per_s.is_finite() && self.mt_per_s > 0.0) {
            return Err((
                "mt_per_s",
                format!("{}: bandwidth must be positive", self.mt_per_s),
            ));
        }
        if self.channels_per_socket == 0 {
            return Err(("channels_per_socket", "must be at least 1".into()));
        }
        if !(self.efficiency > 0.0 && self.efficiency <= 1.0) {
            return Err((
                "efficiency",
                format!("{}: expected 0 < efficiency ≤ 1", self.efficiency),
            ));
        }
        if !(self.latency_ns.is_finite() && self.latency_ns > 0.0) {
            return Err((
                "latency_ns",
                format!("{}: must be positive", self.latency_ns),
            ));
        }
        Ok(())
    }

    /// Peak of one channel, Gb/s.
    pub fn channel_gbps(&self) -> f64 {
        self.mt_per_s * CHANNEL_BYTES * 8.0 / 1e3
    }

    /// Peak of one socket, Gb/s.
    pub fn socket_peak_gbps(&self) -> f64 {
        self.channel_gbps() * f64::from(self.channels_per_socket)
    }

    /// Sustained bandwidth of one socket (reads and writes combined), Gb/s.
    pub fn socket_gbps(&self) -> f64 {
        self.socket_peak_gbps() * self.efficiency
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ddr4_2933_six_channels() {
        // 2933 MT/s × 8 B = 23.46 GB/s = 187.7 Gb/s per channel; six
        // channels: 1126.3 Gb/s (140.8 GB/s) peak; at 80 %: 901.0 Gb/s.
        let d = Ddr {
            generation: DdrGeneration::Ddr4,
            mt_per_s: 2933.0,
            channels_per_socket: 6,
            efficiency: 0.8,
            latency_ns: 90.0,
        };
        assert!((d.channel_gbps() - 187.712).abs() < 1e-6);
        assert!((d.socket_peak_gbps() - 1126.272).abs() < 1e-6);
        assert!((d.socket_gbps() - 901.0176).abs() < 1e-6);
        assert!(d.validate().is_ok());
        let bad = Ddr {
            mt_per_s: -1.0,
            ..d.clone()
        };
        assert_eq!(bad.validate().unwrap_err().0, "mt_per_s");
        let bad = Ddr {
            efficiency: 1.5,
            ..d
        };
        assert_eq!(bad.validate().unwrap_err().0, "efficiency");
    }
}
