//! A port: one end of a full-duplex link with its egress side (eight
//! priority queues, a serializer, PFC pause state) and the counters a
//! switch ASIC keeps per port.

use crate::ecn::EcnConfig;
use crate::event::{PS_PER_S, Ps, ser_ps};
use std::collections::VecDeque;

/// Priorities per port (802.1p).
pub const NPRIO: usize = 8;

/// Queues up to this many entries' room keep it (see [`Port::dequeue`]).
const QUEUE_SHRINK_FROM: usize = 32;
/// Queues shorter than this double when full; longer ones grow by a
/// quarter (see [`grow`]).
const QUEUE_GROW_BY_QUARTERS: usize = 64;

/// Makes room in full queue `q`: short queues double (from 4 entries, as
/// `VecDeque` does), long ones take a quarter more. Queues hold every
/// buffered frame of the fabric (5.4 million 1.5 ms into WebSearch on a
/// k=32 fat tree, a hundred per switch port on average), and room doubled
/// as each grew, then halved only once three quarters stood empty, came
/// to 17.6 bytes per 8-byte entry. The copies this costs are of 8-byte
/// entries, a handful per frame queued.
#[cold]
#[inline(never)]
fn grow(q: &mut VecDeque<QEntry>) {
    let n = q.len();
    q.reserve_exact(if n < QUEUE_GROW_BY_QUARTERS {
        n.max(4)
    } else {
        n / 4
    });
}

/// Gives back the room of a queue that has drained to less than half of
/// it (see [`Port::dequeue`]).
#[cold]
#[inline(never)]
fn shrink(q: &mut VecDeque<QEntry>) {
    q.shrink_to((q.len() + q.len() / 4).max(QUEUE_SHRINK_FROM));
}

/// Picoseconds per byte at `rate_bps` if that is a whole number (then
/// `bytes × it` is exactly [`ser_ps`]), else 0.
fn exact_ps_per_byte(rate_bps: u64) -> u64 {
    if rate_bps > 0 && (8 * PS_PER_S).is_multiple_of(rate_bps) {
        8 * PS_PER_S / rate_bps
    } else {
        0
    }
}

/// A queued frame: its packet slot and what the egress side needs without
/// touching the packet, which by the time it leaves has usually dropped out
/// of the cache: frame length, the ingress port whose buffer account it is
/// charged to, and whether ECN may mark it.
/// Eight bytes, as queues hold every buffered packet of the fabric.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct QEntry {
    pub pkt: u32,
    /// Frame length in the low 15 bits (a RoCEv2 frame is at most a
    /// 4 KiB payload plus headers); the top bit: ECN-capable and not yet
    /// marked CE.
    frame_markable: u16,
    pub ingress: u16,
}

impl QEntry {
    const MARKABLE: u16 = 1 << 15;

    pub fn new(pkt: u32, frame: u32, ingress: u16, markable: bool) -> QEntry {
        assert!(frame < u32::from(Self::MARKABLE), "frame of {frame} bytes");
        QEntry {
            pkt,
            // The flag set without a branch: data and ACKs (one markable,
            // the other not) arrive in no order a predictor learns.
            frame_markable: frame as u16 | (u16::from(markable) << 15),
            ingress,
        }
    }

    pub fn frame(&self) -> u32 {
        u32::from(self.frame_markable & !Self::MARKABLE)
    }

    /// ECN may mark it (ECN-capable and not already CE).
    pub fn markable(&self) -> bool {
        self.frame_markable & Self::MARKABLE != 0
    }
}

/// How an egress port chooses among its non-empty, unpaused queues.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scheduler {
    /// Highest priority first.
    Strict,
    /// Priorities at or above `strict_from` are served strictly first; the
    /// rest share by deficit-weighted round robin with `weights` (bytes per
    /// round = weight × 1500; Shreedhar & Varghese, SIGCOMM 1995).
    Dwrr {
        strict_from: u8,
        weights: [u32; NPRIO],
    },
}

/// One priority of a port's egress: its queue and what a packet of that
/// priority reads and writes, in one cache line.
#[derive(Debug, Clone, Default)]
#[repr(C, align(64))]
pub struct PrioQueue {
    /// Filled and drained only through [`Port::enqueue`] and
    /// [`Port::dequeue`], which keep `bytes` and the port's totals.
    queue: VecDeque<QEntry>,
    /// Bytes queued.
    pub bytes: u64,
    /// Paused by a received XOFF until this time (0 = not paused).
    pub paused_until: Ps,
    /// Most bytes ever queued (kept by switches).
    pub max_bytes: u64,
}

