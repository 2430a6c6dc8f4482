//! What the kernel alone does on loopback with the sizes `roce perf` uses:
//! the baselines its results are reported against, run side by side
//! (`roce perf --loopback --baseline`, or the `baseline` example).
//!
//! - [`tcp_stream`]: a TCP stream of `size`-byte writes (`TCP_NODELAY`),
//!   counted at the receiver: the bar for the bandwidth tests.
//! - [`udp_stream`]: bare UDP datagrams, counted at the receiver (the
//!   socket buffer drops what it cannot hold, so this is not a rate the
//!   sender can count on).
//! - [`udp_gso_stream`]: UDP with the engine's offloads and none of its
//!   work: GSO sends of runs of `seg`-byte datagrams into a GRO socket,
//!   counted at the receiver. With `seg` the size of a RoCE WRITE packet
//!   (4112 bytes of UDP payload at the 4 KiB MTU), the kernel-only ceiling
//!   the engine's loopback bandwidth approaches (issue 13, part 2).
//! - [`udp_pingpong`]: a busy-polled ping-pong of `size`-byte datagrams
//!   between 127.0.0.1 and 127.0.0.2, timed as perftest times its latency
//!   tests (half the round trip): the bar for the latency tests.
//! - [`rc_shaped_pingpong`]: the same ping-pong with RoCE's shape and none
//!   of its processing: the engine's socket options (DF, IP_RECVTOS,
//!   UDP_GRO) and calls (one `recvmsg` with the sender's address and
//!   control messages; `sendmmsg`), a datagram the size of an RDMA WRITE
//!   of `size` bytes (BTH, RETH, pad, ICRC) and behind it, in the same
//!   `sendmmsg`, one the size of the ACK for the peer's last WRITE. Its
//!   distance from [`udp_pingpong`] is what the kernel charges for RoCE's
//!   shape; the rest of `write_lat` is the RNIC's and the engine's.

use crate::sys::setsockopt_int;
use std::io::{self, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream, UdpSocket};
use std::os::fd::AsRawFd;
use std::time::{Duration, Instant};

/// Bytes and messages a receiver counted over `secs`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Throughput {
    pub bytes: u64,
    pub msgs: u64,
    pub secs: f64,
    /// Datagrams the sender handed to the kernel (UDP only; 0 for TCP).
    pub sent: u64,
}

impl Throughput {
    pub fn gbps(&self) -> f64 {
        self.bytes as f64 * 8.0 / self.secs.max(1e-9) / 1e9
    }
}

fn joined<T>(h: std::thread::JoinHandle<io::Result<T>>) -> io::Result<T> {
    h.join()
        .map_err(|_| io::Error::other("a baseline thread panicked"))?
}

/// A TCP stream of `size`-byte writes for `dur`, counted at the receiver.
pub fn tcp_stream(size: usize, dur: Duration) -> io::Result<Throughput> {
    let size = size.max(1);
    let l = TcpListener::bind("127.0.0.1:0")?;
    let addr = l.local_addr()?;
    let rx = std::thread::spawn(move || -> io::Result<(u64, f64)> {
        let (mut s, _) = l.accept()?;
        let mut buf = vec![0u8; size];
        let mut total = 0u64;
        let start = Instant::now();
        loop {
            match s.read(&mut buf) {
                Ok(0) | Err(_) => break,
                Ok(n) => total += n as u64,
            }
        }
        Ok((total, start.elapsed().as_secs_f64()))
    });
    let mut s = TcpStream::connect(addr)?;
    s.set_nodelay(true)?;
    let buf = vec![0x5au8; size];
    let end = Instant::now() + dur;
    while Instant::now() < end {
        s.write_all(&buf)?;
    }
    drop(s);
    let (bytes, secs) = joined(rx)?;
    Ok(Throughput {
        bytes,
        msgs: bytes / size as u64,
        secs,
        sent: 0,
    })
}

/// Bare UDP datagrams of `size` bytes for `dur`, counted at the receiver.
pub fn udp_stream(size: usize, dur: Duration) -> io::Result<Throughput> {
    let r = UdpSocket::bind("127.0.0.1:0")?;
    let dst = r.local_addr()?;
    r.set_read_timeout(Some(Duration::from_millis(200)))?;
    let rx = std::thread::spawn(move || -> io::Result<(u64, u64, f64)> {
        let mut buf = vec![0u8; 65536];
        let (mut total, mut n) = (0u64, 0u64);
        let mut first: Option<Instant> = None;
        let mut last = Instant::now();
        while let Ok(k) = r.recv(&mut buf) {
            first.get_or_insert_with(Instant::now);
            last = Instant::now();
            total += k as u64;
            n += 1;
        }
        let secs = first.map_or(1e-9, |f| (last - f).as_secs_f64());
        Ok((total, n, secs))
    });
    let s = UdpSocket::bind("127.0.0.1:0")?;
    let buf = vec![0x5au8; size];
    let end = Instant::now() + dur;
    let mut sent = 0u64;
    while Instant::now() < end {
        if s.send_to(&buf, dst).is_ok() {
            sent += 1;
        }
    }
    let (bytes, msgs, secs) = joined(rx)?;
    Ok(Throughput {
        bytes,
        msgs,
        secs,
        sent,
    })
}

