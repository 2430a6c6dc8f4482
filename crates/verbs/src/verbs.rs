//! The libibverbs-shaped objects: [`Context`] (an opened device), [`Pd`],
//! [`Mr`], [`Cq`], and QPs built with [`QpBuilder`].
//!
//! Ownership follows rust-ibverbs: every child holds an `Arc` to its parent,
//! so a PD cannot be freed under its MRs and QPs, nor a CQ under its QPs;
//! each object releases its RNIC resource when the last handle drops. A QP
//! is brought up as a typestate: [`QpBuilder::build`] gives a
//! [`PreparedQp`] in INIT whose [`Endpoint`] goes to the peer, and
//! [`PreparedQp::connect`] takes the peer's endpoint through RTR to RTS and
//! returns the [`Qp`] that can be posted to.
//!
//! Shared receive queues ([`Pd::create_srq`], [`QpBuilder::srq`]) and UD
//! address handles ([`Pd::create_ah`]) are the RNIC's own (IBA 10.2.9.5,
//! 10.2.2); the RNIC's asynchronous events (an SRQ under its limit, a full
//! CQ) come out of [`Context::poll_event`] / [`Context::wait_event`].
//!
//! Memory belongs to the device: [`Pd::reg_mr`] allocates the region inside
//! the RNIC's memory and the application reads and writes it through the
//! [`Mr`]. That is the safe owned-buffer form; no user pointer is ever lent
//! to the device, so this layer has no `unsafe` at all.

use crate::cc::CcSettings;
use crate::endpoint::Endpoint;
use crate::engine::{Engine, EngineConfig, ROCE_PORT};
use crate::error::{Error, Result};
use crate::poll::{PollMode, Waiter};
use crate::stats::Stats;
use roce_rnic::{
    Access, AsyncEvent, Counters, CqHandle, Mtu, PdHandle, QpAttr, QpInitAttr, QpState, QpType,
    Recovery, RecvWr, SendWr, Sge, SrqHandle, UdDest, Wc,
};
use std::net::{IpAddr, SocketAddr};
use std::ops::{Deref, DerefMut};
use std::os::fd::{AsRawFd, RawFd};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// Opens devices. A "device" is one UDP socket on a local IPv4 or IPv6
/// address (its GID, [`crate::Gid`]).
pub struct Device;

impl Device {
    /// Opens a device on `ip` and the RoCEv2 port 4791.
    pub fn open(ip: impl Into<IpAddr>) -> Result<Context> {
        Self::open_with(
            SocketAddr::new(ip.into(), ROCE_PORT),
            EngineConfig::default(),
        )
    }

    /// Opens a device on `ip` and UDP 4791 or, when another stack already
    /// owns 4791 on that address (two stacks on one host, rxe beside us),
    /// on a free port — and says so on stderr, because nothing else would:
    /// the peer must be told the port, and a capture of it decodes as RoCEv2
    /// only when that port is named (`roce pcap decode --udp-port N`,
    /// Wireshark's Decode As). [`Context::fallback_port`] returns it too.
    pub fn open_or_fallback(ip: IpAddr, cfg: EngineConfig) -> Result<Context> {
        let want = SocketAddr::new(ip, ROCE_PORT);
        match Self::open_with(want, cfg.clone()) {
            Err(Error::AddrInUse(_)) => {
                let mut ctx = Self::open_with(SocketAddr::new(ip, 0), cfg)?;
                let port = ctx.local_addr().port();
                eprintln!(
                    "roce: note: UDP {want} is in use (another RoCE stack?); this device uses UDP port {port} instead. \
                     Its peers must be given this port, and captures decode with `roce pcap decode --udp-port {port}` \
                     (Wireshark: Decode As, UDP port {port})"
                );
                if let Some(s) = Arc::get_mut(&mut ctx.inner) {
                    s.fallback = true;
                }
                Ok(ctx)
            }
            r => r,
        }
    }

    /// Opens a device on any address and port (0 picks a free port), with settings.
    pub fn open_with(addr: SocketAddr, cfg: EngineConfig) -> Result<Context> {
        let mut engine = Engine::open(addr, cfg)?;
        let local = engine.local_addr();
        let fd = engine.fd();
        let waiter = engine.waiter().clone();
        let active_mtu = crate::sys::interface_mtu(local.ip()).map_or(Mtu::Mtu1024, Mtu::for_link);
        engine.rnic.set_port_mtu(active_mtu);
        Ok(Context {
            inner: Arc::new(Shared {
                engine: Mutex::new(engine),
                waiter,
                fd,
                local,
                active_mtu,
                fallback: false,
            }),
        })
    }
}

struct Shared {
    engine: Mutex<Engine>,
    /// Rung when the engine changes while a thread sleeps on it.
    waiter: Arc<Waiter>,
    fd: RawFd,
    local: SocketAddr,
    active_mtu: Mtu,
    /// Opened off 4791 because 4791 was taken ([`Device::open_or_fallback`]).
    fallback: bool,
}

/// An opened device (`ibv_context`). Cheap to clone; all clones share the engine.
#[derive(Clone)]
pub struct Context {
    inner: Arc<Shared>,
}

/// The engine, locked by a thread that may change it: releasing it wakes
/// the threads blocked on the engine, if any ([`crate::poll`]), so a post,
/// a QP modification or a flush from another thread is never slept past.
pub(crate) struct EngineGuard<'a> {
    g: MutexGuard<'a, Engine>,
    waiter: &'a Waiter,
}

impl Deref for EngineGuard<'_> {
    type Target = Engine;
    fn deref(&self) -> &Engine {
        &self.g
    }
}

