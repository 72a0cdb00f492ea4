"""Tests of tsbench.stats: medians and min-max per cell, bad cells without a
time, check values, ratios to glibc and to the best peer, and the paired
ratios with their intervals against the best peer and a --baseline, as
every report shows them; also the share of the CPUs other work took
(tsbench.machine).
"""

import os
import tempfile
import unittest

from tsbench_support import fake_run, report_doc
from tsbench import (allocators, machine, outcome, report_html, report_markdown, report_table,
                     stats, workloads)


class StatisticsTest(unittest.TestCase):
    def setUp(self):
        self.wl = workloads.Workload("w", "test", [], [])

    def test_median_min_max(self):
        runs = [fake_run(time_s=t, rss=r) for t, r in ((0.3, 3000), (0.1, 1000), (0.2, 5000))]
        s = stats.summarize(self.wl, allocators.Allocator("a", None, "system"), runs, 2)
        self.assertEqual(s["status"], outcome.OK)
        self.assertAlmostEqual(s["time_s"], 0.2)
        self.assertAlmostEqual(s["time_s_min"], 0.1)
        self.assertAlmostEqual(s["time_s_max"], 0.3)
        self.assertEqual(s["maxrss_kb"], 3000)
        self.assertEqual(s["runs_ok"], 3)

    def test_one_bad_run_makes_the_cell_bad_and_timeless(self):
        runs = [fake_run(time_s=0.001), fake_run(status=outcome.CRASHED)]
        s = stats.summarize(self.wl, allocators.Allocator("a", None, "system"), runs, 2)
        self.assertEqual(s["status"], outcome.CRASHED)
        self.assertIn("1 of 2 runs", s["reason"])
        self.assertIsNone(s["time_s"])
        self.assertIsNone(s["maxrss_kb"])

    def test_oversubscription(self):
        s = stats.summarize(self.wl, allocators.Allocator("a", None, "system"),
                              [fake_run(threads=32)], 2)
        self.assertTrue(s["oversubscribed"])
        s = stats.summarize(self.wl, allocators.Allocator("a", None, "system"),
                              [fake_run(threads=2)], 2)
        self.assertFalse(s["oversubscribed"])

    def test_ratios_against_glibc_and_best_peer(self):
        allocs = [allocators.Allocator("glibc", None, "system"),
                  allocators.Allocator("jemalloc", "/x", "peer"),
                  allocators.Allocator("tcmalloc", "/y", "peer"),
                  allocators.Allocator("tsalloc", "/z", "tsalloc")]
        times = {"glibc": 0.1, "jemalloc": 0.05, "tcmalloc": 0.2, "tsalloc": 0.08}
        summaries = [stats.summarize(self.wl, a, [fake_run(time_s=times[a.name], rss=2000)], 2)
                     for a in allocs]
        stats.add_ratios(summaries, allocs)
        by = {s["allocator"]: s for s in summaries}
        self.assertAlmostEqual(by["tsalloc"]["ratio_glibc"], 0.8)
        self.assertAlmostEqual(by["tsalloc"]["ratio_best_peer"], 1.6)
        self.assertEqual(by["tsalloc"]["best_peer"], "jemalloc")
        self.assertAlmostEqual(by["glibc"]["ratio_glibc"], 1.0)
        self.assertAlmostEqual(by["tsalloc"]["rss_ratio_glibc"], 1.0)

    def test_median_confidence_interval(self):
        # Order statistics x(k), x(n+1-k): k = 2 of 11, 6 of 21; 5 values are too
        # few for 95% (both extremes cover only 1 - 2/32).
        self.assertEqual(stats.median_ci(list(range(11, 0, -1))), (6, 2, 10))
        self.assertEqual(stats.median_ci(list(range(1, 22))), (11, 6, 16))
        self.assertEqual(stats.median_ci([5, 1, 4, 2, 3]), (3, None, None))
        self.assertEqual(stats.median_ci([]), (None, None, None))
        # Many runs: exact integers, no float overflow (2.0 ** 1100 overflows).
        med, lo, hi = stats.median_ci(list(range(1100)))
        self.assertTrue(lo < med < hi and hi - lo < 100)

    def test_paired_ratios_follow_rounds_and_skip_bad_runs(self):
        mine = [fake_run(time_s=0.1), fake_run(status=outcome.CRASHED), fake_run(time_s=0.3)]
        peer = [fake_run(time_s=0.05), fake_run(time_s=0.1), fake_run(time_s=0.1),
                fake_run(time_s=0.2)]
        got = stats.paired_ratios(mine, peer)
        self.assertEqual(len(got), 2)
        self.assertAlmostEqual(got[0], 2.0)
        self.assertAlmostEqual(got[1], 3.0)

    def paired_cells(self):
        """11 rounds in which the machine's speed swings threefold: tsalloc
        takes 0.9 of jemalloc's time in every round, tcmalloc 1.05 of it, so
        their min-max ranges overlap while each round tells them apart."""
        allocs = [allocators.Allocator("glibc", None, "system"),
                  allocators.Allocator("jemalloc", "/x", "peer"),
                  allocators.Allocator("tcmalloc", "/y", "peer"),
                  allocators.Allocator("tsalloc", "/z", "tsalloc"),
                  allocators.Allocator("even", "/e", "tsalloc")]
        speed = [1.0, 2.9, 1.4, 2.2, 1.1, 3.0, 1.7, 2.5, 1.2, 2.0, 1.5]
        factor = {"glibc": 2.0, "jemalloc": 1.0, "tcmalloc": 1.05, "tsalloc": 0.9}
        cells = {}
        for a in allocs:
            if a.name == "even":  # alternately a bit faster and a bit slower
                times = [0.05 * f * (0.95 if i % 2 else 1.05) for i, f in enumerate(speed)]
            else:
                times = [0.05 * f * factor[a.name] for f in speed]
            cells[("w", a.name)] = [fake_run(time_s=t) for t in times]
        summaries = [stats.summarize(self.wl, a, cells[("w", a.name)], 2) for a in allocs]
        stats.add_ratios(summaries, allocs, cells)
        return allocs, summaries

    def test_paired_ratio_against_the_best_peer(self):
        allocs, summaries = self.paired_cells()
        by = {s["allocator"]: s for s in summaries}
        ts = by["tsalloc"]
        self.assertLess(by["jemalloc"]["time_s_min"], ts["time_s_max"])  # ranges overlap
        self.assertAlmostEqual(ts["paired_best_peer"], 0.9)
        self.assertAlmostEqual(ts["paired_lo"], 0.9)
        self.assertAlmostEqual(ts["paired_hi"], 0.9)
        self.assertEqual(ts["paired_n"], 11)
        self.assertEqual(stats.paired_verdict(ts), "faster")
        self.assertEqual(stats.paired_verdict(by["tcmalloc"]), "slower")
        self.assertEqual(stats.paired_verdict(by["even"]), "tie")
        self.assertIsNone(by["jemalloc"]["paired_best_peer"])  # the best peer itself
        # Without the runs there is no paired ratio, and the keys still exist.
        summaries = [stats.summarize(self.wl, a, [fake_run()], 2) for a in allocs]
        stats.add_ratios(summaries, allocs)
        self.assertIsNone(summaries[3]["paired_best_peer"])

    def test_paired_ratios_in_the_terminal_and_markdown(self):
        allocs, summaries = self.paired_cells()
        text = report_table.format_tables(summaries, allocs, [self.wl], 2)
        self.assertRegex(text, r"\n  tsalloc .* 0\.90 \[0\.90-0\.90\] ")
        block = text[text.index("== time against the fastest peer"):].splitlines()
        got = dict(zip(block[1].split()[1:], block[2].split()[1:]))
        self.assertEqual(got, {"glibc": "2.00>", "jemalloc": "*", "tcmalloc": "1.05>",
                               "tsalloc": "0.90<", "even": "1.05="})
        md = report_markdown.markdown_report(report_doc(allocs, summaries))
        self.assertIn("**Against the fastest peer, paired by round:**", md)
        row = next(l for l in md.splitlines() if l.startswith("| w |") and "fastest peer" in l)
        self.assertIn("**0.90 [0.90, 0.90]**", row)
        self.assertIn("*1.05 [1.05, 1.05]*", row)
        host = {"cpu": "c", "cores": 2, "usable_cores": 2, "memory_gb": 1, "kernel": "k",
                "os": "o", "glibc": "g", "tsalloc": "t", "versions": {}}
        meta = {"machine": host, "notes": [], "started": "s", "outdir": "o", "command": "c",
                "config": {"runs": 11, "quick": False}}
        with tempfile.TemporaryDirectory() as d:
            path = os.path.join(d, "report.html")
            report_html.write_html(path, meta, summaries, allocs, [self.wl], {}, {}, {})
            with open(path) as f:
                page = f.read()
        self.assertIn("Time against the fastest peer, paired by round", page)
        self.assertIn("<td class='good'>0.90 [0.90-0.90]</td>", page)
        self.assertIn("<td class='worse'>1.05 [1.05-1.05]</td>", page)

    def test_paired_ratio_against_a_baseline(self):
        """--baseline: every allocator's time paired with one named allocator
        (an older build, say), in every report."""
        allocs, summaries = self.paired_cells()
        cells = {}
        speed = [1.0, 2.9, 1.4, 2.2, 1.1, 3.0, 1.7, 2.5, 1.2, 2.0, 1.5]
        factor = {"glibc": 2.0, "jemalloc": 1.0, "tcmalloc": 1.05, "tsalloc": 0.9,
                  "even": 0.9}
        for a in allocs:
            cells[("w", a.name)] = [fake_run(time_s=0.05 * f * factor[a.name]) for f in speed]
        summaries = [stats.summarize(self.wl, a, cells[("w", a.name)], 2) for a in allocs]
        stats.add_ratios(summaries, allocs, cells, "tcmalloc")
        by = {s["allocator"]: s for s in summaries}
        self.assertAlmostEqual(by["tsalloc"]["paired_baseline"], 0.9 / 1.05)
        self.assertEqual(by["tsalloc"]["baseline_n"], 11)
        self.assertEqual(stats.paired_verdict(by["tsalloc"], stats.BASELINE_KEYS), "faster")
        self.assertEqual(stats.paired_verdict(by["glibc"], stats.BASELINE_KEYS), "slower")
        self.assertIsNone(by["tcmalloc"]["paired_baseline"])  # the baseline itself
        self.assertEqual(stats.baseline_name(summaries), "tcmalloc")
        text = report_table.format_tables(summaries, allocs, [self.wl], 2)
        block = text[text.index("== time against the baseline tcmalloc"):].splitlines()
        self.assertIn("tsalloc 0.86 [0.86-0.86] <", block[1])
        self.assertIn("glibc 1.90 [1.90-1.90] >", block[1])
        md = report_markdown.markdown_report(report_doc(allocs, summaries))
        self.assertIn("**Against the baseline tcmalloc, paired by round:**", md)
        # Without a baseline: no such values and no such section.
        summaries = [stats.summarize(self.wl, a, cells[("w", a.name)], 2) for a in allocs]
        stats.add_ratios(summaries, allocs, cells)
        self.assertIsNone(summaries[3]["paired_baseline"])
        self.assertIsNone(stats.baseline_name(summaries))
        self.assertNotIn("against the baseline",
                         report_table.format_tables(summaries, allocs, [self.wl], 2))

    def test_background_load(self):
        # 10 s on 2 CPUs; the CPUs were busy 10 s, of which tsbench and its
        # runs used 5: others took 5 of 20.
        load = machine.BackgroundLoad()
        load.start = (100.0, 50.0, 1.0, 3.0)
        samples = [(110.0, 60.0, 6.0, 5.0)]
        load.sample = lambda: samples[0]
        busy, steal = load.shares(2)
        self.assertAlmostEqual(busy, 0.25)
        self.assertAlmostEqual(steal, 0.1)  # 2 s stolen of 20
        samples[0] = (110.0, 55.0, 6.0, 3.0)  # rounding can make others negative
        self.assertEqual(load.shares(2)[0], 0.0)
        samples[0] = None
        self.assertEqual(load.shares(2), (None, None))

    def test_wrong_check_value_is_marked(self):
        allocs = [allocators.Allocator("glibc", None, "system"),
                  allocators.Allocator("bad", "/b", "tsalloc"),
                  allocators.Allocator("good", "/g", "tsalloc")]
        cells = {("w", "glibc"): [fake_run(check=42)], ("w", "bad"): [fake_run(check=41)],
                 ("w", "good"): [fake_run(check=42)]}
        stats.check_values(self.wl, cells, allocs)
        self.assertEqual(cells[("w", "bad")][0].status, outcome.WRONG)
        self.assertIn("expected 42", cells[("w", "bad")][0].reason)
        self.assertEqual(cells[("w", "good")][0].status, outcome.OK)

    def test_check_reference_without_glibc_is_the_majority(self):
        allocs = [allocators.Allocator(n, "/" + n, "tsalloc") for n in ("a", "b", "c")]
        cells = {("w", "a"): [fake_run(check=7)], ("w", "b"): [fake_run(check=5)],
                 ("w", "c"): [fake_run(check=5)]}
        stats.check_values(self.wl, cells, allocs)
        self.assertEqual(cells[("w", "a")][0].status, outcome.WRONG)
        self.assertEqual(cells[("w", "b")][0].status, outcome.OK)


if __name__ == "__main__":
    unittest.main()
