//! A port: one end of a full-duplex link with its egress side (eight
//! priority queues, a serializer, PFC pause state) and the counters a
//! switch ASIC keeps per port.

use crate::ecn::EcnConfig;
use crate::event::{PS_PER_S, Ps, ser_ps};

/// Priorities per port (802.1p).
pub const NPRIO: usize = 8;

/// Queues up to this many entries' room keep it (see [`Port::dequeue`]).
const QUEUE_SHRINK_FROM: usize = 32;
/// Queues shorter than this double when full; longer ones grow by a
/// quarter (see [`grow`]).
const QUEUE_GROW_BY_QUARTERS: usize = 64;

/// Entries a queue holds in its own line, before it needs its ring.
const INLINE: usize = 3;

/// The room of a full ring of `n` entries after it grows: short rings
/// double (from 4 entries), long ones take a quarter more. Queues hold
/// every buffered frame of the fabric (5.4 million 1.5 ms into WebSearch
/// on a k=32 fat tree, a hundred per switch port on average), and room
/// doubled as each grew, then halved only once three quarters stood empty,
/// came to 17.6 bytes per 8-byte entry. The copies this costs are of
/// 8-byte entries, a handful per frame queued.
fn grown(n: usize) -> usize {
    n + if n < QUEUE_GROW_BY_QUARTERS {
        n.max(4)
    } else {
        n / 4
    }
}

/// A FIFO of frames that keeps its first [`INLINE`] entries in itself
/// (in its queue's cache line) and only a longer backlog in a heap ring.
///
/// Most queues of a fabric below saturation hold a frame or two at a
/// time: kept inline, queueing and taking them reads no line besides the
/// queue's. A queue that grows past [`INLINE`] moves its frames to the
/// ring (kept once made, see [`Port::dequeue`]) and moves back inline
/// when it drains. Replaces a `VecDeque` (32 bytes of header, and a line
/// of its buffer for every frame).
#[derive(Debug, Clone)]
#[repr(C)]
struct Fifo {
    /// The ring; its length is its room (empty until first needed).
    ring: Box<[QEntry]>,
    /// Index of the first entry in `ring`, or [`Fifo::INLINE_MODE`]:
    /// the entries are `inline[..len]`.
    head: u32,
    len: u32,
    inline: [QEntry; INLINE],
}

impl Default for Fifo {
    fn default() -> Self {
        Fifo {
            ring: Box::default(),
            head: Self::INLINE_MODE,
            len: 0,
            inline: [QEntry::EMPTY; INLINE],
        }
    }
}

impl Fifo {
    const INLINE_MODE: u32 = u32::MAX;

    #[inline]
    fn len(&self) -> usize {
        self.len as usize
    }

    /// Room of the heap ring.
    fn capacity(&self) -> usize {
        self.ring.len()
    }

    /// Index in `ring` of entry `i` (`i` at most the ring's room).
    #[inline]
    fn at(&self, i: u32) -> usize {
        let j = self.head as usize + i as usize;
        if j >= self.ring.len() {
            j - self.ring.len()
        } else {
            j
        }
    }

    #[inline]
    fn push(&mut self, e: QEntry) {
        if self.head == Self::INLINE_MODE {
            if self.len() < INLINE {
                self.inline[self.len()] = e;
                self.len += 1;
                return;
            }
            self.spill();
        } else if self.len() == self.ring.len() {
            self.grow();
        }
        let i = self.at(self.len);
        self.ring[i] = e;
        self.len += 1;
    }

    /// Moves a full inline queue to the ring (made if it has no room).
    #[cold]
    #[inline(never)]
    fn spill(&mut self) {
        if self.ring.len() <= INLINE {
            self.ring = vec![QEntry::EMPTY; grown(self.ring.len())].into_boxed_slice();
        }
        self.ring[..INLINE].copy_from_slice(&self.inline);
        self.head = 0;
    }

    /// Makes room in a full ring, its entries copied in order to the start.
    #[cold]
    #[inline(never)]
    fn grow(&mut self) {
        self.resize(grown(self.ring.len()));
    }

