//! The ICRC of a datagram the engine sends or receives (`icrc_gather`, over
//! the headers the kernel emits and the payload in pieces) beside a raw
//! `crc32fast::hash` over a contiguous buffer of the same length, for an
//! ACK, an 8-byte RDMA WRITE, and a 4 KiB one. Run with
//! `cargo bench -p roce-verbs --bench icrc`.

use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use roce_verbs::packet::{icrc_gather, ipv4_header, udp_header};
use std::hint::black_box;
use std::net::Ipv4Addr;

fn icrc(c: &mut Criterion) {
    let (a, b) = (Ipv4Addr::new(127, 0, 0, 1), Ipv4Addr::new(127, 0, 0, 2));
    // (name, transport headers, payload): BTH+AETH; BTH+RETH with 8 and 4096 bytes.
    for (name, hdr, n) in [
        ("ack", 16usize, 0usize),
        ("write_8B", 28, 8),
        ("write_4KiB", 28, 4096),
    ] {
        let head: Vec<u8> = (0..hdr).map(|i| i as u8).collect();
        let payload: Vec<u8> = (0..n).map(|i| (i % 251) as u8).collect();
        let udp_len = hdr + n + 4;
        let ip = ipv4_header(a, b, 2, udp_len);
        let udp = udp_header(4791, 4791, udp_len);
        // What the CRC runs over: 8 bytes of ones, IP, UDP, headers, payload.
        let flat = vec![0x5au8; 8 + 20 + 8 + hdr + n];
        let mut g = c.benchmark_group(format!("icrc_{name}"));
        g.throughput(Throughput::Bytes(flat.len() as u64));
        g.bench_with_input(BenchmarkId::new("icrc_gather", name), &payload, |bch, p| {
            bch.iter(|| icrc_gather(black_box(&ip), black_box(&udp), &[&head, black_box(p)]))
        });
        g.bench_with_input(BenchmarkId::new("crc32fast", name), &flat, |bch, f| {
            bch.iter(|| crc32fast::hash(black_box(f)))
        });
        g.finish();
    }
}

criterion_group!(benches, icrc);
criterion_main!(benches);
