//! roce perf against a peer that speaks only perftest's exchange, as
//! `ib_write_bw` 6.29 does over TCP (linux-rdma/perftest,
//! src/perftest_communication.c and src/write_bw.c): every byte the peer
//! sends is built here from perftest's format strings, not by roce's
//! encoder, and every byte roce sends is checked against them. The peer's
//! RDMA runs on a roce engine (this host has no rxe); the exchange is what
//! is under test. `scripts/perftest_interop.sh` runs the real `ib_write_bw`
//! where rxe exists.

#[path = "../../verbs/tests/prereq/mod.rs"]
mod prereq;

use roce_perf::{Options, Server};
use roce_verbs::*;
use std::io::{Read, Write};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, TcpListener, TcpStream};
use std::time::Duration;

/// `TcpStream::connect` to an address just added to `lo`, retried while
/// the kernel answers "network unreachable": the fresh address's route
/// was seen usable (`prereq::LoIpv6::add` waits for it), yet one CI run
/// (session 19) still had the connect refused that way once, while other
/// tests added and removed addresses. Any other error fails at once, and
/// so does an address still unreachable after 10 s.
fn connect_when_routed(addr: SocketAddr) -> TcpStream {
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    loop {
        match TcpStream::connect(addr) {
            Ok(s) => return s,
            Err(e)
                if e.kind() == std::io::ErrorKind::NetworkUnreachable
                    && std::time::Instant::now() < deadline =>
            {
                std::thread::sleep(Duration::from_millis(10))
            }
            Err(e) => panic!("connecting to {addr}: {e}"),
        }
    }
}

/// perftest's `KEY_PRINT_FMT_GID`, as `sprintf` fills it, with its NUL:
/// `%04x:%04x:%06x:%06x:%08x:%016llx:` + 16 × `%02x:` + `%08x:`.
/// The GID is `union ibv_gid`'s raw bytes as rxe fills them for a RoCEv2
/// GID: an IPv6 address as itself, an IPv4 one as `::ffff:a.b.c.d`.
fn key_msg(qpn: u32, psn: u32, rkey: u32, vaddr: u64, ip: IpAddr) -> Vec<u8> {
    key_msg_reads(16, qpn, psn, rkey, vaddr, ip)
}

fn gid_raw(ip: IpAddr) -> [u8; 16] {
    match ip {
        IpAddr::V4(v) => v.to_ipv6_mapped().octets(),
        IpAddr::V6(v) => v.octets(),
    }
}

fn key_msg_reads(reads: u16, qpn: u32, psn: u32, rkey: u32, vaddr: u64, ip: IpAddr) -> Vec<u8> {
    let mut s = format!(
        "{:04x}:{reads:04x}:{qpn:06x}:{psn:06x}:{rkey:08x}:{vaddr:016x}:",
        0
    );
    for b in gid_raw(ip) {
        s += &format!("{b:02x}:");
    }
    s += &format!("{:08x}:", 0);
    let mut v = s.into_bytes();
    v.push(0);
    assert_eq!(v.len(), 108, "KEY_MSG_SIZE_GID");
    v
}

/// What a perftest reader takes from a key message: QPN, PSN, rkey, VA,
/// and the GID as an address (IPv4 when IPv4-mapped).
fn parse_keys(b: &[u8]) -> (u32, u32, u32, u64, IpAddr) {
    assert_eq!(b.len(), 108);
    assert_eq!(b[107], 0, "NUL-terminated");
    let s = std::str::from_utf8(&b[..107]).unwrap();
    let f: Vec<&str> = s.split(':').collect();
    assert_eq!(f.len(), 24, "{s}");
    assert_eq!(
        [
            f[0].len(),
            f[1].len(),
            f[2].len(),
            f[3].len(),
            f[4].len(),
            f[5].len()
        ],
        [4, 4, 6, 6, 8, 16],
        "widths of %04x:%04x:%06x:%06x:%08x:%016llx in {s}"
    );
    let h = |i: usize| u64::from_str_radix(f[i], 16).unwrap();
    assert!(
        f[6..22].iter().all(|g| g.len() == 2),
        "16 GID bytes of %02x in {s}"
    );
    let mut gid = [0u8; 16];
    for (k, g) in gid.iter_mut().enumerate() {
        *g = h(6 + k) as u8;
    }
    let v6 = Ipv6Addr::from(gid);
    let ip = v6.to_ipv4_mapped().map_or(IpAddr::V6(v6), IpAddr::V4);
    (h(2) as u32, h(3) as u32, h(4) as u32, h(5), ip)
}

/// 127.0.0.N: each test its own loopback address, so each stand-in peer
/// has UDP 4791 (which a perftest peer needs) to itself.
fn lo4(n: u8) -> IpAddr {
    IpAddr::V4(Ipv4Addr::new(127, 0, 0, n))
}

/// One perftest peer's TCP side: the client writes first, the server reads first.
struct Peer {
    s: TcpStream,
    client: bool,
}

impl Peer {
    fn xchg(&mut self, mine: &[u8]) -> Vec<u8> {
        let mut theirs = vec![0u8; mine.len()];
        if self.client {
            self.s.write_all(mine).unwrap();
            self.s.read_exact(&mut theirs).unwrap();
        } else {
            self.s.read_exact(&mut theirs).unwrap();
            self.s.write_all(mine).unwrap();
        }
        theirs
    }

    /// exchange_versions, check_sys_data, check_mtu as perftest 6.29.
    fn greet(&mut self) {
        let mut v = b"6.29".to_vec();
        v.resize(16, 0);
        let theirs = self.xchg(&v);
        assert_eq!(&theirs[..11], b"5.70-roce1\0", "roce's version string");
        assert_eq!(self.xchg(&4096u32.to_be_bytes()), 4096u32.to_be_bytes());
        assert_eq!(self.xchg(&64u32.to_be_bytes()), 64u32.to_be_bytes());
        // sprintf("%d", IBV_MTU_1024): "3" and its NUL.
        assert_eq!(self.xchg(b"3\0"), b"3\0", "roce runs -m 1024 here");
    }
}

/// A peer's verbs side on its own loopback address, UDP 4791.
struct Rdma {
    ctx: Context,
    _pd: Pd,
    cq: Cq,
    mr: Mr,
}

fn rdma(ip: IpAddr) -> (Rdma, PreparedQp) {
    let ctx = Device::open_with(SocketAddr::new(ip, ROCE_PORT), Default::default())
        .expect("UDP 4791 on this test's own loopback address");
    let pd = ctx.alloc_pd().unwrap();
    let cq = ctx.create_cq(256).unwrap();
    let mr = pd.reg_mr(1 << 17, Access::ALL).unwrap();
    let qp = pd.qp_builder(&cq).mtu(Mtu::Mtu1024).build().unwrap();
    let r = Rdma {
        ctx,
        _pd: pd,
        cq,
        mr,
    };
    (r, qp)
}

