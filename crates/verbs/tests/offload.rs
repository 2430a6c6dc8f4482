//! UDP GSO and GRO: what the kernel does to the IP ID of GSO segments (the
//! ICRC covers it), that transfers use both and stay byte-exact, and that a
//! capture of the kernel's own frames verifies segment by segment.

mod common;
mod prereq;

use common::*;
use roce_rnic::{Payload, RealMemory, Transmit};
use roce_verbs::packet::{self, IdentDelta, OutDatagram};
use roce_verbs::sys::{SendBatch, UDP_GRO, UDP_SEGMENT};
use roce_verbs::*;
use roce_wire::{BthRepr, Opcode, Psn, TransportRepr};
use std::collections::HashMap;
use std::mem::size_of;
use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4, UdpSocket};
use std::os::fd::AsRawFd;
use std::time::Duration;

fn setsockopt(fd: i32, level: i32, name: i32, v: i32) -> bool {
    // SAFETY: a pointer to a live c_int and its size.
    unsafe {
        libc::setsockopt(
            fd,
            level,
            name,
            (&v as *const i32).cast(),
            size_of::<i32>() as libc::socklen_t,
        ) == 0
    }
}

/// A socket like the engine's: unconnected, DF set.
fn df_socket(addr: SocketAddrV4) -> UdpSocket {
    let s = UdpSocket::bind(addr).unwrap();
    assert!(setsockopt(
        s.as_raw_fd(),
        libc::IPPROTO_IP,
        libc::IP_MTU_DISCOVER,
        libc::IP_PMTUDISC_DO
    ));
    s
}

/// A classic BPF socket filter that trims each datagram the socket is given
/// to 100 + (its IP ID) bytes of UDP payload: the ID becomes visible
/// through `recv`, which otherwise never shows it.
fn attach_ip_id_reporter(fd: i32) {
    const SKF_NET_OFF: i32 = -0x100000;
    let prog = [
        // ldh [net + 4]: the IP Identification
        libc::sock_filter {
            code: 0x28,
            jt: 0,
            jf: 0,
            k: (SKF_NET_OFF + 4) as u32,
        },
        // add #108 (8 bytes of UDP header + 100)
        libc::sock_filter {
            code: 0x04,
            jt: 0,
            jf: 0,
            k: 108,
        },
        // ret a
        libc::sock_filter {
            code: 0x16,
            jt: 0,
            jf: 0,
            k: 0,
        },
    ];
    let fprog = libc::sock_fprog {
        len: prog.len() as u16,
        filter: prog.as_ptr() as *mut _,
    };
    // SAFETY: the program outlives the call (the kernel copies it).
    let r = unsafe {
        libc::setsockopt(
            fd,
            libc::SOL_SOCKET,
            libc::SO_ATTACH_FILTER,
            (&fprog as *const libc::sock_fprog).cast(),
            size_of::<libc::sock_fprog>() as libc::socklen_t,
        )
    };
    assert_eq!(
        r,
        0,
        "SO_ATTACH_FILTER: {}",
        std::io::Error::last_os_error()
    );
}

/// Receives what is waiting: (length, UDP_GRO segment size or 0) per datagram.
fn drain(s: &UdpSocket) -> Vec<(usize, usize)> {
    std::thread::sleep(Duration::from_millis(50));
    let mut out = Vec::new();
    loop {
        let mut buf = vec![0u8; 70_000];
        let mut ctrl = [0u64; 16];
        let mut iov = libc::iovec {
            iov_base: buf.as_mut_ptr().cast(),
            iov_len: buf.len(),
        };
        // SAFETY: plain old data.
        let mut h: libc::msghdr = unsafe { std::mem::zeroed() };
        h.msg_iov = &mut iov;
        h.msg_iovlen = 1;
        h.msg_control = ctrl.as_mut_ptr().cast();
        h.msg_controllen = size_of::<[u64; 16]>() as _;
        // SAFETY: the header points at live buffers of the sizes given.
        let n = unsafe { libc::recvmsg(s.as_raw_fd(), &mut h, libc::MSG_DONTWAIT) };
        if n < 0 {
            return out;
        }
        let mut seg = 0usize;
        // SAFETY: walking the control area the kernel filled.
        unsafe {
            let mut c = libc::CMSG_FIRSTHDR(&h);
            while !c.is_null() {
                if (*c).cmsg_level == libc::SOL_UDP && (*c).cmsg_type == UDP_GRO {
                    seg = *(libc::CMSG_DATA(c) as *const i32) as usize;
                }
                c = libc::CMSG_NXTHDR(&h, c);
            }
        }
        out.push((n as usize, seg));
    }
}

