"""Running the workloads: each cell (workload x allocator) runs N times,
interleaved (A B C A B C ...) so that a slow spell of the machine touches
every allocator alike. A bad run is not repeated; a slow cell stops at its
cell budget and the whole run at its time budget; each run's timeout follows
the fastest median so far. Also the callgrind pass over fastpath.
"""

import os
import statistics
import time

from tsbench.outcome import CRASHED, FAILED, OK, SKIPPED, RunResult, parse_result
from tsbench.probes import run_callgrind, run_strace
from tsbench.process import run_process
from tsbench.stats import check_values, early_check
from tsbench.workloads import Skip


class Context:
    """What a workload's prepare step sees: the build's bin/, the results
    directory, --quick, and the notes the report ends with."""

    def __init__(self, bindir, outdir, quick):
        self.bindir = bindir
        self.outdir = outdir
        self.quick = quick
        self.notes = []


class Progress:
    """The progress line on stderr: rewritten in place on a terminal, one line
    per finished run otherwise."""

    def __init__(self, total, stream):
        self.total = total
        self.done = 0
        self.stream = stream
        self.tty = stream.isatty()
        self.t0 = time.time()

    def update(self, text, final=False):
        self.done += 1 if final else 0
        msg = "[%3d/%d %5.0fs] %s" % (self.done, self.total, time.time() - self.t0, text)
        if self.tty:
            self.stream.write("\r\033[K" + msg[:150])
            if final and self.done == self.total:
                self.stream.write("\n")
        elif final:
            self.stream.write(msg + "\n")
        self.stream.flush()

    def finish(self):
        if self.tty:
            self.stream.write("\n")
            self.stream.flush()


def same_library(a, b):
    """Whether paths a and b name one library file (by name when one is gone)."""
    try:
        return os.path.samefile(a, b)
    except OSError:
        return os.path.basename(a) == os.path.basename(b)


def run_once(wl, alloc, bindir, extra_args, timeout, launcher=None):
    """One run of wl under alloc, its result line checked: a crash, a FAILED
    or missing line, a non-zero exit or a preload that did not take effect
    (malloc_from names another library) makes it a bad run."""
    cmd = wl.argv(bindir, extra_args)
    res, stdout, stderr = run_process(cmd, timeout, preload=alloc.path, launcher=launcher,
                                      sample_rss=wl.rss_series, env=alloc.env,
                                      stdin=getattr(wl, "stdin", None))
    if res.status != OK:
        if res.status == CRASHED and res.stderr_tail:
            res.reason += ": " + res.stderr_tail.splitlines()[-1][:160]
        return res
    if getattr(wl, "kind", None) == "command":
        return command_result(res, stderr)
    status, fields, reason = parse_result(wl.program, stdout)
    res.fields = fields
    if "cannot be preloaded" in stderr:
        res.status, res.reason = FAILED, "LD_PRELOAD not in effect: " + \
            next(l for l in stderr.splitlines() if "cannot be preloaded" in l)[:200]
    elif status != OK:
        res.status, res.reason = status, reason
        if res.exit:
            res.reason = "exit %d: %s" % (res.exit, reason)
    elif res.exit != 0:
        res.status, res.reason = FAILED, "exit %d after an ok line" % res.exit
    elif "malloc_from" in fields:
        origin = str(fields["malloc_from"])
        if alloc.path and not same_library(origin, alloc.path):
            res.status, res.reason = FAILED, "preload not in effect: malloc from " + origin
        elif not alloc.path and "libc.so" not in origin:
            res.status, res.reason = FAILED, "expected glibc's malloc, got " + origin
    return res


def command_result(res, stderr):
    """A user's command has no result line: its check value is its exit
    status with its output's hash (any exit status is a result, compared
    with the reference's), its resident set at exit the last RSS sample."""
    res.fields = {"output": "exit%d/sha256:%s/%dB" % (res.exit, res.stdout_sha256[:16],
                                                       res.stdout_len),
                  "exit": res.exit}
    # A zombie's statm reads 0: the last sample of the living process counts,
    # and only past the first two (a shorter life has none past its exec).
    living = [kb for _, kb in res.rss_series if kb > 0]
    if len(living) >= 3:
        res.fields["rss_end_kb"] = living[-1]
    if "cannot be preloaded" in stderr:
        res.status, res.reason = FAILED, "LD_PRELOAD not in effect: " + \
            next(l for l in stderr.splitlines() if "cannot be preloaded" in l)[:200]
    return res


