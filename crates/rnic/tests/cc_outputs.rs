//! Bit-exact regression for the congestion controllers: each is driven
//! through a fixed, seeded stream of sends, ACKs (with RTT samples and ECN
//! echoes), INT feedback, CNPs, NAKs, timeouts and ticks, and every output
//! the RNIC reads (rate, window, next tick, cuts) after every event is
//! folded into one FNV-1a fingerprint.
//!
//! Performance work on a controller (`benches/cc.rs`) must not change what
//! it decides, not even in the last bit of a rate: the simulator's results
//! are a pure function of its inputs. A fingerprint that changes means the
//! controller's behaviour changed; if that is the intent, say so in the
//! commit and update the value.

use roce_rnic::*;

const LINE: u64 = 100_000_000_000;

/// A small deterministic generator (PCG-style LCG): the stream must not
/// depend on any crate's RNG version.
struct Lcg(u64);

impl Lcg {
    fn next(&mut self) -> u64 {
        self.0 = self
            .0
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        self.0 >> 33
    }
}

struct Fnv(u64);

impl Fnv {
    fn add(&mut self, v: u64) {
        for b in v.to_le_bytes() {
            self.0 ^= u64::from(b);
            self.0 = self.0.wrapping_mul(0x100_0000_01b3);
        }
    }
    fn opt(&mut self, v: Option<u64>) {
        self.add(v.map_or(u64::MAX, |v| v ^ 0x5555));
        self.add(u64::from(v.is_some()));
    }
}

fn fingerprint(mut cc: Box<dyn CongestionControl>, seed: u64, events: usize) -> u64 {
    let mut r = Lcg(seed);
    let mut h = Fnv(0xcbf2_9ce4_8422_2325);
    let (mut now, mut tx, mut una, mut nxt, mut min_rtt) = (0u64, 0u64, 0u64, 0u64, u64::MAX);
    let mut hops_n = 3usize;
    for _ in 0..events {
        now += r.next() % 2_000;
        if r.next().is_multiple_of(500) {
            hops_n = 1 + (r.next() % 5) as usize;
        }
        match r.next() % 12 {
            0..=3 => {
                let bytes = 1 + r.next() % 5_000;
                nxt += bytes;
                cc.on_send(now, bytes as usize);
            }
            4..=6 => {
                let acked = (r.next() % 20_000).min(nxt - una);
                una += acked;
                let rtt = 2_000 + r.next() % 600_000;
                min_rtt = min_rtt.min(rtt);
                let sample = (!r.next().is_multiple_of(8)).then_some(RttSample { rtt, min_rtt });
                cc.on_ack(now, acked, sample.map(|s| s.rtt));
                cc.on_ack_feedback(
                    now,
                    &AckFeedback {
                        acked_bytes: acked,
                        rtt: sample,
                        ecn_echo: r.next().is_multiple_of(4),
                        snd_una: una,
                        snd_nxt: nxt,
                        send_point: nxt,
                    },
                );
            }
            7..=8 => {
                tx += r.next() % 30_000;
                let hops: Vec<IntHop> = (0..hops_n)
                    .map(|k| IntHop {
                        ts: now.saturating_sub((r.next() % 3_000) * (k as u64 % 2)),
                        tx_bytes: tx + r.next() % 100,
                        qlen: if r.next().is_multiple_of(3) {
                            0
                        } else {
                            r.next() % 500_000
                        },
                        link_bps: [0, 25 * LINE / 100, LINE, 4 * LINE, 1 + r.next() * 77_777]
                            [(r.next() % 5) as usize],
                    })
                    .collect();
                cc.on_int(now, &hops);
            }
            // CNPs come in bursts with quiet spells between, so DCQCN both
            // cuts and recovers (a steady rain would pin it at its floor).
            9..=10 => match r.next() % 64 {
                0 => cc.on_nak(now),
                1 => cc.on_timeout(now),
                k if (now / 2_000_000) % 3 == 0 && k < 40 => cc.on_cnp(now),
                _ => cc.on_tick(now),
            },
            _ => {
                if r.next().is_multiple_of(2) {
                    now = cc.next_tick().unwrap_or(now).max(now);
                }
                cc.on_tick(now);
            }
        }
        h.opt(cc.rate_bps());
        h.opt(cc.window_bytes());
        h.opt(cc.next_tick());
        h.add(cc.rate_cuts());
    }
    h.0
}