/// Egress state and counters of one port.
///
/// Laid out (`repr(C)`) so that a packet touches two cache lines of its
/// port: the first holds the serializer, the link and the totals, and
/// each priority's queue, length and pause deadline share a line of their
/// own; counters and PFC bookkeeping come after.
///
/// A measured dead end (session 18, commits fd57430 and c42135c):
/// keeping what a frame that passes an idle port through reads on the
/// first line (a paused-priority mask, the pass-through high-water marks;
/// queue lines read only for frames that are queued) and the first three
/// frames of each queue inline in its line (a FIFO spilling to a heap
/// ring) instead of a `VecDeque`. Outputs were identical, but on the k=32
/// fat tree the simulator ran 1-2 % slower (user time, both binaries side
/// by side, cut at 500 µs and 1 ms): the look-ahead already prefetches
/// these lines, and the misses cachegrind counted on them (it does not
/// model prefetches) were not where the time went. Cachegrind's own count
/// did not fall either (LL misses 56.2 M before, 56.8 M after, k=32 cut
/// at 100 µs).
#[derive(Debug, Clone)]
#[repr(C)]
pub struct Port {
    /// The serializer is busy until this time.
    pub busy_until: Ps,
    pub delay_ps: Ps,
    pub tx_bytes: u64,
    /// Picoseconds per byte when the rate divides 8 × 10¹² exactly (every
    /// whole number of Gb/s that divides 8,000), so serialization is one
    /// multiplication; 0 = use [`ser_ps`]'s division.
    ps_per_byte: u64,
    /// `ecn`'s `kmin_bytes` (`u64::MAX` without ECN): queues up to this
    /// long are never marked, which the packet path checks on this line.
    ecn_kmin: u64,
    pub peer: u32,
    /// Packets queued, all priorities.
    npkts: u32,
    pub peer_port: u16,
    /// A `TxDone` wake-up is scheduled at `busy_until`.
    pub wake_pending: bool,
    pub rr_next: u8,
    pub visiting: bool,
    /// Bit `q` set: queue `q` is not empty.
    nonempty: u8,
    /// `rate_bps`'s place in the simulator's table of link rates, which
    /// an INT stamp records ([`crate::packet::IntStamp::rate`]); in what
    /// was this line's padding.
    pub int_rate: u16,
    pub rate_bps: u64,
    pub q: [PrioQueue; NPRIO],
    ecn: Option<EcnConfig>,
    /// Per-priority thresholds (`[switch.ecn_priority]`); a `None` entry
    /// uses `ecn`. Boxed and absent by default so the common port stays
    /// small.
    ecn_prio: Option<Box<[Option<EcnConfig>; NPRIO]>>,
    pub pause_version: [u32; NPRIO],
    pub pause_started: [Option<Ps>; NPRIO],
    /// Time spent paused, per priority.
    pub paused_ps: [Ps; NPRIO],
    pub xoff_rx: [u64; NPRIO],
    pub xon_rx: [u64; NPRIO],
    pub xoff_tx: [u64; NPRIO],
    pub xon_tx: [u64; NPRIO],
    pub refresh_version: [u32; NPRIO],
    pub deficit: [i64; NPRIO],
}

impl Port {
    pub fn new(peer: u32, peer_port: u16, rate_bps: u64, delay_ps: Ps) -> Port {
        Port {
            peer,
            peer_port,
            rate_bps,
            delay_ps,
            q: Default::default(),
            busy_until: 0,
            wake_pending: false,
            pause_version: [0; NPRIO],
            pause_started: [None; NPRIO],
            paused_ps: [0; NPRIO],
            xoff_rx: [0; NPRIO],
            xon_rx: [0; NPRIO],
            xoff_tx: [0; NPRIO],
            xon_tx: [0; NPRIO],
            refresh_version: [0; NPRIO],
            tx_bytes: 0,
            ps_per_byte: exact_ps_per_byte(rate_bps),
            ecn_kmin: u64::MAX,
            nonempty: 0,
            int_rate: 0,
            npkts: 0,
            ecn: None,
            ecn_prio: None,
            deficit: [0; NPRIO],
            rr_next: 0,
            visiting: false,
        }
    }

    /// RED marking thresholds of this port's egress queues.
    pub fn ecn(&self) -> Option<EcnConfig> {
        self.ecn
    }

    pub fn set_ecn(&mut self, ecn: Option<EcnConfig>) {
        self.ecn = ecn;
        self.ecn_kmin = ecn.map_or(u64::MAX, |e| e.kmin_bytes);
        if let Some(t) = &self.ecn_prio {
            self.ecn_kmin = self.ecn_kmin.min(Self::min_kmin(t));
        }
    }

