//! Shared receive queues (IBA 10.2.9.5): one pool of receive WQEs for many
//! QPs, with a low-watermark ("limit") event that re-arms on request.

use crate::mr::PdHandle;
use crate::types::RecvWr;
use std::collections::VecDeque;

/// Handle of a shared receive queue.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct SrqHandle(pub u32);

#[derive(Debug)]
pub struct Srq {
    pub pd: PdHandle,
    pub max_wr: u32,
    pub max_sge: u32,
    pub queue: VecDeque<RecvWr>,
    /// Armed limit: when the queue drops below it, an event fires and the
    /// limit disarms (0 = not armed), as `ibv_modify_srq` defines.
    pub limit: u32,
}
