//! IRN loss recovery (Mittal et al., "Revisiting Network Support for RDMA",
//! SIGCOMM 2018) as a per-QP alternative to IBA go-back-N.
//!
//! What changes against go-back-N (paper §3):
//! - the responder keeps out-of-order request packets instead of dropping
//!   them, and answers each one with a NAK that carries the cumulative
//!   acknowledgement (BTH PSN = the first missing PSN) and the PSN that
//!   triggered it (§3.1, the SACK-style NACK);
//! - the requester remembers which PSNs the responder holds and retransmits
//!   only the ones missing below the highest it has heard of, once per
//!   recovery episode; the episode ends when the cumulative ACK passes what
//!   had been sent when it began (§3.1);
//! - two retransmission timeouts: RTO_low when at most N packets are in
//!   flight (a tail loss no NAK will reveal), RTO_high otherwise (§3.1);
//! - BDP-FC: at most a bandwidth-delay product of packets in flight (§3.2),
//!   which also bounds what the responder must hold.
//!
//! The paper's NACK needs one field RoCE lacks (§4.2 lists the extra
//! header state). Both ends of an IRN QP agree on the mode out of band, so
//! the triggering PSN rides in the 24-bit MSN field of the PSN-sequence-error
//! NAK's AETH, which go-back-N requesters never read and a PSN fits exactly.
//! READ responses follow the same scheme with the roles swapped: the
//! requester places each response at its offset (known from the PSN) and
//! re-requests only the missing response ranges with a shortened READ.

use crate::types::Nanos;
use roce_wire::Psn;

/// How an RC QP recovers from lost packets.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum Recovery {
    /// IBA go-back-N: the responder drops out-of-order packets and NAKs the
    /// first gap; the requester resends everything from there.
    #[default]
    GoBackN,
    /// IRN: selective retransmission and BDP-based flow control.
    Irn,
}

impl Recovery {
    /// The names scenarios and command lines use.
    pub fn name(self) -> &'static str {
        match self {
            Recovery::GoBackN => "gbn",
            Recovery::Irn => "irn",
        }
    }
}

impl std::str::FromStr for Recovery {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "gbn" | "go-back-n" => Ok(Recovery::GoBackN),
            "irn" => Ok(Recovery::Irn),
            other => Err(format!(
                "unknown loss recovery `{other}` (expected gbn or irn)"
            )),
        }
    }
}

/// IRN's knobs (paper §3.1–3.2; defaults are its 40 Gb/s settings).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct IrnConfig {
    /// BDP-FC: most packets (PSNs) a requester keeps in flight.
    pub bdp_pkts: u32,
    /// Timeout while at most `rto_low_pkts` packets are in flight.
    pub rto_low_ns: Nanos,
    /// Timeout otherwise.
    pub rto_high_ns: Nanos,
    /// N of the paper: the in-flight count that selects RTO_low.
    pub rto_low_pkts: u32,
}

impl Default for IrnConfig {
    fn default() -> Self {
        IrnConfig {
            bdp_pkts: 128,
            rto_low_ns: 100_000,
            rto_high_ns: 320_000,
            rto_low_pkts: 3,
        }
    }
}

/// One requester recovery episode.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Episode {
    /// Next PSN to consider for retransmission.
    pub next: Psn,
    /// Retransmit PSNs before this one (the highest the responder reported holding).
    pub end: Psn,
    /// The episode ends once everything up to this PSN is acknowledged.
    pub until: Psn,
    /// After resending one PSN found lost again, carry on from here, so the
    /// resends already under way behind it are not sent twice.
    pub resume: Option<Psn>,
}

/// A request packet the responder holds until the gap before it fills.
#[derive(Debug, Clone)]
pub(crate) struct Held {
    pub src: std::net::SocketAddr,
    pub repr: roce_wire::TransportRepr,
    pub data: HeldData,
}

#[derive(Debug, Clone)]
pub(crate) enum HeldData {
    Bytes(Vec<u8>),
    Virtual(u32),
    /// Already placed at its offset in the message (this many bytes): only
    /// the header waits, for the in-order bookkeeping (MSN, completions, ACKs).
    Placed(u32),
}

impl Held {
    pub fn payload(&self) -> crate::memory::PayloadRef<'_> {
        match &self.data {
            HeldData::Bytes(b) => crate::memory::PayloadRef::Bytes(b),
            HeldData::Virtual(n) | HeldData::Placed(n) => crate::memory::PayloadRef::Virtual(*n),
        }
    }
}
