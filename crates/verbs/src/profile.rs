//! Where the software RNIC's own time goes, stage by stage, and which stage
//! binds it: issue 11's "the software RNIC, analysed the same way".
//!
//! The reference text (§5.9) names, for each hop from the source's DDR to
//! the target's, the metric that shows it binding. A software RNIC has no
//! PCIe or packetizer; its hops are the stages one engine thread crosses for
//! every packet: the receive system call, the ICRC, the RNIC's transport
//! logic, the copy into registered memory, the transmit system call, the
//! completion queue, and the polls that find nothing.
//!
//! # How it is measured
//!
//! A lap timer: the engine reads the cycle counter ([`roce_rnic::clock`])
//! where it already moves from one stage to the next (after a `recvmmsg`,
//! after the packets it brought were taken, after the ICRCs of a send batch,
//! after a `sendmmsg`, …) and charges the time since the previous read to
//! the stage just finished. No system call is added, nothing is allocated,
//! and every tick from entering an engine call to leaving it is charged to
//! exactly one stage, so the stages add up to the engine's time.
//!
//! Received packets are the one place where the stages change per packet
//! (parse and ICRC check, RNIC, copy into memory, next packet): reading the
//! clock three or four times a packet (about 18 ns a read on this project's
//! VM) would cost a visible share of a 4 KiB packet's budget. So the time of
//! a whole receive's packets is measured as one lap, and split between the
//! ICRC, RNIC and copy stages in the proportions measured on a pseudo-random
//! sample of one packet in [`SAMPLE_EVERY`] (the copy timed inside
//! [`roce_rnic::RealMemory`] for the sampled packets only). Ticks become
//! nanoseconds at a rate measured against `Instant` over the profile's own
//! lifetime.
//!
//! [`analyze`] turns one or more engines' profiles and what the run moved
//! into the table `roce perf --analyze` prints, in the shape of `roce
//! analyze`'s hops (`name`, `capacity_gbps`, `capacity_mpps`, `demand_gbps`,
//! `utilisation`, `metric`, then `binding` and `reason`).

use serde::{Deserialize, Serialize};
use std::time::Instant;

/// One stage of the engine's work.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Stage {
    /// `recvmmsg` calls that returned datagrams (the kernel's copy out of
    /// the socket included).
    RxSyscall,
    /// Parsing a received packet and checking its ICRC; computing the ICRC
    /// of a packet about to be sent.
    Icrc,
    /// The RNIC's transport logic: taking a packet (PSNs, ACKs, memory
    /// translation), producing packets, timers, posting work requests,
    /// building datagrams and planning GSO sends.
    Rnic,
    /// Copying received payloads into registered memory.
    Copy,
    /// `sendmmsg` calls (the kernel's copy out of registered memory, and on
    /// loopback the delivery to the receiving socket, included).
    TxSyscall,
    /// Polling completion queues that held completions.
    Completion,
    /// Work that found nothing: empty receives, empty completion queues, a
    /// doorbell with nothing to send.
    Idle,
}

impl Stage {
    pub const ALL: [Stage; 7] = [
        Stage::RxSyscall,
        Stage::Icrc,
        Stage::Rnic,
        Stage::Copy,
        Stage::TxSyscall,
        Stage::Completion,
        Stage::Idle,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Stage::RxSyscall => "rx_syscall",
            Stage::Icrc => "icrc",
            Stage::Rnic => "rnic",
            Stage::Copy => "copy",
            Stage::TxSyscall => "tx_syscall",
            Stage::Completion => "completion",
            Stage::Idle => "idle",
        }
    }

    /// What a user watches to see this stage bind (the §5.9 table's third
    /// column, for a software RNIC).
    pub fn metric(self) -> &'static str {
        match self {
            Stage::RxSyscall => "datagrams per recvmmsg (batching, GRO)",
            Stage::Icrc => "ns per packet in the CRC-32",
            Stage::Rnic => "ns per packet in the transport (retransmissions, ACK rate)",
            Stage::Copy => "copy bandwidth, GB/s",
            Stage::TxSyscall => "datagrams per sendmmsg (GSO sends)",
            Stage::Completion => "CQEs per poll (CQ moderation)",
            Stage::Idle => "share of polls that found nothing",
        }
    }

    fn index(self) -> usize {
        self as usize
    }
}

