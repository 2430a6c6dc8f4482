//! Dense per-device tables for the hot path: QPs indexed by QPN and the set
//! of QPs ready to transmit. QPNs are handed out sequentially, so a vector
//! indexed by QPN gives O(1) lookups where a tree map cost a search per
//! packet; iteration order is still by QPN, exactly as a `BTreeMap` gives.

use crate::qp::Qp;
use crate::types::Nanos;
use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::collections::binary_heap::PeekMut;

/// QPs by number (`BTreeMap<u32, Qp>`'s interface, as much as the RNIC
/// uses), stored inline: the slot of a QPN is the QP itself, so the one
/// address a driver's cache hint names (see [`crate::prefetch`]) is the
/// QP's first lines, where boxed QPs took a load of the slot's pointer
/// and then a second miss for what it points at, per packet at 8,192
/// hosts.
///
/// A destroyed QP leaves a tombstone (a QP whose number is [`DEAD`]) in
/// its slot rather than an `Option`'s `None`: a lookup compares the
/// number, and a slot is a QP's size, with no discriminant to pad it.
/// QPNs are handed out in order and never again, so the slots are a
/// window over the QPNs that may still be live, from `base`: the dead
/// ones at its front are dropped once they are a quarter of it, and those
/// at its back at once (a long run creates a QP per flow end, and kept,
/// the dead ones grew the k=32 run's heap by a tenth). A `Vec`, not a
/// `VecDeque`: the deque's index arithmetic on every lookup cost 0.9 %
/// more instructions on the 320-host HPCC fat tree (callgrind).
#[derive(Default)]
pub(crate) struct QpTable {
    slots: Vec<Qp>,
    /// QPN of `slots[0]`.
    base: u32,
    /// Live QPs.
    len: usize,
    /// Tombstones at the front of `slots` (`slots[..lead]`).
    lead: usize,
}

/// The number of a tombstone: above every QPN (24 bits).
pub(crate) const DEAD: u32 = u32::MAX;

