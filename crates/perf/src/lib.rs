//! perftest for roce, as a library: what `roce perf` runs, for an
//! application to embed a bandwidth or latency test.
//!
//! A server listens on TCP (perftest's 18515) and serves one client; a
//! client connects; [`loopback`] runs both in one process (server on
//! 127.0.0.1, client on 127.0.0.2). The TCP connection carries perftest's
//! own exchange ([`perftest`], [`wire`]), so either side may be one of
//! perftest's `ib_*` tools; between two roce peers a small extension
//! ([`ext`]) follows it, for what only roce does (every size's start and
//! check, `--verify`, counters and stage profiles). The RDMA itself goes
//! over the verbs engine of `roce-verbs`.
//!
//! ```
//! // A 64 KiB RDMA WRITE bandwidth test between two engines on this host,
//! // every byte checked.
//! let mut opts = roce_perf::Options::new("write_bw");
//! opts.size = Some(65536);
//! opts.iters = Some(100);
//! opts.verify = true;
//! opts.udp_port = Some(0); // any free UDP port (4791 may be taken)
//! let report = roce_perf::loopback(&opts)?;
//! assert_eq!(report.verified(&opts), Some(true));
//! assert_eq!(report.results[0].iterations, 100);
//! println!("{:.2} Gb/s", report.results[0].bw_gbps.unwrap_or(0.0));
//! # Ok::<(), roce_perf::Error>(())
//! ```

pub mod cc;
pub mod ext;
mod loops;
pub mod perftest;
mod report;
mod results;
mod session;
mod setup;
mod threads;
pub mod wire;

pub use results::{Baseline, Latency, Report, Served, SideProfiles, SizeResult};
pub use roce_verbs::EXCHANGE_PORT;

mod error;
use error::fail;
pub use error::{Error, Result};
use roce_verbs::*;
use serde::{Deserialize, Serialize};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, TcpListener};
use std::path::PathBuf;
use std::time::Duration;

