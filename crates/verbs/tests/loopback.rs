//! Every opcode between two engines over real UDP sockets on loopback, the
//! capture they write, and what the set-up refuses.

mod common;

use common::*;
use roce_verbs::*;
use std::time::Duration;

#[test]
fn every_opcode_moves_the_right_bytes() {
    let (a, b) = pair(Opts::default());
    let _drive_b = b.ctx.spawn_progress(false);
    let msg = pattern(1, 3000);
    a.mr.write(0, &msg).unwrap();
    for id in 0..2 {
        b.qp.post_recv(&RecvWr {
            wr_id: 100 + id,
            sg_list: vec![b.mr.sge(id as usize * 4096, 4096)],
        })
        .unwrap();
    }
    // A third receive for WRITE_WITH_IMM's immediate.
    b.qp.post_recv(&RecvWr {
        wr_id: 102,
        sg_list: vec![],
    })
    .unwrap();

    // SEND, multi-packet at MTU 1024.
    a.qp.post_send(&SendWr::new(1, WrOpcode::Send, vec![a.mr.sge(0, 3000)]))
        .unwrap();
    ok_wc(&a.cq.wait(1, WAIT).unwrap());
    let wc = b.cq.wait(1, WAIT).unwrap();
    ok_wc(&wc);
    assert_eq!(
        (wc[0].wr_id, wc[0].byte_len, wc[0].opcode),
        (100, 3000, WcOpcode::Recv)
    );
    assert_eq!(b.mr.read(0, 3000).unwrap(), msg);

    // SEND_WITH_IMM.
    a.qp.post_send(&SendWr::new(
        2,
        WrOpcode::SendWithImm(0xfeed),
        vec![a.mr.sge(0, 100)],
    ))
    .unwrap();
    ok_wc(&a.cq.wait(1, WAIT).unwrap());
    let wc = b.cq.wait(1, WAIT).unwrap();
    assert!(wc[0].wc_flags.with_imm);
    assert_eq!(
        (wc[0].wr_id, wc[0].imm_data, wc[0].byte_len),
        (101, 0xfeed, 100)
    );
    assert_eq!(b.mr.read(4096, 100).unwrap(), msg[..100]);

    // RDMA WRITE, 5000 bytes at an offset.
    let w = pattern(2, 5000);
    a.mr.write(8192, &w).unwrap();
    let wr = SendWr::new(
        3,
        WrOpcode::RdmaWrite {
            remote_addr: a.peer.remote_addr(8192),
            rkey: a.peer.rkey,
        },
        vec![a.mr.sge(8192, 5000)],
    );
    a.qp.post_send(&wr).unwrap();
    ok_wc(&a.cq.wait(1, WAIT).unwrap());
    assert_eq!(b.mr.read(8192, 5000).unwrap(), w);

    // RDMA WRITE_WITH_IMM: data placed, and a receive consumed for the immediate.
    let wr = SendWr::new(
        4,
        WrOpcode::RdmaWriteWithImm {
            remote_addr: a.peer.remote_addr(16384),
            rkey: a.peer.rkey,
            imm: 0xabcd,
        },
        vec![a.mr.sge(8192, 64)],
    );
    a.qp.post_send(&wr).unwrap();
    ok_wc(&a.cq.wait(1, WAIT).unwrap());
    let wc = b.cq.wait(1, WAIT).unwrap();
    assert_eq!(
        (wc[0].wr_id, wc[0].opcode, wc[0].imm_data, wc[0].byte_len),
        (102, WcOpcode::RecvRdmaWithImm, 0xabcd, 64)
    );
    assert_eq!(b.mr.read(16384, 64).unwrap(), w[..64]);

    // RDMA READ: 4000 bytes of B land in A.
    let r = pattern(3, 4000);
    b.mr.write(20000, &r).unwrap();
    let wr = SendWr::new(
        5,
        WrOpcode::RdmaRead {
            remote_addr: a.peer.remote_addr(20000),
            rkey: a.peer.rkey,
        },
        vec![a.mr.sge(30000, 4000)],
    );
    a.qp.post_send(&wr).unwrap();
    let wc = a.cq.wait(1, WAIT).unwrap();
    ok_wc(&wc);
    assert_eq!(wc[0].opcode, WcOpcode::RdmaRead);
    assert_eq!(a.mr.read(30000, 4000).unwrap(), r);

    // Atomics on B's word at 40000 (aligned), original values into A.
    b.mr.write(40000, &5u64.to_le_bytes()).unwrap();
    let cas = SendWr::new(
        6,
        WrOpcode::AtomicCmpAndSwp {
            remote_addr: a.peer.remote_addr(40000),
            rkey: a.peer.rkey,
            compare: 5,
            swap: 9,
        },
        vec![a.mr.sge(40000, 8)],
    );
    a.qp.post_send(&cas).unwrap();
    ok_wc(&a.cq.wait(1, WAIT).unwrap());
    assert_eq!(a.mr.read_u64(40000).unwrap(), 5);
    assert_eq!(b.mr.read_u64(40000).unwrap(), 9);
    let fadd = SendWr::new(
        7,
        WrOpcode::AtomicFetchAndAdd {
            remote_addr: a.peer.remote_addr(40000),
            rkey: a.peer.rkey,
            add: 3,
        },
        vec![a.mr.sge(40008, 8)],
    );
    a.qp.post_send(&fadd).unwrap();
    let wc = a.cq.wait(1, WAIT).unwrap();
    ok_wc(&wc);
    assert_eq!(wc[0].opcode, WcOpcode::FetchAdd);
    assert_eq!(a.mr.read_u64(40008).unwrap(), 9);
    assert_eq!(b.mr.read_u64(40000).unwrap(), 12);

    let s = a.ctx.stats();
    assert!(s.tx_packets > 0 && s.rx_packets > 0);
    assert_eq!((s.icrc_errors, s.malformed, s.unknown_qp), (0, 0, 0));
    assert_eq!(b.ctx.stats().icrc_errors, 0);
}

