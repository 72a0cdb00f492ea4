"""--scale N: the threaded workloads (those whose Workload names a
threads_arg) at 1, 2, 4, ... threads up to N (N itself included). Each
thread count is a workload of its own, "<name>@<threads>", run through the
ordinary runner (interleaved, checked, budgeted); this module makes those
variants and turns their summaries into throughput and speed-up per
allocator against threads: a terminal table, scale.csv, scale.json and
scale.png.

Throughput is work per second in the workload's own unit: for a workload
whose work is per thread (scale_work "thread": each thread does the same
loop) it is threads / time, for one whose work is shared among its threads
("total") 1 / time. Speed-up is throughput over that at 1 thread, so
perfect scaling gives the thread count in both cases.
"""

import copy
import csv
import json
import os

from tsbench.outcome import OK
from tsbench.report_text import fmt, fmt_ms, short_status

SCALE_COLUMNS = ["workload", "allocator", "threads", "status", "runs_ok", "time_s",
                 "time_s_min", "time_s_max", "throughput", "speedup"]


def thread_counts(n):
    """1, 2, 4, ... below n, then n: [1, 2, 4, 6] for 6."""
    if n < 1:
        raise ValueError("--scale needs at least 1 thread")
    counts = []
    t = 1
    while t < n:
        counts.append(t)
        t *= 2
    counts.append(n)
    return counts


def with_threads(args, option, threads):
    """args with `option` set to threads: its value replaced where given
    ("--threads 4" or "--threads=4"), else appended."""
    out = list(args)
    for i, a in enumerate(out):
        if a == option and i + 1 < len(out):
            out[i + 1] = str(threads)
            return out
        if a.startswith(option + "="):
            out[i] = "%s=%d" % (option, threads)
            return out
    return out + [option, str(threads)]


def scale_variants(workloads, max_threads, quick, notes):
    """One Workload per (threaded workload, thread count), named
    "<name>@<threads>", in order of workload then threads. Workloads without
    a thread argument are left out, with a note."""
    variants = []
    left_out = [w.name for w in workloads if not w.threads_arg]
    if left_out:
        notes.append("--scale runs only workloads with a thread argument; left out: "
                     + ", ".join(left_out))
    for wl in workloads:
        if not wl.threads_arg:
            continue
        base = wl.quick if quick else wl.args
        for t in thread_counts(max_threads):
            v = copy.copy(wl)
            v.name = "%s@%d" % (wl.name, t)
            v.args = v.quick = with_threads(base, wl.threads_arg, t)
            v.scale_base = wl.name
            v.scale_threads = t
            variants.append(v)
    return variants


def scale_rows(variants, summaries, names):
    """One row (a dict of SCALE_COLUMNS) per variant and allocator that ran,
    with throughput and speed-up over the same allocator at 1 thread."""
    by_key = {(s["workload"], s["allocator"]): s for s in summaries}
    rows = []
    for v in variants:
        for n in names:
            s = by_key.get((v.name, n))
            if s is None:
                continue
            t = v.scale_threads
            ok = s["status"] == OK and s.get("time_s")
            work = t if v.scale_work == "thread" else 1
            rows.append({"workload": v.scale_base, "allocator": n, "threads": t,
                         "status": s["status"], "runs_ok": s.get("runs_ok"),
                         "time_s": s.get("time_s") if ok else None,
                         "time_s_min": s.get("time_s_min") if ok else None,
                         "time_s_max": s.get("time_s_max") if ok else None,
                         "throughput": work / s["time_s"] if ok else None,
                         "speedup": None})
    one = {(r["workload"], r["allocator"]): r["throughput"] for r in rows if r["threads"] == 1}
    for r in rows:
        base = one.get((r["workload"], r["allocator"]))
        if base and r["throughput"] is not None:
            r["speedup"] = r["throughput"] / base
    return rows


