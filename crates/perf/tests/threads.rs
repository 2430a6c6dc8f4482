//! `--threads`: engine pairs side by side on loopback, their figures added.

use roce_perf::{Error, Options};

fn opts(test: &str) -> Options {
    let mut o = Options::new(test);
    o.udp_port = Some(0);
    o.threads = 2;
    o
}

#[test]
fn two_engine_pairs_move_and_verify_every_message_and_add_up() {
    let mut o = opts("write_bw");
    o.qps = 2;
    o.iters = Some(40);
    o.size = Some(16384);
    o.verify = true;
    let r = roce_perf::loopback(&o).unwrap();
    assert_eq!(r.verified(&o), Some(true));
    let x = &r.results[0];
    // Each pair runs -n on each of its QPs, as perftest counts -n: the
    // total is 2 pairs × 2 QPs × 40.
    assert_eq!(x.iterations, 160);
    // Every pair's QPs are listed, and each pair has sockets of its own.
    assert_eq!(r.local.len(), 4);
    assert_eq!(r.remote.len(), 4);
    let mut ports: Vec<u16> = r.local.iter().map(|e| e.udp_port).collect();
    ports.dedup();
    assert_eq!(ports.len(), 2, "two client engines: {ports:?}");
    // 160 messages of four 4 KiB packets at the least went out, counted
    // across both client engines.
    assert!(r.counters.tx_packets >= 160 * 4, "{:?}", r.counters);
    assert!(r.server_counters.rx_packets >= 160 * 4);
    let each: Vec<&String> = r.notes.iter().filter(|n| n.contains("2 threads")).collect();
    assert_eq!(each.len(), 1, "{:?}", r.notes);
    assert!(r.render(&o).unwrap().contains("Number of qps   : 4"));
}

#[test]
fn threads_are_refused_where_they_mean_nothing() {
    let mut lat = opts("write_lat");
    lat.iters = Some(10);
    assert!(matches!(roce_perf::loopback(&lat), Err(Error::Usage(_))));
    let mut remote = opts("write_lat");
    remote.server = Some("127.0.0.1:1".into());
    assert!(matches!(roce_perf::client(&remote), Err(Error::Usage(_))));
    let mut zero = opts("write_bw");
    zero.threads = 0;
    assert!(matches!(roce_perf::loopback(&zero), Err(Error::Usage(_))));
    let mut port = opts("write_bw");
    port.udp_port = Some(4791);
    assert!(matches!(roce_perf::loopback(&port), Err(Error::Usage(_))));
}

/// A write_bw server on 127.0.0.1 (a free TCP port) serving `threads`
/// clients at once, on a thread of the test's.
fn threaded_server(
    threads: u32,
) -> (
    std::net::SocketAddr,
    std::thread::JoinHandle<roce_perf::Result<roce_perf::Served>>,
) {
    let mut so = Options::new("write_bw");
    so.udp_port = Some(0);
    so.threads = threads;
    so.port = 0;
    so.bind = Some(std::net::Ipv4Addr::LOCALHOST.into());
    let server = roce_perf::Server::bind(&so).unwrap();
    let at = server.local_addr().unwrap();
    (at, std::thread::spawn(move || server.serve()))
}

#[test]
fn a_threaded_client_and_a_threaded_server_face_each_other() {
    // The server serves as many clients at once as it has threads; the
    // client connects once per thread. Every engine takes a free UDP port.
    let (at, served) = threaded_server(3);
    let mut co = Options::new("write_bw");
    co.udp_port = Some(0);
    co.threads = 3;
    co.iters = Some(30);
    co.size = Some(8192);
    co.verify = true;
    co.server = Some(at.to_string());
    let r = roce_perf::client(&co).unwrap();
    let served = served.join().unwrap().unwrap();
    assert_eq!(r.verified(&co), Some(true));
    assert_eq!(r.results[0].iterations, 90);
    assert_eq!(r.local.len(), 3);
    assert_eq!(served.summary.lines().count(), 3, "{}", served.summary);
    assert!(
        r.notes.iter().any(|n| n.contains("3 threads")),
        "{:?}",
        r.notes
    );
}

/// A server and a client that disagree on `--threads`: the first
/// connection is refused, the server's other threads (waiting in `accept`
/// for clients that will never come) are woken, and both sides end with
/// an error that says why instead of hanging.
#[test]
fn a_threads_mismatch_is_refused_on_both_sides_without_a_hang() {
    let (at, served) = threaded_server(3);
    let mut co = Options::new("write_bw");
    co.udp_port = Some(0);
    co.iters = Some(10);
    co.server = Some(at.to_string());
    let e = roce_perf::client(&co).unwrap_err().to_string();
    assert!(e.contains("--threads"), "{e}");
    let e = served.join().unwrap().unwrap_err().to_string();
    assert!(e.contains("the client makes 1"), "{e}");
}
