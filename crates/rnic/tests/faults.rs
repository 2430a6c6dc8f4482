//! Reliability under loss, reordering, duplication and corruption: every
//! message arrives exactly once with the right bytes and completions come in
//! order — or, once retries run out, the QP fails with the right status.

use proptest::prelude::*;
use roce_rnic::pair::{Endpoint, LinkConfig, Pair, RcOptions};
use roce_rnic::*;

#[derive(Debug, Clone)]
enum Op {
    Send(u32),
    Write(u32),
    WriteImm(u32),
    Read(u32),
    FetchAdd(u64),
    /// Compare-and-swap on the shared counter: whether the compare value
    /// is the counter's value at that point (the swap happens), and the swap value.
    CmpSwap(bool, u64),
}

fn arb_op() -> impl Strategy<Value = Op> {
    prop_oneof![
        (0u32..6000).prop_map(Op::Send),
        (0u32..9000).prop_map(Op::Write),
        (1u32..3000).prop_map(Op::WriteImm),
        (0u32..7000).prop_map(Op::Read),
        (1u64..1000).prop_map(Op::FetchAdd),
        (any::<bool>(), 0u64..1 << 40).prop_map(|(hit, swap)| Op::CmpSwap(hit, swap)),
    ]
}

const SLOT: u64 = 10_000;

/// Runs `ops` from A to B and checks the outcome byte for byte.
fn run(
    ops: &[Op],
    link: LinkConfig,
    mtu: Mtu,
    psn_a: u32,
) -> std::result::Result<(), TestCaseError> {
    run_with(ops, link, mtu, psn_a, Recovery::GoBackN).map(|_| ())
}

/// [`run`] with a loss-recovery mode; returns A's counters, or `None` when
/// the run ended in (acceptable) retry exhaustion.
fn run_with(
    ops: &[Op],
    link: LinkConfig,
    mtu: Mtu,
    psn_a: u32,
    recovery: Recovery,
) -> std::result::Result<Option<Counters>, TestCaseError> {
    run_cfg(ops, link, mtu, psn_a, recovery, RnicConfig::default())
}

