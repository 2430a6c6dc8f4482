//! Cache hints for a driver that knows, before it calls, which RNIC it
//! will poll or feed next: the simulator's calendar look-ahead.
//!
//! A fabric simulator drives thousands of RNICs in turn, so each call
//! finds its RNIC's state out of cache: at 8,192 hosts the device's first
//! lines, its ready set and QP table, and the QP's hot lines were each a
//! miss per packet sent or received (issue 12, most of `poll_transmit`'s
//! time). The hints come in two stages, the second reading only what the
//! first started to load, so a driver can issue them a few events ahead:
//! [`Rnic::prefetch_device`], then [`Rnic::prefetch_tables`]. (A third,
//! for the QP's own hot lines, was dropped with the simulator's stage for
//! the slot being run: issued as the slot came up, its loads landed after
//! the slot's first events had already waited for them; session 18.)
//! They change nothing; each hands the addresses to start loading to the
//! driver's [`Hint`].

use crate::Rnic;
use crate::memory::Memory;
use std::mem::offset_of;

/// Most lines one hint loads (a bound on what a look-ahead issues).
const MAX_LINES: usize = 10;

/// Most lines of the controller's own state [`Rnic::prefetch_cc`] loads
/// (HPCC's for a path of up to five switches); it loads a WQE's line and
/// a sent-log record's besides.
const CC_LINES: usize = 4;

/// What the driver does with an address it should start loading: a
/// prefetch instruction (the RNIC itself has no unsafe code to issue one;
/// forming the address is safe, the hint is the driver's).
pub type Hint = fn(*const u8);

/// Hints the first `bytes` of `x` (at most [`MAX_LINES`] lines).
#[inline]
fn lines<T: ?Sized>(hint: Hint, x: &T, bytes: usize) {
    let p = x as *const T as *const u8;
    for i in 0..bytes.div_ceil(64).min(MAX_LINES) {
        hint(p.wrapping_add(i * 64));
    }
}

impl<M: Memory> Rnic<M> {
    /// Stage 1: the device's own lines a poll or a received packet reads
    /// (clock, QP table and ready set headers, timers, counters,
    /// configuration, memory map), which `repr(C)` puts first.
    #[inline]
    pub fn prefetch_device(&self, hint: Hint) {
        lines(hint, self, offset_of!(Rnic<M>, cqs));
    }

    /// Stage 2 (after [`prefetch_device`](Self::prefetch_device)): the
    /// ready set's word and the QP table's slots where the next poll
    /// looks, QP `qpn`'s slot if a packet for it is on its way (a slot
    /// is the QP itself, stored inline: its hot lines, `qp::HOT_BYTES`,
    /// where a boxed QP's slot was only a pointer to them), and the
    /// timer heap's first entry (every poll ends by reading the next
    /// deadline; at 8,192 hosts that load was 18 % of `kick_host`'s perf
    /// samples).
    #[inline]
    pub fn prefetch_tables(&self, hint: Hint, qpn: Option<u32>) {
        self.timers.prefetch_first(hint);
        self.ready.prefetch_near(hint, self.rr_next);
        self.qps.prefetch_slot(hint, self.rr_next);
        if let Some(q) = qpn {
            self.qps.prefetch_slot(hint, q);
        }
    }

    /// The state of QP `qpn`'s congestion controller (at most its first
    /// `CC_LINES` lines), for a driver about to hand the QP an ACK with
    /// INT ([`Rnic::handle_packet_telemetry`]): the controller reads its state
    /// after the RNIC has handled the ACK itself, so hinted first, the
    /// misses overlap with that work. With HPCC on the 320-host fat tree
    /// the controller's four lines were each a miss per ACK (cachegrind).
    ///
    /// With them, the records an ACK retires first: the oldest send
    /// WQE's line (which `ack_upto` reads first) and the oldest packet's
    /// record in the sent log (`refresh_una`'s RTT sample and byte
    /// count). Written a round trip before, both have left the cache by
    /// the time the ACK arrives, and each was a stall of its own on the
    /// ACK's path (perf, fat-tree HPCC: about half of `refresh_una`'s
    /// samples on the record's load).
    #[inline]
    pub fn prefetch_cc(&self, hint: Hint, qpn: u32) {
        if let Some(qp) = self.qps.get(&qpn) {
            let cc = qp.cc.get();
            lines(hint, cc, std::mem::size_of_val(cc).min(CC_LINES * 64));
            if let Some(w) = qp.sq.front() {
                lines(hint, w, 1);
            }
            qp.sent_log.prefetch_front(hint);
        }
    }
}

#[cfg(test)]
mod tests {
    use std::mem::offset_of;

    #[test]
    fn a_devices_hot_part_fits_the_hint() {
        use crate::Rnic;
        use crate::memory::VirtualMemory;
        let hot = offset_of!(Rnic<VirtualMemory>, cqs);
        assert!(hot.div_ceil(64) <= super::MAX_LINES, "{hot} hot bytes");
    }
}
