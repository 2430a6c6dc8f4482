#!/usr/bin/env python3
"""Runs the experiments of `scenarios/hpcc/` through the HPCC ns-3 simulator
and through `roce sim --hpcc-config`, and regenerates the figures of
`scenarios/HPCC_COMPARISON.md` from their outputs.

No ns-3 code is in this repository: `run --ns3 DIR` takes the `simulation/`
folder of a separate, already built checkout of
github.com/alibaba-edu/High-Precision-Congestion-Control (see the document
for the build recipe).

    scripts/hpcc_compare.py gen-flows --time 0.005 --seed 5 -o scenarios/hpcc/fat5ms/flow_websearch_fat320_5ms.txt
    scripts/hpcc_compare.py run --out /tmp/cmp --roce target/release/roce [--ns3 /work/ns3/simulation] [--only fat5ms]
    scripts/hpcc_compare.py report --out /tmp/cmp [--write scenarios/HPCC_COMPARISON.md]
    scripts/hpcc_compare.py report --out /tmp/cmp1 /tmp/cmp2 --section speed --write scenarios/HPCC_COMPARISON.md

`run` copies each config and its inputs into OUT/ns3/ and OUT/ours/ and runs
both simulators there (one at a time, each alone), so their FCT and PFC
files land at the paths the configs name; it records wall time and peak
memory (`/usr/bin/time -v`) in OUT/times.json. `--also LABEL=BIN` times
another build of ours (a profile-guided one, say) right after the first on
each config, in OUT/ours-LABEL/, and stops if it writes different output
files; the speed table gives it a row of its own. `report` computes the
slowdown figures as the HPCC repository's `analysis/fct_analysis.py` does
(FCT over the file's last column, at least 1; percentile p is the value at
index floor(n * p) of the sorted list) and writes them as Markdown, to
stdout or between the `<!-- generated -->` markers of the document. It also
writes the speed table ("Speed side by side") between its own
`<!-- generated speed -->` markers: per config, the median wall time of
every round in the times.json of each --out folder (folders in the order
given, rounds in the order run, listed in brackets), the median peak memory
(a range when the rounds round to different MB), and the ratio of the
medians. `--section agreement|speed` writes one of the two alone.

Python 3, standard library only.
"""

import argparse
import bisect
import filecmp
import json
import math
import os
import random
import re
import shutil
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
HPCC_DIR = os.path.join(REPO, "scenarios", "hpcc")
WORKLOADS = os.path.join(REPO, "scenarios", "workloads")

# ---------------------------------------------------------------- flows


def read_cdf(path):
    """`size percent` points; sampled by linear interpolation."""
    pts = []
    with open(path) as f:
        for line in f:
            v = line.split()
            if len(v) >= 2:
                pts.append((float(v[0]), float(v[1])))
    if not pts or pts[0][1] != 0 or pts[-1][1] != 100:
        sys.exit(f"{path}: a CDF must run from 0 to 100 percent")
    return pts


def cdf_mean(pts):
    return sum((x0 + x1) / 2 * (y1 - y0) for (x0, y0), (x1, y1) in zip(pts, pts[1:])) / 100


def cdf_sample(pts, rng):
    y = rng.random() * 100
    ys = [p[1] for p in pts]
    i = max(1, bisect.bisect_left(ys, y))
    (x0, y0), (x1, y1) = pts[i - 1], pts[i]
    return x0 + (x1 - x0) / (y1 - y0) * (y - y0)


def topo_hosts(path):
    with open(path) as f:
        toks = f.read().split()
    n, s = int(toks[0]), int(toks[1])
    switches = {int(t) for t in toks[3 : 3 + s]}
    return [i for i in range(n) if i not in switches]


