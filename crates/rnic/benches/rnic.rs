//! Two RNICs with no I/O: 4 KiB RDMA WRITEs and 64 B SENDs, packets per
//! second and time per packet, beside a memcpy of the same bytes.

use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use roce_rnic::pair::{Endpoint, LinkConfig, Pair, RcOptions, shuttle};
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

criterion_group!(benches, bench);
criterion_main!(benches);
