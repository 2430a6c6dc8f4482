//! The simulator's mode: virtual memory carries lengths, not bytes, through
//! the very same transport.

use roce_rnic::*;
use roce_wire::TransportPacket;
use std::net::SocketAddr;

#[test]
fn virtual_payloads_move_through_the_same_transport() {
    let addr: [SocketAddr; 2] = [
        "10.0.0.1:4791".parse().unwrap(),
        "10.0.0.2:4791".parse().unwrap(),
    ];
    let mut r: Vec<Rnic<VirtualMemory>> = (0..2)
        .map(|_| Rnic::new(RnicConfig::default(), VirtualMemory::new()))
        .collect();
    let mut ends = Vec::new();
    for n in r.iter_mut() {
        let pd = n.alloc_pd();
        let cq = n.create_cq(64).unwrap();
        let buf = n.mem_mut().alloc(1 << 30);
        let mr = n.reg_mr(pd, buf, 1 << 30, Access::ALL).unwrap();
        let qpn = n
            .create_qp(QpInitAttr::new(QpType::Rc, pd, cq, cq))
            .unwrap();
        ends.push((cq, buf, mr, qpn));
    }
    for i in 0..2 {
        let (_, _, _, me) = ends[i];
        let (_, _, _, peer) = ends[1 - i];
        r[i].modify_qp(me, QpState::Init, &QpAttr::init(Access::ALL))
            .unwrap();
        r[i].modify_qp(
            me,
            QpState::Rtr,
            &QpAttr::rtr(addr[1 - i], peer, 0, Mtu::Mtu4096),
        )
        .unwrap();
        r[i].modify_qp(me, QpState::Rts, &QpAttr::rts(0)).unwrap();
    }
    let (cq_a, buf_a, mr_a, qa) = ends[0];
    let (cq_b, buf_b, mr_b, qb) = ends[1];
    let len = 100u32 << 20;
    r[0].post_send(
        qa,
        &[SendWr::new(
            1,
            WrOpcode::RdmaWrite {
                remote_addr: buf_b,
                rkey: mr_b.rkey,
            },
            vec![Sge {
                addr: buf_a,
                length: len,
                lkey: mr_a.lkey,
            }],
        )],
    )
    .unwrap();
    r[1].post_recv(
        qb,
        &[2, 4].map(|wr_id| RecvWr {
            wr_id,
            sg_list: vec![Sge {
                addr: buf_b,
                length: 4096,
                lkey: mr_b.lkey,
            }],
        }),
    )
    .unwrap();
    let send = |wr_id, length| {
        SendWr::new(
            wr_id,
            WrOpcode::Send,
            vec![Sge {
                addr: buf_a,
                length,
                lkey: mr_a.lkey,
            }],
        )
    };
    // Inline data in virtual memory is a length too, and still arrives whole.
    r[0].post_send(qa, &[send(3, 4096), send(5, 48).inline()])
        .unwrap();
    // Shuttle packets directly (no frames, no latency).
    let mut now = 0;
    let mut packets = 0u64;
    loop {
        let mut moved = false;
        for i in 0..2 {
            while let Some(t) = r[i].poll_transmit(now) {
                assert!(matches!(t.payload, Payload::Virtual(_) | Payload::Bytes(_)));
                if let Payload::Bytes(b) = &t.payload {
                    assert!(b.is_empty(), "virtual memory produced real bytes");
                }
                let pl = match t.payload {
                    Payload::Virtual(n) => PayloadRef::Virtual(n),
                    Payload::Bytes(_) | Payload::Host(_) => PayloadRef::Virtual(0),
                };
                let pk = TransportPacket {
                    repr: t.repr,
                    payload: &[],
                    icrc: 0,
                };
                r[1 - i].handle_packet(now, addr[i], false, &pk.repr, pl);
                packets += 1;
                moved = true;
            }
        }
        if !moved {
            match r.iter().filter_map(|n| n.poll_timeout()).min() {
                Some(t) if t < 1_000_000_000 => {
                    now = now.max(t);
                    for n in r.iter_mut() {
                        n.handle_timeout(now);
                    }
                }
                _ => break,
            }
        }
    }
    let wa = r[0].poll_cq(cq_a, 8);
    assert_eq!(
        wa.iter().map(|w| (w.wr_id, w.status)).collect::<Vec<_>>(),
        vec![
            (1, WcStatus::Success),
            (3, WcStatus::Success),
            (5, WcStatus::Success)
        ]
    );
    let wb = r[1].poll_cq(cq_b, 8);
    assert_eq!((wb[0].wr_id, wb[0].byte_len), (2, 4096));
    assert_eq!((wb[1].wr_id, wb[1].byte_len), (4, 48));
    assert_eq!(r[1].counters().rx_payload_bytes, u64::from(len) + 4096 + 48);
    assert!(
        packets > 25_600,
        "{packets} packets for 100 MiB at MTU 4096"
    );
}