/// Runs of `seg`-byte datagrams for `dur`, each run one UDP GSO send (as
/// many segments as lo passes whole, at most the engine's
/// [`MAX_GSO_SEGMENTS`](crate::sys::MAX_GSO_SEGMENTS)), into a socket with
/// UDP GRO on, counted at the receiver in bytes and datagrams (each GRO
/// buffer holds whole segments). Both sockets get the engine's 8 MiB
/// buffers. The receiver only counts: it does not read what it receives,
/// as the engine must (the ICRC) — this is what the kernel alone carries in
/// the engine's shape. Fails when the kernel has no UDP GSO or GRO.
pub fn udp_gso_stream(seg: usize, dur: Duration) -> io::Result<Throughput> {
    let seg = seg.clamp(1, 65507);
    let r = UdpSocket::bind("127.0.0.1:0")?;
    let dst = r.local_addr()?;
    let need = |ok: bool, what: &str| {
        if ok {
            Ok(())
        } else {
            Err(io::Error::other(format!(
                "{what}: {}",
                io::Error::last_os_error()
            )))
        }
    };
    let buffers = |fd: std::os::fd::RawFd| {
        for (name, force) in [
            (libc::SO_RCVBUF, libc::SO_RCVBUFFORCE),
            (libc::SO_SNDBUF, libc::SO_SNDBUFFORCE),
        ] {
            if !setsockopt_int(fd, libc::SOL_SOCKET, force, 8 << 20) {
                setsockopt_int(fd, libc::SOL_SOCKET, name, 8 << 20);
            }
        }
    };
    buffers(r.as_raw_fd());
    need(
        setsockopt_int(r.as_raw_fd(), libc::SOL_UDP, crate::sys::UDP_GRO, 1),
        "turning UDP_GRO on",
    )?;
    r.set_read_timeout(Some(Duration::from_millis(200)))?;
    let rx = std::thread::spawn(move || -> io::Result<(u64, f64)> {
        let mut buf = vec![0u8; 65536];
        let mut total = 0u64;
        let mut first: Option<Instant> = None;
        let mut last = Instant::now();
        while let Ok(k) = r.recv(&mut buf) {
            first.get_or_insert_with(Instant::now);
            last = Instant::now();
            total += k as u64;
        }
        let secs = first.map_or(1e-9, |f| (last - f).as_secs_f64());
        Ok((total, secs))
    });
    let s = UdpSocket::bind("127.0.0.1:0")?;
    buffers(s.as_raw_fd());
    // A GSO packet lo would cut in software is not the engine's shape:
    // stay under lo's gso_max_size as the engine does.
    let gso_max = std::fs::read_to_string("/sys/class/net/lo/gso_max_size")
        .ok()
        .and_then(|v| v.trim().parse::<usize>().ok())
        .unwrap_or(65536)
        .saturating_sub(14 + 28 + 1)
        .min(65507);
    let segs = (gso_max / seg).clamp(1, crate::sys::MAX_GSO_SEGMENTS);
    need(
        setsockopt_int(
            s.as_raw_fd(),
            libc::SOL_UDP,
            crate::sys::UDP_SEGMENT,
            seg as libc::c_int,
        ),
        "setting UDP_SEGMENT",
    )?;
    let buf = vec![0x5au8; seg * segs];
    let end = Instant::now() + dur;
    let mut sent = 0u64;
    while Instant::now() < end {
        if s.send_to(&buf, dst).is_ok() {
            sent += segs as u64;
        }
    }
    let (bytes, secs) = joined(rx)?;
    // Nothing carried is no ceiling of 0 Gb/s (it would make any ratio
    // against it absurd): every GSO send failed, or none arrived.
    if bytes == 0 {
        return Err(io::Error::other(format!(
            "no datagram of {seg} bytes arrived ({sent} sent as UDP GSO runs of {segs}): {}",
            if sent == 0 {
                "every GSO send failed"
            } else {
                "the GRO socket received none"
            }
        )));
    }
    Ok(Throughput {
        bytes,
        msgs: bytes / seg as u64,
        secs,
        sent,
    })
}

/// The largest message either ping-pong carries: a UDP datagram holds
/// 65507 bytes, and the RC-shaped one adds 32 of headers and ICRC.
pub const MAX_PINGPONG_SIZE: usize = 65507 - 32;