def gen_flows(a):
    """Poisson arrivals per host at `load` of `bw`, sizes from the CDF,
    destinations uniform over the other hosts (scenarios/workloads/README.md)."""
    rng = random.Random(a.seed)
    pts = read_cdf(a.cdf)
    hosts = topo_hosts(a.topo)
    mean_gap_s = cdf_mean(pts) * 8 / (a.bw * a.load)
    flows = []
    for src in hosts:
        t = rng.expovariate(1 / mean_gap_s)
        while t < a.time:
            dst = src
            while dst == src:
                dst = rng.choice(hosts)
            size = max(1, int(round(cdf_sample(pts, rng))))
            flows.append((a.start + t, src, dst, size))
            t += rng.expovariate(1 / mean_gap_s)
    flows.sort()
    with open(a.out, "w") as f:
        f.write(f"{len(flows)}\n")
        for t, src, dst, size in flows:
            f.write(f"{src} {dst} 3 100 {size} {t:.9f}\n")
    print(f"{a.out}: {len(flows)} flows, mean size {cdf_mean(pts):.0f} B, "
          f"{a.load:.0%} of {a.bw / 1e9:g} Gb/s per host for {a.time * 1e3:g} ms")


def gen_topo_dual(a):
    """A two-tier fabric of multi-homed hosts in the HPCC topology format:
    `racks` racks of `hosts` hosts, each host on both ToRs of its rack
    (its two links on consecutive lines, as ns-3 numbers a host's NICs by
    line order), every ToR on every spine."""
    n_hosts = a.racks * a.hosts
    tors = [n_hosts + i for i in range(2 * a.racks)]
    spines = [n_hosts + 2 * a.racks + i for i in range(a.spines)]
    links = []
    for r in range(a.racks):
        for h in range(r * a.hosts, (r + 1) * a.hosts):
            for t in tors[2 * r:2 * r + 2]:
                links.append((h, t, a.host_bw))
    for t in tors:
        for s in spines:
            links.append((t, s, a.fabric_bw))
    with open(a.out, "w") as f:
        f.write(f"{n_hosts + len(tors) + len(spines)} {len(tors) + len(spines)} {len(links)}\n")
        f.write(" ".join(str(x) for x in tors + spines) + "\n")
        for x, y, bw in links:
            f.write(f"{x} {y} {bw}Gbps {a.delay_ns}ns 0\n")
    print(f"{a.out}: {n_hosts} hosts on {len(tors)} ToRs in pairs, {len(spines)} spines, "
          f"{len(links)} links")


# ---------------------------------------------------------------- running


def config_keys(path):
    kv = {}
    with open(path) as f:
        for line in f:
            v = line.split("#")[0].split()
            if v:
                kv[v[0]] = v[1:]
    return kv


def configs(only):
    """Config paths relative to scenarios/hpcc/, its subfolders' too (the
    large runs live in `fat5ms/`, away from the test that runs every
    top-level config in a debug build)."""
    names = []
    for root, _, files in os.walk(HPCC_DIR):
        rel = os.path.relpath(root, HPCC_DIR)
        names += [os.path.normpath(os.path.join(rel, f)) for f in files
                  if f.startswith("config_") and f.endswith(".txt")]
    names.sort()
    if only:
        names = [n for n in names if any(o in n for o in only)]
    return names


def tag_of(name):
    return os.path.basename(name)[len("config_"):-len(".txt")]


INPUT_KEYS = ("TOPOLOGY_FILE", "FLOW_FILE", "TRACE_FILE")


def stage(cfg_name, where):
    """Copies a config and the inputs it names into `where`, the inputs by
    their file names (the copied config names them so); returns the
    config's file name there."""
    os.makedirs(where, exist_ok=True)
    src = os.path.join(HPCC_DIR, cfg_name)
    base = os.path.dirname(src)
    lines = []
    with open(src) as f:
        for line in f:
            v = line.split()
            if v and v[0] in INPUT_KEYS and len(v) > 1:
                dst = os.path.join(where, os.path.basename(v[1]))
                if not os.path.exists(dst):
                    shutil.copy(os.path.join(base, v[1]), dst)
                line = f"{v[0]} {os.path.basename(v[1])}\n"
            lines.append(line)
    name = os.path.basename(cfg_name)
    with open(os.path.join(where, name), "w") as f:
        f.writelines(lines)
    return name


