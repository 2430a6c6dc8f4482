//! IRN's BDP-FC applied to READ responses (Mittal et al., SIGCOMM 2018,
//! §3.2): a READ's responses take PSNs as request packets do, so the
//! requester asks for a long READ in segments that keep the responses it
//! awaits within a BDP of its oldest unacknowledged PSN, and the responder
//! never has more than that out. Checked at every step of the simulated
//! wire, on what the responder emits and on the requester's own state,
//! with every byte verified under targeted and random loss and reordering.

use roce_rnic::pair::{LinkConfig, Pair, RcOptions};
use roce_rnic::*;
use roce_wire::{Frame, Opcode, parse_frame};

const BDP: u32 = 16;
const PSN_MASK: u32 = 0xff_ffff;

fn dist(to: u32, from: u32) -> u32 {
    to.wrapping_sub(from) & PSN_MASK
}

/// What a run showed.
#[derive(Debug, Default)]
struct Seen {
    /// READ requests for responses never asked for before (not re-requests).
    new_requests: u32,
    /// Largest span of PSNs the requester had out (send PSN − una).
    max_span: u32,
    /// Largest distance of an emitted READ response above the requester's
    /// una when the step began.
    max_response_ahead: u32,
    timeouts: u64,
    retransmits: u64,
}

/// A large READ (then a WRITE and a compare-and-swap behind it, so later
/// PSNs follow a split READ) from A over IRN with a BDP cap of [`BDP`],
/// stepped one event at a time. `drops` are (side, PSN) losses on purpose.
fn run(link: LinkConfig, read_len: u32, drops: &[(usize, u32)], psn_a: u32) -> Seen {
    let cfg = RnicConfig {
        irn: IrnConfig {
            bdp_pkts: BDP,
            ..IrnConfig::default()
        },
        ..Default::default()
    };
    let mut p = Pair::with_config(link, cfg);
    let o = RcOptions {
        recovery: Recovery::Irn,
        mtu: Mtu::Mtu1024,
        buf_len: read_len as usize + 20 * 1024,
        psn_a,
        timeout: 8,
        ..Default::default()
    };
    let (a, b) = p.rc_pair(&o).unwrap();
    let remote: Vec<u8> = (0..read_len).map(|i| (i * 7 + i / 251) as u8).collect();
    p.b.mem_mut().set(b.buf, &remote).unwrap();
    let wdata: Vec<u8> = (0..3000u32).map(|i| (i * 3) as u8 ^ 0x5a).collect();
    let woff = u64::from(read_len).next_multiple_of(4096) + 4096;
    p.a.mem_mut().set(a.buf + woff, &wdata).unwrap();
    let cas_off = woff + 8192;
    p.b.mem_mut()
        .set(b.buf + cas_off, &41u64.to_le_bytes())
        .unwrap();
    let wrs = vec![
        SendWr::new(
            1,
            WrOpcode::RdmaRead {
                remote_addr: b.buf,
                rkey: b.mr.rkey,
            },
            vec![a.sge(0, read_len)],
        ),
        SendWr::new(
            2,
            WrOpcode::RdmaWrite {
                remote_addr: b.buf + woff,
                rkey: b.mr.rkey,
            },
            vec![a.sge(woff, 3000)],
        ),
        SendWr::new(
            3,
            WrOpcode::AtomicCmpAndSwp {
                remote_addr: b.buf + cas_off,
                rkey: b.mr.rkey,
                compare: 41,
                swap: 99,
            },
            vec![a.sge(cas_off, 8)],
        ),
    ];
    let mut seen = Seen::default();
    p.drop_psns = drops.to_vec();
    p.capture = Some(Vec::new());
    p.a.post_send(a.qpn, &wrs).unwrap();
    let mut asked_to = psn_a; // first response PSN not yet asked for
    let mut looked = 0;
    let mut steps = 0u32;
    loop {
        let before = p.a.qp_status(a.qpn).expect("qp");
        if !p.step() {
            break;
        }
        steps += 1;
        assert!(steps < 2_000_000, "no end in sight");
        let after = p.a.qp_status(a.qpn).expect("qp");
        let span = dist(after.send_psn, after.una);
        assert!(
            span <= BDP,
            "requester has {span} PSNs out past una {:#x} (cap {BDP})",
            after.una
        );
        seen.max_span = seen.max_span.max(span);
        let frames = p.capture.as_ref().expect("capturing");
        for f in &frames[looked..] {
            let Ok(Frame::Roce(fr)) = parse_frame(&f.bytes) else {
                panic!("unparsable frame on the wire");
            };
            let t = fr.transport;
            let psn = t.bth.psn.value();
            if f.dir == 0 && t.bth.opcode == Opcode::RcReadRequest {
                let n = t.reth.expect("RETH").dma_len.div_ceil(1024).max(1);
                let end = psn.wrapping_add(n) & PSN_MASK;
                if psn == asked_to {
                    seen.new_requests += 1;
                    asked_to = end;
                }
            }
            if f.dir == 1 && t.bth.opcode.is_read_response() {
                // Emitted this step, so in answer to a request sent in an
                // earlier one, when una was at most what it was before.
                // (One behind una answers a stale copy of a re-request.)
                let ahead = dist(psn, before.una);
                let behind = ahead > PSN_MASK / 2;
                assert!(
                    behind || ahead < BDP,
                    "responder emitted response {psn:#x}, {ahead} past the requester's una {:#x}",
                    before.una
                );
                if !behind {
                    seen.max_response_ahead = seen.max_response_ahead.max(ahead);
                }
            }
        }
        looked = frames.len();
    }
    let wc = p.a.poll_cq(a.cq, 16);
    let ids: Vec<(u64, WcStatus)> = wc.iter().map(|w| (w.wr_id, w.status)).collect();
    assert_eq!(
        ids,
        vec![
            (1, WcStatus::Success),
            (2, WcStatus::Success),
            (3, WcStatus::Success)
        ],
        "each WQE completes once, in order"
    );
    assert_eq!(wc[0].byte_len, read_len);
    assert!(
        p.a.mem().get(a.buf, read_len as usize).unwrap() == &remote[..],
        "READ bytes differ"
    );
    assert!(p.b.mem().get(b.buf + woff, 3000).unwrap() == &wdata[..]);
    assert_eq!(
        p.a.mem().get(a.buf + cas_off, 8).unwrap(),
        &41u64.to_le_bytes()
    );
    assert_eq!(
        p.b.mem().get(b.buf + cas_off, 8).unwrap(),
        &99u64.to_le_bytes()
    );
    assert_eq!(p.b.counters().atomics_executed, 1, "the atomic ran once");
    assert!(p.drop_psns.is_empty(), "every planned drop happened");
    let c = p.a.counters();
    seen.timeouts = c.timeouts;
    seen.retransmits = c.retransmits;
    seen
}

