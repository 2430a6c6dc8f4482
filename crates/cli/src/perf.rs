//! `roce perf`: perftest for roce, over real UDP sockets.
//!
//! Without SERVER it listens on TCP `-p` (18515) and serves one client; with
//! SERVER it connects, and `--loopback` runs both in one process (server on
//! 127.0.0.1, client on 127.0.0.2). The TCP connection carries the endpoint
//! exchange and then the control messages (start a size, done, results). The
//! RDMA itself goes over the verbs engine. Options follow perftest's names.

use anyhow::{Context as _, Result, anyhow, bail};
use clap::Args;
use roce_verbs::exchange::Control;
use roce_verbs::*;
use serde::{Deserialize, Serialize};
use std::net::{IpAddr, Ipv4Addr, SocketAddr, TcpListener};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

#[derive(Debug, Clone, Args)]
pub struct PerfArgs {
    /// send_bw, write_bw, read_bw, atomic_bw, send_lat, write_lat, read_lat, atomic_lat
    pub test: String,
    /// Server to connect to; without it, listen.
    pub server: Option<String>,
    /// Run server and client in this process over UDP on 127.0.0.1 and 127.0.0.2.
    #[arg(long)]
    pub loopback: bool,
    /// Message size in bytes (default 65536 for bandwidth, 2 for latency; atomics are 8).
    #[arg(short = 's', long)]
    pub size: Option<usize>,
    /// Run every size from 2 bytes to 8 MiB.
    #[arg(short = 'a', long = "all")]
    pub all: bool,
    /// Iterations per size (default 5000 for bandwidth, 1000 for latency).
    #[arg(short = 'n', long)]
    pub iters: Option<u64>,
    /// Run each bandwidth test for this many seconds instead of a number of iterations.
    #[arg(short = 'D', long)]
    pub duration: Option<f64>,
    /// Number of QPs (bandwidth tests).
    #[arg(short = 'q', long = "qp", default_value_t = 1)]
    pub qps: u32,
    /// Path MTU: 256, 512, 1024, 2048 or 4096 (default: the port's active
    /// MTU, from the IP MTU of the interface holding the address, as rxe
    /// derives it: 4096 on loopback, 1024 on a 1500-byte Ethernet; a server
    /// without -m takes the client's).
    #[arg(short = 'm', long)]
    pub mtu: Option<u32>,
    /// Send messages up to this size inline (default as perftest's: 220
    /// for write_lat, 236 for send_lat, 0 for the others).
    #[arg(short = 'I', long = "inline_size")]
    pub inline_size: Option<u32>,
    /// Work requests in flight per QP.
    #[arg(short = 't', long = "tx-depth", default_value_t = 128)]
    pub tx_depth: u32,
    /// Request a completion every this many work requests.
    #[arg(long = "cq-mod", default_value_t = 100)]
    pub cq_mod: u32,
    /// TCP port of the out-of-band exchange.
    #[arg(short = 'p', long, default_value_t = EXCHANGE_PORT)]
    pub port: u16,
    /// UDP port of the RoCE engine (default 4791; 0 picks a free one).
    #[arg(long = "udp-port")]
    pub udp_port: Option<u16>,
    /// Local IPv4 address for the engine (default: the one the TCP connection uses).
    #[arg(long)]
    pub bind: Option<Ipv4Addr>,
    /// Check every byte end to end.
    #[arg(long)]
    pub verify: bool,
    /// Capture every frame this side sends and receives.
    #[arg(long)]
    pub pcap: Option<PathBuf>,
    /// Drop this fraction of sent packets.
    #[arg(long, default_value_t = 0.0)]
    pub loss: f64,
    /// Reorder this fraction of sent packets.
    #[arg(long, default_value_t = 0.0)]
    pub reorder: f64,
    /// Duplicate this fraction of sent packets.
    #[arg(long, default_value_t = 0.0)]
    pub dup: f64,
    /// Flip one bit in this fraction of sent packets (after the ICRC).
    #[arg(long, default_value_t = 0.0)]
    pub corrupt: f64,
    /// Mark this fraction of ECN-capable sent packets Congestion Experienced
    /// (as a congested switch would), so the peer answers with CNPs.
    #[arg(long = "ce-mark", default_value_t = 0.0)]
    pub ce_mark: f64,
    /// Seed of the fault injector.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Turn UDP GSO and GRO off (one datagram per socket message), e.g. to
    /// compare; by default they are used where the kernel has them. Give it
    /// to both sides when they share a host.
    #[arg(long = "no-offload")]
    pub no_offload: bool,
    /// Print one JSON object instead of the table.
    #[arg(long)]
    pub json: bool,
    /// With --loopback: after each size, run what the kernel alone does with
    /// it (a TCP stream of the same writes for the bandwidth tests, a UDP
    /// ping-pong of the same size for the latency tests) and report roce's
    /// ratio to it.
    #[arg(long)]
    pub baseline: bool,
    /// After each size, print where roce's own engines spent their time
    /// (receive and send system calls, ICRC, RNIC logic, memory copy,
    /// completions, idle polling), what each stage alone would carry, and
    /// which stage binds; with --loopback beside the kernel's --baseline.
    #[arg(long)]
    pub analyze: bool,
    /// Do not account the engines' time per stage (to measure what the
    /// accounting costs).
    #[arg(long = "no-profile")]
    pub no_profile: bool,
    /// How the engines wait when idle: busy (spin), adaptive (spin, then
    /// block in epoll) or event (block at once). Default: adaptive for
    /// bandwidth tests, busy for latency tests (as perftest's are).
    #[arg(long)]
    pub poll: Option<roce_verbs::PollMode>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
enum Verb {
    Send,
    Write,
    Read,
    Atomic,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
enum Kind {
    Bw,
    Lat,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
struct Test {
    verb: Verb,
    kind: Kind,
}

impl Test {
    fn parse(s: &str) -> Result<Test> {
        let (v, k) = s
            .split_once(['_', '-'])
            .ok_or_else(|| anyhow!("unknown test {s:?}: expected e.g. write_bw or read_lat"))?;
        let verb = match v {
            "send" => Verb::Send,
            "write" => Verb::Write,
            "read" => Verb::Read,
            "atomic" => Verb::Atomic,
            _ => bail!("unknown test {s:?}: the verb is one of send, write, read, atomic"),
        };
        let kind = match k {
            "bw" => Kind::Bw,
            "lat" => Kind::Lat,
            _ => bail!("unknown test {s:?}: the kind is bw or lat"),
        };
        Ok(Test { verb, kind })
    }
    fn name(&self) -> String {
        let v = match self.verb {
            Verb::Send => "send",
            Verb::Write => "write",
            Verb::Read => "read",
            Verb::Atomic => "atomic",
        };
        let k = match self.kind {
            Kind::Bw => "bw",
            Kind::Lat => "lat",
        };
        format!("{v}_{k}")
    }
    fn title(&self) -> &'static str {
        match (self.verb, self.kind) {
            (Verb::Send, Kind::Bw) => "Send BW Test",
            (Verb::Write, Kind::Bw) => "RDMA_Write BW Test",
            (Verb::Read, Kind::Bw) => "RDMA_Read BW Test",
            (Verb::Atomic, Kind::Bw) => "Atomic FETCH_AND_ADD BW Test",
            (Verb::Send, Kind::Lat) => "Send Latency Test",
            (Verb::Write, Kind::Lat) => "RDMA_Write Latency Test",
            (Verb::Read, Kind::Lat) => "RDMA_Read Latency Test",
            (Verb::Atomic, Kind::Lat) => "Atomic FETCH_AND_ADD Latency Test",
        }
    }
}

/// Control messages on the TCP connection.
#[derive(Debug, Serialize, Deserialize)]
enum Msg {
    Hello {
        test: Test,
        sizes: Vec<usize>,
        mtu: u32,
        tx_depth: u32,
        verify: bool,
        endpoints: Vec<Endpoint>,
    },
    Welcome {
        endpoints: Vec<Endpoint>,
    },
    Refuse {
        why: String,
    },
    Start {
        size: usize,
        iters: u64,
    },
    Ready,
    Done {
        size: usize,
        count: u64,
    },
    Check {
        verified: Option<bool>,
        detail: String,
        /// Boxed: the largest variant by far.
        counters: Box<Stats>,
        /// Where the server's engine spent the size's run (none from a
        /// server that does not profile or predates profiling).
        #[serde(default)]
        profile: Option<Box<StageProfile>>,
    },
}

/// Everything one size's run measured.
#[derive(Debug, Clone, Serialize)]
struct SizeResult {
    size: usize,
    iterations: u64,
    seconds: f64,
    #[serde(skip_serializing_if = "Option::is_none")]
    bw_gbps: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    bw_peak_mib: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    bw_avg_mib: Option<f64>,
    msg_rate_mpps: f64,
    #[serde(skip_serializing_if = "Option::is_none")]
    latency_us: Option<Latency>,
    verified: Option<bool>,
    #[serde(skip_serializing_if = "Option::is_none")]
    baseline: Option<Baseline>,
    /// Where each side's engine spent the run, per stage.
    #[serde(skip_serializing_if = "Option::is_none")]
    profile: Option<SideProfiles>,
    /// `--analyze`: the stages as a table, the binding one named.
    #[serde(skip_serializing_if = "Option::is_none")]
    analysis: Option<roce_verbs::Analysis>,
}

#[derive(Debug, Clone, Copy, Serialize)]
struct SideProfiles {
    client: StageProfile,
    #[serde(skip_serializing_if = "Option::is_none")]
    server: Option<StageProfile>,
}

/// The kernel's own figure for one size, run right after roce's
/// (`--baseline`), and roce's ratio to it.
#[derive(Debug, Clone, Copy, Serialize)]
struct Baseline {
    /// `tcp_stream` (bandwidth tests) or `udp_pingpong` (latency tests).
    kind: &'static str,
    /// TCP stream of writes of the same size over loopback.
    #[serde(skip_serializing_if = "Option::is_none")]
    tcp_gbps: Option<f64>,
    /// UDP ping-pong's t_typical: half the round trip for WRITE and SEND
    /// (perftest's measure for those), the whole round trip for READ and
    /// atomics (one operation is one round trip).
    #[serde(skip_serializing_if = "Option::is_none")]
    udp_typical_us: Option<f64>,
    /// The same with RoCE's shape and none of its processing (WRITE and
    /// SEND only; see `roce_verbs::baseline`): the kernel's share.
    #[serde(skip_serializing_if = "Option::is_none")]
    rc_shaped_typical_us: Option<f64>,
    /// roce's bandwidth over TCP's, or roce's t_typical over UDP's.
    ratio: f64,
}

#[derive(Debug, Clone, Copy, Serialize)]
struct Latency {
    min: f64,
    max: f64,
    typical: f64,
    avg: f64,
    stdev: f64,
    p99: f64,
    p999: f64,
}

impl Latency {
    fn from_ns(mut v: Vec<f64>) -> Option<Latency> {
        if v.is_empty() {
            return None;
        }
        v.sort_by(f64::total_cmp);
        let n = v.len();
        let avg = v.iter().sum::<f64>() / n as f64;
        let var = v.iter().map(|x| (x - avg) * (x - avg)).sum::<f64>() / n as f64;
        let pct = |p: f64| v[((n as f64 * p).ceil() as usize).clamp(1, n) - 1];
        let us = |x: f64| x / 1000.0;
        Some(Latency {
            min: us(v[0]),
            max: us(v[n - 1]),
            typical: us(v[n / 2]),
            avg: us(avg),
            stdev: us(var.sqrt()),
            p99: us(pct(0.99)),
            p999: us(pct(0.999)),
        })
    }
}

const SERVER_SEED: u8 = 0x77;
const CLIENT_SEED: u8 = 0x11;
/// How long a side waits for its peer to make progress before giving up.
const STALL: Duration = Duration::from_secs(30);

fn pattern(seed: u8, n: usize) -> Vec<u8> {
    (0..n)
        .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed) ^ (i >> 8) as u8)
        .collect()
}

