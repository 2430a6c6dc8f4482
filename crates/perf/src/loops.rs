//! The measurement loops, in the shape of perftest's `run_iter_bw` and
//! `run_iter_lat_*`: post, poll, time.

use crate::Result;
use crate::error::fail;
use crate::results::{Latency, SizeResult};
use crate::setup::Side;
use crate::*;
use roce_verbs::*;
use std::time::Instant;

/// Drives the engine until `done` holds; fails when nothing at all changes
/// for `STALL`. Sending waits until `done` was checked, so the answer the
/// caller posts next leaves together with the RNIC's ACK.
pub(crate) fn spin_until(ctx: &Context, mut done: impl FnMut() -> Result<bool>) -> Result<()> {
    let mut stall = Stall::default();
    loop {
        let mut work = ctx.receive()?;
        if done()? {
            return Ok(());
        }
        work |= ctx.doorbell()?;
        if stall.idle_too_long(work) {
            let why = ctx
                .last_send_error()
                .map_or(String::new(), |e| format!(" (last send error: {e})"));
            fail!(Run, "the peer stopped answering for {STALL:?}{why}");
        }
    }
}

/// Notices a peer that stopped for [`STALL`] while a loop spins. The clock
/// is read once when an idle stretch starts and then every so many idle
/// rounds, not every round: a latency test spins between every two
/// packets, and a clock read is a visible share of a round.
#[derive(Default)]
pub struct Stall {
    idle: u32,
    since: Option<Instant>,
}

impl Stall {
    pub fn idle_too_long(&mut self, work: bool) -> bool {
        if work {
            self.idle = 0;
            return false;
        }
        self.idle += 1;
        if self.idle == 1 {
            self.since = Some(Instant::now());
            return false;
        }
        self.idle.is_multiple_of(1024) && self.since.is_some_and(|t| t.elapsed() > STALL)
    }
}

pub(crate) fn wc_ok(wc: &Wc, ctx: &Context) -> Result<()> {
    if wc.status == WcStatus::Success {
        return Ok(());
    }
    let why = ctx
        .last_send_error()
        .map_or(String::new(), |e| format!(" (last send error: {e})"));
    fail!(
        Run,
        "work request {:#x} completed with {}{why}",
        wc.wr_id,
        wc.status.name()
    )
}

pub(crate) fn wr_for(
    test: Test,
    side: &Side,
    remote: &Endpoint,
    size: usize,
    wr_id: u64,
    inline: bool,
) -> SendWr {
    let op = match test.verb {
        Verb::Send => WrOpcode::Send,
        Verb::Write => WrOpcode::RdmaWrite {
            remote_addr: remote.addr,
            rkey: remote.rkey,
        },
        Verb::Read => WrOpcode::RdmaRead {
            remote_addr: remote.addr,
            rkey: remote.rkey,
        },
        Verb::Atomic => WrOpcode::AtomicFetchAndAdd {
            remote_addr: remote.addr,
            rkey: remote.rkey,
            add: 1,
        },
    };
    // READ lands in the upper half, so the source pattern stays intact.
    let local_off = if test.verb == Verb::Read { size } else { 0 };
    let mut wr = SendWr::new(wr_id, op, vec![side.mr.sge(local_off, size as u32)]);
    if let Some(d) = side.ud_dest(remote) {
        wr = wr.to(d);
    }
    if inline && matches!(test.verb, Verb::Send | Verb::Write) {
        wr.inline()
    } else {
        wr
    }
}

