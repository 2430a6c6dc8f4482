//! Every bad-input path: the RDMA-correct completion status or NAK, and no
//! memory touched that the packet had no right to.

use roce_rnic::pair::{ADDR_A, Endpoint, LinkConfig, Pair, RcOptions};
use roce_rnic::*;
use roce_wire::{BthRepr, Opcode, Psn, RethRepr, TransportRepr};

fn setup(o: RcOptions) -> (Pair, Endpoint, Endpoint) {
    let mut p = Pair::new(LinkConfig::default());
    p.capture = Some(Vec::new());
    let (a, b) = p.rc_pair(&o).unwrap();
    p.a.mem_mut().set(a.buf, &[0x5a; 8192]).unwrap();
    (p, a, b)
}

fn b_untouched(p: &Pair, b: &Endpoint) {
    assert!(
        p.b.mem()
            .get(b.buf, 1 << 16)
            .unwrap()
            .iter()
            .all(|&x| x == 0),
        "responder memory was written"
    );
}

fn statuses(p: &mut Pair, side: usize, cq: CqHandle) -> Vec<(u64, WcStatus)> {
    let r = if side == 0 { &mut p.a } else { &mut p.b };
    r.poll_cq(cq, 64)
        .iter()
        .map(|w| (w.wr_id, w.status))
        .collect()
}

fn write(a: &Endpoint, remote_addr: u64, rkey: u32, len: u32) -> SendWr {
    SendWr::new(
        1,
        WrOpcode::RdmaWrite { remote_addr, rkey },
        vec![a.sge(0, len)],
    )
}

#[test]
fn wrong_rkey_is_remote_access_error_and_writes_nothing() {
    let (mut p, a, b) = setup(RcOptions::default());
    p.a.post_send(
        a.qpn,
        &[
            write(&a, b.buf, b.mr.rkey ^ 0x100, 4000),
            SendWr::new(2, WrOpcode::Send, vec![]),
        ],
    )
    .unwrap();
    assert!(p.drive());
    assert_eq!(
        statuses(&mut p, 0, a.cq),
        vec![(1, WcStatus::RemAccessErr), (2, WcStatus::WrFlushErr)]
    );
    b_untouched(&p, &b);
    assert_eq!(p.a.qp_state(a.qpn).unwrap(), QpState::Err);
    assert_eq!(
        p.b.qp_state(b.qpn).unwrap(),
        QpState::Err,
        "responder moves to ERR after a class C error"
    );
    // The NAK is on the wire with the remote-access code.
    let naks = p
        .capture
        .as_ref()
        .unwrap()
        .iter()
        .filter(|f| f.dir == 1)
        .count();
    assert!(naks >= 1);
}

#[test]
fn lkey_used_as_rkey_is_refused() {
    let (mut p, a, b) = setup(RcOptions::default());
    p.a.post_send(a.qpn, &[write(&a, b.buf, b.mr.lkey, 16)])
        .unwrap();
    assert!(p.drive());
    assert_eq!(statuses(&mut p, 0, a.cq), vec![(1, WcStatus::RemAccessErr)]);
    b_untouched(&p, &b);
}

#[test]
fn out_of_bounds_write_and_read() {
    for (off, len) in [
        (65_536 - 100, 101u32),
        (u64::MAX - 50, 100),
        (0u64.wrapping_sub(0x7f00_0000_0000 + 1), 8),
    ] {
        let (mut p, a, b) = setup(RcOptions::default());
        let va = b.buf.wrapping_add(off);
        p.a.post_send(a.qpn, &[write(&a, va, b.mr.rkey, len)])
            .unwrap();
        assert!(p.drive());
        assert_eq!(
            statuses(&mut p, 0, a.cq),
            vec![(1, WcStatus::RemAccessErr)],
            "write at +{off}"
        );
        b_untouched(&p, &b);
    }
    let (mut p, a, b) = setup(RcOptions::default());
    let rd = SendWr::new(
        1,
        WrOpcode::RdmaRead {
            remote_addr: b.buf + 65_000,
            rkey: b.mr.rkey,
        },
        vec![a.sge(0, 1000)],
    );
    p.a.post_send(a.qpn, &[rd]).unwrap();
    assert!(p.drive());
    assert_eq!(statuses(&mut p, 0, a.cq), vec![(1, WcStatus::RemAccessErr)]);
    assert!(
        p.a.mem()
            .get(a.buf, 1000)
            .unwrap()
            .iter()
            .all(|&x| x == 0x5a),
        "nothing read into the local buffer"
    );
}