    /// Gives some priorities their own thresholds (the reference text's
    /// "ECN thresholds per queue"); priorities left `None` keep the port's.
    pub fn set_ecn_prio(&mut self, t: [Option<EcnConfig>; NPRIO]) {
        self.ecn_prio = t.iter().any(Option::is_some).then(|| Box::new(t));
        self.set_ecn(self.ecn);
    }

    fn min_kmin(t: &[Option<EcnConfig>; NPRIO]) -> u64 {
        t.iter()
            .flatten()
            .map(|e| e.kmin_bytes)
            .min()
            .unwrap_or(u64::MAX)
    }

    /// The thresholds of queue `prio`.
    pub fn ecn_of(&self, prio: usize) -> Option<EcnConfig> {
        match &self.ecn_prio {
            Some(t) => t[prio & (NPRIO - 1)].or(self.ecn),
            None => self.ecn,
        }
    }

    /// The marking thresholds of queue `prio` if a queue of `qlen` bytes
    /// may be marked (ECN is on and `qlen` is above the smallest `kmin`;
    /// the caller still applies the queue's own curve).
    #[inline]
    pub fn ecn_above_kmin(&self, prio: usize, qlen: u64) -> Option<EcnConfig> {
        if qlen > self.ecn_kmin {
            self.ecn_of(prio)
        } else {
            None
        }
    }

    /// Frames queued at priorities paused at `now`.
    pub fn paused_pkts(&self, now: Ps) -> usize {
        (0..NPRIO)
            .filter(|&p| self.is_paused(p, now))
            .map(|p| self.q[p].queue.len())
            .sum()
    }

    /// Bytes queued at `prio`.
    #[inline]
    pub fn qbytes(&self, prio: usize) -> u64 {
        self.q[prio].bytes
    }

    /// Most bytes ever queued, per priority.
    pub fn max_qbytes(&self) -> [u64; NPRIO] {
        std::array::from_fn(|i| self.q[i].max_bytes)
    }

    #[inline]
    pub fn is_paused(&self, prio: usize, now: Ps) -> bool {
        self.q[prio].paused_until > now
    }

    /// Whether queue `prio` holds a frame (read from the serializer's
    /// line, not the queue's).
    #[inline]
    pub fn holds(&self, prio: usize) -> bool {
        self.nonempty & (1 << (prio & (NPRIO - 1))) != 0
    }

    /// Heap bytes of the queues (the port itself is counted apart).
    pub fn heap_bytes(&self) -> u64 {
        let entries: usize = self.q.iter().map(|q| q.queue.capacity()).sum();
        (entries * std::mem::size_of::<QEntry>()) as u64
            + self
                .ecn_prio
                .as_ref()
                .map_or(0, |b| std::mem::size_of_val(&**b) as u64)
    }

    /// Packets waiting in all queues.
    pub fn queued_pkts(&self) -> usize {
        self.npkts as usize
    }

    /// Packets waiting at `prio`.
    pub fn queue_len(&self, prio: usize) -> usize {
        self.q[prio].queue.len()
    }

    /// The head of queue `prio` (for prefetching: the next frame to leave
    /// and its ingress account).
    #[inline]
    pub fn head(&self, prio: usize) -> Option<&QEntry> {
        self.q.get(prio)?.queue.front()
    }

    /// A frame for `prio` would leave at once with strict priority: the
    /// serializer is free at `now`, every queue is empty and `prio` is
    /// not paused. It may then skip the queue ([`Port::pass_through`]).
    #[inline]
    pub fn idle_for(&self, prio: usize, now: Ps) -> bool {
        self.busy_until <= now && self.nonempty == 0 && !self.is_paused(prio, now)
    }

    /// Books a frame of `frame` bytes that goes straight to the
    /// serializer of an [`idle_for`](Self::idle_for) port as if it had been
    /// queued and taken at once: the queue's high-water mark sees it.
    #[inline]
    pub fn pass_through(&mut self, prio: usize, frame: u32) {
        let q = &mut self.q[prio];
        q.max_bytes = q.max_bytes.max(q.bytes + u64::from(frame));
    }

    /// Appends `e` to queue `prio`.
    #[inline]
    pub fn enqueue(&mut self, prio: usize, e: QEntry) {
        let q = &mut self.q[prio];
        if q.queue.len() == q.queue.capacity() {
            grow(&mut q.queue);
        }
        q.queue.push_back(e);
        q.bytes += u64::from(e.frame());
        self.nonempty |= 1 << prio;
        self.npkts += 1;
    }