    fn resize(&mut self, room: usize) {
        debug_assert!(room >= self.len());
        let mut ring = vec![QEntry::EMPTY; room].into_boxed_slice();
        for (k, slot) in ring.iter_mut().take(self.len()).enumerate() {
            *slot = self.ring[self.at(k as u32)];
        }
        self.ring = ring;
        self.head = 0;
    }

    #[inline]
    fn pop(&mut self) -> Option<QEntry> {
        if self.len == 0 {
            return None;
        }
        self.len -= 1;
        if self.head == Self::INLINE_MODE {
            let e = self.inline[0];
            self.inline.copy_within(1.., 0);
            return Some(e);
        }
        let e = self.ring[self.head as usize];
        self.head = self.at(1) as u32;
        if self.len == 0 {
            // Drained: the next frames go inline, and a backlog after
            // them to the ring's first slots again (written last, still
            // cached) instead of one cold line after another around it.
            self.head = Self::INLINE_MODE;
        }
        Some(e)
    }

    #[inline]
    fn front(&self) -> Option<&QEntry> {
        if self.len == 0 {
            None
        } else if self.head == Self::INLINE_MODE {
            Some(&self.inline[0])
        } else {
            Some(&self.ring[self.head as usize])
        }
    }

    #[inline]
    fn back(&self) -> Option<&QEntry> {
        let last = self.len.checked_sub(1)?;
        if self.head == Self::INLINE_MODE {
            self.inline.get(last as usize)
        } else {
            Some(&self.ring[self.at(last)])
        }
    }

    /// Gives back the room of a ring less than half used (see
    /// [`Port::dequeue`]).
    #[cold]
    #[inline(never)]
    fn shrink(&mut self) {
        let room = (self.len() + self.len() / 4).max(QUEUE_SHRINK_FROM);
        if self.head == Self::INLINE_MODE {
            self.ring = vec![QEntry::EMPTY; room].into_boxed_slice();
        } else {
            self.resize(room);
        }
    }
}