/// Steps 4-5 of write_bw, read_bw and atomic_bw: keys, connect, keys
/// again, the sync after RTR. Returns the connected QP, the peer's
/// endpoint and this side's key message.
fn connect(p: &mut Peer, r: &Rdma, qp: PreparedQp, ip: IpAddr) -> (Qp, Endpoint, Vec<u8>) {
    connect_as("write_bw", p, r, qp, ip, 0)
}

/// Steps 4-5 as `test`'s main orders them (perftest 6.29): write_lat.c,
/// read_lat.c and atomic_lat.c shake hands on QP 0 before the per-QP keys;
/// send_bw.c and send_lat.c sync right after ctx_connect and send the
/// second round of keys after it; the bandwidth tests send the second
/// round first. `recv_off`: where this side's VA points into its buffer.
/// The peer's QP as a perftest key message describes it (engine on 4791,
/// the tests' 1024-byte path MTU).
fn peer_endpoint(qpn: u32, psn: u32, rkey: u32, vaddr: u64, ip: IpAddr) -> Endpoint {
    Endpoint {
        ip,
        udp_port: ROCE_PORT,
        qpn,
        psn,
        mtu: 1024,
        addr: vaddr,
        len: 0,
        rkey,
    }
}

fn connect_as(
    test: &str,
    p: &mut Peer,
    r: &Rdma,
    qp: PreparedQp,
    ip: IpAddr,
    recv_off: u64,
) -> (Qp, Endpoint, Vec<u8>) {
    let me = qp.endpoint_with(&r.mr);
    let mine = key_msg(me.qpn, me.psn, me.rkey, me.addr + recv_off, ip);
    let lat_first = matches!(test, "write_lat" | "read_lat" | "atomic_lat");
    let send = test.starts_with("send");
    if lat_first {
        p.xchg(&mine);
    }
    let (qpn, psn, rkey, vaddr, rip) = parse_keys(&p.xchg(&mine));
    let remote = peer_endpoint(qpn, psn, rkey, vaddr, rip);
    let qp = qp.connect(&remote).unwrap();
    if send {
        assert_eq!(parse_keys(&p.xchg(&mine)).0, qpn, "the sync after RTR");
    }
    assert_eq!(
        parse_keys(&p.xchg(&mine)).0,
        qpn,
        "keys again after connecting"
    );
    if !send {
        assert_eq!(parse_keys(&p.xchg(&mine)).0, qpn, "the sync after RTR");
    }
    (qp, remote, mine)
}

fn report_words(size: u64, iters: u64, peak: f64, avg: f64, rate: f64) -> [[u8; 8]; 5] {
    [
        size.to_be_bytes(),
        iters.to_be_bytes(),
        peak.to_bits().to_be_bytes(),
        avg.to_bits().to_be_bytes(),
        rate.to_bits().to_be_bytes(),
    ]
}

#[test]
fn roce_serves_a_perftest_write_bw_client() {
    let (sip, cip) = (lo4(61), lo4(62));
    let mut o = Options::new("write_bw");
    o.bind = Some(sip);
    o.port = 0;
    o.mtu = Some(1024);
    o.size = Some(65536);
    let server = Server::bind(&o).unwrap();
    let addr = server.local_addr().unwrap();
    let served = std::thread::spawn(move || server.serve());

    let mut p = Peer {
        s: TcpStream::connect(addr).unwrap(),
        client: true,
    };
    p.greet();
    let (r, qp) = rdma(cip);
    let (qp, remote, mine) = connect(&mut p, &r, qp, cip);
    assert_eq!(
        remote.ip, sip,
        "the server's GID is its IPv4 address, mapped"
    );
    // run_iter_bw: WRITEs of 64 KiB to the server's VA.
    r.mr.write(0, &[0xab; 65536]).unwrap();
    for i in 0..32 {
        let wr = SendWr::new(
            i,
            WrOpcode::RdmaWrite {
                remote_addr: remote.addr,
                rkey: remote.rkey,
            },
            vec![r.mr.sge(0, 65536)],
        );
        qp.post_send(&wr).unwrap();
        let wc = r.cq.wait(1, Duration::from_secs(20)).unwrap();
        assert_eq!(wc[0].status, WcStatus::Success);
    }
    // The client is done: a sync, its report, the closing sync.
    p.xchg(&mine);
    for (w, theirs) in report_words(65536, 32, 123.5, 100.25, 0.0016)
        .iter()
        .map(|w| (w, p.xchg(w)))
    {
        assert_eq!(theirs, [0u8; 8], "a passive server reports zeros ({w:?})");
    }
    p.xchg(&mine);
    let summary = served.join().unwrap().unwrap().summary;
    assert!(summary.contains("served perftest 6.29"), "{summary}");
    assert!(
        summary.contains("65536 B x 32 at 100.25 MiB/s average, 123.50 peak"),
        "{summary}"
    );
    drop(r.ctx);
}

/// roce perf's client against a passive perftest server (write_bw.c and
/// read_bw.c share the server's sequence); returns the server's view: the
/// client's GID, the report it got, and the first 64 KiB of its buffer,
/// which it filled with 0x5a before the run.
fn client_against_a_perftest_server(
    test: &str,
    sip: IpAddr,
    cip: IpAddr,
) -> (roce_perf::Report, Endpoint, u64, u64, f64, Vec<u8>) {
    let l = TcpListener::bind((sip, 0)).unwrap();
    let addr = l.local_addr().unwrap();
    let peer = std::thread::spawn(move || {
        let mut p = Peer {
            s: l.accept().unwrap().0,
            client: false,
        };
        p.greet();
        let (r, qp) = rdma(sip);
        r.mr.write(0, &[0x5a; 65536]).unwrap();
        let _drive = r.ctx.spawn_progress(false);
        let (_qp, remote, mine) = connect(&mut p, &r, qp, sip);
        // Passive until the client's sync, then its report.
        p.xchg(&mine);
        let w: Vec<[u8; 8]> = (0..5)
            .map(|_| p.xchg(&[0u8; 8]).try_into().unwrap())
            .collect();
        p.xchg(&mine);
        let size = u64::from_be_bytes(w[0]);
        let iters = u64::from_be_bytes(w[1]);
        let avg = f64::from_bits(u64::from_be_bytes(w[3]));
        let landed = r.mr.read(0, 65536).unwrap();
        (remote, size, iters, avg, landed)
    });
    let mut o = Options::new(test);
    o.server = Some(addr.to_string());
    o.bind = Some(cip);
    o.mtu = Some(1024);
    o.size = Some(65536);
    o.iters = Some(40);
    let report = roce_perf::client(&o).unwrap();
    let (remote, size, iters, avg, landed) = peer.join().unwrap();
    (report, remote, size, iters, avg, landed)
}