#[test]
fn missing_access_flags_on_mr_or_qp() {
    // MR without REMOTE_WRITE.
    let (mut p, a, b) = setup(RcOptions {
        mr_access: Access::LOCAL_WRITE | Access::REMOTE_READ,
        ..Default::default()
    });
    p.a.post_send(a.qpn, &[write(&a, b.buf, b.mr.rkey, 8)])
        .unwrap();
    assert!(p.drive());
    assert_eq!(statuses(&mut p, 0, a.cq), vec![(1, WcStatus::RemAccessErr)]);
    b_untouched(&p, &b);
    // QP without REMOTE_READ.
    let (mut p, a, b) = setup(RcOptions {
        qp_access: Access::LOCAL_WRITE | Access::REMOTE_WRITE,
        ..Default::default()
    });
    p.a.post_send(
        a.qpn,
        &[SendWr::new(
            1,
            WrOpcode::RdmaRead {
                remote_addr: b.buf,
                rkey: b.mr.rkey,
            },
            vec![a.sge(0, 8)],
        )],
    )
    .unwrap();
    assert!(p.drive());
    assert_eq!(statuses(&mut p, 0, a.cq), vec![(1, WcStatus::RemAccessErr)]);
    // MR without REMOTE_ATOMIC.
    let (mut p, a, b) = setup(RcOptions {
        mr_access: Access::LOCAL_WRITE | Access::REMOTE_WRITE,
        ..Default::default()
    });
    p.a.post_send(
        a.qpn,
        &[SendWr::new(
            1,
            WrOpcode::AtomicFetchAndAdd {
                remote_addr: b.buf,
                rkey: b.mr.rkey,
                add: 1,
            },
            vec![a.sge(0, 8)],
        )],
    )
    .unwrap();
    assert!(p.drive());
    assert_eq!(statuses(&mut p, 0, a.cq), vec![(1, WcStatus::RemAccessErr)]);
    b_untouched(&p, &b);
}

#[test]
fn mr_of_another_pd() {
    let (mut p, a, _b) = setup(RcOptions::default());
    // Remote: a region registered in another PD on B.
    let pd2 = p.b.alloc_pd();
    let other = p.b.mem_mut().alloc(4096);
    let mr2 = p.b.reg_mr(pd2, other, 4096, Access::ALL).unwrap();
    p.a.post_send(a.qpn, &[write(&a, other, mr2.rkey, 8)])
        .unwrap();
    assert!(p.drive());
    assert_eq!(statuses(&mut p, 0, a.cq), vec![(1, WcStatus::RemAccessErr)]);
    assert!(p.b.mem().get(other, 4096).unwrap().iter().all(|&x| x == 0));
    // Local: an SGE whose lkey belongs to another PD on A.
    let (mut p, a, b) = setup(RcOptions::default());
    let pd2 = p.a.alloc_pd();
    let buf2 = p.a.mem_mut().alloc(64);
    let mr2 = p.a.reg_mr(pd2, buf2, 64, Access::ALL).unwrap();
    let wr = SendWr::new(
        1,
        WrOpcode::RdmaWrite {
            remote_addr: b.buf,
            rkey: b.mr.rkey,
        },
        vec![Sge {
            addr: buf2,
            length: 64,
            lkey: mr2.lkey,
        }],
    );
    p.a.post_send(a.qpn, &[wr]).unwrap();
    assert!(p.drive());
    assert_eq!(statuses(&mut p, 0, a.cq), vec![(1, WcStatus::LocProtErr)]);
    b_untouched(&p, &b);
    assert_eq!(p.a.counters().tx_pkts, 0, "nothing was sent");
}

#[test]
fn local_sge_out_of_bounds_and_read_into_read_only_mr() {
    let (mut p, a, b) = setup(RcOptions::default());
    p.a.post_send(a.qpn, &[write(&a, b.buf, b.mr.rkey, 70_000)])
        .unwrap();
    b_untouched(&p, &b);
    assert!(p.drive());
    assert_eq!(statuses(&mut p, 0, a.cq), vec![(1, WcStatus::LocProtErr)]);
    let (mut p, a, b) = setup(RcOptions::default());
    let ro = p.a.reg_mr(a.pd, a.buf, 4096, Access::NONE).unwrap();
    let rd = SendWr::new(
        1,
        WrOpcode::RdmaRead {
            remote_addr: b.buf,
            rkey: b.mr.rkey,
        },
        vec![Sge {
            addr: a.buf,
            length: 64,
            lkey: ro.lkey,
        }],
    );
    p.a.post_send(a.qpn, &[rd]).unwrap();
    assert!(p.drive());
    assert_eq!(
        statuses(&mut p, 0, a.cq),
        vec![(1, WcStatus::LocProtErr)],
        "READ needs LOCAL_WRITE on its sink"
    );
}

