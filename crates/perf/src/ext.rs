//! roce's extension to perftest's exchange: JSON lines on the same TCP
//! connection, spoken only when both sides announced roce in the version
//! string (see [`crate::perftest::ROCE_VERSION`]), so a plain perftest
//! peer never sees them. They come at two places: right after perftest's
//! MTU step (what the test is, so the server sizes itself as the client
//! asks, and the UDP port each engine really uses, which perftest's keys
//! cannot say), and between the sync after RTR and perftest's closing
//! steps (each size's start, end and check, with the server's counters and
//! stage profile).

use crate::Test;
use roce_verbs::{StageProfile, Stats};
use serde::{Deserialize, Serialize};

fn one() -> u32 {
    1
}

/// A [`roce_verbs::Recovery`] on the wire as its command-line name
/// (`gbn`, `irn`), so the JSON reads as the flag does.
mod recovery_name {
    use roce_verbs::Recovery;
    use serde::{Deserialize, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(r: &Recovery, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(r.name())
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Recovery, D::Error> {
        let name = String::deserialize(d)?;
        name.parse().map_err(serde::de::Error::custom)
    }
}

/// The extension's messages, one JSON object per line.
#[derive(Debug, Serialize, Deserialize)]
pub enum Msg {
    /// Client, after perftest's MTU step: the test it runs, so the server
    /// sizes its buffer and QPs as the client asks.
    Hello {
        test: Test,
        sizes: Vec<usize>,
        /// The client's path MTU in bytes (a server without `-m` takes it;
        /// one with a different `-m` refuses).
        mtu: u32,
        tx_depth: u32,
        verify: bool,
        qps: u32,
        /// The UDP port of the client's engine (perftest's keys assume 4791).
        udp_port: u16,
        /// perftest's `-c` (both sides must agree; absent from a client
        /// that predates UD: RC).
        #[serde(default)]
        connection: crate::Connection,
        /// `--threads`: as many connections come from this client, and a
        /// server must serve as many at once (absent: 1).
        #[serde(default = "one")]
        threads: u32,
        /// `--use_srq` (absent: off); both sides must agree, since the
        /// receiving side's SRQ is the server's for the bandwidth tests.
        #[serde(default)]
        use_srq: bool,
        /// `--recovery` (absent: go-back-N, all a client that predates it
        /// spoke); both sides must agree, since an IRN requester sends
        /// past a gap that a go-back-N responder drops and NAKs.
        #[serde(default, with = "recovery_name")]
        recovery: roce_verbs::Recovery,
    },
    /// Server: accepted; the UDP port of its engine.
    Welcome {
        udp_port: u16,
    },
    Refuse {
        why: String,
    },
    /// Client, after the sync after RTR: run this size.
    Start {
        size: usize,
        iters: u64,
    },
    /// Server: receives posted, ready.
    Ready,
    /// Client: the size ran, `count` operations completed.
    Done {
        size: usize,
        count: u64,
    },
    /// Client: no more sizes; perftest's closing steps follow.
    Finish,
    /// Server: its check of the size, counters and stage profile.
    Check {
        verified: Option<bool>,
        detail: String,
        /// Boxed: the largest variant by far.
        counters: Box<Stats>,
        /// Where the server's engine spent the size's run (none from a
        /// server that does not profile or predates profiling).
        #[serde(default)]
        profile: Option<Box<StageProfile>>,
        /// SEND tests: how many SENDs arrived (UD may lose some).
        #[serde(default)]
        received: Option<u64>,
    },
}