/// Time and events of one stage.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct StageTime {
    pub ns: u64,
    /// What the stage counts: system calls for the two syscall stages,
    /// packets for the ICRC and RNIC stages (received and sent), bytes for
    /// the copy, completions for the completion stage, empty polls for idle.
    pub events: u64,
}

/// What one engine spent where, from when its profile started (or the
/// earlier snapshot [`since`](Self::since) subtracts) to the snapshot.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct StageProfile {
    /// Whether the engine was profiling (all zeros when not).
    pub enabled: bool,
    /// Wall-clock time the profile covers.
    pub wall_ns: u64,
    /// Time inside engine calls (the sum of the stages).
    pub engine_ns: u64,
    pub rx_syscall: StageTime,
    pub icrc: StageTime,
    pub rnic: StageTime,
    pub copy: StageTime,
    pub tx_syscall: StageTime,
    pub completion: StageTime,
    pub idle: StageTime,
    /// Datagrams in and out over the same time.
    pub rx_packets: u64,
    pub tx_packets: u64,
    /// CPU time and involuntary context switches of the thread that took
    /// the snapshot (`CLOCK_THREAD_CPUTIME_ID`, `getrusage(RUSAGE_THREAD)`,
    /// read at the snapshot only): meaningful for an interval when one
    /// thread drives the engine and takes both snapshots, as `roce perf`'s
    /// sides do. Wall time the thread did not run was spent descheduled,
    /// and the laps charge it to whatever stage it interrupted.
    #[serde(default)]
    pub thread_cpu_ns: u64,
    #[serde(default)]
    pub involuntary_switches: u64,
}

impl StageProfile {
    pub fn get(&self, s: Stage) -> StageTime {
        match s {
            Stage::RxSyscall => self.rx_syscall,
            Stage::Icrc => self.icrc,
            Stage::Rnic => self.rnic,
            Stage::Copy => self.copy,
            Stage::TxSyscall => self.tx_syscall,
            Stage::Completion => self.completion,
            Stage::Idle => self.idle,
        }
    }

    fn get_mut(&mut self, s: Stage) -> &mut StageTime {
        match s {
            Stage::RxSyscall => &mut self.rx_syscall,
            Stage::Icrc => &mut self.icrc,
            Stage::Rnic => &mut self.rnic,
            Stage::Copy => &mut self.copy,
            Stage::TxSyscall => &mut self.tx_syscall,
            Stage::Completion => &mut self.completion,
            Stage::Idle => &mut self.idle,
        }
    }

    /// The sum of the stages' time.
    pub fn stages_ns(&self) -> u64 {
        Stage::ALL.iter().map(|&s| self.get(s).ns).sum()
    }

    /// What happened between `earlier` (a snapshot of the same engine) and
    /// this snapshot.
    pub fn since(&self, earlier: &StageProfile) -> StageProfile {
        let mut d = StageProfile {
            enabled: self.enabled,
            wall_ns: self.wall_ns.saturating_sub(earlier.wall_ns),
            rx_packets: self.rx_packets.saturating_sub(earlier.rx_packets),
            tx_packets: self.tx_packets.saturating_sub(earlier.tx_packets),
            thread_cpu_ns: self.thread_cpu_ns.saturating_sub(earlier.thread_cpu_ns),
            involuntary_switches: self
                .involuntary_switches
                .saturating_sub(earlier.involuntary_switches),
            ..Default::default()
        };
        for s in Stage::ALL {
            let (a, b) = (self.get(s), earlier.get(s));
            *d.get_mut(s) = StageTime {
                ns: a.ns.saturating_sub(b.ns),
                events: a.events.saturating_sub(b.events),
            };
        }
        // Each snapshot converts its ticks at the rate measured up to it, so
        // the difference of two sums can differ by a rounding from the sum
        // of the differences; the interval's engine time is the latter.
        d.engine_ns = d.stages_ns();
        d
    }
}

/// One received packet in this many (on average) has its stages timed.
pub const SAMPLE_EVERY: u32 = 16;

/// The engine's lap timer (see the module documentation).
#[derive(Debug)]
pub(crate) struct Profiler {
    on: bool,
    origin: Instant,
    origin_ticks: u64,
    last: u64,
    ticks: [u64; 7],
    events: [u64; 7],
    /// Ticks of received packets' processing, all stages together.
    rx_pool: u64,
    /// On the sampled packets: parse and ICRC, RNIC with the copy, copy.
    s_icrc: u64,
    s_rnic: u64,
    s_copy: u64,
    /// Copy bytes of all packets (from the memory).
    copy_bytes: u64,
    rng: u32,
}

