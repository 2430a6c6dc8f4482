//! `roce-verbs`: RDMA over real UDP sockets, with a libibverbs-shaped API.
//!
//! ```no_run
//! use roce_verbs::{Device, Access, SendWr, WrOpcode};
//! # fn main() -> roce_verbs::Result<()> {
//! let ctx = Device::open(std::net::Ipv4Addr::LOCALHOST)?;
//! let pd = ctx.alloc_pd()?;
//! let cq = ctx.create_cq(256)?;
//! let mr = pd.reg_mr(4096, Access::ALL)?;
//! let qp = pd.qp_builder(&cq).build()?;
//! let mine = qp.endpoint_with(&mr);
//! # let theirs = mine;
//! // … send `mine` to the peer, receive `theirs` (see `exchange`) …
//! let qp = qp.connect(&theirs)?;
//! let wr = SendWr::new(1, WrOpcode::RdmaWrite { remote_addr: theirs.addr, rkey: theirs.rkey },
//!                      vec![mr.sge(0, 4096)]);
//! qp.post_send(&wr)?;
//! let wc = cq.wait(1, std::time::Duration::from_secs(5))?;
//! # Ok(()) }
//! ```
//!
//! Layers: [`verbs`] (the objects), [`engine`] (socket + RNIC), [`packet`]
//! (datagrams and the ICRC), [`poll`] (spinning or blocking when
//! idle), [`sys`] (batched socket calls), [`profile`]
//! (where the engine's time goes, per stage), [`fault`]
//! (the send-path fault injector), [`endpoint`] and [`exchange`] (the
//! out-of-band set-up), [`stats`], and [`baseline`] (what the kernel alone
//! does with the same sizes, for `roce perf` to report against).

pub mod baseline;
pub mod cc;
pub mod ecn;
pub mod endpoint;
pub mod engine;
pub mod error;
pub mod exchange;
pub mod fault;
pub mod gid;
pub mod packet;
pub mod pingpong;
pub mod poll;
pub mod profile;
pub mod stats;
pub mod sys;
pub mod verbs;

pub use cc::CcSettings;
pub use ecn::{RedConfig, RedStats};
pub use endpoint::Endpoint;
pub use engine::{Engine, EngineConfig, ROCE_PORT};
pub use error::{Error, Result};
pub use exchange::{Control, EXCHANGE_PORT};
pub use fault::{FaultConfig, FaultStats};
pub use gid::{Gid, GidEntry, gid_table, gid_tables, netdev_of};
pub use poll::{PollConfig, PollMode};
pub use profile::{Analysis, Stage, StageProfile, analyze};
pub use stats::Stats;
pub use verbs::{
    Ah, Context, Cq, Device, FdWatch, Mr, Pd, PreparedQp, ProgressThread, Qp, QpBuilder, Srq,
};

pub use roce_rnic::{
    Access, AsyncEvent, Counters, IrnConfig, Mtu, QpAttr, QpState, QpType, Recovery, RecvWr,
    RnicConfig, SendFlags, SendWr, Sge, SrqHandle, UdDest, Wc, WcOpcode, WcStatus, WrOpcode,
};
