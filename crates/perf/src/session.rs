//! One side of a test from start to end: the client drives the sizes, the
//! server answers (and, with a plain perftest peer, waits).

use crate::Result;
use crate::error::fail;
use crate::ext::Msg;
use crate::loops::*;
use crate::perftest::BwReport;
use crate::results::{Report, Served, SideProfiles, SizeResult};
use crate::setup::*;
use crate::wire::Wire;
use crate::*;
use roce_verbs::*;
use std::net::{IpAddr, SocketAddr, TcpListener};
use std::time::{Duration, Instant};

/// How long a client waits for the server's part of the greeting.
const GREETING_WAIT: Duration = Duration::from_secs(30);

/// How long a UD receiver waits for SENDs still on their way after the
/// sender is done (what does not come by then was lost).
const UD_GRACE: Duration = Duration::from_millis(500);

pub(crate) fn client(
    args: &Options,
    test: Test,
    server: &str,
    bind: Option<IpAddr>,
) -> Result<Report> {
    let server = server_addr(server, args.port);
    let mut wire = Wire::connect(&server, Duration::from_secs(5))?;
    // A server answers the greeting at once if it serves this connection at
    // all (one started with fewer --threads leaves the rest in its backlog).
    wire.set_read_timeout(Some(GREETING_WAIT))?;
    let ip = select_gid(
        args,
        bind.unwrap_or_else(|| engine_ip(wire.local_addr().ip())),
    )?;
    let nqp = if test.kind == Kind::Lat { 1 } else { args.qps };
    let cfg = engine_config(args, ip, args.seed, args.pcap.clone())?;
    let (ctx, note) = open_ctx(ip, args, cfg)?;
    let mut notes: Vec<String> = note.into_iter().collect();
    let my_mtu = args.mtu.unwrap_or_else(|| ctx.active_mtu().bytes());
    let hello = wire.greet(my_mtu)?;
    let roce = hello.version.roce;
    // check_mtu: with a perftest peer each side takes the smaller; a roce
    // server takes the client's.
    let mtu = if roce { my_mtu } else { my_mtu.min(hello.mtu) };
    let sizes = run_sizes(args, test, mtu, &mut notes)?;
    let max = sizes.iter().copied().max().unwrap_or(8);
    let peer_udp = if roce {
        wire.send(&Msg::Hello {
            test,
            sizes: sizes.clone(),
            mtu: my_mtu,
            tx_depth: args.tx_depth,
            verify: args.verify,
            qps: nqp,
            udp_port: ctx.local_addr().port(),
            connection: args.connection,
            threads: args.threads,
            use_srq: args.use_srq,
            recovery: args.recovery,
        })?;
        match wire.recv::<Msg>()? {
            Msg::Welcome { udp_port } => udp_port,
            Msg::Refuse { why } => fail!(Peer, "the server refused: {why}"),
            m => fail!(Peer, "unexpected reply from the server: {m:?}"),
        }
    } else {
        plain_peer(test, args, &ctx, &hello)?;
        ROCE_PORT
    };
    // From here on the server may take as long as the run does.
    wire.set_read_timeout(None)?;
    // perftest's latency client takes its receives from the SRQ too.
    let shape = Shape {
        max,
        cycle_buffer: hello.cycle_buffer,
        nqp,
        mtu,
        srq: args.use_srq && test.kind == Kind::Lat,
        peer_udp,
    };
    let (side, local, remote) = open_side(&mut wire, args, test, ctx, ip, shape)?;
    let steps = test.steps();
    let mut results: Vec<SizeResult> = Vec::new();
    let mut details = Vec::new();
    let mut server_counters = Stats::default();
    for &size in &sizes {
        let iters = args
            .iters
            .unwrap_or(if test.kind == Kind::Bw { 5000 } else { 1000 })
            .max(1);
        side.mr
            .write(0, &pattern(CLIENT_SEED, source_len(test, size)))?;
        if roce {
            wire.send(&Msg::Start { size, iters })?;
            match wire.recv::<Msg>()? {
                Msg::Ready => {}
                Msg::Refuse { why } => fail!(Peer, "the server refused: {why}"),
                m => fail!(Peer, "unexpected message from the server: {m:?}"),
            }
        }
        if !roce && steps.sync_before_size {
            // perftest's receiver posted its receives.
            sync(&mut wire, "sync before the size", &local[0], ip)?;
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
            if steps.sync_after_size_all && args.all {
                sync(&mut wire, "sync after the size", &local[0], ip)?;
            }
            // A plain perftest server says nothing more per size.
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
                received,
            } => {
                if side.ud
                    && let Some(n) = received.filter(|&n| n < r.iterations)
                {
                    notes.push(format!(
                        "{size} B: {n} of {} UD SENDs arrived (UD does not retransmit; the rest were lost)",
                        r.iterations
                    ));
                }
                (verified, detail, counters, profile)
            }
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
        notes,
        results,
        local,
        remote,
        cc: crate::cc::CcReport::new(
            args,
            crate::cc::line_rate_bps(args, ip)?,
            &side.qps,
            side.ctx.stats().cnps_rx,
            server_counters.cnps_tx,
        ),
        counters: side.ctx.stats(),
        server_counters,
        details,
    })
}

