//! Congestion control hooks.
//!
//! Like quinn's `Controller`, a controller is told what happens to its QP —
//! packets sent, ACKs, CNPs, NAKs, timeouts, INT telemetry — and answers with
//! a sending rate and/or a window. Every callback has a no-op default, so an
//! algorithm implements only what it reacts to. The RNIC paces each QP at
//! `rate_bps()` and stops sending when `window_bytes()` are in flight.
//!
//! Delay- and ECN-echo-based controllers (TIMELY, Swift, DCTCP) read
//! [`AckFeedback`]: a Karn-filtered RTT sample per ACK with the minimum RTT,
//! the receiver's ECN echo, and the bytes sent/acknowledged so far.

use crate::types::Nanos;

pub mod dcqcn;
pub mod dctcp;
pub mod hpcc;
pub mod params;
pub mod pint;
pub(crate) mod sample;
pub mod swift;
pub mod timely;

pub use dcqcn::{Dcqcn, DcqcnConfig};
pub use dctcp::{Dctcp, DctcpConfig, DctcpVariant};
pub use hpcc::{Hpcc, HpccConfig, HpccOptions};
pub use params::{
    CcChoice, CcConfig, CcParamError, CcParams, CcPlan, DctcpSettings, HpccSettings, PintSettings,
    SwiftSettings,
};
pub use pint::{HpccPint, HpccPintConfig, PintCodec, PintTable};
pub use sample::{AckFeedback, RttSample};
pub use swift::{Swift, SwiftConfig};
pub use timely::{Timely, TimelyConfig};

/// One hop of in-band network telemetry (for HPCC-style controllers).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct IntHop {
    pub ts: Nanos,
    pub tx_bytes: u64,
    pub qlen: u64,
    pub link_bps: u64,
}

/// What an ACK carried back for its QP's congestion control, besides the
/// ACK itself: HPCC's per-hop INT, or HPCC-PINT's one code.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Telemetry<'a> {
    Int(&'a [IntHop]),
    Pint(u16),
}

