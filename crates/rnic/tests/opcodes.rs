//! Every opcode end to end between two RNICs over the simulated wire,
//! byte-exact: multi-packet messages, SGE lists, inline, immediates, atomics.

use roce_rnic::pair::{Endpoint, LinkConfig, Pair, RcOptions};
use roce_rnic::*;

fn fill(p: &mut Pair, side: usize, addr: u64, len: usize, seed: u8) -> Vec<u8> {
    let data: Vec<u8> = (0..len)
        .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed))
        .collect();
    let r = if side == 0 { &mut p.a } else { &mut p.b };
    r.mem_mut().set(addr, &data).unwrap();
    data
}

fn get(p: &Pair, side: usize, addr: u64, len: usize) -> Vec<u8> {
    let r = if side == 0 { &p.a } else { &p.b };
    r.mem().get(addr, len).unwrap().to_vec()
}

fn setup(o: RcOptions) -> (Pair, Endpoint, Endpoint) {
    let mut p = Pair::new(LinkConfig::default());
    let (a, b) = p.rc_pair(&o).unwrap();
    (p, a, b)
}

#[test]
fn send_multi_packet_with_sge_lists_both_sides() {
    let (mut p, a, b) = setup(RcOptions::default());
    // 2500 bytes from three SGEs into two receive SGEs, MTU 1024: 3 packets.
    let d1 = fill(&mut p, 0, a.buf, 1000, 1);
    let d2 = fill(&mut p, 0, a.buf + 5000, 1000, 2);
    let d3 = fill(&mut p, 0, a.buf + 9000, 500, 3);
    p.b.post_recv(
        b.qpn,
        &[RecvWr {
            wr_id: 77,
            sg_list: vec![b.sge(0, 2000), b.sge(10_000, 1000)],
        }],
    )
    .unwrap();
    let wr = SendWr::new(
        1,
        WrOpcode::Send,
        vec![a.sge(0, 1000), a.sge(5000, 1000), a.sge(9000, 500)],
    );
    p.a.post_send(a.qpn, &[wr]).unwrap();
    assert!(p.drive());
    let wc = p.b.poll_cq(b.cq, 8);
    assert_eq!(wc.len(), 1);
    assert_eq!(
        (wc[0].wr_id, wc[0].status, wc[0].opcode, wc[0].byte_len),
        (77, WcStatus::Success, WcOpcode::Recv, 2500)
    );
    assert_eq!(wc[0].src_qp, a.qpn);
    let want: Vec<u8> = [d1, d2, d3].concat();
    let got = [get(&p, 1, b.buf, 2000), get(&p, 1, b.buf + 10_000, 500)].concat();
    assert_eq!(got, want);
    let wc = p.a.poll_cq(a.cq, 8);
    assert_eq!(
        (wc.len(), wc[0].wr_id, wc[0].status, wc[0].opcode),
        (1, 1, WcStatus::Success, WcOpcode::Send)
    );
    assert_eq!(p.a.counters().tx_pkts, 3);
}

#[test]
fn send_with_imm_and_inline_and_unsignaled() {
    let (mut p, a, b) = setup(RcOptions::default());
    let d = fill(&mut p, 0, a.buf, 40, 9);
    for i in 0..3 {
        p.b.post_recv(
            b.qpn,
            &[RecvWr {
                wr_id: 100 + i,
                sg_list: vec![b.sge(i * 64, 64)],
            }],
        )
        .unwrap();
    }
    let wrs = vec![
        SendWr::new(1, WrOpcode::SendWithImm(0xdead_beef), vec![a.sge(0, 40)]).unsignaled(),
        SendWr::new(2, WrOpcode::Send, vec![a.sge(0, 40)]).inline(),
        SendWr::new(3, WrOpcode::SendWithInv(0x1234), vec![a.sge(0, 8)]),
    ];
    p.a.post_send(a.qpn, &wrs).unwrap();
    // Inline data is copied at post time: overwriting the buffer now changes nothing.
    fill(&mut p, 0, a.buf, 40, 200);
    assert!(p.drive());
    let wc = p.b.poll_cq(b.cq, 8);
    assert_eq!(wc.len(), 3);
    assert!(wc[0].wc_flags.with_imm && wc[0].imm_data == 0xdead_beef);
    assert_eq!(wc[1].byte_len, 40);
    assert!(wc[2].wc_flags.with_inv && wc[2].imm_data == 0x1234);
    assert_eq!(get(&p, 1, b.buf + 64, 40), d);
    // Only the signaled WRs complete at the requester.
    let wc: Vec<u64> = p.a.poll_cq(a.cq, 8).iter().map(|w| w.wr_id).collect();
    assert_eq!(wc, vec![2, 3]);
}