#[test]
fn batched_posts_and_inline_sends() {
    let (a, b) = pair(Opts::default());
    let _drive_b = b.ctx.spawn_progress(false);
    let data = pattern(9, 32 * 512);
    a.mr.write(0, &data).unwrap();
    let recvs: Vec<RecvWr> = (0..32)
        .map(|i| RecvWr {
            wr_id: i,
            sg_list: vec![b.mr.sge(i as usize * 512, 512)],
        })
        .collect();
    b.qp.post_recv_batch(&recvs).unwrap();
    let sends: Vec<SendWr> = (0..32)
        .map(|i| {
            let wr = SendWr::new(i, WrOpcode::Send, vec![a.mr.sge(i as usize * 512, 512)]);
            if i % 2 == 0 { wr } else { wr.unsignaled() }
        })
        .collect();
    a.qp.post_send_batch(&sends).unwrap();
    let wcs = a.cq.wait(16, WAIT).unwrap();
    ok_wc(&wcs);
    let got = b.cq.wait(32, WAIT).unwrap();
    ok_wc(&got);
    assert_eq!(b.mr.read(0, data.len()).unwrap(), data);
    // Inline: the buffer may change right after posting.
    a.mr.write(0, b"inline!!").unwrap();
    b.qp.post_recv(&RecvWr {
        wr_id: 99,
        sg_list: vec![b.mr.sge(60000, 8)],
    })
    .unwrap();
    a.qp.post_send(&SendWr::new(50, WrOpcode::Send, vec![a.mr.sge(0, 8)]).inline())
        .unwrap();
    a.mr.write(0, b"changed!").unwrap();
    ok_wc(&a.cq.wait(1, WAIT).unwrap());
    ok_wc(&b.cq.wait(1, WAIT).unwrap());
    assert_eq!(b.mr.read(60000, 8).unwrap(), b"inline!!");
}