#[test]
fn misaligned_atomic_is_invalid_request() {
    let (mut p, a, b) = setup(RcOptions::default());
    p.a.post_send(
        a.qpn,
        &[SendWr::new(
            1,
            WrOpcode::AtomicCmpAndSwp {
                remote_addr: b.buf + 4,
                rkey: b.mr.rkey,
                compare: 0,
                swap: 9,
            },
            vec![a.sge(0, 8)],
        )],
    )
    .unwrap();
    assert!(p.drive());
    assert_eq!(statuses(&mut p, 0, a.cq), vec![(1, WcStatus::RemInvReqErr)]);
    b_untouched(&p, &b);
    // And an atomic whose local buffer is not 8 bytes is a local length error.
    let (mut p, a, b) = setup(RcOptions::default());
    p.a.post_send(
        a.qpn,
        &[SendWr::new(
            1,
            WrOpcode::AtomicFetchAndAdd {
                remote_addr: b.buf,
                rkey: b.mr.rkey,
                add: 1,
            },
            vec![a.sge(0, 4)],
        )],
    )
    .unwrap();
    assert!(p.drive());
    assert_eq!(statuses(&mut p, 0, a.cq), vec![(1, WcStatus::LocLenErr)]);
}

#[test]
fn recv_too_small_is_loc_len_err_and_rem_inv_req() {
    let (mut p, a, b) = setup(RcOptions::default());
    p.b.post_recv(
        b.qpn,
        &[
            RecvWr {
                wr_id: 7,
                sg_list: vec![b.sge(0, 100)],
            },
            RecvWr {
                wr_id: 8,
                sg_list: vec![b.sge(100, 100)],
            },
        ],
    )
    .unwrap();
    p.a.post_send(
        a.qpn,
        &[SendWr::new(1, WrOpcode::Send, vec![a.sge(0, 101)])],
    )
    .unwrap();
    assert!(p.drive());
    assert_eq!(statuses(&mut p, 0, a.cq), vec![(1, WcStatus::RemInvReqErr)]);
    assert_eq!(
        statuses(&mut p, 1, b.cq),
        vec![(7, WcStatus::LocLenErr), (8, WcStatus::WrFlushErr)]
    );
    b_untouched(&p, &b);
}

#[test]
fn rnr_then_success_when_a_receive_is_posted() {
    let (mut p, a, b) = setup(RcOptions {
        min_rnr_timer: 14,
        ..Default::default()
    });
    p.a.post_send(a.qpn, &[SendWr::new(1, WrOpcode::Send, vec![a.sge(0, 64)])])
        .unwrap();
    // Let the RNR NAK come back, then post the receive.
    p.drive_for(100_000);
    assert_eq!(p.b.counters().rnr_naks_tx, 1);
    assert_eq!(p.a.counters().rnr_naks_rx, 1);
    p.b.post_recv(
        b.qpn,
        &[RecvWr {
            wr_id: 9,
            sg_list: vec![b.sge(0, 64)],
        }],
    )
    .unwrap();
    assert!(p.drive());
    assert_eq!(statuses(&mut p, 0, a.cq), vec![(1, WcStatus::Success)]);
    assert_eq!(statuses(&mut p, 1, b.cq), vec![(9, WcStatus::Success)]);
    // Timer code 14 is 1.28 ms: the retry waited that long.
    assert!(p.now >= 1_280_000, "now = {}", p.now);
}

#[test]
fn rnr_retry_exhausted() {
    let (mut p, a, b) = setup(RcOptions {
        rnr_retry: 2,
        min_rnr_timer: 1,
        ..Default::default()
    });
    p.a.post_send(
        a.qpn,
        &[
            SendWr::new(1, WrOpcode::Send, vec![a.sge(0, 64)]),
            SendWr::new(
                2,
                WrOpcode::RdmaWriteWithImm {
                    remote_addr: b.buf,
                    rkey: b.mr.rkey,
                    imm: 1,
                },
                vec![a.sge(0, 8)],
            ),
        ],
    )
    .unwrap();
    assert!(p.drive());
    assert_eq!(
        statuses(&mut p, 0, a.cq),
        vec![(1, WcStatus::RnrRetryExcErr), (2, WcStatus::WrFlushErr)]
    );
    assert_eq!(
        p.b.counters().rnr_naks_tx,
        3,
        "first try plus rnr_retry=2 retries"
    );
    b_untouched(&p, &b);
}

