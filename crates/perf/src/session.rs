//! One side of a test: its verbs resources, the exchange with the peer,
//! and the measurement loops (perftest's `run_iter_bw` and `run_iter_lat_*`
//! in shape).

use crate::error::fail;
use crate::ext::Msg;
use crate::perftest::{BwReport, Gid, Keys};
use crate::results::{Latency, Report, Served, SideProfiles, SizeResult};
use crate::wire::{Greeting, Wire};
use crate::*;
use crate::{Error, Result};
use roce_verbs::*;
use std::net::{IpAddr, Ipv4Addr, SocketAddr, TcpListener};
use std::path::PathBuf;
use std::time::{Duration, Instant};

/// One side's verbs resources.
pub(crate) struct Side {
    ctx: Context,
    _pd: Pd,
    cq: Cq,
    mr: Mr,
    qps: Vec<Qp>,
    /// The buffer is two halves of the largest size: sources and READ/ping-pong
    /// targets in the lower, receives (sized for any message) in the upper.
    half: usize,
}

/// Outstanding RDMA reads and atomics announced in the key message: what
/// the QP builder's default initiator depth is, so a peer that mirrors it
/// (perftest's `ctx_connect` does) stays within what this side sends.
const OUT_READS: u16 = 4;

/// Opens the engine on `ip` (UDP 4791, or a free port when 4791 is taken
/// and the user did not ask for it).
/// Returns the context and, when it moved off the port, a note saying so.
fn open_ctx(ip: Ipv4Addr, args: &Options, cfg: EngineConfig) -> Result<(Context, Option<String>)> {
    let udp_port = args.udp_port;
    let port = udp_port.unwrap_or(ROCE_PORT);
    let addr = SocketAddr::new(IpAddr::V4(ip), port);
    let mut note = None;
    let ctx = match Device::open_with(addr, cfg.clone()) {
        Ok(c) => c,
        // Two stacks on one host cannot both own 4791: take a free port
        // unless the user asked for this one.
        Err(roce_verbs::Error::AddrInUse(_)) if udp_port.is_none() => {
            let c = Device::open_with(SocketAddr::new(IpAddr::V4(ip), 0), cfg)?;
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
            "GID index {x} does not exist: this device's GID table holds one RoCEv2 GID, index 0 = {} (its IPv4 address, mapped)",
            std::net::Ipv6Addr::from(Gid::from_ip(IpAddr::V4(ip)).0)
        );
    }
    Ok((ctx, note))
}

/// Creates PD, CQ, one MR of `buf` bytes and `n` QPs in INIT.
fn create(
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
                .build()?,
        );
    }
    Ok((pd, cq, mr, qps))
}