pub trait CongestionControl: Send {
    fn name(&self) -> &'static str;
    fn on_send(&mut self, _now: Nanos, _bytes: usize) {}
    /// [`on_send`](Self::on_send), answering whether it may have moved
    /// what the RNIC reads after it ([`next_tick`](Self::next_tick),
    /// [`window_bytes`](Self::window_bytes), [`rate_bps`](Self::rate_bps)).
    /// The default says yes; a controller whose sends only count bytes
    /// until some threshold (DCQCN's byte counter) says no for those, and
    /// the RNIC then spares the virtual call that reads them again, one
    /// per packet sent (issue 12).
    ///
    /// The RNIC calls only this one, so a controller that overrides it
    /// must do here all that its `on_send` does (DCQCN's `on_send` calls
    /// this), and a wrapper must forward both.
    fn on_send_moved(&mut self, now: Nanos, bytes: usize) -> bool {
        self.on_send(now, bytes);
        true
    }
    /// False when [`on_send`](Self::on_send) is the no-op default: the
    /// RNIC then skips the call, one per packet sent. (True by default, so
    /// a controller that reads its sends cannot be skipped by omission.)
    fn counts_sends(&self) -> bool {
        true
    }
    /// False when [`on_ack`](Self::on_ack) and
    /// [`on_ack_feedback`](Self::on_ack_feedback) are both the no-op
    /// defaults: the RNIC then skips them, one call per ACK (true by
    /// default, as [`counts_sends`](Self::counts_sends)).
    fn reads_acks(&self) -> bool {
        true
    }
    /// False when [`on_ack`](Self::on_ack) and
    /// [`on_ack_feedback`](Self::on_ack_feedback) never change what
    /// [`readings`](Self::readings) answers (HPCC only notes the sequence
    /// space there; its window moves on INT): the RNIC then does not read
    /// them again after each ACK (true by default, as
    /// [`counts_sends`](Self::counts_sends)).
    fn acks_move_readings(&self) -> bool {
        true
    }
    /// An ACK moved the acknowledged point; `rtt` is its Karn-filtered sample.
    fn on_ack(&mut self, _now: Nanos, _acked_bytes: u64, _rtt: Option<Nanos>) {}
    /// The same ACK in full (called right after [`on_ack`](Self::on_ack)).
    fn on_ack_feedback(&mut self, _now: Nanos, _fb: &AckFeedback) {}
    fn on_cnp(&mut self, _now: Nanos) {}
    fn on_nak(&mut self, _now: Nanos) {}
    fn on_timeout(&mut self, _now: Nanos) {}
    /// A go-back-N (a NAK, an out-of-sequence READ response or a timeout)
    /// moved the send point back: sending resumes at `send_point` payload
    /// bytes, as [`AckFeedback::send_point`] counts them. Called after the
    /// ACK that carried the NAK was fed back, so a controller reading its
    /// INT next sees the rewound point (ns-3 rewinds snd_nxt first too).
    fn on_rewind(&mut self, _now: Nanos, _send_point: u64) {}
    fn on_int(&mut self, _now: Nanos, _hops: &[IntHop]) {}
    /// The PINT code an ACK echoed (HPCC-PINT): the largest utilisation
    /// code of the acknowledged packet's path (see [`pint`]).
    fn on_pint(&mut self, _now: Nanos, _power: u16) {}
    /// Periodic work (rate-increase timers and the like).
    fn on_tick(&mut self, _now: Nanos) {}
    /// When the controller next wants [`on_tick`](Self::on_tick).
    fn next_tick(&self) -> Option<Nanos> {
        None
    }
    /// Current sending rate, or `None` for line rate (no pacing).
    fn rate_bps(&self) -> Option<u64> {
        None
    }
    /// Bytes allowed in flight, or `None` for no window.
    fn window_bytes(&self) -> Option<u64> {
        None
    }
    /// The line rate, for a controller whose rate changes re-time the
    /// pacing gap a QP is waiting out, as the HPCC ns-3 simulator's
    /// `RdmaHw::ChangeRate` does on every HPCC and HPCC-PINT update: the
    /// gap since the last packet's send becomes that packet's time at the
    /// new rate (at this line rate when the new rate is `None`). Its DCQCN,
    /// TIMELY and DCTCP set the rate without, and by default (`None`) a
    /// gap, once started, runs at the rate it started at. Read once, when
    /// the RNIC takes the controller.
    fn rescales_gap(&self) -> Option<u64> {
        None
    }
    /// Multiplicative cuts of the rate or window so far (what `roce perf`
    /// reports beside the CNPs that provoked them).
    fn rate_cuts(&self) -> u64 {
        0
    }
    /// [`next_tick`](Self::next_tick), [`window_bytes`](Self::window_bytes)
    /// and [`rate_bps`](Self::rate_bps) in one virtual call (inside it,
    /// the controller's own methods are called directly): what the RNIC
    /// reads again after every callback. Not meant to be overridden.
    fn readings(&self) -> (Option<Nanos>, Option<u64>, Option<u64>) {
        (self.next_tick(), self.window_bytes(), self.rate_bps())
    }
}

/// What the RNIC reads of a controller between its callbacks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct View {
    tick: Option<Nanos>,
    window: Option<u64>,
    rate: Option<u64>,
}

impl View {
    fn of(cc: &dyn CongestionControl) -> View {
        let (tick, window, rate) = cc.readings();
        View { tick, window, rate }
    }
}

/// A QP's controller with what the RNIC reads of it kept beside it: its
/// next tick, window and rate. The RNIC asks for a QP's next deadline on
/// every re-file, several times per packet, and for the window (twice)
/// and the rate on every packet it sends, and most QPs' controllers
/// never tick (a receiver's never sends): kept here, the answers cost
/// neither the controller's cache lines nor a virtual call each (with
/// HPCC on the 320-host fat tree, its window's line was a cache miss on
/// half the packets sent; cachegrind). [`CongestionControl::next_tick`],
/// [`window_bytes`](CongestionControl::window_bytes) and
/// [`rate_bps`](CongestionControl::rate_bps) read only the controller's
/// state, which only its `&mut` callbacks change, so they are read again
/// after each of those that may move them: every one, except a send the
/// controller says moved nothing ([`CongestionControl::on_send_moved`])
/// and, for a controller that says so, an ACK
/// ([`CongestionControl::acks_move_readings`]). Debug builds check both.
pub(crate) struct Controller {
    cc: Box<dyn CongestionControl>,
    view: View,
    /// [`CongestionControl::counts_sends`], as of creation.
    sends: bool,
    /// [`CongestionControl::reads_acks`], as of creation.
    acks: bool,
    /// [`CongestionControl::acks_move_readings`], as of creation.
    ack_view: bool,
    /// [`CongestionControl::rescales_gap`], as of creation.
    rescale: Option<u64>,
}