/// How long a ping-pong side waits for its peer before giving up.
const STALL: Duration = Duration::from_secs(10);

/// Half round trips (ns) of `iters` busy-polled UDP ping-pongs of `size` bytes.
pub fn udp_pingpong(size: usize, iters: u64) -> io::Result<Vec<f64>> {
    check_size(size)?;
    let a = UdpSocket::bind("127.0.0.1:0")?;
    let b = UdpSocket::bind("127.0.0.2:0")?;
    let (aa, ba) = (a.local_addr()?, b.local_addr()?);
    a.set_nonblocking(true)?;
    b.set_nonblocking(true)?;
    let wait = |s: &UdpSocket, buf: &mut [u8]| -> io::Result<usize> {
        let t = Instant::now();
        loop {
            match s.recv(buf) {
                Ok(n) => return Ok(n),
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    if t.elapsed() > STALL {
                        return Err(io::Error::new(io::ErrorKind::TimedOut, "ping-pong stalled"));
                    }
                    std::hint::spin_loop();
                }
                Err(e) => return Err(e),
            }
        }
    };
    let echo = std::thread::spawn(move || -> io::Result<()> {
        let mut buf = vec![0u8; 65536];
        for _ in 0..iters {
            let n = wait(&b, &mut buf)?;
            b.send_to(&buf[..n], aa)?;
        }
        Ok(())
    });
    let buf = vec![0x5au8; size];
    let mut rbuf = vec![0u8; 65536];
    let mut samples = Vec::with_capacity(iters as usize);
    for _ in 0..iters {
        let t0 = Instant::now();
        a.send_to(&buf, ba)?;
        wait(&a, &mut rbuf)?;
        samples.push(t0.elapsed().as_nanos() as f64 / 2.0);
    }
    joined(echo)?;
    Ok(samples)
}

/// A UDP socket set up and driven the way the engine drives its own.
struct RcShaped {
    sock: UdpSocket,
    buf: Vec<u8>,
    ctrl: [u64; 8],
    from: libc::sockaddr_in,
}

impl RcShaped {
    fn bind(addr: &str) -> io::Result<RcShaped> {
        let sock = UdpSocket::bind(addr)?;
        sock.set_nonblocking(true)?;
        let fd = sock.as_raw_fd();
        for (level, name, v) in [
            (
                libc::IPPROTO_IP,
                libc::IP_MTU_DISCOVER,
                libc::IP_PMTUDISC_DO,
            ),
            (libc::IPPROTO_IP, libc::IP_RECVTOS, 1),
            (libc::IPPROTO_IP, libc::IP_TOS, 2),
            (libc::SOL_UDP, crate::sys::UDP_GRO, 1),
        ] {
            if !setsockopt_int(fd, level, name, v) {
                return Err(io::Error::last_os_error());
            }
        }
        Ok(RcShaped {
            sock,
            buf: vec![0u8; 65536],
            ctrl: [0; 8],
            // SAFETY: plain old data; all-zero is valid.
            from: unsafe { std::mem::zeroed() },
        })
    }

    /// One non-blocking `recvmsg` with address and control messages: the
    /// length received, if a datagram was waiting.
    fn recv(&mut self) -> io::Result<Option<usize>> {
        let mut iov = libc::iovec {
            iov_base: self.buf.as_mut_ptr().cast(),
            iov_len: self.buf.len(),
        };
        // SAFETY: plain old data; every pointer set below outlives the call.
        let mut h: libc::msghdr = unsafe { std::mem::zeroed() };
        h.msg_name = (&mut self.from as *mut libc::sockaddr_in).cast();
        h.msg_namelen = std::mem::size_of::<libc::sockaddr_in>() as libc::socklen_t;
        h.msg_iov = &mut iov;
        h.msg_iovlen = 1;
        h.msg_control = self.ctrl.as_mut_ptr().cast();
        h.msg_controllen = std::mem::size_of_val(&self.ctrl) as _;
        // SAFETY: as above.
        let r = unsafe { libc::recvmsg(self.sock.as_raw_fd(), &mut h, libc::MSG_DONTWAIT) };
        if r >= 0 {
            return Ok(Some(r as usize));
        }
        let e = io::Error::last_os_error();
        match e.kind() {
            io::ErrorKind::WouldBlock | io::ErrorKind::Interrupted => Ok(None),
            _ => Err(e),
        }
    }

    /// Waits for the next datagram of `len` bytes; the "ACKs" on the way
    /// are read and dropped, as the engine reads and handles its own.
    fn wait_for(&mut self, len: usize) -> io::Result<()> {
        let t = Instant::now();
        loop {
            if self.recv()? == Some(len) {
                return Ok(());
            }
            if t.elapsed() > STALL {
                return Err(io::Error::new(io::ErrorKind::TimedOut, "ping-pong stalled"));
            }
            std::hint::spin_loop();
        }
    }

