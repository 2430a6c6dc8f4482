//! What a run measured, and the files it is written to: `fct.csv`,
//! `summary.json`, `queues.csv`, `pfc.csv`, `flow_goodput.csv`. Every CSV
//! goes through the `csv` crate, so a node name with a comma or a quote
//! stays one field.
//!
//! Slowdown is FCT divided by the ideal FCT of the same flow alone on the
//! fabric (see [`crate::baseline::ideal_fct`]), the normalisation used by pFabric,
//! HPCC and most datacenter transport papers.

use crate::event::Ps;
use crate::link::NPRIO;
use serde::Serialize;
use std::io::Write;
use std::path::Path;

/// Fabric-wide counters.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Counters {
    /// Frames the hosts' NICs took from their RNICs.
    pub injected_pkts: u64,
    pub injected_bytes: u64,
    pub delivered_pkts: u64,
    pub delivered_bytes: u64,
    /// Message bytes delivered to receiving RNICs (retransmissions included).
    pub delivered_payload: u64,
    pub dropped_pkts: u64,
    pub dropped_bytes: u64,
    /// Frame bytes still in queues or on links.
    pub live_bytes: u64,
    pub pfc_xoff_tx: u64,
    pub pfc_xon_tx: u64,
    /// XOFF frames received (by switches and hosts).
    pub pfc_pause_rx: u64,
    /// Port × priority time spent paused.
    pub paused_ps: u64,
    pub ecn_marks: u64,
    pub cnps_tx: u64,
    pub cnps_rx: u64,
    pub retransmits: u64,
    pub timeouts: u64,
    pub naks: u64,
    pub int_hops: u64,
    pub failed_flows: u64,
    pub buffer_peak: u64,
    pub peak_pending_events: u64,
    /// A partitioned run's groups and window (see
    /// [`crate::event::Partition`]).
    pub partition: Option<PartitionSummary>,
    pub events_by_kind: EventsByKind,
    pub first_error: Option<String>,
    pub deadlock: Option<String>,
}

/// Events handled, by what they were. A packet-level simulation costs
/// about one event per packet per link it crosses (its arrival) plus a
/// serializer wake-up where a queue holds the next frame; these counts
/// show where a run's events go (issue 12 asks for events per delivered
/// packet and per hop).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct EventsByKind {
    /// A packet's last bit reached a switch port.
    pub switch_arrive: u64,
    /// A packet reached a host.
    pub host_arrive: u64,
    /// A switch port's serializer finished a frame (or a stale wake-up).
    pub switch_tx_done: u64,
    /// A host NIC's serializer finished a frame (or a stale wake-up).
    pub host_tx_done: u64,
    /// RNIC timers (pacing, retransmission, CC ticks), stale ones included.
    pub host_timer: u64,
    /// Flow starts, PFC frames and pause expiries, samples.
    pub other: u64,
}

impl EventsByKind {
    /// Packets crossing a link: every arrival at a switch or a host.
    pub fn hops(&self) -> u64 {
        self.switch_arrive + self.host_arrive
    }

    pub fn total(&self) -> u64 {
        self.switch_arrive
            + self.host_arrive
            + self.switch_tx_done
            + self.host_tx_done
            + self.host_timer
            + self.other
    }
}

/// One flow's outcome.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct FlowResult {
    pub id: u32,
    pub src: u32,
    pub dst: u32,
    pub size: u64,
    pub start: Ps,
    pub finish: Option<Ps>,
    pub ideal: Ps,
    pub ok: bool,
    pub sport: u16,
}

impl FlowResult {
    pub fn fct(&self) -> Option<Ps> {
        self.finish.map(|f| f - self.start)
    }
    pub fn slowdown(&self) -> Option<f64> {
        let fct = self.fct()?;
        Some((fct as f64 / self.ideal.max(1) as f64).max(1.0))
    }
}

/// A PFC happening at a port.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PfcEvent {
    pub time: Ps,
    pub node: u32,
    pub port: u16,
    pub prio: u8,
    /// `xoff_tx`, `xon_tx`, `pause` (XOFF received), `resume` (XON
    /// received) or `expire` (pause time ran out).
    pub what: &'static str,
}

/// An egress queue's length at a sampling instant.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct QueueSample {
    pub time: Ps,
    pub node: u32,
    pub port: u16,
    pub prio: u8,
    pub bytes: u64,
}