fn sizes(args: &PerfArgs, t: Test) -> Vec<usize> {
    if t.verb == Verb::Atomic {
        return vec![8];
    }
    if args.all {
        return (1..=23).map(|e| 1usize << e).collect();
    }
    let d = if t.kind == Kind::Bw { 65536 } else { 2 };
    vec![args.size.unwrap_or(d).max(1)]
}

fn mtu_of(bytes: u32) -> Result<Mtu> {
    Mtu::from_bytes(bytes)
        .ok_or_else(|| anyhow!("-m/--mtu {bytes}: the path MTU is 256, 512, 1024, 2048 or 4096"))
}

fn faults(args: &PerfArgs, seed: u64) -> Result<FaultConfig> {
    for (n, p) in [
        ("loss", args.loss),
        ("reorder", args.reorder),
        ("dup", args.dup),
        ("corrupt", args.corrupt),
        ("ce-mark", args.ce_mark),
    ] {
        if !(0.0..=1.0).contains(&p) {
            bail!("--{n} {p}: a probability is between 0 and 1");
        }
    }
    Ok(FaultConfig {
        loss: args.loss,
        reorder: args.reorder,
        dup: args.dup,
        corrupt: args.corrupt,
        ce_mark: args.ce_mark,
        seed,
        ..Default::default()
    })
}

/// One side's verbs resources.
struct Side {
    ctx: Context,
    _pd: Pd,
    cq: Cq,
    mr: Mr,
    qps: Vec<Qp>,
    /// The buffer is two halves of the largest size: sources and READ/ping-pong
    /// targets in the lower, receives (sized for any message) in the upper.
    half: usize,
}

/// Opens the engine and creates PD, CQ, one MR of `buf` bytes and `n` QPs in INIT.
/// `mtu` in bytes, or the device's active MTU when `None`.
/// perftest's inline size when `-I` is not given: its RC defaults for
/// the WRITE and SEND latency tests (`DEF_INLINE_WRITE`,
/// `DEF_INLINE_SEND_RC_UC`), none for the rest.
fn default_inline(test: Test) -> u32 {
    match (test.verb, test.kind) {
        (Verb::Write, Kind::Lat) => 220,
        (Verb::Send, Kind::Lat) => 236,
        _ => 0,
    }
}

impl PerfArgs {
    /// The inline size in effect ([`run`] fills in the default).
    fn inline(&self) -> u32 {
        self.inline_size.unwrap_or(0)
    }
}

fn open_side(
    ip: Ipv4Addr,
    args: &PerfArgs,
    cfg: EngineConfig,
    buf: usize,
    n: u32,
    mtu: Option<u32>,
) -> Result<(Context, Pd, Cq, Mr, Vec<PreparedQp>)> {
    let (udp_port, tx_depth, inline) = (args.udp_port, args.tx_depth, args.inline());
    let mtu = mtu.map(mtu_of).transpose()?;
    let port = udp_port.unwrap_or(ROCE_PORT);
    let addr = SocketAddr::new(IpAddr::V4(ip), port);
    let ctx = match Device::open_with(addr, cfg.clone()) {
        Ok(c) => c,
        // Two stacks on one host cannot both own 4791: take a free port
        // unless the user asked for this one.
        Err(Error::AddrInUse(_)) if udp_port.is_none() => {
            let c = Device::open_with(SocketAddr::new(IpAddr::V4(ip), 0), cfg)?;
            eprintln!(
                "roce: note: UDP {addr} is in use; this side uses {} instead",
                c.local_addr()
            );
            c
        }
        Err(e) => return Err(e.into()),
    };
    let mtu = mtu.unwrap_or_else(|| ctx.active_mtu());
    let pd = ctx.alloc_pd()?;
    let depth = (tx_depth.max(1) * 2 + 1024) * n.max(1);
    let cq = ctx.create_cq(depth)?;
    let mr = pd.reg_mr(buf.max(16), Access::ALL)?;
    let mut qps = Vec::new();
    for _ in 0..n.max(1) {
        qps.push(
            pd.qp_builder(&cq)
                .mtu(mtu)
                .max_send_wr(tx_depth.max(1) + 1)
                .max_recv_wr(1024)
                .max_inline_data(inline)
                .timeout(12)
                .build()?,
        );
    }
    Ok((ctx, pd, cq, mr, qps))
}