    /// Takes the head of queue `prio`.
    #[inline]
    pub fn dequeue(&mut self, prio: usize) -> Option<QEntry> {
        let q = &mut self.q[prio];
        let e = q.queue.pop_front()?;
        q.bytes -= u64::from(e.frame());
        if q.queue.is_empty() {
            self.nonempty &= !(1 << prio);
            // Start the ring over at its first slot (`clear` on an empty
            // deque only resets its head): a queue that drains between
            // packets, as most do, then writes its next frame to the line
            // it wrote last, still cached, instead of walking a ring
            // sized by its longest backlog one cold line after another.
            q.queue.clear();
        }
        // A queue keeps the room its longest backlog needed; over a long
        // congested run (no CC + PFC on a k=32 fat tree) backlogs move from
        // port to port and every port would hold its own high-water mark.
        // Once half stands empty, keep a quarter more than is left (the
        // copy moves what is left, after at least a third as many frames
        // left since the queue last changed size).
        let (len, cap) = (q.queue.len(), q.queue.capacity());
        if cap > QUEUE_SHRINK_FROM && len < cap / 2 {
            shrink(&mut q.queue);
        }
        self.npkts -= 1;
        Some(e)
    }

    /// Time to serialize `bytes` on this port ([`ser_ps`] at its rate).
    #[inline]
    pub fn ser(&self, bytes: u64) -> Ps {
        if self.ps_per_byte != 0 {
            bytes * self.ps_per_byte
        } else {
            ser_ps(bytes, self.rate_bps)
        }
    }

    /// Bytes waiting in all queues: the non-empty ones' (an empty queue
    /// holds none), found from the serializer's line.
    ///
    /// Why: an HPCC switch stamps every data packet with this (ns-3's
    /// INT records the port's whole egress queue), and the sum over all
    /// eight priorities read eight cache lines, seven of them queues that
    /// hold nothing. Only 30 M fewer instructions of the 1 ms HPCC fat
    /// tree's 15.30 G (callgrind), but about 4 % less time on the 5 ms
    /// run: 8.12-8.29 s of user time against 8.38-8.69 s, six interleaved
    /// pairs, outputs identical (session 41).
    #[inline]
    pub fn queued_bytes(&self) -> u64 {
        let mut sum = 0;
        let mut m = self.nonempty;
        while m != 0 {
            sum += self.q[m.trailing_zeros() as usize & (NPRIO - 1)].bytes;
            m &= m - 1;
        }
        sum
    }

    /// The queue to serve next, if any may send at `now`.
    #[inline]
    pub fn pick(&mut self, now: Ps, sched: &Scheduler) -> Option<usize> {
        match sched {
            Scheduler::Strict => {
                // The highest non-empty queue that is not paused.
                let mut m = self.nonempty;
                while m != 0 {
                    let q = 7 - m.leading_zeros() as usize;
                    if !self.is_paused(q, now) {
                        return Some(q);
                    }
                    m &= !(1 << q);
                }
                None
            }
            Scheduler::Dwrr {
                strict_from,
                weights,
            } => self.pick_dwrr(now, *strict_from, weights),
        }
    }