impl Profiler {
    pub(crate) fn new(on: bool) -> Profiler {
        let t = roce_rnic::clock::ticks();
        Profiler {
            on,
            origin: Instant::now(),
            origin_ticks: t,
            last: t,
            ticks: [0; 7],
            events: [0; 7],
            rx_pool: 0,
            s_icrc: 0,
            s_rnic: 0,
            s_copy: 0,
            copy_bytes: 0,
            rng: 0x9e37_79b9,
        }
    }

    /// Whether to time this received packet's stages (xorshift32, so that
    /// no period in the traffic lines up with the sample).
    #[inline(always)]
    pub(crate) fn sample(&mut self) -> bool {
        if !self.on {
            return false;
        }
        let mut x = self.rng;
        x ^= x << 13;
        x ^= x >> 17;
        x ^= x << 5;
        self.rng = x;
        x.is_multiple_of(SAMPLE_EVERY)
    }

    /// A sampled packet's ticks in parsing and checking, and in the RNIC
    /// (its copy included).
    #[inline(always)]
    pub(crate) fn sampled(&mut self, icrc: u64, rnic: u64) {
        self.s_icrc += icrc;
        self.s_rnic += rnic;
    }

    /// Charges the time since the last boundary to the received packets.
    #[inline(always)]
    pub(crate) fn lap_rx_packets(&mut self) {
        if self.on {
            let t = roce_rnic::clock::ticks();
            self.rx_pool += t.wrapping_sub(self.last);
            self.last = t;
        }
    }

    /// Starts an engine call: what follows is charged to its stages.
    #[inline(always)]
    pub(crate) fn enter(&mut self) {
        if self.on {
            self.last = roce_rnic::clock::ticks();
        }
    }

    /// Charges the time since the last boundary to `s`.
    #[inline(always)]
    pub(crate) fn lap(&mut self, s: Stage) {
        if self.on {
            let t = roce_rnic::clock::ticks();
            self.ticks[s.index()] += t.wrapping_sub(self.last);
            self.last = t;
        }
    }

    /// Counts `n` events of `s` (see [`StageTime::events`]).
    #[inline(always)]
    pub(crate) fn count(&mut self, s: Stage, n: u64) {
        self.events[s.index()] += n;
    }

    /// What the memory measured (cumulative): the sampled packets' copy
    /// ticks and every packet's copied bytes.
    pub(crate) fn take_copies(&mut self, copy_ticks: u64, copy_bytes: u64) {
        self.s_copy = copy_ticks;
        self.copy_bytes = copy_bytes;
    }

    /// The stage ticks with the received packets' pool split in the
    /// sampled proportions (all to the RNIC before any sample).
    fn split_ticks(&self) -> [u64; 7] {
        let mut t = self.ticks;
        let total = u128::from(self.s_icrc + self.s_rnic);
        let pool = u128::from(self.rx_pool);
        let copy = u128::from(self.s_copy.min(self.s_rnic));
        let (icrc, copy) = (pool * u128::from(self.s_icrc))
            .checked_div(total)
            .zip((pool * copy).checked_div(total))
            .map_or((0, 0), |(i, c)| (i as u64, c as u64));
        t[Stage::Icrc.index()] += icrc;
        t[Stage::Copy.index()] += copy;
        t[Stage::Rnic.index()] += self.rx_pool - icrc - copy;
        t
    }

    pub(crate) fn enabled(&self) -> bool {
        self.on
    }

    /// A snapshot, ticks converted at the rate measured since the start.
    pub(crate) fn snapshot(&self, rx_packets: u64, tx_packets: u64) -> StageProfile {
        let wall_ns = self.origin.elapsed().as_nanos() as u64;
        let elapsed_ticks = roce_rnic::clock::ticks().wrapping_sub(self.origin_ticks);
        let ns_per_tick = if elapsed_ticks > 0 {
            wall_ns as f64 / elapsed_ticks as f64
        } else {
            0.0
        };
        let (thread_cpu_ns, involuntary_switches) = this_thread();
        let mut p = StageProfile {
            enabled: self.on,
            wall_ns,
            rx_packets,
            tx_packets,
            thread_cpu_ns,
            involuntary_switches,
            ..Default::default()
        };
        if !self.on {
            return p;
        }
        let ticks = self.split_ticks();
        for s in Stage::ALL {
            *p.get_mut(s) = StageTime {
                ns: (ticks[s.index()] as f64 * ns_per_tick) as u64,
                events: self.events[s.index()],
            };
        }
        p.copy.events = self.copy_bytes;
        p.engine_ns = p.stages_ns();
        p
    }
}

