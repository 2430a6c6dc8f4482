#!/usr/bin/env python3
"""Tests of scripts/scale_report.py: a staged scenario is cut where asked
and nowhere else, and the table is computed from runs.json (medians of the
timed rounds, the ratio to the 320-host fabric at the same cut, memory
from memory runs only) and written between its markers. Standard library
only:

    python3 -m unittest discover -s scripts -p 'test_*.py'
"""

import importlib.util
import json
import os
import subprocess
import sys
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
SCRIPT = os.path.join(HERE, "scale_report.py")
spec = importlib.util.spec_from_file_location("scale_report", SCRIPT)
scale_report = importlib.util.module_from_spec(spec)
spec.loader.exec_module(scale_report)


def read(path):
    with open(path) as f:
        return f.read()


def timed(fabric, hosts, eps, user, peak_kb, stop_us=None, events=1_000_000, arrivals_us=None):
    return {"arrivals_us": arrivals_us, "fabric": fabric, "hosts": hosts, "stop_us": stop_us, "kind": "timed",
            "wall_s": user + 0.5, "user_s": user, "peak_kb": peak_kb, "load": 1.0,
            "events": events, "events_per_second": eps, "sim_wall_s": user,
            "events_per_delivered_packet": 7.5, "events_per_hop": 1.4,
            "simulated_us": 100.0, "flows": 10, "finished": 10, "round": 0}


class Stage(unittest.TestCase):
    def test_cut_goes_after_the_seed_and_replaces_none_of_the_rest(self):
        with tempfile.TemporaryDirectory() as d:
            path = scale_report.stage("fattree_k32_websearch.toml", 300, d)
            text = read(path)
            lines = text.splitlines()
            i = lines.index("seed = 1")
            self.assertEqual(lines[i + 1], "stop_us = 300")
            self.assertEqual(text.count("stop_us"), 1)
            original = read(os.path.join(scale_report.SCENARIOS,
                                         "fattree_k32_websearch.toml"))
            self.assertEqual(text.replace("stop_us = 300\n", ""), original)
            # The workload's CDF resolves from the staged copy.
            self.assertTrue(os.path.isfile(os.path.join(d, "workloads",
                                                        "WebSearch_distribution.txt")))

    def test_arrivals_replace_the_workload_duration_only(self):
        with tempfile.TemporaryDirectory() as d:
            path = scale_report.stage("fattree_k32_websearch.toml", None, d, arrivals_us=1000)
            text = read(path)
            self.assertIn("_arrivals1000us", os.path.basename(path))
            original = read(os.path.join(scale_report.SCENARIOS,
                                         "fattree_k32_websearch.toml"))
            self.assertIn("duration_us = 10000\n", original)
            self.assertEqual(text, original.replace("duration_us = 10000\n",
                                                    "duration_us = 1000\n"))

    def test_whole_run_is_the_scenario_as_shipped(self):
        with tempfile.TemporaryDirectory() as d:
            path = scale_report.stage("fattree320_websearch.toml", None, d)
            original = read(os.path.join(scale_report.SCENARIOS,
                                         "fattree320_websearch.toml"))
            self.assertEqual(read(path), original)


