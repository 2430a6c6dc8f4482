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
    /// The last bit of packet `pkt` reached `node`'s `port`. `ce`: the
    /// hop it left marked it Congestion Experienced.
    ///
    /// Why the mark travels with the event: a switch marks a packet as it
    /// leaves the queue (RED on egress), when nothing else of the
    /// packet's record is read (the queue entry holds its length). Set
    /// there, the mark cost a miss on that record's line: at 8,192 hosts,
    /// half the time of `start_tx` and 5.5 % of the run's (`perf`,
    /// session 29). The next hop reads the record anyway, its line loaded
    /// ahead (see [`EventQueue::upcoming`]), and sets the mark then;
    /// nothing reads the packet between the two.
    Arrive {
        node: u32,
        port: u16,
        pkt: u32,
        ce: bool,
    },
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
    /// In a partitioned run (see [`Partition`]), flow `flow`'s receiver
    /// creates its QP and memory region, a window before the flow starts
    /// (the sender, in another group, connects to them then).
    FlowAccept { flow: u32 },
    /// Periodic sampling of queues and per-flow progress.
    Sample,
    /// A host's RX buffer may have drained below its XON level (hosts
    /// with a profile only; see [`crate::host`]).
    HostRxDrain { host: u32 },
    /// The link at `node`'s `port` goes down (see
    /// [`crate::sim::LinkFailure`]).
    LinkDown { node: u32, port: u16 },
}

/// Bits of a key holding the event's time within its calendar slot.
const OFF_SHIFT: u32 = 64 - MAX_SLOT_BITS;
/// Bits of a key below the sequence number: the payload's kind.
const TAG_BITS: u32 = 3;
/// Largest sequence number a key holds (2⁴⁹: years of events).
const SEQ_MAX: u64 = (1 << (OFF_SHIFT - TAG_BITS)) - 1;
/// A key's bits below the time: sequence number and kind.
const LOW_MASK: u64 = (1 << OFF_SHIFT) - 1;

const TAG_ARRIVE: u64 = 0;
/// An arrival marked Congestion Experienced on the way (see
/// [`Event::Arrive`]): the tag's low bit is the mark.
const TAG_ARRIVE_CE: u64 = 1;
const TAG_TX_DONE: u64 = 2;
// [`EventQueue::upcoming`] tells the two kinds apart from the rest with
// one comparison, and arrivals from transmissions with another.
const _: () = assert!(TAG_ARRIVE | 1 == TAG_ARRIVE_CE && TAG_ARRIVE_CE + 1 == TAG_TX_DONE);
const TAG_HOST_TIMER: u64 = 3;
const TAG_PFC_ARRIVE: u64 = 4;
const TAG_FLOW_START: u64 = 5;
const TAG_SAMPLE: u64 = 6;
/// The payload indexes `EventQueue::spilled` (rare events that do not fit
/// in 64 bits).
const TAG_SPILLED: u64 = 7;
const _: () = assert!(TAG_SPILLED < 1 << TAG_BITS);

/// What kind of event a [`Packed`] one is: its key's tag.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Arrive,
    TxDone,
    HostTimer,
    PfcArrive,
    FlowStart,
    Sample,
    /// One that does not pack (see [`EventQueue::take`]).
    Spilled,
}

/// An event as the queue keeps it: its kind and packed payload, as
/// [`EventQueue::pop_packed_until`] hands it out.
///
/// Why: building an [`Event`] from the tag and then matching the `Event`
/// took two indirect jumps per event, each mispredicted about a third of
/// the time (cachegrind's branch simulation on the mid-size fat5ms run,
/// session 17). The simulator instead branches once on [`kind`](Self::kind)
/// and reads the payload of that kind; everything else (and every
/// spilled event) goes through [`EventQueue::take`] as an [`Event`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Packed {
    /// The key's tag (its low [`TAG_BITS`]).
    tag: u64,
    data: u64,
}

impl Packed {
    #[inline(always)]
    pub fn kind(self) -> Kind {
        match self.tag {
            TAG_ARRIVE | TAG_ARRIVE_CE => Kind::Arrive,
            TAG_TX_DONE => Kind::TxDone,
            TAG_HOST_TIMER => Kind::HostTimer,
            TAG_PFC_ARRIVE => Kind::PfcArrive,
            TAG_FLOW_START => Kind::FlowStart,
            TAG_SAMPLE => Kind::Sample,
            _ => Kind::Spilled,
        }
    }

    /// An arrival's node, port, packet and mark ([`Kind::Arrive`] only).
    #[inline(always)]
    pub fn arrive(self) -> (u32, u16, u32, bool) {
        debug_assert_eq!(self.kind(), Kind::Arrive);
        let (node, port) = unpack_node_port(self.data >> 32);
        (node, port, self.data as u32, self.tag == TAG_ARRIVE_CE)
    }

    /// A finished transmission's node and port ([`Kind::TxDone`] only).
    #[inline(always)]
    pub fn tx_done(self) -> (u32, u16) {
        debug_assert_eq!(self.kind(), Kind::TxDone);
        unpack_node_port(self.data >> 32)
    }
}

/// Nodes and ports that fit in a packed payload (20 + 12 bits); others
/// spill.
const NODE_BITS: u32 = 20;
const PORT_BITS: u32 = 12;

/// Whether every event of a fabric of `nodes` nodes with at most `ports`
/// ports each packs: then a caller that knows it may schedule with
/// [`EventQueue::schedule_known`]'s `plain`.
pub fn packs(nodes: usize, ports: usize) -> bool {
    nodes <= 1 << NODE_BITS && ports <= 1 << PORT_BITS
}

/// `node` and `port` packed, or `None` when they do not fit. `fits`: the
/// caller knows they do (see [`packs`]), a constant where it is called,
/// so the test and the spill path fold away. The test cost the lean
/// loops about 240 M instructions of 14.35 G on the 1 ms 320-host HPCC fat
/// tree (cachegrind, session 45), more than its few operations: the
/// spill path it guards builds the whole event in memory.
#[inline(always)]
fn node_port(fits: bool, node: u32, port: u16) -> Option<u64> {
    let packed = (u64::from(node) << PORT_BITS) | u64::from(port);
    let fit = (node >> NODE_BITS) | (u32::from(port) >> PORT_BITS) == 0;
    debug_assert!(!fits || fit, "node {node} port {port} said to pack");
    // One test of both bounds (one branch, not two).
    (fits || fit).then_some(packed)
}

/// The node of a packed arrival's or transmission's payload (the kinds
/// tagged up to `TAG_TX_DONE`, which keep node and port alike).
#[inline(always)]
fn payload_node(data: u64) -> u32 {
    (data >> (32 + PORT_BITS)) as u32
}

fn unpack_node_port(x: u64) -> (u32, u16) {
    (
        ((x >> PORT_BITS) & ((1 << NODE_BITS) - 1)) as u32,
        (x & ((1 << PORT_BITS) - 1)) as u16,
    )
}

/// A pending event in 16 bytes: the key (time within its slot in the top
/// `MAX_SLOT_BITS`, right-aligned there when slots are narrower, then the
/// schedule sequence number, then the payload's kind) and the packed
/// payload. Within one slot, key order is exactly `(time, sequence)`.
#[derive(Debug, Clone, Copy)]
struct Entry {
    key: u64,
    data: u64,
}

/// An event beyond the calendar, with its whole time.
#[derive(Debug, Clone, Copy)]
struct Far {
    time: Ps,
    /// Sequence number and kind (the low bits of a key).
    low: u64,
    data: u64,
}

impl PartialEq for Far {
    fn eq(&self, o: &Self) -> bool {
        (self.time, self.low) == (o.time, o.low)
    }
}
impl Eq for Far {}
impl PartialOrd for Far {
    fn partial_cmp(&self, o: &Self) -> Option<Ordering> {
        Some(self.cmp(o))
    }
}
impl Ord for Far {
    /// Reversed: `BinaryHeap` is a max-heap and we want the earliest first.
    fn cmp(&self, o: &Self) -> Ordering {
        (o.time, o.low).cmp(&(self.time, self.low))
    }
}

/// A partitioned run's order: the fabric's nodes fall into groups, time
/// into windows no longer than the shortest link between two groups, and
/// the queue hands out one window's events group by group (each group's
/// in time order) before the next window's.
///
/// Why: at 8,192 hosts the simulator's state is a gigabyte and more, and
/// in time order consecutive events touch nodes anywhere in it, so nearly
/// every packet record, port and QP an event reads is a miss to memory.
/// A group's window is some thousands of events over one pod's state, far
/// more of which is still in cache from the group's previous events: the
/// k=32 fat tree runs about a fifth faster in 32 groups (issue 12, part 4;
/// figures and the group counts tried in `scenarios/SCALE.md`).
///
/// Why it is exact: an event at one node can affect another group only
/// through an event it schedules there, and every such event crosses a
/// link between groups, so it is due at least a window later, in a window
/// not yet run. Within a group the order is `(time, sequence)` as ever.
/// The run is a different interleaving of independent events, so figures
/// drawn from shared state (the ECN coin, packet and QP numbering, the
/// order of output rows) differ from a run in global time order, and are
/// as deterministic.
///
/// Group 0 holds no nodes: a window's sample ([`Event::Sample`], due at
/// a window's start) runs there, before any node's events of its window
/// and after all of the last one's, so it sees every node at that time.
#[derive(Debug, Clone)]
pub struct Partition {
    window: Ps,
    /// Groups per window, counting group 0.
    groups: u64,
    node_group: Vec<u32>,
    host_group: Vec<u32>,
    /// Groups of each flow's sender and receiver.
    flow_src: Vec<u32>,
    flow_dst: Vec<u32>,
}

impl Partition {
    /// `node_group` (and `host_group`, by host index) in `1..groups`;
    /// `window` no longer than any link delay between groups.
    pub fn new(
        window: Ps,
        groups: u32,
        node_group: Vec<u32>,
        host_group: Vec<u32>,
        flow_src: Vec<u32>,
        flow_dst: Vec<u32>,
    ) -> Self {
        debug_assert!(window > 0 && groups >= 2);
        debug_assert!(
            (node_group
                .iter()
                .chain(&host_group)
                .chain(&flow_src)
                .chain(&flow_dst))
            .all(|&g| (1..groups).contains(&g))
        );
        Partition {
            window,
            groups: u64::from(groups),
            node_group,
            host_group,
            flow_src,
            flow_dst,
        }
    }

    pub fn window(&self) -> Ps {
        self.window
    }

    /// Groups of nodes (not counting group 0).
    pub fn node_groups(&self) -> u32 {
        (self.groups - 1) as u32
    }

    /// The group whose state `event` reads: its node's, host's or flow
    /// end's.
    #[inline(always)]
    pub fn group_of(&self, event: &Event) -> u64 {
        let g = match *event {
            Event::Arrive { node, .. }
            | Event::TxDone { node, .. }
            | Event::PfcArrive { node, .. }
            | Event::PauseEnd { node, .. }
            | Event::PfcRefresh { node, .. }
            | Event::LinkDown { node, .. } => self.node_group.get(node as usize),
            Event::HostTimer { host, .. } | Event::HostRxDrain { host } => {
                self.host_group.get(host as usize)
            }
            Event::FlowStart { flow } => self.flow_src.get(flow as usize),
            Event::FlowAccept { flow } => self.flow_dst.get(flow as usize),
            Event::Sample => None,
        };
        u64::from(g.copied().unwrap_or(0))
    }

    /// Where time `t` of group `g` falls in the queue's order.
    #[inline(always)]
    fn order_time(&self, t: Ps, g: u64) -> Ps {
        let w = self.window;
        (t / w)
            .saturating_mul(w * self.groups)
            .saturating_add(g * w + t % w)
    }

    /// The simulated time of order time `o`.
    #[inline(always)]
    fn real_time(&self, o: Ps) -> Ps {
        real_time(self.window, self.groups, o)
    }

    /// The last order time a run stopping at `limit` reaches.
    fn limit_order_time(&self, limit: Ps) -> Ps {
        if limit == Ps::MAX {
            Ps::MAX
        } else {
            self.order_time(limit, self.groups - 1)
        }
    }
}

/// The simulated time of order time `o` in a [`Partition`] of `groups`
/// groups and windows of `window` ps.
///
/// A measured dead end (session 29): this and `order_time`'s divisions
/// done by multiplication (Granlund and Montgomery's invariant divisors,
/// exact below 2⁶³) took the k=32 cut at 2.5 ms 84.1 s and 84.3 s of
/// user time against 80.1 s and 81.1 s with `div` (two interleaved
/// pairs): this machine's divider is quick, and the multiplications and
/// the range test were not.
#[inline(always)]
fn real_time(window: Ps, groups: u64, o: Ps) -> Ps {
    (o / (window * groups)) * window + o % window
}