/// The calling thread's CPU time (ns) and involuntary context switches.
fn this_thread() -> (u64, u64) {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: valid out-pointers; the clock and `who` are constants.
    let cpu = if unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) } == 0 {
        ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
    } else {
        0
    };
    // SAFETY: as above; rusage is plain data, zero is a valid value.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    let ivcsw = if unsafe { libc::getrusage(libc::RUSAGE_THREAD, &mut ru) } == 0 {
        ru.ru_nivcsw as u64
    } else {
        0
    };
    (cpu, ivcsw)
}

/// What the run the profiles cover moved.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Workload {
    /// Bytes per message.
    pub message_bytes: u64,
    /// Messages completed.
    pub messages: u64,
    /// How long the run took.
    pub seconds: f64,
}

impl Workload {
    /// Goodput in Gb/s.
    pub fn gbps(&self) -> f64 {
        (self.message_bytes * self.messages) as f64 * 8.0 / self.seconds.max(1e-12) / 1e9
    }
}

/// What the kernel alone does with the same sizes (`--baseline`), shown
/// beside the stages.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct KernelFigure {
    /// `tcp_stream` or `udp_pingpong`.
    pub kind: String,
    /// TCP stream of the same writes, Gb/s.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub gbps: Option<f64>,
    /// UDP ping-pong's typical one-way (or round-trip) time, µs.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub typical_us: Option<f64>,
}

/// One row of the table: one stage of one engine.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct StageRow {
    /// `<side>.<stage>`, e.g. `client.tx_syscall`.
    pub name: String,
    pub side: String,
    pub stage: Stage,
    /// Share of the side's wall-clock time spent in the stage.
    pub share: f64,
    pub ns_per_message: f64,
    /// Per packet the engine handled (in and out).
    pub ns_per_packet: f64,
    /// The goodput this stage alone would carry on its thread (`None` for
    /// idle, which is not work).
    pub capacity_gbps: Option<f64>,
    pub capacity_mpps: Option<f64>,
    /// The goodput the run achieved.
    pub demand_gbps: f64,
    /// Demand over capacity: the stage's time over the run's.
    pub utilisation: f64,
    pub metric: String,
}

/// A side's wall time outside its engine, and not running at all.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Outside {
    pub side: String,
    pub share: f64,
    /// Share of the wall time the side's thread was descheduled (1 − its
    /// CPU time over wall time; 0 when the CPU time is unknown), and how
    /// often it was preempted.
    pub descheduled: f64,
    pub involuntary_switches: u64,
}

/// The table `roce perf --analyze` prints.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Analysis {
    pub stages: Vec<StageRow>,
    /// Share of each side's wall time outside its engine (the application's
    /// loop, waiting for the engine's lock, being descheduled).
    pub outside_engine: Vec<Outside>,
    /// The binding stage's `name` (empty when no stage did any work).
    pub binding: String,
    pub reason: String,
    pub demand_gbps: f64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub kernel: Option<KernelFigure>,
}