impl DerefMut for EngineGuard<'_> {
    fn deref_mut(&mut self) -> &mut Engine {
        &mut self.g
    }
}

impl Drop for EngineGuard<'_> {
    fn drop(&mut self) {
        // Still under the lock: a sleeper counted itself in under it, so
        // it is either counted here or has not yet decided (and will see
        // this change in its own round).
        self.waiter.notify();
    }
}

impl Context {
    fn lock(&self) -> EngineGuard<'_> {
        EngineGuard {
            g: self.raw_lock(),
            waiter: &self.inner.waiter,
        }
    }

    /// The lock without the wake-up on release: for rounds that ring only
    /// when they did work, and for a sleeper's own release.
    fn raw_lock(&self) -> MutexGuard<'_, Engine> {
        // A panic while holding the lock leaves the RNIC consistent enough
        // to keep serving (every RNIC call is itself panic-free on input).
        self.inner.engine.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// One round of driving the engine, after blocking first when the
    /// rounds before found nothing for long enough in `mode` (the engine's
    /// own when `None`; never longer than `limit`). `round` returns whether
    /// it did work (then other sleepers are woken: it may have completed
    /// what they wait for) and its result. A set `stop` (checked after the
    /// sleep is planned, under the lock) skips the sleep.
    fn drive<R>(
        &self,
        mode: Option<PollMode>,
        limit: Option<Duration>,
        stop: Option<&AtomicBool>,
        round: impl FnOnce(&mut Engine) -> Result<(bool, R)>,
    ) -> Result<R> {
        let mut g = self.raw_lock();
        if let Some(plan) = g.plan_sleep(mode, limit) {
            if stop.is_some_and(|s| s.load(Ordering::SeqCst)) {
                // The stop's ring may have come before this sleeper was
                // counted in, and been drained by another: not asleep.
                self.inner.waiter.cancel(plan);
            } else {
                drop(g);
                self.inner.waiter.sleep(plan);
                g = self.raw_lock();
                g.slept();
            }
        }
        let (work, r) = round(&mut g)?;
        if work {
            self.inner.waiter.notify();
        }
        Ok(r)
    }

    /// The progress mode the device was opened with.
    pub fn poll_mode(&self) -> PollMode {
        self.raw_lock().poll_config().mode
    }

    /// Wakes every thread blocked on this device (and makes the next
    /// block return at once).
    pub fn wake(&self) {
        self.inner.waiter.wake();
    }

    /// How many threads are blocked (or about to block) on this device.
    ///
    /// Read without the engine lock on purpose: releasing that lock rings
    /// the sleepers awake ([`crate::poll`]), so asking through
    /// [`with_engine`](Self::with_engine) would end the very sleep it
    /// looks for.
    pub fn sleepers(&self) -> usize {
        self.inner.waiter.sleepers()
    }

    /// Also wakes a blocked engine when `fd` becomes readable, until the
    /// returned guard drops: for a caller that checks something besides
    /// the device between rounds (a control connection), so it need not
    /// wait for [`PollConfig::max_sleep`](crate::PollConfig::max_sleep).
    pub fn watch_fd(&self, fd: &impl AsRawFd) -> Result<FdWatch> {
        let fd = fd.as_raw_fd();
        self.inner.waiter.watch(fd).map_err(|e| Error::Io {
            context: format!("watching descriptor {fd} beside {}", self.inner.local),
            source: e,
        })?;
        Ok(FdWatch {
            waiter: self.inner.waiter.clone(),
            fd,
        })
    }

    /// Runs `f` with the engine locked: the escape hatch to the raw RNIC.
    pub fn with_engine<R>(&self, f: impl FnOnce(&mut Engine) -> R) -> R {
        f(&mut self.lock())
    }

    /// The local IP and UDP port.
    pub fn local_addr(&self) -> SocketAddr {
        self.inner.local
    }

    /// The UDP port this device fell back to because 4791 was taken
    /// ([`Device::open_or_fallback`]); `None` when it runs where it was asked.
    pub fn fallback_port(&self) -> Option<u16> {
        self.inner.fallback.then(|| self.inner.local.port())
    }

    /// The port's active MTU (`ibv_port_attr.active_mtu`): the largest path
    /// MTU that fits the IP MTU of the interface holding the device's
    /// address ([`Mtu::for_link`]; 4096 on loopback, 1024 on a 1500-byte
    /// Ethernet), or 1024 when no interface holds it.
    pub fn active_mtu(&self) -> Mtu {
        self.inner.active_mtu
    }

    pub fn alloc_pd(&self) -> Result<Pd> {
        let h = self.lock().rnic.alloc_pd();
        Ok(Pd(Arc::new(PdInner {
            ctx: self.clone(),
            h,
        })))
    }

    /// Creates a completion queue with room for `depth` entries.
    pub fn create_cq(&self, depth: u32) -> Result<Cq> {
        let h = self.lock().rnic.create_cq(depth)?;
        Ok(Cq(Arc::new(CqInner {
            ctx: self.clone(),
            h,
        })))
    }

    /// One round of engine I/O. True when anything happened. Outside busy
    /// mode, a call after rounds that found nothing for long enough first
    /// blocks until a datagram, a post from another thread or a timer
    /// ([`crate::poll`]).
    pub fn progress(&self) -> Result<bool> {
        self.drive(None, None, None, |e| {
            let w = e.progress()?;
            Ok((w, w))
        })
    }

    /// Only receives: see [`Engine::receive`]; blocks first as
    /// [`progress`](Self::progress) does.
    pub fn receive(&self) -> Result<bool> {
        self.drive(None, None, None, |e| {
            let w = e.receive()?;
            Ok((w, w))
        })
    }

    /// Only runs timers and sends: see [`Engine::doorbell`]. Never blocks.
    pub fn doorbell(&self) -> Result<bool> {
        let w = self.raw_lock().doorbell()?;
        if w {
            self.inner.waiter.notify();
        }
        Ok(w)
    }

    /// Blocks until a datagram arrives, a timer is due, another thread
    /// changes the device, or `max` passes (whatever the progress mode).
    pub fn wait_for_work(&self, max: Duration) {
        let mut g = self.raw_lock();
        if let Some(plan) = g.plan_wait(Some(max)) {
            drop(g);
            self.inner.waiter.sleep(plan);
            self.raw_lock().slept();
        }
    }

    /// Marks this fraction of ECN-capable packets sent from now on CE
    /// ([`crate::FaultConfig::ce_mark`]): a congestion episode that starts
    /// and ends within one run.
    pub fn set_ce_mark(&self, p: f64) {
        self.lock().set_ce_mark(p);
    }

    /// The device's UDP socket.
    pub fn fd(&self) -> RawFd {
        self.inner.fd
    }

    pub fn stats(&self) -> Stats {
        self.lock().stats()
    }

    /// Where the engine's time went, per stage (see [`crate::profile`]).
    pub fn profile(&self) -> crate::profile::StageProfile {
        self.lock().profile()
    }

    /// The RNIC's own counters, among them what UD drops silently by the
    /// spec (a wrong Q_Key, no receive posted) and so never reports as a
    /// completion: `qkey_violations`, `ud_no_recv_drops`.
    pub fn counters(&self) -> Counters {
        self.lock().rnic.counters()
    }

    /// The next asynchronous event, if one is queued (`ibv_get_async_event`
    /// without blocking). Does not drive the device.
    pub fn poll_event(&self) -> Option<AsyncEvent> {
        self.lock().rnic.poll_event()
    }

    /// Drives the device until an asynchronous event arrives or `timeout`
    /// passes (`ibv_get_async_event`). Events are not completions: an SRQ
    /// that fell under its limit, a CQ that overflowed.
    pub fn wait_event(&self, timeout: Duration) -> Result<AsyncEvent> {
        let start = Instant::now();
        loop {
            let work = {
                let mut e = self.lock();
                if let Some(ev) = e.rnic.poll_event() {
                    return Ok(ev);
                }
                e.progress()?
            };
            let elapsed = start.elapsed();
            if elapsed >= timeout {
                return Err(Error::Timeout(timeout));
            }
            if !work {
                self.wait_for_work((timeout - elapsed).min(Duration::from_millis(1)));
            }
        }
    }

    /// Whether `other` is this same device (objects of one device cannot be
    /// given to another: their handles would name the wrong RNIC's objects).
    fn same_device(&self, other: &Context) -> bool {
        Arc::ptr_eq(&self.inner, &other.inner)
    }

    /// Why the socket last refused a datagram, if it did.
    pub fn last_send_error(&self) -> Option<String> {
        self.lock().last_send_error().map(str::to_string)
    }

    pub fn flush_pcap(&self) -> Result<()> {
        self.lock().flush_pcap()
    }

    /// Starts a thread that drives this device until the returned guard
    /// drops: what a passive side (the target of WRITE/READ/ATOMIC, which
    /// never polls a CQ) needs. `busy` spins like a hardware poller;
    /// without it the thread follows the device's progress mode, adaptive
    /// when that is busy (spin, then block in `epoll` when idle).
    pub fn spawn_progress(&self, busy: bool) -> ProgressThread {
        let stop = Arc::new(AtomicBool::new(false));
        let ctx = self.clone();
        let s = stop.clone();
        let mode = if busy {
            Some(PollMode::Busy)
        } else if self.poll_mode() == PollMode::Busy {
            Some(PollMode::Adaptive)
        } else {
            None
        };
        let handle = std::thread::Builder::new()
            .name("roce-progress".into())
            .spawn(move || {
                while !s.load(Ordering::SeqCst) {
                    let r = ctx.drive(mode, None, Some(&s), |e| {
                        let w = e.progress()?;
                        Ok((w, w))
                    });
                    match r {
                        Ok(true) => {}
                        Ok(false) => std::hint::spin_loop(),
                        // The socket failed: there is nothing left to drive.
                        Err(_) => break,
                    }
                }
            })
            .ok();
        ProgressThread {
            stop,
            handle,
            waiter: self.inner.waiter.clone(),
        }
    }
}

