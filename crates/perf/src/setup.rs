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
    /// (For UD each half has room for the GRH too.)
    pub(crate) half: usize,
    /// The shared receive queue all QPs take receives from (`--use_srq`).
    pub(crate) srq: Option<Srq>,
    /// The QPs are UD: each send names its destination.
    pub(crate) ud: bool,
    /// The address handles of the peer's QPs (UD), made as perftest's
    /// `ctx_connect` makes them, so a peer that cannot be reached is
    /// refused before the run.
    pub(crate) _ahs: Vec<Ah>,
}

impl Side {
    /// Where a received message's data starts in the buffer: UD puts the
    /// 40-byte GRH first.
    pub(crate) fn recv_data(&self) -> usize {
        self.half + if self.ud { GRH } else { 0 }
    }

    /// One receive spanning the whole upper half (it fits any size).
    pub(crate) fn recv_wr(&self, wr_id: u64) -> RecvWr {
        RecvWr {
            wr_id,
            sg_list: vec![self.mr.sge(self.half, self.half as u32)],
        }
    }

    /// The receive pool QP `qpn` draws from: its own (its index), or the
    /// SRQ (pool 0).
    pub(crate) fn pool_of(&self, qpn: u32) -> Option<usize> {
        if self.srq.is_some() {
            return Some(0);
        }
        self.qps.iter().position(|q| q.qpn() == qpn)
    }

    /// The number of receive pools: one per QP, or the one SRQ.
    pub(crate) fn pools(&self) -> usize {
        if self.srq.is_some() {
            1
        } else {
            self.qps.len()
        }
    }

    /// Posts receives to pool `i` (see [`Side::pool_of`]).
    pub(crate) fn post_recvs(&self, i: usize, wrs: &[RecvWr]) -> Result<()> {
        match &self.srq {
            Some(srq) => srq.post_srq_recv_batch(wrs)?,
            None => self.qps[i].post_recv_batch(wrs)?,
        }
        Ok(())
    }

    /// The destination of a UD send to `remote` (perftest's Q_Key), none
    /// for RC.
    pub(crate) fn ud_dest(&self, remote: &Endpoint) -> Option<UdDest> {
        self.ud.then(|| UdDest {
            addr: remote.socket_addr(),
            remote_qpn: remote.qpn,
            remote_qkey: QKEY,
        })
    }
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
    Ok((ctx, note))
}

/// The address the engine opens on: `ip` itself, or with perftest's `-x`
/// the address of that entry of the GID table of the port holding `ip`
/// (see [`roce_verbs::gid_table`]); an index the table does not have is
/// one clear error.
pub(crate) fn select_gid(args: &Options, ip: IpAddr) -> Result<IpAddr> {
    let Some(x) = args.gid_index else {
        return Ok(ip);
    };
    let Some(dev) = roce_verbs::netdev_of(ip) else {
        fail!(
            Usage,
            "-x/--gid-index {x}: no interface holds {ip}, so there is no GID table to choose from"
        );
    };
    let table = roce_verbs::gid_table(&dev);
    match table.iter().find(|e| e.index == x) {
        Some(e) => match e.ip() {
            // fe80::/10 needs a scope (the interface) to bind or to reach,
            // which an engine's address does not carry.
            IpAddr::V6(v) if v.segments()[0] & 0xffc0 == 0xfe80 => fail!(
                Usage,
                "GID index {x} is {v}, {dev}'s IPv6 link-local address, which an engine cannot open on yet (it has no scope id); choose an IPv4-mapped or global entry (`roce perf --list-gids`)"
            ),
            ip => Ok(ip),
        },
        None => fail!(
            Usage,
            "GID index {x} does not exist: the GID table of {dev} (which holds {ip}) has {} RoCEv2 GIDs{}; `roce perf --list-gids` shows them",
            table.len(),
            match table.len() {
                0 => String::new(),
                n => format!(
                    ", index 0-{} ({})",
                    n - 1,
                    table
                        .iter()
                        .map(|e| e.gid.to_string())
                        .collect::<Vec<_>>()
                        .join(", ")
                ),
            }
        ),
    }
}

/// Receives a SEND test keeps posted: perftest's `DEF_RX_SEND` per QP
/// (in all, with an SRQ).
pub(crate) const RX_DEPTH: u64 = 512;

/// What [`create`] makes: PD, CQ, MR, the SRQ (`--use_srq`), QPs in INIT.
pub(crate) type Created = (Pd, Cq, Mr, Option<Srq>, Vec<PreparedQp>);