/// [`run_with`] on RNICs configured by `cfg` (IRN's BDP cap, for one).
fn run_cfg(
    ops: &[Op],
    link: LinkConfig,
    mtu: Mtu,
    psn_a: u32,
    recovery: Recovery,
    cfg: RnicConfig,
) -> std::result::Result<Option<Counters>, TestCaseError> {
    let mut p = Pair::with_config(link, cfg);
    let o = RcOptions {
        recovery,
        mtu,
        buf_len: (ops.len() as u64 * SLOT + 64) as usize,
        psn_a,
        psn_b: psn_a ^ 0x55_5555,
        timeout: 6,
        ..Default::default()
    };
    let (a, b) = p.rc_pair(&o).unwrap();
    let counter = ops.len() as u64 * SLOT;
    let mut want_b = vec![0u8; o.buf_len];
    let mut want_a = vec![0u8; o.buf_len];
    let mut expected_recv = Vec::new();
    let mut sum = 0u64;
    let mut wrs = Vec::new();
    for (i, op) in ops.iter().enumerate() {
        let off = i as u64 * SLOT;
        let seed = i as u8;
        let data = |n: u32| {
            (0..n)
                .map(|j| (j as u8) ^ seed.wrapping_mul(13))
                .collect::<Vec<u8>>()
        };
        let wr_id = i as u64;
        let (wr, _) = match *op {
            Op::Send(n) => {
                let d = data(n);
                p.a.mem_mut().set(a.buf + off, &d).unwrap();
                want_b[off as usize..(off + u64::from(n)) as usize].copy_from_slice(&d);
                p.b.post_recv(
                    b.qpn,
                    &[RecvWr {
                        wr_id,
                        sg_list: vec![b.sge(off, SLOT as u32)],
                    }],
                )
                .unwrap();
                expected_recv.push((wr_id, n, WcOpcode::Recv));
                (SendWr::new(wr_id, WrOpcode::Send, vec![a.sge(off, n)]), ())
            }
            Op::Write(n) | Op::WriteImm(n) => {
                let d = data(n);
                p.a.mem_mut().set(a.buf + off, &d).unwrap();
                want_b[off as usize..(off + u64::from(n)) as usize].copy_from_slice(&d);
                let op = if let Op::WriteImm(_) = op {
                    p.b.post_recv(
                        b.qpn,
                        &[RecvWr {
                            wr_id,
                            sg_list: vec![],
                        }],
                    )
                    .unwrap();
                    expected_recv.push((wr_id, n, WcOpcode::RecvRdmaWithImm));
                    WrOpcode::RdmaWriteWithImm {
                        remote_addr: b.buf + off,
                        rkey: b.mr.rkey,
                        imm: i as u32,
                    }
                } else {
                    WrOpcode::RdmaWrite {
                        remote_addr: b.buf + off,
                        rkey: b.mr.rkey,
                    }
                };
                (SendWr::new(wr_id, op, vec![a.sge(off, n)]), ())
            }
            Op::Read(n) => {
                let d = data(n);
                p.b.mem_mut().set(b.buf + off, &d).unwrap();
                want_b[off as usize..(off + u64::from(n)) as usize].copy_from_slice(&d);
                want_a[off as usize..(off + u64::from(n)) as usize].copy_from_slice(&d);
                (
                    SendWr::new(
                        wr_id,
                        WrOpcode::RdmaRead {
                            remote_addr: b.buf + off,
                            rkey: b.mr.rkey,
                        },
                        vec![a.sge(off, n)],
                    ),
                    (),
                )
            }
            Op::FetchAdd(x) => {
                want_a[off as usize..off as usize + 8].copy_from_slice(&sum.to_le_bytes());
                sum = sum.wrapping_add(x);
                (
                    SendWr::new(
                        wr_id,
                        WrOpcode::AtomicFetchAndAdd {
                            remote_addr: b.buf + counter,
                            rkey: b.mr.rkey,
                            add: x,
                        },
                        vec![a.sge(off, 8)],
                    ),
                    (),
                )
            }
            Op::CmpSwap(hit, swap) => {
                want_a[off as usize..off as usize + 8].copy_from_slice(&sum.to_le_bytes());
                let compare = if hit { sum } else { sum.wrapping_add(1) };
                if hit {
                    sum = swap;
                }
                (
                    SendWr::new(
                        wr_id,
                        WrOpcode::AtomicCmpAndSwp {
                            remote_addr: b.buf + counter,
                            rkey: b.mr.rkey,
                            compare,
                            swap,
                        },
                        vec![a.sge(off, 8)],
                    ),
                    (),
                )
            }
        };
        wrs.push(wr);
    }
    want_b[counter as usize..counter as usize + 8].copy_from_slice(&sum.to_le_bytes());
    for w in wrs {
        p.a.post_send(a.qpn, &[w]).unwrap();
    }
    let idle = p.drive();
    if std::env::var("DEBUG_PAIR").is_ok() {
        eprintln!("{}", p.a.debug_qp(a.qpn));
        eprintln!("{}", p.b.debug_qp(b.qpn));
        eprintln!("{:?}\n{:?}\n{:?}", p.stats, p.a.counters(), p.b.counters());
    }
    prop_assert!(idle, "pair never went idle");
    let wa = p.a.poll_cq(a.cq, 10_000);
    let wb = p.b.poll_cq(b.cq, 10_000);
    if let Some(bad) = wa.iter().find(|w| w.status != WcStatus::Success) {
        if std::env::var("DEBUG_PAIR").is_ok() {
            eprintln!("RETRY-EXHAUSTED {:?} {:?}", p.stats, p.a.counters());
        }
        // Only retry exhaustion is an acceptable failure, and only with real faults.
        prop_assert!(
            matches!(bad.status, WcStatus::RetryExcErr),
            "unexpected failure {bad:?}"
        );
        prop_assert!(link.loss > 0.0 || link.corrupt > 0.0);
        prop_assert_eq!(p.a.qp_state(a.qpn).unwrap(), QpState::Err);
        return Ok(None);
    }
    // Completions: every WR exactly once, in order.
    let ids: Vec<u64> = wa.iter().map(|w| w.wr_id).collect();
    prop_assert_eq!(ids, (0..ops.len() as u64).collect::<Vec<_>>());
    let got: Vec<(u64, u32, WcOpcode)> =
        wb.iter().map(|w| (w.wr_id, w.byte_len, w.opcode)).collect();
    prop_assert_eq!(got, expected_recv);
    prop_assert!(wb.iter().all(|w| w.status == WcStatus::Success));
    // Memory: exactly right on both sides (atomics applied exactly once).
    let mb = p.b.mem().get(b.buf, o.buf_len).unwrap();
    let ma = p.a.mem().get(a.buf, o.buf_len).unwrap();
    for (i, op) in ops.iter().enumerate() {
        let r = i * SLOT as usize..(i + 1) * SLOT as usize;
        match op {
            Op::Read(_) | Op::FetchAdd(_) | Op::CmpSwap(..) => prop_assert!(
                ma[r.clone()] == want_a[r.clone()],
                "A slot {} ({:?})",
                i,
                op
            ),
            _ => prop_assert!(
                mb[r.clone()] == want_b[r.clone()],
                "B slot {} ({:?})",
                i,
                op
            ),
        }
    }
    prop_assert_eq!(
        &mb[counter as usize..counter as usize + 8],
        &want_b[counter as usize..counter as usize + 8]
    );
    prop_assert_eq!(
        p.b.counters().atomics_executed,
        ops.iter()
            .filter(|o| matches!(o, Op::FetchAdd(_) | Op::CmpSwap(..)))
            .count() as u64
    );
    Ok(Some(p.a.counters()))
}