/// Everything a run takes, named as perftest names its options (`roce
/// perf`'s flags map one to one).
#[derive(Debug, Clone)]
pub struct Options {
    /// send_bw, write_bw, read_bw, atomic_bw, send_lat, write_lat, read_lat, atomic_lat
    pub test: String,
    /// Server to connect to; without it, listen.
    pub server: Option<String>,
    /// Run server and client in this process: over UDP on 127.0.0.1 and
    /// 127.0.0.2, or on the addresses `server` (the server's, an IP address)
    /// and `bind` (the client's) name, IPv4 or IPv6 (e.g. `::1` and `::1`,
    /// or `fd00::2` and `fd00::1` on `lo`).
    pub loopback: bool,
    /// Message size in bytes (default 65536 for bandwidth, 2 for latency; atomics are 8).
    pub size: Option<usize>,
    /// Run every size from 2 bytes to 8 MiB.
    pub all: bool,
    /// Iterations per size and per QP, as perftest counts them: `-q 2 -n 200`
    /// sends 400 messages (default 5000 for bandwidth, 1000 for latency).
    pub iters: Option<u64>,
    /// Run each bandwidth test for this many seconds instead of a number of iterations.
    pub duration: Option<f64>,
    /// Number of QPs (bandwidth tests).
    pub qps: u32,
    /// The QPs' transport, perftest's `-c`: RC, or UD for the SEND tests
    /// (messages of at most the path MTU, sent through address handles
    /// with perftest's Q_Key, [`QKEY`]).
    pub connection: Connection,
    /// perftest's `--use_srq` (SEND tests): the receiving side's QPs take
    /// their receives from one shared receive queue (a latency test's
    /// client too, as perftest's).
    pub use_srq: bool,
    /// Engines per side run at once (bandwidth tests), each on a thread
    /// with a socket and `qps` QPs of its own, their figures added up: with
    /// `loopback` as many pairs; a client connects this many times, and a
    /// server with the same number serves this many clients at once.
    pub threads: u32,
    /// Path MTU: 256, 512, 1024, 2048 or 4096 (default: the port's active
    /// MTU, from the IP MTU of the interface holding the address, as rxe
    /// derives it: 4096 on loopback, 1024 on a 1500-byte Ethernet; a server
    /// without -m takes the client's).
    pub mtu: Option<u32>,
    /// Send messages up to this size inline (default as perftest's: 220
    /// for write_lat, 236 for send_lat (188 over UD), 0 for the others).
    pub inline_size: Option<u32>,
    /// Work requests in flight per QP.
    pub tx_depth: u32,
    /// Request a completion every this many work requests.
    pub cq_mod: u32,
    /// The QPs' local ACK timeout exponent, perftest's `-u`: a request
    /// unacknowledged for 4.096 µs × 2^`qp_timeout` is resent (up to seven
    /// times, then the work request completes with
    /// `IBV_WC_RETRY_EXC_ERR`). Default 14 (67 ms), perftest's; a smaller
    /// value recovers tail losses sooner in `--loss` runs, a larger one
    /// rides out a peer that loses its CPU for a while.
    pub qp_timeout: u8,
    /// TCP port of the out-of-band exchange.
    pub port: u16,
    /// UDP port of the RoCE engine (default 4791; 0 picks a free one).
    pub udp_port: Option<u16>,
    /// Local address for the engine, IPv4 or IPv6 (default: the one the
    /// TCP connection uses); a server also listens on it.
    pub bind: Option<IpAddr>,
    /// GID index (perftest's `-x`): the engine opens on that entry of the
    /// GID table of the interface holding the bound address (as rxe builds
    /// it: IPv6 link-local, IPv4-mapped IPv4, other IPv6, RoCEv2 each; see
    /// [`roce_verbs::gid_table`]). Without it, the bound address itself.
    pub gid_index: Option<u32>,
    /// Check every byte end to end.
    pub verify: bool,
    /// Capture every frame this side sends and receives.
    pub pcap: Option<PathBuf>,
    /// Drop this fraction of sent packets.
    pub loss: f64,
    /// Reorder this fraction of sent packets.
    pub reorder: f64,
    /// Duplicate this fraction of sent packets.
    pub dup: f64,
    /// Flip one bit in this fraction of sent packets (after the ICRC).
    pub corrupt: f64,
    /// Mark this fraction of ECN-capable sent packets Congestion Experienced
    /// (as a congested switch would), so the peer answers with CNPs.
    pub ce_mark: f64,
    /// Mark received ECN-capable packets CE by RED over the receive
    /// socket's backlog: `KMIN,KMAX,PMAX` (bytes, `K`/`M` suffixes).
    pub ce_red: Option<String>,
    /// Congestion control of every QP: none, dcqcn, timely, swift, dctcp.
    pub cc: String,
    /// `KEY=VALUE` parameters of `cc`, named as the simulator's `[cc]` table.
    pub cc_params: Vec<String>,
    /// Line rate (Gb/s) rate-based controllers start from (default: the
    /// interface's speed, else 100).
    pub cc_line_rate: Option<f64>,
    /// Per-QP rate limit in Gb/s (the NIC's shaper, under any `cc`).
    pub rate_limit: Option<f64>,
    /// DSCP of the CNPs this side sends (ConnectX's default: 48).
    pub cnp_dscp: Option<u8>,
    /// Seed of the fault injector.
    pub seed: u64,
    /// Loss recovery of the QPs: go-back-N or IRN (both sides must agree).
    pub recovery: roce_verbs::Recovery,
    /// Turn UDP GSO and GRO off (one datagram per socket message), e.g. to
    /// compare; by default they are used where the kernel has them. Give it
    /// to both sides when they share a host.
    pub no_offload: bool,
    /// Print one JSON object instead of the table.
    pub json: bool,
    /// With --loopback: after each size, run what the kernel alone does with
    /// it (a TCP stream of the same writes for the bandwidth tests, a UDP
    /// ping-pong of the same size for the latency tests) and report roce's
    /// ratio to it.
    pub baseline: bool,
    /// After each size, print where roce's own engines spent their time
    /// (receive and send system calls, ICRC, RNIC logic, memory copy,
    /// completions, idle polling), what each stage alone would carry, and
    /// which stage binds; with --loopback beside the kernel's --baseline.
    pub analyze: bool,
    /// Do not account the engines' time per stage (to measure what the
    /// accounting costs).
    pub no_profile: bool,
    /// How the engines wait when idle: busy (spin), adaptive (spin, then
    /// block in epoll) or event (block at once). `None`: adaptive for
    /// bandwidth tests, busy for latency tests (as perftest's are).
    pub poll: Option<roce_verbs::PollMode>,
}