fn controllers() -> Vec<(&'static str, Box<dyn CongestionControl>)> {
    let swift = || {
        let mut c = SwiftConfig::new(8_000, 4096, 25.0);
        c.hops = 3;
        c
    };
    vec![
        (
            "dcqcn-default",
            Box::new(Dcqcn::new(DcqcnConfig::default(), LINE)) as Box<_>,
        ),
        (
            "dcqcn-paper",
            Box::new(Dcqcn::new(DcqcnConfig::paper(), LINE)),
        ),
        (
            "dcqcn-connectx",
            Box::new(Dcqcn::new(DcqcnConfig::connectx(), LINE)),
        ),
        (
            "dcqcn-hpcc-ns3",
            Box::new(Dcqcn::new(DcqcnConfig::hpcc_ns3(), LINE)),
        ),
        (
            "hpcc",
            Box::new(Hpcc::new(HpccConfig::new(LINE, 8_000), LINE)),
        ),
        (
            "hpcc-slow",
            Box::new(Hpcc::new(
                HpccConfig {
                    fast_react: false,
                    max_stage: 0,
                    ..HpccConfig::new(LINE, 13_000)
                },
                LINE,
            )),
        ),
        (
            "timely",
            Box::new(Timely::new(TimelyConfig::default(), LINE)),
        ),
        (
            "timely-hpcc-ns3",
            Box::new(Timely::new(TimelyConfig::hpcc_ns3(), LINE)),
        ),
        (
            "dctcp-rate",
            Box::new(Dctcp::new(DctcpConfig::hpcc_ns3(), LINE)),
        ),
        (
            "dctcp-window",
            Box::new(Dctcp::new(DctcpConfig::window(4096, 100_000), LINE)),
        ),
        ("swift", Box::new(Swift::new(swift()))),
    ]
}

#[test]
fn every_controller_decides_exactly_as_before() {
    let got: Vec<(&str, u64)> = controllers()
        .into_iter()
        .map(|(name, cc)| (name, fingerprint(cc, 7, 50_000)))
        .collect();
    let want: &[(&str, u64)] = &[
        ("dcqcn-default", 0xfe0e0af6d06a7823),
        ("dcqcn-paper", 0x166d958408f86d3d),
        ("dcqcn-connectx", 0x8e448fddb53ae2ef),
        ("dcqcn-hpcc-ns3", 0x907a3201cfbd703e),
        ("hpcc", 0xd2baabe4ba35468b),
        ("hpcc-slow", 0x33adfddcc21234c3),
        ("timely", 0x725a0e59f8d3dc1c), // one update per 64 KB segment (the paper), was once per RTT
        ("timely-hpcc-ns3", 0x71d75d62a0706568),
        ("dctcp-rate", 0xf311ad2521e21058),
        ("dctcp-window", 0x0f66db843b96c0dd),
        ("swift", 0x87088fa1d2b5df9b),
    ];
    assert_eq!(got, want);
}

#[test]
fn the_fingerprint_sees_a_one_ulp_difference() {
    // Two HPCC senders whose base RTTs differ by 1 ns decide differently
    // somewhere in the stream, and the fingerprint must tell.
    let a = Box::new(Hpcc::new(HpccConfig::new(LINE, 8_000), LINE));
    let b = Box::new(Hpcc::new(HpccConfig::new(LINE, 8_001), LINE));
    assert_ne!(fingerprint(a, 7, 50_000), fingerprint(b, 7, 50_000));
}