/// log₂ of a calendar slot's widest width in ps (4.1 ns, a partitioned
/// run's; see `PARTITION_SLOT_BITS` in the simulator): the key holds an
/// event's time within its slot in this many bits, whatever the queue's
/// own width ([`EventQueue::with_horizon`]).
pub const MAX_SLOT_BITS: u32 = 12;
/// log₂ of the widest slot [`rank_sort`] takes with 16-bit lanes
/// (1.02 ns): they hold the time in the slot and the event's place in it.
/// Wider slots take [`sort_wide_or_unordered`].
const RANK_SLOT_BITS: u32 = 10;
/// log₂ of the narrowest slot (64 ps). `bucket_sort` splits a slot by
/// the top `BUCKET_BITS` of the time in it, so a slot must be at least
/// that many picoseconds wide.
pub const MIN_SLOT_BITS: u32 = 6;
const _: () = assert!(MIN_SLOT_BITS >= BUCKET_BITS && MIN_SLOT_BITS <= MAX_SLOT_BITS);
/// The slot width of [`EventQueue::new`] (1.02 ns: about ten events of the
/// 320-host fat tree, sorted in one go by `sort_slot`; 512 ps slots were
/// no faster there). A larger fabric's slots hold more events; the
/// simulator narrows them (see `slot_bits_for` in the simulator).
pub const DEFAULT_SLOT_BITS: u32 = RANK_SLOT_BITS;
/// How many slots past the current one [`EventQueue::upcoming`] looks.
/// Two and five were measured against three on fat5ms HPCC (session 46,
/// three interleaved rounds, each run alone): 7.68-7.80 s and 7.75-7.83
/// s of user time against 7.67-7.90 s, within the noise.
const LOOKAHEAD: u64 = 3;
/// Slots in the default calendar (2¹¹ × 1.02 ns = 2.1 µs ahead: a 1 µs
/// link's delay and a frame's serialization, with room to spare).
const DEFAULT_SLOTS: usize = 1 << 11;
/// Bounds on the calendar's length, in slots.
const MIN_SLOTS: usize = 1 << 10;
const MAX_SLOTS: usize = 1 << 17;

/// A min-queue of events by `(time, sequence)`.
///
/// A calendar queue (Brown, CACM 1988) tuned to packet simulation: nearly
/// every event lands a serialization time or a link delay ahead, so events
/// are dropped unsorted into slots of 1 ns (narrower in a large fabric:
/// see [`with_horizon`](Self::with_horizon)) of a calendar that reaches
/// just past the longest link delay (2.1 µs for 1 µs links), and only
/// the current slot is sorted, once, when its time comes (earliest first,
/// read from a cursor; see `sort_slot`: a busy slot's events come from
/// many sources and are far from time order, but they are in schedule
/// order, which makes a branch-free rank sort exact; the rare event
/// scheduled into the current slot is inserted in order).
/// Events beyond the calendar (retransmission timers and the like) wait in
/// an overflow heap and join the current slot when its time comes. An
/// occupancy bitmap skips empty slots. The order is exactly `(time,
/// sequence)`, as with one big heap, whatever the calendar's length and
/// its slots' width.
///
/// The calendar is short on purpose: a slot's buffer is written again
/// one calendar length after it was last emptied, and the shorter that
/// is, the likelier the buffer is still in cache (on the 320-host fat
/// tree 2.1 µs beat 4.2 µs by 5–7 % of wall time).
///
/// Entries are 16 bytes (a 64-bit key relative to the slot and a packed
/// event), so slot writes and the sort move half the memory of a
/// `(u128, Event)` pair; the rare events that do not pack (pause expiry
/// and refresh, and packets of nodes or ports beyond 2²⁰ or 2¹²) wait in a
/// side table.
#[derive(Debug)]
pub struct EventQueue {
    /// Events of the current slot, sorted by ascending key; those before
    /// `head` were handed out, the next event is `current[head]`.
    current: Vec<Entry>,
    head: usize,
    slots: Vec<Vec<Entry>>,
    /// `slots.len() - 1` (a power of two less one).
    mask: usize,
    occupied: Vec<u64>,
    /// Slots that are not in schedule order (a [`rewind`](Self::rewind)
    /// put sorted events back), one bit each as in `occupied`: every
    /// other slot is, which [`sort_slot`]'s rank sort relies on.
    unordered: Vec<u64>,
    overflow: BinaryHeap<Far>,
    /// Events that do not pack into 64 bits, and free places there.
    spilled: Vec<Event>,
    spill_free: Vec<u32>,
    /// Room for [`bucket_sort`] to copy a large slot into.
    scratch: Vec<Entry>,
    /// log₂ of a slot's width in ps (between [`MIN_SLOT_BITS`] and
    /// [`MAX_SLOT_BITS`]); the key holds the time within the slot in its
    /// low `bits` of `MAX_SLOT_BITS`.
    bits: u32,
    /// `(1 << bits) - 1`: a time's offset within its slot.
    off_mask: u64,
    /// Index (time >> bits) of the current slot.
    cur: u64,
    /// `cur << bits`: the current slot's first picosecond, kept so that a
    /// pop adds an event's offset with no shift by a width read from
    /// memory.
    cur_time: Ps,
    /// How many slots past `cur` the calendar takes events into: the
    /// calendar's reach counts from `now`'s slot (see
    /// [`schedule`](Self::schedule)), so this is `(now >> bits) +
    /// mask - cur`, or less (an event past it waits in the overflow heap,
    /// which is exact). Kept here so a schedule makes one comparison.
    reach: u64,
    /// The last slot [`EventQueue::upcoming`] handed out.
    ahead: u64,
    /// Events scheduled so far (the last sequence number handed out).
    seq: u64,
    /// Sequence numbers [`reserve`](Self::reserve)d and not (yet)
    /// scheduled. They count in `popped` too, as if handed out at once,
    /// so that `seq - popped` stays the number pending with no third
    /// term on the pop path; [`popped`](Self::popped) takes them out.
    reserved: u64,
    /// Sequence number of the last event handed out, once its slot's
    /// buffer no longer holds it (see [`now_seq`](Self::now_seq)).
    left_seq: u64,
    /// The time of the event handed out last, as the calendar orders it
    /// (with a [`Partition`], its place in the group-major order).
    order_now: Ps,
    /// The same event's simulated time.
    now: Ps,
    /// Group-major order within time windows, for large fabrics (see
    /// [`Partition`]); `None` orders by time alone.
    part: Option<Box<Partition>>,
    /// See [`set_aside`](Self::set_aside).
    set_aside: u64,
    /// With a [`Partition`], the stretch of the order that one group's
    /// window takes (`[seg_lo, seg_lo + seg_w)`: `seg_w` is the window,
    /// 0 before the first pop) and what to take from an order time in it
    /// for the simulated time, so that a pop needs no division while it
    /// stays in the stretch (see [`real_time_of`](Self::real_time_of)).
    seg_lo: Ps,
    seg_w: Ps,
    seg_off: Ps,
    /// The last stop time a partitioned pop was given and its place in
    /// the order ([`Partition::limit_order_time`], a division), kept for
    /// the next pop, which is given the same one.
    limit_memo: (Ps, Ps),
    /// With a [`Partition`], events due at or after `gate` (in the
    /// calendar's order: the first time of a group's window not yet
    /// begun) wait here, unsorted, one list per group, until that group's
    /// window begins; the calendar then takes them all at once.
    ///
    /// Why: nearly every event lands a window or more ahead (a packet
    /// crossing a link), which in the group-major order is tens of
    /// thousands of slots ahead. Put straight into its calendar slot,
    /// each such schedule missed the cache twice, on the slot's header and
    /// on its buffer: perf put 21 % of the k=32 run in `schedule` (session
    /// 27). An inbox is written in sequence, and a group's slots are
    /// filled in one pass just before its events run, when they are
    /// about to be read anyway.
    inbox: Vec<Vec<Far>>,
    /// Events in `inbox`.
    inboxed: usize,
    /// With a [`Partition`], the buffers of slots emptied so far and not
    /// yet handed to another, the latest last: a settled slot gives its
    /// spent buffer here rather than keeping it until the calendar comes
    /// round again, and a slot taking its first event takes the latest.
    ///
    /// Why: in a partitioned run a slot is filled (from an inbox, or by
    /// its group's own events) just before its window runs, tens of
    /// thousands of slots after it was last emptied; its own buffer is
    /// long out of cache by then, and the one a slot emptied a moment
    /// ago is not.
    spare: Vec<Vec<Entry>>,
    /// See `inbox`; 0 until the first window begins, and never more than
    /// a window past the settled slot's end.
    gate: Ps,
    /// Counted at each pop. Counting a slot's pops only when it is
    /// emptied (`popped + head`) was tried: `len` then costs one more
    /// load and subtraction wherever it is read, and callgrind counted
    /// 45 M more instructions on the mid-size fat5ms run (session 17).
    popped: u64,
    /// Most events pending at once, as of the last pop (see
    /// [`peak_len`](Self::peak_len)).
    peak: usize,
}

impl Default for EventQueue {
    fn default() -> Self {
        Self::with_slots(DEFAULT_SLOTS, DEFAULT_SLOT_BITS)
    }
}

impl EventQueue {
    /// Heap bytes held: the calendar's slots, the far-future heap and
    /// spilled events (allocator capacities).
    pub fn heap_bytes(&self) -> u64 {
        use std::mem::size_of;
        let entries = self.current.capacity() + self.slots.iter().map(Vec::capacity).sum::<usize>();
        (entries * size_of::<Entry>()
            + self.slots.capacity() * size_of::<Vec<Entry>>()
            + (self.occupied.capacity() + self.unordered.capacity()) * 8
            + self.overflow.capacity() * size_of::<Far>()
            + self.spilled.capacity() * size_of::<Event>()
            + self.spill_free.capacity() * 4
            + (self.inbox.iter())
                .map(|v| v.capacity() * size_of::<Far>())
                .sum::<usize>()
            + (self.spare.iter())
                .map(|v| v.capacity() * size_of::<Entry>())
                .sum::<usize>()
            + self.scratch.capacity() * size_of::<Entry>()) as u64
    }

    fn with_slots(n: usize, bits: u32) -> Self {
        debug_assert!(n.is_power_of_two() && n >= 64);
        debug_assert!((MIN_SLOT_BITS..=MAX_SLOT_BITS).contains(&bits));
        EventQueue {
            bits,
            off_mask: (1 << bits) - 1,
            current: Vec::new(),
            head: 0,
            slots: (0..n).map(|_| Vec::new()).collect(),
            mask: n - 1,
            occupied: vec![0; n / 64],
            unordered: vec![0; n / 64],
            overflow: BinaryHeap::new(),
            spilled: Vec::new(),
            spill_free: Vec::new(),
            scratch: Vec::new(),
            cur: 0,
            cur_time: 0,
            reach: (n - 1) as u64,
            ahead: 0,
            seq: 0,
            reserved: 0,
            left_seq: 0,
            order_now: 0,
            now: 0,
            part: None,
            set_aside: 0,
            seg_lo: 0,
            seg_w: 0,
            seg_off: 0,
            limit_memo: (Ps::MAX, Ps::MAX),
            inbox: Vec::new(),
            inboxed: 0,
            spare: Vec::new(),
            gate: 0,
            popped: 0,
            peak: 0,
        }
    }

    pub fn new() -> Self {
        Self::default()
    }

    /// A queue whose calendar covers at least `horizon` ahead of now (in
    /// whole powers of two of slots, between 1,024 and 65,536 of them):
    /// events further out wait in the overflow heap, which is exact but
    /// slower, so the horizon should cover the longest link delay plus a
    /// frame's serialization. Slots are `2^bits` ps wide (`bits` clamped
    /// to [`MIN_SLOT_BITS`]..=[`MAX_SLOT_BITS`]); the order handed out is
    /// `(time, sequence)` whatever the width, which only sets how many
    /// events a slot gathers for one sort.
    pub fn with_horizon(horizon: Ps, bits: u32) -> Self {
        let bits = bits.clamp(MIN_SLOT_BITS, MAX_SLOT_BITS);
        let n = (horizon >> bits) as usize + 1;
        Self::with_slots(n.next_power_of_two().clamp(MIN_SLOTS, MAX_SLOTS), bits)
    }

    /// log₂ of a calendar slot's width in ps.
    pub fn slot_bits(&self) -> u32 {
        self.bits
    }

    /// The time of the event being handled (or last handled).
    pub fn now(&self) -> Ps {
        self.now
    }

    /// Orders events group by group within windows from here on (see
    /// [`Partition`]). Set before the first event is scheduled.
    pub fn set_partition(&mut self, p: Partition) {
        debug_assert!(self.seq == 0, "a partition is set before any event");
        self.inbox = (0..p.groups).map(|_| Vec::new()).collect();
        self.inboxed = 0;
        self.gate = 0;
        self.part = Some(Box::new(p));
    }

    pub fn partition(&self) -> Option<&Partition> {
        self.part.as_deref()
    }

    /// `time` as the calendar orders `event` (itself, without a partition).
    #[inline(always)]
    fn order_time(&self, time: Ps, event: &Event) -> Ps {
        match &self.part {
            None => time,
            Some(p) => p.order_time(time, p.group_of(event)),
        }
    }

    /// Events handed out so far.
    pub fn popped(&self) -> u64 {
        self.popped - self.reserved
    }

    /// Events pending: every scheduled event is queued once and handed
    /// out once.
    pub fn len(&self) -> usize {
        (self.seq - self.popped) as usize
    }

    pub fn is_empty(&self) -> bool {
        self.seq == self.popped
    }

    /// Sequence number of the event being handled (or last handled): the
    /// entry before the cursor, read when asked rather than kept at every
    /// pop (a store per event for a question asked far less often). A
    /// settle or rewind that drops that entry keeps its number first.
    fn now_seq(&self) -> u64 {
        match self.head.checked_sub(1).and_then(|i| self.current.get(i)) {
            Some(e) => (e.key & LOW_MASK) >> TAG_BITS,
            None => self.left_seq,
        }
    }

    /// Keeps the number of the last event handed out before `current`
    /// drops the entries before `head`.
    fn keep_now_seq(&mut self) {
        self.left_seq = self.now_seq();
    }

    /// Takes the next sequence number for an event that may or may not
    /// be scheduled later, with [`schedule_reserved`](Self::schedule_reserved).
    ///
    /// Why: the simulator skips a host's `TxDone` that would find nothing
    /// to do, but an event at that host before its time may give it
    /// something to do after all. Scheduled then with the number taken
    /// when it was skipped, it runs exactly where it would have run had it
    /// been scheduled all along — among events at the same picosecond,
    /// after those scheduled before it and before those scheduled after.
    /// A number never scheduled is simply never handed out.
    #[inline(always)]
    pub fn reserve(&mut self) -> u64 {
        self.seq += 1;
        self.reserved += 1;
        self.popped += 1;
        self.seq
    }

