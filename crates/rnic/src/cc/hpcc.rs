//! HPCC (Li et al., "HPCC: High Precision Congestion Control", SIGCOMM 2019,
//! Algorithm 1). The sender keeps a window W (and paces at W/T); every ACK
//! carries in-band telemetry from each hop — timestamp, bytes sent, queue
//! length, link rate — from which the sender estimates the normalised
//! in-flight bytes U of the most loaded link and steers W toward η·BDP:
//! multiplicatively when U ≥ η (or after `max_stage` additive steps),
//! additively (W_AI) otherwise. The reference window Wc only moves once per
//! RTT, so one congestion event is not reacted to twice.

use super::{AckFeedback, CongestionControl, IntHop};
use crate::types::Nanos;

/// In C order with the fields every ACK reads first: the controller keeps
/// them in one cache line with its window state (see [`Hpcc`]).
#[derive(Debug, Clone, Copy, PartialEq)]
#[repr(C)]
pub struct HpccConfig {
    /// Target utilisation η.
    pub eta: f64,
    /// Additive increase per step, as a window in bytes (W_AI = R_AI · T).
    pub w_ai: f64,
    /// Base round-trip time T.
    pub base_rtt_ns: Nanos,
    /// Additive steps before a multiplicative one (maxStage). 16 bits, so
    /// that the configuration keeps to 40 bytes (see [`Hpcc`]'s layout).
    pub max_stage: u16,
    /// React to every ACK (the reference window still moves once per RTT).
    pub fast_react: bool,
    /// The HPCC ns-3 simulator's variants of the algorithm.
    pub opts: HpccOptions,
    /// Lowest rate the controller may set.
    pub min_rate_bps: u64,
}

impl HpccConfig {
    /// The paper's settings (η = 0.95, maxStage = 5) for a host of
    /// `line_rate_bps` with base RTT `base_rtt_ns`; W_AI is BDP·(1−η)/100,
    /// the rate floor 100 Mb/s, per-ACK reaction on.
    pub fn new(line_rate_bps: u64, base_rtt_ns: Nanos) -> HpccConfig {
        let bdp = line_rate_bps as f64 / 8.0 * base_rtt_ns as f64 / 1e9;
        HpccConfig {
            eta: 0.95,
            max_stage: 5,
            w_ai: bdp * (1.0 - 0.95) / 100.0,
            base_rtt_ns,
            min_rate_bps: 100_000_000,
            fast_react: true,
            opts: HpccOptions::default(),
        }
    }
}

/// The HPCC ns-3 simulator's switches over the algorithm (its config
/// keys in brackets); the default is the paper's Algorithm 1 with a window
/// that follows the rate and pacing at it. Held alike by the experiment's
/// settings ([`crate::cc::HpccSettings`]) and the controller's
/// configuration. Five bytes: [`HpccConfig`] keeps to 40.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct HpccOptions {
    /// A rate per hop, the slowest of them sent at (`MULTI_RATE 1`): each
    /// hop keeps its own utilisation average, reference window and
    /// additive stage, instead of one U from the most loaded hop
    /// (Algorithm 1, and `MULTI_RATE 0`).
    pub multi_rate: bool,
    /// A fast reaction reads only the hops with a queue
    /// (`SAMPLE_FEEDBACK 1`); the hops it skips keep their previous record
    /// for the next update. Full updates read every hop.
    pub sample_feedback: bool,
    /// Bound the bytes in flight by the window (`HAS_WIN`); without, only
    /// the rate holds the sender back.
    pub windowed: bool,
    /// The window follows the rate, W (`VAR_WIN 1`); otherwise it stays at
    /// the line rate's, R·T, and only the pacing rate moves.
    pub var_window: bool,
    /// Pace at W/T (`RATE_BOUND`); otherwise only the window holds the
    /// sender back.
    pub paced: bool,
}

impl Default for HpccOptions {
    fn default() -> Self {
        HpccOptions {
            multi_rate: false,
            sample_feedback: false,
            windowed: true,
            var_window: true,
            paced: true,
        }
    }
}

/// One hop's own state under [`HpccOptions::multi_rate`] (ns-3's
/// `hopState`): its utilisation average, reference window and stage.
#[derive(Debug, Clone, Copy, PartialEq)]
struct HopRate {
    u: f64,
    wc: f64,
    stage: u32,
}

/// Hops a path's feedback is kept inline for (a 3-tier fat tree has 5).
const INLINE_HOPS: usize = 8;

/// [`Hpcc::last_len`] when the last feedback had more than
/// [`INLINE_HOPS`] hops and lives in [`Hpcc::spill`].
const SPILLED: u8 = u8::MAX;

/// What the next update reads of a hop's previous record: its timestamp,
/// byte counter and queue (the link rate is read from the new record
/// only). 24 bytes, not [`IntHop`]'s 32: a 5-hop path's fit in two cache
/// lines.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
struct PrevHop {
    ts: Nanos,
    tx_bytes: u64,
    qlen: u64,
}

impl From<&IntHop> for PrevHop {
    #[inline]
    fn from(h: &IntHop) -> PrevHop {
        PrevHop {
            ts: h.ts,
            tx_bytes: h.tx_bytes,
            qlen: h.qlen,
        }
    }
}