#[test]
fn write_with_imm_without_receive_writes_nothing_until_retried() {
    let (mut p, a, b) = setup(RcOptions {
        min_rnr_timer: 1,
        ..Default::default()
    });
    p.a.post_send(
        a.qpn,
        &[SendWr::new(
            2,
            WrOpcode::RdmaWriteWithImm {
                remote_addr: b.buf,
                rkey: b.mr.rkey,
                imm: 1,
            },
            vec![a.sge(0, 8)],
        )],
    )
    .unwrap();
    p.drive_for(5_000);
    b_untouched(&p, &b);
    p.b.post_recv(
        b.qpn,
        &[RecvWr {
            wr_id: 1,
            sg_list: vec![],
        }],
    )
    .unwrap();
    assert!(p.drive());
    assert_eq!(p.b.mem().get(b.buf, 8).unwrap(), &[0x5a; 8]);
}

fn forged(dest_qp: u32, psn: u32, va: u64, rkey: u32) -> TransportRepr {
    let mut t = TransportRepr::new(BthRepr {
        opcode: Opcode::RcWriteOnly,
        dest_qp,
        psn: Psn::new(psn),
        ack_req: true,
        ..Default::default()
    });
    t.reth = Some(RethRepr {
        va,
        rkey,
        dma_len: 4,
    });
    t
}

#[test]
fn forged_packets_for_reset_init_or_unknown_qps_are_dropped() {
    let mut r = Rnic::new(RnicConfig::default(), RealMemory::new());
    let pd = r.alloc_pd();
    let cq = r.create_cq(16).unwrap();
    let buf = r.mem_mut().alloc(64);
    let mr = r.reg_mr(pd, buf, 64, Access::ALL).unwrap();
    let qpn = r
        .create_qp(QpInitAttr::new(QpType::Rc, pd, cq, cq))
        .unwrap();
    let hit = |r: &mut Rnic, psn| {
        r.handle_packet(
            0,
            ADDR_A,
            false,
            &forged(qpn, psn, buf, mr.rkey),
            PayloadRef::Bytes(b"evil"),
        )
    };
    hit(&mut r, 0); // RESET
    r.modify_qp(qpn, QpState::Init, &QpAttr::init(Access::ALL))
        .unwrap();
    hit(&mut r, 0); // INIT
    assert_eq!(r.counters().rx_dropped_state, 2);
    r.handle_packet(
        0,
        ADDR_A,
        false,
        &forged(0x999, 0, buf, mr.rkey),
        PayloadRef::Bytes(b"evil"),
    );
    assert_eq!(r.counters().rx_unknown_qp, 1);
    assert_eq!(r.mem().get(buf, 64).unwrap(), &[0u8; 64]);
    assert!(r.poll_transmit(0).is_none(), "no answer to a forged packet");
    // In RTR, a packet from an address other than the connected peer is dropped too.
    r.modify_qp(
        qpn,
        QpState::Rtr,
        &QpAttr::rtr("10.9.9.9:4791".parse().unwrap(), 5, 0, Mtu::Mtu1024),
    )
    .unwrap();
    hit(&mut r, 0);
    assert_eq!(r.counters().rx_bad_source, 1);
    assert_eq!(r.mem().get(buf, 64).unwrap(), &[0u8; 64]);
    // A UD opcode on an RC QP is malformed for it.
    let mut t = forged(qpn, 0, buf, mr.rkey);
    t.bth.opcode = Opcode::UdSendOnly;
    t.reth = None;
    r.handle_packet(
        0,
        "10.9.9.9:4791".parse().unwrap(),
        false,
        &t,
        PayloadRef::Bytes(b""),
    );
    assert_eq!(r.counters().rx_malformed, 1);
}

