//! The report: perftest's tables, or one JSON object.

use crate::results::{Report, SizeResult, whole_round_trip};
use crate::{Kind, Options, Result, Test};
use std::fmt::Write as _;

/// One line under the table: the kernel's figure and roce's ratio to it.
fn print_baseline(out: &mut String, test: Test, x: &SizeResult) -> std::fmt::Result {
    let Some(b) = x.baseline else {
        let _ = writeln!(
            out,
            " baseline {} B: none (a UDP datagram holds at most {} bytes of it)",
            x.size,
            roce_verbs::baseline::MAX_PINGPONG_SIZE
        );
        return Ok(());
    };
    if let Some(g) = b.tcp_gbps {
        let _ = writeln!(
            out,
            " baseline {} B: TCP stream of the same writes {g:.2} Gb/s; {} {:.2} Gb/s = {:.2}x TCP",
            x.size,
            test.name(),
            x.bw_gbps.unwrap_or(0.0),
            b.ratio
        );
        if let (Some(c), Some(seg)) = (b.udp_gso_gbps, b.udp_gso_datagram) {
            let _ = writeln!(
                out,
                " ceiling {} B: UDP GSO into GRO of {seg} B datagrams {c:.2} Gb/s (kernel only, not read); {} = {:.2}x of it",
                x.size,
                test.name(),
                x.bw_gbps.unwrap_or(0.0) / c.max(1e-9)
            );
        }
    } else if let Some(u) = b.udp_typical_us {
        let what = if whole_round_trip(test) {
            "round trip"
        } else {
            "half round trip"
        };
        let shaped = b
            .rc_shaped_typical_us
            .map_or(String::new(), |s| format!(" (RC-shaped {s:.2} us)"));
        let _ = writeln!(
            out,
            " baseline {} B: UDP ping-pong t_typical {u:.2} us, {what}{shaped}; {} {:.2} us = {:.2}x UDP",
            x.size,
            test.name(),
            x.latency_us.map_or(0.0, |l| l.typical),
            b.ratio
        );
    }
    Ok(())
}

impl Report {
    /// Whether every byte checked out (`None` without `--verify`).
    pub fn verified(&self, args: &Options) -> Option<bool> {
        args.verify
            .then(|| self.results.iter().all(|x| x.verified == Some(true)))
    }

