"""Shared fixtures of the tsbench tests: puts bench/ on sys.path so that
`import tsbench` finds the package, and builds what the tests run on. ctest
(tsbench_unit in tests/bench/bench.cmake) runs every test_*.py of this
folder with `python3 -m unittest discover` from here.

The runner is exercised on a fake build directory: bin/tsb-<name> are small
Python scripts that behave according to the library in LD_PRELOAD, and the
"allocators" are copies of a harmless system library (so the dynamic loader
really preloads them). Nothing here needs matplotlib or the network.
"""

import io
import json
import os
import shutil
import stat
import sys

BENCH = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if BENCH not in sys.path:
    sys.path.insert(0, BENCH)

from tsbench import allocators, cli, outcome, stats, workloads  # noqa: E402


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
    code = cli.main(argv, stdout=out, stderr=err)
    return code, out.getvalue(), err.getvalue()


def fake_run(status=outcome.OK, time_s=0.1, rss=1000, check=42, threads=1):
    r = outcome.RunResult()
    r.status = status
    r.wall_s = time_s + 0.01
    r.user_s = r.sys_s = 0.0
    r.maxrss_kb = rss
    if status == outcome.OK:
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
    allocs = [allocators.Allocator("glibc", None, "system"),
              allocators.Allocator("jemalloc", "/p/libjemalloc.so.2", "peer"),
              allocators.Allocator("tcmalloc", "/p/libtcmalloc_minimal.so.4", "peer",
                                available=False, note="not installed"),
              allocators.Allocator("tsalloc", "/b/libtsalloc.so", "tsalloc"),
              allocators.Allocator("bestfit", "/b/libtsalloc-bestfit.so", "tsalloc"),
              allocators.Allocator("pow2", "/b/libtsalloc-pow2.so", "tsalloc")]
    wls = [workloads.Workload("lecture1", "many threads", [], []),
           workloads.Workload("collatz-list", "lists", [], []),
           workloads.Workload("fastpath", "one thread", [], [])]
    times = {"glibc": 0.1, "jemalloc": 0.05, "tsalloc": 0.08, "bestfit": 2.5, "pow2": 0.3}
    bad = {("lecture1", "bestfit"): (outcome.TIMEOUT, "no result within 3.0 s"),
           ("lecture1", "pow2"): (outcome.CRASHED, "killed by SIGSEGV"),
           ("collatz-list", "pow2"): (outcome.WRONG, "check=1, expected 2 (glibc)"),
           ("fastpath", "tsalloc"): (outcome.FAILED, "exit 1: a|b")}
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
            summaries.append(stats.summarize(wl, a, [run, run, run], 2))
    stats.add_ratios(summaries, allocs)
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