impl Options {
    /// `test` (e.g. `write_bw`) with perftest's defaults for the rest.
    pub fn new(test: &str) -> Options {
        Options {
            test: test.to_string(),
            server: None,
            loopback: false,
            size: None,
            all: false,
            iters: None,
            duration: None,
            qps: 1,
            connection: Connection::Rc,
            use_srq: false,
            threads: 1,
            mtu: None,
            inline_size: None,
            tx_depth: 128,
            cq_mod: 100,
            qp_timeout: 14,
            port: EXCHANGE_PORT,
            udp_port: None,
            bind: None,
            gid_index: None,
            verify: false,
            pcap: None,
            loss: 0.0,
            reorder: 0.0,
            dup: 0.0,
            corrupt: 0.0,
            ce_mark: 0.0,
            ce_red: None,
            cc: "none".into(),
            cc_params: Vec::new(),
            cc_line_rate: None,
            rate_limit: None,
            cnp_dscp: None,
            seed: 1,
            recovery: roce_verbs::Recovery::GoBackN,
            no_offload: false,
            json: false,
            baseline: false,
            analyze: false,
            no_profile: false,
            poll: None,
        }
    }

    /// The inline size in effect ([`Options::check`] fills in the default).
    pub(crate) fn inline(&self) -> u32 {
        self.inline_size.unwrap_or(0)
    }

    /// Checks the options and fills in what depends on the test (the inline
    /// size); returns the test.
    pub fn check(&mut self) -> Result<Test> {
        let test = Test::parse(&self.test)?;
        self.inline_size
            .get_or_insert(default_inline(test, self.connection));
        self.poll.get_or_insert(match test.kind {
            Kind::Bw => roce_verbs::PollMode::Adaptive,
            Kind::Lat => roce_verbs::PollMode::Busy,
        });
        self.mtu.map(mtu_of).transpose()?;
        if self.connection == Connection::Ud && test.verb != Verb::Send {
            fail!(
                Usage,
                "-c UD carries SENDs only (send_bw, send_lat), as perftest's; {} needs RC",
                test.name()
            );
        }
        if self.use_srq && test.verb != Verb::Send {
            fail!(
                Usage,
                "--use_srq is for the SEND tests (send_bw, send_lat), as perftest's: only SENDs consume receives"
            );
        }
        if self.qps == 0 || self.tx_depth == 0 || self.cq_mod == 0 {
            fail!(Usage, "-q, -t and --cq-mod must be at least 1");
        }
        if self.threads == 0 {
            fail!(Usage, "--threads must be at least 1");
        }
        if self.threads > 1 && test.kind != Kind::Bw {
            fail!(
                Usage,
                "--threads is for bandwidth tests (a latency test is one ping-pong)"
            );
        }
        if self.threads > 1 && self.udp_port.is_some_and(|p| p != 0) {
            fail!(
                Usage,
                "--threads gives every engine but the first a free UDP port of its own (the exchange tells the peer); drop --udp-port"
            );
        }
        if self.baseline && !self.loopback {
            fail!(
                Usage,
                "--baseline measures loopback TCP and UDP beside the test; use it with --loopback"
            );
        }
        if self.duration.is_some() && test.kind == Kind::Lat {
            fail!(
                Usage,
                "-D/--duration is for bandwidth tests; latency tests take -n/--iters"
            );
        }
        if self.loopback
            && let Some(s) = &self.server
            && s.parse::<IpAddr>().is_err()
        {
            fail!(
                Usage,
                "--loopback runs both sides: SERVER, if given, is the server side's IP address (e.g. ::1 or fd00::2), not {s:?}"
            );
        }
        if let (true, Some(s), Some(c)) = (
            self.loopback,
            self.server
                .as_deref()
                .and_then(|s| s.parse::<IpAddr>().ok()),
            self.bind,
        ) && s.is_ipv4() != c.is_ipv4()
        {
            fail!(
                Usage,
                "--loopback between {c} and {s}: one is IPv4 and the other IPv6; RoCEv2 needs both of one kind"
            );
        }
        cc::choice(self)?;
        cc::line_rate_bps(self, IpAddr::V4(Ipv4Addr::LOCALHOST))?;
        cc::red(self)?;
        cc::settings(self, IpAddr::V4(Ipv4Addr::LOCALHOST))?;
        cc::cnp_dscp(self)?;
        Ok(test)
    }
}

