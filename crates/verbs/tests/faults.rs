//! Faults injected on the send path of real sockets, and hostile input: the
//! data must arrive exactly, and bad packets must be counted and dropped
//! without disturbing a live QP.

mod common;

use common::*;
use roce_verbs::packet;
use roce_verbs::*;
use std::net::{SocketAddr, UdpSocket};

/// Runs WRITEs, SENDs and READs over a faulty link in both directions and
/// checks every byte. Returns both sides' counters.
fn transfer_under(f: FaultConfig) -> (Stats, Stats) {
    transfer_with(f, Recovery::GoBackN)
}

fn transfer_with(f: FaultConfig, recovery: Recovery) -> (Stats, Stats) {
    let mut o = Opts {
        recovery,
        buf: 1 << 20,
        // A 16.8 ms RTO: retries (7) must survive a test thread starved of
        // CPU on a loaded 2-core machine, not just real packet loss.
        timeout: 12,
        ..Default::default()
    };
    o.cfg_a.faults = f;
    o.cfg_b.faults = FaultConfig {
        seed: f.seed + 1,
        ..f
    };
    let (a, b) = pair(o);
    let _drive_b = b.ctx.spawn_progress(false);
    const N: usize = 48;
    const LEN: usize = 4096 + 100; // five packets at MTU 1024
    let src = pattern(7, N * LEN);
    a.mr.write(0, &src).unwrap();
    let recvs: Vec<RecvWr> = (0..N as u64)
        .map(|i| RecvWr {
            wr_id: i,
            sg_list: vec![b.mr.sge(512 * 1024 + i as usize * LEN, LEN as u32)],
        })
        .collect();
    b.qp.post_recv_batch(&recvs).unwrap();
    let mut wrs = Vec::new();
    for i in 0..N {
        let off = i * LEN;
        wrs.push(SendWr::new(
            i as u64,
            WrOpcode::RdmaWrite {
                remote_addr: a.peer.remote_addr(off as u64),
                rkey: a.peer.rkey,
            },
            vec![a.mr.sge(off, LEN as u32)],
        ));
        wrs.push(SendWr::new(
            1000 + i as u64,
            WrOpcode::Send,
            vec![a.mr.sge(off, LEN as u32)],
        ));
    }
    for chunk in wrs.chunks(32) {
        a.qp.post_send_batch(chunk).unwrap();
        ok_wc(&a.cq.wait(chunk.len(), WAIT).unwrap());
    }
    let got = b.cq.wait(N, WAIT).unwrap();
    ok_wc(&got);
    assert_eq!(b.mr.read(0, N * LEN).unwrap(), src, "WRITE data");
    assert_eq!(
        b.mr.read(512 * 1024, N * LEN).unwrap(),
        src,
        "SEND data in order"
    );
    // READ it all back into A's upper half.
    let reads: Vec<SendWr> = (0..N)
        .map(|i| {
            SendWr::new(
                5000 + i as u64,
                WrOpcode::RdmaRead {
                    remote_addr: a.peer.remote_addr((i * LEN) as u64),
                    rkey: a.peer.rkey,
                },
                vec![a.mr.sge(512 * 1024 + i * LEN, LEN as u32)],
            )
        })
        .collect();
    for chunk in reads.chunks(16) {
        a.qp.post_send_batch(chunk).unwrap();
        ok_wc(&a.cq.wait(chunk.len(), WAIT).unwrap());
    }
    assert_eq!(a.mr.read(512 * 1024, N * LEN).unwrap(), src, "READ data");
    (a.ctx.stats(), b.ctx.stats())
}

/// Whether engines here send with UDP GSO (the kernel has it and GRO).
fn gso_available() -> bool {
    Device::open_with("127.0.0.1:0".parse().unwrap(), EngineConfig::default())
        .unwrap()
        .with_engine(|e| e.gso())
}

/// IRN on real sockets (`QpBuilder::recovery`): loss, reordering and
/// duplication both ways, every WRITE, SEND and READ byte checked, and the
/// responder reports what it holds with NAKs.
#[test]
fn irn_under_loss_reorder_and_dup_delivers_everything() {
    let (a, b) = transfer_with(
        FaultConfig {
            loss: 0.03,
            reorder: 0.03,
            dup: 0.03,
            seed: 21,
            ..Default::default()
        },
        Recovery::Irn,
    );
    assert!(a.faults.lost > 0 && a.retransmissions > 0);
    assert!(
        b.naks_tx > 0,
        "out-of-order requests are NAKed with what is held"
    );
}

