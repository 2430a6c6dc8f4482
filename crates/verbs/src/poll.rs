//! How an engine waits for work: spinning, blocking, or spinning then
//! blocking.
//!
//! A user-space verbs provider busy-polls: the fastest hand-over of a
//! packet, and the right thing on a core of its own (perftest's latency
//! tests do it). On a shared CPU it is the wrong thing: two spinning sides
//! of a loopback test and one application thread on two cores leave each
//! a fraction of a core, most of it spent finding nothing. The kernel's
//! busy-poll sockets (`SO_BUSY_POLL`, `net.core.busy_poll`: spin for a
//! budget of microseconds, then sleep) and DPDK's interrupt mode
//! (`rte_eth_dev_rx_intr_enable` in `l3fwd-power`: after a run of empty
//! polls, arm the interrupt and `epoll_wait` on it) answer it the same
//! way, and so does [`PollMode::Adaptive`]: spin while work arrives, then
//! after [`PollConfig::spin`] without any, block in `epoll` on
//!
//! - the engine's UDP socket (a datagram arrived; `EPOLLOUT` too while
//!   sends wait for room in its buffer),
//! - an `eventfd` rung by any other thread that touched the engine (a
//!   posted work request, a modified QP: anything that may arm an earlier
//!   timer or complete what the sleeper waits for),
//! - and the timeout of the RNIC's next timer (retransmission, RNR, a
//!   held-back packet of the fault injector), to the nanosecond
//!   (`epoll_pwait2`).
//!
//! The spin budget itself adapts ([`Pacer::judge`]): it stays at
//! [`PollConfig::spin`] while the driving thread keeps its core, and
//! shrinks towards blocking at the first empty round while the scheduler
//! keeps taking the core away (the thread's CPU time falls behind the wall
//! time it was awake), since spinning then only takes the CPU from the
//! peer that would produce what the spinner waits for. Beside one
//! CPU-bound process on two cores this made `write_bw` over loopback
//! 16.7–20.7 Gb/s where a fixed 50 µs budget made 15.3–16.1 (three
//! interleaved runs each).
//!
//! # No lost wake-ups
//!
//! Every thread that changes the engine holds its lock, and the guard that
//! releases the lock rings the eventfd when a thread sleeps ([`Waiter`]).
//! A sleeper decides to sleep, counts itself in and computes its timeout
//! under the same lock, then releases it without ringing. So a change
//! either happened before that decision (the sleeper's last round saw it
//! and its timeout covers the timers it armed) or after it (the changer
//! sees the sleeper counted and rings). The eventfd stays readable until
//! every thread that slept through a ring has woken (the last of them
//! drains it), so a ring that lands before a sleeper reaches `epoll_wait`
//! makes that wait return at once, and a ring the kernel handed to one of
//! several sleepers still reaches the others. A round that did work rings
//! too when others sleep: completions it queued may be theirs.

use crate::sys::event::{Epoll, EventFd, thread_cpu_time};
use std::fmt;
use std::io;
use std::os::fd::RawFd;
use std::str::FromStr;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Mutex, MutexGuard};
use std::thread::ThreadId;
use std::time::{Duration, Instant};

/// How the engine waits when it finds nothing to do.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum PollMode {
    /// Spin: never block (lowest latency; needs a core of its own).
    Busy,
    /// Spin while work arrives; after [`PollConfig::spin`] without any,
    /// block in `epoll` until a datagram, a post or a timer.
    #[default]
    Adaptive,
    /// Block as soon as a round finds nothing (least CPU).
    Event,
}

impl PollMode {
    pub fn name(self) -> &'static str {
        match self {
            PollMode::Busy => "busy",
            PollMode::Adaptive => "adaptive",
            PollMode::Event => "event",
        }
    }
}

impl fmt::Display for PollMode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// A name that is not a [`PollMode`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown poll mode {0:?}: expected busy, adaptive or event")]
pub struct UnknownPollMode(pub String);

impl FromStr for PollMode {
    type Err = UnknownPollMode;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "busy" => Ok(PollMode::Busy),
            "adaptive" => Ok(PollMode::Adaptive),
            "event" => Ok(PollMode::Event),
            _ => Err(UnknownPollMode(s.to_string())),
        }
    }
}

