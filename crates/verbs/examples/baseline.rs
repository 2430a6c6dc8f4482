//! Baselines for `roce perf` on loopback: what the kernel alone does with
//! the same message sizes (see `roce_verbs::baseline`; `roce perf
//! --loopback --baseline` runs them beside each test). Run by hand:
//!
//! ```sh
//! cargo run --release -p roce-verbs --example baseline -- tcp 65536 2     # TCP stream, 64 KiB writes, 2 s
//! cargo run --release -p roce-verbs --example baseline -- udp 4096 2      # bare UDP, 4 KiB datagrams, 2 s
//! cargo run --release -p roce-verbs --example baseline -- udp-gso 4112 2  # UDP GSO sends into GRO, RoCE WRITE-sized segments, 2 s
//! cargo run --release -p roce-verbs --example baseline -- pingpong 8 20000 # UDP ping-pong, 8 B, 20000 round trips
//! cargo run --release -p roce-verbs --example baseline -- pingpong-rc 8 20000 # the same, shaped like RC WRITEs
//! ```
//!
//! Bandwidth is counted at the receiver. The ping-pongs busy-poll
//! non-blocking sockets, as `roce perf` does, and report half the round
//! trip like perftest's `*_lat` (t_typical is the median).

use roce_verbs::baseline::{self, Throughput};
use std::time::Duration;

fn main() {
    let a: Vec<String> = std::env::args().collect();
    let mode = a.get(1).map_or("tcp", String::as_str);
    let size: usize = a.get(2).and_then(|s| s.parse().ok()).unwrap_or(65536);
    let arg3: f64 = a.get(3).and_then(|s| s.parse().ok()).unwrap_or(2.0);
    let dur = Duration::from_secs_f64(arg3);
    let r = match mode {
        "tcp" => baseline::tcp_stream(size, dur).map(|t| report("TCP stream", size, t)),
        "udp" => baseline::udp_stream(size, dur).map(|t| {
            report("bare UDP (received)", size, t);
            println!(
                "  sent {}, received {} ({:.1}% lost in the socket buffer)",
                t.sent,
                t.msgs,
                100.0 * (t.sent - t.msgs.min(t.sent)) as f64 / t.sent.max(1) as f64
            );
        }),
        "udp-gso" => baseline::udp_gso_stream(size, dur).map(|t| {
            report("UDP GSO into GRO (received)", size, t);
            println!(
                "  sent {} datagrams, received {} ({:.1}% lost in the socket buffer)",
                t.sent,
                t.msgs,
                100.0 * (t.sent - t.msgs.min(t.sent)) as f64 / t.sent.max(1) as f64
            );
        }),
        "pingpong" => baseline::udp_pingpong(size, arg3 as u64)
            .map(|s| report_latency("UDP ping-pong", size, s)),
        "pingpong-rc" => baseline::rc_shaped_pingpong(size, arg3 as u64)
            .map(|s| report_latency("RC-shaped UDP ping-pong", size, s)),
        m => {
            eprintln!("unknown mode {m}: tcp, udp, udp-gso, pingpong or pingpong-rc");
            std::process::exit(2);
        }
    };
    if let Err(e) = r {
        eprintln!("{mode}: {e}");
        std::process::exit(1);
    }
}

fn report(what: &str, size: usize, t: Throughput) {
    println!(
        "{what}: {size} B messages, {} in {:.3} s: {:.2} MiB/s, {:.3} Gb/s, {:.4} Mmsg/s",
        t.msgs,
        t.secs,
        t.bytes as f64 / t.secs / (1 << 20) as f64,
        t.gbps(),
        t.msgs as f64 / t.secs / 1e6
    );
}

fn report_latency(what: &str, size: usize, mut samples: Vec<f64>) {
    samples.sort_by(f64::total_cmp);
    let n = samples.len();
    if n == 0 {
        return;
    }
    let avg = samples.iter().sum::<f64>() / n as f64;
    println!(
        "{what}, {size} B, {n} round trips: half-RTT t_min {:.2} us, t_typical {:.2} us, t_avg {:.2} us, 99% {:.2} us",
        samples[0] / 1000.0,
        samples[n / 2] / 1000.0,
        avg / 1000.0,
        samples[(n * 99 / 100).min(n - 1)] / 1000.0
    );
}