fn engine_config(args: &PerfArgs, seed: u64, pcap: Option<PathBuf>) -> Result<EngineConfig> {
    Ok(EngineConfig {
        faults: faults(args, seed)?,
        pcap,
        offload: !args.no_offload,
        profile: !args.no_profile,
        poll: args.poll.unwrap_or_default().into(),
        ..Default::default()
    })
}

pub fn run(mut args: PerfArgs) -> Result<()> {
    let test = Test::parse(&args.test)?;
    args.inline_size.get_or_insert(default_inline(test));
    args.poll.get_or_insert(match test.kind {
        Kind::Bw => roce_verbs::PollMode::Adaptive,
        Kind::Lat => roce_verbs::PollMode::Busy,
    });
    args.mtu.map(mtu_of).transpose()?;
    if args.qps == 0 || args.tx_depth == 0 || args.cq_mod == 0 {
        bail!("-q, -t and --cq-mod must be at least 1");
    }
    if args.baseline && !args.loopback {
        bail!("--baseline measures loopback TCP and UDP beside the test; use it with --loopback");
    }
    if args.duration.is_some() && test.kind == Kind::Lat {
        bail!("-D/--duration is for bandwidth tests; latency tests take -n/--iters");
    }
    if args.loopback {
        if args.server.is_some() {
            bail!("--loopback runs both sides; give no SERVER");
        }
        return run_loopback(args, test);
    }
    match args.server.clone() {
        Some(s) => {
            let mut report = client(&args, test, &s, args.bind)?;
            print_report(&args, test, &mut report)
        }
        None => {
            let listener = TcpListener::bind(SocketAddr::new(
                args.bind
                    .map_or(IpAddr::V4(Ipv4Addr::UNSPECIFIED), IpAddr::V4),
                args.port,
            ))
            .with_context(|| format!("listening on TCP port {}", args.port))?;
            if !args.json {
                eprintln!(
                    "roce perf {}: waiting for a client on TCP {}",
                    test.name(),
                    listener.local_addr()?
                );
            }
            let summary = server(&args, test, &listener)?;
            if !args.json {
                eprintln!("{summary}");
            }
            Ok(())
        }
    }
}

fn run_loopback(args: PerfArgs, test: Test) -> Result<()> {
    let server_ip = Ipv4Addr::new(127, 0, 0, 1);
    let client_ip = Ipv4Addr::new(127, 0, 0, 2);
    let listener = TcpListener::bind((server_ip, 0)).context("listening on 127.0.0.1")?;
    let port = listener.local_addr()?.port();
    let mut sargs = args.clone();
    sargs.pcap = None; // the client's capture holds the whole conversation
    sargs.seed = args.seed.wrapping_add(1);
    sargs.bind = Some(server_ip);
    let srv = std::thread::Builder::new()
        .name("perf-server".into())
        .spawn(move || server(&sargs, test, &listener))?;
    let report = client(&args, test, &format!("{server_ip}:{port}"), Some(client_ip));
    let served = srv
        .join()
        .map_err(|_| anyhow!("the server thread panicked"))?;
    let mut report = report?;
    served?;
    if args.baseline || args.analyze {
        for r in &mut report.results {
            r.baseline = baseline_for(test, r)?;
        }
    }
    print_report(&args, test, &mut report)
}

/// `--analyze`: the size's stage profiles against what it moved, beside the
/// kernel's figure when the baseline ran.
fn analysis_for(r: &SizeResult) -> Option<roce_verbs::Analysis> {
    let p = r.profile?;
    let work = roce_verbs::profile::Workload {
        message_bytes: r.size as u64,
        messages: r.iterations,
        seconds: r.seconds,
    };
    let kernel = r.baseline.map(|b| roce_verbs::profile::KernelFigure {
        kind: b.kind.to_string(),
        gbps: b.tcp_gbps,
        typical_us: b.udp_typical_us,
    });
    let mut sides = vec![("client", &p.client)];
    if let Some(s) = &p.server {
        sides.push(("server", s));
    }
    Some(roce_verbs::analyze(&sides, &work, kernel))
}

/// One line under the table: the kernel's figure and roce's ratio to it.
fn print_baseline(test: Test, x: &SizeResult) {
    let Some(b) = x.baseline else {
        println!(
            " baseline {} B: none (a UDP datagram holds at most {} bytes of it)",
            x.size,
            roce_verbs::baseline::MAX_PINGPONG_SIZE
        );
        return;
    };
    if let Some(g) = b.tcp_gbps {
        println!(
            " baseline {} B: TCP stream of the same writes {g:.2} Gb/s; {} {:.2} Gb/s = {:.2}x TCP",
            x.size,
            test.name(),
            x.bw_gbps.unwrap_or(0.0),
            b.ratio
        );
    } else if let Some(u) = b.udp_typical_us {
        let what = if whole_round_trip(test) {
            "round trip"
        } else {
            "half round trip"
        };
        let shaped = b
            .rc_shaped_typical_us
            .map_or(String::new(), |s| format!(" (RC-shaped {s:.2} us)"));
        println!(
            " baseline {} B: UDP ping-pong t_typical {u:.2} us, {what}{shaped}; {} {:.2} us = {:.2}x UDP",
            x.size,
            test.name(),
            x.latency_us.map_or(0.0, |l| l.typical),
            b.ratio
        );
    }
}

/// READ and atomic latency tests time a whole round trip (one operation
/// is one); WRITE and SEND report half of one, as perftest does.
fn whole_round_trip(test: Test) -> bool {
    matches!(test.verb, Verb::Read | Verb::Atomic)
}

/// Runs the kernel's baseline for one size's result (see [`Baseline`]);
/// none for a latency test whose messages no UDP datagram holds.
fn baseline_for(test: Test, r: &SizeResult) -> Result<Option<Baseline>> {
    use roce_verbs::baseline as kernel;
    if test.kind == Kind::Lat && r.size > kernel::MAX_PINGPONG_SIZE {
        return Ok(None);
    }
    Ok(Some(match test.kind {
        Kind::Bw => {
            // As long as roce ran, within reason.
            let dur = Duration::from_secs_f64(r.seconds.clamp(0.5, 10.0));
            let t = kernel::tcp_stream(r.size, dur).context("the TCP baseline")?;
            Baseline {
                kind: "tcp_stream",
                tcp_gbps: Some(t.gbps()),
                udp_typical_us: None,
                rc_shaped_typical_us: None,
                ratio: r.bw_gbps.unwrap_or(0.0) / t.gbps().max(1e-9),
            }
        }
        Kind::Lat => {
            let half = kernel::typical(
                &kernel::udp_pingpong(r.size, r.iterations).context("the UDP baseline")?,
            ) / 1000.0;
            let whole = whole_round_trip(test);
            let udp = if whole { 2.0 * half } else { half };
            let shaped = if whole {
                None
            } else {
                let s = kernel::rc_shaped_pingpong(r.size, r.iterations)
                    .context("the RC-shaped UDP baseline")?;
                Some(kernel::typical(&s) / 1000.0)
            };
            Baseline {
                kind: "udp_pingpong",
                tcp_gbps: None,
                udp_typical_us: Some(udp),
                rc_shaped_typical_us: shaped,
                ratio: r.latency_us.map_or(0.0, |l| l.typical) / udp.max(1e-9),
            }
        }
    }))
}

/// What the client hands to the printer.
struct Report {
    results: Vec<SizeResult>,
    local: Vec<Endpoint>,
    remote: Vec<Endpoint>,
    counters: Stats,
    server_counters: Stats,
    details: Vec<String>,
}