/// The progress mode and its two knobs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PollConfig {
    pub mode: PollMode,
    /// [`PollMode::Adaptive`]: how long rounds must find nothing before
    /// the engine blocks, at most (the budget shrinks while the CPU is
    /// contended, see the module documentation; `net.core.busy_poll`
    /// suggests 50 µs, which is also about what a loopback RDMA WRITE
    /// of 64 KiB takes to be acknowledged).
    pub spin: Duration,
    /// Longest single block when no timer is due (`None`: until an
    /// event). A caller that spins on something the engine cannot see (a
    /// TCP control connection not registered with
    /// [`Context::watch_fd`](crate::Context::watch_fd)) still gets to look
    /// at least this often.
    pub max_sleep: Option<Duration>,
}

impl Default for PollConfig {
    fn default() -> Self {
        PollConfig::from(PollMode::default())
    }
}

impl From<PollMode> for PollConfig {
    fn from(mode: PollMode) -> Self {
        PollConfig {
            mode,
            spin: Duration::from_micros(50),
            max_sleep: Some(Duration::from_millis(1)),
        }
    }
}

/// Token of the engine's socket in the epoll set.
const TOKEN_SOCKET: u64 = 0;
/// Token of the eventfd.
const TOKEN_EVENT: u64 = 1;
/// Token of a descriptor added with [`Waiter::watch`].
const TOKEN_WATCHED: u64 = 2;

/// The descriptors an engine blocks on, shared by every thread that
/// drives it (see the module documentation for the protocol).
#[derive(Debug)]
pub struct Waiter {
    epoll: Epoll,
    event: EventFd,
    sock: RawFd,
    /// Threads between deciding to sleep (under the engine lock) and
    /// waking: [`Ledger::sleepers`], read without its lock by
    /// [`notify`](Self::notify)'s fast path.
    sleepers: AtomicUsize,
    /// Who still owes the eventfd a look (see [`Ledger`]).
    ledger: Mutex<Ledger>,
    /// The socket is watched for `EPOLLOUT` as well.
    out: AtomicBool,
}

impl Waiter {
    /// Watches `sock` (the engine's UDP socket) and a fresh eventfd.
    pub fn new(sock: RawFd) -> io::Result<Waiter> {
        let epoll = Epoll::new()?;
        let event = EventFd::new()?;
        epoll.add(sock, libc::EPOLLIN as u32, TOKEN_SOCKET)?;
        epoll.add(event.fd(), libc::EPOLLIN as u32, TOKEN_EVENT)?;
        Ok(Waiter {
            epoll,
            event,
            sock,
            sleepers: AtomicUsize::new(0),
            ledger: Mutex::new(Ledger::default()),
            out: AtomicBool::new(false),
        })
    }

    fn ledger(&self) -> MutexGuard<'_, Ledger> {
        self.ledger.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Called with the engine lock held, by a thread that changed the
    /// engine: wakes the sleepers, if any (one atomic load otherwise).
    pub fn notify(&self) {
        if self.sleepers.load(Ordering::SeqCst) > 0 {
            self.ring();
        }
    }

    /// Wakes every sleeper, and the next one to sleep, unconditionally
    /// (e.g. to stop a progress thread).
    pub fn wake(&self) {
        self.ring();
    }

    fn ring(&self) {
        let mut l = self.ledger();
        l.rung += 1;
        l.behind = l.sleepers;
        self.event.signal();
    }

    /// Whether any thread is blocked (or about to block) on this engine.
    pub fn sleepers(&self) -> usize {
        self.sleepers.load(Ordering::SeqCst)
    }

    /// Also wakes on `fd` becoming readable (e.g. a control connection the
    /// caller checks between rounds).
    pub fn watch(&self, fd: RawFd) -> io::Result<()> {
        self.epoll.add(fd, libc::EPOLLIN as u32, TOKEN_WATCHED)
    }

    pub fn unwatch(&self, fd: RawFd) -> io::Result<()> {
        self.epoll.delete(fd)
    }

