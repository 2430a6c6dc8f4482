//! The event queue: simulated time in integer picoseconds, events ordered by
//! `(time, sequence)` so that ties run in the order they were scheduled and a
//! run is bit-for-bit repeatable for a given seed.
//!
//! Picoseconds in a `u64` cover 213 days of simulated time, and integer time
//! keeps serialization delays exact: 1 byte at 400 Gb/s is 20 ps, a figure a
//! nanosecond clock would round away (ns-3 uses the same resolution for the
//! same reason).
//!
//! Timers are never removed from the queue. Each cancellable timer carries the
//! version number its owner held when it was scheduled; the owner bumps its
//! version to cancel, and a stale event is dropped when it comes up. This is
//! cheaper than a removable heap and keeps entities free of back-pointers.

/// Simulated time in picoseconds.
pub type Ps = u64;

use std::cmp::Ordering;
use std::collections::BinaryHeap;

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

/// A pending event under its key: time in the high 64 bits, the schedule
/// sequence number in the low 64, so keys are unique and order is
/// `(time, sequence)`.
#[derive(Debug, Clone, Copy)]
struct Entry {
    key: u128,
    event: Event,
}

impl PartialEq for Entry {
    fn eq(&self, o: &Self) -> bool {
        self.key == o.key
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
        o.key.cmp(&self.key)
    }
}

/// log₂ of a calendar slot's width in ps (8.2 ns: a few packets' time).
const SLOT_BITS: u32 = 13;
/// Slots in the calendar (2⁹ × 8.2 ns = 4.2 µs ahead).
const SLOTS: usize = 1 << 9;

/// A min-queue of events by `(time, sequence)`.
///
/// A calendar queue (Brown, CACM 1988) tuned to packet simulation: nearly
/// every event lands a serialization time or a link delay ahead, so events
/// are dropped unsorted into 8.2 ns slots of a 4.2 µs calendar, and only
/// the current slot is sorted, once, when its time comes (latest first, so
/// the next event is popped off the end; the rare event scheduled into the
/// current slot is inserted in order).
/// Events beyond the calendar (retransmission timers and the like) wait in
/// an overflow heap and join the current slot when its time comes. An
/// occupancy bitmap skips empty slots. The order is exactly `(time,
/// sequence)`, as with one big heap.
#[derive(Debug)]
pub struct EventQueue {
    /// Events of the current slot (and any scheduled before it), sorted
    /// by descending key: the next event is the last.
    current: Vec<Entry>,
    slots: Vec<Vec<Entry>>,
    occupied: Vec<u64>,
    overflow: BinaryHeap<Entry>,
    /// Index (time >> SLOT_BITS) of the current slot.
    cur: u64,
    len: usize,
    seq: u64,
    now: Ps,
    popped: u64,
    peak: usize,
}