fn client(args: &PerfArgs, test: Test, server: &str, bind: Option<Ipv4Addr>) -> Result<Report> {
    let server = if server.contains(':') {
        server.to_string()
    } else {
        format!("{server}:{}", args.port)
    };
    let mut ctl = Control::connect(&server, Duration::from_secs(5))?;
    let ip = match bind {
        Some(ip) => ip,
        None => match ctl.local_addr().ip() {
            IpAddr::V4(v) => v,
            IpAddr::V6(v) => v
                .to_ipv4_mapped()
                .ok_or_else(|| anyhow!("the connection to {server} is IPv6; give --bind IPV4"))?,
        },
    };
    let sizes = sizes(args, test);
    let max = sizes.iter().copied().max().unwrap_or(8);
    let buf = 2 * max;
    let nqp = if test.kind == Kind::Lat { 1 } else { args.qps };
    let cfg = engine_config(args, args.seed, args.pcap.clone())?;
    let (ctx, pd, cq, mr, prepared) = open_side(ip, args, cfg, buf, nqp, args.mtu)?;
    let local: Vec<Endpoint> = prepared.iter().map(|q| q.endpoint_with(&mr)).collect();
    ctl.send(&Msg::Hello {
        test,
        sizes: sizes.clone(),
        mtu: local.first().map_or(1024, |e| e.mtu),
        tx_depth: args.tx_depth,
        verify: args.verify,
        endpoints: local.clone(),
    })?;
    let remote = match ctl.recv::<Msg>()? {
        Msg::Welcome { endpoints } => endpoints,
        Msg::Refuse { why } => bail!("the server refused: {why}"),
        m => bail!("unexpected reply from the server: {m:?}"),
    };
    if remote.len() != prepared.len() {
        bail!(
            "the server offered {} QPs for {}",
            remote.len(),
            prepared.len()
        );
    }
    let mut qps = Vec::new();
    for (p, r) in prepared.into_iter().zip(&remote) {
        qps.push(p.connect(r)?);
    }
    let side = Side {
        ctx,
        _pd: pd,
        cq,
        mr,
        qps,
        half: max,
    };
    let mut results = Vec::new();
    let mut details = Vec::new();
    let mut server_counters = Stats::default();
    for &size in &sizes {
        let iters = args
            .iters
            .unwrap_or(if test.kind == Kind::Bw { 5000 } else { 1000 })
            .max(1);
        side.mr.write(0, &pattern(CLIENT_SEED, 2 * size))?;
        ctl.send(&Msg::Start { size, iters })?;
        match ctl.recv::<Msg>()? {
            Msg::Ready => {}
            Msg::Refuse { why } => bail!("the server refused: {why}"),
            m => bail!("unexpected message from the server: {m:?}"),
        }
        let before = side.ctx.profile();
        let mut r = match test.kind {
            Kind::Bw => client_bw(args, test, &side, &remote, size, iters)?,
            Kind::Lat => client_lat(
                args,
                test,
                &side,
                &remote[0],
                size,
                iters,
                results.is_empty(),
            )?,
        };
        let mine = side.ctx.profile().since(&before);
        let count = r.iterations;
        ctl.send(&Msg::Done { size, count })?;
        let (sv, detail, counters, theirs) = match ctl.recv::<Msg>()? {
            Msg::Check {
                verified,
                detail,
                counters,
                profile,
            } => (verified, detail, counters, profile),
            m => bail!("unexpected message from the server: {m:?}"),
        };
        server_counters = *counters;
        if mine.enabled {
            r.profile = Some(SideProfiles {
                client: mine,
                server: theirs.map(|b| *b),
            });
        }
        if args.verify {
            let mine = client_verify(test, &side, size)?;
            let ok = mine.is_none() && sv != Some(false);
            r.verified = Some(ok);
            if let Some(m) = mine {
                details.push(format!("{size} B: {m}"));
            }
            if sv == Some(false) {
                details.push(format!("{size} B: server: {detail}"));
            }
        }
        results.push(r);
    }
    side.ctx.flush_pcap()?;
    Ok(Report {
        results,
        local,
        remote,
        counters: side.ctx.stats(),
        server_counters,
        details,
    })
}

/// What the client checks itself after a size.
fn client_verify(test: Test, side: &Side, size: usize) -> Result<Option<String>> {
    let server = pattern(SERVER_SEED, 2 * size);
    Ok(match (test.verb, test.kind) {
        (Verb::Read, _) => {
            let got = side.mr.read(size, size)?;
            (got != server[..size]).then(|| "READ data differs from the server's".into())
        }
        (Verb::Write, Kind::Lat) if size > 1 => {
            let got = side.mr.read(size, size - 1)?;
            (got != server[..size - 1]).then(|| "ping-pong data differs from the server's".into())
        }
        (Verb::Send, Kind::Lat) if size > 1 => {
            let got = side.mr.read(side.half, size - 1)?;
            (got != server[..size - 1]).then(|| "ping-pong data differs from the server's".into())
        }
        _ => None,
    })
}

/// Drives the engine until `done` holds; fails when nothing at all changes
/// for `STALL`. Sending waits until `done` was checked, so the answer the
/// caller posts next leaves together with the RNIC's ACK.
fn spin_until(ctx: &Context, mut done: impl FnMut() -> Result<bool>) -> Result<()> {
    let mut stall = Stall::default();
    loop {
        let mut work = ctx.receive()?;
        if done()? {
            return Ok(());
        }
        work |= ctx.doorbell()?;
        if stall.idle_too_long(work) {
            let why = ctx
                .last_send_error()
                .map_or(String::new(), |e| format!(" (last send error: {e})"));
            bail!("the peer stopped answering for {STALL:?}{why}");
        }
    }
}

/// Notices a peer that stopped for [`STALL`] while a loop spins. The clock
/// is read once when an idle stretch starts and then every so many idle
/// rounds, not every round: a latency test spins between every two
/// packets, and a clock read is a visible share of a round.
#[derive(Default)]
struct Stall {
    idle: u32,
    since: Option<Instant>,
}

impl Stall {
    fn idle_too_long(&mut self, work: bool) -> bool {
        if work {
            self.idle = 0;
            return false;
        }
        self.idle += 1;
        if self.idle == 1 {
            self.since = Some(Instant::now());
            return false;
        }
        self.idle.is_multiple_of(1024) && self.since.is_some_and(|t| t.elapsed() > STALL)
    }
}

fn wc_ok(wc: &Wc, ctx: &Context) -> Result<()> {
    if wc.status == WcStatus::Success {
        return Ok(());
    }
    let why = ctx
        .last_send_error()
        .map_or(String::new(), |e| format!(" (last send error: {e})"));
    bail!(
        "work request {:#x} completed with {}{why}",
        wc.wr_id,
        wc.status.name()
    )
}

fn wr_for(
    test: Test,
    side: &Side,
    remote: &Endpoint,
    size: usize,
    wr_id: u64,
    inline: bool,
) -> SendWr {
    let op = match test.verb {
        Verb::Send => WrOpcode::Send,
        Verb::Write => WrOpcode::RdmaWrite {
            remote_addr: remote.addr,
            rkey: remote.rkey,
        },
        Verb::Read => WrOpcode::RdmaRead {
            remote_addr: remote.addr,
            rkey: remote.rkey,
        },
        Verb::Atomic => WrOpcode::AtomicFetchAndAdd {
            remote_addr: remote.addr,
            rkey: remote.rkey,
            add: 1,
        },
    };
    // READ lands in the upper half, so the source pattern stays intact.
    let local_off = if test.verb == Verb::Read { size } else { 0 };
    let wr = SendWr::new(wr_id, op, vec![side.mr.sge(local_off, size as u32)]);
    if inline && matches!(test.verb, Verb::Send | Verb::Write) {
        wr.inline()
    } else {
        wr
    }
}