#[test]
fn roce_client_runs_write_bw_against_a_perftest_server() {
    let (sip, cip) = (lo4(63), lo4(64));
    let (report, remote, size, iters, avg, landed) =
        client_against_a_perftest_server("write_bw", sip, cip);
    assert_eq!(report.peer_version, "6.29");
    assert_eq!(remote.ip, cip);
    assert_eq!((size, iters), (65536, 40));
    let mine = &report.results[0];
    assert_eq!(mine.iterations, 40);
    assert_eq!(
        Some(avg),
        mine.bw_avg_mib,
        "the report the server got is ours"
    );
    assert_eq!(landed, roce_perf::pattern(roce_perf::CLIENT_SEED, 65536));
}

#[test]
fn roce_client_runs_read_bw_against_a_perftest_server() {
    let (sip, cip) = (lo4(66), lo4(67));
    let (report, _, size, iters, _, landed) = client_against_a_perftest_server("read_bw", sip, cip);
    assert_eq!((size, iters), (65536, 40));
    assert_eq!(report.results[0].iterations, 40);
    assert_eq!(
        landed,
        vec![0x5a; 65536],
        "READ leaves the server's buffer alone"
    );
}

/// A "server" that says what the test gives it after a perftest greeting
/// and reports what the roce client made of it.
fn client_error(test: &str, gid_index: Option<u32>, steps: Vec<Vec<u8>>) -> String {
    // Its own loopback address, so UDP 4791 (which a perftest peer needs) is free.
    client_error_at(lo4(65), test, steps, |o| o.gid_index = gid_index)
}

fn client_error_with(test: &str, steps: Vec<Vec<u8>>, f: impl FnOnce(&mut Options)) -> String {
    client_error_at(lo4(65), test, steps, f)
}

fn client_error_at(
    bind: IpAddr,
    test: &str,
    steps: Vec<Vec<u8>>,
    f: impl FnOnce(&mut Options),
) -> String {
    let l = TcpListener::bind((bind, 0)).unwrap();
    let addr = l.local_addr().unwrap();
    let peer = std::thread::spawn(move || {
        let Ok((mut s, _)) = l.accept() else { return };
        for step in steps {
            let mut b = vec![0u8; step.len()];
            if s.read_exact(&mut b).is_err() || s.write_all(&step).is_err() {
                return;
            }
        }
    });
    let mut o = Options::new(test);
    o.server = Some(addr.to_string());
    o.bind = Some(bind);
    o.mtu = Some(1024);
    f(&mut o);
    let e = roce_perf::client(&o).unwrap_err();
    peer.join().unwrap();
    format!("{e:#}")
}

fn v(s: &str, n: usize) -> Vec<u8> {
    let mut b = s.as_bytes().to_vec();
    b.resize(n, 0);
    b
}

#[test]
fn a_peer_we_do_not_understand_is_one_clear_error() {
    // roce perf's old JSON exchange where the version string belongs.
    let e = client_error("write_bw", None, vec![v("{\"Hello\":{\"te", 16)]);
    assert!(e.contains("version string is not perftest's"), "{e}");
    assert_eq!(e.lines().count(), 1, "{e}");
    // A perftest older than 5.70 (perftest refuses it too).
    let e = client_error("write_bw", None, vec![v("5.3", 16)]);
    assert!(e.contains("5.70 or newer"), "{e}");
    // A key message that is not KEY_PRINT_FMT_GID.
    let greet = vec![
        v("6.29", 16),
        4096u32.to_be_bytes().to_vec(),
        64u32.to_be_bytes().to_vec(),
        b"3\0".to_vec(),
    ];
    let mut steps = greet.clone();
    steps.push(v("0000:0010:000011:abcdef:00001234", 108));
    let e = client_error("write_bw", None, steps);
    assert!(e.contains("key message is not perftest's"), "{e}");
    assert!(e.contains("23 ':'-terminated fields"), "{e}");
    // An MTU message that is not an ibv_mtu.
    let mut steps = greet[..3].to_vec();
    steps.push(b"7\0".to_vec());
    let e = client_error("write_bw", None, steps);
    assert!(e.contains("MTU message is not perftest's"), "{e}");
    // A cycle buffer no page size has (both sides would allocate twice it).
    let mut steps = greet[..3].to_vec();
    steps[1] = (1u32 << 30).to_be_bytes().to_vec();
    let e = client_error("write_bw", None, steps);
    assert!(
        e.contains("cycle buffer of 1073741824 bytes exceeds"),
        "{e}"
    );
    assert_eq!(e.lines().count(), 1, "{e}");
    // IRN against a perftest RNIC, which recovers with go-back-N.
    let e = client_error_with("write_bw", greet.clone(), |o| o.recovery = Recovery::Irn);
    assert!(
        e.contains("recovers from loss with go-back-N: run it without --recovery irn"),
        "{e}"
    );
    // A READ responder that takes fewer outstanding reads than roce issues.
    let mut steps = greet.clone();
    steps.push(key_msg_reads(1, 0x12, 0, 0x99, 0x1000, lo4(1)));
    let e = client_error("read_bw", None, steps);
    assert!(e.contains("accepts 1 outstanding RDMA reads"), "{e}");
    // A GID index this device does not have.
    let e = client_error("write_bw", Some(300), vec![]);
    assert!(e.contains("GID index 300 does not exist"), "{e}");
    assert!(
        e.contains("the GID table of lo (which holds 127.0.0.65)"),
        "{e}"
    );
    assert!(e.contains("::ffff:127.0.0.1"), "{e}");
    assert_eq!(e.lines().count(), 1, "{e}");
}

/// An application embeds a latency test: both sides in-process, results
/// as values.
#[test]
fn an_application_embeds_a_latency_test() {
    let mut o = Options::new("write_lat");
    o.udp_port = Some(0);
    o.iters = Some(50);
    o.verify = true;
    let r = roce_perf::loopback(&o).unwrap();
    assert_eq!(r.peer_version, roce_perf::perftest::ROCE_VERSION);
    assert_eq!(r.verified(&o), Some(true));
    let l = r.results[0].latency_us.expect("latency figures");
    assert!(l.min <= l.typical && l.typical <= l.max);
    assert!(r.render(&o).unwrap().contains("RDMA_Write Latency Test"));
}

/// roce perf on both sides over IPv6 loopback (`::1`, always there): the
/// endpoints are IPv6, and every byte arrives.
#[test]
fn roce_on_both_sides_over_ipv6_loopback() {
    for test in ["write_bw", "read_lat"] {
        let mut o = Options::new(test);
        o.server = Some("::1".into());
        o.udp_port = Some(0);
        o.iters = Some(50);
        o.size = Some(4096);
        o.verify = true;
        let r = roce_perf::loopback(&o).unwrap();
        assert_eq!(r.verified(&o), Some(true), "{test}");
        let v6: IpAddr = Ipv6Addr::LOCALHOST.into();
        assert_eq!((r.local[0].ip, r.remote[0].ip), (v6, v6), "{test}");
        assert_eq!(r.results[0].iterations, 50);
    }
}

