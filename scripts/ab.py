#!/usr/bin/env python3
"""Times two builds of `roce` against each other on one scenario, side by
side, and says whether the difference is more than this machine's noise.

    scripts/ab.py --a BASE_BIN --b NEW_BIN --out DIR SCENARIO.toml [--stop-us N] [--pairs 6] [--together]

A machine shared with other guests drifts by a third within an hour, so a
run of one build timed in one hour and a run of the other in the next say
nothing about the builds (scenarios/SCALE.md). This script takes the runs in
pairs: by default one build then the other, the first of each pair
alternating between A and B (interleaved); with `--together` both builds
at once, one on each of the machine's two cores (the one started first
alternating too), so that each pair meets the same load (but shares the
last-level cache: a memory-bound run is slower than alone, for both
builds alike).

Each pair also checks that the two builds wrote the same `fct.csv`,
`pfc.csv` and `queues.csv` (a speed-up that changes outputs is not one); a
difference stops the comparison with an error unless `--outputs-may-differ`.

The scenario is staged as `scale_report.py` stages it (into DIR/stage/,
beside a link to `scenarios/workloads`, with `stop_us` set by `--stop-us`),
so a scenario of `scenarios/` can be named by its file name.

Reported per pair: user seconds of A and B and their ratio B/A; over all
pairs: the median and geometric mean of the ratios, in how many pairs B
took less user time, and a two-sided sign test's p (the chance of a split
at least that uneven if neither build were faster). Written to
DIR/ab.json and printed. Run an A/A comparison (`--a X --b X`) to see the
noise a ratio has to beat.

Python 3, standard library only.
"""

import argparse
import filecmp
import json
import math
import os
import statistics
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import scale_report  # noqa: E402  (the staging of a scenario)

COMPARED = ("fct.csv", "pfc.csv", "queues.csv")


def sign_test_p(wins, losses):
    """Two-sided sign test: the chance, with each pair a fair coin, of a
    split at least as uneven as `wins` against `losses` (ties left out)."""
    n = wins + losses
    if n == 0:
        return 1.0
    k = min(wins, losses)
    tail = sum(math.comb(n, i) for i in range(k + 1)) / 2 ** n
    return min(1.0, 2 * tail)


def ratio(pair):
    """B's user time over A's, or None when either is 0: `time` counts
    user time in hundredths, and a run shorter than that reads 0.00, a
    time no ratio can be made of."""
    a, b = pair["a_user_s"], pair["b_user_s"]
    return b / a if a > 0 and b > 0 else None


def summarize(pairs):
    """The summary of `pairs` (each a dict with `a_user_s` and
    `b_user_s`): ratios B/A (None where a time reads 0, see `ratio`),
    the median and geometric mean of the others, B's wins and losses,
    and the sign test's p."""
    ratios = [ratio(p) for p in pairs]
    timed = [r for r in ratios if r is not None]
    wins = sum(1 for p in pairs if p["b_user_s"] < p["a_user_s"])
    losses = sum(1 for p in pairs if p["b_user_s"] > p["a_user_s"])
    return {
        "pairs": len(pairs),
        "ratios": [None if r is None else round(r, 4) for r in ratios],
        "median_ratio": round(statistics.median(timed), 4) if timed else None,
        "geomean_ratio": (round(math.exp(statistics.fmean(math.log(r) for r in timed)), 4)
                          if timed else None),
        "b_faster": wins,
        "b_slower": losses,
        "sign_test_p": round(sign_test_p(wins, losses), 4),
    }


def parse_time(text):
    """user seconds, wall seconds and peak KB from `/usr/bin/time -f
    'AB %U %e %M'`'s last line of that form."""
    for line in reversed(text.splitlines()):
        f = line.split()
        if len(f) == 4 and f[0] == "AB":
            return float(f[1]), float(f[2]), int(f[3])
    raise ValueError("no /usr/bin/time line in the run's output")


def start(binary, scenario, out_dir):
    os.makedirs(out_dir, exist_ok=True)
    cmd = ["/usr/bin/time", "-f", "AB %U %e %M", binary, "sim", scenario, "--no-plots",
           "--out", out_dir]
    return subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)


def finish(proc, what):
    _, err = proc.communicate()
    if proc.returncode != 0:
        sys.exit(f"{what} failed ({proc.returncode}):\n{err[-3000:]}")
    return parse_time(err)


