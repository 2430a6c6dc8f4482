//! What congestion control learns from ACKs, end to end through the real
//! requester and responder: per-ACK RTT samples that match the wire's round
//! trip, Karn's rule after a go-back-N, and the responder's ECN echo.

use roce_rnic::pair::{LinkConfig, Pair};
use roce_rnic::*;
use std::sync::{Arc, Mutex};

/// Records every feedback it is given.
struct Recorder(Arc<Mutex<Vec<AckFeedback>>>);

impl CongestionControl for Recorder {
    fn name(&self) -> &'static str {
        "recorder"
    }
    fn on_ack_feedback(&mut self, _now: u64, fb: &AckFeedback) {
        self.0.lock().unwrap().push(*fb);
    }
}

/// An RC QP on `r` with controller `cc`, its CQ, and a registered buffer
/// of `len` bytes: (CQ, buffer address, MR, QPN).
fn rc_qp(r: &mut Rnic, len: u32, cc: Box<dyn CongestionControl>) -> (CqHandle, u64, Mr, u32) {
    let pd = r.alloc_pd();
    let cq = r.create_cq(64).unwrap();
    let buf = r.mem_mut().alloc(len as usize);
    let mr = r.reg_mr(pd, buf, u64::from(len), Access::ALL).unwrap();
    let qpn = r
        .create_qp_with_cc(QpInitAttr::new(QpType::Rc, pd, cq, cq), cc)
        .unwrap();
    (cq, buf, mr, qpn)
}

/// One `len`-byte WRITE A→B over `link`, B's RNIC echoing ECN when `echo`.
fn run(link: LinkConfig, echo: bool, len: u32) -> (Vec<AckFeedback>, Counters) {
    let cfg = RnicConfig {
        ecn_echo: echo,
        ack_req_every: 4,
        ..Default::default()
    };
    let log = Arc::new(Mutex::new(Vec::new()));
    let counters = write_through(link, cfg, len, Box::new(Recorder(log.clone())));
    let v = log.lock().unwrap().clone();
    (v, counters)
}

/// Runs one `len`-byte WRITE A→B over `link` to a successful completion,
/// A's QP under `cc` and B's under none; A's counters afterwards.
fn write_through(
    link: LinkConfig,
    cfg: RnicConfig,
    len: u32,
    cc: Box<dyn CongestionControl>,
) -> Counters {
    let mut p = Pair::with_config(link, cfg);
    let (cq, buf, mr, qa) = rc_qp(&mut p.a, len, cc);
    let (_, bufb, mrb, qb) = rc_qp(&mut p.b, len, Box::new(NoCc));
    p.connect(qa, qb, Mtu::Mtu1024).unwrap();
    let wr = SendWr::new(
        1,
        WrOpcode::RdmaWrite {
            remote_addr: bufb,
            rkey: mrb.rkey,
        },
        vec![Sge {
            addr: buf,
            length: len,
            lkey: mr.lkey,
        }],
    );
    p.a.post_send(qa, &[wr]).unwrap();
    while p.a.cq_len(cq) == 0 {
        assert!(p.step(), "stalled");
    }
    assert_eq!(p.a.poll_cq(cq, 4)[0].status, WcStatus::Success);
    p.a.counters()
}

#[test]
fn samples_are_the_wire_round_trip_and_bytes_add_up() {
    let link = LinkConfig {
        latency_ns: 5_000,
        ..Default::default()
    };
    let len = 256 * 1024;
    let (fbs, _) = run(link, false, len);
    assert!(fbs.len() >= 16, "one feedback per ACK, got {}", fbs.len());
    let total: u64 = fbs.iter().map(|f| f.acked_bytes).sum();
    assert_eq!(total, u64::from(len));
    assert_eq!(fbs.last().unwrap().snd_una, u64::from(len));
    assert!(fbs.windows(2).all(|w| w[1].snd_una > w[0].snd_una));
    for f in &fbs {
        let s = f.rtt.expect("no retransmission: every ACK is timed");
        // Two 5 µs latencies plus serialization of one data frame and one
        // ACK at 100 Gb/s (< 0.2 µs), plus any queueing behind the burst.
        assert!(s.rtt >= 10_000, "{s:?}");
        assert!(s.min_rtt <= s.rtt);
        assert!(!f.ecn_echo, "no marks, no echo");
    }
    let min = fbs.last().unwrap().rtt.unwrap().min_rtt;
    assert!(min < 10_300, "an unqueued packet's RTT: {min}");
}