fn client_bw(
    args: &PerfArgs,
    test: Test,
    side: &Side,
    remote: &[Endpoint],
    size: usize,
    iters: u64,
) -> Result<SizeResult> {
    let nq = side.qps.len();
    let depth = args.tx_depth;
    let inline = size <= args.inline() as usize;
    let mut outstanding = vec![0u32; nq];
    let mut since_signal = vec![0u32; nq];
    let mut posted = 0u64;
    let mut completed = 0u64;
    let start = Instant::now();
    let deadline = args
        .duration
        .map(|d| start + Duration::from_secs_f64(d.max(0.0)));
    let mut marks: Vec<(Instant, u64)> = vec![(start, 0)];
    let mut wrs = Vec::with_capacity(64);
    let mut stopped = false;
    let mut last_progress = Instant::now();
    loop {
        // One clock read a round serves the deadline, the marks and the
        // stall check.
        let now = Instant::now();
        if !stopped {
            stopped = match deadline {
                Some(d) => now >= d,
                None => posted >= iters,
            };
            if stopped {
                // Cover unsignaled tails with one signaled request each.
                for q in 0..nq {
                    if since_signal[q] > 0 {
                        let n = since_signal[q] + 1;
                        since_signal[q] = 0;
                        outstanding[q] += 1;
                        posted += 1;
                        let wr = wr_for(
                            test,
                            side,
                            &remote[q],
                            size,
                            ((q as u64) << 32) | u64::from(n),
                            inline,
                        );
                        side.qps[q].post_send(&wr)?;
                    }
                }
            }
        }
        if !stopped {
            for q in 0..nq {
                wrs.clear();
                while outstanding[q] < depth && wrs.len() < 64 {
                    if deadline.is_none() && posted >= iters {
                        break;
                    }
                    posted += 1;
                    outstanding[q] += 1;
                    since_signal[q] += 1;
                    let last = deadline.is_none() && posted == iters;
                    let signaled =
                        since_signal[q] >= args.cq_mod || last || outstanding[q] == depth;
                    let id = ((q as u64) << 32) | u64::from(since_signal[q]);
                    let wr = wr_for(test, side, &remote[q], size, id, inline);
                    let wr = if signaled {
                        since_signal[q] = 0;
                        wr
                    } else {
                        wr.unsignaled()
                    };
                    wrs.push(wr);
                }
                if !wrs.is_empty() {
                    side.qps[q].post_send_batch(&wrs)?;
                }
            }
        }
        let wcs = side.cq.poll(64)?;
        if !wcs.is_empty() {
            last_progress = now;
            for wc in &wcs {
                wc_ok(wc, &side.ctx)?;
                let q = (wc.wr_id >> 32) as usize;
                let n = (wc.wr_id & 0xffff_ffff) as u32;
                if let Some(o) = outstanding.get_mut(q) {
                    *o = o.saturating_sub(n);
                }
                completed += u64::from(n);
            }
            marks.push((now, completed));
        } else if now - last_progress > STALL {
            bail!("no completion for {STALL:?}: the peer stopped answering");
        }
        if stopped && outstanding.iter().all(|&o| o == 0) {
            break;
        }
    }
    let secs = start.elapsed().as_secs_f64().max(1e-9);
    let bytes = completed as f64 * size as f64;
    // Peak: the best rate over windows of a tenth of the run.
    let window = (completed / 10).max(1);
    let mut peak = 0.0f64;
    let mut j = 0;
    for i in 0..marks.len() {
        while j < i && marks[i].1 - marks[j + 1].1 >= window {
            j += 1;
        }
        let (dn, dt) = (
            marks[i].1 - marks[j].1,
            (marks[i].0 - marks[j].0).as_secs_f64(),
        );
        if dn >= window && dt > 0.0 {
            peak = peak.max(dn as f64 * size as f64 / dt);
        }
    }
    let avg_mib = bytes / secs / (1 << 20) as f64;
    Ok(SizeResult {
        size,
        iterations: completed,
        seconds: secs,
        bw_gbps: Some(bytes * 8.0 / secs / 1e9),
        bw_peak_mib: Some((peak / (1 << 20) as f64).max(avg_mib)),
        bw_avg_mib: Some(avg_mib),
        msg_rate_mpps: completed as f64 / secs / 1e6,
        latency_us: None,
        verified: None,
        baseline: None,
        profile: None,
        analysis: None,
    })
}

fn flag(i: u64) -> u8 {
    (i % 255) as u8 + 1
}

#[allow(clippy::too_many_arguments)]
fn client_lat(
    args: &PerfArgs,
    test: Test,
    side: &Side,
    remote: &Endpoint,
    size: usize,
    iters: u64,
    first_size: bool,
) -> Result<SizeResult> {
    let qp = &side.qps[0];
    let inline = size <= args.inline() as usize;
    let mut samples = Vec::with_capacity(iters as usize);
    let ctx = &side.ctx;
    let start = Instant::now();
    match test.verb {
        Verb::Write => {
            // Ping-pong: WRITE into the peer's upper half, whose last byte
            // the peer polls; it answers the same way.
            let target = Endpoint {
                addr: remote.addr + size as u64,
                ..*remote
            };
            // One work request, as perftest posts: only its id changes.
            let mut wr = wr_for(test, side, &target, size, 0, inline);
            for i in 0..iters {
                let f = flag(i);
                side.mr.write(size - 1, &[f])?;
                let t0 = Instant::now();
                wr.wr_id = i;
                qp.post_send(&wr)?;
                spin_until(ctx, || {
                    for wc in side.cq.poll_only(16) {
                        wc_ok(&wc, ctx)?;
                    }
                    Ok(side.mr.byte(2 * size - 1)? == f)
                })?;
                samples.push(t0.elapsed().as_nanos() as f64 / 2.0);
            }
            for wc in side.cq.poll_only(usize::MAX) {
                wc_ok(&wc, ctx)?;
            }
        }
        Verb::Send => {
            let recv = |id| RecvWr {
                wr_id: id,
                sg_list: vec![side.mr.sge(side.half, side.half as u32)],
            };
            // One receive stays posted between sizes.
            if first_size {
                qp.post_recv(&recv(u64::MAX))?;
            }
            // One work request, as perftest posts: only its id changes.
            let mut wr = wr_for(test, side, remote, size, 0, inline);
            for i in 0..iters {
                let t0 = Instant::now();
                wr.wr_id = i;
                qp.post_send(&wr)?;
                let mut got = false;
                spin_until(ctx, || {
                    for wc in side.cq.poll_only(16) {
                        wc_ok(&wc, ctx)?;
                        got |= wc.opcode == WcOpcode::Recv;
                    }
                    Ok(got)
                })?;
                samples.push(t0.elapsed().as_nanos() as f64 / 2.0);
                qp.post_recv(&recv(u64::MAX))?;
            }
        }
        Verb::Read | Verb::Atomic => {
            // One work request, as perftest posts: only its id changes.
            let mut wr = wr_for(test, side, remote, size, 0, inline);
            for i in 0..iters {
                let t0 = Instant::now();
                wr.wr_id = i;
                qp.post_send(&wr)?;
                let mut done = false;
                spin_until(ctx, || {
                    for wc in side.cq.poll_only(16) {
                        wc_ok(&wc, ctx)?;
                        done = true;
                    }
                    Ok(done)
                })?;
                samples.push(t0.elapsed().as_nanos() as f64);
                if test.verb == Verb::Atomic && args.verify {
                    // Only this client adds, so the old value counts the iterations.
                    let old = side.mr.read_u64(0)?;
                    let want =
                        u64::from_le_bytes(pattern(SERVER_SEED, 8).try_into().unwrap_or([0; 8]))
                            .wrapping_add(i);
                    if old != want {
                        bail!("FETCH_AND_ADD {i} returned {old:#x}, expected {want:#x}");
                    }
                }
            }
        }
    }
    let secs = start.elapsed().as_secs_f64().max(1e-9);
    Ok(SizeResult {
        size,
        iterations: iters,
        seconds: secs,
        bw_gbps: None,
        bw_peak_mib: None,
        bw_avg_mib: None,
        msg_rate_mpps: iters as f64 / secs / 1e6,
        latency_us: Latency::from_ns(samples),
        verified: None,
        baseline: None,
        profile: None,
        analysis: None,
    })
}

