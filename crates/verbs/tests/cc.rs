//! Congestion control on real sockets: CE marks read from received packets
//! become CNPs, and DCQCN on the sending QP cuts its rate and recovers it;
//! with the queue-driven (RED) marker, DCQCN holds the receiver's socket
//! backlog near the marking thresholds where no congestion control lets
//! it grow to the socket buffer.

mod common;
mod prereq;
use common::*;
use roce_rnic::cc::{CcConfig, CcParams};
use roce_verbs::*;
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant};

/// One test of this file at a time. Each busy-polls two contexts and
/// times its controller against the wall clock; run side by side on two
/// cores, they can starve each other's timers: DCQCN's α then rises only
/// when a starved thread catches up, and in one CI run (session 34) the
/// loopback test saw 16,937 shallow cuts in 20 s without its rate ever
/// falling under 90 %, while the veth tests ran beside it. Alone, it
/// passes in 0.1 s.
fn alone() -> MutexGuard<'static, ()> {
    static ONE: Mutex<()> = Mutex::new(());
    ONE.lock().unwrap_or_else(|e| e.into_inner())
}

fn dcqcn() -> CcConfig {
    CcParams::new("dcqcn").build().unwrap().cc
}

/// Keeps `depth` 64 KiB WRITEs in flight from `a` until `done` says stop
/// or `WAIT` runs out (then the test fails, naming `what`).
fn drive(a: &Side, depth: usize, what: &str, mut done: impl FnMut(&Side) -> bool) {
    let len = 65536u32;
    let deadline = Instant::now() + WAIT;
    let mut outstanding = 0;
    let mut id = 0u64;
    loop {
        while outstanding < depth {
            id += 1;
            let mut wr = SendWr::new(
                id,
                WrOpcode::RdmaWrite {
                    remote_addr: a.peer.addr,
                    rkey: a.peer.rkey,
                },
                vec![a.mr.sge(0, len)],
            );
            wr.flags.signaled = true;
            a.qp.post_send(&wr).unwrap();
            outstanding += 1;
        }
        a.ctx.progress().unwrap();
        let wcs = a.cq.poll(64).unwrap();
        ok_wc(&wcs);
        // Completions of an earlier call's work requests count too.
        outstanding = outstanding.saturating_sub(wcs.len());
        if done(a) {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "{what} did not happen within {WAIT:?}: {:?} {:?}",
            a.qp.cc_stats(),
            a.ctx.stats()
        );
    }
}

const LINE: u64 = 10_000_000_000;

fn loopback_opts(cc: CcConfig) -> Opts {
    let mut o = Opts {
        buf: 1 << 16,
        mtu: Mtu::Mtu4096,
        // An unpaced sender in a debug build, beside other tests, can
        // overrun its peer's socket: let go-back-N's timer (≈ 268 ms)
        // outwait the drain rather than exhaust the retries.
        timeout: 16,
        ..Opts::default()
    };
    o.cfg_a.cc = CcSettings::new(cc, LINE);
    o
}

/// A marked run's rate falls, and recovers once the marks stop.
fn rate_falls_and_recovers(o: Opts) {
    let (a, b) = pair(o);
    rate_falls_and_recovers_on(a, b);
}

