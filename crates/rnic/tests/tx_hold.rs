//! `Rnic::set_tx_hold`: a port paused at one priority keeps sending the
//! other's packets. With its requests held (data paused by PFC), an RNIC
//! still hands out the ACKs it owes; with its responses held, its
//! requests. What is held waits, its QP still ready, and goes out once the
//! hold is lifted (issue 12: ns-3's host skips a paused QP and still
//! serves its ACK queue).

use roce_rnic::pair::{ADDR_A, Endpoint, LinkConfig, Pair, RcOptions};
use roce_rnic::*;
use roce_wire::Opcode;

/// A writes one packet to B and B 8 kB to A; A's packet (the whole
/// message, so it asks for an ACK) reaches B, so B owes an ACK and has its
/// own write to send.
fn b_owes_an_ack_and_has_data() -> Pair {
    let mut p = Pair::new(LinkConfig::default());
    let (a, b) = p.rc_pair(&RcOptions::default()).unwrap();
    let write = |to: &Endpoint, from: &Endpoint, len| {
        SendWr::new(
            1,
            WrOpcode::RdmaWrite {
                remote_addr: to.buf,
                rkey: to.mr.rkey,
            },
            vec![from.sge(0, len)],
        )
    };
    p.a.post_send(a.qpn, &[write(&b, &a, 256)]).unwrap();
    p.b.post_send(b.qpn, &[write(&a, &b, 8192)]).unwrap();
    let t = p.a.poll_transmit(0).expect("A's packet");
    assert_eq!(t.repr.bth.opcode, Opcode::RcWriteOnly);
    let payload = p.a.mem().materialize(t.payload.clone()).unwrap();
    p.b.handle_packet(0, ADDR_A, false, &t.repr, payload.as_ref().unwrap());
    p
}

fn is_ack(t: &Transmit) -> bool {
    t.repr.bth.opcode == Opcode::RcAck
}

#[test]
fn held_requests_let_the_ack_out_and_wait_for_the_hold_to_lift() {
    let mut p = b_owes_an_ack_and_has_data();
    p.b.set_tx_hold(true, false);
    let t = p.b.poll_transmit(0).expect("the ACK B owes");
    assert!(is_ack(&t), "{:?}", t.repr.bth.opcode);
    assert!(p.b.poll_transmit(0).is_none(), "B's write is held");
    assert!(!p.b.nothing_ready(), "the held write keeps its QP ready");
    p.b.set_tx_hold(false, false);
    let t = p.b.poll_transmit(0).expect("B's write once the hold lifts");
    assert!(
        !is_ack(&t) && !t.payload.is_empty(),
        "{:?}",
        t.repr.bth.opcode
    );
}

#[test]
fn held_responses_let_the_requests_out_and_keep_the_ack() {
    let mut p = b_owes_an_ack_and_has_data();
    p.b.set_tx_hold(false, true);
    let mut sent = 0;
    while let Some(t) = p.b.poll_transmit(0) {
        assert!(!is_ack(&t), "an ACK went out while responses were held");
        sent += 1;
    }
    assert!(sent > 0, "B's write went out");
    assert!(!p.b.nothing_ready(), "the held ACK keeps its QP ready");
    p.b.set_tx_hold(false, false);
    let t = p.b.poll_transmit(0).expect("the ACK once the hold lifts");
    assert!(is_ack(&t), "{:?}", t.repr.bth.opcode);
}

/// Without a hold, the same RNIC sends what it sent before: the hold is
/// only what a driver sets.
#[test]
fn without_a_hold_the_ack_comes_first_as_before() {
    let mut p = b_owes_an_ack_and_has_data();
    let t = p.b.poll_transmit(0).expect("a packet");
    assert!(is_ack(&t), "{:?}", t.repr.bth.opcode);
}
