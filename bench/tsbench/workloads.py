"""The workload table: every program tsbench runs, with its default and
--quick arguments. Each is build/bin/tsb-<program>, built from
bench/workloads/<program>.c; several entries may run one program with
different arguments. docs/bench-workloads.md describes each of them.

Besides the table, two kinds of workload come from the command line: a
user's command (--command, CommandWorkload: timed from outside, its
standard output and exit status compared across allocators) and a recorded
trace (--trace, TraceWorkload: replayed by tsb-memsim).
"""

import os
import shlex
import shutil
import subprocess

from tsbench.process import clean_env


class Workload:
    """One benchmark program: build/bin/tsb-<program> (the name by default)
    plus its arguments."""

    def __init__(self, name, what, args, quick, check_key="check", rss_series=False,
                 prepare=None, program=None, threads_arg=None, scale_work="thread",
                 default=True):
        self.name = name
        self.program = program or name
        self.what = what
        self.args = list(args)
        self.quick = list(quick)
        self.check_key = check_key      # a value every allocator must agree on
        self.rss_series = rss_series    # keep the RSS-over-time samples
        self.prepare = prepare          # fn(ctx) -> extra args, or raises Skip
        self.threads_arg = threads_arg  # the option that sets its thread count (--scale)
        self.scale_work = scale_work    # "thread": work per thread; "total": shared
        self.default = default          # in the set run without --workloads

    def binary(self, bindir):
        return os.path.join(bindir, "tsb-" + self.program)

    def missing(self, bindir):
        """Why this workload cannot run here, or None."""
        path = self.binary(bindir)
        return None if os.path.exists(path) else "%s is not built" % os.path.basename(path)

    def argv(self, bindir, extra_args):
        return [self.binary(bindir)] + list(extra_args)


def xthread_handoff(name, sizes, lo, hi, blocks, batch, depth, quick_blocks):
    """xthread with 8 producers and 8 consumers of blocks of lo..hi bytes
    (2 and 2, quick_blocks each, for --quick); not in the default set."""
    def args(threads, n):
        return ["--producers", threads, "--consumers", threads, "--blocks", str(n),
                "--batch", str(batch), "--depth", str(depth), "--min", str(lo), "--max", str(hi)]
    return Workload(name, "xthread: 8 producers and 8 consumers of %s blocks" % sizes,
                    args("8", blocks), args("2", quick_blocks), program="xthread",
                    default=False)


class Skip(Exception):
    """A workload cannot run (not built, or its input could not be made)."""


def prepare_memsim(ctx):
    """memsim replays a trace: make one with gentrace (seeded, so the same
    arguments give the same trace), once per results directory."""
    gen = os.path.join(ctx.bindir, "tsb-gentrace")
    if not os.path.exists(gen):
        raise Skip("tsb-gentrace is not built")
    path = os.path.join(ctx.outdir, "memsim.trace")
    args = ["--ops", "2000", "--slots", "200"] if ctx.quick else ["--ops", "100000"]
    if not os.path.exists(path):
        proc = subprocess.run([gen] + args + ["--out", path], env=clean_env(),
                              capture_output=True, text=True, timeout=120)
        if proc.returncode != 0:
            raise Skip("gentrace failed: " + (proc.stdout + proc.stderr).strip()[-200:])
    ctx.notes.append("memsim replays %s, made by tsb-gentrace %s" % (os.path.basename(path),
                                                                      " ".join(args)))
    return ["--trace", path]