fn rate_falls_and_recovers_on(a: Side, b: Side) {
    let _drive_b = b.ctx.spawn_progress(false);
    let s0 = a.qp.cc_stats().unwrap();
    assert_eq!((s0.algorithm, s0.rate_cuts), ("dcqcn", 0));
    // Congestion: 30 % of the data arrives CE-marked, so CNPs come as fast
    // as the receiver may send them and α stays high.
    a.ctx.set_ce_mark(0.3);
    // DCQCN's α decays while no CNP comes, so the first cuts can be
    // shallow; marks that go on raise it until the rate really falls.
    drive(&a, 8, "three rate cuts and a rate below 90 %", |a| {
        let s = a.qp.cc_stats().unwrap();
        s.rate_cuts >= 3 && s.min_rate_bps.is_some_and(|r| r < LINE * 9 / 10)
    });
    let cut = a.qp.cc_stats().unwrap();
    let (sa, sb) = (a.ctx.stats(), b.ctx.stats());
    assert!(
        sb.ce_rx > 0 && sb.cnps_tx > 0 && sa.cnps_rx > 0,
        "{sa:?} {sb:?}"
    );
    let low = cut.min_rate_bps.expect("paced below line rate");
    assert!(low < LINE * 9 / 10, "lowest rate {low} after {cut:?}");
    // The episode ends: the rate climbs back to (nearly) the line rate.
    a.ctx.set_ce_mark(0.0);
    drive(&a, 8, "recovery to 95 % of the line rate", |a| {
        a.qp.cc_stats()
            .unwrap()
            .rate_bps
            .is_none_or(|r| r >= LINE * 95 / 100)
    });
    let end = a.qp.cc_stats().unwrap();
    // The lowest rate stays on record.
    assert_eq!(end.min_rate_bps, Some(low.min(end.min_rate_bps.unwrap())));
    // Cuts stop with the marks. Packets marked before the marker was
    // switched off may still sit in the receiver's socket backlog, and the
    // CNPs they draw arrive late (on a busy machine, four more after the
    // third cut), so the check is that they stop: 100 ms of traffic with
    // no cut, within the wait.
    let mut last = (Instant::now(), end.rate_cuts);
    drive(&a, 8, "100 ms of traffic with no rate cut", |a| {
        let c = a.qp.cc_stats().unwrap().rate_cuts;
        if c != last.1 {
            last = (Instant::now(), c);
        }
        last.0.elapsed() >= Duration::from_millis(100)
    });
}

#[test]
fn dcqcn_on_loopback_cuts_on_cnps_and_recovers() {
    let _one = alone();
    rate_falls_and_recovers(loopback_opts(dcqcn()));
}

#[test]
fn without_congestion_control_cnps_change_no_rate() {
    let _one = alone();
    let (a, b) = pair(loopback_opts(CcConfig::None));
    let _drive_b = b.ctx.spawn_progress(false);
    a.ctx.set_ce_mark(0.05);
    drive(&a, 8, "ten CNPs", |a| a.ctx.stats().cnps_rx >= 10);
    let s = a.qp.cc_stats().unwrap();
    assert_eq!(
        (s.algorithm, s.rate_bps, s.min_rate_bps, s.rate_cuts),
        ("none", None, None, 0)
    );
}

/// Polls a second of the receiver that falls behind: with one 4 KiB
/// datagram each, about 160 Mb/s, above DCQCN's 100 Mb/s floor and well
/// below the sender's 1 Gb/s line rate.
const DRAIN: f64 = 5000.0;

/// The receiver falls behind: one datagram per poll, [`DRAIN`] polls a second.
/// Its engine marks by RED over its socket backlog; returns what the
/// marker saw after the sender moved `packets` packets.
fn backlog_under(
    cc: CcConfig,
    red: RedConfig,
    packets: u64,
    net: &Net,
) -> (RedStats, Stats, usize) {
    let mut o = loopback_opts(cc);
    (o.a, o.b, o.mtu) = (net.a, net.b, net.mtu);
    o.cfg_a.cc.line_rate_bps = 1_000_000_000;
    for c in [&mut o.cfg_a, &mut o.cfg_b] {
        c.offload = false; // one datagram per receive: a countable drain
        c.socket_buffer = 1 << 20;
    }
    o.cfg_b.batch = 1;
    o.cfg_b.ecn_red = Some(red);
    let (a, b) = pair_with(o, &*net.open);
    let rcvbuf = b.ctx.with_engine(|e| rcvbuf(e.fd()));
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let s = stop.clone();
    let bctx = b.ctx.clone();
    // At most DRAIN polls a second, each taking one datagram.
    let slow = std::thread::spawn(move || {
        let t0 = Instant::now();
        let mut polls = 0u64;
        while !s.load(std::sync::atomic::Ordering::Relaxed) {
            if (polls as f64) < t0.elapsed().as_secs_f64() * DRAIN {
                bctx.progress().unwrap();
                polls += 1;
            } else {
                std::thread::sleep(Duration::from_micros(50));
            }
        }
    });
    drive(&a, 16, "the transfer", |a| {
        a.ctx.stats().tx_packets >= packets
    });
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    slow.join().unwrap();
    eprintln!("{:?}", a.qp.cc_stats());
    (b.ctx.stats().red, a.ctx.stats(), rcvbuf)
}