/// Turns engines' stage profiles (each named by its side, e.g. `client`,
/// `server`) and what the run moved into the table: each stage's share,
/// per-message and per-packet cost, the capacity it implies (Gb/s and Mpps
/// were it the only work on its thread), and the binding stage — the
/// non-idle stage that took the most time, i.e. the lowest capacity — with
/// a one-line reason, beside the kernel's own figure. The profiles should
/// cover the run `work` describes (their `since` over it).
pub fn analyze(
    sides: &[(&str, &StageProfile)],
    work: &Workload,
    kernel: Option<KernelFigure>,
) -> Analysis {
    let demand = work.gbps();
    let bits = (work.message_bytes * work.messages) as f64 * 8.0;
    let mut stages = Vec::new();
    let mut outside_engine = Vec::new();
    for &(side, p) in sides {
        let wall = p.wall_ns.max(1) as f64;
        let packets = (p.rx_packets + p.tx_packets).max(1) as f64;
        outside_engine.push(Outside {
            side: side.to_string(),
            share: (1.0 - p.stages_ns() as f64 / wall).max(0.0),
            descheduled: if p.thread_cpu_ns > 0 {
                (1.0 - p.thread_cpu_ns as f64 / wall).max(0.0)
            } else {
                0.0
            },
            involuntary_switches: p.involuntary_switches,
        });
        for s in Stage::ALL {
            let t = p.get(s);
            let ns = t.ns as f64;
            let share = ns / wall;
            let work_stage = s != Stage::Idle && t.ns > 0;
            stages.push(StageRow {
                name: format!("{side}.{}", s.name()),
                side: side.to_string(),
                stage: s,
                share,
                ns_per_message: ns / work.messages.max(1) as f64,
                ns_per_packet: ns / packets,
                capacity_gbps: work_stage.then(|| bits / ns),
                capacity_mpps: work_stage.then(|| packets / ns * 1e3),
                demand_gbps: demand,
                utilisation: ns / (work.seconds * 1e9).max(1.0),
                metric: metric(s, &t, p),
            });
        }
    }
    // The largest stage is the one with the lowest capacity: it binds.
    let bind = stages
        .iter()
        .filter(|r| r.stage != Stage::Idle && r.ns_per_message > 0.0)
        .max_by(|a, b| a.ns_per_message.total_cmp(&b.ns_per_message));
    let (binding, reason) = match bind {
        None => (String::new(), "no stage did any work".to_string()),
        Some(r) => {
            let idle = stages
                .iter()
                .find(|x| x.side == r.side && x.stage == Stage::Idle)
                .map_or(0.0, |x| x.share);
            let cap = r.capacity_gbps.unwrap_or(0.0);
            let kernel_note = match &kernel {
                Some(KernelFigure { gbps: Some(g), .. }) => {
                    format!("; the kernel's TCP stream does {g:.1} Gb/s here")
                }
                Some(KernelFigure {
                    typical_us: Some(u),
                    ..
                }) => format!("; the kernel's UDP ping-pong takes {u:.2} µs here"),
                _ => String::new(),
            };
            // A loaded machine: the laps include time descheduled.
            let desched = outside_engine
                .iter()
                .find(|o| o.side == r.side && o.descheduled >= 0.2)
                .map_or(String::new(), |o| {
                    format!(
                        "; the {} thread was descheduled {:.0}% of the run ({} preemptions), which the stages it interrupted include",
                        o.side,
                        100.0 * o.descheduled,
                        o.involuntary_switches
                    )
                });
            // A thread that idles most of the run is not held back by its
            // stages: say so rather than blame the largest of them.
            let waiting = if idle >= 0.5 {
                format!(
                    "no stage saturates its thread (the {} thread idles {:.0}% of the run: it waits on its peer, loss recovery or the scheduler); the largest: ",
                    r.side,
                    100.0 * idle
                )
            } else {
                String::new()
            };
            (
                r.name.clone(),
                format!(
                    "{waiting}{} takes {:.0}% of the {} thread ({:.0} ns per message, {:.0} ns per packet; {:.0}% of it idle): alone it would carry {cap:.1} Gb/s against the {demand:.1} Gb/s achieved{kernel_note}{desched}",
                    r.name,
                    100.0 * r.share,
                    r.side,
                    r.ns_per_message,
                    r.ns_per_packet,
                    100.0 * idle,
                ),
            )
        }
    };
    Analysis {
        stages,
        outside_engine,
        binding,
        reason,
        demand_gbps: demand,
        kernel,
    }
}

/// The stage's metric, with the figure this run gives it.
fn metric(s: Stage, t: &StageTime, p: &StageProfile) -> String {
    let per = |a: u64, b: u64| a as f64 / b.max(1) as f64;
    let fig = match s {
        Stage::RxSyscall => format!("{:.1}", per(p.rx_packets, t.events)),
        Stage::TxSyscall => format!("{:.1}", per(p.tx_packets, t.events)),
        Stage::Icrc | Stage::Rnic => format!("{:.0}", per(t.ns, t.events)),
        Stage::Copy => format!("{:.1}", per(t.events, t.ns)),
        Stage::Completion => format!("{} CQEs", t.events),
        Stage::Idle => format!("{} empty polls", t.events),
    };
    format!("{}: {fig}", s.metric())
}

