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
    // Each pair runs -n itself: the total is both pairs' messages.
    assert_eq!(x.iterations, 80);
    // Every pair's QPs are listed, and each pair has sockets of its own.
    assert_eq!(r.local.len(), 4);
    assert_eq!(r.remote.len(), 4);
    let mut ports: Vec<u16> = r.local.iter().map(|e| e.udp_port).collect();
    ports.dedup();
    assert_eq!(ports.len(), 2, "two client engines: {ports:?}");
    // 80 messages of four 4 KiB packets at the least went out, counted
    // across both client engines.
    assert!(r.counters.tx_packets >= 80 * 4, "{:?}", r.counters);
    assert!(r.server_counters.rx_packets >= 80 * 4);
    let each: Vec<&String> = r.notes.iter().filter(|n| n.contains("2 threads")).collect();
    assert_eq!(each.len(), 1, "{:?}", r.notes);
    assert!(r.render(&o).unwrap().contains("Number of qps   : 4"));
}

#[test]
fn threads_are_refused_where_they_mean_nothing() {
    let mut lat = opts("write_lat");
    lat.iters = Some(10);
    assert!(matches!(roce_perf::loopback(&lat), Err(Error::Usage(_))));
    let mut remote = opts("write_bw");
    remote.server = Some("127.0.0.1".into());
    let e = roce_perf::client(&remote).unwrap_err();
    assert!(matches!(e, Error::Unsupported(_)), "{e}");
    let mut zero = opts("write_bw");
    zero.threads = 0;
    assert!(matches!(roce_perf::loopback(&zero), Err(Error::Usage(_))));
    let mut port = opts("write_bw");
    port.udp_port = Some(4791);
    assert!(matches!(roce_perf::loopback(&port), Err(Error::Usage(_))));
}