    /// Whether an event reserved as `seq` at `time` would still be ahead
    /// of the event being handled, i.e. may still be scheduled.
    #[inline]
    pub fn is_ahead(&self, time: Ps, seq: u64, event: &Event) -> bool {
        let time = self.order_time(time, event);
        time > self.order_now || (time == self.order_now && seq > self.now_seq())
    }

    /// Schedules `event` at `time` under the sequence number `seq` taken
    /// earlier by [`reserve`](Self::reserve) (once), to run where it would
    /// have run had it been scheduled then. `(time, seq)` must still be
    /// ahead of the event being handled ([`is_ahead`](Self::is_ahead)).
    ///
    /// A calendar slot is kept in schedule order (what `sort_slot`'s
    /// rank sort relies on) by inserting the entry at its sequence
    /// number's place rather than at the end: usually only the few events
    /// scheduled since the reservation move. The current slot is kept in
    /// key order as [`schedule`](Self::schedule) keeps it, and the overflow
    /// heap orders by `(time, sequence)` anyway.
    pub fn schedule_reserved(&mut self, time: Ps, seq: u64, event: Event) {
        debug_assert!(seq <= self.seq && self.reserved > 0);
        debug_assert!(
            self.is_ahead(time, seq, &event),
            "reserved event {seq} at {time} already passed"
        );
        let group = self.part.as_deref().map(|p| p.group_of(&event));
        let time = self.order_time(time, &event);
        self.reserved -= 1;
        self.popped -= 1;
        let (tag, data) = self.pack(false, event);
        let low = (seq << TAG_BITS) | tag;
        if let Some(g) = group
            && time >= self.gate
        {
            self.inbox_push(g, Far { time, low, data });
            return;
        }
        let slot = time >> self.bits;
        if slot.wrapping_sub(self.cur + 1) < self.reach {
            let i = (slot as usize) & self.mask;
            let v = &mut self.slots[i];
            let at = v.partition_point(|e| e.key & LOW_MASK < low);
            v.insert(
                at,
                Entry {
                    key: ((time & self.off_mask) << OFF_SHIFT) | low,
                    data,
                },
            );
            self.occupied[i / 64] |= 1 << (i % 64);
        } else {
            self.schedule_near_or_far(time, low, data);
        }
    }

    /// Packs `event` as (kind, payload).
    ///
    /// A kind that may not pack rebuilds its event for the side table from
    /// the fields it has in registers: handing `event` itself to
    /// [`spill`](Self::spill) made the compiler store the whole event to
    /// the stack before the fit test, on every arrival and finished
    /// transmission scheduled (four stores each).
    #[inline(always)]
    fn pack(&mut self, fits: bool, event: Event) -> (u64, u64) {
        match event {
            Event::Arrive {
                node,
                port,
                pkt,
                ce,
            } => match node_port(fits, node, port) {
                Some(np) => (TAG_ARRIVE | u64::from(ce), (np << 32) | u64::from(pkt)),
                None => self.spill(event),
            },
            // Node and port where an arrival keeps them, so
            // [`EventQueue::upcoming`] reads both kinds' node alike.
            Event::TxDone { node, port } => match node_port(fits, node, port) {
                Some(np) => (TAG_TX_DONE, np << 32),
                None => self.spill(Event::TxDone { node, port }),
            },
            Event::HostTimer { host, version } => {
                (TAG_HOST_TIMER, (u64::from(host) << 32) | u64::from(version))
            }
            Event::PfcArrive {
                node,
                port,
                prio,
                quanta,
            } => match node_port(false, node, port) {
                Some(np) => (
                    TAG_PFC_ARRIVE,
                    (np << 24) | (u64::from(prio) << 16) | u64::from(quanta),
                ),
                None => self.spill(Event::PfcArrive {
                    node,
                    port,
                    prio,
                    quanta,
                }),
            },
            Event::FlowStart { flow } => (TAG_FLOW_START, u64::from(flow)),
            Event::Sample => (TAG_SAMPLE, 0),
            Event::PauseEnd { .. }
            | Event::PfcRefresh { .. }
            | Event::HostRxDrain { .. }
            | Event::LinkDown { .. }
            | Event::FlowAccept { .. } => self.spill(event),
        }
    }

    /// Keeps an event that does not pack in the side table.
    #[cold]
    #[inline(never)]
    fn spill(&mut self, event: Event) -> (u64, u64) {
        let i = match self.spill_free.pop() {
            Some(i) => {
                self.spilled[i as usize] = event;
                i
            }
            None => {
                self.spilled.push(event);
                (self.spilled.len() - 1) as u32
            }
        };
        (TAG_SPILLED, u64::from(i))
    }

    /// `p` as an [`Event`], without freeing a spilled one's place (for a
    /// look at it before [`take`](Self::take)).
    #[inline]
    pub fn event(&self, p: Packed) -> Event {
        self.unpack(p.tag, p.data)
    }

    /// `p`, handed out by [`pop_packed_until`](Self::pop_packed_until), as
    /// an [`Event`]; a spilled one's place in the side table is freed, so
    /// each popped event must be taken once (a packed kind may simply be
    /// read instead: it holds no place).
    #[inline]
    pub fn take(&mut self, p: Packed) -> Event {
        let event = self.unpack(p.tag, p.data);
        if p.tag == TAG_SPILLED {
            // Taken twice, the place would be handed to two live events.
            debug_assert!(
                !self.spill_free.contains(&(p.data as u32)),
                "spilled event {} taken twice",
                p.data
            );
            self.spill_free.push(p.data as u32);
        }
        event
    }

    /// The event packed under the low key bits `low` with payload `data`
    /// (without freeing a spilled one).
    #[inline]
    fn unpack(&self, low: u64, data: u64) -> Event {
        match low & ((1 << TAG_BITS) - 1) {
            tag @ (TAG_ARRIVE | TAG_ARRIVE_CE) => {
                let (node, port) = unpack_node_port(data >> 32);
                Event::Arrive {
                    node,
                    port,
                    pkt: data as u32,
                    ce: tag == TAG_ARRIVE_CE,
                }
            }
            TAG_TX_DONE => {
                let (node, port) = unpack_node_port(data >> 32);
                Event::TxDone { node, port }
            }
            TAG_HOST_TIMER => Event::HostTimer {
                host: (data >> 32) as u32,
                version: data as u32,
            },
            TAG_PFC_ARRIVE => {
                let (node, port) = unpack_node_port(data >> 24);
                Event::PfcArrive {
                    node,
                    port,
                    prio: (data >> 16) as u8,
                    quanta: data as u16,
                }
            }
            TAG_FLOW_START => Event::FlowStart { flow: data as u32 },
            TAG_SAMPLE => Event::Sample,
            _ => self.spilled[data as usize],
        }
    }

    /// Schedules `event` at `time`; a time in the past runs at `now` (after
    /// everything already scheduled for `now`).
    #[inline(always)]
    pub fn schedule(&mut self, time: Ps, event: Event) {
        self.schedule_known(false, time, event);
    }

    /// [`schedule`](Self::schedule), told whether the queue is known to
    /// have no [`Partition`] and the event's node and port to pack (see
    /// [`packs`]): `plain` is a constant where the simulator's lean loop
    /// calls it (see `sim::shape`), and both checks fold away.
    #[inline(always)]
    pub fn schedule_known(&mut self, plain: bool, time: Ps, event: Event) {
        debug_assert!(
            !plain || self.part.is_none(),
            "a plain schedule on a partitioned queue"
        );
        // Packed first, here, where the event's kind is known at the call
        // site and the match on it folds away: the partitioned path then
        // takes three words in registers, not an event built in memory and
        // matched twice (for its group and to pack it), which made that
        // path about 97 instructions an event at k=32 (cachegrind, session
        // 32).
        let (tag, data) = self.pack(plain, event);
        if !plain && self.part.is_some() {
            self.schedule_partitioned(time, tag, data);
            return;
        }
        self.schedule_ordered::<false>(time, tag, data);
    }

    /// [`schedule`](Self::schedule) with a [`Partition`], of an event
    /// packed as `tag` and `data`: at its place in the group-major order.
    /// Out of line, so that the plain queue's path stays small (inline,
    /// the partitioned queue cost the 320-host fat tree 1.6 % more
    /// instructions, out of line 1.2 %: callgrind, cut at 2 ms).
    #[inline(never)]
    fn schedule_partitioned(&mut self, time: Ps, tag: u64, data: u64) {
        let Some(p) = self.part.as_deref() else {
            return self.schedule_ordered::<false>(time, tag, data);
        };
        // An arrival's or transmission's node is in its payload (as
        // `upcoming` reads it); the rarer kinds are unpacked for theirs.
        let g = if tag <= TAG_TX_DONE {
            let node = payload_node(data) as usize;
            u64::from(p.node_group.get(node).copied().unwrap_or(0))
        } else {
            p.group_of(&self.unpack(tag, data))
        };
        let time = p.order_time(time, g);
        // Across groups an event lands in a later window (the window is
        // no longer than any link between groups): never in the past.
        debug_assert!(
            time >= self.order_now,
            "{:?} at {} ps scheduled into the past of a partitioned run",
            self.unpack(tag, data),
            p.real_time(time)
        );
        if time < self.gate {
            self.schedule_ordered::<true>(time, tag, data);
            return;
        }
        self.seq += 1;
        let low = (self.seq << TAG_BITS) | tag;
        self.inbox_push(g, Far { time, low, data });
    }

    /// Keeps `e`, due at or after the gate, in group `g`'s inbox.
    #[inline(always)]
    fn inbox_push(&mut self, g: u64, e: Far) {
        let inbox = &mut self.inbox[g as usize];
        inbox.push(e);
        // The line a few pushes on: at 8,192 hosts a window's inboxes
        // outgrow the core's cache, and each store to a line not loaded
        // held up the pushes after it (`perf`, session 41).
        crate::sim::prefetch_addr(
            inbox
                .as_ptr()
                .wrapping_add(inbox.len() + INBOX_WRITE_AHEAD)
                .cast(),
        );
        self.inboxed += 1;
    }

    /// Puts an event taken from an inbox into the calendar (or, beyond
    /// it, the overflow heap). Its sequence number may be older than
    /// those already in its slot (scheduled since, into an earlier
    /// group's part of a slot that straddles two, or a redeemed
    /// reservation): the slot is then marked as not in schedule order.
    #[inline(always)]
    fn place(&mut self, time: Ps, low: u64, data: u64) {
        let slot = time >> self.bits;
        if slot.wrapping_sub(self.cur + 1) < self.reach {
            let i = (slot as usize) & self.mask;
            let key = ((time & self.off_mask) << OFF_SHIFT) | low;
            let behind = (self.slot_ref(i).last()).is_some_and(|l| l.key & LOW_MASK > low);
            self.push_slot(i, Entry { key, data });
            if behind {
                self.unordered[i / 64] |= 1 << (i % 64);
            }
            self.mark_occupied(i);
        } else {
            self.schedule_near_or_far(time, low, data);
        }
    }

    /// [`place`](Self::place)s an inbox's events, in its order, loading
    /// ahead what each will touch: [`INBOX_SLOT_AHEAD`] events on, its
    /// calendar slot's header; [`INBOX_TAIL_AHEAD`] on (that header has
    /// landed), the end of the slot's buffer, which `place` reads and
    /// appends to.
    ///
    /// Why: at 8,192 hosts nearly every event waits in an inbox (see
    /// [`Partition`]) and the events of one window scatter over the
    /// calendar, so each placement missed the cache twice in a row (the
    /// header, then the buffer it points to): `open_gates` was 6.9 % of
    /// the k=32 run's time (1 ms of arrivals, `perf`, session 41), 59 %
    /// of it on the load of the slot's last entry. The hints change no
    /// event's place.
    ///
    /// Measured with [`inbox_push`](Self::inbox_push)'s own hint (session
    /// 41, `scripts/ab.py --together`, k=32 cut at 1 ms, eight pairs):
    /// user time 0.940 of the build before (median; faster in all eight
    /// pairs, 21.4-21.9 s against 22.7-23.2 s), outputs identical. Session
    /// 27 had tried loading the slot buffer eight events ahead alone and
    /// measured nothing: that load waits on the header's, which this loads
    /// twenty events earlier still, and the inbox's own lines (written a
    /// window before and out of cache by now) are loaded ahead too.
    #[inline(always)]
    fn place_inbox(&mut self, inbox: &[Far]) {
        for (j, e) in inbox.iter().enumerate() {
            if let Some(f) = inbox.get(j + INBOX_AHEAD) {
                let f: *const Far = f;
                crate::sim::prefetch_addr(f.cast());
            }
            if let Some(a) = inbox.get(j + INBOX_SLOT_AHEAD) {
                let s: *const Vec<Entry> = self.slot_ref(self.slot_of(a.time));
                crate::sim::prefetch_addr(s.cast());
            }
            if let Some(b) = inbox.get(j + INBOX_TAIL_AHEAD) {
                let s = self.slot_ref(self.slot_of(b.time));
                crate::sim::prefetch_addr(s.as_ptr().wrapping_add(s.len()).cast());
            }
            self.place(e.time, e.low, e.data);
        }
    }

    /// The calendar slot (masked) an event at `time` would go to, were it
    /// within the calendar's reach.
    #[inline(always)]
    fn slot_of(&self, time: Ps) -> usize {
        ((time >> self.bits) as usize) & self.mask
    }

