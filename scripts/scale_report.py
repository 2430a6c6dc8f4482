#!/usr/bin/env python3
"""Runs the simulator's scaling benchmarks (the 320-host, k=16 and k=32 fat
trees of `scenarios/`, 10 ms of WebSearch arrivals at 30 % load each) and
writes what they cost against fabric size: events, events per second (and as
a fraction of the 320-host figure), events per delivered packet and per hop,
user and wall time, peak memory, and memory per host, per switch port, per
flow and per QP (issue 12, part 4).

    scripts/scale_report.py run --out /tmp/scale --roce target/release/roce [--only k16] [--stop-us 300] [--rounds 3]
    scripts/scale_report.py run --out /tmp/scale --roce target/release/roce --memory --stop-us 1000
    scripts/scale_report.py run --out /tmp/scale --roce target/release/roce --arrivals-us 1000 --rounds 3
    scripts/scale_report.py report --out /tmp/scale [--write scenarios/SCALE.md]

`run` stages each scenario (with `stop_us` added when `--stop-us` is given,
and its workload's `duration_us` set to `--arrivals-us` when that is: the
issue's own k=32 figure was for 1 ms of arrivals, run until every flow
finished) into OUT/stage/ beside a link to `scenarios/workloads`, runs it alone under
`/usr/bin/time -v` with `--no-plots`, and appends to OUT/runs.json what the
run's `summary.json` and `time` reported. Rounds interleave the fabrics.
With `--memory` the runs also print where memory goes at the run's largest
footprint (`roce sim --memory`, which samples the simulator's structures
between batches of events and so costs time): those runs are kept for the
memory columns only, never timed.

`report` takes, per fabric and cut, the median of every timed round
(events/s is the summary's: events over the run's wall time, setup
included) and the fabric's latest memory run, and writes a Markdown table
to stdout or between the `<!-- generated scale -->` markers of `--write`'s
document.

Python 3, standard library only.
"""

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
SCENARIOS = os.path.join(REPO, "scenarios")

# (short name, scenario file, hosts), smallest first: the first is the
# baseline of the events/s ratio.
FABRICS = [
    ("fat320", "fattree320_websearch.toml", 320),
    ("k16", "fattree_k16_websearch.toml", 1024),
    ("k32", "fattree_k32_websearch.toml", 8192),
]

BEGIN, END = "<!-- generated scale -->", "<!-- end generated scale -->"


def stage(scenario, stop_us, where, arrivals_us=None):
    """A copy of `scenario` in `where` (its workloads reachable as in
    `scenarios/`), with `stop_us` set after its `seed` line when given,
    and every workload's `duration_us` set to `arrivals_us` when given;
    returns its path."""
    os.makedirs(where, exist_ok=True)
    link = os.path.join(where, "workloads")
    if not os.path.exists(link):
        os.symlink(os.path.join(SCENARIOS, "workloads"), link)
    out = []
    seen_seed = False
    durations = 0
    with open(os.path.join(SCENARIOS, scenario)) as f:
        for line in f:
            if re.match(r"\s*stop_us\s*=", line):
                continue
            if arrivals_us is not None and re.match(r"\s*duration_us\s*=", line):
                line = f"duration_us = {arrivals_us}\n"
                durations += 1
            out.append(line)
            if stop_us is not None and not seen_seed and re.match(r"\s*seed\s*=", line):
                out.append(f"stop_us = {stop_us}\n")
                seen_seed = True
    if stop_us is not None and not seen_seed:
        sys.exit(f"{scenario}: no top-level `seed` line to put `stop_us` after")
    if arrivals_us is not None and durations == 0:
        sys.exit(f"{scenario}: no workload `duration_us` line to set")
    # The staged copy's name: the scenario's own (a path given for it
    # stays where it is: the copy goes into `where`, never beside it).
    name = os.path.basename(scenario)
    tag = (name[:-len(".toml")]
           + (f"_arrivals{arrivals_us}us" if arrivals_us is not None else "")
           + (f"_cut{stop_us}us" if stop_us is not None else ""))
    path = os.path.join(where, tag + ".toml")
    with open(path, "w") as f:
        f.writelines(out)
    return path


