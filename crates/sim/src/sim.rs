//! The simulator: nodes, hosts running the real RNIC, switches, and the
//! event loop that ties them together.
//!
//! Every host owns one [`roce_rnic::Rnic`] over [`VirtualMemory`], driven
//! exactly as the UDP engine drives it (`handle_packet`, `poll_transmit`,
//! `poll_timeout`/`handle_timeout`, `poll_cq`), only with simulated time.
//! There is no second transport: retransmission, ACK coalescing, CNP
//! generation and pacing are the RNIC's.

pub use crate::baseline::ideal_fct;
use crate::cc::{CcConfig, CcPlan};
use crate::ecmp::{self, EcmpMode, FiveTuple};
use crate::ecn::EcnConfig;
use crate::event::{Event, EventQueue, Kind, PS_PER_NS, Packed, Ps, ser_ps};
use crate::fib::Fib;
use crate::host::{HostPath, HostPlan};
use crate::link::{NPRIO, Port, QEntry, Scheduler};
use crate::metrics::{Counters, FlowResult, PfcEvent, QueueSample, Report};
use crate::packet::{
    INT_SCRATCH, IntRec, IntRef, IntStamp, MAX_HOST, MAX_INT_HOPS, Ns3Int, PINT_TAG, PREAMBLE_IFG,
    Packet, frame_len,
};
use crate::pfc::{BufferConfig, Mmu};
use crate::qlen::{QlenMonConfig, QlenMonitor};
use crate::stall::{STALL_DETAIL, Stall, StalledFlow};
use crate::topology::{NodeKind, Topology};
use crate::workload::{FlowOp, FlowSpec};
use rand_chacha::ChaCha8Rng;
use rand_chacha::rand_core::{Rng, SeedableRng};
use roce_rnic::{
    Access, CqHandle, IntHop, Mtu, PayloadRef, PdHandle, QpAttr, QpInitAttr, QpState, QpType,
    RecvWr, Rnic, RnicConfig, SendWr, Sge, Telemetry, VirtualMemory, WcOpcode, WcStatus, WrOpcode,
};
use roce_wire::{BthRepr, Opcode, PfcRepr, RethRepr, TransportRepr};
use std::net::{IpAddr, Ipv4Addr, SocketAddr};

mod footprint;
mod host_io;
#[macro_use]
mod packet_trace;
mod shape;
use host_io::HeadSink;

pub use footprint::MemoryUse;

/// RoCEv2's UDP port.
pub const ROCE_PORT: u16 = 4791;

/// Why a simulation cannot be set up.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum SimError {
    #[error("flow {flow}: host {host} does not exist (the fabric has {hosts} hosts)")]
    NoSuchHost {
        flow: usize,
        host: u32,
        hosts: usize,
    },
    #[error("flow {flow}: source and destination are both host {host}")]
    SameHost { flow: usize, host: u32 },
    #[error("flow {flow}: size must be 1..=2147483648 bytes, got {size}")]
    BadSize { flow: usize, size: u64 },
    #[error("no ECN thresholds for links of {rate_bps} b/s (add that speed to the K/P maps)")]
    NoEcnForSpeed { rate_bps: u64 },
    #[error("priority {0} is out of range 0..=7")]
    BadPriority(u8),
    #[error("the fabric has {0} hosts; the simulator holds at most {max}", max = MAX_HOST + 1)]
    TooManyHosts(usize),
    #[error("RNIC refused the set-up of flow {flow}: {why}")]
    Rnic { flow: usize, why: String },
    #[error(
        "switch {switch} admits up to {bytes} bytes, more than INT's 32-bit queue length \
         holds (at most 4 GiB of buffer with INT telemetry)"
    )]
    IntBufferTooLarge { switch: usize, bytes: u64 },
    #[error("INT telemetry names at most 65536 distinct link rates; the switches have {0}")]
    TooManyIntRates(usize),
    /// The event queue emptied with flows unfinished: a lost wake-up.
    #[error("{0}")]
    Stalled(Box<Stall>),
    #[error("link {link}: a frame loss rate must be within 0..=1, got {rate}")]
    BadLossRate { link: usize, rate: f64 },
    #[error("link failure at {at_ps} ps: no link joins nodes {a} and {b}")]
    NoSuchLink { at_ps: Ps, a: u32, b: u32 },
    #[error(
        "link failure at {at_ps} ps: node {host} is a host, and a host's only link cannot fail \
         (the HPCC ns-3 simulator then has no route for the host's QPs and stops on an assertion)"
    )]
    HostLinkDown { at_ps: Ps, host: u32 },
}

/// ECN marking thresholds for switch ports.
#[derive(Debug, Clone, PartialEq, Default)]
pub enum EcnPolicy {
    /// No marking.
    #[default]
    Off,
    /// The same thresholds on every switch port.
    Fixed(EcnConfig),
    /// Thresholds chosen by port speed (as the HPCC simulator's K/P maps).
    BySpeed(Vec<(u64, EcnConfig)>),
}

/// The default DSCP classification: priority = DSCP / 8 (the class
/// selector bits), as the simulator has always assumed.
pub fn default_dscp_to_prio() -> [u8; 64] {
    std::array::from_fn(|d| (d >> 3) as u8)
}

/// The HPCC ns-3 simulator's per-QP window (`HAS_WIN 1`, `VAR_WIN`):
/// `bytes` in flight (the fabric's largest BDP), scaled by the QP's rate
/// over the line with `var_win`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Ns3Window {
    pub bytes: u64,
    pub var_win: bool,
}

/// A link that goes down at `at` (the HPCC ns-3 simulator's `LINK_DOWN`):
/// both of its ports stop, the frames queued at them are dropped, frames on
/// the wire are lost, and every switch's routes are computed again without
/// it (see [`Simulator`]'s `link_down`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LinkFailure {
    pub at: Ps,
    /// The link's two nodes (both switches).
    pub a: u32,
    pub b: u32,
}

impl LinkFailure {
    /// The port at `a` that joins it to `b`: both must be switches a link
    /// joins (a host's only link cannot fail: [`SimError::HostLinkDown`];
    /// otherwise [`SimError::NoSuchLink`]). The one check of a failure,
    /// which the readers of configs and scenarios locate in their files.
    pub fn port_in(&self, topo: &Topology) -> Result<u16, SimError> {
        for n in [self.a, self.b] {
            if topo.nodes.get(n as usize).map(|x| x.kind) == Some(NodeKind::Host) {
                return Err(SimError::HostLinkDown {
                    at_ps: self.at,
                    host: n,
                });
            }
        }
        let port = (topo.ports.get(self.a as usize))
            .and_then(|ps| ps.iter().position(|p| p.peer == self.b as usize));
        match port {
            Some(p) if self.a != self.b => Ok(p as u16),
            _ => Err(SimError::NoSuchLink {
                at_ps: self.at,
                a: self.a,
                b: self.b,
            }),
        }
    }
}

/// Everything that shapes a run, besides the topology and the flows.
#[derive(Debug, Clone)]
pub struct SimConfig {
    pub seed: u64,
    /// Hard stop of simulated time.
    pub stop: Option<Ps>,
    pub mtu: Mtu,
    /// Priority of data packets (DSCP = 8 × priority).
    pub data_prio: u8,
    /// Priority of ACKs, NAKs and CNPs.
    pub control_prio: u8,
    /// The priority switches queue ACKs, NAKs and CNPs in, when it differs
    /// from the one hosts send them at (`None`: `control_prio`). The HPCC
    /// ns-3 simulator's switches queue ACKs with the data they acknowledge
    /// (their `AckHighPrio` is never set), whatever `ACK_HIGH_PRIO` makes
    /// the hosts do.
    pub switch_control_prio: Option<u8>,
    /// An XOFF or XON waits for the frame on the wire to end, as a MAC
    /// control frame does without preemption (and ns-3 sends it from the
    /// port's highest-priority queue); `false`: it leaves at once.
    pub pfc_after_frame: bool,
    /// A host's control priority is paused and resumed with this one (the
    /// HPCC ns-3 simulator's NIC sends ACKs from a queue of their own,
    /// ahead of the data, but holds them while the data's priority is
    /// paused unless `ACK_HIGH_PRIO` is set); `None`: only by its own
    /// PFC frames.
    pub host_control_paused_with: Option<u8>,
    pub rnic: RnicConfig,
    /// Local ACK timeout exponent (4.096 µs × 2^timeout).
    pub qp_timeout: u8,
    pub retry_cnt: u8,
    /// Loss recovery of every flow's QPs (`[transport] recovery`).
    pub recovery: roce_rnic::Recovery,
    pub buffer: BufferConfig,
    pub ecn: EcnPolicy,
    /// Per-priority ECN thresholds on every switch port (`None`: the
    /// port's thresholds from `ecn`).
    pub ecn_prio: [Option<EcnConfig>; 8],
    /// DSCP → 802.1p priority, the classification every NIC and switch
    /// applies (trust DSCP); default `dscp / 8`.
    pub dscp_to_prio: [u8; 64],
    /// DSCP of CNPs (`None`: `8 × control_prio`, and CNPs ride
    /// `control_prio` like ACKs). When set, CNPs are classified by it.
    pub cnp_dscp: Option<u8>,
    /// DSCP of data packets (`None`: `8 × data_prio`).
    pub data_dscp: Option<u8>,
    /// Per-QP rate limit of every sender QP, in bit/s (`None`: none).
    pub qp_rate_limit_bps: Option<u64>,
    /// The HPCC ns-3 simulator's window over every sender QP whose
    /// controller keeps none of its own (`--hpcc-config` with `HAS_WIN 1`
    /// and a mode other than HPCC's): see [`roce_rnic::cc::BdpWindow`].
    pub ns3_window: Option<Ns3Window>,
    /// The HPCC ns-3 simulator's `GLOBAL_T 0`: each QP's HPCC (or
    /// HPCC-PINT) T and its `ns3_window` are its own pair's base RTT and
    /// BDP, as third.cc computes them with this `PACKET_PAYLOAD_SIZE`
    /// (`None`: the fabric's largest, `GLOBAL_T 1`).
    pub ns3_pair_t: Option<u32>,
    /// Links that fail during the run, in any order.
    pub link_failures: Vec<LinkFailure>,
    /// Per topology link, the chance that a frame arriving at either of
    /// its ends is lost (the HPCC ns-3 simulator's receive error model,
    /// `ERROR_RATE_PER_LINK`); a link past the end loses nothing, so empty
    /// is a lossless fabric.
    pub link_loss: Vec<f64>,
    pub scheduler: Scheduler,
    /// How switches pick among equal-cost next hops (`--hpcc-config`:
    /// ns-3's choice).
    pub ecmp: EcmpMode,
    /// Stamp INT on data packets at every switch egress (always on with
    /// HPCC).
    pub int: bool,
    /// Bytes an INT field adds to every data packet and ACK (0: none). The
    /// HPCC ns-3 simulator's field is 42 bytes with HPCC (room for five
    /// hops), 8 with TIMELY (a send timestamp) and 2 with HPCC-PINT (the
    /// code), whatever the packet holds in it.
    pub int_wire_bytes: u32,
    /// INT stamped as the HPCC ns-3 simulator's record holds it (its
    /// units, `INT_MULTI`, and the port's queue over every priority, as
    /// its `GetNBytesTotal`); `None`, exact counters and the packet's own
    /// priority queue.
    pub ns3_int: Option<Ns3Int>,
    /// The senders' congestion control.
    pub cc: CcConfig,
    /// Preamble, SFD and inter-frame gap bytes charged per frame on the wire.
    pub ifg_bytes: u64,
    /// Packets a NIC takes from the RNIC ahead of its port (per port, all
    /// unpaused priorities: frames of a paused one do not count, and the
    /// RNIC holds what a pause holds, see `Rnic::set_tx_hold`), so a
    /// paused priority does not block the others.
    pub nic_staging_pkts: usize,
    /// Sampling interval for queues.csv and flow progress (0 = off).
    pub sample: Ps,
    /// Flows (lowest ids) whose delivered bytes are sampled for the
    /// throughput plot.
    pub trace_flows: usize,
    /// Keep every PFC frame as bytes (for a pcap).
    pub capture_pfc: bool,
    /// Report a PFC deadlock when every non-empty queue has been paused for
    /// this long with nothing delivered (0 = off).
    pub deadlock_after: Ps,
    /// Most rows kept for queues.csv / pfc.csv.
    pub max_rows: usize,
    /// The HPCC simulator's queue-length monitor (`QLEN_MON_FILE`), if on.
    pub qlen_monitor: Option<QlenMonConfig>,
    /// Host data-path costs (`[host]` in a scenario); `None`: hosts are an
    /// RNIC feeding its port directly.
    pub host: Option<HostPlan>,
    /// Split each flow into messages (WQEs) of this many bytes on its QP
    /// (`None`: one message per flow).
    pub message_bytes: Option<u64>,
    /// With `message_bytes`: one signaled WQE every this many (the last
    /// is always signaled).
    pub signal_every: u32,
}

impl Default for SimConfig {
    fn default() -> Self {
        SimConfig {
            seed: 1,
            stop: None,
            mtu: Mtu::Mtu1024,
            data_prio: 3,
            control_prio: 6,
            switch_control_prio: None,
            pfc_after_frame: false,
            host_control_paused_with: None,
            rnic: RnicConfig::default(),
            qp_timeout: 14,
            retry_cnt: 7,
            recovery: roce_rnic::Recovery::GoBackN,
            buffer: BufferConfig::default(),
            ecn: EcnPolicy::Off,
            ecn_prio: [None; 8],
            dscp_to_prio: default_dscp_to_prio(),
            cnp_dscp: None,
            data_dscp: None,
            qp_rate_limit_bps: None,
            ns3_window: None,
            ns3_pair_t: None,
            link_failures: Vec::new(),
            link_loss: Vec::new(),
            scheduler: Scheduler::Strict,
            ecmp: EcmpMode::Hash,
            int: false,
            int_wire_bytes: 0,
            ns3_int: None,
            cc: CcConfig::None,
            ifg_bytes: PREAMBLE_IFG,
            nic_staging_pkts: 16,
            sample: 10 * crate::event::PS_PER_US,
            trace_flows: 16,
            capture_pfc: false,
            deadlock_after: 0,
            max_rows: 2_000_000,
            qlen_monitor: None,
            host: None,
            message_bytes: None,
            signal_every: 1,
        }
    }
}

/// A host: its node, its RNIC, and the verbs objects every flow shares.
///
/// Laid out (`repr(C)`, line-aligned) so that what the simulator reads of
/// it at every host event is its first line: the QP slots and their base,
/// the node, the profile, the skipped wake-up and the timer. In Rust's
/// own order these came after the RNIC, across two lines (12 and 13 of
/// 14), and the look-ahead, which loads the host's line a slot before it
/// reads `qpn_base`, loaded the other one: at 8,192 hosts that read was
/// 5 % of the look-ahead's perf samples (k=32 cut at 300 µs).
#[repr(C, align(64))]
struct Host {
    /// Flow of each local QPN (index `qpn - qpn_base`) and the payload
    /// delivered to that QP (see [`QpSlot`]).
    qp_flow: Vec<QpSlot>,
    qpn_base: u32,
    node: u32,
    /// PCIe, memory, RNIC engines and CPU, with a host profile.
    path: Option<Box<HostPath>>,
    /// The sequence number reserved for the `TxDone` of the frame on the
    /// wire (due at the port's `busy_until`), skipped because it would
    /// find nothing to do; 0 when none (see [`Simulator::quiet_until`]).
    wake_seq: u64,
    timer_at: Option<Ps>,
    rnic: Rnic<VirtualMemory>,
    timer_version: u32,
    pd: PdHandle,
    cq: CqHandle,
    forced_at: Option<Ps>,
}

/// A local QP's flow and the payload bytes that arrived for it.
///
/// A delivered data packet looks its flow up here, so its count lives on
/// the same line: in the flow's record (112 bytes a flow, 20 MB at 8,192
/// hosts) it was a cache miss per delivered packet, a tenth of the event
/// loop's time late in a k=32 fat-tree run. QPNs are never reused (the
/// RNIC numbers them upwards), so a slot belongs to one flow for good; a
/// flow's count is its two QPs' (data reaches the sender only with READ
/// responses).
#[derive(Debug, Clone, Copy)]
struct QpSlot {
    flow: u32,
    rx_bytes: u64,
}

impl QpSlot {
    const NONE: QpSlot = QpSlot {
        flow: u32::MAX,
        rx_bytes: 0,
    };
}

/// What the simulator keeps in each QP's context in its RNIC (see
/// `Simulator::map_qp`), packed into the RNIC's one word.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct QpContext {
    /// The flow the QP is an end of (`u32::MAX`: none).
    flow: u32,
    /// Under ns-3's ECMP, the ports its packets carry as ns-3 numbers
    /// them (`sport | dport << 16`).
    ports: u32,
}

impl QpContext {
    /// Packed with the flow plus one in the low half, so that a QP never
    /// given a context (zero) reads as no flow's.
    fn pack(self) -> u64 {
        u64::from(self.flow.wrapping_add(1)) | u64::from(self.ports) << 32
    }
    #[inline(always)]
    fn of(context: u64) -> QpContext {
        QpContext {
            flow: (context as u32).wrapping_sub(1),
            ports: (context >> 32) as u32,
        }
    }
}

struct SwitchState {
    node: u32,
    mmu: Mmu,
}

/// Every event reads its node's record: 32 bytes, aligned to 32 so it
/// never straddles two cache lines (as every other one did at the
/// allocator's 16-byte alignment).
#[repr(align(32))]
struct NodeState {
    ports: Vec<Port>,
    /// Index into `hosts` or `switches`.
    index: u32,
    host: bool,
}

struct FlowState {
    spec: FlowSpec,
    sport: u16,
    src_qpn: u32,
    dst_qpn: u32,
    src_lkey: u32,
    dst_lkey: u32,
    finish: Option<Ps>,
    status: Option<WcStatus>,
    ideal: Ps,
    src_addr: u64,
    dst_addr: u64,
    /// The receiver's region key (set with the QP).
    dst_rkey: u32,
    /// Its QP and region were made ahead, by `accept_flow` (a
    /// partitioned run).
    accepted: bool,
    /// INT of the last data packet the receiver got, echoed in its next ACK.
    echo_int: IntRef,
}

/// What ns-3's ECMP hash ([`EcmpMode::Ns3`]) needs of a flow.
#[derive(Debug, Clone, Copy)]
struct Ns3Flow {
    /// The sending host (its packets carry `ports`, the others them
    /// swapped).
    src: u32,
    /// `sport | dport << 16` of the flow's data packets as ns-3 numbers
    /// them (its ACKs carry the two swapped).
    ports: u32,
}

/// The whole fabric.
pub struct Simulator {
    pub cfg: SimConfig,
    pub topo: Topology,
    fib: Fib,
    cc: CcPlan,
    /// Switch hops from a node to every node (Swift's per-flow target), by
    /// source: a host's edge switch when it hangs off one, so a fabric
    /// keeps one row per edge switch rather than one per host (at 8,192
    /// hosts that is 19 MB instead of 310 MB).
    hops_from: std::collections::HashMap<usize, Vec<u32>>,
    /// Per flow, its pair's base RTT (ns) and BDP (bytes) as the HPCC ns-3
    /// simulator computes them (`SimConfig::ns3_pair_t`; empty otherwise).
    pair_t: Vec<(u64, u64)>,
    q: EventQueue,
    nodes: Vec<NodeState>,
    hosts: Vec<Host>,
    switches: Vec<SwitchState>,
    /// Ports holding packets, per switch (index into `switches`): sampling
    /// visits only those switches, not every port of the fabric every
    /// interval (327,680 queues at 8,192 hosts).
    switch_ports_queued: Vec<u32>,
    /// Each switch's ECMP hash seed, in a table of their own (10 KB at
    /// 1,280 switches, which stays cached): in a switch's record the seed
    /// had a line to itself past the buffer state's, one more line per
    /// switch hop (and a load the look-ahead waited on).
    switch_seeds: Vec<u64>,
    /// Every switch's ports share one alpha (see `Mmu::alpha_uniform`):
    /// the look-ahead then loads no alpha, and does not read a switch's
    /// buffer state to find that out.
    alphas_uniform: bool,
    flows: Vec<FlowState>,
    /// With [`EcmpMode::Ns3`], the ports ns-3 gives each flow (else
    /// empty), which a sending host writes into the packet so that no
    /// switch reads a flow: a dense table, not a line of a flow record.
    ns3_flows: Vec<Ns3Flow>,
    /// With [`EcmpMode::Ns3`], each host's address as ns-3 numbers it,
    /// scrambled as its ECMP hash scrambles a key word
    /// ([`ecmp::ns3::murmur3_mix`], once here instead of at every hop)
    /// (else empty).
    ns3_ips: Vec<u32>,
    packets: Slab<Packet>,
    /// The transport headers of live packets whose headers do not fit
    /// their slot (see [`Packet`]), and free places there.
    exts: Vec<TransportRepr>,
    ext_free: Vec<u32>,
    /// The free packet slots, a stack threaded through the slots
    /// themselves ([`Packet::free_next`]; `u32::MAX`: none), so freeing
    /// costs no memory of its own (a list beside the slots was 4 bytes
    /// more per slot), and how many there are.
    free_head: u32,
    n_free: usize,
    /// INT records of live packets and of flows' pending echoes (see
    /// [`IntRec`]), and free places there: with HPCC every data packet
    /// takes one, the receiver keeps it for its next ACK, and the ACK's
    /// arrival frees it.
    ///
    /// On huge pages like the packets: switches stamp hops in records
    /// scattered over megabytes, and on 4 KiB pages nearly every stamp
    /// waited for a page walk (a third of `start_tx`'s time in a 10 ms
    /// HPCC fat-tree run).
    ints: Slab<IntRec>,
    int_free: Vec<u32>,
    /// HPCC-PINT's per-port estimates (`None` unless the run's congestion
    /// control is HPCC-PINT).
    pint: Option<Box<crate::pint::PintSwitches>>,
    /// The switch ports' distinct link rates, which an INT stamp names by
    /// place ([`IntStamp::rate`]).
    pub(crate) int_rates: Vec<u64>,
    rng: ChaCha8Rng,
    pub counters: Counters,
    /// Frames the hosts' NICs injected, by priority (outside [`Counters`]
    /// so reports stay as they were).
    injected_by_prio: [u64; 8],
    /// CNPs the hosts' NICs injected, by priority.
    cnps_by_prio: [u64; 8],
    pfc_log: Vec<PfcEvent>,
    queue_log: Vec<QueueSample>,
    flow_log: Vec<(Ps, u32, u64)>,
    pfc_frames: Vec<(Ps, Vec<u8>)>,
    live_bytes: u64,
    finished: usize,
    stall_since: Option<Ps>,
    last_delivered: u64,
    /// When the first flow starts (`Ps::MAX`: no flows): see
    /// [`next_sample`](Self::next_sample).
    first_start: Ps,
    deadlock: Option<String>,
    /// The run is over whatever the queue holds: every flow finished
    /// (`finished` reached the flow count) or a deadlock was found. Set
    /// where either becomes true, so the event loop tests one flag per
    /// event instead of each condition (the stop time and an empty queue
    /// end the loop inside the queue's pop).
    halted: bool,
    qlen: Option<QlenMonitor>,
    /// Events handled by kind, indexed by the `KIND_*` constants (an
    /// array so that counting is one add on a line `handle` already has).
    by_kind: [u64; 6],
    /// Tests: `false` schedules every host `TxDone`, as before skipping
    /// quiet ones, to show the skip changes nothing but the event count.
    #[cfg(test)]
    skip_quiet_wakes: bool,
    /// Tests: every event handled, in order.
    #[cfg(test)]
    trace: Option<Vec<(Ps, Event)>>,
    /// The queue-length monitor's window opens at this time (`Ps::MAX`:
    /// no monitor, or already open); `step` hands it every switch queue's
    /// length then.
    qlen_open_at: Ps,
    /// Queue changes before this time are recorded (0 before the window
    /// opens: the monitor costs nothing outside its window, which a
    /// monitor configured past the run's end never opens).
    qlen_until: Ps,
    /// Queue changes before this time are watched: by the queue-length
    /// monitor (until `qlen_until`) or, for the whole run, by ns-3's
    /// packet trace (`ptrace`). The packet path tests this one time.
    watch_until: Ps,
    /// ns-3's packet trace (`TRACE_OUTPUT_FILE` with `ENABLE_TRACE 1`; see
    /// [`crate::ns3_trace`]).
    ptrace: Option<Box<crate::ns3_trace::PacketTrace>>,
    /// The calendar slot for which [`Simulator::prefetch_upcoming`] last
    /// ran its stages.
    staged_slot: u64,
    /// Run the later prefetch stages ([`Simulator::prefetch_stage`]): only
    /// in fabrics whose ports outgrow a core's cache (see
    /// [`DEEP_PREFETCH_PORT_BYTES`]).
    deep_prefetch: bool,
    /// Ports whose link went down ([`LinkFailure`]), both ends of each;
    /// `any_down` says whether the list is empty, for the arrival path to
    /// test one flag on a line it reads anyway.
    down_ports: Vec<(u32, u16)>,
    any_down: bool,
    /// An arrival may be lost: a link is down or lossy (see
    /// [`arrival_lost`](Simulator::arrival_lost)).
    arrive_checks: bool,
    /// Hosts model their data path (`cfg.host`: every host has a
    /// [`HostPath`], else none has).
    host_paths: bool,
    /// Every arrival and transmission of this fabric packs into the event
    /// queue's 64 bits ([`crate::event::packs`]): no node or port past
    /// 2²⁰ or 2¹².
    packs_all: bool,
    /// The draws of lossy links, apart from every other draw so that a
    /// lossless run's are unchanged.
    loss_rng: ChaCha8Rng,
}

/// A flow receiver's region takes the sender's WRITEs (and SENDs).
const RECEIVER_ACCESS: Access =
    Access::from_bits(Access::LOCAL_WRITE.bits() | Access::REMOTE_WRITE.bits());

const KIND_SWITCH_ARRIVE: usize = 0;
const KIND_HOST_ARRIVE: usize = 1;
const KIND_SWITCH_TX_DONE: usize = 2;
const KIND_HOST_TX_DONE: usize = 3;
const KIND_HOST_TIMER: usize = 4;
const KIND_OTHER: usize = 5;