    /// Counts the caller in as a sleeper. Must run under the engine lock,
    /// in the same hold as the round that found nothing and the timeout's
    /// computation; pair with [`sleep`](Self::sleep).
    pub fn prepare(&self, mut plan: SleepPlan) -> SleepPlan {
        {
            let mut l = self.ledger();
            l.sleepers += 1;
            plan.seen = l.rung;
            self.sleepers.store(l.sleepers, Ordering::SeqCst);
        }
        if self.out.load(Ordering::Relaxed) != plan.want_out {
            let mut ev = libc::EPOLLIN as u32;
            if plan.want_out {
                ev |= libc::EPOLLOUT as u32;
            }
            // A failure leaves the old set: EPOLLIN alone still wakes on
            // ACKs, which is what frees room in the socket buffer too.
            if self.epoll.modify(self.sock, ev, TOKEN_SOCKET).is_ok() {
                self.out.store(plan.want_out, Ordering::Relaxed);
            }
        }
        plan
    }

    /// Blocks (the engine lock released) until an event or the plan's
    /// timeout, then counts the caller out. Returns what woke it.
    pub fn sleep(&self, plan: SleepPlan) -> Wake {
        let mut out = [libc::epoll_event { events: 0, u64: 0 }; 4];
        let r = self.epoll.wait(&mut out, plan.timeout);
        let mut wake = Wake::default();
        for ev in &out[..r.unwrap_or(0)] {
            match ev.u64 {
                TOKEN_SOCKET => wake.socket = true,
                TOKEN_EVENT => wake.event = true,
                _ => wake.watched = true,
            }
        }
        let mut l = self.ledger();
        self.count_out(&mut l, plan);
        if wake.event && l.behind == 0 {
            // Drained before the next round, which then sees every change
            // rung so far; a later ring (after the ledger's lock) makes it
            // readable again. Not while a thread that slept through a ring
            // has yet to wake: a ring wakes one thread blocked in
            // `epoll_wait` on the set (the kernel queues them
            // exclusively), and the eventfd left readable is what wakes
            // the others in turn. Drained by the first, it left the second
            // of two sleepers asleep in 200 tries of 200.
            self.event.drain();
        }
        wake
    }
}

impl Waiter {
    /// Counts out a sleeper that [`prepare`](Self::prepare) counted in
    /// but that will not sleep after all (its owner was told to stop in
    /// between: a ring before `prepare` may already have been drained by
    /// another sleeper, so sleeping could last for ever).
    pub fn cancel(&self, plan: SleepPlan) {
        let mut l = self.ledger();
        self.count_out(&mut l, plan);
    }

    fn count_out(&self, l: &mut Ledger, plan: SleepPlan) {
        l.sleepers -= 1;
        self.sleepers.store(l.sleepers, Ordering::SeqCst);
        if plan.seen < l.rung {
            l.behind = l.behind.saturating_sub(1);
        }
    }
}

/// Why a sleep ended (all false: the timeout).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Wake {
    pub socket: bool,
    pub event: bool,
    pub watched: bool,
}

/// What a sleeper waits for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SleepPlan {
    /// `None`: until an event.
    pub timeout: Option<Duration>,
    /// Sends wait for room in the socket buffer: wake on `EPOLLOUT` too.
    pub want_out: bool,
    /// The rings before this sleeper counted itself in (set by
    /// [`Waiter::prepare`]; 0 before).
    pub seen: u64,
}

/// The eventfd is level-triggered and shared by every thread blocked on
/// the engine, so draining it is a decision about all of them: the rings
/// so far, and how many sleepers counted in before the latest one have
/// not woken since. Only when none are left may a waking thread drain it:
/// the rest slept through a change and must still look.
#[derive(Debug, Default)]
struct Ledger {
    sleepers: usize,
    /// Sleepers counted in before the latest ring, not yet awake.
    behind: usize,
    rung: u64,
}

/// Counts idle rounds and decides when the engine may block; lives inside
/// the engine, so it is read and written under its lock.
#[derive(Debug, Clone)]
pub struct Pacer {
    cfg: PollConfig,
    /// Rounds in a row that found nothing.
    idle: u32,
    /// When the current idle stretch started (read once per stretch).
    since: Option<Instant>,
    /// Times the engine blocked (for tests and the curious).
    pub sleeps: u64,
    /// [`PollMode::Adaptive`]'s spin budget now: up to `cfg.spin` while
    /// the thread keeps its core, shrinking while the scheduler takes it
    /// away ([`judge`](Self::judge)).
    budget: Duration,
    /// Wall clock and thread CPU time when the driving thread last woke,
    /// and which thread that was.
    awake: Option<(Instant, Duration, ThreadId)>,
    /// Awake wall and CPU time gathered since the last judgement: one
    /// stretch is mostly too short to see a preemption (a scheduler tick
    /// is milliseconds), so stretches are summed until [`JUDGED_OVER`].
    gathered: (Duration, Duration),
}

