"""Tests for bench/tsbench, run by ctest (tests/bench/bench.cmake) as
`python3 -m unittest -v test_tsbench` from this folder.

The runner is exercised on a fake build directory: bin/tsb-<name> are small
Python scripts that behave according to the library in LD_PRELOAD, and the
"allocators" are copies of a harmless system library (so the dynamic loader
really preloads them). Nothing here needs matplotlib or the network.
"""

import csv
import importlib.machinery
import importlib.util
import io
import json
import os
import shutil
import stat
import sys
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
TSBENCH = os.path.join(HERE, "..", "tsbench")


def load_tsbench():
    loader = importlib.machinery.SourceFileLoader("tsbench_under_test", TSBENCH)
    spec = importlib.util.spec_from_loader(loader.name, loader)
    module = importlib.util.module_from_spec(spec)
    loader.exec_module(module)
    return module


tsbench = load_tsbench()

# A fake workload: reads LD_PRELOAD and misbehaves as its library's name says.
FAKE_WORKLOAD = r'''#!__PYTHON__
import os, signal, sys, time
name = __NAME__
pre = os.environ.get("LD_PRELOAD", "")
lib = os.path.basename(pre) or "glibc"
log = os.environ.get("TSB_FAKE_LOG")
if log:
    with open(log, "a") as f:
        f.write("%s %s\n" % (name, lib))
if "crashy" in lib:
    os.kill(os.getpid(), signal.SIGSEGV)
if "hang" in lib:
    time.sleep(60)
if "broken" in lib:
    print(name + ": FAILED block 7 corrupted")
    sys.exit(1)
if "silent" in lib:
    sys.exit(0)
times = {"glibc": 0.100, "libjemalloc.so.2": 0.050, "libtsalloc.so": 0.080}
t = times.get(lib, 0.120)
check = 999 if "wrong" in lib else 42
origin = pre if pre and "nopreload" not in lib else "/lib/x86_64-linux-gnu/libc.so.6"
threads = 4096 if name == "lecture1" else 1
print("%s: rss_extra=7 threads=%d time_s=%.6f check=%d sbrk_growth_bytes=4096 "
      "malloc_from=%s ok" % (name, threads, t, check, origin))
'''

TSALLOC_FAKES = ["libtsalloc.so", "libtsalloc-crashy.so", "libtsalloc-wrong.so",
                 "libtsalloc-hang.so", "libtsalloc-broken.so", "libtsalloc-nopreload.so",
                 "libtsalloc-silent.so", "libtsalloc-classic.so"]


def harmless_library():
    """A real shared library that does nothing when preloaded."""
    for d in ("/lib/x86_64-linux-gnu", "/usr/lib/x86_64-linux-gnu", "/lib64", "/usr/lib64",
              "/lib", "/usr/lib", "/lib/aarch64-linux-gnu", "/usr/lib/aarch64-linux-gnu"):
        for name in ("libdl.so.2", "libutil.so.1", "librt.so.1"):
            path = os.path.join(d, name)
            if os.path.isfile(path):
                return path
    return None


