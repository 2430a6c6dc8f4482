//! The engine's stage accounting ([`roce_verbs::profile`]) on real sockets:
//! the stages add up to the time spent in the engine, every stage a WRITE
//! stream crosses is seen on the side that crosses it, and the counts
//! agree with the engine's own counters.

mod common;

use common::*;
use roce_verbs::*;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

/// A streams `n` WRITEs of `len` bytes to B while a thread drives B with
/// bare `progress` calls, timing each call from outside. Returns A's and B's
/// profiles and B's externally measured time inside `progress`.
fn stream(profile: bool, n: usize, len: usize) -> (StageProfile, StageProfile, Duration, Stats) {
    let mut o = Opts {
        buf: n * len,
        ..Default::default()
    };
    o.cfg_a.profile = profile;
    o.cfg_b.profile = profile;
    // Bare `progress` calls timed from outside count as engine time only
    // when they never block.
    o.cfg_b.poll = PollMode::Busy.into();
    let (a, b) = pair(o);
    let src = pattern(5, n * len);
    a.mr.write(0, &src).unwrap();
    let stop = AtomicBool::new(false);
    let (a0, b0) = (a.ctx.profile(), b.ctx.profile());
    let inside = std::thread::scope(|s| {
        let driver = s.spawn(|| {
            let mut inside = Duration::ZERO;
            while !stop.load(Ordering::Relaxed) {
                let t = Instant::now();
                b.ctx.progress().unwrap();
                inside += t.elapsed();
            }
            inside
        });
        let wrs: Vec<SendWr> = (0..n)
            .map(|i| {
                SendWr::new(
                    i as u64,
                    WrOpcode::RdmaWrite {
                        remote_addr: a.peer.remote_addr((i * len) as u64),
                        rkey: a.peer.rkey,
                    },
                    vec![a.mr.sge(i * len, len as u32)],
                )
            })
            .collect();
        for chunk in wrs.chunks(8) {
            a.qp.post_send_batch(chunk).unwrap();
            ok_wc(&a.cq.wait(chunk.len(), WAIT).unwrap());
        }
        stop.store(true, Ordering::Relaxed);
        driver.join().unwrap()
    });
    assert_eq!(b.mr.read(0, n * len).unwrap(), src);
    let pb = b.ctx.profile().since(&b0);
    (a.ctx.profile().since(&a0), pb, inside, b.ctx.stats())
}

#[test]
fn stages_add_up_to_the_engine_time_and_each_side_shows_its_work() {
    let (n, len) = (64, 32 * 1024);
    let (pa, pb, inside_b, sb) = stream(true, n, len);
    for p in [&pa, &pb] {
        assert!(p.enabled);
        // Every tick inside the engine is charged to one stage.
        assert_eq!(p.engine_ns, p.stages_ns(), "{p:?}");
        assert!(p.engine_ns <= p.wall_ns, "{p:?}");
    }
    // B's stages are a part of the time its driver spent in `progress`
    // (measured from outside), and most of it: what they miss is only the
    // lock and the call itself.
    let inside = inside_b.as_nanos() as u64;
    assert!(pb.engine_ns <= inside, "{} > {inside}", pb.engine_ns);
    assert!(pb.engine_ns >= inside / 2, "{} of {inside}", pb.engine_ns);
    // The receiver received, checked, took and placed every byte…
    assert_eq!(pb.rx_packets, sb.rx_packets);
    assert!(pb.rx_syscall.ns > 0 && pb.rx_syscall.events > 0, "{pb:?}");
    assert!(pb.icrc.events >= pb.rx_packets, "{pb:?}");
    assert!(pb.rnic.events >= pb.rx_packets, "{pb:?}");
    assert!(pb.copy.ns > 0, "{pb:?}");
    assert_eq!(pb.copy.events, (n * len) as u64, "bytes copied into the MR");
    // …and sent its ACKs.
    assert!(pb.tx_syscall.events > 0 && pb.tx_syscall.ns > 0, "{pb:?}");
    // The sender sent, and polled its completions (one per WR: all signaled).
    assert!(pa.tx_syscall.ns > 0 && pa.tx_packets >= (n * len / 1024) as u64);
    assert_eq!(pa.completion.events, n as u64, "{pa:?}");
    assert_eq!(pa.copy.events, 0, "WRITEs copy nothing into the sender");
    // The analysis of this run names the working stage that took longest
    // (the lowest capacity) as binding.
    let w = profile::Workload {
        message_bytes: len as u64,
        messages: n as u64,
        seconds: pb.wall_ns as f64 / 1e9,
    };
    let a = analyze(&[("client", &pa), ("server", &pb)], &w, None);
    let top = a
        .stages
        .iter()
        .filter(|r| r.stage != Stage::Idle)
        .max_by_key(|r| {
            let p = if r.side == "client" { &pa } else { &pb };
            p.get(r.stage).ns
        })
        .unwrap();
    assert_eq!(a.binding, top.name);
    assert!(
        a.reason.contains(&format!("{} takes", a.binding)),
        "{}",
        a.reason
    );
}

#[test]
fn profiling_off_accounts_nothing() {
    let (pa, pb, _, _) = stream(false, 8, 4096);
    for p in [pa, pb] {
        assert!(!p.enabled);
        assert_eq!(p.stages_ns(), 0);
        assert_eq!(p.copy.events, 0);
        assert!(p.wall_ns > 0 && p.rx_packets > 0);
    }
}