impl Default for EventQueue {
    fn default() -> Self {
        EventQueue {
            current: Vec::new(),
            slots: (0..SLOTS).map(|_| Vec::new()).collect(),
            occupied: vec![0; SLOTS / 64],
            overflow: BinaryHeap::new(),
            cur: 0,
            len: 0,
            seq: 0,
            now: 0,
            popped: 0,
            peak: 0,
        }
    }
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
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Schedules `event` at `time`; a time in the past runs at `now` (after
    /// everything already scheduled for `now`).
    pub fn schedule(&mut self, time: Ps, event: Event) {
        let time = time.max(self.now);
        self.seq += 1;
        let e = Entry {
            key: (u128::from(time) << 64) | u128::from(self.seq),
            event,
        };
        let slot = time >> SLOT_BITS;
        if slot <= self.cur {
            let at = self.current.partition_point(|x| x.key > e.key);
            self.current.insert(at, e);
        } else if slot - self.cur < SLOTS as u64 {
            let i = (slot as usize) & (SLOTS - 1);
            self.slots[i].push(e);
            self.occupied[i / 64] |= 1 << (i % 64);
        } else {
            self.overflow.push(e);
        }
        self.len += 1;
        self.peak = self.peak.max(self.len);
    }

    /// The next few events of the current slot, earliest first, for
    /// prefetching what they will touch (fewer, or none, near the end of a
    /// slot). Does not advance the calendar.
    pub fn upcoming(&self) -> impl Iterator<Item = &Event> {
        self.current.iter().rev().take(3).map(|e| &e.event)
    }

    /// Most events ever pending at once.
    pub fn peak_len(&self) -> usize {
        self.peak
    }

    /// The next occupied calendar slot after the current one, as a slot
    /// number (time >> SLOT_BITS).
    fn next_occupied(&self) -> Option<u64> {
        let start = ((self.cur + 1) as usize) & (SLOTS - 1);
        let words = SLOTS / 64;
        let (w0, b0) = (start / 64, start % 64);
        for k in 0..=words {
            let w = (w0 + k) % words;
            let mut bits = self.occupied[w];
            if k == 0 {
                bits &= !0u64 << b0;
            } else if k == words {
                bits &= !(!0u64 << b0);
            }
            if bits != 0 {
                let i = w * 64 + bits.trailing_zeros() as usize;
                let ahead = (i + SLOTS - start) % SLOTS;
                return Some(self.cur + 1 + ahead as u64);
            }
        }
        None
    }

    /// Makes `current` hold the earliest events; false when empty.
    fn settle(&mut self) -> bool {
        while self.current.is_empty() {
            if self.len == 0 {
                return false;
            }
            let from_cal = self.next_occupied();
            let from_over = self
                .overflow
                .peek()
                .map(|e| (e.key >> (64 + SLOT_BITS)) as u64);
            let next = match (from_cal, from_over) {
                (Some(a), Some(b)) => a.min(b),
                (Some(a), None) => a,
                (None, Some(b)) => b,
                (None, None) => return false,
            };
            self.cur = next;
            let i = (next as usize) & (SLOTS - 1);
            if from_cal == Some(next) {
                self.occupied[i / 64] &= !(1 << (i % 64));
                // `current` is empty: trade buffers, keeping both
                // allocations.
                std::mem::swap(&mut self.current, &mut self.slots[i]);
            }
            while let Some(e) = self.overflow.peek()
                && (e.key >> (64 + SLOT_BITS)) as u64 <= next
            {
                let e = self.overflow.pop().expect("peeked");
                self.current.push(e);
            }
            // `Entry` orders by reversed key: the earliest sorts last.
            self.current.sort_unstable();
        }
        true
    }

    /// Time of the next event.
    pub fn peek_time(&mut self) -> Option<Ps> {
        if !self.settle() {
            return None;
        }
        self.current.last().map(|e| (e.key >> 64) as Ps)
    }

    /// Takes the next event and advances `now` to its time.
    pub fn pop(&mut self) -> Option<(Ps, Event)> {
        if !self.settle() {
            return None;
        }
        let e = self.current.pop()?;
        self.len -= 1;
        let time = (e.key >> 64) as Ps;
        self.now = time;
        self.popped += 1;
        Some((time, e.event))
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
    fn matches_a_sorted_order_under_random_schedules() {
        // Interleaved schedules and pops, including equal times, far
        // futures and a peek followed by an earlier schedule.
        let mut q = EventQueue::new();
        let mut reference = std::collections::BTreeSet::new();
        let mut x: u64 = 12345;
        let mut seq = 0u64;
        let mut out = Vec::new();
        let mut want = Vec::new();
        for round in 0..20_000u64 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let now = q.now();
            if !x.is_multiple_of(3) {
                let dt = match x % 5 {
                    0 => 0,
                    1 => x % 100,
                    2 => x % 100_000,
                    3 => x % 10_000_000_000,
                    _ => (x >> 8) % 3,
                };
                seq += 1;
                q.schedule(now + dt, Event::FlowStart { flow: seq as u32 });
                reference.insert((now + dt, seq));
            } else if round.is_multiple_of(7) {
                let _ = q.peek_time();
                assert_eq!(q.peek_time(), reference.first().map(|r| r.0));
            } else if let Some((t, Event::FlowStart { flow })) = q.pop() {
                out.push((t, u64::from(flow)));
                want.push(reference.pop_first().unwrap());
            }
            assert_eq!(q.len(), reference.len());
        }
        while let Some((t, Event::FlowStart { flow })) = q.pop() {
            out.push((t, u64::from(flow)));
            want.push(reference.pop_first().unwrap());
        }
        assert_eq!(out, want);
        assert!(reference.is_empty());
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
