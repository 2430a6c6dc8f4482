//! Shared receive queues and UD address handles through the verbs API, over
//! real UDP sockets on loopback: what they carry, the limit event, and the
//! bad input each refuses while the other QPs keep working.

mod common;

use common::*;
use roce_verbs::*;
use std::collections::BTreeMap;
use std::time::Instant;

fn open() -> Context {
    Device::open_with("127.0.0.1:0".parse().unwrap(), EngineConfig::default()).unwrap()
}

fn rc_pair(pa: &Pd, ca: &Cq, pb: &Pd, cb: &Cq, srq: Option<&Srq>, mb: &Mr) -> (Qp, Qp, Endpoint) {
    let qa = pa.qp_builder(ca).timeout(10).build().unwrap();
    let mut builder = pb.qp_builder(cb).timeout(10);
    if let Some(s) = srq {
        builder = builder.srq(s);
    }
    let qb = builder.build().unwrap();
    let (ea, eb) = (qa.endpoint(), qb.endpoint_with(mb));
    (qa.connect(&eb).unwrap(), qb.connect(&ea).unwrap(), eb)
}

/// Polls `cq` (driving its device) until `n` completions or the deadline.
fn collect(cq: &Cq, n: usize) -> Vec<Wc> {
    let wcs = cq.wait(n, WAIT).unwrap();
    ok_wc(&wcs);
    wcs
}

#[test]
fn srq_feeds_two_rc_qps_and_fires_its_limit_once() {
    let (a, b) = (open(), open());
    let (pa, pb) = (a.alloc_pd().unwrap(), b.alloc_pd().unwrap());
    let (ca, cb) = (a.create_cq(64).unwrap(), b.create_cq(64).unwrap());
    let ma = pa.reg_mr(1 << 14, Access::ALL).unwrap();
    let mb = pb.reg_mr(1 << 14, Access::ALL).unwrap();
    let srq = pb.create_srq(16, 1).unwrap();
    let (qa1, qb1, _) = rc_pair(&pa, &ca, &pb, &cb, Some(&srq), &mb);
    let (qa2, qb2, _) = rc_pair(&pa, &ca, &pb, &cb, Some(&srq), &mb);
    assert!(qb1.srq().is_some() && qb2.srq().is_some());

    // Bad input first, each one clear; none of it stops what follows.
    let e = srq.arm_limit(17).unwrap_err();
    assert!(
        matches!(
            e,
            Error::SrqLimit {
                limit: 17,
                max_wr: 16
            }
        ),
        "{e}"
    );
    assert!(e.to_string().contains("above the SRQ's size 16"), "{e}");
    let e = qb1
        .post_recv(&RecvWr {
            wr_id: 0,
            sg_list: vec![mb.sge(0, 64)],
        })
        .unwrap_err();
    assert!(e.to_string().contains("post to the SRQ"), "{e}");

    // Six receives, each its own 1 KiB slot; the limit is 3.
    for i in 0..6u64 {
        srq.post_srq_recv(&RecvWr {
            wr_id: 100 + i,
            sg_list: vec![mb.sge(i as usize * 1024, 1024)],
        })
        .unwrap();
    }
    assert_eq!(srq.len(), 6);
    srq.arm_limit(3).unwrap();

    let _drive_b = b.spawn_progress(false);
    for (k, qa) in [&qa1, &qa2, &qa1, &qa2].into_iter().enumerate() {
        let msg = pattern(k as u8, 500);
        ma.write(k * 1024, &msg).unwrap();
        qa.post_send(&SendWr::new(
            k as u64,
            WrOpcode::Send,
            vec![ma.sge(k * 1024, 500)],
        ))
        .unwrap();
        collect(&ca, 1);
    }
    let wcs = collect(&cb, 4);
    let mut per_qp = BTreeMap::new();
    for w in &wcs {
        assert_eq!((w.opcode, w.byte_len), (WcOpcode::Recv, 500));
        *per_qp.entry(w.qp_num).or_insert(0) += 1;
    }
    // One pool served both QPs, two messages each.
    assert_eq!(per_qp, BTreeMap::from([(qb1.qpn(), 2), (qb2.qpn(), 2)]));
    // The pool hands receives out in the order they were posted.
    let mut ids: Vec<u64> = wcs.iter().map(|w| w.wr_id).collect();
    ids.sort();
    assert_eq!(ids, vec![100, 101, 102, 103]);
    for (k, w) in wcs.iter().enumerate() {
        let slot = (w.wr_id - 100) as usize;
        assert_eq!(mb.read(slot * 1024, 500).unwrap(), pattern(k as u8, 500));
    }
    // Two left, under the limit of 3: the event fired, once.
    assert_eq!(srq.len(), 2);
    drop(_drive_b);
    assert_eq!(
        b.wait_event(WAIT).unwrap(),
        AsyncEvent::SrqLimitReached { srq: srq.handle() }
    );
    assert_eq!(b.poll_event(), None);
}

