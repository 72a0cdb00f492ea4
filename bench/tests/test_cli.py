"""Tests of the command line (tsbench.cli): --list, allocator and workload
selection, --strict, --baseline, the budgets, and --from-json,
--markdown, --splice and --splice-from on a saved results.json.
"""

import csv
import json
import os
import shutil
import tempfile
import unittest

from tsbench_support import fake_results, harmless_library, make_fake_build, md_tables, run_main
from tsbench import report_markdown


@unittest.skipIf(harmless_library() is None, "no harmless shared library to preload")
class CliTest(unittest.TestCase):
    def setUp(self):
        self.root = tempfile.mkdtemp(prefix="tsbench-cli-")
        self.build, self.peers = make_fake_build(self.root, workloads=("fastpath",))

    def tearDown(self):
        shutil.rmtree(self.root, ignore_errors=True)

    def test_list(self):
        code, out, _ = run_main(["--build", self.build, "--peer-dir", self.peers, "--list"])
        self.assertEqual(code, 0)
        self.assertIn("jemalloc", out)
        self.assertIn("tcmalloc", out)
        self.assertIn("MISSING", out)
        self.assertRegex(out, r"lecture1 .*\[not built\]")
        self.assertNotRegex(out, r"fastpath .*\[not built\]")

    def test_unknown_allocator_is_reported_and_others_run(self):
        code, out, _ = run_main(["--build", self.build, "--peer-dir", self.peers, "--quick",
                                 "--allocators", "glibc,nosuch", "--workloads", "fastpath",
                                 "--out", os.path.join(self.root, "r"), "--no-plots"])
        self.assertEqual(code, 0)
        self.assertIn("nosuch missing: unknown allocator", out)
        self.assertRegex(out, r"\n  glibc .* 1\.00 ")

    def test_strict_fails_on_a_bad_cell(self):
        args = ["--build", self.build, "--peer-dir", self.peers, "--quick", "--workloads",
                "fastpath", "--no-plots", "--strict"]
        code, _, _ = run_main(args + ["--allocators", "glibc,tsalloc",
                                      "--out", os.path.join(self.root, "a")])
        self.assertEqual(code, 0)
        code, _, _ = run_main(args + ["--allocators", "glibc,crashy",
                                      "--out", os.path.join(self.root, "b")])
        self.assertEqual(code, 1)

    def test_baseline_end_to_end(self):
        args = ["--build", self.build, "--peer-dir", self.peers, "--workloads", "fastpath",
                "--no-plots", "--runs", "6", "--callgrind", "off"]
        code, out, _ = run_main(args + ["--allocators", "glibc,tsalloc", "--baseline", "nosuch",
                                        "--out", os.path.join(self.root, "d")])
        self.assertEqual(code, 2)
        self.assertIn("--baseline nosuch is not one of the allocators run", out)
        code, out, _ = run_main(args + ["--allocators", "glibc,tsalloc", "--baseline", "glibc",
                                        "--out", os.path.join(self.root, "e")])
        self.assertEqual(code, 0)
        self.assertRegex(out, r"== time against the baseline glibc.*\n  fastpath +tsalloc "
                              r"\d\.\d\d \[")
        with open(os.path.join(self.root, "e", "summary.csv")) as f:
            rows = {r["allocator"]: r for r in csv.DictReader(f)}
        self.assertNotEqual(rows["tsalloc"]["paired_baseline"], "")
        self.assertEqual(rows["glibc"]["paired_baseline"], "")

    def test_workload_not_built_is_skipped(self):
        code, out, _ = run_main(["--build", self.build, "--peer-dir", self.peers, "--quick",
                                 "--allocators", "glibc", "--workloads", "lecture2,fastpath",
                                 "--out", os.path.join(self.root, "c"), "--no-plots"])
        self.assertEqual(code, 0)
        self.assertIn("lecture2 skipped: tsb-lecture2 is not built", out)

    def test_time_budget_stops_repeats(self):
        out_dir = os.path.join(self.root, "d")
        code, out, _ = run_main(["--build", self.build, "--peer-dir", self.peers, "--quick",
                                 "--allocators", "glibc,tsalloc", "--workloads", "fastpath",
                                 "--runs", "3", "--time-budget", "0.001", "--out", out_dir,
                                 "--no-plots"])
        self.assertEqual(code, 0)
        self.assertIn("time budget", out)
        with open(os.path.join(out_dir, "results.json")) as f:
            doc = json.load(f)
        self.assertEqual([s["runs"] for s in doc["summary"]], [1, 1])

    def test_cell_budget(self):
        # A budget below one run's time stops repeats; 0 means no budget.
        for budget, runs in (("0.001", 1), ("0", 3)):
            out_dir = os.path.join(self.root, "cell" + budget)
            code, _, _ = run_main(["--build", self.build, "--peer-dir", self.peers, "--quick",
                                   "--allocators", "glibc,tsalloc", "--workloads", "fastpath",
                                   "--runs", "3", "--cell-budget", budget, "--out", out_dir,
                                   "--no-plots"])
            self.assertEqual(code, 0)
            with open(os.path.join(out_dir, "results.json")) as f:
                doc = json.load(f)
            self.assertEqual([s["runs"] for s in doc["summary"]], [runs, runs], budget)

    def test_unknown_workload_is_an_error(self):
        with self.assertRaises(SystemExit):
            run_main(["--build", self.build, "--workloads", "nosuch"])