/// Picoseconds per byte at `rate_bps` if that is a whole number that
/// fits 16 bits (then `bytes × it` is exactly [`ser_ps`]), else 0.
fn exact_ps_per_byte(rate_bps: u64) -> u16 {
    if rate_bps > 0 && (8 * PS_PER_S).is_multiple_of(rate_bps) {
        u16::try_from(8 * PS_PER_S / rate_bps).unwrap_or(0)
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
    const EMPTY: QEntry = QEntry {
        pkt: 0,
        frame_markable: 0,
        ingress: 0,
    };

    pub fn new(pkt: u32, frame: u32, ingress: u16, markable: bool) -> QEntry {
        assert!(frame < u32::from(Self::MARKABLE), "frame of {frame} bytes");
        QEntry {
            pkt,
            frame_markable: frame as u16 | if markable { Self::MARKABLE } else { 0 },
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

/// One priority of a port's egress: its queue (with its first frames)
/// and what a queued packet of that priority reads and writes, in one
/// cache line.
#[derive(Debug, Clone, Default)]
#[repr(C, align(64))]
pub struct PrioQueue {
    /// Filled and drained only through [`Port::enqueue`] and
    /// [`Port::dequeue`], which keep `bytes` and the port's totals.
    queue: Fifo,
    /// Bytes queued.
    pub bytes: u64,
    /// Most bytes ever queued (kept by switches; frames passed through
    /// are in the port's `pt_max`).
    max_bytes: u64,
}

const _: () = assert!(std::mem::size_of::<PrioQueue>() == 64);

/// Egress state and counters of one port.
///
/// Laid out (`repr(C)`) so that a frame that finds its port idle — the
/// common case below saturation, where it goes straight to the serializer
/// ([`Port::pass_through`]) — touches one cache line of its port: the
/// first holds the serializer, the link, the totals, which queues hold
/// frames and which are paused, and the high-water marks of frames that
/// passed through. A queued frame also touches its priority's line (queue,
/// length, pause deadline, high-water mark). Counters and PFC bookkeeping
/// come after. At 8,192 hosts the queue lines were the simulator's largest
/// source of cache misses, most of them read for frames that were never
/// queued (the pause deadline by [`Port::idle_for`], the high-water mark
/// by the pass-through, the length by ECN and INT).
#[derive(Debug, Clone)]
#[repr(C)]
pub struct Port {
    /// The serializer is busy until this time.
    pub busy_until: Ps,
    pub delay_ps: Ps,
    pub tx_bytes: u64,
    /// `ecn`'s `kmin_bytes` (`u64::MAX` without ECN): queues up to this
    /// long are never marked, which the packet path checks on this line.
    ecn_kmin: u64,
    pub peer: u32,
    /// Packets queued, all priorities.
    npkts: u32,
    /// Picoseconds per byte when the rate divides 8 × 10¹² exactly and
    /// the quotient fits (every whole number of Gb/s that divides 8,000,
    /// down to 125 Mb/s), so serialization is one multiplication; 0 = use
    /// [`ser_ps`]'s division.
    ps_per_byte: u16,
    pub peer_port: u16,
    /// A `TxDone` wake-up is scheduled at `busy_until`.
    pub wake_pending: bool,
    /// Bit `q` set: queue `q` is not empty.
    nonempty: u8,
    /// Bit `q` set: queue `q` has a pause deadline (`paused_until` not 0),
    /// so an unpaused port never reads its queues' lines to know.
    paused: u8,
    /// Largest frame passed through each priority without being queued
    /// (see [`Port::pass_through`]; frames are under 2¹⁵ bytes). Part of
    /// the queue's high-water mark ([`Port::max_qbytes`]), kept here so a
    /// frame passing through writes no other line.
    pt_max: [u16; NPRIO],
    q: [PrioQueue; NPRIO],
    pub rate_bps: u64,
    pub rr_next: u8,
    pub visiting: bool,
    /// Paused by a received XOFF until this time (0 = not paused; set
    /// through [`Port::set_paused_until`], which keeps the mask `paused`).
    paused_until: [Ps; NPRIO],
    ecn: Option<EcnConfig>,
    /// Per-priority thresholds (`[switch.ecn_priority]`); a `None` entry
    /// uses `ecn`. Boxed and absent by default so the common port stays
    /// small.
    ecn_prio: Option<Box<[Option<EcnConfig>; NPRIO]>>,
    pub pause_version: [u32; NPRIO],
    /// When the current pause of each priority started (`Ps::MAX`: not
    /// paused); see [`Port::pause_started`].
    pause_started: [Ps; NPRIO],
    /// Time spent paused, per priority.
    pub paused_ps: [Ps; NPRIO],
    pub xoff_rx: [u64; NPRIO],
    pub xon_rx: [u64; NPRIO],
    pub xoff_tx: [u64; NPRIO],
    pub xon_tx: [u64; NPRIO],
    pub refresh_version: [u32; NPRIO],
    pub deficit: [i64; NPRIO],
}

/// The first line of a port holds what a frame passing through reads.
const _: () = assert!(std::mem::offset_of!(Port, q) == 64);

impl Port {
    pub fn new(peer: u32, peer_port: u16, rate_bps: u64, delay_ps: Ps) -> Port {
        Port {
            peer,
            peer_port,
            rate_bps,
            delay_ps,
            q: Default::default(),
            paused_until: [0; NPRIO],
            busy_until: 0,
            wake_pending: false,
            pause_version: [0; NPRIO],
            pause_started: [Ps::MAX; NPRIO],
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
            paused: 0,
            pt_max: [0; NPRIO],
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

    /// Starts loading the ECN thresholds (a line apart from the packet
    /// path's) if queue `prio` is long enough that its next frame may be
    /// marked, and says whether it is. A prefetch hint only: at 8,192
    /// hosts the thresholds' line missed the cache at every marking.
    #[inline]
    pub fn prefetch_marking(&self, prio: usize) -> bool {
        if self.q[prio & (NPRIO - 1)].bytes > self.ecn_kmin {
            crate::sim::prefetch_line(&self.ecn);
            true
        } else {
            false
        }
    }

    /// Bytes queued at `prio` (an empty queue's line is not read).
    #[inline]
    pub fn qbytes(&self, prio: usize) -> u64 {
        if self.holds(prio) {
            self.q[prio & (NPRIO - 1)].bytes
        } else {
            0
        }
    }

    /// Most bytes ever queued, per priority.
    pub fn max_qbytes(&self) -> [u64; NPRIO] {
        std::array::from_fn(|i| self.q[i].max_bytes.max(u64::from(self.pt_max[i])))
    }

    /// Raises queue `prio`'s high-water mark to what it holds now (a
    /// switch, after queueing a frame).
    #[inline]
    pub fn note_high_water(&mut self, prio: usize) {
        let q = &mut self.q[prio];
        q.max_bytes = q.max_bytes.max(q.bytes);
    }

    #[inline]
    pub fn is_paused(&self, prio: usize, now: Ps) -> bool {
        self.paused & (1 << (prio & (NPRIO - 1))) != 0 && self.paused_until[prio] > now
    }

    /// The pause deadline of `prio` (0: none).
    pub fn paused_until(&self, prio: usize) -> Ps {
        self.paused_until[prio]
    }

    /// Pauses `prio` until `until` (0: resumes it).
    pub fn set_paused_until(&mut self, prio: usize, until: Ps) {
        let bit = 1 << (prio & (NPRIO - 1));
        self.paused_until[prio] = until;
        if until == 0 {
            self.paused &= !bit;
        } else {
            self.paused |= bit;
        }
    }

    /// When `prio`'s current pause started, if it is paused.
    pub fn pause_started(&self, prio: usize) -> Option<Ps> {
        let s = self.pause_started[prio];
        (s != Ps::MAX).then_some(s)
    }

    /// `prio` is paused from `now` (unless it already was).
    pub fn start_pause(&mut self, prio: usize, now: Ps) {
        if self.pause_started[prio] == Ps::MAX {
            self.pause_started[prio] = now;
        }
    }

    /// `prio`'s pause (if any) ends at `now`: its time joins `paused_ps`.
    pub fn end_pause(&mut self, prio: usize, now: Ps) {
        if let Some(s) = self.pause_started(prio) {
            self.paused_ps[prio] += now - s;
            self.pause_started[prio] = Ps::MAX;
        }
    }

    /// The line of queue `prio` (for prefetching).
    #[inline]
    pub fn queue_line(&self, prio: usize) -> &PrioQueue {
        &self.q[prio & (NPRIO - 1)]
    }

    /// The link's rate, from the first line when it can be: `ps_per_byte`
    /// is an exact quotient of it (INT stamps it on every hop).
    #[inline]
    pub fn link_bps(&self) -> u64 {
        if self.ps_per_byte != 0 {
            8 * PS_PER_S / u64::from(self.ps_per_byte)
        } else {
            self.rate_bps
        }
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

    /// The tail of queue `prio`, where the next frame is appended (for
    /// prefetching).
    #[inline]
    pub fn tail(&self, prio: usize) -> Option<&QEntry> {
        self.q.get(prio)?.queue.back()
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
    /// queued and taken at once: the queue's high-water mark sees it (in
    /// `pt_max`: the queue is empty, so it would have held `frame` bytes).
    #[inline]
    pub fn pass_through(&mut self, prio: usize, e: &QEntry) {
        debug_assert!(!self.holds(prio));
        let m = &mut self.pt_max[prio & (NPRIO - 1)];
        // A frame's length is 15 bits (see `QEntry`).
        *m = (*m).max(e.frame_markable & !QEntry::MARKABLE);
    }

    /// Appends `e` to queue `prio`.
    #[inline]
    pub fn enqueue(&mut self, prio: usize, e: QEntry) {
        let q = &mut self.q[prio];
        q.queue.push(e);
        q.bytes += u64::from(e.frame());
        self.nonempty |= 1 << prio;
        self.npkts += 1;
    }

    /// Takes the head of queue `prio`.
    #[inline]
    pub fn dequeue(&mut self, prio: usize) -> Option<QEntry> {
        let q = &mut self.q[prio];
        let e = q.queue.pop()?;
        q.bytes -= u64::from(e.frame());
        if q.queue.len() == 0 {
            self.nonempty &= !(1 << prio);
        }
        // A queue keeps the room its longest backlog needed; over a long
        // congested run (no CC + PFC on a k=32 fat tree) backlogs move from
        // port to port and every port would hold its own high-water mark.
        // Once half stands empty, keep a quarter more than is left (the
        // copy moves what is left, after at least a third as many frames
        // left since the queue last changed size).
        let (len, cap) = (q.queue.len(), q.queue.capacity());
        if cap > QUEUE_SHRINK_FROM && len < cap / 2 {
            q.queue.shrink();
        }
        self.npkts -= 1;
        Some(e)
    }

    /// Time to serialize `bytes` on this port ([`ser_ps`] at its rate).
    #[inline]
    pub fn ser(&self, bytes: u64) -> Ps {
        if self.ps_per_byte != 0 {
            bytes * u64::from(self.ps_per_byte)
        } else {
            ser_ps(bytes, self.rate_bps)
        }
    }

    /// Bytes waiting in all queues.
    pub fn queued_bytes(&self) -> u64 {
        self.q.iter().map(|q| q.bytes).sum()
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

    /// Frames move from a queue's own line to its ring and back as its
    /// backlog crosses what the line holds, in order, with `head` and
    /// `tail` naming the frames that leave and arrived last.
    #[test]
    fn a_queue_spills_to_its_ring_and_back_in_order() {
        let mut p = Port::new(1, 0, 100_000_000_000, 1_000_000);
        let (mut next_in, mut next_out) = (0u32, 0u32);
        for round in 0..40u32 {
            // Bursts of 1..=9 around the inline room, drained to 0..=2.
            for _ in 0..1 + round % 9 {
                p.enqueue(5, QEntry::new(next_in, 64 + next_in % 100, 1, false));
                assert_eq!(p.tail(5).map(|e| e.pkt), Some(next_in));
                next_in += 1;
            }
            while p.queue_len(5) > (round % 3) as usize {
                assert_eq!(p.head(5).map(|e| e.pkt), Some(next_out));
                let e = p.dequeue(5).expect("queued");
                assert_eq!((e.pkt, e.frame()), (next_out, 64 + next_out % 100));
                next_out += 1;
            }
            let want: u64 = (next_out..next_in).map(|i| u64::from(64 + i % 100)).sum();
            assert_eq!((p.qbytes(5), p.queued_pkts()), (want, p.queue_len(5)));
        }
        while p.dequeue(5).is_some() {
            next_out += 1;
        }
        assert_eq!((next_out, p.head(5), p.tail(5)), (next_in, None, None));
    }

    /// A frame skips the queue only where strict priority would pick it
    /// at once, and the queue's high-water mark still sees it.
    #[test]
    fn only_a_free_empty_unpaused_port_passes_a_frame_through() {
        let mut p = Port::new(1, 0, 100_000_000_000, 1_000_000);
        assert!(p.idle_for(3, 0));
        p.pass_through(3, &QEntry::new(9, 1048, 0, true));
        assert_eq!(
            (p.max_qbytes()[3], p.queued_pkts(), p.qbytes(3)),
            (1048, 0, 0)
        );
        p.busy_until = 10;
        assert!(!p.idle_for(3, 5), "serializer busy");
        assert!(p.idle_for(3, 10));
        p.set_paused_until(3, 20);
        assert!(!p.idle_for(3, 10), "paused");
        assert!(p.idle_for(6, 10));
        p.enqueue(0, QEntry::new(7, 64, 0, false));
        assert!(!p.idle_for(6, 10), "a frame waits (paused or not)");
        assert_eq!(p.dequeue(0).map(|e| e.pkt), Some(7));
        assert!(p.idle_for(6, 10));
        p.set_paused_until(3, 0);
        assert!(p.idle_for(3, 10), "resumed");
        // Pause time: from the first XOFF of a pause to its end.
        p.start_pause(3, 10);
        p.start_pause(3, 15);
        assert_eq!(p.pause_started(3), Some(10));
        p.end_pause(3, 30);
        p.end_pause(3, 40);
        assert_eq!((p.pause_started(3), p.paused_ps[3]), (None, 20));
        // The high-water mark is the larger of what passed through and
        // what was queued.
        for i in 0..2 {
            p.enqueue(3, QEntry::new(i, 500, 0, false));
            p.note_high_water(3);
        }
        assert_eq!(p.max_qbytes()[3], 1048);
        p.enqueue(3, QEntry::new(2, 500, 0, false));
        p.note_high_water(3);
        assert_eq!((p.max_qbytes()[3], p.qbytes(3)), (1500, 1500));
        while p.dequeue(3).is_some() {}
        assert_eq!((p.max_qbytes()[3], p.qbytes(3)), (1500, 0));
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
