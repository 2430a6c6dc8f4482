//! `roce perf --poll`: every progress mode carries verified data both ways
//! (a blocked side that missed a datagram, a post or a timer would stall
//! or fail the run), and a mode that does not exist is one clear error.

use serde_json::Value;
use std::process::{Command, Output};

const ROCE: &str = env!("CARGO_BIN_EXE_roce");

fn roce(args: &[&str]) -> Output {
    Command::new(ROCE).args(args).output().expect("run roce")
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// The QP ACK timeout exponent of these runs (perftest's `-u`): 4.096 µs ×
/// 2^18, about 1.07 s, where the default 14 is 67 ms. Spinning threads
/// (`--poll busy`, and every mode's spin phase) get no wake-up preference
/// from the scheduler: on a loaded machine they wait out whole time
/// slices, and a 64 KiB `read_bw --poll busy` beside CPU-bound processes
/// at load 15 took up to 13 retransmission timeouts in one run. Eight
/// timeouts without an ACK in between end the run with
/// IBV_WC_RETRY_EXC_ERR (`retry_cnt` 7), which is the RNIC keeping to the
/// spec, not a wake-up the progress modes missed. A real loss still
/// recovers (a NAK at once, a timeout after a second). Nor does the longer
/// timeout hide a lost wake-up: perf's sleeps are bounded by the default
/// `max_sleep` of 1 ms, so a missed one costs at most that with either
/// `-u`; `crates/verbs/tests/poll.rs`, whose sleeps are unlimited, is where
/// a lost wake-up fails.
const QP_TIMEOUT: &str = "18";

#[test]
fn every_poll_mode_moves_verified_data() {
    for mode in ["busy", "adaptive", "event"] {
        for (t, size) in [
            ("write_bw", "5000"),
            ("send_bw", "3000"),
            ("read_bw", "5000"),
            ("write_lat", "100"),
            ("send_lat", "100"),
        ] {
            let o = roce(&[
                "perf",
                t,
                "--loopback",
                "-n",
                "300",
                "-s",
                size,
                "--udp-port",
                "0",
                "-u",
                QP_TIMEOUT,
                "--poll",
                mode,
                "--verify",
                "--json",
            ]);
            assert!(
                o.status.success(),
                "{t} --poll {mode}: {:?}\n{}",
                o.status,
                text(&o.stderr)
            );
            let v: Value = serde_json::from_slice(&o.stdout)
                .unwrap_or_else(|e| panic!("not JSON ({e}): {}", text(&o.stdout)));
            assert_eq!(v["verified"], Value::Bool(true), "{t} --poll {mode}: {v}");
            assert_eq!(
                v["iterations"].as_u64(),
                Some(300),
                "{t} --poll {mode}: {v}"
            );
        }
    }
}

#[test]
fn an_unknown_poll_mode_is_one_clear_error() {
    let o = roce(&["perf", "write_bw", "--loopback", "--poll", "sometimes"]);
    assert!(!o.status.success());
    let e = text(&o.stderr);
    assert!(e.contains("busy, adaptive or event"), "{e}");
}