/// 300 KB less a little: 300 response packets at MTU 1024, against a cap of 16.
const LEN: u32 = 300 * 1024 - 100;

#[test]
fn a_large_irn_read_keeps_its_responses_within_the_bdp() {
    let s = run(LinkConfig::default(), LEN, &[], 0x100);
    eprintln!("{s:?}");
    // Split: one request could not ask for 300 responses under a cap of 16.
    assert!(
        s.new_requests >= 300 / BDP,
        "{} READ requests for 300 responses",
        s.new_requests
    );
    // Pipelined, not one segment at a time: the cap is used, and the
    // responder runs well ahead of the requester within it.
    assert_eq!(s.max_span, BDP);
    assert!(s.max_response_ahead >= BDP / 2, "{s:?}");
    assert_eq!((s.timeouts, s.retransmits), (0, 0));
}

#[test]
fn a_split_irn_read_recovers_lost_requests_and_responses() {
    let psn = 0x100;
    let drops = [
        // The first READ request, then its resend.
        (0, psn),
        (0, psn),
        // Responses around the first segment's end (16) and the next ones.
        (1, psn + 15),
        (1, psn + 16),
        (1, psn + 17),
        (1, psn + 40),
        (1, psn + 40),
        // The READ's last response: a tail loss only a timer reveals.
        (1, psn + 299),
    ];
    let s = run(LinkConfig::default(), LEN, &drops, psn);
    eprintln!("{s:?}");
    assert!(s.new_requests >= 300 / BDP);
    assert!(s.retransmits >= 5, "{s:?}");
}

#[test]
fn a_split_irn_read_survives_random_loss_reordering_and_duplicates_across_the_psn_wrap() {
    for seed in 0..8 {
        let link = LinkConfig {
            seed,
            loss: 0.03,
            reorder: 0.05,
            dup: 0.02,
            ..LinkConfig::default()
        };
        let s = run(link, LEN, &[], PSN_MASK - 100);
        eprintln!("seed {seed}: {s:?}");
        assert!(s.retransmits > 0, "seed {seed}: the link lost packets");
    }
}

