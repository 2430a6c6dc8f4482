//! What `rc_pingpong` and `ud_pingpong` share: the options rdma-core's
//! examples take, the device they name, the TCP exchange of
//! [`roce_verbs::pingpong`], the loop that counts completions, and the two
//! result lines.
//!
//! A "device" here is one local IP address: `-d` names it. Both ends use the
//! same RoCEv2 UDP port (`--udp-port`, 4791 by default) because the
//! examples' message carries a GID, which is an IP address, and no port.

use clap::Args;
use roce_verbs::pingpong::{self, Dest};
use roce_verbs::{Context, Cq, Device, EngineConfig, Gid, Wc, WcStatus};
use std::net::{IpAddr, Ipv4Addr, SocketAddr, TcpListener, TcpStream, ToSocketAddrs, UdpSocket};
use std::time::{Duration, Instant};

pub const RECV_WRID: u64 = 1;
pub const SEND_WRID: u64 = 2;

/// How long the loop waits for a completion before giving up on the peer.
pub const STALL: Duration = Duration::from_secs(20);

/// The options both examples take, with rdma-core's letters and defaults.
#[derive(Args, Debug)]
pub struct Common {
    /// listen on/connect to TCP port <port>
    #[arg(short = 'p', long = "port", default_value_t = pingpong::DEFAULT_PORT)]
    pub port: u16,
    /// use the device on local IP address <dev> (default: 127.0.0.1 for a
    /// server; for a client the address that routes to the server, or
    /// 127.0.0.2 when that is the server's own loopback address)
    #[arg(short = 'd', long = "ib-dev")]
    pub dev: Option<IpAddr>,
    /// use port <port> of the device (a device has one port: 1)
    #[arg(short = 'i', long = "ib-port", default_value_t = 1)]
    pub ib_port: u32,
    /// number of receives to post at a time
    #[arg(short = 'r', long = "rx-depth", default_value_t = 500)]
    pub rx_depth: u32,
    /// number of exchanges
    #[arg(short = 'n', long = "iters", default_value_t = 1000)]
    pub iters: u32,
    /// service level value (0-15; on RoCE it selects a VLAN priority, which
    /// a UDP socket does not carry, so it is checked and otherwise unused)
    #[arg(short = 'l', long = "sl", default_value_t = 0)]
    pub sl: u8,
    /// sleep on CQ events (default poll)
    #[arg(short = 'e', long = "events")]
    pub events: bool,
    /// local port gid index: 0 only. A device here is one IP address (-d)
    /// and its GID is that address, so index 0; the other entries of the
    /// interface's GID table (`roce perf --list-gids` shows it, e.g. lo's
    /// 127.0.0.1 and ::1) are devices of their own, chosen by giving their address
    /// with -d. The GID is sent whether or not -g is given, as RoCE needs it
    #[arg(short = 'g', long = "gid-idx")]
    pub gid_idx: Option<i32>,
    /// validate received buffer
    #[arg(short = 'c', long = "chk")]
    pub chk: bool,
    /// RoCEv2 UDP port of both ends (not in rdma-core: there it is 4791)
    #[arg(long = "udp-port", default_value_t = roce_verbs::ROCE_PORT)]
    pub udp_port: u16,
    /// connect to the server at <host> (no host: be the server)
    pub servername: Option<String>,
}

/// Prints `msg` to stderr and exits 1, as the C examples do.
pub fn fail(msg: impl std::fmt::Display) -> ! {
    eprintln!("{msg}");
    std::process::exit(1)
}

impl Common {
    pub fn check(&self) {
        if self.ib_port != 1 {
            fail(format!(
                "Couldn't get port info: the device has one port (1), not {}",
                self.ib_port
            ));
        }
        if self.sl > 15 {
            fail(format!("service level {} is not 0-15", self.sl));
        }
        if self.rx_depth == 0 || self.iters == 0 {
            fail("rx-depth and iters must be at least 1");
        }
        if let Some(g) = self.gid_idx
            && g > 0
        {
            // The interface's table, to say where the entry the user
            // meant lives (rxe's index g would be its g-th address).
            let table = self
                .dev
                .and_then(roce_verbs::netdev_of)
                .map(|dev| {
                    let t = roce_verbs::gid_table(&dev);
                    let gids: Vec<String> = t.iter().map(|e| e.gid.to_string()).collect();
                    format!(
                        "; the GID table of {dev} holds {} ({}), each entry a device of its own: give its address with -d",
                        gids.len(),
                        gids.join(", ")
                    )
                })
                .unwrap_or_default();
            fail(format!(
                "can't read sgid of index {g}: this device is one IP address, whose GID is index 0{table}"
            ));
        }
    }

