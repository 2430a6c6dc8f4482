//! Baselines for `roce perf` on loopback: what the kernel alone does with
//! the same message sizes. Not a test; run by hand:
//!
//! ```sh
//! cargo run --release -p roce-verbs --example baseline -- tcp 65536 2     # TCP stream, 64 KiB writes, 2 s
//! cargo run --release -p roce-verbs --example baseline -- udp 4096 2      # bare UDP, 4 KiB datagrams, 2 s
//! cargo run --release -p roce-verbs --example baseline -- pingpong 8 20000 # UDP ping-pong, 8 B, 20000 round trips
//! ```
//!
//! Bandwidth is counted at the receiver. The ping-pong busy-polls
//! non-blocking sockets, as `roce perf` does, and reports half the round
//! trip like perftest's `*_lat` (t_typical is the median).

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream, UdpSocket};
use std::time::{Duration, Instant};

fn main() {
    let a: Vec<String> = std::env::args().collect();
    let mode = a.get(1).map_or("tcp", String::as_str);
    let size: usize = a.get(2).and_then(|s| s.parse().ok()).unwrap_or(65536);
    let arg3: f64 = a.get(3).and_then(|s| s.parse().ok()).unwrap_or(2.0);
    match mode {
        "tcp" => tcp(size, Duration::from_secs_f64(arg3)),
        "udp" => udp(size, Duration::from_secs_f64(arg3)),
        "pingpong" => pingpong(size, arg3 as u64),
        m => eprintln!("unknown mode {m}: tcp, udp or pingpong"),
    }
}

fn report(what: &str, size: usize, bytes: u64, msgs: u64, secs: f64) {
    println!(
        "{what}: {size} B messages, {msgs} in {secs:.3} s: {:.2} MiB/s, {:.3} Gb/s, {:.4} Mmsg/s",
        bytes as f64 / secs / (1 << 20) as f64,
        bytes as f64 * 8.0 / secs / 1e9,
        msgs as f64 / secs / 1e6
    );
}

fn tcp(size: usize, dur: Duration) {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = l.local_addr().unwrap();
    let rx = std::thread::spawn(move || {
        let (mut s, _) = l.accept().unwrap();
        let mut buf = vec![0u8; size];
        let mut total = 0u64;
        let start = Instant::now();
        loop {
            match s.read(&mut buf) {
                Ok(0) | Err(_) => break,
                Ok(n) => total += n as u64,
            }
        }
        (total, start.elapsed().as_secs_f64())
    });
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_nodelay(true).unwrap();
    let buf = vec![0x5au8; size];
    let end = Instant::now() + dur;
    while Instant::now() < end {
        s.write_all(&buf).unwrap();
    }
    drop(s);
    let (total, secs) = rx.join().unwrap();
    report("TCP stream", size, total, total / size as u64, secs);
}

fn udp(size: usize, dur: Duration) {
    let r = UdpSocket::bind("127.0.0.1:0").unwrap();
    let dst = r.local_addr().unwrap();
    r.set_read_timeout(Some(Duration::from_millis(200)))
        .unwrap();
    let rx = std::thread::spawn(move || {
        let mut buf = vec![0u8; 65536];
        let mut total = 0u64;
        let mut n = 0u64;
        let mut first: Option<Instant> = None;
        let mut last = Instant::now();
        while let Ok(k) = r.recv(&mut buf) {
            first.get_or_insert_with(Instant::now);
            last = Instant::now();
            total += k as u64;
            n += 1;
        }
        let secs = first.map_or(1e-9, |f| (last - f).as_secs_f64());
        (total, n, secs)
    });
    let s = UdpSocket::bind("127.0.0.1:0").unwrap();
    let buf = vec![0x5au8; size];
    let end = Instant::now() + dur;
    let mut sent = 0u64;
    while Instant::now() < end {
        if s.send_to(&buf, dst).is_ok() {
            sent += 1;
        }
    }
    let (total, n, secs) = rx.join().unwrap();
    report("bare UDP (received)", size, total, n, secs);
    println!(
        "  sent {sent}, received {n} ({:.1}% lost in the socket buffer)",
        100.0 * (sent - n.min(sent)) as f64 / sent.max(1) as f64
    );
}

fn pingpong(size: usize, iters: u64) {
    let a = UdpSocket::bind("127.0.0.1:0").unwrap();
    let b = UdpSocket::bind("127.0.0.2:0").unwrap();
    let (aa, ba) = (a.local_addr().unwrap(), b.local_addr().unwrap());
    a.set_nonblocking(true).unwrap();
    b.set_nonblocking(true).unwrap();
    let echo = std::thread::spawn(move || {
        let mut buf = vec![0u8; 65536];
        for _ in 0..iters {
            let n = loop {
                if let Ok(n) = b.recv(&mut buf) {
                    break n;
                }
                std::hint::spin_loop();
            };
            while b.send_to(&buf[..n], aa).is_err() {}
        }
    });
    let buf = vec![0x5au8; size];
    let mut rbuf = vec![0u8; 65536];
    let mut samples = Vec::with_capacity(iters as usize);
    for _ in 0..iters {
        let t0 = Instant::now();
        while a.send_to(&buf, ba).is_err() {}
        loop {
            if a.recv(&mut rbuf).is_ok() {
                break;
            }
            std::hint::spin_loop();
        }
        samples.push(t0.elapsed().as_nanos() as f64 / 2.0);
    }
    echo.join().unwrap();
    samples.sort_by(f64::total_cmp);
    let n = samples.len();
    let avg = samples.iter().sum::<f64>() / n as f64;
    println!(
        "UDP ping-pong, {size} B, {n} round trips: half-RTT t_min {:.2} us, t_typical {:.2} us, t_avg {:.2} us, 99% {:.2} us",
        samples[0] / 1000.0,
        samples[n / 2] / 1000.0,
        avg / 1000.0,
        samples[(n * 99 / 100).min(n - 1)] / 1000.0
    );
}