def timed(cmd, cwd, env=None, log=None):
    """Runs `cmd` under /usr/bin/time -v; returns (wall s, peak RSS kB, load average)."""
    load = os.getloadavg()[0]
    t0 = time.time()
    with open(log or os.devnull, "w") as out:
        p = subprocess.run(["/usr/bin/time", "-v"] + cmd, cwd=cwd, env=env, stdout=out,
                           stderr=subprocess.PIPE, text=True)
    wall = time.time() - t0
    if p.returncode != 0:
        sys.exit(f"{' '.join(cmd)} in {cwd} failed ({p.returncode}):\n{p.stderr[-3000:]}")
    rss = re.search(r"Maximum resident set size \(kbytes\): (\d+)", p.stderr)
    return {"wall_s": round(wall, 2), "peak_kb": int(rss.group(1)) if rss else None,
            "load": round(load, 2)}


def run(a):
    os.makedirs(a.out, exist_ok=True)
    tpath = os.path.join(a.out, "times.json")
    times = json.load(open(tpath)) if os.path.exists(tpath) else []
    roce = os.path.abspath(a.roce)
    also = parse_also(a.also)
    for rnd in range(a.rounds):
        for cfg in configs(a.only):
            tag = tag_of(cfg)
            if a.ns3:
                d = os.path.join(a.out, "ns3")
                name = stage(cfg, d)
                sim = os.path.abspath(a.ns3)
                env = dict(os.environ, LD_LIBRARY_PATH=os.path.join(sim, "build"))
                if a.draw is not None:
                    # third.cc fixes its random streams, not the run
                    # number: ns-3 reads this from its environment.
                    env["NS_GLOBAL_VALUE"] = f"RngRun={a.draw}"
                t = timed([os.path.join(sim, "build", "scratch", "third"), name], d, env,
                          os.path.join(d, f"log_{tag}.txt"))
                times.append(dict(t, sim="ns-3", config=tag, round=rnd))
                print(f"ns-3 {tag}: {t}", flush=True)
            seed = ["--seed", str(a.draw)] if a.draw is not None else []
            # Ours, then each `--also` build right after it (the same
            # inputs in a folder of its own), which must compute the same
            # files as ours.
            first = None
            for sim, path, folder in [("ours", roce, "ours")] + [
                    (f"ours:{label}", p, f"ours-{label}") for label, p in also]:
                d = os.path.join(a.out, folder)
                name = stage(cfg, d)
                t = timed([path, "sim", "--hpcc-config", name, "--no-plots", "--out",
                           f"roce-{tag}"] + seed, d, log=os.path.join(d, f"log_{tag}.txt"))
                times.append(dict(t, sim=sim, config=tag, round=rnd))
                print(f"{sim} {tag}: {t}", flush=True)
                if first is None:
                    first = d
                elif differ := outputs_differ(first, d, name):
                    sys.exit(f"build {sim[len('ours:'):]} ({path}) wrote a different {differ} "
                             f"than {roce} on {tag}")
            json.dump(times, open(tpath, "w"), indent=1)


# What a marker name or a build's label may hold.
LABEL_RE = r"[A-Za-z0-9_-]+"


def parse_also(specs):
    """`--also LABEL=BIN` options as (label, absolute path) pairs."""
    out = []
    for spec in specs or []:
        label, sep, path = spec.partition("=")
        if not sep or not re.fullmatch(LABEL_RE, label) or not path:
            sys.exit(f"--also {spec!r}: expected LABEL=PATH, the label in letters, digits, "
                     "'_' and '-'")
        if not os.access(path, os.X_OK):
            sys.exit(f"--also {spec!r}: {path} is not an executable file")
        out.append((label, os.path.abspath(path)))
    return out