impl QpTable {
    pub fn insert(&mut self, qpn: u32, qp: Qp) {
        debug_assert_ne!(qpn, DEAD);
        if self.slots.is_empty() {
            self.base = qpn;
            self.lead = 0;
        }
        // QPNs come in order; one below the window widens it at the front.
        if qpn < self.base {
            let n = (self.base - qpn) as usize;
            self.slots
                .splice(0..0, std::iter::repeat_with(Qp::tombstone).take(n));
            self.base = qpn;
            self.lead += n;
        }
        let i = (qpn - self.base) as usize;
        if i >= self.slots.len() {
            while self.slots.len() < i {
                self.push(Qp::tombstone());
            }
            self.push(qp);
            self.len += 1;
        } else if std::mem::replace(&mut self.slots[i], qp).qpn == DEAD {
            self.len += 1;
        }
        while self.slots.get(self.lead).is_some_and(|q| q.qpn == DEAD) {
            self.lead += 1;
        }
        if i < self.lead {
            self.lead = i;
        }
    }
    /// Appends a slot, growing by a quarter: a slot is a whole QP, and a
    /// `Vec`'s own growth (to four slots at first, then doubling) left
    /// most hosts' tables with more spare slots than QPs (+11 % peak heap
    /// on the k=32 run cut at 300 µs).
    fn push(&mut self, qp: Qp) {
        if self.slots.len() == self.slots.capacity() {
            self.slots.reserve_exact(1 + self.slots.len() / 4);
        }
        self.slots.push(qp);
    }
    /// Removes `qpn`; false when there is no such QP.
    pub fn remove(&mut self, qpn: &u32) -> bool {
        let Some(s) = self.slot_mut(*qpn) else {
            return false;
        };
        drop(std::mem::replace(s, Qp::tombstone()));
        self.len -= 1;
        while self.slots.last().is_some_and(|q| q.qpn == DEAD) {
            self.slots.pop();
        }
        while self.slots.get(self.lead).is_some_and(|q| q.qpn == DEAD) {
            self.lead += 1;
        }
        self.lead = self.lead.min(self.slots.len());
        if self.lead > 0 && self.lead * 4 >= self.slots.len() {
            self.slots.drain(..self.lead);
            self.base += self.lead as u32;
            self.lead = 0;
        }
        // The window spanned more QPs once: give back what it spans no
        // more (kept, the capacity after a burst of flows is never used
        // again).
        let n = self.slots.len();
        if self.slots.capacity() > n + n / 2 + 1 {
            self.slots.shrink_to(n + n / 4 + 1);
        }
        true
    }
    #[inline]
    fn slot_mut(&mut self, qpn: u32) -> Option<&mut Qp> {
        let q = self.slots.get_mut(qpn.wrapping_sub(self.base) as usize)?;
        (q.qpn == qpn).then_some(q)
    }
    #[inline]
    pub fn get(&self, qpn: &u32) -> Option<&Qp> {
        let q = self.slots.get(qpn.wrapping_sub(self.base) as usize)?;
        (q.qpn == *qpn).then_some(q)
    }
    #[inline]
    pub fn get_mut(&mut self, qpn: &u32) -> Option<&mut Qp> {
        self.slot_mut(*qpn)
    }
    /// Starts loading the hot lines of QP `qpn` (a cache hint; see
    /// [`crate::prefetch`]): its slot is the QP itself.
    #[inline]
    pub fn prefetch_slot(&self, hint: crate::prefetch::Hint, qpn: u32) {
        if let Some(q) = self.slots.get(qpn.wrapping_sub(self.base) as usize) {
            let p = q as *const Qp as *const u8;
            for i in 0..crate::qp::HOT_BYTES / 64 {
                hint(p.wrapping_add(i * 64));
            }
        }
    }
    pub fn len(&self) -> usize {
        self.len
    }
    pub fn values(&self) -> impl Iterator<Item = &Qp> {
        self.slots.iter().filter(|q| q.qpn != DEAD)
    }
    /// Heap bytes of the slots no live QP fills (tombstones and spare
    /// capacity): the live QPs themselves are counted apart.
    pub fn heap_bytes(&self) -> u64 {
        ((self.slots.capacity() - self.len) * std::mem::size_of::<Qp>()) as u64
    }
}

/// A set of QPNs with "next member at or after n" in QPN order, as a bitmap.
#[derive(Default)]
pub(crate) struct ReadySet {
    words: Vec<u64>,
    len: usize,
}

impl ReadySet {
    /// Adds `qpn`. The count moves by the bit's change rather than under
    /// a test of it: whether a QP was already ready when a packet touches
    /// it is a coin toss, and the branch mispredicted about once per
    /// packet received (issue 12).
    #[inline]
    pub fn insert(&mut self, qpn: u32) {
        let (w, b) = ((qpn / 64) as usize, qpn % 64);
        if self.words.len() <= w {
            self.words.resize(w + 1, 0);
        }
        let word = &mut self.words[w];
        self.len += (((*word >> b) & 1) ^ 1) as usize;
        *word |= 1 << b;
    }
    /// Removes `qpn` (if a member), without a branch on whether it was.
    #[inline]
    pub fn remove(&mut self, qpn: &u32) {
        let (w, b) = ((*qpn / 64) as usize, *qpn % 64);
        if let Some(word) = self.words.get_mut(w) {
            self.len -= ((*word >> b) & 1) as usize;
            *word &= !(1 << b);
        }
    }
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
    pub fn len(&self) -> usize {
        self.len
    }
    /// Starts loading the word [`next_from`](Self::next_from)`(from)`
    /// reads first (a cache hint; see [`crate::prefetch`]).
    #[inline]
    pub fn prefetch_near(&self, hint: crate::prefetch::Hint, from: u32) {
        if let Some(w) = self.words.get((from / 64) as usize) {
            hint(w as *const u64 as *const u8);
        }
    }
    pub fn heap_bytes(&self) -> u64 {
        crate::footprint::vec(&self.words)
    }
    pub fn contains(&self, qpn: &u32) -> bool {
        self.words
            .get((*qpn / 64) as usize)
            .is_some_and(|w| w & (1 << (*qpn % 64)) != 0)
    }
    /// The smallest member ≥ `from`, else the smallest member.
    pub fn next_from(&self, from: u32) -> Option<u32> {
        if self.len == 0 {
            return None;
        }
        let first = |start: usize, mask: u64| -> Option<u32> {
            let mut w = start;
            let mut bits = self.words.get(w)? & mask;
            loop {
                if bits != 0 {
                    return Some(w as u32 * 64 + bits.trailing_zeros());
                }
                w += 1;
                bits = *self.words.get(w)?;
            }
        };
        let w = (from / 64) as usize;
        first(w, u64::MAX << (from % 64)).or_else(|| first(0, u64::MAX))
    }
}

