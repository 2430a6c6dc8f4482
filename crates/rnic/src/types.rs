//! Verbs vocabulary: access flags, MTU, work requests, completions.
//! Names follow libibverbs (`ibv_access_flags`, `ibv_wc_status`, …) so that
//! a libibverbs user recognises them.

use std::fmt;
use std::net::SocketAddr;

/// Time as the RNIC sees it: nanoseconds since an arbitrary origin, supplied
/// by whoever drives the state machine (a clock, or the simulator).
pub type Nanos = u64;

/// Memory region / QP access rights (`ibv_access_flags`).
#[derive(Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct Access(u32);

impl Access {
    pub const NONE: Access = Access(0);
    pub const LOCAL_WRITE: Access = Access(1);
    pub const REMOTE_WRITE: Access = Access(1 << 1);
    pub const REMOTE_READ: Access = Access(1 << 2);
    pub const REMOTE_ATOMIC: Access = Access(1 << 3);
    pub const ALL: Access = Access(0xf);

    pub const fn bits(self) -> u32 {
        self.0
    }
    pub const fn from_bits(b: u32) -> Access {
        Access(b & 0xf)
    }
    pub const fn contains(self, o: Access) -> bool {
        self.0 & o.0 == o.0
    }
}

impl std::ops::BitOr for Access {
    type Output = Access;
    fn bitor(self, o: Access) -> Access {
        Access(self.0 | o.0)
    }
}

impl fmt::Debug for Access {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let names = [
            (Access::LOCAL_WRITE, "LOCAL_WRITE"),
            (Access::REMOTE_WRITE, "REMOTE_WRITE"),
            (Access::REMOTE_READ, "REMOTE_READ"),
            (Access::REMOTE_ATOMIC, "REMOTE_ATOMIC"),
        ];
        let set: Vec<&str> = names
            .iter()
            .filter(|(a, _)| self.contains(*a))
            .map(|(_, n)| *n)
            .collect();
        write!(f, "Access({})", set.join("|"))
    }
}

/// Path MTU (`ibv_mtu`): the InfiniBand payload size per packet.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Mtu {
    Mtu256,
    Mtu512,
    Mtu1024,
    Mtu2048,
    Mtu4096,
}

impl Mtu {
    pub const fn bytes(self) -> u32 {
        match self {
            Mtu::Mtu256 => 256,
            Mtu::Mtu512 => 512,
            Mtu::Mtu1024 => 1024,
            Mtu::Mtu2048 => 2048,
            Mtu::Mtu4096 => 4096,
        }
    }
    /// The MTU for a byte count, if it is one of the five IBA values.
    pub const fn from_bytes(b: u32) -> Option<Mtu> {
        match b {
            256 => Some(Mtu::Mtu256),
            512 => Some(Mtu::Mtu512),
            1024 => Some(Mtu::Mtu1024),
            2048 => Some(Mtu::Mtu2048),
            4096 => Some(Mtu::Mtu4096),
            _ => None,
        }
    }
    /// The largest path MTU whose packets fit an Ethernet link of
    /// `link_mtu` bytes (the IP MTU of the interface), as a RoCE port's
    /// active MTU is derived from its netdev's (Linux rxe does the same):
    /// a full payload plus IPv4, UDP, BTH, the largest extension headers
    /// that travel with a payload (RETH + ImmDt), pad and ICRC must fit.
    /// 1500 gives 1024; 9000 and loopback's 65536 give 4096; below 256 +
    /// headers, 256 (the smallest there is).
    pub const fn for_link(link_mtu: u32) -> Mtu {
        const HEADROOM: u32 = 20 + 8 + 12 + 16 + 4 + 3 + 4;
        let room = link_mtu.saturating_sub(HEADROOM);
        if room >= 4096 {
            Mtu::Mtu4096
        } else if room >= 2048 {
            Mtu::Mtu2048
        } else if room >= 1024 {
            Mtu::Mtu1024
        } else if room >= 512 {
            Mtu::Mtu512
        } else {
            Mtu::Mtu256
        }
    }
}

/// QP transport service type.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum QpType {
    /// Reliable connected.
    Rc,
    /// Unreliable datagram.
    Ud,
}

/// A scatter/gather element (`ibv_sge`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Sge {
    pub addr: u64,
    pub length: u32,
    pub lkey: u32,
}

/// The pieces of bytes `[off, off + len)` of the message an SGE list
/// describes, in order: `(sge, address, bytes)`. Gathering a packet,
/// scattering a READ response and scattering a RECV all walk a list this
/// way; pieces stop at the list's end if it is shorter.
pub(crate) fn sge_pieces(
    sg_list: &[Sge],
    off: u64,
    len: u64,
) -> impl Iterator<Item = (&Sge, u64, u64)> + '_ {
    let (mut skip, mut want) = (off, len);
    sg_list.iter().filter_map(move |s| {
        let l = u64::from(s.length);
        if want == 0 {
            return None;
        }
        if skip >= l {
            skip -= l;
            return None;
        }
        let n = (l - skip).min(want);
        let addr = s.addr + skip;
        skip = 0;
        want -= n;
        Some((s, addr, n))
    })
}

