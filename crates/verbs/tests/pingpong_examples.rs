//! The `rc_pingpong` and `ud_pingpong` examples run against each other as
//! two processes over loopback, as a user runs rdma-core's tools: server
//! first, then the client naming it. `cargo test` builds the examples before
//! it runs this file; a missing example binary fails the test (it never
//! skips).

mod prereq;

use std::net::{TcpListener, UdpSocket};
use std::path::PathBuf;
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

/// The example binary next to this test's: `target/<profile>/examples/<name>`.
fn example(name: &str) -> PathBuf {
    let exe = std::env::current_exe().expect("the test binary's path");
    // target/<profile>/deps/<test> → target/<profile>/examples/<name>
    let dir = exe
        .parent()
        .and_then(|deps| deps.parent())
        .expect("the test binary lives in target/<profile>/deps");
    let p = dir.join("examples").join(name);
    assert!(
        p.is_file(),
        "example binary {} is missing: run `cargo test -p roce-verbs` (which builds the examples) \
         or `cargo build -p roce-verbs --examples` first",
        p.display()
    );
    p
}

fn free_tcp_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free TCP port")
        .port()
}

/// A UDP port free on both addresses (each test has its own pair of
/// loopback addresses, so parallel tests cannot take each other's).
fn free_udp_port(a: &str, b: &str) -> u16 {
    for _ in 0..50 {
        let s = UdpSocket::bind(format!("{a}:0")).expect("bind UDP");
        let port = s.local_addr().expect("local addr").port();
        if UdpSocket::bind(format!("{b}:{port}")).is_ok() {
            return port;
        }
    }
    panic!("no UDP port free on both {a} and {b}");
}

fn spawn(name: &str, args: &[String]) -> Child {
    Command::new(example(name))
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("starting {name}: {e}"))
}

/// Waits for `c` (killing it after 90 s: the examples give up after 20 s
/// without a completion, so this only catches a hang in the exchange).
fn finish(mut c: Child, what: &str) -> Output {
    let start = Instant::now();
    loop {
        match c.try_wait().expect("try_wait") {
            Some(_) => return c.wait_with_output().expect("output"),
            None if start.elapsed() > Duration::from_secs(90) => {
                let _ = c.kill();
                let out = c.wait_with_output().expect("output");
                panic!(
                    "{what} hung; stdout:\n{}\nstderr:\n{}",
                    String::from_utf8_lossy(&out.stdout),
                    String::from_utf8_lossy(&out.stderr)
                );
            }
            None => std::thread::sleep(Duration::from_millis(20)),
        }
    }
}

struct Run {
    server: String,
    client: String,
}

/// Runs `name` as server on `a` and client on `b`; both must succeed.
fn run_pair(name: &str, a: &str, b: &str, extra: &[&str]) -> Run {
    let tcp = free_tcp_port().to_string();
    let udp = free_udp_port(a, b).to_string();
    let mut common: Vec<String> = vec!["-p".into(), tcp, "--udp-port".into(), udp];
    common.extend(extra.iter().map(|s| s.to_string()));
    let (s, c) = run_raw(name, a, b, &common);
    let text = |o: &Output, who: &str| {
        let out = String::from_utf8_lossy(&o.stdout).into_owned();
        assert!(
            o.status.success(),
            "{name} {who} failed ({}):\nstdout:\n{out}\nstderr:\n{}",
            o.status,
            String::from_utf8_lossy(&o.stderr)
        );
        out
    };
    Run {
        server: text(&s, "server"),
        client: text(&c, "client"),
    }
}

/// Runs `name` as server with device `a` and as client with device `b`
/// towards `a`; returns both outputs, whatever their status.
fn run_raw(name: &str, a: &str, b: &str, common: &[String]) -> (Output, Output) {
    let mut sargs = common.to_vec();
    sargs.extend(["-d".into(), a.into()]);
    let mut cargs = common.to_vec();
    cargs.extend(["-d".into(), b.into(), a.into()]);
    let server = spawn(name, &sargs);
    let client = spawn(name, &cargs);
    let c = finish(client, "client");
    let s = finish(server, "server");
    (s, c)
}

/// The QPN and PSN of a `local address:`/`remote address:` line.
fn qpn_psn(line: &str) -> (String, String) {
    let field = |key: &str| {
        let i = line
            .find(key)
            .unwrap_or_else(|| panic!("{key} in {line:?}"))
            + key.len();
        line[i..i + 6].to_string()
    };
    (field("QPN 0x"), field("PSN 0x"))
}

/// Checks the four lines rdma-core's examples print, and that each side's
/// remote line is the other's local one.
fn check_output(r: &Run, local_sep: &str, a: &str, b: &str, size: u64, iters: u64) {
    let s: Vec<&str> = r.server.lines().collect();
    let c: Vec<&str> = r.client.lines().collect();
    assert_eq!(s.len(), 4, "server printed:\n{}", r.server);
    assert_eq!(c.len(), 4, "client printed:\n{}", r.client);
    // The GID as inet_ntop prints it: IPv4-mapped, or the IPv6 address.
    let gid = |ip: &str| roce_verbs::Gid::from_ip(ip.parse().expect("an IP address")).to_string();
    for (lines, me, peer) in [(&s, a, b), (&c, b, a)] {
        assert!(
            lines[0].starts_with("  local address:  LID 0x0000, QPN 0x")
                && lines[0].ends_with(&format!("{local_sep} GID {}", gid(me))),
            "{}",
            lines[0]
        );
        assert!(
            lines[1].starts_with("  remote address: LID 0x0000, QPN 0x")
                && lines[1].ends_with(&format!(", GID {}", gid(peer))),
            "{}",
            lines[1]
        );
        let bytes = format!("{} bytes in ", size * iters * 2);
        assert!(
            lines[2].starts_with(&bytes) && lines[2].ends_with(" Mbit/sec"),
            "{}",
            lines[2]
        );
        assert!(
            lines[3].starts_with(&format!("{iters} iters in ")) && lines[3].ends_with(" usec/iter"),
            "{}",
            lines[3]
        );
    }
    assert_eq!(qpn_psn(s[0]), qpn_psn(c[1]));
    assert_eq!(qpn_psn(c[0]), qpn_psn(s[1]));
}

