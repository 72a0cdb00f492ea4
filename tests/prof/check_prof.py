#!/usr/bin/env python3
"""The heap profiler's end-to-end tests: runs prof_program (whose allocations
are known) under libtsalloc with TSALLOC_PROF / TSALLOC_LEAKS and compares
the profiles (read with tools/tsalloc_prof.py) and the leak report with
the truth the program prints.

Usage: check_prof.py CASE BUILD_DIR PROGRAM TOOLS_DIR
Cases: shares, exact, exact_fp, peak, leaks, pprof, fork, twins, dlopen, altstack, nomap, signal, dump, sigdump,
active, launcher, base, collapsed, cxx,
reuse, unwind, zero, prefixed, google_pprof
(PROGRAM is prof_cxx for cxx, prof_unwind for unwind, else prof_program).
Exits 0 on success, 1 on a failed check, 77 when the case cannot run
here (pprof without Go, google_pprof without gperftools' google-pprof).
"""
import os
import shutil
import subprocess
import sys
import tempfile

CASE, BUILD, PROGRAM, TOOLS = sys.argv[1:5]
sys.path.insert(0, TOOLS)
import tsalloc_prof  # noqa: E402

LIB = os.path.join(BUILD, "lib", "libtsalloc.so")
FAILED = []


def check(cond, what):
    print(("ok   " if cond else "FAIL ") + what)
    if not cond:
        FAILED.append(what)


def run(args, env, tmp, expect_rc=0):
    e = {k: v for k, v in os.environ.items() if not k.startswith("TSALLOC_")}
    e.update({"LD_PRELOAD": LIB, "TSALLOC_PROF_FILE": os.path.join(tmp, "p.%p.heap")})
    e.update(env)
    r = subprocess.run([PROGRAM] + args, env=e, cwd=tmp, capture_output=True, text=True,
                       timeout=120)
    if expect_rc is not None and r.returncode != expect_rc:
        print(r.stdout + r.stderr)
        check(False, "%s exits with %s (got %d)" % (" ".join(args), expect_rc, r.returncode))
    truth = {}
    for line in r.stdout.splitlines():
        k, _, v = line.partition(" ")
        if v.isdigit():
            truth[k] = int(v)
    return r, truth


def cum(prof, fn, index=1):
    """The value of the stacks through fn, less the loader's own blocks: the
    thread-local storage of threads started below fn (the allocator's purge
    thread starts on an allocation once the heap is big enough)."""
    own = [s for s in prof.samples if not s.funcs[0].startswith("ld-linux")]
    return tsalloc_prof.by_function(tsalloc_prof.Profile(prof.header, own, prof.maps),
                                    index).get(fn, [0, 0])[1]


def profile_of(tmp, pid, suffix=""):
    return tsalloc_prof.load(os.path.join(tmp, "p.%d.heap%s" % (pid, suffix)))


def only_profile(tmp, suffix=".heap"):
    files = [f for f in os.listdir(tmp) if f.endswith(suffix)]
    check(len(files) == 1, "one profile *%s written (%s)" % (suffix, files))
    return tsalloc_prof.load(os.path.join(tmp, files[0])) if files else None


def case_shares(tmp):
    """Default rate, fixed seed: each function's share of the live bytes
    within 5 points of 60/30/10 (256 samples: one standard deviation is 3
    points for the 60%; 1.3 points off measured), the total within 20%
    (one standard deviation is 6%; 6.8% off measured)."""
    _, truth = run(["shares", "128", "0"], {"TSALLOC_PROF": "1", "TSALLOC_PROF_SEED": "1"}, tmp)
    prof = only_profile(tmp)
    est = {fn: cum(prof, fn) for fn in ("hold60", "hold30", "hold10")}
    est_sum, true_sum = sum(est.values()), sum(truth[fn] for fn in est)
    for fn in est:
        share, true_share = 100.0 * est[fn] / est_sum, 100.0 * truth[fn] / true_sum
        check(abs(share - true_share) <= 5, "%s: %.1f%% of live bytes (true %.1f%%)" % (
            fn, share, true_share))
    check(abs(est_sum - true_sum) <= 0.2 * true_sum,
          "live bytes of the three %d (true %d)" % (est_sum, true_sum))


