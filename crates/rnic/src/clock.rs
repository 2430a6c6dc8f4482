//! A cycle counter cheap enough to read at every stage boundary of a packet.
//!
//! Profiling the engine per packet reads the clock several times a packet;
//! `Instant::now` goes through the vDSO (about 20–30 ns), the TSC is one
//! instruction (`rdtsc`, Intel SDM vol. 2B) and is invariant on the CPUs
//! Linux picks it as a clocksource on. Readers convert ticks to time with
//! a rate they measure against `Instant` over the same interval, so no
//! frequency is assumed. Elsewhere it falls back to `Instant`.

/// The current tick count (monotonic within a thread; unit unspecified).
#[inline(always)]
pub fn ticks() -> u64 {
    #[cfg(target_arch = "x86_64")]
    {
        // SAFETY: rdtsc has no preconditions on x86_64 (always present).
        unsafe { core::arch::x86_64::_rdtsc() }
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        use std::sync::OnceLock;
        use std::time::Instant;
        static ORIGIN: OnceLock<Instant> = OnceLock::new();
        ORIGIN.get_or_init(Instant::now).elapsed().as_nanos() as u64
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn ticks_move_forward() {
        let a = super::ticks();
        std::thread::sleep(std::time::Duration::from_millis(1));
        assert!(super::ticks() > a);
    }
}
