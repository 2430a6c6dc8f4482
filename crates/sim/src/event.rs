//! The event queue: simulated time in integer picoseconds, events ordered by
//! `(time, sequence)` so that ties run in the order they were scheduled and a
//! run is bit-for-bit repeatable for a given seed.
//!
//! Picoseconds in a `u64` cover 213 days of simulated time, and integer time
//! keeps serialization delays exact: 1 byte at 400 Gb/s is 20 ps, a figure a
//! nanosecond clock would round away (ns-3 uses the same resolution for the
//! same reason).
//!
//! Timers are never removed from the heap. Each cancellable timer carries the
//! version number its owner held when it was scheduled; the owner bumps its
//! version to cancel, and a stale event is dropped when it comes up. This is
//! cheaper than a removable heap and keeps entities free of back-pointers.

use std::cmp::Ordering;
use std::collections::BinaryHeap;

/// Simulated time in picoseconds.
pub type Ps = u64;

/// Picoseconds per nanosecond (the RNIC's time unit).
pub const PS_PER_NS: u64 = 1_000;
/// Picoseconds per microsecond.
pub const PS_PER_US: u64 = 1_000_000;
/// Picoseconds per second.
pub const PS_PER_S: u64 = 1_000_000_000_000;

/// Time to serialize `bytes` at `rate_bps`, in picoseconds, rounded up so a
/// link never runs faster than its rate.
pub fn ser_ps(bytes: u64, rate_bps: u64) -> Ps {
    if rate_bps == 0 {
        return 0;
    }
    (u128::from(bytes) * 8 * u128::from(PS_PER_S)).div_ceil(u128::from(rate_bps)) as Ps
}

/// Everything that can happen. Entities are named by index (node, port,
/// host, flow), never by reference.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Event {
    /// The last bit of packet `pkt` reached `node`'s `port`.
    Arrive { node: u32, port: u16, pkt: u32 },
    /// `node`'s `port` finished serializing a frame and may start the next.
    TxDone { node: u32, port: u16 },
    /// An RNIC timer (retransmission, pacing, congestion-control tick).
    HostTimer { host: u32, version: u32 },
    /// A PFC frame for `prio` reached `node`'s `port`; `quanta == 0` is XON.
    PfcArrive {
        node: u32,
        port: u16,
        prio: u8,
        quanta: u16,
    },
    /// The pause time of a received XOFF ran out.
    PauseEnd {
        node: u32,
        port: u16,
        prio: u8,
        version: u32,
    },
    /// Re-send an XOFF that is still needed before the peer's pause expires.
    PfcRefresh {
        node: u32,
        port: u16,
        prio: u8,
        version: u32,
    },
    /// Flow `flow` starts: its QP pair is created and the WRITE posted.
    FlowStart { flow: u32 },
    /// Periodic sampling of queues and per-flow progress.
    Sample,
}

#[derive(Debug, Clone, Copy)]
struct Entry {
    time: Ps,
    seq: u64,
    event: Event,
}

impl PartialEq for Entry {
    fn eq(&self, o: &Self) -> bool {
        (self.time, self.seq) == (o.time, o.seq)
    }
}
impl Eq for Entry {}
impl PartialOrd for Entry {
    fn partial_cmp(&self, o: &Self) -> Option<Ordering> {
        Some(self.cmp(o))
    }
}
impl Ord for Entry {
    /// Reversed: `BinaryHeap` is a max-heap and we want the earliest first.
    fn cmp(&self, o: &Self) -> Ordering {
        (o.time, o.seq).cmp(&(self.time, self.seq))
    }
}

/// A min-queue of events by `(time, sequence)`.
#[derive(Debug, Default)]
pub struct EventQueue {
    heap: BinaryHeap<Entry>,
    seq: u64,
    now: Ps,
    popped: u64,
    peak: usize,
}

impl EventQueue {
    pub fn new() -> Self {
        Self::default()
    }

    /// The time of the event being handled (or last handled).
    pub fn now(&self) -> Ps {
        self.now
    }

    /// Events handed out so far.
    pub fn popped(&self) -> u64 {
        self.popped
    }

    pub fn len(&self) -> usize {
        self.heap.len()
    }

    pub fn is_empty(&self) -> bool {
        self.heap.is_empty()
    }

    /// Schedules `event` at `time`; a time in the past runs at `now` (after
    /// everything already scheduled for `now`).
    pub fn schedule(&mut self, time: Ps, event: Event) {
        let time = time.max(self.now);
        self.seq += 1;
        self.heap.push(Entry {
            time,
            seq: self.seq,
            event,
        });
        self.peak = self.peak.max(self.heap.len());
    }

    /// Most events ever pending at once.
    pub fn peak_len(&self) -> usize {
        self.peak
    }

    /// Time of the next event.
    pub fn peek_time(&self) -> Option<Ps> {
        self.heap.peek().map(|e| e.time)
    }

    /// Takes the next event and advances `now` to its time.
    pub fn pop(&mut self) -> Option<(Ps, Event)> {
        let e = self.heap.pop()?;
        self.now = e.time;
        self.popped += 1;
        Some((e.time, e.event))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ties_are_fifo_and_time_ordered() {
        let mut q = EventQueue::new();
        q.schedule(10, Event::FlowStart { flow: 1 });
        q.schedule(5, Event::FlowStart { flow: 2 });
        q.schedule(10, Event::FlowStart { flow: 3 });
        q.schedule(5, Event::FlowStart { flow: 4 });
        let order: Vec<_> = std::iter::from_fn(|| q.pop())
            .map(|(t, e)| match e {
                Event::FlowStart { flow } => (t, flow),
                _ => unreachable!(),
            })
            .collect();
        assert_eq!(order, vec![(5, 2), (5, 4), (10, 1), (10, 3)]);
        assert_eq!(q.popped(), 4);
    }

    #[test]
    fn past_events_run_now() {
        let mut q = EventQueue::new();
        q.schedule(100, Event::Sample);
        q.pop();
        q.schedule(50, Event::Sample);
        assert_eq!(q.pop().map(|p| p.0), Some(100));
    }

    #[test]
    fn serialization_is_exact_in_ps() {
        // 1 byte at 400 Gb/s is 20 ps; 1000 bytes at 100 Gb/s is 80 ns.
        assert_eq!(ser_ps(1, 400_000_000_000), 20);
        assert_eq!(ser_ps(1000, 100_000_000_000), 80_000);
        // Rounded up: 1 byte at 3 b/s.
        assert_eq!(ser_ps(1, 3), 2_666_666_666_667);
    }
}
