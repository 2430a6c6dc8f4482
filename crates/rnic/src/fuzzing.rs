//! A live RNIC fed arbitrary packets: the body of the `packets` fuzz target
//! and of the property test that runs the same thing in every `cargo test`.
//!
//! Input: a sequence of records `[flags u8][len u8][len bytes]`. Each record
//! is parsed as a UDP payload (BTH onwards); what parses is handed to B's
//! RNIC as if it came from A (or from a stranger, by a flag bit), with CE set
//! by another bit. Between records the pair runs, so responses, NAKs and
//! timers all happen. Afterwards the invariants are checked: memory that no
//! key grants is untouched, and the pair still works.

use crate::pair::{ADDR_A, Endpoint, LinkConfig, Pair, RcOptions};
use crate::{Access, PayloadRef, RecvWr, SendWr, WcStatus, WrOpcode};
use roce_wire::TransportRepr;
use std::net::SocketAddr;

/// Runs one fuzz input and returns B's counters. Panics (a fuzz finding)
/// if an invariant breaks.
pub fn run_packets(data: &[u8]) -> crate::Counters {
    let mut p = Pair::new(LinkConfig::default());
    let (a, b): (Endpoint, Endpoint) = match p.rc_pair(&RcOptions {
        buf_len: 8192,
        timeout: 4,
        retry_cnt: 1,
        ..Default::default()
    }) {
        Ok(x) => x,
        Err(e) => panic!("setup failed: {e}"),
    };
    // A region on B that no packet may touch: registered for local use only.
    let secret = p.b.mem_mut().alloc(4096);
    let _ = p.b.reg_mr(b.pd, secret, 4096, Access::LOCAL_WRITE);
    let _ = p.b.mem_mut().set(secret, &[0xee; 4096]);
    // A read-only exported region on B: readable, never writable.
    let ro = p.b.mem_mut().alloc(4096);
    let _ = p.b.mem_mut().set(ro, &[0x11; 4096]);
    let _ = p.b.reg_mr(b.pd, ro, 4096, Access::REMOTE_READ);
    let _ = p.b.post_recv(
        b.qpn,
        &[RecvWr {
            wr_id: 1,
            sg_list: vec![b.sge(0, 512)],
        }],
    );
    let stranger: SocketAddr = SocketAddr::from(([192, 0, 2, 1], 4791));
    let mut rest = data;
    let mut now = 0;
    let mut from_peer = false;
    while rest.len() >= 2 {
        let flags = rest[0];
        let len = usize::from(rest[1]).min(rest.len() - 2);
        let pkt = &rest[2..2 + len];
        rest = &rest[2 + len..];
        if let Ok(tp) = TransportRepr::parse(pkt) {
            let mut t = tp.repr;
            if flags & 1 != 0 {
                // Aim at B's live QP so the packet gets past demultiplexing.
                t.bth.dest_qp = b.qpn;
            }
            let src = if flags & 2 != 0 { stranger } else { ADDR_A };
            from_peer |= flags & 2 == 0;
            now += 1000;
            p.b.handle_packet(now, src, flags & 4 != 0, &t, PayloadRef::Bytes(tp.payload));
        }
        p.drive_for(50_000);
    }
    p.drive_for(10_000_000);
    assert_eq!(
        p.b.mem().get(secret, 4096).ok(),
        Some(&[0xee; 4096][..]),
        "a packet wrote memory no rkey grants"
    );
    assert_eq!(
        p.b.mem().get(ro, 4096).ok(),
        Some(&[0x11; 4096][..]),
        "a packet wrote read-only memory"
    );
    // Packets that claim to come from the connected peer can legitimately
    // desynchronise an RC connection (RoCE has no authentication; a forged
    // in-sequence packet is indistinguishable from a real one). Packets from
    // anyone else must leave it fully working.
    if !from_peer {
        let _ = p.a.poll_cq(a.cq, 1024);
        let _ = p.a.mem_mut().set(a.buf, b"still alive");
        let wr = SendWr::new(
            99,
            WrOpcode::RdmaWrite {
                remote_addr: b.buf + 4096,
                rkey: b.mr.rkey,
            },
            vec![a.sge(0, 11)],
        );
        assert!(
            p.a.post_send(a.qpn, &[wr]).is_ok(),
            "strangers' packets broke the requester"
        );
        p.drive_for(100_000_000);
        let wc = p.a.poll_cq(a.cq, 1024);
        assert!(
            wc.iter()
                .any(|w| w.wr_id == 99 && w.status == WcStatus::Success),
            "strangers' packets broke the connection: {wc:?}"
        );
        assert_eq!(
            p.b.mem().get(b.buf + 4096, 11).ok(),
            Some(&b"still alive"[..])
        );
    }
    p.b.counters()
}