    /// With a [`Partition`], before the calendar settles on slot `next`
    /// (`None`: neither the calendar nor the overflow heap holds an
    /// event): begins every group's window that starts at or before that
    /// slot's end, each taking its inbox into the calendar. True when an
    /// inbox was taken, so the next slot must be looked for again.
    #[inline(never)]
    fn open_gates(&mut self, next: Option<u64>) -> bool {
        let Some(p) = self.part.as_deref() else {
            return false;
        };
        let (w, groups) = (p.window, p.groups);
        let next = match next {
            Some(n) => n,
            None => {
                // Only inboxes hold events: nothing happens before the
                // earliest of them, so the windows up to its own begin
                // with nothing to take.
                let Some(first) = self.inbox.iter().flatten().map(|e| e.time).min() else {
                    return false;
                };
                self.gate = self.gate.max(first - first % w);
                first >> self.bits
            }
        };
        // Slot `next` reaches the gate: its end, `(next + 1) << bits`,
        // lies past it.
        while next >= self.gate >> self.bits {
            if self.inboxed == 0 {
                // Nothing waits: the gate moves to the first window
                // beginning past the slot.
                let end = (next + 1).saturating_mul(1 << self.bits);
                self.gate = end.div_ceil(w).saturating_mul(w);
                return false;
            }
            let g = ((self.gate / w) % groups) as usize;
            self.gate = self.gate.saturating_add(w);
            if !self.inbox[g].is_empty() {
                let mut inbox = std::mem::take(&mut self.inbox[g]);
                self.inboxed -= inbox.len();
                self.place_inbox(&inbox);
                inbox.clear();
                self.inbox[g] = inbox;
                return true;
            }
        }
        false
    }

    /// [`schedule`](Self::schedule) at `time` in the calendar's order.
    ///
    /// `SPARE`: a slot with no buffer takes a spare one (a partitioned
    /// run's; see `spare`). The plain queue pushes as a `Vec` does: the
    /// check cost the 320-host fat tree 0.9 % more instructions.
    #[inline(always)]
    fn schedule_ordered<const SPARE: bool>(&mut self, time: Ps, tag: u64, data: u64) {
        let time = time.max(self.order_now);
        // The sequence number's bound is checked off this path (see
        // `check_seq`).
        self.seq += 1;
        let low = (self.seq << TAG_BITS) | tag;
        let slot = time >> self.bits;
        // Into the calendar when `cur < slot <= cur + reach` (one unsigned
        // comparison). `slot <= cur` only for the current slot, or after
        // a peek settled on a later slot (see `rewind`). The calendar's
        // reach counts from `now`'s slot, not `cur`: after such a peek
        // `cur` may run ahead of `now`, and an event placed a whole
        // calendar past `cur` would, after a rewind, read as one calendar
        // earlier than it is. (Between pops, as the simulator schedules,
        // the two are the same slot and `reach` is the whole calendar.)
        if slot.wrapping_sub(self.cur + 1) < self.reach {
            let i = (slot as usize) & self.mask;
            let key = ((time & self.off_mask) << OFF_SHIFT) | low;
            if SPARE {
                self.push_slot(i, Entry { key, data });
            } else {
                self.slot_mut(i).push(Entry { key, data });
            }
            self.mark_occupied(i);
        } else {
            self.schedule_near_or_far(time, low, data);
        }
    }

    /// Appends `e` to calendar slot `i`; a slot with no buffer takes a
    /// spare one (see `spare`).
    #[inline(always)]
    fn push_slot(&mut self, i: usize, e: Entry) {
        if self.slot_ref(i).capacity() == 0 {
            self.give_spare(i);
        }
        self.slot_mut(i).push(e);
    }

    /// Hands slot `i` (which has no buffer) the latest spare buffer.
    #[cold]
    #[inline(never)]
    fn give_spare(&mut self, i: usize) {
        if let Some(b) = self.spare.pop() {
            *self.slot_mut(i) = b;
        }
    }

    /// Calendar slot `i` (a slot number masked by `mask`), without the
    /// bounds check: on the schedule path, run for nearly every event,
    /// the checks of `slots` and `occupied` were six instructions of
    /// about thirty five (a length load, a compare and a branch each).
    #[inline(always)]
    fn slot_mut(&mut self, i: usize) -> &mut Vec<Entry> {
        debug_assert!(i <= self.mask && self.slots.len() == self.mask + 1);
        // SAFETY: `with_slots` makes `slots` `mask + 1` long and nothing
        // resizes it, and `i <= mask`.
        unsafe { self.slots.get_unchecked_mut(i & self.mask) }
    }

    /// Calendar slot `i` (see [`slot_mut`](Self::slot_mut)).
    #[inline(always)]
    fn slot_ref(&self, i: usize) -> &Vec<Entry> {
        debug_assert!(i <= self.mask && self.slots.len() == self.mask + 1);
        // SAFETY: as in `slot_mut`.
        unsafe { self.slots.get_unchecked(i & self.mask) }
    }

    /// The occupancy word `w` (below `(mask + 1) / 64`), unchecked (see
    /// [`mark_occupied`](Self::mark_occupied)).
    #[inline(always)]
    fn occupied_word(&self, w: usize) -> u64 {
        debug_assert!(w < self.occupied.len());
        // SAFETY: `occupied` is `(mask + 1) / 64` words long (see
        // `mark_occupied`), and `w & (mask >> 6)` is below that.
        unsafe { *self.occupied.get_unchecked(w & (self.mask >> 6)) }
    }

    /// Marks calendar slot `i` (at most `mask`) as holding events.
    #[inline(always)]
    fn mark_occupied(&mut self, i: usize) {
        debug_assert!(i <= self.mask && self.occupied.len() * 64 == self.mask + 1);
        // SAFETY: `with_slots` makes `occupied` `(mask + 1) / 64` words
        // long and nothing resizes it, and `i <= mask`.
        unsafe { *self.occupied.get_unchecked_mut((i & self.mask) / 64) |= 1 << (i % 64) };
    }

    /// Keeps sequence numbers within a key. Checked when a slot is
    /// settled and on every schedule off the calendar's fast path, not on
    /// that path: the events it takes between two checks all wait in the
    /// calendar until a settle, so there are fewer of them than memory
    /// holds, far fewer than the half of the numbers above this bound.
    #[inline(always)]
    fn check_seq(&self) {
        assert!(self.seq <= SEQ_MAX / 2, "more than 2^48 events scheduled");
    }

    /// `schedule` into the current slot (in order) or beyond the calendar.
    #[inline(never)]
    fn schedule_near_or_far(&mut self, time: Ps, low: u64, data: u64) {
        self.check_seq();
        let slot = time >> self.bits;
        if slot < self.cur {
            self.rewind(slot);
        }
        if slot <= self.cur {
            let key = ((time & self.off_mask) << OFF_SHIFT) | low;
            let at = self.head + self.current[self.head..].partition_point(|x| x.key < key);
            self.current.insert(at, Entry { key, data });
        } else {
            self.overflow.push(Far { time, low, data });
        }
    }

    /// `reach` for the current `now` and `cur`.
    fn reach_from_now(&self) -> u64 {
        ((self.order_now >> self.bits) + self.mask as u64).saturating_sub(self.cur)
    }

    /// Makes `slot`, before the current one, current again: a peek
    /// settled the calendar on a later slot (the next occupied one, so no
    /// event lies between) and an event is now due before it. The settled
    /// events go back where they waited: their calendar slot, or the
    /// overflow heap if that is beyond the calendar's reach. The reach
    /// counts from `now`'s slot, as in [`schedule`](Self::schedule), not
    /// from `slot`: a later rewind may go back as far as `now`'s slot, and
    /// an entry past the reach would then read as one calendar earlier
    /// than it is.
    #[cold]
    #[inline(never)]
    fn rewind(&mut self, slot: u64) {
        // A peek hands nothing out, and a pop from the settled slot moves
        // `now` past `slot`: nothing before `head` to keep.
        self.keep_now_seq();
        self.current.drain(..self.head);
        self.head = 0;
        let settled = std::mem::take(&mut self.current);
        if self.cur - (self.order_now >> self.bits) <= self.mask as u64 {
            let i = (self.cur as usize) & self.mask;
            debug_assert!(self.slots[i].is_empty());
            let spare = std::mem::replace(&mut self.slots[i], settled);
            self.current = spare;
            if !self.slots[i].is_empty() {
                self.occupied[i / 64] |= 1 << (i % 64);
                // Sorted by key, not in schedule order.
                self.unordered[i / 64] |= 1 << (i % 64);
            }
        } else {
            for e in &settled {
                self.overflow.push(Far {
                    time: (self.cur << self.bits) | (e.key >> OFF_SHIFT),
                    low: e.key & ((1 << OFF_SHIFT) - 1),
                    data: e.data,
                });
            }
            self.current = settled;
            self.current.clear();
        }
        self.cur = slot;
        self.cur_time = slot << self.bits;
        self.reach = self.reach_from_now();
    }

    /// Tells `tell` what the events of the calendar slots up to
    /// `LOOKAHEAD` past the current one will read first (unordered;
    /// only slots not told before, so none until the calendar moves on),
    /// for prefetching: far
    /// enough ahead for the loads to land before they run, and each event
    /// once. Called once per slot the calendar settles on: in a busy
    /// fabric that is one more slot each time. Only arrivals and finished
    /// transmissions are told (read straight from their packed form,
    /// without making an [`Event`]): they are nearly every event.
    ///
    /// It was called once per pop, advancing one slot at a time; asked
    /// about 7 times a slot, it found nothing to do 6 times, for about 8
    /// instructions an event (cachegrind, session 18).
    ///
    /// It pays even on the 320-host fat tree, whose state fits in cache
    /// (the later stages do not; see `DEEP_PREFETCH_PORT_BYTES` in the
    /// simulator): skipping it there saves about a tenth of the queue's
    /// instructions but cost 1–8 % more user time on the full fat5ms
    /// DCQCN run (three interleaved pairs, session 17).
    ///
    /// Each event told is handed to `tell` (plain loops over the slots:
    /// an iterator flattening them cost 47 M more instructions on the
    /// mid-size fat5ms run, about 5 an event; cachegrind, session 18).
    pub fn upcoming(&mut self, mut tell: impl FnMut(Upcoming)) {
        let from = self.ahead.max(self.cur) + 1;
        let to = self.cur + LOOKAHEAD + 1;
        self.ahead = self.ahead.max(to - 1);
        for s in from..to {
            // The slot that comes up as many slots later: start loading
            // its first entries now, so reading them then does not wait.
            prefetch_entries(self.slot_ref(((s + LOOKAHEAD) as usize) & self.mask));
            for e in self.slot_ref((s as usize) & self.mask) {
                let tag = e.key & ((1 << TAG_BITS) - 1);
                if tag <= TAG_TX_DONE {
                    tell(Upcoming {
                        node: payload_node(e.data),
                        pkt: (tag < TAG_TX_DONE).then_some(e.data as u32),
                    });
                }
            }
        }
    }

    /// The current calendar slot (time >> its width's bits): it changes when
    /// the queue moves on to the next slot that holds events.
    pub fn slot(&self) -> u64 {
        self.cur
    }