def case_exact(tmp, unwind="1"):
    """TSALLOC_PROF_SAMPLE=1: every block, exact bytes and objects."""
    _, truth = run(["shares", "4"], {"TSALLOC_PROF": "1", "TSALLOC_PROF_SAMPLE": "1",
                                     "TSALLOC_PROF_UNWIND": unwind}, tmp)
    prof = only_profile(tmp)
    for fn in ("hold60", "hold30", "hold10"):
        check(cum(prof, fn) == truth[fn], "%s: %d live bytes (true %d)" % (
            fn, cum(prof, fn), truth[fn]))
    check(cum(prof, "leak37", 0) == 37 and cum(prof, "leak37") == 37000,
          "leak37: %d objects, %d bytes live (true 37, 37000)" % (
              cum(prof, "leak37", 0), cum(prof, "leak37")))
    check(cum(prof, "make_peak") == 0 and cum(prof, "make_peak", 3) == truth["make_peak"],
          "make_peak: 0 live, %d allocated (true %d)" % (cum(prof, "make_peak", 3),
                                                        truth["make_peak"]))


def case_exact_fp(tmp):
    """The same with the frame-pointer walk."""
    case_exact(tmp, "0")


def case_peak(tmp):
    """The peak profile holds the transient peak's function on top."""
    _, truth = run(["shares", "32"], {"TSALLOC_PROF": "1", "TSALLOC_PROF_SEED": "2",
                                      "TSALLOC_PROF_PEAK_GROWTH": "10"}, tmp)
    prof = only_profile(tmp, ".peak")
    if not prof:
        return
    est = {fn: cum(prof, fn) for fn in ("hold60", "hold30", "hold10", "make_peak")}
    top = max(est, key=est.get)
    check(top == "make_peak", "top of the peak profile: %s (%s)" % (top, est))
    # 94% of the true peak is seen (measured): 80% leaves 3x that shortfall.
    check(est["make_peak"] >= 0.8 * truth["make_peak"],
          "make_peak at the peak: %d bytes (true peak %d)" % (est["make_peak"],
                                                             truth["make_peak"]))


def leak_blocks(stderr):
    return [b for b in stderr.split("\n\n") if b.startswith("Leak of")]


def case_leaks(tmp):
    env = {"TSALLOC_LEAKS": "1", "TSALLOC_PROF_SAMPLE": "1", "TSALLOC_LEAKS_EXITCODE": "23"}
    r, _ = run(["leaks"], env, tmp, expect_rc=23)
    blocks = leak_blocks(r.stderr)
    check(len(blocks) == 1, "one leaking stack reported (%d)" % len(blocks))
    if blocks:
        head, _, frames = blocks[0].partition("\n")
        check(head == "Leak of 37000 byte(s) in 37 object(s) allocated from:", head)
        first = frames.splitlines()[0]
        check(" in leak37+" in first and "prof_program+0x" in first, "leak37 named: " + first)
    check("SUMMARY: tsalloc: 37000 byte(s) leaked in 37 allocation(s)." in r.stderr, "summary")
    check(not any(f.endswith(".heap") for f in os.listdir(tmp)), "no profile without PROF")
    r, _ = run(["clean"], env, tmp, expect_rc=0)
    check(not leak_blocks(r.stderr) and "SUMMARY" not in r.stderr, "no report without leaks")


