//! TIMELY and Swift on real sockets: with their real-socket defaults
//! (targets over the measured minimum RTT, `roce_verbs::cc`) a loopback
//! `write_bw` keeps a sizeable share of what `--cc none` moves, every byte
//! verified, while the controller visibly acts. With the fabric defaults
//! they held the QP at its floor (TIMELY ≈ 1 %, Swift ≈ 9 % of `none`).

use roce_perf::{Options, Report};

/// One verified loopback `write_bw` of `ITERS` 64 KiB messages.
fn write_bw(cc: &str, params: &[&str]) -> Report {
    let mut o = Options::new("write_bw");
    o.udp_port = Some(0);
    o.size = Some(65536);
    o.iters = Some(ITERS);
    o.verify = true;
    o.cc = cc.into();
    o.cc_params = params.iter().map(|p| p.to_string()).collect();
    let r = roce_perf::loopback(&o).unwrap();
    assert_eq!(r.verified(&o), Some(true), "{cc}: every byte checked");
    assert_eq!(r.results[0].iterations, ITERS, "{cc}");
    r
}

const ITERS: u64 = 3000;

fn gbps(r: &Report) -> f64 {
    r.results[0].bw_gbps.unwrap_or(0.0)
}

#[test]
fn timely_and_swift_keep_a_sizeable_share_of_the_link_and_act() {
    // Real sockets on a shared 2-core machine: a delay-based controller
    // reads every scheduling hiccup as queueing delay, and one attempt in a
    // loaded CI run once gave Swift 0.28 of `none` (0.6–0.8 alone). The
    // shares must hold in one of three attempts; that the controllers act
    // is asserted on every attempt.
    let mut last = String::new();
    for attempt in 1..=3 {
        match attempt_shares() {
            Ok(()) => return,
            Err(e) => {
                eprintln!("attempt {attempt}: {e}");
                last = e;
            }
        }
    }
    panic!("{last}");
}

/// One measurement: `Err` names the share that fell short.
fn attempt_shares() -> Result<(), String> {
    // `none` before and after, so a machine whose load changes during the
    // test does not favour either controller.
    let before = write_bw("none", &[]);
    // TIMELY's floor lowered from the real-socket 1 Gb/s (about what a
    // debug build moves here) to 10 Mb/s, so a TIMELY held at its floor
    // shows as ≈ 1 % of `none`.
    let timely = write_bw("timely", &["min_rate_mbps=10"]);
    let swift = write_bw("swift", &[]);
    let after = write_bw("none", &[]);
    let none = (gbps(&before) + gbps(&after)) / 2.0;
    let (t, s) = (gbps(&timely), gbps(&swift));
    eprintln!(
        "none {:.2}/{:.2} Gb/s, timely {t:.2} Gb/s {:?}, swift {s:.2} Gb/s {:?}",
        gbps(&before),
        gbps(&after),
        timely.cc,
        swift.cc
    );
    // The controllers act: TIMELY paced below the line and cut its rate,
    // Swift cut its window.
    let line = timely.cc.line_rate_gbps;
    assert!(timely.cc.rate_cuts > 0, "{:?}", timely.cc);
    assert!(
        timely.cc.min_rate_gbps.is_some_and(|m| m < line),
        "{:?}",
        timely.cc
    );
    assert!(swift.cc.rate_cuts > 0, "{:?}", swift.cc);
    // Sizeable shares of what no congestion control moves in the same
    // test: with the fabric defaults these were 0.01 and 0.09 (release,
    // loopback); here (debug) they measured 0.95 and 0.6–0.8.
    if t < 0.3 * none {
        return Err(format!("timely {t:.2} vs none {none:.2} Gb/s"));
    }
    if s < 0.4 * none {
        return Err(format!("swift {s:.2} vs none {none:.2} Gb/s"));
    }
    Ok(())
}
