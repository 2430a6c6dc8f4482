//! What each congestion controller costs per packet (issue 10, "Performance").
//!
//! Two measurements, each run for every controller with `none` beside it as
//! the baseline:
//!
//! * **mix** — the controller alone, driven through `&mut dyn
//!   CongestionControl` exactly as the RNIC calls it, on a synthetic
//!   congested bottleneck: a queue that rises to 800 KB and drains again
//!   every 1 200 packets (RTT 8 µs + queueing), ECN marks above 100 KB, a
//!   CNP at most every 50 µs while marked (the NP's pacing), one ACK per
//!   packet with a Karn RTT sample, and — for HPCC, as the simulator
//!   stamps it — three INT hops per ACK. The calls are grouped into the
//!   four paths the controller sits on, each an `#[inline(never)]`
//!   function so a profiler can attribute instructions to it:
//!   [`tx_path`] (per packet: the window check `Qp::next_request` makes, the
//!   half-window ACK-request check, `on_send`, the pacing gap from
//!   `rate_bps`, and the `next_tick` the timer index reads on every
//!   refile), [`ack_path`] (`on_ack`, `on_ack_feedback`, `on_int`),
//!   [`cnp_path`] and [`timer_path`].
//! * **e2e** — two RNICs on a `Pair` wire (100 Gb/s, 1 µs, 1 % of packets
//!   CE-marked, receiver echoing ECN) moving 64 KiB RDMA WRITEs; the
//!   controller sits on A's QP. For HPCC the driver hands A one INT hop per
//!   step in which A received packets (the `Pair` has no switches to stamp
//!   them). Per packet means per data packet A sent.
//!
//! `cargo bench -p roce-rnic --bench cc` times both with criterion.
//! `scripts/cc_instr.sh` runs `cc --instr mix|e2e NAME` under callgrind,
//! which counts instructions (load-independent) inside [`mix_measured`] /
//! [`e2e_measured`] only; this binary prints how many calls each path got.

use criterion::{BenchmarkId, Criterion, Throughput};
use roce_rnic::pair::{LinkConfig, Pair};
use roce_rnic::*;
use std::hint::black_box;
use std::time::Duration;

const LINE: u64 = 100_000_000_000;
const MSS: u64 = 4096;
/// A full data packet on the wire: payload, BTH+RETH-less middle packet
/// headers (12 B BTH) and the Ethernet/IP/UDP/ICRC/FCS overhead.
const WIRE: u64 = MSS + 12 + PACKET_OVERHEAD;
const BASE_RTT: Nanos = 8_000;
const BDP: u64 = LINE / 8 * BASE_RTT / 1_000_000_000;
/// Packets per sawtooth period of the synthetic queue (one criterion iteration).
const PERIOD_PKTS: u64 = 1_200;
const Q_MAX: u64 = 800_000;
const ECN_K: u64 = 100_000;
const CNP_INTERVAL: Nanos = 50_000;
const INT_HOPS: usize = 3;

/// A controller under test: its name, a factory, and whether its packets
/// carry INT (HPCC only, as in the simulator).
struct Ctrl {
    name: &'static str,
    make: fn() -> Box<dyn CongestionControl>,
    int: bool,
}

fn controllers() -> Vec<Ctrl> {
    let c = |name, make, int| Ctrl { name, make, int };
    vec![
        c("none", || Box::new(NoCc), false),
        c("fixed", || Box::new(FixedRate(LINE / 2)), false),
        c(
            "dcqcn-paper",
            || Box::new(Dcqcn::new(DcqcnConfig::paper(), LINE)),
            false,
        ),
        c(
            "dcqcn-connectx",
            || Box::new(Dcqcn::new(DcqcnConfig::connectx(), LINE)),
            false,
        ),
        c(
            "dcqcn-hpcc-ns3",
            || Box::new(Dcqcn::new(DcqcnConfig::hpcc_ns3(), LINE)),
            false,
        ),
        c(
            "hpcc",
            || Box::new(Hpcc::new(HpccConfig::new(LINE, BASE_RTT), LINE)),
            true,
        ),
        c(
            "timely",
            || Box::new(Timely::new(TimelyConfig::default(), LINE)),
            false,
        ),
        c(
            "timely-hpcc-ns3",
            || Box::new(Timely::new(TimelyConfig::hpcc_ns3(), LINE)),
            false,
        ),
        c(
            "dctcp-rate",
            || Box::new(Dctcp::new(DctcpConfig::hpcc_ns3(), LINE)),
            false,
        ),
        c(
            "dctcp-window",
            || Box::new(Dctcp::new(DctcpConfig::window(MSS, BDP), LINE)),
            false,
        ),
        c(
            "swift",
            || {
                let mut cfg = SwiftConfig::new(BASE_RTT, MSS, (BDP / MSS) as f64);
                cfg.hops = INT_HOPS as u32;
                Box::new(Swift::new(cfg))
            },
            false,
        ),
    ]
}