def case_pprof(tmp):
    go = shutil.which("go") or ("/usr/local/go/bin/go" if os.path.exists(
        "/usr/local/go/bin/go") else None)
    if not go:
        print("SKIP: Go is not installed (go tool pprof)")
        sys.exit(77)
    run(["shares", "8"], {"TSALLOC_PROF": "1", "TSALLOC_PROF_SEED": "3"}, tmp)
    files = [os.path.join(tmp, f) for f in os.listdir(tmp) if f.endswith(".heap")]
    # Go builds pprof into its cache on first use (about a minute): a cache in
    # the build folder keeps it for the next runs; no network, no $HOME.
    home = os.path.join(tmp, "home")
    env = dict(os.environ, HOME=home, GOPATH=os.path.join(home, "go"), GOFLAGS="",
               GOCACHE=os.path.join(BUILD, "prof-gocache"), GOTOOLCHAIN="local",
               GOPROXY="off", PPROF_TMPDIR=home)
    r = subprocess.run([go, "tool", "pprof", "-top", "-symbolize=local", PROGRAM] + files[:1], env=env,
                       capture_output=True, text=True, timeout=300)
    print(r.stdout[-2000:] + r.stderr[-2000:])
    check(r.returncode == 0, "go tool pprof -top reads the profile")
    check("hold60" in r.stdout and "Type: inuse_space" in r.stdout, "pprof names hold60")


def case_google_pprof(tmp):
    """gperftools' Perl pprof (Debian's google-perftools) reads the profile
    and finds what tsalloc prof finds: each function's cumulative MB."""
    pprof = shutil.which("google-pprof")
    if not pprof:
        print("SKIP: google-pprof is not installed (Debian: google-perftools)")
        sys.exit(77)
    run(["shares", "32"], {"TSALLOC_PROF": "1", "TSALLOC_PROF_SEED": "3"}, tmp)
    prof = only_profile(tmp)
    if not prof:
        return
    path = [os.path.join(tmp, f) for f in os.listdir(tmp) if f.endswith(".heap")][0]
    r = subprocess.run([pprof, "--text", "--cum", PROGRAM, path], capture_output=True, text=True,
                       timeout=120, env=dict(os.environ, PPROF_TMPDIR=tmp))
    print(r.stdout[-1500:] + r.stderr[-1500:])
    check(r.returncode == 0, "google-pprof --text reads the profile")
    got = {}
    for line in r.stdout.splitlines():
        f = line.split()
        if len(f) == 6 and f[4].endswith("%"):
            got[f[5]] = float(f[3])  # cum, MB
    for fn in ("hold60", "hold30", "hold10"):
        want = cum(prof, fn) / 1048576.0
        check(fn in got and abs(got[fn] - want) <= 0.05 + 0.01 * want,
              "google-pprof: %s %.1f MB (tsalloc prof: %.2f)" % (fn, got.get(fn, -1), want))


def case_fork(tmp):
    """Each process that exits through exit() writes its own profile; a
    child that leaves with _exit writes none."""
    _, truth = run(["fork"], {"TSALLOC_PROF": "1", "TSALLOC_PROF_SAMPLE": "1"}, tmp)
    names = sorted(os.listdir(tmp))
    check(names == sorted("p.%d.heap" % truth[k] for k in ("parent", "child_exit")),
          "files of the parent and the exit()ing child: %s" % names)
    child = profile_of(tmp, truth["child_exit"])
    parent = profile_of(tmp, truth["parent"])
    check(cum(child, "child_kept") == 2 << 20, "child_kept live in the child's profile")
    check(cum(child, "fork_parent") == 1 << 20, "the parent's blocks live in the child's too")
    check(cum(parent, "child_kept") == 0 and cum(parent, "fork_parent") == 1 << 20,
          "the parent's profile holds only its own blocks")


def case_twins(tmp):
    """One call site reached through two callers at the same stack depth:
    the kept stacks (stackwalk.c) tell them apart."""
    _, truth = run(["twins"], {"TSALLOC_PROF": "1", "TSALLOC_PROF_SAMPLE": "1"}, tmp)
    prof = only_profile(tmp)
    for fn in ("via_a", "via_b"):
        check(cum(prof, fn) == truth[fn], "%s: %d live bytes (true %d)" % (
            fn, cum(prof, fn), truth[fn]))


