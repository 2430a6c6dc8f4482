//! What the engine's stage accounting (`roce_verbs::profile`) costs, measured
//! so that a busy machine blurs it as little as possible:
//!
//! ```sh
//! cargo run --release -p roce-verbs --example profile_cost -- 0.5 10   # 10 pairs of 0.5 s runs
//! ```
//!
//! One thread drives both engines of a loopback pair (posting 64 KiB WRITEs
//! on A, progressing B, polling A), so no run waits on another thread being
//! scheduled, and each run is charged the thread's CPU time
//! (`CLOCK_THREAD_CPUTIME_ID`), not wall time, so time spent descheduled
//! counts in neither. Runs with the accounting on and off alternate; each
//! prints CPU ns per 64 KiB message, and the end the median of each and
//! every pair's difference.

use roce_verbs::*;
use std::time::{Duration, Instant};

const SIZE: usize = 65536;
const DEPTH: usize = 16;

fn thread_cpu_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: a valid pointer to a timespec; the clock id is a constant.
    unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// CPU ns per message of `secs` seconds of WRITEs with profiling `on`.
fn run(on: bool, secs: f64) -> Result<f64> {
    let cfg = EngineConfig {
        profile: on,
        ..Default::default()
    };
    let open = |ip: &str| -> Result<(Context, Pd, Cq, Mr, PreparedQp)> {
        let ctx = Device::open_with(format!("{ip}:0").parse().expect("address"), cfg.clone())?;
        let pd = ctx.alloc_pd()?;
        let cq = ctx.create_cq(256)?;
        let mr = pd.reg_mr(SIZE * DEPTH, Access::ALL)?;
        let qp = pd.qp_builder(&cq).max_send_wr(64).build()?;
        Ok((ctx, pd, cq, mr, qp))
    };
    let (ca, _pa, cqa, mra, qa) = open("127.0.0.1")?;
    let (cb, _pb, _cqb, mrb, qb) = open("127.0.0.2")?;
    let (ea, eb) = (qa.endpoint_with(&mra), qb.endpoint_with(&mrb));
    let qa = qa.connect(&eb)?;
    let _qb = qb.connect(&ea)?;
    let wr = |i: usize| {
        SendWr::new(
            i as u64,
            WrOpcode::RdmaWrite {
                remote_addr: eb.remote_addr((i * SIZE) as u64),
                rkey: eb.rkey,
            },
            vec![mra.sge(i * SIZE, SIZE as u32)],
        )
    };
    let (start, cpu0) = (Instant::now(), thread_cpu_ns());
    let mut done = 0u64;
    let mut outstanding = 0usize;
    let mut next = 0usize;
    while start.elapsed() < Duration::from_secs_f64(secs) || outstanding > 0 {
        if start.elapsed() < Duration::from_secs_f64(secs) {
            while outstanding < DEPTH {
                qa.post_send(&wr(next % DEPTH))?;
                next += 1;
                outstanding += 1;
            }
        }
        cb.progress()?;
        for wc in cqa.poll(DEPTH)? {
            if wc.status != WcStatus::Success {
                return Err(Error::Timeout(Duration::ZERO));
            }
            outstanding -= 1;
            done += 1;
        }
    }
    let cpu = thread_cpu_ns() - cpu0;
    // The profile must have been taken (or not) as asked.
    assert_eq!(ca.profile().enabled, on);
    Ok(cpu as f64 / done.max(1) as f64)
}

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn main() -> Result<()> {
    let a: Vec<String> = std::env::args().collect();
    let secs: f64 = a.get(1).and_then(|s| s.parse().ok()).unwrap_or(0.5);
    let pairs: usize = a.get(2).and_then(|s| s.parse().ok()).unwrap_or(10);
    let (mut on, mut off, mut diff) = (Vec::new(), Vec::new(), Vec::new());
    for i in 0..pairs {
        // Alternate which goes first, so a trend in the load hits both.
        let (x, y) = if i % 2 == 0 {
            let x = run(true, secs)?;
            (x, run(false, secs)?)
        } else {
            let y = run(false, secs)?;
            (run(true, secs)?, y)
        };
        println!(
            "pair {i}: on {x:.0} CPU ns/msg, off {y:.0} CPU ns/msg ({:+.1}%)",
            100.0 * (x / y - 1.0)
        );
        on.push(x);
        off.push(y);
        diff.push(100.0 * (x / y - 1.0));
    }
    let mut sorted = diff.clone();
    sorted.sort_by(f64::total_cmp);
    println!(
        "median on {:.0}, off {:.0} CPU ns per 64 KiB WRITE; pair differences: median {:+.1}%, range {:+.1}% .. {:+.1}%",
        median(&mut on),
        median(&mut off),
        median(&mut diff),
        sorted[0],
        sorted[sorted.len() - 1]
    );
    Ok(())
}
