//! `roce-host`: the host half of the seed's §3 and §5 as code.
//!
//! An RDMA message goes from the source's DDR, through its PCIe link and
//! RNIC, across the port and the leaf/spine fabric, into the target's RNIC,
//! PCIe link and DDR, and ends as a completion the CPU handles. This crate
//! holds the hardware [`profile`]s and the formulas for each hop, and the
//! closed-form [`analyze()`] that names the hop that binds a workload (the
//! seed's §5.9 table). `roce analyze` is a thin front over it and `roce sim`
//! instantiates the same resources, so the two never disagree on a formula.
//!
//! Modules are named after the domain: [`ddr`], [`numa`], [`pcie`],
//! [`rnic`], [`ethernet`], [`fabric`], [`cpu`], [`workload`], [`analyze`](mod@analyze).
//!
//! # For the simulator
//!
//! Load a profile with [`Profile::load`] (or [`Profile::from_toml_str`]);
//! every section is a plain struct with public fields, and the costs are
//! plain methods:
//!
//! - DMA read of `n` bytes ([`pcie::Pcie`]): [`dma_read`](pcie::Pcie::dma_read)
//!   gives the link bytes and TLP counts per direction (requests of ≤ MRRS,
//!   completions of RCB or MPS size, TLP header + framing);
//!   [`dma_read_ns`](pcie::Pcie::dma_read_ns) the isolated latency
//!   (read latency + completion serialisation); [`read_gbps`](pcie::Pcie::read_gbps)
//!   the sustained payload rate, the lower of the link
//!   ([`read_link_gbps`](pcie::Pcie::read_link_gbps)) and Little's law over
//!   the outstanding-read (tag) limit
//!   ([`read_littles_law_gbps`](pcie::Pcie::read_littles_law_gbps)).
//! - DMA write of `n` bytes (posted, MPS-sized TLPs):
//!   [`dma_write`](pcie::Pcie::dma_write), [`dma_write_ns`](pcie::Pcie::dma_write_ns),
//!   [`write_gbps`](pcie::Pcie::write_gbps).
//! - The link itself: [`tlp_gbps`](pcie::Pcie::tlp_gbps) per direction after
//!   encoding, DLLP ACK/UpdateFC and SKP overhead;
//!   [`mmio_write`](pcie::Pcie::mmio_write) for doorbells and inline pushes.
//! - Memory: [`Ddr::socket_gbps`](ddr::Ddr::socket_gbps) (channels ×
//!   per-channel × efficiency); NUMA: [`Numa::dma_memory_gbps`](numa::Numa::dma_memory_gbps)
//!   and [`Numa::extra_latency_ns`](numa::Numa::extra_latency_ns) for a remote buffer.
//! - RNIC: `message_rate_mpps` and `packet_rate_mpps` ceilings;
//!   [`qp_miss_ratio`](rnic::Rnic::qp_miss_ratio) /
//!   [`mr_miss_ratio`](rnic::Rnic::mr_miss_ratio) and the cost of a miss,
//!   [`qp_miss_pcie`](rnic::Rnic::qp_miss_pcie) / [`mr_miss_pcie`](rnic::Rnic::mr_miss_pcie)
//!   (an extra PCIe read, taking `pcie.read_latency_ns`, at most
//!   `context_fetches_outstanding` at a time:
//!   [`miss_service_mps`](rnic::Rnic::miss_service_mps)); WQE sizes
//!   ([`wqe_fetch_bytes`](rnic::Rnic::wqe_fetch_bytes),
//!   [`inline_wqe_bytes`](rnic::Rnic::inline_wqe_bytes)); the CQE write
//!   ([`cqe_pcie`](rnic::Rnic::cqe_pcie)); the RX buffer
//!   ([`rx_buffer_bytes`](rnic::Rnic::rx_buffer_bytes)).
//! - CPU: [`Cpu::requester_ns`](cpu::Cpu::requester_ns) and
//!   [`Cpu::responder_send_ns`](cpu::Cpu::responder_send_ns) per message.
//! - Wire: [`Framing::message`](ethernet::Framing::message) for a message's
//!   packets and wire bytes, [`goodput_gbps`](ethernet::Framing::goodput_gbps).
//! - Per message, everything at once: [`analyze::message_cost`] gives what
//!   one message of a workload costs the requester and the responder (PCIe
//!   bytes per direction, read requests, DDR bytes, cache misses, CPU ns),
//!   exactly as the analysis charges it.
//! - Fabric: [`Fabric::oversubscription`](fabric::Fabric::oversubscription),
//!   [`uplink_share_gbps`](fabric::Fabric::uplink_share_gbps),
//!   [`switch_buffer_bytes`](fabric::Fabric::switch_buffer_bytes).

pub mod analyze;
pub mod cpu;
pub mod ddr;
pub mod ethernet;
pub mod fabric;
pub mod numa;
pub mod pcie;
pub mod profile;
pub mod rnic;
pub mod workload;

pub use analyze::{Analysis, AnalyzeError, Hop, HostCost, MessageCost, analyze, message_cost};
pub use ethernet::Framing;
pub use numa::Placement;
pub use pcie::{Generation, LinkBytes, Pcie};
pub use profile::{Profile, ProfileError};
pub use workload::{Op, Workload, WorkloadError};