// ---------------------------------------------------------------- the paths

/// What the requester asks of its controller for every packet it sends
/// (`Qp::next_request`, `emit_packet`, then the timer index's refile).
#[inline(never)]
fn tx_path(cc: &mut dyn CongestionControl, now: Nanos, next_send_at: &mut Nanos, n: &mut Counts) {
    n.tx += 1;
    black_box(cc.window_bytes());
    black_box(cc.window_bytes());
    cc.on_send(now, WIRE as usize);
    if let Some(rate) = cc.rate_bps().filter(|r| *r > 0) {
        let gap = WIRE * 8 * 1_000_000_000 / rate;
        *next_send_at = (*next_send_at).max(now) + gap;
    }
    black_box(cc.next_tick());
}

/// An ACK that moved the acknowledged point (`Qp::refresh_una`), then its
/// INT (`Rnic::handle_int`, HPCC only) and the refile.
#[inline(never)]
fn ack_path(
    cc: &mut dyn CongestionControl,
    now: Nanos,
    fb: &AckFeedback,
    hops: &[IntHop],
    n: &mut Counts,
) {
    n.ack += 1;
    cc.on_ack(now, fb.acked_bytes, fb.rtt.map(|s| s.rtt));
    cc.on_ack_feedback(now, fb);
    if !hops.is_empty() {
        cc.on_int(now, hops);
    }
    black_box(cc.next_tick());
}

/// A CNP from the connected peer. (Each path counts its own calls, which
/// also keeps LLVM from merging this function with [`timer_path`]: once it
/// passes the two vtable entries as arguments, their code is the same.)
#[inline(never)]
fn cnp_path(cc: &mut dyn CongestionControl, now: Nanos, n: &mut Counts) {
    n.cnp += 1;
    cc.on_cnp(now);
    black_box(cc.next_tick());
}

/// A due controller timer (`Rnic::handle_timeout`).
#[inline(never)]
fn timer_path(cc: &mut dyn CongestionControl, now: Nanos, n: &mut Counts) {
    n.timer += 1;
    cc.on_tick(now);
    black_box(cc.next_tick());
}

// ----------------------------------------------------------------- the mix

#[derive(Debug, Default, Clone, Copy)]
struct Counts {
    pkts: u64,
    tx: u64,
    ack: u64,
    cnp: u64,
    timer: u64,
}

/// One controller on the synthetic bottleneck (see the module docs).
struct Mix {
    cc: Box<dyn CongestionControl>,
    int: bool,
    k: u64,
    last_cnp: Option<Nanos>,
    next_send_at: Nanos,
    min_rtt: Nanos,
    counts: Counts,
}

impl Mix {
    fn new(c: &Ctrl) -> Mix {
        Mix {
            cc: (c.make)(),
            int: c.int,
            k: 0,
            last_cnp: None,
            next_send_at: 0,
            min_rtt: Nanos::MAX,
            counts: Counts::default(),
        }
    }

    /// The bottleneck queue when packet `k` is acknowledged: a triangle
    /// from 0 up to `Q_MAX` and back every `PERIOD_PKTS` packets.
    fn queue(k: u64) -> u64 {
        let half = PERIOD_PKTS / 2;
        let p = k % PERIOD_PKTS;
        let up = if p < half { p } else { PERIOD_PKTS - p };
        Q_MAX * up / half
    }