/// Zero-copy memory (packets name ranges of host memory, read when sent)
/// must still snapshot inline data at post time: the application may reuse
/// the buffer as soon as `post_send` returns, even while the packet waits.
#[test]
fn inline_data_is_a_snapshot_with_zero_copy_memory() {
    let mut p = Pair::new(LinkConfig::default());
    p.a = Rnic::new(RnicConfig::default(), RealMemory::zero_copy());
    let (a, b) = p.rc_pair(&RcOptions::default()).unwrap();
    let d = fill(&mut p, 0, a.buf, 40, 9);
    p.b.post_recv(
        b.qpn,
        &[RecvWr {
            wr_id: 100,
            sg_list: vec![b.sge(0, 64)],
        }],
    )
    .unwrap();
    let w = SendWr::new(
        1,
        WrOpcode::RdmaWrite {
            remote_addr: b.buf + 128,
            rkey: b.mr.rkey,
        },
        vec![a.sge(0, 40)],
    )
    .inline();
    let s = SendWr::new(2, WrOpcode::Send, vec![a.sge(0, 40)]).inline();
    p.a.post_send(a.qpn, &[w, s]).unwrap();
    fill(&mut p, 0, a.buf, 40, 200);
    assert!(p.drive());
    assert_eq!(get(&p, 1, b.buf + 128, 40), d);
    assert_eq!(get(&p, 1, b.buf, 40), d);
}

#[test]
fn rdma_write_multi_packet_and_write_with_imm() {
    let (mut p, a, b) = setup(RcOptions::default());
    let d = fill(&mut p, 0, a.buf, 10_000, 5);
    let w1 = SendWr::new(
        1,
        WrOpcode::RdmaWrite {
            remote_addr: b.buf + 3,
            rkey: b.mr.rkey,
        },
        vec![a.sge(0, 10_000)],
    );
    let w2 = SendWr::new(
        2,
        WrOpcode::RdmaWriteWithImm {
            remote_addr: b.buf + 20_000,
            rkey: b.mr.rkey,
            imm: 42,
        },
        vec![a.sge(0, 100)],
    );
    p.b.post_recv(
        b.qpn,
        &[RecvWr {
            wr_id: 9,
            sg_list: vec![],
        }],
    )
    .unwrap();
    p.a.post_send(a.qpn, &[w1, w2]).unwrap();
    assert!(p.drive());
    assert_eq!(get(&p, 1, b.buf + 3, 10_000), d);
    assert_eq!(
        get(&p, 1, b.buf, 3),
        vec![0; 3],
        "nothing written before the target"
    );
    assert_eq!(
        get(&p, 1, b.buf + 10_003, 1),
        vec![0],
        "nothing written after it"
    );
    assert_eq!(get(&p, 1, b.buf + 20_000, 100), d[..100].to_vec());
    let wc = p.b.poll_cq(b.cq, 8);
    assert_eq!(wc.len(), 1, "plain WRITE consumes no receive");
    assert_eq!(
        (wc[0].wr_id, wc[0].opcode, wc[0].byte_len, wc[0].imm_data),
        (9, WcOpcode::RecvRdmaWithImm, 100, 42)
    );
    let wc = p.a.poll_cq(a.cq, 8);
    assert_eq!(
        wc.iter().map(|w| (w.wr_id, w.opcode)).collect::<Vec<_>>(),
        vec![(1, WcOpcode::RdmaWrite), (2, WcOpcode::RdmaWrite)]
    );
    // 10 packets for 10 000 bytes at MTU 1024, one for the 100-byte write.
    assert_eq!(p.b.counters().rx_pkts, 11);
}