/// One QP's HPCC sender. Kept in window units (bytes); the rate is W/T.
///
/// Laid out by hand, 64-byte aligned: every ACK reads and rewrites most of
/// it and every packet sent reads its window and rate, and with many QPs
/// it has left the cache in between, so each line it spans is a miss
/// (cachegrind, fat tree: one per line per ACK). Line 0 holds what a
/// packet sent and the ACK's first checks read, line 1 the window state
/// and the configuration, lines 2-3 the previous hop records of a path of
/// up to five switches; longer paths and the rare fields follow.
#[derive(Debug, Clone)]
#[repr(C, align(64))]
pub struct Hpcc {
    // ---- line 0
    /// What [`window_bytes`](CongestionControl::window_bytes) and
    /// [`rate_bps`](CongestionControl::rate_bps) answer for the current W
    /// (the rate only when `paced`): W changes at most once per ACK, while
    /// the RNIC asks both on every packet it sends (three float
    /// conversions and a division a packet before; `benches/cc.rs`).
    window_bytes: u64,
    rate: u64,
    /// `snd_nxt` and `snd_una` (payload bytes) as of the last ACK: both in
    /// one unit, as the reference implementation's sequence numbers. (They
    /// were wire bytes sent against payload bytes acknowledged: the first
    /// grew ~6 % faster, so over a long flow "data sent after the last
    /// update is acknowledged" came later and later and the flow all but
    /// stopped moving Wc, holding on to bandwidth against newer flows.)
    sent: u64,
    acked: u64,
    last_update_seq: u64,
    u: f64,
    /// T in ns, as the float every update divides by.
    t: f64,
    inc_stage: u32,
    /// Hops of the last feedback in `last` ([`SPILLED`]: in `spill`).
    last_len: u8,
    /// [`HpccOptions::windowed`], here in line 0 for every packet sent.
    windowed: bool,
    started: bool,
    /// W is below the line-rate window: the RNIC paces at `rate`.
    paced: bool,
    // ---- line 1
    /// Current window W.
    w: f64,
    /// Reference window Wc (moves once per RTT).
    wc: f64,
    w_min: f64,
    w_max: f64,
    cfg: HpccConfig,
    // ---- lines 2-3 (from byte 136)
    /// The previous ACK's hop records, inside the controller for paths of
    /// up to [`INLINE_HOPS`] switches: every ACK reads and rewrites them,
    /// and in a `Vec` of their own they cost a cache miss per ACK beyond
    /// the controller's.
    last: [PrevHop; INLINE_HOPS],
    /// Longer paths' records.
    spill: Vec<PrevHop>,
    /// Each hop's own state under [`HpccOptions::multi_rate`] (empty
    /// otherwise).
    per_hop: Vec<HopRate>,
    /// The host's line rate: the rate an unpaced QP's gaps are timed at
    /// when one is re-timed ([`CongestionControl::rescales_gap`]).
    line_bps: u64,
}

impl Hpcc {
    pub fn new(cfg: HpccConfig, line_rate_bps: u64) -> Hpcc {
        let window = |bps: u64| bps as f64 / 8.0 * cfg.base_rtt_ns as f64 / 1e9;
        let w_max = window(line_rate_bps);
        let mut h = Hpcc {
            window_bytes: 0,
            rate: 0,
            sent: 0,
            acked: 0,
            last_update_seq: 0,
            // As the reference implementation: start from full utilisation.
            u: 1.0,
            t: cfg.base_rtt_ns as f64,
            inc_stage: 0,
            last_len: 0,
            windowed: cfg.opts.windowed,
            started: false,
            paced: false,
            w: w_max,
            wc: w_max,
            w_min: window(cfg.min_rate_bps).min(w_max),
            w_max,
            cfg,
            last: [PrevHop::default(); INLINE_HOPS],
            spill: Vec::new(),
            per_hop: Vec::new(),
            line_bps: line_rate_bps,
        };
        h.set_window(w_max);
        h
    }

    /// W becomes `w`; the window and pacing rate the RNIC reads follow
    /// (the window stays at the line rate's without
    /// [`var_window`](HpccOptions::var_window), and the rate is not paced
    /// without [`paced`](HpccOptions::paced)).
    fn set_window(&mut self, w: f64) {
        self.w = w;
        self.window_bytes = if self.cfg.opts.var_window {
            w
        } else {
            self.w_max
        } as u64;
        let r = w * 8.0 * 1e9 / self.cfg.base_rtt_ns as f64;
        self.paced = self.cfg.opts.paced & (w < self.w_max);
        // Without a branch, for the reason `compute_wind` gives.
        self.rate = std::hint::select_unpredictable(self.paced, r as u64, 0);
    }

    pub fn window(&self) -> f64 {
        self.w
    }
    pub fn utilisation(&self) -> f64 {
        self.u
    }

    /// The previous feedback's hop records.
    fn prev_mut(&mut self) -> &mut [PrevHop] {
        if self.last_len == SPILLED {
            &mut self.spill
        } else {
            &mut self.last[..usize::from(self.last_len)]
        }
    }

    /// Algorithm 1, MeasureInflight: the EWMA of the most loaded hop's
    /// normalised in-flight bytes, for feedback over the same hops as the
    /// last (`hops.len()` is the previous feedback's). Returns false when
    /// no hop moved. Keeps `hops` for the next feedback as it goes: one
    /// pass over the records instead of a second copying them.
    ///
    /// `full`: a full update (Wc moves); otherwise a fast reaction, which
    /// under [`sample_feedback`](HpccOptions::sample_feedback) reads only
    /// the hops with a queue and leaves the others' records as they were
    /// (ns-3 `UpdateRateHp`'s `continue`). Under
    /// [`multi_rate`](HpccOptions::multi_rate) each hop's load goes into
    /// its own average instead, and [`compute_wind_per_hop`]
    /// (Self::compute_wind_per_hop) reads the hops marked in the
    /// returned bits.
    fn measure_inflight(&mut self, hops: &[IntHop], full: bool) -> u64 {
        if self.cfg.opts.multi_rate {
            return self.measure_inflight_per_hop(hops, full);
        }
        // One U from the most loaded hop: no per-hop loads to keep. (With
        // the per-hop form's arrays and tests in this path, the 1 ms HPCC
        // fat tree ran 105 M instructions more of 15.34 G; cachegrind,
        // session 37, outputs identical.)
        let t = self.t;
        let mut u = 0.0;
        let mut tau = 0.0;
        let mut updated = false;
        self.each_hop_load(hops, full, |_, ui, dt| {
            updated = true;
            if ui > u {
                u = ui;
                tau = dt;
            }
        });
        if updated {
            let tau = tau.min(t);
            self.u = (self.u * (t - tau) + u * tau) / t;
        }
        u64::from(updated)
    }

