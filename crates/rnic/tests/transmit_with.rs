//! `Rnic::poll_transmit_with` and `Rnic::poll_transmit_into` (the
//! simulator's transmit poll, whose sink reads each packet where the
//! RNIC built it) send exactly what `Rnic::poll_transmit` sends, in the
//! same order, and leave the RNIC in the same state.

use roce_rnic::pair::{ADDR_A, ADDR_B, LinkConfig, Pair, RcOptions};
use roce_rnic::*;

/// What one poll produced, in a comparable form: destination, UDP source
/// port, DSCP, ECT, source QPN, the headers, the payload length.
type Sent = (std::net::SocketAddr, u16, u8, bool, u32, String, usize);

fn key(t: &Transmit) -> Sent {
    (
        t.dst,
        t.udp_sport,
        t.dscp,
        t.ecn_capable,
        t.src_qpn,
        format!("{:?}", t.repr),
        t.payload.len(),
    )
}

/// A 64-byte RDMA WRITE from `a`'s buffer to `b`'s.
fn small_write(a: &roce_rnic::pair::Endpoint, b: &roce_rnic::pair::Endpoint, id: u64) -> SendWr {
    SendWr::new(
        id,
        WrOpcode::RdmaWrite {
            remote_addr: b.buf,
            rkey: b.mr.rkey,
        },
        vec![a.sge(0, 64)],
    )
}

/// Which poll [`run`] uses.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Poll {
    Plain,
    With,
    Into,
}

/// A sink that keeps a copy of the packet and counts its calls.
struct Keep<'a>(&'a mut usize);

impl TransmitSink for Keep<'_> {
    type Out = Transmit;
    fn put(self, t: Transmit) -> Transmit {
        *self.0 += 1;
        t
    }
}

/// Two RDMA writes and a send from A to B (several packets each, with
/// ACKs back), shuttled packet by packet; `poll` picks the poll used.
fn run(poll: Poll) -> Vec<(usize, Sent)> {
    let mut p = Pair::new(LinkConfig::default());
    let (a, b) = p.rc_pair(&RcOptions::default()).unwrap();
    p.a.mem_mut().set(a.buf, &[7u8; 6000]).unwrap();
    p.b.post_recv(
        b.qpn,
        &[RecvWr {
            wr_id: 1,
            sg_list: vec![b.sge(0, 8192)],
        }],
    )
    .unwrap();
    let write = |id, off| {
        SendWr::new(
            id,
            WrOpcode::RdmaWrite {
                remote_addr: b.buf + off,
                rkey: b.mr.rkey,
            },
            vec![a.sge(0, 3000)],
        )
    };
    let send = SendWr::new(3, WrOpcode::Send, vec![a.sge(0, 6000)]);
    p.a.post_send(a.qpn, &[write(1, 0), write(2, 4096), send])
        .unwrap();
    let mut seen = Vec::new();
    for _ in 0..100 {
        let mut moved = false;
        for side in 0..2 {
            let (from, to, src) = if side == 0 {
                (&mut p.a, &mut p.b, ADDR_A)
            } else {
                (&mut p.b, &mut p.a, ADDR_B)
            };
            loop {
                let t = match poll {
                    Poll::With => {
                        // The callback sees the packet in place; the test
                        // keeps a copy to feed the peer.
                        let mut calls = 0;
                        let t = from.poll_transmit_with(0, |t| {
                            calls += 1;
                            t.clone()
                        });
                        assert_eq!(calls, usize::from(t.is_some()), "one call per packet");
                        t
                    }
                    Poll::Into => {
                        let mut calls = 0;
                        let t = from.poll_transmit_into(0, Keep(&mut calls));
                        assert_eq!(calls, usize::from(t.is_some()), "one put per packet");
                        t
                    }
                    Poll::Plain => from.poll_transmit(0),
                };
                let Some(t) = t else { break };
                seen.push((side, key(&t)));
                let payload = from.mem().materialize(t.payload.clone()).unwrap();
                to.handle_packet(0, src, false, &t.repr, payload.as_ref().unwrap());
                moved = true;
            }
        }
        if !moved {
            break;
        }
    }
    assert_eq!(p.a.poll_cq(a.cq, 16).len(), 3, "all three WRs complete");
    seen
}