    /// The events of the slot `d` slots past the current one (unordered),
    /// or with `d == 0` those of the current slot not yet handed out: a
    /// later look at the events [`upcoming`](Self::upcoming) gave out,
    /// once what they read first has loaded, to prefetch what that
    /// leads to. Events beyond the calendar are not included. In their
    /// packed form (a spilled one reads as [`Kind::Spilled`]): unpacking
    /// each into an [`Event`] to match it again cost the k=32 fat tree
    /// cut at 300 µs 0.45 % more instructions (cachegrind, session 29).
    pub fn pending_in(&self, d: u64) -> impl Iterator<Item = Packed> + '_ {
        let v = if d == 0 {
            &self.current[self.head..]
        } else if d <= self.mask as u64 {
            &self.slots[((self.cur + d) as usize) & self.mask][..]
        } else {
            &[][..]
        };
        v.iter().map(|e| Packed {
            tag: e.key & ((1 << TAG_BITS) - 1),
            data: e.data,
        })
    }

    /// Most events ever pending at once. Pending events grow only by a
    /// schedule, so the most is reached just before a pop (counted
    /// there) or now.
    pub fn peak_len(&self) -> usize {
        self.peak.max(self.len())
    }

    /// The next occupied calendar slot after the current one, as a slot
    /// number (time >> self.bits).
    fn next_occupied(&self) -> Option<u64> {
        let n = self.mask + 1;
        let start = ((self.cur + 1) as usize) & self.mask;
        let words = n / 64;
        let (w0, b0) = (start / 64, start % 64);
        let found = |w: usize, bits: u64| {
            let i = w * 64 + bits.trailing_zeros() as usize;
            let ahead = (i + n - start) & self.mask;
            Some(self.cur + 1 + ahead as u64)
        };
        // The start's word from the start on (most often the answer),
        // then whole words, then the start's word before the start: the
        // loop itself has no edge cases to test.
        let first = self.occupied_word(w0);
        if first & (!0u64 << b0) != 0 {
            return found(w0, first & (!0u64 << b0));
        }
        for k in 1..words {
            let w = (w0 + k) & (words - 1);
            let bits = self.occupied_word(w);
            if bits != 0 {
                return found(w, bits);
            }
        }
        let wrapped = first & !(!0u64 << b0);
        if wrapped != 0 {
            return found(w0, wrapped);
        }
        None
    }

    /// Moves the calendar to the next slot holding events and returns its
    /// earliest (`current[0]`, with `head` 0); `None` when no event is
    /// pending. Called once every event of the current slot was handed
    /// out.
    #[inline(never)]
    fn settle(&mut self) -> Option<Entry> {
        self.check_seq();
        self.keep_now_seq();
        self.current.clear();
        self.head = 0;
        loop {
            if self.is_empty() {
                return None;
            }
            // With `current` empty, what is neither in the overflow heap
            // nor handed out is in the calendar; an empty calendar (a
            // quiet fabric with only far timers) needs no scan.
            let in_cal = self.len() != self.overflow.len() + self.inboxed;
            let from_cal = if in_cal { self.next_occupied() } else { None };
            let from_over = self.overflow.peek().map(|e| e.time >> self.bits);
            let next = match (from_cal, from_over) {
                (Some(a), Some(b)) => Some(a.min(b)),
                (a, b) => a.or(b),
            };
            if self.part.is_some() && self.open_gates(next) {
                if self.current.is_empty() {
                    continue;
                }
                // An inbox held events of the current slot (before the
                // first slot settles, or with windows narrower than a
                // slot): they run first.
                self.merge_overflow(self.cur);
                sort_slot(&mut self.current, &mut self.scratch, false, self.bits);
                return self.current.first().copied();
            }
            let next = next?;
            self.cur = next;
            self.cur_time = next << self.bits;
            self.reach = self.reach_from_now();
            let i = (next as usize) & self.mask;
            // Whether `current` is in schedule order, as a calendar slot
            // is unless a rewind put sorted events back; events joining
            // from the overflow heap were mostly scheduled before the
            // slot's, so they end it.
            let mut in_order = true;
            if from_cal == Some(next) {
                let (bit, w) = (1 << (i % 64), (i & self.mask) / 64);
                debug_assert!(w < self.occupied.len() && w < self.unordered.len());
                // SAFETY: `occupied` and `unordered` are `(mask + 1) / 64`
                // words long from `with_slots` on (never resized), and
                // `w` is at most `mask / 64`. (Unchecked, as `slot_mut`:
                // settling a slot paid four bounds checks here.)
                unsafe {
                    *self.occupied.get_unchecked_mut(w) &= !bit;
                    let u = self.unordered.get_unchecked_mut(w);
                    in_order = *u & bit == 0;
                    *u &= !bit;
                }
                // `current` is empty: trade buffers, keeping both
                // allocations.
                debug_assert!(i <= self.mask && self.slots.len() == self.mask + 1);
                // SAFETY: as in `slot_mut`.
                let slot = unsafe { self.slots.get_unchecked_mut(i & self.mask) };
                if self.part.is_some() {
                    // The spent buffer goes to the spares; the slot is
                    // left with none until its next event.
                    let spent = std::mem::replace(&mut self.current, std::mem::take(slot));
                    debug_assert!(spent.is_empty());
                    if spent.capacity() > 0 {
                        self.spare.push(spent);
                    }
                } else {
                    std::mem::swap(&mut self.current, slot);
                }
            }
            if self.merge_overflow(next) {
                in_order = false;
            }
            sort_slot(&mut self.current, &mut self.scratch, in_order, self.bits);
            if let Some(&e) = self.current.first() {
                return Some(e);
            }
        }
    }

    /// Moves the overflow heap's events of slots up to `slot` (the
    /// current one) into `current`; true if there were any. Inline: out
    /// of line, the call per settled slot cost the 320-host fat tree
    /// 0.5 % more instructions (cachegrind, cut at 2 ms).
    #[inline(always)]
    fn merge_overflow(&mut self, slot: u64) -> bool {
        let mut any = false;
        while let Some(e) = self.overflow.peek()
            && e.time >> self.bits <= slot
        {
            let e = self.overflow.pop().expect("peeked");
            self.current.push(Entry {
                key: ((e.time & self.off_mask) << OFF_SHIFT) | e.low,
                data: e.data,
            });
            any = true;
        }
        any
    }

    /// Time of the next event. This settles the calendar on the next
    /// event's slot as [`pop`](Self::pop) would (so a peek before each pop,
    /// as the simulator's stop check does, costs no second search); an
    /// event scheduled afterwards at an earlier time rewinds it.
    #[inline]
    pub fn peek_time(&mut self) -> Option<Ps> {
        let e = match self.current.get(self.head) {
            Some(&e) => e,
            None => self.settle()?,
        };
        let t = self.cur_time | (e.key >> OFF_SHIFT);
        Some(self.part.as_ref().map_or(t, |p| p.real_time(t)))
    }

    /// Whether nothing is left to run at or before `limit` (a stop
    /// time): the next event is due after it. With a [`Partition`] the
    /// next event in the calendar's order may lie past `limit` in one
    /// group while another still has events before it: only an event past
    /// the last window's last group at `limit` is past for all.
    pub fn past(&mut self, limit: Ps) -> bool {
        let Some(p) = self.part.as_deref() else {
            return self.peek_time().is_some_and(|t| t > limit);
        };
        let last = p.limit_order_time(limit);
        let e = match self.current.get(self.head) {
            Some(&e) => e,
            None => match self.settle() {
                Some(e) => e,
                None => return false,
            },
        };
        (self.cur_time | (e.key >> OFF_SHIFT)) > last
    }

    /// Takes the next event and advances `now` to its time.
    #[inline]
    pub fn pop(&mut self) -> Option<(Ps, Event)> {
        self.pop_until(Ps::MAX)
    }

    /// Takes the next event if it is due at or before `limit` (a stop
    /// time) and advances `now` to its time: a [`peek_time`](Self::peek_time)
    /// and a [`pop`](Self::pop) in one look at the slot.
    #[inline]
    pub fn pop_until(&mut self, limit: Ps) -> Option<(Ps, Event)> {
        let (time, p) = self.pop_packed_until(limit)?;
        Some((time, self.take(p)))
    }

    /// [`pop_until`](Self::pop_until), handing the event out as the queue
    /// keeps it (see [`Packed`]). Only arrivals and finished transmissions
    /// can be read packed; any other kind is read through
    /// [`take`](Self::take), which a [`Kind::Spilled`] one needs anyway to
    /// free its place.
    #[inline]
    pub fn pop_packed_until(&mut self, limit: Ps) -> Option<(Ps, Packed)> {
        self.pop_packed_until_known(false, limit)
    }

    /// [`pop_packed_until`](Self::pop_packed_until), told whether the
    /// queue is known to have no [`Partition`] (as
    /// [`schedule_known`](Self::schedule_known)).
    #[inline(always)]
    pub fn pop_packed_until_known(&mut self, plain: bool, limit: Ps) -> Option<(Ps, Packed)> {
        debug_assert!(
            !plain || self.part.is_none(),
            "a plain pop on a partitioned queue"
        );
        if !plain && self.part.is_some() {
            return self.pop_partitioned(limit);
        }
        let (time, p) = self.pop_ordered(limit)?;
        self.now = time;
        Some((time, p))
    }

    /// [`pop_packed_until`](Self::pop_packed_until) with a [`Partition`]:
    /// the calendar's order is group-major, so at the stop time the
    /// groups before the last may hold events past it in the last window
    /// (each group's own are in time order). Those are set aside, never
    /// run, and still count as pending (the run stopped with them
    /// queued); the other groups run on to the stop time.
    ///
    /// Out of line, so that the plain queue's pop stays small; but with
    /// no division on its common path. Counted by cachegrind on the k=32
    /// fat tree (session 32), the two divisions for the simulated time
    /// and the one for the stop time's place made this function about 90
    /// instructions an event.
    #[inline(never)]
    fn pop_partitioned(&mut self, limit: Ps) -> Option<(Ps, Packed)> {
        let last = if limit == self.limit_memo.0 {
            self.limit_memo.1
        } else {
            let last = self.part.as_deref()?.limit_order_time(limit);
            self.limit_memo = (limit, last);
            last
        };
        loop {
            let (t, pk) = self.pop_ordered(last)?;
            let real = self.real_time_of(t);
            if real <= limit {
                self.now = real;
                return Some((real, pk));
            }
            // Not run: it stays pending (a spilled one keeps its place).
            self.popped -= 1;
            self.set_aside += 1;
        }
    }

    /// The simulated time of order time `t` (with a [`Partition`]): in
    /// the stretch of the last one asked, by a subtraction; else the
    /// stretch of `t`'s group window is found (two divisions) and kept.
    #[inline(always)]
    fn real_time_of(&mut self, t: Ps) -> Ps {
        if t.wrapping_sub(self.seg_lo) < self.seg_w {
            debug_assert!(
                (self.part.as_deref()).is_none_or(|p| t - self.seg_off == p.real_time(t)),
                "order time {t} read in the wrong stretch"
            );
            return t - self.seg_off;
        }
        self.enter_stretch(t)
    }

    /// See [`real_time_of`](Self::real_time_of): a group's window in the
    /// order, `[lo, lo + w)` with `lo` a multiple of `w`, lies in one
    /// round of every group's window, so its simulated times are `lo`'s
    /// plus the offset from `lo`.
    #[cold]
    #[inline(never)]
    fn enter_stretch(&mut self, t: Ps) -> Ps {
        let Some(p) = self.part.as_deref() else {
            return t;
        };
        let (w, groups) = (p.window, p.groups);
        let lo = t - t % w;
        self.seg_lo = lo;
        self.seg_w = w;
        self.seg_off = lo - real_time(w, groups, lo);
        debug_assert_eq!(t - self.seg_off, real_time(w, groups, t));
        t - self.seg_off
    }

    /// Events `pop_partitioned` set aside at a stop time.
    pub fn set_aside(&self) -> u64 {
        self.set_aside
    }

    /// The next event in the calendar's order if due at or before
    /// `limit` (in that order's time).
    #[inline(always)]
    fn pop_ordered(&mut self, limit: Ps) -> Option<(Ps, Packed)> {
        let e = match self.current.get(self.head) {
            Some(&e) => e,
            None => {
                let e = self.settle()?;
                let time = self.cur_time | (e.key >> OFF_SHIFT);
                if time > limit {
                    return None;
                }
                // `now` moves into `cur`: the calendar reaches its whole
                // length again.
                self.reach = self.mask as u64;
                e
            }
        };
        let time = self.cur_time | (e.key >> OFF_SHIFT);
        if time > limit {
            return None;
        }
        self.peak = self.peak.max(self.len());
        self.head += 1;
        self.popped += 1;
        self.order_now = time;
        Some((
            time,
            Packed {
                tag: e.key & ((1 << TAG_BITS) - 1),
                data: e.data,
            },
        ))
    }
}

/// What an upcoming event reads first: its node, and an arrival's packet.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Upcoming {
    pub node: u32,
    pub pkt: Option<u32>,
}

/// How far ahead in an inbox [`EventQueue::place_inbox`] starts loading
/// an event's calendar slot header, and the end of that slot's buffer.
const INBOX_SLOT_AHEAD: usize = 40;
const INBOX_TAIL_AHEAD: usize = 20;
/// How far ahead it starts loading the inbox's own entries.
const INBOX_AHEAD: usize = 64;
/// How far past an inbox's end [`EventQueue::inbox_push`] loads the
/// line its next pushes will write (entries of 24 bytes: three lines on).
const INBOX_WRITE_AHEAD: usize = 8;