#[test]
fn psn_wrap_multi_packet_messages() {
    for start in [Psn::MASK, Psn::MASK - 1, Psn::MASK - 2] {
        let (mut p, a, b) = setup(RcOptions {
            psn_a: start,
            psn_b: start,
            mtu: Mtu::Mtu256,
            ..Default::default()
        });
        let d: Vec<u8> = (0..3000u32).map(|i| i as u8).collect();
        p.a.mem_mut().set(a.buf, &d).unwrap();
        p.b.mem_mut().set(b.buf + 10_000, &d).unwrap();
        p.a.post_send(
            a.qpn,
            &[
                write(&a, b.buf, b.mr.rkey, 3000),
                SendWr::new(
                    2,
                    WrOpcode::RdmaRead {
                        remote_addr: b.buf + 10_000,
                        rkey: b.mr.rkey,
                    },
                    vec![a.sge(20_000, 3000)],
                ),
            ],
        )
        .unwrap();
        assert!(p.drive());
        assert_eq!(
            statuses(&mut p, 0, a.cq),
            vec![(1, WcStatus::Success), (2, WcStatus::Success)]
        );
        assert_eq!(p.b.mem().get(b.buf, 3000).unwrap(), &d[..]);
        assert_eq!(p.a.mem().get(a.buf + 20_000, 3000).unwrap(), &d[..]);
    }
}

#[test]
fn duplicated_atomics_execute_once() {
    let mut p = Pair::new(LinkConfig {
        dup: 1.0,
        ..Default::default()
    });
    let (a, b) = p.rc_pair(&RcOptions::default()).unwrap();
    let wrs: Vec<SendWr> = (0..10)
        .map(|i| {
            SendWr::new(
                i,
                WrOpcode::AtomicFetchAndAdd {
                    remote_addr: b.buf,
                    rkey: b.mr.rkey,
                    add: 1,
                },
                vec![a.sge(8 * i, 8)],
            )
        })
        .collect();
    p.a.post_send(a.qpn, &wrs).unwrap();
    assert!(p.drive());
    assert_eq!(p.a.poll_cq(a.cq, 64).len(), 10);
    assert_eq!(p.b.mem().read_u64(b.buf).unwrap(), 10);
    assert_eq!(p.b.counters().atomics_executed, 10);
    assert!(p.b.counters().atomic_replays >= 10, "{:?}", p.b.counters());
    for i in 0..10 {
        assert_eq!(p.a.mem().read_u64(a.buf + 8 * i).unwrap(), i);
    }
}

#[test]
fn modify_qp_validates_transitions_and_attributes() {
    let mut r = Rnic::new(RnicConfig::default(), RealMemory::new());
    let pd = r.alloc_pd();
    let cq = r.create_cq(16).unwrap();
    let qpn = r
        .create_qp(QpInitAttr::new(QpType::Rc, pd, cq, cq))
        .unwrap();
    let e = r
        .modify_qp(qpn, QpState::Rtr, &QpAttr::default())
        .unwrap_err();
    assert_eq!(
        e,
        VerbsError::InvalidTransition {
            from: QpState::Reset,
            to: QpState::Rtr
        }
    );
    let e = r
        .modify_qp(
            qpn,
            QpState::Init,
            &QpAttr {
                pkey_index: Some(0),
                port_num: Some(1),
                ..Default::default()
            },
        )
        .unwrap_err();
    assert_eq!(
        e,
        VerbsError::MissingAttribute {
            from: QpState::Reset,
            to: QpState::Init,
            attr: "qp_access_flags"
        }
    );
    assert!(e.to_string().contains("qp_access_flags"));
    let mut bad = QpAttr::init(Access::ALL);
    bad.sq_psn = Some(1);
    assert!(matches!(
        r.modify_qp(qpn, QpState::Init, &bad),
        Err(VerbsError::UnexpectedAttribute { attr: "sq_psn", .. })
    ));
    r.modify_qp(qpn, QpState::Init, &QpAttr::init(Access::ALL))
        .unwrap();
    let mut rtr = QpAttr::rtr(ADDR_A, 1, 0, Mtu::Mtu1024);
    rtr.dest_qp_num = None;
    assert!(matches!(
        r.modify_qp(qpn, QpState::Rtr, &rtr),
        Err(VerbsError::MissingAttribute {
            attr: "dest_qp_num",
            ..
        })
    ));
    let mut rtr = QpAttr::rtr(ADDR_A, 1, 0, Mtu::Mtu1024);
    rtr.max_dest_rd_atomic = Some(17);
    assert!(matches!(
        r.modify_qp(qpn, QpState::Rtr, &rtr),
        Err(VerbsError::InvalidAttribute {
            attr: "max_dest_rd_atomic",
            ..
        })
    ));
    assert_eq!(
        r.qp_state(qpn).unwrap(),
        QpState::Init,
        "a failed modify changes nothing"
    );
    // Posting sends before RTS is refused; receives are fine from INIT.
    let e = r
        .post_send(qpn, &[SendWr::new(1, WrOpcode::Send, vec![])])
        .unwrap_err();
    assert_eq!(e.error, VerbsError::WrongState(QpState::Init));
    r.post_recv(
        qpn,
        &[RecvWr {
            wr_id: 1,
            sg_list: vec![],
        }],
    )
    .unwrap();
    r.modify_qp(qpn, QpState::Rtr, &QpAttr::rtr(ADDR_A, 1, 0, Mtu::Mtu1024))
        .unwrap();
    let mut rts = QpAttr::rts(0);
    rts.retry_cnt = Some(8);
    assert!(matches!(
        r.modify_qp(qpn, QpState::Rts, &rts),
        Err(VerbsError::InvalidAttribute {
            attr: "retry_cnt",
            ..
        })
    ));
    r.modify_qp(qpn, QpState::Rts, &QpAttr::rts(0)).unwrap();
    r.modify_qp(qpn, QpState::Sqd, &QpAttr::default()).unwrap();
    r.modify_qp(qpn, QpState::Rts, &QpAttr::default()).unwrap();
    // ERR flushes the receive queue; RESET from anywhere.
    r.modify_qp(qpn, QpState::Err, &QpAttr::default()).unwrap();
    let wc = r.poll_cq(cq, 8);
    assert_eq!((wc.len(), wc[0].status), (1, WcStatus::WrFlushErr));
    r.modify_qp(qpn, QpState::Reset, &QpAttr::default())
        .unwrap();
    assert_eq!(r.qp_state(qpn).unwrap(), QpState::Reset);
}