/// Serves one client; returns a one-line summary.
fn server(args: &PerfArgs, test: Test, listener: &TcpListener) -> Result<String> {
    let mut ctl = Control::accept(listener)?;
    let ip = match args.bind {
        Some(ip) => ip,
        None => match ctl.local_addr().ip() {
            IpAddr::V4(v) => v,
            IpAddr::V6(v) => v
                .to_ipv4_mapped()
                .ok_or_else(|| anyhow!("the client connected over IPv6; give --bind IPV4"))?,
        },
    };
    let (ctest, sizes, cmtu, verify, remote) = match ctl.recv::<Msg>()? {
        Msg::Hello {
            test,
            sizes,
            mtu,
            verify,
            endpoints,
            ..
        } => (test, sizes, mtu, verify, endpoints),
        m => bail!("unexpected first message from the client: {m:?}"),
    };
    let refuse = |ctl: &mut Control, why: String| -> Result<String> {
        let _ = ctl.send(&Msg::Refuse { why: why.clone() });
        bail!("refused the client: {why}")
    };
    if ctest != test {
        return refuse(
            &mut ctl,
            format!(
                "this server runs {}, the client asked for {}",
                test.name(),
                ctest.name()
            ),
        );
    }
    if let Some(mine) = args.mtu.filter(|&m| m != cmtu) {
        return refuse(
            &mut ctl,
            Error::MtuMismatch {
                local: mine,
                remote: cmtu,
            }
            .to_string(),
        );
    }
    if Mtu::from_bytes(cmtu).is_none() {
        return refuse(
            &mut ctl,
            format!("the client's MTU {cmtu} is not a path MTU"),
        );
    }
    let max = sizes.iter().copied().max().unwrap_or(8);
    if max > (64 << 20) || remote.is_empty() || remote.len() > 1024 {
        return refuse(
            &mut ctl,
            format!(
                "{} QPs of {max} B are more than this server serves",
                remote.len()
            ),
        );
    }
    let buf = 2 * max;
    let cfg = engine_config(args, args.seed, args.pcap.clone())?;
    let (ctx, pd, cq, mr, prepared) =
        open_side(ip, args, cfg, buf, remote.len() as u32, Some(cmtu))?;
    let endpoints: Vec<Endpoint> = prepared.iter().map(|q| q.endpoint_with(&mr)).collect();
    let mut qps = Vec::new();
    for (p, r) in prepared.into_iter().zip(&remote) {
        match p.connect(r) {
            Ok(q) => qps.push(q),
            Err(e) => return refuse(&mut ctl, e.to_string()),
        }
    }
    ctl.send(&Msg::Welcome { endpoints })?;
    let side = Side {
        ctx,
        _pd: pd,
        cq,
        mr,
        qps,
        half: max,
    };
    let mut recvs_posted = vec![0u64; side.qps.len()];
    let mut recvs_used = vec![0u64; side.qps.len()];
    let mut verified_all = true;
    loop {
        let (size, iters) = match ctl.recv::<Msg>() {
            Ok(Msg::Start { size, iters }) => (size, iters),
            // The client closes the connection when it is finished.
            Err(_) => break,
            Ok(m) => bail!("unexpected message from the client: {m:?}"),
        };
        if size > max {
            return refuse(&mut ctl, format!("size {size} exceeds the announced {max}"));
        }
        side.mr.write(0, &pattern(SERVER_SEED, 2 * size))?;
        let recv = |id| RecvWr {
            wr_id: id,
            sg_list: vec![side.mr.sge(side.half, side.half as u32)],
        };
        if test.verb == Verb::Send {
            // Top every QP up to its receive budget (receives left from a
            // smaller size fit any size: they span the whole upper half).
            let want = if test.kind == Kind::Bw { 512 } else { 1 };
            for (i, q) in side.qps.iter().enumerate() {
                let have = recvs_posted[i] - recvs_used[i];
                if have < want {
                    q.post_recv_batch(&(0..want - have).map(recv).collect::<Vec<_>>())?;
                    recvs_posted[i] += want - have;
                }
            }
        }
        let before = side.ctx.profile();
        ctl.send(&Msg::Ready)?;
        let mut received = 0u64;
        // Like perftest, each side inlines what fits its own inline size.
        let inline = size <= args.inline() as usize;
        match (test.verb, test.kind) {
            (Verb::Write, Kind::Lat) => {
                let qp = &side.qps[0];
                let target = Endpoint {
                    addr: remote[0].addr + size as u64,
                    ..remote[0]
                };
                // One work request, as perftest posts: only its id changes.
                let mut wr = wr_for(test, &side, &target, size, 0, inline);
                for i in 0..iters {
                    let f = flag(i);
                    spin_until(&side.ctx, || Ok(side.mr.byte(2 * size - 1)? == f))?;
                    side.mr.write(size - 1, &[f])?;
                    wr.wr_id = i;
                    qp.post_send(&wr)?;
                    for wc in side.cq.poll_only(16) {
                        wc_ok(&wc, &side.ctx)?;
                    }
                }
                received = iters;
            }
            (Verb::Send, Kind::Lat) => {
                let qp = &side.qps[0];
                // One work request, as perftest posts: only its id changes.
                let mut wr = wr_for(test, &side, &remote[0], size, 0, inline);
                for i in 0..iters {
                    let mut got = false;
                    spin_until(&side.ctx, || {
                        for wc in side.cq.poll_only(16) {
                            wc_ok(&wc, &side.ctx)?;
                            got |= wc.opcode == WcOpcode::Recv;
                        }
                        Ok(got)
                    })?;
                    recvs_used[0] += 1;
                    qp.post_recv(&recv(0))?;
                    recvs_posted[0] += 1;
                    wr.wr_id = i;
                    qp.post_send(&wr)?;
                }
                received = iters;
            }
            _ => {
                // Passive (WRITE/READ/ATOMIC) or receiving SENDs: drive the
                // engine until the client says it is done.
                let mut spins = 0u32;
                let mut stall = Stall::default();
                // A blocked engine wakes when the client says it is done.
                let _watch = side.ctx.watch_fd(&ctl)?;
                loop {
                    let work = side.ctx.progress()?;
                    if test.verb == Verb::Send {
                        let wcs = side.cq.poll_only(64);
                        for wc in &wcs {
                            wc_ok(wc, &side.ctx)?;
                            if wc.opcode == WcOpcode::Recv {
                                received += 1;
                                if let Some(i) = side.qps.iter().position(|q| q.qpn() == wc.qp_num)
                                {
                                    side.qps[i].post_recv(&recv(0))?;
                                }
                            }
                        }
                    }
                    spins = spins.wrapping_add(1);
                    if spins.is_multiple_of(512) && ctl.readable() {
                        break;
                    }
                    if stall.idle_too_long(work) {
                        bail!("the client stopped for {STALL:?}");
                    }
                }
            }
        }
        let mine = side.ctx.profile().since(&before);
        let count = match ctl.recv::<Msg>()? {
            Msg::Done { count, .. } => count,
            m => bail!("unexpected message from the client: {m:?}"),
        };
        // SEND completions may trail the client's last completion by a hair.
        if test.verb == Verb::Send && test.kind == Kind::Bw {
            spin_until(&side.ctx, || {
                for wc in side.cq.poll_only(64) {
                    wc_ok(&wc, &side.ctx)?;
                    if wc.opcode == WcOpcode::Recv {
                        received += 1;
                        if let Some(i) = side.qps.iter().position(|q| q.qpn() == wc.qp_num) {
                            recvs_used[i] += 1;
                        }
                    }
                }
                Ok(received >= count)
            })?;
        }
        let (verified, detail) = if verify {
            let r = server_verify(test, &side, size, count, received)?;
            verified_all &= r.is_none();
            (Some(r.is_none()), r.unwrap_or_default())
        } else {
            (None, String::new())
        };
        ctl.send(&Msg::Check {
            verified,
            detail,
            counters: Box::new(side.ctx.stats()),
            profile: mine.enabled.then(|| Box::new(mine)),
        })?;
    }
    side.ctx.flush_pcap()?;
    let s = side.ctx.stats();
    Ok(format!(
        "roce perf {}: served {} ({} packets in, {} out{})",
        test.name(),
        ctl.peer_addr(),
        s.rx_packets,
        s.tx_packets,
        if verify {
            if verified_all {
                ", data verified"
            } else {
                ", DATA MISMATCH"
            }
        } else {
            ""
        }
    ))
}

/// What the server checks after a size (None: all good).
fn server_verify(
    test: Test,
    side: &Side,
    size: usize,
    count: u64,
    received: u64,
) -> Result<Option<String>> {
    let client = pattern(CLIENT_SEED, 2 * size);
    Ok(match (test.verb, test.kind) {
        (Verb::Write, Kind::Bw) => {
            let got = side.mr.read(0, size)?;
            (got != client[..size]).then(|| "WRITE data differs from the client's".into())
        }
        (Verb::Send, Kind::Bw) => {
            if received != count {
                Some(format!("{received} SENDs arrived of {count}"))
            } else {
                let got = side.mr.read(side.half, size)?;
                (got != client[..size]).then(|| "SEND data differs from the client's".into())
            }
        }
        (Verb::Send, Kind::Lat) if size > 1 => {
            let got = side.mr.read(side.half, size - 1)?;
            (got != client[..size - 1]).then(|| "ping-pong data differs from the client's".into())
        }
        (Verb::Write, Kind::Lat) if size > 1 => {
            let got = side.mr.read(size, size - 1)?;
            (got != client[..size - 1]).then(|| "ping-pong data differs from the client's".into())
        }
        (Verb::Atomic, _) => {
            let start = u64::from_le_bytes(pattern(SERVER_SEED, 8).try_into().unwrap_or([0; 8]));
            let got = side.mr.read_u64(0)?;
            let want = start.wrapping_add(count);
            (got != want).then(|| {
                format!("the counter is {got:#x} after {count} FETCH_AND_ADDs, expected {want:#x}")
            })
        }
        _ => None,
    })
}