#[test]
fn one_percent_loss_delivers_everything() {
    let (a, b) = transfer_under(FaultConfig {
        loss: 0.01,
        seed: 11,
        ..Default::default()
    });
    assert!(a.faults.lost + b.faults.lost > 0);
    assert!(a.retransmissions + b.retransmissions > 0);
}

#[test]
fn five_percent_loss_reorder_and_dup_deliver_everything() {
    let (a, b) = transfer_under(FaultConfig {
        loss: 0.05,
        reorder: 0.05,
        dup: 0.05,
        seed: 12,
        ..Default::default()
    });
    let f = |s: &Stats| s.faults;
    assert!(f(&a).lost > 0 && f(&a).reordered > 0 && f(&a).duplicated > 0);
    assert!(a.retransmissions > 0);
    assert!(b.duplicates + a.duplicates > 0 || b.out_of_sequence + a.out_of_sequence > 0);
    let _ = b;
}

#[test]
fn corruption_is_caught_by_the_icrc_and_retransmitted() {
    let (a, b) = transfer_under(FaultConfig {
        corrupt: 0.05,
        seed: 13,
        ..Default::default()
    });
    let corrupted = a.faults.corrupted + b.faults.corrupted;
    assert!(corrupted > 0);
    // Where the kernel has UDP GSO/GRO, corrupted segments went inside GSO
    // sends and GRO buffers too, and were caught there.
    if gso_available() {
        assert!(a.tx_gso_sends > 0 && b.rx_gro_buffers > 0, "{a:?} {b:?}");
    }
    // A flipped bit in the masked BTH byte 4 (FECN/BECN) is legitimately
    // invisible to the ICRC; every other flip must be refused.
    let refused = a.icrc_errors + b.icrc_errors + a.malformed + b.malformed;
    assert!(
        refused > 0 && refused <= corrupted,
        "{refused} of {corrupted}"
    );
    assert!(a.retransmissions > 0);
}

#[test]
fn wrong_rkey_gives_rem_access_err_and_writes_nothing() {
    let (a, b) = pair(Opts::default());
    let _drive_b = b.ctx.spawn_progress(false);
    a.mr.write(0, &pattern(5, 1024)).unwrap();
    let wr = SendWr::new(
        1,
        WrOpcode::RdmaWrite {
            remote_addr: a.peer.addr,
            rkey: a.peer.rkey ^ 0x5a5a,
        },
        vec![a.mr.sge(0, 1024)],
    );
    a.qp.post_send(&wr).unwrap();
    let wc = a.cq.wait(1, WAIT).unwrap();
    assert_eq!(wc[0].status, WcStatus::RemAccessErr);
    assert!(b.mr.read(0, b.mr.len()).unwrap().iter().all(|&x| x == 0));
    // Out of bounds with the right key: refused too.
    let (a, b) = pair(Opts::default());
    let _drive_b = b.ctx.spawn_progress(false);
    let wr = SendWr::new(
        2,
        WrOpcode::RdmaWrite {
            remote_addr: a.peer.addr + a.peer.len - 100,
            rkey: a.peer.rkey,
        },
        vec![a.mr.sge(0, 1024)],
    );
    a.qp.post_send(&wr).unwrap();
    assert_eq!(
        a.cq.wait(1, WAIT).unwrap()[0].status,
        WcStatus::RemAccessErr
    );
    assert!(b.mr.read(0, b.mr.len()).unwrap().iter().all(|&x| x == 0));
}