#[test]
fn capture_holds_decodable_frames_with_valid_icrc() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("cap.pcap");
    let mut o = Opts {
        a: "127.0.91.1:4791".parse().unwrap(),
        b: "127.0.91.2:4791".parse().unwrap(),
        ..Default::default()
    };
    o.cfg_a.pcap = Some(file.clone());
    let (a, b) = pair(o);
    let _drive_b = b.ctx.spawn_progress(false);
    a.mr.write(0, &pattern(4, 2500)).unwrap();
    let wr = SendWr::new(
        1,
        WrOpcode::RdmaWrite {
            remote_addr: a.peer.addr,
            rkey: a.peer.rkey,
        },
        vec![a.mr.sge(0, 2500)],
    );
    a.qp.post_send(&wr).unwrap();
    ok_wc(&a.cq.wait(1, WAIT).unwrap());
    a.ctx.flush_pcap().unwrap();
    let bytes = std::fs::read(&file).unwrap();
    let cap = roce_wire::pcap::read_capture(&bytes).unwrap();
    // Three WRITE packets out (first/middle/last) and at least one ACK back.
    assert!(cap.frames.len() >= 4, "{} frames", cap.frames.len());
    let mut opcodes = Vec::new();
    for f in &cap.frames {
        let roce_wire::Frame::Roce(r) = roce_wire::parse_frame(&f.data).unwrap() else {
            panic!("not RoCE");
        };
        assert!(r.icrc_ok(), "ICRC of {:?}", r.transport.bth.opcode);
        assert!(r.ip_checksum_ok);
        opcodes.push(r.transport.bth.opcode);
        if r.transport.bth.opcode.is_request() {
            // Data packets leave as ECT(0) with DSCP 26.
            assert_eq!((r.ip.dscp(), r.ip.ecn()), (26, 2));
        }
    }
    use roce_wire::Opcode::*;
    assert!(opcodes.contains(&RcWriteFirst) && opcodes.contains(&RcWriteLast));
    assert!(opcodes.contains(&RcAck));
}

#[test]
fn mismatched_mtu_is_refused_with_a_clear_message() {
    let ctx = Device::open_with("127.0.0.1:0".parse().unwrap(), EngineConfig::default()).unwrap();
    let pd = ctx.alloc_pd().unwrap();
    let cq = ctx.create_cq(16).unwrap();
    let a = pd.qp_builder(&cq).mtu(Mtu::Mtu1024).build().unwrap();
    let b = pd.qp_builder(&cq).mtu(Mtu::Mtu4096).build().unwrap();
    let err = a.connect(&b.endpoint()).err().expect("must fail");
    let msg = err.to_string();
    assert!(
        matches!(
            err,
            Error::MtuMismatch {
                local: 1024,
                remote: 4096
            }
        ),
        "{msg}"
    );
    assert!(
        msg.contains("MTU") && msg.contains("1024") && msg.contains("4096"),
        "{msg}"
    );
    let mut bad = b.endpoint();
    bad.mtu = 1000;
    let c = pd.qp_builder(&cq).build().unwrap();
    assert!(
        c.connect(&bad)
            .err()
            .unwrap()
            .to_string()
            .contains("not a path MTU")
    );
}