/// Port state beyond which the later prefetch stages pay. They look at
/// every event twice more and route arrivals once more; where the ports
/// fit in a core's L2 (the 320-host fat tree's 960 ports of 1,216 bytes
/// take 1.2 MB) that is pure cost: with them on, the 320-host tree cut at
/// 2 ms took 30 % more user time (session 18), while at 8,192 hosts
/// (49,152 ports, 60 MB) the misses they hide cost more (about 10 % less
/// CPU). At 1,024 hosts (7.5 MB) they cost 2-4 % more user time (the k=16
/// tree cut at 2 ms, three interleaved pairs, session 18: the threshold
/// was 4 MB before), hence above that.
const DEEP_PREFETCH_PORT_BYTES: usize = 16 << 20;

/// The 320-host fat tree's ports' capacity, in bits per second, summed
/// over both ends of every link: 320 host links of 100 Gb/s and 160 of
/// 400 Gb/s (`scenarios/hpcc/topo_fat320.txt`).
const FAT320_CAPACITY_BPS: u128 = 2 * (320 * 100_000_000_000 + 160 * 400_000_000_000);

/// log₂ of a partitioned run's calendar slot width in ps (4.1 ns).
///
/// A group's window holds only its own events, a thirty-second of the
/// fabric's at k=32: in 1.02 ns slots (the width before session 28) that
/// was about four events a slot, so the look-ahead's three slots
/// (`Simulator::prefetch_upcoming`) reached a dozen events ahead, and
/// each slot's fixed costs (settling it, staging it, its header's and
/// buffer's lines when an inbox is taken) fell on few events. 4.1 ns
/// slots hold about eighteen. On the k=32 tree cut at 1 ms, interleaved,
/// user s: 30.2, 30.2, 34.7, 30.3, 33.7 (mean 31.8) against 31.1, 34.8,
/// 35.6, 36.1, 34.6 (mean 34.4) for 1.02 ns slots; 2.05 ns slots 37.8,
/// 34.8, 32.5 (three rounds); 8.2 and 16.4 ns slots 32.1 and 31.1 (one
/// round each). Outputs are identical: the order is `(time, sequence)`
/// whatever the width. These slots are too wide for the rank sort's
/// 16-bit keys, so they take its 32-bit lanes or the bucket sort (see
/// `sort_wide_or_unordered` in the event queue).
const PARTITION_SLOT_BITS: u32 = crate::event::MAX_SLOT_BITS;

/// log₂ of the event calendar's slot width in ps for `topo`: 1.02 ns up
/// to four times the 320-host fat tree's port capacity, and one bit
/// narrower for each further factor of four (256 ps for the k=32 fat
/// tree, 25.6 times it).
///
/// Why: a slot gathers the events of its 1.02 ns to sort them in one go,
/// about ten on the 320-host tree, where 512 ps slots were no faster and
/// 2.05 ns slots ran 117 M more instructions on the 1 ms HPCC run
/// (13,646 M against 13,529 M, callgrind, session 47; outputs identical;
/// slots that wide are sorted in the rank sort's 32-bit lanes). The
/// k=32 tree's slots held about 100 at that width, past the rank sort's
/// 64 lanes and into the bucket sort, and narrower slots were faster
/// there: on the k=32 tree cut at 1 ms, interleaved with 1.02 ns runs,
/// 256 ps slots took 47.8 s of user time on average (11 runs, 39.9–54.7)
/// against 53.7 s (9 runs, 40.7–61.8), and were faster in 79 of the 99
/// pairs (sessions 24 and 25, a noisy machine; outputs identical). 128
/// and 64 ps, and a look-ahead reaching as far in time as at 1.02 ns,
/// were no better than 256 ps (two rounds each, 49.1–59.2 s). The k=16
/// tree (3.2 times the capacity) keeps 1.02 ns: cut at 3 ms, 512 ps took
/// 17.98, 15.83 and 18.48 s of user time against 16.35, 17.35 and
/// 17.11 s (three interleaved rounds, session 25). At 1.02 ns
/// the width read from the queue (not a constant) costs 0.6 % more
/// instructions on the 320-host tree (callgrind, cut at 2 ms: 8,952 M to
/// 9,002 M), no loss visible in its wall time. Events a slot grow with the
/// fabric's capacity, but more slots cost a settle and a look-ahead
/// each, hence one bit per factor of four rather than two. The width
/// changes no output: the queue hands events out in `(time, sequence)`
/// order whatever it is.
fn slot_bits_for(topo: &Topology) -> u32 {
    let ratio = topo.port_capacity_bps() / FAT320_CAPACITY_BPS;
    // floor(log₂(ratio) / 2): 0 below 4×, 1 from 4×, 2 from 16×.
    let narrower = if ratio == 0 { 0 } else { ratio.ilog2() / 2 };
    (crate::event::DEFAULT_SLOT_BITS.saturating_sub(narrower)).max(crate::event::MIN_SLOT_BITS)
}

/// Tells the queue-length monitor every switch queue's length now, as it
/// stands at the window's first sample.
fn hand_queue_lengths(m: &mut QlenMonitor, switches: &[SwitchState], nodes: &[NodeState]) {
    for (sw, s) in switches.iter().enumerate() {
        for (pi, p) in nodes[s.node as usize].ports.iter().enumerate() {
            m.set_initial(sw, pi, p.queued_bytes());
        }
    }
}

fn host_ip(h: u32) -> Ipv4Addr {
    // 10.0.0.1 is host 0; room for 16 M hosts.
    Ipv4Addr::from(0x0a00_0001u32 + h)
}

fn ip_host(ip: IpAddr) -> Option<u32> {
    match ip {
        IpAddr::V4(v) => u32::from(v).checked_sub(0x0a00_0001),
        IpAddr::V6(_) => None,
    }
}

