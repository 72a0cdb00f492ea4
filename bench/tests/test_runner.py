"""Tests of the runner (tsbench.runner, tsbench.process): one full run of
tsbench over a fake build, whose outputs the tests read (discovery,
interleaving, bad cells, terminal table, CSV, JSON, markdown, HTML), and the
tsbench-exec launcher when TSBENCH_EXEC names it.
"""

import csv
import json
import os
import shutil
import sys
import tempfile
import unittest

from tsbench_support import harmless_library, make_fake_build, md_tables, run_main
from tsbench import outcome, process, report_csv_json, report_markdown


@unittest.skipIf(harmless_library() is None, "no harmless shared library to preload")
class EndToEndTest(unittest.TestCase):
    """One run of tsbench over the fake build; the tests read its outputs."""

    @classmethod
    def setUpClass(cls):
        cls.root = tempfile.mkdtemp(prefix="tsbench-test-")
        cls.build, cls.peers = make_fake_build(cls.root)
        cls.out = os.path.join(cls.root, "results")
        cls.log = os.path.join(cls.root, "order.log")
        os.environ["TSB_FAKE_LOG"] = cls.log
        user_lib = os.path.join(cls.root, "libmine.so")
        shutil.copy(harmless_library(), user_lib)
        cls.code, cls.stdout, cls.stderr = run_main([
            "--build", cls.build, "--peer-dir", cls.peers, "--runs", "2",
            "--workloads", "lecture1,fragmentation", "--out", cls.out, "--no-plots",
            "--callgrind", "off", "--timeout", "3", "--min-timeout", "1",
            "--allocator", "mine=" + user_lib, "--allocator", "ghost=/nonexistent/libghost.so",
            "--markdown", os.path.join(cls.root, "tables.md")])
        del os.environ["TSB_FAKE_LOG"]
        with open(os.path.join(cls.out, "results.json")) as f:
            cls.doc = json.load(f)
        cls.cell = {(s["workload"], s["allocator"]): s for s in cls.doc["summary"]}

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.root, ignore_errors=True)

    def test_exit_code_and_report_location(self):
        self.assertEqual(self.code, 0, self.stdout + self.stderr)
        self.assertIn("report: " + os.path.join(self.out, "report.html"), self.stdout)
        self.assertTrue(os.path.isfile(os.path.join(self.out, "report.html")))

    def test_discovery(self):
        names = [a["name"] for a in self.doc["allocators"]]
        self.assertEqual(names[:4], ["glibc", "jemalloc", "tcmalloc", "mimalloc"])
        for design in ("tsalloc", "crashy", "wrong", "hang", "broken", "nopreload", "silent",
                       "mine", "ghost"):
            self.assertIn(design, names)
        self.assertNotIn("classic", names)  # libtsalloc-classic.so does not replace malloc

    def test_missing_allocators_are_reported(self):
        self.assertRegex(self.stdout, r"tcmalloc missing .*apt-get install -y libjemalloc2 "
                                      r"libtcmalloc-minimal4 libmimalloc2.0")
        self.assertIn("mimalloc missing", self.stdout)
        self.assertIn("ghost missing: file not found", self.stdout)
        missing = {a["name"] for a in self.doc["allocators"] if not a["available"]}
        self.assertEqual(missing, {"tcmalloc", "mimalloc", "ghost"})
        self.assertNotIn(("lecture1", "tcmalloc"), self.cell)
        with open(os.path.join(self.out, "report.html")) as f:
            self.assertIn("MISSING", f.read())

    def test_good_cells_have_medians_and_ratios(self):
        c = self.cell[("lecture1", "tsalloc")]
        self.assertEqual(c["status"], "ok")
        self.assertEqual(c["runs_ok"], 2)
        self.assertAlmostEqual(c["time_s"], 0.08)
        self.assertAlmostEqual(c["ratio_glibc"], 0.8)
        self.assertAlmostEqual(c["ratio_best_peer"], 1.6)
        self.assertEqual(c["best_peer"], "jemalloc")
        self.assertEqual(c["sbrk_growth_bytes"], 4096)
        self.assertEqual(c["extra"].get("rss_extra"), 7)
        self.assertEqual(self.cell[("lecture1", "mine")]["status"], "ok")

    def test_bad_allocators_fail_instead_of_looking_fast(self):
        expect = {"crashy": "crashed", "hang": "timeout", "wrong": "wrong",
                  "broken": "failed", "nopreload": "failed", "silent": "failed"}
        for name, status in expect.items():
            c = self.cell[("lecture1", name)]
            self.assertEqual(c["status"], status, name)
            self.assertIsNone(c["time_s"], name)
            self.assertIsNone(c["ratio_glibc"], name)
        self.assertIn("SIGSEGV", self.cell[("lecture1", "crashy")]["reason"])
        self.assertIn("block 7 corrupted", self.cell[("lecture1", "broken")]["reason"])
        self.assertIn("preload not in effect", self.cell[("lecture1", "nopreload")]["reason"])
        self.assertIn("expected 42", self.cell[("lecture1", "wrong")]["reason"])

    def test_failed_cells_are_not_rerun(self):
        self.assertEqual(self.cell[("lecture1", "crashy")]["runs"], 1)
        self.assertEqual(self.cell[("lecture1", "hang")]["runs"], 1)
        self.assertEqual(self.cell[("lecture1", "glibc")]["runs"], 2)

    def test_runs_are_interleaved(self):
        with open(self.log) as f:
            seen = [line.split()[1] for line in f if line.startswith("lecture1 ")]
        # round 1 runs every allocator, round 2 only the healthy ones, in the same order
        first = seen[:seen.index("glibc", 1)]
        second = seen[len(first):]
        self.assertEqual(first[:3], ["glibc", "libjemalloc.so.2", "libtsalloc.so"])
        self.assertEqual(second, [n for n in first if n in ("glibc", "libjemalloc.so.2",
                                                             "libtsalloc.so", "libmine.so")])

    def test_terminal_table(self):
        block = self.stdout[self.stdout.index("== lecture1"):self.stdout.index("== fragmentation")]
        self.assertIn("oversubscribed", block.splitlines()[0])
        lines = {l.split()[0]: l for l in block.splitlines()[2:] if l.strip()}
        self.assertIn("CRASHED", lines["crashy"])
        self.assertIn("TIMEOUT", lines["hang"])
        self.assertIn("WRONG", lines["wrong"])
        self.assertRegex(lines["tsalloc"], r"\s80\.0\s.*\s0\.80\s+1\.60\s")
        matrix = self.stdout[self.stdout.index("== time relative to glibc"):].splitlines()
        header = matrix[1].split()[1:]
        row = next(l for l in matrix if l.strip().startswith("lecture1")).split()[1:]
        got = dict(zip(header, row))
        self.assertEqual(got, {"glibc": "1.00", "jemalloc": "0.50", "tsalloc": "0.80",
                               "crashy": "C", "wrong": "W", "hang": "T", "broken": "F",
                               "nopreload": "F", "silent": "F", "mine": "1.20"})

    def test_csv_shape(self):
        with open(os.path.join(self.out, "runs.csv")) as f:
            rows = list(csv.DictReader(f))
        self.assertEqual(list(rows[0].keys()), report_csv_json.RUN_COLUMNS)
        # 4 healthy allocators x 2 workloads x 2 runs, 6 broken ones x 2 workloads x 1 run
        self.assertEqual(len(rows), 4 * 2 * 2 + 6 * 2)
        crashed = [r for r in rows if r["allocator"] == "crashy"]
        self.assertTrue(all(r["status"] == "crashed" and r["time_s"] == "" for r in crashed))
        with open(os.path.join(self.out, "summary.csv")) as f:
            summary = list(csv.DictReader(f))
        self.assertEqual(list(summary[0].keys()), report_csv_json.SUMMARY_COLUMNS)
        self.assertEqual(len(summary), 10 * 2)

    def test_json_shape(self):
        for key in ("machine", "config", "allocators", "workloads", "summary", "runs", "notes",
                    "started", "command"):
            self.assertIn(key, self.doc)
        m = self.doc["machine"]
        for key in ("cpu", "cores", "kernel", "glibc"):
            self.assertTrue(m[key], key)
        self.assertEqual(self.doc["config"]["runs"], 2)
        self.assertEqual([w["name"] for w in self.doc["workloads"]], ["lecture1", "fragmentation"])
        frag = [r for r in self.doc["runs"]
                if r["workload"] == "fragmentation" and r["status"] == "ok"]
        self.assertTrue(frag and all(isinstance(r["rss_series"], list) for r in frag))

    def test_two_runs_say_there_is_no_interval(self):
        self.assertIn("no ratio has a confidence interval", self.stdout)

    def test_markdown_of_the_run(self):
        with open(os.path.join(self.root, "tables.md")) as f:
            md = f.read()
        with open(os.path.join(self.out, "results.md")) as f:
            self.assertEqual(f.read(), md)  # the results directory always gets a copy
        self.assertEqual(md, report_markdown.markdown_report(self.doc))
        tables = md_tables(md)
        header, rows = tables[0][0], {r[0]: r for r in tables[0][1:]}
        got = dict(zip(header, rows["lecture1"]))
        self.assertEqual(got["threads"], "4096*")
        self.assertEqual(got["glibc"], "0.100")
        self.assertEqual(got["tsalloc"], "0.0800 (0.80)")
        for name, word in (("crashy", "CRASHED"), ("hang", "TIMEOUT"), ("wrong", "WRONG"),
                           ("broken", "FAILED"), ("nopreload", "FAILED"), ("silent", "FAILED")):
            self.assertEqual(got[name], word, name)
        self.assertNotIn("tcmalloc", header)  # not installed: no column
        self.assertIn("- `lecture1` on `crashy`: CRASHED: killed by SIGSEGV", md)

    def test_from_json_reproduces_the_tables(self):
        md_path = os.path.join(self.root, "again.md")
        code, out, _ = run_main(["--from-json", os.path.join(self.out, "results.json"),
                                 "--markdown", md_path])
        self.assertEqual(code, 0)

        def block(text):
            return text[text.index("== lecture1"):text.index("\nnote: ")]
        self.assertEqual(block(out), block(self.stdout))
        with open(md_path) as f, open(os.path.join(self.out, "results.md")) as g:
            self.assertEqual(f.read(), g.read())

    def test_html_report(self):
        with open(os.path.join(self.out, "report.html")) as f:
            page = f.read()
        self.assertIn("<h2>Machine</h2>", page)
        self.assertIn("Oversubscription", page)
        self.assertIn("CRASHED", page)
        self.assertNotIn("src='plots/", page)  # self-contained: no external images


