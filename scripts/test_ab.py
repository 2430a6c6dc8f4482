#!/usr/bin/env python3
"""Tests of scripts/ab.py: the sign test and the summary of pairs, and
whole comparisons (interleaved and together) of two stand-in `roce`
binaries, one of which may write different outputs. Standard library only:

    python3 -m unittest discover -s scripts -p 'test_*.py'
"""

import importlib.util
import json
import os
import stat
import subprocess
import sys
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
SCRIPT = os.path.join(HERE, "ab.py")
spec = importlib.util.spec_from_file_location("ab", SCRIPT)
ab = importlib.util.module_from_spec(spec)
spec.loader.exec_module(ab)


class SignTest(unittest.TestCase):
    def test_known_values(self):
        # 8 of 8: 2 * (1/2)^8.
        self.assertAlmostEqual(ab.sign_test_p(8, 0), 2 / 256)
        self.assertAlmostEqual(ab.sign_test_p(0, 8), 2 / 256)
        # 5 of 6: 2 * (1 + 6) / 64.
        self.assertAlmostEqual(ab.sign_test_p(5, 1), 14 / 64)
        # An even split, and no pairs at all, say nothing.
        self.assertEqual(ab.sign_test_p(3, 3), 1.0)
        self.assertEqual(ab.sign_test_p(0, 0), 1.0)


class Summary(unittest.TestCase):
    def test_ratios_wins_and_ties(self):
        pairs = [{"a_user_s": a, "b_user_s": b} for a, b in
                 [(10.0, 9.0), (10.0, 8.0), (10.0, 11.0), (10.0, 10.0)]]
        s = ab.summarize(pairs)
        self.assertEqual(s["ratios"], [0.9, 0.8, 1.1, 1.0])
        self.assertEqual(s["median_ratio"], 0.95)
        self.assertAlmostEqual(s["geomean_ratio"], (0.9 * 0.8 * 1.1) ** 0.25, places=4)
        self.assertEqual((s["b_faster"], s["b_slower"]), (2, 1))
        self.assertEqual(s["sign_test_p"], 1.0)

    def test_a_time_that_reads_zero_gives_no_ratio(self):
        # `time` counts user time in hundredths: a run under 0.01 s reads
        # 0.00, and there is no ratio to make of it (it once divided by
        # zero here). The other pairs still give the median.
        pairs = [{"a_user_s": a, "b_user_s": b} for a, b in
                 [(0.0, 0.01), (0.02, 0.0), (0.02, 0.01), (0.0, 0.0)]]
        s = ab.summarize(pairs)
        self.assertEqual(s["ratios"], [None, None, 0.5, None])
        self.assertEqual((s["median_ratio"], s["geomean_ratio"]), (0.5, 0.5))
        self.assertEqual((s["b_faster"], s["b_slower"]), (2, 1))
        s = ab.summarize(pairs[:1])
        self.assertEqual((s["median_ratio"], s["geomean_ratio"]), (None, None))

    def test_parse_time_takes_the_time_line(self):
        err = "some warning\nAB 12.34 13.50 445092\n"
        self.assertEqual(ab.parse_time(err), (12.34, 13.5, 445092))
        with self.assertRaises(ValueError):
            ab.parse_time("no time here\n")


FAKE = """#!/bin/sh
# A stand-in for `roce sim SCENARIO --no-plots --out DIR`: writes the
# compared outputs (their content from FAKE_TAG) and spends a little CPU.
out=""
while [ $# -gt 0 ]; do
  if [ "$1" = "--out" ]; then out="$2"; shift; fi
  shift
done
mkdir -p "$out"
i=0; while [ $i -lt 20000 ]; do i=$((i+1)); done
printf 'fct %s\\n' "{tag}" > "$out/fct.csv"
printf 'pfc\\n' > "$out/pfc.csv"
"""


class Whole(unittest.TestCase):
    def setUp(self):
        if not os.path.exists("/usr/bin/time"):
            self.skipTest("no /usr/bin/time")
        tmp = tempfile.TemporaryDirectory()
        self.addCleanup(tmp.cleanup)
        self.d = tmp.name

    def fake(self, name, tag):
        path = os.path.join(self.d, name)
        with open(path, "w") as f:
            f.write(FAKE.replace("{tag}", tag))
        os.chmod(path, os.stat(path).st_mode | stat.S_IXUSR)
        return path

    def run_ab(self, a, b, *extra):
        out = os.path.join(self.d, "out")
        p = subprocess.run(
            [sys.executable, SCRIPT, "incast_dcqcn.toml", "--a", a, "--b", b, "--out", out,
             "--pairs", "3", "--stop-us", "50", *extra],
            capture_output=True, text=True)
        return p, out

    def test_interleaved_and_together_pairs_are_recorded(self):
        a = self.fake("a", "same")
        b = self.fake("b", "same")
        for extra, firsts in [((), ["a", "b", "a"]), (("--together",), ["a+b", "b+a", "a+b"])]:
            p, out = self.run_ab(a, b, *extra)
            self.assertEqual(p.returncode, 0, p.stderr)
            with open(os.path.join(out, "ab.json")) as f:
                rec = json.load(f)
            self.assertEqual([q["first"] for q in rec["pairs"]], firsts)
            self.assertTrue(all(q["outputs_differ"] == [] for q in rec["pairs"]))
            self.assertEqual(rec["summary"]["pairs"], 3)
            self.assertIn("sign test p", p.stdout)
            # Staged into the output folder, never beside the original.
            self.assertEqual(os.path.dirname(rec["scenario"]), os.path.join(out, "stage"))
            with open(rec["scenario"]) as f:
                self.assertIn("stop_us = 50", f.read())
            self.assertFalse(os.path.exists(
                os.path.join(ab.scale_report.SCENARIOS, "incast_dcqcn_cut50us.toml")))

    def test_different_outputs_stop_the_comparison(self):
        a = self.fake("a", "one")
        b = self.fake("b", "other")
        p, out = self.run_ab(a, b)
        self.assertNotEqual(p.returncode, 0)
        self.assertIn("different fct.csv", p.stderr)
        self.assertFalse(os.path.exists(os.path.join(out, "ab.json")))
        p, out = self.run_ab(a, b, "--outputs-may-differ")
        self.assertEqual(p.returncode, 0, p.stderr)
        with open(os.path.join(out, "ab.json")) as f:
            rec = json.load(f)
        self.assertEqual(rec["pairs"][0]["outputs_differ"], ["fct.csv"])


if __name__ == "__main__":
    unittest.main()
