//! The blocking progress modes: whatever an engine blocks on, the event it
//! waits for wakes it (a post from another thread, a timer, a datagram),
//! and an idle engine outside busy mode really blocks.
//!
//! Every sleep here is unlimited (`max_sleep: None`), so only the wake-up
//! under test can end it; a lost one shows up as a wait that never ends,
//! which the tests bound generously (`LIVENESS`) and report as such.

mod common;

use common::*;
use roce_verbs::sys::event::thread_cpu_time;
use roce_verbs::*;
use std::sync::mpsc;
use std::time::{Duration, Instant};

/// How long a woken engine may take before the wake-up counts as lost
/// (a liveness bound, far beyond any scheduling delay, not a measurement).
const LIVENESS: Duration = Duration::from_secs(60);

fn blocking(mode: PollMode) -> EngineConfig {
    EngineConfig {
        poll: PollConfig {
            max_sleep: None,
            ..mode.into()
        },
        ..Default::default()
    }
}

/// Waits until some thread is blocked on `ctx`. Looks without taking the
/// engine lock: releasing it rings the sleepers awake, so a look through
/// `with_engine` would end the sleep it waits for (a starved test thread
/// that looked just as the sleeper blocked then saw it wake, return, and
/// never block again).
fn until_blocked(ctx: &Context) {
    let start = Instant::now();
    while ctx.sleepers() == 0 {
        assert!(start.elapsed() < LIVENESS, "the engine never blocked");
        std::thread::sleep(Duration::from_millis(1));
    }
}

fn write_wr(a: &Side, len: u32) -> SendWr {
    SendWr::new(
        7,
        WrOpcode::RdmaWrite {
            remote_addr: a.peer.addr,
            rkey: a.peer.rkey,
        },
        vec![a.mr.sge(0, len)],
    )
}

/// Pairs `a` (in `mode`) with a `b` nobody drives unless the test does:
/// whatever `a` sends to it goes unanswered.
fn pair_in(mode_a: PollMode, mode_b: PollMode, timeout: u8) -> (Side, Side) {
    pair(Opts {
        cfg_a: blocking(mode_a),
        cfg_b: blocking(mode_b),
        timeout,
        ..Opts::default()
    })
}

#[test]
fn a_post_from_another_thread_wakes_a_blocked_waiter() {
    // `a` waits with nothing in flight: no timer, no datagram to come, an
    // unlimited sleep. Another thread then posts a WRITE to the silent
    // `b`; only the post's ring makes the waiter look again, arm its
    // sleep with the new retransmission timer, and see the request fail
    // when the retries run out.
    for mode in [PollMode::Event, PollMode::Adaptive] {
        let (a, _b) = pair_in(mode, mode, 8);
        let (tx, rx) = mpsc::channel();
        let cq = a.cq.clone();
        let waiter = std::thread::spawn(move || {
            let _ = tx.send(cq.wait(1, LIVENESS + LIVENESS));
        });
        until_blocked(&a.ctx);
        a.qp.post_send(&write_wr(&a, 64)).unwrap();
        let wcs = rx
            .recv_timeout(LIVENESS)
            .unwrap_or_else(|_| panic!("{mode}: the post did not wake the waiter"))
            .unwrap();
        assert_eq!(wcs[0].status, WcStatus::RetryExcErr, "{mode}: {wcs:?}");
        assert!(a.ctx.with_engine(|e| e.sleeps()) > 0, "{mode} never slept");
        waiter.join().unwrap();
    }
}

#[test]
fn a_timer_wakes_a_blocked_engine() {
    // The request goes out before the wait; the peer never answers, so
    // nothing but the retransmission timers can wake the waiter, again and
    // again until the retries run out.
    for mode in [PollMode::Event, PollMode::Adaptive] {
        let (a, _b) = pair_in(mode, mode, 8);
        a.qp.post_send(&write_wr(&a, 64)).unwrap();
        let (tx, rx) = mpsc::channel();
        let cq = a.cq.clone();
        std::thread::spawn(move || {
            let _ = tx.send(cq.wait(1, LIVENESS + LIVENESS));
        });
        let wcs = rx
            .recv_timeout(LIVENESS)
            .unwrap_or_else(|_| panic!("{mode}: no timer woke the waiter"))
            .unwrap();
        assert_eq!(wcs[0].status, WcStatus::RetryExcErr, "{mode}: {wcs:?}");
        let st = a.ctx.stats();
        assert!(st.tx_packets >= 2, "{mode}: retransmitted: {st:?}");
        assert!(a.ctx.with_engine(|e| e.sleeps()) > 0, "{mode} never slept");
    }
}

#[test]
fn a_datagram_wakes_a_blocked_engine() {
    // `b`'s progress thread blocks with nothing to do; `a`'s WRITE (and,
    // on `a`'s side, `b`'s ACK) must wake the engine it arrives at, or
    // the WRITE is retried to exhaustion and fails. The retransmission
    // timeout (4.096 µs × 2^18, about 1 s) is far beyond a loaded
    // scheduler's delay, so a retransmission means a missed wake-up.
    for mode in [PollMode::Event, PollMode::Adaptive] {
        let (a, b) = pair_in(mode, mode, 18);
        let _drive_b = b.ctx.spawn_progress(false);
        until_blocked(&b.ctx);
        let msg = pattern(3, 5000);
        a.mr.write(0, &msg).unwrap();
        a.qp.post_send(&write_wr(&a, 5000)).unwrap();
        let (tx, rx) = mpsc::channel();
        let cq = a.cq.clone();
        std::thread::spawn(move || {
            let _ = tx.send(cq.wait(1, LIVENESS + LIVENESS));
        });
        let wcs = rx
            .recv_timeout(LIVENESS)
            .unwrap_or_else(|_| panic!("{mode}: the WRITE never completed"))
            .unwrap();
        ok_wc(&wcs);
        assert_eq!(b.mr.read(0, 5000).unwrap(), msg, "{mode}");
        assert!(
            b.ctx.with_engine(|e| e.sleeps()) > 0,
            "{mode}: b never slept"
        );
        let st = a.ctx.stats();
        assert_eq!(st.timeouts, 0, "{mode}: the ACK came by timer: {st:?}");
    }
}