#[test]
fn poll_transmit_with_sends_what_poll_transmit_sends() {
    let plain = run(Poll::Plain);
    // Data both ways: the writes' and the send's packets, and ACKs back.
    assert!(plain.iter().filter(|(s, _)| *s == 0).count() >= 12);
    assert!(plain.iter().any(|(s, _)| *s == 1));
    assert_eq!(run(Poll::With), plain);
    assert_eq!(run(Poll::Into), plain);
}

#[test]
fn poll_transmit_with_calls_nothing_when_idle() {
    let mut p = Pair::new(LinkConfig::default());
    p.rc_pair(&RcOptions::default()).unwrap();
    let out = p.a.poll_transmit_with(0, |_| panic!("no packet to see"));
    assert_eq!(out, None::<()>);
}

/// A receiver that sent its only ACK leaves the ready set with it: the
/// next poll does not visit it to find nothing (issue 12: one empty visit
/// per ACK), and it is still woken by the next packet it receives.
#[test]
fn a_qp_with_nothing_left_to_send_leaves_the_ready_set_with_its_last_packet() {
    let mut p = Pair::new(LinkConfig::default());
    let (a, b) = p.rc_pair(&RcOptions::default()).unwrap();
    let write = |id| small_write(&a, &b, id);
    for id in 1..=2 {
        p.a.post_send(a.qpn, &[write(id)]).unwrap();
        let t = p.a.poll_transmit(0).expect("the write leaves");
        let payload = p.a.mem().materialize(t.payload.clone()).unwrap();
        p.b.handle_packet(0, ADDR_A, false, &t.repr, payload.as_ref().unwrap());
        assert!(p.b.qp_status(b.qpn).unwrap().ready, "an ACK is due");
        let ack = p.b.poll_transmit_with(0, |t| t.repr.bth.opcode);
        assert_eq!(ack, Some(roce_wire::Opcode::RcAck));
        assert!(
            !p.b.qp_status(b.qpn).unwrap().ready,
            "nothing left to send: {}",
            p.b.qp_status(b.qpn).unwrap()
        );
        assert!(p.b.poll_transmit(0).is_none());
        // The sender, its only WR sent, is out of the ready set too.
        assert!(!p.a.qp_status(a.qpn).unwrap().ready);
    }
}