def make_fake_build(root, workloads=("lecture1", "fragmentation"), launcher=None):
    """root/build/{bin,lib} and root/peers with only jemalloc."""
    lib = harmless_library()
    build = os.path.join(root, "build")
    os.makedirs(os.path.join(build, "bin"))
    os.makedirs(os.path.join(build, "lib"))
    peers = os.path.join(root, "peers")
    os.makedirs(peers)
    for name in workloads:
        path = os.path.join(build, "bin", "tsb-" + name)
        with open(path, "w") as f:
            f.write(FAKE_WORKLOAD.replace("__PYTHON__", sys.executable)
                    .replace("__NAME__", repr(name)))
        os.chmod(path, os.stat(path).st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
    for name in TSALLOC_FAKES:
        shutil.copy(lib, os.path.join(build, "lib", name))
    shutil.copy(lib, os.path.join(peers, "libjemalloc.so.2"))
    if launcher:
        shutil.copy(launcher, os.path.join(build, "bin", "tsbench-exec"))
    return build, peers


def run_main(argv):
    out, err = io.StringIO(), io.StringIO()
    code = tsbench.main(argv, stdout=out, stderr=err)
    return code, out.getvalue(), err.getvalue()


class ParsingTest(unittest.TestCase):
    def test_ok_line_fields_are_typed(self):
        status, fields, reason = tsbench.parse_result(
            "lecture1", "noise\nlecture1: threads=32 time_s=0.25 check=123 "
                        "malloc_from=/lib/libc.so.6 ok\n")
        self.assertEqual(status, tsbench.OK)
        self.assertEqual(reason, "")
        self.assertEqual(fields["threads"], 32)
        self.assertEqual(fields["time_s"], 0.25)
        self.assertEqual(fields["check"], 123)
        self.assertEqual(fields["malloc_from"], "/lib/libc.so.6")

    def test_failed_line_gives_its_reason(self):
        status, _, reason = tsbench.parse_result("memsim", "memsim: FAILED thread 1: lost\n")
        self.assertEqual(status, tsbench.FAILED)
        self.assertEqual(reason, "thread 1: lost")

    def test_missing_or_unfinished_line_fails(self):
        self.assertEqual(tsbench.parse_result("x", "y: time_s=1 ok\n")[0], tsbench.FAILED)
        self.assertEqual(tsbench.parse_result("x", "x: time_s=1\n")[0], tsbench.FAILED)
        # Another workload's name as a prefix is not this workload's line.
        self.assertEqual(tsbench.parse_result("x", "xy: time_s=1 ok\n")[0], tsbench.FAILED)

    def test_strace_summary(self):
        text = """% time     seconds  usecs/call     calls    errors syscall
------ ----------- ----------- --------- --------- ----------------
 94.96    2.347314          44     53653     14030 futex
  3.00    0.070000          10      7000           madvise
  1.00    0.010000           5      2000           mmap
------ ----------- ----------- --------- --------- ----------------
100.00    2.427314                 62653     14030 total
"""
        calls = tsbench.parse_strace_summary(text)
        self.assertEqual(calls["futex"], 53653)
        self.assertEqual(calls["madvise"], 7000)
        self.assertEqual(calls["total"], 62653)

    def test_time_formatting(self):
        self.assertEqual(tsbench.fmt_ms(0.25), "250")
        self.assertEqual(tsbench.fmt_ms(0.0123), "12.3")
        self.assertEqual(tsbench.fmt_ms(0.0000123), "0.012")
        self.assertEqual(tsbench.fmt_ms(None), "-")


def fake_run(status=tsbench.OK, time_s=0.1, rss=1000, check=42, threads=1):
    r = tsbench.RunResult()
    r.status = status
    r.wall_s = time_s + 0.01
    r.user_s = r.sys_s = 0.0
    r.maxrss_kb = rss
    if status == tsbench.OK:
        r.fields = {"time_s": time_s, "check": check, "threads": threads}
    else:
        r.reason = "boom"
    return r


def report_doc(allocs, summaries):
    """A results.json document around one workload "w" (for markdown_report)."""
    return {"machine": {"cpu": "c", "cores": 2}, "config": {"runs": 11},
            "allocators": [a.to_json() for a in allocs],
            "workloads": [{"name": "w", "what": "test", "args": []}],
            "summary": json.loads(json.dumps(summaries))}


class StatisticsTest(unittest.TestCase):
    def setUp(self):
        self.wl = tsbench.Workload("w", "test", [], [])

    def test_median_min_max(self):
        runs = [fake_run(time_s=t, rss=r) for t, r in ((0.3, 3000), (0.1, 1000), (0.2, 5000))]
        s = tsbench.summarize(self.wl, tsbench.Allocator("a", None, "system"), runs, 2)
        self.assertEqual(s["status"], tsbench.OK)
        self.assertAlmostEqual(s["time_s"], 0.2)
        self.assertAlmostEqual(s["time_s_min"], 0.1)
        self.assertAlmostEqual(s["time_s_max"], 0.3)
        self.assertEqual(s["maxrss_kb"], 3000)
        self.assertEqual(s["runs_ok"], 3)

    def test_one_bad_run_makes_the_cell_bad_and_timeless(self):
        runs = [fake_run(time_s=0.001), fake_run(status=tsbench.CRASHED)]
        s = tsbench.summarize(self.wl, tsbench.Allocator("a", None, "system"), runs, 2)
        self.assertEqual(s["status"], tsbench.CRASHED)
        self.assertIn("1 of 2 runs", s["reason"])
        self.assertIsNone(s["time_s"])
        self.assertIsNone(s["maxrss_kb"])

    def test_oversubscription(self):
        s = tsbench.summarize(self.wl, tsbench.Allocator("a", None, "system"),
                              [fake_run(threads=32)], 2)
        self.assertTrue(s["oversubscribed"])
        s = tsbench.summarize(self.wl, tsbench.Allocator("a", None, "system"),
                              [fake_run(threads=2)], 2)
        self.assertFalse(s["oversubscribed"])

    def test_ratios_against_glibc_and_best_peer(self):
        allocs = [tsbench.Allocator("glibc", None, "system"),
                  tsbench.Allocator("jemalloc", "/x", "peer"),
                  tsbench.Allocator("tcmalloc", "/y", "peer"),
                  tsbench.Allocator("tsalloc", "/z", "tsalloc")]
        times = {"glibc": 0.1, "jemalloc": 0.05, "tcmalloc": 0.2, "tsalloc": 0.08}
        summaries = [tsbench.summarize(self.wl, a, [fake_run(time_s=times[a.name], rss=2000)], 2)
                     for a in allocs]
        tsbench.add_ratios(summaries, allocs)
        by = {s["allocator"]: s for s in summaries}
        self.assertAlmostEqual(by["tsalloc"]["ratio_glibc"], 0.8)
        self.assertAlmostEqual(by["tsalloc"]["ratio_best_peer"], 1.6)
        self.assertEqual(by["tsalloc"]["best_peer"], "jemalloc")
        self.assertAlmostEqual(by["glibc"]["ratio_glibc"], 1.0)
        self.assertAlmostEqual(by["tsalloc"]["rss_ratio_glibc"], 1.0)

    def test_median_confidence_interval(self):
        # Order statistics x(k), x(n+1-k): k = 2 of 11, 6 of 21; 5 values are too
        # few for 95% (both extremes cover only 1 - 2/32).
        self.assertEqual(tsbench.median_ci(list(range(11, 0, -1))), (6, 2, 10))
        self.assertEqual(tsbench.median_ci(list(range(1, 22))), (11, 6, 16))
        self.assertEqual(tsbench.median_ci([5, 1, 4, 2, 3]), (3, None, None))
        self.assertEqual(tsbench.median_ci([]), (None, None, None))
        # Many runs: exact integers, no float overflow (2.0 ** 1100 overflows).
        med, lo, hi = tsbench.median_ci(list(range(1100)))
        self.assertTrue(lo < med < hi and hi - lo < 100)

    def test_paired_ratios_follow_rounds_and_skip_bad_runs(self):
        mine = [fake_run(time_s=0.1), fake_run(status=tsbench.CRASHED), fake_run(time_s=0.3)]
        peer = [fake_run(time_s=0.05), fake_run(time_s=0.1), fake_run(time_s=0.1),
                fake_run(time_s=0.2)]
        got = tsbench.paired_ratios(mine, peer)
        self.assertEqual(len(got), 2)
        self.assertAlmostEqual(got[0], 2.0)
        self.assertAlmostEqual(got[1], 3.0)

    def paired_cells(self):
        """11 rounds in which the machine's speed swings threefold: tsalloc
        takes 0.9 of jemalloc's time in every round, tcmalloc 1.05 of it, so
        their min-max ranges overlap while each round tells them apart."""
        allocs = [tsbench.Allocator("glibc", None, "system"),
                  tsbench.Allocator("jemalloc", "/x", "peer"),
                  tsbench.Allocator("tcmalloc", "/y", "peer"),
                  tsbench.Allocator("tsalloc", "/z", "tsalloc"),
                  tsbench.Allocator("even", "/e", "tsalloc")]
        speed = [1.0, 2.9, 1.4, 2.2, 1.1, 3.0, 1.7, 2.5, 1.2, 2.0, 1.5]
        factor = {"glibc": 2.0, "jemalloc": 1.0, "tcmalloc": 1.05, "tsalloc": 0.9}
        cells = {}
        for a in allocs:
            if a.name == "even":  # alternately a bit faster and a bit slower
                times = [0.05 * f * (0.95 if i % 2 else 1.05) for i, f in enumerate(speed)]
            else:
                times = [0.05 * f * factor[a.name] for f in speed]
            cells[("w", a.name)] = [fake_run(time_s=t) for t in times]
        summaries = [tsbench.summarize(self.wl, a, cells[("w", a.name)], 2) for a in allocs]
        tsbench.add_ratios(summaries, allocs, cells)
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
        self.assertEqual(tsbench.paired_verdict(ts), "faster")
        self.assertEqual(tsbench.paired_verdict(by["tcmalloc"]), "slower")
        self.assertEqual(tsbench.paired_verdict(by["even"]), "tie")
        self.assertIsNone(by["jemalloc"]["paired_best_peer"])  # the best peer itself
        # Without the runs there is no paired ratio, and the keys still exist.
        summaries = [tsbench.summarize(self.wl, a, [fake_run()], 2) for a in allocs]
        tsbench.add_ratios(summaries, allocs)
        self.assertIsNone(summaries[3]["paired_best_peer"])

    def test_paired_ratios_in_the_terminal_and_markdown(self):
        allocs, summaries = self.paired_cells()
        text = tsbench.format_tables(summaries, allocs, [self.wl], 2)
        self.assertRegex(text, r"\n  tsalloc .* 0\.90 \[0\.90-0\.90\] ")
        block = text[text.index("== time against the fastest peer"):].splitlines()
        got = dict(zip(block[1].split()[1:], block[2].split()[1:]))
        self.assertEqual(got, {"glibc": "2.00>", "jemalloc": "*", "tcmalloc": "1.05>",
                               "tsalloc": "0.90<", "even": "1.05="})
        md = tsbench.markdown_report(report_doc(allocs, summaries))
        self.assertIn("**Against the fastest peer, paired by round:**", md)
        row = next(l for l in md.splitlines() if l.startswith("| w |") and "fastest peer" in l)
        self.assertIn("**0.90 [0.90, 0.90]**", row)
        self.assertIn("*1.05 [1.05, 1.05]*", row)
        machine = {"cpu": "c", "cores": 2, "usable_cores": 2, "memory_gb": 1, "kernel": "k",
                   "os": "o", "glibc": "g", "tsalloc": "t", "versions": {}}
        meta = {"machine": machine, "notes": [], "started": "s", "outdir": "o", "command": "c",
                "config": {"runs": 11, "quick": False}}
        with tempfile.TemporaryDirectory() as d:
            path = os.path.join(d, "report.html")
            tsbench.write_html(path, meta, summaries, allocs, [self.wl], {}, {}, {})
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
        summaries = [tsbench.summarize(self.wl, a, cells[("w", a.name)], 2) for a in allocs]
        tsbench.add_ratios(summaries, allocs, cells, "tcmalloc")
        by = {s["allocator"]: s for s in summaries}
        self.assertAlmostEqual(by["tsalloc"]["paired_baseline"], 0.9 / 1.05)
        self.assertEqual(by["tsalloc"]["baseline_n"], 11)
        self.assertEqual(tsbench.paired_verdict(by["tsalloc"], tsbench.BASELINE_KEYS), "faster")
        self.assertEqual(tsbench.paired_verdict(by["glibc"], tsbench.BASELINE_KEYS), "slower")
        self.assertIsNone(by["tcmalloc"]["paired_baseline"])  # the baseline itself
        self.assertEqual(tsbench.baseline_name(summaries), "tcmalloc")
        text = tsbench.format_tables(summaries, allocs, [self.wl], 2)
        block = text[text.index("== time against the baseline tcmalloc"):].splitlines()
        self.assertIn("tsalloc 0.86 [0.86-0.86] <", block[1])
        self.assertIn("glibc 1.90 [1.90-1.90] >", block[1])
        md = tsbench.markdown_report(report_doc(allocs, summaries))
        self.assertIn("**Against the baseline tcmalloc, paired by round:**", md)
        # Without a baseline: no such values and no such section.
        summaries = [tsbench.summarize(self.wl, a, cells[("w", a.name)], 2) for a in allocs]
        tsbench.add_ratios(summaries, allocs, cells)
        self.assertIsNone(summaries[3]["paired_baseline"])
        self.assertIsNone(tsbench.baseline_name(summaries))
        self.assertNotIn("against the baseline",
                         tsbench.format_tables(summaries, allocs, [self.wl], 2))

    def test_background_load(self):
        # 10 s on 2 CPUs; the CPUs were busy 10 s, of which tsbench and its
        # runs used 5: others took 5 of 20.
        load = tsbench.BackgroundLoad()
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
        allocs = [tsbench.Allocator("glibc", None, "system"),
                  tsbench.Allocator("bad", "/b", "tsalloc"),
                  tsbench.Allocator("good", "/g", "tsalloc")]
        cells = {("w", "glibc"): [fake_run(check=42)], ("w", "bad"): [fake_run(check=41)],
                 ("w", "good"): [fake_run(check=42)]}
        tsbench.check_values(self.wl, cells, allocs)
        self.assertEqual(cells[("w", "bad")][0].status, tsbench.WRONG)
        self.assertIn("expected 42", cells[("w", "bad")][0].reason)
        self.assertEqual(cells[("w", "good")][0].status, tsbench.OK)

    def test_check_reference_without_glibc_is_the_majority(self):
        allocs = [tsbench.Allocator(n, "/" + n, "tsalloc") for n in ("a", "b", "c")]
        cells = {("w", "a"): [fake_run(check=7)], ("w", "b"): [fake_run(check=5)],
                 ("w", "c"): [fake_run(check=5)]}
        tsbench.check_values(self.wl, cells, allocs)
        self.assertEqual(cells[("w", "a")][0].status, tsbench.WRONG)
        self.assertEqual(cells[("w", "b")][0].status, tsbench.OK)


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
        self.assertEqual(list(rows[0].keys()), tsbench.RUN_COLUMNS)
        # 4 healthy allocators x 2 workloads x 2 runs, 6 broken ones x 2 workloads x 1 run
        self.assertEqual(len(rows), 4 * 2 * 2 + 6 * 2)
        crashed = [r for r in rows if r["allocator"] == "crashy"]
        self.assertTrue(all(r["status"] == "crashed" and r["time_s"] == "" for r in crashed))
        with open(os.path.join(self.out, "summary.csv")) as f:
            summary = list(csv.DictReader(f))
        self.assertEqual(list(summary[0].keys()), tsbench.SUMMARY_COLUMNS)
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
        self.assertEqual(md, tsbench.markdown_report(self.doc))
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


def md_tables(md):
    """The markdown's tables, each a list of rows (lists of cell texts), the
    alignment row left out."""
    tables, cur = [], None
    for line in md.splitlines():
        if line.startswith("|"):
            cells = [c.strip() for c in line.strip()[1:-1].split(" | ")]
            if cur is None:
                cur = []
                tables.append(cur)
            if not line.startswith("|:---"):
                cur.append(cells)
        else:
            cur = None
    return tables


def fake_results():
    """A results.json document as a full run writes it, with every kind of cell."""
    allocs = [tsbench.Allocator("glibc", None, "system"),
              tsbench.Allocator("jemalloc", "/p/libjemalloc.so.2", "peer"),
              tsbench.Allocator("tcmalloc", "/p/libtcmalloc_minimal.so.4", "peer",
                                available=False, note="not installed"),
              tsbench.Allocator("tsalloc", "/b/libtsalloc.so", "tsalloc"),
              tsbench.Allocator("bestfit", "/b/libtsalloc-bestfit.so", "tsalloc"),
              tsbench.Allocator("pow2", "/b/libtsalloc-pow2.so", "tsalloc")]
    wls = [tsbench.Workload("lecture1", "many threads", [], []),
           tsbench.Workload("collatz-list", "lists", [], []),
           tsbench.Workload("fastpath", "one thread", [], [])]
    times = {"glibc": 0.1, "jemalloc": 0.05, "tsalloc": 0.08, "bestfit": 2.5, "pow2": 0.3}
    bad = {("lecture1", "bestfit"): (tsbench.TIMEOUT, "no result within 3.0 s"),
           ("lecture1", "pow2"): (tsbench.CRASHED, "killed by SIGSEGV"),
           ("collatz-list", "pow2"): (tsbench.WRONG, "check=1, expected 2 (glibc)"),
           ("fastpath", "tsalloc"): (tsbench.FAILED, "exit 1: a|b")}
    summaries = []
    for wl in wls:
        for a in allocs:
            if not a.available:
                continue
            threads = 32 if wl.name == "lecture1" else 1
            run = fake_run(time_s=times[a.name], rss=2048 if a.name == "glibc" else 3072,
                           threads=threads)
            if (wl.name, a.name) in bad:
                run.status, run.reason = bad[(wl.name, a.name)]
            summaries.append(tsbench.summarize(wl, a, [run, run, run], 2))
    tsbench.add_ratios(summaries, allocs)
    doc = {"tool": "tsbench", "format": 1, "started": "2025-03-04T10:11:12",
           "machine": {"cpu": "Test CPU 9000", "cores": 2, "usable_cores": 2,
                       "kernel": "6.1.0-test", "glibc": "glibc 2.36"},
           "config": {"runs": 3, "quick": False},
           "notes": ["memsim replays memsim.trace",
                     "workloads with more threads than the 2 cores oversubscribe them"],
           "allocators": [a.to_json() for a in allocs],
           "workloads": [{"name": w.name, "what": w.what, "args": []} for w in wls],
           "summary": summaries, "runs": [], "strace": [],
           "callgrind": {"glibc": {"instr_per_pair": {"16": 145.4, "64": 146.0}},
                         "tsalloc": {"instr_per_pair": {"16": 20.2, "64": 21.0}},
                         "pow2": {"error": "valgrind exit 1"}}}
    return json.loads(json.dumps(doc, default=str))


class MarkdownTest(unittest.TestCase):
    def setUp(self):
        self.doc = fake_results()
        self.md = tsbench.markdown_report(self.doc)
        self.tables = md_tables(self.md)

    def test_header_line_states_machine_date_runs_and_oversubscription(self):
        first = self.md.splitlines()[0]
        for text in ("Test CPU 9000", "2 cores", "kernel 6.1.0-test", "glibc 2.36",
                     "2025-03-04", "median of 3 per cell", "above 2", "oversubscribe"):
            self.assertIn(text, first)
        self.assertNotIn("Quick mode", first)
        self.doc["config"]["quick"] = True
        self.assertIn("Quick mode", tsbench.markdown_report(self.doc).splitlines()[0])

    def test_tables_are_rectangular(self):
        self.assertEqual(len(self.tables), 3)  # time, peak RSS, instructions
        for t in self.tables:
            self.assertTrue(all(len(row) == len(t[0]) for row in t), t)
        aligns = [l for l in self.md.splitlines() if l.startswith("|:---")]
        self.assertEqual(aligns[0], "|:---|---:|---:|---:|---:|---:|---:|")

    def test_time_table(self):
        header, rows = self.tables[0][0], {r[0]: r for r in self.tables[0][1:]}
        self.assertEqual(header, ["workload", "threads", "glibc", "jemalloc", "tsalloc",
                                  "bestfit", "pow2"])  # tcmalloc is missing: no column
        self.assertEqual(rows["lecture1"], ["lecture1", "32*", "0.100", "0.0500 (0.50)",
                                            "0.0800 (0.80)", "TIMEOUT", "CRASHED"])
        self.assertEqual(rows["collatz-list"], ["collatz-list", "1", "0.100", "0.0500 (0.50)",
                                                "0.0800 (0.80)", "2.50 (25.00)", "WRONG"])
        self.assertEqual(rows["fastpath"][4], "FAILED")
        # geomean over the ok cells only, saying how many of them there were
        self.assertEqual(rows["geomean vs glibc"],
                         ["geomean vs glibc", "", "1.00", "0.50", "0.80 (2 of 3)",
                          "25.00 (2 of 3)", "3.00 (1 of 3)"])

    def test_rss_table(self):
        header, rows = self.tables[1][0], {r[0]: r for r in self.tables[1][1:]}
        self.assertEqual(header[:3], ["workload", "threads", "glibc"])
        self.assertEqual(rows["lecture1"], ["lecture1", "32*", "2.0", "3.0 (1.50)",
                                            "3.0 (1.50)", "TIMEOUT", "CRASHED"])

    def test_instructions_table(self):
        t = self.tables[2]
        self.assertEqual(t[0], ["allocator", "16 B", "64 B"])
        self.assertEqual(t[1], ["glibc", "145", "146"])
        self.assertEqual(t[2], ["tsalloc", "20", "21"])
        self.assertEqual(t[3], ["pow2", "error: valgrind exit 1", "-"])
        del self.doc["callgrind"]
        self.assertEqual(len(md_tables(tsbench.markdown_report(self.doc))), 2)

    def test_end_rss_table(self):
        # Only workloads whose runs report rss_end_kb get a row; failed cells stay empty.
        for c in self.doc["summary"]:
            if c["workload"] == "collatz-list" and c["status"] == tsbench.OK:
                c["extra"]["rss_end_kb"] = {"glibc": 4096, "jemalloc": 2048}.get(
                    c["allocator"], 1024)
        md = tsbench.markdown_report(self.doc)
        self.assertIn("**Resident at the end:**", md)
        t = md_tables(md)[2]
        self.assertEqual(t[0], ["workload", "glibc", "jemalloc", "tsalloc", "bestfit", "pow2"])
        self.assertEqual(t[1:], [["collatz-list", "4.0", "2.0 (0.50)", "1.0 (0.25)",
                                  "1.0 (0.25)", ""]])
        self.assertNotIn("Resident at the end", self.md)  # no workload reports it

    def test_failures_and_notes_are_listed(self):
        self.assertIn("- `lecture1` on `bestfit`: TIMEOUT: 3 of 3 runs: no result within 3.0 s",
                      self.md)
        self.assertIn("- `collatz-list` on `pow2`: WRONG: 3 of 3 runs: check=1, expected 2 "
                      "(glibc)", self.md)
        self.assertIn("FAILED: 3 of 3 runs: exit 1: a\\|b", self.md)  # a | in a reason is escaped
        self.assertIn("- memsim replays memsim.trace", self.md)
        self.assertNotIn("- workloads with more threads", self.md)  # the header says it

    def test_significant_digits(self):
        self.assertEqual(tsbench.fmt_sig(0.26), "0.260")
        self.assertEqual(tsbench.fmt_sig(7.994), "7.99")
        self.assertEqual(tsbench.fmt_sig(12.34), "12.3")
        self.assertEqual(tsbench.fmt_sig(1234.5), "1234")
        self.assertEqual(tsbench.fmt_sig(0.000123), "0.000123")
        self.assertEqual(tsbench.fmt_sig(None), "-")


class SpliceTest(unittest.TestCase):
    MD = "| a | b |\n|:---|---:|\n| x | 1 |\n"
    DOCS = {
        "none": "# Title\n\nSome text.\n",
        "open": "# T\n\n## Measured\n\n<!-- tsbench:table -->\n\n## Next\nmore\n",
        "both": "# T\n\n<!-- tsbench:table -->\nold table\n<!-- /tsbench:table -->\ntail\n",
    }

    def test_without_markers_both_are_appended(self):
        out = tsbench.splice_markdown(self.DOCS["none"], self.MD)
        self.assertTrue(out.startswith(self.DOCS["none"]))
        self.assertTrue(out.endswith("<!-- tsbench:table -->\n\n" + self.MD +
                                     "\n<!-- /tsbench:table -->\n"))

    def test_after_the_opening_marker_and_closed(self):
        out = tsbench.splice_markdown(self.DOCS["open"], self.MD)
        self.assertEqual(out, "# T\n\n## Measured\n\n<!-- tsbench:table -->\n\n" + self.MD +
                         "\n<!-- /tsbench:table -->\n\n## Next\nmore\n")

    def test_between_markers_is_replaced(self):
        out = tsbench.splice_markdown(self.DOCS["both"], self.MD)
        self.assertEqual(out, "# T\n\n<!-- tsbench:table -->\n\n" + self.MD +
                         "\n<!-- /tsbench:table -->\ntail\n")
        self.assertNotIn("old table", out)

    def test_idempotent(self):
        for name, doc in self.DOCS.items():
            once = tsbench.splice_markdown(doc, self.MD)
            self.assertEqual(tsbench.splice_markdown(once, self.MD), once, name)
            other = tsbench.splice_markdown(once, "something else\n")
            self.assertEqual(other.count("<!-- tsbench:table -->"), 1, name)
            self.assertEqual(tsbench.splice_markdown(other, self.MD), once, name)

    def test_markers_only_count_on_lines_of_their_own(self):
        doc = "Put `<!-- tsbench:table -->` in a doc.\n"
        out = tsbench.splice_markdown(doc, self.MD)
        self.assertTrue(out.startswith(doc + "\n<!-- tsbench:table -->\n"))

    def test_closing_marker_alone_is_an_error(self):
        with self.assertRaises(ValueError):
            tsbench.splice_markdown("a\n<!-- /tsbench:table -->\nb\n", self.MD)

    def test_file(self):
        with tempfile.TemporaryDirectory() as d:
            path = os.path.join(d, "doc.md")
            with open(path, "w") as f:
                f.write(self.DOCS["open"])
            os.chmod(path, 0o640)
            self.assertTrue(tsbench.splice_file(path, self.MD))
            self.assertFalse(tsbench.splice_file(path, self.MD))
            self.assertEqual(stat.S_IMODE(os.stat(path).st_mode), 0o640)
            self.assertEqual(os.listdir(d), ["doc.md"])


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
            self.assertEqual(f.read(), tsbench.markdown_report(self.doc))
        with open(doc) as f:
            spliced = f.read()
        self.assertEqual(spliced, tsbench.splice_markdown(
            "## Measured\n\n<!-- tsbench:table -->\n", tsbench.markdown_report(self.doc)))
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


LAUNCHER = os.environ.get("TSBENCH_EXEC")


@unittest.skipUnless(LAUNCHER and os.access(LAUNCHER, os.X_OK),
                     "TSBENCH_EXEC (the built bin/tsbench-exec) not given")
class LauncherTest(unittest.TestCase):
    def test_peak_rss_is_not_the_runners(self):
        # Without the launcher, ru_maxrss carries Python's RSS across exec.
        direct, _, _ = tsbench.run_process(["true"], 30)
        launched, _, _ = tsbench.run_process(["true"], 30, launcher=LAUNCHER)
        self.assertEqual(launched.status, tsbench.OK)
        self.assertLess(launched.maxrss_kb, direct.maxrss_kb)
        self.assertLess(launched.maxrss_kb, 8 * 1024)

    def test_crash_and_exit_status_pass_through(self):
        r, _, _ = tsbench.run_process(["sh", "-c", "kill -SEGV $$"], 30, launcher=LAUNCHER)
        self.assertEqual(r.status, tsbench.CRASHED)
        self.assertIn("SIGSEGV", r.reason)
        r, _, _ = tsbench.run_process(["sh", "-c", "exit 3"], 30, launcher=LAUNCHER)
        self.assertEqual(r.exit, 3)

    def test_preload_reaches_the_child_only(self):
        lib = harmless_library()
        r, out, _ = tsbench.run_process(["sh", "-c", "echo $LD_PRELOAD"], 30, preload=lib,
                                        launcher=LAUNCHER)
        self.assertEqual(out.strip(), lib)

    def test_timeout_kills_the_whole_group(self):
        r, _, _ = tsbench.run_process(["sleep", "30"], 0.5, launcher=LAUNCHER)
        self.assertEqual(r.status, tsbench.TIMEOUT)
        self.assertLess(r.wall_s, 10)

    def test_rss_is_sampled_from_the_child(self):
        r, _, _ = tsbench.run_process(
            [sys.executable, "-c", "import time; b = bytearray(64 << 20); time.sleep(0.3)"],
            30, launcher=LAUNCHER, sample_rss=True)
        self.assertEqual(r.status, tsbench.OK)
        self.assertGreater(max(kb for _, kb in r.rss_series), 60 * 1024)


if __name__ == "__main__":
    unittest.main()