impl Controller {
    pub fn new(cc: Box<dyn CongestionControl>) -> Controller {
        let view = View::of(&*cc);
        let (sends, acks) = (cc.counts_sends(), cc.reads_acks());
        let ack_view = cc.acks_move_readings();
        let rescale = cc.rescales_gap();
        Controller {
            cc,
            view,
            sends,
            acks,
            ack_view,
            rescale,
        }
    }

    /// The controller, for what it reports.
    pub fn get(&self) -> &dyn CongestionControl {
        &*self.cc
    }

    /// Hands the controller back, leaving none in its place.
    pub fn take(&mut self) -> Box<dyn CongestionControl> {
        let cc = std::mem::replace(&mut self.cc, Box::new(NoCc));
        self.view = View::of(&*self.cc);
        self.sends = self.cc.counts_sends();
        self.acks = self.cc.reads_acks();
        self.ack_view = self.cc.acks_move_readings();
        self.rescale = self.cc.rescales_gap();
        cc
    }

    /// Runs a callback, then re-reads what the RNIC reads.
    fn update<R>(&mut self, f: impl FnOnce(&mut dyn CongestionControl) -> R) -> R {
        let r = f(&mut *self.cc);
        self.view = View::of(&*self.cc);
        r
    }

    pub fn name(&self) -> &'static str {
        self.cc.name()
    }
    /// Skipped for a controller whose `on_send` does nothing (which
    /// changes no state, so nothing needs reading again); the readings
    /// are read again only if the send says it moved them
    /// ([`CongestionControl::on_send_moved`]).
    pub fn on_send(&mut self, now: Nanos, bytes: usize) {
        if self.sends && self.cc.on_send_moved(now, bytes) {
            self.view = View::of(&*self.cc);
        }
        debug_assert_eq!(
            self.view,
            View::of(&*self.cc),
            "a send moved an unread view"
        );
    }
    /// An ACK that moved the acknowledged point: `on_ack`, then
    /// `on_ack_feedback`, as the trait documents (skipped for a controller
    /// that reads neither, like `on_send`). The readings are read again
    /// only if an ACK may move them: HPCC's move on the INT that follows
    /// each ACK, not on the ACK itself (a virtual call saved per ACK).
    pub fn on_ack(&mut self, now: Nanos, fb: &AckFeedback) {
        if !self.acks {
            return;
        }
        let ack = |c: &mut dyn CongestionControl| {
            c.on_ack(now, fb.acked_bytes, fb.rtt.map(|s| s.rtt));
            c.on_ack_feedback(now, fb)
        };
        if self.ack_view {
            self.update(ack)
        } else {
            ack(&mut *self.cc);
            debug_assert_eq!(
                self.view,
                View::of(&*self.cc),
                "an ACK moved an unread view"
            );
        }
    }
    pub fn on_cnp(&mut self, now: Nanos) {
        self.update(|c| c.on_cnp(now))
    }
    pub fn on_nak(&mut self, now: Nanos) {
        self.update(|c| c.on_nak(now))
    }
    pub fn on_timeout(&mut self, now: Nanos) {
        self.update(|c| c.on_timeout(now))
    }
    pub fn on_rewind(&mut self, now: Nanos, send_point: u64) {
        self.update(|c| c.on_rewind(now, send_point))
    }
    pub fn on_int(&mut self, now: Nanos, hops: &[IntHop]) {
        self.update(|c| c.on_int(now, hops))
    }
    pub fn on_pint(&mut self, now: Nanos, power: u16) {
        self.update(|c| c.on_pint(now, power))
    }
    /// [`on_int`](Self::on_int) or [`on_pint`](Self::on_pint), as the
    /// ACK carried.
    pub fn on_telemetry(&mut self, now: Nanos, t: Telemetry<'_>) {
        match t {
            Telemetry::Int(hops) => self.on_int(now, hops),
            Telemetry::Pint(power) => self.on_pint(now, power),
        }
    }
    pub fn on_tick(&mut self, now: Nanos) {
        self.update(|c| c.on_tick(now))
    }
    /// [`CongestionControl::next_tick`], as of the last callback.
    pub fn next_tick(&self) -> Option<Nanos> {
        self.view.tick
    }
    /// [`CongestionControl::rate_bps`], as of the last callback.
    pub fn rate_bps(&self) -> Option<u64> {
        self.view.rate
    }
    /// [`CongestionControl::window_bytes`], as of the last callback.
    pub fn window_bytes(&self) -> Option<u64> {
        self.view.window
    }
    /// [`CongestionControl::rescales_gap`], as of creation.
    pub fn rescales_gap(&self) -> Option<u64> {
        self.rescale
    }
    pub fn rate_cuts(&self) -> u64 {
        self.cc.rate_cuts()
    }
}