/// Each QP's next deadline in deadline order, `(deadline, qpn)` as a
/// `BTreeSet` orders them, kept as a min-heap with lazy deletion: re-filing
/// a QP only pushes its new deadline, and an entry is current only while
/// its QP is still filed under that deadline (`current(t, qpn)`), so the
/// old one is dropped when it reaches the top. A paced QP re-files on
/// nearly every packet, and a push costs a fraction of a tree's removal
/// and insertion. The top is kept current, so [`Timers::first`] is exact.
#[derive(Default)]
pub(crate) struct Timers {
    heap: BinaryHeap<Reverse<(Nanos, u32)>>,
}

impl Timers {
    /// Files `qpn` under `t` (its QP's `filed` must now be `Some(t)`).
    pub fn file(&mut self, t: Nanos, qpn: u32) {
        self.heap.push(Reverse((t, qpn)));
    }

    /// Moves `qpn` from `old` to `new` (its QP's `filed` must now be
    /// `new`). When its old entry is the first, as it is for the QP whose
    /// retransmission timer every ACK restarts, that entry takes the new
    /// deadline where it stands: one sift, where filing anew pushed an
    /// entry and the next [`settle`](Self::settle) popped the stale one
    /// (two sifts and a QP lookup per ACK; issue 12). The current entries,
    /// and so [`first`](Self::first) and [`take_due`](Self::take_due), are
    /// the same either way; only a stale entry goes sooner. As after
    /// [`file`](Self::file), the top may now be stale: call
    /// [`settle`](Self::settle) before reading [`first`](Self::first).
    #[inline]
    pub fn refile(&mut self, old: Option<Nanos>, new: Option<Nanos>, qpn: u32) {
        if let Some(o) = old
            && let Some(mut top) = self.heap.peek_mut()
            && top.0 == (o, qpn)
        {
            match new {
                Some(t) => *top = Reverse((t, qpn)),
                None => {
                    PeekMut::pop(top);
                }
            }
            return;
        }
        if let Some(t) = new {
            self.file(t, qpn);
        }
    }

    pub fn heap_bytes(&self) -> u64 {
        (self.heap.capacity() * std::mem::size_of::<Reverse<(Nanos, u32)>>()) as u64
    }

    /// Starts loading the heap's first entry, which
    /// [`first`](Self::first) reads on every poll: the heap is an
    /// allocation of its own, so the device's lines do not bring it.
    #[inline]
    pub fn prefetch_first(&self, hint: crate::prefetch::Hint) {
        if let Some(e) = self.heap.as_slice().first() {
            hint(e as *const _ as *const u8);
        }
    }

    /// The earliest current deadline.
    pub fn first(&self) -> Option<Nanos> {
        self.heap.peek().map(|e| e.0.0)
    }

    /// Drops entries that are no longer current from the top, and rebuilds
    /// the heap from the current entries once stale ones (far-off
    /// deadlines replaced before they came up) outnumber `live`.
    pub fn settle(&mut self, live: usize, current: impl Fn(Nanos, u32) -> bool) {
        if self.heap.len() > 2 * live + 64 {
            let mut v = std::mem::take(&mut self.heap).into_vec();
            v.retain(|e| current(e.0.0, e.0.1));
            v.sort_unstable();
            v.dedup();
            self.heap = BinaryHeap::from(v);
        }
        while let Some(&Reverse((t, q))) = self.heap.peek() {
            if current(t, q) {
                break;
            }
            self.heap.pop();
        }
    }