/// Send work request opcodes (`ibv_wr_opcode`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum WrOpcode {
    Send,
    SendWithImm(u32),
    /// SEND that invalidates the given remote key at the responder.
    SendWithInv(u32),
    RdmaWrite {
        remote_addr: u64,
        rkey: u32,
    },
    RdmaWriteWithImm {
        remote_addr: u64,
        rkey: u32,
        imm: u32,
    },
    RdmaRead {
        remote_addr: u64,
        rkey: u32,
    },
    AtomicCmpAndSwp {
        remote_addr: u64,
        rkey: u32,
        compare: u64,
        swap: u64,
    },
    AtomicFetchAndAdd {
        remote_addr: u64,
        rkey: u32,
        add: u64,
    },
}

impl WrOpcode {
    pub const fn name(&self) -> &'static str {
        match self {
            WrOpcode::Send => "SEND",
            WrOpcode::SendWithImm(_) => "SEND_WITH_IMM",
            WrOpcode::SendWithInv(_) => "SEND_WITH_INV",
            WrOpcode::RdmaWrite { .. } => "RDMA_WRITE",
            WrOpcode::RdmaWriteWithImm { .. } => "RDMA_WRITE_WITH_IMM",
            WrOpcode::RdmaRead { .. } => "RDMA_READ",
            WrOpcode::AtomicCmpAndSwp { .. } => "ATOMIC_CMP_AND_SWP",
            WrOpcode::AtomicFetchAndAdd { .. } => "ATOMIC_FETCH_AND_ADD",
        }
    }
    pub const fn is_read_or_atomic(&self) -> bool {
        matches!(
            self,
            WrOpcode::RdmaRead { .. }
                | WrOpcode::AtomicCmpAndSwp { .. }
                | WrOpcode::AtomicFetchAndAdd { .. }
        )
    }
    pub const fn is_atomic(&self) -> bool {
        matches!(
            self,
            WrOpcode::AtomicCmpAndSwp { .. } | WrOpcode::AtomicFetchAndAdd { .. }
        )
    }
    pub const fn is_send(&self) -> bool {
        matches!(
            self,
            WrOpcode::Send | WrOpcode::SendWithImm(_) | WrOpcode::SendWithInv(_)
        )
    }
    /// The completion opcode a requester reports for this work request.
    pub const fn wc_opcode(&self) -> WcOpcode {
        match self {
            WrOpcode::Send | WrOpcode::SendWithImm(_) | WrOpcode::SendWithInv(_) => WcOpcode::Send,
            WrOpcode::RdmaWrite { .. } | WrOpcode::RdmaWriteWithImm { .. } => WcOpcode::RdmaWrite,
            WrOpcode::RdmaRead { .. } => WcOpcode::RdmaRead,
            WrOpcode::AtomicCmpAndSwp { .. } => WcOpcode::CompSwap,
            WrOpcode::AtomicFetchAndAdd { .. } => WcOpcode::FetchAdd,
        }
    }
}

/// Send flags (`ibv_send_flags`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct SendFlags {
    /// Generate a completion even when the QP is not `sq_sig_all`.
    pub signaled: bool,
    /// Wait for all earlier READ/ATOMIC work requests to complete first.
    pub fence: bool,
    /// Set the solicited-event bit on the last packet.
    pub solicited: bool,
    /// Copy the data at post time; the SGEs' lkeys are not checked.
    pub inline: bool,
}

/// Where a UD send goes (the address handle plus remote QPN and Q_Key).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct UdDest {
    pub addr: SocketAddr,
    pub remote_qpn: u32,
    pub remote_qkey: u32,
}

/// A send work request (`ibv_send_wr`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SendWr {
    pub wr_id: u64,
    pub opcode: WrOpcode,
    pub sg_list: Vec<Sge>,
    pub flags: SendFlags,
    /// For UD QPs only.
    pub ud: Option<UdDest>,
}

impl SendWr {
    /// A signaled work request.
    pub fn new(wr_id: u64, opcode: WrOpcode, sg_list: Vec<Sge>) -> Self {
        SendWr {
            wr_id,
            opcode,
            sg_list,
            flags: SendFlags {
                signaled: true,
                ..Default::default()
            },
            ud: None,
        }
    }
    pub fn unsignaled(mut self) -> Self {
        self.flags.signaled = false;
        self
    }
    pub fn inline(mut self) -> Self {
        self.flags.inline = true;
        self
    }
    pub fn fence(mut self) -> Self {
        self.flags.fence = true;
        self
    }
    pub fn solicited(mut self) -> Self {
        self.flags.solicited = true;
        self
    }
    pub fn to(mut self, ud: UdDest) -> Self {
        self.ud = Some(ud);
        self
    }
}