/// Drives a device in the background; stops and joins on drop.
pub struct ProgressThread {
    stop: Arc<AtomicBool>,
    handle: Option<JoinHandle<()>>,
    waiter: Arc<Waiter>,
}

impl Drop for ProgressThread {
    fn drop(&mut self) {
        // Before the ring: a thread that counts itself in as a sleeper
        // after it sees the flag (`drive`'s check under the lock).
        self.stop.store(true, Ordering::SeqCst);
        // A thread blocked in epoll would otherwise sleep out its timeout.
        self.waiter.wake();
        if let Some(h) = self.handle.take() {
            let _ = h.join();
        }
    }
}

/// A descriptor that wakes a blocked device until this drops
/// ([`Context::watch_fd`]).
pub struct FdWatch {
    waiter: Arc<Waiter>,
    fd: RawFd,
}

impl Drop for FdWatch {
    fn drop(&mut self) {
        // Fails only when the descriptor closed first (epoll forgot it).
        let _ = self.waiter.unwatch(self.fd);
    }
}

struct PdInner {
    ctx: Context,
    h: PdHandle,
}

impl Drop for PdInner {
    fn drop(&mut self) {
        let _ = self.ctx.lock().rnic.dealloc_pd(self.h);
    }
}

/// A protection domain (`ibv_pd`).
#[derive(Clone)]
pub struct Pd(Arc<PdInner>);