def case_dlopen(tmp):
    """A library loaded with dlopen: its blocks are profiled and named."""
    plugin = os.path.join(os.path.dirname(PROGRAM), "..", "tests", "prof_plugin.so")
    _, truth = run(["dlopen", os.path.realpath(plugin)],
                   {"TSALLOC_PROF": "1", "TSALLOC_PROF_SAMPLE": "1"}, tmp)
    prof = only_profile(tmp)
    check(prof is not None and cum(prof, "plugin_alloc") == truth.get("plugin_alloc", -1),
          "plugin_alloc: %d live bytes (true %s)" % (cum(prof, "plugin_alloc") if prof else -1,
                                                     truth.get("plugin_alloc")))


def case_altstack(tmp):
    """Allocations on a signal stack: the walk reads nothing outside the
    stack it runs on (a scan from there to the thread's stack top would cross
    unmapped memory); both unwinders."""
    for unwind in ("1", "0"):
        sub = os.path.join(tmp, unwind)
        os.mkdir(sub)
        _, truth = run(["altstack"], {"TSALLOC_PROF": "1", "TSALLOC_PROF_SAMPLE": "1",
                                      "TSALLOC_PROF_UNWIND": unwind}, sub)
        prof = only_profile(sub)
        got = cum(prof, "alt_kept") if prof else -1
        check(got == truth.get("alt_kept"), "unwind %s: alt_kept %d live bytes (true %s)" % (
            unwind, got, truth.get("alt_kept")))


def case_reuse(tmp):
    """Freed sampled blocks come back for later samples: calloc'ed ones
    read as zeros, realloc keeps the bytes, the counts stay exact at rate 1
    and at the default rate, and a second free of a block the profiler kept
    is reported as a double free."""
    for rate in ("1", "65536"):
        sub = os.path.join(tmp, rate)
        os.mkdir(sub)
        _, truth = run(["reuse"], {"TSALLOC_PROF": "1", "TSALLOC_PROF_SAMPLE": rate,
                                   "TSALLOC_PROF_SEED": "3"}, sub)
        check(truth.get("dirty_calloc") == 0 and truth.get("bad_realloc") == 0,
              "rate %s: calloc zeroed, realloc kept the bytes (%s, %s)" % (
                  rate, truth.get("dirty_calloc"), truth.get("bad_realloc")))
        prof = only_profile(sub)
        got = cum(prof, "reuse_kept") if prof else -1
        if rate == "1":
            check(got == truth.get("reuse_kept"), "reuse_kept: %d live bytes (true %s)" % (
                got, truth.get("reuse_kept")))
        churned = cum(prof, "reuse_churn") if prof else -1
        check(churned == 0, "rate %s: reuse_churn holds nothing at exit (%d)" % (rate, churned))
    r, _ = run(["double_free"], {"TSALLOC_PROF": "1", "TSALLOC_PROF_SAMPLE": "1"}, tmp,
               expect_rc=None)
    check(r.returncode != 0 and "free(): double free of" in r.stderr,
          "a second free of a kept block is a double free (rc %d, %r)" % (
              r.returncode, r.stderr[-200:]))


def case_nomap(tmp):
    """When a sampled block finds no mapping (here: every mmap of tsalloc
    after the first 40 fails), it is served unsampled instead of refused.
    At a rate above 1, so that the blocks not sampled before the failures
    started had the core map its segments (at rate 1 the core has none)."""
    _, truth = run(["shares", "2", "0"], {"TSALLOC_PROF": "1", "TSALLOC_PROF_SAMPLE": "4096",
                                          "TSALLOC_PROF_SEED": "1",
                                          "TSALLOC_TEST_OS_FAIL": "mmap:40:-1"}, tmp)
    check(all(k in truth for k in ("hold60", "hold30", "hold10")), "every block allocated")
    prof = only_profile(tmp)
    check(prof is not None and 0 < cum(prof, "hold60") < truth.get("hold60", 0),
          "some of hold60's blocks sampled, not all")


