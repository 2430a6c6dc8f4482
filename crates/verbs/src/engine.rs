//! The engine: one UDP socket driving one software RNIC.
//!
//! The RNIC is sans-IO; the engine is its I/O. Each [`Engine::progress`]
//! receives a batch of datagrams (checking each ICRC against the IP header
//! the sender's kernel emitted and reading the CE mark from IP_TOS), runs
//! the RNIC's due timers, and sends what the RNIC has to send, in batches,
//! with the DSCP/ECN of each packet. Nothing blocks: progress is driven by
//! whoever polls (the application's `poll_cq`, a blocking wait, or a
//! progress thread), the way a user-space verbs provider busy-polls.
//! Whether the poller then spins or blocks in `epoll` when a round finds
//! nothing is [`EngineConfig::poll`]'s choice ([`crate::poll`],
//! [`Engine::park`], and the `Context` calls that drive the engine).
//!
//! # UDP GSO and GRO
//!
//! Per-datagram kernel work dominates on loopback, so where the kernel has
//! them the engine sends runs of equal-sized datagrams as one UDP GSO send
//! and reads with UDP GRO on. What this does to the IP ID, which the ICRC
//! covers (Linux source, checked on the machine with captures and a socket
//! filter that reports the ID each delivered datagram carries):
//!
//! - `ip_select_ident_segs` gives the whole GSO send ID 0 (unconnected
//!   socket, DF set), and `inet_gso_segment`, wherever a send is cut into
//!   segments (software GSO on a device without UDP segmentation offload,
//!   or at the receiver for a socket without GRO), numbers the segments
//!   0, 1, 2, … So segment `k` is sent with the ICRC for ID `k`.
//! - On loopback the send is never cut when the receiving socket has
//!   UDP_GRO: lo passes the GSO packet through whole (a capture on lo shows
//!   one frame of the whole run, ID 0), and the socket reads it as one
//!   buffer with the segment size. The receiver checks segment `k` of such
//!   a buffer against ID `k` (or ID 0: a NIC's GRO also coalesces runs of
//!   single DF datagrams, all ID 0). A datagram that arrives alone is
//!   checked against ID 0 only, exactly as without GSO.
//! - A socket without GRO would get segments 1, 2, … alone, with IDs it
//!   cannot read, and a receiver that assumes ID 0 would refuse them; so
//!   would one beyond a real NIC. GSO is therefore used only towards local
//!   addresses (which lo carries), only when this engine's own GRO is on
//!   (the peer, on the same kernel, has it too), only when a probe at open
//!   saw a two-segment send to itself arrive whole, and only for sends
//!   small enough that lo does not segment them in software (a GSO packet
//!   of `gso_max_size` bytes or more, counting its Ethernet header, is cut
//!   before lo: 65493 bytes of UDP payload at the default 65536).

use crate::cc::CcSettings;
use crate::ecn::{RedConfig, RedMarker};
use crate::error::{Error, Result};
use crate::fault::{FaultConfig, FaultInjector};
use crate::packet::{self, IcrcPrefixes, IdentDelta, OutDatagram, RxError};
use crate::poll::{Pacer, PollConfig, PollMode, SleepPlan, Waiter};
use crate::profile::{Profiler, Stage, StageProfile};
use crate::stats::Stats;
use crate::sys::{self, MAX_GSO_SEGMENTS, RecvBatch, RecvMeta, SendBatch, setsockopt_int};
use roce_rnic::{PayloadRef, RealMemory, Rnic, RnicConfig};
use roce_wire::pcap::CaptureWriter;
use socket2::{Domain, Protocol, Socket, Type};
use std::fs::File;
use std::io::{BufWriter, Write};
use std::net::SocketAddr;
use std::os::fd::{AsRawFd, RawFd};
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// The RoCEv2 UDP port.
pub const ROCE_PORT: u16 = roce_wire::udp::ROCEV2_PORT;