/// How much of the pattern a side writes before a size: the source and,
/// below the receive area, what READs fetch. write_lat's peer WRITEs into
/// the upper half from the first moment (perftest's server starts at
/// once), so that side leaves it alone.
pub(crate) fn source_len(test: Test, size: usize) -> usize {
    if (test.verb, test.kind) == (Verb::Write, Kind::Lat) {
        size
    } else {
        2 * size
    }
}

/// The sizes of the run: `-s` or `-a`, for UD no more than the path MTU
/// (noted when that changes `-s`).
pub(crate) fn run_sizes(
    args: &Options,
    test: Test,
    mtu: u32,
    notes: &mut Vec<String>,
) -> Result<Vec<usize>> {
    let sizes = sizes(args, test);
    if args.connection != Connection::Ud {
        return Ok(sizes);
    }
    let (sizes, note) = ud_sizes(sizes, mtu);
    notes.extend(note);
    if sizes.is_empty() {
        fail!(
            Usage,
            "no size of the run fits a UD message (at most the path MTU, {mtu} B)"
        );
    }
    Ok(sizes)
}

/// `host`, `host:port`, an IPv4 or IPv6 address or `[v6]:port` as a
/// `host:port` to connect to (`port` when none is given).
pub(crate) fn server_addr(server: &str, port: u16) -> String {
    if let Ok(ip) = server.parse::<IpAddr>() {
        return SocketAddr::new(ip, port).to_string();
    }
    if server.parse::<SocketAddr>().is_ok() || server.contains(':') {
        return server.to_string();
    }
    format!("{server}:{port}")
}

/// The address the engine opens on: the one the TCP connection uses here,
/// an IPv4-mapped one (a dual-stack listener's IPv4 client) as IPv4.
pub(crate) fn engine_ip(tcp_local: IpAddr) -> IpAddr {
    match tcp_local {
        IpAddr::V6(v) => v.to_ipv4_mapped().map_or(IpAddr::V6(v), IpAddr::V4),
        v4 => v4,
    }
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
            let got = side.mr.read(side.half, size - 1)?;
            (got != server[..size - 1]).then(|| "ping-pong data differs from the server's".into())
        }
        (Verb::Send, Kind::Lat) if size > 1 => {
            let got = side.mr.read(side.recv_data(), size - 1)?;
            (got != server[..size - 1]).then(|| "ping-pong data differs from the server's".into())
        }
        _ => None,
    })
}