#[test]
fn rdma_read_multi_packet_into_sge_list() {
    let (mut p, a, b) = setup(RcOptions::default());
    let d = fill(&mut p, 1, b.buf + 100, 5000, 7);
    let wr = SendWr::new(
        5,
        WrOpcode::RdmaRead {
            remote_addr: b.buf + 100,
            rkey: b.mr.rkey,
        },
        vec![a.sge(0, 3000), a.sge(8000, 2000)],
    );
    p.a.post_send(a.qpn, &[wr]).unwrap();
    assert!(p.drive());
    let wc = p.a.poll_cq(a.cq, 8);
    assert_eq!(
        (wc.len(), wc[0].status, wc[0].opcode, wc[0].byte_len),
        (1, WcStatus::Success, WcOpcode::RdmaRead, 5000)
    );
    assert_eq!(
        [get(&p, 0, a.buf, 3000), get(&p, 0, a.buf + 8000, 2000)].concat(),
        d
    );
    assert_eq!(p.b.counters().read_resp_tx, 5);
    assert!(p.b.poll_cq(b.cq, 8).is_empty(), "READ is one-sided");
}

#[test]
fn atomics_cmp_swap_and_fetch_add() {
    let (mut p, a, b) = setup(RcOptions::default());
    p.b.mem_mut()
        .set(b.buf + 64, &100u64.to_le_bytes())
        .unwrap();
    let wrs = vec![
        SendWr::new(
            1,
            WrOpcode::AtomicFetchAndAdd {
                remote_addr: b.buf + 64,
                rkey: b.mr.rkey,
                add: 5,
            },
            vec![a.sge(0, 8)],
        ),
        SendWr::new(
            2,
            WrOpcode::AtomicCmpAndSwp {
                remote_addr: b.buf + 64,
                rkey: b.mr.rkey,
                compare: 105,
                swap: 7,
            },
            vec![a.sge(8, 8)],
        ),
        SendWr::new(
            3,
            WrOpcode::AtomicCmpAndSwp {
                remote_addr: b.buf + 64,
                rkey: b.mr.rkey,
                compare: 105,
                swap: 9,
            },
            vec![a.sge(16, 8)],
        ),
    ];
    p.a.post_send(a.qpn, &wrs).unwrap();
    assert!(p.drive());
    let wc = p.a.poll_cq(a.cq, 8);
    assert_eq!(
        wc.iter()
            .map(|w| (w.wr_id, w.status, w.opcode))
            .collect::<Vec<_>>(),
        vec![
            (1, WcStatus::Success, WcOpcode::FetchAdd),
            (2, WcStatus::Success, WcOpcode::CompSwap),
            (3, WcStatus::Success, WcOpcode::CompSwap),
        ]
    );
    let word = |p: &Pair, s, at| u64::from_le_bytes(get(p, s, at, 8).try_into().unwrap());
    assert_eq!(word(&p, 0, a.buf), 100);
    assert_eq!(word(&p, 0, a.buf + 8), 105);
    assert_eq!(
        word(&p, 0, a.buf + 16),
        7,
        "failed compare returns the current value"
    );
    assert_eq!(word(&p, 1, b.buf + 64), 7);
    assert_eq!(p.b.counters().atomics_executed, 3);
}

#[test]
fn zero_length_messages() {
    let (mut p, a, b) = setup(RcOptions::default());
    p.b.post_recv(
        b.qpn,
        &[RecvWr {
            wr_id: 1,
            sg_list: vec![],
        }],
    )
    .unwrap();
    let wrs = vec![
        SendWr::new(1, WrOpcode::Send, vec![]),
        SendWr::new(
            2,
            WrOpcode::RdmaWrite {
                remote_addr: 0,
                rkey: 0,
            },
            vec![],
        ),
        SendWr::new(
            3,
            WrOpcode::RdmaRead {
                remote_addr: 0,
                rkey: 0,
            },
            vec![],
        ),
    ];
    p.a.post_send(a.qpn, &wrs).unwrap();
    assert!(p.drive());
    let wc = p.a.poll_cq(a.cq, 8);
    assert!(wc.iter().all(|w| w.status == WcStatus::Success), "{wc:?}");
    assert_eq!(wc.len(), 3);
    assert_eq!(p.b.poll_cq(b.cq, 8)[0].byte_len, 0);
}