/// The socket's receive buffer (`SO_RCVBUF`, as the kernel doubled it).
fn rcvbuf(fd: std::os::fd::RawFd) -> usize {
    let mut v: libc::c_int = 0;
    let mut len = std::mem::size_of::<libc::c_int>() as libc::socklen_t;
    // SAFETY: the kernel writes one int.
    let r = unsafe {
        libc::getsockopt(
            fd,
            libc::SOL_SOCKET,
            libc::SO_RCVBUF,
            (&mut v as *mut libc::c_int).cast(),
            &mut len,
        )
    };
    assert_eq!(r, 0);
    v as usize
}

/// Where the two sides live.
struct Net {
    a: std::net::SocketAddr,
    b: std::net::SocketAddr,
    mtu: Mtu,
    /// Thresholds a few dozen packets apart at this MTU.
    red: RedConfig,
    open: Box<dyn Fn(std::net::SocketAddr, EngineConfig) -> Context>,
}

fn loopback_net() -> Net {
    Net {
        a: "127.0.0.1:0".parse().unwrap(),
        b: "127.0.0.1:0".parse().unwrap(),
        mtu: Mtu::Mtu4096,
        red: RedConfig::parse("128K,512K,0.2").unwrap(),
        open: Box::new(|addr, cfg| Device::open_with(addr, cfg).expect("open device")),
    }
}

#[test]
fn red_over_the_socket_backlog_lets_dcqcn_hold_the_queue_near_its_thresholds() {
    let _one = alone();
    red_holds_the_backlog(&loopback_net());
}

fn red_holds_the_backlog(net: &Net) {
    let red = net.red;
    let packets = 6000;
    let (none, none_tx, rcvbuf) = backlog_under(CcConfig::None, red, packets, net);
    // DCQCN's timers are set for fabrics whose queues drain in
    // microseconds; this one drains in milliseconds (a few thousand
    // datagrams a second), so its timers scale with it, its floor (10 Mb/s)
    // sits below the drain, and each cut sets the target rate (the paper's
    // R_T ← R_C), as a fabric operator would tune them.
    let mut p = CcParams::new("dcqcn");
    for (k, v) in [
        ("min_rate_mbps", "10"),
        ("rp_timer_us", "5000"),
        ("alpha_resume_interval_us", "5000"),
        ("clamp_target_rate", "true"),
    ] {
        p.set(k, v).unwrap();
    }
    let (dc, dc_tx, _) = backlog_under(p.build().unwrap().cc, red, packets, net);
    eprintln!("rcvbuf {rcvbuf}\nnone: {none:?}\n{none_tx:?}\ndcqcn: {dc:?}\n{dc_tx:?}");
    // Without congestion control the marks change nothing and the backlog
    // grows until the socket buffer (4 KiB packets: drops, retransmissions)
    // or the sender's window (sized for 4 KiB packets, so about half the
    // buffer in 1 KiB ones) stops it.
    assert!(none.marked > 0, "{none:?}");
    assert!(
        none.backlog_max_bytes >= rcvbuf as u64 / 4,
        "{none:?} of {rcvbuf}"
    );
    assert!(none.backlog_mean_bytes > red.kmax_bytes, "{none:?}");
    // DCQCN answers the marks: the backlog stays near the thresholds.
    assert!(dc.marked > 0 && dc_tx.cnps_rx > 0, "{dc:?} {dc_tx:?}");
    assert!(dc.backlog_mean_bytes <= 2 * red.kmax_bytes, "{dc:?}");
    assert!(
        dc.backlog_mean_bytes * 2 <= none.backlog_mean_bytes,
        "{dc:?} vs {none:?}"
    );
}

/// A veth pair between two network namespaces, removed on drop.
struct Veth {
    ns: [String; 2],
}

