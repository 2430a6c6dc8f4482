//! Two engines in one process, joined over real UDP sockets on loopback.
#![allow(dead_code)]

use roce_verbs::*;
use std::net::SocketAddr;
use std::time::Duration;

pub const WAIT: Duration = Duration::from_secs(20);

pub struct Side {
    pub ctx: Context,
    pub pd: Pd,
    pub cq: Cq,
    pub mr: Mr,
    pub qp: Qp,
    /// The peer's endpoint.
    pub peer: Endpoint,
}

pub struct Opts {
    pub a: SocketAddr,
    pub b: SocketAddr,
    pub cfg_a: EngineConfig,
    pub cfg_b: EngineConfig,
    pub buf: usize,
    pub mtu: Mtu,
    pub timeout: u8,
    pub depth: u32,
    pub recovery: Recovery,
}

impl Default for Opts {
    fn default() -> Self {
        Opts {
            a: "127.0.0.1:0".parse().unwrap(),
            b: "127.0.0.1:0".parse().unwrap(),
            cfg_a: EngineConfig::default(),
            cfg_b: EngineConfig::default(),
            buf: 1 << 16,
            mtu: Mtu::Mtu1024,
            timeout: 10,
            depth: 256,
            recovery: Recovery::GoBackN,
        }
    }
}

struct Half {
    ctx: Context,
    pd: Pd,
    cq: Cq,
    mr: Mr,
    qp: PreparedQp,
}

fn half(
    addr: SocketAddr,
    cfg: EngineConfig,
    o: &Opts,
    open: &dyn Fn(SocketAddr, EngineConfig) -> Context,
) -> Half {
    let ctx = open(addr, cfg);
    let pd = ctx.alloc_pd().unwrap();
    let cq = ctx.create_cq(4096).unwrap();
    let mr = pd.reg_mr(o.buf, Access::ALL).unwrap();
    let qp = pd
        .qp_builder(&cq)
        .mtu(o.mtu)
        .timeout(o.timeout)
        .recovery(o.recovery)
        .max_send_wr(o.depth)
        .max_recv_wr(o.depth)
        .build()
        .unwrap();
    Half {
        ctx,
        pd,
        cq,
        mr,
        qp,
    }
}

/// Connects two sides.
pub fn pair(o: Opts) -> (Side, Side) {
    pair_with(o, &|addr, cfg| {
        Device::open_with(addr, cfg).expect("open device")
    })
}

/// Connects two sides whose devices `open` opens (e.g. each in its own
/// network namespace).
pub fn pair_with(o: Opts, open: &dyn Fn(SocketAddr, EngineConfig) -> Context) -> (Side, Side) {
    let a = half(o.a, o.cfg_a.clone(), &o, open);
    let b = half(o.b, o.cfg_b.clone(), &o, open);
    let ea = a.qp.endpoint_with(&a.mr);
    let eb = b.qp.endpoint_with(&b.mr);
    let side = |h: Half, peer: Endpoint| Side {
        qp: h.qp.connect(&peer).expect("connect"),
        ctx: h.ctx,
        pd: h.pd,
        cq: h.cq,
        mr: h.mr,
        peer,
    };
    (side(a, eb), side(b, ea))
}

pub fn pattern(seed: u8, n: usize) -> Vec<u8> {
    (0..n)
        .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed) ^ (i >> 8) as u8)
        .collect()
}

pub fn ok_wc(wcs: &[Wc]) {
    for w in wcs {
        assert_eq!(w.status, WcStatus::Success, "completion {w:?}");
    }
}
