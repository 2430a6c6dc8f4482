//! The engine: one UDP socket driving one software RNIC.
//!
//! The RNIC is sans-IO; the engine is its I/O. Each [`Engine::progress`]
//! receives a batch of datagrams (checking each ICRC against the IP header
//! the sender's kernel emitted and reading the CE mark from IP_TOS), runs
//! the RNIC's due timers, and sends what the RNIC has to send, in batches,
//! with the DSCP/ECN of each packet. Nothing blocks: progress is driven by
//! whoever polls (the application's `poll_cq`, a blocking wait, or a
//! progress thread), the way a user-space verbs provider busy-polls.

use crate::error::{Error, Result};
use crate::fault::{FaultConfig, FaultInjector};
use crate::packet::{self, OutDatagram, RxError};
use crate::stats::Stats;
use crate::sys::{RecvBatch, SendBatch};
use roce_rnic::{PayloadRef, RealMemory, Rnic, RnicConfig};
use roce_wire::pcap::CaptureWriter;
use socket2::{Domain, Protocol, Socket, Type};
use std::fs::File;
use std::io::{BufWriter, Write};
use std::net::{SocketAddr, SocketAddrV4};
use std::os::fd::{AsRawFd, RawFd};
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Instant, SystemTime, UNIX_EPOCH};

/// The RoCEv2 UDP port.
pub const ROCE_PORT: u16 = roce_wire::udp::ROCEV2_PORT;

/// How an engine is set up.
#[derive(Debug, Clone)]
pub struct EngineConfig {
    pub rnic: RnicConfig,
    pub faults: FaultConfig,
    /// Write every frame sent and received to this pcap file.
    pub pcap: Option<PathBuf>,
    /// Datagrams per `recvmmsg`/`sendmmsg`.
    pub batch: usize,
    /// Socket send and receive buffer size requested (bytes).
    pub socket_buffer: usize,
}

impl Default for EngineConfig {
    fn default() -> Self {
        EngineConfig {
            rnic: RnicConfig::default(),
            faults: FaultConfig::default(),
            pcap: None,
            batch: 32,
            socket_buffer: 8 << 20,
        }
    }
}

pub struct Engine {
    pub(crate) rnic: Rnic<RealMemory>,
    sock: Socket,
    local: SocketAddrV4,
    origin: Instant,
    wall_origin_ns: u64,
    batch: usize,
    rx: RecvBatch,
    txb: SendBatch,
    pending: Vec<OutDatagram>,
    faults: FaultInjector,
    pcap: Option<Capture>,
    pub(crate) stats: Stats,
    last_send_error: Option<String>,
}

fn setsockopt_int(fd: RawFd, level: libc::c_int, name: libc::c_int, v: libc::c_int) -> bool {
    // SAFETY: a pointer to a live c_int and its size.
    unsafe {
        libc::setsockopt(
            fd,
            level,
            name,
            (&v as *const libc::c_int).cast(),
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        ) == 0
    }
}

/// Packets a QP may keep unacknowledged, from the socket's receive buffer.
///
/// Nothing paces a QP on loopback or an idle LAN, so without a window a
/// sender overruns the peer's socket buffer (the kernel drops silently),
/// and go-back-N then resends the whole window into the same overflow until
/// the retry count runs out. A peer like this one has about the same buffer,
/// so the window is what fits in ours at the largest MTU (a 4 KiB datagram
/// costs about 8 KiB of buffer).
pub fn window_for(rcvbuf: usize) -> u32 {
    (rcvbuf / 8192).clamp(16, 1024) as u32
}