def case_signal(tmp):
    """A handler that calls exit(): the profile is written."""
    r, _ = run(["signal"], {"TSALLOC_PROF": "1", "TSALLOC_PROF_SAMPLE": "1"}, tmp, expect_rc=3)
    prof = only_profile(tmp)
    check(prof is not None and cum(prof, "sig_kept") == 1 << 20, "sig_kept's blocks live")


def case_cxx(tmp):
    """operator new, plain and aligned: exact at rate 1, named by its caller."""
    _, truth = run([], {"TSALLOC_PROF": "1", "TSALLOC_PROF_SAMPLE": "1"}, tmp)
    prof = only_profile(tmp)
    check(cum(prof, "cxx_kept()") == truth["cxx_kept"], "cxx_kept: %d live bytes (true %d)" % (
        cum(prof, "cxx_kept()"), truth["cxx_kept"]))
    check(cum(prof, "cxx_kept()", 0) == 150, "cxx_kept: 150 objects live")
    check(cum(prof, "cxx_freed()", 3) == 4000 and cum(prof, "cxx_freed()") == 0,
          "cxx_freed: 4000 bytes allocated, none live")


def object_stacks(prof):
    """Each stack as (object, offset) pairs, which do not move with where
    the objects were mapped, with its live and allocated objects."""
    out = set()
    for s in prof.samples:
        frames = []
        for a in s.addrs:
            where = "0x%x" % a
            for lo, hi, off, path in prof.maps:
                if lo <= a < hi:
                    where = "%s+0x%x" % (os.path.basename(path), a - lo + off)
                    break
            frames.append(where)
        out.add((tuple(frames), s.values[0], s.values[2]))
    return out


def case_unwind(tmp):
    """The unwinder (TSALLOC_PROF_UNWIND=1) gives the stacks that glibc's
    backtrace() gives (2), through code without frame pointers, libc's
    qsort and a second thread, and loads no libgcc_s."""
    got = {}
    for unwind in ("1", "2"):
        sub = os.path.join(tmp, unwind)
        os.mkdir(sub)
        _, truth = run([], {"TSALLOC_PROF": "1", "TSALLOC_PROF_SAMPLE": "1",
                            "TSALLOC_PROF_UNWIND": unwind}, sub)
        prof = only_profile(sub)
        if not prof:
            return
        got[unwind] = object_stacks(prof)
        gcc = any("libgcc_s" in m[3] for m in prof.maps)
        check(gcc == (unwind == "2"), "unwind %s: libgcc_s %s" % (
            unwind, "loaded" if gcc else "not loaded"))
        deep = max(len(frames) for frames, _, _ in got[unwind])
        check(deep >= 16, "unwind %s: the deepest stack has %d frames" % (unwind, deep))
    only1, only2 = got["1"] - got["2"], got["2"] - got["1"]
    for frames, live, alloc in sorted(only1)[:5] + sorted(only2)[:5]:
        print("  %s %d %d: %s" % ("1" if (frames, live, alloc) in only1 else "2", live, alloc,
                                  " ".join(frames)))
    check(not only1 and not only2, "the same %d stacks from both (%d and %d differ)" % (
        len(got["1"] & got["2"]), len(only1), len(only2)))


def case_zero(tmp):
    """malloc(0) counts as one byte: exact at rate 1, and at rate 32 the
    objects are estimated within 10% (about 3000 samples: one standard
    deviation is 1.8%), with no bytes."""
    for rate, n, slack in (("1", 1000, 0), ("32", 100000, 0.10)):
        sub = os.path.join(tmp, rate)
        os.mkdir(sub)
        _, truth = run(["zero", str(n)], {"TSALLOC_PROF": "1", "TSALLOC_PROF_SAMPLE": rate,
                                          "TSALLOC_PROF_SEED": "4"}, sub)
        prof = only_profile(sub)
        if not prof:
            continue
        objs, size = cum(prof, "zero_kept", 0), cum(prof, "zero_kept")
        check(abs(objs - truth["zero_kept"]) <= slack * truth["zero_kept"] and size == 0,
              "rate %s: zero_kept %d objects, %d bytes live (true %d, 0)" % (
                  rate, objs, size, truth["zero_kept"]))