impl Veth {
    /// `None` when not root or without `ip` (the test then says so and
    /// checks nothing more, or fails when prerequisites are required; see
    /// `prereq`); any failure of the setup as root is a test failure.
    fn new(test: &str) -> Option<Veth> {
        if !prereq::root(test, "a veth pair between network namespaces")
            || !prereq::tool(test, &["ip", "-V"], "apt-get install iproute2")
        {
            return None;
        }
        static NEXT: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
        let id = format!(
            "{}{}",
            std::process::id(),
            NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
        );
        let ns = [format!("rwcc{id}a"), format!("rwcc{id}b")];
        let v = Veth { ns: ns.clone() };
        let (ia, ib) = (format!("vc{id}a"), format!("vc{id}b"));
        let run = |args: &[&str]| {
            let out = std::process::Command::new("ip")
                .args(args)
                .output()
                .expect("running ip(8)");
            assert!(
                out.status.success(),
                "ip {}: {}",
                args.join(" "),
                String::from_utf8_lossy(&out.stderr)
            );
        };
        for n in &ns {
            run(&["netns", "add", n]);
        }
        run(&["link", "add", &ia, "type", "veth", "peer", "name", &ib]);
        for (i, (dev, addr)) in [(&ia, "10.231.0.1/24"), (&ib, "10.231.0.2/24")]
            .into_iter()
            .enumerate()
        {
            run(&["link", "set", dev, "netns", &ns[i]]);
            run(&["-n", &ns[i], "addr", "add", addr, "dev", dev]);
            run(&["-n", &ns[i], "link", "set", dev, "up"]);
            run(&["-n", &ns[i], "link", "set", "lo", "up"]);
        }
        Some(v)
    }

    /// Runs `f` on a thread inside namespace `i` (sockets it opens stay there).
    fn within<T: Send + 'static>(&self, i: usize, f: impl FnOnce() -> T + Send + 'static) -> T {
        let path = format!("/var/run/netns/{}", self.ns[i]);
        std::thread::spawn(move || {
            let file = std::fs::File::open(&path).expect("open the namespace");
            use std::os::fd::AsRawFd;
            // SAFETY: setns on this thread only, with a namespace descriptor.
            let r = unsafe { libc::setns(file.as_raw_fd(), libc::CLONE_NEWNET) };
            assert_eq!(r, 0, "setns {path}: {}", std::io::Error::last_os_error());
            f()
        })
        .join()
        .expect("the namespace thread")
    }
}

impl Drop for Veth {
    fn drop(&mut self) {
        for n in &self.ns {
            // Deleting a namespace deletes the veth end in it, and the pair.
            let _ = std::process::Command::new("ip")
                .args(["netns", "del", n])
                .output();
        }
    }
}

#[test]
fn dcqcn_across_a_veth_pair_between_namespaces_cuts_and_recovers() {
    let _one = alone();
    let Some(veth) = Veth::new("dcqcn_across_a_veth_pair_between_namespaces_cuts_and_recovers")
    else {
        return;
    };
    let veth = std::sync::Arc::new(veth);
    // The interface speed is what --cc-line-rate defaults to: veth says 10 Gb/s.
    let speed = veth.within(0, || cc::interface_speed_bps("10.231.0.1".parse().unwrap()));
    assert_eq!(speed, Some(10_000_000_000));
    let net = veth_net(&veth);
    let mut o = loopback_opts(dcqcn());
    (o.a, o.b, o.mtu) = (net.a, net.b, net.mtu);
    let (a, b) = pair_with(o, &*net.open);
    rate_falls_and_recovers_on(a, b);
}

#[test]
fn red_across_a_veth_pair_lets_dcqcn_hold_the_queue_near_its_thresholds() {
    let _one = alone();
    let Some(veth) =
        Veth::new("red_across_a_veth_pair_lets_dcqcn_hold_the_queue_near_its_thresholds")
    else {
        return;
    };
    red_holds_the_backlog(&veth_net(&std::sync::Arc::new(veth)));
}

/// Side A in the first namespace, B in the second; a 1500-byte veth MTU
/// takes 1024-byte RoCE MTU packets.
fn veth_net(veth: &std::sync::Arc<Veth>) -> Net {
    let v = veth.clone();
    Net {
        a: "10.231.0.1:0".parse().unwrap(),
        b: "10.231.0.2:0".parse().unwrap(),
        mtu: Mtu::Mtu1024,
        red: RedConfig::parse("64K,256K,0.2").unwrap(),
        open: Box::new(move |addr, cfg| {
            let i = usize::from(addr.ip() == "10.231.0.2".parse::<std::net::IpAddr>().unwrap());
            v.within(i, move || {
                Device::open_with(addr, cfg).expect("open device")
            })
        }),
    }
}