impl Pd {
    pub fn context(&self) -> &Context {
        &self.0.ctx
    }

    /// Allocates `len` zeroed bytes of device memory and registers them
    /// (`ibv_reg_mr` on an owned buffer).
    pub fn reg_mr(&self, len: usize, access: Access) -> Result<Mr> {
        let mut e = self.0.ctx.lock();
        let addr = e.rnic.mem_mut().alloc(len);
        match e.rnic.reg_mr(self.0.h, addr, len as u64, access) {
            Ok(mr) => {
                drop(e);
                Ok(Mr(Arc::new(MrInner {
                    pd: self.clone(),
                    mr,
                    len,
                })))
            }
            Err(err) => {
                e.rnic.mem_mut().free(addr);
                Err(err.into())
            }
        }
    }

    /// A QP builder with `cq` for both queues.
    pub fn qp_builder<'a>(&'a self, cq: &'a Cq) -> QpBuilder<'a> {
        QpBuilder::new(self, cq)
    }

    /// Creates a shared receive queue of `max_wr` receives with up to
    /// `max_sge` SGEs each (`ibv_create_srq`). QPs built with
    /// [`QpBuilder::srq`] take their receives from it.
    pub fn create_srq(&self, max_wr: u32, max_sge: u32) -> Result<Srq> {
        let h = self
            .0
            .ctx
            .lock()
            .rnic
            .create_srq(self.0.h, max_wr, max_sge)?;
        Ok(Srq(Arc::new(SrqInner {
            pd: self.clone(),
            h,
            max_wr,
        })))
    }

    /// An address handle for UD sends to `addr` (`ibv_create_ah`). RoCEv2
    /// addresses a port by its GID, which is the IP address; the UDP port
    /// is ours to carry because a device here may not own 4791 (two on one
    /// host). Refuses an address of the other IP family than the device's
    /// (its packets could not be built) and one that cannot be reached.
    pub fn create_ah(&self, addr: SocketAddr) -> Result<Ah> {
        let local = self.0.ctx.local_addr();
        if !same_family(local.ip(), addr.ip()) {
            return Err(Error::AddressFamily {
                local,
                remote: addr,
            });
        }
        if addr.port() == 0 || addr.ip().is_unspecified() || addr.ip().is_multicast() {
            return Err(Error::BadEndpoint(format!(
                "address handle {addr} cannot be reached"
            )));
        }
        Ok(Ah {
            _pd: self.clone(),
            addr,
        })
    }
}

/// Whether a device on `local` can reach `remote`. An IPv4-mapped IPv6
/// address (`::ffff:a.b.c.d`) is an IPv4 peer, as its GID says: an IPv6
/// device's socket takes IPv6 only, and the ICRC of an IPv4 packet covers
/// an IPv4 header.
fn same_family(local: IpAddr, remote: IpAddr) -> bool {
    let v4 = |ip: IpAddr| match ip {
        IpAddr::V4(_) => true,
        IpAddr::V6(a) => a.to_ipv4_mapped().is_some(),
    };
    v4(local) == v4(remote)
}

/// A UD address handle (`ibv_ah`): where a UD send goes.
#[derive(Clone)]
pub struct Ah {
    _pd: Pd,
    addr: SocketAddr,
}

impl Ah {
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// The destination of a UD send through this handle: the remote QP and
    /// the Q_Key it accepts (a Q_Key with the high bit set means "this QP's
    /// own Q_Key", IBA 10.2.5).
    pub fn dest(&self, remote_qpn: u32, remote_qkey: u32) -> UdDest {
        UdDest {
            addr: self.addr,
            remote_qpn,
            remote_qkey,
        }
    }
}

struct SrqInner {
    pd: Pd,
    h: SrqHandle,
    max_wr: u32,
}

impl Drop for SrqInner {
    fn drop(&mut self) {
        // QPs hold the SRQ, so none uses it any more.
        let _ = self.pd.0.ctx.lock().rnic.destroy_srq(self.h);
    }
}

/// A shared receive queue (`ibv_srq`): one pool of receives for many QPs,
/// so a server with many peers needs receives for its traffic, not for
/// each peer's worst case.
#[derive(Clone)]
pub struct Srq(Arc<SrqInner>);

impl Srq {
    /// The RNIC's handle (what [`AsyncEvent::SrqLimitReached`] names).
    pub fn handle(&self) -> SrqHandle {
        self.0.h
    }

    pub fn max_wr(&self) -> u32 {
        self.0.max_wr
    }

