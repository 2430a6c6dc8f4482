//! DCQCN reaction point (Zhu et al., "Congestion Control for Large-Scale RDMA
//! Deployments", SIGCOMM 2015, Fig. 5–7; the timer structure follows the
//! ConnectX implementation as the HPCC ns-3 simulator models it).
//!
//! * On a CNP (at most once per `rate_decrease_interval`): the target rate
//!   becomes the current rate, the current rate is cut by α/2, α moves toward
//!   1 by `g`, and the increase stages restart.
//! * Every `alpha_resume_interval` without a CNP, α decays by (1 − g).
//! * Every `rp_timer` (timer stage) and every `byte_counter` bytes sent (byte
//!   stage) the rate increases: *fast recovery* (Rc ← (Rt + Rc)/2) for the
//!   first `fast_recovery_times` stages, then *additive* (Rt += R_AI) and,
//!   once both stages are past that, *hyper* (Rt += i·R_HAI).
//!
//! The NP side (CNP generation, paced per QP) is in the responder.

use super::CongestionControl;
use crate::types::Nanos;

/// DCQCN parameters.
///
/// `Default` is this project's historical mix, kept so existing scenarios
/// reproduce: the paper's increase timer (55 µs), byte counter (10 MB),
/// F = 5 and R_AI (40 Mb/s), with the HPCC ns-3 simulator's g = 1/16 and
/// 100 Mb/s floor, R_HAI = 10·R_AI and ConnectX's 4 µs decrease interval.
/// It is *not* the paper's setting: for that, and for the two settings
/// deployed systems actually run, use the presets [`paper`](Self::paper),
/// [`connectx`](Self::connectx) and [`hpcc_ns3`](Self::hpcc_ns3).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct DcqcnConfig {
    pub g: f64,
    pub rate_ai_bps: u64,
    pub rate_hai_bps: u64,
    pub min_rate_bps: u64,
    pub rp_timer_ns: Nanos,
    pub alpha_resume_interval_ns: Nanos,
    pub rate_decrease_interval_ns: Nanos,
    /// Bytes per byte-counter stage (0 disables the byte counter).
    pub byte_counter: u64,
    pub fast_recovery_times: u32,
    /// On a cut, set the target rate to the current rate (ConnectX "clamp_tgt_rate").
    pub clamp_target_rate: bool,
    /// α when the first CNP arrives (ConnectX `initial_alpha_value`/1024).
    pub initial_alpha: f64,
    /// A cut multiplies the rate by 1 − `cut_scale`·α: ½ in the paper
    /// (Rc ← Rc·(1 − α/2)); ConnectX's `rpg_gd` = 11 is the same ½
    /// (α in 10-bit fixed point divided by 2^11).
    pub cut_scale: f64,
    /// One cut leaves at least this fraction of the rate (ConnectX
    /// `rpg_min_dec_fac`/100; 0 = no bound, as in the paper).
    pub min_decrease_factor: f64,
    /// A cut after a timer-stage increase sets the target rate even without
    /// `clamp_target_rate` (ConnectX `clamp_tgt_rate_after_time_inc`, and
    /// what the HPCC ns-3 model always does).
    pub clamp_after_time_inc: bool,
}

impl DcqcnConfig {
    /// Zhu et al., SIGCOMM 2015, §5 / Table 1: g = 1/256, K = 55 µs alpha
    /// interval, timer T = 55 µs, byte counter B = 10 MB, F = 5,
    /// R_AI = 40 Mb/s. What the paper leaves open: R_HAI (10·R_AI here), the
    /// rate floor (100 Mb/s) and the reaction to CNPs that arrive
    /// back-to-back (one cut per 4 µs check, as ConnectX; the NP's 50 µs CNP
    /// pacing makes that one cut per CNP).
    pub fn paper() -> DcqcnConfig {
        DcqcnConfig {
            g: 1.0 / 256.0,
            ..DcqcnConfig::default()
        }
    }