def outputs_differ(d1, d2, cfg_name):
    """The first output file the config names (FCT, PFC, queue monitor)
    whose bytes differ between the run folders `d1` and `d2`, or None."""
    with open(os.path.join(d1, cfg_name)) as f:
        for line in f:
            v = line.split()
            if len(v) > 1 and v[0] in ("FCT_OUTPUT_FILE", "PFC_OUTPUT_FILE", "QLEN_MON_FILE"):
                p1, p2 = os.path.join(d1, v[1]), os.path.join(d2, v[1])
                if not os.path.exists(p1) and not os.path.exists(p2):
                    continue
                if not (os.path.exists(p1) and os.path.exists(p2)) or not filecmp.cmp(
                        p1, p2, shallow=False):
                    return v[1]
    return None


# ---------------------------------------------------------------- figures


def read_fct(path):
    """Rows of an FCT file: (sip, dip, size, start_ns, fct_ns, ideal_ns)."""
    rows = []
    with open(path) as f:
        for line in f:
            v = line.split()
            if len(v) >= 8:
                rows.append((v[0], v[1], int(v[4]), int(v[5]), int(v[6]), int(v[7])))
    return rows


def pctl(xs, p):
    """fct_analysis.py's get_pctl: the value at index floor(n * p)."""
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(len(xs) * p))] if xs else float("nan")


def slowdown(fct, ideal):
    s = fct / ideal
    return s if s > 1 else 1.0


# The RNIC's retransmission timeout in runs of ns-3 configs: 4.096 µs ×
# 2^qp_timeout, at its default 14 (no ns-3 key sets it). ns-3 has no
# timeout: a flow whose last packets, or whose NACK, are lost never
# finishes there and is missing from its FCT file. A flow of ours that
# took this long finished only through the timeout, the same loss class;
# the report leaves such flows out of both sides, as ns-3's missing ones
# are (and says how many).
RTO_NS = 4096 * 2 ** 14


def drop_timed_out(ns3, pairs):
    """`ns3` and `pairs` without the pairs whose flow of ours took at
    least `RTO_NS`, and how many those were."""
    timed = {id(n) for n, o in pairs if o[4] >= RTO_NS}
    return ([r for r in ns3 if id(r) not in timed],
            [(n, o) for n, o in pairs if id(n) not in timed], len(timed))


def match(ns3, ours):
    """Pairs flows by source, destination, size and nearest start (ns-3
    turns start seconds into ns through a double, we round)."""
    by = {}
    for r in ours:
        by.setdefault((r[0], r[1], r[2]), []).append(r)
    pairs = []
    for r in ns3:
        cands = by.get((r[0], r[1], r[2]))
        if not cands:
            continue
        best = min(cands, key=lambda o: abs(o[3] - r[3]))
        if abs(best[3] - r[3]) <= 1000:
            cands.remove(best)
            pairs.append((r, best))
    return pairs


def read_pfc(path):
    """(pause lines, resume lines, pause lines at hosts)."""
    p = r = h = 0
    if not os.path.exists(path):
        return None
    with open(path) as f:
        for line in f:
            v = line.split()
            if len(v) < 5:
                continue
            if v[4] == "1":
                p += 1
                h += v[2] == "0"
            else:
                r += 1
    return p, r, h


def fmt(x, d=3):
    return f"{x:,.{d}f}"


def outputs(out, sim, cfg):
    kv = config_keys(os.path.join(HPCC_DIR, cfg))
    d = os.path.join(out, sim)
    fct = os.path.join(d, kv.get("FCT_OUTPUT_FILE", ["fct.txt"])[0])
    pfc = os.path.join(d, kv.get("PFC_OUTPUT_FILE", ["pfc.txt"])[0])
    return (read_fct(fct) if os.path.exists(fct) else None), read_pfc(pfc)


