//! Two RNICs with no I/O: 4 KiB RDMA WRITEs and 64 B SENDs, packets per
//! second and time per packet, beside a memcpy of the same bytes; and the
//! per-packet cost of each congestion controller (issue 10) beside `none`.

use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use roce_rnic::cc::CcPlan;
use roce_rnic::pair::{ADDR_A, ADDR_B, Endpoint, LinkConfig, Pair, RcOptions, shuttle};
use roce_rnic::*;
use std::hint::black_box;

const BATCH: u64 = 64;

fn setup() -> (Pair, Endpoint, Endpoint) {
    let mut p = Pair::new(LinkConfig::default());
    let o = RcOptions {
        buf_len: 1 << 20,
        mtu: Mtu::Mtu4096,
        max_send_wr: 1024,
        max_recv_wr: 1024,
        ..Default::default()
    };
    let (a, b) = p.rc_pair(&o).unwrap();
    (p, a, b)
}

fn bench(c: &mut Criterion) {
    let mut g = c.benchmark_group("rnic");
    for (name, size) in [("write_4k", 4096u32), ("send_64", 64u32)] {
        let (mut p, a, b) = setup();
        g.throughput(Throughput::Elements(BATCH));
        g.bench_function(BenchmarkId::new(name, "64 msgs"), |bench| {
            bench.iter(|| {
                let wrs: Vec<SendWr> = (0..BATCH)
                    .map(|i| {
                        let op = if size == 64 {
                            WrOpcode::Send
                        } else {
                            WrOpcode::RdmaWrite {
                                remote_addr: b.buf + i * 4096,
                                rkey: b.mr.rkey,
                            }
                        };
                        let w = SendWr::new(i, op, vec![a.sge(i * 4096, size)]);
                        if i + 1 == BATCH { w } else { w.unsignaled() }
                    })
                    .collect();
                if size == 64 {
                    let recvs: Vec<RecvWr> = (0..BATCH)
                        .map(|i| RecvWr {
                            wr_id: i,
                            sg_list: vec![b.sge(i * 64, 64)],
                        })
                        .collect();
                    p.b.post_recv(b.qpn, &recvs).unwrap();
                }
                p.a.post_send(a.qpn, &wrs).unwrap();
                let moved = shuttle(&mut p.a, &mut p.b, 0);
                black_box(moved);
                black_box(p.a.poll_cq(a.cq, 2 * BATCH as usize));
                black_box(p.b.poll_cq(b.cq, 2 * BATCH as usize));
            })
        });
        let src = vec![7u8; (BATCH * u64::from(size)) as usize];
        let mut dst = vec![0u8; src.len()];
        g.bench_function(
            BenchmarkId::new(format!("memcpy_{name}"), "same bytes"),
            |bench| {
                bench.iter(|| {
                    for (d, s) in dst.chunks_mut(size as usize).zip(src.chunks(size as usize)) {
                        d.copy_from_slice(black_box(s));
                    }
                    black_box(&dst);
                })
            },
        );
    }
    g.finish();
}

/// Data packets between two ECN marks in the `ce` variant: enough marks
/// that every controller's CNP/ECE handling runs often, few enough that
/// the rate-based ones keep sending.
const CE_EVERY: u64 = 16;
/// Virtual time one 4 KiB packet takes at 100 Gb/s, by which the clock
/// moves per data packet so that paced controllers keep sending.
const PKT_NS: u64 = 330;

/// One QP pair whose requester runs controller `name` with its defaults
/// (100 Gb/s line, 10 µs fabric RTT, one hop).
fn cc_setup(name: &str) -> (Pair, u32, CqHandle, u64, Mr, u64, Mr) {
    let line = 100_000_000_000u64;
    let choice = CcParams::new(name).build().expect("known controller");
    let plan = CcPlan::new(&choice.cc, line, || 10_000, 4096);
    let mut p = Pair::new(LinkConfig::default());
    let mk = |r: &mut Rnic, cc: Box<dyn CongestionControl>| {
        let pd = r.alloc_pd();
        let cq = r.create_cq(4096).unwrap();
        let buf = r.mem_mut().alloc(1 << 20);
        let mr = r.reg_mr(pd, buf, 1 << 20, Access::ALL).unwrap();
        let mut init = QpInitAttr::new(QpType::Rc, pd, cq, cq);
        init.max_send_wr = 1024;
        let qpn = r.create_qp_with_cc(init, cc).unwrap();
        (cq, buf, mr, qpn)
    };
    let (cq, buf, mr, qa) = mk(&mut p.a, plan.controller(line, || 1));
    let (_, bufb, mrb, qb) = mk(&mut p.b, Box::new(NoCc));
    p.connect(qa, qb, Mtu::Mtu4096).unwrap();
    (p, qa, cq, buf, mr, bufb, mrb)
}