def run_timeout(args, wl, alloc, active, cells):
    """This run's limit in seconds: --slow-factor times the fastest median
    wall time so far, at least --min-timeout; once this cell has finished a
    run, at least 1.5 times its slowest one; never above --timeout."""
    oks = [statistics.median([r.wall_s for r in rs if r.status == OK])
           for rs in (cells.get((wl.name, b.name), []) for b in active)
           if any(r.status == OK for r in rs)]
    limit = args.timeout
    if oks:
        limit = min(args.timeout, max(args.min_timeout,
                                      args.slow_factor * min(oks)))
    own = [r.wall_s for r in cells.get((wl.name, alloc.name), []) if r.status == OK]
    if own:  # it finished once: do not flip to TIMEOUT on noise
        limit = min(args.timeout, max(limit, 1.5 * max(own)))
    return limit


def run_workloads(args, workloads, active, ctx, launcher, strace_note, progress, log):
    """Every workload's cells, interleaved run by run. Returns (cells: {(workload,
    allocator): [RunResult]}, strace: {(workload, allocator): counts}, whether
    Ctrl-C interrupted it); what ran before an interrupt is kept."""
    bindir, outdir = ctx.bindir, ctx.outdir
    cells = {}
    strace = {}
    interrupted = False
    bench_start = time.time()
    over_budget = False
    try:
        for wl in workloads:
            extra = list(wl.quick if args.quick else wl.args)
            skip_reason = wl.missing(bindir)
            if skip_reason is None and wl.prepare:
                try:
                    extra += wl.prepare(ctx)
                except Skip as e:
                    skip_reason = str(e)
            if skip_reason:
                log("tsbench: %s skipped: %s" % (wl.name, skip_reason))
                ctx.notes.append("%s skipped: %s" % (wl.name, skip_reason))
                for a in active:
                    r = RunResult()
                    r.status, r.reason = SKIPPED, skip_reason
                    cells[(wl.name, a.name)] = [r]
                progress.done += len(active) * args.runs
                continue
            spent = {a.name: 0.0 for a in active}
            dead = set()
            for run in range(1, args.runs + 1):
                if run > 1 and args.time_budget and time.time() - bench_start > args.time_budget:
                    if not over_budget:
                        over_budget = True
                        ctx.notes.append("past the %.0f s time budget from %s on: one run per "
                                         "cell" % (args.time_budget, wl.name))
                    progress.done += (args.runs - run + 1) * (len(active) - len(dead))
                    break
                for a in active:
                    if a.name in dead:
                        continue
                    limit = run_timeout(args, wl, a, active, cells)
                    progress.update("%s run %d/%d %s ..." % (wl.name, run, args.runs, a.name))
                    r = run_once(wl, a, bindir, extra, limit, launcher)
                    cells.setdefault((wl.name, a.name), []).append(r)
                    early_check(wl, a, r, cells)
                    spent[a.name] += r.wall_s or 0
                    shown = ("%.3f s" % r.time_s()) if r.status == OK else \
                        "%s %s" % (r.status.upper(), r.reason[:60])
                    progress.update("%s run %d/%d %s: %s" % (wl.name, run, args.runs, a.name,
                                                             shown), final=True)
                    # A bad cell is not rerun; a slow one not beyond its budget.
                    over = args.cell_budget > 0 and spent[a.name] > args.cell_budget
                    if r.status != OK or (over and run < args.runs):
                        if r.status == OK:
                            ctx.notes.append("%s on %s: %d run(s) only (%.1f s, over the %.1f s"
                                             " cell budget)" % (wl.name, a.name, run,
                                                                spent[a.name], args.cell_budget))
                        progress.done += args.runs - run
                        dead.add(a.name)
            check_values(wl, cells, active)
            if args.strace and not strace_note:
                for a in active:
                    runs = cells.get((wl.name, a.name), [])
                    if runs and all(r.status == OK for r in runs):
                        med = statistics.median(r.wall_s for r in runs)
                        progress.update("%s strace %s ..." % (wl.name, a.name))
                        strace[(wl.name, a.name)] = run_strace(
                            wl, a, bindir, extra, max(args.min_timeout * 4, 30 * med), outdir)
    except KeyboardInterrupt:
        interrupted = True
        log("\ntsbench: interrupted; writing what was measured")
    progress.finish()
    return cells, strace, interrupted


def run_callgrinds(args, active, ctx, progress):
    """{allocator: instructions per pair or error} of fastpath under callgrind,
    when fastpath is built and among the workloads asked for."""
    callgrind = {}
    if os.path.exists(os.path.join(ctx.bindir, "tsb-fastpath")):
        if not args.workloads or "fastpath" in args.workloads.split(","):
            for a in active:
                progress.update("callgrind fastpath %s ..." % a.name)
                callgrind[a.name] = run_callgrind(a, ctx.bindir, ctx.outdir)
            progress.finish()
    return callgrind