#[test]
fn garbage_truncated_and_unknown_qp_packets_are_counted_and_dropped() {
    let (a, b) = pair(Opts::default());
    let _drive_b = b.ctx.spawn_progress(false);
    let target = b.ctx.local_addr();
    // From another IP (a stranger on the same IP but another port is
    // refused too: `forged_cnps_acks_and_naks_from_a_stranger_change_nothing`).
    let raw = UdpSocket::bind("127.0.0.3:0").unwrap();
    let raw_addr = raw.local_addr().unwrap();
    // Garbage of several sizes, including empty and one byte.
    for len in [0usize, 1, 11, 12, 40, 1500] {
        raw.send_to(&pattern(len as u8, len), target).unwrap();
    }
    // A well-formed WRITE with a valid ICRC, for a QP that does not exist…
    let mut repr = roce_wire::TransportRepr::new(roce_wire::BthRepr {
        opcode: roce_wire::Opcode::RcWriteOnly,
        dest_qp: 0x00ab_cdef,
        psn: roce_wire::Psn::new(1),
        pkey: 0xffff,
        ..Default::default()
    });
    repr.reth = Some(roce_wire::RethRepr {
        va: b.mr.addr(),
        rkey: b.mr.rkey(),
        dma_len: 16,
    });
    let t = roce_rnic::Transmit {
        dst: target,
        udp_sport: 1,
        dscp: 0,
        ecn_capable: false,
        src_qpn: 1,
        repr,
        payload: roce_rnic::Payload::Bytes(vec![0xee; 16]),
    };
    let d = packet::build(t.clone(), raw_addr).unwrap();
    raw.send_to(&d.to_vec(&roce_rnic::RealMemory::new()), target)
        .unwrap();
    // …the same packet truncated (ICRC gone, PadCnt too large for what is left)…
    let full = d.to_vec(&roce_rnic::RealMemory::new());
    raw.send_to(&full[..full.len() - 6], target).unwrap();
    // …and aimed at the live QP from a stranger: the ICRC is fine, but the
    // source is not the QP's peer, so nothing may be written.
    let mut live = t;
    live.repr.bth.dest_qp = a.peer.qpn;
    let d = packet::build(live, raw_addr).unwrap();
    raw.send_to(&d.to_vec(&roce_rnic::RealMemory::new()), target)
        .unwrap();

    // The live QP still works.
    a.mr.write(0, &pattern(8, 2048)).unwrap();
    let wr = SendWr::new(
        1,
        WrOpcode::RdmaWrite {
            remote_addr: a.peer.remote_addr(4096),
            rkey: a.peer.rkey,
        },
        vec![a.mr.sge(0, 2048)],
    );
    a.qp.post_send(&wr).unwrap();
    ok_wc(&a.cq.wait(1, WAIT).unwrap());
    assert_eq!(b.mr.read(4096, 2048).unwrap(), pattern(8, 2048));
    // Wait until B has read all nine datagrams (they raced the WRITE).
    let deadline = std::time::Instant::now() + WAIT;
    let mut s = b.ctx.stats();
    while s.malformed + s.icrc_errors + s.unknown_qp + s.dropped_other < 9
        && std::time::Instant::now() < deadline
    {
        std::thread::sleep(std::time::Duration::from_millis(1));
        s = b.ctx.stats();
    }
    assert_eq!(s.unknown_qp, 1, "{s:?}");
    assert_eq!(s.dropped_other, 1, "{s:?}");
    assert_eq!(s.malformed + s.icrc_errors, 7, "{s:?}");
    assert!(b.mr.read(0, 4096).unwrap().iter().all(|&x| x == 0));
}

/// A probe for exploring fault mixes by hand, e.g.
/// `LOSS=0.05 REORDER=0.05 SEED=3 cargo test -p roce-verbs --test faults -- --ignored probe`.
#[test]
#[ignore]
fn probe() {
    let v = |k: &str| {
        std::env::var(k)
            .ok()
            .and_then(|s| s.parse().ok())
            .unwrap_or(0.0)
    };
    let (a, b) = transfer_under(FaultConfig {
        loss: v("LOSS"),
        reorder: v("REORDER"),
        dup: v("DUP"),
        corrupt: v("CORRUPT"),
        seed: v("SEED") as u64,
        ..Default::default()
    });
    eprintln!("{a:?}\n{b:?}");
}

