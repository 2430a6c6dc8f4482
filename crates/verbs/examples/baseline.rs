//! Baselines for `roce perf` on loopback: what the kernel alone does with
//! the same message sizes. Not a test; run by hand:
//!
//! ```sh
//! cargo run --release -p roce-verbs --example baseline -- tcp 65536 2     # TCP stream, 64 KiB writes, 2 s
//! cargo run --release -p roce-verbs --example baseline -- udp 4096 2      # bare UDP, 4 KiB datagrams, 2 s
//! cargo run --release -p roce-verbs --example baseline -- pingpong 8 20000 # UDP ping-pong, 8 B, 20000 round trips
//! cargo run --release -p roce-verbs --example baseline -- pingpong-rc 8 20000 # the same, shaped like RC WRITEs
//! ```
//!
//! `pingpong-rc` is the kernel's share of `roce perf write_lat`: the same
//! socket options and calls as the engine (DF, IP_RECVTOS, UDP_GRO, one
//! `recvmsg` with the sender's address and control messages, `sendmmsg`),
//! a datagram the size of an RDMA WRITE of SIZE bytes (BTH, RETH, ICRC),
//! and behind it in the same `sendmmsg` a 20-byte one the size of the ACK
//! for the peer's last WRITE, but no RoCE processing at all. The distance
//! from `pingpong` to `pingpong-rc` is what the kernel charges for RoCE's
//! shape on this machine; from `pingpong-rc` to `roce perf write_lat`,
//! what the RNIC and the engine charge.
//!
//! Bandwidth is counted at the receiver. The ping-pong busy-polls
//! non-blocking sockets, as `roce perf` does, and reports half the round
//! trip like perftest's `*_lat` (t_typical is the median).

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream, UdpSocket};
use std::os::fd::AsRawFd;
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
        "pingpong-rc" => pingpong_rc(size, arg3 as u64),
        m => eprintln!("unknown mode {m}: tcp, udp, pingpong or pingpong-rc"),
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
    report_latency("UDP ping-pong", size, samples);
}

fn report_latency(what: &str, size: usize, mut samples: Vec<f64>) {
    samples.sort_by(f64::total_cmp);
    let n = samples.len();
    let avg = samples.iter().sum::<f64>() / n as f64;
    println!(
        "{what}, {size} B, {n} round trips: half-RTT t_min {:.2} us, t_typical {:.2} us, t_avg {:.2} us, 99% {:.2} us",
        samples[0] / 1000.0,
        samples[n / 2] / 1000.0,
        avg / 1000.0,
        samples[(n * 99 / 100).min(n - 1)] / 1000.0
    );
}

/// A UDP socket set up and driven the way the engine drives its own.
struct RcShaped {
    sock: UdpSocket,
    buf: Vec<u8>,
    ctrl: [u64; 8],
    from: libc::sockaddr_in,
}

fn setopt(fd: i32, level: i32, name: i32, v: i32) {
    // SAFETY: a pointer to a live c_int and its size.
    let r = unsafe {
        libc::setsockopt(
            fd,
            level,
            name,
            (&v as *const i32).cast(),
            std::mem::size_of::<i32>() as libc::socklen_t,
        )
    };
    assert_eq!(r, 0, "setsockopt {level}/{name}");
}

impl RcShaped {
    fn bind(addr: &str) -> RcShaped {
        let sock = UdpSocket::bind(addr).unwrap();
        sock.set_nonblocking(true).unwrap();
        let fd = sock.as_raw_fd();
        setopt(
            fd,
            libc::IPPROTO_IP,
            libc::IP_MTU_DISCOVER,
            libc::IP_PMTUDISC_DO,
        );
        setopt(fd, libc::IPPROTO_IP, libc::IP_RECVTOS, 1);
        setopt(fd, libc::IPPROTO_IP, libc::IP_TOS, 2);
        setopt(fd, libc::SOL_UDP, 104, 1); // UDP_GRO
        RcShaped {
            sock,
            buf: vec![0u8; 65536],
            ctrl: [0; 8],
            // SAFETY: plain old data; all-zero is valid.
            from: unsafe { std::mem::zeroed() },
        }
    }