/// `nothing_ready` tells the polls that can only come back empty, and
/// `advance_clock` is all such a poll does: a driver that skips those
/// polls (the simulator skips a host's wake-up that would find nothing,
/// issue 12) and advances the clock instead sees every later packet,
/// deadline and QP state as one that polled. The sender is paced (a
/// 10 Gb/s shaper with pacing catch-up) and posts each write after an
/// idle stretch: the post reads the clock, which then sets the pace.
#[test]
fn an_empty_poll_only_advances_the_clock() {
    let run = |skip: bool| {
        let cfg = RnicConfig {
            pacing_catch_up_ns: 2_000,
            ..RnicConfig::default()
        };
        let mut p = Pair::with_config(LinkConfig::default(), cfg);
        let len = 1 << 16;
        let mk = |r: &mut Rnic, cc: Box<dyn CongestionControl>| {
            let pd = r.alloc_pd();
            let cq = r.create_cq(64).unwrap();
            let buf = r.mem_mut().alloc(len);
            let mr = r.reg_mr(pd, buf, len as u64, Access::ALL).unwrap();
            let init = QpInitAttr::new(QpType::Rc, pd, cq, cq);
            let qpn = r.create_qp_with_cc(init, cc).unwrap();
            (cq, buf, mr, qpn)
        };
        let shaper = Box::new(roce_rnic::cc::RateLimit {
            inner: Box::new(NoCc),
            cap_bps: 10_000_000_000,
        });
        let (cq, buf, mr, qa) = mk(&mut p.a, shaper);
        let (_, bufb, mrb, qb) = mk(&mut p.b, Box::new(NoCc));
        p.connect(qa, qb, Mtu::Mtu1024).unwrap();
        let write = |id| {
            let sge = Sge {
                addr: buf,
                length: 3000,
                lkey: mr.lkey,
            };
            let to = WrOpcode::RdmaWrite {
                remote_addr: bufb,
                rkey: mrb.rkey,
            };
            SendWr::new(id, to, vec![sge])
        };
        let (mut log, mut empty) = (Vec::new(), 0);
        for round in 0..400u64 {
            let now = round * 700;
            if round % 80 == 5 {
                p.a.post_send(qa, &[write(round)]).unwrap();
            }
            for side in 0..2 {
                let (from, to, src) = if side == 0 {
                    (&mut p.a, &mut p.b, ADDR_A)
                } else {
                    (&mut p.b, &mut p.a, ADDR_B)
                };
                // Only a due deadline is run (every driver call sets the
                // clock).
                if from.poll_timeout().is_some_and(|t| t <= now) {
                    from.handle_timeout(now);
                }
                if from.nothing_ready() {
                    empty += 1;
                    if skip {
                        from.advance_clock(now);
                    } else {
                        assert!(from.poll_transmit(now).is_none(), "nothing ready");
                    }
                    continue;
                }
                if let Some(t) = from.poll_transmit(now) {
                    log.push(format!("{now} {side} {}", key(&t).5));
                    let payload = from.mem().materialize(t.payload.clone()).unwrap();
                    to.handle_packet(now, src, false, &t.repr, payload.as_ref().unwrap());
                }
                log.push(format!("{now} {side} {:?}", from.poll_timeout()));
            }
        }
        log.push(format!("{:?} {:?}", p.a.qp_status(qa), p.b.qp_status(qb)));
        assert_eq!(p.a.poll_cq(cq, 16).len(), 5, "every write completes");
        assert!(empty > 100, "the polls skipped: {empty}");
        log
    };
    assert_eq!(run(true), run(false));
}

/// A sink that keeps the context each packet came with.
struct WithContext;

impl TransmitSink for WithContext {
    type Out = (u32, u64);
    fn put(self, t: Transmit) -> (u32, u64) {
        panic!(
            "the RNIC hands packets over with their QP's context (QP {})",
            t.src_qpn
        )
    }
    fn put_from(self, t: Transmit, context: u64) -> (u32, u64) {
        (t.src_qpn, context)
    }
}

/// Every packet a QP sends, data or ACK, comes with the context its
/// driver set on that QP (zero before one is set), and setting one on a
/// QP the RNIC does not have is an error that changes nothing.
#[test]
fn each_packet_comes_with_its_qps_context() {
    let mut p = Pair::new(LinkConfig::default());
    let (a, b) = p.rc_pair(&RcOptions::default()).unwrap();
    assert!(p.a.set_qp_context(a.qpn + 1000, 9).is_err());
    let write = |id| small_write(&a, &b, id);
    // Before any context is set: zero.
    p.a.post_send(a.qpn, &[write(1)]).unwrap();
    assert_eq!(p.a.poll_transmit_into(0, WithContext), Some((a.qpn, 0)));
    let (ca, cb) = (0xdead_beef_0000_0001, u64::MAX - 7);
    p.a.set_qp_context(a.qpn, ca).unwrap();
    p.b.set_qp_context(b.qpn, cb).unwrap();
    p.a.post_send(a.qpn, &[write(2)]).unwrap();
    let t = p.a.poll_transmit(0).expect("the write leaves");
    assert_eq!(t.src_qpn, a.qpn);
    let payload = p.a.mem().materialize(t.payload.clone()).unwrap();
    p.b.handle_packet(0, ADDR_A, false, &t.repr, payload.as_ref().unwrap());
    // The responder's ACK carries the responder QP's context.
    assert_eq!(p.b.poll_transmit_into(0, WithContext), Some((b.qpn, cb)));
    p.a.post_send(a.qpn, &[write(3)]).unwrap();
    assert_eq!(p.a.poll_transmit_into(0, WithContext), Some((a.qpn, ca)));
}