/// No congestion control: line rate, no window.
#[derive(Debug, Default, Clone, Copy)]
pub struct NoCc;

impl CongestionControl for NoCc {
    fn name(&self) -> &'static str {
        "none"
    }
    fn counts_sends(&self) -> bool {
        false
    }
    fn reads_acks(&self) -> bool {
        false
    }
}

/// The [`CongestionControl`] methods of a wrapper around an `inner`
/// controller (a field `inner: Box<dyn CongestionControl>`) that go to it
/// unchanged: every callback but `on_ack_feedback`, and every reading but
/// the rate and the window, which the wrapper writes (forwarding them or
/// not). For `RateLimit` and `BdpWindow` here, and wrappers of other
/// crates (`roce_verbs`' TIMELY over the minimum RTT).
#[macro_export]
macro_rules! forward_to_inner {
    () => {
        fn name(&self) -> &'static str {
            self.inner.name()
        }
        fn on_send(&mut self, now: $crate::types::Nanos, bytes: usize) {
            self.inner.on_send(now, bytes)
        }
        fn on_send_moved(&mut self, now: $crate::types::Nanos, bytes: usize) -> bool {
            self.inner.on_send_moved(now, bytes)
        }
        fn counts_sends(&self) -> bool {
            self.inner.counts_sends()
        }
        fn reads_acks(&self) -> bool {
            self.inner.reads_acks()
        }
        fn acks_move_readings(&self) -> bool {
            // The bound is fixed, or moves only with the inner rate: only
            // the inner controller's readings move.
            self.inner.acks_move_readings()
        }
        fn on_ack(
            &mut self,
            now: $crate::types::Nanos,
            acked_bytes: u64,
            rtt: Option<$crate::types::Nanos>,
        ) {
            self.inner.on_ack(now, acked_bytes, rtt)
        }
        fn on_cnp(&mut self, now: $crate::types::Nanos) {
            self.inner.on_cnp(now)
        }
        fn on_nak(&mut self, now: $crate::types::Nanos) {
            self.inner.on_nak(now)
        }
        fn on_timeout(&mut self, now: $crate::types::Nanos) {
            self.inner.on_timeout(now)
        }
        fn on_rewind(&mut self, now: $crate::types::Nanos, send_point: u64) {
            self.inner.on_rewind(now, send_point)
        }
        fn on_int(&mut self, now: $crate::types::Nanos, hops: &[$crate::cc::IntHop]) {
            self.inner.on_int(now, hops)
        }
        fn on_pint(&mut self, now: $crate::types::Nanos, power: u16) {
            self.inner.on_pint(now, power)
        }
        fn on_tick(&mut self, now: $crate::types::Nanos) {
            self.inner.on_tick(now)
        }
        fn next_tick(&self) -> Option<$crate::types::Nanos> {
            self.inner.next_tick()
        }
        fn rate_cuts(&self) -> u64 {
            self.inner.rate_cuts()
        }
        fn rescales_gap(&self) -> Option<u64> {
            self.inner.rescales_gap()
        }
    };
}