/// Runs one size of a bandwidth test. `iters` counts per QP, as perftest's
/// `-n` does (`run_iter_bw` posts `iters` on every QP and waits for
/// `tot_iters = iters × num_of_qps` completions): `-q 2 -n 200` sends 400
/// messages, 200 on each QP, and a perftest SEND server that posts `-n`
/// receives on every QP gets exactly what it posted for. The result's
/// `iterations` is the total over all QPs, as perftest's report prints it.
pub(crate) fn client_bw(
    args: &Options,
    test: Test,
    side: &Side,
    remote: &[Endpoint],
    size: usize,
    iters: u64,
) -> Result<SizeResult> {
    let nq = side.qps.len();
    let depth = args.tx_depth;
    let inline = size <= args.inline() as usize;
    let mut outstanding = vec![0u32; nq];
    let mut since_signal = vec![0u32; nq];
    // Posted on each QP (perftest's `scnt[index]`).
    let mut posted = vec![0u64; nq];
    let mut completed = 0u64;
    let start = Instant::now();
    let deadline = args
        .duration
        .map(|d| start + Duration::from_secs_f64(d.max(0.0)));
    let mut marks: Vec<(Instant, u64)> = vec![(start, 0)];
    let mut wrs = Vec::with_capacity(64);
    let mut stopped = false;
    let mut last_progress = Instant::now();
    loop {
        // One clock read a round serves the deadline, the marks and the
        // stall check.
        let now = Instant::now();
        if !stopped {
            stopped = match deadline {
                Some(d) => now >= d,
                None => posted.iter().all(|&p| p >= iters),
            };
            if stopped {
                // Cover unsignaled tails with one signaled request each.
                for q in 0..nq {
                    if since_signal[q] > 0 {
                        let n = since_signal[q] + 1;
                        since_signal[q] = 0;
                        outstanding[q] += 1;
                        posted[q] += 1;
                        let wr = wr_for(
                            test,
                            side,
                            &remote[q],
                            size,
                            ((q as u64) << 32) | u64::from(n),
                            inline,
                        );
                        side.qps[q].post_send(&wr)?;
                    }
                }
            }
        }
        if !stopped {
            for q in 0..nq {
                wrs.clear();
                while outstanding[q] < depth && wrs.len() < 64 {
                    if deadline.is_none() && posted[q] >= iters {
                        break;
                    }
                    posted[q] += 1;
                    outstanding[q] += 1;
                    since_signal[q] += 1;
                    let last = deadline.is_none() && posted[q] == iters;
                    let signaled =
                        since_signal[q] >= args.cq_mod || last || outstanding[q] == depth;
                    let id = ((q as u64) << 32) | u64::from(since_signal[q]);
                    let wr = wr_for(test, side, &remote[q], size, id, inline);
                    let wr = if signaled {
                        since_signal[q] = 0;
                        wr
                    } else {
                        wr.unsignaled()
                    };
                    wrs.push(wr);
                }
                if !wrs.is_empty() {
                    side.qps[q].post_send_batch(&wrs)?;
                }
            }
        }
        let wcs = side.cq.poll(64)?;
        if !wcs.is_empty() {
            last_progress = now;
            for wc in &wcs {
                wc_ok(wc, &side.ctx)?;
                let q = (wc.wr_id >> 32) as usize;
                let n = (wc.wr_id & 0xffff_ffff) as u32;
                if let Some(o) = outstanding.get_mut(q) {
                    *o = o.saturating_sub(n);
                }
                completed += u64::from(n);
            }
            marks.push((now, completed));
        } else if now - last_progress > STALL {
            fail!(
                Run,
                "no completion for {STALL:?}: the peer stopped answering"
            );
        }
        if stopped && outstanding.iter().all(|&o| o == 0) {
            break;
        }
    }
    let secs = start.elapsed().as_secs_f64().max(1e-9);
    let bytes = completed as f64 * size as f64;
    // Peak: the best rate over windows of a tenth of the run.
    let window = (completed / 10).max(1);
    let mut peak = 0.0f64;
    let mut j = 0;
    for i in 0..marks.len() {
        while j < i && marks[i].1 - marks[j + 1].1 >= window {
            j += 1;
        }
        let (dn, dt) = (
            marks[i].1 - marks[j].1,
            (marks[i].0 - marks[j].0).as_secs_f64(),
        );
        if dn >= window && dt > 0.0 {
            peak = peak.max(dn as f64 * size as f64 / dt);
        }
    }
    let avg_mib = bytes / secs / (1 << 20) as f64;
    Ok(SizeResult {
        size,
        iterations: completed,
        seconds: secs,
        bw_gbps: Some(bytes * 8.0 / secs / 1e9),
        bw_peak_mib: Some((peak / (1 << 20) as f64).max(avg_mib)),
        bw_avg_mib: Some(avg_mib),
        msg_rate_mpps: completed as f64 / secs / 1e6,
        latency_us: None,
        verified: None,
        baseline: None,
        profile: None,
        analysis: None,
    })
}

/// The last byte of write_lat's `i`-th WRITE: perftest's `(char)++scnt`,
/// the iteration count from 1, wrapping at 256.
pub(crate) fn flag(i: u64) -> u8 {
    (i + 1) as u8
}

