//! What a run that stopped with flows unfinished reports (issue 12).
//!
//! A simulation ends when every flow finished, the stop time passed or a
//! PFC deadlock was found. If instead the event queue runs dry with flows
//! left, something that should have woken a host never was: a wake-up lost
//! between the simulator and an RNIC, a QP left without a timer. That is a
//! bug, never a result, so the run returns [`Stall`] as an error naming the
//! first stalled flows with both ends' QP state, instead of a table where
//! those flows quietly read `unfinished`.

use crate::event::{PS_PER_US, Ps};
use roce_rnic::QpStatus;
use std::fmt;

/// How many stalled flows a [`Stall`] describes in full.
pub const STALL_DETAIL: usize = 4;

/// One flow left unfinished when nothing remained to simulate.
#[derive(Debug, Clone, PartialEq)]
pub struct StalledFlow {
    pub flow: u32,
    pub src: u32,
    pub dst: u32,
    pub size: u64,
    /// Payload bytes the receiver got.
    pub delivered: u64,
    /// The sender's QP and the receiver's (`None` once destroyed).
    pub sender: Option<QpStatus>,
    pub receiver: Option<QpStatus>,
    /// When the sender's host had a wake-up scheduled (ps), if it had one.
    pub host_timer: Option<Ps>,
}

/// The event queue emptied with flows unfinished.
#[derive(Debug, Clone, PartialEq)]
pub struct Stall {
    /// Simulated time of the last event.
    pub at: Ps,
    pub unfinished: usize,
    pub flows: usize,
    /// The first [`STALL_DETAIL`] stalled flows, by flow id.
    pub first: Vec<StalledFlow>,
}

impl fmt::Display for Stall {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "the run stalled: at {:.3} us nothing was left to simulate but {} of {} flows \
             were unfinished (no stop time reached, no PFC deadlock): nothing will wake \
             their QPs (a lost wake-up, or a QP awaiting an ACK with no retransmission \
             timer)",
            self.at as f64 / PS_PER_US as f64,
            self.unfinished,
            self.flows
        )?;
        for s in &self.first {
            write!(
                f,
                "\n  flow {} (host {} -> {}, {} B, {} B delivered; sender's host timer {}):",
                s.flow,
                s.src,
                s.dst,
                s.size,
                s.delivered,
                s.host_timer
                    .map_or_else(|| "none".to_string(), |t| format!("at {t} ps"))
            )?;
            match &s.sender {
                Some(q) => write!(f, "\n    sender   {q}")?,
                None => write!(f, "\n    sender   QP gone")?,
            }
            match &s.receiver {
                Some(q) => write!(f, "\n    receiver {q}")?,
                None => write!(f, "\n    receiver QP gone")?,
            }
        }
        if self.unfinished > self.first.len() {
            write!(f, "\n  ... and {} more", self.unfinished - self.first.len())?;
        }
        Ok(())
    }
}