impl Simulator {
    /// Builds hosts, switches and ports, and schedules the flows.
    pub fn new(
        mut cfg: SimConfig,
        topo: Topology,
        flows: &[FlowSpec],
    ) -> Result<Simulator, SimError> {
        for &p in [cfg.data_prio, cfg.control_prio]
            .iter()
            .chain(cfg.dscp_to_prio.iter())
        {
            if p > 7 {
                return Err(SimError::BadPriority(p));
            }
        }
        if topo.n_hosts() > MAX_HOST as usize + 1 {
            return Err(SimError::TooManyHosts(topo.n_hosts()));
        }
        let routes = topo.routes();
        let max_frame = frame_len(&data_repr(true), cfg.mtu.bytes() as usize);
        let mss = u64::from(cfg.mtu.bytes());
        let cc = crate::cc::plan(&cfg.cc, &topo, &routes, max_frame + cfg.ifg_bytes, mss);
        if cc.hpcc().is_some() {
            cfg.int = true;
        }
        let mut nodes = Vec::with_capacity(topo.nodes.len());
        let mut hosts = Vec::new();
        let mut switches = Vec::new();
        let mut rnic_cfg = cfg.rnic.clone();
        rnic_cfg.cnp_dscp = cfg.cnp_dscp.map_or(cfg.control_prio << 3, |d| d & 63);
        rnic_cfg.ecn_echo |= cc.ecn_echo();
        for (i, n) in topo.nodes.iter().enumerate() {
            let mut ports: Vec<Port> = topo.ports[i]
                .iter()
                .map(|p| Port::new(p.peer as u32, p.peer_port, p.rate_bps, p.delay_ps))
                .collect();
            match n.kind {
                NodeKind::Host => {
                    let mut rnic = Rnic::new(rnic_cfg.clone(), VirtualMemory::new());
                    let pd = rnic.alloc_pd();
                    let cq = rnic
                        .create_cq(rnic.config().max_cqe)
                        .map_err(|e| SimError::Rnic {
                            flow: 0,
                            why: e.to_string(),
                        })?;
                    nodes.push(NodeState {
                        ports,
                        index: hosts.len() as u32,
                        host: true,
                    });
                    hosts.push(Host {
                        node: i as u32,
                        rnic,
                        pd,
                        cq,
                        timer_at: None,
                        timer_version: 0,
                        forced_at: None,
                        wake_seq: 0,
                        qp_flow: Vec::new(),
                        qpn_base: 0,
                        path: None,
                    });
                }
                NodeKind::Switch => {
                    let mut headroom = Vec::with_capacity(ports.len());
                    let rates: Vec<u64> = ports.iter().map(|p| p.rate_bps).collect();
                    for p in ports.iter_mut() {
                        p.set_ecn(match &cfg.ecn {
                            EcnPolicy::Off => None,
                            EcnPolicy::Fixed(e) => Some(*e),
                            EcnPolicy::BySpeed(m) => Some(
                                m.iter()
                                    .find(|(r, _)| *r == p.rate_bps)
                                    .map(|(_, e)| *e)
                                    .ok_or(SimError::NoEcnForSpeed {
                                        rate_bps: p.rate_bps,
                                    })?,
                            ),
                        });
                        p.set_ecn_prio(cfg.ecn_prio);
                        headroom.push(cfg.buffer.headroom_for(
                            p.rate_bps,
                            p.delay_ps,
                            max_frame + cfg.ifg_bytes,
                        ));
                    }
                    nodes.push(NodeState {
                        ports,
                        index: switches.len() as u32,
                        host: false,
                    });
                    switches.push(SwitchState {
                        node: i as u32,
                        mmu: Mmu::new(cfg.buffer, headroom, &rates),
                    });
                }
            }
        }
        if let Some(plan) = &cfg.host {
            for (i, h) in hosts.iter_mut().enumerate() {
                let port = &nodes[h.node as usize].ports[0];
                h.path = Some(Box::new(crate::host::attach(
                    plan.params(i as u32).clone(),
                    &cfg,
                    port.rate_bps,
                    port.delay_ps,
                    max_frame + cfg.ifg_bytes,
                )));
            }
        }
        let mut rng = ChaCha8Rng::seed_from_u64(cfg.seed);
        let mut states = Vec::with_capacity(flows.len());
        let mut pair_t = Vec::new();
        let mut ns3_flows = Vec::new();
        let n_hosts = topo.n_hosts();
        for (i, f) in flows.iter().enumerate() {
            for h in [f.src, f.dst] {
                if h as usize >= n_hosts {
                    return Err(SimError::NoSuchHost {
                        flow: i,
                        host: h,
                        hosts: n_hosts,
                    });
                }
            }
            if f.src == f.dst {
                return Err(SimError::SameHost {
                    flow: i,
                    host: f.src,
                });
            }
            if f.size == 0 || f.size > 1 << 31 {
                return Err(SimError::BadSize {
                    flow: i,
                    size: f.size,
                });
            }
            let path = topo.path(&routes, f.src, f.dst);
            if let Some(payload) = cfg.ns3_pair_t {
                // third.cc: rtt = 2 · delay + one payload serialized per
                // hop; bdp = rtt · the path's slowest link / 8.
                let rtt_ns =
                    crate::baseline::path_rtt_ps(&path, crate::baseline::HopCost::Ns3 { payload })
                        / PS_PER_NS;
                let bw = path.iter().map(|p| p.rate_bps).min().unwrap_or(0);
                pair_t.push((rtt_ns, crate::baseline::bdp_bytes(rtt_ns, bw)));
            }
            let mut sport = 49152 + (rng.next_u64() % 16384) as u16;
            if let EcmpMode::Ns3 { flow_ports } = &cfg.ecmp {
                let (s, d) = flow_ports.get(i).copied().unwrap_or((sport, ROCE_PORT));
                sport = s;
                ns3_flows.push(Ns3Flow {
                    src: f.src,
                    ports: u32::from(s) | u32::from(d) << 16,
                });
            }
            states.push(FlowState {
                spec: *f,
                sport,
                src_qpn: 0,
                dst_qpn: 0,
                src_lkey: 0,
                dst_lkey: 0,
                finish: None,
                status: None,
                src_addr: 0,
                dst_addr: 0,
                dst_rkey: 0,
                accepted: false,
                echo_int: IntRef::NONE,
                ideal: ideal_fct(&path, f.size, cfg.mtu, cfg.ifg_bytes),
            });
        }
        // The calendar reaches past the longest link delay and frame.
        let horizon = topo
            .ports
            .iter()
            .flatten()
            .map(|p| p.delay_ps + ser_ps(max_frame + cfg.ifg_bytes, p.rate_bps))
            .max()
            .unwrap_or(0);
        let mut routes = routes;
        if matches!(cfg.ecmp, EcmpMode::Ns3 { .. }) {
            crate::fib::reorder(&mut routes, &topo, |h| {
                ecmp::ns3::next_hop_order(&topo, h, |x| ecmp::ns3::ns3_pointer_rank(&topo, x))
            });
        }
        let fib = Fib::new(&topo, routes);
        let slot_bits = slot_bits_for(&topo);
        #[cfg(test)]
        let slot_bits = FORCE_SLOT_BITS.get().unwrap_or(slot_bits);
        let ns3_ips = if ns3_flows.is_empty() {
            Vec::new()
        } else {
            (topo.hosts.iter())
                .map(|&n| ecmp::ns3::murmur3_mix(crate::hpcc::hpcc_ip(topo.machine[n] as u32)))
                .collect()
        };
        let switch_seeds = (switches.iter())
            .map(|s| cfg.seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) ^ u64::from(s.node))
            .collect();
        let pint = cc.pint().map(|p| {
            let ports = (switches.iter()).map(|s| {
                nodes[s.node as usize]
                    .ports
                    .iter()
                    .map(|p| p.rate_bps)
                    .collect()
            });
            Box::new(crate::pint::PintSwitches::new(
                p.codec,
                p.hpcc.base_rtt_ns,
                ports,
                cfg.seed,
            ))
        });
        let loss_rng = ChaCha8Rng::seed_from_u64(cfg.seed ^ 0x1055_5eed);
        for (link, &rate) in cfg.link_loss.iter().enumerate() {
            if !(0.0..=1.0).contains(&rate) {
                return Err(SimError::BadLossRate { link, rate });
            }
        }
        let lossy = cfg.link_loss.iter().any(|&p| p > 0.0);
        let mut sim = Simulator {
            cfg,
            fib,
            topo,
            cc,
            hops_from: Default::default(),
            pair_t,
            q: EventQueue::with_horizon(horizon + horizon / 4, slot_bits),
            nodes,
            hosts,
            switch_ports_queued: vec![0; switches.len()],
            switch_seeds,
            alphas_uniform: switches.iter().all(|s| s.mmu.alpha_uniform()),
            switches,
            flows: states,
            ns3_ips,
            ns3_flows,
            packets: Slab::new(),
            exts: Vec::new(),
            ext_free: Vec::new(),
            free_head: u32::MAX,
            n_free: 0,
            ints: Slab::new(),
            int_free: Vec::new(),
            int_rates: Vec::new(),
            pint,
            rng,
            counters: Counters::default(),
            injected_by_prio: [0; 8],
            cnps_by_prio: [0; 8],
            pfc_log: Vec::new(),
            queue_log: Vec::new(),
            flow_log: Vec::new(),
            pfc_frames: Vec::new(),
            live_bytes: 0,
            finished: 0,
            stall_since: None,
            last_delivered: 0,
            first_start: flows.iter().map(|f| f.start).min().unwrap_or(Ps::MAX),
            deadlock: None,
            halted: false,
            qlen: None,
            by_kind: [0; 6],
            #[cfg(test)]
            skip_quiet_wakes: true,
            #[cfg(test)]
            trace: None,
            qlen_open_at: Ps::MAX,
            qlen_until: 0,
            watch_until: 0,
            ptrace: None,
            staged_slot: u64::MAX,
            deep_prefetch: false,
            down_ports: Vec::new(),
            any_down: false,
            arrive_checks: false,
            host_paths: false,
            packs_all: false,
            loss_rng,
        };
        sim.host_paths = sim.hosts.iter().any(|h| h.path.is_some());
        let most_ports = sim.nodes.iter().map(|n| n.ports.len()).max().unwrap_or(0);
        sim.packs_all = crate::event::packs(sim.nodes.len(), most_ports);
        let ports: usize = sim.nodes.iter().map(|n| n.ports.len()).sum();
        sim.deep_prefetch = ports * std::mem::size_of::<Port>() > DEEP_PREFETCH_PORT_BYTES;
        if sim.cfg.int {
            // The first INT record is the switches' scratch (`INT_SCRATCH`),
            // never handed to a packet.
            sim.ints.push(IntRec::default());
            sim.set_int_rates()?;
        }
        sim.arrive_checks = lossy;
        sim.partition(flows, horizon + horizon / 4);
        let window = sim.q.partition().map(|p| p.window());
        for (i, f) in flows.iter().enumerate() {
            let flow = i as u32;
            // A partitioned run's receivers make their side a window
            // ahead (at the start for flows of the first window).
            match window {
                Some(w) if f.start >= w => {
                    sim.q
                        .schedule((f.start / w) * w - 1, Event::FlowAccept { flow });
                }
                Some(_) => sim.accept_flow(flow),
                None => {}
            }
            sim.q.schedule(f.start, Event::FlowStart { flow });
        }
        for i in 0..sim.cfg.link_failures.len() {
            let f = sim.cfg.link_failures[i];
            let port = f.port_in(&sim.topo)?;
            sim.q.schedule(f.at, Event::LinkDown { node: f.a, port });
        }
        // No flows: all of them are finished from the start.
        sim.halted = sim.flows.is_empty();
        if let Some(c) = sim.cfg.qlen_monitor {
            let switches: Vec<(u32, usize)> = (sim.switches.iter())
                .map(|s| (s.node, sim.nodes[s.node as usize].ports.len()))
                .collect();
            let m = QlenMonitor::new(c, &switches);
            if let Some((open, _)) = m.window() {
                sim.qlen_open_at = open;
            }
            sim.qlen = Some(m);
        }
        if sim.cfg.sample > 0 {
            sim.q.schedule(0, Event::Sample);
        }
        Ok(sim)
    }

    /// INT stamps hold a queue's length in 32 bits and a link's rate as
    /// its place in [`int_rates`](Self::int_rates) ([`IntStamp`]): this
    /// builds that table and refuses a switch that could queue more than
    /// 32 bits of bytes, so that every stamp reads back exactly what the
    /// switch saw.
    fn set_int_rates(&mut self) -> Result<(), SimError> {
        for (switch, sw) in self.switches.iter().enumerate() {
            let bytes = sw.mmu.max_admitted();
            if bytes > u64::from(u32::MAX) {
                return Err(SimError::IntBufferTooLarge { switch, bytes });
            }
        }
        let mut places = std::collections::BTreeMap::new();
        for p in self
            .nodes
            .iter_mut()
            .filter(|n| !n.host)
            .flat_map(|n| &mut n.ports)
        {
            let next = places.len();
            let at = *places.entry(p.rate_bps).or_insert(next);
            p.int_rate = u16::try_from(at).map_err(|_| SimError::TooManyIntRates(at + 1))?;
        }
        self.int_rates = vec![0; places.len()];
        for (rate, at) in places {
            // In ns-3's record a rate it does not code reads as 25G.
            self.int_rates[at] = match self.cfg.ns3_int {
                Some(_) => Ns3Int::line_rate(rate),
                None => rate,
            };
        }
        Ok(())
    }

    /// Orders the run group by group within windows (see
    /// [`crate::event::Partition`]) where the fabric is large enough for
    /// that to pay: where the later prefetch stages run (its ports alone
    /// outgrow a core's caches), with no queue-length monitor (whose
    /// window opens at one time for all) and no host data-path models.
    /// `horizon`: the calendar's reach in simulated time.
    fn partition(&mut self, flows: &[FlowSpec], horizon: Ps) {
        #[cfg(test)]
        let force = FORCE_GROUPS.get();
        #[cfg(not(test))]
        let force = None;
        if !(force.is_some() || self.deep_prefetch)
            || self.cfg.qlen_monitor.is_some()
            // A failure changes every switch's routes at one time.
            || !self.cfg.link_failures.is_empty()
            || self.host_paths
            // A packet may reach a multi-homed host at another NIC than
            // its own, in another group.
            || self.topo.multi_homed
        {
            return;
        }
        let Some(g) = crate::partition::group_nodes(&self.topo, force) else {
            return;
        };
        let window = crate::partition::window_for(g.min_cross_delay, self.cfg.sample);
        let host_group: Vec<u32> = (self.topo.hosts.iter()).map(|&n| g.node_group[n]).collect();
        let end = |h: u32| host_group.get(h as usize).copied().unwrap_or(1);
        let flow_src = flows.iter().map(|f| end(f.src)).collect();
        let flow_dst = flows.iter().map(|f| end(f.dst)).collect();
        let groups = g.groups + 1;
        // An event up to `horizon` ahead lands at most that many windows
        // on, each `groups` windows long in the calendar's order.
        let reach = (horizon.div_ceil(window) + 1) * window * u64::from(groups);
        let mut q = EventQueue::with_horizon(reach, PARTITION_SLOT_BITS);
        q.set_partition(crate::event::Partition::new(
            window,
            groups,
            g.node_group,
            host_group,
            flow_src,
            flow_dst,
        ));
        self.q = q;
    }

    /// Frames the hosts' NICs injected per priority: where the DSCP
    /// classification (`dscp_to_prio`, `data_dscp`) put the traffic.
    pub fn injected_by_prio(&self) -> [u64; 8] {
        self.injected_by_prio
    }

    /// CNPs the hosts' NICs injected per priority (`cnp_dscp`).
    pub fn cnps_by_prio(&self) -> [u64; 8] {
        self.cnps_by_prio
    }

    pub fn now(&self) -> Ps {
        self.q.now()
    }

    /// Events handled so far.
    pub fn events(&self) -> u64 {
        self.q.popped()
    }

    /// Flows finished so far.
    pub fn finished(&self) -> usize {
        self.finished
    }

    pub fn n_flows(&self) -> usize {
        self.flows.len()
    }

    /// True when every flow finished, the stop time passed, or a deadlock
    /// was found.
    pub fn done(&mut self) -> bool {
        self.halted || self.q.is_empty() || self.cfg.stop.is_some_and(|s| self.q.past(s))
    }

    /// Handles up to `max` events; returns how many ran.
    pub fn step(&mut self, max: u64) -> u64 {
        match self.shape() {
            shape::LEAN => self.step_as::<{ shape::LEAN }>(max),
            shape::LEAN_INT => self.step_as::<{ shape::LEAN_INT }>(max),
            _ => self.step_as::<{ shape::GENERAL }>(max),
        }
    }

    /// [`step`](Self::step) in variant `V` (see [`shape`]).
    #[inline(never)]
    fn step_as<const V: u8>(&mut self, max: u64) -> u64 {
        // `done`, with the stop time checked as the event is taken.
        let stop = self.cfg.stop.unwrap_or(Ps::MAX);
        let mut n = 0;
        while n < max && !self.halted {
            let Some((now, p)) = self.q.pop_packed_until_known(V != shape::GENERAL, stop) else {
                break;
            };
            if V == shape::GENERAL && now >= self.qlen_open_at {
                self.open_qlen_window();
            }
            self.prefetch_upcoming::<V>();
            #[cfg(any(test, debug_assertions))]
            let ev = self.q.event(p);
            #[cfg(test)]
            if let Some(t) = &mut self.trace {
                t.push((now, ev));
            }
            self.dispatch::<V>(p);
            #[cfg(debug_assertions)]
            self.check_hosts_scheduled(ev);
            debug_assert!(
                V == shape::GENERAL || self.shape() == V,
                "a run feature the lean loop leaves out switched on within a step"
            );
            // The flag is exactly the conditions it stands for, set no
            // earlier and no later than they become true.
            debug_assert_eq!(
                self.halted,
                self.deadlock.is_some() || self.finished == self.flows.len(),
                "halted flag out of step"
            );
            n += 1;
        }
        n
    }

    /// Runs to the end; a run that stalls (see [`outcome`](Self::outcome))
    /// is an error.
    pub fn run(&mut self) -> Result<(), SimError> {
        while !self.done() {
            self.step(u64::MAX);
        }
        self.outcome()
    }

    /// Once [`done`](Self::done): `Err(SimError::Stalled)` when the event
    /// queue emptied with flows unfinished, before any stop time and with
    /// no deadlock found — something the simulation should have woken was
    /// never woken.
    pub fn outcome(&self) -> Result<(), SimError> {
        if !self.q.is_empty() || self.halted {
            return Ok(());
        }
        let unfinished = self
            .flows
            .iter()
            .enumerate()
            .filter(|(_, f)| f.status.is_none());
        let first = unfinished
            .clone()
            .take(STALL_DETAIL)
            .map(|(i, f)| {
                let (src, dst) = (
                    &self.hosts[f.spec.src as usize],
                    &self.hosts[f.spec.dst as usize],
                );
                StalledFlow {
                    flow: i as u32,
                    src: f.spec.src,
                    dst: f.spec.dst,
                    size: f.spec.size,
                    delivered: self.flow_rx_bytes(i as u32),
                    sender: src.rnic.qp_status(f.src_qpn),
                    receiver: dst.rnic.qp_status(f.dst_qpn),
                    host_timer: src.timer_at,
                }
            })
            .collect();
        Err(SimError::Stalled(Box::new(Stall {
            at: self.q.now(),
            unfinished: unfinished.count(),
            flows: self.flows.len(),
            first,
        })))
    }

    /// The queue-length monitor's first sample is due (before the event at
    /// or after it runs): from here to its last sample every queue change
    /// is recorded, and it learns the lengths that held until now.
    #[cold]
    fn open_qlen_window(&mut self) {
        self.qlen_open_at = Ps::MAX;
        let Some(m) = &mut self.qlen else { return };
        let Some((_, last)) = m.window() else { return };
        self.qlen_until = last.saturating_add(1);
        self.watch_until = self.watch_until.max(self.qlen_until);
        hand_queue_lengths(m, &self.switches, &self.nodes);
    }

    /// The queue-length monitor's file. A run that ended before the
    /// window opened (all flows done, a deadlock, a stall) never handed
    /// the monitor the queues' lengths; they have held since, so every
    /// sample of the window reads them, as when each change was recorded.
    fn finish_qlen(&self, mut m: QlenMonitor) -> String {
        self.seed_unopened_qlen(&mut m);
        m.finish()
    }

    fn seed_unopened_qlen(&self, m: &mut QlenMonitor) {
        if self.qlen_open_at != Ps::MAX {
            hand_queue_lengths(m, &self.switches, &self.nodes);
        }
    }

    /// Starts loading what an event a few places ahead will read, so the
    /// cache misses overlap with handling the events before it. A
    /// pipeline over the calendar's slots: each stage reads only what the
    /// stage before loaded and asks for what that points at. Three slots
    /// ahead (as each slot comes up): an arrival's packet and transport
    /// headers, and the event's node. Two ahead: at a switch, the
    /// forwarding-table entry and the ingress buffer account; at a host,
    /// its record; a finishing port's serializer and queue lengths. One
    /// ahead: an arrival's egress port lines (its table entry has loaded),
    /// a finishing port's head frames. At 8,192 hosts (1,280 switches,
    /// 41,000 ports, millions of packets) each was a miss per packet per
    /// hop; none changes anything the simulation computes.
    ///
    /// Called at every event, it works once per calendar slot (as the
    /// queue moves to the next one): every stage's events are the same
    /// until then.
    ///
    /// In one burst per slot (about 100 events at 8,192 hosts), not
    /// spread over the slot's events. A perf sample at k=32 puts many of
    /// the look-ahead's samples right after its prefetches, so spreading
    /// was tried (session 18): cursors into each stage's slot, paced to
    /// finish by the current slot's last event, the current slot's own
    /// events a few ahead of the one running. The events' handlers did
    /// get faster (`step`'s own samples fell by a third), but the stages,
    /// run a few events at a time, stalled more on their own loads than
    /// the handlers gained: user time on the k=32 fat tree cut at 500 µs
    /// (51.7 M events) was 10.2-10.7 s in one burst against 12.3-13.2 s
    /// spread one event per stage per event, 11.5 s in chunks of 4, 11.0-
    /// 11.3 s in chunks of 16 (interleaved, same binary, load 1-2); on the
    /// k=16 tree cut at 2 ms, 6.3-6.7 s against 8.3-8.6 s. Spreading only
    /// the last stage or only the first cost 3-6 %; the order of the
    /// stages in a burst made no difference.
    ///
    /// There is no last stage for the slot being run (the tail an arrival
    /// is queued at, the ingress account a head frame is released from,
    /// the QP a host's event serves): loaded as the slot came up, it came
    /// too late for the slot's first events, and cost about 3 % of user
    /// time at k=32 (seven interleaved pairs, same binary: 0.95-1.01,
    /// mean 0.97 without it) while being even at k=16.
    ///
    /// What the look-ahead is worth at k=32 (cut at 500 µs, one binary
    /// with the stages switched off one at a time, session 19, load 5-7):
    /// 11.9 s of user time with all of it, 12.9-13.0 s without the later
    /// stages, 12.5 s without the arrival's egress port lines, 12.6 s
    /// without the ingress account, 17.1 s with no look-ahead at all. A
    /// perf profile puts nearly all of the stages' samples on the
    /// instruction right after a prefetch, not after the loads that form
    /// its address: the stages wait for room to start misses, not on
    /// dependent loads, so keeping what a stage needs elsewhere would not
    /// help. Two measured dead ends (session 19, same runs, interleaved):
    /// hinting every look-ahead line into L2 only (`_MM_HINT_T1`), though
    /// a burst of 800 such prefetches over 256 MB ran at 19 ns a line
    /// against 26 with `T0` on this machine, made no difference (user
    /// time 11.0-12.5 s with `T0`, 11.0-13.2 s with `T1`, six runs each);
    /// a stage more (looking four slots ahead: packet and node, then
    /// table and ingress account, then egress port, then the ingress
    /// account a head frame is released from, and optionally the
    /// egress queue's tail) was slower in every pair: 13.1-15.2 s with
    /// the released account, 13.4-14.1 s without it, 12.8-14.4 s with the
    /// tail too, against 12.3-12.8 s (load 5). The other way, looking
    /// only two slots ahead and running both later stages over the next
    /// slot in one burst (the second after the first, whose loads have
    /// landed by the time it comes back to an event), was even: 11.5-13.6 s
    /// against 11.7-13.3 s, six interleaved pairs at load 6-7, ratios
    /// 0.93-1.05, mean 0.99.
    ///
    /// A measured dead end (session 29): spreading the later stages over
    /// the current slot's events (each event running its share of both,
    /// so the core had work between the misses the stages start) instead
    /// of running them in one burst as the slot begins. On the k=32 cut at
    /// 2.5 ms it took 95.9 s and 93.3 s of user time against 81.1 s and
    /// 86.1 s, two interleaved pairs: the burst is better.
    ///
    /// A measured dead end (session 21): a copy of each queue's head frame
    /// kept in the last eight bytes of the queue's line (refreshed from the
    /// ring at every dequeue), so that the one-slot-ahead stage could start
    /// loading, for a finishing switch port, the ingress account its head
    /// frame is released from (a demand miss that was a third of
    /// `start_tx`'s perf samples at k=32) and, when the frame may be ECN-
    /// marked, its packet (a quarter), without another stage. Outputs were
    /// identical; user time on the k=32 cut at 300 µs was 8-18 % higher in
    /// all three interleaved pairs (12.5 s against 10.6, 14.2 against 13.0,
    /// 13.8 against 12.7, load 4.5-5).
    ///
    /// With INT, a pass over the arrivals two slots ahead that read each
    /// packet (its line started a slot earlier) to start loading the hop
    /// a switch stamps and the first hop an ACK echoes (HPCC's `on_int`
    /// waits on that load) made the full fat5ms HPCC run slower: 8.73-
    /// 9.10 s of user time against 8.45-8.51 s, three interleaved rounds
    /// at load 1 (session 19). The hops are started at `host_rx`'s top
    /// and at the switch arrival instead. Narrowed to the ACKs reaching a
    /// host one slot ahead (whose echoed record's first load was 8.5 % of
    /// `step`'s `perf` samples on that run, `host_rx`'s own prefetch
    /// coming too late), a pass over that slot's events still cost more
    /// than it hid: 8.87-8.91 s against 8.23-8.30 s, three interleaved
    /// pairs (session 41).
    ///
    /// Three more ways to start that record from this look-ahead, each
    /// with the outputs unchanged, none kept (session 42, the fat5ms HPCC
    /// run, four interleaved pairs of user time each):
    /// - the record's number in a table by packet slot, written as the
    ///   ACK is made: `host_rx`'s wait went, and the table's own load
    ///   (written microseconds earlier, out of the caches) took its place
    ///   here; even, 8.49-8.70 s against 8.45-8.71 s;
    /// - that table cut to 4,096 entries (16 KB, which stays cached) and
    ///   written as the ACK leaves its last switch: 8.60-8.75 s against
    ///   8.43-8.72 s;
    /// - a record per packet slot, so that no load precedes the hint
    ///   (the receiver copying the data's hops out for its next ACK, the
    ///   ACK copying them into its own): 9.18-9.35 s against 8.61-8.78 s,
    ///   with a sixth of this function's samples on its prefetches.
    ///
    /// A prefetch waits for a free miss buffer, and at 320 hosts this
    /// function's already keep them busy, so a line added here delays the
    /// ones it already starts. What would help is fewer lines per event.
    /// Dropping the node's line (the 320-host tree's nodes stay cached)
    /// was even too: 8.47-8.61 s against 8.44-8.86 s.
    #[inline(always)]
    fn prefetch_upcoming<const V: u8>(&mut self) {
        if self.q.slot() != self.staged_slot {
            self.stage_slot::<V>();
        }
    }

    /// [`prefetch_upcoming`](Self::prefetch_upcoming) for a slot the
    /// queue just moved to.
    #[inline(never)]
    fn stage_slot<const V: u8>(&mut self) {
        self.staged_slot = self.q.slot();
        let (nodes, packets) = (&self.nodes, &self.packets);
        self.q.upcoming(|up| {
            // An arrival's headers and transport headers alike: a packet
            // is 32 bytes, aligned to 32, one line.
            //
            // Choosing the packet's line or the node's again without a
            // branch (an arrival or not is a toss-up for the predictor)
            // saved 0.4-1.7 M of cachegrind's simulated mispredicts on
            // the mid-size fat5ms run but cost 95 M instructions (11 an
            // event), and 1.3 % more user time on the full DCQCN run
            // (three interleaved pairs, session 18).
            //
            // The addresses are computed, not looked up: a hint needs no
            // bounds check (it never faults, and an event names a live
            // packet and a node anyway). Checked, they were two compares
            // and branches per event told (session 45).
            if let Some(pkt) = up.pkt {
                prefetch_addr(packets.addr_of(pkt as usize) as *const u8);
            }
            prefetch_addr(nodes.as_ptr().wrapping_add(up.node as usize) as *const u8);
        });
        // A measured dead end (session 46): with INT, prefetching the hops
        // each ACK brings back to its sender (the record's lines, which
        // `host_rx` copies, and where perf put a twelfth of the step
        // loop's samples on fat5ms HPCC), read from the packets of the
        // next slot or of the next event. In the two ways profiled the
        // stall went, but each way cost more than it saved: fat5ms HPCC
        // user time 7.99-8.08 s against 7.75-7.92 s with branches on the
        // event's kind (perf put the pass's samples on them), 8.03-8.18 s
        // against 7.89-7.94 s without them (on the instructions after its
        // prefetches, a slot's at once: as when the line fill buffers are
        // full), 8.03-8.11 s against 7.88-7.97 s one event ahead (three
        // interleaved pairs each).
        if V == shape::GENERAL && self.deep_prefetch {
            for d in [2, 1] {
                self.prefetch_stage(d);
            }
        }
    }

    /// The stage of [`prefetch_upcoming`](Self::prefetch_upcoming) for
    /// the events `d` (2 or 1) slots past the current one.
    fn prefetch_stage(&self, d: u64) {
        let (data, control) = (
            usize::from(self.cfg.data_prio & 7),
            usize::from(self.cfg.control_prio & 7),
        );
        let hash = matches!(self.cfg.ecmp, EcmpMode::Hash);
        for ev in self.q.pending_in(d) {
            match ev.kind() {
                Kind::Arrive => {
                    let (node, port, pkt, _) = ev.arrive();
                    let Some(ns) = self.nodes.get(node as usize) else {
                        continue;
                    };
                    if ns.host {
                        // The receiving host: its record and RNIC, then
                        // the QP's slots (see `roce_rnic`'s `prefetch`
                        // module).
                        let Some(h) = self.hosts.get(ns.index as usize) else {
                            continue;
                        };
                        if d == 2 {
                            prefetch_line(&h.path);
                            prefetch_line(&h.qp_flow);
                            h.rnic.prefetch_device(prefetch_addr);
                            if let Some(p) = self.packets.get(pkt as usize) {
                                prefetch_line(p);
                            }
                            continue;
                        }
                        let Some(qpn) = self.packets.get(pkt as usize).map(Packet::dest_qp_hint)
                        else {
                            continue;
                        };
                        h.rnic.prefetch_tables(prefetch_addr, Some(qpn));
                        if let Some(s) = qpn
                            .checked_sub(h.qpn_base)
                            .and_then(|i| h.qp_flow.get(i as usize))
                        {
                            prefetch_line(s);
                        }
                        continue;
                    }
                    let (Some(p), Some(sw)) = (
                        self.packets.get(pkt as usize),
                        self.switches.get(ns.index as usize),
                    ) else {
                        continue;
                    };
                    let prio = usize::from(
                        match self.cfg.switch_control_prio {
                            Some(c) if p.control() => c,
                            _ => p.prio(),
                        } & 7,
                    );
                    if d == 2 {
                        self.fib.prefetch(node as usize, p.dst());
                        if self.alphas_uniform {
                            sw.mmu.prefetch_account(usize::from(port), prio as u8);
                        } else {
                            sw.mmu.prefetch(usize::from(port), prio as u8);
                        }
                        continue;
                    }
                    if !hash || p.dst() as usize >= self.topo.n_hosts() {
                        continue;
                    }
                    let hops = self.fib.get(node as usize, p.dst());
                    if hops.is_empty() {
                        continue;
                    }
                    let Some(&seed) = self.switch_seeds.get(ns.index as usize) else {
                        continue;
                    };
                    let out = hops[ecmp::select(&tuple_of(p), seed, hops.len())];
                    if let Some(o) = ns.ports.get(usize::from(out)) {
                        prefetch_line(o);
                        prefetch_line(&o.q[prio]);
                    }
                }
                Kind::TxDone => {
                    let (node, port) = ev.tx_done();
                    let Some(ns) = self.nodes.get(node as usize) else {
                        continue;
                    };
                    let Some(p) = ns.ports.get(usize::from(port)) else {
                        continue;
                    };
                    if d == 2 {
                        // The serializer's line and the data queue's (the
                        // control queue's follows once the serializer's
                        // line says it holds a frame).
                        prefetch_line(p);
                        prefetch_line(&p.q[data]);
                        if ns.host
                            && let Some(h) = self.hosts.get(ns.index as usize)
                        {
                            prefetch_line(&h.path);
                            h.rnic.prefetch_device(prefetch_addr);
                        }
                        continue;
                    }
                    // A host's port finishing a frame polls its RNIC: the
                    // ready set and QP table.
                    if ns.host
                        && let Some(h) = self.hosts.get(ns.index as usize)
                    {
                        h.rnic.prefetch_tables(prefetch_addr, None);
                    }
                    // The data queue's head frame; the control queue's
                    // line only when it holds a frame (at most wake-ups it
                    // is empty, and loading its line for every one was a
                    // fetch for nothing).
                    if let Some(e) = p.head(data) {
                        prefetch_line(e);
                    }
                    if p.holds(control) {
                        prefetch_line(&p.q[control]);
                    }
                }
                _ => {}
            }
        }
    }

    /// Runs the event `p` popped: one branch on its kind straight into
    /// the handler of the two kinds that are nearly every event, read
    /// from the packed form (see [`crate::event::Packed`]); the others as
    /// an [`Event`], through [`handle`](Self::handle).
    ///
    /// Inlined into `step`'s loop, its only caller, so that an event does
    /// not pay a call's register saves and restores.
    ///
    /// The two hot handlers are inlined here only (the rare path hands a
    /// spilled arrival or transmission back to them rather than calling
    /// them itself): a second call site kept the compiler from inlining
    /// `switch_rx` into the loop.
    #[inline(always)]
    fn dispatch<const V: u8>(&mut self, p: Packed) {
        let (node, port, pkt, arrive) = match p.kind() {
            Kind::Arrive => {
                let (node, port, pkt, ce) = p.arrive();
                self.mark_arrival(pkt, ce);
                (node, port, pkt, true)
            }
            Kind::TxDone => {
                let (node, port) = p.tx_done();
                (node, port, 0, false)
            }
            _ => match self.handle::<V>(p) {
                Some(hot) => hot,
                None => return,
            },
        };
        if arrive {
            self.on_arrive::<V>(node, port, pkt);
        } else {
            self.on_tx_done::<V>(node, port);
        }
    }

    /// Sets the Congestion Experienced mark that packet `pkt` picked up
    /// on its way out of the last hop (`ce`; see [`Event::Arrive`] for why
    /// it is set only now). No branch: about one arrival in seven at
    /// 8,192 hosts carries a mark, a toss-up the predictor would miss,
    /// and the packet's line is in cache for the arrival's own reads.
    #[inline(always)]
    fn mark_arrival(&mut self, pkt: u32, ce: bool) {
        if let Some(p) = self.packets.get_mut(pkt as usize) {
            p.mark_ce_if(ce);
        }
    }

    /// The last bit of packet `pkt` reached `node`'s `port`.
    #[inline(always)]
    fn on_arrive<const V: u8>(&mut self, node: u32, port: u16, pkt: u32) {
        // Each event looks its node up once: the count by kind, the
        // dispatch and the handler read the same record.
        let ns = &self.nodes[node as usize];
        let (host, index) = (ns.host, ns.index);
        self.by_kind[KIND_SWITCH_ARRIVE + usize::from(host)] += 1;
        // A frame on the wire when its link went down, or lost on a lossy
        // link (ns-3's `QbbNetDevice::Receive`: what a down device
        // receives, and what its error model corrupts, goes no further).
        if V == shape::GENERAL && self.arrive_checks && self.arrival_watched_lost(node, port, pkt) {
            self.drop_packet(pkt, "lost");
            return;
        }
        if host {
            self.host_rx::<V>(index, pkt);
        } else {
            self.switch_rx::<V>(node, index as usize, port, pkt);
        }
    }

    /// `node`'s `port` finished serializing a frame.
    #[inline(always)]
    fn on_tx_done<const V: u8>(&mut self, node: u32, port: u16) {
        let now = self.q.now();
        let ns = &mut self.nodes[node as usize];
        let (host, index) = (ns.host, ns.index);
        self.by_kind[KIND_SWITCH_TX_DONE + usize::from(host)] += 1;
        let p = &mut ns.ports[usize::from(port)];
        // A wake-up from an earlier busy period: the serializer has
        // started another frame since, and that frame's wake-up (if one
        // is needed) is already scheduled.
        if now < p.busy_until {
            return;
        }
        p.wake_pending = false;
        // `kick` at a free serializer, with the port in hand.
        let sched = shape::scheduler::<V>(&self.cfg);
        if host {
            self.kick_host::<V>(node, index, now);
        } else if let Some(prio) = p.pick(now, sched) {
            self.start_tx::<V>(node, port, prio);
        }
    }

    /// Runs `p`, of a kind [`dispatch`](Self::dispatch) does not read
    /// packed (or spilled to the queue's side table), except an arrival
    /// or a finished transmission: those it hands back, as `(node, port,
    /// packet, arrival)`, for `dispatch` to run.
    #[inline(never)]
    fn handle<const V: u8>(&mut self, p: Packed) -> Option<(u32, u16, u32, bool)> {
        match self.q.take(p) {
            Event::FlowStart { flow } => {
                self.by_kind[KIND_OTHER] += 1;
                self.start_flow(flow)
            }
            Event::FlowAccept { flow } => {
                self.by_kind[KIND_OTHER] += 1;
                self.accept_flow(flow)
            }
            Event::Arrive {
                node,
                port,
                pkt,
                ce,
            } => {
                self.mark_arrival(pkt, ce);
                return Some((node, port, pkt, true));
            }
            Event::TxDone { node, port } => return Some((node, port, 0, false)),
            Event::HostTimer { host, version } => {
                self.by_kind[KIND_HOST_TIMER] += 1;
                let h = &mut self.hosts[host as usize];
                if h.timer_version == version {
                    h.timer_at = None;
                    let now_ns = self.q.now() / PS_PER_NS;
                    h.rnic.handle_timeout(now_ns);
                    self.after_host::<V>(host);
                }
            }
            Event::PfcArrive {
                node,
                port,
                prio,
                quanta,
            } => {
                self.by_kind[KIND_OTHER] += 1;
                self.pfc_rx(node, port, prio, quanta)
            }
            Event::PauseEnd {
                node,
                port,
                prio,
                version,
            } => {
                self.by_kind[KIND_OTHER] += 1;
                let now = self.q.now();
                let p = &mut self.nodes[node as usize].ports[usize::from(port)];
                let pi = usize::from(prio);
                if p.pause_version[pi] == version {
                    if let Some(s) = p.pause_started[pi].take() {
                        p.paused_ps[pi] += now - s;
                    }
                    p.q[pi].paused_until = 0;
                    self.log_pfc(node, port, prio, "expire");
                    self.kick::<{ shape::GENERAL }>(node, port);
                }
            }
            Event::PfcRefresh {
                node,
                port,
                prio,
                version,
            } => {
                self.by_kind[KIND_OTHER] += 1;
                let ns = &self.nodes[node as usize];
                let p = &ns.ports[usize::from(port)];
                let still = if ns.host {
                    // A host pausing its ToR because its RX buffer is full.
                    self.hosts[ns.index as usize]
                        .path
                        .as_ref()
                        .is_some_and(|h| h.rx_xoff)
                } else {
                    self.switches[ns.index as usize]
                        .mmu
                        .is_xoff(usize::from(port), prio)
                };
                if p.refresh_version[usize::from(prio)] == version && still {
                    self.send_pfc(node, port, prio, true);
                }
            }
            Event::Sample => {
                self.by_kind[KIND_OTHER] += 1;
                self.sample()
            }
            Event::HostRxDrain { host } => {
                self.by_kind[KIND_OTHER] += 1;
                self.host_rx_drain(host)
            }
            Event::LinkDown { node, port } => {
                self.by_kind[KIND_OTHER] += 1;
                self.link_down(node, port)
            }
        }
        None
    }

    // ---- link failures -----------------------------------------------------

    /// [`arrival_lost`](Self::arrival_lost) for packet `pkt`, with its
    /// record in ns-3's packet trace: `Drop` where the link is down
    /// (ns-3's `QbbNetDevice::Receive`), `Recv` where it arrives (a frame
    /// its error model loses is traced by neither).
    #[inline(never)]
    fn arrival_watched_lost(&mut self, node: u32, port: u16, pkt: u32) -> bool {
        use crate::ns3_trace::TraceEvent;
        if self.ptrace.is_none() {
            return self.arrival_lost(node, port);
        }
        if self.is_down(node, port) {
            self.trace_packet(TraceEvent::Drop, node, port, 0, 0, pkt, false);
            return true;
        }
        if self.arrival_lost(node, port) {
            return true;
        }
        let qlen = self.nodes[node as usize].ports[usize::from(port)].qbytes(0);
        self.trace_packet(TraceEvent::Recv, node, port, 0, qlen, pkt, false);
        false
    }

    /// Whether `node`'s `port` is on a link that went down.
    fn is_down(&self, node: u32, port: u16) -> bool {
        self.down_ports.contains(&(node, port))
    }

    /// Whether a frame reaching `node`'s `port` is lost: its link is down,
    /// or lossy and the frame drawn to be lost (ns-3's `RateErrorModel` in
    /// packets: lost when a uniform draw falls below the rate).
    #[inline(never)]
    fn arrival_lost(&mut self, node: u32, port: u16) -> bool {
        if self.is_down(node, port) {
            return true;
        }
        let link = self.topo.ports[node as usize][usize::from(port)].link;
        let p = self.cfg.link_loss.get(link).copied().unwrap_or(0.0);
        p > 0.0 && crate::workload::uniform(&mut self.loss_rng) < p
    }

    /// The link at `node`'s `port` goes down, as the HPCC ns-3 simulator's
    /// `TakeDownLink` takes it down (third.cc): both ports stop sending and
    /// receiving (a frame on the wire is lost at the far end: see
    /// [`on_arrive`](Self::on_arrive)); the frames queued at either are
    /// dropped and their pauses lifted (`QbbNetDevice::TakeDown`); and every
    /// switch's routes are computed again without the link, in ns-3's order
    /// of next hops under its ECMP. The senders recover what is lost with
    /// go-back-N, on a NAK or their retransmission timeout.
    ///
    /// Where this differs from ns-3 on purpose: the dropped frames leave
    /// the switch's buffer accounts (ns-3's `TakeDown` empties the queue
    /// without releasing them, so their bytes stay counted at their ingress
    /// ports for the rest of the run); and a flow whose last packets were
    /// lost finishes after the RNIC's timeout, where ns-3, which has none,
    /// never finishes it.
    #[cold]
    #[inline(never)]
    fn link_down(&mut self, node: u32, port: u16) {
        if self.is_down(node, port) {
            return;
        }
        let now = self.q.now();
        // Every link between the two switches (ns-3 keeps one interface
        // per neighbour and takes the neighbour's routes down with it).
        let peer = self.nodes[node as usize].ports[usize::from(port)].peer;
        let ends: Vec<(u32, u16)> = (self.nodes[node as usize].ports.iter().enumerate())
            .filter(|(_, p)| p.peer == peer)
            .flat_map(|(i, p)| [(node, i as u16), (p.peer, p.peer_port)])
            .collect();
        self.down_ports.extend(&ends);
        self.any_down = true;
        self.arrive_checks = true;
        for (n, pt) in ends {
            let ns = &self.nodes[n as usize];
            if ns.host {
                continue;
            }
            let sw = ns.index as usize;
            let held = ns.ports[usize::from(pt)].queued_pkts() > 0;
            for prio in 0..NPRIO {
                while let Some(e) = self.nodes[n as usize].ports[usize::from(pt)].dequeue(prio) {
                    let frame = u64::from(e.frame());
                    let xon = (self.switches[sw].mmu).release_check_xon(
                        usize::from(e.ingress),
                        prio as u8,
                        frame,
                    );
                    if xon {
                        self.send_pfc(n, e.ingress, prio as u8, false);
                    }
                    let qlen = self.nodes[n as usize].ports[usize::from(pt)].qbytes(prio);
                    let ev = crate::ns3_trace::TraceEvent::Drop;
                    self.trace_packet(ev, n, pt, prio as u8, qlen, e.pkt, false);
                    self.drop_packet(e.pkt, "link down");
                }
            }
            if held {
                self.switch_ports_queued[sw] -= 1;
            }
            if now < self.qlen_until
                && let Some(m) = &mut self.qlen
            {
                m.record(now, sw, usize::from(pt), 0);
            }
            let p = &mut self.nodes[n as usize].ports[usize::from(pt)];
            let mut lifted = 0u8;
            for prio in 0..NPRIO {
                if let Some(s) = p.pause_started[prio].take() {
                    p.paused_ps[prio] += now - s;
                    lifted |= 1 << prio;
                }
                p.q[prio].paused_until = 0;
                p.pause_version[prio] = p.pause_version[prio].wrapping_add(1);
                p.refresh_version[prio] = p.refresh_version[prio].wrapping_add(1);
            }
            // `pfc.csv` ends each lifted pause (ns-3 traces nothing here,
            // and its PFC file gets no line).
            for prio in (0..NPRIO as u8).filter(|&q| lifted & (1 << q) != 0) {
                self.log_pfc(n, pt, prio, "down");
            }
        }
        let down = &self.down_ports;
        let is_up = |n: usize, p: usize| {
            !down
                .iter()
                .any(|&(a, b)| a as usize == n && b as usize == p)
        };
        let topo = &self.topo;
        let mut routes = topo.routes_over(is_up);
        if matches!(self.cfg.ecmp, EcmpMode::Ns3 { .. }) {
            crate::fib::reorder(&mut routes, topo, |h| {
                ecmp::ns3::next_hop_order_over(
                    topo,
                    h,
                    |x| ecmp::ns3::ns3_pointer_rank(topo, x),
                    is_up,
                )
            });
        }
        self.fib = Fib::new(topo, routes);
    }

    // ---- hosts -------------------------------------------------------------

    /// Flow `flow` starts. Its calls into both hosts' RNICs do not all go
    /// through [`after_host`](Self::after_host) (the receiver's do not),
    /// so both hosts' skipped wake-ups are settled here, before (the
    /// calls read the RNIC's clock) and after.
    ///
    /// Out of line: it runs once per flow, and inlined into the event
    /// loop its QP setup (and every congestion controller's constructor)
    /// took part in that loop's register allocation, so a change to a
    /// constructor moved the per-packet code's instruction counts.
    #[inline(never)]
    #[cold]
    fn start_flow(&mut self, flow: u32) {
        let s = &self.flows[flow as usize].spec;
        let (src, dst) = (s.src, s.dst);
        // In a partitioned run the receiver, in another group, made its
        // side a window before (`accept_flow`); its scheduling is not
        // touched here.
        let ends = if self.q.partition().is_some() {
            [Some(src), None]
        } else {
            [Some(src), Some(dst)]
        };
        for h in ends.into_iter().flatten() {
            if self.hosts[h as usize].wake_seq != 0 {
                self.settle_wake_slow(h);
            }
        }
        self.start_flow_inner(flow);
        for h in ends.into_iter().flatten() {
            if self.hosts[h as usize].wake_seq != 0 {
                self.settle_wake_slow(h);
            }
        }
    }

    /// A partitioned run's receiver side of a flow (see
    /// [`Event::FlowAccept`]): its QP and memory region, and a SEND
    /// flow's receive requests. The sender connects the QP when the flow
    /// starts: the QP has nothing to do until the flow's first packet,
    /// at least a link between groups later, so that write reaches a QP
    /// no event of its own group reads before then.
    fn accept_flow(&mut self, flow: u32) {
        let dst = self.flows[flow as usize].spec.dst;
        if self.hosts[dst as usize].wake_seq != 0 {
            self.settle_wake_slow(dst);
        }
        self.accept_flow_inner(flow);
        if self.hosts[dst as usize].wake_seq != 0 {
            self.settle_wake_slow(dst);
        }
    }

    fn accept_flow_inner(&mut self, flow: u32) {
        let spec = self.flows[flow as usize].spec;
        let (dq, dmr) = match self.flow_qp(flow, spec.dst, RECEIVER_ACCESS, None) {
            Ok(r) => r,
            Err(e) => {
                self.fail_flow(flow, WcStatus::GeneralErr, &e.to_string());
                return;
            }
        };
        let fs = &mut self.flows[flow as usize];
        fs.dst_qpn = dq;
        fs.dst_lkey = dmr.lkey;
        fs.dst_rkey = dmr.rkey;
        fs.dst_addr = dmr.addr;
        fs.accepted = true;
        if self.post_flow_recvs(flow, dq, dmr.addr, dmr.lkey) {
            self.map_qp(spec.dst, dq, flow);
        }
    }

    /// A QP (in INIT) and a memory region with `access` for one end of
    /// `flow` at `host`.
    fn flow_qp(
        &mut self,
        flow: u32,
        host: u32,
        access: Access,
        cc: Option<Box<dyn roce_rnic::CongestionControl>>,
    ) -> roce_rnic::Result<(u32, roce_rnic::Mr)> {
        let fs = &self.flows[flow as usize];
        let (spec, sport) = (fs.spec, fs.sport);
        let dscp = self
            .cfg
            .data_dscp
            .map_or(self.cfg.data_prio << 3, |d| d & 63);
        let recovery = self.cfg.recovery;
        let (msgs, _) = self.messages(spec.size);
        let depth = 4.max(msgs as u32);
        let h = &mut self.hosts[host as usize];
        let buf = h.rnic.mem_mut().alloc(spec.size);
        let mr = h.rnic.reg_mr(h.pd, buf, spec.size, access)?;
        let mut init = QpInitAttr::new(QpType::Rc, h.pd, h.cq, h.cq);
        init.max_send_wr = depth;
        init.max_recv_wr = depth;
        init.recovery = recovery;
        let qpn = match cc {
            Some(cc) => h.rnic.create_qp_with_cc(init, cc)?,
            None => h.rnic.create_qp(init)?,
        };
        let mut a = QpAttr::init(Access::ALL);
        a.udp_sport = Some(sport);
        a.dscp = Some(dscp);
        h.rnic.modify_qp(qpn, QpState::Init, &a)?;
        Ok((qpn, mr))
    }

    fn start_flow_inner(&mut self, flow: u32) {
        let fs = &self.flows[flow as usize];
        let spec = fs.spec;
        if fs.status.is_some() {
            // Failed as its receiver accepted it.
            return;
        }
        if !fs.accepted {
            // Not accepted ahead (a run in time order): the receiver's
            // side now, as a partitioned run's `FlowAccept` does.
            self.accept_flow_inner(flow);
            if self.flows[flow as usize].status.is_some() {
                return;
            }
        }
        let fs = &self.flows[flow as usize];
        let (dq, dst_addr, dst_rkey) = (fs.dst_qpn, fs.dst_addr, fs.dst_rkey);
        let mtu = self.cfg.mtu;
        let (timeout, retry) = (self.cfg.qp_timeout, self.cfg.retry_cnt);
        let (msgs, msg_len) = self.messages(spec.size);
        let src_node = self.hosts[spec.src as usize].node as usize;
        let line = self.nodes[src_node].ports[0].rate_bps;
        let cc = match self.cc {
            CcPlan::None => None,
            _ => {
                let (topo, cache) = (&self.topo, &mut self.hops_from);
                let hops = || {
                    // Every path from a host with a single switch link runs
                    // through that switch: one switch more than from it.
                    let (from_node, extra) = match topo.ports[src_node].as_slice() {
                        [l] if topo.nodes[l.peer].kind == NodeKind::Switch => (l.peer, 1),
                        _ => (src_node, 0),
                    };
                    let from = cache
                        .entry(from_node)
                        .or_insert_with(|| crate::cc::switch_hops_from(topo, from_node));
                    from[topo.hosts[spec.dst as usize]] + extra
                };
                // The flow's own draws (HPCC-PINT's ACK sampling).
                let seed = self.cfg.seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) ^ u64::from(flow);
                let plan = match self.pair_t.get(flow as usize) {
                    Some(&(rtt_ns, _)) => self.cc.with_base_rtt(rtt_ns),
                    None => self.cc,
                };
                Some(plan.controller_seeded(line, hops, seed))
            }
        };
        // ns-3's window (HAS_WIN) over a rate-based controller, or over
        // none.
        let cc = match self.cfg.ns3_window {
            Some(w) => Some(Box::new(roce_rnic::cc::BdpWindow {
                inner: cc.unwrap_or_else(|| Box::new(roce_rnic::cc::NoCc)),
                window: self.pair_t.get(flow as usize).map_or(w.bytes, |p| p.1),
                var_win: w.var_win,
                line_bps: line,
            }) as Box<dyn roce_rnic::CongestionControl>),
            None => cc,
        };
        // The NIC's per-QP shaper (`ibv_modify_qp_rate_limit`) over
        // whatever congestion control the QP has.
        let cc = match self.cfg.qp_rate_limit_bps {
            Some(cap_bps) => Some(Box::new(roce_rnic::cc::RateLimit {
                inner: cc.unwrap_or_else(|| Box::new(roce_rnic::cc::NoCc)),
                cap_bps,
            }) as Box<dyn roce_rnic::CongestionControl>),
            None => cc,
        };
        let (sq, smr) = match self.flow_qp(flow, spec.src, Access::LOCAL_WRITE, cc) {
            Ok(s) => s,
            Err(e) => {
                self.fail_flow(flow, WcStatus::GeneralErr, &e.to_string());
                return;
            }
        };
        let connect =
            |h: &mut Host, me: u32, peer_host: u32, peer_qpn: u32| -> roce_rnic::Result<()> {
                let ah = SocketAddr::new(IpAddr::V4(host_ip(peer_host)), ROCE_PORT);
                h.rnic
                    .modify_qp(me, QpState::Rtr, &QpAttr::rtr(ah, peer_qpn, 0, mtu))?;
                let mut rts = QpAttr::rts(0);
                rts.timeout = Some(timeout);
                rts.retry_cnt = Some(retry);
                h.rnic.modify_qp(me, QpState::Rts, &rts)
            };
        let r = connect(&mut self.hosts[spec.dst as usize], dq, spec.src, sq)
            .and_then(|_| connect(&mut self.hosts[spec.src as usize], sq, spec.dst, dq));
        if let Err(e) = r {
            self.fail_flow(flow, WcStatus::GeneralErr, &e.to_string());
            return;
        }
        // Message `i` of the flow: wr_id carries `i` above the flow id.
        let signal_every = u64::from(self.cfg.signal_every.max(1));
        let mut wrs = Vec::with_capacity(msgs as usize);
        for i in 0..msgs {
            let off = i * msg_len;
            let len = msg_len.min(spec.size - off) as u32;
            let wr_id = (i << 32) | u64::from(flow);
            let sge = Sge {
                addr: smr.addr + off,
                length: len,
                lkey: smr.lkey,
            };
            let wr = match spec.op {
                FlowOp::Write => SendWr::new(
                    wr_id,
                    WrOpcode::RdmaWrite {
                        remote_addr: dst_addr + off,
                        rkey: dst_rkey,
                    },
                    vec![sge],
                ),
                FlowOp::Send => SendWr::new(wr_id, WrOpcode::Send, vec![sge]),
            };
            let last = i + 1 == msgs;
            wrs.push(if last || (i + 1) % signal_every == 0 {
                wr
            } else {
                wr.unsignaled()
            });
        }
        let fs = &mut self.flows[flow as usize];
        fs.src_qpn = sq;
        fs.src_lkey = smr.lkey;
        fs.src_addr = smr.addr;
        self.map_qp(spec.src, sq, flow);
        if let Err(e) = self.hosts[spec.src as usize].rnic.post_send(sq, &wrs) {
            self.fail_flow(flow, WcStatus::GeneralErr, &e.to_string());
            return;
        }
        if let Some(hp) = &mut self.hosts[spec.src as usize].path {
            hp.post(self.q.now(), msgs);
        }
        self.after_host::<{ shape::GENERAL }>(spec.src);
    }

    /// A SEND flow's receive requests at its receiver, QP `dq` with its
    /// region at `addr` (`lkey`), one per message; false if the flow
    /// failed.
    fn post_flow_recvs(&mut self, flow: u32, dq: u32, addr: u64, lkey: u32) -> bool {
        let spec = self.flows[flow as usize].spec;
        if spec.op != FlowOp::Send {
            return true;
        }
        let (msgs, msg_len) = self.messages(spec.size);
        let rwrs: Vec<RecvWr> = (0..msgs)
            .map(|i| {
                let off = i * msg_len;
                RecvWr {
                    wr_id: (i << 32) | u64::from(flow),
                    sg_list: vec![Sge {
                        addr: addr + off,
                        length: msg_len.min(spec.size - off) as u32,
                        lkey,
                    }],
                }
            })
            .collect();
        if let Err(e) = self.hosts[spec.dst as usize].rnic.post_recv(dq, &rwrs) {
            self.fail_flow(flow, WcStatus::GeneralErr, &e.to_string());
            return false;
        }
        if let Some(hp) = &mut self.hosts[spec.dst as usize].path {
            hp.post_recv(self.q.now(), msgs);
        }
        true
    }

    /// Files `host`'s QP `qpn` as `flow`'s end.
    ///
    /// The QP's context in the RNIC (handed back with each packet it
    /// sends) is [`QpContext`]: the flow and, under ns-3's ECMP, the ports
    /// its packets carry in this direction. Each packet sent once read the
    /// flow from `qp_flow` and the ports from `ns3_flows`, two lines that
    /// missed the cache (the loads behind 8.7 % and 9.1 % of `kick_host`'s
    /// `perf` samples on the fat5ms HPCC run, session 42).
    fn map_qp(&mut self, host: u32, qpn: u32, flow: u32) {
        let ports = self.ns3_flows.get(flow as usize).map_or(0, |f| {
            if host == f.src {
                f.ports
            } else {
                f.ports.rotate_left(16)
            }
        });
        let context = QpContext { flow, ports }.pack();
        let host = &mut self.hosts[host as usize];
        let set = host.rnic.set_qp_context(qpn, context);
        debug_assert!(set.is_ok(), "QP {qpn} was just made");
        if host.qp_flow.is_empty() {
            host.qpn_base = qpn;
        }
        let i = (qpn - host.qpn_base) as usize;
        if host.qp_flow.len() <= i {
            host.qp_flow.resize(i + 1, QpSlot::NONE);
        }
        host.qp_flow[i].flow = flow;
    }

    /// How many messages a flow of `size` bytes is sent as, and their
    /// length (the last may be shorter): one, unless `message_bytes` splits
    /// it (at most a send queue's depth of them).
    fn messages(&self, size: u64) -> (u64, u64) {
        match self.cfg.message_bytes {
            None => (1, size),
            Some(m) => {
                let n = size
                    .div_ceil(m.max(1))
                    .clamp(1, u64::from(self.cfg.rnic.max_qp_wr));
                (n, size.div_ceil(n))
            }
        }
    }

    fn fail_flow(&mut self, flow: u32, status: WcStatus, why: &str) {
        let f = &mut self.flows[flow as usize];
        if f.status.is_none() {
            f.status = Some(status);
            f.finish = Some(self.q.now());
            self.finished += 1;
            self.halted |= self.finished == self.flows.len();
            self.counters.failed_flows += 1;
            if self.counters.first_error.is_none() {
                self.counters.first_error = Some(format!("flow {flow}: {why}"));
            }
        }
    }

    fn flow_of(&self, host: u32, qpn: u32) -> u32 {
        self.qp_slot(host, qpn).map_or(u32::MAX, |s| s.flow)
    }

    /// The slot of local QP `qpn` of `host`, if it was ever given a flow's.
    fn qp_slot(&self, host: u32, qpn: u32) -> Option<&QpSlot> {
        let h = self.hosts.get(host as usize)?;
        h.qp_flow.get(qpn.checked_sub(h.qpn_base)? as usize)
    }

    /// Payload bytes delivered for `flow` so far (its two QPs' counts).
    fn flow_rx_bytes(&self, flow: u32) -> u64 {
        let Some(f) = self.flows.get(flow as usize) else {
            return 0;
        };
        [(f.spec.src, f.src_qpn), (f.spec.dst, f.dst_qpn)]
            .into_iter()
            .filter_map(|(h, q)| self.qp_slot(h, q))
            .filter(|s| s.flow == flow)
            .map(|s| s.rx_bytes)
            .sum()
    }

    fn host_rx<const V: u8>(&mut self, host: u32, pkt: u32) {
        let now = self.q.now();
        let h = &self.hosts[host as usize];
        // The host port's frame end, which `after_host` reads once the
        // RNIC is done: start loading it now, under the RNIC's work (the
        // node's line is the calendar's look-ahead's; the port's, in an
        // allocation of its own, was a stall there, perf on fat-tree HPCC).
        if let Some(p) = self
            .nodes
            .get(h.node as usize)
            .and_then(|n| n.ports.first())
        {
            prefetch_line(&p.busy_until);
        }
        if V == shape::GENERAL && h.path.is_some() && !self.host_rx_admit(host, pkt) {
            return;
        }
        let p = self.take_packet(pkt);
        // A multi-homed host's NICs share one RDMA stack (ns-3's `RdmaHw`
        // behind all of a host's devices): a packet the fabric brought to
        // one NIC goes to the QP at the NIC it is addressed to, whose port
        // then sends what the QP answers.
        let host = if V == shape::GENERAL && self.topo.multi_homed {
            p.dst()
        } else {
            host
        };
        let (int, payload) = (p.int(), p.payload());
        // The ACK's echoed hops, which its QP's controller reads after the
        // RNIC has handled the ACK itself: start loading them now. Their
        // first, middle and last lines (all three of a full record's), at
        // fixed places and for data too (the scratch record's, which a
        // data packet's own hops are not read here): a loop over the hops
        // and a branch on ACK or data both mispredicted, as ACKs and data
        // arrive in no order and paths differ in length.
        let rec = if payload == 0 { int.rec } else { INT_SCRATCH };
        if shape::int_on::<V>(&self.cfg)
            && let Some(r) = self.ints.get(rec as usize)
        {
            let last = usize::from(int.len).saturating_sub(1) & (MAX_INT_HOPS - 1);
            prefetch_line(&r.hops[0]);
            prefetch_line(&r.hops[last.div_ceil(2)]);
            prefetch_line(&r.hops[last]);
        }
        let repr = p.repr(&self.exts);
        self.counters.delivered_bytes += u64::from(p.frame());
        self.counters.delivered_pkts += 1;
        // Data belongs to the flow of the QP it is for (only data reads
        // its flow here).
        let flow = if payload > 0 {
            let h = &mut self.hosts[host as usize];
            match (repr.bth.dest_qp.checked_sub(h.qpn_base))
                .and_then(|i| h.qp_flow.get_mut(i as usize))
            {
                Some(s) if s.flow != u32::MAX => {
                    s.rx_bytes += u64::from(payload);
                    self.counters.delivered_payload += u64::from(payload);
                    s.flow
                }
                _ => u32::MAX,
            }
        } else {
            u32::MAX
        };
        let src = SocketAddr::new(IpAddr::V4(host_ip(p.src())), ROCE_PORT);
        let now_ns = now / PS_PER_NS;
        let rnic = &mut self.hosts[host as usize].rnic;
        let ce = p.ce();
        let payload = PayloadRef::Virtual(payload);
        if let Some(code) = int.pint_code() {
            // HPCC-PINT: an ACK's code goes to its QP's controller; data's
            // is kept for the flow's next ACK (ns-3's receiver copies the
            // data's INT header into its ACK).
            if p.payload() == 0 {
                rnic.handle_packet_telemetry(
                    now_ns,
                    src,
                    ce,
                    &repr,
                    payload,
                    Telemetry::Pint(code),
                );
            } else {
                rnic.handle_packet(now_ns, src, ce, &repr, payload);
                if let Some(f) = self.flows.get_mut(flow as usize)
                    && f.status.is_none()
                {
                    f.echo_int = IntRef::pint(code);
                }
            }
        } else if int.is_some() && p.payload() == 0 {
            // An ACK echoing the telemetry of the data it acknowledges:
            // the sending QP's controller reads it (after the ACK itself,
            // as in HPCC ns-3's ReceiveAck).
            //
            // A measured dead end (session 41): the ACK handed to the
            // RNIC first (`handle_packet`, then `handle_int` with the
            // hops), so that the record's lines, started at this
            // function's top, land under the ACK's own work. The first
            // load of the record was 8.5 % of `step`'s `perf` samples on
            // the fat5ms HPCC run; the user time came out even (seven
            // interleaved pairs, 8.25-8.39 s against 8.28-8.54 s).
            let n = usize::from(int.len).min(MAX_INT_HOPS);
            let mut hops = [IntHop::default(); MAX_INT_HOPS];
            if let Some(r) = self.ints.get(int.rec as usize) {
                for (h, s) in hops.iter_mut().zip(&r.hops[..n]) {
                    *h = s.hop(&self.int_rates);
                }
            }
            rnic.prefetch_cc(prefetch_addr, repr.bth.dest_qp);
            let hops = Telemetry::Int(&hops[..n]);
            rnic.handle_packet_telemetry(now_ns, src, ce, &repr, payload, hops);
            self.int_free.push(int.rec);
        } else {
            rnic.handle_packet(now_ns, src, ce, &repr, payload);
            if int.is_some() {
                // Data: the receiver keeps the telemetry for its next ACK.
                self.counters.int_hops += u64::from(int.len);
                if let Some(f) = self.flows.get_mut(flow as usize)
                    && f.status.is_none()
                {
                    let old = std::mem::replace(&mut f.echo_int, int);
                    if old.is_some() {
                        self.int_free.push(old.rec);
                    }
                } else {
                    self.int_free.push(int.rec);
                }
            }
        }
        self.after_host::<V>(host);
    }

    /// After anything touched a host: retire completions, feed the port,
    /// re-arm the timer.
    ///
    /// Measured dead end (session 20): inlining this body into `host_rx`
    /// (three quarters of its calls, one per packet received), to spare
    /// the call's 16 instructions of register saves and restores, cost
    /// 42 M instructions more on the 1 ms HPCC fat tree (16.067 G to
    /// 16.109 G): the larger `host_rx` spilled more than the call cost.
    fn after_host<const V: u8>(&mut self, host: u32) {
        let now = self.q.now();
        let h = &mut self.hosts[host as usize];
        // The count first: it is on the RNIC's first lines, which the
        // calendar's look-ahead loaded; the CQ's own tree node is not.
        if h.rnic.has_completions() && h.rnic.cq_len(h.cq) > 0 {
            let wcs = h.rnic.poll_cq(h.cq, usize::MAX);
            for wc in wcs {
                // With a profile the application sees a CQE once its write
                // and the CPU's polling are done.
                let seen = match &mut self.hosts[host as usize].path {
                    Some(hp) if V == shape::GENERAL => hp.cqe(now),
                    _ => now,
                };
                if matches!(wc.opcode, WcOpcode::Recv | WcOpcode::RecvRdmaWithImm) {
                    continue;
                }
                // A flow is done with its last message (or its first error).
                let flow = wc.wr_id as u32;
                let last = self
                    .flows
                    .get(flow as usize)
                    .is_none_or(|f| (wc.wr_id >> 32) + 1 >= self.messages(f.spec.size).0);
                if last || wc.status != WcStatus::Success {
                    self.complete_flow(flow, wc.status, seen);
                }
            }
        }
        let h = &self.hosts[host as usize];
        let node = h.node;
        // With its port free and no host profile, `kick` polls the RNIC in
        // `kick_host`, which re-arms the host's timer itself; a second arm
        // right after it could only find the timer set (one call per packet
        // received spared, issue 12).
        let busy_until = self.nodes[node as usize].ports[0].busy_until;
        let armed = (V != shape::GENERAL || h.path.is_none()) && busy_until <= now;
        self.kick::<V>(node, 0);
        if !armed {
            self.arm_host_timer::<V>(host);
        }
        // A wake-up skipped by a frame `kick` just sent was judged on the
        // state this call leaves (`kick_host` arms the timer before it
        // returns). One skipped earlier is judged again: the port was
        // busy on entry, or its frame ends at this very instant.
        if !armed || busy_until == now {
            self.settle_wake(host);
        }
    }

    /// Whether the `TxDone` of a host's frame ending at `end` would find
    /// nothing to do, were nothing to reach the host before: the port's
    /// staging queue is empty (the caller checks), no QP is marked ready
    /// (so the RNIC's poll would come back empty, changing nothing but
    /// its clock) and [`arm_host_timer`](Self::arm_host_timer) would leave
    /// the timer as it is: no deadline, or one after `end` that the armed
    /// timer already covers. Such a wake-up is skipped, its sequence
    /// number reserved (issue 12: 5–9 % of all events on the fat tree).
    ///
    /// A measured dead end (session 39): skipping also the wake-up of a
    /// rate-paced sender whose only ready QP is still in its pacing gap
    /// at `end`, with the host's timer armed for the gap's end as the
    /// frame leaves. The 5 ms HPCC fat tree ran 3.2 % fewer events (94.62
    /// M to 91.63 M: 3.2 M fewer host `TxDone`s, 0.25 M more timers) but
    /// only 1.05 % fewer instructions on the 1 ms one (15.243 G to 15.082
    /// G, callgrind): those wake-ups were cheap. And the outputs changed.
    /// The timer now took its sequence number when the frame left, not
    /// when the skipped wake-up would have run, so two hosts' timers due
    /// at one picosecond could swap. On `config_incast_hpcc` the first
    /// divergence is two senders' timers at 2,000,290,565,000 ps; on the
    /// 5 ms run p99 moved from 4.35 to 4.42. Not kept.
    #[inline(always)]
    fn quiet_until(h: &Host, end: Ps) -> bool {
        h.rnic.nothing_ready()
            && h.rnic.poll_timeout().is_none_or(|t_ns| {
                let t = t_ns.saturating_mul(PS_PER_NS);
                t > end && h.timer_at.is_some_and(|a| end < a && a <= t)
            })
    }

    /// After a host was touched (its RNIC called at `now`): a skipped
    /// `TxDone` (see [`quiet_until`](Self::quiet_until)) still ahead is
    /// scheduled if the host may now have something to do then. One that
    /// passed (its frame ended before `now`) is left for the next frame
    /// sent or flow started to clear: the RNIC call just made moved the
    /// clock past the poll it skipped.
    #[inline(always)]
    fn settle_wake(&mut self, host: u32) {
        let h = &self.hosts[host as usize];
        if h.wake_seq != 0 && self.nodes[h.node as usize].ports[0].busy_until >= self.q.now() {
            self.settle_wake_slow(host);
        }
    }

    /// [`settle_wake`](Self::settle_wake) for a host with a skipped
    /// `TxDone`: one still ahead is scheduled under its reserved number if
    /// the host may now have something to do at that time, so it runs
    /// exactly where it would have; one already passed found nothing to
    /// do, and only its poll's effect on the RNIC's clock (which the verbs
    /// calls of a flow's start read) and its clearing of `wake_pending`
    /// are made good.
    #[inline(never)]
    fn settle_wake_slow(&mut self, host: u32) {
        let h = &mut self.hosts[host as usize];
        let (node, seq) = (h.node, h.wake_seq);
        let p = &mut self.nodes[node as usize].ports[0];
        let end = p.busy_until;
        if !self.q.is_ahead(end, seq, &Event::TxDone { node, port: 0 }) {
            h.wake_seq = 0;
            p.wake_pending = false;
            h.rnic.advance_clock(end / PS_PER_NS);
        } else if p.queued_pkts() > 0 || !Self::quiet_until(h, end) {
            h.wake_seq = 0;
            self.q
                .schedule_reserved(end, seq, Event::TxDone { node, port: 0 });
        }
    }

    /// Schedules the host's wake-up for the RNIC's next deadline. Called
    /// after every call into the RNIC — packets, timers and also the
    /// transmit polls a port event makes: a packet sent from `kick` moves
    /// the QP's pacing deadline, and a wake-up missed there is missed for
    /// good when nothing else arrives at the host (issue 12: paced DCQCN
    /// QPs with no ACK due stalled with their deadline never scheduled).
    ///
    /// Inlined into its two callers (`after_host` and `kick_host`, each
    /// run once or more per packet a host sends or receives): as a call of
    /// its own, saving and restoring registers was over half of its
    /// instructions, and most calls find the timer already right. The
    /// rare due-already case stays out of line.
    ///
    /// What the timers it arms are (counted per `HostTimer` event on the
    /// full fat5ms runs, session 20): HPCC 4.22 M, of which 2 K stale,
    /// 1.00 M with the host's port busy and 3.21 M with it idle, every
    /// one a pacing deadline; DCQCN 3.64 M (1.33 M busy, 2.32 M idle;
    /// 2.76 M pacing, 0.89 M rate-increase ticks). HPCC does not run many
    /// more timers: its extra time is per ACK (the window update) and per
    /// paced packet, whose send a timer makes. A timer due before the
    /// busy port's frame ends could be left to that frame's `TxDone` only
    /// for a pure pacing deadline (every deadline due before the frame's
    /// end), which the RNIC's timer index cannot tell without a walk; at
    /// about 1 % of the run's events it was not attempted.
    ///
    /// What it leaves queued (session 48, probes on the fat5ms runs):
    /// HPCC's queue peaks at 89.6 K events against DCQCN's 15.7 K, and
    /// at 85 K, 70.5 K are host timers in the overflow heap, past the
    /// calendar's reach. A timer armed in front of a pending one leaves
    /// that one stale: 229 K times on HPCC's run (343 on DCQCN's), of
    /// which 148.5 K came up and were dropped (3.3 % of its 4.53 M timer
    /// events; far more than session 20's 2 K above, counted on the
    /// code of then). 81.4 K of HPCC's timers were armed more than 1 ms ahead,
    /// every one a QP's retransmission deadline (armed while it was the
    /// host's earliest), and most are still queued when the run ends.
    /// Each costs one push at the heap's end (its time is the latest
    /// there) and 24 bytes, a stale one coming up one pop, so they were
    /// left.
    #[inline(always)]
    fn arm_host_timer<const V: u8>(&mut self, host: u32) {
        let now = self.q.now();
        let h = &mut self.hosts[host as usize];
        if let Some(t_ns) = h.rnic.poll_timeout() {
            let t = t_ns.saturating_mul(PS_PER_NS);
            if t > now {
                // The frame on the wire ends with a `TxDone` that re-arms
                // from `kick`: a deadline after it need no timer yet (else
                // every packet sent would leave a far-off timer, the
                // retransmission timeout, stale in the queue once the next
                // pacing deadline comes in front of it).
                let busy_until = self.nodes[h.node as usize].ports[0].busy_until;
                let port_first = busy_until > now && busy_until <= t;
                if !port_first && h.timer_at.is_none_or(|a| t < a || a <= now) {
                    h.timer_version = h.timer_version.wrapping_add(1);
                    h.timer_at = Some(t);
                    let version = h.timer_version;
                    let plain = V != shape::GENERAL;
                    self.q
                        .schedule_known(plain, t, Event::HostTimer { host, version });
                }
            } else if h.forced_at != Some(now) {
                self.force_host_timer(host);
            }
        }
    }

    /// [`arm_host_timer`](Self::arm_host_timer) for a deadline due already
    /// (this event came at the instant of the timer, or between whole
    /// nanoseconds past it): the timer runs now and re-arms from what it
    /// leaves, which the RNIC guarantees is later. Once per instant, so a
    /// broken guarantee cannot spin; debug builds check it after every
    /// event.
    #[inline(never)]
    #[cold]
    fn force_host_timer(&mut self, host: u32) {
        let now = self.q.now();
        let h = &mut self.hosts[host as usize];
        h.forced_at = Some(now);
        h.rnic.handle_timeout(now / PS_PER_NS);
        self.after_host::<{ shape::GENERAL }>(host);
    }

    /// Debug builds, after each event: every host the event touched runs
    /// again when its RNIC needs it, so no QP with work waits unseen.
    #[cfg(debug_assertions)]
    fn check_hosts_scheduled(&self, ev: Event) {
        let host_of = |node: u32| {
            let n = &self.nodes[node as usize];
            n.host.then_some(n.index)
        };
        let (a, b) = match ev {
            Event::Arrive { node, .. }
            | Event::TxDone { node, .. }
            | Event::PfcArrive { node, .. }
            | Event::PauseEnd { node, .. } => (host_of(node), None),
            Event::HostTimer { host, .. } | Event::HostRxDrain { host } => (Some(host), None),
            // A partitioned run's sender does not touch the receiver's
            // scheduling (its own event, `FlowAccept`, did).
            Event::FlowStart { flow } => {
                let s = &self.flows[flow as usize].spec;
                (Some(s.src), self.q.partition().is_none().then_some(s.dst))
            }
            Event::FlowAccept { flow } => (Some(self.flows[flow as usize].spec.dst), None),
            Event::PfcRefresh { .. } | Event::Sample | Event::LinkDown { .. } => (None, None),
        };
        for host in [a, b].into_iter().flatten() {
            self.check_host_scheduled(host);
        }
    }

    /// Debug builds: `host` runs again when its RNIC needs it. Its next
    /// deadline lies ahead, and the host timer or the end of the frame on
    /// the wire comes first; a QP with work waiting in the RNIC's ready set
    /// is polled at the port's next event (a frame on the wire ends with
    /// `TxDone`, a paused queue with `PauseEnd` or a resume), which
    /// re-arms.
    #[cfg(debug_assertions)]
    fn check_host_scheduled(&self, host: u32) {
        let now = self.q.now();
        let h = &self.hosts[host as usize];
        let port = &self.nodes[h.node as usize].ports[0];
        // A host port with a frame on the wire has its `TxDone` pending
        // (perhaps due at this very instant); frames held by a pause wait
        // for its end. With a host data path, packets staged behind their
        // DMA reads wake the port when the pipe's head is ready.
        let pipe_event = h
            .path
            .as_deref()
            .is_some_and(|hp| !hp.pipe.is_empty() && hp.wake_at.is_some_and(|w| w >= now));
        // A skipped wake-up counts while it is still ahead (it is then
        // scheduled if the host gets work before it).
        let wake = port.wake_pending
            && (h.wake_seq == 0
                || self.q.is_ahead(
                    port.busy_until,
                    h.wake_seq,
                    &Event::TxDone {
                        node: h.node,
                        port: 0,
                    },
                ));
        // A paused port is kicked when the pause ends (its expiry or an
        // XON), and the RNIC holds what the pause holds (`set_tx_hold`).
        let paused = (0..8).any(|p| port.is_paused(p, now));
        let port_event = wake || port.queued_pkts() > 0 || pipe_event || paused;
        let next = h.rnic.poll_timeout().map(|t| t.saturating_mul(PS_PER_NS));
        // (The timer may be due at this very instant, after the event
        // just handled.)
        let covered = next.is_none_or(|t| {
            h.timer_at.is_some_and(|a| now <= a && a <= t) || (wake && port.busy_until <= t)
        });
        debug_assert!(
            covered && (port_event || !h.rnic.has_ready_work()),
            "host {host} at {now} ps: RNIC deadline {next:?} ps, host timer {:?}, port busy \
             until {} with {} frames queued, QPs with work ready: {}",
            h.timer_at,
            port.busy_until,
            port.queued_pkts(),
            h.rnic.has_ready_work()
        );
    }

    /// Flow `flow` completed with `status`; its application saw it at
    /// `seen` (now, or later when a host profile charges the CPU).
    fn complete_flow(&mut self, flow: u32, status: WcStatus, seen: Ps) {
        let Some(f) = self.flows.get_mut(flow as usize) else {
            return;
        };
        if f.status.is_some() {
            return;
        }
        f.status = Some(status);
        f.finish = Some(seen);
        self.finished += 1;
        if status != WcStatus::Success {
            self.counters.failed_flows += 1;
            if self.counters.first_error.is_none() {
                self.counters.first_error = Some(format!("flow {flow}: {}", status.name()));
            }
        }
        // Tear the pair down so hosts carry only live QPs.
        let echo = std::mem::replace(&mut f.echo_int, IntRef::NONE);
        if echo.is_some() {
            self.int_free.push(echo.rec);
        }
        let (src, dst, sq, dq, sl, dl) = (
            f.spec.src, f.spec.dst, f.src_qpn, f.dst_qpn, f.src_lkey, f.dst_lkey,
        );
        let (sa, da) = (f.src_addr, f.dst_addr);
        self.halted |= self.finished == self.flows.len();
        for (h, q, l, a) in [(src, sq, sl, sa), (dst, dq, dl, da)] {
            let r = &mut self.hosts[h as usize].rnic;
            let _ = r.destroy_qp(q);
            let _ = r.dereg_mr(l);
            r.mem_mut().free(a);
        }
    }

    // ---- packets -----------------------------------------------------------

    // Inlined into `kick_host` as before host paths existed (a second caller
    // made the compiler outline it, adding copies per packet).
    #[inline(always)]
    fn alloc_packet(&mut self, p: Packet) -> u32 {
        self.live_bytes += u64::from(p.frame());
        if self.free_head != u32::MAX {
            let i = self.free_head;
            let slot = &mut self.packets[i as usize];
            self.free_head = slot.free_next();
            self.n_free -= 1;
            *slot = p;
            i
        } else {
            self.packets.push(p);
            (self.packets.len() - 1) as u32
        }
    }

    /// Frees slot `i` and returns its packet; a side-table entry it
    /// points to stays readable until the next packet is made.
    fn take_packet(&mut self, i: u32) -> Packet {
        let slot = &mut self.packets[i as usize];
        let p = *slot;
        slot.set_free_next(self.free_head);
        self.free_head = i;
        self.n_free += 1;
        if let Some(ext) = p.ext() {
            self.ext_free.push(ext);
        }
        self.live_bytes -= u64::from(p.frame());
        p
    }

    /// Frees the INT record packet slot `pkt` points to, if any.
    fn free_int(&mut self, pkt: u32) {
        let p = &mut self.packets[pkt as usize];
        let int = p.int();
        p.set_int(IntRef::NONE);
        if int.is_some() {
            self.int_free.push(int.rec);
        }
    }

    /// The fabric's view of `p`, the packet the RNIC of `host` sends from
    /// its QP `src_qpn` (made by `host_io::packet_head`), and the flow it belongs
    /// to (`u32::MAX`: none). `context` is that QP's (see `map_qp`).
    ///
    /// Inlined into `kick_host` as before host paths existed (a second caller
    /// made the compiler outline it, adding copies per packet).
    #[inline(always)]
    fn packet_from(&mut self, host: u32, p: Packet, src_qpn: u32, context: u64) -> (Packet, u32) {
        let c = QpContext::of(context);
        debug_assert_eq!(
            c.flow,
            self.flow_of(host, src_qpn),
            "QP {src_qpn}'s context"
        );
        (self.packet_of_flow(p, c), c.flow)
    }

    /// [`packet_from`](Self::packet_from) for a packet of the QP whose
    /// context is `c` (its flow, which only ns-3's ECMP hash and INT read,
    /// and its ns-3 ports). From the context, not a table: looking the
    /// flow up per packet sent missed the cache on the host's QP table at
    /// 8,192 hosts (most of `kick_host`'s time), and at 320 hosts under
    /// ns-3's ECMP on both that table and the flow's ports (see `map_qp`).
    #[inline(always)]
    fn packet_of_flow(&mut self, mut p: Packet, c: QpContext) -> Packet {
        let (flow, payload, control) = (c.flow, p.payload(), p.control());
        if let EcmpMode::Ns3 { .. } = self.cfg.ecmp
            && (flow as usize) < self.ns3_flows.len()
        {
            // ns-3 hashes its own ports; an ACK or CNP (receiver to
            // sender) carries the data's ports swapped (see `map_qp`).
            p.set_ns3_ports(c.ports);
        }
        let opcode = p.opcode();
        let cnp = opcode == Opcode::Cnp;
        if control {
            // A configured CNP DSCP is classified like any DSCP; otherwise
            // every control packet rides the control priority.
            if !(cnp && self.cfg.cnp_dscp.is_some()) {
                p.set_prio(self.cfg.control_prio);
            }
            let pi = usize::from(p.prio());
            if cnp {
                self.cnps_by_prio[pi] += 1;
            }
            if opcode == Opcode::RcAck {
                // ns-3's ACK header holds the same INT field as its data.
                if self.cfg.int_wire_bytes > 0 {
                    p.grow(self.cfg.int_wire_bytes);
                }
                // The ACK echoes the INT (or PINT code) of the data it
                // acknowledges.
                if (self.cfg.int || self.pint.is_some())
                    && let Some(f) = self.flows.get_mut(flow as usize)
                {
                    p.set_int(std::mem::replace(&mut f.echo_int, IntRef::NONE));
                }
            }
        } else if payload > 0 {
            if self.cfg.int_wire_bytes > 0 {
                p.grow(self.cfg.int_wire_bytes);
            }
            if self.pint.is_some() {
                // HPCC-PINT: a code the switches raise to their ports'
                // (ns-3's INT header in PINT mode, starting at 0).
                p.set_pint(0);
            } else if self.cfg.int {
                let rec = match self.int_free.pop() {
                    Some(r) => r,
                    None => {
                        debug_assert!(self.ints.len() < PINT_TAG as usize);
                        self.ints.push(IntRec::default());
                        (self.ints.len() - 1) as u32
                    }
                };
                p.set_int(IntRef { rec, len: 0 });
            }
        }
        p
    }

    // ---- ports -------------------------------------------------------------

    /// Starts the port's next frame if its serializer is free (else
    /// makes sure it is woken when it is), for callers without the port
    /// in hand (an XON or a pause that ended, a host's RNIC with a packet
    /// ready). `on_tx_done` and `switch_rx` do the same with the port
    /// they have already looked up.
    #[inline(always)]
    fn kick<const V: u8>(&mut self, node: u32, port: u16) {
        let now = self.q.now();
        let ns = &mut self.nodes[node as usize];
        let p = &mut ns.ports[usize::from(port)];
        if p.busy_until > now {
            wake_when_free(&mut self.q, V != shape::GENERAL, p, node, port);
            return;
        }
        if ns.host {
            let host = ns.index;
            self.kick_host::<V>(node, host, now);
        } else {
            let p = &mut ns.ports[usize::from(port)];
            let sched = shape::scheduler::<V>(&self.cfg);
            if let Some(prio) = p.pick(now, sched) {
                self.start_tx::<V>(node, port, prio);
            }
        }
    }

    /// [`kick`](Self::kick) at a host whose port is free: the RNIC's
    /// packets fill the port's staging queue and the first goes out.
    #[inline(never)]
    fn kick_host<const V: u8>(&mut self, node: u32, host: u32, now: Ps) {
        if V == shape::GENERAL && self.hosts[host as usize].path.is_some() {
            self.kick_host_path(node, host);
            return;
        }
        // What a pause of the port holds back, for the RNIC to pass over:
        // requests go out at the data priority, ACKs, NAKs and CNPs at the
        // control priority (which `host_control_paused_with` pauses along
        // with the data under ns-3's `ACK_HIGH_PRIO 0`). Set for every
        // poll: a pause starts and ends by events that kick the port.
        {
            let p = &self.nodes[node as usize].ports[0];
            let hold = (
                p.is_paused(usize::from(self.cfg.data_prio & 7), now),
                p.is_paused(usize::from(self.cfg.control_prio & 7), now),
            );
            self.hosts[host as usize].rnic.set_tx_hold(hold.0, hold.1);
        }
        loop {
            let ns = &mut self.nodes[node as usize];
            let p = &mut ns.ports[0];
            if let Some(prio) = p.pick(now, &Scheduler::Strict) {
                self.start_tx::<V>(node, 0, prio);
                break;
            }
            // Frames of a paused priority do not count: they must not keep
            // the others from the port (the RNIC no longer hands out what
            // is paused, see above, so they are only those staged before
            // the pause).
            if p.queued_pkts() >= self.cfg.nic_staging_pkts
                && p.queued_pkts() - p.paused_pkts(now) >= self.cfg.nic_staging_pkts
            {
                break;
            }
            let h = &mut self.hosts[host as usize];
            let sink = HeadSink {
                cfg: &self.cfg,
                exts: &mut self.exts,
                ext_free: &mut self.ext_free,
                host,
            };
            let Some((pkt, qpn, context)) = h.rnic.poll_transmit_into(now / PS_PER_NS, sink) else {
                break;
            };
            let (pkt, _) = self.packet_from(host, pkt, qpn, context);
            self.counters.injected_bytes += u64::from(pkt.frame());
            self.counters.injected_pkts += 1;
            let (prio, frame) = (usize::from(pkt.prio()), pkt.frame());
            self.injected_by_prio[prio & 7] += 1;
            let markable = pkt.ecn_capable() && !pkt.ce();
            let id = self.alloc_packet(pkt);
            let p = &mut self.nodes[node as usize].ports[0];
            let e = QEntry::new(id, frame, 0, markable);
            if p.idle_for(prio, now) {
                // Picked and taken at once: skip the queue (see
                // `switch_rx`; a host's port keeps no counts of it).
                self.send_frame::<V>(node, 0, prio, e, false, 0);
                break;
            }
            p.enqueue(prio, e);
        }
        // A packet sent here moved its QP's pacing deadline.
        self.arm_host_timer::<V>(host);
    }

    /// Dequeues the head of (`node`, `port`, `prio`) and puts it on the wire.
    ///
    /// The port is looked up once more in `send_frame`, and again only
    /// after an XON (which may need the whole simulator).
    fn start_tx<const V: u8>(&mut self, node: u32, port: u16, prio: usize) {
        let Some(e) = self.nodes[node as usize].ports[usize::from(port)].dequeue(prio) else {
            return;
        };
        self.send_frame::<V>(node, port, prio, e, false, 0);
    }

    /// Puts frame `e`, just taken from queue `prio` of (`node`, `port`)
    /// (or passed straight through it, see [`Port::idle_for`]), on the
    /// wire: the buffer release, PFC, ECN, INT and the serializer.
    ///
    /// `passed`: the frame skipped the queue (`switch_rx`'s pass-through),
    /// so the port was never counted as holding a packet and is not
    /// uncounted here, and `switch_rx` has settled its buffer account
    /// (released it, or left it untouched: [`Mmu::pass_untouched`]).
    ///
    /// Two measured dead ends (session 21, callgrind on the 1 ms HPCC fat
    /// tree): handing the pass-through's switch index in (`Some(sw)` for
    /// `passed`), so that inlined there the node's kind and index need
    /// not be read and the host branches fold away, came out 27 M
    /// instructions more (14,891.9 M to 14,919.2 M: the step loop's
    /// register allocation moved); masking `prio` to three bits here and
    /// in `switch_rx`, for the compiler to drop the queue reads' bounds
    /// checks, changed nothing (+0.1 M).
    ///
    /// A measured dead end (session 41): when a switch port keeps sending,
    /// starting to load here, a frame's time ahead, what the next
    /// `start_tx` reads first (the head frame's ingress account and
    /// packet, the misses of most of `start_tx`'s perf samples on the
    /// 320-host fat tree) made the fat5ms HPCC run slower: 8.47-8.60 s of
    /// user time against 8.32-8.38 s, three interleaved pairs. Outside
    /// large fabrics those lines are mostly cached by then, and the loads
    /// were paid twice.
    ///
    /// `int_at`: with `passed` and INT on, the hop `switch_rx` read for
    /// the packet ([`Packet::int_hop`]), stamped here without reading the
    /// packet's INT fields again (else unused).
    #[inline(always)]
    fn send_frame<const V: u8>(
        &mut self,
        node: u32,
        port: u16,
        prio: usize,
        e: QEntry,
        passed: bool,
        int_at: usize,
    ) {
        let now = self.q.now();
        let plain = V != shape::GENERAL;
        let pi = usize::from(port);
        let ns = &mut self.nodes[node as usize];
        let (is_host, sw) = (ns.host, ns.index as usize);
        let mut p = &mut ns.ports[pi];
        let (id, frame, ingress, markable) = (e.pkt, u64::from(e.frame()), e.ingress, e.markable());
        // A frame that passed straight through left its buffer account
        // in `switch_rx` (see `Mmu::pass_untouched`).
        if !is_host && !passed {
            if p.queued_pkts() == 0 {
                self.switch_ports_queued[sw] -= 1;
            }
            let mmu = &mut self.switches[sw].mmu;
            if mmu.release_check_xon(usize::from(ingress), prio as u8, frame) {
                // The XON may need the whole simulator: the port is
                // looked up again after it (only then).
                self.send_pfc(node, ingress, prio as u8, false);
                p = &mut self.nodes[node as usize].ports[pi];
            }
        }
        // Set at the next hop (see [`Event::Arrive`]).
        let mut ce = false;
        if !is_host {
            // ECN on the queue the packet leaves behind (RED on egress).
            let qlen = p.qbytes(prio);
            // The probability is computed once, for both the test that
            // decides whether to draw and the draw's verdict.
            if markable
                && let Some(e) = p.ecn_above_kmin(prio, qlen)
                && let pr = e.probability(qlen)
                && pr > 0.0
            {
                let u = crate::workload::uniform(&mut self.rng);
                if EcnConfig::mark_at(pr, u) {
                    ce = true;
                    self.counters.ecn_marks += 1;
                }
            }
            // INT on data packets only (HPCC §3.2; ns-3's switch stamps UDP
            // data alone): the ACK carries the forward path's hops back, and
            // stamping its own way back made a flow answer congestion on
            // the ports its ACKs cross, which it does not load.
            // Written without a branch on the packet's kind (see
            // `INT_SCRATCH`): a packet not stamped writes the scratch record
            // and keeps its count.
            if shape::int_on::<V>(&self.cfg) {
                let pk = &mut self.packets[id as usize];
                let at = if passed { int_at } else { pk.int_hop() };
                debug_assert_eq!(at, pk.int_hop(), "the hop switch_rx handed on");
                pk.count_int_hop(at);
                let (tx_bytes, qlen) = match self.cfg.ns3_int {
                    None => (p.tx_bytes, qlen),
                    Some(e) => e.encode(p.tx_bytes, p.queued_bytes()),
                };
                if let Some(r) = self.ints.get_mut(at / MAX_INT_HOPS) {
                    // The queue fits 32 bits (`set_int_rates`).
                    debug_assert!(qlen <= u64::from(u32::MAX));
                    r.hops[at % MAX_INT_HOPS] = IntStamp {
                        ts: now / PS_PER_NS,
                        tx_bytes,
                        qlen: qlen as u32,
                        rate: u32::from(p.int_rate),
                    };
                }
            }
            // HPCC-PINT: every departure moves the port's estimate; data
            // leaves with the larger of its code and the port's.
            if V == shape::GENERAL
                && let Some(pint) = &mut self.pint
            {
                let pk = &mut self.packets[id as usize];
                let data = !pk.control();
                if let Some(code) = pint.depart(
                    sw,
                    pi,
                    now / PS_PER_NS,
                    p.queued_bytes(),
                    frame as u32,
                    data,
                ) && let Some(old) = pk.pint()
                {
                    pk.set_pint(pint.codec().fold(old, code));
                }
            }
        }
        p.tx_bytes += frame;
        let ser = p.ser(frame + self.cfg.ifg_bytes);
        p.busy_until = now + ser;
        // Hosts always look for the RNIC's next packet; switches only
        // when a queue still holds one. A host's look that would find
        // nothing is skipped, its place in the order kept (see
        // `quiet_until`; hosts with a profile keep it).
        if is_host {
            p.wake_pending = true;
            let h = &mut self.hosts[sw];
            // The previous frame's skipped wake-up, if any, would find
            // this frame on the wire and return.
            h.wake_seq = 0;
            #[cfg(test)]
            let skip = self.skip_quiet_wakes;
            #[cfg(not(test))]
            let skip = true;
            if skip
                && p.queued_pkts() == 0
                && (V != shape::GENERAL || h.path.is_none())
                && Self::quiet_until(h, now + ser)
            {
                h.wake_seq = self.q.reserve();
            } else {
                self.q
                    .schedule_known(plain, now + ser, Event::TxDone { node, port });
            }
        } else if p.queued_pkts() > 0 {
            p.wake_pending = true;
            self.q
                .schedule_known(plain, now + ser, Event::TxDone { node, port });
        } else {
            // A `TxDone` still pending from the previous busy period (this
            // frame started at the same picosecond it was due) will find the
            // port busy and return: it is not this period's wake-up, so a
            // packet queued during this frame must schedule its own.
            p.wake_pending = false;
        }
        let (peer, peer_port, delay) = (p.peer, p.peer_port, p.delay_ps);
        self.q.schedule_known(
            plain,
            now + ser + delay,
            Event::Arrive {
                node: peer,
                port: peer_port,
                pkt: id,
                ce,
            },
        );
        if V == shape::GENERAL && now < self.watch_until {
            self.watch_send(node, port, prio, id, ce);
        }
    }

    // ---- switches ----------------------------------------------------------

    /// Packet `pkt` arrives on `port` of `node`, switch `sw`.
    fn switch_rx<const V: u8>(&mut self, node: u32, sw: usize, port: u16, pkt: u32) {
        let (dst, prio, frame, markable, tuple, src, ns3_key, int_at) = {
            // The packet's slot is looked up once for the priority's
            // rewrite and the reads below: looked up twice, the slab's
            // bounds check and chunk load ran twice on every switch
            // arrival (about 9 instructions each).
            let p = &mut self.packets[pkt as usize];
            if let Some(c) = self.cfg.switch_control_prio {
                // Control packets move to priority `c`; data keeps its
                // own. Written either way, the priority chosen without a
                // branch: ACKs and data arrive in no order a predictor
                // learns, and the branch mispredicted on half of all
                // switch arrivals.
                let ctl = u8::from(p.control()).wrapping_neg();
                p.set_prio((c & ctl) | (p.prio() & !ctl));
            }
            let p = &*p;
            // The hop this switch stamps when the packet leaves (handed to
            // `send_frame` when that is at once, its port idle, so it is
            // not read again there): start loading its line while the
            // route and the buffer are worked out (the scratch record's
            // for a packet not stamped: no branch).
            let int_at = if shape::int_on::<V>(&self.cfg) {
                let at = p.int_hop();
                if let Some(r) = self.ints.get(at / MAX_INT_HOPS) {
                    prefetch_line(&r.hops[at % MAX_INT_HOPS]);
                }
                at
            } else {
                0
            };
            (
                p.dst(),
                p.prio(),
                u64::from(p.frame()),
                p.ecn_capable() && !p.ce(),
                tuple_of(p),
                p.src(),
                p.ns3_key(),
                int_at,
            )
        };
        let hops = if (dst as usize) < self.topo.n_hosts() {
            self.fib.get(node as usize, dst)
        } else {
            &[]
        };
        if hops.is_empty() {
            self.drop_packet(pkt, "no route");
            return;
        }
        let pick = match (&self.cfg.ecmp, ns3_key) {
            (EcmpMode::Ns3 { .. }, Some(key)) => {
                // ns-3 hashes its own addresses and ports (set in the
                // packet by its sender, in the packet's direction; all
                // three scrambled beforehand). Also for a single next hop
                // (which it picks then): a branch on the count
                // mispredicted (see `ecmp::ns3::select_mixed`).
                let ip = |h: u32| self.ns3_ips[h as usize];
                ecmp::ns3::select_mixed([ip(src), ip(dst), key], node, hops.len())
            }
            _ => ecmp::select(&tuple, self.switch_seeds[sw], hops.len()),
        };
        // Picking inside the table's lookup (its row's length and the one
        // port, no slice: two bounds checks fewer) was measured slower
        // (session 20): the choice, passed in as a closure, was not
        // inlined and moved the step loop's inlining (+3 % Ir on the
        // 1 ms HPCC run).
        let out = hops[pick];
        // The egress port, looked up once (again only after an XOFF,
        // which may need the whole simulator).
        let pi = usize::from(prio);
        let now = self.q.now();
        let strict = matches!(shape::scheduler::<V>(&self.cfg), Scheduler::Strict);
        let mut p = &mut self.nodes[node as usize].ports[usize::from(out)];
        // The port's serializer line and its queue's line (which the
        // calendar's look-ahead prefetches only in large fabrics): start
        // loading them while the buffer account is read. (Checking the
        // port first and the account after, without these hints, ran 0.9 %
        // fewer instructions on the 1 ms HPCC fat tree but no faster:
        // fat5ms HPCC 7.76-7.85 s against 7.72-7.76 s, three pairs in one
        // interleaved set, session 46.)
        prefetch_line(p);
        prefetch_line(&p.q[pi & (NPRIO - 1)]);
        // The frame would be queued, picked and taken at once, and its
        // buffer account would take it and give it back at the same
        // picosecond with no pause sent either way (most frames, in all
        // but the busiest fabrics): skip the queue and the account, with
        // every count as those would leave it (the monitor sees the queue
        // hold it, then not; the count of ports holding a packet would go
        // up and down again, and is left alone).
        let mmu = &mut self.switches[sw].mmu;
        if mmu.pass_untouched(usize::from(port), prio, frame) && strict && p.idle_for(pi, now) {
            mmu.book_pass(frame);
            p.pass_through(pi, frame as u32);
            if V == shape::GENERAL && now < self.watch_until {
                watch_enqueue_at!(self, node, sw, out, pi, pkt, 0, frame);
            }
            let e = QEntry::new(pkt, frame as u32, port, markable);
            self.send_frame::<V>(node, out, pi, e, true, int_at);
            return;
        }
        match self.switches[sw]
            .mmu
            .admit_check_xoff(usize::from(port), prio, frame)
        {
            None => {
                self.drop_packet(pkt, "buffer");
                return;
            }
            Some(true) => {
                self.send_pfc(node, port, prio, true);
                p = &mut self.nodes[node as usize].ports[usize::from(out)];
            }
            Some(false) => {}
        }
        let e = QEntry::new(pkt, frame as u32, port, markable);
        // Read once: queueing the frame does not change it.
        let busy = p.busy_until > now;
        if !busy && strict && p.idle_for(pi, now) {
            // Straight through as above, but with the account's admission
            // kept (and any XOFF it called for sent): give the frame back
            // to it as it leaves, as `send_frame` does for a queued frame.
            p.pass_through(pi, frame as u32);
            if V == shape::GENERAL && now < self.watch_until {
                watch_enqueue_at!(self, node, sw, out, pi, pkt, 0, frame);
            }
            if (self.switches[sw].mmu).release_check_xon(usize::from(port), prio, frame) {
                self.send_pfc(node, port, prio, false);
            }
            self.send_frame::<V>(node, out, pi, e, true, int_at);
            return;
        }
        p.enqueue(pi, e);
        if p.queued_pkts() == 1 {
            self.switch_ports_queued[sw] += 1;
        }
        let q = &mut p.q[pi];
        q.max_bytes = q.max_bytes.max(q.bytes);
        if V == shape::GENERAL && now < self.watch_until {
            // Fields apart from the port in hand (as the monitor's record
            // always was): the packet path keeps its shape.
            let (before, all) = (q.bytes - frame, p.queued_bytes());
            watch_enqueue_at!(self, node, sw, out, pi, pkt, before, all);
        }
        // `kick` with what is known here: a switch's port, held, and
        // whether its serializer is busy.
        let sched = shape::scheduler::<V>(&self.cfg);
        if busy {
            wake_when_free(&mut self.q, V != shape::GENERAL, p, node, out);
        } else if let Some(prio) = p.pick(now, sched) {
            self.start_tx::<V>(node, out, prio);
        }
    }

    /// `node`'s `port` started sending packet `pkt` from priority `prio`
    /// (`ce`: marked as it leaves). For the queue-length monitor within
    /// its window (a switch's port), and ns-3's trace: `Dequ` with the
    /// queue's bytes left, after `Enqu` for a host's ACK (ns-3 queues
    /// those at the moment they are made; ours are made as they leave).
    #[cold]
    #[inline(never)]
    fn watch_send(&mut self, node: u32, port: u16, prio: usize, pkt: u32, ce: bool) {
        use crate::ns3_trace::TraceEvent;
        let now = self.q.now();
        let ns = &self.nodes[node as usize];
        let (host, sw) = (ns.host, ns.index as usize);
        let p = &ns.ports[usize::from(port)];
        let (left, all) = (p.qbytes(prio), p.queued_bytes());
        if !host
            && now < self.qlen_until
            && let Some(m) = &mut self.qlen
        {
            m.record(now, sw, usize::from(port), all);
        }
        if self.ptrace.is_none() {
            return;
        }
        if host {
            // ns-3's host: data leaves its QP (queue index: the priority
            // group), control its high-priority queue (index 0); the
            // switch-style queue it reads the length of stays empty.
            let control = self.packets.get(pkt as usize).is_some_and(|x| x.control());
            if control {
                self.trace_packet(TraceEvent::Enqu, node, port, 0, 0, pkt, ce);
                self.trace_packet(TraceEvent::Dequ, node, port, 0, 0, pkt, ce);
            } else {
                let pg = self.cfg.data_prio;
                self.trace_packet(TraceEvent::Dequ, node, port, pg, 0, pkt, ce);
            }
        } else {
            self.trace_packet(TraceEvent::Dequ, node, port, prio as u8, left, pkt, ce);
        }
    }

    fn drop_packet(&mut self, pkt: u32, _why: &str) {
        let p = self.take_packet(pkt);
        self.free_int(pkt);
        self.counters.dropped_pkts += 1;
        self.counters.dropped_bytes += u64::from(p.frame());
    }

    /// Sends XOFF (`pause`) or XON for `prio` out of `port` to the peer.
    fn send_pfc(&mut self, node: u32, port: u16, prio: u8, pause: bool) {
        // Nothing leaves a port whose link is down.
        if self.any_down && self.is_down(node, port) {
            return;
        }
        let now = self.q.now();
        let p = &mut self.nodes[node as usize].ports[usize::from(port)];
        // Quanta are bit times of the link the frame is sent on.
        let quanta = if pause {
            self.cfg.buffer.pause_quanta_at(p.rate_bps)
        } else {
            0
        };
        if self.ptrace.is_some() {
            self.trace_pfc(node, port, prio, quanta, true);
        }
        let p = &mut self.nodes[node as usize].ports[usize::from(port)];
        let pi = usize::from(prio);
        if pause {
            p.xoff_tx[pi] += 1;
            self.counters.pfc_xoff_tx += 1;
        } else {
            p.xon_tx[pi] += 1;
            self.counters.pfc_xon_tx += 1;
        }
        p.refresh_version[pi] = p.refresh_version[pi].wrapping_add(1);
        // A PFC frame (64 B + preamble/IFG) overtakes queued data: MAC
        // control frames are sent at the next frame boundary.
        let ser = ser_ps(64 + self.cfg.ifg_bytes, p.rate_bps);
        let (peer, peer_port, delay, rate) = (p.peer, p.peer_port, p.delay_ps, p.rate_bps);
        let version = p.refresh_version[pi];
        let leave = if self.cfg.pfc_after_frame {
            now.max(p.busy_until)
        } else {
            now
        };
        self.q.schedule(
            leave + ser + delay,
            Event::PfcArrive {
                node: peer,
                port: peer_port,
                prio,
                quanta,
            },
        );
        if pause {
            // Refresh before the peer's pause runs out.
            let dur = pause_ps(quanta, rate);
            self.q.schedule(
                now + (dur / 2).max(1),
                Event::PfcRefresh {
                    node,
                    port,
                    prio,
                    version,
                },
            );
        }
        self.log_pfc(node, port, prio, if pause { "xoff_tx" } else { "xon_tx" });
        if self.cfg.capture_pfc {
            let mut r = PfcRepr {
                class_enable: 1 << prio,
                quanta: [0; 8],
            };
            r.quanta[pi] = quanta;
            let mac = roce_wire::Mac([
                0x02,
                0,
                (node >> 16) as u8,
                (node >> 8) as u8,
                node as u8,
                port as u8,
            ]);
            self.pfc_frames.push((now / PS_PER_NS, r.to_frame(mac)));
        }
    }

    fn pfc_rx(&mut self, node: u32, port: u16, prio: u8, quanta: u16) {
        if self.arrive_checks && self.arrival_lost(node, port) {
            return;
        }
        if self.ptrace.is_some() {
            self.trace_pfc(node, port, prio, quanta, false);
        }
        let now = self.q.now();
        let pi = usize::from(prio);
        let p = &mut self.nodes[node as usize].ports[usize::from(port)];
        if quanta > 0 {
            p.xoff_rx[pi] += 1;
            self.counters.pfc_pause_rx += 1;
            if p.pause_started[pi].is_none() {
                p.pause_started[pi] = Some(now);
            }
            p.q[pi].paused_until = now + pause_ps(quanta, p.rate_bps).max(1);
            p.pause_version[pi] = p.pause_version[pi].wrapping_add(1);
            let (until, version) = (p.q[pi].paused_until, p.pause_version[pi]);
            self.q.schedule(
                until,
                Event::PauseEnd {
                    node,
                    port,
                    prio,
                    version,
                },
            );
            self.log_pfc(node, port, prio, "pause");
        } else {
            p.xon_rx[pi] += 1;
            p.pause_version[pi] = p.pause_version[pi].wrapping_add(1);
            if let Some(s) = p.pause_started[pi].take() {
                p.paused_ps[pi] += now - s;
            }
            p.q[pi].paused_until = 0;
            self.log_pfc(node, port, prio, "resume");
            self.kick::<{ shape::GENERAL }>(node, port);
        }
        let c = self.cfg.control_prio;
        if self.cfg.host_control_paused_with == Some(prio)
            && c != prio
            && self.nodes[node as usize].host
        {
            // The host's control queue stops and starts with `prio`
            // (not counted or logged: no frame paused it).
            let p = &mut self.nodes[node as usize].ports[usize::from(port)];
            let ci = usize::from(c);
            p.pause_version[ci] = p.pause_version[ci].wrapping_add(1);
            if quanta > 0 {
                p.q[ci].paused_until = p.q[pi].paused_until;
                let (until, version) = (p.q[ci].paused_until, p.pause_version[ci]);
                self.q.schedule(
                    until,
                    Event::PauseEnd {
                        node,
                        port,
                        prio: c,
                        version,
                    },
                );
            } else {
                p.q[ci].paused_until = 0;
            }
        }
    }

    fn log_pfc(&mut self, node: u32, port: u16, prio: u8, what: &'static str) {
        if self.pfc_log.len() < self.cfg.max_rows {
            self.pfc_log.push(PfcEvent {
                time: self.q.now(),
                node,
                port,
                prio,
                what,
            });
        }
    }

    // ---- sampling ----------------------------------------------------------

    fn sample(&mut self) {
        let now = self.q.now();
        let mut all_paused = true;
        let mut held = 0u64;
        for (sw, &queued) in self.switches.iter().zip(&self.switch_ports_queued) {
            debug_assert_eq!(
                queued as usize,
                (self.nodes[sw.node as usize].ports.iter())
                    .filter(|p| p.queued_pkts() > 0)
                    .count()
            );
            if queued == 0 {
                continue;
            }
            for (pi, p) in self.nodes[sw.node as usize].ports.iter().enumerate() {
                if p.queued_pkts() == 0 {
                    continue;
                }
                for prio in 0..NPRIO {
                    let b = p.qbytes(prio);
                    if b == 0 {
                        continue;
                    }
                    held += b;
                    if !p.is_paused(prio, now) {
                        all_paused = false;
                    }
                    if self.queue_log.len() < self.cfg.max_rows {
                        self.queue_log.push(QueueSample {
                            time: now,
                            node: sw.node,
                            port: pi as u16,
                            prio: prio as u8,
                            bytes: b,
                        });
                    }
                }
            }
        }
        for (i, f) in self.flows.iter().enumerate().take(self.cfg.trace_flows) {
            if f.spec.start <= now && f.finish.is_none_or(|t| t + self.cfg.sample > now) {
                let rx = self.flow_rx_bytes(i as u32);
                self.flow_log.push((now, i as u32, rx));
            }
        }
        // Deadlock: bytes held, every holding queue paused, nothing delivered.
        let delivered = self.counters.delivered_bytes;
        if self.cfg.deadlock_after > 0 && held > 0 && all_paused && delivered == self.last_delivered
        {
            let since = *self.stall_since.get_or_insert(now);
            if now - since >= self.cfg.deadlock_after {
                self.deadlock = Some(self.describe_deadlock());
                self.counters.deadlock = self.deadlock.clone();
                self.halted = true;
            }
        } else {
            self.stall_since = None;
        }
        self.last_delivered = delivered;
        // Sampling alone does not keep a run going: with nothing else
        // queued nothing can change, and `outcome` reports the stall.
        if self.finished < self.flows.len() && !self.q.is_empty() {
            self.q.schedule(self.next_sample(now), Event::Sample);
        }
    }

    /// When the sample after the one at `now` runs: `sample` later, or,
    /// before the first flow starts, at the last point of the same grid
    /// before it. Until then no packet exists, so the samples in between
    /// would record nothing: no queue holds a byte, no flow has started,
    /// nothing is delivered. (The HPCC ns-3 simulator's flow files start
    /// their flows at 2 s, which took 200,000 samples of an idle fabric,
    /// 1 % of the events of a 1 ms run.) The sample kept before the
    /// first flow schedules the next one as before, so the samples from
    /// then on run as they did, in the same order among other events.
    fn next_sample(&self, now: Ps) -> Ps {
        let step = self.cfg.sample;
        let next = now + step;
        if next >= self.first_start {
            return next;
        }
        // The last grid point `now + k·step` below `first_start`.
        now + (self.first_start - 1 - now) / step * step
    }

    fn describe_deadlock(&self) -> String {
        let now = self.q.now();
        let mut ports = Vec::new();
        for sw in &self.switches {
            for (pi, p) in self.nodes[sw.node as usize].ports.iter().enumerate() {
                for prio in 0..NPRIO {
                    if p.qbytes(prio) > 0 && p.is_paused(prio, now) {
                        ports.push(format!(
                            "{}:{}→{} prio {} ({} B)",
                            self.topo.nodes[sw.node as usize].name,
                            pi,
                            self.topo.nodes[p.peer as usize].name,
                            prio,
                            p.qbytes(prio)
                        ));
                    }
                }
            }
        }
        format!(
            "PFC deadlock at {:.3} us: every queue holding bytes is paused and nothing moved for {:.1} us: {}",
            now as f64 / 1e6,
            self.cfg.deadlock_after as f64 / 1e6,
            ports.join(", ")
        )
    }

    /// The run's results, ending the simulation: the logs move into the
    /// report instead of being copied (at 8,192 hosts they reach millions
    /// of rows), and the fabric's memory is freed before the outputs are
    /// written.
    pub fn into_report(mut self) -> Report {
        let pfc = std::mem::take(&mut self.pfc_log);
        let queues = std::mem::take(&mut self.queue_log);
        let flow_progress = std::mem::take(&mut self.flow_log);
        let pfc_frames = std::mem::take(&mut self.pfc_frames);
        let qlen_mon = self.qlen.take().map(|m| self.finish_qlen(m));
        Report {
            pfc,
            queues,
            flow_progress,
            pfc_frames,
            qlen_mon,
            ..self.report()
        }
    }

    /// The run's results so far.
    pub fn report(&self) -> Report {
        let mut c = self.counters.clone();
        let mut paused_ps = 0;
        for n in &self.nodes {
            for p in &n.ports {
                for prio in 0..NPRIO {
                    paused_ps += p.paused_ps[prio];
                    if let Some(s) = p.pause_started[prio] {
                        paused_ps += self.q.now().saturating_sub(s);
                    }
                }
            }
        }
        c.paused_ps = paused_ps;
        c.live_bytes = self.live_bytes;
        c.peak_pending_events = self.q.peak_len() as u64;
        c.partition = self
            .q
            .partition()
            .map(|p| crate::metrics::PartitionSummary {
                groups: p.node_groups(),
                window_ns: p.window() / PS_PER_NS,
            });
        let k = &self.by_kind;
        c.events_by_kind = crate::metrics::EventsByKind {
            switch_arrive: k[KIND_SWITCH_ARRIVE],
            host_arrive: k[KIND_HOST_ARRIVE],
            switch_tx_done: k[KIND_SWITCH_TX_DONE],
            host_tx_done: k[KIND_HOST_TX_DONE],
            host_timer: k[KIND_HOST_TIMER],
            other: k[KIND_OTHER],
        };
        for h in &self.hosts {
            let rc = h.rnic.counters();
            c.retransmits += rc.retransmits;
            c.cnps_tx += rc.cnps_tx;
            c.cnps_rx += rc.cnps_rx;
            c.timeouts += rc.timeouts;
            c.naks += rc.naks_rx;
        }
        c.buffer_peak = self.switches.iter().map(|s| s.mmu.peak).max().unwrap_or(0);
        let flows = self
            .flows
            .iter()
            .enumerate()
            .map(|(i, f)| FlowResult {
                id: i as u32,
                src: f.spec.src,
                dst: f.spec.dst,
                size: f.spec.size,
                start: f.spec.start,
                finish: f.finish,
                ideal: f.ideal,
                ok: f.status == Some(WcStatus::Success),
                sport: f.sport,
            })
            .collect();
        let mut ports = Vec::new();
        for (ni, n) in self.nodes.iter().enumerate() {
            for (pi, p) in n.ports.iter().enumerate() {
                ports.push(crate::metrics::PortStats {
                    node: ni as u32,
                    port: pi as u16,
                    peer: p.peer,
                    rate_bps: p.rate_bps,
                    tx_bytes: p.tx_bytes,
                    xoff_tx: p.xoff_tx,
                    xon_tx: p.xon_tx,
                    xoff_rx: p.xoff_rx,
                    paused_ps: p.paused_ps,
                    max_qbytes: p.max_qbytes(),
                });
            }
        }
        Report {
            now: self.q.now(),
            events: self.q.popped(),
            counters: c,
            flows,
            ports,
            pfc: {
                // A partitioned run logs a window's groups one after
                // another: the file reads in time order all the same.
                let mut v = self.pfc_log.clone();
                if self.q.partition().is_some() {
                    v.sort_by_key(|e| e.time);
                }
                v
            },
            queues: self.queue_log.clone(),
            flow_progress: self.flow_log.clone(),
            pfc_frames: {
                let mut v = self.pfc_frames.clone();
                if self.q.partition().is_some() {
                    v.sort_by_key(|f| f.0);
                }
                v
            },
            node_names: self.topo.nodes.iter().map(|n| n.name.clone()).collect(),
            host_nodes: self.topo.hosts.iter().map(|&n| n as u32).collect(),
            qlen_mon: self.qlen.clone().map(|m| self.finish_qlen(m)),
            host_path: self.host_path_table(),
            sample: self.cfg.sample,
            max_rows: self.cfg.max_rows,
        }
    }
}