/// An IPv6 side and a perftest peer whose GID is IPv4-mapped: one clear
/// error (perftest's own `ctx_check_gid_compatibility` refuses the same).
#[test]
fn an_ipv4_gid_against_an_ipv6_side_is_one_clear_error() {
    let mut steps = vec![
        v("6.29", 16),
        4096u32.to_be_bytes().to_vec(),
        64u32.to_be_bytes().to_vec(),
        b"3\0".to_vec(),
    ];
    steps.push(key_msg(0x12, 0, 0x99, 0x1000, lo4(1)));
    let e = client_error_at(Ipv6Addr::LOCALHOST.into(), "write_bw", steps, |_| {});
    assert!(
        e.contains("::ffff:127.0.0.1 is an IPv4 address and this side's (::1) is IPv6"),
        "{e}"
    );
    assert_eq!(e.lines().count(), 1, "{e}");
}

/// Two IPv6 addresses on `lo` (root adds them, as two hosts would have
/// them): a perftest write_bw client on fd7c:e5d1:9a02::62 against roce perf's
/// server on fd7c:e5d1:9a02::61, the GIDs in the key messages the IPv6 addresses
/// themselves, byte for byte as perftest prints rxe's RoCEv2 GID; then
/// roce perf on both sides between the two.
#[test]
fn perftest_and_roce_between_two_ipv6_addresses() {
    if !prereq::root(
        "perftest_and_roce_between_two_ipv6_addresses",
        "adding fd7c:e5d1:9a02::61 and fd7c:e5d1:9a02::62 to lo",
    ) || !prereq::tool(
        "perftest_and_roce_between_two_ipv6_addresses",
        &["ip", "-V"],
        "iproute2",
    ) {
        return;
    }
    let _a = prereq::LoIpv6::add("fd7c:e5d1:9a02::61");
    let _b = prereq::LoIpv6::add("fd7c:e5d1:9a02::62");
    let sip: IpAddr = "fd7c:e5d1:9a02::61".parse().unwrap();
    let cip: IpAddr = "fd7c:e5d1:9a02::62".parse().unwrap();
    let mut o = Options::new("write_bw");
    o.bind = Some(sip);
    o.port = 0;
    o.mtu = Some(1024);
    let server = Server::bind(&o).unwrap();
    let addr = server.local_addr().unwrap();
    let served = std::thread::spawn(move || server.serve());
    let mut p = Peer {
        s: connect_when_routed(addr),
        client: true,
    };
    p.greet();
    let (r, qp) = rdma(cip);
    let me = qp.endpoint_with(&r.mr);
    let mine = key_msg(me.qpn, me.psn, me.rkey, me.addr, cip);
    let theirs = p.xchg(&mine);
    // fd7c:e5d1:9a02::61 as 16 `%02x:` fields after LID, reads, QPN, PSN, rkey, VA.
    let gid_text = "fd:7c:e5:d1:9a:02:00:00:00:00:00:00:00:00:00:61:";
    assert_eq!(
        &theirs[50..50 + gid_text.len()],
        gid_text.as_bytes(),
        "{}",
        String::from_utf8_lossy(&theirs)
    );
    let (qpn, psn, rkey, vaddr, rip) = parse_keys(&theirs);
    assert_eq!(rip, sip);
    let remote = peer_endpoint(qpn, psn, rkey, vaddr, rip);
    let qp = qp.connect(&remote).unwrap();
    p.xchg(&mine);
    p.xchg(&mine);
    r.mr.write(0, &[0xcd; 8192]).unwrap();
    for i in 0..8 {
        qp.post_send(&SendWr::new(
            i,
            WrOpcode::RdmaWrite {
                remote_addr: remote.addr,
                rkey: remote.rkey,
            },
            vec![r.mr.sge(0, 8192)],
        ))
        .unwrap();
        assert_eq!(
            r.cq.wait(1, Duration::from_secs(20)).unwrap()[0].status,
            WcStatus::Success
        );
    }
    p.xchg(&mine);
    for w in report_words(8192, 8, 2.0, 1.0, 0.5) {
        p.xchg(&w);
    }
    p.xchg(&mine);
    let summary = served.join().unwrap().unwrap().summary;
    assert!(summary.contains("8192 B x 8"), "{summary}");
    drop(r.ctx);

    // roce perf on both sides, fd7c:e5d1:9a02::62 → fd7c:e5d1:9a02::61.
    let mut o = Options::new("send_bw");
    o.server = Some(sip.to_string());
    o.bind = Some(cip);
    o.udp_port = Some(0);
    o.iters = Some(200);
    o.verify = true;
    let r = roce_perf::loopback(&o).unwrap();
    assert_eq!(r.verified(&o), Some(true));
    assert_eq!((r.local[0].ip, r.remote[0].ip), (cip, sip));
}

/// perftest's `send_bw -c UD` between two roce perf: messages of one
/// packet through address handles, the size clamped to the path MTU as
/// perftest clamps it; what arrived is checked byte for byte.
#[test]
fn ud_send_bw_and_send_lat_between_two_roce_perf() {
    for (test, srq) in [("send_bw", false), ("send_bw", true), ("send_lat", true)] {
        let mut o = Options::new(test);
        o.connection = roce_perf::Connection::Ud;
        o.use_srq = srq;
        o.udp_port = Some(0);
        o.mtu = Some(1024);
        o.size = Some(65536);
        o.iters = Some(200);
        o.verify = true;
        let dir = tempfile::tempdir().unwrap();
        let cap = dir.path().join("ud.pcap");
        o.pcap = Some(cap.clone());
        let r = roce_perf::loopback(&o).unwrap();
        assert_eq!(
            r.verified(&o),
            Some(true),
            "{test} srq {srq}: {:?}",
            r.details
        );
        // Every SEND the client made is one UD_SEND_ONLY with perftest's Q_Key.
        let frames = roce_wire::pcap::read_capture(&std::fs::read(&cap).unwrap()).unwrap();
        let ports = [r.local[0].udp_port, r.remote[0].udp_port];
        let mut sends = 0;
        for f in &frames.frames {
            let roce_wire::Frame::Roce(p) = roce_wire::parse_frame_ports(&f.data, &ports).unwrap()
            else {
                panic!("not RoCE");
            };
            let t = &p.transport;
            let dst = match p.ip {
                roce_wire::IpRepr::V4(ip) => IpAddr::V4(ip.dst),
                roce_wire::IpRepr::V6(ip) => IpAddr::V6(ip.dst),
            };
            if dst == r.remote[0].ip && t.bth.opcode.is_request() {
                assert_eq!(t.bth.opcode, roce_wire::Opcode::UdSendOnly, "{test}");
                assert_eq!(t.deth.map(|d| d.qkey), Some(0x1111_1111));
                sends += 1;
            }
        }
        assert_eq!(sends, 200, "{test}: one datagram per SEND");
        assert_eq!(r.results[0].size, 1024, "{test}: one packet at MTU 1024");
        assert!(
            r.notes
                .iter()
                .any(|n| n.contains("65536 B is more than the path MTU")),
            "{:?}",
            r.notes
        );
        assert_eq!(r.results[0].iterations, 200);
    }
}