    /// Receives waiting in the queue.
    pub fn len(&self) -> usize {
        self.0.pd.0.ctx.lock().rnic.srq_len(self.0.h).unwrap_or(0)
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// `ibv_post_srq_recv` of one receive.
    pub fn post_srq_recv(&self, wr: &RecvWr) -> Result<()> {
        self.post_srq_recv_batch(std::slice::from_ref(wr))
    }

    /// `ibv_post_srq_recv` of a list (stops at the first bad one; the error
    /// says which).
    pub fn post_srq_recv_batch(&self, wrs: &[RecvWr]) -> Result<()> {
        Ok(self.0.pd.0.ctx.lock().rnic.post_srq_recv(self.0.h, wrs)?)
    }

    /// Arms the limit event (`ibv_modify_srq` with `IBV_SRQ_LIMIT`): when
    /// fewer than `limit` receives remain, the device raises
    /// [`AsyncEvent::SrqLimitReached`] once and disarms, so the application
    /// can refill before senders meet RNR. 0 disarms. A limit above the
    /// queue's size could never be met the way it was meant and is refused.
    pub fn arm_limit(&self, limit: u32) -> Result<()> {
        if limit > self.0.max_wr {
            return Err(Error::SrqLimit {
                limit,
                max_wr: self.0.max_wr,
            });
        }
        Ok(self.0.pd.0.ctx.lock().rnic.arm_srq_limit(self.0.h, limit)?)
    }
}

struct MrInner {
    pd: Pd,
    mr: roce_rnic::Mr,
    len: usize,
}

impl Drop for MrInner {
    fn drop(&mut self) {
        let mut e = self.pd.0.ctx.lock();
        let _ = e.rnic.dereg_mr(self.mr.lkey);
        e.rnic.mem_mut().free(self.mr.addr);
    }
}

/// A registered memory region (`ibv_mr`) over device-owned memory.
#[derive(Clone)]
pub struct Mr(Arc<MrInner>);

impl Mr {
    pub fn addr(&self) -> u64 {
        self.0.mr.addr
    }
    pub fn len(&self) -> usize {
        self.0.len
    }
    pub fn is_empty(&self) -> bool {
        self.0.len == 0
    }
    pub fn lkey(&self) -> u32 {
        self.0.mr.lkey
    }
    pub fn rkey(&self) -> u32 {
        self.0.mr.rkey
    }

    fn check(&self, off: usize, len: usize) -> Result<u64> {
        match off.checked_add(len) {
            Some(end) if end <= self.0.len => Ok(self.addr() + off as u64),
            _ => Err(Error::OutOfRegion {
                off,
                len,
                region: self.0.len,
            }),
        }
    }

    /// A scatter/gather element over `[off, off+len)` of this region.
    pub fn sge(&self, off: usize, len: u32) -> Sge {
        Sge {
            addr: self.addr() + off as u64,
            length: len,
            lkey: self.lkey(),
        }
    }

    /// Writes `data` at `off` (the application filling its buffer).
    pub fn write(&self, off: usize, data: &[u8]) -> Result<()> {
        let addr = self.check(off, data.len())?;
        self.0.pd.0.ctx.lock().rnic.mem_mut().set(addr, data)?;
        Ok(())
    }

    /// Reads `len` bytes at `off`.
    pub fn read(&self, off: usize, len: usize) -> Result<Vec<u8>> {
        let addr = self.check(off, len)?;
        Ok(self.0.pd.0.ctx.lock().rnic.mem().get(addr, len)?.to_vec())
    }

    /// Calls `f` with `[off, off+len)` borrowed (no copy), the device locked.
    pub fn with_bytes<R>(&self, off: usize, len: usize, f: impl FnOnce(&[u8]) -> R) -> Result<R> {
        let addr = self.check(off, len)?;
        let e = self.0.pd.0.ctx.lock();
        Ok(f(e.rnic.mem().get(addr, len)?))
    }

    /// The byte at `off` (cheap polling of a flag byte, as perftest's latency tests do).
    pub fn byte(&self, off: usize) -> Result<u8> {
        self.with_bytes(off, 1, |b| b[0])
    }

    /// The little-endian 64-bit word at `off` (the target of an atomic).
    pub fn read_u64(&self, off: usize) -> Result<u64> {
        self.with_bytes(off, 8, |b| {
            let mut w = [0u8; 8];
            w.copy_from_slice(b);
            u64::from_le_bytes(w)
        })
    }
}

struct CqInner {
    ctx: Context,
    h: CqHandle,
}

impl Drop for CqInner {
    fn drop(&mut self) {
        let _ = self.ctx.lock().rnic.destroy_cq(self.h);
    }
}

/// A completion queue (`ibv_cq`). Polling it also drives the device.
#[derive(Clone)]
pub struct Cq(Arc<CqInner>);

impl Cq {
    pub fn context(&self) -> &Context {
        &self.0.ctx
    }

    /// Drives the device once and returns up to `max` completions
    /// (`ibv_poll_cq`). Outside busy mode, a call after rounds that found
    /// nothing for long enough first blocks until there may be something
    /// ([`Context::progress`]).
    pub fn poll(&self, max: usize) -> Result<Vec<Wc>> {
        self.0.ctx.drive(None, None, None, |e| {
            let w = e.progress()?;
            let v = e.poll_cq(self.0.h, max);
            Ok((w || !v.is_empty(), v))
        })
    }

    /// Returns up to `max` completions already queued, without driving the device.
    pub fn poll_only(&self, max: usize) -> Vec<Wc> {
        self.0.ctx.lock().poll_cq(self.0.h, max)
    }

    /// Waits for `n` completions or until `timeout`, driving the device
    /// in its progress mode: adaptive spins briefly, then blocks in `epoll`
    /// until a datagram, a post from another thread or a timer; busy spins.
    pub fn wait(&self, n: usize, timeout: Duration) -> Result<Vec<Wc>> {
        let start = Instant::now();
        let mut out = Vec::with_capacity(n);
        while out.len() < n {
            let left = timeout.saturating_sub(start.elapsed());
            let want = n - out.len();
            let got = self.0.ctx.drive(None, Some(left), None, |e| {
                let w = e.progress()?;
                let v = e.poll_cq(self.0.h, want);
                Ok((w || !v.is_empty(), v))
            })?;
            let some = !got.is_empty();
            out.extend(got);
            if out.len() >= n {
                break;
            }
            if start.elapsed() >= timeout {
                return Err(Error::Timeout(timeout));
            }
            if !some {
                std::hint::spin_loop();
            }
        }
        Ok(out)
    }
}

/// Builds a QP (`ibv_create_qp` plus the RESET→INIT step).
pub struct QpBuilder<'a> {
    pd: &'a Pd,
    send_cq: &'a Cq,
    recv_cq: &'a Cq,
    qp_type: QpType,
    max_send_wr: u32,
    max_recv_wr: u32,
    max_sge: u32,
    max_inline_data: u32,
    sq_sig_all: bool,
    access: Access,
    mtu: Mtu,
    psn: Option<u32>,
    timeout: u8,
    retry_cnt: u8,
    rnr_retry: u8,
    min_rnr_timer: u8,
    max_rd_atomic: u8,
    qkey: u32,
    srq: Option<&'a Srq>,
    recovery: Recovery,
    cc: Option<CcSettings>,
}