fn raw(dst: SocketAddrV4, len: usize) -> OutDatagram {
    OutDatagram {
        dst: SocketAddr::V4(dst),
        tos: 0,
        head: [0; packet::MAX_HEAD],
        head_len: 0,
        body: packet::Body::Owned(vec![0x42; len]),
        tail: [0; 8],
        tail_len: 0,
        ident: 0,
        sealed: true,
    }
}

/// The facts the engine's ICRCs rest on, read from this kernel: a UDP GSO
/// send of five segments from an unconnected DF socket reaches a socket
/// without GRO as five datagrams with IP IDs 0, 1, 2, 3, 4, and a socket
/// with GRO as one buffer (with its segment size) that was never cut: the
/// filter sees the single ID 0 of the whole send.
#[test]
fn kernel_numbers_gso_segments_up_from_id_0() {
    let lo = |p| SocketAddrV4::new(Ipv4Addr::LOCALHOST, p);
    let tx = df_socket(lo(0));
    let plain = UdpSocket::bind(lo(0)).unwrap();
    let gro = UdpSocket::bind(lo(0)).unwrap();
    if !setsockopt(gro.as_raw_fd(), libc::SOL_UDP, UDP_GRO, 1) {
        eprintln!("SKIP kernel_numbers_gso_segments_up_from_id_0: no UDP_GRO in this kernel");
        return;
    }
    attach_ip_id_reporter(plain.as_raw_fd());
    let to = |s: &UdpSocket| match s.local_addr().unwrap() {
        SocketAddr::V4(a) => a,
        _ => unreachable!(),
    };
    let mut run: Vec<OutDatagram> = (0..4).map(|_| raw(to(&plain), 1000)).collect();
    run.push(raw(to(&plain), 600));
    let mut b = SendBatch::default();
    match b.send_grouped(tx.as_raw_fd(), &run, &[5], &RealMemory::new()) {
        Ok(5) => {}
        r => {
            eprintln!("SKIP kernel_numbers_gso_segments_up_from_id_0: no UDP GSO ({r:?})");
            return;
        }
    }
    let got = drain(&plain);
    let ids: Vec<usize> = got.iter().map(|(n, _)| n - 100).collect();
    assert_eq!(ids, [0, 1, 2, 3, 4], "IP IDs a socket without GRO is given");
    assert!(got.iter().all(|&(_, seg)| seg == 0));

    for d in &mut run {
        d.dst = SocketAddr::V4(to(&gro));
    }
    assert_eq!(
        b.send_grouped(tx.as_raw_fd(), &run, &[5], &RealMemory::new())
            .unwrap(),
        5
    );
    assert_eq!(
        drain(&gro),
        [(4600, 1000)],
        "one GRO buffer, segment size 1000"
    );
    attach_ip_id_reporter(gro.as_raw_fd());
    assert_eq!(
        b.send_grouped(tx.as_raw_fd(), &run, &[5], &RealMemory::new())
            .unwrap(),
        5
    );
    let got = drain(&gro);
    assert_eq!(got.len(), 1);
    assert_eq!(
        got[0].0 - 100,
        0,
        "the GRO socket's filter sees the uncut send, ID 0"
    );
    let _ = UDP_SEGMENT;
}

/// WRITE, SEND and READ of `len` bytes each way, data checked.
fn exercise(a: &Side, b: &Side, len: usize, seed: u8) {
    let src = pattern(seed, len);
    a.mr.write(0, &src).unwrap();
    b.qp.post_recv(&RecvWr {
        wr_id: 9,
        sg_list: vec![b.mr.sge(len, len as u32)],
    })
    .unwrap();
    let wrs = [
        SendWr::new(
            1,
            WrOpcode::RdmaWrite {
                remote_addr: a.peer.addr,
                rkey: a.peer.rkey,
            },
            vec![a.mr.sge(0, len as u32)],
        ),
        SendWr::new(2, WrOpcode::Send, vec![a.mr.sge(0, len as u32)]),
        SendWr::new(
            3,
            WrOpcode::RdmaRead {
                remote_addr: a.peer.remote_addr(len as u64),
                rkey: a.peer.rkey,
            },
            vec![a.mr.sge(2 * len, len as u32)],
        ),
    ];
    a.qp.post_send_batch(&wrs).unwrap();
    ok_wc(&a.cq.wait(3, WAIT).unwrap());
    ok_wc(&b.cq.wait(1, WAIT).unwrap());
    assert_eq!(b.mr.read(0, len).unwrap(), src, "WRITE");
    assert_eq!(b.mr.read(len, len).unwrap(), src, "SEND");
    assert_eq!(a.mr.read(2 * len, len).unwrap(), src, "READ");
}

