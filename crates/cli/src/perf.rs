//! `roce perf`: perftest for roce, over real UDP sockets. The test itself
//! lives in the `roce-perf` library; this parses perftest's options and
//! prints.

use anyhow::{Result, bail};
use clap::Args;
use roce_perf::{EXCHANGE_PORT, Options};
use std::net::{IpAddr, Ipv6Addr};
use std::path::PathBuf;

#[derive(Debug, Clone, Args)]
pub struct PerfArgs {
    /// send_bw, write_bw, read_bw, atomic_bw, send_lat, write_lat, read_lat, atomic_lat
    #[arg(required_unless_present = "list_gids")]
    pub test: Option<String>,
    /// Print every interface's GID table (what -x/--gid-index chooses
    /// from), as rdma-core's show_gids prints it, and exit.
    #[arg(long = "list-gids")]
    pub list_gids: bool,
    /// Server to connect to; without it, listen.
    pub server: Option<String>,
    /// Run server and client in this process over UDP on 127.0.0.1 and
    /// 127.0.0.2; with SERVER, on that address (the server's) and --bind
    /// (the client's), IPv4 or IPv6, e.g. `--loopback --bind fd00::1 fd00::2`.
    #[arg(long)]
    pub loopback: bool,
    /// --loopback over IPv6 on ::1 (both sides; the client's engine takes
    /// another UDP port, and says so).
    #[arg(long, conflicts_with_all = ["loopback", "server"])]
    pub loopback6: bool,
    /// Message size in bytes (default 65536 for bandwidth, 2 for latency; atomics are 8).
    #[arg(short = 's', long)]
    pub size: Option<usize>,
    /// Run every size from 2 bytes to 8 MiB.
    #[arg(short = 'a', long = "all")]
    pub all: bool,
    /// Iterations per size and per QP, as perftest counts them: `-q 2 -n 200`
    /// sends 400 messages (default 5000 for bandwidth, 1000 for latency).
    #[arg(short = 'n', long)]
    pub iters: Option<u64>,
    /// Run each bandwidth test for this many seconds instead of a number of iterations.
    #[arg(short = 'D', long)]
    pub duration: Option<f64>,
    /// Number of QPs (bandwidth tests).
    #[arg(short = 'q', long = "qp", default_value_t = 1)]
    pub qps: u32,
    /// Connection type, as perftest's -c: RC, or UD (SEND tests; messages
    /// of at most the path MTU).
    #[arg(short = 'c', long = "connection", default_value = "RC", value_parser = parse_connection)]
    pub connection: roce_perf::Connection,
    /// SEND tests: the receiving side's QPs share one receive queue (SRQ),
    /// as perftest's --use_srq.
    #[arg(long = "use_srq")]
    pub use_srq: bool,
    /// Run this many engines per side at once (bandwidth tests), each on a
    /// thread with its own UDP socket and -q QPs, and add their bandwidths
    /// up: with --loopback as many pairs (--baseline then runs as many TCP
    /// streams at once); a client connects this many times, and a server
    /// given the same number serves this many clients at once
    #[arg(long, default_value_t = 1)]
    pub threads: u32,
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
    /// QP ACK timeout exponent: resend after 4.096 µs × 2^N, perftest's -u.
    #[arg(short = 'u', long = "qp-timeout", default_value_t = 14,
          value_parser = clap::value_parser!(u8).range(0..=31))]
    pub qp_timeout: u8,
    /// TCP port of the out-of-band exchange.
    #[arg(short = 'p', long, default_value_t = EXCHANGE_PORT)]
    pub port: u16,
    /// UDP port of the RoCE engine (default 4791; 0 picks a free one).
    #[arg(long = "udp-port")]
    pub udp_port: Option<u16>,
    /// Local address for the engine, IPv4 or IPv6 (default: the one the TCP
    /// connection uses); a server listens on it too.
    #[arg(long)]
    pub bind: Option<IpAddr>,
    /// GID index, as perftest's -x: the engine opens on that entry of the
    /// GID table of the interface holding the bound address (rxe's order:
    /// IPv6 link-local, IPv4 as ::ffff:a.b.c.d, other IPv6; all RoCEv2).
    /// --list-gids shows the tables.
    #[arg(short = 'x', long = "gid-index")]
    pub gid_index: Option<u32>,
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
    /// Loss recovery: gbn (go-back-N, what RoCE NICs speak) or irn
    /// (selective repeat, Mittal et al. SIGCOMM 2018). Both sides must give the
    /// same: a roce peer with the other refuses, and a perftest peer takes gbn only.
    #[arg(long, default_value = "gbn", value_parser = parse_recovery)]
    pub recovery: roce_verbs::Recovery,
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
    /// Mark received ECN-capable packets CE by RED over the receive
    /// socket's backlog, as a switch egress queue would when the receiver
    /// falls behind: KMIN,KMAX,PMAX (bytes of socket receive memory, K/M
    /// suffixes), e.g. 256K,1M,0.2.
    #[arg(long = "ce-red", value_name = "KMIN,KMAX,PMAX")]
    pub ce_red: Option<String>,
    /// Congestion control of every QP: none, dcqcn, timely, swift or dctcp.
    #[arg(long, default_value = "none")]
    pub cc: String,
    /// A parameter of --cc, named as in a simulator scenario's `[cc]` table
    /// (e.g. rp_timer_us=300, preset=connectx, rpg_ai_rate=5); repeatable.
    #[arg(long = "cc-param", value_name = "KEY=VALUE")]
    pub cc_param: Vec<String>,
    /// Line rate in Gb/s that rate-based controllers start from and return
    /// to (default: the interface's speed, else 100 — loopback has none).
    #[arg(long = "cc-line-rate", value_name = "GBPS")]
    pub cc_line_rate: Option<f64>,
    /// Limit every QP to this rate in Gb/s (the NIC's per-QP shaper, as
    /// ibv_modify_qp_rate_limit sets it), under any --cc.
    #[arg(long = "rate-limit", value_name = "GBPS")]
    pub rate_limit: Option<f64>,
    /// DSCP of the CNPs this side sends (default 48, ConnectX's), so a
    /// fabric can give them their own priority queue.
    #[arg(long = "cnp-dscp", value_name = "DSCP")]
    pub cnp_dscp: Option<u8>,
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

