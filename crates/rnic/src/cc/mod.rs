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
pub(crate) mod sample;
pub mod swift;
pub mod timely;

pub use dcqcn::{Dcqcn, DcqcnConfig};
pub use dctcp::{Dctcp, DctcpConfig, DctcpVariant};
pub use hpcc::{Hpcc, HpccConfig};
pub use params::{
    CcChoice, CcConfig, CcParamError, CcParams, CcPlan, DctcpSettings, HpccSettings, SwiftSettings,
};
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

pub trait CongestionControl: Send {
    fn name(&self) -> &'static str;
    fn on_send(&mut self, _now: Nanos, _bytes: usize) {}
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
    /// Multiplicative cuts of the rate or window so far (what `roce perf`
    /// reports beside the CNPs that provoked them).
    fn rate_cuts(&self) -> u64 {
        0
    }
}

/// A QP's controller with its next tick kept beside it. The RNIC asks
/// for a QP's next deadline on every re-file, several times per packet,
/// and most QPs' controllers never tick (a receiver's never sends): kept
/// here, the answer costs neither the controller's cache lines nor a
/// virtual call. [`CongestionControl::next_tick`] reads only the
/// controller's state, which only its `&mut` callbacks change, so it is
/// read again after each of those and nowhere else.
pub(crate) struct Controller {
    cc: Box<dyn CongestionControl>,
    tick: Option<Nanos>,
}

impl Controller {
    pub fn new(cc: Box<dyn CongestionControl>) -> Controller {
        let tick = cc.next_tick();
        Controller { cc, tick }
    }

    /// The controller, for what it reports.
    pub fn get(&self) -> &dyn CongestionControl {
        &*self.cc
    }

    /// Hands the controller back, leaving none in its place.
    pub fn take(&mut self) -> Box<dyn CongestionControl> {
        self.tick = None;
        std::mem::replace(&mut self.cc, Box::new(NoCc))
    }

    /// Runs a callback, then re-reads the next tick.
    fn update<R>(&mut self, f: impl FnOnce(&mut dyn CongestionControl) -> R) -> R {
        let r = f(&mut *self.cc);
        self.tick = self.cc.next_tick();
        r
    }

    pub fn name(&self) -> &'static str {
        self.cc.name()
    }
    pub fn on_send(&mut self, now: Nanos, bytes: usize) {
        self.update(|c| c.on_send(now, bytes))
    }
    /// An ACK that moved the acknowledged point: `on_ack`, then
    /// `on_ack_feedback`, as the trait documents.
    pub fn on_ack(&mut self, now: Nanos, fb: &AckFeedback) {
        self.update(|c| {
            c.on_ack(now, fb.acked_bytes, fb.rtt.map(|s| s.rtt));
            c.on_ack_feedback(now, fb)
        })
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
    pub fn on_tick(&mut self, now: Nanos) {
        self.update(|c| c.on_tick(now))
    }
    /// [`CongestionControl::next_tick`], as of the last callback.
    pub fn next_tick(&self) -> Option<Nanos> {
        self.tick
    }
    pub fn rate_bps(&self) -> Option<u64> {
        self.cc.rate_bps()
    }
    pub fn window_bytes(&self) -> Option<u64> {
        self.cc.window_bytes()
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
}

/// A per-QP rate limit over another controller (`ibv_modify_qp_rate_limit`,
/// the NIC's per-QP shaper): the QP never goes faster than `cap_bps`,
/// whatever its congestion control allows.
pub struct RateLimit {
    pub inner: Box<dyn CongestionControl>,
    pub cap_bps: u64,
}

impl CongestionControl for RateLimit {
    fn name(&self) -> &'static str {
        self.inner.name()
    }
    fn on_send(&mut self, now: Nanos, bytes: usize) {
        self.inner.on_send(now, bytes)
    }
    fn on_ack(&mut self, now: Nanos, acked_bytes: u64, rtt: Option<Nanos>) {
        self.inner.on_ack(now, acked_bytes, rtt)
    }
    fn on_ack_feedback(&mut self, now: Nanos, fb: &AckFeedback) {
        self.inner.on_ack_feedback(now, fb)
    }
    fn on_cnp(&mut self, now: Nanos) {
        self.inner.on_cnp(now)
    }
    fn on_nak(&mut self, now: Nanos) {
        self.inner.on_nak(now)
    }
    fn on_timeout(&mut self, now: Nanos) {
        self.inner.on_timeout(now)
    }
    fn on_rewind(&mut self, now: Nanos, send_point: u64) {
        self.inner.on_rewind(now, send_point)
    }
    fn on_int(&mut self, now: Nanos, hops: &[IntHop]) {
        self.inner.on_int(now, hops)
    }
    fn on_tick(&mut self, now: Nanos) {
        self.inner.on_tick(now)
    }
    fn next_tick(&self) -> Option<Nanos> {
        self.inner.next_tick()
    }
    fn rate_bps(&self) -> Option<u64> {
        let cap = self.cap_bps.max(1);
        Some(self.inner.rate_bps().map_or(cap, |r| r.min(cap)))
    }
    fn window_bytes(&self) -> Option<u64> {
        self.inner.window_bytes()
    }
    fn rate_cuts(&self) -> u64 {
        self.inner.rate_cuts()
    }
}

/// A fixed rate, handy for tests and for rate-limited QPs.
#[derive(Debug, Clone, Copy)]
pub struct FixedRate(pub u64);

impl CongestionControl for FixedRate {
    fn name(&self) -> &'static str {
        "fixed"
    }
    fn rate_bps(&self) -> Option<u64> {
        Some(self.0)
    }
}