# `roce sim --memory`'s per-unit line (crates/sim/src/sim/footprint.rs).
PER_UNIT = re.compile(
    r"per host (\d+) B, per switch port (\d+) B, per flow record (\d+) B, "
    r"per live QP (\d+) B \((\d+) QPs\), per packet slot (\d+) B \((\d+) live, (\d+) slots\)")
TOTAL = re.compile(r"^\s+total\s+([\d.]+) MB", re.M)


def time_field(text, name):
    m = re.search(re.escape(name) + r": ([\d.:]+)", text)
    return m.group(1) if m else None


def run_one(roce, path, out_dir, memory):
    cmd = ["/usr/bin/time", "-v", roce, "sim", path, "--no-plots", "--out", out_dir]
    if memory:
        cmd.append("--memory")
    load = os.getloadavg()[0]
    t0 = time.time()
    p = subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    wall = time.time() - t0
    if p.returncode != 0:
        sys.exit(f"{' '.join(cmd)} failed ({p.returncode}):\n{p.stderr[-3000:]}")
    with open(os.path.join(out_dir, "summary.json")) as f:
        s = json.load(f)
    rec = {
        "wall_s": round(wall, 2),
        "user_s": float(time_field(p.stderr, "User time (seconds)") or "nan"),
        "peak_kb": int(time_field(p.stderr, "Maximum resident set size (kbytes)") or 0),
        "load": round(load, 2),
        "events": s["events"],
        "events_per_second": s["events_per_second"],
        "sim_wall_s": s["wall_seconds"],
        "events_per_delivered_packet": s["events_per_delivered_packet"],
        "events_per_hop": s["events_per_hop"],
        "simulated_us": s["simulated_us"],
        "flows": s["flows"]["total"],
        "finished": s["flows"]["finished"],
    }
    if memory:
        m = PER_UNIT.search(p.stderr)
        t = TOTAL.search(p.stderr)
        if not m:
            sys.exit(f"{path}: no per-unit memory line in roce's output")
        keys = ("host_b", "switch_port_b", "flow_b", "qp_b", "qps", "packet_slot_b",
                "live_packets", "packet_slots")
        rec["memory"] = dict(zip(keys, (int(x) for x in m.groups())))
        rec["memory"]["heap_mb"] = float(t.group(1)) if t else None
    return rec


def run(a):
    os.makedirs(a.out, exist_ok=True)
    jpath = os.path.join(a.out, "runs.json")
    runs = json.load(open(jpath)) if os.path.exists(jpath) else []
    roce = os.path.abspath(a.roce)
    fabrics = [f for f in FABRICS if not a.only or f[0] in a.only]
    if not fabrics:
        sys.exit(f"--only: none of {a.only} is one of {[f[0] for f in FABRICS]}")
    for rnd in range(a.rounds):
        for name, scenario, hosts in fabrics:
            path = stage(scenario, a.stop_us, os.path.join(a.out, "stage"), a.arrivals_us)
            kind = "memory" if a.memory else "timed"
            out_dir = os.path.join(a.out, "runs", f"{name}-{kind}-{len(runs)}")
            rec = run_one(roce, path, out_dir, a.memory)
            rec.update(fabric=name, hosts=hosts, stop_us=a.stop_us, kind=kind,
                       roce=roce, round=rnd, arrivals_us=a.arrivals_us)
            runs.append(rec)
            print(f"{name} ({kind}, {fmt_cut(a.stop_us, a.arrivals_us)}): wall {rec['wall_s']} s, user "
                  f"{rec['user_s']} s, {rec['events']} events, "
                  f"{rec['events_per_second'] / 1e6:.2f} M/s, peak {rec['peak_kb'] // 1024} MB",
                  flush=True)
            with open(jpath, "w") as f:
                json.dump(runs, f, indent=1)


def fmt_cut(stop_us, arrivals_us=None):
    run = "whole run" if stop_us is None else f"cut at {stop_us} µs"
    if arrivals_us is None:
        return run
    return f"{arrivals_us / 1000:g} ms of arrivals, {run}"


def run_key(r):
    """Runs compare within one workload and cut: (arrivals, cut), -1 for
    the scenario's own arrivals or no cut (records written before
    `--arrivals-us` existed have no such field)."""
    a = r.get("arrivals_us")
    return (-1 if a is None else a, -1 if r["stop_us"] is None else r["stop_us"])


