"""The terminal report: one block per workload, the ratio matrix against
glibc, the paired comparisons, what stays resident at the end, and the
strace and callgrind counts. --from-json prints it again from a saved run.
"""

from tsbench.outcome import CRASHED, FAILED, OK, SKIPPED, TIMEOUT, WRONG
from tsbench.report_text import EXTRA_TABLES, cell_label, end_rss_rows, fmt, fmt_ms, paired_text
from tsbench.stats import BASELINE_KEYS, baseline_name, geomean, paired_verdict


def format_tables(summaries, allocators, workloads, cpu_count, best_label="xpeer"):
    """The terminal report: one block per workload, then a ratio matrix.
    best_label heads the column of ratios to the best (xpeer: the fastest
    peer; xbest: the fastest of all)."""
    lines = []
    by_key = {(s["workload"], s["allocator"]): s for s in summaries}
    names = [a.name for a in allocators if a.available]
    width = max([len(n) for n in names] + [9])
    nw = max([14] + [len(wl.name) for wl in workloads])  # the matrices' first column
    for wl in workloads:
        cells = [by_key[(wl.name, n)] for n in names if (wl.name, n) in by_key]
        if not cells:
            continue
        threads = max((c["threads"] or 0 for c in cells), default=0)
        head = "== %s: %s" % (wl.name, wl.what)
        if threads > cpu_count:
            head += " [%d threads on %d cores: oversubscribed]" % (threads, cpu_count)
        lines.append(head)
        lines.append("  %-*s %8s %-17s %6s %6s %-17s %8s %7s %7s %8s %6s %8s" % (
            width, "allocator", "time ms", "(min-max)", "xglibc", best_label, "paired [95% CI]",
            "wall ms", "user s", "sys s", "peak MiB", "xglibc", "sbrk MiB"))
        for c in cells:
            label = cell_label(c)
            if label:
                lines.append("  %-*s %s: %s" % (width, c["allocator"], label, c["reason"]))
                continue
            rng = "(%s-%s)" % (fmt_ms(c["time_s_min"]), fmt_ms(c["time_s_max"])) \
                if c["runs_ok"] > 1 else "(1 run)"
            lines.append("  %-*s %8s %-17s %6s %6s %-17s %8s %7s %7s %8s %6s %8s" % (
                width, c["allocator"], fmt_ms(c["time_s"]), rng,
                fmt(c["ratio_glibc"], "%.2f"), fmt(c["ratio_best_peer"], "%.2f"),
                paired_text(c), fmt_ms(c["wall_s"]), fmt(c["user_s"], "%.2f"),
                fmt(c["sys_s"], "%.2f"),
                fmt(c["maxrss_kb"] / 1024 if c["maxrss_kb"] is not None else None, "%.1f"),
                fmt(c["rss_ratio_glibc"], "%.2f"),
                fmt(c["sbrk_growth_bytes"] / 1048576 if isinstance(c["sbrk_growth_bytes"],
                                                                  (int, float)) else None,
                    "%.1f")))
        lines.append("")
    # Matrix: time relative to glibc; the geomean row summarises each allocator.
    lines.append("== time relative to glibc (median; < 1 is faster; T timeout, C crashed, "
                 "F failed, W wrong result, S skipped)")
    cols = [max(len(n), 5) for n in names]
    lines.append("  %-*s " % (nw, "workload") + " ".join("%*s" % (w, n)
                                                       for w, n in zip(cols, names)))
    short = {TIMEOUT: "T", CRASHED: "C", FAILED: "F", WRONG: "W", SKIPPED: "S"}
    for wl in workloads:
        row = []
        for w, n in zip(cols, names):
            c = by_key.get((wl.name, n))
            if c is None:
                row.append("%*s" % (w, ""))
            elif c["status"] != OK:
                row.append("%*s" % (w, short.get(c["status"], "?")))
            else:
                row.append("%*s" % (w, fmt(c["ratio_glibc"], "%.2f")))
        lines.append("  %-*s " % (nw, wl.name) + " ".join(row))
    for label, key in (("geomean/glibc", "ratio_glibc"),
                       ("geomean/" + best_label[1:], "ratio_best_peer")):
        row = []
        for w, n in zip(cols, names):
            g = geomean([by_key[(wl.name, n)][key] for wl in workloads
                         if (wl.name, n) in by_key and by_key[(wl.name, n)]["status"] == OK])
            row.append("%*s" % (w, fmt(g, "%.2f")))
        lines.append("  %-*s " % (nw, label) + " ".join(row))
    if any(s.get("paired_lo") is not None for s in summaries):
        lines.append("")
        lines.append("== time against the fastest peer, paired by round (median of per-round "
                     "ratios; < faster, > slower, = a tie: the 95% interval holds 1; "
                     "* the fastest peer)")
        lines.append("  %-*s " % (nw, "workload") + " ".join("%*s" % (w, n)
                                                      for w, n in zip(cols, names)))
        marks = {"faster": "<", "slower": ">", "tie": "="}
        for wl in workloads:
            row = []
            for w, n in zip(cols, names):
                c = by_key.get((wl.name, n))
                if c is not None and c.get("best_peer") == n:
                    text = "*"
                elif c is None or c.get("paired_best_peer") is None:
                    text = ""
                else:
                    text = "%.2f%s" % (c["paired_best_peer"], marks.get(paired_verdict(c), " "))
                row.append("%*s" % (w, text))
            lines.append("  %-*s " % (nw, wl.name) + " ".join(row))
    base = baseline_name(summaries)
    if base:
        lines.append("")
        lines.append("== time against the baseline %s, paired by round (median of per-round "
                     "ratios [95%% interval]; < faster, > slower, = a tie)" % base)
        for wl in workloads:
            row = []
            for n in names:
                c = by_key.get((wl.name, n))
                if n == base or c is None or c.get("paired_baseline") is None:
                    continue
                row.append("%s %s%s" % (n, paired_text(c, keys=BASELINE_KEYS),
                                        {"faster": " <", "slower": " >", "tie": " ="}.get(
                                            paired_verdict(c, BASELINE_KEYS), "")))
            if row:
                lines.append("  %-*s " % (nw, wl.name) + "  ".join(row))
    for key, title, note, divisor in EXTRA_TABLES:
        end_rows = end_rss_rows(by_key, names, [wl.name for wl in workloads], key, divisor)
        if not end_rows:
            continue
        lines.append("")
        lines.append("== %s: %s" % (title.lower(), note))
        lines.append("  %-*s " % (nw, "workload") + " ".join("%*s" % (w, n)
                                                      for w, n in zip(cols, names)))
        for wl, vals in end_rows:
            lines.append("  %-*s " % (nw, wl) + " ".join(
                "%*s" % (w, fmt(v, "%.1f", "")) for w, (n, v, ratio) in zip(cols, vals)))
    return "\n".join(lines)