/// Below this share of the wall time on the CPU while awake, a thread is
/// losing its core to others: spinning would take it from them.
const CONTENDED_SHARE: f64 = 0.8;
/// Awake time summed before judging it (a few scheduler ticks).
const JUDGED_OVER: Duration = Duration::from_millis(10);

impl Pacer {
    pub fn new(cfg: PollConfig) -> Pacer {
        Pacer {
            cfg,
            idle: 0,
            since: None,
            sleeps: 0,
            budget: cfg.spin,
            awake: None,
            gathered: (Duration::ZERO, Duration::ZERO),
        }
    }

    /// The spin budget [`PollMode::Adaptive`] uses now.
    pub fn budget(&self) -> Duration {
        self.budget
    }

    /// Adapts the spin budget to what the thread was given while awake:
    /// `cpu` of `wall`. A thread that had its core (a share of at least
    /// `CONTENDED_SHARE`, 0.8) may spin again, the budget doubling back to
    /// `cfg.spin`; one the scheduler kept taking its core from halves it,
    /// down to nothing (then it blocks at the first empty round, as in
    /// [`PollMode::Event`]). Spinning pays only on a core of one's own:
    /// on a shared one it burns the time the peer (on loopback, the other
    /// half of the same transfer) needed to produce what the spinner waits
    /// for, which is how two busy-polled sides collapse beside one
    /// CPU-bound process.
    pub fn judge(&mut self, wall: Duration, cpu: Duration) {
        if wall.is_zero() {
            return;
        }
        let share = cpu.as_secs_f64() / wall.as_secs_f64();
        self.budget = if share < CONTENDED_SHARE {
            let half = self.budget / 2;
            if half < Duration::from_micros(1) {
                Duration::ZERO
            } else {
                half
            }
        } else {
            (self.budget * 2)
                .max(Duration::from_micros(1))
                .min(self.cfg.spin)
        };
    }

    /// Called on deciding to block: judges the awake stretch that ends.
    fn judge_awake(&mut self) {
        let me = std::thread::current().id();
        if let Some((w0, c0, t)) = self.awake
            && t == me
        {
            self.gathered.0 += w0.elapsed();
            self.gathered.1 += thread_cpu_time().saturating_sub(c0);
            if self.gathered.0 >= JUDGED_OVER {
                let (wall, cpu) = std::mem::take(&mut self.gathered);
                self.judge(wall, cpu);
            }
        }
    }

    pub fn config(&self) -> PollConfig {
        self.cfg
    }

    /// Records a round: `work` when it received, sent, ran a timer or
    /// delivered completions.
    #[inline]
    pub fn note(&mut self, work: bool) {
        if work {
            self.idle = 0;
            self.since = None;
        } else {
            self.idle = self.idle.saturating_add(1);
        }
    }

    /// Whether the idle stretch so far allows blocking in `mode` (the
    /// engine's own unless overridden).
    pub fn may_sleep(&mut self, mode: PollMode) -> bool {
        match mode {
            PollMode::Busy => false,
            PollMode::Event => self.idle > 0,
            PollMode::Adaptive => {
                if self.idle == 0 {
                    return false;
                }
                // The clock is read once when a stretch starts, then on
                // every idle round: a round that found nothing is waiting
                // anyway.
                let since = *self.since.get_or_insert_with(Instant::now);
                if since.elapsed() < self.budget {
                    return false;
                }
                self.judge_awake();
                true
            }
        }
    }

    /// The timeout of a sleep: the nearest of the next timer (ns from
    /// now), the caller's limit and the configured longest sleep. `None`
    /// inside means no limit; an outer `None` means do not sleep (a timer
    /// is due now).
    pub fn timeout(
        &self,
        next_timer_ns: Option<u64>,
        limit: Option<Duration>,
    ) -> Option<Option<Duration>> {
        let t = [
            next_timer_ns.map(Duration::from_nanos),
            limit,
            self.cfg.max_sleep,
        ]
        .into_iter()
        .flatten()
        .min();
        match t {
            Some(d) if d.is_zero() => None,
            t => Some(t),
        }
    }