/// Each unanswered segment of a split READ holds a READ credit at the
/// responder (it queues responses as any READ does). With one credit each
/// way (`max_rd_atomic` = `max_dest_rd_atomic` = 1) the requester must wait
/// for a segment's responses before asking for the next, or the responder
/// refuses the request (NAK Invalid Request) and the QP fails.
#[test]
fn a_split_irn_read_respects_one_read_credit() {
    let cfg = RnicConfig {
        irn: IrnConfig {
            bdp_pkts: BDP,
            ..IrnConfig::default()
        },
        ..Default::default()
    };
    // A short wire: a segment's request reaches the responder while the
    // previous segment's responses are still queued there.
    let link = LinkConfig {
        latency_ns: 50,
        ..LinkConfig::default()
    };
    let mut p = Pair::with_config(link, cfg);
    const LEN: u32 = 100 * 1024;
    let mut ends = Vec::new();
    for r in [&mut p.a, &mut p.b] {
        let pd = r.alloc_pd();
        let cq = r.create_cq(64).unwrap();
        let buf = r.mem_mut().alloc(LEN as usize);
        let mr = r.reg_mr(pd, buf, u64::from(LEN), Access::ALL).unwrap();
        let mut init = QpInitAttr::new(QpType::Rc, pd, cq, cq);
        init.recovery = Recovery::Irn;
        let qpn = r.create_qp(init).unwrap();
        ends.push((cq, qpn, buf, mr));
    }
    let ((cq_a, qa, buf_a, mr_a), (_, qb, buf_b, mr_b)) = (ends[0], ends[1]);
    for (r, me, peer, addr) in [
        (&mut p.a, qa, qb, roce_rnic::pair::ADDR_B),
        (&mut p.b, qb, qa, roce_rnic::pair::ADDR_A),
    ] {
        r.modify_qp(me, QpState::Init, &QpAttr::init(Access::ALL))
            .unwrap();
        let mut rtr = QpAttr::rtr(addr, peer, 0, Mtu::Mtu1024);
        rtr.max_dest_rd_atomic = Some(1);
        r.modify_qp(me, QpState::Rtr, &rtr).unwrap();
        let mut rts = QpAttr::rts(0);
        rts.max_rd_atomic = Some(1);
        r.modify_qp(me, QpState::Rts, &rts).unwrap();
    }
    let remote: Vec<u8> = (0..LEN).map(|i| (i % 241) as u8).collect();
    p.b.mem_mut().set(buf_b, &remote).unwrap();
    p.capture = Some(Vec::new());
    p.a.post_send(
        qa,
        &[SendWr::new(
            7,
            WrOpcode::RdmaRead {
                remote_addr: buf_b,
                rkey: mr_b.rkey,
            },
            vec![Sge {
                addr: buf_a,
                length: LEN,
                lkey: mr_a.lkey,
            }],
        )],
    )
    .unwrap();
    assert!(p.drive());
    let wc = p.a.poll_cq(cq_a, 4);
    assert_eq!(wc.len(), 1);
    assert_eq!(wc[0].status, WcStatus::Success, "{wc:?}");
    assert!(p.a.mem().get(buf_a, LEN as usize).unwrap() == &remote[..]);
    assert_eq!(p.b.counters().naks_tx, 0, "no request was refused");
    let requests = p
        .capture
        .as_ref()
        .unwrap()
        .iter()
        .filter(|f| {
            f.dir == 0
                && matches!(parse_frame(&f.bytes),
                    Ok(Frame::Roce(fr)) if fr.transport.bth.opcode == Opcode::RcReadRequest)
        })
        .count();
    assert!(requests >= 100 / BDP as usize, "{requests} READ requests");
}

/// RTO_low is for few packets in flight (§3.1), and a READ's packets in
/// flight are its responses asked for and not yet received. The first
/// response of a READ is lost and so is its re-requested copy; the other
/// 15 arrived, so one response is in flight and no later response can
/// reveal the loss: the timer that recovers it must be RTO_low. Counting
/// the responses received past the hole as in flight made it RTO_high.
#[test]
fn a_lost_re_requested_read_response_behind_the_rest_waits_rto_low() {
    const RTO_LOW: u64 = 100_000;
    const RTO_HIGH: u64 = 5_000_000;
    let cfg = RnicConfig {
        irn: IrnConfig {
            bdp_pkts: BDP,
            rto_low_ns: RTO_LOW,
            rto_high_ns: RTO_HIGH,
            rto_low_pkts: 3,
        },
        ..Default::default()
    };
    let mut p = Pair::with_config(LinkConfig::default(), cfg);
    let o = RcOptions {
        recovery: Recovery::Irn,
        mtu: Mtu::Mtu1024,
        buf_len: BDP as usize * 1024,
        timeout: 8,
        ..Default::default()
    };
    let (a, b) = p.rc_pair(&o).unwrap();
    let remote: Vec<u8> = (0..o.buf_len).map(|i| (i * 11) as u8).collect();
    p.b.mem_mut().set(b.buf, &remote).unwrap();
    // B→A: the READ's first response, then its re-requested copy.
    p.drop_psns = vec![(1, o.psn_a), (1, o.psn_a)];
    let wr = SendWr::new(
        1,
        WrOpcode::RdmaRead {
            remote_addr: b.buf,
            rkey: b.mr.rkey,
        },
        vec![a.sge(0, o.buf_len as u32)],
    );
    p.a.post_send(a.qpn, &[wr]).unwrap();
    assert!(p.drive(), "pair never went idle");
    let wc = p.a.poll_cq(a.cq, 4);
    assert_eq!(wc.len(), 1);
    assert_eq!(wc[0].status, WcStatus::Success);
    assert!(p.a.mem().get(a.buf, o.buf_len).unwrap() == &remote[..]);
    assert!(p.drop_psns.is_empty(), "both drops happened");
    let c = p.a.counters();
    assert_eq!(c.timeouts, 1, "{c:?}");
    assert!(
        p.now >= RTO_LOW && p.now < RTO_HIGH,
        "finished at {} ns: RTO_low ({RTO_LOW} ns) should have fired, not RTO_high",
        p.now
    );
}
