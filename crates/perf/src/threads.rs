//! `--threads N`: N engines per side at once, each driven by a thread of
//! its own with a UDP socket and `-q` QPs of its own, as perftest's users
//! run parallel processes, and the bandwidths added up. On loopback N
//! pairs run in this process; between two hosts the client connects N
//! times and a server with the same `--threads` serves N clients at once
//! (every engine but the first takes a free UDP port, which the exchange
//! tells the peer).
//!
//! One engine is one socket driven by one thread ([`roce_verbs::Context`]),
//! so `-q N` multiplies QPs inside an engine (more work in flight, the same
//! thread and socket), while `--threads N` multiplies engines: it is the
//! way to put more than one core under each side. On a machine with fewer
//! cores than the threads this starts, the threads share them and the sum
//! cannot exceed what the cores carry.
//!
//! The figures are summed as perftest's users add up the reports of
//! parallel processes: each engine measures its own run, and they start
//! within the few milliseconds their setup takes, so for `-D` runs the
//! windows overlap all but that. The kernel's baseline beside a loopback
//! run (`--baseline`) is as many TCP streams at once, added up the same way.

use crate::error::fail;
use crate::results::{Baseline, Report, Served};
use crate::{Error, Options, Result, Test, session};
use roce_verbs::Stats;
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::time::Duration;

/// Runs `args.threads` clients against `server` at once and adds their
/// figures up.
pub(crate) fn client(args: &Options, test: Test, server: &str) -> Result<Report> {
    let mut handles = Vec::new();
    for k in 0..args.threads {
        let mut cargs = args.clone();
        cargs.seed = args.seed.wrapping_add(2 * u64::from(k));
        if k > 0 {
            cargs.pcap = None;
            cargs.udp_port = Some(0);
        }
        let server = server.to_string();
        let h = std::thread::Builder::new()
            .name(format!("perf-client-{k}"))
            .spawn(move || {
                let mut r = session::client(&cargs, test, &server, cargs.bind)?;
                r.analyze(&cargs);
                Ok(r)
            })
            .map_err(|source| Error::Io {
                what: format!("starting client thread {k}"),
                source,
            })?;
        handles.push(h);
    }
    let mut reports = Vec::new();
    let mut first_error = None;
    for (k, h) in handles.into_iter().enumerate() {
        match h
            .join()
            .map_err(|_| Error::Run(format!("client thread {k} panicked")))
            .and_then(|r| r)
        {
            Ok(r) => reports.push(r),
            Err(e) => {
                first_error.get_or_insert(e);
            }
        }
    }
    if let Some(e) = first_error {
        return Err(e);
    }
    let mut total = add_up(reports)?;
    analyze_note(args, &mut total);
    Ok(total)
}

/// `--analyze` tables are per engine; the sum has none, and says so.
fn analyze_note(args: &Options, total: &mut Report) {
    if args.analyze {
        total.notes.push(format!(
            "--analyze profiles one engine pair; with --threads {} the stage tables are left out (run --threads 1 for them)",
            args.threads
        ));
    }
}

/// Serves `args.threads` clients at once on `listener`, each on a thread
/// and an engine of its own. When one of them fails (a client that asked
/// for another `--threads`, a plain perftest client, a run that broke), the
/// others may be waiting in `accept` for clients that will never come:
/// they are woken by connections that close at once, so the server reports
/// the failure instead of hanging.
pub(crate) fn serve(args: &Options, test: Test, listener: &TcpListener) -> Result<Served> {
    let n = args.threads as usize;
    let wake = listener.local_addr().ok();
    let (first_failed, results): (Option<usize>, Vec<Result<Served>>) = std::thread::scope(|s| {
        let (tx, rx) = std::sync::mpsc::channel();
        let handles: Vec<_> = (0..args.threads)
            .map(|k| {
                let mut sargs = args.clone();
                sargs.seed = args.seed.wrapping_add(2 * u64::from(k) + 1);
                if k > 0 {
                    sargs.pcap = None;
                }
                let tx = tx.clone();
                s.spawn(move || {
                    let r = session::server(&sargs, test, listener);
                    let _ = tx.send((k as usize, r.is_err()));
                    r
                })
            })
            .collect();
        drop(tx);
        // Every thread sends once, or drops its sender when it panics.
        let mut first_failed = None;
        for (k, failed) in rx.iter() {
            if failed {
                first_failed = Some(k);
                if let Some(a) = wake {
                    for _ in 0..n {
                        let _ = TcpStream::connect_timeout(&a, Duration::from_secs(1));
                    }
                }
                break;
            }
        }
        let results = handles
            .into_iter()
            .enumerate()
            .map(|(k, h)| {
                h.join()
                    .map_err(|_| Error::Run(format!("server thread {k} panicked")))
                    .and_then(|r| r)
            })
            .collect();
        (first_failed, results)
    });
    // The failure that came first is the cause; the woken threads' are not.
    let mut results = results;
    if let Some(k) = first_failed {
        results.swap(0, k);
    }
    let mut summary = Vec::new();
    let mut notes = Vec::new();
    for (k, r) in results.into_iter().enumerate() {
        let s = r?;
        summary.push(format!("thread {k}: {}", s.summary));
        notes.extend(s.notes);
    }
    Ok(Served {
        summary: summary.join("\n"),
        notes,
    })
}