    fn advance(&mut self, pkts: u64) {
        let pkt_ns = WIRE * 8 * 1_000_000_000 / LINE;
        let mut hops = [IntHop::default(); INT_HOPS];
        for _ in 0..pkts {
            let k = self.k;
            self.k += 1;
            let now = k * pkt_ns;
            self.run_timers(now);
            tx_path(&mut *self.cc, now, &mut self.next_send_at, &mut self.counts);
            self.counts.pkts += 1;

            let q = Self::queue(k);
            let rtt = BASE_RTT + q * 8 * 1_000_000_000 / LINE;
            // The packet acknowledged now left one RTT ago.
            let lag = rtt / pkt_ns;
            let marked = q > ECN_K;
            if marked && self.last_cnp.is_none_or(|t| now - t >= CNP_INTERVAL) {
                self.last_cnp = Some(now);
                cnp_path(&mut *self.cc, now, &mut self.counts);
            }
            if k < lag {
                continue;
            }
            self.min_rtt = self.min_rtt.min(rtt);
            let fb = AckFeedback {
                acked_bytes: MSS,
                rtt: Some(RttSample {
                    rtt,
                    min_rtt: self.min_rtt,
                }),
                ecn_echo: marked,
                snd_una: (k - lag + 1) * MSS,
                snd_nxt: (k + 1) * MSS,
                send_point: (k + 1) * MSS,
            };
            let hops: &[IntHop] = if self.int {
                let tx = now * LINE / 8 / 1_000_000_000;
                for (i, h) in hops.iter_mut().enumerate() {
                    *h = IntHop {
                        ts: now - 1_000 * (INT_HOPS - i) as u64,
                        tx_bytes: tx,
                        qlen: if i == 1 { q } else { q / 8 },
                        link_bps: LINE,
                    };
                }
                &hops
            } else {
                &[]
            };
            ack_path(&mut *self.cc, now, &fb, hops, &mut self.counts);
        }
    }

    fn run_timers(&mut self, now: Nanos) {
        if self.cc.next_tick().is_some_and(|t| t <= now) {
            timer_path(&mut *self.cc, now, &mut self.counts);
        }
    }
}

/// The region callgrind counts for `--instr mix`.
#[inline(never)]
fn mix_measured(m: &mut Mix, pkts: u64) {
    m.advance(pkts);
}

// ----------------------------------------------------------------- the e2e

/// Two RNICs, the controller on A's requester.
struct E2e {
    p: Pair,
    qa: u32,
    cq: CqHandle,
    src: Sge,
    remote: (u64, u32),
    int: bool,
    /// `Pair::step` calls so far (pacing adds wake-ups).
    steps: u64,
}

const MSG: u32 = 64 << 10;
const MSGS_PER_ITER: u64 = 64;

impl E2e {
    fn new(c: &Ctrl) -> E2e {
        let cfg = RnicConfig {
            ecn_echo: true,
            ..RnicConfig::default()
        };
        let mut p = Pair::with_config(
            LinkConfig {
                ce_mark: 0.01,
                ..LinkConfig::default()
            },
            cfg,
        );
        let mk = |r: &mut Rnic, cc: Box<dyn CongestionControl>| {
            let pd = r.alloc_pd();
            let cq = r.create_cq(4096).expect("cq");
            let buf = r.mem_mut().alloc(MSG as usize);
            let mr = r.reg_mr(pd, buf, u64::from(MSG), Access::ALL).expect("mr");
            let mut init = QpInitAttr::new(QpType::Rc, pd, cq, cq);
            init.max_send_wr = 1024;
            let qpn = r.create_qp_with_cc(init, cc).expect("qp");
            (cq, buf, mr, qpn)
        };
        let (cq, buf, mr, qa) = mk(&mut p.a, (c.make)());
        let (_, bufb, mrb, qb) = mk(&mut p.b, Box::new(NoCc));
        p.connect(qa, qb, Mtu::Mtu4096).expect("connect");
        E2e {
            p,
            qa,
            cq,
            src: Sge {
                addr: buf,
                length: MSG,
                lkey: mr.lkey,
            },
            remote: (bufb, mrb.rkey),
            int: c.int,
            steps: 0,
        }
    }

