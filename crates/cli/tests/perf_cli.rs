//! `roce perf`, run as the built binary: every test in one process over
//! loopback, every opcode between two processes, faults, clear errors, and
//! two hosts in two network namespaces joined by a veth pair.

use serde_json::Value;
use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Output, Stdio};
use std::time::Duration;

#[path = "../../verbs/tests/prereq/mod.rs"]
mod prereq;

const ROCE: &str = env!("CARGO_BIN_EXE_roce");

fn roce(args: &[&str]) -> Output {
    Command::new(ROCE).args(args).output().expect("run roce")
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

fn json_ok(o: &Output) -> Value {
    assert!(
        o.status.success(),
        "roce failed: {:?}\nstdout: {}\nstderr: {}",
        o.status,
        text(&o.stdout),
        text(&o.stderr)
    );
    let v: Value = serde_json::from_slice(&o.stdout)
        .unwrap_or_else(|e| panic!("not JSON ({e}): {}", text(&o.stdout)));
    assert_eq!(v["verified"], Value::Bool(true), "{v}");
    v
}

/// A TCP port nobody listens on right now.
fn free_port() -> u16 {
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    l.local_addr().unwrap().port()
}

/// A UDP port free on both ends of `--loopback` (127.0.0.1 for the server,
/// 127.0.0.2 for the client), for a test that must know the port: this
/// test's own, so tests running in parallel never meet on 4791.
fn free_loopback_udp_port() -> u16 {
    for _ in 0..100 {
        let a = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
        let port = a.local_addr().unwrap().port();
        if std::net::UdpSocket::bind(("127.0.0.2", port)).is_ok() {
            return port;
        }
    }
    panic!("no UDP port free on both 127.0.0.1 and 127.0.0.2");
}

#[test]
fn every_test_runs_in_loopback_with_verified_data() {
    for (t, size) in [
        ("send_bw", "3000"),
        ("write_bw", "5000"),
        ("read_bw", "5000"),
        ("atomic_bw", "8"),
        ("send_lat", "100"),
        ("write_lat", "100"),
        ("read_lat", "100"),
        ("atomic_lat", "8"),
    ] {
        let o = roce(&[
            "perf",
            t,
            "--loopback",
            "-n",
            "200",
            "-s",
            size,
            "--udp-port",
            "0",
            "--verify",
            "--json",
        ]);
        let v = json_ok(&o);
        assert_eq!(v["test"], t);
        assert_eq!(v["iterations"].as_u64(), Some(200), "{t}: {v}");
        assert!(v["seconds"].as_f64().unwrap() > 0.0);
        if t.ends_with("_bw") {
            assert!(v["bw_gbps"].as_f64().unwrap() > 0.0, "{v}");
            assert!(v["msg_rate_mpps"].as_f64().unwrap() > 0.0);
        } else {
            let l = &v["latency_us"];
            for k in ["min", "max", "typical", "avg", "stdev", "p99", "p999"] {
                assert!(l[k].as_f64().is_some(), "{t}: latency_us.{k} in {v}");
            }
            assert!(l["min"].as_f64() <= l["p99"].as_f64());
        }
        let c = &v["counters"];
        assert!(c["tx_packets"].as_u64().unwrap() > 0);
        assert_eq!(c["icrc_errors"].as_u64(), Some(0));
    }
}

#[test]
fn human_output_follows_perftests_tables() {
    let o = roce(&[
        "perf",
        "write_bw",
        "--loopback",
        "-n",
        "50",
        "-s",
        "1024",
        "--udp-port",
        "0",
    ]);
    assert!(o.status.success(), "{}", text(&o.stderr));
    let s = text(&o.stdout);
    assert!(
        s.contains(
            "#bytes     #iterations    BW peak[MiB/sec]    BW average[MiB/sec]   MsgRate[Mpps]"
        ),
        "{s}"
    );
    assert!(
        s.contains("RDMA_Write BW Test") && s.contains(" 1024 "),
        "{s}"
    );
    let o = roce(&[
        "perf",
        "read_lat",
        "--loopback",
        "-n",
        "50",
        "--udp-port",
        "0",
    ]);
    assert!(o.status.success(), "{}", text(&o.stderr));
    let s = text(&o.stdout);
    assert!(
        s.contains("t_min[usec]") && s.contains("99.9% percentile[usec]"),
        "{s}"
    );
}

#[test]
fn sizes_qps_and_duration() {
    let o = roce(&[
        "perf",
        "write_bw",
        "--loopback",
        "-q",
        "3",
        "-t",
        "16",
        "--cq-mod",
        "4",
        "-D",
        "0.2",
        "-s",
        "512",
        "-I",
        "1024",
        "--udp-port",
        "0",
        "--verify",
        "--json",
    ]);
    let v = json_ok(&o);
    assert_eq!(v["qps"].as_u64(), Some(3));
    assert!(v["iterations"].as_u64().unwrap() > 0);
    // -a with a few iterations: every size from 2 bytes up, here capped by a short run.
    let o = roce(&[
        "perf",
        "send_bw",
        "--loopback",
        "-a",
        "-n",
        "3",
        "--udp-port",
        "0",
        "--verify",
        "--json",
    ]);
    let v = json_ok(&o);
    let sizes: Vec<u64> = v["sizes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_u64().unwrap())
        .collect();
    assert_eq!(sizes.first(), Some(&2));
    assert_eq!(sizes.last(), Some(&(8 << 20)));
    assert_eq!(v["results"].as_array().unwrap().len(), 23);
}

#[test]
fn faults_are_survived_and_counted() {
    let o = roce(&[
        "perf",
        "write_bw",
        "--loopback",
        "-n",
        "300",
        "-s",
        "4096",
        "--udp-port",
        "0",
        "--loss",
        "0.05",
        "--reorder",
        "0.02",
        "--dup",
        "0.02",
        "--corrupt",
        "0.02",
        "--seed",
        "7",
        "--verify",
        "--json",
    ]);
    let v = json_ok(&o);
    let c = &v["counters"];
    assert!(c["faults"]["lost"].as_u64().unwrap() > 0, "{v}");
    assert!(c["retransmissions"].as_u64().unwrap() > 0, "{v}");
    // Corruption from the client is caught by the server's ICRC check.
    assert!(
        v["server_counters"]["icrc_errors"].as_u64().unwrap() > 0,
        "{v}"
    );
}

#[test]
fn capture_of_a_loopback_run_decodes() {
    let dir = tempfile::tempdir().unwrap();
    let cap = dir.path().join("perf.pcap");
    // A UDP port of this test's own (4791 may be taken by a parallel test,
    // and a fallback port would not be known here), decoded as RoCEv2 the
    // way Wireshark's "Decode As" does.
    let udp = free_loopback_udp_port().to_string();
    let o = roce(&[
        "perf",
        "read_bw",
        "--loopback",
        "-n",
        "20",
        "-s",
        "3000",
        "-m",
        "1024",
        "--udp-port",
        &udp,
        "--pcap",
        cap.to_str().unwrap(),
        "--json",
        "--verify",
    ]);
    json_ok(&o);
    let o = roce(&[
        "pcap",
        "decode",
        cap.to_str().unwrap(),
        "--udp-port",
        &udp,
        "--json",
    ]);
    assert!(o.status.success(), "{}", text(&o.stderr));
    let lines: Vec<Value> = text(&o.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    // 20 READ requests and 3 responses each (MTU 1024).
    assert!(lines.len() >= 80, "{} frames", lines.len());
    for l in &lines {
        assert!(l.get("error").is_none(), "every frame decodes: {l}");
        assert_eq!(l["icrc"]["ok"], Value::Bool(true), "{l}");
    }
}

/// Spawns a server and waits until it listens.
fn spawn_server(args: &[&str], wrap: &[&str]) -> Child {
    let mut cmd = if wrap.is_empty() {
        Command::new(ROCE)
    } else {
        let mut c = Command::new(wrap[0]);
        c.args(&wrap[1..]).arg(ROCE);
        c
    };
    let mut child = cmd
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn server");
    let mut err = BufReader::new(child.stderr.take().unwrap());
    let mut line = String::new();
    err.read_line(&mut line).unwrap();
    assert!(line.contains("waiting for a client"), "server said: {line}");
    // Keep draining stderr so the server never blocks on it.
    std::thread::spawn(move || {
        let mut rest = String::new();
        while err.read_line(&mut rest).unwrap_or(0) > 0 {}
    });
    child
}

fn wait_exit(mut c: Child) -> std::process::ExitStatus {
    for _ in 0..3000 {
        if let Some(s) = c.try_wait().unwrap() {
            return s;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    let _ = c.kill();
    panic!("server did not exit");
}

#[test]
fn every_opcode_between_two_processes() {
    for (t, size) in [
        ("send_bw", "2500"),
        ("write_bw", "2500"),
        ("read_bw", "2500"),
        ("atomic_bw", "8"),
        ("write_lat", "64"),
        ("send_lat", "64"),
    ] {
        let port = free_port().to_string();
        let server = spawn_server(
            &[
                "perf",
                t,
                "-p",
                &port,
                "--bind",
                "127.0.0.1",
                "--udp-port",
                "0",
                "--verify",
            ],
            &[],
        );
        let o = roce(&[
            "perf",
            t,
            "127.0.0.1",
            "-p",
            &port,
            "-n",
            "100",
            "-s",
            size,
            "--udp-port",
            "0",
            "--verify",
            "--json",
        ]);
        json_ok(&o);
        assert!(wait_exit(server).success(), "{t}: server failed");
    }
}

#[test]
fn mismatched_mtu_and_unreachable_server_fail_clearly() {
    let port = free_port().to_string();
    let server = spawn_server(
        &[
            "perf",
            "write_bw",
            "-p",
            &port,
            "--udp-port",
            "0",
            "-m",
            "1024",
        ],
        &[],
    );
    let o = roce(&[
        "perf",
        "write_bw",
        "127.0.0.1",
        "-p",
        &port,
        "--udp-port",
        "0",
        "-m",
        "4096",
    ]);
    assert!(!o.status.success());
    let e = text(&o.stderr);
    assert!(e.contains("MTU mismatch") && e.contains("-m/--mtu"), "{e}");
    assert!(!wait_exit(server).success());

    let port = free_port().to_string();
    let o = roce(&["perf", "write_bw", "127.0.0.1", "-p", &port]);
    assert!(!o.status.success());
    let e = text(&o.stderr);
    assert!(e.contains("connection refused"), "{e}");
    assert_eq!(e.lines().count(), 1, "one clear line: {e}");

    let o = roce(&["perf", "write_sideways", "--loopback"]);
    assert!(!o.status.success());
    assert!(text(&o.stderr).contains("unknown test"));
}

/// Runs `ip` with arguments; false when it fails.
fn ip(args: &[&str]) -> bool {
    Command::new("ip")
        .args(args)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// Deletes the namespaces when the test ends, however it ends.
struct Netns(Vec<String>);

impl Drop for Netns {
    fn drop(&mut self) {
        for n in &self.0 {
            ip(&["netns", "del", n]);
        }
    }
}

#[test]
fn two_hosts_in_two_namespaces_over_veth() {
    const TEST: &str = "two_hosts_in_two_namespaces_over_veth";
    if !prereq::root(TEST, "creating network namespaces")
        || !prereq::tool(TEST, &["ip", "-V"], "apt-get install iproute2")
    {
        return;
    }
    let tag = std::process::id();
    let (a, b) = (format!("roceA{tag}"), format!("roceB{tag}"));
    let ns = Netns(vec![a.clone(), b.clone()]);
    let (va, vb) = (
        format!("rva{}", tag % 100_000),
        format!("rvb{}", tag % 100_000),
    );
    let steps: Vec<Vec<&str>> = vec![
        vec!["netns", "add", &a],
        vec!["netns", "add", &b],
        vec![
            "link", "add", &va, "netns", &a, "type", "veth", "peer", "name", &vb, "netns", &b,
        ],
        vec!["-n", &a, "addr", "add", "10.99.0.1/24", "dev", &va],
        vec!["-n", &b, "addr", "add", "10.99.0.2/24", "dev", &vb],
        vec!["-n", &a, "link", "set", &va, "up"],
        vec!["-n", &b, "link", "set", &vb, "up"],
        vec!["-n", &a, "link", "set", "lo", "up"],
        vec!["-n", &b, "link", "set", "lo", "up"],
    ];
    for s in &steps {
        if !ip(s) {
            prereq::missing(
                TEST,
                &format!("`ip {}` failed (no namespace support here?)", s.join(" ")),
            );
            return;
        }
    }
    // The server is host A (10.99.0.1), the client host B; RoCE uses UDP 4791 on both.
    let server = spawn_server(
        &["perf", "write_bw", "--bind", "10.99.0.1", "--verify"],
        &["ip", "netns", "exec", &a],
    );
    let o = Command::new("ip")
        .args(["netns", "exec", &b, ROCE])
        .args([
            "perf",
            "write_bw",
            "10.99.0.1",
            "-n",
            "200",
            "-s",
            "8192",
            "--verify",
            "--json",
        ])
        .output()
        .unwrap();
    let v = json_ok(&o);
    assert_eq!(v["counters"]["icrc_errors"].as_u64(), Some(0), "{v}");
    assert!(wait_exit(server).success());
    drop(ns);
    assert!(!ip(&["netns", "pids", &a]), "namespace {a} still exists");
}

/// The ICRC must be right for the IP header the kernel really emits (IP ID
/// 0 from an unconnected socket with DF set; segment `k` of a UDP GSO send
/// gets ID `k`): capture loopback with the kernel's own capture tool and
/// check every frame. lo shows a GSO send as one frame; it is cut where the
/// run's own capture says its datagrams end, with the IDs the kernel gives
/// the pieces, and every piece is checked.
#[test]
fn kernel_capture_shows_valid_icrcs() {
    const TEST: &str = "kernel_capture_shows_valid_icrcs";
    if !prereq::root(TEST, "capturing on lo") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("lo.pcapng");
    let own = dir.path().join("own.pcap");
    let udp = free_loopback_udp_port();
    let Some(cap) = prereq::Capture::start(TEST, "lo", &format!("udp port {udp}"), &file) else {
        return;
    };
    let port = udp.to_string();
    let mut outs = Vec::new();
    for (test, size) in [("read_bw", "3000"), ("write_bw", "65536")] {
        outs.push(roce(&[
            "perf",
            test,
            "--loopback",
            "-n",
            "10",
            "-s",
            size,
            "--udp-port",
            &port,
            "--pcap",
            own.with_extension(test).to_str().unwrap(),
            "--json",
        ]));
    }
    let bytes = cap.stop(
        "127.0.0.3:0".parse().unwrap(),
        format!("127.0.0.1:{udp}").parse().unwrap(),
    );
    for o in &outs {
        assert!(o.status.success(), "{}", text(&o.stderr));
    }
    // Where each datagram ends, from the runs' own captures: UDP payload
    // length by source (IP, port) and first bytes.
    let key = |f: &[u8]| {
        (
            f[26..30].to_vec(),
            f[34..36].to_vec(),
            f[42..f.len().min(58)].to_vec(),
        )
    };
    let mut lens = std::collections::HashMap::new();
    for test in ["read_bw", "write_bw"] {
        let b = std::fs::read(own.with_extension(test)).unwrap();
        for f in roce_wire::pcap::read_capture(&b).unwrap().frames {
            lens.insert(key(&f.data), f.data.len() - 42);
        }
    }
    // Off port 4791 the decoder does not take the frames as RoCEv2, so check
    // the ICRC here from the kernel's bytes.
    let icrc_ok = |d: &[u8]| {
        let ip = &d[14..34];
        let udp_len = usize::from(u16::from_be_bytes([d[38], d[39]]));
        let udp_bytes = &d[34..34 + udp_len];
        let want = roce_wire::icrc::compute(ip, &udp_bytes[..udp_len - 4]);
        udp_bytes[udp_len - 4..] == want.to_le_bytes()
    };
    let capture = roce_wire::pcap::read_capture(&bytes).unwrap();
    assert!(
        capture.frames.len() > 1,
        "dumpcap captured nothing but the end marker"
    );
    let (mut single, mut gso) = (0, 0);
    for f in &capture.frames {
        let d = &f.data;
        if prereq::is_marker(d) {
            continue; // the capture's own end marker
        }
        if d[26..30] == d[30..34] && d[34..36] == d[36..38] {
            continue; // an engine's GSO probe, sent to itself at open (not RoCE)
        }
        assert_eq!(&d[18..20], &[0, 0], "IP ID is 0");
        assert_eq!(d[20] & 0x40, 0x40, "DF is set");
        // Data, responses and ACKs all leave with perf's DSCP 26 and
        // ECT(0): at first by a control message each, then as the socket's
        // own TOS once it has taken theirs.
        assert_eq!(d[15], (26 << 2) | 2, "TOS as the kernel sent it");
        if icrc_ok(d) {
            single += 1;
            continue;
        }
        let seg = *lens
            .get(&key(d))
            .expect("a frame with a bad ICRC that starts no datagram the engines sent");
        let pieces = roce_verbs::packet::gso_segments(d, seg).unwrap();
        assert!(pieces.len() > 1, "a single datagram with a bad ICRC");
        for (k, p) in pieces.iter().enumerate() {
            assert_eq!(u16::from_be_bytes([p[18], p[19]]), k as u16);
            assert!(icrc_ok(p), "GSO segment {k}: ICRC");
        }
        gso += 1;
    }
    assert!(single + gso > 0);
    eprintln!("kernel capture: {single} single datagrams, {gso} GSO sends, all ICRCs valid");
}

/// Without -m both sides use the port's active MTU, which comes from the
/// interface's IP MTU as in rxe: on loopback (65536 by default) that is
/// 4096.
#[test]
fn default_mtu_is_the_active_mtu_of_the_interface() {
    let Some(lo) = std::fs::read_to_string("/sys/class/net/lo/mtu")
        .ok()
        .and_then(|s| s.trim().parse::<u32>().ok())
    else {
        eprintln!("SKIP default_mtu_is_the_active_mtu_of_the_interface: no /sys/class/net/lo/mtu");
        return;
    };
    let want = [4096u32, 2048, 1024, 512]
        .into_iter()
        .find(|m| m + 67 <= lo)
        .unwrap_or(256);
    let o = roce(&[
        "perf",
        "write_bw",
        "--loopback",
        "-n",
        "10",
        "-s",
        "8192",
        "--udp-port",
        "0",
        "--json",
        "--verify",
    ]);
    let v = json_ok(&o);
    assert_eq!(v["mtu"], Value::from(want), "{v}");
}

/// `--baseline` runs the kernel's own figure beside the test: a TCP stream
/// for a bandwidth test, a UDP ping-pong (and its RC-shaped twin for WRITE
/// and SEND) for a latency test, with roce's ratio to it; READ is compared
/// with a whole round trip. It needs `--loopback`.
#[test]
fn baseline_runs_beside_the_test_and_gives_the_ratio() {
    let run = |test: &str, size: &str, n: &str| {
        json_ok(&roce(&[
            "perf",
            test,
            "--loopback",
            "-s",
            size,
            "-n",
            n,
            "--udp-port",
            "0",
            "--verify",
            "--json",
            "--baseline",
        ]))
    };
    let v = run("write_lat", "8", "300");
    let b = &v["baseline"];
    assert_eq!(b["kind"], "udp_pingpong", "{v}");
    let udp = b["udp_typical_us"].as_f64().unwrap();
    let shaped = b["rc_shaped_typical_us"].as_f64().unwrap();
    let roce_us = v["latency_us"]["typical"].as_f64().unwrap();
    assert!(udp > 0.0 && shaped > 0.0, "{v}");
    assert!(
        (b["ratio"].as_f64().unwrap() - roce_us / udp).abs() < 1e-9,
        "{v}"
    );

    let v = run("read_lat", "8", "300");
    assert!(
        v["baseline"]["udp_typical_us"].as_f64().unwrap() > 0.0,
        "{v}"
    );
    assert!(v["baseline"].get("rc_shaped_typical_us").is_none(), "{v}");

    let v = run("write_bw", "65536", "200");
    let b = &v["baseline"];
    assert_eq!(b["kind"], "tcp_stream", "{v}");
    let tcp = b["tcp_gbps"].as_f64().unwrap();
    assert!(tcp > 0.0, "{v}");
    assert!((b["ratio"].as_f64().unwrap() - v["bw_gbps"].as_f64().unwrap() / tcp).abs() < 1e-9);
    // Beside it the kernel-only ceiling in the engine's shape: full 4 KiB
    // WRITE packets (4096 + BTH + ICRC) as UDP GSO sends into GRO.
    assert!(b["udp_gso_gbps"].as_f64().unwrap() > 0.0, "{v}");
    assert_eq!(b["udp_gso_datagram"], 4112, "{v}");

    // No UDP datagram holds a 128 KiB message: the test runs, with no baseline.
    let v = run("write_lat", "131072", "20");
    assert!(v.get("baseline").is_none(), "{v}");

    let o = roce(&["perf", "write_lat", "--baseline", "127.0.0.1"]);
    assert!(!o.status.success());
    assert!(
        text(&o.stderr).contains("--loopback"),
        "{}",
        text(&o.stderr)
    );
}

/// `--json` reports where each side's engine spent the run, per stage, and
/// `--analyze` adds the analyst-shaped table: `stages` with `name`,
/// `capacity_gbps`, `capacity_mpps`, `demand_gbps`, `utilisation`,
/// `metric`, then `binding` (the largest working stage) and `reason`,
/// beside the kernel's baseline. `--no-profile` turns the accounting off.
#[test]
fn json_reports_stage_profiles_and_analyze_names_the_binding_stage() {
    const STAGES: [&str; 7] = [
        "rx_syscall",
        "icrc",
        "rnic",
        "copy",
        "tx_syscall",
        "completion",
        "idle",
    ];
    let base = [
        "perf",
        "write_bw",
        "--loopback",
        "-s",
        "65536",
        "-n",
        "300",
        "--udp-port",
        "0",
        "--verify",
        "--json",
    ];
    let v = json_ok(&roce(&base));
    let p = &v["profile"];
    for side in ["client", "server"] {
        let s = &p[side];
        assert_eq!(s["enabled"], Value::Bool(true), "{v}");
        let sum: u64 = STAGES.iter().map(|k| s[k]["ns"].as_u64().unwrap()).sum();
        assert_eq!(s["engine_ns"].as_u64(), Some(sum), "{s}");
        assert!(sum <= s["wall_ns"].as_u64().unwrap(), "{s}");
        // Each side's thread took its own snapshots: its CPU time is known.
        assert!(s["thread_cpu_ns"].as_u64().unwrap() > 0, "{s}");
    }
    // The server placed every byte the client wrote (300 × 64 KiB).
    assert_eq!(p["server"]["copy"]["events"], 300 * 65536, "{p}");
    assert!(p["client"]["tx_syscall"]["ns"].as_u64().unwrap() > 0, "{p}");
    assert!(v.get("analysis").is_none(), "only with --analyze: {v}");

    let mut args = base.to_vec();
    args.push("--analyze");
    let v = json_ok(&roce(&args));
    let a = &v["analysis"];
    let rows = a["stages"].as_array().unwrap();
    assert_eq!(rows.len(), 14, "seven stages on each side: {a}");
    let demand = v["bw_gbps"].as_f64().unwrap();
    let mut largest: Option<(&str, f64)> = None;
    for r in rows {
        for k in ["name", "demand_gbps", "utilisation", "metric"] {
            assert!(r.get(k).is_some(), "{k} missing in {r}");
        }
        assert!(r.get("capacity_gbps").is_some() && r.get("capacity_mpps").is_some());
        assert!((r["demand_gbps"].as_f64().unwrap() - demand).abs() < 1e-9);
        let name = r["name"].as_str().unwrap();
        if let Some(c) = r["capacity_gbps"].as_f64() {
            // utilisation = demand / capacity.
            let u = r["utilisation"].as_f64().unwrap();
            assert!((u - demand / c).abs() <= 1e-9 * u.max(1.0), "{r}");
            let per_msg = r["ns_per_message"].as_f64().unwrap();
            if largest.is_none_or(|(_, m)| per_msg > m) {
                largest = Some((name, per_msg));
            }
        } else {
            assert!(name.ends_with(".idle") || r["ns_per_message"] == 0.0, "{r}");
        }
    }
    assert_eq!(a["binding"].as_str(), largest.map(|l| l.0), "{a}");
    let reason = a["reason"].as_str().unwrap();
    assert!(
        reason.contains(&format!("{} takes", a["binding"].as_str().unwrap())),
        "{reason}"
    );
    // Beside the kernel's own figure, which --analyze runs on loopback.
    assert_eq!(a["kernel"]["kind"], "tcp_stream", "{a}");
    assert!(a["kernel"]["gbps"].as_f64().unwrap() > 0.0);
    assert!(reason.contains("TCP stream"), "{reason}");

    let mut args = base.to_vec();
    args.push("--no-profile");
    let v = json_ok(&roce(&args));
    assert!(v.get("profile").is_none(), "{v}");

    // The table in text, the binding stage marked.
    let o = roce(&[
        "perf",
        "write_bw",
        "--loopback",
        "-s",
        "65536",
        "-n",
        "200",
        "--udp-port",
        "0",
        "--analyze",
    ]);
    assert!(o.status.success(), "{}", text(&o.stderr));
    let out = text(&o.stdout);
    assert!(out.contains(" binding: "), "{out}");
    assert!(out.lines().any(|l| l.starts_with('*')), "{out}");
    assert!(out.contains("kernel TCP stream"), "{out}");
}

#[test]
fn cc_dcqcn_cuts_on_ce_marks_and_json_says_so() {
    let o = roce(&[
        "perf",
        "write_bw",
        "--loopback",
        "-n",
        "400",
        "-s",
        "65536",
        "--udp-port",
        "0",
        "--cc",
        "dcqcn",
        "--cc-param",
        "rp_timer_us=300",
        "--cc-line-rate",
        "10",
        "--ce-mark",
        "0.05",
        "--verify",
        "--json",
    ]);
    let v = json_ok(&o);
    let cc = &v["cc"];
    assert_eq!(cc["algorithm"], "dcqcn", "{v}");
    assert_eq!(cc["line_rate_gbps"].as_f64(), Some(10.0), "{v}");
    assert!(cc["cnps_rx"].as_u64().unwrap() > 0, "{v}");
    assert!(cc["rate_cuts"].as_u64().unwrap() > 0, "{v}");
    assert!(cc["min_rate_gbps"].as_f64().unwrap() < 10.0, "{v}");
    assert_eq!(cc["qps"].as_array().map(Vec::len), Some(1), "{v}");
}

#[test]
fn a_rate_limit_paces_every_qp_under_its_congestion_control() {
    let o = roce(&[
        "perf",
        "write_bw",
        "--loopback",
        "-n",
        "50",
        "-s",
        "65536",
        "-q",
        "2",
        "--udp-port",
        "0",
        "--cc",
        "dcqcn",
        "--rate-limit",
        "0.5",
        "--verify",
        "--json",
    ]);
    let v = json_ok(&o);
    // -n counts per QP, as perftest's: 2 QPs × 50.
    assert_eq!(v["iterations"].as_u64(), Some(100), "{v}");
    let qps = v["cc"]["qps"].as_array().unwrap();
    assert_eq!(qps.len(), 2, "{v}");
    for q in qps {
        // Capped from the start (no marks: no cuts); a QP that sent was
        // paced at the cap.
        assert_eq!(q["rate_gbps"].as_f64(), Some(0.5), "{v}");
        assert_eq!(q["rate_cuts"].as_u64(), Some(0), "{v}");
        assert!(q["min_rate_gbps"].as_f64().is_none_or(|r| r == 0.5), "{v}");
    }
    assert_eq!(v["cc"]["min_rate_gbps"].as_f64(), Some(0.5), "{v}");
}

#[test]
fn cc_bad_input_is_one_clear_error_naming_it() {
    for (args, want) in [
        (&["--cc", "bbr"][..], "--cc bbr: unknown algorithm"),
        (
            &["--cc", "hpcc"][..],
            "--cc hpcc: HPCC steers by in-band telemetry",
        ),
        (
            &["--cc", "dcqcn", "--cc-param", "eta=0.9"][..],
            "--cc-param eta=0.9: not a parameter of algorithm \"dcqcn\"",
        ),
        (
            &["--cc", "dcqcn", "--cc-param", "frobnicate=1"][..],
            "--cc-param frobnicate=1: not a congestion-control parameter",
        ),
        (
            &["--cc", "dcqcn", "--cc-param", "g=2"][..],
            "--cc-param g=2: expected 0 < g ≤ 1, got 2",
        ),
        (
            &["--cc", "timely", "--cc-param", "t_low_us=600"][..],
            "expected t_low_us < t_high_us",
        ),
        (
            &["--cc", "dcqcn", "--cc-param", "g"][..],
            "--cc-param g: expected KEY=VALUE",
        ),
        (
            &["--cc-line-rate=0"][..],
            "--cc-line-rate 0: expected a positive rate",
        ),
        (
            &["--rate-limit=0"][..],
            "--rate-limit 0: expected a positive rate",
        ),
        (&["--cnp-dscp", "64"][..], "--cnp-dscp 64: a DSCP is 0..=63"),
        (
            &["--ce-red", "1M,64K,0.1"][..],
            "--ce-red 1M,64K,0.1: RED thresholds: expected KMIN < KMAX",
        ),
    ] {
        let mut a = vec![
            "perf",
            "write_bw",
            "--loopback",
            "-n",
            "5",
            "--udp-port",
            "0",
        ];
        a.extend_from_slice(args);
        let o = roce(&a);
        assert!(!o.status.success(), "{args:?} succeeded");
        let err = text(&o.stderr);
        assert!(err.contains(want), "{args:?}: {err}");
        assert_eq!(err.trim().lines().count(), 1, "{args:?}: {err}");
    }
}

/// `roce perf --list-gids` prints lo's table as show_gids does, with the
/// IPv4-mapped GID of 127.0.0.1 and its address; `-x` past the table is
/// one clear error naming the table.
#[test]
fn list_gids_shows_the_table_and_a_missing_index_is_refused() {
    let o = roce(&["perf", "--list-gids"]);
    assert!(o.status.success(), "{}", text(&o.stderr));
    let s = text(&o.stdout);
    assert!(s.starts_with("DEV\tPORT\tINDEX\tGID"), "{s}");
    let line = s
        .lines()
        .find(|l| l.contains("0000:0000:0000:0000:0000:ffff:7f00:0001"))
        .unwrap_or_else(|| panic!("127.0.0.1's GID in {s}"));
    assert!(
        line.starts_with("roce_lo\t1\t") && line.contains("127.0.0.1"),
        "{line}"
    );
    assert!(line.ends_with("\tv2\tlo"), "{line}");
    assert!(s.contains("n_gids_found="), "{s}");
    let o = roce(&[
        "perf",
        "write_bw",
        "--loopback",
        "--udp-port",
        "0",
        "-x",
        "4000",
    ]);
    assert!(!o.status.success());
    let e = text(&o.stderr);
    assert!(
        e.contains("GID index 4000 does not exist: the GID table of lo"),
        "{e}"
    );
}

/// `--loopback6`: both sides over IPv6 on ::1, every byte checked; and
/// `-c UD --use_srq` as perftest names them, in the table's header.
#[test]
fn loopback6_and_ud_with_srq_from_the_command_line() {
    let o = roce(&[
        "perf",
        "write_bw",
        "--loopback6",
        "-n",
        "50",
        "-s",
        "8192",
        "--verify",
        "--json",
    ]);
    let v = json_ok(&o);
    assert_eq!(v["iterations"].as_u64(), Some(50), "{v}");
    assert_eq!(v["connection"], "RC", "{v}");
    let o = roce(&[
        "perf",
        "send_bw",
        "--loopback",
        "--udp-port",
        "0",
        "-c",
        "UD",
        "--use_srq",
        "-n",
        "100",
        "--verify",
    ]);
    assert!(o.status.success(), "{}", text(&o.stderr));
    let s = text(&o.stdout);
    assert!(
        s.contains(" Connection type : UD       Using SRQ      : ON"),
        "{s}"
    );
    assert!(s.contains("every byte checked: OK"), "{s}");
}