#[test]
fn ud_send_with_grh_and_qkey() {
    let mut p = Pair::new(LinkConfig::default());
    let o = RcOptions::default();
    let (a, b) = p.ud_pair(&o).unwrap();
    let d = fill(&mut p, 0, a.buf, 300, 3);
    p.b.post_recv(
        b.qpn,
        &[RecvWr {
            wr_id: 1,
            sg_list: vec![b.sge(0, 40 + 300)],
        }],
    )
    .unwrap();
    p.b.post_recv(
        b.qpn,
        &[RecvWr {
            wr_id: 2,
            sg_list: vec![b.sge(1000, 40 + 300)],
        }],
    )
    .unwrap();
    let dest = UdDest {
        addr: roce_rnic::pair::ADDR_B,
        remote_qpn: b.qpn,
        remote_qkey: o.qkey,
    };
    let bad = UdDest {
        remote_qkey: 0x2222,
        ..dest
    };
    p.a.post_send(
        a.qpn,
        &[
            SendWr::new(1, WrOpcode::SendWithImm(5), vec![a.sge(0, 300)]).to(dest),
            SendWr::new(2, WrOpcode::Send, vec![a.sge(0, 300)]).to(bad),
        ],
    )
    .unwrap();
    assert!(p.drive());
    let wc = p.b.poll_cq(b.cq, 8);
    assert_eq!(wc.len(), 1, "the wrong Q_Key is dropped");
    assert_eq!(
        (wc[0].byte_len, wc[0].src_qp, wc[0].imm_data),
        (340, a.qpn, 5)
    );
    assert!(wc[0].wc_flags.grh);
    assert_eq!(get(&p, 1, b.buf + 40, 300), d);
    // GRH: source GID is the IPv4-mapped sender address.
    assert_eq!(get(&p, 1, b.buf + 8, 16)[10..], [0xff, 0xff, 10, 0, 0, 1]);
    assert_eq!(p.b.counters().qkey_violations, 1);
    // UD completes at the sender once sent, with no ACKs.
    assert_eq!(p.a.poll_cq(a.cq, 8).len(), 2);
    // UD rejects RDMA and messages over the MTU.
    let e = p.a.post_send(
        a.qpn,
        &[SendWr::new(
            3,
            WrOpcode::RdmaWrite {
                remote_addr: 0,
                rkey: 0,
            },
            vec![],
        )
        .to(dest)],
    );
    assert!(matches!(
        e,
        Err(PostError {
            error: VerbsError::UnsupportedOpcode(_),
            ..
        })
    ));
    p.a.post_send(
        a.qpn,
        &[SendWr::new(4, WrOpcode::Send, vec![a.sge(0, 2000)]).to(dest)],
    )
    .unwrap();
    assert!(p.drive());
    assert_eq!(p.a.poll_cq(a.cq, 8)[0].status, WcStatus::LocLenErr);
}

#[test]
fn fixed_rate_paces_the_requester() {
    let mut p = Pair::new(LinkConfig::default());
    let o = RcOptions {
        buf_len: 1 << 20,
        ..Default::default()
    };
    let (a, b) = p.rc_pair(&o).unwrap();
    // Re-create A's QP with a 10 Gb/s pacer.
    let mut init = QpInitAttr::new(QpType::Rc, a.pd, a.cq, a.cq);
    init.max_send_wr = 16;
    let qa =
        p.a.create_qp_with_cc(init, Box::new(FixedRate(10_000_000_000)))
            .unwrap();
    let qb = b.qpn;
    p.b.modify_qp(qb, QpState::Err, &QpAttr::default()).unwrap();
    p.b.modify_qp(qb, QpState::Reset, &QpAttr::default())
        .unwrap();
    p.connect(qa, qb, Mtu::Mtu1024).unwrap();
    p.a.post_send(
        qa,
        &[SendWr::new(
            1,
            WrOpcode::RdmaWrite {
                remote_addr: b.buf,
                rkey: b.mr.rkey,
            },
            vec![a.sge(0, 1 << 20)],
        )],
    )
    .unwrap();
    assert!(p.drive());
    assert_eq!(p.a.poll_cq(a.cq, 4)[0].status, WcStatus::Success);
    // 1024 packets of 1024 B payload + a 12 B BTH + 50 B of framing (the
    // first also has a 16 B RETH), at 10 Gb/s: 868.8 ns apart, so the last
    // leaves 1023 gaps after the first, ~888.8 us.
    let gap_ns = 1086 * 8 / 10;
    assert!(
        p.now >= 1023 * gap_ns && p.now < 1023 * gap_ns + 20_000,
        "now = {}",
        p.now
    );
}