/// Runs `args.threads` loopback pairs at once and adds their figures up.
pub(crate) fn loopback(args: &Options, test: Test) -> Result<Report> {
    let n = args.threads;
    let (server_ip, client_ip) = crate::loopback_ips(args);
    let io = |what: String| move |source| Error::Io { what, source };
    let mut pairs = Vec::new();
    for k in 0..n {
        let listener = TcpListener::bind((server_ip, 0))
            .map_err(io(format!("listening on {server_ip} for thread {k}")))?;
        let port = listener
            .local_addr()
            .map_err(io(format!("listening on {server_ip} for thread {k}")))?
            .port();
        let mut cargs = args.clone();
        cargs.server = None;
        cargs.udp_port = Some(0);
        cargs.seed = args.seed.wrapping_add(2 * u64::from(k));
        if k > 0 {
            // One capture: the first pair's.
            cargs.pcap = None;
        }
        let mut sargs = cargs.clone();
        sargs.pcap = None;
        sargs.seed = cargs.seed.wrapping_add(1);
        sargs.bind = Some(server_ip);
        let srv = std::thread::Builder::new()
            .name(format!("perf-server-{k}"))
            .spawn(move || session::server(&sargs, test, &listener))
            .map_err(io(format!("starting server thread {k}")))?;
        let cli = std::thread::Builder::new()
            .name(format!("perf-client-{k}"))
            .spawn(move || {
                session::client(
                    &cargs,
                    test,
                    &SocketAddr::new(server_ip, port).to_string(),
                    Some(client_ip),
                )
            })
            .map_err(io(format!("starting client thread {k}")))?;
        pairs.push((srv, cli));
    }
    let mut reports = Vec::new();
    let mut notes = Vec::new();
    let mut first_error = None;
    for (k, (srv, cli)) in pairs.into_iter().enumerate() {
        let report = cli
            .join()
            .map_err(|_| Error::Run(format!("client thread {k} panicked")));
        let served = srv
            .join()
            .map_err(|_| Error::Run(format!("server thread {k} panicked")));
        match (report.and_then(|r| r), served.and_then(|s| s)) {
            (Ok(r), Ok(s)) => {
                notes.extend(s.notes);
                reports.push(r);
            }
            (Err(e), _) | (_, Err(e)) => {
                first_error.get_or_insert(e);
            }
        }
    }
    if let Some(e) = first_error {
        return Err(e);
    }
    let mut total = add_up(reports)?;
    total.notes.splice(0..0, notes);
    analyze_note(args, &mut total);
    if args.baseline || args.analyze {
        total.notes.push(format!(
            "the TCP baseline is {n} streams at once, their Gb/s added"
        ));
        for r in &mut total.results {
            let dur = Duration::from_secs_f64(r.seconds.clamp(0.5, 10.0));
            let tcp = tcp_streams(r.size, dur, n)?;
            r.baseline = Some(Baseline {
                kind: "tcp_stream",
                tcp_gbps: Some(tcp),
                udp_gso_gbps: None,
                udp_gso_datagram: None,
                udp_typical_us: None,
                rc_shaped_typical_us: None,
                ratio: r.bw_gbps.unwrap_or(0.0) / tcp.max(1e-9),
            });
        }
    }
    Ok(total)
}

