//! Errors the verbs layer returns synchronously (the `errno` of libibverbs).
//! Transport failures are not errors here: they arrive as completions with a
//! [`crate::WcStatus`], exactly as on real hardware.

use crate::qp::QpState;
use thiserror::Error;

#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum VerbsError {
    #[error("no {kind} with handle {id}")]
    UnknownObject { kind: &'static str, id: u32 },
    #[error("{kind} {id} is still in use by {users} object(s)")]
    InUse {
        kind: &'static str,
        id: u32,
        users: usize,
    },
    #[error("invalid QP state transition {from:?} -> {to:?}")]
    InvalidTransition { from: QpState, to: QpState },
    #[error("transition {from:?} -> {to:?} requires attribute `{attr}`")]
    MissingAttribute {
        from: QpState,
        to: QpState,
        attr: &'static str,
    },
    #[error("attribute `{attr}` is not allowed in transition {from:?} -> {to:?}")]
    UnexpectedAttribute {
        from: QpState,
        to: QpState,
        attr: &'static str,
    },
    #[error("invalid value for `{attr}`: {why}")]
    InvalidAttribute { attr: &'static str, why: String },
    #[error("cannot post to a QP in state {0:?}")]
    WrongState(QpState),
    #[error("{queue} is full ({depth} entries)")]
    QueueFull { queue: &'static str, depth: u32 },
    #[error("{count} SGEs exceed the limit of {max}")]
    TooManySge { count: usize, max: u32 },
    #[error("inline data of {len} bytes exceeds max_inline_data {max}")]
    InlineTooLarge { len: usize, max: u32 },
    #[error("operation {0} is not supported on this QP type")]
    UnsupportedOpcode(&'static str),
    #[error("memory range 0x{addr:x}+{len} is not allocated memory")]
    BadAddress { addr: u64, len: u64 },
    #[error("{0} of the device's resources are exhausted")]
    OutOfResources(&'static str),
    #[error("the PDs of {0} do not match")]
    PdMismatch(&'static str),
    #[error("UD work request needs an address handle (dest, remote QPN, Q_Key)")]
    MissingAddressHandle,
}

pub type Result<T> = core::result::Result<T, VerbsError>;