/// Creates PD, CQ, one MR of `buf` bytes, the SRQ when `srq` (the side
/// receives SENDs from it) and `n` QPs in INIT (RC or UD).
pub(crate) fn create(
    ctx: &Context,
    args: &Options,
    buf: usize,
    n: u32,
    mtu: u32,
    srq: bool,
) -> Result<Created> {
    let (tx_depth, inline) = (args.tx_depth, args.inline());
    let mtu = mtu_of(mtu)?;
    let pd = ctx.alloc_pd()?;
    let depth = (tx_depth.max(1) * 2 + 1024) * n.max(1);
    let cq = ctx.create_cq(depth)?;
    let mr = pd.reg_mr(buf.max(16), Access::ALL)?;
    let srq = if srq {
        Some(pd.create_srq(2 * RX_DEPTH as u32, 1)?)
    } else {
        None
    };
    let mut qps = Vec::new();
    for _ in 0..n.max(1) {
        let mut b = pd
            .qp_builder(&cq)
            .mtu(mtu)
            .max_send_wr(tx_depth.max(1) + 1)
            .max_recv_wr(1024)
            .max_inline_data(inline)
            .timeout(args.qp_timeout)
            .recovery(args.recovery);
        if args.connection == Connection::Ud {
            b = b.qp_type(QpType::Ud).qkey(QKEY);
        }
        if let Some(s) = &srq {
            b = b.srq(s);
        }
        qps.push(b.build()?);
    }
    Ok((pd, cq, mr, srq, qps))
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
    if args.verify {
        fail!(
            Unsupported,
            "--verify is roce's extension, and the peer is perftest {v}: run roce perf on both sides to verify"
        );
    }
    if args.recovery != roce_verbs::Recovery::GoBackN {
        fail!(
            Unsupported,
            "the peer is perftest {v}, whose RNIC recovers from loss with go-back-N: run it without --recovery {} (or roce perf on both sides)",
            args.recovery.name()
        );
    }
    // perftest's send_bw server posts -n receives on every QP and stops at
    // -n SENDs on each; roce's -n counts per QP as perftest's does, so any
    // -q meets it, but a -D run has no count it could stop at.
    if test.verb == Verb::Send && test.kind == Kind::Bw && args.duration.is_some() {
        fail!(
            Unsupported,
            "the peer is perftest {v}: its send_bw server counts -n SENDs; run send_bw with -n against it, not -D"
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

/// The VA this side announces for its QPs: where the peer's WRITEs and
/// READs go. perftest's write_lat writes into the peer's receive area
/// (`set_up_connection`: the buffer after the send buffers) and polls its
/// own; roce keeps that area in the upper half.
pub(crate) fn vaddr_offset(test: Test, half: usize) -> u64 {
    if (test.verb, test.kind) == (Verb::Write, Kind::Lat) {
        half as u64
    } else {
        0
    }
}

/// perftest's steps 4 and 5: the key messages per QP, the QPs connected,
/// the keys once more, and the sync after RTR. Returns the local and the
/// remote endpoints and the connected QPs.
/// What [`connect_qps`] returns: the local and the remote endpoints, the
/// QPs ready to send, and (UD) the address handles of the peer's QPs.
pub(crate) type Connected = (Vec<Endpoint>, Vec<Endpoint>, Vec<Qp>, Vec<Ah>);

/// What sizes a side's resources once the greeting is done: the largest
/// message, the peer's cycle buffer, QPs, path MTU, whether this side's
/// receives come from an SRQ, and the UDP port of the peer's engine.
pub(crate) struct Shape {
    pub(crate) max: usize,
    pub(crate) cycle_buffer: u32,
    pub(crate) nqp: u32,
    pub(crate) mtu: u32,
    pub(crate) srq: bool,
    pub(crate) peer_udp: u16,
}

/// Creates a side's resources ([`create`]) and connects its QPs to the
/// peer's ([`connect_qps`]): the same steps for client and server. The
/// buffer is two halves of the largest message (plus the GRH over UD), at
/// least two of perftest's cycle buffers. Returns the side and the local
/// and remote endpoints.
pub(crate) fn open_side(
    wire: &mut Wire,
    args: &Options,
    test: Test,
    ctx: Context,
    ip: IpAddr,
    shape: Shape,
) -> Result<(Side, Vec<Endpoint>, Vec<Endpoint>)> {
    let ud = args.connection == Connection::Ud;
    let half = shape.max + if ud { GRH } else { 0 };
    let buf = (2 * half).max(2 * shape.cycle_buffer as usize);
    let (pd, cq, mr, srq, prepared) = create(&ctx, args, buf, shape.nqp, shape.mtu, shape.srq)?;
    let (local, remote, qps, ahs) = connect_qps(
        wire,
        test,
        ip,
        &pd,
        &mr,
        prepared,
        shape.peer_udp,
        ud,
        vaddr_offset(test, half),
    )?;
    let side = Side {
        ctx,
        _pd: pd,
        cq,
        mr,
        qps,
        half,
        srq,
        ud,
        _ahs: ahs,
    };
    Ok((side, local, remote))
}

#[allow(clippy::too_many_arguments)]
pub(crate) fn connect_qps(
    wire: &mut Wire,
    test: Test,
    ip: IpAddr,
    pd: &Pd,
    mr: &Mr,
    prepared: Vec<PreparedQp>,
    peer_udp: u16,
    ud: bool,
    vaddr_off: u64,
) -> Result<Connected> {
    let steps = test.steps();
    let local: Vec<Endpoint> = prepared
        .iter()
        .map(|q| {
            let mut e = q.endpoint_with(mr);
            e.addr += vaddr_off;
            e
        })
        .collect();
    let keys = |e: &Endpoint| keys_of(e, ip);
    if steps.keys_first {
        wire.keys("QP 0 keys first", &keys(&local[0]))?;
    }
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
    let mut ahs = Vec::new();
    for (p, r) in prepared.into_iter().zip(&remote) {
        if ud {
            // perftest's ctx_connect: a UD QP goes to RTS alone, and an
            // address handle names the peer's GID.
            ahs.push(pd.create_ah(r.socket_addr())?);
            qps.push(p.activate()?);
        } else {
            qps.push(p.connect(r)?);
        }
    }
    if steps.sync_before_second_keys {
        wire.keys("sync after RTR", &keys(&local[0]))?;
    }
    for e in &local {
        wire.keys("QP keys after connecting", &keys(e))?;
    }
    if !steps.sync_before_second_keys {
        wire.keys("sync after RTR", &keys(&local[0]))?;
    }
    Ok((local, remote, qps, ahs))
}

/// One sync: a key message of QP 0 each way (`ctx_hand_shake`).
pub(crate) fn sync(
    wire: &mut Wire,
    step: &'static str,
    local: &Endpoint,
    ip: IpAddr,
) -> Result<()> {
    wire.keys(step, &keys_of(local, ip))?;
    Ok(())
}

fn keys_of(local: &Endpoint, ip: IpAddr) -> Keys {
    Keys {
        lid: 0,
        out_reads: OUT_READS,
        qpn: local.qpn,
        psn: local.psn,
        rkey: local.rkey,
        vaddr: local.addr,
        gid: Gid::from_ip(ip),
        srqn: 0,
    }
}

/// perftest's closing steps (see [`crate::perftest::Steps`]): after a
/// WRITE, READ or atomic bandwidth run a sync, the client's report and
/// the closing sync; after the SEND tests and the READ and atomic latency
/// tests the closing sync; after write_lat nothing. Returns the peer's
/// report (`rep` itself where none is exchanged).
pub(crate) fn close(
    wire: &mut Wire,
    test: Test,
    local: &Endpoint,
    ip: IpAddr,
    rep: BwReport,
) -> Result<BwReport> {
    let steps = test.steps();
    let theirs = if steps.bw_report {
        sync(wire, "sync: the client is done", local, ip)?;
        wire.bw_reports(&rep)?
    } else {
        rep
    };
    if steps.close_sync {
        sync(wire, "closing sync", local, ip)?;
    }
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

#[cfg(test)]
mod tests {
    use super::*;

    /// `--use_srq` makes one SRQ that every QP takes its receives from,
    /// and receives posted through the side go to it; `-c UD` makes UD QPs
    /// whose sends name the peer with perftest's Q_Key.
    #[test]
    fn srq_and_ud_sides_are_what_perftest_makes() {
        let ctx =
            Device::open_with("127.0.0.1:0".parse().unwrap(), EngineConfig::default()).unwrap();
        let mut args = Options::new("send_bw");
        args.connection = Connection::Ud;
        args.use_srq = true;
        args.check().unwrap();
        let (pd, cq, mr, srq, prepared) = create(&ctx, &args, 8192, 3, 1024, true).unwrap();
        let peer = prepared[1].endpoint();
        let qps: Vec<Qp> = prepared
            .into_iter()
            .map(|p| p.activate().unwrap())
            .collect();
        assert!(qps.iter().all(|q| q.srq().is_some()), "every QP on the SRQ");
        let side = Side {
            ctx,
            _pd: pd,
            cq,
            mr,
            qps,
            half: 4096,
            srq,
            ud: true,
            _ahs: vec![],
        };
        assert_eq!(side.pools(), 1);
        assert_eq!(side.pool_of(side.qps[2].qpn()), Some(0));
        side.post_recvs(0, &[side.recv_wr(1), side.recv_wr(2)])
            .unwrap();
        assert_eq!(side.srq.as_ref().map(|s| s.len()), Some(2));
        assert_eq!(side.recv_data(), 4096 + GRH);
        let d = side.ud_dest(&peer).unwrap();
        assert_eq!((d.remote_qpn, d.remote_qkey), (peer.qpn, 0x1111_1111));
    }
}
