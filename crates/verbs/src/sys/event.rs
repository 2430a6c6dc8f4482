//! Blocking waits for the adaptive progress modes ([`crate::poll`]): an
//! `epoll` instance, an `eventfd` other threads ring, and the calling
//! thread's CPU clock. Thin safe wrappers in the style of the parent
//! module: every pointer handed to the kernel lives for the call, and
//! every descriptor is an `OwnedFd` closed on drop.

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

/// An `epoll` instance (`epoll(7)`), level-triggered.
#[derive(Debug)]
pub struct Epoll {
    fd: OwnedFd,
    /// `epoll_pwait2` (Linux 5.11, nanosecond timeouts) was refused:
    /// fall back to `epoll_wait` with the timeout rounded up to a millisecond.
    no_pwait2: AtomicBool,
}

fn cvt(r: libc::c_int) -> io::Result<libc::c_int> {
    if r < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(r)
    }
}

impl Epoll {
    pub fn new() -> io::Result<Epoll> {
        // SAFETY: no pointers; the result is a fresh descriptor or -1.
        let fd = cvt(unsafe { libc::epoll_create1(libc::EPOLL_CLOEXEC) })?;
        Ok(Epoll {
            // SAFETY: `fd` was just created and is owned by nobody else.
            fd: unsafe { OwnedFd::from_raw_fd(fd) },
            no_pwait2: AtomicBool::new(false),
        })
    }

    fn ctl(&self, op: libc::c_int, fd: RawFd, events: u32, token: u64) -> io::Result<()> {
        let mut ev = libc::epoll_event { events, u64: token };
        // SAFETY: `ev` lives for the call; the kernel copies it.
        cvt(unsafe { libc::epoll_ctl(self.fd.as_raw_fd(), op, fd, &mut ev) }).map(drop)
    }

    /// Watches `fd` for `events` (`EPOLLIN`, `EPOLLOUT`), reported with `token`.
    pub fn add(&self, fd: RawFd, events: u32, token: u64) -> io::Result<()> {
        self.ctl(libc::EPOLL_CTL_ADD, fd, events, token)
    }

    /// Changes what `fd` is watched for.
    pub fn modify(&self, fd: RawFd, events: u32, token: u64) -> io::Result<()> {
        self.ctl(libc::EPOLL_CTL_MOD, fd, events, token)
    }

    /// Stops watching `fd`.
    pub fn delete(&self, fd: RawFd) -> io::Result<()> {
        self.ctl(libc::EPOLL_CTL_DEL, fd, 0, 0)
    }

    /// Blocks until a watched descriptor is ready or `timeout` passes
    /// (`None`: no limit). Returns the ready tokens' count in `out`; 0 on a
    /// timeout or a signal (the caller goes round again either way).
    pub fn wait(
        &self,
        out: &mut [libc::epoll_event],
        timeout: Option<Duration>,
    ) -> io::Result<usize> {
        let max = out.len().clamp(1, 64) as libc::c_int;
        let epfd = self.fd.as_raw_fd();
        let r = if !self.no_pwait2.load(Ordering::Relaxed) {
            let ts = timeout.map(|t| libc::timespec {
                tv_sec: t.as_secs().min(i64::MAX as u64) as libc::time_t,
                tv_nsec: t.subsec_nanos() as libc::c_long,
            });
            let tsp = ts
                .as_ref()
                .map_or(std::ptr::null(), |t| t as *const libc::timespec);
            // SAFETY: `out` holds `max` events and `tsp` is null or points
            // at `ts`, both alive for the call; no signal mask is passed.
            let r = unsafe {
                libc::syscall(
                    libc::SYS_epoll_pwait2,
                    epfd,
                    out.as_mut_ptr(),
                    max,
                    tsp,
                    std::ptr::null::<libc::sigset_t>(),
                    0usize,
                )
            };
            if r < 0 && io::Error::last_os_error().raw_os_error() == Some(libc::ENOSYS) {
                self.no_pwait2.store(true, Ordering::Relaxed);
                None
            } else {
                Some(r as libc::c_int)
            }
        } else {
            None
        };
        let r = match r {
            Some(r) => r,
            None => {
                let ms = timeout.map_or(-1, |t| {
                    t.as_nanos().div_ceil(1_000_000).min(i32::MAX as u128) as libc::c_int
                });
                // SAFETY: `out` holds `max` events for the call.
                unsafe { libc::epoll_wait(epfd, out.as_mut_ptr(), max, ms) }
            }
        };
        match cvt(r) {
            Ok(n) => Ok(n as usize),
            Err(e) if e.kind() == io::ErrorKind::Interrupted => Ok(0),
            Err(e) => Err(e),
        }
    }
}

/// An `eventfd(2)` counter: [`signal`](Self::signal) makes it readable
/// until [`drain`](Self::drain), so a signal sent before its waiter blocks
/// is never lost (the waiter's `epoll` sees it level-triggered).
#[derive(Debug)]
pub struct EventFd(OwnedFd);

impl EventFd {
    pub fn new() -> io::Result<EventFd> {
        // SAFETY: no pointers; the result is a fresh descriptor or -1.
        let fd = cvt(unsafe { libc::eventfd(0, libc::EFD_NONBLOCK | libc::EFD_CLOEXEC) })?;
        // SAFETY: `fd` was just created and is owned by nobody else.
        Ok(EventFd(unsafe { OwnedFd::from_raw_fd(fd) }))
    }

    pub fn fd(&self) -> RawFd {
        self.0.as_raw_fd()
    }

    /// Adds one to the counter (a full counter is already readable, so
    /// `EAGAIN` loses nothing).
    pub fn signal(&self) {
        let one: u64 = 1;
        // SAFETY: writes the 8 bytes of `one`, alive for the call.
        unsafe {
            libc::write(self.fd(), (&one as *const u64).cast(), 8);
        }
    }

    /// Resets the counter to zero (non-blocking; nothing to read is fine).
    pub fn drain(&self) {
        let mut v: u64 = 0;
        // SAFETY: reads at most 8 bytes into `v`, alive for the call.
        unsafe {
            libc::read(self.fd(), (&mut v as *mut u64).cast(), 8);
        }
    }
}

/// CPU time the calling thread has used (`CLOCK_THREAD_CPUTIME_ID`): what
/// shows whether an idle engine blocks or spins.
pub fn thread_cpu_time() -> Duration {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid timespec for the call.
    unsafe {
        libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts);
    }
    Duration::new(
        ts.tv_sec.max(0) as u64,
        ts.tv_nsec.clamp(0, 999_999_999) as u32,
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_signal_before_the_wait_is_not_lost() {
        let ep = Epoll::new().unwrap();
        let ev = EventFd::new().unwrap();
        ep.add(ev.fd(), libc::EPOLLIN as u32, 7).unwrap();
        ev.signal();
        let mut out = [libc::epoll_event { events: 0, u64: 0 }; 4];
        let n = ep.wait(&mut out, None).unwrap();
        assert_eq!(n, 1);
        let token = out[0].u64;
        assert_eq!(token, 7);
        // Still readable until drained (level-triggered) ...
        assert_eq!(ep.wait(&mut out, Some(Duration::ZERO)).unwrap(), 1);
        ev.drain();
        // ... and not after.
        assert_eq!(ep.wait(&mut out, Some(Duration::ZERO)).unwrap(), 0);
    }

    #[test]
    fn thread_cpu_time_advances_with_work() {
        let a = thread_cpu_time();
        let mut x = 0u64;
        while thread_cpu_time() == a {
            x = std::hint::black_box(x.wrapping_add(1));
        }
        assert!(thread_cpu_time() > a);
    }
}