def print_report(log, machine, summaries, allocators, workloads, cpu_count, strace, callgrind,
                 notes, best_label="xpeer"):
    """The terminal report of a run (also printed again by --from-json)."""
    log("machine: %s, %s cores, kernel %s, %s" % (machine.get("cpu"), machine.get("cores"),
                                                 machine.get("kernel"), machine.get("glibc")))
    log(format_tables(summaries, allocators, workloads, cpu_count, best_label))
    active = [a for a in allocators if a.available]
    if strace:
        log("")
        log("== system calls / futex calls (one run under strace -f -c)")
        names = [a.name for a in active]
        cols = [max(len(n), 11) for n in names]
        log("  %-14s " % "workload" + " ".join("%*s" % (w, n) for w, n in zip(cols, names)))
        for wl in workloads:
            if not any((wl.name, n) in strace for n in names):
                continue
            row = []
            for w, n in zip(cols, names):
                st = strace.get((wl.name, n))
                text = "" if st is None else ("err" if "error" in st else
                                              "%d/%d" % (st["syscalls"], st["futex"]))
                row.append("%*s" % (w, text))
            log("  %-14s " % wl.name + " ".join(row))
    if callgrind:
        log("")
        log("== instructions per malloc/free pair (fastpath under callgrind)")
        for a in active:
            v = callgrind.get(a.name, {})
            if "instr_per_pair" in v:
                log("  %-14s " % a.name + "  ".join("%s B: %s" % kv
                                                    for kv in v["instr_per_pair"].items()))
            elif v:
                log("  %-14s error: %s" % (a.name, v.get("error")))
    for n in notes:
        log("note: " + n)