/// The five-tuple switches hash a packet's path by (ECMP).
#[inline]
fn tuple_of(p: &Packet) -> FiveTuple {
    FiveTuple {
        src_ip: u32::from(host_ip(p.src())),
        dst_ip: u32::from(host_ip(p.dst())),
        src_port: p.sport(),
        dst_port: ROCE_PORT,
        protocol: 17,
    }
}

/// Calls [`watch_enqueue`] with the simulator `$s`'s fields, borrowed
/// apart from a port the caller holds.
macro_rules! watch_enqueue_at {
    ($s:ident, $node:expr, $sw:expr, $port:expr, $prio:expr, $pkt:expr, $before:expr, $all:expr) => {{
        let cx = trace_cx!($s);
        let (m, until) = (&mut $s.qlen, $s.qlen_until);
        watch_enqueue(
            m,
            until,
            &mut $s.ptrace,
            &cx,
            $node,
            $sw,
            $port,
            $prio,
            $pkt,
            $before,
            $all,
        );
    }};
}
use watch_enqueue_at;

/// Switch `sw` (`node`) queued packet `pkt` at `port`'s priority `prio`,
/// which held `before` bytes; the port holds `all` with it. For the
/// queue-length monitor `m` within its window (before `until`), and ns-3's
/// packet trace. Apart from the simulator, so that the packet path calls
/// it holding the port.
#[cold]
#[inline(never)]
#[allow(clippy::too_many_arguments)]
fn watch_enqueue(
    m: &mut Option<QlenMonitor>,
    until: Ps,
    trace: &mut Option<Box<crate::ns3_trace::PacketTrace>>,
    cx: &packet_trace::TraceCx<'_>,
    node: u32,
    sw: usize,
    port: u16,
    prio: usize,
    pkt: u32,
    before: u64,
    all: u64,
) {
    if cx.now < until
        && let Some(m) = m
    {
        m.record(cx.now, sw, usize::from(port), all);
    }
    let ev = crate::ns3_trace::TraceEvent::Enqu;
    packet_trace::trace_packet(trace, cx, ev, node, port, prio as u8, before, pkt, false);
}