def same_outputs(dir_a, dir_b):
    """The compared files that differ between the two runs' folders (a file
    one run wrote and the other did not counts as differing)."""
    # Each pair rewrites the same paths: no result cached from the last.
    filecmp.clear_cache()
    differ = []
    for name in COMPARED:
        pa, pb = os.path.join(dir_a, name), os.path.join(dir_b, name)
        there = (os.path.exists(pa), os.path.exists(pb))
        if there == (False, False):
            continue
        if there != (True, True) or not filecmp.cmp(pa, pb, shallow=False):
            differ.append(name)
    return differ


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("scenario", help="a scenario file, or the name of one in scenarios/")
    ap.add_argument("--a", required=True, help="the baseline build's roce binary")
    ap.add_argument("--b", required=True, help="the build compared with it")
    ap.add_argument("--out", required=True)
    ap.add_argument("--pairs", type=int, default=6)
    ap.add_argument("--stop-us", type=int, help="cut each run at this simulated time")
    ap.add_argument("--arrivals-us", type=int, help="set every workload's duration_us")
    ap.add_argument("--together", action="store_true",
                    help="run each pair's two builds at once, one per core")
    ap.add_argument("--outputs-may-differ", action="store_true")
    a = ap.parse_args()
    if a.pairs < 1:
        sys.exit("--pairs must be at least 1")
    for b in (a.a, a.b):
        if not os.access(b, os.X_OK):
            sys.exit(f"{b}: not an executable")
    src = a.scenario
    if not os.path.exists(src) and os.path.exists(os.path.join(scale_report.SCENARIOS, src)):
        src = os.path.join(scale_report.SCENARIOS, src)
    if not os.path.exists(src):
        sys.exit(f"{a.scenario}: no such scenario")
    os.makedirs(a.out, exist_ok=True)
    staged = scale_report.stage(os.path.abspath(src), a.stop_us, os.path.join(a.out, "stage"),
                                a.arrivals_us)
    dirs = {k: os.path.join(a.out, k) for k in ("a", "b")}
    pairs = []
    mode = "together" if a.together else "interleaved"
    print(f"{mode} pairs of {os.path.basename(staged)}: A {a.a}, B {a.b}", file=sys.stderr)
    for i in range(a.pairs):
        order = ("a", "b") if i % 2 == 0 else ("b", "a")
        if a.together:
            # Started a moment apart: the order alternates too, as the
            # second started was the slower in an A/A test (median 1.02).
            procs = {k: start(getattr(a, k), staged, dirs[k]) for k in order}
            t = {k: finish(procs[k], f"{k.upper()} in pair {i + 1}") for k in order}
            first = "+".join(order)
        else:
            t = {}
            for k in order:
                t[k] = finish(start(getattr(a, k), staged, dirs[k]), f"{k.upper()} in pair {i + 1}")
            first = order[0]
        differ = same_outputs(dirs["a"], dirs["b"])
        pair = {
            "first": first,
            "a_user_s": t["a"][0], "a_wall_s": t["a"][1], "a_peak_kb": t["a"][2],
            "b_user_s": t["b"][0], "b_wall_s": t["b"][1], "b_peak_kb": t["b"][2],
            "outputs_differ": differ,
        }
        pairs.append(pair)
        r = ratio(pair)
        print(f"pair {i + 1}: A {pair['a_user_s']:.2f} s, B {pair['b_user_s']:.2f} s, "
              + (f"B/A {r:.3f}" if r is not None else "B/A none (a time below 0.01 s)")
              + (f", outputs differ: {' '.join(differ)}" if differ else ""), file=sys.stderr)
        if differ and not a.outputs_may_differ:
            sys.exit(f"the builds wrote different {', '.join(differ)} (pair {i + 1}); "
                     "pass --outputs-may-differ to time them anyway")
    s = summarize(pairs)
    record = {"scenario": staged, "a": a.a, "b": a.b, "mode": mode, "pairs": pairs, "summary": s}
    with open(os.path.join(a.out, "ab.json"), "w") as f:
        json.dump(record, f, indent=1)
    print(f"B/A user time over {s['pairs']} {mode} pairs: median {s['median_ratio']}, "
          f"geometric mean {s['geomean_ratio']}; B faster in {s['b_faster']}, slower in "
          f"{s['b_slower']}; sign test p = {s['sign_test_p']}")


if __name__ == "__main__":
    main()