/// Per-port totals.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PortStats {
    pub node: u32,
    pub port: u16,
    pub peer: u32,
    pub rate_bps: u64,
    pub tx_bytes: u64,
    pub xoff_tx: [u64; NPRIO],
    pub xon_tx: [u64; NPRIO],
    pub xoff_rx: [u64; NPRIO],
    pub paused_ps: [u64; NPRIO],
    pub max_qbytes: [u64; NPRIO],
}

/// Everything a run produced.
#[derive(Debug, Clone)]
pub struct Report {
    pub now: Ps,
    pub events: u64,
    pub counters: Counters,
    pub flows: Vec<FlowResult>,
    pub ports: Vec<PortStats>,
    pub pfc: Vec<PfcEvent>,
    pub queues: Vec<QueueSample>,
    /// (time, flow, delivered bytes) samples.
    pub flow_progress: Vec<(Ps, u32, u64)>,
    /// (ns, frame) of every PFC frame sent, when captured.
    pub pfc_frames: Vec<(u64, Vec<u8>)>,
    pub node_names: Vec<String>,
    /// Node index of each host.
    pub host_nodes: Vec<u32>,
    /// The HPCC simulator's `QLEN_MON_FILE` text, when the monitor ran.
    pub qlen_mon: Option<String>,
    /// The §5.9 table, when hosts ran with a profile.
    pub host_path: Option<crate::host::PathTable>,
    /// The sampling interval of `queues` and `flow_progress` (0: none).
    /// A queue absent from a sample was empty then.
    pub sample: Ps,
    /// Most rows kept in `queues` and `pfc`: a log that long was cut short,
    /// so an absent queue after its last row is unknown, not empty.
    pub max_rows: usize,
}

/// Percentiles of one group of flows.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct Percentiles {
    pub flows: usize,
    pub p50: f64,
    pub p95: f64,
    pub p99: f64,
    pub mean: f64,
    pub max: f64,
}

/// Nearest-rank percentiles of `v` (sorted in place).
pub fn percentiles(v: &mut [f64]) -> Option<Percentiles> {
    if v.is_empty() {
        return None;
    }
    v.sort_by(|a, b| a.total_cmp(b));
    let at = |p: f64| v[((p / 100.0 * v.len() as f64).ceil() as usize).clamp(1, v.len()) - 1];
    Some(Percentiles {
        flows: v.len(),
        p50: at(50.0),
        p95: at(95.0),
        p99: at(99.0),
        mean: v.iter().sum::<f64>() / v.len() as f64,
        max: v[v.len() - 1],
    })
}

/// Size buckets for slowdown: upper bounds in bytes (exclusive) and labels.
pub const BUCKETS: [(u64, &str); 5] = [
    (10_000, "<10KB"),
    (100_000, "10KB-100KB"),
    (1_000_000, "100KB-1MB"),
    (10_000_000, "1MB-10MB"),
    (u64::MAX, ">=10MB"),
];

#[derive(Debug, Clone, Serialize)]
pub struct FlowCounts {
    pub total: usize,
    pub finished: usize,
    pub failed: usize,
    pub unfinished: usize,
}

#[derive(Debug, Clone, Serialize)]
pub struct Summary {
    pub flows: FlowCounts,
    pub slowdown: Option<Percentiles>,
    pub slowdown_by_size: Vec<(String, Percentiles)>,
    pub drops: u64,
    pub dropped_bytes: u64,
    pub pfc_pause_frames: u64,
    pub pfc_resume_frames: u64,
    pub pfc_paused_us: f64,
    pub ecn_marks: u64,
    pub cnps: u64,
    pub retransmissions: u64,
    pub timeouts: u64,
    pub injected_bytes: u64,
    pub delivered_bytes: u64,
    pub in_flight_bytes: u64,
    pub buffer_peak_bytes: u64,
    pub events: u64,
    pub events_by_kind: EventsByKind,
    /// Events per packet delivered to a host (data, ACKs, CNPs alike).
    pub events_per_delivered_packet: f64,
    /// Events per packet-link crossing (see [`EventsByKind::hops`]).
    pub events_per_hop: f64,
    pub peak_pending_events: u64,
    pub simulated_us: f64,
    pub wall_seconds: f64,
    pub events_per_second: f64,
    pub deadlock: Option<String>,
    pub first_error: Option<String>,
    /// The DDR-to-DDR table (hosts with a profile only).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub host_path: Option<crate::host::PathTable>,
    /// Large fabrics only: the run went window by window, group of nodes
    /// by group (see [`crate::event::Partition`]).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub partition: Option<PartitionSummary>,
}