    /// [`measure_inflight`](Self::measure_inflight) under
    /// [`multi_rate`](HpccOptions::multi_rate): each hop's load goes into
    /// its own average, and the returned bits mark the hops updated.
    fn measure_inflight_per_hop(&mut self, hops: &[IntHop], full: bool) -> u64 {
        let t = self.t;
        let mut updated = 0u64;
        let mut loads = [(0.0f64, 0.0f64); INLINE_HOPS];
        let mut spilled = Vec::new();
        self.each_hop_load(hops, full, |i, ui, dt| {
            // Paths past 64 hops share the last bit; ns-3 has 5.
            updated |= 1 << i.min(63);
            match loads.get_mut(i) {
                Some(l) => *l = (ui, dt),
                None => spilled.push((i, ui, dt)),
            }
        });
        self.per_hop.resize(hops.len(), self.fresh_hop());
        let average = |s: &mut HopRate, ui: f64, dt: f64| {
            let tau = dt.min(t);
            s.u = (s.u * (t - tau) + ui * tau) / t;
        };
        for (i, s) in self.per_hop.iter_mut().enumerate().take(INLINE_HOPS) {
            if updated & (1 << i) != 0 {
                average(s, loads[i].0, loads[i].1);
            }
        }
        for (i, ui, dt) in spilled {
            if let Some(s) = self.per_hop.get_mut(i) {
                average(s, ui, dt);
            }
        }
        updated
    }

    /// Reads each hop of `hops` against the previous feedback's record of
    /// it, which it replaces, and hands `load(i, u_i, dt)` the normalised
    /// in-flight bytes of every hop that moved. A fast reaction under
    /// [`sample_feedback`](HpccOptions::sample_feedback) skips the hops
    /// without a queue and leaves their records (ns-3 `UpdateRateHp`'s
    /// `continue`).
    #[inline(always)]
    fn each_hop_load(
        &mut self,
        hops: &[IntHop],
        full: bool,
        mut load: impl FnMut(usize, f64, f64),
    ) {
        let t = self.t;
        let skip_idle = self.cfg.opts.sample_feedback & !full;
        for (i, (h, slot)) in hops.iter().zip(self.prev_mut()).enumerate() {
            if skip_idle && h.qlen == 0 {
                continue;
            }
            let prev = std::mem::replace(slot, PrevHop::from(h));
            if h.ts <= prev.ts || h.link_bps == 0 {
                continue;
            }
            let dt = h.ts - prev.ts;
            let tx = h.tx_bytes.saturating_sub(prev.tx_bytes);
            let qlen = h.qlen.min(prev.qlen);
            // The same arithmetic either way (see `hop_load`); only the
            // integers' conversion differs, and gives the same floats.
            let (ui, dt) = if (dt | tx | qlen | h.link_bps) >> 63 == 0 {
                let f = |x: u64| x as i64 as f64;
                (hop_load(t, f(dt), f(h.link_bps), f(tx), f(qlen)), f(dt))
            } else {
                let f = |x: u64| x as f64;
                (hop_load(t, f(dt), f(h.link_bps), f(tx), f(qlen)), f(dt))
            };
            load(i, ui, dt);
        }
    }

    /// A hop's state before its first update: full utilisation and the
    /// line-rate window, as ns-3 starts `hopState`.
    fn fresh_hop(&self) -> HopRate {
        HopRate {
            u: 1.0,
            wc: self.w_max,
            stage: 0,
        }
    }

    /// Hops in the last feedback.
    #[inline]
    fn prev_len(&self) -> usize {
        if self.last_len == SPILLED {
            self.spill.len()
        } else {
            usize::from(self.last_len)
        }
    }

    /// Keeps this feedback's counters for the next one.
    fn remember(&mut self, hops: &[IntHop]) {
        if hops.len() <= INLINE_HOPS {
            for (slot, h) in self.last.iter_mut().zip(hops) {
                *slot = PrevHop::from(h);
            }
            self.last_len = hops.len() as u8;
        } else {
            self.spill.clear();
            self.spill.extend(hops.iter().map(PrevHop::from));
            self.last_len = SPILLED;
        }
    }

