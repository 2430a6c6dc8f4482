//! PCIe: what a DMA read or write of N bytes costs on the link.
//!
//! The seed's §5.2 says the payload must cross PCIe twice (source host's
//! DMA read, target host's DMA write) and that the cost is not just the
//! line rate: transaction-layer headers, data-link framing, encoding,
//! ACK/flow-control DLLPs, maximum payload and read request sizes, read
//! completion latency and the number of reads a device may have
//! outstanding. This module computes each of those from the PCI Express
//! Base Specification, following the model of Neugebauer et al.,
//! "Understanding PCIe performance for end host networking", SIGCOMM 2018
//! (the model of their §3, published as `pcie-model`), which they validated against
//! measurements.
//!
//! What is modelled, per direction of a full-duplex link:
//! - **Encoding**: Gen1/2 8b/10b, Gen3–5 128b/130b (Base Spec §4.2).
//!   Gen6 runs 64 GT/s PAM4 in FLIT mode only: 256-byte flits of 236 TLP
//!   bytes, 6 DLP bytes (which carry ACK/NAK and flow-control credits),
//!   8 CRC and 6 FEC bytes (Base Spec 6.0, Flit Mode), so no 128b/130b,
//!   no per-TLP framing and no separate DLLPs; we charge 236/256.
//! - **Per-TLP framing + data-link overhead**, 8 bytes: Gen1/2 STP(1) +
//!   sequence number(2) + LCRC(4) + END(1); Gen3–5 a 4-byte STP token
//!   that carries the 12-bit sequence number + LCRC(4) (Base Spec 3.0,
//!   8 GT/s framing tokens in chapter 4, LCRC in chapter 3). Gen6 FLIT
//!   mode: 0.
//! - **TLP headers**: memory read/write 3 DW (12 B) with 32-bit
//!   addresses, 4 DW (16 B) with 64-bit; completions 3 DW (12 B)
//!   (Base Spec §2.2). No ECRC digest.
//! - **DLLPs**: one 8-byte ACK and one 8-byte UpdateFC per AckNak latency
//!   limit. The limit comes from the spec's formula
//!   `(MPS + 28) × AckFactor / width + InternalDelay` (Base Spec rev. 5.0
//!   Tables 3-7 to 3-9, as pcie-model cites them). As in Neugebauer et al.'s model, the
//!   limit (in symbol times) is charged as one DLLP per `limit` bytes;
//!   read literally it is per lane, which would make the overhead `width`
//!   times smaller, but the conservative reading is what matched their
//!   measurements (SIGCOMM'18 Fig. 2), so we keep it. Gen4 and Gen5 use
//!   the 8 GT/s internal delay, as pcie-model does for them.
//! - **SKP ordered sets** (clock compensation): Gen1/2 4 symbols per 1538
//!   symbol times; Gen3–5 one 16-byte SKP ordered set per 370–375 data
//!   blocks, taken as 372 (Base Spec 3.0, clock tolerance compensation).
//!   Not charged for Gen6.
//! - **Reads**: the device splits a read into Memory Read requests of at
//!   most MRRS bytes; the completer answers with CplD TLPs of at most MPS
//!   bytes, and root complexes commonly split them further at the Read
//!   Completion Boundary (RCB, e.g. 64 B: pcie-model's `rcb_chunks` option).
//!   Reads are also limited by Little's law: at most
//!   `max_outstanding_reads` requests of MRRS bytes per read latency.
//! - **Writes** are posted: Memory Write TLPs of at most MPS bytes and no
//!   completion.
//!
//! Not modelled: replay after LCRC errors, ECRC, TLP prefixes, relaxed
//! ordering, ATS/IOMMU translation, and the 4 KiB boundary rule (buffers
//! are assumed aligned).

use serde::Deserialize;
use std::ops::{Add, AddAssign, Mul};

/// A PCIe generation, from the profile's `pcie.generation = 1..6`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Deserialize)]
#[serde(try_from = "i64")]
pub enum Generation {
    Gen1,
    Gen2,
    Gen3,
    Gen4,
    Gen5,
    Gen6,
}