class FromJsonTest(unittest.TestCase):
    def setUp(self):
        self.root = tempfile.mkdtemp(prefix="tsbench-json-")
        self.json = os.path.join(self.root, "results.json")
        self.doc = fake_results()
        with open(self.json, "w") as f:
            json.dump(self.doc, f)

    def tearDown(self):
        shutil.rmtree(self.root, ignore_errors=True)

    def test_tables_markdown_and_splice_without_running(self):
        md, doc = os.path.join(self.root, "t.md"), os.path.join(self.root, "designs.md")
        with open(doc, "w") as f:
            f.write("## Measured\n\n<!-- tsbench:table -->\n")
        code, out, _ = run_main(["--from-json", self.json, "--markdown", md, "--splice", doc])
        self.assertEqual(code, 0)
        self.assertIn("== lecture1", out)
        self.assertRegex(out, r"\n  bestfit +TIMEOUT: ")
        self.assertIn("note: memsim replays memsim.trace", out)
        with open(md) as f:
            self.assertEqual(f.read(), report_markdown.markdown_report(self.doc))
        with open(doc) as f:
            spliced = f.read()
        self.assertEqual(spliced, report_markdown.splice_markdown(
            "## Measured\n\n<!-- tsbench:table -->\n", report_markdown.markdown_report(self.doc)))
        self.assertEqual(sorted(os.listdir(self.root)), ["designs.md", "results.json", "t.md"])
        code, out, _ = run_main(["--from-json", self.json, "--splice", doc])
        self.assertIn("(unchanged)", out)

    def test_selection(self):
        md = os.path.join(self.root, "t.md")
        code, out, _ = run_main(["--from-json", self.json, "--markdown", md,
                                 "--workloads", "fastpath", "--allocators", "glibc,tsalloc"])
        self.assertEqual(code, 0)
        with open(md) as f:
            tables = md_tables(f.read())
        self.assertEqual(tables[0][0], ["workload", "threads", "glibc", "tsalloc"])
        self.assertEqual([r[0] for r in tables[0][1:]], ["fastpath", "geomean vs glibc"])
        self.assertNotIn("lecture1", out)
        with self.assertRaises(SystemExit):
            run_main(["--from-json", self.json, "--allocators", "nosuch"])

    def test_splice_from_a_file(self):
        src, doc = os.path.join(self.root, "t.md"), os.path.join(self.root, "d.md")
        with open(src, "w") as f:
            f.write("hello\n")
        with open(doc, "w") as f:
            f.write("x\n")
        code, _, _ = run_main(["--splice", doc, "--splice-from", src])
        self.assertEqual(code, 0)
        with open(doc) as f:
            self.assertEqual(f.read(), "x\n\n<!-- tsbench:table -->\n\nhello\n\n"
                                       "<!-- /tsbench:table -->\n")

    def test_not_a_results_file(self):
        bad = os.path.join(self.root, "bad.json")
        with open(bad, "w") as f:
            f.write("{}")
        with self.assertRaises(SystemExit):
            run_main(["--from-json", bad])
        with self.assertRaises(SystemExit):
            run_main(["--from-json", os.path.join(self.root, "missing.json")])


if __name__ == "__main__":
    unittest.main()


class RunNotesTest(unittest.TestCase):
    """The "no interval" note is for runs where no ratio has one: an interval
    against a --baseline build counts as one too."""

    def notes_for(self, summaries):
        from types import SimpleNamespace
        from tsbench import cli
        notes = []
        cli.add_run_notes(SimpleNamespace(quick=False), notes, summaries, None, None, 2)
        return [n for n in notes if n.startswith("no ratio has a confidence interval")]

    def test_no_interval_at_all(self):
        self.assertEqual(len(self.notes_for([{"paired_lo": None, "baseline_lo": None}])), 1)

    def test_peer_interval(self):
        self.assertEqual(self.notes_for([{"paired_lo": 0.9, "baseline_lo": None}]), [])

    def test_baseline_interval(self):
        self.assertEqual(self.notes_for([{"paired_lo": None, "baseline_lo": 0.9}]), [])