/// How an engine is set up.
#[derive(Debug, Clone)]
pub struct EngineConfig {
    /// The RNIC's settings. Fields left at [`RnicConfig::default`] get the
    /// engine's real-socket values instead: `max_outstanding_pkts` and
    /// IRN's `bdp_pkts` from the socket buffer, `pacing_catch_up_ns`
    /// [`PACING_CATCH_UP_NS`] (set it to 1 for practically no catch-up:
    /// 0 is the default and so means "the engine's").
    pub rnic: RnicConfig,
    pub faults: FaultConfig,
    /// Write every frame sent and received to this pcap file.
    pub pcap: Option<PathBuf>,
    /// Datagrams per `recvmmsg`/`sendmmsg`.
    pub batch: usize,
    /// Socket send and receive buffer size requested (bytes).
    pub socket_buffer: usize,
    /// Use UDP GRO on receive and UDP GSO towards local peers where the
    /// kernel has them (see the module documentation). Local peers must
    /// agree: one with it off cannot take the GSO segments of one with it
    /// on (segments 1, 2, … would count as ICRC errors there).
    pub offload: bool,
    /// Account the engine's time per stage ([`crate::profile`]): a cycle
    /// counter read at the stage boundaries the engine already crosses.
    pub profile: bool,
    /// Congestion control of QPs that do not choose their own ([`crate::cc`]).
    pub cc: CcSettings,
    /// Mark received packets CE by RED over the socket's backlog ([`crate::ecn`]).
    pub ecn_red: Option<RedConfig>,
    /// How the engine waits when idle: spin, block in `epoll`, or spin
    /// then block ([`crate::poll`]; adaptive by default).
    pub poll: PollConfig,
}

impl Default for EngineConfig {
    fn default() -> Self {
        EngineConfig {
            rnic: RnicConfig::default(),
            faults: FaultConfig::default(),
            pcap: None,
            batch: 32,
            socket_buffer: 8 << 20,
            offload: true,
            profile: true,
            cc: CcSettings::default(),
            ecn_red: None,
            poll: PollConfig::default(),
        }
    }
}

pub struct Engine {
    pub(crate) rnic: Rnic<RealMemory>,
    sock: Socket,
    local: SocketAddr,
    origin: Instant,
    wall_origin_ns: u64,
    batch: usize,
    rx: RecvBatch,
    txb: SendBatch,
    pending: Vec<OutDatagram>,
    /// Pure ACKs built this round, to go behind the other datagrams.
    acks: Vec<OutDatagram>,
    /// Datagrams per `sendmmsg` message for the pending queue.
    groups: Vec<usize>,
    /// GRO is on: a receive may hold several datagrams.
    gro: bool,
    /// The last receive found datagrams: ask for a batch next time.
    rx_streak: bool,
    /// Largest GSO send in bytes of UDP payload; 0 when GSO is off.
    gso_max_bytes: usize,
    deltas: IdentDelta,
    /// ICRC prefix states of the datagram shapes seen, sent and received.
    prefixes: IcrcPrefixes,
    faults: FaultInjector,
    pcap: Option<Capture>,
    pub(crate) stats: Stats,
    last_send_error: Option<String>,
    prof: Profiler,
    pub(crate) cc: CcSettings,
    red: Option<RedMarker>,
    /// What a blocked engine waits on, shared with the threads that wake it.
    waiter: Arc<Waiter>,
    /// Idle rounds so far, and whether they allow blocking.
    pacer: Pacer,
    /// The go-back-N window the engine chose from its socket buffer (none
    /// when the configuration named one), shared among its RC QPs.
    window: Option<u32>,
}

/// How far a rate-paced QP on real sockets may fall behind its schedule
/// and catch up (`RnicConfig::pacing_catch_up_ns`): 1 ms. Without
/// catch-up `--rate-limit 5` on a loaded loopback moved 0.53 Gb/s (each
/// 6.5 µs gap stretched to a ≈ 60 µs wake-up), with 200 µs 1.87 Gb/s
/// (wake-ups on a machine with 8 runnable threads per core come later
/// still); a burst stays within 1 ms of the QP's rate (625 KB at 5 Gb/s,
/// inside the socket buffer the window is sized to).
pub const PACING_CATCH_UP_NS: u64 = 1_000_000;