impl TryFrom<i64> for Generation {
    type Error = String;
    fn try_from(n: i64) -> Result<Self, String> {
        Ok(match n {
            1 => Self::Gen1,
            2 => Self::Gen2,
            3 => Self::Gen3,
            4 => Self::Gen4,
            5 => Self::Gen5,
            6 => Self::Gen6,
            _ => {
                return Err(format!(
                    "unknown PCIe generation {n} (known: 1, 2, 3, 4, 5, 6)"
                ));
            }
        })
    }
}

impl Generation {
    /// Transfers per second per lane, in GT/s (Base Spec §4.2).
    pub fn gt_per_s(self) -> f64 {
        match self {
            Self::Gen1 => 2.5,
            Self::Gen2 => 5.0,
            Self::Gen3 => 8.0,
            Self::Gen4 => 16.0,
            Self::Gen5 => 32.0,
            // PAM4: 32 GBd × 2 bits per symbol.
            Self::Gen6 => 64.0,
        }
    }

    /// Fraction of the raw bit rate left after line encoding (for Gen6,
    /// after the FLIT's CRC, FEC and DLP bytes: see the module docs).
    pub fn encoding_efficiency(self) -> f64 {
        match self {
            Self::Gen1 | Self::Gen2 => 8.0 / 10.0,
            Self::Gen3 | Self::Gen4 | Self::Gen5 => 128.0 / 130.0,
            Self::Gen6 => 236.0 / 256.0,
        }
    }

    /// Whether the link runs in FLIT mode (Gen6).
    pub fn flit_mode(self) -> bool {
        self == Self::Gen6
    }

    /// Framing and data-link bytes added to every TLP.
    pub fn tlp_framing_bytes(self) -> u64 {
        if self.flit_mode() { 0 } else { 8 }
    }

    /// Size of one DLLP on the wire, framing included (0 in FLIT mode,
    /// where ACKs and credits ride in every flit's DLP bytes).
    pub fn dllp_bytes(self) -> u64 {
        if self.flit_mode() { 0 } else { 8 }
    }

    /// The AckNak latency timer's internal delay in symbol times
    /// (Base Spec Tables 3-7 to 3-9: 19 at 2.5 GT/s, 70 at 5 GT/s,
    /// 115 at 8 GT/s and above).
    fn ack_internal_delay(self) -> f64 {
        match self {
            Self::Gen1 => 19.0,
            Self::Gen2 => 70.0,
            _ => 115.0,
        }
    }

    /// Fraction of symbol times taken by SKP ordered sets.
    fn skp_fraction(self) -> f64 {
        match self {
            Self::Gen1 | Self::Gen2 => 4.0 / 1538.0,
            Self::Gen3 | Self::Gen4 | Self::Gen5 => 1.0 / 373.0,
            Self::Gen6 => 0.0,
        }
    }

    pub fn number(self) -> u8 {
        self as u8 + 1
    }
}

/// How a root complex splits the completions of one read request.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum CompletionSplit {
    /// One completion per RCB-aligned chunk (a root complex that answers
    /// in cache lines: 64-byte completions; pcie-model's `rcb_chunks`).
    Rcb,
    /// Completions as large as MPS allows.
    Mps,
}

/// The `[pcie]` section of a profile: the NIC's slot and link settings.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Pcie {
    pub generation: Generation,
    /// Link width (x1..x32).
    pub lanes: u32,
    /// Max Payload Size in bytes (128..4096, a power of two).
    pub mps: u32,
    /// Max Read Request Size in bytes (128..4096, a power of two).
    pub mrrs: u32,
    /// Read Completion Boundary in bytes (64 or 128).
    pub rcb: u32,
    pub completion_split: CompletionSplit,
    /// 32 or 64: memory requests carry 3 DW or 4 DW headers.
    pub address_bits: u32,
    /// Round trip of a small DMA read, request to last completion (ns).
    pub read_latency_ns: f64,
    /// Non-posted read requests the device may have in flight (tags).
    pub max_outstanding_reads: u32,
}

/// Memory request header bytes with 32-bit / 64-bit addressing, and the
/// completion header (Base Spec §2.2.7, §2.2.9).
const MEM_HDR_32: u64 = 12;
const MEM_HDR_64: u64 = 16;
const CPL_HDR: u64 = 12;
/// The "TLP overhead" constant in the AckNak latency formula (Base Spec
/// Tables 3-7 to 3-9: header, sequence number, LCRC and framing).
const ACK_TLP_OVERHEAD: f64 = 28.0;
/// CPU stores reach the device as write-combined chunks of one cache line.
pub const WC_CHUNK: u64 = 64;

