//! RoCEv2 over IPv6 through the verbs API, over real UDP sockets: on `::1`
//! (always there), and between two addresses on `lo` (`fd7c:e5d1:9a02::1`, `fd7c:e5d1:9a02::2`)
//! when run as root, which can add them. The ICRC covers the IPv6 header
//! with its variant fields masked; the traffic class carries DSCP and ECN.

mod common;
mod prereq;

use common::*;
use roce_verbs::*;
use std::net::SocketAddr;
use std::path::Path;

/// Writes 3000 bytes from A to B (three packets at MTU 1024), reads them
/// back, and checks what B's capture saw: every frame IPv6 between the two
/// addresses, every ICRC good, and data packets with the traffic class the
/// sender asked for (DSCP 26, ECT(0)), as B's socket read it.
fn write_read_and_check_capture(a_addr: &str, b_addr: &str, dir: &Path) {
    let file = dir.join("v6.pcap");
    let mut o = Opts {
        a: a_addr.parse().unwrap(),
        b: b_addr.parse().unwrap(),
        ..Default::default()
    };
    o.cfg_b.pcap = Some(file.clone());
    let (a, b) = pair(o);
    assert!(a.ctx.local_addr().is_ipv6() && a.peer.ip.is_ipv6());
    let _drive_b = b.ctx.spawn_progress(false);
    let msg = pattern(6, 3000);
    a.mr.write(0, &msg).unwrap();
    a.qp.post_send(&SendWr::new(
        1,
        WrOpcode::RdmaWrite {
            remote_addr: a.peer.addr,
            rkey: a.peer.rkey,
        },
        vec![a.mr.sge(0, 3000)],
    ))
    .unwrap();
    ok_wc(&a.cq.wait(1, WAIT).unwrap());
    assert_eq!(b.mr.read(0, 3000).unwrap(), msg);
    a.qp.post_send(&SendWr::new(
        2,
        WrOpcode::RdmaRead {
            remote_addr: a.peer.addr,
            rkey: a.peer.rkey,
        },
        vec![a.mr.sge(8192, 3000)],
    ))
    .unwrap();
    ok_wc(&a.cq.wait(1, WAIT).unwrap());
    assert_eq!(a.mr.read(8192, 3000).unwrap(), msg);
    // Every datagram's ICRC checked good against its IPv6 header.
    // (Retransmissions are not asserted: on a loaded machine a timer may
    // fire, and tests assert behaviour, not timing.)
    for s in [a.ctx.stats(), b.ctx.stats()] {
        assert_eq!((s.icrc_errors, s.malformed), (0, 0), "{s:?}");
    }
    drop(_drive_b);
    b.ctx.flush_pcap().unwrap();
    let cap = roce_wire::pcap::read_capture(&std::fs::read(&file).unwrap()).unwrap();
    let (ia, ib) = (a.ctx.local_addr().ip(), b.ctx.local_addr().ip());
    let mut data = 0;
    for f in &cap.frames {
        let ports = [a.ctx.local_addr().port(), b.ctx.local_addr().port()];
        let roce_wire::Frame::Roce(r) = roce_wire::parse_frame_ports(&f.data, &ports).unwrap()
        else {
            panic!("not RoCE");
        };
        let roce_wire::IpRepr::V6(ip) = r.ip else {
            panic!("not IPv6: {:?}", r.ip);
        };
        assert!(r.icrc_ok(), "ICRC of {:?}", r.transport.bth.opcode);
        let pair = (std::net::IpAddr::V6(ip.src), std::net::IpAddr::V6(ip.dst));
        assert!(pair == (ia, ib) || pair == (ib, ia), "{pair:?}");
        if r.transport.bth.opcode.is_request() {
            assert_eq!((ip.dscp, ip.ecn), (26, 2), "traffic class of a request");
            data += 1;
        }
    }
    // B received the three WRITE packets and the READ request.
    assert!(data >= 4, "{data} request frames in B's capture");
}