/// A receive work request (`ibv_recv_wr`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RecvWr {
    pub wr_id: u64,
    pub sg_list: Vec<Sge>,
}

/// Completion status (`ibv_wc_status`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum WcStatus {
    Success,
    LocLenErr,
    LocQpOpErr,
    LocProtErr,
    WrFlushErr,
    BadRespErr,
    LocAccessErr,
    RemInvReqErr,
    RemAccessErr,
    RemOpErr,
    RetryExcErr,
    RnrRetryExcErr,
    RemAbortErr,
    GeneralErr,
}

impl WcStatus {
    /// The libibverbs spelling, e.g. `IBV_WC_REM_ACCESS_ERR`.
    pub const fn name(self) -> &'static str {
        match self {
            WcStatus::Success => "IBV_WC_SUCCESS",
            WcStatus::LocLenErr => "IBV_WC_LOC_LEN_ERR",
            WcStatus::LocQpOpErr => "IBV_WC_LOC_QP_OP_ERR",
            WcStatus::LocProtErr => "IBV_WC_LOC_PROT_ERR",
            WcStatus::WrFlushErr => "IBV_WC_WR_FLUSH_ERR",
            WcStatus::BadRespErr => "IBV_WC_BAD_RESP_ERR",
            WcStatus::LocAccessErr => "IBV_WC_LOC_ACCESS_ERR",
            WcStatus::RemInvReqErr => "IBV_WC_REM_INV_REQ_ERR",
            WcStatus::RemAccessErr => "IBV_WC_REM_ACCESS_ERR",
            WcStatus::RemOpErr => "IBV_WC_REM_OP_ERR",
            WcStatus::RetryExcErr => "IBV_WC_RETRY_EXC_ERR",
            WcStatus::RnrRetryExcErr => "IBV_WC_RNR_RETRY_EXC_ERR",
            WcStatus::RemAbortErr => "IBV_WC_REM_ABORT_ERR",
            WcStatus::GeneralErr => "IBV_WC_GENERAL_ERR",
        }
    }
}

/// Completion opcode (`ibv_wc_opcode`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum WcOpcode {
    Send,
    RdmaWrite,
    RdmaRead,
    CompSwap,
    FetchAdd,
    Recv,
    RecvRdmaWithImm,
}

/// `ibv_wc_flags`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct WcFlags {
    /// The first 40 bytes of the receive buffer hold a GRH (UD).
    pub grh: bool,
    pub with_imm: bool,
    pub with_inv: bool,
}

/// A completion queue entry (`ibv_wc`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Wc {
    pub wr_id: u64,
    pub status: WcStatus,
    pub opcode: WcOpcode,
    pub byte_len: u32,
    /// Immediate data (host order) when `wc_flags.with_imm`, the invalidated
    /// rkey when `wc_flags.with_inv`.
    pub imm_data: u32,
    pub qp_num: u32,
    pub src_qp: u32,
    pub wc_flags: WcFlags,
    /// Where a received message came from (UD replies need it).
    pub src: Option<SocketAddr>,
}

impl Wc {
    /// The completion of a work request flushed from a QP in ERR.
    pub fn flushed(wr_id: u64, opcode: WcOpcode, qp_num: u32) -> Wc {
        Wc {
            wr_id,
            status: WcStatus::WrFlushErr,
            opcode,
            byte_len: 0,
            imm_data: 0,
            qp_num,
            src_qp: 0,
            wc_flags: WcFlags::default(),
            src: None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sge_pieces_walk_a_range_across_elements() {
        let sge = |addr, length| Sge {
            addr,
            length,
            lkey: 1,
        };
        let list = [sge(1000, 10), sge(2000, 0), sge(3000, 20), sge(4000, 5)];
        let walk = |off, len| {
            sge_pieces(&list, off, len)
                .map(|(s, a, n)| (s.addr, a, n))
                .collect::<Vec<_>>()
        };
        assert_eq!(
            walk(0, 35),
            vec![(1000, 1000, 10), (3000, 3000, 20), (4000, 4000, 5)]
        );
        assert_eq!(walk(7, 10), vec![(1000, 1007, 3), (3000, 3000, 7)]);
        assert_eq!(walk(12, 3), vec![(3000, 3002, 3)]);
        assert_eq!(walk(30, 0), vec![]);
        // A range past the list's end stops where the list does.
        assert_eq!(walk(32, 10), vec![(4000, 4002, 3)]);
    }
}