/// Bytes a transfer puts on each direction of the link, TLP framing
/// included, seen from the device: `to_host` is upstream (device to root
/// complex), `to_device` downstream.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct LinkBytes {
    pub to_host: f64,
    pub to_device: f64,
    /// TLPs sent upstream and downstream (transaction rate).
    pub tlps_to_host: f64,
    pub tlps_to_device: f64,
}

impl Add for LinkBytes {
    type Output = Self;
    fn add(self, o: Self) -> Self {
        Self {
            to_host: self.to_host + o.to_host,
            to_device: self.to_device + o.to_device,
            tlps_to_host: self.tlps_to_host + o.tlps_to_host,
            tlps_to_device: self.tlps_to_device + o.tlps_to_device,
        }
    }
}

impl AddAssign for LinkBytes {
    fn add_assign(&mut self, o: Self) {
        *self = *self + o;
    }
}

impl Mul<f64> for LinkBytes {
    type Output = Self;
    fn mul(self, k: f64) -> Self {
        Self {
            to_host: self.to_host * k,
            to_device: self.to_device * k,
            tlps_to_host: self.tlps_to_host * k,
            tlps_to_device: self.tlps_to_device * k,
        }
    }
}

impl LinkBytes {
    /// The busier direction's bytes.
    pub fn max_dir(&self) -> f64 {
        self.to_host.max(self.to_device)
    }
}

fn chunks(n: u64, size: u64) -> u64 {
    n.div_ceil(size.max(1))
}

impl Pcie {
    /// Checks the values a profile can get wrong; returns the field and why.
    pub fn validate(&self) -> Result<(), (&'static str, String)> {
        if ![1, 2, 4, 8, 16, 32].contains(&self.lanes) {
            return Err((
                "lanes",
                format!("{} lanes: expected 1, 2, 4, 8, 16 or 32", self.lanes),
            ));
        }
        for (f, v) in [("mps", self.mps), ("mrrs", self.mrrs)] {
            if !(128..=4096).contains(&v) || !v.is_power_of_two() {
                return Err((
                    f,
                    format!("{v}: expected 128, 256, 512, 1024, 2048 or 4096"),
                ));
            }
        }
        if self.rcb != 64 && self.rcb != 128 {
            return Err(("rcb", format!("{}: expected 64 or 128", self.rcb)));
        }
        if self.address_bits != 32 && self.address_bits != 64 {
            return Err((
                "address_bits",
                format!("{}: expected 32 or 64", self.address_bits),
            ));
        }
        if !(self.read_latency_ns.is_finite() && self.read_latency_ns > 0.0) {
            return Err((
                "read_latency_ns",
                format!("{}: must be positive", self.read_latency_ns),
            ));
        }
        if self.max_outstanding_reads == 0 {
            return Err(("max_outstanding_reads", "must be at least 1".into()));
        }
        Ok(())
    }

    /// Bit rate per direction after encoding, Gb/s (lanes × GT/s × encoding).
    pub fn raw_gbps(&self) -> f64 {
        self.generation.gt_per_s() * self.generation.encoding_efficiency() * f64::from(self.lanes)
    }

    /// The spec's AckNak latency limit in symbol times for this width and
    /// MPS (AckFactor from Base Spec Tables 3-7 to 3-9).
    pub fn ack_limit_symbols(&self) -> f64 {
        let ack_factor = match (self.mps, self.lanes) {
            (128 | 256, 1..=4) => 1.4,
            (128, 8) | (256, 8) => 2.5,
            (128 | 256, _) => 3.0,
            (_, 1..=8) => 1.0,
            _ => 2.0,
        };
        ((f64::from(self.mps) + ACK_TLP_OVERHEAD) * ack_factor / f64::from(self.lanes)
            + self.generation.ack_internal_delay())
        .floor()
    }

    /// Fraction of the link taken by ACK and UpdateFC DLLPs and SKP
    /// ordered sets (see the module docs for the reading of the limit).
    pub fn link_overhead_fraction(&self) -> f64 {
        let dllp = self.generation.dllp_bytes() as f64;
        2.0 * dllp / self.ack_limit_symbols() + self.generation.skp_fraction()
    }