    /// `data` then `ack` to `dst` in one `sendmmsg`.
    fn send(&self, data: &[u8], ack: &[u8], dst: SocketAddr) -> io::Result<()> {
        let SocketAddr::V4(dst) = dst else {
            return Err(io::Error::new(io::ErrorKind::InvalidInput, "IPv4 only"));
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
        // SAFETY: plain old data; the pointers set below outlive the call.
        let mut msgs: [libc::mmsghdr; 2] = unsafe { std::mem::zeroed() };
        for (m, iov) in msgs.iter_mut().zip(iovs.iter_mut()) {
            m.msg_hdr.msg_name = (&mut to as *mut libc::sockaddr_in).cast();
            m.msg_hdr.msg_namelen = std::mem::size_of::<libc::sockaddr_in>() as libc::socklen_t;
            m.msg_hdr.msg_iov = iov;
            m.msg_hdr.msg_iovlen = 1;
        }
        let mut sent = 0;
        while sent < msgs.len() {
            // SAFETY: as above.
            let r = unsafe {
                libc::sendmmsg(
                    self.sock.as_raw_fd(),
                    msgs[sent..].as_mut_ptr(),
                    (msgs.len() - sent) as libc::c_uint,
                    0,
                )
            };
            if r < 0 {
                let e = io::Error::last_os_error();
                if e.kind() != io::ErrorKind::Interrupted {
                    return Err(e);
                }
            } else {
                sent += r as usize;
            }
        }
        Ok(())
    }
}

/// Half round trips (ns) of `iters` ping-pongs shaped like `write_lat` of
/// `size` bytes (see the module documentation).
pub fn rc_shaped_pingpong(size: usize, iters: u64) -> io::Result<Vec<f64>> {
    check_size(size)?;
    let mut a = RcShaped::bind("127.0.0.1:0")?;
    let mut b = RcShaped::bind("127.0.0.2:0")?;
    let (aa, ba) = (a.sock.local_addr()?, b.sock.local_addr()?);
    // An RDMA WRITE of `size` bytes: BTH 12, RETH 16, payload, pad, ICRC 4.
    let write_len = 12 + 16 + size.next_multiple_of(4) + 4;
    // An ACK: BTH 12, AETH 4, ICRC 4.
    let ack = [0x11u8; 20];
    let echo = std::thread::spawn(move || -> io::Result<()> {
        let data = vec![0x0au8; write_len];
        for _ in 0..iters {
            b.wait_for(write_len)?;
            b.send(&data, &ack, aa)?;
        }
        Ok(())
    });
    let data = vec![0x0au8; write_len];
    let mut samples = Vec::with_capacity(iters as usize);
    for _ in 0..iters {
        let t0 = Instant::now();
        a.send(&data, &ack, ba)?;
        a.wait_for(write_len)?;
        samples.push(t0.elapsed().as_nanos() as f64 / 2.0);
    }
    joined(echo)?;
    Ok(samples)
}

fn check_size(size: usize) -> io::Result<()> {
    if size > MAX_PINGPONG_SIZE {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("a ping-pong carries at most {MAX_PINGPONG_SIZE} bytes, not {size}"),
        ));
    }
    Ok(())
}

/// The median of `samples` (perftest's t_typical), 0 when empty.
pub fn typical(samples: &[f64]) -> f64 {
    let mut v = samples.to_vec();
    v.sort_by(f64::total_cmp);
    v.get(v.len() / 2).copied().unwrap_or(0.0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_baseline_measures_something() {
        let t = tcp_stream(4096, Duration::from_millis(50)).unwrap();
        assert!(t.bytes > 0 && t.msgs > 0 && t.gbps() > 0.0);
        let u = udp_stream(1024, Duration::from_millis(50)).unwrap();
        assert!(u.sent > 0 && u.msgs <= u.sent && u.bytes == u.msgs * 1024);
        let p = udp_pingpong(8, 50).unwrap();
        assert_eq!(p.len(), 50);
        assert!(p.iter().all(|&x| x > 0.0));
        // Segments of a RoCE WRITE's size, sent and received whole.
        let g = udp_gso_stream(4112, Duration::from_millis(50)).unwrap();
        assert!(g.sent > 0 && g.msgs > 0 && g.msgs <= g.sent);
        assert_eq!(g.bytes, g.msgs * 4112);
        let r = rc_shaped_pingpong(8, 50).unwrap();
        assert_eq!(r.len(), 50);
        assert!(typical(&r) > 0.0);
    }
}
