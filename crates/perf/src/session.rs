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
use std::time::Duration;

pub(crate) fn client(
    args: &Options,
    test: Test,
    server: &str,
    bind: Option<IpAddr>,
) -> Result<Report> {
    let server = server_addr(server, args.port);
    let mut wire = Wire::connect(&server, Duration::from_secs(5))?;
    let ip = bind.unwrap_or_else(|| engine_ip(wire.local_addr().ip()));
    let sizes = sizes(args, test);
    let max = sizes.iter().copied().max().unwrap_or(8);
    let nqp = if test.kind == Kind::Lat { 1 } else { args.qps };
    let cfg = engine_config(args, ip, args.seed, args.pcap.clone())?;
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
            let got = side.mr.read(side.half, size - 1)?;
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