fn print_report(args: &PerfArgs, test: Test, r: &mut Report) -> Result<()> {
    if args.analyze {
        for x in &mut r.results {
            x.analysis = analysis_for(x);
        }
    }
    let r = &*r;
    let verified = if args.verify {
        Some(r.results.iter().all(|x| x.verified == Some(true)))
    } else {
        None
    };
    if args.json {
        let mut v = serde_json::json!({
            "test": test.name(),
            "sizes": r.results.iter().map(|x| x.size).collect::<Vec<_>>(),
            "qps": r.local.len(),
            "mtu": r.local.first().map(|e| e.mtu),
            "results": r.results,
            "verified": verified,
            "counters": r.counters,
            "server_counters": r.server_counters,
        });
        if let [one] = r.results.as_slice() {
            let o = serde_json::to_value(one)?;
            if let (Some(dst), Some(src)) = (v.as_object_mut(), o.as_object()) {
                for (k, val) in src {
                    if k != "verified" {
                        dst.insert(k.clone(), val.clone());
                    }
                }
            }
        }
        if !r.details.is_empty() {
            v["verify_errors"] = serde_json::json!(r.details);
        }
        println!("{v}");
    } else {
        let line = "-".repeat(87);
        println!("{line}");
        println!("                    {}", test.title());
        println!(
            " Number of qps   : {:<8} Transport type : RoCEv2 (software, UDP)",
            r.local.len()
        );
        println!(" Connection type : RC       Using SRQ      : OFF");
        if test.kind == Kind::Bw {
            println!(" TX depth        : {}", args.tx_depth);
            println!(" CQ Moderation   : {}", args.cq_mod);
        }
        if let Some(e) = r.local.first() {
            println!(" Mtu             : {}[B]", e.mtu);
        }
        println!(" Max inline data : {}[B]", args.inline());
        println!("{line}");
        for (l, m) in r.local.iter().zip(&r.remote) {
            for (who, e) in [("local", l), ("remote", m)] {
                println!(
                    " {who} address: IP {} UDP {} QPN {:#06x} PSN {:#08x} RKey {:#08x} VAddr {:#016x}",
                    e.ip, e.udp_port, e.qpn, e.psn, e.rkey, e.addr
                );
            }
        }
        println!("{line}");
        match test.kind {
            Kind::Bw => {
                println!(
                    " #bytes     #iterations    BW peak[MiB/sec]    BW average[MiB/sec]   MsgRate[Mpps]"
                );
                for x in &r.results {
                    println!(
                        " {:<10} {:<10}       {:<10.2}          {:<10.2}            {:.6}",
                        x.size,
                        x.iterations,
                        x.bw_peak_mib.unwrap_or(0.0),
                        x.bw_avg_mib.unwrap_or(0.0),
                        x.msg_rate_mpps
                    );
                }
            }
            Kind::Lat => {
                println!(
                    " #bytes #iterations    t_min[usec]    t_max[usec]  t_typical[usec]    t_avg[usec]    t_stdev[usec]   99% percentile[usec]   99.9% percentile[usec]"
                );
                for x in &r.results {
                    if let Some(l) = x.latency_us {
                        println!(
                            " {:<6} {:<10}     {:<10.2}     {:<10.2}   {:<10.2}         {:<10.2}     {:<10.2}      {:<10.2}             {:<10.2}",
                            x.size,
                            x.iterations,
                            l.min,
                            l.max,
                            l.typical,
                            l.avg,
                            l.stdev,
                            l.p99,
                            l.p999
                        );
                    }
                }
            }
        }
        if args.baseline || args.analyze {
            for x in &r.results {
                print_baseline(test, x);
            }
        }
        for x in &r.results {
            if let Some(a) = &x.analysis {
                println!(" where roce's engines spent the {} B run:", x.size);
                print!("{}", a.to_table());
            }
        }
        if args.analyze && r.results.iter().all(|x| x.analysis.is_none()) {
            println!(" no stage profile: the engines ran with --no-profile");
        }
        println!("{line}");
        let c = &r.counters;
        println!(
            " counters: {} pkts out, {} in; {} retransmitted; NAKs {} out {} in; RNR {} out {} in; CNPs {} out {} in; ICRC errors {}; malformed {}; unknown QP {}; not from the peer {}",
            c.tx_packets,
            c.rx_packets,
            c.retransmissions,
            c.naks_tx,
            c.naks_rx,
            c.rnr_naks_tx,
            c.rnr_naks_rx,
            c.cnps_tx,
            c.cnps_rx,
            c.icrc_errors,
            c.malformed,
            c.unknown_qp,
            c.bad_source
        );
        let f = c.faults;
        if f.lost + f.reordered + f.duplicated + f.corrupted + f.ce_marked > 0 {
            println!(
                " faults injected: {} lost, {} reordered, {} duplicated, {} corrupted, {} CE-marked",
                f.lost, f.reordered, f.duplicated, f.corrupted, f.ce_marked
            );
        }
        if let Some(v) = verified {
            println!(
                " data verification: {}",
                if v {
                    "every byte checked: OK"
                } else {
                    "MISMATCH"
                }
            );
            for d in &r.details {
                println!("   {d}");
            }
        }
    }
    if verified == Some(false) {
        bail!("data verification failed");
    }
    Ok(())
}