#[test]
fn karn_no_sample_from_retransmitted_packets() {
    let link = LinkConfig {
        loss: 0.02,
        seed: 7,
        ..Default::default()
    };
    let (fbs, c) = run(link, false, 512 * 1024);
    assert!(c.retransmits > 0, "the lossy link forced go-back-N");
    let untimed = fbs.iter().filter(|f| f.rtt.is_none()).count();
    assert!(untimed > 0, "ACKs of resent packets carry no sample");
    // Every timed sample is one wire round trip (2 × 1 µs plus
    // serialization): a sample taken from a first send across a go-back-N
    // recovery would span at least two (the NAK's and the resend's).
    let timed: Vec<u64> = fbs.iter().filter_map(|f| f.rtt).map(|s| s.rtt).collect();
    let (min, max) = (timed.iter().min().unwrap(), timed.iter().max().unwrap());
    assert!(*min >= 2_000, "{min}");
    assert!(*max < 2 * min, "max {max} ns vs min {min} ns");
}

#[test]
fn responder_echoes_ce_in_acks_only_when_asked() {
    let link = LinkConfig {
        ce_mark: 1.0,
        ..Default::default()
    };
    let (fbs, _) = run(link, true, 64 * 1024);
    assert!(
        fbs.iter().all(|f| f.ecn_echo),
        "every data packet was marked"
    );
    let (fbs, _) = run(link, false, 64 * 1024);
    assert!(fbs.iter().all(|f| !f.ecn_echo), "echo is off by default");
}

/// Records the send point each feedback and each go-back-N gives.
struct SendPoints(Arc<Mutex<Vec<(&'static str, AckFeedback)>>>);

impl CongestionControl for SendPoints {
    fn name(&self) -> &'static str {
        "send-points"
    }
    fn on_ack_feedback(&mut self, _now: u64, fb: &AckFeedback) {
        self.0.lock().unwrap().push(("ack", *fb));
    }
    fn on_rewind(&mut self, _now: u64, send_point: u64) {
        let fb = AckFeedback {
            send_point,
            ..AckFeedback::default()
        };
        self.0.lock().unwrap().push(("rewind", fb));
    }
}

/// After a go-back-N the controller sees the send point move back to
/// where the resend starts (the bytes acknowledged by then), as ns-3's
/// RecoverQueue rewinds the snd_nxt its HPCC reads, and then grow with
/// the resent packets, below `snd_nxt` (new data only) until the resend
/// has caught up. Before, the only send point a controller saw was
/// `snd_nxt`, which never goes back.
#[test]
fn go_back_n_rewinds_the_send_point_the_controller_sees() {
    let len = 512 * 1024u32;
    let link = LinkConfig {
        loss: 0.02,
        seed: 7,
        ..Default::default()
    };
    let cfg = RnicConfig {
        ack_req_every: 4,
        ..Default::default()
    };
    let log = Arc::new(Mutex::new(Vec::new()));
    let counters = write_through(link, cfg, len, Box::new(SendPoints(log.clone())));
    assert!(counters.retransmits > 0, "the lossy link forced go-back-N");
    let log = log.lock().unwrap().clone();
    let mut rewinds = 0;
    let mut behind = 0;
    let mut last_ack: Option<AckFeedback> = None;
    for (what, fb) in &log {
        match *what {
            "rewind" => {
                rewinds += 1;
                let a = last_ack.expect("a go-back-N follows some ACK or timeout");
                assert!(
                    fb.send_point >= a.snd_una && fb.send_point < a.snd_nxt,
                    "rewound to {} with {}..{} acknowledged..sent",
                    fb.send_point,
                    a.snd_una,
                    a.snd_nxt
                );
            }
            _ => {
                assert!(fb.snd_una <= fb.send_point && fb.send_point <= fb.snd_nxt);
                if fb.send_point < fb.snd_nxt {
                    behind += 1;
                }
                last_ack = Some(*fb);
            }
        }
    }
    assert!(rewinds > 0, "the controller was told of the go-back-N");
    assert!(
        behind > 0,
        "ACKs during the resend report the rewound point"
    );
    let end = last_ack.unwrap();
    assert_eq!(
        (end.snd_una, end.send_point, end.snd_nxt),
        (u64::from(len), u64::from(len), u64::from(len))
    );
}