WORKLOADS = [
    Workload("lecture1", "seed lecture program 1: T threads loop malloc(8..512)/free",
             ["--threads", "32", "--iters", "400000"], ["--threads", "4", "--iters", "2000"],
             threads_arg="--threads"),
    # The same loop with untouched blocks, as the seed wrote it: less of the
    # time is the workload's own, so allocators differ more.
    Workload("lecture1-bare", "lecture1 as the seed wrote it: blocks are not touched",
             ["--threads", "32", "--iters", "400000", "--tags", "0"],
             ["--threads", "4", "--iters", "2000", "--tags", "0"], program="lecture1",
             threads_arg="--threads"),
    Workload("lecture2", "seed lecture program 2: P producer/consumer pairs, every block "
             "freed by the other thread", ["--pairs", "16", "--batches", "200"],
             ["--pairs", "2", "--batches", "4", "--batch", "64", "--ring", "256"]),
    # The scheduler decides whether a pair's two threads share a CPU, and that
    # moves lecture2's time more than the allocator does: these two fix it.
    Workload("lecture2-pair", "lecture2 with each pair's two threads on one CPU (blocks freed "
             "where they were written)", ["--pairs", "16", "--batches", "200", "--pin", "pair"],
             ["--pairs", "2", "--batches", "4", "--batch", "64", "--ring", "256", "--pin",
              "pair"], program="lecture2"),
    Workload("lecture2-split", "lecture2 with producers and consumers on different CPUs "
             "(every block crosses caches)", ["--pairs", "16", "--batches", "200", "--pin",
                                               "split"],
             ["--pairs", "2", "--batches", "4", "--batch", "64", "--ring", "256", "--pin",
              "split"], program="lecture2"),
    Workload("measurement", "seed 001 thread_test_measurement: 4 threads x 20000 blocks of "
             "128..1024 B, even threads free others' blocks",
             ["--api", "malloc", "--threads", "4", "--blocks", "20000"],
             ["--api", "malloc", "--threads", "2", "--blocks", "500"]),
    Workload("collatz-ivec", "seed 004 ivec: Collatz sequences in growable arrays, copied "
             "and freed at each step (realloc)", ["--threads", "4", "--count", "50000"],
             ["--threads", "2", "--count", "300"],
             threads_arg="--threads", scale_work="total"),
    Workload("collatz-list", "seed 004 list: Collatz sequences in linked lists of 16-byte "
             "cells, copied and freed at each step", ["--threads", "4", "--count", "3500"],
             ["--threads", "2", "--count", "100"],
             threads_arg="--threads", scale_work="total"),
    Workload("memsim", "seed 003 memsim: replay of a gentrace trace, T threads x R repeats",
             ["--threads", "4", "--repeats", "20"], ["--threads", "2", "--repeats", "2"],
             prepare=prepare_memsim, threads_arg="--threads"),
    Workload("server", "larson-style server: arrays of live blocks handed to fresh threads "
             "each round, random replacement",
             ["--threads", "4", "--slots", "2000", "--rounds", "20", "--ops", "40000"],
             ["--threads", "2", "--slots", "100", "--rounds", "3", "--ops", "500"],
             threads_arg="--threads"),
    # server at 16 threads: many more threads than a small machine's cores,
    # fewer replacements each (about 1 s on 2 cores; the seed designs take
    # 6-7 s, so it is run by name, not in the default set).
    Workload("server-many", "server at 16 threads: cross-thread frees and thread churn with "
             "many threads", ["--threads", "16", "--slots", "1000", "--rounds", "20", "--ops",
                              "20000"],
             ["--threads", "16", "--slots", "100", "--rounds", "2", "--ops", "200"],
             program="server", threads_arg="--threads", default=False),
    # About 1 s on 2 cores, 2-3 s for some designs: run by name.
    Workload("exchange", "mstress-like: fresh threads every round swap objects of 16 B - 16 MiB "
             "through shared arrays (atomic exchange); half outlive the round",
             ["--threads", "4", "--rounds", "20", "--objects", "2000"],
             ["--threads", "2", "--rounds", "3", "--objects", "200", "--keep", "100"],
             threads_arg="--threads", default=False),
    # What each thread costs in resident memory (rss_per_thread_kb; see
    # extra_rows in report_text).
    Workload("thread-overhead", "N threads with 64 KiB stacks each hold 8 blocks of 16 B - "
             "2 KiB: resident memory per thread beyond its stack",
             ["--threads", "2000"], ["--threads", "100"]),
    Workload("startup", "the workload starts itself M times (fork, exec): a short program of "
             "a few hundred blocks and a realloc chain, then exit",
             ["--runs", "200"], ["--runs", "10"]),
    Workload("exec-chain", "pipelines of 8 processes joined by pipes, each passing a few "
             "hundred blocks along, run R times", ["--stages", "8", "--reps", "20"],
             ["--stages", "3", "--reps", "2", "--records", "50"]),
    Workload("churn", "thread churn: waves of short-lived threads; each frees what its "
             "predecessor left, mallocs, leaves a quarter behind and exits",
             ["--threads", "4", "--waves", "300", "--blocks", "1000"],
             ["--threads", "2", "--waves", "6", "--blocks", "100"],
             threads_arg="--threads"),
    # What stays resident after another thread freed everything the owner made,
    # while the owner waits (reported as rss_end_kb; see end_rss_rows).
    Workload("idle-owner", "main fills 128 MiB of 16-1000 B blocks, a worker frees them all, "
             "main waits 1 s with no allocator call: what stays resident",
             ["--mb", "128", "--wait-ms", "1000"], ["--mb", "4", "--wait-ms", "200"]),
    # The same with big blocks, main keeping every 8th: no page comes back
    # whole, so only blocks freed inside pages can go.
    Workload("idle-owner-keep", "main fills 128 MiB of 16-400 KiB blocks, a worker frees 7 of "
             "8, main waits 1 s with no allocator call: what stays resident",
             ["--mb", "128", "--min", "16384", "--max", "409600", "--keep", "8",
              "--touch", "1", "--wait-ms", "1000"],
             ["--mb", "8", "--min", "16384", "--max", "409600", "--keep", "8",
              "--touch", "1", "--wait-ms", "200"], program="idle-owner"),
    # idle-owner with main replacing random blocks first (as larson's main
    # does): its own frees leave most of its pages with free blocks of their
    # own, out of the full lists, when the worker takes over.
    Workload("idle-owner-churn", "idle-owner, main replacing twice its blocks at random before "
             "the worker frees them all: what stays resident",
             ["--mb", "128", "--churn", "2", "--wait-ms", "1000"],
             ["--mb", "4", "--churn", "2", "--wait-ms", "200"], program="idle-owner",
             default=False),
    Workload("xthread", "disjoint threads: producers only malloc, consumers only free",
             ["--producers", "2", "--consumers", "2", "--blocks", "400000"],
             ["--producers", "1", "--consumers", "2", "--blocks", "4096", "--batch", "64",
              "--depth", "4"]),
    # xthread with 8 producers and 8 consumers handing big blocks (the big
    # classes) or large ones (a mapping each): where the allocator's path for
    # those sizes has a lock every thread takes. Run by name.
    xthread_handoff("xthread-big", "192-320 KiB", 196608, 327680, blocks=20000, batch=4,
                    depth=2, quick_blocks=64),
    xthread_handoff("xthread-large", "1-1.1 MiB", 1048576, 1153434, blocks=10000, batch=2,
                    depth=1, quick_blocks=32),
    Workload("false-sharing", "threads write small objects they allocated (active) or that "
             "replaced ones handed out by main (passive)",
             ["--threads", "2", "--rounds", "800", "--writes", "50000"],
             ["--threads", "2", "--rounds", "10", "--writes", "1000"],
             threads_arg="--threads"),
    Workload("fragmentation", "many small blocks, 90% freed at random, then larger ones: "
             "peak and final RSS", ["--small", "400000"], ["--small", "5000"], rss_series=True),
    Workload("midsize", "T threads each keep 32 blocks of 16-256 KiB and replace random ones",
             ["--threads", "2", "--slots", "32", "--ops", "500000"],
             ["--threads", "2", "--slots", "8", "--ops", "2000"],
             threads_arg="--threads"),
    Workload("large", "realloc growth to 200 MiB, then 1-32 MiB blocks",
             ["--max-mb", "200", "--blocks", "16", "--max-block-mb", "32", "--live", "8"],
             ["--max-mb", "4", "--blocks", "4", "--max-block-mb", "2", "--live", "2"],
             rss_series=True),
    Workload("fastpath", "single-thread malloc/free pair cost for several sizes",
             ["--iters", "1500000"],
             ["--iters", "20000", "--warmup", "100"]),
    # One big block in a loop, on its own: some allocators take 50x the time
    # of the small sizes there, which would swamp fastpath's total.
    Workload("fastpath-big", "single-thread malloc/free pair cost at 256 KiB",
             ["--iters", "1000000", "--sizes", "262144"],
             ["--iters", "2000", "--warmup", "100", "--sizes", "262144"], program="fastpath"),
    # Objects that all die together: one by one with free(), or a heap
    # destroyed whole (tsalloc's ts_heap_*, mimalloc's mi_heap_*; other
    # allocators fail arena-heap: "no heap API"). time_s is the drops only.
    Workload("arena", "parse trees of 200000 nodes of 24 B - 4 KiB built and freed node by "
             "node, 30 rounds (time: the frees)",
             ["--objects", "200000", "--rounds", "30"], ["--objects", "2000", "--rounds", "3"],
             default=False),
    Workload("arena-heap", "arena's trees in a heap of the allocator's own, destroyed whole "
             "(ts_heap_destroy, mi_heap_destroy; time: the destroys)",
             ["--objects", "200000", "--rounds", "30", "--api", "heap"],
             ["--objects", "2000", "--rounds", "3", "--api", "heap"], program="arena",
             default=False),
    # C++ new char[n]() of 5-25 MB: about 25 GB zero-filled at the default
    # size (7-35 s on 2 cores), so only when asked for by name.
    Workload("malloc-large", "20 buffers of 5-25 MB, one replaced at random 2000 times by "
             "C++ new char[n]() (zero-filled)", ["--buffers", "20", "--iters", "2000"],
             ["--buffers", "4", "--iters", "10", "--min-mb", "1", "--max-mb", "2"],
             default=False),
]