    /// One non-blocking `recvmsg` with address and control messages; the
    /// length received, if any.
    fn recv(&mut self) -> Option<usize> {
        let mut iov = libc::iovec {
            iov_base: self.buf.as_mut_ptr().cast(),
            iov_len: self.buf.len(),
        };
        // SAFETY: plain old data; every pointer below outlives the call.
        let mut h: libc::msghdr = unsafe { std::mem::zeroed() };
        h.msg_name = (&mut self.from as *mut libc::sockaddr_in).cast();
        h.msg_namelen = std::mem::size_of::<libc::sockaddr_in>() as libc::socklen_t;
        h.msg_iov = &mut iov;
        h.msg_iovlen = 1;
        h.msg_control = self.ctrl.as_mut_ptr().cast();
        h.msg_controllen = std::mem::size_of_val(&self.ctrl) as _;
        // SAFETY: as above.
        let r = unsafe { libc::recvmsg(self.sock.as_raw_fd(), &mut h, libc::MSG_DONTWAIT) };
        (r >= 0).then_some(r as usize)
    }

    /// Waits for the next datagram of `len` bytes (the "ACKs" are read and
    /// dropped on the way, as the engine reads and handles them).
    fn wait_for(&mut self, len: usize) {
        loop {
            if self.recv() == Some(len) {
                return;
            }
            std::hint::spin_loop();
        }
    }

    /// `data` then `ack` to `dst` in one `sendmmsg`.
    fn send(&self, data: &[u8], ack: &[u8], dst: std::net::SocketAddr) {
        let std::net::SocketAddr::V4(dst) = dst else {
            panic!("IPv4 only")
        };
        // SAFETY: plain old data; all-zero is valid.
        let mut to: libc::sockaddr_in = unsafe { std::mem::zeroed() };
        to.sin_family = libc::AF_INET as libc::sa_family_t;
        to.sin_port = dst.port().to_be();
        to.sin_addr.s_addr = u32::from(*dst.ip()).to_be();
        let mut iovs = [data, ack].map(|b| libc::iovec {
            iov_base: b.as_ptr() as *mut _,
            iov_len: b.len(),
        });
        // SAFETY: plain old data; the pointers outlive the call.
        let mut msgs: [libc::mmsghdr; 2] = unsafe { std::mem::zeroed() };
        for (m, iov) in msgs.iter_mut().zip(iovs.iter_mut()) {
            m.msg_hdr.msg_name = (&mut to as *mut libc::sockaddr_in).cast();
            m.msg_hdr.msg_namelen = std::mem::size_of::<libc::sockaddr_in>() as libc::socklen_t;
            m.msg_hdr.msg_iov = iov;
            m.msg_hdr.msg_iovlen = 1;
        }
        let mut sent = 0;
        while sent < 2 {
            // SAFETY: as above.
            let r = unsafe {
                libc::sendmmsg(
                    self.sock.as_raw_fd(),
                    msgs[sent..].as_mut_ptr(),
                    (2 - sent) as u32,
                    0,
                )
            };
            if r > 0 {
                sent += r as usize;
            }
        }
    }
}

fn pingpong_rc(size: usize, iters: u64) {
    let mut a = RcShaped::bind("127.0.0.1:0");
    let mut b = RcShaped::bind("127.0.0.2:0");
    let (aa, ba) = (a.sock.local_addr().unwrap(), b.sock.local_addr().unwrap());
    // A WRITE of `size` bytes: BTH 12, RETH 16, payload, pad, ICRC 4.
    let write_len = 12 + 16 + size.next_multiple_of(4) + 4;
    let ack = [0x11u8; 20];
    let echo = std::thread::spawn(move || {
        let data = vec![0x0au8; write_len];
        for _ in 0..iters {
            b.wait_for(write_len);
            b.send(&data, &ack, aa);
        }
    });
    let data = vec![0x0au8; write_len];
    let mut samples = Vec::with_capacity(iters as usize);
    for _ in 0..iters {
        let t0 = Instant::now();
        a.send(&data, &ack, ba);
        a.wait_for(write_len);
        samples.push(t0.elapsed().as_nanos() as f64 / 2.0);
    }
    echo.join().unwrap();
    report_latency("RC-shaped UDP ping-pong", size, samples);
}