/// One report for all pairs: every size's rates and counts added, the
/// longest time, every pair's endpoints (so the QP count is the total),
/// counters added, and each pair's own bandwidth as a note.
fn add_up(reports: Vec<Report>) -> Result<Report> {
    let mut it = reports.into_iter();
    let Some(mut total) = it.next() else {
        fail!(Run, "--threads ran no pair");
    };
    let mut per_thread: Vec<Vec<f64>> = total
        .results
        .iter()
        .map(|r| vec![r.bw_gbps.unwrap_or(0.0)])
        .collect();
    for r in &mut total.results {
        r.profile = None;
        r.analysis = None;
    }
    for rep in it {
        for ((t, r), each) in total
            .results
            .iter_mut()
            .zip(&rep.results)
            .zip(&mut per_thread)
        {
            t.iterations += r.iterations;
            t.seconds = t.seconds.max(r.seconds);
            t.bw_gbps = Some(t.bw_gbps.unwrap_or(0.0) + r.bw_gbps.unwrap_or(0.0));
            t.bw_peak_mib = Some(t.bw_peak_mib.unwrap_or(0.0) + r.bw_peak_mib.unwrap_or(0.0));
            t.bw_avg_mib = Some(t.bw_avg_mib.unwrap_or(0.0) + r.bw_avg_mib.unwrap_or(0.0));
            t.msg_rate_mpps += r.msg_rate_mpps;
            t.verified = match (t.verified, r.verified) {
                (Some(a), Some(b)) => Some(a && b),
                (a, b) => a.or(b),
            };
            each.push(r.bw_gbps.unwrap_or(0.0));
        }
        total.local.extend(rep.local);
        total.remote.extend(rep.remote);
        total.counters = add_stats(&total.counters, &rep.counters)?;
        total.server_counters = add_stats(&total.server_counters, &rep.server_counters)?;
        total.details.extend(rep.details);
        total.notes.extend(rep.notes);
    }
    for (r, each) in total.results.iter().zip(&per_thread) {
        let list: Vec<String> = each.iter().map(|g| format!("{g:.2}")).collect();
        total.notes.push(format!(
            "{} B: {} threads, Gb/s each: {}",
            r.size,
            each.len(),
            list.join(", ")
        ));
    }
    Ok(total)
}

/// Two sets of counters added field by field (through their serde form, so
/// a counter added to [`Stats`] later is added here too).
fn add_stats(a: &Stats, b: &Stats) -> Result<Stats> {
    fn add(a: &mut serde_json::Value, b: &serde_json::Value) {
        use serde_json::Value;
        match (a, b) {
            (Value::Object(x), Value::Object(y)) => {
                for (k, v) in x.iter_mut() {
                    if let Some(w) = y.get(k) {
                        add(v, w);
                    }
                }
            }
            (Value::Number(x), Value::Number(y)) => {
                if let (Some(p), Some(q)) = (x.as_u64(), y.as_u64()) {
                    *x = p.saturating_add(q).into();
                } else if let (Some(p), Some(q)) = (x.as_f64(), y.as_f64())
                    && let Some(s) = serde_json::Number::from_f64(p + q)
                {
                    *x = s;
                }
            }
            _ => {}
        }
    }
    let bad = |e: serde_json::Error| Error::Run(format!("adding the threads' counters: {e}"));
    let mut v = serde_json::to_value(a).map_err(bad)?;
    add(&mut v, &serde_json::to_value(b).map_err(bad)?);
    serde_json::from_value(v).map_err(bad)
}

/// `n` TCP streams of `size`-byte writes at once for `dur`, their Gb/s added.
fn tcp_streams(size: usize, dur: Duration, n: u32) -> Result<f64> {
    let handles: Vec<_> = (0..n)
        .map(|_| std::thread::spawn(move || roce_verbs::baseline::tcp_stream(size, dur)))
        .collect();
    let mut sum = 0.0;
    for h in handles {
        let t = h
            .join()
            .map_err(|_| Error::Run("a TCP baseline thread panicked".into()))?
            .map_err(|source| Error::Io {
                what: "the TCP baseline".into(),
                source,
            })?;
        sum += t.gbps();
    }
    Ok(sum)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counters_add_field_by_field() {
        let a = Stats {
            tx_packets: 3,
            rx_packets: 5,
            retransmissions: 1,
            ..Default::default()
        };
        let b = Stats {
            tx_packets: 10,
            rx_packets: 1,
            icrc_errors: 2,
            ..Default::default()
        };
        let s = add_stats(&a, &b).unwrap();
        assert_eq!(
            (s.tx_packets, s.rx_packets, s.retransmissions, s.icrc_errors),
            (13, 6, 1, 2)
        );
    }
}