    #[inline(never)]
    fn pick_dwrr(&mut self, now: Ps, strict_from: u8, weights: &[u32; NPRIO]) -> Option<usize> {
        let ready = |p: &Port, q: usize| p.nonempty & (1 << q) != 0 && !p.is_paused(q, now);
        let sf = usize::from(strict_from).min(NPRIO);
        if let Some(q) = (sf..NPRIO).rev().find(|&q| ready(self, q)) {
            return Some(q);
        }
        if !(0..sf).any(|q| ready(self, q)) {
            return None;
        }
        // Deficit round robin: a visit adds one quantum; the queue
        // is served while its deficit covers the head packet.
        loop {
            let q = usize::from(self.rr_next) % sf;
            if ready(self, q) {
                if !self.visiting {
                    self.deficit[q] += i64::from(weights[q].max(1)) * 1500;
                    self.visiting = true;
                }
                let head = self.q[q].queue.front().map_or(0, |e| i64::from(e.frame()));
                if self.deficit[q] >= head {
                    self.deficit[q] -= head;
                    return Some(q);
                }
            } else {
                self.deficit[q] = 0;
            }
            self.visiting = false;
            self.rr_next = ((q + 1) % sf) as u8;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A queue that fills and drains over and over (the room moving up
    /// and down, wrapped around its buffer) still hands frames back in
    /// the order they came.
    #[test]
    fn a_breathing_queue_stays_in_order() {
        let mut p = Port::new(1, 0, 100_000_000_000, 1_000_000);
        let (mut next_in, mut next_out) = (0u32, 0u32);
        let mut x = 7u32;
        for _ in 0..400 {
            x ^= x << 13;
            x ^= x >> 17;
            x ^= x << 5;
            let (adds, takes) = (x % 300, (x >> 9) % 300);
            for _ in 0..adds {
                p.enqueue(3, QEntry::new(next_in, 66, 2, true));
                next_in += 1;
            }
            for _ in 0..takes {
                let Some(e) = p.dequeue(3) else { break };
                assert_eq!(
                    (e.pkt, e.frame(), e.ingress, e.markable()),
                    (next_out, 66, 2, true)
                );
                next_out += 1;
            }
            assert_eq!(p.queue_len(3), (next_in - next_out) as usize);
        }
    }

    /// The port's queued bytes, read from the non-empty queues only, are
    /// every queue's bytes added up, as frames of every size come and go
    /// at every priority (and none once all have left).
    #[test]
    fn queued_bytes_add_up_over_every_priority() {
        let mut p = Port::new(1, 0, 100_000_000_000, 1_000_000);
        let mut x = 11u32;
        let mut n = 0u32;
        for _ in 0..3000 {
            x ^= x << 13;
            x ^= x >> 17;
            x ^= x << 5;
            let prio = (x % NPRIO as u32) as usize;
            if (x >> 8).is_multiple_of(3) {
                p.dequeue(prio);
            } else {
                p.enqueue(prio, QEntry::new(n, 64 + (x >> 12) % 4000, 0, false));
                n += 1;
            }
            let each: u64 = (0..NPRIO).map(|q| p.qbytes(q)).sum();
            assert_eq!(p.queued_bytes(), each);
        }
        assert!(p.queued_bytes() > 0, "the walk left frames queued");
        for prio in 0..NPRIO {
            while p.dequeue(prio).is_some() {}
        }
        assert_eq!(p.queued_bytes(), 0);
    }

    /// A frame skips the queue only where strict priority would pick it
    /// at once, and the queue's high-water mark still sees it.
    #[test]
    fn only_a_free_empty_unpaused_port_passes_a_frame_through() {
        let mut p = Port::new(1, 0, 100_000_000_000, 1_000_000);
        assert!(p.idle_for(3, 0));
        p.pass_through(3, 1048);
        assert_eq!(
            (p.max_qbytes()[3], p.queued_pkts(), p.qbytes(3)),
            (1048, 0, 0)
        );
        p.busy_until = 10;
        assert!(!p.idle_for(3, 5), "serializer busy");
        assert!(p.idle_for(3, 10));
        p.q[3].paused_until = 20;
        assert!(!p.idle_for(3, 10), "paused");
        assert!(p.idle_for(6, 10));
        p.enqueue(0, QEntry::new(7, 64, 0, false));
        assert!(!p.idle_for(6, 10), "a frame waits (paused or not)");
        assert_eq!(p.dequeue(0).map(|e| e.pkt), Some(7));
        assert!(p.idle_for(6, 10));
    }

    #[test]
    fn a_drained_queue_gives_its_room_back_in_order() {
        let mut p = Port::new(1, 0, 100_000_000_000, 1_000_000);
        let n = 20_000u32;
        for i in 0..n {
            p.enqueue(3, QEntry::new(i, 1000 + i % 7, 0, false));
        }
        let full = p.heap_bytes();
        assert!(full >= u64::from(n) * 8);
        // Grown by quarters, not doubled.
        let n = n as usize;
        assert!(p.q[3].queue.capacity() <= n + n / 4);
        for i in 0..n as u32 {
            let e = p.dequeue(3).expect("queued");
            assert_eq!((e.pkt, e.frame()), (i, 1000 + i % 7));
            // Room shrinks as the backlog drains, never below what is left
            // nor above twice that.
            let (len, cap) = (p.queue_len(3), p.q[3].queue.capacity());
            assert!(len <= cap && cap <= (2 * len + 1).max(QUEUE_SHRINK_FROM));
        }
        assert_eq!((p.queued_pkts(), p.qbytes(3)), (0, 0));
        assert!(
            p.heap_bytes() <= (QUEUE_SHRINK_FROM as u64) * 8,
            "{} bytes kept of {full}",
            p.heap_bytes()
        );
    }
}