#[test]
fn srq_refuses_overflow_and_objects_of_another_device() {
    let (a, b) = (open(), open());
    let pa = a.alloc_pd().unwrap();
    let pb = b.alloc_pd().unwrap();
    let ca = a.create_cq(8).unwrap();
    let ma = pa.reg_mr(4096, Access::ALL).unwrap();
    let srq = pa.create_srq(4, 1).unwrap();
    let wr = |id| RecvWr {
        wr_id: id,
        sg_list: vec![ma.sge(0, 64)],
    };
    // Too many SGEs for the SRQ.
    let e = srq
        .post_srq_recv(&RecvWr {
            wr_id: 9,
            sg_list: vec![ma.sge(0, 8), ma.sge(8, 8)],
        })
        .unwrap_err();
    assert!(e.to_string().contains("SGE"), "{e}");
    let e = srq
        .post_srq_recv_batch(&[wr(1), wr(2), wr(3), wr(4), wr(5)])
        .unwrap_err();
    // The first four went in; the fifth is named.
    assert!(e.to_string().contains("work request 4"), "{e}");
    assert_eq!(srq.len(), 4);
    // An SRQ of device A cannot serve a QP of device B.
    let cb = b.create_cq(8).unwrap();
    let e = pb.qp_builder(&cb).srq(&srq).build().err().unwrap();
    assert!(matches!(e, Error::WrongDevice("SRQ")), "{e}");
    // Nor a CQ of another device.
    let e = pb.qp_builder(&ca).build().err().unwrap();
    assert!(matches!(e, Error::WrongDevice("send CQ")), "{e}");
    // An SRQ of another PD on the same device.
    let pa2 = a.alloc_pd().unwrap();
    let e = pa2.qp_builder(&ca).srq(&srq).build().err().unwrap();
    assert!(e.to_string().contains("PDs"), "{e}");
    // An SRQ larger than the device allows.
    assert!(pa.create_srq(0, 1).is_err());
    assert!(pa.create_srq(u32::MAX, 1).is_err());
}

fn ud_qp(pd: &Pd, cq: &Cq, qkey: u32, srq: Option<&Srq>) -> Qp {
    let mut b = pd.qp_builder(cq).qp_type(QpType::Ud).qkey(qkey);
    if let Some(s) = srq {
        b = b.srq(s);
    }
    b.build().unwrap().activate().unwrap()
}