def case_prefixed(tmp):
    """ts_malloc, ts_calloc, ts_realloc and ts_aligned_alloc are sampled."""
    _, truth = run(["prefixed"], {"TSALLOC_PROF": "1", "TSALLOC_PROF_SAMPLE": "1"}, tmp)
    prof = only_profile(tmp)
    if not prof:
        return
    objs, size = cum(prof, "prefixed_kept", 0), cum(prof, "prefixed_kept")
    check(objs == truth.get("prefixed_objects") and size == truth.get("prefixed_bytes"),
          "prefixed_kept: %d objects, %d bytes live (true %s, %s)" % (
              objs, size, truth.get("prefixed_objects"), truth.get("prefixed_bytes")))


def case_dump(tmp):
    path = os.path.join(tmp, "on-demand.heap")
    _, truth = run(["dump", path], {"TSALLOC_PROF": "1", "TSALLOC_PROF_SAMPLE": "1",
                                    "TSALLOC_PROF_FINAL": "0"}, tmp)
    check(truth.get("dump_result") == 2, "ts_prof_dump returns 0")
    check(sorted(os.listdir(tmp)) == ["on-demand.heap"], "only the asked-for file: %s" % (
        os.listdir(tmp)))
    if os.path.exists(path):
        check(cum(tsalloc_prof.load(path), "dumped_fn") == 1 << 20, "dumped_fn's blocks live")
    _, truth = run(["dump", path + ".off"], {}, tmp)
    check(truth.get("dump_result") == 1, "ts_prof_dump returns -1 without the profiler")


def case_sigdump(tmp):
    """TSALLOC_PROF_SIGNAL: a profile from the handler itself when the
    profiler's lock is free, and from the lock's holder when the signal
    came while it held it (a thread blocked in ts_prof_dump's open of a
    FIFO); a signal that cannot be handled is reported."""
    fifo = os.path.join(tmp, "fifo")
    os.mkfifo(fifo)
    r, truth = run(["sigdump", fifo, "12"], {"TSALLOC_PROF": "1", "TSALLOC_PROF_SAMPLE": "1",
                                            "TSALLOC_PROF_FINAL": "0",
                                            "TSALLOC_PROF_SIGNAL": "12"}, tmp)
    if truth.get("no_syscall_file"):
        print("skipped: /proc/self/task/*/syscall cannot be read here")
        sys.exit(77)
    check(truth.get("signal_handled") == 1, "the signal reached the thread in the lock")
    check(truth.get("fifo_result") == 2 and truth.get("fifo_bytes", 0) > 0,
          "ts_prof_dump wrote the FIFO (%s bytes)" % truth.get("fifo_bytes"))
    pid = truth.get("pid")
    names = sorted(f for f in os.listdir(tmp) if f != "fifo")
    check(names == ["p.%s.heap.0" % pid, "p.%s.heap.1" % pid],
          "a numbered profile for each signal: %s" % names)
    for name in names:
        prof = tsalloc_prof.load(os.path.join(tmp, name))
        check(cum(prof, "dumped_fn") == 1 << 20, "%s: dumped_fn's blocks live" % name)
    r, _ = run(["leaks"], {"TSALLOC_PROF": "1", "TSALLOC_PROF_SIGNAL": "9"}, tmp)
    check("TSALLOC_PROF_SIGNAL=9: the signal cannot be handled" in r.stderr,
          "SIGKILL refused with a message")