/// Hints the CPU to load the first two cache lines of `v`'s entries.
#[inline(always)]
fn prefetch_entries(v: &[Entry]) {
    #[cfg(target_arch = "x86_64")]
    if !v.is_empty() {
        // SAFETY: a prefetch only hints the cache; it never faults or
        // changes memory (even past the end of the buffer), and SSE is
        // part of the x86-64 baseline.
        unsafe {
            use std::arch::x86_64::{_MM_HINT_T0, _mm_prefetch};
            let p = v.as_ptr() as *const i8;
            _mm_prefetch::<_MM_HINT_T0>(p);
            _mm_prefetch::<_MM_HINT_T0>(p.wrapping_add(64));
        }
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = v;
}

/// Most events a slot may hold for [`sort_slot`]'s rank sort (the
/// rank key keeps an event's place in the slot in 6 bits); a fuller slot
/// takes the general sort. The 320-host fat tree's busiest slots hold
/// under 50.
const RANK_MAX: usize = 64;
const PLACE_BITS: u32 = RANK_MAX.trailing_zeros();
// A rank key (time in the slot, then place) fits an `i16` lane.
const _: () = assert!(RANK_SLOT_BITS + PLACE_BITS <= 16);

/// Sorts a slot by ascending key.
///
/// A busy fabric's slot is far from sorted: its events were scheduled
/// by many sources (ports, hosts, timers), each in time order but
/// interleaved with the others, so on the 320-host fat tree a slot holds
/// 11 events on average (17 weighted by events), in about four ascending
/// runs, with 3 inversions per event — an insertion sort's shifts and a
/// mispredicted loop exit for nearly every event. But the calendar's
/// slots fill in schedule order, so an event's place in `v` orders it
/// just as its sequence number does, and `(time in slot, place)` orders
/// the slot exactly as `(time, sequence)`: a 16-bit key. Each event's
/// rank is then the count of smaller keys, compared four or eight at a
/// time with no branch (see [`rank_sort`]). A slot not in schedule order
/// (`in_order` false: it took events from the overflow heap, or a rewind
/// put sorted events back) takes the general sort. The caller knows which
/// from how the slot was filled, so the rank sort need not check each
/// event's sequence number against the one before (about four
/// instructions per event on the 320-host fat tree).
#[inline]
fn sort_slot(v: &mut [Entry], scratch: &mut Vec<Entry>, in_order: bool, bits: u32) {
    if v.len() <= 1 {
        return;
    }
    if !in_order || bits > RANK_SLOT_BITS {
        sort_wide_or_unordered(v, scratch, in_order, bits);
        return;
    }
    // The lanes are chosen here in one flat match, not through
    // `rank_sort_any` behind a size test: the nested form costs about one
    // instruction per event on the 320-host fat tree, where every slot
    // takes this path (callgrind, session 16).
    //
    // Lanes of 4 and 24 besides 8, 16, 32 and 64: the rank sort's cost
    // grows with its lanes, not the slot's events (the padding lanes work
    // too), and the 1 ms 320-host runs' slots (`config_fat_*`: 3.48 M
    // slots settled for 17.75 M events) hold about five events, fewer than
    // the busier fat5ms runs' (above). 2.6 % fewer instructions on
    // `config_fat_hpcc` (16.11 G to 15.69 G) and 2.9 % on `config_fat_dcqcn` (14.08 G to 13.67 G), for 3.3 M
    // (+5 %) and 1.8 M (+3 %) more simulated mispredicts: the size test
    // has one more split to guess (cachegrind, session 20; of those only
    // 1.4 M are the sort's own, the rest other branches the model's
    // address-indexed table now aliases). In user time the full fat5ms
    // HPCC run came out even: 14 interleaved pairs, ratios 0.85-1.14,
    // mean 1.00, median 1.03, at load 2-9; the full DCQCN run 0.95 and
    // 0.96 (two pairs).
    //
    // A measured dead end: checking a slot of up to 8 events for being
    // sorted already (a branch-free pass over its keys) and skipping the
    // sort then. On top of the lanes above it cost 66 M and 73 M more
    // instructions on the same two runs, and saved 1.9 M mispredicts on
    // the one and added 1.0 M on the other (session 20): too few slots
    // come sorted to pay for the pass over the rest.
    match v.len() {
        0..=4 => rank_sort::<4, i16>(v),
        5..=8 => rank_sort::<8, i16>(v),
        9..=16 => rank_sort::<16, i16>(v),
        17..=24 => rank_sort::<24, i16>(v),
        25..=32 => rank_sort::<32, i16>(v),
        33..=RANK_MAX => rank_sort::<RANK_MAX, i16>(v),
        _ => bucket_sort(v, scratch, bits),
    }
}

/// [`sort_slot`] for a slot wider than [`RANK_SLOT_BITS`] (a partitioned
/// run's 4.1 ns slots: about eighteen events each at 8,192 hosts) or one
/// not in schedule order.
///
/// An unordered slot takes the general sort. An ordered wide slot takes
/// the rank sort with 32-bit lanes (a wide slot's time and place need 18
/// bits), or, past [`WIDE_RANK_MAX`] events, [`bucket_sort`], whose
/// 128 ps sub-slots fit the 16-bit rank sort again.
///
/// Why: the general sort (insertion, or `sort_unstable` past 24 events)
/// took 5.5 % of the k=32 fat tree's time cut at 2.5 ms (`quicksort`
/// 3.4 %, `sort_ascending` 1.3 %, and its small sorts; `perf`, session
/// 29), mostly mispredicted compares on keys from many interleaved
/// sources, as on the 320-host tree before the rank sort.
#[inline(never)]
fn sort_wide_or_unordered(v: &mut [Entry], scratch: &mut Vec<Entry>, in_order: bool, bits: u32) {
    if !in_order {
        sort_ascending(v);
        return;
    }
    if v.len() <= WIDE_RANK_MAX {
        rank_sort_any::<i32>(v);
    } else {
        bucket_sort(v, scratch, bits);
    }
}

/// Most events a wide slot's rank sort takes (see
/// [`sort_wide_or_unordered`]); a fuller one takes [`bucket_sort`].
const WIDE_RANK_MAX: usize = 32;
const _: () = assert!(WIDE_RANK_MAX <= RANK_MAX);
// A wide rank key (time in the slot, then place) fits an `i32` lane with
// its sign bit clear.
const _: () = assert!(MAX_SLOT_BITS + PLACE_BITS < 32);

/// A lane of [`rank_sort`]: an event's rank key (its time in the slot,
/// then its place there) and, in the same type, its rank. Narrow lanes
/// (`i16`) take slots of up to [`RANK_SLOT_BITS`], twice as many to a
/// vector; wide ones (`i32`) take every slot width.
trait Lane: Copy + PartialOrd + From<bool> + std::ops::AddAssign {
    /// Larger than every key: padding lanes count for nothing.
    const PAD: Self;
    const ZERO: Self;
    /// The rank key of `e` at `place` in its slot.
    fn key(e: &Entry, place: usize) -> Self;
    /// A rank as an index.
    fn index(self) -> usize;
}

impl Lane for i16 {
    const PAD: Self = i16::MAX;
    const ZERO: Self = 0;
    /// The sign bit flipped, so a signed compare orders the keys as
    /// unsigned. Only the low 10 bits of the time in the slot are kept:
    /// all of a narrow slot's, and in a [`bucket_sort`] sub-slot the bits
    /// above them are its events' common ones.
    #[inline(always)]
    fn key(e: &Entry, place: usize) -> Self {
        ((((e.key >> OFF_SHIFT) << PLACE_BITS) | place as u64) as u16 ^ 0x8000) as i16
    }
    #[inline(always)]
    fn index(self) -> usize {
        self as usize
    }
}

impl Lane for i32 {
    const PAD: Self = i32::MAX;
    const ZERO: Self = 0;
    #[inline(always)]
    fn key(e: &Entry, place: usize) -> Self {
        (((e.key >> OFF_SHIFT) << PLACE_BITS) | place as u64) as i32
    }
    #[inline(always)]
    fn index(self) -> usize {
        self as usize
    }
}

/// [`rank_sort`] with lanes `K` and the fewest of 4, 8, 16, 24, 32 or
/// [`RANK_MAX`] of them that hold `v` (at most [`RANK_MAX`] events); two
/// events take one compare. Wide slots' sort takes it with `i32` lanes
/// (a slot of about eighteen events: the 24 lanes are for them).
///
/// [`bucket_sort`]'s sub-slots are this sort's slots: at 8,192 hosts a
/// 32 ps sub-slot holds about 2.5 events, and with 8 lanes as the least
/// most of the work was padding. The compare for two and the 4-lane sort
/// for three or four cut user time on the k=32 fat tree cut at 300 µs by
/// 3.1 % (five interleaved pairs, faster in each: 56.80 s against
/// 55.04 s in all, session 20, quiet machine; same outputs).
#[inline(always)]
fn rank_sort_any<K: Lane>(v: &mut [Entry]) {
    match v.len() {
        0 | 1 => {}
        // Two events (a k=32 sub-slot holds about 2.5): one compare. The
        // keys are unique (their low bits are sequence numbers).
        2 => {
            if v[0].key > v[1].key {
                v.swap(0, 1);
            }
        }
        3 | 4 => rank_sort::<4, K>(v),
        5..=8 => rank_sort::<8, K>(v),
        9..=16 => rank_sort::<16, K>(v),
        17..=24 => rank_sort::<24, K>(v),
        25..=32 => rank_sort::<32, K>(v),
        _ => rank_sort::<RANK_MAX, K>(v),
    }
}

/// log₂ of the sub-slots [`bucket_sort`] splits a slot into (32 of
/// 32 ps: on the 8,192-host fat tree, settling and sorting slots took
/// 3.3 %, 3.4 %, 3.7 % and 4.2 % of wall time with 32, 16, 8 and 4
/// sub-slots, and 6 % with quicksort; one profile each).
const BUCKET_BITS: u32 = 5;
const BUCKETS: usize = 1 << BUCKET_BITS;

/// [`sort_slot`] for a slot of more than [`RANK_MAX`] events (a large
/// fabric's: the 8,192-host fat tree's slots hold about 80), in
/// schedule order.
///
/// One counting-sort pass on the top [`BUCKET_BITS`] of the time in the
/// slot splits it into 32 sub-slots (of 32 ps in a 1.02 ns slot),
/// ascending; the pass is
/// stable, so each sub-slot is still in schedule order and is finished by
/// [`rank_sort`] exactly as a small slot is (a sub-slot that still holds
/// more than [`RANK_MAX`] events — many on the same few picoseconds —
/// takes the general sort). This replaces a quicksort whose compare
/// branches mispredict on such unsorted keys (4 % of the 8,192-host run's
/// wall time).
///
/// `bits` is the slot's width (log₂ ps): the time in the slot is the
/// key's `bits` bits from [`OFF_SHIFT`] up.
fn bucket_sort(v: &mut [Entry], scratch: &mut Vec<Entry>, bits: u32) {
    debug_assert!((MIN_SLOT_BITS..=MAX_SLOT_BITS).contains(&bits));
    let shift = OFF_SHIFT + bits - BUCKET_BITS;
    debug_assert!(in_schedule_order(v));
    let mut count = [0usize; BUCKETS];
    for e in v.iter() {
        count[((e.key >> shift) as usize) & (BUCKETS - 1)] += 1;
    }
    let mut start = [0usize; BUCKETS];
    let mut at = 0;
    for (s, &c) in start.iter_mut().zip(&count) {
        *s = at;
        at += c;
    }
    scratch.clear();
    scratch.extend_from_slice(v);
    let mut next = start;
    for e in scratch.iter() {
        let b = ((e.key >> shift) as usize) & (BUCKETS - 1);
        v[next[b]] = *e;
        next[b] += 1;
    }
    for (&s, &c) in start.iter().zip(&count) {
        let part = &mut v[s..s + c];
        if c > RANK_MAX {
            sort_ascending(part);
        } else {
            rank_sort_any::<i16>(part);
        }
    }
}

/// Whether `v`'s events are in the order they were scheduled (ascending
/// sequence numbers), as [`rank_sort`] and [`bucket_sort`] need.
fn in_schedule_order(v: &[Entry]) -> bool {
    v.windows(2)
        .all(|w| w[0].key & LOW_MASK < w[1].key & LOW_MASK)
}

/// [`sort_slot`]'s rank sort of `v` (at most `L` events, `L` a multiple
/// of 4: half an SSE2 vector of `i16` lanes or whole ones, a whole one of
/// `i32`), which must be in schedule order (the order is exact only then).
/// `K` is the lane: `i16` for slots of up to [`RANK_SLOT_BITS`] and
/// [`bucket_sort`]'s sub-slots, `i32` for any width.
#[inline(always)]
fn rank_sort<const L: usize, K: Lane>(v: &mut [Entry]) {
    debug_assert!(v.len() <= L && L <= RANK_MAX && L.is_multiple_of(4));
    debug_assert!(in_schedule_order(v), "slot not in schedule order");
    // Keys, padded with the largest (never smaller than a key, so padding
    // counts for nothing; see [`Lane::key`]). Sequence numbers (the key's
    // low bits) are unique and at least 1.
    //
    // Every loop runs all `L` lanes, a count fixed at compile time (the
    // loops unroll, and no exit depends on the slot's length): loops over
    // the slot's events mispredicted their exit about once a slot each,
    // 2.3 mispredicts a slot in all; running every lane cut the sort's
    // to 0.3 a slot for 3 more instructions an event (cachegrind's
    // branch simulation on the mid-size fat5ms run, session 18). The
    // padding lanes read and write the slot's last event (clamped
    // indices, no branch); see the write-back below for why that is
    // harmless.
    let n = v.len();
    debug_assert!(n > 0, "an empty slot is never sorted");
    let last = n - 1;
    let mut k = [K::PAD; L];
    // The events, read once (then written back by rank).
    let mut src = [Entry { key: 0, data: 0 }; L];
    for i in 0..L {
        let e = v[i.min(last)];
        let key = K::key(&e, i);
        k[i] = if i < n { key } else { K::PAD };
        src[i] = e;
    }
    let mut rank = [K::ZERO; L];
    for &kj in &k {
        for (r, &k) in rank.iter_mut().zip(&k) {
            *r += K::from(kj < k);
        }
    }
    // A padding lane counts no key (`K::PAD` is smaller than none) and
    // lands at `n` at most (clamped to the slot's last place): written
    // first, from the last lane down, its write is overwritten, as the
    // real lanes' ranks are exactly the places `0..n`.
    for i in (0..L).rev() {
        v[rank[i].index().min(last)] = src[i];
    }
}

/// Sorts a slot by ascending key where no rank sort applies (both rare):
/// a slot not in schedule order, or a [`bucket_sort`] sub-slot of more
/// than [`RANK_MAX`] events. An insertion sort for a few events, mostly
/// in order.
#[cold]
fn sort_ascending(v: &mut [Entry]) {
    if v.len() > 24 {
        v.sort_unstable_by_key(|e| e.key);
        return;
    }
    for i in 1..v.len() {
        let e = v[i];
        if v[i - 1].key < e.key {
            continue;
        }
        let mut j = i;
        while j > 0 && v[j - 1].key > e.key {
            v[j] = v[j - 1];
            j -= 1;
        }
        v[j] = e;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bucket_sort_sorts_sub_slots_of_every_small_size() {
        // Slots past the rank sort's lanes, whose 32 sub-slots each hold
        // 0-9 events (sizes 2, 3 and 4 take their own paths in
        // `rank_sort_any`), in schedule order as a calendar slot is.
        let mut x: u64 = 7;
        let mut scratch = Vec::new();
        for round in 0..40u64 {
            // Every slot width, whose sub-slots are 2 ps to 32 ps wide.
            let bits = MIN_SLOT_BITS + (round as u32) % (MAX_SLOT_BITS - MIN_SLOT_BITS + 1);
            let mut v = Vec::new();
            let mut seq = 1u64;
            while v.len() <= RANK_MAX {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                let bucket = x % BUCKETS as u64;
                let burst = (x >> 8) % 10 + round % 3;
                for _ in 0..burst {
                    x ^= x << 13;
                    x ^= x >> 7;
                    x ^= x << 17;
                    // A time within the bucket (few distinct values, so
                    // ties too), then the sequence number.
                    let sub = bits - BUCKET_BITS;
                    let off = (bucket << sub) | (x & 3 & ((1 << sub) - 1));
                    v.push(Entry {
                        key: (off << OFF_SHIFT) | (seq << TAG_BITS),
                        data: seq,
                    });
                    seq += 1;
                }
            }
            let mut want = v.clone();
            want.sort_by_key(|e| e.key);
            sort_slot(&mut v, &mut scratch, true, bits);
            assert_eq!(
                v.iter().map(|e| e.key).collect::<Vec<_>>(),
                want.iter().map(|e| e.key).collect::<Vec<_>>(),
                "round {round} bits {bits}"
            );
        }
    }

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
        // Calendars of every length and slots of every width.
        for q in [
            EventQueue::new(),
            EventQueue::with_horizon(0, DEFAULT_SLOT_BITS),
            EventQueue::with_horizon(50_000_000, DEFAULT_SLOT_BITS),
            EventQueue::with_horizon(3_000_000, 9),
            EventQueue::with_horizon(3_000_000, 8),
            EventQueue::with_horizon(3_000_000, MIN_SLOT_BITS),
        ] {
            random_schedules(q);
        }
    }

    fn random_schedules(mut q: EventQueue) {
        // Interleaved schedules and pops, including equal times, far
        // futures and a peek followed by an earlier schedule, with the
        // look-ahead asked for after every pop as the simulator does.
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
                // Nothing to prefetch for a flow start.
                q.upcoming(|u| panic!("told {u:?}"));
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
    fn every_kind_round_trips_in_order() {
        // Packed and spilled kinds alike (nodes and ports too large to
        // pack, pause expiry and refresh), with a spilled place reused.
        let evs = [
            Event::Arrive {
                node: 7,
                port: 3,
                pkt: u32::MAX,
                ce: false,
            },
            Event::Arrive {
                node: 7,
                port: 3,
                pkt: 11,
                ce: true,
            },
            Event::Arrive {
                node: 1 << 20,
                port: 5000,
                pkt: 9,
                ce: true,
            },
            Event::TxDone {
                node: (1 << 20) - 1,
                port: 4095,
            },
            Event::TxDone {
                node: 2,
                port: 4096,
            },
            Event::HostTimer {
                host: 11,
                version: u32::MAX,
            },
            Event::PfcArrive {
                node: 5,
                port: 6,
                prio: 7,
                quanta: 0xffff,
            },
            Event::PauseEnd {
                node: 1,
                port: 2,
                prio: 3,
                version: 4,
            },
            Event::PfcRefresh {
                node: 8,
                port: 9,
                prio: 1,
                version: u32::MAX,
            },
            Event::FlowStart { flow: 12 },
            Event::Sample,
            Event::HostRxDrain { host: 13 },
        ];
        let mut q = EventQueue::new();
        for (i, e) in evs.iter().enumerate() {
            q.schedule(1_000 + (i as u64 % 3) * 40_000, *e);
        }
        let mut want: Vec<_> = evs
            .iter()
            .enumerate()
            .map(|(i, e)| (1_000 + (i as u64 % 3) * 40_000, i, *e))
            .collect();
        want.sort_by_key(|w| (w.0, w.1));
        let got: Vec<_> = std::iter::from_fn(|| q.pop()).collect();
        let want: Vec<_> = want.into_iter().map(|w| (w.0, w.2)).collect();
        assert_eq!(got, want);
        let t = q.now() + 5;
        q.schedule(t, evs[6]);
        assert_eq!(q.peek_time(), Some(t));
        assert_eq!(q.pop(), Some((t, evs[6])));
    }

    #[test]
    fn an_event_due_before_a_peeked_one_still_runs_first() {
        // The peek settles the calendar on the later event's slot; the
        // earlier schedule rewinds it. Near (within the calendar) and far
        // (from the overflow heap), with events left behind the peeked one.
        for later in [50_000, 40_000_000] {
            let mut q = EventQueue::new();
            q.schedule(5_000, Event::FlowStart { flow: 0 });
            assert_eq!(q.pop().map(|p| p.0), Some(5_000));
            q.schedule(later, Event::FlowStart { flow: 1 });
            q.schedule(later + 1, Event::FlowStart { flow: 2 });
            q.schedule(later + 3_000, Event::FlowStart { flow: 3 });
            assert_eq!(q.peek_time(), Some(later));
            q.schedule(5_000, Event::FlowStart { flow: 4 });
            q.schedule(7_000, Event::FlowStart { flow: 5 });
            assert_eq!(q.peek_time(), Some(5_000));
            q.schedule(6_000, Event::FlowStart { flow: 6 });
            let got: Vec<_> = std::iter::from_fn(|| q.pop()).collect();
            let want = [
                (5_000, 4),
                (6_000, 6),
                (7_000, 5),
                (later, 1),
                (later + 1, 2),
                (later + 3_000, 3),
            ]
            .map(|(t, flow)| (t, Event::FlowStart { flow }));
            assert_eq!(got, want, "later {later}");
            assert!(q.is_empty());
        }
        // A peek settles on slot 1,000; an event then scheduled 2,000
        // slots further out (within the calendar from there, not from
        // now's slot 0) must not run early after a rewind to slot 100.
        let slot = |s: u64| s << DEFAULT_SLOT_BITS;
        let mut q = EventQueue::new();
        q.schedule(0, Event::FlowStart { flow: 0 });
        assert_eq!(q.pop().map(|p| p.0), Some(0));
        q.schedule(slot(1_000), Event::FlowStart { flow: 1 });
        assert_eq!(q.peek_time(), Some(slot(1_000)));
        q.schedule(slot(3_000), Event::FlowStart { flow: 2 });
        q.schedule(slot(100), Event::FlowStart { flow: 3 });
        let got: Vec<_> = std::iter::from_fn(|| q.pop()).collect();
        let want = [(slot(100), 3), (slot(1_000), 1), (slot(3_000), 2)]
            .map(|(t, flow)| (t, Event::FlowStart { flow }));
        assert_eq!(got, want);
        // A peek settles on slot 2,050 (past the calendar's 2,048 slots
        // from now's slot 0, so from the overflow heap); a rewind to slot
        // 100 is within a calendar of it, but the settled event must not
        // go back into the calendar: a second rewind, to slot 1, would
        // read its place as slot 2 (2,050 less a calendar).
        let mut q = EventQueue::new();
        q.schedule(0, Event::FlowStart { flow: 0 });
        assert_eq!(q.pop().map(|p| p.0), Some(0));
        q.schedule(slot(2_050), Event::FlowStart { flow: 1 });
        assert_eq!(q.pop_until(slot(1)), None);
        q.schedule(slot(100), Event::FlowStart { flow: 2 });
        q.schedule(slot(1), Event::FlowStart { flow: 3 });
        let got: Vec<_> = std::iter::from_fn(|| q.pop()).collect();
        let want = [(slot(1), 3), (slot(100), 2), (slot(2_050), 1)]
            .map(|(t, flow)| (t, Event::FlowStart { flow }));
        assert_eq!(got, want);
    }

    /// `n` random events in the slot starting at `slot`, at a few
    /// distinct times (ties) anywhere in it, none before `now`.
    fn burst(slot: Ps, now: Ps, n: usize, mut x: u64) -> Vec<(Ps, Event)> {
        (0..n)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                ((slot + (x >> 20) % 5 * 200 + x % 3).max(now), any_event(x))
            })
            .collect()
    }

    /// Every kind of event, packed or spilled, from one random number.
    fn any_event(x: u64) -> Event {
        let (node, port, n32) = (
            (x >> 8) as u32 % 40,
            (x >> 16) as u16 % 70,
            (x >> 24) as u32,
        );
        // Now and then a node or port too large to pack.
        let (node, port) = match (x >> 56) % 16 {
            0 => (node + (1 << 20), port),
            1 => (node, port + 4096),
            _ => (node, port),
        };
        match x % 9 {
            0 => Event::Arrive {
                node,
                port,
                pkt: n32,
                ce: x & (1 << 40) != 0,
            },
            1 => Event::TxDone { node, port },
            2 => Event::HostTimer {
                host: node,
                version: n32,
            },
            3 => Event::PfcArrive {
                node,
                port,
                prio: (x >> 40) as u8 % 8,
                quanta: (x >> 44) as u16,
            },
            4 => Event::PauseEnd {
                node,
                port,
                prio: (x >> 40) as u8 % 8,
                version: n32,
            },
            5 => Event::PfcRefresh {
                node,
                port,
                prio: (x >> 40) as u8 % 8,
                version: n32,
            },
            6 => Event::FlowStart { flow: n32 },
            7 => Event::Sample,
            _ => Event::HostRxDrain { host: n32 },
        }
    }

    /// One step of a model run: schedule an event `dt` after now
    /// (negative: in the past), schedule a burst of events into the slot
    /// `dt` after now (a busy fabric's slot, out of time order, with
    /// ties), pop, pop with a limit `dt` after now, or peek.
    #[derive(Debug, Clone)]
    enum Op {
        Schedule(i64, u64),
        Burst(u64, usize, u64),
        Pop,
        /// Pop as the simulator does: packed, an arrival or finished
        /// transmission read in place, any other taken.
        PopPacked,
        PopUntil(u64),
        Peek,
        /// Reserve a sequence number for an event `dt` after now.
        Reserve(u64, u64),
        /// Schedule (or, if it has passed, drop) the reservation picked
        /// by the number.
        Redeem(usize),
    }

    fn op() -> impl proptest::strategy::Strategy<Value = Op> {
        use proptest::prelude::*;
        // Delays as a fabric makes them: the same slot, a serialization
        // time (many events on exactly the same picosecond), a link delay,
        // beyond the calendar, and in the past.
        let dt = prop_oneof![
            Just(0i64),
            0i64..1_024,
            Just(80_000i64),
            prop::sample::select(vec![80_000i64, 81_920, 1_000_000, 1_080_000]),
            0i64..3_000_000,
            0i64..50_000_000_000,
            -5_000i64..0,
        ];
        // Bursts of every size the slot sort treats apart (one event, the
        // rank sort's lane counts, beyond its bound: split into sub-slots, some
        // of them beyond the bound again), near and beyond the calendar.
        let burst = (
            prop_oneof![Just(0u64), 1_024u64..3_000_000, 40_000_000u64..41_000_000],
            prop_oneof![1usize..=9, 9usize..=33, 33usize..=80, 60usize..=400],
            any::<u64>(),
        )
            .prop_map(|(dt, n, x)| Op::Burst(dt, n, x));
        prop_oneof![
            5 => (dt, any::<u64>()).prop_map(|(dt, x)| Op::Schedule(dt, x)),
            1 => burst,
            2 => Just(Op::Pop),
            2 => Just(Op::PopPacked),
            1 => (0u64..200_000).prop_map(Op::PopUntil),
            1 => Just(Op::Peek),
            // A host's frame ends a serialization time ahead (sometimes
            // on the same picosecond as others), or in this very slot.
            2 => (
                prop_oneof![Just(0u64), 0u64..1_024, Just(80_000u64), 0u64..3_000_000],
                any::<u64>()
            )
                .prop_map(|(dt, x)| Op::Reserve(dt, x)),
            2 => any::<usize>().prop_map(Op::Redeem),
        ]
    }

    proptest::proptest! {
        /// The queue against the plainest model: a binary heap of
        /// `(time, sequence)` — the order of a run, ties in the order
        /// scheduled. Any change of order fails it.
        #[test]
        fn pops_in_the_order_of_a_binary_heap(
            slots in proptest::sample::select(vec![0u64, 3_000_000, 50_000_000]),
            bits in proptest::sample::select(vec![MIN_SLOT_BITS, 8, DEFAULT_SLOT_BITS]),
            ops in proptest::collection::vec(op(), 1..1_500),
        ) {
            use std::cmp::Reverse;
            let mut q = EventQueue::with_horizon(slots, bits);
            let mut model = BinaryHeap::new();
            // Events by sequence number (the heap orders `(time, seq)`).
            let mut events = vec![Event::Sample];
            // Reservations not yet redeemed: (time, seq); and the last
            // `(time, seq)` handed out.
            let mut reserved: Vec<(Ps, usize)> = Vec::new();
            let (mut last, mut handed) = ((0, 0), 0u64);
            for op in ops {
                let now = q.now();
                match op {
                    Op::Reserve(dt, x) => {
                        let s = q.reserve();
                        proptest::prop_assert_eq!(s as usize, events.len());
                        reserved.push((now + dt, events.len()));
                        events.push(any_event(x));
                    }
                    Op::Redeem(i) if !reserved.is_empty() => {
                        let (t, s) = reserved.swap_remove(i % reserved.len());
                        let ahead = (t, s) > last;
                        proptest::prop_assert_eq!(q.is_ahead(t, s as u64, &Event::Sample), ahead);
                        if ahead {
                            q.schedule_reserved(t, s as u64, events[s]);
                            model.push(Reverse((t, s)));
                        }
                    }
                    Op::Redeem(_) => {}
                    Op::Schedule(dt, x) => {
                        let t = now.saturating_add_signed(dt);
                        let e = any_event(x);
                        q.schedule(t, e);
                        model.push(Reverse((t.max(now), events.len())));
                        events.push(e);
                    }
                    Op::Burst(dt, n, x) => {
                        for (t, e) in burst((now + dt) >> bits << bits, now, n, x) {
                            q.schedule(t, e);
                            model.push(Reverse((t, events.len())));
                            events.push(e);
                        }
                    }
                    Op::Pop => {
                        let top = model.pop();
                        if let Some(Reverse(ts)) = top {
                            last = ts;
                            handed += 1;
                        }
                        let want = top.map(|Reverse((t, s))| (t, events[s]));
                        proptest::prop_assert_eq!(q.pop(), want);
                        // As the simulator does (once a slot; more often is no harm).
                        q.upcoming(|_| {});
                    }
                    Op::PopPacked => {
                        let top = model.pop();
                        let got = q.pop_packed_until(Ps::MAX);
                        proptest::prop_assert_eq!(got.is_some(), top.is_some());
                        if let (Some((t, p)), Some(Reverse((tm, s)))) = (got, top) {
                            last = (tm, s);
                            handed += 1;
                            let want = events[s];
                            proptest::prop_assert_eq!(t, tm);
                            proptest::prop_assert_eq!(q.event(p), want);
                            let packs = |node, port| node_port(false, node, port).is_some();
                            proptest::prop_assert_eq!(
                                p.kind() == Kind::Arrive,
                                matches!(want, Event::Arrive { node, port, .. } if packs(node, port))
                            );
                            proptest::prop_assert_eq!(
                                p.kind() == Kind::TxDone,
                                matches!(want, Event::TxDone { node, port } if packs(node, port))
                            );
                            let got = match p.kind() {
                                Kind::Arrive => {
                                    let (node, port, pkt, ce) = p.arrive();
                                    Event::Arrive {
                                        node,
                                        port,
                                        pkt,
                                        ce,
                                    }
                                }
                                Kind::TxDone => {
                                    let (node, port) = p.tx_done();
                                    Event::TxDone { node, port }
                                }
                                _ => q.take(p),
                            };
                            proptest::prop_assert_eq!(got, want);
                        }
                        q.upcoming(|_| {});
                    }
                    Op::PopUntil(dt) => {
                        let limit = now + dt;
                        let want = match model.peek() {
                            Some(Reverse((t, ..))) if *t <= limit => {
                                let Reverse((t, s)) = model.pop().expect("peeked");
                                last = (t, s);
                                handed += 1;
                                Some((t, events[s]))
                            }
                            _ => None,
                        };
                        proptest::prop_assert_eq!(q.pop_until(limit), want);
                    }
                    Op::Peek => {
                        let want = model.peek().map(|Reverse((t, ..))| *t);
                        proptest::prop_assert_eq!(q.peek_time(), want);
                    }
                }
                proptest::prop_assert_eq!(q.len(), model.len());
                proptest::prop_assert_eq!(q.popped(), handed);
            }
            let peak = q.peak_len();
            proptest::prop_assert!(peak >= q.len());
            while let Some(Reverse((t, s))) = model.pop() {
                proptest::prop_assert_eq!(q.pop(), Some((t, events[s])));
            }
            proptest::prop_assert_eq!(q.pop(), None);
            proptest::prop_assert_eq!(q.peak_len(), peak);
            // Every spilled place was freed once: none leaked (an event
            // popped packed and never taken) or was freed twice.
            proptest::prop_assert_eq!(q.spill_free.len(), q.spilled.len());
        }
    }

    proptest::proptest! {
        /// A partitioned queue against a binary heap of `(order time,
        /// sequence)`, the order a [`Partition`] defines: windows, then
        /// groups, then time. Windows narrower and wider than a slot, and
        /// every operation of the plain queue's test; an event that would
        /// land in the calendar's past (a cross-group event less than a
        /// window ahead, which no fabric makes) is not scheduled. Events
        /// wait in their group's inbox until its window begins, so any
        /// slip in when an inbox is taken, or where its events land,
        /// changes the order and fails this.
        #[test]
        fn partitioned_pops_in_group_major_order(
            window in proptest::sample::select(vec![700u64, 1_000, 80_000, 1_000_000]),
            groups in 2u32..6,
            slots in proptest::sample::select(vec![0u64, 3_000_000, 50_000_000]),
            bits in proptest::sample::select(vec![MIN_SLOT_BITS, 8, DEFAULT_SLOT_BITS]),
            ops in proptest::collection::vec(op(), 1..1_500),
        ) {
            use std::cmp::Reverse;
            let of = |n: u32| n % (groups - 1) + 1;
            let part = Partition::new(
                window,
                groups,
                (0..40).map(of).collect(),
                (0..40).map(of).collect(),
                (0..64).map(of).collect(),
                (0..64).map(|f| of(f + 1)).collect(),
            );
            let mut q = EventQueue::with_horizon(slots, bits);
            q.set_partition(part.clone());
            let order = |t: Ps, e: &Event| part.order_time(t, part.group_of(e));
            let mut model = BinaryHeap::new();
            let mut events = vec![Event::Sample];
            let mut reserved: Vec<(Ps, usize)> = Vec::new();
            // The last `(order time, seq)` handed out, events handed out,
            // and those a stop time set aside.
            let (mut last, mut handed, mut aside) = ((0, 0), 0u64, 0usize);
            for op in ops {
                let now = q.now();
                match op {
                    Op::Reserve(dt, x) => {
                        let s = q.reserve();
                        proptest::prop_assert_eq!(s as usize, events.len());
                        reserved.push((now + dt, events.len()));
                        events.push(any_event(x));
                    }
                    Op::Redeem(i) if !reserved.is_empty() => {
                        let (t, s) = reserved.swap_remove(i % reserved.len());
                        let e = events[s];
                        let ahead = (order(t, &e), s) > last;
                        proptest::prop_assert_eq!(q.is_ahead(t, s as u64, &e), ahead);
                        if ahead {
                            q.schedule_reserved(t, s as u64, e);
                            model.push(Reverse((order(t, &e), s)));
                        }
                    }
                    Op::Redeem(_) => {}
                    Op::Schedule(dt, x) => {
                        let t = now.saturating_add_signed(dt).max(now);
                        let e = any_event(x);
                        if order(t, &e) >= last.0 {
                            q.schedule(t, e);
                            model.push(Reverse((order(t, &e), events.len())));
                            events.push(e);
                        }
                    }
                    Op::Burst(dt, n, x) => {
                        for (t, e) in burst((now + dt) >> bits << bits, now, n, x) {
                            if order(t, &e) >= last.0 {
                                q.schedule(t, e);
                                model.push(Reverse((order(t, &e), events.len())));
                                events.push(e);
                            }
                        }
                    }
                    Op::Pop | Op::PopPacked => {
                        let top = model.pop();
                        if let Some(Reverse(ts)) = top {
                            last = ts;
                            handed += 1;
                        }
                        let want = top.map(|Reverse((o, s))| (part.real_time(o), events[s]));
                        let got = match op {
                            Op::Pop => q.pop(),
                            _ => q.pop_packed_until(Ps::MAX).map(|(t, p)| (t, q.take(p))),
                        };
                        proptest::prop_assert_eq!(got, want);
                        q.upcoming(|_| {});
                    }
                    Op::PopUntil(dt) => {
                        // At a stop time, events past it in groups before
                        // the last are set aside, never run.
                        let limit = now + dt;
                        let end = part.limit_order_time(limit);
                        let mut want = None;
                        while let Some(&Reverse((o, s))) = model.peek()
                            && o <= end
                        {
                            model.pop();
                            // The queue has passed it either way.
                            last = (o, s);
                            if part.real_time(o) <= limit {
                                handed += 1;
                                want = Some((part.real_time(o), events[s]));
                                break;
                            }
                            aside += 1;
                        }
                        proptest::prop_assert_eq!(q.pop_until(limit), want);
                    }
                    Op::Peek => {
                        let want = model.peek().map(|Reverse((o, ..))| part.real_time(*o));
                        proptest::prop_assert_eq!(q.peek_time(), want);
                    }
                }
                proptest::prop_assert_eq!(q.len(), model.len() + aside);
                proptest::prop_assert_eq!(q.popped(), handed);
                proptest::prop_assert_eq!(q.set_aside() as usize, aside);
            }
            while let Some(Reverse((o, s))) = model.pop() {
                proptest::prop_assert_eq!(q.pop(), Some((part.real_time(o), events[s])));
            }
            proptest::prop_assert_eq!(q.pop(), None);
            if aside == 0 {
                proptest::prop_assert!(q.is_empty());
                proptest::prop_assert_eq!(q.spill_free.len(), q.spilled.len());
            }
        }
    }

    #[test]
    fn sorts_slots_of_every_size_and_mix() {
        // One slot holding `n` events out of time order, with ties; also
        // joined by events from the overflow heap (scheduled earlier, so
        // with smaller sequence numbers: the slot is not in schedule
        // order and takes the general sort), and by events scheduled into
        // it once it is current (inserted in order). Every size, so both
        // sides of each of the rank sort's lane counts (4, 8, 16, 24, 32,
        // 64) and the bucket sort past them; slots wider than the 16-bit
        // rank sort takes too (its 32-bit lanes, to 32 events).
        let mut x: u64 = 99;
        for (n, bits) in (0..=100usize)
            .flat_map(|n| [(n, DEFAULT_SLOT_BITS), (n, 8), (n, 11), (n, MAX_SLOT_BITS)])
        {
            for joined in [false, true] {
                let mut q = EventQueue::with_horizon(2_000_000, bits);
                let mut want = Vec::new();
                let base = 50_000_000u64 << DEFAULT_SLOT_BITS;
                if joined {
                    for i in 0..3 {
                        q.schedule(
                            base + 7 * i,
                            Event::FlowStart {
                                flow: 1_000 + i as u32,
                            },
                        );
                        want.push((base + 7 * i, 1_000 + i));
                    }
                }
                // Now close enough that the slot is within the calendar.
                q.schedule(base - 1_000, Event::Sample);
                assert_eq!(q.pop().map(|p| p.0), Some(base - 1_000));
                // Across a wide slot's whole width.
                let spread = ((1u64 << bits) - 32).max(1_000);
                for i in 0..n {
                    x ^= x << 13;
                    x ^= x >> 7;
                    x ^= x << 17;
                    let t = base + (x % 4) * 7 + if i % 2 == 0 { x % spread } else { 0 };
                    q.schedule(t, Event::FlowStart { flow: i as u32 });
                    want.push((t, i as u64));
                }
                let mut got = Vec::new();
                if let Some((t, Event::FlowStart { flow })) = q.pop() {
                    got.push((t, u64::from(flow)));
                    // Due with the event just popped, so after it.
                    q.schedule(t, Event::FlowStart { flow: 2_000 });
                    want.push((t, 2_000));
                }
                // Ties in the order scheduled: the model's sequence is
                // the order pushed above, except that the joined
                // overflow events were scheduled first of all.
                let order = |w: &(u64, u64)| match w.1 {
                    1_000.. if w.1 < 2_000 => 0,
                    2_000 => 2,
                    _ => 1,
                };
                let mut sorted: Vec<_> = want.iter().enumerate().collect();
                sorted.sort_by_key(|(i, w)| (w.0, order(w), *i));
                while let Some((t, Event::FlowStart { flow })) = q.pop() {
                    got.push((t, u64::from(flow)));
                }
                let sorted: Vec<_> = sorted.into_iter().map(|(_, w)| *w).collect();
                assert_eq!(got, sorted, "n {n} bits {bits} joined {joined}");
            }
        }
    }

    #[test]
    fn peak_counts_the_most_pending_at_once() {
        let mut q = EventQueue::new();
        for t in [10, 20, 30] {
            q.schedule(t, Event::Sample);
        }
        q.pop();
        q.pop();
        q.schedule(40, Event::Sample);
        assert_eq!(q.peak_len(), 3);
        for t in [50, 60, 70] {
            q.schedule(t, Event::Sample);
        }
        assert_eq!(q.peak_len(), 5);
        while q.pop().is_some() {}
        assert_eq!(q.peak_len(), 5);
    }

    #[test]
    fn upcoming_tells_what_each_slot_ahead_reads() {
        let slot = |s: u64| s << DEFAULT_SLOT_BITS;
        let mut q = EventQueue::new();
        q.schedule(0, Event::Sample);
        q.schedule(slot(1) + 5, Event::TxDone { node: 9, port: 2 });
        q.schedule(
            slot(1),
            Event::Arrive {
                node: (1 << 20) - 1,
                port: 4095,
                pkt: u32::MAX,
                ce: false,
            },
        );
        q.schedule(
            slot(2),
            Event::HostTimer {
                host: 1,
                version: 2,
            },
        );
        q.schedule(
            slot(3),
            Event::Arrive {
                node: 4,
                port: 1,
                pkt: 77,
                ce: true,
            },
        );
        // Too large to pack: waits in the side table, so not told.
        q.schedule(
            slot(3),
            Event::Arrive {
                node: 1 << 20,
                port: 1,
                pkt: 78,
                ce: false,
            },
        );
        q.schedule(slot(4), Event::TxDone { node: 5, port: 0 });
        assert_eq!(q.pop(), Some((0, Event::Sample)));
        let told = |q: &mut EventQueue| {
            let mut v = Vec::new();
            q.upcoming(|u| v.push(u));
            v
        };
        let ahead: Vec<Vec<Upcoming>> = (0..3).map(|_| told(&mut q)).collect();
        let up = |node, pkt| Upcoming { node, pkt };
        assert_eq!(
            ahead,
            [
                // Three slots past the current one (slot 2's timer is not
                // told), then none until the calendar moves on.
                vec![
                    up(9, None),
                    up((1 << 20) - 1, Some(u32::MAX)),
                    up(4, Some(77))
                ],
                vec![],
                vec![],
            ]
        );
        q.pop();
        assert_eq!(told(&mut q), [up(5, None)]);
        // A calendar that jumps several slots is told of each new slot
        // once: slots 8 to 10 (5 and 6 were empty; 7, the current slot, is
        // never told) after a jump
        // from slot 4 to slot 7.
        while q.pop().is_some() {}
        assert_eq!(q.now(), slot(4));
        q.schedule(slot(7), Event::TxDone { node: 6, port: 0 });
        for s in 8..=10 {
            q.schedule(
                slot(s),
                Event::TxDone {
                    node: s as u32,
                    port: 0,
                },
            );
        }
        assert_eq!(q.pop().map(|p| p.0), Some(slot(7)));
        assert_eq!(told(&mut q), [up(8, None), up(9, None), up(10, None)]);
        assert_eq!(told(&mut q), []);
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
