"""Tests of allocator specs (tsbench.allocators): NAME=PATH[:VAR=VALUE...]
gives a library and the environment of every run under it; the variables
reach the program (run_process) and strace (run_strace's command)."""

import argparse
import os
import shutil
import sys
import tempfile
import unittest

import tsbench_support  # noqa: F401 (puts bench/ on sys.path)
from tsbench import allocators, probes, process
from tsbench.workloads import Workload


class SpecTest(unittest.TestCase):
    def test_plain_spec_has_no_env(self):
        name, path, env = allocators.parse_allocator_spec("old=/x/lib.so")
        self.assertEqual((name, path, env), ("old", "/x/lib.so", {}))

    def test_spec_with_variables(self):
        name, path, env = allocators.parse_allocator_spec(
            "bestfit-futex=/b/libtsalloc-bestfit.so:TSALLOC_LOCK=futex:A=1=2")
        self.assertEqual(name, "bestfit-futex")
        self.assertEqual(path, "/b/libtsalloc-bestfit.so")
        self.assertEqual(env, {"TSALLOC_LOCK": "futex", "A": "1=2"})

    def test_empty_path_is_glibc(self):
        self.assertEqual(allocators.parse_allocator_spec("g=:MALLOC_ARENA_MAX=1"),
                         ("g", None, {"MALLOC_ARENA_MAX": "1"}))

    def test_bad_specs_are_refused(self):
        for spec in ("nothing", "x=/lib.so:NOVALUE", "x=/lib.so:=v"):
            with self.assertRaises(SystemExit):
                allocators.parse_allocator_spec(spec)

    def test_selected_allocators_carry_their_env(self):
        root = tempfile.mkdtemp(prefix="tsbench-alloc-")
        try:
            lib = os.path.join(root, "libx.so")
            open(lib, "w").close()
            args = argparse.Namespace(peer_dir=root, build=root, allocators="x-futex,x-spin,g",
                                      allocator=["x-futex=%s:TSALLOC_LOCK=futex" % lib,
                                                 "x-spin=%s:TSALLOC_LOCK=spin" % lib,
                                                 "g=:TSALLOC_LOCK=spin"])
            chosen = allocators.select_allocators(args, lambda m: None)
            self.assertEqual([(a.name, a.path, a.env, a.available) for a in chosen],
                             [("x-futex", lib, {"TSALLOC_LOCK": "futex"}, True),
                              ("x-spin", lib, {"TSALLOC_LOCK": "spin"}, True),
                              ("g", None, {"TSALLOC_LOCK": "spin"}, True)])
            self.assertEqual(chosen[0].to_json()["env"], {"TSALLOC_LOCK": "futex"})
        finally:
            shutil.rmtree(root, ignore_errors=True)


class EnvReachesTheProgramTest(unittest.TestCase):
    def test_run_process_sets_the_variables(self):
        cmd = [sys.executable, "-c", "import os; print(os.environ.get('TSALLOC_LOCK'))"]
        res, stdout, _ = process.run_process(cmd, 60, env={"TSALLOC_LOCK": "futex"})
        self.assertEqual(res.exit, 0)
        self.assertEqual(stdout.strip(), "futex")
        _, stdout, _ = process.run_process(cmd, 60)
        self.assertEqual(stdout.strip(), str(os.environ.get("TSALLOC_LOCK")))

    def test_strace_gets_the_variables(self):
        seen = []

        def fake_run(cmd, timeout, **kw):
            seen.append(cmd)
            return process.RunResult(), "", ""
        saved = probes.run_process
        probes.run_process = fake_run
        try:
            wl = Workload("lecture1", "", [], [])
            alloc = allocators.Allocator("b", "/b.so", "user", env={"TSALLOC_LOCK": "spin"})
            probes.run_strace(wl, alloc, "/bin", [], 10, tempfile.gettempdir())
        finally:
            probes.run_process = saved
        self.assertIn("TSALLOC_LOCK=spin", seen[0])
        self.assertEqual(seen[0][seen[0].index("TSALLOC_LOCK=spin") - 1], "-E")


if __name__ == "__main__":
    unittest.main()