    /// The report as perftest prints it (or one JSON object with
    /// `--json`), every line ending in a newline.
    pub fn render(&self, args: &Options) -> Result<String> {
        let r = self;
        let test = r.test;
        let mut out = String::new();
        let verified = r.verified(args);
        if args.json {
            let mut v = serde_json::json!({
                "test": test.name(),
                "sizes": r.results.iter().map(|x| x.size).collect::<Vec<_>>(),
                "qps": r.local.len(),
                "connection": args.connection.name(),
                "use_srq": args.use_srq,
                "mtu": r.local.first().map(|e| e.mtu),
                "results": r.results,
                "verified": verified,
                "counters": r.counters,
                "server_counters": r.server_counters,
                "cc": r.cc,
            });
            if let [one] = r.results.as_slice() {
                let o = serde_json::to_value(one)?;
                if let (Some(dst), Some(src)) = (v.as_object_mut(), o.as_object()) {
                    for (k, val) in src {
                        if k != "verified" {
                            dst.insert(k.clone(), val.clone());
                        }
                    }
                }
            }
            if !r.details.is_empty() {
                v["verify_errors"] = serde_json::json!(r.details);
            }
            let _ = writeln!(out, "{v}");
        } else {
            let line = "-".repeat(87);
            let _ = writeln!(out, "{line}");
            let _ = writeln!(out, "                    {}", test.title());
            let _ = writeln!(
                out,
                " Number of qps   : {:<8} Transport type : RoCEv2 (software, UDP)",
                r.local.len()
            );
            let _ = writeln!(
                out,
                " Connection type : {:<8} Using SRQ      : {}",
                args.connection.name(),
                if args.use_srq { "ON" } else { "OFF" }
            );
            if test.kind == Kind::Bw {
                let _ = writeln!(out, " TX depth        : {}", args.tx_depth);
                let _ = writeln!(out, " CQ Moderation   : {}", args.cq_mod);
            }
            if let Some(e) = r.local.first() {
                let _ = writeln!(out, " Mtu             : {}[B]", e.mtu);
            }
            let _ = writeln!(out, " Max inline data : {}[B]", args.inline());
            let _ = writeln!(out, "{line}");
            for (l, m) in r.local.iter().zip(&r.remote) {
                for (who, e) in [("local", l), ("remote", m)] {
                    let _ = writeln!(
                        out,
                        " {who} address: IP {} UDP {} QPN {:#06x} PSN {:#08x} RKey {:#08x} VAddr {:#016x}",
                        e.ip, e.udp_port, e.qpn, e.psn, e.rkey, e.addr
                    );
                }
            }
            let _ = writeln!(out, "{line}");
            match test.kind {
                Kind::Bw => {
                    let _ = writeln!(
                        out,
                        " #bytes     #iterations    BW peak[MiB/sec]    BW average[MiB/sec]   MsgRate[Mpps]"
                    );
                    for x in &r.results {
                        let _ = writeln!(
                            out,
                            " {:<10} {:<10}       {:<10.2}          {:<10.2}            {:.6}",
                            x.size,
                            x.iterations,
                            x.bw_peak_mib.unwrap_or(0.0),
                            x.bw_avg_mib.unwrap_or(0.0),
                            x.msg_rate_mpps
                        );
                    }
                }
                Kind::Lat => {
                    let _ = writeln!(
                        out,
                        " #bytes #iterations    t_min[usec]    t_max[usec]  t_typical[usec]    t_avg[usec]    t_stdev[usec]   99% percentile[usec]   99.9% percentile[usec]"
                    );
                    for x in &r.results {
                        if let Some(l) = x.latency_us {
                            let _ = writeln!(
                                out,
                                " {:<6} {:<10}     {:<10.2}     {:<10.2}   {:<10.2}         {:<10.2}     {:<10.2}      {:<10.2}             {:<10.2}",
                                x.size,
                                x.iterations,
                                l.min,
                                l.max,
                                l.typical,
                                l.avg,
                                l.stdev,
                                l.p99,
                                l.p999
                            );
                        }
                    }
                }
            }
            if args.baseline || args.analyze {
                for x in &r.results {
                    let _ = print_baseline(&mut out, test, x);
                }
            }
            for x in &r.results {
                if let Some(a) = &x.analysis {
                    let _ = writeln!(out, " where roce's engines spent the {} B run:", x.size);
                    let _ = write!(out, "{}", a.to_table());
                }
            }
            if args.analyze && r.results.iter().all(|x| x.analysis.is_none()) {
                let _ = writeln!(out, " no stage profile: the engines ran with --no-profile");
            }
            let _ = writeln!(out, "{line}");
            let c = &r.counters;
            let _ = writeln!(
                out,
                " counters: {} pkts out, {} in; {} retransmitted; NAKs {} out {} in; RNR {} out {} in; CNPs {} out {} in; ICRC errors {}; malformed {}; unknown QP {}; not from the peer {}",
                c.tx_packets,
                c.rx_packets,
                c.retransmissions,
                c.naks_tx,
                c.naks_rx,
                c.rnr_naks_tx,
                c.rnr_naks_rx,
                c.cnps_tx,
                c.cnps_rx,
                c.icrc_errors,
                c.malformed,
                c.unknown_qp,
                c.bad_source
            );
            let f = c.faults;
            if f.lost + f.reordered + f.duplicated + f.corrupted + f.ce_marked > 0 {
                let _ = writeln!(
                    out,
                    " faults injected: {} lost, {} reordered, {} duplicated, {} corrupted, {} CE-marked",
                    f.lost, f.reordered, f.duplicated, f.corrupted, f.ce_marked
                );
            }
            let cc = &r.cc;
            if cc.algorithm != "none" || cc.cnps_rx > 0 {
                let g =
                    |x: Option<f64>| x.map_or("line rate".to_string(), |v| format!("{v:.2} Gb/s"));
                let _ = writeln!(
                    out,
                    " congestion control {}: {} CNPs in, {} rate cuts; rate now {}, lowest {}",
                    cc.algorithm,
                    cc.cnps_rx,
                    cc.rate_cuts,
                    g(cc.rate_gbps),
                    g(cc.min_rate_gbps)
                );
            }
            let red = r.server_counters.red;
            if red.samples > 0 {
                let _ = writeln!(
                    out,
                    " server's RED marker: {} marked CE; backlog mean {} B, max {} B, above Kmax {} of {} readings",
                    red.marked,
                    red.backlog_mean_bytes,
                    red.backlog_max_bytes,
                    red.above_kmax,
                    red.samples
                );
            }
            if let Some(v) = verified {
                let _ = writeln!(
                    out,
                    " data verification: {}",
                    if v {
                        "every byte checked: OK"
                    } else {
                        "MISMATCH"
                    }
                );
                for d in &r.details {
                    let _ = writeln!(out, "   {d}");
                }
            }
        }
        Ok(out)
    }
}