/// `--use_srq` over RC: two QPs' SENDs all drawn from the server's one
/// shared receive queue, every byte checked; and a ping-pong whose both
/// sides receive from an SRQ.
#[test]
fn use_srq_feeds_every_qp_from_one_queue() {
    for (test, qps) in [("send_bw", 2), ("send_lat", 1)] {
        let mut o = Options::new(test);
        o.use_srq = true;
        o.qps = qps;
        o.udp_port = Some(0);
        o.iters = Some(300);
        o.size = Some(8192);
        o.verify = true;
        let r = roce_perf::loopback(&o).unwrap();
        assert_eq!(r.verified(&o), Some(true), "{test}: {:?}", r.details);
        // -n counts per QP, as perftest's does.
        assert_eq!(r.results[0].iterations, 300 * u64::from(qps));
    }
}

#[test]
fn ud_and_srq_options_perftest_refuses_are_refused() {
    let err = |test: &str, f: &dyn Fn(&mut Options)| {
        let mut o = Options::new(test);
        o.udp_port = Some(0);
        f(&mut o);
        roce_perf::loopback(&o).unwrap_err().to_string()
    };
    let e = err("write_bw", &|o| o.connection = roce_perf::Connection::Ud);
    assert!(e.contains("-c UD carries SENDs only"), "{e}");
    let e = err("read_lat", &|o| o.use_srq = true);
    assert!(e.contains("--use_srq is for the SEND tests"), "{e}");
    let e = "UC"
        .parse::<roce_perf::Connection>()
        .unwrap_err()
        .to_string();
    assert!(e.contains("roce runs RC and UD"), "{e}");
}

/// A roce server with `-c UD` and a roce client with RC: the server
/// refuses, saying why.
#[test]
fn a_ud_server_refuses_an_rc_client() {
    let mut so = Options::new("send_bw");
    so.connection = roce_perf::Connection::Ud;
    so.bind = Some(lo4(68));
    so.port = 0;
    so.udp_port = Some(0);
    let server = Server::bind(&so).unwrap();
    let addr = server.local_addr().unwrap();
    let served = std::thread::spawn(move || server.serve());
    let mut co = Options::new("send_bw");
    co.server = Some(addr.to_string());
    co.bind = Some(lo4(69));
    co.udp_port = Some(0);
    let e = roce_perf::client(&co).unwrap_err().to_string();
    assert!(
        e.contains("this server's QPs are UD (-c), the client's RC"),
        "{e}"
    );
    assert!(served.join().unwrap().is_err());
}

// perftest's SEND and latency sequences against a stand-in peer: each
// flow below is written from the test's main and its run_iter_* in
// perftest 6.29, not from roce's code.

/// A roce perf server for `test` on `ip` (MTU 1024, `n` iterations of
/// `size`), serving in a thread.
/// `--use_srq` on the client of a server without it: the SRQ of a send_bw
/// run is the server's, so the report would claim one that does not
/// exist; the server refuses, and both sides say why.
#[test]
fn a_use_srq_mismatch_is_refused() {
    let (addr, served) = roce_server("send_bw", lo4(91), 4096, 10);
    let mut o = Options::new("send_bw");
    o.server = Some(addr.to_string());
    o.bind = Some(lo4(92));
    o.udp_port = Some(0);
    o.mtu = Some(1024);
    o.use_srq = true;
    o.iters = Some(10);
    let e = roce_perf::client(&o).unwrap_err().to_string();
    assert!(e.contains("--use_srq"), "{e}");
    let e = served.join().unwrap().unwrap_err().to_string();
    assert!(e.contains("this server lacks --use_srq"), "{e}");
}

/// `--recovery irn` on the client of a go-back-N server: IRN sends past a
/// gap that go-back-N drops, so the server refuses, and both sides say why.
#[test]
fn a_recovery_mismatch_is_refused() {
    let (addr, served) = roce_server("write_bw", lo4(93), 4096, 10);
    let mut o = Options::new("write_bw");
    o.server = Some(addr.to_string());
    o.bind = Some(lo4(94));
    o.udp_port = Some(0);
    o.mtu = Some(1024);
    o.recovery = Recovery::Irn;
    o.iters = Some(10);
    let e = roce_perf::client(&o).unwrap_err().to_string();
    let why = "this server recovers from loss with --recovery gbn, the client with irn: give both sides the same --recovery";
    assert!(e.contains(why), "{e}");
    let e = served.join().unwrap().unwrap_err().to_string();
    assert!(e.contains(why), "{e}");
}

fn roce_server(
    test: &str,
    ip: IpAddr,
    size: usize,
    n: u64,
) -> (
    SocketAddr,
    std::thread::JoinHandle<roce_perf::Result<roce_perf::Served>>,
) {
    let mut o = Options::new(test);
    o.bind = Some(ip);
    o.port = 0;
    o.mtu = Some(1024);
    o.size = Some(size);
    o.iters = Some(n);
    let server = Server::bind(&o).unwrap();
    let addr = server.local_addr().unwrap();
    (addr, std::thread::spawn(move || server.serve()))
}

/// A roce perf client for `test` from `ip` against the stand-in at `addr`.
fn roce_client(test: &str, addr: SocketAddr, ip: IpAddr, size: usize, n: u64) -> roce_perf::Report {
    let mut o = Options::new(test);
    o.server = Some(addr.to_string());
    o.bind = Some(ip);
    o.mtu = Some(1024);
    o.size = Some(size);
    o.iters = Some(n);
    roce_perf::client(&o).unwrap()
}

/// A stand-in perftest server: accepts, greets, opens its RDMA side.
fn standin_server(ip: IpAddr) -> (SocketAddr, TcpListener) {
    let l = TcpListener::bind((ip, 0)).unwrap();
    (l.local_addr().unwrap(), l)
}

fn accept(l: TcpListener) -> Peer {
    let mut p = Peer {
        s: l.accept().unwrap().0,
        client: false,
    };
    p.greet();
    p
}

fn dial(addr: SocketAddr) -> Peer {
    let mut p = Peer {
        s: TcpStream::connect(addr).unwrap(),
        client: true,
    };
    p.greet();
    p
}

fn recv_wr(r: &Rdma, off: usize, len: u32) -> RecvWr {
    RecvWr {
        wr_id: 7,
        sg_list: vec![r.mr.sge(off, len)],
    }
}

/// Waits for `n` completions of `opcode` (others are counted out).
fn wait_for(r: &Rdma, opcode: WcOpcode, n: usize) {
    let mut got = 0;
    while got < n {
        for wc in r.cq.wait(1, Duration::from_secs(20)).unwrap() {
            assert_eq!(wc.status, WcStatus::Success, "{wc:?}");
            if wc.opcode == opcode {
                got += 1;
            }
        }
    }
}