fn mtu_of(i: u8) -> Mtu {
    [Mtu::Mtu256, Mtu::Mtu1024, Mtu::Mtu4096][usize::from(i % 3)]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: std::env::var("FAULT_CASES").ok().and_then(|v| v.parse().ok()).unwrap_or(48), ..ProptestConfig::default() })]

    #[test]
    fn exactly_once_under_faults(
        ops in proptest::collection::vec(arb_op(), 1..24),
        seed: u64,
        loss in 0.0f64..0.10,
        reorder in 0.0f64..0.10,
        dup in 0.0f64..0.10,
        corrupt in 0.0f64..0.03,
        mtu in 0u8..3,
        psn_a in prop_oneof![Just(Psn::MASK - 5), Just(Psn::MASK - 40), 0u32..Psn::MASK],
    ) {
        let link = LinkConfig { seed, loss, reorder, dup, corrupt, ..LinkConfig::default() };
        run(&ops, link, mtu_of(mtu), psn_a)?;
    }

    /// IRN (selective repeat) keeps the same exactly-once, in-order
    /// contract, also with BDP caps small enough that BDP-FC splits READs
    /// into several requests.
    #[test]
    fn irn_exactly_once_under_faults(
        ops in proptest::collection::vec(arb_op(), 1..24),
        seed: u64,
        loss in 0.0f64..0.10,
        reorder in 0.0f64..0.10,
        dup in 0.0f64..0.10,
        corrupt in 0.0f64..0.03,
        mtu in 0u8..3,
        psn_a in prop_oneof![Just(Psn::MASK - 5), Just(Psn::MASK - 40), 0u32..Psn::MASK],
        bdp_pkts in prop_oneof![Just(3u32), Just(8), Just(128)],
    ) {
        let link = LinkConfig { seed, loss, reorder, dup, corrupt, ..LinkConfig::default() };
        let cfg = RnicConfig {
            irn: IrnConfig { bdp_pkts, ..IrnConfig::default() },
            ..RnicConfig::default()
        };
        run_cfg(&ops, link, mtu_of(mtu), psn_a, Recovery::Irn, cfg)?;
    }
}

use roce_wire::Psn;

#[test]
fn clean_link_large_mix_across_psn_wrap() {
    let ops: Vec<Op> = (0..40)
        .map(|i| match i % 5 {
            0 => Op::Send(4000 + i),
            1 => Op::Write(9000),
            2 => Op::Read(6000),
            3 => Op::WriteImm(100),
            _ => Op::FetchAdd(u64::from(i)),
        })
        .collect();
    run(&ops, LinkConfig::default(), Mtu::Mtu256, Psn::MASK - 30).unwrap();
}