#[test]
fn transfers_use_gso_and_gro_and_stay_exact() {
    for mtu in [Mtu::Mtu1024, Mtu::Mtu4096] {
        let (a, b) = pair(Opts {
            buf: 1 << 20,
            mtu,
            ..Default::default()
        });
        let (gso, gro) = a.ctx.with_engine(|e| (e.gso(), e.gro()));
        let _drive_b = b.ctx.spawn_progress(false);
        exercise(&a, &b, 256 * 1024, 5);
        let (sa, sb) = (a.ctx.stats(), b.ctx.stats());
        assert_eq!(sa.icrc_errors + sb.icrc_errors, 0, "{sa:?} {sb:?}");
        assert_eq!(sa.cmsg_truncated + sb.cmsg_truncated, 0);
        if !(gso && gro) {
            eprintln!("UDP GSO/GRO unavailable here (gso {gso}, gro {gro}): checked the fallback");
            continue;
        }
        // WRITE/SEND go out A's GSO and in B's GRO; READ responses the other way.
        assert!(
            sa.tx_gso_sends > 0 && sb.rx_gro_buffers > 0,
            "{sa:?} {sb:?}"
        );
        assert!(
            sb.tx_gso_sends > 0 && sa.rx_gro_buffers > 0,
            "{sa:?} {sb:?}"
        );
        assert!(sa.tx_packets > 2 * sa.tx_gso_sends);
    }
    // Off by configuration: one datagram per message, as before.
    let mut o = Opts::default();
    o.cfg_a.offload = false;
    o.cfg_b.offload = false;
    let (a, b) = pair(o);
    assert!(!a.ctx.with_engine(|e| e.gso() || e.gro()));
    let _drive_b = b.ctx.spawn_progress(false);
    exercise(&a, &b, 16 * 1024, 6);
    let (sa, sb) = (a.ctx.stats(), b.ctx.stats());
    assert_eq!(
        sa.tx_gso_sends + sb.tx_gso_sends + sa.rx_gro_buffers + sb.rx_gro_buffers,
        0
    );
    assert_eq!(sa.icrc_errors + sb.icrc_errors, 0);
}

fn write_middle(dst: SocketAddrV4, psn: u32, last: bool, len: usize) -> Transmit {
    let repr = TransportRepr::new(BthRepr {
        opcode: if last {
            Opcode::RcWriteLast
        } else {
            Opcode::RcWriteMiddle
        },
        dest_qp: 0x77,
        psn: Psn::new(psn),
        pkey: 0xffff,
        ..Default::default()
    });
    Transmit {
        dst: SocketAddr::V4(dst),
        udp_sport: 0xc000,
        dscp: 26,
        ecn_capable: true,
        src_qpn: 0x66,
        repr,
        payload: Payload::Bytes((0..len).map(|i| (i * 7 + psn as usize) as u8).collect()),
    }
}