impl Analysis {
    /// The table as text, one stage a line, the binding one marked.
    pub fn to_table(&self) -> String {
        let mut out = String::new();
        out.push_str(&format!(
            " {:<22} {:>6} {:>10} {:>9} {:>12} {:>10}  {}\n",
            "stage", "share", "ns/msg", "ns/pkt", "cap[Gb/s]", "cap[Mpps]", "metric"
        ));
        for r in &self.stages {
            let mark = if r.name == self.binding { "*" } else { " " };
            let opt = |v: Option<f64>, w: usize| {
                v.map_or(format!("{:>w$}", "-"), |x| format!("{x:>w$.2}"))
            };
            out.push_str(&format!(
                "{mark}{:<22} {:>5.1}% {:>10.0} {:>9.0} {} {}  {}\n",
                r.name,
                100.0 * r.share,
                r.ns_per_message,
                r.ns_per_packet,
                opt(r.capacity_gbps, 12),
                opt(r.capacity_mpps, 10),
                r.metric
            ));
        }
        for o in &self.outside_engine {
            out.push_str(&format!(
                " {}: {:.1}% of its wall time outside the engine (application loop, lock); descheduled {:.1}% ({} preemptions)\n",
                o.side,
                100.0 * o.share,
                100.0 * o.descheduled,
                o.involuntary_switches
            ));
        }
        out.push_str(&format!(" achieved {:.2} Gb/s", self.demand_gbps));
        match &self.kernel {
            Some(KernelFigure { gbps: Some(g), .. }) => {
                out.push_str(&format!("; kernel TCP stream {g:.2} Gb/s"));
            }
            Some(KernelFigure {
                typical_us: Some(u),
                ..
            }) => out.push_str(&format!("; kernel UDP ping-pong {u:.2} us")),
            _ => {}
        }
        out.push('\n');
        out.push_str(&format!(" binding: {} — {}\n", self.binding, self.reason));
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn profile(ns: [u64; 7], wall_ns: u64) -> StageProfile {
        let mut p = StageProfile {
            enabled: true,
            wall_ns,
            rx_packets: 1000,
            tx_packets: 16_000,
            ..Default::default()
        };
        for (s, n) in Stage::ALL.into_iter().zip(ns) {
            *p.get_mut(s) = StageTime { ns: n, events: 10 };
        }
        p.engine_ns = p.stages_ns();
        p
    }

    #[test]
    fn the_binding_stage_is_the_largest_working_one_on_any_side() {
        // The client spends most in sendmmsg, more than the server in
        // anything; the server idles most of all (idle never binds).
        let client = profile([10, 5, 20, 0, 70, 5, 0], 200);
        let server = profile([20, 10, 60, 5, 5, 0, 90], 200);
        let w = Workload {
            message_bytes: 65536,
            messages: 1000,
            seconds: 2e-7,
        };
        let a = analyze(&[("client", &client), ("server", &server)], &w, None);
        assert_eq!(a.binding, "client.tx_syscall");
        let top = a
            .stages
            .iter()
            .filter(|r| r.stage != Stage::Idle)
            .max_by(|x, y| x.share.total_cmp(&y.share))
            .unwrap();
        assert_eq!(top.name, a.binding);
        assert!(
            a.reason
                .starts_with("client.tx_syscall takes 35% of the client thread"),
            "{}",
            a.reason
        );
        // Capacity is what the stage alone would carry: the lowest one binds.
        let min_cap = a
            .stages
            .iter()
            .filter_map(|r| r.capacity_gbps)
            .fold(f64::INFINITY, f64::min);
        let b = a.stages.iter().find(|r| r.name == a.binding).unwrap();
        assert_eq!(b.capacity_gbps, Some(min_cap));
        // utilisation = demand / capacity.
        for r in a.stages.iter().filter(|r| r.capacity_gbps.is_some()) {
            let u = r.demand_gbps / r.capacity_gbps.unwrap();
            assert!((u - r.utilisation).abs() < 1e-9 * u.max(1.0), "{r:?}");
        }
        // The client's 90 ns unaccounted of 200: 45 % outside the engine.
        assert!((a.outside_engine[0].share - 0.45).abs() < 1e-12);
    }

    #[test]
    fn per_packet_and_per_message_costs_and_capacities() {
        let p = profile([0, 0, 17_000, 0, 0, 0, 0], 17_000);
        let w = Workload {
            message_bytes: 4096,
            messages: 1000,
            seconds: 17e-6,
        };
        let a = analyze(&[("x", &p)], &w, None);
        let r = a.stages.iter().find(|r| r.name == "x.rnic").unwrap();
        // 17 µs over 17,000 packets and 1,000 messages.
        assert_eq!((r.ns_per_packet, r.ns_per_message), (1.0, 17.0));
        // 1,000 × 4096 B in 17 µs; 17,000 packets in 17 µs.
        assert!((r.capacity_gbps.unwrap() - 4096.0 * 8.0 / 17.0).abs() < 1e-9);
        assert!((r.capacity_mpps.unwrap() - 1000.0).abs() < 1e-9);
        assert_eq!(r.utilisation, 1.0);
        assert!(
            a.stages
                .iter()
                .all(|r| r.name == "x.rnic" || r.capacity_gbps.is_none())
        );
    }

    #[test]
    fn a_mostly_idle_thread_is_said_to_wait() {
        let p = profile([5, 5, 12, 0, 10, 0, 60], 100);
        let w = Workload {
            message_bytes: 4096,
            messages: 10,
            seconds: 1e-7,
        };
        let a = analyze(&[("client", &p)], &w, None);
        assert_eq!(a.binding, "client.rnic");
        assert!(
            a.reason
                .starts_with("no stage saturates its thread (the client thread idles 60%"),
            "{}",
            a.reason
        );
        assert!(a.reason.contains("client.rnic takes 12%"), "{}", a.reason);
        assert!(!a.reason.contains("descheduled"), "{}", a.reason);
        // The same thread having run only 40 of its 100 ns.
        let p = StageProfile {
            thread_cpu_ns: 40,
            involuntary_switches: 3,
            ..p
        };
        let a = analyze(&[("client", &p)], &w, None);
        assert_eq!(a.outside_engine[0].descheduled, 0.6);
        assert!(
            a.reason
                .ends_with("the client thread was descheduled 60% of the run (3 preemptions), which the stages it interrupted include"),
            "{}",
            a.reason
        );
    }

    #[test]
    fn nothing_done_binds_nothing() {
        let p = profile([0, 0, 0, 0, 0, 0, 50], 100);
        let w = Workload {
            message_bytes: 8,
            messages: 0,
            seconds: 1.0,
        };
        let a = analyze(&[("x", &p)], &w, None);
        assert_eq!(a.binding, "");
    }

    #[test]
    fn since_subtracts_every_field() {
        let a = profile([1, 2, 3, 4, 5, 6, 7], 100);
        let b = profile([11, 12, 13, 14, 15, 16, 17], 300);
        let d = b.since(&a);
        assert_eq!(d.wall_ns, 200);
        assert_eq!(d.stages_ns(), 70);
        assert_eq!(d.engine_ns, 70);
        assert_eq!(d.rx_syscall.events, 0);
    }

    #[test]
    fn the_rx_pool_is_split_as_the_samples_were() {
        let mut p = Profiler::new(true);
        p.rx_pool = 1000;
        // Samples: 100 ticks checking, 300 in the RNIC of which 100 copying.
        p.sampled(100, 300);
        p.take_copies(100, 4096);
        let t = p.split_ticks();
        assert_eq!(t[Stage::Icrc.index()], 250);
        assert_eq!(t[Stage::Copy.index()], 250);
        assert_eq!(t[Stage::Rnic.index()], 500);
        // The sampler takes about one packet in SAMPLE_EVERY, never all.
        let n = (0..16_000).filter(|_| p.sample()).count();
        assert!((500..1500).contains(&n), "{n}");
        assert!(!Profiler::new(false).sample());
    }

    #[test]
    fn laps_charge_every_tick_to_one_stage() {
        let mut p = Profiler::new(true);
        p.enter();
        for s in Stage::ALL {
            std::hint::black_box((0..1000).sum::<u64>());
            p.lap(s);
        }
        let snap = p.snapshot(0, 0);
        assert_eq!(snap.engine_ns, snap.stages_ns());
        assert!(snap.engine_ns <= snap.wall_ns, "{snap:?}");
        let off = Profiler::new(false);
        assert_eq!(off.snapshot(0, 0).stages_ns(), 0);
    }
}