#[test]
fn heavy_loss_and_corruption_recover() {
    let ops: Vec<Op> = (0..30)
        .map(|i| {
            if i % 2 == 0 {
                Op::Write(5000)
            } else {
                Op::Read(5000)
            }
        })
        .collect();
    for seed in 0..5 {
        let link = LinkConfig {
            seed,
            loss: 0.1,
            corrupt: 0.05,
            reorder: 0.1,
            dup: 0.05,
            ..LinkConfig::default()
        };
        run(&ops, link, Mtu::Mtu1024, 1000).unwrap();
    }
}

#[test]
fn corruption_is_caught_by_icrc_and_retransmitted() {
    let mut p = Pair::new(LinkConfig {
        corrupt: 0.2,
        seed: 3,
        ..LinkConfig::default()
    });
    let (a, b) = p
        .rc_pair(&RcOptions {
            timeout: 4,
            ..Default::default()
        })
        .unwrap();
    let d: Vec<u8> = (0..30_000u32).map(|i| (i % 253) as u8).collect();
    p.a.mem_mut().set(a.buf, &d).unwrap();
    p.a.post_send(
        a.qpn,
        &[SendWr::new(
            1,
            WrOpcode::RdmaWrite {
                remote_addr: b.buf,
                rkey: b.mr.rkey,
            },
            vec![a.sge(0, 30_000)],
        )],
    )
    .unwrap();
    assert!(p.drive());
    assert_eq!(p.a.poll_cq(a.cq, 4)[0].status, WcStatus::Success);
    assert_eq!(p.b.mem().get(b.buf, 30_000).unwrap(), &d[..]);
    assert!(
        p.stats.corrupted > 0 && p.stats.rejected > 0,
        "{:?}",
        p.stats
    );
    assert!(p.a.counters().retransmits > 0);
}

#[test]
fn dead_link_exhausts_retries() {
    let mut p = Pair::new(LinkConfig::default());
    let (a, b) = p
        .rc_pair(&RcOptions {
            retry_cnt: 3,
            timeout: 4,
            ..Default::default()
        })
        .unwrap();
    p.link.loss = 1.0;
    let wrs = vec![
        SendWr::new(
            1,
            WrOpcode::RdmaWrite {
                remote_addr: b.buf,
                rkey: b.mr.rkey,
            },
            vec![a.sge(0, 100)],
        ),
        SendWr::new(
            2,
            WrOpcode::RdmaWrite {
                remote_addr: b.buf,
                rkey: b.mr.rkey,
            },
            vec![a.sge(0, 100)],
        ),
    ];
    p.a.post_send(a.qpn, &wrs).unwrap();
    assert!(p.drive());
    let wc = p.a.poll_cq(a.cq, 4);
    assert_eq!(
        wc.iter().map(|w| w.status).collect::<Vec<_>>(),
        vec![WcStatus::RetryExcErr, WcStatus::WrFlushErr]
    );
    assert_eq!(
        p.a.counters().timeouts,
        4,
        "retry_cnt 3 means 3 retries after the first timeout"
    );
    assert_eq!(p.a.qp_state(a.qpn).unwrap(), QpState::Err);
    // 4.096 us * 2^4 = 65.5 us per timeout, four of them.
    assert!(p.now >= 4 * 65_536 && p.now < 5 * 65_536, "now = {}", p.now);
}

#[test]
fn same_seed_same_run() {
    let trace = |seed| {
        let mut p = Pair::new(LinkConfig {
            seed,
            loss: 0.05,
            reorder: 0.05,
            dup: 0.05,
            ..LinkConfig::default()
        });
        p.capture = Some(Vec::new());
        let (a, b): (Endpoint, Endpoint) = p.rc_pair(&RcOptions::default()).unwrap();
        for i in 0..20 {
            p.a.post_send(
                a.qpn,
                &[SendWr::new(
                    i,
                    WrOpcode::RdmaWrite {
                        remote_addr: b.buf,
                        rkey: b.mr.rkey,
                    },
                    vec![a.sge(0, 3000)],
                )],
            )
            .unwrap();
        }
        p.drive();
        (p.now, p.capture.take().unwrap(), p.a.counters())
    };
    assert_eq!(trace(7), trace(7));
    assert_ne!(trace(7).1, trace(8).1);
}

