//! A port: one end of a full-duplex link with its egress side (eight
//! priority queues, a serializer, PFC pause state) and the counters a
//! switch ASIC keeps per port.

use crate::ecn::EcnConfig;
use crate::event::Ps;
use std::collections::VecDeque;

/// Priorities per port (802.1p).
pub const NPRIO: usize = 8;

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

/// Egress state and counters of one port.
///
/// Laid out in declaration order (`repr(C)`) with what every packet
/// touches first — serializer, link, queue lengths, pause deadlines, the
/// queues — so a dequeue or enqueue reads a few adjacent cache lines of a
/// port rather than lines scattered over its 1.1 KB.
#[derive(Debug, Clone)]
#[repr(C)]
pub struct Port {
    /// The serializer is busy until this time.
    pub busy_until: Ps,
    pub rate_bps: u64,
    pub delay_ps: Ps,
    pub tx_bytes: u64,
    pub tx_pkts: u64,
    pub peer: u32,
    pub peer_port: u16,
    /// A `TxDone` wake-up is scheduled at `busy_until`.
    pub wake_pending: bool,
    pub rr_next: u8,
    pub visiting: bool,
    pub qbytes: [u64; NPRIO],
    /// Paused by a received XOFF until this time (0 = not paused).
    pub paused_until: [Ps; NPRIO],
    pub queues: [VecDeque<QEntry>; NPRIO],
    pub ecn: Option<EcnConfig>,
    pub max_qbytes: [u64; NPRIO],
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
            queues: Default::default(),
            qbytes: [0; NPRIO],
            busy_until: 0,
            wake_pending: false,
            paused_until: [0; NPRIO],
            pause_version: [0; NPRIO],
            pause_started: [None; NPRIO],
            paused_ps: [0; NPRIO],
            xoff_rx: [0; NPRIO],
            xon_rx: [0; NPRIO],
            xoff_tx: [0; NPRIO],
            xon_tx: [0; NPRIO],
            refresh_version: [0; NPRIO],
            tx_bytes: 0,
            tx_pkts: 0,
            max_qbytes: [0; NPRIO],
            ecn: None,
            deficit: [0; NPRIO],
            rr_next: 0,
            visiting: false,
        }
    }

    pub fn is_paused(&self, prio: usize, now: Ps) -> bool {
        self.paused_until[prio] > now
    }

    /// Packets waiting in all queues.
    pub fn queued_pkts(&self) -> usize {
        self.queues.iter().map(|q| q.len()).sum()
    }

    /// Bytes waiting in all queues.
    pub fn queued_bytes(&self) -> u64 {
        self.qbytes.iter().sum()
    }

    /// The queue to serve next, if any may send at `now`.
    pub fn pick(&mut self, now: Ps, sched: &Scheduler) -> Option<usize> {
        let ready = |p: &Port, q: usize| !p.queues[q].is_empty() && !p.is_paused(q, now);
        match sched {
            Scheduler::Strict => (0..NPRIO).rev().find(|&q| ready(self, q)),
            Scheduler::Dwrr {
                strict_from,
                weights,
            } => {
                let sf = usize::from(*strict_from).min(NPRIO);
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
                        let head = self.queues[q].front().map_or(0, |e| i64::from(e.frame()));
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
    }
}