#[test]
fn rc_write_and_read_over_ipv6_loopback() {
    let dir = tempfile::tempdir().unwrap();
    write_read_and_check_capture("[::1]:0", "[::1]:0", dir.path());
}

#[test]
fn ud_and_srq_over_ipv6() {
    let open = || Device::open_with("[::1]:0".parse().unwrap(), EngineConfig::default()).unwrap();
    let (a, b) = (open(), open());
    let (pa, pb) = (a.alloc_pd().unwrap(), b.alloc_pd().unwrap());
    let (ca, cb) = (a.create_cq(16).unwrap(), b.create_cq(16).unwrap());
    let ma = pa.reg_mr(4096, Access::ALL).unwrap();
    let mb = pb.reg_mr(4096, Access::ALL).unwrap();
    let srq = pb.create_srq(4, 1).unwrap();
    let ud = |pd: &Pd, cq: &Cq, srq: Option<&Srq>| {
        let mut q = pd.qp_builder(cq).qp_type(QpType::Ud).qkey(7);
        if let Some(s) = srq {
            q = q.srq(s);
        }
        q.build().unwrap().activate().unwrap()
    };
    let (qa, qb) = (ud(&pa, &ca, None), ud(&pb, &cb, Some(&srq)));
    srq.post_srq_recv(&RecvWr {
        wr_id: 5,
        sg_list: vec![mb.sge(0, 40 + 600)],
    })
    .unwrap();
    // An IPv4 address handle on an IPv6 device: one clear error.
    let e = pa
        .create_ah("127.0.0.1:4791".parse().unwrap())
        .err()
        .unwrap();
    assert!(matches!(e, Error::AddressFamily { .. }), "{e}");
    let ah = pa.create_ah(b.local_addr()).unwrap();
    ma.write(0, &pattern(9, 600)).unwrap();
    qa.post_send(&SendWr::new(1, WrOpcode::Send, vec![ma.sge(0, 600)]).to(ah.dest(qb.qpn(), 7)))
        .unwrap();
    ok_wc(&ca.wait(1, WAIT).unwrap());
    let wc = cb.wait(1, WAIT).unwrap();
    ok_wc(&wc);
    assert_eq!(
        (wc[0].wr_id, wc[0].src_qp, wc[0].byte_len),
        (5, qa.qpn(), 640)
    );
    assert_eq!(wc[0].src, Some(a.local_addr()));
    // The GRH area holds the sender's GID: its IPv6 address itself.
    let grh = mb.read(0, 40).unwrap();
    assert_eq!(grh[0] >> 4, 6);
    assert_eq!(grh[8..24], Gid::from_ip(a.local_addr().ip()).0);
    assert_eq!(mb.read(40, 600).unwrap(), pattern(9, 600));
}

