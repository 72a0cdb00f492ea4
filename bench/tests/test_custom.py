"""Tests of the workloads given on the command line: --command, a command
after --, --trace, the "peers" word of --allocators, and --best-of all.
A command's output and exit status are its check value: one that differs
from glibc's is WRONG, not timed.
"""

import argparse
import os
import shutil
import tempfile
import unittest

from tsbench_support import harmless_library, make_fake_build, run_main
from tsbench import allocators, cli, stats, workloads
from tsbench_support import fake_run


class ParseTest(unittest.TestCase):
    def test_command_after_double_dash_is_one_workload(self):
        args = cli.parse_args(["--runs", "2", "--", "sort", "-n", "--", "x"])
        self.assertEqual(args.argv, ["sort", "-n", "--", "x"])
        wls = workloads.choose_workloads(args, lambda m: None)
        self.assertEqual([(w.name, w.command) for w in wls], [("sort", ["sort", "-n", "--", "x"])])

    def test_command_and_trace_specs(self):
        args = cli.parse_args(["--command", "py=python3 -c 'print(1)'", "--trace", "t=x.trace",
                               "--trace-repeats", "3"])
        wls = workloads.choose_workloads(args, lambda m: None)
        self.assertEqual(wls[0].command, ["python3", "-c", "print(1)"])
        self.assertEqual(wls[1].args, ["--threads", "1", "--repeats", "3"])
        self.assertEqual(wls[1].path, os.path.abspath("x.trace"))
        self.assertEqual(wls[1].program, "memsim")

    def test_bad_names_are_refused(self):
        for argv in (["--command", "fastpath=true"], ["--command", "noequals"],
                     ["--command", "a=true", "--trace", "a=x"]):
            with self.assertRaises(SystemExit):
                workloads.choose_workloads(cli.parse_args(argv), lambda m: None)
        with self.assertRaises(SystemExit):
            cli.parse_args(["--runs", "1", "--"])

    def test_peers_word_picks_the_installed_peers(self):
        root = tempfile.mkdtemp(prefix="tsbench-custom-")
        try:
            open(os.path.join(root, "libjemalloc.so.2"), "w").close()
            args = argparse.Namespace(peer_dir=root, build=root, allocators="glibc,peers",
                                      allocator=None)
            chosen = allocators.select_allocators(args, lambda m: None)
            self.assertEqual([a.name for a in chosen], ["glibc", "jemalloc"])
        finally:
            shutil.rmtree(root, ignore_errors=True)

    def test_best_of_all_compares_with_the_fastest_of_any_kind(self):
        allocs = [allocators.Allocator("glibc", None, "system"),
                  allocators.Allocator("bins", "/b.so", "tsalloc")]
        wl = workloads.Workload("w", "", [], [])
        summaries = [stats.summarize(wl, a, [fake_run(time_s=t)], 2)
                     for a, t in zip(allocs, (0.2, 0.1))]
        stats.add_ratios(summaries, allocs, best_of="all")
        self.assertAlmostEqual(summaries[0]["ratio_best_peer"], 2.0)
        self.assertEqual(summaries[0]["best_peer"], "bins")


@unittest.skipIf(harmless_library() is None, "no harmless shared library to preload")
class CommandRunTest(unittest.TestCase):
    def setUp(self):
        self.root = tempfile.mkdtemp(prefix="tsbench-cmd-")
        self.build, self.peers = make_fake_build(self.root, workloads=())

    def tearDown(self):
        shutil.rmtree(self.root, ignore_errors=True)

    def test_differing_output_is_wrong(self):
        code, out, _ = run_main([
            "--build", self.build, "--peer-dir", self.peers, "--allocators",
            "glibc,tsalloc,wrong", "--runs", "2", "--no-plots", "--strict", "--out",
            os.path.join(self.root, "r"), "--name", "echo", "--",
            "sh", "-c", 'case "$LD_PRELOAD" in *wrong*) echo 2;; *) echo 1;; esac'])
        self.assertEqual(code, 1)
        self.assertRegex(out, r"\n  tsalloc +\d")
        self.assertRegex(out, r"\n  wrong +WRONG: output=exit0/sha256:\w+/2B, expected "
                              r"exit0/sha256:\w+/2B \(glibc\)")
        self.assertNotIn("callgrind", out)

    def test_missing_command_is_skipped(self):
        code, out, _ = run_main(["--build", self.build, "--peer-dir", self.peers,
                                 "--allocators", "glibc", "--runs", "1", "--no-plots",
                                 "--out", os.path.join(self.root, "s"),
                                 "--command", "x=no-such-command-here"])
        self.assertEqual(code, 0)
        self.assertIn("x skipped: command not found: no-such-command-here", out)


if __name__ == "__main__":
    unittest.main()