/// Serves one client; returns a one-line summary.
pub(crate) fn server(args: &Options, test: Test, listener: &TcpListener) -> Result<Served> {
    let mut wire = Wire::accept(listener)?;
    let ip = select_gid(
        args,
        args.bind
            .unwrap_or_else(|| engine_ip(wire.local_addr().ip())),
    )?;
    let cfg = engine_config(args, ip, args.seed, args.pcap.clone())?;
    let (ctx, note) = open_ctx(ip, args, cfg)?;
    let mut notes: Vec<String> = note.into_iter().collect();
    let my_mtu = args.mtu.unwrap_or_else(|| ctx.active_mtu().bytes());
    let hello = wire.greet(my_mtu)?;
    let roce = hello.version.roce;
    let (sizes, nqp, cmtu, verify, peer_udp) = if roce {
        let (ctest, sizes, cmtu, verify, nqp, udp, (conn, cthreads, csrq, crec)) =
            match wire.recv::<Msg>()? {
                Msg::Hello {
                    test,
                    sizes,
                    mtu,
                    verify,
                    qps,
                    udp_port,
                    connection,
                    threads,
                    use_srq,
                    recovery,
                    ..
                } => (
                    test,
                    sizes,
                    mtu,
                    verify,
                    qps,
                    udp_port,
                    (connection, threads, use_srq, recovery),
                ),
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
        if conn != args.connection {
            return refuse(
                &mut wire,
                format!(
                    "this server's QPs are {} (-c), the client's {}: give both sides the same -c",
                    args.connection.name(),
                    conn.name()
                ),
            );
        }
        if cthreads != args.threads {
            return refuse(
                &mut wire,
                format!(
                    "this server serves {} connections at once (--threads), the client makes {cthreads}: give both sides the same --threads",
                    args.threads
                ),
            );
        }
        if csrq != args.use_srq {
            return refuse(
                &mut wire,
                format!(
                    "this server {} --use_srq, the client {}: give both sides the same --use_srq",
                    if args.use_srq { "has" } else { "lacks" },
                    if csrq { "has it" } else { "not" }
                ),
            );
        }
        if crec != args.recovery {
            return refuse(
                &mut wire,
                format!(
                    "this server recovers from loss with --recovery {}, the client with {}: give both sides the same --recovery",
                    args.recovery.name(),
                    crec.name()
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
        if args.threads > 1 {
            fail!(
                Peer,
                "a plain perftest client makes one connection; this server waits for {} (--threads): run it without --threads",
                args.threads
            );
        }
        plain_peer(test, args, &ctx, &hello)?;
        let mtu = my_mtu.min(hello.mtu);
        (
            run_sizes(args, test, mtu, &mut notes)?,
            if test.kind == Kind::Lat { 1 } else { args.qps },
            mtu,
            false,
            ROCE_PORT,
        )
    };
    let max = sizes.iter().copied().max().unwrap_or(8);
    let shape = Shape {
        max,
        cycle_buffer: hello.cycle_buffer,
        nqp,
        mtu: cmtu,
        srq: args.use_srq,
        peer_udp,
    };
    let (side, local, remote) = open_side(&mut wire, args, test, ctx, ip, shape)?;
    if !roce {
        return serve_plain(
            args,
            test,
            &side,
            &mut wire,
            (&local[0], &remote[0]),
            ip,
            &sizes,
            &hello.version.text,
            notes,
        );
    }
    let mut recvs = Recvs::new(&side);
    let mut verified_all = true;
    loop {
        let (size, iters) = match wire.recv::<Msg>()? {
            Msg::Start { size, iters } => (size, iters),
            Msg::Finish => break,
            m => fail!(Peer, "unexpected message from the client: {m:?}"),
        };
        if size > max || size == 0 || iters == 0 {
            let why = if size > max {
                format!("size {size} exceeds the announced {max}")
            } else {
                format!("a run of {iters} messages of {size} bytes (both must be at least 1)")
            };
            let _ = wire.send(&Msg::Refuse { why: why.clone() });
            fail!(Peer, "refused the client: {why}");
        }
        side.mr
            .write(0, &pattern(SERVER_SEED, source_len(test, size)))?;
        if test.verb == Verb::Send {
            recvs.top_up(&side, test)?;
        }
        let before = side.ctx.profile();
        wire.send(&Msg::Ready)?;
        let mut received = 0u64;
        // Like perftest, each side inlines what fits its own inline size.
        let inline = size <= args.inline() as usize;
        match (test.verb, test.kind) {
            (Verb::Write, Kind::Lat) => {
                serve_write_lat(test, &side, &remote[0], size, iters, inline)?;
                received = iters;
            }
            (Verb::Send, Kind::Lat) => {
                serve_send_lat(test, &side, &remote[0], size, iters, inline, &mut recvs)?;
                received = iters;
            }
            _ => received += drive_until_peer_speaks(test, &side, &mut wire, &mut recvs)?,
        }
        let mine = side.ctx.profile().since(&before);
        let count = match wire.recv::<Msg>()? {
            Msg::Done { count, .. } => count,
            m => fail!(Peer, "unexpected message from the client: {m:?}"),
        };
        // SEND completions may trail the client's last completion by a hair.
        let mut count_recv = |wcs: Vec<Wc>, received: &mut u64| -> Result<()> {
            for wc in wcs {
                wc_ok(&wc, &side.ctx)?;
                if wc.opcode == WcOpcode::Recv {
                    *received += 1;
                    recvs.used(&side, wc.qp_num);
                }
            }
            Ok(())
        };
        if test.verb == Verb::Send && test.kind == Kind::Bw && !side.ud {
            spin_until(&side.ctx, || {
                count_recv(side.cq.poll_only(64), &mut received)?;
                Ok(received >= count)
            })?;
        } else if test.verb == Verb::Send && test.kind == Kind::Bw {
            // UD does not retransmit: take what is still on its way, until
            // all arrived or nothing more came for UD_GRACE.
            let mut last = Instant::now();
            while received < count && last.elapsed() < UD_GRACE {
                side.ctx.progress()?;
                let wcs = side.cq.poll_only(64);
                if !wcs.is_empty() {
                    last = Instant::now();
                }
                count_recv(wcs, &mut received)?;
            }
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
            received: (test.verb == Verb::Send).then_some(received),
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
        notes: notes.clone(),
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

/// The receives of a SEND test's receiving side, per pool (per QP, or
/// the one SRQ): how many were posted and how many used.
pub(crate) struct Recvs {
    posted: Vec<u64>,
    used: Vec<u64>,
}

impl Recvs {
    pub(crate) fn new(side: &Side) -> Recvs {
        Recvs {
            posted: vec![0; side.pools()],
            used: vec![0; side.pools()],
        }
    }

    /// Tops every pool up to its budget: perftest's rx depth for a
    /// bandwidth test, one for a ping-pong (receives left from a smaller
    /// size fit any size: they span the whole upper half).
    pub(crate) fn top_up(&mut self, side: &Side, test: Test) -> Result<()> {
        let want = if test.kind == Kind::Bw { RX_DEPTH } else { 1 };
        for i in 0..side.pools() {
            let have = self.posted[i] - self.used[i];
            if have < want {
                let wrs: Vec<RecvWr> = (0..want - have).map(|id| side.recv_wr(id)).collect();
                side.post_recvs(i, &wrs)?;
                self.posted[i] += want - have;
            }
        }
        Ok(())
    }

    /// A receive of QP `qpn` was used.
    pub(crate) fn used(&mut self, side: &Side, qpn: u32) {
        if let Some(i) = side.pool_of(qpn) {
            self.used[i] += 1;
        }
    }

    /// A receive of QP `qpn` was used; post another in its place.
    pub(crate) fn repost(&mut self, side: &Side, qpn: u32) -> Result<()> {
        if let Some(i) = side.pool_of(qpn) {
            side.post_recvs(i, &[side.recv_wr(0)])?;
            self.used[i] += 1;
            self.posted[i] += 1;
        }
        Ok(())
    }
}

/// A passive side (the target of WRITEs, READs and atomics, or the
/// receiver of a SEND bandwidth run): drives the engine, reposting every
/// receive used, until the peer speaks on the TCP connection (its sync or
/// roce's `Done`). Returns the SENDs received.
pub(crate) fn drive_until_peer_speaks(
    test: Test,
    side: &Side,
    wire: &mut Wire,
    recvs: &mut Recvs,
) -> Result<u64> {
    let mut received = 0u64;
    let mut spins = 0u32;
    let mut stall = Stall::default();
    // A blocked engine wakes when the peer speaks.
    let _watch = side.ctx.watch_fd(&*wire)?;
    loop {
        let work = side.ctx.progress()?;
        if test.verb == Verb::Send {
            for wc in side.cq.poll_only(64) {
                wc_ok(&wc, &side.ctx)?;
                if wc.opcode == WcOpcode::Recv {
                    received += 1;
                    recvs.repost(side, wc.qp_num)?;
                }
            }
        }
        spins = spins.wrapping_add(1);
        if spins.is_multiple_of(512) && wire.readable() {
            return Ok(received);
        }
        if stall.idle_too_long(work) {
            fail!(Run, "the client stopped for {STALL:?}");
        }
    }
}

/// The server's side of write_lat, as perftest's `run_iter_lat_write`:
/// it WRITEs first, then answers each of the client's WRITEs (whose last
/// byte, the iteration count, it polls in its receive area) with its own,
/// into the area the client announced; it ends when the client's last
/// WRITE landed and its own were all acknowledged.
pub(crate) fn serve_write_lat(
    test: Test,
    side: &Side,
    remote: &Endpoint,
    size: usize,
    iters: u64,
    inline: bool,
) -> Result<()> {
    let qp = &side.qps[0];
    let poll = side.half + size - 1;
    // One work request, as perftest posts: only its id changes.
    let mut wr = wr_for(test, side, remote, size, 0, inline);
    let mut done = 0u64;
    let reap = |done: &mut u64| -> Result<()> {
        for wc in side.cq.poll_only(16) {
            wc_ok(&wc, &side.ctx)?;
            *done += 1;
        }
        Ok(())
    };
    for i in 0..iters {
        if i > 0 {
            let f = flag(i - 1);
            spin_until(&side.ctx, || Ok(side.mr.byte(poll)? == f))?;
        }
        side.mr.write(size - 1, &[flag(i)])?;
        wr.wr_id = i;
        qp.post_send(&wr)?;
        reap(&mut done)?;
    }
    let f = flag(iters - 1);
    spin_until(&side.ctx, || {
        reap(&mut done)?;
        Ok(side.mr.byte(poll)? == f)
    })?;
    spin_until(&side.ctx, || {
        reap(&mut done)?;
        Ok(done >= iters)
    })?;
    // The ACK of the client's last WRITE leaves now, not when this side
    // next drives its engine.
    side.ctx.doorbell()?;
    Ok(())
}

/// The server's side of send_lat, as perftest's `run_iter_lat_send`: it
/// waits for each SEND, posts a receive in its place and answers.
pub(crate) fn serve_send_lat(
    test: Test,
    side: &Side,
    remote: &Endpoint,
    size: usize,
    iters: u64,
    inline: bool,
    recvs: &mut Recvs,
) -> Result<()> {
    let qp = &side.qps[0];
    // One work request, as perftest posts: only its id changes.
    let mut wr = wr_for(test, side, remote, size, 0, inline);
    for i in 0..iters {
        let mut got = None;
        spin_until(&side.ctx, || {
            for wc in side.cq.poll_only(16) {
                wc_ok(&wc, &side.ctx)?;
                if wc.opcode == WcOpcode::Recv {
                    got = Some(wc.qp_num);
                }
            }
            Ok(got.is_some())
        })?;
        recvs.repost(side, got.unwrap_or(qp.qpn()))?;
        wr.wr_id = i;
        qp.post_send(&wr)?;
    }
    Ok(())
}

/// Serves a plain perftest client its test's sequence (see
/// [`crate::perftest::Steps`]): the passive bandwidth tests until the
/// client's sync; send_bw's receives, syncs and count; the ping-pongs;
/// the READ and atomic latency tests' passive wait for the closing sync.
#[allow(clippy::too_many_arguments)]
fn serve_plain(
    args: &Options,
    test: Test,
    side: &Side,
    wire: &mut Wire,
    (local, remote): (&Endpoint, &Endpoint),
    ip: IpAddr,
    sizes: &[usize],
    version: &str,
    notes: Vec<String>,
) -> Result<Served> {
    let steps = test.steps();
    let iters = args
        .iters
        .unwrap_or(if test.kind == Kind::Bw { 5000 } else { 1000 })
        .max(1);
    let mut recvs = Recvs::new(side);
    let mut received = 0u64;
    match (test.verb, test.kind) {
        (Verb::Send, kind) => {
            for &size in sizes {
                side.mr
                    .write(0, &pattern(SERVER_SEED, source_len(test, size)))?;
                recvs.top_up(side, test)?;
                sync(wire, "sync before the size", local, ip)?;
                if kind == Kind::Bw {
                    received += drive_until_peer_speaks(test, side, wire, &mut recvs)?;
                    if steps.sync_after_size_all && args.all {
                        sync(wire, "sync after the size", local, ip)?;
                    }
                } else {
                    let inline = size <= args.inline() as usize;
                    serve_send_lat(test, side, remote, size, iters, inline, &mut recvs)?;
                    received += iters;
                }
            }
        }
        (Verb::Write, Kind::Lat) => {
            for &size in sizes {
                side.mr
                    .write(0, &pattern(SERVER_SEED, source_len(test, size)))?;
                let inline = size <= args.inline() as usize;
                serve_write_lat(test, side, remote, size, iters, inline)?;
            }
        }
        // WRITE, READ and atomic bandwidth, READ and atomic latency: the
        // server is passive until the client's sync.
        _ => {
            let max = sizes.iter().copied().max().unwrap_or(8);
            side.mr.write(0, &pattern(SERVER_SEED, 2 * max))?;
            drive_until_peer_speaks(test, side, wire, &mut recvs)?;
        }
    }
    let none = BwReport {
        size: 0,
        iters: 0,
        bw_peak: 0.0,
        bw_avg: 0.0,
        msg_rate: 0.0,
    };
    let rep = close(wire, test, local, ip, none)?;
    side.ctx.flush_pcap()?;
    let s = side.ctx.stats();
    let mut summary = format!(
        "roce perf {}: served perftest {version} at {} ({} packets in, {} out)",
        test.name(),
        wire.peer_addr(),
        s.rx_packets,
        s.tx_packets,
    );
    if steps.bw_report {
        summary += &format!(
            "; its report: {} B x {} at {:.2} MiB/s average, {:.2} peak, {:.6} Mpps",
            rep.size, rep.iters, rep.bw_avg, rep.bw_peak, rep.msg_rate
        );
    }
    if test.verb == Verb::Send {
        summary += &format!("; {received} SENDs received");
    }
    Ok(Served { notes, summary })
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
            // UD may lose SENDs (the client notes how many arrived); what
            // arrived is checked.
            if received != count && !(side.ud && received > 0) {
                Some(format!("{received} SENDs arrived of {count}"))
            } else {
                let got = side.mr.read(side.recv_data(), size)?;
                (got != client[..size]).then(|| "SEND data differs from the client's".into())
            }
        }
        (Verb::Send, Kind::Lat) if size > 1 => {
            let got = side.mr.read(side.recv_data(), size - 1)?;
            (got != client[..size - 1]).then(|| "ping-pong data differs from the client's".into())
        }
        (Verb::Write, Kind::Lat) if size > 1 => {
            let got = side.mr.read(side.half, size - 1)?;
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