/// How a partitioned run split the fabric and time.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct PartitionSummary {
    pub groups: u32,
    pub window_ns: u64,
}

/// `a / b`, 0 when `b` is.
fn ratio(a: u64, b: u64) -> f64 {
    if b == 0 { 0.0 } else { a as f64 / b as f64 }
}

impl Report {
    pub fn summary(&self, wall_seconds: f64) -> Summary {
        let c = &self.counters;
        let done: Vec<&FlowResult> = self.flows.iter().filter(|f| f.ok).collect();
        let mut all: Vec<f64> = done.iter().filter_map(|f| f.slowdown()).collect();
        let mut by = Vec::new();
        let mut lo = 0;
        for (hi, label) in BUCKETS {
            let mut v: Vec<f64> = done
                .iter()
                .filter(|f| f.size >= lo && f.size < hi)
                .filter_map(|f| f.slowdown())
                .collect();
            if let Some(p) = percentiles(&mut v) {
                by.push((label.to_string(), p));
            }
            lo = hi;
        }
        let finished = self.flows.iter().filter(|f| f.finish.is_some()).count();
        Summary {
            flows: FlowCounts {
                total: self.flows.len(),
                finished: done.len(),
                failed: finished - done.len(),
                unfinished: self.flows.len() - finished,
            },
            slowdown: percentiles(&mut all),
            slowdown_by_size: by,
            drops: c.dropped_pkts,
            dropped_bytes: c.dropped_bytes,
            pfc_pause_frames: c.pfc_xoff_tx,
            pfc_resume_frames: c.pfc_xon_tx,
            pfc_paused_us: c.paused_ps as f64 / 1e6,
            ecn_marks: c.ecn_marks,
            cnps: c.cnps_tx,
            retransmissions: c.retransmits,
            timeouts: c.timeouts,
            injected_bytes: c.injected_bytes,
            delivered_bytes: c.delivered_bytes,
            in_flight_bytes: c.live_bytes,
            buffer_peak_bytes: c.buffer_peak,
            events: self.events,
            events_by_kind: c.events_by_kind,
            events_per_delivered_packet: ratio(self.events, c.delivered_pkts),
            events_per_hop: ratio(self.events, c.events_by_kind.hops()),
            peak_pending_events: c.peak_pending_events,
            partition: c.partition,
            simulated_us: self.now as f64 / 1e6,
            wall_seconds,
            events_per_second: if wall_seconds > 0.0 {
                self.events as f64 / wall_seconds
            } else {
                0.0
            },
            deadlock: c.deadlock.clone(),
            first_error: c.first_error.clone(),
            host_path: self.host_path.clone(),
        }
    }

    /// The name of host `h` (an index into the hosts).
    pub fn host_name(&self, h: u32) -> &str {
        self.host_nodes
            .get(h as usize)
            .and_then(|&n| self.node_names.get(n as usize))
            .map_or("?", |s| s.as_str())
    }

    /// The node at the other end of `node`'s port `port`.
    ///
    /// The simulator lists ports in (node, port) order, so this is a binary
    /// search: `queues.csv` names a peer on every row, and a linear scan
    /// over 49,000 ports per row made writing it quadratic at 8,192 hosts.
    /// A list in another order still answers, by a scan.
    pub fn peer_name(&self, node: u32, port: u16) -> &str {
        let key = (node, port);
        self.ports
            .binary_search_by_key(&key, |p| (p.node, p.port))
            .ok()
            .and_then(|i| self.ports.get(i))
            .or_else(|| self.ports.iter().find(|p| (p.node, p.port) == key))
            .and_then(|p| self.node_names.get(p.peer as usize))
            .map_or("?", |s| s.as_str())
    }

    fn node_name(&self, node: u32) -> &str {
        self.node_names
            .get(node as usize)
            .map_or("?", |s| s.as_str())
    }