def median(xs):
    """The median: the middle value, or the mean of the two middle ones."""
    xs = sorted(xs)
    n = len(xs)
    return xs[n // 2] if n % 2 else (xs[n // 2 - 1] + xs[n // 2]) / 2


def peak_mb(ts):
    """Peak RSS of the rounds in MB (KiB / 1024): one figure when every round
    rounds to it, else the range."""
    mbs = [round(t["peak_kb"] / 1024) for t in ts if t.get("peak_kb") is not None]
    if not mbs:
        return ""
    lo, hi = min(mbs), max(mbs)
    return f"{lo}" if lo == hi else f"{lo}–{hi}"


def read_times(outs):
    """Every timing of the times.json of each folder, folders in the order
    given and each file's entries in the order they were run."""
    times = []
    for d in outs:
        tpath = os.path.join(d, "times.json")
        if os.path.exists(tpath):
            with open(tpath) as f:
                times += json.load(f)
    return times


def speed_table(times, tags):
    """The speed side-by-side table: per config, the median wall time over
    all rounds (each round in brackets, in the order run), peak memory and
    the ratio of the medians. Configs without both simulators' timings are
    left out. Builds timed with `run --also LABEL=BIN` get a row each,
    `tag (LABEL)`, under the config's, against the same ns-3 rounds.
    Returns the Markdown lines (none when nothing is timed)."""
    rows = []
    labels = []
    for t in times:
        if t["sim"].startswith("ours:") and t["sim"] not in labels:
            labels.append(t["sim"])
    for tag in tags:
        t3 = [t for t in times if t["config"] == tag and t["sim"] == "ns-3"]
        if not t3:
            continue
        w3 = median(t["wall_s"] for t in t3)
        each = lambda ts: ", ".join(f"{t['wall_s']:.1f}" for t in ts)
        for sim in ["ours"] + labels:
            to = [t for t in times if t["config"] == tag and t["sim"] == sim]
            if not to:
                continue
            wo = median(t["wall_s"] for t in to)
            name = tag if sim == "ours" else f"{tag} ({sim[len('ours:'):]})"
            rows.append(f"| {name} | {w3:.1f} ({each(t3)}) | {peak_mb(t3)} | "
                        f"{wo:.1f} ({each(to)}) | {peak_mb(to)} | {w3 / wo:.1f}× |")
    if not rows:
        return []
    return ["| run | ns-3 wall s | ns-3 peak MB | ours wall s | ours peak MB | ratio of medians |",
            "|---|---|---|---|---|---|"] + rows


GENERATED = ("<!-- generated: scripts/hpcc_compare.py report -->", "<!-- end generated -->")
GENERATED_SPEED = ("<!-- generated speed: scripts/hpcc_compare.py report -->",
                   "<!-- end generated speed -->")


def markers(name):
    """The agreement and speed markers of the generated sections named
    `name` (None: the document's main ones). A named pair lets a part of
    the configs (`--only pint`) keep a section of its own, regenerated
    without the others' outputs at hand."""
    if not name:
        return GENERATED, GENERATED_SPEED
    if not re.fullmatch(LABEL_RE, name):
        sys.exit(f"--markers {name!r}: letters, digits, '_' and '-' only")
    return ((f"<!-- generated {name}: scripts/hpcc_compare.py report -->",
             f"<!-- end generated {name} -->"),
            (f"<!-- generated {name} speed: scripts/hpcc_compare.py report -->",
             f"<!-- end generated {name} speed -->"))


def write_section(path, marks, text):
    """Replaces the section between `marks` in the document at `path`."""
    with open(path) as fd:
        doc = fd.read()
    with open(path, "w") as fd:
        fd.write(replace_between(doc, marks, text, path))
    print(f"wrote {path}")


def replace_between(doc, markers, text, name):
    """`doc` with the text between `markers` replaced by `text`."""
    start, end = markers
    if start not in doc or end not in doc:
        sys.exit(f"{name}: no `{start}` … `{end}` markers")
    head, rest = doc.split(start, 1)
    _, tail = rest.split(end, 1)
    return head + start + "\n" + text + "\n" + end + tail


def draws(a):
    """Each simulator's own slowdown percentiles over several draws (one
    run folder per draw: `run --draw N`): min–max (median) per percentile,
    flows of ours that finished only through the timeout left out, and
    the median against the median."""
    q = (0.5, 0.95, 0.99)
    L = ["| run | ns-3 min–max (median) | ours min–max (median) | median against median |",
         "|---|---|---|---|"]
    for cfg in configs(a.only):
        tag = tag_of(cfg)
        per = {"ns3": [], "ours": []}
        for out in a.out:
            for sim in per:
                rows, _ = outputs(out, sim, cfg)
                if rows is None:
                    continue
                if sim == "ours":
                    rows = [r for r in rows if r[4] < RTO_NS]
                xs = [slowdown(r[4], r[5]) for r in rows]
                per[sim].append([pctl(xs, p) for p in q])
        if not per["ns3"] or not per["ours"]:
            continue
        for i, p in enumerate(q):
            n = [d[i] for d in per["ns3"]]
            o = [d[i] for d in per["ours"]]
            mn, mo = median(n), median(o)
            L.append(f"| {tag} p{round(p * 100)} | {min(n):.3f}–{max(n):.3f} ({mn:.3f}) "
                     f"({len(n)} draws) | {min(o):.3f}–{max(o):.3f} ({mo:.3f}) ({len(o)} draws) "
                     f"| {(mo / mn - 1) * 100:+.1f} % |")
    text = "\n".join(L)
    if a.write:
        marks = (f"<!-- generated {a.markers}: scripts/hpcc_compare.py draws -->",
                 f"<!-- end generated {a.markers} -->")
        write_section(a.write, marks, text)
    else:
        print(text)


def report(a):
    agreement_marks, speed_marks = markers(a.markers)
    tags = [tag_of(c) for c in configs(a.only)]
    times = read_times(a.out)
    speed = "\n".join(speed_table(times, tags))
    if a.section == "speed":
        if not speed:
            sys.exit(f"no config has both simulators' timings in {', '.join(a.out)}")
        if a.write:
            write_section(a.write, speed_marks, speed)
        else:
            print(speed)
        return
    L = []
    res = {}
    for cfg in configs(a.only):
        tag = tag_of(cfg)
        # The first folder holding both simulators' outputs of the config.
        for out in a.out:
            n3, p3 = outputs(out, "ns3", cfg)
            ou, po = outputs(out, "ours", cfg)
            if n3 is not None and ou is not None:
                n3k, pairs, timed = drop_timed_out(n3, match(n3, ou))
                res[tag] = (n3k, p3, ou, po, pairs, timed, len(n3))
                break

    # Single flows on the pair.
    pair = [t for t in ("pair_none", "pair_hpcc") if t in res]
    if pair:
        L += ["Single flows on the pair (FCT ns; ours against ns-3):", ""]
        L.append("| size | " + " | ".join(f"{t[5:]}: ns-3 | ours" for t in pair) + " |")
        L.append("|---|" + "---|---|" * len(pair))
        sizes = sorted({r[0][2] for r in res[pair[0]][4]})
        for s in sizes:
            cells = []
            for t in pair:
                m = [p for p in res[t][4] if p[0][2] == s]
                if m:
                    n, o = m[0][0][4], m[0][1][4]
                    cells += [f"{n:,}", f"{o:,} ({(o / n - 1) * 100:+.1f} %)"]
                else:
                    cells += ["", ""]
            L.append(f"| {s:,} B | " + " | ".join(cells) + " |")
        L.append("")

    # Everything else: slowdown percentiles.
    L += ["Slowdown (FCT over the ideal, at least 1; percentile p = value at index ⌊n·p⌋) "
          "with each simulator's own ideal, and ours divided by ns-3's ideal (one "
          "denominator for both); per-flow FCT ratio ours / ns-3 (p5 / p50 / p95); "
          "PFC file lines (pause / resume, pauses at hosts). Flows of ours that finished only "
          "after the RNIC's retransmission timeout (67 ms; ns-3 has none, so the same losses leave "
          "a flow unfinished there) are left out of both sides, as the flows ns-3 never finished "
          "are; the flows column counts them:", "",
          "| run | flows | ns-3 p50 / p95 / p99 | ours p50 / p95 / p99 | ours ÷ ns-3 ideal p50 / p95 / p99 "
          "| Δ p50 / p95 / p99 | FCT ratio p5 / p50 / p95 | PFC ns-3 | PFC ours |",
          "|---|---|---|---|---|---|---|---|---|"]
    for tag, (n3, p3, ou, po, pairs, timed, n3_all) in res.items():
        if tag.startswith("pair"):
            continue
        s3 = [slowdown(r[4], r[5]) for r in n3]
        so = [slowdown(r[4], r[5]) for r in ou if r[4] < RTO_NS]
        sx = [slowdown(o[4], n[5]) for n, o in pairs]
        ratio = [o[4] / n[4] for n, o in pairs]
        q = (0.5, 0.95, 0.99)
        a3 = [pctl(s3, p) for p in q]
        ax = [pctl(sx, p) for p in q]
        L.append(
            f"| {tag} | {n3_all} / {len(ou)}{f' ({timed} by timeout)' if timed else ''} | "
            + " / ".join(fmt(x) for x in a3) + " | "
            + " / ".join(fmt(pctl(so, p)) for p in q) + " | "
            + " / ".join(fmt(x) for x in ax) + " | "
            + " / ".join(f"{(x / y - 1) * 100:+.1f} %" for x, y in zip(ax, a3)) + " | "
            + " / ".join(fmt(pctl(ratio, p)) for p in (0.05, 0.5, 0.95)) + " | "
            + (f"{p3[0]:,} / {p3[1]:,} ({p3[2]:,})" if p3 else "") + " | "
            + (f"{po[0]:,} / {po[1]:,} ({po[2]:,})" if po else "") + " |")
    L.append("")

    # By size on the fat tree.
    fat = [t for t in res if t.startswith("fat")]
    if fat:
        bins = [(0, 10_000, "< 10 kB"), (10_000, 100_000, "10–100 kB"),
                (100_000, 1_000_000, "100 kB–1 MB"), (1_000_000, 1 << 62, "≥ 1 MB")]
        L += ["Fat tree by flow size (slowdown p50 / p95 / p99, both divided by ns-3's ideal; "
              "flows in the bin):", "",
              "| run | " + " | ".join(b[2] for b in bins) + " |",
              "|---|" + "---|" * len(bins)]
        for tag in fat:
            pairs = res[tag][4]
            for who, k in (("ns-3", 0), ("ours", 1)):
                cells = []
                for lo, hi, _ in bins:
                    xs = [slowdown(p[k][4], p[0][5]) for p in pairs if lo <= p[0][2] < hi]
                    cells.append(" / ".join(f"{pctl(xs, q):.2f}" for q in (0.5, 0.95, 0.99))
                                 + f" ({len(xs)})")
                L.append(f"| {tag} {who} | " + " | ".join(cells) + " |")
        L.append("")

    if times:
        # Rows only where both simulators were timed: a table of headers
        # alone (ours re-run without ns-3) would read as a result.
        rows = []
        for tag in res:
            t3 = [t for t in times if t["config"] == tag and t["sim"] == "ns-3"]
            to = [t for t in times if t["config"] == tag and t["sim"] == "ours"]
            if not t3 or not to:
                continue
            # The speed table's median: with an even number of rounds, the
            # mean of the middle two (this table took the upper one).
            w3, wo = median(t["wall_s"] for t in t3), median(t["wall_s"] for t in to)
            loads = ", ".join(f"{t['load']:.1f}" for t in t3 + to)
            def mb(ts):
                # A round whose /usr/bin/time output had no peak RSS.
                kb = [t["peak_kb"] for t in ts if t.get("peak_kb") is not None]
                return f"{sorted(kb)[len(kb) // 2] / 1024:.0f}" if kb else "?"
            rows.append(f"| {tag} | {w3:.1f} | {mb(t3)} | {wo:.1f} | "
                        f"{mb(to)} | {w3 / wo:.1f}× | {len(t3)} ({loads}) |")
        if rows:
            L += ["Cost (`/usr/bin/time -v`, one run at a time; median over rounds, "
                  "the 1-minute load average when each run started in brackets):", "",
                  "| run | ns-3 wall s | ns-3 peak MB | ours wall s | ours peak MB | ratio | rounds |",
                  "|---|---|---|---|---|---|---|"] + rows + [""]

    text = "\n".join(L)
    if a.write:
        with open(a.write) as fd:
            doc = fd.read()
        doc = replace_between(doc, agreement_marks, "\n" + text, a.write)
        if a.section == "all" and speed:
            doc = replace_between(doc, speed_marks, speed, a.write)
        with open(a.write, "w") as fd:
            fd.write(doc)
        print(f"wrote {a.write}")
    else:
        print(text)
        if a.section == "all" and speed:
            print("Speed side by side (medians over every round):\n")
            print(speed)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    g = sub.add_parser("gen-flows", help="write a flow file: Poisson arrivals from a size CDF")
    g.add_argument("--topo", default=os.path.join(HPCC_DIR, "topo_fat320.txt"))
    g.add_argument("--cdf", default=os.path.join(WORKLOADS, "WebSearch_distribution.txt"))
    g.add_argument("--load", type=float, default=0.3)
    g.add_argument("--bw", type=float, default=100e9, help="host link rate, b/s")
    g.add_argument("--time", type=float, default=0.005, help="seconds of arrivals")
    g.add_argument("--start", type=float, default=2.0, help="first arrival time, s")
    g.add_argument("--seed", type=int, default=5)
    g.add_argument("-o", "--out", required=True)
    t = sub.add_parser("gen-topo-dual", help="write a topology of multi-homed hosts: racks "
                                            "of hosts, each on both ToRs of its rack")
    t.add_argument("--racks", type=int, default=16)
    t.add_argument("--hosts", type=int, default=16, help="hosts per rack")
    t.add_argument("--spines", type=int, default=8)
    t.add_argument("--host-bw", type=int, default=25, help="Gb/s")
    t.add_argument("--fabric-bw", type=int, default=100, help="Gb/s")
    t.add_argument("--delay-ns", type=int, default=1000)
    t.add_argument("-o", "--out", required=True)
    r = sub.add_parser("run", help="run ns-3 (with --ns3) and ours on the shipped configs")
    r.add_argument("--out", required=True)
    r.add_argument("--roce", default=os.path.join(REPO, "target", "release", "roce"))
    r.add_argument("--ns3", help="the built simulation/ folder of the HPCC repository")
    r.add_argument("--only", nargs="*", help="configs whose name contains one of these")
    r.add_argument("--rounds", type=int, default=1, help="interleaved rounds (for timing)")
    r.add_argument("--also", action="append", metavar="LABEL=BIN",
                   help="another build of roce (a profile-guided one, say), timed right "
                        "after --roce on each config; it must write the same output files")
    r.add_argument("--draw", type=int, help="another draw of the random numbers: ns-3's RngRun "
                                            "(NS_GLOBAL_VALUE) and our --seed")
    d = sub.add_parser("draws", help="slowdown spread over run folders of several draws")
    d.add_argument("--out", required=True, nargs="+", help="one run folder per draw")
    d.add_argument("--only", nargs="*")
    d.add_argument("--write", help="replace the section marked `generated NAME` (--markers)")
    d.add_argument("--markers", default="draws")
    p = sub.add_parser("report", help="Markdown figures from a run's outputs")
    p.add_argument("--out", required=True, nargs="+",
                   help="run folders; timings of all are pooled for the speed table, "
                        "outputs come from the first holding both simulators'")
    p.add_argument("--only", nargs="*")
    p.add_argument("--section", choices=("all", "agreement", "speed"), default="all",
                   help="what to write (default: the agreement tables and the speed table)")
    p.add_argument("--write", help="replace the generated sections of this document")
    p.add_argument("--markers", help="write the sections marked `generated NAME` "
                                     "(and `generated NAME speed`) instead of the main ones")
    a = ap.parse_args()
    {"gen-flows": gen_flows, "gen-topo-dual": gen_topo_dual, "run": run, "report": report,
     "draws": draws}[a.cmd](a)


if __name__ == "__main__":
    main()
