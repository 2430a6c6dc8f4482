#!/usr/bin/env python3
"""Tests of scripts/hpcc_compare.py's report: the speed table is generated
from the times.json of one or several run folders, between its own markers,
and leaves the rest of the document alone. Standard library only:

    python3 -m unittest discover -s scripts -p 'test_*.py'
"""

import json
import os
import subprocess
import sys
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
SCRIPT = os.path.join(HERE, "hpcc_compare.py")


def timing(sim, config, rnd, wall, peak_kb):
    return {"wall_s": wall, "peak_kb": peak_kb, "load": 1.0, "sim": sim, "config": config,
            "round": rnd}


def report(*args):
    p = subprocess.run([sys.executable, SCRIPT, "report"] + list(args), capture_output=True,
                       text=True)
    return p.returncode, p.stdout, p.stderr


class SpeedTable(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory()
        d = self.tmp.name
        self.a, self.b = os.path.join(d, "a"), os.path.join(d, "b")
        os.makedirs(self.a)
        os.makedirs(self.b)
        # One round in a, two in b, as two invocations of `run` give them.
        with open(os.path.join(self.a, "times.json"), "w") as f:
            json.dump([timing("ns-3", "fat5ms_pfc", 0, 231.36, 791332),
                       timing("ours", "fat5ms_pfc", 0, 16.49, 136696)], f)
        with open(os.path.join(self.b, "times.json"), "w") as f:
            json.dump([timing("ns-3", "fat5ms_pfc", 0, 206.05, 791388),
                       timing("ours", "fat5ms_pfc", 0, 15.81, 134880),
                       timing("ns-3", "fat5ms_pfc", 1, 201.26, 791472),
                       timing("ours", "fat5ms_pfc", 1, 16.06, 136264),
                       # Only one simulator timed: left out.
                       timing("ours", "fat5ms_hpcc", 0, 21.54, 28432)], f)

    def tearDown(self):
        self.tmp.cleanup()

    def test_rounds_of_every_folder_pooled_in_the_order_run(self):
        rc, out, err = report("--out", self.a, self.b, "--only", "fat5ms", "--section", "speed")
        self.assertEqual(rc, 0, err)
        self.assertEqual(out.splitlines(), [
            "| run | ns-3 wall s | ns-3 peak MB | ours wall s | ours peak MB | ratio of medians |",
            "|---|---|---|---|---|---|",
            "| fat5ms_pfc | 206.1 (231.4, 206.1, 201.3) | 773 | "
            "16.1 (16.5, 15.8, 16.1) | 132–133 | 12.8× |",
        ])

    def test_an_even_number_of_rounds_takes_the_mean_of_the_middle_two(self):
        rc, out, err = report("--out", self.b, "--only", "fat5ms", "--section", "speed")
        self.assertEqual(rc, 0, err)
        self.assertIn("| fat5ms_pfc | 203.7 (206.1, 201.3) | 773 | 15.9 (15.8, 16.1) |", out)

    def write_speed(self, name, before, *extra):
        """Writes `before` to a document `name`, has `report` write the
        speed section into it (with `extra` options) and returns the
        document's path and text."""
        doc = os.path.join(self.tmp.name, name)
        with open(doc, "w") as f:
            f.write(before)
        rc, _, err = report("--out", self.a, self.b, "--only", "fat5ms", "--section", "speed",
                            *extra, "--write", doc)
        self.assertEqual(rc, 0, err)
        with open(doc) as fd:
            return doc, fd.read()

    def test_write_replaces_only_the_speed_section(self):
        doc, after = self.write_speed(
            "doc.md",
            "# Doc\n\n<!-- generated: scripts/hpcc_compare.py report -->\nagreement\n"
            "<!-- end generated -->\n\nSpeed:\n\n"
            "<!-- generated speed: scripts/hpcc_compare.py report -->\nold table\n"
            "<!-- end generated speed -->\n\nAfter.\n")
        self.assertNotIn("old table", after)
        self.assertIn("agreement\n<!-- end generated -->", after)
        self.assertIn("<!-- generated speed: scripts/hpcc_compare.py report -->\n| run |", after)
        self.assertIn("12.8× |\n<!-- end generated speed -->\n\nAfter.\n", after)
        # Written twice, the same document.
        report("--out", self.a, self.b, "--only", "fat5ms", "--section", "speed", "--write", doc)
        with open(doc) as fd:
            self.assertEqual(fd.read(), after)

    def test_named_markers_leave_the_main_sections_alone(self):
        doc, after = self.write_speed(
            "named.md",
            "<!-- generated speed: scripts/hpcc_compare.py report -->\nmain table\n"
            "<!-- end generated speed -->\n"
            "<!-- generated pint speed: scripts/hpcc_compare.py report -->\nold\n"
            "<!-- end generated pint speed -->\n",
            "--markers", "pint")
        self.assertIn("main table", after)
        self.assertNotIn("old", after)
        self.assertIn("<!-- generated pint speed: scripts/hpcc_compare.py report -->\n| run |",
                      after)
        rc, _, err = report("--out", self.a, "--only", "fat5ms", "--section", "speed",
                            "--markers", "no such", "--write", doc)
        self.assertNotEqual(rc, 0)
        self.assertIn("--markers", err)

    def test_a_document_without_markers_or_folders_without_timings_is_an_error(self):
        doc = os.path.join(self.tmp.name, "plain.md")
        with open(doc, "w") as f:
            f.write("no markers\n")
        rc, _, err = report("--out", self.a, "--only", "fat5ms", "--section", "speed",
                            "--write", doc)
        self.assertNotEqual(rc, 0)
        self.assertIn("generated speed", err)
        empty = os.path.join(self.tmp.name, "empty")
        os.makedirs(empty)
        rc, _, err = report("--out", empty, "--section", "speed")
        self.assertNotEqual(rc, 0)
        self.assertIn("no config has both simulators' timings", err)


class OtherBuilds(unittest.TestCase):
    """`run --also LABEL=BIN` times another build of ours right after the
    first on each config, refuses one that writes different files, and
    `report` gives it a row of its own against the same ns-3 rounds."""

    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory()

    def tearDown(self):
        self.tmp.cleanup()

    def fake_roce(self, name, fct_text):
        """A stand-in for `roce sim --hpcc-config CFG ...` that writes
        `fct_text` and an empty PFC file where CFG names them."""
        path = os.path.join(self.tmp.name, name)
        with open(path, "w") as f:
            f.write("#!/bin/sh\n"
                    "fct=$(awk '$1 == \"FCT_OUTPUT_FILE\" {print $2}' \"$3\")\n"
                    "pfc=$(awk '$1 == \"PFC_OUTPUT_FILE\" {print $2}' \"$3\")\n"
                    f"printf '{fct_text}' > \"$fct\"\n"
                    ": > \"$pfc\"\n")
        os.chmod(path, 0o755)
        return path

    def run_script(self, out, roce, *also):
        args = [sys.executable, SCRIPT, "run", "--out", out, "--roce", roce, "--only",
                "config_pair_none.txt"]
        for a in also:
            args += ["--also", a]
        return subprocess.run(args, capture_output=True, text=True)

    def test_an_other_build_is_timed_and_reported_beside_ours(self):
        a = self.fake_roce("a", "same\\n")
        b = self.fake_roce("b", "same\\n")
        out = os.path.join(self.tmp.name, "out")
        p = self.run_script(out, a, f"pgo={b}")
        self.assertEqual(p.returncode, 0, p.stderr)
        with open(os.path.join(out, "times.json")) as f:
            sims = [t["sim"] for t in json.load(f)]
        self.assertEqual(sims, ["ours", "ours:pgo"])
        self.assertTrue(os.path.exists(os.path.join(out, "ours-pgo", "fct_pair_none.txt")))
        # With ns-3's timings beside them, one row per build.
        with open(os.path.join(out, "times.json"), "w") as f:
            json.dump([timing("ns-3", "pair_none", 0, 20.0, 1024),
                       timing("ours", "pair_none", 0, 2.0, 1024),
                       timing("ours:pgo", "pair_none", 0, 1.6, 1024)], f)
        rc, text, err = report("--out", out, "--only", "pair_none", "--section", "speed")
        self.assertEqual(rc, 0, err)
        self.assertIn("| pair_none | 20.0 (20.0) | 1 | 2.0 (2.0) | 1 | 10.0× |", text)
        self.assertIn("| pair_none (pgo) | 20.0 (20.0) | 1 | 1.6 (1.6) | 1 | 12.5× |", text)

    def test_an_other_build_that_writes_other_files_is_refused(self):
        a = self.fake_roce("a", "one\\n")
        b = self.fake_roce("b", "two\\n")
        p = self.run_script(os.path.join(self.tmp.name, "out"), a, f"b={b}")
        self.assertNotEqual(p.returncode, 0)
        self.assertIn("fct_pair_none.txt", p.stderr)
        for bad in ("nolabel", f"bad label={b}", "x=/no/such/file"):
            p = self.run_script(os.path.join(self.tmp.name, "out2"), a, bad)
            self.assertNotEqual(p.returncode, 0, bad)
            self.assertIn("--also", p.stderr)


class TimedOutFlows(unittest.TestCase):
    """A flow of ours that finished only after the RNIC's retransmission
    timeout leaves the comparison on both sides, as ns-3's unfinished
    flows do; the others stay paired."""

    def test_pairs_past_the_timeout_leave_both_sides(self):
        sys.path.insert(0, HERE)
        import hpcc_compare as h
        # (src, dst, size, start, fct, ideal)
        ns3 = [(0, 1, 1000, 0, 5_000, 4_000), (2, 3, 9000, 10, 20_000, 12_000),
               (4, 5, 500, 20, 4_100, 4_000)]
        ours = [(0, 1, 1000, 0, 5_200, 4_000), (2, 3, 9000, 10, h.RTO_NS + 20_000, 12_000),
                (4, 5, 500, 20, h.RTO_NS - 1, 4_000)]
        kept, pairs, timed = h.drop_timed_out(ns3, h.match(ns3, ours))
        self.assertEqual(timed, 1)
        self.assertEqual(kept, [ns3[0], ns3[2]])
        self.assertEqual(pairs, [(ns3[0], ours[0]), (ns3[2], ours[2])])
        # Nothing past it: nothing left out.
        kept, pairs, timed = h.drop_timed_out(ns3, h.match(ns3, ours[:1]))
        self.assertEqual((kept, timed, len(pairs)), (ns3, 0, 1))


class Draws(unittest.TestCase):
    """`draws`: each simulator's percentiles over run folders of several
    draws, min–max (median), and the median against the median; flows of
    ours past the timeout left out."""

    def test_spread_over_draws(self):
        sys.path.insert(0, HERE)
        import hpcc_compare as h
        with tempfile.TemporaryDirectory() as d:
            # Ten flows of ideal 1000 ns; slowdowns 1..10 scaled per draw.
            for k, (n3, ours) in enumerate([(1.0, 1.1), (1.2, 1.2), (1.4, 1.5)]):
                for sim, scale in (("ns3", n3), ("ours", ours)):
                    os.makedirs(os.path.join(d, f"d{k}", sim))
                    with open(os.path.join(d, f"d{k}", sim, "fct_fat_dcqcn_loss.txt"), "w") as f:
                        for i in range(10):
                            f.write(f"0b000001 0b000101 {i} 100 1000 {i} "
                                    f"{int(1000 * (i + 1) * scale)} 1000\n")
            # One flow of ours in the last draw finished only by timeout.
            with open(os.path.join(d, "d2", "ours", "fct_fat_dcqcn_loss.txt"), "a") as f:
                f.write(f"0b000001 0b000101 99 100 1000 99 {h.RTO_NS + 5} 1000\n")
            p = subprocess.run([sys.executable, SCRIPT, "draws", "--only", "fat_dcqcn_loss",
                                "--out"] + [os.path.join(d, f"d{k}") for k in range(3)],
                               capture_output=True, text=True)
            self.assertEqual(p.returncode, 0, p.stderr)
            lines = {l.split(" | ")[0]: l for l in p.stdout.splitlines()}
            # p50: index 5 of 10, slowdown 6 times each draw's scale.
            row = lines["| fat_dcqcn_loss p50"]
            self.assertIn("6.000–8.400 (7.200) (3 draws)", row)
            self.assertIn("6.600–9.000 (7.200) (3 draws)", row)
            self.assertIn("+0.0 %", row)
            # The timed-out flow is left out: ours' p99 in the last draw is
            # its tenth flow's, 15.0, not the timeout's.
            self.assertIn("11.000–15.000", lines["| fat_dcqcn_loss p99"])


if __name__ == "__main__":
    unittest.main()
