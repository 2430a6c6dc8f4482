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
    let ip = bind.unwrap_or_else(|| engine_ip(wire.local_addr().ip()));
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
    let ud = args.connection == Connection::Ud;
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
    let half = max + if ud { GRH } else { 0 };
    let buf = (2 * half).max(2 * hello.cycle_buffer as usize);
    // perftest's latency client takes its receives from the SRQ too.
    let srq = args.use_srq && test.kind == Kind::Lat;
    let (pd, cq, mr, srq, prepared) = create(&ctx, args, buf, nqp, mtu, srq)?;
    let (local, remote, qps, ahs) =
        connect_qps(&mut wire, test, ip, &pd, &mr, prepared, peer_udp, ud)?;
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
            let got = side.mr.read(size, size - 1)?;
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
    let ip = args
        .bind
        .unwrap_or_else(|| engine_ip(wire.local_addr().ip()));
    let cfg = engine_config(args, ip, args.seed, args.pcap.clone())?;
    let (ctx, note) = open_ctx(ip, args, cfg)?;
    let mut notes: Vec<String> = note.into_iter().collect();
    let my_mtu = args.mtu.unwrap_or_else(|| ctx.active_mtu().bytes());
    let hello = wire.greet(my_mtu)?;
    let roce = hello.version.roce;
    let (sizes, nqp, cmtu, verify, peer_udp) = if roce {
        let (ctest, sizes, cmtu, verify, nqp, udp, conn) = match wire.recv::<Msg>()? {
            Msg::Hello {
                test,
                sizes,
                mtu,
                verify,
                qps,
                udp_port,
                connection,
                ..
            } => (test, sizes, mtu, verify, qps, udp_port, connection),
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
    let ud = args.connection == Connection::Ud;
    let half = max + if ud { GRH } else { 0 };
    let buf = (2 * half).max(2 * hello.cycle_buffer as usize);
    let (pd, cq, mr, srq, prepared) = create(&ctx, args, buf, nqp, cmtu, args.use_srq)?;
    let (local, remote, qps, ahs) =
        connect_qps(&mut wire, test, ip, &pd, &mr, prepared, peer_udp, ud)?;
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
    if !roce {
        // perftest's write_bw server: passive until the client's sync.
        let mut spins = 0u32;
        // A blocked engine wakes when the client speaks.
        let _watch = side.ctx.watch_fd(&wire)?;
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
            notes: notes.clone(),
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
    // Receives posted and used per pool (per QP, or the one SRQ).
    let mut recvs_posted = vec![0u64; side.pools()];
    let mut recvs_used = vec![0u64; side.pools()];
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
        let recv = |id| side.recv_wr(id);
        if test.verb == Verb::Send {
            // Top every pool up to its receive budget (receives left from a
            // smaller size fit any size: they span the whole upper half).
            let want = if test.kind == Kind::Bw { RX_DEPTH } else { 1 };
            for i in 0..side.pools() {
                let have = recvs_posted[i] - recvs_used[i];
                if have < want {
                    side.post_recvs(i, &(0..want - have).map(recv).collect::<Vec<_>>())?;
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
                    side.post_recvs(0, &[recv(0)])?;
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
                // A blocked engine wakes when the client says it is done.
                let _watch = side.ctx.watch_fd(&wire)?;
                loop {
                    let work = side.ctx.progress()?;
                    if test.verb == Verb::Send {
                        let wcs = side.cq.poll_only(64);
                        for wc in &wcs {
                            wc_ok(wc, &side.ctx)?;
                            if wc.opcode == WcOpcode::Recv {
                                received += 1;
                                if let Some(i) = side.pool_of(wc.qp_num) {
                                    side.post_recvs(i, &[recv(0)])?;
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
        let mut count_recv = |wcs: Vec<Wc>, received: &mut u64| -> Result<()> {
            for wc in wcs {
                wc_ok(&wc, &side.ctx)?;
                if wc.opcode == WcOpcode::Recv {
                    *received += 1;
                    if let Some(i) = side.pool_of(wc.qp_num) {
                        recvs_used[i] += 1;
                    }
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