    /// Algorithm 1, ComputeWind, with the window clamped to [W_min, W_max]
    /// before it becomes the reference (so an idle link cannot inflate Wc).
    ///
    /// Both steps are computed and one is selected without a branch: which
    /// one applies follows the path's load from ACK to ACK, and the branch
    /// on it was mispredicted on nearly every update (cachegrind, fat-tree
    /// HPCC: 540 K of 820 K). The selected values are the same floats.
    fn compute_wind(&mut self, update_wc: bool) {
        let max_c = self.u / self.cfg.eta;
        let multiplicative = (max_c >= 1.0) | (self.inc_stage >= u32::from(self.cfg.max_stage));
        // (A zero utilisation makes the quotient infinite. It is selected
        // only once `max_stage` additive steps are done, and the clamp
        // below takes it to W_max, as the branch did.)
        let w = std::hint::select_unpredictable(
            multiplicative,
            self.wc / max_c + self.cfg.w_ai,
            self.wc + self.cfg.w_ai,
        );
        let stage =
            std::hint::select_unpredictable(multiplicative, 0, self.inc_stage.saturating_add(1));
        let w = w.clamp(self.w_min, self.w_max);
        self.set_window(w);
        if update_wc {
            self.wc = w;
            self.inc_stage = stage;
        }
    }
}

impl Hpcc {
    /// ComputeWind per hop ([`HpccOptions::multi_rate`]; ns-3's
    /// `MULTI_RATE 1`): each hop `updated` marks steps its own reference
    /// window by its own average, as [`compute_wind`](Self::compute_wind)
    /// does the one; W is the smallest of those windows and the other
    /// hops' reference windows, and the updated hops' reference windows
    /// and stages move on a full update only.
    fn compute_wind_per_hop(&mut self, updated: u64, update_wc: bool) {
        let (eta, w_ai, max_stage) = (self.cfg.eta, self.cfg.w_ai, self.cfg.max_stage);
        let (w_min, w_max) = (self.w_min, self.w_max);
        let mut w = w_max;
        for (i, s) in self.per_hop.iter_mut().enumerate() {
            if updated & (1 << i.min(63)) == 0 {
                w = w.min(s.wc);
                continue;
            }
            let c = s.u / eta;
            let multiplicative = c >= 1.0 || s.stage >= u32::from(max_stage);
            let wi = if multiplicative {
                s.wc / c + w_ai
            } else {
                s.wc + w_ai
            }
            .clamp(w_min, w_max);
            w = w.min(wi);
            if update_wc {
                s.wc = wi;
                s.stage = if multiplicative {
                    0
                } else {
                    s.stage.saturating_add(1)
                };
            }
        }
        self.set_window(w);
    }
}

/// Algorithm 1's normalised in-flight bytes of one hop, from the time
/// `dt` (ns) since the previous feedback's record, the link rate, the
/// bytes sent in between and the smaller of the two queue lengths, all
/// as floats: `qlen / (B·T) + txRate / B`.
///
/// The caller converts the integers: an `i64` to `f64` conversion is one
/// instruction on x86-64's baseline and a `u64`'s six (a third of the
/// update's per-hop instructions, cachegrind), and for any value below
/// 2^63 both give the same float (each rounds the exact value once, to
/// nearest). A branch on the converted values' top bits picks the signed
/// form; written as one helper per value, the compiler folded the two
/// forms back into the unsigned one.
///
/// Measured dead end (session 20): B and B·T computed once per ACK
/// while the hops' rate stays the same, and an empty queue's
/// `qlen / (B·T)` skipped behind a branch (`+0.0` either way, so the
/// same floats), to spare the divider about a third of its work per
/// hop. Identical outputs, 12 M instructions more on the 1 ms 320-host
/// run (16.079 G against 16.067 G), and the same time in `on_int` (perf
/// on the full fat5ms run, two runs each: 6.9 and 7.4 % of 10.8 and
/// 10.7 s before, 6.4 and 7.4 % of 11.5 and 10.7 s after). The divisions
/// do not hold the update up: half of `on_int`'s samples sit on its
/// first load of the echoed hop record, which `host_rx` has started
/// loading, and the rest are spread thin.
#[inline(always)]
fn hop_load(t: f64, dt: f64, link_bps: f64, tx: f64, qlen: f64) -> f64 {
    // Bytes per ns. One division by 8e9 is the same float as dividing by
    // 8 (exact) and then by 1e9: both round x/8e9 once.
    let b = link_bps / 8e9;
    let tx_rate = tx / dt;
    qlen / (b * t) + tx_rate / b
}

impl Hpcc {
    /// HPCC-PINT's update ([`super::pint::HpccPint`]; ns-3
    /// `UpdateRateHpPint`): the bottleneck's utilisation `u` arrives
    /// already averaged by the switch, so it replaces U outright. The
    /// first call only starts the sequence; afterwards a full update (Wc
    /// moves) once data sent after the last one is acknowledged, a fast
    /// reaction otherwise, whatever `fast_react` says (ns-3's PINT always
    /// reacts).
    pub(crate) fn on_utilisation(&mut self, u: f64) {
        if !self.started {
            self.started = true;
            self.last_update_seq = self.sent;
            return;
        }
        let full = self.acked > self.last_update_seq;
        self.u = u;
        self.compute_wind(full);
        if full && self.sent > self.last_update_seq {
            self.last_update_seq = self.sent;
        }
    }

    /// The additive step W_AI (bytes).
    #[cfg(test)]
    pub(crate) fn w_ai(&self) -> f64 {
        self.cfg.w_ai
    }
}

