//! The step loop's variants: the loop compiled once per set of optional
//! features a run may lack, so that at every event the checks for what
//! the run cannot use fold away.
//!
//! Most runs use few of the simulator's optional features (a queue-length
//! window, ns-3's packet trace, lossy or failing links, HPCC-PINT, the
//! look-ahead's later stages for large fabrics, a scheduler other than
//! strict priority, the event queue's partition, the hosts' data-path
//! models, hosts on two ToRs), yet the general loop asks after each of
//! them on every arrival and departure: a load, a compare and a branch
//! apiece, well predicted but not free. Compiled per variant (session
//! 45), the 1 ms 320-host fat tree ran 3.9 % fewer instructions with HPCC
//! (14,933.0 M to 14,353.1 M) and 4.9 % fewer with DCQCN (12,858.0 M to
//! 12,226.2 M; callgrind, outputs identical), and the fat5ms runs took
//! 2.4 % (HPCC: 7.77-7.88 s against 8.02-8.03 s), 2.7 % (DCQCN:
//! 6.97-7.02 s against 7.16-7.23 s) and 2.2 % (PFC only: 6.86-6.92 s
//! against 7.05-7.06 s) less user time, three interleaved pairs each, one
//! run at a time. The k=32 fat tree cut at 1 ms, which runs partitioned
//! and so in the general loop, came out even (both builds at once: B/A
//! 1.002, 1.002, 1.000).
//!
//! The lean loops also schedule without the event queue's test that an
//! event's node and port pack into its 64 bits (they pack in every fabric
//! up to 2²⁰ nodes of up to 4,096 ports): a further 1.7 % of HPCC's
//! instructions on the same run (14,353.1 M to 14,112.7 M) and 3.1 % of
//! DCQCN's (12,226.2 M to 11,843.4 M), and 2.3 % (7.76-7.79 s against
//! 7.87-8.02 s) and 0.9 % (6.88-6.96 s against 6.97-7.02 s) of their
//! fat5ms user time, three interleaved pairs each.
//!
//! Each variant's loop is a function of its own (`step_as`, not inlined
//! into `step`): with the three inlined into one, the instructions were
//! the same and the HPCC run was no faster than before (five interleaved
//! pairs, 8.33-8.59 s against 8.30-8.45 s).
//!
//! [`Simulator::shape`] picks the variant as each [`Simulator::step`]
//! call begins, from the state that decides every such check; nothing a
//! lean variant leaves out can switch on in the middle of a call (see
//! `shape` for why), and debug builds check that after every event.

use super::{SimConfig, Simulator};
use crate::event::Ps;
use crate::link::Scheduler;

/// Every feature checked as the run goes.
pub(super) const GENERAL: u8 = 0;
/// None of the optional features, INT off (DCQCN, PFC only, TIMELY, ...).
pub(super) const LEAN: u8 = 1;
/// None of the optional features, INT on (HPCC).
pub(super) const LEAN_INT: u8 = 2;

impl Simulator {
    /// The variant the next events can run in: [`LEAN`] or [`LEAN_INT`]
    /// when the run uses none of the optional features until the next
    /// `step` call at least, else [`GENERAL`].
    ///
    /// Each condition holds for the rest of a `step` call once it holds as
    /// the call begins:
    /// - no queue-length window waits to open (`qlen_open_at`; it is set
    ///   only when the run is built) and none is open (`watch_until` has
    ///   passed, and simulated time only moves on); the packet trace,
    ///   which also opens `watch_until`, is set between calls;
    /// - no link drops what it carries (`arrive_checks`): lossy links set
    ///   it when the run is built, a link failure as it happens, so a run
    ///   with failures to come is general throughout;
    /// - the later look-ahead stages, PINT, the scheduler, the event
    ///   queue's partition, the hosts' data-path models, multi-homed
    ///   hosts and whether every node and port packs into an event are
    ///   fixed when the run is built.
    pub(super) fn shape(&self) -> u8 {
        let lean = self.qlen_open_at == Ps::MAX
            && self.watch_until <= self.q.now()
            && !self.arrive_checks
            && self.cfg.link_failures.is_empty()
            && !self.deep_prefetch
            && self.pint.is_none()
            && matches!(self.cfg.scheduler, Scheduler::Strict)
            && self.q.partition().is_none()
            && !self.host_paths
            && !self.topo.multi_homed
            && self.packs_all;
        #[cfg(test)]
        let lean = lean && !FORCE_GENERAL.get();
        match (lean, self.cfg.int) {
            (false, _) => GENERAL,
            (true, false) => LEAN,
            (true, true) => LEAN_INT,
        }
    }
}

/// Whether switches stamp INT, as variant `V` knows it (a function of the
/// configuration alone, so that it can be asked with a port in hand).
#[inline(always)]
pub(super) fn int_on<const V: u8>(cfg: &SimConfig) -> bool {
    match V {
        LEAN => false,
        LEAN_INT => true,
        _ => cfg.int,
    }
}

/// The scheduler, as variant `V` knows it.
#[inline(always)]
pub(super) fn scheduler<const V: u8>(cfg: &SimConfig) -> &Scheduler {
    if V == GENERAL {
        &cfg.scheduler
    } else {
        &Scheduler::Strict
    }
}

#[cfg(test)]
thread_local! {
    /// Tests run the general loop where a lean one would be picked, to
    /// check that both compute the same.
    pub(super) static FORCE_GENERAL: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}