/// perftest's `-c`: the QPs' transport.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub enum Connection {
    /// Reliable connected.
    #[default]
    Rc,
    /// Unreliable datagram: SENDs of at most the path MTU through address
    /// handles; what is lost stays lost.
    Ud,
}

impl std::str::FromStr for Connection {
    type Err = Error;
    fn from_str(s: &str) -> Result<Connection> {
        match s.to_ascii_uppercase().as_str() {
            "RC" => Ok(Connection::Rc),
            "UD" => Ok(Connection::Ud),
            "UC" | "XRC" | "DC" | "SRD" => fail!(
                Usage,
                "-c {s}: roce runs RC and UD (perftest's other connection types need transports this RNIC does not have)"
            ),
            _ => fail!(Usage, "-c {s}: the connection type is RC or UD"),
        }
    }
}

impl Connection {
    pub fn name(&self) -> &'static str {
        match self {
            Connection::Rc => "RC",
            Connection::Ud => "UD",
        }
    }
}

/// perftest's Q_Key for UD (`DEF_QKEY`).
pub const QKEY: u32 = 0x1111_1111;
/// What a UD receive holds before the message: the GRH (`UD_ADDITION`).
pub const GRH: usize = 40;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum Verb {
    Send,
    Write,
    Read,
    Atomic,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum Kind {
    Bw,
    Lat,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Test {
    pub verb: Verb,
    pub kind: Kind,
}

impl Test {
    pub fn parse(s: &str) -> Result<Test> {
        let (v, k) = s.split_once(['_', '-']).ok_or_else(|| {
            Error::Usage(format!(
                "unknown test {s:?}: expected e.g. write_bw or read_lat"
            ))
        })?;
        let verb = match v {
            "send" => Verb::Send,
            "write" => Verb::Write,
            "read" => Verb::Read,
            "atomic" => Verb::Atomic,
            _ => fail!(
                Usage,
                "unknown test {s:?}: the verb is one of send, write, read, atomic"
            ),
        };
        let kind = match k {
            "bw" => Kind::Bw,
            "lat" => Kind::Lat,
            _ => fail!(Usage, "unknown test {s:?}: the kind is bw or lat"),
        };
        Ok(Test { verb, kind })
    }
    pub fn name(&self) -> String {
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
    /// perftest's order of key messages and syncs for this test.
    pub fn steps(&self) -> perftest::Steps {
        perftest::steps(
            self.verb == Verb::Send,
            self.verb == Verb::Write,
            self.kind == Kind::Bw,
        )
    }

    pub fn title(&self) -> &'static str {
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

/// perftest's inline size when `-I` is not given
/// (`ctx_set_max_inline`): for the WRITE and SEND latency tests
/// `DEF_INLINE_WRITE`, `DEF_INLINE_SEND_RC_UC_XRC` or, over UD,
/// `DEF_INLINE_SEND_UD`; none for the rest.
fn default_inline(test: Test, connection: Connection) -> u32 {
    match (test.verb, test.kind, connection) {
        (Verb::Write, Kind::Lat, _) => 220,
        (Verb::Send, Kind::Lat, Connection::Ud) => 188,
        (Verb::Send, Kind::Lat, _) => 236,
        _ => 0,
    }
}

/// The server side: listens, then serves one client per [`Server::serve`].
pub struct Server {
    opts: Options,
    test: Test,
    listener: TcpListener,
}

impl Server {
    /// Listens on `--bind` (or every address, IPv6 and IPv4, as perftest
    /// does with `AF_UNSPEC`) at TCP `opts.port`.
    pub fn bind(opts: &Options) -> Result<Server> {
        let mut opts = opts.clone();
        let test = opts.check()?;
        let at = |ip: IpAddr| TcpListener::bind(SocketAddr::new(ip, opts.port));
        let listener = match opts.bind {
            Some(ip) => at(ip),
            // `[::]` takes IPv4 clients too (as ::ffff:a.b.c.d) unless the
            // host has no IPv6 at all.
            None => at(IpAddr::V6(Ipv6Addr::UNSPECIFIED))
                .or_else(|_| at(IpAddr::V4(Ipv4Addr::UNSPECIFIED))),
        }
        .map_err(|e| Error::Io {
            what: format!("listening on TCP port {}", opts.port),
            source: e,
        })?;
        Ok(Server {
            opts,
            test,
            listener,
        })
    }

    pub fn local_addr(&self) -> Result<SocketAddr> {
        self.listener.local_addr().map_err(|source| Error::Io {
            what: "the listening socket".into(),
            source,
        })
    }

    pub fn test(&self) -> Test {
        self.test
    }

    /// Serves one client (a roce perf or a perftest `ib_*` client); returns
    /// its summary.
    /// With `threads` above 1, serves that many clients at once (a roce
    /// perf client with as many `--threads`), each on a thread and an
    /// engine of its own, and sums them up in one [`Served`].
    pub fn serve(&self) -> Result<Served> {
        if self.opts.threads > 1 {
            return threads::serve(&self.opts, self.test, &self.listener);
        }
        session::server(&self.opts, self.test, &self.listener)
    }
}

/// The client side: connects to `opts.server` and runs every size.
pub fn client(opts: &Options) -> Result<Report> {
    let mut opts = opts.clone();
    let test = opts.check()?;
    let server = opts
        .server
        .clone()
        .ok_or_else(|| Error::Usage("a client needs a SERVER to connect to".into()))?;
    if opts.threads > 1 {
        return threads::client(&opts, test, &server);
    }
    let mut r = session::client(&opts, test, &server, opts.bind)?;
    r.analyze(&opts);
    Ok(r)
}

/// Both sides in this process over UDP on 127.0.0.1 and 127.0.0.2 (or
/// the server's address `opts.server` and the client's `opts.bind`, see
/// [`Options::loopback`]), with the kernel's baseline beside each size when
/// `opts.baseline` or `opts.analyze` asks for it.
pub fn loopback(opts: &Options) -> Result<Report> {
    let mut args = opts.clone();
    args.loopback = true;
    let test = args.check()?;
    if args.threads > 1 {
        return threads::loopback(&args, test);
    }
    let (server_ip, client_ip) = loopback_ips(&args);
    args.server = None;
    let io = |what: &str| {
        let what = what.to_string();
        move |source| Error::Io { what, source }
    };
    let listener = TcpListener::bind((server_ip, 0)).map_err(io("listening on 127.0.0.1"))?;
    let port = listener
        .local_addr()
        .map_err(io("listening on 127.0.0.1"))?
        .port();
    let mut sargs = args.clone();
    sargs.pcap = None; // the client's capture holds the whole conversation
    sargs.seed = args.seed.wrapping_add(1);
    sargs.bind = Some(server_ip);
    let srv = std::thread::Builder::new()
        .name("perf-server".into())
        .spawn(move || session::server(&sargs, test, &listener))
        .map_err(io("starting the server thread"))?;
    let report = session::client(
        &args,
        test,
        &SocketAddr::new(server_ip, port).to_string(),
        Some(client_ip),
    );
    let served = srv
        .join()
        .map_err(|_| Error::Run("the server thread panicked".into()))?;
    let mut report = report?;
    let served = served?;
    report.notes.splice(0..0, served.notes);
    if args.baseline || args.analyze {
        for r in &mut report.results {
            r.baseline = results::baseline_for(test, r, args.mtu.unwrap_or(4096) as usize)?;
        }
    }
    report.analyze(&args);
    Ok(report)
}

/// The server's and the client's address of a loopback run: 127.0.0.1 and
/// 127.0.0.2 unless `server` and `bind` say otherwise; an IPv6 server
/// without `bind` has its client on the same address (the client's engine
/// then takes another UDP port, which roce's extension tells the server).
fn loopback_ips(args: &Options) -> (IpAddr, IpAddr) {
    let server = args
        .server
        .as_deref()
        .and_then(|s| s.parse::<IpAddr>().ok());
    match (server, args.bind) {
        (Some(s), Some(c)) => (s, c),
        (Some(s @ IpAddr::V6(_)), None) => (s, s),
        (Some(s), None) => (s, IpAddr::V4(Ipv4Addr::new(127, 0, 0, 2))),
        (None, Some(c @ IpAddr::V6(_))) => (c, c),
        (None, c) => (
            IpAddr::V4(Ipv4Addr::new(127, 0, 0, 1)),
            c.unwrap_or(IpAddr::V4(Ipv4Addr::new(127, 0, 0, 2))),
        ),
    }
}

/// The seed of the server's data pattern (see [`pattern`]).
pub const SERVER_SEED: u8 = 0x77;
/// The seed of the client's data pattern.
pub const CLIENT_SEED: u8 = 0x11;
/// How long a side waits for its peer to make progress before giving up.
pub(crate) const STALL: Duration = Duration::from_secs(30);

/// The bytes each side fills its buffer with, so `--verify` can tell
/// whose data landed where.
pub fn pattern(seed: u8, n: usize) -> Vec<u8> {
    (0..n)
        .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed) ^ (i >> 8) as u8)
        .collect()
}

pub(crate) fn sizes(args: &Options, t: Test) -> Vec<usize> {
    if t.verb == Verb::Atomic {
        return vec![8];
    }
    if args.all {
        return (1..=23).map(|e| 1usize << e).collect();
    }
    let d = if t.kind == Kind::Bw { 65536 } else { 2 };
    vec![args.size.unwrap_or(d).max(1)]
}

/// The sizes a UD run takes on a path of `mtu` bytes: a UD message is one
/// packet, so as perftest (`-s` above the MTU becomes the MTU, `-a` stops
/// at it). Returns the sizes and, when one changed, a note saying so.
pub(crate) fn ud_sizes(sizes: Vec<usize>, mtu: u32) -> (Vec<usize>, Option<String>) {
    let mtu = mtu as usize;
    if sizes.len() > 1 {
        let keep: Vec<usize> = sizes.iter().copied().filter(|&s| s <= mtu).collect();
        return (keep, None);
    }
    match sizes.first() {
        Some(&s) if s > mtu => (
            vec![mtu],
            Some(format!(
                "a UD message is one packet: {s} B is more than the path MTU, so the size is {mtu} B (as perftest's)"
            )),
        ),
        _ => (sizes, None),
    }
}

pub(crate) fn mtu_of(bytes: u32) -> Result<Mtu> {
    Mtu::from_bytes(bytes).ok_or_else(|| {
        Error::Usage(format!(
            "-m/--mtu {bytes}: the path MTU is 256, 512, 1024, 2048 or 4096"
        ))
    })
}

pub(crate) fn faults(args: &Options, seed: u64) -> Result<FaultConfig> {
    for (n, p) in [
        ("loss", args.loss),
        ("reorder", args.reorder),
        ("dup", args.dup),
        ("corrupt", args.corrupt),
        ("ce-mark", args.ce_mark),
    ] {
        if !(0.0..=1.0).contains(&p) {
            fail!(Usage, "--{n} {p}: a probability is between 0 and 1");
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