impl CongestionControl for Hpcc {
    fn name(&self) -> &'static str {
        "hpcc"
    }
    fn counts_sends(&self) -> bool {
        false
    }
    fn acks_move_readings(&self) -> bool {
        // An ACK only notes `sent` and `acked`; W (window and rate) moves
        // on INT, and HPCC never ticks.
        false
    }
    fn on_ack_feedback(&mut self, _now: Nanos, fb: &AckFeedback) {
        self.sent = fb.send_point;
        self.acked = fb.snd_una;
    }
    fn on_rewind(&mut self, _now: Nanos, send_point: u64) {
        // A go-back-N sends again from here: the next full update waits
        // only for data sent from here on, as ns-3's (whose RecoverQueue
        // rewinds the snd_nxt its HPCC update reads). Left at the highest
        // byte ever sent, it waited for the resend to pass that point, one
        // update too few per recovery.
        self.sent = send_point;
    }
    fn on_int(&mut self, _now: Nanos, hops: &[IntHop]) {
        if !self.started {
            // The first feedback only records the path's counters; the first
            // update waits until data sent after it is acknowledged.
            self.started = true;
            self.last_update_seq = self.sent;
            self.remember(hops);
            return;
        }
        // A full update once per RTT (data sent after the last one is now
        // acknowledged); in between, optionally a fast reaction that leaves Wc alone.
        let full = self.acked > self.last_update_seq;
        if !full && !self.cfg.fast_react {
            return;
        }
        if hops.len() == self.prev_len() {
            let updated = self.measure_inflight(hops, full);
            if updated != 0 {
                if self.cfg.opts.multi_rate {
                    self.compute_wind_per_hop(updated, full);
                } else {
                    self.compute_wind(full);
                }
            }
        } else {
            self.remember(hops);
        }
        if full && self.sent > self.last_update_seq {
            self.last_update_seq = self.sent;
        }
    }
    fn window_bytes(&self) -> Option<u64> {
        self.windowed.then_some(self.window_bytes)
    }
    fn rate_bps(&self) -> Option<u64> {
        self.paced.then_some(self.rate)
    }
    fn rescales_gap(&self) -> Option<u64> {
        // ns-3's HPCC calls `ChangeRate` on every update. Not when the
        // rate does not pace (`RATE_BOUND 0`): ns-3 still shifts the next
        // send there by the rate's change, against gaps it timed at the
        // line rate; that variant stays a documented difference.
        self.cfg.opts.paced.then_some(self.line_bps)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Everything sent so far is acknowledged, at `bytes` of payload.
    pub(super) fn ack(h: &mut Hpcc, bytes: u64) {
        h.on_ack_feedback(
            0,
            &AckFeedback {
                snd_una: bytes,
                snd_nxt: bytes,
                send_point: bytes,
                ..AckFeedback::default()
            },
        );
    }

    /// As the RNIC drives it: `on_send` with each frame's wire bytes, the
    /// ACK's payload bytes, then the INT. Ten packets in flight, so a full
    /// update (Wc moves, `last_update_seq` jumps to snd_nxt) comes every
    /// ten ACKs however long the flow has run. With sent counted in wire
    /// bytes and acked in payload bytes they drifted apart by 6 % of all
    /// that was sent and full updates stopped after a few hundred packets.
    #[test]
    fn full_updates_stay_once_per_window_on_a_long_flow() {
        let cfg = HpccConfig::new(100_000_000_000, 10_000);
        let mut h = Hpcc::new(cfg, 100_000_000_000);
        let (payload, wire, inflight) = (1000u64, 1062usize, 10u64);
        let mut updates_late = 0;
        for i in 0..5000u64 {
            h.on_send(i * 80, wire);
            if i < inflight {
                continue;
            }
            let fb = AckFeedback {
                acked_bytes: payload,
                snd_una: (i - inflight + 1) * payload,
                snd_nxt: (i + 1) * payload,
                send_point: (i + 1) * payload,
                ..AckFeedback::default()
            };
            h.on_ack(i * 80, payload, None);
            h.on_ack_feedback(i * 80, &fb);
            let before = h.last_update_seq;
            h.on_int(i * 80, &[hop(i * 80, i * wire as u64, 20_000)]);
            if i >= 4000 && h.last_update_seq != before {
                updates_late += 1;
            }
        }
        assert!(
            (90..=110).contains(&updates_late),
            "{updates_late} full updates in the last 1000 ACKs"
        );
    }

    /// A full update during a go-back-N makes the next one wait for data
    /// sent from where the resend started (ns-3's RecoverQueue rewinds the
    /// snd_nxt its HPCC reads), not for the highest byte ever sent: the
    /// first ACK of resent data past it updates Wc again. Left at the
    /// highest byte, the update waited for the whole resend to pass it.
    #[test]
    fn a_rewind_brings_the_next_full_update_forward() {
        let cfg = HpccConfig::new(100_000_000_000, 10_000);
        let mut h = Hpcc::new(cfg, 100_000_000_000);
        let fb = |una: u64, nxt: u64, point: u64| AckFeedback {
            snd_una: una,
            snd_nxt: nxt,
            send_point: point,
            ..AckFeedback::default()
        };
        // The first INT starts the clock at 10 KB sent.
        h.on_ack_feedback(0, &fb(0, 10_000, 10_000));
        h.on_int(0, &[hop(0, 0, 0)]);
        assert_eq!(h.last_update_seq, 10_000);
        // 100 KB sent; a NAK at 20 KB acknowledges to there and sending
        // resumes there. The ACK passes 10 KB: a full update, after which
        // the next waits for data sent from 20 KB on.
        h.on_ack_feedback(1_000, &fb(20_000, 100_000, 100_000));
        h.on_rewind(1_000, 20_000);
        h.on_int(1_000, &[hop(1_000, 12_500, 0)]);
        assert_eq!(h.last_update_seq, 20_000);
        // Resent data to 30 KB acknowledged (40 KB resent so far): the
        // next full update, Wc moves.
        h.on_ack_feedback(2_000, &fb(30_000, 100_000, 40_000));
        let wc = h.wc;
        h.on_int(2_000, &[hop(2_000, 25_000, 50_000)]);
        assert_eq!(h.last_update_seq, 40_000);
        assert_ne!(h.wc, wc, "Wc moved");
    }

    fn hop(ts: Nanos, tx: u64, qlen: u64) -> IntHop {
        IntHop {
            ts,
            tx_bytes: tx,
            qlen,
            link_bps: 100_000_000_000,
        }
    }

    #[test]
    fn full_link_with_a_queue_shrinks_the_window_idle_link_grows_it() {
        let cfg = HpccConfig::new(100_000_000_000, 10_000);
        let mut h = Hpcc::new(cfg, 100_000_000_000);
        let bdp = h.window();
        assert_eq!(bdp, 125_000.0);
        assert_eq!(
            h.utilisation(),
            1.0,
            "starts at full utilisation, as ns-3 does"
        );
        // A saturated link (12.5 B/ns) with a standing queue of one BDP: U ≈ 2.
        let mut tx = 0;
        let mut acked = 0;
        for i in 0..20u64 {
            acked += 10_000;
            ack(&mut h, acked);
            tx += 12_500;
            h.on_int(i * 1_000, &[hop(i * 1_000, tx, 125_000)]);
        }
        assert!(h.utilisation() > 1.5, "U = {}", h.utilisation());
        assert!(h.window() < 0.6 * bdp, "W = {}", h.window());
        assert!(h.rate_bps().is_some());
        // The queue drains and the link carries only a trickle (8 Gb/s):
        // the window climbs back.
        let w_low = h.window();
        for i in 20..400u64 {
            acked += 10_000;
            ack(&mut h, acked);
            tx += 1_000;
            h.on_int(i * 1_000, &[hop(i * 1_000, tx, 0)]);
        }
        assert!(h.window() > w_low);
        assert!(h.utilisation() < 0.1);
    }
}