#[test]
fn stopping_a_blocked_progress_thread_wakes_it() {
    // An unlimited sleep and no traffic: only the guard's ring ends it.
    let (_a, b) = pair_in(PollMode::Event, PollMode::Event, 14);
    let (tx, rx) = mpsc::channel();
    let drive = b.ctx.spawn_progress(false);
    until_blocked(&b.ctx);
    std::thread::spawn(move || {
        drop(drive);
        let _ = tx.send(());
    });
    rx.recv_timeout(LIVENESS)
        .expect("the progress thread slept through its stop");
}

/// Drives `ctx` for `wall` and returns the thread CPU time it took.
fn idle_cpu(ctx: &Context, wall: Duration) -> Duration {
    let cpu0 = thread_cpu_time();
    let start = Instant::now();
    while start.elapsed() < wall {
        assert!(!ctx.progress().unwrap(), "nothing should happen");
    }
    thread_cpu_time() - cpu0
}

#[test]
fn an_idle_adaptive_engine_blocks_and_a_busy_one_never_does() {
    // Default knobs (50 µs of spinning, sleeps of at most 1 ms): over an
    // idle stretch the thread sleeps nearly all the time, so its CPU time
    // is a small part of the wall time it spent; a busy engine spins and
    // never blocks.
    let ctx = Device::open_with("127.0.0.1:0".parse().unwrap(), EngineConfig::default()).unwrap();
    assert_eq!(ctx.poll_mode(), PollMode::Adaptive, "the API's default");
    let wall = Duration::from_millis(300);
    let cpu = idle_cpu(&ctx, wall);
    assert!(
        cpu * 4 < wall,
        "an idle adaptive engine used {cpu:?} of CPU over {wall:?}"
    );
    assert!(ctx.with_engine(|e| e.sleeps()) > 0);

    let busy = Device::open_with(
        "127.0.0.1:0".parse().unwrap(),
        EngineConfig {
            poll: PollMode::Busy.into(),
            ..Default::default()
        },
    )
    .unwrap();
    idle_cpu(&busy, Duration::from_millis(30));
    assert_eq!(busy.with_engine(|e| e.sleeps()), 0);
}

#[test]
fn a_watched_descriptor_wakes_a_blocked_engine() {
    // An engine with no QP has no timer and receives nothing: only `w`
    // speaking can end the unlimited sleep.
    let ctx = Device::open_with("127.0.0.1:0".parse().unwrap(), blocking(PollMode::Event)).unwrap();
    let (r, w) = std::os::unix::net::UnixStream::pair().unwrap();
    r.set_nonblocking(true).unwrap();
    let _watch = ctx.watch_fd(&r).unwrap();
    let (tx, rx) = mpsc::channel();
    let c = ctx.clone();
    std::thread::spawn(move || {
        // The first round finds nothing, the second blocks until `w` speaks.
        let _ = c.progress();
        let r2 = c.progress();
        // What ended the sleep: the byte is there (a wake from anything
        // else would find `r` empty and fail the test).
        let mut b = [0u8; 1];
        let _ = tx.send(r2.map(|_| std::io::Read::read(&mut &r, &mut b).map(|_| b[0])));
    });
    until_blocked(&ctx);
    use std::io::Write;
    (&w).write_all(b"x").unwrap();
    let got = rx
        .recv_timeout(LIVENESS)
        .expect("the watched descriptor did not wake the engine")
        .unwrap();
    assert_eq!(
        got.map_err(|e| e.kind()),
        Ok(b'x'),
        "the engine woke before the watched descriptor spoke"
    );
}

#[test]
fn one_ring_wakes_every_sleeper() {
    // Two threads blocked on one engine (a progress thread and a CQ
    // waiter, say) and one change: both must look. The kernel wakes one
    // `epoll_wait` per event; the eventfd left readable wakes the other,
    // unless the first drains it too early, which left the second asleep
    // in every try.
    let sock = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    let waiter = std::sync::Arc::new(
        roce_verbs::poll::Waiter::new(std::os::fd::AsRawFd::as_raw_fd(&sock)).unwrap(),
    );
    let plan = roce_verbs::poll::SleepPlan {
        timeout: None,
        want_out: false,
        seen: 0,
    };
    for round in 0..20 {
        let (tx, rx) = mpsc::channel();
        for _ in 0..2 {
            let (w, tx) = (waiter.clone(), tx.clone());
            let p = w.prepare(plan);
            std::thread::spawn(move || {
                let _ = tx.send(w.sleep(p));
            });
        }
        waiter.notify();
        for _ in 0..2 {
            let wake = rx
                .recv_timeout(LIVENESS)
                .unwrap_or_else(|_| panic!("round {round}: a sleeper slept through the ring"));
            assert!(!wake.socket && !wake.watched, "{wake:?}");
        }
        assert_eq!(waiter.sleepers(), 0);
    }
}