#[test]
fn ce_marks_are_read_from_the_socket_and_answered_with_cnps() {
    let mut o = Opts::default();
    o.cfg_a.faults = FaultConfig {
        ce_mark: 1.0,
        ..Default::default()
    };
    let (a, b) = pair(o);
    let _drive_b = b.ctx.spawn_progress(false);
    a.mr.write(0, &pattern(3, 8192)).unwrap();
    let wr = SendWr::new(
        1,
        WrOpcode::RdmaWrite {
            remote_addr: a.peer.addr,
            rkey: a.peer.rkey,
        },
        vec![a.mr.sge(0, 8192)],
    );
    a.qp.post_send(&wr).unwrap();
    ok_wc(&a.cq.wait(1, WAIT).unwrap());
    assert_eq!(b.mr.read(0, 8192).unwrap(), pattern(3, 8192));
    let deadline = std::time::Instant::now() + WAIT;
    while a.ctx.stats().cnps_rx == 0 && std::time::Instant::now() < deadline {
        a.ctx.progress().unwrap();
    }
    let (sa, sb) = (a.ctx.stats(), b.ctx.stats());
    assert!(sa.faults.ce_marked >= 8, "{sa:?}");
    // With GRO the marks arrive on coalesced buffers: the TOS message must
    // still be read beside the GRO one.
    if a.ctx.with_engine(|e| e.gso()) {
        assert!(sb.rx_gro_buffers >= 1, "{sb:?}");
    }
    assert_eq!(sa.cmsg_truncated + sb.cmsg_truncated, 0);
    // The CE mark survived the kernel both ways: B read it from IP_TOS…
    assert!(sb.ce_rx >= 8, "{sb:?}");
    // …answered with a CNP (paced per QP), and A received it.
    assert!(sb.cnps_tx >= 1 && sa.cnps_rx >= 1, "{sa:?} {sb:?}");
    assert_eq!(sa.icrc_errors + sb.icrc_errors, 0);
}

/// A packet for `dest_qp` at `to`, built and sealed (valid ICRC) as if sent
/// from `from`.
fn forged_datagram(from: SocketAddr, to: SocketAddr, repr: roce_wire::TransportRepr) -> Vec<u8> {
    let t = roce_rnic::Transmit {
        dst: to,
        udp_sport: from.port(),
        dscp: 0,
        ecn_capable: false,
        src_qpn: 1,
        repr,
        payload: roce_rnic::Payload::Bytes(Vec::new()),
    };
    packet::build(t, from)
        .unwrap()
        .to_vec(&roce_rnic::RealMemory::new())
}

fn forged_cnp(dest_qp: u32) -> roce_wire::TransportRepr {
    roce_wire::TransportRepr::new(roce_wire::BthRepr {
        opcode: roce_wire::Opcode::Cnp,
        dest_qp,
        becn: true,
        pkey: 0xffff,
        ..Default::default()
    })
}

fn forged_ack(dest_qp: u32, psn: u32, syndrome: roce_wire::Syndrome) -> roce_wire::TransportRepr {
    let mut t = roce_wire::TransportRepr::new(roce_wire::BthRepr {
        opcode: roce_wire::Opcode::RcAck,
        dest_qp,
        psn: roce_wire::Psn::new(psn),
        pkey: 0xffff,
        ..Default::default()
    });
    t.aeth = Some(roce_wire::AethRepr { syndrome, msn: 1 });
    t
}