#[test]
fn regression_stuck_after_read() {
    use Op::*;
    let ops = vec![
        WriteImm(1),
        Send(0),
        WriteImm(1),
        WriteImm(1),
        Send(0),
        WriteImm(1),
        Send(0),
        FetchAdd(1),
        WriteImm(2),
        FetchAdd(337),
        Read(554),
        Send(2004),
        Send(677),
        FetchAdd(730),
        Write(7415),
        Read(1106),
        WriteImm(2463),
        FetchAdd(165),
        Read(4811),
        Read(6434),
    ];
    let link = LinkConfig {
        seed: 4560873547182345527,
        loss: 0.05200234456518179,
        reorder: 0.053933721347731285,
        dup: 0.03149153936524365,
        corrupt: 0.025211592737650185,
        ..LinkConfig::default()
    };
    run(&ops, link, Mtu::Mtu4096, 16777210).unwrap();
}

#[test]
fn regression_flush_without_cause() {
    use Op::*;
    let ops = vec![
        FetchAdd(1),
        Read(2049),
        Read(1025),
        Write(7169),
        Send(3073),
        WriteImm(2461),
        Write(1465),
        WriteImm(2549),
        Send(1389),
        WriteImm(1937),
        Send(4337),
        Read(0),
        FetchAdd(1),
        Send(4097),
        Write(7449),
        WriteImm(461),
    ];
    let link = LinkConfig {
        seed: 7368124926038734819,
        loss: 0.09562688012089259,
        reorder: 0.07034340543278111,
        dup: 0.053720855647334594,
        corrupt: 0.01581922154768447,
        ..LinkConfig::default()
    };
    run(&ops, link, Mtu::Mtu1024, 16777210).unwrap();
}

#[test]
fn many_outstanding_reads_under_loss_never_exceed_responder_resources() {
    // 16 READs in flight (max_rd_atomic = max_dest_rd_atomic = 16) while
    // losses make the responder replay: replays must not count as new reads.
    let ops: Vec<Op> = (0..64).map(|_| Op::Read(3000)).collect();
    for seed in 0..6 {
        let link = LinkConfig {
            seed,
            loss: 0.08,
            dup: 0.05,
            ..LinkConfig::default()
        };
        run(&ops, link, Mtu::Mtu1024, 77).unwrap();
    }
}

#[test]
fn regression_invalid_request_after_rewind() {
    use Op::*;
    let ops = vec![
        Read(4097),
        Send(4097),
        Send(117),
        Write(5213),
        Send(1865),
        Write(1849),
        FetchAdd(1),
        Read(4157),
        Write(5225),
        Send(2265),
        FetchAdd(1),
        WriteImm(1073),
        Send(4017),
        WriteImm(2373),
        Read(0),
        Write(4849),
        FetchAdd(1),
        Write(3225),
        Send(2853),
    ];
    let link = LinkConfig {
        seed: 8237740245711132495,
        loss: 0.03273236555774851,
        reorder: 0.023908358255810194,
        dup: 0.036139046428145284,
        corrupt: 0.016565560798404627,
        ..LinkConfig::default()
    };
    run(&ops, link, Mtu::Mtu4096, 16777210).unwrap();
}

/// IRN against go-back-N on the same faulty links (IRN §5): every byte
/// exactly once in both, and selective repeat resends fewer packets.
#[test]
fn irn_delivers_with_fewer_retransmissions_than_go_back_n() {
    let ops: Vec<Op> = (0..40)
        .map(|i| match i % 5 {
            0 => Op::Send(5000),
            1 => Op::Write(9000),
            2 => Op::Read(7000),
            3 => Op::WriteImm(2000),
            _ => Op::FetchAdd(i as u64 + 1),
        })
        .collect();
    let (mut gbn, mut irn) = (0u64, 0u64);
    for seed in 0..8 {
        let link = LinkConfig {
            seed,
            loss: 0.02,
            reorder: 0.02,
            dup: 0.02,
            ..LinkConfig::default()
        };
        let g = run_with(&ops, link, Mtu::Mtu1024, 0x100, Recovery::GoBackN)
            .unwrap()
            .expect("go-back-N finishes");
        let r = run_with(&ops, link, Mtu::Mtu1024, 0x100, Recovery::Irn)
            .unwrap()
            .expect("IRN finishes");
        gbn += g.retransmits;
        irn += r.retransmits;
    }
    eprintln!("retransmitted packets over 8 seeds: go-back-N {gbn}, IRN {irn}");
    assert!(irn > 0, "the links lost packets, IRN must have resent some");
    assert!(
        irn < gbn,
        "IRN resent {irn} packets, go-back-N {gbn}: selective repeat should resend fewer"
    );
}

