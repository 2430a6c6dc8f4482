//! How many heap bytes an RNIC holds, by structure: the simulator runs
//! thousands of software RNICs at once (8,192 hosts in a k=32 fat tree,
//! issue 12), and what each live QP carries — its send queue, the record
//! of every packet in flight kept for RTT samples, IRN's rings — decides
//! how far a run scales. Figures are allocator capacities (what a
//! collection holds on to, not what it uses); tree maps count their
//! entries only.

use crate::qp::Qp;
use std::collections::{BTreeMap, VecDeque};
use std::mem::size_of;

/// Heap bytes by structure, and the live QPs they belong to.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Footprint {
    /// Live QPs.
    pub qps: u64,
    /// The QP structures themselves and their congestion controllers.
    pub qp_state: u64,
    /// Send queues: WQEs and their scatter/gather lists.
    pub send_queues: u64,
    /// Receive queues, response queues and responder resources.
    pub recv_queues: u64,
    /// One record per packet in flight (RTT samples, Karn's rule).
    pub sent_logs: u64,
    /// IRN: SACK scoreboards, held out-of-order packets, resend marks.
    pub irn: u64,
    /// Device tables: QPs by number, the ready set, the timer heap,
    /// memory regions, CQs.
    pub tables: u64,
}

impl Footprint {
    pub fn total(&self) -> u64 {
        self.qp_state
            + self.send_queues
            + self.recv_queues
            + self.sent_logs
            + self.irn
            + self.tables
    }

    /// Adds `o`'s figures to these.
    pub fn add(&mut self, o: &Footprint) {
        self.qps += o.qps;
        self.qp_state += o.qp_state;
        self.send_queues += o.send_queues;
        self.recv_queues += o.recv_queues;
        self.sent_logs += o.sent_logs;
        self.irn += o.irn;
        self.tables += o.tables;
    }
}

/// Bytes a `VecDeque` has allocated.
pub(crate) fn deque<T>(d: &VecDeque<T>) -> u64 {
    (d.capacity() * size_of::<T>()) as u64
}

/// Bytes of a `Vec`'s allocation.
pub(crate) fn vec<T>(v: &Vec<T>) -> u64 {
    (v.capacity() * size_of::<T>()) as u64
}

/// A tree map's entries (node overhead left out).
pub(crate) fn tree<K, V>(m: &BTreeMap<K, V>) -> u64 {
    (m.len() * (size_of::<K>() + size_of::<V>())) as u64
}

impl Qp {
    /// Adds this QP's heap bytes to `f`.
    pub(crate) fn footprint(&self, f: &mut Footprint) {
        f.qps += 1;
        f.qp_state += (size_of::<Qp>() + size_of_val(self.cc.get())) as u64;
        f.send_queues += deque(&self.sq)
            + self
                .sq
                .iter()
                .map(|w| vec(&w.wr.sg_list) + vec(&w.got))
                .sum::<u64>();
        f.recv_queues += deque(&self.rq)
            + self.rq.iter().map(|r| vec(&r.sg_list)).sum::<u64>()
            + deque(&self.resp_q)
            + deque(&self.resources);
        f.sent_logs += self.sent_log.heap_bytes();
        f.irn += self.sacked.heap_bytes() + self.held.heap_bytes() + tree(&self.resent_at);
    }
}