    /// Moves `msgs` 64 KiB WRITEs A→B; returns the data packets A sent.
    fn run(&mut self, msgs: u64) -> u64 {
        let wrs: Vec<SendWr> = (0..msgs)
            .map(|i| {
                let op = WrOpcode::RdmaWrite {
                    remote_addr: self.remote.0,
                    rkey: self.remote.1,
                };
                let w = SendWr::new(i, op, vec![self.src]);
                if i + 1 == msgs { w } else { w.unsignaled() }
            })
            .collect();
        let p = &mut self.p;
        let tx0 = p.a.counters().tx_pkts;
        p.a.post_send(self.qa, &wrs).expect("post");
        let mut rx = p.a.counters().rx_pkts;
        while p.a.cq_len(self.cq) == 0 {
            assert!(p.step(), "stalled");
            self.steps += 1;
            // The same bookkeeping for every controller; only HPCC gets INT.
            let c = p.a.counters();
            if c.rx_pkts != rx {
                rx = c.rx_pkts;
                if self.int {
                    let hop = IntHop {
                        ts: p.now,
                        tx_bytes: c.tx_bytes,
                        qlen: 0,
                        link_bps: LINE,
                    };
                    p.a.handle_int(p.now, self.qa, &[hop]);
                }
            }
        }
        let wc = p.a.poll_cq(self.cq, 4);
        assert_eq!(wc[0].status, WcStatus::Success);
        p.a.counters().tx_pkts - tx0
    }
}

/// The region callgrind counts for `--instr e2e`.
#[inline(never)]
fn e2e_measured(e: &mut E2e, msgs: u64) -> u64 {
    e.run(msgs)
}

// --------------------------------------------------------------- criterion

fn bench(c: &mut Criterion) {
    let ctrls = controllers();
    let mut g = c.benchmark_group("cc_mix");
    g.throughput(Throughput::Elements(PERIOD_PKTS));
    for ctrl in &ctrls {
        let mut m = Mix::new(ctrl);
        m.advance(PERIOD_PKTS);
        g.bench_function(BenchmarkId::from_parameter(ctrl.name), |b| {
            b.iter(|| m.advance(PERIOD_PKTS))
        });
    }
    g.finish();
    let mut g = c.benchmark_group("cc_e2e");
    for ctrl in &ctrls {
        let mut e = E2e::new(ctrl);
        let pkts = e.run(MSGS_PER_ITER);
        g.throughput(Throughput::Elements(pkts));
        g.bench_function(BenchmarkId::from_parameter(ctrl.name), |b| {
            b.iter(|| black_box(e.run(MSGS_PER_ITER)))
        });
    }
    g.finish();
}

/// `cc --instr mix|e2e NAME [N]`: one warm-up, then the measured region
/// (`N` mix packets or `N` e2e messages), and the call counts on stdout.
fn instr(args: &[String]) -> std::result::Result<(), String> {
    let usage = "usage: cc --instr mix|e2e NAME [N]";
    let (Some(kind), Some(name)) = (args.first(), args.get(1)) else {
        return Err(usage.into());
    };
    let ctrls = controllers();
    let ctrl = ctrls.iter().find(|c| c.name == name).ok_or_else(|| {
        let names: Vec<_> = ctrls.iter().map(|c| c.name).collect();
        format!("unknown controller {name:?}; one of {names:?}")
    })?;
    let n = match args.get(2) {
        Some(s) => s.parse::<u64>().map_err(|e| format!("N {s:?}: {e}"))?,
        None => 0,
    };
    match kind.as_str() {
        "mix" => {
            let n = if n == 0 { 10 * PERIOD_PKTS } else { n };
            let mut m = Mix::new(ctrl);
            m.advance(PERIOD_PKTS);
            let before = m.counts;
            mix_measured(&mut m, n);
            let a = m.counts;
            println!(
                "mix {name} pkts={} tx={} ack={} cnp={} timer={}",
                a.pkts - before.pkts,
                a.tx - before.tx,
                a.ack - before.ack,
                a.cnp - before.cnp,
                a.timer - before.timer
            );
        }
        "e2e" => {
            let n = if n == 0 { MSGS_PER_ITER } else { n };
            let mut e = E2e::new(ctrl);
            e.run(MSGS_PER_ITER);
            let (steps, t0) = (e.steps, e.p.now);
            let pkts = e2e_measured(&mut e, n);
            let cc = e.p.a.cc_stats(e.qa).expect("qp");
            println!(
                "e2e {name} msgs={n} pkts={pkts} steps={} sim_ns={} rate_cuts={} min_rate={:?}",
                e.steps - steps,
                e.p.now - t0,
                cc.rate_cuts,
                cc.min_rate_bps
            );
        }
        _ => return Err(usage.into()),
    }
    Ok(())
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.first().map(String::as_str) == Some("--instr") {
        if let Err(e) = instr(&args[1..]) {
            eprintln!("{e}");
            std::process::exit(2);
        }
        return;
    }
    let mut c = Criterion::default()
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(3))
        .sample_size(20)
        .configure_from_args();
    bench(&mut c);
    c.final_summary();
}
