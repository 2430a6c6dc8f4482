//! A read-only snapshot of one QP's transport state, for drivers that must
//! explain why a QP is not making progress (the simulator's stall report)
//! and for debug-build checks that every QP with work will be woken.
//!
//! Nothing here changes the QP: it is what `ibv_query_qp` would show plus
//! the RNIC's scheduling state (the deadlines it keeps and whether the QP
//! waits in the transmit-ready set).

use crate::qp::{Qp, QpState};
use crate::types::Nanos;
use std::fmt;

/// One QP as the RNIC sees it at a given moment.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QpStatus {
    pub qpn: u32,
    pub state: QpState,
    /// Requester: PSN the next new WQE starts at.
    pub next_psn: u32,
    /// Requester: oldest PSN not yet acknowledged.
    pub una: u32,
    /// Requester: PSN of the next packet to transmit (the go-back-N cursor).
    pub send_psn: u32,
    /// Responder: the expected PSN.
    pub epsn: u32,
    /// WQEs on the send queue (not yet retired).
    pub sq_wqes: usize,
    /// True when a packet remains to be transmitted (first sends or resends).
    pub unsent: bool,
    /// Payload bytes sent and not yet acknowledged.
    pub inflight_bytes: u64,
    /// The congestion controller's name, rate (`None`: line rate) and window.
    pub cc: &'static str,
    pub rate_bps: Option<u64>,
    pub window_bytes: Option<u64>,
    /// Earliest time the pacer lets the next packet out.
    pub next_send_at: Nanos,
    /// Pending timers: retransmission, RNR wait, the controller's next tick.
    pub rto_deadline: Option<Nanos>,
    pub rnr_until: Option<Nanos>,
    pub cc_tick: Option<Nanos>,
    /// The deadline the RNIC will report through `poll_timeout` for this QP.
    pub next_deadline: Option<Nanos>,
    /// Marked ready: the next `poll_transmit` visits it.
    pub ready: bool,
    /// Responses (ACKs, NAKs, read responses) or a CNP waiting to be sent.
    pub responses_queued: usize,
}

impl QpStatus {
    pub(crate) fn of(q: &Qp, ready: bool, now: Nanos) -> QpStatus {
        QpStatus {
            qpn: q.qpn,
            state: q.state,
            next_psn: q.next_psn.value(),
            una: q.una.value(),
            send_psn: q.cursor_psn().value(),
            epsn: q.epsn.value(),
            sq_wqes: q.sq.len(),
            unsent: q.cursor.0 < q.sq.len(),
            inflight_bytes: q.inflight_bytes,
            cc: q.cc.name(),
            rate_bps: q.cc.rate_bps(),
            window_bytes: q.cc.window_bytes(),
            next_send_at: q.next_send_at,
            rto_deadline: q.rto_deadline,
            rnr_until: q.rnr_until,
            cc_tick: q.cc.next_tick(),
            next_deadline: q.next_deadline(ready, now),
            ready,
            responses_queued: q.resp_q.len() + usize::from(q.cnp_due.is_some()),
        }
    }

    /// True when the QP has something left to do: packets to send,
    /// responses to return, or packets awaiting acknowledgement.
    pub fn has_work(&self) -> bool {
        let sends = matches!(self.state, QpState::Rts | QpState::Sqd)
            && (self.unsent || self.una != self.next_psn);
        let responds = matches!(self.state, QpState::Rtr | QpState::Rts | QpState::Sqd)
            && self.responses_queued > 0;
        sends || responds
    }

    /// True when something will make the QP run again without outside
    /// input: it is in the transmit-ready set or has a deadline. (A QP
    /// waiting only for ACKs with no retransmission timer relies on the
    /// network instead; [`has_work`](Self::has_work) counts it, so the
    /// RNIC's own check skips QPs without a timeout.)
    pub fn is_scheduled(&self) -> bool {
        self.ready || self.next_deadline.is_some()
    }
}

fn opt(t: Option<Nanos>) -> String {
    t.map_or_else(|| "-".to_string(), |t| format!("{t} ns"))
}

impl fmt::Display for QpStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let rate = self.rate_bps.map_or_else(
            || "line".to_string(),
            |r| format!("{:.3} Gb/s", r as f64 / 1e9),
        );
        let window = self
            .window_bytes
            .map_or_else(|| "none".to_string(), |w| format!("{w} B"));
        write!(
            f,
            "QP {:#x} {:?}: next_psn {} una {} send_psn {} epsn {}, {} WQE(s){}, {} B in flight, \
             cc {} rate {} window {}, next send {} ns, timers: rto {} rnr {} cc {}, \
             next deadline {}, {}",
            self.qpn,
            self.state,
            self.next_psn,
            self.una,
            self.send_psn,
            self.epsn,
            self.sq_wqes,
            if self.unsent {
                " with packets unsent"
            } else {
                ""
            },
            self.inflight_bytes,
            self.cc,
            rate,
            window,
            self.next_send_at,
            opt(self.rto_deadline),
            opt(self.rnr_until),
            opt(self.cc_tick),
            opt(self.next_deadline),
            if self.ready { "ready" } else { "not ready" },
        )
    }
}