    /// NVIDIA ConnectX-4 and later firmware defaults, under their mlx5 names
    /// (NVIDIA, "DCQCN CC Parameters"): `dce_tcp_g` 1019 (g = 5/1024),
    /// `dce_tcp_rtt` 1 µs, `initial_alpha_value` 1023, `rpg_time_reset`
    /// 300 µs, `rpg_byte_reset` 32767 B (bytes: NVIDIA's own mstflint/
    /// mlxconfig describe RPG_BYTE_RESET as "transmitted data between rate
    /// increases if no CNPs are received, given in Bytes", in a 15-bit
    /// field of the `roce_cc_ecn` layout, so 32767 is the largest byte
    /// count it holds — as the kernel's IEEE 802.1Qau `ieee_qcn`
    /// `rpg_byte_reset` it descends from is "given in Bytes"; sending at
    /// 100 Gb/s, one byte-counter stage per ~2.6 µs), `rpg_threshold` 1, `rpg_ai_rate`
    /// 5 Mb/s, `rpg_hai_rate` 50 Mb/s, `rpg_gd` 11 (cut α/2),
    /// `rpg_min_dec_fac` 50 %, `rpg_min_rate` 1 Mb/s,
    /// `rate_reduce_monitor_period` 4 µs, `clamp_tgt_rate` 0,
    /// `clamp_tgt_rate_after_time_inc` 1 (built in: a cut after a timer
    /// increase always clamps). The NP's `min_time_between_cnps` (4 µs) is
    /// the receiver's `RnicConfig::cnp_interval_ns`, not a sender knob.
    pub fn connectx() -> DcqcnConfig {
        DcqcnConfig {
            g: 1.0 - 1019.0 / 1024.0,
            rate_ai_bps: 5_000_000,
            rate_hai_bps: 50_000_000,
            min_rate_bps: 1_000_000,
            rp_timer_ns: 300_000,
            alpha_resume_interval_ns: 1_000,
            rate_decrease_interval_ns: 4_000,
            byte_counter: 32_767,
            fast_recovery_times: 1,
            clamp_target_rate: false,
            initial_alpha: 1023.0 / 1024.0,
            cut_scale: 0.5,
            min_decrease_factor: 0.5,
            clamp_after_time_inc: true,
        }
    }

    /// The HPCC ns-3 simulator's `CC_MODE 1` with its built-in defaults
    /// (rdma-hw.cc attributes; third.cc's config keys override them):
    /// `EwmaGain` 1/16, `RateAI` 5 Mb/s, `RateHAI` 50 Mb/s, `MinRate`
    /// 100 Mb/s, `RPTimer` 1500 µs, `AlphaResumInterval` 55 µs,
    /// `RateDecreaseInterval` 4 µs, `FastRecoveryTimes` 5,
    /// `ClampTargetRate` false, and no byte counter.
    pub fn hpcc_ns3() -> DcqcnConfig {
        DcqcnConfig {
            g: 1.0 / 16.0,
            rate_ai_bps: 5_000_000,
            rate_hai_bps: 50_000_000,
            min_rate_bps: 100_000_000,
            rp_timer_ns: 1_500_000,
            alpha_resume_interval_ns: 55_000,
            rate_decrease_interval_ns: 4_000,
            byte_counter: 0,
            fast_recovery_times: 5,
            clamp_target_rate: false,
            initial_alpha: 1.0,
            cut_scale: 0.5,
            min_decrease_factor: 0.0,
            clamp_after_time_inc: true,
        }
    }

    /// A preset by the name the scenario's `[cc] preset` uses.
    pub fn preset(name: &str) -> Option<DcqcnConfig> {
        match name {
            "paper" => Some(Self::paper()),
            "connectx" => Some(Self::connectx()),
            "hpcc-ns3" => Some(Self::hpcc_ns3()),
            _ => None,
        }
    }
}

impl Default for DcqcnConfig {
    fn default() -> Self {
        DcqcnConfig {
            g: 1.0 / 16.0,
            rate_ai_bps: 40_000_000,
            rate_hai_bps: 400_000_000,
            min_rate_bps: 100_000_000,
            rp_timer_ns: 55_000,
            alpha_resume_interval_ns: 55_000,
            rate_decrease_interval_ns: 4_000,
            byte_counter: 10_000_000,
            fast_recovery_times: 5,
            clamp_target_rate: true,
            initial_alpha: 1.0,
            cut_scale: 0.5,
            min_decrease_factor: 0.0,
            clamp_after_time_inc: true,
        }
    }
}