#[cfg(test)]
mod last_hops_tests {
    use super::*;

    fn hops(n: usize) -> Vec<IntHop> {
        (0..n as u64)
            .map(|i| IntHop {
                ts: i,
                tx_bytes: 10 * i,
                qlen: 100 * i,
                link_bps: 1000 + i,
            })
            .collect()
    }

    /// Paths of every length, longer than the inline room included, and
    /// back: what was stored is what is read.
    #[test]
    fn keeps_exactly_the_last_feedback() {
        let cfg = HpccConfig::new(100_000_000_000, 10_000);
        let mut l = Hpcc::new(cfg, 100_000_000_000);
        assert_eq!(l.prev_len(), 0);
        for n in [5, 3, 8, 9, 12, 2, 0, 5, 5, 9, 9] {
            let mut h = hops(n);
            if l.prev_len() == n {
                // Same path: the update pass keeps them.
                h.iter_mut().for_each(|x| x.ts += 1000);
                l.measure_inflight(&h, true);
            } else {
                l.remember(&h);
            }
            let want: Vec<PrevHop> = h.iter().map(PrevHop::from).collect();
            assert_eq!(l.prev_len(), n);
            assert_eq!(l.prev_mut(), &want[..], "{n} hops");
        }
    }

    /// The hand layout holds: what an ACK and a packet sent read first in
    /// line 0, the window state and configuration in line 1, a five-switch
    /// path's previous records in lines 2-3.
    #[test]
    fn hot_state_spans_four_cache_lines() {
        use std::mem::{align_of, offset_of, size_of};
        assert_eq!(align_of::<Hpcc>(), 64);
        assert!(offset_of!(Hpcc, paced) < 64);
        assert!(offset_of!(Hpcc, last_len) < 64);
        assert!(offset_of!(Hpcc, started) < 64);
        assert_eq!(offset_of!(Hpcc, w), 64);
        let cfg = offset_of!(Hpcc, cfg);
        assert!(cfg + offset_of!(HpccConfig, fast_react) < 128);
        assert!(cfg + offset_of!(HpccConfig, max_stage) < 128);
        assert!(cfg + offset_of!(HpccConfig, base_rtt_ns) < 128);
        let five = offset_of!(Hpcc, last) + 5 * size_of::<PrevHop>();
        assert!(offset_of!(Hpcc, last) >= 128 && five <= 256, "{five}");
    }
}

#[cfg(test)]
mod more_tests {
    use super::tests::ack;
    use super::*;

    /// The per-hop load is the same float whichever conversion the update
    /// takes: integers below 2^63 through `i64` and the rest as `u64`
    /// give identical bits, including ones a float cannot hold exactly.
    #[test]
    fn signed_and_unsigned_conversions_give_the_same_load() {
        let vals = [
            0u64,
            1,
            999,
            (1 << 53) + 1,
            (1 << 62) + 12_345,
            i64::MAX as u64,
        ];
        for &dt in &vals[1..] {
            for &tx in &vals {
                for &q in &vals {
                    let s = |x: u64| x as i64 as f64;
                    let u = |x: u64| x as f64;
                    let a = hop_load(10_000.0, s(dt), s(100_000_000_000), s(tx), s(q));
                    let b = hop_load(10_000.0, u(dt), u(100_000_000_000), u(tx), u(q));
                    assert_eq!(a.to_bits(), b.to_bits(), "dt {dt} tx {tx} q {q}");
                }
            }
        }
    }

