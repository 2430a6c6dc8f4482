//! A seeded fault injector on the send path, for testing reliability over a
//! real socket: loss, reordering (a packet held back for a while),
//! duplication and corruption (one bit flipped after the ICRC was computed,
//! so the receiver's ICRC check must catch it). The same seed and the same
//! sequence of packets give the same faults.

use crate::packet::OutDatagram;
use rand_chacha::ChaCha8Rng;
use rand_chacha::rand_core::{Rng, SeedableRng};
use serde::{Deserialize, Serialize};

/// Fault probabilities, each per packet sent.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct FaultConfig {
    pub loss: f64,
    pub reorder: f64,
    pub dup: f64,
    pub corrupt: f64,
    /// Probability an ECN-capable packet leaves marked Congestion
    /// Experienced, as a congested switch would mark it (drives CNPs).
    #[serde(default)]
    pub ce_mark: f64,
    /// Longest a reordered packet is held back: it goes out right after the
    /// next packet, or after this delay if no packet follows.
    pub reorder_delay_ns: u64,
    pub seed: u64,
}

impl Default for FaultConfig {
    fn default() -> Self {
        FaultConfig {
            loss: 0.0,
            reorder: 0.0,
            dup: 0.0,
            corrupt: 0.0,
            ce_mark: 0.0,
            reorder_delay_ns: 20_000,
            seed: 1,
        }
    }
}

impl FaultConfig {
    pub fn is_active(&self) -> bool {
        self.loss > 0.0
            || self.reorder > 0.0
            || self.dup > 0.0
            || self.corrupt > 0.0
            || self.ce_mark > 0.0
    }
}

/// What the injector did.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct FaultStats {
    pub lost: u64,
    pub reordered: u64,
    pub duplicated: u64,
    pub corrupted: u64,
    pub ce_marked: u64,
}

pub struct FaultInjector {
    cfg: FaultConfig,
    rng: ChaCha8Rng,
    held: Vec<(u64, OutDatagram)>,
    pub stats: FaultStats,
}

impl FaultInjector {
    pub fn new(cfg: FaultConfig) -> Self {
        FaultInjector {
            rng: ChaCha8Rng::seed_from_u64(cfg.seed),
            cfg,
            held: Vec::new(),
            stats: FaultStats::default(),
        }
    }

    pub fn is_active(&self) -> bool {
        self.cfg.is_active()
    }

    /// Changes the CE-marking probability mid-run (a congestion episode
    /// that starts and ends).
    pub fn set_ce_mark(&mut self, p: f64) {
        self.cfg.ce_mark = p.clamp(0.0, 1.0);
    }

    fn chance(&mut self, p: f64) -> bool {
        p > 0.0 && (self.rng.next_u64() >> 11) as f64 / (1u64 << 53) as f64 <= p
    }

    /// Applies faults to one outgoing datagram, appending what is to be
    /// sent now to `out`. `own` gives the datagram bytes of its own (seals
    /// its ICRC and copies a zero-copy payload out of the sender's memory)
    /// and is called only for a datagram that is corrupted, duplicated or
    /// held back: one that goes out now, untouched, is sent as it would be
    /// without faults, so a lossy run does not pay a copy per packet that
    /// the lossless run it is compared with does not (that copy was a
    /// quarter of `write_bw` at 1 % loss). `false` when `own` failed (the
    /// datagram is dropped).
    pub fn apply(
        &mut self,
        now: u64,
        mut d: OutDatagram,
        out: &mut Vec<OutDatagram>,
        mut own: impl FnMut(&mut OutDatagram) -> bool,
    ) -> bool {
        if self.chance(self.cfg.loss) {
            self.stats.lost += 1;
            return true;
        }
        if d.tos & 3 == 2 && self.chance(self.cfg.ce_mark) {
            self.stats.ce_marked += 1;
            d.tos |= 3;
        }
        let mut owned = false;
        if self.chance(self.cfg.corrupt) {
            if !own(&mut d) {
                return false;
            }
            owned = true;
            self.stats.corrupted += 1;
            let at = self.rng.next_u64() as usize;
            let bit = (self.rng.next_u64() % 8) as u8;
            d.flip_bit(at, bit);
        }
        if self.chance(self.cfg.dup) {
            if !owned && !own(&mut d) {
                return false;
            }
            owned = true;
            self.stats.duplicated += 1;
            out.push(d.clone());
        }
        if self.chance(self.cfg.reorder) {
            if !owned && !own(&mut d) {
                return false;
            }
            self.stats.reordered += 1;
            self.held.push((now + self.cfg.reorder_delay_ns, d));
            return true;
        }
        out.push(d);
        // Packets held earlier now follow the one that overtook them.
        out.extend(self.held.drain(..).map(|(_, d)| d));
        true
    }

    /// Releases held-back datagrams whose time has come.
    pub fn release(&mut self, now: u64, out: &mut Vec<OutDatagram>) {
        if self.held.is_empty() {
            return;
        }
        let mut i = 0;
        while i < self.held.len() {
            if self.held[i].0 <= now {
                out.push(self.held.remove(i).1);
            } else {
                i += 1;
            }
        }
    }

    /// When the next held-back datagram is due.
    pub fn next_release(&self) -> Option<u64> {
        self.held.iter().map(|(t, _)| *t).min()
    }
}