/// Makes sure the busy serializer of `p` (`port` of `node`) is woken
/// when it finishes: called when a frame waits behind it, so an idle
/// link costs one event per packet, not two (the `TxDone` is scheduled
/// when there is something to do then, not for every frame). `plain`:
/// as [`EventQueue::schedule_known`]'s, true in the lean loops.
#[inline(always)]
fn wake_when_free(q: &mut EventQueue, plain: bool, p: &mut Port, node: u32, port: u16) {
    if !p.wake_pending {
        p.wake_pending = true;
        q.schedule_known(plain, p.busy_until, Event::TxDone { node, port });
    }
}

/// Hints the CPU to start loading the cache line holding the start of `x`.
#[inline(always)]
pub(crate) fn prefetch_line<T>(x: &T) {
    prefetch_addr(x as *const T as *const u8);
}

/// [`prefetch_line`] of a bare address (the RNIC's cache hints hand over
/// addresses; see `roce_rnic::prefetch`). Any address will do: a prefetch
/// never faults.
#[inline(always)]
pub(crate) fn prefetch_addr(p: *const u8) {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: a prefetch only hints the cache; it never faults or changes
    // memory, and SSE is part of the x86-64 baseline.
    unsafe {
        use std::arch::x86_64::{_MM_HINT_T0, _mm_prefetch};
        _mm_prefetch::<_MM_HINT_T0>(p as *const i8);
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = p;
}

/// Slots (packets, their bodies, INT records) in one contiguous run of
/// address space, so that slot `i` is `base + i`: no chunk list to load
/// and index on every packet an event touches.
///
/// The run is reserved up front ([`Slab::RESERVE`], 64 GiB of address
/// space, none of it memory: `PROT_NONE`, `MAP_NORESERVE`; halved on
/// failure down to [`Slab::RESERVE_FLOOR`], e.g. under an address-space
/// limit) and committed in steps of [`Slab::COMMIT_STEP`] (32 MiB) as the
/// slab grows, each step marked for transparent huge pages before it is
/// touched. A large fabric holds hundreds of thousands of packets, read
/// in no particular order: on 4 KiB pages nearly every packet touched
/// costs a TLB miss. The start is aligned to a huge page, so every step
/// is too. Slots never move, so growing copies nothing, and a step's pages
/// are only backed once written (the resident size is as with chunks).
///
/// Where no reservation can be had (or the slab outgrows it), the slots
/// live in a `Vec` instead (the fallback): still contiguous, so indexing
/// is the same `base + i`, at the cost of a copy when it grows. Chunks,
/// as before, would have put a branch back into every index.
///
/// Measured against 16-32 MiB huge-page-aligned chunks (session 23,
/// callgrind on the 1 ms fat tree): HPCC 14,592.1 to 14,303.2 M
/// instructions (-2.0 %), DCQCN 12,533.3 to 12,435.8 M (-0.8 %); the
/// k=32 tree cut at 300 µs kept its resident size (228-232 MB).
///
/// A lead not taken: the index's bounds check is still ~175 M
/// instructions of the HPCC run. Dropping it soundly needs every `u32`
/// index to land in mapped memory (the whole 2³² slots reserved
/// readable, which is ~1 TiB for INT records) and a fallback that is
/// not a separate branch on every index.
struct Slab<T: Copy> {
    /// First slot: the reservation's (aligned) start, or the fallback
    /// `Vec`'s buffer.
    base: std::ptr::NonNull<T>,
    /// Slots written.
    len: usize,
    /// Slots that fit in committed memory (the fallback's capacity).
    cap: usize,
    store: SlabStore<T>,
}

/// Where a [`Slab`]'s slots live.
enum SlabStore<T> {
    /// A reserved mapping: `map` and `map_len` as `mmap` returned them
    /// (to unmap on drop); `committed` bytes from the slab's base are
    /// readable and writable; `step` bytes are committed at a time.
    Reserved {
        map: *mut libc::c_void,
        map_len: usize,
        reserved: usize,
        committed: usize,
        step: usize,
    },
    /// No reservation: the slots are this `Vec`'s first `len` elements.
    Heap(Vec<T>),
}

#[cfg(test)]
thread_local! {
    /// Tests set this to build simulators whose slabs take the fallback
    /// (as when no address space can be reserved).
    static FORCE_HEAP_SLABS: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
    /// Tests set this to build simulators with this event calendar slot
    /// width rather than [`slot_bits_for`]'s.
    static FORCE_SLOT_BITS: std::cell::Cell<Option<u32>> = const { std::cell::Cell::new(None) };
    /// Tests set this to partition a fabric of any size into this many
    /// groups (see [`crate::partition`]).
    static FORCE_GROUPS: std::cell::Cell<Option<u32>> = const { std::cell::Cell::new(None) };
}

/// Huge page size (x86-64 and most others).
const HUGE_PAGE: usize = 2 << 20;

impl<T: Copy> Slab<T> {
    /// Address space first asked for.
    /// (None on targets with less than 64-bit addresses: the heap there.)
    const RESERVE: usize = if usize::BITS >= 64 { 64 << 30 } else { 0 };
    /// Smallest reservation tried before falling back to the heap.
    const RESERVE_FLOOR: usize = 1 << 30;
    /// Memory committed at a time.
    const COMMIT_STEP: usize = 32 << 20;

    fn new() -> Self {
        #[cfg(test)]
        if FORCE_HEAP_SLABS.get() {
            return Self::on_heap(Vec::new());
        }
        Self::with_reservation(Self::RESERVE, Self::RESERVE_FLOOR, Self::COMMIT_STEP)
    }

    /// A slab reserving `reserve` bytes of address space (halved on
    /// failure while at least `floor`; none if `reserve < floor`), then
    /// committing `step` bytes (a multiple of the huge page) at a time.
    fn with_reservation(reserve: usize, floor: usize, step: usize) -> Self {
        const {
            assert!(
                std::mem::size_of::<T>() > 0
                    && std::mem::size_of::<T>() <= HUGE_PAGE
                    && std::mem::align_of::<T>() <= HUGE_PAGE
            )
        };
        assert!(step > 0 && step.is_multiple_of(HUGE_PAGE));
        let mut size = reserve;
        while size >= floor.max(step) {
            if let Some((map, map_len, base)) = reserve_aligned(size) {
                return Slab {
                    base: base.cast(),
                    len: 0,
                    cap: 0,
                    store: SlabStore::Reserved {
                        map,
                        map_len,
                        reserved: size,
                        committed: 0,
                        step,
                    },
                };
            }
            size /= 2;
        }
        Self::on_heap(Vec::new())
    }

    /// The fallback over `v` (its elements the slots).
    fn on_heap(mut v: Vec<T>) -> Self {
        let (len, cap) = (v.len(), v.capacity());
        let base = std::ptr::NonNull::new(v.as_mut_ptr()).expect("a Vec's buffer is non-null");
        Slab {
            base,
            len,
            cap,
            store: SlabStore::Heap(v),
        }
    }

    fn len(&self) -> usize {
        self.len
    }

    /// Whether the slots live in a reserved mapping (not the fallback).
    #[cfg(test)]
    fn is_reserved(&self) -> bool {
        matches!(self.store, SlabStore::Reserved { .. })
    }

    #[inline]
    fn push(&mut self, x: T) {
        if self.len == self.cap {
            self.grow();
        }
        debug_assert!(self.len < self.cap);
        // SAFETY: `len < cap` (after `grow`), and the first `cap` slots
        // from `base` are committed, writable memory owned by the slab
        // (the reservation's committed steps, or the `Vec`'s capacity).
        unsafe { self.base.as_ptr().add(self.len).write(x) };
        self.len += 1;
        if let SlabStore::Heap(v) = &mut self.store {
            // SAFETY: the first `len` elements are written (just above and
            // by earlier pushes), within the capacity.
            unsafe { v.set_len(self.len) };
        }
    }

    /// Makes room for at least one more slot: the next committed step of
    /// the reservation, or (once it is full, or without one) more heap.
    #[cold]
    #[inline(never)]
    fn grow(&mut self) {
        let size = std::mem::size_of::<T>();
        match &mut self.store {
            SlabStore::Reserved {
                reserved,
                committed,
                step,
                ..
            } => {
                if *committed + *step <= *reserved {
                    let at = self.base.as_ptr().cast::<u8>();
                    // SAFETY: `committed + step <= reserved`, so the range
                    // is inside the reservation, which starts at `base`.
                    let at = unsafe { at.add(*committed) };
                    if commit(at, *step) {
                        *committed += *step;
                        self.cap = *committed / size;
                        return;
                    }
                }
                // Full, or the kernel would not commit: keep the slots on
                // the heap from here on.
                self.move_to_heap();
            }
            SlabStore::Heap(v) => {
                v.reserve(v.capacity().max(HUGE_PAGE / size).max(1));
                advise_huge(v.as_ptr(), v.capacity() * size);
                self.base = std::ptr::NonNull::new(v.as_mut_ptr()).expect("non-null");
                self.cap = v.capacity();
            }
        }
        debug_assert!(self.len < self.cap);
    }

    /// Copies the slots out of the reservation into the fallback's `Vec`
    /// (with room for more) and releases the reservation.
    #[cold]
    fn move_to_heap(&mut self) {
        let mut v = Vec::with_capacity(
            (self.len * 2)
                .max(HUGE_PAGE / std::mem::size_of::<T>())
                .max(self.len + 1),
        );
        // SAFETY: the first `len` slots from `base` are written.
        v.extend_from_slice(unsafe { std::slice::from_raw_parts(self.base.as_ptr(), self.len) });
        advise_huge(v.as_ptr(), v.capacity() * std::mem::size_of::<T>());
        // The old store (the mapping) is unmapped by its drop, in the
        // assignment.
        *self = Self::on_heap(v);
    }

    /// Where slot `i` is or would be, for a prefetch hint only (never
    /// read through: `i` is not checked).
    #[inline(always)]
    fn addr_of(&self, i: usize) -> *const T {
        self.base.as_ptr().wrapping_add(i)
    }

    /// Slot `i`, which is below `len`: one comparison, then `base + i`.
    #[inline]
    fn slot_ptr(&self, i: usize) -> Option<*mut T> {
        if i >= self.len {
            return None;
        }
        // SAFETY: `i < len <= cap`: a written slot inside the slab's
        // committed memory.
        Some(unsafe { self.base.as_ptr().add(i) })
    }

    #[inline]
    fn get(&self, i: usize) -> Option<&T> {
        // SAFETY: `slot_ptr` gives a written slot; the borrow of `self`
        // keeps it alive and unmodified.
        self.slot_ptr(i).map(|p| unsafe { &*p })
    }

    #[inline]
    fn get_mut(&mut self, i: usize) -> Option<&mut T> {
        // SAFETY: `slot_ptr` gives a written slot; `&mut self` makes the
        // borrow unique.
        self.slot_ptr(i).map(|p| unsafe { &mut *p })
    }
}

impl<T: Copy> Drop for Slab<T> {
    fn drop(&mut self) {
        if let SlabStore::Reserved { map, map_len, .. } = self.store {
            // SAFETY: `map`/`map_len` are the mapping `mmap` returned,
            // unmapped only here; `T: Copy` has no destructor to run, and
            // no borrow of a slot outlives the slab.
            unsafe { libc::munmap(map, map_len) };
        }
        // The fallback's `Vec` frees itself.
    }
}

// SAFETY: the slab owns its slots as a `Vec` would (the raw pointers
// point only into its own mapping or `Vec`).
unsafe impl<T: Copy + Send> Send for Slab<T> {}
// SAFETY: shared access only reads, as through `&Vec<T>`.
unsafe impl<T: Copy + Sync> Sync for Slab<T> {}

/// Reserves `size` bytes of address space starting on a huge page:
/// `PROT_NONE`, so it is no memory until committed. Returns the mapping
/// (to unmap) and the aligned start, or `None` when `mmap` refuses.
fn reserve_aligned(size: usize) -> Option<(*mut libc::c_void, usize, std::ptr::NonNull<u8>)> {
    let map_len = size.checked_add(HUGE_PAGE)?;
    // SAFETY: a fresh anonymous mapping at an address of the kernel's
    // choosing: it overlaps nothing of ours, and PROT_NONE makes it
    // inaccessible until committed.
    let map = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            map_len,
            libc::PROT_NONE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE,
            -1,
            0,
        )
    };
    if map == libc::MAP_FAILED || map.is_null() {
        return None;
    }
    let skip = (map as usize).next_multiple_of(HUGE_PAGE) - map as usize;
    // SAFETY: `skip < HUGE_PAGE`, inside the mapping of `size + HUGE_PAGE`
    // bytes.
    let base = unsafe { map.cast::<u8>().add(skip) };
    Some((map, map_len, std::ptr::NonNull::new(base)?))
}