    /// `fct.csv`: one row per flow, times in ns.
    pub fn write_fct_csv(&self, w: &mut impl Write) -> std::io::Result<()> {
        let mut w = csv_writer(w);
        w.write_record([
            "flow_id",
            "src",
            "dst",
            "size_bytes",
            "start_ns",
            "finish_ns",
            "fct_ns",
            "ideal_fct_ns",
            "slowdown",
            "status",
        ])?;
        for f in &self.flows {
            let (finish, fct, sd) = match (f.finish, f.fct(), f.slowdown()) {
                (Some(a), Some(b), Some(s)) => (ns(a), ns(b), format!("{s:.4}")),
                _ => (String::new(), String::new(), String::new()),
            };
            let status = match (f.finish, f.ok) {
                (None, _) => "unfinished",
                (Some(_), true) => "ok",
                (Some(_), false) => "failed",
            };
            w.write_record([
                f.id.to_string().as_str(),
                self.host_name(f.src),
                self.host_name(f.dst),
                &f.size.to_string(),
                &ns(f.start),
                &finish,
                &fct,
                &ns(f.ideal),
                &sd,
                status,
            ])?;
        }
        w.flush()
    }

    /// `queues.csv`: sampled egress queue bytes per switch port and
    /// priority; a queue absent at a sampling instant was empty.
    pub fn write_queues_csv(&self, w: &mut impl Write) -> std::io::Result<()> {
        let mut w = csv_writer(w);
        w.write_record(["time_ns", "switch", "port", "peer", "prio", "bytes"])?;
        for s in &self.queues {
            w.write_record([
                ns(s.time).as_str(),
                self.node_name(s.node),
                &s.port.to_string(),
                self.peer_name(s.node, s.port),
                &s.prio.to_string(),
                &s.bytes.to_string(),
            ])?;
        }
        w.flush()
    }

    /// `pfc.csv`: every PFC happening, time-ordered.
    pub fn write_pfc_csv(&self, w: &mut impl Write) -> std::io::Result<()> {
        let mut w = csv_writer(w);
        w.write_record(["time_ns", "node", "port", "prio", "event"])?;
        for e in &self.pfc {
            w.write_record([
                ns(e.time).as_str(),
                self.node_name(e.node),
                &e.port.to_string(),
                &e.prio.to_string(),
                e.what,
            ])?;
        }
        w.flush()
    }

    /// `flow_goodput.csv`: the raw samples behind the goodput plot, one row
    /// per traced flow per sampling instant: bytes delivered so far, and
    /// the goodput over the interval since the flow's previous sample.
    pub fn write_goodput_csv(&self, w: &mut impl Write) -> std::io::Result<()> {
        let mut w = csv_writer(w);
        w.write_record([
            "time_ns",
            "flow_id",
            "src",
            "dst",
            "delivered_bytes",
            "gbps",
        ])?;
        let mut last: std::collections::HashMap<u32, (Ps, u64)> = Default::default();
        for &(t, f, b) in &self.flow_progress {
            let gbps = match last.insert(f, (t, b)) {
                Some((t0, b0)) if t > t0 => {
                    format!(
                        "{:.3}",
                        (b - b0) as f64 * 8.0 / ((t - t0) as f64 / 1e12) / 1e9
                    )
                }
                _ => String::new(),
            };
            let (src, dst) = self.flows.get(f as usize).map_or(("?", "?"), |fl| {
                (self.host_name(fl.src), self.host_name(fl.dst))
            });
            w.write_record([
                ns(t).as_str(),
                &f.to_string(),
                src,
                dst,
                &b.to_string(),
                &gbps,
            ])?;
        }
        w.flush()
    }

    /// Writes fct.csv, queues.csv, pfc.csv, flow_goodput.csv and
    /// summary.json into `dir`
    /// (and pfc.pcap when PFC frames were captured).
    pub fn write_all(&self, dir: &Path, wall_seconds: f64) -> std::io::Result<Summary> {
        std::fs::create_dir_all(dir)?;
        let open = |name: &str| -> std::io::Result<std::io::BufWriter<std::fs::File>> {
            Ok(std::io::BufWriter::new(std::fs::File::create(
                dir.join(name),
            )?))
        };
        let mut f = open("fct.csv")?;
        self.write_fct_csv(&mut f)?;
        f.flush()?;
        let mut f = open("queues.csv")?;
        self.write_queues_csv(&mut f)?;
        f.flush()?;
        let mut f = open("pfc.csv")?;
        self.write_pfc_csv(&mut f)?;
        f.flush()?;
        let mut f = open("flow_goodput.csv")?;
        self.write_goodput_csv(&mut f)?;
        f.flush()?;
        let s = self.summary(wall_seconds);
        let mut f = open("summary.json")?;
        serde_json::to_writer_pretty(&mut f, &s).map_err(std::io::Error::other)?;
        writeln!(f)?;
        f.flush()?;
        if !self.pfc_frames.is_empty() {
            let f = open("pfc.pcap")?;
            let mut w = roce_wire::pcap::CaptureWriter::new(f).map_err(std::io::Error::other)?;
            for (ts, frame) in &self.pfc_frames {
                w.write(*ts, frame).map_err(std::io::Error::other)?;
            }
            w.into_inner().flush()?;
        }
        Ok(s)
    }
}

