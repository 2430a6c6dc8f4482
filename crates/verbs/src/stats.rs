//! Engine counters: what crossed the socket, what was refused and why, and
//! the RNIC's transport events (retransmissions, NAKs, RNR, CNPs).

use crate::ecn::RedStats;
use crate::fault::FaultStats;
use roce_rnic::Counters;
use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct Stats {
    /// Datagrams handed to the socket, and their UDP payload bytes.
    pub tx_packets: u64,
    pub tx_bytes: u64,
    /// Datagrams read from the socket, and their UDP payload bytes.
    pub rx_packets: u64,
    pub rx_bytes: u64,
    /// Packets the RNIC sent again (go-back-N or timeout).
    pub retransmissions: u64,
    pub timeouts: u64,
    pub naks_tx: u64,
    pub naks_rx: u64,
    pub rnr_naks_tx: u64,
    pub rnr_naks_rx: u64,
    pub cnps_tx: u64,
    pub cnps_rx: u64,
    /// Datagrams that arrived marked Congestion Experienced.
    pub ce_rx: u64,
    /// Dropped: the ICRC did not match (corruption, or a peer whose IP header we cannot reconstruct).
    pub icrc_errors: u64,
    /// Dropped: not a parseable RoCEv2 transport packet (garbage, truncated, bad P_Key or transport).
    pub malformed: u64,
    /// Dropped by the RNIC: no such QP.
    pub unknown_qp: u64,
    /// Dropped by the RNIC: the QP's state or source address refuses it.
    pub dropped_other: u64,
    /// Of `dropped_other`: packets (CNPs, ACKs, NAKs, requests) for a
    /// connected QP from a socket other than its peer's.
    #[serde(default)]
    pub bad_source: u64,
    pub duplicates: u64,
    pub out_of_sequence: u64,
    /// Datagrams the socket refused to send (see `Context::last_send_error`).
    pub send_errors: u64,
    /// Packets the RNIC produced that could not be encoded (a bug if non-zero).
    pub build_errors: u64,
    pub pcap_errors: u64,
    /// UDP GSO sends (each carried several datagrams, counted in `tx_packets`).
    #[serde(default)]
    pub tx_gso_sends: u64,
    /// UDP GRO receives that held several datagrams (counted in `rx_packets`).
    #[serde(default)]
    pub rx_gro_buffers: u64,
    /// Receives whose control messages did not fit (TOS/GRO size may be lost; a bug if non-zero).
    #[serde(default)]
    pub cmsg_truncated: u64,
    pub faults: FaultStats,
    /// The queue-driven CE marker's readings and marks (zero when off).
    #[serde(default)]
    pub red: RedStats,
}

impl Stats {
    pub(crate) fn merge_rnic(&mut self, c: &Counters) {
        self.retransmissions = c.retransmits;
        self.timeouts = c.timeouts;
        self.naks_tx = c.naks_tx;
        self.naks_rx = c.naks_rx;
        self.rnr_naks_tx = c.rnr_naks_tx;
        self.rnr_naks_rx = c.rnr_naks_rx;
        self.cnps_tx = c.cnps_tx;
        self.cnps_rx = c.cnps_rx;
        self.malformed += c.rx_malformed;
        self.unknown_qp = c.rx_unknown_qp;
        self.dropped_other = c.rx_dropped_state + c.rx_bad_source;
        self.bad_source = c.rx_bad_source;
        self.duplicates = c.duplicates;
        self.out_of_sequence = c.out_of_sequence;
    }
}