    /// Counters past 2^63 take the unsigned conversion and still update.
    #[test]
    fn counters_past_two_to_the_63_still_update() {
        let cfg = HpccConfig::new(100_000_000_000, 10_000);
        let mut h = Hpcc::new(cfg, 100_000_000_000);
        let base = 1u64 << 63;
        let mut acked = 0;
        for i in 0..20u64 {
            acked += 10_000;
            ack(&mut h, acked);
            let hop = IntHop {
                ts: i * 1_000,
                tx_bytes: base + i * 12_500,
                qlen: base,
                link_bps: 100_000_000_000,
            };
            h.on_int(i * 1_000, &[hop]);
        }
        // An astronomically long queue: U far above η, the window at its floor.
        assert!(h.utilisation() > 1e6, "U = {}", h.utilisation());
        assert_eq!(h.window(), h.w_min);
    }

    /// An idle path (u ≈ 0) must not inflate the reference window past the
    /// line-rate window: with maxStage 0 every update is multiplicative.
    #[test]
    fn idle_path_never_inflates_the_window() {
        let mut cfg = HpccConfig::new(100_000_000_000, 10_000);
        cfg.max_stage = 0;
        let mut h = Hpcc::new(cfg, 100_000_000_000);
        let mut acked = 0;
        for i in 0..50u64 {
            acked += 1000;
            ack(&mut h, acked);
            h.on_int(
                i * 1_000,
                &[IntHop {
                    ts: i * 1_000,
                    tx_bytes: i * 10,
                    qlen: 0,
                    link_bps: 100_000_000_000,
                }],
            );
            assert!(h.window() <= 125_000.0);
        }
        // Then a standing queue cuts the window at once.
        let mut tx = 0;
        for i in 50..60u64 {
            acked += 1000;
            ack(&mut h, acked);
            tx += 12_500;
            h.on_int(
                i * 1_000,
                &[IntHop {
                    ts: i * 1_000,
                    tx_bytes: tx,
                    qlen: 250_000,
                    link_bps: 100_000_000_000,
                }],
            );
        }
        assert!(h.window() < 100_000.0, "W = {}", h.window());
    }
}

/// The HPCC ns-3 simulator's switches for its HPCC (`MULTI_RATE`,
/// `SAMPLE_FEEDBACK`, `HAS_WIN`, `VAR_WIN`, `RATE_BOUND`).
#[cfg(test)]
mod ns3_switch_tests {
    use super::*;

    const LINE: u64 = 100_000_000_000;

    /// The paper's configuration (T 10 µs) with ns-3's `opts`.
    fn with(opts: HpccOptions) -> HpccConfig {
        HpccConfig {
            opts,
            ..HpccConfig::new(LINE, 10_000)
        }
    }

    /// Feedback for a path of `n` hops at step `i`: hop `k` carries
    /// `rate_of(k, i)` bytes per ns and holds `queue_of(k, i)` bytes.
    fn path(
        n: usize,
        i: u64,
        tx: &mut [u64],
        rate_of: impl Fn(usize, u64) -> u64,
        queue_of: impl Fn(usize, u64) -> u64,
    ) -> Vec<IntHop> {
        (0..n)
            .map(|k| {
                tx[k] += rate_of(k, i) * 1_000;
                IntHop {
                    ts: i * 1_000,
                    tx_bytes: tx[k],
                    qlen: queue_of(k, i),
                    link_bps: LINE,
                }
            })
            .collect()
    }

    /// Drives `ctls` alike: ten packets in flight, an ACK every µs, the
    /// feedback `fb(i)` given to each controller through `pick`, which
    /// chooses the hops it sees. Returns each step's windows.
    fn drive(
        ctls: &mut [Hpcc],
        steps: u64,
        mut fb: impl FnMut(u64) -> Vec<IntHop>,
        pick: impl Fn(usize, &[IntHop]) -> Vec<IntHop>,
    ) -> Vec<Vec<f64>> {
        let mut out = Vec::new();
        for i in 0..steps {
            let hops = fb(i);
            let a = AckFeedback {
                snd_una: i * 1_000,
                snd_nxt: (i + 10) * 1_000,
                send_point: (i + 10) * 1_000,
                ..AckFeedback::default()
            };
            let mut ws = Vec::new();
            for (c, h) in ctls.iter_mut().enumerate() {
                h.on_ack_feedback(i * 1_000, &a);
                h.on_int(i * 1_000, &pick(c, &hops));
                ws.push(h.window());
            }
            out.push(ws);
        }
        out
    }

    /// A load that moves between the hops: each hop's queue and rate rise
    /// and fall on its own period.
    fn moving_rate(k: usize, i: u64) -> u64 {
        if (i / (7 + 5 * k as u64)).is_multiple_of(2) {
            12
        } else {
            3
        }
    }
    fn moving_queue(k: usize, i: u64) -> u64 {
        if (i / (11 + 3 * k as u64)).is_multiple_of(3) {
            150_000
        } else {
            0
        }
    }

    /// On a path of one hop a rate per hop is the one rate: the same
    /// window at every step, to the bit.
    #[test]
    fn one_hop_multi_rate_is_the_single_rate() {
        let single = HpccConfig::new(LINE, 10_000);
        let multi = with(HpccOptions {
            multi_rate: true,
            ..HpccOptions::default()
        });
        let mut c = [Hpcc::new(single, LINE), Hpcc::new(multi, LINE)];
        let mut tx = [0u64; 1];
        let ws = drive(
            &mut c,
            400,
            |i| path(1, i, &mut tx, moving_rate, moving_queue),
            |_, h| h.to_vec(),
        );
        let moved = ws.iter().filter(|w| w[0] != ws[0][0]).count();
        assert!(moved > 100, "the window moved at {moved} steps");
        for (i, w) in ws.iter().enumerate() {
            assert_eq!(w[0].to_bits(), w[1].to_bits(), "step {i}");
        }
    }