#[allow(clippy::too_many_arguments)]
pub(crate) fn client_lat(
    args: &Options,
    test: Test,
    side: &Side,
    remote: &Endpoint,
    size: usize,
    iters: u64,
    first_size: bool,
) -> Result<SizeResult> {
    let qp = &side.qps[0];
    let inline = size <= args.inline() as usize;
    let mut samples = Vec::with_capacity(iters as usize);
    let ctx = &side.ctx;
    let start = Instant::now();
    match test.verb {
        Verb::Write => {
            // perftest's run_iter_lat_write: the server WRITEs first; each
            // side answers the other's WRITE (its last byte, the iteration
            // count, polled in the receive area) with its own, into the
            // area the peer announced. A round trip is from this side's
            // WRITE to the server's next.
            let poll = side.half + size - 1;
            // One work request, as perftest posts: only its id changes.
            let mut wr = wr_for(test, side, remote, size, 0, inline);
            let mut posted_at: Option<Instant> = None;
            let mut done = 0u64;
            for i in 0..iters {
                let f = flag(i);
                spin_until(ctx, || {
                    for wc in side.cq.poll_only(16) {
                        wc_ok(&wc, ctx)?;
                        done += 1;
                    }
                    Ok(side.mr.byte(poll)? == f)
                })?;
                if let Some(t) = posted_at {
                    samples.push(t.elapsed().as_nanos() as f64 / 2.0);
                }
                side.mr.write(size - 1, &[f])?;
                posted_at = Some(Instant::now());
                wr.wr_id = i;
                qp.post_send(&wr)?;
            }
            spin_until(ctx, || {
                for wc in side.cq.poll_only(16) {
                    wc_ok(&wc, ctx)?;
                    done += 1;
                }
                Ok(done >= iters)
            })?;
        }
        Verb::Send => {
            let recv = |id| side.recv_wr(id);
            // One receive stays posted between sizes.
            if first_size {
                side.post_recvs(0, &[recv(u64::MAX)])?;
            }
            // One work request, as perftest posts: only its id changes.
            let mut wr = wr_for(test, side, remote, size, 0, inline);
            for i in 0..iters {
                let t0 = Instant::now();
                wr.wr_id = i;
                qp.post_send(&wr)?;
                let mut got = false;
                spin_until(ctx, || {
                    for wc in side.cq.poll_only(16) {
                        wc_ok(&wc, ctx)?;
                        got |= wc.opcode == WcOpcode::Recv;
                    }
                    Ok(got)
                })?;
                samples.push(t0.elapsed().as_nanos() as f64 / 2.0);
                side.post_recvs(0, &[recv(u64::MAX)])?;
            }
        }
        Verb::Read | Verb::Atomic => {
            // One work request, as perftest posts: only its id changes.
            let mut wr = wr_for(test, side, remote, size, 0, inline);
            for i in 0..iters {
                let t0 = Instant::now();
                wr.wr_id = i;
                qp.post_send(&wr)?;
                let mut done = false;
                spin_until(ctx, || {
                    for wc in side.cq.poll_only(16) {
                        wc_ok(&wc, ctx)?;
                        done = true;
                    }
                    Ok(done)
                })?;
                samples.push(t0.elapsed().as_nanos() as f64);
                if test.verb == Verb::Atomic && args.verify {
                    // Only this client adds, so the old value counts the iterations.
                    let old = side.mr.read_u64(0)?;
                    let want =
                        u64::from_le_bytes(pattern(SERVER_SEED, 8).try_into().unwrap_or([0; 8]))
                            .wrapping_add(i);
                    if old != want {
                        fail!(
                            Run,
                            "FETCH_AND_ADD {i} returned {old:#x}, expected {want:#x}"
                        );
                    }
                }
            }
        }
    }
    let secs = start.elapsed().as_secs_f64().max(1e-9);
    Ok(SizeResult {
        size,
        iterations: iters,
        seconds: secs,
        bw_gbps: None,
        bw_peak_mib: None,
        bw_avg_mib: None,
        msg_rate_mpps: iters as f64 / secs / 1e6,
        latency_us: Latency::from_ns(samples),
        verified: None,
        baseline: None,
        profile: None,
        analysis: None,
    })
}