/// A per-QP rate limit over another controller (`ibv_modify_qp_rate_limit`,
/// the NIC's per-QP shaper): the QP never goes faster than `cap_bps`,
/// whatever its congestion control allows.
pub struct RateLimit {
    pub inner: Box<dyn CongestionControl>,
    pub cap_bps: u64,
}

impl CongestionControl for RateLimit {
    forward_to_inner!();
    fn on_ack_feedback(&mut self, now: Nanos, fb: &AckFeedback) {
        self.inner.on_ack_feedback(now, fb)
    }
    fn rate_bps(&self) -> Option<u64> {
        let cap = self.cap_bps.max(1);
        Some(self.inner.rate_bps().map_or(cap, |r| r.min(cap)))
    }
    fn window_bytes(&self) -> Option<u64> {
        self.inner.window_bytes()
    }
}

/// The HPCC ns-3 simulator's window over a rate-based controller (its
/// `HAS_WIN 1`, on by default, for DCQCN, TIMELY and DCTCP alike; ns-3's
/// `RdmaQueuePair::GetWin`): a QP stops sending with `window` bytes in
/// flight (the fabric's largest BDP), or with `VAR_WIN 1` with that share
/// of it its current rate is of the line (at least one byte).
pub struct BdpWindow {
    pub inner: Box<dyn CongestionControl>,
    pub window: u64,
    /// Scale the window by rate ÷ line rate (`VAR_WIN`).
    pub var_win: bool,
    pub line_bps: u64,
}

impl CongestionControl for BdpWindow {
    forward_to_inner!();
    fn on_ack_feedback(&mut self, now: Nanos, fb: &AckFeedback) {
        self.inner.on_ack_feedback(now, fb)
    }
    fn rate_bps(&self) -> Option<u64> {
        self.inner.rate_bps()
    }
    fn window_bytes(&self) -> Option<u64> {
        let line = self.line_bps.max(1);
        let w = if self.var_win {
            let rate = self.inner.rate_bps().unwrap_or(line);
            ((u128::from(self.window) * u128::from(rate) / u128::from(line)) as u64).max(1)
        } else {
            self.window
        };
        Some(self.inner.window_bytes().map_or(w, |i| i.min(w)))
    }
}

/// A fixed rate, handy for tests and for rate-limited QPs.
#[derive(Debug, Clone, Copy)]
pub struct FixedRate(pub u64);

