//! Setting a side up: the engine, its resources, and perftest's steps
//! around them (the peer's kind, the key messages, the closing syncs).

use crate::Result;
use crate::error::fail;
use crate::perftest::{BwReport, Gid, Keys};
use crate::wire::{Greeting, Wire};
use crate::*;
use roce_verbs::*;
use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;

/// One side's verbs resources.
pub(crate) struct Side {
    pub(crate) ctx: Context,
    pub(crate) _pd: Pd,
    pub(crate) cq: Cq,
    pub(crate) mr: Mr,
    pub(crate) qps: Vec<Qp>,
    /// The buffer is two halves of the largest size: sources and READ/ping-pong
    /// targets in the lower, receives (sized for any message) in the upper.
    pub(crate) half: usize,
}

/// Outstanding RDMA reads and atomics announced in the key message: what
/// the QP builder's default initiator depth is, so a peer that mirrors it
/// (perftest's `ctx_connect` does) stays within what this side sends.
pub(crate) const OUT_READS: u16 = 4;

/// Opens the engine on `ip` (UDP 4791, or a free port when 4791 is taken
/// and the user did not ask for it).
/// Returns the context and, when it moved off the port, a note saying so.
pub(crate) fn open_ctx(
    ip: IpAddr,
    args: &Options,
    cfg: EngineConfig,
) -> Result<(Context, Option<String>)> {
    let udp_port = args.udp_port;
    let port = udp_port.unwrap_or(ROCE_PORT);
    let addr = SocketAddr::new(ip, port);
    let mut note = None;
    let ctx = match Device::open_with(addr, cfg.clone()) {
        Ok(c) => c,
        // Two stacks on one host cannot both own 4791: take a free port
        // unless the user asked for this one.
        Err(roce_verbs::Error::AddrInUse(_)) if udp_port.is_none() => {
            let c = Device::open_with(SocketAddr::new(ip, 0), cfg)?;
            note = Some(format!(
                "UDP {addr} is in use; this side uses {} instead",
                c.local_addr()
            ));
            c
        }
        Err(e) => return Err(e.into()),
    };
    if let Some(x) = args.gid_index.filter(|&x| x != 0) {
        fail!(
            Usage,
            "GID index {x} does not exist: this device's GID table holds one RoCEv2 GID, index 0 = {} (the address it is bound to)",
            Gid::from_ip(ip)
        );
    }
    Ok((ctx, note))
}

/// Creates PD, CQ, one MR of `buf` bytes and `n` QPs in INIT.
pub(crate) fn create(
    ctx: &Context,
    args: &Options,
    buf: usize,
    n: u32,
    mtu: u32,
) -> Result<(Pd, Cq, Mr, Vec<PreparedQp>)> {
    let (tx_depth, inline) = (args.tx_depth, args.inline());
    let mtu = mtu_of(mtu)?;
    let pd = ctx.alloc_pd()?;
    let depth = (tx_depth.max(1) * 2 + 1024) * n.max(1);
    let cq = ctx.create_cq(depth)?;
    let mr = pd.reg_mr(buf.max(16), Access::ALL)?;
    let mut qps = Vec::new();
    for _ in 0..n.max(1) {
        qps.push(
            pd.qp_builder(&cq)
                .mtu(mtu)
                .max_send_wr(tx_depth.max(1) + 1)
                .max_recv_wr(1024)
                .max_inline_data(inline)
                .timeout(12)
                .recovery(args.recovery)
                .build()?,
        );
    }
    Ok((pd, cq, mr, qps))
}

/// A plain perftest peer: what roce can run with it, checked before any
/// resource is made.
pub(crate) fn plain_peer(
    test: Test,
    args: &Options,
    ctx: &Context,
    hello: &Greeting,
) -> Result<()> {
    let v = &hello.version.text;
    // write_bw, read_bw and atomic_bw share perftest's sequence: the server
    // is passive until the client's sync (write_bw.c, read_bw.c,
    // atomic_bw.c); send_bw's server posts receives and the latency tests
    // ping-pong, which roce does not follow yet.
    if test.kind != Kind::Bw || test.verb == Verb::Send {
        fail!(
            Unsupported,
            "the peer is perftest {v}, not roce perf: with a plain perftest peer roce follows perftest's sequence for write_bw, read_bw and atomic_bw only (so far); run roce perf on both sides for {}",
            test.name()
        );
    }
    if args.verify {
        fail!(
            Unsupported,
            "--verify is roce's extension, and the peer is perftest {v}: run roce perf on both sides to verify"
        );
    }
    let port = ctx.local_addr().port();
    if port != ROCE_PORT {
        fail!(
            Unsupported,
            "this side's engine is on UDP {port}, and a perftest peer sends to {ROCE_PORT} only: free UDP {ROCE_PORT} here (another RoCE stack holds it)"
        );
    }
    Ok(())
}

