//! parse+ICRC and emit+ICRC of an RC_RDMA_WRITE_ONLY frame beside a raw
//! `crc32fast::hash` over the same number of bytes, for 64 B, 1 KiB and 4 KiB
//! payloads. Run with `cargo bench -p roce-wire --bench wire`.

use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use roce_wire::sample::{ipv4_template, sample_transport};
use roce_wire::{Frame, Opcode, parse_frame};
use std::hint::black_box;

const PAYLOADS: [usize; 3] = [64, 1024, 4096];

fn wire(c: &mut Criterion) {
    let repr = ipv4_template(sample_transport(Opcode::RcWriteOnly, 0x100));
    for &n in &PAYLOADS {
        let payload: Vec<u8> = (0..n).map(|i| (i % 251) as u8).collect();
        let frame = repr.emit_vec(&[&payload]).expect("emit");
        match parse_frame(&frame) {
            Ok(Frame::Roce(r)) => assert!(r.icrc_ok() && r.payload.len() == n),
            other => panic!("sample frame does not parse: {other:?}"),
        }
        let mut out = vec![0u8; frame.len()];

        let mut g = c.benchmark_group(format!("write_only_{n}B"));
        // Throughput is the whole frame in every case, so the three are comparable.
        g.throughput(Throughput::Bytes(frame.len() as u64));
        g.bench_with_input(BenchmarkId::new("parse+icrc", n), &frame, |b, f| {
            b.iter(|| match parse_frame(black_box(f)) {
                Ok(Frame::Roce(r)) => black_box(r.icrc_ok()),
                _ => unreachable!(),
            })
        });
        g.bench_with_input(BenchmarkId::new("emit+icrc", n), &payload, |b, p| {
            b.iter(|| {
                black_box(&repr)
                    .emit(&[black_box(p.as_slice())], &mut out)
                    .expect("emit");
                black_box(&out);
            })
        });
        g.bench_with_input(BenchmarkId::new("crc32fast", n), &frame, |b, f| {
            b.iter(|| crc32fast::hash(black_box(f)))
        });
        g.finish();
    }
}

criterion_group!(benches, wire);
criterion_main!(benches);