    /// After a sleep: the round that follows starts a new stretch, so one
    /// empty round after a wake-up that brought nothing blocks again.
    pub fn slept(&mut self) {
        self.sleeps += 1;
        let now = Instant::now();
        self.since = Some(now.checked_sub(self.cfg.spin).unwrap_or(now));
        if self.cfg.mode == PollMode::Adaptive {
            self.awake = Some((now, thread_cpu_time(), std::thread::current().id()));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn modes_parse_and_print() {
        for m in [PollMode::Busy, PollMode::Adaptive, PollMode::Event] {
            assert_eq!(m.name().parse::<PollMode>(), Ok(m));
            assert_eq!(m.to_string(), m.name());
        }
        let e = "spin".parse::<PollMode>().unwrap_err();
        assert!(e.to_string().contains("busy, adaptive or event"), "{e}");
    }

    #[test]
    fn busy_never_sleeps_event_sleeps_after_one_empty_round() {
        let mut p = Pacer::new(PollMode::Busy.into());
        for _ in 0..1000 {
            p.note(false);
        }
        assert!(!p.may_sleep(PollMode::Busy));
        let mut p = Pacer::new(PollMode::Event.into());
        assert!(!p.may_sleep(PollMode::Event), "no round yet");
        p.note(false);
        assert!(p.may_sleep(PollMode::Event));
        p.note(true);
        assert!(!p.may_sleep(PollMode::Event), "work resets the stretch");
    }

    #[test]
    fn adaptive_spins_for_its_budget_then_sleeps() {
        let mut p = Pacer::new(PollConfig {
            spin: Duration::from_secs(3600),
            ..PollMode::Adaptive.into()
        });
        p.note(false);
        assert!(!p.may_sleep(PollMode::Adaptive), "inside the budget");
        let mut p = Pacer::new(PollConfig {
            spin: Duration::ZERO,
            ..PollMode::Adaptive.into()
        });
        assert!(!p.may_sleep(PollMode::Adaptive), "no empty round yet");
        p.note(false);
        assert!(p.may_sleep(PollMode::Adaptive));
        p.note(true);
        assert!(!p.may_sleep(PollMode::Adaptive));
    }

    #[test]
    fn the_spin_budget_shrinks_while_the_core_is_taken_and_grows_back() {
        let spin = Duration::from_micros(50);
        let mut p = Pacer::new(PollConfig {
            spin,
            ..PollMode::Adaptive.into()
        });
        assert_eq!(p.budget(), spin);
        let ms = Duration::from_millis(1);
        // Half the wall time on the CPU: contended, halve each time.
        p.judge(ms, ms / 2);
        assert_eq!(p.budget(), spin / 2);
        for _ in 0..10 {
            p.judge(ms, ms / 2);
        }
        assert_eq!(p.budget(), Duration::ZERO, "down to blocking at once");
        // The core is ours again: double back up to the configured spin.
        p.judge(ms, ms);
        assert_eq!(p.budget(), Duration::from_micros(1));
        for _ in 0..10 {
            p.judge(ms, ms * 95 / 100);
        }
        assert_eq!(p.budget(), spin);
        // A zero budget sleeps at the first empty round.
        for _ in 0..20 {
            p.judge(ms, Duration::ZERO);
        }
        p.note(false);
        assert!(p.may_sleep(PollMode::Adaptive));
    }

    #[test]
    fn the_timeout_is_the_nearest_limit_and_a_due_timer_forbids_sleep() {
        let p = Pacer::new(PollConfig {
            max_sleep: Some(Duration::from_millis(5)),
            ..PollMode::Event.into()
        });
        assert_eq!(p.timeout(None, None), Some(Some(Duration::from_millis(5))));
        assert_eq!(
            p.timeout(Some(2_000), None),
            Some(Some(Duration::from_micros(2)))
        );
        assert_eq!(
            p.timeout(None, Some(Duration::from_millis(1))),
            Some(Some(Duration::from_millis(1)))
        );
        assert_eq!(p.timeout(Some(0), None), None);
        let unlimited = Pacer::new(PollConfig {
            max_sleep: None,
            ..PollMode::Event.into()
        });
        assert_eq!(unlimited.timeout(None, None), Some(None));
    }
}