/// Every frame the kernel shows on lo must carry a valid ICRC for the IP
/// header it really has. Two parts, both captured with dumpcap on lo:
///
/// 1. A GSO run too large for lo to pass whole (62 × 1040 + 1016 bytes,
///    past the 65493-byte limit) is cut by the kernel before lo, so the
///    capture shows the real segments with IDs 0…62: each must verify
///    as it is, with the ICRC the engine computes for segment `k`.
/// 2. Engine traffic (WRITE, SEND, READ at MTU 1024 and 4096): lo shows a
///    GSO send as one frame; cut where the engine's own capture says the
///    datagrams end, with the IDs the kernel gives the pieces, every piece
///    must verify; every other frame must verify as it is, with ID 0.
#[test]
fn kernel_capture_of_gso_traffic_verifies() {
    const TEST: &str = "kernel_capture_of_gso_traffic_verifies";
    if !prereq::root(TEST, "capturing on lo") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("lo.pcapng");
    // Addresses of our own in 127/8, so port 4791 (which the decoder wants)
    // is ours on both ends.
    let p = std::process::id();
    let ip = |net: u8| Ipv4Addr::new(127, net, (p >> 8) as u8, p as u8);
    let (ip_a, ip_b, ip_r, ip_s) = (ip(71), ip(72), ip(73), ip(74));
    let filter = format!("udp port 4791 and (host {ip_a} or host {ip_r})");
    let Some(cap) = prereq::Capture::start(TEST, "lo", &filter, &file) else {
        return;
    };

    // Part 1: a run the kernel must cut itself.
    let from = SocketAddrV4::new(ip_r, 4791);
    let to = SocketAddrV4::new(ip_s, 4791);
    let tx = df_socket(from);
    let _rx = UdpSocket::bind(to).unwrap();
    let mut deltas = IdentDelta::new();
    let mut run: Vec<OutDatagram> = (0..63u32)
        .map(|k| {
            let t = write_middle(to, k, k == 62, if k == 62 { 1000 } else { 1024 });
            packet::build(t, SocketAddr::V4(from)).unwrap()
        })
        .collect();
    for (k, d) in run.iter_mut().enumerate() {
        d.set_ident(k as u16, &mut deltas);
    }
    assert_eq!(run.iter().map(|d| d.len()).sum::<usize>(), 65496);
    let mut b = SendBatch::default();
    let sent = b.send_grouped(tx.as_raw_fd(), &run, &[63], &RealMemory::new());

    // Part 2: engine traffic.
    let engine_pcaps = [dir.path().join("e1024.pcap"), dir.path().join("e4096.pcap")];
    let mut gso_frames = 0;
    for (mtu, pcap) in [Mtu::Mtu1024, Mtu::Mtu4096].into_iter().zip(&engine_pcaps) {
        let mut o = Opts {
            a: SocketAddr::new(ip_a.into(), 4791),
            b: SocketAddr::new(ip_b.into(), 4791),
            buf: 1 << 20,
            mtu,
            ..Default::default()
        };
        // A's own capture (both directions) says where each datagram ends.
        o.cfg_a.pcap = Some(pcap.clone());
        let (a, b) = pair(o);
        let _drive_b = b.ctx.spawn_progress(false);
        exercise(&a, &b, 64 * 1024, 9);
        a.ctx.flush_pcap().unwrap();
    }
    let bytes = cap.stop(
        SocketAddr::new(ip_r.into(), 0),
        SocketAddr::new(ip_s.into(), 4791),
    );
    match sent {
        Ok(63) => {}
        r => panic!("the oversized GSO run was refused: {r:?}"),
    }

    let capture = roce_wire::pcap::read_capture(&bytes).unwrap();
    // Where the engine's datagrams end: UDP payload length by source and first bytes.
    let key = |f: &[u8]| -> ([u8; 6], Vec<u8>) {
        let mut src = [0u8; 6];
        src[..4].copy_from_slice(&f[26..30]);
        src[4..].copy_from_slice(&f[34..36]);
        (src, f[42..f.len().min(42 + 16)].to_vec())
    };
    let mut lens = HashMap::new();
    for p in &engine_pcaps {
        let ecap = roce_wire::pcap::read_capture(&std::fs::read(p).unwrap()).unwrap();
        for f in &ecap.frames {
            lens.insert(key(&f.data), f.data.len() - 42);
        }
    }
    let verify = |f: &[u8], what: &str| {
        let roce_wire::Frame::Roce(rf) = roce_wire::parse_frame(f).unwrap() else {
            panic!("{what}: not RoCEv2")
        };
        assert!(rf.icrc_ok(), "{what}: ICRC");
        assert!(rf.ip_checksum_ok, "{what}: IP checksum");
        u16::from_be_bytes([f[18], f[19]])
    };
    let mut part1 = Vec::new();
    let mut plain = 0;
    for f in &capture.frames {
        let d = &f.data;
        if prereq::is_marker(d) {
            continue; // the capture's own end marker
        }
        assert_eq!(d[20] & 0x40, 0x40, "DF is set");
        let src = Ipv4Addr::new(d[26], d[27], d[28], d[29]);
        if d[26..30] == d[30..34] && d[34..36] == d[36..38] {
            // The engine's GSO probe at open, sent to itself (not RoCE).
            continue;
        }
        if src == ip_r {
            part1.push(verify(d, "a segment the kernel cut"));
            continue;
        }
        let whole_ok =
            matches!(roce_wire::parse_frame(d), Ok(roce_wire::Frame::Roce(rf)) if rf.icrc_ok());
        if whole_ok {
            assert_eq!(verify(d, "a single datagram"), 0, "IP ID");
            plain += 1;
            continue;
        }
        // A GSO send, shown whole: cut it where the engine's datagrams end.
        assert_eq!(&d[18..20], &[0, 0], "a GSO send has ID 0");
        let Some(&seg) = lens.get(&key(d)) else {
            panic!(
                "a frame that neither verifies nor starts a datagram the engine sent: {} bytes, {:02x?}",
                d.len(),
                &d[..d.len().min(64)]
            )
        };
        let pieces = packet::gso_segments(d, seg).unwrap();
        assert!(pieces.len() > 1);
        for (k, piece) in pieces.iter().enumerate() {
            assert_eq!(verify(piece, "a GSO segment"), k as u16);
        }
        gso_frames += 1;
    }
    assert_eq!(
        part1,
        (0..63).collect::<Vec<u16>>(),
        "the kernel cut the run into IDs 0…62, each with a valid ICRC"
    );
    assert!(plain + gso_frames > 0, "no engine traffic captured");
    let gso = Device::open_with(SocketAddr::new(ip_a.into(), 0), EngineConfig::default())
        .unwrap()
        .with_engine(|e| e.gso());
    if gso {
        assert!(gso_frames > 0, "GSO is on but lo showed no GSO send");
    }
    eprintln!(
        "kernel capture: {} cut segments, {plain} single datagrams, {gso_frames} GSO sends, all verified",
        part1.len()
    );
}
