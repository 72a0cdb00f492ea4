"""Tests of --scale (tsbench.scale and its use in tsbench.cli): the thread
counts, the variants' arguments, throughput and speed-up, the table and
scale.csv/scale.json, an end-to-end run on the fake build; and the
workload table's default set and the "resident per thread" table.
"""

import argparse
import csv
import json
import os
import shutil
import tempfile
import unittest

from tsbench_support import (fake_results, fake_run, harmless_library, make_fake_build,
                             md_tables, run_main)
from tsbench import allocators, outcome, report_markdown, scale, stats, workloads


def threaded(name="w", work="thread"):
    return workloads.Workload(name, "test", ["--threads", "4", "--ops", "9"],
                              ["--ops", "1"], threads_arg="--threads", scale_work=work)


class ThreadCountsTest(unittest.TestCase):
    def test_powers_of_two_then_n(self):
        self.assertEqual(scale.thread_counts(1), [1])
        self.assertEqual(scale.thread_counts(2), [1, 2])
        self.assertEqual(scale.thread_counts(8), [1, 2, 4, 8])
        self.assertEqual(scale.thread_counts(6), [1, 2, 4, 6])
        self.assertEqual(scale.thread_counts(17), [1, 2, 4, 8, 16, 17])

    def test_at_least_one(self):
        with self.assertRaises(ValueError):
            scale.thread_counts(0)

    def test_with_threads(self):
        self.assertEqual(scale.with_threads(["--threads", "4", "--x", "1"], "--threads", 8),
                         ["--threads", "8", "--x", "1"])
        self.assertEqual(scale.with_threads(["--threads=4"], "--threads", 2), ["--threads=2"])
        self.assertEqual(scale.with_threads(["--x", "1"], "--threads", 3),
                         ["--x", "1", "--threads", "3"])


class VariantsTest(unittest.TestCase):
    def test_variants_and_left_out(self):
        notes = []
        plain = workloads.Workload("p", "no threads", [], [])
        vs = scale.scale_variants([plain, threaded()], 4, False, notes)
        self.assertEqual([v.name for v in vs], ["w@1", "w@2", "w@4"])
        self.assertEqual(vs[1].args, ["--threads", "2", "--ops", "9"])
        self.assertEqual(vs[1].quick, vs[1].args)
        self.assertEqual([(v.scale_base, v.scale_threads) for v in vs],
                         [("w", 1), ("w", 2), ("w", 4)])
        self.assertEqual(notes, ["--scale runs only workloads with a thread argument; "
                                 "left out: p"])
        quick = scale.scale_variants([threaded()], 2, True, [])
        self.assertEqual(quick[1].args, ["--ops", "1", "--threads", "2"])


def scale_summaries(variants, allocs, times, bad=()):
    """Summaries of each variant under each allocator: times[(allocator,
    threads)] seconds; (allocator, threads) in bad crashed."""
    out = []
    for v in variants:
        for a in allocs:
            run = fake_run(time_s=times[(a.name, v.scale_threads)])
            if (a.name, v.scale_threads) in bad:
                run = fake_run(status=outcome.CRASHED)
            out.append(stats.summarize(v, a, [run], 2))
    return out


class RowsTest(unittest.TestCase):
    def setUp(self):
        self.allocs = [allocators.Allocator("glibc", None, "system"),
                       allocators.Allocator("tsalloc", "/b/libtsalloc.so", "tsalloc")]
        self.times = {("glibc", 1): 1.0, ("glibc", 2): 1.0, ("glibc", 4): 2.0,
                      ("tsalloc", 1): 0.5, ("tsalloc", 2): 0.5, ("tsalloc", 4): 0.5}

    def rows(self, work="thread", bad=()):
        vs = scale.scale_variants([threaded(work=work)], 4, False, [])
        return scale.scale_rows(vs, scale_summaries(vs, self.allocs, self.times, bad),
                                ["glibc", "tsalloc"])

    def test_per_thread_work(self):
        rows = self.rows()
        self.assertEqual(len(rows), 6)  # 3 thread counts x 2 allocators
        self.assertEqual(set(rows[0]), set(scale.SCALE_COLUMNS))
        got = {(r["allocator"], r["threads"]): (r["throughput"], r["speedup"]) for r in rows}
        self.assertEqual(got[("glibc", 1)], (1.0, 1.0))
        self.assertEqual(got[("glibc", 4)], (2.0, 2.0))
        self.assertEqual(got[("tsalloc", 4)], (8.0, 4.0))

    def test_shared_work(self):
        got = {(r["allocator"], r["threads"]): r["speedup"] for r in self.rows("total")}
        self.assertEqual(got[("glibc", 4)], 0.5)
        self.assertEqual(got[("tsalloc", 4)], 1.0)

    def test_bad_cells_have_no_numbers(self):
        rows = self.rows(bad=[("tsalloc", 1), ("glibc", 2)])
        got = {(r["allocator"], r["threads"]): r for r in rows}
        self.assertEqual(got[("glibc", 2)]["status"], outcome.CRASHED)
        self.assertIsNone(got[("glibc", 2)]["time_s"])
        self.assertEqual(got[("glibc", 4)]["speedup"], 2.0)
        self.assertIsNotNone(got[("tsalloc", 4)]["throughput"])
        self.assertIsNone(got[("tsalloc", 4)]["speedup"])  # no 1-thread figure to divide by

    def test_table(self):
        text = scale.scale_table(self.rows(bad=[("glibc", 2)]), ["glibc", "tsalloc"], 2)
        lines = text.splitlines()
        self.assertEqual(lines[0], "== scaling of w: median time ms (speed-up over 1 thread) "
                                   "[above 2 threads: oversubscribed]")
        self.assertEqual(lines[1].split(), ["threads", "glibc", "tsalloc"])
        self.assertEqual(lines[2].split(), ["1", "1000", "(1.00)", "500", "(1.00)"])
        self.assertEqual(lines[3].split(), ["2", "C", "500", "(2.00)"])
        self.assertEqual(lines[4].split(), ["4", "2000", "(2.00)", "500", "(4.00)"])
        self.assertNotIn("oversubscribed", scale.scale_table(self.rows(), ["glibc"], 4))

    def test_files(self):
        d = tempfile.mkdtemp(prefix="tsbench-scale-")
        try:
            csv_path, json_path = scale.write_scale_files(d, self.rows())
            with open(csv_path) as f:
                rows = list(csv.reader(f))
            self.assertEqual(rows[0], scale.SCALE_COLUMNS)
            self.assertEqual(len(rows), 7)
            self.assertEqual(rows[6][:3], ["w", "tsalloc", "4"])
            with open(json_path) as f:
                doc = json.load(f)
            self.assertEqual(doc["columns"], scale.SCALE_COLUMNS)
            self.assertEqual(len(doc["rows"]), 6)
        finally:
            shutil.rmtree(d, ignore_errors=True)

    def test_note(self):
        self.assertIsNone(scale.scale_note(2, 2))
        self.assertIn("--scale 8 is above the 2 cores", scale.scale_note(8, 2))