/// perftest's steps 4 and 5: the key messages per QP, the QPs connected,
/// the keys once more, and the sync after RTR. Returns the local and the
/// remote endpoints and the connected QPs.
pub(crate) fn connect_qps(
    wire: &mut Wire,
    test: Test,
    ip: IpAddr,
    mr: &Mr,
    prepared: Vec<PreparedQp>,
    peer_udp: u16,
) -> Result<(Vec<Endpoint>, Vec<Endpoint>, Vec<Qp>)> {
    let gid = Gid::from_ip(ip);
    let local: Vec<Endpoint> = prepared.iter().map(|q| q.endpoint_with(mr)).collect();
    let keys = |e: &Endpoint| Keys {
        lid: 0,
        out_reads: OUT_READS,
        qpn: e.qpn,
        psn: e.psn,
        rkey: e.rkey,
        vaddr: e.addr,
        gid,
        srqn: 0,
    };
    let mut remote = Vec::new();
    for e in &local {
        let k = wire.keys("QP keys", &keys(e))?;
        // perftest's ctx_connect: the initiator depth is the peer's
        // announced out_reads, which this side's QPs (built before the
        // keys arrive) cannot lower.
        if matches!(test.verb, Verb::Read | Verb::Atomic) && k.out_reads < OUT_READS {
            fail!(
                Unsupported,
                "the peer accepts {} outstanding RDMA reads or atomics per QP, and roce's QPs issue up to {OUT_READS}: raise the peer's (perftest's -o) to {OUT_READS}",
                k.out_reads
            );
        }
        remote.push(Endpoint {
            ip: k.ip_for(ip)?,
            udp_port: peer_udp,
            qpn: k.qpn,
            psn: k.psn,
            mtu: e.mtu,
            addr: k.vaddr,
            // perftest does not say how long its buffer is.
            len: 0,
            rkey: k.rkey,
        });
    }
    let mut qps = Vec::new();
    for (p, r) in prepared.into_iter().zip(&remote) {
        qps.push(p.connect(r)?);
    }
    for e in &local {
        wire.keys("QP keys after connecting", &keys(e))?;
    }
    wire.keys("sync after RTR", &keys(&local[0]))?;
    Ok((local, remote, qps))
}

/// perftest's closing steps after a bandwidth run (a sync, the client's
/// report, the closing sync) or a latency run (the closing sync).
pub(crate) fn close(
    wire: &mut Wire,
    test: Test,
    local: &Endpoint,
    ip: IpAddr,
    rep: BwReport,
) -> Result<BwReport> {
    let keys = Keys {
        lid: 0,
        out_reads: OUT_READS,
        qpn: local.qpn,
        psn: local.psn,
        rkey: local.rkey,
        vaddr: local.addr,
        gid: Gid::from_ip(ip),
        srqn: 0,
    };
    let theirs = if test.kind == Kind::Bw {
        wire.keys("sync: the client is done", &keys)?;
        wire.bw_reports(&rep)?
    } else {
        rep
    };
    wire.keys("closing sync", &keys)?;
    Ok(theirs)
}

pub(crate) fn engine_config(
    args: &Options,
    ip: IpAddr,
    seed: u64,
    pcap: Option<PathBuf>,
) -> Result<EngineConfig> {
    let (cc, cnp_interval) = crate::cc::settings(args, ip)?;
    let mut rnic = roce_rnic::RnicConfig::default();
    if let Some(ns) = cnp_interval {
        rnic.cnp_interval_ns = ns;
    }
    if let Some(d) = crate::cc::cnp_dscp(args)? {
        rnic.cnp_dscp = d;
    }
    Ok(EngineConfig {
        rnic,
        faults: faults(args, seed)?,
        pcap,
        offload: !args.no_offload,
        profile: !args.no_profile,
        cc,
        ecn_red: crate::cc::red(args)?,
        poll: args.poll.unwrap_or_default().into(),
        ..Default::default()
    })
}