/// A plain perftest peer: what roce can run with it, checked before any
/// resource is made.
fn plain_peer(test: Test, args: &Options, ctx: &Context, hello: &Greeting) -> Result<()> {
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
fn connect_qps(
    wire: &mut Wire,
    test: Test,
    ip: Ipv4Addr,
    mr: &Mr,
    prepared: Vec<PreparedQp>,
    peer_udp: u16,
) -> Result<(Vec<Endpoint>, Vec<Endpoint>, Vec<Qp>)> {
    let gid = Gid::from_ip(IpAddr::V4(ip));
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
            ip: k.gid.ipv4()?,
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
fn close(
    wire: &mut Wire,
    test: Test,
    local: &Endpoint,
    ip: Ipv4Addr,
    rep: BwReport,
) -> Result<BwReport> {
    let keys = Keys {
        lid: 0,
        out_reads: OUT_READS,
        qpn: local.qpn,
        psn: local.psn,
        rkey: local.rkey,
        vaddr: local.addr,
        gid: Gid::from_ip(IpAddr::V4(ip)),
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
    seed: u64,
    pcap: Option<PathBuf>,
) -> Result<EngineConfig> {
    Ok(EngineConfig {
        faults: faults(args, seed)?,
        pcap,
        offload: !args.no_offload,
        profile: !args.no_profile,
        ..Default::default()
    })
}

pub(crate) fn client(
    args: &Options,
    test: Test,
    server: &str,
    bind: Option<Ipv4Addr>,
) -> Result<Report> {
    let server = if server.contains(':') {
        server.to_string()
    } else {
        format!("{server}:{}", args.port)
    };
    let mut wire = Wire::connect(&server, Duration::from_secs(5))?;
    let ip = match bind {
        Some(ip) => ip,
        None => match wire.local_addr().ip() {
            IpAddr::V4(v) => v,
            IpAddr::V6(v) => v.to_ipv4_mapped().ok_or_else(|| {
                Error::Usage(format!(
                    "the connection to {server} is IPv6; give --bind IPV4"
                ))
            })?,
        },
    };
    let sizes = sizes(args, test);
    let max = sizes.iter().copied().max().unwrap_or(8);
    let nqp = if test.kind == Kind::Lat { 1 } else { args.qps };
    let cfg = engine_config(args, args.seed, args.pcap.clone())?;
    let (ctx, note) = open_ctx(ip, args, cfg)?;
    let my_mtu = args.mtu.unwrap_or_else(|| ctx.active_mtu().bytes());
    let hello = wire.greet(my_mtu)?;
    let roce = hello.version.roce;
    let (mtu, peer_udp) = if roce {
        wire.send(&Msg::Hello {
            test,
            sizes: sizes.clone(),
            mtu: my_mtu,
            tx_depth: args.tx_depth,
            verify: args.verify,
            qps: nqp,
            udp_port: ctx.local_addr().port(),
        })?;
        match wire.recv::<Msg>()? {
            Msg::Welcome { udp_port } => (my_mtu, udp_port),
            Msg::Refuse { why } => fail!(Peer, "the server refused: {why}"),
            m => fail!(Peer, "unexpected reply from the server: {m:?}"),
        }
    } else {
        plain_peer(test, args, &ctx, &hello)?;
        // check_mtu: each side takes the smaller.
        (my_mtu.min(hello.mtu), ROCE_PORT)
    };
    let buf = (2 * max).max(2 * hello.cycle_buffer as usize);
    let (pd, cq, mr, prepared) = create(&ctx, args, buf, nqp, mtu)?;
    let (local, remote, qps) = connect_qps(&mut wire, test, ip, &mr, prepared, peer_udp)?;
    let side = Side {
        ctx,
        _pd: pd,
        cq,
        mr,
        qps,
        half: max,
    };
    let mut results: Vec<SizeResult> = Vec::new();
    let mut details = Vec::new();
    let mut server_counters = Stats::default();
    for &size in &sizes {
        let iters = args
            .iters
            .unwrap_or(if test.kind == Kind::Bw { 5000 } else { 1000 })
            .max(1);
        side.mr.write(0, &pattern(CLIENT_SEED, 2 * size))?;
        if roce {
            wire.send(&Msg::Start { size, iters })?;
            match wire.recv::<Msg>()? {
                Msg::Ready => {}
                Msg::Refuse { why } => fail!(Peer, "the server refused: {why}"),
                m => fail!(Peer, "unexpected message from the server: {m:?}"),
            }
        }
        let before = side.ctx.profile();
        let mut r = match test.kind {
            Kind::Bw => client_bw(args, test, &side, &remote, size, iters)?,
            Kind::Lat => client_lat(
                args,
                test,
                &side,
                &remote[0],
                size,
                iters,
                results.is_empty(),
            )?,
        };
        let mine = side.ctx.profile().since(&before);
        if !roce {
            // A plain perftest server says nothing per size.
            if mine.enabled {
                r.profile = Some(SideProfiles {
                    client: mine,
                    server: None,
                });
            }
            results.push(r);
            continue;
        }
        let count = r.iterations;
        wire.send(&Msg::Done { size, count })?;
        let (sv, detail, counters, theirs) = match wire.recv::<Msg>()? {
            Msg::Check {
                verified,
                detail,
                counters,
                profile,
            } => (verified, detail, counters, profile),
            m => fail!(Peer, "unexpected message from the server: {m:?}"),
        };
        server_counters = *counters;
        if mine.enabled {
            r.profile = Some(SideProfiles {
                client: mine,
                server: theirs.map(|b| *b),
            });
        }
        if args.verify {
            let mine = client_verify(test, &side, size)?;
            let ok = mine.is_none() && sv != Some(false);
            r.verified = Some(ok);
            if let Some(m) = mine {
                details.push(format!("{size} B: {m}"));
            }
            if sv == Some(false) {
                details.push(format!("{size} B: server: {detail}"));
            }
        }
        results.push(r);
    }
    if roce {
        wire.send(&Msg::Finish)?;
    }
    let last = results.last();
    let rep = BwReport {
        size: last.map_or(0, |r| r.size as u64),
        iters: last.map_or(0, |r| r.iterations),
        bw_peak: last.and_then(|r| r.bw_peak_mib).unwrap_or(0.0),
        bw_avg: last.and_then(|r| r.bw_avg_mib).unwrap_or(0.0),
        msg_rate: last.map_or(0.0, |r| r.msg_rate_mpps),
    };
    close(&mut wire, test, &local[0], ip, rep)?;
    side.ctx.flush_pcap()?;
    Ok(Report {
        test,
        peer_version: hello.version.text,
        notes: note.into_iter().collect(),
        results,
        local,
        remote,
        counters: side.ctx.stats(),
        server_counters,
        details,
    })
}

/// What the client checks itself after a size.
pub(crate) fn client_verify(test: Test, side: &Side, size: usize) -> Result<Option<String>> {
    let server = pattern(SERVER_SEED, 2 * size);
    Ok(match (test.verb, test.kind) {
        (Verb::Read, _) => {
            let got = side.mr.read(size, size)?;
            (got != server[..size]).then(|| "READ data differs from the server's".into())
        }
        (Verb::Write, Kind::Lat) if size > 1 => {
            let got = side.mr.read(size, size - 1)?;
            (got != server[..size - 1]).then(|| "ping-pong data differs from the server's".into())
        }
        (Verb::Send, Kind::Lat) if size > 1 => {
            let got = side.mr.read(side.half, size - 1)?;
            (got != server[..size - 1]).then(|| "ping-pong data differs from the server's".into())
        }
        _ => None,
    })
}

/// Drives the engine until `done` holds; fails when nothing at all changes
/// for `STALL`. Sending waits until `done` was checked, so the answer the
/// caller posts next leaves together with the RNIC's ACK.
pub(crate) fn spin_until(ctx: &Context, mut done: impl FnMut() -> Result<bool>) -> Result<()> {
    let mut stall = Stall::default();
    loop {
        let mut work = ctx.receive()?;
        if done()? {
            return Ok(());
        }
        work |= ctx.doorbell()?;
        if stall.idle_too_long(work) {
            let why = ctx
                .last_send_error()
                .map_or(String::new(), |e| format!(" (last send error: {e})"));
            fail!(Run, "the peer stopped answering for {STALL:?}{why}");
        }
    }
}

/// Notices a peer that stopped for [`STALL`] while a loop spins. The clock
/// is read once when an idle stretch starts and then every so many idle
/// rounds, not every round: a latency test spins between every two
/// packets, and a clock read is a visible share of a round.
#[derive(Default)]
pub struct Stall {
    idle: u32,
    since: Option<Instant>,
}

impl Stall {
    pub fn idle_too_long(&mut self, work: bool) -> bool {
        if work {
            self.idle = 0;
            return false;
        }
        self.idle += 1;
        if self.idle == 1 {
            self.since = Some(Instant::now());
            return false;
        }
        self.idle.is_multiple_of(1024) && self.since.is_some_and(|t| t.elapsed() > STALL)
    }
}

pub(crate) fn wc_ok(wc: &Wc, ctx: &Context) -> Result<()> {
    if wc.status == WcStatus::Success {
        return Ok(());
    }
    let why = ctx
        .last_send_error()
        .map_or(String::new(), |e| format!(" (last send error: {e})"));
    fail!(
        Run,
        "work request {:#x} completed with {}{why}",
        wc.wr_id,
        wc.status.name()
    )
}

pub(crate) fn wr_for(
    test: Test,
    side: &Side,
    remote: &Endpoint,
    size: usize,
    wr_id: u64,
    inline: bool,
) -> SendWr {
    let op = match test.verb {
        Verb::Send => WrOpcode::Send,
        Verb::Write => WrOpcode::RdmaWrite {
            remote_addr: remote.addr,
            rkey: remote.rkey,
        },
        Verb::Read => WrOpcode::RdmaRead {
            remote_addr: remote.addr,
            rkey: remote.rkey,
        },
        Verb::Atomic => WrOpcode::AtomicFetchAndAdd {
            remote_addr: remote.addr,
            rkey: remote.rkey,
            add: 1,
        },
    };
    // READ lands in the upper half, so the source pattern stays intact.
    let local_off = if test.verb == Verb::Read { size } else { 0 };
    let wr = SendWr::new(wr_id, op, vec![side.mr.sge(local_off, size as u32)]);
    if inline && matches!(test.verb, Verb::Send | Verb::Write) {
        wr.inline()
    } else {
        wr
    }
}

pub(crate) fn client_bw(
    args: &Options,
    test: Test,
    side: &Side,
    remote: &[Endpoint],
    size: usize,
    iters: u64,
) -> Result<SizeResult> {
    let nq = side.qps.len();
    let depth = args.tx_depth;
    let inline = size <= args.inline() as usize;
    let mut outstanding = vec![0u32; nq];
    let mut since_signal = vec![0u32; nq];
    let mut posted = 0u64;
    let mut completed = 0u64;
    let start = Instant::now();
    let deadline = args
        .duration
        .map(|d| start + Duration::from_secs_f64(d.max(0.0)));
    let mut marks: Vec<(Instant, u64)> = vec![(start, 0)];
    let mut wrs = Vec::with_capacity(64);
    let mut stopped = false;
    let mut last_progress = Instant::now();
    loop {
        // One clock read a round serves the deadline, the marks and the
        // stall check.
        let now = Instant::now();
        if !stopped {
            stopped = match deadline {
                Some(d) => now >= d,
                None => posted >= iters,
            };
            if stopped {
                // Cover unsignaled tails with one signaled request each.
                for q in 0..nq {
                    if since_signal[q] > 0 {
                        let n = since_signal[q] + 1;
                        since_signal[q] = 0;
                        outstanding[q] += 1;
                        posted += 1;
                        let wr = wr_for(
                            test,
                            side,
                            &remote[q],
                            size,
                            ((q as u64) << 32) | u64::from(n),
                            inline,
                        );
                        side.qps[q].post_send(&wr)?;
                    }
                }
            }
        }
        if !stopped {
            for q in 0..nq {
                wrs.clear();
                while outstanding[q] < depth && wrs.len() < 64 {
                    if deadline.is_none() && posted >= iters {
                        break;
                    }
                    posted += 1;
                    outstanding[q] += 1;
                    since_signal[q] += 1;
                    let last = deadline.is_none() && posted == iters;
                    let signaled =
                        since_signal[q] >= args.cq_mod || last || outstanding[q] == depth;
                    let id = ((q as u64) << 32) | u64::from(since_signal[q]);
                    let wr = wr_for(test, side, &remote[q], size, id, inline);
                    let wr = if signaled {
                        since_signal[q] = 0;
                        wr
                    } else {
                        wr.unsignaled()
                    };
                    wrs.push(wr);
                }
                if !wrs.is_empty() {
                    side.qps[q].post_send_batch(&wrs)?;
                }
            }
        }
        let wcs = side.cq.poll(64)?;
        if !wcs.is_empty() {
            last_progress = now;
            for wc in &wcs {
                wc_ok(wc, &side.ctx)?;
                let q = (wc.wr_id >> 32) as usize;
                let n = (wc.wr_id & 0xffff_ffff) as u32;
                if let Some(o) = outstanding.get_mut(q) {
                    *o = o.saturating_sub(n);
                }
                completed += u64::from(n);
            }
            marks.push((now, completed));
        } else if now - last_progress > STALL {
            fail!(
                Run,
                "no completion for {STALL:?}: the peer stopped answering"
            );
        }
        if stopped && outstanding.iter().all(|&o| o == 0) {
            break;
        }
    }
    let secs = start.elapsed().as_secs_f64().max(1e-9);
    let bytes = completed as f64 * size as f64;
    // Peak: the best rate over windows of a tenth of the run.
    let window = (completed / 10).max(1);
    let mut peak = 0.0f64;
    let mut j = 0;
    for i in 0..marks.len() {
        while j < i && marks[i].1 - marks[j + 1].1 >= window {
            j += 1;
        }
        let (dn, dt) = (
            marks[i].1 - marks[j].1,
            (marks[i].0 - marks[j].0).as_secs_f64(),
        );
        if dn >= window && dt > 0.0 {
            peak = peak.max(dn as f64 * size as f64 / dt);
        }
    }
    let avg_mib = bytes / secs / (1 << 20) as f64;
    Ok(SizeResult {
        size,
        iterations: completed,
        seconds: secs,
        bw_gbps: Some(bytes * 8.0 / secs / 1e9),
        bw_peak_mib: Some((peak / (1 << 20) as f64).max(avg_mib)),
        bw_avg_mib: Some(avg_mib),
        msg_rate_mpps: completed as f64 / secs / 1e6,
        latency_us: None,
        verified: None,
        baseline: None,
        profile: None,
        analysis: None,
    })
}

pub(crate) fn flag(i: u64) -> u8 {
    (i % 255) as u8 + 1
}

#[allow(clippy::too_many_arguments)]
pub(crate) fn client_lat(
    args: &Options,
    test: Test,
    side: &Side,
    remote: &Endpoint,
    size: usize,
    iters: u64,
    first_size: bool,
) -> Result<SizeResult> {
    let qp = &side.qps[0];
    let inline = size <= args.inline() as usize;
    let mut samples = Vec::with_capacity(iters as usize);
    let ctx = &side.ctx;
    let start = Instant::now();
    match test.verb {
        Verb::Write => {
            // Ping-pong: WRITE into the peer's upper half, whose last byte
            // the peer polls; it answers the same way.
            let target = Endpoint {
                addr: remote.addr + size as u64,
                ..*remote
            };
            // One work request, as perftest posts: only its id changes.
            let mut wr = wr_for(test, side, &target, size, 0, inline);
            for i in 0..iters {
                let f = flag(i);
                side.mr.write(size - 1, &[f])?;
                let t0 = Instant::now();
                wr.wr_id = i;
                qp.post_send(&wr)?;
                spin_until(ctx, || {
                    for wc in side.cq.poll_only(16) {
                        wc_ok(&wc, ctx)?;
                    }
                    Ok(side.mr.byte(2 * size - 1)? == f)
                })?;
                samples.push(t0.elapsed().as_nanos() as f64 / 2.0);
            }
            for wc in side.cq.poll_only(usize::MAX) {
                wc_ok(&wc, ctx)?;
            }
        }
        Verb::Send => {
            let recv = |id| RecvWr {
                wr_id: id,
                sg_list: vec![side.mr.sge(side.half, side.half as u32)],
            };
            // One receive stays posted between sizes.
            if first_size {
                qp.post_recv(&recv(u64::MAX))?;
            }
            // One work request, as perftest posts: only its id changes.
            let mut wr = wr_for(test, side, remote, size, 0, inline);
            for i in 0..iters {
                let t0 = Instant::now();
                wr.wr_id = i;
                qp.post_send(&wr)?;
                let mut got = false;
                spin_until(ctx, || {
                    for wc in side.cq.poll_only(16) {
                        wc_ok(&wc, ctx)?;
                        got |= wc.opcode == WcOpcode::Recv;
                    }
                    Ok(got)
                })?;
                samples.push(t0.elapsed().as_nanos() as f64 / 2.0);
                qp.post_recv(&recv(u64::MAX))?;
            }
        }
        Verb::Read | Verb::Atomic => {
            // One work request, as perftest posts: only its id changes.
            let mut wr = wr_for(test, side, remote, size, 0, inline);
            for i in 0..iters {
                let t0 = Instant::now();
                wr.wr_id = i;
                qp.post_send(&wr)?;
                let mut done = false;
                spin_until(ctx, || {
                    for wc in side.cq.poll_only(16) {
                        wc_ok(&wc, ctx)?;
                        done = true;
                    }
                    Ok(done)
                })?;
                samples.push(t0.elapsed().as_nanos() as f64);
                if test.verb == Verb::Atomic && args.verify {
                    // Only this client adds, so the old value counts the iterations.
                    let old = side.mr.read_u64(0)?;
                    let want =
                        u64::from_le_bytes(pattern(SERVER_SEED, 8).try_into().unwrap_or([0; 8]))
                            .wrapping_add(i);
                    if old != want {
                        fail!(
                            Run,
                            "FETCH_AND_ADD {i} returned {old:#x}, expected {want:#x}"
                        );
                    }
                }
            }
        }
    }
    let secs = start.elapsed().as_secs_f64().max(1e-9);
    Ok(SizeResult {
        size,
        iterations: iters,
        seconds: secs,
        bw_gbps: None,
        bw_peak_mib: None,
        bw_avg_mib: None,
        msg_rate_mpps: iters as f64 / secs / 1e6,
        latency_us: Latency::from_ns(samples),
        verified: None,
        baseline: None,
        profile: None,
        analysis: None,
    })
}

/// Serves one client; returns a one-line summary.
pub(crate) fn server(args: &Options, test: Test, listener: &TcpListener) -> Result<Served> {
    let mut wire = Wire::accept(listener)?;
    let ip = match args.bind {
        Some(ip) => ip,
        None => match wire.local_addr().ip() {
            IpAddr::V4(v) => v,
            IpAddr::V6(v) => v.to_ipv4_mapped().ok_or_else(|| {
                Error::Usage("the client connected over IPv6; give --bind IPV4".into())
            })?,
        },
    };
    let cfg = engine_config(args, args.seed, args.pcap.clone())?;
    let (ctx, note) = open_ctx(ip, args, cfg)?;
    let my_mtu = args.mtu.unwrap_or_else(|| ctx.active_mtu().bytes());
    let hello = wire.greet(my_mtu)?;
    let roce = hello.version.roce;
    let (sizes, nqp, cmtu, verify, peer_udp) = if roce {
        let (ctest, sizes, cmtu, verify, nqp, udp) = match wire.recv::<Msg>()? {
            Msg::Hello {
                test,
                sizes,
                mtu,
                verify,
                qps,
                udp_port,
                ..
            } => (test, sizes, mtu, verify, qps, udp_port),
            m => fail!(Peer, "unexpected first message from the client: {m:?}"),
        };
        let refuse = |wire: &mut Wire, why: String| -> Result<Served> {
            let _ = wire.send(&Msg::Refuse { why: why.clone() });
            fail!(Peer, "refused the client: {why}")
        };
        if ctest != test {
            return refuse(
                &mut wire,
                format!(
                    "this server runs {}, the client asked for {}",
                    test.name(),
                    ctest.name()
                ),
            );
        }
        if let Some(mine) = args.mtu.filter(|&m| m != cmtu) {
            return refuse(
                &mut wire,
                roce_verbs::Error::MtuMismatch {
                    local: mine,
                    remote: cmtu,
                }
                .to_string(),
            );
        }
        if Mtu::from_bytes(cmtu).is_none() {
            return refuse(
                &mut wire,
                format!("the client's MTU {cmtu} is not a path MTU"),
            );
        }
        let max = sizes.iter().copied().max().unwrap_or(8);
        if max > (64 << 20) || nqp == 0 || nqp > 1024 {
            return refuse(
                &mut wire,
                format!("{nqp} QPs of {max} B are more than this server serves"),
            );
        }
        wire.send(&Msg::Welcome {
            udp_port: ctx.local_addr().port(),
        })?;
        (sizes, nqp, cmtu, verify, udp)
    } else {
        plain_peer(test, args, &ctx, &hello)?;
        (
            sizes(args, test),
            args.qps,
            my_mtu.min(hello.mtu),
            false,
            ROCE_PORT,
        )
    };
    let max = sizes.iter().copied().max().unwrap_or(8);
    let buf = (2 * max).max(2 * hello.cycle_buffer as usize);
    let (pd, cq, mr, prepared) = create(&ctx, args, buf, nqp, cmtu)?;
    let (local, remote, qps) = connect_qps(&mut wire, test, ip, &mr, prepared, peer_udp)?;
    let side = Side {
        ctx,
        _pd: pd,
        cq,
        mr,
        qps,
        half: max,
    };
    if !roce {
        // perftest's write_bw server: passive until the client's sync.
        let mut spins = 0u32;
        loop {
            side.ctx.progress()?;
            spins = spins.wrapping_add(1);
            if spins.is_multiple_of(512) && wire.readable() {
                break;
            }
        }
        let none = BwReport {
            size: 0,
            iters: 0,
            bw_peak: 0.0,
            bw_avg: 0.0,
            msg_rate: 0.0,
        };
        let rep = close(&mut wire, test, &local[0], ip, none)?;
        side.ctx.flush_pcap()?;
        let s = side.ctx.stats();
        return Ok(Served {
            notes: note.into_iter().collect(),
            summary: format!(
                "roce perf {}: served perftest {} at {} ({} packets in, {} out); its report: {} B x {} at {:.2} MiB/s average, {:.2} peak, {:.6} Mpps",
                test.name(),
                hello.version.text,
                wire.peer_addr(),
                s.rx_packets,
                s.tx_packets,
                rep.size,
                rep.iters,
                rep.bw_avg,
                rep.bw_peak,
                rep.msg_rate
            ),
        });
    }
    let mut recvs_posted = vec![0u64; side.qps.len()];
    let mut recvs_used = vec![0u64; side.qps.len()];
    let mut verified_all = true;
    loop {
        let (size, iters) = match wire.recv::<Msg>()? {
            Msg::Start { size, iters } => (size, iters),
            Msg::Finish => break,
            m => fail!(Peer, "unexpected message from the client: {m:?}"),
        };
        if size > max {
            let why = format!("size {size} exceeds the announced {max}");
            let _ = wire.send(&Msg::Refuse { why: why.clone() });
            fail!(Peer, "refused the client: {why}");
        }
        side.mr.write(0, &pattern(SERVER_SEED, 2 * size))?;
        let recv = |id| RecvWr {
            wr_id: id,
            sg_list: vec![side.mr.sge(side.half, side.half as u32)],
        };
        if test.verb == Verb::Send {
            // Top every QP up to its receive budget (receives left from a
            // smaller size fit any size: they span the whole upper half).
            let want = if test.kind == Kind::Bw { 512 } else { 1 };
            for (i, q) in side.qps.iter().enumerate() {
                let have = recvs_posted[i] - recvs_used[i];
                if have < want {
                    q.post_recv_batch(&(0..want - have).map(recv).collect::<Vec<_>>())?;
                    recvs_posted[i] += want - have;
                }
            }
        }
        let before = side.ctx.profile();
        wire.send(&Msg::Ready)?;
        let mut received = 0u64;
        // Like perftest, each side inlines what fits its own inline size.
        let inline = size <= args.inline() as usize;
        match (test.verb, test.kind) {
            (Verb::Write, Kind::Lat) => {
                let qp = &side.qps[0];
                let target = Endpoint {
                    addr: remote[0].addr + size as u64,
                    ..remote[0]
                };
                // One work request, as perftest posts: only its id changes.
                let mut wr = wr_for(test, &side, &target, size, 0, inline);
                for i in 0..iters {
                    let f = flag(i);
                    spin_until(&side.ctx, || Ok(side.mr.byte(2 * size - 1)? == f))?;
                    side.mr.write(size - 1, &[f])?;
                    wr.wr_id = i;
                    qp.post_send(&wr)?;
                    for wc in side.cq.poll_only(16) {
                        wc_ok(&wc, &side.ctx)?;
                    }
                }
                received = iters;
            }
            (Verb::Send, Kind::Lat) => {
                let qp = &side.qps[0];
                // One work request, as perftest posts: only its id changes.
                let mut wr = wr_for(test, &side, &remote[0], size, 0, inline);
                for i in 0..iters {
                    let mut got = false;
                    spin_until(&side.ctx, || {
                        for wc in side.cq.poll_only(16) {
                            wc_ok(&wc, &side.ctx)?;
                            got |= wc.opcode == WcOpcode::Recv;
                        }
                        Ok(got)
                    })?;
                    recvs_used[0] += 1;
                    qp.post_recv(&recv(0))?;
                    recvs_posted[0] += 1;
                    wr.wr_id = i;
                    qp.post_send(&wr)?;
                }
                received = iters;
            }
            _ => {
                // Passive (WRITE/READ/ATOMIC) or receiving SENDs: drive the
                // engine until the client says it is done.
                let mut spins = 0u32;
                let mut stall = Stall::default();
                loop {
                    let work = side.ctx.progress()?;
                    if test.verb == Verb::Send {
                        let wcs = side.cq.poll_only(64);
                        for wc in &wcs {
                            wc_ok(wc, &side.ctx)?;
                            if wc.opcode == WcOpcode::Recv {
                                received += 1;
                                if let Some(i) = side.qps.iter().position(|q| q.qpn() == wc.qp_num)
                                {
                                    side.qps[i].post_recv(&recv(0))?;
                                }
                            }
                        }
                    }
                    spins = spins.wrapping_add(1);
                    if spins.is_multiple_of(512) && wire.readable() {
                        break;
                    }
                    if stall.idle_too_long(work) {
                        fail!(Run, "the client stopped for {STALL:?}");
                    }
                }
            }
        }
        let mine = side.ctx.profile().since(&before);
        let count = match wire.recv::<Msg>()? {
            Msg::Done { count, .. } => count,
            m => fail!(Peer, "unexpected message from the client: {m:?}"),
        };
        // SEND completions may trail the client's last completion by a hair.
        if test.verb == Verb::Send && test.kind == Kind::Bw {
            spin_until(&side.ctx, || {
                for wc in side.cq.poll_only(64) {
                    wc_ok(&wc, &side.ctx)?;
                    if wc.opcode == WcOpcode::Recv {
                        received += 1;
                        if let Some(i) = side.qps.iter().position(|q| q.qpn() == wc.qp_num) {
                            recvs_used[i] += 1;
                        }
                    }
                }
                Ok(received >= count)
            })?;
        }
        let (verified, detail) = if verify {
            let r = server_verify(test, &side, size, count, received)?;
            verified_all &= r.is_none();
            (Some(r.is_none()), r.unwrap_or_default())
        } else {
            (None, String::new())
        };
        wire.send(&Msg::Check {
            verified,
            detail,
            counters: Box::new(side.ctx.stats()),
            profile: mine.enabled.then(|| Box::new(mine)),
        })?;
    }
    let zeros = BwReport {
        size: 0,
        iters: 0,
        bw_peak: 0.0,
        bw_avg: 0.0,
        msg_rate: 0.0,
    };
    close(&mut wire, test, &local[0], ip, zeros)?;
    side.ctx.flush_pcap()?;
    let s = side.ctx.stats();
    Ok(Served {
        notes: note.into_iter().collect(),
        summary: format!(
            "roce perf {}: served {} ({} packets in, {} out{})",
            test.name(),
            wire.peer_addr(),
            s.rx_packets,
            s.tx_packets,
            if verify {
                if verified_all {
                    ", data verified"
                } else {
                    ", DATA MISMATCH"
                }
            } else {
                ""
            }
        ),
    })
}

/// What the server checks after a size (None: all good).
pub(crate) fn server_verify(
    test: Test,
    side: &Side,
    size: usize,
    count: u64,
    received: u64,
) -> Result<Option<String>> {
    let client = pattern(CLIENT_SEED, 2 * size);
    Ok(match (test.verb, test.kind) {
        (Verb::Write, Kind::Bw) => {
            let got = side.mr.read(0, size)?;
            (got != client[..size]).then(|| "WRITE data differs from the client's".into())
        }
        (Verb::Send, Kind::Bw) => {
            if received != count {
                Some(format!("{received} SENDs arrived of {count}"))
            } else {
                let got = side.mr.read(side.half, size)?;
                (got != client[..size]).then(|| "SEND data differs from the client's".into())
            }
        }
        (Verb::Send, Kind::Lat) if size > 1 => {
            let got = side.mr.read(side.half, size - 1)?;
            (got != client[..size - 1]).then(|| "ping-pong data differs from the client's".into())
        }
        (Verb::Write, Kind::Lat) if size > 1 => {
            let got = side.mr.read(size, size - 1)?;
            (got != client[..size - 1]).then(|| "ping-pong data differs from the client's".into())
        }
        (Verb::Atomic, _) => {
            let start = u64::from_le_bytes(pattern(SERVER_SEED, 8).try_into().unwrap_or([0; 8]));
            let got = side.mr.read_u64(0)?;
            let want = start.wrapping_add(count);
            (got != want).then(|| {
                format!("the counter is {got:#x} after {count} FETCH_AND_ADDs, expected {want:#x}")
            })
        }
        _ => None,
    })
}