@unittest.skipIf(harmless_library() is None, "no harmless shared library to preload")
class ScaleRunTest(unittest.TestCase):
    def setUp(self):
        self.root = tempfile.mkdtemp(prefix="tsbench-scale-")
        self.build, self.peers = make_fake_build(self.root, workloads=("server", "fastpath"))

    def tearDown(self):
        shutil.rmtree(self.root, ignore_errors=True)

    def test_scale_end_to_end(self):
        out_dir = os.path.join(self.root, "r")
        code, out, _ = run_main(["--build", self.build, "--peer-dir", self.peers, "--quick",
                                 "--scale", "3", "--workloads", "server,fastpath",
                                 "--allocators", "glibc,tsalloc", "--no-plots",
                                 "--out", out_dir])
        self.assertEqual(code, 0)
        self.assertIn("== scaling of server:", out)
        self.assertIn("left out: fastpath", out)
        if len(os.sched_getaffinity(0)) < 3:
            self.assertIn("--scale 3 is above", out)
        with open(os.path.join(out_dir, "scale.csv")) as f:
            rows = list(csv.DictReader(f))
        self.assertEqual([(r["allocator"], r["threads"]) for r in rows],
                         [("glibc", "1"), ("tsalloc", "1"), ("glibc", "2"), ("tsalloc", "2"),
                          ("glibc", "3"), ("tsalloc", "3")])
        self.assertTrue(all(r["status"] == outcome.OK for r in rows))
        with open(os.path.join(out_dir, "results.json")) as f:
            doc = json.load(f)
        self.assertEqual([w["name"] for w in doc["workloads"]], ["server@1", "server@2",
                                                                 "server@3"])
        self.assertEqual(doc["workloads"][1]["args"][:2], ["--threads", "2"])

    def test_scale_needs_a_threaded_workload(self):
        code, out, _ = run_main(["--build", self.build, "--peer-dir", self.peers, "--quick",
                                 "--scale", "2", "--workloads", "fastpath", "--no-plots",
                                 "--out", os.path.join(self.root, "r")])
        self.assertEqual(code, 2)
        self.assertIn("none of the workloads has a thread argument", out)

    def test_bad_scale(self):
        with self.assertRaises(SystemExit):
            run_main(["--build", self.build, "--scale", "0"])


class TableTest(unittest.TestCase):
    def test_default_set(self):
        chosen = [w.name for w in workloads.choose_workloads(argparse.Namespace(workloads=None),
                                                             None)]
        self.assertNotIn("malloc-large", chosen)
        self.assertIn("thread-overhead", chosen)
        named = workloads.choose_workloads(argparse.Namespace(workloads="malloc-large"), None)
        self.assertEqual([w.name for w in named], ["malloc-large"])

    def test_threaded_workloads_name_an_option_they_have(self):
        for w in workloads.WORKLOADS:
            if w.threads_arg:
                self.assertIn(w.threads_arg, w.args, w.name)
                self.assertIn(w.scale_work, ("thread", "total"), w.name)

    def test_resident_per_thread_table(self):
        doc = fake_results()
        for c in doc["summary"]:
            if c["workload"] == "fastpath" and c["status"] == outcome.OK:
                c["extra"]["rss_per_thread_kb"] = {"glibc": 8.0}.get(c["allocator"], 4.0)
        md = report_markdown.markdown_report(doc)
        self.assertIn("**Resident per thread:**", md)
        t = [t for t in md_tables(md) if t[1][0] == "fastpath" and len(t) == 2][-1]
        self.assertEqual(t[1], ["fastpath", "8.0", "4.0 (0.50)", "", "4.0 (0.50)", "4.0 (0.50)"])


if __name__ == "__main__":
    unittest.main()
