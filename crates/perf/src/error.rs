//! The one error type of the perf layer: what a run could not do, said
//! in one sentence, typed by whose fault it is.

use crate::perftest::PerftestError;
use crate::wire::WireError;

#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The options do not describe a test (unknown test, bad MTU, a GID
    /// index the device does not have, ...).
    #[error("{0}")]
    Usage(String),
    /// The TCP exchange failed or the peer sent what perftest's exchange
    /// does not allow.
    #[error(transparent)]
    Wire(#[from] WireError),
    #[error(transparent)]
    Perftest(#[from] PerftestError),
    /// A plain perftest peer, and something only roce perf on both sides does.
    #[error("{0}")]
    Unsupported(String),
    /// The roce peer refused the test or broke the extension's order.
    #[error("{0}")]
    Peer(String),
    /// The verbs layer refused a resource or an operation.
    #[error(transparent)]
    Verbs(#[from] roce_verbs::Error),
    /// The run itself: a peer that stopped answering, a failed completion,
    /// data that differs.
    #[error("{0}")]
    Run(String),
    /// A socket, thread or file of this side.
    #[error("{what}: {source}")]
    Io {
        what: String,
        source: std::io::Error,
    },
}

impl From<std::fmt::Error> for Error {
    fn from(_: std::fmt::Error) -> Error {
        Error::Run("formatting the report failed".into())
    }
}

impl From<serde_json::Error> for Error {
    fn from(e: serde_json::Error) -> Error {
        Error::Run(format!("the JSON report: {e}"))
    }
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

/// `return Err(Error::$kind(format!(...)))`.
macro_rules! fail {
    ($kind:ident, $($fmt:tt)*) => {
        return Err($crate::Error::$kind(format!($($fmt)*)))
    };
}
pub(crate) use fail;