    /// Takes every current entry due at `now`, in order, each once, into
    /// `due` (emptied first): the caller keeps one list for every call, as
    /// a simulated host's timer fires once per paced packet and a fresh
    /// list each time was an allocation and a free per firing (4.2 M on
    /// the fat-tree HPCC run).
    pub fn take_due(
        &mut self,
        now: Nanos,
        current: impl Fn(Nanos, u32) -> bool,
        due: &mut Vec<(Nanos, u32)>,
    ) {
        due.clear();
        while let Some(&Reverse(e)) = self.heap.peek() {
            if e.0 > now {
                break;
            }
            self.heap.pop();
            // The same deadline filed twice (re-filed away and back) is
            // one entry of a set.
            if current(e.0, e.1) && due.last() != Some(&e) {
                due.push(e);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeSet;

    #[test]
    fn qp_table_matches_a_btreemap() {
        // Random creations (in QPN order, as the RNIC hands them out) and
        // removals: lookups, the count and the iteration order are a
        // map's, and the window drops the dead QPs at its ends.
        let mut t = QpTable::default();
        let mut m = std::collections::BTreeMap::new();
        let mut next = 0x11u32;
        let mut x: u64 = 3;
        for step in 0..5000 {
            x = x
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            if !(x >> 40).is_multiple_of(3) || m.is_empty() {
                t.insert(next, Qp::tombstone_numbered(next));
                m.insert(next, ());
                next += 1;
            } else {
                // A live QP, an old one or one never created.
                let q = 0x11 + ((x >> 20) % u64::from(next - 0x11 + 5)) as u32;
                assert_eq!(t.remove(&q), m.remove(&q).is_some(), "remove {q}");
                assert!(!t.remove(&q), "removed twice {q}");
            }
            assert_eq!(t.len(), m.len());
            for q in 0..next + 3 {
                assert_eq!(
                    t.get(&q).map(|p| p.qpn),
                    m.get(&q).map(|_| q),
                    "{step}: get {q}"
                );
                assert_eq!(t.get_mut(&q).is_some(), m.contains_key(&q));
            }
            let a: Vec<u32> = t.values().map(|q| q.qpn).collect();
            let b: Vec<u32> = m.keys().copied().collect();
            assert_eq!(a, b);
            // No dead slot at the window's back; at its front, fewer
            // than a quarter of it, and `lead` counts them.
            assert!(t.slots.last().is_none_or(|q| q.qpn != DEAD));
            let lead = t.slots.iter().take_while(|q| q.qpn == DEAD).count();
            assert_eq!(t.lead, lead);
            assert!(lead == 0 || lead * 4 < t.slots.len());
        }
        // A QPN below the window (not what the RNIC does) widens it.
        let lo = t.base.saturating_sub(3).max(1);
        t.insert(lo, Qp::tombstone_numbered(lo));
        assert_eq!(t.get(&lo).map(|q| q.qpn), Some(lo));
        assert_eq!(t.get(&DEAD).map(|q| q.qpn), None);
    }

    #[test]
    fn refile_moves_the_first_entry_in_place() {
        // `filed[q]` plays the QPs' `filed`; `current` reads it.
        let mut filed: Vec<Option<Nanos>> = vec![None; 4];
        let mut t = Timers::default();
        for (q, d) in [(1u32, 10), (2, 20), (3, 30)] {
            filed[q as usize] = Some(d);
            t.file(d, q);
        }
        let settle = |t: &mut Timers, filed: &[Option<Nanos>]| {
            t.settle(3, |d, q| filed[q as usize] == Some(d));
            t.first()
        };
        // Re-files QP `q` to `new`; then the heap holds `len` entries, and
        // once settled the first deadline is `first`.
        let mut move_to = |t: &mut Timers, q: u32, new: Option<Nanos>, len, first| {
            let old = std::mem::replace(&mut filed[q as usize], new);
            t.refile(old, new, q);
            assert_eq!(t.heap.len(), len, "entries after moving QP {q}");
            assert_eq!(settle(t, &filed), first, "first after moving QP {q}");
        };
        // QP 1, first, moves later: in place (no entry added), and QP 2
        // comes first.
        move_to(&mut t, 1, Some(25), 3, Some(20));
        // QP 2, first, moves earlier: still first.
        move_to(&mut t, 2, Some(5), 3, Some(5));
        // QP 2, first, leaves the timers: its entry goes.
        move_to(&mut t, 2, None, 2, Some(25));
        // QP 3, not first, moves earlier: filed anew, its old entry left
        // stale until it comes up.
        move_to(&mut t, 3, Some(12), 3, Some(12));
        // QP 3, now first, leaves: in place (its stale entry under 30
        // stays until it comes up).
        move_to(&mut t, 3, None, 2, Some(25));
        // QP 1, first, filed twice under 25 (as after moving away and
        // back): moving the first copy leaves the other one stale, never
        // due.
        t.file(25, 1);
        move_to(&mut t, 1, Some(50), 3, Some(50));
        let mut due = Vec::new();
        t.take_due(100, |d, q| filed[q as usize] == Some(d), &mut due);
        assert_eq!(due, [(50, 1)]);
        assert_eq!(t.first(), None);
    }

    #[test]
    fn timers_match_a_btreeset() {
        // Random re-filings, removals and due sweeps: the lazy heap gives
        // the first deadline and the due entries a set of current
        // `(deadline, qpn)` gives.
        let mut heap = Timers::default();
        let mut set = BTreeSet::new();
        let mut filed: Vec<Option<Nanos>> = vec![None; 40];
        let mut now: Nanos = 0;
        let mut x: u64 = 11;
        let mut due = Vec::new();
        for _ in 0..20_000 {
            x = x
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            let q = ((x >> 33) % 40) as u32;
            let qi = q as usize;
            match (x >> 20) % 4 {
                0 | 1 => {
                    // Re-file, sometimes back to a deadline held before.
                    let t = now + (x >> 40) % 50;
                    if filed[qi] != Some(t) {
                        if let Some(old) = filed[qi] {
                            set.remove(&(old, q));
                        }
                        // Through `refile` (in place when on top) or
                        // `file` (the old entry left stale), as
                        // `handle_timeout` leaves it.
                        let old = filed[qi].replace(t);
                        set.insert((t, q));
                        if (x >> 50) & 1 == 0 {
                            heap.refile(old, Some(t), q);
                        } else {
                            heap.file(t, q);
                        }
                    }
                }
                2 => {
                    if let Some(old) = filed[qi].take() {
                        set.remove(&(old, q));
                        if (x >> 50) & 1 == 0 {
                            heap.refile(Some(old), None, q);
                        }
                    }
                }
                _ => {
                    now += (x >> 45) % 7;
                    let f = filed.clone();
                    let cur = |t: Nanos, q: u32| f[q as usize] == Some(t);
                    // One list for every sweep, as `Rnic::handle_timeout`
                    // keeps: a sweep must not hand out the last one's again.
                    heap.take_due(now, cur, &mut due);
                    let want: Vec<_> = set.iter().take_while(|e| e.0 <= now).copied().collect();
                    assert_eq!(due, want);
                    for &(t, q) in &due {
                        set.remove(&(t, q));
                        filed[q as usize] = None;
                    }
                }
            }
            let f = filed.clone();
            heap.settle(40, |t, q| f[q as usize] == Some(t));
            assert_eq!(heap.first(), set.first().map(|e| e.0));
        }
    }

    #[test]
    fn ready_set_matches_a_btreeset() {
        let mut a = ReadySet::default();
        let mut b = BTreeSet::new();
        let mut x: u64 = 7;
        for _ in 0..5000 {
            x = x
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            let q = ((x >> 33) % 300) as u32;
            match (x >> 20) % 3 {
                0 => {
                    a.insert(q);
                    b.insert(q);
                }
                1 => {
                    a.remove(&q);
                    b.remove(&q);
                }
                _ => {
                    let want = b.range(q..).next().or(b.iter().next()).copied();
                    assert_eq!(a.next_from(q), want);
                }
            }
            assert_eq!(a.is_empty(), b.is_empty());
        }
    }
}