    /// The server's address, resolved (client only).
    pub fn server_addr(&self) -> Option<SocketAddr> {
        let name = self.servername.as_deref()?;
        let addrs = (name, self.port)
            .to_socket_addrs()
            .unwrap_or_else(|e| fail(format!("{e} for {name}:{}", self.port)));
        let all: Vec<SocketAddr> = addrs.collect();
        // Prefer the family of -d when given.
        let want_v4 = self.dev.map(|d| d.is_ipv4());
        all.iter()
            .find(|a| want_v4.is_none_or(|v4| a.is_ipv4() == v4))
            .or(all.first())
            .copied()
            .or_else(|| fail(format!("{name} has no address")))
    }

    /// Opens the device `-d` names (or the default) on the RoCEv2 port.
    pub fn open(&self, server: Option<SocketAddr>) -> Context {
        let ip = self.dev.unwrap_or_else(|| match server {
            None => IpAddr::V4(Ipv4Addr::LOCALHOST),
            Some(s) => default_client_ip(s.ip()),
        });
        let addr = SocketAddr::new(ip, self.udp_port);
        Device::open_with(addr, EngineConfig::default())
            .unwrap_or_else(|e| fail(format!("Couldn't get context for {ip}: {e}")))
    }

    /// The TCP exchange: the client sends first; the server connects its QP
    /// (`connect`) before it answers. Returns the peer's address and the IP
    /// its TCP connection came from (for a peer that sent the zero GID).
    pub fn exchange(
        &self,
        server: Option<SocketAddr>,
        mine: &Dest,
        connect: impl FnOnce(&Dest, IpAddr),
    ) -> Dest {
        match server {
            Some(s) => {
                let mut t = connect_retrying(s)
                    .unwrap_or_else(|e| fail(format!("Couldn't connect to {s}: {e}")));
                mine.send(&mut t).unwrap_or_else(|e| fail(e));
                let rem = Dest::recv(&mut t).unwrap_or_else(|e| fail(e));
                pingpong::send_done(&mut t).unwrap_or_else(|e| fail(e));
                rem
            }
            None => {
                let l = TcpListener::bind(("::", self.port))
                    .or_else(|_| TcpListener::bind(("0.0.0.0", self.port)))
                    .unwrap_or_else(|e| {
                        fail(format!("Couldn't listen to port {}: {e}", self.port))
                    });
                let (mut t, from) = l
                    .accept()
                    .unwrap_or_else(|e| fail(format!("accept() failed: {e}")));
                drop(l);
                let rem = Dest::recv(&mut t).unwrap_or_else(|e| fail(e));
                connect(&rem, unmap(from.ip()));
                mine.send(&mut t).unwrap_or_else(|e| fail(e));
                pingpong::recv_done(&mut t).unwrap_or_else(|e| fail(e));
                rem
            }
        }
    }
}

/// Connects to the server, retrying a refused connection for up to 5 s
/// (rdma-core gives up at once; waiting lets a script start both sides
/// together without sleeping first).
fn connect_retrying(s: SocketAddr) -> std::io::Result<TcpStream> {
    let start = Instant::now();
    loop {
        match TcpStream::connect(s) {
            Err(e)
                if e.kind() == std::io::ErrorKind::ConnectionRefused
                    && start.elapsed() < Duration::from_secs(5) =>
            {
                std::thread::sleep(Duration::from_millis(20));
            }
            r => return r,
        }
    }
}

/// An IPv4-mapped address seen on a dual-stack socket, as IPv4.
pub fn unmap(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(ip, IpAddr::V4),
        v4 => v4,
    }
}