def case_active(tmp):
    """ts_prof_set_active and TSALLOC_PROF_ACTIVE=0: only what was allocated
    while active is sampled; frees while inactive still leave the profile."""
    env = {"TSALLOC_PROF": "1", "TSALLOC_PROF_SAMPLE": "1", "TSALLOC_PROF_ACTIVE": "0"}
    _, truth = run(["active"], env, tmp)
    check(truth.get("state_at_start") == 1 and truth.get("on_returns") == 1,
          "inactive from the start")
    check(truth.get("off_returns") == 2 and truth.get("state_at_end") == 1,
          "active in between, inactive after")
    prof = only_profile(tmp)
    if prof is not None:
        check(cum(prof, "idle_kept", 2) == 0 and cum(prof, "late_kept", 2) == 0,
              "nothing sampled while inactive")
        check(cum(prof, "active_kept") == 1 << 20 and cum(prof, "active_kept", 0) == 128,
              "active_kept: 128 of its 256 blocks live (%d bytes)" % cum(prof, "active_kept"))
        check(cum(prof, "active_kept", 3) == 2 << 20, "active_kept: 2 MiB allocated")
    _, truth = run(["active"], {}, tmp)
    check(truth.get("state_at_start") == 0, "ts_prof_set_active returns -1 without the profiler")


def case_launcher(tmp):
    launcher = os.path.join(BUILD, "bin", "tsalloc")
    out = os.path.join(tmp, "run.heap")
    e = {k: v for k, v in os.environ.items() if not k.startswith("TSALLOC_")}
    # case_peak's size and seed: at 8 MiB (16 samples) the estimate of the
    # final heap passed 1.1x that of the transient 12 MiB peak in 1 run of
    # 6, and the later profile replaced the peak one.
    e["TSALLOC_PROF_SEED"] = "2"
    r = subprocess.run([launcher, "run", "--prof", "-o", out, "--", PROGRAM, "shares", "32"],
                       env=e, capture_output=True, text=True, timeout=120)
    check(r.returncode == 0 and os.path.exists(out), "tsalloc run --prof -o writes the file")
    svg, page = os.path.join(tmp, "f.svg"), os.path.join(tmp, "f.html")
    r = subprocess.run([launcher, "prof", out, "--top", "5", "--flame", svg],
                       capture_output=True, text=True, timeout=120)
    print(r.stdout + r.stderr)
    check(r.returncode == 0 and "hold60" in r.stdout, "tsalloc prof lists hold60")
    with open(svg) as f:
        text = f.read()
    check(text.startswith("<svg") and "hold60" in text, "the flame graph names hold60")
    r = subprocess.run([launcher, "prof", out, "--peak", "--flame", page],
                       capture_output=True, text=True, timeout=120)
    check(r.returncode == 0 and "make_peak" in r.stdout, "tsalloc prof --peak: make_peak")
    check(open(page).read().startswith("<!DOCTYPE html>"), "an HTML flame graph")


def case_base(tmp):
    """tsalloc prof --base: one profile less an earlier one of the same
    process, stack by stack (exact at rate 1)."""
    old, new = os.path.join(tmp, "old.heap"), os.path.join(tmp, "new.heap")
    _, truth = run(["grow", old, new], {"TSALLOC_PROF": "1", "TSALLOC_PROF_SAMPLE": "1",
                                        "TSALLOC_PROF_FINAL": "0"}, tmp)
    check(truth.get("dump_result") == 2, "both profiles written")
    if not (os.path.exists(old) and os.path.exists(new)):
        return
    diff = tsalloc_prof.subtract(tsalloc_prof.load(new), tsalloc_prof.load(old))
    check(cum(diff, "grown_fn") == 2 << 20, "grown_fn: +2 MiB (%d)" % cum(diff, "grown_fn"))
    check(cum(diff, "dumped_fn") == -(1 << 20), "dumped_fn: -1 MiB (%d)" % cum(diff, "dumped_fn"))
    check(cum(diff, "grown_fn", 3) == 2 << 20 and cum(diff, "dumped_fn", 3) == 0,
          "allocated in between: grown_fn's only")
    same = tsalloc_prof.subtract(tsalloc_prof.load(new), tsalloc_prof.load(new))
    check(not same.samples, "a profile less itself: nothing (%d stacks)" % len(same.samples))
    launcher = os.path.join(BUILD, "bin", "tsalloc")
    svg = os.path.join(tmp, "grew.svg")
    r = subprocess.run([launcher, "prof", new, "--base", old, "--top", "3", "--flame", svg],
                       capture_output=True, text=True, timeout=120)
    print(r.stdout + r.stderr)
    head, _, rest = r.stdout.partition(" allocated from:")
    frames = rest.partition("\n\n")[0]
    check(r.returncode == 0 and head.splitlines()[-1].startswith("2.00 MiB (100.0%)") and
          " grown_fn" in frames and "dumped_fn" not in frames,
          "tsalloc prof --base: the stack that grew, first")
    check("1.00 MiB shrank" in r.stdout, "and says what shrank")
    with open(svg) as f:
        text = f.read()
    check("grown_fn" in text and "dumped_fn" not in text, "the flame graph shows the growth")
    r = subprocess.run([launcher, "prof", new, "--base", os.path.join(tmp, "none.heap")],
                       capture_output=True, text=True, timeout=120)
    check(r.returncode == 2 and "none.heap" in r.stderr, "a missing base is named")