    /// Bandwidth per direction available to TLPs (headers and framing
    /// included), Gb/s.
    pub fn tlp_gbps(&self) -> f64 {
        self.raw_gbps() * (1.0 - self.link_overhead_fraction())
    }

    fn mem_hdr(&self) -> u64 {
        if self.address_bits == 32 {
            MEM_HDR_32
        } else {
            MEM_HDR_64
        }
    }

    /// Link bytes of one memory request / completion TLP with `payload` bytes.
    fn mem_tlp(&self, payload: u64) -> u64 {
        self.mem_hdr() + self.generation.tlp_framing_bytes() + payload
    }

    fn cpl_tlp(&self, payload: u64) -> u64 {
        CPL_HDR + self.generation.tlp_framing_bytes() + payload
    }

    /// Completion size the root complex uses for reads.
    pub fn completion_bytes(&self) -> u64 {
        match self.completion_split {
            CompletionSplit::Rcb => u64::from(self.rcb.min(self.mps)),
            CompletionSplit::Mps => u64::from(self.mps),
        }
    }

    /// What the device's DMA read of `n` bytes of host memory puts on the
    /// link: read requests upstream, completions with the data downstream.
    pub fn dma_read(&self, n: u64) -> LinkBytes {
        if n == 0 {
            return LinkBytes::default();
        }
        let mrrs = u64::from(self.mrrs);
        let requests = chunks(n, mrrs);
        // Each request of at most MRRS is answered by ceil(len / cpl) completions.
        let cpl = self.completion_bytes();
        let full = n / mrrs;
        let rest = n % mrrs;
        let completions = full * chunks(mrrs, cpl) + if rest > 0 { chunks(rest, cpl) } else { 0 };
        LinkBytes {
            to_host: (requests * self.mem_tlp(0)) as f64,
            to_device: (completions * self.cpl_tlp(0) + n) as f64,
            tlps_to_host: requests as f64,
            tlps_to_device: completions as f64,
        }
    }

    /// What the device's posted DMA write of `n` bytes to host memory puts
    /// on the link: Memory Write TLPs of at most MPS bytes, upstream.
    pub fn dma_write(&self, n: u64) -> LinkBytes {
        if n == 0 {
            return LinkBytes::default();
        }
        let tlps = chunks(n, u64::from(self.mps));
        LinkBytes {
            to_host: (tlps * self.mem_tlp(0) + n) as f64,
            tlps_to_host: tlps as f64,
            ..LinkBytes::default()
        }
    }

    /// What a CPU store of `n` bytes to the device's BAR (a doorbell, or a
    /// BlueFlame-style WQE push) puts on the link: one Memory Write TLP per
    /// 64-byte write-combined chunk, downstream.
    pub fn mmio_write(&self, n: u64) -> LinkBytes {
        if n == 0 {
            return LinkBytes::default();
        }
        let tlps = chunks(n, WC_CHUNK);
        LinkBytes {
            to_device: (tlps * self.mem_tlp(0) + n) as f64,
            tlps_to_device: tlps as f64,
            ..LinkBytes::default()
        }
    }

    /// Payload bandwidth of back-to-back posted writes of `n` bytes, Gb/s.
    pub fn write_gbps(&self, n: u64) -> f64 {
        let b = self.dma_write(n);
        self.tlp_gbps() * n as f64 / b.to_host
    }

    /// Payload bandwidth the link allows for reads of `n` bytes (the
    /// completion direction), Gb/s, before the outstanding-read limit.
    pub fn read_link_gbps(&self, n: u64) -> f64 {
        let b = self.dma_read(n);
        self.tlp_gbps() * n as f64 / b.max_dir()
    }

    /// Little's law: at most `max_outstanding_reads` requests, each of
    /// `min(n, MRRS)` bytes, complete per read latency. Gb/s.
    pub fn read_littles_law_gbps(&self, n: u64) -> f64 {
        let per_request = n.clamp(1, u64::from(self.mrrs)) as f64;
        f64::from(self.max_outstanding_reads) * per_request * 8.0 / self.read_latency_ns
    }

    /// Payload bandwidth of back-to-back DMA reads of `n` bytes, Gb/s: the
    /// lower of the link and the outstanding-read limit.
    pub fn read_gbps(&self, n: u64) -> f64 {
        self.read_link_gbps(n).min(self.read_littles_law_gbps(n))
    }