#[test]
fn post_limits() {
    let (mut p, a, _b) = setup(RcOptions {
        max_send_wr: 2,
        ..Default::default()
    });
    let s = || SendWr::new(1, WrOpcode::Send, vec![a.sge(0, 1)]);
    let e = p.a.post_send(a.qpn, &[s(), s(), s()]).unwrap_err();
    assert_eq!(e.index, 2);
    assert!(matches!(
        e.error,
        VerbsError::QueueFull {
            queue: "SQ",
            depth: 2
        }
    ));
    let (mut p, a, _b) = setup(RcOptions::default());
    let e =
        p.a.post_send(
            a.qpn,
            &[SendWr::new(1, WrOpcode::Send, vec![a.sge(0, 1); 5])],
        )
        .unwrap_err();
    assert!(matches!(
        e.error,
        VerbsError::TooManySge { count: 5, max: 4 }
    ));
    let e =
        p.a.post_send(
            a.qpn,
            &[SendWr::new(1, WrOpcode::Send, vec![a.sge(0, 65)]).inline()],
        )
        .unwrap_err();
    assert!(matches!(
        e.error,
        VerbsError::InlineTooLarge { len: 65, max: 64 }
    ));
    // Registering unallocated memory, or remote write without local write, fails.
    let pd = p.a.alloc_pd();
    assert!(matches!(
        p.a.reg_mr(pd, 0x10, 10, Access::NONE),
        Err(VerbsError::BadAddress { .. })
    ));
    assert!(matches!(
        p.a.reg_mr(pd, a.buf, 10, Access::REMOTE_WRITE),
        Err(VerbsError::InvalidAttribute { .. })
    ));
    assert!(matches!(
        p.a.dealloc_pd(a.pd),
        Err(VerbsError::InUse { .. })
    ));
}

/// A pair whose requester's CQ has room for 2 completions, with `n` signaled
/// WRITEs posted and driven to completion (those past 2 overflow it).
fn overflowed_cq(n: u64) -> (Pair, Endpoint, Endpoint) {
    let (mut p, a, b) = setup(RcOptions {
        cq_depth: 2,
        sq_sig_all: true,
        ..Default::default()
    });
    let wrs: Vec<SendWr> = (0..n)
        .map(|i| {
            let mut w = write(&a, b.buf, b.mr.rkey, 8).unsignaled();
            w.wr_id = i;
            w
        })
        .collect();
    p.a.post_send(a.qpn, &wrs).unwrap();
    assert!(p.drive());
    (p, a, b)
}