WORKLOAD_NAMES = [w.name for w in WORKLOADS]


class CommandWorkload(Workload):
    """A user's command, run as it is under each allocator. Its time is the
    wall time from outside; its check value is its exit status and a hash
    of its standard output, so an allocator under which the command prints
    something else (or exits otherwise) is WRONG, not timed. RSS is sampled
    while it runs: the last sample is its resident set near its exit."""

    kind = "command"

    def __init__(self, name, command, stdin=None):
        super().__init__(name, "command: " + " ".join(shlex.quote(a) for a in command),
                         [], [], check_key="output", rss_series=True, default=False)
        self.command = list(command)
        self.stdin = os.path.abspath(stdin) if stdin else os.devnull  # its standard input

    def binary(self, bindir):
        return shutil.which(self.command[0]) or self.command[0]

    def missing(self, bindir):
        if shutil.which(self.command[0]) is None:
            return "command not found: %s" % self.command[0]
        if not os.path.exists(self.stdin):
            return "no such file for standard input: %s" % self.stdin
        return None

    def argv(self, bindir, extra_args):
        return list(self.command)


class TraceWorkload(Workload):
    """A recorded trace (docs/trace-format.md) replayed by tsb-memsim: one
    thread, the calls in the order the recorder saw them, `repeats` times."""

    kind = "trace"

    def __init__(self, name, path, repeats=1):
        super().__init__(name, "trace %s replayed by memsim, %d repeat(s)"
                         % (os.path.basename(path), repeats),
                         ["--threads", "1", "--repeats", str(repeats)],
                         ["--threads", "1", "--repeats", str(repeats)], program="memsim",
                         default=False)
        self.path = os.path.abspath(path)
        self.prepare = lambda ctx: ["--trace", self.path]

    def missing(self, bindir):
        if not os.path.isfile(self.path):
            return "no such trace: %s" % self.path
        return super().missing(bindir)


