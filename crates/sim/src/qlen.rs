//! The HPCC ns-3 simulator's switch queue-length monitor (`QLEN_MON_FILE`).
//!
//! third.cc's `monitor_buffer` samples, every `interval` (100 ns) from
//! `QLEN_MON_START` until the first sample at or past `QLEN_MON_END`, the
//! bytes queued at each switch egress port (all priorities), and keeps per
//! port a histogram of how many samples saw each whole number of kilobytes
//! (`bytes / 1000`). At every sample whose time is a multiple of 100 ms it
//! writes all histograms so far:
//!
//! ```text
//! time: <ns>
//! <switch node id> <port (interface index, from 1)> <count of 0 KB> <count of 1 KB> ...
//! ```
//!
//! switches and ports in increasing order, each histogram as long as its
//! largest bucket seen. Samples stop with the simulation (third.cc's
//! `SIMULATOR_STOP_TIME`).
//!
//! Here the queue is not sampled by events: each change of a port's queue
//! credits the sample instants since the previous change to the length that
//! held over them, which gives the same counts for O(1) per change however
//! long the window (ns-3 pays ports × window / 100 ns).

use crate::event::{PS_PER_NS, Ps};
use std::fmt::Write;

/// third.cc's `qlen_mon_interval` (ns) and `qlen_dump_interval` (ns).
pub const SAMPLE_NS: u64 = 100;
pub const DUMP_NS: u64 = 100_000_000;

/// When to sample (all in picoseconds).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct QlenMonConfig {
    pub start: Ps,
    pub end: Ps,
    /// The simulation's end: no sample at or after it.
    pub stop: Ps,
}

#[derive(Debug, Clone, Default)]
struct PortHist {
    /// Samples before this instant are credited.
    since: Ps,
    bytes: u64,
    /// `cnt[k]`: samples that saw `k` KB (grown only as samples land).
    cnt: Vec<u64>,
}

/// Per-port histograms and the dumps written so far.
#[derive(Debug, Clone)]
pub struct QlenMonitor {
    cfg: QlenMonConfig,
    /// Sample instants: `start + k × 100 ns` for `k < samples`.
    samples: u64,
    ports: Vec<PortHist>,
    /// `(switch node id, first, ports)`: its ports are `ports[first..][..ports]`.
    switches: Vec<(u32, usize, usize)>,
    next_dump: Option<Ps>,
    text: String,
}

impl QlenMonitor {
    /// `switches`: each switch's node id and port count; [`record`](Self::record)
    /// names a switch by its index here. Dumps list them by node id.
    pub fn new(cfg: QlenMonConfig, switches: &[(u32, usize)]) -> QlenMonitor {
        let iv = SAMPLE_NS * PS_PER_NS;
        // Samples run at start, start + iv, ... while the previous one was
        // before `end` (so the first at or past `end` is taken), and only
        // before `stop`.
        let by_end = if cfg.end > cfg.start {
            (cfg.end - cfg.start).div_ceil(iv) + 1
        } else {
            1
        };
        let by_stop = if cfg.stop > cfg.start {
            (cfg.stop - cfg.start).div_ceil(iv)
        } else {
            0
        };
        let samples = by_end.min(by_stop);
        let mut first = 0;
        let switches = switches
            .iter()
            .map(|&(id, n)| {
                first += n;
                (id, first - n, n)
            })
            .collect();
        let mut m = QlenMonitor {
            cfg,
            samples,
            ports: vec![PortHist::default(); first],
            switches,
            next_dump: None,
            text: String::new(),
        };
        m.next_dump = m.dump_at_or_after(cfg.start);
        m
    }

    /// Sample instants before `t`.
    fn before(&self, t: Ps) -> u64 {
        before(self.cfg.start, self.samples, t)
    }

    /// The first sample instant at or after `t` that is a multiple of
    /// 100 ms, if any sample is.
    fn dump_at_or_after(&self, t: Ps) -> Option<Ps> {
        let (iv, d) = (SAMPLE_NS * PS_PER_NS, DUMP_NS * PS_PER_NS);
        // 100 ms is a multiple of 100 ns: dumps fall on the sample grid
        // exactly when the start does.
        if !self.cfg.start.is_multiple_of(iv) {
            return None;
        }
        let at = t.max(self.cfg.start).div_ceil(d) * d;
        (self.before(at) < self.samples).then_some(at)
    }

    fn credit(p: &mut PortHist, n: u64) {
        if n == 0 {
            return;
        }
        let kb = (p.bytes / 1000) as usize;
        if p.cnt.len() <= kb {
            p.cnt.resize(kb + 1, 0);
        }
        p.cnt[kb] += n;
    }

    /// Writes every dump due before `t`.
    fn dumps_before(&mut self, t: Ps) {
        while let Some(at) = self.next_dump.filter(|at| *at < t) {
            // The sample at `at` is in the dump.
            let upto = self.before(at + 1);
            let (start, samples) = (self.cfg.start, self.samples);
            for p in &mut self.ports {
                let n = upto - before(start, samples, p.since);
                Self::credit(p, n);
                p.since = at + 1;
            }
            let _ = writeln!(self.text, "time: {}", at / PS_PER_NS);
            let mut order: Vec<_> = self.switches.iter().collect();
            order.sort_by_key(|s| s.0);
            for &&(id, first, n) in &order {
                for (j, p) in self.ports[first..first + n].iter().enumerate() {
                    let _ = write!(self.text, "{} {}", id, crate::hpcc::ns3_if_index(j as u16));
                    for c in &p.cnt {
                        let _ = write!(self.text, " {c}");
                    }
                    self.text.push('\n');
                }
            }
            self.next_dump = self.dump_at_or_after(at + 1);
        }
    }