/// The demo's RDMA section: SEND, WRITE, WRITE_WITH_IMM, READ and both
/// atomics between two engines on 127.0.0.1 and 127.0.0.2 over real UDP
/// sockets, every byte checked, the conversation captured to
/// `out/rdma/loopback.pcap`, and each step said in plain words.
pub fn demo_section(out: &Path) -> Result<()> {
    let dir = out.join("rdma");
    std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
    let pcap = dir.join("loopback.pcap");
    let (ip_a, ip_b) = (Ipv4Addr::new(127, 0, 0, 1), Ipv4Addr::new(127, 0, 0, 2));
    // 4791 on both when free, so Wireshark decodes every frame as RoCEv2.
    let open = |ip: Ipv4Addr, pcap: Option<PathBuf>| -> Result<Context> {
        let cfg = EngineConfig {
            pcap,
            ..Default::default()
        };
        match Device::open_with(SocketAddr::new(IpAddr::V4(ip), ROCE_PORT), cfg.clone()) {
            Ok(c) => Ok(c),
            Err(Error::AddrInUse(_)) => {
                Ok(Device::open_with(SocketAddr::new(IpAddr::V4(ip), 0), cfg)?)
            }
            Err(e) => Err(e.into()),
        }
    };
    let a = open(ip_a, Some(pcap.clone()))?;
    let b = open(ip_b, None)?;
    println!(
        "  Two software RNICs, each behind its own UDP socket: A on {} and B on {}.",
        a.local_addr(),
        b.local_addr()
    );
    let (pd_a, pd_b) = (a.alloc_pd()?, b.alloc_pd()?);
    let (cq_a, cq_b) = (a.create_cq(64)?, b.create_cq(64)?);
    let mr_a = pd_a.reg_mr(16384, Access::ALL)?;
    let mr_b = pd_b.reg_mr(16384, Access::ALL)?;
    println!(
        "  1. Each side allocates a protection domain, a completion queue and registers 16 KiB (A's rkey {:#x}, B's rkey {:#x}).",
        mr_a.rkey(),
        mr_b.rkey()
    );
    let qa = pd_a.qp_builder(&cq_a).build()?;
    let qb = pd_b.qp_builder(&cq_b).build()?;
    let (ea, eb) = (qa.endpoint_with(&mr_a), qb.endpoint_with(&mr_b));
    println!(
        "  2. Each creates an RC queue pair (A: QPN {:#x}, first PSN {:#x}; B: QPN {:#x}, first PSN {:#x}) and moves it RESET -> INIT.",
        ea.qpn, ea.psn, eb.qpn, eb.psn
    );
    println!(
        "  3. They swap endpoints out of band (IP, UDP port, QPN, PSN, MTU {} B, buffer address and rkey) -- what perftest sends over TCP 18515.",
        ea.mtu
    );
    let qa = qa.connect(&eb)?;
    let qb = qb.connect(&ea)?;
    println!(
        "  4. Each QP goes INIT -> RTR (told the peer's address, QPN and PSN) -> RTS (its own send PSN, timeout, retries)."
    );
    let _drive_b = b.spawn_progress(false);
    let wait = Duration::from_secs(10);
    let expect = |wc: Vec<Wc>, what: &str| -> Result<()> {
        match wc.first() {
            Some(w) if w.status == WcStatus::Success => Ok(()),
            Some(w) => bail!("{what} completed with {}", w.status.name()),
            None => bail!("{what}: no completion"),
        }
    };

    // SEND.
    let hello = b"hello over RoCEv2: a SEND lands in a posted receive buffer";
    mr_a.write(0, hello)?;
    qb.post_recv(&RecvWr {
        wr_id: 1,
        sg_list: vec![mr_b.sge(0, 1024)],
    })?;
    qb.post_recv(&RecvWr {
        wr_id: 2,
        sg_list: vec![],
    })?;
    qa.post_send(&SendWr::new(
        1,
        WrOpcode::Send,
        vec![mr_a.sge(0, hello.len() as u32)],
    ))?;
    expect(cq_a.wait(1, wait)?, "SEND")?;
    let wc = cq_b.wait(1, wait)?;
    expect(wc.clone(), "RECV")?;
    let ok = mr_b.read(0, hello.len())? == hello;
    println!(
        "  5. SEND: B posted a receive; A sent {} bytes in one SEND_ONLY packet; B's RNIC placed them in that buffer, ACKed, and B got a RECV completion of {} bytes. Bytes match: {}.",
        hello.len(),
        wc[0].byte_len,
        yes(ok)
    );
    if !ok {
        bail!("SEND data differs");
    }

    // WRITE: the 20-step walk-through, visible.
    let data = pattern(CLIENT_SEED, 3000);
    mr_a.write(4096, &data)?;
    let before = a.stats();
    qa.post_send(&SendWr::new(
        2,
        WrOpcode::RdmaWrite {
            remote_addr: eb.addr + 4096,
            rkey: eb.rkey,
        },
        vec![mr_a.sge(4096, 3000)],
    ))?;
    expect(cq_a.wait(1, wait)?, "WRITE")?;
    let after = a.stats();
    let ok = mr_b.read(4096, 3000)? == data;
    println!(
        "  6. RDMA WRITE of 3000 bytes to B's address {:#x} with rkey {:#x}:",
        eb.addr + 4096,
        eb.rkey
    );
    println!(
        "     A's RNIC checked its lkey, split the message at the 1024-byte MTU into WRITE_FIRST (with the RETH: address, rkey, length), WRITE_MIDDLE and WRITE_LAST,"
    );
    println!(
        "     gave each the next PSN and an ICRC over the IP/UDP/BTH as the kernel emits them, and sent them as UDP datagrams to port {} with DSCP 26 and ECT(0);",
        eb.udp_port
    );
    println!(
        "     B's RNIC checked each ICRC, the PSN order and the rkey's rights and bounds, wrote the bytes straight into B's registered memory (B's application ran no code for it),"
    );
    println!(
        "     and answered with an ACK; the ACK retired the request and A got its completion. {} packets out, {} back; B's application saw no completion at all. Bytes match: {}.",
        after.tx_packets - before.tx_packets,
        after.rx_packets - before.rx_packets,
        yes(ok)
    );
    if !ok {
        bail!("WRITE data differs");
    }

    // WRITE_WITH_IMM.
    qa.post_send(&SendWr::new(
        3,
        WrOpcode::RdmaWriteWithImm {
            remote_addr: eb.addr + 8192,
            rkey: eb.rkey,
            imm: 0x1234_5678,
        },
        vec![mr_a.sge(4096, 256)],
    ))?;
    expect(cq_a.wait(1, wait)?, "WRITE_WITH_IMM")?;
    let wc = cq_b.wait(1, wait)?;
    expect(wc.clone(), "RECV_RDMA_WITH_IMM")?;
    let ok = mr_b.read(8192, 256)? == data[..256] && wc[0].imm_data == 0x1234_5678;
    println!(
        "  7. WRITE_WITH_IMM: the same as a WRITE, but the last packet carries 4 bytes of immediate data, which consumes B's second receive: B got a completion with immediate {:#x}. Bytes match: {}.",
        wc[0].imm_data,
        yes(ok)
    );
    if !ok {
        bail!("WRITE_WITH_IMM differs");
    }

    // READ.
    let theirs = pattern(SERVER_SEED, 2500);
    mr_b.write(12288, &theirs)?;
    qa.post_send(&SendWr::new(
        4,
        WrOpcode::RdmaRead {
            remote_addr: eb.addr + 12288,
            rkey: eb.rkey,
        },
        vec![mr_a.sge(8192, 2500)],
    ))?;
    expect(cq_a.wait(1, wait)?, "READ")?;
    let ok = mr_a.read(8192, 2500)? == theirs;
    println!(
        "  8. RDMA READ of 2500 bytes: A sent one READ_REQUEST; B's RNIC checked the rkey and streamed READ_RESPONSE_FIRST/MIDDLE/LAST from its memory; A placed them and completed. Bytes match: {}.",
        yes(ok)
    );
    if !ok {
        bail!("READ data differs");
    }

    // Atomics.
    mr_b.write(15360, &40u64.to_le_bytes())?;
    qa.post_send(&SendWr::new(
        5,
        WrOpcode::AtomicCmpAndSwp {
            remote_addr: eb.addr + 15360,
            rkey: eb.rkey,
            compare: 40,
            swap: 41,
        },
        vec![mr_a.sge(15360, 8)],
    ))?;
    expect(cq_a.wait(1, wait)?, "COMPARE_AND_SWAP")?;
    let (old, now) = (mr_a.read_u64(15360)?, mr_b.read_u64(15360)?);
    println!(
        "  9. ATOMIC COMPARE_AND_SWAP: if B's 8-byte word equals 40, make it 41. B's RNIC did it in one step and returned the old value {old}; the word is now {now}."
    );
    if (old, now) != (40, 41) {
        bail!("COMPARE_AND_SWAP gave {old}/{now}");
    }
    qa.post_send(&SendWr::new(
        6,
        WrOpcode::AtomicFetchAndAdd {
            remote_addr: eb.addr + 15360,
            rkey: eb.rkey,
            add: 1,
        },
        vec![mr_a.sge(15368, 8)],
    ))?;
    expect(cq_a.wait(1, wait)?, "FETCH_AND_ADD")?;
    let (old, now) = (mr_a.read_u64(15368)?, mr_b.read_u64(15360)?);
    println!(
        " 10. ATOMIC FETCH_AND_ADD of 1: old value {old} came back in an ATOMIC_ACKNOWLEDGE; the word is now {now}."
    );
    if (old, now) != (41, 42) {
        bail!("FETCH_AND_ADD gave {old}/{now}");
    }
    drop(_drive_b);
    a.flush_pcap()?;
    let s = a.stats();
    println!(
        "  Every byte checked. A sent {} packets and received {}, {} retransmissions, {} ICRC errors. Capture: {} ({}).",
        s.tx_packets,
        s.rx_packets,
        s.retransmissions,
        s.icrc_errors,
        pcap.display(),
        if a.local_addr().port() == ROCE_PORT && b.local_addr().port() == ROCE_PORT {
            "decode it with `roce pcap decode` or Wireshark"
        } else {
            "UDP 4791 was busy, so Wireshark needs `Decode As` for these ports"
        }
    );
    drop((qa, qb));
    Ok(())
}

fn yes(b: bool) -> &'static str {
    if b { "yes" } else { "NO" }
}
