//! Completion queues. Bounded: an overflow is reported as an async event
//! (IBV_EVENT_CQ_ERR) and counted, never silently dropped.

use crate::types::Wc;
use std::collections::VecDeque;

/// Handle of a completion queue.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct CqHandle(pub u32);

#[derive(Debug)]
pub struct Cq {
    pub capacity: u32,
    entries: VecDeque<Wc>,
    /// Completions that could not be stored.
    pub overflowed: u64,
}

impl Cq {
    pub fn new(capacity: u32) -> Self {
        Cq {
            capacity,
            entries: VecDeque::new(),
            overflowed: 0,
        }
    }
    /// Stores a completion; false when the CQ is full.
    pub fn push(&mut self, wc: Wc) -> bool {
        if self.entries.len() >= self.capacity as usize {
            self.overflowed += 1;
            return false;
        }
        self.entries.push_back(wc);
        true
    }
    pub fn pop(&mut self) -> Option<Wc> {
        self.entries.pop_front()
    }
    pub fn len(&self) -> usize {
        self.entries.len()
    }
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }
    /// Heap bytes of stored completions (see [`crate::footprint`]).
    pub(crate) fn heap_bytes(&self) -> u64 {
        crate::footprint::deque(&self.entries)
    }
}