/// Heavy loss, reordering and duplication: IRN must finish every run
/// (no retry exhaustion) with every byte right.
#[test]
fn irn_finishes_under_heavy_faults() {
    let ops: Vec<Op> = (0..30)
        .map(|i| match i % 4 {
            0 => Op::Write(8000),
            1 => Op::Read(8000),
            2 => Op::Send(5000),
            _ => Op::FetchAdd(3),
        })
        .collect();
    for seed in 0..6 {
        let link = LinkConfig {
            seed,
            loss: 0.05,
            reorder: 0.05,
            dup: 0.05,
            ..LinkConfig::default()
        };
        let c = run_with(&ops, link, Mtu::Mtu256, Psn::MASK - 20, Recovery::Irn)
            .unwrap()
            .expect("IRN finishes");
        assert!(c.naks_rx > 0, "out-of-order arrivals are reported by NAK");
    }
}

/// The same with a BDP cap of 4 packets: every READ (32 responses at MTU
/// 256) is asked for in BDP-FC segments, lost segment requests and
/// responses included, and each READ still completes once, every byte right.
#[test]
fn irn_split_reads_finish_under_heavy_faults() {
    let ops: Vec<Op> = (0..24)
        .map(|i| match i % 4 {
            0 => Op::Read(8000),
            1 => Op::Write(3000),
            2 => Op::CmpSwap(i % 8 == 2, 1000 + i),
            _ => Op::Read(7777),
        })
        .collect();
    let cfg = RnicConfig {
        irn: IrnConfig {
            bdp_pkts: 4,
            ..IrnConfig::default()
        },
        ..RnicConfig::default()
    };
    for seed in 0..6 {
        let link = LinkConfig {
            seed,
            loss: 0.05,
            reorder: 0.05,
            dup: 0.05,
            ..LinkConfig::default()
        };
        let c = run_cfg(
            &ops,
            link,
            Mtu::Mtu256,
            Psn::MASK - 20,
            Recovery::Irn,
            cfg.clone(),
        )
        .unwrap()
        .expect("IRN finishes");
        assert!(c.retransmits > 0, "seed {seed}: the link lost packets");
    }
}