class Table(unittest.TestCase):
    def rows(self, runs):
        t = scale_report.table(runs)
        return {r.split("|")[1].strip() + "@" + r.split("|")[3].strip(): r
                for r in t.splitlines()[2:]}

    def test_medians_and_ratio_to_the_smallest_fabric_at_the_same_cut(self):
        runs = [timed("fat320", 320, 10e6, 10.0, 40_000), timed("fat320", 320, 8e6, 12.0, 41_000),
                timed("fat320", 320, 9e6, 11.0, 42_000),
                timed("k32", 8192, 4.5e6, 600.0, 1_500_000),
                timed("k32", 8192, 2e6, 5.0, 200_000, stop_us=300),
                timed("fat320", 320, 8e6, 1.0, 20_000, stop_us=300)]
        rows = self.rows(runs)
        whole = rows["k32@whole run"].split("|")
        self.assertEqual(whole[6].strip(), "4.50 M")
        # 4.5 M/s against the 320-host median of 9 M/s.
        self.assertEqual(whole[7].strip(), "0.50")
        self.assertEqual(whole[9].strip(), "600.0")
        self.assertEqual(rows["fat320@whole run"].split("|")[6].strip(), "9.00 M")
        self.assertEqual(rows["fat320@whole run"].split("|")[14].strip(), "3")
        self.assertEqual(rows["fat320@whole run"].split("|")[13].strip(), "–")
        # The cut run is compared with the cut 320-host run, not the whole one.
        self.assertEqual(rows["k32@cut at 300 µs"].split("|")[7].strip(), "0.25")

    def test_runs_with_other_arrivals_compare_among_themselves(self):
        runs = [timed("fat320", 320, 10e6, 10.0, 40_000),
                timed("k32", 8192, 4e6, 600.0, 1_500_000),
                timed("fat320", 320, 12e6, 1.0, 20_000, arrivals_us=1000),
                timed("k32", 8192, 6e6, 60.0, 900_000, arrivals_us=1000)]
        rows = self.rows(runs)
        self.assertEqual(rows["k32@whole run"].split("|")[7].strip(), "0.40")
        self.assertEqual(rows["k32@1 ms of arrivals, whole run"].split("|")[7].strip(), "0.50")
        # A record from before the field existed reads as the scenario's own.
        old = timed("k16", 1024, 5e6, 50.0, 200_000)
        del old["arrivals_us"]
        self.assertEqual(self.rows(runs + [old])["k16@whole run"].split("|")[7].strip(), "0.50")

    def test_memory_runs_fill_the_memory_column_and_are_never_timed(self):
        # A memory run's own (slower) time is not a timed round: the row
        # is the timed run's, whatever cut the memory run had.
        mem = timed("k32", 8192, 1e6, 900.0, 9_000_000, stop_us=1000)
        mem["kind"] = "memory"
        mem["memory"] = {"host_b": 2815, "switch_port_b": 1610, "flow_b": 104, "qp_b": 3432,
                         "qps": 3656, "packet_slot_b": 32, "live_packets": 5, "packet_slots": 6,
                         "heap_mb": 158.1}
        rows = self.rows([timed("k32", 8192, 2e6, 50.0, 400_000), mem])
        self.assertEqual(len(rows), 1)
        cells = rows["k32@whole run"].split("|")
        self.assertEqual(cells[9].strip(), "50.0")
        self.assertEqual(cells[13].strip(),
                         "2,815 / 1,610 / 104 / 3,432 B (cut at 1000 µs, 3,656 live QPs)")
        self.assertEqual(cells[14].strip(), "1")
        # A fabric with memory runs only still gets its row.
        rows = self.rows([mem])
        self.assertEqual(rows["k32@cut at 1000 µs"].split("|")[14].strip(), "0")


class Write(unittest.TestCase):
    @staticmethod
    def one_run(d):
        """A run folder holding one timed 320-host run."""
        out = os.path.join(d, "run")
        os.makedirs(out)
        with open(os.path.join(out, "runs.json"), "w") as f:
            json.dump([timed("fat320", 320, 10e6, 10.0, 40_000)], f)
        return out

    def test_only_the_generated_section_changes(self):
        with tempfile.TemporaryDirectory() as d:
            out = self.one_run(d)
            doc = os.path.join(d, "SCALE.md")
            head, tail = "# Scale\n\nprose\n", "\nmore prose\n"
            with open(doc, "w") as f:
                f.write(head + scale_report.BEGIN + "\nold\n" + scale_report.END + tail)
            p = subprocess.run([sys.executable, SCRIPT, "report", "--out", out, "--write", doc],
                               capture_output=True, text=True)
            self.assertEqual(p.returncode, 0, p.stderr)
            text = read(doc)
            self.assertTrue(text.startswith(head + scale_report.BEGIN + "\n| fabric |"))
            self.assertTrue(text.endswith(scale_report.END + tail))
            self.assertNotIn("old", text)

    def test_a_document_without_markers_is_an_error(self):
        with tempfile.TemporaryDirectory() as d:
            out = self.one_run(d)
            doc = os.path.join(d, "SCALE.md")
            with open(doc, "w") as f:
                f.write("nothing here\n")
            p = subprocess.run([sys.executable, SCRIPT, "report", "--out", out, "--write", doc],
                               capture_output=True, text=True)
            self.assertNotEqual(p.returncode, 0)
            self.assertIn("markers", p.stderr)
            self.assertEqual(read(doc), "nothing here\n")


if __name__ == "__main__":
    unittest.main()