/// Moves packets both ways until the last WRITE completes: the clock
/// advances a packet time per data packet and jumps to the next timer
/// (pacing, CC ticks) when neither side has anything to send. Every
/// `ce_every`-th data packet arrives CE-marked (0: none). Returns the
/// packets moved.
#[inline(never)]
fn cc_run(p: &mut Pair, cq: CqHandle, now: &mut u64, ce_every: u64, sent: &mut u64) -> u64 {
    let mut moved = 0;
    loop {
        let mut n = 0;
        while let Some(t) = p.a.poll_transmit(*now) {
            let payload = p.a.mem().materialize(t.payload);
            *sent += 1;
            let ce = ce_every > 0 && (*sent).is_multiple_of(ce_every);
            if let Some(d) = payload.as_ref().and_then(|d| d.as_ref()) {
                p.b.handle_packet(*now, ADDR_A, ce, &t.repr, d);
            }
            *now += PKT_NS;
            n += 1;
        }
        while let Some(t) = p.b.poll_transmit(*now) {
            let payload = p.b.mem().materialize(t.payload);
            if let Some(d) = payload.as_ref().and_then(|d| d.as_ref()) {
                p.a.handle_packet(*now, ADDR_B, false, &t.repr, d);
            }
            n += 1;
        }
        moved += n;
        if !p.a.poll_cq(cq, 4).is_empty() {
            return moved;
        }
        if n == 0 {
            *now = p.a.poll_timeout().map_or(*now + 1_000, |t| t.max(*now + 1));
            p.a.handle_timeout(*now);
        }
    }
}

/// One benchmark iteration: 64 × 4 KiB WRITEs posted and run to completion.
/// Not inlined, so an instruction counter (callgrind's `--toggle-collect`)
/// can count exactly this, per call.
#[inline(never)]
#[allow(clippy::too_many_arguments)]
fn cc_batch(
    p: &mut Pair,
    qa: u32,
    cq: CqHandle,
    (buf, mr): (u64, Mr),
    (bufb, mrb): (u64, Mr),
    now: &mut u64,
    ce_every: u64,
    sent: &mut u64,
) -> u64 {
    let wrs: Vec<SendWr> = (0..BATCH)
        .map(|i| {
            let w = SendWr::new(
                i,
                WrOpcode::RdmaWrite {
                    remote_addr: bufb + i * 4096,
                    rkey: mrb.rkey,
                },
                vec![Sge {
                    addr: buf + i * 4096,
                    length: 4096,
                    lkey: mr.lkey,
                }],
            );
            if i + 1 == BATCH { w } else { w.unsignaled() }
        })
        .collect();
    p.a.post_send(qa, &wrs).unwrap();
    cc_run(p, cq, now, ce_every, sent)
}

fn bench_cc(c: &mut Criterion) {
    let mut g = c.benchmark_group("cc");
    g.throughput(Throughput::Elements(BATCH));
    for (path, ce_every) in [("ack_path", 0), ("ce_path", CE_EVERY)] {
        for name in ["none", "dcqcn", "hpcc", "timely", "dctcp", "swift"] {
            let (mut p, qa, cq, buf, mr, bufb, mrb) = cc_setup(name);
            let (mut now, mut sent) = (0u64, 0u64);
            g.bench_function(BenchmarkId::new(path, name), |bench| {
                bench.iter(|| {
                    black_box(cc_batch(
                        &mut p,
                        qa,
                        cq,
                        (buf, mr),
                        (bufb, mrb),
                        &mut now,
                        ce_every,
                        &mut sent,
                    ))
                })
            });
        }
    }
    g.finish();
}

criterion_group!(benches, bench, bench_cc);
criterion_main!(benches);