/// Fewest packets [`Engine::share_window`] leaves an RC QP: a 64 KiB
/// message at the 4 KiB MTU.
pub const MIN_SHARED_WINDOW: u32 = 16;

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
    /// Opens the engine on `local` (IPv4 or IPv6; port 0 picks a free one).
    pub fn open(local: SocketAddr, cfg: EngineConfig) -> Result<Engine> {
        let v6 = local.is_ipv6();
        if local.ip().is_unspecified() {
            return Err(Error::UnspecifiedAddress(local));
        }
        let io = |what: &str| {
            let what = what.to_string();
            move |e| Error::Io {
                context: format!("{what} {local}"),
                source: e,
            }
        };
        let sock = Socket::new(Domain::for_address(local), Type::DGRAM, Some(Protocol::UDP))
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
        // (the ICRC covers the ID) and never fragments a RoCE packet; then
        // each datagram's TOS byte (IPv6: traffic class) delivered, to see
        // CE marks. An IPv6 socket takes IPv6 peers only: an IPv4-mapped
        // peer would get packets whose ICRC covers the wrong IP header.
        let opts: &[(&str, libc::c_int, libc::c_int, libc::c_int)] = if v6 {
            &[
                ("IPV6_V6ONLY", libc::IPPROTO_IPV6, libc::IPV6_V6ONLY, 1),
                (
                    "IPV6_MTU_DISCOVER",
                    libc::IPPROTO_IPV6,
                    libc::IPV6_MTU_DISCOVER,
                    libc::IPV6_PMTUDISC_DO,
                ),
                (
                    "IPV6_RECVTCLASS",
                    libc::IPPROTO_IPV6,
                    libc::IPV6_RECVTCLASS,
                    1,
                ),
            ]
        } else {
            &[
                (
                    "IP_MTU_DISCOVER",
                    libc::IPPROTO_IP,
                    libc::IP_MTU_DISCOVER,
                    libc::IP_PMTUDISC_DO,
                ),
                ("IP_RECVTOS", libc::IPPROTO_IP, libc::IP_RECVTOS, 1),
            ]
        };
        for &(what, level, name, v) in opts {
            if !setsockopt_int(fd, level, name, v) {
                return Err(io(&format!("setting {what} on"))(
                    std::io::Error::last_os_error(),
                ));
            }
        }
        sock.bind(&local.into()).map_err(|e| {
            if e.kind() == std::io::ErrorKind::AddrInUse {
                Error::AddrInUse(local)
            } else {
                io("binding")(e)
            }
        })?;
        let bound = sock
            .local_addr()
            .map_err(io("reading the bound address of"))?
            .as_socket()
            .ok_or(Error::UnspecifiedAddress(local))?;
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
        // A peer here is a socket: many engines share one IP (loopback), and
        // each sends from the port it is bound to, which the peer connected to.
        rnic_cfg.match_source_port = true;
        rnic_cfg.ecn_echo |= cfg.cc.ecn_echo();
        if rnic_cfg.pacing_catch_up_ns == 0 {
            // A paced QP here is woken by an OS timer on a shared CPU, tens
            // of µs late: let it catch up on its schedule (RnicConfig docs).
            rnic_cfg.pacing_catch_up_ns = PACING_CATCH_UP_NS;
        }
        let mut window = None;
        if rnic_cfg.max_outstanding_pkts == RnicConfig::default().max_outstanding_pkts {
            let w = window_for(sock.recv_buffer_size().unwrap_or(0));
            rnic_cfg.max_outstanding_pkts = w;
            window = Some(w);
        }
        if rnic_cfg.irn == roce_rnic::IrnConfig::default() {
            // IRN's BDP-FC bound on real sockets: what the receive buffer
            // holds (the same window go-back-N gets), and timeouts for a
            // software stack whose RTT is scheduling, not wire, time: a
            // spurious IRN timeout resends every packet not reported held,
            // so RTO_high is what perftest's timeout 12 gives go-back-N.
            rnic_cfg.irn.bdp_pkts = rnic_cfg.max_outstanding_pkts;
            rnic_cfg.irn.rto_low_ns = 4_000_000;
            rnic_cfg.irn.rto_high_ns = 16_000_000;
        }
        let wall_origin_ns = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos() as u64);
        let batch = cfg.batch.clamp(1, 1024);
        let gro = cfg.offload && setsockopt_int(fd, libc::SOL_UDP, sys::UDP_GRO, 1);
        let mut rx = RecvBatch::new(
            batch,
            if gro {
                sys::MAX_GRO_BUFFER
            } else {
                sys::MAX_DATAGRAM
            },
        );
        let mut txb = SendBatch::default();
        // The socket starts out with the TOS of data and ACKs of a QP with
        // the default DSCP (0); it then follows the TOS its messages use,
        // and the odd other one (a CNP) names its own (`SendBatch`).
        txb.set_socket_tos(fd, if rnic_cfg.ecn { 2 } else { 0 });
        let gso_max_bytes = if gro {
            probe_gso(fd, bound, &mut rx, &mut txb)
        } else {
            0
        };
        let waiter = Arc::new(Waiter::new(fd).map_err(io("setting up epoll for"))?);
        Ok(Engine {
            rnic: Rnic::new(rnic_cfg, RealMemory::zero_copy()),
            sock,
            local: bound,
            origin: Instant::now(),
            wall_origin_ns,
            batch,
            rx,
            txb,
            pending: Vec::with_capacity(batch),
            acks: Vec::new(),
            groups: Vec::new(),
            gro,
            rx_streak: false,
            gso_max_bytes,
            deltas: IdentDelta::new(),
            prefixes: IcrcPrefixes::new(),
            faults: FaultInjector::new(cfg.faults),
            pcap,
            stats: Stats::default(),
            last_send_error: None,
            prof: Profiler::new(cfg.profile),
            cc: cfg.cc,
            red: cfg.ecn_red.map(|r| RedMarker::new(r, cfg.faults.seed)),
            waiter,
            pacer: Pacer::new(cfg.poll),
            window,
        })
    }

    /// Divides the window the engine chose from its socket buffer among
    /// its RC QPs (called as QPs come and go). The buffer the window stands
    /// for is the peer's one socket, which every QP to that peer fills:
    /// with a whole window each, `-q 4` kept four buffers' worth in flight,
    /// the kernel dropped the overflow, and go-back-N resent whole windows
    /// into it (12 % of a loopback `write_bw -q 4` run's packets were
    /// retransmissions). Each QP keeps at least [`MIN_SHARED_WINDOW`]
    /// packets; a window the application configured is left alone.
    pub fn share_window(&mut self) {
        if let Some(w) = self.window {
            let n = self.rnic.rc_qp_count().max(1) as u32;
            self.rnic
                .set_max_outstanding_pkts((w / n).max(MIN_SHARED_WINDOW.min(w)));
        }
    }

    pub fn local_addr(&self) -> SocketAddr {
        self.local
    }

    /// The socket's receive buffer as the kernel set it (bytes).
    pub fn sock_recv_buffer(&self) -> usize {
        self.sock.recv_buffer_size().unwrap_or(0)
    }

    /// See [`FaultInjector::set_ce_mark`].
    pub fn set_ce_mark(&mut self, p: f64) {
        self.faults.set_ce_mark(p);
    }

    pub fn fd(&self) -> RawFd {
        self.sock.as_raw_fd()
    }

    /// Whether receives use UDP GRO.
    pub fn gro(&self) -> bool {
        self.gro
    }

    /// Whether sends to local peers use UDP GSO (see the module documentation).
    pub fn gso(&self) -> bool {
        self.gso_max_bytes > 0
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
        s.red = self.red.as_ref().map(|r| r.stats).unwrap_or_default();
        s
    }

    /// Where the engine's time went since it opened, per stage
    /// ([`crate::profile`]); subtract an earlier snapshot with
    /// [`StageProfile::since`] for an interval.
    pub fn profile(&mut self) -> StageProfile {
        let (ticks, bytes) = self.rnic.mem().copy_time();
        self.prof.take_copies(ticks, bytes);
        self.prof
            .snapshot(self.stats.rx_packets, self.stats.tx_packets)
    }

    /// Whether the engine accounts its time per stage.
    pub fn profiling(&self) -> bool {
        self.prof.enabled()
    }

    /// Posts send work requests to the RNIC (the time charged to its stage).
    pub fn post_send(
        &mut self,
        qpn: u32,
        wrs: &[roce_rnic::SendWr],
    ) -> std::result::Result<(), roce_rnic::PostError> {
        self.prof.enter();
        let r = self.rnic.post_send(qpn, wrs);
        self.prof.lap(Stage::Rnic);
        r
    }

    /// Takes up to `max` completions from `cq`: completion handling when
    /// there are some, an idle poll when there are none.
    pub fn poll_cq(&mut self, cq: roce_rnic::CqHandle, max: usize) -> Vec<roce_rnic::Wc> {
        self.prof.enter();
        let v = self.rnic.poll_cq(cq, max);
        if v.is_empty() {
            self.prof.lap(Stage::Idle);
            self.prof.count(Stage::Idle, 1);
        } else {
            self.prof.lap(Stage::Completion);
            self.prof.count(Stage::Completion, v.len() as u64);
            self.pacer.note(true);
        }
        v
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
    ///
    /// An idle engine asks the socket for one datagram at a time (the
    /// cheapest poll, and the fastest hand-over of a ping-pong's packet);
    /// once one arrives the next call asks for a whole batch, and keeps
    /// doing so while batches come back with more than one.
    pub fn receive(&mut self) -> Result<bool> {
        let mut now = 0;
        let mut work = false;
        self.prof.enter();
        for _ in 0..4 {
            let want = if !self.rx_streak {
                1
            } else if self.gro {
                self.batch.min(GRO_RECV_BATCH)
            } else {
                self.batch
            };
            let got = self
                .rx
                .recv_up_to(self.sock.as_raw_fd(), want)
                .map_err(|e| Error::Io {
                    context: format!("receiving on {}", self.local),
                    source: e,
                })?;
            self.rx_streak = got > 1 || (got == 1 && want == 1);
            if got == 0 {
                self.prof.lap(Stage::Idle);
                self.prof.count(Stage::Idle, 1);
                break;
            }
            self.prof.lap(Stage::RxSyscall);
            self.prof.count(Stage::RxSyscall, 1);
            if now == 0 {
                now = self.now();
            }
            if let Some(r) = &mut self.red {
                r.mark(self.sock.as_raw_fd(), &mut self.rx.meta[..got]);
            }
            for i in 0..got {
                self.on_datagram(now, i);
            }
            self.prof.lap_rx_packets();
            work = true;
            if got < want || want == 1 {
                break;
            }
        }
        self.pacer.note(work);
        Ok(work)
    }

    /// The transmit half: runs due timers and sends what the RNIC has
    /// (what posting a work request rings).
    pub fn doorbell(&mut self) -> Result<bool> {
        self.prof.enter();
        let now = self.now();
        let mut work = false;
        if self.rnic.poll_timeout().is_some_and(|t| t <= now) {
            self.rnic.handle_timeout(now);
            work = true;
        }
        let work = self.transmit(now)? | work;
        if work {
            self.pacer.note(true);
        }
        Ok(work)
    }

    fn on_datagram(&mut self, now: u64, i: usize) {
        let meta = self.rx.meta[i];
        if meta.ctrunc {
            self.stats.cmsg_truncated += 1;
        }
        if meta.truncated {
            self.stats.rx_packets += 1;
            self.stats.rx_bytes += meta.len as u64;
            self.stats.malformed += 1;
            return;
        }
        // A GRO buffer holds segments of `seg` bytes, the last maybe shorter.
        let seg = if meta.seg > 0 && meta.len > meta.seg {
            self.stats.rx_gro_buffers += 1;
            meta.seg
        } else {
            meta.len.max(1)
        };
        let mut off = 0;
        let mut k = 0u16;
        while off < meta.len || (off == 0 && meta.len == 0) {
            let end = (off + seg).min(meta.len);
            self.on_segment(now, i, &meta, off..end, k);
            off = end.max(1);
            k = k.wrapping_add(1);
        }
    }

    /// One datagram: segment `k` of receive `i` (0 when it came alone).
    fn on_segment(
        &mut self,
        now: u64,
        i: usize,
        meta: &RecvMeta,
        range: std::ops::Range<usize>,
        k: u16,
    ) {
        let Engine {
            rx,
            rnic,
            stats,
            pcap,
            deltas,
            prefixes,
            local,
            wall_origin_ns,
            prof,
            ..
        } = self;
        let buf = &rx.bufs[i][range];
        stats.rx_packets += 1;
        stats.rx_bytes += buf.len() as u64;
        // One packet in SAMPLE_EVERY has its stages timed (see `profile`).
        let timed = prof.sample();
        let t0 = if timed { roce_rnic::clock::ticks() } else { 0 };
        let parsed = packet::parse_segment(buf, meta.src, *local, k, deltas, prefixes);
        let t1 = if timed { roce_rnic::clock::ticks() } else { 0 };
        prof.count(Stage::Icrc, 1);
        if timed {
            rnic.mem_mut().time_copies(true);
        }
        if let Some(c) = pcap {
            // The IP header the ICRC was checked against (ID 0 when refused).
            let ident = parsed.as_ref().map_or(0, |(_, id)| *id);
            let frame = packet::ethernet_frame_id(meta.src, *local, meta.tos, buf, ident);
            if c.w.write(*wall_origin_ns + now, &frame).is_err() {
                stats.pcap_errors += 1;
            }
        }
        match parsed {
            Err(RxError::Malformed(_)) => stats.malformed += 1,
            Err(RxError::Icrc { .. }) => stats.icrc_errors += 1,
            Ok((p, _)) => {
                let ce = meta.tos & 3 == 3;
                if ce {
                    stats.ce_rx += 1;
                }
                rnic.handle_packet(now, meta.src, ce, &p.repr, PayloadRef::Bytes(p.payload));
            }
        }
        if timed {
            rnic.mem_mut().time_copies(false);
            let t2 = roce_rnic::clock::ticks();
            prof.sampled(t1.wrapping_sub(t0), t2.wrapping_sub(t1));
        }
        prof.count(Stage::Rnic, 1);
    }

    /// Whether the kernel delivers to `dst` over lo (GSO sends stay whole).
    fn is_local(&self, dst: SocketAddr) -> bool {
        dst.ip().is_loopback() || dst.ip() == self.local.ip()
    }

    /// Splits the pending queue into `sendmmsg` messages: runs of at least
    /// [`MIN_GSO_SEGMENTS`] datagrams with one destination (local), one TOS
    /// and one size (a shorter one may end a run) go as one GSO send;
    /// segment `k` of a run gets the ICRC for IP ID `k`, every other
    /// datagram the one for ID 0.
    fn plan_groups(&mut self) {
        self.groups.clear();
        let n = self.pending.len();
        let mut i = 0;
        while i < n && self.groups.len() < 1024 {
            let (dst, tos, size) = {
                let d = &self.pending[i];
                (d.dst, d.tos, d.len())
            };
            let mut count = 1;
            if self.gso_max_bytes > 0 && size > 0 && self.is_local(dst) {
                let mut bytes = size;
                while i + count < n && count < MAX_GSO_SEGMENTS {
                    let d = &self.pending[i + count];
                    let len = d.len();
                    if d.dst != dst
                        || d.tos != tos
                        || len > size
                        || len == 0
                        || bytes + len > self.gso_max_bytes
                    {
                        break;
                    }
                    bytes += len;
                    count += 1;
                    if len < size {
                        break;
                    }
                }
            }
            if count < MIN_GSO_SEGMENTS {
                // Two datagrams (a request and its ACK, a ping-pong's
                // answer) go faster apart: lo delivers the first while the
                // kernel still sends the second.
                count = 1;
            }
            for k in 0..count {
                self.pending[i + k].set_ident(k as u16, &mut self.deltas);
            }
            self.groups.push(count);
            i += count;
        }
        // Datagrams past the last message keep whatever ID they had; the
        // next plan sets it again before they go.
    }

    /// Moves the RNIC's packets to the socket until it has none or the
    /// socket is full. Returns true when anything was sent.
    fn transmit(&mut self, now: u64) -> Result<bool> {
        let mut work = false;
        self.faults.release(now, &mut self.pending);
        // With GSO one message carries up to 64 datagrams: build enough.
        let fill = if self.gso_max_bytes > 0 {
            self.batch * 16
        } else {
            self.batch
        };
        loop {
            let before_fill = self.pending.len() + self.acks.len();
            while self.pending.len() + self.acks.len() < fill {
                let Some(t) = self.rnic.poll_transmit(now) else {
                    break;
                };
                match packet::build(t, self.local) {
                    Ok(d) => {
                        if !self.faults.is_active() {
                            if d.is_ack() {
                                self.acks.push(d);
                            } else {
                                self.pending.push(d);
                            }
                        } else {
                            // Faults corrupt and hold bytes of the
                            // datagram's own, never the sender's memory.
                            let (local, mem) = (self.local, self.rnic.mem());
                            let prefixes = &mut self.prefixes;
                            if !self.faults.apply(now, d, &mut self.pending, |d| {
                                d.materialize(local, mem, prefixes)
                            }) {
                                self.stats.send_errors += 1;
                            }
                        }
                    }
                    Err(_) => self.stats.build_errors += 1,
                }
            }
            // Pure ACKs last: on loopback the kernel delivers each datagram
            // inside the sending system call, so an ACK sent first delays
            // the request or response behind it by a whole delivery. The
            // order between ACKs and other packets carries no meaning. The
            // RNIC gives a QP's responses (ACKs) before its requests, so
            // new ACKs wait aside and go behind the rest rather than being
            // sorted there (a datagram is ~150 bytes to move); only what
            // was already queued, or what the fault injector queued, may
            // need the sort.
            self.pending.append(&mut self.acks);
            let built = self.pending.len().saturating_sub(before_fill) as u64;
            if self.pending.is_empty() {
                // A doorbell that found nothing to send is an idle poll.
                if work {
                    self.prof.lap(Stage::Rnic);
                } else {
                    self.prof.lap(Stage::Idle);
                    self.prof.count(Stage::Idle, 1);
                }
                break;
            }
            self.prof.lap(Stage::Rnic);
            self.prof.count(Stage::Rnic, built);
            if !self.pending.is_sorted_by_key(|d| d.is_ack()) {
                self.pending.sort_by_key(|d| d.is_ack());
            }
            // Zero-copy payloads get their ICRC now, over the bytes the
            // kernel is about to copy; one whose buffer was freed since the
            // RNIC built it cannot be read and is dropped like a lost packet.
            let (local, mem) = (self.local, self.rnic.mem());
            let before = self.pending.len();
            let prefixes = &mut self.prefixes;
            self.pending.retain_mut(|d| d.seal(local, mem, prefixes));
            self.prof.lap(Stage::Icrc);
            self.prof.count(Stage::Icrc, before as u64);
            self.stats.send_errors += (before - self.pending.len()) as u64;
            if self.pending.is_empty() {
                continue;
            }
            self.plan_groups();
            self.prof.lap(Stage::Rnic);
            let sent = self.txb.send_grouped(
                self.sock.as_raw_fd(),
                &self.pending,
                &self.groups,
                self.rnic.mem(),
            );
            self.prof.lap(Stage::TxSyscall);
            self.prof.count(Stage::TxSyscall, 1);
            match sent {
                Ok(0) => break, // socket buffer full: retry on the next round
                Ok(n) => {
                    work = true;
                    let mut sent = 0;
                    for &g in &self.groups {
                        if sent >= n {
                            break;
                        }
                        if g > 1 {
                            self.stats.tx_gso_sends += 1;
                        }
                        sent += g;
                    }
                    for d in &self.pending[..n] {
                        self.stats.tx_packets += 1;
                        self.stats.tx_bytes += d.len() as u64;
                        if let Some(c) = &mut self.pcap {
                            let frame = packet::ethernet_frame_id(
                                self.local,
                                d.dst,
                                d.tos,
                                &d.to_vec(self.rnic.mem()),
                                d.ident,
                            );
                            if c.w.write(self.wall_origin_ns + now, &frame).is_err() {
                                self.stats.pcap_errors += 1;
                            }
                        }
                    }
                    if n == self.pending.len() {
                        self.pending.clear();
                    } else {
                        self.pending.drain(..n);
                    }
                }
                Err(e) if self.groups[0] > 1 => {
                    // The kernel refused a GSO send: send singly from now on.
                    self.gso_max_bytes = 0;
                    self.last_send_error = Some(format!(
                        "a UDP GSO send of {} datagrams to {} failed ({e}); GSO is now off",
                        self.groups[0], self.pending[0].dst
                    ));
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
        // What waits for the next round may see its memory change first.
        for d in &mut self.pending {
            d.unseal();
        }
        self.prof.lap(Stage::Rnic);
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

    /// The descriptors this engine blocks on, for threads that share it.
    pub fn waiter(&self) -> &Arc<Waiter> {
        &self.waiter
    }

    /// The progress mode and its knobs.
    pub fn poll_config(&self) -> PollConfig {
        self.pacer.config()
    }

    /// Times the engine blocked since it opened.
    pub fn sleeps(&self) -> u64 {
        self.pacer.sleeps
    }

    /// Decides, after the rounds so far, whether the caller may block now
    /// (in `mode`, the engine's own when `None`) and for how long (at most
    /// `limit`). When it may, the caller is counted as a sleeper: it must
    /// release the engine without ringing and call [`Waiter::sleep`] with
    /// the plan, then [`slept`](Self::slept) (see [`crate::poll`]).
    pub fn plan_sleep(
        &mut self,
        mode: Option<PollMode>,
        limit: Option<Duration>,
    ) -> Option<SleepPlan> {
        if !self
            .pacer
            .may_sleep(mode.unwrap_or(self.pacer.config().mode))
        {
            return None;
        }
        self.plan_wait(limit)
    }

    /// As [`plan_sleep`](Self::plan_sleep), whatever the rounds so far
    /// (an explicit wait such as [`Context::wait_for_work`](crate::Context::wait_for_work)).
    pub fn plan_wait(&mut self, limit: Option<Duration>) -> Option<SleepPlan> {
        let now = self.now();
        let timer = [self.rnic.poll_timeout(), self.faults.next_release()]
            .into_iter()
            .flatten()
            .min()
            .map(|t| t.saturating_sub(now));
        let timeout = self.pacer.timeout(timer, limit)?;
        Some(self.waiter.prepare(SleepPlan {
            timeout,
            // The last send found the socket buffer full.
            want_out: !self.pending.is_empty(),
            seen: 0,
        }))
    }

    /// Records that the caller slept (the next empty round may block again).
    pub fn slept(&mut self) {
        self.pacer.slept();
    }

    /// Blocks while the engine is idle, for an owner that drives it alone
    /// (no other thread can change it while this holds `&mut self`):
    /// nothing in busy mode or while the spin budget lasts; otherwise until
    /// a datagram arrives, a timer is due, or `limit`. True when it blocked.
    pub fn park(&mut self, limit: Option<Duration>) -> bool {
        let Some(plan) = self.plan_sleep(None, limit) else {
            return false;
        };
        self.waiter.sleep(plan);
        self.slept();
        true
    }
}

/// Most GRO buffers one `recvmmsg` takes. Each holds up to 64 KiB, so a
/// full batch of 32 is 2 MiB, a whole core's L2 on a machine like the one
/// issue 13 measured: the payload the kernel wrote would be evicted before
/// the ICRC reads it and the RNIC copies it into the MR.
const GRO_RECV_BATCH: usize = 8;

/// Fewest datagrams worth a GSO send (measured: a two-datagram GSO send made
/// `write_lat -s 8` about 0.5 µs slower on loopback than two datagrams).
const MIN_GSO_SEGMENTS: usize = 3;

/// Largest GSO send (bytes of UDP payload) lo passes whole: the device cuts
/// a GSO packet whose length, counting a 14-byte Ethernet header, reaches
/// its `gso_max_size` (`gso_features_check`); 65507 is UDP's own limit.
fn lo_gso_max_bytes() -> usize {
    let gso_max_size = std::fs::read_to_string("/sys/class/net/lo/gso_max_size")
        .ok()
        .and_then(|s| s.trim().parse::<usize>().ok())
        .unwrap_or(65536);
    gso_max_size
        .saturating_sub(14 + packet::IP_UDP_LEN + 1)
        .min(65507)
}

/// Sends a two-segment GSO datagram to the engine's own socket and checks
/// that it comes back whole, as one GRO buffer. Returns the GSO size limit,
/// or 0 (GSO off) when the kernel refuses the send or cuts it up (lo's UDP
/// segmentation offload turned off, for one).
fn probe_gso(fd: RawFd, local: SocketAddr, rx: &mut RecvBatch, txb: &mut SendBatch) -> usize {
    const SEG: usize = 8;
    let max = lo_gso_max_bytes();
    if max < 2 * SEG {
        return 0;
    }
    let probe = OutDatagram {
        dst: local,
        tos: 0,
        head: [0x5a; packet::MAX_HEAD],
        head_len: SEG,
        body: packet::Body::Owned(Vec::new()),
        tail: [0; 8],
        tail_len: 0,
        ident: 0,
        sealed: true,
    };
    match txb.send_grouped(fd, &[probe.clone(), probe], &[2], &RealMemory::new()) {
        Ok(2) => {}
        _ => return 0,
    }
    let deadline = Instant::now() + std::time::Duration::from_millis(200);
    while Instant::now() < deadline {
        sys::wait_readable(fd, 10_000_000);
        let Ok(got) = rx.recv(fd) else { return 0 };
        for m in &rx.meta[..got] {
            if m.src == local && m.len == 2 * SEG && m.seg == SEG {
                return max;
            }
            if m.src == local && m.len == SEG {
                // Cut up before the socket: drain the other half, no GSO.
                let _ = rx.recv(fd);
                return 0;
            }
        }
    }
    0
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