def case_collapsed(tmp):
    """tsalloc prof --collapsed, --focus and --ignore, exact at rate 1: the
    folded lines of hold60 add up to its live bytes, outermost frame first;
    --focus keeps only the stacks through a function, --ignore drops them."""
    _, truth = run(["shares", "4"], {"TSALLOC_PROF": "1", "TSALLOC_PROF_SAMPLE": "1"}, tmp)
    path = os.path.join(tmp, [n for n in os.listdir(tmp) if n.endswith(".heap")][0])
    launcher = os.path.join(BUILD, "bin", "tsalloc")

    def folded(*extra):
        r = subprocess.run([launcher, "prof", path, "--collapsed", "-"] + list(extra),
                           capture_output=True, text=True, timeout=120)
        check(r.returncode == 0, "tsalloc prof --collapsed - %s" % " ".join(extra))
        rows = [line.rpartition(" ") for line in r.stdout.splitlines()]
        return [(stack.split(";"), int(v)) for stack, _, v in rows]

    rows = folded()
    held = sum(v for stack, v in rows if any(fn.startswith("hold60") for fn in stack))
    check(held == truth["hold60"], "hold60's folded lines: %d bytes (true %d)" % (
        held, truth["hold60"]))
    through = [stack for stack, _ in rows if "hold60" in stack]
    check(through and all(s.index("main") < s.index("hold60") for s in through),
          "outermost frame first: main before hold60")
    check(all(v > 0 for _, v in rows) and [v for _, v in rows] == sorted(
        (v for _, v in rows), reverse=True), "positive values, largest first")
    focus = folded("--focus", "^hold(60|30)$")
    check(focus and all("hold60" in s or "hold30" in s for s, _ in focus) and
          sum(v for _, v in focus) == truth["hold60"] + truth["hold30"],
          "--focus: hold60's and hold30's stacks only, all of their bytes")
    ignore = folded("--ignore", "^hold60$")
    check(ignore and not any("hold60" in s for s, _ in ignore) and
          sum(v for _, v in ignore) == sum(v for _, v in rows) - truth["hold60"],
          "--ignore: every stack but hold60's")
    out = os.path.join(tmp, "f.folded")
    r = subprocess.run([launcher, "prof", path, "--focus", "hold10", "--collapsed", out],
                       capture_output=True, text=True, timeout=120)
    check(r.returncode == 0 and "hold10" in r.stdout and "hold60" not in r.stdout and
          os.path.exists(out), "the report and the file, focused")
    r = subprocess.run([launcher, "prof", path, "--focus", "("], capture_output=True,
                       text=True, timeout=120)
    check(r.returncode == 2 and "(" in r.stderr, "a bad expression is named")


def main():
    tmp = tempfile.mkdtemp(prefix="prof_%s_" % CASE)
    try:
        globals()["case_" + CASE](tmp)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    if FAILED:
        print("%d check(s) failed" % len(FAILED))
        sys.exit(1)


if __name__ == "__main__":
    main()