/// Reaps WRITE completions (each must be a success).
fn reap_writes(r: &Rdma) -> u64 {
    let wcs = r.cq.poll_only(16);
    for wc in &wcs {
        assert_eq!(
            (wc.status, wc.opcode),
            (WcStatus::Success, WcOpcode::RdmaWrite)
        );
    }
    wcs.len() as u64
}

fn send_wr(r: &Rdma, size: usize) -> SendWr {
    SendWr::new(1, WrOpcode::Send, vec![r.mr.sge(0, size as u32)])
}

/// send_bw.c's client against roce's server: keys, connect, the sync
/// after RTR, keys again; its receives posted, the server syncs; the
/// client's SENDs; the closing sync (no report: send_bw exchanges none).
#[test]
fn roce_serves_a_perftest_send_bw_client() {
    let (sip, cip) = (lo4(71), lo4(72));
    let (addr, served) = roce_server("send_bw", sip, 4096, 60);
    let mut p = dial(addr);
    let (r, qp) = rdma(cip);
    let (qp, _, mine) = connect_as("send_bw", &mut p, &r, qp, cip, 0);
    p.xchg(&mine); // the server posted its receives
    r.mr.write(0, &[0x3c; 4096]).unwrap();
    for _ in 0..60 {
        qp.post_send(&send_wr(&r, 4096)).unwrap();
    }
    wait_for(&r, WcOpcode::Send, 60);
    p.xchg(&mine); // ctx_close_connection
    let summary = served.join().unwrap().unwrap().summary;
    assert!(summary.contains("served perftest 6.29"), "{summary}");
    assert!(summary.contains("; 60 SENDs received"), "{summary}");
    assert!(!summary.contains("its report"), "{summary}");
}

/// roce's send_bw client against send_bw.c's server: the server posts
/// its receives before the per-size sync and counts the SENDs.
#[test]
fn roce_client_runs_send_bw_against_a_perftest_server() {
    let (sip, cip) = (lo4(73), lo4(74));
    let (addr, l) = standin_server(sip);
    let peer = std::thread::spawn(move || {
        let mut p = accept(l);
        let (r, qp) = rdma(sip);
        for _ in 0..50 {
            qp.post_recv(&recv_wr(&r, 65536, 4096)).unwrap();
        }
        let (_qp, _, mine) = connect_as("send_bw", &mut p, &r, qp, sip, 0);
        p.xchg(&mine); // receives posted
        wait_for(&r, WcOpcode::Recv, 50);
        p.xchg(&mine); // ctx_close_connection
        r.mr.read(65536, 4096).unwrap()
    });
    let rep = roce_client("send_bw", addr, cip, 4096, 50);
    let landed = peer.join().unwrap();
    assert_eq!(rep.results[0].iterations, 50);
    assert_eq!(landed, roce_perf::pattern(roce_perf::CLIENT_SEED, 4096));
}

/// `-q 2 -n 40` against send_bw.c's server with `-q 2 -n 40`: perftest
/// counts `-n` per QP (`run_iter_bw_server` waits for `iters ×
/// num_of_qps` receives and posts at most `iters` on each QP), so each QP
/// must carry exactly 40 SENDs, 80 in all, and the report says 80 as
/// perftest's does.
#[test]
fn send_bw_over_two_qps_counts_n_per_qp_as_perftest() {
    let (sip, cip) = (lo4(95), lo4(96));
    let n = 40usize;
    let (addr, l) = standin_server(sip);
    let peer = std::thread::spawn(move || {
        let mut p = accept(l);
        let (r, qp0) = rdma(sip);
        let qp1 = r._pd.qp_builder(&r.cq).mtu(Mtu::Mtu1024).build().unwrap();
        let prepared = [qp0, qp1];
        for (k, qp) in prepared.iter().enumerate() {
            for _ in 0..n {
                qp.post_recv(&RecvWr {
                    wr_id: k as u64,
                    sg_list: vec![r.mr.sge(65536, 4096)],
                })
                .unwrap();
            }
        }
        // send_bw.c: every QP's keys, connect, the sync after RTR, every
        // QP's keys again, the sync before the size.
        let mine: Vec<Vec<u8>> = prepared
            .iter()
            .map(|q| {
                let me = q.endpoint_with(&r.mr);
                key_msg(me.qpn, me.psn, me.rkey, me.addr, sip)
            })
            .collect();
        let remotes: Vec<Endpoint> = mine
            .iter()
            .map(|m| {
                let (qpn, psn, rkey, va, ip) = parse_keys(&p.xchg(m));
                peer_endpoint(qpn, psn, rkey, va, ip)
            })
            .collect();
        let _qps: Vec<Qp> = prepared
            .into_iter()
            .zip(&remotes)
            .map(|(q, e)| q.connect(e).unwrap())
            .collect();
        p.xchg(&mine[0]);
        for (m, e) in mine.iter().zip(&remotes) {
            assert_eq!(parse_keys(&p.xchg(m)).0, e.qpn, "keys again");
        }
        p.xchg(&mine[0]); // receives posted
        let mut per_qp = [0usize; 2];
        while per_qp.iter().sum::<usize>() < 2 * n {
            for wc in r.cq.wait(1, Duration::from_secs(20)).unwrap() {
                assert_eq!(wc.status, WcStatus::Success, "{wc:?}");
                per_qp[wc.wr_id as usize] += 1;
            }
        }
        p.xchg(&mine[0]); // ctx_close_connection
        // The client closes only after its last SEND completed, so every
        // receive it consumed is in the CQ by now: no 41st on either QP.
        assert!(r.cq.poll_only(16).is_empty());
        per_qp
    });
    let mut o = Options::new("send_bw");
    o.server = Some(addr.to_string());
    o.bind = Some(cip);
    o.mtu = Some(1024);
    o.size = Some(4096);
    o.iters = Some(n as u64);
    o.qps = 2;
    let rep = roce_perf::client(&o).unwrap();
    let per_qp = peer.join().unwrap();
    assert_eq!(per_qp, [n, n], "SENDs received on each QP");
    assert_eq!(rep.results[0].iterations, 2 * n as u64);
}