impl<'a> QpBuilder<'a> {
    /// An RC QP with perftest's defaults (128-deep queues, timeout 14, retry 7).
    pub fn new(pd: &'a Pd, cq: &'a Cq) -> Self {
        QpBuilder {
            pd,
            send_cq: cq,
            recv_cq: cq,
            qp_type: QpType::Rc,
            max_send_wr: 128,
            max_recv_wr: 128,
            max_sge: 4,
            max_inline_data: 64,
            sq_sig_all: false,
            access: Access::ALL,
            mtu: Mtu::Mtu1024,
            psn: None,
            timeout: 14,
            retry_cnt: 7,
            rnr_retry: 7,
            min_rnr_timer: 12,
            // A quarter of the responder's 16 READ/ATOMIC resources: the RNIC counts
            // replays of duplicate READs against the same limit, so a full
            // window plus retransmissions could be refused as an invalid
            // request (reported to the RNIC's owner).
            max_rd_atomic: 4,
            qkey: 0x1111_1111,
            srq: None,
            recovery: Recovery::GoBackN,
            cc: None,
        }
    }
    /// Loss recovery (RC): go-back-N (the default, what every RoCE NIC
    /// speaks) or IRN's selective repeat (Mittal et al., SIGCOMM 2018).
    /// Both ends of a connection must choose the same.
    pub fn recovery(mut self, r: Recovery) -> Self {
        self.recovery = r;
        self
    }
    /// Takes receives from `srq` instead of a receive queue of its own
    /// (`ibv_qp_init_attr.srq`); the QP's `post_recv` is then refused.
    pub fn srq(mut self, srq: &'a Srq) -> Self {
        self.srq = Some(srq);
        self
    }
    /// This QP's congestion control, instead of the context's default
    /// ([`crate::EngineConfig::cc`]).
    pub fn cc(mut self, cc: CcSettings) -> Self {
        self.cc = Some(cc);
        self
    }
    pub fn recv_cq(mut self, cq: &'a Cq) -> Self {
        self.recv_cq = cq;
        self
    }
    pub fn qp_type(mut self, t: QpType) -> Self {
        self.qp_type = t;
        self
    }
    pub fn max_send_wr(mut self, n: u32) -> Self {
        self.max_send_wr = n;
        self
    }
    pub fn max_recv_wr(mut self, n: u32) -> Self {
        self.max_recv_wr = n;
        self
    }
    pub fn max_sge(mut self, n: u32) -> Self {
        self.max_sge = n;
        self
    }
    pub fn max_inline_data(mut self, n: u32) -> Self {
        self.max_inline_data = n;
        self
    }
    pub fn sq_sig_all(mut self, v: bool) -> Self {
        self.sq_sig_all = v;
        self
    }
    /// Remote access rights the QP grants (`qp_access_flags`).
    pub fn access(mut self, a: Access) -> Self {
        self.access = a;
        self
    }
    pub fn mtu(mut self, m: Mtu) -> Self {
        self.mtu = m;
        self
    }
    /// The first PSN this side sends (random by default).
    pub fn psn(mut self, p: u32) -> Self {
        self.psn = Some(p & 0xff_ffff);
        self
    }
    /// Retransmission timeout exponent: 4.096 µs × 2^t.
    pub fn timeout(mut self, t: u8) -> Self {
        self.timeout = t;
        self
    }
    pub fn retry_cnt(mut self, n: u8) -> Self {
        self.retry_cnt = n;
        self
    }
    pub fn rnr_retry(mut self, n: u8) -> Self {
        self.rnr_retry = n;
        self
    }
    pub fn min_rnr_timer(mut self, n: u8) -> Self {
        self.min_rnr_timer = n;
        self
    }
    pub fn max_rd_atomic(mut self, n: u8) -> Self {
        self.max_rd_atomic = n;
        self
    }
    pub fn qkey(mut self, q: u32) -> Self {
        self.qkey = q;
        self
    }