    /// Time for one isolated DMA read of `n` bytes: the read latency plus
    /// the serialisation of the completions, ns.
    pub fn dma_read_ns(&self, n: u64) -> f64 {
        let b = self.dma_read(n);
        self.read_latency_ns + b.to_device * 8.0 / self.tlp_gbps()
    }

    /// Time to put one posted DMA write of `n` bytes on the link, ns (the
    /// writer does not wait for the memory).
    pub fn dma_write_ns(&self, n: u64) -> f64 {
        self.dma_write(n).to_host * 8.0 / self.tlp_gbps()
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    pub fn gen3_x16() -> Pcie {
        Pcie {
            generation: Generation::Gen3,
            lanes: 16,
            mps: 256,
            mrrs: 512,
            rcb: 64,
            completion_split: CompletionSplit::Rcb,
            address_bits: 64,
            read_latency_ns: 1000.0,
            max_outstanding_reads: 64,
        }
    }

    fn close(a: f64, b: f64, tol: f64) -> bool {
        (a - b).abs() <= tol
    }

    #[test]
    fn raw_rates_follow_encoding() {
        // Gen1 x1: 2.5 GT/s × 8/10 = 2.0 Gb/s; Gen3 x16: 8 × 128/130 × 16
        // = 126.03 Gb/s; Gen4 x16 252.06; Gen5 x16 504.12; Gen6 x16 FLIT:
        // 64 × 236/256 × 16 = 944.0 Gb/s.
        let mut p = gen3_x16();
        assert!(close(p.raw_gbps(), 126.03, 0.01));
        p.generation = Generation::Gen1;
        p.lanes = 1;
        assert!(close(p.raw_gbps(), 2.0, 1e-9));
        p.lanes = 16;
        p.generation = Generation::Gen4;
        assert!(close(p.raw_gbps(), 252.06, 0.01));
        p.generation = Generation::Gen5;
        assert!(close(p.raw_gbps(), 504.12, 0.01));
        p.generation = Generation::Gen6;
        assert!(close(p.raw_gbps(), 944.0, 1e-9));
    }

    #[test]
    fn ack_limits_match_spec_tables() {
        // Base Spec Table 3-7 (2.5 GT/s): x1 MPS 128 → 237, x16 MPS 128
        // → 48, x1 MPS 512 → 559; Table 3-9 (8 GT/s): x16 MPS 256 → 168,
        // x8 MPS 256 → 203. Derived: (256 + 28) × 3.0 / 16 + 115 = 168.25.
        let mut p = gen3_x16();
        assert_eq!(p.ack_limit_symbols(), 168.0);
        p.lanes = 8;
        assert_eq!(p.ack_limit_symbols(), 203.0);
        p.generation = Generation::Gen1;
        p.lanes = 1;
        p.mps = 128;
        assert_eq!(p.ack_limit_symbols(), 237.0);
        p.lanes = 16;
        assert_eq!(p.ack_limit_symbols(), 48.0);
        p.lanes = 1;
        p.mps = 512;
        assert_eq!(p.ack_limit_symbols(), 559.0);
    }

    #[test]
    fn gen3_x8_tlp_bandwidth_matches_sigcomm18() {
        // Gen3 x8: 8 × 128/130 × 8 = 63.02 Gb/s after encoding; the TLP
        // layer with MPS 256 keeps 63.02 × (1 − 16/203 − 1/373) = 57.88
        // Gb/s, as pcie-model's TLP_bw (Neugebauer et al.) gives ~57.9.
        let mut p = gen3_x16();
        p.lanes = 8;
        assert!(close(p.raw_gbps(), 63.015, 0.01), "{}", p.raw_gbps());
        assert!(close(p.tlp_gbps(), 57.88, 0.1), "{}", p.tlp_gbps());
    }

    #[test]
    fn gen3_x16_write_and_read_of_4k() {
        // TLP layer: 126.03 × (1 − 16/168 − 1/373) = 113.69 Gb/s.
        let p = gen3_x16();
        assert!(close(p.tlp_gbps(), 113.69, 0.01), "{}", p.tlp_gbps());
        // Write 4096 B with MPS 256 and 64-bit addresses: 16 TLPs of
        // 256 + 16 + 8 = 280 B → 4480 B; 113.69 × 4096/4480 = 103.95 Gb/s.
        let w = p.dma_write(4096);
        assert_eq!(
            (w.to_host, w.tlps_to_host, w.to_device),
            (4480.0, 16.0, 0.0)
        );
        assert!(close(p.write_gbps(4096), 103.95, 0.01));
        // Read 4096 B, MRRS 512, 64-byte completions: 8 requests of 24 B up
        // (192 B), 64 completions of 64 + 12 + 8 = 84 B down (5376 B):
        // 113.69 × 4096/5376 = 86.62 Gb/s.
        let r = p.dma_read(4096);
        assert_eq!((r.to_host, r.to_device), (192.0, 5376.0));
        assert_eq!((r.tlps_to_host, r.tlps_to_device), (8.0, 64.0));
        assert!(close(p.read_link_gbps(4096), 86.62, 0.01));
        // With MPS-sized completions: 16 × 276 = 4416 B → 105.45 Gb/s.
        let mut m = p.clone();
        m.completion_split = CompletionSplit::Mps;
        assert_eq!(m.dma_read(4096).to_device, 4416.0);
        assert!(close(m.read_link_gbps(4096), 105.45, 0.01));
    }

    #[test]
    fn small_and_odd_reads() {
        // 100 B with MRRS 512 and 64-byte completions: one request, two
        // completions (64 + 36): 2 × 20 + 100 = 140 B down.
        let p = gen3_x16();
        let r = p.dma_read(100);
        assert_eq!(
            (r.to_host, r.to_device, r.tlps_to_device),
            (24.0, 140.0, 2.0)
        );
        // 1000 B: requests of 512 + 488 → completions 8 + 8 = 16.
        assert_eq!(p.dma_read(1000).tlps_to_device, 16.0);
        assert_eq!(p.dma_read(0), LinkBytes::default());
    }

    #[test]
    fn littles_law_caps_reads() {
        // 64 tags × 512 B per 1000 ns = 32.77 B/ns = 262.1 Gb/s: above the
        // link (86.6 Gb/s), so the link binds. With 8 tags: 32.8 Gb/s.
        let mut p = gen3_x16();
        assert!(close(p.read_littles_law_gbps(4096), 262.144, 1e-6));
        assert!(close(p.read_gbps(4096), p.read_link_gbps(4096), 1e-9));
        p.max_outstanding_reads = 8;
        assert!(close(p.read_gbps(4096), 32.768, 1e-6));
        // Small reads carry less per tag: 8 × 64 B / 1 µs = 4.1 Gb/s.
        assert!(close(p.read_littles_law_gbps(64), 4.096, 1e-6));
    }

    #[test]
    fn mmio_pushes_in_cache_lines() {
        // An 8-byte doorbell: 16 + 8 + 8 = 32 B; a 128-byte BlueFlame push:
        // 2 × 24 + 128 = 176 B, both downstream.
        let p = gen3_x16();
        assert_eq!(p.mmio_write(8).to_device, 32.0);
        let bf = p.mmio_write(128);
        assert_eq!(
            (bf.to_device, bf.tlps_to_device, bf.to_host),
            (176.0, 2.0, 0.0)
        );
    }

    #[test]
    fn gen6_flit_mode_has_no_per_tlp_framing() {
        let mut p = gen3_x16();
        p.generation = Generation::Gen6;
        assert_eq!(p.link_overhead_fraction(), 0.0);
        // 16 × (256 + 16) = 4352 B for 4 KiB: 944 × 4096/4352 = 888.47 Gb/s.
        assert_eq!(p.dma_write(4096).to_host, 4352.0);
        assert!(close(p.write_gbps(4096), 888.47, 0.01));
    }

    #[test]
    fn validation_names_the_field() {
        let mut p = gen3_x16();
        assert!(p.validate().is_ok());
        p.mps = 300;
        assert_eq!(p.validate().unwrap_err().0, "mps");
        let mut p = gen3_x16();
        p.read_latency_ns = -1.0;
        assert_eq!(p.validate().unwrap_err().0, "read_latency_ns");
        assert!(Generation::try_from(7).is_err());
        assert_eq!(Generation::try_from(4).unwrap().number(), 4);
    }
}