/// Issue 10: a CNP, an ACK or a NAK counts only from the QP's connected
/// peer. Two strangers (one on another IP, one on the peer's own IP with
/// another port) fire CNPs at both QPs and ACKs, sequence-error NAKs and
/// remote-access NAKs at the requester's live PSNs while it WRITEs 4 MiB:
/// not one is taken (no CNP or NAK counted, no WR completed early, the QP
/// alive), every one is counted as from a bad source, and
/// every byte arrives.
#[test]
fn forged_cnps_acks_and_naks_from_a_stranger_change_nothing() {
    use std::sync::atomic::{AtomicBool, Ordering};
    // Both sides run DCQCN: a forged CNP that counted would cut a rate.
    let dcqcn = CcSettings::new(
        roce_rnic::CcParams::new("dcqcn").build().unwrap().cc,
        10_000_000_000,
    );
    let mut o = Opts {
        buf: 4 << 20,
        timeout: 14,
        ..Default::default()
    };
    o.cfg_a.cc = dcqcn;
    o.cfg_b.cc = dcqcn;
    let (a, b) = pair(o);
    let _drive_b = b.ctx.spawn_progress(false);
    let (to_a, to_b) = (a.ctx.local_addr(), b.ctx.local_addr());
    let (qp_a, qp_b, psn_a) = (b.peer.qpn, a.peer.qpn, b.peer.psn);
    let strangers = [
        UdpSocket::bind("127.0.0.3:0").unwrap(),
        UdpSocket::bind("127.0.0.1:0").unwrap(),
    ];
    let stop = AtomicBool::new(false);
    let src = pattern(11, 4 << 20);
    a.mr.write(0, &src).unwrap();
    let (sent_a, sent_b) = std::thread::scope(|s| {
        let forger = s.spawn(|| {
            use roce_wire::{NakCode, Syndrome};
            let (mut sent_a, mut sent_b, mut k) = (0u64, 0u64, 0u32);
            while !stop.load(Ordering::Relaxed) {
                for raw in &strangers {
                    let me = raw.local_addr().unwrap();
                    let psn = (psn_a + k * 7) & 0xff_ffff;
                    let to_requester = [
                        forged_cnp(qp_a),
                        forged_ack(qp_a, psn, Syndrome::Ack { credits: 31 }),
                        forged_ack(qp_a, psn, Syndrome::Nak(NakCode::PsnSequenceError)),
                        forged_ack(qp_a, psn, Syndrome::Nak(NakCode::RemoteAccessError)),
                    ];
                    for r in to_requester {
                        raw.send_to(&forged_datagram(me, to_a, r), to_a).unwrap();
                        sent_a += 1;
                    }
                    raw.send_to(&forged_datagram(me, to_b, forged_cnp(qp_b)), to_b)
                        .unwrap();
                    sent_b += 1;
                }
                k += 1;
                std::thread::sleep(std::time::Duration::from_micros(200));
            }
            (sent_a, sent_b)
        });
        // Stops the forger however this closure ends (a failed assertion
        // must fail the test, not leave the scope waiting for the forger).
        struct Stop<'a>(&'a AtomicBool);
        impl Drop for Stop<'_> {
            fn drop(&mut self) {
                self.0.store(true, Ordering::Relaxed);
            }
        }
        let stop_forger = Stop(&stop);
        // 4 MiB in 64 KiB WRITEs, 16 in flight at a time.
        let wrs: Vec<SendWr> = (0..64)
            .map(|i| {
                let off = i * 65536;
                SendWr::new(
                    i as u64,
                    WrOpcode::RdmaWrite {
                        remote_addr: a.peer.remote_addr(off as u64),
                        rkey: a.peer.rkey,
                    },
                    vec![a.mr.sge(off, 65536)],
                )
            })
            .collect();
        for chunk in wrs.chunks(16) {
            a.qp.post_send_batch(chunk).unwrap();
            let wcs = a.cq.wait(chunk.len(), WAIT).unwrap();
            ok_wc(&wcs);
            let ids: Vec<u64> = wcs.iter().map(|w| w.wr_id).collect();
            let want: Vec<u64> = chunk.iter().map(|w| w.wr_id).collect();
            assert_eq!(ids, want, "completions in order, none early");
        }
        drop(stop_forger);
        forger.join().unwrap()
    });
    assert_eq!(b.mr.read(0, 4 << 20).unwrap(), src, "every byte");
    // Everything the strangers sent has been read and refused.
    let deadline = std::time::Instant::now() + WAIT;
    let (mut sa, mut sb) = (a.ctx.stats(), b.ctx.stats());
    while (sa.bad_source < sent_a || sb.bad_source < sent_b) && std::time::Instant::now() < deadline
    {
        a.ctx.progress().unwrap();
        std::thread::sleep(std::time::Duration::from_millis(1));
        (sa, sb) = (a.ctx.stats(), b.ctx.stats());
    }
    assert!(
        sent_a >= 8 && sent_b >= 2,
        "the forger ran ({sent_a}, {sent_b})"
    );
    assert_eq!(
        (sa.bad_source, sb.bad_source),
        (sent_a, sent_b),
        "{sa:?} {sb:?}"
    );
    assert_eq!((sa.cnps_rx, sb.cnps_rx), (0, 0), "no forged CNP counted");
    for q in [&a.qp, &b.qp] {
        let c = q.cc_stats().unwrap();
        assert_eq!(
            (c.algorithm, c.rate_cuts, c.min_rate_bps),
            ("dcqcn", 0, None),
            "no forged CNP cut a rate"
        );
    }
    assert_eq!((sa.naks_rx, sa.rnr_naks_rx), (0, 0), "no forged NAK taken");
    assert_eq!(a.qp.state().unwrap(), QpState::Rts);
}