/// One QP's DCQCN reaction point.
#[derive(Debug, Clone)]
pub struct Dcqcn {
    cfg: DcqcnConfig,
    line: f64,
    rc: f64,
    rt: f64,
    alpha: f64,
    first_cnp: bool,
    alpha_cnp_arrived: bool,
    decrease_cnp_arrived: bool,
    time_stage: u32,
    byte_stage: u32,
    bytes_since: u64,
    next_alpha: Option<Nanos>,
    next_increase: Option<Nanos>,
    next_decrease_check: Option<Nanos>,
    /// Where the alpha and decrease timers stood when they were stopped.
    paused_alpha: Option<Nanos>,
    paused_decrease: Option<Nanos>,
    /// Rate cuts applied.
    pub cuts: u64,
}

impl Dcqcn {
    pub fn new(cfg: DcqcnConfig, line_rate_bps: u64) -> Dcqcn {
        let line = line_rate_bps as f64;
        Dcqcn {
            cfg,
            line,
            rc: line,
            rt: line,
            alpha: 1.0,
            first_cnp: true,
            alpha_cnp_arrived: false,
            decrease_cnp_arrived: false,
            time_stage: 0,
            byte_stage: 0,
            bytes_since: 0,
            next_alpha: None,
            next_increase: None,
            next_decrease_check: None,
            paused_alpha: None,
            paused_decrease: None,
            cuts: 0,
        }
    }

    pub fn alpha(&self) -> f64 {
        self.alpha
    }
    pub fn target_rate_bps(&self) -> u64 {
        self.rt as u64
    }

    fn quiet(&self) -> bool {
        self.rc >= self.line
            && self.rt >= self.line
            && !self.decrease_cnp_arrived
            && !self.alpha_cnp_arrived
    }

    /// The rate-decrease check that runs every `rate_decrease_interval`.
    fn check_decrease(&mut self, now: Nanos) {
        if !std::mem::take(&mut self.decrease_cnp_arrived) {
            return;
        }
        let clamp =
            self.cfg.clamp_target_rate || (self.cfg.clamp_after_time_inc && self.time_stage != 0);
        if clamp {
            self.rt = self.rc;
        }
        let cut = (1.0 - self.cfg.cut_scale * self.alpha).max(self.cfg.min_decrease_factor);
        self.rc = (self.rc * cut).max(self.cfg.min_rate_bps as f64);
        self.time_stage = 0;
        self.byte_stage = 0;
        self.bytes_since = 0;
        self.cuts += 1;
        self.next_increase = Some(now + self.cfg.rp_timer_ns);
    }

    /// The timers due at `at` (decrease check, alpha update, rate
    /// increase, in that order); then, back at line rate with no CNP
    /// pending, all timers stop. A zero interval counts as 1 ns so that a
    /// catching-up [`on_tick`](CongestionControl::on_tick) always ends.
    fn run_timers_at(&mut self, at: Nanos) {
        if let Some(t) = self.next_decrease_check.filter(|t| *t == at) {
            self.check_decrease(t);
            self.next_decrease_check = Some(t + self.cfg.rate_decrease_interval_ns.max(1));
        }
        if let Some(t) = self.next_alpha.filter(|t| *t == at) {
            self.alpha = if std::mem::take(&mut self.alpha_cnp_arrived) {
                (1.0 - self.cfg.g) * self.alpha + self.cfg.g
            } else {
                (1.0 - self.cfg.g) * self.alpha
            };
            self.next_alpha = Some(t + self.cfg.alpha_resume_interval_ns.max(1));
        }
        if let Some(t) = self.next_increase.filter(|t| *t == at) {
            self.increase();
            self.time_stage += 1;
            self.next_increase = Some(t + self.cfg.rp_timer_ns.max(1));
        }
        if self.quiet() {
            // Back at line rate with no CNP pending: nothing to do until the
            // next CNP. Remember the timers' phase so they resume on it.
            self.paused_alpha = self.next_alpha.take();
            self.paused_decrease = self.next_decrease_check.take();
            self.next_increase = None;
        }
    }