def fmt_run(r):
    return fmt_cut(r["stop_us"], r.get("arrivals_us"))


def table(runs):
    """Markdown: one row per fabric and cut of the timed runs (medians
    over rounds), each with the heap figures of the fabric's latest memory
    run (whatever its cut, named in the cell)."""
    order = {f[0]: i for i, f in enumerate(FABRICS)}
    timed_groups = {}
    memory = {}
    for r in runs:
        if r["kind"] == "memory":
            memory[r["fabric"]] = r
        else:
            timed_groups.setdefault((run_key(r), r["fabric"]), []).append(r)
    # A fabric with memory runs only still gets a row.
    for fabric, r in memory.items():
        if not any(f == fabric for _, f in timed_groups):
            timed_groups[(run_key(r), fabric)] = []
    base = {}
    lines = [
        "| fabric | hosts | run | flows (finished) | events | events/s | of 320 hosts' | "
        "events per packet / per hop | user s | wall s | peak RSS | RSS per host | "
        "heap per host / switch port / flow / live QP | timed rounds |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for (cut, fabric) in sorted(timed_groups, key=lambda k: (k[0], order.get(k[1], 99))):
        timed = timed_groups[(cut, fabric)]
        mem = memory.get(fabric)
        hosts = (timed or [mem])[0]["hosts"]
        cells = [fabric, f"{hosts:,}", fmt_run((timed or [mem])[0])]
        if timed:
            def med(k):
                return statistics.median(r[k] for r in timed)
            eps = med("events_per_second")
            if fabric == FABRICS[0][0]:
                base[cut] = eps
            ratio = f"{eps / base[cut]:.2f}" if cut in base else "–"
            peak = med("peak_kb")
            cells += [
                f"{timed[0]['flows']:,} ({timed[0]['finished']:,})",
                f"{med('events') / 1e6:,.1f} M",
                f"{eps / 1e6:.2f} M",
                ratio,
                f"{med('events_per_delivered_packet'):.2f} / {med('events_per_hop'):.3f}",
                f"{med('user_s'):.1f}",
                f"{med('wall_s'):.1f}",
                f"{peak / 1024:,.0f} MB",
                f"{peak / hosts:,.0f} KB",
            ]
        else:
            cells += ["–"] * 9
        if mem:
            m = mem["memory"]
            cells.append(f"{m['host_b']:,} / {m['switch_port_b']:,} / {m['flow_b']} / "
                         f"{m['qp_b']:,} B ({fmt_run(mem)}, "
                         f"{m['qps']:,} live QPs)")
        else:
            cells.append("–")
        cells.append(str(len(timed)))
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def report(a):
    runs = []
    for d in a.out:
        with open(os.path.join(d, "runs.json")) as f:
            runs += json.load(f)
    t = table(runs)
    if not a.write:
        print(t, end="")
        return
    with open(a.write) as f:
        doc = f.read()
    i, j = doc.find(BEGIN), doc.find(END)
    if i < 0 or j < i:
        sys.exit(f"{a.write}: no {BEGIN} ... {END} markers")
    doc = doc[:i + len(BEGIN)] + "\n" + t + doc[j:]
    with open(a.write, "w") as f:
        f.write(doc)


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("run", help="run the scaling scenarios, each alone")
    r.add_argument("--out", required=True)
    r.add_argument("--roce", default=os.path.join(REPO, "target", "release", "roce"))
    r.add_argument("--only", nargs="*", help=f"of {[f[0] for f in FABRICS]}")
    r.add_argument("--stop-us", type=int, help="cut each run at this simulated time")
    r.add_argument("--arrivals-us", type=int,
                   help="set every workload's duration_us (arrivals) to this")
    r.add_argument("--rounds", type=int, default=1, help="interleaved rounds")
    r.add_argument("--memory", action="store_true",
                   help="print where memory goes (slower; kept out of the timings)")
    p = sub.add_parser("report", help="the Markdown table from one or more run folders")
    p.add_argument("--out", required=True, nargs="+")
    p.add_argument("--write", help="replace the generated section of this document")
    a = ap.parse_args()
    {"run": run, "report": report}[a.cmd](a)


if __name__ == "__main__":
    main()