    /// With a rate per hop the window is the smallest of the windows one
    /// controller per hop would set, each seeing only its own hop: every
    /// hop keeps its own average, reference window and stage.
    #[test]
    fn multi_rate_sends_at_the_slowest_hops_own_rate() {
        let single = HpccConfig::new(LINE, 10_000);
        let multi = with(HpccOptions {
            multi_rate: true,
            ..HpccOptions::default()
        });
        let mut c = vec![Hpcc::new(multi, LINE), Hpcc::new(single, LINE)];
        c.extend((0..3).map(|_| Hpcc::new(single, LINE)));
        let mut tx = [0u64; 3];
        let ws = drive(
            &mut c,
            600,
            |i| path(3, i, &mut tx, moving_rate, moving_queue),
            |c, h| match c {
                0 | 1 => h.to_vec(),
                k => vec![h[k - 2]],
            },
        );
        let mut differs = 0;
        for (i, w) in ws.iter().enumerate() {
            let min = w[2].min(w[3]).min(w[4]);
            assert_eq!(w[0].to_bits(), min.to_bits(), "step {i}: {w:?}");
            differs += usize::from(w[0] != w[1]);
        }
        assert!(differs > 50, "the one rate differed at {differs} steps");
    }

    /// Sampled feedback: a fast reaction skips the hops without a queue
    /// and keeps their previous records; a full update reads every hop.
    #[test]
    fn sampled_feedback_skips_idle_hops_between_full_updates() {
        let cfg = with(HpccOptions {
            sample_feedback: true,
            ..HpccOptions::default()
        });
        let mut h = Hpcc::new(cfg, LINE);
        let hop = |ts: u64, tx: u64, qlen: u64| IntHop {
            ts,
            tx_bytes: tx,
            qlen,
            link_bps: LINE,
        };
        let fb = |una: u64, nxt: u64| AckFeedback {
            snd_una: una,
            snd_nxt: nxt,
            send_point: nxt,
            ..AckFeedback::default()
        };
        h.on_ack_feedback(0, &fb(0, 10_000));
        h.on_int(0, &[hop(0, 0, 0), hop(0, 0, 0)]);
        // A fast reaction (nothing past 10 KB acknowledged): both hops
        // idle, nothing moves, their first records stay.
        h.on_ack_feedback(1_000, &fb(1_000, 11_000));
        let (w, u) = (h.window(), h.utilisation());
        h.on_int(1_000, &[hop(1_000, 12_500, 0), hop(1_000, 12_500, 0)]);
        assert_eq!((h.window(), h.utilisation()), (w, u));
        assert_eq!(h.prev_mut()[0], PrevHop::from(&hop(0, 0, 0)));
        // One hop with a queue: it alone is read and kept.
        h.on_int(2_000, &[hop(2_000, 25_000, 0), hop(2_000, 5_000, 50_000)]);
        assert!(h.utilisation() < u, "U = {}", h.utilisation());
        assert_eq!(h.prev_mut()[0], PrevHop::from(&hop(0, 0, 0)));
        assert_eq!(h.prev_mut()[1], PrevHop::from(&hop(2_000, 5_000, 50_000)));
        // A full update reads the idle hop too.
        h.on_ack_feedback(3_000, &fb(20_000, 30_000));
        h.on_int(3_000, &[hop(3_000, 37_500, 0), hop(3_000, 37_500, 50_000)]);
        assert_eq!(h.prev_mut()[0], PrevHop::from(&hop(3_000, 37_500, 0)));
        // Without sampling, the same fast reaction reads an idle hop.
        let mut plain = Hpcc::new(HpccConfig::new(LINE, 10_000), LINE);
        plain.on_ack_feedback(0, &fb(0, 10_000));
        plain.on_int(0, &[hop(0, 0, 0)]);
        plain.on_ack_feedback(1_000, &fb(1_000, 11_000));
        plain.on_int(1_000, &[hop(1_000, 1_000, 0)]);
        assert!(plain.utilisation() < 1.0);
    }

    /// The window and pacing switches: without a window no bound on the
    /// bytes in flight; a fixed window stays at the line rate's while
    /// the rate moves; without pacing no rate.
    #[test]
    fn window_and_pacing_switches() {
        let base = HpccConfig::new(LINE, 10_000);
        let mut c = [
            Hpcc::new(base, LINE),
            Hpcc::new(
                with(HpccOptions {
                    windowed: false,
                    ..HpccOptions::default()
                }),
                LINE,
            ),
            Hpcc::new(
                with(HpccOptions {
                    var_window: false,
                    ..HpccOptions::default()
                }),
                LINE,
            ),
            Hpcc::new(
                with(HpccOptions {
                    paced: false,
                    ..HpccOptions::default()
                }),
                LINE,
            ),
        ];
        let mut tx = [0u64; 1];
        drive(
            &mut c,
            20,
            |i| path(1, i, &mut tx, |_, _| 12, |_, _| 125_000),
            |_, h| h.to_vec(),
        );
        let w = c[0].window();
        assert!(w < 0.6 * 125_000.0, "W = {w}");
        for h in &c {
            assert_eq!(h.window(), w, "the same W in every mode");
        }
        assert_eq!(c[0].window_bytes(), Some(w as u64));
        assert!(c[0].rate_bps().is_some());
        assert_eq!(c[1].window_bytes(), None);
        assert_eq!(c[1].rate_bps(), c[0].rate_bps());
        assert_eq!(c[2].window_bytes(), Some(125_000));
        assert_eq!(c[2].rate_bps(), c[0].rate_bps());
        assert_eq!(c[3].window_bytes(), Some(w as u64));
        assert_eq!(c[3].rate_bps(), None);
    }
}