#[test]
fn an_ipv4_peer_of_an_ipv6_device_is_one_clear_error_and_others_go_on() {
    let v6 = Device::open_with("[::1]:0".parse().unwrap(), EngineConfig::default()).unwrap();
    let v4 = Device::open_with("127.0.0.1:0".parse().unwrap(), EngineConfig::default()).unwrap();
    let (p6, p4) = (v6.alloc_pd().unwrap(), v4.alloc_pd().unwrap());
    let (c6, c4) = (v6.create_cq(8).unwrap(), v4.create_cq(8).unwrap());
    let m4 = p4.reg_mr(4096, Access::ALL).unwrap();
    let q6 = p6.qp_builder(&c6).build().unwrap();
    let q4 = p4.qp_builder(&c4).build().unwrap();
    let e = q6.connect(&q4.endpoint_with(&m4)).err().unwrap();
    assert!(matches!(e, Error::AddressFamily { .. }), "{e}");
    assert!(
        e.to_string().contains("IPv6") && e.to_string().contains("IPv4"),
        "{e}"
    );
    // An IPv4-mapped address is an IPv4 peer, not an IPv6 one.
    let mut mapped_ep = q4.endpoint_with(&m4);
    mapped_ep.ip = "::ffff:127.0.0.1".parse().unwrap();
    let q6m = p6.qp_builder(&c6).build().unwrap();
    let e = q6m.connect(&mapped_ep).err().unwrap();
    assert!(matches!(e, Error::AddressFamily { .. }), "{e}");
    let e = p6
        .create_ah("[::ffff:127.0.0.1]:4791".parse().unwrap())
        .err()
        .unwrap();
    assert!(matches!(e, Error::AddressFamily { .. }), "{e}");
    // The reverse too.
    let q6b = p6.qp_builder(&c6).build().unwrap();
    let e = q4.connect(&q6b.endpoint()).err().unwrap();
    assert!(matches!(e, Error::AddressFamily { .. }), "{e}");
    // An IPv4-mapped address is IPv4 to a RoCEv2 peer, not IPv6: refused
    // at open, as an IPv6 socket with V6ONLY would never reach it.
    let mapped: SocketAddr = "[::ffff:127.0.0.1]:0".parse().unwrap();
    let d = Device::open_with(mapped, EngineConfig::default());
    assert!(d.is_err(), "a device on an IPv4-mapped address");
    // The devices keep working: a fresh pair of IPv6 QPs moves data.
    let dir = tempfile::tempdir().unwrap();
    write_read_and_check_capture("[::1]:0", "[::1]:0", dir.path());
}

/// Two IPv6 addresses of their own on `lo`, as two hosts would have: needs
/// root to add them; as root it must run, and fails if it cannot set up.
#[test]
fn rc_between_two_ipv6_addresses_on_lo() {
    const TEST: &str = "rc_between_two_ipv6_addresses_on_lo";
    if !prereq::root(TEST, "adding fd7c:e5d1:9a02::1 and fd7c:e5d1:9a02::2 to lo")
        || !prereq::tool(TEST, &["ip", "-V"], "apt-get install iproute2")
    {
        return;
    }
    let _a = prereq::LoIpv6::add("fd7c:e5d1:9a02::1");
    let _b = prereq::LoIpv6::add("fd7c:e5d1:9a02::2");
    let dir = tempfile::tempdir().unwrap();
    write_read_and_check_capture("[fd7c:e5d1:9a02::1]:0", "[fd7c:e5d1:9a02::2]:0", dir.path());
}

/// A long WRITE at MTU 4096 over IPv6: where the kernel has UDP GSO the
/// engine sends runs of segments as one GSO send (IPv6 has no IP ID, so
/// every segment keeps its one ICRC) and every byte arrives.
#[test]
fn long_write_over_ipv6_uses_gso_where_the_kernel_has_it() {
    let o = Opts {
        a: "[::1]:0".parse().unwrap(),
        b: "[::1]:0".parse().unwrap(),
        buf: 1 << 20,
        mtu: Mtu::Mtu4096,
        ..Default::default()
    };
    let (a, b) = pair(o);
    let _drive_b = b.ctx.spawn_progress(false);
    let msg = pattern(3, 1 << 20);
    a.mr.write(0, &msg).unwrap();
    a.qp.post_send(&SendWr::new(
        1,
        WrOpcode::RdmaWrite {
            remote_addr: a.peer.addr,
            rkey: a.peer.rkey,
        },
        vec![a.mr.sge(0, 1 << 20)],
    ))
    .unwrap();
    ok_wc(&a.cq.wait(1, WAIT).unwrap());
    assert_eq!(b.mr.read(0, 1 << 20).unwrap(), msg);
    let (sa, sb) = (a.ctx.stats(), b.ctx.stats());
    assert_eq!((sb.icrc_errors, sb.malformed), (0, 0), "{sb:?}");
    if a.ctx.with_engine(|e| e.gso()) {
        assert!(sa.tx_gso_sends > 0, "GSO is on but was never used: {sa:?}");
    } else {
        eprintln!("note: UDP GSO is off on this kernel; the write went datagram by datagram");
    }
}