def scale_table(rows, names, cpu_count):
    """The terminal table: per workload, a line per thread count with each
    allocator's median time and speed-up over 1 thread."""
    lines = []
    wls = []
    for r in rows:
        if r["workload"] not in wls:
            wls.append(r["workload"])
    width = max([len(n) for n in names] + [16])
    for wl in wls:
        mine = {(r["threads"], r["allocator"]): r for r in rows if r["workload"] == wl}
        counts = sorted({t for t, _ in mine})
        head = "== scaling of %s: median time ms (speed-up over 1 thread)" % wl
        if counts and counts[-1] > cpu_count:
            head += " [above %d threads: oversubscribed]" % cpu_count
        lines.append(head)
        lines.append("  %7s " % "threads" + " ".join("%*s" % (width, n) for n in names))
        for t in counts:
            cells = []
            for n in names:
                r = mine.get((t, n))
                if r is None:
                    text = ""
                elif r["status"] != OK:
                    text = short_status(r["status"])
                else:
                    text = "%s (%s)" % (fmt_ms(r["time_s"]), fmt(r["speedup"], "%.2f"))
                cells.append("%*s" % (width, text))
            lines.append("  %7d " % t + " ".join(cells))
        lines.append("")
    return "\n".join(lines).rstrip("\n")


def write_scale_files(outdir, rows):
    """scale.csv and scale.json in outdir; returns their paths."""
    csv_path = os.path.join(outdir, "scale.csv")
    with open(csv_path, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=SCALE_COLUMNS)
        w.writeheader()
        for r in rows:
            w.writerow({k: "" if r.get(k) is None else r[k] for k in SCALE_COLUMNS})
    json_path = os.path.join(outdir, "scale.json")
    with open(json_path, "w") as f:
        json.dump({"columns": SCALE_COLUMNS, "rows": rows}, f, indent=1)
    return csv_path, json_path


def scale_plot(outdir, rows, names, cpu_count=None):
    """scale.png in outdir: speed-up against threads, one panel per
    workload, one line per allocator, the ideal dashed, the core count
    dotted when fewer threads than shown. None without matplotlib or rows."""
    wls = []
    for r in rows:
        if r["workload"] not in wls:
            wls.append(r["workload"])
    if not wls:
        return None
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    cols = min(3, len(wls))
    nrows = (len(wls) + cols - 1) // cols
    fig, axes = plt.subplots(nrows, cols, figsize=(4.5 * cols, 3.6 * nrows), squeeze=False)
    try:
        for i, wl in enumerate(wls):
            ax = axes[i // cols][i % cols]
            counts = sorted({r["threads"] for r in rows if r["workload"] == wl})
            ax.plot(counts, counts, linestyle="--", color="grey", linewidth=0.8, label="ideal")
            if cpu_count and counts[-1] > cpu_count:
                ax.axvline(cpu_count, linestyle=":", color="grey", linewidth=0.8,
                           label="%d cores" % cpu_count)
            for n in names:
                pts = sorted((r["threads"], r["speedup"]) for r in rows
                             if r["workload"] == wl and r["allocator"] == n
                             and r["speedup"] is not None)
                if pts:
                    ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", label=n)
            ax.set_xscale("log", base=2)
            ax.set_xticks(counts)
            ax.set_xticklabels([str(c) for c in counts])
            ax.set_title(wl)
            ax.set_xlabel("threads")
            ax.set_ylabel("speed-up over 1 thread")
            ax.grid(alpha=0.3)
        for j in range(len(wls), nrows * cols):
            axes[j // cols][j % cols].axis("off")
        axes[0][0].legend(fontsize=7)
        path = os.path.join(outdir, "scale.png")
        fig.savefig(path, dpi=90, bbox_inches="tight")
        return path
    finally:
        plt.close(fig)


def scale_note(max_threads, cpu_count):
    """The note for a --scale above the core count, or None."""
    if max_threads <= cpu_count:
        return None
    return ("--scale %d is above the %d cores: the larger thread counts oversubscribe them, so "
            "their speed-up says how an allocator copes with time-shared threads, not how it "
            "scales" % (max_threads, cpu_count))


def report_scale(outdir, variants, summaries, allocators, cpu_count, plots=True):
    """What --scale adds to a run's outputs: scale.csv, scale.json and
    scale.png. Returns (the terminal table, the files written, {title: png}
    for the HTML report)."""
    names = [a.name for a in allocators if a.available]
    rows = scale_rows(variants, summaries, names)
    paths = list(write_scale_files(outdir, rows))
    png = scale_plot(outdir, rows, names, cpu_count) if plots else None
    if png:
        paths.append(png)
    return scale_table(rows, names, cpu_count), paths, \
        ({"speed-up over 1 thread (--scale)": png} if png else {})