/// write_lat.c's client against roce's server, run_iter_lat_write: the
/// server WRITEs first; each side polls the last byte of its receive area
/// (the VA it announced) for the iteration count, then WRITEs its own
/// into the peer's. No closing sync.
#[test]
fn roce_serves_a_perftest_write_lat_client() {
    let (sip, cip) = (lo4(75), lo4(76));
    let (size, n) = (64usize, 300u64); // past 256: the count wraps as a char
    let (addr, served) = roce_server("write_lat", sip, size, n);
    let mut p = dial(addr);
    let (r, qp) = rdma(cip);
    let recv = 65536;
    let (qp, remote, _) = connect_as("write_lat", &mut p, &r, qp, cip, recv as u64);
    r.mr.write(0, &[0x42; 64]).unwrap();
    let mut done = 0;
    for i in 1..=n {
        let f = i as u8;
        let t = std::time::Instant::now();
        // perftest polls memory while its RNIC works; here the engine is
        // driven in the same loop (and the CQ reaped, as run_iter_lat_write
        // does after each post).
        while r.mr.byte(recv + size - 1).unwrap() != f {
            r.ctx.progress().unwrap();
            done += reap_writes(&r);
            assert!(
                t.elapsed() < Duration::from_secs(20),
                "WRITE {i} never came"
            );
        }
        r.mr.write(size - 1, &[f]).unwrap();
        qp.post_send(&SendWr::new(
            i,
            WrOpcode::RdmaWrite {
                remote_addr: remote.addr,
                rkey: remote.rkey,
            },
            vec![r.mr.sge(0, size as u32)],
        ))
        .unwrap();
    }
    while done < n {
        r.ctx.progress().unwrap();
        done += reap_writes(&r);
    }
    let summary = served.join().unwrap().unwrap().summary;
    assert!(summary.contains("served perftest 6.29"), "{summary}");
    // The server's WRITEs came from its pattern, into the announced VA.
    assert_eq!(
        r.mr.read(recv, size - 1).unwrap(),
        roce_perf::pattern(roce_perf::SERVER_SEED, size)[..size - 1]
    );
    drop(p);
}

/// roce's write_lat client against write_lat.c's server, which WRITEs
/// first and ends when its ping-pong ends.
#[test]
fn roce_client_runs_write_lat_against_a_perftest_server() {
    let (sip, cip) = (lo4(77), lo4(78));
    let (size, n) = (32usize, 270u64);
    let (addr, l) = standin_server(sip);
    let peer = std::thread::spawn(move || {
        let mut p = accept(l);
        let (r, qp) = rdma(sip);
        let recv = 65536;
        let (qp, remote, _) = connect_as("write_lat", &mut p, &r, qp, sip, recv as u64);
        let write = |i: u64| {
            r.mr.write(size - 1, &[i as u8]).unwrap();
            qp.post_send(&SendWr::new(
                i,
                WrOpcode::RdmaWrite {
                    remote_addr: remote.addr,
                    rkey: remote.rkey,
                },
                vec![r.mr.sge(0, size as u32)],
            ))
            .unwrap();
        };
        let mut done = 0;
        let mut poll = |i: u64| {
            let t = std::time::Instant::now();
            while r.mr.byte(recv + size - 1).unwrap() != i as u8 {
                r.ctx.progress().unwrap();
                done += reap_writes(&r);
                assert!(
                    t.elapsed() < Duration::from_secs(20),
                    "WRITE {i} never came"
                );
            }
        };
        write(1);
        for i in 1..n {
            poll(i);
            write(i + 1);
        }
        poll(n);
        while done < n {
            r.ctx.progress().unwrap();
            done += reap_writes(&r);
        }
        r.mr.read(recv, size - 1).unwrap()
    });
    let rep = roce_client("write_lat", addr, cip, size, n);
    let landed = peer.join().unwrap();
    assert_eq!(rep.results[0].iterations, n);
    assert!(rep.results[0].latency_us.is_some());
    assert_eq!(
        landed,
        roce_perf::pattern(roce_perf::CLIENT_SEED, size)[..size - 1]
    );
}

/// send_lat.c's client against roce's server: the client SENDs first and
/// the server answers each; a sync before the size (receives posted), the
/// closing sync after.
#[test]
fn roce_serves_a_perftest_send_lat_client() {
    let (sip, cip) = (lo4(79), lo4(80));
    let (size, n) = (16usize, 100u64);
    let (addr, served) = roce_server("send_lat", sip, size, n);
    let mut p = dial(addr);
    let (r, qp) = rdma(cip);
    let (qp, _, mine) = connect_as("send_lat", &mut p, &r, qp, cip, 0);
    qp.post_recv(&recv_wr(&r, 65536, 4096)).unwrap();
    p.xchg(&mine); // receives posted
    r.mr.write(0, &[0x17; 16]).unwrap();
    for _ in 0..n {
        qp.post_send(&send_wr(&r, size)).unwrap();
        wait_for(&r, WcOpcode::Recv, 1);
        qp.post_recv(&recv_wr(&r, 65536, 4096)).unwrap();
    }
    p.xchg(&mine); // ctx_close_connection
    let summary = served.join().unwrap().unwrap().summary;
    assert!(summary.contains("; 100 SENDs received"), "{summary}");
    assert_eq!(
        r.mr.read(65536, size).unwrap(),
        roce_perf::pattern(roce_perf::SERVER_SEED, size)
    );
}

/// roce's send_lat client against send_lat.c's server.
#[test]
fn roce_client_runs_send_lat_against_a_perftest_server() {
    let (sip, cip) = (lo4(81), lo4(82));
    let (size, n) = (8usize, 80u64);
    let (addr, l) = standin_server(sip);
    let peer = std::thread::spawn(move || {
        let mut p = accept(l);
        let (r, qp) = rdma(sip);
        qp.post_recv(&recv_wr(&r, 65536, 4096)).unwrap();
        let (qp, _, mine) = connect_as("send_lat", &mut p, &r, qp, sip, 0);
        p.xchg(&mine); // receives posted
        for _ in 0..n {
            wait_for(&r, WcOpcode::Recv, 1);
            qp.post_recv(&recv_wr(&r, 65536, 4096)).unwrap();
            qp.post_send(&send_wr(&r, size)).unwrap();
        }
        p.xchg(&mine); // ctx_close_connection
        r.mr.read(65536, size).unwrap()
    });
    let rep = roce_client("send_lat", addr, cip, size, n);
    let landed = peer.join().unwrap();
    assert_eq!(rep.results[0].iterations, n);
    assert!(rep.results[0].latency_us.is_some());
    assert_eq!(landed, roce_perf::pattern(roce_perf::CLIENT_SEED, size));
}

/// read_lat.c's client against roce's server: the server is passive and
/// goes straight to ctx_close_connection after the sync after RTR; the
/// client READs, then syncs.
#[test]
fn roce_serves_a_perftest_read_lat_client() {
    let (sip, cip) = (lo4(83), lo4(84));
    let (addr, served) = roce_server("read_lat", sip, 256, 50);
    let mut p = dial(addr);
    let (r, qp) = rdma(cip);
    let (qp, remote, mine) = connect_as("read_lat", &mut p, &r, qp, cip, 0);
    for i in 0..50 {
        qp.post_send(&SendWr::new(
            i,
            WrOpcode::RdmaRead {
                remote_addr: remote.addr,
                rkey: remote.rkey,
            },
            vec![r.mr.sge(0, 256)],
        ))
        .unwrap();
        wait_for(&r, WcOpcode::RdmaRead, 1);
    }
    p.xchg(&mine); // ctx_close_connection
    served.join().unwrap().unwrap();
    assert_eq!(
        r.mr.read(0, 256).unwrap(),
        roce_perf::pattern(roce_perf::SERVER_SEED, 256)
    );
}