#[test]
fn ud_through_address_handles_with_q_keys() {
    let (a, b) = (open(), open());
    let (pa, pb) = (a.alloc_pd().unwrap(), b.alloc_pd().unwrap());
    let (ca, cb) = (a.create_cq(64).unwrap(), b.create_cq(64).unwrap());
    let ma = pa.reg_mr(1 << 14, Access::ALL).unwrap();
    let mb = pb.reg_mr(1 << 14, Access::ALL).unwrap();
    let qkey = 0x1111_1111;
    let qa = ud_qp(&pa, &ca, qkey, None);
    // Two UD QPs on B: one with its own receive queue, one on an SRQ.
    let srq = pb.create_srq(8, 1).unwrap();
    let qb1 = ud_qp(&pb, &cb, qkey, None);
    let qb2 = ud_qp(&pb, &cb, qkey, Some(&srq));
    for i in 0..4u64 {
        qb1.post_recv(&RecvWr {
            wr_id: 10 + i,
            sg_list: vec![mb.sge(i as usize * 2048, 40 + 1024)],
        })
        .unwrap();
        srq.post_srq_recv(&RecvWr {
            wr_id: 20 + i,
            sg_list: vec![mb.sge(8192 + i as usize * 2048, 40 + 1024)],
        })
        .unwrap();
    }
    let ah = pa.create_ah(b.local_addr()).unwrap();
    assert_eq!(ah.addr(), b.local_addr());

    // Bad address handles: the other IP family, an unreachable address.
    let e = pa
        .create_ah("[fd00::2]:4791".parse().unwrap())
        .err()
        .unwrap();
    assert!(matches!(e, Error::AddressFamily { .. }), "{e}");
    assert!(e.to_string().contains("IPv6"), "{e}");
    assert!(pa.create_ah("0.0.0.0:4791".parse().unwrap()).is_err());
    assert!(pa.create_ah("127.0.0.1:0".parse().unwrap()).is_err());
    // A UD send without a destination is refused at post time.
    let e = qa
        .post_send(&SendWr::new(1, WrOpcode::Send, vec![ma.sge(0, 8)]))
        .unwrap_err();
    assert!(e.to_string().contains("address handle"), "{e}");

    let send = |id: u64, dest: UdDest, len: u32| {
        let msg = pattern(id as u8, len as usize);
        ma.write(0, &msg).unwrap();
        qa.post_send(&SendWr::new(id, WrOpcode::Send, vec![ma.sge(0, len)]).to(dest))
            .unwrap();
        collect(&ca, 1);
        msg
    };
    let m1 = send(1, ah.dest(qb1.qpn(), qkey), 700);
    let wc = collect(&cb, 1);
    assert_eq!(
        (wc[0].qp_num, wc[0].src_qp, wc[0].byte_len, wc[0].wr_id),
        (qb1.qpn(), qa.qpn(), 40 + 700, 10)
    );
    assert_eq!(mb.read(40, 700).unwrap(), m1);
    assert_eq!(wc[0].src, Some(a.local_addr()));

    // A wrong Q_Key: dropped and counted (IBA 10.2.5: no completion on
    // either side's receive queue), and the QP goes on.
    let before = b.counters().qkey_violations;
    send(2, ah.dest(qb2.qpn(), 0x2222), 64);
    let deadline = Instant::now() + WAIT;
    while b.counters().qkey_violations == before && Instant::now() < deadline {
        b.progress().unwrap();
    }
    assert_eq!(b.counters().qkey_violations, before + 1);
    assert!(cb.poll(4).unwrap().is_empty());
    assert_eq!(srq.len(), 4, "a dropped datagram takes no receive");

    // A Q_Key with the high bit set means "the sending QP's own Q_Key".
    let m3 = send(3, ah.dest(qb2.qpn(), 0x8000_0000), 300);
    let wc = collect(&cb, 1);
    assert_eq!((wc[0].qp_num, wc[0].wr_id), (qb2.qpn(), 20));
    assert_eq!(mb.read(8192 + 40, 300).unwrap(), m3);

    // A UD message larger than the path MTU cannot go (UD does not
    // segment): a local length error on that QP, the others unharmed.
    let big = ud_qp(&pa, &ca, qkey, None);
    // UD's limit is the port's MTU (4096 on lo), not a path MTU.
    assert_eq!(big.mtu(), a.active_mtu());
    big.post_send(
        &SendWr::new(7, WrOpcode::Send, vec![ma.sge(0, 8000)]).to(ah.dest(qb1.qpn(), qkey)),
    )
    .unwrap();
    let wc = ca.wait(1, WAIT).unwrap();
    assert_eq!((wc[0].wr_id, wc[0].status), (7, WcStatus::LocLenErr));
    let m4 = send(4, ah.dest(qb1.qpn(), qkey), 1000);
    let wc = collect(&cb, 1);
    assert_eq!((wc[0].qp_num, wc[0].wr_id), (qb1.qpn(), 11));
    assert_eq!(mb.read(2048 + 40, 1000).unwrap(), m4);
}