    /// Creates the QP and moves it to INIT.
    pub fn build(self) -> Result<PreparedQp> {
        let ctx = self.pd.context().clone();
        let foreign = [
            ("send CQ", self.send_cq.context()),
            ("receive CQ", self.recv_cq.context()),
        ]
        .into_iter()
        .chain(self.srq.map(|s| ("SRQ", s.0.pd.context())))
        .find(|(_, c)| !ctx.same_device(c));
        if let Some((what, _)) = foreign {
            return Err(Error::WrongDevice(what));
        }
        let mut init = QpInitAttr::new(
            self.qp_type,
            self.pd.0.h,
            self.send_cq.0.h,
            self.recv_cq.0.h,
        );
        init.max_send_wr = self.max_send_wr;
        init.max_recv_wr = self.max_recv_wr;
        init.max_send_sge = self.max_sge;
        init.max_recv_sge = self.max_sge;
        init.max_inline_data = self.max_inline_data;
        init.sq_sig_all = self.sq_sig_all;
        init.recovery = self.recovery;
        init.srq = self.srq.map(|s| s.0.h);
        let mut e = ctx.lock();
        let cc = self.cc.unwrap_or(e.cc).controller(self.mtu.bytes() as u64);
        let qpn = e.rnic.create_qp_with_cc(init, cc)?;
        let attr = match self.qp_type {
            QpType::Rc => QpAttr::init(self.access),
            QpType::Ud => QpAttr::init_ud(self.qkey),
        };
        if let Err(err) = e.rnic.modify_qp(qpn, QpState::Init, &attr) {
            let _ = e.rnic.destroy_qp(qpn);
            return Err(err.into());
        }
        e.share_window();
        let psn = self.psn.unwrap_or_else(|| {
            // Like perftest's lrand48() & 0xffffff: distinct runs, and two
            // processes started together (a ping-pong's two sides), use
            // distinct PSNs: the wall clock and the process id go into a
            // SplitMix64 finalizer with the QPN.
            let wall = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_nanos() as u64);
            let mut t = wall
                ^ e.now()
                ^ (u64::from(std::process::id()) << 40)
                ^ u64::from(qpn).wrapping_mul(0x9e37_79b9_7f4a_7c15);
            t = (t ^ (t >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
            t = (t ^ (t >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
            (t ^ (t >> 31)) as u32 & 0xff_ffff
        });
        drop(e);
        Ok(PreparedQp {
            qp: Qp {
                pd: self.pd.clone(),
                _cqs: (self.send_cq.clone(), self.recv_cq.clone()),
                srq: self.srq.cloned(),
                qpn,
                qp_type: self.qp_type,
                // UD is never segmented: its limit is the port's MTU.
                mtu: match self.qp_type {
                    QpType::Rc => self.mtu,
                    QpType::Ud => ctx.active_mtu(),
                },
                psn,
                timeout: self.timeout,
                retry_cnt: self.retry_cnt,
                rnr_retry: self.rnr_retry,
                min_rnr_timer: self.min_rnr_timer,
                max_rd_atomic: self.max_rd_atomic,
            },
        })
    }
}

/// A QP in INIT: tell the peer its [`endpoint`](Self::endpoint), then [`connect`](Self::connect).
pub struct PreparedQp {
    qp: Qp,
}

impl PreparedQp {
    pub fn qpn(&self) -> u32 {
        self.qp.qpn
    }

    /// This QP's endpoint, exposing no memory.
    pub fn endpoint(&self) -> Endpoint {
        self.qp.endpoint(None)
    }

    /// This QP's endpoint, exposing `mr` (its address, length and rkey) to the peer.
    pub fn endpoint_with(&self, mr: &Mr) -> Endpoint {
        self.qp.endpoint(Some(mr))
    }

    /// Posts receives before the QP is connected (allowed from INIT, and
    /// needed so the peer's first SEND finds one).
    pub fn post_recv(&self, wr: &RecvWr) -> Result<()> {
        self.qp.post_recv(wr)
    }

    /// A list of receives before the QP is connected.
    pub fn post_recv_batch(&self, wrs: &[RecvWr]) -> Result<()> {
        self.qp.post_recv_batch(wrs)
    }

    /// INIT→RTR→RTS towards `remote` (RC). Refuses an endpoint whose path
    /// MTU differs from this QP's.
    pub fn connect(self, remote: &Endpoint) -> Result<Qp> {
        let q = &self.qp;
        if q.qp_type != QpType::Rc {
            return Err(Error::BadEndpoint(
                "connect() is for RC QPs; use activate() for UD".into(),
            ));
        }
        let rmtu = Mtu::from_bytes(remote.mtu).ok_or_else(|| {
            Error::BadEndpoint(format!(
                "{} is not a path MTU (256, 512, 1024, 2048 or 4096)",
                remote.mtu
            ))
        })?;
        if rmtu != q.mtu {
            return Err(Error::MtuMismatch {
                local: q.mtu.bytes(),
                remote: remote.mtu,
            });
        }
        if remote.qpn > 0xff_ffff || remote.psn > 0xff_ffff {
            return Err(Error::BadEndpoint(format!(
                "QPN {:#x} and PSN {:#x} must fit 24 bits",
                remote.qpn, remote.psn
            )));
        }
        let local = q.pd.context().local_addr();
        if !same_family(local.ip(), remote.ip) {
            return Err(Error::AddressFamily {
                local,
                remote: remote.socket_addr(),
            });
        }
        if remote.udp_port == 0 || remote.ip.is_unspecified() {
            return Err(Error::BadEndpoint(format!(
                "address {}:{} cannot be reached",
                remote.ip, remote.udp_port
            )));
        }
        let ctx = q.pd.context();
        let mut e = ctx.lock();
        let mut rtr = QpAttr::rtr(remote.socket_addr(), remote.qpn, remote.psn, q.mtu);
        rtr.min_rnr_timer = Some(q.min_rnr_timer);
        e.rnic.modify_qp(q.qpn, QpState::Rtr, &rtr)?;
        let mut rts = QpAttr::rts(q.psn);
        rts.timeout = Some(q.timeout);
        rts.retry_cnt = Some(q.retry_cnt);
        rts.rnr_retry = Some(q.rnr_retry);
        rts.max_rd_atomic = Some(q.max_rd_atomic);
        e.rnic.modify_qp(q.qpn, QpState::Rts, &rts)?;
        drop(e);
        Ok(self.qp)
    }

    /// INIT→RTR→RTS for a UD QP (no peer: each send names its destination).
    pub fn activate(self) -> Result<Qp> {
        let q = &self.qp;
        if q.qp_type != QpType::Ud {
            return Err(Error::BadEndpoint(
                "activate() is for UD QPs; use connect() for RC".into(),
            ));
        }
        let mut e = q.pd.context().lock();
        e.rnic.modify_qp(q.qpn, QpState::Rtr, &QpAttr::default())?;
        e.rnic.modify_qp(
            q.qpn,
            QpState::Rts,
            &QpAttr {
                sq_psn: Some(q.psn),
                ..Default::default()
            },
        )?;
        drop(e);
        Ok(self.qp)
    }
}

/// A queue pair ready for work requests (`ibv_qp`).
pub struct Qp {
    pd: Pd,
    _cqs: (Cq, Cq),
    srq: Option<Srq>,
    qpn: u32,
    qp_type: QpType,
    mtu: Mtu,
    psn: u32,
    timeout: u8,
    retry_cnt: u8,
    rnr_retry: u8,
    min_rnr_timer: u8,
    max_rd_atomic: u8,
}

impl Drop for Qp {
    fn drop(&mut self) {
        let mut e = self.pd.context().lock();
        let _ = e.rnic.destroy_qp(self.qpn);
        e.share_window();
    }
}

impl Qp {
    pub fn qpn(&self) -> u32 {
        self.qpn
    }
    pub fn mtu(&self) -> Mtu {
        self.mtu
    }
    pub fn context(&self) -> &Context {
        self.pd.context()
    }
    /// What this QP's congestion control has done: CNP-driven and other
    /// rate cuts, the current and the lowest rate.
    pub fn cc_stats(&self) -> Option<roce_rnic::CcStats> {
        self.pd.context().lock().rnic.cc_stats(self.qpn)
    }
    /// The SRQ this QP takes its receives from, if any.
    pub fn srq(&self) -> Option<&Srq> {
        self.srq.as_ref()
    }

    fn endpoint(&self, mr: Option<&Mr>) -> Endpoint {
        let local = self.pd.context().local_addr();
        Endpoint {
            ip: local.ip(),
            udp_port: local.port(),
            qpn: self.qpn,
            psn: self.psn,
            mtu: self.mtu.bytes(),
            addr: mr.map_or(0, Mr::addr),
            len: mr.map_or(0, |m| m.len() as u64),
            rkey: mr.map_or(0, Mr::rkey),
        }
    }

    pub fn state(&self) -> Result<QpState> {
        Ok(self.pd.context().lock().rnic.qp_state(self.qpn)?)
    }

    /// `ibv_modify_qp` with explicit attributes (e.g. to ERR to flush).
    pub fn modify(&self, to: QpState, attr: &QpAttr) -> Result<()> {
        Ok(self
            .pd
            .context()
            .lock()
            .rnic
            .modify_qp(self.qpn, to, attr)?)
    }

    /// Posts one send work request and rings the doorbell.
    pub fn post_send(&self, wr: &SendWr) -> Result<()> {
        self.post_send_batch(std::slice::from_ref(wr))
    }

    /// Posts a list of send work requests (stops at the first bad one;
    /// the error says which) and rings the doorbell once.
    pub fn post_send_batch(&self, wrs: &[SendWr]) -> Result<()> {
        let mut e = self.pd.context().lock();
        let r = e.post_send(self.qpn, wrs);
        // The doorbell: start sending now rather than on the next poll.
        e.doorbell()?;
        Ok(r?)
    }

    pub fn post_recv(&self, wr: &RecvWr) -> Result<()> {
        self.post_recv_batch(std::slice::from_ref(wr))
    }

    pub fn post_recv_batch(&self, wrs: &[RecvWr]) -> Result<()> {
        Ok(self.pd.context().lock().rnic.post_recv(self.qpn, wrs)?)
    }

    /// A one-paragraph dump of the QP's transport state, for debugging.
    pub fn debug(&self) -> String {
        self.pd.context().lock().rnic.debug_qp(self.qpn)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::{MIN_SHARED_WINDOW, window_for};

    fn window(ctx: &Context) -> u32 {
        ctx.lock().rnic.config().max_outstanding_pkts
    }

    fn rc(pd: &Pd, cq: &Cq) -> PreparedQp {
        pd.qp_builder(cq).build().unwrap()
    }

    #[test]
    fn the_socket_window_is_shared_among_the_rc_qps_as_they_come_and_go() {
        let ctx =
            Device::open_with("127.0.0.1:0".parse().unwrap(), EngineConfig::default()).unwrap();
        let whole = window_for(ctx.lock().sock_recv_buffer());
        assert_eq!(window(&ctx), whole);
        let pd = ctx.alloc_pd().unwrap();
        let cq = ctx.create_cq(64).unwrap();
        let a = rc(&pd, &cq);
        assert_eq!(window(&ctx), whole);
        let more: Vec<PreparedQp> = (0..3).map(|_| rc(&pd, &cq)).collect();
        assert_eq!(window(&ctx), (whole / 4).max(MIN_SHARED_WINDOW.min(whole)));
        // A UD QP sends no window's worth: it takes no share.
        let ud = pd.qp_builder(&cq).qp_type(QpType::Ud).build().unwrap();
        assert_eq!(window(&ctx), (whole / 4).max(MIN_SHARED_WINDOW.min(whole)));
        drop(more);
        drop(ud);
        assert_eq!(window(&ctx), whole);
        drop(a);
        assert_eq!(window(&ctx), whole);
    }

    #[test]
    fn a_window_the_application_chose_is_left_alone() {
        let mut cfg = EngineConfig::default();
        cfg.rnic.max_outstanding_pkts = 100;
        let ctx = Device::open_with("127.0.0.1:0".parse().unwrap(), cfg).unwrap();
        let pd = ctx.alloc_pd().unwrap();
        let cq = ctx.create_cq(64).unwrap();
        let _qps: Vec<PreparedQp> = (0..4).map(|_| rc(&pd, &cq)).collect();
        assert_eq!(window(&ctx), 100);
    }
}