/// IRN's SACK NAKs go out when the hole set changes (or a held packet asks
/// for an ACK), not once per out-of-order packet, and the runs they report
/// keep the requester from resending what the responder holds: on a long
/// lossy WRITE stream most arrivals sit behind a hole, yet NAKs stay a
/// small fraction of them and the resends stay near the packets lost.
#[test]
fn irn_naks_follow_holes_not_out_of_order_packets() {
    const MSG: u32 = 64 * 1024;
    const MSGS: u64 = 48;
    for seed in 0..4 {
        let link = LinkConfig {
            seed,
            loss: 0.01,
            // A long wire, so a BDP of packets is in flight behind each hole.
            latency_ns: 50_000,
            ..LinkConfig::default()
        };
        let mut p = Pair::new(link);
        let o = RcOptions {
            recovery: Recovery::Irn,
            mtu: Mtu::Mtu1024,
            buf_len: (MSGS * u64::from(MSG)) as usize,
            max_send_wr: MSGS as u32,
            timeout: 8,
            ..Default::default()
        };
        let (a, b) = p.rc_pair(&o).unwrap();
        let d: Vec<u8> = (0..o.buf_len)
            .map(|i| (i * 7 + seed as usize) as u8)
            .collect();
        p.a.mem_mut().set(a.buf, &d).unwrap();
        let wrs: Vec<SendWr> = (0..MSGS)
            .map(|i| {
                let off = i * u64::from(MSG);
                SendWr::new(
                    i,
                    WrOpcode::RdmaWrite {
                        remote_addr: b.buf + off,
                        rkey: b.mr.rkey,
                    },
                    vec![a.sge(off, MSG)],
                )
            })
            .collect();
        p.a.post_send(a.qpn, &wrs).unwrap();
        assert!(p.drive(), "pair never went idle");
        let wa = p.a.poll_cq(a.cq, 10_000);
        assert_eq!(wa.len() as u64, MSGS);
        assert!(wa.iter().all(|w| w.status == WcStatus::Success), "{wa:?}");
        assert!(
            p.b.mem().get(b.buf, o.buf_len).unwrap() == &d[..],
            "seed {seed}: bytes differ"
        );
        let (ca, cb) = (p.a.counters(), p.b.counters());
        eprintln!(
            "seed {seed}: lost {} of {} frames, out of order {}, NAKs {}, resent {}",
            p.stats.lost, p.stats.frames, cb.out_of_sequence, cb.naks_tx, ca.retransmits
        );
        assert!(p.stats.lost > 0 && cb.out_of_sequence > 0);
        assert!(
            cb.naks_tx * 5 < cb.out_of_sequence,
            "seed {seed}: {} NAKs for {} out-of-order arrivals",
            cb.naks_tx,
            cb.out_of_sequence
        );
        assert!(
            ca.retransmits <= 3 * p.stats.lost,
            "seed {seed}: {} resent for {} lost",
            ca.retransmits,
            p.stats.lost
        );
    }
}

/// IRN's RTO_low is for few packets *in flight* (Mittal et al., SIGCOMM
/// 2018, §3.1): packets the responder reported holding have arrived and
/// PSNs of the message not sent yet have not left. A resend lost behind a
/// full BDP of held packets leaves one packet in flight and no later
/// packet that could reveal the loss (BDP-FC is closed), so the timer that
/// recovers it must be RTO_low, not RTO_high — counting every PSN from the
/// oldest unacknowledged to the message's end made it RTO_high.
#[test]
fn irn_lost_resend_behind_a_full_bdp_waits_rto_low() {
    const RTO_LOW: u64 = 100_000;
    const RTO_HIGH: u64 = 5_000_000;
    let cfg = RnicConfig {
        irn: IrnConfig {
            bdp_pkts: 8,
            rto_low_ns: RTO_LOW,
            rto_high_ns: RTO_HIGH,
            rto_low_pkts: 3,
        },
        ..Default::default()
    };
    let mut p = Pair::with_config(LinkConfig::default(), cfg);
    let o = RcOptions {
        recovery: Recovery::Irn,
        mtu: Mtu::Mtu1024,
        buf_len: 32 * 1024,
        timeout: 8,
        ..Default::default()
    };
    let (a, b) = p.rc_pair(&o).unwrap();
    let d: Vec<u8> = (0..o.buf_len).map(|i| (i * 13) as u8).collect();
    p.a.mem_mut().set(a.buf, &d).unwrap();
    // The message's first packet is lost, and so is its selective resend.
    p.drop_psns = vec![(0, o.psn_a), (0, o.psn_a)];
    let wr = SendWr::new(
        1,
        WrOpcode::RdmaWrite {
            remote_addr: b.buf,
            rkey: b.mr.rkey,
        },
        vec![a.sge(0, o.buf_len as u32)],
    );
    p.a.post_send(a.qpn, &[wr]).unwrap();
    assert!(p.drive(), "pair never went idle");
    let wc = p.a.poll_cq(a.cq, 4);
    assert_eq!(wc.len(), 1);
    assert_eq!(wc[0].status, WcStatus::Success);
    assert!(p.b.mem().get(b.buf, o.buf_len).unwrap() == &d[..]);
    assert!(p.drop_psns.is_empty(), "both drops happened");
    let c = p.a.counters();
    assert_eq!(c.timeouts, 1, "{c:?}");
    assert!(
        p.now >= RTO_LOW && p.now < RTO_HIGH,
        "finished at {} ns: RTO_low ({RTO_LOW} ns) should have fired, not RTO_high",
        p.now
    );
}