    /// The first and last sample instants, if any sample is taken. Queue
    /// changes outside them need not be [`record`](Self::record)ed: one
    /// after the last sample changes no count, and those before the first
    /// only set the length the first sample sees, which
    /// [`set_initial`](Self::set_initial) gives instead.
    pub fn window(&self) -> Option<(Ps, Ps)> {
        let iv = SAMPLE_NS * PS_PER_NS;
        (self.samples > 0).then(|| (self.cfg.start, self.cfg.start + (self.samples - 1) * iv))
    }

    /// Switch `sw`, port `port` held `bytes` at the first sample instant
    /// (for a caller that does not record changes before it; see
    /// [`window`](Self::window)). Only before any `record` of that port
    /// at or after the window's start.
    pub fn set_initial(&mut self, sw: usize, port: usize, bytes: u64) {
        if let Some(&(_, first, _)) = self.switches.get(sw)
            && let Some(p) = self.ports.get_mut(first + port)
        {
            debug_assert!(p.since <= self.cfg.start);
            p.bytes = bytes;
        }
    }

    /// Switch `sw` (index in the order given to [`new`](Self::new)), port
    /// `port` now holds `bytes`.
    pub fn record(&mut self, now: Ps, sw: usize, port: usize, bytes: u64) {
        self.dumps_before(now);
        let Some(&(_, first, _)) = self.switches.get(sw) else {
            return;
        };
        let (start, samples) = (self.cfg.start, self.samples);
        let Some(p) = self.ports.get_mut(first + port) else {
            return;
        };
        let n = before(start, samples, now) - before(start, samples, p.since);
        Self::credit(p, n);
        p.since = now;
        p.bytes = bytes;
    }

    /// Per port (switches in the order given to [`new`](Self::new)), the
    /// samples that saw each whole number of KB, every sample counted (the
    /// lengths last recorded held to the end).
    #[cfg(test)]
    pub(crate) fn counts(mut self) -> Vec<Vec<u64>> {
        let (start, samples) = (self.cfg.start, self.samples);
        for p in &mut self.ports {
            let n = samples - before(start, samples, p.since);
            Self::credit(p, n);
            p.since = Ps::MAX;
        }
        self.ports.into_iter().map(|p| p.cnt).collect()
    }

    /// The file's text once the simulation is over: samples after the last
    /// queue change see the lengths that stayed (empty queues once every
    /// flow finished), up to the stop time.
    pub fn finish(mut self) -> String {
        self.dumps_before(Ps::MAX);
        self.text
    }
}

/// Sample instants (`start + k × 100 ns`, `k < samples`) before `t`.
fn before(start: Ps, samples: u64, t: Ps) -> u64 {
    if t <= start {
        return 0;
    }
    (t - start).div_ceil(SAMPLE_NS * PS_PER_NS).min(samples)
}

#[cfg(test)]
mod tests {
    use super::*;

    const NS: Ps = PS_PER_NS;

    /// Samples every 100 ns at and after `start`, read back from dumps.
    #[test]
    fn counts_the_samples_each_length_held_over() {
        let s = 2 * DUMP_NS * NS; // 200 ms: a dump instant
        let cfg = QlenMonConfig {
            start: s,
            end: s + DUMP_NS * NS,
            stop: 10 * DUMP_NS * NS,
        };
        let mut m = QlenMonitor::new(cfg, &[(7, 2)]);
        // Port 2: 999 B from before the start: every sample sees 0 KB.
        m.record(s - 5 * NS, 0, 1, 999);
        // Port 1: 2500 B from s + 250 ns to s + 1000 ns: the samples at
        // 300..=900 ns (7 of them) see 2 KB.
        m.record(s + 250 * NS, 0, 0, 2500);
        m.record(s + 1000 * NS, 0, 0, 0);
        let text = m.finish();
        let total = DUMP_NS / SAMPLE_NS + 1; // s, s + 100 ns, ..., s + 100 ms
        assert_eq!(
            text,
            format!(
                "time: {}\n7 1 1\n7 2 1\ntime: {}\n7 1 {} 0 7\n7 2 {}\n",
                s / NS,
                (s + DUMP_NS * NS) / NS,
                total - 7,
                total
            )
        );
    }

    #[test]
    fn no_sample_at_or_after_the_stop_and_none_off_the_grid() {
        let s = 2 * DUMP_NS * NS;
        let stopped = QlenMonitor::new(
            QlenMonConfig {
                start: 9 * DUMP_NS * NS,
                end: 9 * DUMP_NS * NS,
                stop: s,
            },
            &[(3, 1)],
        );
        assert_eq!(stopped.finish(), "", "starts after the stop: no dump");
        let off_grid = QlenMonitor::new(
            QlenMonConfig {
                start: s + 50 * NS,
                end: s + 2 * DUMP_NS * NS,
                stop: 10 * DUMP_NS * NS,
            },
            &[(3, 1)],
        );
        assert_eq!(off_grid.finish(), "", "no sample falls on a 100 ms mark");
    }
}