/// roce's read_lat client against read_lat.c's server, whose engine
/// answers the READs while its main waits in ctx_close_connection.
#[test]
fn roce_client_runs_read_lat_against_a_perftest_server() {
    let (sip, cip) = (lo4(85), lo4(86));
    let (addr, l) = standin_server(sip);
    let peer = std::thread::spawn(move || {
        let mut p = accept(l);
        let (r, qp) = rdma(sip);
        r.mr.write(0, &[0x99; 512]).unwrap();
        let _drive = r.ctx.spawn_progress(false);
        let (_qp, _, mine) = connect_as("read_lat", &mut p, &r, qp, sip, 0);
        p.xchg(&mine); // ctx_close_connection, at once
    });
    let rep = roce_client("read_lat", addr, cip, 512, 40);
    peer.join().unwrap();
    assert_eq!(rep.results[0].iterations, 40);
    assert!(rep.results[0].latency_us.is_some());
}

/// write_lat between two roce perf in perftest's order (the server
/// WRITEs first) past 256 iterations, where the count in the last byte
/// wraps as perftest's char does; every byte checked.
#[test]
fn roce_write_lat_wraps_its_count_as_perftest() {
    let mut o = Options::new("write_lat");
    o.udp_port = Some(0);
    o.iters = Some(600);
    o.size = Some(100);
    o.verify = true;
    let r = roce_perf::loopback(&o).unwrap();
    assert_eq!(r.verified(&o), Some(true), "{:?}", r.details);
    assert_eq!(r.results[0].iterations, 600);
}

/// A UD QP of a stand-in perftest peer (send_bw -c UD): perftest's Q_Key.
fn rdma_ud(ip: IpAddr) -> (Rdma, PreparedQp) {
    let ctx = Device::open_with(SocketAddr::new(ip, ROCE_PORT), Default::default())
        .expect("UDP 4791 on this test's own loopback address");
    let pd = ctx.alloc_pd().unwrap();
    let cq = ctx.create_cq(1024).unwrap();
    let mr = pd.reg_mr(1 << 17, Access::ALL).unwrap();
    let qp = pd
        .qp_builder(&cq)
        .qp_type(QpType::Ud)
        .qkey(0x1111_1111)
        .mtu(Mtu::Mtu1024)
        .max_recv_wr(512)
        .build()
        .unwrap();
    let r = Rdma {
        ctx,
        _pd: pd,
        cq,
        mr,
    };
    (r, qp)
}

/// send_bw.c -c UD both ways: the key messages carry the UD QPN (perftest's
/// ctx_connect makes an address handle from the GID), SENDs of one packet
/// go to that QPN with Q_Key 0x11111111, and each receive holds the 40-byte
/// GRH before the message.
#[test]
fn ud_send_bw_against_a_perftest_peer_both_ways() {
    // perftest server, roce client.
    let (sip, cip) = (lo4(87), lo4(88));
    let (addr, l) = standin_server(sip);
    let peer = std::thread::spawn(move || {
        let mut p = accept(l);
        let (r, qp) = rdma_ud(sip);
        let me = qp.endpoint();
        for _ in 0..400 {
            qp.post_recv(&recv_wr(&r, 65536, 1024 + 40)).unwrap();
        }
        let mine = key_msg(me.qpn, me.psn, 0, 0, sip);
        let (rqpn, ..) = parse_keys(&p.xchg(&mine));
        let _qp = qp.activate().unwrap();
        p.xchg(&mine); // sync after RTR
        p.xchg(&mine); // keys again
        p.xchg(&mine); // receives posted
        wait_for(&r, WcOpcode::Recv, 300);
        p.xchg(&mine); // ctx_close_connection
        (rqpn, r.mr.read(65536 + 40, 1024).unwrap())
    });
    let mut o = Options::new("send_bw");
    o.server = Some(addr.to_string());
    o.bind = Some(cip);
    o.mtu = Some(1024);
    o.size = Some(1024);
    o.iters = Some(300);
    o.connection = roce_perf::Connection::Ud;
    let rep = roce_perf::client(&o).unwrap();
    let (rqpn, landed) = peer.join().unwrap();
    assert_eq!(rqpn, rep.local[0].qpn);
    assert_eq!(rep.results[0].iterations, 300);
    assert_eq!(landed, roce_perf::pattern(roce_perf::CLIENT_SEED, 1024));

    // roce server, perftest client.
    let (sip, cip) = (lo4(89), lo4(90));
    let mut o = Options::new("send_bw");
    o.bind = Some(sip);
    o.port = 0;
    o.mtu = Some(1024);
    o.size = Some(512);
    o.connection = roce_perf::Connection::Ud;
    let server = Server::bind(&o).unwrap();
    let addr = server.local_addr().unwrap();
    let served = std::thread::spawn(move || server.serve());
    let mut p = dial(addr);
    let (r, qp) = rdma_ud(cip);
    let me = qp.endpoint();
    let mine = key_msg(me.qpn, me.psn, 0, 0, cip);
    let (rqpn, _, _, _, rip) = parse_keys(&p.xchg(&mine));
    let qp = qp.activate().unwrap();
    let ah = r._pd.create_ah(SocketAddr::new(rip, ROCE_PORT)).unwrap();
    p.xchg(&mine); // sync after RTR
    p.xchg(&mine); // keys again
    p.xchg(&mine); // the server posted its receives
    r.mr.write(0, &[0x5e; 512]).unwrap();
    for i in 0..200u64 {
        qp.post_send(
            &SendWr::new(i, WrOpcode::Send, vec![r.mr.sge(0, 512)]).to(ah.dest(rqpn, 0x1111_1111)),
        )
        .unwrap();
        wait_for(&r, WcOpcode::Send, 1);
    }
    p.xchg(&mine); // ctx_close_connection
    let summary = served.join().unwrap().unwrap().summary;
    assert!(summary.contains("; 200 SENDs received"), "{summary}");
}

/// perftest's `-x`: the entry of lo's GID table that is 127.0.0.1 (as
/// rxe's table lists the interface's addresses) is the GID both sides
/// announce and the address their engines open on.
#[test]
fn gid_index_chooses_the_entry_of_the_table() {
    let lo = roce_verbs::gid_table("lo");
    let x = lo
        .iter()
        .find(|e| e.ip() == lo4(1))
        .expect("lo holds 127.0.0.1")
        .index;
    let mut o = Options::new("write_bw");
    o.udp_port = Some(0);
    o.iters = Some(20);
    o.gid_index = Some(x);
    o.verify = true;
    let r = roce_perf::loopback(&o).unwrap();
    assert_eq!(r.verified(&o), Some(true));
    // Without -x the client is on 127.0.0.2; index x moved it to 127.0.0.1.
    assert_eq!((r.local[0].ip, r.remote[0].ip), (lo4(1), lo4(1)));
}