/// Picoseconds as nanoseconds with three decimals, as every CSV writes time.
fn ns(p: Ps) -> String {
    format!("{:.3}", p as f64 / 1e3)
}

/// A CSV writer over `w`: fields quoted only when they must be (a comma,
/// quote or line break in a node name), so ordinary rows read as before.
fn csv_writer<W: Write>(w: W) -> csv::Writer<W> {
    csv::WriterBuilder::new().from_writer(w)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fixture() -> Report {
        Report {
            now: 2_000_000,
            events: 0,
            counters: Counters::default(),
            flows: vec![FlowResult {
                id: 0,
                src: 0,
                dst: 1,
                size: 1000,
                start: 0,
                finish: Some(1_500_000),
                ideal: 1_000_000,
                ok: true,
                sport: 1,
            }],
            ports: Vec::new(),
            pfc: vec![PfcEvent {
                time: 1_000,
                node: 2,
                port: 1,
                prio: 3,
                what: "xoff_tx",
            }],
            queues: Vec::new(),
            flow_progress: vec![(0, 0, 0), (1_000_000, 0, 1000)],
            pfc_frames: Vec::new(),
            node_names: vec!["rack 1, host \"a\"".into(), "b".into(), "sw,1".into()],
            host_nodes: vec![0, 1],
            sample: 1_000_000,
            max_rows: 10,
            qlen_mon: None,
            host_path: None,
        }
    }

    #[test]
    fn node_names_with_commas_and_quotes_stay_one_field() {
        let r = fixture();
        let mut out = Vec::new();
        r.write_fct_csv(&mut out).unwrap();
        let text = String::from_utf8(out).unwrap();
        assert!(
            text.contains("0,\"rack 1, host \"\"a\"\"\",b,1000,"),
            "{text}"
        );
        let mut rd = csv::Reader::from_reader(text.as_bytes());
        let row = rd.records().next().unwrap().unwrap();
        assert_eq!(row.len(), 10);
        assert_eq!(&row[1], "rack 1, host \"a\"");
        let mut out = Vec::new();
        r.write_pfc_csv(&mut out).unwrap();
        let text = String::from_utf8(out).unwrap();
        assert_eq!(
            text,
            "time_ns,node,port,prio,event\n1.000,\"sw,1\",1,3,xoff_tx\n"
        );
        let mut out = Vec::new();
        r.write_goodput_csv(&mut out).unwrap();
        let text = String::from_utf8(out).unwrap();
        assert!(
            text.ends_with("1000.000,0,\"rack 1, host \"\"a\"\"\",b,1000,8.000\n"),
            "{text}"
        );
    }

    fn port(node: u32, port: u16, peer: u32) -> PortStats {
        PortStats {
            node,
            port,
            peer,
            rate_bps: 0,
            tx_bytes: 0,
            xoff_tx: [0; NPRIO],
            xon_tx: [0; NPRIO],
            xoff_rx: [0; NPRIO],
            paused_ps: [0; NPRIO],
            max_qbytes: [0; NPRIO],
        }
    }

    #[test]
    fn peer_names_found_in_sorted_and_unsorted_port_lists() {
        let mut r = fixture();
        r.ports = vec![port(0, 0, 2), port(1, 0, 2), port(2, 0, 0), port(2, 1, 1)];
        let names = |r: &Report| {
            [(0, 0), (1, 0), (2, 0), (2, 1), (2, 2), (3, 0)]
                .map(|(n, p)| r.peer_name(n, p).to_string())
        };
        let want = ["sw,1", "sw,1", "rack 1, host \"a\"", "b", "?", "?"];
        assert_eq!(names(&r), want);
        r.ports.reverse();
        assert_eq!(names(&r), want);
    }

    #[test]
    fn nearest_rank() {
        let mut v: Vec<f64> = (1..=100).map(f64::from).collect();
        let p = percentiles(&mut v).unwrap();
        assert_eq!((p.p50, p.p95, p.p99, p.max), (50.0, 95.0, 99.0, 100.0));
        assert!(percentiles(&mut []).is_none());
    }
}