impl Engine {
    /// Opens the engine on `local` (IPv4; port 0 picks a free one).
    pub fn open(local: SocketAddr, cfg: EngineConfig) -> Result<Engine> {
        let SocketAddr::V4(want) = local else {
            return Err(Error::NotIpv4(local));
        };
        if want.ip().is_unspecified() {
            return Err(Error::UnspecifiedAddress(local));
        }
        let io = |what: &str| {
            let what = what.to_string();
            move |e| Error::Io {
                context: format!("{what} {local}"),
                source: e,
            }
        };
        let sock = Socket::new(Domain::IPV4, Type::DGRAM, Some(Protocol::UDP))
            .map_err(io("creating a UDP socket for"))?;
        sock.set_nonblocking(true)
            .map_err(io("setting non-blocking on"))?;
        let fd = sock.as_raw_fd();
        for (name, force) in [
            (libc::SO_RCVBUF, libc::SO_RCVBUFFORCE),
            (libc::SO_SNDBUF, libc::SO_SNDBUFFORCE),
        ] {
            let n = cfg.socket_buffer.min(i32::MAX as usize) as libc::c_int;
            // FORCE needs CAP_NET_ADMIN; without it the plain option is
            // capped by net.core.[rw]mem_max, which is still fine.
            if !setsockopt_int(fd, libc::SOL_SOCKET, force, n) {
                setsockopt_int(fd, libc::SOL_SOCKET, name, n);
            }
        }
        // DF on, so the kernel sends IP ID 0 from this unconnected socket
        // (the ICRC covers the ID) and never fragments a RoCE packet.
        if !setsockopt_int(
            fd,
            libc::IPPROTO_IP,
            libc::IP_MTU_DISCOVER,
            libc::IP_PMTUDISC_DO,
        ) {
            return Err(io("setting IP_MTU_DISCOVER on")(
                std::io::Error::last_os_error(),
            ));
        }
        // Deliver each datagram's TOS byte, to see CE marks.
        if !setsockopt_int(fd, libc::IPPROTO_IP, libc::IP_RECVTOS, 1) {
            return Err(io("setting IP_RECVTOS on")(std::io::Error::last_os_error()));
        }
        sock.bind(&SocketAddr::V4(want).into()).map_err(|e| {
            if e.kind() == std::io::ErrorKind::AddrInUse {
                Error::AddrInUse(local)
            } else {
                io("binding")(e)
            }
        })?;
        let bound = sock
            .local_addr()
            .map_err(io("reading the bound address of"))?
            .as_socket_ipv4()
            .ok_or(Error::NotIpv4(local))?;
        let pcap = match &cfg.pcap {
            Some(p) => {
                if let Some(dir) = p.parent().filter(|d| !d.as_os_str().is_empty()) {
                    std::fs::create_dir_all(dir).map_err(|e| Error::Io {
                        context: format!("creating {}", dir.display()),
                        source: e,
                    })?;
                }
                let f = File::create(p).map_err(|e| Error::Io {
                    context: format!("creating {}", p.display()),
                    source: e,
                })?;
                Some(Capture::new(f)?)
            }
            None => None,
        };
        let mut rnic_cfg = cfg.rnic;
        if rnic_cfg.max_outstanding_pkts == RnicConfig::default().max_outstanding_pkts {
            rnic_cfg.max_outstanding_pkts = window_for(sock.recv_buffer_size().unwrap_or(0));
        }
        let wall_origin_ns = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos() as u64);
        let batch = cfg.batch.clamp(1, 1024);
        Ok(Engine {
            rnic: Rnic::new(rnic_cfg, RealMemory::new()),
            sock,
            local: bound,
            origin: Instant::now(),
            wall_origin_ns,
            batch,
            rx: RecvBatch::new(batch),
            txb: SendBatch::default(),
            pending: Vec::with_capacity(batch),
            faults: FaultInjector::new(cfg.faults),
            pcap,
            stats: Stats::default(),
            last_send_error: None,
        })
    }

    pub fn local_addr(&self) -> SocketAddrV4 {
        self.local
    }

    pub fn fd(&self) -> RawFd {
        self.sock.as_raw_fd()
    }

    /// Monotonic nanoseconds since the engine opened (never 0).
    pub fn now(&self) -> u64 {
        self.origin.elapsed().as_nanos() as u64 + 1
    }

    pub fn rnic(&self) -> &Rnic<RealMemory> {
        &self.rnic
    }

    pub fn rnic_mut(&mut self) -> &mut Rnic<RealMemory> {
        &mut self.rnic
    }

    /// The last error the socket gave on send (e.g. a datagram larger than
    /// the path allows), kept for a clear diagnosis.
    pub fn last_send_error(&self) -> Option<&str> {
        self.last_send_error.as_deref()
    }

    /// Counters: the engine's own plus the RNIC's.
    pub fn stats(&self) -> Stats {
        let mut s = self.stats;
        s.merge_rnic(&self.rnic.counters());
        s.faults = self.faults.stats;
        s
    }

    fn capture(&mut self, src: SocketAddrV4, dst: SocketAddrV4, tos: u8, udp: &[u8], now: u64) {
        if let Some(c) = &mut self.pcap {
            let frame = packet::ethernet_frame(src, dst, tos, udp);
            if c.w.write(self.wall_origin_ns + now, &frame).is_err() {
                self.stats.pcap_errors += 1;
            }
        }
    }

    /// Flushes the capture file (it is also flushed when the engine drops).
    pub fn flush_pcap(&mut self) -> Result<()> {
        if let Some(c) = &self.pcap {
            c.flush().map_err(|e| Error::Io {
                context: "flushing the capture".into(),
                source: e,
            })?;
        }
        Ok(())
    }

    /// One round of I/O: receive, timers, transmit. Returns true when
    /// anything happened (a datagram in or out, or a timer ran).
    pub fn progress(&mut self) -> Result<bool> {
        let work = self.receive()?;
        Ok(self.doorbell()? | work)
    }

    /// The receive half of [`progress`](Self::progress): reads what has
    /// arrived and feeds it to the RNIC, sending nothing. A poller that acts
    /// on what arrived (posting the answer of a ping-pong) and then rings
    /// the doorbell sends the RNIC's ACK and its answer in one batch, one
    /// system call instead of two on the critical path.
    pub fn receive(&mut self) -> Result<bool> {
        let now = self.now();
        let mut work = false;
        for _ in 0..4 {
            let got = self.rx.recv(self.sock.as_raw_fd()).map_err(|e| Error::Io {
                context: format!("receiving on {}", self.local),
                source: e,
            })?;
            for i in 0..got {
                self.on_datagram(now, i);
            }
            work |= got > 0;
            if got < self.batch {
                break;
            }
        }
        Ok(work)
    }

    /// The transmit half: runs due timers and sends what the RNIC has
    /// (what posting a work request rings).
    pub fn doorbell(&mut self) -> Result<bool> {
        let now = self.now();
        let mut work = false;
        if self.rnic.poll_timeout().is_some_and(|t| t <= now) {
            self.rnic.handle_timeout(now);
            work = true;
        }
        Ok(self.transmit(now)? | work)
    }

    fn on_datagram(&mut self, now: u64, i: usize) {
        let meta = self.rx.meta[i];
        self.stats.rx_packets += 1;
        self.stats.rx_bytes += meta.len as u64;
        if self.pcap.is_some() {
            let bytes = self.rx.bufs[i][..meta.len].to_vec();
            self.capture(meta.src, self.local, meta.tos, &bytes, now);
        }
        if meta.truncated {
            self.stats.malformed += 1;
            return;
        }
        let Engine {
            rx, rnic, stats, ..
        } = self;
        let buf = &rx.bufs[i][..meta.len];
        match packet::parse(buf, meta.src, self.local, meta.tos) {
            Err(RxError::Malformed(_)) => stats.malformed += 1,
            Err(RxError::Icrc { .. }) => stats.icrc_errors += 1,
            Ok(p) => {
                let ce = meta.tos & 3 == 3;
                if ce {
                    stats.ce_rx += 1;
                }
                rnic.handle_packet(
                    now,
                    SocketAddr::V4(meta.src),
                    ce,
                    &p.repr,
                    PayloadRef::Bytes(p.payload),
                );
            }
        }
    }

    /// Moves the RNIC's packets to the socket until it has none or the
    /// socket is full. Returns true when anything was sent.
    fn transmit(&mut self, now: u64) -> Result<bool> {
        let mut work = false;
        self.faults.release(now, &mut self.pending);
        loop {
            while self.pending.len() < self.batch {
                let Some(t) = self.rnic.poll_transmit(now) else {
                    break;
                };
                match packet::build(t, self.local) {
                    Ok(d) => {
                        if self.faults.is_active() {
                            self.faults.apply(now, d, &mut self.pending);
                        } else {
                            self.pending.push(d);
                        }
                    }
                    Err(_) => self.stats.build_errors += 1,
                }
            }
            if self.pending.is_empty() {
                break;
            }
            // Pure ACKs last: on loopback the kernel delivers each datagram
            // inside the sending system call, so an ACK sent first delays
            // the request or response behind it by a whole delivery. The
            // order between ACKs and other packets carries no meaning.
            if self.pending.len() > 1 {
                self.pending.sort_by_key(|d| d.is_ack());
            }
            match self.txb.send(self.sock.as_raw_fd(), &self.pending) {
                Ok(0) => break, // socket buffer full: retry on the next round
                Ok(n) => {
                    work = true;
                    for d in self.pending.drain(..n) {
                        self.stats.tx_packets += 1;
                        self.stats.tx_bytes += d.len() as u64;
                        if let Some(c) = &mut self.pcap {
                            let frame =
                                packet::ethernet_frame(self.local, d.dst, d.tos, &d.to_vec());
                            if c.w.write(self.wall_origin_ns + now, &frame).is_err() {
                                self.stats.pcap_errors += 1;
                            }
                        }
                    }
                }
                Err(e) => {
                    // The first datagram cannot be sent (too big for the
                    // path, no route): drop it like a lossy link would,
                    // remember why, and go on.
                    self.stats.send_errors += 1;
                    self.last_send_error = Some(format!(
                        "sending {} bytes to {}: {e}",
                        self.pending[0].len(),
                        self.pending[0].dst
                    ));
                    self.pending.remove(0);
                }
            }
        }
        Ok(work)
    }

    /// Nanoseconds until the engine has timed work (a timer or a held-back
    /// packet), if any; 0 when sends are pending.
    pub fn next_wakeup_in(&self) -> Option<u64> {
        if !self.pending.is_empty() {
            return Some(0);
        }
        let now = self.now();
        [self.rnic.poll_timeout(), self.faults.next_release()]
            .into_iter()
            .flatten()
            .min()
            .map(|t| t.saturating_sub(now))
    }
}

impl Drop for Engine {
    fn drop(&mut self) {
        let _ = self.flush_pcap();
    }
}

/// A capture file. `CaptureWriter` hands its writer back only on
/// `into_inner`, so the file sits behind a shared handle the engine can
/// flush at any time.
struct Capture {
    w: CaptureWriter<Sink>,
    file: Arc<Mutex<BufWriter<File>>>,
}

struct Sink(Arc<Mutex<BufWriter<File>>>);

impl Write for Sink {
    fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap_or_else(|e| e.into_inner()).write(b)
    }
    fn flush(&mut self) -> std::io::Result<()> {
        self.0.lock().unwrap_or_else(|e| e.into_inner()).flush()
    }
}

impl Capture {
    fn new(f: File) -> Result<Capture> {
        let file = Arc::new(Mutex::new(BufWriter::new(f)));
        Ok(Capture {
            w: CaptureWriter::new(Sink(file.clone()))?,
            file,
        })
    }
    fn flush(&self) -> std::io::Result<()> {
        self.file.lock().unwrap_or_else(|e| e.into_inner()).flush()
    }
}
