//! `roce-sim`: a deterministic, packet-level simulator of RoCEv2 datacenter
//! fabrics whose hosts run the real software RNIC (`roce-rnic`).
//!
//! Modules are named after the domain: [`event`] (time and the event queue),
//! [`baseline`] (a flow alone on the fabric: base RTT and ideal FCT),
//! [`link`] (ports, queues, scheduling), [`pfc`] (switch buffer and priority
//! flow control), [`ecn`] (RED marking), [`ecmp`] (multipath hashing),
//! [`topology`] (graphs and routing), [`workload`] (flows and generators),
//! [`sim`] (hosts, switches and the loop), [`metrics`] (results and files),
//! [`scenario`] (the TOML schema), [`sweep`] (grids of scenarios, sharded
//! across machines), [`plot`] (the figures of a run), [`validate`] (the `roce validate` suite) and [`hpcc`] (the HPCC
//! ns-3 simulator's input and output formats).

pub mod baseline;
pub mod cc;
pub mod ecmp;
pub mod ecn;
pub mod event;
pub mod fib;
pub mod host;
pub mod hpcc;
pub mod link;
pub mod metrics;
pub mod ns3_trace;
pub mod packet;
pub mod partition;
pub mod pfc;
pub(crate) mod pint;
pub mod plot;
pub mod qlen;
pub mod scenario;
pub mod sim;
pub mod stall;
pub mod sweep;
pub mod topology;
pub mod validate;
pub mod workload;

pub use cc::{CcConfig, HpccSettings};
pub use event::{PS_PER_NS, PS_PER_S, PS_PER_US, Ps};
pub use metrics::{Report, Summary};
pub use sim::{SimConfig, SimError, Simulator};
pub use stall::{Stall, StalledFlow};
pub use topology::Topology;