/// Makes `len` bytes at `at` (inside a reservation, page-aligned)
/// readable and writable, and asks for huge pages on them. False when
/// the kernel refuses.
fn commit(at: *mut u8, len: usize) -> bool {
    // SAFETY: the range lies inside a reservation the caller owns and
    // nothing there is borrowed yet (it was PROT_NONE); mprotect only
    // changes its protection. The memory reads as zeroes once accessible.
    let ok = unsafe { libc::mprotect(at.cast(), len, libc::PROT_READ | libc::PROT_WRITE) == 0 };
    if ok {
        advise_huge(at, len);
    }
    ok
}

impl<T: Copy> std::ops::Index<usize> for Slab<T> {
    type Output = T;
    #[inline]
    fn index(&self, i: usize) -> &T {
        match self.get(i) {
            Some(x) => x,
            None => slab_out_of_bounds(i, self.len),
        }
    }
}

impl<T: Copy> std::ops::IndexMut<usize> for Slab<T> {
    #[inline]
    fn index_mut(&mut self, i: usize) -> &mut T {
        match self.slot_ptr(i) {
            // SAFETY: a written slot (see `slot_ptr`); `&mut self` makes
            // the borrow unique.
            Some(p) => unsafe { &mut *p },
            None => slab_out_of_bounds(i, self.len),
        }
    }
}