/// `has_completions` answers for every CQ without searching them: true
/// exactly while some CQ holds a completion, across overflows, partial
/// polls and a spare CQ created and destroyed.
#[test]
fn has_completions_follows_every_cq() {
    let (p, _a, _b) = overflowed_cq(0);
    assert!(!p.a.has_completions());
    let (mut p, a, _b) = overflowed_cq(3);
    // Two stored, the third overflowed and is not counted.
    assert_eq!(p.a.cq_len(a.cq), 2);
    assert!(p.a.has_completions());
    assert_eq!(p.a.poll_cq(a.cq, 1).len(), 1);
    assert!(p.a.has_completions());
    assert_eq!(p.a.poll_cq(a.cq, 8).len(), 1);
    assert!(!p.a.has_completions());
    // An empty spare CQ adds none, created or destroyed.
    let spare = p.a.create_cq(4).unwrap();
    assert!(!p.a.has_completions());
    assert_eq!(p.a.cq_len(spare), 0);
    p.a.destroy_cq(spare).unwrap();
    assert!(!p.a.has_completions());
}

#[test]
fn cq_overflow_raises_an_event() {
    let (mut p, a, _b) = overflowed_cq(4);
    assert_eq!(p.a.cq_len(a.cq), 2);
    assert_eq!(p.a.counters().cq_overflows, 2);
    assert!(matches!(
        p.a.poll_event(),
        Some(AsyncEvent::CqOverflow { .. })
    ));
}

#[test]
fn srq_is_shared_and_its_limit_fires() {
    let mut p = Pair::new(LinkConfig::default());
    let o = RcOptions::default();
    let (a1, b1) = p.rc_pair(&o).unwrap();
    // B's second QP shares an SRQ with ... build by hand on B.
    let srq = p.b.create_srq(b1.pd, 8, 2).unwrap();
    let mut init = QpInitAttr::new(QpType::Rc, b1.pd, b1.cq, b1.cq);
    init.srq = Some(srq);
    let q2 = p.b.create_qp(init).unwrap();
    let q3 = p.b.create_qp(init).unwrap();
    let mut qa = Vec::new();
    for q in [q2, q3] {
        let mut ia = QpInitAttr::new(QpType::Rc, a1.pd, a1.cq, a1.cq);
        ia.max_send_wr = 16;
        let qn = p.a.create_qp(ia).unwrap();
        p.connect(qn, q, Mtu::Mtu1024).unwrap();
        qa.push(qn);
    }
    let recvs: Vec<RecvWr> = (0..4)
        .map(|i| RecvWr {
            wr_id: 100 + i,
            sg_list: vec![b1.sge(i * 100, 100)],
        })
        .collect();
    p.b.post_srq_recv(srq, &recvs).unwrap();
    p.b.arm_srq_limit(srq, 3).unwrap();
    assert!(
        matches!(p.b.post_recv(q2, &recvs[..1]), Err(PostError { .. })),
        "QPs with an SRQ take no RQ posts"
    );
    for (i, q) in qa.iter().enumerate() {
        p.a.post_send(
            *q,
            &[SendWr::new(i as u64, WrOpcode::Send, vec![a1.sge(0, 10)])],
        )
        .unwrap();
    }
    assert!(p.drive());
    let wc = p.b.poll_cq(b1.cq, 8);
    assert_eq!(
        wc.iter().map(|w| (w.wr_id, w.qp_num)).collect::<Vec<_>>(),
        vec![(100, q2), (101, q3)]
    );
    assert_eq!(p.b.poll_event(), Some(AsyncEvent::SrqLimitReached { srq }));
    assert_eq!(p.b.poll_event(), None, "the limit disarms after firing");
}

#[test]
fn fence_and_read_credits_order_the_wire() {
    // Lower max_rd_atomic to 1 on A.
    let mut p2 = Pair::new(LinkConfig {
        latency_ns: 10_000,
        ..Default::default()
    });
    p2.capture = Some(Vec::new());
    let (a2, b2) = p2.rc_pair(&RcOptions::default()).unwrap();
    p2.a.modify_qp(a2.qpn, QpState::Sqd, &QpAttr::default())
        .unwrap();
    p2.a.modify_qp(
        a2.qpn,
        QpState::Sqd,
        &QpAttr {
            max_rd_atomic: Some(1),
            ..Default::default()
        },
    )
    .unwrap();
    p2.a.modify_qp(a2.qpn, QpState::Rts, &QpAttr::default())
        .unwrap();
    let rd = |i| {
        SendWr::new(
            i,
            WrOpcode::RdmaRead {
                remote_addr: b2.buf,
                rkey: b2.mr.rkey,
            },
            vec![a2.sge(0, 100)],
        )
    };
    p2.a.post_send(
        a2.qpn,
        &[
            rd(1),
            rd(2),
            SendWr::new(
                3,
                WrOpcode::RdmaWrite {
                    remote_addr: b2.buf,
                    rkey: b2.mr.rkey,
                },
                vec![a2.sge(0, 8)],
            )
            .fence(),
        ],
    )
    .unwrap();
    assert!(p2.drive());
    let ops: Vec<u8> = p2.capture.unwrap().iter().map(|f| f.bytes[42]).collect();
    // READ, its response, READ, its response, then the fenced WRITE and its ACK.
    assert_eq!(ops, vec![0x0c, 0x10, 0x0c, 0x10, 0x0a, 0x11]);
}

