//! Dense per-device tables for the hot path: QPs indexed by QPN and the set
//! of QPs ready to transmit. QPNs are handed out sequentially, so a vector
//! indexed by QPN gives O(1) lookups where a tree map cost a search per
//! packet; iteration order is still by QPN, exactly as a `BTreeMap` gives.

use crate::qp::Qp;

/// QPs by number (`BTreeMap<u32, Qp>`'s interface, as much as the RNIC uses).
#[derive(Default)]
pub(crate) struct QpTable {
    slots: Vec<Option<Box<Qp>>>,
    len: usize,
}

impl QpTable {
    pub fn insert(&mut self, qpn: u32, qp: Qp) {
        let i = qpn as usize;
        if self.slots.len() <= i {
            self.slots.resize_with(i + 1, || None);
        }
        if self.slots[i].replace(Box::new(qp)).is_none() {
            self.len += 1;
        }
    }
    pub fn remove(&mut self, qpn: &u32) -> Option<Box<Qp>> {
        let q = self.slots.get_mut(*qpn as usize)?.take();
        if q.is_some() {
            self.len -= 1;
        }
        q
    }
    pub fn get(&self, qpn: &u32) -> Option<&Qp> {
        self.slots.get(*qpn as usize)?.as_deref()
    }
    pub fn get_mut(&mut self, qpn: &u32) -> Option<&mut Qp> {
        self.slots.get_mut(*qpn as usize)?.as_deref_mut()
    }
    pub fn contains_key(&self, qpn: &u32) -> bool {
        self.get(qpn).is_some()
    }
    pub fn len(&self) -> usize {
        self.len
    }
    pub fn values(&self) -> impl Iterator<Item = &Qp> {
        self.slots.iter().filter_map(|s| s.as_deref())
    }
}

/// A set of QPNs with "next member at or after n" in QPN order, as a bitmap.
#[derive(Default)]
pub(crate) struct ReadySet {
    words: Vec<u64>,
    len: usize,
}

impl ReadySet {
    pub fn insert(&mut self, qpn: u32) {
        let (w, b) = ((qpn / 64) as usize, qpn % 64);
        if self.words.len() <= w {
            self.words.resize(w + 1, 0);
        }
        if self.words[w] & (1 << b) == 0 {
            self.words[w] |= 1 << b;
            self.len += 1;
        }
    }
    pub fn remove(&mut self, qpn: &u32) {
        let (w, b) = ((*qpn / 64) as usize, *qpn % 64);
        if let Some(word) = self.words.get_mut(w).filter(|word| **word & (1 << b) != 0) {
            *word &= !(1 << b);
            self.len -= 1;
        }
    }
    pub fn is_empty(&self) -> bool {
        self.len == 0
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

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeSet;

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