#[cold]
#[inline(never)]
fn slab_out_of_bounds(i: usize, len: usize) -> ! {
    panic!("slab index {i} out of bounds (len {len})")
}

/// `madvise(MADV_HUGEPAGE)` on the whole pages inside `len` bytes at `ptr`
/// (Linux; a no-op elsewhere). Only a hint: where transparent huge pages
/// are off or the call fails, nothing changes but speed.
fn advise_huge<T>(ptr: *const T, len: usize) {
    #[cfg(target_os = "linux")]
    {
        const PAGE: usize = 4096;
        let start = (ptr as usize).next_multiple_of(PAGE);
        let end = (ptr as usize + len) & !(PAGE - 1);
        if end < start + (2 << 20) {
            return;
        }
        // SAFETY: MADV_HUGEPAGE only sets a flag on the mapping of these
        // whole pages, which lie inside an allocation we own; it never
        // changes their contents. The result is ignored: the advice is
        // optional.
        unsafe {
            libc::madvise(start as *mut libc::c_void, end - start, libc::MADV_HUGEPAGE);
        }
    }
    #[cfg(not(target_os = "linux"))]
    let _ = (ptr, len);
}

/// Pause time of `quanta` at `rate_bps` in ps (one quantum = 512 bit times).
pub fn pause_ps(quanta: u16, rate_bps: u64) -> Ps {
    ser_ps(u64::from(quanta) * 64, rate_bps)
}

/// The transport headers of a WRITE data packet (first packets carry RETH).
fn data_repr(first: bool) -> TransportRepr {
    let mut t = TransportRepr::new(BthRepr {
        opcode: if first {
            Opcode::RcWriteFirst
        } else {
            Opcode::RcWriteMiddle
        },
        ..Default::default()
    });
    if first {
        t.reth = Some(RethRepr::default());
    }
    t
}

#[cfg(test)]
mod slab_tests {
    use super::*;

    fn rec(i: usize) -> IntRec {
        let mut r = IntRec::default();
        r.hops[i % MAX_INT_HOPS].ts = i as u64;
        r
    }

    fn check(s: &Slab<IntRec>, n: usize) {
        assert_eq!(s.len(), n);
        for i in 0..n {
            assert_eq!(s[i].hops[i % MAX_INT_HOPS].ts, i as u64, "slot {i}");
        }
        assert!(s.get(n).is_none());
        assert!(s.get(n + 1_000_000).is_none());
    }

    /// Slots keep what was written as the slab commits step after step of
    /// its reservation; the start is on a huge page; dropping unmaps.
    #[test]
    fn reserved_slab_grows_over_commit_steps() {
        let step = HUGE_PAGE;
        let mut s: Slab<IntRec> = Slab::with_reservation(64 << 30, 1 << 30, step);
        assert!(s.is_reserved(), "64 GiB of address space is available");
        assert_eq!(s.base.as_ptr() as usize % HUGE_PAGE, 0);
        // Slots in `k` steps (a slot may straddle two).
        let slots = |k: usize| k * step / std::mem::size_of::<IntRec>();
        let n = slots(5) + 3;
        for i in 0..n {
            s.push(rec(i));
        }
        assert!(s.is_reserved());
        assert_eq!(s.cap, slots(6));
        let at = slots(1) + 1;
        s[at].hops[0].qlen = 7;
        assert_eq!(s[at].hops[0].qlen, 7);
        s[at].hops[0].qlen = 0;
        check(&s, n);
        drop(s);
        // The real one, committing 32 MiB at a time.
        let mut s: Slab<IntRec> = Slab::new();
        assert!(s.is_reserved());
        s.push(rec(0));
        assert_eq!(s.len(), 1);
    }

    /// Without a reservation (forced: none smaller than the floor is
    /// tried) the slots live on the heap, and behave the same.
    #[test]
    fn fallback_slab_grows_on_the_heap() {
        let mut s: Slab<IntRec> = Slab::with_reservation(1 << 20, 1 << 30, HUGE_PAGE);
        assert!(!s.is_reserved());
        let n = 3 * HUGE_PAGE / std::mem::size_of::<IntRec>() + 5;
        for i in 0..n {
            s.push(rec(i));
            assert_eq!(s[i].hops[i % MAX_INT_HOPS].ts, i as u64);
        }
        check(&s, n);
    }