#[test]
fn unreachable_peer_fails_clearly() {
    // Out of band: nobody listens on the port.
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = l.local_addr().unwrap().port();
    drop(l);
    let err = Control::connect(&format!("127.0.0.1:{port}"), Duration::from_secs(2))
        .err()
        .expect("must fail");
    assert!(err.to_string().contains("connection refused"), "{err}");

    // In band: a QP whose peer never answers ends in RETRY_EXC_ERR.
    let ctx = Device::open_with("127.0.0.1:0".parse().unwrap(), EngineConfig::default()).unwrap();
    let pd = ctx.alloc_pd().unwrap();
    let cq = ctx.create_cq(16).unwrap();
    let mr = pd.reg_mr(64, Access::ALL).unwrap();
    let dead = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    let dead_port = dead.local_addr().unwrap().port();
    let qp = pd.qp_builder(&cq).timeout(1).retry_cnt(2).build().unwrap();
    let mut peer = qp.endpoint();
    peer.udp_port = dead_port;
    peer.qpn = 0x99;
    let qp = qp.connect(&peer).unwrap();
    let wr = SendWr::new(
        1,
        WrOpcode::RdmaWrite {
            remote_addr: 0x1000,
            rkey: 1,
        },
        vec![mr.sge(0, 64)],
    );
    qp.post_send(&wr).unwrap();
    let wc = cq.wait(1, WAIT).unwrap();
    assert_eq!(wc[0].status, WcStatus::RetryExcErr);
    assert!(ctx.stats().retransmissions >= 2);
    drop(dead);
}

#[test]
fn ud_send_carries_a_datagram_and_its_source() {
    let open =
        || Device::open_with("127.0.0.1:0".parse().unwrap(), EngineConfig::default()).unwrap();
    let (a, b) = (open(), open());
    let (pa, pb) = (a.alloc_pd().unwrap(), b.alloc_pd().unwrap());
    let (ca, cb) = (a.create_cq(16).unwrap(), b.create_cq(16).unwrap());
    let (ma, mb) = (
        pa.reg_mr(4096, Access::ALL).unwrap(),
        pb.reg_mr(4096, Access::ALL).unwrap(),
    );
    let qkey = 0x1234_5678;
    let ud = |pd: &Pd, cq: &Cq| {
        pd.qp_builder(cq)
            .qp_type(QpType::Ud)
            .qkey(qkey)
            .build()
            .unwrap()
            .activate()
            .unwrap()
    };
    let (qa, qb) = (ud(&pa, &ca), ud(&pb, &cb));
    // A UD receive buffer starts with 40 bytes for the GRH.
    qb.post_recv(&RecvWr {
        wr_id: 9,
        sg_list: vec![mb.sge(0, 40 + 512)],
    })
    .unwrap();
    ma.write(0, &pattern(6, 512)).unwrap();
    let dest = UdDest {
        addr: b.local_addr(),
        remote_qpn: qb.qpn(),
        remote_qkey: qkey,
    };
    qa.post_send(&SendWr::new(1, WrOpcode::Send, vec![ma.sge(0, 512)]).to(dest))
        .unwrap();
    ok_wc(&ca.wait(1, WAIT).unwrap());
    let wc = cb.wait(1, WAIT).unwrap();
    ok_wc(&wc);
    assert_eq!((wc[0].wr_id, wc[0].src_qp), (9, qa.qpn()));
    assert!(wc[0].wc_flags.grh);
    assert_eq!(mb.read(40, 512).unwrap(), pattern(6, 512));
    // A wrong Q_Key is dropped and counted, not delivered.
    qb.post_recv(&RecvWr {
        wr_id: 10,
        sg_list: vec![mb.sge(0, 40 + 512)],
    })
    .unwrap();
    let bad = UdDest {
        remote_qkey: 1,
        ..dest
    };
    qa.post_send(&SendWr::new(2, WrOpcode::Send, vec![ma.sge(0, 16)]).to(bad))
        .unwrap();
    ok_wc(&ca.wait(1, WAIT).unwrap());
    let deadline = std::time::Instant::now() + WAIT;
    while b.with_engine(|e| e.rnic().counters().qkey_violations) == 0
        && std::time::Instant::now() < deadline
    {
        b.progress().unwrap();
    }
    assert_eq!(b.with_engine(|e| e.rnic().counters().qkey_violations), 1);
    assert!(cb.poll(4).unwrap().is_empty());
}