LAUNCHER = os.environ.get("TSBENCH_EXEC")


@unittest.skipUnless(LAUNCHER and os.access(LAUNCHER, os.X_OK),
                     "TSBENCH_EXEC (the built bin/tsbench-exec) not given")
class LauncherTest(unittest.TestCase):
    def test_peak_rss_is_not_the_runners(self):
        # Without the launcher, ru_maxrss carries Python's RSS across exec.
        direct, _, _ = process.run_process(["true"], 30)
        launched, _, _ = process.run_process(["true"], 30, launcher=LAUNCHER)
        self.assertEqual(launched.status, outcome.OK)
        self.assertLess(launched.maxrss_kb, direct.maxrss_kb)
        self.assertLess(launched.maxrss_kb, 8 * 1024)

    def test_crash_and_exit_status_pass_through(self):
        r, _, _ = process.run_process(["sh", "-c", "kill -SEGV $$"], 30, launcher=LAUNCHER)
        self.assertEqual(r.status, outcome.CRASHED)
        self.assertIn("SIGSEGV", r.reason)
        r, _, _ = process.run_process(["sh", "-c", "exit 3"], 30, launcher=LAUNCHER)
        self.assertEqual(r.exit, 3)

    def test_preload_reaches_the_child_only(self):
        lib = harmless_library()
        r, out, _ = process.run_process(["sh", "-c", "echo $LD_PRELOAD"], 30, preload=lib,
                                        launcher=LAUNCHER)
        self.assertEqual(out.strip(), lib)

    def test_timeout_kills_the_whole_group(self):
        r, _, _ = process.run_process(["sleep", "30"], 0.5, launcher=LAUNCHER)
        self.assertEqual(r.status, outcome.TIMEOUT)
        self.assertLess(r.wall_s, 10)

    def test_rss_is_sampled_from_the_child(self):
        r, _, _ = process.run_process(
            [sys.executable, "-c", "import time; b = bytearray(64 << 20); time.sleep(0.3)"],
            30, launcher=LAUNCHER, sample_rss=True)
        self.assertEqual(r.status, outcome.OK)
        self.assertGreater(max(kb for _, kb in r.rss_series), 60 * 1024)


if __name__ == "__main__":
    unittest.main()