#[test]
fn ce_marks_make_cnps_paced_per_qp() {
    struct Count(std::sync::Arc<std::sync::atomic::AtomicU64>);
    impl CongestionControl for Count {
        fn name(&self) -> &'static str {
            "count"
        }
        fn on_cnp(&mut self, _now: Nanos) {
            self.0.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        }
    }
    let seen = std::sync::Arc::new(std::sync::atomic::AtomicU64::new(0));
    let mut p = Pair::new(LinkConfig {
        ce_mark: 1.0,
        ..Default::default()
    });
    let o = RcOptions::default();
    // Build A's QP with the counting controller.
    let pd = p.a.alloc_pd();
    let cq = p.a.create_cq(64).unwrap();
    let buf = p.a.mem_mut().alloc(1 << 20);
    let mr = p.a.reg_mr(pd, buf, 1 << 20, Access::ALL).unwrap();
    let qa =
        p.a.create_qp_with_cc(
            QpInitAttr::new(QpType::Rc, pd, cq, cq),
            Box::new(Count(seen.clone())),
        )
        .unwrap();
    let pdb = p.b.alloc_pd();
    let cqb = p.b.create_cq(64).unwrap();
    let bufb = p.b.mem_mut().alloc(1 << 20);
    let mrb = p.b.reg_mr(pdb, bufb, 1 << 20, Access::ALL).unwrap();
    let qb =
        p.b.create_qp(QpInitAttr::new(QpType::Rc, pdb, cqb, cqb))
            .unwrap();
    p.connect(qa, qb, o.mtu).unwrap();
    // 1 MiB at 100 Gb/s takes ~84 us: with a 50 us CNP interval, two CNPs.
    p.a.post_send(
        qa,
        &[SendWr::new(
            1,
            WrOpcode::RdmaWrite {
                remote_addr: bufb,
                rkey: mrb.rkey,
            },
            vec![Sge {
                addr: buf,
                length: 1 << 20,
                lkey: mr.lkey,
            }],
        )],
    )
    .unwrap();
    assert!(p.drive());
    assert_eq!(p.a.poll_cq(cq, 4)[0].status, WcStatus::Success);
    let c = p.b.counters();
    assert_eq!(c.ce_rx, 1024);
    assert_eq!(c.cnps_tx, 2);
    assert_eq!(p.a.counters().cnps_rx, 2);
    assert_eq!(seen.load(std::sync::atomic::Ordering::Relaxed), 2);
}

#[test]
fn read_replays_do_not_use_up_responder_resources() {
    let (mut p, a, b) = setup(RcOptions::default());
    let read = |psn: u32| {
        let mut t = TransportRepr::new(BthRepr {
            opcode: Opcode::RcReadRequest,
            dest_qp: b.qpn,
            psn: Psn::new(psn),
            ack_req: true,
            ..Default::default()
        });
        t.reth = Some(RethRepr {
            va: b.buf,
            rkey: b.mr.rkey,
            dma_len: 8,
        });
        t
    };
    let start = RcOptions::default().psn_a;
    // 15 new READs, a duplicate of the first (a replay), then the 16th new READ,
    // all before B gets to send a single response: max_dest_rd_atomic is 16.
    for i in 0..15 {
        p.b.handle_packet(0, ADDR_A, false, &read(start + i), PayloadRef::Bytes(&[]));
    }
    p.b.handle_packet(0, ADDR_A, false, &read(start), PayloadRef::Bytes(&[]));
    p.b.handle_packet(0, ADDR_A, false, &read(start + 15), PayloadRef::Bytes(&[]));
    assert_eq!(p.b.counters().naks_tx, 0, "{:?}", p.b.counters());
    assert_eq!(p.b.qp_state(b.qpn).unwrap(), QpState::Rts);
    let _ = a;
}