    /// One rate-increase event (timer or byte counter).
    fn increase(&mut self) {
        // Paper: fast recovery while max(T, BC) < F, hyper once min(T, BC) > F,
        // additive in between. Without a byte counter BC follows T, which is
        // exactly ConnectX's (and ns-3's) timer-only state machine.
        let f = self.cfg.fast_recovery_times;
        let t = self.time_stage;
        let b = if self.cfg.byte_counter > 0 {
            self.byte_stage
        } else {
            t
        };
        if t.max(b) < f {
            // Fast recovery: halve the distance to the target.
        } else if t.min(b) > f {
            self.rt = (self.rt + self.cfg.rate_hai_bps as f64).min(self.line);
        } else {
            self.rt = (self.rt + self.cfg.rate_ai_bps as f64).min(self.line);
        }
        self.rc = ((self.rt + self.rc) / 2.0).min(self.line);
        if self.line - self.rc < 1.0 {
            self.rc = self.line;
        }
    }
}

impl CongestionControl for Dcqcn {
    fn rate_cuts(&self) -> u64 {
        self.cuts
    }
    fn name(&self) -> &'static str {
        "dcqcn"
    }

    fn reads_acks(&self) -> bool {
        false
    }
    fn on_cnp(&mut self, now: Nanos) {
        self.alpha_cnp_arrived = true;
        self.decrease_cnp_arrived = true;
        if self.first_cnp {
            self.first_cnp = false;
            self.alpha = self.cfg.initial_alpha;
            self.alpha_cnp_arrived = false;
        }
        // Restart timers stopped while quiet, on their original phase, with
        // the alpha decay they would have applied meanwhile: the same result
        // as timers that never stop (as in the reference model), without
        // an event every few microseconds on every idle QP.
        if self.next_alpha.is_none() {
            let iv = self.cfg.alpha_resume_interval_ns.max(1);
            self.next_alpha = Some(match self.paused_alpha.take() {
                Some(next) if next <= now => {
                    let missed = (now - next) / iv + 1;
                    self.alpha *= (1.0 - self.cfg.g).powi(missed.min(i32::MAX as u64) as i32);
                    next + missed * iv
                }
                Some(next) => next,
                None => now + iv,
            });
        }
        if self.next_decrease_check.is_none() {
            let iv = self.cfg.rate_decrease_interval_ns.max(1);
            self.next_decrease_check = Some(match self.paused_decrease.take() {
                Some(next) if next <= now => next + ((now - next) / iv + 1) * iv,
                Some(next) => next,
                None => now + iv + 1,
            });
        }
    }

    fn on_send(&mut self, now: Nanos, bytes: usize) {
        self.on_send_moved(now, bytes);
    }

    /// Only a byte-counter rate increase moves the rate; the count
    /// towards it moves nothing the RNIC reads.
    fn on_send_moved(&mut self, _now: Nanos, bytes: usize) -> bool {
        if self.cfg.byte_counter == 0 || self.quiet() {
            return false;
        }
        self.bytes_since += bytes as u64;
        if self.bytes_since >= self.cfg.byte_counter {
            self.bytes_since = 0;
            self.increase();
            self.byte_stage += 1;
            return true;
        }
        false
    }

    fn on_tick(&mut self, now: Nanos) {
        // Every timer period that ended by `now` runs, in time order, each
        // at its own instant: a late call (the driver woke the QP after
        // several periods) must leave no deadline in the past, or the QP's
        // next deadline stays overdue and masks its pacing wake-ups.
        while let Some(at) = self.next_tick().filter(|t| *t <= now) {
            self.run_timers_at(at);
        }
    }

    /// The earliest of the three timers. The RNIC asks this every time it
    /// refiles the QP in its timer index — several times per packet — so
    /// it is a plain min of three options, not an iterator chain (which
    /// cost DCQCN ~40 instructions a call; `benches/cc.rs`).
    fn next_tick(&self) -> Option<Nanos> {
        fn earliest(a: Option<Nanos>, b: Option<Nanos>) -> Option<Nanos> {
            match (a, b) {
                (Some(a), Some(b)) => Some(a.min(b)),
                (a, None) => a,
                (None, b) => b,
            }
        }
        earliest(
            earliest(self.next_decrease_check, self.next_alpha),
            self.next_increase,
        )
    }

    fn rate_bps(&self) -> Option<u64> {
        (self.rc < self.line).then_some(self.rc as u64)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run_until_quiet(d: &mut Dcqcn, mut now: Nanos) -> Nanos {
        while let Some(t) = d.next_tick() {
            now = t;
            d.on_tick(now);
            assert!(now < 10_000_000_000, "never recovered");
        }
        now
    }

    #[test]
    fn cut_then_recover_to_line_rate() {
        let line = 100_000_000_000;
        let mut d = Dcqcn::new(
            DcqcnConfig {
                byte_counter: 0,
                ..Default::default()
            },
            line,
        );
        assert_eq!(d.rate_bps(), None);
        d.on_cnp(0);
        // The cut happens at the first decrease check, 4 us later; alpha
        // starts at 1, so it halves the rate.
        assert_eq!(d.next_tick(), Some(4_001));
        d.on_tick(4_001);
        assert_eq!(d.rate_bps(), Some(50_000_000_000));
        assert_eq!(d.target_rate_bps(), line);
        // Another CNP: the next check cuts again, by the (still ~1) alpha.
        d.on_cnp(5_000);
        d.on_tick(8_001);
        assert_eq!(d.rate_bps(), Some(25_000_000_000));
        assert_eq!(d.target_rate_bps(), 50_000_000_000);
        // Fast recovery: five timer stages, each halving the gap to 50 G.
        let mut now = 8_001;
        let mut rates = Vec::new();
        while rates.len() < 5 {
            now = d.next_tick().unwrap();
            let before = d.time_stage;
            d.on_tick(now);
            if d.time_stage != before {
                rates.push(d.rate_bps().unwrap());
            }
        }
        assert_eq!(rates[0], 37_500_000_000);
        assert!(rates.windows(2).all(|w| w[1] > w[0]));
        assert!(
            rates[4] > 49_000_000_000 && rates[4] < 50_000_000_000,
            "{rates:?}"
        );
        let quiet_at = run_until_quiet(&mut d, now);
        assert_eq!(d.rate_bps(), None, "back at line rate");
        assert_eq!(d.cuts, 2);
        // While quiet, no timers run; a CNP 100 alpha intervals later sees
        // alpha decayed by those 100 intervals, as if the timer had run.
        let a = d.alpha();
        d.on_cnp(quiet_at + 100 * 55_000);
        let want = a * (1.0 - 1.0 / 16.0f64).powi(100);
        assert!((d.alpha() - want).abs() < 1e-12, "{} vs {want}", d.alpha());
    }

    /// A driver that wakes the QP late (several timer periods at once)
    /// gets every missed period run, each at its own instant: nothing is
    /// left due, and the state is what on-time ticks would have left.
    /// (Before, one call ran each timer once, so a late QP's deadline
    /// stayed in the past and hid its pacing wake-ups — issue 12.)
    #[test]
    fn a_late_tick_catches_up_every_missed_period() {
        let cfg = DcqcnConfig {
            byte_counter: 0,
            ..Default::default()
        };
        let mut on_time = Dcqcn::new(cfg, 100_000_000_000);
        let mut late = on_time.clone();
        for d in [&mut on_time, &mut late] {
            d.on_cnp(0);
            d.on_tick(4_001);
            assert_eq!(d.rate_bps(), Some(50_000_000_000));
        }
        let until = 300_000;
        while let Some(t) = on_time.next_tick().filter(|t| *t <= until) {
            on_time.on_tick(t);
        }
        late.on_tick(until);
        assert!(late.next_tick().is_some_and(|t| t > until), "{late:?}");
        assert_eq!(late.next_tick(), on_time.next_tick());
        assert_eq!(late.rate_bps(), on_time.rate_bps());
        assert_eq!(late.target_rate_bps(), on_time.target_rate_bps());
        assert_eq!(late.alpha(), on_time.alpha());
        assert_eq!(late.time_stage, on_time.time_stage);
        assert!(late.time_stage >= 5, "the increase timer ran");
    }

    #[test]
    fn rate_never_drops_below_min() {
        let mut d = Dcqcn::new(DcqcnConfig::default(), 100_000_000_000);
        for i in 0..400 {
            d.on_cnp(i * 5_000);
            d.on_tick(i * 5_000);
        }
        assert_eq!(d.rate_bps(), Some(100_000_000));
    }
}