def named_spec(option, spec):
    """NAME=VALUE of --command and --trace -> (name, value)."""
    name, eq, value = spec.partition("=")
    if not eq or not name or not value:
        raise SystemExit("tsbench: %s wants NAME=VALUE, got %r" % (option, spec))
    if name in WORKLOAD_NAMES:
        raise SystemExit("tsbench: %s %s: the name is one of the workloads'; pick another"
                         % (option, name))
    return name, value


def custom_workloads(args):
    """The workloads of --command, --trace and a command after `--`, in
    that order."""
    found = []
    for spec in args.command or []:
        name, text = named_spec("--command", spec)
        found.append(CommandWorkload(name, shlex.split(text), args.stdin))
    for spec in args.trace or []:
        name, path = named_spec("--trace", spec)
        found.append(TraceWorkload(name, path, args.trace_repeats))
    if args.argv:
        name = args.name or os.path.basename(args.argv[0])
        found.append(CommandWorkload(name, args.argv, args.stdin))
    names = [w.name for w in found]
    dup = sorted({n for n in names if names.count(n) > 1})
    if dup:
        raise SystemExit("tsbench: two workloads named %s (name them: --name, NAME=...)"
                         % ", ".join(dup))
    return found


def choose_workloads(args, log):
    """The workloads --workloads names, in table order, then those of
    --command and --trace; without any of them, those marked default."""
    custom = custom_workloads(args) if hasattr(args, "command") else []
    if custom and not args.workloads:
        return custom
    if not args.workloads:
        return [w for w in WORKLOADS if w.default]
    wanted = [n.strip() for n in args.workloads.split(",") if n.strip()]
    unknown = [n for n in wanted if n not in WORKLOAD_NAMES]
    if unknown:
        raise SystemExit("tsbench: unknown workload(s) %s; known: %s" % (
            ", ".join(unknown), ", ".join(WORKLOAD_NAMES)))
    return [w for w in WORKLOADS if w.name in wanted] + custom