#[test]
fn rc_pingpong_server_and_client_exchange_and_check_every_message() {
    let (a, b) = ("127.0.31.1", "127.0.31.2");
    // 3000 bytes at MTU 1024: three packets a message; -c checks each byte.
    let r = run_pair("rc_pingpong", a, b, &["-n", "200", "-s", "3000", "-c"]);
    check_output(&r, ",", a, b, 3000, 200);
}

#[test]
fn rc_pingpong_sleeps_on_events_with_small_inline_messages() {
    let (a, b) = ("127.0.32.1", "127.0.32.2");
    let r = run_pair(
        "rc_pingpong",
        a,
        b,
        &["-e", "-n", "100", "-s", "32", "-m", "4096", "-r", "8", "-c"],
    );
    check_output(&r, ",", a, b, 32, 100);
}

#[test]
fn ud_pingpong_server_and_client_exchange_and_check_every_message() {
    let (a, b) = ("127.0.33.1", "127.0.33.2");
    let r = run_pair("ud_pingpong", a, b, &["-n", "200", "-s", "1024", "-c"]);
    // rdma-core's ud_pingpong prints "PSN 0x…: GID" on its local line.
    check_output(&r, ":", a, b, 1024, 200);
}

/// Runs an example that must refuse its options; returns its stderr.
fn refused(name: &str, args: &[&str]) -> String {
    let out = Command::new(example(name))
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("starting {name}: {e}"));
    assert!(!out.status.success(), "{name} {args:?} succeeded");
    String::from_utf8_lossy(&out.stderr).into_owned()
}

#[test]
fn bad_options_are_one_clear_error() {
    let udp = free_udp_port("127.0.34.1", "127.0.34.2").to_string();
    let base = ["-d", "127.0.34.1", "--udp-port", &udp];
    let with = |more: &[&'static str]| -> Vec<&str> {
        let mut v = base.to_vec();
        v.extend_from_slice(more);
        v
    };
    // UD cannot segment: a message above lo's 4096-byte port MTU.
    let e = refused("ud_pingpong", &with(&["-s", "8192"]));
    assert!(
        e.contains("Requested size larger than port MTU (4096)"),
        "{e}"
    );
    let e = refused("rc_pingpong", &with(&["-m", "1000"]));
    assert!(
        e.contains("path MTU is 256, 512, 1024, 2048 or 4096"),
        "{e}"
    );
    let e = refused("rc_pingpong", &with(&["-g", "3"]));
    assert!(
        e.contains("can't read sgid of index 3: this device is one IP address, whose GID is index 0; the GID table of lo holds"),
        "{e}"
    );
    // The help agrees with what --list-gids shows (an interface's table
    // may hold several entries; a device here is one of them).
    for name in ["rc_pingpong", "ud_pingpong"] {
        let out = Command::new(example(name)).arg("--help").output().unwrap();
        let help = String::from_utf8_lossy(&out.stdout);
        assert!(!help.contains("has one GID"), "{help}");
        assert!(help.contains("roce perf --list-gids"), "{help}");
        assert!(help.contains("are devices of their own"), "{help}");
    }
    let e = refused("rc_pingpong", &with(&["-i", "2"]));
    assert!(e.contains("one port"), "{e}");
    // The device's UDP port is taken: said, not hidden.
    let busy = UdpSocket::bind(format!("127.0.34.1:{udp}")).expect("bind");
    let e = refused("rc_pingpong", &base);
    assert!(e.contains("already in use"), "{e}");
    drop(busy);
}

/// Both examples over IPv6 between two addresses on `lo` (root adds them;
/// as root this runs and fails loudly if it cannot), and an IPv4 client
/// facing an IPv6 server: the server refuses with the family error.
#[test]
fn pingpongs_over_ipv6_and_a_family_mismatch() {
    const TEST: &str = "pingpongs_over_ipv6_and_a_family_mismatch";
    if !prereq::root(
        TEST,
        "adding fd7c:e5d1:9a02::31:1 and fd7c:e5d1:9a02::31:2 to lo",
    ) || !prereq::tool(TEST, &["ip", "-V"], "apt-get install iproute2")
    {
        return;
    }
    let (a, b) = ("fd7c:e5d1:9a02::31:1", "fd7c:e5d1:9a02::31:2");
    let _a = prereq::LoIpv6::add(a);
    let _b = prereq::LoIpv6::add(b);
    let r = run_pair("rc_pingpong", a, b, &["-n", "50", "-s", "2000", "-c"]);
    check_output(&r, ",", a, b, 2000, 50);
    let r = run_pair("ud_pingpong", a, b, &["-n", "50", "-s", "1000", "-c"]);
    check_output(&r, ":", a, b, 1000, 50);

    let common: Vec<String> = vec![
        "-p".into(),
        free_tcp_port().to_string(),
        "--udp-port".into(),
        free_udp_port("127.0.35.1", "127.0.35.2").to_string(),
        "-n".into(),
        "5".into(),
    ];
    let (s, c) = run_raw("rc_pingpong", a, "127.0.35.2", &common);
    let err = String::from_utf8_lossy(&s.stderr);
    assert!(!s.status.success() && !c.status.success());
    assert!(err.contains("different IP families"), "server said: {err}");
}