impl From<PerfArgs> for Options {
    fn from(a: PerfArgs) -> Options {
        Options {
            test: a.test.unwrap_or_default(),
            server: if a.loopback6 {
                Some(Ipv6Addr::LOCALHOST.to_string())
            } else {
                a.server
            },
            loopback: a.loopback || a.loopback6,
            size: a.size,
            all: a.all,
            iters: a.iters,
            duration: a.duration,
            qps: a.qps,
            connection: a.connection,
            use_srq: a.use_srq,
            threads: a.threads,
            mtu: a.mtu,
            inline_size: a.inline_size,
            tx_depth: a.tx_depth,
            cq_mod: a.cq_mod,
            qp_timeout: a.qp_timeout,
            port: a.port,
            udp_port: a.udp_port,
            bind: a.bind,
            gid_index: a.gid_index,
            verify: a.verify,
            pcap: a.pcap,
            loss: a.loss,
            reorder: a.reorder,
            dup: a.dup,
            corrupt: a.corrupt,
            ce_mark: a.ce_mark,
            ce_red: a.ce_red,
            cc: a.cc,
            cc_params: a.cc_param,
            cc_line_rate: a.cc_line_rate,
            rate_limit: a.rate_limit,
            cnp_dscp: a.cnp_dscp,
            seed: a.seed,
            recovery: a.recovery,
            no_offload: a.no_offload,
            json: a.json,
            baseline: a.baseline,
            analyze: a.analyze,
            no_profile: a.no_profile,
            poll: a.poll,
        }
    }
}

/// show_gids' table: device, port, index, GID, IPv4 address, version,
/// interface.
fn list_gids() -> String {
    let mut out = String::from("DEV\tPORT\tINDEX\tGID\t\t\t\t\tIPv4  \t\tVER\tDEV\n");
    out += "---\t----\t-----\t---\t\t\t\t\t------------  \t---\t---\n";
    let mut n = 0;
    for (dev, table) in roce_verbs::gid_tables() {
        for e in table {
            let v4 = match e.ip() {
                IpAddr::V4(a) => a.to_string(),
                IpAddr::V6(_) => String::new(),
            };
            out += &format!(
                "roce_{dev}\t1\t{}\t{}\t{v4:<14}\tv2\t{dev}\n",
                e.index,
                e.gid.to_show_gids()
            );
            n += 1;
        }
    }
    out += &format!("n_gids_found={n}\n");
    out
}

pub fn run(args: PerfArgs) -> Result<()> {
    if args.list_gids {
        print!("{}", list_gids());
        return Ok(());
    }
    let opts = Options::from(args);
    let report = if opts.loopback {
        roce_perf::loopback(&opts)?
    } else if opts.server.is_some() {
        roce_perf::client(&opts)?
    } else {
        let server = roce_perf::Server::bind(&opts)?;
        if !opts.json {
            eprintln!(
                "roce perf {}: waiting for a client on TCP {}",
                server.test().name(),
                server.local_addr()?
            );
        }
        let served = server.serve()?;
        for n in &served.notes {
            eprintln!("roce: note: {n}");
        }
        if !opts.json {
            eprintln!("{}", served.summary);
        }
        return Ok(());
    };
    for n in &report.notes {
        eprintln!("roce: note: {n}");
    }
    print!("{}", report.render(&opts)?);
    if report.verified(&opts) == Some(false) {
        bail!("data verification failed");
    }
    Ok(())
}

fn parse_connection(s: &str) -> Result<roce_perf::Connection, String> {
    s.parse().map_err(|e: roce_perf::Error| e.to_string())
}

fn parse_recovery(s: &str) -> Result<roce_verbs::Recovery, String> {
    s.parse()
}