impl CongestionControl for FixedRate {
    fn name(&self) -> &'static str {
        "fixed"
    }
    fn counts_sends(&self) -> bool {
        false
    }
    fn reads_acks(&self) -> bool {
        false
    }
    fn rate_bps(&self) -> Option<u64> {
        Some(self.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Which controllers re-time a pending pacing gap when their rate
    /// changes (ns-3 calls `ChangeRate` from HPCC's and HPCC-PINT's
    /// updates only): HPCC and HPCC-PINT with the line rate, also
    /// through a per-QP rate limit; not HPCC unpaced (`RATE_BOUND 0`),
    /// nor DCQCN, TIMELY or DCTCP; the controller keeps the answer.
    #[test]
    fn only_hpcc_and_pint_retime_gaps() {
        let line = 100_000_000_000;
        let hpcc = |paced: bool| {
            let mut cfg = HpccConfig::new(line, 10_000);
            cfg.opts.paced = paced;
            Box::new(Hpcc::new(cfg, line))
        };
        assert_eq!(hpcc(true).rescales_gap(), Some(line));
        assert_eq!(hpcc(false).rescales_gap(), None);
        let pint = HpccPint::new(
            HpccPintConfig {
                hpcc: HpccConfig::new(line, 10_000),
                codec: PintCodec::new(1.05).unwrap(),
                sample_threshold: 65_536,
                seed: 1,
            },
            line,
        );
        assert_eq!(pint.rescales_gap(), Some(line));
        let capped = RateLimit {
            inner: hpcc(true),
            cap_bps: line / 2,
        };
        assert_eq!(capped.rescales_gap(), Some(line));
        assert_eq!(
            Dcqcn::new(DcqcnConfig::default(), line).rescales_gap(),
            None
        );
        assert_eq!(
            Timely::new(TimelyConfig::default(), line).rescales_gap(),
            None
        );
        assert_eq!(
            Dctcp::new(DctcpConfig::hpcc_ns3(), line).rescales_gap(),
            None
        );
        assert_eq!(Controller::new(hpcc(true)).rescales_gap(), Some(line));
        let mut c = Controller::new(hpcc(true));
        c.take();
        assert_eq!(c.rescales_gap(), None, "the stand-in after take()");
    }

    /// What the RNIC reads through a [`Controller`] is what the
    /// controller answers, after every kind of callback: the window and
    /// rate HPCC cuts on congested feedback, and the tick and rate a
    /// DCQCN CNP and its timers move.
    #[test]
    fn kept_readings_follow_the_controller() {
        let same = |c: &Controller| {
            assert_eq!(c.window_bytes(), c.get().window_bytes());
            assert_eq!(c.rate_bps(), c.get().rate_bps());
            assert_eq!(c.next_tick(), c.get().next_tick());
        };
        let mut c = Controller::new(Box::new(Hpcc::new(
            HpccConfig::new(100_000_000_000, 10_000),
            100_000_000_000,
        )));
        let before = c.window_bytes();
        same(&c);
        for i in 0..20u64 {
            let fb = AckFeedback {
                snd_una: (i + 1) * 10_000,
                snd_nxt: (i + 1) * 10_000,
                send_point: (i + 1) * 10_000,
                ..AckFeedback::default()
            };
            c.on_send(i * 1_000, 1_062);
            c.on_ack(i * 1_000, &fb);
            same(&c);
            let hop = IntHop {
                ts: i * 1_000,
                tx_bytes: i * 12_500,
                qlen: 125_000,
                link_bps: 100_000_000_000,
            };
            c.on_int(i * 1_000, &[hop]);
            same(&c);
        }
        assert!(c.window_bytes() < before, "the window was cut");
        assert!(c.rate_bps().is_some(), "and paced");

        let mut d = Controller::new(Box::new(Dcqcn::new(
            DcqcnConfig::default(),
            100_000_000_000,
        )));
        same(&d);
        d.on_cnp(0);
        same(&d);
        assert!(d.next_tick().is_some(), "a CNP starts the timers");
        let mut cut = false;
        for t in 1..50u64 {
            d.on_send(t * 1_000, 1_062);
            same(&d);
            if let Some(at) = d.next_tick() {
                d.on_tick(at);
                same(&d);
            }
            cut |= d.rate_bps().is_some_and(|r| r < 100_000_000_000);
        }
        assert!(cut, "the rate was cut");
        let cc = d.take();
        assert_eq!(cc.name(), "dcqcn");
        same(&d);
        assert_eq!(d.rate_bps(), None);
    }

    /// DCQCN's sends count bytes towards its byte counter and move its
    /// rate only when the count reaches it: `on_send_moved` says so, and
    /// the rate the RNIC keeps follows the controller's either way.
    #[test]
    fn a_send_says_when_it_moved_the_rate() {
        let cfg = DcqcnConfig {
            byte_counter: 10_000,
            ..DcqcnConfig::default()
        };
        let mut raw = Dcqcn::new(cfg, 100_000_000_000);
        raw.on_cnp(0);
        raw.on_tick(raw.next_tick().expect("a CNP starts the timers"));
        let cut = raw.rate_bps().expect("the CNP cut the rate");
        // Below the counter: counted, nothing moved.
        for _ in 0..9 {
            assert!(!raw.on_send_moved(1, 1_000));
        }
        assert_eq!(raw.rate_bps(), Some(cut));
        // The tenth KB reaches it: a rate increase.
        assert!(raw.on_send_moved(1, 1_000));
        assert!(raw.rate_bps().is_none_or(|r| r > cut), "the rate rose");

        // Through the controller the kept rate follows every send.
        let mut d = Controller::new(Box::new(Dcqcn::new(cfg, 100_000_000_000)));
        d.on_cnp(0);
        let at = d.next_tick().expect("timers");
        d.on_tick(at);
        let cut = d.rate_bps().expect("cut");
        let (mut rises, mut last) = (0, Some(cut));
        for i in 0..25 {
            d.on_send(at + i, 1_000);
            assert_eq!(d.rate_bps(), d.get().rate_bps());
            assert_eq!(d.next_tick(), d.get().next_tick());
            if d.rate_bps() != last {
                // Each step of fast recovery halves the way up to the
                // target: the kept rate rises every time.
                assert!(d.rate_bps().is_none_or(|r| last.is_some_and(|l| r > l)));
                (rises, last) = (rises + 1, d.rate_bps());
            }
        }
        assert_eq!(rises, 2, "the 10th and 20th KB each moved the kept rate");
    }

    /// Only a controller whose `on_send` (or ACK callbacks) does nothing is
    /// spared the call.
    #[test]
    fn sends_are_skipped_only_where_they_do_nothing() {
        assert!(Dcqcn::new(DcqcnConfig::default(), 100_000_000_000).counts_sends());
        assert!(
            !Hpcc::new(HpccConfig::new(100_000_000_000, 10_000), 100_000_000_000).counts_sends()
        );
        // The delay- and ECN-window controllers read no sends either.
        assert!(!Timely::new(TimelyConfig::default(), 100_000_000_000).counts_sends());
        assert!(!Swift::new(SwiftConfig::new(100_000, 4096, 100.0)).counts_sends());
        assert!(!Dctcp::new(DctcpConfig::hpcc_ns3(), 100_000_000_000).counts_sends());
        let limited = RateLimit {
            inner: Box::new(Dcqcn::new(DcqcnConfig::default(), 100_000_000_000)),
            cap_bps: 1_000_000_000,
        };
        assert!(limited.counts_sends());
        assert!(!limited.reads_acks(), "DCQCN reads no ACKs");
        assert!(Hpcc::new(HpccConfig::new(100_000_000_000, 10_000), 100_000_000_000).reads_acks());
        // Only HPCC's readings stay put over an ACK (the test above
        // checks they are then still right); the others' are read again.
        assert!(
            !Hpcc::new(HpccConfig::new(100_000_000_000, 10_000), 100_000_000_000)
                .acks_move_readings()
        );
        assert!(Dcqcn::new(DcqcnConfig::default(), 100_000_000_000).acks_move_readings());
        assert!(
            Timely::new(TimelyConfig::default(), 100_000_000_000).acks_move_readings(),
            "a delay-based controller moves its rate on an ACK"
        );
    }

    /// ns-3's window over a rate: the whole BDP at line rate or without
    /// VAR_WIN, the rate's share of it with VAR_WIN, never under a byte,
    /// and never above the inner controller's own window.
    #[test]
    fn bdp_window_follows_the_rate_with_var_win() {
        let line = 100_000_000_000;
        let win = |inner: Box<dyn CongestionControl>, var_win| BdpWindow {
            inner,
            window: 52_000,
            var_win,
            line_bps: line,
        };
        assert_eq!(win(Box::new(NoCc), true).window_bytes(), Some(52_000));
        assert_eq!(
            win(Box::new(FixedRate(line / 4)), false).window_bytes(),
            Some(52_000)
        );
        let quarter = win(Box::new(FixedRate(line / 4)), true);
        assert_eq!(quarter.window_bytes(), Some(13_000));
        assert_eq!(
            quarter.rate_bps(),
            Some(line / 4),
            "the rate is the inner one's"
        );
        assert_eq!(win(Box::new(FixedRate(1)), true).window_bytes(), Some(1));
        let hpcc = Hpcc::new(HpccConfig::new(line, 1_000), line);
        let own = hpcc.window_bytes();
        assert_eq!(
            win(Box::new(hpcc), false).window_bytes(),
            own.map(|w| w.min(52_000))
        );
    }
}
