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