/// The peer's RoCE address: its GID's IP, or where its TCP came from when
/// it sent the zero GID; on our UDP port.
pub fn peer_addr(rem: &Dest, tcp_from: Option<IpAddr>, udp_port: u16) -> SocketAddr {
    let ip =
        rem.gid.ip().or(tcp_from).unwrap_or_else(|| {
            fail("the peer sent the zero GID (no -g?) and its address is unknown")
        });
    SocketAddr::new(ip, udp_port)
}

/// The local address a client uses towards `server`: the kernel's choice,
/// except that on one host the server owns its loopback address's UDP port,
/// so the client takes the next one.
fn default_client_ip(server: IpAddr) -> IpAddr {
    let bind: SocketAddr = if server.is_ipv4() {
        "0.0.0.0:0".parse().unwrap_or_else(|e| fail(e))
    } else {
        "[::]:0".parse().unwrap_or_else(|e| fail(e))
    };
    let src = UdpSocket::bind(bind)
        .and_then(|s| s.connect((server, 9)).and_then(|_| s.local_addr()))
        .map(|a| a.ip())
        .unwrap_or_else(|e| fail(format!("no route to {server}: {e}")));
    match src {
        IpAddr::V4(v4) if v4 == server && v4.is_loopback() => {
            let [a, b, c, d] = v4.octets();
            IpAddr::V4(Ipv4Addr::new(a, b, c, d.wrapping_add(1).max(1)))
        }
        ip if ip == server => fail(format!(
            "the server's device is {server}; on one host give this side another address with -d"
        )),
        ip => ip,
    }
}

/// The line each side prints for itself and its peer.
pub fn print_dest(who: &str, d: &Dest, psn_sep: &str) {
    println!(
        "  {who} LID 0x{:04x}, QPN 0x{:06x}, PSN 0x{:06x}{psn_sep} GID {}",
        d.lid, d.qpn, d.psn, d.gid
    );
}

/// This side's [`Dest`].
pub fn my_dest(ctx: &Context, qpn: u32, psn: u32) -> Dest {
    Dest {
        lid: 0,
        qpn,
        psn,
        gid: Gid::from_ip(ctx.local_addr().ip()),
    }
}

/// Waits for one or two completions: spinning on the CQ, or (`-e`)
/// sleeping until the device has work. Gives up after [`STALL`].
pub fn next_completions(cq: &Cq, events: bool) -> Vec<Wc> {
    if events {
        let mut got = cq
            .wait(1, STALL)
            .unwrap_or_else(|e| fail(format!("Failed to get cq_event: {e}")));
        got.extend(cq.poll_only(1));
        return got;
    }
    let start = Instant::now();
    loop {
        let got = cq
            .poll(2)
            .unwrap_or_else(|e| fail(format!("poll CQ failed: {e}")));
        if !got.is_empty() {
            return got;
        }
        if start.elapsed() > STALL {
            fail(format!(
                "poll CQ failed: no completion in {} s (is the peer still there?)",
                STALL.as_secs()
            ));
        }
    }
}

/// Fails on an unsuccessful completion, as `parse_single_wc` does.
pub fn check_status(wc: &Wc) {
    if wc.status != WcStatus::Success {
        fail(format!(
            "Failed status {} ({}) for wr_id {}",
            wc.status.name(),
            wc.status as u32,
            wc.wr_id
        ));
    }
}

/// The byte message `k` is filled with under `-c`.
pub fn chk_byte(k: u32) -> u8 {
    (k as u8).wrapping_mul(7).wrapping_add(1)
}

/// The two result lines, as the C examples print them.
pub fn report(size: u32, iters: u32, elapsed: Duration) {
    let usec = elapsed.as_secs_f64() * 1e6;
    let bytes = u64::from(size) * u64::from(iters) * 2;
    println!(
        "{bytes} bytes in {:.2} seconds = {:.2} Mbit/sec",
        usec / 1e6,
        bytes as f64 * 8.0 / usec
    );
    println!(
        "{iters} iters in {:.2} seconds = {:.2} usec/iter",
        usec / 1e6,
        usec / f64::from(iters)
    );
}