    /// A slab that outgrows its reservation moves to the heap, its slots
    /// kept.
    #[test]
    fn full_reservation_moves_to_the_heap() {
        let step = HUGE_PAGE;
        let mut s: Slab<IntRec> = Slab::with_reservation(2 * step, step, step);
        assert!(s.is_reserved());
        let per_step = step / std::mem::size_of::<IntRec>();
        let n = 3 * per_step + 1;
        for i in 0..n {
            s.push(rec(i));
            if i + 1 == 2 * per_step {
                assert!(s.is_reserved());
            }
        }
        assert!(!s.is_reserved());
        check(&s, n);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::event::PS_PER_US;
    use crate::qlen::SAMPLE_NS;

    /// An 8:1 incast: switch queues build and drain over tens of µs.
    fn incast(cc: &str) -> crate::scenario::Scenario {
        let src = format!(
            r#"
[cc]
algorithm = "{cc}"
[topology]
kind = "star"
hosts = 9
host_gbps = 100
link_delay_ns = 1000
[switch.ecn]
kmin_kb = 100
kmax_kb = 400
pmax = 0.2
[[workload]]
kind = "incast"
dst = 0
senders = [1, 2, 3, 4, 5, 6, 7, 8]
size = 200000
"#
        );
        let base = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scenarios");
        crate::scenario::Scenario::parse(&src, "t.toml", &base, None).unwrap()
    }

    /// The monitor records queue changes only inside its window and learns
    /// the lengths that held at its opening: its histograms match sampling
    /// every switch queue at every 100 ns instant (after the events of that
    /// instant, as ns-3's sampler sees them), done here by stepping the
    /// simulator one event at a time. Windows that open before, during and
    /// after the queues build, and one past the run's end.
    #[test]
    fn qlen_monitor_window_matches_sampling_every_instant() {
        let iv = SAMPLE_NS * PS_PER_NS;
        for (start_ns, end_ns) in [
            (0, 3_000),
            (5_000, 20_000),
            (12_345, 40_000),
            (1 << 40, 1 << 41),
        ] {
            let sc = incast("dcqcn");
            let mut cfg = sc.cfg;
            let stop = 60 * PS_PER_US;
            cfg.stop = Some(stop);
            let (start, end) = (start_ns * PS_PER_NS, end_ns * PS_PER_NS);
            cfg.qlen_monitor = Some(QlenMonConfig { start, end, stop });
            let mut sim = Simulator::new(cfg, sc.topo, &sc.flows).unwrap();
            let (first, last) = match sim.qlen.as_ref().unwrap().window() {
                Some(w) => w,
                None => {
                    sim.run().unwrap();
                    let counts = sim.qlen.take().unwrap().counts();
                    assert!(counts.iter().all(Vec::is_empty));
                    assert_eq!(sim.qlen_until, 0, "the window never opened");
                    continue;
                }
            };
            let mut want: Vec<Vec<u64>> = Vec::new();
            let mut t = first;
            let sample = |sim: &Simulator, want: &mut Vec<Vec<u64>>| {
                let mut i = 0;
                for s in &sim.switches {
                    for p in &sim.nodes[s.node as usize].ports {
                        if want.len() <= i {
                            want.push(Vec::new());
                        }
                        let kb = (p.queued_bytes() / 1000) as usize;
                        if want[i].len() <= kb {
                            want[i].resize(kb + 1, 0);
                        }
                        want[i][kb] += 1;
                        i += 1;
                    }
                }
            };
            while !sim.done() {
                let next = sim.q.peek_time().unwrap();
                while t <= last && t < next {
                    sample(&sim, &mut want);
                    t += iv;
                }
                sim.step(1);
            }
            while t <= last {
                sample(&sim, &mut want);
                t += iv;
            }
            let got = sim.qlen.take().unwrap().counts();
            assert!(want.iter().any(|c| c.len() > 5), "the queues built up");
            assert_eq!(got, want, "window {start_ns}..{end_ns} ns");
        }
    }

    /// A run cut off just before the window's first sample never opens
    /// the window; the queues it left hold at that sample all the same.
    #[test]
    fn qlen_monitor_sees_the_queues_a_run_left_before_its_window() {
        let sc = incast("none");
        let mut cfg = sc.cfg;
        let stop = 20 * PS_PER_US + 12_347;
        cfg.stop = Some(stop);
        cfg.qlen_monitor = Some(QlenMonConfig {
            start: stop - 1,
            end: stop + PS_PER_US,
            stop: stop + PS_PER_US,
        });
        let mut sim = Simulator::new(cfg, sc.topo, &sc.flows).unwrap();
        sim.run().unwrap();
        assert_ne!(sim.qlen_open_at, Ps::MAX, "the window never opened");
        let mut want: Vec<Vec<u64>> = Vec::new();
        for s in &sim.switches {
            for p in &sim.nodes[s.node as usize].ports {
                let kb = (p.queued_bytes() / 1000) as usize;
                let mut c = vec![0; kb + 1];
                c[kb] = sim
                    .qlen
                    .as_ref()
                    .unwrap()
                    .window()
                    .map_or(0, |(a, b)| (b - a) / (SAMPLE_NS * PS_PER_NS) + 1);
                want.push(c);
            }
        }
        assert!(want.iter().any(|c| c.len() > 5), "queues left standing");
        let mut m = sim.qlen.take().unwrap();
        sim.seed_unopened_qlen(&mut m);
        assert_eq!(m.counts(), want);
    }

    #[test]
    fn events_by_kind_add_up() {
        for cc in ["none", "dcqcn", "hpcc"] {
            let sc = incast(cc);
            let mut sim = Simulator::new(sc.cfg, sc.topo, &sc.flows).unwrap();
            sim.run().unwrap();
            let r = sim.report();
            let k = r.counters.events_by_kind;
            assert_eq!(k.total(), r.events, "{cc}");
            // Every delivered packet arrived at a host once, and crossed
            // the one switch of a star on its way.
            assert_eq!(k.host_arrive, r.counters.delivered_pkts, "{cc}");
            assert_eq!(k.switch_arrive, r.counters.injected_pkts, "{cc}");
            assert!(k.host_tx_done > 0 && k.switch_tx_done > 0, "{cc}");
            assert_eq!(k.host_timer > 0, cc != "none", "{cc}");
            let s = r.summary(1.0);
            assert_eq!(s.events_per_hop, r.events as f64 / k.hops() as f64);
        }
    }

    /// A small fat tree under WebSearch flows: several hops, ECMP, queues
    /// and pauses at every tier, flows starting while hosts send.
    fn small_fat_tree(cc: &str) -> crate::scenario::Scenario {
        let src = format!(
            r#"
seed = 7
[cc]
algorithm = "{cc}"
[transport]
mtu = 1024
[switch]
buffer_kb = 512
pfc = "dynamic"
alpha = 0.125
[switch.ecn]
kmin_kb = 20
kmax_kb = 80
pmax = 0.2
[topology]
kind = "fat_tree"
pods = 2
tors_per_pod = 2
aggs_per_pod = 2
hosts_per_tor = 4
cores = 2
host_gbps = 100
fabric_gbps = 100
link_delay_ns = 1000
[[workload]]
kind = "poisson"
cdf = "workloads/WebSearch_distribution.txt"
load = 0.8
duration_us = 400
[output]
sample_us = 5
"#
        );
        let base = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scenarios");
        crate::scenario::Scenario::parse(&src, "t.toml", &base, None).unwrap()
    }

    /// Before the first flow starts no packet exists: the samples of the
    /// idle fabric are skipped but the first and the last before that
    /// flow, and from the last on they run every interval on the same
    /// grid, as before. The report is the one of the same flows started
    /// at once, shifted by the idle stretch.
    #[test]
    fn no_samples_of_an_idle_fabric_before_the_first_flow() {
        let sc = small_fat_tree("dcqcn");
        let step = sc.cfg.sample;
        assert!(step > 0);
        let shift = 100 * step;
        let mut late = sc.flows.clone();
        for f in &mut late {
            f.start += shift;
        }
        let first = late.iter().map(|f| f.start).min().expect("flows");
        let sim = Simulator::new(sc.cfg.clone(), sc.topo.clone(), &late).unwrap();
        let (_, trace) = traced_run(sim);
        let samples: Vec<Ps> = (trace.iter())
            .filter(|(_, ev)| *ev == Event::Sample)
            .map(|&(t, _)| t)
            .collect();
        let before: Vec<Ps> = samples.iter().copied().filter(|&t| t < first).collect();
        assert_eq!(before.len(), 2, "{before:?}");
        assert_eq!(before[0], 0);
        assert!(
            before[1] + step >= first && before[1].is_multiple_of(step),
            "{before:?}"
        );
        let from = samples.len() - samples.iter().filter(|&&t| t >= first).count() - 1;
        assert!(
            samples[from..].windows(2).all(|w| w[1] - w[0] == step),
            "every interval from the last sample before the first flow"
        );
        // The samples' records: the same as the unshifted run's, shifted.
        let mut on_time = Simulator::new(sc.cfg.clone(), sc.topo.clone(), &sc.flows).unwrap();
        let mut shifted = Simulator::new(sc.cfg.clone(), sc.topo.clone(), &late).unwrap();
        on_time.run().unwrap();
        shifted.run().unwrap();
        let moved: Vec<(Ps, u32, u64)> = (on_time.flow_log.iter())
            .map(|&(t, f, b)| (t + shift, f, b))
            .collect();
        assert!(!moved.is_empty());
        assert_eq!(shifted.flow_log, moved);
        assert_eq!(shifted.queue_log.len(), on_time.queue_log.len());
    }

    /// A link between an aggregation switch and a core switch fails in the
    /// middle of a loaded run: nothing crosses it afterwards (its ports
    /// send no byte more than they had sent when it failed), what was
    /// queued at or on it is dropped and recovered by go-back-N, every
    /// switch's routes avoid it, and every flow still finishes, the same
    /// way for the same seed.
    #[test]
    fn a_failed_link_is_routed_around_and_every_flow_finishes() {
        const AT: Ps = 100 * PS_PER_US;
        let sc = small_fat_tree("dcqcn");
        let t = &sc.topo;
        let no_host = |n: usize| t.ports[n].iter().all(|p| t.host_of[p.peer].is_none());
        // An aggregation-core link: neither end has a host below it.
        let l = (t.links.iter())
            .find(|l| t.host_of[l.a].is_none() && no_host(l.a) && no_host(l.b))
            .expect("a fat tree has aggregation-core links");
        let (a, b) = (l.a as u32, l.b as u32);
        let run = |stop: Option<Ps>, fail: bool| {
            let mut cfg = sc.cfg.clone();
            cfg.stop = stop;
            if fail {
                cfg.link_failures = vec![LinkFailure { at: AT, a, b }];
            }
            let mut sim = Simulator::new(cfg, sc.topo.clone(), &sc.flows).unwrap();
            sim.run().unwrap();
            sim
        };
        let port_of = |sim: &Simulator, x: u32, y: u32| {
            let ps = &sim.nodes[x as usize].ports;
            ps.iter().position(|p| p.peer == y).unwrap()
        };
        let sent = |sim: &Simulator| {
            [(a, b), (b, a)].map(|(x, y)| sim.nodes[x as usize].ports[port_of(sim, x, y)].tx_bytes)
        };
        let before = run(Some(AT), true);
        let failed = run(None, true);
        let whole = run(None, false);
        let (r, w) = (failed.report(), whole.report());
        // The link carried traffic until it failed, and nothing after.
        let at_fail = sent(&before);
        assert!(at_fail.iter().all(|&x| x > 0), "{at_fail:?}");
        assert_eq!(sent(&failed), at_fail);
        assert!(sent(&whole).iter().zip(at_fail).all(|(&w, f)| w > f));
        // Lost frames, recovered: every flow finishes.
        assert!(r.counters.dropped_pkts > 0);
        assert_eq!(w.counters.dropped_pkts, 0);
        assert!(r.counters.retransmits > 0);
        let s = r.summary(1.0);
        assert_eq!((s.flows.finished, s.flows.unfinished), (sc.flows.len(), 0));
        // No switch routes a host's packets over the failed link any more.
        let down = [(a, port_of(&failed, a, b)), (b, port_of(&failed, b, a))];
        for (x, port) in down {
            for d in 0..t.n_hosts() as u32 {
                assert!(!failed.fib.get(x as usize, d).contains(&(port as u16)));
            }
        }
        for node in (0..t.nodes.len()).filter(|&n| t.host_of[n].is_none()) {
            for d in 0..t.n_hosts() as u32 {
                assert!(
                    !failed.fib.get(node, d).is_empty(),
                    "node {node} to host {d}"
                );
            }
        }
        // Deterministic.
        let again = run(None, true).report();
        assert_eq!(format!("{:?}", again.flows), format!("{:?}", r.flows));
    }

    /// Lossy links (ns-3's `ERROR_RATE_PER_LINK`) lose about the rate's
    /// share of the frames that reach them, the senders recover every loss,
    /// and a rate of 0 changes nothing, to the picosecond: the losses draw
    /// from a generator of their own.
    #[test]
    fn lossy_links_lose_their_share_and_every_flow_finishes() {
        let sc = small_fat_tree("dcqcn");
        let run = |loss: Vec<f64>| {
            let mut cfg = sc.cfg.clone();
            cfg.link_loss = loss;
            let mut sim = Simulator::new(cfg, sc.topo.clone(), &sc.flows).unwrap();
            sim.run().unwrap();
            sim.report()
        };
        let links = sc.topo.links.len();
        let clean = run(Vec::new());
        let zero = run(vec![0.0; links]);
        assert_eq!(format!("{:?}", zero.flows), format!("{:?}", clean.flows));
        assert_eq!(zero.events, clean.events);
        const P: f64 = 0.01;
        let lossy = run(vec![P; links]);
        let k = lossy.counters.events_by_kind;
        let arrivals = (k.switch_arrive + k.host_arrive) as f64;
        let lost = lossy.counters.dropped_pkts as f64;
        // About 1 % of some 10^5 arrivals (the fabric is lossless
        // otherwise: PFC holds its buffers).
        assert_eq!(clean.counters.dropped_pkts, 0);
        assert!(
            (lost / arrivals - P).abs() < 0.2 * P,
            "{lost} of {arrivals}"
        );
        assert!(lossy.counters.retransmits > 0);
        let s = lossy.summary(1.0);
        assert_eq!((s.flows.finished, s.flows.unfinished), (sc.flows.len(), 0));
        assert_eq!(
            format!("{:?}", run(vec![P; links]).flows),
            format!("{:?}", lossy.flows)
        );
        // One lossy link loses frames too.
        let one = run((0..links).map(|l| if l == 0 { 0.5 } else { 0.0 }).collect());
        assert!(one.counters.dropped_pkts > 0);
        let mut cfg = sc.cfg.clone();
        cfg.link_loss = vec![0.0, 1.5];
        match Simulator::new(cfg, sc.topo.clone(), &sc.flows) {
            Err(e @ SimError::BadLossRate { link: 1, .. }) => {
                assert!(e.to_string().contains("0..=1"), "{e}")
            }
            other => panic!("{:?}", other.map(|_| ())),
        }
    }

    /// `GLOBAL_T 0` (`ns3_pair_t`): each flow's T and window are its own
    /// pair's (third.cc's `pairRtt`, `pairBdp`), so a flow within a ToR
    /// gets a shorter T than one across pods, and the run changes; on a
    /// star, where every pair's RTT is the largest, nothing changes.
    #[test]
    fn per_pair_t_follows_each_flows_path() {
        let sc = small_fat_tree("hpcc");
        let mut cfg = sc.cfg.clone();
        cfg.ns3_pair_t = Some(1000);
        let sim = Simulator::new(cfg.clone(), sc.topo.clone(), &sc.flows).unwrap();
        assert_eq!(sim.pair_t.len(), sc.flows.len());
        let routes = sc.topo.routes();
        let mut seen = std::collections::BTreeSet::new();
        for (f, &(rtt, bdp)) in sc.flows.iter().zip(&sim.pair_t) {
            let path = sc.topo.path(&routes, f.src, f.dst);
            let want = crate::baseline::path_rtt_ps(
                &path,
                crate::baseline::HopCost::Ns3 { payload: 1000 },
            ) / PS_PER_NS;
            assert_eq!(rtt, want);
            // 100 Gb/s everywhere: 12.5 bytes a nanosecond.
            assert_eq!(bdp, rtt * 25 / 2);
            seen.insert(path.len());
        }
        assert!(seen.len() > 1, "paths of one length only: {seen:?}");
        let run = |cfg: SimConfig, sc: &crate::scenario::Scenario| {
            let mut sim = Simulator::new(cfg, sc.topo.clone(), &sc.flows).unwrap();
            sim.run().unwrap();
            let r = sim.report();
            assert_eq!(r.summary(1.0).flows.unfinished, 0);
            format!("{:?}", r.flows)
        };
        assert_ne!(run(cfg, &sc), run(sc.cfg.clone(), &sc));
        let star = incast("hpcc");
        let mut cfg = star.cfg.clone();
        cfg.ns3_pair_t = Some(1000);
        // The star's one T as the HPCC ns-3 simulator computes it.
        let t = Simulator::new(cfg.clone(), star.topo.clone(), &star.flows)
            .unwrap()
            .pair_t[0]
            .0;
        let mut base = star.cfg.clone();
        let CcConfig::Hpcc(h) = &mut base.cc else {
            panic!("{:?}", base.cc)
        };
        h.base_rtt_ns = Some(t);
        let mut per_pair = cfg;
        per_pair.cc = base.cc;
        assert_eq!(run(per_pair, &star), run(base, &star));
    }

    /// A failure names a link that exists between two switches.
    #[test]
    fn a_link_failure_must_name_a_switch_link() {
        let sc = small_fat_tree("none");
        let t = &sc.topo;
        let host = t.hosts[0] as u32;
        let tor = t.ports[host as usize][0].peer as u32;
        let other_tor = (0..t.nodes.len() as u32)
            .find(|&n| {
                n != tor
                    && t.ports[n as usize]
                        .iter()
                        .any(|p| t.host_of[p.peer].is_some())
            })
            .unwrap();
        for (a, b, want) in [
            (host, tor, "is a host"),
            (tor, host, "is a host"),
            (tor, other_tor, "no link joins"),
            (tor, tor, "no link joins"),
            (tor, 10_000, "no link joins"),
        ] {
            let mut cfg = sc.cfg.clone();
            cfg.link_failures = vec![LinkFailure { at: 5, a, b }];
            let e = Simulator::new(cfg, sc.topo.clone(), &sc.flows)
                .err()
                .unwrap();
            assert!(e.to_string().contains(want), "{a} {b}: {e}");
        }
    }

    /// An INT stamp names its port's link rate by place in the table
    /// built at start: every switch port's place reads back its own rate
    /// (hosts at 100 Gb/s, fabric at 400 here), and a switch that could
    /// queue more than a stamp's 32 bits of bytes is refused before the
    /// run rather than stamped wrong.
    #[test]
    fn int_stamps_name_rates_and_fit_the_buffer() {
        let mut sc = small_fat_tree("hpcc");
        let t = &mut sc.topo;
        for (node, ports) in t.ports.iter_mut().enumerate() {
            for p in ports {
                if t.host_of[node].is_none() && t.host_of[p.peer].is_none() {
                    p.rate_bps = 400_000_000_000;
                    t.links[p.link].rate_bps = p.rate_bps;
                }
            }
        }
        let sim = Simulator::new(sc.cfg.clone(), sc.topo.clone(), &sc.flows).unwrap();
        assert_eq!(sim.int_rates.len(), 2, "{:?}", sim.int_rates);
        let switch_ports = sim.nodes.iter().filter(|n| !n.host).flat_map(|n| &n.ports);
        for p in switch_ports {
            assert_eq!(sim.int_rates[usize::from(p.int_rate)], p.rate_bps);
        }
        sc.cfg.buffer.size_bytes = 4 << 30;
        match Simulator::new(sc.cfg.clone(), sc.topo.clone(), &sc.flows) {
            Err(e @ SimError::IntBufferTooLarge { switch: 0, bytes }) => {
                assert!(bytes > u64::from(u32::MAX));
                assert!(e.to_string().contains("4 GiB"), "{e}");
            }
            other => panic!("{:?}", other.map(|_| ())),
        }
        // Without INT the same buffer is fine.
        let mut sc = small_fat_tree("dcqcn");
        sc.cfg.buffer.size_bytes = 4 << 30;
        assert!(!sc.cfg.int);
        assert!(Simulator::new(sc.cfg, sc.topo, &sc.flows).is_ok());
    }

    /// The look-ahead's later stages only read (they run above 16 MB of
    /// port state, so no other test reaches them): with them on, a small
    /// fat tree runs the same events in the same order and reports the
    /// same, to the picosecond.
    /// What every host event reads of its host is the record's first line.
    #[test]
    fn a_hosts_hot_fields_share_its_first_line() {
        use std::mem::{align_of, offset_of};
        assert_eq!(align_of::<Host>(), 64);
        for end in [
            offset_of!(Host, qp_flow) + std::mem::size_of::<Vec<QpSlot>>(),
            offset_of!(Host, qpn_base) + 4,
            offset_of!(Host, node) + 4,
            offset_of!(Host, path) + 8,
            offset_of!(Host, wake_seq) + 8,
            offset_of!(Host, timer_at) + std::mem::size_of::<Option<Ps>>(),
        ] {
            assert!(end <= 64, "{end}");
        }
    }

    /// Each condition that ends a run still ends it at the same event,
    /// with the same report and outcome, through the one `halted` flag:
    /// against a run stepped one event at a time that tests every flow
    /// finished and a deadlock itself before each event (the stop time
    /// and an empty queue end `step` inside the queue's pop).
    #[test]
    fn every_halting_condition_stops_the_run() {
        let load = |name: &str| {
            let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
                .join("../../scenarios")
                .join(name);
            crate::scenario::Scenario::load(&path, None).unwrap()
        };
        let mut stopped = small_fat_tree("dcqcn");
        stopped.cfg.stop = Some(100 * PS_PER_US);
        let stall_src = include_str!("../tests/data/stall_incast.toml");
        let base = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scenarios");
        let stall = crate::scenario::Scenario::parse(stall_src, "t.toml", &base, None).unwrap();
        let cases = [
            ("finished", incast("dcqcn")),
            ("finished", incast("hpcc")),
            ("stop", stopped),
            ("deadlock", load("pfc_deadlock_ring.toml")),
            ("stall", stall),
        ];
        for (why, sc) in cases {
            let mut sim = Simulator::new(sc.cfg.clone(), sc.topo.clone(), &sc.flows).unwrap();
            let outcome = format!("{:?}", sim.run());
            assert!(sim.done(), "{why}");
            let mut reference = Simulator::new(sc.cfg.clone(), sc.topo.clone(), &sc.flows).unwrap();
            while reference.deadlock.is_none()
                && reference.finished != reference.flows.len()
                && reference.step(1) == 1
            {}
            assert_eq!(format!("{:?}", reference.outcome()), outcome, "{why}");
            assert_eq!(reference.events(), sim.events(), "{why}");
            assert_eq!(reference.now(), sim.now(), "{why}");
            assert_eq!(
                format!("{:?}", reference.report()),
                format!("{:?}", sim.report()),
                "{why}"
            );
            let unfinished = sim.finished < sim.flows.len();
            match why {
                "finished" => assert!(!unfinished && sim.deadlock.is_none()),
                "stop" => {
                    assert!(unfinished && sim.deadlock.is_none() && !sim.q.is_empty());
                    assert!(sim.now() <= 100 * PS_PER_US);
                }
                "deadlock" => assert!(unfinished && sim.deadlock.is_some() && !sim.q.is_empty()),
                _ => assert!(unfinished && sim.q.is_empty() && outcome.starts_with("Err(Stalled")),
            }
        }
    }

    /// Slabs on the heap (the fallback when no address space can be
    /// reserved) run the same events and report the same as reserved ones.
    #[test]
    fn heap_slabs_change_nothing() {
        for cc in ["dcqcn", "hpcc"] {
            let sc = small_fat_tree(cc);
            let run = |heap: bool| {
                FORCE_HEAP_SLABS.set(heap);
                let sim = Simulator::new(sc.cfg.clone(), sc.topo.clone(), &sc.flows).unwrap();
                FORCE_HEAP_SLABS.set(false);
                assert_eq!(sim.packets.is_reserved(), !heap, "{cc}");
                assert_eq!(sim.ints.is_reserved(), !heap, "{cc}");
                traced_run(sim)
            };
            assert_same_run(cc, run(false), run(true));
        }
    }

    /// Runs `sim` to the end with its event trace on: its report (as
    /// text) and every event in the order run.
    fn traced_run(mut sim: Simulator) -> (String, Vec<(Ps, Event)>) {
        sim.trace = Some(Vec::new());
        sim.run().unwrap();
        let trace = sim.trace.take().unwrap_or_default();
        (format!("{:?}", sim.report()), trace)
    }

    /// Two [`traced_run`]s of one scenario ran the same events in the
    /// same order and reported the same.
    fn assert_same_run(cc: &str, a: (String, Vec<(Ps, Event)>), b: (String, Vec<(Ps, Event)>)) {
        assert!(!a.1.is_empty(), "{cc}");
        assert!(a.1 == b.1, "{cc}: event order");
        assert_eq!(a.0, b.0, "{cc}");
    }

    /// The event calendar's slot width (chosen from the fabric's size,
    /// see [`slot_bits_for`]) changes nothing a run reports or the order
    /// of its events: the calendar hands events out by `(time, sequence)`
    /// whatever the width (64 ps slots of this tree hold a few events
    /// each, 1.02 ns slots tens; slots wider than 1.02 ns, as partitioned
    /// runs take, are sorted with the rank sort's 32-bit lanes or the
    /// bucket sort).
    #[test]
    fn slot_width_changes_nothing() {
        for cc in ["dcqcn", "hpcc"] {
            let sc = small_fat_tree(cc);
            let run = |bits: Option<u32>| {
                FORCE_SLOT_BITS.set(bits);
                let sim = Simulator::new(sc.cfg.clone(), sc.topo.clone(), &sc.flows).unwrap();
                FORCE_SLOT_BITS.set(None);
                assert_eq!(
                    sim.q.slot_bits(),
                    bits.unwrap_or(crate::event::DEFAULT_SLOT_BITS),
                    "{cc}"
                );
                traced_run(sim)
            };
            let base = run(None);
            for bits in [
                crate::event::MIN_SLOT_BITS,
                8,
                9,
                11,
                crate::event::MAX_SLOT_BITS,
            ] {
                assert_same_run(cc, base.clone(), run(Some(bits)));
            }
        }
    }

    /// Partitioned runs (see [`crate::event::Partition`]) of the small fat
    /// tree, in its two pods and in four groups (one per ToR, the
    /// aggregation and core switches dealt out), with each congestion
    /// control: every event scheduled across groups lands in a later
    /// window (the queue asserts it in debug builds, which tests are),
    /// events run window by window and group by group in time order, the
    /// samples at windows' starts, every flow finishes, a second run is
    /// the same event for event, and the slowdowns stay near the run in
    /// global time order (the same physics, another interleaving of
    /// independent events).
    #[test]
    fn a_partitioned_run_keeps_causal_order_and_finishes_every_flow() {
        for cc in ["dcqcn", "hpcc", "none"] {
            let sc = small_fat_tree(cc);
            let plain = {
                let mut sim = Simulator::new(sc.cfg.clone(), sc.topo.clone(), &sc.flows).unwrap();
                assert!(sim.q.partition().is_none(), "16 hosts: not partitioned");
                sim.run().unwrap();
                sim.report()
            };
            let mean = |r: &Report| {
                assert!(r.flows.iter().all(|f| f.ok && f.finish.is_some()), "{cc}");
                r.flows.iter().filter_map(FlowResult::slowdown).sum::<f64>() / r.flows.len() as f64
            };
            for groups in [2, 4] {
                let make = || {
                    FORCE_GROUPS.set(Some(groups));
                    let sim = Simulator::new(sc.cfg.clone(), sc.topo.clone(), &sc.flows).unwrap();
                    FORCE_GROUPS.set(None);
                    sim
                };
                let sim = make();
                let p = sim.q.partition().expect("forced").clone();
                assert_eq!(p.node_groups(), groups, "{cc}");
                // 1 µs links, samples every 5 µs.
                assert_eq!(p.window(), PS_PER_US, "{cc}");
                let mut sim2 = make();
                let (report, trace) = traced_run(sim);
                let order = |&(t, ev): &(Ps, Event)| (t / p.window(), p.group_of(&ev), t);
                assert!(
                    trace.windows(2).all(|w| order(&w[0]) <= order(&w[1])),
                    "{cc} {groups}"
                );
                assert!(
                    (trace.iter())
                        .filter(|(_, ev)| *ev == Event::Sample)
                        .all(|(t, _)| t % p.window() == 0),
                    "{cc}"
                );
                assert!(
                    trace
                        .iter()
                        .any(|(_, ev)| matches!(ev, Event::FlowAccept { .. }))
                );
                sim2.trace = Some(Vec::new());
                sim2.run().unwrap();
                let r2 = sim2.report();
                assert!(
                    sim2.trace.take() == Some(trace),
                    "{cc} {groups}: not repeatable"
                );
                assert_eq!(format!("{r2:?}"), report, "{cc} {groups}");
                assert!(r2.pfc.windows(2).all(|w| w[0].time <= w[1].time));
                let (a, b) = (mean(&plain), mean(&r2));
                assert!(
                    (a - b).abs() <= 0.1 * a,
                    "{cc} {groups}: mean slowdown {a} against {b}"
                );
            }
        }
    }

    /// A partitioned run stopped part-way runs exactly the events, in the
    /// same order, that the whole run ran up to the stop time: at the
    /// stop, the groups before the last set aside their events past it
    /// while the later groups run on to it.
    #[test]
    fn a_partitioned_run_stops_at_the_stop_time_in_every_group() {
        let sc = small_fat_tree("dcqcn");
        let run = |stop: Option<Ps>| {
            let mut cfg = sc.cfg.clone();
            cfg.stop = stop;
            FORCE_GROUPS.set(Some(4));
            let mut sim = Simulator::new(cfg, sc.topo.clone(), &sc.flows).unwrap();
            FORCE_GROUPS.set(None);
            sim.trace = Some(Vec::new());
            sim.run().unwrap();
            assert!(sim.done());
            (sim.trace.take().unwrap(), sim.q.set_aside())
        };
        let (whole, none) = run(None);
        assert_eq!(none, 0);
        // Mid-window, and at a window's last picosecond.
        for stop in [100 * PS_PER_US + 400_000, 50 * PS_PER_US - 1] {
            let (cut, aside) = run(Some(stop));
            let want: Vec<_> = whole.iter().filter(|(t, _)| *t <= stop).copied().collect();
            assert!(
                cut == want,
                "stop {stop}: {} events against {}",
                cut.len(),
                want.len()
            );
            assert!(whole.len() > want.len());
            if stop % PS_PER_US != PS_PER_US - 1 {
                assert!(aside > 0, "stop {stop}: some group ran past it first");
            }
        }
    }

    /// The shipped scale benchmarks' widths: 1.02 ns for the 320-host
    /// tree (whose capacity [`FAT320_CAPACITY_BPS`] spells out) and the
    /// k=16 tree (3.2 times it), 256 ps for the k=32 tree (25.6 times).
    #[test]
    fn slot_width_narrows_with_the_fabric() {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scenarios/hpcc");
        let (fat320, _) = crate::hpcc::read_topology(&dir.join("topo_fat320.txt")).unwrap();
        assert_eq!(fat320.port_capacity_bps(), FAT320_CAPACITY_BPS);
        assert_eq!(slot_bits_for(&fat320), 10);
        let g100 = 100_000_000_000;
        let k =
            |k: usize| Topology::fat_tree(k, k / 2, k / 2, k / 2, k * k / 4, g100, g100, 1_000_000);
        assert_eq!(slot_bits_for(&k(16).unwrap()), 10);
        assert_eq!(slot_bits_for(&k(32).unwrap()), 8);
        // From 64 times the capacity one bit narrower still, and never
        // below the calendar's narrowest.
        let star = |hosts, bps| slot_bits_for(&Topology::star(hosts, bps, 1_000_000).unwrap());
        assert_eq!(star(16_000, 4 * g100), 7);
        assert_eq!(star(9_000, 400 * g100), crate::event::MIN_SLOT_BITS);
    }

    #[test]
    fn deep_prefetch_changes_nothing() {
        for cc in ["dcqcn", "hpcc"] {
            let sc = small_fat_tree(cc);
            let run = |deep: bool| {
                let mut sim = Simulator::new(sc.cfg.clone(), sc.topo.clone(), &sc.flows).unwrap();
                assert!(!sim.deep_prefetch, "{cc}: a small fabric");
                sim.deep_prefetch = deep;
                traced_run(sim)
            };
            assert_same_run(cc, run(false), run(true));
        }
    }

    /// The lean loops (see [`shape`]) are picked where a run has none of
    /// the features they leave out, and run the same events in the same
    /// order and report the same as the general loop, with INT (HPCC) and
    /// without.
    #[test]
    fn the_lean_loops_run_as_the_general_loop() {
        for (cc, lean) in [
            ("none", shape::LEAN),
            ("dcqcn", shape::LEAN),
            ("hpcc", shape::LEAN_INT),
        ] {
            let sc = small_fat_tree(cc);
            let run = |general: bool| {
                shape::FORCE_GENERAL.set(general);
                let sim = Simulator::new(sc.cfg.clone(), sc.topo.clone(), &sc.flows).unwrap();
                let want = if general { shape::GENERAL } else { lean };
                assert_eq!(sim.shape(), want, "{cc}");
                let r = traced_run(sim);
                shape::FORCE_GENERAL.set(false);
                r
            };
            assert_same_run(cc, run(true), run(false));
        }
    }

    /// A feature the lean loops leave out keeps a run in the general loop
    /// for as long as it can act: a queue-length window until it closes
    /// (then the lean loop takes over), a link failure to come, and the
    /// packet trace once set. (In debug builds every event
    /// of every test also checks that no such feature switched on within
    /// a lean `step`.)
    #[test]
    fn features_that_can_act_keep_the_general_loop() {
        let sc = small_fat_tree("hpcc");
        let stop = 200 * PS_PER_US;
        let (start, end) = (20 * PS_PER_US, 40 * PS_PER_US);
        let mut cfg = sc.cfg.clone();
        cfg.qlen_monitor = Some(QlenMonConfig { start, end, stop });
        let mut sim = Simulator::new(cfg, sc.topo.clone(), &sc.flows).unwrap();
        let mut seen = Vec::new();
        while !sim.done() && sim.step(1) > 0 {
            let (now, shape) = (sim.now(), sim.shape());
            if seen.last().is_none_or(|&(_, s)| s != shape) {
                seen.push((now, shape));
            }
        }
        // General until the window's last sample is past, then lean.
        assert_eq!(seen.len(), 2, "{seen:?}");
        assert_eq!(seen[0].1, shape::GENERAL);
        assert_eq!(seen[1].1, shape::LEAN_INT);
        assert!(seen[1].0 >= end && seen[1].0 < stop, "{seen:?}");

        let t = &sc.topo;
        let no_host = |n: usize| t.ports[n].iter().all(|p| t.host_of[p.peer].is_none());
        let l = (t.links.iter())
            .find(|l| t.host_of[l.a].is_none() && no_host(l.a) && no_host(l.b))
            .expect("a fat tree has aggregation-core links");
        let mut cfg = sc.cfg.clone();
        cfg.link_failures = vec![LinkFailure {
            at: stop,
            a: l.a as u32,
            b: l.b as u32,
        }];
        let sim = Simulator::new(cfg, sc.topo.clone(), &sc.flows).unwrap();
        assert_eq!(sim.shape(), shape::GENERAL, "a link failure to come");

        let mut sim = Simulator::new(sc.cfg.clone(), sc.topo.clone(), &sc.flows).unwrap();
        assert_eq!(sim.shape(), shape::LEAN_INT);
        let ids = crate::ns3_trace::node_ids(&sc.topo);
        let trace = crate::ns3_trace::PacketTrace::new(ids, Box::new(std::io::sink()));
        sim.set_packet_trace(trace);
        assert_eq!(sim.shape(), shape::GENERAL, "the packet trace");
    }

    /// A host whose ToR pauses its data priority keeps sending the ACKs
    /// it owes, as ns-3's host keeps serving its ACK queue (issue 12): its
    /// own data, held by the pause, no longer fills the port's staging
    /// queue and stops the RNIC's other packets behind it. Two hosts
    /// under one ToR write to each other; B's data is paused for a long
    /// stretch while A's data keeps arriving, and B's port goes on
    /// sending (only ACKs can leave it), after its staging queue would
    /// have filled.
    #[test]
    fn a_host_paused_at_its_data_priority_keeps_acknowledging() {
        use crate::workload::{FlowOp, FlowSpec};
        let sc = small_fat_tree("none");
        let flow = |src, dst| FlowSpec {
            src,
            dst,
            size: 8_000_000,
            start: 0,
            op: FlowOp::Write,
        };
        let flows = [flow(0, 1), flow(1, 0)];
        let mut sim = Simulator::new(sc.cfg.clone(), sc.topo.clone(), &flows).unwrap();
        let run_until = |sim: &mut Simulator, t: Ps| {
            while sim.q.now() < t && sim.step(1) > 0 {}
        };
        run_until(&mut sim, 20 * PS_PER_US);
        let node = sim.hosts[1].node;
        let prio = sim.cfg.data_prio;
        // The longest pause a frame holds: 335 µs at 100 Gb/s.
        sim.pfc_rx(node, 0, prio, 0xffff);
        let sent = |sim: &Simulator| sim.nodes[node as usize].ports[0].tx_bytes;
        // Long enough for B's own data to have filled its staging queue.
        run_until(&mut sim, 60 * PS_PER_US);
        let before = sent(&sim);
        run_until(&mut sim, 200 * PS_PER_US);
        assert!(
            sim.nodes[node as usize].ports[0].is_paused(usize::from(prio & 7), sim.q.now()),
            "still paused"
        );
        let acks = sent(&sim) - before;
        assert!(acks >= 10 * 60, "B sent {acks} bytes in 140 µs of pause");
        sim.run().unwrap();
        let s = sim.report().summary(1.0);
        assert_eq!((s.flows.finished, s.flows.unfinished), (2, 0));
    }

    /// Skipping the host `TxDone`s that would find nothing to do (their
    /// sequence numbers reserved, see `Simulator::quiet_until`) changes
    /// nothing a run reports but its event counts: the same flow
    /// completions, pauses, queue samples and counters, to the
    /// picosecond, as scheduling every one. A skipped wake-up scheduled
    /// late under a fresh number, or one skipped that had work, would
    /// reorder ties and show here.
    #[test]
    fn skipping_quiet_host_wakes_changes_nothing_but_event_counts() {
        let scenarios = ["none", "dcqcn", "hpcc"]
            .into_iter()
            .flat_map(|cc| [(cc, incast(cc), false), (cc, small_fat_tree(cc), true)]);
        for (cc, sc, tree) in scenarios {
            let run = |skip: bool| {
                let mut sim = Simulator::new(sc.cfg.clone(), sc.topo.clone(), &sc.flows).unwrap();
                sim.skip_quiet_wakes = skip;
                sim.trace = Some(Vec::new());
                sim.run().unwrap();
                // Every event but the hosts' TxDones, in the order run.
                let nodes = &sim.nodes;
                let mut trace = sim.trace.take().unwrap_or_default();
                trace.retain(
                    |(_, e)| !matches!(e, Event::TxDone { node, .. } if nodes[*node as usize].host),
                );
                (sim.report(), trace)
            };
            let ((all, all_trace), (skipped, skipped_trace)) = (run(false), run(true));
            // The same events in the same order, ties included.
            assert!(all_trace == skipped_trace, "{cc}: event order");
            let seen = |r: &Report| {
                let mut c = r.counters.clone();
                // (Fewer events are pending at once, too.)
                c.events_by_kind = Default::default();
                c.peak_pending_events = 0;
                format!(
                    "{:?} {:?} {:?} {:?} {:?} {:?} {c:?}",
                    r.now, r.flows, r.pfc, r.queues, r.flow_progress, r.ports
                )
            };
            assert_eq!(seen(&all), seen(&skipped), "{cc}");
            let (a, b) = (all.counters.events_by_kind, skipped.counters.events_by_kind);
            assert!(b.host_tx_done < a.host_tx_done, "{cc}: {a:?} {b:?}");
            assert_eq!(
                a.total() - b.total(),
                a.host_tx_done - b.host_tx_done,
                "{cc}: only host TxDones go"
            );
            assert!(all.flows.iter().all(|f| f.finish.is_some()), "{cc}");
            // The fat tree's buffers fill: pauses are part of the order.
            assert!(!tree || !all.pfc.is_empty(), "{cc}: no pause");
        }
    }
}
